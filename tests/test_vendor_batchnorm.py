"""The vendor's ``BatchNormalization`` and ``BatchNormalizationRelu`` off-board
(``rknnlite.model.rknn_graph.batchnorm``): the corpus case ``affine_ops`` (RKNN-Toolkit2 2.5.0,
rk3588; ``tools/vendor_corpus/models.py``) holds both, made from ``Mul(x, c) + d`` and from an ONNX
BatchNormalization then Relu.  Its fidelity against the simulator is asserted in
``tests/test_vendor_offboard.py`` (``FIDELITY``); here, what each file's parameters decode to and
the refusal of every field the lowering checks."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from onnx import numpy_helper

from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower_rockchip
from rknnlite.model.rknn_graph.graph import read_vendor_graph

from corpus import CORPUS, MODELS
from vendor_files import doctored_copy, subgraph_table, tensor_bytes, tensor_table


def _lowered(path):
    loaded = load_model(str(path))
    return lower_rockchip(loaded.payload, loaded.model)


def _mul_add_constants():
    """``c`` and ``d`` of the case's ``Mul(x, c) + d``, from its ONNX model."""
    model = MODELS.case_named("affine_ops").build()
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    (mul,) = [n for n in model.graph.node if n.op_type == "Mul" and any(i in inits for i in n.input)]
    (add,) = [n for n in model.graph.node if n.op_type == "Add" and mul.output[0] in n.input]
    c = next(inits[i] for i in mul.input if i in inits)
    d = next(inits[i] for i in add.input if i in inits)
    return c.ravel(), d.ravel()


def _batch_norm(stem: str):
    """The vendor node of the Mul/Add BatchNormalization and its tensors, from the file."""
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    sg = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, stem).subgraphs[0]
    (node,) = [n for n in sg.nodes if n.op == "BatchNormalization"]
    return node, [sg.tensors[i] for i in node.inputs]


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_batch_norms_are_channel_affines_of_the_onnx_values(variant):
    """fp16: the scale as stored (float16) and the float32 bias; int8: the int16 codes times their
    step and the int32 bias, whose input zero point the lowering takes back out: both give the
    model's ``c`` and ``d`` to within the stored precision."""
    model = _lowered(CORPUS / f"affine_ops_{variant}.rknn")
    assert {"BatchNormalization", "BatchNormalizationRelu"} <= set(model.vendor_ops)
    affines = [n for n in model.graph.nodes if n.op == "ChannelAffine"]
    assert [n.attrs.get("_activation") for n in affines] == [None, "Relu"]
    scale, shift = (model.graph.constants[name] for name in affines[0].inputs[1:])
    c, d = _mul_add_constants()
    if variant == "fp16":
        np.testing.assert_array_equal(scale, c.astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(shift, d)
    else:
        _, (_, s, *_rest) = _batch_norm(f"affine_ops_{variant}")
        np.testing.assert_allclose(scale, c, rtol=0, atol=s.scale[0] / 2 * 1.001)
        # the stored bias holds -zp_x * c_q too: without taking it back out, the shift is off by zp_x * c * s_x
        np.testing.assert_allclose(shift, d, rtol=0, atol=1e-5)


def _refusal(tmp_path, stem: str, patch) -> str:
    with pytest.raises(ModelInvalidError) as info:
        _lowered(doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch))
    return str(info.value)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
@pytest.mark.parametrize("which, value", [(3, "mean"), (4, "variance")])
def test_a_mean_or_variance_the_compiler_did_not_fold_is_refused(tmp_path, variant, which, value):
    stem = f"affine_ops_{variant}"
    _, tensors = _batch_norm(stem)
    t = tensors[which]
    new = {"float32": b"\x00\x00\x00\x40", "float16": b"\x00\x40", "int32": b"\x02\x00\x00\x00",
           "int16": b"\x02\x00"}[t.dtype]

    def patch(data):
        tensor_bytes(data, t.name)[:len(new)] = new  # the first channel's value becomes 2
    message = _refusal(tmp_path, stem, patch)
    assert "BatchNormalization" in message and "mean 0, variance 1, epsilon 0" in message and value in message


def test_an_epsilon_the_bson_does_not_give_is_refused(tmp_path):
    node, _ = _batch_norm("affine_ops_fp16")

    def patch(data):
        params = subgraph_table(data).tables(1)[node.index].table(8)
        struct.pack_into("<f", data, params.field_pos(0), 1e-3)
    assert "BSON epsilon 0.0 is not the parameter table's 0.001" in _refusal(tmp_path, "affine_ops_fp16", patch)


def test_an_int8_files_float_scale_is_refused(tmp_path):
    _, tensors = _batch_norm("affine_ops_i8")

    def patch(data):
        data[tensor_table(data, tensors[1].name).field_pos(0)] = 10  # the int16 codes' dtype -> float16
    message = _refusal(tmp_path, "affine_ops_i8", patch)
    assert "an int8 input with a float16 scale" in message and "int16 codes of one step" in message


def test_a_float16_files_batch_norm_scale_is_noted_as_the_simulators_float32_one():
    # the simulator multiplies by the ONNX model's float32 scale, the file holds it in float16
    # (affine_ops_fp16's one-ulp differences: test_vendor_offboard's FIDELITY); int8 files hold codes
    notes = _lowered(CORPUS / "affine_ops_fp16.rknn").notes
    assert len(notes) == 2 and all("BatchNormalization" in n and "stored in float16" in n for n in notes)
    assert "'Mul12_2bn_i1'" in notes[0] and "'c23_8'" in notes[1]
    assert _lowered(CORPUS / "affine_ops_i8.rknn").notes == ()
