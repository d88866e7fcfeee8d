"""AsyncInferQueue (issue 8 point 1, and point 4 for the queue): a pool of dup()ed contexts
pinned to cores round-robin, backpressure, callbacks, futures, errors re-raised at
wait_all, close from any thread, and the GIL released while inference runs."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

import rknnlite
from rknnlite.constants import CoreMask
from rknnlite.errors import ContextInvalidError, InputInvalidError, InvalidParamError
from rknnlite.model.graph import Node
from rknnlite.model.spec import TensorSpec
from rknnlite.pipeline import AsyncInferQueue

from conftest import CTRL_C_WHILE_RETAKING, THREAD_LIMIT as LIMIT  # noqa: E402


class Gate:
    """Custom op ``cstGate``: identity that waits until the gate opens, counting the runs
    inside at once (and the most so far)."""

    op_type = "cstGate"

    def __init__(self):
        self.open = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.entered = threading.Semaphore(0)

    def compute(self, node, inputs):
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        self.entered.release()
        try:
            assert self.open.wait(LIMIT), "gate never opened"
        finally:
            with self.lock:
                self.inside -= 1
        return [inputs[0].copy()]


@pytest.fixture(scope="module")
def gate_model(portable_model):
    def build(platform="rk3588"):
        return portable_model([Node("cstGate", "gate", ["x"], ["g"]), Node("Relu", "relu", ["g"], ["y"])],
                              [TensorSpec("x", (1, 8), "float32")], [TensorSpec("y", (1, 8), "float32")],
                              float_dtype="float32", target_platforms=(platform,))
    return build


@pytest.fixture(scope="module")
def conv_model(conv_relu_model):
    return conv_relu_model(channels=4, size=8)


def frame(k):
    """Frame ``k`` for conv_model: NHWC (1, 8, 8, 4), as its 4-channel input's attribute states."""
    return np.full((1, 8, 8, 4), k - 3.0, np.float32) + np.arange(64, dtype=np.float32).reshape(1, 8, 8, 1) / 64


# -- the pool ---------------------------------------------------------------------------------

def test_default_jobs_on_the_software_backend_is_the_usable_cpus(conv_model):
    import os

    with AsyncInferQueue(conv_model) as q:
        assert len(q) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("platform, jobs, cores", [
    ("rk3588", 4, [(0,), (1,), (2,), (0,)]),
    ("rk3576", 3, [(0,), (1,), (0,)]),
])
def test_contexts_are_dups_pinned_to_cores_round_robin(conv_relu_model, platform, jobs, cores):
    model = conv_relu_model(platform=platform, channels=4, size=8)
    with rknnlite.Context(model) as base, AsyncInferQueue(base, jobs=jobs) as q:
        assert len(q) == jobs
        contexts = q.contexts
        assert len({id(c) for c in contexts}) == jobs and base not in contexts
        assert [c._backend._cores for c in contexts] == cores
        assert all(c._backend.threads == 1 for c in contexts)  # one emulated core: one thread
        # weights are shared with the template (dup), not copied
        w = base._loaded.model.graph.constants["w"]
        assert all(c._loaded.model.graph.constants["w"] is w for c in contexts)
        assert base._backend._cores == (0,) and base._backend.threads == 1  # template untouched (AUTO)


def test_explicit_core_masks_round_robin(conv_relu_model):
    model = conv_relu_model(platform="rk3588", channels=4, size=8)
    with AsyncInferQueue(model, jobs=3, core_masks=[CoreMask.CORE_0_1, CoreMask.CORE_2]) as q:
        assert [c._backend._cores for c in q.contexts] == [(0, 1), (2,), (0, 1)]


