"""Rockchip ``.rknn`` reader and the FlatBuffer reader under it."""

from __future__ import annotations

import json
import random
import struct
import tracemalloc

import pytest

from rknnlite.errors import ModelInvalidError
from rknnlite.model.flatbuf import FlatBuffer
from rknnlite.model.rockchip import (
    CYPT_MAGIC,
    RKNN_MAGIC,
    RockchipModel,
    is_rockchip,
    is_rockchip_encrypted,
    read_rockchip,
    rockchip_encrypted_info,
)
from rknnlite.model.source import open_source

# ---------------------------------------------------------------------------
# What each vendor file must yield

# name -> (inputs, outputs, dynamic shape sets); each tensor: (name, shape, dtype)
EXPECTED = {
    "convnet_fp16": (
        [("input", (1, 3, 32, 32), "float16")],
        [("prob", (1, 10), "float16")],
        [],
    ),
    "convnet_i8": (
        [("input", (1, 3, 32, 32), "int8")],
        # the softmax output stays float: JSON vx_type "", FlatBuffer output info float16
        [("prob", (1, 10), "float16")],
        [],
    ),
    "add_mul_fp16": (
        [("a", (1, 3, 8, 8), "float16"), ("b", (1, 3, 8, 8), "float16")],
        [("sum", (1, 3, 8, 8), "float16"), ("prod", (1, 3, 8, 8), "float16")],
        [],
    ),
    "add_mul_i8": (
        [("a", (1, 3, 8, 8), "int8"), ("b", (1, 3, 8, 8), "int8")],
        [("sum", (1, 3, 8, 8), "int8"), ("prod", (1, 3, 8, 8), "int8")],
        [],
    ),
    "dyn_conv_fp16": (
        [("x", (1, 3, 32, 32), "float16")],
        [("y", (1, 2, 32, 32), "float16")],
        [[(1, 3, 32, 32)], [(1, 3, 24, 40)], [(1, 3, 16, 16)]],
    ),
    "dyn_conv_i8": (
        [("x", (1, 3, 32, 32), "int8")],
        [("y", (1, 2, 32, 32), "int8")],
        [[(1, 3, 32, 32)], [(1, 3, 24, 40)], [(1, 3, 16, 16)]],
    ),
}


@pytest.fixture(scope="module")
def rknn_files(vendor_rknn_files):
    files = {p.stem: p for p in vendor_rknn_files}
    if not files:
        pytest.skip("no vendor .rknn files")
    return files


@pytest.fixture(scope="module")
def small_file(rknn_files):
    """The bytes of the smallest vendor file."""
    path = min(rknn_files.values(), key=lambda p: p.stat().st_size)
    return path.read_bytes()


