"""Decode a vendor ``.rknn`` (v6) for investigation, with the project's own FlatBuffer reader.

A maintainer tool, not library code: it reads what ``docs/vendor-format-notes.md``
describes (tensors, nodes, param tables, BSON attributes, buffers, the regcmd
stream and the task records) into plain Python objects, so that the
``investigate_*.py`` scripts can diff files.  Run it directly to dump a file::

    python tools/vendor_corpus/rkdump.py tests/data/vendor/conv_leaky01_i8.rknn [--regs]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from rknnlite.model.flatbuf import FlatBuffer, Table  # noqa: E402
from rknnlite.model.rknn_graph.regcmd import Task  # noqa: E402

DTYPES = {1: "f32", 3: "i8", 5: "i16", 6: "i32", 7: "i64", 10: "f16", 13: "raw", 16: "bf16"}
KINDS = {1: "input", 2: "output", 3: "act", 4: "const", 5: "shape", 6: "lut", 8: "genconst", 9: "regcmd",
         10: "task"}
TARGETS = {0x0201: "CNA", 0x0801: "CORE", 0x1001: "DPU", 0x2001: "RDMA", 0x4001: "PPU", 0x8001: "PPU_RDMA",
           0x0101: "PC", 0x0041: "PC41", 0x0081: "PC81"}


@dataclass
class Tensor:
    index: int
    name: str
    dtype: int
    layout: int
    kind: int
    npu_shape: Tuple[int, ...]
    shape: Tuple[int, ...]
    scale: Tuple[float, ...] = ()
    zp: Tuple[int, ...] = ()
    vmin: Tuple[float, ...] = ()
    vmax: Tuple[float, ...] = ()
    qmethod: Optional[str] = None
    size: int = 0
    offset: int = 0
    buffer: int = 0
    table: Optional[Table] = field(default=None, repr=False)

    def desc(self) -> str:
        q = f" s={self.scale[:2]} zp={self.zp[:2]}" if self.scale else ""
        return (f"T{self.index:<3d} {KINDS.get(self.kind, self.kind)!s:8s} {DTYPES.get(self.dtype, self.dtype)!s:4s} "
                f"L{self.layout:<3d} {self.name!r} npu={list(self.npu_shape)} shape={list(self.shape)} "
                f"buf={self.buffer} size={self.size}{q}")


@dataclass
class Node:
    index: int
    op: str
    name: str
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    param_type: int
    param: Optional[Table]
    bson: Dict[str, object]
    table: Table = field(repr=False)


class RknnFile:
    """One ``.rknn`` file, decoded lazily per subgraph."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        (self.model_size,) = struct.unpack_from("<Q", self.data, 0x10)
        self.header = self.data[:64]
        self.fb = FlatBuffer(self.data, 64, self.model_size, os.path.basename(path))
        self.root = self.fb.root("Model")
        self.subgraphs = self.root.tables(2, "Subgraph") or []
        self.buffers = [t.vector(0, 1) for t in (self.root.tables(20, "Buffer") or [])]

    def buffer(self, index: int) -> bytes:
        vec = self.buffers[index]
        return b"" if vec is None else bytes(vec.raw())

    def tensors(self, sg: int = 0) -> List[Tensor]:
        out = []
        for i, t in enumerate(self.subgraphs[sg].tables(0, "Tensor") or []):
            out.append(Tensor(
                index=i, name=t.string(5, ""), dtype=t.u8(0), layout=t.u8(1), kind=t.u8(2),
                npu_shape=t.scalars(3, "i32") or (), shape=t.scalars(4, "i32") or (),
                scale=t.scalars(10, "f32") or (), zp=t.scalars(11, "i32") or (),
                vmin=t.scalars(8, "f32") or (), vmax=t.scalars(9, "f32") or (), qmethod=t.string(6),
                size=t.u32(12), offset=t.u32(13), buffer=t.u32(18), table=t))
        return out

    def nodes(self, sg: int = 0) -> List[Node]:
        out = []
        for i, n in enumerate(self.subgraphs[sg].tables(1, "Node") or []):
            raw = n.vector(9, 1)
            bson = decode_bson(bytes(raw.raw())) if raw is not None and len(raw) else {}
            out.append(Node(index=i, op=n.string(1, ""), name=n.string(2, ""),
                            inputs=n.scalars(4, "i32") or (), outputs=n.scalars(5, "i32") or (),
                            param_type=n.u8(7), param=n.table(8, "Param"), bson=bson, table=n))
        return out

    def tensor_data(self, t: Tensor) -> bytes:
        return self.buffer(t.buffer) if t.buffer else b""

    def regcmd(self, sg: int = 0) -> np.ndarray:
        """The regcmd blob as u64 entries."""
        for t in self.tensors(sg):
            if t.kind == 9:
                return np.frombuffer(self.tensor_data(t), "<u8")
        return np.zeros(0, "<u8")

    def tasks(self, sg: int = 0) -> List[Task]:
        for t in self.tensors(sg):
            if t.kind == 10:
                raw = self.tensor_data(t)
                return [Task(*struct.unpack_from("<8IQ", raw, off)) for off in range(0, len(raw) - 39, 40)]
        return []

    def task_regs(self, task: Task, sg: int = 0) -> List[Tuple[int, int, int]]:
        """``[(target, reg, value)]`` written by one task."""
        cmds = self.regcmd(sg)
        start = task.regcmd_addr // 8
        out = []
        for c in cmds[start:start + task.regcfg_amount]:
            c = int(c)
            out.append((c >> 48, c & 0xFFFF, (c >> 16) & 0xFFFFFFFF))
        return out


