#!/usr/bin/env python3
"""Memory: what an extra context costs, and RSS growth over many runs and load/release cycles,
side by side with onnxruntime.

    python tools/bench/bench_memory.py [--dups 4] [--runs 10000] [--cycles 1000]

Every number comes from a fresh interpreter (this script re-run with ``--child``), so no
measurement inherits another's heap.  RSS is ``psutil``'s resident set size after
``gc.collect()``.  In one run:

* **Extra contexts** on the onnx package's light resnet50 (float16 build by
  ``rknnlite.toolkit``): the RSS of the first context (load + 2 runs), then the mean RSS
  growth per extra context (``ctx.dup()`` + 2 runs each, ``--dups`` of them), next to the
  weights and the planned activation buffers each context owns (``mem_size()``).
  onnxruntime: one ``InferenceSession`` per context on the same ONNX file (one intra-
  and one inter-op thread; sessions do not share weights).
* **10k inferences** of a small CNN (Conv/Relu/MaxPool/Conv/Relu/GlobalAveragePool/Gemm/
  Softmax on 1x3x32x32, random weights) after 300 warm-up calls: RSS growth over two
  consecutive windows of ``--runs`` calls, for ``RKNNLite.inference``, ``Context.run`` and
  onnxruntime ``session.run``.
* **1k load/release cycles** of the same model after 50 warm-up cycles, two windows of
  ``--cycles``: ``RKNNLite`` ``load_rknn``/``init_runtime``/``inference``/``release``;
  ``Context`` create/``run``/``close``; onnxruntime ``InferenceSession`` create/``run``/drop.
* **1k tensor-memory cycles** on one context of the same model, two windows of
  ``--cycles``: ``create_mem`` for a UINT8 NHWC frame and the FLOAT32 output,
  ``set_io_mem`` both, ``run_bound``, ``destroy`` both; onnxruntime: new ``OrtValue``
  input and output bound with ``io_binding``, ``run_with_iobinding``, dropped.

A leak grows in both windows; a one-time step (a cache filling, the allocator settling)
only in the first.

Needs ``pip install onnx onnxruntime psutil``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine  # noqa: E402

MB = 1 << 20
KB = 1 << 10


# -- models (parent process) -------------------------------------------------------------------

def small_cnn_onnx() -> bytes:
    """A small image classifier with random weights, input ``x`` (1, 3, 32, 32) NCHW."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["z"], transB=1),
        helper.make_node("Softmax", ["z"], ["y"], axis=1),
    ]
    inits = [init("w1", (8, 3, 3, 3)), init("b1", (8,)), init("w2", (16, 8, 3, 3)), init("b2", (16,)),
             init("w3", (10, 16)), init("b3", (10,))]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def convert(onnx_model, path: Path) -> None:
    """``onnx_model`` (path or bytes) -> a float16 portable .rknn at ``path``."""
    from rknnlite.toolkit import RKNN

    rk = RKNN()
    try:
        ok = (rk.config(target_platform="rk3588", float_dtype="float16") == 0 and rk.load_onnx(onnx_model) == 0
              and rk.build(do_quantization=False) == 0 and rk.export_rknn(str(path)) == 0)
    finally:
        rk.release()
    if not ok:
        raise SystemExit(f"conversion to {path} failed (see the rknnlite.toolkit log)")


# -- measurements (child processes) ------------------------------------------------------------

def _rss() -> int:
    import psutil

    gc.collect()
    return psutil.Process().memory_info().rss


def _ort_session(path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def child_dups(engine: str, model: str, dups: int) -> dict:
    """RSS of the first context and mean growth per extra one (each run twice)."""
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    if engine == "rknnlite":
        import rknnlite
    else:
        import onnxruntime  # noqa: F401  (imported before the first reading)
    start = _rss()
    if engine == "rknnlite":
        first = rknnlite.Context(model)
        make, run = first.dup, (lambda c: c.run([x], data_format="nchw"))
    else:
        first = _ort_session(model)
        name = first.get_inputs()[0].name
        make, run = (lambda: _ort_session(model)), (lambda s: s.run(None, {name: x}))
    run(first)
    run(first)
    one = _rss()
    extra = []
    for _ in range(dups):
        c = make()
        run(c)
        run(c)
        extra.append(c)
    result = dict(first=one - start, per_extra=(_rss() - one) / dups)
    if engine == "rknnlite":
        size = first.mem_size()
        result.update(weights=size.total_weight_size, planned=size.total_internal_size)
    return result


def child_runs(engine: str, model: str, runs: int) -> dict:
    """RSS growth over two windows of ``runs`` calls after 300 warm-up calls."""
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    if engine == "rknnlite":
        from rknnlite.api import RKNNLite

        rk = RKNNLite()
        assert rk.load_rknn(model) == 0 and rk.init_runtime() == 0
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        call = lambda: rk.inference([nhwc])  # noqa: E731
    elif engine == "context":
        import rknnlite

        ctx = rknnlite.Context(model)
        call = lambda: ctx.run([x], data_format="nchw")  # noqa: E731
    else:
        sess = _ort_session(model)
        call = lambda: sess.run(None, {"x": x})  # noqa: E731
    for _ in range(300):
        call()
    return _windows(call, runs)


def child_cycles(engine: str, model: str, cycles: int) -> dict:
    """RSS growth over two windows of ``cycles`` load/run/release cycles after 50 warm-up cycles."""
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    if engine == "rknnlite":
        from rknnlite.api import RKNNLite

        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))

        def cycle():
            rk = RKNNLite()
            assert rk.load_rknn(model) == 0 and rk.init_runtime() == 0
            rk.inference([nhwc])
            rk.release()
    elif engine == "context":
        import rknnlite

        def cycle():
            ctx = rknnlite.Context(model)
            ctx.run([x], data_format="nchw")
            ctx.close()
    else:
        def cycle():
            _ort_session(model).run(None, {"x": x})
    for _ in range(50):
        cycle()
    return _windows(cycle, cycles)


