"""rknnlite.vision.nms: greedy, class-aware by offsets, against a per-class plain loop."""

from __future__ import annotations

import numpy as np
import pytest

import vision_reference as ref
from rknnlite import InvalidParamError
from rknnlite.vision import box_iou, nms


def clusters(rng, n_obj=30, per=12, classes=4):
    centres = rng.uniform(20, 600, (n_obj, 2))
    sizes = rng.uniform(10, 80, (n_obj, 2))
    c = np.repeat(centres, per, 0) + rng.normal(0, 4, (n_obj * per, 2))
    s = np.repeat(sizes, per, 0) * rng.uniform(0.8, 1.2, (n_obj * per, 2))
    boxes = np.concatenate([c - s / 2, c + s / 2], 1).astype(np.float32)
    return boxes, rng.random(len(boxes)).astype(np.float32), rng.integers(0, classes, len(boxes))


@pytest.mark.parametrize("class_aware", [True, False])
@pytest.mark.parametrize("thr", [0.3, 0.45, 0.7])
def test_nms_keeps_what_the_plain_loop_keeps(thr, class_aware):
    boxes, scores, cls = clusters(np.random.default_rng(1))
    keep = nms(boxes, scores, cls if class_aware else None, iou=thr)
    expected = ref.nms([(tuple(b), s, int(c), i) for i, (b, s, c) in enumerate(zip(boxes, scores, cls))], thr,
                       class_aware=class_aware)
    assert keep.tolist() == [e[3] for e in expected]
    assert 0 < len(keep) < len(boxes)


def test_max_det_keeps_the_best():
    boxes, scores, cls = clusters(np.random.default_rng(2))
    full = nms(boxes, scores, cls, iou=0.5)
    assert nms(boxes, scores, cls, iou=0.5, max_det=5).tolist() == full[:5].tolist()


def test_different_classes_never_suppress_each_other():
    boxes = np.array([[0, 0, 10, 10]] * 3, np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    assert nms(boxes, scores, np.array([0, 1, 0]), 0.5).tolist() == [0, 1]
    assert nms(boxes, scores, None, 0.5).tolist() == [0]


def test_box_iou():
    a = np.array([[0, 0, 10, 10]], np.float32)
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 10, 10]], np.float32)
    np.testing.assert_allclose(box_iou(a, b), [[50 / 150, 0, 1]], rtol=1e-6)


@pytest.mark.parametrize("args, match", [
    ((np.zeros((3, 4)), np.zeros(2)), "boxes must be"),
    ((np.zeros((3, 3)), np.zeros(3)), "boxes must be"),
    ((np.zeros((3, 4)), np.zeros(3), np.zeros(2)), "class_ids"),
    ((np.zeros((3, 4)), np.zeros(3), None, 1.5), "iou"),
    ((np.zeros((3, 4)), np.zeros(3), None, 0.5, 0), "max_det"),
    ((np.zeros((3, 4)), np.zeros(3), None, "0.5"), "iou must be a number"),  # was a TypeError
    ((np.zeros((3, 4)), np.zeros(3), None, float("nan")), "iou must be a number"),  # was accepted
    (([[0, 0, 1, "a"]], np.zeros(1)), r"boxes must be \(N, 4\) numbers"),
    ((np.zeros((1, 4)), [[1], []]), r"scores must be \(N,\) numbers"),  # ragged
    ((np.zeros((2, 4)), np.zeros(2), ["a", "b"]), r"class_ids must be \(2,\) ints"),
])
def test_bad_nms_input(args, match):
    with pytest.raises(InvalidParamError, match=match) as info:
        nms(*args)
    assert str(info.value).startswith("nms: ") and "nms: nms" not in str(info.value)


@pytest.mark.parametrize("a, b, match", [
    (np.zeros((1, 3)), np.zeros((1, 4)), r"a must be \(N, 4\) boxes"),  # was a reshape ValueError
    (np.zeros((1, 4)), "x", r"b must be \(N, 4\) numbers"),
])
def test_bad_box_iou_input(a, b, match):
    with pytest.raises(InvalidParamError, match=match):
        box_iou(a, b)


def test_empty_input_keeps_nothing():
    assert nms(np.zeros((0, 4)), np.zeros(0)).shape == (0,)
