"""Pooling kernels (see the package docstring for the calling convention)."""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel("GlobalAveragePool")
def global_average_pool(inputs, attrs, out=None):
    x = inputs[0]
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32)]


@kernel("GlobalMaxPool")
def global_max_pool(inputs, attrs, out=None):
    x = inputs[0]
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
