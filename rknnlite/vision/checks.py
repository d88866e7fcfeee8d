"""Argument checks shared by the vision modules (each raises InvalidParamError naming the
argument, the call and what was expected)."""

from __future__ import annotations

from typing import Tuple

import numpy as np

from ..errors import InvalidParamError

__all__ = ["picture_size", "positive_int"]


def positive_int(value, what: str, op: str) -> int:
    """``value`` as an int when it is an integer >= 1 (not a bool).

    Raises:
        InvalidParamError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidParamError(f"{op}: {what} must be an int >= 1, not {value!r}", op=op)
    return int(value)


def picture_size(size, what: str = "size", op: str = "letterbox") -> Tuple[int, int]:
    """``(height, width)`` from an int (a square) or a pair, both >= 1.

    Raises:
        InvalidParamError: anything else (the message names ``what`` and ``op``).
    """
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = (int(size), int(size))
    try:
        th, tw = (int(v) for v in size)
    except (TypeError, ValueError):
        raise InvalidParamError(f"{op}: {what} must be an int or (height, width), not {size!r}", op=op) from None
    if th < 1 or tw < 1:
        raise InvalidParamError(f"{op}: {what} must be positive, not {size!r}", op=op)
    return th, tw
