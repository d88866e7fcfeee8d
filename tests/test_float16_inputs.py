"""float16 builds read a graph input as RKNN-Toolkit2's simulator does: a float16 conv computes
from the float32 values of a 4-D input as given (float16 weights, its result rounded to float16),
and any other op on it rounds its own output (tests/data/vendor_fp16/README.md).  Rounding the
input to float16 first left 60 % of a conv's outputs equal to the vendor's.  An input of any other
rank is converted to the NPU's layout first, which rounds it: every op reads it as float16."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from float16_compare import assert_float16_matches  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


_SIM = Path(__file__).parent / "data" / "vendor_fp16" / "input_consumers_sim.npz"


def _conv(x, w, y):
    return helper.make_node("Conv", [x, w], [y], pads=[1, 1, 1, 1])


_GRAPHS = {
    "conv": [_conv("x", "w", "y")],
    "add": [helper.make_node("Add", ["x", "c2"], ["a"]), _conv("a", "w2", "y")],
    "maxpool": [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
                _conv("a", "w2", "y")],
    "sigmoid": [helper.make_node("Sigmoid", ["x"], ["a"]), _conv("a", "w2", "y")],
    "conv_add": [_conv("x", "w2", "y0"), helper.make_node("Add", ["y0", "y0"], ["y"])],
}


@pytest.mark.parametrize("case", sorted(_GRAPHS))
def test_a_float16_build_reads_its_input_as_the_vendor_does(case, run_unquantized_build):
    sim = np.load(_SIM)
    inits = [numpy_helper.from_array(sim[k], k) for k in ("w", "w2", "c2")]
    g = helper.make_graph(_GRAPHS[case], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    (y,) = run_unquantized_build(g, [sim["x" if case == "conv" else "x2"]], platform="rk3566")
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, sim[case])


_RANK_SIM = Path(__file__).parent / "data" / "vendor_fp16" / "input_rank_sim.npz"
F = TensorProto.FLOAT


@pytest.mark.parametrize("case", ["add2", "add3", "add5", "mm4", "ln4"])
def test_an_input_of_rank_other_than_4_is_read_as_float16(case, run_unquantized_build):
    """``Add(x, MatMul(x, w))`` on a 2-D and a 3-D input and ``Add(x, Sigmoid(x))`` on a 5-D one:
    every value equal to the simulator's (66-69 % with the input read as float32, as a 4-D one
    is); a 4-D input still reaches a MatMul or a LayerNorm as float16 (``HALF_INPUT_OPS``)."""
    sim = np.load(_RANK_SIM)
    x = sim[f"{case}_x"]
    inits = [numpy_helper.from_array(sim[f"{case}_w"], "w")] if f"{case}_w" in sim.files else []
    if case in ("add2", "add3"):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["x", "m"], ["y"])]
    elif case == "add5":
        nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Add", ["x", "s"], ["y"])]
    elif case == "mm4":
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    else:
        inits = [numpy_helper.from_array(np.ones(32, np.float32), "g"), numpy_helper.from_array(np.zeros(32, np.float32), "b")]
        nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, list(x.shape))],
                          [helper.make_tensor_value_info("y", F, None)], inits)
    (y,) = run_unquantized_build(g, [x], opset=17 if case == "ln4" else 13)
    assert_float16_matches(y, sim[f"{case}_vendor"])


@pytest.mark.parametrize("shape, staged", [((1, 1, 64, 64), False), ((64, 64), True), ((1, 64, 64), True)])
def test_float16_mode_stages_a_rounded_copy_of_an_input_of_another_rank(shape, staged):
    """The copy is made once per shape (compiled runs reuse it) and rounded on every run; a
    4-D float32 input is read in place; float32 mode never rounds."""
    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.graph import Graph, Node

    graph = Graph([Node("Add", "a", ["x", "x"], ["y"])], ["x"], ["y"])
    state = Executor(graph, "float16").new_state()
    half = lambda v: v.astype(np.float16).astype(np.float32)  # noqa: E731
    for seed in range(3):  # unplanned, planned, compiled
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        want = half((half(x) if staged else x) * 2)
        np.testing.assert_array_equal(state.run([x])[0], want)
    assert (state.staging_bytes > 0) is staged
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(Executor(graph, "float32").run([x])[0], x + x)
