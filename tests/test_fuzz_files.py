"""Damaged model files get a typed error, never a crash, a hang or a believed forged size.

Seeded mutations (``tests/fuzzing.py``) of every vendor file of the repository (the corpus of
``tests/data/vendor`` and the RKNN-Toolkit2 fixtures) go through ``rknnlite.Context(data,
backend="software")`` and one run: truncations, byte flips in the header, the FlatBuffer, its
tables, the nodes' BSON attributes, the register command streams, the weights and the JSON
trailer, and forged 32-bit sizes and offsets in those parts.  Portable models (those of
``conftest._context_models`` and the Conv+Relu one) get raw damage and damage behind their
checksums (re-sealed), and go through the same load and run as they are and encrypted.

Each case runs in a worker process with a time budget and an address-space limit (see
``fuzzing.FuzzWorker``): the outcome must be a result or an ``RKNNError``.  The regression tests
at the end are the cases the fuzzing found, each reduced to the one field that mattered.
"""

from __future__ import annotations

import json
import random
import re
import struct

import pytest

import rknnlite
from conftest import VENDOR_FIXTURES, _context_models, _conv_relu_model
from corpus import CORPUS
from fuzzing import FuzzWorker, CaseFailed, portable_mutations, vendor_mutations, vendor_regions
from rknnlite import ModelInvalidError
from rknnlite.model.envelope import encrypt
from test_vendor_offboard import CORPUS_REFUSED

VENDOR_FILES = sorted(CORPUS.glob("*.rknn")) + sorted((VENDOR_FIXTURES / "rknn").glob("*.rknn"))
#: Mutations per vendor file (the 1.4 MB benchmark model gets fewer: it takes longest to run).
VENDOR_CASES, BENCH_CASES = 20, 8
PORTABLE_CASES, ENCRYPTED_CASES = 64, 24
KEY = bytes(range(32))


def _portable_models() -> dict:
    return dict(_context_models(), conv_relu=_conv_relu_model(channels=4, size=8))


PORTABLE = _portable_models()


@pytest.fixture(scope="module")
def worker():
    w = FuzzWorker()
    yield w
    w.close()


def _check_all(worker, cases, key=None) -> list:
    """The outcome of each of ``cases`` (``[(label, bytes)]``); fails listing every broken case."""
    outcomes, broken = [], []
    for label, data in cases:
        try:
            outcomes.append(worker.check(label, data, key))
        except CaseFailed as e:
            broken.append(str(e))
    assert not broken, f"{len(broken)} of {len(cases)} cases broke the rule:\n" + "\n".join(broken)
    return outcomes


def _seed(name: str) -> int:
    return sum(name.encode()) * 7919


@pytest.mark.parametrize("path", VENDOR_FILES, ids=[p.parent.name + "/" + p.stem for p in VENDOR_FILES])
def test_mutated_vendor_file_loads_and_runs_or_raises_a_typed_error(worker, path):
    data = path.read_bytes()
    count = BENCH_CASES if path.stem.startswith("bench") else VENDOR_CASES
    assert len(_check_all(worker, vendor_mutations(data, _seed(path.name), count))) == count
    assert worker.check("unmutated", data) == ("ModelInvalidError" if path.stem in CORPUS_REFUSED else "ran")


@pytest.mark.parametrize("name", sorted(PORTABLE))
def test_mutated_portable_file_loads_and_runs_or_raises_a_typed_error(worker, name):
    assert len(_check_all(worker, portable_mutations(PORTABLE[name], _seed(name), PORTABLE_CASES))) == PORTABLE_CASES
    assert worker.check("unmutated", PORTABLE[name]) == "ran"


