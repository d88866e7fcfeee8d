"""Stub of the compiled ``rknnlite._native.abi`` (cython/npu/abi.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

EXPECTED_SIZES: dict
SIZES: dict
def check_abi(sizes: Any = ..., expected: Any = ...) -> Any: ...
