"""Anchor-free YOLO decoders with distribution focal loss boxes: YOLOv8 and YOLO11, with
their segmentation (masks from prototypes) and pose (keypoints) variants.

Two exported layouts are read:

* **Concatenated** (Ultralytics' ONNX export): one (1, 4 + nc + extra, N) output (or its
  transpose (1, N, 4 + nc + extra)), N = 8400 cells for a 640x640 input; rows ``cx, cy,
  w, h`` in input pixels (already decoded), ``nc`` class scores after a sigmoid, then
  ``extra``: 32 mask coefficients (seg, with the prototypes (1, 32, Ph, Pw) as a second
  output) or K*3 keypoint values ``x, y, visibility`` per keypoint (pose, ``x, y`` in
  pixels, visibility after a sigmoid).
* **Split heads** (Rockchip's model zoo export): per stride 8, 16, 32, in that order, the
  box distribution (1, 4*R, H, W) (R = 16 bins), the class scores (1, nc, H, W) after a
  sigmoid, optionally their clipped sum (1, 1, H, W) used to skip empty cells quickly,
  and for seg the mask coefficients (1, 32, H, W); then, for seg, the prototypes.  The
  distances ``l, t, r, b`` (in cells) are the softmax-weighted means of the bins; a box is
  ``(cell + 0.5 -+ distances) * stride``.

Only cells whose best class score passes ``conf`` are decoded (the DFL softmax runs on
those alone, in numpy).
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidParamError
from .checks import flag, numbers, picture_size, positive_int
from .decoder import Decoder
from .quant import real
from .result import Detections

__all__ = ["YOLOv8", "YOLO11", "YOLOv8Seg", "YOLOv8Pose", "dfl_distances"]


def dfl_distances(bins: np.ndarray) -> np.ndarray:
    """(4, R, M) float32 box distribution logits -> (4, M) distances: the mean of
    ``0..R-1`` under the softmax over the R bins.

    Raises:
        InvalidParamError: anything but a 3-D array of numbers with at least one bin.
    """
    bins = numbers(bins, "bins", "dfl_distances", "(4, R, M)", finite=False)
    if bins.ndim != 3 or bins.shape[1] < 1:
        raise InvalidParamError(f"bins must be (4, R, M), got shape {bins.shape}", op="dfl_distances")
    e = bins - bins.max(axis=1, keepdims=True)
    np.exp(e, out=e)
    return np.matmul(np.arange(bins.shape[1], dtype=np.float32), e) / e.sum(1)


class YOLOv8(Decoder):
    """YOLOv8 / YOLO11 detection decoder (layouts in the module docstring).

    Args:
        num_classes: classes of the model (80 for COCO); needed to split a concatenated
            output's rows.
        input_size: the model input (height, width) or an int (split heads only: their
            stride is the input size over the grid size).
        **kwargs: ``conf``, ``iou``, ``max_det``, ``class_aware``, ``labels``,
            ``max_candidates``: see :class:`Decoder`.
    """

    name = "YOLOv8"
    extra_rows = 0  # rows after the class scores in a concatenated output
    split_extra = 0  # outputs after (box, cls[, sum]) per branch in split heads

    def __init__(self, num_classes: int = 80, input_size=640, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = positive_int(num_classes, "num_classes", self.name)
        self.input_size = picture_size(input_size, "input_size", self.name)

    # -- layouts -----------------------------------------------------------------------------

    def _decode(self, outs, qs) -> Detections:
        n_proto = 1 if self.split_extra or self._needs_proto() else 0
        heads = len(outs) - n_proto
        if heads == 1:
            boxes, scores, cls, extra, eq = self._concatenated(outs[0], qs[0])
        elif heads >= 6 and heads % 3 == 0:
            boxes, scores, cls, extra, eq = self._split(outs[:heads], qs[:heads])
        else:
            raise self._fail(f"expected one concatenated output or 3 branches of split heads (+ prototypes for "
                             f"seg), got {len(outs)} outputs")
        dets, keep = self._finish(boxes, scores, cls, *self._extras(extra, eq, keep_shape=True))
        return self._complete(dets, extra, keep, outs[heads:], qs[heads:])

    def _needs_proto(self) -> bool:
        return False

    def _concatenated(self, y, q):
        y = self._batch1(y, 3, "the concatenated output", self._fail)
        rows = 4 + self.num_classes + self._extra_rows()
        if y.shape[0] != rows and y.shape[1] == rows:
            y = y.T
        if y.shape[0] != rows:
            raise self._fail(f"the output {y.shape} has no axis of 4 + {self.num_classes} classes"
                             f"{f' + {self._extra_rows()}' if self._extra_rows() else ''} = {rows} rows")
        nc = self.num_classes
        best = y[4:4 + nc].max(axis=0)
        cell = np.flatnonzero(best >= self._code(q, y.dtype))
        raw = y.take(cell, axis=1)  # take: fancy indexing of columns is far slower
        c = np.argmax(raw[4:4 + nc], axis=0)
        score = real(best.take(cell), q)  # the best code's value is the best value
        cand = real(raw[:4], q) if self._extra_rows() == 0 else real(raw, q)
        xy, wh = cand[0:2].T, cand[2:4].T
        boxes = np.concatenate([xy - wh / 2, xy + wh / 2], 1)
        return boxes, score, c, (cand[4 + nc:].T if self._extra_rows() else None), None

    def _split(self, outs, qs):
        per = len(outs) // 3
        has_sum = per - self.split_extra == 3
        if per - self.split_extra not in (2, 3):
            raise self._fail(f"{len(outs)} head outputs do not make 3 branches of box, class scores"
                             f"{', mask coefficients' if self.split_extra else ''} (and optional score sums)")
        ih, iw = self.input_size
        parts = []
        for b in range(3):
            k = b * per
            reg = self._batch1(outs[k], 4, f"branch {b} box output", self._fail)
            cls = self._batch1(outs[k + 1], 4, f"branch {b} class output", self._fail)
            r4, h, w = reg.shape
            if r4 % 4 or cls.shape != (self.num_classes, h, w):
                raise self._fail(f"branch {b}: box output {reg.shape} and class output {cls.shape} do not match "
                                 f"(4*bins, H, W) and ({self.num_classes}, H, W)")
            if ih % h or iw % w:
                raise self._fail(f"branch {b} has a {h}x{w} grid, which does not divide the {ih}x{iw} input")
            cls = cls.reshape(self.num_classes, h * w)
            code = self._code(qs[k + 1], cls.dtype)
            cell = None
            if has_sum:
                s = self._batch1(outs[k + 2], 4, f"branch {b} score-sum output", self._fail).reshape(-1)
                cell = np.flatnonzero(s >= self._code(qs[k + 2], s.dtype))  # sum >= max >= conf
                if 8 * cell.size > s.size:  # the sum filters little: one reduction over every cell is cheaper
                    cell = None
            if cell is None:
                best = cls.max(axis=0)
                cell = np.flatnonzero(best >= code)
                sub = cls.take(cell, axis=1)
                best = best.take(cell)
            else:  # only the cells the sum let through: their classes
                sub = cls.take(cell, axis=1)
                best = sub.max(axis=0)
            c = np.argmax(sub, axis=0)
            ok = best >= code
            if not ok.all():
                cell, c, best = cell.compress(ok), c.compress(ok), best.compress(ok)
            score = real(best, qs[k + 1])  # the best code's value is the best value
            bins = real(reg.reshape(4, r4 // 4, h * w).take(cell, axis=2), qs[k])
            gy, gx = np.divmod(cell, w)
            # per candidate: cell centre (in cells) and stride, to place the boxes of every branch at once
            where = np.empty((4, cell.size), np.float32)
            where[0], where[1], where[2], where[3] = gx + 0.5, gy + 0.5, iw // w, ih // h
            extra = None
            if self.split_extra:
                co = self._batch1(outs[k + per - 1], 4, f"branch {b} mask coefficients", self._fail)
                extra = real(co.reshape(co.shape[0], h * w).take(cell, axis=1), qs[k + per - 1]).T
            parts.append((score, c, bins, where, extra))
        score, c = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        if len({p[2].shape[1] for p in parts}) != 1:
            raise self._fail("the three branches' box outputs have different numbers of bins")
        dist = dfl_distances(np.concatenate([p[2] for p in parts], axis=2))  # one DFL pass for every branch
        cx, cy, sx, sy = np.concatenate([p[3] for p in parts], axis=1)
        boxes = np.empty((score.size, 4), np.float32)
        boxes[:, 0] = (cx - dist[0]) * sx
        boxes[:, 1] = (cy - dist[1]) * sy
        boxes[:, 2] = (cx + dist[2]) * sx
        boxes[:, 3] = (cy + dist[3]) * sy
        extra = np.concatenate([p[4] for p in parts]) if self.split_extra else None
        return boxes, score, c, extra, None

    # -- variants' hooks -------------------------------------------------------------------------

    def _extra_rows(self) -> int:
        return self.extra_rows

    def _extras(self, extra, eq, keep_shape):
        return ()

    def _complete(self, dets, extra, keep, rest, rest_q) -> Detections:
        return dets


class YOLO11(YOLOv8):
    """YOLO11 detection decoder: the YOLOv8 layouts (the heads did not change); arguments
    as :class:`YOLOv8`."""

    name = "YOLO11"


class YOLOv8Seg(YOLOv8):
    """YOLOv8 / YOLO11 instance segmentation: boxes as :class:`YOLOv8`, and a mask per
    detection: ``coefficients @ prototypes > 0`` (a sigmoid above 0.5) on the prototype
    grid, cut to the box (cells whose index lies in the box scaled to the grid, as
    Ultralytics crops).  The masks cover the model input at the prototype resolution
    (160x160 for 640x640); :meth:`Detections.to_source` resamples them to the source.

    Outputs: concatenated (1, 4+nc+32, N) + prototypes (1, 32, Ph, Pw), or split heads
    with a mask-coefficient output (1, 32, H, W) last in each branch + prototypes.
    """

    name = "YOLOv8Seg"

    def __init__(self, num_classes: int = 80, input_size=640, mask_dim: int = 32, split: bool = False, **kwargs):
        super().__init__(num_classes, input_size, **kwargs)
        self.mask_dim = positive_int(mask_dim, "mask_dim", self.name)
        self.split_extra = 1 if flag(split, "split", self.name) else 0

    def _needs_proto(self) -> bool:
        return True

    def _extra_rows(self) -> int:
        return self.mask_dim

    def _complete(self, dets, extra, keep, rest, rest_q) -> Detections:
        if len(rest) != 1:
            raise self._fail("the prototypes (1, mask_dim, Ph, Pw) must be the last output")
        proto = self._batch1(rest[0], 4, "the prototypes", self._fail)
        m, ph, pw = proto.shape
        if m != self.mask_dim or extra.shape[1] != m:
            raise self._fail(f"prototypes {proto.shape} and {extra.shape[1]} mask coefficients do not match "
                             f"mask_dim={self.mask_dim}")
        coef = extra[keep]
        logits = (coef @ real(proto.reshape(m, ph * pw), rest_q[0])).reshape(-1, ph, pw)
        ih, iw = self.input_size
        b = dets.boxes * np.array([pw / iw, ph / ih, pw / iw, ph / ih], np.float32)
        xs = np.arange(pw, dtype=np.float32)  # cell index against the scaled box, as Ultralytics crops
        ys = np.arange(ph, dtype=np.float32)
        inside = ((xs[None, None, :] >= b[:, 0, None, None]) & (xs[None, None, :] < b[:, 2, None, None])
                  & (ys[None, :, None] >= b[:, 1, None, None]) & (ys[None, :, None] < b[:, 3, None, None]))
        return dets.replace(masks=(logits > 0) & inside)


class YOLOv8Pose(YOLOv8):
    """YOLOv8 / YOLO11 pose: boxes as :class:`YOLOv8` from the concatenated output
    (1, 4+nc+K*3, N) and ``K`` keypoints per detection (``x, y`` in input pixels,
    visibility in [0, 1]).  Default: one class (person), 17 COCO keypoints."""

    name = "YOLOv8Pose"

    def __init__(self, num_classes: int = 1, input_size=640, num_keypoints: int = 17, **kwargs):
        super().__init__(num_classes, input_size, **kwargs)
        self.num_keypoints = positive_int(num_keypoints, "num_keypoints", self.name)

    def _extra_rows(self) -> int:
        return 3 * self.num_keypoints

    def _split(self, outs, qs):
        raise self._fail("pose models are read from the concatenated output (1, 4+nc+K*3, N)")

    def _extras(self, extra, eq, keep_shape):
        return (extra.reshape(-1, self.num_keypoints, 3),)
