"""int8 conv requantization and fused activations of RKNPU "f2"/"f3" files (rk3576, rv1126b):
OUT_CVT, Clip, LeakyRelu, and the lookup-table index map of HardSigmoid and Sigmoid, fused or
standalone (Sigmoid, exSwish).

An int8 conv's output conversion (:func:`f2_conv_requant`) is rk3588's: ``OUT_CVT`` times the
bias blocks' 14-bit channel multipliers.  The files also store float16 weight scales beside each
weight (``<weight>_w4a16_weight``): those same scales rounded, up to 4.9e-4 apart.  The simulator
computes with the full-precision ones, so convs lowered with the float16 copies missed by one step
near .5 boundaries (``detector_ops`` for rk3576: 89.26 % of an output within one step), and with
the registers match as rk3588's do (100 %); the stored copies serve as a cross-check.

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

**fp16 files** (:func:`f2_fp16_activation`) keep the plain conv's ``ACT_CFG`` 0x903 for the
LeakyRelu of a conv with a bias and store its slope as a float16 in word 0 of
``<output>_BsCfg_BScfgTensor`` (words 1-7 zero; the rest is uninitialised memory); a conv
without bias or a depthwise one has ``ACT_CFG`` 0xc02 and the same word in
``<output>_BnCfg_BNcfgTensor``.  (An int8 LeakyRelu or PRelu conv's slope stage adds 3 to 14
fraction bits to its OUT_CVT shift, as its BsCfg word says: :func:`f2_slope_bits`.)  A Clip has ``ACT_CFG`` 0x902 and
float32 clamp pairs: the second pair (0x4074/0x4078) holds the ONNX bounds, the first
(0x406c/0x4070) the same bounds with every negative one ``v`` replaced by
``-bits_to_f32(0x80000000 - f32_bits(-v))`` (a bit-level reciprocal estimate, about
``4 / v``: -1 -> -4, -6 -> -0.75, -0.1 -> -44.8); the simulator clamps to the second pair
only (a Clip(-6, 6) output reaches -6).  A HardSigmoid's lookup-table index
``u = (x + A) * M`` has ``A`` (float32) in words 0 and 4 and ``M`` (float16) in word 8 of
``<output>_BnCfg_BNcfgTensor``: ``alpha = M / 32768``, ``beta = 0.5 + A * alpha``.

**int8 lookup-table convs** (``ConvHardSigmoid``, ``ConvSigmoid``; :func:`f2_lut_stage`) load
the same two 513-entry tables as rk3588 (``0x4100``/``0x4104``, :func:`.lut.read_lut_tables`)
but map the accumulator to the table index in the BN stage with words of
``<output>_BnCfg_BNcfgTensor`` (int32 words 0 and 4: ``A``, word 8: ``M``, word 12: the
shift ``s`` in bytes 0 and 1): ``u = ((y + A) * M) >> s``, ``y = acc * mul[c] >> k`` with
``k`` bytes 0 and 1 of ``<output>_BScfgTensor``.  The conv task's DPU registers give
``ACT_CFG`` 0x20, ``CLAMP_MODE`` 0x01004140, ``LUT_CFG`` 0x4108 = 0x02000006, the entry
spacing 0x410c (as rk3588), the index range's start (0x4110..0x411c, four copies) and end
(0x4140..0x414c, four copies), the table values used outside it (0x4188/0x418c: the
first LE entry, 0x4190/0x4194: the last LO entry) and the slopes beyond them, each in four
copies: the LE table's underflow (16-bit scale in 0x4150/0x4154, shift in the bytes of 0x4160)
and the LO table's overflow (0x4170/0x4174, 0x4184), rk3588's 0x4120..0x412c values (Sigmoid:
0x5a43 / 2^22 below; Swish, HardSwish: 0x4032 / 2^13 above).

**Standalone int8 Sigmoid / exSwish** (:func:`f2_lut_task`, probe family ``standalone_lut``)
run a DPU-only task after the table load with the same registers and index-map words (of the
op's output tensor, ``u = ((q + A) * M) >> s`` on the input's raw codes), no ``BScfgTensor``
(no channel multipliers) and OUT_CVT scale bit 16 set (the input comes through the
element-wise path).

Every register and tensor word outside these observed values raises
:class:`~rknnlite.errors.ModelInvalidError` naming it.
"""

from __future__ import annotations

import struct
from typing import Dict, Optional, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .lut import LutStage, LutTables
from .regcmd import (TARGET_CORE, TARGET_DPU, Requant, dpu_reader, f32, i16, i32, node_registers, shortest_decimal,
                     task_register)

__all__ = ["f2_activation", "f2_bias_layout", "f2_plain_weight_zero_point", "f2_conv_requant", "f2_slope_bits",
           "f2_residual_shift", "f2_truncation", "F2_OUT_CVT_ACTIVATIONS", "F2_TRUNCATE",
           "f2_fp16_activation", "f2_lut_stage", "f2_lut_task", "clamp_from_zero", "hard_sigmoid_of", "hard_sigmoid_slope",
           "shifted_clamp", "F2_ACT_CFG", "F2_ACT_LUT", "F2_OUT_CVT", "F2_PLATFORMS", "cfg_words"]

#: target platforms whose files use the DPU register map decoded here
F2_PLATFORMS = ("rk3576", "rv1126b")
F2_ACT_CFG = 0x4060
_ACT_PLAIN = 0x903
#: an fp16 conv's LeakyRelu in the BN stage, its slope in ``<output>_BnCfg_BNcfgTensor`` (a conv without
#: bias, a depthwise one: conv_leaky_input_*); with the plain ACT_CFG it is in the BS stage's BsCfg
_ACT_FP16_BN_LEAKY = 0xC02
_F32_NO_CLAMP = (0x80000000, 0x7FFFFFFF)
_BS_WORDS = 8
_ACT_CLAMP, _ACT_CLAMP_SHIFTED, _ACT_LEAKY = 0x902, 0x920, 0x402
#: a PRelu conv's ACT_CFG: its per-channel slopes (0x602), or one slope for every channel (0x402)
_ACT_PRELU = (0x602, 0x402)
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


