"""A small, bounds-checked FlatBuffer reader.

Only what reading untrusted ``.rknn`` files needs: tables through their vtables,
scalars of every width, strings, vectors of scalars / tables / strings, and
nested tables by slot index.  The reader works on a window ``[base, base+size)``
of a ``bytes``/``bytearray``/``memoryview`` without copying it.

Every offset is checked against the window before it is followed, a vtable must
be long enough for the slots it claims, and nothing is allocated from a length
that has not been checked against the bytes that are actually there.  Offsets to
child objects are unsigned and added to the position they are read at, so a walk
only moves forward and cannot loop; the reader never recurses.  Anything wrong
raises :class:`~rknnlite.errors.ModelInvalidError` naming the bad field and its
position.
"""

from __future__ import annotations

import struct
from typing import Iterator, List, Optional, Tuple, Union

from ..errors import ModelInvalidError

__all__ = ["FlatBuffer", "Table", "Vector", "SCALARS"]

#: Scalar kinds: name -> (struct format, size in bytes).
SCALARS = {
    "bool": ("<?", 1),
    "u8": ("<B", 1),
    "i8": ("<b", 1),
    "u16": ("<H", 2),
    "i16": ("<h", 2),
    "u32": ("<I", 4),
    "i32": ("<i", 4),
    "u64": ("<Q", 8),
    "i64": ("<q", 8),
    "f32": ("<f", 4),
    "f64": ("<d", 8),
}

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")

BufferLike = Union[bytes, bytearray, memoryview]


def _scalar(kind: str) -> Tuple[str, int]:
    try:
        return SCALARS[kind]
    except KeyError:
        raise ValueError(f"unknown scalar kind {kind!r}; expected one of {', '.join(SCALARS)}") from None


