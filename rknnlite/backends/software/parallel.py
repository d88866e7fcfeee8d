"""Intra-op threading for kernels: ``parallel_for`` splits work across the worker
threads of the run in progress.

The executor sets the pool for the duration of a run (:func:`using`); a kernel calls
``parallel_for(n, body)`` and ``body(start, stop)`` runs on disjoint ranges covering
``range(n)``, on the calling thread plus the pool's workers.  With one thread (the
default) it is a plain call.  Bodies must release the GIL for real speed-up
(numpy BLAS calls and Cython ``nogil`` loops do).  Thread count: the context's core
mask, or ``RKNNLITE_NUM_THREADS``; BLAS's own threads are the process's business and
are never changed here.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

__all__ = ["WorkerPool", "parallel_for", "using", "threads_from_env", "current_threads"]

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
    """``threads - 1`` worker threads (the caller is the last one), created lazily."""

    def __init__(self, threads: int = 1):
        self.threads = max(1, int(threads))
        self._executor: Optional[ThreadPoolExecutor] = None
        self._lock = threading.Lock()

    def map_ranges(self, n: int, body: Callable[[int, int], None], min_chunk: int = 1) -> None:
        """Run ``body`` over ``range(n)`` split into up to ``threads`` contiguous ranges."""
        parts = min(self.threads, max(1, n // max(1, min_chunk)))
        if parts <= 1:
            body(0, n)
            return
        bounds = [n * i // parts for i in range(parts + 1)]
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="rknnlite-worker")
        futures = [self._executor.submit(body, bounds[i], bounds[i + 1]) for i in range(1, parts)]
        body(bounds[0], bounds[1])
        for f in futures:
            f.result()

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None


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

