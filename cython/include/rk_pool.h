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

/* The implementation (cython/src/rk_pool.c), linked into rknnlite._native.thread_pool only;
 * other modules go through rk_pool_api_table in the capsule. */
#include "rk_api.h"

/* ranges per thread of a dynamic run: enough that a delayed thread's share is small */
#define RK_CHUNKS_PER_THREAD 4

/* A pool of `threads` threads, caller included, its workers not started; idle workers poll for
 * spin_ns nanoseconds before they sleep.  NULL when out of memory. */
RK_API rk_pool *rk_pool_new(int threads, int64_t spin_ns);
/* Joins the workers (waits for a run in progress); the pool can be started again. */
RK_API void rk_pool_stop(rk_pool *p);
/* Frees a stopped pool. */
RK_API void rk_pool_free(rk_pool *p);
/* At interpreter exit: tells the workers to end without joining them and without touching the
 * interpreter (each leaves its thread state behind), and leaves the pool allocated for them;
 * later runs go serial.  CPython 3.14 parks for good a thread that asks for the GIL once
 * finalization has begun, as a worker does to drop its thread state, so a join there would
 * never return.  thread_pool stops every pool at exit (atexit), before finalization begins;
 * this is for a pool whose workers started after that. */
RK_API void rk_pool_abandon(rk_pool *p);
/* Whether the interpreter is finalizing (call with the GIL). */
RK_API int rk_py_finalizing(void);
/* See rk_pool_api. */
RK_API int rk_pool_ensure(rk_pool *p);
RK_API int rk_pool_run(rk_pool *p, rk_range_fn fn, void *ctx, int64_t n, int64_t min_chunk);
/* Work items each thread slot ran (an array of `threads` counters owned by the pool). */
RK_API int64_t *rk_pool_counts_of(rk_pool *p);
/* The table published in the thread_pool.API capsule. */
RK_API extern rk_pool_api rk_pool_api_table;

#endif
