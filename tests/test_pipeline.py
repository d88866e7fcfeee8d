"""Pipeline (issue 8 points 2-4): stages on worker threads, results in push order with
their frame ids, bounded room with backpressure or drop-oldest, faults turned into error
results, close/cancel/interrupt accounting without deadlocks, stats, inference stages, and
the GIL released while a stage infers.  Every wait is bounded (``finishes``, timeouts)."""

from __future__ import annotations

import os
import random
import threading
import time

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import InvalidParamError, RKNNTimeoutError
from rknnlite.pipeline import AsyncInferQueue, Carry, FrameError, Pipeline, PipelineClosedError, Result

from conftest import CTRL_C_WHILE_RETAKING, THREAD_LIMIT as LIMIT  # noqa: E402


class Gate:
    """A stage that blocks on chosen items until released; ``started`` counts the calls
    that began."""

    def __init__(self, blocked=None):
        self.blocked = blocked  # None: every item blocks
        self.open = threading.Event()
        self.started = threading.Semaphore(0)

    def __call__(self, item):
        self.started.release()
        if self.blocked is None or item in self.blocked:
            assert self.open.wait(LIMIT), "gate never opened"
        return item

    def wait_started(self, n=1):
        for _ in range(n):
            assert self.started.acquire(timeout=LIMIT), "the stage never started"


def accounted(stats):
    return stats.completed + stats.failed + stats.cancelled + stats.dropped + stats.in_flight


def produce(pipe, items, close=True):
    """Push ``items`` from a new thread (closing with drain at the end); returns the thread."""
    def body():
        for item in items:
            pipe.push(item)
        if close:
            pipe.close()
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


# -- ordering ---------------------------------------------------------------------------------

def test_results_leave_in_push_order_with_ids_although_workers_finish_out_of_order(finishes):
    rng = random.Random(1)
    delays = [rng.choice([0.0, 0.0, 0.002, 0.005]) for _ in range(200)]
    finish_order = []

    def slow(k):
        time.sleep(delays[k])
        finish_order.append(k)
        return k * 10

    def run():
        with Pipeline(slow, lambda v: v + 1, workers=[4, 1], maxsize=16) as pipe:
            t = produce(pipe, range(200))
            out = list(pipe)
            t.join(LIMIT)
            return out

    out = finishes(run)
    assert [r.frame_id for r in out] == list(range(200))
    assert [r.value for r in out] == [k * 10 + 1 for k in range(200)]
    assert all(isinstance(r, Result) and r.ok and r.latency_s > 0 for r in out)
    assert finish_order != sorted(finish_order)  # the workers did finish out of order


def test_unordered_results_leave_as_they_finish(finishes):
    gate = Gate(blocked={0})
    with Pipeline(gate, workers=2, maxsize=8, ordered=False) as pipe:
        for k in range(4):
            pipe.push(k)
        early = [finishes(lambda: pipe.pop(timeout=LIMIT)).frame_id for _ in range(3)]
        assert sorted(early) == [1, 2, 3]  # frame 0 is still in the stage
        gate.open.set()
        assert pipe.pop(timeout=LIMIT).frame_id == 0


def test_ordered_pop_waits_for_the_frame_before(finishes):
    gate = Gate(blocked={0})
    with Pipeline(gate, workers=2, maxsize=8) as pipe:
        for k in range(3):
            pipe.push(k)
        with pytest.raises(RKNNTimeoutError):
            pipe.pop(timeout=0.1)  # frames 1, 2 are done, but 0 is not
        gate.open.set()
        assert [finishes(lambda: pipe.pop(timeout=LIMIT)).frame_id for _ in range(3)] == [0, 1, 2]


# -- the acceptance run: 10,000 frames, random failures in every stage ---------------------------

