"""Portable int8 convs and dense layers summed exactly, as the NPU does (integer_convs)."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.integer_convs import integer_convs
from rknnlite.model.graph import Graph, Node
from rknnlite.model.spec import QuantParams

RNG = np.random.default_rng(2026)
Q_X = QuantParams("int8", (0.013,), (-7,))
Q_Y = QuantParams("int8", (0.05,), (4,))


def _codes(v, scale, zp):
    return np.clip(np.rint(np.float32(v) / np.float32(scale)) + zp, -128, 127).astype(np.int64)


def _per_channel(w, axis=0):
    moved = np.moveaxis(w, axis, 0)
    scales = tuple(float(s) for s in np.abs(moved).reshape(moved.shape[0], -1).max(axis=1) / 127)
    return QuantParams("int8", scales, (0,) * len(scales), axis=axis)


def _requant(acc, multiplier, qmin=-128, qmax=127):
    """The NPU's conversion: ``rint(acc * M[c])`` in double, clamped: the output's codes ``q - zp``."""
    zp = Q_Y.zero_point[0]
    return np.clip(np.rint(acc * multiplier) + zp, qmin, qmax) - zp


def codes_of(out):
    """The executor's int8 output (real values ``(q - zp) * scale``) as its codes ``q - zp``."""
    codes = np.rint(out / np.float32(Q_Y.scale[0]))
    np.testing.assert_allclose(out, codes * np.float32(Q_Y.scale[0]), rtol=1e-6)
    return codes


def accumulator(x, w, b, qw, pads, group=1):
    """The int64 accumulator of an int8 conv: int8 codes summed exactly, plus the int32 bias
    ``rint(b / (s_x s_w[c]))``."""
    s_w = np.asarray(qw.scale, np.float64)
    cx = _codes(x, Q_X.scale[0], Q_X.zero_point[0]) - Q_X.zero_point[0]
    cw = np.stack([_codes(w[c], s_w[c], 0) for c in range(w.shape[0])])
    xp = np.pad(cx, ((0, 0), (0, 0), (pads, pads), (pads, pads)))
    n, _, h, wd = x.shape
    kh, kw = w.shape[2:]
    oh, ow = h + 2 * pads - kh + 1, wd + 2 * pads - kw + 1
    per_in, per_out = w.shape[1], w.shape[0] // group
    acc = np.zeros((n, w.shape[0], oh, ow), np.int64)
    for g in range(group):
        xs = xp[:, g * per_in:(g + 1) * per_in]
        ws = cw[g * per_out:(g + 1) * per_out]
        for i in range(kh):
            for j in range(kw):
                acc[:, g * per_out:(g + 1) * per_out] += np.einsum("nchw,mc->nmhw", xs[:, :, i:i + oh, j:j + ow],
                                                                 ws[:, :, i, j])
    return acc + np.rint(b.astype(np.float64) / (Q_X.scale[0] * s_w)).astype(np.int64).reshape(1, -1, 1, 1)


def conv_reference(x, w, b, qw, pads, group=1, qmin=-128, qmax=127):
    """The output codes of an int8 conv: its exact accumulator, converted once."""
    multiplier = Q_X.scale[0] * np.asarray(qw.scale, np.float64) / Q_Y.scale[0]
    return _requant(accumulator(x, w, b, qw, pads, group), multiplier.reshape(1, -1, 1, 1), qmin, qmax)


def conv_graph(w, b, qw, pads, group=1, activation=None):
    attrs = {"pads": [pads] * 4, "group": group, **(activation or {})}
    nodes = [Node("Conv", "conv", ["x", "w", "b"], ["y"], attrs)]
    return Graph(nodes, ["x"], ["y"], {"w": w, "b": b}, {"x": Q_X, "y": Q_Y, "w": qw})


def _grid_input(shape):
    """A float32 input already on the input's int8 grid (as a quantized graph input is staged)."""
    q = RNG.integers(-128, 128, shape)
    return ((q - Q_X.zero_point[0]) * Q_X.scale[0]).astype(np.float32)


