"""Shape-only kernels: they move no data when a view suffices."""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel("Flatten")
def flatten(inputs, attrs, out=None):
    x = inputs[0]
    axis = attrs.get("axis", 1)
    if axis < 0:
        axis += x.ndim
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [x.reshape(outer, -1)]


@kernel("Reshape")
def reshape(inputs, attrs, out=None):
    x, shape = inputs[0], [int(d) for d in inputs[1]]
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


@kernel("Identity", "Dropout")
def identity(inputs, attrs, out=None):
    return [inputs[0]]
