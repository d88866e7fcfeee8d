"""Fused int8 Clip and LeakyRelu of RKNPU "f2"/"f3" files (rk3576, rv1126b).

These platforms' DPU register map is not rk3588's (``docs/vendor-format-notes.md`` §1b,
§6).  What a fused ``ConvClip`` / ``ConvLeakyRelu`` needs was located by converting one conv
with different slopes and bounds (probe family ``rk3576_acts``) and reads, from the
node's first CNA task (DPU target 0x1001, the last write wins):

* ``ACT_CFG`` 0x4060: 0x903 plain conv, 0x902 clamp (Relu, Clip(0, hi)), 0x920 shifted
  clamp (Clip with lo != 0), 0x402 LeakyRelu;
* ``CLAMP_MIN``/``CLAMP_MAX`` 0x406c/0x4070 (int32; the same pair again at 0x4074/0x4078;
  ``INT32_MIN``/``INT32_MAX`` when nothing is clamped) and ``CLAMP_MODE`` 0x407c
  (0x010041c1, or 0x000241c0 with the shifted clamp);
* ``EW_ADD`` 0x4090 (int32): the value added back after a shifted clamp;
* ``OUT_CVT`` offset/scale/shift at 0x40ac/0x40b0/0x40b4 (rk3588: 0x4080/0x4084/0x4088).

and one tensor, ``<output>_BnCfg_BNcfgTensor`` (int16 per its dtype; only its first 32
bytes are meaningful, the rest is uninitialised memory): the LeakyRelu slope
``round(alpha * 2^14)`` in its first int16, or (shifted clamp) the value added before the
clamp as int32 words 0 and 4.

Units, with ``u = s_out * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT`` (the accumulator after the
per-channel multiplier, i.e. ``s_in * max_c s_w``):

* shifted clamp: ``x + B`` clamped to ``[0, CLAMP_MAX]``, then ``+ EW_ADD``, all in ``u``:
  ``lo = EW_ADD * u`` (``B = -EW_ADD``), ``hi = lo + CLAMP_MAX * u``;
* clamp with ``CLAMP_MIN`` 0: ``hi = CLAMP_MAX * u * mul[0] / 2^14``, i.e. in the unit of
  **channel 0's** raw accumulator (``mul[0]``: the bias block's multiplier of channel 0,
  normalised so that the largest is 2^14).  Observed on three weight sets; the output's
  int8 grid saturates at ``hi`` anyway.

Every register and tensor word outside these observed values raises
:class:`~rknnlite.errors.ModelInvalidError` naming it.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ...errors import ModelInvalidError
from .regcmd import TARGET_DPU, node_registers, shortest_decimal
from .weights import decode_int8_bias

__all__ = ["f2_activation", "F2_ACT_CFG", "F2_OUT_CVT"]

F2_ACT_CFG = 0x4060
_ACT_CLAMP, _ACT_CLAMP_SHIFTED, _ACT_LEAKY = 0x902, 0x920, 0x402
_CLAMP = (0x406C, 0x4070)
_CLAMP_AGAIN = (0x4074, 0x4078)
_CLAMP_MODE = 0x407C
_MODE_PLAIN, _MODE_SHIFTED = 0x010041C1, 0x000241C0
_EW_ADD = 0x4090
#: OUT_CVT offset, scale, shift of the f2 map
F2_OUT_CVT = (0x40AC, 0x40B0, 0x40B4)
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_MUL_ONE = 1 << 14
_BN_BYTES = 32
#: how far the register unit may be from s_in * max s_w (the stored fp16 scales) before the
#: registers are taken not to be the map decoded here
_UNIT_TOLERANCE = 1e-2


def _i32(bits: int) -> int:
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def f2_activation(lowering, node, x, out, w, b, channels: int) -> Dict[str, float]:
    """``{"alpha": slope}`` (``ConvLeakyRelu``) or ``{"min": lo, "max": hi}`` (``ConvClip``)
    of an int8 conv of an rk3576/rv1126b file (see the module doc), the values rounded
    to the shortest decimal that gives the stored integers (the simulator uses the ONNX
    values).  ``lowering``: the ``_Lowering`` of :mod:`.lower`; ``x``, ``out``, ``w``,
    ``b``: the conv's input, output, weight and bias tensors.  Reads the file; copies
    nothing but the few words it decodes.

    Raises:
        ModelInvalidError: a register or a ``BnCfg`` word outside the observed layout,
            naming it.
    """
    where = f"{lowering.label}: {node.label}"
    regs = node_registers(lowering.regcmd(), lowering.tasks(), node.index, where)

    def reg(address: int) -> int:
        value = regs.get((TARGET_DPU, address))
        if value is None:
            raise ModelInvalidError(f"{where}: the node's task does not write DPU register {address:#x} (rk3576 "
                                    "register map)", op="load")
        return value

    def refuse(what: str) -> ModelInvalidError:
        shown = ", ".join(f"{a:#x}={regs.get((TARGET_DPU, a), 0):#x}"
                          for a in (F2_ACT_CFG,) + _CLAMP + (_CLAMP_MODE, _EW_ADD))
        return ModelInvalidError(f"{where}: int8 {node.op} on rk3576/rv1126b: {what} ({shown}); only the layouts "
                                 "in docs/vendor-format-notes.md §1b were decoded", op="load")

    cfg, mode = reg(F2_ACT_CFG), reg(_CLAMP_MODE)
    lo_reg, hi_reg = (_i32(reg(a)) for a in _CLAMP)
    if tuple(_i32(reg(a)) for a in _CLAMP_AGAIN) != (lo_reg, hi_reg):
        raise refuse(f"the second clamp pair {[hex(reg(a)) for a in _CLAMP_AGAIN]} is not the first")
    add_back = _i32(reg(_EW_ADD))
    bn = _bn_words(lowering, out)
    if node.op == "ConvLeakyRelu":
        if cfg != _ACT_LEAKY or mode != _MODE_PLAIN or (lo_reg, hi_reg) != (_INT_MIN, _INT_MAX) or add_back:
            raise refuse("not the LeakyRelu layout (ACT_CFG 0x402, no clamp, no add)")
        if bn is None:
            raise refuse(f"no slope tensor {out.name + '_BnCfg_BNcfgTensor'!r}")
        slope = bn.view("<i2")
        if not 0 < slope[0] < 1 << 15 or np.any(slope[1:]):
            raise refuse(f"the slope tensor holds {slope.tolist()}, not one slope round(alpha * 2^14) then zeros")
        return {"alpha": int(slope[0]) / float(_MUL_ONE)}
    if node.op != "ConvClip":
        raise refuse("no fused-activation layout is known for this op")
    unit = _register_unit(lowering, node, x, out, w, channels, reg, where)
    if cfg == _ACT_CLAMP and mode == _MODE_PLAIN and lo_reg == 0 and 0 < hi_reg < _INT_MAX and not add_back:
        _, _, mul = decode_int8_bias(lowering.vf.tensor_data(lowering.sg, b), channels, f"{where} bias {b.name!r}",
                                     lowering.bias_block(node, x, out))
        if mul.max() != _MUL_ONE or mul[0] <= 0:
            raise refuse(f"the channel multipliers {mul.tolist()} are not normalised to a largest of 2^14")
        unit0 = unit * float(mul[0]) / _MUL_ONE  # channel 0's raw accumulator (module doc)
        hi = shortest_decimal(hi_reg * unit0, lambda c: round(c / unit0) == hi_reg)
        return {"min": 0.0, "max": hi}
    if cfg == _ACT_CLAMP_SHIFTED and mode == _MODE_SHIFTED and lo_reg == 0 and 0 < hi_reg < _INT_MAX:
        words = None if bn is None else bn.view("<i4")
        if words is None or words[0] != -add_back or words[4] != -add_back or np.any(np.delete(words, (0, 4))):
            raise refuse(f"the add-before-clamp words {None if words is None else words.tolist()} are not "
                         f"-EW_ADD ({-add_back}) at words 0 and 4")
        lo = shortest_decimal(add_back * unit, lambda c: round(c / unit) == add_back)
        hi = shortest_decimal(lo + hi_reg * unit, lambda c: round((c - lo) / unit) == hi_reg)
        return {"min": lo, "max": hi}
    raise refuse("not a clamp layout (ACT_CFG 0x902 with CLAMP_MIN 0, or 0x920 with CLAMP_MODE 0x241c0)")


def _bn_words(lowering, out) -> Optional[np.ndarray]:
    """The meaningful first 32 bytes of ``<output>_BnCfg_BNcfgTensor`` (``None`` if absent)."""
    found = [t for t in lowering.sg.tensors if t.name == f"{out.name}_BnCfg_BNcfgTensor"]
    if not found:
        return None
    raw = lowering.vf.tensor_data(lowering.sg, found[0])
    if len(raw) < _BN_BYTES:
        raise lowering.error(f"{found[0].name!r} holds {len(raw)} bytes; at least {_BN_BYTES} were expected")
    return np.frombuffer(bytes(raw[:_BN_BYTES]), np.uint8)


def _register_unit(lowering, node, x, out, w, channels: int, reg, where: str) -> float:
    """``u = s_out * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT``, checked against the output zero point
    and against ``s_in * max s_w`` from the stored weight scales."""
    offset, scale, shift = (reg(a) for a in F2_OUT_CVT)
    qo, qi = lowering.activation_quant(out), lowering.activation_quant(x)
    if _i32(offset) != qo.zero_point[0] or not 0 < scale < 1 << 16 or shift >= 64:
        raise ModelInvalidError(
            f"{where}: OUT_CVT {offset:#x}/{scale:#x}/{shift:#x} (0x40ac/0x40b0/0x40b4) is not (the output's zero "
            f"point {qo.zero_point[0]}, a 16-bit scale, a shift); the rk3576 register map is not the one decoded",
            op="load")
    unit = qo.scale[0] * scale / float(1 << shift)
    s_w = lowering.stored_weight_scales(w, channels)
    expected = qi.scale[0] * float(s_w.max())
    if abs(unit / expected - 1) > _UNIT_TOLERANCE:
        raise ModelInvalidError(f"{where}: OUT_CVT gives an accumulator unit of {unit:.6g}, the stored weight scales "
                                f"{expected:.6g}; the rk3576 register map is not the one decoded", op="load")
    return unit
