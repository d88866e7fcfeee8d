"""Intra-op threading for kernels: ``parallel_for`` splits work across the worker
threads of the run in progress.

The executor sets the pool for the duration of a run (:func:`using`); a kernel calls
``parallel_for(n, body)`` and ``body(start, stop)`` runs on disjoint ranges covering
``range(n)``, on the calling thread plus the pool's workers.  With one thread (the
default) it is a plain call.  Bodies must release the GIL for real speed-up
(numpy BLAS calls and Cython ``nogil`` loops do), and must not assume which thread runs
which range, nor that a worker takes part at all (ranges are handed out dynamically:
per-thread scratch, not per-range).  Thread count: the context's core
mask, or ``RKNNLITE_NUM_THREADS``; BLAS's own threads are the process's business and
are never changed here.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Tuple

__all__ = ["WorkerPool", "WorkRecorder", "parallel_for", "using", "threads_from_env", "current_threads"]

_local = threading.local()


def threads_from_env(default: int = 1) -> int:
    """``RKNNLITE_NUM_THREADS`` as a positive int (``default`` when unset or invalid)."""
    raw = os.environ.get("RKNNLITE_NUM_THREADS", "")
    try:
        value = int(raw)
    except ValueError:
        return default
    return value if value > 0 else default


class WorkerPool:
    """``threads - 1`` persistent worker threads (the caller is the last one), started lazily.

    ``map_ranges`` with more pieces than threads hands the ranges out dynamically: each
    thread takes the next range from a shared counter until none is left, and a worker
    that wakes up after the caller has taken every range does nothing.  So a thread the
    OS delays (other processes on the cores) holds the call up by at most the range it is
    running, never by a fixed share of the work, and the caller never waits for a worker
    that has not started.  With no more pieces than threads, thread ``i`` (the caller is
    0) runs range ``i`` (one item per thread, e.g. one sample per emulated core).  One
    ``map_ranges`` at a time per pool: a call made while another is in progress (from a
    body, or another thread) runs serially on its caller.
    """

    #: ranges per thread: enough that a delayed thread's share is small, few enough that
    #: a body's per-call cost (argument parsing, scratch lookup) stays negligible
    CHUNKS_PER_THREAD = 4

    def __init__(self, threads: int = 1):
        self.threads = max(1, int(threads))
        self._workers: List[_Worker] = []
        self._lock = threading.Lock()  # held for a whole map_ranges (and by close)
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers)  # workers end with the pool

    def map_ranges(self, n: int, body: Callable[[int, int], None], min_chunk: int = 1) -> None:
        """Run ``body(start, stop)`` over disjoint contiguous ranges covering ``range(n)``, each
        at least ``min_chunk`` long (one range ``(0, n)`` when the work is too small to
        split), on up to ``threads`` threads; the first exception of a body is re-raised
        after every thread has left the ranges."""
        pieces = max(1, n // max(1, min_chunk))
        parts = min(self.threads, pieces)
        if parts <= 1 or not self._lock.acquire(blocking=False):
            body(0, n)
            return
        try:
            chunks = min(pieces, parts * self.CHUNKS_PER_THREAD)
            fixed = chunks == parts
            job = _Job(body, [n * i // chunks for i in range(chunks + 1)], parts - 1 if fixed else 0)
            while len(self._workers) < parts - 1:
                self._workers.append(_Worker(len(self._workers) + 1))
            for i, worker in enumerate(self._workers[:parts - 1]):
                worker.queue.put((job, i + 1))
            try:
                job.run(0 if fixed else None)
            except BaseException as e:  # noqa: B902 - re-raised below, after the workers leave
                job.fail(e)
            finally:
                job.close_and_wait()
        finally:
            self._lock.release()
        if job.error is not None:
            raise job.error

    def close(self) -> None:
        """Stop the workers (idempotent; a later ``map_ranges`` starts new ones)."""
        with self._lock:
            _stop_workers(self._workers)


class _Job:
    """One ``map_ranges`` call: the ranges, the counter handing them out, and which
    workers are inside (the caller waits for those only).  With ``fixed`` workers, worker
    ``i`` runs range ``i`` only and the caller waits for all of them."""

    __slots__ = ("body", "bounds", "take", "error", "fixed", "_lock", "_active", "_closed", "_waiting", "_done")

    def __init__(self, body: Callable[[int, int], None], bounds: List[int], fixed: int = 0):
        self.body = body
        self.bounds = bounds
        self.take = itertools.count().__next__  # atomic under the GIL
        self.error: Optional[BaseException] = None
        self.fixed = fixed > 0
        self._lock = threading.Lock()
        self._active = fixed  # fixed workers count as inside from the start
        self._closed = False
        self._waiting = False
        self._done = threading.Lock()
        self._done.acquire()

    def run(self, index: Optional[int] = None) -> None:
        """Run range ``index`` (fixed), or ranges until none is left (or a body failed)."""
        body, bounds = self.body, self.bounds
        if index is not None:
            if self.error is None:
                body(bounds[index], bounds[index + 1])
            return
        last = len(bounds) - 1
        while self.error is None:
            k = self.take()
            if k >= last:
                return
            body(bounds[k], bounds[k + 1])

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error

    def work(self, index: int) -> None:
        """Worker ``index``'s part: its range (fixed), else shared ranges unless the caller
        already closed the job."""
        if not self.fixed:
            with self._lock:
                if self._closed:
                    return
                self._active += 1
        try:
            self.run(index if self.fixed else None)
        except BaseException as e:  # noqa: B902 - handed to the caller of map_ranges
            self.fail(e)
        finally:
            with self._lock:
                self._active -= 1
                if self._closed and self._active == 0 and self._waiting:
                    self._done.release()

    def close_and_wait(self) -> None:
        """The caller's end: no worker may enter from now on; wait for those inside."""
        with self._lock:
            self._closed = True
            if self._active == 0:
                return
            self._waiting = True
        self._done.acquire()


