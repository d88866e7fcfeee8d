"""Export real architectures from torchvision's own definitions to ONNX, for vendor builds.

The corpus's models (``models.py``) are this project's small graphs; users hold ResNets,
MobileNets, EfficientNets and DeepLab segmenters as their authors defined them.  This tool writes
``DIR/<name>.onnx`` for each architecture, from ``torchvision.models`` with seeded random weights
(``weights=None``: no download) and batch-norm statistics measured on random images, at one input
size; ``build_corpus.py --onnx-dir DIR`` (in the toolkit's venv) then builds fp16 and int8 vendor files beside them and runs the simulator, and
``evidence.py --markdown DIR`` says, file by file, what runs off-board and how close::

    python tools/vendor_corpus/torchvision_export.py DIR [--size 128] [--only resnet18 ...]
    /var/tmp/rkt/bin/python tools/vendor_corpus/build_corpus.py --onnx-dir DIR
    python tools/vendor_corpus/evidence.py --markdown DIR

Needs torch and torchvision (the loaders' extra); the files are large and stay outside the
repository (docs/vendor-offboard.md, "Real architectures", has the table).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SEED = 0
OPSET = 13
#: name -> (torchvision builder, keyword arguments): classifiers and a segmenter
ARCHITECTURES = {
    "resnet18": ("resnet18", {}),
    "resnet50": ("resnet50", {}),
    "mobilenet_v2": ("mobilenet_v2", {}),
    "mobilenet_v3_large": ("mobilenet_v3_large", {}),
    "efficientnet_b0": ("efficientnet_b0", {}),
    "shufflenet_v2_x1_0": ("shufflenet_v2_x1_0", {}),
    "deeplabv3_mobilenet_v3_large": ("segmentation.deeplabv3_mobilenet_v3_large", {"weights_backbone": None}),
}


def _logits(model):
    """A segmenter whose ``{"out": logits}`` becomes its single output (what an export keeps)."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"]

    return Logits()


def _recalibrate_batch_norm(model, size: int, batches: int = 4) -> None:
    """Batch-norm statistics measured on random images as the corpus normalises them (train-mode
    passes, cumulative averages; ``models.IMAGE_MEAN``/``IMAGE_STD``, which ``build_corpus.py``
    configures): with the untrained defaults (mean 0, variance 1) activations fade through deep
    nets (EfficientNet-B0's logits are ~1e-14) and every output would match trivially; measured on
    other inputs than the simulator's, they blow up to chaotic float16 values."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from models import IMAGE_MEAN, IMAGE_STD

    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    generator = torch.Generator().manual_seed(SEED)
    mean, std = (torch.tensor(v).reshape(1, 3, 1, 1) for v in (IMAGE_MEAN, IMAGE_STD))
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model((torch.rand(8, 3, size, size, generator=generator) * 255 - mean) / std)


def export(name: str, folder: Path, size: int) -> Path:
    """Write ``folder/<name>.onnx``: torchvision's ``name`` with seeded weights, in eval mode."""
    import torch
    import torchvision

    builder, kwargs = ARCHITECTURES[name]
    make = torchvision.models
    for part in builder.split("."):
        make = getattr(make, part)
    torch.manual_seed(SEED)
    model = make(weights=None, **kwargs)
    if builder.startswith("segmentation."):
        model = _logits(model)
    _recalibrate_batch_norm(model, size)
    model.eval()
    path = folder / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(model, torch.zeros(1, 3, size, size), str(path), opset_version=OPSET,
                          input_names=["x"], output_names=["y"], dynamo=False)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=128, help="input height and width (default: %(default)s)")
    parser.add_argument("--only", nargs="*", choices=sorted(ARCHITECTURES), help="a subset of the architectures")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or ARCHITECTURES:
        print(export(name, args.out, args.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
