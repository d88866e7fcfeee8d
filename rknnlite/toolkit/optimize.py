"""Graph optimisation passes run by the toolkit's ``build`` (in this order):

1. :func:`fold_constants` - ``Constant`` nodes become constants; a node whose inputs are
   all constants is executed once through its registered kernel and replaced by its
   outputs (Shape/Gather/Concat chains, ConstantOfShape, Reshape of a constant...);
   ``Shape``/``Size`` of a tensor whose shape is fully static folds too.  Folded values
   keep the dtype the kernel gives (int64 shapes stay int64, floats are float32).
   Then :func:`remove_dead_nodes` drops what no output needs (as the vendor's constant
   folding does), and :func:`~rknnlite.toolkit.static_shapes.static_shapes` gives the passes
   below the static shapes import could not infer (after a Reshape whose target folding made
   constant).
1b. :func:`correct_ops` - ``Conv`` / ``ConvTranspose`` state their ``kernel_shape``,
   ``strides``, ``dilations`` and ``pads`` explicitly, and a ``Reshape`` target with ``0`` /
   ``-1`` whose result is static becomes that shape (the vendor's ``correct_ops`` stage).
2. :func:`remove_identities` - ``Identity`` and inference-mode ``Dropout`` are removed
   and their consumers rewired; graph outputs keep their names.  Then
   :func:`fuse_hard_swish` makes a HardSwish exported as several nodes one node again, and
   :func:`fuse_layer_norm` a LayerNorm exported as its arithmetic one ``LayerNormalization``
   (:func:`fuse_gelu` likewise an exact GELU one ``Gelu``).
3. :func:`fold_batchnorm` - an inference ``BatchNormalization`` right after a ``Conv``
   whose output nothing else reads is merged into the Conv's weights and bias
   (computed in float64, stored as float32).
4. :func:`fold_conv_affine` - a chain of ``Mul`` / ``Add`` / ``Sub`` / ``Div`` by
   per-output-channel float constants and inference ``BatchNormalization`` after a
   ``Conv`` or ``ConvTranspose`` is merged into its weights and bias the same way.
5. :func:`fold_dense_bias` - ``Gemm`` without C, or ``MatMul`` of a 2-D input by a
   constant matrix, followed by ``Add`` (or ``Sub``) of a constant bias becomes one
   ``Gemm`` with that bias as C (bit for bit what the two nodes computed).  Then
   :func:`spatial_means_as_pools` makes a ``ReduceMean`` over H and W a
   ``GlobalAveragePool``, and :func:`split_global_average_pools` a ``GlobalAveragePool``
   over more than 7 x 7 the chain of depthwise convs the vendor's compiler makes of it
   (in builds that round values, :func:`splits_pools`).
5c. :func:`fold_input_residual` - ``Add(x, Conv(x))`` of a channel-preserving conv with
   "same" padding becomes ``Conv(x, W + I)``, as the vendor's compiler folds it (in every build).
6. :func:`fuse_residual_add` - ``Add`` / ``Sum`` of a ``Conv`` output (read by nothing
   else) and another tensor of the same static shape becomes one Conv with that tensor
   as a 4th, residual input (``attrs["_residual"]``), added before any activation.
   It runs right before 8, so ``Conv -> Add -> Relu`` ends as one Conv.
7. :func:`fuse_channel_affine` - an inference ``BatchNormalization`` or a chain of
   per-channel ``Mul`` / ``Add`` / ``Sub`` / ``Div`` by constants that no Conv can absorb
   (e.g. after a ``Concat``), with an optional Relu / Clip / LeakyRelu, becomes one
   ``ChannelAffine`` node: one pass over the tensor instead of several.  In builds that
   round as the vendor's (``vendor_affines``) a ``Mul(c, x)`` / ``Add(c, x)`` stays an op of
   its own and :func:`fold_affine_into_conv` folds a ``ChannelAffine`` an unpadded Conv reads
   into that conv, as RKNN-Toolkit2's compiler does.
8. :func:`fuse_activations` - ``Conv`` followed by an activation the conv kernel can
   apply itself becomes one Conv with ``attrs["_activation"]`` (only when the conv
   kernel declares support; see the function).  It runs after 3-5, so
   ``Conv -> Mul -> Add -> Relu`` ends as one Conv with a fused Relu.
9. :func:`remove_dead_nodes` - nodes and constants no graph output depends on are dropped.

Finally graph outputs that became constants are re-emitted through an ``Identity``
node, so every output is produced by a node.

Every pass mutates the graph it is given and returns how many nodes it changed;
:func:`optimize` copies the graph first and runs them all.

The passes fall into RKNN-Toolkit2's four optimiser stages (:data:`STAGES`), which
``optimize(..., stages=callback)`` reports (what ``RKNN(verbose=True)`` writes as
``check*.onnx``, see :mod:`rknnlite.toolkit.check_models`): ``base_optimize`` (the graph
as given), ``fold_constant`` (1), ``correct_ops`` (1b) and ``fuse_ops`` (2-9 and the
outputs' finishing).  The Conv's fused activation and residual add (6, 8) are how the
software kernels run a Conv, not graph rewrites (the vendor's compiler fuses them after
its stages): they alone do not make ``fuse_ops`` a change.
"""

from __future__ import annotations

import copy
import logging
from functools import partial
from typing import Callable, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ModelInvalidError
from ..model.graph import Graph, Node, unique_name
from ..model.spec import QuantParams
from .dense_residuals import ROW_ACTIVATIONS, fuse_dense_residuals
from .static_shapes import output_shape, static_shapes

__all__ = [
    "optimize",
    "STAGES",
    "fold_constants",
    "correct_ops",
    "remove_identities",
    "fuse_gelu",
    "fuse_hard_swish",
    "fuse_layer_norm",
    "fold_batchnorm",
    "fold_conv_affine",
    "fold_dense_bias",
    "global_pool_stages",
    "spatial_means_as_pools",
    "split_global_average_pools",
    "splits_pools",
    "fold_input_residual",
    "fuse_residual_add",
    "fold_affine_into_conv",
    "fuse_channel_affine",
    "fuse_activations",
    "remove_dead_nodes",
    "finalize_outputs",
    "conv_fusable_activations",
]

_log = logging.getLogger("rknnlite.toolkit")

#: Ops never folded even with constant inputs (their value is not a function of the inputs).
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


#: RKNN-Toolkit2's optimiser stages, in order, as :func:`optimize` reports them.
STAGES = ("base_optimize", "fold_constant", "correct_ops", "fuse_ops")

#: Passes of the ``fuse_ops`` stage that alone leave it unchanged (see the module doc).
_KERNEL_FUSIONS = ("residual add fusion", "activation fusion")


