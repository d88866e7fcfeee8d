"""A small protobuf wire-format encoder for the Caffe loader's tests: it writes
``.caffemodel`` bytes (NetParameter -> LayerParameter -> BlobProto) without Caffe,
from the public caffe.proto field numbers.

Written independently of :mod:`rknnlite.toolkit.loaders.protobuf_wire` (the reader under
test) so that a shared misunderstanding cannot make both sides agree.
"""

from __future__ import annotations

import struct
from typing import Dict, Iterable, List, Sequence

import numpy as np

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


def varint(n: int) -> bytes:
    """Base-128 varint of ``n`` (negative ints as 64-bit two's complement, as int64 is)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def f_varint(field: int, n: int) -> bytes:
    return key(field, VARINT) + varint(n)


def f_bytes(field: int, payload: bytes) -> bytes:
    return key(field, LEN) + varint(len(payload)) + payload


def f_string(field: int, text: str) -> bytes:
    return f_bytes(field, text.encode("utf-8"))


def f_packed_floats(field: int, values) -> bytes:
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    return f_bytes(field, b"".join(struct.pack("<f", float(v)) for v in flat))


def f_unpacked_floats(field: int, values) -> bytes:
    return b"".join(key(field, FIXED32) + struct.pack("<f", float(v))
                    for v in np.asarray(values, dtype=np.float32).reshape(-1))


def f_packed_doubles(field: int, values) -> bytes:
    return f_bytes(field, b"".join(struct.pack("<d", float(v)) for v in np.asarray(values).reshape(-1)))


def f_packed_varints(field: int, values: Iterable[int]) -> bytes:
    return f_bytes(field, b"".join(varint(int(v)) for v in values))


def blob(array, form: str = "shape") -> bytes:
    """A BlobProto holding ``array``.  ``form``: ``"shape"`` (BlobShape, packed floats),
    ``"legacy"`` (num/channels/height/width padded to 4-D on the left),
    ``"unpacked"`` (BlobShape, one fixed32 key per float), ``"double"`` (double_data)."""
    a = np.asarray(array, dtype=np.float32)
    if form == "legacy":
        dims = [1] * (4 - a.ndim) + list(a.shape)
        head = b"".join(f_varint(f, d) for f, d in zip((1, 2, 3, 4), dims))
        return head + f_packed_floats(5, a)
    shape = f_bytes(7, f_packed_varints(1, a.shape))
    if form == "unpacked":
        return shape + f_unpacked_floats(5, a)
    if form == "double":
        return shape + f_packed_doubles(8, a.astype(np.float64))
    return f_packed_floats(5, a) + shape


def layer(name: str, blobs: Sequence, layer_type: str = "", v1: bool = False, form: str = "shape") -> bytes:
    """A LayerParameter (or, with ``v1``, a V1LayerParameter) with ``name`` and ``blobs``."""
    encoded = [blob(b, form) for b in blobs]
    if v1:
        return f_string(4, name) + b"".join(f_bytes(6, b) for b in encoded)
    out = f_string(1, name)
    if layer_type:
        out += f_string(2, layer_type)
    return out + b"".join(f_bytes(7, b) for b in encoded)


def caffemodel(weights: Dict[str, List], v1: bool = False, form: str = "shape", name: str = "net") -> bytes:
    """NetParameter bytes with one layer per ``{layer name: [blob arrays]}`` entry."""
    field = 2 if v1 else 100
    return f_string(1, name) + b"".join(f_bytes(field, layer(n, bs, v1=v1, form=form)) for n, bs in weights.items())
