"""Zero-copy I/O of a ``Context`` on the npu backend: librknnrt's own memory and binding.

:class:`NpuZeroCopy` is what ``NpuBackend.zero_copy(io)`` gives the Context (``io``: the
Context's :class:`~rknnlite.backends.io_host.IoHost`, its lock, attributes and liveness):
``create_mem`` is ``rknn_create_mem``/``rknn_create_mem2``, ``create_mem_from_fd`` maps the
fd (as the software backend does) and wraps the mapping with ``rknn_create_mem_from_fd``,
``set_io_mem`` is ``rknn_set_io_mem`` (librknnrt judges the attr: layouts, types, strides,
sizes) and ``run_bound`` is ``rknn_run``.  Cache maintenance is the runtime's: it flushes
inputs and invalidates outputs around each run unless the context was created with
``InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE``/``DISABLE_FLUSH_OUTPUT_MEM_CACHE``, and
``mem.sync()`` is ``rknn_mem_sync``.

:class:`NpuTensorMem` has the interface of :class:`~rknnlite.backends.memory.TensorMem`
over the runtime's ``rknn_tensor_mem`` (its ``virt_addr``): ``array``/``view`` are numpy
views of the runtime's memory (no copy).  Its bytes are reachable through the buffer
protocol of :attr:`NpuTensorMem.buffer` (``memoryview(mem.buffer)``), since a Python
class cannot export a buffer before Python 3.12 (on 3.12+ ``memoryview(mem)`` works too).
As with ``TensorMem``: destroying memory unbinds it (``run_bound`` then names the tensor),
closing the context destroys the memory it created, and views kept past ``destroy`` stay
valid (the runtime frees the memory when the last view goes).
"""

from __future__ import annotations

import threading
import weakref
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ...constants import MemAllocFlag, MemSyncMode, TensorMemFlag
from ...errors import InvalidParamError
from ...tensors.memory import TensorMemFields, buffer_array, check_alloc_flags, check_sync_mode, tensor_view
from ..io_host import IoHost, check_all_bound, find_tensor
from ..memory import map_fd
from ...tensors.attr import TensorAttr

__all__ = ["NpuZeroCopy", "NpuTensorMem"]

_OP = "rknn_tensor_mem"


class NpuTensorMem(TensorMemFields):
    """One ``rknn_tensor_mem`` of a context, with the :class:`~rknnlite.backends.memory.TensorMem`
    interface.  Made by ``Context.create_mem``/``create_mem_from_fd`` on the npu backend."""

    def __init__(self, native, owner: "NpuZeroCopy", size: int, offset: int, alloc_flags: MemAllocFlag,
                 mem_flag: TensorMemFlag, fd: int, mapping=None):
        self._native = native
        self._owner = weakref.ref(owner)
        self._size = size
        self._offset = offset
        self._alloc_flags = MemAllocFlag(alloc_flags)
        self._mem_flag = TensorMemFlag(mem_flag)
        self._fd = fd
        #: the CPU mapping of a create_mem_from_fd memory (the runtime's virt_addr points into it)
        self._mapping = mapping
        self._destroyed: Optional[str] = None

    # -- rknn_tensor_mem fields ---------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes of the memory; tensors fit in ``size - offset``."""
        return self._size

    @property
    def offset(self) -> int:
        """Byte offset of the tensor data (``create_mem_from_fd``'s ``offset``; 0 otherwise)."""
        return self._offset

    @property
    def fd(self) -> int:
        """The memory's dma-buf fd as the runtime reports it (``create_mem``), or the caller's fd."""
        return self._fd if self._mem_flag == TensorMemFlag.FROM_FD else self._live_native("fd").fd

    @property
    def phys_addr(self) -> int:
        """Physical address the runtime reports (0 when it reports none)."""
        return int(self._live_native("phys_addr").phys_addr)

    @property
    def virt_addr(self) -> int:
        """CPU address of the start of the memory (the tensor data starts at ``virt_addr + offset``)."""
        return int(self._live_native("virt_addr").virt_addr)

    @property
    def buffer(self):
        """The runtime's memory object: buffer protocol over the tensor bytes (from ``offset``)."""
        return self._live_native("buffer")

    def __buffer__(self, flags: int) -> memoryview:  # Python 3.12+: memoryview(mem), np.frombuffer(mem)
        return memoryview(self._live_native("buffer"))

    # -- views ------------------------------------------------------------------------------------

    def array(self, dtype, shape: Optional[Sequence[int]] = None, offset: int = 0) -> np.ndarray:
        """A numpy view of the runtime's memory (no copy): ``dtype`` elements from byte
        ``self.offset + offset``, in ``shape`` (C order), or 1-D over every whole element left.

        Raises:
            InvalidParamError: destroyed memory, a bad dtype/shape/offset, or too many bytes.
        """
        native = self._live_native("array")
        return buffer_array(native, 0, self._offset, self._offset + self._room(), dtype, shape, offset)

    def view(self, attr: TensorAttr) -> np.ndarray:
        """The tensor ``attr`` describes as a numpy view of the runtime's memory (no copy):
        ``attr.dims`` in ``attr.fmt`` order, rows ``w_stride`` apart (see ``TensorMem.view``)."""
        native = self._live_native("view")
        if not isinstance(attr, TensorAttr):
            raise InvalidParamError(f"view takes a TensorAttr, got {type(attr).__name__}", op=_OP)
        return tensor_view(native, 0, self._room(), attr)

    def _room(self) -> int:
        return min(self._size - self._offset, len(memoryview(self._native)))

    # -- cache coherency ----------------------------------------------------------------------------

    def sync(self, mode=MemSyncMode.BIDIRECTIONAL) -> None:
        """``rknn_mem_sync``: ``TO_DEVICE`` after the CPU wrote (cache clean),
        ``FROM_DEVICE`` before the CPU reads what the NPU wrote (invalidate), ``BIDIRECTIONAL`` both.

        Raises:
            InvalidParamError: destroyed memory, or a mode that is no MemSyncMode.
        """
        native = self._live_native("sync")
        mode = check_sync_mode(mode)
        native.sync(int(mode))

    # -- lifetime -------------------------------------------------------------------------------------

    def destroy(self) -> None:
        """``rknn_destroy_mem``; idempotent.  Unbinds the memory from its context; when numpy
        views of it are alive the runtime frees it once the last one goes."""
        self._release("destroy() was called")

    def _release(self, why: str) -> None:
        if self._destroyed is not None:
            return
        self._destroyed = why
        owner = self._owner()
        if owner is not None:
            owner.forget(self)
        native, self._native = self._native, None
        try:
            native.close()
        except InvalidParamError:
            pass  # views are alive: the runtime memory is freed when the last one is released
        self._mapping = None

    def _live_native(self, what: str):
        self.check_alive(what)
        return self._native

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed is not None else ("cacheable" if self.cacheable else "non-cacheable")
        return (f"<rknnlite.NpuTensorMem {self._mem_flag.name} size={self._size} offset={self._offset} "
                f"{state}>")


