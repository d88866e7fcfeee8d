"""Quantization-aware ONNX models (QuantizeLinear / DequantizeLinear, ``rknnlite.toolkit.qdq``):
built with the file's own int8 grid (``build(do_quantization=False)``), as RKNN-Toolkit2 builds
Rockchip's pytorch/resnet18_qat example, and compared with onnxruntime running the QDQ model."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.errors import ModelInvalidError  # noqa: E402
from rknnlite.model.spec import QuantParams  # noqa: E402
from rknnlite.toolkit import RKNN
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402
from toolkit_logs import errors  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(23)
S_IN, Z_IN = 0.02, 128     # uint8 input grid
S_OUT, Z_OUT = 0.05, 0     # uint8 output grid (after Relu)


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _pair(x, y, scale, zp, tag):
    """x -> QuantizeLinear -> Cast (as PyTorch's exporter writes it) -> DequantizeLinear -> y."""
    return [helper.make_node("QuantizeLinear", [x, f"s_{tag}", f"z_{tag}"], [f"{tag}_q"]),
            helper.make_node("Cast", [f"{tag}_q"], [f"{tag}_c"], to=TensorProto.UINT8),
            helper.make_node("DequantizeLinear", [f"{tag}_c", f"s_{tag}", f"z_{tag}"], [y])], \
        [_init(f"s_{tag}", np.float32(scale)), _init(f"z_{tag}", np.uint8(zp))]


def qdq_model(weights="int8", out_name="y"):
    """x (1,3,8,8) -> QDQ -> Conv 3x3 (4 out, per-channel int8 weights, int32 bias) -> Relu -> QDQ -> y.
    ``weights="float"``: a float weight through its own QuantizeLinear -> DequantizeLinear."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    s_w = np.abs(w).reshape(4, -1).max(axis=1) / 127
    q_w = np.clip(np.rint(w / s_w[:, None, None, None]), -127, 127).astype(np.int8)
    bias = RNG.standard_normal(4).astype(np.float32) * 0.1
    s_b = (S_IN * s_w).astype(np.float32)
    q_b = np.rint(bias / s_b).astype(np.int32)
    nodes, inits = [], []
    n, i = _pair("x", "xd", S_IN, Z_IN, "in")
    nodes += n
    inits += i
    if weights == "int8":
        nodes.append(helper.make_node("DequantizeLinear", ["wq", "s_w", "z_w"], ["wd"], axis=0))
        inits += [_init("wq", q_w), _init("s_w", s_w.astype(np.float32)), _init("z_w", np.zeros(4, np.int8))]
    else:
        nodes += [helper.make_node("QuantizeLinear", ["wf", "s_w", "z_w"], ["wq"], axis=0),
                  helper.make_node("DequantizeLinear", ["wq", "s_w", "z_w"], ["wd"], axis=0)]
        inits += [_init("wf", w), _init("s_w", s_w.astype(np.float32)), _init("z_w", np.zeros(4, np.int8))]
    nodes.append(helper.make_node("DequantizeLinear", ["bq", "s_b", "z_b"], ["bd"], axis=0))
    inits += [_init("bq", q_b), _init("s_b", s_b), _init("z_b", np.zeros(4, np.int32))]
    nodes += [helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c"], ["r"])]
    n, i = _pair("r", out_name, S_OUT, Z_OUT, "out")
    nodes += n
    inits += i
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info(out_name, F, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _build(model, tmp_path):
    path = tmp_path / "qdq.onnx"
    onnx.save(model, str(path))
    r = RKNN()
    assert r.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[1, 1, 1]]) == 0
    assert r.load_onnx(str(path)) == 0
    assert r.build(do_quantization=False) == 0
    assert r.init_runtime() == 0
    return r, str(path)


def test_calibrating_a_qdq_model_is_refused_as_the_vendor_refuses_it(tmp_path, monkeypatch, caplog):
    """RKNN-Toolkit2 2.5.0 refuses build(do_quantization=True) after a QDQ ONNX, TensorFlow
    FakeQuant or quantized TFLite model ("If a quantized model has been import, please set
    do_quantization = False.", -1) and hybrid_quantization_step1 ("Not support QAT model!",
    -1; probed on a quantized TFLite file): calibrating would replace the model's own grids.
    The object stays usable: the build on the model's grids follows."""
    monkeypatch.chdir(tmp_path)
    onnx.save(qdq_model(), "qdq.onnx")
    for i in range(2):
        np.save(f"s{i}.npy", (RNG.random((1, 3, 8, 8)) * 4 - 2).astype(np.float32))
    (tmp_path / "ds.txt").write_text("s0.npy\ns1.npy\n")
    r = RKNN()
    assert r.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[1, 1, 1]]) == 0
    assert r.load_onnx("qdq.onnx") == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert r.build(do_quantization=True, dataset="ds.txt") == -1
    (msg,) = errors(caplog)
    assert "If a quantized model has been import, please set do_quantization = False" in msg
    assert "carries its own quantization" in msg and "build(do_quantization=False)" in msg
    caplog.clear()  # hybrid_quantization_step1 calibrates too: "Not support QAT model!", -1
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert r.hybrid_quantization_step1(dataset="ds.txt") == -1
    (msg,) = errors(caplog)
    assert "Not support QAT model!" in msg and not list(tmp_path.glob("qdq.*.cfg"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert r.build(do_quantization=False) == 0
    assert not errors(caplog)
    assert r.init_runtime() == 0
    assert r.inference([np.zeros((1, 8, 8, 3), np.float32)])[0].size
    r.release()


@pytest.mark.parametrize("weights", ["int8", "float"])
def test_qdq_model_runs_on_its_own_grid(weights, tmp_path):
    r, path = _build(qdq_model(weights), tmp_path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for k in range(3):
        x = (RNG.random((1, 3, 8, 8)) * 4 - 2).astype(np.float32)
        ref = sess.run(None, {"x": x})[0]
        got = r.inference([x], data_format="nchw")[0]
        # both on the output's grid, at most one step apart (rounding ties of the int8 kernels)
        steps = got / S_OUT
        np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)
        assert np.abs(got - ref).max() <= S_OUT * 1.001
    r.release()


def test_a_reshape_after_the_last_pair_keeps_its_grid(tmp_path):
    """A layout op after the last QuantizeLinear -> DequantizeLinear (TensorFlow-slim's
    ``SpatialSqueeze`` after the logits' FakeQuant in the vendor's tensorflow/inception_v3_qat
    example) moves int8 values: the output is exactly on the grid, as the vendor's int8
    Reshape gives it, not rounded to float16."""
    m = qdq_model(out_name="yq")
    g = m.graph
    g.node.append(helper.make_node("Reshape", ["yq", "flat"], ["y"]))
    g.initializer.append(_init("flat", np.array([1, -1], np.int64)))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("y", F, [1, 256]))
    r, _ = _build(m, tmp_path)
    x = (RNG.random((1, 3, 8, 8)) * 4 - 2).astype(np.float32)
    (got,) = r.inference([x], data_format="nchw")
    assert got.dtype == np.float32 and got.max() > 1.0
    steps = got / np.float32(S_OUT)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-4)
    r.release()


