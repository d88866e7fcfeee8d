"""The vendor op types of transformers: exNorm (LayerNorm), exMatMul, exGelu and Gather, and
the int8 grids of an exSDPAttention (:func:`attention_grids`).

Each ``lower_*`` function emits the executor nodes of one vendor node on ``lowering`` (lower.py's
``_Lowering``), as :mod:`.lut` does for the lookup-table activations; the lowering table in
:mod:`.lower` lists what each becomes.  Fields the decoding has not seen raise
:class:`~rknnlite.errors.ModelInvalidError` naming them.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from .accumulator import emit_codes
from .f2act import F2_ACT_CFG, F2_OUT_CVT, F2_TRUNCATE, cfg_words, f2_truncation
from .graph import VendorNode, VendorTensor, attr_value
from ..spec import QuantParams
from .regcmd import (BN_MUL, T3_CORE_TRUNCATE, T4_CORE_TRUNCATE, TARGET_CNA, TARGET_CORE, TARGET_DPU, bn_multiplier,
                     core_truncation, i16, i32, task_writes)
from .t3conv import t3_alu_operand

__all__ = ["attention_grids", "float_values", "lower_gather", "lower_gelu", "lower_layer_norm", "lower_matmul"]

_ACTIVATION_KINDS = ("input", "output", "activation")
#: CNA registers of an int8 exMatMul's input conversion (``CVT_CON0``, then ``CVT_CON1..4``)
_REG_CNA_CVT_CON0 = 0x104C
_REG_CNA_CVT_SCALES = (0x1050, 0x1054, 0x1058, 0x105C)


def lower_layer_norm(lowering, node: VendorNode) -> None:
    """exNorm with mode ``layer``: the compiler's LayerNorm (from an opset-13 ReduceMean/Sub/
    Pow/Sqrt/Div/Mul/Add chain or an opset-17 LayerNormalization) over axis 1 of (N, C, 1, T)
    tokens-last tensors.  Its constant inputs: the scale (float16) and bias (float32) as
    stored (both rounded to fp16, as the simulator does; absent when they are the identity),
    and the NPU's reduce-mean weights ``<node>_rm_fp16_weight`` (float16) and
    ``<node>_rm_bf16_weight`` (bfloat16), vectors of ones that must be so.  Float32 inside,
    the output rounded (fp16 files) or requantized (int8 files, where the simulator puts the
    scale and bias on the int8 grids of their own scale and zero point first)."""
    (data,) = lowering.activation_inputs(node, 1, 1)
    x, out = lowering.tensor(node.inputs[0], node), lowering.single_output(node)
    quantized = lowering.int8 and x.dtype == out.dtype == "int8"
    if not quantized:
        lowering.float16_only(node, (x, out), "LayerNorm")
    p = node.params
    # RKNN-Toolkit2 2.2.0 leaves the table's axes empty; its BSON holds them, as later releases' do
    axes = p.get("axes") or attr_value(node, "axes")
    if node.param_type != 87 or p.get("mode") != "layer" or axes != [1] or attr_value(node, "axes", axes) != axes:
        raise lowering.error(f"{node.label}: parameter table {p} (type {node.param_type}), BSON axes "
                             f"{attr_value(node, 'axes')}; only mode 'layer' over axes [1] (a norm table, 87) was "
                             "decoded")
    eps = p["eps"]
    if not (np.isfinite(eps) and eps > 0):
        raise lowering.error(f"{node.label}: parameter eps is {eps!r}; a positive float was expected")
    shape = list(x.shape)
    if len(shape) != 4 or shape[2] != 1 or list(out.shape) != shape:
        raise lowering.error(f"{node.label}: input {shape} -> output {list(out.shape)}; (N, C, 1, T) in and out "
                         "was expected")
    channels = shape[1]
    consts = [lowering.tensor(i, node) for i in node.inputs[1:] if lowering.tensor(i, node).kind not in _ACTIVATION_KINDS]
    helpers = [t for t in consts if re.search(r"_rm_(fp16|bf16)_weight$", t.name)]
    for t in helpers:
        _ones_weight(lowering, node, t, channels)
    affine = [t for t in consts if t not in helpers]
    if not affine:
        gamma, beta = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    elif (len(affine) == 2 and [t.dtype for t in affine] == ["float16", "float32"]
          and all(int(np.prod(t.shape)) == channels for t in affine)):
        gamma, beta = (float_values(lowering, node, t, channels) for t in affine)
        if quantized:  # the simulator puts them on the int8 grids the file gives them
            _note_ambiguous_scale(lowering, node, affine[0], gamma)
            gamma, beta = (_fake_quantized(lowering, node, t, v) for t, v in zip(affine, (gamma, beta)))
    else:
        raise lowering.error(f"{node.label}: constant inputs {[(t.name, t.dtype, list(t.shape)) for t in affine]}; a "
                         f"float16 scale and a float32 bias of {channels} values (or neither) were expected")
    base = lowering.names[out.index]
    step = lowering.float_steps(node, base)
    last = step("Transpose", [data], {"perm": [0, 2, 3, 1]}, "nhwc")
    normed = step("LayerNormalization", [last, lowering.constant(f"{base}__scale", gamma),
                                         lowering.constant(f"{base}__bias", beta)],
                  {"axis": -1, "epsilon": float(eps)}, "normed")
    lowering.emit(node, "Transpose", [normed], {"perm": [0, 3, 1, 2]})


def _fake_quantized(lowering, node: VendorNode, t: VendorTensor, values: np.ndarray) -> np.ndarray:
    """``values`` of constant ``t`` put on the int8 grid of its own scale and zero point."""
    if len(t.scale) != 1 or len(t.zero_point) != 1 or not t.scale[0] > 0 or not -128 <= t.zero_point[0] <= 127:
        raise lowering.error(f"{node.label}: constant {t.name!r} of an int8 file has scale {list(t.scale)} and zero "
                         f"point {list(t.zero_point)}; one positive scale and one int8 zero point were expected")
    s, zp = float(t.scale[0]), int(t.zero_point[0])
    codes = np.clip(np.rint(values.astype(np.float64) / s) + zp, -128, 127)
    return ((codes - zp) * s).astype(np.float32)


def ambiguous_grid_codes(stored: np.ndarray, scale: float) -> np.ndarray:
    """Indices of the float16 values ``stored`` whose code on an int8 grid of step ``scale`` is
    not told by the float16 value: a tie of the grid lies within half a float16 step of it, so
    the float32 value it was rounded from may round to either neighbouring code."""
    values = np.asarray(stored, np.float16)
    half = np.abs(np.spacing(values)).astype(np.float64) / 2
    low, high = ((values.astype(np.float64) + sign * half) / scale for sign in (-1, 1))
    return np.nonzero(np.rint(low) != np.rint(high))[0]


def _note_ambiguous_scale(lowering, node: VendorNode, t: VendorTensor, stored: np.ndarray) -> None:
    """Note (:attr:`.lower.VendorModel.notes`) the channels of an int8 LayerNorm's float16 scale
    ``t`` (its values ``stored``) whose int8 code the file does not tell: the simulator puts the
    ONNX model's float32 scale on the grid (token graph 300 of 2.5.0: every code then equal), the
    lowering the float16 value's code, the likelier one; their outputs may be one step apart."""
    channels = ambiguous_grid_codes(stored, float(t.scale[0]))
    if channels.size:
        lowering.note(f"{node.label}: int8 LayerNorm scale {t.name!r}: channels {channels.tolist()} of "
                      f"{stored.size} are stored in float16 within half a float16 step of a tie of their int8 "
                      f"grid (step {float(t.scale[0]):.6g}); the vendor simulator puts the ONNX model's float32 "
                      "values, which the file does not hold, on that grid, so these channels' outputs may be one "
                      "step from its")


