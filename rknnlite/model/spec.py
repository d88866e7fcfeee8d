"""Format-neutral description of a model's input and output tensors.

Both readers (the portable container and the Rockchip ``.rknn`` reader) describe
tensors with :class:`TensorSpec`; the runtime turns them into ``TensorAttr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np

from ..errors import ModelInvalidError

__all__ = ["QuantParams", "TensorSpec", "DTYPES", "IO_DTYPES", "numpy_dtype"]

#: dtype names a model file may use, with their numpy equivalents.
DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "bool": np.bool_,
}


#: dtypes an input or output may have (those with an ``rknn_tensor_type``).
IO_DTYPES = tuple(name for name in DTYPES if name != "float64")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for a model dtype name; ``ModelInvalidError`` for an unknown one."""
    try:
        return np.dtype(DTYPES[name])
    except (KeyError, TypeError):
        raise ModelInvalidError(
            f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}", op="load"
        ) from None


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization of a tensor: ``real = (q - zero_point) * scale``.

    ``scale`` and ``zero_point`` are tuples: one entry per tensor (per-layer) or
    one per channel along ``axis`` (per-channel).
    """

    dtype: str
    scale: Tuple[float, ...]
    zero_point: Tuple[int, ...]
    axis: Optional[int] = None


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output as the file describes it.

    Attributes:
        name: tensor name.
        shape: dims in model order (e.g. NCHW); ``-1`` marks a dynamic dim.
        dtype: element type name (``"float32"``, ``"int8"``, ... see ``DTYPES``).
        layout: ``"NCHW"``, ``"NHWC"`` or ``"UNDEFINED"`` (non-4-D tensors).
        quant: quantization parameters, or ``None`` for a float tensor.
    """

    name: str
    shape: Tuple[int, ...]
    dtype: str
    layout: str = "UNDEFINED"
    quant: Optional[QuantParams] = field(default=None)

    def to_dict(self) -> dict:
        """A JSON-ready dict (used by ``rknnlite inspect --json``)."""
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "layout": self.layout}
        if self.quant is not None:
            d["quant"] = {
                "dtype": self.quant.dtype,
                "scale": list(self.quant.scale),
                "zero_point": list(self.quant.zero_point),
                "axis": self.quant.axis,
            }
        return d
