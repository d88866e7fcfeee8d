#!/usr/bin/env python3
"""Pooling kernel speed, single-threaded, side by side with onnxruntime.

    python tools/bench/bench_pool.py [--repeat 20] [--rounds 5] [--only SUBSTRING] [--threads N]

Times the 2-D float32 MaxPool / AveragePool / global pool configurations of the onnx
package's light models (ResNet-50, DenseNet-121, Inception v1/v2, VGG-19, ShuffleNet,
SqueezeNet, AlexNet, ZFNet) plus ceil_mode and count_include_pad variants, for:
  * rknnlite: the software backend's kernel as the executor calls it (``prepare``
    once, then writing into a preallocated output, one output for MaxPool);
  * onnxruntime: a one-node ONNX model, CPU provider, ``intra_op_num_threads=1``,
    ``inter_op_num_threads=1``, default graph optimisations, output bound to a
    preallocated buffer (IOBinding).
BLAS is limited to one thread (threadpoolctl) around the timed part.  Blocks of runs
alternate between the two; the table reports the median in microseconds and the ratio
rknnlite / onnxruntime (<= 1.0 means rknnlite is as fast or faster).  With
``--threads N`` (N > 1) an extra column times rknnlite with N worker threads
(``parallel.using``).  Needs ``pip install onnx onnxruntime threadpoolctl``.
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
from rknnlite.backends.software.parallel import WorkerPool, using  # noqa: E402


def _mp(k, s, p=(0, 0, 0, 0), **extra):
    return dict(kernel_shape=[k, k], strides=[s, s], pads=list(p), **extra)


P1 = (1, 1, 1, 1)
P_END = (0, 0, 1, 1)  # Caffe's ceil-mode pooling, converted to explicit end padding

#: (name, op, input NCHW, attrs, how many times the light models use it)
CONFIGS = [
    ("MaxPool 3x3/2 p1 64@112 (resnet50, densenet121)", "MaxPool", (1, 64, 112, 112), _mp(3, 2, P1), 2),
    ("MaxPool 3x3/2 p1 24@112 (shufflenet)", "MaxPool", (1, 24, 112, 112), _mp(3, 2, P1), 1),
    ("MaxPool 3x3/2 64@112 (inception_v1)", "MaxPool", (1, 64, 112, 112), _mp(3, 2), 1),
    ("MaxPool 3x3/2 64@112 ceil", "MaxPool", (1, 64, 112, 112), _mp(3, 2, ceil_mode=1), 0),
    ("MaxPool 3x3/2 pE 64@112 (inception_v2)", "MaxPool", (1, 64, 112, 112), _mp(3, 2, P_END), 1),
    ("MaxPool 3x3/2 pE 192@56 (inception_v2)", "MaxPool", (1, 192, 56, 56), _mp(3, 2, P_END), 1),
    ("MaxPool 3x3/2 pE 320@28 (inception_v2)", "MaxPool", (1, 320, 28, 28), _mp(3, 2, P_END), 1),
    ("MaxPool 3x3/2 pE 576@14 (inception_v2)", "MaxPool", (1, 576, 14, 14), _mp(3, 2, P_END), 1),
    ("MaxPool 3x3/2 64@111 (squeezenet)", "MaxPool", (1, 64, 111, 111), _mp(3, 2), 1),
    ("MaxPool 3x3/2 128@55 (squeezenet)", "MaxPool", (1, 128, 55, 55), _mp(3, 2), 1),
    ("MaxPool 3x3/2 256@27 (squeezenet)", "MaxPool", (1, 256, 27, 27), _mp(3, 2), 1),
    ("MaxPool 3x3/2 ceil 256@26", "MaxPool", (1, 256, 26, 26), _mp(3, 2, ceil_mode=1), 0),
    ("MaxPool 3x3/1 p1 192@27 (inception_v1)", "MaxPool", (1, 192, 27, 27), _mp(3, 1, P1), 1),
    ("MaxPool 3x3/1 p1 512@13 (inception_v1)", "MaxPool", (1, 512, 13, 13), _mp(3, 1, P1), 3),
    ("MaxPool 3x3/1 p1 1024@7 (inception_v2)", "MaxPool", (1, 1024, 7, 7), _mp(3, 1, P1), 1),
    ("MaxPool 2x2/2 64@224 (vgg19)", "MaxPool", (1, 64, 224, 224), _mp(2, 2), 1),
    ("MaxPool 2x2/2 256@56 (vgg19)", "MaxPool", (1, 256, 56, 56), _mp(2, 2), 1),
    ("MaxPool 2x2/2 512@14 (vgg19)", "MaxPool", (1, 512, 14, 14), _mp(2, 2), 1),
    ("AvgPool 3x3/1 p1 192@28 (inception_v2)", "AveragePool", (1, 192, 28, 28), _mp(3, 1, P1), 1),
    ("AvgPool 3x3/1 p1 576@14 (inception_v2)", "AveragePool", (1, 576, 14, 14), _mp(3, 1, P1), 4),
    ("AvgPool 3x3/1 p1 1024@7 (inception_v2)", "AveragePool", (1, 1024, 7, 7), _mp(3, 1, P1), 1),
    ("AvgPool 3x3/1 p1 cip 576@14", "AveragePool", (1, 576, 14, 14), _mp(3, 1, P1, count_include_pad=1), 0),
    ("AvgPool 3x3/2 p1 24@56 (shufflenet)", "AveragePool", (1, 24, 56, 56), _mp(3, 2, P1), 1),
    ("AvgPool 3x3/2 p1 136@28 (shufflenet)", "AveragePool", (1, 136, 28, 28), _mp(3, 2, P1), 1),
    ("AvgPool 3x3/2 p1 272@14 (shufflenet)", "AveragePool", (1, 272, 14, 14), _mp(3, 2, P1), 1),
    ("AvgPool 3x3/2 p1 cip 136@28", "AveragePool", (1, 136, 28, 28), _mp(3, 2, P1, count_include_pad=1), 0),
    ("AvgPool 3x3/2 ceil 136@28", "AveragePool", (1, 136, 28, 28), _mp(3, 2, ceil_mode=1), 0),
    ("AvgPool 2x2/2 128@56 (densenet121)", "AveragePool", (1, 128, 56, 56), _mp(2, 2), 1),
    ("AvgPool 2x2/2 512@14 (densenet121)", "AveragePool", (1, 512, 14, 14), _mp(2, 2), 1),
    ("AvgPool 7x7/1 2048@7 (resnet50)", "AveragePool", (1, 2048, 7, 7), _mp(7, 1), 1),
    ("AvgPool 7x7/1 544@7 (shufflenet)", "AveragePool", (1, 544, 7, 7), _mp(7, 1), 1),
    ("AvgPool 7x7/1 pE 1024@6 (inception_v1)", "AveragePool", (1, 1024, 6, 6), _mp(7, 1, P_END), 1),
    ("GlobalAvgPool 1024@7 (densenet121)", "GlobalAveragePool", (1, 1024, 7, 7), {}, 1),
    ("GlobalAvgPool 1000@13 (squeezenet)", "GlobalAveragePool", (1, 1000, 13, 13), {}, 1),
    ("GlobalMaxPool 1024@7", "GlobalMaxPool", (1, 1024, 7, 7), {}, 0),
]


def ort_runner(op, x, attrs):
    """A callable running the one-node model in onnxruntime (output bound in advance), and its output."""
    return ort_one_node(op, x, attrs, opset=19)


def rknn_runner(op, x, attrs, out_shape):
    """A callable running rknnlite's kernel as the executor does (prepared once, out= given), and its output."""
    spec = KERNELS[op]
    attrs = dict(attrs, _opset=19, _num_outputs=1)
    if spec.prepare is not None:
        attrs = spec.prepare(attrs, [None])
    out = [np.empty(out_shape, np.float32)]
    return (lambda: spec.fn([x], attrs, out=out)), out[0]