def float_values(lowering, node: VendorNode, t: VendorTensor, count: int) -> np.ndarray:
    """The ``count`` float16/float32/bfloat16 values of constant ``t`` as float32."""
    raw = lowering.vf.tensor_data(lowering.sg, t)
    size = 4 if t.dtype == "float32" else 2
    if t.dtype not in ("float16", "float32", "bfloat16") or len(raw) < size * count:
        raise lowering.error(f"{node.label}: constant {t.name!r} ({t.dtype}, {len(raw)} bytes) does not hold {count} "
                         "float values")
    if t.dtype == "bfloat16":  # the upper half of a float32
        return (np.frombuffer(raw, "<u2", count).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, "<f4" if size == 4 else "<f2", count).astype(np.float32)


def _ones_weight(lowering, node: VendorNode, t: VendorTensor, count: int) -> None:
    """Check an exNorm's reduce-mean weight ``t``: ``count`` ones (float16, or bfloat16 for
    ``*_rm_bf16_weight``)."""
    expected = "bfloat16" if t.name.endswith("_rm_bf16_weight") else "float16"
    if t.dtype != expected or t.kind != "generated" or int(np.prod(t.shape)) != count:
        raise lowering.error(f"{node.label}: reduce-mean weight {t.name!r} is a {t.dtype} {t.kind} tensor of shape "
                         f"{list(t.shape)}; {count} {expected} values were expected")
    values = float_values(lowering, node, t, count)
    if not np.all(values == 1):
        raise lowering.error(f"{node.label}: reduce-mean weight {t.name!r} holds {values.tolist()}; only ones "
                         "(a plain mean) were observed")


def lower_matmul(lowering, node: VendorNode) -> None:
    """exMatMul, the compiler's MatMul of two activations: ``a`` (H, K, 1, M) and ``b`` (H, K,
    1, N) -> (H, M, 1, N), ``out[h, m, 0, n] = sum_k a[h, k, 0, m] b[h, k, 0, n]`` (the
    Transposes around it bring the ONNX operands there).  fp16 files: float32 inside, the
    output rounded; int8 files: the NPU's integer pipeline (:meth:`int8_matmul_operands`)."""
    a, b = lowering.activation_inputs(node, 2, 2)
    ta, tb = (lowering.tensor(i, node) for i in node.inputs[:2])
    out = lowering.single_output(node)
    quantized = lowering.int8 and ta.dtype == tb.dtype == out.dtype == "int8"
    if not quantized:
        lowering.float16_only(node, (ta, tb, out), "MatMul of two activations")
    sa, sb, so = list(ta.shape), list(tb.shape), list(out.shape)
    if (len(sa) != 4 or len(sb) != 4 or sa[2] != 1 or sb[2] != 1 or sa[:2] != sb[:2]
            or so != [sa[0], sa[3], 1, sb[3]]):
        raise lowering.error(f"{node.label}: operands {sa}, {sb} -> {so}; (H, K, 1, M), (H, K, 1, N) -> (H, M, 1, N) "
                         "was expected")
    step = lowering.float_steps(node, lowering.names[out.index])
    factor = _matmul_factor(lowering, node)
    if quantized:
        a, b, unit, factor = _int8_matmul_operands(lowering, node, ta, tb, out, a, b, step, factor)
    product = step("MatMul", [step("Transpose", [a], {"perm": [0, 2, 3, 1]}, "a_t"),
                              step("Transpose", [b], {"perm": [0, 2, 1, 3]}, "b_t")], {}, "product")
    if factor is not None:  # in float32, before the rounding to the output's float16 or int8 grid
        product = step("Mul", [product, lowering.constant(f"{lowering.names[out.index]}__factor",
                                                          np.array(factor, np.float32), keep_float=True)], {},
                       "factored")
    if quantized:  # the accumulator in real units; the executor requantizes it to the output's grid
        product = step("Mul", [product, lowering.constant(f"{lowering.names[out.index]}__unit", np.array(unit, np.float32),
                                                      keep_float=True)], {}, "scaled")
    lowering.emit(node, "Transpose", [product], {"perm": [0, 2, 1, 3]})


