"""The rknn-toolkit-lite2 compatible API: ``from rknnlite.api import RKNNLite``."""

from .rknn_lite import RKNNLite

__all__ = ["RKNNLite"]
