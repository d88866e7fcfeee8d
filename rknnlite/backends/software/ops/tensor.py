"""Tensor-manipulation kernels: Concat, Split, Slice, Gather, GatherElements, ScatterND,
Transpose, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, ConstantOfShape, Range,
NonZero, TopK, Einsum and Constant.

Every kernel here returns newly allocated, C-contiguous arrays when ``out`` is None
(never a view of an input) and writes into the preallocated arrays when ``out`` is
given.  Only NonZero has a data-dependent output shape.  Secondary inputs that shape
the output (split sizes, slice bounds, pads, repeats, k...) are read at run time; they
are usually constants, which lets the executor infer output shapes ahead of time.
"""

from __future__ import annotations

import math
import weakref
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import kernel
from .shape import _axes, _axis, _check_int_attr, _ints, _invalid, _optional_input, _slot

def _emit(result: np.ndarray, out, i: int = 0) -> np.ndarray:
    """Copy ``result`` into ``out[i]`` when preallocated (returning it), else return ``result``."""
    o = _slot(out, i)
    if o is None or o is result:
        return result
    np.copyto(o, result)
    return o


def _fresh(view: np.ndarray, out, i: int = 0) -> np.ndarray:
    """``view`` materialised into ``out[i]`` or into a new C-contiguous array."""
    o = _slot(out, i)
    if o is None:
        return np.array(view, order="C", copy=True)
    np.copyto(o, view)
    return o


def _c_target(out, shape, dtype) -> np.ndarray:
    """``out[0]`` when preallocated and C-contiguous (so reshaped views write through),
    else a new array (which :func:`_emit` then copies into a non-contiguous ``out[0]``)."""
    o = _slot(out, 0)
    if o is not None and o.flags.c_contiguous:
        return o
    return np.empty(shape, dtype=dtype)


def _as_float32(a: np.ndarray) -> np.ndarray:
    """Float arrays become float32 (the runtime's float storage type); others unchanged."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.kind == "f" and a.dtype != np.float32 else a


def _check_indices(idx: np.ndarray, n: int) -> np.ndarray:
    """Validate ONNX indices into an axis of size ``n`` (``[-n, n-1]``, an integer type);
    return them non-negative."""
    if idx.dtype.kind not in "iu":
        raise TypeError(f"indices must be int32 or int64, got {idx.dtype}")
    if idx.size == 0:
        return idx
    lo, hi = int(idx.min()), int(idx.max())
    if lo < -n or hi >= n:
        bad = lo if lo < -n else hi
        raise IndexError(f"index {bad} is out of range for an axis of size {n} (expected [{-n}, {n - 1}])")
    return np.where(idx < 0, idx + n, idx) if lo < 0 else idx


# -- Concat / Split ------------------------------------------------------------------------


def _prepare_concat(attrs, consts):
    if "axis" not in attrs:
        raise _invalid("Concat", "attribute 'axis' is required")
    _check_int_attr(attrs, "Concat", "axis")
    return attrs


@kernel("Concat", out=True, prepare=_prepare_concat, joins=True)
def concat(inputs, attrs, out=None):
    """Join the inputs along ``axis`` (negative counts from the back).  With ``out``, inputs
    that already are their slices of ``out[0]`` (the executor had their producers write
    there, ``KernelSpec.joins``) are not copied."""
    xs = [x for x in inputs if x is not None]
    axis = _axis(attrs["axis"], xs[0].ndim, "Concat")
    o = _slot(out, 0)
    if o is None:
        return [np.concatenate(xs, axis=axis)]
    start = 0
    for x in xs:
        part = o[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
        if not _same_view(part, x):
            np.copyto(part, x)
        start += x.shape[axis]
    return [o]


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements of the same memory."""
    # .ctypes.data, not __array_interface__: numpy 2.x keeps memory for good after many
    # __array_interface__ lookups (see model/source.py), and this runs per inference
    return a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype and a.ctypes.data == b.ctypes.data


