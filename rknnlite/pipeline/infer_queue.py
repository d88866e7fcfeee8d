"""``AsyncInferQueue``: a pool of contexts of one model, run from worker threads.

Parallel inference needs one context per thread (``rknn_dup_context``): the pool is made
of :meth:`Context.dup` twins of one loaded model (weights shared), each pinned to an NPU
core, round-robin.  Calls block while every context is busy (backpressure), results go to
a callback or a :class:`concurrent.futures.Future`, and errors raised by inference or by
the callback are re-raised at :meth:`AsyncInferQueue.wait_all`, as in OpenVINO's queue of
the same name.  Every wait is a ``threading`` wait and inference runs in kernels that
release the GIL, so other Python threads keep running meanwhile.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, List, Optional, Sequence

from ..errors import ContextInvalidError, InvalidParamError
from ..runtime.args import check_timeout, is_int
from ..runtime.context import Context
from ..runtime.cores import core_count, supports_core_mask, usable_cpus
from ..runtime.log import logger

__all__ = ["AsyncInferQueue", "MAX_JOBS", "default_jobs", "default_core_masks"]

#: the most jobs (contexts and their worker threads) a queue, or a pipeline stage, takes: far
#: more than any board's cores; a number beyond it is a mistake that would otherwise end in a
#: thread-creation error or the OOM killer
MAX_JOBS = 256

_log = logger.getChild("pipeline")
_STOP = object()


def default_jobs(ctx: Context) -> int:
    """Contexts ``jobs=0`` means: one per NPU core of the context's platform (3 on RK3588,
    2 on RK3576, else 1) on the ``npu`` backend; on the ``software`` backend one per CPU
    this process may use (its affinity set), since each context runs on one CPU."""
    if ctx.backend == "software":
        return usable_cpus()
    return core_count(ctx.core_platform)


def default_core_masks(ctx: Context) -> List[int]:
    """The masks pool contexts take round-robin by default: ``CORE_0``, ``CORE_1``
    (, ``CORE_2``) on platforms whose core mask may be set (RK3588, RK3576); none (an
    empty list: contexts stay on ``AUTO``) on one-core platforms, where the runtime
    refuses ``set_core_mask``.  On the software backend a single-core mask makes each
    inference run on one thread, so ``jobs`` contexts use ``jobs`` CPUs."""
    platform = ctx.core_platform
    if not supports_core_mask(platform):
        return []
    return [1 << k for k in range(core_count(platform))]


class _Task:
    __slots__ = ("ctx", "inputs", "userdata", "future")

    def __init__(self, ctx: Context, inputs: Any, userdata: Any, future: Optional[Future]):
        self.ctx = ctx
        self.inputs = inputs
        self.userdata = userdata
        self.future = future


class AsyncInferQueue:
    """A pool of ``jobs`` contexts of one model with worker threads.

    Args:
        model_or_context: a model (path, ``bytes`` or buffer, as :class:`Context` takes;
            loaded here with the default options) or a loaded :class:`Context`.  A context
            passed in is only the template: the pool is made of its :meth:`~Context.dup`
            twins (it is neither changed nor closed here).  From a model, the first pool
            context is the loaded one and the others its dups.
        jobs: contexts (and worker threads); ``0`` picks :func:`default_jobs`.
        core_masks: :class:`~rknnlite.constants.CoreMask` values given to the contexts
            round-robin (context ``k`` gets ``core_masks[k % len(core_masks)]``); ``None``
            picks :func:`default_core_masks` (no mask on one-core platforms, where
            ``set_core_mask`` is refused).  A mask the platform refuses raises
            ``InvalidParamError``.
        data_format: passed to every :meth:`Context.run`.
        pass_through: passed to every :meth:`Context.run`.
        want_float: passed to every :meth:`Context.run`.

    Results are the new arrays :meth:`Context.run` returns (owned by the receiver); inputs
    are read during the run and not kept afterwards.

    Raises:
        InvalidParamError: ``jobs`` not an int in 0..MAX_JOBS, bad ``core_masks``.
        ContextInvalidError: the context passed in is closed.
    """

    def __init__(self, model_or_context, jobs: int = 0, core_masks: Optional[Sequence[int]] = None, *,
                 data_format=None, pass_through=None, want_float: bool = True):
        if not is_int(jobs) or not 0 <= jobs <= MAX_JOBS:
            raise InvalidParamError(f"jobs must be an int in 0..{MAX_JOBS} (0: one per core; each job is a context "
                                    f"and a thread), not {jobs!r}", op="AsyncInferQueue")
        if core_masks is not None:
            if is_int(core_masks):
                core_masks = [core_masks]
            if not isinstance(core_masks, (list, tuple)) or not all(is_int(m) for m in core_masks):
                raise InvalidParamError(f"core_masks must be a CoreMask or a list of them, not {core_masks!r}",
                                        op="AsyncInferQueue")
            core_masks = list(core_masks)
            if not core_masks:
                raise InvalidParamError("core_masks must name at least one core mask, or be None",
                                        op="AsyncInferQueue")
        self._run_options = dict(data_format=data_format, pass_through=pass_through, want_float=want_float)
        self._contexts: List[Context] = []
        self._owned: List[Context] = []
        try:
            if isinstance(model_or_context, Context):
                template = model_or_context
                if template.closed:
                    raise ContextInvalidError("the context is closed", op="rknn_run")
            else:
                template = Context(model_or_context)
                self._contexts.append(template)
                self._owned.append(template)
            n = jobs or default_jobs(template)
            masks = default_core_masks(template) if core_masks is None else core_masks
            while len(self._contexts) < n:
                twin = template.dup()
                self._owned.append(twin)
                self._contexts.append(twin)
            for k, ctx in enumerate(self._contexts):
                if masks:
                    ctx.set_core_mask(masks[k % len(masks)])
        except BaseException:
            for ctx in self._owned:
                ctx.close()
            raise
        self.label = str(getattr(getattr(template, "_loaded", None), "label", "model"))
        # over an RLock (the default), whose restore after a wait a Ctrl-C cannot interrupt (see
        # Pipeline.__init__)
        self._cond = threading.Condition()
        self._idle: List[Context] = list(self._contexts)
        self._pending = 0  # accepted tasks whose result has not been delivered yet
        self._errors: List[BaseException] = []
        self._callback: Optional[Callable[[Any, Any], Any]] = None
        self._tasks: "queue.SimpleQueue" = queue.SimpleQueue()
        self._workers: List[threading.Thread] = []
        self._closed = False
        self._stopped = False  # workers told to stop: late tasks run on their caller's thread

    # -- description -----------------------------------------------------------------------

    def __len__(self) -> int:
        """Contexts in the pool (the most inferences that run at once)."""
        return len(self._contexts)

    @property
    def contexts(self) -> List[Context]:
        """The pool's contexts (a new list; do not close them: :meth:`close` does)."""
        return list(self._contexts)

    def is_ready(self) -> bool:
        """True when a context is idle, i.e. :meth:`start_async` would not block now."""
        with self._cond:
            return bool(self._idle) and not self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._contexts)} jobs"
        return f"<rknnlite.pipeline.AsyncInferQueue {self.label} ({state})>"

    # -- submitting ------------------------------------------------------------------------

    def set_callback(self, fn: Optional[Callable[[Any, Any], Any]]) -> None:
        """Call ``fn(result, userdata)`` for every later :meth:`start_async` whose inference
        succeeded; ``result`` is the list of output arrays.  It runs on a worker thread,
        after the context went back to the pool (so it may call :meth:`start_async`).
        Exceptions it raises, and inference errors, are re-raised by :meth:`wait_all`.
        ``None`` removes the callback."""
        if fn is not None and not callable(fn):
            raise InvalidParamError(f"the callback must be callable as fn(result, userdata), not {fn!r}",
                                    op="AsyncInferQueue.set_callback")
        self._callback = fn

    def start_async(self, inputs, userdata: Any = None) -> None:
        """Start one inference of ``inputs`` (as :meth:`Context.run` takes them) on an idle
        context, blocking while every context is busy; the callback gets the result and
        ``userdata``.  Returns once the inference is queued.

        Raises:
            InvalidParamError: no callback is set (use :meth:`submit` for a future).
            ContextInvalidError: the queue is closed (also when it closes while waiting).
        """
        if self._callback is None:
            raise InvalidParamError("start_async needs a callback: call set_callback(fn) first, or use "
                                    "submit(inputs) for a Future", op="AsyncInferQueue.start_async")
        self._dispatch(_Task(self._acquire(), inputs, userdata, None))

    def submit(self, inputs) -> Future:
        """Start one inference like :meth:`start_async` (blocking while every context is busy)
        and return a :class:`~concurrent.futures.Future` of the output list; an inference
        error is the future's exception (not re-raised by :meth:`wait_all`).  The callback is
        not called for it.

        Raises:
            ContextInvalidError: the queue is closed.
        """
        future: Future = Future()
        self._dispatch(_Task(self._acquire(), inputs, None, future))
        return future

    def infer(self, inputs) -> list:
        """Run one inference on an idle context in the calling thread (blocking while every
        context is busy) and return the output list: for callers that already have their own
        threads, such as a :class:`~rknnlite.pipeline.Pipeline` stage.  Errors are raised here.

        Raises:
            ContextInvalidError: the queue is closed.
        """
        ctx = self._acquire()
        try:
            return ctx.run(inputs, **self._run_options)
        finally:
            self._release(ctx)

    def wait_all(self, timeout: Optional[float] = None) -> None:
        """Wait until every inference started so far has finished and its callback returned;
        then re-raise the first error a callback or an inference of :meth:`start_async`
        raised since the last ``wait_all`` (the others are logged), and forget them.

        Raises:
            RKNNTimeoutError: ``timeout`` seconds passed first (nothing is forgotten).
            InvalidParamError: ``timeout`` is not None or a number of seconds >= 0.
        """
        from ..errors import RKNNTimeoutError

        timeout = check_timeout(timeout, "AsyncInferQueue.wait_all")
        with self._cond:
            if not self._cond.wait_for(lambda: self._pending == 0, timeout):
                raise RKNNTimeoutError(f"wait_all: {self._pending} inference(s) still running after {timeout} s",
                                       op="AsyncInferQueue.wait_all")
            errors, self._errors = self._errors, []
        if errors:
            for extra in errors[1:]:
                _log.error("AsyncInferQueue: another error since the last wait_all: %r", extra)
            raise errors[0]

    # -- internals -------------------------------------------------------------------------

    def _acquire(self) -> Context:
        with self._cond:
            while not self._idle and not self._closed:
                self._cond.wait()
            if self._closed:
                raise ContextInvalidError("the AsyncInferQueue is closed", op="AsyncInferQueue")
            self._pending += 1
            return self._idle.pop()

    def _release(self, ctx: Context, done: bool = True) -> None:
        with self._cond:
            self._idle.append(ctx)
            if done:
                self._pending -= 1
            self._cond.notify_all()

    def _dispatch(self, task: _Task) -> None:
        with self._cond:
            stopped = self._stopped
            start = not stopped and len(self._workers) < len(self._contexts)
            if start:
                t = threading.Thread(target=self._work, name=f"rknnlite-infer-{len(self._workers)}", daemon=True)
                self._workers.append(t)
        if stopped:  # close() from a callback raced with this call: nobody else will run it
            self._run_task(task)
            return
        if start:
            t.start()
        self._tasks.put(task)

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is _STOP:
                return
            self._run_task(task)

    def _run_task(self, task: _Task) -> None:
        future = task.future
        if future is not None and not future.set_running_or_notify_cancel():
            self._release(task.ctx)
            return
        try:
            result = task.ctx.run(task.inputs, **self._run_options)
            error = None
        except BaseException as e:  # noqa: BLE001 - delivered to the future or wait_all
            result, error = None, e
        task.inputs = None
        self._release(task.ctx, done=False)  # free for the next start_async before the callback
        try:
            if future is not None:
                if error is None:
                    future.set_result(result)
                else:
                    future.set_exception(error)
            elif error is not None:
                raise error
            else:
                callback = self._callback
                if callback is not None:
                    callback(result, task.userdata)
        except BaseException as e:  # noqa: BLE001 - re-raised at wait_all
            with self._cond:
                self._errors.append(e)
        finally:
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new work (blocked callers get ``ContextInvalidError``), wait for the
        inferences already started and their callbacks, stop the workers and close the
        contexts this queue made (not a context passed in).  Idempotent.  Called from a
        callback (a worker thread), it returns without waiting for the running work, which
        finishes and closes the contexts afterwards.  Errors no :meth:`wait_all` collected
        are logged."""
        me = threading.current_thread()
        with self._cond:
            first = not self._closed
            self._closed = True
            self._cond.notify_all()
            in_worker = me in self._workers
        if not first:
            return
        if not in_worker:
            with self._cond:
                self._cond.wait_for(lambda: self._pending == 0)
        with self._cond:
            self._stopped = True
            workers = list(self._workers)
        for _ in workers:
            self._tasks.put(_STOP)
        for t in workers:
            if t is not me:
                t.join()
        if in_worker:
            threading.Thread(target=self._close_contexts_when_idle, daemon=True).start()
        else:
            self._close_contexts()

    def _close_contexts_when_idle(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._pending == 0)
        self._close_contexts()

    def _close_contexts(self) -> None:
        with self._cond:
            errors, self._errors = self._errors, []
        for e in errors:
            _log.error("AsyncInferQueue closed with an error no wait_all() collected: %r", e)
        for ctx in self._owned:
            ctx.close()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def __enter__(self) -> "AsyncInferQueue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