def test_single_core_platform_sets_no_mask_and_refuses_an_explicit_one(conv_relu_model):
    model = conv_relu_model(platform="rk3566", channels=4, size=8)
    with AsyncInferQueue(model, jobs=2) as q:
        assert [c._backend._cores for c in q.contexts] == [(0,), (0,)]  # AUTO: set_core_mask is never called
    with rknnlite.Context(model) as base:
        with pytest.raises(InvalidParamError, match="single NPU core"):
            AsyncInferQueue(base, jobs=2, core_masks=[CoreMask.CORE_0])
        assert not base.closed  # the template stays usable; the dups made were closed
        base.run([frame(0)])


@pytest.mark.parametrize("jobs", [-1, 1.5, True, "2", 257, 10**6])  # 10**6: a million twins and threads before
def test_bad_jobs(conv_model, jobs):
    with pytest.raises(InvalidParamError, match=r"jobs must be an int in 0\.\.256"):
        AsyncInferQueue(conv_model, jobs=jobs)


def test_empty_core_masks_rejected(conv_model):
    with pytest.raises(InvalidParamError, match="core_masks"):
        AsyncInferQueue(conv_model, jobs=1, core_masks=[])


@pytest.mark.parametrize("masks", [float("nan"), print, ["CORE_0"], [1.0]])
def test_core_masks_are_a_mask_or_a_list_of_them(conv_model, masks):
    """A number or a function raised "'float' object is not iterable" (an argument fuzz)."""
    with pytest.raises(InvalidParamError, match="core_masks must be a CoreMask or a list of them"):
        AsyncInferQueue(conv_model, jobs=1, core_masks=masks)


def test_wait_all_timeout_is_none_or_seconds(conv_model):
    with AsyncInferQueue(conv_model, jobs=1) as q:
        with pytest.raises(InvalidParamError, match="timeout must be None or a number of seconds >= 0, not 'x'"):
            q.wait_all(timeout="x")
        q.wait_all(timeout=float("inf"))


def test_closed_template_rejected(conv_model):
    ctx = rknnlite.Context(conv_model)
    ctx.close()
    with pytest.raises(ContextInvalidError):
        AsyncInferQueue(ctx, jobs=1)


def test_close_keeps_a_context_passed_in_and_closes_its_own(conv_model):
    with rknnlite.Context(conv_model) as base:
        q = AsyncInferQueue(base, jobs=2)
        made = q.contexts
        q.close()
        q.close()  # idempotent
        assert all(c.closed for c in made) and not base.closed
        q2 = AsyncInferQueue(conv_model, jobs=2)
        own = q2.contexts
        q2.close()
        assert all(c.closed for c in own)


# -- running ----------------------------------------------------------------------------------

def test_callbacks_get_every_result_and_userdata(conv_model):
    with rknnlite.Context(conv_model) as ref:
        expected = {k: ref.run([frame(k)])[0] for k in range(20)}
    got = {}
    lock = threading.Lock()

    def callback(result, userdata):
        with lock:
            got[userdata] = result[0]

    with AsyncInferQueue(conv_model, jobs=2) as q:
        q.set_callback(callback)
        for k in range(20):
            q.start_async([frame(k)], userdata=k)
        q.wait_all()
    assert sorted(got) == list(range(20))
    for k in range(20):
        np.testing.assert_array_equal(got[k], expected[k])


def test_submit_returns_futures_and_infer_runs_inline(conv_model):
    with rknnlite.Context(conv_model) as ref:
        expected = [ref.run([frame(k)])[0] for k in range(6)]
    with AsyncInferQueue(conv_model, jobs=2) as q:
        futures = [q.submit([frame(k)]) for k in range(6)]
        assert all(isinstance(f, Future) for f in futures)
        for f, e in zip(futures, expected):
            np.testing.assert_array_equal(f.result(LIMIT)[0], e)
        np.testing.assert_array_equal(q.infer([frame(2)])[0], expected[2])
        bad = q.submit([np.zeros((1, 2), np.float32)])
        assert isinstance(bad.exception(LIMIT), InputInvalidError)
        q.wait_all()  # a future's error belongs to the future, not to wait_all
        with pytest.raises(InputInvalidError):
            q.infer([np.zeros((1, 2), np.float32)])
        np.testing.assert_array_equal(q.submit([frame(1)]).result(LIMIT)[0], expected[1])


