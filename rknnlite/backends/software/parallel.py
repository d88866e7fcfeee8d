"""Intra-op threading for kernels: ``parallel_for`` splits work across the worker
threads of the run in progress.

The executor sets the pool for the duration of a run (:func:`using`); a kernel calls
``parallel_for(n, body)`` and ``body(start, stop)`` runs on disjoint ranges covering
``range(n)``, on the calling thread plus the pool's workers.  With one thread (the
default) it is a plain call.  Bodies must release the GIL for real speed-up
(numpy BLAS calls and Cython ``nogil`` loops do), and must not assume which thread runs
which range, nor that a worker takes part at all (ranges are handed out dynamically:
per-thread scratch, not per-range).  Compiled kernels skip Python altogether: they
take :func:`current_handle` and run C range functions on the same native workers.
Thread count: the context's core mask (:func:`threads_for_mask`: the software NPU's
thread policy, one thread per emulated core), or ``RKNNLITE_NUM_THREADS``; BLAS's own
threads are the process's business and are never changed here.
"""

from __future__ import annotations

import os
import threading
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional

import numpy as np

from ..._native.thread_pool import CHUNKS_PER_THREAD, NativePool
from ...constants import CoreMask
from ...errors import InvalidParamError
from ...tensors.topology import mask_cores, usable_cpus

__all__ = ["WorkerPool", "WorkRecorder", "parallel_for", "using", "threads_from_env", "spin_from_env",
           "current_threads", "current_handle", "threads_for_mask", "serial_pool", "SPLIT_MIN_ELEMENTS",
           "NATIVE_SPLIT_MIN_ELEMENTS",
           "branches_from_env"]

class _ThreadState(threading.local):
    """This thread's run state: the pool ``parallel_for`` uses (None: run serially).  A class
    default, not ``getattr(local, name, None)``: on a thread that never set it, that getattr
    raises and catches an AttributeError, about half a microsecond per call, and the kernels
    ask once or twice per layer."""

    pool: Optional["WorkerPool"] = None


_local = _ThreadState()

#: A memory-bound pass (a per-channel affine, a strided copy) is split across a run's
#: threads only when every thread gets at least this many elements: one thread passes several
#: thousand per microsecond, and handing a Python body to a worker costs tens of microseconds
#: (measured up to ~100 on a VM; resnet50's 3x3/2 max pool of 64x112x112, 802k elements, when
#: pools still split with Python bodies: 125 -> 90 us on two threads with this limit, where
#: 1 << 19 kept it serial).
SPLIT_MIN_ELEMENTS = 1 << 17

#: The same for a memory-bound pass whose ranges are native (a C range function on the pool's
#: workers, no GIL hand-off: the pools, the per-channel affine): a split costs a few microseconds,
#: so a quarter of SPLIT_MIN_ELEMENTS.  Measured on the Xeon of README, on two threads (profiled
#: runs, InitFlag.COLLECT_PERF_MASK):
#: inception_v2's pools 845 -> 740 us (855 on one thread), densenet121's BatchNormalization+Relu
#: affines 3675 -> 3207 us (3621 on one thread).
NATIVE_SPLIT_MIN_ELEMENTS = SPLIT_MIN_ELEMENTS // 4


def spin_from_env() -> int:
    """``RKNNLITE_SPIN_US`` (microseconds an idle worker polls for the next split, and a caller
    for the workers' last ranges at a join, before it sleeps) in nanoseconds; -1 (the pool's
    default, 1 ms) when unset or not an int >= 0."""
    try:
        value = int(os.environ.get("RKNNLITE_SPIN_US", ""))
    except ValueError:
        return -1
    return value * 1000 if value >= 0 else -1


def branches_from_env() -> bool:
    """``RKNNLITE_BRANCHES``: whether a context with several threads may run independent branches
    side by side (``branches``): ``1``/``on`` (the default, also when unset or empty) or
    ``0``/``off``.  Any other value raises :class:`~rknnlite.errors.InvalidParamError`."""
    raw = os.environ.get("RKNNLITE_BRANCHES", "").strip().lower()
    if raw in ("", "1", "on"):
        return True
    if raw in ("0", "off"):
        return False
    raise InvalidParamError(f"RKNNLITE_BRANCHES={raw!r}: expected 1, on, 0 or off (or unset)")


def threads_from_env(default: int = 1) -> int:
    """``RKNNLITE_NUM_THREADS`` as a positive int (``default`` when unset or invalid)."""
    raw = os.environ.get("RKNNLITE_NUM_THREADS", "")
    try:
        value = int(raw)
    except ValueError:
        return default
    return value if value > 0 else default


def threads_for_mask(platform: str, mask: CoreMask, default: int = 1) -> int:
    """Worker threads (caller included) one inference uses on the software NPU.

    ``AUTO`` keeps ``default`` (``RKNNLITE_NUM_THREADS`` or 1); an explicit mask uses one
    thread per emulated core it names, never more than :func:`~rknnlite.tensors.topology.usable_cpus`.
    """
    if CoreMask(mask) == CoreMask.AUTO:
        return default
    return max(1, min(len(mask_cores(platform, mask)), usable_cpus()))


