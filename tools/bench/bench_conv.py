#!/usr/bin/env python3
"""Conv kernel speed, single-threaded, side by side with onnxruntime.

    python tools/bench/bench_conv.py [--repeat 10] [--rounds 5] [--only SUBSTRING] [--resnet50 | --densenet121]
                                     [--clock cpu]

Times ResNet-50-like Conv layers (plus MobileNet depthwise layers), or with
``--resnet50`` / ``--densenet121`` every Conv layer of that network weighted by its count
(``--clock cpu``: the calling thread's CPU time instead of wall time, for a loaded machine), for:
  * rknnlite: the software backend's Conv kernel as the executor calls it (``prepare``
    with constant weights and bias, then writing into a preallocated output);
  * onnxruntime: a one-node ONNX model (weights as initializers), CPU provider,
    ``intra_op_num_threads=1``, ``inter_op_num_threads=1``, default graph
    optimisations, output bound to a preallocated buffer (IOBinding).
Both run with BLAS limited to one thread (threadpoolctl, around the timed region
only).  Caveat: onnxruntime runs a lone Conv in its blocked NCHWc layout with a reorder
from and back to NCHW around it, which a whole model does once; so onnxruntime is slower
here than inside a network (resnet50's 1x1 layers: ~1.2 ms here, ~0.91-0.95 ms in the
model's own profile), and a tie here is a loss in the model.  Compare per layer inside
the model (``InitFlag.COLLECT_PERF_MASK`` / ``SessionOptions.enable_profiling``) too.  Blocks of runs alternate between the two; the table reports the median in ms, the
ratio rknnlite / onnxruntime (<= 1.0 means rknnlite is as fast or faster), and
rknnlite's GFLOP/s.  Needs ``pip install onnx onnxruntime threadpoolctl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, ort_one_node  # noqa: E402
from rknnlite.backends.software.ops import KERNELS  # noqa: E402

#: (name, input NCHW, (M, kh, kw), stride, pad, group)
CONFIGS = [
    ("stem 7x7/2 3->64 @224", (1, 3, 224, 224), (64, 7, 7), 2, 3, 1),
    ("1x1 64->64 @56", (1, 64, 56, 56), (64, 1, 1), 1, 0, 1),
    ("3x3 64->64 @56", (1, 64, 56, 56), (64, 3, 3), 1, 1, 1),
    ("1x1 64->256 @56", (1, 64, 56, 56), (256, 1, 1), 1, 0, 1),
    ("1x1 256->64 @56", (1, 256, 56, 56), (64, 1, 1), 1, 0, 1),
    ("1x1 256->128 @56", (1, 256, 56, 56), (128, 1, 1), 1, 0, 1),
    ("3x3/2 128->128 @56", (1, 128, 56, 56), (128, 3, 3), 2, 1, 1),
    ("1x1/2 256->512 @56", (1, 256, 56, 56), (512, 1, 1), 2, 0, 1),
    ("3x3 128->128 @28", (1, 128, 28, 28), (128, 3, 3), 1, 1, 1),
    ("1x1 128->512 @28", (1, 128, 28, 28), (512, 1, 1), 1, 0, 1),
    ("1x1 512->128 @28", (1, 512, 28, 28), (128, 1, 1), 1, 0, 1),
    ("3x3 256->256 @14", (1, 256, 14, 14), (256, 3, 3), 1, 1, 1),
    ("1x1 1024->256 @14", (1, 1024, 14, 14), (256, 1, 1), 1, 0, 1),
    ("1x1 256->1024 @14", (1, 256, 14, 14), (1024, 1, 1), 1, 0, 1),
    ("3x3 512->512 @7", (1, 512, 7, 7), (512, 3, 3), 1, 1, 1),
    ("1x1 2048->512 @7", (1, 2048, 7, 7), (512, 1, 1), 1, 0, 1),
    ("1x1 512->2048 @7", (1, 512, 7, 7), (2048, 1, 1), 1, 0, 1),
    ("dw 3x3 32 @112", (1, 32, 112, 112), (32, 3, 3), 1, 1, 32),
    ("dw 3x3/2 96 @112", (1, 96, 112, 112), (96, 3, 3), 2, 1, 96),
]


def resnet50_layers():
    """Every Conv of ResNet-50 v1.5 (stride on the 3x3; batch 1, 224x224) as
    ``(name, input NCHW, (M, kh, kw), stride, pad, group, count)``, identical layers merged."""
    layers = {}

    def add(c, hw, m, k, s):
        key = (c, hw, m, k, s)
        layers[key] = layers.get(key, 0) + 1

    add(3, 224, 64, 7, 2)
    c, hw = 64, 56
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            add(c, hw, width, 1, 1)
            add(width, hw, width, 3, s)
            out_hw = hw // s
            add(width, out_hw, 4 * width, 1, 1)
            if b == 0:
                add(c, hw, 4 * width, 1, s)  # projection shortcut
            c, hw = 4 * width, out_hw
    return [(f"{k}x{k}{'/2' if s == 2 else ''} {c}->{m} @{hw}", (1, c, hw, hw), (m, k, k), s, k // 2, 1, n)
            for (c, hw, m, k, s), n in layers.items()]


def densenet121_layers():
    """Every Conv of DenseNet-121 (growth 32, bottleneck 128; batch 1, 224x224) as
    ``(name, input NCHW, (M, kh, kw), stride, pad, group, count)``, identical layers merged."""
    layers = {}

    def add(c, hw, m, k, s):
        key = (c, hw, m, k, s)
        layers[key] = layers.get(key, 0) + 1

    add(3, 224, 64, 7, 2)
    c, hw = 64, 56
    for i, blocks in enumerate((6, 12, 24, 16)):
        for _ in range(blocks):
            add(c, hw, 128, 1, 1)
            add(128, hw, 32, 3, 1)
            c += 32
        if i < 3:
            add(c, hw, c // 2, 1, 1)  # transition (then 2x2 average pooling)
            c, hw = c // 2, hw // 2
    return [(f"{k}x{k}{'/2' if s == 2 else ''} {c}->{m} @{hw}", (1, c, hw, hw), (m, k, k), s, k // 2, 1, n)
            for (c, hw, m, k, s), n in layers.items()]


def ort_runner(x, w, b, attrs):
    """A callable running the one-node Conv model in onnxruntime, output bound in advance."""
    return ort_one_node("Conv", x, attrs, [("w", w), ("b", b)], opset=17)


def rknn_runner(x, w, b, attrs, out_shape):
    """A callable running rknnlite's Conv kernel as the executor does (prepared, out= given)."""
    spec = KERNELS["Conv"]
    prepared = spec.prepare(dict(attrs, _opset=17), [None, w, b])
    out = [np.empty(out_shape, np.float32)]
    return (lambda: spec.fn([x, w, b], prepared, out=out)), out[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per block")
    ap.add_argument("--rounds", type=int, default=5, help="blocks per runtime, alternating (median of all runs)")
    ap.add_argument("--only", default="", help="run only configurations whose name contains this")
    ap.add_argument("--resnet50", action="store_true",
                    help="every Conv layer of ResNet-50 v1.5 instead (times weighted by how often each occurs)")
    ap.add_argument("--densenet121", action="store_true",
                    help="every Conv layer of DenseNet-121 instead (times weighted by how often each occurs)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or this thread's CPU time (leaves out waiting for a core on a loaded machine)")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.resnet50:
        configs = resnet50_layers()
    elif args.densenet121:
        configs = densenet121_layers()
    else:
        configs = [c + (1,) for c in CONFIGS]
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    rows = []
    total_r = total_o = 0.0
    for name, xs, (m, kh, kw), s, p, group, count in configs:
        if args.only not in name:
            continue
        x = rng.standard_normal(xs, dtype=np.float32)
        w = (rng.standard_normal((m, xs[1] // group, kh, kw), dtype=np.float32) * 0.1)
        b = rng.standard_normal(m, dtype=np.float32)
        attrs = {"kernel_shape": [kh, kw], "strides": [s, s], "pads": [p] * 4, "group": group}
        with threadpool_limits(limits=1):
            run_o, y_o = ort_runner(x, w, b, attrs)
            run_o()
            run_r, y_r = rknn_runner(x, w, b, attrs, y_o.shape)
            run_r()
            err = float(np.abs(y_r - y_o).max() / max(1e-6, np.abs(y_o).max()))
            t_o, t_r = [], []
            for _ in range(args.rounds):
                # blocks of runs, alternating between the two runtimes
                for run, times in ((run_o, t_o), (run_r, t_r)):
                    run()
                    for _ in range(args.repeat):
                        t0 = clock()
                        run()
                        times.append(clock() - t0)
        mo, mr = statistics.median(t_o) * 1e3, statistics.median(t_r) * 1e3
        total_o += mo * count
        total_r += mr * count
        flops = 2.0 * y_o.size * (xs[1] // group) * kh * kw
        rows.append((name, count, mr, mo, mr / mo, flops / mr / 1e6, err))
    print(machine())
    print("| Conv layer | count | rknnlite ms | onnxruntime ms | ratio | rknnlite GFLOP/s | max rel. diff |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, count, mr, mo, ratio, gf, err in rows:
        print(f"| {name} | {count} | {mr:.3f} | {mo:.3f} | {ratio:.2f} | {gf:.1f} | {err:.1e} |")
    if rows:
        print(f"| **total (x count)** | | {total_r:.3f} | {total_o:.3f} | {total_r / total_o:.2f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
