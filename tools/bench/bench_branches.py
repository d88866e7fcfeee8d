#!/usr/bin/env python3
"""Two threads with and without independent branches run side by side, against one thread.

    python tools/bench/bench_branches.py [--models inception_v2,inception_v1,squeezenet] [--runs 20]

One process, interleaved rounds (wall time; BLAS limited to one thread with threadpoolctl, in
this script only): each model's float32 build runs on one thread, on two threads with
``RKNNLITE_BRANCHES=0`` (every layer split across both threads) and on two threads with the
default (the blocks whose probe favoured it run forked, one branch per thread;
``rknnlite/backends/software/branches.py``).  The two-thread contexts first run past their
probing runs.  The reference, timed in the same rounds: the machine's own two-thread scaling of
plain single-threaded sgemm in two Python threads.  Prints the CPU and a Markdown table of the
fastest round of each column (``--stat median``: the median) and the speed-ups against one thread.
Needs: onnx, threadpoolctl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rknnlite  # noqa: E402
from bench_models import MULTI_THREAD_WARMUP, convert, light_model  # noqa: E402
from common import interleaved_ms, machine, sgemm_scaling_pair  # noqa: E402


def _context(path: str, threads: int, branches: str) -> rknnlite.Context:
    """A context made with RKNNLITE_NUM_THREADS / RKNNLITE_BRANCHES set for its creation only."""
    saved = {k: os.environ.get(k) for k in ("RKNNLITE_NUM_THREADS", "RKNNLITE_BRANCHES")}
    os.environ["RKNNLITE_NUM_THREADS"], os.environ["RKNNLITE_BRANCHES"] = str(threads), branches
    try:
        return rknnlite.Context(path)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="inception_v2,inception_v1,squeezenet")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--stat", choices=("min", "median"), default="min")
    args = ap.parse_args()

    from threadpoolctl import threadpool_limits

    stat = min if args.stat == "min" else statistics.median
    rows = []
    one_sgemm, two_sgemm, close = sgemm_scaling_pair()
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(limits=1):
        for name in args.models.split(","):
            path, feeds = light_model(name)
            x = [np.asarray(v) for v in feeds.values()]
            f32 = convert(path, "float32", tmp)
            contexts = [_context(f32, 1, "1"), _context(f32, 2, "0"), _context(f32, 2, "1")]
            for ctx in contexts[1:]:
                for _ in range(MULTI_THREAD_WARMUP):
                    ctx.run(x, data_format="nchw")
            fns = [lambda c=c: c.run(x, data_format="nchw") for c in contexts] + [two_sgemm, one_sgemm]
            times = interleaved_ms(fns, args.runs, warmup=2)
            for ctx in contexts:
                ctx.close()
            rows.append((name, [stat(t) for t in times]))
            print(f"  {name}: done", file=sys.stderr)
    close()

    print(machine())
    print(f"{args.stat} of {args.runs} interleaved rounds, wall time; BLAS limited to 1 thread; "
          f"load average after {os.getloadavg()[0]:.2f}")
    print()
    print("| model | 1T (ms) | 2T split (ms) | speed-up | 2T branches (ms) | speed-up | sgemm 2T speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (one, split, forked, sgemm_two, sgemm_one) in rows:
        print(f"| {name} | {one:.1f} | {split:.1f} | {one / split:.2f} | {forked:.1f} | {one / forked:.2f} | "
              f"{sgemm_one / sgemm_two:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
