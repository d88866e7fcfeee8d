"""Decoders of whole-picture outputs: classification top-k, semantic segmentation."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError
from .checks import flag, label_list, number_array, positive_int
from .draw import colours
from .quant import quant_list, real

__all__ = ["top_k", "segmentation_mask"]


def top_k(output: np.ndarray, k: int = 5, labels: Optional[Sequence[str]] = None, softmax: bool = False,
          quant=None) -> List[Tuple[int, float, str]]:
    """The ``k`` best classes of a classifier output (1, C) or (C,) (extra axes of 1 are
    ignored): ``[(class_id, score, label), ...]``, best first.  ``softmax`` turns logits
    into probabilities first.  A raw quantized output (``quant``: its TensorAttr or
    ``(scale, zp)``) is ranked on its codes and only the ``k`` kept are dequantized (without
    ``softmax``; with it every value is needed).  ``label`` is ``labels[class_id]`` or the
    number as text.

    Raises:
        InvalidParamError: ``k`` < 1, an output that is empty or not numbers, raw output
            without ``quant``, labels that are not a list of str, a ``softmax`` that is not
            True/False.
    """
    y = number_array(output, "output", "top_k", "scores")
    labels = label_list(labels, "labels", "top_k")
    softmax = flag(softmax, "softmax", "top_k")
    (q,) = quant_list([y], None if quant is None else [quant], "top_k")
    y = y.reshape(-1)
    k = positive_int(k, "k", "top_k")
    if y.size == 0:
        raise InvalidParamError("the output is empty", op="top_k")
    k = min(k, y.size)
    if softmax:
        x = real(y, q)
        e = np.exp(x - x.max())
        y, q = e / e.sum(), None
    best = np.argpartition(-y.astype(np.float32), k - 1)[:k] if k < y.size else np.arange(y.size)
    best = best[np.argsort(-y[best].astype(np.float32), kind="stable")]
    scores = real(y[best], q).tolist()
    names = [str(labels[i]) if labels is not None and i < len(labels) else str(i) for i in best.tolist()]
    return list(zip(best.tolist(), scores, names))


def segmentation_mask(output: np.ndarray, palette: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Semantic segmentation (1, C, H, W) or (C, H, W) scores -> ``(classes, colours)``:
    (H, W) int32 class per pixel (argmax over C) and an (H, W, 3) uint8 picture of them in
    ``palette`` (an (n, 3) uint8 table indexed by class modulo n; default
    :data:`~rknnlite.vision.PALETTE`).  Raw quantized scores work as they are: one scale
    and zero point keep their order, so no dequantization is needed.

    Raises:
        InvalidParamError: an output of another rank or with no class.
    """
    y = number_array(output, "output", "segmentation_mask", "(1, C, H, W) or (C, H, W) scores")
    if y.ndim == 4 and y.shape[0] == 1:
        y = y[0]
    if y.ndim != 3 or y.shape[0] < 1:
        raise InvalidParamError(f"scores must be (1, C, H, W) or (C, H, W), got {np.shape(output)}",
                                op="segmentation_mask")
    classes = np.argmax(y, axis=0).astype(np.int32)
    return classes, colours(classes, palette)