#: BS_ALU_CFG 0x4050 bits 16..19: 1 per-channel bias blocks (0x80011011, 0x80011111; depthwise
#: 0x13033, 0x13133), 2 a plain int32 bias (per-layer files, and a one-channel conv such as YOLOv8's
#: DFL conv), whose weight zero point is word 0 of ``<output>_BScfgTensor``, negated
_BS_ALU = 0x4050
_BIAS_BLOCKS = 1
_PLAIN_BIAS = 2


def f2_bias_layout(regs: Dict[Tuple[int, int], int], where: str, plain: bool = False) -> int:
    """The bias layout of an rk3576/rv1126b int8 conv (``BS_ALU_CFG`` 0x4050 bits 16..19): 1,
    per-channel bias blocks, or (with ``plain``: the callers that read it) 2, a plain int32 bias
    with one weight zero point (:func:`f2_plain_weight_zero_point`).

    Raises:
        ModelInvalidError: another layout, naming the register.
    """
    value = dpu_reader(regs, where, "(rk3576 register map)")(_BS_ALU)
    layout = (value >> 16) & 0xF
    if layout == _BIAS_BLOCKS or (plain and layout == _PLAIN_BIAS):
        return layout
    known = "per-channel bias blocks (1) or a plain int32 bias (2)" if plain else "per-channel bias blocks (1)"
    raise ModelInvalidError(f"{where}: BS_ALU_CFG (0x4050) = {value:#x} on an rk3576/rv1126b int8 conv: bias layout "
                            f"{layout} (bits 16..19); only {known} were decoded here", op="load")


