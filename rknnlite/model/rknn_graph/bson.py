"""The small BSON subset vendor nodes use for their original ONNX attributes (node slot 9).

Each document maps an attribute name to ``{"dtype": "s"|"i"|"is"|"f"|..., "value": ...}``.
Element types read: 0x01 double, 0x02 string, 0x03 document, 0x04 array, 0x08 bool,
0x10 int32, 0x12 int64.  Anything else, or a length that does not fit, raises
:class:`~rknnlite.errors.ModelInvalidError` naming the node.
"""

from __future__ import annotations

import struct
from typing import Any, Dict

from ...errors import ModelInvalidError

__all__ = ["decode_bson"]

_MAX_DEPTH = 8


def decode_bson(raw: bytes, where: str) -> Dict[str, Any]:
    """The document in ``raw`` as a dict (arrays become lists); ``{}`` for empty bytes or an
    all-zero placeholder (OutputOperator nodes carry 16 zero bytes).  ``where`` names the node
    in messages."""
    if not raw or not any(raw):
        return {}
    value, end = _document(raw, 0, where, 0)
    return value


def _error(where: str, message: str) -> ModelInvalidError:
    return ModelInvalidError(f"{where}: BSON attributes: {message}", op="load")


def _document(raw: bytes, pos: int, where: str, depth: int):
    if depth > _MAX_DEPTH:
        raise _error(where, f"documents nested deeper than {_MAX_DEPTH}")
    if pos + 5 > len(raw):
        raise _error(where, f"document at byte {pos} runs past the {len(raw)}-byte blob")
    (length,) = struct.unpack_from("<i", raw, pos)
    end = pos + length
    if length < 5 or end > len(raw) or raw[end - 1] != 0:
        raise _error(where, f"document at byte {pos} has invalid length {length}")
    out: Dict[str, Any] = {}
    p = pos + 4
    while p < end - 1:
        kind = raw[p]
        name_end = raw.find(b"\0", p + 1, end)
        if name_end < 0:
            raise _error(where, f"unterminated element name at byte {p + 1}")
        name = raw[p + 1:name_end].decode("utf-8", "replace")
        p = name_end + 1
        if kind == 0x01:
            _need(raw, p, 8, end, where)
            value = struct.unpack_from("<d", raw, p)[0]
            p += 8
        elif kind == 0x02:
            _need(raw, p, 4, end, where)
            (n,) = struct.unpack_from("<i", raw, p)
            if n < 1 or p + 4 + n > end:
                raise _error(where, f"string {name!r} has invalid length {n}")
            value = raw[p + 4:p + 3 + n].decode("utf-8", "replace")
            p += 4 + n
        elif kind in (0x03, 0x04):
            doc, p_end = _document(raw, p, where, depth + 1)
            value = doc if kind == 0x03 else [doc[k] for k in sorted(doc, key=_index_key)]
            p = p_end
        elif kind == 0x08:
            _need(raw, p, 1, end, where)
            value = bool(raw[p])
            p += 1
        elif kind == 0x10:
            _need(raw, p, 4, end, where)
            value = struct.unpack_from("<i", raw, p)[0]
            p += 4
        elif kind == 0x12:
            _need(raw, p, 8, end, where)
            value = struct.unpack_from("<q", raw, p)[0]
            p += 8
        else:
            raise _error(where, f"element {name!r} has BSON type {kind:#04x}, which is not supported "
                                f"(known: double, string, document, array, bool, int32, int64)")
        out[name] = value
    return out, end


def _need(raw: bytes, pos: int, size: int, end: int, where: str) -> None:
    if pos + size > end:
        raise _error(where, f"value at byte {pos} runs past its document")


def _index_key(key: str):
    return (0, int(key)) if key.isdigit() else (1, key)
