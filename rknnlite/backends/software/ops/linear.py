"""Dense kernels: Gemm and MatMul (see the package docstring for the calling convention)."""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel("Gemm")
def gemm(inputs, attrs, out=None):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    y = attrs.get("alpha", 1.0) * (a @ b)
    if c is not None:
        y = y + attrs.get("beta", 1.0) * c
    return [y.astype(np.float32, copy=False)]


@kernel("MatMul")
def matmul(inputs, attrs, out=None):
    return [np.matmul(inputs[0], inputs[1])]
