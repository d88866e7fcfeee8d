"""Float16 builds round where RKNN-Toolkit2's simulator rounds (tests/data/vendor_fp16/README.md):
``Add(Conv(x), x)`` of a "same"-padded conv is one conv of weight ``W + I``
(``optimize.fold_input_residual``), a conv's output plus another tensor is rounded to float16
before the addition (``float16_rules.split_residuals``), SiLU's sigmoid is not rounded
(``float16_rules.swish_gates``), nor is a dense layer's product (``Graph.dense_layers``); an
attention's rules are in ``test_attention.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.backends.software.executor import Executor  # noqa: E402
from rknnlite.backends.software.float16_rules import split_residuals, swish_gates  # noqa: E402
from rknnlite.model.graph import Graph, Node  # noqa: E402

_SIM = Path(__file__).parent / "data" / "vendor_fp16" / "residual_sim.npz"


def _conv(x, w, b, y):
    return helper.make_node("Conv", [x, w, b], [y], pads=[1, 1, 1, 1])


def _run(run_build, nodes, sim, prefix):
    inits = [numpy_helper.from_array(sim[k], k[len(prefix) + 1:]) for k in sim.files
             if k.startswith(prefix + "_w") or k.startswith(prefix + "_b")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    (y,) = run_build(g, [sim[prefix + "_x"]])
    return y


def _assert_within_noise(y, want):
    """All but 1 % of the values equal to the simulator's, the others a float16 unit apart at
    most (of values near 1): what the convs' own summation leaves (a Winograd 3x3 conv, chosen by the cost model, is one
    unit off on about 0.6 % of a 64-channel layer's values; the direct one on 0.1 %)."""
    assert y.shape == want.shape
    assert np.mean(y != want) <= 0.01, f"{np.mean(y == want):.4f} equal"
    assert np.abs(y - want).max() <= 2.0 ** -10  # a float16 unit of the values near 1


