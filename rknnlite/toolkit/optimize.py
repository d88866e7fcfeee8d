"""Graph optimisation passes run by the toolkit's ``build`` (in this order):

1. :func:`fold_constants` - ``Constant`` nodes become constants; a node whose inputs are
   all constants is executed once through its registered kernel and replaced by its
   outputs (Shape/Gather/Concat chains, ConstantOfShape, Reshape of a constant...);
   ``Shape``/``Size`` of a tensor whose shape is fully static folds too.  Folded values
   keep the dtype the kernel gives (int64 shapes stay int64, floats are float32).
2. :func:`remove_identities` - ``Identity`` and inference-mode ``Dropout`` are removed
   and their consumers rewired; graph outputs keep their names.
3. :func:`fold_batchnorm` - an inference ``BatchNormalization`` right after a ``Conv``
   whose output nothing else reads is merged into the Conv's weights and bias
   (computed in float64, stored as float32).
4. :func:`fuse_activations` - ``Conv`` followed by an activation the conv kernel can
   apply itself becomes one Conv with ``attrs["_activation"]`` (only when the conv
   kernel declares support; see the function).
5. :func:`remove_dead_nodes` - nodes and constants no graph output depends on are dropped.

Finally graph outputs that became constants are re-emitted through an ``Identity``
node, so every output is produced by a node.

Every pass mutates the graph it is given and returns how many nodes it changed;
:func:`optimize` copies the graph first and runs them all.
"""

from __future__ import annotations

import copy
import logging
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ModelInvalidError
from ..model.graph import Graph, Node

__all__ = [
    "optimize",
    "fold_constants",
    "remove_identities",
    "fold_batchnorm",
    "fuse_activations",
    "remove_dead_nodes",
    "finalize_outputs",
    "conv_fusable_activations",
]

_log = logging.getLogger("rknnlite.toolkit")

#: Ops never folded even with constant inputs (their value is not a function of the inputs).
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def optimize(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None, *,
             activation_fusion: bool = True) -> Graph:
    """Run every pass (see the module doc) on a copy of ``graph`` and return the copy.

    ``shapes`` maps tensor names to static shapes (``-1`` for an unknown dim), e.g.
    :attr:`ImportedModel.shapes <rknnlite.toolkit.onnx_import.ImportedModel.shapes>`;
    it lets ``Shape``/``Size`` of statically shaped tensors fold.  Constant arrays are
    shared with the input graph, not copied.
    """
    g = copy.copy(graph)  # keeps any other graph fields
    g.nodes = [Node(n.op, n.name, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in graph.nodes]
    g.inputs, g.outputs, g.constants = list(graph.inputs), list(graph.outputs), dict(graph.constants)
    counts = {
        "constant folding": fold_constants(g, shapes),
        "identity/dropout removal": remove_identities(g),
        "batchnorm folding": fold_batchnorm(g),
    }
    if activation_fusion:
        counts["activation fusion"] = fuse_activations(g)
    counts["dead node removal"] = remove_dead_nodes(g)
    counts["output finalisation"] = finalize_outputs(g)
    _log.debug("optimize: %s; %d nodes left", ", ".join(f"{k} {v}" for k, v in counts.items()), len(g.nodes))
    return g


# -- 1. constant folding ---------------------------------------------------------------------


def fold_constants(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """Replace nodes computable at build time by constants; returns the number folded.

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
            continue
        for name, value in zip(node.outputs, values):
            if name:
                consts[name] = value
        folded += 1
    graph.nodes = kept
    return folded


def _fold_node(node: Node, consts, shapes, kernels) -> Optional[List[np.ndarray]]:
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
    merged = 0
    for bn in list(graph.nodes):
        if bn.op != "BatchNormalization" or len(bn.inputs) < 5:
            continue
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op != "Conv" or len(conv.outputs) != 1:
            continue
        y = conv.outputs[0]
        if y in graph.outputs or len(users.get(y, [])) != 1:
            continue
        if bn.attrs.get("training_mode", 0) or bn.attrs.get("spatial", 1) == 0:
            continue
        if any(o and (o in graph.outputs or users.get(o)) for o in bn.outputs[1:]):
            continue
        params = [consts.get(n) for n in bn.inputs[1:5]]
        w = consts.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
        has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
        b = consts.get(conv.inputs[2]) if has_bias else None
        if w is None or any(p is None for p in params) or (has_bias and b is None):
            continue
        scale, beta, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
        m = w.shape[0]
        if not all(len(p) in (1, m) for p in (scale, beta, mean, var)):
            continue
        eps = float(bn.attrs.get("epsilon", 1e-5))
        s = scale / np.sqrt(var + eps)
        s = np.broadcast_to(s, (m,))
        w64 = np.asarray(w, np.float64) * s.reshape((m,) + (1,) * (w.ndim - 1))
        b64 = np.zeros(m) if b is None else np.asarray(b, np.float64).reshape(-1)
        b64 = (b64 - mean) * s + beta
        w_name = _unique(consts, f"{conv.name}/W_bn")
        consts[w_name] = w64.astype(np.float32)
        b_name = _unique(consts, f"{conv.name}/B_bn")
        consts[b_name] = np.broadcast_to(b64, (m,)).astype(np.float32)
        conv.inputs = [conv.inputs[0], w_name, b_name]
        conv.outputs = [bn.outputs[0]]
        graph.nodes.remove(bn)
        merged += 1
    return merged


def _unique(taken, name: str) -> str:
    if name not in taken:
        return name
    k = 1
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"


# -- 4. activation fusion --------------------------------------------------------------------


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
    """
    supported = set(conv_fusable_activations() if supported is None else supported)
    if not supported:
        return 0
    users = _consumers(graph)
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
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
        conv.attrs.update(extra)
        conv.outputs = [act.outputs[0]]
        graph.nodes.remove(act)
        producers[act.outputs[0]] = conv
        fused += 1
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


# -- 5. dead nodes ---------------------------------------------------------------------------


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


def round_constants_to_float16(graph: Graph) -> int:
    """Store every float constant as float32 values rounded to float16 precision, in place.

    A float16 model then holds exactly what the NPU would, and the runtime uses the
    weights straight from the (memory-mapped) file instead of rounding a copy.
    Returns how many constants changed.
    """
    from .._native.executor_kernels import round_fp16_inplace

    changed = 0
    for name, value in graph.constants.items():
        a = np.asarray(value)
        if a.dtype.kind != "f":
            continue
        rounded = np.array(a, dtype=np.float32)
        round_fp16_inplace(rounded.reshape(-1))
        if a.dtype != np.float32 or not np.array_equal(rounded, a):
            graph.constants[name] = rounded
            changed += 1
    return changed
