"""Reduction kernels: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp, ArgMax, ArgMin.

ONNX semantics, package calling convention (see ``ops/__init__.py``).  ``axes``
comes from the attribute (ReduceSum before opset 13, the others before opset 18)
or from the optional second input (later opsets); both forms are accepted whatever
the opset.  An empty or absent ``axes`` reduces over every axis, unless
``noop_with_empty_axes=1``, which makes the node an identity (a copy).
``keepdims`` (default 1) keeps reduced axes with length 1.

All are registered with ``out=True`` and reduce straight into the output buffer
(numpy reductions with ``out=``); ReduceL2/SumSquare/LogSumExp allocate one
input-sized temporary (the squares / exponentials).  Reductions over an empty set
give ONNX's values: 0 for sums, 1 for products, -inf/+inf (or the integer type's
extremes, or False/True for bool) for max/min, nan for the mean.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ....errors import ModelInvalidError
from . import kernel
from .elementwise import check_attr, dest, quiet

__all__ = ["reduce_axes", "reduced_shape"]


def _int_list(op: str, name: str, value) -> Tuple[int, ...]:
    try:
        arr = np.asarray(value)
        if arr.size == 0:
            return ()
        if arr.dtype.kind not in "iu":
            raise TypeError
        return tuple(int(a) for a in arr.reshape(-1))
    except (TypeError, ValueError):
        got = f"a {value.dtype} tensor of shape {list(value.shape)}" if isinstance(value, np.ndarray) else repr(value)
        raise ModelInvalidError(f"{name} must be a list of ints, got {got}", op=op) from None


def _reduce_prepare(op: str):
    def prepare(attrs, consts):
        attrs = dict(attrs)
        attrs["keepdims"] = check_attr(op, attrs, "keepdims", {0, 1}, 1)
        attrs["noop_with_empty_axes"] = check_attr(op, attrs, "noop_with_empty_axes", {0, 1}, 0)
        if len(consts) > 1 and consts[1] is not None:
            attrs["_axes"] = _int_list(op, "input 'axes'", consts[1])
        elif "axes" in attrs:
            attrs["_axes"] = _int_list(op, "attribute 'axes'", attrs["axes"])
        if "_axes" in attrs and len(set(attrs["_axes"])) != len(attrs["_axes"]):
            raise ModelInvalidError(f"'axes' has repeated entries: {list(attrs['_axes'])}", op=op)
        return attrs

    return prepare


def reduce_axes(op: str, ndim: int, inputs, attrs) -> Optional[Tuple[int, ...]]:
    """The sorted, non-negative axes a Reduce* node reduces, or None for a no-op.

    Sources, first found: the constant axes cached by ``prepare``, the ``axes``
    input, the ``axes`` attribute.  Raises ModelInvalidError for an axis out of
    ``[-ndim, ndim-1]`` or repeated.
    """
    if len(inputs) > 1 and inputs[1] is not None:
        raw = _int_list(op, "input 'axes'", inputs[1])
    elif "_axes" in attrs:
        raw = attrs["_axes"]
    elif attrs.get("axes") is not None:
        raw = _int_list(op, "attribute 'axes'", attrs["axes"])
    else:
        raw = ()
    if not raw:
        if attrs.get("noop_with_empty_axes", 0):
            return None
        return tuple(range(ndim))
    axes = []
    for a in raw:
        b = a + ndim if a < 0 else a
        if not 0 <= b < ndim:
            raise ModelInvalidError(f"axis {a} is out of range for a rank-{ndim} input", op=op)
        axes.append(b)
    if len(set(axes)) != len(axes):
        raise ModelInvalidError(f"'axes' has repeated entries: {list(raw)}", op=op)
    return tuple(sorted(axes))


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    """The shape after reducing ``axes`` (length 1 kept with ``keepdims``, else dropped)."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _register_reduce(op: str, compute, doc: str):
    def fn(inputs, attrs, out=None):
        x = inputs[0]
        axes = reduce_axes(op, x.ndim, inputs, attrs)
        if axes is None:
            o = dest(out, x.shape, x.dtype)
            np.copyto(o, x)
            return [o]
        keepdims = bool(attrs.get("keepdims", 1))
        o = dest(out, reduced_shape(x.shape, axes, keepdims), x.dtype)
        with quiet():
            compute(x, axes, keepdims, o)
        return [o]

    fn.__name__ = fn.__qualname__ = op.lower()
    fn.__doc__ = doc + " Output has the input's dtype; writes into ``out`` when given."
    kernel(op, out=True, prepare=_reduce_prepare(op))(fn)
    return fn