def decode_bson(raw: bytes) -> Dict[str, object]:
    """A minimal BSON document decoder (types seen in .rknn: doc, array, string, i32, i64, double, bool)."""
    def doc(pos: int):
        (length,) = struct.unpack_from("<i", raw, pos)
        end = pos + length - 1
        pos += 4
        out = {}
        while pos < end:
            t = raw[pos]
            pos += 1
            k = raw.index(b"\0", pos)
            key = raw[pos:k].decode("utf-8", "replace")
            pos = k + 1
            if t == 0x01:
                out[key] = struct.unpack_from("<d", raw, pos)[0]
                pos += 8
            elif t == 0x02:
                (n,) = struct.unpack_from("<i", raw, pos)
                out[key] = raw[pos + 4:pos + 3 + n].decode("utf-8", "replace")
                pos += 4 + n
            elif t in (0x03, 0x04):
                (n,) = struct.unpack_from("<i", raw, pos)
                sub = doc(pos)[0]
                out[key] = list(sub.values()) if t == 0x04 else sub
                pos += n
            elif t == 0x08:
                out[key] = bool(raw[pos])
                pos += 1
            elif t == 0x10:
                out[key] = struct.unpack_from("<i", raw, pos)[0]
                pos += 4
            elif t == 0x12:
                out[key] = struct.unpack_from("<q", raw, pos)[0]
                pos += 8
            elif t == 0x0A:
                out[key] = None
            else:
                out[key] = f"<bson type {t:#x}>"
                break
        return out, end + 1
    if len(raw) < 5:
        return {}
    return doc(0)[0]


def raw_slots(table: Optional[Table]) -> Dict[int, str]:
    """Every present slot of an unknown table, shown as several guesses (u32/i32/f32 and, when
    the slot looks like an offset, as string or vector)."""
    if table is None:
        return {}
    out = {}
    for slot in range(table.num_slots):
        pos = table.field_pos(slot)
        if not pos:
            continue
        room = table.pos + table.size - pos
        inline = bytes(table.fb.data[pos:pos + min(room, 8)])
        shown = f"raw={inline.hex()}"
        if room >= 4:
            (u32,) = struct.unpack_from("<I", inline)
            (f32,) = struct.unpack_from("<f", inline)
            shown += f" u32={u32} f32={f32:.6g}"
            try:
                target = table.fb.deref(pos, "probe")
                n = struct.unpack_from("<I", table.fb.data, target)[0]
                if n < 4096:
                    body = bytes(table.fb.data[target + 4:target + 4 + min(n * 4, 64)])
                    shown += f" -> len={n} bytes={body[:n].hex()}"
                    if n and n * 4 <= len(body):
                        shown += f" i32s={struct.unpack_from(f'<{n}i', body)} f32s=" + str(
                            [round(v, 6) for v in struct.unpack_from(f'<{n}f', body)])
            except Exception:
                pass
        out[slot] = shown
    return out


def regs_by_node(f: RknnFile, sg: int = 0, core_copy: int = 0) -> Dict[int, List[Dict[Tuple[int, int], int]]]:
    """For each node index, the register writes of its tasks (first copy of the stream only when
    ``core_copy`` is 0): ``{op_idx: [{(target, reg): value}, ...]}``."""
    out: Dict[int, List[Dict[Tuple[int, int], int]]] = {}
    tasks = f.tasks(sg)
    for task in tasks:
        regs = {(t, r): v for t, r, v in f.task_regs(task, sg)}
        out.setdefault(task.op_idx, []).append(regs)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="dump a vendor .rknn")
    ap.add_argument("path")
    ap.add_argument("--sg", type=int, default=0)
    ap.add_argument("--regs", action="store_true", help="also print every task's register writes")
    args = ap.parse_args(argv)
    f = RknnFile(args.path)
    print(f"model_size={f.model_size} subgraphs={len(f.subgraphs)} buffers={len(f.buffers)}")
    for t in f.tensors(args.sg):
        print(t.desc())
    for n in f.nodes(args.sg):
        print(f"N{n.index:<3d} {n.op:16s} {n.name!r} in={list(n.inputs)} out={list(n.outputs)} "
              f"ptype={n.param_type} bson={n.bson}")
        for slot, shown in raw_slots(n.param).items():
            print(f"       param[{slot}] {shown}")
    tasks = f.tasks(args.sg)
    print(f"{len(f.regcmd(args.sg))} regcmd entries, {len(tasks)} tasks")
    for i, task in enumerate(tasks):
        print(f"task {i}: {task}")
        if args.regs:
            for tgt, reg, val in f.task_regs(task, args.sg):
                print(f"    {TARGETS.get(tgt, hex(tgt)):8s} {reg:#06x} = {val:#010x} ({val})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
