"""Stub of the compiled ``rknnlite._native.sparse_kernels`` (cython/kernels/sparse_kernels.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

def csr_gemm(vals: Buffer, cols: Buffer, blk: Buffer, X: Buffer, Y: Buffer, n0: int = ..., n1: int = ...) -> Any: ...
def has_simd() -> Any: ...
