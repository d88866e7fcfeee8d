"""A vendor ``exLSTM`` or ``LSTM`` node: RKNN-Toolkit2 2.5.0's LSTM (ONNX's default activations,
no peepholes or projection) as an ONNX ``LSTM`` node.  A forward or bidirectional LSTM compiles to
an ``exLSTM``, a reverse or clipped one to an ``LSTM`` node, whose table holds the clip (slot 4),
the direction, the hidden size and the layouts ``"snc"`` / ``"sdbh"`` only; RKNN-Toolkit2 2.3.2 and
older write an ``LSTM`` without a table, whose direction is nowhere in the file (refused).

Probed on RKNN-Toolkit2 2.5.0's float16 files of the rk35xx and rv1126b (``lstm*`` corpus cases,
silero-vad's decoder):

* inputs: X ``[seq, batch, I]``, W and R, B, ``sequence_lens`` (an empty placeholder, or a
  zero constant of the compiler's), ``initial_h`` and ``initial_c`` (graph tensors, or zero
  constants of the compiler's when the model has none), then the compiler's helpers: a scalar,
  ``dropout`` and ``projB`` rows and a ``proj`` matrix (all zeros: no dropout, no projection),
  a float scratch zone and two views of X;
* W ``[D * 4 * Hp, I]`` and R ``[D * 4 * Hp, H]`` in conv weight tiles, the gates in ONNX's order
  (i, o, f, c), each gate's ``H`` rows padded with zero rows to ``Hp`` (for H = 8: 16 on rk3588,
  rk3576 and rv1126b, 8 on rk3566 and rk3562);
* B float32 ``[D, 8 * Hp]``: per direction ONNX's two biases summed in the first ``4 * Hp`` (each
  gate padded as W's rows), zeros after;
* an exLSTM's parameter table (type 98): batch (slot 3), direction (5), hidden size (6), the input
  and output layouts ``"snc"`` / ``"sbnc"`` (8, 9), the sequence length (11), one activation alpha
  and beta of 0 and an empty activation name (0..2: ONNX's defaults);
* the blob where other nodes keep their BSON is no BSON document (56 bytes: zeros and the
  layouts' names); one that is a document with attributes is refused.

The simulator computes the gates in float from the float16 weights and rounds each output to
float16 (the board's tasks use the file's sigmoid and tanh tables).  In an int8 file (rk3588, rk3566,
rk3562, rk3576 and rv1126b; ``lstm*_i8``, silero-vad's int8 build) it computes the same float LSTM
on the int8 input and states and the weights' dequantized codes, and puts each output on its int8
grid; the weights' scales are in the gate convs' registers alone (:func:`int8_lstm_parameters`).
Other platforms' int8 LSTMs are refused by name.
"""

from __future__ import annotations

import re
from typing import Dict, List, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .f2act import f2_conv_requant, f2_truncation
from .graph import VendorNode, VendorTensor
from .regcmd import (ENABLE_CNA, REG_BS_ALU_CFG, T4_BN_CFG, T4_BS_ALU_DEPTHWISE_PLAIN, T4_BS_MUL,
                     T4_BS_MUL_OBSERVED, T4_CORE_TRUNCATE, T4_OUT_CVT, TARGET_CNA, TARGET_DPU, Requant, conv_bn_shift,
                     core_truncation, requant_of, signed, task_register, task_writes)
from .weights import decode_int8_bias, decode_weight, weight_tiles
from ..graph import Node

__all__ = ["lower_lstm"]

#: the two forms of RKNN-Toolkit2 2.5.0's LSTM node (parameter table type 98 both): the slots its
#: table holds (``optional``: may be absent), its input and output layout names, its directions
_FORMS = {
    "exLSTM": {"slots": {0, 1, 2, 3, 5, 6, 8, 9, 11}, "optional": set(), "layouts": ("snc", "sbnc"),
               "directions": ("forward", "bidirectional")},
    "LSTM": {"slots": {5, 6, 8, 9}, "optional": {4}, "layouts": ("snc", "sdbh"),
             "directions": ("forward", "reverse", "bidirectional")},
}
#: the compiler's scratch inputs of an LSTM node (besides constants of zeros)
_SCRATCH = re.compile(r"_(compute_zone|exSecondary\d*)$")


