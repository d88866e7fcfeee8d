"""Element-wise kernels (ONNX semantics, numpy broadcasting)."""

from __future__ import annotations

import numpy as np

from . import kernel


@kernel("Relu")
def relu(inputs, attrs, out=None):
    return [np.maximum(inputs[0], 0)]


@kernel("Sigmoid")
def sigmoid(inputs, attrs, out=None):
    x = inputs[0]
    return [(1.0 / (1.0 + np.exp(-x))).astype(x.dtype, copy=False)]


@kernel("Add")
def add(inputs, attrs, out=None):
    return [inputs[0] + inputs[1]]


@kernel("Sub")
def sub(inputs, attrs, out=None):
    return [inputs[0] - inputs[1]]


@kernel("Mul")
def mul(inputs, attrs, out=None):
    return [inputs[0] * inputs[1]]


@kernel("Div")
def div(inputs, attrs, out=None):
    return [inputs[0] / inputs[1]]