def _json_dtype(entry: dict) -> str:
    return entry["dtype"]["vx_type"] or entry["dtype"]["qnt_type"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_vendor_file(rknn_files, name):
    if name not in rknn_files:
        pytest.skip(f"{name}.rknn missing")
    model = read_rockchip(open_source(rknn_files[name]))
    inputs, outputs, dynamic = EXPECTED[name]

    assert isinstance(model, RockchipModel)
    assert model.label == str(rknn_files[name])
    assert model.format_version == 6
    assert model.flatbuffer is True
    assert model.file_size == rknn_files[name].stat().st_size
    assert model.header_size + model.model_size + 8 < model.file_size
    assert [(t.name, t.shape, t.dtype) for t in model.inputs] == inputs
    assert [(t.name, t.shape, t.dtype) for t in model.outputs] == outputs
    for t in model.inputs + model.outputs:
        assert t.layout == ("NCHW" if len(t.shape) == 4 else "UNDEFINED")

    # The dtypes agree with the JSON trailer wherever it names one.
    norm = {e["url"]: e for e in model.json["norm_tensor"]}
    for t in model.inputs + model.outputs:
        jd = _json_dtype(norm[t.name])
        assert t.dtype == (jd or "float16")
        if name.endswith("_fp16"):
            assert jd == "" and t.dtype == "float16"

    assert model.target_platforms == ["rk3588"]
    assert model.target_platform == "rk3588"
    assert model.toolkit_version == "2.5.0"
    assert model.compiler_version == "2.5.0"
    assert model.toolkit_full_version.startswith("2.5.0(compiler version: 2.5.0")
    assert model.npu_target == "RKNPU v2"
    assert model.framework == "ONNX"
    assert model.custom_string == ""
    assert model.batch_size == 1
    assert model.dynamic_shapes == dynamic
    assert model.is_dynamic == bool(dynamic)
    assert model.inference_type == ("dynamic_shape" if dynamic else "static_shape")
    assert model.num_subgraphs == (len(dynamic) if dynamic else 1)
    assert isinstance(model.description, dict) and "quant_tab" in model.description
    assert isinstance(model.input_info, dict) and set(model.input_info) == {t.name for t in model.inputs}

    summary = model.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["format"] == "rockchip-rknn"
    assert summary["format_version"] == "6"
    assert summary["size"] == model.file_size
    assert [i["name"] for i in summary["inputs"]] == [t[0] for t in inputs]
    assert summary["dynamic_shapes"] == [[list(s) for s in st] for st in dynamic]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_vendor_quant_params(rknn_files, name):
    if name not in rknn_files:
        pytest.skip(f"{name}.rknn missing")
    model = read_rockchip(rknn_files[name].read_bytes())
    quant_tab = model.description["quant_tab"]
    for t in model.inputs + model.outputs:
        if t.dtype != "int8":
            assert t.quant is None
            continue
        q = t.quant
        assert q is not None and q.dtype == "int8" and q.axis is None
        assert len(q.scale) == 1 and len(q.zero_point) == 1
        # Asymmetric int8 from the calibrated range: scale = (max - min) / 255.
        lo, hi = quant_tab[t.name]["min"][0], quant_tab[t.name]["max"][0]
        assert q.scale[0] == pytest.approx((hi - lo) / 255, rel=1e-5)
        assert abs(q.zero_point[0] - (-128 - lo / q.scale[0])) <= 1
    if name == "convnet_i8":  # reference: scale 0.03125, zero point -64
        assert model.inputs[0].quant.scale == (0.03125,)
        assert model.inputs[0].quant.zero_point == (-64,)


def test_dynamic_shapes_match_manifest(vendor_fixtures, rknn_files):
    manifest = json.loads((vendor_fixtures / "manifest.json").read_text())
    for run in manifest["runs"]:
        stem = run["rknn_file"].rsplit("/", 1)[-1][: -len(".rknn")]
        if stem not in rknn_files:
            continue
        model = read_rockchip(rknn_files[stem].read_bytes())
        want = run["config"].get("dynamic_input")
        if not want:
            assert model.dynamic_shapes == []
            continue
        got = sorted(tuple(tuple(s) for s in st) for st in model.dynamic_shapes)
        assert got == sorted(tuple(tuple(s) for s in st) for st in want)


def test_source_and_buffer_agree(rknn_files):
    path = rknn_files.get("convnet_i8") or next(iter(rknn_files.values()))
    from_path = read_rockchip(open_source(path))
    from_bytes = read_rockchip(path.read_bytes(), label="x.rknn")
    from_view = read_rockchip(memoryview(bytearray(path.read_bytes())))
    assert from_bytes.label == "x.rknn"
    assert from_view.label == "<buffer>"
    for m in (from_bytes, from_view):
        assert m.inputs == from_path.inputs and m.outputs == from_path.outputs
        assert m.summary() == from_path.summary()


# ---------------------------------------------------------------------------
# Detection and encrypted files


def test_detection(small_file):
    assert is_rockchip(small_file)
    assert not is_rockchip_encrypted(small_file)
    assert not is_rockchip(b"RKNN")
    assert not is_rockchip(b"RKNN\x01\0\0\0" + bytes(64))
    assert not is_rockchip(b"")
    enc = CYPT_MAGIC + bytes(100)
    assert is_rockchip_encrypted(enc) and not is_rockchip(enc)
    assert RKNN_MAGIC == b"RKNN"


def test_encrypted():
    enc = CYPT_MAGIC + bytes(120)
    info = rockchip_encrypted_info(enc)
    assert info.size == 128
    assert "librknnrt" in info.note
    assert info.summary()["size"] == 128
    assert info.summary()["format"] == "rockchip-encrypted"
    with pytest.raises(ModelInvalidError, match="encrypted"):
        read_rockchip(enc, label="secret.rknn")
    with pytest.raises(ModelInvalidError):
        rockchip_encrypted_info(b"RKNN\0\0\0\0" + bytes(64))


# ---------------------------------------------------------------------------
# Corrupt and crafted files


def _rebuild(data: bytes, *, version=None, model_size=None, payload=None, json_bytes=None,
             json_len=None, tail=b"") -> bytes:
    """Reassemble a file from a vendor file's parts, overriding some."""
    ms = struct.unpack_from("<Q", data, 0x10)[0]
    jl = struct.unpack_from("<Q", data, 0x40 + ms)[0]
    header = bytearray(data[:0x40])
    body = data[0x40 : 0x40 + ms] if payload is None else payload
    trailer = data[0x48 + ms : 0x48 + ms + jl] if json_bytes is None else json_bytes
    if version is not None:
        struct.pack_into("<Q", header, 0x08, version)
    struct.pack_into("<Q", header, 0x10, len(body) if model_size is None else model_size)
    jlen = len(trailer) if json_len is None else json_len
    return bytes(header) + body + struct.pack("<Q", jlen) + trailer + tail


def _json_of(data: bytes) -> dict:
    ms = struct.unpack_from("<Q", data, 0x10)[0]
    jl = struct.unpack_from("<Q", data, 0x40 + ms)[0]
    return json.loads(data[0x48 + ms : 0x48 + ms + jl])


def test_rebuild_roundtrip(small_file):
    assert _rebuild(small_file) == small_file


def test_every_truncation_is_rejected(small_file):
    lengths = list(range(0, 201)) + list(range(201, len(small_file), 89)) + [len(small_file) - 1]
    for n in lengths:
        with pytest.raises(ModelInvalidError):
            read_rockchip(small_file[:n], label="trunc.rknn")


def test_random_byte_flips(small_file):
    rng = random.Random(20250)
    parsed = rejected = 0
    for _ in range(1000):
        data = bytearray(small_file)
        pos = rng.randrange(len(data))
        data[pos] ^= rng.randrange(1, 256)
        try:
            model = read_rockchip(bytes(data), label="flip.rknn")
        except ModelInvalidError as e:
            assert "flip.rknn" in str(e)
            rejected += 1
        except Exception as e:  # pragma: no cover - the point of the test
            pytest.fail(f"flip at {pos:#x} escaped as {type(e).__name__}: {e}")
        else:
            assert isinstance(model, RockchipModel)
            parsed += 1
    assert parsed + rejected == 1000


def test_random_flips_in_structural_bytes(small_file):
    """Flips concentrated on the header, FlatBuffer tables and trailer (where checks matter)."""
    rng = random.Random(7)
    n = len(small_file)
    for i in range(600):
        data = bytearray(small_file)
        pos = rng.randrange(0, 3000) if i % 2 else rng.randrange(n - 1500, n - 4)
        if i % 3:
            data[pos] ^= rng.randrange(1, 256)
        else:
            struct.pack_into("<I", data, pos, rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, rng.randrange(1 << 32)]))
        try:
            read_rockchip(bytes(data))
        except ModelInvalidError:
            pass