def _matmul_factor(lowering, node: VendorNode) -> Optional[float]:
    """The constant an exMatMul multiplies its product by (BSON ``c_type`` = ``"mul"`` and a
    float32 scalar input: an attention's ``1/sqrt(d)`` that the compiler fused, e.g. on rk3566,
    which has no exSDPAttention), or ``None``.  A positive finite factor: fp16 files multiply the
    float32 product by it before the rounding; int8 files by the conv task's 16-bit BN multiplier,
    which rounds it (:func:`_int8_matmul_operands`).  Powers of two and 1/sqrt(24) were checked
    against the simulator (corpus ``matmul_scaled``, ``scores_dh24``, ``encoder_layer_dh24_rk3566``);
    any other ``c_type`` is refused by name."""
    c_type = attr_value(node, "c_type")
    if c_type is None:
        return None
    constants = [t for t in (lowering.tensor(i, node) for i in node.inputs[2:]) if t.kind in ("const", "shape")]
    if c_type != "mul" or len(constants) != 1 or constants[0].dtype != "float32" or \
            int(np.prod(constants[0].shape)) != 1:
        raise lowering.error(f"{node.label}: c_type {c_type!r} with constant inputs "
                             f"{[(t.name, t.dtype, list(t.shape)) for t in constants]}; only 'mul' by one float32 "
                             "scalar was decoded")
    factor = float(np.frombuffer(bytes(lowering.vf.tensor_data(lowering.sg, constants[0]))[:4], "<f4")[0])
    if not (factor > 0 and np.isfinite(factor)):
        raise lowering.error(f"{node.label}: an exMatMul multiplied by {factor!r}; only positive finite factors "
                             "were checked against the simulator")
    return factor


def _int8_matmul_operands(lowering, node: VendorNode, ta: VendorTensor, tb: VendorTensor, out: VendorTensor,
                         a: str, b: str, step, factor: Optional[float]) -> Tuple[str, str, float, Optional[float]]:
    """An int8 exMatMul as the NPU runs it: a conv whose weight is ``a`` (its zero point in
    BS_ALU_SRC) and whose data is ``b``, converted on input by the CNA (``CVT_CON0`` 0x104c:
    shift ``t`` in its four 6-bit truncate fields, low bits 0xa; ``CVT_CON1..4``
    0x1050-0x105c, all equal: scale in bits 16..31, offset in bits 0..15, the negated zero point
    of ``b``) to ``b' = floor(((q_b - zp_b) * scale + 2^(t-1)) / 2^t)``, then
    ``y = round(sum (q_a - zp_a) * b' * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT) + OUT_CVT_OFFSET``.
    rk3566's attention (two exMatMuls, no exSDPAttention): the CNA takes ``b'`` as it is
    (``CVT_CON0`` 0xa, ``CVT_CON1`` 0x10000) from DPU-only tasks before it that convert ``b``
    the same way (:func:`_dpu_conversion`: the scores' q, and the probabilities, whose codes
    -128..127 become 0..127), and with a fused ``factor`` (:func:`_matmul_factor`) the conv
    task's BN stage (``BN_CFG`` 0x4060 = 0x42) multiplies by it (0x4068: rk3588's attention's
    form).
    Returns the names of the integer operands, the real value of one accumulator step and the
    fused factor as the BN register holds it (``None`` without one)."""
    where = f"{lowering.label}: {node.label}"
    states = _task_states(lowering, node, where)
    if not states:
        raise lowering.error(f"{node.label}: no NPU task with the CNA enabled runs it")
    # the conv task's registers as its node's tasks left them: the compiler does not write again a value
    # the node's DPU-only tasks wrote before it (BS_ALU_SRC and OUT_CVT offset 0: random token graph 310)
    regs = states[0][1]
    core_truncation(regs, where)  # refuses a truncated accumulator: never seen here

    def reg(target: int, address: int, name: str) -> int:
        value = regs.get((target, address))
        if value is None:
            raise lowering.error(f"{node.label}: neither its conv task nor its tasks before it write {name} "
                                 f"({address:#x})")
        return value

    con0 = reg(TARGET_CNA, _REG_CNA_CVT_CON0, "CNA_CVT_CON0")
    truncates = {(con0 >> shift) & 0x3F for shift in (4, 10, 16, 22)}
    if con0 & 0xF != 0xA or con0 >> 28 or len(truncates) != 1:
        raise lowering.error(f"{node.label}: CNA_CVT_CON0 (0x104c) = {con0:#x}; the observed layout is four equal "
                         "6-bit truncate shifts in bits 4..27 over the low bits 0xa (a signed, converted input)")
    (shift,) = truncates
    cons = {reg(TARGET_CNA, address, f"CNA_CVT_CON{k + 1}") for k, address in enumerate(_REG_CNA_CVT_SCALES)}
    if len(cons) != 1:
        raise lowering.error(f"{node.label}: CNA_CVT_CON1..4 (0x1050-0x105c) differ ({sorted(hex(v) for v in cons)}); "
                         "one scale and offset for all four were observed")
    (con,) = cons
    scale, offset = con >> 16, i16(con & 0xFFFF)
    if (shift, scale, offset) == (0, 1, 0):  # b converted before, by DPU-only tasks (rk3566)
        scale, shift, offset = _dpu_conversion(lowering, node, where)
    qa, qb, qo = (lowering.activation_quant(t) for t in (ta, tb, out))
    if offset != -qb.zero_point[0] or scale == 0 or shift == 0:
        raise lowering.error(f"{node.label}: CNA_CVT_CON1 (0x1050) = {con:#x} (scale {scale}, offset {offset}) with "
                         f"shift {shift}; the offset must undo the zero point {qb.zero_point[0]} of {tb.name!r} "
                         "and the scale and shift be set")
    alu_cfg = reg(TARGET_DPU, 0x4050, "BS_ALU_CFG")
    weight_zp = -i16(reg(TARGET_DPU, 0x4054, "BS_ALU_SRC") & 0xFFFF)
    if alu_cfg & 1 or weight_zp != qa.zero_point[0]:
        raise lowering.error(f"{node.label}: BS_ALU_CFG (0x4050) = {alu_cfg:#x} and BS_ALU_SRC (0x4054) give weight zero "
                         f"point {weight_zp}; a plain layer zero point equal to {ta.name!r}'s "
                         f"({qa.zero_point[0]}) was expected")
    own = states[0][0]  # the BN stage: the conv task's own writes, as observed
    bn = {address: own[(TARGET_DPU, address)] for address in (0x4060, 0x4064, BN_MUL)
          if (TARGET_DPU, address) in own}
    multiplier = bn_multiplier(bn.get(BN_MUL))
    if factor is not None and sorted(bn) == [0x4060, BN_MUL] and bn[0x4060] == 0x42 and multiplier is not None \
            and abs(multiplier[0] / float(1 << multiplier[1]) - factor) <= factor * 2.0 ** -15:
        # the fused factor as the register rounds it to 16 bits (exact for a power of two), applied with
        # the product (lower_matmul)
        factor = multiplier[0] / float(1 << multiplier[1])
    elif bn:  # an int8 attention's scores conv multiplies there (by its scale)
        raise lowering.error(f"{node.label}: its conv task writes the BN stage ("
                         f"{', '.join(f'{a:#x} = {v:#x}' for a, v in sorted(bn.items()))}), the multiplier of "
                         f"no fused factor ({factor!r}: BN_CFG 0x42 and 0x4068 = its 16-bit scale << 16 | 0x1000 "
                         "| s << 8 were observed); its arithmetic there was not decoded")
    elif factor is not None:
        raise lowering.error(f"{node.label}: a fused factor {factor!r} without the conv task's BN multiplier; "
                             "only the BN stage's form was observed")
    offset_out = i32(reg(TARGET_DPU, 0x4080, "OUT_CVT_OFFSET"))
    out_scale = reg(TARGET_DPU, 0x4084, "OUT_CVT_SCALE")
    out_shift = reg(TARGET_DPU, 0x4088, "OUT_CVT_SHIFT")
    if offset_out != qo.zero_point[0] or out_scale & ~0xFFFF or out_shift & ~0x3F:
        raise lowering.error(f"{node.label}: OUT_CVT offset {offset_out}, scale {out_scale:#x}, shift {out_shift:#x}; "
                         f"the output's zero point {qo.zero_point[0]}, a 16-bit scale and a 6-bit shift were "
                         "expected")
    base = lowering.names[out.index]
    consts = {k: lowering.constant(f"{base}__{k}", np.array(v, np.float32), keep_float=True) for k, v in
              (("cvt", scale / float(1 << shift)), ("half", 0.5))}
    codes_a, codes_b = emit_codes(lowering, node, a, qa.scale[0]), emit_codes(lowering, node, b, qb.scale[0])
    converted = step("Floor", [step("Add", [step("Mul", [codes_b, consts["cvt"]], {}, "b_mul"), consts["half"]],
                                    {}, "b_half")], {}, "b_cvt")
    return codes_a, converted, out_scale / float(1 << out_shift) * qo.scale[0], factor