def _bind_concat(attrs, ins, out):
    """A compiled run's Concat (see ``bind`` in ``ops/elementwise.py``): the output's slices
    are made once, and each input's verdict (already its slice of the output, or to be
    copied there) is kept with a weak reference to the input array, so later runs given the
    same arrays (a program's fixed buffers) compare objects instead of addresses.  An array
    never changes the memory it points at, so the verdict holds for as long as that object is
    passed; nothing is kept alive for it."""
    o = _slot(out, 0)
    if o is None or not ins or not -o.ndim <= int(attrs.get("axis", o.ndim)) < o.ndim:
        return None  # the kernel reports a bad axis at run time
    axis = _axis(attrs["axis"], o.ndim, "Concat")
    parts, start = [], 0
    for shape, _ in ins:
        if len(shape) != o.ndim:
            return None
        parts.append(o[(slice(None),) * axis + (slice(start, start + shape[axis]),)])
        start += shape[axis]
    if start != o.shape[axis]:
        return None
    seen: List[Optional[Tuple[weakref.ref, bool]]] = [None] * len(parts)

    def call(*xs):
        for i, (part, x) in enumerate(zip(parts, xs)):
            known = seen[i]
            if known is not None and known[0]() is x:
                joined = known[1]
            else:
                joined = _same_view(part, x)
                seen[i] = (weakref.ref(x), joined)
            if not joined:
                np.copyto(part, x)
        return out

    return call, ()


concat.bind = _bind_concat


def _prepare_split(attrs, consts):
    _check_int_attr(attrs, "Split", "axis")
    if "num_outputs" in attrs:
        _check_int_attr(attrs, "Split", "num_outputs")
        if int(attrs["num_outputs"]) < 1:
            raise _invalid("Split", f"attribute 'num_outputs' must be >= 1, got {attrs['num_outputs']}")
        if len(consts) > 1 and consts[1] is not None and np.asarray(consts[1]).size:
            raise _invalid("Split", "give either the 'split' input or the 'num_outputs' attribute, not both")
    split = consts[1] if len(consts) > 1 and consts[1] is not None else attrs.get("split")
    if split is not None and any(v < 0 for v in _ints(split)):
        raise _invalid("Split", f"split sizes {_ints(split)} must be non-negative")
    return attrs


