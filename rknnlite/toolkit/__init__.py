"""Host-side converter (ONNX -> portable .rknn) with the RKNN-Toolkit2 API; imports onnx lazily.

``from rknnlite.toolkit import RKNN`` gives the vendor-style object (config, load_onnx,
build, export_rknn, init_runtime, inference, release); :mod:`.onnx_import` and
:mod:`.optimize` are the steps underneath.
"""

from .rknn import RKNN

__all__ = ["RKNN"]