def test_ten_thousand_frames_with_random_failures_in_every_stage(finishes):
    n = 10_000
    rng = random.Random(8)
    fails = [{k for k in range(n) if rng.random() < 0.03} for _ in range(3)]

    def stage(i):
        def fn(item):
            k, trail = item
            if k in fails[i]:
                raise ValueError(f"stage {i} fails frame {k}")
            return k, trail + (i,)
        fn.__name__ = f"stage{i}"
        return fn

    def run():
        pipe = Pipeline(stage(0), stage(1), stage(2), workers=[2, 3, 2], maxsize=32)
        producer = produce(pipe, ((k, ()) for k in range(n)))
        out = list(pipe)
        producer.join(LIMIT)
        return pipe, out

    pipe, out = finishes(run, limit=300)
    assert [r.frame_id for r in out] == list(range(n))
    expected_failed = [0, 0, 0]
    for k, r in enumerate(out):
        first = next((i for i in range(3) if k in fails[i]), None)
        if first is None:
            assert r.ok and r.value == (k, (0, 1, 2))
        else:
            expected_failed[first] += 1
            assert not r.ok and r.stage == first and r.value is None
            assert isinstance(r.error, ValueError) and str(r.error) == f"stage {first} fails frame {k}"
    s = pipe.stats()
    assert s.pushed == n and s.popped == n and s.in_flight == 0
    assert s.failed == sum(expected_failed) > 0 and s.completed == n - s.failed
    assert s.cancelled == 0 and s.dropped == 0 and accounted(s) == n
    assert [st.errors for st in s.stages] == expected_failed
    assert s.stages[0].processed == n and s.stages[2].processed == n - expected_failed[0] - expected_failed[1]


def test_on_error_raise_raises_at_pop_and_the_next_frames_continue(finishes):
    def fn(k):
        if k == 2:
            raise ZeroDivisionError("frame 2 is bad")
        return -k

    with Pipeline(lambda k: k, fn, maxsize=8, on_error="raise") as pipe:
        for k in range(5):
            pipe.push(k)
        assert [pipe.pop(timeout=LIMIT).value for _ in range(2)] == [0, -1]
        with pytest.raises(FrameError) as info:
            pipe.pop(timeout=LIMIT)
        e = info.value
        assert e.frame_id == 2 and e.stage == 1 and isinstance(e.error, ZeroDivisionError)
        assert e.__cause__ is e.error and "frame 2" in str(e) and "stage 1" in str(e)
        assert [pipe.pop(timeout=LIMIT).value for _ in range(2)] == [-3, -4]
        assert pipe.stats().popped == 5


def test_a_stage_raising_base_exceptions_fails_only_its_frame(finishes):
    def fn(k):
        if k == 1:
            raise SystemExit("not for the worker thread")
        return k

    with Pipeline(fn, maxsize=4) as pipe:
        for k in range(3):
            pipe.push(k)
        out = [finishes(lambda: pipe.pop(timeout=LIMIT)) for _ in range(3)]
    assert [r.ok for r in out] == [True, False, True] and isinstance(out[1].error, SystemExit)


# -- room: backpressure and drop-oldest -------------------------------------------------------------

def test_push_blocks_while_full_and_resumes_after_a_pop(finishes):
    with Pipeline(lambda k: k, maxsize=2) as pipe:
        pipe.push(0)
        pipe.push(1)
        with pytest.raises(RKNNTimeoutError):
            pipe.push(2, timeout=0.1)  # the consumer has not read: no room
        assert pipe.stats().pushed == 2
        t = threading.Thread(target=pipe.push, args=(2,), daemon=True)
        t.start()
        t.join(0.2)
        assert t.is_alive()
        assert pipe.pop(timeout=LIMIT).frame_id == 0
        t.join(LIMIT)
        assert not t.is_alive()
        assert [pipe.pop(timeout=LIMIT).value for _ in range(2)] == [1, 2]


def test_drop_oldest_drops_the_oldest_waiting_frame(finishes):
    gate = Gate(blocked={0})
    with Pipeline(gate, workers=1, maxsize=3, drop="oldest") as pipe:
        pipe.push(0)
        gate.wait_started()     # frame 0 is in the worker: it cannot be dropped
        pipe.push(1)
        pipe.push(2)
        pipe.push(3)            # full: frame 1 (oldest waiting) is dropped
        pipe.push(4)            # frame 2 is dropped
        s = pipe.stats()
        assert s.dropped == 2 and s.pushed == 5 and accounted(s) == 5
        gate.open.set()
        out = [finishes(lambda: pipe.pop(timeout=LIMIT)) for _ in range(3)]
    assert [r.frame_id for r in out] == [0, 3, 4] and [r.value for r in out] == [0, 3, 4]


