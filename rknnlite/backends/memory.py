"""Tensor memory for zero-copy I/O: :class:`TensorMem`, the Python face of ``rknn_tensor_mem``.

A :class:`TensorMem` is a shared memory mapping (``mmap``): ``Context.create_mem`` maps a
new anonymous file (``memfd``, so the memory has an fd like a DMA buffer), and
``Context.create_mem_from_fd`` maps an fd the application already has (a memfd, a
dma-buf from a camera or a DMA heap, a shared-memory file) -- mapped, never copied.
It has the buffer protocol (``memoryview(mem)``, ``np.frombuffer(mem)``), and
:meth:`TensorMem.array` / :meth:`TensorMem.view` give numpy views of it (no copy).

**Cache coherency as on a board** (SDK chapter "Cacheable Memory Consistency"): the CPU
reaches cacheable memory through its data cache, the NPU reads and writes DDR.  The
software backend emulates that, deterministically and in the worst case, for cacheable
memory bound to a context whose runtime does not flush it
(``InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE`` for inputs, ``DISABLE_FLUSH_OUTPUT_MEM_CACHE``
for outputs).  From that ``set_io_mem`` on, the memory has two views:

* the **CPU view**, the mapping itself (what ``memoryview``, ``array`` and ``view`` show);
* the **device view**, what the NPU reads and writes (``run_bound`` uses only this one).

CPU writes reach the device only with ``sync(MemSyncMode.TO_DEVICE)`` (a cache clean:
the bytes the CPU changed since the views last agreed are written back); device results
reach the CPU only with ``sync(MemSyncMode.FROM_DEVICE)`` (a cache invalidate: the CPU
view becomes the device view, and CPU writes not cleaned first are lost, as on ARM);
``BIDIRECTIONAL`` does both, in that order.  An application that forgets a sync reads
stale data here on every run, as it may on a board.  Dirty data is tracked per byte
(a board works per 64-byte cache line), and the device view starts as a copy of the
memory at the first such ``set_io_mem``.

Non-cacheable memory (``MemAllocFlag.NON_CACHEABLE``) and memory used only by contexts
with the default flush behaviour have one view: the runtime flushes inputs before and
invalidates outputs after each run itself, so ``sync`` is not needed (and does nothing).

**Lifetimes**: a numpy view (or memoryview) of the memory keeps the mapping alive, even
after the :class:`TensorMem` object is dropped.  :meth:`TensorMem.destroy` (``rknn_destroy_mem``)
unbinds the memory from every context, releases the fd it opened and the device view; the
mapping itself goes away with the last Python reference to it (views included), so a view
kept past ``destroy`` stays valid memory instead of crashing.  Every method of a destroyed
``TensorMem`` raises :class:`~rknnlite.errors.InvalidParamError`.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import stat
import weakref
from typing import Optional, Sequence

import numpy as np

from ..constants import MemAllocFlag, MemSyncMode, TensorMemFlag
from ..errors import InvalidParamError, RKNNMemoryError
from ..log import logger
from ..tensors.attr import TensorAttr
from ..tensors.memory import (TensorMemFields, buffer_array, check_alloc_flags, check_count, check_sync_mode,
                               tensor_view)

__all__ = ["TensorMem", "allocate", "map_fd"]

# Only allocate() and map_fd() construct TensorMem: they check the fd and size first (a mapping
# past the end of a file crashes the process when touched).
_FACTORY = object()


class TensorMem(TensorMemFields, mmap.mmap):
    """Memory a context reads inputs from and writes outputs to without copying
    (``rknn_tensor_mem``).  Create it with ``Context.create_mem`` or
    ``Context.create_mem_from_fd``, bind it with ``Context.set_io_mem``.

    It is an ``mmap.mmap`` of ``size`` bytes: the buffer protocol (``memoryview(mem)``,
    ``np.frombuffer(mem, ...)``), indexing and slicing work on the CPU view and do not copy
    (slicing an mmap does).  :meth:`array` and :meth:`view` are numpy views (no copy)
    starting at :attr:`offset`.  ``close()`` and the ``with`` statement call :meth:`destroy`.

    Fields of ``rknn_tensor_mem``: :attr:`virt_addr`, :attr:`phys_addr` (always 0),
    :attr:`fd`, :attr:`offset`, :attr:`size`, :attr:`flags` (a :class:`TensorMemFlag`);
    and :attr:`alloc_flags` (the :class:`MemAllocFlag` it was created with).

    See the module documentation for cache coherency and lifetimes.
    """

    def __new__(cls, fd: int, size: int, *, _factory=None, **_kwargs):
        if _factory is not _FACTORY:
            raise TypeError("create tensor memory with Context.create_mem() or Context.create_mem_from_fd()")
        return super().__new__(cls, fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def __init__(self, fd: int, size: int, *, _factory=None, offset: int = 0,
                 alloc_flags: MemAllocFlag = MemAllocFlag.DEFAULT, mem_flag: TensorMemFlag = TensorMemFlag.FROM_FD,
                 owns_fd: bool = False):
        self._fd = fd
        self._size = size
        self._offset = offset
        self._alloc_flags = MemAllocFlag(alloc_flags)
        self._mem_flag = TensorMemFlag(mem_flag)
        self._close_fd = weakref.finalize(self, os.close, fd) if owns_fd and fd >= 0 else None
        self._destroyed: Optional[str] = None  # why, once destroyed
        #: the device view (DDR) and the CPU cache's clean contents, once the views are apart
        self._device: Optional[np.ndarray] = None
        self._clean: Optional[np.ndarray] = None
        #: bumped when the views come apart, so cached device views are rebuilt
        self._generation = 0
        #: the contexts' binding tables this memory is bound in (binding.IoState)
        self._bound: "weakref.WeakSet" = weakref.WeakSet()

    # -- rknn_tensor_mem fields -----------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes of the mapping (``rknn_tensor_mem.size``); tensors fit in ``size - offset``."""
        return self._size

    @property
    def offset(self) -> int:
        """Byte offset of the tensor data in the mapping (``create_mem_from_fd``'s ``offset``;
        0 for ``create_mem``): views and bound tensors start there."""
        return self._offset

    @property
    def fd(self) -> int:
        """The file descriptor of the memory: the memfd ``create_mem`` made (closed by
        :meth:`destroy`; -1 where memfd is unavailable), or the caller's fd for
        ``create_mem_from_fd`` (never closed here: it stays the caller's)."""
        return self._fd

    @property
    def phys_addr(self) -> int:
        """Physical address: always 0 (no physically contiguous memory off-board)."""
        return 0

    @property
    def virt_addr(self) -> int:
        """Address of the start of the mapping in this process (the tensor data starts at
        ``virt_addr + offset``), for C code that takes a pointer."""
        self.check_alive("virt_addr")
        holder = ctypes.c_char.from_buffer(self)
        try:
            return ctypes.addressof(holder)
        finally:
            del holder  # releases the buffer export at once

    # -- views ----------------------------------------------------------------------------------

    def array(self, dtype, shape: Optional[Sequence[int]] = None, offset: int = 0) -> np.ndarray:
        """A numpy view of the CPU view (no copy): ``dtype`` elements from byte
        ``self.offset + offset``, in ``shape`` (C order), or 1-D over every whole element
        left when ``shape`` is None.  The view keeps the mapping alive.

        Raises:
            InvalidParamError: destroyed memory, a bad dtype/shape/offset, or more bytes
                than the memory has after the offset.
        """
        self.check_alive("array")
        return buffer_array(self, self._offset, self._offset, self._size, dtype, shape, offset)

    def view(self, attr: TensorAttr) -> np.ndarray:
        """The tensor ``attr`` describes, as a numpy view of the CPU view (no copy): shape
        ``attr.dims`` in ``attr.fmt`` order, dtype of ``attr.type``, rows ``attr.w_stride``
        (and planes ``attr.h_stride``) apart, so padding is skipped.  Write a camera frame
        into ``mem.view(native_attr)`` and the rows land where the NPU reads them.

        Raises:
            InvalidParamError: destroyed memory, an attr without a numpy dtype or with
                dynamic dims, or a tensor larger than ``size - offset``.
        """
        self.check_alive("view")
        if not isinstance(attr, TensorAttr):
            raise InvalidParamError(f"view takes a TensorAttr, got {type(attr).__name__}", op="rknn_tensor_mem")
        return tensor_view(self, self._offset, self._size - self._offset, attr)

    # -- cache coherency --------------------------------------------------------------------------

    def sync(self, mode=MemSyncMode.BIDIRECTIONAL) -> None:
        """Make the CPU and device views agree (``rknn_mem_sync``): ``TO_DEVICE`` after the
        CPU wrote and before the NPU reads (cache clean), ``FROM_DEVICE`` after the NPU wrote
        and before the CPU reads (cache invalidate), ``BIDIRECTIONAL`` both.  Copies the
        bytes that differ between the views; does nothing for memory with one view
        (non-cacheable, or only used by contexts that flush themselves).

        Raises:
            InvalidParamError: destroyed memory, or a mode that is no MemSyncMode.
        """
        self.check_alive("sync")
        mode = check_sync_mode(mode)
        if self._device is None:
            return
        if mode & MemSyncMode.TO_DEVICE:
            self._flush()
        if mode & MemSyncMode.FROM_DEVICE:
            self._invalidate()

    def _cpu_bytes(self) -> np.ndarray:
        return np.frombuffer(self, np.uint8)

    def _device_bytes(self):
        """What the NPU reads and writes: the device view, or the mapping itself."""
        return self if self._device is None else self._device

    def _split(self) -> None:
        """Give the memory a device view apart from the CPU view (cacheable memory bound to a
        context that does not flush it); starts as a copy of the memory."""
        if self._device is not None or not self.cacheable:
            return
        cpu = self._cpu_bytes()
        self._device = cpu.copy()
        self._clean = cpu.copy()
        self._generation += 1
        logger.debug("tensor memory %#x: device view apart from the CPU view (cacheable, flush disabled)",
                     id(self))

    def _flush(self) -> None:
        """Cache clean: bytes the CPU changed reach the device."""
        cpu = self._cpu_bytes()
        dirty = cpu != self._clean
        np.copyto(self._device, cpu, where=dirty)
        np.copyto(self._clean, cpu, where=dirty)

    def _invalidate(self) -> None:
        """Cache invalidate: the CPU sees the device's data (unflushed CPU writes are lost)."""
        np.copyto(self._cpu_bytes(), self._device)
        np.copyto(self._clean, self._device)

    # -- lifetime ---------------------------------------------------------------------------------

    def destroy(self) -> None:
        """Release the memory (``rknn_destroy_mem``); idempotent.

        Unbinds it from every context it is bound to (their ``run_bound`` then reports the
        tensor as unbound), drops the device view and closes the fd ``create_mem`` opened
        (an fd given to ``create_mem_from_fd`` stays open: it is the caller's).  The
        mapping is unmapped when the last reference to it goes, numpy views included, so
        views kept past ``destroy`` stay valid.  Later calls of this object's methods
        raise :class:`InvalidParamError`.
        """
        self._release("destroy() was called")

    def _release(self, why: str) -> None:
        if self._destroyed is not None:
            return
        self._destroyed = why
        for state in list(self._bound):
            state.forget(self)
        self._bound = weakref.WeakSet()
        self._device = self._clean = None
        if self._close_fd is not None:
            self._close_fd()

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed is not None else ("cacheable" if self.cacheable else "non-cacheable")
        return (f"<rknnlite.TensorMem {self._mem_flag.name} size={self._size} offset={self._offset} fd={self._fd} "
                f"{state}>")