def lower_lstm(lowering, node: VendorNode) -> None:
    """Lower an ``exLSTM`` or ``LSTM`` node (see the module doc) to ``LSTM``; anything else is
    refused by name."""
    form = _FORMS[node.op]
    if len(node.inputs) < 7 or len(node.outputs) != 3:
        raise lowering.error(f"{node.label} has {len(node.inputs)} inputs and {len(node.outputs)} outputs; an "
                             f"{node.op} has X, W, R, B, sequence_lens, initial_h, initial_c and the compiler's "
                             "helpers, and Y, Y_h, Y_c")
    x, w, r, b, lens, h0, c0 = (lowering.tensor(i, node) for i in node.inputs[:7])
    if (x.dtype, w.dtype) not in (("float16", "float16"), ("int8", "int8")):
        raise lowering.error(f"{node.label}: an {node.op} on {x.dtype} data with {w.dtype} weights; float16 ones "
                             "(an fp16 file's) and int8 ones (an int8 file's) were decoded")
    params = node.params
    if not params:
        raise lowering.error(f"{node.label}: an {node.op} without a parameter table (RKNN-Toolkit2 2.3.2 and older "
                             "write none): its direction, forward or reverse, is nowhere in the file")
    slots, direction = set(params.get("_slots", ())), params.get("direction")
    if not form["slots"] <= slots <= form["slots"] | form["optional"] or direction not in form["directions"]:
        raise lowering.error(f"{node.label}: parameter table {params}; an {node.op} with slots "
                             f"{sorted(form['slots'])} (and {sorted(form['optional']) or 'no other'}), direction "
                             f"{' or '.join(form['directions'])} was decoded")
    if len(x.shape) != 3:
        raise lowering.error(f"{node.label}: input {list(x.shape)} is not [seq, batch, input]")
    seq, batch, size = (int(d) for d in x.shape)
    hidden, dirs = int(params.get("hidden_size", 0)), 2 if direction == "bidirectional" else 1
    expected = {"layouts": form["layouts"]}
    found = {"layouts": (params.get("input_layout"), params.get("output_layout"))}
    if node.op == "exLSTM":  # its table also holds ONNX's activation attributes, the batch and sequence length
        expected.update({"batch": batch, "seq_length": seq, "activation_alpha": (0.0,), "activation_beta": (0.0,),
                         "activations": ("",)})
        found.update({key: params.get(key) for key in expected if key != "layouts"})
    if found != expected or hidden < 1 or params.get("clip", 1.0) <= 0:
        raise lowering.error(f"{node.label}: parameter table {found} (hidden size {hidden}, clip "
                             f"{params.get('clip')}); {expected} were decoded (ONNX's default activations, its "
                             "input's batch and sequence length)")
    stray = _bson_attributes(node)
    if stray:
        raise lowering.error(f"{node.label}: BSON attributes {sorted(stray)}; an {node.op}'s blob was never a BSON "
                             "document (its attributes are its parameter table's)")
    _check_zero(lowering, node, lens, "sequence_lens")
    for t in (lowering.tensor(i, node) for i in node.inputs[7:]):
        if t.is_const:
            _check_zero(lowering, node, t, "helper constant")
        elif not _SCRATCH.search(t.name):
            raise lowering.error(f"{node.label}: input {t.name!r} ({t.kind}) is neither a constant of zeros nor the "
                                 "compiler's scratch zone or input view")
    outputs = [None if i < 0 else lowering.tensor(i, node) for i in node.outputs]
    shapes = ([seq, dirs, batch, hidden], [dirs, batch, hidden], [dirs, batch, hidden])
    for t, shape in zip(outputs, shapes):
        if t is not None and list(t.shape) != shape:
            raise lowering.error(f"{node.label}: output {t.name!r} is {list(t.shape)}, an LSTM's of hidden size "
                                 f"{hidden} is {shape}")
    states = [_state(lowering, node, t, [dirs, batch, hidden], what) for t, what in ((h0, "initial_h"),
                                                                                    (c0, "initial_c"))]
    if w.dtype == "int8":
        weights, recurrent, bias = int8_lstm_parameters(lowering, node, (x, w, r, b, h0), dirs, hidden)
    else:
        weights, padded = _gate_rows(lowering, node, w, dirs, hidden, size, "W")
        recurrent, _ = _gate_rows(lowering, node, r, dirs, hidden, hidden, "R")
        bias = _bias(lowering, node, b, dirs, hidden, padded)
    name = node.name or f"{node.op}#{node.index}"
    prefix = lowering.names[w.index]
    inputs = [lowering.names[x.index], lowering.constant(f"{prefix}/W", weights),
              lowering.constant(f"{prefix}/R", recurrent), lowering.constant(f"{prefix}/B", bias), ""] + states
    names = [f"{name}/unread_Y" if t is None else lowering.names[t.index] for t in outputs]
    attrs = {"hidden_size": hidden, "direction": direction}
    if "clip" in params:
        attrs["clip"] = float(params["clip"])
    lowering.nodes.append(Node("LSTM", name, inputs, names, attrs))