@pytest.mark.parametrize(
    "field,value,match",
    [
        (0x10, (1 << 64) - 1, "model section"),
        (0x10, 1 << 40, "model section"),
        (0x08, 7, "format version"),
        (0x08, 0, "format version"),
        (0x08, (1 << 64) - 1, "format version"),
    ],
)
def test_crafted_header(small_file, field, value, match):
    data = bytearray(small_file)
    struct.pack_into("<Q", data, field, value)
    with pytest.raises(ModelInvalidError, match=match):
        read_rockchip(bytes(data), label="crafted.rknn")


def test_huge_json_len(small_file):
    data = _rebuild(small_file, json_len=(1 << 64) - 1)
    with pytest.raises(ModelInvalidError, match="JSON trailer"):
        read_rockchip(data)
    data = _rebuild(small_file, json_len=1 << 33)
    with pytest.raises(ModelInvalidError, match="JSON trailer"):
        read_rockchip(data)


def test_huge_sizes_allocate_nothing():
    data = bytearray(b"RKNN\0\0\0\0" + bytes(120))
    struct.pack_into("<Q", data, 0x08, 6)
    struct.pack_into("<Q", data, 0x10, 1 << 62)
    tracemalloc.start()
    try:
        with pytest.raises(ModelInvalidError):
            read_rockchip(bytes(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_header_errors(small_file):
    with pytest.raises(ModelInvalidError, match="shorter than the 64-byte"):
        read_rockchip(small_file[:63], label="short.rknn")
    with pytest.raises(ModelInvalidError, match="short.rknn"):
        read_rockchip(small_file[:10], label="short.rknn")
    with pytest.raises(ModelInvalidError, match="magic"):
        read_rockchip(b"VPMN" + small_file[4:])
    with pytest.raises(ModelInvalidError, match="bytes 4..8"):
        read_rockchip(b"RKNN\x01\0\0\0" + small_file[8:])
    with pytest.raises(ModelInvalidError, match="after the JSON"):
        read_rockchip(small_file + b"\0")
    with pytest.raises(ModelInvalidError, match="after the JSON"):
        read_rockchip(_rebuild(small_file, tail=b"extra"))
    with pytest.raises(ModelInvalidError, match="empty"):
        read_rockchip(_rebuild(small_file, json_bytes=b""))


def test_missing_flatbuffer_identifier(small_file):
    data = bytearray(small_file)
    data[0x44:0x48] = b"XXXX"
    with pytest.raises(ModelInvalidError, match="identifier"):
        read_rockchip(bytes(data))


def test_older_flatbuffer_versions_accepted(small_file):
    for version in (2, 5):
        model = read_rockchip(_rebuild(small_file, version=version))
        assert model.format_version == version and model.flatbuffer


def test_packed_rv1106_container(small_file):
    """0x1004 whose sections cannot be located: the JSON trailer is all we read, and
    ``graph_error`` says why (tests/test_vendor_rv1106.py reads real ones)."""
    payload = struct.pack("<III", 0x18, 0xFFFFFFFF, 1) + bytes(range(256)) * 4
    data = _rebuild(small_file, version=0x1004, payload=payload)
    model = read_rockchip(data, label="rv1106.rknn")
    want = read_rockchip(small_file)
    assert model.flatbuffer is False and model.packed is None
    assert model.graph_error.startswith("its section table (task area 4294967295")
    assert "never observed" in read_rockchip(_rebuild(small_file, version=0x1003, payload=payload)).graph_error
    assert model.format_version == 0x1004
    assert [(t.name, t.shape) for t in model.inputs] == [(t.name, t.shape) for t in want.inputs]
    assert [(t.name, t.shape) for t in model.outputs] == [(t.name, t.shape) for t in want.outputs]
    assert all(t.dtype in ("float16", "int8") for t in model.inputs + model.outputs)
    assert model.target_platforms == want.target_platforms
    assert model.toolkit_version == want.toolkit_version
    for attr in ("npu_target", "compiler_version", "toolkit_full_version", "target_platform",
                 "framework", "custom_string", "batch_size", "inference_type", "description"):
        assert getattr(model, attr) is None
    assert model.dynamic_shapes == []
    assert model.summary()["flatbuffer"] is False


def _with_json(data: bytes, mutate) -> bytes:
    info = _json_of(data)
    mutate(info)
    return _rebuild(data, json_bytes=json.dumps(info).encode())


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda j: j.pop("norm_tensor"), "norm_tensor"),
        (lambda j: j.pop("graph"), "graph"),
        (lambda j: j.__setitem__("graph", {}), "graph"),
        (lambda j: j["norm_tensor"][0].pop("url"), "name"),
        (lambda j: j["norm_tensor"][0].__setitem__("size", [1, -2, 3, 3]), "absurd"),
        (lambda j: j["norm_tensor"][0].__setitem__("size", [1, 3, (1 << 31) + 1, 3]), "absurd"),
        (lambda j: j["norm_tensor"][0].__setitem__("size", [1] * 17), "dims"),
        (lambda j: j["norm_tensor"][0].__setitem__("size", [1, 3.0, 2, 2]), "non-integer"),
        (lambda j: j["norm_tensor"][0].__setitem__("size", "1x3"), "dims"),
        (lambda j: j["norm_tensor"][0].__setitem__("dtype", {"vx_type": "complex128"}), "dtype"),
        (lambda j: j["graph"][0].__setitem__("right_tensor_id", 99), "does not exist"),
        (lambda j: j["graph"][0].__setitem__("left_tensor_id", 5), "indices"),
        (lambda j: j["graph"][0].__setitem__("left", "middle"), "left"),
        (lambda j: j.__setitem__("input_num", 9), "input_num"),
        (lambda j: j.__setitem__("target_platform", "rk3588"), "target_platform"),
        (lambda j: (j.pop("output_num"), j.__setitem__("graph", [g for g in j["graph"] if g["left"] == "input"])),
         "no inputs or no outputs"),
        (lambda j: j.__setitem__("graph", [g for g in j["graph"] if g["left"] == "input"]), "output_num"),
    ],
)
def test_bad_json_trailer(small_file, mutate, match):
    with pytest.raises(ModelInvalidError, match=match):
        read_rockchip(_with_json(small_file, mutate), label="json.rknn")


