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

JSON is read and written with ``orjson`` when it is installed (part of the ``daemon``
extra; about 5x faster than the standard library on request headers, and it writes numeric
output arrays without making Python lists), else with the standard library's ``json``.
Both give the same documents; float outputs differ only in digits that do not change
the float32 value read back.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError

try:  # optional speed-up (see the module doc)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

__all__ = ["DATATYPES", "ProtocolError", "InferInput", "InferRequest", "RequestedOutput", "datatype_of",
           "dtype_of", "parse_infer_request", "encode_infer_response", "error_body", "HEADER_LENGTH", "loads",
           "dumps", "RequestParser"]

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


def loads(data):
    """Decode JSON ``data`` (bytes, bytearray, memoryview or str); raises ``ValueError``
    (with the position) on malformed JSON or bytes that are not UTF-8."""
    if _orjson is not None:
        return _orjson.loads(data)
    if isinstance(data, memoryview):
        data = bytes(data)
    return json.loads(data)


def dumps(doc) -> bytes:
    """Encode ``doc`` as compact UTF-8 JSON bytes.  1-D numpy arrays of finite numbers or
    bools may appear as values (written as lists)."""
    if _orjson is not None:
        return _orjson.dumps(doc, option=_orjson.OPT_SERIALIZE_NUMPY)
    return json.dumps(doc, separators=(",", ":"), default=_array_to_list).encode()


