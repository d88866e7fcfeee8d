#!/usr/bin/env python3
"""Where a model's single-thread time goes, layer by layer, against onnxruntime's own profile.

    python tools/bench/bench_layers.py resnet50 [--runs 10] [--top 25] [--float-dtype float32]

One process, one thread for both runtimes (BLAS limited with threadpoolctl, onnxruntime with
``intra_op_num_threads=1``).  The model is one of the onnx package's light models
(``bench_models.LIGHT``), converted by rknnlite's toolkit.  rknnlite times every step of a run
with ``InitFlag.COLLECT_PERF_MASK`` (its uncompiled step loop: a few microseconds per step more
than a compiled run) and onnxruntime with ``SessionOptions.enable_profiling``; each layer keeps
its fastest of ``--runs`` runs.

Layers are matched by what they compute, not by name (the two runtimes name and fuse nodes
differently): a Conv by its input (C, H, W), kernel size and output (C, H, W); onnxruntime's
blocked NCHWc tensors ``(1, C/16, H, W, 16)`` are read back as ``(C, H, W)``.  Layers of one
shape are summed, with each side's count (they differ where one runtime fuses or splits a
node).  Other operators are compared by type.  Prints the machine line, the per-type totals
and the shapes where rknnlite loses most.  Needs: onnx, onnxruntime, threadpoolctl.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rknnlite  # noqa: E402
from bench_models import LIGHT, convert, light_model  # noqa: E402
from common import machine  # noqa: E402

#: onnxruntime's names for what rknnlite calls Conv (fused with an activation or a sum)
CONV_NAMES = {"Conv", "FusedConv", "NchwcConv"}


def chw(shape: Sequence[int]) -> Tuple[int, ...]:
    """``(C, H, W)`` of an NCHW shape, or of onnxruntime's blocked NCHWc ``(N, C/b, H, W, b)``;
    other ranks as they are."""
    shape = tuple(int(v) for v in shape)
    if len(shape) == 5:
        return (shape[1] * shape[4], shape[2], shape[3])
    if len(shape) == 4:
        return shape[1:]
    return shape


def layer_key(op: str, inputs: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]) -> tuple:
    """What a layer is matched by: a Conv by (input CHW, kernel size, output CHW), any other
    operator by its type."""
    if op in CONV_NAMES and len(inputs) > 1 and outputs:
        return ("Conv", chw(inputs[0]), tuple(int(v) for v in inputs[1][-2:]), chw(outputs[0]))
    return (op,)


def rknnlite_layers(model: str, feeds: List[np.ndarray], runs: int) -> List[Tuple[tuple, float]]:
    """``[(layer_key, fastest µs), ...]`` of every step of a profiled rknnlite run."""
    best = None
    with rknnlite.Context(model, flags=rknnlite.InitFlag.COLLECT_PERF_MASK) as ctx:
        for _ in range(runs + 1):
            ctx.run(feeds)
            records = ctx.perf_detail(as_text=False).records
            times = [r.time_us for r in records]
            best = times if best is None else [min(a, b) for a, b in zip(best, times)]
    return [(layer_key(r.op_type, r.input_shapes, r.output_shapes), t) for r, t in zip(records, best)
            if r.op_type not in ("InputOperator", "OutputOperator")]


def ort_layers(path: Path, feeds: Dict[str, np.ndarray], runs: int) -> List[Tuple[tuple, float]]:
    """The same from onnxruntime's profile (one thread): every node's fastest kernel time."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(runs + 1):
        session.run(None, feeds)
    with open(session.end_profiling()) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    # a node's events share its name; how many runs the profile holds is onnxruntime's business
    by_node: Dict[str, List[dict]] = {}
    for e in events:
        by_node.setdefault(e["name"], []).append(e)
    rows = []
    for column in by_node.values():
        args = column[0]["args"]
        shapes = [[list(d.values())[0] for d in args.get(k, [])] for k in ("input_type_shape", "output_type_shape")]
        rows.append((layer_key(args.get("op_name", "?"), *shapes), float(min(e["dur"] for e in column))))
    return rows


def compare(ours: List[Tuple[tuple, float]], theirs: List[Tuple[tuple, float]]) -> List[tuple]:
    """``[(key, our µs, their µs, our count, their count), ...]`` summed per key, the biggest
    loss first."""
    sums: Dict[tuple, List[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0, 0])
    for key, t in ours:
        sums[key][0] += t
        sums[key][2] += 1
    for key, t in theirs:
        sums[key][1] += t
        sums[key][3] += 1
    return sorted(((k, *v) for k, v in sums.items()), key=lambda row: row[2] - row[1])


def _label(key: tuple) -> str:
    if key[0] == "Conv":
        (c, h, w), (kh, kw), (m, oh, ow) = key[1], key[2], key[3]
        return f"Conv {kh}x{kw} {c}->{m} {h}x{w} -> {oh}x{ow}"
    return key[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=LIGHT)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--top", type=int, default=25, help="rows of the per-shape table")
    ap.add_argument("--float-dtype", default="float32", choices=("float32", "float16"))
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    path, feeds = light_model(args.model)
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(1):
        model = convert(path, args.float_dtype, tmp)
        ours = rknnlite_layers(model, list(feeds.values()), args.runs)
        theirs = ort_layers(path, feeds, args.runs)
    rows = compare(ours, theirs)
    print(machine())
    print(f"{args.model}, rknnlite {args.float_dtype} against onnxruntime, one thread, fastest of {args.runs} runs "
          f"per layer (µs)\n")
    types: Dict[str, List[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for key, a, b, _, _ in rows:
        types[key[0]][0] += a
        types[key[0]][1] += b
    print("| operator | rknnlite | onnxruntime | difference |\n|---|---:|---:|---:|")
    for op, (a, b) in sorted(types.items(), key=lambda kv: kv[1][1] - kv[1][0]):
        print(f"| {op} | {a:.0f} | {b:.0f} | {a - b:+.0f} |")
    total_a, total_b = sum(v[0] for v in types.values()), sum(v[1] for v in types.values())
    print(f"| **total** | {total_a:.0f} | {total_b:.0f} | {total_a - total_b:+.0f} |\n")
    print("| layer | rknnlite | onnxruntime | difference | count (rknnlite / onnxruntime) |\n|---|---:|---:|---:|---|")
    for key, a, b, na, nb in rows[:args.top]:
        print(f"| {_label(key)} | {a:.0f} | {b:.0f} | {a - b:+.0f} | {na} / {nb} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
