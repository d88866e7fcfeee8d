#!/usr/bin/env python3
"""Sparse inference on the software backend: sparse Conv kernel vs dense, single thread.

    python tools/bench/bench_sparse.py [--runs 10] [--skip-resnet50] [--clock cpu]

Part 1, single Conv layers whose weights are 4:2 (50 %) or 16:4 (75 %) sparse (magnitude
pruned with ``rknnlite.toolkit.sparsity.sparsify_weight``): the Conv kernel as the
executor calls it, dense (the node as built without ``sparse_infer``) against the sparse
kernel forced on, and which one the shape-based rule picks.  Part 2, the onnx package's
light resnet50, sparsified with ``rknnlite.toolkit.sparsify`` (``4:2_ic``) and built
float32 for rk3576 with and without ``sparse_infer`` (also ``16:4_io``): the dense build, the
sparse build as the rule runs it, and the sparse build with the sparse kernel forced on every
marked layer the kernel takes (not instead of Winograd, im2col not too large).
Runs alternate (``interleaved_ms``); the table gives medians in ms and the ratio to dense
(< 1.0: faster than dense).  Needs ``pip install onnx``.
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

from common import interleaved_ms, machine, median_ratio  # noqa: E402
from rknnlite.backends.software.ops import sparse  # noqa: E402
from rknnlite.backends.software.ops.conv import _conv_prepare, conv  # noqa: E402
from rknnlite.toolkit.sparsity import sparsify_weight, weight_view  # noqa: E402

#: (name, input NCHW, (M, kh, kw), stride, pad, mode)
LAYERS = [
    ("1x1 256->256 @28, 4:2", (1, 256, 28, 28), (256, 1, 1), 1, 0, "4:2_ic"),
    ("1x1 64->256 @56, 4:2", (1, 64, 56, 56), (256, 1, 1), 1, 0, "4:2_ic"),
    ("3x3/2 128->128 @56, 4:2", (1, 128, 56, 56), (128, 3, 3), 2, 1, "4:2_ic"),
    ("3x3 256->256 @14, 4:2", (1, 256, 14, 14), (256, 3, 3), 1, 1, "4:2_ic"),
    ("1x1 256->256 @28, 16:4", (1, 256, 28, 28), (256, 1, 1), 1, 0, "16:4_io"),
]


def _layer(x_shape, wspec, stride, pad, mode):
    rng = np.random.default_rng(0)
    m, kh, kw = wspec
    w = rng.standard_normal((m, x_shape[1], kh, kw)).astype(np.float32)
    w = sparsify_weight(weight_view(w, "Conv"), mode).reshape(w.shape)
    b = rng.standard_normal(m).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    attrs = {"strides": [stride, stride], "pads": [pad] * 4, "kernel_shape": [kh, kw]}
    dense = _conv_prepare(dict(attrs), [None, w, b])
    sp = _conv_prepare(dict(attrs, _sparsity=mode), [None, w, b])
    y = conv([x, w, b], dense)[0]
    out = [np.empty_like(y)]
    g = next(iter(dense["_conv"].geoms.values()))
    auto = sp["_sparse"].use(g.path, g.N, g.direct and kh == kw == 1)
    forced = dict(sp)
    forced["_sparse"] = _Forced(sp["_sparse"])
    return (lambda: conv([x, w, b], dense, out)), (lambda: conv([x, w, b], forced, out)), auto, g.path


class _Forced:
    """A SparseConv whose rule always says "sparse"."""

    def __init__(self, inner):
        self.inner = inner

    def use(self, *args):
        return True

    def run(self, *args):
        return self.inner.run(*args)


def bench_layers(runs: int, clock):
    rows = []
    for name, xs, ws, s, p, mode in LAYERS:
        dense, forced, auto, path = _layer(xs, ws, s, p, mode)
        td, ts = interleaved_ms([dense, forced], runs, warmup=2, clocks=[clock, clock])
        rows.append((name, path, statistics.median(td), statistics.median(ts), median_ratio(ts, td),
                     "sparse" if auto else "dense"))
    print(machine())
    print("| layer | dense path | dense ms | sparse kernel ms | sparse / dense | rule picks |")
    print("|---|---|---|---|---|---|")
    for name, path, td, ts, r, pick in rows:
        print(f"| {name} | {path} | {td:.2f} | {ts:.2f} | {r:.2f} | {pick} |")


def bench_resnet50(runs: int, clock, modes=("4:2_ic", "16:4_io")):
    import onnx

    import rknnlite
    from rknnlite.toolkit import RKNN, sparsify

    onnx_dir = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    src = str(onnx_dir / "light_resnet50.onnx")

    def build(path, flag):
        rk = RKNN()
        assert rk.config(target_platform="rk3576", float_dtype="float32", sparse_infer=flag) == 0
        assert rk.load_onnx(path) == 0 and rk.build(do_quantization=False) == 0
        blob = rk._model_bytes
        rk.release()
        return blob

    blobs = {"dense": build(src, False)}
    for mode in modes:
        tmp = Path("/tmp") / f"bench_sparse_resnet50_{mode.replace(':', '_')}.onnx"
        assert sparsify(src, str(tmp), mode=mode) == 0
        blobs[mode] = build(str(tmp), True)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    saved = sparse.SPARSE_RATE
    ctxs = [("dense build", rknnlite.Context(blobs["dense"]), False)]
    for mode in modes:
        ctxs.append((f"{mode} sparsified, sparse_infer, rule", rknnlite.Context(blobs[mode]), False))
        ctxs.append((f"{mode} sparsified, sparse kernel forced", rknnlite.Context(blobs[mode]), True))

    def run(ctx, forced):
        def fn():
            # forced: every marked layer not on Winograd and not too large runs sparse
            sparse.SPARSE_RATE = 1e9 if forced else saved
            ctx.run([x], data_format=["nchw"])
        return fn

    try:
        times = interleaved_ms([run(c, f) for _, c, f in ctxs], runs, warmup=1, clocks=[clock] * len(ctxs))
    finally:
        sparse.SPARSE_RATE = saved
        for _, c, _ in ctxs:
            c.close()
    print()
    print("| resnet50 (light, 1x3x224x224, float32, 1 thread) | ms | / dense |")
    print("|---|---|---|")
    for (name, _, _), t in zip(ctxs, times):
        print(f"| {name} | {statistics.median(t):.1f} | {median_ratio(t, times[0]):.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--skip-resnet50", action="store_true")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    bench_layers(args.runs, clock)
    if not args.skip_resnet50:
        bench_resnet50(max(3, args.runs // 2), clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
