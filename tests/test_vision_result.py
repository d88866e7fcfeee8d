"""rknnlite.vision.Detections: drawing (numpy, pixel-exact), JSON, mapping to the source."""

from __future__ import annotations

import builtins
import json

import numpy as np
import pytest

from rknnlite import InvalidParamError
from rknnlite.vision import PALETTE, Detections, draw_detections, letterbox


def dets(**kw):
    base = dict(boxes=np.array([[10, 20, 40, 50], [60, 5, 90, 30]], np.float32),
                scores=np.array([0.9, 0.6], np.float32), class_ids=np.array([0, 3], np.int32))
    base.update(kw)
    return Detections(**base)


def test_draw_paints_each_outline_in_its_class_colour_and_nothing_else():
    img = np.zeros((64, 100, 3), np.uint8)
    out = dets().draw(img, thickness=2, text=False)
    assert out is not img and not img.any()
    for (x1, y1, x2, y2), c in ((np.array([10, 20, 40, 50]), 0), (np.array([60, 5, 90, 30]), 3)):
        colour = PALETTE[c]
        for band in (out[y1:y1 + 2, x1:x2 + 1], out[y2 - 1:y2 + 1, x1:x2 + 1],
                     out[y1:y2 + 1, x1:x1 + 2], out[y1:y2 + 1, x2 - 1:x2 + 1]):
            assert (band == colour).all()
        assert not out[y1 + 2:y2 - 1, x1 + 2:x2 - 1].any()  # the inside stays untouched
    painted = out.any(axis=2).sum()
    assert painted == sum(2 * (31 + 31) * 2 - 16 for _ in range(1)) + (2 * (31 + 26) * 2 - 16)


def test_draw_in_place_clips_keypoints_and_masks():
    img = np.zeros((64, 100, 3), np.uint8)
    kp = np.array([[[25, 35, 0.9], [0, 0, 0.1]], [[75, 17, 0.8], [99, 63, 0.9]]], np.float32)
    masks = np.zeros((2, 64, 100), bool)
    masks[0, 30:40, 20:30] = True
    d = dets(keypoints=kp, masks=masks, boxes=np.array([[10, 20, 40, 50], [-5, 5, 200, 200]], np.float32))
    out = d.draw(img, copy=False, text=False, alpha=1.0)
    assert out is img
    assert (out[35, 25] == 255 - PALETTE[0]).all()            # a visible keypoint
    assert not out[0:2, 0:2].any()                            # a keypoint of low confidence is not drawn
    assert (out[31, 21] == PALETTE[0]).all()                  # mask blended fully (alpha 1)
    assert (out[5, 50] == PALETTE[3]).all()                   # the visible edge of a box past the picture
    assert not out[10:, 0].any() or (out[10:, 0] == PALETTE[0]).all()  # its left edge is off the picture


def test_text_needs_pillow_only_when_asked(monkeypatch):
    img = np.zeros((64, 100, 3), np.uint8)
    with_text = dets().draw(img, text=True)
    assert with_text.any(axis=2).sum() > dets().draw(img, text=False).any(axis=2).sum()
    real_import = builtins.__import__

    def no_pil(name, *a, **k):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("no Pillow")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    np.testing.assert_array_equal(dets().draw(img), dets().draw(img, text=False))
    with pytest.raises(InvalidParamError, match="Pillow"):
        dets().draw(img, text=True)


def test_a_palette_chooses_the_colours():
    pal = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    out = dets().draw(np.zeros((64, 100, 3), np.uint8), text=False, palette=pal)
    assert (out[20, 10] == [1, 2, 3]).all() and (out[5, 60] == [4, 5, 6]).all()  # class 3 -> row 3 % 2
    with pytest.raises(InvalidParamError, match="palette"):
        dets().draw(np.zeros((64, 100, 3), np.uint8), palette=np.zeros((2, 4)))


def test_bad_draw_input():
    with pytest.raises(InvalidParamError, match="uint8"):
        dets().draw(np.zeros((10, 10), np.uint8))
    with pytest.raises(InvalidParamError, match="thickness"):
        dets().draw(np.zeros((10, 10, 3), np.uint8), thickness=0)
    image = np.zeros((10, 10, 3), np.uint8)
    for kwargs, match in ((dict(alpha=2), "alpha must be a number in"), (dict(copy="no"), "copy must be True or"),
                          (dict(text="no"), "text must be True or False"),
                          (dict(palette=[["a", "b", "c"]]), "palette must be")):
        with pytest.raises(InvalidParamError, match=match):
            dets().draw(image, **kwargs)
    with pytest.raises(InvalidParamError, match="dets must be Detections"):  # was an AttributeError
        draw_detections(image, [(0, 0, 5, 5)])
    assert not image.any()


