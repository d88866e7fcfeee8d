"""Channel pruning: ``config(model_pruning=True)``.

RKNN-Toolkit2's model pruning removes "weights and feature channels that have no impact
on the model".  This pass does the same on the optimised graph (after BatchNormalization
and activations are folded into the convolutions), one *channel* at a time.  A channel
``j`` of a producer's output is removed when

* the producer is a ``Conv`` (``group == 1``, constant float weight and bias, no fused
  residual) or a ``Gemm`` (constant float ``B``, a constant per-column ``C`` or none,
  ``transA == 0``), and
* every path from its output reaches, through channel-wise ops (``Relu``, ``LeakyRelu``,
  ``Clip`` with constant bounds, ``Sigmoid``, ``Tanh``, ``MaxPool``, ``AveragePool``,
  ``GlobalAveragePool``, ``GlobalMaxPool``, ``ChannelAffine``, ``Flatten(axis=1)`` of a
  global pool, depthwise ``Conv``: one constant float filter per channel, no fused
  residual), only *consumers* that read it as the contracted dimension: ``Conv``
  (``group == 1``, as its data input) or ``Gemm`` (as ``A``, ``transA == 0``), none of
  it being a graph output, and
* the channel cannot change an output other than through a constant:

  - it is **constant where every consumer reads it** (its weight slice is all zeros, so it
    holds the constant ``act(bias)``; that constant is carried through the ops on the way,
    e.g. a negative bias through ``Relu`` gives 0, through ``Sigmoid`` 0.5, through a
    depthwise conv ``act(b)`` when it was 0, or ``act(v * sum(w) + b)`` without padding),
    and each consumer either reads 0 or takes the constant into its bias exactly: a
    ``Conv`` without padding (every output reads every tap: ``v * sum(W[:, j])`` joins
    the bias) or a ``Gemm`` with ``beta != 0`` (``alpha * v * B[j]`` joins ``beta * C``),
    as RKNN-Toolkit2 does for the zero channels of a MobileNet's depthwise blocks; or
  - **every consumer's weight slice for it is all zeros** (whatever it holds, nothing
    reads it; channels whose producer weights are not all finite are kept, since
    ``inf * 0`` is NaN).

The channel's weight row and bias entry go from the producer, its entries from
``ChannelAffine`` scale/shift and depthwise convs on the way, and its input slice from
every consumer's weight.  Outputs stay the same up to float32 rounding: a consumer's sums
lose terms that were exactly 0 or that joined its bias, and the smaller matrices may
accumulate in another order.  The pass repeats until nothing changes.  Constants other
nodes share are never modified in place: sliced copies get new names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from ..model.graph import Graph, Node

__all__ = ["PruneResult", "prune_channels", "weight_bytes", "graph_flops", "format_result"]

#: Channel-wise ops a pruned channel may pass through (channels stay on axis 1).
_PASS_THROUGH = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "MaxPool", "AveragePool", "GlobalAveragePool",
                 "GlobalMaxPool", "ChannelAffine", "Flatten")
_GLOBAL_POOLS = ("GlobalAveragePool", "GlobalMaxPool")


@dataclass
class PruneResult:
    """What :func:`prune_channels` removed.

    Attributes:
        channels: ``{producer node name: number of output channels removed}``.
        weight_bytes_before / weight_bytes_after: bytes of the graph's constants.
        flops_before / flops_after: floating-point operations of one inference in the
            Conv / ConvTranspose / Gemm / MatMul nodes whose output shape is known (2 per
            multiply-accumulate).
    """

    channels: Dict[str, int] = field(default_factory=dict)
    weight_bytes_before: int = 0
    weight_bytes_after: int = 0
    flops_before: int = 0
    flops_after: int = 0

    @property
    def pruned(self) -> bool:
        """True when at least one channel was removed."""
        return bool(self.channels)


def prune_channels(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]] = None) -> PruneResult:
    """Remove the channels described in the module doc from ``graph`` (in place) and
    drop what no longer feeds an output.  ``shapes`` (tensor name -> static shape, as
    :attr:`ImportedModel.shapes`) is only used for the FLOP counts.  Returns the
    :class:`PruneResult`; a graph with nothing to prune is left unchanged."""
    from .optimize import remove_dead_nodes

    shapes = dict(shapes or {})
    result = PruneResult(weight_bytes_before=weight_bytes(graph), flops_before=graph_flops(graph, shapes))
    while True:
        changed = False
        for node in list(graph.nodes):
            removed = _prune_producer(graph, node)
            if removed:
                result.channels[node.name] = result.channels.get(node.name, 0) + removed
                changed = True
        if not changed:
            break
    if result.pruned:
        remove_dead_nodes(graph)
    result.weight_bytes_after = weight_bytes(graph)
    result.flops_after = graph_flops(graph, shapes)
    return result


def format_result(result: PruneResult) -> List[str]:
    """The vendor's log lines for a pruned model: ``model_pruning results:``,
    ``Weight: -X MB (-Y%)`` (MB = 2**20 bytes) and ``GFLOPs: -Z (-W%)``."""
    dw = result.weight_bytes_before - result.weight_bytes_after
    df = result.flops_before - result.flops_after
    pw = 100.0 * dw / result.weight_bytes_before if result.weight_bytes_before else 0.0
    pf = 100.0 * df / result.flops_before if result.flops_before else 0.0
    return ["model_pruning results:",
            f"Weight: -{dw / float(1 << 20):.5f} MB (-{pw:.1f}%)",
            f"GFLOPs: -{df / 1e9:.5f} (-{pf:.1f}%)"]


# -- measuring -------------------------------------------------------------------------------


def weight_bytes(graph: Graph) -> int:
    """Bytes of every constant of ``graph`` (weights, biases, shape tensors...)."""
    return int(sum(np.asarray(v).nbytes for v in graph.constants.values()))


def graph_flops(graph: Graph, shapes: Mapping[str, Sequence[int]]) -> int:
    """FLOPs (2 per multiply-accumulate) of the Conv / ConvTranspose / Gemm / MatMul nodes
    whose weight is a constant and whose output shape is known in ``shapes``."""
    total = 0
    for node in graph.nodes:
        if node.op not in ("Conv", "ConvTranspose", "Gemm", "MatMul") or len(node.inputs) < 2:
            continue
        w = graph.constants.get(node.inputs[1])
        out = shapes.get(node.outputs[0]) if node.outputs else None
        if w is None or out is None or any(int(d) < 0 for d in out) or len(out) < 2:
            continue
        out = [int(d) for d in out]
        if node.op == "Conv":
            positions = out[0] * int(np.prod(out[2:], dtype=np.int64))
        elif node.op == "ConvTranspose":
            positions = int(np.prod(shapes.get(node.inputs[0], [-1]), dtype=np.int64)) // max(w.shape[0], 1)
            if positions <= 0:
                continue
        else:
            positions = int(np.prod(out[:-1], dtype=np.int64))  # rows of the product
        total += 2 * positions * int(np.asarray(w).size)
    return total


# -- the pass --------------------------------------------------------------------------------


@dataclass
class _Producer:
    w: np.ndarray          # weight
    w_axis: int            # axis of w holding the output channels
    bias: Optional[np.ndarray]  # per-channel bias (length m) or None
    bias_index: int        # input index of the bias (-1: none)
    m: int                 # output channels


@dataclass
class _Path:
    consumers: List[Tuple[Node, int, np.ndarray]]  # (node, weight axis of the channel, channel values)
    affines: List[Node]                # ChannelAffine nodes on the way
    depthwise: List[Node] = field(default_factory=list)  # depthwise Convs on the way
    ok: bool = True


def _producer(node: Node, consts) -> Optional[_Producer]:
    if len(node.outputs) != 1 or len(node.inputs) < 2:
        return None
    w = consts.get(node.inputs[1])
    if w is None or w.dtype.kind != "f" or w.size == 0:
        return None
    if node.op == "Conv":
        if int(node.attrs.get("group", 1)) != 1 or node.attrs.get("_residual") or len(node.inputs) > 3 \
                or w.ndim < 3:
            return None
        m, axis = w.shape[0], 0
    elif node.op == "Gemm":
        if w.ndim != 2 or node.attrs.get("transA", 0):
            return None
        axis = 0 if node.attrs.get("transB", 0) else 1
        m = w.shape[axis]
    else:
        return None
    bias = None
    index = -1
    if len(node.inputs) > 2 and node.inputs[2]:
        b = consts.get(node.inputs[2])
        if b is None or b.dtype.kind != "f":
            return None
        if b.size == m and (b.ndim == 1 or (b.ndim == 2 and b.shape[0] == 1 and node.op == "Gemm")):
            bias = np.asarray(b, np.float64).reshape(-1)
            if node.op == "Gemm":
                bias = bias * float(node.attrs.get("beta", 1.0))
        elif b.size == 1 and node.op == "Gemm":
            bias = np.full(m, float(np.asarray(b).reshape(-1)[0]) * float(node.attrs.get("beta", 1.0)))
        else:
            return None
        index = 2
    return _Producer(w, axis, bias, index, m)


def _activation(node: Node, values: np.ndarray) -> np.ndarray:
    """The Conv's fused activation applied to per-channel constant values."""
    act = node.attrs.get("_activation")
    if act == "Relu":
        return np.maximum(values, 0.0)
    if act == "LeakyRelu":
        return np.where(values >= 0, values, values * float(node.attrs.get("_activation_alpha", 0.01)))
    if act == "Clip":
        lo = node.attrs.get("_activation_min")
        hi = node.attrs.get("_activation_max")
        return np.clip(values, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    return values


def _trace(graph: Graph, start: str, values: np.ndarray, users, outputs: Set[str]) -> _Path:
    """Follow ``start`` to its consumers through pass-through ops (see the module doc),
    carrying ``values``: per channel, the constant the channel holds (NaN: not constant)."""
    path = _Path([], [])
    stack: List[Tuple[str, bool, np.ndarray]] = [(start, False, values)]
    seen = set()
    while stack:
        name, pooled, vals = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in outputs:
            path.ok = False
            return path
        for node in users.get(name, []):
            if node.inputs[0] != name or name in node.inputs[1:]:
                path.ok = False
                return path
            if node.op == "Conv" and int(node.attrs.get("group", 1)) == 1 and _const_float(graph, node, 1):
                path.consumers.append((node, 1, vals))
            elif node.op == "Gemm" and not node.attrs.get("transA", 0) and _const_float(graph, node, 1) \
                    and graph.constants[node.inputs[1]].ndim == 2:
                path.consumers.append((node, 1 if node.attrs.get("transB", 0) else 0, vals))
            elif node.op == "Conv" and _depthwise(graph, node):
                if len(node.outputs) != 1:
                    path.ok = False
                    return path
                path.depthwise.append(node)
                stack.append((node.outputs[0], pooled, _depthwise_through(graph, node, vals)))
            elif node.op in _PASS_THROUGH and len(node.outputs) >= 1:
                after = _through(graph, node, vals, pooled)
                if after is None or any(o and (o in outputs or users.get(o)) for o in node.outputs[1:]):
                    path.ok = False  # e.g. MaxPool indices, or a bound computed at run time
                    return path
                if node.op == "ChannelAffine":
                    path.affines.append(node)
                stack.append((node.outputs[0], pooled or node.op in _GLOBAL_POOLS, after))
            else:
                path.ok = False
                return path
    path.ok = bool(path.consumers)
    return path


def _depthwise(graph: Graph, node: Node) -> bool:
    """A Conv with one constant float ``[C, 1, ...]`` filter per channel (``group == C``),
    an optional constant bias and no fused residual: channel ``j`` out reads channel ``j`` in."""
    if not _const_float(graph, node, 1) or node.attrs.get("_residual") or len(node.inputs) > 3:
        return False
    if len(node.inputs) == 3 and node.inputs[2] and not _const_float(graph, node, 2):
        return False
    w = graph.constants[node.inputs[1]]
    return w.ndim >= 3 and w.shape[1] == 1 and int(node.attrs.get("group", 1)) == w.shape[0] > 1


def _no_padding(node: Node) -> bool:
    """Whether every output position of a Conv reads every tap from inside its input."""
    pads = node.attrs.get("pads") or ()
    return node.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID", b"NOTSET", b"VALID") \
        and not any(int(p) for p in pads)


def _depthwise_through(graph: Graph, node: Node, vals: np.ndarray) -> np.ndarray:
    """Per-channel constants after a depthwise Conv (NaN where not constant): a zero
    channel gives its bias, a constant ``v`` ``v * sum(w) + b`` when no tap reads padding;
    then the fused activation."""
    w = np.asarray(graph.constants[node.inputs[1]], np.float64)
    if vals.size != w.shape[0]:
        return np.full(vals.shape, np.nan)
    b = np.zeros(w.shape[0])
    if len(node.inputs) == 3 and node.inputs[2]:
        b = np.asarray(graph.constants[node.inputs[2]], np.float64).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        full = vals * w.reshape(w.shape[0], -1).sum(axis=1) + b
    out = np.where(vals == 0, b, full if _no_padding(node) else np.nan)
    return _activation(node, np.where(np.isnan(vals), np.nan, out))


#: the bias input of a Conv and the ``C`` input of a Gemm
_BIAS = 2


def _foldable(graph: Graph, node: Node) -> bool:
    """Whether a consumer can take a constant input channel into its bias exactly: an
    unpadded Conv or a Gemm with ``beta != 0``, whose bias (``C``) is absent or a constant
    with one value per output (or one in all)."""
    bias = node.inputs[_BIAS] if len(node.inputs) > _BIAS and node.inputs[_BIAS] else None
    if bias is not None and not _const_float(graph, node, _BIAS):
        return False
    w = graph.constants[node.inputs[1]]
    if node.op == "Conv":
        outputs = w.shape[0]
        fits = _no_padding(node)
    else:
        outputs = w.shape[0] if node.attrs.get("transB", 0) else w.shape[1]
        fits = float(node.attrs.get("beta", 1.0)) != 0.0
    return fits and (bias is None or np.size(graph.constants[bias]) in (1, outputs))


def _fold_constants(graph: Graph, node: Node, axis: int, vals: np.ndarray) -> None:
    """Add what the constant channels ``vals`` (0 elsewhere) contribute to a consumer's
    output into its bias (a new bias constant, or ``C`` of a Gemm, created if missing)."""
    w = np.asarray(graph.constants[node.inputs[1]], np.float64)
    per_channel = np.moveaxis(w, axis, 0)  # [channel, ...]
    if node.op == "Conv":
        add = np.tensordot(vals, per_channel.reshape(per_channel.shape[0], per_channel.shape[1], -1).sum(axis=2),
                           axes=1)
    else:
        add = vals @ per_channel * float(node.attrs.get("alpha", 1.0)) / float(node.attrs.get("beta", 1.0))
    m, k = add.size, _BIAS
    old = graph.constants.get(node.inputs[k]) if len(node.inputs) > k and node.inputs[k] else None
    base = np.zeros(m) if old is None else np.broadcast_to(np.asarray(old, np.float64).reshape(-1), (m,))
    bias = (base + add).astype(np.float32)
    if old is not None and np.ndim(old) == 2:
        bias = bias.reshape(1, m)
    if len(node.inputs) <= k:
        node.inputs = list(node.inputs) + [""] * (k + 1 - len(node.inputs))
    _set_input(graph, node, k, bias, "pruned_folded_B")


def _const_float(graph: Graph, node: Node, k: int) -> bool:
    if len(node.inputs) <= k:
        return False
    w = graph.constants.get(node.inputs[k])
    return w is not None and w.dtype.kind == "f"


def _through(graph: Graph, node: Node, vals: np.ndarray, pooled: bool) -> Optional[np.ndarray]:
    """Per-channel constants after ``node`` (NaN where not constant), or None when ``node``
    cannot be passed (not channel-wise here, or parameters unknown at build time)."""
    consts = graph.constants
    op = node.op
    if op == "Clip":
        bounds = []
        for k, attr, inf in ((1, "min", -np.inf), (2, "max", np.inf)):
            if len(node.inputs) > k and node.inputs[k]:
                b = consts.get(node.inputs[k])
                if b is None or np.size(b) > 1:
                    return None
                bounds.append(inf if np.size(b) == 0 else float(np.asarray(b).reshape(-1)[0]))
            else:
                bounds.append(float(node.attrs.get(attr, inf)) if len(node.inputs) <= k else inf)
        return np.clip(vals, bounds[0], bounds[1])
    if len(node.inputs) != 1 and op != "ChannelAffine":
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        if op == "Relu":
            return np.maximum(vals, 0.0)
        if op == "LeakyRelu":
            return np.where(vals >= 0, vals, vals * float(node.attrs.get("alpha", 0.01)))
        if op == "Sigmoid":
            return 1.0 / (1.0 + np.exp(-vals))
        if op == "Tanh":
            return np.tanh(vals)
        if op in ("MaxPool", "GlobalMaxPool", "GlobalAveragePool"):
            return vals  # a constant plane pools to itself (MaxPool pads with -inf)
        if op == "AveragePool":
            return np.where(vals == 0, 0.0, np.nan)  # zero padding may count in the average
        if op == "Flatten":
            return vals if pooled and int(node.attrs.get("axis", 1)) == 1 else None
        if op == "ChannelAffine":
            if len(node.inputs) != 3 or not all(_const_float(graph, node, k) for k in (1, 2)):
                return None
            scale = np.asarray(consts[node.inputs[1]], np.float64).reshape(-1)
            shift = np.asarray(consts[node.inputs[2]], np.float64).reshape(-1)
            if scale.size != vals.size or shift.size != vals.size:
                return None
            return _activation(node, vals * scale + shift)
    return None


def _prune_producer(graph: Graph, node: Node) -> int:
    consts = graph.constants
    info = _producer(node, consts)
    if info is None or info.m < 2:
        return 0
    users: Dict[str, List[Node]] = {}
    for n in graph.nodes:
        for name in n.inputs:
            if name:
                users.setdefault(name, [])
                if n not in users[name]:
                    users[name].append(n)
    moved = np.moveaxis(np.asarray(info.w), info.w_axis, 0).reshape(info.m, -1)
    finite = np.all(np.isfinite(moved), axis=1)
    zero_w = np.all(moved == 0, axis=1)
    bias = info.bias if info.bias is not None else np.zeros(info.m)
    values = np.where(zero_w, _activation(node, bias), np.nan)
    path = _trace(graph, node.outputs[0], values, users, set(graph.outputs))
    if not path.ok:
        return 0
    constant = zero_w.copy()
    unread = finite.copy()
    for consumer, axis, vals in path.consumers:
        cw = np.asarray(consts[consumer.inputs[1]])
        if cw.shape[axis] != info.m:
            return 0  # e.g. a Flatten over more than the channels
        taken = np.isfinite(vals) & ((vals == 0) | _foldable(graph, consumer))
        constant &= taken
        unread &= np.all(np.moveaxis(cw, axis, 0).reshape(info.m, -1) == 0, axis=1)
    drop = constant | unread
    n_drop = int(np.count_nonzero(drop))
    if n_drop == 0 or n_drop == info.m:
        return 0  # nothing to remove, or a channel-less tensor (leave such graphs alone)
    for consumer, axis, vals in path.consumers:
        folded = np.where(drop & ~unread & (vals != 0), vals, 0.0)
        if np.any(folded):
            _fold_constants(graph, consumer, axis, folded)
    keep = np.flatnonzero(~drop)
    _set_input(graph, node, 1, np.take(np.asarray(info.w), keep, axis=info.w_axis), "pruned_W")
    if info.bias_index >= 0:
        b = np.asarray(consts[node.inputs[info.bias_index]])
        if b.size == info.m:
            _set_input(graph, node, info.bias_index, np.take(b.reshape(b.shape[:-1] + (-1,)), keep, axis=-1),
                       "pruned_B")
    for affine in path.affines:
        for k, tag in ((1, "pruned_scale"), (2, "pruned_shift")):
            _set_input(graph, affine, k, np.asarray(consts[affine.inputs[k]])[keep], tag)
    for dw in path.depthwise:
        _set_input(graph, dw, 1, np.asarray(consts[dw.inputs[1]])[keep], "pruned_W")
        if len(dw.inputs) == 3 and dw.inputs[2]:
            _set_input(graph, dw, 2, np.asarray(consts[dw.inputs[2]]).reshape(-1)[keep], "pruned_B")
        dw.attrs = dict(dw.attrs, group=int(keep.size))
    for consumer, axis, _ in path.consumers:
        _set_input(graph, consumer, 1, np.take(np.asarray(consts[consumer.inputs[1]]), keep, axis=axis),
                   "pruned_W")
    return n_drop


def _set_input(graph: Graph, node: Node, k: int, value: np.ndarray, tag: str) -> None:
    from .optimize import _unique

    name = _unique(graph.constants, f"{node.name}/{tag}")
    graph.constants[name] = np.ascontiguousarray(value)
    node.inputs = list(node.inputs)
    node.inputs[k] = name
