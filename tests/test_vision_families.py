"""rknnlite.vision's YOLOX, YOLOv7, RetinaFace and SCRFD decoders against the families' own
postprocessing (tests/data/vision, made by tools/make_family_fixtures.py): YOLOX from
Megvii's ``yolox.models`` with ``yolox.utils.postprocess``; YOLOv7 built by the
``yolov7detect`` package's ``Model`` (a small spec, its IDetect head) with its own decoding
and ``non_max_suppression``; RetinaFace from facexlib's
definition with its prior boxes, decoding and NMS; SCRFD, whose PyTorch definition no
package carries, a stand-in network of its layout decoded by InsightFace's own ``SCRFD``.
Random weights; on the families' outputs, and on the models converted with the toolkit
and run on the software backend."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
import vision_reference as ref
from vision_models import DATA, assert_matches, assert_same_as_reference, convert
from rknnlite.constants import QntType
from rknnlite.vision import SCRFD, YOLOX, Detections, RetinaFace, YOLOv7, box_iou

SIZE = (64, 96)
#: name -> (decoder, the model's input normalisation (mean, std))
FAMILIES = {"yolox": (lambda **kw: YOLOX(**{"input_size": SIZE, "conf": 0.25, "iou": 0.45, **kw}), (0.0, 255.0)),
            "yolov7": (lambda **kw: YOLOv7(**{"input_size": SIZE, "anchors": fixture("yolov7")["anchors"], **kw}),
                       (0.0, 255.0)),
            "retinaface": (lambda **kw: RetinaFace(**{"input_size": SIZE, "conf": 0.5, "iou": 0.4, **kw}), (0.0, 255.0)),
            "scrfd": (lambda **kw: SCRFD(**{"input_size": SIZE, "conf": 0.5, "iou": 0.4, **kw}), (127.5, 128.0))}


def fixture(name):
    return np.load(DATA / f"{name}.npz")


def outputs_of(data, i):
    return [data[f"out{k}_{i}"] for k in range(9) if f"out{k}_{i}" in data]


def assert_matches_family(dets: Detections, rows: np.ndarray, name: str, score_tol: float, kp_tol: float = 1e-3):
    """``rows``: the family's x1, y1, x2, y2, score, then class (YOLOX, YOLOv7) or five (x, y)
    landmarks (faces, class 0)."""
    if name.startswith("yolo"):
        assert_matches(dets, rows[:, :4], rows[:, 4], rows[:, 5], score_tol)
    else:
        assert_matches(dets, rows[:, :4], rows[:, 4], np.zeros(len(rows)), score_tol,
                       rows[:, 5:15].reshape(-1, 5, 2), kp_tol)


def whole_pixel_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU the way InsightFace's SCRFD NMS measures it: a box is ``x2 - x1 + 1`` wide."""
    w = np.maximum(0, np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]) + 1)
    h = np.maximum(0, np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]) + 1)
    area = lambda x: (x[:, 2] - x[:, 0] + 1) * (x[:, 3] - x[:, 1] + 1)  # noqa: E731
    inter = w * h
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def assert_same_faces_but_for_whole_pixel_ties(dets: Detections, det: np.ndarray, thr: float):
    """SCRFD after NMS: the faces InsightFace keeps are ours, but for pairs whose two IoU
    measures fall on either side of the threshold, and the faces those decisions free or
    suppress in turn (a face only one side keeps overlaps, past the threshold, one that
    only the other side keeps)."""
    ours, theirs = dets.boxes, det[:, :4]
    same = box_iou(theirs, ours) >= 0.99
    theirs_only, ours_only = theirs[~same.any(axis=1)], ours[~same.any(axis=0)]
    assert same.any(axis=1).sum() >= 0.8 * len(theirs)
    assert same.any(axis=1).sum() == same.any(axis=0).sum()
    for boxes, other, other_only, other_iou in ((theirs_only, ours, ours_only, box_iou),
                                                (ours_only, theirs, theirs_only, whole_pixel_iou)):
        for box in boxes:
            plain, whole = box_iou(box[None], other)[0], whole_pixel_iou(box[None], other)[0]
            tie = (np.minimum(plain, whole) <= thr) & (thr < np.maximum(plain, whole))
            chain = (other_iou(box[None], other_only)[0] > thr) if len(other_only) else np.zeros(1, bool)
            assert tie.any() or chain.any(), box


