#!/usr/bin/env python3
"""Latency of the software backend against onnxruntime on the onnx package's light models.

    python tools/bench/bench_models.py [--models resnet50,squeezenet] [--runs 10] [--threads 2] [--clock cpu]
                                       [--stat min]

One process, side by side: every model is converted with rknnlite's toolkit
(float32 and float16 builds, and an int8 build calibrated on 2 slightly perturbed copies
of the input), then timed against onnxruntime with one intra-op thread.  The runs are
interleaved (each round runs onnxruntime and every rknnlite variant once, in turn) so
that load from other processes hits all of them alike; the table gives the median of
RUNS rounds after warm-up, and each ratio is the median of the per-round ratios
(``--stat min``: the fastest round of each column, and ratios of those minima -- the
least disturbed run of each, on a machine whose load comes and goes).
``--clock cpu`` times the single-threaded columns with the calling thread's CPU time
(onnxruntime with one intra-op thread runs in the calling thread too) instead of wall
time: on a machine shared with other processes it leaves out the time the process
waited for a core.  The multi-threaded column is always wall time, and its speed-up is against fp32 on one
thread timed with the wall clock in the same rounds.  BLAS is limited to one thread for the whole timed part
with threadpoolctl (in this script only: the library never changes thread pools), so
"1 thread" means one thread for both.  The last column runs rknnlite float32 with
RKNNLITE_NUM_THREADS=THREADS worker threads (BLAS still single-threaded), after the runs in which
it decides which independent branches to run side by side (``MULTI_THREAD_WARMUP``).  The reference
of that speed-up, timed in the same rounds: the machine's own two-thread scaling of plain
single-threaded sgemm in two Python threads (``sgemm 2T speed-up``; issue 23 asks for at least
0.9 of it, the ``share`` column).
Prints a Markdown table.  Needs: onnx, onnxruntime, threadpoolctl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rknnlite  # noqa: E402
from common import interleaved_ms, machine, median_ratio, sgemm_scaling_pair  # noqa: E402
from rknnlite.backends.software.branches import Probe  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402

#: runs of the multi-threaded context before the rounds: its first run plans, the next ones
#: probe which independent branches to run side by side (backends/software/branches.py)
MULTI_THREAD_WARMUP = 1 + Probe.SINGLE_RUNS + 2 * Probe.TRIALS

LIGHT = ["resnet50", "densenet121", "inception_v1", "inception_v2", "vgg19", "shufflenet", "squeezenet",
         "bvlc_alexnet", "zfnet512"]


def light_model(name: str):
    import onnx
    from onnx.backend.test.runner import Runner

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    model = onnx.load(str(path))
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            feeds[vi.name] = Runner.generate_dummy_data(vi, seed=0, name=name, random=False)
    return path, feeds


def calibration_dataset(x, out_dir: str, name: str, copies: int = 2) -> str:
    """A dataset file (absolute paths) of ``copies`` perturbed copies of the inputs ``x``."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(copies):
        paths = []
        for k, xi in enumerate(x):
            p = os.path.join(out_dir, f"{name}_s{i}_in{k}.npy")
            noise = rng.normal(0, 0.05 * (float(np.std(xi)) or 1.0), xi.shape)
            np.save(p, (xi + noise).astype(xi.dtype) if xi.dtype.kind == "f" else xi)
            paths.append(p)
        lines.append(" ".join(paths))
    dataset = os.path.join(out_dir, f"{name}_dataset.txt")
    with open(dataset, "w") as f:
        f.write("\n".join(lines) + "\n")
    return dataset


def convert(path: Path, float_dtype: str, out_dir: str, dataset: str = None) -> str:
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype=float_dtype) == 0
    assert rknn.load_onnx(str(path)) == 0
    assert rknn.build(do_quantization=dataset is not None, dataset=dataset) == 0
    out = os.path.join(out_dir, f"{path.stem}_{float_dtype}{'_i8' if dataset else ''}.rknn")
    assert rknn.export_rknn(out) == 0
    rknn.release()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(LIGHT))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="clock of the single-threaded columns (cpu: this thread's CPU time)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="statistic over the rounds (min: fastest round, ratios of minima)")
    args = ap.parse_args()

    import onnxruntime as ort
    from threadpoolctl import threadpool_info, threadpool_limits

    load_before = f"{os.getloadavg()[0]:.2f}"
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    rows = []
    sgemm_one, sgemm_two, sgemm_close = sgemm_scaling_pair()
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(limits=1):
        for name in args.models.split(","):
            path, feeds = light_model(name)
            x = [np.asarray(v) for v in feeds.values()]
            session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            f32, f16 = convert(path, "float32", tmp), convert(path, "float16", tmp)
            i8 = convert(path, "float16", tmp, calibration_dataset(x, tmp, name))
            os.environ["RKNNLITE_NUM_THREADS"] = str(args.threads)
            try:
                cmt = rknnlite.Context(f32)
            finally:
                del os.environ["RKNNLITE_NUM_THREADS"]
            with rknnlite.Context(f32) as c32, rknnlite.Context(f16) as c16, rknnlite.Context(i8) as c8, cmt:
                # the light models' data is NCHW, which their NHWC image attributes take as data_format="nchw"
                fmt = "nchw"
                for _ in range(MULTI_THREAD_WARMUP):  # past its probing runs: the steady state is timed
                    cmt.run(x, data_format=fmt)
                times = interleaved_ms([lambda: session.run(None, feeds), lambda: c32.run(x, data_format=fmt),
                                        lambda: c16.run(x, data_format=fmt), lambda: c8.run(x, data_format=fmt),
                                        lambda: cmt.run(x, data_format=fmt), lambda: c32.run(x, data_format=fmt),
                                        sgemm_two, sgemm_one],
                                       args.runs,
                                       warmup=2, clocks=[clock] * 4 + [time.perf_counter] * 4)
            rows.append((name, times))
            print(f"  {name}: done", file=sys.stderr)
        blas = ", ".join(f"{i['internal_api']} {i.get('version', '')}".strip() for i in threadpool_info())
    sgemm_close()

    print(machine())
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__} ({blas}); {os.cpu_count()} CPUs; "
          f"{args.stat} of {args.runs} interleaved rounds; 1T columns: {args.clock} time, {args.threads}T: wall time; "
          f"BLAS limited to 1 thread; load average before/after "
          f"{load_before} / {os.getloadavg()[0]:.2f}")
    print()
    print(f"| model | onnxruntime 1T (ms) | rknnlite fp32 1T (ms) | ratio | rknnlite fp16 1T (ms) | fp16/fp32 | "
          f"int8 1T (ms) | int8/fp32 | rknnlite fp32 {args.threads}T (ms) | speed-up | sgemm 2T speed-up | share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    stat = min if args.stat == "min" else statistics.median
    ratio = (lambda a, b: min(a) / min(b)) if args.stat == "min" else median_ratio
    for name, t in rows:
        ort_ms, ms32, ms16, ms8, ms_mt = (stat(v) for v in t[:5])
        speedup, machine_speedup = ratio(t[5], t[4]), ratio(t[7], t[6])
        print(f"| {name} | {ort_ms:.1f} | {ms32:.1f} | {ratio(t[1], t[0]):.2f} | {ms16:.1f} | "
              f"{ratio(t[2], t[1]):.2f} | {ms8:.1f} | {ratio(t[3], t[1]):.2f} | {ms_mt:.1f} | "
              f"{speedup:.2f} | {machine_speedup:.2f} | {speedup / machine_speedup:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