@pytest.mark.parametrize("name", sorted(PORTABLE))
def test_mutated_encrypted_file_loads_and_runs_or_raises_a_typed_error(worker, name):
    # damage inside the envelope (re-sealed portable payloads, encrypted afterwards) ...
    inner = [(label, encrypt(data, KEY, chunk_size=256))
             for label, data in portable_mutations(PORTABLE[name], _seed(name) + 1, ENCRYPTED_CASES)]
    # ... and of the envelope itself: all of it is authenticated
    sealed = encrypt(PORTABLE[name], KEY, chunk_size=256)
    rng = random.Random(_seed(name) + 2)
    outer = []
    for i in range(ENCRYPTED_CASES // 2):
        damaged = bytearray(sealed)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        outer += [(f"envelope-flip#{i}", bytes(damaged)),
                  (f"envelope-truncate#{i}", sealed[:rng.randrange(len(sealed))])]
    assert len(_check_all(worker, inner, KEY)) == len(inner)
    # a damaged envelope never opens: DecryptError, or ModelInvalidError once its magic is gone
    assert set(_check_all(worker, outer, KEY)) <= {"DecryptError", "ModelInvalidError"}
    assert worker.check("unmutated", sealed, KEY) == "ran"


def test_every_vendor_part_is_mutated():
    regions = vendor_regions((CORPUS / "conv_sigmoid_i8.rknn").read_bytes())
    assert set(regions) == {"header", "flatbuffer", "tables", "bson", "regcmd", "weights", "json"}
    mutations = vendor_mutations((CORPUS / "conv_sigmoid_i8.rknn").read_bytes(), 1, 26)
    labels = {label.split("#")[0] for label, _ in mutations}
    assert labels >= {"truncate", "header", "tables-u32", "bson", "regcmd-u32", "weights", "json"}


WORKER_PROBES = """
import os, time

def typed(data, key):
    from fuzzing import exercise
    return exercise(b"RKNN" + bytes(60), None)

def untyped(data, key):
    raise TypeError("not an RKNNError")

def forged_size(data, key):
    return str(len(bytearray(1 << 40)))

def crash(data, key):
    os._exit(3)

def hang(data, key):
    time.sleep(60)
"""


@pytest.mark.parametrize("probe, outcome", [
    ("typed", "ModelInvalidError"), ("untyped", "TypeError: 'not an RKNNError'"), ("forged_size", "MemoryError"),
    ("crash", "the worker died"), ("hang", r"no answer within 0.5 s \(hang\)")])
def test_the_worker_tells_a_typed_error_from_what_breaks_the_rule(tmp_path, probe, outcome):
    (tmp_path / "worker_probes.py").write_text(WORKER_PROBES)
    w = FuzzWorker(f"worker_probes:{probe}", budget=0.5 if probe == "hang" else 30.0, path=str(tmp_path))
    try:
        if probe == "typed":
            assert w.check("case", b"x") == outcome
        else:
            with pytest.raises(CaseFailed, match=f"^case: .*{outcome}"):
                w.check("case", b"x")
            assert w.proc is None or probe in ("untyped", "forged_size")  # a dead or hung worker is replaced
    finally:
        w.close()


# -- regressions: what the fuzzing found, each reduced to the field that mattered ------------------

def _bson(doc: dict) -> bytes:
    """BSON bytes of ``doc`` (int32, double, string, bool, document and array values)."""
    body = b""
    for key, value in doc.items():
        name = key.encode() + b"\0"
        if isinstance(value, bool):
            body += b"\x08" + name + bytes([value])
        elif isinstance(value, int):
            body += b"\x10" + name + struct.pack("<i", value)
        elif isinstance(value, float):
            body += b"\x01" + name + struct.pack("<d", value)
        elif isinstance(value, str):
            body += b"\x02" + name + struct.pack("<i", len(value) + 1) + value.encode() + b"\0"
        elif isinstance(value, dict):
            body += b"\x03" + name + _bson(value)
        else:
            body += b"\x04" + name + _bson({str(i): v for i, v in enumerate(value)})
    return struct.pack("<i", len(body) + 5) + body + b"\0"


def _subgraph_tables(data: bytes):
    from rknnlite.model.flatbuf import FlatBuffer
    from rknnlite.model.rockchip import read_rockchip

    rk = read_rockchip(data)
    root = FlatBuffer(data, rk.header_size, rk.model_size).root("Model")
    return root, next(iter(root.tables(2)))


def _with_node_bson(stem: str, op: str, attrs: dict) -> bytes:
    """Corpus file ``stem`` with the BSON attributes of its first ``op`` node replaced by ``attrs``
    (``{name: value}``, stored as ``{"value": value}`` documents, as the toolkit's are)."""
    data = (CORPUS / f"{stem}.rknn").read_bytes()
    _, sg = _subgraph_tables(data)
    node = next(n for n in sg.tables(1) if n.string(1) == op)
    blob = node.vector(9, 1)
    forged = _bson({k: {"value": v} for k, v in attrs.items()})
    assert len(forged) <= len(blob), "the forged attributes must fit the node's blob"
    out = bytearray(data)
    struct.pack_into("<I", out, blob.pos - 4, len(forged))
    out[blob.pos:blob.pos + len(forged)] = forged
    return bytes(out)


def _with_tensor(stem: str, name: str, shape=None, values=None) -> bytes:
    """Corpus file ``stem`` with tensor ``name``'s model shape (same rank) or the int64 values of
    its stored data (same count) replaced."""
    data = (CORPUS / f"{stem}.rknn").read_bytes()
    root, sg = _subgraph_tables(data)
    tensor = next(t for t in sg.tables(0) if t.string(5) == name)
    out = bytearray(data)
    if shape is not None:
        vec = tensor.vector(4, 4)
        struct.pack_into(f"<{len(vec)}i", out, vec.pos, *shape)
    if values is not None:
        vec = root.vector(20).table(tensor.u32(18)).vector(0, 1)
        struct.pack_into(f"<{len(values)}q", out, vec.pos, *values)
    return bytes(out)


def _load_error(data: bytes, key=None) -> str:
    with pytest.raises(ModelInvalidError) as e:
        rknnlite.Context(data, key=key, backend="software")
    return e.value.message


@pytest.mark.parametrize("stem, op, attrs, message", [
    ("concat_i8", "Concat", {"axis": [1]}, r"BSON attribute 'axis' holds \[1\], not an integer"),
    ("concat_i8", "Concat", {"axis": 7}, "axis 7 of a rank-4 input"),
    ("maxpool_fp16", "MaxPool", {"kernel_shape": [3, 3], "strides": [2]}, "pooling attributes .* do not fit"),
    ("maxpool_fp16", "MaxPool", {"kernel_shape": [3, 3], "strides": [0, 2]}, "pooling attributes .* do not fit"),
    ("maxpool_fp16", "MaxPool", {"kernel_shape": "3"}, "BSON attribute 'kernel_shape' is '3', not a list"),
    ("transpose_i8", "Transpose", {"perm": [0, 2, 3, 3]}, r"perm \[0, 2, 3, 3\] is not a permutation"),
    ("argmax_fp16", "ArgMax", {"axis": {"a": 1}}, r"BSON attribute 'axis' holds \{'a': 1\}, not an integer"),
])
def test_vendor_bson_attributes_of_the_wrong_kind_are_named(stem, op, attrs, message):
    assert re.search(message, _load_error(_with_node_bson(stem, op, attrs)))


def test_a_forged_weight_shape_is_refused_before_anything_is_allocated():
    # [20, 3, 150994947, 3] int8 would be 25 GiB: MemoryError before the check
    data = _with_tensor("avgpool_i8", "w1", shape=[20, 3, 150994947, 3])
    assert "needs 27179090460 bytes; the buffer has" in _load_error(data)


@pytest.mark.parametrize("values, message", [
    ([1, 1, 0], "axis 3 with step 0 on a rank-4 input"),
])
def test_forged_slice_constants_are_named(values, message):
    assert message in _load_error(_with_tensor("slice_i8", "c8", values=values))


def _portable_with(name: str, change) -> bytes:
    """Portable model ``name`` with ``change(graph_dict)`` applied, checksums made valid."""
    from rknnlite.model.container import read_container, write_container

    c = read_container(memoryview(PORTABLE[name]))
    graph = json.loads(json.dumps(c.graph))
    change(graph)
    return write_container(c.metadata, graph, bytes(c.weights))


@pytest.mark.parametrize("change, message", [
    (lambda g: g.update(quant="x"), "malformed graph: quant must be an object"),
    (lambda g: g["quant"]["w"].update(zero_point=[2 ** 40] * 4), r"int8 zero points must lie in \[-128, 127\]"),
    (lambda g: g["quant"]["x"].update(zero_point=[300]), r"int8 zero points must lie in \[-128, 127\]"),
    (lambda g: g["quant"]["w"].update(scale=[1e308] * 4), "scales be normal float32 values"),
    (lambda g: g["quant"]["w"].update(axis=7), r"4 per-channel scales on axis 7 of a \[4, 3, 3, 3\] constant"),
])
def test_forged_portable_quantization_is_refused_at_load(change, message):
    data = _portable_with("conv_i8", change)
    assert re.search(message, _load_error(data))
    assert re.search(message, _load_error(encrypt(data, KEY), KEY))


def test_an_infinite_quantization_axis_is_a_malformed_graph():
    from fuzzing import reseal_portable

    data = _portable_with("conv_i8", lambda g: g["quant"]["w"].update(axis=12345678))
    assert "malformed graph" in _load_error(reseal_portable(data.replace(b"12345678", b"Infinity")))
