"""Diff two vendor ``.rknn`` files field by field (never byte by byte: padding is garbage).

Compares tensors (names, shapes, quant params), nodes (op, param table, BSON), every
non-regcmd buffer, and the regcmd stream entry by entry (same position, decoded as
target / register / value).  Used to locate where one ONNX attribute lands, e.g.::

    python tools/vendor_corpus/rkdiff.py tests/data/vendor/conv_leaky01_fp16.rknn \
        tests/data/vendor/conv_leaky03_fp16.rknn
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from typing import List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rkdump import TARGETS, RknnFile, raw_slots  # noqa: E402


def _f(v: int) -> str:
    """A 32-bit register value also shown as f32 and as two fp16 halves."""
    f32 = struct.unpack("<f", struct.pack("<I", v))[0]
    lo, hi = np.frombuffer(struct.pack("<I", v), "<f2")
    return f"{v:#010x} ({v}; f32 {f32:.6g}; f16 lo {float(lo):.6g} hi {float(hi):.6g})"


def diff(a: RknnFile, b: RknnFile, sg: int = 0, show_regs: bool = True) -> List[str]:
    out = []
    ta, tb = a.tensors(sg), b.tensors(sg)
    if len(ta) != len(tb):
        out.append(f"tensor count {len(ta)} vs {len(tb)}")
    for x, y in zip(ta, tb):
        for attr in ("name", "dtype", "layout", "kind", "npu_shape", "shape", "scale", "zp", "vmin", "vmax", "size"):
            if getattr(x, attr) != getattr(y, attr):
                out.append(f"T{x.index} {x.name}.{attr}: {getattr(x, attr)} vs {getattr(y, attr)}")
        if x.kind not in (9, 10) and x.buffer and y.buffer:
            da, db = a.tensor_data(x), b.tensor_data(y)
            n = min(len(da), len(db), x.size or len(da))
            if da[:n] != db[:n]:
                idx = [i for i in range(n) if da[i] != db[i]]
                out.append(f"T{x.index} {x.name} data differs in {len(idx)} of {n} bytes, first at {idx[:8]}")
    na, nb = a.nodes(sg), b.nodes(sg)
    for x, y in zip(na, nb):
        if x.op != y.op:
            out.append(f"N{x.index} op {x.op} vs {y.op}")
        if x.bson != y.bson:
            out.append(f"N{x.index} bson {x.bson} vs {y.bson}")
        if x.param_type != y.param_type or raw_slots(x.param) != raw_slots(y.param):
            out.append(f"N{x.index} param {x.param_type}:{raw_slots(x.param)} vs {y.param_type}:{raw_slots(y.param)}")
    ra, rb = a.regcmd(sg), b.regcmd(sg)
    if len(ra) != len(rb):
        out.append(f"regcmd length {len(ra)} vs {len(rb)}")
    # Map regcmd index -> (task index, op_idx) to say which node an entry belongs to.
    owner = {}
    for i, t in enumerate(a.tasks(sg)):
        for k in range(t.regcmd_addr // 8, t.regcmd_addr // 8 + t.regcfg_amount):
            owner[k] = (i, t.op_idx)
    if show_regs:
        for k in range(min(len(ra), len(rb))):
            if ra[k] != rb[k]:
                ca, cb = int(ra[k]), int(rb[k])
                tgt, reg = ca >> 48, ca & 0xFFFF
                out.append(f"regcmd[{k}] task/op {owner.get(k)} {TARGETS.get(tgt, hex(tgt))} {reg:#06x}: "
                           f"{_f((ca >> 16) & 0xFFFFFFFF)}  vs  "
                           f"{TARGETS.get(cb >> 48, hex(cb >> 48))} {cb & 0xFFFF:#06x} {_f((cb >> 16) & 0xFFFFFFFF)}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="field-by-field diff of two vendor .rknn files")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--sg", type=int, default=0)
    args = ap.parse_args(argv)
    for line in diff(RknnFile(args.a), RknnFile(args.b), args.sg):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
