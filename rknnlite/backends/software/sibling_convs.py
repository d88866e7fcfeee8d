"""Pointwise convs that read the same tensor, run as one wider conv.

An Inception block opens with three or four 1x1 convs of one input (64 + 96 + 16 output
channels from 192, say), and ResNet's first block with two.  Run one by one, each packs the
same input panels for its GEMM and runs a short one; run as one conv with the weights
stacked, the input is packed once and the GEMM has all the rows (measured 7-20 % faster on
inception_v2's groups on an AVX-512 Xeon).  :func:`merge_sibling_convs` makes that rewrite:

* a group is the ``Conv`` nodes that read the same non-constant input with a 1x1 kernel of
  constant float weights, ``group = 1``, equal attributes (strides, pads, dilations, fused
  activation, ...), a constant or absent bias, no fused residual, no sparse-kernel marking,
  and no quantization on any of their tensors (the exact integer convs of int8 models,
  :mod:`.integer_convs`, are float convs on integer codes and qualify);
* the group becomes one ``Conv`` (weights and biases concatenated, an absent bias zero)
  placed where the first of them was, writing ``<first output>__siblings``, and one
  ``ChannelSlice`` per original output, in the original node's place and under its name: a
  view of the merged output's channels, so nothing is copied for one image.

Each output value is computed exactly as before: every GEMM tile starts from the bias and
adds the products in k order, whatever the number of rows (``rk_gather_gemm``), so the
rewrite changes which rows share a pass, not a single sum.
"""

from __future__ import annotations

import copy
from typing import Dict, FrozenSet, List, Optional, Tuple

import numpy as np

from ...model.graph import Graph, Node, unique_name

__all__ = ["merge_sibling_convs"]


def merge_sibling_convs(graph: Graph, float32_tensors: FrozenSet[str] = frozenset()) -> Tuple[Graph, FrozenSet[str]]:
    """``graph`` with each group of sibling pointwise convs merged (module doc), and
    ``float32_tensors`` (the tensors and constants kept float32 in float16 mode besides the
    graph's own ``keep_float``) with the merged conv's output, weight and bias added where its
    convs' were kept.  Returns ``graph`` itself when no group has two convs."""
    kept = set(float32_tensors) | set(getattr(graph, "keep_float", ()))
    groups: Dict[tuple, List[int]] = {}
    for i, node in enumerate(graph.nodes):
        key = _group_key(graph, node, kept)
        if key is not None:
            groups.setdefault(key, []).append(i)
    merged = [members for members in groups.values() if len(members) > 1]
    if not merged:
        return graph, float32_tensors
    taken = set(graph.constants) | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    constants = dict(graph.constants)
    keep = set(float32_tensors)
    replaced: Dict[int, List[Node]] = {}
    for members in merged:
        convs = [graph.nodes[i] for i in members]
        first = convs[0]
        weights = [np.asarray(graph.constants[c.inputs[1]]) for c in convs]
        biases = [np.asarray(graph.constants[_bias_of(c)], weights[0].dtype).reshape(-1) if _bias_of(c)
                  else np.zeros(w.shape[0], weights[0].dtype) for c, w in zip(convs, weights)]
        y = unique_name(f"{first.outputs[0]}__siblings", taken)
        w_name, b_name = unique_name(f"{y}__weight", taken), unique_name(f"{y}__bias", taken)
        constants[w_name] = np.ascontiguousarray(np.concatenate(weights))
        constants[b_name] = np.ascontiguousarray(np.concatenate(biases))
        originals = {y: first.outputs[0], w_name: first.inputs[1], b_name: _bias_of(first)}
        keep.update(name for name, original in originals.items() if original in kept)
        replaced[members[0]] = [Node("Conv", f"{first.name}__siblings", [first.inputs[0], w_name, b_name], [y],
                                     dict(first.attrs))]
        start = 0
        for i, conv, w in zip(members, convs, weights):
            end = start + w.shape[0]
            replaced.setdefault(i, []).append(Node("ChannelSlice", conv.name, [y], list(conv.outputs),
                                                   {"start": start, "end": end}))
            start = end
    nodes = [new for i, node in enumerate(graph.nodes) for new in replaced.get(i, [node])]
    used = {name for node in nodes for name in node.inputs} | set(graph.outputs)
    out = copy.copy(graph)  # a vendor graph's keep_float / round_fp16 stay
    out.nodes = nodes
    out.constants = {k: v for k, v in constants.items() if k in used}
    return out, frozenset(keep)


def _bias_of(conv: Node) -> str:
    """The name of a Conv node's bias input, ``""`` when it has none."""
    return conv.inputs[2] if len(conv.inputs) > 2 else ""


def _group_key(graph: Graph, node: Node, kept: set) -> Optional[tuple]:
    """What a conv must share with its siblings to merge with them (input, weight shape and
    dtype, attributes, which of its output, weight and bias stay float32 in float16 mode), or
    None when it cannot merge."""
    if node.op != "Conv" or len(node.inputs) not in (2, 3) or len(node.outputs) != 1 or not node.outputs[0]:
        return None
    x, w, b, y = node.inputs[0], node.inputs[1], _bias_of(node), node.outputs[0]
    attrs = node.attrs
    if (not x or x in graph.constants or w not in graph.constants or (b and b not in graph.constants)
            or attrs.get("group", 1) != 1 or attrs.get("_residual") or attrs.get("_sparsity") is not None
            or any(t in graph.quant for t in (x, w, b, y) if t)):
        return None
    weight = np.asarray(graph.constants[w])
    if weight.dtype.kind != "f" or weight.ndim < 3 or any(d != 1 for d in weight.shape[2:]):
        return None
    if b and np.asarray(graph.constants[b]).size != weight.shape[0]:
        return None
    try:
        frozen = tuple(sorted((k, _hashable(v)) for k, v in attrs.items()))
    except TypeError:
        return None
    return x, weight.shape[1:], weight.dtype.str, frozen, y in kept, w in kept, b in kept


def _hashable(value):
    """An attribute value as a hashable key (lists and arrays as tuples)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    hash(value)
    return value
