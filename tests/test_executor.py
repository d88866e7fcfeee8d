"""The software executor: memory plan, float16 storage, custom ops, errors, concurrency."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

import rknnlite
from rknnlite import InputInvalidError, InvalidParamError, ModelInvalidError
from rknnlite.backends.software.executor import Executor
from rknnlite.model.graph import Graph, Node
from rknnlite.model.metadata import build_metadata
from rknnlite.model.portable import write_portable
from rknnlite.model.spec import TensorSpec


def conv_chain(channels=16, size=64, depth=4, seed=0) -> Graph:
    rng = np.random.default_rng(seed)
    nodes, consts, prev = [], {}, "x"
    for i in range(depth):
        consts[f"w{i}"] = (rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32)
        consts[f"b{i}"] = rng.standard_normal(channels).astype(np.float32)
        nodes.append(Node("Conv", f"conv{i}", [prev, f"w{i}", f"b{i}"], [f"c{i}"], {"pads": [1, 1, 1, 1]}))
        nodes.append(Node("Relu", f"relu{i}", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(Node("GlobalAveragePool", "gap", [prev], ["y"]))
    return Graph(nodes, ["x"], ["y"], consts)


def test_plan_reuses_buffers_and_keeps_results():
    graph = conv_chain()
    state = Executor(graph, "float32").new_state()
    x = np.random.default_rng(1).standard_normal((1, 16, 64, 64)).astype(np.float32)
    first = state.run([x])[0]
    second = state.run([x])[0]
    np.testing.assert_array_equal(first, second)
    activation = 16 * 64 * 64 * 4
    # 8 conv/relu activations of one size live in at most 2-3 buffers
    assert activation <= state.planned_bytes <= 3 * activation
    other = np.random.default_rng(2).standard_normal((1, 16, 64, 64)).astype(np.float32)
    np.testing.assert_array_equal(state.run([other])[0], Executor(graph, "float32").run([other])[0])


def test_no_tensor_sized_allocation_after_warm_up():
    state = Executor(conv_chain(), "float16").new_state()
    x = np.random.default_rng(1).standard_normal((1, 16, 64, 64)).astype(np.float32)
    state.run([x])
    state.run([x])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            state.run([x])
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    activation = 16 * 64 * 64 * 4
    assert peak - base < activation // 4, f"peak grew by {peak - base} bytes during planned runs"
    assert current - base < 4096


def test_new_input_shape_gets_its_own_plan():
    graph = Graph([Node("Relu", "r", ["x"], ["y"])], ["x"], ["y"])
    state = Executor(graph, "float32").new_state()
    for shape in [(2, 3), (4, 5), (2, 3)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(state.run([x])[0], np.maximum(x, 0))


def test_float16_mode_stores_every_computed_tensor_at_half_precision():
    """Every op's output and every constant is rounded to float16; the graph inputs are read
    as given, as RKNN-Toolkit2's simulator reads 4-D ones (tests/test_float16_inputs.py): 2049 + 1
    is 2050 from the float32 input, 2048 had the input been rounded first."""
    graph = Graph([Node("Add", "add", ["a", "b"], ["s"]), Node("Mul", "mul", ["s", "k"], ["y"])],
                  ["a", "b"], ["y"], {"k": np.array([1.0001], np.float32)})
    a = np.array([1.0, 2049.0, 1e-7, 70000.0], np.float32).reshape(1, 1, 1, 4)
    b = np.array([2 ** -11, 1.0, 0.0, 0.0], np.float32).reshape(1, 1, 1, 4)
    def h(v):
        with np.errstate(over="ignore"):
            return np.asarray(v, np.float32).astype(np.float16).astype(np.float32)

    expected = h(h(a + b) * h(np.float32(1.0001)))
    for _ in range(2):  # unplanned, then planned
        out = Executor(graph, "float16").new_state()
        np.testing.assert_array_equal(out.run([a, b])[0], expected)
    exact = Executor(graph, "float32").run([a, b])[0]
    np.testing.assert_array_equal(exact, (a + b) * np.float32(1.0001))


class TopHalf:
    """A custom op whose output shape depends on the data: the elements above the mean."""

    op_type = "cstAboveMean"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [[-1]], [in_dtypes[0]]

    def compute(self, node, inputs):
        x = inputs[0].reshape(-1)
        return [x[x > x.mean()] * node.attrs.get("scale", 1.0)]


def custom_graph() -> Graph:
    return Graph([Node("cstAboveMean", "above", ["x"], ["t"], {"scale": 2.0}), Node("Relu", "r", ["t"], ["y"])],
                 ["x"], ["y"])


def test_custom_op_runs_and_data_dependent_shapes_stay_unplanned():
    state = Executor(custom_graph(), "float32", custom_ops=[TopHalf()]).new_state()
    for x in ([1.0, 2.0, 3.0, 4.0], [5.0, -1.0, 0.0, 0.5], [-4.0, -3.0, 10.0, 9.0]):
        x = np.array(x, np.float32)
        np.testing.assert_array_equal(state.run([x])[0], np.maximum(x[x > x.mean()] * 2, 0))


def test_unregistered_custom_op_fails_at_init_naming_it():
    with pytest.raises(ModelInvalidError, match="cstAboveMean.*node 'above'"):
        Executor(custom_graph(), "float32")


def test_custom_op_through_context():
    meta = build_metadata([TensorSpec("x", (4,), "float32")], [TensorSpec("y", (-1,), "float32")],
                          float_dtype="float32")
    data = write_portable(meta, custom_graph())
    with rknnlite.Context(data) as ctx:  # the vendor registers custom ops after init: the first run names it
        with pytest.raises(ModelInvalidError, match="cstAboveMean.*register_custom_op"):
            ctx.run([np.array([1, 2, 3, 4], np.float32)])
        ctx.register_custom_op(TopHalf())
        np.testing.assert_array_equal(ctx.run([np.array([1, 2, 3, 4], np.float32)])[0], [6.0, 8.0])
    with rknnlite.Context(data, custom_ops=[TopHalf()]) as ctx:
        np.testing.assert_array_equal(ctx.run([np.array([1, 2, 3, 4], np.float32)])[0], [6.0, 8.0])


def test_invalid_custom_op_object():
    with pytest.raises(InvalidParamError, match="op_type"):
        Executor(custom_graph(), "float32", custom_ops=[object()])


def test_kernel_failure_names_the_node_and_state_stays_usable():
    graph = Graph([Node("Add", "adder", ["a", "b"], ["y"])], ["a", "b"], ["y"])
    state = Executor(graph, "float32").new_state()
    with pytest.raises(InputInvalidError, match="node 'adder' \\(Add\\)"):
        state.run([np.ones((2, 3), np.float32), np.ones((4,), np.float32)])
    np.testing.assert_array_equal(state.run([np.ones(3, np.float32), np.ones(3, np.float32)])[0], [2, 2, 2])


def test_a_kernels_own_error_at_run_time_names_the_node_and_state_stays_usable():
    """A kernel's ModelInvalidError (its ``op`` the op type) used to reach the caller as "Slice:
    starts, ends, axes and steps differ in length", without the node."""
    graph = Graph([Node("Slice", "crop", ["x", "st", "en"], ["y"], {"_opset": 13})], ["x", "st", "en"], ["y"])
    state = Executor(graph, "float32").new_state()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(2):
        np.testing.assert_array_equal(state.run([x, np.array([1]), np.array([3])])[0], x[1:])
    for _ in range(2):
        with pytest.raises(ModelInvalidError) as e:
            state.run([x, np.array([0]), np.array([1, 1])])
        assert e.value.op == "rknn_run"
        assert e.value.message == "node 'crop' (Slice): starts, ends, axes and steps differ in length (1, 2, 1, 1)"
    np.testing.assert_array_equal(state.run([x, np.array([0]), np.array([1])])[0], x[:1])


