"""Python custom operators in the toolkit (seed 000, Python part): registration rules,
import through shape_infer, build-time checks, and the cstSoftmax flow from ONNX to the
runtime."""

from __future__ import annotations

import logging

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.api import RKNNLite  # noqa: E402
from rknnlite.errors import InvalidParamError, ModelInvalidError  # noqa: E402
from rknnlite.model.graph import Node  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.custom_op import get_node_attr, validate_custom_op  # noqa: E402

RNG = np.random.default_rng(7)
W = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
W2 = RNG.standard_normal((10, 8)).astype(np.float32)


def softmax_model(path, op_type="cstSoftmax", domain="", attrs=None, extra_inits=(), extra_inputs=()):
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax, with the Softmax
    renamed as the seed does (``node.op_type = "cstSoftmax"``)."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "W2"], ["l"], transB=1),
             helper.make_node("Softmax", ["l"] + list(extra_inputs), ["y"], **(attrs or {"axis": 1}))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(W, "W"), numpy_helper.from_array(W2, "W2")] + list(extra_inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    for node in m.graph.node:
        if node.op_type == "Softmax":
            node.op_type = op_type
            node.domain = domain
    onnx.save(m, str(path))
    return str(path)


class cstSoftmax:
    op_type = "cstSoftmax"

    def shape_infer(self, node, in_shapes, in_dtypes):
        out_shapes = in_shapes.copy()
        out_dtypes = in_dtypes.copy()
        return out_shapes, out_dtypes

    def compute(self, node, inputs):
        x = inputs[0]
        axis = get_node_attr(node, "axis")
        x_max = np.max(x, axis=axis, keepdims=True)
        tmp = np.exp(x - x_max)
        s = np.sum(tmp, axis=axis, keepdims=True)
        return [tmp / s]


def np_softmax(x, axis=1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def reference_logits(x):
    c = np.zeros((1, 8, 8, 8), np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(8):
        for j in range(8):
            c[0, :, i, j] = np.tensordot(W, xp[0, :, i:i + 3, j:j + 3], axes=([1, 2, 3], [0, 1, 2]))
    f = np.maximum(c, 0).mean(axis=(2, 3))
    return f @ W2.T


def build(path, op=cstSoftmax, float_dtype="float32", **load):
    rk = RKNN()
    assert rk.config(target_platform="rk3566", float_dtype=float_dtype) == 0
    if op is not None:
        assert rk.reg_custom_op(op) == 0
    assert rk.load_onnx(str(path), **load) == 0
    return rk


X = RNG.random((1, 3, 8, 8)).astype(np.float32)


def test_cst_softmax_flow_end_to_end(tmp_path, caplog):
    model = softmax_model(tmp_path / "test_softmax_custom.onnx")
    rk = build(model, cstSoftmax())
    assert rk.build(do_quantization=False) == 0
    assert rk.init_runtime() == 0
    out = rk.inference([X], data_format="nchw")[0]
    np.testing.assert_allclose(out, np_softmax(reference_logits(X)), rtol=1e-4, atol=1e-6)
    assert rk.export_rknn(str(tmp_path / "m.rknn")) == 0
    rk.release()

    with rknnlite.Context(str(tmp_path / "m.rknn"), custom_ops=[cstSoftmax()]) as ctx:
        assert list(ctx.outputs[0].dims) == [1, 10]
        np.testing.assert_array_equal(ctx.run([X], data_format="nchw")[0], out)

    # without the op registered the runtime names it at the first run (registration may follow init)
    with rknnlite.Context(str(tmp_path / "m.rknn")) as ctx:
        with pytest.raises(ModelInvalidError, match="cstSoftmax"):
            ctx.run([X], data_format="nchw")
    lite = RKNNLite()
    assert lite.load_rknn(str(tmp_path / "m.rknn")) == 0
    assert lite.init_runtime() == 0
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        assert lite.inference([X], data_format="nchw") is None
    assert "cstSoftmax" in caplog.text
    lite.release()


def test_custom_domain_and_float16_build(tmp_path):
    model = softmax_model(tmp_path / "d.onnx", domain="com.example.cst")
    rk = build(model, cstSoftmax, float_dtype="float16")  # a class is instantiated
    assert rk.build() == 0
    assert rk.init_runtime() == 0
    out = rk.inference([X], data_format="nchw")[0]
    np.testing.assert_allclose(out, np_softmax(reference_logits(X)), rtol=5e-3, atol=1e-3)


def test_unregistered_custom_op_fails_load_naming_it(tmp_path, caplog):
    model = softmax_model(tmp_path / "u.onnx")
    rk = RKNN()
    rk.config(target_platform="rk3566")
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.load_onnx(model) == -1
    assert "cstSoftmax" in caplog.text


def test_reg_custom_op_only_between_config_and_load(tmp_path, caplog):
    model = softmax_model(tmp_path / "o.onnx")
    rk = RKNN()
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.reg_custom_op(cstSoftmax()) == -1
    assert "between rknn.config() and rknn.load_xxx()" in caplog.text
    rk.config(target_platform="rk3566")
    assert rk.reg_custom_op(cstSoftmax()) == 0
    assert rk.load_onnx(model) == 0
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.reg_custom_op(cstSoftmax()) == -1
    assert "between rknn.config() and rknn.load_xxx()" in caplog.text
    assert rk.build() == 0  # the object stays usable


class _NoOpType:
    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes, in_dtypes

    def compute(self, node, inputs):
        return inputs


class _IntOpType(_NoOpType):
    op_type = 3


class _Standard(_NoOpType):
    op_type = "Softmax"


class _Internal(_NoOpType):
    op_type = "ChannelAffine"


class _MisnamedMethod:
    op_type = "cstA"

    def shapeinfer(self, node, in_shapes, in_dtypes):
        return in_shapes, in_dtypes

    def compute(self, node, inputs):
        return inputs


class _WrongParams:
    op_type = "cstB"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes, in_dtypes

    def compute(self, n, inputs):
        return inputs


class _MissingCompute:
    op_type = "cstC"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes, in_dtypes


class _NeedsArgs(_NoOpType):
    op_type = "cstD"

    def __init__(self, value):
        self.value = value


@pytest.mark.parametrize("obj, words", [
    (_NoOpType, ["op_type"]),
    (_IntOpType, ["op_type", "3"]),
    (_Internal, ["rknnlite itself"]),
    (_MisnamedMethod, ["shape_infer(self, node, in_shapes, in_dtypes)", "'shapeinfer'"]),
    (_WrongParams, ["compute(self, node, inputs)", "compute(self, n, inputs)"]),
    (_MissingCompute, ["compute(self, node, inputs)"]),
    (_NeedsArgs, ["cannot be instantiated"]),
    ("cstSoftmax", ["class"]),
    (None, ["class"]),
])
def test_custom_op_class_rules(obj, words, caplog):
    from rknnlite.backends.software.ops import KERNELS

    with pytest.raises(InvalidParamError) as info:
        validate_custom_op(obj, reserved=tuple(KERNELS))
    for w in words:
        assert w in info.value.message
    rk = RKNN()
    rk.config(target_platform="rk3566")
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.reg_custom_op(obj) == -1
    assert words[0] in caplog.text
    assert rk.reg_custom_op(cstSoftmax()) == 0  # still usable


def test_a_standard_op_type_is_ignored_with_a_warning_as_the_vendor_does(caplog):
    """RKNN-Toolkit2 answers reg_custom_op of an ``ArgMax`` class (Rockchip's custom_op/replace_onnx)
    with a warning, ignores the call and returns 0; validate_custom_op itself refuses it."""
    from rknnlite.backends.software.ops import KERNELS

    with pytest.raises(InvalidParamError, match="standard ONNX operator.*cstSoftmax"):
        validate_custom_op(_Standard, reserved=tuple(KERNELS))
    rk = RKNN()
    rk.config(target_platform="rk3566")
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert rk.reg_custom_op(_Standard) == 0
    assert "op_type 'Softmax' is a standard ONNX operator: this call is ignored" in caplog.text
    assert not rk._custom_ops


def test_attribute_and_constant_input_types_are_checked(tmp_path, caplog):
    bad_attr = softmax_model(tmp_path / "a.onnx", attrs={"axis": 1, "mode": "fast"})
    rk = RKNN()
    rk.config(target_platform="rk3566")
    rk.reg_custom_op(cstSoftmax())
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.load_onnx(bad_attr) == -1
    assert "'mode'" in caplog.text and "bool, int32, float32, int64" in caplog.text

    double = numpy_helper.from_array(np.ones(1, np.float64), "k")
    bad_const = softmax_model(tmp_path / "c.onnx", extra_inits=[double], extra_inputs=["k"])
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.load_onnx(bad_const) == -1
    assert "constant input 'k'" in caplog.text and "float64" in caplog.text

    tensor_attr = softmax_model(tmp_path / "t.onnx", attrs={
        "axis": 1, "weights": numpy_helper.from_array(np.array([1, 2], np.int32), "w")})
    assert rk.load_onnx(tensor_attr) == 0


class _ScaledSoftmax(cstSoftmax):
    """Reads an int, a float and a tensor attribute; the runtime must get them from the model."""

    op_type = "cstScaledSoftmax"

    def compute(self, node, inputs):
        axis = get_node_attr(node, "axis")
        t = float(get_node_attr(node, "temperature"))
        bias = np.asarray(get_node_attr(node, "bias"), np.float32)
        return [np_softmax(inputs[0] / t, axis) + bias.sum()]


def test_attributes_are_stored_in_the_model(tmp_path):
    model = softmax_model(tmp_path / "s.onnx", op_type="cstScaledSoftmax", attrs={
        "axis": 1, "temperature": 2.0, "bias": numpy_helper.from_array(np.array([0.25, 0.5], np.float32), "b")})
    rk = build(model, _ScaledSoftmax())
    assert rk.build() == 0
    assert rk.export_rknn(str(tmp_path / "s.rknn")) == 0
    with rknnlite.Context(str(tmp_path / "s.rknn"), custom_ops=[_ScaledSoftmax()]) as ctx:
        out = ctx.run([X], data_format="nchw")[0]
    np.testing.assert_allclose(out, np_softmax(reference_logits(X) / 2.0) + 0.75, rtol=1e-4, atol=1e-5)


class cstDouble:
    """Output twice as long on the last axis: its shape only shape_infer can tell."""

    op_type = "cstDouble"

    def shape_infer(self, node, in_shapes, in_dtypes):
        shape = list(in_shapes[0])
        shape[-1] *= 2
        return [shape], [in_dtypes[0]]

    def compute(self, node, inputs):
        return [np.concatenate([inputs[0], -inputs[0]], axis=-1)]


def test_output_shapes_come_from_shape_infer(tmp_path):
    model = softmax_model(tmp_path / "dbl.onnx", op_type="cstDouble", attrs={})
    rk = build(model, cstDouble())
    out_spec = rk._imported.output_specs[0]
    assert list(out_spec.shape) == [1, 20]
    assert rk.build() == 0 and rk.init_runtime() == 0
    out = rk.inference([X], data_format="nchw")[0]
    logits = reference_logits(X)
    np.testing.assert_allclose(out, np.concatenate([logits, -logits], 1), rtol=1e-4, atol=1e-5)


class _WrongCount(cstDouble):
    op_type = "cstWrongCount"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return [in_shapes[0], in_shapes[0]], [in_dtypes[0], in_dtypes[0]]


class _NotATuple(cstDouble):
    op_type = "cstNotATuple"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes


class _WrongShape(cstDouble):
    op_type = "cstWrongShape"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()  # forgets the doubling compute does


class _Raises(cstDouble):
    op_type = "cstRaises"

    def shape_infer(self, node, in_shapes, in_dtypes):
        raise KeyError("oops")


@pytest.mark.parametrize("cls, words", [
    (_WrongCount, ["1 output(s)", "2 shape(s)"]),
    (_NotATuple, ["(out_shapes, out_dtypes)"]),
    (_WrongShape, ["shape [1, 10]", "compute returned shape [1, 20]"]),
    (_Raises, ["shape_infer raised KeyError"]),
])
def test_wrong_shape_infer_fails_build_pointing_at_it(tmp_path, caplog, cls, words):
    model = softmax_model(tmp_path / "w.onnx", op_type=cls.op_type, attrs={})
    rk = build(model, cls())
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.build() == -1
    text = caplog.text
    assert cls.op_type in text and f"class {cls.__name__}" in text
    for w in words:
        assert w in text


def test_get_node_attr_on_nodes_and_node_protos():
    node = Node("cstX", "n0", ["a"], ["b"], {"axis": 2, "alpha": 0.5, "_opset": 13})
    assert get_node_attr(node, "axis") == 2
    assert get_node_attr(node, "beta", 7) == 7
    with pytest.raises(InvalidParamError, match="alpha, axis"):
        get_node_attr(node, "beta")
    proto = helper.make_node("cstX", ["a"], ["b"], axis=3, scales=[1.0, 2.0])
    assert get_node_attr(proto, "axis") == 3
    assert get_node_attr(proto, "scales") == [1.0, 2.0]
    with pytest.raises(InvalidParamError):
        get_node_attr(object(), "axis")


def test_cst_softmax_int8_build(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = softmax_model(tmp_path / "q.onnx")
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", RNG.random((1, 3, 8, 8)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("\n".join(f"s{i}.npy" for i in range(3)))
    rk = build(model, cstSoftmax(), float_dtype="float16")
    assert rk.build(do_quantization=True, dataset="ds.txt") == 0
    assert rk.init_runtime() == 0
    out = rk.inference([X], data_format="nchw")[0]
    ref = np_softmax(reference_logits(X))
    assert float(np.dot(out.ravel(), ref.ravel()) / np.linalg.norm(out) / np.linalg.norm(ref)) > 0.99


def test_toolkit_runs_a_loaded_model_and_analyses_it_with_registered_ops(tmp_path):
    model = softmax_model(tmp_path / "l.onnx")
    rk = build(model, cstSoftmax())
    assert rk.build() == 0
    assert rk.export_rknn(str(tmp_path / "l.rknn")) == 0
    np.save(tmp_path / "x.npy", X[0])
    assert rk.accuracy_analysis([str(tmp_path / "x.npy")], output_dir=str(tmp_path / "snap")) == 0
    report = (tmp_path / "snap" / "error_analysis.txt").read_text()
    assert "[cstSoftmax] y" in report

    other = RKNN()
    other.config(target_platform="rk3566")
    assert other.reg_custom_op(cstSoftmax()) == 0
    assert other.load_rknn(str(tmp_path / "l.rknn")) == 0
    assert other.init_runtime() == 0
    np.testing.assert_allclose(other.inference([X], data_format="nchw")[0], np_softmax(reference_logits(X)),
                               rtol=1e-4, atol=1e-6)


class _FailsOnData(_WrongCount):
    op_type = "cstFailsOnData"

    def compute(self, node, inputs):
        raise ValueError("needs real data")


def test_shape_infer_is_checked_even_when_the_build_run_fails(tmp_path, caplog):
    model = softmax_model(tmp_path / "fd.onnx", op_type="cstFailsOnData", attrs={})
    rk = build(model, _FailsOnData())
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert rk.build() == -1
    assert "could not check the custom operators' outputs" in caplog.text
    assert "cstFailsOnData (class _FailsOnData)" in caplog.text and "2 shape(s)" in caplog.text
