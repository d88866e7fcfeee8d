"""The portable ``.rknn`` container written by rknnlite's toolkit and run by its software backend.

Layout (all integers little-endian)::

    offset  size  field
    0       8     magic  b"\\x89RKL\\r\\n\\x1a\\n"  (never Rockchip's "RKNN\\0\\0\\0\\0" or "CYPTRKNN")
    8       2     u16 format major version (a newer major is refused)
    10      2     u16 format minor version (newer minors only add optional sections)
    12      4     u32 flags (0; reserved)
    16      4     u32 section count (at most 64)
    20      4     u32 CRC-32 of the section table
    24      8     u64 file size in bytes (the file ends exactly there)
    32      8     u64 offset of the section table (64)
    40      4     u32 CRC-32 of these 64 header bytes, computed with this field zeroed
    44      20    zero
    64      32*N  section table, one entry per section:
                    4s tag, u32 flags (bit 0: required), u64 offset, u64 size, u32 CRC-32, u32 zero
    ...           sections, each starting on a 64-byte boundary; the gaps hold zero bytes

Sections: ``META`` (JSON metadata, required), ``GRPH`` (JSON graph, required) and ``WGHT``
(the weights blob: every constant starts on a 64-byte boundary of the file, so a mapped file
gives numpy views of the weights without a copy).  A reader skips an unknown section unless
its *required* flag is set.  Every byte of the file is covered by a checksum or must be zero,
so truncation and corruption are always reported as :class:`ModelInvalidError`.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

from ..errors import ModelInvalidError
from .spec import numpy_dtype

__all__ = [
    "MAGIC",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "ALIGN",
    "Section",
    "write_container",
    "read_container",
    "Container",
]

MAGIC = b"\x89RKL\r\n\x1a\n"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
ALIGN = 64
MAX_SECTIONS = 64
#: constants below this size are grouped at the start of the weights blob
SMALL_CONSTANT = 64 * 1024
REQUIRED = 0x1

_HEADER = struct.Struct("<8sHHIIIQQI20x")
_ENTRY = struct.Struct("<4sIQQII")
assert _HEADER.size == 64 and _ENTRY.size == 32

TAG_META = b"META"
TAG_GRAPH = b"GRPH"
TAG_WEIGHTS = b"WGHT"
_KNOWN_TAGS = (TAG_META, TAG_GRAPH, TAG_WEIGHTS)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Section:
    """One entry of the section table: ``tag`` (4 bytes), ``offset``/``size`` in bytes."""

    tag: bytes
    flags: int
    offset: int
    size: int
    crc: int

    @property
    def required(self) -> bool:
        return bool(self.flags & REQUIRED)


def write_container(
    metadata: Mapping,
    graph: Mapping,
    weights: bytes | bytearray | memoryview = b"",
    extra_sections: Sequence[Tuple[bytes, bytes, bool]] = (),
) -> bytes:
    """Serialise a model into container bytes; the result is deterministic.

    ``metadata`` and ``graph`` are JSON-ready mappings; ``weights`` is the weights blob
    (see :func:`pack_weights`).  ``extra_sections`` are ``(tag, payload, required)``
    triples for sections a newer writer adds.  Returns a new ``bytes`` object.
    """
    payloads: List[Tuple[bytes, bytes, int]] = [
        (TAG_META, _json_bytes(metadata), REQUIRED),
        (TAG_GRAPH, _json_bytes(graph), REQUIRED),
    ]
    if len(weights):
        payloads.append((TAG_WEIGHTS, bytes(weights), REQUIRED))
    for tag, payload, required in extra_sections:
        if len(tag) != 4:
            raise ValueError(f"section tag must be 4 bytes, got {tag!r}")
        payloads.append((bytes(tag), bytes(payload), REQUIRED if required else 0))
    if len(payloads) > MAX_SECTIONS:
        raise ValueError(f"at most {MAX_SECTIONS} sections, got {len(payloads)}")

    table_offset = _HEADER.size
    offset = _align(table_offset + _ENTRY.size * len(payloads))
    entries = []
    for tag, payload, flags in payloads:
        entries.append(Section(tag, flags, offset, len(payload), zlib.crc32(payload)))
        offset = _align(offset + len(payload))
    file_size = entries[-1].offset + entries[-1].size

    table = b"".join(_ENTRY.pack(e.tag, e.flags, e.offset, e.size, e.crc, 0) for e in entries)
    header = _pack_header(len(entries), zlib.crc32(table), file_size, table_offset)
    out = bytearray(file_size)
    out[: len(header)] = header
    out[table_offset : table_offset + len(table)] = table
    for e, (_, payload, _) in zip(entries, payloads):
        out[e.offset : e.offset + e.size] = payload
    return bytes(out)


def _pack_header(count: int, table_crc: int, file_size: int, table_offset: int) -> bytes:
    fields = (MAGIC, FORMAT_MAJOR, FORMAT_MINOR, 0, count, table_crc, file_size, table_offset)
    unsigned = _HEADER.pack(*fields, 0)
    return _HEADER.pack(*fields, zlib.crc32(unsigned))


def _json_bytes(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def pack_weights(constants: Mapping[str, np.ndarray]) -> Tuple[bytes, Dict[str, dict]]:
    """Lay out named arrays in one blob, each on a 64-byte boundary.

    Returns ``(blob, table)`` where ``table[name] = {"dtype", "shape", "offset", "nbytes"}``
    (offsets relative to the blob).  Arrays are written C-contiguous, little-endian.
    Small arrays (biases, scales, shapes) come first, together: a mapped file is paged in
    in large blocks, so reading a bias never pulls a neighbouring weight tensor into memory.
    """
    table: Dict[str, dict] = {}
    parts = []
    offset = 0
    order = sorted(constants, key=lambda k: np.asarray(constants[k]).nbytes >= SMALL_CONSTANT)  # stable
    for name in order:
        arr = constants[name]
        a = np.asarray(arr)
        if not a.flags.c_contiguous:
            a = np.array(a, order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        dtype = _dtype_name(a.dtype)
        pad = _align(offset) - offset
        parts.append(b"\0" * pad)
        offset += pad
        table[name] = {"dtype": dtype, "shape": list(a.shape), "offset": offset, "nbytes": a.nbytes}
        parts.append(a.tobytes())
        offset += a.nbytes
    return b"".join(parts), table


def _dtype_name(dt: np.dtype) -> str:
    name = "bool" if dt == np.bool_ else dt.name
    numpy_dtype(name)  # validates
    return name


class Container:
    """A parsed portable container; nothing is copied out of the source buffer.

    Attributes:
        metadata: the ``META`` section as a dict.
        graph: the ``GRPH`` section as a dict.
        weights: the ``WGHT`` section as a read-only memoryview (empty when absent).
        version: ``(major, minor)`` of the file.
        sections: every entry of the section table, including skipped unknown ones.
        size: file size in bytes.
    """

    def __init__(self, metadata, graph, weights, version, sections, size):
        self.metadata: dict = metadata
        self.graph: dict = graph
        self.weights: memoryview = weights
        self.version: Tuple[int, int] = version
        self.sections: List[Section] = sections
        self.size: int = size

    def constant(self, entry: Mapping) -> np.ndarray:
        """A read-only numpy view of one weights-table entry (no copy).

        ``entry`` is ``{"dtype", "shape", "offset", "nbytes"}`` as written by :func:`pack_weights`.
        """
        return _weights_view(self.weights, entry)


def read_container(view: memoryview, label: str = "<buffer>") -> Container:
    """Parse and verify container bytes.

    Checks the magic, the version, the header and table checksums, every section's
    bounds, alignment and checksum, and that the gaps between sections are zero.
    Raises :class:`ModelInvalidError` naming the problem for anything malformed.
    """

    def bad(msg: str) -> ModelInvalidError:
        return ModelInvalidError(f"{label}: {msg}", op="load")

    n = len(view)
    if n < _HEADER.size:
        raise bad(f"truncated header: {n} bytes, a rknnlite model starts with a {_HEADER.size}-byte header")
    (magic, major, minor, _flags, count, table_crc, file_size, table_offset, header_crc) = (
        _HEADER.unpack_from(view, 0)
    )
    if magic != MAGIC:
        raise bad("not a rknnlite portable model (bad magic)")
    if major > FORMAT_MAJOR:
        raise bad(
            f"format version {major}.{minor} is newer than this runtime supports "
            f"({FORMAT_MAJOR}.0 to {FORMAT_MAJOR}.x); upgrade rknnlite"
        )
    if major < 1:
        raise bad(f"unknown format version {major}.{minor}")
    header = bytearray(view[: _HEADER.size])
    header[40:44] = b"\0\0\0\0"
    if zlib.crc32(header) != header_crc:
        raise bad("header checksum mismatch (the file is corrupted)")
    if file_size != n:
        raise bad(f"size mismatch: the header says {file_size} bytes, the file has {n} (truncated or padded)")
    if count == 0 or count > MAX_SECTIONS:
        raise bad(f"section count {count} out of range 1..{MAX_SECTIONS}")
    table_end = table_offset + count * _ENTRY.size
    if table_offset != _HEADER.size or table_end > n:
        raise bad(f"section table at {table_offset}..{table_end} lies outside the file ({n} bytes)")
    if zlib.crc32(view[table_offset:table_end]) != table_crc:
        raise bad("section table checksum mismatch (the file is corrupted)")

    sections = []
    cursor = table_end
    for i in range(count):
        tag, flags, off, size, crc, _ = _ENTRY.unpack_from(view, table_offset + i * _ENTRY.size)
        name = tag.decode("ascii", "replace")
        if off % ALIGN or off < cursor or off + size > n:
            raise bad(f"section {name!r} at {off} (+{size} bytes) is misplaced or runs past the end ({n} bytes)")
        if any(view[cursor:off]):
            raise bad(f"non-zero bytes in the padding before section {name!r}")
        if zlib.crc32(view[off : off + size]) != crc:
            raise bad(f"section {name!r} checksum mismatch (the file is corrupted)")
        sections.append(Section(tag, flags, off, size, crc))
        cursor = off + size
    if cursor != n:
        raise bad(f"{n - cursor} unexpected bytes after the last section")

    found = {}
    for s in sections:
        if s.tag in _KNOWN_TAGS:
            if s.tag in found:
                raise bad(f"duplicate section {s.tag.decode()!r}")
            found[s.tag] = view[s.offset : s.offset + s.size]
        elif s.required:
            raise bad(
                f"requires section {s.tag.decode('ascii', 'replace')!r}, which this runtime "
                f"(format {FORMAT_MAJOR}.{FORMAT_MINOR}) does not know; upgrade rknnlite"
            )
    for tag in (TAG_META, TAG_GRAPH):
        if tag not in found:
            raise bad(f"missing required section {tag.decode()!r}")
    metadata = _parse_json(found[TAG_META], "metadata", bad)
    graph = _parse_json(found[TAG_GRAPH], "graph", bad)
    weights = found.get(TAG_WEIGHTS, memoryview(b""))
    return Container(metadata, graph, weights, (major, minor), sections, n)


def _parse_json(view: memoryview, what: str, bad) -> dict:
    try:
        obj = json.loads(bytes(view).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"{what} section is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise bad(f"{what} section must be a JSON object, not {type(obj).__name__}")
    return obj


def _weights_view(weights: memoryview, entry: Mapping) -> np.ndarray:
    try:
        dtype = numpy_dtype(entry["dtype"])
        shape = tuple(int(d) for d in entry["shape"])
        offset = int(entry["offset"])
        nbytes = int(entry["nbytes"])
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, ModelInvalidError):
            raise
        raise ModelInvalidError(f"malformed weights entry {entry!r}: {e}", op="load") from None
    if any(d < 0 for d in shape) or len(shape) > 16:
        raise ModelInvalidError(f"absurd constant shape {list(shape)}", op="load")
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize != nbytes:
        raise ModelInvalidError(
            f"constant of shape {list(shape)} and dtype {entry['dtype']} needs "
            f"{count * dtype.itemsize} bytes, the file says {nbytes}",
            op="load",
        )
    if offset < 0 or offset % dtype.itemsize or offset + nbytes > len(weights):
        raise ModelInvalidError(
            f"constant at offset {offset} (+{nbytes} bytes) lies outside the weights ({len(weights)} bytes)",
            op="load",
        )
    arr = np.frombuffer(weights, dtype=dtype, count=count, offset=offset)
    return arr.reshape(shape)
