"""int8 convs of a portable model summed as the NPU sums them: integer codes in an int32 accumulator.

A portable int8 model (``Graph.quant``) stores each quantized tensor as its real value on its
int8 grid.  Summing those real values in float32 rounds every partial sum, in an order the
conv kernel and the CPU's SIMD width choose, so an output near a rounding boundary lands on
one int8 step or the next depending on the machine; across a deep network these steps add up
(a QAT MobileNet v1 gave cosine 0.93 against the TFLite interpreter; summed exactly, 0.997).
The NPU, and the vendor's simulator, multiply int8 codes and sum them exactly.

:func:`integer_convs` rewrites each int8 ``Conv`` of such a graph into the three nodes a vendor
int8 conv lowers to (:mod:`rknnlite.model.rknn_graph.accumulator`): ``VendorCodes`` (the
input's codes ``q - zp``), a ``Conv`` on the weight codes ``q_w - zp_w`` and the int32 bias
``rint(b / (s_x * s_w[c]))`` (every product and partial sum an integer, exact in float32 below
2^24), and ``VendorRequant`` (``rint(acc * s_x * s_w[c] / s_y)`` on the output's grid, a fused
Relu or Clip as its code range; a fused residual, ``_residual``, as ``VendorAddRequant``:
``acc * s_x * s_w[c] + r`` [then Relu] on the output's grid, the vendor's ConvAdd[Relu]).  A
``Gemm`` (``alpha = beta = 1``, no ``transA``) with a constant weight runs the same way.  A conv
qualifies when its input and output are int8 per tensor, its weight a constant quantized int8
(per tensor or per output channel), its bias absent or a float constant, and its fused
activation none, ``Relu`` or ``Clip`` (with a residual: none or ``Relu``), and it is not a
stage of a split GlobalAveragePool (``attrs["_pool_stage_taps"]``, which the simulator sums in
float32 as the pool it replaces: :func:`rknnlite.backends.software.ops.pool.pool_stage_conv`);
any other conv keeps the real-valued computation.

A qualifying conv without groups or a fused activation whose output only a ``HardSwish``
reads runs as the vendor's simulator runs its fused ``ConvHardSwish``: the HardSwish takes
the accumulator in real units, ``acc * s_x * s_w[c]`` (a ``Mul`` writing the conv's output,
whose quantization the rewritten graph drops), with no int8 grid between the conv and the
activation (:func:`_real_hard_swish`).  The vendor's snapshots of PP-OCR's
cls model show it: every one of its 18 HardSwish outputs is ``round(hswish(pre) / s_y)``
of the snapshot's pre-activation, which is unquantized after a normal conv (18,110 distinct
values of 18,432) and on an int8 grid of its own after a depthwise one (183 of 9,216), a
grid the portable graph gives that tensor too; so do tiny probes of input ranges +-0.2 to +-10
(``tests/test_lut_activation_rule.py``).  (The NPU computes the activation through its lookup
table, :mod:`rknnlite.model.rknn_graph.lut`; the simulator does not.)  A Gemm (a dense layer on token rows) whose
output only a ``Gelu`` reads does the same, as the vendor's ConvExGelu (a transformer's MLP:
``tests/test_dense_residuals.py``), and a Gemm's fused residual (``toolkit.dense_residuals``) is
its ConvAdd as a Conv's.
"""

from __future__ import annotations

import copy
import math
from typing import Collection, Dict, FrozenSet, List, Optional, Set, Tuple

import numpy as np

from ...model.graph import Graph, Node, unique_name
from ...model.rknn_graph.accumulator import Accumulator, fuse_codes, grid_code

__all__ = ["integer_convs"]

_INT32 = (-(1 << 31), (1 << 31) - 1)


