"""rknnlite.vision.letterbox and LetterboxTransform: placement, padding, and the way back."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite import InvalidParamError
from rknnlite.vision import GREY, letterbox


def test_a_wide_picture_is_centred_between_grey_bands():
    img = np.zeros((40, 80, 3), np.uint8)
    img[..., 0], img[..., 2] = 10, 200
    out, t = letterbox(img, (32, 32))
    assert out.shape == (32, 32, 3) and out.dtype == np.uint8
    assert (out[:8] == GREY).all() and (out[24:] == GREY).all()
    assert (out[8:24, :, 0] == 10).all() and (out[8:24, :, 2] == 200).all()
    assert (t.left, t.top, t.scale_x, t.scale_y) == (0, 8, 0.4, 0.4)
    swapped, _ = letterbox(img, 32, swap_rb=True)
    assert (swapped[8:24, :, 0] == 200).all() and (swapped[8:24, :, 2] == 10).all()


def test_boxes_and_points_go_back_to_the_source():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (300, 500, 3), np.uint8)
    out, t = letterbox(img, (64, 96))
    src = np.array([[50, 30, 200, 120], [0, 0, 500, 300]], np.float32)
    boxes = np.empty_like(src)
    boxes[:, 0::2] = src[:, 0::2] * t.scale_x + t.left
    boxes[:, 1::2] = src[:, 1::2] * t.scale_y + t.top
    np.testing.assert_allclose(t.boxes_to_source(boxes), src, atol=1e-3)
    # out-of-picture boxes are clipped unless asked not to
    far = np.array([[-10, -10, 1000, 1000]], np.float32)
    np.testing.assert_allclose(t.boxes_to_source(far), [[0, 0, 500, 300]])
    assert t.boxes_to_source(far, clip=False)[0, 0] < 0
    pts = np.array([[[boxes[0, 0], boxes[0, 1], 0.7]]], np.float32)
    np.testing.assert_allclose(t.points_to_source(pts), [[[50, 30, 0.7]]], atol=1e-3)


def test_picture_pixels_map_onto_source_pixels():
    # each source pixel's value is its column; the letterboxed column maps back to it
    img = np.tile(np.arange(200, dtype=np.uint8)[None, :, None], (100, 1, 1))
    out, t = letterbox(img, (50, 50))
    cols = np.arange(t.left, 50 - t.left)
    back = t.boxes_to_source(np.stack([cols + 0.5, np.full(cols.shape, t.top + 1.0)] * 2, 1).astype(np.float32))
    assert np.abs(out[t.top + 1, cols, 0].astype(int) - back[:, 0]).max() <= 2


def test_masks_are_resampled_to_the_source():
    img = np.zeros((100, 200, 3), np.uint8)
    _, t = letterbox(img, (64, 64))       # picture rows 16..47
    masks = np.zeros((1, 16, 16), bool)  # a 4x coarser grid over the letterboxed input
    masks[0, 4:8, 0:8] = True            # input rows 16..31 (top half of the picture), left half
    src = t.masks_to_source(masks)
    assert src.shape == (1, 100, 200)
    assert src[0, :50, :100].all() and not src[0, 50:].any() and not src[0, :, 100:].any()


@pytest.mark.parametrize("image, size, match", [
    (np.zeros((4,), np.uint8), 8, "image must be"),
    (np.zeros((0, 4, 3), np.uint8), 8, "image must be"),
    (np.zeros((4, 4, 3), np.uint8), (0, 8), r"1\.\.65536 pixels a side"),
    (np.zeros((4, 4, 3), np.uint8), 10**12, r"1\.\.65536 pixels a side"),  # was a MemoryError
    (np.zeros((4, 4, 3), np.uint8), "big", "size must be"),
    (np.zeros((4, 4, 3), np.uint8), (8.5, 8), r"\(height, width\) ints"),  # was cut to 8
    (np.zeros((4, 4, 3), np.uint8), ("8", 8), r"\(height, width\) ints"),
    (np.array([["a", "b"]]), 8, "an array of numbers"),
    ([[1, 2], [3]], 8, "an array of numbers"),  # ragged
])
def test_bad_letterbox_input(image, size, match):
    with pytest.raises(InvalidParamError, match=match) as info:
        letterbox(image, size)
    assert str(info.value).startswith("letterbox: ") and "letterbox: letterbox" not in str(info.value)


@pytest.mark.parametrize("kwargs, match", [
    (dict(pad=300), "pad must be one number a uint8 image holds"),
    (dict(pad=[1, 2]), "pad must be one number"),
    (dict(pad=1.5), "pad must be one number"),
    (dict(swap_rb="no"), "swap_rb must be True or False"),
])
def test_bad_letterbox_options(kwargs, match):
    with pytest.raises(InvalidParamError, match=match):
        letterbox(np.zeros((4, 4, 3), np.uint8), 8, **kwargs)
    out, _ = letterbox(np.zeros((4, 2, 3), np.float32), 8, pad=0.5)  # a float image takes a float pad
    assert out[0, 0, 0] == 0.5


def test_a_picture_that_already_fits_is_only_padded():
    img = np.random.default_rng(1).integers(0, 255, (48, 64, 3), np.uint8)
    out, t = letterbox(img, 64)
    assert (t.scale_x, t.scale_y, t.left, t.top) == (1.0, 1.0, 0, 8)
    np.testing.assert_array_equal(out[8:56], img)
    assert (out[:8] == GREY).all() and (out[56:] == GREY).all()
