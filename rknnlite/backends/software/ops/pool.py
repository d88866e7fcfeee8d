"""Pooling kernels: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, LpNormalization.

Layouts are ONNX's: ``(N, C, D1, ..., Dk)``.  MaxPool and AveragePool with one to
three spatial axes, and the global pools of 4-D and wider float32 tensors, run in the
compiled ``rknnlite._native.pool_kernels`` loops (GIL released, separable: a vertical
pass over the window's rows, then a horizontal pass over a padded scratch row),
written straight into the caller's output when it is C-contiguous.  Big tensors are
split by planes (batch x channel) across the run's native worker threads (compiled
ranges, no GIL hand-off); a plane's result does not depend on the split.  MaxPool's
optional Indices output takes a slower loop.  See the package docstring for the calling
convention.
"""

from __future__ import annotations

import itertools

import numpy as np

from ....errors import ModelInvalidError
from ...._native import pool_kernels
from ...._native.pool_kernels import avg_pool, max_pool, max_pool_indices
from ..isa import select_isa
from ..parallel import NATIVE_SPLIT_MIN_ELEMENTS, current_handle, current_threads
from . import kernel
from .attributes import int_list

#: the SIMD level of the float32 passes (``RKNNLITE_ISA``, see ``..isa``)
_ISA = select_isa(pool_kernels.limit_isa, pool_kernels.isa_level())

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_MAX_DTYPES = (np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64)

#: Elements (input or output, whichever is more) per thread below which a pooling call
#: is not split across threads (its planes are shared out as native ranges)
_PARALLEL_MIN_ELEMENTS = NATIVE_SPLIT_MIN_ELEMENTS

#: False makes the native loops skip their shape-specialised variants (tests compare both).
_SPECIALISE = True


def _check_flag(attrs, name, op):
    value = attrs.get(name, 0)
    if value not in (0, 1):
        raise ModelInvalidError(f"attribute {name} must be 0 or 1, got {value!r}", op=op)


def _prepare_pool(op):
    """Build the ``prepare`` hook of ``op``: validate attributes once, normalise defaults."""

    def prepare(attrs, consts):
        ks = attrs.get("kernel_shape")
        if not ks or not isinstance(ks, (list, tuple)):
            raise ModelInvalidError("attribute kernel_shape is required (a list of ints)", op=op)
        nd = len(ks)
        if nd > 3:
            raise ModelInvalidError(f"kernel_shape {list(ks)} has {nd} spatial axes; 1 to 3 are supported",
                                    op=op)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if auto_pad not in _AUTO_PADS:
            raise ModelInvalidError(f"attribute auto_pad must be one of {', '.join(_AUTO_PADS)}, "
                                    f"got {auto_pad!r}", op=op)
        if auto_pad != "NOTSET" and any(attrs.get("pads") or []):
            raise ModelInvalidError(f"attributes pads and auto_pad={auto_pad} cannot be used together", op=op)
        new = dict(attrs)
        new["kernel_shape"] = int_list(attrs, "kernel_shape", op, nd, 1, 1)
        new["strides"] = int_list(attrs, "strides", op, nd, 1, 1)
        new["dilations"] = int_list(attrs, "dilations", op, nd, 1, 1)
        new["pads"] = int_list(attrs, "pads", op, 2 * nd, 0, 0)
        new["auto_pad"] = auto_pad
        _check_flag(attrs, "ceil_mode", op)
        if op == "MaxPool":
            _check_flag(attrs, "storage_order", op)
        else:
            _check_flag(attrs, "count_include_pad", op)
        new["_pool_plans"] = {}
        return new

    return prepare