@pytest.mark.parametrize("name", list(FAMILIES))
def test_decoders_agree_with_the_family_on_its_own_outputs(name):
    data = fixture(name)
    for i in range(len(data["images"])):
        dets = FAMILIES[name][0]()(outputs_of(data, i))
        if name == "scrfd":
            assert_same_faces_but_for_whole_pixel_ties(dets, data[f"det_{i}"], 0.4)
        else:
            assert_matches_family(dets, data[f"det_{i}"], name, 1e-5)


def test_scrfd_candidates_are_insightfaces(tmp_path):
    """Before NMS (an IoU threshold of 1 keeps every candidate) the decoded faces are
    InsightFace's, box for box, on its outputs and on the converted model's."""
    data = fixture("scrfd")
    decoder, (mean, std) = FAMILIES["scrfd"]
    keep_all = decoder(iou=1.0, max_det=1000)
    with rknnlite.Context(convert("scrfd", tmp_path, mean=mean, std=std), backend="software") as ctx:
        for i, img in enumerate(data["images"]):
            cand = data[f"cand_{i}"]
            assert_matches_family(keep_all(outputs_of(data, i)), cand, "scrfd", 1e-5)
            assert_matches_family(keep_all(ctx.run([img[None]], data_format="nhwc")), cand, "scrfd", 1e-4, 1e-2)


@pytest.mark.parametrize("name", ["yolox", "yolov7", "retinaface"])
def test_converted_models_on_the_software_backend_find_what_the_family_finds(name, tmp_path):
    data = fixture(name)
    decoder, (mean, std) = FAMILIES[name]
    with rknnlite.Context(convert(name, tmp_path, mean=mean, std=std), backend="software") as ctx:
        for i, img in enumerate(data["images"]):
            outs = ctx.run([img[None]], data_format="nhwc")
            # landmarks are the prior size (up to 512 px) x 0.1 x the raw offset
            assert_matches_family(decoder()(outs), data[f"det_{i}"], name, 1e-4, 1e-2)


#: name -> the reference decoding of tests/vision_reference.py: (raw outputs, (scale, zp) per output) -> kept
REFERENCES = {
    "yolox": lambda raw, qs: ref.yolox(raw, SIZE, 0.25, 0.45, qs),
    "yolov7": lambda raw, qs: ref.yolov5(raw, fixture("yolov7")["anchors"].tolist(), SIZE, 0.25, 0.45, qs),
    "retinaface": lambda raw, qs: ref.retinaface(*raw, SIZE, 0.5, 0.4, qs),
    "scrfd": lambda raw, qs: ref.scrfd(raw, SIZE, 0.5, 0.4, qs=qs),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_int8_models_decode_raw_codes_like_the_reference(name, tmp_path, monkeypatch):
    """Converted to int8 on the fixture's pictures: the raw int8 outputs decode like the
    straightforward reference on the same codes (scores within one quantization step, two
    for the YOLO heads' objectness x class)."""
    monkeypatch.chdir(tmp_path)
    data = fixture(name)
    decoder, (mean, std) = FAMILIES[name]
    found = 0
    path = convert(name, tmp_path, quantize=True, images=data["images"], mean=mean, std=std)
    with rknnlite.Context(path, backend="software") as ctx:
        qs = [(a.scale, a.zp) for a in ctx.outputs]
        # one step of the outputs holding scores (YOLOX / YOLOv7 heads, RetinaFace's conf, SCRFD's first
        # three); a float output (a Softmax stays float) compares exactly
        steps = [a.scale if a.qnt_type == QntType.AFFINE_ASYMMETRIC else 1e-6
                 for a in ctx.outputs[slice(1, 2) if name == "retinaface" else slice(0, 3)]]
        tol = (2 if name.startswith("yolo") else 1) * max(steps)
        for img in data["images"]:
            raw = ctx.run([img[None]], data_format="nhwc", want_float=False)
            # a Softmax output (RetinaFace's conf) stays float in an int8 build; the rest are codes
            assert [y.dtype == np.int8 for y in raw] == [a.qnt_type == QntType.AFFINE_ASYMMETRIC
                                                         for a in ctx.outputs]
            kept = REFERENCES[name](raw, qs)
            assert_same_as_reference(decoder()(raw, quant=ctx.outputs), kept, tol)
            found += len(kept)
    assert found > 0
