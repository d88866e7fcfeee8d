"""Scaled dot-product attention in a graph: the chains RKNN-Toolkit2's compiler fuses into one
``exSDPAttention``, whose arithmetic its simulator gives (both checked against it on probes,
``tests/data/vendor_fp16``, ``tests/data/vendor_int8``):

* float16: the scores, scaled scores and probabilities stay float32 and only the output is
  rounded (:func:`rknnlite.backends.software.float16_rules.attention_intermediates`);
* int8: the unscaled scores ``q kᵀ`` on an int8 grid of their own (the cfg's ``q_matmul``), the
  scale and mask applied in float, the probabilities on an int8 grid over ``[0, max]``
  (``q_softmax``), the output on its grid (:func:`rknnlite.toolkit.quantize.quantize_graph`).
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from .graph import Graph, Node

__all__ = ["Attention", "find_attentions"]


class Attention(NamedTuple):
    """One attention's tensors, by role."""

    #: ``MatMul(q, k)``'s output
    scores: str
    #: the outputs of the scale (Mul / Div by a scalar) and mask (Add of a constant) after it
    links: Tuple[str, ...]
    #: the Softmax output, and its transpose when the mixing reads that (YOLO11's ``v · pᵀ``)
    probs: Tuple[str, ...]
    #: the scale and mask constants
    constants: Tuple[str, ...]


def find_attentions(graph: Graph) -> List[Attention]:
    """Each ``MatMul(Softmax(s), v)`` over the last axis, or ``MatMul(v, Transpose(Softmax(s)))``
    with the last two axes swapped (YOLO11's C2PSA), where ``s`` = ``MatMul(q, k)`` of two
    activations, optionally multiplied or divided by a scalar constant and added to a constant
    mask, every link read by the next one only (and no graph output)."""
    readers = graph.readers()
    sole = lambda name, *ops: _sole_reader(graph, readers, name, *ops)  # noqa: E731
    found = []
    for node in graph.nodes:
        if node.op != "MatMul" or len(node.inputs) != 2 or any(n in graph.constants for n in node.inputs):
            continue
        links: List[Node] = []
        t = node.outputs[0]
        step = sole(t, "Mul", "Div", "Add", "Softmax")
        seen = set()
        while step is not None and step.op != "Softmax" and step.op not in seen and _constant_operand(graph, step, t):
            seen.add(step.op if step.op == "Add" else "scale")
            links.append(step)
            t = step.outputs[0]
            step = sole(t, "Mul", "Div", "Add", "Softmax")
        if step is None or step.op != "Softmax" or not _last_axis(step):
            continue
        probs = [step.outputs[0]]
        mix = sole(probs[0], "MatMul", "Transpose")
        if mix is not None and mix.op == "Transpose":  # v · pᵀ
            perm = list(mix.attrs.get("perm", ()))
            if len(perm) < 2 or perm != list(range(len(perm) - 2)) + [len(perm) - 1, len(perm) - 2]:
                continue
            probs.append(mix.outputs[0])
            mix = sole(probs[1], "MatMul")
            if mix is None or mix.inputs[1] != probs[1] or mix.inputs[0] in graph.constants:
                continue
        elif mix is None or mix.inputs[0] != probs[0] or mix.inputs[1] in graph.constants:
            continue
        found.append(Attention(node.outputs[0], tuple(n.outputs[0] for n in links), tuple(probs),
                               tuple(c for n in links for c in n.inputs if c in graph.constants)))
    return found


def _sole_reader(graph: Graph, readers: Dict[str, List[Node]], name: str, *ops: str) -> Optional[Node]:
    """The one node (of one of ``ops``) reading ``name``, a tensor that is no graph output."""
    users = readers.get(name, [])
    if len(users) != 1 or name in graph.outputs or users[0].op not in ops or len(users[0].outputs) != 1:
        return None
    return users[0]


def _constant_operand(graph: Graph, node: Node, x: str) -> bool:
    """``node`` combines ``x`` with a constant as an attention's scale (a scalar, ``x`` first for a
    Div) or mask (an Add of any constant)."""
    if len(node.inputs) != 2 or x not in node.inputs or node.inputs[0] == node.inputs[1]:
        return False
    other = graph.constants.get(node.inputs[1] if node.inputs[0] == x else node.inputs[0])
    if other is None or other.dtype.kind != "f":
        return False
    return node.op == "Add" or (other.size == 1 and (node.op == "Mul" or node.inputs[0] == x))


def _last_axis(softmax: Node) -> bool:
    """``softmax`` normalises over the last axis (opset 13's default; -1 written out below it)."""
    default = -1 if softmax.attrs.get("_opset", 13) >= 13 else 1
    return softmax.attrs.get("axis", default) == -1