def test_bad_json_encoding(small_file):
    with pytest.raises(ModelInvalidError, match="UTF-8"):
        read_rockchip(_rebuild(small_file, json_bytes=b'{"a": "\xff"}'))
    with pytest.raises(ModelInvalidError, match="not valid JSON"):
        read_rockchip(_rebuild(small_file, json_bytes=b'{"a": '))
    with pytest.raises(ModelInvalidError, match="not a JSON object"):
        read_rockchip(_rebuild(small_file, json_bytes=b"[1, 2]"))
    with pytest.raises(ModelInvalidError, match="not valid JSON"):
        read_rockchip(_rebuild(small_file, json_bytes=b"[" * 200000))


def test_dynamic_dim_minus_one_allowed(small_file):
    def mutate(j):
        j["norm_tensor"][0]["size"][0] = -1

    model = read_rockchip(_with_json(small_file, mutate))
    assert model.inputs[0].shape[0] == -1


def test_unparsable_description_is_not_fatal(rknn_files):
    path = rknn_files.get("convnet_i8")
    if path is None:
        pytest.skip("convnet_i8.rknn missing")
    data = bytearray(path.read_bytes())
    at = bytes(data).index(b"{'attrs'")
    data[at] = ord("(")  # same length, no longer a literal
    model = read_rockchip(bytes(data))
    assert model.description is None
    # the quant params come from the Subgraph tensors, not the description
    assert model.inputs[0].quant.scale == (0.03125,)


