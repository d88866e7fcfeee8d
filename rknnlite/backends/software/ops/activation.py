"""Activation kernels (see the package docstring for the calling convention)."""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel("Softmax")
def softmax(inputs, attrs, out=None):
    x = inputs[0]
    axis = attrs.get("axis", -1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [e / e.sum(axis=axis, keepdims=True)]
