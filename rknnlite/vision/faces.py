"""Face detectors with five landmarks: RetinaFace (prior boxes) and SCRFD (anchor points).

* RetinaFace (Rockchip's model zoo export): three outputs, told apart by their last axis:
  ``loc`` (1, N, 4), ``conf`` (1, N, 2) after a softmax (column 1 is "face") and ``landm``
  (1, N, 10).  The N priors are, per stride 8, 16, 32 and per cell (row-major), one square
  box per min size (16, 32 / 64, 128 / 256, 512 pixels) centred on the cell.  A box is
  ``centre = prior_c + loc_xy * 0.1 * prior_wh``, ``wh = prior_wh * exp(loc_wh * 0.2)``; a
  landmark ``prior_c + landm * 0.1 * prior_wh``.
* SCRFD (InsightFace's export with keypoints): nine outputs, scores (N, 1) for strides 8,
  16, 32, then boxes (N, 4), then keypoints (N, 10), each optionally with a batch axis;
  N = H*W*A for A anchors per cell (2), ordered by row, column, anchor.  With the
  anchor point ``p = (col, row) * stride``: box ``p -+ distances * stride``, keypoint
  ``p + offset * stride``; scores after a sigmoid.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError
from .checks import numbers, picture_size, positive_int, positive_ints
from .decoder import Decoder
from .quant import real
from .result import Detections

__all__ = ["RetinaFace", "SCRFD", "retinaface_priors"]


def retinaface_priors(input_size: Tuple[int, int], min_sizes=((16, 32), (64, 128), (256, 512)),
                      steps=(8, 16, 32)) -> np.ndarray:
    """(N, 4) float32 priors ``cx, cy, w, h`` in pixels for an input (height, width) (or an
    int: a square); ``min_sizes``: per stride, the prior sizes in pixels; ``steps``: the strides.

    Raises:
        InvalidParamError: a bad size, sizes that are not lists of positive numbers, steps that
            are not ints >= 1, or not one list of sizes per step.
    """
    op = "retinaface_priors"
    h, w = picture_size(input_size, "input_size", op)
    steps = positive_ints(steps, "steps", op)
    if not isinstance(min_sizes, (list, tuple)) or len(min_sizes) != len(steps):
        raise InvalidParamError(f"min_sizes must hold one list of sizes per step ({len(steps)}), not "
                                f"{min_sizes!r}", op=op)
    for sizes in min_sizes:
        arr = numbers(sizes, "min_sizes", op, "lists of positive")
        if arr.ndim != 1 or arr.size < 1 or (arr <= 0).any():
            raise InvalidParamError(f"min_sizes must hold lists of positive numbers, not {sizes!r}", op=op)
    out = []
    for sizes, step in zip(min_sizes, steps):
        fh, fw = -(-h // step), -(-w // step)
        cy, cx = np.meshgrid((np.arange(fh) + 0.5) * step, (np.arange(fw) + 0.5) * step, indexing="ij")
        k = len(sizes)
        cxy = np.repeat(np.stack([cx.ravel(), cy.ravel()], 1), k, axis=0)
        wh = np.tile(np.repeat(np.asarray(sizes, np.float64)[:, None], 2, 1), (fh * fw, 1))
        out.append(np.concatenate([cxy, wh], 1))
    return np.concatenate(out).astype(np.float32)


class RetinaFace(Decoder):
    """RetinaFace decoder (layout in the module docstring): class 0 "face", five landmarks
    as keypoints with confidence 1.

    Args:
        input_size: the model input (height, width) or an int.
        min_sizes: prior box sizes per stride, in pixels.
        steps: the strides.
        variance: the box encoding's variances (the model zoo's defaults throughout).
        conf: score threshold (default 0.5).
        iou: NMS threshold (default 0.4).
        **kwargs: ``max_det``, ``labels``, ``max_candidates``: see :class:`Decoder`.
    """

    name = "RetinaFace"

    def __init__(self, input_size=320, min_sizes: Sequence = ((16, 32), (64, 128), (256, 512)),
                 steps: Sequence[int] = (8, 16, 32), variance=(0.1, 0.2), conf: float = 0.5, iou: float = 0.4,
                 **kwargs):
        super().__init__(conf=conf, iou=iou, **kwargs)
        self.input_size = picture_size(input_size, "input_size", self.name)
        self.priors = retinaface_priors(self.input_size, min_sizes, steps)
        v = numbers(variance, "variance", self.name, "two positive")
        if v.shape != (2,) or (v <= 0).any():
            raise self._fail(f"variance must be two positive numbers (centre, size), not {variance!r}")
        self.variance = (v[0], v[1])

    def _decode(self, outs, qs) -> Detections:
        by_width = {}
        for y, q in zip(outs, qs):
            y2 = self._batch1(y, 3, "each output", self._fail)
            by_width[y2.shape[-1]] = (y2, q)
        if len(outs) != 3 or set(by_width) != {4, 2, 10}:
            raise self._fail(f"expected loc (1, N, 4), conf (1, N, 2) and landmarks (1, N, 10), got "
                             f"{[tuple(y.shape) for y in outs]}")
        (loc, lq), (conf, cq), (landm, mq) = by_width[4], by_width[2], by_width[10]
        n = self.priors.shape[0]
        if not loc.shape[0] == conf.shape[0] == landm.shape[0] == n:
            raise self._fail(f"the outputs hold {loc.shape[0]} priors; {n} were expected for input "
                             f"{self.input_size}")
        idx = np.flatnonzero(conf[:, 1] >= self._code(cq, conf.dtype))
        score = real(conf[idx, 1], cq)
        p = self.priors[idx]
        v0, v1 = self.variance
        d = real(loc.take(idx, axis=0), lq)
        centre = p[:, :2] + d[:, :2] * v0 * p[:, 2:]
        wh = p[:, 2:] * np.exp(d[:, 2:] * v1)
        boxes = np.concatenate([centre - wh / 2, centre + wh / 2], 1)
        lm = real(landm.take(idx, axis=0), mq).reshape(-1, 5, 2) * v0 * p[:, None, 2:] + p[:, None, :2]
        kp = np.concatenate([lm, np.ones(lm.shape[:2] + (1,), np.float32)], 2)
        return self._finish(boxes, score, np.zeros(idx.size, np.int32), kp)[0]


class SCRFD(Decoder):
    """SCRFD decoder (layout in the module docstring): class 0 "face", five keypoints.

    Args:
        input_size: the model input (height, width) or an int.
        strides: the feature strides (8, 16, 32).
        anchors: anchors per cell (2).
        conf: score threshold (default 0.5).
        iou: NMS threshold (default 0.4).
        **kwargs: ``max_det``, ``labels``, ``max_candidates``: see :class:`Decoder`.
    """

    name = "SCRFD"

    def __init__(self, input_size=640, strides: Sequence[int] = (8, 16, 32), anchors: int = 2, conf: float = 0.5,
                 iou: float = 0.4, **kwargs):
        super().__init__(conf=conf, iou=iou, **kwargs)
        self.input_size = picture_size(input_size, "input_size", self.name)
        self.strides = positive_ints(strides, "strides", self.name)
        self.anchors = positive_int(anchors, "anchors", self.name)

    def _decode(self, outs, qs) -> Detections:
        k = len(self.strides)
        if len(outs) != 3 * k:
            raise self._fail(f"expected {3 * k} outputs (scores, boxes, keypoints per stride), got {len(outs)}")
        ih, iw = self.input_size
        boxes, scores, kps = [], [], []
        for i, stride in enumerate(self.strides):
            fh, fw = -(-ih // stride), -(-iw // stride)
            n = fh * fw * self.anchors
            s, b, m = (self._rows(outs[i + j * k], width, n) for j, width in enumerate((1, 4, 10)))
            sq, bq, mq = qs[i], qs[i + k], qs[i + 2 * k]
            idx = np.flatnonzero(s[:, 0] >= self._code(sq, s.dtype))
            cell = idx // self.anchors
            gy, gx = np.divmod(cell, fw)
            pt = np.stack([gx, gy], 1).astype(np.float32) * np.float32(stride)
            d = real(b.take(idx, axis=0), bq) * np.float32(stride)
            boxes.append(np.concatenate([pt - d[:, :2], pt + d[:, 2:]], 1))
            scores.append(real(s[idx, 0], sq))
            kps.append(real(m.take(idx, axis=0), mq).reshape(-1, 5, 2) * np.float32(stride) + pt[:, None, :])
        kp = np.concatenate(kps)
        kp = np.concatenate([kp, np.ones(kp.shape[:2] + (1,), np.float32)], 2)
        score = np.concatenate(scores)
        return self._finish(np.concatenate(boxes), score, np.zeros(score.size, np.int32), kp)[0]

    def _rows(self, y, width: int, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.ndim == 3 and y.shape[0] == 1:
            y = y[0]
        if y.shape != (n, width):
            raise self._fail(f"an output has shape {y.shape}; ({n}, {width}) was expected for input "
                             f"{self.input_size} with {self.anchors} anchors per cell")
        return y
