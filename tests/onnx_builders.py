"""Small builders for the ONNX models tests generate (``onnx.helper`` with this suite's defaults)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), value_info=(), opset: int = 17):
    """A ModelProto of one graph ``g`` at ``opset`` (IR version 8, which every onnxruntime reads)."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def vi(name: str, shape, elem=FLOAT):
    """A graph input/output (``ValueInfoProto``); ``None`` or a string in ``shape`` is a symbolic dim."""
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, array):
    """An initializer holding ``array``."""
    return numpy_helper.from_array(np.asarray(array), name)