def test_bad_float_dtype():
    with pytest.raises(InvalidParamError):
        Executor(custom_graph(), "bfloat16")


def test_states_run_concurrently_with_correct_results():
    ex = Executor(conv_chain(size=32), "float16")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 16, 32, 32)).astype(np.float32) for _ in range(4)]
    expected = [ex.run([x])[0] for x in xs]
    errors = []

    def worker(i):
        state = ex.new_state()
        for _ in range(10):
            try:
                np.testing.assert_array_equal(state.run([xs[i]])[0], expected[i])
            except Exception as e:  # collected and asserted below
                errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_one_context_is_safe_to_share_between_threads():
    meta = build_metadata([TensorSpec("x", (1, 16, 32, 32), "float32", "NCHW")],
                          [TensorSpec("y", (1, 16, 1, 1), "float32", "NCHW")])
    with rknnlite.Context(write_portable(meta, conv_chain(size=32))) as ctx:
        rng = np.random.default_rng(4)
        xs = [rng.standard_normal((1, 16, 32, 32)).astype(np.float32) for _ in range(4)]
        expected = [ctx.run([x])[0] for x in xs]
        errors = []

        def worker(i):
            for _ in range(10):
                if not np.array_equal(ctx.run([xs[i]])[0], expected[i]):
                    errors.append(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_float16_model_uses_prerounded_weights_in_place():
    w = np.random.default_rng(5).standard_normal(16).astype(np.float16).astype(np.float32)
    w.flags.writeable = False
    raw = np.random.default_rng(6).standard_normal(16).astype(np.float32)
    graph = Graph([Node("Add", "a", ["x", "w"], ["t"]), Node("Add", "b", ["t", "raw"], ["y"])], ["x"], ["y"],
                  {"w": w, "raw": raw})
    ex = Executor(graph, "float16")
    stored = dict((ex.slot_name(slot), v) for slot, v in ex.constants)
    assert stored["w"] is w
    assert stored["raw"] is not raw
    np.testing.assert_array_equal(stored["raw"], raw.astype(np.float16).astype(np.float32))


def test_value_preserving_ops_keep_float16_results_exact():
    graph = Graph([Node("Mul", "m", ["x", "k"], ["t"]), Node("Relu", "r", ["t"], ["u"]),
                   Node("Transpose", "tr", ["u"], ["y"], {"perm": [0, 1, 3, 2]})],
                  ["x"], ["y"], {"k": np.array([1.3], np.float32)})
    x = np.random.default_rng(8).standard_normal((1, 1, 3, 5)).astype(np.float32)
    out = Executor(graph, "float16").run([x])[0]
    h = lambda v: v.astype(np.float16).astype(np.float32)  # noqa: E731
    # a 4-D x is read unrounded
    np.testing.assert_array_equal(out, np.maximum(h(x * h(np.float32(1.3))), 0).transpose(0, 1, 3, 2))


def test_constants_a_kernel_caches_are_released_once():
    graph = conv_chain(depth=2, size=16)
    released = []
    state = Executor(graph, "float32").new_state(release=released.append)
    x = np.random.default_rng(9).standard_normal((1, 16, 16, 16)).astype(np.float32)
    first = state.run([x])[0]
    assert sorted(id(a) for a in released) == sorted(id(graph.constants[k]) for k in ("w0", "b0", "w1", "b1"))
    np.testing.assert_array_equal(state.run([x])[0], first)
    assert len(released) == 4


def test_mapped_model_runs_after_its_pages_are_released(tmp_path):
    meta = build_metadata([TensorSpec("x", (1, 16, 32, 32), "float32", "NCHW")],
                          [TensorSpec("y", (1, 16, 1, 1), "float32", "NCHW")])
    path = tmp_path / "m.rknn"
    path.write_bytes(write_portable(meta, conv_chain(size=32)))
    x = np.random.default_rng(10).standard_normal((1, 16, 32, 32)).astype(np.float32)
    with rknnlite.Context(path.read_bytes()) as in_memory, rknnlite.Context(str(path)) as mapped:
        expected = in_memory.run([x])[0]
        for _ in range(3):
            np.testing.assert_array_equal(mapped.run([x])[0], expected)


def test_exposed_tensors_come_after_the_outputs_as_computed_unexposed():
    """``expose`` returns intermediates without making them outputs: a float16 dense product
    stays float32 inside (an output would be rounded), and the output is unchanged."""
    rng = np.random.default_rng(13)
    graph = Graph([Node("MatMul", "mm", ["x", "w"], ["m"]), Node("Add", "a", ["m", "b"], ["y"])], ["x"], ["y"],
                  {"w": rng.standard_normal((8, 8)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)})
    x = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
    (y,) = Executor(graph, "float16").run([x])
    y2, m = Executor(graph, "float16", expose=["m"]).run([x])
    np.testing.assert_array_equal(y2, y)
    assert not np.array_equal(m, m.astype(np.float16).astype(np.float32))
    with pytest.raises(InvalidParamError, match="expose"):
        Executor(graph, "float16", expose=["nope"])
