"""Stub of the compiled ``rknnlite._native.affine_kernels`` (cython/kernels/affine_kernels.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

ACT_CLIP: int
ACT_LEAKY: int
ACT_NONE: int
def channel_affine(x: Buffer, scale: Buffer, shift: Buffer, out: Buffer, kind: int = ..., lo: float = ..., hi: float = ..., alpha: float = ...) -> Any: ...
