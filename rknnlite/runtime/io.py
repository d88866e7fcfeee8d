"""Input and output conversion of the general API (``Context.run``), per the vendor's rules.

Each model input gets an :class:`InputPlan` when the context is created: what dtypes
it accepts, its layout, its normalisation and quantization.  ``InputPlan.convert``
turns one user array into what the backend runs (model layout, the backend's dtype);
:class:`OutputPlan` turns a backend output into what ``want_float`` asks for.

Vendor rules (RKNN API user guide, "general API"):

* accepted input dtypes: an int8-quantized input takes int8, uint8 or float32 data; a
  float input takes uint8, float16 or float32 (and float64, numpy's default float type,
  which has no vendor type: it is cast to float32); bool, int64 (and other integer)
  inputs take exactly their dtype;
* without pass-through the data is raw (before the model's mean/std): the runtime
  normalises it, then quantizes it with the input's scale and zero point;
* with pass-through nothing is converted: a quantized input takes its quantized
  values (int8) and a float input float16/float32 data after normalisation; a 4-D
  input whose native layout is NC1HWC2 takes its data in that native layout (5-D);
* ``want_float=False`` gives int8 outputs (quantized with the output's parameters)
  for an int8 model and float16 for a float one.

Layouts (:meth:`InputPlan.convert`): 4-D data is in the layout of the input's attribute
unless ``data_format`` says otherwise (NHWC for an image input, as librknnrt reports it).
Data that fits the input only in the other layout is never taken as it is: NCHW data where
NHWC is stated is transposed with Lite2's warning; anything else is refused naming
``data_format`` (Lite2 hands such data on unchanged, and a board computes garbage).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ..constants import QntType, TensorFormat
from ..errors import InputInvalidError
from ..model.metadata import Preprocess
from ..model.spec import TensorSpec, numpy_dtype
from ..log import logger
from ..tensors.attr import TensorAttr

__all__ = ["InputPlan", "OutputPlan", "FORMATS", "RANK_WARNING", "dtype_list", "reorder_shape", "with_leading_ones"]

#: ``data_format`` values a 4-D input may be given in.
FORMATS = ("nchw", "nhwc")
_OP = "rknn_inputs_set"
# float64 has no rknn_tensor_type; it is accepted (cast to float32) as numpy's default float type.
_FLOATS_IN = (np.dtype(np.uint8), np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_QUANT_IN = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.float32))
_QMAX = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def dtype_list(dtypes: Sequence[np.dtype]) -> str:
    """``"uint8, float16 or float32"``."""
    names = [str(d) for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


class InputPlan:
    """How one model input is checked and converted; built once per context.

    Attributes:
        index, name: the input's position and name.
        dims: model-order shape (``-1`` for a dynamic dim).
        layout: ``"NCHW"``, ``"NHWC"`` or ``"UNDEFINED"`` (the model's own layout).
        feed: the numpy dtype the backend runs this input in.
        accepted: dtypes ``run`` takes for it without pass-through.
        quant: ``(scale, zero_point)`` of a quantized input, else ``None``.
        native: the input's native attribute (for pass-through data in NC1HWC2).
    """

    __slots__ = ("index", "name", "what", "dims", "layout", "order", "shapes", "feed", "accepted", "quant", "qdtype",
                 "preprocess", "native", "_stage", "_plain")

    def __init__(self, attr: TensorAttr, spec: TensorSpec, preprocess: Optional[Preprocess] = None,
                 native: Optional[TensorAttr] = None, shapes: Sequence[Tuple[int, ...]] = ()):
        self.index = attr.index
        self.name = attr.name
        self.what = f"input {attr.index} ({attr.name!r})"
        self.dims = tuple(spec.shape)
        self.layout = spec.layout
        #: the axis order of a 4-D input's data ("nhwc" or "nchw"; an UNDEFINED 4-D input is in
        #: model order, taken as "nchw"); None for other ranks, where data_format does not apply
        self.order: Optional[str] = ("nhwc" if spec.layout == "NHWC" else "nchw") if len(self.dims) == 4 else None
        #: the shapes this input takes, in its layout: ``dims`` (``-1`` = any), or one per shape set
        self.shapes: Tuple[Tuple[int, ...], ...] = tuple(tuple(s) for s in shapes) or (self.dims,)
        self.feed = numpy_dtype(spec.dtype)
        self.preprocess = preprocess
        self.native = native
        if attr.qnt_type == QntType.AFFINE_ASYMMETRIC and self.feed.kind == "f":
            self.quant: Optional[Tuple[float, int]] = (attr.scale, attr.zp)
            self.qdtype = attr.dtype
            self.accepted: Tuple[np.dtype, ...] = _QUANT_IN
        else:
            self.quant = None
            self.qdtype = None
            self.accepted = _FLOATS_IN if self.feed.kind == "f" else (self.feed,)
        self._stage: Optional[np.ndarray] = None
        #: no normalisation and static dims: the fast path of ``convert`` applies
        self._plain = preprocess is None and -1 not in self.dims

    # -- the common case, kept short: what ``Context.run`` calls per input --------------------

    def convert(self, x, fmt: Optional[str] = None, pass_through: bool = False) -> np.ndarray:
        """``x`` (one user array) as the backend runs it: model layout, ``feed`` dtype.

        Returns ``x`` itself, or a view of it, when its dtype already is that (no copy: a
        view transposed to the model layout, or any strided array, goes to the backend,
        which copies what it needs contiguous -- NCHW data of an NHWC image input then
        reaches the software backend's NCHW graph without a round trip), else a reused
        per-input buffer overwritten by the next call.  ``fmt`` is the layout of 4-D
        data (``"nchw"``/``"nhwc"``, ``None`` = the model's).

        Raises:
            InputInvalidError: not an array, a dtype, rank or shape the input does not take.
        """
        # fast path: an array already in the backend's dtype, shape and memory order
        if (self._plain and type(x) is np.ndarray and x.dtype is self.feed and x.shape == self.dims
                and fmt is None and not pass_through and x.flags.c_contiguous):
            return x
        return self._convert(x, fmt, pass_through)

    def _convert(self, x, fmt: Optional[str], pass_through: bool) -> np.ndarray:
        if type(x) is not np.ndarray:
            if isinstance(x, np.generic):
                x = np.asarray(x)
            elif not isinstance(x, np.ndarray):
                raise InputInvalidError(f"{self.what} must be a numpy array, not {type(x).__name__}", op=_OP)
        if pass_through:
            return self._pass_through(x, fmt)
        if x.dtype not in self.accepted:
            raise InputInvalidError(
                f"{self.what} has dtype {x.dtype}; this {self._kind()} input takes {dtype_list(self.accepted)}",
                op=_OP)
        x = self._to_layout(x, fmt)
        self._check_shape(x)
        if self.preprocess is not None:
            return _normalise(x, self.preprocess, self._buffer(x.shape, np.float32), self.what, self.layout)
        if x.dtype == self.feed:
            return x
        return self._copy(x)

    # -- the rest -----------------------------------------------------------------------------

    def _kind(self) -> str:
        if self.quant is not None:
            return f"int8-quantized (scale {self.quant[0]:g}, zero point {self.quant[1]})"
        return "float" if self.feed.kind == "f" else str(self.feed)

    def _fits(self, shape: Tuple[int, ...], fmt: str) -> bool:
        """Whether a 4-D array of ``shape`` in layout ``fmt`` is one of :attr:`shapes`."""
        return any(_matches(reorder_shape(shape, fmt, self.order), allowed) for allowed in self.shapes)

    def _to_layout(self, x: np.ndarray, fmt: Optional[str]) -> np.ndarray:
        """4-D ``x`` given in layout ``fmt`` (``None``: this input's own) as this input's layout.

        Data that fits only in the other layout is never taken as it is: NCHW data where NHWC
        was stated (by ``fmt`` or by an NHWC attribute) is transposed with Lite2's warning;
        anything else is refused with a message naming ``data_format``."""
        if self.order is None or x.ndim != 4:
            return x
        stated = fmt or self.order
        if self._fits(x.shape, stated):
            source = stated
        elif stated == "nhwc" and self._fits(x.shape, "nchw"):
            source = "nchw"
            if self.order == "nhwc":
                logger.warning("The input[%d] need NHWC data format, but NCHW set, the data format and data buffer "
                               "will be changed to NHWC.", self.index)
            else:
                logger.warning("The input[%d] is %s and its data fits only as NCHW, so it is taken as NCHW "
                               "(data_format='nhwc' was given)", self.index, self.layout)
        else:  # refused; for a dynamic-shape input this is rknn_set_input_shapes refusing the shape
            raise InputInvalidError(self._layout_problem(x.shape, fmt),
                                    op="rknn_set_input_shapes" if len(self.shapes) > 1 else _OP)
        if source == self.order:
            return x
        return x.transpose((0, 2, 3, 1)) if source == "nchw" else x.transpose((0, 3, 1, 2))

    def _layout_problem(self, shape: Tuple[int, ...], fmt: Optional[str]) -> str:
        """Why 4-D data of ``shape`` given as ``fmt`` does not fit, and which data_format would."""
        expected = " or ".join(str(list(s)) for s in self.shapes)
        given = f"data_format={fmt!r}" if fmt else "data_format=None (the input's own layout)"
        problem = "is not one of the model's shape sets" if len(self.shapes) > 1 else "does not fit the input"
        text = f"{self.what} has shape {list(shape)}, which {problem} with {given}: expected {self.layout} {expected}"
        other = "nchw" if (fmt or self.order) == "nhwc" else "nhwc"
        if self._fits(shape, other):
            text += f"; the data fits as {other.upper()}: pass data_format={other!r}"
        else:
            text += f"; data_format={other!r} takes {other.upper()} data"
        return text

    def _check_shape(self, x: np.ndarray) -> None:
        dims = self.dims
        if x.ndim != len(dims):
            raise InputInvalidError(
                f"{self.what} needs a {len(dims)}-D array ({self.layout} {list(dims)}); got a {x.ndim}-D array of "
                f"shape {list(x.shape)}", op=_OP)
        if any(d != e and e != -1 for d, e in zip(x.shape, dims)):
            raise InputInvalidError(
                f"{self.what} has shape {list(x.shape)}; expected {list(dims)} ({self.layout})", op=_OP)

    def _buffer(self, shape, dtype) -> np.ndarray:
        """A reused buffer of this input (inputs are copied into it, never aliased by outputs)."""
        buf = self._stage
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = self._stage = np.empty(shape, dtype)
        return buf

    def _copy(self, x: np.ndarray) -> np.ndarray:
        stage = self._buffer(x.shape, self.feed)
        np.copyto(stage, x, casting="unsafe")
        return stage

    def _pass_through(self, x: np.ndarray, fmt: Optional[str]) -> np.ndarray:
        """Pass-through data checked and put in the model layout (the backend's, ``dims``),
        values untouched: quantized values (``qdtype``) of a quantized input, normalised
        floats (``feed`` dtype) of a float one.  The backend takes it from there
        (``run(..., pass_through=...)``): librknnrt as is, the software backend after
        :func:`rknnlite.backends.software.emulation.passed_to_feed`."""
        if self.quant is not None:
            want: Tuple[np.dtype, ...] = (self.qdtype,)
        elif self.feed.kind == "f":
            want = (np.dtype(np.float16), np.dtype(np.float32))
        else:
            want = (self.feed,)
        if x.dtype not in want:
            raise InputInvalidError(
                f"{self.what} is passed through, so it must already be {self._kind()} data of dtype "
                f"{dtype_list(want)}; got {x.dtype}", op=_OP)
        native = self.native
        if native is not None and native.fmt == TensorFormat.NC1HWC2 and len(self.dims) == 4:
            x = self._from_nc1hwc2(x)
        else:
            if native is not None and native.fmt == TensorFormat.NHWC and x.shape == _padded(native):
                from ..tensors.layout import unpad_width

                x = unpad_width(x, native.dims[2])  # rows padded to w_stride, as the NPU reads them
                fmt = "nhwc"
            x = self._to_layout(x, fmt)
        self._check_shape(x)
        want_dtype = self.qdtype if self.quant is not None else self.feed
        if x.dtype == want_dtype and x.flags.c_contiguous:
            return x
        stage = self._buffer(x.shape, want_dtype)
        np.copyto(stage, x, casting="unsafe")
        return stage

    def _from_nc1hwc2(self, x: np.ndarray) -> np.ndarray:
        """Native NC1HWC2 pass-through data as model-layout data (padding lanes dropped)."""
        from ..tensors import layout

        native = self.native
        if x.shape != tuple(native.dims):
            raise InputInvalidError(
                f"{self.what} is passed through and its native layout is NC1HWC2, so the data must have the "
                f"native shape {list(native.dims)} (N, C1, H, W, C2); got shape {list(x.shape)}", op=_OP)
        channels = self.dims[1] if self.layout == "NCHW" else self.dims[3]
        if self.layout == "NHWC":
            return layout.nc1hwc2_to_nhwc(x, channels)
        return layout.nc1hwc2_to_nchw(x, channels)


class OutputPlan:
    """How one backend output becomes what ``run(want_float=...)`` returns."""

    __slots__ = ("quant", "limits", "qdtype")

    def __init__(self, attr: TensorAttr, spec: TensorSpec):
        if attr.qnt_type == QntType.AFFINE_ASYMMETRIC and spec.quant is not None:
            self.quant: Optional[Tuple[float, int]] = (attr.scale, attr.zp)
            self.qdtype = attr.dtype
            self.limits = _QMAX.get(spec.quant.dtype, (-128, 127))
        else:
            self.quant = None
            self.qdtype = None
            self.limits = None

    def raw(self, y: np.ndarray) -> np.ndarray:
        """``want_float=False``: quantized outputs as their integer values
        (``clip(round(y / scale) + zp)``), float outputs as float16, others unchanged."""
        if y.dtype.kind != "f":
            return y
        if self.quant is None:
            return y.astype(np.float16)
        scale, zp = self.quant
        q = np.rint(np.divide(y, np.float32(scale), dtype=np.float32))
        q += np.float32(zp)
        np.clip(q, self.limits[0], self.limits[1], out=q)
        return q.astype(self.qdtype)


#: RKNN-Toolkit2's simulator's warning when it gives an array of lower rank leading 1s (the
#: array's shape, the input's rank, the new shape)
RANK_WARNING = "The dims of input(ndarray) shape %s is wrong, expect dims is %d! Try expand dims to %s!"


def with_leading_ones(x: np.ndarray, rank: int) -> np.ndarray:
    """``x`` with leading 1s up to ``rank`` (a view, no copy; ``x`` itself when its rank is
    not lower): a ``(H, W, C)`` picture for a ``[1, H, W, C]`` input.  The element order is
    unchanged, so the input's shape check still decides whether it fits."""
    if x.ndim >= rank:
        return x
    return x.reshape((1,) * (rank - x.ndim) + x.shape)


def reorder_shape(shape: Tuple[int, ...], source: str, target: str) -> Tuple[int, ...]:
    """A 4-D ``shape`` in layout ``source`` ("nchw"/"nhwc") written in layout ``target``
    (e.g. ``(1, 3, 8, 16)`` NCHW is ``(1, 8, 16, 3)`` NHWC)."""
    if source == target:
        return tuple(shape)
    n, a, b, c = shape
    return (n, b, c, a) if source == "nchw" else (n, c, a, b)


def _matches(shape: Tuple[int, ...], allowed: Tuple[int, ...]) -> bool:
    """``shape`` equals ``allowed`` (whose ``-1`` dims match anything)."""
    return len(shape) == len(allowed) and all(e == -1 or d == e for d, e in zip(shape, allowed))


def _padded(native: TensorAttr) -> Tuple[int, ...]:
    """The shape of native NHWC data with its rows padded to ``w_stride`` (when they are)."""
    n, h, w, c = native.dims
    return (n, h, native.w_stride, c) if native.w_stride > w else ()


def _normalise(x: np.ndarray, p: Preprocess, out: np.ndarray, what: str, layout: str = "NCHW") -> np.ndarray:
    """``(x[reorder] - mean) / std`` per channel, into ``out``; the channel axis is 1 for an
    NCHW input, 3 for an NHWC one (``layout``, the input's attribute layout)."""
    axis = 3 if layout == "NHWC" else 1
    if x.ndim != 4 or x.shape[axis] != len(p.mean):
        raise InputInvalidError(
            f"the model normalises {len(p.mean)} channels of {what} on axis {axis} ({layout}); got an input of "
            f"shape {list(x.shape)}",
            op=_OP,
        )
    if p.reorder:
        x = x[..., list(p.reorder)] if axis == 3 else x[:, list(p.reorder)]
    shape = (1, 1, 1, len(p.mean)) if axis == 3 else (1, len(p.mean), 1, 1)
    np.subtract(x, np.reshape(p.mean_array, shape), out=out, casting="unsafe")
    np.divide(out, np.reshape(p.std_array, shape), out=out)
    return out
