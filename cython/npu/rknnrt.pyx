# cython: language_level=3
"""The librknnrt binding: ``dlopen`` of Rockchip's runtime and one wrapper per C call.

Nothing links against librknnrt at build time.  :func:`open_library` ``dlopen``\\ s a
file and resolves every function of the C API one by one with ``dlsym`` into a table
(``Library.lib``); a symbol an older runtime lacks stays ``NULL`` and only the call that
needs it fails, with an :class:`~rknnlite.errors.RKNNError` naming the symbol, the
library file and its version.  Wrappers call ``lib.rknn_*`` through that table, every
native call runs ``with nogil:``, and every return code goes through one
``check(ret, "rknn_*")`` (:func:`rknnlite.errors.check`).

Objects:

* :class:`Library` -- one loaded librknnrt (path, version, symbol table).
* :class:`RknnContext` -- one ``rknn_context``: queries (answered with the same Python
  objects ``Context.query`` returns: :class:`~rknnlite.tensors.attr.TensorAttr`,
  :class:`~rknnlite.tensors.ranges.InputRange`, :class:`~rknnlite.tensors.perf.MemSize`
  ...), general I/O, zero-copy memory, core masks, dynamic shapes, custom operators.
* :class:`TensorMemory` -- one ``rknn_tensor_mem``; exposes its bytes through the buffer
  protocol (zero-copy: a ``memoryview``/``numpy`` view aliases the runtime's memory).

Copies: ``RknnContext(library, model)`` hands the model buffer's own address to
``rknn_init`` (no copy here; the buffer is kept alive with the context).  ``run`` hands
the input arrays' own memory to ``rknn_inputs_set`` and lets the runtime write outputs
straight into new numpy arrays (``is_prealloc=1``).  The runtime itself may copy.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset, strncpy
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlclose, dlerror, dlopen, dlsym

from abi_sizes cimport compiled_sizes
from rknn_api cimport *
from rknn_custom_op cimport (RKNN_TARGET_TYPE_CPU, rknn_custom_op, rknn_custom_op_attr, rknn_custom_op_callback,
                             rknn_custom_op_context, rknn_custom_op_tensor, rknn_register_custom_ops_fn)

import threading
import weakref

import numpy as np

from rknnlite._native import abi as _abi
from rknnlite.constants import QntType, TensorFormat, TensorType
from rknnlite.errors import (ContextInvalidError, DeviceUnavailableError, InvalidParamError, RKNNError,
                             check as _raise_for)
from rknnlite.tensors.attr import DTYPE_OF_TYPE, TensorAttr
from rknnlite.tensors.perf import MemSize
from rknnlite.tensors.ranges import InputRange

__all__ = ["Library", "RknnContext", "TensorMemory", "open_library", "SYMBOLS", "ABI_SIZES"]

#: sizeof of the C structs of the ABI on LP64 (rknnlite._native.abi's table); this module's own
#: compiled sizes are checked against it at import.
ABI_SIZES = _abi.EXPECTED_SIZES
_abi.check_abi(compiled_sizes())


cdef struct Api:
    rknn_init_fn rknn_init
    rknn_dup_context_fn rknn_dup_context
    rknn_destroy_fn rknn_destroy
    rknn_query_fn rknn_query
    rknn_inputs_set_fn rknn_inputs_set
    rknn_set_batch_core_num_fn rknn_set_batch_core_num
    rknn_set_core_mask_fn rknn_set_core_mask
    rknn_run_fn rknn_run
    rknn_outputs_get_fn rknn_outputs_get
    rknn_outputs_release_fn rknn_outputs_release
    rknn_create_mem_from_phys_fn rknn_create_mem_from_phys
    rknn_create_mem_from_fd_fn rknn_create_mem_from_fd
    rknn_create_mem_fn rknn_create_mem
    rknn_create_mem2_fn rknn_create_mem2
    rknn_destroy_mem_fn rknn_destroy_mem
    rknn_set_io_mem_fn rknn_set_io_mem
    rknn_set_weight_mem_fn rknn_set_weight_mem
    rknn_set_internal_mem_fn rknn_set_internal_mem
    rknn_set_input_shapes_fn rknn_set_input_shapes
    rknn_mem_sync_fn rknn_mem_sync
    rknn_register_custom_ops_fn rknn_register_custom_ops
    void (*rknn_custom_op_get_op_attr)(rknn_custom_op_context*, const char*, rknn_custom_op_attr*) noexcept nogil


#: Every symbol the binding resolves, in table order; the first three are required.
SYMBOLS = (
    "rknn_init", "rknn_destroy", "rknn_query", "rknn_dup_context", "rknn_inputs_set",
    "rknn_set_batch_core_num", "rknn_set_core_mask", "rknn_run", "rknn_outputs_get",
    "rknn_outputs_release", "rknn_create_mem_from_phys", "rknn_create_mem_from_fd",
    "rknn_create_mem", "rknn_create_mem2", "rknn_destroy_mem", "rknn_set_io_mem",
    "rknn_set_input_shapes", "rknn_mem_sync", "rknn_register_custom_ops", "rknn_custom_op_get_op_attr",
    "rknn_set_weight_mem", "rknn_set_internal_mem",
)
_REQUIRED = SYMBOLS[:3]


cdef inline int check(int ret, str op) except -1:
    """The one place a return code becomes an exception (rknnlite.errors.check)."""
    if ret < 0:
        _raise_for(ret, op)
    return ret


cdef class Library:
    """One ``dlopen``\\ ed librknnrt and its symbol table.

    Attributes:
        path: what was passed to ``dlopen`` (a path, or the bare soname).
        version: the runtime's version string: from ``rknn_query(SDK_VERSION)`` once a
            context has been created, else the one embedded in the file (may be ``None``).
        missing: the names of the C API functions this runtime does not export.
    """

    cdef void* handle
    cdef Api lib
    cdef readonly str path
    cdef public object version
    cdef readonly tuple missing

    def __cinit__(self):
        self.handle = NULL
        memset(&self.lib, 0, sizeof(Api))

    def __dealloc__(self):
        # Contexts keep their Library alive, so nothing uses the handle any more.
        if self.handle != NULL:
            dlclose(self.handle)

    cdef void _resolve(self):
        cdef list missing = []
        cdef void* p
        for name in SYMBOLS:
            p = dlsym(self.handle, name.encode("ascii"))
            if p == NULL:
                missing.append(name)
            self._store(name, p)
        self.missing = tuple(missing)

    cdef void _store(self, str name, void* p):
        if name == "rknn_init": self.lib.rknn_init = <rknn_init_fn>p
        elif name == "rknn_destroy": self.lib.rknn_destroy = <rknn_destroy_fn>p
        elif name == "rknn_query": self.lib.rknn_query = <rknn_query_fn>p
        elif name == "rknn_dup_context": self.lib.rknn_dup_context = <rknn_dup_context_fn>p
        elif name == "rknn_inputs_set": self.lib.rknn_inputs_set = <rknn_inputs_set_fn>p
        elif name == "rknn_set_batch_core_num": self.lib.rknn_set_batch_core_num = <rknn_set_batch_core_num_fn>p
        elif name == "rknn_set_core_mask": self.lib.rknn_set_core_mask = <rknn_set_core_mask_fn>p
        elif name == "rknn_run": self.lib.rknn_run = <rknn_run_fn>p
        elif name == "rknn_outputs_get": self.lib.rknn_outputs_get = <rknn_outputs_get_fn>p
        elif name == "rknn_outputs_release": self.lib.rknn_outputs_release = <rknn_outputs_release_fn>p
        elif name == "rknn_create_mem_from_phys":
            self.lib.rknn_create_mem_from_phys = <rknn_create_mem_from_phys_fn>p
        elif name == "rknn_create_mem_from_fd": self.lib.rknn_create_mem_from_fd = <rknn_create_mem_from_fd_fn>p
        elif name == "rknn_create_mem": self.lib.rknn_create_mem = <rknn_create_mem_fn>p
        elif name == "rknn_create_mem2": self.lib.rknn_create_mem2 = <rknn_create_mem2_fn>p
        elif name == "rknn_destroy_mem": self.lib.rknn_destroy_mem = <rknn_destroy_mem_fn>p
        elif name == "rknn_set_io_mem": self.lib.rknn_set_io_mem = <rknn_set_io_mem_fn>p
        elif name == "rknn_set_weight_mem": self.lib.rknn_set_weight_mem = <rknn_set_weight_mem_fn>p
        elif name == "rknn_set_internal_mem": self.lib.rknn_set_internal_mem = <rknn_set_internal_mem_fn>p
        elif name == "rknn_set_input_shapes": self.lib.rknn_set_input_shapes = <rknn_set_input_shapes_fn>p
        elif name == "rknn_mem_sync": self.lib.rknn_mem_sync = <rknn_mem_sync_fn>p
        elif name == "rknn_register_custom_ops":
            self.lib.rknn_register_custom_ops = <rknn_register_custom_ops_fn>p
        elif name == "rknn_custom_op_get_op_attr":
            self.lib.rknn_custom_op_get_op_attr = <void (*)(rknn_custom_op_context*, const char*,
                                                            rknn_custom_op_attr*) noexcept nogil>p

    def has(self, str name):
        """Whether this runtime exports the C function ``name``."""
        return name in SYMBOLS and name not in self.missing

    cdef int need(self, void* fn, str name, str feature) except -1:
        """Raise (naming the symbol, the file and its version) when ``fn`` is missing."""
        if fn == NULL:
            raise RKNNError(
                f"{feature} needs {name}(), which the librknnrt at {self.path} (version "
                f"{self.version or 'unknown'}) does not export; install a newer librknnrt.so", op=name)
        return 0

    def __repr__(self):
        return f"<rknnlite librknnrt {self.path!r} version {self.version!r}>"


def open_library(str path, version=None):
    """``dlopen`` ``path`` and resolve the C API; a new :class:`Library`.

    ``version`` is the version to report until a context queries the real one.

    Raises:
        DeviceUnavailableError: the file cannot be loaded (the loader's message is
            included) or lacks ``rknn_init``/``rknn_destroy``/``rknn_query``.
    """
    cdef Library library = Library.__new__(Library)
    cdef bytes raw = path.encode()
    cdef const char* cpath = raw
    cdef void* handle
    with nogil:
        handle = dlopen(cpath, RTLD_NOW | RTLD_LOCAL)
    if handle == NULL:
        err = dlerror()
        reason = err.decode("utf-8", "replace") if err != NULL else "unknown error"
        raise DeviceUnavailableError(f"cannot load {path}: {reason}", op="dlopen")
    library.handle = handle
    library.path = path
    library.version = version
    library._resolve()
    absent = [name for name in _REQUIRED if name in library.missing]
    if absent:
        raise DeviceUnavailableError(
            f"{path} is not a usable librknnrt: it does not export {', '.join(absent)}", op="dlsym")
    return library


# -- rknn_tensor_attr <-> TensorAttr -------------------------------------------------------------

cdef inline long _signed(uint32_t d):
    return <long>(<int32_t>d)


cdef object _to_attr(rknn_tensor_attr* a):
    cdef uint32_t n = min(a.n_dims, RKNN_MAX_DIMS)
    dims = tuple(_signed(a.dims[i]) for i in range(n))
    name = a.name[:strnlen_(a.name, RKNN_MAX_NAME_LEN)].decode("utf-8", "replace")
    return TensorAttr(
        index=a.index, name=name, dims=dims, fmt=_enum(TensorFormat, a.fmt, TensorFormat.UNDEFINED),
        type=_enum(TensorType, a.type, a.type), qnt_type=_enum(QntType, a.qnt_type, QntType.NONE),
        zp=a.zp, scale=a.scale, fl=a.fl, w_stride=a.w_stride, h_stride=a.h_stride,
        pass_through=bool(a.pass_through))


cdef object _enum(cls, int value, default):
    try:
        return cls(value)
    except ValueError:
        return default


cdef size_t strnlen_(const char* s, size_t n):
    cdef size_t i = 0
    while i < n and s[i] != 0:
        i += 1
    return i


cdef int _from_attr(attr, rknn_tensor_attr* a) except -1:
    """Fill ``a`` from a :class:`TensorAttr` (every field, derived sizes included)."""
    memset(a, 0, sizeof(rknn_tensor_attr))
    dims = tuple(attr.dims)
    if len(dims) > RKNN_MAX_DIMS:
        raise InvalidParamError(f"tensor {attr.name!r} has {len(dims)} dims; at most {RKNN_MAX_DIMS}",
                                op="rknn_tensor_attr")
    a.index = attr.index
    a.n_dims = len(dims)
    for i, d in enumerate(dims):
        a.dims[i] = <uint32_t>(<int32_t>d)
    raw = str(attr.name).encode("utf-8")[:RKNN_MAX_NAME_LEN - 1]
    strncpy(a.name, raw, RKNN_MAX_NAME_LEN - 1)
    a.fmt = <rknn_tensor_format><int>(attr.fmt)
    a.type = <rknn_tensor_type><int>(attr.type)
    a.qnt_type = <rknn_tensor_qnt_type><int>(attr.qnt_type)
    a.fl = attr.fl
    a.zp = attr.zp
    a.scale = attr.scale
    a.w_stride = attr.w_stride
    a.h_stride = attr.h_stride
    a.pass_through = 1 if attr.pass_through else 0
    if int(attr.type) in DTYPE_OF_TYPE:
        a.n_elems = attr.n_elems
        a.size = attr.size
        try:
            a.size_with_stride = attr.size_with_stride
        except RKNNError:  # strides that do not fit the dims: the runtime judges them
            a.size_with_stride = a.size
    return 0


cdef object _dtype_of(int type_):
    try:
        return np.dtype(DTYPE_OF_TYPE[TensorType(type_)])
    except (KeyError, ValueError):
        raise InvalidParamError(f"tensor type {type_} has no numpy dtype", op="rknn_outputs_get") from None


# -- custom operators: native trampolines over Python operators --------------------------------

cdef enum:
    _SLOTS = 16

cdef object _slots = [None] * _SLOTS
_slots_lock = threading.Lock()


class _PyOp:
    """One registered Python operator: the object, its slot, the error its last call raised."""

    __slots__ = ("op", "slot", "error", "context_ref")

    def __init__(self, op, slot, context):
        self.op = op
        self.slot = slot
        self.error = None
        self.context_ref = weakref.ref(context)


class NativeNode:
    """What a Python custom operator's ``compute(node, inputs)`` receives on the npu backend.

    Attributes:
        op: the operator type; ``name`` the same (the runtime does not pass node names);
        inputs / outputs: tensor names as the runtime reports them.
    ``attr(name)`` reads an attribute of the node through ``rknn_custom_op_get_op_attr``
    (a numpy array, or ``None`` when the node has no such attribute).
    """

    __slots__ = ("op", "name", "inputs", "outputs", "_reader")

    def __init__(self, op, inputs, outputs, reader):
        self.op = op
        self.name = op
        self.inputs = inputs
        self.outputs = outputs
        self._reader = reader

    def attr(self, name):
        return self._reader(name)


cdef object _tensor_view(rknn_custom_op_tensor* t):
    cdef rknn_tensor_attr* a = &t.attr
    dtype = _dtype_of(a.type)
    shape = tuple(max(_signed(a.dims[i]), 0) for i in range(min(a.n_dims, RKNN_MAX_DIMS)))
    cdef uintptr_t addr = <uintptr_t>t.mem.virt_addr + <uintptr_t>t.mem.offset
    cdef size_t nbytes = t.mem.size
    count = 1
    for d in shape:
        count *= d
    if addr == 0 or count * dtype.itemsize > nbytes:
        raise RKNNError(f"custom op tensor {a.name.decode('utf-8', 'replace')!r}: the runtime gave "
                        f"{nbytes} bytes for shape {list(shape)}", op="rknn_custom_op_compute")
    buf = _RawBuffer.wrap(<void*>addr, count * dtype.itemsize)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


cdef int _compute(int slot, rknn_custom_op_context* c, rknn_custom_op_tensor* ins, uint32_t n_in,
                  rknn_custom_op_tensor* outs, uint32_t n_out) noexcept:
    # called by the trampolines below with the GIL held
    entry = _slots[slot]
    if entry is None:
        return RKNN_ERR_FAIL
    try:
        inputs = [_tensor_view(&ins[i]) for i in range(n_in)]
        targets = [_tensor_view(&outs[i]) for i in range(n_out)]
        names_in = [ins[i].attr.name.decode("utf-8", "replace") for i in range(n_in)]
        names_out = [outs[i].attr.name.decode("utf-8", "replace") for i in range(n_out)]
        ctx = entry.context_ref()
        reader = (lambda name, _c=<uintptr_t>c, _x=ctx: _x._op_attr(_c, name)) if ctx is not None else (
            lambda name: None)
        node = NativeNode(entry.op.op_type, names_in, names_out, reader)
        results = entry.op.compute(node, inputs)
        results = list(results)
        if len(results) != n_out:
            raise RKNNError(f"custom op {entry.op.op_type!r} returned {len(results)} outputs, the node has {n_out}",
                            op="rknn_custom_op_compute")
        for target, result in zip(targets, results):
            result = np.asarray(result)
            if result.size != target.size:
                raise RKNNError(f"custom op {entry.op.op_type!r} returned shape {list(result.shape)}; the "
                                f"runtime expects {list(target.shape)}", op="rknn_custom_op_compute")
            np.copyto(target, result.reshape(target.shape), casting="unsafe")
        return RKNN_SUCC
    except BaseException as e:  # stashed, re-raised by RknnContext.run after rknn_run returns
        entry.error = e
        return RKNN_ERR_FAIL


cdef int _c0(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(0, c, i, ni, o, no)
cdef int _c1(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(1, c, i, ni, o, no)
cdef int _c2(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(2, c, i, ni, o, no)
cdef int _c3(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(3, c, i, ni, o, no)
cdef int _c4(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(4, c, i, ni, o, no)
cdef int _c5(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(5, c, i, ni, o, no)
cdef int _c6(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(6, c, i, ni, o, no)
cdef int _c7(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(7, c, i, ni, o, no)
cdef int _c8(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(8, c, i, ni, o, no)
cdef int _c9(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(9, c, i, ni, o, no)
cdef int _c10(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(10, c, i, ni, o, no)
cdef int _c11(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(11, c, i, ni, o, no)
cdef int _c12(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(12, c, i, ni, o, no)
cdef int _c13(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(13, c, i, ni, o, no)
cdef int _c14(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(14, c, i, ni, o, no)
cdef int _c15(rknn_custom_op_context* c, rknn_custom_op_tensor* i, uint32_t ni, rknn_custom_op_tensor* o, uint32_t no) noexcept with gil: return _compute(15, c, i, ni, o, no)

cdef rknn_custom_op_callback _TRAMPOLINES[_SLOTS]
_TRAMPOLINES[:] = [<rknn_custom_op_callback>_c0, <rknn_custom_op_callback>_c1, <rknn_custom_op_callback>_c2,
                   <rknn_custom_op_callback>_c3, <rknn_custom_op_callback>_c4, <rknn_custom_op_callback>_c5,
                   <rknn_custom_op_callback>_c6, <rknn_custom_op_callback>_c7, <rknn_custom_op_callback>_c8,
                   <rknn_custom_op_callback>_c9, <rknn_custom_op_callback>_c10, <rknn_custom_op_callback>_c11,
                   <rknn_custom_op_callback>_c12, <rknn_custom_op_callback>_c13, <rknn_custom_op_callback>_c14,
                   <rknn_custom_op_callback>_c15]


cdef class _RawBuffer:
    """A writable buffer over memory someone else owns (kept alive by ``owner``)."""

    cdef void* ptr
    cdef Py_ssize_t size
    cdef object owner

    @staticmethod
    cdef _RawBuffer wrap(void* ptr, Py_ssize_t size, owner=None):
        cdef _RawBuffer b = _RawBuffer.__new__(_RawBuffer)
        b.ptr = ptr
        b.size = size
        b.owner = owner
        return b

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.ptr, self.size, 0, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


# -- zero-copy memory ------------------------------------------------------------------------------

cdef class TensorMemory:
    """One ``rknn_tensor_mem`` of a context (zero-copy I/O memory).

    Its bytes (``size`` bytes at ``virt_addr + offset``) are exposed through the buffer
    protocol: ``memoryview(mem)`` and ``np.frombuffer(mem, ...)`` alias the runtime's
    memory, no copy.  :meth:`sync` flushes or invalidates the CPU cache
    (``rknn_mem_sync``); :meth:`close` frees it (``rknn_destroy_mem``); a memory still
    open when its context is destroyed is freed first.  Memory created from a user
    buffer (``create_mem_from_fd``/``create_mem_from_phys`` with ``virt``) keeps that
    buffer alive; freeing the struct leaves the user's memory to the user.
    """

    cdef rknn_tensor_mem* mem
    cdef RknnContext owner
    cdef object backing
    cdef int exports
    cdef object __weakref__

    def __dealloc__(self):
        self._release()

    cdef void _release(self) noexcept:
        """Free the struct now (no error can be reported here) and let a closing context finish."""
        cdef rknn_tensor_mem* m = self.mem
        cdef RknnContext owner = self.owner
        self.mem = NULL
        if m == NULL or owner is None:
            return
        if owner.ctx != 0 and owner.lib.rknn_destroy_mem != NULL:
            with nogil:
                owner.lib.rknn_destroy_mem(owner.ctx, m)
        if owner.closing:
            owner._finish_destroy()

    cdef rknn_tensor_mem* live(self) except NULL:
        if self.mem == NULL:
            raise ContextInvalidError("this tensor memory was destroyed", op="rknn_tensor_mem")
        return self.mem

    @property
    def virt_addr(self):
        """CPU address of the memory (int)."""
        return <uintptr_t>self.live().virt_addr

    @property
    def phys_addr(self):
        """Physical (device) address, 0 when the runtime does not report one."""
        return self.live().phys_addr

    @property
    def fd(self):
        """dma-buf file descriptor, or -1."""
        return self.live().fd

    @property
    def offset(self):
        """Offset of the tensor's bytes from ``virt_addr`` (and within ``fd``)."""
        return self.live().offset

    @property
    def size(self):
        """Size in bytes."""
        return self.live().size

    @property
    def flags(self):
        """``rknn_tensor_mem_flags`` (:class:`~rknnlite.constants.TensorMemFlag` values)."""
        return self.live().flags

    @property
    def closed(self):
        """True after :meth:`close` (or once the context was destroyed)."""
        return self.mem == NULL

    def sync(self, int mode):
        """``rknn_mem_sync``: ``MemSyncMode.TO_DEVICE`` after the CPU wrote, ``FROM_DEVICE``
        before the CPU reads, ``BIDIRECTIONAL`` both."""
        self.owner.mem_sync(self, mode)

    def close(self):
        """``rknn_destroy_mem``; idempotent.  Refused while a buffer view of it exists."""
        if self.mem == NULL:
            return
        if self.exports:
            raise InvalidParamError(f"this tensor memory still has {self.exports} buffer view(s); release them "
                                    "(del the arrays/memoryviews) before close()", op="rknn_destroy_mem")
        mem, self.mem = self.mem, NULL
        if self.owner.ctx != 0:
            self.owner._destroy_mem(mem)
        if self.owner.closing:
            self.owner._finish_destroy()

    def __getbuffer__(self, Py_buffer* view, int flags):
        cdef rknn_tensor_mem* m = self.live()
        if m.virt_addr == NULL:
            raise InvalidParamError("this tensor memory has no CPU mapping (virt_addr is NULL)", op="rknn_tensor_mem")
        # size counts from virt_addr (offset included): the tensor bytes are [offset, size)
        PyBuffer_FillInfo(view, self, <char*>m.virt_addr + m.offset, m.size - m.offset if m.size > m.offset else 0,
                          0, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1
        if self.exports == 0 and self.owner is not None and self.owner.closing:
            self._release()  # the context was destroyed while this view was alive

    def __repr__(self):
        if self.mem == NULL:
            return "<TensorMemory (destroyed)>"
        return f"<TensorMemory {self.mem.size} bytes at {<uintptr_t>self.mem.virt_addr:#x} fd {self.mem.fd}>"


# -- contexts ------------------------------------------------------------------------------------

cdef class RknnContext:
    """One ``rknn_context`` of a :class:`Library`.

    ``RknnContext(library, model, flags=0, share=None)`` calls ``rknn_init`` on ``model``
    (any C-contiguous buffer: ``bytes``, a read-only ``memoryview`` of an ``mmap``...; its own
    address is handed over and the buffer is kept alive while the context lives).  ``share``,
    another live context of the same library, is passed as ``rknn_init_extend.ctx`` with
    ``RKNN_FLAG_SHARE_WEIGHT_MEM`` added to ``flags`` (weight sharing between different
    models); that context's ``rknn_destroy`` then waits until this one is destroyed.
    Every method raises the typed error of its return code (``rknnlite.errors``).
    Not thread-safe: one caller at a time (the runtime's rule for one context).
    """

    cdef rknn_context ctx
    cdef readonly Library library
    cdef Api* lib
    cdef object model_buffer
    cdef readonly uint32_t n_input
    cdef readonly uint32_t n_output
    cdef object mems
    cdef list custom_ops
    cdef bint closing
    cdef RknnContext weight_owner
    cdef object sharers
    cdef object __weakref__

    def __cinit__(self):
        self.ctx = 0
        self.closing = False
        self.mems = weakref.WeakSet()
        self.custom_ops = []
        self.weight_owner = None
        self.sharers = weakref.WeakSet()

    def __init__(self, Library library, model, uint32_t flags=0, RknnContext share=None):
        cdef const unsigned char[::1] view = _byte_view(model)
        cdef rknn_context ctx = 0
        cdef int ret
        cdef uint32_t size = <uint32_t>view.shape[0]
        cdef rknn_init_extend extend
        cdef rknn_init_extend* ext = NULL
        if view.shape[0] == 0 or view.shape[0] > 0xFFFFFFFF:
            raise InvalidParamError(f"the model buffer has {view.shape[0]} bytes; rknn_init takes 1 byte to 4 GiB",
                                    op="rknn_init")
        self._bind(library)
        if share is not None:
            if share.library is not library:
                raise InvalidParamError("weights can only be shared with a context of the same librknnrt",
                                        op="rknn_init")
            memset(&extend, 0, sizeof(extend))
            extend.ctx = share.live()
            ext = &extend
            flags |= RKNN_FLAG_SHARE_WEIGHT_MEM
        with nogil:
            ret = self.lib.rknn_init(&ctx, <void*>&view[0], size, flags, ext)
        check(ret, "rknn_init")
        self.ctx = ctx
        self.model_buffer = model
        if share is not None:
            self.weight_owner = share
            share.sharers.add(self)
        self._after_init()

    cdef void _bind(self, Library library):
        self.library = library
        self.lib = &library.lib

    cdef _after_init(self):
        cdef rknn_input_output_num io
        self._query(RKNN_QUERY_IN_OUT_NUM, &io, sizeof(io))
        self.n_input = io.n_input
        self.n_output = io.n_output
        try:
            api, _ = self.sdk_version()
            if api:
                self.library.version = api
        except RKNNError:
            pass

    def __dealloc__(self):
        if self.ctx != 0 and self.lib != NULL:
            with nogil:
                self.lib.rknn_destroy(self.ctx)
            self.ctx = 0

    cdef rknn_context live(self) except? 0:
        if self.ctx == 0 or self.closing:
            raise ContextInvalidError("the rknn context is destroyed", op="rknn_context")
        return self.ctx

    @property
    def closed(self):
        """True after :meth:`destroy`."""
        return self.ctx == 0 or self.closing

    @property
    def handle(self):
        """The ``rknn_context`` value (int; 0 once destroyed)."""
        return self.ctx

    # -- queries --------------------------------------------------------------------------------

    cdef int _query(self, rknn_query_cmd cmd, void* info, uint32_t size) except -1:
        cdef rknn_context ctx = self.live()
        cdef int ret
        with nogil:
            ret = self.lib.rknn_query(ctx, cmd, info, size)
        return check(ret, "rknn_query")

    def io_num(self):
        """``RKNN_QUERY_IN_OUT_NUM``: ``(n_input, n_output)``."""
        cdef rknn_input_output_num io
        self._query(RKNN_QUERY_IN_OUT_NUM, &io, sizeof(io))
        return io.n_input, io.n_output

    def tensor_attr(self, int cmd, uint32_t index):
        """An ``*_ATTR`` query (``QueryCmd`` value) for tensor ``index``: a :class:`TensorAttr`."""
        cdef rknn_tensor_attr a
        memset(&a, 0, sizeof(a))
        a.index = index
        self._query(<rknn_query_cmd>cmd, &a, sizeof(a))
        return _to_attr(&a)

    def input_range(self, uint32_t index):
        """``RKNN_QUERY_INPUT_DYNAMIC_RANGE`` for input ``index``: an :class:`InputRange`."""
        cdef rknn_input_range* r = <rknn_input_range*>calloc(1, sizeof(rknn_input_range))
        if r == NULL:
            raise MemoryError()
        try:
            r.index = index
            self._query(RKNN_QUERY_INPUT_DYNAMIC_RANGE, r, sizeof(rknn_input_range))
            n = min(r.n_dims, RKNN_MAX_DIMS)
            count = min(r.shape_number, RKNN_MAX_DYNAMIC_SHAPE_NUM)
            shapes = tuple(tuple(_signed(r.dyn_range[s][d]) for d in range(n)) for s in range(count))
            name = r.name[:strnlen_(r.name, RKNN_MAX_NAME_LEN)].decode("utf-8", "replace")
            return InputRange(r.index, name, _enum(TensorFormat, r.fmt, TensorFormat.UNDEFINED), n, count, shapes)
        finally:
            free(r)

    def sdk_version(self):
        """``RKNN_QUERY_SDK_VERSION``: ``(api_version, drv_version)`` strings."""
        cdef rknn_sdk_version v
        memset(&v, 0, sizeof(v))
        self._query(RKNN_QUERY_SDK_VERSION, &v, sizeof(v))
        return (v.api_version[:strnlen_(v.api_version, 256)].decode("utf-8", "replace"),
                v.drv_version[:strnlen_(v.drv_version, 256)].decode("utf-8", "replace"))

    def mem_size(self):
        """``RKNN_QUERY_MEM_SIZE``: a :class:`~rknnlite.tensors.perf.MemSize` (bytes)."""
        cdef rknn_mem_size m
        memset(&m, 0, sizeof(m))
        self._query(RKNN_QUERY_MEM_SIZE, &m, sizeof(m))
        return MemSize(total_weight_size=m.total_weight_size, total_internal_size=m.total_internal_size,
                       total_dma_allocated_size=m.total_dma_allocated_size, total_sram_size=m.total_sram_size,
                       free_sram_size=m.free_sram_size)

    def custom_string(self):
        """``RKNN_QUERY_CUSTOM_STRING``: the model's custom string (``""`` if none)."""
        cdef rknn_custom_string s
        memset(&s, 0, sizeof(s))
        self._query(RKNN_QUERY_CUSTOM_STRING, &s, sizeof(s))
        return s.string[:strnlen_(s.string, 1024)].decode("utf-8", "replace")

    def perf_run(self):
        """``RKNN_QUERY_PERF_RUN``: duration of the last run in microseconds."""
        cdef rknn_perf_run p
        memset(&p, 0, sizeof(p))
        self._query(RKNN_QUERY_PERF_RUN, &p, sizeof(p))
        return p.run_duration

    def perf_detail(self):
        """``RKNN_QUERY_PERF_DETAIL``: the runtime's per-operator text table (a new ``str``;
        the runtime owns and keeps its own buffer)."""
        cdef rknn_perf_detail p
        memset(&p, 0, sizeof(p))
        self._query(RKNN_QUERY_PERF_DETAIL, &p, sizeof(p))
        if p.perf_data == NULL:
            return ""
        return p.perf_data[:strnlen_(p.perf_data, p.data_len)].decode("utf-8", "replace")

    def device_mem_info(self):
        """``RKNN_QUERY_DEVICE_MEM_INFO``: the model buffer's memory as a dict."""
        cdef rknn_tensor_mem m
        memset(&m, 0, sizeof(m))
        self._query(RKNN_QUERY_DEVICE_MEM_INFO, &m, sizeof(m))
        return {"virt_addr": <uintptr_t>m.virt_addr, "phys_addr": m.phys_addr, "fd": m.fd, "offset": m.offset,
                "size": m.size, "flags": m.flags}

    # -- general I/O ----------------------------------------------------------------------------

    def inputs_set(self, list arrays, list types, list fmts, list pass_through):
        """``rknn_inputs_set``: input ``i`` is ``arrays[i]`` (C-contiguous; its own memory is
        handed over, not copied here) described as ``types[i]``/``fmts[i]``."""
        cdef rknn_context ctx = self.live()
        cdef uint32_t n = len(arrays)
        cdef rknn_input* ins
        cdef int ret
        cdef const unsigned char[::1] view
        if not (len(types) == len(fmts) == len(pass_through) == n):
            raise InvalidParamError("inputs_set: arrays, types, fmts and pass_through differ in length",
                                    op="rknn_inputs_set")
        self.library.need(<void*>self.lib.rknn_inputs_set, "rknn_inputs_set", "general input (run)")
        ins = <rknn_input*>calloc(max(n, 1), sizeof(rknn_input))
        if ins == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                arr = arrays[i]
                if not arr.flags.c_contiguous:
                    raise InvalidParamError(f"input {i} is not C-contiguous", op="rknn_inputs_set")
                view = _byte_view(arr)
                ins[i].index = i
                ins[i].buf = <void*>&view[0] if view.shape[0] else NULL
                ins[i].size = <uint32_t>view.shape[0]
                ins[i].pass_through = 1 if pass_through[i] else 0
                ins[i].type = <rknn_tensor_type><int>(types[i])
                ins[i].fmt = <rknn_tensor_format><int>(fmts[i])
            with nogil:
                ret = self.lib.rknn_inputs_set(ctx, n, ins)
            check(ret, "rknn_inputs_set")
        finally:
            free(ins)

    def run(self):
        """``rknn_run`` (blocking; the GIL is released).  A Python custom operator's error
        is re-raised here, chained to the runtime's error code."""
        cdef rknn_context ctx = self.live()
        cdef int ret
        self.library.need(<void*>self.lib.rknn_run, "rknn_run", "running a model")
        for entry in self.custom_ops:
            entry.error = None
        with nogil:
            ret = self.lib.rknn_run(ctx, NULL)
        for entry in self.custom_ops:
            if entry.error is not None:
                error, entry.error = entry.error, None
                raise error
        check(ret, "rknn_run")

    def outputs_get(self, list shapes, list want_float, list dtypes):
        """``rknn_outputs_get`` into new numpy arrays (``is_prealloc=1``: the runtime writes
        them directly) of ``shapes[i]`` and ``dtypes[i]`` (``float32`` where
        ``want_float[i]``), then ``rknn_outputs_release``.  The arrays are the caller's."""
        cdef rknn_context ctx = self.live()
        cdef uint32_t n = len(shapes)
        cdef rknn_output* outs
        cdef int ret, ret2
        cdef unsigned char[::1] view
        self.library.need(<void*>self.lib.rknn_outputs_get, "rknn_outputs_get", "general output (run)")
        self.library.need(<void*>self.lib.rknn_outputs_release, "rknn_outputs_release", "general output (run)")
        outs = <rknn_output*>calloc(max(n, 1), sizeof(rknn_output))
        if outs == NULL:
            raise MemoryError()
        arrays = []
        try:
            for i in range(n):
                arr = np.empty(shapes[i], np.float32 if want_float[i] else dtypes[i])
                arrays.append(arr)
                view = arr.reshape(-1).view(np.uint8)
                outs[i].index = i
                outs[i].want_float = 1 if want_float[i] else 0
                outs[i].is_prealloc = 1
                outs[i].buf = <void*>&view[0] if view.shape[0] else NULL
                outs[i].size = <uint32_t>view.shape[0]
            with nogil:
                ret = self.lib.rknn_outputs_get(ctx, n, outs, NULL)
                ret2 = self.lib.rknn_outputs_release(ctx, n, outs) if ret >= 0 else 0
            check(ret, "rknn_outputs_get")
            check(ret2, "rknn_outputs_release")
        finally:
            free(outs)
        return arrays

    # -- cores, shapes ------------------------------------------------------------------------------

    def set_core_mask(self, int mask):
        """``rknn_set_core_mask`` (RK3588/RK3576)."""
        cdef rknn_context ctx = self.live()
        cdef int ret
        self.library.need(<void*>self.lib.rknn_set_core_mask, "rknn_set_core_mask", "set_core_mask")
        with nogil:
            ret = self.lib.rknn_set_core_mask(ctx, <rknn_core_mask>mask)
        check(ret, "rknn_set_core_mask")

    def set_batch_core_num(self, int n):
        """``rknn_set_batch_core_num`` (RK3588/RK3576)."""
        cdef rknn_context ctx = self.live()
        cdef int ret
        self.library.need(<void*>self.lib.rknn_set_batch_core_num, "rknn_set_batch_core_num", "set_batch_core_num")
        with nogil:
            ret = self.lib.rknn_set_batch_core_num(ctx, n)
        check(ret, "rknn_set_batch_core_num")

    def set_input_shapes(self, list attrs):
        """``rknn_set_input_shapes``: one :class:`TensorAttr` per input (index, name, dims, fmt)."""
        cdef rknn_context ctx = self.live()
        cdef uint32_t n = len(attrs)
        cdef rknn_tensor_attr* a
        cdef int ret
        self.library.need(<void*>self.lib.rknn_set_input_shapes, "rknn_set_input_shapes", "dynamic input shapes")
        a = <rknn_tensor_attr*>calloc(max(n, 1), sizeof(rknn_tensor_attr))
        if a == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                _from_attr(attrs[i], &a[i])
            with nogil:
                ret = self.lib.rknn_set_input_shapes(ctx, n, a)
            check(ret, "rknn_set_input_shapes")
        finally:
            free(a)

    # -- zero-copy memory --------------------------------------------------------------------------

    cdef TensorMemory _wrap_mem(self, rknn_tensor_mem* m, str op, backing):
        if m == NULL:
            raise error_for_null(op)
        cdef TensorMemory mem = TensorMemory.__new__(TensorMemory)
        mem.mem = m
        mem.owner = self
        mem.backing = backing
        self.mems.add(mem)
        return mem

    def create_mem(self, uint32_t size):
        """``rknn_create_mem``: ``size`` bytes of cacheable device memory (a :class:`TensorMemory`)."""
        cdef rknn_context ctx = self.live()
        cdef rknn_tensor_mem* m
        self.library.need(<void*>self.lib.rknn_create_mem, "rknn_create_mem", "create_mem")
        with nogil:
            m = self.lib.rknn_create_mem(ctx, size)
        return self._wrap_mem(m, "rknn_create_mem", None)

    def create_mem2(self, uint64_t size, uint64_t alloc_flags):
        """``rknn_create_mem2``: ``size`` bytes with ``MemAllocFlag`` bits (cacheable, SRAM...)."""
        cdef rknn_context ctx = self.live()
        cdef rknn_tensor_mem* m
        self.library.need(<void*>self.lib.rknn_create_mem2, "rknn_create_mem2", "create_mem with flags")
        with nogil:
            m = self.lib.rknn_create_mem2(ctx, size, alloc_flags)
        return self._wrap_mem(m, "rknn_create_mem2", None)

    def create_mem_from_fd(self, int32_t fd, virt, uint32_t size, int32_t offset=0):
        """``rknn_create_mem_from_fd``: wrap a dma-buf ``fd`` the caller allocated; ``virt`` is
        its CPU mapping (a writable buffer of at least ``size`` bytes, kept alive) or ``None``.
        ``size`` counts from the start of the mapping; tensors start at ``offset``, and the
        buffer protocol exposes bytes ``[offset, size)``."""
        cdef rknn_context ctx = self.live()
        cdef rknn_tensor_mem* m
        cdef void* addr = _address(virt, size, offset)
        self.library.need(<void*>self.lib.rknn_create_mem_from_fd, "rknn_create_mem_from_fd", "create_mem_from_fd")
        with nogil:
            m = self.lib.rknn_create_mem_from_fd(ctx, fd, addr, size, offset)
        return self._wrap_mem(m, "rknn_create_mem_from_fd", _pin(virt))

    def create_mem_from_phys(self, uint64_t phys_addr, virt, uint32_t size):
        """``rknn_create_mem_from_phys``: wrap physically contiguous memory the caller owns;
        ``virt`` is its CPU mapping (a writable buffer, kept alive) or ``None``."""
        cdef rknn_context ctx = self.live()
        cdef rknn_tensor_mem* m
        cdef void* addr = _address(virt, size, 0)
        self.library.need(<void*>self.lib.rknn_create_mem_from_phys, "rknn_create_mem_from_phys",
                          "create_mem_from_phys")
        with nogil:
            m = self.lib.rknn_create_mem_from_phys(ctx, phys_addr, addr, size)
        return self._wrap_mem(m, "rknn_create_mem_from_phys", _pin(virt))

    def set_io_mem(self, TensorMemory mem, attr):
        """``rknn_set_io_mem``: bind ``mem`` to the input or output ``attr`` describes
        (a :class:`TensorAttr` from a NATIVE_* query, possibly ``replace``\\ d)."""
        cdef rknn_context ctx = self.live()
        cdef rknn_tensor_attr a
        cdef rknn_tensor_mem* m = mem.live()
        cdef int ret
        if mem.owner is not self:
            raise InvalidParamError("this tensor memory belongs to another context", op="rknn_set_io_mem")
        self.library.need(<void*>self.lib.rknn_set_io_mem, "rknn_set_io_mem", "set_io_mem")
        _from_attr(attr, &a)
        with nogil:
            ret = self.lib.rknn_set_io_mem(ctx, m, &a)
        check(ret, "rknn_set_io_mem")

    def set_weight_mem(self, TensorMemory mem):
        """``rknn_set_weight_mem``: the model's weights go into ``mem`` (a context created
        with ``RKNN_FLAG_MEM_ALLOC_OUTSIDE``; before the first run)."""
        self._set_model_mem(mem, False)

    def set_internal_mem(self, TensorMemory mem):
        """``rknn_set_internal_mem``: the model's intermediate tensors live in ``mem`` (a context
        created with ``RKNN_FLAG_MEM_ALLOC_OUTSIDE`` or ``INTERNAL_ALLOC_OUTSIDE``)."""
        self._set_model_mem(mem, True)

    cdef _set_model_mem(self, TensorMemory mem, bint internal):
        cdef rknn_context ctx = self.live()
        cdef rknn_tensor_mem* m = mem.live()
        cdef int ret
        cdef str op = "rknn_set_internal_mem" if internal else "rknn_set_weight_mem"
        if mem.owner is not self:
            raise InvalidParamError("this tensor memory belongs to another context", op=op)
        if internal:
            self.library.need(<void*>self.lib.rknn_set_internal_mem, op, "set_internal_mem")
            with nogil:
                ret = self.lib.rknn_set_internal_mem(ctx, m)
        else:
            self.library.need(<void*>self.lib.rknn_set_weight_mem, op, "set_weight_mem")
            with nogil:
                ret = self.lib.rknn_set_weight_mem(ctx, m)
        check(ret, op)

    def mem_sync(self, TensorMemory mem, int mode):
        """``rknn_mem_sync`` (``MemSyncMode``)."""
        cdef rknn_context ctx = self.live()
        cdef rknn_tensor_mem* m = mem.live()
        cdef int ret
        self.library.need(<void*>self.lib.rknn_mem_sync, "rknn_mem_sync", "mem.sync")
        with nogil:
            ret = self.lib.rknn_mem_sync(ctx, m, <rknn_mem_sync_mode>mode)
        check(ret, "rknn_mem_sync")

    cdef int _destroy_mem(self, rknn_tensor_mem* m) except -1:
        cdef int ret = 0
        if self.lib.rknn_destroy_mem != NULL:
            with nogil:
                ret = self.lib.rknn_destroy_mem(self.ctx, m)
        return check(ret, "rknn_destroy_mem")

    # -- custom operators ----------------------------------------------------------------------------

    def register_custom_ops(self, ops):
        """``rknn_register_custom_ops`` for Python operators (``op_type`` and
        ``compute(self, node, inputs) -> outputs``): each is wrapped as a native CPU
        callback that takes the GIL, runs ``compute`` on numpy views of the runtime's
        tensors and copies the results into its outputs; an exception is stashed and
        re-raised by :meth:`run`.  At most 16 Python operators per process."""
        cdef rknn_context ctx = self.live()
        cdef uint32_t n = len(ops)
        cdef rknn_custom_op* table
        cdef int ret
        if n == 0:
            return
        self.library.need(<void*>self.lib.rknn_register_custom_ops, "rknn_register_custom_ops", "custom operators")
        entries = []
        with _slots_lock:
            free_slots = [i for i in range(_SLOTS) if _slots[i] is None]
            if len(free_slots) < n:
                raise RKNNError(f"at most {_SLOTS} Python custom operators can be registered at once "
                                f"({_SLOTS - len(free_slots)} in use)", op="rknn_register_custom_ops")
            for op, slot in zip(ops, free_slots):
                entry = _PyOp(op, slot, self)
                _slots[slot] = entry
                entries.append(entry)
        table = <rknn_custom_op*>calloc(n, sizeof(rknn_custom_op))
        if table == NULL:
            self._free_slots(entries)
            raise MemoryError()
        try:
            for i, entry in enumerate(entries):
                raw = str(entry.op.op_type).encode("utf-8")[:RKNN_MAX_NAME_LEN - 1]
                table[i].version = 1
                table[i].target = RKNN_TARGET_TYPE_CPU
                strncpy(table[i].op_type, raw, RKNN_MAX_NAME_LEN - 1)
                table[i].compute = _TRAMPOLINES[entry.slot]
            with nogil:
                ret = self.lib.rknn_register_custom_ops(ctx, table, n)
            check(ret, "rknn_register_custom_ops")
        except BaseException:
            self._free_slots(entries)
            raise
        finally:
            free(table)
        self.custom_ops.extend(entries)

    def _free_slots(self, entries):
        with _slots_lock:
            for entry in entries:
                if _slots[entry.slot] is entry:
                    _slots[entry.slot] = None

    def _op_attr(self, uintptr_t op_ctx, str name):
        """An attribute of the custom op node running now (``rknn_custom_op_get_op_attr``)."""
        cdef rknn_custom_op_attr a
        memset(&a, 0, sizeof(a))
        self.library.need(<void*>self.lib.rknn_custom_op_get_op_attr, "rknn_custom_op_get_op_attr",
                          "custom operator attributes")
        raw = name.encode("utf-8")
        self.lib.rknn_custom_op_get_op_attr(<rknn_custom_op_context*>op_ctx, raw, &a)
        if a.data == NULL or a.n_elems == 0:
            return None
        dtype = _dtype_of(a.dtype)
        buf = _RawBuffer.wrap(a.data, a.n_elems * dtype.itemsize)
        return np.frombuffer(buf, dtype=dtype).copy()

    # -- lifetime ---------------------------------------------------------------------------------

    def dup(self):
        """``rknn_dup_context``: a new context on the same model sharing its weights."""
        cdef rknn_context src = self.live()
        cdef rknn_context out = 0
        cdef int ret
        self.library.need(<void*>self.lib.rknn_dup_context, "rknn_dup_context", "dup")
        with nogil:
            ret = self.lib.rknn_dup_context(&src, &out)
        check(ret, "rknn_dup_context")
        cdef RknnContext twin = RknnContext.__new__(RknnContext)
        twin._bind(self.library)
        twin.ctx = out
        twin.model_buffer = self.model_buffer
        if self.weight_owner is not None:  # the twin runs on the same shared weights
            twin.weight_owner = self.weight_owner
            self.weight_owner.sharers.add(twin)
        twin._after_init()
        return twin

    def destroy(self):
        """Free the open tensor memories, then ``rknn_destroy``; idempotent.  A memory with a
        live buffer view (a numpy array over it) is freed when that view goes away, and
        ``rknn_destroy`` waits for it: no view ever points at freed memory."""
        if self.ctx == 0 or self.closing:
            return
        self.closing = True
        for mem in list(self.mems):
            if (<TensorMemory>mem).exports == 0:
                (<TensorMemory>mem)._release()
        self._finish_destroy()

    cdef void _finish_destroy(self) noexcept:
        """``rknn_destroy`` once no tensor memory of this context is left."""
        cdef rknn_context ctx = self.ctx
        cdef RknnContext owner = self.weight_owner
        if ctx == 0:
            return
        for mem in list(self.mems):
            if (<TensorMemory>mem).mem != NULL:
                return
        for sharer in list(self.sharers):
            if (<RknnContext>sharer).ctx != 0:
                return  # a context still runs on this one's weights: destroyed after it
        self.ctx = 0
        with nogil:
            self.lib.rknn_destroy(ctx)
        self.weight_owner = None
        if owner is not None and owner.closing:
            owner._finish_destroy()
        with _slots_lock:
            for entry in self.custom_ops:
                if _slots[entry.slot] is entry:
                    _slots[entry.slot] = None
        self.custom_ops = []
        self.model_buffer = None


cdef object error_for_null(str op):
    from rknnlite.errors import RKNNMemoryError
    return RKNNMemoryError(f"{op} returned NULL (no memory could be allocated or wrapped)", op=op)


cdef const unsigned char[::1] _byte_view(obj):
    """``obj`` (any C-contiguous buffer) as bytes, without a copy."""
    if isinstance(obj, np.ndarray):
        obj = obj.reshape(-1).view(np.uint8)
    m = memoryview(obj)
    if m.ndim != 1 or m.itemsize != 1:
        m = m.cast("B")
    return m


cdef object _pin(virt):
    """Keep a user buffer alive and un-resizable (a memoryview export) while memory wraps it."""
    if virt is None or isinstance(virt, int):
        return virt
    return memoryview(virt)


cdef void* _address(virt, uint32_t size, int32_t offset) except? NULL:
    cdef unsigned char[::1] view
    if virt is None:
        return NULL
    if isinstance(virt, int):
        return <void*><uintptr_t>virt
    view = memoryview(virt).cast("B")
    if <size_t>view.shape[0] < <size_t>size or offset < 0 or <uint32_t>offset >= size:
        raise InvalidParamError(f"the CPU buffer has {view.shape[0]} bytes; size {size} (counted from its start, "
                                f"offset {offset} included) does not fit", op="rknn_create_mem_from_fd")
    return <void*>&view[0]
