"""``ChannelAffine``: an internal op (not ONNX) made by the toolkit's
``fuse_channel_affine`` pass from a per-channel affine chain (an inference
BatchNormalization not after a Conv, or ``Mul`` / ``Add`` / ``Sub`` / ``Div`` by
per-channel constants) and an optional following activation.

Inputs: ``x`` (``(N, C, ...)`` float32), ``scale`` and ``shift`` (``(C,)`` float32).
Output: ``act(x * scale[c] + shift[c])`` in one pass over memory, where the product
and the sum are each rounded to float32 (bit for bit numpy's ``x * s + b``).

Attributes: ``_activation``: absent / None, ``"Relu"``, ``"Clip"`` (with optional
float ``_activation_min`` / ``_activation_max``; an absent one does not clip) or
``"LeakyRelu"`` (``_activation_alpha``, default 0.01) - the same convention as the
Conv kernel's fused activations.

A big tensor's rows (one channel of one image each) are shared out across the run's
threads from compiled code; compiled runs call the native loop directly (``bind``).
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import ModelInvalidError
from ...._native import affine_kernels as _ak
from ..parallel import NATIVE_SPLIT_MIN_ELEMENTS, current_handle
from . import kernel

__all__ = ["ACTIVATIONS", "channel_affine"]

_OP = "ChannelAffine"

#: values ``attrs["_activation"]`` may take
ACTIVATIONS = (None, "Relu", "Clip", "LeakyRelu")


def _float_attr(attrs, name: str, default):
    value = attrs.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or np.isnan(value):
        raise ModelInvalidError(f"attribute {name} must be a float (not nan), got {value!r}", op=_OP)
    return float(value)


def _activation_args(attrs) -> tuple:
    """``(kind, lo, hi, alpha)`` for the native loop from ``attrs["_activation"]``."""
    name = attrs.get("_activation")
    if name not in ACTIVATIONS:
        raise ModelInvalidError(f"attribute _activation must be one of {ACTIVATIONS}, got {name!r}", op=_OP)
    if name is None:
        return (_ak.ACT_NONE, 0.0, 0.0, 0.0)
    if name == "Relu":
        return (_ak.ACT_CLIP, 0.0, float("inf"), 0.0)
    if name == "Clip":
        lo = _float_attr(attrs, "_activation_min", None)
        hi = _float_attr(attrs, "_activation_max", None)
        lo = -float("inf") if lo is None else lo
        hi = float("inf") if hi is None else hi
        return (_ak.ACT_CLIP, lo, hi, 0.0)
    alpha = _float_attr(attrs, "_activation_alpha", 0.01)
    if not np.isfinite(alpha):
        raise ModelInvalidError(f"attribute _activation_alpha must be finite, got {alpha!r}", op=_OP)
    return (_ak.ACT_LEAKY, 0.0, 0.0, alpha)


def _check_params(scale, shift, channels=None) -> None:
    """Raise ModelInvalidError unless ``scale`` / ``shift`` are float vectors of one length."""
    for name, p in (("scale", scale), ("shift", shift)):
        if p is None:
            continue
        p = np.asarray(p)
        if p.dtype.kind != "f" or p.ndim != 1:
            raise ModelInvalidError(f"input {name} must be a 1-D float tensor, got {p.dtype} of shape {p.shape}",
                                    op=_OP)
    if scale is not None and shift is not None and np.size(scale) != np.size(shift):
        raise ModelInvalidError(f"inputs scale and shift must have the same length, got {np.size(scale)} and "
                                f"{np.size(shift)}", op=_OP)


def _prepare(attrs, consts):
    attrs = dict(attrs)
    attrs["_act_args"] = _activation_args(attrs)
    consts = list(consts) + [None] * (3 - len(consts))
    _check_params(consts[1], consts[2])
    return attrs


def _vector(p: np.ndarray) -> np.ndarray:
    """``p`` as a C-contiguous float32 vector (a view when it already is one)."""
    return np.ascontiguousarray(p, dtype=np.float32).reshape(-1)


def _split(rows: int, inner: int) -> tuple:
    """``(pool, min_rows)`` of the native loop: the run's pool when every thread gets at least
    ``NATIVE_SPLIT_MIN_ELEMENTS`` elements, else None (the caller alone)."""
    if rows * inner < 2 * NATIVE_SPLIT_MIN_ELEMENTS:
        return None, 1
    return current_handle(), -(-NATIVE_SPLIT_MIN_ELEMENTS // inner)


@kernel(_OP, out=True, prepare=_prepare)
def channel_affine(inputs, attrs, out=None):
    """ChannelAffine: ``act(x * scale[c] + shift[c])`` with ``c`` the axis-1 index of ``x``.

    ``x`` has rank >= 2 (float32, channels at axis 1); ``scale`` and ``shift`` are
    length-``C`` float vectors.  Writes into ``out[0]`` when given (directly when it is
    C-contiguous float32, else through one temporary), else allocates.  ``x`` is never
    modified (unless it is ``out[0]`` itself).  Raises ValueError for mismatched shapes.
    """
    if len(inputs) != 3 or any(a is None for a in inputs):
        raise ValueError(f"ChannelAffine takes 3 inputs (x, scale, shift), got {len(inputs)}")
    x, scale, shift = inputs
    if x.ndim < 2 or x.dtype != np.float32:
        raise ValueError(f"ChannelAffine needs a float32 input of rank >= 2, got {x.dtype} of shape {x.shape}")
    c = x.shape[1]
    if scale.ndim != 1 or shift.ndim != 1 or scale.shape[0] != c or shift.shape[0] != c:
        raise ValueError(f"ChannelAffine: scale {scale.shape} and shift {shift.shape} must both be ({c},) "
                         f"for input shape {x.shape}")
    args = attrs.get("_act_args")
    if args is None:
        args = _activation_args(attrs)
    n = x.shape[0]
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    target = None
    if out is not None and len(out) > 0 and out[0] is not None:
        target = out[0]
        if target.shape != x.shape:
            raise ValueError(f"ChannelAffine: out has shape {target.shape}, expected {x.shape}")
    if target is not None and target.dtype == np.float32 and target.flags.c_contiguous and target.flags.writeable:
        work = target
    else:
        work = np.empty(x.shape, np.float32)
    xc = np.ascontiguousarray(x)
    _ak.channel_affine(xc.reshape(n, c, inner), _vector(scale), _vector(shift), work.reshape(n, c, inner), *args,
                       *_split(n * c, inner))
    if target is None:
        return [work]
    if work is not target:
        np.copyto(target, work, casting="unsafe")
    return [target]


def _bind(attrs, ins, out):
    """A compiled run's direct native call (``bind``, see ``ops/elementwise.py``) for float32
    inputs and a C-contiguous float32 output: the views are taken once; a run whose input is
    not C-contiguous goes through :func:`channel_affine`."""
    if (len(ins) != 3 or any(meta[1] != np.float32 for meta in ins) or len(ins[0][0]) < 2 or not out
            or out[0] is None or out[0].dtype != np.float32 or not out[0].flags.c_contiguous):
        return None
    shape = ins[0][0]
    n, c, inner = shape[0], shape[1], math.prod(shape[2:])
    if ins[1][0] != (c,) or ins[2][0] != (c,) or out[0].shape != shape:
        return None
    y3 = out[0].reshape(n, c, inner)
    args = attrs.get("_act_args") or _activation_args(attrs)

    def call(x, scale, shift):
        if not (x.flags.c_contiguous and scale.flags.c_contiguous and shift.flags.c_contiguous):
            return channel_affine([x, scale, shift], attrs, out)
        _ak.channel_affine(x.reshape(n, c, inner), scale, shift, y3, *args, *_split(n * c, inner))
        return out

    return call, ()


channel_affine.bind = _bind
