"""Stub of the compiled ``rknnlite._native.elementwise_kernels`` (cython/kernels/elementwise_kernels.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

def erf_from_exp(x: Buffer, work: Buffer) -> Any: ...
def gelu_from_exp(x: Buffer, work: Buffer) -> Any: ...