def _dpu_conversion(lowering, node: VendorNode, where: str) -> Tuple[int, int, int]:
    """``(scale, shift, offset)`` of the conversion DPU-only tasks of an int8 exMatMul apply to
    its data operand before the conv task (rk3566's attention scores: ``BN_CFG`` 0x4040 = 0x58
    adds the offset ``-zp_b`` in 0x4044, then OUT_CVT scale 0x4084 and shift 0x4088), as the
    CNA's input conversion does elsewhere.

    Raises:
        ModelInvalidError: no such task, or tasks that disagree."""
    found = set()
    for task in _first_run(lowering, node):
        if task.enable_mask & 1:
            continue
        writes = {reg: value for target, reg, value in task_writes(lowering.regcmd(), task, where)
                  if target == TARGET_DPU}
        if writes.get(0x4040) == 0x58 and {0x4044, 0x4084, 0x4088} <= set(writes):
            found.add((writes[0x4084], writes[0x4088], i32(writes[0x4044])))
    if len(found) != 1 or any(s & ~0xFFFF or not s or not 0 < t < 32 for s, t, _ in found):
        raise lowering.error(f"{node.label}: its conv task takes its data unconverted, and its DPU-only tasks convert "
                             f"it with (scale, shift, offset) {sorted(found)}; one 16-bit scale and shift were "
                             "expected")
    return found.pop()


def lower_gelu(lowering, node: VendorNode) -> None:
    """A standalone exGelu (``x (erf(x / sqrt 2) + 1) / 2``): fp16 files compute it in float,
    the output rounded; int8 files (rk3588 family) run the DPU lookup table the file loads
    (:func:`.lut.lower_lut_sigmoid`, whose tables are the file's own whatever the function)."""
    data, x, out = lowering.elementwise_input(node)
    if lowering.int8 and x.dtype == out.dtype == "int8":
        lowering.int8_lut_op(node, x, out)
        return
    lowering.float16_only(node, (x, out), "GELU")
    lowering.emit(node, "Gelu", [data], {})


def lower_gather(lowering, node: VendorNode) -> None:
    """Gather in either form the compiler emits: an embedding lookup on the CPU (rows of a
    constant table, stored float16 in fp16 files, picked by an int64 graph input), or a
    permutation of an activation by a constant int64 index tensor (:func:`_gather_activation`);
    ``axis`` from the BSON."""
    if len(node.inputs) != 2:
        raise lowering.error(f"{node.label} has {len(node.inputs)} inputs; Gather takes a table and indices")
    table, ids = (lowering.tensor(i, node) for i in node.inputs)
    out = lowering.single_output(node)
    if table.kind in _ACTIVATION_KINDS and ids.kind == "shape":
        _gather_activation(lowering, node, table, ids, out)
        return
    if table.kind not in ("const", "shape") or table.dtype != "float16" or ids.index not in lowering.token_ids:
        raise lowering.error(f"{node.label}: a Gather of a {table.dtype} {table.kind} tensor {table.name!r} by "
                         f"{ids.dtype} {ids.kind} {ids.name!r}; only a float16 constant table indexed by an int64 "
                         "graph input (an embedding lookup in an fp16 file) was decoded")
    axis = lowering.bson_int(node, "axis", 0)
    if axis != 0 or len(table.shape) != 2 or list(out.shape) != list(ids.shape) + [table.shape[1]]:
        raise lowering.error(f"{node.label}: axis {axis} of a {list(table.shape)} table by {list(ids.shape)} indices "
                         f"-> {list(out.shape)}; rows (axis 0) of a 2-D table were expected")
    raw = lowering.vf.tensor_data(lowering.sg, table)
    count = int(np.prod(table.shape))
    if len(raw) < 2 * count:
        raise lowering.error(f"{node.label}: table {table.name!r} needs {2 * count} bytes, has {len(raw)}")
    values = np.frombuffer(raw, "<f2", count).astype(np.float32).reshape(table.shape)
    lowering.emit(node, "Gather", [lowering.constant(lowering.names[table.index], values), lowering.names[ids.index]],
              {"axis": 0})