def integer_convs(graph: Graph, keep_tensors: Collection[str] = ()) -> Tuple[Graph, FrozenSet[str]]:
    """``graph`` with its qualifying int8 convs summed exactly (module doc), and the names of the
    tensors and constants the rewrite adds, which must stay float32 in float16 mode (the
    accumulator, the integer weights and biases).  Returns ``graph`` itself when no conv
    qualifies.  ``keep_tensors`` (besides the graph's outputs) stay tensors of the result: a
    run that returns them (``Executor(expose=...)``) must find them."""
    if not graph.quant:
        return graph, frozenset()
    nodes: List[Node] = []
    constants = dict(graph.constants)
    keep: List[str] = []
    codes: Dict[str, str] = {}
    taken = set(constants) | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    readers = graph.readers()
    real: Set[str] = set()  # conv outputs written as the real accumulator, off their int8 grid
    changed = False
    for node in graph.nodes:
        acc = _accumulator(graph, node)
        if acc is None:
            nodes.append(node)
            continue
        changed = True
        x, y = node.inputs[0], node.outputs[0]
        if x not in codes:
            codes[x] = unique_name(f"{x}__codes", taken)
            nodes.append(Node("VendorCodes", node.name, [x], [codes[x]], {"scale": float(acc.s_in)}))
        weight, bias, total = (unique_name(f"{y}__{part}", taken) for part in ("int_weight", "int_bias", "acc"))
        constants[bias] = acc.bias.astype(np.float32)
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith(("_activation", "_residual"))}
        if node.op == "Conv":
            constants[weight] = np.ascontiguousarray(acc.weight, np.float32)
            nodes.append(Node("Conv", node.name, [codes[x], weight, bias], [total], dict(attrs, _winograd=False)))
        else:
            constants[weight] = np.ascontiguousarray(acc.weight[:, :, 0, 0], np.float32)
            nodes.append(Node("Gemm", node.name, [codes[x], weight, bias], [total], dict(attrs, transB=1)))
        q = graph.quant[y]
        grid = {"zero_point": int(q.zero_point[0]), "scale": float(q.scale[0])}
        if _real_hard_swish(graph, node, readers):
            step = unique_name(f"{y}__step", taken)
            constants[step] = acc.step.astype(np.float32).reshape((1, -1, 1, 1) if node.op == "Conv" else (1, -1))
            nodes.append(Node("Mul", node.name, [total, step], [y], {}))
            real.add(y)
            keep += [step, y]
        elif node.attrs.get("_residual"):
            nodes.append(Node("VendorAddRequant", node.name, [total, node.inputs[3]], [y],
                              dict(grid, step=acc.step.astype(np.float32).tolist(),
                                   relu=node.attrs.get("_activation") == "Relu", qmin=-128, qmax=127)))
        else:
            qmin, qmax = _code_range(node.attrs, q.scale[0], q.zero_point[0])
            nodes.append(Node("VendorRequant", node.name, [total], [y],
                              dict(grid, multiplier=(acc.step / q.scale[0]).tolist(), qmin=qmin, qmax=qmax)))
        keep += [weight, bias, total]
    if not changed:
        return graph, frozenset()
    used = {name for node in nodes for name in node.inputs}
    constants = {k: v for k, v in constants.items() if k in used or k in graph.outputs}
    nodes = fuse_codes(nodes, set(graph.outputs) | set(keep_tensors))
    out = copy.copy(graph)  # a vendor graph's keep_float / round_fp16 stay
    out.nodes, out.constants = nodes, constants
    if real:
        out.quant = {k: v for k, v in graph.quant.items() if k not in real}
    return out, frozenset(keep)


def _accumulator(graph: Graph, node: Node) -> Optional[Accumulator]:
    """The exact accumulator of ``node`` when it is a qualifying int8 conv or dense layer (module
    doc), else None; a Gemm's weight as ``[N, K, 1, 1]``."""
    weight = _weight_oihw(graph, node)
    fused = (None, "Relu") if node.attrs.get("_residual") else (None, "Relu", "Clip")
    if weight is None or node.attrs.get("_activation") not in fused or node.attrs.get("_pool_stage_taps"):
        return None  # a split GlobalAveragePool's stage sums in float32 as the pool would (ops.pool)
    x, w = node.inputs[0], node.inputs[1]
    b = node.inputs[2] if len(node.inputs) >= 3 else ""
    qx, qw, qy = graph.quant.get(x), graph.quant.get(w), graph.quant.get(node.outputs[0])
    if not (_per_tensor_int8(qx) and _per_tensor_int8(qy) and qw is not None and qw.dtype == "int8"):
        return None
    if x in graph.constants or (b and (b not in graph.constants or b in graph.quant)):
        return None
    n_out = weight.shape[0]
    channel_axis = 1 if node.op == "Gemm" and not node.attrs.get("transB", 0) else 0
    if len(qw.scale) not in (1, n_out) or (len(qw.scale) > 1 and (qw.axis or 0) != channel_axis):
        return None
    s_w = np.broadcast_to(np.asarray(qw.scale, np.float64), (n_out,))
    zp_w = np.broadcast_to(np.asarray(qw.zero_point, np.int64), (n_out,))
    # the weight's codes, computed as the executor snaps a constant onto its grid (float32 division)
    ratio = weight.astype(np.float32) / s_w.astype(np.float32).reshape(-1, 1, 1, 1)
    q = np.clip(np.rint(ratio).astype(np.int64) + zp_w.reshape(-1, 1, 1, 1), -128, 127)
    s_x = float(qx.scale[0])
    step = s_x * s_w
    bias_i32 = np.zeros(n_out, np.int64)
    if b:
        bias = np.asarray(graph.constants[b], np.float64)
        if bias.size != n_out or bias.ndim > 2 or (bias.ndim == 2 and node.op == "Conv") \
                or not np.all(np.isfinite(bias)):
            return None
        bias_i32 = np.clip(np.rint(bias.reshape(-1) / step), *_INT32).astype(np.int64)
    # the conv runs on the input's codes q_x - zp_x, so its bias is the real bias's (Accumulator.of
    # takes a vendor bias, which leaves out zp_x * sum(q_w - zp_w))
    return Accumulator(q - zp_w.reshape(-1, 1, 1, 1), bias_i32, s_x, int(qx.zero_point[0]), step)


