"""Open Inference Protocol v2 (KServe v2) request and response encoding.

Pure functions and small records, no HTTP: :func:`parse_infer_request` turns a request
body into numpy arrays, :func:`encode_infer_response` turns outputs into a body.  Both
speak the JSON tensor format and the binary tensor data extension:

* JSON tensors: ``{"name", "shape", "datatype", "data"}`` with ``data`` a flat or nested
  list in row-major order (``BYTES`` elements are strings).
* Binary extension: the body is a JSON header of ``Inference-Header-Content-Length``
  bytes followed by raw tensors in the order of the inputs whose ``parameters`` carry
  ``binary_data_size`` (little-endian, row-major; a ``BYTES`` element is a 4-byte
  little-endian length then its bytes).  Outputs are sent binary when their request
  ``parameters.binary_data`` is true, or when the request's ``parameters.binary_data_output``
  is true and the output does not say otherwise.

Binary input arrays are read-only views into the request body (no copy); JSON inputs
are new arrays.  Errors are :class:`ProtocolError` with the HTTP status to answer.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError

__all__ = ["DATATYPES", "ProtocolError", "InferInput", "InferRequest", "RequestedOutput", "datatype_of",
           "dtype_of", "parse_infer_request", "encode_infer_response", "error_body", "HEADER_LENGTH"]

#: Header naming the JSON part's byte length in a binary-extension body.
HEADER_LENGTH = "Inference-Header-Content-Length"

#: Protocol datatype -> numpy dtype (little-endian); ``BYTES`` -> object arrays of ``bytes``.
DATATYPES: Dict[str, np.dtype] = {
    "BOOL": np.dtype("bool"),
    "UINT8": np.dtype("<u1"), "UINT16": np.dtype("<u2"), "UINT32": np.dtype("<u4"), "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"), "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"), "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
    "BYTES": np.dtype("object"),
}
_DATATYPE_OF_KIND = {(dt.kind, dt.itemsize): name for name, dt in DATATYPES.items() if name != "BYTES"}


class ProtocolError(InvalidParamError):
    """A request the protocol layer refuses; ``status`` is the HTTP status to answer (4xx,
    or 503 when the server is saturated) and the message goes into ``{"error": ...}``."""

    def __init__(self, message: str, status: int = 400, headers: Optional[Dict[str, str]] = None):
        super().__init__(message, op="infer")
        self.status = int(status)
        self.headers = dict(headers or {})


def error_body(message: str) -> bytes:
    """The protocol's error body ``{"error": message}`` as UTF-8 JSON bytes."""
    return json.dumps({"error": message}).encode()


def datatype_of(dtype) -> str:
    """The protocol datatype name of a numpy dtype (``float32`` -> ``"FP32"``, object -> ``"BYTES"``).

    Raises:
        ProtocolError: a dtype the protocol has no name for (complex, datetime...).
    """
    dt = np.dtype(dtype)
    if dt.kind in "OSU":
        return "BYTES"
    name = _DATATYPE_OF_KIND.get((dt.kind, dt.itemsize))
    if name is None:
        raise ProtocolError(f"numpy dtype {dt} has no Open Inference Protocol datatype")
    return name


def dtype_of(datatype: str) -> np.dtype:
    """The numpy dtype of a protocol datatype name.

    Raises:
        ProtocolError: an unknown name (the message lists the known ones).
    """
    dt = DATATYPES.get(datatype) if isinstance(datatype, str) else None
    if dt is None:
        raise ProtocolError(f"unknown datatype {datatype!r}; expected one of {', '.join(DATATYPES)}")
    return dt


@dataclass
class InferInput:
    """One decoded input tensor: ``data`` has ``shape`` and the dtype of ``datatype``."""

    name: str
    datatype: str
    shape: Tuple[int, ...]
    data: np.ndarray


@dataclass
class RequestedOutput:
    """An output the client asked for; ``binary`` is whether to send it binary."""

    name: str
    binary: bool


