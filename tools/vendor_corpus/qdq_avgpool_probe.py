"""int8 AveragePool rounding probe: a QDQ ONNX ``AveragePool 2x2/2`` on known codes, built and
run by RKNN-Toolkit2 (a maintainer tool).

Writes ``avgp.onnx`` (``x -> Q/DQ -> AveragePool -> Q/DQ -> y``, one uint8 grid, 1x16x32x32),
``codes.npy`` (the input codes), ``x.npy`` (their real values), builds it with RKNN-Toolkit2
(``do_quantization=False``, rk3566) and saves the simulator's output as ``vendor.npy``; then
(``--analyse``, in any Python with numpy) compares it with candidate arithmetics.  Found
(2026-12-04): the vendor dequantizes to float32 ``(q - zp) * s``, sums each window
sequentially in row-major tap order (``((t00 + t01) + t10) + t11``), multiplies by 1/4 and
divides by ``s`` (float32), rounding half to even: equal on all 4,096 values, 988 of them
ties.  rknnlite's separable order (``(t00 + t10) + (t01 + t11)``) gives 95.7 %::

    PYTHONPATH=. /var/tmp/rkt/bin/python tools/vendor_corpus/qdq_avgpool_probe.py --out /tmp/avgp
    python tools/vendor_corpus/qdq_avgpool_probe.py --out /tmp/avgp --analyse
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

S, Z = 0.0388743, 73  # uint8 zero point 73: int8 -55, no symmetric grid


def build(out: str) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from rknn.api import RKNN

    def pair(x, y, tag):
        return [helper.make_node("QuantizeLinear", [x, "s", "z"], [f"{tag}_q"]),
                helper.make_node("DequantizeLinear", [f"{tag}_q", "s", "z"], [y])]

    nodes = pair("x", "xd", "in") + [helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[2, 2],
                                                      strides=[2, 2])] + pair("p", "y", "out")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
                          [numpy_helper.from_array(np.float32(S), "s"), numpy_helper.from_array(np.uint8(Z), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, os.path.join(out, "avgp.onnx"))
    codes = np.random.default_rng(3).integers(0, 256, (1, 16, 32, 32))
    x = ((codes - Z) * np.float32(S)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "codes.npy"), codes)
    r = RKNN()
    r.config(target_platform="rk3566")
    assert r.load_onnx(os.path.join(out, "avgp.onnx")) == 0
    assert r.build(do_quantization=False) == 0
    assert r.init_runtime() == 0
    (y,) = r.inference(inputs=[x], data_format="nchw")
    np.save(os.path.join(out, "vendor.npy"), y)


def analyse(out: str) -> None:
    c = np.load(os.path.join(out, "codes.npy")) - Z
    vq = np.rint(np.load(os.path.join(out, "vendor.npy")).astype(np.float64) / np.float32(S))
    r = (c.astype(np.float32) * np.float32(S)).astype(np.float32).reshape(1, 16, 16, 2, 16, 2)
    t00, t01, t10, t11 = r[:, :, :, 0, :, 0], r[:, :, :, 0, :, 1], r[:, :, :, 1, :, 0], r[:, :, :, 1, :, 1]
    ties = (c.reshape(1, 16, 16, 2, 16, 2).sum((3, 5)) % 4) == 2
    for name, total in (("row-major sequential", ((t00 + t01) + t10) + t11),
                        ("separable (rknnlite)", (t00 + t10) + (t01 + t11))):
        q = np.rint((total * np.float32(0.25)).astype(np.float32) / np.float32(S))
        print(f"{name}: equal {(q == vq).mean():.4f}, on ties {(q == vq)[ties].mean():.4f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--analyse", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.analyse:
        analyse(args.out)
    else:
        build(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
