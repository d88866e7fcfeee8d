"""Shape-only kernels: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Shape, Size, and the
backend's own ``ChannelSlice``.

Zero-copy: with ``out=None``, Reshape, Flatten, Squeeze, Unsqueeze, Identity and
Dropout return *views* of their input (numpy reshapes in C order, so the result is a
view whenever the input's strides allow it, which is always the case for contiguous
inputs).  Such results share memory with the input, which may itself be a read-only
view of the model file: consumers must treat them as read-only.  With ``out`` given,
the data is copied into the preallocated arrays and those arrays are returned.

This module also holds the small helpers shared with :mod:`.tensor`.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import numpy as np

from ....errors import ModelInvalidError
from . import kernel

# -- helpers shared with tensor.py -------------------------------------------------------


def _slot(out, i: int) -> Optional[np.ndarray]:
    """``out[i]`` when the executor preallocated that output, else ``None``."""
    if out is None or i >= len(out):
        return None
    return out[i]


def _invalid(op: str, message: str) -> ModelInvalidError:
    """A ModelInvalidError for ONNX op ``op`` (its ``.op``; the executor adds the node name)."""
    return ModelInvalidError(message, op=op)


def _ints(t) -> List[int]:
    """A tensor or sequence of integers as a flat list of Python ints."""
    return [int(v) for v in np.asarray(t).reshape(-1)]


def _axis(axis: int, rank: int, op: str, name: str = "axis") -> int:
    """Normalise a possibly negative axis into ``[0, rank)``; ModelInvalidError if out of range."""
    a = int(axis)
    if not -rank <= a < rank:
        raise _invalid(op, f"{name} {a} is out of range for a rank-{rank} tensor (expected [{-rank}, {rank - 1}])")
    return a + rank if a < 0 else a


def _axes(axes: Sequence[int], rank: int, op: str) -> List[int]:
    """Normalise a list of axes; duplicates are a ModelInvalidError."""
    norm = [_axis(a, rank, op, "axes entry") for a in axes]
    if len(set(norm)) != len(norm):
        raise _invalid(op, f"axes {list(axes)} name the same axis twice")
    return norm


def _optional_input(inputs, i: int):
    """``inputs[i]``, or ``None`` when the optional input is omitted."""
    return inputs[i] if len(inputs) > i else None


def _check_int_attr(attrs, op: str, name: str, allowed=None) -> None:
    """Raise ModelInvalidError unless ``attrs[name]`` (when present) is an int (in ``allowed``)."""
    if name not in attrs:
        return
    v = attrs[name]
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _invalid(op, f"attribute {name!r} must be an integer, got {v!r}")
    if allowed is not None and int(v) not in allowed:
        raise _invalid(op, f"attribute {name!r} must be one of {sorted(allowed)}, got {int(v)}")


def _into_reshaped(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Copy ``src`` into ``dst`` in C order, where ``dst`` has the same size but another shape.

    Writes through a reshaped view of ``dst`` so no temporary is made.
    """
    if dst.size != src.size:
        raise ValueError(f"cannot write {src.shape} into an output of shape {dst.shape}")
    if dst.flags.c_contiguous:
        np.copyto(dst.reshape(src.shape), src)
    else:
        np.copyto(dst, src.reshape(dst.shape))
    return dst


def _reshaped(x: np.ndarray, shape, out) -> List[np.ndarray]:
    """``[x.reshape(shape)]`` (a view when possible) or, with ``out``, a copy into ``out[0]``."""
    o = _slot(out, 0)
    shape = tuple(shape)
    if o is None:
        return [x.reshape(shape)]
    if o.shape != shape:
        raise ValueError(f"preallocated output has shape {o.shape}, the result has shape {shape}")
    return [_into_reshaped(o, x)]


# -- Reshape ------------------------------------------------------------------------------


def _reshape_target(x_shape, shape: List[int], allowzero: bool) -> List[int]:
    if sum(1 for d in shape if d == -1) > 1:
        raise _invalid("Reshape", f"shape {shape} has more than one -1")
    if any(d < -1 for d in shape):
        raise _invalid("Reshape", f"shape {shape} has a negative dimension other than -1")
    if allowzero:
        if 0 in shape and -1 in shape:
            raise _invalid("Reshape", f"shape {shape} has both 0 and -1 with allowzero=1")
    else:
        for i, d in enumerate(shape):
            if d == 0:
                if i >= len(x_shape):
                    raise _invalid("Reshape", f"shape {shape}: 0 at index {i} copies no input dimension "
                                   f"(input rank {len(x_shape)})")
                shape[i] = x_shape[i]
    if -1 in shape:
        known = 1
        for d in shape:
            if d != -1:
                known *= d
        total = 1
        for d in x_shape:
            total *= d
        if known == 0 or total % known:
            raise ValueError(f"cannot infer -1 in {shape} for an input of shape {tuple(x_shape)}")
        shape[shape.index(-1)] = total // known
    size, total = math.prod(shape), math.prod(x_shape)
    if size != total:
        raise ValueError(f"an input of shape {list(x_shape)} ({total} elements) cannot take shape {shape} "
                         f"({size} elements)")
    return shape


