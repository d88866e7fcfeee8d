# cython: language_level=3
"""Native worker threads of the software backend: a pool whose workers never need the GIL
to take part in a compiled kernel's work.

A run hands the ranges of ``[0, n)`` out to the calling thread and the pool's workers
(POSIX threads created lazily), from a shared atomic counter: a worker the OS delays
holds the run up by at most the range it is running.  Compiled kernels submit C range
functions (``rk_range_fn``, see ``cython/include/rk_pool.h``) through the capsule
``API`` and a pool's ``handle``, so a split convolution costs no GIL hand-off at all;
:meth:`NativePool.map_ranges` runs Python callables on the same threads (taking the GIL
for each range).  A worker spins briefly after each run before it sleeps, because a
model's next split usually follows within microseconds; the caller, done with its own
ranges, polls as long for the workers' last ones before it sleeps on the join.
"""

import atexit
import weakref

from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int64_t

from rk_pool cimport (RK_CHUNKS_PER_THREAD, RK_POOL_API_CAPSULE, RK_POOL_CAPSULE, rk_pool, rk_pool_abandon,
                     rk_pool_api, rk_pool_api_table, rk_pool_counts_of, rk_pool_ensure, rk_pool_free,
                     rk_pool_new, rk_pool_run, rk_pool_stop, rk_py_finalizing, rk_range_fn)

__all__ = ["NativePool", "API", "CHUNKS_PER_THREAD", "SPIN_NS"]

#: the capsule holding the ``rk_pool_api`` table (see ``cython/include/rk_pool.h``)
API = PyCapsule_New(<void *>&rk_pool_api_table, RK_POOL_API_CAPSULE, NULL)

#: how long (ns) an idle worker polls for the next run before it sleeps, by default
SPIN_NS = 1000000

#: ranges per thread of a run with more work items than threads
CHUNKS_PER_THREAD = RK_CHUNKS_PER_THREAD


# the pools whose workers may be running, stopped (joined) at interpreter exit while their
# workers can still take the GIL to drop their thread states (see rk_pool_abandon)
_live = weakref.WeakSet()


def _stop_all():
    for pool in list(_live):
        pool.close()


atexit.register(_stop_all)


cdef class _PyRanges:
    """A Python body run by :meth:`NativePool.map_ranges`, and its first exception."""
    cdef object body
    cdef object error

    def __cinit__(self, body):
        self.body = body
        self.error = None


cdef int _py_range(void *ctx, int64_t start, int64_t stop, int slot) noexcept nogil:
    with gil:
        return _call_py_range(<_PyRanges>ctx, start, stop)


cdef int _call_py_range(_PyRanges job, int64_t start, int64_t stop) noexcept:
    try:
        job.body(start, stop)
        return 0
    except BaseException as e:  # handed to the caller of map_ranges, after every thread left
        if job.error is None:
            job.error = e
        return 1


cdef class NativePool:
    """``threads - 1`` native worker threads (the caller is the last one), started on first
    use.  ``spin_ns``: how long an idle worker polls for the next run, and a caller for the
    end of the workers' ranges (yielding its core to any thread waiting for it), before it
    sleeps; -1: ``SPIN_NS``.  One run at a time: a run started while another is in progress (from a range, or
    another thread) runs serially on its caller.  Workers end with :meth:`close` or when
    the pool is garbage; a forked child starts its own."""

    cdef rk_pool *p
    cdef readonly int threads
    cdef readonly long long spin_ns
    cdef object __weakref__

    def __cinit__(self, int threads=1, long long spin_ns=-1):
        self.threads = max(1, threads)
        self.spin_ns = SPIN_NS if spin_ns < 0 else spin_ns
        self.p = rk_pool_new(self.threads, self.spin_ns)
        if self.p == NULL:
            raise MemoryError("NativePool: cannot allocate the pool")
        if self.threads > 1:
            _live.add(self)

    def __dealloc__(self):
        if self.p == NULL:
            return
        if self._halt():
            rk_pool_free(self.p)
        self.p = NULL

    cdef bint _halt(self):
        """Stops (joins) the workers, or at interpreter exit abandons them, as they may be
        parked for good there (rk_pool.h); an abandoned pool stays allocated for them.
        Returns whether the workers were stopped."""
        if rk_py_finalizing():
            rk_pool_abandon(self.p)
            return False
        with nogil:
            rk_pool_stop(self.p)
        return True

    @property
    def handle(self):
        """A capsule (``RK_POOL_CAPSULE``) with this pool's ``rk_pool *`` for compiled
        kernels, its workers started; valid while the pool lives."""
        if self.threads > 1 and rk_pool_ensure(self.p) != 0:
            raise RuntimeError(f"NativePool: cannot start {self.threads - 1} worker threads")
        return PyCapsule_New(<void *>self.p, RK_POOL_CAPSULE, NULL)

    def map_ranges(self, int64_t n, body, int64_t min_chunk=1):
        """Run ``body(start, stop)`` over disjoint contiguous ranges covering ``range(n)``,
        each at least ``min_chunk`` long, on up to ``threads`` threads.  With more ranges
        than threads they are handed out dynamically; with as many, thread ``i`` (the
        caller is 0) runs range ``i``.  The first exception of a body is re-raised after
        every thread has left the ranges (the ranges not yet started are skipped)."""
        if n <= 0:
            return
        cdef _PyRanges job = _PyRanges(body)
        if self.threads > 1 and rk_pool_ensure(self.p) != 0:
            raise RuntimeError(f"NativePool: cannot start {self.threads - 1} worker threads")
        with nogil:
            rk_pool_run(self.p, _py_range, <void *>job, n, min_chunk)
        if job.error is not None:
            raise job.error

    def take_counts(self):
        """Work items each thread slot ran since the last call (slot 0: the callers), reset."""
        cdef int64_t *c = rk_pool_counts_of(self.p)
        out = [c[i] for i in range(self.threads)]
        for i in range(self.threads):
            c[i] = 0
        return out

    def close(self):
        """Stop the workers (idempotent; a later run starts new ones).  At interpreter exit
        they are told to end and not waited for, and later runs go serial."""
        self._halt()
