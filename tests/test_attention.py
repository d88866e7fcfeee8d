"""Scaled dot-product attention as RKNN-Toolkit2 compiles it, one exSDPAttention
(``rknnlite.model.attention``), against its simulator (tests/data/vendor_fp16/README.md,
tests/data/vendor_int8/README.md): in float16 builds the scores and probabilities stay float32
and the output is rounded once; in int8 builds the unscaled scores and the probabilities get
int8 grids of their own and the scale and mask apply in float between them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from float16_compare import assert_float16_matches  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.backends.software.executor import Executor  # noqa: E402
from rknnlite.backends.software.float16_rules import attention_intermediates  # noqa: E402
from rknnlite.model.graph import Graph, Node  # noqa: E402

_FP16 = Path(__file__).parent / "data" / "vendor_fp16"
_INT8 = Path(__file__).parent / "data" / "vendor_int8"


def _attention_graph(sim, form: str):
    """Two-head attention of ``x`` (1x16x32) as a transformer exports it: ``Linear`` q, k, v (MatMul
    and bias Add), Reshape/Transpose to heads, ``Softmax(q kᵀ * 0.25 [+ mask])``, ``p v``, back."""
    T, C, H = 16, 32, 2
    nodes, inits = [], [numpy_helper.from_array(np.array([1, T, H, C // H], np.int64), "heads"),
                        numpy_helper.from_array(np.array([1, T, C], np.int64), "tokens"),
                        numpy_helper.from_array(np.array(0.25, np.float32), "scale")]
    for n in "qkv":
        inits += [numpy_helper.from_array(sim[f"attn_{form}_w{n}"], f"w{n}"),
                  numpy_helper.from_array(sim[f"attn_{form}_b{n}"], f"b{n}")]
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}m"]), helper.make_node("Add", [f"{n}m", f"b{n}"], [f"{n}a"]),
                  helper.make_node("Reshape", [f"{n}a", "heads"], [f"{n}r"]),
                  helper.make_node("Transpose", [f"{n}r"], [n], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["s"]),
              helper.make_node("Mul", ["s", "scale"], ["ss" if form == "mul" else "sm"])]
    if form == "mask":
        inits.append(numpy_helper.from_array(np.triu(np.full((T, T), -1e4, np.float32), 1), "mask"))
        nodes.append(helper.make_node("Add", ["sm", "mask"], ["ss"]))
    nodes += [helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), helper.make_node("Reshape", ["ot", "tokens"], ["y"])]
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, C])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def test_yolo11_attention_is_the_vendors_exsdpattention(run_unquantized_build):
    """YOLO11's C2PSA attention on a 4-D input (a qkv 1x1 conv, Reshape, Split, ``v`` times the
    transposed probabilities, scale ``8 ** -0.5``): one exSDPAttention in the vendor's file, with
    the scale float32.  Every value equal to the simulator's (52 % before; 79 % with the scale
    rounded to float16)."""
    sim = np.load(_FP16 / "psa_sim.npz")
    C, N, heads, kd, hd = 32, 16, 2, 8, 16
    inits = [numpy_helper.from_array(sim["w"], "w"), numpy_helper.from_array(sim["b"], "b"),
             numpy_helper.from_array(np.array([1, heads, 2 * kd + hd, N], np.int64), "shp"),
             numpy_helper.from_array(np.array([kd, kd, hd], np.int64), "sizes"),
             numpy_helper.from_array(np.array(kd ** -0.5, np.float32), "scale"),
             numpy_helper.from_array(np.array([1, C, 4, 4], np.int64), "shp2")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["qkv"]), helper.make_node("Reshape", ["qkv", "shp"], ["r"]),
             helper.make_node("Split", ["r", "sizes"], ["q", "k", "v"], axis=2),
             helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["qt", "k"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]), helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("Transpose", ["p"], ["pt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["v", "pt"], ["o"]),
             helper.make_node("Reshape", ["o", "shp2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    (y,) = run_unquantized_build(g, [sim["x"]])
    assert_float16_matches(y, sim["vendor"])


@pytest.mark.parametrize("form", ["mul", "mask"])
def test_attention_is_the_vendors_exsdpattention(form, run_unquantized_build):
    """The q, k and v Linears add their float32 bias to the unrounded product (one 1x1 conv in the
    vendor's file) and the attention rounds only its output (exSDPAttention, with a causal mask
    as its 4th input): every value equal to the simulator's (33 % before, 73 % with the
    attention's rule alone)."""
    sim = np.load(_FP16 / "attention_sim.npz")
    (y,) = run_unquantized_build(_attention_graph(sim, form), [sim[f"attn_{form}_x"]])
    assert_float16_matches(y, sim[f"attn_{form}_vendor"])


def _mm(a, b, y):
    return Node("MatMul", f"mm_{y}", [a, b], [y])