def test_start_async_needs_a_callback(conv_model):
    with AsyncInferQueue(conv_model, jobs=1) as q:
        with pytest.raises(InvalidParamError, match="set_callback"):
            q.start_async([frame(0)])
        with pytest.raises(InvalidParamError, match="callable"):
            q.set_callback(42)


def test_callback_errors_are_reraised_at_wait_all_and_the_queue_stays_usable(conv_model):
    seen = []

    def callback(result, userdata):
        seen.append(userdata)
        if userdata == 3:
            raise KeyError("callback failed for 3")

    with AsyncInferQueue(conv_model, jobs=2) as q:
        q.set_callback(callback)
        for k in range(8):
            q.start_async([frame(k)], k)
        with pytest.raises(KeyError, match="callback failed for 3"):
            q.wait_all()
        assert sorted(seen) == list(range(8))  # the other frames went on
        q.wait_all()  # errors are forgotten once raised
        q.start_async([frame(9)], 9)
        q.wait_all()
        assert 9 in seen


def test_inference_errors_of_start_async_are_reraised_at_wait_all(conv_model):
    seen = []
    with AsyncInferQueue(conv_model, jobs=2) as q:
        q.set_callback(lambda result, userdata: seen.append(userdata))
        q.start_async([frame(0)], 0)
        q.start_async([np.zeros((3,), np.float32)], 1)
        q.start_async([frame(2)], 2)
        with pytest.raises(InputInvalidError):
            q.wait_all()
        assert sorted(seen) == [0, 2]


def test_contexts_run_at_the_same_time(gate_model):
    gate = Gate()
    with rknnlite.Context(gate_model(), custom_ops=[gate]) as base, AsyncInferQueue(base, jobs=3) as q:
        futures = [q.submit([np.full((1, 8), k, np.float32)]) for k in range(3)]
        for _ in range(3):
            assert gate.entered.acquire(timeout=LIMIT)
        assert gate.inside == 3  # three runs inside the model at once: one per context
        gate.open.set()
        assert [f.result(LIMIT)[0][0, 0] for f in futures] == [0.0, 1.0, 2.0]


def test_start_async_blocks_while_every_context_is_busy(gate_model, finishes):
    gate = Gate()
    done = []
    with rknnlite.Context(gate_model(), custom_ops=[gate]) as base, AsyncInferQueue(base, jobs=2) as q:
        q.set_callback(lambda result, userdata: done.append(userdata))
        assert q.is_ready()
        q.start_async([np.ones((1, 8), np.float32)], 0)
        q.start_async([np.ones((1, 8), np.float32)], 1)
        assert gate.entered.acquire(timeout=LIMIT) and gate.entered.acquire(timeout=LIMIT)
        assert not q.is_ready()
        third = threading.Thread(target=q.start_async, args=([np.ones((1, 8), np.float32)], 2), daemon=True)
        third.start()
        third.join(0.2)
        assert third.is_alive() and gate.most_inside == 2  # blocked: no third run started
        gate.open.set()
        third.join(LIMIT)
        assert not third.is_alive()
        finishes(q.wait_all)
        assert sorted(done) == [0, 1, 2] and gate.most_inside == 2


