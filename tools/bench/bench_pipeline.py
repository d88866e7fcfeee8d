#!/usr/bin/env python3
"""Throughput of ``rknnlite.pipeline`` against the hand-written pool users copy.

    python tools/bench/bench_pipeline.py [--frames 24] [--rounds 3] [--tiny-frames 3000]

Software backend, one run, every variant timed in turn in each round (interleaved, so load
from other processes hits them alike); the tables give the median over rounds.

1. Compute-bound model: the onnx package's light resnet50 (1x3x224x224), converted by
   ``rknnlite.toolkit`` (float16, rk3588), ``--frames`` frames per round:
   * ``Context.run`` in a loop (one context, the serial reference);
   * ``AsyncInferQueue`` with ``jobs=1`` and ``jobs=2`` (``submit`` every frame, then the
     futures in order; contexts pinned to cores 0 and 1);
   * ``Pipeline(queue)``: one inference stage on the 2-job queue, a producer thread pushing,
     the main thread popping in order;
   * the hand-written pattern (leafqycc's ``rknnpool.py``, copied by immich and others):
     N ``RKNNLite`` objects pinned to cores round-robin, a ``ThreadPoolExecutor(N)``, a FIFO
     ``Queue`` of futures; N frames put first, then put one / get one.
   Target: 2 jobs >= 1.7x the throughput of 1 job, and (issue 23) >= 0.9 of the machine's own
   two-thread scaling of plain sgemm in two Python threads, timed in the same rounds.
2. Overhead on a tiny model (``y = a + b`` on 1x4): microseconds per frame of each variant
   minus ``Context.run`` per frame (the pipeline's own cost; target <= 50 us), with one
   context (``jobs=1``) so the inference itself is the same serial work.

BLAS threads are set to 1 unless the environment says otherwise, so one job uses one CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Queue

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import rknnlite  # noqa: E402
from rknnlite.api import RKNNLite  # noqa: E402
from rknnlite.pipeline import AsyncInferQueue, Pipeline  # noqa: E402

from common import interleaved_ms, machine, sgemm_scaling_pair  # noqa: E402


# -- models -----------------------------------------------------------------------------------

def resnet50(path: Path) -> Path:
    import onnx
    from rknnlite.toolkit import RKNN

    src = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    rk = RKNN()
    rk.config(target_platform="rk3588", float_dtype="float16")
    if rk.load_onnx(str(src)) != 0 or rk.build(do_quantization=False) != 0 or rk.export_rknn(str(path)) != 0:
        raise SystemExit("converting light_resnet50 failed (see the rknnlite.toolkit log)")
    rk.release()
    return path


def tiny(path: Path) -> Path:
    from rknnlite.model.graph import Graph, Node
    from rknnlite.model.metadata import build_metadata
    from rknnlite.model.portable import write_portable
    from rknnlite.model.spec import TensorSpec

    spec = [TensorSpec(n, (1, 4), "float32") for n in ("a", "b", "y")]
    graph = Graph([Node("Add", "add", ["a", "b"], ["y"])], ["a", "b"], ["y"], {})
    path.write_bytes(write_portable(build_metadata(spec[:2], spec[2:], target_platforms=("rk3588",),
                                                   float_dtype="float32"), graph))
    return path


# -- the variants: each processes every frame and returns the outputs in order ---------------

def serial(ctx, frames):
    return [ctx.run(x) for x in frames]


def queue_futures(q, frames):
    futures = [q.submit(x) for x in frames]  # submit blocks while every context is busy
    return [f.result() for f in futures]


def pipeline(q, frames):
    with Pipeline(q, maxsize=2 * len(q) + 2) as pipe:
        return _drive(pipe, frames)


def _drive(pipe, frames):
    """Push ``frames`` from a producer thread while this thread collects the results."""
    def produce():
        for x in frames:
            pipe.push(x)
        pipe.close()

    t = threading.Thread(target=produce)
    t.start()
    out = [r.value for r in pipe]
    t.join()
    return out


class HandWrittenPool:
    """The pattern of leafqycc/rknn-multi-threaded ``rknnpool.py`` (as users copy it)."""

    CORES = (RKNNLite.NPU_CORE_0, RKNNLite.NPU_CORE_1, RKNNLite.NPU_CORE_2)

    def __init__(self, model: str, n: int, data_format=None):
        self.n = n
        self.data_format = data_format
        self.rknns = []
        for i in range(n):
            rk = RKNNLite()
            if rk.load_rknn(model) != 0 or rk.init_runtime(core_mask=self.CORES[i % 3]) != 0:
                raise SystemExit("RKNNLite failed to load the model")
            self.rknns.append(rk)
        self.pool = ThreadPoolExecutor(max_workers=n)
        self.queue: Queue = Queue()
        self.num = 0

    def put(self, frame):
        self.queue.put(self.pool.submit(self.rknns[self.num % self.n].inference, inputs=frame,
                                        data_format=self.data_format))
        self.num += 1

    def get(self):
        return self.queue.get().result()

    def run(self, frames):
        out = []
        frames = list(frames)
        for x in frames[:self.n]:
            self.put(x)
        for x in frames[self.n:]:
            self.put(x)
            out.append(self.get())
        while len(out) < len(frames):
            out.append(self.get())
        return out

    def release(self):
        self.pool.shutdown()
        for rk in self.rknns:
            rk.release()


# -- measuring --------------------------------------------------------------------------------

def measure(variants, frames, rounds):
    """{name: median seconds for all frames} over ``rounds`` interleaved rounds (1 warm-up)."""
    names = list(variants)
    fns = [lambda f=variants[n]: f(frames) for n in names]
    times = interleaved_ms(fns, rounds, warmup=1)
    return {n: statistics.median(t) / 1e3 for n, t in zip(names, times)}


def load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load: n/a (no uptime)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=24, help="resnet50 frames per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tiny-frames", type=int, default=3000, help="tiny-model frames per round")
    args = p.parse_args(argv)

    print(machine())
    print(f"CPUs usable: {len(os.sched_getaffinity(0))}; before: {load()}")
    sgemm_one, sgemm_two, sgemm_close = sgemm_scaling_pair()
    with tempfile.TemporaryDirectory() as tmp:
        r50 = str(resnet50(Path(tmp) / "resnet50.rknn"))
        rng = np.random.default_rng(0)
        frames = [[rng.random((1, 3, 224, 224), np.float32)] for _ in range(args.frames)]
        with rknnlite.Context(r50) as ctx, AsyncInferQueue(ctx, jobs=1) as q1, AsyncInferQueue(ctx, jobs=2) as q2:
            hand1, hand2 = HandWrittenPool(r50, 1, "nchw"), HandWrittenPool(r50, 2, "nchw")
            try:
                reference = serial(ctx, frames[:2])
                for name, out in (("jobs=2", queue_futures(q2, frames[:2])), ("pipeline", pipeline(q2, frames[:2])),
                                  ("hand", hand2.run(frames[:2]))):
                    for a, b in zip(out, reference):
                        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, err_msg=name)
                t = measure({
                    "Context.run loop (1 context)": lambda f: serial(ctx, f),
                    "AsyncInferQueue jobs=1": lambda f: queue_futures(q1, f),
                    "AsyncInferQueue jobs=2": lambda f: queue_futures(q2, f),
                    "Pipeline(AsyncInferQueue jobs=2)": lambda f: pipeline(q2, f),
                    "hand-written pool, 1 RKNNLite": hand1.run,
                    "hand-written pool, 2 RKNNLite": hand2.run,
                    "sgemm, 2 threads": lambda f: sgemm_two(),
                    "sgemm, 1 thread": lambda f: sgemm_one(),
                }, frames, args.rounds)
            finally:
                hand1.release()
                hand2.release()
                sgemm_close()
        sgemm_scaling = t.pop("sgemm, 1 thread") / t.pop("sgemm, 2 threads")
        n = args.frames
        base = t["AsyncInferQueue jobs=1"]
        print(f"\n### resnet50 (light, float16), {n} frames per round, median of {args.rounds} rounds\n")
        print("| variant | frames/s | vs AsyncInferQueue jobs=1 |")
        print("|---|---:|---:|")
        for name, sec in t.items():
            print(f"| {name} | {n / sec:.2f} | {base / sec:.2f}x |")
        hand = t["hand-written pool, 2 RKNNLite"]
        two_jobs = base / t["AsyncInferQueue jobs=2"]
        print(f"\n2 jobs / 1 job: {two_jobs:.2f}x (target >= 1.7x); the machine's sgemm 2T scaling in the "
              f"same rounds: {sgemm_scaling:.2f}x, share {two_jobs / sgemm_scaling:.2f} (target >= 0.9); "
              f"Pipeline / hand-written 2: {hand / t['Pipeline(AsyncInferQueue jobs=2)']:.2f}x; "
              f"AsyncInferQueue jobs=2 / hand-written 2: {hand / t['AsyncInferQueue jobs=2']:.2f}x")

        small = str(tiny(Path(tmp) / "add.rknn"))
        m = args.tiny_frames
        xs = [[np.full((1, 4), k, np.float32), np.ones((1, 4), np.float32)] for k in range(m)]
        with rknnlite.Context(small) as ctx, AsyncInferQueue(ctx, jobs=1) as q1:
            hand1 = HandWrittenPool(small, 1)
            try:
                t = measure({
                    "Context.run loop": lambda f: serial(ctx, f),
                    "AsyncInferQueue jobs=1, submit + futures": lambda f: queue_futures(q1, f),
                    "Pipeline(AsyncInferQueue jobs=1), push/pop": lambda f: pipeline(q1, f),
                    "Pipeline of 3 stages (identity, inference, identity)":
                        lambda f: three_stages(q1, f),
                    "hand-written pool, 1 RKNNLite": hand1.run,
                }, xs, args.rounds)
            finally:
                hand1.release()
        ref = t["Context.run loop"] / m * 1e6
        print(f"\n### tiny model (Add 1x4), {m} frames per round, median of {args.rounds} rounds\n")
        print("| variant | us/frame | overhead over Context.run (us/frame) |")
        print("|---|---:|---:|")
        for name, sec in t.items():
            us = sec / m * 1e6
            print(f"| {name} | {us:.1f} | {us - ref:+.1f} |")
    print(f"\nafter: {load()}")
    return 0


def three_stages(q, frames):
    with Pipeline(_identity, q, _identity, maxsize=8) as pipe:
        return _drive(pipe, frames)


def _identity(x):
    return x


if __name__ == "__main__":
    sys.exit(main())
