"""Quantization-aware ONNX models: ``QuantizeLinear`` / ``DequantizeLinear`` read into the
graph's quantization table.

A QAT model exported to ONNX (PyTorch's quantized modules through ``load_pytorch``,
TensorFlow's FakeQuant through tf2onnx, ONNX Runtime's QDQ tools) carries its int8 grid as
``DequantizeLinear`` of constant integer weights and ``QuantizeLinear -> (Cast) ->
DequantizeLinear`` pairs on activations.  RKNN-Toolkit2 builds such a model with the file's
own scales and zero points (``build(do_quantization=False)``), a zero point of 0 aside (the
last item); so does rknnlite, the same way it builds a quantized TFLite file:

* ``DequantizeLinear`` of a constant becomes the float constant ``(q - zp) * scale``; an
  int8/uint8 weight also gets its parameters (per tensor or per channel along ``axis``) in
  the table, so the build re-quantizes it onto exactly its own grid (an int32 bias is only
  dequantized: the runtime derives its bias from the float value);
* an activation pair ``x -> QuantizeLinear -> [Cast ...] -> DequantizeLinear -> y`` goes,
  ``y``'s readers read ``x``, and ``x`` gets the pair's parameters;
* layout ops between a pair's QuantizeLinear and DequantizeLinear (Transpose, Reshape,
  Squeeze, Unsqueeze, Flatten, Identity: tf2onnx's transpose optimizer moves a Transpose
  there) stay and move the float values instead, their output on the pair's grid;
* uint8 parameters become the runtime's int8 grid (zero point - 128, the same values);
* last, every int8 grid whose zero points are all 0 becomes the symmetric grid RKNN-Toolkit2
  gives it, ``scale * 128/127`` (:func:`symmetric_grids`; a TFLite file's table gets the same).

Anything else is refused by name: an activation ``QuantizeLinear`` whose output is read by
something other than a ``DequantizeLinear`` with the same parameters, two grids for one
tensor, per-channel activation parameters, types other than int8/uint8 (int32 for a constant bias), or
parameters that are not constants.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from ..errors import ModelInvalidError
from ..model.graph import Graph, Node
from ..model.spec import QuantParams
from .quantize import LAYOUT_OPS

__all__ = ["QDQ_OPS", "read_qdq", "symmetric_grids"]

#: The ONNX ops this pass removes.
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")

_OP = "load_onnx"
_INT_TYPES = (np.int8, np.uint8)


def read_qdq(graph: Graph) -> Dict[str, QuantParams]:
    """Remove ``graph``'s QuantizeLinear/DequantizeLinear nodes (in place; see the module
    doc) and return the quantization table they describe.  A graph without them is left
    as it is and gives ``{}``.  Raises :class:`ModelInvalidError` naming the node for what
    cannot be read."""
    if not any(n.op in QDQ_OPS for n in graph.nodes):
        return {}
    from .optimize import fold_constants

    fold_constants(graph)  # exporters compute zero points and biases with small constant subgraphs
    quant: Dict[str, QuantParams] = {}
    producer = {o: n for n in graph.nodes for o in n.outputs}
    rename: Dict[str, str] = {}
    dropped = set()
    for node in graph.nodes:
        if node.op != "DequantizeLinear":
            continue
        x = node.inputs[0]
        if x in graph.constants:
            value, params = _dequantize_constant(graph, node)
            graph.constants[node.outputs[0]] = value
            if params is not None:
                quant[node.outputs[0]] = params
            dropped.add(node.name)
            continue
        chain, q = _back_to_quantize(x, producer)
        if q is not None and q.inputs[0] in graph.constants and any(n.op in LAYOUT_OPS for n in chain):
            raise ModelInvalidError(f"DequantizeLinear node {node.name!r} reads a constant put on its grid by "
                                    f"QuantizeLinear node {q.name!r} and then moved by "
                                    f"{', '.join(n.op for n in chain if n.op in LAYOUT_OPS)}: only a "
                                    f"constant's QuantizeLinear -> [Cast] -> DequantizeLinear is read", op=_OP)
        if q is not None and q.inputs[0] in graph.constants:  # a float constant put on its grid
            value, params = _fake_quantize_constant(graph, q, node)
            graph.constants[node.outputs[0]] = value
            quant[node.outputs[0]] = params
            dropped.update([node.name, q.name] + [n.name for n in chain])
            continue
        if q is None:
            raise ModelInvalidError(f"DequantizeLinear node {node.name!r} reads {x!r}, which no QuantizeLinear "
                                    f"produces: only constants and QuantizeLinear -> DequantizeLinear pairs are "
                                    f"read", op=_OP)
        params = _activation_params(graph, q)
        if _activation_params(graph, node) != params:
            raise ModelInvalidError(f"DequantizeLinear node {node.name!r} does not use the scale and zero point of "
                                    f"QuantizeLinear node {q.name!r}: a requantization is not supported", op=_OP)
        source = rename.get(q.inputs[0], q.inputs[0])
        if quant.setdefault(source, params) != params:
            raise ModelInvalidError(f"QuantizeLinear node {q.name!r} puts {source!r} on another grid than an earlier "
                                    f"QuantizeLinear of it ({params} against {quant[source]}): one grid per tensor "
                                    f"is supported", op=_OP)
        # layout ops between the pair (tf2onnx moves a Transpose there) move the codes: they
        # now move the float values, and their output is on the pair's grid
        last = source
        for moved in reversed([n for n in chain if n.op in LAYOUT_OPS]):
            other = next((n for n in graph.nodes if moved.outputs[0] in n.inputs and n not in chain
                          and n.op != "DequantizeLinear"), None)
            if other is not None:
                raise ModelInvalidError(f"{moved.op} node {moved.name!r} between QuantizeLinear node {q.name!r} and "
                                        f"DequantizeLinear node {node.name!r} is also read by {other.op} node "
                                        f"{other.name!r}: integer values read outside a pair are not supported",
                                        op=_OP)
            moved.inputs = [last] + list(moved.inputs[1:])
            last = moved.outputs[0]
            quant[last] = params
        rename[node.outputs[0]] = last
        dropped.add(node.name)
        dropped.update(n.name for n in chain if n.op not in LAYOUT_OPS)
        dropped.add(q.name)
    _check_quantize_readers(graph, dropped)
    graph.nodes = [n for n in graph.nodes if n.name not in dropped]
    for node in graph.nodes:
        node.inputs = [rename.get(i, i) for i in node.inputs]
    # a pair's output that is a graph output keeps its name: an Identity of the source
    for name in graph.outputs:
        if name in rename:
            graph.nodes.append(Node("Identity", f"{name}/dequantized", [rename[name]], [name], {}))
            quant[name] = quant[rename[name]]
    return symmetric_grids(quant, graph.constants, unrounded=graph.unrounded)


def symmetric_grids(quant: Dict[str, QuantParams], constants: Dict[str, np.ndarray],
                    keep: Iterable[str] = (), unrounded: Optional[Dict[str, np.ndarray]] = None
                    ) -> Dict[str, QuantParams]:
    """A pre-quantized model's table as RKNN-Toolkit2 builds it: every int8 grid whose zero
    points are all 0 (an activation, or a weight per tensor or per channel) becomes the
    symmetric grid through its negative end, ``scale * 128/127`` (float32) with zero point 0;
    a weight in ``constants`` is put on it (codes ``rint(value / scale')``, float32, as the
    vendor rounds them: ``q * 127/128``, so 127 becomes 126, -128 -127, 64 63).  Other grids
    (a zero point of -1, uint8 zero point 0, any other dtype) and the names in ``keep`` are
    left as they are.  Returns a new table; ``constants`` is updated in place, and each
    re-rounded constant's previous value goes into ``unrounded`` when given
    (:attr:`Graph.unrounded <rknnlite.model.graph.Graph.unrounded>`).

    Probes (RKNN-Toolkit2 2.5.0, ``build(do_quantization=False)``, rk3566, 2026-12-04; the
    tensors decoded from the vendor's files, its simulator's outputs on the new grids; see
    docs/vendor-examples.md):

    * QDQ ONNX: activation pairs with uint8 zero point 128 or int8 zero point 0, the model's
      input and output included (0.02 -> 0.0201575); ONNX Runtime-style int8 weights with
      zero point 0, per channel and per tensor (each scale * 128/127, codes re-rounded, the
      float or int32 bias kept as a real value); a zero point of -1 or a uint8 zero point of
      0 keeps its grid (its zero-point-0 weights still change);
    * PyTorch (``resnet18_qat`` example): the qint8 per-channel weights;
    * TFLite (``mobilenet_v1_qat`` example): the input (0.0078125 -> 0.00787402) and the
      per-channel weights;
    * TensorFlow FakeQuant (through tf2onnx, as QDQ pairs): activations whose nudged zero
      point is 128 (int8 0; 0.048107 -> 0.048486).  Its weights keep their own grid in the vendor's
      build, not this one: TensorFlow folds them into float constants inside tf2onnx and
      :func:`rknnlite.toolkit.loaders.tensorflow.weight_grids` gives them their grid back.

    Calibrated builds (``do_quantization=True``, refused for such models) are not concerned: an
    input calibrated on exactly [-1, 1] keeps scale 2/255 with zero point 0 there."""
    keep = set(keep)
    out: Dict[str, QuantParams] = {}
    for name, q in quant.items():
        if name in keep or q.dtype != "int8" or any(z != 0 for z in q.zero_point):
            out[name] = q
            continue
        scales = np.asarray(q.scale, np.float32) * np.float32(128) / np.float32(127)
        out[name] = QuantParams("int8", tuple(float(s) for s in scales), q.zero_point, q.axis)
        if name in constants:
            value = np.asarray(constants[name])
            shape = [1] * value.ndim
            if q.axis is not None:
                shape[q.axis] = -1
            s = scales.reshape(shape) if q.axis is not None else scales[0]
            codes = np.clip(np.rint(value.astype(np.float32) / s), -127, 127)
            if unrounded is not None:
                unrounded[name] = value
            constants[name] = (codes * s).astype(np.float32)
    return out


def _dequantize_constant(graph: Graph, node: Node) -> Tuple[np.ndarray, Optional[QuantParams]]:
    """The float value of a DequantizeLinear of a constant, and its parameters for the table
    (None for an int32 bias)."""
    q = np.asarray(graph.constants[node.inputs[0]])
    scale = _const(graph, node, 1, "scale").astype(np.float32)
    zp = _const(graph, node, 2, "zero point", optional=True)
    zp = np.zeros(scale.shape, q.dtype) if zp is None else zp
    if q.dtype.type not in _INT_TYPES + (np.int32,) or zp.dtype != q.dtype:
        raise ModelInvalidError(f"DequantizeLinear node {node.name!r}: values of type {q.dtype} with a zero point "
                                f"of type {zp.dtype}; int8, uint8 (or an int32 bias) with the same type were "
                                f"expected", op=_OP)
    axis = int(node.attrs.get("axis", 1))
    axis = axis + q.ndim if axis < 0 else axis
    if scale.size > 1:
        if scale.ndim != 1 or not 0 <= axis < q.ndim or q.shape[axis] != scale.size or zp.shape != scale.shape:
            raise ModelInvalidError(f"DequantizeLinear node {node.name!r}: {scale.size} scales for axis {axis} of "
                                    f"a {list(q.shape)} constant", op=_OP)
        shape = [1] * q.ndim
        shape[axis] = -1
        value = (q.astype(np.float32) - zp.reshape(shape).astype(np.float32)) * scale.reshape(shape)
    else:
        value = (q.astype(np.float32) - np.float32(zp.reshape(-1)[0])) * np.float32(scale.reshape(-1)[0])
    if q.dtype == np.int32:
        return value.astype(np.float32), None
    shift = 128 if q.dtype == np.uint8 else 0
    zps = tuple(int(z) - shift for z in zp.reshape(-1))
    scales = tuple(float(s) for s in scale.reshape(-1))
    return value.astype(np.float32), QuantParams("int8", scales, zps, axis if scale.size > 1 else None)


def _fake_quantize_constant(graph: Graph, q: Node, dq: Node) -> Tuple[np.ndarray, QuantParams]:
    """A float constant through QuantizeLinear -> DequantizeLinear (same parameters): its
    values on the grid, and the grid."""
    w = np.asarray(graph.constants[q.inputs[0]], np.float32)
    scale = _const(graph, q, 1, "scale").astype(np.float32)
    zp = _const(graph, q, 2, "zero point", optional=True)
    zp = np.zeros(scale.shape, np.uint8) if zp is None else zp
    if zp.dtype.type not in _INT_TYPES:
        raise ModelInvalidError(f"QuantizeLinear node {q.name!r}: zero point of type {zp.dtype}; int8 or uint8 was "
                                f"expected", op=_OP)
    for k, what in ((1, "scale"), (2, "zero point")):
        a, b = _const(graph, q, k, what, optional=True), _const(graph, dq, k, what, optional=True)
        if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
            raise ModelInvalidError(f"DequantizeLinear node {dq.name!r} does not use the {what} of QuantizeLinear "
                                    f"node {q.name!r}: a requantization is not supported", op=_OP)
    info = np.iinfo(zp.dtype)
    axis = int(q.attrs.get("axis", 1))
    axis = axis + w.ndim if axis < 0 else axis
    shape = [1] * w.ndim
    if scale.size > 1:
        shape[axis] = -1
    s, z = scale.reshape(shape), zp.reshape(shape).astype(np.float32)
    ints = np.clip(np.rint(w / s) + z, info.min, info.max)
    shift = 128 if zp.dtype == np.uint8 else 0
    params = QuantParams("int8", tuple(float(v) for v in scale.reshape(-1)),
                         tuple(int(v) - shift for v in zp.reshape(-1)), axis if scale.size > 1 else None)
    return ((ints - z) * s).astype(np.float32), params


def _activation_params(graph: Graph, node: Node) -> QuantParams:
    scale = _const(graph, node, 1, "scale")
    zp = _const(graph, node, 2, "zero point", optional=True)
    if scale.size != 1 or (zp is not None and zp.size != 1):
        raise ModelInvalidError(f"{node.op} node {node.name!r}: per-channel parameters on an activation are not "
                                f"supported (one scale and zero point per tensor)", op=_OP)
    if zp is not None and zp.dtype.type not in _INT_TYPES:
        raise ModelInvalidError(f"{node.op} node {node.name!r}: zero point of type {zp.dtype}; int8 or uint8 was "
                                f"expected", op=_OP)
    shift = 128 if zp is not None and zp.dtype == np.uint8 else 0
    z = 0 if zp is None else int(zp.reshape(-1)[0])
    return QuantParams("int8", (float(np.float32(scale.reshape(-1)[0])),), (z - shift,))


def _back_to_quantize(x: str, producer: Dict[str, Node]) -> Tuple[List[Node], Optional[Node]]:
    """The Cast and layout nodes between ``x`` and the QuantizeLinear it comes from (nearest
    ``x`` first), and that node."""
    chain = []
    node = producer.get(x)
    while node is not None and (node.op == "Cast" or node.op in LAYOUT_OPS):
        chain.append(node)
        node = producer.get(node.inputs[0])
    return chain, node if node is not None and node.op == "QuantizeLinear" else None


def _check_quantize_readers(graph: Graph, dropped: set) -> None:
    """Every QuantizeLinear (and Cast after it) goes with its pairs: refuse one whose output
    something else reads (an integer tensor the runtime does not hold)."""
    integer = {o: n for n in graph.nodes if n.name in dropped and n.op != "DequantizeLinear" for o in n.outputs}
    readers = [(f"node {n.name!r} ({n.op}) reads {name!r},", name) for n in graph.nodes if n.name not in dropped
               for name in n.inputs]
    readers += [(f"graph output {name!r} is", name) for name in graph.outputs]
    for node in graph.nodes:
        if node.op == "QuantizeLinear" and node.name not in dropped:
            raise ModelInvalidError(f"QuantizeLinear node {node.name!r}: its output is read by something other "
                                    f"than a DequantizeLinear (or is a graph output); only QuantizeLinear -> "
                                    f"DequantizeLinear pairs are supported", op=_OP)
    for who, name in readers:
        if name in integer:
            src = integer[name]
            raise ModelInvalidError(f"{who} the integer output of {src.op} node {src.name!r}; only "
                                    f"QuantizeLinear -> DequantizeLinear pairs are supported", op=_OP)


def _const(graph: Graph, node: Node, k: int, what: str, optional: bool = False) -> Optional[np.ndarray]:
    name = node.inputs[k] if len(node.inputs) > k else ""
    if not name:
        if optional:
            return None
        raise ModelInvalidError(f"{node.op} node {node.name!r} has no {what}", op=_OP)
    if name not in graph.constants:
        raise ModelInvalidError(f"{node.op} node {node.name!r}: its {what} {name!r} is not a constant", op=_OP)
    return np.asarray(graph.constants[name])
