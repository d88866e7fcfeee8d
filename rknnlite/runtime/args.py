"""Type checks of API arguments shared by :class:`~rknnlite.Context`, ``RKNNLite``, the
toolkit's ``RKNN`` and the pipeline.

Each answers True or False for any value: an array, a string or any other object where a
number or a yes/no is expected is simply not one (comparing an array with ``==`` or testing
its truth raises, and a string such as ``"no"`` reads as true), so callers can refuse it by
name.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..errors import InvalidParamError

__all__ = ["is_flag", "is_int", "is_number", "check_timeout"]


def is_int(value) -> bool:
    """Whether ``value`` is an int (numpy's too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value) -> bool:
    """Whether ``value`` is one real number (an int or a float, numpy's too), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def is_flag(value) -> bool:
    """Whether ``value`` is a yes/no argument: True/False (numpy's too) or 0/1."""
    return isinstance(value, (bool, np.bool_)) or (is_int(value) and value in (0, 1))


def check_timeout(timeout, op: str) -> Optional[float]:
    """A wait's ``timeout``: None (wait as long as it takes) or seconds >= 0, as a float; an
    infinite one is None (``threading`` waits refuse it).

    Raises:
        InvalidParamError: anything else (a string, NaN, a negative number...), naming ``op``.
    """
    if timeout is None:
        return None
    if is_number(timeout) and not math.isnan(timeout) and timeout >= 0:
        return None if math.isinf(timeout) else float(timeout)
    raise InvalidParamError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}", op=op)