@pytest.mark.parametrize("kwargs, match", [
    (dict(masks_shape=5), "masks_shape must be a list of ints"), (dict(masks_shape=(4, 4, 4)), r"\(H, W\)"),
    (dict(keypoints=-1), "keypoints must be an int >= 0"), (dict(keypoints=[17]), "keypoints must be an int"),
    (dict(labels="ab"), "labels must be a list"),
])
def test_bad_empty_detections_arguments(kwargs, match):
    with pytest.raises(InvalidParamError, match=match):
        Detections.empty(**kwargs)
    assert Detections.empty(masks_shape=(4, 6), keypoints=17).masks.shape == (0, 4, 6)


def test_to_json_has_boxes_labels_keypoints_and_rle_masks():
    masks = np.zeros((2, 3, 4), bool)
    masks[0, 1, 1:3] = True
    masks[1, 0, 0] = True
    kp = np.ones((2, 1, 3), np.float32)
    d = dets(masks=masks, keypoints=kp, labels=["person", "a", "b", "dog"], frame_id=7)
    data = json.loads(d.to_json())
    assert data["frame_id"] == 7
    first, second = data["detections"]
    assert first == {"box": [10.0, 20.0, 40.0, 50.0], "score": 0.9, "class_id": 0, "label": "person",
                     "keypoints": [[1.0, 1.0, 1.0]], "mask": {"size": [3, 4], "counts": [5, 2, 5]}}
    assert second["label"] == "dog" and second["mask"]["counts"] == [0, 1, 11]
    assert json.loads(dets(labels=None).to_json())["detections"][1]["label"] == "3"


def test_to_source_maps_boxes_keypoints_and_masks():
    src = np.zeros((100, 200, 3), np.uint8)
    _, t = letterbox(src, (64, 64))
    d = dets(boxes=np.array([[0, 16, 64, 48]], np.float32), scores=np.array([0.5], np.float32),
             class_ids=np.array([1], np.int32), keypoints=np.array([[[32, 32, 1]]], np.float32),
             masks=np.ones((1, 16, 16), bool))
    s = d.to_source(t)
    np.testing.assert_allclose(s.boxes, [[0, 0, 200, 100]], atol=1e-4)
    np.testing.assert_allclose(s.keypoints, [[[100, 50, 1]]], atol=1e-4)
    assert s.masks.shape == (1, 100, 200) and s.masks.all()
    assert len(Detections.empty(masks_shape=(4, 4), keypoints=5)) == 0


def test_selection_keeps_every_field_aligned():
    masks = np.zeros((3, 4, 4), bool)
    masks[1, 0, 0] = True
    kp = np.arange(3 * 2 * 3, dtype=np.float32).reshape(3, 2, 3)
    d = Detections(np.arange(12, dtype=np.float32).reshape(3, 4), np.array([0.9, 0.5, 0.2], np.float32),
                   np.array([2, 0, 1], np.int32), masks, kp, labels=["a", "b", "c"], frame_id=7)
    sure = d[d.scores >= 0.5]
    assert len(sure) == 2 and sure.class_ids.tolist() == [2, 0] and sure.frame_id == 7 and sure.labels == d.labels
    assert sure.boxes.tolist() == d.boxes[:2].tolist() and sure.masks[1, 0, 0] and sure.keypoints.shape == (2, 2, 3)
    one = d[1]
    assert len(one) == 1 and one.scores.tolist() == [0.5] and one.label(0) == "a"
    assert d[[2, 0]].class_ids.tolist() == [1, 2] and d[1:].scores.tolist() == pytest.approx([0.5, 0.2])
    assert len(d[[]]) == 0 and len(Detections.empty()[np.zeros(0, bool)]) == 0
    for bad in (np.ones(2, bool), [3], [0.5], [[0]]):
        with pytest.raises(IndexError):
            d[bad]
    assert len(d) == 3  # untouched