def _split_sizes(inputs, attrs, dim: int, n_out) -> List[int]:
    t = _optional_input(inputs, 1)
    if t is not None and np.asarray(t).size:
        sizes = _ints(t)
    elif attrs.get("split"):
        sizes = [int(v) for v in attrs["split"]]
    elif "num_outputs" in attrs:
        n = int(attrs["num_outputs"])
        chunk = -(-dim // n)
        # ONNX: equal chunks of ceil(dim / n), the last one smaller.
        return [max(0, min(chunk, dim - chunk * i)) for i in range(n)]
    elif n_out:
        if dim % n_out:
            raise ValueError(f"axis of size {dim} does not split into {n_out} equal parts")
        return [dim // n_out] * n_out
    else:
        raise _invalid("Split", "cannot tell how many outputs to produce: no 'split' input, no "
                       "'num_outputs' attribute, no preallocated outputs and no '_num_outputs' hint")
    if any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise ValueError(f"sizes {sizes} do not add up to the axis size {dim}")
    return sizes


@kernel("Split", out=True, prepare=_prepare_split)
def split(inputs, attrs, out=None):
    """Split ``input`` along ``axis`` by the ``split`` sizes (input, or attribute before
    opset 13), into ``num_outputs`` chunks of ``ceil(dim / n)`` (opset 18, last chunk
    smaller), or else into equal parts.

    Equal parts need the number of outputs, which the calling convention does not carry:
    it is ``len(out)`` when outputs are preallocated, else ``attrs["_num_outputs"]``
    (set by whoever builds the node's attributes).  Outputs are copies.
    """
    x = inputs[0]
    axis = _axis(attrs.get("axis", 0), x.ndim, "Split")
    n_out = len(out) if out is not None else attrs.get("_num_outputs")
    sizes = _split_sizes(inputs, attrs, x.shape[axis], n_out)
    results = []
    start = 0
    index = [slice(None)] * x.ndim
    for i, s in enumerate(sizes):
        index[axis] = slice(start, start + s)
        results.append(_fresh(x[tuple(index)], out, i))
        start += s
    return results


# -- Slice ---------------------------------------------------------------------------------


def _slice_bounds(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice clamping for one axis, as a Python slice."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return slice(start, end, step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    # end == -1 means "through index 0", which a Python slice spells as None.
    return slice(start, None if end < 0 else end, step)


def _slice_index(x: np.ndarray, starts, ends, axes, steps) -> Tuple[slice, ...]:
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _invalid("Slice", f"starts, ends, axes and steps differ in length "
                       f"({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})")
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, _axes(axes, x.ndim, "Slice"), steps):
        if st == 0:
            raise _invalid("Slice", "a step of 0 is not allowed")
        index[a] = _slice_bounds(s, e, st, x.shape[a])
    return tuple(index)


@kernel("Slice", out=True)
def slice_(inputs, attrs, out=None):
    """``data`` sliced by the ``starts``/``ends``/``axes``/``steps`` inputs (opset >= 10;
    the opset-1 attribute form is also read).  Negative steps, negative indices and
    out-of-range bounds follow ONNX clamping.  The result is a copy."""
    x = inputs[0]
    if len(inputs) > 1 and inputs[1] is not None:
        starts, ends = _ints(inputs[1]), _ints(inputs[2])
        axes = _optional_input(inputs, 3)
        steps = _optional_input(inputs, 4)
        axes = None if axes is None else _ints(axes)
        steps = None if steps is None else _ints(steps)
    elif "starts" in attrs and "ends" in attrs:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = attrs.get("axes")
        steps = None
    else:
        raise _invalid("Slice", "starts and ends are required: inputs 1 and 2 (opset >= 10) or attributes "
                                "(opset < 10); the node has neither")
    return [_fresh(x[_slice_index(x, starts, ends, axes, steps)], out)]


# -- Gather / GatherElements / ScatterND ---------------------------------------------------


def _prepare_axis(op):
    def prepare(attrs, consts):
        _check_int_attr(attrs, op, "axis")
        return attrs

    return prepare


@kernel("Gather", out=True, prepare=_prepare_axis("Gather"))
def gather(inputs, attrs, out=None):
    """``np.take(data, indices, axis)``: output shape ``data.shape[:axis] + indices.shape +
    data.shape[axis+1:]``; negative indices count from the end; out-of-range raises."""
    x, idx = inputs[0], np.asarray(inputs[1])
    axis = _axis(attrs.get("axis", 0), x.ndim, "Gather")
    idx = _check_indices(idx, x.shape[axis])
    o = _slot(out, 0)
    # Indices are validated above, so mode="clip" only serves to write `out` unbuffered.
    if o is None:
        return [np.take(x, idx, axis=axis, mode="clip")]
    np.take(x, idx, axis=axis, out=o, mode="clip")
    return [o]


def _grid(shape, axis: int, idx: np.ndarray) -> Tuple[np.ndarray, ...]:
    """Fancy index picking ``idx`` along ``axis`` and the output's own position elsewhere."""
    grid = []
    for d, n in enumerate(shape):
        if d == axis:
            grid.append(idx)
        else:
            s = [1] * len(shape)
            s[d] = n
            grid.append(np.arange(n).reshape(s))
    return tuple(grid)


@kernel("GatherElements", out=True, prepare=_prepare_axis("GatherElements"))
def gather_elements(inputs, attrs, out=None):
    """``out[i][j][k] = data[indices[i][j][k]][j][k]`` (for axis 0; likewise for others).
    The output has the shape of ``indices``, whose non-axis dimensions may be smaller
    than ``data``'s.  Negative indices count from the end."""
    x, idx = inputs[0], np.asarray(inputs[1])
    axis = _axis(attrs.get("axis", 0), x.ndim, "GatherElements")
    if idx.ndim != x.ndim:
        raise ValueError(f"indices rank {idx.ndim} differs from data rank {x.ndim}")
    idx = _check_indices(idx, x.shape[axis])
    return [_emit(x[_grid(idx.shape, axis, idx)], out)]


_SCATTER_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _prepare_scatternd(attrs, consts):
    r = attrs.get("reduction", "none")
    if r not in ("none",) + tuple(_SCATTER_UFUNCS):
        raise _invalid("ScatterND", f"attribute 'reduction' must be one of none, add, mul, max, min; got {r!r}")
    return attrs


@kernel("ScatterND", out=True, prepare=_prepare_scatternd)
def scatter_nd(inputs, attrs, out=None):
    """A copy of ``data`` with ``updates`` written at the index tuples in the last axis
    of ``indices`` (negative indices count from the end), combined by ``reduction``:
    ``none`` (duplicates: the last write wins), ``add``, ``mul``, ``max`` or ``min``
    (duplicates accumulate)."""
    x, idx, upd = inputs[0], np.asarray(inputs[1]), inputs[2]
    if idx.ndim == 0:
        raise ValueError("indices must have rank >= 1 (index tuples along the last axis), got a scalar")
    k = idx.shape[-1]
    if k > x.ndim:
        raise ValueError(f"index tuples of length {k} for a rank-{x.ndim} tensor")
    expected = idx.shape[:-1] + x.shape[k:]
    if upd.shape != expected:
        raise ValueError(f"updates shape {upd.shape}, expected {expected}")
    o = _slot(out, 0)
    res = np.array(x, copy=True) if o is None else o
    if o is not None:
        np.copyto(o, x)
    where = tuple(_check_indices(idx[..., i], x.shape[i]) for i in range(k))
    r = attrs.get("reduction", "none")
    if r == "none":
        res[where] = upd
    else:
        _SCATTER_UFUNCS[r].at(res, where, upd)
    return [res]


# -- Transpose / Expand / Tile -------------------------------------------------------------


def _prepare_transpose(attrs, consts):
    perm = attrs.get("perm")
    if perm is not None and sorted(int(p) for p in perm) != list(range(len(perm))):
        raise _invalid("Transpose", f"attribute 'perm' must be a permutation of 0..{len(perm) - 1}, got {list(perm)}")
    return attrs


@kernel("Transpose", out=True, prepare=_prepare_transpose)
def transpose(inputs, attrs, out=None):
    """Permute the axes by ``perm`` (default: reversed).  The result is a C-contiguous copy."""
    x = inputs[0]
    perm = attrs.get("perm")
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    elif len(perm) != x.ndim:
        raise _invalid("Transpose", f"perm {list(perm)} has {len(perm)} entries for a rank-{x.ndim} input")
    return [_fresh(x.transpose([int(p) for p in perm]), out)]


@kernel("Expand", out=True)
def expand(inputs, attrs, out=None):
    """Broadcast ``input`` against the ``shape`` input (numpy bidirectional broadcasting:
    the output shape is ``broadcast(input.shape, shape)``)."""
    x = inputs[0]
    shape = np.broadcast_shapes(x.shape, tuple(_ints(inputs[1])))
    o = _slot(out, 0)
    if o is None:
        o = np.empty(shape, dtype=x.dtype)
    np.copyto(o, x)
    return [o]


@kernel("Tile", out=True)
def tile(inputs, attrs, out=None):
    """Repeat ``input`` ``repeats[i]`` times along each axis ``i``.

    Writes through an interleaved ``(r0, d0, r1, d1, ...)`` view of the output, so the
    data is copied exactly once.
    """
    x = inputs[0]
    reps = _ints(inputs[1])
    if len(reps) != x.ndim:
        raise ValueError(f"{len(reps)} repeats for a rank-{x.ndim} input")
    if any(r < 0 for r in reps):
        raise ValueError(f"repeats {reps} must be non-negative")
    shape = tuple(d * r for d, r in zip(x.shape, reps))
    o = _slot(out, 0)
    res = np.empty(shape, dtype=x.dtype) if o is None else o
    if res.size:
        inter = [v for r, d in zip(reps, x.shape) for v in (r, d)]
        src = x.reshape([v for d in x.shape for v in (1, d)])
        if res.flags.c_contiguous:
            np.copyto(res.reshape(inter), src)
        else:
            np.copyto(res, np.tile(x, reps))
    return [res]


# -- Pad -----------------------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _prepare_pad(attrs, consts):
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise _invalid("Pad", f"attribute 'mode' must be one of {', '.join(_PAD_MODES)}; got {mode!r}")
    return attrs


def _pad_into(dst: np.ndarray, src: np.ndarray, before, after, mode: str, value) -> None:
    """Fill ``dst`` with ``src`` padded by non-negative ``before``/``after`` per axis.

    Works in place on ``dst``: the interior is copied once, then the borders are filled
    axis by axis from regions already written.  Needs ``before, after <= n - 1`` for
    ``reflect`` and ``<= n`` for ``wrap`` (the caller falls back to np.pad otherwise).
    """
    r = src.ndim
    interior = tuple(slice(b, b + n) for b, n in zip(before, src.shape))
    dst[interior] = src
    for ax in range(r):
        b, a, n = before[ax], after[ax], src.shape[ax]
        if b == 0 and a == 0:
            continue
        lo, hi = b, b + n
        if mode == "constant":
            # Disjoint border slabs: interior on earlier axes, everything on later ones.
            head = interior[:ax]
            tail = (slice(None),) * (r - ax - 1)
            dst[head + (slice(0, lo),) + tail] = value
            dst[head + (slice(hi, hi + a),) + tail] = value
            continue
        # Filled so far: everything on earlier axes, the interior on this and later ones.
        head = (slice(None),) * ax
        tail = interior[ax + 1:]

        def at(sl, head=head, tail=tail):
            return head + (sl,) + tail

        if mode == "edge":
            dst[at(slice(0, lo))] = dst[at(slice(lo, lo + 1))]
            dst[at(slice(hi, hi + a))] = dst[at(slice(hi - 1, hi))]
        elif mode == "reflect":
            dst[at(slice(0, lo))] = dst[at(slice(lo + b, lo, -1))]
            stop = hi - 2 - a
            dst[at(slice(hi, hi + a))] = dst[at(slice(hi - 2, stop if stop >= 0 else None, -1))]
        else:  # wrap
            dst[at(slice(0, lo))] = dst[at(slice(hi - b, hi))]
            dst[at(slice(hi, hi + a))] = dst[at(slice(lo, lo + a))]


@kernel("Pad", out=True, prepare=_prepare_pad)
def pad(inputs, attrs, out=None):
    """Pad ``data`` by ``pads`` (``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``, input
    from opset 11, attribute before), over ``axes`` (opset 18 input; default all).

    Modes: ``constant`` (``constant_value`` input, default 0), ``reflect`` (mirror
    without repeating the edge), ``edge`` (repeat the edge), ``wrap`` (periodic).
    Negative pads crop.
    """
    x = inputs[0]
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise _invalid("Pad", f"attribute 'mode' must be one of {', '.join(_PAD_MODES)}; got {mode!r}")
    t = _optional_input(inputs, 1)
    pads = _ints(t) if t is not None else [int(p) for p in attrs.get("pads", [])]
    cv = _optional_input(inputs, 2)
    if cv is not None and np.asarray(cv).size:
        value = np.asarray(cv).reshape(-1)[0]
    else:
        value = attrs.get("value", 0)
    ax_t = _optional_input(inputs, 3)
    axes = list(range(x.ndim)) if ax_t is None else _axes(_ints(ax_t), x.ndim, "Pad")
    if len(pads) != 2 * len(axes):
        raise _invalid("Pad", f"{len(pads)} pads for {len(axes)} axes (expected {2 * len(axes)})")
    before, after = [0] * x.ndim, [0] * x.ndim
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    shape = tuple(b + n + e for b, n, e in zip(before, x.shape, after))
    if any(d < 0 for d in shape):
        raise ValueError(f"pads {pads} crop more than the input shape {x.shape}")
    # Negative pads crop first; what remains is non-negative padding.
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for b, e, n in zip(before, after, x.shape))
    src = x[crop]
    before = [max(b, 0) for b in before]
    after = [max(e, 0) for e in after]
    if mode != "constant":
        for b, e, n in zip(before, after, src.shape):
            if (b or e) and n == 0:
                raise ValueError(f"cannot {mode}-pad an axis of size 0")
    fits = all(
        mode in ("constant", "edge")
        or (mode == "reflect" and max(b, e) <= n - 1)
        or (mode == "wrap" and max(b, e) <= n)
        for b, e, n in zip(before, after, src.shape)
    )
    o = _slot(out, 0)
    if not fits:
        return [_emit(np.pad(src, list(zip(before, after)), mode=mode), out)]
    res = np.empty(shape, dtype=x.dtype) if o is None else o
    _pad_into(res, src, before, after, mode, value)
    return [res]


# -- DepthToSpace / SpaceToDepth -----------------------------------------------------------


def _prepare_blocks(op):
    def prepare(attrs, consts):
        if "blocksize" not in attrs:
            raise _invalid(op, "attribute 'blocksize' is required")
        _check_int_attr(attrs, op, "blocksize")
        if int(attrs["blocksize"]) < 1:
            raise _invalid(op, f"attribute 'blocksize' must be >= 1, got {attrs['blocksize']}")
        mode = attrs.get("mode", "DCR")
        if mode not in ("DCR", "CRD"):
            raise _invalid(op, f"attribute 'mode' must be 'DCR' or 'CRD', got {mode!r}")
        return attrs

    return prepare


def _blocks_args(op, x, attrs):
    if x.ndim != 4:
        raise ValueError(f"input must be 4-D NCHW, got shape {x.shape}")
    bs = int(attrs["blocksize"])
    mode = attrs.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise _invalid(op, f"attribute 'mode' must be 'DCR' or 'CRD', got {mode!r}")
    return bs, mode


@kernel("DepthToSpace", out=True, prepare=_prepare_blocks("DepthToSpace"))
def depth_to_space(inputs, attrs, out=None):
    """NCHW ``(N, C, H, W)`` -> ``(N, C/b², H·b, W·b)``.  ``DCR``: channels are ordered
    (row offset, column offset, depth); ``CRD``: (depth, row offset, column offset)."""
    x = inputs[0]
    bs, mode = _blocks_args("DepthToSpace", x, attrs)
    n, c, h, w = x.shape
    if c % (bs * bs):
        raise ValueError(f"{c} channels are not a multiple of blocksize² = {bs * bs}")
    c2 = c // (bs * bs)
    if mode == "DCR":
        view = x.reshape(n, bs, bs, c2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        view = x.reshape(n, c2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    res = _c_target(out, (n, c2, h * bs, w * bs), x.dtype)
    np.copyto(res.reshape(n, c2, h, bs, w, bs), view)
    return [_emit(res, out)]


@kernel("SpaceToDepth", out=True, prepare=_prepare_blocks("SpaceToDepth"))
def space_to_depth(inputs, attrs, out=None):
    """NCHW ``(N, C, H, W)`` -> ``(N, C·b², H/b, W/b)``, the inverse of DepthToSpace in the
    same ``mode`` (``DCR`` default; ``CRD`` from opset 28)."""
    x = inputs[0]
    bs, mode = _blocks_args("SpaceToDepth", x, attrs)
    n, c, h, w = x.shape
    if h % bs or w % bs:
        raise ValueError(f"spatial size {h}x{w} is not a multiple of blocksize {bs}")
    h2, w2 = h // bs, w // bs
    blocks = x.reshape(n, c, h2, bs, w2, bs)
    res = _c_target(out, (n, c * bs * bs, h2, w2), x.dtype)
    if mode == "DCR":
        np.copyto(res.reshape(n, bs, bs, c, h2, w2), blocks.transpose(0, 3, 5, 1, 2, 4))
    else:
        np.copyto(res.reshape(n, c, bs, bs, h2, w2), blocks.transpose(0, 1, 3, 5, 2, 4))
    return [_emit(res, out)]


# -- ConstantOfShape / Range / NonZero / Constant ------------------------------------------


def _prepare_constant_of_shape(attrs, consts):
    v = attrs.get("value")
    if v is not None and np.asarray(v).size != 1:
        raise _invalid("ConstantOfShape", f"attribute 'value' must hold exactly one element, "
                       f"got shape {np.asarray(v).shape}")
    return attrs


@kernel("ConstantOfShape", out=True, prepare=_prepare_constant_of_shape)
def constant_of_shape(inputs, attrs, out=None):
    """A tensor of the ``input`` shape filled with the one-element ``value`` attribute
    (default float32 0; float values are stored as float32)."""
    v = attrs.get("value")
    v = np.zeros(1, np.float32) if v is None else _as_float32(np.asarray(v))
    shape = tuple(_ints(inputs[0]))
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in {shape}")
    o = _slot(out, 0)
    res = np.empty(shape, dtype=v.dtype) if o is None else o
    res.fill(v.reshape(-1)[0])
    return [res]


@kernel("Range", out=True)
def range_(inputs, attrs, out=None):
    """``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``, in the
    inputs' type (floats computed in double precision, stored as float32)."""
    start, limit, delta = (np.asarray(t).reshape(-1)[0] for t in inputs[:3])
    dtype = np.asarray(inputs[0]).dtype
    if delta == 0:
        raise ValueError("delta must not be 0")
    if dtype.kind in "iu":
        s, l, d = int(start), int(limit), int(delta)
        n = max(-((s - l) // d), 0)
        values = s + np.arange(n, dtype=np.int64) * d
    else:
        dtype = np.dtype(np.float32)
        s, l, d = float(start), float(limit), float(delta)
        n = max(int(math.ceil((l - s) / d)), 0)
        values = s + np.arange(n, dtype=np.float64) * d
    o = _slot(out, 0)
    if o is None:
        return [values.astype(dtype)]
    np.copyto(o, values, casting="unsafe")
    return [o]


@kernel("NonZero", data_dependent=True)
def nonzero(inputs, attrs, out=None):
    """Indices of the non-zero elements, int64 of shape ``(rank, count)`` in row-major
    order.  A 0-d input is treated as a 1-element 1-D tensor (shape ``(1, count)``)."""
    x = inputs[0]
    if x.ndim == 0:
        x = x.reshape(1)
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints")
_CONSTANT_UNSUPPORTED = ("sparse_value", "value_string", "value_strings")


def _constant_value(attrs) -> np.ndarray:
    given = [k for k in _CONSTANT_ATTRS + _CONSTANT_UNSUPPORTED if k in attrs]
    if len(given) != 1:
        raise _invalid("Constant", f"exactly one value attribute is required ({', '.join(_CONSTANT_ATTRS)}); "
                       f"got {given or 'none'}")
    key = given[0]
    if key in _CONSTANT_UNSUPPORTED:
        what = "sparse tensors" if key == "sparse_value" else "string tensors"
        raise _invalid("Constant", f"attribute {key!r} is not supported ({what} have no NPU tensor type)")
    v = attrs[key]
    if key == "value":
        return _as_float32(np.asarray(v))
    if key in ("value_float", "value_floats"):
        return np.asarray(v, dtype=np.float32)
    return np.asarray(v, dtype=np.int64)


def _prepare_constant(attrs, consts):
    attrs = dict(attrs)
    attrs["_value"] = _constant_value(attrs)
    return attrs


@kernel("Constant", out=True, prepare=_prepare_constant)
def constant(inputs, attrs, out=None):
    """The node's constant (``value`` tensor; ``value_float(s)`` as float32;
    ``value_int(s)`` as int64), a fresh copy on each call when ``out`` is None."""
    v = attrs.get("_value")
    if v is None:
        v = _constant_value(attrs)
    o = _slot(out, 0)
    if o is None:
        return [np.array(v, copy=True)]
    np.copyto(o, v)
    return [o]


# -- TopK ----------------------------------------------------------------------------------


def _prepare_topk(attrs, consts):
    _check_int_attr(attrs, "TopK", "axis")
    _check_int_attr(attrs, "TopK", "largest", {0, 1})
    _check_int_attr(attrs, "TopK", "sorted", {0, 1})
    if len(consts) > 1 and consts[1] is not None:
        k = _ints(consts[1])
        if len(k) != 1 or k[0] < 0:
            raise _invalid("TopK", f"input 'K' must be a single non-negative integer, got {k}")
    return attrs


@kernel("TopK", out=True, prepare=_prepare_topk)
def topk(inputs, attrs, out=None):
    """The ``k`` largest (``largest=1``) or smallest elements along ``axis`` and their
    int64 indices, sorted best first; equal values keep ascending index order.

    ``k`` comes from the second input (opset >= 10) or the ``k`` attribute.  Results are
    always sorted (``sorted=0`` leaves the order unspecified, so sorted is valid).
    """
    x = inputs[0]
    kt = _optional_input(inputs, 1)
    k = _ints(kt)[0] if kt is not None else int(attrs["k"])
    axis = _axis(attrs.get("axis", -1), x.ndim, "TopK")
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"k={k} is out of range for an axis of size {n}")
    xm = np.moveaxis(x, axis, -1)
    if attrs.get("largest", 1):
        # A stable ascending sort of the reversed axis, read backwards, orders by value
        # descending with ties in ascending original index.
        order = np.argsort(xm[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
        idx = (n - 1) - order
    else:
        idx = np.argsort(xm, axis=-1, kind="stable")[..., :k]
    idx = idx.astype(np.int64, copy=False)
    values = np.take_along_axis(xm, idx, axis=-1)
    values = np.moveaxis(values, -1, axis)
    idx = np.moveaxis(idx, -1, axis)
    return [_fresh(values, out, 0), _fresh(idx, out, 1)]


# -- Einsum --------------------------------------------------------------------------------


def _prepare_einsum(attrs, consts):
    eq = attrs.get("equation")
    if not isinstance(eq, str) or not eq.replace(" ", ""):
        raise _invalid("Einsum", f"attribute 'equation' must be a non-empty string, got {eq!r}")
    body = eq.replace(" ", "").replace("...", "").replace("->", "")
    if any(not (ch.isascii() and (ch.isalpha() or ch == ",")) for ch in body):
        raise _invalid("Einsum", f"equation {eq!r} may only hold letters, ',', '->' and '...'")
    if eq.count("->") > 1:
        raise _invalid("Einsum", f"equation {eq!r} has more than one '->'")
    lhs = eq.replace(" ", "").split("->")[0]
    if consts and len(lhs.split(",")) != len(consts):
        raise _invalid("Einsum", f"equation {eq!r} has {len(lhs.split(','))} operand terms for {len(consts)} inputs")
    attrs = dict(attrs)
    attrs["_paths"] = {}
    return attrs


def _einsum_labels(eq: str, shapes) -> Tuple[List[List[str]], List[str]]:
    """Per-operand label lists and the output label list, with ``...`` expanded into
    labels ``"#0"``, ``"#1"``... aligned from the right (numpy broadcasting)."""
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"{len(terms)} operand terms for {len(shapes)} inputs")
    n_ell = 0
    for term, shape in zip(terms, shapes):
        if "..." in term:
            n_ell = max(n_ell, len(shape) - (len(term) - 3))
    ell = [f"#{i}" for i in range(n_ell)]

    def expand(term: str, ndim) -> List[str]:
        if "..." in term:
            left, _, right = term.partition("...")
            e = n_ell if ndim is None else ndim - len(left) - len(right)
            return list(left) + ell[n_ell - e:] + list(right)
        return list(term)

    ops = [expand(t, len(s)) for t, s in zip(terms, shapes)]
    for labels, shape in zip(ops, shapes):
        if len(labels) != len(shape):
            raise ValueError(f"term for an operand of rank {len(shape)} has {len(labels)} labels")
    if arrow:
        res = expand(rhs, None)
    else:
        counts: Dict[str, int] = {}
        for t in terms:
            for ch in t.replace("...", ""):
                counts[ch] = counts.get(ch, 0) + 1
        res = ell + sorted(ch for ch, c in counts.items() if c == 1)
    return ops, res


def _einsum_matmul(a, b, la, lb, lo, o):
    """Two-operand einsum as one batched matmul, or ``None`` when the pattern does not fit.

    Labels are classified as batch (in both operands and the output), contracted (in both,
    not in the output) and kept (in one operand and the output); labels found in a single
    operand only are summed out first.  Repeated labels or size-1 broadcasting fall back.
    """
    if len(set(la)) != len(la) or len(set(lb)) != len(lb) or len(set(lo)) != len(lo):
        return None
    size = {}
    for labels, shape in ((la, a.shape), (lb, b.shape)):
        for lab, n in zip(labels, shape):
            if size.setdefault(lab, n) != n:
                return None
    if any(lab not in size for lab in lo):
        return None
    out_set = set(lo)
    only_a = [i for i, lab in enumerate(la) if lab not in lb and lab not in out_set]
    if only_a:
        a = a.sum(axis=tuple(only_a), dtype=a.dtype)
        la = [lab for i, lab in enumerate(la) if i not in only_a]
    only_b = [i for i, lab in enumerate(lb) if lab not in la and lab not in out_set]
    if only_b:
        b = b.sum(axis=tuple(only_b), dtype=b.dtype)
        lb = [lab for i, lab in enumerate(lb) if i not in only_b]
    batch = [lab for lab in lo if lab in la and lab in lb]
    keep_a = [lab for lab in lo if lab in la and lab not in lb]
    keep_b = [lab for lab in lo if lab in lb and lab not in la]
    contract = [lab for lab in la if lab in lb and lab not in out_set]
    bsz = int(np.prod([size[lab] for lab in batch], dtype=np.int64))
    m = int(np.prod([size[lab] for lab in keep_a], dtype=np.int64))
    n = int(np.prod([size[lab] for lab in keep_b], dtype=np.int64))
    k = int(np.prod([size[lab] for lab in contract], dtype=np.int64))
    a2 = a.transpose([la.index(lab) for lab in batch + keep_a + contract]).reshape(bsz, m, k)
    b2 = b.transpose([lb.index(lab) for lab in batch + contract + keep_b]).reshape(bsz, k, n)
    order = batch + keep_a + keep_b
    if order == lo and o is not None and o.flags.c_contiguous:
        np.matmul(a2, b2, out=o.reshape(bsz, m, n))
        return o
    res = np.matmul(a2, b2).reshape([size[lab] for lab in order])
    if order != lo:
        res = res.transpose([order.index(lab) for lab in lo])
    if o is not None:
        np.copyto(o, res)
        return o
    return res if res.flags.c_contiguous else res.copy()


@kernel("Einsum", out=True, prepare=_prepare_einsum)
def einsum(inputs, attrs, out=None):
    """Einstein summation over the inputs as the ``equation`` says (explicit ``->`` or
    implicit form, ``...`` broadcasting, upper- and lower-case labels).

    Two operands of a matmul-like pattern (matmul, batch matmul, attention's
    ``bhqd,bhkd->bhqk``, outer products) run as one batched BLAS matmul; one operand
    (transpose, diagonal, trace, sums) runs through ``np.einsum``; three or more use
    ``np.einsum`` with an optimised contraction path cached per input shapes.
    The result is always a fresh array (never a view of an input).
    """
    eq = attrs["equation"].replace(" ", "")
    ops = list(inputs)
    o = _slot(out, 0)
    if len(ops) == 2:
        labels, lo = _einsum_labels(eq, [x.shape for x in ops])
        res = _einsum_matmul(ops[0], ops[1], labels[0], labels[1], lo, o)
        if res is not None:
            return [res]
    if len(ops) <= 2:
        res = np.einsum(eq, *ops, out=o)
    else:
        paths = attrs.get("_paths")
        key = tuple(x.shape for x in ops)
        path = None if paths is None else paths.get(key)
        if path is None:
            path = np.einsum_path(eq, *ops, optimize="greedy")[0]
            if paths is not None:
                paths[key] = path
        res = np.einsum(eq, *ops, out=o, optimize=path)
    if o is None and not res.flags.owndata:
        res = np.array(res, copy=True)  # single-operand einsum returns views (transposes, diagonals)
    return [res]
