"""Mutated model files and the one rule every one of them must follow.

The rule (:func:`exercise`): a model file, however damaged, either loads on the software
backend and runs once, or raises a :class:`rknnlite.RKNNError` (never an
:class:`~rknnlite.errors.RKNNMemoryError`, which would mean a forged size was believed).
Any other exception, a crash of the interpreter or a hang breaks the rule.

:class:`FuzzWorker` applies the rule in a child process (so that a crash or a hang is
seen from outside, and an address-space limit turns an allocation from a forged size
into a failure), one case at a time, each under a time budget.  The seeded mutators
(:func:`vendor_mutations`, :func:`portable_mutations`) aim at the parts of each format
(:func:`vendor_regions`).  ``tests/test_fuzz_files.py`` and the coverage-guided harness
``tools/fuzz/fuzz_models.py`` share this module.

Run as a script (``python fuzzing.py``), it is the worker: frames on stdin, one result
line per frame on stdout.
"""

from __future__ import annotations

import json
import os
import random
import select
import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

#: Elements beyond which a (mutated) model's zero inputs are not allocated: the run is skipped.
MAX_INPUT_ELEMENTS = 1 << 24
#: Address space of the worker: an allocation sized by a forged field fails instead of succeeding.
WORKER_ADDRESS_SPACE = 6 << 30
#: Seconds one case may take before the worker is taken as hung (a guard, not a speed check).
CASE_BUDGET = 30.0

#: Values written over 32-bit fields to forge offsets, counts and sizes.
FORGED_U32 = (0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)


def zero_inputs(ctx) -> Optional[list]:
    """Zero arrays for every input of ``ctx`` (a dynamic-shape model gets its first shape set):
    float32 for float and quantized inputs, the input's own dtype (int64, bool, ...) otherwise;
    ``None`` when they would exceed :data:`MAX_INPUT_ELEMENTS`."""
    import numpy as np

    from rknnlite import QntType

    shapes = [tuple(a.dims) for a in ctx.inputs]
    if any(d < 0 for s in shapes for d in s):
        shapes = [tuple(r.dyn_range[0]) for r in ctx.input_ranges()]
    if sum(int(np.prod(s, dtype=np.int64)) for s in shapes) > MAX_INPUT_ELEMENTS:
        return None
    dtypes = [np.float32 if a.qnt_type != QntType.NONE or np.dtype(a.dtype).kind == "f" else a.dtype
              for a in ctx.inputs]
    return [np.zeros(s, t) for s, t in zip(shapes, dtypes)]


def exercise(data: bytes, key: Optional[bytes] = None) -> str:
    """Load ``data`` on the software backend and run it once on zero inputs.

    Returns ``"ran"``, ``"loaded"`` (inputs too big to allocate here) or the class name of
    the :class:`rknnlite.RKNNError` raised.  Anything else (an
    :class:`~rknnlite.errors.RKNNMemoryError` included) propagates: it breaks the rule."""
    import rknnlite
    from rknnlite.errors import RKNNMemoryError

    try:
        with rknnlite.Context(data, key=key, backend="software") as ctx:
            inputs = zero_inputs(ctx)
            if inputs is None:
                return "loaded"
            ctx.run(inputs)
            return "ran"
    except RKNNMemoryError:
        raise
    except rknnlite.RKNNError as e:
        return type(e).__name__


# -- where the parts of a vendor file are --------------------------------------------------------

def _table_span(table) -> List[Tuple[int, int]]:
    vt_len = struct.unpack_from("<H", table.fb.data, table.vtable)[0]
    return [(table.pos, table.pos + table.size), (table.vtable, table.vtable + vt_len)]


def _vector_span(vec) -> Tuple[int, int]:
    return vec.pos - 4, vec.pos + len(vec) * vec.elem_size


