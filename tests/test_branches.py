"""Independent branches run side by side on a run's threads (``backends/software/branches``):
which steps form a region, the memory plan that keeps branches apart, the probe that decides
per region, and forked runs giving exactly the single-threaded results."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from rknnlite.backends.software.branches import Fork, Probe, conflicts, deal, find_regions
from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.ops import KERNELS, KernelSpec
from rknnlite.errors import InputInvalidError, InvalidParamError
from rknnlite.model.graph import Graph, Node

_RNG = np.random.default_rng(7)


def _w(*shape) -> np.ndarray:
    return (_RNG.standard_normal(shape) * 0.3).astype(np.float32)


def _block(nodes: list, consts: dict, x: str, tag: str, cin: int) -> str:
    """An Inception-like block on ``x``: four branches (1x1; 1x1 then 3x3; 1x1 then 3x3
    twice; 3x3 max pool then 1x1) joined by a Concat; returns the Concat's output."""
    def conv(name, src, cout, c, k):
        consts[f"{name}_w"] = _w(cout, c, k, k)
        consts[f"{name}_b"] = _w(cout)
        nodes.append(Node("Conv", name, [src, f"{name}_w", f"{name}_b"], [f"{name}_y"],
                          {"kernel_shape": [k, k], "pads": [k // 2] * 4}))
        nodes.append(Node("Relu", f"{name}_relu", [f"{name}_y"], [f"{name}_r"]))
        return f"{name}_r"

    b1 = conv(f"{tag}a", x, 6, cin, 1)
    b2 = conv(f"{tag}b2", conv(f"{tag}b1", x, 4, cin, 1), 6, 4, 3)
    b3 = conv(f"{tag}c3", conv(f"{tag}c2", conv(f"{tag}c1", x, 4, cin, 1), 5, 4, 3), 5, 5, 3)
    nodes.append(Node("MaxPool", f"{tag}pool", [x], [f"{tag}p"], {"kernel_shape": [3, 3], "pads": [1] * 4}))
    b4 = conv(f"{tag}d", f"{tag}p", 3, cin, 1)
    nodes.append(Node("Concat", f"{tag}cat", [b1, b2, b3, b4], [f"{tag}cat"], {"axis": 1}))
    return f"{tag}cat"


def _inception(overflow: bool = False) -> Graph:
    """Two blocks between a stem and a head; ``overflow`` adds an Exp of large values in a
    branch of the first block (floating-point overflow inside a branch)."""
    nodes, consts = [], {"stem_w": _w(8, 3, 3, 3)}
    nodes.append(Node("Conv", "stem", ["x", "stem_w"], ["s"], {"kernel_shape": [3, 3], "pads": [1] * 4}))
    y = _block(nodes, consts, "s", "A", 8)
    if overflow:
        first = next(i for i, n in enumerate(nodes) if n.name == "Aa_relu")
        nodes[first] = Node("Relu", "Aa_relu", ["Aa_y"], ["Aa_big"])
        consts["k"] = np.float32(400.0)
        nodes.insert(first + 1, Node("Mul", "Aa_scale", ["Aa_big", "k"], ["Aa_k"]))
        nodes.insert(first + 2, Node("Exp", "Aa_exp", ["Aa_k"], ["Aa_r"]))
    y = _block(nodes, consts, y, "B", 20)
    consts["head_w"] = _w(4, 20, 1, 1)
    nodes.append(Node("Conv", "head", [y, "head_w"], ["y"], {"kernel_shape": [1, 1]}))
    return Graph(nodes, ["x"], ["y"], consts)


def _feeds(seed: int):
    return [np.random.default_rng(seed).standard_normal((1, 3, 12, 12)).astype(np.float32)]


def _steps(graph: Graph):
    ex = Executor(graph, "float32")
    return ex.steps, ex.input_slots


def _compiled(graph: Graph) -> Graph:
    """The graph an Executor runs: ``graph`` with its sibling 1x1 convs merged (sibling_convs),
    which step indices refer to."""
    return Executor(graph, "float32").graph


def _names(graph: Graph, steps) -> set:
    return {graph.nodes[i].name for i in steps}


def _program(state):
    """The program the state's first run compiled."""
    (plan,) = state._plans.values()
    assert plan.program is not None
    return plan.program


def _probed(ex: Executor):
    """A two-thread state run until its probe is done: (state, program)."""
    state = ex.new_state(threads=2)
    for _ in range(1 + Probe.SINGLE_RUNS + 2 * Probe.TRIALS):
        state.run(_feeds(0))
    prog = state._last
    assert prog is not None and prog.forks is not None
    return state, prog


# ------------------------------------------------------------------------------- regions


def test_each_block_is_a_region_of_its_branches_and_the_join_runs_after():
    graph = _compiled(_inception())
    regions = find_regions(*_steps(graph))
    assert len(regions) == 2
    for region, tag in zip(regions, "AB"):
        assert [_names(graph, b) for b in region.branches] == [
            {f"{tag}a", f"{tag}a_relu"},
            {f"{tag}b1", f"{tag}b1_relu", f"{tag}b2", f"{tag}b2_relu"},
            {f"{tag}c1", f"{tag}c1_relu", f"{tag}c2", f"{tag}c2_relu", f"{tag}c3", f"{tag}c3_relu"},
            {f"{tag}pool", f"{tag}d", f"{tag}d_relu"},
        ]
        assert graph.nodes[region.last + 1].name == f"{tag}cat"
        # the block's three 1x1 convs of its input run as one conv before it (sibling_convs); the
        # branches open with their views of it, under the convs' names
        assert graph.nodes[region.first - 1].name == f"{tag}a__siblings"


def test_a_chain_and_a_residual_block_have_no_region():
    consts = {"w": _w(4, 4, 1, 1)}
    chain = Graph([Node("Conv", "c1", ["x", "w"], ["a"], {"kernel_shape": [1, 1]}),
                   Node("Relu", "r", ["a"], ["b"]),
                   Node("Conv", "c2", ["b", "w"], ["c"], {"kernel_shape": [1, 1]}),
                   Node("Add", "add", ["c", "b"], ["y"])], ["x"], ["y"], consts)
    assert find_regions(*_steps(chain)) == []


def test_branches_reading_only_graph_inputs_form_a_region():
    consts = {"w": _w(4, 4, 1, 1)}
    graph = Graph([Node("Conv", "c1", ["x", "w"], ["a"], {"kernel_shape": [1, 1]}),
                   Node("Relu", "r1", ["a"], ["a1"]),
                   Node("Sigmoid", "s2", ["x"], ["b"]),
                   Node("Add", "add", ["a1", "b"], ["y"])], ["x"], ["y"], consts)
    (region,) = find_regions(*_steps(graph))
    assert [_names(graph, b) for b in region.branches] == [{"c1", "r1"}, {"s2"}]


def test_deal_gives_the_biggest_branch_first_to_the_least_loaded_thread():
    bins, longest = deal([5.0, 1.0, 4.0, 3.0], 2)
    assert bins == [[0, 1], [2, 3]] and longest == 7.0
    assert deal([1.0, 2.0], 4) == ([[1], [0]], 2.0)


def test_conflicts_sees_a_write_into_bytes_another_stream_touches():
    buf = np.zeros(64, np.float32)
    a, b, c = buf[:16], buf[16:32], buf[8:24]
    assert not conflicts([[([buf[48:]], [a])], [([buf[40:48]], [b])]])  # disjoint writes, reads elsewhere
    assert conflicts([[([], [a])], [([c], [])]])                   # one writes what the other reads
    assert conflicts([[([], [a])], [([], [c])]])                   # both write the same bytes
    assert not conflicts([[([buf], [])], [([buf], [])]])           # reading together is fine


# --------------------------------------------------------------------------- memory plan


def test_a_two_thread_plan_keeps_every_branch_in_buffers_of_its_own():
    ex = Executor(_inception(), "float32")
    two = ex.new_state(threads=2)
    two.run(_feeds(0))
    assert len(_program(two).regions) == 2
    one = ex.new_state(threads=1)
    one.run(_feeds(0))
    assert _program(one).regions == []  # one thread: no regions kept, buffers reused across branches
    from rknnlite.backends.software.executor import _call_regions
    assert len(_call_regions(ex, _program(one).owners, _program(one).env, {})) < 2  # ... and they would collide
    assert two.planned_bytes > one.planned_bytes


def test_set_threads_forgets_the_plans_made_for_the_old_count():
    ex = Executor(_inception(), "float32")
    state = ex.new_state(threads=1)
    state.run(_feeds(0))
    state.set_threads(2)
    assert state._plans == {} and state._last is None
    state.run(_feeds(0))
    assert len(_program(state).regions) == 2


def test_a_region_with_a_step_run_by_another_kernel_is_not_forked():
    graph = _inception()
    ex = Executor(graph, "float32")
    relu = next(i for i, n in enumerate(ex.graph.nodes) if n.name == "Ab1_relu")
    state = ex.new_state(threads=2)
    state.use_kernels({relu: KERNELS["Relu"]})
    state.run(_feeds(0))
    (start, _, _), = _program(state).regions
    assert _program(state).owners[start].node.name.startswith("B")


@pytest.mark.parametrize("value", ["0", "off", " OFF "])
def test_rknnlite_branches_off_keeps_a_two_thread_plan_as_one_thread_s(monkeypatch, value):
    ex = Executor(_inception(), "float32")
    monkeypatch.setenv("RKNNLITE_BRANCHES", value)
    off = ex.new_state(threads=2)
    off.run(_feeds(0))
    assert _program(off).regions == [] and _program(off).probe is None
    monkeypatch.setenv("RKNNLITE_BRANCHES", "on")
    on = ex.new_state(threads=2)
    on.run(_feeds(0))
    assert len(_program(on).regions) == 2 and off.planned_bytes < on.planned_bytes


def test_a_bad_rknnlite_branches_value_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("RKNNLITE_BRANCHES", "maybe")
    with pytest.raises(InvalidParamError, match="RKNNLITE_BRANCHES='maybe'.*1, on, 0 or off"):
        Executor(_inception(), "float32").new_state(threads=2)


# ------------------------------------------------------------------------------ forked runs


@pytest.mark.parametrize("float_dtype", ["float32", "float16"])
def test_forked_runs_give_the_single_thread_results(float_dtype):
    ex = Executor(_inception(), float_dtype)
    state, prog = _probed(ex)
    prog.forks = list(prog.probe.candidates)  # every region forked, whatever the timings said
    assert len(prog.forks) == 2 and all(len(f.streams) == 2 for f in prog.forks)
    single = ex.new_state(threads=1)
    for seed in (1, 2, 3):
        expected = single.run(_feeds(seed))
        for got, want in zip(state.run(_feeds(seed)), expected):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(ex.run(_feeds(seed))[0], expected[0])  # the unplanned step loop too


def test_probing_runs_give_the_single_thread_results():
    ex = Executor(_inception(), "float32")
    state = ex.new_state(threads=2)
    single = ex.new_state(threads=1)
    for run in range(2 + Probe.SINGLE_RUNS + 2 * Probe.TRIALS):
        np.testing.assert_array_equal(state.run(_feeds(run))[0], single.run(_feeds(run))[0])
    assert state._last.forks is not None


def test_a_failing_call_in_a_fork_names_its_node_and_the_state_stays_usable():
    ex = Executor(_inception(), "float32")
    state, prog = _probed(ex)
    prog.forks = list(prog.probe.candidates)
    fork = prog.forks[0]
    k = fork.streams[1][-1]
    good = prog.calls[k]

    def broken():
        raise ValueError("boom")

    prog.calls[k] = broken
    with pytest.raises(InputInvalidError, match=f"node '{prog.owners[k].node.name}'.*boom"):
        state.run(_feeds(1))
    prog.calls[k] = good
    np.testing.assert_array_equal(state.run(_feeds(1))[0], ex.new_state(threads=1).run(_feeds(1))[0])


def test_overflow_inside_a_branch_warns_nothing_on_any_thread():
    ex = Executor(_inception(overflow=True), "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning from any thread would fail a run
        expected = ex.run(_feeds(2))[0]  # the unplanned step loop
        state, prog = _probed(ex)  # unplanned, probing (single and split) runs
        prog.forks = list(prog.probe.candidates)
        got = state.run(_feeds(2))[0]
    assert np.isnan(expected).any()
    np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------------------------ probe


def _probe_run(calls, regions, threads=2):
    from rknnlite.backends.software.parallel import WorkerPool
    pool = WorkerPool(threads)
    probe = Probe(regions, len(calls), threads)
    try:
        forks = None
        while forks is None:
            forks = probe.run(calls, pool)
    finally:
        pool.close()
    return probe, forks


def test_the_probe_forks_branches_that_overlap_in_time():
    calls = [lambda: time.sleep(0.02), lambda: time.sleep(0.02), lambda: None]
    probe, forks = _probe_run(calls, [(0, 2, [[0], [1]])])
    (fork,) = probe.candidates
    assert (fork.start, fork.stop, sorted(fork.streams)) == (0, 2, [(0,), (1,)])
    assert forks == probe.candidates  # two 20 ms waits side by side beat one after the other


def test_the_probe_deals_branches_by_their_single_thread_costs():
    calls = [lambda: time.sleep(0.03), lambda: time.sleep(0.01), lambda: time.sleep(0.01), lambda: None]
    probe, _ = _probe_run(calls, [(0, 3, [[0], [1], [2]])])
    assert probe.candidates == [Fork(0, 3, ((0,), (1, 2)))]


def test_a_call_failing_while_probing_is_reported_with_its_index():
    from rknnlite.backends.software.branches import CallFailed
    from rknnlite.backends.software.parallel import WorkerPool

    def fail():
        raise KeyError("x")

    probe = Probe([(0, 2, [[0], [1]])], 2, 2)
    with pytest.raises(CallFailed) as info:
        probe.run([lambda: None, fail], WorkerPool(2))
    assert info.value.index == 1 and isinstance(info.value.error, KeyError)


def test_a_kernel_spec_override_is_a_kernelspec():
    assert isinstance(KERNELS["Relu"], KernelSpec)


# ------------------------------------------------------------------ a real architecture


@pytest.mark.parametrize("name", ["inception_v2", "squeezenet"])
def test_a_zoo_model_forked_everywhere_gives_the_single_thread_bits(name, tmp_path, monkeypatch):
    """The onnx package's light models (Inception blocks, fire modules; not written here),
    float32: every region the probe found forked, against one thread and the zoo's own output."""
    pytest.importorskip("onnx")
    import rknnlite
    from rknnlite.toolkit import RKNN
    from test_light_models import load_case

    model, inputs, expected, atol = load_case(name)
    rknn = RKNN()
    try:
        assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
        assert rknn.load_onnx(model) == 0 and rknn.build(do_quantization=False) == 0
        path = str(tmp_path / f"{name}.rknn")
        assert rknn.export_rknn(path) == 0
    finally:
        rknn.release()
    monkeypatch.setenv("RKNNLITE_NUM_THREADS", "1")
    with rknnlite.Context(path) as one:
        single = one.run(inputs, data_format="nchw")[0]
    monkeypatch.setenv("RKNNLITE_NUM_THREADS", "2")
    with rknnlite.Context(path) as two:
        for _ in range(1 + Probe.SINGLE_RUNS + 2 * Probe.TRIALS):
            np.testing.assert_array_equal(two.run(inputs, data_format="nchw")[0], single)
        prog = two._backend._state._last
        assert len(prog.probe.candidates) >= 2
        prog.forks = list(prog.probe.candidates)
        forked = two.run(inputs, data_format="nchw")[0]
    np.testing.assert_array_equal(forked, single)
    np.testing.assert_allclose(forked, expected, rtol=1e-3, atol=atol)
