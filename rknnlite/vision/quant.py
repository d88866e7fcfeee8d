"""Raw (``want_float=False``) outputs: their quantization, thresholds as integer codes,
and dequantizing only the values a decoder keeps.

A quantized output holds codes ``q`` with ``real = (q - zp) * scale``.  Comparing a score
with a threshold ``t`` is then comparing ``q`` with the smallest code whose real value is
``>= t``, so a decoder scans the int8 tensor itself and dequantizes only candidates, the
way Rockchip's zero-copy demos do.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import numpy as np

from ..errors import InvalidParamError
from ..runtime.args import is_int, is_number

__all__ = ["Quant", "quant_list", "real", "code_at_least", "logit"]


class Quant(NamedTuple):
    """Affine quantization of one output: ``real = (q - zp) * scale``."""

    scale: float
    zp: int


def quant_list(outputs: Sequence[np.ndarray], quant, op: str) -> list:
    """One :class:`Quant` or ``None`` per output: ``None`` for a float output, the
    matching entry of ``quant`` (a :class:`~rknnlite.TensorAttr` such as ``ctx.outputs[i]``,
    a ``(scale, zp)`` pair or a :class:`Quant`) for an integer one.

    Raises:
        InvalidParamError: an integer output without its scale and zero point.
    """
    out = []
    for i, y in enumerate(outputs):
        if np.asarray(y).dtype.kind == "f":
            out.append(None)
            continue
        entry = None
        if quant is not None and i < len(quant):
            entry = quant[i]
        if entry is None:
            raise InvalidParamError(f"output {i} is {np.asarray(y).dtype} (a raw quantized output); pass "
                                    "quant=ctx.outputs (or one (scale, zp) per output) to decode it", op=op)
        if hasattr(entry, "scale") and hasattr(entry, "zp"):
            scale, zp = entry.scale, entry.zp
        else:
            try:
                scale, zp = entry
            except (TypeError, ValueError):
                raise InvalidParamError(f"quant[{i}] must be a TensorAttr or a (scale, zp) pair, "
                                        f"not {entry!r}", op=op) from None
        if not is_number(scale) or not 0 < scale < math.inf:
            raise InvalidParamError(f"output {i} has scale {scale!r}; a positive scale is needed", op=op)
        if not is_int(zp):
            raise InvalidParamError(f"output {i} has zero point {zp!r}; an int is needed", op=op)
        out.append(Quant(float(scale), int(zp)))
    return out


def real(values: np.ndarray, q: Optional[Quant]) -> np.ndarray:
    """``values`` as float32: dequantized with ``q``, or converted (a copy only when the
    dtype changes) when ``q`` is ``None``."""
    if q is None:
        return np.asarray(values, dtype=np.float32)
    out = np.asarray(values, dtype=np.float32) - np.float32(q.zp)
    out *= np.float32(q.scale)
    return out


def code_at_least(threshold: float, q: Optional[Quant], dtype) -> float:
    """The smallest value of ``dtype`` whose real value is ``>= threshold`` under ``q``
    (the real value computed as :func:`real` does, in float32), so ``raw >= code`` selects
    exactly the entries ``real(raw) >= threshold`` does.  For a float output (``q`` None)
    the threshold itself.  Past the dtype's largest code the result is that code + 1
    (nothing passes)."""
    if q is None:
        return threshold
    info = np.iinfo(dtype)
    t = np.float32(threshold)

    def passes(c: int) -> bool:
        return (np.float32(c) - np.float32(q.zp)) * np.float32(q.scale) >= t

    c = math.ceil(threshold / q.scale + q.zp) if math.isfinite(threshold) else (info.min if threshold < 0 else info.max + 1)
    c = min(max(c, info.min), info.max + 1)
    while c > info.min and passes(c - 1):
        c -= 1
    while c <= info.max and not passes(c):
        c += 1
    return c


def logit(p: float) -> float:
    """The logit ``log(p / (1 - p))`` of a probability (+-inf at 1 and 0): the threshold
    on raw scores that a sigmoid turns into ``p``."""
    if p <= 0:
        return -math.inf
    if p >= 1:
        return math.inf
    return math.log(p / (1 - p))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function of a float32 array (a new array)."""
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float32)))