def test_description_is_never_evaluated():
    from rknnlite.model.rockchip import _literal_dict

    assert _literal_dict(b"__import__('os').system('false')") is None
    assert _literal_dict(b"{'a': [1, 2]}") == {"a": [1, 2]}
    assert _literal_dict(b"{'a': " * 100000) is None
    assert _literal_dict(b"\xff\xfe") is None
    assert _literal_dict(b"[1]") is None


# ---------------------------------------------------------------------------
# FlatBuffer reader on a hand-built buffer


class _Builder:
    """Lays out a FlatBuffer by hand: root table first, children after (uoffsets go forward)."""

    def __init__(self, ident=b"TEST"):
        self.buf = bytearray(struct.pack("<I", 0) + ident)
        self.refs = []  # (position of a uoffset, key of the target)
        self.where = {}

    def _align(self, n=4):
        while len(self.buf) % n:
            self.buf.append(0)

    def table(self, key, fields, num_slots=None):
        """fields: {slot: ("fmt", value) | ("ref", key)}; each field gets an 8-byte cell."""
        num_slots = max(fields, default=-1) + 1 if num_slots is None else num_slots
        self._align(8)
        vt = len(self.buf)
        offsets = [0] * num_slots
        for slot in fields:
            if slot < num_slots:
                offsets[slot] = 4 + 8 * sorted(fields).index(slot)
        obj_len = 4 + 8 * len(fields)
        self.buf += struct.pack(f"<HH{num_slots}H", 4 + 2 * num_slots, obj_len, *offsets)
        self._align(4)
        pos = len(self.buf)
        self.buf += struct.pack("<i", pos - vt)
        for slot in sorted(fields):
            kind, value = fields[slot]
            cell = len(self.buf)
            if kind == "ref":
                self.buf += bytes(4)
                self.refs.append((cell, value))
            else:
                self.buf += struct.pack("<" + kind, value)
            self.buf += bytes(cell + 8 - len(self.buf))
        self.where[key] = pos
        return pos

    def string(self, key, raw: bytes):
        self._align()
        self.where[key] = len(self.buf)
        self.buf += struct.pack("<I", len(raw)) + raw + b"\0"

    def vector(self, key, fmt, values):
        self._align(8)
        if len(self.buf) % 8 == 0:
            self.buf += bytes(4)
        self.where[key] = len(self.buf)
        self.buf += struct.pack(f"<I{len(values)}{fmt}", len(values), *values)

    def ref_vector(self, key, keys):
        self._align()
        self.where[key] = len(self.buf)
        self.buf += struct.pack("<I", len(keys))
        for k in keys:
            self.refs.append((len(self.buf), k))
            self.buf += bytes(4)

    def finish(self, root_key):
        self.refs.append((0, root_key))
        for pos, key in self.refs:
            struct.pack_into("<I", self.buf, pos, self.where[key] - pos)
        return bytes(self.buf)


