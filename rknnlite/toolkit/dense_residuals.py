"""The residual ``Add`` after a dense layer on tokens, as RKNN-Toolkit2's compiler treats it.

:func:`~rknnlite.toolkit.optimize.fold_dense_bias` makes a Linear on tokens a ``Gemm`` on their
rows between two Reshapes.  The vendor's compiler runs such a layer as a 1x1 conv in its conv
layout, and the residual ``Add`` of its output joins the conv when the sum is needed in that
layout too (a dense layer or a LayerNorm reads it) or the residual is held in it already (a
dense layer's or a LayerNorm's output), probed on rk3588 int8, 1x16x32 tokens
(``tests/data/vendor_int8``):

* ``x + Linear(x)`` (the residual is the layer's own input, the weight square) becomes one conv
  of weight ``W + I``, as :func:`~rknnlite.toolkit.optimize.fold_input_residual` does for convs;
* ``r + Linear(a)`` becomes its ConvAdd: the unrounded product plus ``r``, one rounding (in int8
  builds one requantization instead of two; float16 builds split it back,
  :func:`rknnlite.backends.software.float16_rules.split_residuals`);
* a sum that only the graph's output is, of a residual in the token layout (a graph input),
  stays a plain ``Add`` there (the vendor keeps Conv, Transpose, Add, and rknnlite equals it on
  every value).

:func:`fuse_dense_residuals` gives the ``Gemm`` the residual's rows as a 4th input
(``attrs["_residual"]``, as a fused Conv's) or folds the identity into its weight.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from ..model.graph import Graph, Node, unique_name

#: one-input elementwise activations a dense layer's rows pass through before being reshaped
#: back (``optimize._gemm_on_rows``): the vendor fuses them into the layer's conv
ROW_ACTIVATIONS = frozenset("Relu Clip LeakyRelu Sigmoid HardSigmoid HardSwish Tanh Gelu".split())

__all__ = ["ROW_ACTIVATIONS", "fuse_dense_residuals"]


def fuse_dense_residuals(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Fuse or fold each qualifying residual ``Add`` of a dense layer on rows (module doc) in
    place; returns how many.  ``shapes``: static shapes (the residual must have the sum's).
    Nothing in a pre-quantized import (``graph.quant``), whose Linears stay MatMuls."""
    if graph.quant:  # a pre-quantized import: its grids are the model's, not these fusions'
        return 0
    shapes = dict(shapes or {})
    folded = 0
    readers = graph.readers()
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    for add in list(graph.nodes):
        match = _dense_residual(graph, add, readers, producers, shapes)
        if match is None:
            continue
        gemm, back, r = match
        rows = gemm.inputs[0]
        to_rows = next((n for n in graph.nodes if n.op == "Reshape" and n.outputs == [rows]), None)
        w = graph.constants[gemm.inputs[1]]
        if to_rows is not None and to_rows.inputs[0] == r and w.shape[0] == w.shape[1] and not gemm.attrs.get("transB"):
            # x + Linear(x): one conv of weight W + I
            name = unique_name(f"{gemm.inputs[1]}_new", set(graph.constants))
            graph.constants[name] = (np.asarray(w, np.float32) + np.eye(w.shape[0], dtype=np.float32))
            gemm.inputs[1] = name
            back.outputs = list(add.outputs)
            graph.nodes.remove(add)
        elif not _fuse(graph, add, gemm, back, r, shapes):
            continue
        folded += 1
        readers = graph.readers()
        producers = {o: n for n in graph.nodes for o in n.outputs if o}
    return folded