def optimize(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None, *,
             activation_fusion: bool = True, residual_fusion: bool = True, split_pools: bool = True,
             vendor_affines: bool = False, stages: Optional[Callable[[str, Graph], None]] = None) -> Graph:
    """Run every pass (see the module doc) on a copy of ``graph`` and return the copy.

    ``shapes`` maps tensor names to static shapes (``-1`` for an unknown dim), e.g.
    :attr:`ImportedModel.shapes <rknnlite.toolkit.onnx_import.ImportedModel.shapes>`;
    it lets ``Shape``/``Size`` of statically shaped tensors fold, and residual adds fuse
    (they need both operands' shapes).  ``activation_fusion`` / ``residual_fusion`` /
    ``split_pools``: run :func:`fuse_activations` / :func:`fuse_residual_add` /
    :func:`split_global_average_pools` (see :func:`splits_pools`).  ``vendor_affines``: arrange
    per-channel affine steps as RKNN-Toolkit2's compiler does (builds pass what
    :func:`splits_pools` says): a ``Mul`` / ``Add`` whose constant is the first operand stays an
    op of its own (:func:`fuse_channel_affine`), and a chain an unpadded ``Conv`` reads folds
    into that conv (:func:`fold_affine_into_conv`); the default fuses every chain into one
    ``ChannelAffine``, which float32 computes exactly.
    Constant arrays are shared with the input graph, not copied.

    ``stages(name, graph)``, when given, is called with ``"base_optimize"`` and ``graph``
    first, then after each later stage of :data:`STAGES` that changed the graph, with the
    graph as that stage leaves it (the one being optimised: read it, do not change it).
    """
    if stages is not None:
        stages(STAGES[0], graph)
    g = copy.copy(graph)  # keeps any other graph fields
    g.nodes = [Node(n.op, n.name, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in graph.nodes]
    g.inputs, g.outputs, g.constants = list(graph.inputs), list(graph.outputs), dict(graph.constants)
    g.quant = dict(graph.quant)  # passes move a pre-quantized model's grids: not the caller's table
    counts = {"constant folding": fold_constants(g, shapes), "dead node removal": remove_dead_nodes(g)}
    if stages is not None and any(counts.values()):
        stages(STAGES[1], g)
    shapes = static_shapes(g, shapes)
    counts["op correction"] = correct_ops(g, shapes)
    if stages is not None and counts["op correction"]:
        stages(STAGES[2], g)
    fusions = {
        "identity/dropout removal": remove_identities(g),
        "hard swish fusion": fuse_hard_swish(g),
        "layer norm fusion": fuse_layer_norm(g, shapes),
        "gelu fusion": fuse_gelu(g),
        "batchnorm folding": fold_batchnorm(g),
        "conv affine folding": fold_conv_affine(g),
        "dense bias folding": fold_dense_bias(g, shapes),
        "dense residual fusion": fuse_dense_residuals(g, shapes),
        "spatial mean as a pool": spatial_means_as_pools(g, shapes),
        "global average pool split": split_global_average_pools(g, shapes) if split_pools else 0,
        "input residual folding": fold_input_residual(g),
    }
    # after the folds above, so that a Conv they extended can take its residual and activation too
    if residual_fusion:
        fusions["residual add fusion"] = fuse_residual_add(g, shapes)
    fusions["channel affine fusion"] = fuse_channel_affine(g, shapes, constant_first=not vendor_affines)
    if vendor_affines:
        fusions["affine into conv folding"] = fold_affine_into_conv(g)
    if activation_fusion:
        fusions["activation fusion"] = fuse_activations(g)
    fusions["dead node removal (after fusion)"] = remove_dead_nodes(g)
    fusions["output finalisation"] = finalize_outputs(g)
    counts.update(fusions)
    if stages is not None and any(v for k, v in fusions.items() if k not in _KERNEL_FUSIONS):
        stages(STAGES[3], g)
    _log.debug("optimize: %s; %d nodes left", ", ".join(f"{k} {v}" for k, v in counts.items()), len(g.nodes))
    return g


# -- 1. constant folding ---------------------------------------------------------------------


def fold_constants(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Replace nodes computable at build time by constants; returns the number folded.  A
    ``Shape`` of a tensor whose shape is static (``shapes``, or what the nodes before it give,
    :func:`~rknnlite.toolkit.static_shapes.output_shape`) folds too.

    Raises :class:`ModelInvalidError` naming the node if its kernel fails on constant
    inputs (it would fail at run time as well).
    """
    from ..backends.software.ops import KERNELS

    consts = graph.constants
    shapes = dict(shapes or {})
    kept: List[Node] = []
    folded = 0
    for node in graph.nodes:
        values = _fold_node(node, consts, shapes, KERNELS)
        if values is None:
            kept.append(node)
            if node.outputs and node.outputs[0] and node.outputs[0] not in shapes:
                shape = output_shape(node, consts, shapes)  # for a later Shape of it
                if shape is not None:
                    shapes[node.outputs[0]] = shape
            continue
        for name, value in zip(node.outputs, values):
            if name:
                consts[name] = value
        folded += 1
    graph.nodes = kept
    return folded


def _fold_node(node: Node, consts, shapes, kernels) -> Optional[List[np.ndarray]]:
    from ..backends.software.ops.arity import check_inputs

    if node.op == "Constant":
        spec = kernels["Constant"]
        return spec.fn([], spec.prepare(dict(node.attrs), []))
    if node.op in ("Shape", "Size") and node.inputs and node.inputs[0] not in consts:
        shape = shapes.get(node.inputs[0])
        if shape is None or any(int(d) < 0 for d in shape):
            return None
        shape = tuple(int(d) for d in shape)
        if node.op == "Size":
            return [np.array(int(np.prod(shape, dtype=np.int64)), np.int64)]
        return [np.array(_shape_slice(shape, node.attrs), np.int64)]
    if node.op in _NO_FOLD or node.op not in kernels:
        return None
    if not all(n in consts for n in node.inputs if n):
        return None
    if node.op == "Dropout" and not _dropout_is_inference(node, consts):
        return None
    check_inputs(node.name, node.op, node.inputs, node.attrs.get("_opset"), "build")
    spec = kernels[node.op]
    args = [_kernel_input(consts[n]) if n else None for n in node.inputs]
    attrs = dict(node.attrs)
    try:
        if spec.prepare is not None:
            attrs = spec.prepare(attrs, list(args))
        results = spec.fn(args, attrs)
    except ModelInvalidError as e:
        raise ModelInvalidError(f"node {node.name!r} ({node.op}): {e.message}", op="build") from None
    except Exception as e:  # the kernel would fail the same way at run time
        raise ModelInvalidError(
            f"node {node.name!r} ({node.op}) fails on its constant inputs: {type(e).__name__}: {e}", op="build"
        ) from None
    if len(results) < len([n for n in node.outputs if n]):
        return None
    return [np.asarray(r) for r in results]


def _kernel_input(a: np.ndarray) -> np.ndarray:
    """Constants as a kernel receives them at run time: floats in float32."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.kind == "f" and a.dtype != np.float32 else a


def _shape_slice(shape: Tuple[int, ...], attrs) -> Tuple[int, ...]:
    r = len(shape)
    start = int(attrs.get("start", 0))
    end = attrs.get("end")
    end = r if end is None else int(end)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    return shape[start:end]


def _dropout_is_inference(node: Node, consts) -> bool:
    """True when the Dropout is the identity (inference mode)."""
    if node.attrs.get("is_test", 1) == 0 and node.attrs.get("_opset", 13) < 7:
        return False
    if len(node.inputs) > 2 and node.inputs[2]:
        mode = consts.get(node.inputs[2])
        return mode is not None and not bool(np.asarray(mode).reshape(-1)[0])
    return True


# -- 1b. explicit attributes -----------------------------------------------------------------


def correct_ops(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """State what ONNX leaves implicit, as RKNN-Toolkit2's ``correct_ops`` stage does;
    returns the number of nodes changed.  Nothing computes differently.

    * ``Conv`` / ``ConvTranspose``: the absent ones of ``kernel_shape`` (the weight's
      spatial dims), ``strides`` and ``dilations`` (ones) and ``pads`` (zeros; not with an
      ``auto_pad`` other than ``NOTSET`` nor a ConvTranspose's ``output_shape``).  Only
      when the weight's shape is known (a constant or ``shapes``).
    * ``Reshape`` whose target (a constant) holds ``0`` (without ``allowzero``) or ``-1`` and
      whose output shape is static in ``shapes`` (see :func:`~rknnlite.toolkit.static_shapes.static_shapes`): the target
      becomes that shape (int64; a new constant when something else reads the old one).
    """
    shapes = shapes or {}
    consts = graph.constants
    users = _consumers(graph)
    changed = 0
    for node in graph.nodes:
        if node.op in ("Conv", "ConvTranspose") and len(node.inputs) > 1:
            w = consts.get(node.inputs[1])
            wshape = tuple(w.shape) if w is not None else tuple(shapes.get(node.inputs[1]) or ())
            nd = len(wshape) - 2
            if nd < 1 or any(int(d) < 0 for d in wshape):
                continue
            add: Dict[str, object] = {"kernel_shape": [int(d) for d in wshape[2:]], "strides": [1] * nd,
                                      "dilations": [1] * nd}
            if node.attrs.get("auto_pad", "NOTSET") == "NOTSET" and "output_shape" not in node.attrs:
                add["pads"] = [0] * (2 * nd)
            add = {k: v for k, v in add.items() if k not in node.attrs}
            if add:
                node.attrs.update(add)
                changed += 1
        elif node.op == "Reshape" and len(node.inputs) == 2 and len(node.outputs) == 1:
            target = consts.get(node.inputs[1])
            out = shapes.get(node.outputs[0])
            if target is None or target.dtype.kind not in "iu" or out is None or any(int(d) < 0 for d in out):
                continue
            dims = [int(d) for d in np.ravel(target)]
            if len(dims) != len(out) or not (-1 in dims or (0 in dims and not node.attrs.get("allowzero", 0))):
                continue
            value = np.array([int(d) for d in out], np.int64)
            name = node.inputs[1]
            if len(users.get(name, [])) > 1 or name in graph.outputs:
                name = _unique(consts, f"{node.name}/shape")
            consts[name] = value
            node.inputs = [node.inputs[0], name]
            changed += 1
    return changed


# -- 2. Identity / Dropout removal -----------------------------------------------------------


def remove_identities(graph: Graph) -> int:
    """Remove Identity and inference Dropout nodes; returns how many were removed.

    A node whose output is not a graph output: its consumers read its input instead.
    A node whose output is a graph output: the producer of its input is renamed to
    produce the graph output directly (when that input is a node's output and not a
    graph output itself); otherwise the node stays.  A Dropout whose mask is read
    stays too.
    """
    removed = 0
    outputs = set(graph.outputs)
    for node in list(graph.nodes):
        if not _is_identity(node, graph):
            continue
        src, dst = node.inputs[0], node.outputs[0]
        if dst not in outputs:
            graph.nodes.remove(node)
            _replace_uses(graph, dst, src)
            removed += 1
            continue
        producer = next((n for n in graph.nodes if src in n.outputs), None)
        if producer is None or src in outputs or src in graph.inputs:
            continue
        graph.nodes.remove(node)
        producer.outputs = [dst if o == src else o for o in producer.outputs]
        _replace_uses(graph, src, dst)
        if src in graph.quant and dst not in graph.quant:
            # a pre-quantized model's grid goes with the tensor (PyTorch's DeQuantStub is an
            # Identity to the output: without it the int8 Add before it lost its output grid)
            graph.quant[dst] = graph.quant[src]
        removed += 1
    return removed


def _is_identity(node: Node, graph: Graph) -> bool:
    if not node.inputs or not node.inputs[0]:
        return False
    if node.op == "Identity":
        return True
    if node.op != "Dropout" or not _dropout_is_inference(node, graph.constants):
        return False
    if len(node.outputs) > 1 and node.outputs[1]:
        mask = node.outputs[1]
        if mask in graph.outputs or any(mask in n.inputs for n in graph.nodes):
            return False
    return True


def _replace_uses(graph: Graph, old: str, new: str) -> None:
    for n in graph.nodes:
        if old in n.inputs:
            n.inputs = [new if i == old else i for i in n.inputs]
    graph.outputs = [new if o == old else o for o in graph.outputs]


def _consumers(graph: Graph) -> Dict[str, List[Node]]:
    users: Dict[str, List[Node]] = {}
    for n in graph.nodes:
        for name in n.inputs:
            if name:
                users.setdefault(name, []).append(n)
    return users


# -- 2b. decomposed HardSwish -----------------------------------------------------------------


def _sole_reader(users: Mapping[str, List[Node]], outputs, name: str, op: Optional[str] = None) -> Optional[Node]:
    """The one node reading ``name`` (of type ``op`` when given) with one output, when nothing
    else reads it and it is no graph output (``outputs``); else None: a fusion's chain link."""
    readers = users.get(name, [])
    if len(readers) != 1 or name in outputs or len(readers[0].outputs) != 1 or op not in (None, readers[0].op):
        return None
    return readers[0]


def _other_operand(node: Node, name: str) -> Optional[str]:
    """The input of a two-input ``node`` that is not ``name`` (None when ``name`` is not one of
    them, or is both)."""
    if len(node.inputs) != 2 or name not in node.inputs or node.inputs[0] == node.inputs[1]:
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _close(v, value: float) -> bool:
    """``v`` is a number within float32 rounding (1e-6 relative) of ``value``."""
    return isinstance(v, (int, float, np.number)) and not isinstance(v, bool) \
        and abs(float(v) - value) <= 1e-6 * abs(value)


def _scalar_is(consts: Mapping[str, np.ndarray], name: Optional[str], value: float) -> bool:
    """``name`` is a one-element float constant within float32 rounding of ``value``."""
    k = consts.get(name) if name else None
    return k is not None and k.dtype.kind == "f" and k.size == 1 and _close(k.reshape(()).item(), value)


def fuse_hard_swish(graph: Graph) -> int:
    """Rewrite a HardSwish exported as several nodes into one ``HardSwish`` node; returns how many.

    Two forms, ``x`` any tensor:

    * ``Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)`` (or the last step ``Mul(., 1/6)``), as
      PaddlePaddle exports ``hardswish`` (PP-OCR, PP-LCNet);
    * ``Mul(x, HardSigmoid(x, alpha=1/6, beta=0.5))``, as PyTorch exports ``Hardswish``
      below opset 14.

    The same function (``x * clip(x / 6 + 0.5, 0, 1)``, equal up to float32 rounding), and the
    form the vendor's compiler runs: one activation whose output alone is quantized, where the
    decomposed form would put an int8 grid on each intermediate.  Conditions: every intermediate
    has the next node as its only reader and is not a graph output; the constants are scalars
    (3, 0, 6 and 6 or 1/6 within float32 rounding)."""
    consts = graph.constants
    users = _consumers(graph)
    outputs = set(graph.outputs)
    only_reader = partial(_sole_reader, users, outputs)
    other = _other_operand
    scalar = partial(_scalar_is, consts)

    def scalar_attr(node: Node, name: str, default: float, value: float) -> bool:
        return _close(node.attrs.get(name, default), value)

    fused = 0
    for node in list(graph.nodes):
        if node not in graph.nodes or len(node.outputs) != 1:
            continue
        chain: List[Node] = [node]
        if node.op == "Add" and len(node.inputs) == 2:
            x = next((a for a, b in (node.inputs, node.inputs[::-1]) if scalar(b, 3.0)), None)
            clip = only_reader(node.outputs[0])
            if x is None or clip is None or clip.op != "Clip" or clip.inputs[0] != node.outputs[0] \
                    or _fusable_activation_attrs(clip, consts) != _RELU6:
                continue
            chain.append(clip)
        elif node.op == "HardSigmoid" and len(node.inputs) == 1 and scalar_attr(node, "alpha", 0.2, 1 / 6) \
                and scalar_attr(node, "beta", 0.5, 0.5):
            x = node.inputs[0]
        else:
            continue
        gate = chain[-1].outputs[0]
        mul = only_reader(gate)
        if mul is None or mul.op != "Mul" or other(mul, gate) != x:
            continue
        chain.append(mul)
        if node.op == "Add":  # then / 6
            last = only_reader(mul.outputs[0])
            if last is None or last.inputs[0] != mul.outputs[0] or not (
                    last.op == "Div" and len(last.inputs) == 2 and scalar(last.inputs[1], 6.0)
                    or last.op == "Mul" and scalar(other(last, mul.outputs[0]), 1 / 6)):
                continue
            chain.append(last)
        end = chain[-1]
        graph.nodes[graph.nodes.index(end)] = Node("HardSwish", end.name, [x], list(end.outputs),
                                                   {k: v for k, v in end.attrs.items() if k == "_opset"})
        for part in chain[:-1]:
            graph.nodes.remove(part)
        fused += 1
    return fused


_RELU6 = {"_activation": "Clip", "_activation_min": 0.0, "_activation_max": 6.0}


_SQRT2 = float(np.sqrt(2.0))


# -- 2c. decomposed GELU -----------------------------------------------------------------------


def fuse_gelu(graph: Graph) -> int:
    """Rewrite the exact GELU exported as its arithmetic into one ``Gelu`` node; returns how many.

    PyTorch's export of ``nn.GELU()`` below opset 20: ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)),
    0.5)`` (the division may be ``Mul(x, 1/sqrt 2)``, the two last products in either order:
    ``Mul(Mul(x, 0.5), Add(...))``).  The vendor's compiler makes it one exGelu, computed in
    float32 and rounded once (a float16 ``MatMul -> GELU`` probe: 98 % of the values equal to
    its simulator that way, 52 % rounding after each op).  Conditions: each intermediate is read
    only by the next node and is no graph output; the constants are scalars within float32
    rounding of sqrt 2 (or its inverse), 1 and 0.5."""
    outputs = set(graph.outputs)
    other = _other_operand
    scalar = partial(_scalar_is, graph.constants)
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    users = _consumers(graph)
    fused = 0
    for erf in list(graph.nodes):
        if erf not in graph.nodes or erf.op != "Erf" or len(erf.inputs) != 1:
            continue
        only = partial(_sole_reader, users, outputs)
        scale = producer.get(erf.inputs[0])
        if scale is None or len(users.get(erf.inputs[0], [])) != 1 or erf.inputs[0] in outputs:
            continue
        if scale.op == "Div" and len(scale.inputs) == 2 and scalar(scale.inputs[1], _SQRT2):
            x = scale.inputs[0]
        elif scale.op == "Mul" and len(scale.inputs) == 2 and scalar(scale.inputs[1], 1 / _SQRT2):
            x = scale.inputs[0]
        elif scale.op == "Mul" and len(scale.inputs) == 2 and scalar(scale.inputs[0], 1 / _SQRT2):
            x = scale.inputs[1]
        else:
            continue
        add = only(erf.outputs[0], "Add")
        if add is None or not scalar(other(add, erf.outputs[0]), 1.0):
            continue
        first = only(add.outputs[0], "Mul")
        if first is None:
            continue
        partner = other(first, add.outputs[0])
        if partner == x:  # x * (1 + erf), then * 0.5
            last = only(first.outputs[0], "Mul")
            if last is None or not scalar(other(last, first.outputs[0]), 0.5):
                continue
            chain = [scale, erf, add, first, last]
        else:  # (x * 0.5) * (1 + erf)
            half = producer.get(partner)
            if half is None or half.op != "Mul" or not scalar(other(half, x), 0.5) \
                    or len(users.get(partner, [])) != 1 or partner in outputs:
                continue
            chain = [scale, erf, add, half, first]
        if len(users.get(x, [])) < 2:  # x feeds the scaling and a product: a different graph otherwise
            continue
        end = chain[-1]
        position = min(graph.nodes.index(n) for n in chain)
        for part in chain:
            graph.nodes.remove(part)
        gelu = Node("Gelu", end.name, [x], list(end.outputs), {k: v for k, v in end.attrs.items() if k == "_opset"})
        graph.nodes.insert(position, gelu)
        producer.update((o, gelu) for o in gelu.outputs)
        users = _consumers(graph)
        fused += 1
    return fused


# -- 2d. decomposed LayerNorm ------------------------------------------------------------------


def fuse_layer_norm(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Rewrite a LayerNorm exported as its arithmetic into one ``LayerNormalization`` node (last
    axis); returns how many.

    The opset < 17 export of ``nn.LayerNorm`` (PyTorch, and the form RKNN-Toolkit2 documents):
    ``m = ReduceMean(x)``, ``d = Sub(x, m)``, ``Pow(d, 2)`` (or ``Mul(d, d)``), ``ReduceMean``,
    ``Add(., eps)``, ``Sqrt``, ``n = Div(d, .)``, then optionally ``Mul(n, scale)`` and
    ``Add(., bias)``, every mean over the last axis only.  The vendor's compiler makes it one
    exNorm, which its simulator computes in float32 and rounds once (in float16 builds a
    decomposed one rounds after every op: a probe 41 % bit-equal to the simulator's output).
    Conditions: each intermediate is read only by the next node (``d`` by the square and the
    Div) and is no graph output; ``eps``, ``2`` are scalar constants, scale and bias constants
    of the last axis' length (or broadcastable to it); a LayerNorm without a scale needs the
    last axis' length from ``shapes``."""
    consts = graph.constants
    users = _consumers(graph)
    outputs = set(graph.outputs)
    shapes = shapes or {}
    only = partial(_sole_reader, users, outputs)

    def scalar(name: str) -> Optional[float]:
        k = consts.get(name)
        return float(k.reshape(())) if k is not None and k.dtype.kind == "f" and k.size == 1 else None

    def last_axis_mean(node: Node) -> bool:
        axes = node.attrs.get("axes")
        if len(node.inputs) > 1 and node.inputs[1]:
            axes = consts.get(node.inputs[1])
        if axes is None or np.size(axes) != 1 or not node.attrs.get("keepdims", 1):
            return False
        axis = int(np.ravel(axes)[0])
        rank = len(shapes.get(node.inputs[0], ()))
        return axis == -1 or (rank > 0 and axis == rank - 1)

    def vector(name: str, length: Optional[int]) -> Optional[np.ndarray]:
        k = consts.get(name)
        if k is None or k.dtype.kind != "f" or k.ndim > 1 or (length is not None and k.size not in (1, length)):
            return None
        return k

    fused = 0
    for mean in list(graph.nodes):
        if mean not in graph.nodes or mean.op != "ReduceMean" or not last_axis_mean(mean):
            continue
        x = mean.inputs[0]
        sub = only(mean.outputs[0], "Sub")
        if sub is None or sub.inputs != [x, mean.outputs[0]]:
            continue
        d = sub.outputs[0]
        readers = list({id(n): n for n in users.get(d, [])}.values())  # Mul(d, d) reads it twice
        if d in outputs or len(readers) != 2:
            continue
        square = next((n for n in readers if n.op == "Pow" and n.inputs[0] == d and scalar(n.inputs[1]) == 2.0
                       or n.op == "Mul" and n.inputs == [d, d]), None)
        div = next((n for n in readers if n.op == "Div" and n.inputs[0] == d), None)
        if square is None or div is None:
            continue
        var = only(square.outputs[0], "ReduceMean")
        if var is None or not last_axis_mean(var):
            continue
        add_eps = only(var.outputs[0], "Add")
        eps = scalar(add_eps.inputs[1]) if add_eps is not None and add_eps.inputs[0] == var.outputs[0] else None
        sqrt = only(add_eps.outputs[0], "Sqrt") if eps is not None else None
        if sqrt is None or div.inputs[1] != sqrt.outputs[0] or only(sqrt.outputs[0]) is not div:
            continue
        chain = [mean, sub, square, var, add_eps, sqrt, div]
        end, scale, bias = div, None, None
        length = (shapes.get(x) or [None])[-1]
        length = int(length) if isinstance(length, (int, np.integer)) and length > 0 else None
        for op in ("Mul", "Add"):  # the scale, then the bias (only after a scale)
            step = only(end.outputs[0], op)
            k = step and vector(step.inputs[1] if step.inputs[0] == end.outputs[0] else step.inputs[0], length)
            if k is None or (op == "Add" and scale is None):
                break
            chain.append(step)
            end = step
            scale, bias = (k, bias) if op == "Mul" else (scale, k)
        if scale is None:
            if length is None:
                continue
            scale = np.ones(length, np.float32)
        if length is None and scale.size == 1 and (bias is None or bias.size == 1):
            continue  # a scalar scale and bias need the axis length to become vectors
        length = length or max(scale.size, 1 if bias is None else bias.size)
        scale_name = _unique(consts, f"{end.name or end.outputs[0]}_ln_scale")
        consts[scale_name] = np.broadcast_to(scale.astype(np.float32), (length,)).copy()
        inputs = [x, scale_name]
        if bias is not None:
            bias_name = _unique(consts, f"{end.name or end.outputs[0]}_ln_bias")
            consts[bias_name] = np.broadcast_to(bias.astype(np.float32), (length,)).copy()
            inputs.append(bias_name)
        attrs = {"axis": -1, "epsilon": float(eps), **{k: v for k, v in end.attrs.items() if k == "_opset"}}
        graph.nodes[graph.nodes.index(end)] = Node("LayerNormalization", end.name, inputs, list(end.outputs), attrs)
        for part in chain[:-1]:
            graph.nodes.remove(part)
        fused += 1
    return fused


# -- 3. BatchNormalization into Conv ---------------------------------------------------------


def fold_batchnorm(graph: Graph) -> int:
    """Merge ``Conv -> BatchNormalization`` pairs into the Conv; returns the number merged.

    Conditions: the Conv output feeds only the BN and is not a graph output; the Conv
    weight (and bias, if any) and the BN's scale, B, mean and var are constants; the BN
    is in inference mode and only its first output is used.  With
    ``s = scale / sqrt(var + epsilon)``: ``W' = W * s`` per output channel and
    ``b' = (b - mean) * s + B``, computed in float64 and stored as float32.
    """
    consts = graph.constants
    users = _consumers(graph)
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    outputs = set(graph.outputs)
    merged = 0
    for bn in list(graph.nodes):
        if bn.op != "BatchNormalization" or not bn.inputs:
            continue
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op != "Conv" or len(conv.outputs) != 1 or "_activation" in conv.attrs \
                or conv.attrs.get("_residual"):
            continue
        y = conv.outputs[0]
        if y in outputs or len(users.get(y, [])) != 1:
            continue
        w = consts.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
        has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
        b = consts.get(conv.inputs[2]) if has_bias else None
        if w is None or w.ndim < 3 or (has_bias and b is None):
            continue
        m = w.shape[0]
        affine = _batchnorm_affine(bn, consts, users, outputs, m)
        if affine is None:
            continue
        s, t = affine
        w64 = np.asarray(w, np.float64) * s.reshape((m,) + (1,) * (w.ndim - 1))
        b64 = np.zeros(m) if b is None else np.asarray(b, np.float64).reshape(-1)
        b64 = b64 * s + t
        w_name = _unique(consts, f"{conv.name}/W_bn")
        consts[w_name] = w64.astype(np.float32)
        b_name = _unique(consts, f"{conv.name}/B_bn")
        consts[b_name] = np.broadcast_to(b64, (m,)).astype(np.float32)
        conv.inputs = [conv.inputs[0], w_name, b_name]
        conv.outputs = [bn.outputs[0]]
        graph.nodes.remove(bn)
        merged += 1
    return merged


def _batchnorm_affine(bn: Node, consts, users, outputs, m: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(s, t)``, float64 vectors of length ``m``, such that the inference
    BatchNormalization ``bn`` over ``m`` channels computes ``v * s + t`` per channel;
    None when it cannot be folded (training mode, per-position statistics
    (``spatial=0``), a non-constant or non-float parameter, a parameter of another
    length, or a mean/var output that something reads)."""
    if bn.op != "BatchNormalization" or len(bn.inputs) < 5:
        return None
    if bn.attrs.get("training_mode", 0) or bn.attrs.get("spatial", 1) == 0:
        return None
    if any(o and (o in outputs or users.get(o)) for o in bn.outputs[1:]):
        return None
    params = [consts.get(n) for n in bn.inputs[1:5]]
    if any(p is None or np.asarray(p).dtype.kind != "f" for p in params):
        return None
    scale, beta, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
    if not all(len(p) in (1, m) for p in (scale, beta, mean, var)):
        return None
    eps = float(bn.attrs.get("epsilon", 1e-5))
    s = np.broadcast_to(scale / np.sqrt(var + eps), (m,))
    t = np.broadcast_to(beta - mean * s, (m,))
    return s, t


# -- 4. per-channel affine chains into Conv / ConvTranspose ----------------------------------

#: Element-wise ops that :func:`fold_conv_affine` folds when the other operand is a
#: per-channel float constant.
_AFFINE_BINARY = ("Mul", "Add", "Sub", "Div")


def fold_conv_affine(graph: Graph) -> int:
    """Merge per-output-channel affine ops after a ``Conv`` / ``ConvTranspose`` into its
    weights and bias; returns the number of nodes removed.

    From the conv's output, a chain of single-reader nodes is followed, each of which maps
    its input ``v`` to ``v * a + c`` per output channel:

    * ``Mul`` (either operand order), ``Add`` (either order), ``Sub`` (``v - k`` or
      ``k - v``) and ``Div`` (``v / k``, ``k`` without zeros) where ``k`` is a float
      constant, finite, that broadcasts per output channel without changing the output
      shape: a scalar or a shape like ``(M, 1, 1)`` / ``(1, M, 1, 1)`` / ``(1, 1, 1)``
      (right-aligned on the output, 1 everywhere except the channel axis, which is 1 or
      ``M``); legacy ``broadcast`` / ``axis`` attributes (opset < 7) are not folded;
    * an inference ``BatchNormalization`` (as :func:`fold_batchnorm`).

    Every tensor inside the chain must have that one reader and not be a graph output;
    the conv itself must have constant float weights (and bias, if any), no fused
    activation yet, and its output must not be a graph output.  The composed ``v * s + t``
    gives ``W' = W * s`` per output channel (``ConvTranspose``: along its second weight
    axis, per group) and ``b' = b * s + t`` (a bias is created when the conv has none),
    computed in float64 and stored as float32 constants; the weights are left as they
    are when ``s`` is all ones.  A chain whose result is not finite in float32 is not
    folded.  The conv takes over the chain's last output name.
    """
    consts = graph.constants
    users = _consumers(graph)
    outputs = set(graph.outputs)
    removed = 0
    for conv in list(graph.nodes):
        info = _conv_params(conv, consts)
        if info is None:
            continue
        w, b, m = info
        y = conv.outputs[0]
        s = np.ones(m)
        t = np.zeros(m)
        chain: List[Node] = []
        while y not in outputs:
            readers = users.get(y, [])
            if len(readers) != 1:
                break
            step = _affine_step(readers[0], y, consts, users, outputs, m, w.ndim)
            if step is None:
                break
            a, c = step
            s, t = s * a, t * a + c
            chain.append(readers[0])
            y = readers[0].outputs[0]
        if not chain:
            continue
        new_w = None
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked just below
            if not np.all(s == 1.0):
                new_w = _scale_output_channels(conv, w, s).astype(np.float32)
            b64 = (np.zeros(m) if b is None else np.asarray(b, np.float64).reshape(-1)) * s + t
            new_b = b64.astype(np.float32)
        if not np.all(np.isfinite(new_b)) or (new_w is not None and not np.all(np.isfinite(new_w))):
            continue
        inputs = list(conv.inputs[:3]) + [""] * (3 - len(conv.inputs[:3]))
        if new_w is not None:
            inputs[1] = _unique(consts, f"{conv.name}/W_affine")
            consts[inputs[1]] = new_w
        inputs[2] = _unique(consts, f"{conv.name}/B_affine")
        consts[inputs[2]] = new_b
        conv.inputs = inputs
        conv.outputs = [y]
        for node in chain:
            graph.nodes.remove(node)
        removed += len(chain)
    return removed


def _conv_params(conv: Node, consts) -> Optional[Tuple[np.ndarray, Optional[np.ndarray], int]]:
    """``(W, b or None, output channels)`` of a Conv / ConvTranspose whose parameters are
    constant floats of consistent shapes, or None."""
    if conv.op not in ("Conv", "ConvTranspose") or len(conv.outputs) != 1 or "_activation" in conv.attrs \
            or conv.attrs.get("_residual"):
        return None
    if len(conv.inputs) < 2 or not conv.inputs[1] or len(conv.inputs) > 3:
        return None
    w = consts.get(conv.inputs[1])
    if w is None or w.dtype.kind != "f" or w.ndim < 3 or w.size == 0:
        return None
    if conv.op == "Conv":
        m = w.shape[0]
    else:
        group = conv.attrs.get("group", 1)
        if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or group < 1 \
                or w.shape[0] % group:
            return None
        m = w.shape[1] * int(group)
    b = None
    if len(conv.inputs) > 2 and conv.inputs[2]:
        b = consts.get(conv.inputs[2])
        if b is None or b.dtype.kind != "f" or b.size != m:
            return None
    return w, b, m


def _scale_output_channels(conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``W`` (float64) with output channel ``j`` multiplied by ``s[j]``."""
    w64 = np.asarray(w, np.float64)
    tail = (1,) * (w.ndim - 2)
    if conv.op == "Conv":  # (M, C/group, k...)
        return w64 * s.reshape((-1, 1) + tail)
    # ConvTranspose (C, M/group, k...): output channel g * M/group + j is w[g-th C block, j]
    group = int(conv.attrs.get("group", 1))
    mg = w.shape[1]
    grouped = w64.reshape((group, w.shape[0] // group) + w.shape[1:])
    return (grouped * s.reshape((group, 1, mg) + tail)).reshape(w.shape)


def _affine_step(node: Node, v: str, consts, users, outputs, m: int, rank: int
                 ) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(a, c)`` (float64, length ``m``) when ``node`` maps its input ``v`` (a conv output
    of rank ``rank`` with ``m`` channels) to ``v * a + c`` per channel, else None."""
    if node.op == "BatchNormalization":
        return _batchnorm_affine(node, consts, users, outputs, m) if node.inputs[0] == v else None
    if node.op not in _AFFINE_BINARY or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    if "broadcast" in node.attrs or "axis" in node.attrs:
        return None  # opset < 7 broadcasting
    first = node.inputs[0] == v
    other = node.inputs[1] if first else node.inputs[0]
    k = _per_channel(consts.get(other), m, rank)
    if k is None:
        return None
    ones, zeros = np.ones(m), np.zeros(m)
    if node.op == "Mul":
        return k, zeros
    if node.op == "Add":
        return ones, k
    if node.op == "Sub":
        return (ones, -k) if first else (-ones, k)
    if not first or np.any(k == 0):  # Div: k / v is not affine; v / 0 is not a finite scale
        return None
    return 1.0 / k, zeros


def _per_channel(k: Optional[np.ndarray], m: int, rank: int) -> Optional[np.ndarray]:
    """The float constant ``k`` as ``m`` float64 per-channel values, when broadcasting it
    against an ``(N, m, spatial...)`` tensor of rank ``rank`` varies only along the
    channel axis and leaves the shape unchanged; else None (also for non-finite values)."""
    if k is None:
        return None
    k = np.asarray(k)
    if k.dtype.kind != "f" or k.ndim > rank:
        return None
    shape = (1,) * (rank - k.ndim) + k.shape
    if shape[0] != 1 or shape[1] not in (1, m) or any(d != 1 for d in shape[2:]):
        return None
    values = np.asarray(k, np.float64).reshape(-1)
    if not np.all(np.isfinite(values)):
        return None
    return np.broadcast_to(values, (m,)).copy()


# -- 5. bias Add into Gemm -------------------------------------------------------------------


def fold_dense_bias(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Merge a constant bias ``Add`` into the ``Gemm`` / ``MatMul`` before it; returns the
    number of Adds removed.

    * ``Gemm`` without C (``Y = alpha * A' @ B'``) followed by ``Add(Y, k)`` (either
      order) or ``Sub(Y, k)``: the Gemm gets ``C = k`` (``-k`` for Sub) and ``beta = 1``.
    * ``MatMul(A, B)`` with ``B`` a constant 2-D float matrix and ``A`` known (from
      ``shapes``) to be 2-D, followed by the same: becomes ``Gemm(A, B, k)``.
    * The same ``MatMul`` on an ``A`` of a static shape ``(..., M', K)`` of rank 3 or more
      (PyTorch's ``Linear`` on tokens), with ``k`` along the last axis only, in a model that is
      not pre-quantized: becomes
      ``Reshape(A, (M, K))``, ``Gemm``, ``Reshape`` back to ``(..., M', N)``.  RKNN-Toolkit2
      compiles it to one 1x1 conv, whose int8 form sums in int32 with the bias and rounds
      once: two nodes put the product on an int8 grid of its own before the bias (a 1x16x32
      ``Linear`` + Relu: 75 % of the values equal to the vendor simulator's; 99 % as a Gemm).

    Each computes exactly what the two nodes did (the same float32 product, then one
    float32 addition of the same values).  Conditions: the product's output has that one
    reader and is not a graph output; ``k`` is a float constant that broadcasts onto the
    ``(M, N)`` product without changing its shape (rank <= 2; each dim 1 or equal to the
    product's, which must then be known: ``N`` from the constant B or ``shapes``, ``M``
    from ``shapes``).  Integer products are never folded (``k`` must be float).
    """
    consts = graph.constants
    shapes = dict(shapes or {})
    users = _consumers(graph)
    outputs = set(graph.outputs)
    folded = 0
    for dense in list(graph.nodes):
        if dense.op not in ("Gemm", "MatMul") or len(dense.outputs) != 1:
            continue
        y = dense.outputs[0]
        readers = users.get(y, [])
        if y in outputs or len(readers) != 1:
            continue
        add = readers[0]
        if add.op not in ("Add", "Sub") or len(add.inputs) != 2 or len(add.outputs) != 1 \
                or "broadcast" in add.attrs or "axis" in add.attrs:
            continue
        if add.op == "Sub" and add.inputs[0] != y:
            continue
        k_name = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        k = consts.get(k_name)
        if k is None or k.dtype.kind != "f":
            continue
        dims = _dense_dims(dense, consts, shapes)
        # (not in a pre-quantized import: the rows would need grids the model does not give)
        rows = _token_rows(dense, consts, shapes) if dims is None and not graph.quant else None
        if rows is not None and k.size in (1, rows[-1]) and k.ndim <= len(rows) and k.shape[-1:] in ((1,), (k.size,)):
            dims = (int(np.prod(rows[:-1], dtype=np.int64)), rows[-1])
            if k.ndim > 1:
                k = k.reshape(-1)
                k_name = _unique(consts, f"{dense.name}/C")
                consts[k_name] = np.asarray(k, np.float32)
        if dims is None or k.ndim > 2:
            continue
        kshape = (1,) * (2 - k.ndim) + k.shape
        if any(d != 1 and d != known for d, known in zip(kshape, dims)):
            continue  # (a dim of -1 / None never equals a size > 1)
        if add.op == "Sub" or k.dtype != np.float32:
            value = np.negative(k) if add.op == "Sub" else k
            k_name = _unique(consts, f"{dense.name}/C")
            consts[k_name] = np.asarray(value, np.float32)
        if dense.op == "Gemm":
            dense.inputs = [dense.inputs[0], dense.inputs[1], k_name]
            dense.attrs["beta"] = 1.0
        else:
            dense.op = "Gemm"
            dense.inputs = [dense.inputs[0], dense.inputs[1], k_name]
            dense.attrs = {a: v for a, v in dense.attrs.items() if a.startswith("_")}  # _opset, _num_outputs
        dense.outputs = [add.outputs[0]]
        graph.nodes.remove(add)
        if rows is not None:
            _gemm_on_rows(graph, dense, rows, shapes)
        folded += 1
    return folded


def _token_rows(node: Node, consts, shapes) -> Optional[Tuple[int, ...]]:
    """The output shape ``(..., M', N)`` of a ``MatMul`` of an input of static rank >= 3 by a
    constant 2-D float matrix, else None."""
    b = consts.get(node.inputs[1]) if node.op == "MatMul" and len(node.inputs) == 2 else None
    a_shape = shapes.get(node.inputs[0])
    if b is None or b.dtype.kind != "f" or b.ndim != 2 or a_shape is None or len(a_shape) < 3:
        return None
    if any(d is None or int(d) < 0 for d in a_shape) or int(a_shape[-1]) != b.shape[0]:
        return None
    return tuple(int(d) for d in a_shape[:-1]) + (int(b.shape[1]),)


def _gemm_on_rows(graph: Graph, gemm: Node, rows: Tuple[int, ...], shapes: Dict) -> None:
    """Put ``gemm`` (made of a MatMul of rank ``len(rows)``) between two Reshapes: its input to
    ``(M, K)`` rows, its output back to ``rows``, after the activation that alone reads it (so
    that the activation's quantization rules and fusion see the Gemm as its producer)."""
    taken = set(graph.constants) | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    a, y = gemm.inputs[0], gemm.outputs[0]
    m, k = int(np.prod(rows[:-1], dtype=np.int64)), int(graph.constants[gemm.inputs[1]].shape[0])
    opset = {a: v for a, v in gemm.attrs.items() if a == "_opset"}
    # the rows of ``a`` another dense layer already made (q, k and v of one input)
    made = next((n for n in graph.nodes if n.op == "Reshape" and n.inputs[0] == a and shapes.get(n.outputs[0]) == (m, k)
                 and n.name.endswith("__rows")), None)
    flat = made.outputs[0] if made is not None else unique_name(f"{a}__rows", taken)
    to_rows = [] if made is not None else [Node("Reshape", f"{gemm.name}__rows", [a, unique_name(f"{gemm.name}/rows", taken)],
                                                [flat], dict(opset))]
    for node in to_rows:
        graph.constants[node.inputs[1]] = np.array([m, k], np.int64)
    product, back = unique_name(f"{y}__rows", taken), unique_name(f"{gemm.name}/shape", taken)
    graph.constants[back] = np.array(rows, np.int64)
    gemm.inputs[0], gemm.outputs = flat, [product]
    shapes[flat], shapes[product] = (m, k), (m, rows[-1])
    tail, moved = product, []
    users = _consumers(graph)
    while y not in graph.outputs and len(users.get(y, [])) == 1:
        act = users[y][0]
        if act.op not in ROW_ACTIVATIONS or act.inputs[:1] != [y] or len(act.outputs) != 1 \
                or any(n not in graph.constants for n in act.inputs[1:] if n):
            break
        graph.nodes.remove(act)
        act.inputs[0], y = tail, act.outputs[0]
        tail = act.outputs[0] = unique_name(f"{y}__rows", taken)
        shapes[tail] = (m, rows[-1])
        moved.append(act)
    at = graph.nodes.index(gemm)
    graph.nodes[at:at + 1] = [*to_rows, gemm, *moved, Node("Reshape", f"{gemm.name}__unrows", [tail, back], [y], dict(opset))]


def _dense_dims(node: Node, consts, shapes) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """``(M, N)`` of a foldable Gemm (no C) / MatMul (constant 2-D float B, 2-D A), each
    None when unknown; None when the node cannot take a bias."""
    out_shape = shapes.get(node.outputs[0])
    known = [None, None]
    if out_shape is not None and len(out_shape) == 2:
        known = [int(d) if d is not None and int(d) >= 0 else None for d in out_shape]
    b = consts.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if node.op == "Gemm":
        if len(node.inputs) > 2 and node.inputs[2]:
            return None
        if b is not None:
            if b.dtype.kind != "f" or b.ndim != 2:
                return None
            known[1] = b.shape[0] if node.attrs.get("transB", 0) else b.shape[1]
        return known[0], known[1]
    if len(node.inputs) != 2 or b is None or b.dtype.kind != "f" or b.ndim != 2:
        return None
    a_shape = shapes.get(node.inputs[0])
    if a_shape is None or len(a_shape) != 2:
        return None
    m = a_shape[0]
    return (int(m) if m is not None and int(m) >= 0 else known[0]), b.shape[1]


def _unique(taken, name: str) -> str:
    if name not in taken:
        return name
    k = 1
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"


# -- 5b. GlobalAveragePool as depthwise convs ------------------------------------------------

#: The largest kernel side of one stage of a split GlobalAveragePool.
POOL_STAGE_MAX = 7


def global_pool_stages(height: int, width: int) -> List[Tuple[List[int], List[int], List[int]]]:
    """The depthwise conv stages RKNN-Toolkit2 2.5.0 compiles a ``GlobalAveragePool`` over
    ``height x width`` into, as ``(kernel_shape, strides, pads)`` (ONNX order, pads
    ``[top, left, bottom, right]``): per stage and per side, a side above 7 takes a 7-wide
    kernel with stride 7 over the side zero-padded to a multiple of 7 (half the padding,
    rounded down, before), a side of 7 or less one kernel over all of it; until 1 x 1 is left.
    Observed in its files for 8 x 8 ... 50 x 50, 7 x 20, 20 x 7, 12 x 96 and 16 x 16 (e.g.
    12 x 96: 7 x 7 / 7 with one pixel of padding, then 2 x 7 / (1, 7), then 1 x 2)."""
    stages = []
    sides = [height, width]
    while sides != [1, 1]:
        kernel, strides, before, after = [], [], [], []
        for k, side in enumerate(sides):
            if side > POOL_STAGE_MAX:
                out = -(-side // POOL_STAGE_MAX)
                pad = out * POOL_STAGE_MAX - side
                kernel.append(POOL_STAGE_MAX), strides.append(POOL_STAGE_MAX)
                before.append(pad // 2), after.append(pad - pad // 2)
                sides[k] = out
            else:
                kernel.append(side), strides.append(1), before.append(0), after.append(0)
                sides[k] = 1
        stages.append((kernel, strides, before + after))
    return stages


def spatial_means_as_pools(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Rewrite each ``ReduceMean`` over axes 2 and 3 of a static 4-D input ``x`` (TensorFlow's and
    Keras' global pooling) into ``GlobalAveragePool`` named ``<x>_gavg``, followed by a
    ``Reshape`` to ``(N, C)`` named ``<x>_gavg_rs`` when ``keepdims`` is 0, as RKNN-Toolkit2
    compiles it (then split as any pool: ``<x>_gavg_2conv<k>``); returns how many."""
    shapes = shapes or {}
    taken = set(graph.constants) | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "ReduceMean" or not node.inputs or len(node.outputs) != 1:
            continue
        x = node.inputs[0]
        shape = shapes.get(x)
        if shape is None or len(shape) != 4 or any(int(d) <= 0 for d in shape):
            continue
        axes = node.attrs.get("axes")
        if len(node.inputs) > 1 and node.inputs[1]:
            axes = graph.constants.get(node.inputs[1])
        if axes is None or sorted(int(a) % 4 for a in np.ravel(axes)) != [2, 3]:
            continue
        opset = {a: v for a, v in node.attrs.items() if a == "_opset"}
        pool = _unique(taken, f"{x}_gavg")
        taken.add(pool)
        if node.attrs.get("keepdims", 1):
            rewrite = [Node("GlobalAveragePool", pool, [x], [node.outputs[0]], dict(opset))]
        else:
            target = _unique(taken, f"{pool}_rs_shape")
            taken.add(target)
            graph.constants[target] = np.array([int(shape[0]), int(shape[1])], np.int64)
            rewrite = [Node("GlobalAveragePool", pool, [x], [pool], dict(opset)),
                       Node("Reshape", f"{pool}_rs", [pool, target], [node.outputs[0]], dict(opset))]
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = rewrite
        rewritten += 1
    return rewritten


def splits_pools(float_dtype: str, quantized: bool) -> bool:
    """Whether a build of ``float_dtype`` (``"float16"`` / ``"float32"``), quantized or not,
    splits wide GlobalAveragePools as the vendor does (:func:`split_global_average_pools`):
    wherever values are rounded between the stages (float16 storage, int8 grids), so that they
    round as the vendor's do.  A float32 build without quantization has no vendor counterpart
    and keeps the pool: the exact mean, and one fast pass where the stages are depthwise convs
    of a few outputs each."""
    return float_dtype != "float32" or quantized


def split_global_average_pools(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Rewrite each ``GlobalAveragePool`` over a static ``N, C, H, W`` input with ``H`` or ``W``
    above 7 into the depthwise convs of :func:`global_pool_stages`, as the vendor's compiler does
    (float16 and int8 builds alike; a build runs it where :func:`splits_pools` says); returns how
    many pools were split.

    Every stage's kernel holds ``(1 / (H * W)) ** (1 / stages)`` (the vendor's weights: one
    value, so an int8 build gives each stage 255 codes of it), the padding is zeros, and the
    stages' outputs are tensors of their own, named ``<pool>_2conv<k>`` as the vendor names
    them: an int8 build calibrates and quantizes each one, where one pool would round once.
    The last stage writes the pool's output.  Each stage records in ``attrs["_pool_stage_taps"]``
    the most real (unpadded) input elements one of its windows covers, from which a
    pre-quantized build gives an intermediate stage its grid (:func:`..quantize.implied_grids`)."""
    shapes = shapes or {}
    taken = set(graph.constants) | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    split = 0
    for node in list(graph.nodes):
        if node.op != "GlobalAveragePool" or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        shape = shapes.get(node.inputs[0])
        if shape is None or len(shape) != 4 or any(int(d) <= 0 for d in shape):
            continue
        channels, height, width = (int(d) for d in shape[1:])
        if max(height, width) <= POOL_STAGE_MAX:
            continue
        stages = global_pool_stages(height, width)
        value = np.float32((1.0 / (height * width)) ** (1.0 / len(stages)))
        base = node.name or node.outputs[0]
        convs, x, sides = [], node.inputs[0], (height, width)
        for k, (kernel, strides, pads) in enumerate(stages):
            weight = _unique(taken, f"{base}_2conv{k}_weight")
            taken.add(weight)
            graph.constants[weight] = np.full((channels, 1) + tuple(kernel), value, np.float32)
            out = node.outputs[0] if k == len(stages) - 1 else _unique(taken, f"{base}_2conv{k}")
            taken.add(out)
            taps, sides = _stage_windows(sides, kernel, strides, pads)
            attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "group": channels,
                     "dilations": [1, 1], "_pool_stage_taps": taps,
                     **{a: v for a, v in node.attrs.items() if a == "_opset"}}
            convs.append(Node("Conv", f"{base}_2conv{k}", [x, weight], [out], attrs))
            x = out
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = convs
        split += 1
    return split


def _stage_windows(sides, kernel, strides, pads) -> Tuple[int, Tuple[int, ...]]:
    """Of a 2-D pooling stage over ``sides``: the most input elements (not padding) one window
    covers, and the output's sides."""
    taps, out = 1, []
    for a, side in enumerate(sides):
        n_out = (side + pads[a] + pads[a + 2] - kernel[a]) // strides[a] + 1
        starts = [o * strides[a] - pads[a] for o in range(n_out)]
        taps *= max(min(t + kernel[a], side) - max(t, 0) for t in starts)
        out.append(n_out)
    return taps, tuple(out)


# -- 6. residual add fusion ------------------------------------------------------------------


def fuse_residual_add(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Fold an ``Add`` (or two-input ``Sum``) of a Conv output and a same-shaped tensor into
    the Conv; returns the number fused.

    ``y = Conv(x, W[, B])`` and ``z = Add(y, r)`` (either operand order) become
    ``z = Conv(x, W, B or "", r)`` with ``attrs["_residual"] = True``: the conv kernel adds
    ``r`` in its output stage, after the bias and before any activation, so a following
    ``Relu`` can still fuse (:func:`fuse_activations` runs next).  The result is bit for
    bit what the two nodes computed (float32).  Only when:

    * the Conv has one output, read by nothing but this Add, not a graph output, and
      neither a fused activation nor a residual yet;
    * ``r`` is not a constant (a per-channel constant is :func:`fold_conv_affine`'s job)
      and ``y`` and ``r`` have the same fully known static shape in ``shapes`` (no
      broadcasting; unknown shapes are skipped);
    * ``y`` and ``r`` are different tensors.

    When both operands qualify, the Conv whose ``r`` is computed before it is chosen (the
    later one); if ``r`` is computed after the Conv, the fused Conv moves to the Add's place
    in the node order.  The Conv takes over the Add's output name.
    """
    shapes = shapes or {}
    users = _consumers(graph)
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    outputs = set(graph.outputs)
    quant = getattr(graph, "quant", None) or {}
    fused = 0
    for add in list(graph.nodes):
        if add.op not in ("Add", "Sum") or len(add.inputs) != 2 or len(add.outputs) != 1 or not add.outputs[0]:
            continue
        if not all(add.inputs) or add.inputs[0] == add.inputs[1]:
            continue
        choices = []
        for k in (0, 1):
            y, r = add.inputs[k], add.inputs[1 - k]
            conv = producers.get(y)
            if conv is None or conv.op != "Conv" or len(conv.outputs) != 1 or len(conv.inputs) > 3:
                continue
            if "_activation" in conv.attrs or conv.attrs.get("_residual"):
                continue
            if y in outputs or len(users.get(y, [])) != 1 or y in quant:
                continue
            if r in graph.constants or not _same_static_shape(shapes.get(y), shapes.get(r)):
                continue
            at = graph.nodes.index(conv)
            src = producers.get(r)
            ready = src is None or graph.nodes.index(src) < at  # r exists where the Conv runs
            choices.append((ready, at, conv, r))
        if not choices:
            continue
        ready, _, conv, r = max(choices, key=lambda c: (c[0], c[1]))
        conv.inputs = list(conv.inputs) + [""] * (3 - len(conv.inputs)) + [r]
        conv.attrs["_residual"] = True
        conv.outputs = [add.outputs[0]]
        if ready:
            graph.nodes.remove(add)
        else:
            graph.nodes.remove(conv)
            graph.nodes[graph.nodes.index(add)] = conv
        producers[add.outputs[0]] = conv
        users[r] = [conv if n is add else n for n in users.get(r, [])]
        fused += 1
    return fused


def fold_input_residual(graph: Graph) -> int:
    """Fold ``Add(x, Conv(x))`` of a conv that keeps the channel count and the spatial size
    into the conv, as RKNN-Toolkit2 2.5.0's compiler does: ``z = Conv(x, W + I, B)``, the
    identity on the tap that reads ``x`` in place (the kernel's centre); returns how many.

    The vendor's files of such a block hold one conv with a weight ``<W>_new`` (float16,
    calibrated int8 and pre-quantized builds alike, rk3566 and rk3588: 1x1, 3x3 pad 1, 5x5 pad 2,
    3x3 dilation 2 pad 2, depthwise 3x3 and 1x1; not with asymmetric pads, which stay a
    ConvAdd), and its simulator computes the folded conv (a float16 3x3 block equals it on every
    value, 91 % unfolded: ``tests/test_float16_rules.py``).  In a pre-quantized model the
    Add's output is one requantization of it, without the conv's own grid; the new weight
    takes the vendor's weight grid
    (:func:`~rknnlite.toolkit.quantize.weight_params`, per output channel) and is folded from
    the weight as the file gives it (:attr:`Graph.unrounded
    <rknnlite.model.graph.Graph.unrounded>`), not as the symmetric grid re-rounded it.  So
    a quantized PyTorch probe equals the vendor's output on every value (79 % when the conv
    was rounded onto its own grid first; ``tools/vendor_corpus/torch_qat_probe.py
    --conv-add``).  In a float build the fold changes only roundings.

    Only for a Conv with a constant float weight ``[C, C, k...]`` (group 1) or ``[C, 1, k...]``
    (depthwise, group C), stride 1, explicit pads equal at both ends with ``(k - 1) * d / 2``
    on each axis (``auto_pad`` VALID: a 1x1 conv), no fused activation or residual yet, whose
    output nothing but this Add reads and which is no graph output; the weight is a new
    constant (the old one may be shared)."""
    from .quantize import weight_params

    users = _consumers(graph)
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    outputs = set(graph.outputs)
    quant = getattr(graph, "quant", None)
    folded = 0
    for add in list(graph.nodes):
        if add.op != "Add" or len(add.inputs) != 2 or len(add.outputs) != 1 or not add.outputs[0]:
            continue
        for k in (0, 1):
            c, x = add.inputs[k], add.inputs[1 - k]
            conv = producers.get(c)
            tap = _identity_tap(conv, graph.constants) if conv is not None and conv.inputs[0] == x else None
            if tap is None:
                continue
            if c in outputs or len(users.get(c, [])) != 1:
                continue
            # a pre-quantized weight as the file gives it, not re-rounded onto the symmetric grid
            w = getattr(graph, "unrounded", {}).get(conv.inputs[1], graph.constants[conv.inputs[1]])
            name = _unique(graph.constants, f"{conv.inputs[1]}_new")
            w_new = w.astype(np.float64)
            channels = np.arange(w.shape[0])
            w_new[(channels, channels if w.shape[1] > 1 else 0) + tap] += 1
            w_new = w_new.astype(np.float32)
            if quant and conv.inputs[1] in quant:  # a pre-quantized model: the vendor's weight grid
                q = weight_params(w_new, 0)
                # the codes in float64, as the vendor's: snapped later in float32 by the runtime,
                # the folded 64-channel conv of the torch_qat_probe net fell from 100 % to 98.5 %
                s = np.asarray(q.scale, np.float64).reshape(-1, 1, 1, 1)
                z = np.asarray(q.zero_point, np.float64).reshape(-1, 1, 1, 1)
                w_new = ((np.clip(np.rint(w_new / s) + z, -128, 127) - z) * s).astype(np.float32)
                quant[name] = q
            if quant:
                quant.pop(c, None)
            graph.constants[name] = w_new
            conv.inputs = [x, name] + list(conv.inputs[2:])
            conv.outputs = [add.outputs[0]]
            graph.nodes.remove(add)
            producers[add.outputs[0]] = conv
            folded += 1
            break
    return folded


def _identity_tap(conv: Node, consts) -> Optional[Tuple[int, ...]]:
    """The kernel index of the tap reading the output position's own input element, when
    ``conv`` keeps channels and spatial size as :func:`fold_input_residual` requires; else None."""
    if conv.op != "Conv" or len(conv.outputs) != 1 or not 2 <= len(conv.inputs) <= 3:
        return None
    if "_activation" in conv.attrs or conv.attrs.get("_residual") or conv.inputs[0] in consts:
        return None
    w = consts.get(conv.inputs[1])
    if w is None or w.dtype.kind != "f" or w.ndim < 3:
        return None
    a = conv.attrs
    nd = w.ndim - 2
    group = int(a.get("group", 1))
    if not ((group == 1 and w.shape[1] == w.shape[0]) or (group == w.shape[0] and w.shape[1] == 1)):
        return None
    auto_pad = a.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID", b"NOTSET", b"VALID"):
        return None
    flat = lambda key, default: [int(v) for v in a.get(key, default)]  # noqa: E731
    strides, dilations = flat("strides", [1] * nd), flat("dilations", [1] * nd)
    pads = [0] * 2 * nd if auto_pad in ("VALID", b"VALID") else flat("pads", [0] * 2 * nd)
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd or any(v != 1 for v in strides):
        return None
    tap = []
    for axis, k in enumerate(w.shape[2:]):
        reach = (k - 1) * dilations[axis]
        if reach % 2 or pads[axis] != reach // 2 or pads[nd + axis] != reach // 2:
            return None
        tap.append((k - 1) // 2)
    return tuple(tap)


def _same_static_shape(a: Optional[Sequence[int]], b: Optional[Sequence[int]]) -> bool:
    """Both shapes known, fully static and equal."""
    if a is None or b is None:
        return False
    a, b = list(a), list(b)
    return a == b and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in a)


# -- 6b. per-channel affine chains (not after a Conv) into ChannelAffine ---------------------

#: Activations :func:`fuse_channel_affine` folds into the ChannelAffine it creates.
_CHANNEL_AFFINE_ACTIVATIONS = ("Relu", "Clip", "LeakyRelu")


def fuse_channel_affine(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None,
                        constant_first: bool = True) -> int:
    """Replace per-channel affine chains that no Conv absorbs by one internal
    ``ChannelAffine`` node (``y = act(x * scale[c] + shift[c])``, one memory pass);
    returns the number of nodes removed.

    A chain starts at a node reading a 4-D tensor ``x`` whose channel count is known,
    from a fully static shape in ``shapes`` or propagated from one through simple
    rank- and channel-preserving ops (see :func:`_ranks_and_channels`; tensors of
    unknown rank are skipped), and follows single readers, each mapping
    its input ``v`` to ``v * a + c`` per channel, exactly as :func:`fold_conv_affine`
    accepts: an inference ``BatchNormalization`` with constant float parameters, or
    ``Mul`` / ``Add`` / ``Sub`` / ``Div`` by a finite float constant that broadcasts per
    channel (scalar, ``(C, 1, 1)``, ``(1, C, 1, 1)``...).  An activation the Conv kernel
    could fuse (``Relu``, ``Clip`` with constant bounds, ``LeakyRelu``; see
    :func:`fuse_activations`) may end it.  Float constants imply a float tensor (ONNX
    types both operands alike), so integer chains are never touched.

    Conditions: every tensor inside the chain has one reader, is not a graph output and
    not quantized; ``x`` is not the output of a Conv / ConvTranspose that
    :func:`fold_conv_affine` could fold the chain into; the chain is a
    ``BatchNormalization`` or at least two nodes (a lone ``Mul`` / ``Add`` gains nothing).
    ``constant_first=False`` also ends a chain before a binary op whose constant is its first
    operand (``Mul(c, x)``, ``Add(c, x)``): RKNN-Toolkit2's compiler makes a ``Mul`` then ``Add``
    one ``BatchNormalization`` only when the data is the first operand of both, and otherwise
    keeps two ops, each rounding its output (int8 grid or float16; probed with 2.5.0, PP-OCRv4
    rec's learnable affine blocks ``Mul(w, x) + b``); builds that round as the vendor's pass it.
    The composed scale and shift are computed in float64 and stored as float32
    constants (a chain whose values are not finite in float32 is left alone).  The new
    node takes the chain's first node's place and its last node's output name.
    """
    shapes = shapes or {}
    consts = graph.constants
    users = _consumers(graph)
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    outputs = set(graph.outputs)
    quant = getattr(graph, "quant", None) or {}
    names = {n.name for n in graph.nodes}
    known = _ranks_and_channels(graph, shapes)
    removed = 0
    for first in list(graph.nodes):
        if first not in graph.nodes or first.op not in ("BatchNormalization",) + _AFFINE_BINARY:
            continue
        if not first.inputs or len(first.outputs) != 1:
            continue
        x = _affine_data_input(first, consts)
        if x is None or x in consts:
            continue
        layout = known.get(x)
        if layout is None or layout[0] != 4:
            continue
        m = layout[1]
        src = producers.get(x)
        if src is not None and _conv_params(src, consts) is not None and x not in outputs \
                and len(users.get(x, [])) == 1:
            continue  # fold_conv_affine's job
        s, t = np.ones(m), np.zeros(m)
        chain: List[Node] = []
        v = x
        node = first
        while True:
            if not constant_first and node.op != "BatchNormalization" and node.inputs[0] != v:
                break
            step = _affine_step(node, v, consts, users, outputs, m, 4)
            if step is None:
                break
            a, c = step
            s, t = s * a, t * a + c
            chain.append(node)
            v = node.outputs[0]
            readers = users.get(v, [])
            if v in outputs or v in quant or len(readers) != 1:
                break
            node = readers[0]
        if not chain:
            continue
        extra: Dict[str, object] = {}
        if v not in outputs and v not in quant and len(users.get(v, [])) == 1:
            act = users[v][0]
            if act.op in _CHANNEL_AFFINE_ACTIVATIONS and len(act.outputs) == 1 and act.inputs \
                    and act.inputs[0] == v:
                fused = _fusable_activation_attrs(act, consts)
                if fused is not None:
                    extra = fused
                    chain.append(act)
        if len(chain) < 2 and chain[0].op != "BatchNormalization":
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            scale, shift = s.astype(np.float32), t.astype(np.float32)
        if not (np.all(np.isfinite(scale)) and np.all(np.isfinite(shift))):
            continue
        name = _unique(names, f"{first.name}/channel_affine")
        names.add(name)
        s_name = _unique(consts, f"{name}/scale")
        consts[s_name] = scale
        t_name = _unique(consts, f"{name}/shift")
        consts[t_name] = shift
        attrs: Dict[str, object] = dict(extra)
        if "_opset" in first.attrs:
            attrs["_opset"] = first.attrs["_opset"]
        attrs["_num_outputs"] = 1
        fused_node = Node("ChannelAffine", name, [x, s_name, t_name], [chain[-1].outputs[0]], attrs)
        graph.nodes[graph.nodes.index(first)] = fused_node
        for n in chain[1:]:
            graph.nodes.remove(n)
        producers[fused_node.outputs[0]] = fused_node
        users[x] = [fused_node if n is first else n for n in users.get(x, [])]
        removed += len(chain) - 1
    return removed


def fold_affine_into_conv(graph: Graph) -> int:
    """Fold each ``ChannelAffine`` (no activation) whose one reader is an unpadded ``Conv``
    into that conv's weights and bias, as RKNN-Toolkit2's compiler folds a ``BatchNormalization``
    (its form of ``Mul(x, c) + d``) before a conv; returns the number of nodes removed.

    ``conv(x * s + t)`` is ``conv'(x)`` with ``W'[o, i] = W[o, i] * s[i]`` and ``b'[o] = b[o] +
    sum W[o, i] * t[i]`` (``i`` over the input channels of ``o``'s group), computed in float64
    and stored as float32.  Only without padding: a padded border would see the shift ``t`` the
    conv's zeros do not have.  The affine's output must be no graph output and read by that conv
    alone, as its data input; the conv must take :func:`fold_conv_affine`'s form (constant float
    weight and bias, nothing fused yet).  With it, an int8 build of ``HardSwish -> Mul -> Add ->
    1x1 Conv`` equals the simulator's on every code (84 % without) and a float16 one on all values
    but one, a unit away (48 % without)."""
    consts = graph.constants
    users = _consumers(graph)
    outputs = set(graph.outputs)
    removed = 0
    for node in list(graph.nodes):
        if node.op != "ChannelAffine" or node.attrs.get("_activation") or len(node.inputs) != 3 \
                or len(node.outputs) != 1 or node.outputs[0] in outputs:
            continue
        readers = users.get(node.outputs[0], [])
        conv = readers[0] if len(readers) == 1 else None
        if conv is None or conv.op != "Conv" or conv.inputs[0] != node.outputs[0] \
                or node.outputs[0] in conv.inputs[1:]:
            continue
        info = _conv_params(conv, consts)
        if info is None or any(int(p) for p in conv.attrs.get("pads", ())) \
                or conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            continue
        w, b, m = info
        group = conv.attrs.get("group", 1)
        scale, shift = consts.get(node.inputs[1]), consts.get(node.inputs[2])
        if scale is None or shift is None or isinstance(group, bool) or not isinstance(group, (int, np.integer)) \
                or group < 1 or m % group or scale.size != w.shape[1] * group or shift.size != scale.size:
            continue
        rows = np.arange(m) // (m // int(group))  # each output channel's group
        cells = (1,) * (w.ndim - 2)
        s = np.asarray(scale, np.float64).reshape(int(group), -1)[rows].reshape((m, -1) + cells)
        t = np.asarray(shift, np.float64).reshape(int(group), -1)[rows].reshape((m, -1) + cells)
        w64 = np.asarray(w, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            new_w = (w64 * s).astype(np.float32)
            new_b = ((np.zeros(m) if b is None else np.asarray(b, np.float64).reshape(-1))
                     + (w64 * t).sum(axis=tuple(range(1, w.ndim)))).astype(np.float32)
        if not (np.all(np.isfinite(new_w)) and np.all(np.isfinite(new_b))):
            continue
        w_name = _unique(consts, f"{conv.name}/W_input_affine")
        consts[w_name] = new_w
        b_name = _unique(consts, f"{conv.name}/B_input_affine")
        consts[b_name] = new_b
        conv.inputs = [node.inputs[0], w_name, b_name]
        graph.nodes.remove(node)
        users[node.inputs[0]] = [conv if n is node else n for n in users.get(node.inputs[0], [])]
        removed += 1
    return removed


#: Ops whose first output has their first input's rank and channel count.
_SAME_LAYOUT = frozenset(
    "Relu LeakyRelu Clip Sigmoid Tanh HardSigmoid HardSwish Elu Selu Softplus Neg Abs Identity Dropout "
    "MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool LRN InstanceNormalization "
    "BatchNormalization ChannelAffine".split())


def _ranks_and_channels(graph: Graph, shapes: Mapping[str, Sequence[int]]) -> Dict[str, Tuple[int, int]]:
    """``(rank, channels)`` (axis-1 size) of tensors, from the static shapes in ``shapes``
    and, where those are missing (shape inference gives up behind a shape it cannot
    compute), propagated in node order through ops that keep the rank and set the
    channel count simply: ``Conv`` (channels = weight rows), pooling, activations,
    normalisations, ``Concat`` and ``Mul`` / ``Add`` / ``Sub`` / ``Div`` by a per-channel
    constant of no higher rank.  Only ranks >= 2 with a known channel count are kept."""
    consts = graph.constants
    known: Dict[str, Tuple[int, int]] = {}
    for name, shape in shapes.items():
        if shape is not None and len(shape) >= 2 and _same_static_shape(shape, shape):
            known[name] = (len(shape), int(shape[1]))
    for node in graph.nodes:
        if not node.outputs or not node.outputs[0] or node.outputs[0] in known or not node.inputs:
            continue
        got = None
        first = known.get(node.inputs[0])
        if node.op in _SAME_LAYOUT:
            got = first
        elif node.op == "Conv" and first is not None and len(node.inputs) > 1:
            w = consts.get(node.inputs[1])
            if w is not None and w.ndim == first[0]:
                got = (first[0], int(w.shape[0]))
        elif node.op == "Concat" and node.inputs and all(known.get(i) for i in node.inputs):
            parts = [known[i] for i in node.inputs]
            rank = parts[0][0]
            axis = node.attrs.get("axis", 1)
            if all(p[0] == rank for p in parts) and isinstance(axis, int) and -rank <= axis < rank:
                if axis % rank == 1:
                    got = (rank, sum(p[1] for p in parts))
                elif all(p[1] == parts[0][1] for p in parts):
                    got = parts[0]
        elif node.op in _AFFINE_BINARY and len(node.inputs) == 2:
            v = _affine_data_input(node, consts)
            if v is not None and known.get(v):
                rank, m = known[v]
                k = consts[node.inputs[1] if node.inputs[0] == v else node.inputs[0]]
                if _per_channel(k, m, rank) is not None:
                    got = known[v]
        if got is not None:
            known[node.outputs[0]] = got
    return known


def _affine_data_input(node: Node, consts) -> Optional[str]:
    """The non-constant operand a BatchNormalization / affine binary op transforms, or None."""
    if node.op == "BatchNormalization":
        return node.inputs[0] or None
    if len(node.inputs) != 2 or not all(node.inputs):
        return None
    a, b = node.inputs
    if a in consts and b not in consts:
        return b
    if b in consts and a not in consts:
        return a
    return None


# -- 7. activation fusion --------------------------------------------------------------------


def conv_fusable_activations() -> Tuple[str, ...]:
    """Activations the registered Conv kernel applies itself via ``attrs["_activation"]``.

    The conv kernel module declares them as ``FUSED_ACTIVATIONS`` (a collection of op
    names); when it declares none, nothing is fused.
    """
    try:
        from ..backends.software.ops import conv as conv_ops
    except ImportError:
        return ()
    return tuple(getattr(conv_ops, "FUSED_ACTIVATIONS", ()))


def fuse_activations(graph: Graph, supported: Optional[Sequence[str]] = None) -> int:
    """Fold an activation into the Conv before it; returns the number fused.

    Only when the Conv output feeds only that activation and is not a graph output,
    and the activation is one the kernel supports (``supported``, default
    :func:`conv_fusable_activations`) whose parameters are known at build time, so the
    one node computes exactly what the two did:

    * ``Relu`` -> ``attrs["_activation"] = "Relu"``;
    * ``Clip`` whose ``min`` / ``max`` are constant scalars (or attributes, opset < 11;
      an absent one, or one of -inf / +inf, does not clip) -> ``"Clip"`` with
      ``"_activation_min"`` / ``"_activation_max"`` floats (ReLU6 is ``0, 6``);
    * ``LeakyRelu`` -> ``"LeakyRelu"`` with ``"_activation_alpha"``.

    A nan bound or alpha is never fused.  The Conv takes over the activation's output
    name; the activation node is removed (its constant bounds become dead constants).

    In a pre-quantized graph (``graph.quant``, e.g. a QuantizeLinear -> DequantizeLinear pair
    or a TensorFlow FakeQuant between the Conv and the activation), the fused output has the
    activation output's own grid if it has one (the Conv's is dropped), else the Conv
    output's: a ``Relu`` or ``Clip`` is exact on that grid (it clamps int8 values), so the
    one node rounds as RKNN-Toolkit2 2.5.0 does (``ConvRelu`` / ``ConvClip`` on it, or a
    ``Relu`` / ``Clip`` on the Conv's int8 output).  A ``LeakyRelu`` without a grid of its own
    is not fused there: the vendor runs it in float on the Conv's int8 output.
    """
    supported = set(conv_fusable_activations() if supported is None else supported)
    if not supported:
        return 0
    users = _consumers(graph)
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    quant = getattr(graph, "quant", None) or {}
    moved: Dict[str, QuantParams] = {}
    fused = 0
    for act in list(graph.nodes):
        if act.op not in supported or not act.inputs or len(act.outputs) != 1:
            continue
        extra = _fusable_activation_attrs(act, graph.constants)
        if extra is None:
            continue
        conv = producers.get(act.inputs[0])
        if conv is None or conv.op != "Conv" or "_activation" in conv.attrs or len(conv.outputs) != 1:
            continue
        y = conv.outputs[0]
        if y in graph.outputs or len(users.get(y, [])) != 1:
            continue
        z = act.outputs[0]
        if y in quant and z not in quant:
            if act.op == "LeakyRelu":
                continue
            moved[z] = quant[y]
        conv.attrs.update(extra)
        conv.outputs = [z]
        graph.nodes.remove(act)
        producers[z] = conv
        fused += 1
    if moved:
        graph.quant = {**graph.quant, **moved}  # a new table: optimize's copy shares the import's
    return fused


def _fusable_activation_attrs(act: Node, consts) -> Optional[Dict[str, object]]:
    """The Conv attrs that make it compute ``act`` too (see :func:`fuse_activations`),
    or None when ``act`` cannot be fused."""
    if act.op == "Relu":
        return {"_activation": "Relu"} if len(act.inputs) == 1 else None
    if act.op == "LeakyRelu":
        alpha = act.attrs.get("alpha", 0.01)
        if len(act.inputs) != 1 or isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.number)) \
                or not np.isfinite(alpha):
            return None
        return {"_activation": "LeakyRelu", "_activation_alpha": float(np.float32(alpha))}
    if act.op == "Clip":
        extra: Dict[str, object] = {"_activation": "Clip"}
        for index, name, skip in ((1, "min", -np.inf), (2, "max", np.inf)):
            if len(act.inputs) > index and act.inputs[index]:
                b = consts.get(act.inputs[index])
                if b is None or np.asarray(b).dtype.kind != "f" or np.size(b) > 1:
                    return None  # a bound computed at run time (or not a float scalar)
                value = None if np.size(b) == 0 else float(np.float32(np.asarray(b).reshape(())))
            elif len(act.inputs) <= index and name in act.attrs:  # opset < 11: float attributes
                value = act.attrs[name]
                if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                    return None
                value = float(np.float32(value))
            else:
                value = None
            if value is None or value == skip:
                continue
            if not np.isfinite(value):
                return None  # nan, or a bound that clips everything to infinity
            extra[f"_activation_{name}"] = value
        return extra
    return None


# -- 8. dead nodes ---------------------------------------------------------------------------


def remove_dead_nodes(graph: Graph) -> int:
    """Drop nodes no graph output depends on, and constants nothing reads."""
    live = set(graph.outputs)
    kept: List[Node] = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(n for n in node.inputs if n)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    graph.constants = {k: v for k, v in graph.constants.items() if k in live}
    return removed


# -- finishing -------------------------------------------------------------------------------


def finalize_outputs(graph: Graph) -> int:
    """Give every constant graph output a producing ``Identity`` node (the constant is
    renamed), and keep node names clear of the constants their array attributes
    become in a file (``<node>/<attr>``).  Returns the number of nodes added or renamed."""
    changed = 0
    for out in list(dict.fromkeys(graph.outputs)):
        if out not in graph.constants or out in graph.inputs:
            continue
        src = _unique(graph.constants, f"{out}/const")
        graph.constants[src] = graph.constants.pop(out)
        for n in graph.nodes:
            if out in n.inputs:
                n.inputs = [src if i == out else i for i in n.inputs]
        graph.nodes.append(Node("Identity", _unique({n.name for n in graph.nodes}, f"{out}/identity"),
                                [src], [out], {}))
        changed += 1
    names = {n.name for n in graph.nodes}
    for n in graph.nodes:
        refs = [f"{n.name}/{k}" for k, v in n.attrs.items() if isinstance(v, np.ndarray)]
        if any(r in graph.constants for r in refs):
            base = n.name
            k = 1
            while f"{base}_{k}" in names or any(f"{base}_{k}/{a}" in graph.constants for a in n.attrs):
                k += 1
            names.discard(n.name)
            n.name = f"{base}_{k}"
            names.add(n.name)
            changed += 1
    return changed


# -- storage precision -----------------------------------------------------------------------


def round_constants_to_float16(graph: Graph, keep: Collection[str] = ()) -> int:
    """Store every float constant but those named in ``keep`` as float32 values rounded to
    float16 precision, in place.

    A float16 model then holds exactly what the NPU would, and the runtime uses the
    weights straight from the (memory-mapped) file instead of rounding a copy.
    Returns how many constants changed.
    """
    from .._native.executor_kernels import round_fp16_inplace

    changed = 0
    for name, value in graph.constants.items():
        a = np.asarray(value)
        if a.dtype.kind != "f" or name in keep:
            continue
        rounded = np.array(a, dtype=np.float32)
        round_fp16_inplace(rounded.reshape(-1))
        if a.dtype != np.float32 or not np.array_equal(rounded, a):
            graph.constants[name] = rounded
            changed += 1
    return changed