def _sample():
    b = _Builder()
    b.table(
        "root",
        {
            0: ("B", 200),
            1: ("b", -5),
            2: ("H", 65000),
            3: ("h", -300),
            4: ("I", 4000000000),
            5: ("i", -123456),
            6: ("Q", 1 << 60),
            7: ("q", -(1 << 50)),
            8: ("f", 1.5),
            9: ("d", -2.25),
            10: ("ref", "name"),
            11: ("ref", "ints"),
            12: ("ref", "kids"),
            13: ("ref", "words"),
            14: ("ref", "child"),
            16: ("ref", "floats"),
        },
        num_slots=18,  # slot 15 and 17 absent, slot 20 beyond the vtable
    )
    b.ref_vector("kids", ["kid0", "kid1"])
    b.ref_vector("words", ["w0", "w1"])
    b.table("child", {0: ("i", 42), 1: ("ref", "childname")})
    b.table("kid0", {0: ("i", 10)})
    b.table("kid1", {0: ("i", 11)})
    b.string("name", "héllo".encode())
    b.string("childname", b"inner")
    b.string("w0", b"a")
    b.string("w1", b"bc")
    b.vector("ints", "i", [1, -2, 3])
    b.vector("floats", "f", [0.5, 0.25])
    return b.finish("root"), b.where


def test_flatbuf_reads_everything():
    data, where = _sample()
    fb = FlatBuffer(data, label="sample")
    assert fb.identifier() == b"TEST"
    root = fb.root()
    assert root.num_slots == 18
    assert root.u8(0) == 200
    assert root.i8(1) == -5
    assert root.u16(2) == 65000
    assert root.i16(3) == -300
    assert root.u32(4) == 4000000000
    assert root.i32(5) == -123456
    assert root.u64(6) == 1 << 60
    assert root.i64(7) == -(1 << 50)
    assert root.f32(8) == 1.5
    assert root.f64(9) == -2.25
    assert root.bool(0) is True
    assert root.string(10) == "héllo"
    assert root.bytes(10) == "héllo".encode()
    assert root.scalars(11, "i32") == (1, -2, 3)
    assert root.scalars(16, "f32") == (0.5, 0.25)
    kids = root.tables(12, "Kid")
    assert [k.i32(0) for k in kids] == [10, 11]
    assert root.strings(13) == ["a", "bc"]
    child = root.table(14, "Child")
    assert child.i32(0) == 42 and child.string(1) == "inner"
    vec = root.vector(12)
    assert len(vec) == 2 and vec.table(1).i32(0) == 11
    with pytest.raises(IndexError):
        vec.table(2)
    # absent fields and slots past the vtable give defaults
    for slot in (15, 17, 20, 100):
        assert not root.has(slot)
        assert root.i32(slot, 7) == 7
        assert root.string(slot) is None
        assert root.table(slot) is None
        assert root.vector(slot) is None
        assert root.scalars(slot, "i32") is None


