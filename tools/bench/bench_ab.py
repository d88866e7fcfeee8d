#!/usr/bin/env python3
"""Two checkouts of rknnlite timed in alternation on the same light model, one run at a time.

    python tools/bench/bench_ab.py BEFORE AFTER [--model inception_v2] [--runs 200] [--threads 1]

BEFORE and AFTER are repository roots, each with its compiled extensions built in place (e.g.
``git worktree add /tmp/before HEAD~1`` then ``python setup.py build_ext --inplace`` there).
Each checkout runs in its own interpreter, serving one inference per request; the requests
alternate (AB, BA, AB, ...), so a machine whose speed drifts over minutes (shared hosts move
by 5-10 % between quarters of an hour) slows both alike, where two separate runs of
``bench_models.py`` would not.  Both load the same float32 build of the model (converted once,
by AFTER's toolkit), fed the same input.  One thread: the calling thread's CPU time per run;
more (``RKNNLITE_NUM_THREADS``): wall time.  Prints the CPU and a Markdown table of the
minimum, 25th percentile and median per checkout, and AFTER's against BEFORE's.
Needs: onnx, threadpoolctl.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

#: the interpreter one checkout runs in: loads the model, says "ready", then runs one inference
#: per line read and writes its time in seconds
WORKER = r"""
import os, sys, time
root, model, feed = sys.argv[1:4]
sys.path.insert(0, root)
import numpy as np
import rknnlite
if not os.path.realpath(rknnlite.__file__).startswith(os.path.realpath(root)):
    sys.exit(f"rknnlite came from {rknnlite.__file__}, not from {root}")
from threadpoolctl import threadpool_limits
x = [np.load(feed)]
clock = time.thread_time if os.environ.get("RKNNLITE_NUM_THREADS", "1") == "1" else time.perf_counter
with threadpool_limits(1), rknnlite.Context(model) as ctx:
    for _ in range(5):
        ctx.run(x, data_format="nchw")
    print("ready", flush=True)
    for _ in sys.stdin:
        t = clock()
        ctx.run(x, data_format="nchw")
        print(clock() - t, flush=True)
"""


def _start(root: str, model: str, feed: str, threads: int) -> subprocess.Popen:
    env = dict(os.environ, RKNNLITE_NUM_THREADS=str(threads))
    proc = subprocess.Popen([sys.executable, "-c", WORKER, root, model, feed], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir())
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise SystemExit(f"{root}: the worker did not start (said {line!r})")
    return proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--model", default="inception_v2")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    sys.path.insert(0, args.after)
    sys.path.insert(0, str(HERE))
    from bench_models import convert, light_model
    from common import machine

    with tempfile.TemporaryDirectory() as tmp:
        path, feeds = light_model(args.model)
        model = convert(path, "float32", tmp)
        feed = os.path.join(tmp, "x.npy")
        np.save(feed, np.asarray(next(iter(feeds.values()))))
        roots = [args.before, args.after]
        procs = [_start(r, model, feed, args.threads) for r in roots]
        times = [[], []]
        try:
            for i in range(args.runs):
                for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                    procs[k].stdin.write("go\n")
                    procs[k].stdin.flush()
                    times[k].append(float(procs[k].stdout.readline()) * 1e3)
        finally:
            for p in procs:
                p.stdin.close()
                p.wait()
    print(machine())
    clock = "cpu time of the calling thread" if args.threads == 1 else "wall time"
    print(f"{args.model}, float32, {args.threads} thread(s), {args.runs} alternated runs per checkout; {clock}")
    print()
    print("| checkout | min (ms) | p25 (ms) | median (ms) |")
    print("|---|---:|---:|---:|")
    stats = []
    for root, t in zip(roots, times):
        a = np.array(t)
        stats.append((a.min(), np.percentile(a, 25), np.median(a)))
        print(f"| {root} | {stats[-1][0]:.2f} | {stats[-1][1]:.2f} | {stats[-1][2]:.2f} |")
    print(f"| after / before | {stats[1][0] / stats[0][0]:.3f} | {stats[1][1] / stats[0][1]:.3f} | "
          f"{stats[1][2] / stats[0][2]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
