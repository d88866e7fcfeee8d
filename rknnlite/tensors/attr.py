"""``TensorAttr``: the Python face of ``rknn_tensor_attr``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from ..constants import QntType, TensorFormat, TensorType

__all__ = ["TensorAttr", "TYPE_OF_DTYPE", "DTYPE_OF_TYPE", "FORMAT_OF_LAYOUT"]

TYPE_OF_DTYPE = {
    "float32": TensorType.FLOAT32,
    "float16": TensorType.FLOAT16,
    "int8": TensorType.INT8,
    "uint8": TensorType.UINT8,
    "int16": TensorType.INT16,
    "uint16": TensorType.UINT16,
    "int32": TensorType.INT32,
    "uint32": TensorType.UINT32,
    "int64": TensorType.INT64,
    "bool": TensorType.BOOL,
}
DTYPE_OF_TYPE = {v: k for k, v in TYPE_OF_DTYPE.items()}
#: ``TensorSpec.layout`` -> :class:`TensorFormat`.
FORMAT_OF_LAYOUT = {"NCHW": TensorFormat.NCHW, "NHWC": TensorFormat.NHWC, "UNDEFINED": TensorFormat.UNDEFINED}


@dataclass(frozen=True)
class TensorAttr:
    """Attributes of one input or output tensor, as ``rknn_query(..._ATTR)`` reports them.

    Immutable; :meth:`replace` gives a changed copy (e.g. to ask ``set_io_mem`` for
    UINT8 NHWC input).  Every field of the C struct is here; the derived ones
    (``n_dims``, ``n_elems``, ``size``, ``size_with_stride``) are computed from the others
    so a :meth:`replace` keeps them consistent.

    Attributes:
        index: position among the model's inputs (or among its outputs).
        name: tensor name (the C struct holds at most 255 bytes of it).
        dims: shape in ``fmt`` order: ``(N, C, H, W)`` for NCHW, ``(N, H, W, C)`` for NHWC,
            ``(N, C1, H, W, C2)`` for NC1HWC2, model order for UNDEFINED; ``-1`` marks a
            dynamic dim (see ``Context.input_ranges``).
        fmt: memory layout (:class:`TensorFormat`).
        type: element type (:class:`TensorType`); INT8 for the inputs and outputs of an
            int8-quantized model, whatever dtype the data is fed in.
        qnt_type: :class:`QntType`; ``AFFINE_ASYMMETRIC`` means ``real = (q - zp) * scale``.
        zp: zero point of affine quantization (0 when not quantized).
        scale: scale of affine quantization (1.0 when not quantized).
        fl: fractional length of DFP quantization (0 otherwise; never used by RKNPU2 models).
        w_stride: elements per row in memory, ``>= W`` when rows are padded to the
            platform's width alignment (native NHWC inputs); 0 means the width itself.
        h_stride: rows per plane in memory for multi-batch NHWC inputs (each batch starts
            ``h_stride`` rows after the previous one); 0 means the height itself.
        pass_through: whether data for this tensor is handed to the NPU without
            conversion (no normalisation, quantization or layout change).
    """

    index: int
    name: str
    dims: Tuple[int, ...]
    fmt: TensorFormat
    type: TensorType
    qnt_type: QntType = QntType.NONE
    zp: int = 0
    scale: float = 1.0
    fl: int = 0
    w_stride: int = 0
    h_stride: int = 0
    pass_through: bool = False

    @property
    def n_dims(self) -> int:
        """Number of dims (``len(dims)``)."""
        return len(self.dims)

    @property
    def n_elems(self) -> int:
        """Number of elements of ``dims``, padding lanes included (NC1HWC2 counts ``C1*C2``
        channels); 0 while a dim is dynamic (-1)."""
        n = 1
        for d in self.dims:
            n *= max(d, 0)
        return n

    @property
    def shape(self) -> Tuple[int, ...]:
        """``dims`` as a numpy shape tuple (same values, same order)."""
        return tuple(self.dims)

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of ``type`` (``int8`` for INT8, ``float16`` for FLOAT16, ...)."""
        return np.dtype(DTYPE_OF_TYPE[self.type])

    @property
    def size(self) -> int:
        """Size in bytes without stride padding: ``n_elems * itemsize``."""
        return self.n_elems * self.dtype.itemsize

    @property
    def size_with_stride(self) -> int:
        """Size in bytes of the buffer the NPU reads or writes, row padding (``w_stride``)
        and plane padding (``h_stride``) included; what ``create_mem`` must allocate."""
        from .layout import size_with_stride

        if self.n_elems == 0:
            return 0
        return int(size_with_stride(self.dims, self.fmt, self.type, self.w_stride, self.h_stride))

    def replace(self, **changes) -> "TensorAttr":
        """A copy with ``changes`` applied (fields as in the constructor)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """A plain dict of every ``rknn_tensor_attr`` field in the C struct's order (enums by
        name, dims as a list), for logs and JSON."""
        return {
            "index": self.index,
            "n_dims": self.n_dims,
            "dims": list(self.dims),
            "name": self.name,
            "n_elems": self.n_elems,
            "size": self.size,
            "fmt": self.fmt.name,
            "type": self.type.name,
            "qnt_type": self.qnt_type.name,
            "fl": self.fl,
            "zp": self.zp,
            "scale": self.scale,
            "w_stride": self.w_stride,
            "size_with_stride": self.size_with_stride,
            "pass_through": self.pass_through,
            "h_stride": self.h_stride,
        }

    @classmethod
    def from_spec(cls, index: int, spec) -> "TensorAttr":
        """The attr of a model tensor described by a file's tensor spec
        (:class:`rknnlite.model.spec.TensorSpec`, or anything with its ``name``, ``shape``,
        ``dtype``, ``layout`` and ``quant`` fields: this package sits below the model layer).

        A per-tensor quantized tensor reports its quantized type (INT8) with its zero
        point and scale, as the vendor runtime does for int8 models.
        """
        fields = {}
        type_ = TYPE_OF_DTYPE[spec.dtype]
        if spec.quant is not None and len(spec.quant.scale) == 1:
            fields = dict(qnt_type=QntType.AFFINE_ASYMMETRIC, scale=float(spec.quant.scale[0]),
                          zp=int(spec.quant.zero_point[0]))
            type_ = TYPE_OF_DTYPE.get(spec.quant.dtype, type_)
        return cls(index, spec.name, tuple(spec.shape), FORMAT_OF_LAYOUT.get(spec.layout, TensorFormat.UNDEFINED),
                   type_, **fields)