def test_the_files_parameters_are_the_table():
    imported = import_onnx(qdq_model())
    g = imported.graph
    assert not [n for n in g.nodes if n.op in ("QuantizeLinear", "DequantizeLinear", "Cast")]
    q = g.quant
    # uint8 -> int8; zero point 128 is int8 zero point 0: the vendor's symmetric grid (below)
    assert q["x"].scale == pytest.approx((S_IN * 128 / 127,)) and q["x"].zero_point == (Z_IN - 128,)
    assert q["r"].scale == pytest.approx((S_OUT,)) and q["r"].zero_point == (Z_OUT - 128,)
    assert q["wd"].axis == 0 and len(q["wd"].scale) == 4 and q["wd"].zero_point == (0, 0, 0, 0)
    assert "bd" not in q  # an int32 bias is only dequantized
    conv = next(n for n in g.nodes if n.op == "Conv")
    assert conv.inputs == ["x", "wd", "bd"]
    # the graph output keeps its name
    assert g.outputs == ["y"] and q["y"] == q["r"]


def _zero_point_model(act_type, act_zp, per_channel=True):
    """x -> pair -> Conv 3x3 (int8 weights with zero point 0, as ONNX Runtime's quantizer writes
    them; codes 127, 64, -128 among them; float bias) -> pair -> y, the pairs on ``act_type``
    zero point ``act_zp`` with scales 0.02 / 0.04 (a session's probe, 2026-12-04)."""
    rng = np.random.default_rng(5)
    q_w = rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8)
    q_w[0, 0, 0, :3] = [127, 64, -128]
    s_w = np.array([0.01, 0.02, 0.015, 0.03], np.float32) if per_channel else np.float32(0.01)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "s_w", "z_w"], ["wd"], **({"axis": 0} if per_channel else {})),
             helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s_out", "z_out"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s_out", "z_out"], ["y"])]
    inits = [_init("s_in", np.float32(0.02)), _init("z_in", act_type(act_zp)), _init("wq", q_w), _init("s_w", s_w),
             _init("z_w", np.zeros(4, np.int8) if per_channel else np.int8(0)),
             _init("b", (rng.standard_normal(4) * 0.1).astype(np.float32)),
             _init("s_out", np.float32(0.04)), _init("z_out", act_type(act_zp))]
    g = helper.make_graph(nodes, "zp", [helper.make_tensor_value_info("x", F, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, q_w, s_w


@pytest.mark.parametrize("act_type, act_zp, moved", [(np.uint8, 128, True), (np.int8, 0, True),
                                                     (np.int8, -1, False), (np.uint8, 0, False)],
                         ids=["uint8-128", "int8-0", "int8-minus1", "uint8-0"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_zero_point_0_grids_are_the_vendors_symmetric_ones(act_type, act_zp, moved, per_channel):
    """RKNN-Toolkit2 2.5.0 (rk3566, build(do_quantization=False); probes of the QDQ and
    TensorFlow FakeQuant models, 2026-12-04, every tensor decoded from its files) turns an int8
    grid whose zero points are all 0 into the symmetric one, scale x 128/127 in float32: the
    pairs with uint8 zero point 128 or int8 zero point 0 (0.02 -> 0.020157480612397194, the
    number its file stores; 0.04 -> 0.04031496122479439), and every zero-point-0 weight, per
    channel or per tensor, its codes re-rounded (127 -> 126, 64 -> 63, -128 -> -127).  A zero
    point of -1 or a uint8 zero point of 0 keeps its grid."""
    model, q_w, s_w = _zero_point_model(act_type, act_zp, per_channel)
    g = import_onnx(model).graph
    shift = 128 if act_type == np.uint8 else 0
    for name, scale in (("x", 0.02), ("c", 0.04)):
        want = {0.02: 0.020157480612397194, 0.04: 0.04031496122479439}[scale] if moved else float(np.float32(scale))
        assert g.quant[name].scale == (want,) and g.quant[name].zero_point == (act_zp - shift,)
    w = g.quant["wd"]
    s2 = np.atleast_1d(s_w) * np.float32(128) / np.float32(127)
    assert w.scale == tuple(float(v) for v in s2) and set(w.zero_point) == {0}
    value = g.constants["wd"]
    codes = value / (s2[:, None, None, None] if per_channel else s2[0])
    np.testing.assert_allclose(codes, np.rint(codes), atol=1e-4)
    codes = np.rint(codes)
    assert codes[0, 0, 0, :3].tolist() == [126, 63, -127]
    assert np.abs(codes - q_w.astype(np.int64) * 127 / 128).max() <= 0.5


def test_a_build_on_the_symmetric_grid_returns_its_values(tmp_path):
    """The vendor's simulator returns the output of a uint8-zero-point-128 pair on scale x
    128/127 (every value of probe qdq_probe.py's pc_u128 a multiple of 0.04 x 128/127, none of
    0.04); so does rknnlite."""
    model, _, _ = _zero_point_model(np.uint8, 128)
    r, _ = _build(model, tmp_path)
    x = (RNG.random((1, 3, 6, 6)) * 4 - 2).astype(np.float32)
    (got,) = r.inference([x], data_format="nchw")
    steps = got / np.float32(0.04 * 128 / 127)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)
    assert np.abs(got / np.float32(0.04) - np.round(got / np.float32(0.04))).max() > 0.1
    r.release()


def _replace(model, old, new_nodes, new_inits=()):
    g = model.graph
    nodes = []
    for n in g.node:
        nodes += new_nodes if n.output[0] == old else [n]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    return model


def test_layout_ops_between_a_pair_move_the_float_values(tmp_path):
    """tf2onnx's transpose optimizer puts a Transpose between a QuantizeLinear and its
    DequantizeLinear (a TensorFlow FakeQuant before an NHWC flatten): the layout ops then move
    the float values, their output on the pair's grid, and the model equals onnxruntime's."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]),
             helper.make_node("Transpose", ["x_q"], ["x_t"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["x_t", "flat"], ["x_f"]),
             helper.make_node("DequantizeLinear", ["x_f", "s", "z"], ["y"])]
    inits = [_init("s", np.float32(0.03)), _init("z", np.uint8(100)), _init("flat", np.array([1, -1], np.int64))]
    g = helper.make_graph(nodes, "moved", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 192])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    imported = import_onnx(m)
    ops = [n.op for n in imported.graph.nodes]
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops and ops.count("Transpose") == 1
    grid = QuantParams("int8", (float(np.float32(0.03)),), (-28,))
    assert imported.graph.quant["x"] == grid and imported.graph.quant["y"] == grid
    r, path = _build(m, tmp_path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = (RNG.random((1, 3, 8, 8)) * 6 - 3).astype(np.float32)
    np.testing.assert_allclose(r.inference([x], data_format="nchw")[0], sess.run(None, {"x": x})[0], atol=1e-6)
    r.release()
    # the moved codes read by anything but the pair: refused by name
    m.graph.node.append(helper.make_node("Cast", ["x_t"], ["x_int"], to=TensorProto.FLOAT))
    m.graph.output.append(helper.make_tensor_value_info("x_int", F, [1, 8, 8, 3]))
    with pytest.raises(ModelInvalidError, match="Transpose node .* is also read by Cast node"):
        import_onnx(m)
    # a constant's codes moved between the pair: refused (never read without its Transpose)
    g = helper.make_graph([nodes[0], nodes[1], helper.make_node("DequantizeLinear", ["x_t", "s", "z"], ["w"]),
                           helper.make_node("Add", ["x", "w"], ["y"])], "const",
                          [helper.make_tensor_value_info("x", F, [1, 8, 8, 3])],
                          [helper.make_tensor_value_info("y", F, [1, 8, 8, 3])],
                          inits[:2] + [_init("x_const", RNG.random((1, 3, 8, 8)).astype(np.float32))])
    g.node[0].input[0] = "x_const"
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    with pytest.raises(ModelInvalidError, match="reads a constant put on its grid .* moved by Transpose"):
        import_onnx(m)


def test_what_cannot_be_read_is_refused_by_name():
    # a DequantizeLinear with other parameters than its QuantizeLinear: a requantization
    m = _replace(qdq_model(), "y", [helper.make_node("DequantizeLinear", ["out_c", "s_other", "z_out"], ["y"])],
                 [_init("s_other", np.float32(0.1))])
    with pytest.raises(ModelInvalidError, match="does not use the scale and zero point of QuantizeLinear"):
        import_onnx(m)
    # the integer output of a QuantizeLinear read by something else than its pair
    m = _replace(qdq_model(), "y", [helper.make_node("Cast", ["out_c"], ["y"], to=TensorProto.FLOAT)])
    with pytest.raises(ModelInvalidError, match="its output is read by something other than a DequantizeLinear"):
        import_onnx(m)
    m = qdq_model()
    m.graph.node.append(helper.make_node("Cast", ["in_c"], ["x_int"], to=TensorProto.FLOAT))
    m.graph.output.append(helper.make_tensor_value_info("x_int", F, [1, 3, 8, 8]))
    with pytest.raises(ModelInvalidError, match="reads 'in_c', the integer output of Cast node"):
        import_onnx(m)
    # per-channel parameters on an activation
    m = qdq_model()
    for t in m.graph.initializer:
        if t.name in ("s_in", "z_in"):
            value = numpy_helper.to_array(t)
            t.CopyFrom(_init(t.name, np.full(3, value, value.dtype)))
    for n in m.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[1] == "s_in":
            n.attribute.extend([helper.make_attribute("axis", 1)])
    with pytest.raises(ModelInvalidError, match="per-channel parameters on an activation"):
        import_onnx(m)
    # a second QuantizeLinear putting the same tensor on another grid
    m = qdq_model()
    m.graph.node.extend([helper.make_node("QuantizeLinear", ["r", "s_other", "z_out"], ["r_q2"]),
                         helper.make_node("DequantizeLinear", ["r_q2", "s_other", "z_out"], ["r2"])])
    m.graph.initializer.append(_init("s_other", np.float32(0.1)))
    m.graph.output.append(helper.make_tensor_value_info("r2", F, [1, 4, 8, 8]))
    with pytest.raises(ModelInvalidError, match="on another grid than an earlier QuantizeLinear"):
        import_onnx(m)
    # a DequantizeLinear of an activation that no QuantizeLinear produces
    m = _replace(qdq_model(), "xd", [helper.make_node("DequantizeLinear", ["x", "s_in"], ["xd"])])
    with pytest.raises(ModelInvalidError, match="which no QuantizeLinear produces"):
        import_onnx(m)


# -- grids the vendor gives the tensors a quantization-aware model leaves without ------------------
#
# Measured with RKNN-Toolkit2 2.5.0 (rk3566, build(do_quantization=False)) on small TensorFlow
# FakeQuant graphs (tf.contrib.quantize naming; the vendor reads them through tf2onnx, i.e. as the
# QuantizeLinear -> DequantizeLinear pairs built here), decoding each tensor's dtype, scale and zero
# point from the vendor's .rknn: its tensorflow/inception_v3_qat example (issue 21).

SA, SB, SC = 0.02, 0.04, 0.01   # the grids of the pairs: uint8, zero point 0 (int8 -128)


def _qat_model(body, outputs):
    """x (1,3,8,8, float, no pair, as the example's input) -> Conv -> pair ``SA`` -> a, and
    Conv -> pair ``SB`` -> b; then ``body``: ``(op, inputs, output, attrs)`` tuples, where op
    ``"pair"`` puts its input on grid ``attrs["scale"]`` and ``"conv"`` is a 1x1 Conv."""
    nodes, inits, channels = [], [], {"x": 3}
    convs = [("conv", ["x"], "ca", {}), ("pair", ["ca"], "a", {"scale": SA}),
             ("conv", ["x"], "cb", {}), ("pair", ["cb"], "b", {"scale": SB})]
    for k, (op, ins, out, attrs) in enumerate(convs + list(body)):
        channels[out] = 4 if op == "conv" else sum(channels[i] for i in ins) if op == "Concat" else channels[ins[0]]
        if op == "pair":
            n, i = _pair(ins[0], out, attrs["scale"], 0, f"p{k}")
            nodes += n
            inits += i
        elif op == "conv":
            nodes.append(helper.make_node("Conv", [ins[0], f"w{k}"], [out]))
            inits.append(_init(f"w{k}", RNG.standard_normal((4, channels[ins[0]], 1, 1)).astype(np.float32) * 0.5))
        else:
            nodes.append(helper.make_node(op, ins, [out], **attrs))
    g = helper.make_graph(nodes, "qat", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


_MAXPOOL = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
_AVGPOOL = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
_GRID_CASES = {
    # FakeQuant'd conv -> MaxPool (-> MaxPool) -> FakeQuant'd conv: int8 on the conv's grid
    "maxpool": ([("MaxPool", ["a"], "m", _MAXPOOL), ("MaxPool", ["m"], "m2", _MAXPOOL), ("conv", ["m2"], "y", {})],
                {"m": SA, "m2": SA}),
    # AvgPool 3x3 stride 1 padded: its input's grid, even over a FakeQuant of its own (dropped)
    "avgpool": ([("AveragePool", ["a"], "p", _AVGPOOL), ("pair", ["p"], "pq", {"scale": SC}),
                 ("conv", ["pq"], "y", {})], {"p": SA}),
    # two grids -> Concat: float16 (its inputs dequantized); one grid: int8 on it
    "concat": ([("Concat", ["a", "b"], "k", {"axis": 1}), ("Concat", ["a", "a"], "k2", {"axis": 1}),
                ("Concat", ["k", "k2"], "y", {"axis": 1})], {"k": None, "k2": SA}),
    # Concat -> AvgPool -> FakeQuant c: the Concat (its only reader a pool) on c's grid, its inputs
    # requantized to it; so through a MaxPool, through chains of pools, into a conv without one
    "back": ([("Concat", ["a", "b"], "k", {"axis": 1}), ("AveragePool", ["k"], "p", _AVGPOOL),
              ("pair", ["p"], "pq", {"scale": SC}),
              ("Concat", ["a", "b"], "k2", {"axis": 1}), ("MaxPool", ["k2"], "m", _MAXPOOL),
              ("MaxPool", ["m"], "m2", _MAXPOOL), ("pair", ["m2"], "mq", {"scale": SC}),
              ("conv", ["a"], "c", {}), ("MaxPool", ["c"], "m3", _MAXPOOL), ("pair", ["m3"], "m3q", {"scale": SB}),
              ("Concat", ["pq", "mq", "m3q"], "y", {"axis": 1})],
             {"k": SC, "p": SC, "k2": SC, "m": SC, "m2": SC, "c": SB, "m3": SB}),
    # ... not into a tensor read by something else too (the Concat also feeds a conv)
    "two_readers": ([("Concat", ["a", "b"], "k", {"axis": 1}), ("MaxPool", ["k"], "m", _MAXPOOL),
                     ("pair", ["m"], "mq", {"scale": SC}), ("conv", ["k"], "c", {}),
                     ("Concat", ["mq", "c"], "y", {"axis": 1})], {"k": None, "m": SC}),
    # FakeQuant a -> MaxPool -> MaxPool -> FakeQuant c: the tensor between the pools is float16
    # (a forward, c backward); one MaxPool between them has its input's grid, then c's
    "conflict": ([("MaxPool", ["a"], "m", _MAXPOOL), ("MaxPool", ["m"], "m2", _MAXPOOL),
                  ("pair", ["m2"], "mq", {"scale": SC}), ("MaxPool", ["b"], "m3", _MAXPOOL),
                  ("pair", ["m3"], "m3q", {"scale": SC}), ("Concat", ["mq", "m3q"], "y", {"axis": 1})],
                 {"m": None, "m2": SC, "m3": SC}),
}


@pytest.mark.parametrize("case", sorted(_GRID_CASES))
def test_tensors_without_a_pair_take_the_grid_the_vendor_gives_them(case):
    from rknnlite.toolkit.quantize import implied_grids

    body, expected = _GRID_CASES[case]
    g = import_onnx(_qat_model(body, ["y"])).graph
    quant = implied_grids(g, g.quant)
    got = {t: (quant[t].scale[0] if t in quant else None) for t in expected}
    assert got == pytest.approx(expected)
    assert all(quant[t].zero_point == (-128,) for t, s in expected.items() if s is not None)
    assert "x" not in quant  # the float input takes no grid


def test_a_qat_build_runs_pools_and_concats_on_the_vendors_grids(tmp_path):
    """The built model's table (``build(do_quantization=False)``): the MaxPool on the conv's
    grid, the Concat before ``AvgPool -> FakeQuant`` on the FakeQuant's; its output values are
    on that grid."""
    from rknnlite.model.loader import load_model

    body = [("MaxPool", ["a"], "m", _MAXPOOL), ("Concat", ["m", "b"], "k", {"axis": 1}),
            ("AveragePool", ["k"], "p", _AVGPOOL), ("pair", ["p"], "y", {"scale": SC})]
    r, _ = _build(_qat_model(body, ["y"]), tmp_path)
    quant = load_model(r._model_bytes).model.graph.quant
    assert quant["m"].scale == pytest.approx((SA,)) and quant["k"].scale == pytest.approx((SC,))
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    (got,) = r.inference([x], data_format="nchw")
    steps = got / np.float32(SC)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)
    r.release()


# -- an activation between a conv's pair and the next ----------------------------------------------
#
# ``conv -> pair a -> Relu / Clip / LeakyRelu (-> pair b) -> conv``, built by RKNN-Toolkit2 2.5.0
# (rk3566, do_quantization=False) from TensorFlow FakeQuant graphs and from these QDQ models (the
# probes relu, mrelu, mrelu6, mreluout, mrelufq, mleaky, mleakyfq and their ONNX twins o_*, issue
# 21): a Relu or Clip is fused (ConvRelu / ConvClip; after a float-input conv a Relu / Clip on its
# int8 output), on grid b when the activation has a pair of its own (a dropped), else on grid a; a
# LeakyRelu with a pair of its own is fused on b (ConvLeakyRelu), without one it runs in float16
# on the conv's int8 output (grid a).

def _act_model(act, pair_after):
    """_qat_model's ``a`` -> 1x1 conv -> pair ``SC`` -> ``act`` -> r (-> pair ``SB``) -> conv -> y."""
    body = [("conv", ["a"], "c", {}), ("pair", ["c"], "cq", {"scale": SC})]
    if act == "Clip":
        body.append(("Clip", ["cq", "lo", "hi"], "r", {}))
    else:
        body.append((act, ["cq"], "r", {"alpha": 0.2} if act == "LeakyRelu" else {}))
    if pair_after:
        body.append(("pair", ["r"], "rq", {"scale": SB}))
    body.append(("conv", ["rq" if pair_after else "r"], "y", {}))
    return _with_bounds(_qat_model(body, ["y"]))


def _with_bounds(m):
    """``m`` with the constants ``lo`` = 0 and ``hi`` = 0.6, a Clip's bounds."""
    m.graph.initializer.extend([_init("lo", np.float32(0)), _init("hi", np.float32(0.6))])
    return m


_ACT_CASES = {  # (activation, pair after it): (grid of r, grid of c, r made by the conv)
    ("Relu", False): (SC, None, True),
    ("Relu", True): (SB, None, True),
    ("Clip", False): (SC, None, True),
    ("Clip", True): (SB, None, True),
    ("LeakyRelu", False): (None, SC, False),
    ("LeakyRelu", True): (SB, None, True),
}


@pytest.mark.parametrize("act,pair_after", sorted(_ACT_CASES))
def test_an_activation_after_a_conv_pair_is_on_the_vendors_grid(act, pair_after):
    from rknnlite.toolkit.optimize import optimize
    from rknnlite.toolkit.quantize import implied_grids, live_quant

    r_grid, c_grid, fused = _ACT_CASES[act, pair_after]
    imported = import_onnx(_act_model(act, pair_after))
    table = dict(imported.graph.quant)
    g = optimize(imported.graph, imported.shapes)
    quant = implied_grids(g, live_quant(g))
    producer = {o: n for n in g.nodes for o in n.outputs}
    assert (producer["r"].op == "Conv") == fused
    assert (quant["r"].scale[0] if "r" in quant else None) == pytest.approx(r_grid)
    assert (quant["c"].scale[0] if "c" in quant else None) == pytest.approx(c_grid)
    assert imported.graph.quant == table  # the import's own table is not changed


def test_a_relu_after_a_conv_pair_runs_on_the_pairs_grid(tmp_path):
    """``conv -> pair -> Relu`` as the graph output (the probe mreluout: the vendor's int8
    ConvRelu output on the pair's grid): the output values are on that grid (a float Relu
    output before), a few steps at most from onnxruntime's (the 1x1 conv's float weights are
    quantized to int8)."""
    body = [("conv", ["a"], "c", {}), ("pair", ["c"], "cq", {"scale": SC}), ("Relu", ["cq"], "y", {})]
    r, path = _build(_qat_model(body, ["y"]), tmp_path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    (got,) = r.inference([x], data_format="nchw")
    steps = got / np.float32(SC)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)
    assert np.abs(got - sess.run(None, {"x": x})[0]).max() <= 3 * SC
    r.release()


_CLIP = ["lo", "hi"]
_CLIP_CASES = {
    # Concat on one grid -> Relu6 (probe catr6): the vendor's int8 Clip keeps its input's grid
    "forward": ([("Concat", ["a", "a"], "k", {"axis": 1}), ("Clip", ["k"] + _CLIP, "r", {}), ("conv", ["r"], "y", {})],
                {"k": SA, "r": SA}),
    # Concat of two grids -> Relu6 -> pair (probe catrelu6): the Concat on the pair's grid
    "backward": ([("Concat", ["a", "b"], "k", {"axis": 1}), ("Clip", ["k"] + _CLIP, "r", {}),
                  ("pair", ["r"], "rq", {"scale": SC}), ("conv", ["rq"], "y", {})], {"k": SC, "r": SC}),
    # a conv's pair read by a Relu6 and by a conv (probe fanr6): the Clip, not fused, on the pair's grid
    "two_readers": ([("conv", ["a"], "c", {}), ("pair", ["c"], "cq", {"scale": SC}), ("Clip", ["cq"] + _CLIP, "r", {}),
                     ("conv", ["r"], "y1", {}), ("conv", ["cq"], "y2", {}), ("Concat", ["y1", "y2"], "y", {"axis": 1})],
                    {"c": SC, "r": SC}),
}


@pytest.mark.parametrize("case", sorted(_CLIP_CASES))
def test_a_clip_passes_grids_as_a_relu(case):
    from rknnlite.toolkit.optimize import optimize
    from rknnlite.toolkit.quantize import implied_grids, live_quant

    body, expected = _CLIP_CASES[case]
    imported = import_onnx(_with_bounds(_qat_model(body, ["y"])))
    g = optimize(imported.graph, imported.shapes)
    assert any(n.op == "Clip" for n in g.nodes)
    quant = implied_grids(g, live_quant(g))
    got = {t: (quant[t].scale[0] if t in quant else None) for t in expected}
    assert got == pytest.approx(expected)


def test_an_identity_to_the_output_keeps_the_grid_before_it(run_unquantized_build):
    """PyTorch's DeQuantStub exports as an Identity to the graph output after the last pair;
    removing it renames the producer's output, and the grid went with the old name: the int8
    Add before it wrote float values off its grid (a quantized PyTorch probe: outputs up to
    3.8 steps from RKNN-Toolkit2's, ``tools/vendor_corpus/torch_qat_probe.py``)."""
    s_out, z_out = 0.05, 100
    nodes, inits = _pair("x", "xd", S_IN, Z_IN, "in")
    nodes.append(helper.make_node("Add", ["xd", "xd"], ["a"]))
    n, i = _pair("a", "ad", s_out, z_out, "out")
    nodes += n + [helper.make_node("Identity", ["ad"], ["y"])]
    inits += i
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])], inits)
    x = (RNG.random((1, 3, 4, 4)) * 4 - 2).astype(np.float32)
    (y,) = run_unquantized_build(g, [x])
    codes = y / np.float32(s_out)
    np.testing.assert_allclose(codes, np.rint(codes), atol=1e-3)  # on the Add's output grid
    qx = np.clip(np.rint(x / S_IN) + Z_IN, 0, 255)
    want = np.clip(np.rint(2 * (qx - Z_IN) * S_IN / s_out) + z_out, 0, 255)
    assert np.abs(np.rint(codes) + z_out - want).max() <= 1  # one step: the input's symmetric grid


_AVGPOOL_SIM = Path(__file__).parent / "data" / "vendor_qdq" / "avgpool_sim.npz"
_AVGPOOL_GRID = (0.0388743, 73)


def _pool_through_a_pair(run_build, node, shape, codes):
    """``x -> pair -> node -> pair -> y`` (one uint8 grid) built for rk3566 and run on ``codes``:
    the output codes."""
    scale, zp = _AVGPOOL_GRID
    nodes, inits = _pair("x", "xd", scale, zp, "in")
    n, i = _pair("p", "y", scale, zp, "out")
    g = helper.make_graph(nodes + [node] + n, "g", [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info("y", F, None)], inits + i)
    x = ((codes[None].astype(np.int32) - zp) * np.float32(scale)).astype(np.float32)
    (y,) = run_build(g, [x], platform="rk3566")
    return np.rint(y / np.float32(scale)).astype(np.int32) + zp


@pytest.mark.parametrize("case", ["pool_2_2_0", "pool_2_2_1", "pool_3_2_1", "pool_3_2_1_inc", "pool_4_4_0"])
def test_int8_average_pools_equal_the_vendors_simulator(case, run_unquantized_build):
    """An int8 AveragePool sums each window's dequantized taps one by one in row-major order
    and divides by the count (RKNN-Toolkit2's simulator, tests/data/vendor_qdq/README.md): the
    float kernel's separable order and reciprocal round a window whose mean is a grid midpoint
    the other way (2x2: 95.7 % of these codes equal; 3x3 pad 1 borders: 99.7 %)."""
    sim = np.load(_AVGPOOL_SIM)
    k, stride, pad, *inc = (int(v) if v.isdigit() else v for v in case.split("_")[1:])
    node = helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[k, k], strides=[stride, stride],
                            pads=[pad] * 4, count_include_pad=int(bool(inc)))
    codes = _pool_through_a_pair(run_unquantized_build, node, (1, 16, 32, 32), sim["codes"])
    want = sim[case][None].astype(np.int32)
    assert codes.shape == want.shape
    assert np.array_equal(codes, want), f"{(codes == want).mean():.4f} equal"


@pytest.mark.parametrize("size", [12, 20, 32])
def test_int8_global_pools_equal_the_vendors_simulator(size, run_unquantized_build):
    """A GlobalAveragePool over more than 7 x 7 compiles into depthwise conv stages
    (``optimize.split_global_average_pools``).  In a pre-quantized build the vendor gives the
    stage between them its input's grid times the stage's gain (12 x 12: x3) and int8 weights
    of code 127, and its simulator sums each stage in float32 tap by tap as a pool: equal on
    every channel (before: no grid between the stages, 89 % of the 12 x 12 channels equal)."""
    sim = np.load(_AVGPOOL_SIM)
    codes = sim[f"global_{size}x{size}_codes"] if size != 32 else sim["codes"]
    node = helper.make_node("GlobalAveragePool", ["xd"], ["p"])
    got = _pool_through_a_pair(run_unquantized_build, node, (1,) + codes.shape, codes)
    want = sim[f"global_{size}x{size}"][None].astype(np.int32)
    assert got.shape == want.shape
    assert np.array_equal(got, want), f"{(got == want).mean():.4f} equal"