class _Worker:
    """A daemon thread running the jobs put in its queue, in order (``None`` stops it)."""

    def __init__(self, index: int):
        self.queue: "queue.SimpleQueue[Optional[Tuple[_Job, int]]]" = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"rknnlite-worker-{index}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            task = self.queue.get()
            if task is None:
                return
            task[0].work(task[1])


def _stop_workers(workers: List[_Worker]) -> None:
    for worker in workers:
        worker.queue.put(None)
    for worker in workers:
        worker.thread.join()
    workers.clear()


_SERIAL = WorkerPool(1)


@contextmanager
def using(pool: WorkerPool) -> Iterator[None]:
    """Make ``pool`` the one ``parallel_for`` uses on this thread for the block."""
    previous = getattr(_local, "pool", None)
    _local.pool = pool
    try:
        yield
    finally:
        _local.pool = previous


def current_threads() -> int:
    """How many threads ``parallel_for`` would use on this thread now."""
    return getattr(_local, "pool", None).threads if getattr(_local, "pool", None) else 1


def parallel_for(n: int, body: Callable[[int, int], None], min_chunk: int = 1) -> None:
    """Run ``body(start, stop)`` over ``range(n)``, split across the current run's threads."""
    (getattr(_local, "pool", None) or _SERIAL).map_ranges(n, body, min_chunk)


class WorkRecorder:
    """Stands in for a :class:`WorkerPool` during a profiled run: same threads, and it counts
    the work items each thread executed.  Thread slot 0 is the thread that created the
    recorder (the run's caller); workers get slots 1, 2, ... in order of first use.
    :meth:`take` returns the counts since the last call and resets them."""

    def __init__(self, pool: WorkerPool):
        self.pool = pool
        self.threads = pool.threads
        self._slots = {threading.get_ident(): 0}
        self._counts = [0] * self.threads
        self._lock = threading.Lock()

    def map_ranges(self, n: int, body: Callable[[int, int], None], min_chunk: int = 1) -> None:
        """As :meth:`WorkerPool.map_ranges`, counting ``stop - start`` for the running thread."""

        def counted(start: int, stop: int) -> None:
            body(start, stop)
            ident = threading.get_ident()
            with self._lock:
                slot = self._slots.setdefault(ident, len(self._slots) % self.threads)
                self._counts[slot] += stop - start

        self.pool.map_ranges(n, counted, min_chunk)

    def take(self) -> list:
        """Work items per thread slot since the last call (all 0: nothing was split)."""
        with self._lock:
            counts, self._counts = self._counts, [0] * self.threads
        return counts

