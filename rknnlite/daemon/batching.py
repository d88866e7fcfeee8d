"""Dynamic batching: gather requests into one run of a multi-batch model.

A multi-batch model (built with ``rknn_batch_size`` B) takes B samples stacked on axis 0
of every input.  :class:`DynamicBatcher` collects requests (each with 1..``max_batch_size``
rows) until ``max_batch_size`` rows are waiting or the oldest has waited
``max_queue_delay_us``, stacks them, pads the rest of the B rows with zeros, runs once and
hands each request its rows of every output (views into the batch outputs, no copy).

Runs on one asyncio event loop; at most ``slots`` batches run at once (one per context),
so while every context is busy requests keep gathering into the next, larger batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Awaitable, Callable, List, Optional

import numpy as np

__all__ = ["DynamicBatcher", "BatcherClosedError"]


class BatcherClosedError(RuntimeError):
    """A request submitted after :meth:`DynamicBatcher.close`."""


class _Item:
    __slots__ = ("arrays", "rows", "future")

    def __init__(self, arrays, rows, future):
        self.arrays = arrays
        self.rows = rows
        self.future = future


class DynamicBatcher:
    """Gather requests into batches of at most ``max_batch_size`` rows.

    Args:
        run: ``await run(inputs)`` -> the model's outputs for a list of stacked inputs
            (the runner's ``run``).
        capacity: the model's batch B (rows per run; fewer rows are zero-padded).
        max_batch_size: rows gathered at most (1..B).
        max_queue_delay_us: longest wait of the oldest request for more rows, microseconds.
        slots: batches running at once (the runner's instances).
        on_batch: optional ``on_batch(rows)`` called per batch run (metrics).
    """

    def __init__(self, run: Callable[[List[np.ndarray]], Awaitable[List[np.ndarray]]], capacity: int,
                 max_batch_size: int, max_queue_delay_us: int, slots: int = 1,
                 on_batch: Optional[Callable[[int], None]] = None):
        if not 1 <= max_batch_size <= capacity:
            raise ValueError(f"max_batch_size must be in 1..{capacity}, got {max_batch_size}")
        self._run_model = run
        self.capacity = int(capacity)
        self.max_batch_size = int(max_batch_size)
        self._delay = max(0, int(max_queue_delay_us)) / 1e6
        self._slots_n = max(1, int(slots))
        self._on_batch = on_batch
        self._pending: deque = deque()
        self._rows = 0
        self._task: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._slots: Optional[asyncio.Semaphore] = None
        self._running: set = set()
        self._closed = False
        self._flushing = False

    @property
    def depth(self) -> int:
        """Rows waiting to be batched."""
        return self._rows

    async def submit(self, arrays: List[np.ndarray], rows: int) -> List[np.ndarray]:
        """Queue one request of ``rows`` rows (every array has ``rows`` on axis 0) and return
        its rows of every output once its batch has run.

        Raises:
            BatcherClosedError: the batcher is closed.
            Whatever the run raised (every request of that batch gets it).
        """
        if self._closed:
            raise BatcherClosedError("the model is being unloaded or replaced")
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._wake = asyncio.Event()
            self._slots = asyncio.Semaphore(self._slots_n)
            self._task = loop.create_task(self._gather())
        future = loop.create_future()
        self._pending.append(_Item(arrays, rows, future))
        self._rows += rows
        self._wake.set()
        return await future

    async def _gather(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            try:
                while not self._pending:
                    self._wake.clear()
                    await self._wake.wait()
                deadline = loop.time() + self._delay
                while self._rows < self.max_batch_size:
                    remaining = deadline - loop.time()
                    if remaining <= 0 or self._closed or self._flushing:
                        break
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), remaining)
                    except asyncio.TimeoutError:
                        break
                batch = self._take()
            except BaseException:
                self._slots.release()
                raise
            if not batch:
                self._slots.release()
                continue
            task = loop.create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    def _take(self) -> List[_Item]:
        batch: List[_Item] = []
        rows = 0
        shapes = None
        while self._pending:
            item = self._pending[0]
            if item.future.done():  # the client went away
                self._pending.popleft()
                self._rows -= item.rows
                continue
            item_shapes = [a.shape[1:] for a in item.arrays]
            if batch and (rows + item.rows > self.max_batch_size or item_shapes != shapes):
                break
            self._pending.popleft()
            self._rows -= item.rows
            batch.append(item)
            rows += item.rows
            shapes = item_shapes
        return batch

    async def _run(self, batch: List[_Item]) -> None:
        try:
            rows = sum(item.rows for item in batch)
            stacked = []
            for k in range(len(batch[0].arrays)):
                parts = [item.arrays[k] for item in batch]
                if rows < self.capacity:
                    first = parts[0]
                    parts.append(np.zeros((self.capacity - rows,) + first.shape[1:], first.dtype))
                stacked.append(np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0])
            if self._on_batch is not None:
                self._on_batch(rows)
            try:
                outputs = await self._run_model(stacked)
            except Exception as e:  # every request of the batch gets the error
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(e)
                return
            start = 0
            for item in batch:
                if not item.future.done():
                    item.future.set_result([y[start:start + item.rows] for y in outputs])
                start += item.rows
        finally:
            self._slots.release()

    def flush(self) -> None:
        """From now on run what is waiting at once instead of waiting up to the queue delay
        for more rows (a draining server); requests are still taken.  Idempotent."""
        self._flushing = True
        if self._wake is not None:
            self._wake.set()

    async def close(self) -> None:
        """Refuse new requests, run the ones waiting at once (without waiting for more rows),
        wait for every batch to finish, then stop.  Idempotent."""
        self._closed = True
        if self._task is None:
            return
        self._wake.set()
        while (self._pending or self._running) and not self._task.done():
            if self._running:
                await asyncio.gather(*list(self._running), return_exceptions=True)
            else:
                await asyncio.sleep(0.001)  # the gathering task takes what is pending
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
