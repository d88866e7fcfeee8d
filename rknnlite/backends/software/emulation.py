"""What the software backend emulates of librknnrt besides running the graph.

:class:`EmulatedNpu` gives the software backend the parts of the Backend protocol
(:mod:`rknnlite.backends.base`) that librknnrt answers itself on a board:

* the input attributes: :func:`presented_input` gives an input as librknnrt presents it
  (``INPUT_ATTR``): a 4-D image input (1, 3 or 4 channels) is NHWC, for portable and
  vendor files alike, while the graph the software backend runs takes it NCHW;
  :func:`to_graph_layout` puts data given in the presented layout back in the graph's;
* ``sdk_version()``: rknnlite's own version (there is no librknnrt);
* ``dynamic_shapes``: the shape sets stored in the file, in the presented layouts;
* ``native_attrs(...)``: the NPU's native layouts, computed with the rules of
  :mod:`rknnlite.tensors.layout` for the model's platform (:func:`native_attr`);
* ``run`` with pass-through inputs: :meth:`EmulatedNpu.from_pass_through` turns the
  quantized values the NPU would take back into the float data the executor runs;
* ``zero_copy(io)``: the zero-copy emulation of :mod:`rknnlite.backends.software.binding`.

The mixin needs ``self.model`` (a portable model with ``metadata``, whose ``inputs`` are
in the graph's layout), ``self.inputs`` (the presented input specs) and ``self.name``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..._version import __version__
from ...constants import QntType, TensorType
from ...model.spec import TensorSpec, numpy_dtype
from ...tensors.attr import TensorAttr
from ...tensors.layout import native_layout
from ...tensors.topology import DEFAULT_PLATFORM

__all__ = ["EmulatedNpu", "native_attr", "presented_input", "presented_output", "presented_shape", "to_graph_layout",
           "passed_to_feed"]


#: channel counts of the 4-D inputs librknnrt presents as NHWC ("image" inputs)
IMAGE_CHANNELS = (1, 3, 4)


def presented_input(spec: TensorSpec, float_dtype: Optional[str] = None) -> TensorSpec:
    """Input ``spec`` (the graph's layout) as librknnrt presents it in ``INPUT_ATTR``: a 4-D
    NCHW input with 1, 3 or 4 channels becomes NHWC ``(N, H, W, C)`` (``-1`` dims move with
    their axis); other inputs keep their layout (non-4-D UNDEFINED, other 4-D NCHW).  With
    ``float_dtype`` (the model's) the type is presented too (:func:`presented_output`)."""
    if len(spec.shape) == 4 and spec.layout == "NCHW" and spec.shape[1] in IMAGE_CHANNELS:
        n, c, h, w = spec.shape
        spec = TensorSpec(spec.name, (n, h, w, c), spec.dtype, "NHWC", spec.quant)
    return spec if float_dtype is None else presented_output(spec, float_dtype)


def presented_output(spec: TensorSpec, float_dtype: str) -> TensorSpec:
    """``spec`` with the type librknnrt reports: a float32 tensor without quantization of a
    model whose float type is float16 (the NPU's) is FLOAT16, as in a vendor fp16 file;
    the rest as it is.  The data ``run`` takes and gives is unchanged (float32 by default)."""
    if float_dtype == "float16" and spec.dtype == "float32" and spec.quant is None:
        return TensorSpec(spec.name, spec.shape, "float16", spec.layout, spec.quant)
    return spec


def presented_shape(shape: Sequence[int], graph_spec: TensorSpec) -> Tuple[int, ...]:
    """A graph-layout ``shape`` of input ``graph_spec`` in the layout :func:`presented_input`
    gives that input (NCHW ``(N, C, H, W)`` -> NHWC ``(N, H, W, C)`` for an image input)."""
    shape = tuple(int(d) for d in shape)
    if presented_input(graph_spec).layout == "NHWC" and graph_spec.layout == "NCHW" and len(shape) == 4:
        return (shape[0], shape[2], shape[3], shape[1])
    return shape


def to_graph_layout(inputs: List[np.ndarray], graph: Sequence[TensorSpec],
                    presented: Sequence[TensorSpec]) -> List[np.ndarray]:
    """``inputs`` (in the ``presented`` layouts, any strides) as the graph takes them,
    C-contiguous: each input presented as NHWC but NCHW in ``graph`` transposed to NCHW (no
    copy when it is a transposed view of NCHW data), the others copied only when strided;
    the caller's arrays untouched."""
    out = list(inputs)
    for i, (g, p) in enumerate(zip(graph, presented)):
        if g.layout != p.layout and out[i].ndim == 4:
            out[i] = out[i].transpose(0, 3, 1, 2)
        if not out[i].flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
            out[i] = np.ascontiguousarray(out[i])
    return out


def native_attr(attr: TensorAttr, platform: str, is_input: bool, nhwc: bool) -> TensorAttr:
    """``attr`` (model layout) in the NPU's native layout for ``platform``: 1/3/4-channel
    4-D inputs NHWC with the platform's ``w_stride``, other 4-D tensors NC1HWC2
    (``nhwc=True``: NHWC, the NATIVE_NHWC_* queries); int8 tensors keep their type, zero
    point and scale, float tensors become FLOAT16."""
    if attr.qnt_type == QntType.AFFINE_ASYMMETRIC:
        type_ = attr.type
    elif attr.type in (TensorType.FLOAT32, TensorType.FLOAT16):
        type_ = TensorType.FLOAT16
    else:
        type_ = attr.type
    native = native_layout(attr.dims, attr.fmt, type_, platform, is_input=is_input, nhwc=nhwc)
    return attr.replace(dims=tuple(native.dims), fmt=native.fmt, type=type_, w_stride=native.w_stride,
                        h_stride=native.h_stride)


def passed_to_feed(spec: TensorSpec, x: np.ndarray) -> np.ndarray:
    """Pass-through data of input ``spec`` (model layout; quantized values of a quantized
    input) as the float data an executor runs: ``(x - zero_point) * scale`` in float32
    for a quantized input, ``x`` cast to the spec's dtype otherwise (a new array, or ``x``
    when it already is that)."""
    feed = numpy_dtype(spec.dtype)
    if spec.quant is not None and feed.kind == "f" and x.dtype.kind in "iu":
        out = np.subtract(x, np.float32(spec.quant.zero_point[0]), dtype=np.float32)
        np.multiply(out, np.float32(spec.quant.scale[0]), out=out)
        return out
    return x if x.dtype == feed else x.astype(feed)


class EmulatedNpu:
    """Mixin: the runtime-answered part of the Backend protocol, emulated on the host."""

    def sdk_version(self) -> dict:
        """``{"api": "rknnlite X.Y.Z", "drv": "software backend"}``: no librknnrt serves it."""
        return {"api": f"rknnlite {__version__}", "drv": f"{self.name} backend"}

    @property
    def dynamic_shapes(self) -> Tuple[Tuple[Tuple[int, ...], ...], ...]:
        """The model's shape sets (one shape per input, in the presented layout of each
        input, e.g. NHWC for an image input); ``()`` when static."""
        meta = self.model.metadata
        return tuple(tuple(presented_shape(shape, spec) for shape, spec in zip(shape_set, meta.inputs))
                     for shape_set in meta.dynamic_shapes)

    def native_attrs(self, is_input: bool, nhwc: bool, current: Sequence[TensorAttr]) -> List[TensorAttr]:
        """Native attributes of the tensors ``current`` describes (model layout, current
        shapes), by the layout rules of the model's first target platform."""
        targets = self.model.metadata.target_platforms
        platform = str(targets[0]).lower() if targets else DEFAULT_PLATFORM
        return [native_attr(a, platform, is_input, nhwc) for a in current]

    def set_input_shapes(self, shapes: Sequence[Tuple[int, ...]]) -> None:
        """Nothing to do: the executor runs whatever shape set the inputs of a run have."""

    def from_pass_through(self, inputs: List[np.ndarray], pass_through: Optional[Sequence[bool]]) -> List[np.ndarray]:
        """``inputs`` with each passed-through one (quantized values, model layout) turned
        into the float data the executor runs (dequantized with the input's scale and
        zero point); the others unchanged."""
        if not pass_through:
            return inputs
        return [passed_to_feed(spec, x) if passed else x
                for spec, x, passed in zip(self.inputs, inputs, pass_through)]

    def zero_copy(self, io):
        """The zero-copy emulation for the context ``io`` describes (an
        :class:`~rknnlite.backends.io_host.IoHost`): a
        :class:`~rknnlite.backends.software.binding.EmulatedIo`."""
        from .binding import EmulatedIo

        return EmulatedIo(io)
