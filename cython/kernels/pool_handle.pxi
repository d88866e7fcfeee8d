# The native worker pool behind a ``WorkerPool.handle`` capsule, for the kernel modules that
# share their work out on it (``include``d by conv_kernels, pool_kernels and affine_kernels).

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

from rk_pool cimport RK_POOL_API_CAPSULE, RK_POOL_CAPSULE, rk_pool, rk_pool_api

from rknnlite._native import thread_pool as _thread_pool

# the pool's functions, exported by rknnlite._native.thread_pool (which links the pool's C)
cdef rk_pool_api *_POOL_API = <rk_pool_api *>PyCapsule_GetPointer(_thread_pool.API, RK_POOL_API_CAPSULE)


cdef rk_pool *_pool_from(object handle) except? NULL:
    """The pool of a ``WorkerPool.handle`` capsule (None: NULL, run on the caller alone)."""
    if handle is None:
        return NULL
    if not PyCapsule_IsValid(handle, RK_POOL_CAPSULE):
        raise TypeError(f"pool must be a WorkerPool.handle capsule or None, got {type(handle).__name__}")
    return <rk_pool *>PyCapsule_GetPointer(handle, RK_POOL_CAPSULE)