def _array_to_list(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def error_body(message: str) -> bytes:
    """The protocol's error body ``{"error": message}`` as UTF-8 JSON bytes."""
    return dumps({"error": message})


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
    if type(value) is not dict:
        raise ProtocolError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _params(obj: dict, what: str) -> dict:
    params = obj.get("parameters")
    if params is None:
        return _NO_PARAMS
    return _object(params, f"{what}.parameters")


_NO_PARAMS: Dict[str, Any] = {}


def _shape(value, what: str) -> Tuple[int, ...]:
    if type(value) is list:
        for d in value:
            if type(d) is not int or d < 0:
                break
        else:
            return tuple(value)
    raise ProtocolError(f"{what}.shape must be a list of non-negative integers, got {value!r}")


def _count(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _header_size(header_length, body_size: int) -> int:
    try:
        n = int(header_length)
    except ValueError:
        raise ProtocolError(f"{HEADER_LENGTH} must be an integer, got {header_length!r}") from None
    if not 0 < n <= body_size:
        raise ProtocolError(f"{HEADER_LENGTH} {n} is outside the body (1..{body_size} bytes)")
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
    if header_length is not None:
        n = _header_size(header_length, len(body))
        header = memoryview(body)[:n]
        binary = memoryview(body)[n:]
    else:
        header, binary = body, memoryview(b"")
    try:
        doc = loads(header)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"malformed JSON in the request: {e}") from None
    doc = _object(doc, "the request")
    params = _params(doc, "the request")
    raw_inputs = doc.get("inputs")
    if type(raw_inputs) is not list or not raw_inputs:
        raise ProtocolError("the request needs 'inputs': a non-empty list of tensors")
    offset = 0
    left = len(binary)
    inputs = []
    for k, raw in enumerate(raw_inputs):
        if type(raw) is not dict:
            _object(raw, f"inputs[{k}]")
        name = raw.get("name")
        if type(name) is not str or not name:
            raise ProtocolError(f"inputs[{k}].name must be a non-empty string")
        what = f"input {name!r}"
        datatype = raw.get("datatype")
        dt = DATATYPES.get(datatype) if type(datatype) is str else None
        if dt is None:
            dt = dtype_of(datatype)  # raises, naming the known datatypes
        shape = _shape(raw.get("shape"), what)
        size = _params(raw, what).get("binary_data_size")
        if size is not None:
            if type(size) is not int or size < 0:
                raise ProtocolError(f"{what}: binary_data_size must be a non-negative integer, got {size!r}")
            if size > left:
                raise ProtocolError(f"{what}: binary_data_size {size} runs past the end of the body "
                                    f"({left} binary bytes left)")
            data = _from_binary(binary[offset:offset + size], dt, shape, what)
            offset += size
            left -= size
        else:
            if "data" not in raw:
                raise ProtocolError(f"{what} has neither 'data' nor parameters.binary_data_size")
            data = _from_json(raw["data"], dt, shape, what)
        inputs.append(InferInput(name, datatype, shape, data))
    if left:
        raise ProtocolError(f"the body has {left} binary bytes no input claims")
    binary_output = params.get("binary_data_output", False)
    outputs = None
    raw_outputs = doc.get("outputs")
    if raw_outputs is not None:
        if type(raw_outputs) is not list:
            raise ProtocolError("'outputs' must be a list")
        outputs = []
        default = bool(binary_output)
        for k, raw in enumerate(raw_outputs):
            raw = _object(raw, f"outputs[{k}]")
            name = raw.get("name")
            if type(name) is not str or not name:
                raise ProtocolError(f"outputs[{k}].name must be a non-empty string")
            outputs.append(RequestedOutput(name, bool(_params(raw, f"output {name!r}").get("binary_data", default))))
    request_id = doc.get("id")
    if request_id is not None and type(request_id) is not str:
        raise ProtocolError("'id' must be a string")
    return InferRequest(request_id, inputs, outputs, bool(binary_output), params)


class RequestParser:
    """:func:`parse_infer_request` that remembers the binary-extension headers it has seen.

    Clients of one model send the same JSON header again and again (only the tensor bytes
    differ).  For a header whose inputs are all binary and not ``BYTES``, the parser keeps
    what decoding it produced (names, datatypes, shapes, offsets, requested outputs) and
    next time only makes the arrays: read-only views into the body, as
    :func:`parse_infer_request` makes.  A header is remembered only after it parsed without
    error, keyed by its bytes and the size of the binary part, so every request is checked
    as strictly as by :func:`parse_infer_request`.

    Args:
        size: headers remembered at most (the memory is dropped whole when full).
        max_header_bytes: longer headers are never remembered.

    The ``outputs`` list and ``parameters`` dict of a request from the memory are shared
    with the other requests of that header: read them, do not change them.  Use from one
    thread (the server's event loop).
    """

    def __init__(self, size: int = 256, max_header_bytes: int = 4096):
        self.size = int(size)
        self.max_header_bytes = int(max_header_bytes)
        self._plans: Dict[Tuple[bytes, int], tuple] = {}

    def parse(self, body: bytes, header_length: Optional[str] = None) -> InferRequest:
        """Decode a request body like :func:`parse_infer_request` (same arguments, result
        and errors)."""
        if header_length is None:
            return parse_infer_request(body, None)
        n = _header_size(header_length, len(body))
        if n > self.max_header_bytes:
            return parse_infer_request(body, header_length)
        key = (bytes(body[:n]), len(body) - n)
        plan = self._plans.get(key)
        if plan is None:
            request = parse_infer_request(body, header_length)
            self._remember(key, request)
            return request
        request_id, tensors, outputs, binary_output, params = plan
        inputs = [InferInput(name, datatype, shape, np.frombuffer(body, dt, count, n + offset).reshape(shape))
                  for name, datatype, shape, dt, count, offset in tensors]
        return InferRequest(request_id, inputs, outputs, binary_output, params)

    def _remember(self, key: Tuple[bytes, int], request: InferRequest) -> None:
        doc = loads(key[0])  # parsed without error just now
        tensors = []
        offset = 0
        for raw, item in zip(doc["inputs"], request.inputs):
            size = (raw.get("parameters") or _NO_PARAMS).get("binary_data_size")
            if size is None or item.data.dtype.kind == "O":
                return  # JSON data or BYTES: decoded per request
            tensors.append((item.name, item.datatype, item.shape, item.data.dtype, item.data.size, offset))
            offset += size
        if len(self._plans) >= self.size:
            self._plans.clear()
        self._plans[key] = (request.id, tensors, request.outputs, request.binary_output, request.parameters)


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
                with np.errstate(over="raise", invalid="raise"):  # a number the type cannot hold
                    arr = np.array(data, dtype=dt)
            except FloatingPointError:
                raise ProtocolError(f"{what}: data holds a number out of {datatype_of(dt)}'s range") from None
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
                          outputs: Sequence[Tuple[str, np.ndarray, bool]]):
    """Encode the outputs of one inference.

    Args:
        outputs: ``(name, array, binary)`` per output sent, in order; ``binary`` chooses the
            binary extension for that output.

    Returns:
        ``(body, header_length)``: ``header_length`` is the JSON part's size when some
        output is binary (send it as ``Inference-Header-Content-Length``), else None.
        ``body`` is ``bytes``, or a ``bytearray`` when the binary outputs are large: they
        are then copied once, straight into it (little-endian, row-major).
    """
    tensors = []
    chunks: List[Any] = []  # bytes (BYTES outputs) or little-endian arrays, in order
    finite = True
    for name, array, binary in outputs:
        datatype = datatype_of(array.dtype)
        tensor: Dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            if array.dtype.kind == "O":
                raw = _to_binary(array)
                size = len(raw)
            else:
                raw = array if array.dtype.byteorder != ">" else array.astype(array.dtype.newbyteorder("<"))
                size = raw.nbytes
            tensor["parameters"] = {"binary_data_size": size}
            chunks.append(raw)
        elif array.dtype.kind == "O":
            tensor["data"] = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                              for v in array.reshape(-1)]
        else:
            tensor["data"], ok = _json_data(array)
            finite = finite and ok
        tensors.append(tensor)
    doc: Dict[str, Any] = {"model_name": model_name, "model_version": model_version, "outputs": tensors}
    if request_id is not None:
        doc["id"] = request_id
    if finite:
        header = dumps(doc)
    else:  # NaN/Infinity: written as the standard library writes them (orjson would write null)
        header = json.dumps(doc, separators=(",", ":"), default=_array_to_list).encode()
    if not chunks:
        return header, None
    size = sum(c.nbytes if isinstance(c, np.ndarray) else len(c) for c in chunks)
    if size < _ONE_COPY_BYTES:
        return b"".join([header] + [c.tobytes() if isinstance(c, np.ndarray) else c for c in chunks]), len(header)
    body = bytearray(len(header) + size)
    body[:len(header)] = header
    pos = len(header)
    for c in chunks:
        if isinstance(c, np.ndarray):
            np.copyto(np.frombuffer(body, c.dtype, c.size, pos).reshape(c.shape), c)
            pos += c.nbytes
        else:
            body[pos:pos + len(c)] = c
            pos += len(c)
    return body, len(header)


#: Binary outputs of at least this many bytes are copied once, into the body (smaller ones
#: are joined: for them the two copies cost less than setting up one).
_ONE_COPY_BYTES = 16 << 10

#: (kind, itemsize) of the arrays :func:`dumps` writes without converting them to lists.
_NUMPY_JSON = {("f", 4), ("f", 8), ("b", 1)} | {(k, n) for k in "iu" for n in (1, 2, 4, 8)}


def _json_data(array: np.ndarray) -> Tuple[Any, bool]:
    """(the flat values of a numeric ``array`` as :func:`dumps` takes them, whether they
    are all finite)."""
    dt = array.dtype
    flat = array.reshape(-1)
    finite = dt.kind != "f" or bool(np.isfinite(flat).all())
    if _orjson is not None and (dt.kind, dt.itemsize) in _NUMPY_JSON:
        return np.ascontiguousarray(flat, dtype=dt.newbyteorder("=")), finite
    return flat.tolist(), finite


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
