"""Letterbox: scale a picture into a model's input keeping its aspect ratio, and undo it.

:func:`letterbox` returns the padded picture and a :class:`LetterboxTransform` that maps
boxes, points and masks found in the model's input back onto the source picture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple, Union

import numpy as np

from ..errors import InvalidParamError
from ..runtime.args import is_number
from .checks import flag, number_array, picture_size

__all__ = ["letterbox", "LetterboxTransform", "GREY"]

#: the pad value of the YOLO family's letterbox (114 on every channel)
GREY = 114


@dataclass(frozen=True)
class LetterboxTransform:
    """Where the source picture sits inside the letterboxed one.

    A source pixel coordinate ``x`` lands at ``x * scale_x + left`` (``y``: ``y * scale_y +
    top``).  ``scale_x`` and ``scale_y`` differ only by rounding of the scaled size.
    ``source_size`` and ``size`` are (height, width) of the source and the letterboxed
    picture, in pixels.
    """

    scale_x: float
    scale_y: float
    left: int
    top: int
    source_size: Tuple[int, int]
    size: Tuple[int, int]

    def boxes_to_source(self, boxes: np.ndarray, clip: bool = True) -> np.ndarray:
        """``boxes`` (N, 4) x1, y1, x2, y2 in letterboxed pixels -> a new float32 (N, 4)
        array in source pixels, clipped to the source picture unless ``clip=False``."""
        b = _as_float(boxes, 4, "boxes")
        out = np.empty_like(b)
        out[:, 0::2] = (b[:, 0::2] - self.left) / self.scale_x
        out[:, 1::2] = (b[:, 1::2] - self.top) / self.scale_y
        if clip:
            h, w = self.source_size
            np.clip(out[:, 0::2], 0, w, out=out[:, 0::2])
            np.clip(out[:, 1::2], 0, h, out=out[:, 1::2])
        return out

    def points_to_source(self, points: np.ndarray) -> np.ndarray:
        """``points`` (..., 2 or more) whose first two values are x, y in letterboxed
        pixels -> a new float32 array, x and y in source pixels (further values such as a
        keypoint's confidence are copied unchanged).  Not clipped."""
        p = np.array(points, dtype=np.float32, copy=True)
        if p.ndim == 0 or p.shape[-1] < 2:
            raise InvalidParamError(f"points must have x, y on their last axis, got shape {p.shape}",
                                    op="LetterboxTransform.points_to_source")
        p[..., 0] = (p[..., 0] - self.left) / self.scale_x
        p[..., 1] = (p[..., 1] - self.top) / self.scale_y
        return p

    def masks_to_source(self, masks: np.ndarray) -> np.ndarray:
        """``masks`` (N, H, W) over the letterboxed picture (any H, W proportional to it,
        e.g. a 160x160 prototype grid for a 640x640 input) -> a new (N, h, w) array of the
        same dtype over the source picture (nearest neighbour)."""
        m = np.asarray(masks)
        if m.ndim != 3:
            raise InvalidParamError(f"masks must be (N, H, W), got shape {m.shape}",
                                    op="LetterboxTransform.masks_to_source")
        h, w = self.source_size
        fy, fx = m.shape[1] / self.size[0], m.shape[2] / self.size[1]
        # source pixel centres -> letterboxed pixels -> mask cells
        rows = ((np.arange(h) + 0.5) * self.scale_y + self.top) * fy
        cols = ((np.arange(w) + 0.5) * self.scale_x + self.left) * fx
        rows = np.clip(rows.astype(np.intp), 0, m.shape[1] - 1)
        cols = np.clip(cols.astype(np.intp), 0, m.shape[2] - 1)
        return m.take(rows, axis=1).take(cols, axis=2)


def letterbox(image: np.ndarray, size: Union[int, Tuple[int, int]], pad: int = GREY,
              swap_rb: bool = False) -> Tuple[np.ndarray, LetterboxTransform]:
    """Scale ``image`` (H, W) or (H, W, C) into ``size`` = (height, width) (an int: a
    square) keeping its aspect ratio (nearest neighbour), centred, the rest filled with
    ``pad``.  ``swap_rb`` reverses the channel order (BGR <-> RGB) on the way.

    Returns ``(picture, transform)``: a new (height, width[, C]) array of the image's dtype
    in NHWC order without the batch axis (``picture[None]`` is a model input), and the
    :class:`LetterboxTransform` that maps results back to ``image``.

    Raises:
        InvalidParamError: an image that is not 2-D or 3-D numbers or is empty, a bad size, a
            ``pad`` that is not one number the image's dtype holds, a ``swap_rb`` that is not
            True/False.
    """
    img = number_array(image, "image", "letterbox", "(H, W) or (H, W, C)")
    if img.ndim not in (2, 3) or img.shape[0] < 1 or img.shape[1] < 1:
        raise InvalidParamError(f"image must be (H, W) or (H, W, C) with H, W >= 1, got shape {img.shape}",
                                op="letterbox")
    th, tw = picture_size(size)
    swap_rb = flag(swap_rb, "swap_rb", "letterbox")
    if not _fits(pad, img.dtype):
        raise InvalidParamError(f"pad must be one number a {img.dtype} image holds, not {pad!r}",
                                op="letterbox")
    h, w = img.shape[:2]
    scale = min(th / h, tw / w)
    nh, nw = min(th, max(1, round(h * scale))), min(tw, max(1, round(w * scale)))
    sy, sx = nh / h, nw / w
    rows = np.minimum(((np.arange(nh) + 0.5) / sy).astype(np.intp), h - 1)
    cols = np.minimum(((np.arange(nw) + 0.5) / sx).astype(np.intp), w - 1)
    if swap_rb and img.ndim == 3:
        img = img[..., ::-1]
    out = np.full((th, tw) + img.shape[2:], pad, img.dtype)
    top, left = (th - nh) // 2, (tw - nw) // 2
    if (nh, nw) == (h, w):  # no scaling, only padding
        out[top:top + nh, left:left + nw] = img
    else:  # two 1-D takes: rows first (whole-row copies), then columns; ~10x faster than one 2-D gather
        out[top:top + nh, left:left + nw] = img.take(rows, axis=0).take(cols, axis=1)
    return out, LetterboxTransform(sx, sy, left, top, (h, w), (th, tw))


def _fits(value, dtype: np.dtype) -> bool:
    """Whether ``value`` is one number that ``dtype`` holds (an integer in range for integer
    images)."""
    if not is_number(value):
        return False
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return float(value).is_integer() and info.min <= value <= info.max
    return dtype.kind != "b" or value in (0, 1)


def _as_float(a, last: int, what: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != last:
        raise InvalidParamError(f"{what} must be (N, {last}), got shape {arr.shape}", op="LetterboxTransform")
    return arr
