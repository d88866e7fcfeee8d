#!/usr/bin/env python3
"""Per-call overhead of the runtime on a tiny model, side by side with onnxruntime.

    python tools/bench/bench_overhead.py [--calls 2000] [--rounds 15] [--float-dtype float16]

The model is ``y = a + b`` on two 1x4 float32 inputs: the computation is negligible, so
the times are the cost of one call.  Timed, in one run, with the same input arrays:
  * onnxruntime ``session.run(None, {"a": a, "b": b})`` on the ONNX model (CPU provider,
    one intra- and one inter-op thread);
  * ``RKNNLite.inference(inputs=[a, b])`` on the model converted by ``rknnlite.toolkit``;
  * ``Context.run([a, b])`` on the same converted model;
  * the backend's own ``run`` (what ``Context.run`` calls after checking and converting
    the inputs), to show where the time goes.
Each round times ``--calls`` calls of every variant in turn (interleaved, so load changes on
a shared machine hit them alike); the table reports the median over rounds of the mean
time per call in microseconds, and the ratio to onnxruntime.  Targets: RKNNLite <= 2x and
Context.run <= 1.2x onnxruntime.  Needs ``pip install onnx onnxruntime``.
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
from common import machine  # noqa: E402
from rknnlite.api import RKNNLite  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402


def add_onnx() -> bytes:
    from onnx import TensorProto, helper

    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("a", "b", "y")]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", io[:2], io[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def convert(onnx_bytes: bytes, path: Path, float_dtype: str) -> None:
    rk = RKNN()
    rk.config(target_platform="rk3588", float_dtype=float_dtype)
    if rk.load_onnx(onnx_bytes) != 0 or rk.build(do_quantization=False) != 0 or rk.export_rknn(str(path)) != 0:
        raise SystemExit("conversion failed")
    rk.release()


def per_call_us(fn, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per variant per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--float-dtype", default="float16", choices=("float16", "float32"))
    args = parser.parse_args(argv)
    logging.getLogger("rknnlite").setLevel(logging.ERROR)  # the converter's and Lite2's notices

    import onnxruntime as ort

    onnx_bytes = add_onnx()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    a, b = rng.random((1, 4), np.float32), rng.random((1, 4), np.float32)
    feeds = {"a": a, "b": b}

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "add.rknn"
        convert(onnx_bytes, path, args.float_dtype)
        lite = RKNNLite()
        lite.load_rknn(str(path))
        lite.init_runtime()
        ctx = rknnlite.Context(str(path))
        backend = ctx._backend  # private: only to split Context.run's time into its parts
        inputs = [a, b]
        expected = sess.run(None, feeds)[0]
        for out in (lite.inference(inputs=inputs)[0], ctx.run(inputs)[0]):
            np.testing.assert_allclose(out, expected, rtol=1e-3)
        variants = [
            ("onnxruntime `session.run`", lambda: sess.run(None, feeds), None),
            ("`RKNNLite.inference()`", lambda: lite.inference(inputs=inputs), 2.0),
            ("`Context.run()`", lambda: ctx.run(inputs), 1.2),
            ("software backend `run` (inside Context.run)", lambda: backend.run(inputs), None),
        ]
        samples = {name: [] for name, _, _ in variants}
        for _ in range(3):  # warm-up
            for _, fn, _ in variants:
                per_call_us(fn, args.calls // 4 or 1)
        for _ in range(args.rounds):
            for name, fn, _ in variants:
                samples[name].append(per_call_us(fn, args.calls))
        ctx.close()
        lite.release()

    ort_us = statistics.median(samples[variants[0][0]])
    print(machine())
    print(f"1x4 Add ({args.float_dtype} build), median of {args.rounds} rounds x {args.calls} calls\n")
    print("| call | µs per call | vs onnxruntime | target |")
    print("|---|---:|---:|---:|")
    for name, _, target in variants:
        us = statistics.median(samples[name])
        print(f"| {name} | {us:.2f} | {us / ort_us:.2f}x | {f'<= {target:g}x' if target else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