def test_drop_oldest_keeps_a_live_source_real_time_when_nobody_reads(finishes):
    def run():
        with Pipeline(lambda k: k * 2, lambda v: v + 1, maxsize=4, drop="oldest") as pipe:
            for k in range(500):
                pipe.push(k)  # never blocks for long: old frames make room
            pipe.close()
            return pipe, list(pipe)

    pipe, out = finishes(run)
    s = pipe.stats()
    assert s.pushed == 500 and s.dropped > 0 and len(out) == 500 - s.dropped <= 4
    assert s.completed + s.dropped == 500 and accounted(s) == 500
    assert out[-1].frame_id == 499 and out[-1].value == 999  # the newest frame survives
    assert [r.frame_id for r in out] == sorted(r.frame_id for r in out)


def test_drop_oldest_waits_when_every_frame_is_being_processed(finishes):
    gate = Gate()
    with Pipeline(gate, workers=2, maxsize=2, drop="oldest") as pipe:
        pipe.push(0)
        pipe.push(1)
        gate.wait_started(2)
        with pytest.raises(RKNNTimeoutError):
            pipe.push(2, timeout=0.1)  # both frames are in workers: nothing to drop
        gate.open.set()
        finishes(lambda: pipe.push(2, timeout=LIMIT))
        assert pipe.stats().dropped == 1  # a finished, unpopped frame made room


# -- close, cancel, interrupt -----------------------------------------------------------------

def test_close_drains_and_results_stay_poppable(finishes):
    pipe = Pipeline(lambda k: k + 100, workers=2, maxsize=64)
    for k in range(50):
        pipe.push(k)
    finishes(pipe.close)  # nobody has read yet: close still returns
    s = pipe.stats()
    assert s.completed == 50 and s.in_flight == 0 and accounted(s) == 50
    with pytest.raises(PipelineClosedError):
        pipe.push(1)
    assert [r.value for r in pipe] == [k + 100 for k in range(50)]
    with pytest.raises(PipelineClosedError):
        pipe.pop(timeout=1)
    pipe.close()  # idempotent


def test_close_without_drain_cancels_and_accounts_for_every_frame(finishes):
    gate = Gate(blocked={3})
    pipe = Pipeline(gate, lambda k: k, workers=[1, 1], maxsize=16)
    for k in range(10):
        pipe.push(k)
    gate.wait_started(4)  # frame 3 blocks in the first stage's worker
    deadline = time.monotonic() + LIMIT
    while pipe.stats().completed < 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # frames 0-2 pass the second stage
    closer = threading.Thread(target=pipe.close, kwargs={"drain": False}, daemon=True)
    closer.start()
    deadline = time.monotonic() + LIMIT
    while pipe.stats().cancelled < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pipe.stats().cancelled == 6  # 4..9 were waiting: cancelled at once
    gate.open.set()  # frame 3's call returns: it is cancelled too
    closer.join(LIMIT)
    assert not closer.is_alive()
    s = pipe.stats()
    assert s.cancelled == 7 and s.completed == 3 and s.in_flight == 0 and accounted(s) == 10
    assert [r.frame_id for r in pipe] == [0, 1, 2]


def test_close_from_a_third_thread_wakes_a_blocked_push_and_pop(finishes):
    gate = Gate()
    pipe = Pipeline(gate, maxsize=1)
    pipe.push(0)
    gate.wait_started()
    outcome = {}

    def call(name, fn):
        try:
            outcome[name] = fn()
        except PipelineClosedError as e:
            outcome[name] = e

    popper = threading.Thread(target=call, args=("pop", pipe.pop), daemon=True)
    pusher = threading.Thread(target=call, args=("push", lambda: pipe.push(1)), daemon=True)
    popper.start()
    pusher.start()
    popper.join(0.1)
    pusher.join(0.1)
    assert popper.is_alive() and pusher.is_alive()  # nothing to pop, no room to push
    closer = threading.Thread(target=pipe.close, kwargs={"drain": False}, daemon=True)
    closer.start()
    pusher.join(LIMIT)
    assert not pusher.is_alive() and isinstance(outcome["push"], PipelineClosedError)
    gate.open.set()  # frame 0's call returns: it is cancelled, and pop learns there is no more
    for t in (closer, popper):
        t.join(LIMIT)
        assert not t.is_alive()
    assert isinstance(outcome["pop"], PipelineClosedError)
    s = pipe.stats()
    assert (s.pushed, s.cancelled) == (1, 1) and accounted(s) == 1


