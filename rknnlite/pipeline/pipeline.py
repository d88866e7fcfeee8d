"""``Pipeline``: frames through stages on worker threads, results in submission order.

A camera application captures, preprocesses, infers and postprocesses frames at once:
each stage has its own worker threads, frames move from stage to stage through queues,
and the consumer reads results in the order frames were pushed (or as they finish).

Bounding: at most ``maxsize`` frames are inside the pipeline at once (pushed and not yet
popped, dropped or cancelled), so memory is bounded and :meth:`Pipeline.push` blocks while
the pipeline is full (backpressure), or with ``drop="oldest"`` makes room by dropping the
oldest frame nobody is working on.  Only ``push`` and ``pop`` ever block on a full or empty
pipeline; stage workers never wait for the consumer, so a consumer that stops reading, a
stage that fails, or a close from any thread cannot deadlock it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set

from ..errors import ContextInvalidError, InvalidParamError, RKNNError, RKNNTimeoutError
from ..runtime.args import check_timeout, is_flag, is_int
from ..runtime.context import Context
from .infer_queue import MAX_JOBS, AsyncInferQueue
from .stats import LatencyWindow, PipelineStats, RateWindow, StageStats, ratio

__all__ = ["Pipeline", "Result", "FrameError", "PipelineClosedError", "Carry"]

_DROPS = ("none", "oldest")
_ON_ERROR = ("result", "raise")


class Result(NamedTuple):
    """One frame's result.

    ``frame_id``: the id :meth:`Pipeline.push` returned (0, 1, 2, ... in push order);
    ``value``: the last stage's return value (``None`` for a failed frame); ``error``: the
    exception a stage raised for this frame (``None`` on success); ``stage``: the index of
    that stage (``None`` on success); ``latency_s``: seconds from push to the result.
    """

    frame_id: int
    value: Any
    error: Optional[BaseException] = None
    stage: Optional[int] = None
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every stage succeeded for this frame."""
        return self.error is None


class Carry(NamedTuple):
    """An item with side data, for stages that need more than the previous stage's output.

    ``data``: what an inference stage runs (its input list) and replaces with its outputs;
    ``meta``: anything the later stages need (e.g. the letterbox transform), passed along
    untouched; ``frame_id``: the frame's id, filled in by the pipeline when a stage returns
    a ``Carry`` without one.  A callable stage receives and returns the ``Carry`` itself.
    """

    data: Any
    meta: Any = None
    frame_id: Optional[int] = None


class FrameError(RKNNError):
    """Raised by :meth:`Pipeline.pop` (``on_error="raise"``) for a frame a stage failed on;
    ``frame_id``, ``stage`` and ``error`` (also the ``__cause__``) say which and why.  The
    frame counts as popped; the next ``pop`` returns the next frame."""

    def __init__(self, frame_id: int, stage: int, stage_name: str, error: BaseException):
        super().__init__(f"frame {frame_id} failed in stage {stage} ({stage_name}): "
                         f"{type(error).__name__}: {error}", op="Pipeline.pop")
        self.frame_id = frame_id
        self.stage = stage
        self.error = error


class PipelineClosedError(ContextInvalidError):
    """``push`` on a closed pipeline, or ``pop`` once it is closed and every result has
    been handed out (iteration simply stops there)."""


class _Frame:
    __slots__ = ("fid", "item", "t_push", "state")

    def __init__(self, fid: int, item: Any, t_push: float):
        self.fid = fid
        self.item = item
        self.t_push = t_push
        self.state = 0  # 0 waiting in a queue, 1 in a worker, 2 done (result ready)


class _Stage:
    def __init__(self, index: int, fn: Callable[[Any], Any], name: str, workers: int):
        self.index = index
        self.fn = fn
        self.name = name
        self.workers = workers
        self.queue: Deque[_Frame] = deque()
        self.max_depth = 0
        self.processed = 0
        self.errors = 0
        self.latency = LatencyWindow()


