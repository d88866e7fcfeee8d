"""``Pad`` in vendor files, off-board.

The corpus cases ``pad_zero``, ``pad_value``, ``pad_reflect``, ``pad_edge`` (ONNX Pads the compiler
keeps) and ``dilated_pad`` (the compiler's own Pad: DeepLabV3's ASPP, a dilated conv whose pads a
conv cannot hold) were built with RKNN-Toolkit2 2.5.0 for rk3588 (``tools/vendor_corpus/models.py``).
Their fidelity against the simulator is asserted in ``tests/test_vendor_offboard.py`` (``FIDELITY``).
The other forms torchvision's DeepLabV3-MobileNetV3 compiles to are here too: the compiler's channel
split of a wide conv after its Pad (``wide_dilated``) and Resize by sizes (``resize_sizes``).
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower as lower_mod
from rknnlite.model.rknn_graph import lower_rockchip
from rknnlite.model.rknn_graph.graph import read_vendor_graph

from corpus import CORPUS, corpus_arrays
from vendor_files import doctored_copy, tensor_bytes

PADS = [0, 0, 1, 2, 0, 0, 2, 1]
#: stem -> (mode, pads, constant_value or None when the node has no such input)
CASES = {
    "pad_zero": ("constant", [0, 1, 1, 2, 0, 2, 2, 1], 0.0),  # the compiler adds the zero input ONNX left out
    "pad_value": ("constant", [0, 0, 2, 1, 0, 0, 1, 2], 0.5),
    "pad_reflect": ("reflect", PADS, None),
    "pad_edge": ("edge", PADS, None),
    "dilated_pad": ("constant", [0, 0, 24, 24, 0, 0, 24, 24], None),  # the compiler's: no BSON, no value
}
STEMS = [f"{case}_{variant}" for case in CASES for variant in ("fp16", "i8")]


def _loaded(stem: str):
    return load_model(str(CORPUS / f"{stem}.rknn"))


def _pad_node(model):
    (node,) = [n for n in model.graph.nodes if n.op == "Pad"]
    return node


@pytest.mark.parametrize("stem", STEMS)
def test_pad_lowers_to_onnx_pad_with_the_stored_mode_pads_and_value(stem):
    mode, pads, value = CASES[stem.rsplit("_", 1)[0]]
    model = lower_rockchip(_loaded(stem).payload, _loaded(stem).model)
    assert "Pad" in model.vendor_ops
    node = _pad_node(model)
    assert node.attrs == {"mode": mode}
    assert model.graph.constants[node.inputs[1]].tolist() == pads
    if value is None:
        assert len(node.inputs) == 2
    else:
        assert model.graph.constants[node.inputs[2]].tolist() == [value]


def test_the_parameter_table_holds_the_mode_and_the_compilers_own_pad_has_no_bson():
    for stem, mode in (("pad_reflect_fp16", "reflect"), ("dilated_pad_i8", "constant")):
        loaded = _loaded(stem)
        rk = loaded.model
        vf = read_vendor_graph(loaded.payload, rk.header_size, rk.model_size, rk.label)
        (node,) = [n for n in vf.subgraphs[0].nodes if n.op == "Pad"]
        assert (node.param_type, node.params) == (30, {"mode": mode})
        assert node.attrs == ({} if stem.startswith("dilated") else {"mode": {"dtype": "s", "value": mode}})


def test_the_pad_value_lands_on_the_int8_grid_as_the_simulator_writes_it():
    # pad_zero: the Pad writes the graph output, so the border is the padded value itself
    data = corpus_arrays("pad_zero_i8")
    with rknnlite.Context(str(CORPUS / "pad_zero_i8.rknn"), backend="software") as ctx:
        (y,) = ctx.run([data["in0"]], data_format="nchw")
        scale, zp = ctx.outputs[0].scale, ctx.outputs[0].zp
    sim = data["out0"].reshape(y.shape)
    border = np.ones(y.shape, bool)
    border[:, 1:-2, 1:-2, 2:-1] = False  # pads [0, 1, 1, 2, 0, 2, 2, 1]
    assert np.all(y[border] == 0) and np.all(sim[border] == 0)
    assert zp != 0 and scale > 0  # zero is code zp, exactly representable


# -- refusals: every field the lowering reads, doctored ---------------------------------------


def _doctor(monkeypatch, node_change=None, tensor_change=None):
    """Lower with the Pad node (and the tensors) of the file changed by ``node_change(node)`` /
    ``tensor_change(tensor, pad_node) -> tensor``."""
    original = lower_mod.read_vendor_graph

    def read_vendor_graph(*args, **kwargs):
        vf = original(*args, **kwargs)
        sg = vf.subgraphs[0]
        (pad,) = [n for n in sg.nodes if n.op == "Pad"]
        nodes = tuple(node_change(n) if node_change and n is pad else n for n in sg.nodes)
        tensors = tuple(tensor_change(t, pad) if tensor_change else t for t in sg.tensors)
        return dataclasses.replace(vf, subgraphs=(dataclasses.replace(sg, nodes=nodes, tensors=tensors),)
                                   + vf.subgraphs[1:])

    monkeypatch.setattr(lower_mod, "read_vendor_graph", read_vendor_graph)


def _refused(stem: str, match: str) -> None:
    loaded = _loaded(stem)
    with pytest.raises(ModelInvalidError, match=match):
        lower_rockchip(loaded.payload, loaded.model)


@pytest.mark.parametrize("stem", ["pad_reflect_fp16", "dilated_pad_i8"])
def test_a_mode_never_built_is_refused_naming_it_the_platform_and_the_toolkit(stem, monkeypatch):
    _doctor(monkeypatch, lambda n: dataclasses.replace(n, params={"mode": "wrap"}, bson=b""))
    _refused(stem, r"node \d+ \(Pad 'Pad:[^']+'\) \(platform rk3588, toolkit 2\.5\.0[^)]*\): Pad mode 'wrap' "
                   r"\(parameter table; BSON none\); the lowering runs modes constant, reflect, edge")


def test_a_bson_mode_that_disagrees_with_the_parameter_table_is_refused(monkeypatch):
    _doctor(monkeypatch, lambda n: dataclasses.replace(n, params={"mode": "edge"}))
    _refused("pad_reflect_i8", r"Pad mode 'edge' \(parameter table; BSON 'reflect'\)")


def _patched_pads(monkeypatch, value):
    original = lower_mod._Lowering.int64_const

    def int64_const(self, node, t):
        return np.array(value, np.int64) if node.op == "Pad" else original(self, node, t)

    monkeypatch.setattr(lower_mod._Lowering, "int64_const", int64_const)


def test_negative_pads_are_refused(monkeypatch):
    _patched_pads(monkeypatch, [0, 0, -1, 2, 0, 0, 2, 1])
    _refused("pad_edge_fp16", r"pads \[0, 0, -1, 2, 0, 0, 2, 1\] for a rank-4 input; 8 non-negative values")


def test_pads_of_another_rank_are_refused(monkeypatch):
    _patched_pads(monkeypatch, [1, 2, 2, 1])
    _refused("pad_edge_fp16", r"pads \[1, 2, 2, 1\] for a rank-4 input")


def test_pads_that_do_not_give_the_files_shape_are_refused(monkeypatch):
    _patched_pads(monkeypatch, [0, 0, 2, 2, 0, 0, 2, 1])
    _refused("pad_value_i8", r"pads \[0, 0, 2, 2, 0, 0, 2, 1\] on \[1, 8, 16, 16\] give \[1, 8, 20, 19\]; "
                             r"the file says \[1, 8, 19, 19\]")


def test_reflect_pads_beyond_the_axis_are_refused(monkeypatch):
    _patched_pads(monkeypatch, [0, 0, 16, 0, 0, 0, 0, 0])

    def shape(t, pad):
        return dataclasses.replace(t, shape=(1, 8, 32, 16)) if t.index == pad.outputs[0] else t

    _doctor(monkeypatch, tensor_change=shape)
    _refused("pad_reflect_fp16", r"reflect pads \[0, 0, 16, 0, 0, 0, 0, 0\] reach beyond an axis of \[1, 8, 16, 16\]")


def test_a_value_input_to_a_reflect_pad_is_refused(monkeypatch):
    _doctor(monkeypatch, lambda n: dataclasses.replace(n, inputs=n.inputs + n.inputs[1:2]))
    _refused("pad_reflect_fp16", r"2 constant inputs \['pads5', 'pads5'\] to a 'reflect' Pad")


def test_a_value_that_is_not_one_float32_is_refused(monkeypatch):
    def value(t, pad):
        return dataclasses.replace(t, dtype="float16") if t.index == pad.inputs[2] else t

    _doctor(monkeypatch, tensor_change=value)
    _refused("pad_value_fp16", r"constant_value 'value6' is a float16 shape \[1\] of 4 bytes; one float32 constant "
                               r"was expected")


def test_a_value_that_is_not_finite_is_refused(tmp_path):
    path = doctored_copy(CORPUS / "pad_value_fp16.rknn", tmp_path,
                         lambda data: struct.pack_into("<f", tensor_bytes(data, "value6"), 0, float("nan")))
    with pytest.raises(ModelInvalidError, match=r"constant_value nan is not finite"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem", ["pad_saturated_i8", "pad_saturated_rk3576_i8", "pad_saturated_rk3562_i8"])
def test_an_int8_value_beyond_the_grid_saturates_as_the_simulator_writes_it(stem):
    # pad_saturated: 40 padded onto a Sigmoid's fixed grid (scale 1/255 from 0) saturates to its end, 1.0, in
    # the simulator as off-board (a random graph, seed 68, was refused for such a Pad on five platforms);
    # -2.5 padded after a HardSwish stays on its grid, whose calibration saw it
    data = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outputs = ctx.run([data["in0"]], data_format="nchw")
        scales = [a.scale for a in ctx.outputs]
    border = np.ones(outputs[0].shape, bool)
    border[:, :, 1:-1, 1:-1] = False
    for k, (y, value) in enumerate(zip(outputs, (-2.5, 1.0))):
        sim = data[f"out{k}"].reshape(y.shape)
        (got,) = set(y[border].tolist())
        assert abs(got - value) <= scales[k] / 2 and np.all(sim[border] == got), (k, got)


def test_an_int8_pad_that_requantizes_is_refused(monkeypatch):
    def zero_point(t, pad):
        return dataclasses.replace(t, zero_point=(5,)) if t.index == pad.outputs[0] else t

    _doctor(monkeypatch, tensor_change=zero_point)
    _refused("pad_edge_i8", r"Pad input int8 \(scale \[[0-9.]+\], zero point \[3\]\), output int8 "
                            r"\(scale \[[0-9.]+\], zero point \[5\]\); only float16, or int8 keeping its quantization")


# -- the compiler's split of a wide conv after its own Pad (DeepLabV3's ASPP; corpus wide_dilated) ----


def test_a_wide_dilated_conv_is_split_into_channel_branches_that_sum_in_float32():
    model = lower_rockchip(_loaded("wide_dilated_fp16").payload, _loaded("wide_dilated_fp16").model)
    assert model.vendor_ops == ("InputOperator", "Conv", "Pad", "Split", "ConvAdd", "OutputOperator")
    (split,) = [n for n in model.graph.nodes if n.op == "Split"]
    assert split.attrs == {"axis": 1}  # the parameter table's: no size constant, no BSON
    assert model.graph.constants[split.inputs[1]].tolist() == [64, 64, 64, 64]  # 256 channels
    assert split.inputs[0] == _pad_node(model).outputs[0]
    # the simulator computes the unsplit conv: every partial sum stays float32, only the output is rounded
    partial = ["y_branch1", "Conv:Conv8_branch0_ConvAdd", "Conv:Conv8_branch2_ConvAdd"]
    adds = {n.name: n.outputs[0] for n in model.graph.nodes if n.op == "Add"}
    kept = set(model.graph.keep_float)
    assert {"y_branch1", adds[partial[1]], adds[partial[2]]} <= kept
    assert {n.outputs[0] for n in model.graph.nodes if n.op == "Conv" and n.name.startswith("Conv:Conv8")} <= kept
    assert adds["Conv:Conv8_branch3_ConvAdd"] == "y" and "y" not in kept


def test_a_conv_after_the_compilers_pad_has_auto_pad_valid_and_no_pads():
    loaded = _loaded("wide_dilated_fp16")
    rk = loaded.model
    vf = read_vendor_graph(loaded.payload, rk.header_size, rk.model_size, rk.label)
    branches = [n for n in vf.subgraphs[0].nodes if n.op == "ConvAdd"]
    assert [(n.params["auto_pad"], n.params["pads"]) for n in branches] == [("VALID", [0, 0, 0, 0])] * 3


def _patched_nodes(monkeypatch, op: str, **params) -> None:
    """Lower with ``params`` set in the parameter table of every ``op`` node of subgraph 0."""
    def patch(n):
        return dataclasses.replace(n, params=dict(n.params, **params)) if n.op == op else n

    original = lower_mod.read_vendor_graph

    def read_vendor_graph(*args, **kwargs):
        vf = original(*args, **kwargs)
        sg = vf.subgraphs[0]
        return dataclasses.replace(vf, subgraphs=(dataclasses.replace(sg, nodes=tuple(patch(n) for n in sg.nodes)),))

    monkeypatch.setattr(lower_mod, "read_vendor_graph", read_vendor_graph)


def test_auto_pad_valid_with_pads_is_refused(monkeypatch):
    _patched_nodes(monkeypatch, "ConvAdd", pads=[1, 1, 1, 1])
    _refused("wide_dilated_fp16", r"has auto_pad 'VALID' with pads \[1, 1, 1, 1\]; only explicit pads \(NOTSET\), "
                                  r"or VALID with pads 0")


def test_a_split_without_size_constant_on_another_axis_is_refused(monkeypatch):
    _patched_nodes(monkeypatch, "Split", axis=2)
    _refused("wide_dilated_fp16", r"a Split without size constant or BSON on axis 2; only the compiler's channel "
                                  r"split \(axis 1\) was decoded")


def test_the_int8_form_of_the_split_float16_branches_is_refused_by_name():
    _refused("wide_dilated_i8", r"node 3 \(exDataConvert\): an exDataConvert without BSON \(int8 tensor 'conv_3_pad' "
                                r"to float16\), the compiler's own around a float16 split conv in an int8 file; those "
                                r"branches do not match the vendor simulator off-board")


# -- Resize by sizes (torchvision's interpolate(size=...); DeepLabV3's upsampling; corpus resize_sizes) ----


@pytest.mark.parametrize("stem", ["resize_sizes_fp16", "resize_sizes_i8"])
def test_a_resize_by_sizes_lowers_with_the_stored_sizes(stem):
    model = lower_rockchip(_loaded(stem).payload, _loaded(stem).model)
    resizes = [n for n in model.graph.nodes if n.op == "Resize"]
    assert [n.inputs[1:3] for n in resizes] == [["", ""], ["", ""]]  # no roi, no scales
    assert [model.graph.constants[n.inputs[3]].tolist() for n in resizes] == [[1, 8, 16, 16], [1, 8, 8, 8]]
    assert [n.attrs["mode"] for n in resizes] == ["linear", "linear"]
    assert [n.attrs["coordinate_transformation_mode"] for n in resizes] == ["half_pixel", "half_pixel"]


def test_sizes_that_are_not_the_files_output_shape_are_refused(monkeypatch):
    original = lower_mod._Lowering.int64_const

    def int64_const(self, node, t):
        return np.array([1, 8, 16, 15], np.int64) if node.op == "Resize" else original(self, node, t)

    monkeypatch.setattr(lower_mod._Lowering, "int64_const", int64_const)
    _refused("resize_sizes_fp16", r"sizes \[1, 8, 16, 15\] of a rank-4 input are not the output shape \[1, 8, 16, 16\]")
