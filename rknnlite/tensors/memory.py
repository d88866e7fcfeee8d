"""What every tensor memory shares: the ``rknn_tensor_mem`` fields and the checks and views of it.

:class:`TensorMemory` is the protocol ``Context.create_mem`` answers on every backend (the
software backend's mmap-backed :class:`~rknnlite.backends.memory.TensorMem`, the
npu backend's :class:`~rknnlite.backends.npu.zero_copy.NpuTensorMem`); :class:`TensorMemFields`
implements its fields once for both.  :func:`tensor_view` and :func:`buffer_array` are the
numpy views (no copy) both give of their bytes.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np

from ..constants import MemAllocFlag, MemSyncMode, TensorFormat, TensorMemFlag
from ..errors import InvalidParamError
from .attr import DTYPE_OF_TYPE, TensorAttr

__all__ = ["TensorMemory", "TensorMemFields", "check_alloc_flags", "check_sync_mode", "check_count", "buffer_array",
           "tensor_view"]

_ALL_ALLOC = MemAllocFlag.CACHEABLE | MemAllocFlag.NON_CACHEABLE | MemAllocFlag.TRY_ALLOC_SRAM
# (height axis, width axis) of the layouts that have rows
_HW_AXES = {TensorFormat.NCHW: (2, 3), TensorFormat.NHWC: (1, 2), TensorFormat.NC1HWC2: (2, 3)}
_RANK = {TensorFormat.NCHW: 4, TensorFormat.NHWC: 4, TensorFormat.NC1HWC2: 5}


@runtime_checkable
class TensorMemory(Protocol):
    """Tensor memory (``rknn_tensor_mem``) as ``Context.create_mem``/``create_mem_from_fd``
    give it on every backend: its fields, numpy views of it (no copy), cache sync and
    destruction.  Sizes and offsets are in bytes."""

    @property
    def size(self) -> int:
        """Bytes of the memory; tensors fit in ``size - offset``."""

    @property
    def offset(self) -> int:
        """Where tensor data starts (``create_mem_from_fd``'s offset; 0 for ``create_mem``)."""

    @property
    def fd(self) -> int:
        """The memory's file descriptor (-1 when it has none)."""

    @property
    def phys_addr(self) -> int:
        """Physical address (0 where there is no physically contiguous memory)."""

    @property
    def virt_addr(self) -> int:
        """Address of the memory in this process."""

    @property
    def flags(self) -> TensorMemFlag:
        """``ALLOC_INSIDE`` (``create_mem``) or ``FROM_FD``."""

    @property
    def alloc_flags(self) -> MemAllocFlag:
        """The :class:`MemAllocFlag` bits it was created with."""

    @property
    def cacheable(self) -> bool:
        """False for NON_CACHEABLE memory."""

    @property
    def destroyed(self) -> bool:
        """True after :meth:`destroy`."""

    def array(self, dtype, shape: Optional[Sequence[int]] = None, offset: int = 0) -> np.ndarray:
        """A numpy view (no copy) of ``dtype`` elements from byte ``self.offset + offset``."""

    def view(self, attr: TensorAttr) -> np.ndarray:
        """The tensor ``attr`` describes as a numpy view (no copy), row padding skipped."""

    def sync(self, mode=MemSyncMode.BIDIRECTIONAL) -> None:
        """Make the CPU's and the device's views of the memory agree (``rknn_mem_sync``)."""

    def destroy(self) -> None:
        """Release the memory (``rknn_destroy_mem``); idempotent."""

    def close(self) -> None:
        """Same as :meth:`destroy`."""

    def check_alive(self, what: str) -> None:
        """``InvalidParamError`` naming ``what`` once the memory is destroyed."""


def check_alloc_flags(flags) -> MemAllocFlag:
    """``flags`` as a :class:`MemAllocFlag`: DEFAULT (= cacheable), CACHEABLE, NON_CACHEABLE,
    optionally with TRY_ALLOC_SRAM (accepted; the software backend has no SRAM, so the
    memory is ordinary memory, as the vendor runtime falls back to DDR).

    Raises:
        InvalidParamError: not an int, unknown bits, or CACHEABLE together with NON_CACHEABLE.
    """
    if isinstance(flags, bool) or not isinstance(flags, (int, np.integer)):
        raise InvalidParamError(f"mem alloc flags must be MemAllocFlag bits (DEFAULT, CACHEABLE, NON_CACHEABLE, "
                                f"TRY_ALLOC_SRAM), got {flags!r}", op="rknn_create_mem")
    value = int(flags)
    if value < 0 or value & ~int(_ALL_ALLOC):
        raise InvalidParamError(f"mem alloc flags 0x{value:x} has unknown bits; allowed: DEFAULT (0), CACHEABLE (1), "
                                f"NON_CACHEABLE (2), TRY_ALLOC_SRAM (4)", op="rknn_create_mem")
    both = MemAllocFlag.CACHEABLE | MemAllocFlag.NON_CACHEABLE
    if value & both == both:
        raise InvalidParamError("mem alloc flags CACHEABLE and NON_CACHEABLE exclude each other", op="rknn_create_mem")
    return MemAllocFlag(value)


def check_sync_mode(mode) -> MemSyncMode:
    """``mode`` as a :class:`MemSyncMode` (TO_DEVICE 1, FROM_DEVICE 2, BIDIRECTIONAL 3).

    Raises:
        InvalidParamError: anything else.
    """
    try:
        if isinstance(mode, bool):
            raise ValueError
        return MemSyncMode(mode)
    except (ValueError, TypeError):
        raise InvalidParamError(f"sync mode must be MemSyncMode.TO_DEVICE (1), FROM_DEVICE (2) or "
                                f"BIDIRECTIONAL (3), got {mode!r}", op="rknn_mem_sync") from None


def check_count(value, what: str, op: str, minimum: int) -> int:
    """``value`` as an int if it is an integer >= ``minimum``, else InvalidParamError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParamError(f"{what} must be an int >= {minimum}, got {value!r}", op=op)
    return int(value)


def buffer_array(buf, data_start: int, shown_start: int, size: int, dtype, shape, offset) -> np.ndarray:
    """``TensorMem.array`` on any buffer: ``dtype`` elements of ``buf`` from byte
    ``data_start + offset`` in ``shape`` (1-D over what is left when None), no copy.  The
    memory is ``size`` bytes and its tensor data starts at byte ``shown_start`` (for messages).

    Raises:
        InvalidParamError: a bad dtype/shape/offset, or more bytes than are left.
    """
    op = "rknn_tensor_mem"
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InvalidParamError(f"array: {dtype!r} is not a numpy dtype", op=op) from None
    if dt.itemsize == 0 or dt.hasobject:
        raise InvalidParamError(f"array: dtype {dt} has no fixed-size elements", op=op)
    skip = check_count(offset, "array offset", op, 0)
    room = size - shown_start - skip
    if shape is None:
        dims: Tuple[int, ...] = (max(room, 0) // dt.itemsize,)
    else:
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)
        dims = tuple(check_count(d, "array shape entries", op, 0) for d in shape)
    count = int(np.prod(dims, dtype=np.int64))
    if count * dt.itemsize > room:
        raise InvalidParamError(f"array: {count} x {dt} = {count * dt.itemsize} bytes from byte {shown_start + skip} "
                                f"do not fit in {size} bytes of tensor memory", op=op)
    return np.frombuffer(buf, dt, count, data_start + skip).reshape(dims)


class TensorMemFields:
    """The ``rknn_tensor_mem`` fields every tensor memory class reports the same way, from
    its ``_mem_flag``, ``_alloc_flags`` and ``_destroyed`` attributes, and what every one
    does alike: ``close()`` and ``with`` destroy it, it cannot be resized or pickled."""

    __slots__ = ()

    @property
    def flags(self) -> TensorMemFlag:
        """Where the memory comes from: ``ALLOC_INSIDE`` (``create_mem``) or ``FROM_FD``."""
        return self._mem_flag

    @property
    def alloc_flags(self) -> MemAllocFlag:
        """The :class:`MemAllocFlag` bits it was created with (DEFAULT means cacheable)."""
        return self._alloc_flags

    @property
    def cacheable(self) -> bool:
        """False for NON_CACHEABLE memory; cacheable memory may need :meth:`sync`."""
        return not self._alloc_flags & MemAllocFlag.NON_CACHEABLE

    @property
    def destroyed(self) -> bool:
        """True after :meth:`destroy` (or after the context that created it closed)."""
        return self._destroyed is not None

    def close(self) -> None:
        """Same as :meth:`destroy`."""
        self.destroy()

    def resize(self, newsize) -> None:
        """Not supported: tensor memory has a fixed size."""
        raise InvalidParamError("tensor memory cannot be resized; create a new one", op="rknn_tensor_mem")

    def check_alive(self, what: str) -> None:
        """InvalidParamError naming ``what`` once the memory is destroyed."""
        if self._destroyed is not None:
            raise InvalidParamError(f"{what}: this tensor memory was destroyed ({self._destroyed})",
                                    op="rknn_tensor_mem")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __reduce__(self):
        raise TypeError("tensor memory cannot be pickled; share its fd (create_mem_from_fd) instead")


def tensor_view(buffer, offset: int, room: int, attr: TensorAttr) -> np.ndarray:
    """The tensor ``attr`` describes in ``buffer`` from byte ``offset`` (``room`` bytes
    available), as a numpy view: ``attr.dims`` in ``attr.fmt`` order with rows
    ``w_stride`` and planes ``h_stride`` apart (padding skipped, so the view may be
    strided).  No copy; the view holds a buffer export of ``buffer``.

    Raises:
        InvalidParamError: a type without numpy dtype, dynamic dims, dims of the wrong rank
            for the format, or a tensor larger than ``room``.
    """
    name = DTYPE_OF_TYPE.get(attr.type)
    if name is None:
        raise InvalidParamError(f"tensor {attr.name!r} has type {attr.type.name}, which has no numpy view",
                                op="rknn_tensor_mem")
    dims = tuple(attr.dims)
    if any(d < 0 for d in dims):
        raise InvalidParamError(f"tensor {attr.name!r} has dynamic dims {list(dims)}; set the input shapes first",
                                op="rknn_tensor_mem")
    padded = list(dims)
    if _RANK.get(attr.fmt) == len(dims):
        h_axis, w_axis = _HW_AXES[attr.fmt]
        if attr.w_stride:
            padded[w_axis] = max(attr.w_stride, dims[w_axis])
        if attr.h_stride:
            padded[h_axis] = max(attr.h_stride, dims[h_axis])
    dtype = np.dtype(name)
    count = int(np.prod(padded, dtype=np.int64))
    if count * dtype.itemsize > room:
        raise InvalidParamError(f"tensor {attr.name!r} needs {count * dtype.itemsize} bytes (size_with_stride), "
                                f"the memory has {room} after its offset", op="rknn_tensor_mem")
    arr = np.frombuffer(buffer, dtype, count, offset).reshape(padded)
    if tuple(padded) != dims:
        arr = arr[tuple(slice(0, d) for d in dims)]
    return arr