def _bson_attributes(node: VendorNode) -> dict:
    """The node's BSON attributes, ``{}`` for its usual blob, which is no BSON document."""
    try:
        return node.attrs
    except ModelInvalidError:
        return {}


def _check_zero(lowering, node: VendorNode, t: VendorTensor, what: str) -> None:
    """A helper constant of the compiler's that must hold zeros (an empty placeholder too)."""
    if not t.is_const:
        raise lowering.error(f"{node.label}: its {what} is a {t.kind} tensor {t.name!r}; a constant of zeros was "
                             "decoded")
    if any(bytes(lowering.vf.tensor_data(lowering.sg, t))):
        raise lowering.error(f"{node.label}: its {what} {t.name!r} is not all zeros (a dropout, projection or "
                             "sequence lengths were never observed)")


def _gate_rows(lowering, node: VendorNode, t: VendorTensor, dirs: int, hidden: int, cols: int,
               what: str) -> Tuple[np.ndarray, int]:
    """W or R as ONNX holds them, ``[D, 4H, cols]`` float32, from the tiles' padded gate rows, and
    the rows each gate is padded to."""
    full, padded = gate_tiles(lowering, node, t, dirs, hidden, cols, what)
    return np.ascontiguousarray(full[:, :, :hidden].astype(np.float32).reshape(dirs, 4 * hidden, cols)), padded


def gate_tiles(lowering, node: VendorNode, t: VendorTensor, dirs: int, hidden: int, cols: int,
               what: str) -> Tuple[np.ndarray, int]:
    """W or R in the tensor's own dtype (float16, or int8 codes), ``[D, 4, padded, cols]``: each
    gate's ``hidden`` rows padded with zero rows to ``padded`` (checked), and ``padded``."""
    rows = sum(tile[0] * tile[4] for tile in weight_tiles(t.npu_shape)) if t.npu_shape else 0
    padded, extra = divmod(rows, 4 * dirs)
    if extra or padded < hidden:
        raise lowering.error(f"{node.label}: {what} {t.name!r} has {rows} rows in its tiles {list(t.npu_shape)}; "
                             f"{dirs} x 4 gates of at least {hidden} were expected")
    where = f"{lowering.label}: {node.label} {what}"
    full = decode_weight(lowering.vf.tensor_data(lowering.sg, t), t.npu_shape, (rows, cols, 1, 1), t.dtype,
                         where, t.size).reshape(dirs, 4, padded, cols)
    if np.any(full[:, :, hidden:]):
        raise lowering.error(f"{node.label}: {what} {t.name!r} holds values in the rows padding each gate's "
                             f"{hidden} to {padded}")
    return full, padded


def _bias(lowering, node: VendorNode, t: VendorTensor, dirs: int, hidden: int, padded: int) -> np.ndarray:
    """ONNX's B ``[D, 8H]`` from the file's ``[D, 8 * padded]``: the two biases summed per gate
    (``padded`` values each), zeros after; as ONNX's Wb, with Rb 0."""
    raw = lowering.vf.tensor_data(lowering.sg, t)
    count = dirs * 8 * padded
    if t.dtype != "float32" or len(raw) != 4 * count:
        raise lowering.error(f"{node.label}: bias {t.name!r} ({t.dtype}, {len(raw)} bytes) is not {count} float32 "
                             f"values ({dirs} x 8 x {padded})")
    stored = np.frombuffer(raw, "<f4", count).reshape(dirs, 2, 4, padded)
    if np.any(stored[:, 1]) or np.any(stored[:, 0, :, hidden:]):
        raise lowering.error(f"{node.label}: bias {t.name!r} holds values past each gate's {hidden} summed biases")
    bias = np.zeros((dirs, 8 * hidden), np.float32)
    bias[:, :4 * hidden] = stored[:, 0, :, :hidden].reshape(dirs, 4 * hidden)
    return bias


