"""Drawing detections on a picture with numpy alone (Pillow only for optional text).

Every shape is a set of filled rectangles (a box outline is four, a keypoint one); the
pixels of all of them are generated at once from their row and column ranges and painted
in one fancy-indexed assignment, so drawing costs no Python loop per box.
"""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from ..errors import InvalidParamError
from .checks import flag, fraction, number_array, positive_int
from .result import Detections

__all__ = ["draw_detections", "fill_rects", "PALETTE", "colours"]

#: 20 distinct RGB colours; class ``c`` is drawn in ``PALETTE[c % 20]`` (reverse the
#: channels for a BGR picture: the colours are just numbers to the drawing code)
PALETTE = np.array([
    (255, 56, 56), (255, 157, 151), (255, 112, 31), (255, 178, 29), (207, 210, 49), (72, 249, 10),
    (146, 204, 23), (61, 219, 134), (26, 147, 52), (0, 212, 187), (44, 153, 168), (0, 194, 255),
    (52, 69, 147), (100, 115, 255), (0, 24, 236), (132, 56, 255), (82, 0, 133), (203, 56, 255),
    (255, 149, 200), (255, 55, 199)], np.uint8)


def colours(class_ids: np.ndarray, palette: Optional[np.ndarray] = None) -> np.ndarray:
    """(N, 3) uint8 colours of ``class_ids``: ``palette[class % len(palette)]`` (an (n, 3)
    uint8 table, default :data:`PALETTE`)."""
    pal = PALETTE if palette is None else _palette(palette)
    return pal[np.asarray(class_ids, dtype=np.int64) % len(pal)]


def _palette(palette) -> np.ndarray:
    pal = number_array(palette, "palette", "draw", "(n, 3) colours")
    if pal.ndim != 2 or pal.shape[1] != 3 or len(pal) < 1 or pal.min() < 0 or pal.max() > 255:
        raise InvalidParamError(f"palette must be (n, 3) colours in 0..255, got shape {pal.shape}", op="draw")
    return pal.astype(np.uint8)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(starts[i], starts[i] + lengths[i])`` for every ``i``."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.intp)
    ends = np.cumsum(lengths)
    offsets = np.repeat(starts - (ends - lengths), lengths)
    return np.arange(total, dtype=np.intp) + offsets


def fill_rects(image: np.ndarray, rects: np.ndarray, colour: np.ndarray) -> None:
    """Fill rectangles ``rects`` (N, 4) int rows ``r0:r1`` and columns ``c0:c1`` given as
    ``r0, r1, c0, c1`` (clipped to the image) of ``image`` (H, W, C) in place with
    ``colour`` (N, C); a later rectangle paints over an earlier one."""
    h, w = image.shape[:2]
    r = np.asarray(rects, dtype=np.intp).reshape(-1, 4)
    r0, r1 = np.clip(r[:, 0], 0, h), np.clip(r[:, 1], 0, h)
    c0, c1 = np.clip(r[:, 2], 0, w), np.clip(r[:, 3], 0, w)
    nrows = np.maximum(r1 - r0, 0)
    ncols = np.maximum(c1 - c0, 0)
    nrows = np.where(ncols > 0, nrows, 0)
    rows = _ranges(r0, nrows)                       # every row of every rectangle
    rect_of_row = np.repeat(np.arange(len(r)), nrows)
    width = ncols[rect_of_row]
    cols = _ranges(c0[rect_of_row], width)          # every pixel of those rows
    pix_rect = np.repeat(rect_of_row, width)
    image[np.repeat(rows, width), cols] = np.asarray(colour)[pix_rect]


def _outline_rects(boxes: np.ndarray, t: int) -> np.ndarray:
    """(4N, 4) r0, r1, c0, c1 bands of the outlines of x1, y1, x2, y2 ``boxes``."""
    x1, y1, x2, y2 = (np.floor(boxes[:, k]).astype(np.intp) for k in range(4))
    x2 = np.maximum(x2, x1) + 1
    y2 = np.maximum(y2, y1) + 1
    top = np.stack([y1, y1 + t, x1, x2], 1)
    bottom = np.stack([y2 - t, y2, x1, x2], 1)
    left = np.stack([y1, y2, x1, x1 + t], 1)
    right = np.stack([y1, y2, x2 - t, x2], 1)
    return np.stack([top, bottom, left, right], 1).reshape(-1, 4)