class FlatBuffer:
    """A FlatBuffer occupying ``size`` bytes of ``data`` from ``base``.

    Positions passed around (``Table.pos``, ``Vector.pos``) are absolute offsets
    into ``data``; messages show them relative to ``base``.

    Args:
        data: the bytes (not copied).
        base: where the FlatBuffer starts in ``data``.
        size: its length (default: up to the end of ``data``).
        label: how to name the source in error messages (a file path, ...).
    """

    __slots__ = ("data", "base", "end", "label")

    def __init__(self, data: BufferLike, base: int = 0, size: Optional[int] = None, label: str = "<buffer>"):
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        self.data = view
        self.label = label
        total = len(view)
        if base < 0 or base > total:
            raise self._error(f"start {base} lies outside the {total}-byte buffer")
        if size is None:
            size = total - base
        if size < 0 or base + size > total:
            raise self._error(f"size {size} from offset {base} runs past the {total}-byte buffer")
        self.base = base
        self.end = base + size

    # -- errors and checks -------------------------------------------------

    def _error(self, message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{self.label}: FlatBuffer: {message}", op="load")

    def rel(self, pos: int) -> str:
        """``pos`` shown relative to the start of the FlatBuffer (for messages)."""
        rel = pos - self.base
        return f"0x{rel:x}" if rel >= 0 else f"-0x{-rel:x}"

    def check(self, pos: int, length: int, what: str) -> None:
        """Raise unless ``length`` bytes from absolute ``pos`` lie inside the buffer."""
        if length < 0 or pos < self.base or pos + length > self.end:
            raise self._error(
                f"{what} at {self.rel(pos)} (+{length} bytes) lies outside the "
                f"{self.end - self.base}-byte buffer"
            )

    # -- raw reads ---------------------------------------------------------

    def read(self, pos: int, kind: str, what: str = "scalar"):
        """The scalar ``kind`` (``"u8"``, ``"i32"``, ``"f32"``, ...) at absolute ``pos``."""
        fmt, size = _scalar(kind)
        self.check(pos, size, what)
        return struct.unpack_from(fmt, self.data, pos)[0]

    def _u32(self, pos: int, what: str) -> int:
        self.check(pos, 4, what)
        return _U32.unpack_from(self.data, pos)[0]

    def deref(self, pos: int, what: str) -> int:
        """Follow the unsigned offset stored at ``pos``; return the target position."""
        off = self._u32(pos, f"offset to {what}")
        if off == 0:
            raise self._error(f"offset to {what} at {self.rel(pos)} is zero")
        target = pos + off
        if target >= self.end:
            raise self._error(
                f"offset to {what} at {self.rel(pos)} points to {self.rel(target)}, past the end "
                f"of the {self.end - self.base}-byte buffer"
            )
        return target

    # -- entry points ------------------------------------------------------

    def identifier(self) -> bytes:
        """The 4-byte file identifier (bytes 4..8), or ``b""`` when the buffer is too short."""
        if self.end - self.base < 8:
            return b""
        return bytes(self.data[self.base + 4 : self.base + 8])

    def root(self, name: str = "root") -> "Table":
        """The root table."""
        if self.end - self.base < 8:
            raise self._error(f"{self.end - self.base} bytes is too short to hold a root table")
        return self.table_at(self.deref(self.base, f"{name} table"), name)

    def table_at(self, pos: int, name: str = "table") -> "Table":
        """The table starting at absolute ``pos`` (its vtable is checked here)."""
        self.check(pos, 4, f"{name} table")
        soff = _I32.unpack_from(self.data, pos)[0]
        vt = pos - soff
        self.check(vt, 4, f"vtable of {name} table (table at {self.rel(pos)})")
        vt_len = _U16.unpack_from(self.data, vt)[0]
        obj_len = _U16.unpack_from(self.data, vt + 2)[0]
        if vt_len < 4 or vt_len % 2:
            raise self._error(f"vtable of {name} table at {self.rel(pos)} has invalid length {vt_len}")
        self.check(vt, vt_len, f"vtable of {name} table (table at {self.rel(pos)})")
        if obj_len < 4:
            raise self._error(f"{name} table at {self.rel(pos)} has invalid inline size {obj_len}")
        self.check(pos, obj_len, f"{name} table")
        return Table(self, pos, vt, (vt_len - 4) // 2, obj_len, name)

    def string_at(self, pos: int, what: str = "string") -> bytes:
        """The bytes of the string whose length prefix is at absolute ``pos``."""
        n = self._u32(pos, f"length of {what}")
        self.check(pos + 4, n, what)
        return bytes(self.data[pos + 4 : pos + 4 + n])

    def vector_at(self, pos: int, elem_size: int, what: str = "vector") -> "Vector":
        """The vector whose length prefix is at ``pos``, with ``elem_size``-byte elements."""
        n = self._u32(pos, f"length of {what}")
        if n * elem_size > self.end - pos - 4:
            raise self._error(
                f"{what} at {self.rel(pos)} claims {n} elements of {elem_size} bytes, more than "
                f"the {max(self.end - pos - 4, 0)} bytes left in the buffer"
            )
        return Vector(self, pos + 4, n, elem_size, what)


class Table:
    """One table: fields are read by slot index (0 = first field of the schema)."""

    __slots__ = ("fb", "pos", "vtable", "num_slots", "size", "name")

    def __init__(self, fb: FlatBuffer, pos: int, vtable: int, num_slots: int, size: int, name: str):
        self.fb = fb
        self.pos = pos
        self.vtable = vtable
        self.num_slots = num_slots
        self.size = size
        self.name = name

    def __repr__(self) -> str:
        return f"<Table {self.name} at {self.fb.rel(self.pos)} with {self.num_slots} slots>"

    def _what(self, slot: int) -> str:
        return f"{self.name}[{slot}]"

    def field_pos(self, slot: int) -> int:
        """Absolute position of a slot's inline data, or 0 when the field is absent."""
        if slot < 0:
            raise ValueError("slot index must be >= 0")
        if slot >= self.num_slots:
            return 0
        off = _U16.unpack_from(self.fb.data, self.vtable + 4 + 2 * slot)[0]
        if off == 0:
            return 0
        if off < 4 or off >= self.size:
            raise self.fb._error(
                f"{self._what(slot)} of the table at {self.fb.rel(self.pos)} has field offset {off} "
                f"outside the table's {self.size} bytes"
            )
        return self.pos + off

    def has(self, slot: int) -> bool:
        """Whether the field is present."""
        return self.field_pos(slot) != 0

    # -- scalars -----------------------------------------------------------

    def scalar(self, slot: int, kind: str, default=0):
        """The scalar field (``kind`` as in :data:`SCALARS`), or ``default`` when absent."""
        pos = self.field_pos(slot)
        if not pos:
            return default
        _, size = _scalar(kind)
        if pos + size > self.pos + self.size:
            raise self.fb._error(f"{self._what(slot)} ({kind}) runs past its table at {self.fb.rel(self.pos)}")
        return self.fb.read(pos, kind, self._what(slot))

    def bool(self, slot: int, default: bool = False) -> bool:
        return bool(self.scalar(slot, "u8", int(default)))

    def u8(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "u8", default)

    def i8(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "i8", default)

    def u16(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "u16", default)

    def i16(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "i16", default)

    def u32(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "u32", default)

    def i32(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "i32", default)

    def u64(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "u64", default)

    def i64(self, slot: int, default: int = 0) -> int:
        return self.scalar(slot, "i64", default)

    def f32(self, slot: int, default: float = 0.0) -> float:
        return self.scalar(slot, "f32", default)

    def f64(self, slot: int, default: float = 0.0) -> float:
        return self.scalar(slot, "f64", default)

    # -- references --------------------------------------------------------

    def _ref(self, slot: int, what: str) -> int:
        pos = self.field_pos(slot)
        if not pos:
            return 0
        if pos + 4 > self.pos + self.size:
            raise self.fb._error(f"{self._what(slot)} runs past its table at {self.fb.rel(self.pos)}")
        return self.fb.deref(pos, f"{self._what(slot)} ({what})")

    def bytes(self, slot: int) -> Optional[bytes]:
        """A string field's raw bytes, or ``None`` when absent."""
        target = self._ref(slot, "string")
        if not target:
            return None
        return self.fb.string_at(target, f"string {self._what(slot)}")

    def string(self, slot: int, default: Optional[str] = None) -> Optional[str]:
        """A string field decoded as UTF-8, or ``default`` when absent."""
        raw = self.bytes(slot)
        if raw is None:
            return default
        return _decode(self.fb, raw, f"string {self._what(slot)}")

    def table(self, slot: int, name: Optional[str] = None) -> Optional["Table"]:
        """A nested table, or ``None`` when absent."""
        label = name or self._what(slot)
        target = self._ref(slot, "table")
        if not target:
            return None
        return self.fb.table_at(target, label)

    def vector(self, slot: int, elem_size: int = 4) -> Optional["Vector"]:
        """A vector field (``elem_size`` bytes per element: 4 for tables and strings)."""
        target = self._ref(slot, "vector")
        if not target:
            return None
        return self.fb.vector_at(target, elem_size, f"vector {self._what(slot)}")

    def scalars(self, slot: int, kind: str) -> Optional[Tuple]:
        """A vector of scalars as a tuple, or ``None`` when absent."""
        _, size = _scalar(kind)
        vec = self.vector(slot, size)
        return None if vec is None else vec.scalars(kind)

    def tables(self, slot: int, name: Optional[str] = None) -> Optional[List["Table"]]:
        """A vector of tables as a list, or ``None`` when absent."""
        vec = self.vector(slot, 4)
        return None if vec is None else list(vec.tables(name))

    def strings(self, slot: int) -> Optional[List[str]]:
        """A vector of strings as a list, or ``None`` when absent."""
        vec = self.vector(slot, 4)
        return None if vec is None else list(vec.strings())


class Vector:
    """A checked vector: ``len(v)`` elements of ``elem_size`` bytes from ``pos``."""

    __slots__ = ("fb", "pos", "length", "elem_size", "what")

    def __init__(self, fb: FlatBuffer, pos: int, length: int, elem_size: int, what: str):
        self.fb = fb
        self.pos = pos
        self.length = length
        self.elem_size = elem_size
        self.what = what

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"<Vector {self.what}: {self.length} x {self.elem_size} bytes>"

    def _elem(self, i: int) -> int:
        if not 0 <= i < self.length:
            raise IndexError(f"{self.what}: index {i} out of range for {self.length} elements")
        return self.pos + i * self.elem_size

    def raw(self) -> memoryview:
        """The element bytes (no copy)."""
        return self.fb.data[self.pos : self.pos + self.length * self.elem_size]

    def scalar(self, i: int, kind: str):
        fmt, size = _scalar(kind)
        if size != self.elem_size:
            raise ValueError(f"{self.what}: {kind} does not match element size {self.elem_size}")
        return struct.unpack_from(fmt, self.fb.data, self._elem(i))[0]

    def scalars(self, kind: str) -> Tuple:
        """All elements as scalars ``kind``."""
        fmt, size = _scalar(kind)
        if size != self.elem_size:
            raise ValueError(f"{self.what}: {kind} does not match element size {self.elem_size}")
        return struct.unpack_from(f"<{self.length}{fmt[1:]}", self.fb.data, self.pos)

    def table(self, i: int, name: Optional[str] = None) -> Table:
        what = f"{name or self.what}[{i}]"
        return self.fb.table_at(self.fb.deref(self._elem(i), what), what)

    def tables(self, name: Optional[str] = None) -> Iterator[Table]:
        for i in range(self.length):
            yield self.table(i, name)

    def bytes(self, i: int) -> bytes:
        what = f"{self.what}[{i}]"
        return self.fb.string_at(self.fb.deref(self._elem(i), what), what)

    def string(self, i: int) -> str:
        return _decode(self.fb, self.bytes(i), f"{self.what}[{i}]")

    def strings(self) -> Iterator[str]:
        for i in range(self.length):
            yield self.string(i)


def _decode(fb: FlatBuffer, raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise fb._error(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
