"""How the vendor computes an int8 Conv + HardSwish, and rknnlite's portable int8 path doing the same (issue 21).

The vendor fuses the pair into ``ConvHardSwish``.  On the NPU it runs through the DPU lookup
table (``rknnlite/model/rknn_graph/lut.py``); RKNN-Toolkit2 2.5.0's simulator does not: it
applies the exact function to the conv's real accumulator, with no int8 grid in between, and
after a depthwise conv to the conv output put on the int8 grid the toolkit calibrated for it.
``tests/data/vendor_lut/conv_hardswish_sim.npz`` holds three tiny rk3588 models' quantization
and their simulator outputs (``tools/vendor_corpus/hardswish_sim.py``; README there).

The tables and registers of the vendor files follow a fixed rule (checked on the corpus file
``conv_hardswish_i8``): nothing in the tables depends on the model, and the index map and
output conversion are the accumulator step and the output scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.integer_convs import integer_convs
from rknnlite.model.graph import Graph, Node
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower_rockchip
from rknnlite.model.spec import QuantParams

from corpus import CORPUS

DATA = Path(__file__).parent / "data" / "vendor_lut" / "conv_hardswish_sim.npz"


def _case(name):
    with np.load(DATA) as z:
        return {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(name + "/")}


def _portable(case, pre_is_output=False, second_reader=False):
    """The case as a portable int8 graph: Conv -> HardSwish with the vendor's quantization
    (the conv output ``pre`` on the grid the toolkit calibrated for it)."""
    sx, zx, sp, zp, sy, zy = case["quant"]
    codes, sw, zw = case["w_codes"].astype(np.float64), case["w_scale"], case["w_zero_point"]
    group = int(case["group"])
    weight = (codes * sw[:, None, None, None]).astype(np.float32)
    bias = (case["bias_acc"] * sx * sw).astype(np.float32)
    quant = {"x": QuantParams("int8", (sx,), (int(zx),)), "pre": QuantParams("int8", (sp,), (int(zp),)),
             "y": QuantParams("int8", (sy,), (int(zy),)),
             "w": QuantParams("int8", tuple(sw.tolist()), tuple(int(v) for v in zw), axis=0)}
    nodes = [Node("Conv", "conv", ["x", "w", "b"], ["pre"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                              "strides": [1, 1], "group": group}),
             Node("HardSwish", "hswish", ["pre"], ["y"])]
    outputs = ["y"]
    if pre_is_output:
        outputs.append("pre")
    if second_reader:
        nodes.append(Node("Relu", "relu", ["pre"], ["r"]))
        outputs.append("r")
    return Graph(nodes, ["x"], outputs, {"w": weight, "b": bias}, quant)


def _codes(graph, case):
    sx, zx, _, _, sy, zy = case["quant"]
    x = ((np.clip(np.rint(case["x"] / sx) + zx, -128, 127) - zx) * sx).astype(np.float32)
    y = Executor(graph, "float32").run([x])[0]
    return np.rint(y / np.float32(sy)).astype(np.int64) + int(zy)


@pytest.mark.parametrize("name", ["c0", "c2"])
def test_conv_hard_swish_equals_the_vendor_simulator(name):
    # c0: pre-activation range about [-5, 4]; c2: about [-150, 130]
    case = _case(name)
    got = _codes(_portable(case), case)
    np.testing.assert_array_equal(got, case["sim"])  # on pre's grid first: 81.6 % and 86.8 % of the codes


def test_depthwise_conv_hard_swish_keeps_the_conv_output_grid():
    case = _case("c4")
    assert int(case["group"]) == 8
    np.testing.assert_array_equal(_codes(_portable(case), case), case["sim"])  # the real accumulator: 76.7 %


def test_the_rewrite_feeds_the_real_accumulator_only_to_a_sole_hard_swish():
    case = _case("c0")
    rewritten, keep = integer_convs(_portable(case))
    ops = [n.op for n in rewritten.nodes]
    assert ops == ["VendorCodes", "Conv", "Mul", "HardSwish"]
    mul, hswish = rewritten.nodes[2], rewritten.nodes[3]
    assert mul.outputs == hswish.inputs == ["pre"] and "pre" not in rewritten.quant
    assert {"pre", mul.inputs[1]} <= keep  # float32 in float16 mode too
    np.testing.assert_allclose(rewritten.constants[mul.inputs[1]].ravel(), case["quant"][0] * case["w_scale"],
                               rtol=1e-6)
    for graph in (_portable(case, second_reader=True), _portable(_case("c4"))):
        assert "Mul" not in [n.op for n in integer_convs(graph)[0].nodes]  # the conv output keeps its grid


def test_the_conv_output_as_a_graph_output_is_the_real_accumulator():
    # as accuracy_analysis asks for every tensor, and as the vendor's snapshot shows it
    case = _case("c0")
    graph = _portable(case, pre_is_output=True)
    sx, zx = case["quant"][:2]
    x = ((np.clip(np.rint(case["x"] / sx) + zx, -128, 127) - zx) * sx).astype(np.float32)
    y, pre = Executor(graph, "float32").run([x])
    assert len(np.unique(pre)) > 2000  # not on pre's grid (step sp): 2,304 values
    np.testing.assert_array_equal(np.rint(y / np.float32(case["quant"][4])).astype(np.int64) + int(case["quant"][5]),
                                  case["sim"])


def _hswish(v):
    return v * np.clip(v + 3, 0, 6) / 6


needs_corpus = pytest.mark.skipif(not (CORPUS / "conv_hardswish_i8.rknn").is_file(), reason="no vendor corpus")


@needs_corpus
def test_vendor_hard_swish_tables_and_registers_follow_a_fixed_rule():
    loaded = load_model(str(CORPUS / "conv_hardswish_i8.rknn"))
    graph = lower_rockchip(loaded.payload, loaded.model).graph
    lut = next(n for n in graph.nodes if n.op == "VendorLutActivation").attrs
    # 32767 table units = 3.0 of output, 16384 index units = 3.0 of input; 1025 of the 1026 entries
    le, lo = (np.rint(_hswish(np.arange(a, b + 1, 32) * 3 / 16384) * 32767 / 3) for a, b in ((-16384, 0), (0, 16384)))
    np.testing.assert_array_equal(lut["le_table"], le)
    off = np.nonzero(np.asarray(lut["lo_table"]) != lo)[0]
    assert off.tolist() == [422] and lut["lo_table"][422] - lo[422] == 1  # 24633.498 stored as 24634
    assert lut["lo_oflow_slope"] == 2.0 and lut["le_uflow_slope"] == 0.0 and lut["index_offset"] == 0.0
    # the index map: the accumulator step (input scale x per-channel weight scale) times 16384/3
    w = numpy_helper.to_array(next(i for i in onnx.load(str(CORPUS / "onnx" / "conv_hardswish.onnx")).graph.initializer
                                   if i.dims and len(i.dims) == 4)).astype(np.float64)
    flat = w.reshape(len(w), -1)
    step = graph.quant["x"].scale[0] * (flat.max(1) - flat.min(1)) / 255
    np.testing.assert_allclose(lut["index_scale"], step * 16384 / 3, rtol=2e-4)
    # the output conversion: table units to the output's codes, 3 / 32768 per output scale
    np.testing.assert_allclose(lut["out_multiplier"], 3 / (32768 * lut["out_scale"]), rtol=2e-4)
