"""The portable container: layout, zero-copy loading, versioning and corruption handling."""

from __future__ import annotations

import json
import mmap
import struct
import zlib

import numpy as np
import pytest

from rknnlite.errors import ModelInvalidError
from rknnlite.model import container as ct
from rknnlite.model.graph import Graph, Node
from rknnlite.model.loader import load_model
from rknnlite.model.metadata import build_metadata
from rknnlite.model.portable import read_portable, write_portable
from rknnlite.model.spec import TensorSpec


def _model(weights=None, **meta) -> bytes:
    weights = weights if weights is not None else {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    graph = Graph([Node("MatMul", "mm", ["x", "w"], ["y"])], ["x"], ["y"], weights)
    md = build_metadata([TensorSpec("x", (1, 2), "float32")], [TensorSpec("y", (1, 3), "float32")], **meta)
    return write_portable(md, graph)


@pytest.fixture(scope="module")
def small_model() -> bytes:
    return _model()


def test_magic_is_not_rockchip(small_model):
    assert small_model[:8] == ct.MAGIC
    assert not small_model.startswith(b"RKNN")
    assert not small_model.startswith(b"CYPTRKNN")


def test_round_trip_and_metadata(small_model):
    model = read_portable(memoryview(small_model))
    assert model.container.version == (ct.FORMAT_MAJOR, ct.FORMAT_MINOR)
    assert [t.name for t in model.metadata.inputs] == ["x"]
    assert model.metadata.outputs[0].shape == (1, 3)
    np.testing.assert_array_equal(model.graph.constants["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert [n.op for n in model.graph.nodes] == ["MatMul"]


def test_writer_is_deterministic():
    assert _model() == _model()


def test_every_constant_is_64_byte_aligned_in_the_file():
    weights = {f"c{i}": np.full(i + 1, i, np.int8) for i in range(5)}
    weights["f"] = np.ones((3, 3), np.float64)
    data = _model(weights=dict(weights, w=np.zeros((2, 3), np.float32)))
    model = read_portable(memoryview(data))
    weights_off = next(s.offset for s in model.container.sections if s.tag == b"WGHT")
    assert weights_off % 64 == 0
    for name, arr in model.graph.constants.items():
        addr = arr.__array_interface__["data"][0]
        base = np.frombuffer(data, np.uint8).__array_interface__["data"][0]
        assert (addr - base) % 64 == 0, name
        if name in weights:
            np.testing.assert_array_equal(arr, weights[name])


def test_bytes_load_without_copy(small_model):
    model = read_portable(memoryview(small_model))
    w = model.graph.constants["w"]
    assert np.shares_memory(w, np.frombuffer(small_model, np.uint8))
    assert not w.flags.writeable


def test_bytearray_and_memoryview_load_without_copy(small_model):
    buf = bytearray(small_model)
    loaded = load_model(buf)
    w = loaded.model.graph.constants["w"]
    assert np.shares_memory(w, np.frombuffer(buf, np.uint8))
    loaded2 = load_model(memoryview(buf))
    assert np.shares_memory(loaded2.model.graph.constants["w"], np.frombuffer(buf, np.uint8))


def test_path_is_memory_mapped(tmp_path, small_model):
    path = tmp_path / "m.rknn"
    path.write_bytes(small_model)
    loaded = load_model(str(path))
    assert isinstance(loaded.source.view.obj, mmap.mmap)
    w = loaded.model.graph.constants["w"]
    mapped = np.frombuffer(loaded.source.view, np.uint8)
    assert np.shares_memory(w, mapped)
    assert loaded.source.path == str(path)


def test_pathlike_accepted(tmp_path, small_model):
    path = tmp_path / "m.rknn"
    path.write_bytes(small_model)
    assert load_model(path).format == "rknnlite-portable"


def _patch_header(data: bytes, **fields) -> bytes:
    names = ["magic", "major", "minor", "flags", "count", "table_crc", "file_size", "table_offset", "crc"]
    values = dict(zip(names, ct._HEADER.unpack_from(data, 0)))
    values.update(fields)
    values["crc"] = 0
    header = bytearray(ct._HEADER.pack(*[values[n] for n in names]))
    struct.pack_into("<I", header, 40, zlib.crc32(header))
    return bytes(header) + data[64:]


def test_newer_major_version_is_refused_with_versions_named(small_model):
    data = _patch_header(small_model, major=ct.FORMAT_MAJOR + 1, minor=3)
    with pytest.raises(ModelInvalidError) as e:
        read_portable(memoryview(data))
    msg = str(e.value)
    assert f"{ct.FORMAT_MAJOR + 1}.3" in msg and f"{ct.FORMAT_MAJOR}.0" in msg and "newer" in msg


def test_newer_minor_version_loads(small_model):
    data = _patch_header(small_model, minor=ct.FORMAT_MINOR + 7)
    assert read_portable(memoryview(data)).container.version == (ct.FORMAT_MAJOR, ct.FORMAT_MINOR + 7)


def _with_extra(small_model, required: bool) -> bytes:
    model = read_portable(memoryview(small_model))
    graph_dict = dict(model.container.graph)
    return ct.write_container(model.container.metadata, graph_dict, bytes(model.container.weights),
                              extra_sections=[(b"XTRA", b"future data", required)])


def test_unknown_optional_section_is_skipped(small_model):
    model = read_portable(memoryview(_with_extra(small_model, required=False)))
    assert b"XTRA" in [s.tag for s in model.container.sections]
    assert model.graph.constants["w"].shape == (2, 3)


def test_unknown_required_section_is_refused(small_model):
    with pytest.raises(ModelInvalidError, match="XTRA"):
        read_portable(memoryview(_with_extra(small_model, required=True)))


def test_every_prefix_truncation_is_model_invalid(small_model):
    for n in range(len(small_model)):
        with pytest.raises(ModelInvalidError):
            load_model(small_model[:n])


def test_random_byte_flips_are_model_invalid(small_model):
    rng = np.random.default_rng(1234)
    for _ in range(1000):
        data = bytearray(small_model)
        pos = int(rng.integers(len(data)))
        data[pos] ^= int(rng.integers(1, 256))
        with pytest.raises(ModelInvalidError):
            load_model(bytes(data))


def test_appended_bytes_are_model_invalid(small_model):
    with pytest.raises(ModelInvalidError, match="size mismatch"):
        load_model(small_model + b"\0" * 64)


def test_checksum_mismatch_is_named(small_model):
    data = bytearray(small_model)
    data[-1] ^= 0xFF
    with pytest.raises(ModelInvalidError, match="checksum"):
        load_model(bytes(data))


def _rewrite(small_model, mutate) -> bytes:
    """Re-serialise with a mutated metadata or graph dict, checksums kept valid."""
    model = read_portable(memoryview(small_model))
    meta, graph = json.loads(json.dumps(model.container.metadata)), json.loads(json.dumps(model.container.graph))
    mutate(meta, graph)
    return ct.write_container(meta, graph, bytes(model.container.weights))


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda m, g: m["inputs"][0].update(shape=[1, 2**40]), "absurd dim"),
        (lambda m, g: m["inputs"][0].update(shape=[-5, 2]), "absurd dim"),
        (lambda m, g: m["inputs"][0].update(shape=[1] * 17), "at most 16"),
        (lambda m, g: m["inputs"][0].update(dtype="complex128"), "is not one of"),
        (lambda m, g: m["inputs"][0].update(dtype="float64"), "is not one of"),
        (lambda m, g: m.pop("outputs"), "missing key"),
        (lambda m, g: m.update(float_dtype="float8"), "float_dtype"),
        (lambda m, g: g["constants"]["w"].update(dtype="weird"), "unknown dtype"),
        (lambda m, g: g["constants"]["w"].update(offset=1 << 40), "outside the weights"),
        (lambda m, g: g["constants"]["w"].update(shape=[2**31, 2**31]), "needs"),
        (lambda m, g: g["constants"]["w"].update(shape=[-1, 3]), "absurd"),
        (lambda m, g: g["nodes"][0].update(inputs=["nope", "w"]), "before anything produces it"),
        (lambda m, g: g.update(outputs=["ghost"]), "never produced"),
        (lambda m, g: g.update(nodes="x"), "malformed graph"),
    ],
)
def test_semantic_errors_are_named(small_model, mutate, expected):
    with pytest.raises(ModelInvalidError, match=expected):
        load_model(_rewrite(small_model, mutate))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ModelInvalidError, match="not found"):
        load_model(str(tmp_path / "missing.rknn"))
    with pytest.raises(ModelInvalidError, match="directory"):
        load_model(str(tmp_path))
    empty = tmp_path / "empty.rknn"
    empty.write_bytes(b"")
    with pytest.raises(ModelInvalidError, match="empty"):
        load_model(str(empty))