def f2_plain_weight_zero_point(lowering, out, where: str) -> int:
    """The one weight zero point of an rk3576/rv1126b int8 conv with a plain int32 bias (layout
    2): word 0 of ``<output>_BScfgTensor``, negated (as rk3588's BS_ALU_SRC 0x4054), the next
    words of its NPU extent zero (words 1..7 of a 16-channel tensor, 1..3 of an 8-channel one);
    the rest of the tensor is uninitialised memory.  Measured on 19 convs of zero points
    -128..127 (0 included), rk3576 and rv1126b, layer and one-channel per-channel builds: the
    stored weights are ``round(w / s + zp_w)`` and the bias ``round(b / (s_in s_w)) - zp_in *
    sum(q_w - zp_w)`` exactly.

    Raises:
        ModelInvalidError: no such tensor, or its words not of that form."""
    name = f"{out.name}_BScfgTensor"
    words = cfg_words(lowering, name, where)
    if words is None:
        raise ModelInvalidError(f"{where}: a plain int32 bias (BS_ALU_CFG layout 2) without {name!r}, which holds the "
                                "weight zero point", op="load")
    # an 8-channel tensor's NPU extent is four words; uninitialised memory follows it
    found = next(t for t in lowering.sg.tensors if t.name == name)
    extent = min(8, int(np.prod(found.npu_shape or (0,))) * 2 // 4)
    zp = -int(words[0])
    if extent < 4 or np.any(words[1:extent] != 0) or not -128 <= zp <= 127:
        raise ModelInvalidError(f"{where}: {name!r} (NPU shape {list(found.npu_shape)}) starts {words[:8].tolist()}; "
                                f"the negated weight zero point (-128..127) then {max(extent - 1, 3)} zero words was "
                                "expected", op="load")
    return zp


#: the bias blocks' channel multipliers are normalised to 2^14 (the largest weight scale)
_BLOCK_MUL_SHIFT = 14


#: the fused activations of an rk3576/rv1126b int8 conv whose OUT_CVT is the conv's own output
#: conversion (a lookup-table activation's converts the table's output)
F2_OUT_CVT_ACTIVATIONS = (None, "Relu", "Clip", "LeakyRelu", "PRelu", "Add", "AddRelu")
#: a LeakyRelu's or PRelu's OUT_CVT shift is larger than the plain conv's by its slope stage's fraction
#: bits ``b``, which word 0 of its ``<output>_BsCfg_BScfgTensor`` states twice, as ``(28 - b) << 8 | (14 - b)``
#: (words 1..3 zero): 14 (0xe00) on an input that is no image (conv_leaky_input_*; 7 random rk3576 files
#: read with 13 were refused: their stored weight scales twice the registers') and on PRelu convs
#: (standalone_ops_*), 13 (0xf01) on an image or after a Relu conv (conv_leaky_*), 12 (0x1002) where 13
#: would take the OUT_CVT shift past 36 (leaky_wide_*, random rk3576 graphs 127 and 135), and fewer where
#: the conv's accumulator step is tiny against its output's (a large bias, small weights: 10, 9, 8, 7 and 3;
#: table_conv_scales_*, the stressed random graphs; refused until 2026-12-07)
_SLOPE_STAGE_OPS = ("LeakyRelu", "PRelu")
_SLOPE_BITS_MAX = 14


def _slope_bits_word(bits: int) -> int:
    return (28 - bits) << 8 | (14 - bits)


def f2_slope_bits(lowering, out, where: str, fused: str) -> int:
    """The fraction bits an rk3576/rv1126b int8 ``ConvLeakyRelu``'s or ``ConvPRelu``'s (``fused``)
    slope stage adds to its OUT_CVT shift, from word 0 of ``<output>_BsCfg_BScfgTensor``
    (:func:`_slope_bits_word`; words 1..3 zero).

    Raises:
        ModelInvalidError: no such tensor, or another word there."""
    name = f"{out.name}_BsCfg_BScfgTensor"
    words = cfg_words(lowering, name, where)
    first = None if words is None else int(words[0]) & 0xFFFFFFFF
    known = {_slope_bits_word(b): b for b in range(1, _SLOPE_BITS_MAX + 1)}
    if first not in known or np.any(words[1:4]):
        shown = None if words is None else [hex(int(w) & 0xFFFFFFFF) for w in words[:4]]
        raise ModelInvalidError(f"{where}: an int8 {fused} conv's {name!r} starts {shown}; word 0 (28 - b) << 8 | "
                                f"(14 - b) for b = 1..{_SLOPE_BITS_MAX} (0xe00 for 14; its slope stage's fraction "
                                "bits) then zeros was expected", op="load")
    return known[first]


def f2_conv_requant(regs: Dict[Tuple[int, int], int], where: str, activation: Optional[str], plain: bool,
                    slope_bits: int = 0) -> Requant:
    """The output conversion of an rk3576/rv1126b int8 conv or ConvTranspose, read from its
    registers as the NPU applies it: ``OUT_CVT`` at 0x40ac..0x40b4 gives the accumulator unit
    ``s_out * scale / 2^shift = s_in * max_c s_w`` and the bias blocks (BS_ALU_CFG bits 16..19 = 1)
    the channel multipliers over 2^14, as rk3588's; with a plain int32 bias (layout 2, ``plain``:
    per-layer files and one-channel convs) there is no multiplier stage and the caller fills in
    the weight zero point (:func:`f2_plain_weight_zero_point`).  ``activation``: the fused one
    (``lower``'s names).  A residual conv (``Add``, ``AddRelu``) has bit 16 of its OUT_CVT scale
    set (the residual comes through the element-wise path), the scale below it the conv's own; a
    ``LeakyRelu``'s or ``PRelu``'s shift is ``slope_bits`` larger (:func:`f2_slope_bits`), taken off here
    (a PRelu conv's ``ACT_CFG`` 0x602, or 0x402 with one slope for every channel, is checked).  For activations
    outside :data:`F2_OUT_CVT_ACTIVATIONS` the OUT_CVT returned is the table's, not the conv's.  The
    accumulator's truncation is :func:`f2_truncation`'s (``Requant.truncated``).

    The per-channel weight scales the file also stores (``<weight>_w4a16_weight``, a
    ConvTranspose has none) are these rounded to float16, up to 4.9e-4 apart: the simulator
    computes with the full-precision ones, so the registers are what is exact
    (``docs/vendor-format-notes.md`` §1b).

    Raises:
        ModelInvalidError: another bias layout or an OUT_CVT outside the observed form.
    """
    layout = f2_bias_layout(regs, where, plain=plain)
    reg = dpu_reader(regs, where, "(rk3576 register map)")

    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message} on an rk3576/rv1126b int8 conv", op="load")

    offset, scale, shift = _out_cvt(reg, refuse, ew_input=activation in ("Add", "AddRelu"))
    if activation == "PRelu" and reg(F2_ACT_CFG) not in _ACT_PRELU:
        raise refuse(f"ACT_CFG ({F2_ACT_CFG:#x}) = {reg(F2_ACT_CFG):#x} on a PRelu conv, not "
                     f"{' or '.join(hex(v) for v in _ACT_PRELU)}")
    if activation in _SLOPE_STAGE_OPS:
        if shift < slope_bits or not slope_bits:
            raise refuse(f"OUT_CVT_SHIFT (0x40b4) {shift}, below the {slope_bits} bits a {activation}'s slope stage adds")
        shift -= slope_bits
    truncated = f2_truncation(regs, where, activation)
    if layout == _BIAS_BLOCKS:
        return Requant(scale, shift, _BLOCK_MUL_SHIFT, offset, True, 0, truncated)
    return Requant(scale, shift, None, offset, False, 0, truncated)


#: ACT_CFG of a residual conv whose BN stage shifts its biased accumulator right before the residual is
#: added (rk3588's :data:`.regcmd.BN_SHIFT`); the shift is in ``<residual>_BnCfg_BNcfgTensor``
_ACT_BN_SHIFT = 0x2
#: CORE 0x3024: 0, or ``k | k << 5`` when the conv truncates its accumulator by k bits before adding the
#: bias, whose integer is then in units of 2^k accumulator steps (k = 1 to 13 observed: a conv of tiny
#: input or weights, whose bias and accumulator in its steps would pass int32; plain, Relu and residual
#: convs, a residual one also shifting in its BN stage, corpus ``tiny_steps*``, ``weight_underflow_*``;
#: LeakyRelu, PRelu, Tanh, Swish, Sigmoid, HardSigmoid and HardSwish convs, ``table_conv_scales_*``; both
#: platforms, RKNN-Toolkit2 2.2.0 to 2.5.0).  Read as 0, the stored weight scales disagreed with the
#: registers by 2^k and such files were refused.
F2_TRUNCATE = 0x3024
_TRUNCATE_BITS = 0x1F
#: the fused parts of the convs observed truncated (``lower``'s names; None: a plain conv)
_TRUNCATED_FUSED = (None, "Relu", "Add", "AddRelu", "LeakyRelu", "PRelu", "Tanh", "Swish", "Sigmoid", "HardSigmoid",
                    "HardSwish")


