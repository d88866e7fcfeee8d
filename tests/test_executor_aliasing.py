"""Planned runs that copy less: a view step (Reshape, Flatten, Squeeze, Unsqueeze, Identity)
reads its input's buffer through a view, producers of a Concat write straight into their
slices of its output, and NCHW data given for an NHWC image input reaches the NCHW graph
without a round trip.  Each gives the results of the unplanned step loop, and each stays
off wherever it could change a value."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.ops import KERNELS, KernelSpec
from rknnlite.model.graph import Graph, Node
from rknnlite.model.spec import QuantParams, TensorSpec


def _compiled(ex: Executor, feeds):
    """A state whose first run planned and compiled ``feeds``' signature: (state, plan)."""
    state = ex.new_state()
    state.run(feeds)
    plan = next(iter(state._plans.values()))
    assert plan.program is not None
    return state, plan


def _slot(ex: Executor, name: str) -> int:
    return ex._names[name]


def _agrees(ex: Executor, state, make_feeds, seeds=(1, 2, 3)) -> None:
    """Runs of the compiled ``state`` equal the unplanned step loop of a fresh state."""
    for seed in seeds:
        reference = ex.run(make_feeds(seed))
        for r, g in zip(reference, state.run(make_feeds(seed))):
            np.testing.assert_array_equal(g, r)


# ------------------------------------------------------------------------------------ views


def _reshape_graph(first: str = "Relu") -> Graph:
    nodes = [Node(first, "head", ["a"], ["r"]),
             Node("Reshape", "reshape", ["r", "shape"], ["v"]),
             Node("Mul", "mul", ["v", "k"], ["y"])]
    return Graph(nodes, ["a"], ["y"], {"shape": np.array([4, 6], np.int64),
                                       "k": np.linspace(-2, 2, 6, dtype=np.float32)})


def _feeds_of(shape):
    """``feeds(seed)``: one float32 input of ``shape``, random per seed."""
    return lambda seed: [np.random.default_rng(seed).standard_normal(shape).astype(np.float32)]


_one_feed = _feeds_of((2, 3, 4))


@pytest.mark.parametrize("float_dtype", ["float16", "float32"])
def test_a_reshape_in_a_program_reads_its_input_buffer(float_dtype):
    ex = Executor(_reshape_graph(), float_dtype)
    state, plan = _compiled(ex, _one_feed(0))
    assert plan.views == {1}
    env = plan.program.env
    assert np.shares_memory(env[_slot(ex, "v")], env[_slot(ex, "r")])
    assert all(owner.node.op != "Reshape" for owner in plan.program.owners)  # no call left for the view
    _agrees(ex, state, _one_feed)


def test_a_view_of_an_input_fed_as_it_is_is_taken_per_run_and_dropped_after():
    ex = Executor(_reshape_graph("Identity"), "float32")  # the Identity is a view too: of the feed
    state, plan = _compiled(ex, _one_feed(0))
    assert plan.views == {0, 1}
    _agrees(ex, state, _one_feed)
    env = plan.program.env
    assert env[_slot(ex, "r")] is None and env[_slot(ex, "v")] is None  # the caller's array is not held


def test_a_view_whose_output_is_snapped_to_another_grid_keeps_its_own_buffer():
    graph = _reshape_graph()
    graph.quant.update({"r": QuantParams("int8", (0.05,), (0,)), "v": QuantParams("int8", (0.2,), (3,))})
    ex = Executor(graph, "float16")
    state, plan = _compiled(ex, _one_feed(0))
    assert not plan.views  # snapping v in place would change r
    env = plan.program.env
    assert not np.shares_memory(env[_slot(ex, "v")], env[_slot(ex, "r")])
    _agrees(ex, state, _one_feed)


def test_a_view_step_run_by_an_override_is_planned_as_that_kernel():
    ex = Executor(_reshape_graph(), "float32")
    state = ex.new_state()
    plain = KERNELS["Reshape"]
    state.use_kernels({1: KernelSpec("Reshape", plain.fn, out=True)})  # the same kernel, not declared a view
    state.run(_one_feed(0))
    plan = next(iter(state._plans.values()))
    assert not plan.views and plan.program is not None
    _agrees(ex, state, _one_feed)


# ------------------------------------------------------------------------------------ joins


