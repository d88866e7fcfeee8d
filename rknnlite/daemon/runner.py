"""Running inferences off the event loop, on ``rknnlite.pipeline.AsyncInferQueue``.

A model's runner is an :class:`~rknnlite.pipeline.AsyncInferQueue` of ``instances``
contexts (``dup()`` twins of the loaded one, sharing its weights, spread over the NPU
cores), whose ``submit`` returns a :class:`concurrent.futures.Future`.  ``Context.run``
releases the GIL in its kernels, so the workers run in parallel with the event loop.

``AsyncInferQueue.submit`` blocks while every context is busy; the event loop must never
block, so :class:`QueueRunner` hands out at most ``instances`` submissions at a time
through an :class:`asyncio.Semaphore` (the queue frees a context before completing its
future, so an admitted submission always finds one idle).
"""

from __future__ import annotations

import asyncio
from typing import List, Optional, Sequence

__all__ = ["QueueRunner"]


class QueueRunner:
    """``instances`` contexts of one model behind an awaitable :meth:`run`.

    Args:
        ctx: the loaded context (the template; owned by the runner from now on: closed by
            :meth:`close`).
        instances: contexts running in parallel.
        core_mask: one :class:`~rknnlite.constants.CoreMask` for every context, or None
            for the queue's default (one NPU core per context, round-robin).
        data_format: ``Context.run``'s ``data_format`` (one per input) or None.
    """

    def __init__(self, ctx, instances: int = 1, core_mask: Optional[int] = None,
                 data_format: Optional[Sequence[Optional[str]]] = None):
        from ..pipeline import AsyncInferQueue

        self._template = ctx
        self._queue = AsyncInferQueue(ctx, jobs=max(1, int(instances)),
                                      core_masks=None if core_mask is None else [core_mask],
                                      data_format=list(data_format) if data_format is not None else None)
        self.instances = len(self._queue)
        self._slots: Optional[asyncio.Semaphore] = None

    def submit(self, inputs):
        """Queue one ``Context.run(inputs)``; a Future of its outputs (new arrays).  Blocks
        while every context is busy: on the event loop, use :meth:`run`."""
        return self._queue.submit(inputs)

    async def run(self, inputs) -> List:
        """Run once on a free context without blocking the event loop; the outputs."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.instances)
        async with self._slots:
            return await asyncio.wrap_future(self._queue.submit(inputs))

    def close(self) -> None:
        """Wait for the runs in flight, stop the workers, close every context; blocking."""
        try:
            self._queue.close()
        finally:
            self._template.close()
