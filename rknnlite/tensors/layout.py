"""Tensor layouts of the runtime: NCHW, NHWC, NC1HWC2 and UNDEFINED.

What the NPU keeps natively, per platform, and copies between the layouts.

**NC1HWC2** (Rockchip RKNN2 SDK user guide, "Tensoren und Datenlayouts"; facts §5): a 5-D
layout ``(N, C1, H, W, C2)`` whose memory order from low to high address is C2, W, H, C1,
N.  Channels are cut into ``C1 = ceil(C / C2)`` blocks of ``C2`` lanes; when ``C`` is not a
multiple of ``C2`` the last block's extra lanes are alignment padding that carries no
data.  Example from the guide: a ``(1, 13, 4, 4)`` int8 feature map on RK3568 is
``(1, 2, 4, 4, 8)``, and in the second block only the first 5 lanes are valid.

``C2`` depends on the platform and element type: int8 8, fp16 4, int16 4 on RK3566/RK3568;
16, 8, 8 on RK3588, RK3562, RV1106 and RV1103.  In bytes, a C2 block is 8 bytes wide on
RK3566/RK3568 and 16 bytes on the others, whatever the type; :func:`c2_for` uses that rule
(see there for types and platforms the guide does not list).

**Width alignment** (facts §5 "Zero-copy"): NHWC inputs the NPU reads directly have their
rows padded to a width (``w_stride``, in pixels) that is a multiple of 8 on RK3566/RK3568
and of 16 on RK3562, RK3588, RV1106 and RV1103.

Every conversion function here copies: it reads its input array and writes a new array (or
the caller's preallocated ``out``, which it returns).  None returns a view of its input.
Inputs that are not C-contiguous are first made contiguous (one extra copy).  The loops are
byte copies in the compiled ``rknnlite._native.layout_kernels`` module, run without the
GIL, so they serve every dtype the runtime uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from .._native import layout_kernels as _k
from ..constants import TensorFormat, TensorType
from ..errors import InvalidParamError

__all__ = [
    "PLATFORMS",
    "c2_for",
    "width_alignment",
    "NativeLayout",
    "native_layout",
    "size_with_stride",
    "nchw_to_nc1hwc2",
    "nhwc_to_nc1hwc2",
    "nc1hwc2_to_nchw",
    "nc1hwc2_to_nhwc",
    "pad_width",
    "unpad_width",
]

# Per platform: (bytes in one C2 block, width alignment of NHWC inputs in pixels).
# rk3566/rk3568 and rk3588/rk3562/rv1106/rv1103 come from the SDK guide (facts §5).  The guide
# gives no values for the newer SoCs (rk3576, rv1126b, rk2118, rv1106b, rv1103b); they get
# RK3588's values, an assumption to revisit when a board shows otherwise.
_PLATFORM_TABLE = {
    "rk3566": (8, 8),
    "rk3568": (8, 8),
    "rk3588": (16, 16),
    "rk3562": (16, 16),
    "rv1106": (16, 16),
    "rv1103": (16, 16),
    "rk3576": (16, 16),  # not in the guide: RK3588's values
    "rv1126b": (16, 16),  # not in the guide: RK3588's values
    "rk2118": (16, 16),  # not in the guide: RK3588's values
    "rv1106b": (16, 16),  # not in the guide: RK3588's values
    "rv1103b": (16, 16),  # not in the guide: RK3588's values
}

#: Platform names :func:`c2_for`, :func:`width_alignment` and :func:`native_layout` know.
PLATFORMS: Tuple[str, ...] = tuple(sorted(_PLATFORM_TABLE))

# Bits per element of each TensorType (INT4 packs two elements per byte).
_TYPE_BITS = {
    TensorType.FLOAT32: 32,
    TensorType.FLOAT16: 16,
    TensorType.INT8: 8,
    TensorType.UINT8: 8,
    TensorType.INT16: 16,
    TensorType.UINT16: 16,
    TensorType.INT32: 32,
    TensorType.UINT32: 32,
    TensorType.INT64: 64,
    TensorType.BOOL: 8,
    TensorType.INT4: 4,
    TensorType.BFLOAT16: 16,
}

# dtypes the conversions accept (every fixed-size numeric type numpy has, and bool).
_DTYPES = tuple(np.dtype(t) for t in ("bool", "int8", "uint8", "int16", "uint16", "float16", "int32",
                                      "uint32", "float32", "int64", "uint64", "float64"))


# ---------------------------------------------------------------------------- platform rules


def _platform(platform: str) -> Tuple[int, int]:
    """``(C2 block bytes, width alignment)`` of ``platform`` (case-insensitive)."""
    key = platform.strip().lower() if isinstance(platform, str) else None
    if key not in _PLATFORM_TABLE:
        raise InvalidParamError(f"unknown target platform {platform!r}; expected one of {', '.join(PLATFORMS)}",
                                op="layout")
    return _PLATFORM_TABLE[key]


def _type(type) -> TensorType:
    """``type`` as a :class:`TensorType` (an int value is accepted too)."""
    if isinstance(type, bool):
        raise InvalidParamError(f"type must be a TensorType, got {type!r}", op="layout")
    try:
        return TensorType(type)
    except (ValueError, TypeError):
        names = ", ".join(t.name for t in TensorType)
        raise InvalidParamError(f"type must be a TensorType ({names}), got {type!r}", op="layout") from None


def c2_for(platform: str, type) -> int:
    """The ``C2`` (lanes per channel block) of NC1HWC2 tensors of ``type`` on ``platform``.

    From the SDK guide: int8 8, fp16 4, int16 4 on RK3566/RK3568; 16, 8, 8 on RK3588,
    RK3562, RV1106 and RV1103.  That is one C2 block of 8 bytes (RK3566/RK3568) or 16
    bytes (the others), and the rule ``C2 = block bytes / element bytes`` gives every other
    type: uint8/bool like int8; uint16 and bfloat16 like fp16; 4-byte types 2 / 4 and
    int64 1 / 2 -- these last are derived from the rule, not stated by the guide.  INT4 has
    no NC1HWC2 form (InvalidParamError).  Platforms the guide does not list (rk3576,
    rv1126b, rk2118, rv1106b, rv1103b) use RK3588's values, an assumption.

    Args:
        platform: SoC name, case-insensitive (``"rk3588"``); see :data:`PLATFORMS`.
        type: :class:`TensorType` of the elements.

    Raises:
        InvalidParamError: unknown platform (the message lists the known ones), a value that
            is not a TensorType, or INT4.
    """
    block, _ = _platform(platform)
    t = _type(type)
    bits = _TYPE_BITS[t]
    if bits < 8:
        raise InvalidParamError(f"{t.name} tensors have no NC1HWC2 layout; expected a type of 8 bits or more",
                                op="layout")
    return max(1, block * 8 // bits)


def width_alignment(platform: str) -> int:
    """Pixels the row width (``w_stride``) of an NHWC input the NPU reads directly is rounded
    up to: 8 on RK3566/RK3568, 16 on RK3562, RK3588, RV1106 and RV1103 (SDK guide, zero-copy
    conditions), and 16 on platforms the guide does not list (RK3588's value, an assumption).

    Raises:
        InvalidParamError: unknown platform (the message lists the known ones).
    """
    return _platform(platform)[1]


# ---------------------------------------------------------------------------- sizes


def _dims(dims: Sequence[int], what: str = "dims") -> Tuple[int, ...]:
    """``dims`` as a tuple of ints (``-1`` allowed for a dynamic dim)."""
    try:
        items = list(dims)
        out = tuple(int(d) for d in items)
    except (TypeError, ValueError):
        raise InvalidParamError(f"{what} must be a sequence of ints, got {dims!r}", op="layout") from None
    if any(isinstance(d, (bool, float)) for d in items) or any(d < -1 for d in out):
        raise InvalidParamError(f"{what} must be ints >= 0 (or -1 for a dynamic dim), got {items!r}",
                                op="layout")
    return out


def _format(fmt) -> TensorFormat:
    if isinstance(fmt, bool):
        raise InvalidParamError(f"fmt must be a TensorFormat, got {fmt!r}", op="layout")
    try:
        return TensorFormat(fmt)
    except (ValueError, TypeError):
        raise InvalidParamError(f"fmt must be a TensorFormat (NCHW, NHWC, NC1HWC2, UNDEFINED), got {fmt!r}",
                                op="layout") from None


def _stride(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidParamError(f"{what} must be an int >= 0 (0 = no padding), got {value!r}", op="layout")
    return int(value)


_RANK = {TensorFormat.NCHW: 4, TensorFormat.NHWC: 4, TensorFormat.NC1HWC2: 5}


def size_with_stride(dims: Sequence[int], fmt, type, w_stride: int, h_stride: int = 0) -> int:
    """Bytes a tensor takes in memory including row padding (``rknn_tensor_attr.size_with_stride``).

    ``dims`` are in ``fmt`` order.  ``w_stride`` replaces the width W and ``h_stride`` the
    height H in the product (both in elements; 0 means "no padding": W or H itself):

    * NHWC ``(N, H, W, C)``: ``N * h_stride * w_stride * C``;
    * NCHW ``(N, C, H, W)``: ``N * C * h_stride * w_stride``;
    * NC1HWC2 ``(N, C1, H, W, C2)``: ``N * C1 * h_stride * w_stride * C2``;
    * UNDEFINED (any rank): the product of ``dims``; strides do not apply.

    times the element size (INT4: two elements per byte, rounded up).  A dynamic dim
    (``-1``) counts as 0, so the size is 0 until shapes are set (as ``TensorAttr.n_elems``).

    Raises:
        InvalidParamError: dims of the wrong rank for ``fmt`` (4 for NCHW/NHWC, 5 for
            NC1HWC2), negative strides, a stride smaller than the dim it pads, or a bad
            ``fmt``/``type``.
    """
    d = [max(v, 0) for v in _dims(dims)]
    f = _format(fmt)
    bits = _TYPE_BITS[_type(type)]
    ws = _stride(w_stride, "w_stride")
    hs = _stride(h_stride, "h_stride")
    if f in _RANK:
        if len(d) != _RANK[f]:
            raise InvalidParamError(f"{f.name} dims must have {_RANK[f]} entries, got {list(dims)!r}", op="layout")
        h_axis, w_axis = {TensorFormat.NCHW: (2, 3), TensorFormat.NHWC: (1, 2), TensorFormat.NC1HWC2: (2, 3)}[f]
        for axis, stride, name in ((w_axis, ws, "w_stride"), (h_axis, hs, "h_stride")):
            if stride:
                if stride < d[axis]:
                    raise InvalidParamError(f"{name} {stride} is smaller than the dim it pads ({d[axis]}) in "
                                            f"{f.name} dims {list(dims)!r}", op="layout")
                d[axis] = stride
    return (math.prod(d) * bits + 7) // 8


# ---------------------------------------------------------------------------- native layouts


@dataclass(frozen=True)
class NativeLayout:
    """How the NPU keeps one tensor natively (what ``NATIVE_*_ATTR`` queries report).

    Attributes:
        fmt: :class:`TensorFormat` of the native tensor.
        dims: shape in ``fmt`` order (NC1HWC2: ``(N, C1, H, W, C2)``; NHWC: ``(N, H, W, C)``).
        w_stride: row width in elements including padding (NHWC inputs: the width rounded up
            to :func:`width_alignment`); equal to W for NCHW/NC1HWC2, 0 for UNDEFINED.
        h_stride: 0 (the height itself; the runtime only reads it when the caller sets it).
        size_with_stride: bytes of the native tensor including padding (:func:`size_with_stride`).
    """

    fmt: TensorFormat
    dims: Tuple[int, ...]
    w_stride: int
    h_stride: int
    size_with_stride: int


def native_layout(dims: Sequence[int], fmt, type, platform: str, *, is_input: bool,
                  nhwc: bool = False) -> NativeLayout:
    """The layout the NPU keeps a tensor in natively on ``platform``.

    ``dims``/``fmt`` describe the model tensor (``fmt`` NCHW or NHWC for 4-D tensors,
    UNDEFINED otherwise); ``type`` is the element type of the native tensor (INT8 for an
    int8-quantized tensor, FLOAT16 for an fp16 one).  Rules, in order, with their sources
    (facts §5, from the SDK user guide):

    1. Not 4-D, or a 4-D tensor in UNDEFINED layout: UNDEFINED, dims unchanged, w_stride
       0 ("UNDEFINED (non-4-D, model order)", I/O conversion).
    2. 4-D BOOL or INT64: NCHW, w_stride = W ("NCHW (bool/int64 4-D)", I/O conversion; the
       NPU does not compute these types, so they keep the model layout).
    3. ``nhwc=False`` (``NATIVE_INPUT_ATTR`` / ``NATIVE_OUTPUT_ATTR``):

       * inputs with 1, 3 or 4 channels: NHWC ``(N, H, W, C)``, w_stride = W rounded up to
         :func:`width_alignment` ("NHWC (1/3/4 channels; with pass_through mind w_stride)",
         I/O conversion; width alignment, zero-copy conditions);
       * every other 4-D tensor: NC1HWC2 ``(N, ceil(C/C2), H, W, C2)`` with C2 from
         :func:`c2_for`, w_stride = W ("NC1HWC2 native (other channel counts)", I/O
         conversion; the NC1HWC2 section).

    4. ``nhwc=True`` (``NATIVE_NHWC_INPUT_ATTR`` / ``NATIVE_NHWC_OUTPUT_ATTR``): every 4-D
       tensor is NHWC ``(N, H, W, C)``; inputs get the aligned w_stride of rule 3 (the
       NPU reads their rows directly), outputs w_stride = W.

    ``h_stride`` is always 0 (the height itself).

    Raises:
        InvalidParamError: a dynamic (-1) dim (set the input shapes first), 4-D dims in a
            format other than NCHW/NHWC/UNDEFINED, an unknown platform or a bad type.
    """
    d = _dims(dims)
    f = _format(fmt)
    t = _type(type)
    _platform(platform)
    if any(v < 0 for v in d):
        raise InvalidParamError(f"dims {list(d)} have a dynamic (-1) dim and no native layout; "
                                "set the input shapes first", op="layout")

    def make(nfmt: TensorFormat, ndims: Tuple[int, ...], w_stride: int) -> NativeLayout:
        return NativeLayout(nfmt, ndims, w_stride, 0, size_with_stride(ndims, nfmt, t, w_stride))

    if len(d) != 4 or f == TensorFormat.UNDEFINED:
        return make(TensorFormat.UNDEFINED, d, 0)
    if f == TensorFormat.NCHW:
        n, c, h, w = d
    elif f == TensorFormat.NHWC:
        n, h, w, c = d
    else:
        raise InvalidParamError(f"model tensor dims {list(d)} must be in NCHW, NHWC or UNDEFINED layout, "
                                f"got {f.name}", op="layout")
    if t in (TensorType.BOOL, TensorType.INT64):
        return make(TensorFormat.NCHW, (n, c, h, w), w)
    if nhwc or (is_input and c in (1, 3, 4)):
        align = width_alignment(platform)
        w_stride = -(-w // align) * align if is_input else w
        return make(TensorFormat.NHWC, (n, h, w, c), w_stride)
    c2 = c2_for(platform, t)
    return make(TensorFormat.NC1HWC2, (n, -(-c // c2), h, w, c2), w)


# ---------------------------------------------------------------------------- conversions


def _array(x, ndim: int, what: str) -> np.ndarray:
    """``x`` checked (ndarray of ``ndim`` dims, supported dtype) and made C-contiguous."""
    if not isinstance(x, np.ndarray):
        raise InvalidParamError(f"{what} must be a numpy.ndarray, got {type(x).__name__}", op="layout")
    if x.ndim != ndim:
        raise InvalidParamError(f"{what} must have {ndim} dims, got shape {list(x.shape)}", op="layout")
    if x.dtype not in _DTYPES:
        raise InvalidParamError(f"{what} has dtype {x.dtype}; expected one of "
                                f"{', '.join(str(t) for t in _DTYPES)}", op="layout")
    return np.ascontiguousarray(x)


def _positive_int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParamError(f"{what} must be an int >= {minimum}, got {value!r}", op="layout")
    return int(value)


def _out(out: Optional[np.ndarray], shape: Tuple[int, ...], x: np.ndarray) -> np.ndarray:
    """``out`` checked against the result's shape and dtype, or a new array."""
    if out is None:
        return np.empty(shape, x.dtype)
    if not isinstance(out, np.ndarray):
        raise InvalidParamError(f"out must be a numpy.ndarray or None, got {type(out).__name__}", op="layout")
    if out.shape != shape or out.dtype != x.dtype:
        raise InvalidParamError(f"out has shape {list(out.shape)} and dtype {out.dtype}; expected shape "
                                f"{list(shape)} and dtype {x.dtype}", op="layout")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise InvalidParamError("out must be a writeable C-contiguous array", op="layout")
    if np.may_share_memory(out, x):
        raise InvalidParamError("out must not overlap the input array", op="layout")
    return out


def _bytes(a: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array as a flat uint8 view (no copy)."""
    return a.reshape(-1).view(np.uint8)


def nchw_to_nc1hwc2(x: np.ndarray, c2: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Copy an NCHW tensor ``(N, C, H, W)`` into NC1HWC2 ``(N, ceil(C/c2), H, W, c2)``.

    ``out[n, c1, h, w, k] = x[n, c1 * c2 + k, h, w]``; lanes with ``c1 * c2 + k >= C`` are
    zero-filled.  Any dtype (bytes are moved as they are).  Writes into ``out`` when given
    (C-contiguous, same dtype, exactly that shape, not overlapping ``x``) and returns it.

    Raises:
        InvalidParamError: ``x`` not a 4-D array of a supported dtype, ``c2`` not an int >= 1,
            or a bad ``out``.
    """
    x = _array(x, 4, "x (NCHW)")
    k = _positive_int(c2, "c2")
    n, c, h, w = x.shape
    y = _out(out, (n, -(-c // k), h, w, k), x)
    _k.planar_to_blocked(_bytes(x), _bytes(y), n, c, h * w, k, x.itemsize)
    return y


def nhwc_to_nc1hwc2(x: np.ndarray, c2: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Copy an NHWC tensor ``(N, H, W, C)`` into NC1HWC2 ``(N, ceil(C/c2), H, W, c2)``.

    ``out[n, c1, h, w, k] = x[n, h, w, c1 * c2 + k]``; padding lanes are zero-filled.  Any
    dtype; writes into ``out`` when given (as :func:`nchw_to_nc1hwc2`) and returns it.

    Raises:
        InvalidParamError: as :func:`nchw_to_nc1hwc2`.
    """
    x = _array(x, 4, "x (NHWC)")
    k = _positive_int(c2, "c2")
    n, h, w, c = x.shape
    y = _out(out, (n, -(-c // k), h, w, k), x)
    _k.interleaved_to_blocked(_bytes(x), _bytes(y), n, c, h * w, k, x.itemsize)
    return y


def _blocked(x, channels, what: str) -> Tuple[np.ndarray, int]:
    """The checked NC1HWC2 array and its real channel count."""
    x = _array(x, 5, what)
    c1, c2 = x.shape[1], x.shape[4]
    ch = _positive_int(channels, "channels", minimum=0)
    if c2 == 0 or -(-ch // c2) != c1:
        raise InvalidParamError(f"channels={ch} does not fit NC1HWC2 shape {list(x.shape)}; expected "
                                f"{max(0, (c1 - 1) * c2 + 1)}..{c1 * c2} channels (C1 = ceil(C / C2))",
                                op="layout")
    return x, ch


def nc1hwc2_to_nchw(x: np.ndarray, channels: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Copy an NC1HWC2 tensor ``(N, C1, H, W, C2)`` into NCHW ``(N, channels, H, W)``.

    ``out[n, c, h, w] = x[n, c // C2, h, w, c % C2]``; the padding lanes (``c >= channels``)
    are ignored.  ``channels`` must satisfy ``C1 == ceil(channels / C2)``.  Any dtype; writes
    into ``out`` when given (as :func:`nchw_to_nc1hwc2`) and returns it.

    Raises:
        InvalidParamError: ``x`` not a 5-D array of a supported dtype, ``channels`` that do
            not match C1 and C2, or a bad ``out``.
    """
    x, ch = _blocked(x, channels, "x (NC1HWC2)")
    n, _, h, w, k = x.shape
    y = _out(out, (n, ch, h, w), x)
    _k.blocked_to_planar(_bytes(x), _bytes(y), n, ch, h * w, k, x.itemsize)
    return y


def nc1hwc2_to_nhwc(x: np.ndarray, channels: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Copy an NC1HWC2 tensor ``(N, C1, H, W, C2)`` into NHWC ``(N, H, W, channels)``.

    ``out[n, h, w, c] = x[n, c // C2, h, w, c % C2]``; padding lanes are ignored.  Any dtype;
    writes into ``out`` when given and returns it.

    Raises:
        InvalidParamError: as :func:`nc1hwc2_to_nchw`.
    """
    x, ch = _blocked(x, channels, "x (NC1HWC2)")
    n, _, h, w, k = x.shape
    y = _out(out, (n, h, w, ch), x)
    _k.blocked_to_interleaved(_bytes(x), _bytes(y), n, ch, h * w, k, x.itemsize)
    return y


def pad_width(x_nhwc: np.ndarray, w_stride: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Copy an NHWC tensor ``(N, H, W, C)`` into rows of ``w_stride`` pixels: ``(N, H, w_stride, C)``.

    The ``w_stride - W`` pixels at the end of each row are zero-filled (the layout the NPU
    reads NHWC inputs in, see :func:`width_alignment`).  Any dtype; writes into ``out``
    when given and returns it.

    Raises:
        InvalidParamError: ``x_nhwc`` not a 4-D array of a supported dtype, ``w_stride`` not
            an int >= W, or a bad ``out``.
    """
    x = _array(x_nhwc, 4, "x_nhwc")
    n, h, w, c = x.shape
    ws = _positive_int(w_stride, "w_stride")
    if ws < w:
        raise InvalidParamError(f"w_stride {ws} is smaller than the width {w} of x_nhwc {list(x.shape)}; "
                                f"expected an int >= {w}", op="layout")
    y = _out(out, (n, h, ws, c), x)
    row = w * c * x.itemsize
    _k.copy_rows(_bytes(x), _bytes(y), n * h, row, ws * c * x.itemsize, row)
    return y


def unpad_width(x_padded: np.ndarray, width: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Copy the first ``width`` pixels of each row of ``(N, H, w_stride, C)``: ``(N, H, width, C)``.

    The inverse of :func:`pad_width` (the padding pixels are not read).  Any dtype; writes
    into ``out`` when given and returns it.

    Raises:
        InvalidParamError: ``x_padded`` not a 4-D array of a supported dtype, ``width`` not an
            int in 1..w_stride, or a bad ``out``.
    """
    x = _array(x_padded, 4, "x_padded")
    n, h, ws, c = x.shape
    w = _positive_int(width, "width")
    if w > ws:
        raise InvalidParamError(f"width {w} is larger than the padded row of {ws} pixels in shape "
                                f"{list(x.shape)}; expected 1..{ws}", op="layout")
    y = _out(out, (n, h, w, c), x)
    row = w * c * x.itemsize
    _k.copy_rows(_bytes(x), _bytes(y), n * h, ws * c * x.itemsize, row, row)
    return y