def _concat_graph(axis: int = 1, also_read: bool = False, same_twice: bool = False,
                  output_part: bool = False) -> Graph:
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((3, 2, 1, 1)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((5, 2, 3, 3)) * 0.3).astype(np.float32)
    nodes = [Node("Conv", "c1", ["x", "w1"], ["a"]),
             Node("Conv", "c2", ["x", "w2"], ["b"], {"pads": [1, 1, 1, 1], "_activation": "Relu"})]
    parts = ["a", "a"] if same_twice else ["a", "b"]
    if axis != 1:
        parts = ["a", "a2"]
        nodes.append(Node("Relu", "r", ["a"], ["a2"]))
    nodes.append(Node("Concat", "cat", parts, ["c"], {"axis": axis}))
    nodes.append(Node("Sigmoid", "sig", ["c"], ["y"]))
    outputs = ["y"]
    if also_read:
        nodes.append(Node("Neg", "neg", ["a"], ["z"]))
        outputs.append("z")
    if output_part:
        outputs.append("b")
    return Graph(nodes, ["x"], outputs, {"w1": w1, "w2": w2})


_image = _feeds_of((1, 2, 6, 7))


@pytest.mark.parametrize("float_dtype", ["float16", "float32"])
def test_producers_of_a_concat_write_into_its_output(float_dtype):
    ex = Executor(_concat_graph(), float_dtype)
    state, plan = _compiled(ex, _image(0))
    assert plan.joins == {2}
    env = plan.program.env
    c = env[_slot(ex, "c")]
    np.testing.assert_equal([np.shares_memory(env[_slot(ex, s)], c) for s in "ab"], [True, True])
    assert all(owner.node.op != "Concat" for owner in plan.program.owners)  # nothing left to copy
    _agrees(ex, state, _image)


def test_a_joined_concat_still_snaps_its_output_to_its_grid():
    graph = _concat_graph()
    graph.quant.update({"a": QuantParams("int8", (0.02,), (1,)), "b": QuantParams("int8", (0.03,), (-2,)),
                        "c": QuantParams("int8", (0.1,), (0,))})
    ex = Executor(graph, "float16")
    state, plan = _compiled(ex, _image(0))
    assert plan.joins == {2}
    _agrees(ex, state, _image)
    c = state.run(_image(5))  # the Sigmoid's input, c, is on its coarser grid: few distinct outputs
    assert len(np.unique(c[0])) <= 256


@pytest.mark.parametrize("case, kept", [(dict(same_twice=True), "a"), (dict(output_part=True), "b"),
                                        (dict(axis=2), "a")],
                         ids=["same-input-twice", "graph-output", "strided-slices"])
def test_concat_inputs_that_cannot_be_written_in_place_are_copied(case, kept):
    ex = Executor(_concat_graph(**case), "float32")
    state, plan = _compiled(ex, _image(0))
    assert not plan.joins
    c = plan.program.env[_slot(ex, "c")]
    assert not np.shares_memory(plan.program.env[_slot(ex, kept)], c)
    _agrees(ex, state, _image)


def test_an_input_read_elsewhere_is_joined_only_where_the_concat_keeps_the_values_as_written():
    ex = Executor(_concat_graph(also_read=True), "float32")  # a is read by the Neg too
    state, plan = _compiled(ex, _image(0))
    assert plan.joins == {2}
    _agrees(ex, state, _image)

    graph = _concat_graph(also_read=True)
    graph.quant.update({"c": QuantParams("int8", (0.1,), (0,))})  # the Concat snaps c in place
    ex = Executor(graph, "float16")
    state, plan = _compiled(ex, _image(0))
    env = plan.program.env
    c = env[_slot(ex, "c")]
    assert not np.shares_memory(env[_slot(ex, "a")], c) and np.shares_memory(env[_slot(ex, "b")], c)
    assert not plan.joins  # a is still copied
    _agrees(ex, state, _image)


def test_a_joined_concat_that_is_a_graph_output_is_delivered_whole():
    graph = _concat_graph()
    graph.outputs.append("c")
    ex = Executor(graph, "float32")
    state, plan = _compiled(ex, _image(0))
    assert plan.joins == {2}
    _agrees(ex, state, _image)
    y, c = state.run(_image(4))
    assert not np.shares_memory(c, plan.program.env[_slot(ex, "c")])  # a copy the caller owns
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-c)), rtol=1e-6)