def vendor_regions(data: bytes) -> Dict[str, List[Tuple[int, int]]]:
    """Byte spans ``[start, end)`` of a Rockchip ``.rknn`` file's parts, by name: ``header``,
    ``flatbuffer`` (the whole model section), ``tables`` (the Model, Subgraph, Tensor and Node
    tables with their vtables), ``bson`` (the nodes' ONNX attribute blobs), ``regcmd`` (register
    command streams and task tables), ``weights`` (constant tensors' buffers), ``json`` (the
    trailer).  In an rv1106 container ``flatbuffer`` is its graph section, ``regcmd`` and
    ``weights`` its sections.  Found with the library's own readers."""
    from rknnlite.model.flatbuf import FlatBuffer
    from rknnlite.model.rockchip import read_rockchip
    from rknnlite.model.rknn_graph.graph import KINDS

    rk = read_rockchip(data)
    start, end = rk.header_size, rk.header_size + rk.model_size
    spans: Dict[str, List[Tuple[int, int]]] = {
        "header": [(0, start)], "flatbuffer": [(rk.graph_offset, rk.graph_offset + rk.graph_size)],
        "json": [(end, len(data))], "tables": [], "bson": [], "regcmd": [], "weights": []}
    if rk.packed is not None:  # an rv1106 container: its sections ahead of the graph
        spans["header"] = [(0, rk.packed.tasks[0])]
        spans["regcmd"] = [(o, o + n) for o, n in (rk.packed.tasks, rk.packed.regcmd)]
        spans["weights"] = [(rk.packed.weights[0], rk.packed.weights[0] + rk.packed.weights[1])]
    schema = rk.schema
    root = FlatBuffer(data, rk.graph_offset, rk.graph_size).root("Model")
    spans["tables"] += _table_span(root)
    buffers = root.vector(schema.m_buffers) if schema.m_buffers is not None else None
    for sg in root.tables(schema.m_subgraphs) or ():
        spans["tables"] += _table_span(sg)
        for node in sg.tables(schema.sg_nodes) or ():
            spans["tables"] += _table_span(node)
            blob = node.vector(schema.n_bson, 1) if schema.n_bson is not None else None
            if blob is not None and len(blob):
                spans["bson"].append(_vector_span(blob))
        for tensor in sg.tables(schema.sg_tensors) or ():
            spans["tables"] += _table_span(tensor)
            if schema.t_buffer is None:
                continue
            kind, index = KINDS.get(tensor.u8(schema.t_kind)), tensor.u32(schema.t_buffer)
            if not index or buffers is None or index >= len(buffers):
                continue
            blob = buffers.table(index).vector(0, 1)
            if blob is None or not len(blob):
                continue
            part = "regcmd" if kind in ("regcmd", "task") else "weights" if kind == "const" else None
            if part:
                spans[part].append(_vector_span(blob))
    return {name: sorted(set(s)) for name, s in spans.items() if s}


# -- mutators ------------------------------------------------------------------------------------

def _pick(rng: random.Random, spans: List[Tuple[int, int]], width: int = 1) -> int:
    lo, hi = rng.choice(spans)
    return rng.randrange(lo, max(lo + 1, hi - width + 1))


def flip_bytes(data: bytes, rng: random.Random, spans, count: int) -> bytes:
    """``data`` with ``count`` random bytes inside ``spans`` replaced by random values."""
    out = bytearray(data)
    for _ in range(count):
        pos = _pick(rng, spans)
        if pos < len(out):
            out[pos] = rng.randrange(256) if rng.random() < 0.5 else out[pos] ^ (1 << rng.randrange(8))
    return bytes(out)


def forge_u32(data: bytes, rng: random.Random, spans) -> bytes:
    """``data`` with one aligned 32-bit word inside ``spans`` set to a forged size or offset."""
    out = bytearray(data)
    pos = _pick(rng, spans, 4) & ~3
    if pos + 4 <= len(out):
        value = rng.choice(FORGED_U32 + (len(data), len(data) - pos, rng.getrandbits(32)))
        struct.pack_into("<I", out, pos, value)
    return bytes(out)


def truncate(data: bytes, rng: random.Random, spans=None) -> bytes:
    """``data`` cut at a random point (inside ``spans`` when given)."""
    return data[:_pick(rng, spans) if spans else rng.randrange(len(data))]


