# Cython declarations of the native worker pool (cython/include/rk_pool.h).

from libc.stdint cimport int64_t

cdef extern from "rk_pool.h" nogil:
    ctypedef int (*rk_range_fn)(void *ctx, int64_t start, int64_t stop, int slot) noexcept nogil

    ctypedef struct rk_pool:
        pass

    ctypedef struct rk_pool_api:
        int (*ensure)(rk_pool *pool) noexcept
        int (*run)(rk_pool *pool, rk_range_fn fn, void *ctx, int64_t n, int64_t min_chunk) noexcept nogil
        int (*threads)(const rk_pool *pool) noexcept nogil

    const char *RK_POOL_CAPSULE
    const char *RK_POOL_API_CAPSULE
