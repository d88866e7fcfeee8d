# cython: language_level=3
"""Native custom operators (``rknn_custom_op``, cython/include/rknn_custom_op.h) for the
software backend: plugin libraries, operator descriptions, per-node operator contexts and
the callback calls, plus this package's implementation of ``rknn_custom_op_get_op_attr``.

How a plugin reaches ``rknn_custom_op_get_op_attr``: a plugin calls it by name, as it would
call librknnrt's.  This extension defines it with C linkage and default visibility, and
before the first plugin is opened :func:`export_symbols` re-opens the extension itself with
``RTLD_NOLOAD | RTLD_GLOBAL`` (found with ``dladdr``), which puts its exported symbols in the
process's global scope, so a plugin opened afterwards (``RTLD_NOW | RTLD_LOCAL``) resolves
the symbol to this definition.  Only that one symbol is exported by name (Cython's own
functions are ``static``).  A context this module did not create (one of librknnrt, should
a plugin also be registered on the npu backend) is handed on to the next definition of the
symbol (``dlsym(RTLD_NEXT, ...)``).

Every callback runs without the GIL, under a per-node mutex (one callback at a time per
node, whatever the number of threads), and returns its code to the caller, which raises
through :func:`rknnlite.errors.check`.
"""

from libc.stdint cimport int32_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memchr, memcpy, strncpy

from rknn_api cimport rknn_tensor_attr, rknn_tensor_format, rknn_tensor_mem, rknn_tensor_type
from rknn_custom_op cimport (rknn_custom_op, rknn_custom_op_attr, rknn_custom_op_context,
                             rknn_custom_op_tensor, get_custom_op_func)

from rknnlite._native import abi as _abi  # noqa: F401  (raises ImportError on a wrong ABI layout)

__all__ = ["export_symbols", "PluginLibrary", "NativeOp", "NodeContext", "get_op_attr_address"]

from rk_plugin_host cimport (RTLD_LOCAL, RTLD_NOW, dlclose, dlerror, dlopen, dlsym, pthread_mutex_destroy,
                             pthread_mutex_init, pthread_mutex_lock, pthread_mutex_unlock, rkl_call_getter,
                             rkl_export_symbols, rkl_get_attr_address, rkl_link, rkl_node_ctx, rkl_unlink)

_exported = False


def export_symbols():
    """Make ``rknn_custom_op_get_op_attr`` of this extension visible to libraries opened
    later (idempotent).  Raises :class:`OSError` with the loader's message if it cannot."""
    global _exported
    if _exported:
        return
    cdef const char* err = rkl_export_symbols()
    if err != NULL:
        raise OSError(err.decode("utf-8", "replace"))
    _exported = True


def get_op_attr_address():
    """Address of this package's ``rknn_custom_op_get_op_attr`` (an ``int``)."""
    return <uintptr_t>rkl_get_attr_address()


cdef class PluginLibrary:
    """A custom-operator plugin library (``librkcst_<op>.so``), opened with
    ``RTLD_NOW | RTLD_LOCAL`` after :func:`export_symbols`; closed when the last
    reference (every :class:`NativeOp` made from it holds one) goes away.

    Raises :class:`OSError` with the loader's message when the file cannot be loaded.
    """

    cdef void* handle
    cdef readonly str path

    def __cinit__(self, path):
        export_symbols()
        self.path = str(path)
        cdef bytes raw = self.path.encode()
        dlerror()
        self.handle = dlopen(raw, RTLD_NOW | RTLD_LOCAL)
        if self.handle == NULL:
            err = dlerror()
            raise OSError(err.decode("utf-8", "replace") if err != NULL else f"dlopen({self.path}) failed")

    def symbol(self, str name):
        """Address of exported symbol ``name`` (an ``int``), or ``None`` if absent."""
        cdef bytes raw = name.encode()
        dlerror()
        cdef void* address = dlsym(self.handle, raw)
        return None if address == NULL else <uintptr_t>address

    def get_custom_op(self):
        """Call the library's ``get_rknn_custom_op()``: the address of its ``rknn_custom_op``
        (``0`` when it returns NULL); ``None`` when the library does not export it."""
        address = self.symbol("get_rknn_custom_op")
        if address is None:
            return None
        cdef void* fn = <void*><uintptr_t>address
        cdef rknn_custom_op* op
        with nogil:
            op = rkl_call_getter(fn)
        return <uintptr_t>op

    def __dealloc__(self):
        if self.handle != NULL:
            dlclose(self.handle)
            self.handle = NULL