def _state(lowering, node: VendorNode, t: VendorTensor, shape: List[int], what: str) -> str:
    """The name of an initial state, or ``""`` (ONNX: zeros) for the compiler's zero constant."""
    if t.is_const:
        _check_zero(lowering, node, t, what)
        return ""
    if list(t.shape) != shape:
        raise lowering.error(f"{node.label}: {what} {t.name!r} is {list(t.shape)}, expected {shape}")
    return lowering.names[t.index]


#: the platforms whose int8 exLSTM gate convs were read, and the channels of their bias blocks (the
#: input zero point each gate conv pads with is where the platform's convs hold it:
#: :meth:`.deconv_regs.DeconvEncoding.zero_point_field`)
_INT8_BIAS_BLOCK = {"rk3588": 8, "rk3566": 4, "rk3568": 4, "rk3562": 4, "rk3576": 8, "rv1126b": 8}
#: the grid of a zero initial state the compiler makes up (a tensor without a scale): its gate conv's
#: multiplier gives R's scale with 1/127 per step, zero point 0 (RKNN-Toolkit2 2.5.0, lstm_bidir_i8)
_MADE_UP_STATE_GRID = (1 / 127, 0)
#: the grid the gate convs scale their accumulators to (Q15: 2^-15 per step), which an int8 scratch zone
#: states as its scale (the small corpus LSTMs) and a float32 one (silero-vad's, hidden size 128) does not
_GATE_GRID = 2.0 ** -15
#: the compiler's scratch zone of an int8 exLSTM
_ZONE = re.compile(r"_compute_zone$")