def _dense_graph() -> Graph:
    """Two DenseNet steps: each Concat's output is read by a conv and joined into the next."""
    rng = np.random.default_rng(3)
    w = {f"w{i}": (rng.standard_normal((2, c, 3, 3)) * 0.3).astype(np.float32) for i, c in ((0, 2), (1, 2), (2, 4))}
    pad = {"pads": [1, 1, 1, 1]}
    nodes = [Node("Conv", "c0", ["x", "w0"], ["f0"], pad),
             Node("Conv", "c1", ["f0", "w1"], ["n1"], pad),
             Node("Concat", "cat1", ["f0", "n1"], ["k1"], {"axis": 1}),
             Node("Conv", "c2", ["k1", "w2"], ["n2"], pad),
             Node("Concat", "cat2", ["k1", "n2"], ["k2"], {"axis": -3}),
             Node("Sigmoid", "sig", ["k2"], ["y"])]
    return Graph(nodes, ["x"], ["y"], w)


@pytest.mark.parametrize("float_dtype", ["float16", "float32"])
def test_chained_concats_live_in_the_last_ones_buffer(float_dtype):
    ex = Executor(_dense_graph(), float_dtype)
    state, plan = _compiled(ex, _image(0))
    assert plan.joins == {2, 4}
    env = plan.program.env
    k2 = env[_slot(ex, "k2")]
    assert [np.shares_memory(env[_slot(ex, s)], k2) for s in ("f0", "n1", "k1", "n2")] == [True] * 4
    np.testing.assert_array_equal(env[_slot(ex, "k1")], k2[:, :4])
    _agrees(ex, state, _image)


def test_the_concat_kernel_copies_only_what_is_not_in_place(monkeypatch):
    from rknnlite.backends.software.ops import tensor

    copied = []
    real_copyto = np.copyto
    monkeypatch.setattr(tensor.np, "copyto", lambda dst, src, **kw: (copied.append(src), real_copyto(dst, src, **kw)))
    concat = KERNELS["Concat"].fn
    out = np.zeros((1, 5, 2), np.float32)
    out[:, :2] = 7  # "written by its producer"
    rest = np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    (got,) = concat([out[:, :2], rest], {"axis": 1}, [out])
    assert got is out and len(copied) == 1 and copied[0] is rest  # the part in place is not copied
    np.testing.assert_array_equal(out, np.concatenate([np.full((1, 2, 2), 7, np.float32), rest], axis=1))
    elsewhere = np.full((1, 2, 2), 3, np.float32)
    concat([elsewhere, rest], {"axis": 1}, [out])
    np.testing.assert_array_equal(out[:, :2], elsewhere)


# ------------------------------------------------------------------------------------ inputs


def _image_model(portable_model) -> bytes:
    spec_in = TensorSpec("x", (1, 3, 5, 4), "float32", "NCHW")
    spec_out = TensorSpec("y", (1, 3, 5, 4), "float32", "NCHW")
    return portable_model([Node("Relu", "relu", ["x"], ["y"])], [spec_in], [spec_out], float_dtype="float32")


def test_nchw_data_for_an_nhwc_image_input_reaches_the_graph_without_a_copy(portable_model, monkeypatch):
    from rknnlite.backends.software import executor

    seen = []
    original = executor.ExecutionState.run

    def spy(self, feeds, out=None):
        seen.extend(feeds)
        return original(self, feeds, out)

    monkeypatch.setattr(executor.ExecutionState, "run", spy)
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 4)).astype(np.float32)
    with rknnlite.Context(_image_model(portable_model)) as ctx:
        assert ctx.inputs[0].dims == (1, 5, 4, 3)  # presented NHWC
        (y,) = ctx.run([x], data_format="nchw")
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        assert seen[-1] is not x and np.shares_memory(seen[-1], x) and seen[-1].flags.c_contiguous
        (y2,) = ctx.run([np.ascontiguousarray(x.transpose(0, 2, 3, 1))])  # NHWC data: one copy into NCHW
        np.testing.assert_array_equal(y2, y)
        strided = np.zeros((1, 3, 10, 4), np.float32)
        strided[:, :, ::2] = x
        (y3,) = ctx.run([strided[:, :, ::2]], data_format="nchw")  # a strided caller array is copied
        np.testing.assert_array_equal(y3, y)
        assert not np.shares_memory(seen[-1], strided) and seen[-1].flags.c_contiguous
