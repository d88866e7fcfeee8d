"""Argument checks shared by the vision modules (each raises InvalidParamError naming the
argument, the call and what was expected)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..errors import InvalidParamError
from ..runtime.args import is_flag, is_int, is_number

__all__ = ["flag", "fraction", "label_list", "number_array", "numbers", "picture_size", "positive_int",
           "positive_ints"]


def positive_int(value, what: str, op: str) -> int:
    """``value`` as an int when it is an integer >= 1 (not a bool).

    Raises:
        InvalidParamError: anything else.
    """
    if not is_int(value) or value < 1:
        raise InvalidParamError(f"{what} must be an int >= 1, not {value!r}", op=op)
    return int(value)


#: the largest picture side a size may give, in pixels (a bigger one is a mistake that would
#: otherwise end in a MemoryError)
MAX_SIDE = 1 << 16


def picture_size(size, what: str = "size", op: str = "letterbox") -> Tuple[int, int]:
    """``(height, width)`` from an int (a square) or a pair of ints, both in 1..MAX_SIDE.

    Raises:
        InvalidParamError: anything else (the message names ``what`` and ``op``).
    """
    pair = (size, size) if is_int(size) else size
    if not isinstance(pair, (list, tuple, np.ndarray)) or len(pair) != 2 or not all(is_int(v) for v in pair):
        raise InvalidParamError(f"{what} must be an int or (height, width) ints, not {size!r}", op=op)
    th, tw = int(pair[0]), int(pair[1])
    if not (1 <= th <= MAX_SIDE and 1 <= tw <= MAX_SIDE):
        raise InvalidParamError(f"{what} must be 1..{MAX_SIDE} pixels a side, not {size!r}", op=op)
    return th, tw


def fraction(value, what: str, op: str) -> float:
    """``value`` as a float when it is a number in [0, 1] (a threshold).

    Raises:
        InvalidParamError: anything else (NaN, a bool, a string, an array...).
    """
    if not is_number(value) or not 0.0 <= value <= 1.0:
        raise InvalidParamError(f"{what} must be a number in [0, 1], not {value!r}", op=op)
    return float(value)


def flag(value, what: str, op: str) -> bool:
    """``value`` as a bool when it is True/False or 0/1.

    Raises:
        InvalidParamError: anything else (a string such as "no" would read as true).
    """
    if not is_flag(value):
        raise InvalidParamError(f"{what} must be True or False, not {value!r}", op=op)
    return bool(value)


def label_list(value, what: str, op: str) -> Optional[List[str]]:
    """None, or ``value`` (a list or tuple of class names) as a new list of str.

    Raises:
        InvalidParamError: anything else.
    """
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidParamError(f"{what} must be a list of class names (str), not {value!r}", op=op)
    return list(value)


def positive_ints(value, what: str, op: str) -> Tuple[int, ...]:
    """``value`` (a list or tuple of ints >= 1, at least one) as a tuple.

    Raises:
        InvalidParamError: anything else.
    """
    if not isinstance(value, (list, tuple)) or not value or not all(is_int(v) and v >= 1 for v in value):
        raise InvalidParamError(f"{what} must be a list of ints >= 1, not {value!r}", op=op)
    return tuple(int(v) for v in value)


def numbers(value, what: str, op: str, shape: str, finite: bool = True) -> np.ndarray:
    """``value`` as a float32 array (a view where it already is one; ``shape`` describes the
    expected shape in the message, the caller checks it); ``finite``: NaN and infinity are
    refused too (parameters; a model's outputs may hold them).

    Raises:
        InvalidParamError: something that is not numbers (strings, objects, ragged lists), or
            a value that is not finite when ``finite``.
    """
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidParamError(f"{what} must be {shape} numbers, not {value!r}", op=op) from None
    if finite and not np.isfinite(arr).all():
        raise InvalidParamError(f"{what} must be {shape} finite numbers, not {value!r}", op=op)
    return arr


def number_array(value, what: str, op: str, expected: str) -> np.ndarray:
    """``value`` as an array of numbers in its own dtype (bool, int or float; no copy when it
    already is an array); ``expected`` describes it in the message.

    Raises:
        InvalidParamError: strings, objects, ragged lists.
    """
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        raise InvalidParamError(f"{what} must be {expected} (an array of numbers), not {value!r}", op=op)
    return arr
