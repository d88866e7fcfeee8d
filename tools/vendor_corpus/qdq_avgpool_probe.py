"""int8 AveragePool rounding probe: a QDQ ONNX ``AveragePool 2x2/2`` on known codes, built and
run by RKNN-Toolkit2 (a maintainer tool).

Writes ``avgp.onnx`` (``x -> Q/DQ -> AveragePool -> Q/DQ -> y``, one uint8 grid, 1x16x32x32),
``codes.npy`` (the input codes), ``x.npy`` (their real values), builds it with RKNN-Toolkit2
(``do_quantization=False``, rk3566) and saves the simulator's output as ``vendor.npy``; then
(``--analyse``, in any Python with numpy) compares it with candidate arithmetics.  Found
(2026-12-04): the vendor dequantizes to float32 ``(q - zp) * s``, sums each window
sequentially in row-major tap order (``((t00 + t01) + t10) + t11``), multiplies by 1/4 and
divides by ``s`` (float32), rounding half to even: equal on all 4,096 values, 988 of them
ties.  rknnlite's separable order (``(t00 + t10) + (t01 + t11)``) gave 95.7 %::

    PYTHONPATH=. /var/tmp/rkt/bin/python tools/vendor_corpus/qdq_avgpool_probe.py --out /tmp/avgp
    python tools/vendor_corpus/qdq_avgpool_probe.py --out /tmp/avgp --analyse

``--analyse`` reads that default 2x2/2 run.  Other pools (``--pool k,stride,pad``,
``--count-include-pad``, ``--ceil``, ``--shape``): with 3x3/2 pad 1 the border windows of 4
and 6 real taps showed that the sum is DIVIDED by the count in float32 (99.7 % multiplying by
its reciprocal); 2x2/2 pad 1, 4x4/4 and count_include_pad=1 then equal too (the runtime's
integer-grid AveragePool does this since).  ``--pool global``: a GlobalAveragePool over 7x7 is
one window (exact); over 8x8 the vendor's compiler writes two depthwise convs (7x7/7 pad 3,
all-127 int8 weights, then 2x2) requantized in between: a float emulation of that with the
intermediate on the output's grid gives 98.5 %, rknnlite's single window 83 % (one step).
The exported ``avgp.rknn`` can be read with ``rkdump.py``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

S, Z = 0.0388743, 73  # uint8 zero point 73: int8 -55, no symmetric grid


def build(out: str, shape, pool: str, include_pad: bool, ceil: bool) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from rknn.api import RKNN

    def pair(x, y, tag):
        return [helper.make_node("QuantizeLinear", [x, "s", "z"], [f"{tag}_q"]),
                helper.make_node("DequantizeLinear", [f"{tag}_q", "s", "z"], [y])]

    if pool == "global":
        node = helper.make_node("GlobalAveragePool", ["xd"], ["p"])
    else:
        k, st, pad = (int(v) for v in pool.split(","))
        node = helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[k, k], strides=[st, st],
                                pads=[pad] * 4, count_include_pad=int(include_pad), ceil_mode=int(ceil))
    nodes = pair("x", "xd", "in") + [node] + pair("p", "y", "out")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.float32(S), "s"), numpy_helper.from_array(np.uint8(Z), "z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, os.path.join(out, "avgp.onnx"))
    codes = np.random.default_rng(3).integers(0, 256, shape)
    x = ((codes - Z) * np.float32(S)).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "codes.npy"), codes)
    r = RKNN()
    r.config(target_platform="rk3566")
    assert r.load_onnx(os.path.join(out, "avgp.onnx")) == 0
    assert r.build(do_quantization=False) == 0
    assert r.export_rknn(os.path.join(out, "avgp.rknn")) == 0
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
    ap.add_argument("--pool", default="2,2,0",
                    help="'kernel,stride,pad' of a square AveragePool (default 2,2,0), or 'global'")
    ap.add_argument("--count-include-pad", action="store_true")
    ap.add_argument("--shape", default="1,16,32,32", help="the input's NCHW shape (default 1,16,32,32)")
    ap.add_argument("--ceil", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.analyse:
        analyse(args.out)
    else:
        build(args.out, tuple(int(v) for v in args.shape.split(",")), args.pool, args.count_include_pad, args.ceil)
    return 0


if __name__ == "__main__":
    sys.exit(main())
