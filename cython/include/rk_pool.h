/* The native worker pool of the software backend (implemented by rknnlite._native.thread_pool).
 *
 * Kernels in other extension modules reach it through the rk_pool_api table published in
 * the capsule thread_pool.API, and a pool through the capsule NativePool.handle. */
#ifndef RK_POOL_H
#define RK_POOL_H

#include <stdint.h>

/* One range [start, stop) of a job's work items, run on thread slot `slot` (0: the caller).
 * Returns 0, or nonzero to stop handing out the job's remaining ranges (an error). */
typedef int (*rk_range_fn)(void *ctx, int64_t start, int64_t stop, int slot);

typedef struct rk_pool rk_pool;

typedef struct rk_pool_api {
    /* Starts the pool's workers if they are not running (call with the GIL held); -1 on failure. */
    int (*ensure)(rk_pool *pool);
    /* Runs fn over [0, n) in ranges of at least min_chunk items on the caller and the
     * workers (serially on the caller when the pool is busy, has one thread, or its
     * workers are not started); returns 0, or nonzero when a range returned nonzero.
     * Call without the GIL. */
    int (*run)(rk_pool *pool, rk_range_fn fn, void *ctx, int64_t n, int64_t min_chunk);
    /* Threads a run uses, caller included. */
    int (*threads)(const rk_pool *pool);
} rk_pool_api;

#define RK_POOL_CAPSULE "rknnlite._native.thread_pool.rk_pool"
#define RK_POOL_API_CAPSULE "rknnlite._native.thread_pool.API"

#endif
