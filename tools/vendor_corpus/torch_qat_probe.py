"""Quantized PyTorch probe (eager-mode static quantization, traced), built and run by RKNN-Toolkit2.

A maintainer tool for the ``pytorch/resnet18_qat`` comparison (docs/vendor-examples.md): a
small MobileNetV1-like net (conv 3x3/2, depthwise-separable blocks with ReLU, a residual add)
quantized with PyTorch's own flow (``QuantStub`` / ``DeQuantStub``, fused Conv+BN+ReLU,
calibrated on random images, ``convert``), traced and saved as TorchScript.  RKNN-Toolkit2
loads it (``load_pytorch``, ``build(do_quantization=False)``, rk3566) and its simulator runs it;
the output is the last block's feature map (dequantized, float), so the comparison is per
element.  Run it in the vendor-toolkit venv (its torch, 2.4)::

    PYTHONPATH=. /var/tmp/rkt/bin/python tools/vendor_corpus/torch_qat_probe.py --out /tmp/tq

``--blocks N`` keeps N of the three blocks, ``--no-skip`` drops the final residual 1x1 conv and
quantized Add (docs/toolkit-loaders.md has the per-depth agreement); ``--conv-add`` builds
:func:`make_conv_add` instead (the vendor folds the Add into the conv, as
``optimize.fold_input_residual`` now does).  Saves ``model.pt``, ``x.npy`` (NCHW float
input), ``torch.npy`` (PyTorch's quantized output), ``vendor.npy`` (the simulator's) and
``grid.json`` (the output's scale and zero point).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

SIZE = 32


def make_model(engine: str, seed: int = 5, blocks: int = 3, skip: bool = True):
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
            layers = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
            cin = 16
            for cout, stride in ((32, 1), (32, 2), (64, 1))[:blocks]:
                layers += [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU(),
                           nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
                cin = cout
            self.body = nn.Sequential(*layers)
            self.skip = nn.Conv2d(cin, cin, 1) if skip else None
            self.add = torch.ao.nn.quantized.FloatFunctional()

        def forward(self, x):
            y = self.body(self.quant(x))
            return self.dequant(self.add.add(y, self.skip(y)) if self.skip is not None else y)

    net = Net()
    rng = np.random.default_rng(seed)
    images = [torch.from_numpy(rng.uniform(-1, 1, (4, 3, SIZE, SIZE)).astype(np.float32)) for _ in range(4)]
    with torch.no_grad():  # batch-norm statistics from the images: activations stay in range
        net.train()
        for _ in range(3):
            for b in images:
                net(b)
    net.eval()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.5)
    names = [n for n, _ in net.body.named_children()]
    groups = [[names[i], names[i + 1], names[i + 2]] for i in range(0, len(names), 3)]
    torch.backends.quantized.engine = engine
    net.qconfig = torch.ao.quantization.get_default_qconfig(engine)
    torch.ao.quantization.fuse_modules(net.body, groups, inplace=True)
    torch.ao.quantization.prepare(net, inplace=True)
    with torch.no_grad():
        for b in images:
            net(b)
    torch.ao.quantization.convert(net, inplace=True)
    return net


def make_conv_add(engine: str, seed: int = 0):
    """``x -> QuantStub -> add(x, conv1x1(x)) -> DeQuantStub`` (16 channels, 8x8): the vendor
    folds the Add into the conv (its file holds one ``conv_weight_new``: ``W + I``, quantized per
    output channel from each row's min/max with 0 included, codes spanning [-128, 127]); the
    output is then one requantization of the folded conv, without the conv's own grid."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = torch.ao.quantization.QuantStub(), torch.ao.quantization.DeQuantStub()
            self.conv = nn.Conv2d(16, 16, 1)
            self.add = torch.ao.nn.quantized.FloatFunctional()

        def forward(self, x):
            x = self.quant(x)
            return self.dequant(self.add.add(x, self.conv(x)))

    net = Net().eval()
    torch.backends.quantized.engine = engine
    net.qconfig = torch.ao.quantization.get_default_qconfig(engine)
    torch.ao.quantization.prepare(net, inplace=True)
    rng = np.random.default_rng(1)
    with torch.no_grad():
        for _ in range(4):
            net(torch.from_numpy(rng.uniform(-1, 3, (1, 16, 8, 8)).astype(np.float32)))
    torch.ao.quantization.convert(net, inplace=True)
    return net


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--platform", default="rk3566")
    ap.add_argument("--engine", default="qnnpack", choices=("qnnpack", "fbgemm"))
    ap.add_argument("--blocks", type=int, default=3, help="depthwise-separable blocks after the stem (0-3)")
    ap.add_argument("--no-skip", action="store_true", help="no residual 1x1 conv + add at the end")
    ap.add_argument("--conv-add", action="store_true",
                    help="instead: add(x, conv1x1(x)) on a 16x8x8 input (see make_conv_add)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.chdir(args.out)
    import torch

    net = make_conv_add(args.engine) if args.conv_add else make_model(args.engine, blocks=args.blocks,
                                                                        skip=not args.no_skip)
    shape = (1, 16, 8, 8) if args.conv_add else (1, 3, SIZE, SIZE)
    x = np.random.default_rng(11).uniform(-1, 1, shape).astype(np.float32)
    with torch.no_grad():
        traced = torch.jit.trace(net, torch.from_numpy(x))
        ref = traced(torch.from_numpy(x)).numpy()
    traced.save("model.pt")
    np.save("x.npy", x)
    np.save("torch.npy", ref)
    last = net.add if args.conv_add or not args.no_skip else [m for m in net.body.modules() if hasattr(m, "scale")][-1]
    scale, zp = float(last.scale), int(last.zero_point)
    with open("grid.json", "w") as f:
        json.dump({"scale": scale, "zero_point": zp}, f)

    from rknn.api import RKNN

    r = RKNN(verbose=False)
    r.config(target_platform=args.platform)
    assert r.load_pytorch("model.pt", input_size_list=[list(shape)]) == 0
    assert r.build(do_quantization=False) == 0
    assert r.export_rknn("model.rknn") == 0
    assert r.init_runtime() == 0
    (y,) = r.inference(inputs=[x], data_format="nchw")
    np.save("vendor.npy", y)
    r.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
