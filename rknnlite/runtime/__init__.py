"""The runtime: Context, tensor attributes, logging."""

from .context import Context
from ..tensors.attr import TensorAttr

__all__ = ["Context", "TensorAttr"]