def draw_detections(image: np.ndarray, dets, thickness: int = 2, text: Optional[bool] = None, copy: bool = True,
                    alpha: float = 0.5, palette: Optional[np.ndarray] = None) -> np.ndarray:
    """Draw ``dets`` (:class:`~rknnlite.vision.Detections` in ``image``'s pixels) on
    ``image`` (H, W, 3) uint8: masks blended with ``alpha`` (masks on a coarser grid over
    the whole picture, such as a prototype grid, are scaled up), box outlines ``thickness``
    pixels wide (inside the box), keypoints with confidence >= 0.5 as squares, in the
    class's colour from ``palette`` ((n, 3) uint8 in the image's channel order; default
    :data:`PALETTE`, class ``c`` taking row ``c % n``).

    ``text``: label and score above each box, which needs Pillow; ``None`` (default): when
    Pillow is installed; ``True``: raise if it is not.  Returns a new array, or ``image``
    itself drawn on in place with ``copy=False``.

    Raises:
        InvalidParamError: an image that is not (H, W, 3) uint8, ``dets`` that are not
            Detections, a bad thickness, alpha or palette, ``text``/``copy`` that are not
            True/False, or ``text=True`` without Pillow.
    """
    img = number_array(image, "image", "draw", "(H, W, 3) uint8")
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise InvalidParamError(f"image must be (H, W, 3) uint8, got {img.shape} {img.dtype}", op="draw")
    if not isinstance(dets, Detections):
        raise InvalidParamError(f"dets must be Detections (a decoder's result), not {type(dets).__name__}",
                                op="draw")
    thickness = positive_int(thickness, "thickness", "draw")
    alpha = fraction(alpha, "alpha", "draw")
    copy = flag(copy, "copy", "draw")
    if text is not None:
        text = flag(text, "text", "draw")
    out = img.copy() if copy else img
    n = len(dets)
    if n == 0:
        return out
    col = colours(dets.class_ids, palette)
    if dets.masks is not None:
        m = np.asarray(dets.masks, dtype=bool)
        if m.shape[1:] != out.shape[:2]:  # a lower-resolution grid over the whole picture (prototypes)
            rows = (np.arange(out.shape[0]) * m.shape[1] // out.shape[0])
            cols = (np.arange(out.shape[1]) * m.shape[2] // out.shape[1])
            m = m[:, rows[:, None], cols[None, :]]
        # the last mask covering a pixel gives its colour
        top = (m * np.arange(1, n + 1, dtype=np.int32)[:, None, None]).max(axis=0)
        hit = top > 0
        blend = out[hit].astype(np.float32) * (1 - alpha) + col[top[hit] - 1].astype(np.float32) * alpha
        out[hit] = np.clip(blend + 0.5, 0, 255).astype(np.uint8)
    fill_rects(out, _outline_rects(np.asarray(dets.boxes, dtype=np.float32), int(thickness)), np.repeat(col, 4, 0))
    if dets.keypoints is not None and dets.keypoints.size:
        kp = np.asarray(dets.keypoints, dtype=np.float32)
        seen = kp[..., 2] >= 0.5
        pts = np.floor(kp[seen][:, :2]).astype(np.intp)
        r = max(1, int(thickness))
        rects = np.stack([pts[:, 1] - r, pts[:, 1] + r + 1, pts[:, 0] - r, pts[:, 0] + r + 1], 1)
        kp_col = np.repeat(col, kp.shape[1], 0)[seen.ravel()]
        fill_rects(out, rects, 255 - kp_col)
    if text or text is None:
        _text(out, dets, col, required=bool(text))
    return out


def _text(out: np.ndarray, dets, col: np.ndarray, required: bool) -> None:
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        if required:
            raise InvalidParamError("text=True needs Pillow (pip install pillow)", op="draw") from None
        return
    pic = Image.fromarray(out)
    pen = ImageDraw.Draw(pic)
    font = _font()
    for i in range(len(dets)):  # one text call per label: Pillow has no batched text
        x1, y1 = float(dets.boxes[i, 0]), float(dets.boxes[i, 1])
        pen.text((x1 + 2, max(0.0, y1 - 11)), f"{dets.label(i)} {float(dets.scores[i]):.2f}",
                 fill=tuple(int(v) for v in col[i]), font=font)
    out[...] = np.asarray(pic)


@functools.lru_cache(maxsize=1)
def _font():
    """Pillow's default bitmap font, loaded once (loading it costs milliseconds)."""
    from PIL import ImageFont

    return ImageFont.load_default()