def _acc_dtype(x: np.ndarray):
    # Integer reductions accumulate in their own type (wrapping like ONNX's fixed-width
    # arithmetic) rather than numpy's default promotion to the platform integer.
    return x.dtype


def _sum(x, axes, keepdims, o):
    np.sum(x, axis=axes, dtype=_acc_dtype(x), keepdims=keepdims, out=o)


def _mean(x, axes, keepdims, o):
    if any(x.shape[a] == 0 for a in axes):  # mean of nothing: nan (numpy would also warn)
        o.fill(np.nan if o.dtype.kind == "f" else 0)
    elif x.dtype.kind == "f":
        np.mean(x, axis=axes, keepdims=keepdims, out=o)
    else:  # integers: mean in float64, truncated into the integer output
        np.copyto(o, np.mean(x, axis=axes, keepdims=keepdims, dtype=np.float64), casting="unsafe")


def _lowest(dtype):
    if dtype.kind == "b":
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _highest(dtype):
    if dtype.kind == "b":
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return np.inf


def _max(x, axes, keepdims, o):
    np.max(x, axis=axes, keepdims=keepdims, out=o, initial=_lowest(x.dtype))


def _min(x, axes, keepdims, o):
    np.min(x, axis=axes, keepdims=keepdims, out=o, initial=_highest(x.dtype))


def _prod(x, axes, keepdims, o):
    np.prod(x, axis=axes, dtype=_acc_dtype(x), keepdims=keepdims, out=o)


def _l1(x, axes, keepdims, o):
    if x.dtype.kind == "f":
        np.add.reduce(np.abs(x), axis=axes, keepdims=keepdims, out=o)
    else:
        np.sum(np.abs(x), axis=axes, dtype=x.dtype, keepdims=keepdims, out=o)


def _sum_square(x, axes, keepdims, o):
    np.sum(np.square(x), axis=axes, dtype=_acc_dtype(x), keepdims=keepdims, out=o)


def _l2(x, axes, keepdims, o):
    if x.dtype.kind == "f":
        np.sum(np.square(x), axis=axes, keepdims=keepdims, out=o)
        np.sqrt(o, out=o)
    else:  # integers: exact integer sum of squares, sqrt in float64, truncated
        s = np.sum(np.square(x.astype(np.int64)), axis=axes, keepdims=keepdims)
        np.copyto(o, np.sqrt(s), casting="unsafe")


def _log_sum(x, axes, keepdims, o):
    if x.dtype.kind == "f":
        np.sum(x, axis=axes, keepdims=keepdims, out=o)
        np.log(o, out=o)
    else:
        np.copyto(o, np.log(np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64)), casting="unsafe")


def _log_sum_exp(x, axes, keepdims, o):
    if x.dtype.kind != "f":
        xd = x.astype(np.float64)
        tmp = np.empty(reduced_shape(x.shape, axes, keepdims), np.float64)
        _log_sum_exp(xd, axes, keepdims, tmp)
        np.copyto(o, tmp, casting="unsafe")
        return
    # Shift by the (finite) max so exp cannot overflow: m + log(sum(exp(x - m))).
    m = np.array(np.max(x, axis=axes, keepdims=True, initial=-np.inf), dtype=x.dtype)
    np.copyto(m, 0, where=~np.isfinite(m))
    e = np.empty(x.shape, x.dtype)
    np.subtract(x, m, out=e)
    np.exp(e, out=e)
    np.sum(e, axis=axes, keepdims=keepdims, out=o)
    np.log(o, out=o)
    np.add(o, m if keepdims else m.reshape(o.shape), out=o)