def int8_lstm_parameters(lowering, node: VendorNode, tensors: Tuple[VendorTensor, ...], dirs: int,
                         hidden: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX's W ``[D, 4H, I]``, R ``[D, 4H, H]`` and B ``[D, 8H]`` (float32) of an int8 exLSTM,
    as RKNN-Toolkit2's simulator computes it: a float LSTM on the weights' dequantized codes.

    rk3588, rk3566, rk3562, rk3576 and rv1126b files of RKNN-Toolkit2 2.5.0 (``lstm*_i8`` corpus
    cases, silero-vad's decoder; bit-exact but at float ties on the simulator's own inputs; each
    platform's gate convs in its own register map, :func:`_gate_convs`): W and R hold asymmetric
    per-row int8 codes in conv tiles (each gate padded as in float16 files); the bias tensor
    holds, per direction, W's and then R's per-channel bias blocks (int32 bias, the weights' zero
    points, multipliers ``round(2^14 * s[row] / max s)``).  No tensor stores the weights' scales:
    the node's first CNA task with bias blocks is W's gate conv (its input x, padded with x's zero
    point) and the next with another output multiplier R's (on the initial state), each scaling its
    accumulator to a grid of 2^-15 per step, so ``max s = OUT_CVT_SCALE / 2^OUT_CVT_SHIFT * 2^-15 /
    s_input``.  A stored bias is ``round(b / (s_in * s[row])) - z_in * sum(code - z[row])``.
    Refused on other platforms (their register maps were not read for this node), and wherever
    the tasks, blocks or grids differ from that form, naming what differs.
    """
    x, w, r, b, h0 = tensors
    platform = lowering.platform()
    if platform not in _INT8_BIAS_BLOCK:
        raise lowering.error(f"{node.label}: an int8 {node.op} on {platform}: its weights' scales are read from the "
                             f"gate convs' registers, decoded for {', '.join(_INT8_BIAS_BLOCK)} only")
    if r.dtype != "int8" or b.dtype != "int32":
        raise lowering.error(f"{node.label}: an int8 {node.op} with {r.dtype} R and {b.dtype} B; int8 R and int32 "
                             "bias blocks were decoded")
    zones = [t for t in (lowering.tensor(i, node) for i in node.inputs[7:]) if _ZONE.search(t.name)]
    if len(zones) != 1 or list(zones[0].scale) not in ([], [_GATE_GRID]):
        raise lowering.error(f"{node.label}: an int8 {node.op} with scratch zones "
                             f"{[(t.name, list(t.scale)) for t in zones]}; one, of scale 2^-15 (its gate convs' "
                             "output grid) or none, was decoded")
    x_grid = _grid(lowering, node, x, "input X")
    h_grid = _MADE_UP_STATE_GRID if h0.is_const and not h0.scale else _grid(lowering, node, h0, "initial_h")
    codes = [gate_tiles(lowering, node, t, dirs, hidden, cols, what)
             for t, cols, what in ((w, int(x.shape[2]), "W"), (r, hidden, "R"))]
    padded = codes[0][1]
    if codes[1][1] != padded:
        raise lowering.error(f"{node.label}: W's gates are padded to {padded} rows, R's to {codes[1][1]}")
    blocks = _bias_blocks(lowering, node, b, dirs, hidden, padded, _INT8_BIAS_BLOCK[platform])
    params = []
    for side, ((code, _), (s_in, z_in), conv) in enumerate(zip(codes, (x_grid, h_grid),
                                                                 _gate_convs(lowering, node, x_grid, h_grid))):
        bias, zp, mul = (a[:, side] for a in blocks)  # [D, 4, padded] each
        if mul.max() != 1 << conv.mul_shift:
            raise lowering.error(f"{node.label}: {'WR'[side]}'s largest bias-block multiplier is {mul.max()}, not "
                                 f"2^{conv.mul_shift}: the multipliers are not normalised to the largest scale")
        scale = conv.scale / 2.0 ** conv.shift * _GATE_GRID / s_in * mul / 2.0 ** conv.mul_shift
        centred = code.astype(np.int64) - zp[..., None]
        weight = (centred * scale[..., None])[:, :, :hidden]
        folded = ((bias + z_in * centred.sum(-1)) * s_in * scale)[:, :, :hidden]
        params.append((weight.reshape(dirs, 4 * hidden, -1).astype(np.float32),
                       folded.reshape(dirs, 4 * hidden).astype(np.float32)))
    (weights, w_bias), (recurrent, r_bias) = params
    return weights, recurrent, np.concatenate([w_bias, r_bias], axis=1)


def _grid(lowering, node: VendorNode, t: VendorTensor, what: str) -> Tuple[float, int]:
    """``(scale, zero point)`` of an int8 activation of one grid."""
    if t.dtype != "int8" or len(t.scale) != 1 or len(t.zero_point) != 1:
        raise lowering.error(f"{node.label}: its {what} {t.name!r} is {t.dtype} with {len(t.scale)} scales; one int8 "
                             "grid was expected")
    return float(t.scale[0]), int(t.zero_point[0])


def _bias_blocks(lowering, node: VendorNode, t: VendorTensor, dirs: int, hidden: int, padded: int,
                 per_block: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(bias, zero point, multiplier)``, int64 ``[D, 2 (W, R), 4, padded]`` each, from the
    per-direction W and R bias blocks (the padding rows' blocks hold zeros, checked)."""
    raw = lowering.vf.tensor_data(lowering.sg, t)
    rows = 4 * padded
    need = dirs * 2 * rows * 8
    if len(raw) != need:
        raise lowering.error(f"{node.label}: bias {t.name!r} has {len(raw)} bytes; {dirs} direction(s) of W and R "
                             f"bias blocks for {rows} rows need {need}")
    where = f"{lowering.label}: {node.label} bias"
    parts = [decode_int8_bias(raw[k * rows * 8:(k + 1) * rows * 8], rows, where, per_block) for k in range(2 * dirs)]
    arrays = tuple(np.stack([p[i] for p in parts]).reshape(dirs, 2, 4, padded) for i in range(3))
    if any(np.any(a[..., hidden:]) for a in arrays):
        raise lowering.error(f"{node.label}: bias {t.name!r} holds values in the blocks of the rows padding each "
                             f"gate's {hidden} to {padded}")
    return arrays


def _gate_convs(lowering, node: VendorNode, x_grid: Tuple[float, int], h_grid: Tuple[float, int]) -> List[Requant]:
    """The output conversions of W's and R's gate convs: the node's first CNA task with per-channel
    bias blocks and the first after it with another multiplier; each must pad its input with that
    input's zero point.  The registers are read as the node's tasks leave them, each platform's
    conv map: rk3588's (:func:`.regcmd.requant_of`), rk3562's (:func:`_t4_gate_conv`), rk3576's
    (:func:`.f2act.f2_conv_requant`)."""
    where = f"{lowering.label}: {node.label}"
    address, bit, width = lowering.deconv_encoding().zero_point_field()
    found: List[Tuple[Requant, int]] = []
    regs: Dict[Tuple[int, int], int] = {}  # as the node's tasks leave them (rk3566's do not write each again)
    for task in lowering.tasks():
        if task.op_idx != node.index:
            continue
        regs.update(((target, reg), value) for target, reg, value in task_writes(lowering.regcmd(), task, where))
        if not task.enable_mask & ENABLE_CNA:
            continue
        if lowering.t4_platform():
            conv = _t4_gate_conv(regs, where)
        elif lowering.f2_platform():
            conv = f2_conv_requant(regs, where, None, plain=True)
            f2_truncation(regs, where, "LSTM gate")  # refuses a truncated accumulator: never seen here
        else:
            conv = requant_of(regs, where)
            conv_bn_shift(regs, where, None)  # refuses a BN stage that is not bypassed: never seen here
        if not conv.bias_blocks:  # R's first gate on rk3562, rk3576, rv1126b: a plain-bias form, R's multiplier
            continue
        if not found or (conv.scale, conv.shift) != (found[0][0].scale, found[0][0].shift):
            pad = task_register(regs, TARGET_CNA, address, where) >> bit
            found.append((conv, signed(pad & ((1 << width) - 1), width)))
        if len(found) == 2:
            break
    if len(found) != 2:
        raise lowering.error(f"{node.label}: {len(found)} gate conv multiplier(s) among its CNA tasks; W's and R's "
                             "(two) were expected")
    for (conv, pad), (what, (_, zero)) in zip(found, (("W (on X)", x_grid), ("R (on the state)", h_grid))):
        if pad != zero or conv.offset:
            raise lowering.error(f"{node.label}: {what}'s gate conv pads with {pad}, output offset {conv.offset}; its "
                                 f"input's zero point {zero} and offset 0 were decoded")
    return [conv for conv, _ in found]


#: rk3562's gate convs: ``(BS_ALU_CFG 0x4050, 0x4054)`` as observed (per-channel bias blocks with the
#: multipliers' shift of 14; R's first gate the plain-bias depthwise form, bit 31 clear, passed over)
_T4_GATE_CONVS = ((0x36D, T4_BS_MUL_OBSERVED), (T4_BS_ALU_DEPTHWISE_PLAIN, 0))
#: their BN_CFG: the stage bypassed, as a plain conv's (a residual conv of tiny steps shifts there)
_T4_GATE_BN_CFG = 0x13


def _t4_gate_conv(regs: Dict[Tuple[int, int], int], where: str) -> Requant:
    """An rk3562 gate conv's output conversion: OUT_CVT's scale and shift at 0x40b0/0x40b4 (no
    offset written), the bias blocks' multipliers over 2^14; the DPU words of :data:`_T4_GATE_CONVS`
    only (the LSTM corpus files', checked against the simulator), anything else refused by name."""
    words = tuple(task_register(regs, TARGET_DPU, address, where) for address in (REG_BS_ALU_CFG, T4_BS_MUL))
    scale, shift = (task_register(regs, TARGET_DPU, address, where) for address in T4_OUT_CVT[1:])
    offset = regs.get((TARGET_DPU, T4_OUT_CVT[0]), 0)
    bn_cfg = task_register(regs, TARGET_DPU, T4_BN_CFG, where)  # the BN stage bypassed: no shift before OUT_CVT
    if words not in _T4_GATE_CONVS or bn_cfg != _T4_GATE_BN_CFG or scale >> 16 or shift >> 6 or offset:
        decoded = " or ".join(f"{a:#x}, {b:#x}" for a, b in _T4_GATE_CONVS)
        raise ModelInvalidError(f"{where}: an rk3562 exLSTM gate conv with BS_ALU_CFG, 0x4054 "
                                f"{', '.join(hex(w) for w in words)}, BN_CFG {bn_cfg:#x}, OUT_CVT {scale:#x} >> "
                                f"{shift:#x}, offset {offset:#x}; {decoded} with BN_CFG {_T4_GATE_BN_CFG:#x}, a 16-bit "
                                "scale, a 6-bit shift and offset 0 (or none) were decoded", op="load")
    core_truncation(regs, where, address=T4_CORE_TRUNCATE)  # refuses a truncated gate conv: never seen
    blocks = words[0] != T4_BS_ALU_DEPTHWISE_PLAIN
    return Requant(scale, shift, (T4_BS_MUL_OBSERVED >> 16) & 0x3F if blocks else None, 0, blocks, 0)