def test_flatbuf_with_base_offset():
    data, _ = _sample()
    framed = b"\xaa" * 13 + data + b"\xbb" * 7
    fb = FlatBuffer(memoryview(framed), base=13, size=len(data))
    root = fb.root()
    assert root.string(10) == "héllo"
    assert root.scalars(11, "i32") == (1, -2, 3)
    with pytest.raises(ModelInvalidError):
        FlatBuffer(framed, base=len(framed) + 1)
    with pytest.raises(ModelInvalidError):
        FlatBuffer(framed, base=13, size=len(framed))


def _patched(data, pos, fmt, value):
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, pos, value)
    return bytes(out)


def _field_cell(data, table_pos, slot):
    vt = table_pos - struct.unpack_from("<i", data, table_pos)[0]
    return table_pos + struct.unpack_from("<H", data, vt + 4 + 2 * slot)[0]


def test_flatbuf_out_of_range():
    data, where = _sample()
    root_pos = where["root"]

    def read(buf, what):
        fb = FlatBuffer(buf, label="bad")
        root = fb.root()
        if what == "string":
            return root.string(10)
        if what == "ints":
            return root.scalars(11, "i32")
        if what == "kids":
            return [k.i32(0) for k in root.tables(12)]
        if what == "words":
            return root.strings(13)
        if what == "child":
            return root.table(14).i32(0)
        return root.i32(5)

    cases = [
        # root offset past the end, and zero
        (_patched(data, 0, "I", len(data) + 100), "root"),
        (_patched(data, 0, "I", 0), "root"),
        # vtable soffset pointing before the buffer / past its end
        (_patched(data, root_pos, "i", root_pos + 1000), "root"),
        (_patched(data, root_pos, "i", -len(data)), "root"),
        # vtable length odd / too short / longer than the buffer
        (_patched(data, root_pos - struct.unpack_from("<i", data, root_pos)[0], "H", 3), "root"),
        (_patched(data, root_pos - struct.unpack_from("<i", data, root_pos)[0], "H", 2), "root"),
        (_patched(data, root_pos - struct.unpack_from("<i", data, root_pos)[0], "H", 0xFFFE), "root"),
        # table inline size past the buffer
        (_patched(data, root_pos - struct.unpack_from("<i", data, root_pos)[0] + 2, "H", 0xFFFF), "root"),
        # string / vector offsets past the end; lengths larger than what is left
        (_patched(data, _field_cell(data, root_pos, 10), "I", len(data)), "string"),
        (_patched(data, where["name"], "I", 0xFFFFFFFF), "string"),
        (_patched(data, where["ints"], "I", 0x40000000), "ints"),
        (_patched(data, where["kids"], "I", 0xFFFFFFFF), "kids"),
        (_patched(data, where["kids"] + 4, "I", len(data)), "kids"),
        (_patched(data, where["words"] + 8, "I", 0), "words"),
        (_patched(data, where["w1"], "I", 1 << 31), "words"),
        (_patched(data, _field_cell(data, root_pos, 14), "I", len(data) - _field_cell(data, root_pos, 14) - 2), "child"),
        # invalid UTF-8
        (_patched(data, where["name"] + 4, "B", 0xFF), "string"),
    ]
    for buf, what in cases:
        with pytest.raises(ModelInvalidError, match="bad: FlatBuffer"):
            read(buf, what)

    # a field offset outside its table's inline size
    vt = root_pos - struct.unpack_from("<i", data, root_pos)[0]
    with pytest.raises(ModelInvalidError, match="outside the table"):
        FlatBuffer(_patched(data, vt + 4 + 2 * 5, "H", 0x7FF0)).root().i32(5)

    # every truncation either reads or raises ModelInvalidError
    for n in range(len(data)):
        try:
            for what in ("root", "string", "ints", "kids", "words", "child"):
                read(data[:n], what)
        except ModelInvalidError:
            pass


def test_flatbuf_too_short():
    for raw in (b"", b"\x08\0\0\0", b"\x08\0\0\0TES"):
        fb = FlatBuffer(raw)
        assert fb.identifier() == b""
        with pytest.raises(ModelInvalidError):
            fb.root()
