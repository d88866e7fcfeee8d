"""A YOLOv8 detector (Ultralytics' own definition, random weights: tests/data/vision/yolov8.onnx,
its head concatenating pixel boxes and 0..1 class scores in one output) quantized to int8 on real
photographs (scikit-image's bundled samples): plain int8 loses the class scores and the build
says so; with hybrid quantization it finds the float model's boxes: most of them with only the
collapsed output in float16 (auto hybrid), nearly all with the whole head (``model.22``) in float16.
Why the rest differ: docs/hybrid-quantization.md.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("yaml")
Image = pytest.importorskip("PIL.Image")


import rknnlite  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.vision import YOLOv8, box_iou, letterbox  # noqa: E402
from vision_models import head_in_float16, picture_dataset  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "tests" / "data" / "vision" / "yolov8.onnx"
SIZE = (64, 96)  # the fixture's input, height x width
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png")


def _photos():
    spec = importlib.util.find_spec("skimage")  # the files only: the package is not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("scikit-image (its bundled sample photographs) is not installed")
    folder = Path(list(spec.submodule_search_locations)[0]) / "data"
    out = []
    for name in PHOTOS:
        rgb = np.asarray(Image.open(folder / name).convert("RGB"))
        out.append(letterbox(rgb, SIZE)[0])  # HWC uint8, the model's size
    return out


def _loaded(**config) -> RKNN:
    rk = RKNN()
    assert rk.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], target_platform="rk3588", **config) == 0
    assert rk.load_onnx(str(MODEL)) == 0
    return rk


def _export(rk, tmp_path) -> str:
    path = tmp_path / f"yolo_{len(list(tmp_path.glob('yolo_*')))}.rknn"
    assert rk.export_rknn(str(path)) == 0
    rk.release()
    return str(path)


def _build(tmp_path, photos, caplog, **build):
    caplog.set_level(logging.INFO, logger="rknnlite.toolkit")
    rk = _loaded(**build.pop("config", {}))
    quant = build.pop("quantize", True)
    assert rk.build(do_quantization=quant, dataset=picture_dataset(tmp_path, photos) if quant else None, **build) == 0
    return _export(rk, tmp_path)


def _build_head_float(tmp_path, photos, caplog):
    """The vendor's two steps, the cfg edited to keep every tensor of the Detect head
    (``/model.22/...``, its convolutions and decoding) in float16."""
    caplog.set_level(logging.INFO, logger="rknnlite.toolkit")
    return _export(head_in_float16(_loaded(), tmp_path, "yolov8", picture_dataset(tmp_path, photos), 21), tmp_path)


def _detect(path, photos):
    dec = YOLOv8(num_classes=3, input_size=SIZE)
    with rknnlite.Context(path) as ctx:
        return [dec(ctx.run([img[None]])) for img in photos]


def _found(reference, dets) -> float:
    """The share of ``reference``'s boxes found again (IoU >= 0.5, same class)."""
    hit = total = 0
    for ref, got in zip(reference, dets):
        total += len(ref)
        if len(ref) and len(got):
            iou = box_iou(ref.boxes, got.boxes)
            hit += int(((iou >= 0.5) & (ref.class_ids[:, None] == got.class_ids[None, :])).any(axis=1).sum())
    return hit / max(total, 1)


def test_hybrid_int8_finds_the_float_boxes_on_real_photos(tmp_path, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)  # hybrid step1 writes its files in the current directory
    photos = _photos()
    float_dets = _detect(_build(tmp_path, photos, caplog, quantize=False), photos)
    assert sum(len(d) for d in float_dets) >= 3  # something to find

    caplog.clear()
    plain = _detect(_build(tmp_path, photos, caplog), photos)
    warned = [r.getMessage() for r in caplog.records if "quantize to one value" in r.getMessage()]
    assert warned and "output0" in warned[0]

    caplog.clear()
    hybrid = _detect(_build(tmp_path, photos, caplog, auto_hybrid=True), photos)
    assert any("Meet hybrid type, dtype: float16, tensor: output0" in r.getMessage() for r in caplog.records)
    caplog.clear()
    head = _detect(_build_head_float(tmp_path, photos, caplog), photos)
    floated = {r.getMessage().rsplit(" ", 1)[-1] for r in caplog.records if "Meet hybrid type" in r.getMessage()}
    assert {"/model.22/cv3.0/cv3.0.2/Conv_output_0", "/model.22/dfl/Softmax_output_0", "output0"} <= floated

    float32 = _detect(_build(tmp_path, photos, caplog, quantize=False, config={"float_dtype": "float32"}), photos)

    lost = _found(float_dets, plain)
    recall, precision = _found(float_dets, hybrid), _found(hybrid, float_dets)
    head_recall, head_precision = _found(float_dets, head), _found(head, float_dets)
    floor = _found(float_dets, float32)
    # the figures of docs/hybrid-quantization.md: plain 0 %; auto hybrid 87 % of the 78 float16 boxes
    # found, 79 % of its boxes float16's; the head in float16 91 % and 83 %; and the float32 build
    # itself finds only 96 %: this random network's logits (+-200) flip on float16 rounding already.
    # Auto hybrid's precision was 90 % before the class logits (the Sigmoid's input) were clamped to
    # [-7, 7] as the vendor does.  Their +-200 int8 grid (step 1.6) rounded each logit near the 0.25
    # threshold (-1.1) to -1.57 or 0, a threshold of about 0.31 in effect, which dropped chelsea's
    # marginal boxes.  Not a loss of the clamp: built through step1/step2 with output0 and the Split
    # in float16, the clamped int8 logits and unclamped float16 logits give the same boxes (85 % /
    # 82 %), and those decoded at 0.31 give 87 % again (docs/hybrid-quantization.md).  Hence 0.75.
    assert lost == 0.0
    figures = (recall, precision, head_recall, head_precision)
    assert recall >= 0.8 and precision >= 0.75, figures
    # (each change of int8 arithmetic moves a few of this random network's boxes: the head's 92 % /
    # 87 % with float32 sums, float16 biases and symmetric weights; 90 % / 84 % at worst on the way
    # to exact sums, int32 biases and the vendor's asymmetric weights; 99 % / 89 % with weight codes
    # of float16-rounded weights, 91 % / 83 % with the vendor's codes of the float32 ones)
    assert head_recall >= 0.9 and head_precision >= 0.8 and head_recall >= recall, figures
    assert 0.9 <= floor < 1.0, floor