def _time_blocks(runners, rounds, repeat):
    """Median seconds of each runner, in blocks of ``repeat`` runs alternating between them."""
    times = [[] for _ in runners]
    for _ in range(rounds):
        for run, acc in zip(runners, times):
            run()
            for _ in range(repeat):
                t0 = time.perf_counter()
                run()
                acc.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per block")
    ap.add_argument("--rounds", type=int, default=5, help="blocks per runtime, alternating (median of all runs)")
    ap.add_argument("--only", default="", help="run only configurations whose name contains this")
    ap.add_argument("--threads", type=int, default=1, help="also time rknnlite with this many worker threads")
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    pool = WorkerPool(args.threads) if args.threads > 1 else None
    rows = []
    totals = [0.0, 0.0, 0.0]
    try:
        for name, op, shape, attrs, count in CONFIGS:
            if args.only not in name:
                continue
            x = rng.standard_normal(shape, dtype=np.float32)
            with threadpool_limits(limits=1):
                run_o, y_o = ort_runner(op, x, attrs)
                run_o()
                run_r, y_r = rknn_runner(op, x, attrs, y_o.shape)
                run_r()
                if op == "MaxPool" or op == "GlobalMaxPool":
                    diff = float(np.abs(y_r - y_o).max())
                else:
                    diff = float(np.abs(y_r - y_o).max() / max(1e-6, np.abs(y_o).max()))
                runners = [run_o, run_r]
                if pool is not None:
                    def run_t(run_r=run_r):
                        with using(pool):
                            run_r()
                    runners.append(run_t)
                med = [t * 1e6 for t in _time_blocks(runners, args.rounds, args.repeat)]
            for i, m in enumerate(med):
                totals[i] += m * count
            rows.append((name, count, med, diff))
    finally:
        if pool is not None:
            pool.close()
    head = "| configuration | uses | rknnlite us | onnxruntime us | ratio |"
    rule = "|---|---:|---:|---:|---:|"
    if pool is not None:
        head += f" rknnlite {args.threads} threads us |"
        rule += "---:|"
    print(machine())
    print(head + " max diff |")
    print(rule + "---:|")
    for name, count, med, diff in rows:
        line = f"| {name} | {count} | {med[1]:.1f} | {med[0]:.1f} | {med[1] / med[0]:.2f} |"
        if pool is not None:
            line += f" {med[2]:.1f} |"
        print(line + f" {diff:.1e} |")
    if rows and totals[0] > 0:
        line = (f"| **light models total (x uses)** | | {totals[1]:.1f} | {totals[0]:.1f} "
                f"| {totals[1] / totals[0]:.2f} |")
        if pool is not None:
            line += f" {totals[2]:.1f} |"
        print(line + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