def f2_truncation(regs: Dict[Tuple[int, int], int], where: str, fused: Optional[str]) -> int:
    """The bits ``k`` an rk3576/rv1126b int8 conv truncates its accumulator by before the bias
    (CORE 0x3024, :data:`F2_TRUNCATE`): 0 for almost every conv.  ``fused``: the conv's fused part
    (``lower``'s names, or a lookup-table op's), one of :data:`_TRUNCATED_FUSED` where truncated.

    Raises:
        ModelInvalidError: another 0x3024 value, or a truncated conv of another fused part."""
    value = task_register(regs, TARGET_CORE, F2_TRUNCATE, where, "(rk3576 register map)")
    bits = value & _TRUNCATE_BITS
    if value != bits | bits << 5:
        raise ModelInvalidError(f"{where}: CORE register {F2_TRUNCATE:#x} = {value:#x} on an rk3576/rv1126b int8 conv; "
                                "only 0 or k | k << 5 (the accumulator truncated by k bits) were observed", op="load")
    if bits and fused not in _TRUNCATED_FUSED:
        seen = ", ".join(str(f) for f in _TRUNCATED_FUSED if f)
        raise ModelInvalidError(f"{where}: an rk3576/rv1126b int8 {fused} conv whose accumulator is truncated by "
                                f"{bits} bits (CORE {F2_TRUNCATE:#x} = {value:#x}); only plain convs and those "
                                f"fusing {seen} were observed truncated", op="load")
    return bits


def f2_residual_shift(lowering, residual, regs: Dict[Tuple[int, int], int], where: str) -> int:
    """The right shift an rk3576/rv1126b int8 residual conv (ConvAdd, ConvAddRelu) applies to
    its biased accumulator before the residual is added: 0 with the plain ``ACT_CFG`` 0x903;
    with ``ACT_CFG`` 0x2 the ``s`` of ``<residual>_BnCfg_BNcfgTensor``, the tensor named after
    the residual input (int32 word 0 the multiplier 1, bytes 16 and 17 ``s`` twice, the rest of
    its 32 bytes zero; silero-vad's STFT, corpus ``tiny_steps*``).

    Raises:
        ModelInvalidError: another ``ACT_CFG``, or the tensor absent or holding other bytes."""
    cfg = dpu_reader(regs, where, "(rk3576 register map)")(F2_ACT_CFG)
    if cfg == _ACT_PLAIN:
        return 0
    if cfg != _ACT_BN_SHIFT:
        raise ModelInvalidError(f"{where}: ACT_CFG ({F2_ACT_CFG:#x}) = {cfg:#x} on an rk3576/rv1126b int8 residual "
                                f"conv; only {_ACT_PLAIN:#x} and {_ACT_BN_SHIFT:#x} (a shift before the add) were "
                                "observed", op="load")
    name = f"{residual.name}_BnCfg_BNcfgTensor"
    words = _bn_words(lowering, residual)
    shift = 0 if words is None else int(words[16])
    expected = np.zeros(_BN_BYTES, np.uint8)
    expected[0], expected[16], expected[17] = 1, shift, shift
    if words is None or not 0 < shift < 32 or not np.array_equal(words, expected):
        shown = "is absent" if words is None else f"holds {bytes(words).hex()}"
        raise ModelInvalidError(f"{where}: a residual conv's BN stage (ACT_CFG {cfg:#x}) whose {name!r} {shown}; only "
                                "the multiplier 1 in word 0 and a shift s > 0 in bytes 16 and 17 were observed",
                                op="load")
    return shift


def f2_activation(lowering, node, activation: str, x, out, b, channels: int, unit: float) -> Dict[str, float]:
    """``{"alpha": slope}`` (``LeakyRelu``) or ``{"min": lo, "max": hi}`` (``Clip``): the
    ``activation`` fused into an int8 conv or deconv (the same registers) of an rk3576/rv1126b
    file (see the module doc), the values rounded
    to the shortest decimal that gives the stored integers (the simulator uses the ONNX
    values).  ``lowering``: the ``_Lowering`` of :mod:`.lower`; ``x``, ``out``, ``b``: the
    conv's input, output and bias tensors; ``unit``: its accumulator unit, ``s_out *
    OUT_CVT_SCALE / 2^OUT_CVT_SHIFT`` (:func:`f2_conv_requant`).  Reads the file; copies
    nothing but the few words it decodes.

    Raises:
        ModelInvalidError: a register or a ``BnCfg`` word outside the observed layout,
            naming it.
    """
    where = f"{lowering.label}: {node.label}"
    regs = node_registers(lowering.regcmd(), lowering.tasks(), node.index, where)

    reg = dpu_reader(regs, where, "(rk3576 register map)")

    def refuse(what: str) -> ModelInvalidError:
        shown = ", ".join(f"{a:#x}={regs.get((TARGET_DPU, a), 0):#x}"
                          for a in (F2_ACT_CFG,) + _CLAMP + (_CLAMP_MODE, _EW_ADD))
        return ModelInvalidError(f"{where}: int8 {node.op} on rk3576/rv1126b: {what} ({shown}); only the layouts "
                                 "in docs/vendor-format-notes.md §1b were decoded", op="load")

    cfg, mode = reg(F2_ACT_CFG), reg(_CLAMP_MODE)
    lo_reg, hi_reg = (i32(reg(a)) for a in _CLAMP)
    if tuple(i32(reg(a)) for a in _CLAMP_AGAIN) != (lo_reg, hi_reg):
        raise refuse(f"the second clamp pair {[hex(reg(a)) for a in _CLAMP_AGAIN]} is not the first")
    add_back = i32(reg(_EW_ADD))
    bn = _bn_words(lowering, out)
    if activation == "LeakyRelu":
        if cfg != _ACT_LEAKY or mode != _MODE_PLAIN or (lo_reg, hi_reg) != (_INT_MIN, _INT_MAX) or add_back:
            raise refuse("not the LeakyRelu layout (ACT_CFG 0x402, no clamp, no add)")
        if bn is None:
            raise refuse(f"no slope tensor {out.name + '_BnCfg_BNcfgTensor'!r}")
        # word 0: round(alpha * 2^14) as an int32 (a negative slope, Abs's -1, sign-extends into the
        # second int16; corpus conv_abs_rk3576 / conv_abs_rv1126b)
        halves, slope = bn.view("<i2"), int(bn.view("<i4")[0])
        if not (0 < abs(slope) < 1 << 15) or np.any(halves[2:]):
            raise refuse(f"the slope tensor holds {halves.tolist()}, not one slope round(alpha * 2^14) then zeros")
        return {"alpha": slope / float(_MUL_ONE)}
    if activation != "Clip":
        raise refuse("no fused-activation layout is known for this op")
    if cfg == _ACT_CLAMP and mode == _MODE_PLAIN and lo_reg == 0 and 0 < hi_reg < _INT_MAX and not add_back:
        _, _, mul = lowering.bias_blocks(node, x, out, b, channels)
        return clamp_from_zero(hi_reg, unit, mul, refuse)
    if cfg == _ACT_CLAMP_SHIFTED and mode == _MODE_SHIFTED and lo_reg == 0 and 0 < hi_reg < _INT_MAX:
        words = None if bn is None else bn.view("<i4")
        if words is None or words[0] != -add_back or words[4] != -add_back or np.any(np.delete(words, (0, 4))):
            raise refuse(f"the add-before-clamp words {None if words is None else words.tolist()} are not "
                         f"-EW_ADD ({-add_back}) at words 0 and 4")
        return shifted_clamp(add_back, hi_reg, unit)
    raise refuse("not a clamp layout (ACT_CFG 0x902 with CLAMP_MIN 0, or 0x920 with CLAMP_MODE 0x241c0)")


