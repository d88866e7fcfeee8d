"""Fused activations and lookup tables of RKNPU "t4" files (rk3562): Clip, LeakyRelu and (fp16)
HardSigmoid from registers (:func:`t4_activation`), int8 lookup-table convs
(:func:`t4_lut_stage`) and standalone lookup-table ops (:func:`t4_lut_task`).

rk3562's DPU map is neither rk3588's nor rk3576's (``docs/vendor-format-notes.md`` §1c,
§1d).  What a fused activation needs was located by converting one conv with different
bounds, slopes and HardSigmoid parameters (probe family ``rk3562_acts``); it reads from the
node's first CNA task (DPU target 0x1001, the last write wins):

* ``BN_CFG`` 0x4060: 0x13 plain conv, 0x12 clamp (Relu, Clip(0, hi)), 0x20010 shifted
  clamp (Clip with lo != 0), 0x22 LeakyRelu, 0x20000 an fp16 HardSigmoid's lookup-table
  index;
* ``BN_ADD`` 0x4064: the value added before a shifted clamp (fp16: float32 ``-lo``, int8:
  an int32 in accumulator units), or a HardSigmoid's index offset ``A`` (float32);
* ``BN_MUL`` 0x4068, high half: the LeakyRelu slope (fp16: float16; int8:
  ``round(alpha * 2^14)``), or a HardSigmoid's index scale ``M`` (float16);
* the clamp pair 0x406c/0x4070, again at 0x4074/0x4078 (``INT32_MIN``/``INT32_MAX`` bits
  when nothing is clamped), float32 in fp16 files, int32 in int8 files;
* fp16 files: 0x4040 holds ``-lo`` (added before the shifted clamp); int8 files: ``EW_ADD`` 0x4090
  (int32) the value added back after it, ``CLAMP_MODE`` 0x407c 0x010041c1 or 0x000241c0
  (shifted), checked by :func:`.regcmd.requant_t4` with the rest of the requantization.

The int8 values mean what they mean on rk3576 (:mod:`.f2act`): a clamp from 0 counts in
channel 0's raw accumulator unit, a shifted clamp in the register unit.  A HardSigmoid's
index is ``u = (x + A) * M`` as in rk3576's fp16 files.  Every other value raises
:class:`~rknnlite.errors.ModelInvalidError` naming the registers.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Dict, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .f2act import clamp_from_zero, hard_sigmoid_of, shifted_clamp
from .lut import LutStage, lut_stage
from .regcmd import (T4_BN_LUT, T4_OUT_CVT, T4_OUT_CVT_RESIDUAL, TARGET_DPU, Requant, dpu_reader, f32, i16, i32,
                     node_registers, requant_t4, shortest_decimal)

__all__ = ["t4_activation", "t4_lut_stage", "t4_lut_task", "T4_CLAMP", "T4_CLAMP_SHIFTED", "T4_LEAKY", "T4_LUT_CFG"]

_BN_CFG, _BN_ADD, _BN_MUL, _FP16_ADD_BEFORE = 0x4060, 0x4064, 0x4068, 0x4040
_CLAMP, _CLAMP_AGAIN = (0x406C, 0x4070), (0x4074, 0x4078)
_EW_ADD = 0x4090
#: ``BN_CFG`` values of rk3562's fused activations
T4_CLAMP, T4_CLAMP_SHIFTED, T4_LEAKY, _HARD_SIGMOID = 0x12, 0x20010, 0x22, 0x20000
_NO_CLAMP = (0x80000000, 0x7FFFFFFF)
_MUL_ONE = 1 << 14
#: ``LUT_CFG`` 0x4108 of an rk3562 lookup-table conv (rk3588: 0x68)
T4_LUT_CFG = 0x160


def _f16(bits: int) -> float:
    return float(np.frombuffer(struct.pack("<H", bits & 0xFFFF), "<f2")[0])


def t4_activation(lowering, node, activation: str, x, out, b, unit) -> Dict[str, float]:
    """``{"min": lo, "max": hi}`` (``Clip``), ``{"alpha": slope}`` (``LeakyRelu``) or
    ``{"alpha": a, "beta": b}`` (``HardSigmoid``, fp16 files): the ``activation`` fused into a
    conv or a deconv (the same registers) in an rk3562 file
    (see the module doc), each value the shortest decimal that gives the stored one (the
    simulator uses the ONNX values).  ``lowering``: the ``_Lowering`` of :mod:`.lower`; ``x``,
    ``out``, ``b``: the conv's input, output and bias tensors; ``unit``: an int8 file's
    register unit ``s_out * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT`` (``None`` for fp16 files).
    Copies nothing but the registers it decodes.

    Raises:
        ModelInvalidError: a register outside the observed layouts, naming it.
    """
    where = f"{lowering.label}: {node.label}"
    regs = node_registers(lowering.regcmd(), lowering.tasks(), node.index, where)
    int8 = unit is not None
    shown_regs = (_BN_CFG, _BN_ADD, _BN_MUL) + _CLAMP + ((_EW_ADD,) if int8 else (_FP16_ADD_BEFORE,))

    reg = dpu_reader(regs, where, "(rk3562 register map)")

    def refuse(what: str) -> ModelInvalidError:
        shown = ", ".join(f"{a:#x}={regs.get((TARGET_DPU, a), 0):#x}" for a in shown_regs)
        return ModelInvalidError(f"{where}: {'int8' if int8 else 'fp16'} {node.op} on rk3562: {what} ({shown}); only "
                                 "the layouts in docs/vendor-format-notes.md §1d were decoded", op="load")

    cfg, add, mul_bits = reg(_BN_CFG), reg(_BN_ADD), reg(_BN_MUL)
    clamp = tuple(reg(a) for a in _CLAMP)
    if tuple(reg(a) for a in _CLAMP_AGAIN) != clamp:
        raise refuse(f"the second clamp pair {[hex(reg(a)) for a in _CLAMP_AGAIN]} is not the first")
    # the shifted clamp's other value: int8 EW_ADD (added back after it), fp16 0x4040 (added before it)
    shifted = reg(_EW_ADD) if int8 else reg(_FP16_ADD_BEFORE)
    if activation == "LeakyRelu":
        slope_bits = mul_bits >> 16  # a negative slope (Abs's -1: 0xc000 / 0xbc00) checked on conv_abs_rk3562
        slope = i16(slope_bits) / float(_MUL_ONE) if int8 else _f16(slope_bits)
        if cfg != T4_LEAKY or clamp != _NO_CLAMP or add or shifted or mul_bits & 0xFFFF or \
                not (np.isfinite(slope) and slope != 0):
            raise refuse("not the LeakyRelu layout (BN_CFG 0x22, a slope in 0x4068's high half, no clamp)")
        return {"alpha": slope}
    if activation == "HardSigmoid" and not int8:
        scale, offset = _f16(mul_bits >> 16), f32(add)
        if cfg != _HARD_SIGMOID or clamp != _NO_CLAMP or shifted or mul_bits & 0xFFFF or \
                not (np.isfinite(offset) and np.isfinite(scale) and scale > 0):
            raise refuse("not the HardSigmoid index layout (BN_CFG 0x20000, A float32 in 0x4064, M float16 in "
                         "0x4068's high half, no clamp)")
        return hard_sigmoid_of(offset, scale)
    if activation != "Clip":
        raise refuse("no fused-activation layout is known for this op")
    if mul_bits:
        raise refuse("BN_MUL is not 0 (a clamp layout)")
    if int8:
        lo_reg, hi_reg = (i32(v) for v in clamp)
        if lo_reg != 0 or not 0 < hi_reg < (1 << 31) - 1:
            raise refuse("not a clamp from 0 to a positive CLAMP_MAX")
        if cfg == T4_CLAMP and not add and not shifted:
            _, _, mul = lowering.bias_blocks(node, x, out, b, out.shape[1])
            return clamp_from_zero(hi_reg, unit, mul, refuse)
        if cfg == T4_CLAMP_SHIFTED and i32(shifted) == -i32(add):
            return shifted_clamp(i32(shifted), hi_reg, unit)
        raise refuse("not a clamp layout (BN_CFG 0x12, or 0x20010 with EW_ADD = -BN_ADD)")
    lo, hi = (f32(v) for v in clamp)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        raise refuse("the clamp pair is not finite float32 bounds lo <= hi")
    if cfg == T4_CLAMP and not add and not shifted and lo == 0:
        return {"min": 0.0, "max": hi}
    before = f32(shifted)  # the value added before the clamp, -lo; BN_ADD adds it back
    if cfg == T4_CLAMP_SHIFTED and lo == 0 and np.isfinite(before) and add == struct.unpack(
            "<I", struct.pack("<f", -before))[0]:
        low = shortest_decimal(-before, lambda v: float(np.float32(-v)) == before)
        return {"min": low, "max": shortest_decimal(hi + low, lambda v: float(np.float32(v - low)) == hi)}
    raise refuse("not a clamp layout (BN_CFG 0x12 from 0, or 0x20010 with 0x4064 = -0x4040)")


def t4_lut_stage(lowering, node, activation: str, depthwise: bool) -> Tuple[LutStage, Requant]:
    """The index map and output conversion of an int8 lookup-table conv (Sigmoid, Swish,
    HardSwish, HardSigmoid) in an rk3562 file: rk3588's table registers (0x4064 ``A``, 0x4068
    ``M`` and the shift ``s``, 0x410c..0x412c ranges and slopes, :func:`.lut.lut_stage`) behind
    ``BN_CFG`` 0x20000 and ``LUT_CFG`` 0x160, with ``A`` added before the multiplication:
    ``u = ((y + A) * M) >> s`` (rk3588: ``(y * M + A) >> s``; the same file's rk3588 ``A`` is
    this one times ``M``, rounded), and rk3562's requantization map
    (:func:`.regcmd.requant_t4`: OUT_CVT at 0x40ac..0x40b4, the bias blocks' multipliers).
    For :func:`.lut.lower_lut_conv`'s ``stage_of``.

    Raises:
        ModelInvalidError: a register outside the observed layout, naming it.
    """
    where = f"{lowering.label}: {node.label}"
    regs = node_registers(lowering.regcmd(), lowering.tasks(), node.index, where)
    return _table_stage(regs, where), requant_t4(regs, where, activation, depthwise)


def _table_stage(regs: Dict[Tuple[int, int], int], where: str) -> LutStage:
    """rk3588's table registers behind rk3562's BN_CFG and LUT_CFG, ``A`` added before the
    multiplication (``u = ((y + A) * M) >> s``, i.e. ``index_add = A * M``)."""
    stage = lut_stage(regs, where, T4_BN_LUT, (T4_LUT_CFG,))
    return replace(stage, index_add=stage.index_add * stage.index_mul)


#: the registers of rk3562's DPU-only lookup-table task (a standalone Sigmoid / exSwish) and the
#: values observed: rk3588's BS_MUL_CFG address as a conv's, the bias and the multiplier stages off,
#: the clamp mode of a lookup-table conv, and 0x4088 (the element-wise stage's lower clamp on convs:
#: 0 with Sigmoid, INT32_MIN with exSwish, each matching the simulator; the input is the
#: element-wise operand here)
_TASK_FIXED = {0x4048: (0x80000000,), 0x4050: (0x2,), 0x4054: (0x0,), 0x407C: (0x01004140,),
               0x4088: (0x0, 0x80000000)}


def t4_lut_task(regs: Dict[Tuple[int, int], int], where: str) -> Tuple[LutStage, Requant]:
    """The index map and output conversion of rk3562's DPU-only lookup-table task (a standalone
    int8 Sigmoid or exSwish; ``regs``: the task's ``{(target, reg): value}``): the table
    registers as a lookup-table conv's (:func:`t4_lut_stage`: ``u = ((q + A) * M) >> s``), no
    bias and no channel multipliers, OUT_CVT at 0x40ac..0x40b4 with 0x40b0 bit 16 set (the input
    arrives through the element-wise path, as a residual conv's operand).  For
    :func:`.lut.lower_lut_sigmoid`'s ``decode``.

    Raises:
        ModelInvalidError: a register outside the observed layout, naming it.
    """
    reg = dpu_reader(regs, where, "(rk3562 register map)")

    for address, seen in _TASK_FIXED.items():
        if reg(address) not in seen:
            raise ModelInvalidError(f"{where}: DPU register {address:#x} = {reg(address):#x} in rk3562's lookup-table "
                                    f"task; only {' or '.join(hex(v) for v in seen)} was observed and decoded",
                                    op="load")
    offset, scale, shift = (reg(a) for a in T4_OUT_CVT)
    if scale & ~0xFFFF != T4_OUT_CVT_RESIDUAL or shift & ~0x3F:
        raise ModelInvalidError(f"{where}: OUT_CVT scale/shift {scale:#x}/{shift:#x} (0x40b0/0x40b4) in rk3562's "
                                "lookup-table task; a 16-bit scale with bit 16 set and a 6-bit shift were observed",
                                op="load")
    return _table_stage(regs, where), Requant(scale & 0xFFFF, shift, None, i32(offset), False, 0)