def child_mems(engine: str, model: str, cycles: int) -> dict:
    """RSS growth over two windows of ``cycles`` tensor-memory cycles on one context after
    50 warm-up cycles: new input and output memory, bound, one run, destroyed."""
    x = np.random.default_rng(0).integers(0, 256, (1, 3, 32, 32)).astype(np.float32)
    if engine == "context":
        import rknnlite

        ctx = rknnlite.Context(model)
        attr_in = ctx.native_inputs[0].replace(type=rknnlite.TensorType.UINT8)  # NHWC frame
        attr_out = ctx.outputs[0]
        n, h, w, c = attr_in.dims
        frame_data = x.transpose(0, 2, 3, 1).astype(np.uint8)

        def cycle():
            frame, out = ctx.create_mem(attr_in.size_with_stride), ctx.create_mem(attr_out.size_with_stride)
            ctx.set_io_mem(frame, attr_in)
            ctx.set_io_mem(out, attr_out)
            frame.array(np.uint8, (n, h, attr_in.w_stride or w, c))[:, :, :w, :] = frame_data
            ctx.run_bound()
            frame.destroy()
            out.destroy()
    else:
        import onnxruntime as ort

        sess = _ort_session(model)

        def cycle():
            binding = sess.io_binding()
            binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x))
            binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_shape_and_type([1, 10], np.float32))
            sess.run_with_iobinding(binding)
    for _ in range(50):
        cycle()
    return _windows(cycle, cycles)


def _windows(step, count: int) -> dict:
    """RSS growth over two consecutive windows of ``count`` calls: memory that keeps
    growing call after call grows in both; a one-time step (a cache filling, the allocator
    settling) only in the first."""
    growth = []
    before = _rss()
    for _ in range(2):
        for _ in range(count):
            step()
        after = _rss()
        growth.append(after - before)
        before = after
    return dict(growth=growth)


CHILDREN = {"dups": child_dups, "runs": child_runs, "cycles": child_cycles, "mems": child_mems}


def measure(kind: str, engine: str, model: Path, count: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, engine, str(model), str(count)],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{kind}/{engine} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mb(n: float) -> str:
    return f"{n / MB:.1f} MB"


def _kb(n: float) -> str:
    return f"{n / KB:+.0f} kB"


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, engine, model, count = sys.argv[2:6]
        logging.getLogger("rknnlite").setLevel(logging.ERROR)  # RKNNLite() warns its version per object
        print(json.dumps(CHILDREN[kind](engine, model, int(count))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dups", type=int, default=4, help="extra contexts on resnet50")
    parser.add_argument("--runs", type=int, default=10_000, help="inferences of the small CNN")
    parser.add_argument("--cycles", type=int, default=1000, help="load/release cycles of the small CNN")
    args = parser.parse_args(argv)
    logging.getLogger("rknnlite").setLevel(logging.ERROR)  # the converter's notices

    import onnx

    resnet_onnx = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small_onnx, small_rknn, resnet_rknn = tmp / "small_cnn.onnx", tmp / "small_cnn.rknn", tmp / "resnet50.rknn"
        small_onnx.write_bytes(small_cnn_onnx())
        convert(str(small_onnx), small_rknn)
        convert(str(resnet_onnx), resnet_rknn)

        dup = measure("dups", "rknnlite", resnet_rknn, args.dups)
        ort_dup = measure("dups", "onnxruntime", resnet_onnx, args.dups)
        rows = []
        for what, kind, count in (("inferences", "runs", args.runs), ("load/release cycles", "cycles", args.cycles)):
            for label, engine, model in (("`RKNNLite`", "rknnlite", small_rknn), ("`Context`", "context", small_rknn),
                                         ("onnxruntime", "onnxruntime", small_onnx)):
                rows.append((f"{count:,} {what}", label, measure(kind, engine, model, count)["growth"], count))
        for label, engine, model in (("`Context` create_mem/set_io_mem/run_bound/destroy", "context", small_rknn),
                                     ("onnxruntime OrtValue/io_binding/run_with_iobinding", "onnxruntime",
                                      small_onnx)):
            rows.append((f"{args.cycles:,} tensor-memory cycles", label,
                         measure("mems", engine, model, args.cycles)["growth"], args.cycles))

    print(machine())
    print(f"resnet50 (light, float16 build), {args.dups} extra contexts, each run twice\n")
    print("| | first context | per extra context | weights | planned activations per context |")
    print("|---|---:|---:|---:|---:|")
    print(f"| rknnlite `ctx.dup()` | {_mb(dup['first'])} | {_mb(dup['per_extra'])} | {_mb(dup['weights'])} | "
          f"{_mb(dup['planned'])} |")
    print(f"| onnxruntime `InferenceSession` per context | {_mb(ort_dup['first'])} | {_mb(ort_dup['per_extra'])} "
          f"| | |")
    print("\nsmall CNN (1x3x32x32, float16 build), RSS growth after warm-up\n")
    print("| loop | API | RSS growth, 1st window | 2nd window | per call, 2nd window |")
    print("|---|---|---:|---:|---:|")
    for loop, label, (first, second), count in rows:
        print(f"| {loop} | {label} | {_kb(first)} | {_kb(second)} | {second / count:+.1f} B |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