def test_a_3x3_conv_plus_its_input_is_one_conv_as_the_vendors(run_unquantized_build):
    """``relu(conv_a(x)) -> relu(conv_b(a) + a)``: 91 % of the values equal to the simulator's
    when the Add stayed a residual; folded, 99.95 % (direct convs) or 99.8 % (Winograd)."""
    sim = np.load(_SIM)
    nodes = [_conv("x", "wa", "ba", "ca"), helper.make_node("Relu", ["ca"], ["a"]), _conv("a", "wb", "bb", "b"),
             helper.make_node("Add", ["b", "a"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    _assert_within_noise(_run(run_unquantized_build, nodes, sim, "fold"), sim["fold_vendor"])


def test_a_conv_plus_another_tensor_rounds_the_conv_first(run_unquantized_build):
    """``conv_c(b) + a`` (a ResNet block's sum): 92 % equal to the simulator's when the sum was
    rounded once; with the conv's output rounded to float16 first 99.9 % (direct convs) or
    99.3 % (Winograd)."""
    sim = np.load(_SIM)
    nodes = [_conv("x", "wa", "ba", "ca"), helper.make_node("Relu", ["ca"], ["a"]), _conv("a", "wb", "bb", "cb"),
             helper.make_node("Relu", ["cb"], ["b"]), _conv("b", "wc", "bc", "c"),
             helper.make_node("Add", ["c", "a"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    _assert_within_noise(_run(run_unquantized_build, nodes, sim, "convadd"), sim["convadd_vendor"])


@pytest.mark.parametrize("activation, attrs, expect", [
    (None, {}, ["Conv", "Add"]),
    ("Relu", {}, ["Conv", "Add", "Relu"]),
    ("Clip", {"_activation_min": 0.0, "_activation_max": 6.0}, ["Conv", "Add", "Clip"]),
    ("LeakyRelu", {"_activation_alpha": 0.2}, ["Conv", "Add", "LeakyRelu"]),
])
def test_split_residuals_computes_the_fused_conv(activation, attrs, expect):
    """The split graph computes what the fused conv did (float32: the same values), the
    activation after the sum."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    conv_attrs = {"pads": [1, 1, 1, 1], "_residual": True, **attrs}
    if activation:
        conv_attrs["_activation"] = activation
    graph = Graph([Node("Conv", "c", ["x", "w", "b", "r"], ["y"], conv_attrs)], ["x", "r"], ["y"], {"w": w, "b": b})
    split = split_residuals(graph)
    assert [n.op for n in split.nodes] == expect and split.outputs == ["y"]
    assert [n.op for n in graph.nodes] == ["Conv"]  # the input graph is not changed
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32) * 3
    r = rng.standard_normal((1, 4, 6, 6)).astype(np.float32) * 3
    (fused,) = Executor(graph, "float32").run([x, r])
    (parts,) = Executor(split, "float32").run([x, r])
    np.testing.assert_allclose(parts, fused, rtol=1e-6, atol=1e-6)


def test_float16_mode_rounds_the_conv_before_the_residual():
    """In float16 mode the executor splits the fused conv: a conv output of 2049 rounds to 2048
    (float16 steps are 2 there, the tie to even) before the residual 1 is added, and 2049 rounds
    to 2048 again; one rounding of 2049 + 1 would give 2050."""
    graph = Graph([Node("Conv", "c", ["x", "w", "", "r"], ["y"], {"_residual": True})], ["x", "r"], ["y"],
                  {"w": np.ones((1, 1, 1, 1), np.float32)})
    x = np.full((1, 1, 1, 1), 2049.0, np.float32)
    r = np.ones((1, 1, 1, 1), np.float32)
    assert Executor(graph, "float32").run([x, r])[0][0, 0, 0, 0] == 2050.0
    assert Executor(graph, "float16").run([x, r])[0][0, 0, 0, 0] == 2048.0


def test_silu_rounds_once_as_the_vendors(run_unquantized_build):
    """``conv -> x * Sigmoid(x)`` (YOLOv8's activation): the simulator keeps the sigmoid float32;
    rounding it (and the input) left 52 % of the values equal to the vendor's, 99.95 % now."""
    sim = np.load(_SIM.parent / "silu_sim.npz")
    nodes = [_conv("x", "w", "b", "c"), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(sim["w"], "w"), numpy_helper.from_array(sim["b"], "b")])
    (y,) = run_unquantized_build(g, [sim["x"]])
    assert np.mean(y != sim["vendor"]) <= 0.001, f"{np.mean(y == sim['vendor']):.4f} equal"
    assert np.abs(y - sim["vendor"]).max() <= 2.0 ** -12


@pytest.mark.parametrize("nodes, gates", [
    ([Node("Sigmoid", "s", ["x"], ["g"]), Node("Mul", "m", ["x", "g"], ["y"])], {"g"}),
    ([Node("Sigmoid", "s", ["x"], ["g"]), Node("Mul", "m", ["g", "x"], ["y"])], {"g"}),
    ([Node("Sigmoid", "s", ["x"], ["g"]), Node("Mul", "m", ["g", "z"], ["y"])], set()),  # not its own input
    ([Node("Sigmoid", "s", ["x"], ["g"]), Node("Mul", "m", ["x", "g"], ["y"]), Node("Relu", "r", ["g"], ["z"])],
     set()),  # the sigmoid is read elsewhere too
    ([Node("Tanh", "s", ["x"], ["g"]), Node("Mul", "m", ["x", "g"], ["y"])], set()),
])
def test_swish_gates_are_the_sigmoids_of_a_silu(nodes, gates):
    graph = Graph(nodes, ["x", "z"], [n.outputs[0] for n in nodes[1:]], {})
    assert swish_gates(graph) == gates


def test_float16_mode_keeps_the_silu_gate_float32():
    """The float16 executor multiplies by the float32 sigmoid (as the Sigmoid kernel computes it)
    and rounds once; rounding the gate first gives other values on part of these inputs."""
    silu = Graph([Node("Sigmoid", "s", ["x"], ["g"]), Node("Mul", "m", ["x", "g"], ["y"])], ["x"], ["y"], {})
    gate_only = Graph([Node("Sigmoid", "s", ["x"], ["g"])], ["x"], ["g"], {})
    x = np.random.default_rng(3).uniform(-6, 6, 4096).astype(np.float16).astype(np.float32)
    (gate,) = Executor(gate_only, "float32").run([x])
    (y,) = Executor(silu, "float16").run([x])
    half = lambda v: v.astype(np.float16).astype(np.float32)  # noqa: E731
    np.testing.assert_array_equal(y, half(x * gate))
    assert np.any(y != half(x * half(gate)))


def _layer_norm_graph(opset: int, sim):
    """A LayerNorm of ``x`` (1x16x32) over the last axis: opset 13's arithmetic or opset 17's op."""
    F = TensorProto.FLOAT
    inits = [numpy_helper.from_array(sim["scale"], "g"), numpy_helper.from_array(sim["bias"], "b")]
    if opset >= 17:
        nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    else:
        inits += [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(1e-5), "eps")]
        nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), helper.make_node("Sub", ["x", "m"], ["d"]),
                 helper.make_node("Pow", ["d", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
                 helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
                 helper.make_node("Div", ["d", "s"], ["n"]), helper.make_node("Mul", ["n", "g"], ["ng"]),
                 helper.make_node("Add", ["ng", "b"], ["y"])]
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 16, 32])],
                             [helper.make_tensor_value_info("y", F, None)], inits)


@pytest.mark.parametrize("opset", [13, 17])
def test_layer_norm_of_an_input_is_the_vendors_exnorm(opset, run_unquantized_build):
    """Exported as arithmetic it is one LayerNormalization (41 % of the values equal to the
    simulator's when every op rounded), and a graph input is read as float16 (68.6 % when not):
    equal on every value."""
    sim = np.load(_SIM.parent / "layernorm_sim.npz")
    (y,) = run_unquantized_build(_layer_norm_graph(opset, sim), [sim["x"]], opset=opset)
    np.testing.assert_array_equal(y, sim["vendor"])


def test_gelu_after_a_matmul_of_an_input_is_the_vendors(run_unquantized_build):
    """A MatMul reads a graph input as float16 and the GELU arithmetic is one Gelu rounded once
    (the vendor's exMatMul and exGelu): 98 % of the values equal to the simulator's, the rest a
    float16 unit apart (32 % rounding after every op of an unrounded input)."""
    sim = np.load(_SIM.parent / "gelu_sim.npz")
    F = TensorProto.FLOAT
    inits = [numpy_helper.from_array(sim["w"], "w"), numpy_helper.from_array(np.float32(np.sqrt(2)), "sq2"),
             numpy_helper.from_array(np.float32(1), "one"), numpy_helper.from_array(np.float32(0.5), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Div", ["h", "sq2"], ["hd"]),
             helper.make_node("Erf", ["hd"], ["e"]), helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["h", "e1"], ["he"]), helper.make_node("Mul", ["he", "half"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 16, 32])],
                          [helper.make_tensor_value_info("y", F, None)], inits)
    (y,) = run_unquantized_build(g, [sim["x"]])
    want = sim["vendor"]
    assert np.mean(y == want) >= 0.97, f"{np.mean(y == want):.4f} equal"
    assert np.abs(y - want).max() <= 2.0 ** -9