#: Vendor mutation kinds: (name, region, mutator).
VENDOR_KINDS = (
    ("truncate", None, lambda d, r, s: truncate(d, r)),
    ("truncate-flatbuffer", "flatbuffer", truncate),
    ("header", "header", lambda d, r, s: flip_bytes(d, r, s, r.randint(1, 2))),
    ("header-u32", "header", forge_u32),
    ("flatbuffer", "flatbuffer", lambda d, r, s: flip_bytes(d, r, s, r.randint(1, 8))),
    ("tables", "tables", lambda d, r, s: flip_bytes(d, r, s, r.randint(1, 3))),
    ("tables-u32", "tables", forge_u32),
    ("bson", "bson", lambda d, r, s: flip_bytes(d, r, s, r.randint(1, 4))),
    ("bson-u32", "bson", forge_u32),
    ("regcmd", "regcmd", lambda d, r, s: flip_bytes(d, r, s, r.randint(1, 6))),
    ("regcmd-u32", "regcmd", forge_u32),
    ("weights", "weights", lambda d, r, s: flip_bytes(d, r, s, r.randint(1, 16))),
    ("json", "json", lambda d, r, s: flip_bytes(d, r, s, r.randint(1, 3))),
)


def vendor_mutations(data: bytes, seed: int, count: int) -> List[Tuple[str, bytes]]:
    """``count`` seeded mutations of a Rockchip file, cycling through :data:`VENDOR_KINDS`
    (kinds whose region the file lacks are passed over): ``[(label, bytes)]``."""
    rng = random.Random(seed)
    regions = vendor_regions(data)
    kinds = [k for k in VENDOR_KINDS if k[1] is None or k[1] in regions]
    out = []
    for i in range(count):
        name, region, mutate = kinds[i % len(kinds)]
        out.append((f"{name}#{i}", mutate(data, rng, regions.get(region))))
    return out


_FORGED_JSON = (None, True, 0, -1, 1, 3, 7, 2 ** 31, 2 ** 40, -2 ** 31, 1e308, -0.0,
                "", "x", "float16", "int8", "NCHW", [], [0], [-1, -1], [2 ** 31, 1], {}, {"a": 1})


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    if path:
        yield path


def _replace(doc, path, value):
    for step in path[:-1]:
        doc = doc[step]
    doc[path[-1]] = value


def portable_mutations(data: bytes, seed: int, count: int) -> List[Tuple[str, bytes]]:
    """``count`` seeded mutations of a portable file: raw truncations and byte flips (caught
    by its checksums), and re-sealed ones whose checksums are recomputed, so the damage
    reaches the metadata, graph and weights readers: a JSON value (or a whole
    object or list) of the ``META`` or ``GRPH`` section replaced by a forged one, or bytes of
    the weights flipped.  ``[(label, bytes)]``."""
    from rknnlite.model.container import read_container, write_container

    rng = random.Random(seed)
    c = read_container(memoryview(data))
    out = []
    for i in range(count):
        roll = i % 8
        if roll == 0:
            out.append((f"truncate#{i}", truncate(data, rng)))
        elif roll == 1:
            out.append((f"flip#{i}", flip_bytes(data, rng, [(0, len(data))], rng.randint(1, 4))))
        else:
            meta, graph = json.loads(json.dumps(c.metadata)), json.loads(json.dumps(c.graph))
            weights = bytearray(c.weights)
            if roll == 7 and weights:
                weights = bytearray(flip_bytes(bytes(weights), rng, [(0, len(weights))], rng.randint(1, 8)))
                label = "weights"
            else:
                label, doc = ("meta", meta) if roll % 2 else ("graph", graph)
                for _ in range(rng.randint(1, 2)):
                    path = rng.choice(list(_leaves(doc)))
                    _replace(doc, path, rng.choice(_FORGED_JSON))
                label += ":" + "/".join(map(str, path))
            out.append((f"{label}#{i}", write_container(meta, graph, bytes(weights))))
    return out


_PORTABLE_HEADER = struct.Struct("<8sHHIIIQQI20x")  # rknnlite.model.container's layout
_PORTABLE_ENTRY = struct.Struct("<4sIQQII")


