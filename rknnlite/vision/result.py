"""The detection result type every decoder returns."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..errors import InvalidParamError
from ..runtime.args import is_int
from .checks import label_list, positive_ints

__all__ = ["Detections"]


@dataclass(frozen=True)
class Detections:
    """Objects found in one picture, best score first.

    Attributes:
        boxes: (N, 4) float32 x1, y1, x2, y2 in pixels of the picture they refer to (the
            model input as decoded; the source picture after :meth:`to_source`).
        scores: (N,) float32 confidences in [0, 1].
        class_ids: (N,) int32 class indices.
        masks: (N, H, W) bool instance masks (segmentation models), else ``None``.
        keypoints: (N, K, 3) float32 x, y, confidence per keypoint (pose models; face
            landmarks with confidence 1), else ``None``.
        labels: class names by class id, used by :meth:`draw` and :meth:`to_json`.
        frame_id: the pipeline frame this result belongs to, if it came through one.
    """

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    masks: Optional[np.ndarray] = None
    keypoints: Optional[np.ndarray] = None
    labels: Optional[Sequence[str]] = None
    frame_id: Optional[int] = None

    @classmethod
    def empty(cls, labels=None, masks_shape=None, keypoints: int = 0) -> "Detections":
        """No detection (with an empty mask / keypoint array when the model has them):
        ``masks_shape`` the masks' (H, W), ``keypoints`` the number per object.

        Raises:
            InvalidParamError: labels that are not class names, a ``masks_shape`` that is not
                two ints >= 1, ``keypoints`` that is not an int >= 0.
        """
        labels = label_list(labels, "labels", "Detections")
        if masks_shape is not None:
            masks_shape = positive_ints(masks_shape, "masks_shape", "Detections")
            if len(masks_shape) != 2:
                raise InvalidParamError(f"masks_shape must be (H, W), not {masks_shape!r}",
                                        op="Detections")
        if not is_int(keypoints) or keypoints < 0:
            raise InvalidParamError(f"keypoints must be an int >= 0, not {keypoints!r}", op="Detections")
        masks = None if masks_shape is None else np.zeros((0,) + tuple(masks_shape), bool)
        kp = np.zeros((0, keypoints, 3), np.float32) if keypoints else None
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32), masks, kp, labels)

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def __getitem__(self, index) -> "Detections":
        """The detections selected by ``index``: a boolean mask of length N
        (``dets[dets.scores >= 0.5]``), integer positions, a slice, or one position (a
        Detections of one).  The order of ``index`` is kept; arrays are new (numpy indexing)
        except for a slice, which shares them.  Raises ``IndexError`` for a mask of another
        length or a position out of range."""
        if isinstance(index, (int, np.integer)):
            index = [int(index)]
        if not isinstance(index, slice):
            index = np.asarray(index)
            if index.dtype == bool:
                if index.shape != (len(self),):
                    raise IndexError(f"a boolean selection of Detections needs shape ({len(self)},), "
                                     f"got {index.shape}")
            elif index.size == 0:
                index = index.astype(np.intp)
            elif not np.issubdtype(index.dtype, np.integer) or index.ndim != 1:
                raise IndexError("Detections are selected by a boolean mask, integer positions or a "
                                 f"slice, not {index.dtype} of shape {index.shape}")
            elif ((index < -len(self)) | (index >= len(self))).any():
                raise IndexError(f"position out of range for {len(self)} detections: {index.tolist()}")

        def pick(a):
            return None if a is None else a[index]

        return self.replace(boxes=self.boxes[index], scores=self.scores[index], class_ids=self.class_ids[index],
                            masks=pick(self.masks), keypoints=pick(self.keypoints))

    def replace(self, **changes) -> "Detections":
        """A copy with some fields changed (arrays are shared, not copied)."""
        return dataclasses.replace(self, **changes)

    def label(self, i: int) -> str:
        """The name of detection ``i``'s class (its number when there are no labels)."""
        c = int(self.class_ids[i])
        if self.labels is not None and 0 <= c < len(self.labels):
            return str(self.labels[c])
        return str(c)

    def to_source(self, transform) -> "Detections":
        """The same detections on the source picture of a letterbox ``transform``
        (:class:`~rknnlite.vision.LetterboxTransform`): boxes and keypoints mapped, masks
        resampled to the source size.  New arrays."""
        masks = None if self.masks is None else transform.masks_to_source(self.masks)
        kp = None if self.keypoints is None else transform.points_to_source(self.keypoints)
        return self.replace(boxes=transform.boxes_to_source(self.boxes), keypoints=kp, masks=masks)

    def draw(self, image: np.ndarray, thickness: int = 2, text: Optional[bool] = None, copy: bool = True,
             alpha: float = 0.5, palette: Optional[np.ndarray] = None) -> np.ndarray:
        """Boxes, masks and keypoints drawn on ``image`` (H, W, 3) uint8; see
        :func:`rknnlite.vision.draw_detections` (returns a new array unless ``copy=False``)."""
        from .draw import draw_detections

        return draw_detections(image, self, thickness=thickness, text=text, copy=copy, alpha=alpha, palette=palette)

    def to_dict(self) -> Dict[str, Any]:
        """Plain Python values: ``{"frame_id", "detections": [{"box", "score", "class_id",
        "label", "keypoints"?, "mask"?}]}``; a mask is a row-major run-length encoding
        ``{"size": [h, w], "counts": [zeros, ones, zeros, ...]}``."""
        dets: List[Dict[str, Any]] = []
        boxes = self.boxes.tolist()
        scores = self.scores.tolist()
        classes = self.class_ids.tolist()
        kps = None if self.keypoints is None else self.keypoints.tolist()
        for i in range(len(self)):
            d: Dict[str, Any] = {"box": [round(v, 2) for v in boxes[i]], "score": round(scores[i], 5),
                                 "class_id": classes[i], "label": self.label(i)}
            if kps is not None:
                d["keypoints"] = [[round(x, 2), round(y, 2), round(c, 4)] for x, y, c in kps[i]]
            if self.masks is not None:
                d["mask"] = _rle(self.masks[i])
            dets.append(d)
        return {"frame_id": self.frame_id, "detections": dets}

    def to_json(self, **dumps_kwargs) -> str:
        """:meth:`to_dict` as a JSON string (``json.dumps`` keyword arguments pass through)."""
        return json.dumps(self.to_dict(), **dumps_kwargs)


def _rle(mask: np.ndarray) -> Dict[str, Any]:
    flat = np.asarray(mask, dtype=bool).ravel()
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate(([0], change, [flat.size]))
    counts = np.diff(edges).tolist()
    if flat.size and flat[0]:
        counts = [0] + counts  # counts start with a run of zeros
    return {"size": list(mask.shape), "counts": counts}