def _gather_activation(lowering, node: VendorNode, data: VendorTensor, ids: VendorTensor, out: VendorTensor) -> None:
    """An activation gathered by a constant int64 index tensor (``shape`` kind): RKNN-Toolkit2
    2.3.0 compiles a ShuffleNet-style channel shuffle of a pooled ``[1, C, 1, 1]`` map into a
    Gather of the ``[C, 1, 1, 1]`` pooled column by the shuffle's permutation (axis 0), then a
    Transpose.  int8 files keep the input's grid (a gather moves codes); another output grid
    is refused, as is an index outside the axis."""
    axis = lowering.bson_int(node, "axis", 0)
    rank = len(data.shape)
    if not -rank <= axis < rank:
        raise lowering.error(f"{node.label}: axis {axis} of a rank-{rank} input")
    axis %= rank
    indices = lowering.int64_const(node, ids).reshape(ids.shape)
    size = int(data.shape[axis])
    if indices.size and not (-size <= indices.min() and indices.max() < size):
        raise lowering.error(f"{node.label}: indices {indices.min()}..{indices.max()} of {ids.name!r} fall outside "
                             f"axis {axis} of size {size}")
    expected = list(data.shape[:axis]) + list(ids.shape) + list(data.shape[axis + 1:])
    if list(out.shape) != expected:
        raise lowering.error(f"{node.label}: a {list(data.shape)} input gathered on axis {axis} by "
                             f"{list(ids.shape)} indices gives {expected}, the output is {list(out.shape)}")
    if "int8" in (data.dtype, out.dtype) and (
            data.dtype != out.dtype or lowering.activation_quant(data) != lowering.activation_quant(out)):
        raise lowering.error(f"{node.label}: a Gather from the {data.dtype} grid (scale {list(data.scale)}, zero "
                             f"point {list(data.zero_point)}) to the {out.dtype} one (scale {list(out.scale)}, "
                             f"zero point {list(out.zero_point)}); only the input's own grid was observed")
    (name,) = lowering.activation_inputs(node, 1, 1)
    lowering.emit(node, "Gather", [name, lowering.constant(lowering.names[ids.index], indices)], {"axis": axis})


class AttentionTasks(NamedTuple):
    """An int8 exSDPAttention's task registers in one form whatever the platform's map
    (:func:`attention_grids`): a scores task's input conversion of q (``con0``: CVT_CON0; ``cvt``:
    its scale and offset), BN multiplier (``bn``: scale and shift, the multiplier being
    ``bn[0] / 2^bn[1]``) and OUT_CVT (offset, scale, shift); a mixing task's input conversion
    (``mix_con0``, ``mix_cvt``) and OUT_CVT scale and shift (``mix_out``); ``shown``: the raw
    values, for messages."""

    con0: int
    cvt: Tuple[int, int]
    bn: Tuple[int, int]
    out: Tuple[int, int, int]
    mix_con0: int
    mix_cvt: Tuple[int, int]
    mix_out: Tuple[int, int]
    shown: str


def attention_grids(lowering, node: VendorNode, scale: float) -> Tuple[QuantParams, QuantParams]:
    """The int8 grids of an int8 exSDPAttention's scores and probabilities (its BSON names them
    ``q_matmul`` and ``q_softmax``; their scales are in no tensor, only in its registers), as the
    simulator uses them: the unscaled scores ``q kᵀ`` on the ``q_matmul`` grid, then ``scale``
    and the softmax in float, the probabilities on ``q_softmax``'s (zero point -128, ``[0, max]``).

    From the node's first run of tasks (the whole-tensor configuration; register writes carry
    over from task to task; :func:`_rk3588_tasks`, rk3576/rv1126b/rk3562: :func:`_moved_map_tasks`):

    * each scores task converts q on input (``CVT_CON0``: truncate shift ``t`` in four 6-bit
      fields, low bits 0xa; scale ``c``, offset ``-zp_q``), or takes it as it is when q's zero
      point is 0 (``CVT_CON0`` 0xb, ``c`` 1, ``t`` 0), multiplies by the BN multiplier ``bn``
      (the BSON's ``scale``) and writes OUT_CVT (offset = the grid's zero point, 16-bit scale
      ``m``, shift ``n``): ``s_qm = s_q s_k / (c / 2^t * bn * m / 2^n)``;
    * each mixing task (its input conversion bypassed: ``CVT_CON0`` 0xb) gives the NPU's
      probability step ``s_out * m / 2^n / s_v``: codes 0..127 over ``[0, max]``, twice the
      simulator's 255-level step.

    Probed on a two-head attention built by RKNN-Toolkit2 2.5.0 (rk3588; rk3576, rv1126b and rk3562:
    the same values in their own maps): both scales within 4e-5 of its cfg's; the simulator's
    output equals the lowering's on every value.  Anything else is refused by name."""
    where = f"{lowering.label}: {node.label}"
    tq, tk, tv = (lowering.tensor(i, node) for i in node.inputs[:3])
    out = lowering.single_output(node)
    qq, qk, qv, qo = (lowering.activation_quant(t) for t in (tq, tk, tv, out))
    states = _task_states(lowering, node, where)
    if lowering.f2_platform() or lowering.t4_platform() or lowering.t3_platform():
        tasks = _moved_map_tasks(lowering, node, states, qq.zero_point[0], qv.zero_point[0], qo.zero_point[0])
    else:
        tasks = _rk3588_tasks(lowering, node, states, qv.zero_point[0], qo.zero_point[0])
    (c, offset), (bn_scale, bn_shift), (out_offset, m, n) = tasks.cvt, tasks.bn, tasks.out
    con0 = tasks.con0
    # q converted on input (0xa, then the truncate shifts), or taken as it is (0xb, scale 1 and
    # offset 0: q's zero point 0, as PP-OCRv4 rec's kl_divergence and mmse builds have it)
    truncates = {0} if con0 == 0xB and (c, offset) == (1, 0) else {(con0 >> k) & 0x3F for k in (4, 10, 16, 22)}
    bn = bn_scale / float(1 << bn_shift)
    if (con0 & 0xF != (0xB if con0 == 0xB else 0xA) or con0 >> 28 or len(truncates) != 1
            or offset != -qq.zero_point[0] or c == 0 or abs(bn - scale) > 1e-4 * abs(scale)
            or m & ~0xFFFF or n & ~0x3F or not -128 <= out_offset <= 127):
        raise lowering.error(f"{node.label}: scores task {tasks.shown}; the decoded form converts q (its zero point "
                             f"{qq.zero_point[0]}), multiplies by the scale {scale!r} and writes an int8 grid")
    (t,) = truncates
    s_scores = qq.scale[0] * qk.scale[0] / (c / float(1 << t) * bn * m / float(1 << n))
    m2, n2 = tasks.mix_out
    if tasks.mix_con0 != 0xB or tasks.mix_cvt != (1, 0) or m2 & ~0xFFFF or n2 & ~0x3F or m2 == 0:
        raise lowering.error(f"{node.label}: mixing task {tasks.shown}; an unconverted input (0xb, scale 1, offset "
                             "0) and a 16-bit scale were expected")
    s_probs = qo.scale[0] * m2 / float(1 << n2) / qv.scale[0] / 2
    return (QuantParams("int8", (float(s_scores),), (out_offset,)),
            QuantParams("int8", (float(s_probs),), (-128,)))


