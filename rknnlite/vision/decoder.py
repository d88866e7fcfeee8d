"""What every detection decoder shares: thresholds, the candidate cap, NMS, the result."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError
from .checks import flag, fraction, label_list, number_array, positive_int
from .nms import nms
from .quant import Quant, code_at_least, logit, quant_list
from .result import Detections

__all__ = ["Decoder"]


class Decoder:
    """Base of the detection decoders: ``decoder(outputs, quant=None) -> Detections``.

    Args:
        conf: score threshold in [0, 1]: detections scoring lower are dropped.
        iou: NMS IoU threshold in [0, 1].
        max_det: most detections returned.
        class_aware: NMS only between boxes of one class (``False``: across classes).
        labels: class names by class id, carried into the result.
        max_candidates: most candidates NMS looks at (the best-scoring ones).

    Calling a decoder: ``outputs`` is the output list of ``Context.run`` for one picture
    (batch 1), float32 (``want_float=True``) or raw quantized (``want_float=False``).  Raw
    outputs need ``quant``: ``ctx.outputs`` (TensorAttr list) or one ``(scale, zp)`` per
    output.  Thresholds are compared with the raw codes and only candidates are
    dequantized.  Boxes come out in model-input pixels; map them with
    :meth:`Detections.to_source`.
    """

    name = "Decoder"

    def __init__(self, conf: float = 0.25, iou: float = 0.45, max_det: int = 300, class_aware: bool = True,
                 labels: Optional[Sequence[str]] = None, max_candidates: int = 30000):
        self.conf = fraction(conf, "conf", self.name)
        self.iou = fraction(iou, "iou", self.name)
        self.max_det = positive_int(max_det, "max_det", self.name)
        self.class_aware = flag(class_aware, "class_aware", self.name)
        self.labels = label_list(labels, "labels", self.name)
        self.max_candidates = positive_int(max_candidates, "max_candidates", self.name)

    def __call__(self, outputs, quant=None) -> Detections:
        """Decode one picture's ``outputs`` (see the class docstring)."""
        if isinstance(outputs, np.ndarray):
            outputs = [outputs]
        if not isinstance(outputs, (list, tuple)):
            raise self._fail(f"outputs must be an array or a list of arrays (Context.run's), not {outputs!r}")
        outs = [number_array(y, f"output {i}", self.name, "a model output") for i, y in enumerate(outputs)]
        return self._decode(outs, quant_list(outs, quant, self.name))

    def _decode(self, outs, qs) -> Detections:  # pragma: no cover - every decoder overrides it
        raise NotImplementedError

    # -- helpers for the decoders --------------------------------------------------------------

    def _fail(self, message: str) -> InvalidParamError:
        return InvalidParamError(message, op=self.name)

    def _code(self, q: Optional[Quant], dtype, logits: bool = False):
        """The value raw scores are compared with (``>=``) for the ``conf`` threshold."""
        return code_at_least(logit(self.conf) if logits else self.conf, q, dtype)

    @staticmethod
    def _batch1(y: np.ndarray, ndim: int, what: str, fail) -> np.ndarray:
        """``y`` without its batch axis of 1 (``ndim``: dims with the batch axis)."""
        if y.ndim == ndim - 1:
            return y
        if y.ndim != ndim or y.shape[0] != 1:
            raise fail(f"{what} must be {ndim}-D with batch 1, got shape {y.shape}")
        return y[0]

    def _finish(self, boxes, scores, class_ids, keypoints=None, coeffs=None) -> Tuple[Detections, np.ndarray]:
        """NMS over the candidates; the result (keypoints kept alongside) and the kept
        indices (to pick ``coeffs`` rows for masks)."""
        boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        class_ids = np.asarray(class_ids, dtype=np.int32).reshape(-1)
        pick = np.arange(scores.size)
        if scores.size > self.max_candidates:
            pick = np.argpartition(-scores, self.max_candidates - 1)[:self.max_candidates]
        if scores.size > self.max_candidates:
            boxes, scores, class_ids = boxes.take(pick, 0), scores.take(pick), class_ids.take(pick)
        kept = nms(boxes, scores, class_ids if self.class_aware else None, self.iou, self.max_det)
        keep = pick.take(kept)
        kp = None if keypoints is None else np.asarray(keypoints, dtype=np.float32).take(keep, axis=0)
        return Detections(boxes.take(kept, 0), scores.take(kept), class_ids.take(kept), None, kp, self.labels), keep
