"""Non-maximum suppression: exact greedy NMS, class-aware.

Greedy NMS keeps the best box, drops every box of its class overlapping it by more than
``iou``, and repeats.  The candidates are sorted by score in numpy; the greedy pass runs
in the compiled ``rknnlite._native.vision_kernels.greedy_nms`` without the GIL (one
pass per kept box over the later boxes; tens of microseconds for a camera frame's few
hundred candidates).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._native.vision_kernels import greedy_nms
from ..errors import InvalidParamError
from .checks import fraction, numbers, positive_int

__all__ = ["nms", "box_iou"]

def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of x1, y1, x2, y2 boxes (float32)."""
    a, b = (_boxes(v, what) for v, what in ((a, "a"), (b, "b")))
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0).astype(np.float32)


def _boxes(value, what: str) -> np.ndarray:
    """box_iou's ``value`` as (N, 4) float32 (any shape of 4k numbers, as boxes of 4)."""
    arr = numbers(value, what, "box_iou", "(N, 4)", finite=False)
    if arr.size % 4:
        raise InvalidParamError(f"{what} must be (N, 4) boxes, got shape {arr.shape}", op="box_iou")
    return arr.reshape(-1, 4)


def nms(boxes: np.ndarray, scores: np.ndarray, class_ids: Optional[np.ndarray] = None, iou: float = 0.45,
        max_det: int = 300) -> np.ndarray:
    """Indices of the boxes greedy NMS keeps, best score first.

    Args:
        boxes: (N, 4) x1, y1, x2, y2.
        scores: (N,).
        class_ids: (N,) ints: suppress only within a class (class-aware); ``None``: across
            every box.
        iou: a box whose IoU with a kept box of its class is above this is suppressed.
        max_det: most boxes kept.

    Ties in score keep the lower index first.  Returns an int64 array (a new array).

    Raises:
        InvalidParamError: shapes that do not match, ``iou`` outside [0, 1], ``max_det`` < 1.
    """
    b = numbers(boxes, "boxes", "nms", "(N, 4)", finite=False)
    s = numbers(scores, "scores", "nms", "(N,)", finite=False)
    n = s.shape[0] if s.ndim == 1 else -1
    if b.ndim != 2 or b.shape[1] != 4 or s.ndim != 1 or b.shape[0] != n:
        raise InvalidParamError(f"boxes must be (N, 4) and scores (N,), got {b.shape} and {s.shape}", op="nms")
    iou = fraction(iou, "iou", "nms")
    max_det = positive_int(max_det, "max_det", "nms")
    try:
        c = np.zeros(n, np.int64) if class_ids is None else np.asarray(class_ids).astype(np.int64, copy=False)
    except (TypeError, ValueError):
        raise InvalidParamError(f"class_ids must be ({n},) ints, not {class_ids!r}", op="nms") from None
    if c.shape != (n,):
        raise InvalidParamError(f"class_ids must be ({n},), got {c.shape}", op="nms")
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-s, kind="stable")  # best first; equal scores: lower index first
    keep = np.empty(n, np.int64)
    count = greedy_nms(np.ascontiguousarray(b.take(order, axis=0)), np.ascontiguousarray(c.take(order)),
                       float(iou), int(max_det), keep)
    return order.take(keep[:count])