def clamp_from_zero(hi_reg: int, unit: float, mul: np.ndarray, refuse) -> Dict[str, float]:
    """``{"min": 0, "max": hi}`` of an int8 clamp from 0 to ``CLAMP_MAX`` = ``hi_reg``, which
    counts in **channel 0's** raw accumulator unit: ``unit * mul[0] / 2^14`` (``mul``: the bias
    blocks' channel multipliers, normalised to a largest of 2^14; module doc).  Shared by the
    rk3576/rv1126b and rk3562 (:mod:`.t4act`) maps; ``refuse(what)`` makes their error."""
    if mul.max() != _MUL_ONE or mul[0] <= 0:
        raise refuse(f"the channel multipliers {mul.tolist()} are not normalised to a largest of 2^14")
    unit0 = unit * float(mul[0]) / _MUL_ONE
    return {"min": 0.0, "max": shortest_decimal(hi_reg * unit0, lambda c: round(c / unit0) == hi_reg)}


def shifted_clamp(add_back: int, hi_reg: int, unit: float) -> Dict[str, float]:
    """``{"min": lo, "max": hi}`` of an int8 shifted clamp: ``x - add_back`` clamped to
    ``[0, hi_reg]``, then ``+ add_back``, all in accumulator units ``unit`` (module doc)."""
    lo = shortest_decimal(add_back * unit, lambda c: round(c / unit) == add_back)
    hi = shortest_decimal(lo + hi_reg * unit, lambda c: round((c - lo) / unit) == hi_reg)
    return {"min": lo, "max": hi}


def _bn_words(lowering, out) -> Optional[np.ndarray]:
    """The meaningful first 32 bytes of ``<output>_BnCfg_BNcfgTensor`` (``None`` if absent)."""
    found = [t for t in lowering.sg.tensors if t.name == f"{out.name}_BnCfg_BNcfgTensor"]
    if not found:
        return None
    raw = lowering.vf.tensor_data(lowering.sg, found[0])
    if len(raw) < _BN_BYTES:
        raise lowering.error(f"{found[0].name!r} holds {len(raw)} bytes; at least {_BN_BYTES} were expected")
    return np.frombuffer(bytes(raw[:_BN_BYTES]), np.uint8)


def _fp16_hard_sigmoid(lowering, node, out, regs, refuse) -> Dict[str, float]:
    """``{"alpha": a, "beta": b}`` of an fp16 ``ConvHardSigmoid``: its lookup-table index
    ``u = (x + A) * M`` with ``A`` (float32) in words 0 and 4 and ``M`` (float16) in word 8 of
    ``<output>_BnCfg_BNcfgTensor``, so ``alpha = M / 32768`` and ``beta = 0.5 + A * alpha``
    (each the shortest decimal that gives the stored value; the simulator uses the ONNX
    values)."""
    for address, value in {**_LUT_REGISTERS, **_NO_LO_SLOPE}.items():
        if regs.get((TARGET_DPU, address)) != value:
            raise refuse(f"DPU register {address:#x} is not {value:#x} (the lookup-table layout)")
    name = f"{out.name}_BnCfg_BNcfgTensor"
    words = cfg_words(lowering, name, f"{lowering.label}: {node.label}")
    if words is None:
        raise refuse(f"no index-map tensor {name!r}")
    bits = words.view("<u4")
    add, scale = f32(int(bits[0])), float(np.frombuffer(struct.pack("<H", int(bits[8]) & 0xFFFF), "<f2")[0])
    if bits[4] != bits[0] or bits[8] >> 16 or not (np.isfinite(add) and np.isfinite(scale) and scale > 0) or \
            np.any(np.delete(bits, (0, 4, 8))):
        raise refuse(f"the index-map words {[hex(v) for v in bits.tolist()]} are not A (float32), 0, 0, 0, A, 0, 0, 0, "
                     "M (float16), then zeros")
    return hard_sigmoid_of(add, scale)