@pytest.mark.parametrize("float_dtype", ["float16", "float32"])
def test_conv_equals_integer_accumulation_on_every_element(float_dtype):
    # 64 input channels x 3 x 3: float32 sums of real values leave ~0.3 % of outputs one step off;
    # the accumulators reach ~10^5, which float16 would round (its spacing there is 64)
    w = (RNG.standard_normal((48, 64, 3, 3)) * 0.05).astype(np.float32)
    b = (RNG.standard_normal(48) * 0.3).astype(np.float32)
    qw = _per_channel(w)
    x = _grid_input((1, 64, 12, 12))
    state = Executor(conv_graph(w, b, qw, 1), float_dtype).new_state()
    for _ in range(2):  # unplanned, then planned
        np.testing.assert_array_equal(codes_of(state.run([x])[0]), conv_reference(x, w, b, qw, 1))


def test_depthwise_conv_with_fused_relu_and_clip_takes_the_code_range():
    w = (RNG.standard_normal((16, 1, 3, 3)) * 0.2).astype(np.float32)
    b = (RNG.standard_normal(16) * 0.5).astype(np.float32)
    qw = _per_channel(w)
    x = _grid_input((1, 16, 9, 9))
    zp = Q_Y.zero_point[0]
    relu = Executor(conv_graph(w, b, qw, 1, 16, {"_activation": "Relu"}), "float16").run([x])[0]
    np.testing.assert_array_equal(codes_of(relu), conv_reference(x, w, b, qw, 1, 16, qmin=zp))
    clip = {"_activation": "Clip", "_activation_min": 0.0, "_activation_max": 2.0}
    clipped = Executor(conv_graph(w, b, qw, 1, 16, clip), "float16").run([x])[0]
    np.testing.assert_array_equal(codes_of(clipped), conv_reference(x, w, b, qw, 1, 16, qmin=zp, qmax=zp + 40))
    assert relu.min() == 0 and 0 <= clipped.min() and clipped.max() <= 2.0


@pytest.mark.parametrize("relu", [False, True])
def test_conv_with_residual_adds_it_to_the_exact_accumulator(relu):
    """ConvAdd[Relu] as the vendor's: ``acc * s_x * s_w[c] + r`` in float32, then the output grid."""
    w = (RNG.standard_normal((8, 32, 3, 3)) * 0.05).astype(np.float32)
    b = (RNG.standard_normal(8) * 0.3).astype(np.float32)
    qw = _per_channel(w)
    attrs = {"pads": [1] * 4, "_residual": True, **({"_activation": "Relu"} if relu else {})}
    g = Graph([Node("Conv", "conv", ["x", "w", "b", "r"], ["y"], attrs)], ["x", "r"], ["y"], {"w": w, "b": b},
              {"x": Q_X, "y": Q_Y, "w": qw})
    # a float residual, already at float16 (the storage of an unquantized tensor in float16 mode)
    x, r = _grid_input((1, 32, 10, 10)), RNG.uniform(-1, 1, (1, 8, 10, 10)).astype(np.float16).astype(np.float32)
    assert [n.op for n in integer_convs(g)[0].nodes] == ["VendorCodes", "Conv", "VendorAddRequant"]
    step = (Q_X.scale[0] * np.asarray(qw.scale)).astype(np.float32).reshape(1, -1, 1, 1)
    v = accumulator(x, w, b, qw, 1).astype(np.float32) * step + r
    if relu:
        v = np.maximum(v, 0)
    zp = Q_Y.zero_point[0]
    expect = np.clip(np.rint(v / np.float32(Q_Y.scale[0])) + zp, -128, 127) - zp
    np.testing.assert_array_equal(codes_of(Executor(g, "float16").run([x, r])[0]), expect)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_equals_integer_accumulation(trans_b):
    k, n = 1024, 64
    w = (RNG.standard_normal((n, k) if trans_b else (k, n)) * 0.05).astype(np.float32)
    b = (RNG.standard_normal(n) * 0.2).astype(np.float32)
    qw = _per_channel(w, axis=0 if trans_b else 1)
    nodes = [Node("Gemm", "fc", ["x", "w", "b"], ["y"], {"transB": trans_b})]
    g = Graph(nodes, ["x"], ["y"], {"w": w, "b": b}, {"x": Q_X, "y": Q_Y, "w": qw})
    x = _grid_input((16, k))
    as_conv = (w if trans_b else w.T)[:, :, None, None]
    expect = conv_reference(x[:, :, None, None], as_conv, b, qw, 0)[:, :, 0, 0]
    np.testing.assert_array_equal(codes_of(Executor(g, "float16").run([x])[0]), expect)


