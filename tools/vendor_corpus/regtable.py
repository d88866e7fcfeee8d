"""Tabulate the registers one node's first NPU task writes, across several ``.rknn`` files.

Only registers whose value differs between the files are shown (``--all`` shows
every one), so an attribute that changes between two models stands out::

    python tools/vendor_corpus/regtable.py --op Conv --target DPU tests/data/vendor/conv_*_fp16.rknn

``--op`` picks, in each file, the first node whose op type starts with that
prefix (e.g. ``Conv`` matches ``ConvLeakyRelu``); ``--task`` picks which of that
node's tasks (default 0, the first one that enables the CNA/DPU pipeline).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rkdump import TARGETS, RknnFile  # noqa: E402

_BY_NAME = {v: k for k, v in TARGETS.items()}


def node_regs(f: RknnFile, op_prefix: str, task_no: int = 0, sg: int = 0,
              occurrence: int = 0) -> Tuple[Optional[str], Dict[Tuple[int, int], int]]:
    """``(op type, {(target, reg): value})`` for the chosen task of the matching node."""
    nodes = [n for n in f.nodes(sg) if n.op.startswith(op_prefix)]
    if len(nodes) <= occurrence:
        return None, {}
    node = nodes[occurrence]
    tasks = [t for t in f.tasks(sg) if t.op_idx == node.index]
    if len(tasks) <= task_no:
        return node.op, {}
    regs: Dict[Tuple[int, int], int] = {}
    for tgt, reg, val in f.task_regs(tasks[task_no], sg):
        regs[(tgt, reg)] = val  # the last write wins, as on the hardware
    return node.op, regs


def show(v: int) -> str:
    hi = float(np.frombuffer(struct.pack("<H", v >> 16), "<f2")[0])
    return f"{v:08x}({hi:.4g})"


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--op", default="Conv")
    ap.add_argument("--occurrence", type=int, default=0)
    ap.add_argument("--task", type=int, default=0)
    ap.add_argument("--target", default=None, help="CNA, DPU, RDMA, PPU, ... (default: all)")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--by-reg", action="store_true", help="one line per register, one column per file")
    args = ap.parse_args(argv)
    table = {}
    ops = {}
    for path in args.files:
        op, regs = node_regs(RknnFile(path), args.op, args.task, occurrence=args.occurrence)
        if args.target:
            regs = {k: v for k, v in regs.items() if k[0] == _BY_NAME[args.target]}
        table[os.path.basename(path)] = regs
        ops[os.path.basename(path)] = op
    keys = sorted({k for regs in table.values() for k in regs})
    if not args.all:
        keys = [k for k in keys if len({regs.get(k) for regs in table.values()}) > 1]
    if args.by_reg:
        names = list(table)
        print("reg       " + "  ".join(n[:22].ljust(22) for n in names))
        print("op        " + "  ".join(str(ops[n])[:22].ljust(22) for n in names))
        for k in keys:
            cells = "  ".join((show(table[n][k]) if k in table[n] else "-").ljust(22) for n in names)
            print(f"{TARGETS.get(k[0], hex(k[0]))}:{k[1]:04x}  {cells}")
        return 0
    width = max(len(n) for n in table)
    print(" " * width + "  op" + " " * 14 + "".join(f"{TARGETS.get(t, hex(t))}:{r:04x}".ljust(19) for t, r in keys))
    for name, regs in table.items():
        cells = "".join((show(regs[k]) if k in regs else "-").ljust(19) for k in keys)
        print(f"{name.ljust(width)}  {str(ops[name]):16s}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
