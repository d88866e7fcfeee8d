"""rknnlite.vision against the model families' own postprocessing, on models built from
their own definitions (Ultralytics' YOLOv8, YOLO11, YOLOv8-seg, YOLOv8-pose, and the yolov5
package's anchor-based YOLOv5n; random weights; tests/data/vision, made by
tools/make_vision_fixtures.py), converted with the toolkit and run on the software backend."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
import vision_reference as ref
from vision_models import DATA, assert_matches, assert_same_as_reference, convert, model_zoo_split
from rknnlite.vision import YOLO11, Detections, YOLOv5, YOLOv8, YOLOv8Pose, YOLOv8Seg, box_iou

SIZE = (64, 96)
DECODERS = {"yolov8": lambda: YOLOv8(num_classes=3, input_size=SIZE),
            "yolo11": lambda: YOLO11(num_classes=3, input_size=SIZE),
            "yolov8_seg": lambda: YOLOv8Seg(num_classes=3, input_size=SIZE),
            "yolov8_pose": lambda: YOLOv8Pose(num_classes=1, input_size=SIZE),
            "yolov5": lambda: YOLOv5(input_size=SIZE, anchors=fixture("yolov5")["anchors"])}


def fixture(name):
    return np.load(DATA / f"{name}.npz")


def outputs_of(data, i):
    return [data[f"out{k}_{i}"] for k in range(3) if f"out{k}_{i}" in data]


def assert_matches_ultralytics(dets: Detections, det: np.ndarray, name: str, masks=None, score_tol=1e-5):
    """``det``: Ultralytics' rows x1, y1, x2, y2, score, class, extras (best first)."""
    match = assert_matches(dets, det[:, :4], det[:, 4], det[:, 5], score_tol)
    if name == "yolov8_pose":
        np.testing.assert_allclose(dets.keypoints[match], det[:, 6:].reshape(-1, 17, 3), atol=1e-3)
    if masks is not None:
        got = dets.masks[match]
        assert got.shape == masks.shape
        # float32 sums in another order may flip a cell whose mask logit is ~0
        assert (got != masks.astype(bool)).mean() < 1e-3


@pytest.mark.parametrize("name", list(DECODERS))
def test_decoders_agree_with_ultralytics_on_its_own_outputs(name):
    data = fixture(name)
    for i in range(len(data["images"])):
        dets = DECODERS[name]()(outputs_of(data, i))
        assert_matches_ultralytics(dets, data[f"det_{i}"], name, data.get(f"mask_{i}"))


@pytest.mark.parametrize("name", list(DECODERS))
def test_converted_models_on_the_software_backend_find_what_ultralytics_finds(name, tmp_path):
    data = fixture(name)
    with rknnlite.Context(convert(name, tmp_path), backend="software") as ctx:
        for i, img in enumerate(data["images"]):
            outs = ctx.run([img[None]], data_format="nhwc")
            dets = DECODERS[name]()(outs)
            assert_matches_ultralytics(dets, data[f"det_{i}"], name, data.get(f"mask_{i}"), score_tol=1e-4)


def test_model_zoo_split_heads_find_what_ultralytics_finds(tmp_path):
    data = fixture("yolov8")
    dec = YOLOv8(num_classes=3, input_size=SIZE)
    with rknnlite.Context(convert("yolov8", tmp_path, model=model_zoo_split("yolov8")), backend="software") as ctx:
        assert len(ctx.outputs) == 9
        for i, img in enumerate(data["images"]):
            assert_matches_ultralytics(dec(ctx.run([img[None]], data_format="nhwc")), data[f"det_{i}"], "yolov8",
                                       score_tol=1e-4)


def test_int8_split_heads_decode_raw_codes_like_the_reference_and_find_the_float_boxes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = fixture("yolov8")
    dec = YOLOv8(num_classes=3, input_size=SIZE)
    split = model_zoo_split("yolov8")
    path = convert("yolov8", tmp_path, quantize=True, images=data["images"], model=split)
    matched = total = 0
    with rknnlite.Context(path, backend="software") as ctx:
        qs = [(a.scale, a.zp) for a in ctx.outputs]
        for i, img in enumerate(data["images"]):
            raw = ctx.run([img[None]], data_format="nhwc", want_float=False)
            assert all(y.dtype == np.int8 for y in raw)
            dets = dec(raw, quant=ctx.outputs)
            kept = ref.yolov8_split(raw, 3, SIZE, dec.conf, dec.iou, qs)
            assert_same_as_reference(dets, kept, max(q[0] for q in qs[1::3]))
            # against the float model's (Ultralytics') boxes: most found again
            ultra = data[f"det_{i}"]
            iou = box_iou(ultra[:, :4], dets.boxes)
            same_class = ultra[:, 5:6].astype(int) == dets.class_ids[None, :]
            matched += int(((iou >= 0.5) & same_class).any(axis=1).sum())
            total += len(ultra)
    # random weights quantize worse than trained ones: 34 of the 42 are found (IoU >= 0.5)
    assert matched >= 0.75 * total, (matched, total)


def test_int8_yolov5_heads_decode_raw_codes_like_the_reference(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = fixture("yolov5")
    dec = DECODERS["yolov5"]()
    found = 0
    with rknnlite.Context(convert("yolov5", tmp_path, quantize=True, images=data["images"]), backend="software") as ctx:
        qs = [(a.scale, a.zp) for a in ctx.outputs]
        for img in data["images"]:
            raw = ctx.run([img[None]], data_format="nhwc", want_float=False)
            assert all(y.dtype == np.int8 for y in raw)
            kept = ref.yolov5(raw, data["anchors"].tolist(), SIZE, dec.conf, dec.iou, qs)
            # a score is objectness x class: two codes' rounding
            assert_same_as_reference(dec(raw, quant=ctx.outputs), kept, 2 * max(q[0] for q in qs))
            found += len(kept)
    assert found > 0
