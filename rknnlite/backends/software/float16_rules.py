"""Where RKNN-Toolkit2's simulator rounds to float16 differently from "every op's output":
graph rewrites and tensor sets the executor applies in float16 mode.

* **Residual convs** (:func:`split_residuals`).  The toolkit fuses ``Add(Conv(x), r)``
  [+ activation] into one Conv with a 4th, residual input (``attrs["_residual"]``,
  :func:`rknnlite.toolkit.optimize.fuse_residual_add`), which adds ``r`` to the float32
  accumulator and rounds once.  The simulator rounds the conv's output (with its bias) to
  float16, adds the residual and rounds again (its files hold the same ``ConvAddRelu``; a float16
  ``conv -> relu -> conv -> relu -> conv + residual -> relu`` equals it on 99.9 % of the values
  that way, 92 % rounding once), as the lowering of its own files does
  (:mod:`rknnlite.model.rknn_graph.lower`: ``ConvAdd`` is a Conv, then an Add).
  :func:`split_residuals` undoes the fusion: the Conv writes a tensor of its own (rounded to
  float16 as every tensor), an ``Add`` of the residual writes the node's output, and a fused
  activation runs after it as its own node.  A conv whose output is on an int8 grid keeps its
  residual (:mod:`.integer_convs` runs it as the vendor's int8 ConvAdd).
* **LayerNorm's and MatMul's input** (:data:`HALF_INPUT_OPS`).  Where the graph keeps a tensor
  float32 (a graph input), the simulator's exNorm and exMatMul still read it as float16 (a
  LayerNorm on a graph input equals it on every value with the input rounded first, 68.6 %
  without; ``MatMul -> GELU`` on a graph input 98 % with, 60 % without); the executor tells such
  a step so (``attrs["_half_input"]``) and the kernel rounds its copy of the input.  A conv
  reads the float32 values (``tests/test_float16_inputs.py``).
* **SiLU** (:func:`swish_gates`).  ``Mul(x, Sigmoid(x))`` (PyTorch's SiLU, YOLOv8's activation)
  is one float16 rounding in the simulator: the sigmoid stays float32 (a YOLOv8-style net's
  first SiLU equals its snapshot on 99.96 % of the values that way, 79 % rounding the sigmoid).
"""

from __future__ import annotations

import copy
from typing import Dict, List, Set

from ...model.graph import Graph, Node, unique_name

__all__ = ["HALF_INPUT_OPS", "split_residuals", "swish_gates"]

#: ops that read their data input (input 0) as float16 in the simulator even when the tensor
#: is kept float32 (module doc)
HALF_INPUT_OPS = ("LayerNormalization", "MatMul")


def split_residuals(graph: Graph) -> Graph:
    """``graph`` with each float residual Conv split into Conv, Add and its activation (module
    doc); ``graph`` itself when there is none."""
    quant = getattr(graph, "quant", None) or {}
    taken = set(graph.constants) | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    nodes: List[Node] = []
    changed = False
    for node in graph.nodes:
        if node.op != "Conv" or not node.attrs.get("_residual") or len(node.inputs) < 4 or node.outputs[0] in quant:
            nodes.append(node)
            continue
        changed = True
        y = node.outputs[0]
        conv_out = unique_name(f"{y}__conv", taken)
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith(("_residual", "_activation"))}
        nodes.append(Node("Conv", node.name, list(node.inputs[:3]), [conv_out], attrs))
        activation = node.attrs.get("_activation")
        sum_out = y if activation is None else unique_name(f"{y}__sum", taken)
        nodes.append(Node("Add", f"{node.name}__add", [conv_out, node.inputs[3]], [sum_out], {}))
        if activation is not None:
            nodes.append(_activation_node(node, activation, sum_out, y))
    if not changed:
        return graph
    out = copy.copy(graph)  # a vendor graph's keep_float / round_fp16 stay
    out.nodes = nodes
    return out


def _activation_node(conv: Node, activation: str, x: str, y: str) -> Node:
    """The fused activation of ``conv`` (the Conv kernel's ``_activation`` convention) as a node."""
    name = f"{conv.name}__{activation.lower()}"
    if activation == "Clip":  # the bounds as attributes (the Clip kernel's opset < 11 form)
        bounds = {k: conv.attrs[f"_activation_{k}"] for k in ("min", "max") if f"_activation_{k}" in conv.attrs}
        return Node("Clip", name, [x], [y], bounds)
    if activation == "LeakyRelu":
        return Node("LeakyRelu", name, [x], [y], {"alpha": conv.attrs.get("_activation_alpha", 0.01)})
    return Node(activation, name, [x], [y], {})


def swish_gates(graph: Graph) -> Set[str]:
    """The outputs of the ``Sigmoid`` nodes whose only reader is ``Mul(x, Sigmoid(x))`` of the
    sigmoid's own input (either operand order): kept float32 in float16 mode (module doc)."""
    readers: Dict[str, List[Node]] = {}
    for node in graph.nodes:
        for name in set(node.inputs):
            readers.setdefault(name, []).append(node)
    gates = set()
    for node in graph.nodes:
        if node.op != "Sigmoid" or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        gate = node.outputs[0]
        users = readers.get(gate, [])
        if len(users) == 1 and users[0].op == "Mul" and sorted(users[0].inputs) == sorted([node.inputs[0], gate]):
            gates.add(gate)
    return gates