@pytest.mark.parametrize("case", ["leaky", "uint8 input", "per-channel output", "weight not quantized",
                                  "bias quantized", "gemm alpha", "residual with clip"])
def test_other_convs_keep_the_real_valued_computation(case):
    w = (RNG.standard_normal((4, 3, 1, 1)) * 0.1).astype(np.float32)
    b = np.zeros(4, np.float32)
    quant = {"x": Q_X, "y": Q_Y, "w": _per_channel(w)}
    op, attrs, inputs = "Conv", {}, ["x", "w", "b"]
    if case == "leaky":
        attrs = {"_activation": "LeakyRelu"}
    elif case == "uint8 input":
        quant["x"] = QuantParams("uint8", (0.01,), (128,))
    elif case == "per-channel output":
        quant["y"] = QuantParams("int8", (0.05,) * 4, (0,) * 4, axis=1)
    elif case == "weight not quantized":
        del quant["w"]
    elif case == "bias quantized":
        quant["b"] = QuantParams("int8", (0.01,), (0,))
    elif case == "gemm alpha":
        op, attrs, w = "Gemm", {"alpha": 0.5, "transB": 1}, w[:, :, 0, 0]
        quant["w"] = _per_channel(w)
    else:
        inputs, attrs = ["x", "w", "b", "x"], {"_residual": True, "_activation": "Clip", "_activation_max": 6.0}
    g = Graph([Node(op, "n", inputs, ["y"], attrs)], ["x"], ["y"], {"w": w, "b": b}, quant)
    assert integer_convs(g) == (g, frozenset())


def test_input_codes_are_computed_once_for_two_readers():
    w = (RNG.standard_normal((4, 3, 1, 1)) * 0.1).astype(np.float32)
    b = np.zeros(4, np.float32)
    qw = _per_channel(w)
    nodes = [Node("Conv", "a", ["x", "w", "b"], ["y"], {}), Node("Conv", "b", ["x", "w", "b"], ["z"], {})]
    g = Graph(nodes, ["x"], ["y", "z"], {"w": w, "b": b}, {"x": Q_X, "y": Q_Y, "z": Q_Y, "w": qw})
    rewritten, _ = integer_convs(g)
    assert [n.op for n in rewritten.nodes].count("VendorCodes") == 1
    x = _grid_input((1, 3, 4, 4))
    y, z = Executor(g, "float32").run([x])
    np.testing.assert_array_equal(codes_of(y), conv_reference(x, w, b, qw, 0))
    np.testing.assert_array_equal(y, z)


def _conv_onnx(path, bias):
    from onnx import TensorProto, helper, numpy_helper, save

    w = (RNG.standard_normal((bias.size, 3, 3, 3)) * 0.2).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))


@pytest.mark.parametrize("quantize", [True, False])
def test_float16_build_keeps_the_bias_of_an_int8_conv_at_float32(tmp_path, quantize):
    """The NPU holds an int8 conv's bias as int32 in accumulator units: rounded to float16 a bias of
    20,000 units would move by up to 10.  A float16 (unquantized) build keeps it float32 too, as
    the vendor's simulator does (tests/test_vendor_agreement.py)."""
    from rknnlite.model.loader import load_model
    from rknnlite.toolkit import RKNN

    bias = np.float32([0.1234567, -0.7654321, 0.3333333, 1.0000001])
    _conv_onnx(tmp_path / "m.onnx", bias)
    np.save(tmp_path / "x.npy", RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("x.npy\n")
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(str(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=quantize, dataset=str(tmp_path / "dataset.txt")) == 0
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    graph = load_model(str(tmp_path / "m.rknn")).model.graph
    conv = next(n for n in graph.nodes if n.op == "Conv")
    stored = np.asarray(graph.constants[conv.inputs[2]])
    assert conv.inputs[2] in graph.biases()
    np.testing.assert_array_equal(stored, bias)  # float32 in either build, as the vendor's simulator keeps it