cdef str _fixed_string(const char* data, size_t size, str field):
    if memchr(data, 0, size) == NULL:
        raise ValueError(f"rknn_custom_op.{field} is not NUL-terminated within {size} bytes")
    return (<bytes>data).decode("utf-8", "replace")


cdef class NativeOp:
    """One ``rknn_custom_op`` (copied from the given address when made) and the object that
    keeps its callbacks' code loaded (``owner``: a :class:`PluginLibrary`, a ctypes object...).

    Use :meth:`from_address`.  Attributes: ``op_type``, ``version``, ``target`` (1 CPU,
    2 GPU), ``has_init``/``has_prepare``/``has_compute``/``has_destroy``,
    ``has_compute_native``, ``address`` (of this object's copy of the struct), ``source``
    (where it came from, for messages).
    """

    cdef rknn_custom_op op
    cdef readonly object owner
    cdef readonly str source

    @staticmethod
    def from_address(address, owner=None, str source=""):
        """Copy the ``rknn_custom_op`` at ``address`` (an ``int``, non-zero)."""
        if not isinstance(address, int) or address <= 0:
            raise ValueError(f"an rknn_custom_op address must be a positive int, got {address!r}")
        cdef NativeOp self = NativeOp.__new__(NativeOp)
        memcpy(&self.op, <void*><uintptr_t>address, sizeof(rknn_custom_op))
        self.owner = owner
        self.source = source or f"rknn_custom_op at {address:#x}"
        return self

    @property
    def op_type(self):
        return _fixed_string(self.op.op_type, sizeof(self.op.op_type), "op_type")

    @property
    def version(self):
        return self.op.version

    @property
    def target(self):
        return <int>self.op.target

    @property
    def has_init(self):
        return self.op.init != NULL

    @property
    def has_prepare(self):
        return self.op.prepare != NULL

    @property
    def has_compute(self):
        return self.op.compute != NULL

    @property
    def has_compute_native(self):
        return self.op.compute_native != NULL

    @property
    def has_destroy(self):
        return self.op.destroy != NULL

    @property
    def address(self):
        return <uintptr_t>&self.op

    def __repr__(self):
        try:
            op_type = self.op_type
        except ValueError:
            op_type = "?"
        return f"<NativeOp {op_type!r} from {self.source}>"


cdef int _fill(rknn_custom_op_tensor* t, tuple desc) except -1:
    """desc: (index, name bytes, dims tuple, type, fmt, virt_addr, offset, nbytes)."""
    cdef bytes name = desc[1]
    cdef tuple dims = desc[2]
    cdef rknn_tensor_attr* a = &t.attr
    cdef uint32_t n = 1
    cdef Py_ssize_t k
    if len(dims) > 16:
        raise ValueError(f"a tensor has {len(dims)} dims, the RKNN ABI allows 16")
    a.index = desc[0]
    a.n_dims = len(dims)
    for k in range(len(dims)):
        a.dims[k] = dims[k]
        n *= <uint32_t>dims[k]
    strncpy(a.name, name, 255)
    a.n_elems = n if len(dims) else 0
    a.size = desc[7]
    a.fmt = <rknn_tensor_format><int>desc[4]
    a.type = <rknn_tensor_type><int>desc[3]
    a.scale = 1.0
    a.w_stride = dims[3] if len(dims) == 4 else 0
    a.size_with_stride = desc[7]
    t.mem.virt_addr = <void*><uintptr_t>desc[5]
    t.mem.offset = <int32_t>desc[6]
    t.mem.size = <uint32_t>desc[7] if desc[5] else 0  # the tensor's bytes from virt_addr + offset
    t.mem.fd = -1
    t.mem.flags = 1 if desc[5] else 4  # ALLOC_INSIDE, or UNKNOWN when no memory is given
    return 0