def test_close_wakes_a_consumer_blocked_in_pop(finishes):
    gate = Gate()
    pipe = Pipeline(gate, maxsize=4)
    pipe.push(0)
    gate.wait_started()
    got = []

    def consume():
        got.extend(pipe)  # ends when the pipeline is closed and drained

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    closer = threading.Thread(target=pipe.close, daemon=True)  # drain
    closer.start()
    gate.open.set()
    closer.join(LIMIT)
    consumer.join(LIMIT)
    assert not closer.is_alive() and not consumer.is_alive()
    assert [r.frame_id for r in got] == [0]


def test_close_wakes_a_producer_blocked_on_a_full_pipeline(finishes):
    pipe = Pipeline(lambda k: k, maxsize=3)
    errors = []

    def producer():
        try:
            for k in range(100):
                pipe.push(k)  # blocks at frame 3: nobody reads
        except PipelineClosedError as e:
            errors.append(e)

    t = threading.Thread(target=producer, daemon=True)
    t.start()
    t.join(0.2)
    assert t.is_alive()
    finishes(pipe.close)  # the consumer stopped reading: close still finishes
    t.join(LIMIT)
    assert not t.is_alive() and len(errors) == 1
    s = pipe.stats()
    assert s.pushed == 3 and s.completed == 3 and accounted(s) == 3


@pytest.mark.parametrize("drain", [True, False])
def test_close_from_inside_a_stage_does_not_deadlock(finishes, drain):
    holder = {}

    def stage(k):
        if k == 5:
            holder["pipe"].close(drain=drain)
        return k

    pipe = Pipeline(stage, workers=2, maxsize=64)
    holder["pipe"] = pipe

    def run():
        pushed = 0
        try:
            for k in range(20):
                pipe.push(k)
                pushed += 1
                time.sleep(0.002)
        except PipelineClosedError:
            pass
        out = list(pipe)
        pipe.close()
        return pushed, out

    pushed, out = finishes(run)
    s = pipe.stats()
    assert s.pushed == pushed and accounted(s) == pushed and s.in_flight == 0
    ids = [r.frame_id for r in out]
    if drain:
        assert 5 in ids and s.cancelled == 0  # drained: frame 5 and the frames before it finished
    else:
        assert 5 not in ids and s.cancelled >= 1  # frame 5 was in the worker when it cancelled


def test_close_timeout_when_a_stage_never_returns():
    gate = Gate()
    pipe = Pipeline(gate)
    pipe.push(0)
    gate.wait_started()
    with pytest.raises(RKNNTimeoutError, match="still busy"):
        pipe.close(drain=False, timeout=0.1)
    gate.open.set()
    pipe.close(timeout=LIMIT)
    s = pipe.stats()
    assert s.cancelled == 1 and accounted(s) == 1


def test_context_manager_cancels_when_an_exception_leaves_the_block(finishes):
    gate = Gate()
    with pytest.raises(KeyError):
        with Pipeline(gate, maxsize=8) as pipe:
            for k in range(5):
                pipe.push(k)
            gate.wait_started()
            threading.Timer(0.1, gate.open.set).start()
            raise KeyError("the application failed")
    s = pipe.stats()
    assert s.cancelled >= 4 and accounted(s) == 5 and s.in_flight == 0


INTERRUPT_SCRIPT = r"""
import json, os, signal, sys, threading, time
from rknnlite.pipeline import Pipeline

def slow(k):
    time.sleep(0.01)
    return k

pipe = Pipeline(slow, lambda k: k, maxsize=4)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
interrupted = False
try:
    with pipe:
        k = 0
        while True:
            pipe.push(k)  # nobody pops: the main thread ends up blocked here
            k += 1
except KeyboardInterrupt:
    interrupted = True
s = pipe.stats()
print(json.dumps({"interrupted": interrupted, "pushed": s.pushed, "completed": s.completed, "failed": s.failed,
                  "cancelled": s.cancelled, "dropped": s.dropped, "in_flight": s.in_flight,
                  "threads": threading.active_count()}))
"""


def test_keyboard_interrupt_while_blocked_in_push_closes_cleanly(ctrl_c_probe):
    r = ctrl_c_probe(INTERRUPT_SCRIPT)
    assert r["interrupted"] and r["pushed"] >= 4 and r["in_flight"] == 0
    assert r["completed"] + r["failed"] + r["cancelled"] + r["dropped"] == r["pushed"]
    assert r["threads"] == 1  # every worker thread ended