def allocate(size: int, flags=MemAllocFlag.DEFAULT) -> TensorMem:
    """New zero-filled tensor memory of ``size`` bytes (``rknn_create_mem2``); see
    ``Context.create_mem``.

    Raises:
        InvalidParamError: ``size`` not an int > 0, or bad ``flags``.
        RKNNMemoryError: the memory could not be mapped.
    """
    size = check_count(size, "mem size", "rknn_create_mem", 1)
    flags = check_alloc_flags(flags)
    fd = -1
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        try:
            fd = memfd("rknnlite-tensor-mem", getattr(os, "MFD_CLOEXEC", 0))
            os.ftruncate(fd, size)
        except OSError as e:
            if fd >= 0:
                os.close(fd)
            logger.debug("memfd for tensor memory unavailable (%s); using anonymous memory", e)
            fd = -1
    try:
        return TensorMem(fd, size, _factory=_FACTORY, alloc_flags=flags, mem_flag=TensorMemFlag.ALLOC_INSIDE,
                         owns_fd=True)
    except (OSError, OverflowError, ValueError) as e:
        if fd >= 0:
            os.close(fd)
        raise RKNNMemoryError(f"cannot allocate {size} bytes of tensor memory: {e}", op="rknn_create_mem") from None


def map_fd(fd: int, size: int, offset: int = 0, flags=MemAllocFlag.DEFAULT) -> TensorMem:
    """Tensor memory over the first ``size`` bytes of ``fd`` (``rknn_create_mem_from_fd``):
    mapped shared, not copied; tensors start at byte ``offset``.  See
    ``Context.create_mem_from_fd``.

    Raises:
        InvalidParamError: a closed or unmappable fd, ``size``/``offset`` out of range, or a
            file shorter than ``size`` (touching a mapping past its end would crash).
    """
    op = "rknn_create_mem_from_fd"
    fd = check_count(fd, "fd", op, 0)
    size = check_count(size, "size", op, 1)
    offset = check_count(offset, "offset", op, 0)
    if offset >= size:
        raise InvalidParamError(f"offset {offset} must be smaller than size {size} (size counts from the start of "
                                f"the fd's memory)", op=op)
    flags = check_alloc_flags(flags)
    try:
        st = os.fstat(fd)
    except OSError as e:
        raise InvalidParamError(f"fd {fd} is not an open file descriptor: {e.strerror}", op=op) from None
    except OverflowError:  # past a C int: no descriptor has that number
        raise InvalidParamError(f"fd {fd} is not an open file descriptor: too large", op=op) from None
    length = st.st_size if stat.S_ISREG(st.st_mode) else _seek_size(fd)
    if length is not None and length < size:
        raise InvalidParamError(f"fd {fd} has {length} bytes, fewer than size {size}", op=op)
    try:
        return TensorMem(fd, size, _factory=_FACTORY, offset=offset, alloc_flags=flags,
                         mem_flag=TensorMemFlag.FROM_FD)
    except (OSError, OverflowError, ValueError) as e:
        raise InvalidParamError(f"cannot map fd {fd} ({size} bytes, read/write, shared): {e}", op=op) from None


def _seek_size(fd: int) -> Optional[int]:
    """The size of a dma-buf (``lseek(SEEK_END)``), or None when the fd cannot tell."""
    try:
        pos = os.lseek(fd, 0, os.SEEK_CUR)
        end = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, pos, os.SEEK_SET)
    except OSError:
        return None
    return end if end > 0 else None
