"""Activation kernels: Relu family, Clip, sigmoid/tanh family, GELU, Softmax and LogSoftmax.

ONNX semantics, package calling convention (see ``ops/__init__.py``).  Every kernel
is registered with ``out=True`` and computes in the output buffer through ufunc
``out=`` chains (allocating that buffer itself when ``out`` is None, so both paths
run the same code).  Piecewise functions whose two branches cannot be merged by a
max/min use a bool mask (a quarter of the tensor's size) as their only temporary;
Softmax/LogSoftmax only allocate the reduced (one value per row) temporaries.
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import ModelInvalidError
from ...._native.elementwise_kernels import softmax_rows
from . import kernel
from .elementwise import check_attr, check_float, dest, gelu_into, quiet

# --------------------------------------------------------------------------- Relu family


@kernel("Relu", out=True)
def relu(inputs, attrs, out=None):
    """Relu: ``max(x, 0)`` (nan stays nan; integer types allowed)."""
    x = inputs[0]
    o = dest(out, x.shape, x.dtype)
    np.maximum(x, 0, out=o)
    return [o]


def _leaky_prepare(attrs, consts):
    attrs = dict(attrs)
    attrs["alpha"] = check_float("LeakyRelu", attrs, "alpha", 0.01)
    return attrs


@kernel("LeakyRelu", out=True, prepare=_leaky_prepare)
def leaky_relu(inputs, attrs, out=None):
    """LeakyRelu: ``x`` for ``x >= 0`` else ``alpha * x`` (alpha default 0.01).

    ``max(x, alpha*x)`` when ``alpha <= 1`` and ``min(x, alpha*x)`` otherwise pick
    exactly the right branch, so no mask is needed.
    """
    x = inputs[0]
    alpha = float(attrs.get("alpha", 0.01))
    o = dest(out, x.shape, x.dtype)
    with quiet():
        np.multiply(x, alpha, out=o, casting="unsafe")
        if alpha <= 1.0:
            np.maximum(x, o, out=o)
        else:
            np.minimum(x, o, out=o)
    return [o]


@kernel("PRelu", out=True)
def prelu(inputs, attrs, out=None):
    """PRelu: ``x`` for ``x >= 0`` else ``slope * x``; ``slope`` broadcasts to ``x``'s shape.

    Uses a bool mask of ``x < 0`` as its only temporary.
    """
    x, slope = inputs[0], inputs[1]
    o = dest(out, x.shape, x.dtype)
    np.copyto(o, x)
    with quiet():
        neg = np.less(x, 0)
        np.multiply(x, slope, out=o, where=neg, casting="unsafe")
    return [o]


def _clip_bound(inputs, attrs, index: int, name: str):
    if len(inputs) > index and inputs[index] is not None:
        b = inputs[index]
        if b.size == 0:
            return None
        if b.size != 1:
            raise ModelInvalidError(f"input {name!r} must be a scalar, got shape {list(b.shape)}", op="Clip")
        return b.reshape(())
    if name in attrs:  # opset < 11: float attributes
        return float(attrs[name])
    return None


@kernel("Clip", out=True)
def clip(inputs, attrs, out=None):
    """Clip: limit ``x`` to ``[min, max]``: ``min(max(x, min), max)``.

    ``min``/``max`` are optional scalar inputs (opset >= 11) or float attributes
    (older opsets); a missing bound does not clip.  When ``min > max`` every value
    becomes ``max``, as ONNX specifies.  nan in ``x`` stays nan.
    """
    x = inputs[0]
    lo = _clip_bound(inputs, attrs, 1, "min")
    hi = _clip_bound(inputs, attrs, 2, "max")
    o = dest(out, x.shape, x.dtype)
    if lo is not None:
        np.maximum(x, lo, out=o, casting="unsafe")
    else:
        np.copyto(o, x)
    if hi is not None:
        np.minimum(o, hi, out=o, casting="unsafe")
    return [o]


# --------------------------------------------------------------------------- smooth activations


@kernel("Sigmoid", out=True)
def sigmoid(inputs, attrs, out=None):
    """Sigmoid: ``1 / (1 + exp(-x))`` (exp overflow for very negative x gives the exact 0)."""
    x = inputs[0]
    o = dest(out, x.shape, x.dtype)
    with quiet():
        np.negative(x, out=o)
        np.exp(o, out=o)
        np.add(o, 1, out=o)
        np.reciprocal(o, out=o)
    return [o]


@kernel("Tanh", out=True)
def tanh(inputs, attrs, out=None):
    """Tanh: hyperbolic tangent element-wise."""
    x = inputs[0]
    o = dest(out, x.shape, x.dtype)
    with quiet():
        np.tanh(x, out=o)
    return [o]


def _hard_sigmoid_prepare(attrs, consts):
    attrs = dict(attrs)
    attrs["alpha"] = check_float("HardSigmoid", attrs, "alpha", 0.2)
    attrs["beta"] = check_float("HardSigmoid", attrs, "beta", 0.5)
    return attrs


def _hard_sigmoid_into(x, o, alpha: float, beta: float):
    with quiet():
        np.multiply(x, alpha, out=o)
        np.add(o, beta, out=o)
        np.clip(o, 0.0, 1.0, out=o)
    return o


@kernel("HardSigmoid", out=True, prepare=_hard_sigmoid_prepare)
def hard_sigmoid(inputs, attrs, out=None):
    """HardSigmoid: ``max(0, min(1, alpha*x + beta))`` (alpha 0.2, beta 0.5 by default)."""
    x = inputs[0]
    o = dest(out, x.shape, x.dtype)
    _hard_sigmoid_into(x, o, float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)))
    return [o]


@kernel("HardSwish", out=True)
def hard_swish(inputs, attrs, out=None):
    """HardSwish: ``x * max(0, min(1, x/6 + 0.5))``."""
    x = inputs[0]
    o = dest(out, x.shape, x.dtype)
    _hard_sigmoid_into(x, o, 1.0 / 6.0, 0.5)
    with quiet():
        np.multiply(o, x, out=o)
    return [o]


def _elu_prepare(attrs, consts):
    attrs = dict(attrs)
    attrs["alpha"] = check_float("Elu", attrs, "alpha", 1.0)
    return attrs


@kernel("Elu", out=True, prepare=_elu_prepare)
def elu(inputs, attrs, out=None):
    """Elu: ``x`` for ``x > 0`` else ``alpha * (exp(x) - 1)`` (alpha default 1).

    Computed as ``alpha * expm1(min(x, 0))`` (0 where x > 0), then merged with ``x``:
    by ``max`` when ``0 <= alpha <= 1`` (exact, since ``alpha*expm1(x) >= x`` there
    for x <= 0), else through a mask of ``x > 0``.
    """
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    o = dest(out, x.shape, x.dtype)
    with quiet():
        np.minimum(x, 0, out=o)
        np.expm1(o, out=o)
        np.multiply(o, alpha, out=o)
        if 0.0 <= alpha <= 1.0:
            np.maximum(o, x, out=o)
        else:
            np.copyto(o, x, where=np.greater(x, 0))
    return [o]


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


def _selu_prepare(attrs, consts):
    attrs = dict(attrs)
    attrs["alpha"] = check_float("Selu", attrs, "alpha", _SELU_ALPHA)
    attrs["gamma"] = check_float("Selu", attrs, "gamma", _SELU_GAMMA)
    return attrs


@kernel("Selu", out=True, prepare=_selu_prepare)
def selu(inputs, attrs, out=None):
    """Selu: ``gamma * x`` for ``x > 0`` else ``gamma * alpha * (exp(x) - 1)``.

    Defaults alpha ~1.6733, gamma ~1.0507 (ONNX's float32 constants).  Uses a mask of ``x > 0``.
    """
    x = inputs[0]
    alpha = float(attrs.get("alpha", _SELU_ALPHA))
    gamma = float(attrs.get("gamma", _SELU_GAMMA))
    o = dest(out, x.shape, x.dtype)
    with quiet():
        np.minimum(x, 0, out=o)
        np.expm1(o, out=o)
        np.multiply(o, alpha * gamma, out=o)
        np.multiply(x, gamma, out=o, where=np.greater(x, 0))
    return [o]


@kernel("Softplus", out=True)
def softplus(inputs, attrs, out=None):
    """Softplus: ``log(1 + exp(x))``, evaluated stably as ``logaddexp(x, 0)`` (no overflow)."""
    x = inputs[0]
    o = dest(out, x.shape, x.dtype)
    with quiet():
        np.logaddexp(x, 0, out=o, casting="unsafe")
    return [o]


def _gelu_prepare(attrs, consts):
    attrs = dict(attrs)
    attrs["approximate"] = check_attr("Gelu", attrs, "approximate", {"none", "tanh"}, "none")
    return attrs


_SQRT_2_OVER_PI = 0.7978845608028654


@kernel("Gelu", out=True, prepare=_gelu_prepare)
def gelu(inputs, attrs, out=None):
    """Gelu (opset 20): ``0.5 * x * (1 + erf(x / sqrt(2)))``, or with ``approximate="tanh"``
    ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``.

    The exact form uses the compiled erf loop (see ``elementwise.gelu_into``); the tanh
    form is a numpy ufunc chain in the output buffer.  Both are written so that
    negative ``x`` suffers no cancellation.
    """
    x = inputs[0]
    approximate = attrs.get("approximate", "none")
    o = dest(out, x.shape, x.dtype)
    if o.size == 0:
        return [o]
    if approximate == "tanh":
        # x / (1 + exp(-2u)), u = sqrt(2/pi) * (x + 0.044715 x^3): 0.5 * (1 + tanh(u)) is the
        # logistic of 2u, and this form has no cancellation for negative x.
        with quiet():
            np.multiply(x, x, out=o)
            np.multiply(o, 0.044715, out=o)
            np.add(o, 1.0, out=o)
            np.multiply(o, x, out=o)
            np.multiply(o, -2.0 * _SQRT_2_OVER_PI, out=o)
            np.exp(o, out=o)
            np.add(o, 1.0, out=o)
            np.divide(x, o, out=o)
    else:
        gelu_into(x, o)
    return [o]


# --------------------------------------------------------------------------- Softmax family


def _softmax_axes(op: str, nd: int, attrs) -> tuple:
    """The axes one softmax normalises over.

    Opset >= 13: the single ``axis`` (default -1).  Older opsets: the input is coerced
    to 2-D at ``axis`` (default 1), i.e. normalised over every axis from ``axis`` on.
    """
    opset = attrs.get("_opset", 13)
    legacy = opset < 13
    axis = int(attrs.get("axis", 1 if legacy else -1))
    if legacy:
        if nd == 0:
            return ()
        a = axis + nd if axis < 0 else axis
        if not 0 <= a <= nd:
            raise ModelInvalidError(f"attribute 'axis' must be in [{-nd}, {nd}], got {axis}", op=op)
        return tuple(range(a, nd))
    if nd == 0:
        raise ModelInvalidError("input must have rank >= 1 (got a scalar)", op=op)
    a = axis + nd if axis < 0 else axis
    if not 0 <= a < nd:
        raise ModelInvalidError(f"attribute 'axis' must be in [{-nd}, {nd - 1}], got {axis}", op=op)
    return (a,)


#: A float32 softmax of at most this many elements over trailing axes runs in one native call
#: (libm ``expf``, ~7 ns per element) instead of five numpy calls: in a model's run their code
#: is cold after the convolutions, and they cost 50-80 us on a classifier's 1000 scores
#: (squeezenet, inception_v2; measured on a Zen 5 EPYC), where the native loop takes ~10.
_NATIVE_SOFTMAX_MAX = 4096


def _row_length(shape: tuple, axes: tuple) -> int:
    """The row length of a native softmax over ``axes`` of ``shape`` (see
    :data:`_NATIVE_SOFTMAX_MAX`), or 0 where it does not apply: axes not trailing (only
    size-1 axes may follow them), or too many elements."""
    if (not axes or math.prod(shape) > _NATIVE_SOFTMAX_MAX or any(d != 1 for d in shape[axes[-1] + 1:])
            or axes != tuple(range(axes[0], axes[-1] + 1))):
        return 0
    return math.prod(shape[axes[0]:axes[-1] + 1])  # not np.prod: numpy's code is cold in a run


def _softmax_rows(x: np.ndarray, o: np.ndarray, axes: tuple) -> bool:
    """Softmax of ``x`` into ``o`` in one native call when both are float32 and C-contiguous and
    :func:`_row_length` allows it; returns whether it ran."""
    n = _row_length(x.shape, axes)
    if not n or x.dtype != np.float32 or o.dtype != np.float32 or not x.flags.c_contiguous \
            or not o.flags.c_contiguous:
        return False
    softmax_rows(x.reshape(-1, n), o.reshape(-1, n))
    return True


def _softmax_prepare(op):
    def prepare(attrs, consts):
        axis = attrs.get("axis", 0)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise ModelInvalidError(f"attribute 'axis' must be an int, got {axis!r}", op=op)
        return attrs

    return prepare


@kernel("Softmax", out=True, prepare=_softmax_prepare("Softmax"))
def softmax(inputs, attrs, out=None):
    """Softmax: ``exp(x - max) / sum(exp(x - max))`` over the axis (see ``_softmax_axes``).

    Works in the output buffer; only the per-row max and sum are allocated.  A small float32
    tensor normalised over its trailing axes takes one native call (``_NATIVE_SOFTMAX_MAX``;
    the same values within an ulp or two: libm's exp, the sum in double).
    """
    x = inputs[0]
    axes = _softmax_axes("Softmax", x.ndim, attrs)
    o = dest(out, x.shape, x.dtype)
    if o.size == 0:
        return [o]
    if not axes:  # a 0-d tensor coerced to 2-D: a single element
        o[...] = 1.0
        return [o]
    if _softmax_rows(x, o, axes):
        return [o]
    with quiet():
        m = np.max(x, axis=axes, keepdims=True)
        np.subtract(x, m, out=o)
        np.exp(o, out=o)
        s = np.sum(o, axis=axes, keepdims=True)
        np.divide(o, s, out=o)
    return [o]


def _bind_softmax(attrs, ins, out):
    """A compiled run's direct native call of a small float32 softmax (``bind``, see
    ``ops/elementwise.py``): the output's rows are taken once; a run whose input is not
    C-contiguous goes through :func:`softmax`."""
    if len(ins) != 1 or ins[0][1] != np.float32 or not out or out[0] is None or out[0].dtype != np.float32 \
            or not out[0].flags.c_contiguous:
        return None
    shape = ins[0][0]
    n = _row_length(shape, _softmax_axes("Softmax", len(shape), attrs))
    if not n:
        return None
    rows = out[0].reshape(-1, n)

    def call(x):
        if x.flags.c_contiguous:
            softmax_rows(x.reshape(-1, n), rows)
        else:
            softmax([x], attrs, out)

    return call, ()


softmax.bind = _bind_softmax


@kernel("LogSoftmax", out=True, prepare=_softmax_prepare("LogSoftmax"))
def log_softmax(inputs, attrs, out=None):
    """LogSoftmax: ``(x - max) - log(sum(exp(x - max)))`` over the axis (see ``_softmax_axes``).

    The exponentials are summed in the output buffer, which is then rewritten with the
    result; only the per-row max and log-sum are allocated.
    """
    x = inputs[0]
    axes = _softmax_axes("LogSoftmax", x.ndim, attrs)
    o = dest(out, x.shape, x.dtype)
    if o.size == 0:
        return [o]
    if not axes:
        o[...] = 0.0
        return [o]
    with quiet():
        m = np.max(x, axis=axes, keepdims=True)
        np.subtract(x, m, out=o)
        np.exp(o, out=o)
        s = np.sum(o, axis=axes, keepdims=True)
        np.log(s, out=s)
        np.subtract(x, m, out=o)
        np.subtract(o, s, out=o)
    return [o]
