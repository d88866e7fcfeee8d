"""``TensorAttr``: the Python face of ``rknn_tensor_attr``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from ..constants import QntType, TensorFormat, TensorType
from ..model.spec import TensorSpec

__all__ = ["TensorAttr", "TYPE_OF_DTYPE", "DTYPE_OF_TYPE"]

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
_FORMATS = {"NCHW": TensorFormat.NCHW, "NHWC": TensorFormat.NHWC, "UNDEFINED": TensorFormat.UNDEFINED}


@dataclass(frozen=True)
class TensorAttr:
    """Attributes of one input or output tensor, as ``rknn_query(..._ATTR)`` reports them.

    Immutable; :meth:`replace` gives a changed copy (e.g. to ask ``set_io_mem`` for
    UINT8 NHWC input).

    Attributes:
        index: position among the model's inputs (or outputs).
        name: tensor name.
        dims: shape in ``fmt`` order; ``-1`` marks a dynamic dim.
        fmt: memory layout (:class:`TensorFormat`).
        type: element type (:class:`TensorType`).
        qnt_type: :class:`QntType`; ``AFFINE_ASYMMETRIC`` means ``real = (q - zp) * scale``.
        zp, scale: per-tensor zero point and scale (0 and 1.0 when not quantized).
        fl: fractional length for DFP quantization (0 otherwise).
        w_stride, h_stride: row/plane strides in elements (0 = the width/height itself).
        pass_through: whether the runtime feeds this tensor without conversion.
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
        """Number of dims."""
        return len(self.dims)

    @property
    def n_elems(self) -> int:
        """Number of elements (0 while a dim is dynamic)."""
        n = 1
        for d in self.dims:
            n *= max(d, 0)
        return n

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of ``type``."""
        return np.dtype(DTYPE_OF_TYPE[self.type])

    @property
    def size(self) -> int:
        """Size in bytes without stride padding."""
        return self.n_elems * self.dtype.itemsize

    @property
    def size_with_stride(self) -> int:
        """Size in bytes including row padding (``w_stride``)."""
        if self.w_stride and self.fmt == TensorFormat.NHWC and self.n_dims == 4:
            n, h, w, c = self.dims
            return n * (self.h_stride or h) * self.w_stride * c * self.dtype.itemsize
        return self.size

    def replace(self, **changes) -> "TensorAttr":
        """A copy with ``changes`` applied (fields as in the constructor)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """A plain dict of every field and derived size (for logs and JSON)."""
        d = dataclasses.asdict(self)
        d.update(fmt=self.fmt.name, type=self.type.name, qnt_type=self.qnt_type.name, dims=list(self.dims),
                 n_dims=self.n_dims, n_elems=self.n_elems, size=self.size, size_with_stride=self.size_with_stride)
        return d

    @classmethod
    def from_spec(cls, index: int, spec: TensorSpec) -> "TensorAttr":
        """The attr of a model tensor described by a file's :class:`TensorSpec`."""
        fields = {}
        if spec.quant is not None and len(spec.quant.scale) == 1:
            fields = dict(qnt_type=QntType.AFFINE_ASYMMETRIC, scale=spec.quant.scale[0], zp=spec.quant.zero_point[0])
        return cls(index, spec.name, tuple(spec.shape), _FORMATS.get(spec.layout, TensorFormat.UNDEFINED),
                   TYPE_OF_DTYPE[spec.dtype], **fields)
