"""float16 builds read a graph input as RKNN-Toolkit2's simulator does: a float16 conv computes
from the float32 values as given (float16 weights, its result rounded to float16), and any other
op on the input rounds its own output (tests/data/vendor_fp16/README.md).  Rounding the input to
float16 first left 60 % of a conv's outputs equal to the vendor's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
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