#: HardSigmoid slopes exporters write: PyTorch's ``Hardsigmoid`` (1/6, as the float32 attribute
#: ONNX stores) and ONNX's default (0.2); the shortest decimal that gives 1/6's stored bits is
#: 0.1666, which moves a quarter of a float16 SE gate's values by an ulp
_HARD_SIGMOID_SLOPES = (float(np.float32(1 / 6)), 0.2)


def hard_sigmoid_slope(scale: float) -> float:
    """A float16 HardSigmoid's ``alpha`` from its lookup-table index scale ``scale`` (the float16
    ``alpha * 32768``, every register map): an exporter's usual slope when it gives those bits,
    else the shortest decimal that does (the simulator uses the ONNX value)."""
    return shortest_decimal(scale / 32768, lambda a: float(np.float16(a * 32768)) == scale, _HARD_SIGMOID_SLOPES)


def hard_sigmoid_of(add: float, scale: float) -> Dict[str, float]:
    """``{"alpha": a, "beta": b}`` of a HardSigmoid whose lookup-table index is
    ``u = (x + add) * scale`` (``scale`` the float16 ``a * 32768``, ``add`` the float32
    ``(b - 0.5) / a``), each the shortest decimal that gives the stored value (the simulator
    uses the ONNX values).  Shared by the rk3576/rv1126b and rk3562 (:mod:`.t4act`) maps."""
    alpha = hard_sigmoid_slope(scale)
    # the stored A is within a float32 ulp or two of (beta - 0.5) / alpha (-0.33333337 for (0.3, 0.4))
    ulps = 2 * float(np.spacing(np.float32(abs(add)))) if add else 0.0
    beta = shortest_decimal(0.5 + add * alpha, lambda b: abs(float(np.float32((b - 0.5) / alpha)) - add) <= ulps)
    return {"alpha": alpha, "beta": beta}


def _mirrored(bits: int) -> int:
    """The first clamp pair's float32 bits for a bound with float32 bits ``bits`` (module doc):
    unchanged when non-negative, else the sign kept and the magnitude's bits subtracted from
    0x80000000."""
    if not bits >> 31:
        return bits
    return 0x80000000 | ((0x80000000 - (bits & 0x7FFFFFFF)) & 0x7FFFFFFF)


def f2_fp16_activation(lowering, node, activation: str, out) -> Dict[str, float]:
    """``{"alpha": slope}`` (``LeakyRelu``, the stored float16), ``{"min": lo, "max": hi}``
    (``Clip``, the stored float32 bounds) or ``{"alpha": a, "beta": b}`` (``HardSigmoid``, from
    its index map): the ``activation`` fused into an fp16 conv or deconv of an rk3576/rv1126b
    file (see the module doc).  ``lowering``: the ``_Lowering`` of :mod:`.lower`; ``out``: the conv's
    output tensor.  Reads the node's registers and, for a LeakyRelu, the first 16 bytes of
    ``<output>_BsCfg_BScfgTensor`` (a HardSigmoid: of ``<output>_BnCfg_BNcfgTensor``); copies
    nothing else.

    Raises:
        ModelInvalidError: a register or tensor word outside the observed layout, or an op
            whose fp16 layout was not decoded on these platforms, naming it.
    """
    where = f"{lowering.label}: {node.label}"
    regs = node_registers(lowering.regcmd(), lowering.tasks(), node.index, where)
    shown_regs = (F2_ACT_CFG,) + _CLAMP + _CLAMP_AGAIN + (_CLAMP_MODE, _EW_ADD)

    reg = dpu_reader(regs, where, "(rk3576 register map)")

    def refuse(what: str) -> ModelInvalidError:
        shown = ", ".join(f"{a:#x}={regs.get((TARGET_DPU, a), 0):#x}" for a in shown_regs)
        return ModelInvalidError(f"{where}: fp16 {node.op} on rk3576/rv1126b: {what} ({shown}); only the layouts "
                                 "in docs/vendor-format-notes.md §1b were decoded", op="load")

    if activation == "HardSigmoid":
        return _fp16_hard_sigmoid(lowering, node, out, regs, refuse)
    if activation not in ("LeakyRelu", "Clip"):
        raise refuse("no fused-activation layout of an fp16 file is known for this op on these platforms")
    cfg, mode, add_back = reg(F2_ACT_CFG), reg(_CLAMP_MODE), reg(_EW_ADD)
    first, second = tuple(reg(a) for a in _CLAMP), tuple(reg(a) for a in _CLAMP_AGAIN)
    if mode != _MODE_PLAIN or add_back:
        raise refuse("not the plain clamp mode 0x10041c1 without an add-back")
    if activation == "LeakyRelu":
        if cfg not in (_ACT_PLAIN, _ACT_FP16_BN_LEAKY) or first != _F32_NO_CLAMP or second != _F32_NO_CLAMP:
            raise refuse("not a LeakyRelu layout (ACT_CFG 0x903 or 0xc02, no clamp)")
        name = f"{out.name}_BsCfg_BScfgTensor" if cfg == _ACT_PLAIN else f"{out.name}_BnCfg_BNcfgTensor"
        found = [t for t in lowering.sg.tensors if t.name == name]
        if not found:
            raise refuse(f"no slope tensor {name!r}")
        raw = bytes(lowering.vf.tensor_data(lowering.sg, found[0])[:2 * _BS_WORDS])
        if len(raw) < 2 * _BS_WORDS:
            raise refuse(f"{name!r} holds {len(raw)} bytes; at least {2 * _BS_WORDS} were expected")
        # word 0: the float16 slope's bits, sign-extended to 32 bits (0xFFFF after a negative one: Abs)
        words = np.frombuffer(raw, "<u2")
        slope = float(np.frombuffer(raw[:2], "<f2")[0])
        extension = 0xFFFF if words[0] & 0x8000 else 0
        if not (np.isfinite(slope) and slope != 0) or words[1] != extension or np.any(words[2:]):
            raise refuse(f"the slope tensor {name!r} starts {words.tolist()}, not one float16 slope (sign-extended "
                         "to 32 bits) then zeros")
        return {"alpha": slope}
    lo, hi = (f32(v) for v in second)
    if cfg != _ACT_CLAMP or not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        raise refuse("not the clamp layout (ACT_CFG 0x902, finite float32 bounds lo <= hi)")
    if first != tuple(_mirrored(v) for v in second):
        raise refuse(f"the first clamp pair is not the second with its negative bounds mirrored "
                     f"({[hex(_mirrored(v)) for v in second]})")
    return {"min": lo, "max": hi}


