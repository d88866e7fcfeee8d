"""Quantization-aware ONNX models (QuantizeLinear / DequantizeLinear, ``rknnlite.toolkit.qdq``):
built with the file's own int8 grid (``build(do_quantization=False)``), as RKNN-Toolkit2 builds
Rockchip's pytorch/resnet18_qat example, and compared with onnxruntime running the QDQ model."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.errors import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402

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
    assert q["x"].scale == pytest.approx((S_IN,)) and q["x"].zero_point == (Z_IN - 128,)  # uint8 -> int8
    assert q["r"].scale == pytest.approx((S_OUT,)) and q["r"].zero_point == (Z_OUT - 128,)
    assert q["wd"].axis == 0 and len(q["wd"].scale) == 4 and q["wd"].zero_point == (0, 0, 0, 0)
    assert "bd" not in q  # an int32 bias is only dequantized
    conv = next(n for n in g.nodes if n.op == "Conv")
    assert conv.inputs == ["x", "wd", "bd"]
    # the graph output keeps its name
    assert g.outputs == ["y"] and q["y"] == q["r"]


def _replace(model, old, new_nodes, new_inits=()):
    g = model.graph
    nodes = []
    for n in g.node:
        nodes += new_nodes if n.output[0] == old else [n]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    return model


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