def _dense_residual(graph: Graph, add: Node, readers, producers, shapes):
    """``(gemm, back, r)`` when ``add`` is ``Add(Reshape(Gemm(rows)), r)`` (either order) of a
    dense layer on rows whose sum a dense layer or LayerNorm reads, else None."""
    if add.op != "Add" or len(add.inputs) != 2 or len(add.outputs) != 1 or add.inputs[0] == add.inputs[1]:
        return None
    for y, r in (add.inputs, add.inputs[::-1]):
        back = producers.get(y)
        gemm = producers.get(back.inputs[0]) if back is not None and back.op == "Reshape" else None
        if gemm is None or gemm.op != "Gemm" or len(gemm.inputs) != 3 or gemm.attrs.get("_residual") \
                or gemm.attrs.get("transA") or gemm.inputs[1] not in graph.constants or not gemm.inputs[2]:
            continue
        if r in graph.constants or y in graph.outputs or back.inputs[0] in graph.outputs \
                or len(readers.get(y, [])) != 1 or len(readers.get(back.inputs[0], [])) != 1:
            continue
        shape_y, shape_r = shapes.get(y), shapes.get(r)
        if shape_y is None or tuple(shape_y) != tuple(shape_r or ()) or any(int(d) < 0 for d in shape_y):
            continue
        if _conv_layout_reader(graph, add.outputs[0], readers) or _conv_layout_made(r, producers):
            return gemm, back, r
    return None


def _conv_layout_made(name: str, producers) -> bool:
    """``name`` is a dense layer's output (the Reshape back from a Gemm's rows, or from an
    activation of them) or a LayerNorm's: the vendor holds it in its conv layout."""
    node = producers.get(name)
    if node is not None and node.op == "LayerNormalization":
        return True
    if node is None or node.op != "Reshape":
        return False
    source = producers.get(node.inputs[0])
    while source is not None and source.op in ROW_ACTIVATIONS:
        source = producers.get(source.inputs[0])
    return source is not None and source.op == "Gemm"


def _conv_layout_reader(graph: Graph, name: str, readers) -> bool:
    """A LayerNorm or a dense layer (a MatMul by a constant, or a Reshape to the rows a Gemm
    reads) reads ``name``."""
    for node in readers.get(name, []):
        if node.op == "LayerNormalization" and node.inputs[0] == name:
            return True
        if node.op == "MatMul" and node.inputs[0] == name and node.inputs[1] in graph.constants:
            return True
        if node.op == "Reshape" and any(n.op == "Gemm" and n.inputs[0] == node.outputs[0]
                                        for n in readers.get(node.outputs[0], [])):
            return True
    return False


def _fuse(graph: Graph, add: Node, gemm: Node, back: Node, r: str, shapes: Dict) -> bool:
    """``r`` to rows, added by ``gemm`` as its residual; ``back`` writes the Add's output; the
    three nodes move to the Add's place (``r`` may be computed after the Gemm).  False (nothing
    changed) when the rows would not be the Gemm's."""
    taken = set(graph.constants) | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    rows_shape = tuple(shapes.get(gemm.outputs[0]) or ())
    m, n = int(np.prod(shapes[r][:-1], dtype=np.int64)), int(shapes[r][-1])
    if rows_shape and rows_shape != (m, n):
        return False
    target = unique_name(f"{gemm.name}/residual_rows", taken)
    graph.constants[target] = np.array([m, n], np.int64)
    r_rows = unique_name(f"{r}__rows", taken)
    opset = {k: v for k, v in back.attrs.items() if k == "_opset"}
    reshape = Node("Reshape", f"{gemm.name}__residual_rows", [r, target], [r_rows], dict(opset))
    gemm.inputs = list(gemm.inputs) + [r_rows]
    gemm.attrs["_residual"] = True
    summed = unique_name(f"{add.outputs[0]}__rows", taken)
    gemm.outputs = [summed]
    back.inputs[0] = summed
    back.outputs = list(add.outputs)
    shapes[r_rows] = shapes[summed] = (m, n)
    for node in (gemm, back):
        graph.nodes.remove(node)
    at = graph.nodes.index(add)
    graph.nodes[at:at + 1] = [reshape, gemm, back]
    return True