def test_close_from_another_thread_wakes_a_blocked_start_async(gate_model):
    gate = Gate()
    errors = []
    with rknnlite.Context(gate_model(), custom_ops=[gate]) as base:
        q = AsyncInferQueue(base, jobs=1)
        q.set_callback(lambda result, userdata: None)
        q.start_async([np.ones((1, 8), np.float32)])
        assert gate.entered.acquire(timeout=LIMIT)

        def blocked():
            try:
                q.start_async([np.ones((1, 8), np.float32)])
            except ContextInvalidError as e:
                errors.append(e)

        t = threading.Thread(target=blocked, daemon=True)
        t.start()
        t.join(0.2)
        assert t.is_alive()
        closer = threading.Thread(target=q.close, daemon=True)
        closer.start()
        t.join(LIMIT)
        assert not t.is_alive() and len(errors) == 1  # woken with ContextInvalidError
        gate.open.set()  # close waits for the run already started
        closer.join(LIMIT)
        assert not closer.is_alive() and q.closed
        with pytest.raises(ContextInvalidError):
            q.submit([np.ones((1, 8), np.float32)])


def test_close_from_a_callback_does_not_deadlock(conv_model, finishes):
    q = AsyncInferQueue(conv_model, jobs=2)
    made = q.contexts
    q.set_callback(lambda result, userdata: q.close())

    def run():
        q.start_async([frame(0)])
        deadline = time.monotonic() + LIMIT
        while not all(c.closed for c in made) and time.monotonic() < deadline:
            time.sleep(0.01)

    finishes(run)
    assert q.closed and all(c.closed for c in made)


def test_wait_all_timeout(gate_model):
    from rknnlite.errors import RKNNTimeoutError

    gate = Gate()
    with rknnlite.Context(gate_model(), custom_ops=[gate]) as base, AsyncInferQueue(base, jobs=1) as q:
        f = q.submit([np.ones((1, 8), np.float32)])
        with pytest.raises(RKNNTimeoutError):
            q.wait_all(timeout=0.05)
        gate.open.set()
        f.result(LIMIT)
        q.wait_all()


# -- Ctrl-C --------------------------------------------------------------------------------------

# Ctrl-C while wait_all waits to take the queue's lock back (another thread holds it): over a plain Lock
# the KeyboardInterrupt left wait() without the lock, and the with block released the other thread's hold
INTERRUPTED_REACQUIRE_SCRIPT = CTRL_C_WHILE_RETAKING + r"""
import json, sys, threading
import numpy as np
from rknnlite.pipeline import AsyncInferQueue

q = AsyncInferQueue(open(sys.argv[1], "rb").read(), jobs=1)
release = threading.Event()
q.set_callback(lambda result, userdata: release.wait())  # the inference stays pending until released
errors = []
# wait_all waits on the queue's condition; the inference is released once Ctrl-C has come
helper = threading.Thread(target=lambda: (interrupt_while_retaking(q._cond, errors), release.set()))
helper.start()
q.start_async([np.zeros((1, 8, 8, 4), np.float32)])
interrupted = False
try:
    q.wait_all()
except KeyboardInterrupt:
    interrupted = True
helper.join()
q.wait_all(timeout=30)  # the queue still works
q.close()
print(json.dumps({"interrupted": interrupted, "errors": errors}))
"""


def test_ctrl_c_while_wait_all_retakes_the_lock_leaves_the_lock_consistent(ctrl_c_probe, conv_model, tmp_path):
    model = tmp_path / "conv.rknn"
    model.write_bytes(conv_model)
    assert ctrl_c_probe(INTERRUPTED_REACQUIRE_SCRIPT, model) == {"interrupted": True, "errors": []}


# -- the GIL ----------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["submit", "start_async"])
def test_another_python_thread_runs_while_inference_runs(gil_probe, how):
    def run(model, ops, x):
        with rknnlite.Context(model, custom_ops=ops) as ctx, AsyncInferQueue(ctx, jobs=1) as q:
            if how == "submit":
                q.submit([x]).result(LIMIT)  # the caller waits here
            else:
                q.set_callback(lambda result, userdata: None)
                q.start_async([x])
                q.wait_all(timeout=LIMIT)

    during_conv, during_hold = gil_probe.measure(run)
    # the ticker advanced while the Conv kernel ran on the worker and the caller waited;
    # the control (a GIL-holding op in the same place) shows the measure can tell
    assert during_conv > 0
    assert during_hold < during_conv
