"""The runtime: Context, tensor attributes, logging."""

from .context import Context
from .tensor_attr import TensorAttr

__all__ = ["Context", "TensorAttr"]