@dataclass
class InferRequest:
    """A decoded inference request.  ``outputs`` is None when the client asked for all."""

    id: Optional[str]
    inputs: List[InferInput]
    outputs: Optional[List[RequestedOutput]]
    binary_output: bool
    parameters: Dict[str, Any] = field(default_factory=dict)


def _object(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _params(obj: dict, what: str) -> dict:
    params = obj.get("parameters", {})
    if params is None:
        return {}
    return _object(params, f"{what}.parameters")


def _shape(value, what: str) -> Tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        raise ProtocolError(f"{what}.shape must be a list of non-negative integers, got {value!r}")
    return tuple(value)


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def parse_infer_request(body: bytes, header_length: Optional[str] = None) -> InferRequest:
    """Decode an inference request body.

    Args:
        body: the whole request body (JSON, or JSON header + binary tensors).
        header_length: the ``Inference-Header-Content-Length`` header value, or None for a
            JSON-only body.

    Raises:
        ProtocolError: (400) malformed JSON, missing or ill-typed fields, an unknown
            datatype, data whose element count or byte size disagrees with the shape, or
            binary sizes that do not add up to the body.
    """
    view = memoryview(body)
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            raise ProtocolError(f"{HEADER_LENGTH} must be an integer, got {header_length!r}") from None
        if not 0 < n <= len(view):
            raise ProtocolError(f"{HEADER_LENGTH} {n} is outside the body (1..{len(view)} bytes)")
        header, binary = view[:n], view[n:]
    else:
        header, binary = view, view[len(view):]
    try:
        doc = json.loads(bytes(header))
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"malformed JSON in the request: {e}") from None
    doc = _object(doc, "the request")
    params = _params(doc, "the request")
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError("the request needs 'inputs': a non-empty list of tensors")
    offset = 0
    inputs = []
    for k, raw in enumerate(raw_inputs):
        what = f"inputs[{k}]"
        raw = _object(raw, what)
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"{what}.name must be a non-empty string")
        what = f"input {name!r}"
        datatype = raw.get("datatype")
        dt = dtype_of(datatype)
        shape = _shape(raw.get("shape"), what)
        size = _params(raw, what).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise ProtocolError(f"{what}: binary_data_size must be a non-negative integer, got {size!r}")
            if offset + size > len(binary):
                raise ProtocolError(f"{what}: binary_data_size {size} runs past the end of the body "
                                    f"({len(binary) - offset} binary bytes left)")
            data = _from_binary(binary[offset:offset + size], dt, shape, what)
            offset += size
        else:
            if "data" not in raw:
                raise ProtocolError(f"{what} has neither 'data' nor parameters.binary_data_size")
            data = _from_json(raw["data"], dt, shape, what)
        inputs.append(InferInput(name, datatype, shape, data))
    if offset != len(binary):
        raise ProtocolError(f"the body has {len(binary) - offset} binary bytes no input claims")
    outputs = None
    if doc.get("outputs") is not None:
        raw_outputs = doc["outputs"]
        if not isinstance(raw_outputs, list):
            raise ProtocolError("'outputs' must be a list")
        outputs = []
        default = bool(params.get("binary_data_output", False))
        for k, raw in enumerate(raw_outputs):
            raw = _object(raw, f"outputs[{k}]")
            name = raw.get("name")
            if not isinstance(name, str) or not name:
                raise ProtocolError(f"outputs[{k}].name must be a non-empty string")
            outputs.append(RequestedOutput(name, bool(_params(raw, f"output {name!r}").get("binary_data", default))))
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError("'id' must be a string")
    return InferRequest(request_id, inputs, outputs, bool(params.get("binary_data_output", False)), params)