# Ctrl-C while push waits to take the pipeline's lock back (another thread holds it): a Condition over a
# plain Lock re-acquires it with an interruptible acquire, so the KeyboardInterrupt left wait() without the
# lock and the with block released the other thread's hold (a worker then died on its own release and
# close() could wait forever)
INTERRUPTED_REACQUIRE_SCRIPT = CTRL_C_WHILE_RETAKING + r"""
import json, threading
from rknnlite.pipeline import Pipeline

pipe = Pipeline(lambda k: k, maxsize=1)
errors = []
helper = threading.Thread(target=interrupt_while_retaking, args=(pipe._space, errors))  # push waits for room
helper.start()
interrupted = False
try:
    with pipe:
        while True:
            pipe.push(0)
except KeyboardInterrupt:
    interrupted = True
helper.join()
s = pipe.stats()
print(json.dumps({"interrupted": interrupted, "errors": errors, "in_flight": s.in_flight,
                  "threads": threading.active_count()}))
"""


def test_ctrl_c_while_push_retakes_the_lock_leaves_the_lock_consistent(ctrl_c_probe):
    r = ctrl_c_probe(INTERRUPTED_REACQUIRE_SCRIPT)
    assert r == {"interrupted": True, "errors": [], "in_flight": 0, "threads": 1}


# -- stats ------------------------------------------------------------------------------------

def test_stats_report_throughput_latency_depths_drops_and_errors(finishes):
    gate = Gate(blocked={0})

    def fail_odd(k):
        if k % 2:
            raise ValueError(k)
        return k

    pipe = Pipeline(gate, fail_odd, workers=[1, 1], maxsize=16)
    pipe.push(0)
    gate.wait_started()
    for k in range(1, 10):
        pipe.push(k)
    s = pipe.stats()
    assert s.stages[0].queue_depth == 9 and s.stages[0].max_queue_depth == 9 and s.in_flight == 10
    gate.open.set()
    finishes(pipe.close)
    out = list(pipe)
    s = pipe.stats()
    assert (s.pushed, s.completed, s.failed, s.popped, s.in_flight) == (10, 5, 5, 10, 0)
    assert [st.errors for st in s.stages] == [0, 5] and [st.processed for st in s.stages] == [10, 10]
    assert [st.name for st in s.stages] == ["Gate", "fail_odd"] and [st.workers for st in s.stages] == [1, 1]
    assert s.stages[0].queue_depth == 0
    assert s.throughput_fps > 0 and s.recent_fps > 0 and s.elapsed_s > 0
    lat = s.stages[0].latency
    assert lat.count == 10 and 0 < lat.p50_ms <= lat.p95_ms <= lat.p99_ms
    assert s.latency.count == 10 and s.latency.p99_ms >= s.latency.p50_ms > 0
    assert s.to_dict()["stages"][1]["errors"] == 5 and len(out) == 10


# -- inference stages ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def conv_model(conv_relu_model):
    return conv_relu_model(channels=4, size=8)


def frames(n):
    rng = np.random.default_rng(4)
    return [rng.standard_normal((1, 8, 8, 4)).astype(np.float32) for _ in range(n)]  # NHWC, as conv_model's input


@pytest.mark.parametrize("kind", ["bytes", "path", "context", "queue"])
def test_inference_stage_from_a_model_a_context_or_a_queue(conv_model, tmp_path, kind, finishes):
    xs = frames(12)
    with rknnlite.Context(conv_model) as ref:
        expected = [ref.run([x])[0].sum() for x in xs]
        path = tmp_path / "m.rknn"
        path.write_bytes(conv_model)
        given = {"bytes": conv_model, "path": str(path), "context": ref,
                 "queue": AsyncInferQueue(ref, jobs=2) if kind == "queue" else None}[kind]

        def run():
            with Pipeline(lambda x: [x], given, lambda outs: float(outs[0].sum())) as pipe:
                t = produce(pipe, xs)
                out = list(pipe)
                t.join(LIMIT)
                return pipe, out

        pipe, out = finishes(run)
        np.testing.assert_allclose([r.value for r in out], expected, rtol=1e-6)
        s = pipe.stats()
        assert s.stages[1].name.startswith("infer(") and s.stages[1].workers == (2 if kind == "queue" else
                                                                                   len(os.sched_getaffinity(0)))
        assert not ref.closed  # a context passed in stays open
        owned = pipe._owned
        assert all(q.closed for q in owned) and (owned == [] if kind == "queue" else len(owned) == 1)
        if kind == "queue":
            assert not given.closed
            given.close()


