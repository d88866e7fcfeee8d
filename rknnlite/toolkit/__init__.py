"""Host-side converter (ONNX -> portable .rknn) with the RKNN-Toolkit2 API; imports onnx lazily.

``from rknnlite.toolkit import RKNN`` gives the vendor-style object (config, load_onnx,
build, export_rknn, init_runtime, inference, release); :mod:`.onnx_import` and
:mod:`.optimize` are the steps underneath.  ``from rknnlite.toolkit import onnx_edit`` edits
the layout of an ONNX model's inputs and outputs (:mod:`.edit`, :mod:`.formula`).
``from rknnlite.toolkit import sparsify`` prunes an ONNX model's weights into one of the
sparse-inference patterns (:mod:`.sparsity`).
"""

from .edit import onnx_edit  # imports onnx only when called
from .rknn import RKNN
from .sparsity import sparsify  # imports onnx only when called

__all__ = ["RKNN", "onnx_edit", "sparsify"]