def _from_binary(buf: memoryview, dt: np.dtype, shape, what: str) -> np.ndarray:
    n = _count(shape)
    if dt.kind == "O":
        items = []
        pos = 0
        while pos < len(buf):
            if pos + 4 > len(buf):
                raise ProtocolError(f"{what}: truncated BYTES element length at byte {pos}")
            (length,) = struct.unpack_from("<I", buf, pos)
            pos += 4
            if pos + length > len(buf):
                raise ProtocolError(f"{what}: BYTES element of {length} bytes runs past its binary data")
            items.append(bytes(buf[pos:pos + length]))
            pos += length
        if len(items) != n:
            raise ProtocolError(f"{what}: {len(items)} BYTES elements for shape {list(shape)} ({n} elements)")
        arr = np.empty(n, dtype=object)
        arr[:] = items
        return arr.reshape(shape)
    if len(buf) != n * dt.itemsize:
        raise ProtocolError(f"{what}: binary_data_size is {len(buf)} bytes but shape {list(shape)} of "
                            f"{datatype_of(dt)} needs {n * dt.itemsize}")
    return np.frombuffer(buf, dtype=dt, count=n).reshape(shape)


def _from_json(data, dt: np.dtype, shape, what: str) -> np.ndarray:
    n = _count(shape)
    if dt.kind == "O":
        flat = _flatten(data, what)
        if not all(isinstance(s, str) for s in flat):
            raise ProtocolError(f"{what}: BYTES data must be strings in JSON")
        arr = np.empty(len(flat), dtype=object)
        arr[:] = [s.encode() for s in flat]
    else:
        if dt.kind == "b":
            flat = _flatten(data, what)
            if not all(isinstance(v, bool) for v in flat):
                raise ProtocolError(f"{what}: BOOL data must be true/false")
            arr = np.array(flat, dtype=dt)
        else:
            try:
                arr = np.array(data, dtype=dt)
            except (TypeError, ValueError, OverflowError) as e:
                raise ProtocolError(f"{what}: data is not a list of {datatype_of(dt)} numbers ({e})") from None
            arr = arr.reshape(-1) if arr.ndim != 1 else arr
    if arr.size != n:
        raise ProtocolError(f"{what}: {arr.size} data elements for shape {list(shape)} ({n} elements)")
    return arr.reshape(shape)


def _flatten(data, what: str) -> list:
    if not isinstance(data, list):
        raise ProtocolError(f"{what}.data must be a list")
    out: list = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def encode_infer_response(model_name: str, model_version: str, request_id: Optional[str],
                          outputs: Sequence[Tuple[str, np.ndarray, bool]]) -> Tuple[bytes, Optional[int]]:
    """Encode the outputs of one inference.

    Args:
        outputs: ``(name, array, binary)`` per output sent, in order; ``binary`` chooses the
            binary extension for that output.

    Returns:
        ``(body, header_length)``: ``header_length`` is the JSON part's size when some
        output is binary (send it as ``Inference-Header-Content-Length``), else None.
    """
    tensors = []
    chunks: List[bytes] = []
    for name, array, binary in outputs:
        datatype = datatype_of(array.dtype)
        tensor: Dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            raw = _to_binary(array)
            tensor["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        elif array.dtype.kind == "O":
            tensor["data"] = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                              for v in array.reshape(-1)]
        else:
            tensor["data"] = array.reshape(-1).tolist()
        tensors.append(tensor)
    doc: Dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": tensors}
    if request_id is not None:
        doc["id"] = request_id
    header = json.dumps(doc, separators=(",", ":")).encode()
    if not chunks:
        return header, None
    return b"".join([header] + chunks), len(header)


def _to_binary(array: np.ndarray) -> bytes:
    if array.dtype.kind == "O":
        parts = []
        for v in array.reshape(-1):
            b = v if isinstance(v, bytes) else str(v).encode()
            parts.append(struct.pack("<I", len(b)))
            parts.append(b)
        return b"".join(parts)
    dt = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    return np.ascontiguousarray(array, dtype=dt).tobytes()