def _rk3588_tasks(lowering, node: VendorNode, states, zp_v: int, zp_out: int) -> AttentionTasks:
    """:class:`AttentionTasks` in rk3588's map (rk3566/rk3568 too): a scores task is a CNA task
    writing the BN multiplier 0x4068 (its high 16 bits over 2^(16 + s), the low 16 bits 0x1000 |
    s << 8), with ``CVT_CON0`` 0x104c, ``CVT_CON1`` 0x1050 (scale high, offset low) and OUT_CVT
    0x4080..0x4088; a mixing task writes a 16-bit OUT_CVT scale with BS_ALU_SRC 0x4054 = ``-zp_v``
    and the OUT_CVT offset the output's zero point (written or carried over when they are 0)."""
    scores, mixes = [], []
    for writes, regs in states:
        core_truncation(regs, f"{lowering.label}: {node.label}")  # a truncated accumulator: never seen here
        own = lambda a: writes.get((TARGET_DPU, a))  # noqa: E731
        if own(BN_MUL):
            scores.append(regs)
        elif own(0x4084) is not None and not own(0x4084) & ~0xFFFF \
                and i16(regs.get((TARGET_DPU, 0x4054), 0) & 0xFFFF) == -zp_v \
                and i32(regs.get((TARGET_DPU, 0x4080), 0)) == zp_out:
            mixes.append(regs)  # BS_ALU_SRC and the OUT_CVT offset may carry over (zero points 0)
    if not scores or not mixes:
        raise lowering.error(f"{node.label}: {len(scores)} scores tasks (BN multiplier 0x4068 set) and {len(mixes)} "
                             "mixing tasks (a 16-bit OUT_CVT scale, BS_ALU_SRC = -zp_v, OUT_CVT offset = the output's "
                             "zero point) were found; at least one of each was expected")
    fields = {tuple(r.get(k) for k in ((TARGET_CNA, 0x104C), (TARGET_CNA, 0x1050), (TARGET_DPU, BN_MUL),
                                       (TARGET_DPU, 0x4080), (TARGET_DPU, 0x4084), (TARGET_DPU, 0x4088)))
              for r in scores}
    mix_fields = {tuple(r.get(k) for k in ((TARGET_CNA, 0x104C), (TARGET_CNA, 0x1050), (TARGET_DPU, 0x4084),
                                           (TARGET_DPU, 0x4088))) for r in mixes}
    if len(fields) != 1 or len(mix_fields) != 1 or any(v is None for v in next(iter(fields)) + next(iter(mix_fields))):
        raise lowering.error(f"{node.label}: its scores tasks write {sorted(map(str, fields))} and its mixing tasks "
                             f"{sorted(map(str, mix_fields))} (CVT_CON0/1, BN 0x4068, OUT_CVT); one complete set each "
                             "was expected")
    ((con0, con1, bn, offset, m, n),) = fields
    ((mcon0, mcon1, m2, n2),) = mix_fields
    shown = (f"CVT_CON0 {con0:#x}, CVT_CON1 {con1:#x}, BN {bn:#x}, OUT_CVT {offset:#x}/{m:#x}/{n:#x}; mixing CVT_CON0 "
             f"{mcon0:#x}, CVT_CON1 {mcon1:#x}, OUT_CVT scale {m2:#x} shift {n2:#x}")
    multiplier = bn_multiplier(bn)
    if multiplier is None:
        raise lowering.error(f"{node.label}: scores task BN multiplier 0x4068 = {bn:#x}; 16-bit scale, then 0x1000 | "
                             "s << 8 was expected")
    return AttentionTasks(con0, (con1 >> 16, i16(con1 & 0xFFFF)), multiplier,
                          (i32(offset), m, n), mcon0, (mcon1 >> 16, i16(mcon1 & 0xFFFF)), (m2, n2), shown)