#: ACT_CFG (0x4060) of a lookup-table task
F2_ACT_LUT = 0x20
_MODE_LUT, _LUT_CFG = 0x01004140, 0x02000006
_LUT_INFO = 0x410C
_LUT_START, _LUT_END = (0x4110, 0x4114, 0x4118, 0x411C), (0x4140, 0x4144, 0x4148, 0x414C)
#: the slopes outside the tables, each value in four copies: the LE table's underflow (16-bit
#: scales in 0x4150/0x4154, 8-bit shifts in 0x4160) and the LO table's overflow (0x4170/0x4174, 0x4184)
_LE_UFLOW, _LO_OFLOW = ((0x4150, 0x4154), 0x4160), ((0x4170, 0x4174), 0x4184)
_LUT_LOW, _LUT_HIGH = (0x4188, 0x418C), (0x4190, 0x4194)
_CFG_BYTES = 64
#: the fixed registers of a lookup-table task
_LUT_REGISTERS = {F2_ACT_CFG: F2_ACT_LUT, _CLAMP_MODE: _MODE_LUT, 0x4108: _LUT_CFG, _EW_ADD: 0}
#: an fp16 HardSigmoid's index-map task sets no LO overflow slope
_NO_LO_SLOPE = {a: 0 for a in (*_LO_OFLOW[0], _LO_OFLOW[1])}
#: OUT_CVT scale bit 16 on a DPU-only task: the input comes through the element-wise path
_EW_INPUT = 0x10000


def _pair(value: int) -> int:
    """``value`` (an int16) in both halves of a 32-bit word."""
    return (value & 0xFFFF) * 0x10001


def _table_stage(lowering, out, regs, tables: LutTables, refuse, where: str) -> LutStage:
    """The lookup-table registers of an rk3576/rv1126b task (conv or DPU-only) and the index
    map words of ``<output>_BnCfg_BNcfgTensor`` as a ``LutStage``: ``u = (y * M + A * M) / 2^s``,
    the ranges, the slopes outside them (module doc).  ``tables``: the node's tables, whose end
    entries the registers repeat; ``refuse(what)`` makes the caller's error."""
    reg = dpu_reader(regs, where, "(rk3576 register map)")
    expected = dict(_LUT_REGISTERS)
    expected.update({_LUT_LOW[0]: (int(tables.le[0]) & 0xFFFF) << 16, _LUT_LOW[1]: _pair(int(tables.le[0])),
                     _LUT_HIGH[0]: (int(tables.lo[-1]) & 0xFFFF) << 16, _LUT_HIGH[1]: _pair(int(tables.lo[-1]))})
    for address, value in expected.items():
        if reg(address) != value:
            raise refuse(f"DPU register {address:#x} = {reg(address):#x}, not {value:#x}")
    info = reg(_LUT_INFO)
    spacing = (info >> 8) & 0xFF
    if info & ~0xFFFF00 or (info >> 16) & 0xFF != spacing or not 0 < spacing < 16:
        raise refuse(f"LUT_INFO 0x410c = {info:#x} is not one entry spacing 2^k in bits 8..15 and 16..23")
    starts, ends = {i32(reg(a)) for a in _LUT_START}, {i32(reg(a)) for a in _LUT_END}
    if len(starts) != 1 or len(ends) != 1:
        raise refuse(f"the range registers 0x4110..0x411c {sorted(starts)} / 0x4140..0x414c {sorted(ends)} are not "
                     "one start and one end, four times each")
    start, end = starts.pop(), ends.pop()
    middle = start + (len(tables.le) - 1 << spacing)
    slopes = []
    for (scales, shifts), name in ((_LE_UFLOW, "LE underflow"), (_LO_OFLOW, "LO overflow")):
        scale, shift = reg(scales[0]) & 0xFFFF, reg(shifts) & 0xFF
        if any(reg(a) != _pair(scale) for a in scales) or reg(shifts) != shift * 0x01010101 or shift > 31:
            raise refuse(f"the {name} slope registers {[hex(reg(a)) for a in (*scales, shifts)]} are not one 16-bit "
                         "scale and one shift, four copies each")
        slopes.append(i16(scale) / float(1 << shift))
    stage_words = cfg_words(lowering, f"{out.name}_BnCfg_BNcfgTensor", where)
    if stage_words is None:
        raise refuse(f"no index-map tensor {out.name + '_BnCfg_BNcfgTensor'!r}")
    add, mul, shifts = int(stage_words[0]), int(stage_words[8]), int(stage_words[12])
    shift = shifts & 0xFF
    if stage_words[4] != add or not 0 < mul < 1 << 16 or shifts != shift * 0x101 or not 0 < shift < 32 or \
            np.any(np.delete(stage_words, (0, 4, 8, 12))):
        raise refuse(f"the index-map words {stage_words.tolist()} are not A, 0, 0, 0, A, 0, 0, 0, M, 0, 0, 0, "
                     "s | s << 8 (zeros elsewhere)")
    return LutStage(mul, add * mul, shift, start, middle, middle, end, spacing, slopes[0], slopes[1])


