#!/usr/bin/env python3
"""``Context.run_bound()`` (zero-copy I/O) against ``Context.run()`` (copying I/O).

    python tools/bench/bench_zero_copy.py [--rounds 30] [--calls 2000] [--height 480 --width 640]

Two models, converted with ``rknnlite.toolkit`` (float16 build, rk3588):
  * ``add``: ``y = a + b`` on two 1x4 float32 inputs: the computation is negligible, so the
    times are the cost of one call (``--calls`` calls per round, mean per call);
  * ``camera``: Conv(3->8, 3x3, pad 1) + Relu on a 1x3xHxW image with mean/std, fed as a
    camera frame, NHWC uint8 (1xHxWx3), output 1x8xHxW float32.

Timed per model, interleaved round by round (so load on a shared machine hits them alike):
  * ``run()``: ``ctx.run([frame], data_format="nhwc")``: converts the inputs, returns new
    output arrays;
  * ``run_bound()``: inputs already in bound memory (as a camera writing into a dma-buf),
    outputs written into bound memory;
  * ``write + run_bound()``: the frame copied into the bound input first (a camera that
    hands over frames in its own buffers);
  * ``backend.run``: the software backend alone on already converted inputs (its
    computation and its own output copies: what both calls pay at least).
The table gives medians in milliseconds and the overhead over ``backend.run``.  Needs
``pip install onnx``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rknnlite  # noqa: E402
from rknnlite import TensorType  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402

from common import interleaved_ms, machine  # noqa: E402


def add_onnx():
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("a", "b", "y")]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", io[:2], io[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def camera_onnx(height: int, width: int):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        "camera", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, height, width])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def convert(model, path: Path, **config) -> None:
    rk = RKNN()
    ok = (rk.config(target_platform="rk3588", **config) == 0 and rk.load_onnx(model) == 0
          and rk.build(do_quantization=False) == 0 and rk.export_rknn(str(path)) == 0)
    rk.release()
    if not ok:
        raise SystemExit("conversion failed")


def setup(path: Path, feeds_nhwc):
    """(ctx, run, run_bound, write_and_run_bound, backend_run) for one model."""
    ctx = rknnlite.Context(str(path))
    fmts = ["nhwc" if x.ndim == 4 else None for x in feeds_nhwc]
    in_attrs = []
    for attr, native, x in zip(ctx.inputs, ctx.native_inputs, feeds_nhwc):
        in_attrs.append(native.replace(type=TensorType.UINT8) if x.ndim == 4 else attr)
    out_attrs = [a.replace(type=TensorType.FLOAT32) for a in ctx.outputs]
    in_mems = [ctx.create_mem(a.size_with_stride) for a in in_attrs]
    out_mems = [ctx.create_mem(a.size_with_stride) for a in out_attrs]
    for mem, attr in zip(in_mems + out_mems, in_attrs + out_attrs):
        ctx.set_io_mem(mem, attr)
    views = [m.view(a) for m, a in zip(in_mems, in_attrs)]
    for v, x in zip(views, feeds_nhwc):
        v[...] = x
    ctx.run_bound()
    expected = ctx.run(feeds_nhwc, data_format=fmts)
    for mem, attr, e in zip(out_mems, out_attrs, expected):
        assert np.array_equal(mem.array(np.float32, attr.dims), e), "run_bound and run disagree"
    converted = [p.convert(x, f) for p, x, f in zip(ctx._plans, feeds_nhwc, fmts)]
    converted = [c.copy() for c in converted]  # the backend's inputs, converted once in advance
    backend = ctx._backend

    def write_and_run():
        for v, x in zip(views, feeds_nhwc):
            v[...] = x
        ctx.run_bound()

    return (ctx, lambda: ctx.run(feeds_nhwc, data_format=fmts), ctx.run_bound, write_and_run,
            lambda: backend.run(converted))


def repeat(fn, calls: int):
    def many():
        for _ in range(calls):
            fn()
    return many


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=2000, help="calls per round on the add model")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=640)
    args = ap.parse_args()
    logging.getLogger("rknnlite").setLevel(logging.ERROR)

    rng = np.random.default_rng(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        add_path, cam_path = Path(tmp) / "add.rknn", Path(tmp) / "camera.rknn"
        convert(add_onnx(), add_path)
        convert(camera_onnx(args.height, args.width), cam_path, mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
        add_feeds = [rng.random((1, 4), np.float32), rng.random((1, 4), np.float32)]
        frame = rng.integers(0, 256, (1, args.height, args.width, 3)).astype(np.uint8)
        for name, path, feeds, calls, rounds in (
                ("add 1x4 float32", add_path, add_feeds, args.calls, args.rounds),
                (f"camera 1x{args.height}x{args.width}x3 uint8 NHWC -> 1x8x{args.height}x{args.width} float32",
                 cam_path, [frame], 1, args.rounds)):
            ctx, *fns = setup(path, feeds)
            times = interleaved_ms([repeat(f, calls) for f in fns], rounds, warmup=2)
            med = [statistics.median(t) / calls for t in times]
            rows.append((name, med))
            ctx.close()

    unit = lambda ms: f"{ms * 1e3:.1f} µs" if ms < 1 else f"{ms:.2f} ms"  # noqa: E731
    print(f"rknnlite zero-copy vs copying I/O (software backend, median of {args.rounds} rounds; "
          f"overhead = time - backend.run)\n")
    print(machine())
    print("| model | run() | run_bound() | write frame + run_bound() | backend.run | run() overhead | "
          "run_bound() overhead |")
    print("|---|---|---|---|---|---|---|")
    for name, (run, bound, write, backend) in rows:
        print(f"| {name} | {unit(run)} | {unit(bound)} | {unit(write)} | {unit(backend)} | {unit(run - backend)} | "
              f"{unit(bound - backend)} |")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - t0:.0f} s)")
