"""int8 vendor convs run as the NPU does: the exact integer accumulator, then one conversion per
channel (rknnlite/model/rknn_graph/accumulator.py; the VendorCodes and VendorRequant kernels).

Summing dequantized float32 products instead rounded in an order the CPU's SIMD path chose,
so int8 outputs near a rounding boundary differed between machines.
"""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import ModelInvalidError
from rknnlite._native import conv_kernels as ck
from rknnlite._native.executor_kernels import add_requant_channels, int8_codes, requant_channels
from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.ops import KERNELS
from rknnlite.model.graph import Graph, Node
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower_rockchip
from rknnlite.model.rknn_graph.accumulator import FLOAT32_EXACT, Accumulator, fuse_codes
from rknnlite.model.spec import QuantParams

from corpus import CORPUS, corpus_arrays

needs_corpus = pytest.mark.skipif(not (CORPUS / "bench_i8.rknn").is_file(), reason="no vendor corpus")


def _lowered(stem: str):
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    return lower_rockchip(loaded.payload, loaded.model)


def _run(stem: str):
    data = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        return ctx.run([data[f"in{k}"] for k in range(len(ctx.inputs))], data_format="nchw")


def _int64_conv(codes: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    """An independent int64 conv (NCHW, one sample, group 1 or depthwise)."""
    pad, stride, group = attrs["pads"], attrs["strides"], attrs["group"]
    xp = np.pad(codes, ((0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    kh, kw = w.shape[2:]
    ho = (xp.shape[1] - kh) // stride[0] + 1
    wo = (xp.shape[2] - kw) // stride[1] + 1
    out = np.zeros((w.shape[0], ho, wo), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + stride[0] * ho:stride[0], j:j + stride[1] * wo:stride[1]]
            if group == 1:
                out += np.einsum("oc,chw->ohw", w[:, :, i, j], patch)
            else:
                out += w[:, 0, i, j].reshape(-1, 1, 1) * patch
    return out


@needs_corpus
@pytest.mark.parametrize("stem", ["conv_sigmoid_i8", "conv_relu6_i8", "mbblock_i8", "convnet_rk3576_i8",
                                  "mbblock_i8_layer"])
def test_the_accumulator_is_the_exact_integer_sum(stem):
    lowered = _lowered(stem)
    g = lowered.graph
    first = next(k for k, n in enumerate(g.nodes) if n.op == "Conv")
    codes_node, conv = g.nodes[first - 1], g.nodes[first]
    assert codes_node.op == "VendorCodes" and conv.inputs[0] == codes_node.outputs[0]
    assert conv.attrs["_winograd"] is False  # Winograd's transforms are not integer
    head = Graph(g.nodes[:first + 1], list(g.inputs), [conv.outputs[0]], g.constants, g.quant)
    raw = corpus_arrays(stem)["in0"]  # NCHW, the lowered graph's layout
    x = lowered.graph_inputs([raw])[0]  # normalised with the file's mean/std
    (acc,) = Executor(head, float_dtype="float32").run([x])
    # the same sum in int64 from the input's codes, the integer weights and bias of the graph
    q = g.quant[g.inputs[0]]
    codes = np.clip(np.rint(x / q.scale[0]) + q.zero_point[0], -128, 127).astype(np.int64) - q.zero_point[0]
    w = g.constants[conv.inputs[1]].astype(np.int64)
    b = g.constants[conv.inputs[2]].astype(np.int64)
    assert np.array_equal(w, g.constants[conv.inputs[1]]) and np.array_equal(b, g.constants[conv.inputs[2]])
    want = _int64_conv(codes[0], w, conv.attrs) + b.reshape(-1, 1, 1)
    assert np.abs(want).max() > 1000  # a real accumulator, not a degenerate one
    np.testing.assert_array_equal(acc[0], want.astype(np.float32))


@needs_corpus
def test_a_plain_int8_conv_is_its_accumulator_times_the_register_multiplier():
    # conv_relu6: one conv, Clip(0, 6) as the code range; q = clip(rint(acc * m[c]) + zp), m from the registers
    g = _lowered("conv_relu6_i8").graph
    assert [n.op for n in g.nodes] == ["VendorCodes", "Conv", "VendorRequant"]
    requant = g.nodes[2].attrs
    assert requant["qmin"] == requant["zero_point"] == -128  # Relu6's 0 is the zero point
    assert requant["qmax"] == -128 + round(6 / requant["scale"])
    m = np.asarray(requant["multiplier"])
    assert m.shape == (20,) and np.all(m > 0) and len(np.unique(m)) > 1  # one multiplier per channel


@needs_corpus
@pytest.mark.parametrize("stem", ["bench_i8", "conv_add_relu_i8_layer", "convnet_i8", "deconv_k2s2_i8", "mbblock_i8",
                                  "conv_add_relu_i8", "convnet_rk3576_i8"])
def test_int8_files_give_the_same_codes_on_every_isa_path_this_cpu_runs(stem, set_kernel_isa):
    results = {}
    for level in range(ck.gemm_isa() + 1):  # generic, avx2, avx512: the float32 sums run in other orders
        set_kernel_isa(level)  # what RKNNLITE_ISA sets when the process starts
        results[level] = _run(stem)
    for level, outputs in results.items():
        for y, ref in zip(outputs, results[0]):
            np.testing.assert_array_equal(y, ref, err_msg=f"{stem}: ISA level {level} differs from the generic path")


@needs_corpus
@pytest.mark.parametrize("stem", ["bench_i8", "mbblock_i8", "c2f_i8", "convnet_i8"])
def test_fused_codes_give_the_same_outputs_with_fewer_passes(stem):
    data = corpus_arrays(stem)
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    runs = {}
    for fuse in (False, True):
        model = lower_rockchip(loaded.payload, loaded.model, fuse=fuse)
        inputs = model.graph_inputs([data[f"in{k}"] for k in range(len(model.graph.inputs))])
        runs[fuse] = ([n.op for n in model.graph.nodes].count("VendorCodes"),
                      Executor(model.graph, float_dtype="float32").run(inputs))
    assert runs[True][0] < runs[False][0]  # a requantization or lookup table wrote the next conv's codes
    for fused, plain in zip(runs[True][1], runs[False][1]):
        np.testing.assert_array_equal(fused, plain)


def test_codes_are_fused_only_into_their_one_writer_on_the_same_grid():
    def graph(scale=0.5, outputs=("y",), extra_reader=False):
        nodes = [Node("VendorRequant", "a", ["acc"], ["t"], {"multiplier": [1.0], "zero_point": 3, "scale": 0.5,
                                                             "qmin": -128, "qmax": 127}),
                 Node("VendorCodes", "b", ["t"], ["t__codes"], {"scale": scale}),
                 Node("Conv", "c", ["t__codes", "w"], ["y"], {})]
        if extra_reader:
            nodes.append(Node("Relu", "d", ["t"], ["z"], {}))
        return fuse_codes(nodes, outputs)

    fused = graph()
    assert [n.op for n in fused] == ["VendorRequant", "Conv"]
    assert fused[0].outputs == ["t__codes"] and fused[0].attrs["scale"] == 1.0
    assert [n.op for n in graph(extra_reader=True)][:2] == ["VendorRequant", "VendorCodes"]  # t is read twice
    assert [n.op for n in graph(outputs=("y", "t"))][:2] == ["VendorRequant", "VendorCodes"]  # t is an output
    assert [n.op for n in graph(scale=0.25)][:2] == ["VendorRequant", "VendorCodes"]  # another grid


def test_accumulator_bound_says_when_float32_holds_every_partial_sum():
    w = np.full((2, 4, 3, 3), 127, np.int64)  # 36 products of up to 127 * 255 per channel
    acc = Accumulator(w, np.array([0, 5], np.int64), 0.1, -128)
    assert acc.bound == 36 * 127 * 255 + 5 and acc.exact
    wide = Accumulator(np.full((1, 600, 3, 3), 127, np.int64), np.zeros(1, np.int64), 0.1, 0)
    assert wide.bound == 600 * 9 * 127 * 128 and wide.bound >= FLOAT32_EXACT and not wide.exact


def test_codes_kernel_recovers_the_integer_codes():
    scale = np.float32(0.0371)
    k = np.arange(-255, 256, dtype=np.float32)
    x = (k * scale).astype(np.float32)  # what the executor stores for codes k
    y = np.empty_like(x)
    int8_codes(x, y, float(scale))
    np.testing.assert_array_equal(y, k)
    (z,) = KERNELS["VendorCodes"].fn([x.reshape(1, 1, -1)], KERNELS["VendorCodes"].prepare({"scale": 0.0371}, [None]))
    np.testing.assert_array_equal(z.ravel(), k)


def test_requant_kernel_is_the_exact_product_rounded_per_channel():
    rng = np.random.default_rng(3)
    acc = rng.integers(-(1 << 23), 1 << 23, size=(2, 5, 37)).astype(np.float32)
    m = rng.uniform(1e-6, 4e-5, 5)
    out = np.empty_like(acc)
    requant_channels(acc.reshape(-1), out.reshape(-1), m, 37, -3, 0.05, -100, 90)
    q = np.clip(np.rint(acc.astype(np.float64) * m[None, :, None]) - 3, -100, 90)  # exact in float64
    np.testing.assert_array_equal(out, (q.astype(np.float32) + np.float32(3)) * np.float32(0.05))
    # ties go to even, as the executor's own quantization rounds
    ties = np.empty(3, np.float32)
    requant_channels(np.array([5, 7, -5], np.float32), ties, np.array([0.5]), 3, 0, 1.0)
    np.testing.assert_array_equal(ties, [2, 4, -2])
    with pytest.raises(ValueError, match="rows of 37 in 5 channels"):
        requant_channels(acc.reshape(-1)[:-1], out.reshape(-1)[:-1], m, 37, -3, 0.05)


def test_add_requant_kernel_is_the_mul_add_relu_and_quantization_it_fuses():
    rng = np.random.default_rng(5)
    acc = rng.integers(-(1 << 20), 1 << 20, size=(1, 3, 45)).astype(np.float32)
    res = rng.uniform(-8, 8, size=acc.shape).astype(np.float32)
    step = np.array([3e-6, 7e-6, 1.1e-5], np.float32)
    for relu in (False, True):
        out = np.empty_like(acc)
        add_requant_channels(acc.reshape(-1), res.reshape(-1), out.reshape(-1), step, 45, 5, 0.0625, relu)
        v = acc * step.reshape(1, -1, 1) + res  # float32: the Mul, then the Add
        if relu:
            v = np.maximum(v, np.float32(0))
        q = np.clip(np.rint(v / np.float32(0.0625)) + 5, -128, 127)
        np.testing.assert_array_equal(out, (q - np.float32(5)) * np.float32(0.0625))
    (y,) = KERNELS["VendorAddRequant"].fn([acc, res], KERNELS["VendorAddRequant"].prepare(
        {"step": step.tolist(), "relu": True, "zero_point": 5, "scale": 0.0625, "qmin": -128, "qmax": 127}, [None]))
    np.testing.assert_array_equal(y, out)
    with pytest.raises(ModelInvalidError, match="residual of shape"):
        KERNELS["VendorAddRequant"].fn([acc, res[:, :2]], KERNELS["VendorAddRequant"].prepare(
            {"step": step.tolist(), "relu": False, "zero_point": 0, "scale": 1.0, "qmin": -128, "qmax": 127}, [None]))
    with pytest.raises(ModelInvalidError, match="relu must be a bool"):
        KERNELS["VendorAddRequant"].prepare({"step": [1.0], "relu": "yes", "zero_point": 0, "scale": 1.0,
                                             "qmin": -128, "qmax": 127}, [None])


@pytest.mark.parametrize("attrs, words", [
    ({"multiplier": [], "zero_point": 0, "scale": 1.0, "qmin": -128, "qmax": 127}, "multiplier"),
    ({"multiplier": [1.0, -2.0], "zero_point": 0, "scale": 1.0, "qmin": -128, "qmax": 127}, "multiplier"),
    ({"multiplier": [1.0], "zero_point": 0, "scale": 0.0, "qmin": -128, "qmax": 127}, "scale"),
    ({"multiplier": [1.0], "zero_point": 200, "scale": 1.0, "qmin": -128, "qmax": 127}, "zero_point"),
    ({"multiplier": [1.0], "zero_point": 0, "scale": 1.0, "qmin": 5, "qmax": 4}, "qmax"),
    ({"multiplier": [1.0], "zero_point": 0, "scale": 1.0, "qmin": -128}, "qmax"),
])
def test_bad_requant_attributes_are_refused_by_name(attrs, words):
    with pytest.raises(ModelInvalidError, match=words):
        KERNELS["VendorRequant"].prepare(attrs, [None])


def test_requant_with_the_wrong_channel_count_is_refused():
    spec = KERNELS["VendorRequant"]
    attrs = spec.prepare({"multiplier": [1.0, 2.0], "zero_point": 0, "scale": 1.0, "qmin": -128, "qmax": 127},
                         [None])
    with pytest.raises(ModelInvalidError, match="2 channels"):
        spec.fn([np.zeros((1, 3, 2, 2), np.float32)], attrs)


def _requant_graph(scale: float) -> Graph:
    node = Node("VendorRequant", "rq", ["acc"], ["y"],
                {"multiplier": [0.5, 0.25], "zero_point": 0, "scale": scale, "qmin": -128, "qmax": 127})
    return Graph([node], ["acc"], ["y"], {}, {"y": QuantParams("int8", (0.1,), (0,))})


def test_the_executor_trusts_the_requant_grid_only_when_it_is_the_tensors():
    acc = np.array([3, 10, -7, 100, 4, 8, -9, 1000], np.float32).reshape(1, 2, 2, 2)
    same = Executor(_requant_graph(0.1), float_dtype="float32")
    assert same.steps[0].on_grid  # no second snapping pass
    (y,) = same.run([acc])
    want = np.clip(np.rint(acc.astype(np.float64) * np.array([0.5, 0.25]).reshape(1, 2, 1, 1)), -128, 127)
    np.testing.assert_array_equal(y, (want.astype(np.float32) * np.float32(0.1)))
    other = Executor(_requant_graph(0.3), float_dtype="float32")  # another grid: the tensor's own applies
    assert not other.steps[0].on_grid
    (z,) = other.run([acc])
    written = want.astype(np.float32) * np.float32(0.3)  # VendorRequant's grid, then the tensor's snaps it
    np.testing.assert_array_equal(z, np.clip(np.rint(written / np.float32(0.1)), -128, 127) * np.float32(0.1))