#: the CNA input conversion of rk3576/rv1126b/rk3562: CVT_CON0 (rk3588's 0x104c), the four lanes'
#: 16-bit scales in the halves of two registers, their offsets in four more
_MOVED_CVT_CON0 = 0x1048
_MOVED_CVT_SCALES = (0x104C, 0x1050)
_MOVED_CVT_OFFSETS = (0x1054, 0x1058, 0x105C, 0x1060)
#: rk3562's and rv1106's BS_ALU_SRC flag (bit 31) above the operand
_T4_ALU_SRC_FLAG = 0x8000
#: rv1106's CNA input conversion: CVT_CON0 at 0x104c (its low bits 0x8 converted, 0x9 bypassed: rk3588's
#: 0xa and 0xb minus 2; bits 28..31 set when converted), the lanes' scales in the halves of two
#: registers, one offset register holding the offset shifted left by the truncate shift
_T3_CVT_CON0, _T3_CVT_SCALES, _T3_CVT_OFFSET = 0x104C, (0x1050, 0x1054), 0x1058
#: rk3588's OUT_CVT offset, scale, shift, which rv1106 keeps
_OUT_CVT = (0x4080, 0x4084, 0x4088)


#: rk3576/rv1126b's ACT_CFG (:data:`.f2act.F2_ACT_CFG`) of a scores task: the BN stage that multiplies
#: by the attention's scale (a mixing task writes a plain conv's 0x903 or nothing)
_F2_SCALE_STAGE = 0x2


def _lane_scale(words) -> Optional[int]:
    """The one nonzero 16-bit scale the halves of ``words`` hold for every lane, else ``None``."""
    scales = {w >> 16 for w in words} | {w & 0xFFFF for w in words}
    return scales.pop() if len(scales) == 1 and 0 not in scales else None


def _moved_conversion(regs: Dict, scaled_offset: bool) -> Optional[Tuple[int, Tuple[int, int]]]:
    """``(CVT_CON0, (scale, offset))`` of a CNA task state in the moved map, or ``None`` when a
    register is unwritten or the four lanes differ.  ``scaled_offset``: the offset registers hold
    the offset times the scale (rv1126b; rk3576 and rk3562: the int16 offset)."""
    values = [regs.get((TARGET_CNA, a)) for a in (_MOVED_CVT_CON0,) + _MOVED_CVT_SCALES + _MOVED_CVT_OFFSETS]
    if None in values:
        return None
    con0, offsets = values[0], values[3:]
    scale = _lane_scale(values[1:3])
    if scale is None or len(set(offsets)) != 1:
        return None
    offset = i32(offsets[0])
    if scaled_offset:
        offset, rest = divmod(offset, scale)
        return (con0, (scale, offset)) if not rest else None
    return (con0, (scale, offset)) if offset == i16(offset & 0xFFFF) else None


def _t3_conversion(regs: Dict) -> Optional[Tuple[int, Tuple[int, int]]]:
    """``(CVT_CON0, (scale, offset))`` of a CNA task state in rv1106's map, CVT_CON0 given in
    rk3588's form (low bits 0xa / 0xb, bits 28..31 clear), or ``None`` when a register is
    unwritten, the lanes differ or a field is outside the observed form."""
    values = [regs.get((TARGET_CNA, a)) for a in (_T3_CVT_CON0,) + _T3_CVT_SCALES + (_T3_CVT_OFFSET,)]
    if None in values:
        return None
    con0, words, shifted = values[0], values[1:3], i32(values[3])
    converted = (con0 & 0xF, con0 >> 28) == (0x8, 0xF)
    if not converted and (con0 & 0xF, con0 >> 28) != (0x9, 0):
        return None
    scale = _lane_scale(words)
    if scale is None:
        return None
    truncate = (con0 >> 4) & 0x3F if converted else 0
    offset = shifted >> truncate
    if offset << truncate != shifted or offset != i16(offset & 0xFFFF):
        return None
    return (con0 & 0x0FFFFFF0) | ((con0 & 0xF) + 2), (scale, offset)