def _out_cvt(reg, refuse, ew_input: bool) -> Tuple[int, int, int]:
    """``(offset, scale, shift)`` of the task's OUT_CVT (0x40ac..0x40b4); ``ew_input``: an
    input through the element-wise path (a DPU-only task, a residual conv), whose scale has
    bit 16 set."""
    offset, scale, out_shift = (reg(a) for a in F2_OUT_CVT)
    flag = _EW_INPUT if ew_input else 0
    if scale & ~0xFFFF != flag or not 0 < scale & 0xFFFF or out_shift >= 64:
        raise refuse(f"OUT_CVT scale/shift {scale:#x}/{out_shift:#x} (0x40b0/0x40b4) are not a 16-bit scale"
                     f"{' with bit 16 set' if ew_input else ''} and a shift")
    return i32(offset), scale & 0xFFFF, out_shift


def f2_lut_stage(lowering, node, out, tables: LutTables, activation: str) -> Tuple[LutStage, Requant]:
    """The index map and output conversion of an int8 lookup-table conv of an rk3576/rv1126b
    file (see the module doc), in the terms of :mod:`.lut`: a ``LutStage`` (index
    ``u = (y * M + A * M) / 2^s``, ranges, slopes outside them) and a ``Requant`` (the
    ``OUT_CVT`` of the table value, the channel multipliers' shift ``k``; a conv of one output
    channel has a plain int32 bias instead, and its weight zero point in its ``BScfgTensor``:
    :func:`f2_plain_weight_zero_point`).  ``tables``: the
    node's tables (:func:`.lut.read_lut_tables`), whose end entries the registers repeat;
    ``activation``: the fused one (``lower``'s names), for :func:`f2_truncation`.  Reads the
    node's registers and the first 64 bytes of two tensors.

    Raises:
        ModelInvalidError: a register or tensor word outside the observed layout, naming it.
    """
    where = f"{lowering.label}: {node.label}"
    regs = node_registers(lowering.regcmd(), lowering.tasks(), node.index, where)
    truncated = f2_truncation(regs, where, activation)

    def refuse(what: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: int8 lookup-table {node.op} on rk3576/rv1126b: {what}; only the layout in "
                                 "docs/vendor-format-notes.md §1b was decoded", op="load")

    # one output channel: a plain int32 bias, no multiplier stage (one_channel_lut_*)
    layout = f2_bias_layout(regs, where, plain=len(out.shape) == 4 and out.shape[1] == 1)
    stage = _table_stage(lowering, out, regs, tables, refuse, where)
    offset, scale, out_shift = _out_cvt(dpu_reader(regs, where, "(rk3576 register map)"), refuse, ew_input=False)
    if layout == _PLAIN_BIAS:
        if truncated:
            raise refuse(f"a one-channel conv (a plain int32 bias) whose accumulator is truncated by {truncated} bits "
                         f"(CORE {F2_TRUNCATE:#x})")
        return stage, Requant(scale, out_shift, None, offset, False, f2_plain_weight_zero_point(lowering, out, where))
    bs_words = cfg_words(lowering, f"{out.name}_BScfgTensor", where)
    if bs_words is None:
        raise refuse(f"no tensor {out.name + '_BScfgTensor'!r}")
    mul_shift = int(bs_words[0]) & 0xFF
    if bs_words[0] != mul_shift * 0x101 or not 0 < mul_shift < 32 or np.any(bs_words[1:4]):
        raise refuse(f"{out.name + '_BScfgTensor'!r} starts {bs_words[:4].tolist()}, not k | k << 8 then zeros")
    return stage, Requant(scale, out_shift, mul_shift, offset, truncated=truncated)


def f2_lut_task(lowering, node, out, regs: Dict[Tuple[int, int], int], tables: LutTables) -> Tuple[LutStage, Requant]:
    """The index map and output conversion of rk3576/rv1126b's DPU-only lookup-table task (a
    standalone int8 Sigmoid or exSwish; ``regs``: the task's ``{(target, reg): value}``): the
    table registers and index-map words of a lookup-table conv (``u = ((q + A) * M) >> s`` on
    the input's raw codes; module doc), no channel multipliers (no ``BScfgTensor``), and
    OUT_CVT with 0x40b0 bit 16 set (the input comes through the element-wise path).  For
    :func:`.lut.lower_lut_sigmoid`'s ``decode``.

    Raises:
        ModelInvalidError: a register or tensor word outside the observed layout, naming it.
    """
    where = f"{lowering.label}: {node.label}"

    def refuse(what: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: int8 lookup-table {node.op} (a DPU-only task) on rk3576/rv1126b: {what}; "
                                 "only the layout in docs/vendor-format-notes.md §1b was decoded", op="load")

    stage = _table_stage(lowering, out, regs, tables, refuse, where)
    offset, scale, out_shift = _out_cvt(dpu_reader(regs, where, "(rk3576 register map)"), refuse, ew_input=True)
    return stage, Requant(scale, out_shift, None, offset, False, 0)


def cfg_words(lowering, name: str, where: str) -> Optional[np.ndarray]:
    """The first 16 int32 words of constant tensor ``name`` (``None`` if absent): the
    ``*_BnCfg_BNcfgTensor`` / ``*_BScfgTensor`` words these platforms keep beside their
    registers; the rest of such a tensor is uninitialised memory."""
    found = [t for t in lowering.sg.tensors if t.name == name]
    if not found:
        return None
    raw = lowering.vf.tensor_data(lowering.sg, found[0])
    if len(raw) < _CFG_BYTES:
        raise ModelInvalidError(f"{where}: {name!r} holds {len(raw)} bytes; at least {_CFG_BYTES} were expected",
                                op="load")
    return np.frombuffer(bytes(raw[:_CFG_BYTES]), "<i4")

