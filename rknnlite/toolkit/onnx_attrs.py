"""ONNX node attributes as plain Python values, the form software kernels receive, and the
unique tensor and node names the graph writers (``onnx_edit``, the loaders) give what they add."""

from __future__ import annotations

from typing import Any, Dict

from ..model.graph import unique_name

__all__ = ["node_attrs", "default_opset", "unique_name"]


def default_opset(model) -> int:
    """The default-domain ("" or "ai.onnx") opset version of an ONNX ModelProto."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def node_attrs(node, opset: int) -> Dict[str, Any]:
    """``{name: value}`` for an ONNX NodeProto, plus ``"_opset"``.

    Values: int, float, str (bytes decoded as UTF-8), lists of those, numpy arrays
    for tensor attributes (lists of arrays for TENSORS).  Graph attributes (If, Loop)
    are returned as the GraphProto.
    """
    from onnx import AttributeProto, helper, numpy_helper

    attrs: Dict[str, Any] = {}
    for a in node.attribute:
        if a.type == AttributeProto.TENSOR:
            value: Any = numpy_helper.to_array(a.t)
        elif a.type == AttributeProto.TENSORS:
            value = [numpy_helper.to_array(t) for t in a.tensors]
        else:
            value = helper.get_attribute_value(a)
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            elif isinstance(value, list):
                value = [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
        attrs[a.name] = value
    attrs["_opset"] = opset
    return attrs