class NpuZeroCopy:
    """The zero-copy I/O of one Context on an :class:`~rknnlite.backends.npu.NpuBackend`."""

    def __init__(self, io: IoHost, backend):
        self._io = io
        self._backend = backend
        self._lock = threading.Lock()
        #: (is_input, index) -> the memory bound to that tensor
        self._bound: Dict[Tuple[bool, int], NpuTensorMem] = {}
        self._mems: "weakref.WeakSet[NpuTensorMem]" = weakref.WeakSet()

    def _live(self, op: str):
        self._io.live(op)
        return self._backend

    def create_mem(self, size: int, flags=MemAllocFlag.DEFAULT) -> NpuTensorMem:
        """``rknn_create_mem`` (``rknn_create_mem2`` with ``flags``): new device memory."""
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise InvalidParamError(f"mem size must be an int >= 1, got {size!r}", op="rknn_create_mem")
        flags = check_alloc_flags(flags)
        native = self._live("rknn_create_mem").create_mem(int(size), int(flags))
        mem = NpuTensorMem(native, self, int(size), 0, flags, TensorMemFlag.ALLOC_INSIDE, -1)
        self._mems.add(mem)
        return mem

    def create_mem_from_fd(self, fd: int, size: int, offset: int = 0, flags=MemAllocFlag.DEFAULT) -> NpuTensorMem:
        """``rknn_create_mem_from_fd`` over ``fd`` mapped here (checked as on the software
        backend: :func:`~rknnlite.backends.memory.map_fd`); the fd stays the caller's."""
        backend = self._live("rknn_create_mem_from_fd")
        mapping = map_fd(fd, size, offset, flags)
        try:
            native = backend.create_mem_from_fd(int(fd), mapping, int(size), int(offset))
        except BaseException:
            mapping.destroy()
            raise
        mem = NpuTensorMem(native, self, int(size), int(offset), mapping.alloc_flags, TensorMemFlag.FROM_FD,
                           int(fd), mapping)
        self._mems.add(mem)
        return mem

    def set_io_mem(self, mem, attr) -> None:
        """``rknn_set_io_mem``: librknnrt checks ``attr`` (layout, type, strides, size)."""
        op = "rknn_set_io_mem"
        if not isinstance(mem, NpuTensorMem) or mem._owner() is not self:
            raise InvalidParamError(f"set_io_mem takes a TensorMem from this context's create_mem/create_mem_from_fd, "
                                    f"got {type(mem).__name__}", op=op)
        native = mem._live_native("set_io_mem")
        if not isinstance(attr, TensorAttr):
            raise InvalidParamError(f"set_io_mem takes a TensorAttr (from ctx.inputs, ctx.outputs, ctx.native_inputs "
                                    f"or ctx.native_outputs), got {type(attr).__name__}", op=op)
        key = find_tensor(self._io, attr)
        with self._io.lock:
            self._live(op).set_io_mem(native, attr)
            with self._lock:
                self._bound[key] = mem

    def owns(self, mem) -> bool:
        """Whether ``mem`` was made by this context's ``create_mem``/``create_mem_from_fd``."""
        return isinstance(mem, NpuTensorMem) and mem._owner() is self

    def forget(self, mem: NpuTensorMem) -> None:
        """Unbind ``mem`` from every tensor (it is being destroyed)."""
        with self._lock:
            for key in [k for k, m in self._bound.items() if m is mem]:
                del self._bound[key]

    def run_bound(self) -> None:
        """``rknn_run`` on the bound memory."""
        with self._io.lock:
            backend = self._live("rknn_run")
            with self._lock:
                inputs = {i for is_input, i in self._bound if is_input}
                outputs = {i for is_input, i in self._bound if not is_input}
            check_all_bound(self._io, inputs, outputs)
            backend.run_bound()

    def release(self) -> None:
        """Unbind everything and destroy the memory this context created."""
        with self._lock:
            self._bound.clear()
            mems = list(self._mems)
        for mem in mems:
            mem._release("the context that created it was closed")
