"""A vendor file no one here compiled: Ultralytics' RKNN export of a YOLOv8n, run off-board.

``tests/data/ultralytics/yolov8n_rknn_model`` is what ``YOLO("yolov8n.yaml").export(format="rknn",
imgsz=64)`` writes with RKNN-Toolkit2 2.3.2 (``tools/vendor_corpus/ultralytics_export.py``).  Its
graph holds what the project's own corpus did not: the DFL head's anchor grid and strides as
float16 constants in the NPU's NC1HWC2 layout, SPPF's pooling compiled to a whole-map MaxPool
tiled back by ``Expand``, and Resize's empty ``roi`` placeholder of shape (1,).  Its fidelity
against the simulator is asserted in ``tests/test_vendor_offboard.py`` (``FIDELITY``), and
Ultralytics' own predictor drives it in ``tests/test_ultralytics.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower as lower_mod
from rknnlite.model.rknn_graph import lower_rockchip

MODEL_DIR = Path(__file__).resolve().parent / "data" / "ultralytics" / "yolov8n_rknn_model"
RKNN = MODEL_DIR / "yolov8n-rk3588.rknn"
#: YOLOv8's feature maps at 64x64: strides 8, 16, 32 over 8x8, 4x4 and 2x2 cells
GRIDS = ((8, 8), (16, 4), (32, 2))


@pytest.fixture(scope="module")
def loaded():
    return load_model(str(RKNN))


@pytest.fixture(scope="module")
def lowered(loaded):
    return lower_rockchip(loaded.payload, loaded.model)


def _constant(model, name: str) -> np.ndarray:
    return np.asarray(model.graph.constants[name])


def test_the_anchor_grid_is_read_from_its_nc1hwc2_constant(lowered):
    (sub,) = [n for n in lowered.graph.nodes if n.name == "Sub:/model.22/Sub"]
    anchors = _constant(lowered, sub.inputs[0])
    assert anchors.shape == (1, 2, 1, 84)  # (x, y) of 84 cells, the 8 padding channels dropped
    expected = np.concatenate([np.stack(np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5), 0).reshape(2, -1)
                               for _, n in GRIDS], axis=1)
    np.testing.assert_array_equal(anchors[0, :, 0], expected)


def test_the_strides_are_read_from_their_nc1hwc2_constant(lowered):
    (mul,) = [n for n in lowered.graph.nodes if n.name == "Mul:/model.22/Mul_2"]
    strides = _constant(lowered, mul.inputs[1])
    assert strides.shape == (1, 1, 1, 84)
    np.testing.assert_array_equal(strides.ravel(), np.repeat([s for s, _ in GRIDS], [n * n for _, n in GRIDS]))


def test_sppf_pooling_is_tiled_back_by_expand(lowered):
    expands = [n for n in lowered.graph.nodes if n.op == "Expand"]
    assert len(expands) == 3
    for node in expands:
        assert _constant(lowered, node.inputs[1]).tolist() == [1, 128, 2, 2]


def test_resize_skips_the_empty_roi_placeholder(lowered):
    resizes = [n for n in lowered.graph.nodes if n.op == "Resize"]
    assert len(resizes) == 2
    for node in resizes:
        assert node.inputs[1] == "" and _constant(lowered, node.inputs[2]).tolist() == [1.0, 1.0, 2.0, 2.0]


def test_it_runs_by_default_and_keeps_the_librknnrt_attributes():
    with rknnlite.Context(str(RKNN), backend="software") as ctx:  # validated: no override needed
        assert ctx.inputs[0].dims == (1, 64, 64, 3) and ctx.inputs[0].fmt.name == "NHWC"
        data = np.load(RKNN.with_suffix(".npz"))
        (y,) = ctx.run([data["in0"]], data_format="nchw")
    assert y.shape == (1, 84, 84)
    ref = data["out0"]
    assert np.abs(y - ref).max() <= 1e-3 * np.abs(ref).max()


def _patched_int64(monkeypatch, op: str, value):
    original = lower_mod._Lowering.int64_const

    def int64_const(self, node, t):
        return np.array(value, np.int64) if node.op == op else original(self, node, t)

    monkeypatch.setattr(lower_mod._Lowering, "int64_const", int64_const)


def test_an_expand_that_does_not_give_the_files_shape_is_refused(loaded, monkeypatch):
    _patched_int64(monkeypatch, "Expand", [1, 128, 3, 3])
    with pytest.raises(ModelInvalidError, match=r"Expand.*expanding \[1, 128, 1, 1\] to \[1, 128, 3, 3\] gives "
                                                 r"\[1, 128, 3, 3\]; the file says \[1, 128, 2, 2\]"):
        lower_rockchip(loaded.payload, loaded.model)


def test_an_expand_shape_that_does_not_broadcast_is_refused(loaded, monkeypatch):
    _patched_int64(monkeypatch, "Expand", [1, 64, 2, 2])
    with pytest.raises(ModelInvalidError, match="gives no broadcast shape"):
        lower_rockchip(loaded.payload, loaded.model)


def test_an_nc1hwc2_constant_of_another_geometry_is_refused(loaded, monkeypatch):
    original = lower_mod.read_vendor_graph

    def read_vendor_graph(*args, **kwargs):
        vf = original(*args, **kwargs)
        sg = vf.subgraphs[0]
        tensors = tuple(dataclasses.replace(t, npu_shape=(1, 1, 1, 80, 8))
                        if t.name == "/model.22/Constant_12_output_0" else t for t in sg.tensors)
        return dataclasses.replace(vf, subgraphs=(dataclasses.replace(sg, tensors=tensors),) + vf.subgraphs[1:])

    monkeypatch.setattr(lower_mod, "read_vendor_graph", read_vendor_graph)
    with pytest.raises(ModelInvalidError, match=r"NC1HWC2 constant '/model.22/Constant_12_output_0' \(float16, NPU "
                                                 r"shape \[1, 1, 1, 80, 8\]\) does not hold a float or int8 tensor of shape "
                                                 r"\[1, 2, 1, 84\]"):
        lower_rockchip(loaded.payload, loaded.model)
