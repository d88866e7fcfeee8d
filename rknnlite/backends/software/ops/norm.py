"""Normalisation kernels: BatchNormalization (inference), LayerNormalization, InstanceNormalization.

All work in float32 on ONNX layouts (channels at axis 1 for Batch/Instance norm) and
write into the caller's output when given.  See the package docstring for the
calling convention.
"""

from __future__ import annotations

import numpy as np

from ....errors import ModelInvalidError
from . import kernel


def _target(out, i, shape):
    """(float32 array the kernel writes, array to return): ``out[i]`` when usable."""
    if out is not None and len(out) > i and out[i] is not None:
        dest = out[i]
        if dest.flags.c_contiguous and dest.dtype == np.float32 and dest.shape == tuple(shape):
            return dest, dest
        return np.empty(shape, np.float32), dest
    y = np.empty(shape, np.float32)
    return y, y


def _finish(work, dest):
    if work is not dest:
        np.copyto(dest, work)
    return dest


def _check_epsilon(attrs, op):
    eps = attrs.get("epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or eps < 0:
        raise ModelInvalidError(f"attribute epsilon must be a float >= 0, got {eps!r}", op=op)


def _bn_affine(scale, bias, mean, var, eps):
    """Fold inference BatchNormalization into ``y = x * a + b`` (float64 fold, float32 result)."""
    a = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    b = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * a
    return a.astype(np.float32), b.astype(np.float32)


def _prepare_batchnorm(attrs, consts):
    op = "BatchNormalization"
    if attrs.get("training_mode", 0):
        raise ModelInvalidError("attribute training_mode=1 (training) is not supported; "
                                "only inference (training_mode=0) is", op=op)
    if attrs.get("spatial", 1) not in (0, 1):
        raise ModelInvalidError(f"attribute spatial must be 0 or 1, got {attrs.get('spatial')!r}", op=op)
    _check_epsilon(attrs, op)
    new = dict(attrs)
    new.pop("_bn_ab", None)
    params = list(consts[1:5]) if consts is not None else []
    if len(params) == 4 and all(p is not None for p in params):
        new["_bn_ab"] = _bn_affine(*params, attrs.get("epsilon", 1e-5))
    return new


@kernel("BatchNormalization", out=True, prepare=_prepare_batchnorm)
def batch_normalization(inputs, attrs, out=None):
    """Inference BatchNormalization: ``(x - mean) / sqrt(var + eps) * scale + B``.

    X: (N, C, ...) float32; scale/B/mean/var: (C,) (or (C, D1, ...) for the old
    non-spatial form).  The statistics are folded into a per-channel multiply-add
    (once, in ``prepare``, when they are constants).  Writes into ``out`` when given.
    ``training_mode=1`` is rejected (ModelInvalidError).
    """
    if attrs.get("training_mode", 0):
        raise ModelInvalidError("training_mode=1 is not supported", op="BatchNormalization")
    x = inputs[0]
    ab = attrs.get("_bn_ab")
    if ab is None:
        ab = _bn_affine(*inputs[1:5], attrs.get("epsilon", 1e-5))
    a, b = ab
    if a.ndim == 1 and x.ndim > 1:
        shape = (a.shape[0],) + (1,) * (x.ndim - 2)
        a, b = a.reshape(shape), b.reshape(shape)
    y, dest = _target(out, 0, x.shape)
    np.multiply(x, a, out=y)
    np.add(y, b, out=y)
    return [_finish(y, dest)]


def _prepare_layernorm(attrs, consts):
    op = "LayerNormalization"
    _check_epsilon(attrs, op)
    if not isinstance(attrs.get("axis", -1), int):
        raise ModelInvalidError(f"attribute axis must be an int, got {attrs.get('axis')!r}", op=op)
    stash = attrs.get("stash_type", 1)
    # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16.
    if stash not in (1, 10, 11, 16):
        raise ModelInvalidError(f"attribute stash_type must be a float type (1, 10, 11 or 16), got {stash!r}",
                                op=op)
    return attrs


def _standardize(x2, y2, eps, wide):
    """Rows of ``x2`` (M, K) -> zero mean / unit variance into ``y2``; returns (mean, inv_std) (M, 1)."""
    if wide:
        xd = x2.astype(np.float64)
        mean = xd.mean(axis=1, keepdims=True)
        xd -= mean
        inv = 1.0 / np.sqrt(np.einsum("ij,ij->i", xd, xd)[:, None] / max(x2.shape[1], 1) + eps)
        np.multiply(xd, inv, out=y2, casting="same_kind")
        return mean.astype(np.float32), inv.astype(np.float32)
    mean = x2.mean(axis=1, keepdims=True, dtype=np.float32)
    np.subtract(x2, mean, out=y2)
    # Two-pass variance (of the centred values) keeps precision when |mean| >> std.
    var = np.einsum("ij,ij->i", y2, y2)[:, None] / np.float32(max(x2.shape[1], 1))
    inv = (1.0 / np.sqrt(var + np.float32(eps))).astype(np.float32)
    np.multiply(y2, inv, out=y2)
    return mean, inv


@kernel("LayerNormalization", out=True, prepare=_prepare_layernorm)
def layer_normalization(inputs, attrs, out=None):
    """ONNX LayerNormalization over axes ``[axis, rank)``, then ``* Scale + B``.

    Scale and B broadcast unidirectionally to X.  Outputs ``[Y, Mean, InvStdDev]``
    (the last two shaped ``X.shape[:axis] + (1,) * (rank - axis)``), all float32.
    ``stash_type=11`` computes the statistics in float64, else in float32.  With
    ``attrs["_half_input"]`` (set by the float16 executor) X is first rounded to float16 (a
    copy).  Writes into ``out`` when given; allocates only per-row statistics otherwise.
    """
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if attrs.get("_half_input"):  # float16 mode, a float32 input (see backends.software.float16_rules)
        x = x.astype(np.float16).astype(np.float32)
    r = x.ndim
    axis = attrs.get("axis", -1)
    if not -r <= axis < r:
        raise ValueError(f"LayerNormalization: axis {axis} out of range for rank {r}")
    axis %= r
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    y, dest = _target(out, 0, x.shape)
    y2 = y.reshape(outer, inner)
    mean, inv = _standardize(x.reshape(outer, inner), y2, attrs.get("epsilon", 1e-5),
                             attrs.get("stash_type", 1) == 11)
    for name, t, ufunc in (("Scale", scale, np.multiply), ("B", bias, np.add)):
        if t is None:
            continue
        try:
            ufunc(y, t, out=y)
        except ValueError:
            raise ValueError(f"LayerNormalization: {name} of shape {list(np.shape(t))} does not broadcast to X's "
                             f"shape {list(x.shape)} (normalized axes {list(x.shape[axis:])})") from None
    stat_shape = x.shape[:axis] + (1,) * (r - axis)
    results = [_finish(y, dest)]
    for i, stat in ((1, mean), (2, inv)):
        s, sdest = _target(out, i, stat_shape)
        np.copyto(s, stat.reshape(stat_shape))
        results.append(_finish(s, sdest))
    return results


def _prepare_instancenorm(attrs, consts):
    _check_epsilon(attrs, "InstanceNormalization")
    return attrs


@kernel("InstanceNormalization", out=True, prepare=_prepare_instancenorm)
def instance_normalization(inputs, attrs, out=None):
    """ONNX InstanceNormalization: per (n, c) standardisation over the spatial axes, then
    ``* scale[c] + B[c]``.  X: (N, C, ...) float32.  Writes into ``out`` when given.
    """
    x, scale, bias = inputs[0], inputs[1], inputs[2]
    if x.ndim < 2:
        raise ValueError(f"InstanceNormalization needs an (N, C, ...) input, got rank {x.ndim}")
    n, c = x.shape[:2]
    inner = int(np.prod(x.shape[2:], dtype=np.int64))
    y, dest = _target(out, 0, x.shape)
    y3 = y.reshape(n, c, inner)
    _standardize(x.reshape(n * c, inner), y.reshape(n * c, inner), attrs.get("epsilon", 1e-5), False)
    np.multiply(y3, np.asarray(scale, np.float32).reshape(1, c, 1), out=y3)
    np.add(y3, np.asarray(bias, np.float32).reshape(1, c, 1), out=y3)
    return [_finish(y, dest)]


def _prepare_lrn(attrs, consts):
    size = attrs.get("size")
    if not isinstance(size, int) or size < 1:
        raise ModelInvalidError(f"LRN: attribute 'size' must be a positive integer, got {size!r}", op="LRN")
    return attrs


@kernel("LRN", out=True, prepare=_prepare_lrn)
def lrn(inputs, attrs, out=None):
    """Local response normalisation across channels (axis 1):
    ``y = x / (bias + alpha / size * sum of x**2 over the channel window) ** beta``,
    the window spanning ``floor((size-1)/2)`` channels below and ``ceil((size-1)/2)`` above."""
    x = inputs[0]
    size = attrs["size"]
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = np.square(x, dtype=np.float32)
    # prefix sums over channels give each window's sum in one subtraction
    prefix = np.zeros((x.shape[0], x.shape[1] + 1) + x.shape[2:], np.float32)
    np.cumsum(squares, axis=1, out=prefix[:, 1:])
    c = np.arange(x.shape[1])
    hi, lo = np.minimum(c + above + 1, x.shape[1]), np.maximum(c - below, 0)
    window = prefix[:, hi] - prefix[:, lo]
    y, dest = _target(out, 0, x.shape)
    np.multiply(window, alpha / size, out=window)
    np.add(window, bias, out=window)
    np.power(window, beta, out=window)
    np.divide(x, window, out=y)
    return [_finish(y, dest)]