def test_unknown_format_names_first_bytes():
    with pytest.raises(ModelInvalidError, match="unknown model format"):
        load_model(b"GIF89a" + b"\0" * 100)


def test_wrong_argument_type():
    with pytest.raises(TypeError, match="path"):
        load_model(12345)


def test_scalar_and_non_contiguous_constants_keep_their_shape():
    weights = {"w": np.zeros((2, 3), np.float32), "s": np.array(7, np.int64),
               "t": np.arange(12, dtype=np.int32).reshape(3, 4).T}
    model = read_portable(memoryview(_model(weights=weights)))
    assert model.graph.constants["s"].shape == () and int(model.graph.constants["s"]) == 7
    np.testing.assert_array_equal(model.graph.constants["t"], weights["t"])


def test_non_finite_float_attributes_round_trip():
    # JSON has no inf or nan; an opset-10 Pad's value=-inf (tf2onnx's max-pool padding) is one
    attrs = {"value": float("-inf"), "max": float("inf"), "floats": [1.5, float("nan"), float("-inf")],
             "plain": 0.25, "name": "inf"}
    graph = Graph([Node("Pad", "p", ["x"], ["y"], attrs)], ["x"], ["y"], {})
    md = build_metadata([TensorSpec("x", (1, 2), "float32")], [TensorSpec("y", (1, 4), "float32")])
    got = read_portable(memoryview(write_portable(md, graph))).graph.nodes[0].attrs
    assert got["value"] == float("-inf") and got["max"] == float("inf") and got["plain"] == 0.25
    assert got["floats"][0] == 1.5 and np.isnan(got["floats"][1]) and got["floats"][2] == float("-inf")
    assert got["name"] == "inf"  # a string attribute stays a string


def test_an_unknown_non_finite_float_text_is_refused():
    d, constants = Graph([Node("Relu", "r", ["x"], ["y"], {"alpha": {"$float": "infinity"}})], ["x"], ["y"],
                         {}).to_dict()
    with pytest.raises(ModelInvalidError, match=r"\$float must be one of"):
        Graph.from_dict(d, constants)
