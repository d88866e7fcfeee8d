"""Doctored copies of vendor ``.rknn`` files, for the tests that check a lowering refuses by name
what it does not know."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

from rknnlite.model.flatbuf import FlatBuffer
from rknnlite.model.rockchip import read_rockchip
from rknnlite.model.rknn_graph.graph import KINDS
from rknnlite.model.schema import T3, V6

_GENERATED = next(code for code, kind in KINDS.items() if kind == "generated")


def doctored_copy(source: Path, tmp_path: Path, patch: Callable[[bytearray], None]) -> str:
    """The path of a copy of ``source`` in ``tmp_path`` whose bytes ``patch`` changed in place."""
    data = bytearray(Path(source).read_bytes())
    patch(data)
    path = Path(tmp_path) / f"doctored_{Path(source).stem}.rknn"
    path.write_bytes(bytes(data))
    return str(path)


def _graph(data: bytearray) -> FlatBuffer:
    """The FlatBuffer graph of a vendor file's bytes (the model section, or an rv1106 container's
    graph section)."""
    rk = read_rockchip(bytes(data))
    return FlatBuffer(data, rk.graph_offset, rk.graph_size)


def subgraph_table(data: bytearray):
    """The first subgraph's FlatBuffer table of a vendor file's bytes."""
    return _graph(data).root("Model").vector(2).table(0)


def tensor_table(data: bytearray, name: str):
    """The FlatBuffer table of the tensor called ``name`` in the first subgraph."""
    return next(t for t in subgraph_table(data).tables(0) if t.string(5, "") == name)


def node_tables(data: bytearray, op: str) -> list:
    """The FlatBuffer tables of the first subgraph's nodes of type ``op`` (V6 files), in order."""
    return [n for n in subgraph_table(data).tables(V6.sg_nodes) if n.string(V6.n_type) == op]


def tensor_bytes(data: bytearray, name: str) -> memoryview:
    """The stored bytes of tensor ``name``, a view into ``data`` (writes doctor the file)."""
    rk = read_rockchip(bytes(data))
    if rk.packed is not None:  # an rv1106 container: its sections, and constants at offsets into one
        if name in ("regcmd", "task"):
            start, size = getattr(rk.packed, "regcmd" if name == "regcmd" else "tasks")
            return memoryview(data)[start:start + size]
        t = tensor_table(data, name)
        section = rk.packed.generated if t.u8(T3.t_kind) == _GENERATED else rk.packed.weights
        start = section[0] + t.u32(T3.t_offset)
        return memoryview(data)[start:start + t.u32(T3.t_size)]
    t = tensor_table(data, name)
    vec = _graph(data).root().vector(20).table(t.u32(18)).vector(0, 1)
    return memoryview(data)[vec.pos:vec.pos + len(vec.raw())]


def patch_registers(target: int, regs, change, indexed: bool = False):
    """A patch rewriting every regcmd write of ``(target, reg)``, ``reg`` in ``regs`` (value ``v`` ->
    ``change(v)``; ``indexed``: ``change(v, n)``, ``n`` counting those writes from 0).  It asserts
    that the file writes one at least."""
    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, "regcmd")
        found = 0
        for at in range(0, len(view) - 7, 8):
            (entry,) = struct.unpack_from("<Q", view, at)
            if entry >> 48 == target and entry & 0xFFFF in regs:
                old = (entry >> 16) & 0xFFFFFFFF
                value = (change(old, found) if indexed else change(old)) & 0xFFFFFFFF
                struct.pack_into("<Q", view, at, (entry & ~(0xFFFFFFFF << 16)) | (value << 16))
                found += 1
        assert found

    return patch


def register_values(source: Path, target: int, reg: int) -> set:
    """The values the tasks of vendor file ``source`` write to register ``reg`` of unit ``target``."""
    from rknnlite.model.loader import load_model
    from rknnlite.model.rknn_graph.lower import read_graph
    from rknnlite.model.rknn_graph.regcmd import read_tasks, task_writes

    loaded = load_model(str(source))
    graph = read_graph(loaded.payload, loaded.model)
    sg = graph.subgraphs[0]
    kinds = {t.kind: t for t in sg.tensors if t.kind in ("task", "regcmd")}
    regcmd = graph.tensor_data(sg, kinds["regcmd"])
    where = Path(source).name
    return {value for task in read_tasks(graph.tensor_data(sg, kinds["task"]), where)
            for t, r, value in task_writes(regcmd, task, where) if (t, r) == (target, reg)}
