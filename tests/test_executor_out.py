"""Outputs into caller memory: ``ExecutionState.run(feeds, out)`` and
``SoftwareBackend.run(inputs, out=...)`` write each output into the given array."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite import InvalidParamError
from rknnlite.backends.software import SoftwareBackend
from rknnlite.backends.software.executor import Executor
from rknnlite.model.graph import Graph, Node
from rknnlite.model.metadata import build_metadata
from rknnlite.model.portable import read_portable, write_portable
from rknnlite.model.spec import TensorSpec


def two_output_graph() -> Graph:
    return Graph([Node("Add", "add", ["a", "b"], ["s"]), Node("Relu", "relu", ["s"], ["r"]),
                  Node("Greater", "gt", ["a", "b"], ["g"])], ["a", "b"], ["r", "g"])


def inputs(seed=0, shape=(2, 3)):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]


@pytest.mark.parametrize("warm_runs", [0, 1, 2])  # unplanned, planned step loop, compiled
def test_outputs_are_written_into_the_given_arrays(warm_runs):
    ex = Executor(two_output_graph(), "float16")
    state = ex.new_state()
    for _ in range(warm_runs):
        state.run(inputs(9))
    feeds = inputs(1)
    expected = ex.run(feeds)
    out = [np.full((2, 3), -7.0, np.float32), np.zeros((2, 3), bool)]
    results = state.run(feeds, out)
    assert results[0] is out[0] and results[1] is out[1]
    np.testing.assert_array_equal(out[0], expected[0])
    np.testing.assert_array_equal(out[1], expected[1])


def test_profiled_run_writes_into_out_too():
    state = Executor(two_output_graph(), "float32").new_state()
    state.profiling = True
    feeds = inputs(2)
    out = [np.empty((2, 3), np.float32), None]
    results = state.run(feeds, out)
    assert results[0] is out[0] and results[1].dtype == bool
    np.testing.assert_array_equal(out[0], np.maximum(feeds[0] + feeds[1], 0))
    assert [s.op_type for s in state.last_profile][-2:] == ["OutputOperator", "OutputOperator"]


def test_none_entries_get_new_arrays_and_later_runs_do_not_touch_earlier_outputs():
    state = Executor(two_output_graph(), "float32").new_state()
    first = state.run(inputs(3), [None, None])
    kept = [a.copy() for a in first]
    mine = np.empty((2, 3), np.float32)
    second = state.run(inputs(4), [mine, None])
    assert second[0] is mine and second[1] is not first[1]
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


def test_float16_destination_gets_the_nearest_float16():
    graph = Graph([Node("Mul", "m", ["a", "b"], ["y"])], ["a", "b"], ["y"])
    state = Executor(graph, "float32").new_state()
    a, b = inputs(5)
    out = [np.empty((2, 3), np.float16)]
    for _ in range(3):
        state.run([a, b], out)
    np.testing.assert_array_equal(out[0], (a * b).astype(np.float16))


def test_out_may_be_an_input_array():
    graph = Graph([Node("Add", "add", ["a", "b"], ["y"])], ["a", "b"], ["y"])
    state = Executor(graph, "float32").new_state()
    for _ in range(3):
        a, b = inputs(6)
        want = a + b
        state.run([a, b], [a])
        np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("bad, message", [
    ("not a list", r"out must be a list with one array \(or None\) per output \(2: r, g\); got a str"),
    ([None], r"got 1 entries"),
    ([np.empty((3, 2), np.float32), None],
     r"out\[0\] \(output 'r'\) has shape \[3, 2\]; the output has shape \[2, 3\]"),
    ([np.empty((2, 3), np.int32), None], r"out\[0\] \(output 'r'\) has dtype int32; the output is float32"),
    ([None, [[0] * 3] * 2], r"out\[1\] \(output 'g'\) must be a numpy array or None, not list"),
    ([np.empty((6,), np.float32), None], r"shape \[6\]"),
])
@pytest.mark.parametrize("warm_runs", [0, 2])
def test_bad_out_is_rejected_before_anything_is_written(bad, message, warm_runs):
    state = Executor(two_output_graph(), "float32").new_state()
    for _ in range(warm_runs):
        state.run(inputs(7))
    sentinel = np.full((2, 3), 5.0, np.float32)
    if isinstance(bad, list) and bad[0] is None and len(bad) == 2:
        bad = [sentinel, bad[1]]  # a good first entry must stay untouched too
    with pytest.raises(InvalidParamError, match=message):
        state.run(inputs(8), bad)
    assert (sentinel == 5.0).all()
    np.testing.assert_array_equal(state.run(inputs(8))[0], np.maximum(sum(inputs(8)), 0))


def test_read_only_out_is_rejected():
    state = Executor(two_output_graph(), "float32").new_state()
    ro = np.empty((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(InvalidParamError, match=r"out\[0\] \(output 'r'\) is read-only"):
        state.run(inputs(0), [ro, None])


def backend_for(batch: int) -> SoftwareBackend:
    graph = Graph([Node("Mul", "m", ["x", "k"], ["y"]), Node("Neg", "n", ["x"], ["z"])], ["x"], ["y", "z"],
                  {"k": np.array([0.5, 2.0, -1.0, 3.0], np.float32)})
    meta = build_metadata([TensorSpec("x", (batch, 4), "float32")],
                          [TensorSpec("y", (batch, 4), "float32"), TensorSpec("z", (batch, 4), "float32")],
                          batch_size=batch, float_dtype="float16")
    return SoftwareBackend(read_portable(memoryview(write_portable(meta, graph))))


@pytest.mark.parametrize("batch, core_num", [(1, 1), (3, 1), (3, 3)])
def test_software_backend_writes_into_out(batch, core_num):
    backend = backend_for(batch)
    try:
        backend.set_batch_core_num(core_num)
        x = np.random.default_rng(10).standard_normal((batch, 4)).astype(np.float32)
        expected = backend.run([x])
        out = [np.empty((batch, 4), np.float32), np.empty((batch, 4), np.float32)]
        for _ in range(3):
            results = backend.run([x], out=out)
            assert results[0] is out[0] and results[1] is out[1]
            np.testing.assert_array_equal(out[0], expected[0])
            np.testing.assert_array_equal(out[1], expected[1])
        partial = backend.run([x], out=[None, out[1]])
        assert partial[1] is out[1] and partial[0] is not out[0]
        np.testing.assert_array_equal(partial[0], expected[0])
    finally:
        backend.close()


@pytest.mark.parametrize("batch", [1, 3])
def test_software_backend_rejects_a_bad_out_and_stays_usable(batch):
    backend = backend_for(batch)
    try:
        x = np.ones((batch, 4), np.float32)
        keep = np.full((batch, 4), 9.0, np.float32)
        with pytest.raises(InvalidParamError, match=rf"out\[1\] \(output 'z'\) has shape \[{batch + 1}, 4\]"):
            backend.run([x], out=[keep, np.empty((batch + 1, 4), np.float32)])
        assert (keep == 9.0).all()
        np.testing.assert_array_equal(backend.run([x])[1], -x)
    finally:
        backend.close()