def _mm(a, b, y):
    return Node("MatMul", f"mm_{y}", [a, b], [y])


@pytest.mark.parametrize("bias_shape, dense", [((8,), True), ((1, 1, 8), True), ((4,), False), ((8, 1), False)])
def test_dense_layers_are_matmuls_by_a_constant_plus_a_bias(bias_shape, dense):
    w = np.ones((4, 8), np.float32)  # 8 outputs
    graph = Graph([_mm("x", "w", "m"), Node("Add", "a", ["m", "b"], ["y"])], ["x"], ["y"],
                  {"w": w, "b": np.zeros(bias_shape, np.float32)})
    assert graph.dense_layers() == ({"m": "b"} if dense else {})
    assert ("b" in graph.biases()) is dense


def test_an_int8_input_reaches_a_layer_norm_unrounded():
    """``HALF_INPUT_OPS`` round a float32 graph input for LayerNorm and MatMul; an int8 input
    is read on its grid as it is (the vendor's int8 exNorm: every value of a transformer's first
    LayerNorm equal to its simulator's, 98 % with the input rounded to float16)."""
    from rknnlite.model.spec import QuantParams

    sx, sy = 0.024286386078479244, 0.02366624813453824
    graph = Graph([Node("LayerNormalization", "ln", ["x", "g", "b"], ["y"], {"axis": -1, "epsilon": 1e-5})], ["x"], ["y"],
                  {"g": np.ones(32, np.float32), "b": np.zeros(32, np.float32)},
                  {"x": QuantParams("int8", (sx,), (-1,)), "y": QuantParams("int8", (sy,), (-7,))})
    codes = np.random.default_rng(16).integers(-128, 128, (1, 16, 32))
    x = ((codes + 1) * sx).astype(np.float32)

    def layer_norm(v):
        d = v - v.mean(-1, keepdims=True)
        return np.clip(np.rint(d / np.sqrt((d * d).mean(-1, keepdims=True) + np.float32(1e-5)) / sy) - 7, -128, 127)

    (y,) = Executor(graph, "float16").run([x])
    np.testing.assert_array_equal(np.rint(y / sy) - 7, layer_norm(x))
    assert np.any(layer_norm(x.astype(np.float16).astype(np.float32)) != layer_norm(x))