class WorkerPool:
    """``threads - 1`` persistent native worker threads (the caller is the last one),
    started lazily (:class:`rknnlite._native.thread_pool.NativePool`).

    ``map_ranges`` with more pieces than threads hands the ranges out dynamically: each
    thread takes the next range from a shared counter until none is left, and a worker
    that wakes up after the caller has taken every range does nothing.  So a thread the
    OS delays (other processes on the cores) holds the call up by at most the range it is
    running, never by a fixed share of the work, and the caller never waits for a worker
    that has not started.  With no more pieces than threads, thread ``i`` (the caller is
    0) runs range ``i`` (one item per thread, e.g. one sample per emulated core).  One
    ``map_ranges`` at a time per pool: a call made while another is in progress (from a
    body, or another thread) runs serially on its caller.

    Compiled kernels run their own C range functions on the same threads through
    :attr:`handle`, with no GIL hand-off; Python bodies take the GIL per range.  An idle
    worker polls for the next split for ``RKNNLITE_SPIN_US`` microseconds (default 1000;
    0: sleep at once) before it sleeps: a model's next split usually comes sooner, and
    waking a sleeping thread costs tens of microseconds.
    """

    #: ranges per thread when there are more pieces than threads
    CHUNKS_PER_THREAD = CHUNKS_PER_THREAD

    def __init__(self, threads: int = 1):
        self.threads = max(1, int(threads))
        self._native = NativePool(self.threads, spin_from_env())
        # workers end with the pool, and before the interpreter finalizes
        self._finalizer = weakref.finalize(self, self._native.close)

    def map_ranges(self, n: int, body: Callable[[int, int], None], min_chunk: int = 1) -> None:
        """Run ``body(start, stop)`` over disjoint contiguous ranges covering ``range(n)``, each
        at least ``min_chunk`` long (one range ``(0, n)`` when the work is too small to
        split), on up to ``threads`` threads; the first exception of a body is re-raised
        after every thread has left the ranges.  Every thread runs ``body`` with the caller's
        numpy floating-point error settings (a run silences them: a worker must too)."""
        if n > 0:
            self._native.map_ranges(n, _with_caller_fp(body), max(1, min_chunk))

    @property
    def handle(self) -> Optional[object]:
        """The native pool's capsule for compiled kernels (workers started), or None with
        one thread (the kernels then run on their caller)."""
        return self._native.handle if self.threads > 1 else None

    def take_counts(self) -> List[int]:
        """Work items each thread slot ran since the last call (slot 0: the callers)."""
        return self._native.take_counts()

    def close(self) -> None:
        """Stop the workers (idempotent; a later ``map_ranges`` starts new ones)."""
        self._native.close()


def _with_caller_fp(body: Callable[[int, int], None]) -> Callable[[int, int], None]:
    """``body`` run under the calling thread's numpy floating-point error settings on any
    other thread (numpy keeps them per thread)."""
    caller, settings = threading.get_ident(), np.geterr()

    def run(start: int, stop: int) -> None:
        if threading.get_ident() == caller:
            body(start, stop)
            return
        previous = np.seterr(**settings)
        try:
            body(start, stop)
        finally:
            np.seterr(**previous)

    return run


_SERIAL = WorkerPool(1)


def serial_pool() -> WorkerPool:
    """The one-thread pool: ``using(serial_pool())`` makes the kernels of a block run
    unsplit on their caller (e.g. one branch of a forked region per thread)."""
    return _SERIAL


@contextmanager
def using(pool: WorkerPool) -> Iterator[None]:
    """Make ``pool`` the one ``parallel_for`` uses on this thread for the block."""
    previous = _local.pool
    _local.pool = pool
    try:
        yield
    finally:
        _local.pool = previous


def current_threads() -> int:
    """How many threads ``parallel_for`` would use on this thread now."""
    pool = _local.pool
    return pool.threads if pool is not None else 1


def current_handle() -> Optional[object]:
    """The current run's native pool capsule for compiled kernels (None: run serially)."""
    pool = _local.pool
    return pool.handle if pool is not None else None


def parallel_for(n: int, body: Callable[[int, int], None], min_chunk: int = 1) -> None:
    """Run ``body(start, stop)`` over ``range(n)``, split across the current run's threads."""
    (_local.pool or _SERIAL).map_ranges(n, body, min_chunk)


class WorkRecorder:
    """Stands in for a :class:`WorkerPool` during a profiled run: same threads, and
    :meth:`take` returns the work items each thread slot executed since the last call
    (slot 0: the run's caller; slot k: worker k), counted by the native pool for Python
    and compiled ranges alike."""

    def __init__(self, pool: WorkerPool):
        self.pool = pool
        self.threads = pool.threads
        pool.take_counts()  # start from zero

    def map_ranges(self, n: int, body: Callable[[int, int], None], min_chunk: int = 1) -> None:
        """As :meth:`WorkerPool.map_ranges`."""
        self.pool.map_ranges(n, body, min_chunk)

    @property
    def handle(self) -> Optional[object]:
        """As :attr:`WorkerPool.handle`."""
        return self.pool.handle

    def take(self) -> list:
        """Work items per thread slot since the last call (all 0: nothing was split)."""
        return self.pool.take_counts()
