"""Thread safety: one context serialises concurrent runs without mixing results; separate
contexts (and dups) run at the same time."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import rknnlite
from rknnlite.model.graph import Node
from rknnlite.model.spec import TensorSpec


class Rendezvous:
    """Custom op ``cstMeet``: identity, but each run waits at a barrier for a second run and
    records how many runs are inside at once."""

    op_type = "cstMeet"

    def __init__(self, parties: int = 2, timeout: float = 30.0):
        self.barrier = threading.Barrier(parties, timeout=timeout)
        self.lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0

    def compute(self, node, inputs):
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            self.barrier.wait()
        finally:
            with self.lock:
                self.inside -= 1
        return [inputs[0].copy()]


class Counter:
    """Custom op ``cstMeet`` that only records the most runs inside it at once."""

    op_type = "cstMeet"

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0

    def compute(self, node, inputs):
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        time.sleep(0.001)  # gives another thread the chance to enter if nothing stops it
        with self.lock:
            self.inside -= 1
        return [inputs[0].copy()]


@pytest.fixture(scope="module")
def meet_model(portable_model):
    return portable_model([Node("cstMeet", "meet", ["x"], ["m"]), Node("Relu", "relu", ["m"], ["y"])],
                          [TensorSpec("x", (1, 64), "float32")], [TensorSpec("y", (1, 64), "float32")],
                          float_dtype="float32")


def run_threads(n, body):
    errors = []

    def wrapped(k):
        try:
            body(k)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_concurrent_runs_on_one_context_are_serialised_and_never_mixed(context_models):
    with rknnlite.Context(context_models["conv_fp16"]) as ctx:
        inputs = [np.random.default_rng(k).integers(0, 256, (1, 8, 8, 3)).astype(np.uint8) for k in range(6)]
        expected = [ctx.run([x])[0] for x in inputs]

        def body(k):
            for i in range(40):
                j = (k + i) % len(inputs)
                np.testing.assert_array_equal(ctx.run([inputs[j]])[0], expected[j])

        run_threads(6, body)


def test_one_context_never_has_two_runs_inside(meet_model):
    op = Counter()
    with rknnlite.Context(meet_model, custom_ops=[op]) as ctx:
        xs = [np.full((1, 64), k, np.float32) for k in range(4)]

        def body(k):
            for _ in range(10):
                np.testing.assert_array_equal(ctx.run([xs[k]])[0], xs[k])

        run_threads(4, body)
    assert op.most_inside == 1


@pytest.mark.parametrize("second", ["separate", "dup"])
def test_separate_contexts_run_at_the_same_time(meet_model, second):
    # Each run waits inside the model for a run of the other context: this only finishes if
    # both contexts are inside run() at once (a shared lock would break the barrier).
    op = Rendezvous(parties=2)
    a = rknnlite.Context(meet_model, custom_ops=[op])
    b = rknnlite.Context(meet_model, custom_ops=[op]) if second == "separate" else a.dup()
    results = {}

    def body(k):
        ctx = (a, b)[k]
        results[k] = ctx.run([np.full((1, 64), k + 1, np.float32)])[0]

    try:
        run_threads(2, body)
    finally:
        a.close()
        b.close()
    assert op.most_inside == 2
    assert results[0][0, 0] == 1 and results[1][0, 0] == 2