def reseal_portable(data: bytes) -> bytes:
    """``data`` with the checksums of a portable container recomputed wherever its (possibly
    mutated) header and section table let them be found, so that mutations of a section
    reach the readers behind the checksums.  Anything too broken to reseal is returned as is."""
    import zlib

    out = bytearray(data)
    if len(out) < _PORTABLE_HEADER.size:
        return data
    head = list(_PORTABLE_HEADER.unpack_from(out))
    count, table_offset = head[4], head[7]
    table_end = table_offset + count * _PORTABLE_ENTRY.size
    if count > 64 or table_end > len(out):
        return data
    for i in range(count):
        pos = table_offset + i * _PORTABLE_ENTRY.size
        tag, flags, offset, size, _, zero = _PORTABLE_ENTRY.unpack_from(out, pos)
        if offset + size <= len(out):
            crc = zlib.crc32(out[offset:offset + size])
            _PORTABLE_ENTRY.pack_into(out, pos, tag, flags, offset, size, crc, zero)
    head[5] = zlib.crc32(out[table_offset:table_end])
    head[8] = 0
    head[8] = zlib.crc32(_PORTABLE_HEADER.pack(*head))
    _PORTABLE_HEADER.pack_into(out, 0, *head)
    return bytes(out)


# -- the worker ----------------------------------------------------------------------------------

_FRAME = struct.Struct("<II")


class CaseFailed(AssertionError):
    """A case broke the rule: its label and what happened."""


class FuzzWorker:
    """A child process applying :func:`exercise` to one case at a time.

    :meth:`check` returns the outcome, or raises :class:`CaseFailed` on an exception other
    than an ``RKNNError``, a crash of the child or a case over ``budget`` seconds (the child
    is then replaced).  ``target`` (``"module:function"``, the module importable from
    ``path``) replaces :func:`exercise`, to test the worker itself."""

    def __init__(self, target: str = "fuzzing:exercise", budget: float = CASE_BUDGET, path: str = ""):
        self.target, self.budget, self.path = target, budget, path
        self.proc: Optional[subprocess.Popen] = None

    def _start(self) -> subprocess.Popen:
        import rknnlite

        package_root = str(Path(rknnlite.__file__).resolve().parent.parent)
        env = dict(os.environ, RKNNLITE_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), self.target, self.path],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def check(self, label: str, data: bytes, key: Optional[bytes] = None) -> str:
        """Run one case; returns its outcome (see :func:`exercise`)."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        key = key or b""
        try:
            self.proc.stdin.write(_FRAME.pack(len(key), len(data)) + key + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([self.proc.stdout], [], [], self.budget)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.close()
            what = "no answer within %g s (hang)" % self.budget if not ready else "the worker died"
            raise CaseFailed(f"{label}: {what}")
        status, _, detail = line.decode().rstrip("\n").partition(" ")
        if status != "ok":
            raise CaseFailed(f"{label}: {detail}")
        return detail

    def close(self) -> None:
        """Stop the child (idempotent)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc = None


def _read_exactly(stream, n: int) -> bytes:
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _worker(target: str, path: str) -> None:
    import importlib
    import resource
    import traceback
    import warnings

    if path:
        sys.path.insert(0, path)
    module, _, name = target.partition(":")
    run = getattr(importlib.import_module(module), name)
    warnings.simplefilter("ignore")
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_ADDRESS_SPACE, WORKER_ADDRESS_SPACE))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            key_len, data_len = _FRAME.unpack(_read_exactly(stdin, _FRAME.size))
            key = _read_exactly(stdin, key_len) or None
            data = _read_exactly(stdin, data_len)
        except EOFError:
            return
        try:
            line = "ok " + run(data, key)
        except BaseException as e:  # the rule is broken: report where
            where = traceback.extract_tb(e.__traceback__)[-1]
            line = (f"bad {type(e).__name__}: {str(e)[:300]!r} at {where.filename}:{where.lineno}"
                    .replace("\n", " "))
        stdout.write(line.encode() + b"\n")
        stdout.flush()


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