#: (layer, activation) pairs the vendor fuses, the activation reading the real accumulator:
#: ConvHardSwish, and a dense layer's ConvExGelu (a transformer's MLP: its GELU output equals the
#: simulator's on every value so, 78 % from the layer's int8 output)
_REAL_ACTIVATIONS = {("Conv", "HardSwish"), ("Gemm", "Gelu")}


def _real_hard_swish(graph: Graph, node: Node, readers: Dict[str, List[Node]]) -> bool:
    """Whether qualifying conv ``node``'s HardSwish (a Gemm's Gelu) takes its accumulator in real
    units (module doc): a Conv without groups (a depthwise conv's output keeps its grid), fused
    activation or residual, whose output one node alone reads, an activation of
    :data:`_REAL_ACTIVATIONS` with an int8 per-tensor output.
    Being a graph output does not matter: ``accuracy_analysis`` makes every tensor one, and the
    vendor's snapshot shows such a conv output unquantized too."""
    users = readers.get(node.outputs[0], [])
    if node.attrs.get("_activation") or node.attrs.get("_residual") or len(users) != 1 \
            or (node.op, users[0].op) not in _REAL_ACTIVATIONS or users[0].inputs != node.outputs:
        return False
    return int(node.attrs.get("group", 1)) == 1 and _per_tensor_int8(graph.quant.get(users[0].outputs[0]))


def _weight_oihw(graph: Graph, node: Node) -> Optional[np.ndarray]:
    """The float weight of a Conv (``[O, I/group, kh, kw]``; a 4th input only as its residual)
    or of a plain Gemm (``alpha = beta = 1``, ``transA = 0``; as ``[N, K, 1, 1]``) with a
    constant weight, else None."""
    most = 4 if node.attrs.get("_residual") else 3
    if node.op not in ("Conv", "Gemm") or len(node.outputs) != 1 or not 2 <= len(node.inputs) <= most:
        return None
    weight = graph.constants.get(node.inputs[1])
    if weight is None or weight.dtype.kind != "f":
        return None
    if node.op == "Conv":
        return weight if weight.ndim == 4 else None
    a = node.attrs
    if weight.ndim != 2 or a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        return None
    return (weight if a.get("transB", 0) else weight.T)[:, :, None, None]


def _per_tensor_int8(q) -> bool:
    return q is not None and q.dtype == "int8" and len(q.scale) == 1


def _code_range(attrs, s_out: float, zp_out: int) -> Tuple[int, int]:
    """The int8 codes a fused Relu or Clip (``attrs["_activation"]``) leaves on the output grid."""
    act = attrs.get("_activation")
    if act == "Relu":
        return grid_code(0.0, s_out, zp_out), 127
    if act == "Clip":
        lo, hi = attrs.get("_activation_min"), attrs.get("_activation_max")
        qmin = -128 if lo is None or not math.isfinite(lo) else grid_code(lo, s_out, zp_out)
        qmax = 127 if hi is None or not math.isfinite(hi) else grid_code(hi, s_out, zp_out)
        return qmin, max(qmin, qmax)
    return -128, 127