@pytest.mark.parametrize("nodes, kept", [
    ([_mm("q", "k", "s"), Node("Mul", "m", ["s", "c"], ["t"]), Node("Softmax", "sm", ["t"], ["p"], {"axis": -1}),
      _mm("p", "v", "y")], {"s", "t", "p", "c"}),
    ([_mm("q", "k", "s"), Node("Div", "d", ["s", "c"], ["t"]), Node("Add", "a", ["t", "mask"], ["u"]),
      Node("Softmax", "sm", ["u"], ["p"]), _mm("p", "v", "y")], {"s", "t", "u", "p", "c", "mask"}),  # opset 13's default
    ([_mm("q", "k", "s"), Node("Mul", "m", ["c", "s"], ["t"]), Node("Softmax", "sm", ["t"], ["p"], {"axis": -1}),
      Node("Transpose", "tr", ["p"], ["pt"], {"perm": [0, 1, 3, 2]}), _mm("v", "pt", "y")],
     {"s", "t", "p", "pt", "c"}),  # YOLO11's v · pᵀ
    ([_mm("q", "k", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": -1}),
      Node("Transpose", "tr", ["p"], ["pt"], {"perm": [1, 0, 2, 3]}), _mm("v", "pt", "y")], set()),  # not the last two
    ([_mm("q", "k", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": -1}),
      Node("Transpose", "tr", ["p"], ["pt"], {"perm": [0, 1, 3, 2]}), _mm("pt", "v", "y")], set()),  # pᵀ first
    ([_mm("q", "k", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": -1}), _mm("p", "v", "y")], {"s", "p"}),
    ([_mm("q", "k", "s"), Node("Div", "d", ["c", "s"], ["t"]), Node("Softmax", "sm", ["t"], ["p"], {"axis": -1}),
      _mm("p", "v", "y")], set()),  # c / s is no scale
    ([_mm("q", "k", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": 1, "_opset": 11}), _mm("p", "v", "y")],
     set()),  # not over the last axis
    ([_mm("q", "k", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": -1}), _mm("v", "p", "y")], set()),  # p second
    ([_mm("q", "w", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": -1}), _mm("p", "v", "y")], set()),  # constant k
    ([_mm("q", "k", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": -1}), _mm("p", "v", "y"),
      Node("Relu", "r", ["p"], ["z"])], set()),  # the probabilities read elsewhere too
])
def test_attention_intermediates_are_the_links_of_one_attention(nodes, kept):
    consts = {"c": np.array(4.0, np.float32), "mask": np.zeros((4, 4), np.float32), "w": np.ones((4, 4), np.float32)}
    graph = Graph(nodes, ["q", "k", "v"], [n.outputs[0] for n in nodes if n.outputs[0] in ("y", "z")], consts)
    assert attention_intermediates(graph) == kept


def test_float16_mode_reads_the_attention_probabilities_unrounded():
    """The second MatMul multiplies the float32 probabilities (no ``_half_input`` rounding) and
    only the output is rounded."""
    nodes = [_mm("q", "k", "s"), Node("Softmax", "sm", ["s"], ["p"], {"axis": -1}), _mm("p", "v", "y")]
    graph = Graph(nodes, ["q", "k", "v"], ["y"], {})
    rng = np.random.default_rng(4)
    half = lambda v: v.astype(np.float16).astype(np.float32)  # noqa: E731
    q, k, v = (half(rng.standard_normal((1, 2, 8, 8)).astype(np.float32) * 2) for _ in range(3))
    (y,) = Executor(graph, "float16").run([q, k, v])
    s = q @ k
    e = np.exp(s - s.max(-1, keepdims=True))
    want = half((e / e.sum(-1, keepdims=True)) @ v)
    assert np.mean(y == want) >= 0.99 and np.abs(y - want).max() <= 2.0 ** -10
    rounded = half(half(half(e / e.sum(-1, keepdims=True)) @ v))
    assert np.mean(y == rounded) < 0.9


def test_int8_attention_is_the_vendors_exsdpattention(run_calibrated_build):
    """Calibrated int8 build of the two-head attention: the unscaled scores on the grid of their
    calibrated range (the vendor's ``q_matmul``), the scale in float, the probabilities on an
    int8 grid over ``[0, max]`` (``q_softmax``): every value equal to the simulator's (76 % with
    the probabilities float and the scaled scores on a grid of their own)."""
    fp16, sim = np.load(_FP16 / "attention_sim.npz"), np.load(_INT8 / "attention_sim.npz")
    (y,) = run_calibrated_build(_attention_graph(fp16, "mul"), sim["cal"], [sim["x"]])
    np.testing.assert_array_equal(y, sim["vendor"])


def test_quantize_graph_gives_an_attention_the_vendors_grids():
    """The scores keep their calibrated grid, the scaled and masked scores none, the
    probabilities (and their transpose) an int8 grid over [0, max]; a Softmax that is no
    attention's stays float."""
    from rknnlite.toolkit.quantize import quantize_graph

    nodes = [_mm("q", "k", "s"), Node("Mul", "m", ["s", "c"], ["t"]), Node("Add", "a", ["t", "mask"], ["u"]),
             Node("Softmax", "sm", ["u"], ["p"], {"axis": -1}),
             Node("Transpose", "tr", ["p"], ["pt"], {"perm": [0, 1, 3, 2]}), _mm("v", "pt", "y"),
             Node("Softmax", "sm2", ["y"], ["z"], {"axis": -1})]
    consts = {"c": np.array(0.3, np.float32), "mask": np.zeros((4, 4), np.float32)}
    graph = Graph(nodes, ["q", "k", "v"], ["z"], consts)
    ranges = {n: (-2.0, 3.0) for n in ("q", "k", "v", "s", "t", "u", "y", "z")}
    ranges.update(p=(0.001, 0.7), pt=(0.001, 0.7))
    quant = quantize_graph(graph, ranges)
    assert "s" in quant and "y" in quant and not {"t", "u", "z"} & set(quant)
    for name in ("p", "pt"):
        assert quant[name].zero_point == (-128,) and quant[name].scale[0] == pytest.approx(0.7 / 255)
