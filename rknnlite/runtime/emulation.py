"""What the software backend emulates of librknnrt besides running the graph.

:class:`EmulatedNpu` gives the software backend the parts of the Backend protocol
(:mod:`rknnlite.backends.base`) that librknnrt answers itself on a board:

* ``sdk_version()``: rknnlite's own version (there is no librknnrt);
* ``dynamic_shapes``: the shape sets stored in the portable file (model layout);
* ``native_attrs(...)``: the NPU's native layouts, computed with the rules of
  :mod:`rknnlite.runtime.layout` for the model's platform (:func:`native_attr`);
* ``run`` with pass-through inputs: :meth:`EmulatedNpu.from_pass_through` turns the
  quantized values the NPU would take back into the float data the executor runs;
* ``zero_copy(host)``: the zero-copy emulation of :mod:`rknnlite.runtime.binding`.

The mixin needs ``self.model`` (a portable model with ``metadata``), ``self.inputs``
(the input specs) and ``self.name``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .._version import __version__
from ..constants import QntType, TensorType
from .cores import model_platform
from .io import passed_to_feed
from .tensor_attr import TensorAttr

__all__ = ["EmulatedNpu", "native_attr", "DEFAULT_PLATFORM"]

#: The platform whose native layouts a model without target platforms reports.
DEFAULT_PLATFORM = "rk3588"


def native_attr(attr: TensorAttr, platform: str, is_input: bool, nhwc: bool) -> TensorAttr:
    """``attr`` (model layout) in the NPU's native layout for ``platform``: 1/3/4-channel
    4-D inputs NHWC with the platform's ``w_stride``, other 4-D tensors NC1HWC2
    (``nhwc=True``: NHWC, the NATIVE_NHWC_* queries); int8 tensors keep their type, zero
    point and scale, float tensors become FLOAT16."""
    from .layout import native_layout

    if attr.qnt_type == QntType.AFFINE_ASYMMETRIC:
        type_ = attr.type
    elif attr.type in (TensorType.FLOAT32, TensorType.FLOAT16):
        type_ = TensorType.FLOAT16
    else:
        type_ = attr.type
    native = native_layout(attr.dims, attr.fmt, type_, platform, is_input=is_input, nhwc=nhwc)
    return attr.replace(dims=tuple(native.dims), fmt=native.fmt, type=type_, w_stride=native.w_stride,
                        h_stride=native.h_stride)


class EmulatedNpu:
    """Mixin: the runtime-answered part of the Backend protocol, emulated on the host."""

    def sdk_version(self) -> dict:
        """``{"api": "rknnlite X.Y.Z", "drv": "software backend"}``: no librknnrt serves it."""
        return {"api": f"rknnlite {__version__}", "drv": f"{self.name} backend"}

    @property
    def dynamic_shapes(self) -> Tuple[Tuple[Tuple[int, ...], ...], ...]:
        """The model's shape sets (one shape per input, model layout); ``()`` when static."""
        meta = getattr(self.model, "metadata", None)
        sets = getattr(meta if meta is not None else self.model, "dynamic_shapes", None) or ()
        return tuple(tuple(tuple(int(d) for d in shape) for shape in shape_set) for shape_set in sets)

    def native_attrs(self, is_input: bool, nhwc: bool, current: Sequence[TensorAttr]) -> List[TensorAttr]:
        """Native attributes of the tensors ``current`` describes (model layout, current
        shapes), by the layout rules of the model's first target platform."""
        platform = model_platform(self.model) or DEFAULT_PLATFORM
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

    def zero_copy(self, host):
        """The zero-copy emulation for the context ``host`` (:class:`~rknnlite.runtime.binding.EmulatedIo`)."""
        from .binding import EmulatedIo

        return EmulatedIo(host)
