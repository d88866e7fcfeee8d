"""The family-built models of tests/data/vision, converted for the vision tests, and the
check that a decoder's detections are the family's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conftest import REPO
from rknnlite.toolkit import RKNN
from rknnlite.vision import Detections, box_iou

DATA = REPO / "tests" / "data" / "vision"


def convert(name, tmp_path, quantize=False, images=None, model=None, mean=0.0, std=255.0) -> str:
    """Convert fixture ``name`` (or ONNX bytes ``model``) to a .rknn file in ``tmp_path``;
    the model sees ``(pixel - mean) / std``."""
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", mean_values=[[mean] * 3], std_values=[[std] * 3],
                       float_dtype="float32") == 0
    assert rknn.load_onnx(model if model is not None else str(DATA / f"{name}.onnx")) == 0
    dataset = picture_dataset(tmp_path, images) if quantize else None
    assert rknn.build(do_quantization=quantize, dataset=dataset) == 0
    path = tmp_path / f"{name}.rknn"
    assert rknn.export_rknn(str(path)) == 0
    rknn.release()
    return str(path)


def picture_dataset(folder, pictures) -> str:
    """A calibration ``dataset.txt`` in ``folder``: each (H, W, 3) picture saved as a
    (1, 3, H, W) float32 ``.npy``; returns the list's path."""
    lines = []
    for i, img in enumerate(pictures):
        np.save(folder / f"img{i}.npy", img.transpose(2, 0, 1)[None].astype(np.float32))
        lines.append(str(folder / f"img{i}.npy"))
    (folder / "dataset.txt").write_text("\n".join(lines) + "\n")
    return str(folder / "dataset.txt")


def head_in_float16(rknn: RKNN, folder: Path, stem: str, dataset: str, at_least: int) -> RKNN:
    """The vendor's two hybrid steps on the loaded ``rknn`` (released here), run in ``folder``
    (the current directory, where step1 writes ``<stem>.model/.data/.quantization.cfg``, stem
    that of the ONNX file): the cfg edited to keep every tensor of a YOLOv8 Detect head
    (``/model.22/...``, at least ``at_least`` of them) and ``output0`` in float16.  Returns the
    step2 RKNN, built, to export."""
    import yaml

    assert rknn.hybrid_quantization_step1(dataset=dataset) == 0
    rknn.release()
    cfg_path = folder / f"{stem}.quantization.cfg"
    cfg = yaml.safe_load(cfg_path.read_text())
    head = {name: "float16" for name in cfg["quantize_parameters"] if name.startswith("/model.22/")}
    assert len(head) >= at_least, sorted(head)
    cfg["custom_quantize_layers"] = {**head, "output0": "float16"}
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    step2 = RKNN()
    assert step2.hybrid_quantization_step2(str(folder / f"{stem}.model"), str(folder / f"{stem}.data"),
                                           str(cfg_path)) == 0
    return step2


def assert_matches(dets: Detections, boxes, scores, class_ids, score_tol: float, keypoints=None,
                   kp_tol: float = 1e-3) -> np.ndarray:
    """``dets`` are the reference's detections one to one: the same boxes to a hundredth of a
    pixel or 1e-4 of the coordinate (an IoU bound fails a box a fifth of a pixel wide on float32
    noise: the random networks' yolov5 has one), scores within ``score_tol``, same classes,
    keypoints (x, y) within ``kp_tol`` px.  Returns, per reference row, the index of its detection."""
    assert len(boxes) > 0
    assert len(dets) == len(boxes)
    iou = box_iou(dets.boxes, np.asarray(boxes, np.float32))
    match = np.argmax(iou, axis=0)
    assert sorted(match.tolist()) == list(range(len(boxes)))  # one-to-one
    np.testing.assert_allclose(dets.boxes[match], np.asarray(boxes, np.float32), rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(dets.scores[match], scores, atol=score_tol)
    np.testing.assert_array_equal(dets.class_ids[match], np.asarray(class_ids).astype(int))
    if keypoints is not None:
        np.testing.assert_allclose(dets.keypoints[match, :, :2], keypoints, atol=kp_tol)
    return match


def assert_same_as_reference(dets: Detections, kept, tol: float):
    """``dets`` are tests/vision_reference.py's ``kept`` (box, score, class, extra) one for one:
    the same-class box at IoU >= 0.99 (or, for a box of no area, which int8 distances can
    give, the same corners within 1e-3 px), the score within ``tol``."""
    assert len(dets) == len(kept)
    for box, score, cls, _ in kept:
        iou = box_iou(dets.boxes, np.array([box], np.float32))[:, 0]
        same = dets.class_ids == cls
        j = int(np.argmax(np.where(same, iou, -1)))
        if iou[j] < 0.99:
            j = int(np.argmin(np.where(same, np.abs(dets.boxes - np.float32(box)).max(axis=1), np.inf)))
            assert np.abs(dets.boxes[j] - np.float32(box)).max() < 1e-3
        assert abs(dets.scores[j] - score) <= tol


def model_zoo_split(name: str) -> bytes:
    """The Ultralytics model with its head split the way Rockchip's model zoo exports it:
    per stride the box distribution (1, 64, H, W), the class scores after a sigmoid
    (1, nc, H, W) and their sum clipped to [0, 1] (1, 1, H, W), instead of the one
    concatenated, decoded output."""
    import onnx
    from onnx import helper

    m = onnx.load(str(DATA / f"{name}.onnx"))
    g = m.graph
    outputs = []
    for i in range(3):
        box = f"/model.22/cv2.{i}/cv2.{i}.2/Conv_output_0"
        cls = f"/model.22/cv3.{i}/cv3.{i}.2/Conv_output_0"
        g.node.extend([
            helper.make_node("Sigmoid", [cls], [f"cls{i}"]),
            helper.make_node("ReduceSum", [f"cls{i}", f"axes{i}"], [f"sum{i}_raw"], keepdims=1),
            helper.make_node("Clip", [f"sum{i}_raw", "zero", "one"], [f"sum{i}"]),
        ])
        g.initializer.append(onnx.numpy_helper.from_array(np.array([1], np.int64), f"axes{i}"))
        outputs += [box, f"cls{i}", f"sum{i}"]
    g.initializer.extend([onnx.numpy_helper.from_array(np.array(0, np.float32), "zero"),
                          onnx.numpy_helper.from_array(np.array(1, np.float32), "one")])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs])
    return m.SerializeToString()
