"""A schema-less reader of the protobuf binary wire format.

Enough to read a message whose field numbers the caller knows (e.g. a Caffe
``.caffemodel``) without generated classes:

* :func:`parse_message` splits one message into ``{field number: [values]}``: varint
  fields give ``int`` (unsigned 64-bit; see :func:`signed64`), fixed64 and fixed32 give
  their 8 or 4 raw bytes, length-delimited fields a ``memoryview`` of the buffer (no copy;
  a nested message, a string, or a packed repeated field);
* :func:`floats`, :func:`doubles` and :func:`varints` decode a repeated numeric field
  written either packed or one element per key (proto2 readers must accept both).

Group wire types (3/4, deprecated) and malformed input raise :class:`WireFormatError`.
"""

from __future__ import annotations

from typing import Dict, List, Union

import numpy as np

__all__ = ["WireFormatError", "parse_message", "floats", "doubles", "varints", "signed64", "text",
           "VARINT", "FIXED64", "LEN", "FIXED32"]

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5

Value = Union[int, bytes, memoryview]


class WireFormatError(ValueError):
    """The bytes are not a valid protobuf message; ``offset`` is where reading failed."""

    def __init__(self, message: str, offset: int):
        self.offset = offset
        super().__init__(f"byte {offset}: {message}")


def _varint(buf: memoryview, pos: int, end: int):
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise WireFormatError("truncated varint", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift >= 70:
            raise WireFormatError("varint longer than 10 bytes", start)


def parse_message(data) -> Dict[int, List[Value]]:
    """``{field number: [value, ...]}`` of one serialized message (values in file order).

    ``data``: bytes, bytearray or memoryview; length-delimited values are views into it.
    """
    buf = memoryview(data).cast("B")
    fields: Dict[int, List[Value]] = {}
    pos, end = 0, len(buf)
    while pos < end:
        key_at = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireFormatError("field number 0", key_at)
        if wire == VARINT:
            value, pos = _varint(buf, pos, end)
        elif wire == LEN:
            size, pos = _varint(buf, pos, end)
            if pos + size > end:
                raise WireFormatError(f"field {number}: length {size} runs past the end ({end - pos} bytes left)",
                                      key_at)
            value = buf[pos:pos + size]
            pos += size
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            if pos + size > end:
                raise WireFormatError(f"field {number}: truncated fixed{size * 8} value", key_at)
            value = bytes(buf[pos:pos + size])
            pos += size
        else:
            raise WireFormatError(f"field {number}: unsupported wire type {wire}", key_at)
        fields.setdefault(number, []).append(value)
    return fields


def _fixed(values: List[Value], dtype: str, size: int, what: str) -> np.ndarray:
    parts = []
    for v in values:
        if isinstance(v, int):
            raise WireFormatError(f"{what}: a varint where {size * 8}-bit floats are expected", 0)
        if len(v) % size:
            raise WireFormatError(f"{what}: {len(v)} bytes is not a whole number of {size * 8}-bit floats", 0)
        parts.append(np.frombuffer(v, dtype=dtype))
    if not parts:
        return np.zeros(0, dtype=np.dtype(dtype).newbyteorder("="))
    return np.concatenate(parts).astype(np.dtype(dtype).newbyteorder("="))  # a native-order copy


def floats(values: List[Value], what: str = "repeated float") -> np.ndarray:
    """A repeated ``float`` field's elements (packed, unpacked or mixed) as a new
    float32 array."""
    return _fixed(values, "<f4", 4, what)


def doubles(values: List[Value], what: str = "repeated double") -> np.ndarray:
    """A repeated ``double`` field's elements as a new float64 array."""
    return _fixed(values, "<f8", 8, what)


def varints(values: List[Value], what: str = "repeated integer") -> List[int]:
    """A repeated varint field's elements (packed or not), unsigned as written; see
    :func:`signed64` for ``int64``/``int32`` fields."""
    out: List[int] = []
    for v in values:
        if isinstance(v, int):
            out.append(v)
            continue
        if isinstance(v, bytes):
            raise WireFormatError(f"{what}: a fixed-size value where varints are expected", 0)
        pos, end = 0, len(v)
        while pos < end:
            n, pos = _varint(v, pos, end)
            out.append(n)
    return out


def signed64(value: int) -> int:
    """An ``int64``/``int32`` field's value from its unsigned varint (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def text(value: Value, what: str = "string") -> str:
    """A ``string`` field's value."""
    if not isinstance(value, memoryview):  # varints are int, fixed32/64 values bytes
        raise WireFormatError(f"{what}: a number where a string is expected", 0)
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireFormatError(f"{what}: not UTF-8 text ({e.reason})", 0) from None