def _prepare_reshape(attrs, consts):
    _check_int_attr(attrs, "Reshape", "allowzero", {0, 1})
    if len(consts) > 1 and consts[1] is not None:
        shape = _ints(consts[1])
        if sum(1 for d in shape if d == -1) > 1:
            raise _invalid("Reshape", f"shape input {shape} has more than one -1")
        if attrs.get("allowzero", 0) and 0 in shape and -1 in shape:
            raise _invalid("Reshape", f"shape input {shape} has both 0 and -1 with allowzero=1")
    return attrs


@kernel("Reshape", out=True, view=True, prepare=_prepare_reshape)
def reshape(inputs, attrs, out=None):
    """Reshape ``data`` to the ``shape`` input (``-1`` inferred, ``0`` copies the input
    dimension unless ``allowzero=1``).  A view of ``data`` when ``out`` is None."""
    x = inputs[0]
    shape = _reshape_target(x.shape, _ints(inputs[1]), bool(attrs.get("allowzero", 0)))
    return _reshaped(x, shape, out)


# -- Flatten ------------------------------------------------------------------------------


def _prepare_flatten(attrs, consts):
    _check_int_attr(attrs, "Flatten", "axis")
    return attrs


@kernel("Flatten", out=True, view=True, prepare=_prepare_flatten)
def flatten(inputs, attrs, out=None):
    """Reshape to 2-D ``(prod(shape[:axis]), prod(shape[axis:]))``; ``axis`` in ``[-r, r]``.
    A view of the input when ``out`` is None."""
    x = inputs[0]
    axis = int(attrs.get("axis", 1))
    if not -x.ndim <= axis <= x.ndim:
        raise _invalid("Flatten", f"axis {axis} is out of range for a rank-{x.ndim} tensor "
                       f"(expected [{-x.ndim}, {x.ndim}])")
    if axis < 0:
        axis += x.ndim
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    return _reshaped(x, (outer, inner), out)


# -- Squeeze / Unsqueeze ------------------------------------------------------------------


def _axes_arg(inputs, attrs):
    """Axes from the second input (opset >= 13) or the ``axes`` attribute (older opsets)."""
    t = _optional_input(inputs, 1)
    if t is not None:
        return _ints(t)
    a = attrs.get("axes")
    return None if a is None else [int(v) for v in a]


def _prepare_axes(op):
    def prepare(attrs, consts):
        if "axes" in attrs:
            a = attrs["axes"]
            if not isinstance(a, (list, tuple)) or not all(isinstance(v, (int, np.integer)) for v in a):
                raise _invalid(op, f"attribute 'axes' must be a list of integers, got {a!r}")
        axes = _ints(consts[1]) if len(consts) > 1 and consts[1] is not None else attrs.get("axes")
        if axes is not None and len(set(int(v) for v in axes)) != len(axes):
            raise _invalid(op, f"axes {list(axes)} contain duplicates")
        return attrs

    return prepare


@kernel("Squeeze", out=True, view=True, prepare=_prepare_axes("Squeeze"))
def squeeze(inputs, attrs, out=None):
    """Remove size-1 dimensions: the listed ``axes`` (each must have size 1), or every
    size-1 dimension when no axes are given.  A view when ``out`` is None."""
    x = inputs[0]
    axes = _axes_arg(inputs, attrs)
    if axes is None:
        shape = [d for d in x.shape if d != 1]
    else:
        norm = set(_axes(axes, x.ndim, "Squeeze"))
        for a in norm:
            if x.shape[a] != 1:
                raise ValueError(f"axis {a} has size {x.shape[a]}, not 1 (input shape {x.shape})")
        shape = [d for i, d in enumerate(x.shape) if i not in norm]
    return _reshaped(x, shape, out)


@kernel("Unsqueeze", out=True, view=True, prepare=_prepare_axes("Unsqueeze"))
def unsqueeze(inputs, attrs, out=None):
    """Insert size-1 dimensions at ``axes`` (indices into the *output* shape, negative
    allowed, any order).  A view when ``out`` is None."""
    x = inputs[0]
    axes = _axes_arg(inputs, attrs)
    if axes is None:
        raise _invalid("Unsqueeze", "no axes given (neither the axes input nor the attribute)")
    rank = x.ndim + len(axes)
    norm = set(_axes(axes, rank, "Unsqueeze"))
    dims = iter(x.shape)
    shape = [1 if i in norm else next(dims) for i in range(rank)]
    return _reshaped(x, shape, out)


# -- Identity / Dropout --------------------------------------------------------------------