def _geometry(attrs, in_sp):
    """Per spatial axis: (kernel, stride, dilation, pad_begin, pad_end, output size).

    Follows ONNX: explicit pads with floor/ceil (a ceil-mode window may not start in
    the end padding), or auto_pad SAME_UPPER/SAME_LOWER (output ``ceil(in/stride)``,
    odd total padding at the end/beginning) or VALID (no padding).
    """
    ks, ss, ds = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
    nd = len(ks)
    pads = attrs["pads"]
    auto_pad = attrs["auto_pad"]
    ceil_mode = attrs.get("ceil_mode", 0)
    geo = []
    for a in range(nd):
        size, k, s, d = in_sp[a], ks[a], ss[a], ds[a]
        extent = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            n_out = -(-size // s)
            total = max(0, (n_out - 1) * s + extent - size)
            small = total // 2
            pb, pe = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        else:
            pb, pe = (0, 0) if auto_pad == "VALID" else (pads[a], pads[nd + a])
            span = size + pb + pe - extent
            if span < 0:
                n_out = 0
            elif ceil_mode:
                n_out = -(-span // s) + 1
                if (n_out - 1) * s >= size + pb:
                    n_out -= 1
            else:
                n_out = span // s + 1
        geo.append((k, s, d, pb, pe, n_out))
    return geo


def _tap_range(n_out, k, s, d, pb, lo_bound, hi_bound):
    """[lo, hi) of the kernel taps whose position lies in [lo_bound, hi_bound), per output."""
    start = np.arange(n_out, dtype=np.int64) * s - pb
    lo = np.where(start >= lo_bound, 0, (lo_bound - start + d - 1) // d)
    hi = np.where(hi_bound - start <= 0, 0, (hi_bound - start - 1) // d + 1)
    lo = np.minimum(lo, k)
    hi = np.maximum(np.minimum(hi, k), lo)
    return np.ascontiguousarray(lo, dtype=np.int64), np.ascontiguousarray(hi, dtype=np.int64)


class _Plan:
    """What a MaxPool/AveragePool call needs for one input shape (see :func:`_plan`)."""

    __slots__ = ("geo", "in4", "out_shape", "out4", "native")

    def __init__(self, attrs, shape):
        nd = len(attrs["kernel_shape"])
        if len(shape) != nd + 2:
            raise ValueError(f"input of rank {len(shape)} does not match kernel_shape {attrs['kernel_shape']}")
        n, c = shape[:2]
        in_sp = tuple(shape[2:])
        #: per axis (kernel, stride, dilation, pad_begin, pad_end, n_out), padded to 3
        #: axes with leading (1, 1, 1, 0, 0, 1)
        self.geo = [(1, 1, 1, 0, 0, 1)] * (3 - nd) + _geometry(attrs, in_sp)
        self.in4 = (n * c,) + (1,) * (3 - nd) + in_sp
        self.out_shape = (n, c) + tuple(g[5] for g in self.geo[3 - nd:])
        self.out4 = (n * c,) + tuple(g[5] for g in self.geo)
        #: native arguments: kernels, strides, dilations, begin pads (D, H, W each)
        self.native = [g[i] for i in range(4) for g in self.geo]


_PLAN_CACHE_SIZE = 8


def _plan(x, attrs):
    """The :class:`_Plan` of input ``x``, memoised per shape in the node's prepared attrs
    (``_pool_plans``, created by ``prepare``; at most a few shapes are kept)."""
    cache = attrs.get("_pool_plans")
    if cache is None:
        return _Plan(attrs, x.shape)
    plan = cache.get(x.shape)
    if plan is None:
        plan = _Plan(attrs, x.shape)
        if len(cache) >= _PLAN_CACHE_SIZE:
            cache.clear()
        cache[x.shape] = plan
    return plan


def _target(out, i, shape, dtype):
    """(array the kernel writes, array to return): ``out[i]`` itself when it is usable."""
    if out is not None and len(out) > i and out[i] is not None:
        dest = out[i]
        if dest.flags.c_contiguous and dest.dtype == dtype and dest.shape == shape:
            return dest, dest
        return np.empty(shape, dtype), dest
    y = np.empty(shape, dtype)
    return y, y


def _finish(work, dest):
    if work is not dest:
        np.copyto(dest, work)
    return dest


def _over_planes(fn, x4, y4, args):
    """``fn(x4, y4, *args, 0, planes, _SPECIALISE, pool, min_chunk)`` over all planes, split by
    planes across the run's native workers (no GIL hand-off) when every part gets at least
    ``_PARALLEL_MIN_ELEMENTS`` elements."""
    planes = x4.shape[0]
    work = max(x4.size, y4.size)
    if planes < 2 or work < 2 * _PARALLEL_MIN_ELEMENTS or current_threads() < 2:
        fn(x4, y4, *args, 0, planes, _SPECIALISE)
        return
    fn(x4, y4, *args, 0, planes, _SPECIALISE, current_handle(), max(1, -(-_PARALLEL_MIN_ELEMENTS * planes // work)))


@kernel("MaxPool", out=True, prepare=_prepare_pool("MaxPool"))
def max_pool_kernel(inputs, attrs, out=None):
    """ONNX MaxPool over (N, C, spatial...) with 1-3 spatial axes.

    Padding never wins (only real elements are compared; a window with no real element
    gives -inf, or the dtype's minimum).  Outputs ``[Y, Indices]``; Indices (int64, flat
    index into X, row- or column-major per ``storage_order``; ties go to the first
    element in row-major window order) is computed unless ``out`` is given without a
    second array or ``attrs["_num_outputs"]`` is 1.  Y has X's dtype (float32, int8,
    uint8...).  Writes into ``out`` when given; copies X only when it is not contiguous.
    """
    x = inputs[0]
    plan = _plan(x, attrs)
    x4 = np.ascontiguousarray(x).reshape(plan.in4)
    if x4.dtype.type not in _MAX_DTYPES:
        x4 = x4.astype(np.float32)
    if out is not None:
        want_idx = len(out) > 1 and out[1] is not None
    else:
        want_idx = attrs.get("_num_outputs", 2) > 1
    out_shape = plan.out_shape
    y, y_dest = _target(out, 0, out_shape, x.dtype)
    yk = y if y.dtype == x4.dtype else np.empty(out_shape, x4.dtype)
    empty = -np.inf if x4.dtype.kind == "f" else np.iinfo(x4.dtype).min
    if want_idx:
        geo = plan.geo
        idx, idx_dest = _target(out, 1, out_shape, np.dtype(np.int64))
        ranges = []
        for (k, s, d, pb, pe, n_out), size in zip(geo, x4.shape[1:]):
            ranges.extend(_tap_range(n_out, k, s, d, pb, 0, size))
        max_pool_indices(x4, yk.reshape(plan.out4), idx.reshape(plan.out4),
                         geo[0][1], geo[1][1], geo[2][1], geo[0][2], geo[1][2], geo[2][2],
                         geo[0][3], geo[1][3], geo[2][3], *ranges, empty, bool(attrs.get("storage_order", 0)))
    else:
        _over_planes(max_pool, x4, yk.reshape(plan.out4), plan.native + [empty])
    if yk is not y:
        np.copyto(y, yk, casting="unsafe")
    results = [_finish(y, y_dest)]
    if want_idx:
        results.append(_finish(idx, idx_dest))
    return results


@kernel("AveragePool", out=True, prepare=_prepare_pool("AveragePool"))
def average_pool_kernel(inputs, attrs, out=None):
    """ONNX AveragePool over (N, C, spatial...) with 1-3 spatial axes, float32.

    The divisor counts the real elements of each window, or (``count_include_pad=1``)
    its taps inside the padded extent, never the ceil-mode overhang past the end
    padding; the sum is multiplied by its float32 reciprocal.  Dilations per opset 19.
    An output the executor keeps on an integer grid (``attrs["_int_output"]``) is summed
    and divided as the vendor's int8 pooling does instead (:func:`_avg_pool_row_major`).
    Writes into ``out`` when given; copies X only when it is not contiguous.
    """
    x = inputs[0]
    plan = _plan(x, attrs)
    x4 = np.ascontiguousarray(x, dtype=np.float32).reshape(plan.in4)
    y, y_dest = _target(out, 0, plan.out_shape, np.dtype(np.float32))
    if attrs.get("_int_output"):
        _avg_pool_row_major(x4, y.reshape(plan.out4), plan.geo, bool(attrs.get("count_include_pad", 0)))
        return [_finish(y, y_dest)]
    args = plan.native + [g[4] for g in plan.geo] + [bool(attrs.get("count_include_pad", 0))]
    _over_planes(avg_pool, x4, y.reshape(plan.out4), args)
    return [_finish(y, y_dest)]


def _avg_pool_row_major(x4, y4, geo, count_include_pad):
    """AveragePool of an integer-grid output, as the NPU's int8 pooling sums a window.

    RKNN-Toolkit2's simulator adds the dequantized float32 taps of each window one by one
    in row-major order (``((t00 + t01) + t10) + t11``), where the native kernel's separable
    passes add column sums; the two round apart when an even-count window's mean lies on a
    grid midpoint (``tools/vendor_corpus/qdq_avgpool_probe.py``: this order equals the
    simulator on all 4,096 values of a 2x2/2 probe, 988 of them ties; the separable one
    95.7 %).  Padding adds 0.0.  The sum is divided by the count in float32 (the native
    kernel multiplies by its reciprocal): with 3x3/2 pad 1 the border windows of 4 and 6
    real taps then equal the simulator's too (100 %, 99.7 % multiplying).  A window with
    nothing to count gives 0.  x4: (P, D, H, W), y4: (P, OD, OH, OW), float32.
    """
    counts = []
    for (k, s, d, pb, pe, n_out), size in zip(geo, x4.shape[1:]):
        bounds = (-pb, size + pe) if count_include_pad else (0, size)
        lo, hi = _tap_range(n_out, k, s, d, pb, *bounds)
        counts.append(hi - lo)
    count = (counts[0][:, None, None] * counts[1][None, :, None] * counts[2][None, None, :]).astype(np.float32)
    _windows_in_order(x4, y4, geo)
    np.divide(y4, count, out=y4, where=count > 0)
    y4[:, count == 0] = 0


def _windows_in_order(x4, y4, geo, tap_weights=None):
    """``y4`` = each window's taps of ``x4`` (times the plane's tap weight when
    ``tap_weights``, (P, taps) float32) added one float32 addition at a time in row-major
    tap order; padding reads 0.0.  x4: (P, D, H, W), y4: (P, OD, OH, OW), float32; allocates
    a padded copy of x4."""
    pads = [(0, 0)]
    for (k, s, d, pb, pe, n_out), size in zip(geo, x4.shape[1:]):
        pads.append((pb, max(pe, (n_out - 1) * s + (k - 1) * d + 1 - pb - size)))
    xp = np.pad(x4, pads)
    for i, tap in enumerate(itertools.product(*(range(g[0]) for g in geo))):
        window = xp[(slice(None),) + tuple(slice(t * d, t * d + (n - 1) * s + 1, s)
                                           for t, (_, s, d, _, _, n) in zip(tap, geo))]
        if tap_weights is not None:
            window = window * tap_weights[:, i].reshape(-1, 1, 1, 1)
        if i == 0:
            np.copyto(y4, window)
        else:
            np.add(y4, window, out=y4)


def pool_stage_conv(x, w, attrs, out=None):
    """A stage of a split GlobalAveragePool (a depthwise Conv without bias the toolkit marks
    ``attrs["_pool_stage_taps"]``) whose output is on an integer grid: each window's products
    ``x * w`` (the weight as its int8 grid holds it) added one at a time in row-major tap order
    in float32, as RKNN-Toolkit2's simulator computes them (its int8 pooling order,
    :func:`_avg_pool_row_major`; ``tools/vendor_corpus/qdq_avgpool_probe.py --pool global``, a
    pre-quantized build: 12 x 12 and 20 x 20 equal on every value, 8 x 8 98.5 %, where exact
    integer sums gave 91 / 100 / 94 %; calibrated builds compare alike either way).
    :mod:`..integer_convs` leaves these convs to it.
    x: (N, C, H, W) float32, w: (C, 1, kh, kw); returns the (N, C, OH, OW) float32 output
    (written into ``out`` when it is a C-contiguous float32 array of that shape)."""
    pool_attrs = {"kernel_shape": list(w.shape[2:]), "strides": attrs["strides"], "pads": attrs["pads"],
                  "dilations": attrs.get("dilations", [1] * (w.ndim - 2)), "auto_pad": "NOTSET"}
    plan = _Plan(pool_attrs, x.shape)
    y, dest = _target(out, 0, plan.out_shape, np.dtype(np.float32))
    taps = np.tile(np.ascontiguousarray(w, dtype=np.float32).reshape(w.shape[0], -1), (x.shape[0], 1))
    _windows_in_order(np.ascontiguousarray(x, dtype=np.float32).reshape(plan.in4), y.reshape(plan.out4), plan.geo,
                      taps)
    return _finish(y, dest)


def _global_setup(inputs, out):
    x = inputs[0]
    if x.ndim < 2:
        raise ValueError(f"global pooling needs an (N, C, ...) input, got rank {x.ndim}")
    n, c = x.shape[:2]
    if x.size == 0 and n * c > 0:
        raise ValueError(f"global pooling of X of shape {list(x.shape)}: its spatial axes hold no values")
    shape = (n, c) + (1,) * (x.ndim - 2)
    y, dest = _target(out, 0, shape, np.dtype(np.float32) if x.dtype.kind == "f" else x.dtype)
    return x, y, dest


def _global_native(x, y, dtypes):
    """Native-loop views for a global pool: ``(x4, y4)`` with x4 = (N*C, 1, R, S) (the
    spatial axes as R rows of the last axis' S values, a view unless X is not contiguous)
    and y4 = (N*C, 1, 1, 1); ``None`` when the numpy path is used instead (rank < 4,
    another dtype, empty planes)."""
    if x.ndim < 4 or x.dtype.type not in dtypes or x.size == 0:
        return None
    planes = x.shape[0] * x.shape[1]
    cols = x.shape[-1]
    x4 = np.ascontiguousarray(x).reshape(planes, 1, x.size // (planes * cols), cols)
    return x4, y.reshape(planes, 1, 1, 1)


@kernel("GlobalAveragePool", out=True)
def global_average_pool(inputs, attrs, out=None):
    """Mean over every spatial axis: (N, C, ...) -> (N, C, 1, ..., 1), float32.

    4-D and wider float32 inputs run natively: each plane is summed as one flat array
    in 8 interleaved partial sums (combined pairwise), then multiplied by the float32
    reciprocal of the plane size; other inputs use ``np.mean``.  Writes into ``out`` when
    given; copies only when X is not contiguous.
    """
    x, y, dest = _global_setup(inputs, out)
    views = _global_native(x, y, (np.float32,))
    if views is None:
        flat = x.reshape(x.shape[:2] + (int(np.prod(x.shape[2:], dtype=np.int64)),))
        np.mean(flat, axis=2, dtype=np.float32, out=y.reshape(flat.shape[:2]))
    else:
        x4, y4 = views
        rows, cols = x4.shape[2:]
        _over_planes(avg_pool, x4, y4, [1, rows, cols, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, False])
    return [_finish(y, dest)]


@kernel("GlobalMaxPool", out=True)
def global_max_pool(inputs, attrs, out=None):
    """Max over every spatial axis: (N, C, ...) -> (N, C, 1, ..., 1), X's dtype.

    Writes into ``out`` when given; copies only when X is not contiguous.
    """
    x, y, dest = _global_setup(inputs, out)
    views = _global_native(x, y, _MAX_DTYPES) if y.dtype == x.dtype else None
    if views is None:
        flat = x.reshape(x.shape[:2] + (int(np.prod(x.shape[2:], dtype=np.int64)),))
        np.max(flat, axis=2, out=y.reshape(flat.shape[:2]))
    else:
        x4, y4 = views
        rows, cols = x4.shape[2:]
        empty = -np.inf if x4.dtype.kind == "f" else np.iinfo(x4.dtype).min
        _over_planes(max_pool, x4, y4, [1, rows, cols, 1, 1, 1, 1, 1, 1, 0, 0, 0, empty])
    return [_finish(y, dest)]


def _prepare_lpnorm(attrs, consts):
    p = attrs.get("p", 2)
    if p not in (1, 2):
        raise ModelInvalidError(f"attribute p must be 1 or 2, got {p!r}", op="LpNormalization")
    if not isinstance(attrs.get("axis", -1), int):
        raise ModelInvalidError(f"attribute axis must be an int, got {attrs.get('axis')!r}",
                                op="LpNormalization")
    return attrs


@kernel("LpNormalization", out=True, prepare=_prepare_lpnorm)
def lp_normalization(inputs, attrs, out=None):
    """``x / ||x||_p`` along ``axis`` (p = 1 or 2); a zero norm gives 0, float32.

    Allocates only the norm (reduced shape); writes into ``out`` when given.
    """
    x = inputs[0]
    axis = attrs.get("axis", -1)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"LpNormalization: axis {axis} out of range for rank {x.ndim}")
    y, dest = _target(out, 0, x.shape, np.dtype(np.float32))
    # y first holds |x| or x*x (scratch), then the result.
    if attrs.get("p", 2) == 1:
        np.abs(x, out=y)
        norm = np.add.reduce(y, axis=axis, keepdims=True)
    else:
        np.square(x, out=y)
        norm = np.sqrt(np.add.reduce(y, axis=axis, keepdims=True))
    # A zero norm means every element is 0: dividing by 1 keeps them 0 (no 0/0 NaN).
    norm[norm == 0] = 1
    np.divide(x, norm, out=y)
    return [_finish(y, dest)]
