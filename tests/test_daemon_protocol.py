"""Open Inference Protocol v2 encoding (rknnlite.daemon.protocol): JSON and binary tensors."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from oip_requests import binary_body

from rknnlite.daemon.protocol import (DATATYPES, HEADER_LENGTH, ProtocolError, datatype_of, dtype_of,
                                      encode_infer_response, error_body, parse_infer_request)


def _json_body(inputs, **extra) -> bytes:
    return json.dumps(dict({"inputs": inputs}, **extra)).encode()


def test_json_tensors_nested_and_flat():
    req = parse_infer_request(_json_body([
        {"name": "a", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4]]},
        {"name": "b", "shape": [3], "datatype": "INT64", "data": [1, -2, 3]},
        {"name": "m", "shape": [2], "datatype": "BOOL", "data": [True, False]},
        {"name": "s", "shape": [1, 2], "datatype": "BYTES", "data": ["hi", "there"]},
    ], id="r1"))
    assert req.id == "r1" and req.outputs is None and not req.binary_output
    a, b, m, s = (t.data for t in req.inputs)
    assert a.dtype == np.float32 and a.tolist() == [[1, 2], [3, 4]]
    assert b.dtype == np.int64 and b.tolist() == [1, -2, 3]
    assert m.dtype == np.bool_ and m.tolist() == [True, False]
    assert s.tolist() == [[b"hi", b"there"]]


def test_binary_tensors_are_views_of_the_body():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = np.array([[7, -1]], dtype=np.int8)
    s = np.array([b"ab", b""], dtype=object)
    body, n = binary_body([("x", x), ("i", i), ("s", s)],
                          outputs=[{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}])
    req = parse_infer_request(body, n)
    got = {t.name: t.data for t in req.inputs}
    np.testing.assert_array_equal(got["x"], x)
    np.testing.assert_array_equal(got["i"], i)
    assert got["s"].tolist() == [b"ab", b""]
    assert not got["x"].flags.writeable  # a view of the request body, not a copy
    assert [(o.name, o.binary) for o in req.outputs] == [("y", True), ("z", False)]


def test_binary_data_output_is_the_default_for_outputs():
    body, n = binary_body([("x", np.zeros(2, np.float32))], outputs=[{"name": "y"}],
                          binary_data_output=True)
    req = parse_infer_request(body, n)
    assert req.binary_output and req.outputs[0].binary


def test_mixed_json_and_binary_inputs():
    x = np.ones((2,), np.float16)
    header = json.dumps({"inputs": [
        {"name": "j", "shape": [1], "datatype": "UINT8", "data": [200]},
        {"name": "x", "shape": [2], "datatype": "FP16", "parameters": {"binary_data_size": 4}}]}).encode()
    req = parse_infer_request(header + x.tobytes(), str(len(header)))
    assert req.inputs[0].data.tolist() == [200] and req.inputs[1].data.dtype == np.float16


@pytest.mark.parametrize("body, header, fragment", [
    (b"{not json", None, "malformed JSON"),
    (b"[1, 2]", None, "must be a JSON object"),
    (b"{}", None, "'inputs'"),
    (_json_body([{"name": "a", "shape": [2], "datatype": "FP99", "data": [1, 2]}]), None, "unknown datatype"),
    (_json_body([{"name": "a", "shape": [3], "datatype": "FP32", "data": [1, 2]}]), None, "2 data elements"),
    (_json_body([{"name": "a", "shape": [-1], "datatype": "FP32", "data": [1]}]), None, "non-negative"),
    (_json_body([{"name": "a", "shape": [2], "datatype": "FP32", "data": ["x", "y"]}]), None, "not a list of FP32"),
    (_json_body([{"name": "a", "shape": [1], "datatype": "BOOL", "data": [3]}]), None, "true/false"),
    # numpy turned these into inf with a RuntimeWarning on stderr (a 500 where warnings are errors)
    (_json_body([{"name": "a", "shape": [1], "datatype": "FP16", "data": [2 ** 63]}]), None,
     "input 'a': data holds a number out of FP16's range"),
    (_json_body([{"name": "a", "shape": [1], "datatype": "FP32", "data": [1e308]}]), None, "out of FP32's range"),
    (_json_body([{"name": "a", "shape": [1], "datatype": "FP32"}]), None, "neither 'data'"),
    (_json_body([{"shape": [1], "datatype": "FP32", "data": [1]}]), None, "name must be"),
    (_json_body([{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]}], outputs="y"), None, "'outputs'"),
    (b'{"inputs": []}', "x", "must be an integer"),
    (b'{"inputs": []}', "999", "outside the body"),
])
def test_malformed_requests_name_the_problem(body, header, fragment):
    with pytest.raises(ProtocolError) as info:
        parse_infer_request(body, header)
    assert info.value.status == 400
    assert fragment in info.value.message


def test_binary_size_mismatches():
    x = np.zeros(4, np.float32)
    body, n = binary_body([("x", x)])
    with pytest.raises(ProtocolError, match="runs past the end"):
        parse_infer_request(body[:-1], n)
    with pytest.raises(ProtocolError, match="no input claims"):
        parse_infer_request(body + b"\0", n)
    doc = {"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}
    header = json.dumps(doc).encode()
    with pytest.raises(ProtocolError, match="needs 12"):
        parse_infer_request(header + x.tobytes(), str(len(header)))
    doc = {"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}]}
    header = json.dumps(doc).encode()
    with pytest.raises(ProtocolError, match="BYTES element of 3 bytes"):  # says 3 bytes, holds 2
        parse_infer_request(header + struct.pack("<I", 3) + b"ab", str(len(header)))
    doc["inputs"][0]["parameters"]["binary_data_size"] = 9
    header = json.dumps(doc).encode()
    with pytest.raises(ProtocolError, match="2 BYTES elements for shape"):
        parse_infer_request(header + struct.pack("<I", 1) + b"a" + struct.pack("<I", 0), str(len(header)))


def test_encode_json_and_binary_outputs():
    y = np.arange(6, dtype=np.float32).reshape(2, 3)
    z = np.array([True, False])
    body, n = encode_infer_response("m", "1", "abc", [("y", y, False), ("z", z, False)])
    assert n is None
    doc = json.loads(body)
    assert doc == {"model_name": "m", "model_version": "1", "id": "abc", "outputs": [
        {"name": "y", "datatype": "FP32", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]},
        {"name": "z", "datatype": "BOOL", "shape": [2], "data": [True, False]}]}
    body, n = encode_infer_response("m", "1", None, [("y", y, True), ("z", z, False), ("w", y[:, :1], True)])
    doc = json.loads(body[:n])
    assert "id" not in doc
    assert doc["outputs"][0]["parameters"] == {"binary_data_size": 24}
    assert doc["outputs"][2]["parameters"] == {"binary_data_size": 8}
    tail = body[n:]
    np.testing.assert_array_equal(np.frombuffer(tail[:24], np.float32).reshape(2, 3), y)
    np.testing.assert_array_equal(np.frombuffer(tail[24:], np.float32), [0, 3])


def test_bytes_outputs_round_trip():
    s = np.array([b"a", b"bcd"], dtype=object)
    body, n = encode_infer_response("m", "1", None, [("s", s, True)])
    assert body[n:] == struct.pack("<I", 1) + b"a" + struct.pack("<I", 3) + b"bcd"
    body, n = encode_infer_response("m", "1", None, [("s", s, False)])
    assert json.loads(body)["outputs"][0]["data"] == ["a", "bcd"]


def test_datatype_mapping_both_ways():
    for name, dt in DATATYPES.items():
        assert dtype_of(name) == dt
        assert datatype_of(dt) == name
    assert datatype_of(np.dtype(">f4")) == "FP32"
    with pytest.raises(ProtocolError, match="unknown datatype"):
        dtype_of("FLOAT")
    with pytest.raises(ProtocolError, match="no Open Inference Protocol datatype"):
        datatype_of(np.complex64)


def test_error_body_and_header_name():
    assert json.loads(error_body("bad 'x'")) == {"error": "bad 'x'"}
    assert HEADER_LENGTH == "Inference-Header-Content-Length"