def test_a_carry_keeps_its_meta_past_inference_and_gets_its_frame_id(conv_model, finishes):
    xs = frames(6)
    with rknnlite.Context(conv_model) as ref:
        expected = [ref.run([x])[0].sum() for x in xs]

        def run():
            with Pipeline(lambda x: Carry([x], meta=float(x.sum())), ref,
                          lambda c: (c.frame_id, c.meta, float(c.data[0].sum())), workers=[1, 2, 1]) as pipe:
                t = produce(pipe, xs)
                out = list(pipe)
                t.join(LIMIT)
                return out

        out = finishes(run)
    assert [r.value[0] for r in out] == [r.frame_id for r in out] == list(range(6))
    assert [r.value[1] for r in out] == [float(x.sum()) for x in xs]       # meta untouched
    np.testing.assert_allclose([r.value[2] for r in out], expected, rtol=1e-6)  # data replaced by the outputs


def test_inference_errors_become_error_results(conv_model, finishes):
    with Pipeline(conv_model, maxsize=4) as pipe:
        pipe.push([frames(1)[0]])
        pipe.push([np.zeros((2, 2), np.float32)])
        pipe.push([frames(1)[0]])
        out = [finishes(lambda: pipe.pop(timeout=LIMIT)) for _ in range(3)]
    assert [r.ok for r in out] == [True, False, True]
    assert isinstance(out[1].error, rknnlite.InputInvalidError) and out[1].stage == 0


def test_a_stage_infers_without_holding_the_gil(gil_probe):
    def run(model, ops, x):
        with rknnlite.Context(model, custom_ops=ops) as ctx, Pipeline(lambda v: [v], ctx) as pipe:
            pipe.push(x)
            pipe.pop(timeout=LIMIT)  # the caller waits here while the stage infers

    during_conv, during_hold = gil_probe.measure(run)
    assert during_conv > 0
    assert during_hold < during_conv


# -- arguments --------------------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, match", [
    ((), {}, "at least one stage"),
    ((42,), {}, "stage 0 must be a callable"),
    ((len,), {"drop": "newest"}, "drop must be"),
    ((len,), {"on_error": "ignore"}, "on_error must be"),
    ((len,), {"workers": 0}, r"ints in 1\.\.256"),
    ((len,), {"workers": 10**5}, r"ints in 1\.\.256 \(each is a thread\)"),  # started 100,000 threads
    ((len, len), {"workers": [1]}, "one per stage"),
    ((len,), {"maxsize": 0}, "maxsize"),
    ((len,), {"maxsize": 2.5}, "maxsize"),
    # an array raised numpy's "truth value ... is ambiguous" (an argument fuzz)
    ((len,), {"on_error": np.zeros(2)}, "on_error must be"),
    ((len,), {"drop": np.zeros(2)}, "drop must be"),
    ((len,), {"ordered": [1, 2]}, r"ordered must be True or False, not \[1, 2\]"),
])
def test_bad_arguments(args, kwargs, match):
    with pytest.raises(InvalidParamError, match=match):
        Pipeline(*args, **kwargs)


@pytest.mark.parametrize("timeout", ["1", [1], -1, float("nan"), True])
def test_a_timeout_is_none_or_seconds(timeout):
    """A string or a list as a timeout raised "unsupported operand type(s) for +: 'float' and
    'str'"; a negative one and NaN timed out at once. The pipeline stays usable."""
    with Pipeline(len) as p:
        with pytest.raises(InvalidParamError, match="timeout must be None or a number of seconds >= 0"):
            p.push("ab", timeout=timeout)
        assert p.push("ab", timeout=0) == 0
        with pytest.raises(InvalidParamError, match="timeout must be None or a number of seconds >= 0"):
            p.pop(timeout=timeout)
        assert p.pop(timeout=float("inf")).value == 2  # infinite: as None (threading's waits refuse it)
        with pytest.raises(InvalidParamError, match="timeout must be None"):
            p.close(timeout=timeout)
        with pytest.raises(InvalidParamError, match="drain must be True or False, not 'no'"):
            p.close(drain="no")
        p.close(timeout=1)
