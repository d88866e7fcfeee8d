"""A dense layer on tokens and its residual ``Add`` as RKNN-Toolkit2 compiles them
(``rknnlite.toolkit.dense_residuals``): folded into the weight (``x + Linear(x)``), fused as a
ConvAdd (``r + Linear(a)``) when the sum or the residual is in the vendor's conv layout, left a
plain Add otherwise; against its simulator (tests/data/vendor_int8/README.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from float16_compare import assert_float16_matches  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.toolkit.dense_residuals import fuse_dense_residuals  # noqa: E402
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402
from rknnlite.toolkit.optimize import fold_dense_bias  # noqa: E402

_SIM = Path(__file__).parent / "data" / "vendor_int8" / "residual_sim.npz"
F = TensorProto.FLOAT


def _linear(x, y, w="w"):
    return [helper.make_node("MatMul", [x, w], [f"{y}_m"]), helper.make_node("Add", [f"{y}_m", "b"], [y])]


def _norm(x, y):
    return [helper.make_node("LayerNormalization", [x, "g", "bb"], [y], axis=-1, epsilon=1e-5)]


#: the probes: (nodes, outputs)
KINDS = {
    "A": (_linear("x", "a") + [helper.make_node("Add", ["x", "a"], ["r"])] + _norm("r", "y"), ["y"]),
    "B": (_linear("x", "a") + [helper.make_node("Add", ["x", "a"], ["r"])] + _linear("r", "y", "w2"), ["y", "r"]),
    "C": (_norm("x", "n") + _linear("n", "a") + [helper.make_node("Add", ["x", "a"], ["r"])] + _linear("r", "y", "w2"),
          ["y"]),
    "D": (_norm("x", "n") + _linear("n", "a") + [helper.make_node("Add", ["x", "a"], ["y"])], ["y"]),
}


def _graph(sim, kind: str):
    nodes, outputs = KINDS[kind]
    inits = [numpy_helper.from_array(sim[k], k) for k in ("w", "b", "w2")]
    inits += [numpy_helper.from_array(np.ones(32, np.float32), "g"), numpy_helper.from_array(np.zeros(32, np.float32), "bb")]
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 16, 32])],
                             [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_int8_residuals_of_dense_layers_are_the_vendors(kind, run_calibrated_build):
    """Every value equal to the simulator's: A (x + Linear(x) read by a LayerNorm: one conv of
    weight W + I; 69 % before), B (the same read by a Linear and the output: 58 % / 76 %), C
    (x + Linear(LN(x)) read by a Linear: ConvAdd; 68 %) and D (that sum as the output only: a
    plain Add, as before)."""
    sim = np.load(_SIM)
    ys = run_calibrated_build(_graph(sim, kind), sim["cal"], [sim["x"]], opset=17)
    for k, y in enumerate(ys):
        want = sim[f"{kind}_int8_{k}"]
        step = np.diff(np.unique(want)).min()  # the codes (the two dequantize in their own float order)
        np.testing.assert_array_equal(np.rint(y / step), np.rint(want / step))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_float16_residuals_of_dense_layers_are_the_vendors(kind, run_unquantized_build):
    """float16 builds: the ConvAdd rounds the product before the residual (``split_residuals``
    on a Gemm too) and the W + I fold rounds once: every value equal to the simulator's."""
    sim = np.load(_SIM)
    ys = run_unquantized_build(_graph(sim, kind), [sim["x"]], opset=17)
    for k, y in enumerate(ys):
        assert_float16_matches(y, sim[f"{kind}_fp16_{k}"])


def _rewritten(kind: str):
    sim = np.load(_SIM)
    im = import_onnx(helper.make_model(_graph(sim, kind), opset_imports=[helper.make_opsetid("", 17)]))
    g = im.graph
    fold_dense_bias(g, im.shapes)
    return g, fuse_dense_residuals(g, im.shapes)


def test_x_plus_its_own_linear_folds_the_identity_into_the_weight():
    g, fused = _rewritten("A")
    assert fused == 1 and "Add" not in [n.op for n in g.nodes]
    (gemm,) = [n for n in g.nodes if n.op == "Gemm"]
    sim = np.load(_SIM)
    np.testing.assert_array_equal(g.constants[gemm.inputs[1]], sim["w"] + np.eye(32, dtype=np.float32))
    assert len(gemm.inputs) == 3 and not gemm.attrs.get("_residual")


def test_another_residual_becomes_the_gemms_fourth_input():
    g, fused = _rewritten("C")
    assert fused == 1 and "Add" not in [n.op for n in g.nodes]
    gemm = next(n for n in g.nodes if n.op == "Gemm" and n.attrs.get("_residual"))
    rows = next(n for n in g.nodes if n.outputs == [gemm.inputs[3]])
    assert rows.op == "Reshape" and rows.inputs[0] == "x" and list(g.constants[rows.inputs[1]]) == [16, 32]


def test_a_sum_that_is_only_the_output_of_a_token_layout_residual_stays_an_add():
    g, fused = _rewritten("D")
    assert fused == 0 and [n.op for n in g.nodes].count("Add") == 1


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_a_transformer_encoder_layer_is_the_vendors(precision, run_calibrated_build):
    """The corpus' ``transformer_like`` (LayerNorm, Q/K/V Linears, two-head attention, projection
    and its residual, LayerNorm, Linear + GELU, Linear and its residual) built by the toolkit:
    every value equal to RKNN-Toolkit2 2.5.0's simulator, int8 and float16 (int8 53.5 % and
    float16 32 % at the start of 2026-12-04; the int8 GELU reads the Linear's unrounded product,
    as the vendor's ConvExGelu, ``integer_convs``)."""
    from corpus import MODELS

    sim = np.load(_SIM.parent / "transformer_sim.npz")
    model = MODELS.case_named("encoder_layer").build()
    (y,) = run_calibrated_build(model.graph, sim["cal"] if precision == "int8" else None, [sim["x"]],
                                opset=model.opset_import[0].version)
    want = sim[precision]
    if precision == "fp16":
        assert_float16_matches(y, want)
    else:
        step = np.diff(np.unique(want)).min()
        np.testing.assert_array_equal(np.rint(y / step), np.rint(want / step))