cdef class NodeContext:
    """The operator context of one model node running a :class:`NativeOp`: an
    ``rknn_custom_op_context`` whose ``internal_ctx`` identifies the node, with the node's
    attributes for ``rknn_custom_op_get_op_attr``.

    Args:
        op: the operator.
        attrs: ``[(name: str, dtype: int (rknn_tensor_type), n_elems: int, data: bytes)]``;
            a NUL byte is kept after each value buffer (strings read as C strings).

    ``init``/``run``/``destroy`` take tensor descriptions ``(index, name: bytes, dims,
    type, fmt, virt_addr, offset, nbytes)`` (the caller keeps the memory alive) and return
    the callback's code (``0`` when the callback is absent).  ``destroy`` calls the
    operator's destroy at most once; the context itself is freed with this object.
    """

    cdef rkl_node_ctx* c
    cdef readonly NativeOp op
    cdef readonly bint destroyed
    cdef bint mutex_ready

    def __cinit__(self, NativeOp op, list attrs):
        self.op = op
        self.c = <rkl_node_ctx*>calloc(1, sizeof(rkl_node_ctx))
        if self.c == NULL:
            raise MemoryError()
        if pthread_mutex_init(&self.c.call_lock, NULL) != 0:
            raise OSError("pthread_mutex_init failed")
        self.mutex_ready = True
        self.c.ctx.target = op.op.target
        self.c.ctx.internal_ctx = <uint64_t><uintptr_t>self.c
        if attrs:
            self.c.attrs = <rknn_custom_op_attr*>calloc(len(attrs), sizeof(rknn_custom_op_attr))
            if self.c.attrs == NULL:
                raise MemoryError()
        cdef rknn_custom_op_attr* a
        cdef bytes name, data
        cdef char* buf
        for name_str, dtype, n_elems, data in attrs:
            name = name_str.encode()
            a = &self.c.attrs[self.c.n_attrs]
            buf = <char*>malloc(len(data) + 1)
            if buf == NULL:
                raise MemoryError()
            memcpy(buf, <const char*>data, len(data))
            buf[len(data)] = 0
            strncpy(a.name, name, 255)
            a.dtype = <rknn_tensor_type><int>dtype
            a.n_elems = n_elems
            a.data = buf
            self.c.n_attrs += 1
        rkl_link(self.c)

    @property
    def address(self):
        """Address of the ``rknn_custom_op_context`` the callbacks receive."""
        return <uintptr_t>&self.c.ctx

    @property
    def priv_data(self):
        """The operator's ``priv_data`` pointer (an ``int``)."""
        return <uintptr_t>self.c.ctx.priv_data

    cdef int _call(self, int which, list ins, list outs) except? -99999:
        cdef uint32_t n_in = len(ins), n_out = len(outs)
        cdef rknn_custom_op_tensor* t = <rknn_custom_op_tensor*>calloc(n_in + n_out + 1, sizeof(rknn_custom_op_tensor))
        cdef int ret = 0
        cdef Py_ssize_t k
        if t == NULL:
            raise MemoryError()
        try:
            for k in range(n_in):
                _fill(&t[k], ins[k])
            for k in range(n_out):
                _fill(&t[n_in + k], outs[k])
            with nogil:
                pthread_mutex_lock(&self.c.call_lock)
                if which == 0:
                    if self.op.op.init != NULL:
                        ret = self.op.op.init(&self.c.ctx, t, n_in, t + n_in, n_out)
                else:
                    if self.op.op.prepare != NULL:
                        ret = self.op.op.prepare(&self.c.ctx, t, n_in, t + n_in, n_out)
                    if ret >= 0:
                        ret = self.op.op.compute(&self.c.ctx, t, n_in, t + n_in, n_out)
                pthread_mutex_unlock(&self.c.call_lock)
        finally:
            free(t)
        return ret

    def init(self, list ins, list outs):
        """Call the operator's ``init`` (once, at registration); its code."""
        return self._call(0, ins, outs)

    def run(self, list ins, list outs):
        """Call ``prepare`` (if any) then ``compute``; the first negative code, else compute's."""
        if self.destroyed:
            raise RuntimeError("the operator context was destroyed")
        return self._call(1, ins, outs)

    def destroy(self):
        """Call the operator's ``destroy`` once; its code (``0`` if absent or already done)."""
        cdef int ret = 0
        if self.destroyed:
            return 0
        self.destroyed = True
        with nogil:
            pthread_mutex_lock(&self.c.call_lock)
            if self.op.op.destroy != NULL:
                ret = self.op.op.destroy(&self.c.ctx)
            pthread_mutex_unlock(&self.c.call_lock)
        return ret

    def __dealloc__(self):
        cdef uint32_t i
        if self.c == NULL:
            return
        rkl_unlink(self.c)
        for i in range(self.c.n_attrs):
            free(self.c.attrs[i].data)
        free(self.c.attrs)
        if self.mutex_ready:
            pthread_mutex_destroy(&self.c.call_lock)
        free(self.c)
        self.c = NULL
