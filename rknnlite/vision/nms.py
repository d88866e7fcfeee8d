"""Non-maximum suppression, class-aware by coordinate offsets.

Class-aware NMS suppresses only boxes of the same class.  Instead of one NMS per class,
every box is shifted by ``class_id * span`` (``span`` larger than any coordinate) so boxes
of different classes never overlap, and one greedy pass handles every class at once.
The greedy pass loops over the boxes it keeps (at most ``max_det``), each step
computing the IoU of the kept box with every remaining candidate at once.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import InvalidParamError

__all__ = ["nms", "box_iou"]


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of x1, y1, x2, y2 boxes (float32)."""
    a = np.asarray(a, dtype=np.float32).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float32).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0).astype(np.float32)


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
    b = np.asarray(boxes, dtype=np.float32)
    s = np.asarray(scores, dtype=np.float32)
    n = s.shape[0] if s.ndim == 1 else -1
    if b.ndim != 2 or b.shape[1] != 4 or s.ndim != 1 or b.shape[0] != n:
        raise InvalidParamError(f"nms: boxes must be (N, 4) and scores (N,), got {b.shape} and {s.shape}", op="nms")
    if not 0.0 <= iou <= 1.0:
        raise InvalidParamError(f"nms: iou must be in [0, 1], not {iou}", op="nms")
    if isinstance(max_det, bool) or not isinstance(max_det, (int, np.integer)) or max_det < 1:
        raise InvalidParamError(f"nms: max_det must be an int >= 1, not {max_det!r}", op="nms")
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-s, kind="stable")
    b = b[order]
    if class_ids is not None:
        c = np.asarray(class_ids)
        if c.shape != (n,):
            raise InvalidParamError(f"nms: class_ids must be ({n},), got {c.shape}", op="nms")
        span = float(np.abs(b).max()) * 2 + 1
        # float64 so the offsets (up to classes * span) keep the boxes' float32 precision
        b = b.astype(np.float64) + (c[order].astype(np.float64) * span)[:, None]
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    area = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    keep = []
    rest = np.arange(n)
    thr = np.float32(iou)
    while rest.size and len(keep) < max_det:
        i = rest[0]
        keep.append(i)
        rest = rest[1:]
        if not rest.size:
            break
        w = np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest])
        h = np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest])
        inter = np.clip(w, 0, None) * np.clip(h, 0, None)
        union = area[i] + area[rest] - inter
        rest = rest[inter <= thr * union]  # IoU <= iou, without a division (union 0 -> kept)
    return order[np.asarray(keep, dtype=np.int64)]