reduce_sum = _register_reduce("ReduceSum", _sum, "ReduceSum: sum over ``axes``.")
reduce_mean = _register_reduce("ReduceMean", _mean, "ReduceMean: arithmetic mean over ``axes``.")
reduce_max = _register_reduce("ReduceMax", _max, "ReduceMax: maximum over ``axes`` (bool: any; nan propagates).")
reduce_min = _register_reduce("ReduceMin", _min, "ReduceMin: minimum over ``axes`` (bool: all; nan propagates).")
reduce_prod = _register_reduce("ReduceProd", _prod, "ReduceProd: product over ``axes``.")
reduce_l1 = _register_reduce("ReduceL1", _l1, "ReduceL1: sum of absolute values over ``axes``.")
reduce_l2 = _register_reduce("ReduceL2", _l2, "ReduceL2: ``sqrt(sum(x**2))`` over ``axes``.")
reduce_sum_square = _register_reduce("ReduceSumSquare", _sum_square, "ReduceSumSquare: ``sum(x**2)`` over ``axes``.")
reduce_log_sum = _register_reduce("ReduceLogSum", _log_sum, "ReduceLogSum: ``log(sum(x))`` over ``axes``.")
reduce_log_sum_exp = _register_reduce(
    "ReduceLogSumExp", _log_sum_exp, "ReduceLogSumExp: ``log(sum(exp(x)))`` over ``axes``, overflow-safe."
)


# --------------------------------------------------------------------------- ArgMax / ArgMin


def _arg_prepare(op: str):
    def prepare(attrs, consts):
        attrs = dict(attrs)
        axis = attrs.get("axis", 0)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise ModelInvalidError(f"attribute 'axis' must be an int, got {axis!r}", op=op)
        attrs["axis"] = int(axis)
        attrs["keepdims"] = check_attr(op, attrs, "keepdims", {0, 1}, 1)
        attrs["select_last_index"] = check_attr(op, attrs, "select_last_index", {0, 1}, 0)
        return attrs

    return prepare


def _arg(op: str, fn, inputs, attrs, out):
    x = inputs[0]
    axis = int(attrs.get("axis", 0))
    nd = x.ndim
    a = axis + nd if axis < 0 else axis
    if not 0 <= a < nd:
        raise ModelInvalidError(f"attribute 'axis' = {axis} is out of range for a rank-{nd} input", op=op)
    keepdims = bool(attrs.get("keepdims", 1))
    shape = reduced_shape(x.shape, (a,), keepdims)
    o = dest(out, shape, np.int64)
    # numpy's arg-reductions write intp; on 64-bit platforms that is int64 and o is used directly.
    target = o if o.dtype == np.intp else np.empty(shape, np.intp)
    if attrs.get("select_last_index", 0):
        fn(np.flip(x, axis=a), axis=a, out=target, keepdims=keepdims)
        np.subtract(x.shape[a] - 1, target, out=target)
    else:
        fn(x, axis=a, out=target, keepdims=keepdims)
    if target is not o:
        np.copyto(o, target)
    return [o]


@kernel("ArgMax", out=True, prepare=_arg_prepare("ArgMax"))
def arg_max(inputs, attrs, out=None):
    """ArgMax: int64 index of the maximum along ``axis`` (default 0), first occurrence
    unless ``select_last_index=1``; ``keepdims`` (default 1) keeps the axis with length 1.
    """
    return [_arg("ArgMax", np.argmax, inputs, attrs, out)[0]]


@kernel("ArgMin", out=True, prepare=_arg_prepare("ArgMin"))
def arg_min(inputs, attrs, out=None):
    """ArgMin: int64 index of the minimum along ``axis`` (default 0), first occurrence
    unless ``select_last_index=1``; ``keepdims`` (default 1) keeps the axis with length 1.
    """
    return [_arg("ArgMin", np.argmin, inputs, attrs, out)[0]]
