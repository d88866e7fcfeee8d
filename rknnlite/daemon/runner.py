"""Running inferences for the event loop, on ``rknnlite.pipeline.AsyncInferQueue``'s contexts.

A model's runner holds an :class:`~rknnlite.pipeline.AsyncInferQueue` of ``instances``
contexts (``dup()`` twins of the loaded one, sharing its weights, spread over the NPU
cores) and runs each request with the queue's :meth:`~rknnlite.pipeline.AsyncInferQueue.infer`
(an idle context, in the calling thread) either on one of ``instances`` worker threads of
its own or, for short runs, on the event loop thread itself.  ``Context.run`` releases the
GIL in its kernels, so the workers run in parallel with the event loop.

``infer`` blocks while every context is busy; the event loop must never block, so
:class:`QueueRunner` admits at most ``instances`` runs at a time through an
:class:`asyncio.Semaphore` (an admitted run always finds an idle context).

Short runs skip the worker threads: the hop to a worker and back (executor queue,
wake-up, future, loop wake-up) costs about 40 µs of CPU and more latency than a run of a
tiny model.  The runner times every run where it happens (on the worker, so the loop's
backlog is no part of it) and, for a model whose fastest run of the last :data:`WINDOW`
took less than ``inline_max_us``, runs on the event loop thread (on an idle context).  Two
inline runs in a row that take far longer (a big dynamic shape; one alone may only be the
process losing its CPU) send the model back to the workers at once; every :data:`WINDOW`
runs the choice is made again.
"""

from __future__ import annotations

import asyncio
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence

from ..runtime.log import logger

__all__ = ["QueueRunner", "INLINE_MAX_US", "WINDOW"]

#: Runs shorter than this (microseconds) run on the event loop thread (see the module doc).
INLINE_MAX_US = 100
#: Runs between two choices of where to run.
WINDOW = 32
#: Two inline runs in a row this many times over ``inline_max_us`` send the model back to the workers.
_BAIL_OUT_FACTOR = 20

_log = logger.getChild("daemon")


class QueueRunner:
    """``instances`` contexts of one model behind an awaitable :meth:`run`.

    Args:
        ctx: the loaded context (the template; owned by the runner from now on: closed by
            :meth:`close`).
        instances: contexts running in parallel (and worker threads).
        core_mask: one :class:`~rknnlite.constants.CoreMask` for every context, or None
            for the queue's default (one NPU core per context, round-robin).
        data_format: ``Context.run``'s ``data_format`` (one per input) or None.
        inline_max_us: runs measured shorter than this (microseconds) run on the event
            loop thread (see the module doc); 0 always uses the worker threads.
    """

    def __init__(self, ctx, instances: int = 1, core_mask: Optional[int] = None,
                 data_format: Optional[Sequence[Optional[str]]] = None, inline_max_us: float = INLINE_MAX_US):
        from ..pipeline import AsyncInferQueue

        self._template = ctx
        self._queue = AsyncInferQueue(ctx, jobs=max(1, int(instances)),
                                      core_masks=None if core_mask is None else [core_mask],
                                      data_format=list(data_format) if data_format is not None else None)
        self.instances = len(self._queue)
        self._workers = ThreadPoolExecutor(self.instances, thread_name_prefix=f"rknnlite-serve-{self._queue.label}")
        self._slots: Optional[asyncio.Semaphore] = None
        self._busy = 0  # runs on the worker threads (each holds a context)
        self._inline_max = max(0.0, float(inline_max_us)) / 1e6
        #: True while runs happen on the event loop thread (starts False: runs are timed first).
        self.inline = False
        self._fastest = math.inf
        self._timed = 0
        self._slow = 0  # inline runs in a row over the bail-out limit

    def infer(self, inputs) -> List:
        """One timed ``Context.run(inputs)`` on an idle context, in the calling thread; the
        outputs (new arrays).  Blocks while every context is busy: on the event loop, use
        :meth:`run`."""
        start = time.perf_counter()
        try:
            return self._queue.infer(inputs)
        finally:
            self._timed_run(time.perf_counter() - start)

    async def run(self, inputs) -> List:
        """Run once on a free context; the outputs (new arrays).  Runs on a worker thread,
        or on the calling (event loop) thread when the model's runs are short enough (see
        the module doc)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.instances)
        if self.inline and self._busy < self.instances:
            # a context is idle; the run ends before any waiting request resumes, so it
            # takes no context from them
            return self.infer(inputs)
        async with self._slots:
            self._busy += 1
            try:
                return await asyncio.get_running_loop().run_in_executor(self._workers, self.infer, inputs)
            finally:
                self._busy -= 1

    def _timed_run(self, seconds: float) -> None:
        # Called on the loop thread (inline runs) and on worker threads; the GIL keeps each
        # statement whole, and a lost update only delays the next choice by one run.
        if seconds < self._fastest:
            self._fastest = seconds
        self._timed += 1
        if self.inline and seconds > self._inline_max * _BAIL_OUT_FACTOR:
            # twice in a row: one such run may only be this process losing its CPU
            self._slow += 1
            if self._slow >= 2:
                _log.debug("%s: runs on the worker threads (two runs of %.0f µs or more)", self._queue.label,
                           self._inline_max * _BAIL_OUT_FACTOR * 1e6)
                self.inline = False
                self._fastest, self._timed, self._slow = math.inf, 0, 0
            return
        self._slow = 0
        if self._timed >= WINDOW:
            inline = self._fastest < self._inline_max
            if inline != self.inline:
                _log.debug("%s: runs on the %s (fastest of the last %d runs: %.0f µs)", self._queue.label,
                           "event loop thread" if inline else "worker threads", WINDOW, self._fastest * 1e6)
            self.inline = inline
            self._fastest, self._timed = math.inf, 0

    def close(self) -> None:
        """Wait for the runs in flight, stop the workers, close every context; blocking."""
        try:
            self._workers.shutdown(wait=True)
            self._queue.close()
        finally:
            self._template.close()
