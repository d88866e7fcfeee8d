"""Resampling kernels: Resize (opsets 10-19+) and Upsample (opsets 7-9).

Resize is computed one axis at a time (it is separable): each resized axis gets a
plan of source indices and weights per output position, applied by the compiled
``rknnlite._native.resize_kernels`` loops (GIL released).  Nearest neighbour is a
pure gather of the raw elements (any dtype, exact); linear and cubic run in float32.
See the package docstring for the calling convention.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from ....errors import ModelInvalidError
from ...._native.resize_kernels import gather_axis, interp_axis, nearest_2d
from . import kernel

_MODES = ("nearest", "linear", "cubic")
_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_POLICIES = ("stretch", "not_larger", "not_smaller")
# Element widths the byte-level gathers handle, by itemsize.
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bad(op, message):
    return ModelInvalidError(message, op=op)


def _check_choice(attrs, op, name, choices, default):
    value = attrs.get(name, default)
    if value not in choices:
        raise _bad(op, f"attribute {name} must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def _prepare_resize(attrs, consts):
    op = "Resize"
    opset = attrs.get("_opset", 19)
    new = dict(attrs)
    if opset < 11:
        mode = _check_choice(attrs, op, "mode", ("nearest", "linear"), "nearest")
        new.update(_legacy=True, mode=mode)
        return new
    _check_choice(attrs, op, "mode", _MODES, "nearest")
    _check_choice(attrs, op, "coordinate_transformation_mode", _COORD_MODES, "half_pixel")
    _check_choice(attrs, op, "nearest_mode", _NEAREST_MODES, "round_prefer_floor")
    _check_choice(attrs, op, "keep_aspect_ratio_policy", _POLICIES, "stretch")
    _check_choice(attrs, op, "antialias", (0, 1), 0)
    _check_choice(attrs, op, "exclude_outside", (0, 1), 0)
    for name in ("cubic_coeff_a", "extrapolation_value"):
        if name in attrs and not isinstance(attrs[name], (int, float)):
            raise _bad(op, f"attribute {name} must be a float, got {attrs[name]!r}")
    axes = attrs.get("axes")
    if axes is not None:
        if not isinstance(axes, (list, tuple)) or not all(isinstance(a, int) for a in axes):
            raise _bad(op, f"attribute axes must be a list of ints, got {axes!r}")
        if len(set(axes)) != len(axes):
            raise _bad(op, f"attribute axes must not repeat an axis, got {list(axes)}")
    new["_legacy"] = False
    return new


def _prepare_upsample(attrs, consts):
    op = "Upsample"
    mode = _check_choice(attrs, op, "mode", ("nearest", "linear", "bilinear"), "nearest")
    new = dict(attrs)
    new["mode"] = "nearest" if mode == "nearest" else "linear"
    if "scales" in attrs:
        scales = attrs["scales"]
        if not isinstance(scales, (list, tuple)) or not all(isinstance(s, (int, float)) and s > 0 for s in scales):
            raise _bad(op, f"attribute scales must be a list of positive floats, got {scales!r}")
    return new


def _given(t):
    """An optional input counts as absent when omitted or empty (ONNX convention)."""
    return t is not None and np.asarray(t).size > 0


def _output_geometry(in_shape, attrs, roi, scales, sizes):
    """(per-axis scale, output shape, per-axis (start, end) roi) for opset >= 11 Resize."""
    r = len(in_shape)
    axes = attrs.get("axes")
    if axes is None:
        axes = list(range(r))
    else:
        for a in axes:
            if not -r <= a < r:
                raise ValueError(f"Resize: axis {a} out of range for rank {r}")
        axes = [a % r for a in axes]
    n = len(axes)
    if _given(scales) and _given(sizes):
        raise ValueError("Resize: only one of scales and sizes may be given")
    scale = [1.0] * r
    out_shape = list(in_shape)
    if _given(sizes):
        sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(sizes) != n:
            raise ValueError(f"Resize: sizes has {len(sizes)} values for {n} axes")
        if any(v < 0 for v in sizes):
            raise ValueError(f"Resize: sizes must be >= 0, got {sizes}")
        # exact ratios: see _source_coords
        ratios = [Fraction(sizes[i], in_shape[a]) if in_shape[a] else Fraction(1) for i, a in enumerate(axes)]
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for i, a in enumerate(axes):
                scale[a] = ratios[i]
                out_shape[a] = sizes[i]
        else:
            common = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                scale[a] = common
                # round half up, as the spec's round_int
                out_shape[a] = int(math.floor(common * in_shape[a] + 0.5))
    elif _given(scales):
        values = np.asarray(scales).reshape(-1)
        if values.size != n:
            raise ValueError(f"Resize: scales has {values.size} values for {n} axes")
        for i, a in enumerate(axes):
            s = float(values[i])
            if not s > 0:
                raise ValueError(f"Resize: scales must be > 0, got {values.tolist()}")
            scale[a] = s
            out_shape[a] = int(math.floor(s * in_shape[a]))
    else:
        raise ValueError("Resize: one of scales and sizes must be given")
    rois = [(0.0, 1.0)] * r
    if _given(roi) and attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        values = np.asarray(roi, np.float64).reshape(-1)
        if values.size != 2 * n:
            raise ValueError(f"Resize: roi has {values.size} values for {n} axes")
        for i, a in enumerate(axes):
            rois[a] = (float(values[i]), float(values[n + i]))
    return scale, out_shape, rois


def _source_coords(coord_mode, n_out, n_in, scale, roi):
    """Input coordinate (float64) of every output position along one axis, per ONNX.

    ``length_resized`` is ``n_in * scale`` (fractional when it comes from scales),
    as the ONNX formulas and reference results use it.  A scale that comes from ``sizes`` is
    the exact ratio (a :class:`~fractions.Fraction`): the asymmetric, half-pixel and
    align-corners coordinates are then one correctly rounded division each, so an output position that
    falls exactly on an input pixel lands on it.  Through the float ratio it could land a hair
    below (36 -> 44, asymmetric: 33 / (44 / 36) = 26.999999999999996), and a nearest ``floor``
    took the neighbouring pixel, where onnxruntime and PyTorch take the exact one.
    """
    y = np.arange(n_out, dtype=np.float64)
    if isinstance(scale, Fraction):
        p, q = scale.numerator, scale.denominator  # y / scale = y * q / p
        if coord_mode == "asymmetric":
            return y * q / p
        if coord_mode == "half_pixel" or (coord_mode == "pytorch_half_pixel" and n_in * scale > 1):
            return ((2 * y + 1) * q - p) / (2 * p)
        if coord_mode == "align_corners" and n_in * scale != 1:  # y (n_in - 1) / (length - 1)
            return y * ((n_in - 1) * q) / (n_in * p - q)
        scale = float(scale)
    length = n_in * scale
    if coord_mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if coord_mode == "asymmetric":
        return y / scale
    if coord_mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if length > 1 else np.zeros(n_out)
    if coord_mode == "align_corners":
        return y * (n_in - 1) / (length - 1) if length != 1 else np.zeros(n_out)
    if coord_mode == "half_pixel_symmetric":
        offset = (n_in / 2) * (1 - n_out / length)
        return offset + (y + 0.5) / scale - 0.5
    # tf_crop_and_resize
    start, end = roi
    if length > 1:
        return start * (n_in - 1) + y * (end - start) * (n_in - 1) / (length - 1)
    return np.full(n_out, 0.5 * (start + end) * (n_in - 1))


def _nearest_index(x, nearest_mode, scale):
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if nearest_mode == "floor":
        return np.floor(x)
    if nearest_mode == "ceil":
        return np.ceil(x)
    # "simple" (Resize-10 / Upsample): truncate when enlarging, round up when shrinking.
    return np.ceil(x) if scale < 1 else np.floor(x)


def _cubic(t, a):
    """Keys cubic convolution kernel with coefficient ``a`` at offsets ``t``."""
    t = np.abs(t)
    t2, t3 = t * t, t * t * t
    near = (a + 2) * t3 - (a + 3) * t2 + 1
    far = a * t3 - 5 * a * t2 + 8 * a * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


@functools.lru_cache(maxsize=256)
def _axis_plan(n_in, n_out, scale, coord_mode, roi, mode, nearest_mode, cubic_a, exclude_outside, antialias):
    """How one axis is resampled: ``(idx, weights, extrapolated)``, or None for identity.

    idx: int64 (n_out,) for nearest, else (n_out, taps) with weights float32 of the
    same shape; source indices are clamped into range (edge replication).
    extrapolated: bool (n_out,) for tf_crop_and_resize positions outside the input,
    or None.  Cached, and returned read-only.
    """
    x = _source_coords(coord_mode, n_out, n_in, scale, roi)
    scale = float(scale)
    if n_out == n_in and np.array_equal(x, np.arange(n_out)):
        return None
    extrap = None
    if coord_mode == "tf_crop_and_resize":
        extrap = (x < 0) | (x > n_in - 1)
        if not extrap.any():
            extrap = None
    if mode == "nearest":
        idx = np.clip(_nearest_index(x, nearest_mode, scale), 0, n_in - 1).astype(np.int64)
        idx.flags.writeable = False
        return idx, None, extrap
    base = np.floor(x)
    if mode == "linear":
        support = 1.0
    else:
        support = 2.0
    filt_scale = min(scale, 1.0) if antialias else 1.0
    if filt_scale < 1.0:
        half = int(math.ceil(support / filt_scale))
        offsets = np.arange(1 - half, half + 1)
    else:
        offsets = np.arange(1 - int(support), int(support) + 1)
    pos = base[:, None] + offsets[None, :]
    t = (pos - x[:, None]) * filt_scale
    if mode == "linear":
        w = np.clip(1.0 - np.abs(t), 0.0, None)
    else:
        w = _cubic(t, cubic_a)
    if filt_scale < 1.0:
        w = w / w.sum(axis=1, keepdims=True)
    if exclude_outside:
        w = np.where((pos < 0) | (pos > n_in - 1), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    idx = np.clip(pos, 0, n_in - 1).astype(np.int64)
    w = w.astype(np.float32)
    idx.flags.writeable = False
    w.flags.writeable = False
    if extrap is not None:
        extrap.flags.writeable = False
    return idx, w, extrap


def _words(a):
    """``a`` viewed as unsigned integers of the same width (for byte-exact gathers)."""
    return a.view(_WORDS[a.dtype.itemsize])


def _view3(a, axis):
    """C-contiguous ``a`` as (outer, a.shape[axis], inner)."""
    outer = int(np.prod(a.shape[:axis], dtype=np.int64))
    inner = int(np.prod(a.shape[axis + 1:], dtype=np.int64))
    return a.reshape(outer, a.shape[axis], inner)


def _target(out, shape, dtype):
    """(C-contiguous array the last pass writes, array to return)."""
    if out is not None and len(out) > 0 and out[0] is not None:
        dest = out[0]
        if dest.flags.c_contiguous and dest.dtype == dtype and dest.shape == tuple(shape):
            return dest, dest
        return np.empty(shape, dtype), dest
    y = np.empty(shape, dtype)
    return y, y


def _resample(x, out_shape, plans, extrapolation_value, out):
    """Apply per-axis plans (None = identity) to ``x``; returns the output array."""
    active = [a for a, p in enumerate(plans) if p is not None]
    nearest = all(plans[a][1] is None for a in active)  # one mode for every axis
    final, dest = _target(out, out_shape, x.dtype)
    if not active:
        np.copyto(final, x)
    elif nearest:
        src = np.ascontiguousarray(x)
        r = x.ndim
        if r >= 2 and set(active) <= {r - 2, r - 1} and len(active) == 2:
            nearest_2d(_words(src.reshape((-1,) + x.shape[-2:])), _words(final.reshape((-1,) + final.shape[-2:])),
                       plans[r - 2][0], plans[r - 1][0])
        else:
            cur = src
            shape = list(x.shape)
            # Shrinking axes first keeps the intermediate tensors small.
            order = sorted(active, key=lambda a: out_shape[a] / max(x.shape[a], 1))
            for i, a in enumerate(order):
                shape[a] = out_shape[a]
                nxt = final if i == len(order) - 1 else np.empty(shape, x.dtype)
                gather_axis(_words(_view3(cur, a)), _words(_view3(nxt, a)), plans[a][0])
                cur = nxt
    else:
        cur = np.ascontiguousarray(x, dtype=np.float32)
        work = final if final.dtype == np.float32 else np.empty(out_shape, np.float32)
        shape = list(x.shape)
        order = sorted(active, key=lambda a: out_shape[a] / max(x.shape[a], 1))
        for i, a in enumerate(order):
            shape[a] = out_shape[a]
            idx, w = plans[a][0], plans[a][1]
            nxt = work if i == len(order) - 1 else np.empty(shape, np.float32)
            interp_axis(_view3(cur, a), _view3(nxt, a), idx, w)
            cur = nxt
        if work is not final:
            info = np.iinfo(final.dtype) if final.dtype.kind in "iu" else None
            if info is not None:
                np.rint(work, out=work)
                np.clip(work, info.min, info.max, out=work)
            np.copyto(final, work, casting="unsafe")
    for a, plan in enumerate(plans):
        if plan is not None and plan[2] is not None:
            index = (slice(None),) * a + (plan[2],)
            final[index] = extrapolation_value
    if final is not dest:
        np.copyto(dest, final)
    return dest


def _resize_legacy(x, scales, mode, out):
    """Resize-10 / Upsample: asymmetric coordinates, 'simple' nearest rounding."""
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    if len(scales) != x.ndim:
        raise ValueError(f"scales has {len(scales)} values for a rank-{x.ndim} input")
    if any(not s > 0 for s in scales):
        raise ValueError(f"scales must be > 0, got {scales}")
    out_shape = [int(math.floor(s * n)) for s, n in zip(scales, x.shape)]
    if 0 in out_shape:
        return _target(out, out_shape, x.dtype)[1]
    plans = [_axis_plan(n, m, s, "asymmetric", (0.0, 1.0), mode, "simple", -0.75, 0, 0)
             for n, m, s in zip(x.shape, out_shape, scales)]
    return _resample(x, out_shape, plans, 0.0, out)


@kernel("Resize", out=True, prepare=_prepare_resize)
def resize(inputs, attrs, out=None):
    """ONNX Resize: nearest / (n-)linear / (n-)cubic resampling of any axes.

    Inputs ``X, roi, scales, sizes`` (opset >= 11; empty tensors count as absent) or
    ``X, scales`` (opset 10).  Supports every coordinate_transformation_mode and
    nearest_mode, cubic_coeff_a, exclude_outside, extrapolation_value, antialias,
    axes and keep_aspect_ratio_policy.  Output dtype is X's (nearest copies elements
    exactly; linear/cubic compute in float32, integers are rounded and saturated).
    Writes into ``out`` when given.
    """
    x = inputs[0]
    if attrs.get("_legacy", attrs.get("_opset", 19) < 11):
        return [_resize_legacy(x, inputs[1], attrs.get("mode", "nearest"), out)]
    roi = inputs[1] if len(inputs) > 1 else None
    scales = inputs[2] if len(inputs) > 2 else None
    sizes = inputs[3] if len(inputs) > 3 else None
    scale, out_shape, rois = _output_geometry(x.shape, attrs, roi, scales, sizes)
    if 0 in out_shape:
        return [_target(out, out_shape, x.dtype)[1]]
    if x.size == 0:
        raise ValueError(f"Resize: cannot resize an empty tensor {x.shape} to {tuple(out_shape)}")
    mode = attrs.get("mode", "nearest")
    coord_mode = attrs.get("coordinate_transformation_mode", "half_pixel")
    plans = [_axis_plan(x.shape[a], out_shape[a], scale[a], coord_mode, rois[a], mode,
                        attrs.get("nearest_mode", "round_prefer_floor"), float(attrs.get("cubic_coeff_a", -0.75)),
                        int(attrs.get("exclude_outside", 0)), int(attrs.get("antialias", 0)))
             for a in range(x.ndim)]
    return [_resample(x, out_shape, plans, float(attrs.get("extrapolation_value", 0.0)), out)]


@kernel("Upsample", out=True, prepare=_prepare_upsample)
def upsample(inputs, attrs, out=None):
    """ONNX Upsample (opsets 7-9): ``scales`` attribute (7) or input (9), nearest or linear.

    Output dimension ``floor(in * scale)``; coordinates ``out / scale`` (asymmetric);
    nearest truncates.  Output dtype is X's.  Writes into ``out`` when given.
    """
    x = inputs[0]
    scales = inputs[1] if len(inputs) > 1 and inputs[1] is not None else attrs.get("scales")
    if scales is None:
        raise ModelInvalidError("Upsample needs scales (attribute or input)", op="Upsample")
    return [_resize_legacy(x, scales, attrs.get("mode", "nearest"), out)]