@kernel("Identity", out=True, view=True)
def identity(inputs, attrs, out=None):
    """The input itself (no copy) when ``out`` is None, else a copy into ``out[0]``."""
    x = inputs[0]
    o = _slot(out, 0)
    if o is None:
        return [x]
    np.copyto(o, x)
    return [o]


def _prepare_channel_slice(attrs, consts):
    start, end = attrs.get("start"), attrs.get("end")
    if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end):
        raise _invalid("ChannelSlice", f"needs integer attributes 0 <= start < end, got start={start!r}, end={end!r}")
    return attrs


@kernel("ChannelSlice", out=True, view=True, prepare=_prepare_channel_slice)
def channel_slice(inputs, attrs, out=None):
    """Channels ``[start, end)`` of ``x`` (axis 1), the backend's own op (the outputs of convs
    merged by :mod:`..sibling_convs`).  With ``out`` None: a view of ``x`` when the channels are
    contiguous (a C-contiguous ``x`` of one image), else a C-contiguous copy; with ``out``, a
    copy into ``out[0]``."""
    x = inputs[0]
    start, end = attrs["start"], attrs["end"]
    if end > x.shape[1]:
        raise _invalid("ChannelSlice", f"channels [{start}, {end}) of an input with {x.shape[1]} channels")
    part = x[:, start:end]
    o = _slot(out, 0)
    if o is None:
        return [part if part.flags.c_contiguous else np.ascontiguousarray(part)]
    np.copyto(o, part)
    return [o]


def _scalar(t, default):
    if t is None or np.asarray(t).size == 0:
        return default
    return np.asarray(t).reshape(-1)[0].item()


def _dropout_training(inputs, attrs) -> bool:
    """Whether this call asks for random (training) dropout, which an inference runtime refuses.

    ``training_mode`` true with a ratio of exactly 0 is deterministic (output = input,
    mask all true), so it is allowed.
    """
    training = _scalar(_optional_input(inputs, 2), False)
    if not training:
        return False
    ratio = _scalar(_optional_input(inputs, 1), attrs.get("ratio", 0.5))
    return float(ratio) != 0.0


_TRAINING_MSG = ("training_mode=True with a non-zero ratio asks for random dropout; an inference "
                 "runtime only runs Dropout in inference mode (omit training_mode or set it to false)")


def _prepare_dropout(attrs, consts):
    # consts[i] is None for an omitted *or* a computed input, so only a constant
    # training_mode with a constant ratio can be judged here; the kernel checks the rest.
    t = consts[2] if len(consts) > 2 else None
    r = consts[1] if len(consts) > 1 else None
    if t is not None and r is not None and _dropout_training([None, r, t], attrs):
        raise _invalid("Dropout", _TRAINING_MSG)
    return attrs


@kernel("Dropout", out=True, prepare=_prepare_dropout)
def dropout(inputs, attrs, out=None):
    """Inference-mode Dropout: ``output = data`` (a view when ``out`` is None) and the
    optional ``mask`` all true.

    Without ``out`` the mask is returned as a read-only broadcast view of a single
    ``True`` (no tensor-sized allocation); it is always returned, the executor drops
    it when the node does not declare it.  ``training_mode=True`` with a non-zero ratio
    raises ModelInvalidError.
    """
    if _dropout_training(inputs, attrs):
        raise _invalid("Dropout", _TRAINING_MSG)
    x = inputs[0]
    if out is None:
        return [x, np.broadcast_to(np.True_, x.shape)]
    results = []
    o = _slot(out, 0)
    if o is not None:
        np.copyto(o, x)
    results.append(x if o is None else o)
    m = _slot(out, 1)
    if len(out) > 1:
        if m is not None:
            m.fill(True)
            results.append(m)
        else:
            results.append(np.broadcast_to(np.True_, x.shape))
    return results


# -- Shape / Size -------------------------------------------------------------------------


def _prepare_shape(attrs, consts):
    _check_int_attr(attrs, "Shape", "start")
    _check_int_attr(attrs, "Shape", "end")
    return attrs


@kernel("Shape", out=True, prepare=_prepare_shape)
def shape(inputs, attrs, out=None):
    """The input's shape as a 1-D int64 tensor, sliced by ``start``/``end`` (opset 15;
    negative values count from the back, out-of-range values clamp to ``[0, rank]``)."""
    x = inputs[0]
    start = attrs.get("start", 0)
    end = attrs.get("end")
    dims = np.array(x.shape[int(start):None if end is None else int(end)], dtype=np.int64)
    o = _slot(out, 0)
    if o is None:
        return [dims]
    np.copyto(o, dims)
    return [o]


@kernel("Size", out=True)
def size(inputs, attrs, out=None):
    """The input's element count as a 0-d int64 tensor."""
    n = np.array(inputs[0].size, dtype=np.int64)
    o = _slot(out, 0)
    if o is None:
        return [n]
    np.copyto(o, n)
    return [o]
