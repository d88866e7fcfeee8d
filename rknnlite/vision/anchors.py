"""Anchor-based YOLO decoders (YOLOv5, YOLOv7) and YOLOX: three heads, one per stride.

Layouts (as Rockchip's model zoo exports them, the box decoding left out of the graph):

* YOLOv5 / YOLOv7: head ``i`` is (1, A*(5+nc), H, W) NCHW, A anchors per cell, channels
  per anchor ``x, y, w, h, objectness, class scores`` after a sigmoid.  A box is
  ``xy = (2*sxy - 0.5 + cell) * stride``, ``wh = (2*swh)**2 * anchor``; its score is
  ``objectness * best class score``.
* YOLOX: head ``i`` is (1, 5+nc, H, W): ``x, y`` offsets, ``log w, log h``, objectness
  and class scores after a sigmoid; ``xy = (raw + cell) * stride``,
  ``wh = exp(raw) * stride``.

``stride`` is the input size over the head's grid size.  ``logits=True`` takes scores
before the sigmoid (a graph exported without it); the threshold then moves to the logit.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .checks import flag, numbers, picture_size
from .decoder import Decoder
from .quant import real, sigmoid
from .result import Detections

__all__ = ["YOLOv5", "YOLOv7", "YOLOX", "YOLOV5_ANCHORS", "YOLOV7_ANCHORS"]

#: YOLOv5's default anchors (w, h in pixels) for strides 8, 16, 32
YOLOV5_ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)),
                  ((116, 90), (156, 198), (373, 326)))
#: YOLOv7's default anchors for strides 8, 16, 32
YOLOV7_ANCHORS = (((12, 16), (19, 36), (40, 28)), ((36, 75), (76, 55), (72, 146)),
                  ((142, 110), (192, 243), (459, 401)))


class _Heads(Decoder):
    """Shared by the three-head decoders: one (1, C, H, W) output per stride."""

    def __init__(self, input_size=640, logits: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.input_size = picture_size(input_size, "input_size", self.name)
        self.logits = flag(logits, "logits", self.name)

    def _head(self, y: np.ndarray, i: int):
        y = self._batch1(y, 4, f"head {i}", self._fail)
        c, h, w = y.shape
        ih, iw = self.input_size
        if ih % h or iw % w:
            raise self._fail(f"head {i} has a {h}x{w} grid, which does not divide the {ih}x{iw} input")
        return y, c, h, w, (iw // w, ih // h)

    def _scores(self, rows: np.ndarray) -> np.ndarray:
        return sigmoid(rows) if self.logits else rows


class YOLOv5(_Heads):
    """YOLOv5 decoder (three anchor-based heads; see the module docstring).

    Args:
        input_size: the model input (height, width) in pixels, or an int for a square.
        anchors: per head, the (w, h) anchors in pixels (default :data:`YOLOV5_ANCHORS`).
        logits: the scores are raw logits (no sigmoid in the graph); boxes are then also
            raw and get the sigmoid here.
        **kwargs: ``conf``, ``iou``, ``max_det``, ``class_aware``, ``labels``,
            ``max_candidates``: see :class:`Decoder`.
    """

    name = "YOLOv5"
    default_anchors = YOLOV5_ANCHORS

    def __init__(self, input_size=640, anchors: Optional[Sequence] = None, logits: bool = False, **kwargs):
        super().__init__(input_size, logits, **kwargs)
        a = numbers(self.default_anchors if anchors is None else anchors, "anchors", self.name,
                    "(heads, anchors per cell, 2)")
        if a.ndim != 3 or a.shape[2] != 2 or a.shape[1] < 1:
            raise self._fail(f"anchors must be (heads, anchors per cell, 2), got shape {a.shape}")
        self.anchors = a

    def _decode(self, outs, qs) -> Detections:
        if len(outs) != len(self.anchors):
            raise self._fail(f"expected {len(self.anchors)} head outputs (one per anchor set), got {len(outs)}")
        parts = []
        na = self.anchors.shape[1]
        for i, (y, q) in enumerate(zip(outs, qs)):
            y, c, h, w, stride = self._head(y, i)
            if c % na or c // na < 6:
                raise self._fail(f"head {i} has {c} channels; {na} anchors x (5 + classes) were expected")
            y = y.reshape(na, c // na, h * w)
            # objectness >= conf is necessary for objectness * class >= conf (class <= 1)
            a_idx, cell = np.nonzero(y[:, 4, :] >= self._code(q, y.dtype, self.logits))
            # (candidates, channels) by one flat take (row-wise fancy indexing is far slower)
            flat = (a_idx * (c // na) * h * w + cell)[:, None] + np.arange(c // na) * (h * w)
            cand = y.reshape(-1).take(flat)
            if self.logits:
                cand = sigmoid(real(cand, q))
            else:
                cand = real(cand, q)
            gy, gx = np.divmod(cell, w)
            xy = (cand[:, :2] * 2 - 0.5 + np.stack([gx, gy], 1)) * np.float32(stride)
            wh = (cand[:, 2:4] * 2) ** 2 * self.anchors[i][a_idx]
            parts.append(_pick(np.concatenate([xy - wh / 2, xy + wh / 2], 1), cand[:, 4], cand[:, 5:], self.conf))
        return self._finish(*_join(parts))[0]


class YOLOv7(YOLOv5):
    """YOLOv7 decoder: the YOLOv5 layout and formulas with YOLOv7's anchors
    (:data:`YOLOV7_ANCHORS`); arguments as :class:`YOLOv5`."""

    name = "YOLOv7"
    default_anchors = YOLOV7_ANCHORS


class YOLOX(_Heads):
    """YOLOX decoder (three anchor-free heads of (1, 5+nc, H, W); see the module docstring).

    Args:
        input_size: as :class:`YOLOv5`.
        logits: the scores are raw logits (no sigmoid in the graph); the boxes never take one.
        **kwargs: ``conf``, ``iou``, ``max_det``, ``class_aware``, ``labels``,
            ``max_candidates``: see :class:`Decoder`.
    """

    name = "YOLOX"

    def _decode(self, outs, qs) -> Detections:
        if not outs:
            raise self._fail("no output")
        parts = []
        for i, (y, q) in enumerate(zip(outs, qs)):
            y, c, h, w, stride = self._head(y, i)
            if c < 6:
                raise self._fail(f"head {i} has {c} channels; 5 + classes were expected")
            y = y.reshape(c, h * w)
            cell = np.flatnonzero(y[4] >= self._code(q, y.dtype, self.logits))
            cand = real(y.take(cell, axis=1), q).T
            scores = self._scores(cand[:, 4:])
            gy, gx = np.divmod(cell, w)
            s = np.float32(stride)
            xy = (cand[:, :2] + np.stack([gx, gy], 1)) * s
            wh = np.exp(cand[:, 2:4]) * s
            parts.append(_pick(np.concatenate([xy - wh / 2, xy + wh / 2], 1), scores[:, 0], scores[:, 1:], self.conf))
        return self._finish(*_join(parts))[0]


def _pick(boxes, obj, cls, conf):
    """Candidates scoring ``obj * best class >= conf``: (boxes, scores, class ids)."""
    c = np.argmax(cls, axis=1) if cls.size else np.zeros(len(obj), np.intp)
    score = obj * cls.max(axis=1) if cls.size else obj[:0]
    ok = score >= np.float32(conf)
    return boxes[ok], score[ok], c[ok]


def _join(parts):
    return tuple(np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in range(3))