class Pipeline:
    """Frames through ``stages`` on worker threads; results leave in push order.

    Args:
        *stages: each a callable ``fn(item) -> item`` (e.g. preprocess, postprocess), or an
            inference stage: a model (path, ``bytes``), a :class:`~rknnlite.Context` or an
            :class:`AsyncInferQueue`, which runs ``inputs -> list of output arrays`` on a
            pool context (a model or context gets an ``AsyncInferQueue(x)`` owned and
            closed by the pipeline; a queue passed in is not closed).
        workers: threads per stage: an int for every stage, or one entry per stage
            (``None`` entries take the default); default 1 for a callable and
            ``len(queue)`` for an inference stage.
        maxsize: most frames inside the pipeline at once (waiting, being processed, or
            done and not yet popped); default twice the worker threads.
        ordered: ``True``: :meth:`pop` returns frames in push order (a frame finished
            early waits for the ones before it); ``False``: as they finish.
        drop: ``"none"``: :meth:`push` blocks while the pipeline is full; ``"oldest"``:
            it drops the oldest frame no worker is processing (waiting in a queue or
            done and not popped) and counts it in ``stats().dropped``; it waits only if
            every frame inside is being processed.
        on_error: ``"result"``: a frame a stage raised on becomes a :class:`Result` with
            ``error`` set; ``"raise"``: :meth:`pop` raises :class:`FrameError` for it.  Either
            way the other frames continue.

    Items are passed between stages as they are (no copies).  The stage callables run on
    the pipeline's threads; they must not call :meth:`pop` of their own pipeline.  The
    worker threads start here and keep the pipeline alive until :meth:`close` (or the end
    of a ``with`` block); they are daemon threads, so they never hold up interpreter exit.

    Raises:
        InvalidParamError: no stage, a stage that is neither callable nor a model,
            bad ``workers``/``maxsize``/``drop``/``on_error``.
    """

    def __init__(self, *stages, workers=None, maxsize: Optional[int] = None, ordered: bool = True,
                 drop: str = "none", on_error: str = "result"):
        if not stages:
            raise InvalidParamError("a Pipeline needs at least one stage", op="Pipeline")
        if not is_flag(ordered):
            raise InvalidParamError(f"ordered must be True or False, not {ordered!r}", op="Pipeline")
        if not isinstance(drop, str) or drop not in _DROPS:
            raise InvalidParamError(f"drop must be one of {_DROPS}, not {drop!r}", op="Pipeline")
        if not isinstance(on_error, str) or on_error not in _ON_ERROR:
            raise InvalidParamError(f"on_error must be one of {_ON_ERROR}, not {on_error!r}", op="Pipeline")
        per_stage = _per_stage(workers, len(stages))
        self._owned: List[AsyncInferQueue] = []
        self._stages: List[_Stage] = []
        try:
            for i, (stage, n) in enumerate(zip(stages, per_stage)):
                self._stages.append(self._make_stage(i, stage, n))
        except BaseException:
            for q in self._owned:
                q.close()
            raise
        total = sum(s.workers for s in self._stages)
        if maxsize is None:
            maxsize = 2 * total
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            for q in self._owned:
                q.close()
            raise InvalidParamError(f"maxsize must be an int >= 1 (frames inside the pipeline), not {maxsize!r}",
                                    op="Pipeline")
        self.maxsize = maxsize
        self.ordered = bool(ordered)
        self.drop = drop
        self.on_error = on_error

        # An RLock, not a Lock: a Condition over a Lock takes it back after a wait with an
        # acquire that a signal interrupts, so a Ctrl-C arriving then leaves ``wait`` without the
        # lock and the ``with`` block releases another thread's hold (its worker then dies and
        # close() waits forever).  An RLock's restore cannot be interrupted.
        lock = threading.RLock()
        self._lock = lock
        self._work_ready = [threading.Condition(lock) for _ in self._stages]
        self._space = threading.Condition(lock)   # push waits for room
        self._ready = threading.Condition(lock)   # pop waits for a result
        self._idle = threading.Condition(lock)    # close waits for the workers to finish
        self._next_fid = 0
        self._inside = 0          # frames pushed and not popped, dropped or cancelled
        self._active = 0          # frames waiting in a stage queue or in a worker
        self._frames: Dict[int, _Frame] = {}   # every frame inside, by id
        self._done: Dict[int, Result] = {}     # results not popped yet (ordered mode), by id
        self._done_fifo: Deque[Result] = deque()  # the same, unordered mode
        self._gone: Set[int] = set()           # ids dropped or cancelled before their turn (ordered)
        self._out_next = 0                     # next id pop returns (ordered)
        self._input_closed = False
        self._cancelling = False
        self._stopping = False
        self.counts = dict(pushed=0, completed=0, failed=0, cancelled=0, dropped=0, popped=0)
        self._t_first: Optional[float] = None
        self._t_last: Optional[float] = None
        self._latency = LatencyWindow()
        self._rate = RateWindow()
        self._alive = 0
        self._leaving = 0
        self._threads: List[threading.Thread] = []
        for stage in self._stages:
            for k in range(stage.workers):
                t = threading.Thread(target=self._work, args=(stage,), daemon=True,
                                     name=f"rknnlite-pipeline-{stage.index}.{k}")
                self._threads.append(t)
        self._alive = len(self._threads)
        for t in self._threads:
            t.start()

    def _make_stage(self, i: int, stage, n: Optional[int]) -> _Stage:
        if isinstance(stage, AsyncInferQueue):
            fn, name, default = _carrying(stage.infer), f"infer({stage.label})", len(stage)
        elif isinstance(stage, (Context, str, bytes, bytearray, memoryview, os.PathLike)):
            q = AsyncInferQueue(stage)
            self._owned.append(q)
            fn, name, default = _carrying(q.infer), f"infer({q.label})", len(q)
        elif callable(stage):
            fn, name, default = stage, getattr(stage, "__name__", None) or type(stage).__name__, 1
        else:
            raise InvalidParamError(f"stage {i} must be a callable fn(item) -> item, a model, a Context or an "
                                    f"AsyncInferQueue, not {type(stage).__name__}", op="Pipeline")
        return _Stage(i, fn, name, default if n is None else n)

    # -- producer side ---------------------------------------------------------------------

    def push(self, item: Any, timeout: Optional[float] = None) -> int:
        """Put ``item`` into the first stage and return its frame id (0, 1, 2, ...).  The
        item is not copied.  While ``maxsize`` frames are inside: blocks (``drop="none"``), or
        drops the oldest frame no worker is processing (``drop="oldest"``).

        Raises:
            PipelineClosedError: the pipeline is closed (also when it closes while waiting).
            RKNNTimeoutError: no room within ``timeout`` seconds (nothing was pushed).
            InvalidParamError: ``timeout`` is not None or a number of seconds >= 0.
        """
        timeout = check_timeout(timeout, "Pipeline.push")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                if self._input_closed:
                    raise PipelineClosedError("push: the pipeline is closed", op="Pipeline.push")
                if self._inside < self.maxsize:
                    break
                if self.drop == "oldest" and self._drop_oldest():
                    break
                if not self._wait(self._space, deadline):
                    raise RKNNTimeoutError(f"push: the pipeline stayed full ({self.maxsize} frames) for "
                                           f"{timeout} s", op="Pipeline.push")
            now = time.perf_counter()
            fid = self._next_fid
            self._next_fid += 1
            frame = _Frame(fid, item, now)
            self._frames[fid] = frame
            self._inside += 1
            self._active += 1
            self.counts["pushed"] += 1
            if self._t_first is None:
                self._t_first = now
            self._enqueue(self._stages[0], frame)
            return fid

    def _drop_oldest(self) -> bool:
        """Drop the oldest frame that waits in a queue or as an unpopped result (under the lock)."""
        victim = None
        for frame in self._frames.values():  # insertion order = frame id order
            if frame.state != 1:
                victim = frame
                break
        if victim is None:
            return False
        fid = victim.fid
        if victim.state == 0:
            for stage in self._stages:
                try:
                    stage.queue.remove(victim)
                    break
                except ValueError:
                    continue
            self._active -= 1
        else:
            result = self._done.pop(fid, None) if self.ordered else None
            if not self.ordered:
                result = next(r for r in self._done_fifo if r.frame_id == fid)
                self._done_fifo.remove(result)
            self.counts["completed" if result.error is None else "failed"] -= 1
        self._forget(fid)
        self.counts["dropped"] += 1
        self._after_active_change()
        return True

    # -- stage workers -----------------------------------------------------------------------

    def _enqueue(self, stage: _Stage, frame: _Frame) -> None:
        frame.state = 0
        q = stage.queue
        q.append(frame)
        if len(q) > stage.max_depth:
            stage.max_depth = len(q)
        self._work_ready[stage.index].notify()

    def _work(self, stage: _Stage) -> None:
        cond = self._work_ready[stage.index]
        q = stage.queue
        last = len(self._stages) - 1
        fn = stage.fn
        lock = self._lock
        try:
            while True:
                with lock:
                    while not q and not self._stopping:
                        cond.wait()
                    if not q:
                        return
                    frame = q.popleft()
                    frame.state = 1
                t0 = time.perf_counter()
                try:
                    value = fn(frame.item)
                    error = None
                    if type(value) is Carry and value.frame_id is None:
                        value = value._replace(frame_id=frame.fid)
                except BaseException as e:  # noqa: BLE001 - becomes this frame's error result
                    value, error = None, e
                t1 = time.perf_counter()
                with lock:
                    stage.processed += 1
                    stage.latency.add(t1 - t0)
                    if error is not None:
                        stage.errors += 1
                    if self._cancelling:
                        self._cancel(frame)
                    elif error is None and stage.index < last:
                        frame.item = value
                        self._enqueue(self._stages[stage.index + 1], frame)
                        if self.drop == "oldest":
                            self._space.notify()  # the frame can be dropped again
                    else:
                        self._finish(frame, value, error, stage.index, t1)
        finally:
            with lock:
                self._leaving += 1
                last_one = self._leaving == len(self._threads)
            if last_one:  # close the pipeline's own inference queues before close() returns
                for owned in self._owned:
                    owned.close()
            with lock:
                self._alive -= 1
                self._idle.notify_all()

    def _finish(self, frame: _Frame, value, error, stage: int, t: float) -> None:
        """A frame's result is ready (under the lock)."""
        fid = frame.fid
        latency = t - frame.t_push
        result = Result(fid, value, error, None if error is None else stage, latency)
        frame.item = None
        frame.state = 2
        self._active -= 1
        self.counts["completed" if error is None else "failed"] += 1
        self._latency.add(latency)
        self._rate.add(t)
        self._t_last = t
        if self.ordered:
            self._done[fid] = result
            if fid == self._out_next:
                self._ready.notify()
        else:
            self._done_fifo.append(result)
            self._ready.notify()
        if self.drop == "oldest":
            self._space.notify()
        self._after_active_change()

    def _cancel(self, frame: _Frame) -> None:
        frame.item = None
        self._active -= 1
        self._forget(frame.fid)
        self.counts["cancelled"] += 1
        self._after_active_change()

    def _forget(self, fid: int) -> None:
        """Frame ``fid`` will never be popped (dropped or cancelled): free its room."""
        del self._frames[fid]
        self._inside -= 1
        if self.ordered:
            if fid == self._out_next:
                self._advance()
            else:
                self._gone.add(fid)
            self._ready.notify_all()
        self._space.notify()

    def _advance(self) -> None:
        self._out_next += 1
        gone = self._gone
        while self._out_next in gone:
            gone.discard(self._out_next)
            self._out_next += 1

    def _after_active_change(self) -> None:
        if self._active == 0 and self._input_closed and not self._stopping:
            self._stopping = True
            for cond in self._work_ready:
                cond.notify_all()
            self._ready.notify_all()

    # -- consumer side -----------------------------------------------------------------------

    def pop(self, timeout: Optional[float] = None) -> Result:
        """The next result: in push order (``ordered=True``) or the next to finish.  Waits
        for it (up to ``timeout`` seconds).

        Raises:
            FrameError: the frame failed and ``on_error="raise"`` (it counts as popped).
            RKNNTimeoutError: no result within ``timeout`` seconds.
            PipelineClosedError: the pipeline is closed and every result was handed out.
            InvalidParamError: ``timeout`` is not None or a number of seconds >= 0.
        """
        timeout = check_timeout(timeout, "Pipeline.pop")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                result = self._take()
                if result is not None:
                    break
                if self._input_closed and self._inside == 0:
                    raise PipelineClosedError("pop: the pipeline is closed and every result was handed out",
                                              op="Pipeline.pop")
                if not self._wait(self._ready, deadline):
                    raise RKNNTimeoutError(f"pop: no result within {timeout} s", op="Pipeline.pop")
        if result.error is not None and self.on_error == "raise":
            stage = result.stage if result.stage is not None else 0
            raise FrameError(result.frame_id, stage, self._stages[stage].name, result.error) from result.error
        return result

    def _take(self) -> Optional[Result]:
        """Remove and return the next poppable result, or None (under the lock)."""
        if self.ordered:
            result = self._done.pop(self._out_next, None)
            if result is None:
                return None
            self._advance()
            if self._out_next in self._done:
                self._ready.notify()  # another consumer thread may take the next one
        else:
            if not self._done_fifo:
                return None
            result = self._done_fifo.popleft()
        del self._frames[result.frame_id]
        self._inside -= 1
        self.counts["popped"] += 1
        self._space.notify()
        if self._inside == 0 and self._input_closed:
            self._ready.notify_all()
        return result

    def __iter__(self) -> Iterator[Result]:
        """Results as :meth:`pop` returns them, until the pipeline is closed and drained
        (close it from the producer thread when the input ends)."""
        while True:
            try:
                yield self.pop()
            except PipelineClosedError:
                return

    # -- lifetime --------------------------------------------------------------------------

    def close(self, drain: bool = True, timeout: Optional[float] = None) -> None:
        """Stop taking frames, then finish the frames inside (``drain=True``) or cancel them
        (``drain=False``: frames waiting in queues are cancelled at once, frames in a worker
        when its current call returns), then stop the workers and close the inference queues
        the pipeline made.  Results already produced stay poppable; blocked ``push`` calls
        raise :class:`PipelineClosedError`.  Every pushed frame ends up counted in ``stats()``
        as completed, failed, cancelled or dropped.  Idempotent; callable from any thread.  From
        a stage (a worker thread) it does not wait; the workers stop once the frames are done.

        Raises:
            RKNNTimeoutError: the workers were still busy after ``timeout`` seconds (a stage
                call that does not return); the pipeline keeps closing in the background.
            InvalidParamError: ``drain`` is not True/False, or ``timeout`` not None or seconds >= 0.
        """
        if not is_flag(drain):
            raise InvalidParamError(f"drain must be True or False, not {drain!r}", op="Pipeline.close")
        timeout = check_timeout(timeout, "Pipeline.close")
        with self._lock:
            self._input_closed = True
            if not drain and not self._cancelling:
                self._cancelling = True
                for stage in self._stages:
                    while stage.queue:
                        self._cancel(stage.queue.popleft())
            self._after_active_change()
            self._space.notify_all()
            self._ready.notify_all()
            if threading.current_thread() in self._threads:
                return
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._alive:
                if not self._wait(self._idle, deadline):
                    raise RKNNTimeoutError(f"close: {self._alive} worker(s) still busy after {timeout} s",
                                           op="Pipeline.close")
        for t in self._threads:
            t.join()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (results may still be poppable)."""
        return self._input_closed

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Drains on a normal exit; cancels when an exception (e.g. KeyboardInterrupt) leaves
        the block."""
        self.close(drain=exc_type is None)

    # -- statistics ------------------------------------------------------------------------

    def stats(self) -> PipelineStats:
        """A snapshot of the counters, throughput, latencies and queue depths
        (:class:`~rknnlite.pipeline.stats.PipelineStats`)."""
        with self._lock:
            c = dict(self.counts)
            produced = c["completed"] + c["failed"]
            elapsed = 0.0 if self._t_first is None else time.perf_counter() - self._t_first
            span = None if self._t_first is None or self._t_last is None else self._t_last - self._t_first
            stages = [StageStats(s.name, s.workers, len(s.queue), s.max_depth, s.processed, s.errors,
                                 s.latency.summary()) for s in self._stages]
            return PipelineStats(pushed=c["pushed"], completed=c["completed"], failed=c["failed"],
                                 cancelled=c["cancelled"], dropped=c["dropped"], popped=c["popped"],
                                 in_flight=self._active, elapsed_s=elapsed,
                                 throughput_fps=ratio(produced, span), recent_fps=self._rate.fps(),
                                 latency=self._latency.summary(), stages=stages)

    def __repr__(self) -> str:
        names = " -> ".join(s.name for s in self._stages)
        return f"<rknnlite.pipeline.Pipeline {names} ({'closed' if self._input_closed else 'open'})>"

    @staticmethod
    def _wait(cond: threading.Condition, deadline: Optional[float]) -> bool:
        """Wait on ``cond`` (lock held) until notified; False once ``deadline`` passed."""
        if deadline is None:
            cond.wait()
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        cond.wait(left)
        return True


def _carrying(infer: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An inference stage: ``Carry`` items run their ``data`` and keep their ``meta``."""

    def run(item):
        if type(item) is Carry:
            return item._replace(data=infer(item.data))
        return infer(item)

    return run


def _per_stage(workers, n: int) -> List[Optional[int]]:
    if workers is None:
        values: Sequence = [None] * n
    elif isinstance(workers, int) and not isinstance(workers, bool):
        values = [workers] * n
    elif isinstance(workers, (list, tuple)) and len(workers) == n:
        values = workers
    else:
        raise InvalidParamError(f"workers must be an int or a list of {n} (one per stage), not {workers!r}",
                                op="Pipeline")
    for w in values:
        if w is not None and (not is_int(w) or not 1 <= w <= MAX_JOBS):
            raise InvalidParamError(f"workers per stage must be ints in 1..{MAX_JOBS} (each is a thread), not {w!r}",
                                    op="Pipeline")
    return list(values)