def _moved_map_tasks(lowering, node: VendorNode, states, zp_q: int, zp_v: int, zp_out: int) -> AttentionTasks:
    """:class:`AttentionTasks` in the maps of rk3576/rv1126b, rk3562 and rv1106, which hold
    rk3588's values (a two-head attention built for each by RKNN-Toolkit2 2.5.0; YOLO11's PSA
    block for rv1106) elsewhere:

    * a scores task is a CNA task writing CVT_CON0 0x1048 with low bits 0xa (rk3588's 0x104c), the
      lanes' 16-bit scales in the halves of 0x104c and 0x1050 and their offsets (``-zp_q``;
      rv1126b: times the scale) in 0x1054..0x1060 (rk3588: one scale/offset word 0x1050), OUT_CVT
      at 0x40ac..0x40b4 (rv1106: CVT_CON0 0x104c, low bits 0x8; scales in 0x1050/0x1054, the
      offset shifted by the truncate shift in 0x1058, :func:`_t3_conversion`; OUT_CVT at rk3588's
      addresses); when q's zero point ``zp_q`` is 0 the scores task takes q unconverted (low bits 0xb,
      rv1106 0x9; scale 1, offset 0, as rk3588's) as the mixing tasks do, and is told from them by
      the scale stage it writes itself (rk3576/rv1126b: ACT_CFG 0x4060 = 2; rk3562 and rv1106: the
      BN multiplier 0x4068); its BN multiplier is rk3588's 0x4068 on rk3562 and rv1106, and on
      rk3576/rv1126b words 0 (its 16-bit scale) and 4 (its shift in bytes 0 and 1) of
      ``<output>_qk_conv_mul_add_output_BnCfg_BNcfgTensor``;
    * a mixing task writes a 16-bit OUT_CVT scale with the OUT_CVT offset the output's zero point
      and its input conversion bypassed (CVT_CON0 0xb, scale 1, offset 0); ``-zp_v`` is rk3562's
      and rv1106's BS_ALU_SRC 0x4054 (bit 31 set above it), and word 0 of ``<output>_BScfgTensor``
      on rk3576/rv1126b.

    Raises:
        ModelInvalidError: no scores or mixing task, tasks that disagree, or registers or tensor
            words outside that form, naming them.
    """
    out = lowering.single_output(node)
    where = f"{lowering.label}: {node.label}"
    platform, in_registers = lowering.platform(), lowering.t4_platform() or lowering.t3_platform()
    if lowering.t3_platform():
        conversion_of, con0_reg, converted, out_cvt = _t3_conversion, _T3_CVT_CON0, 0x8, _OUT_CVT
    else:
        def conversion_of(regs):
            return _moved_conversion(regs, scaled_offset=platform == "rv1126b")
        con0_reg, converted, out_cvt = _MOVED_CVT_CON0, 0xA, F2_OUT_CVT

    def refuse(what: str):
        return lowering.error(f"{node.label}: an int8 exSDPAttention on {platform}: {what}")

    scores, mixes = set(), set()
    for writes, regs in states:
        if not in_registers and (TARGET_CORE, F2_TRUNCATE) in regs:  # a truncated accumulator: never seen here
            f2_truncation(regs, where, node.op)
        elif in_registers:
            core_truncation(regs, where, address=T4_CORE_TRUNCATE if lowering.t4_platform() else T3_CORE_TRUNCATE)
        own_con0 = writes.get((TARGET_CNA, con0_reg))
        conversion = conversion_of(regs)
        # q's zero point 0: the scores task bypasses the conversion (converted + 1) as the mixing tasks
        # do, told from them by the scale stage it sets itself (random token graph 318 of 2.5.0)
        con0 = regs.get((TARGET_CNA, con0_reg))
        bypassed = zp_q == 0 and con0 is not None and con0 & 0xF == converted + 1 and (
            bool(writes.get((TARGET_DPU, BN_MUL))) if in_registers
            else writes.get((TARGET_DPU, F2_ACT_CFG)) == _F2_SCALE_STAGE)
        if (own_con0 is not None and own_con0 & 0xF == converted) or bypassed:
            bn = regs.get((TARGET_DPU, BN_MUL)) if in_registers else None
            scores.add((conversion, bn) + tuple(regs.get((TARGET_DPU, a)) for a in out_cvt))
        elif writes.get((TARGET_DPU, out_cvt[1]), 1 << 16) < 1 << 16 and \
                i32(regs.get((TARGET_DPU, out_cvt[0]), 0)) == zp_out:
            alu_src = regs.get((TARGET_DPU, 0x4054)) if in_registers else None
            mixes.add((conversion, alu_src) + tuple(regs.get((TARGET_DPU, a)) for a in out_cvt[1:]))
    complete = lambda entry: None not in entry[:1] + entry[2:]  # noqa: E731
    if len(scores) != 1 or len(mixes) != 1 or not all(map(complete, scores | mixes)):
        raise refuse(f"scores tasks {sorted(map(str, scores))} (CVT_CON0 {con0_reg:#x} low bits {converted:#x}) and "
                     f"mixing tasks {sorted(map(str, mixes))} (a 16-bit OUT_CVT scale, its offset the output's zero "
                     f"point {zp_out}); one complete set of each was expected")
    ((conversion, bn_reg, offset, m, n),), ((mix_conversion, alu_src, m2, n2),) = scores, mixes
    if in_registers:  # rk3562 and rv1106: rk3588's BN word, BS_ALU_SRC with bit 31 set
        bn = bn_multiplier(bn_reg)
        if alu_src is None:
            minus_zp_v = None
        elif lowering.t3_platform():  # rv1106: a 17-bit operand, as its convs' (0x8001fff5: -11, attention_q0)
            minus_zp_v = t3_alu_operand(alu_src)
        else:
            minus_zp_v = i16(alu_src & 0xFFFF) if alu_src >> 16 == _T4_ALU_SRC_FLAG else None
        if bn is None or minus_zp_v != -zp_v:
            raise refuse(f"BN multiplier 0x4068 = {bn_reg} and mixing BS_ALU_SRC 0x4054 = {alu_src}; 16-bit scale then "
                         f"0x1000 | s << 8, and bit 31 over -zp_v ({-zp_v}) in {17 if lowering.t3_platform() else 16} "
                         "bits were expected")
    else:
        bn_name = f"{out.name}_qk_conv_mul_add_output_BnCfg_BNcfgTensor"
        words = cfg_words(lowering, bn_name, where)
        if words is None or not 0 < words[0] < 1 << 16 or words[4] & ~0xFFFF or words[4] & 0xFF != words[4] >> 8 or \
                np.any(words[[1, 2, 3, 5, 6, 7]]):
            raise refuse(f"BN words {None if words is None else words[:8].tolist()} of {bn_name!r}; a 16-bit scale in "
                         "word 0 and its shift in bytes 0 and 1 of word 4 were expected")
        bn = (int(words[0]), int(words[4] & 0xFF))
        bs_name = f"{out.name}_BScfgTensor"
        bs = cfg_words(lowering, bs_name, where)
        if bs is None or bs[0] != -zp_v or np.any(bs[1:8]):
            raise refuse(f"BS words {None if bs is None else bs[:8].tolist()} of {bs_name!r}; -zp_v ({-zp_v}) then "
                         "seven zeros were expected")
    shown = (f"CVT_CON0 {conversion[0]:#x}, scale/offset {conversion[1]}, BN {bn[0]:#x} >> {bn[1]}, OUT_CVT "
             f"{offset:#x}/{m:#x}/{n:#x}; mixing CVT_CON0 {mix_conversion[0]:#x}, scale/offset {mix_conversion[1]}, "
             f"OUT_CVT scale {m2:#x} shift {n2:#x} ({platform} map)")
    return AttentionTasks(conversion[0], conversion[1], bn, (i32(offset), m, n), mix_conversion[0], mix_conversion[1],
                          (m2, n2), shown)


def _first_run(lowering, node: VendorNode):
    """The tasks of the node's first run (its whole-tensor configuration), in order."""
    started = False
    for task in lowering.tasks():
        if task.op_idx == node.index:
            started = True
            yield task
        elif started:
            return


def _task_states(lowering, node: VendorNode, where: str) -> List[Tuple[Dict, Dict]]:
    """``(its own writes, the register state)`` at each CNA task of the node's first run of
    tasks (writes accumulate from its first task on), as ``{(target, register): value}``."""
    state: Dict[Tuple[int, int], int] = {}
    states = []
    for task in _first_run(lowering, node):
        writes = {(target, reg): value for target, reg, value in task_writes(lowering.regcmd(), task, where)}
        state.update(writes)
        if task.enable_mask & 1:
            states.append((writes, dict(state)))
    return states
