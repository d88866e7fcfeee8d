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

    # the implementation (linked into rknnlite._native.thread_pool only)
    rk_pool *rk_pool_new(int threads, int64_t spin_ns) nogil
    void rk_pool_stop(rk_pool *p) nogil
    void rk_pool_free(rk_pool *p) nogil
    void rk_pool_abandon(rk_pool *p) nogil
    int rk_py_finalizing()
    int rk_pool_ensure(rk_pool *p)
    int rk_pool_run(rk_pool *p, rk_range_fn fn, void *ctx, int64_t n, int64_t min_chunk) nogil
    int64_t *rk_pool_counts_of(rk_pool *p) nogil
    int RK_CHUNKS_PER_THREAD
    rk_pool_api rk_pool_api_table
