"""The graph IR shared by the toolkit (which builds it) and the software backend (which runs it).

A :class:`Graph` is a list of :class:`Node` in topological order, the names of its
inputs and outputs, and named constants (numpy arrays).  In a container file the
constants live in the weights blob and come back as read-only views of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

import numpy as np

from ..errors import ModelInvalidError
from .spec import QuantParams

#: Integer types a quantized tensor may use.
QUANT_DTYPES = ("int8", "uint8", "int16")
#: The values each of them holds (a zero point must be one of them).
_QUANT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
#: Normal float32 magnitudes (a scale outside them is lost in the kernels' float32 arithmetic).
_F32_TINY, _F32_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)

__all__ = ["Node", "Graph", "unique_name"]

_TENSOR_ATTR = "$tensor"
#: a non-finite float attribute (JSON has no inf or nan): ``{"$float": "inf" | "-inf" | "nan"}``
_FLOAT_ATTR = "$float"
_NON_FINITE = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


@dataclass
class Node:
    """One operator: ONNX-style ``op`` type, tensor names in and out, attributes.

    Attribute values are JSON scalars, strings, lists of those, or numpy arrays
    (stored as constants in a file).
    """

    op: str
    name: str
    inputs: List[str]
    outputs: List[str]
    attrs: Dict[str, Any] = field(default_factory=dict)


class Graph:
    """A model's computation: nodes in execution order, I/O names and constants.

    ``inputs`` and ``outputs`` are tensor names; an empty input name (``""``) in a
    node marks an omitted optional input, as in ONNX.
    """

    #: float16 runs: a float input of any rank but 4 is rounded to float16 as it is staged, as
    #: the layout conversion RKNN-Toolkit2's compiler puts after such an input rounds it
    #: (``Executor.staging``).  A graph holding the compiler's own nodes (a vendor file's) says False.
    layout_rounds_inputs = True

    def __init__(self, nodes: List[Node], inputs: List[str], outputs: List[str],
                 constants: Optional[Dict[str, np.ndarray]] = None,
                 quant: Optional[Dict[str, QuantParams]] = None):
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.constants: Dict[str, np.ndarray] = dict(constants or {})
        #: Quantization of tensors by name (int8 models): activations per tensor,
        #: weights per tensor or per channel (``QuantParams.axis``).
        self.quant: Dict[str, QuantParams] = dict(quant or {})
        #: A pre-quantized model's weights as its file gives them, for the constants whose
        #: values the vendor's symmetric grid re-rounded (``toolkit.qdq.symmetric_grids``):
        #: RKNN-Toolkit2's compiler folds from these (``toolkit.optimize.fold_input_residual``).
        self.unrounded: Dict[str, np.ndarray] = {}

    def validate(self) -> None:
        """Check names resolve in order: each node input is a graph input, a constant or an
        earlier node's output, no tensor is produced twice, every output is produced.

        Raises :class:`ModelInvalidError` naming the first problem.
        """
        known = set(self.inputs) | set(self.constants)
        if len(known) != len(self.inputs) + len(self.constants):
            raise ModelInvalidError("a graph input has the same name as a constant", op="load")
        for node in self.nodes:
            for name in node.inputs:
                if name and name not in known:
                    raise ModelInvalidError(
                        f"node {node.name!r} ({node.op}) reads tensor {name!r} before anything produces it",
                        op="load",
                    )
            for name in node.outputs:
                if name in known:
                    raise ModelInvalidError(f"tensor {name!r} is produced twice (node {node.name!r})", op="load")
                known.add(name)
        for name in self.outputs:
            if name not in known:
                raise ModelInvalidError(f"graph output {name!r} is never produced", op="load")
        for name, q in self.quant.items():
            if name not in known:
                raise ModelInvalidError(f"quantization given for unknown tensor {name!r}", op="load")
            if q.dtype not in QUANT_DTYPES or any(not s > 0 for s in q.scale):
                raise ModelInvalidError(
                    f"tensor {name!r}: quantization needs dtype in {QUANT_DTYPES} and positive scales, "
                    f"got {q.dtype} {list(q.scale)}",
                    op="load",
                )
            lo, hi = _QUANT_RANGES[q.dtype]
            if not all(lo <= z <= hi for z in q.zero_point) or not all(_F32_TINY <= s <= _F32_MAX for s in q.scale):
                raise ModelInvalidError(f"tensor {name!r}: {q.dtype} zero points must lie in [{lo}, {hi}] and "
                                        f"scales be normal float32 values, got {list(q.zero_point)} and "
                                        f"{list(q.scale)}", op="load")
            if len(q.scale) > 1 and name in self.constants:
                shape, axis = np.shape(self.constants[name]), 0 if q.axis is None else q.axis
                if not -len(shape) <= axis < len(shape) or shape[axis] != len(q.scale):
                    raise ModelInvalidError(f"tensor {name!r}: {len(q.scale)} per-channel scales on axis {axis} of a "
                                            f"{list(shape)} constant", op="load")

    def biases(self) -> Set[str]:
        """The constants a ``Conv``, ``ConvTranspose`` or ``Gemm`` reads as its bias (input 2), and
        the biases of :meth:`dense_layers`.  A float16 model keeps them at float32, as the NPU's bias blocks and RKNN-Toolkit2's
        simulator do (a float16 build of ``conv -> relu -> 1x1 conv`` equals the simulator's on
        every value with float32 biases, on 92 % with rounded ones)."""
        return {n.inputs[2] for n in self.nodes
                if n.op in ("Conv", "ConvTranspose", "Gemm") and len(n.inputs) > 2 and n.inputs[2] in self.constants} \
            | set(self.dense_layers().values())

    def float32_constants(self) -> Set[str]:
        """The constants a float16 model keeps at float32, as RKNN-Toolkit2's simulator does:
        :meth:`biases`, and the scale and shift of each ``ChannelAffine`` (the vendor's
        ``BatchNormalization`` computes ``x * scale + shift`` in float32 from float32 parameters
        and rounds once: a float16 build of ``HardSwish -> Mul -> Add -> Conv`` equals the
        simulator's on 99.9 % of the values so, the rest a unit away, and on 67 % with the parameters
        rounded); and the constant operand of a ``Mul``
        or ``Add`` with an int8 output (the vendor's int8 ``Mul`` holds it as float32, its ``Add`` as
        int32 in a step far finer than float16's: with them rounded, 97.5 % of such a chain's codes
        equal the simulator's; a float16 ``Mul`` or ``Add`` does round it)."""
        quant = self.quant or {}
        return self.biases() | {name for n in self.nodes
                                if n.op == "ChannelAffine" or (n.op in ("Mul", "Add") and n.outputs[0] in quant)
                                for name in n.inputs[1 if n.op == "ChannelAffine" else 0:3] if name in self.constants}

    def readers(self) -> Dict[str, List[Node]]:
        """Each tensor's reading nodes, in graph order (a node reading it twice listed once)."""
        readers: Dict[str, List[Node]] = {}
        for node in self.nodes:
            for name in dict.fromkeys(node.inputs):
                if name:
                    readers.setdefault(name, []).append(node)
        return readers

    def dense_layers(self) -> Dict[str, str]:
        """``{product: bias}`` of each dense layer exported as ``Add(MatMul(x, W), b)`` (PyTorch's
        ``Linear`` on a tensor of more than two dimensions): ``W`` a 2-D constant, the product read
        by that Add only and no graph output, ``b`` a float constant of ``W``'s output width along
        the last axis.  The vendor compiles each to one 1x1 conv, whose float16 form adds the
        float32 bias to the unrounded product."""
        readers = self.readers()
        layers: Dict[str, str] = {}
        for node in self.nodes:
            w = self.constants.get(node.inputs[1]) if node.op == "MatMul" and len(node.inputs) == 2 else None
            if w is None or w.ndim != 2 or node.inputs[0] in self.constants or node.outputs[0] in self.outputs:
                continue
            users = readers.get(node.outputs[0], [])
            if len(users) != 1 or users[0].op != "Add" or len(users[0].inputs) != 2:
                continue
            bias = users[0].inputs[1] if users[0].inputs[0] == node.outputs[0] else users[0].inputs[0]
            b = self.constants.get(bias)
            if b is not None and b.dtype.kind == "f" and b.size == w.shape[1] and b.shape[-1:] == (w.shape[1],):
                layers[node.outputs[0]] = bias
        return layers

    def produced(self) -> List[str]:
        """Every tensor a node produces, in execution order, once each (graph inputs and
        omitted outputs left out): what a run can expose as extra outputs."""
        produced: List[str] = []
        seen = set(self.inputs)
        for node in self.nodes:
            for name in node.outputs:
                if name and name not in seen:
                    seen.add(name)
                    produced.append(name)
        return produced

    # -- serialisation -------------------------------------------------------------------

    def to_dict(self) -> Tuple[dict, Dict[str, np.ndarray]]:
        """``(graph_dict, constants)`` for the container writer: array attributes become
        constants referenced as ``{"$tensor": name}``, non-finite floats (an opset-10 Pad's
        ``value=-inf``) ``{"$float": "-inf"}``."""
        constants = dict(self.constants)
        nodes = []
        for node in self.nodes:
            attrs = {}
            for key, value in node.attrs.items():
                if isinstance(value, np.ndarray):
                    ref = f"{node.name}/{key}"
                    constants[ref] = value
                    value = {_TENSOR_ATTR: ref}
                attrs[key] = _encode_float(value)
            nodes.append({"op": node.op, "name": node.name, "inputs": node.inputs,
                          "outputs": node.outputs, "attrs": attrs})
        d = {"nodes": nodes, "inputs": self.inputs, "outputs": self.outputs}
        if self.quant:
            d["quant"] = {name: {"dtype": q.dtype, "scale": list(q.scale), "zero_point": list(q.zero_point),
                                 "axis": q.axis} for name, q in self.quant.items()}
        return d, constants

    @classmethod
    def from_dict(cls, d: Mapping, constants: Mapping[str, np.ndarray]) -> "Graph":
        """Rebuild a graph from :meth:`to_dict` output; validates structure and order."""
        try:
            inputs = _names(d["inputs"], "graph inputs")
            outputs = _names(d["outputs"], "graph outputs")
            raw_nodes = d["nodes"]
            if not isinstance(raw_nodes, list):
                raise TypeError("nodes must be a list")
            attr_refs = set()
            nodes = []
            for i, n in enumerate(raw_nodes):
                if not isinstance(n, dict) or not isinstance(n.get("op"), str) or not isinstance(n.get("name"), str):
                    raise TypeError(f"node #{i} must have string 'op' and 'name'")
                attrs = {}
                raw_attrs = n.get("attrs", {})
                if not isinstance(raw_attrs, dict):
                    raise TypeError(f"node {n['name']!r}: attrs must be an object")
                for key, value in raw_attrs.items():
                    if isinstance(value, dict) and set(value) == {_TENSOR_ATTR}:
                        ref = value[_TENSOR_ATTR]
                        if ref not in constants:
                            raise KeyError(f"node {n['name']!r} attribute {key!r} names missing constant {ref!r}")
                        attr_refs.add(ref)
                        value = constants[ref]
                    attrs[key] = _decode_float(value)
                nodes.append(Node(n["op"], n["name"], _names(n["inputs"], "node inputs", allow_empty=True),
                                  _names(n["outputs"], "node outputs"), attrs))
            raw_quant = d.get("quant", {})
            if not isinstance(raw_quant, dict):
                raise TypeError("quant must be an object")
            quant = {name: _quant(q, name) for name, q in raw_quant.items()}
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise ModelInvalidError(f"malformed graph: {e}", op="load") from None
        graph = cls(nodes, inputs, outputs, {k: v for k, v in constants.items() if k not in attr_refs}, quant)
        graph.validate()
        return graph


def _quant(q, name: str) -> QuantParams:
    if not isinstance(q, dict):
        raise TypeError(f"quant[{name!r}] must be an object")
    scale = tuple(float(v) for v in q["scale"])
    zero_point = tuple(int(v) for v in q["zero_point"])
    if not scale or len(scale) != len(zero_point):
        raise ValueError(f"quant[{name!r}] needs as many zero points as scales")
    axis = q.get("axis")
    return QuantParams(str(q["dtype"]), scale, zero_point, None if axis is None else int(axis))


def _names(value, what: str, allow_empty: bool = False) -> List[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) and (s or allow_empty) for s in value):
        raise TypeError(f"{what} must be a list of tensor names")
    return list(value)


def unique_name(base: str, taken: set) -> str:
    """``base``, or ``base_1``, ``base_2``... : the first not in ``taken``, which it joins (the
    names a graph rewrite gives the tensors and constants it adds)."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _encode_float(value):
    """An attribute value with its non-finite floats (also in lists) as ``{"$float": ...}``."""
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT_ATTR: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, list):
        return [_encode_float(v) for v in value]
    return value


def _decode_float(value):
    """The inverse of :func:`_encode_float` (``ValueError`` for another ``$float`` text)."""
    if isinstance(value, dict) and set(value) == {_FLOAT_ATTR}:
        text = value[_FLOAT_ATTR]
        if text not in _NON_FINITE:
            raise ValueError(f"{_FLOAT_ATTR} must be one of {sorted(_NON_FINITE)}, got {text!r}")
        return _NON_FINITE[text]
    if isinstance(value, list):
        return [_decode_float(v) for v in value]
    return value
