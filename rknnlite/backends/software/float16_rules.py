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
  float32 (a 4-D graph input; inputs of other ranks are rounded when staged,
  ``Executor.staging``), the simulator's exNorm and exMatMul still read it as float16 (a
  LayerNorm or a MatMul by a constant on a 1x2x16x32 input: every value equal to the simulator's
  with the input rounded first, 56-69 % without); the executor tells such a step so
  (``attrs["_half_input"]``) and the kernel rounds its copy of the input.  A conv and an Add
  read the float32 values (``tests/test_float16_inputs.py``), and so does any op an input on an
  int8 grid (an int8 build's): the vendor's int8 exNorm reads the grid values.
* **SiLU** (:func:`swish_gates`).  ``Mul(x, Sigmoid(x))`` (PyTorch's SiLU, YOLOv8's activation)
  is one float16 rounding in the simulator: the sigmoid stays float32 (a YOLOv8-style net's
  first SiLU equals its snapshot on 99.96 % of the values that way, 79 % rounding the sigmoid).
* **Dense layers** (:meth:`Graph.dense_layers <rknnlite.model.graph.Graph.dense_layers>`).
  ``Add(MatMul(x, W), b)`` with constant ``W`` and a bias along the last axis (PyTorch's
  ``Linear`` on a 3-D tensor) is one 1x1 conv in the simulator: the product stays float32, the
  float32 bias (kept so at build, ``Graph.biases``) is added and the sum rounded once.
* **Attention** (:func:`attention_intermediates`).  ``MatMul(Softmax(MatMul(q, k) [* scale]
  [+ mask]), v)`` (or ``v`` times the transposed probabilities) is one exSDPAttention: scores, scaled scores and probabilities stay float32
  and only its output is rounded (on a two-head attention of a graph input, every value equal
  to the simulator's that way, 54-65 % rounding any of them); its scale stays float32 (the
  vendor's file holds it so: YOLO11's ``8 ** -0.5`` rounded to float16 left 79 % equal).  The second MatMul reads the
  float32 probabilities (no :data:`HALF_INPUT_OPS` rounding).
"""

from __future__ import annotations

import copy
from typing import List, Set

from ...model.attention import find_attentions
from ...model.graph import Graph, Node, unique_name

__all__ = ["HALF_INPUT_OPS", "attention_intermediates", "split_residuals", "swish_gates"]

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
        if node.op not in ("Conv", "Gemm") or not node.attrs.get("_residual") or len(node.inputs) < 4 \
                or node.outputs[0] in quant:
            nodes.append(node)
            continue
        changed = True
        y = node.outputs[0]
        conv_out = unique_name(f"{y}__conv", taken)
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith(("_residual", "_activation"))}
        nodes.append(Node(node.op, node.name, list(node.inputs[:3]), [conv_out], attrs))
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
    readers = graph.readers()
    gates = set()
    for node in graph.nodes:
        if node.op != "Sigmoid" or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        gate = node.outputs[0]
        users = readers.get(gate, [])
        if len(users) == 1 and users[0].op == "Mul" and sorted(users[0].inputs) == sorted([node.inputs[0], gate]):
            gates.add(gate)
    return gates


def attention_intermediates(graph: Graph) -> Set[str]:
    """The scores, scaled scores and probabilities of each scaled dot-product attention
    (:func:`rknnlite.model.attention.find_attentions`), and its scale and mask constants: kept
    float32 in float16 mode (module doc; the build keeps the constants so too)."""
    kept: Set[str] = set()
    for att in find_attentions(graph):
        kept.update((att.scores, *att.links, *att.probs, *att.constants))
    return kept
