"""rv1106/rv1103 ("RKNPU t3") int8 convs: their attributes from the CNA registers and their
requantization and fused activation from the DPU registers.

The graph embedded in an rv1106 container (:data:`rknnlite.model.schema.T3`) gives each node
its type, name and tensors, but no parameter table and no BSON: a conv's stride and padding
are only in the register commands of its task.  Observed on files of RKNN-Toolkit2 2.2.0 to
2.5.0, one attribute varied at a time (``docs/vendor-format-notes.md`` §1e), in rk3588's
register encoding:

* CNA (target 0x0201) ``CONV_CON1`` 0x100c: 0 on a plain conv (0x20000000 on a 1x1 conv of
  stride 2, 0x20008000 | (channels - 1) << 12 on one reading the graph's image input of 1 to 4
  channels: 0x2000a000 for RGB), 7 on a depthwise one.  ``CONV_CON3`` 0x1014: the x stride in
  bits 0..2, the y stride in bits 3..5, the x and y dilations less one in bits 16..20 and
  21..25.  ``PAD_CON0`` 0x1068: the top pad in bits 0..3, the left pad in bits
  8..11; the bottom and right pads follow from the output size (the NPU reads no row or column
  past it; a Pad the compiler folded into a conv pads past its kernel).  ``PAD_CON1`` 0x1184: the
  code it pads with, the input's zero point (a real 0).  0x1038: kernel width << 24 | height << 16 |
  output channels (2 on a depthwise conv; on the image input, rounded up to a multiple of 4 for a
  1x1 kernel, of 2 for a larger one).
  A ConvTranspose's attributes are decoded by :mod:`.deconv_regs` (rk3588's encoding); the older
  releases' depthwise one (a bilinear Resize, conv mode 7) keeps its zero points in the weight, as
  a depthwise conv.
* DPU (target 0x1001): ``OUT_CVT`` offset / scale / shift at rk3588's addresses 0x4080 / 0x4084
  / 0x4088, the scale's bit 16 set on a residual conv.  Per-channel bias blocks of 4 channels
  (0x4050 = 0x30000001) whose multipliers, normalised to 2^14, have that shift in 0x4054
  (0x8e000000: bit 31 and 14 in bits 24..29; rk3588 keeps it in 0x4048 bits 8..13, where rv1106
  writes 1); a depthwise conv keeps its zero points in the weight (0x4050 = 0x70000125, 0x4054
  = 0x0e000000, 0x4048 = 0) and the simulator still applies the multipliers; a deconv fetching the
  graph's image input writes bias blocks with the depthwise form's 0x4048 and 0x4054, the same
  arithmetic (as rk3562's, corpus ``deconv_input_rv110*``).
* ``BN_CFG`` 0x4060: 0x13 on a plain or residual conv (or 0x2 on a residual one whose BN stage shifts
  its accumulator right before the add, the shift in ``BN_MUL``, as rk3562's:
  :func:`.regcmd.residual_bn_shift`, corpus ``tiny_steps_rv110*``), 0x22 with a LeakyRelu (its slope in the
  high half of 0x4068, a signed 16-bit value over 2^14, as rk3588's; a plain conv's multipliers
  normalised to 2^15 or 2^14 as the compiler chose, 0x4054 = 0x8f000000 or 0x8e000000, a depthwise
  one's without bit 31; ``OUT_CVT_SHIFT`` 14
  bits larger for the slope's fraction: corpus ``conv_leaky_rv1106``, ``conv_abs_rv1106``,
  ``depthwise_leaky_rv1106``), 0x12 with a clamp: lower clamps 0x406c
  and 0x40e0 (0 for Relu and Clip from 0, ``INT32_MIN`` otherwise) and upper clamps 0x4028 and
  0x40e4 (``INT32_MAX``, or a Clip's bound in channel 0's accumulator unit); 0x20010 with a Clip
  whose lower bound is not 0 (the same clamps; :func:`t3_clip_low`).  The element-wise
  stage 0x4070 / 0x4078 / 0x407c: off (0x10041c1, 1, ``INT32_MIN``), or adding the residual
  (0x8002c0c0, its scale, then a clamp from 0 for ConvAddRelu).  A lookup-table conv (Sigmoid,
  SiLU, HardSwish, HardSigmoid, GELU, Tanh) writes ``BN_CFG`` 0x20000 and ``EW_CFG`` 0x1004140,
  and rk3588's table registers (``LUT_CFG`` 0x68) with rk3562's index map ``((y + A) * M) >> s``.

Every other value of those registers is refused by name: a register variant that was never
checked against the simulator could produce numbers, and wrong numbers are worse than none.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, Optional, Sequence, Tuple

from ...errors import ModelInvalidError
from .lut import LutStage, lut_stage
from .regcmd import (BN_MUL, LEAKY_SLOPE_BITS, REG_CNA_PAD_CON1, T3_CORE_TRUNCATE, T4_BN_SHIFT, TARGET_CNA, TARGET_DPU,
                     Requant, core_truncation, i16, i32, int8_leaky_slope, residual_bn_shift, signed, slope_decimal,
                     task_register)

__all__ = ["T3_NPU", "T3_BN_LUT", "t3_alu_operand", "t3_conv_params", "requant_t3", "t3_check_convert_task",
           "t3_clip_bound", "t3_clip_low", "t3_leaky_slope", "t3_lut_stage", "t3_lut_task", "t3_prelu_slope",
           "t3_standalone_clip", "t3_standalone_leaky_slope"]


#: the npu target the files of these registers name (Model slot 1)
T3_NPU = "RKNPU t3"

_CONV_CON1 = 0x100C
#: CONV_CON1 of a plain conv: conv mode 0 in bits 0..3, int8 in bits 4..9; bit 29 is set on a 1x1
#: conv of stride 2 and on a conv reading the graph's image input, which also sets bit 15 and the
#: image's channels less one in bits 12..13 (how the input is fetched; rk3588 writes 0x6000a000 for
#: 3 channels): per channel count, corpus image_channels*_rv1106
_PLAIN_CON1 = (0x0, 0x20000000)
_IMAGE_CON1 = {channels: 0x20008000 | (channels - 1) << 12 for channels in (1, 2, 3, 4)}
#: a conv on the image input (CONV_CON1 bit 15) writes its output channels rounded up in 0x1038's low
#: bits: to a multiple of 4 for a 1x1 kernel (the compiler's own mean/std conv on an RGB image: 4), to a
#: multiple of 2 for a larger one (seen: 1 -> 4 and 2, 5 -> 8 and 6, 9 -> 12, 17 -> 18; 3x3, 5x5, 7x7)
_IMAGE_LANES_1X1, _IMAGE_LANES = 4, 2
#: CONV_CON1 of a depthwise conv (conv mode 7), whose 0x1038 holds 2 where a plain one has its
#: output channels; with bit 29 as a plain conv's on a 1x1 one of stride 2 (random graph 154 of
#: 2.5.0, corpus depthwise_stride2_rv110*)
_DEPTHWISE_CON1, _DEPTHWISE_KERNELS = (0x7, 0x20000007), 2
#: CONV_CON1 of the compiler's depthwise 1x1 conv on a graph input of 8 or 16 channels whose first op
#: is no conv (unnamed, weight ``Pre_weight<input>``: conv mode 3, 0x1038 low bits 1; its weight the
#: tiles alone, a plain int32 bias, zero point 0: random graphs, corpus input_depthwise_rv110*)
_INPUT_DEPTHWISE_CON1, _INPUT_DEPTHWISE_KERNELS = 0x3, 1
_CONV_CON3 = 0x1014
_KERNEL = 0x1038
_PAD_CON0 = 0x1068
_STRIDE_BITS = 0x3F
#: CONV_CON3's dilations less one: x in bits 16..20, y in bits 21..25
_DILATION_X, _DILATION_Y, _DILATION_BITS = 16, 21, 0x1F
_PAD_BITS = 0x0F0F

_OUT_CVT_OFFSET, _OUT_CVT_SCALE, _OUT_CVT_SHIFT = 0x4080, 0x4084, 0x4088
_OUT_CVT_RESIDUAL = 0x10000  # OUT_CVT_SCALE bit 16, set on the residual convs (as rk3562's)
_BN_CFG = 0x4060
#: ``BN_CFG`` of a conv whose output indexes the lookup table (rk3588: 0x20040; rk3562's value)
T3_BN_LUT = 0x20000
_INT32_MIN, _INT32_MAX = 0x80000000, 0x7FFFFFFF
#: the DPU values every decoded conv writes: plain (bias blocks with the weight zero points, the
#: multipliers' shift 14 in 0x4054 with bit 31) and depthwise (the zero points in the weight, bit 31
#: clear; the simulator still applies the multipliers)
_FIXED = {False: {0x4048: 0x1, 0x404C: _INT32_MIN, 0x4050: 0x30000001, 0x4054: 0x8E000000},
          True: {0x4048: 0x0, 0x404C: _INT32_MIN, 0x4050: 0x70000125, 0x4054: 0x0E000000}}
#: a conv with a plain int32 bias (one output channel, e.g. YOLOv8's DFL; per-layer quantization):
#: no multiplier stage, 0x4054 = bit 31 | minus the weight zero point (16 bits: rk3588's BS_ALU_SRC)
_PLAIN_BIAS = {0x4048: 0x0, 0x404C: _INT32_MIN, 0x4050: 0x30000002}
#: the compiler's depthwise conv on a graph input (CONV_CON1 3): a plain int32 bias, no multiplier
#: stage, weight zero point 0 (rk3562's 0x126 for it); a one-channel deconv in conv mode 3 writes the
#: same, its weight zero point in its tile's spare lanes (corpus deconv_one_channel_rv110*)
_INPUT_DEPTHWISE = {0x4048: 0x0, 0x404C: _INT32_MIN, 0x4050: 0x70000126, 0x4054: 0x0}
_ALU_SRC, _ALU_SRC_FLAG = 0x4054, 0x80000000
#: a deconv fetching the graph's image input: bias blocks, the multiplier stage as a depthwise conv's
_INPUT_DECONV = {0x4048: 0x0, 0x404C: _INT32_MIN, 0x4050: 0x30000001, 0x4054: 0x0E000000}
#: a plain-bias conv's 0x4054 operand, minus the weight zero point: 17-bit two's complement (0x1ffe6 for
#: a zero point of 26; 0x80 for -128)
_OPERAND_BITS = 17
_MUL_SHIFT = 14
#: a LeakyRelu or PRelu conv's 0x4054, per depthwise or not: the multipliers' shift in bits 24..29,
#: 14 to 29 as the compiler chose (corpus conv_leaky_rv1106 15, classifier_heads_rv110* 14,
#: standalone_prelu_rv110* and depthwise_prelu_rv110* both; 16 on small multipliers, a 7x7 conv of 3136
#: inputs, prelu_shift16_rv110*, and a split GlobalAveragePool's depthwise conv with a fused Abs, random
#: graph 135; 22 and 23 on convs of a tiny weight channel under a large bias, truncated_convs_rv1106, and
#: 17 to 29 in 11 stressed random graphs of 2.5.0, refused until 2026-12-07: each within one step of the
#: simulator), bit 31 on a plain conv; OUT_CVT_SHIFT counts the slope's LEAKY_SLOPE_BITS fraction bits too
_SLOPE_ALU_SRC = {depthwise: tuple((0 if depthwise else _ALU_SRC_FLAG) | shift << 24 for shift in range(14, 30))
                  for depthwise in (False, True)}
#: a PRelu conv's BN_MUL 0x4068: per-channel slopes read from memory (the stored int16 slopes),
#: else one slope in rk3588's LeakyRelu form
_PRELU_PER_CHANNEL = 0x1
_CLAMP_LOW = (0x406C, 0x40E0)
_CLAMP_HIGH = (0x4028, 0x40E4)
_NO_CLAMP = {**{a: _INT32_MIN for a in _CLAMP_LOW}, **{a: _INT32_MAX for a in _CLAMP_HIGH}}
#: the element-wise stage: off (EW_CFG 0x10041c1, a unit scale), or adding the residual input
#: (0x8002c0c0; its conversion scale in 0x4078 is the tensors' business), then clamped from 0 after
#: the add (ConvAddRelu: 0x407c = 0) or not (INT32_MIN)
_EW_CFG, _EW_SCALE, _EW_CLAMP_MIN = 0x4070, 0x4078, 0x407C
_EW_OFF = {_EW_CFG: 0x010041C1, _EW_SCALE: 0x1, _EW_CLAMP_MIN: _INT32_MIN}
_EW_ADD = {_EW_CFG: 0x8002C0C0, _EW_SCALE: None}
#: BN_CFG of a ConvClip from 0, and of one whose lower bound is not 0 (t3_clip_low)
_CLIP_FROM_ZERO, _CLIP_BELOW_ZERO = 0x12, 0x20010
#: where the compiler writes such a Clip's lower bound truncated to an integer, and negated
_CLIP_LOW, _CLIP_LOW_NEGATED = 0x4064, 0x4018
#: per fused activation, BN_CFG, the clamps and the element-wise stage (None: a value read
#: elsewhere: a Clip's upper bound by t3_clip_bound, the residual's scale from the tensors)
_ACTIVATION = {None: {_BN_CFG: 0x13, **_NO_CLAMP, **_EW_OFF},
               "Relu": {_BN_CFG: 0x12, **_NO_CLAMP, **{a: 0 for a in _CLAMP_LOW}, **_EW_OFF},
               "Clip": {_BN_CFG: (_CLIP_FROM_ZERO, _CLIP_BELOW_ZERO), **{a: 0 for a in _CLAMP_LOW},
                        **{a: None for a in _CLAMP_HIGH}, **_EW_OFF},
               "LeakyRelu": {_BN_CFG: 0x22, **_NO_CLAMP, **_EW_OFF},
               "PRelu": {_BN_CFG: 0x22, **_NO_CLAMP, **_EW_OFF},
               "Add": {_BN_CFG: (0x13, T4_BN_SHIFT), **_NO_CLAMP, **_EW_ADD, _EW_CLAMP_MIN: _INT32_MIN},
               "AddRelu": {_BN_CFG: (0x13, T4_BN_SHIFT), **_NO_CLAMP, **_EW_ADD, _EW_CLAMP_MIN: 0},
               # the accumulator indexes the lookup table (_table_stage); the element-wise stage
               # bypassed another way
               **{lut: {_BN_CFG: T3_BN_LUT, **_NO_CLAMP, **_EW_OFF, _EW_CFG: 0x01004140}
                  for lut in ("Sigmoid", "Swish", "HardSwish", "HardSigmoid", "Gelu", "Tanh")}}


def _reg(regs: Dict[Tuple[int, int], int], target: int, address: int, where: str) -> int:
    return task_register(regs, target, address, where, "(rv1106 map)")


def _expect(regs: Dict[Tuple[int, int], int], fixed: Dict[int, object], where: str, what: str) -> None:
    """Refuse a DPU register of ``fixed`` (address -> the value observed, a tuple of the values
    observed, or ``None``: read elsewhere) that holds another value, naming it and ``what`` it is in."""
    for address, expected in fixed.items():
        value = _reg(regs, TARGET_DPU, address, where)
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if expected is not None and value not in allowed:
            raise ModelInvalidError(f"{where}: DPU register {address:#x} = {value:#x} in an rv1106 {what}; only "
                                    f"{' or '.join(hex(v) for v in allowed)} was observed and decoded", op="load")


def t3_conv_params(regs: Dict[Tuple[int, int], int], w_shape: Sequence[int], x_shape: Sequence[int],
                   out_shape: Sequence[int], zero_point: int, where: str) -> Dict[str, object]:
    """The ONNX attributes of an rv1106 conv (``kernel_shape``, ``pads``, ``strides``,
    ``dilations``, ``group``) from its CNA registers (``regs``: :func:`.regcmd.node_registers`),
    its weight's model shape ``[O, I, kh, kw]`` and its input and output NCHW shapes.

    Raises:
        ModelInvalidError: a grouped (not depthwise) conv, a register value outside
            the decoded fields, or registers that disagree with the tensors' shapes.
    """
    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message} (rv1106 map: docs/vendor-format-notes.md)", op="load")

    if len(w_shape) != 4 or len(x_shape) != 4 or len(out_shape) != 4:
        raise refuse(f"weight {list(w_shape)}, input {list(x_shape)} and output {list(out_shape)} are not all 4-D")
    con1 = _reg(regs, TARGET_CNA, _CONV_CON1, where)
    channels = x_shape[1]
    image = con1 in _IMAGE_CON1.values()
    depthwise = con1 in _DEPTHWISE_CON1 + (_INPUT_DEPTHWISE_CON1,)
    if con1 not in _PLAIN_CON1 and not image and not depthwise:
        plain = ", ".join(map(hex, _PLAIN_CON1 + tuple(_IMAGE_CON1.values())))
        raise refuse(f"CNA_CONV_CON1 ({_CONV_CON1:#x}) = {con1:#x}: only plain convs ({plain}) and depthwise ones "
                     f"({', '.join(map(hex, _DEPTHWISE_CON1))}, the compiler's on an input "
                     f"{_INPUT_DEPTHWISE_CON1:#x}) were decoded")
    if image and _IMAGE_CON1.get(channels) != con1:
        raise refuse(f"CNA_CONV_CON1 ({_CONV_CON1:#x}) = {con1:#x} fetches an image of {(con1 >> 12 & 3) + 1} "
                     f"channels; the conv's input has {channels}")
    if depthwise and not (w_shape[0] == 1 and w_shape[1] == channels == out_shape[1]):
        raise refuse(f"a depthwise conv (CNA_CONV_CON1 {con1:#x}) with weight {list(w_shape)} from {channels} to "
                     f"{out_shape[1]} channels; a [1, C, kh, kw] weight on C channels was expected")
    con3 = _reg(regs, TARGET_CNA, _CONV_CON3, where)
    if con3 & ~(_STRIDE_BITS | _DILATION_BITS << _DILATION_X | _DILATION_BITS << _DILATION_Y):
        raise refuse(f"CNA_CONV_CON3 ({_CONV_CON3:#x}) = {con3:#x} sets bits beyond the strides and dilations")
    stride_x, stride_y = con3 & 7, (con3 >> 3) & 7
    dilation_x, dilation_y = ((con3 >> shift & _DILATION_BITS) + 1 for shift in (_DILATION_X, _DILATION_Y))
    pad = _reg(regs, TARGET_CNA, _PAD_CON0, where)
    if pad & ~_PAD_BITS:
        raise refuse(f"CNA_PAD_CON0 ({_PAD_CON0:#x}) = {pad:#x} sets bits beyond the top and left pads")
    top, left = pad & 0xF, (pad >> 8) & 0xF
    pad_value = _reg(regs, TARGET_CNA, REG_CNA_PAD_CON1, where)
    if pad_value != zero_point & 0xFFFF:
        raise refuse(f"CNA register {REG_CNA_PAD_CON1:#x} = {pad_value:#x}: the conv pads its input with code "
                     f"{i16(pad_value & 0xFFFF)}, not with its zero point {zero_point} (a real 0; a Pad of another "
                     "value the compiler folded into the conv was not decoded)")
    channels_out, _, kh, kw = w_shape
    kernel = _reg(regs, TARGET_CNA, _KERNEL, where)
    low = channels_out if not depthwise else \
        _INPUT_DEPTHWISE_KERNELS if con1 == _INPUT_DEPTHWISE_CON1 else _DEPTHWISE_KERNELS
    if image:  # the output lanes of a conv on the image input: its channels rounded up
        step = _IMAGE_LANES_1X1 if kh == kw == 1 else _IMAGE_LANES
        low = -(-channels_out // step) * step
    if kernel != (kw << 24 | kh << 16 | low):
        raise refuse(f"register {_KERNEL:#x} = {kernel:#x} is not the weight's kernel {kh}x{kw} and {low} "
                     f"({'depthwise' if depthwise else 'output channels'})")
    if min(stride_x, stride_y) < 1:
        raise refuse(f"CNA_CONV_CON3 ({_CONV_CON3:#x}) = {con3:#x} gives a stride of 0")
    # the fewest bottom/right pads that give the output size (rows past the last window are never read);
    # less than the kernel, but on a 1x1 conv: RKNN-Toolkit2 2.3.0 folds a constant Pad into a ReduceSum's
    # 1x1 conv (random graphs), whose padding, as any conv's, is the input's zero point (0x1184, above)
    span_y, span_x = (kh - 1) * dilation_y + 1, (kw - 1) * dilation_x + 1
    bottom = max(0, (out_shape[2] - 1) * stride_y + span_y - x_shape[2] - top)
    right = max(0, (out_shape[3] - 1) * stride_x + span_x - x_shape[3] - left)
    folded = kh == kw == 1
    if (x_shape[2] + top + bottom - span_y) // stride_y + 1 != out_shape[2] or (bottom >= span_y and not folded) or \
            (x_shape[3] + left + right - span_x) // stride_x + 1 != out_shape[3] or (right >= span_x and not folded):
        raise refuse(f"a {kh}x{kw} conv with strides ({stride_y}, {stride_x}), dilations ({dilation_y}, "
                     f"{dilation_x}) and top/left pads ({top}, {left}) cannot map input {list(x_shape[2:])} to "
                     f"output {list(out_shape[2:])}")
    return {"kernel_shape": [kh, kw], "pads": [top, left, bottom, right], "strides": [stride_y, stride_x],
            "dilations": [dilation_y, dilation_x], "group": channels if depthwise else 1, "auto_pad": "NOTSET"}


def requant_t3(regs: Dict[Tuple[int, int], int], where: str, activation: Optional[str],
               depthwise: bool = False, input_depthwise: bool = False, input_deconv: bool = False) -> Requant:
    """The output conversion of an rv1106 int8 conv (``activation``: its fused part, ``None``,
    ``"Relu"``, ``"Clip"``, ``"LeakyRelu"``, ``"PRelu"``, ``"Add"``, ``"AddRelu"`` or a lookup-table one;
    ``depthwise``: a depthwise conv, whose weight holds the zero points; ``input_depthwise``: the
    compiler's depthwise conv on a graph input, a plain int32 bias and zero point 0, no multiplier
    stage, its weight the tiles alone (conv mode 3; a deconv from one channel to one too, whose
    weight zero point its tile's spare lanes hold: the caller's); ``input_deconv``: a deconv
    fetching the graph's image input, bias blocks with 0x4048 and 0x4054 as a depthwise conv's):
    ``OUT_CVT`` at rk3588's addresses, per-channel bias blocks whose multipliers are normalised to
    2^14 (a plain conv's 2^15 with a LeakyRelu, whose slope's 14 fraction bits ``OUT_CVT_SHIFT``
    also counts: taken off here), or (0x4050 = 0x30000002) a plain int32 bias and one weight zero
    point.  Every other register value is refused by name."""
    if activation not in _ACTIVATION:
        raise ModelInvalidError(f"{where}: a fused {activation} in an rv1106 int8 conv; its registers were not "
                                "decoded (plain, Relu, Clip, LeakyRelu, PRelu, residual Add and AddRelu and "
                                "lookup-table convs were)", op="load")
    plain = not depthwise and regs.get((TARGET_DPU, 0x4050)) == _PLAIN_BIAS[0x4050]
    prefix = "input depthwise " if input_depthwise else "depthwise " if depthwise else "plain-bias " if plain else \
        "image-input transposed " if input_deconv else ""
    kind = f"{prefix}{'conv' if activation is None else activation + ' conv'}"
    if input_depthwise and activation is not None:
        raise ModelInvalidError(f"{where}: an rv1106 int8 {kind}: the compiler's depthwise conv on a graph input "
                                "was observed with nothing fused", op="load")
    leaky = activation in ("LeakyRelu", "PRelu")
    if leaky and plain:
        raise ModelInvalidError(f"{where}: an rv1106 int8 {kind}: only a {activation} on a conv with per-channel "
                                "bias blocks was decoded", op="load")
    fixed = {**_FIXED[depthwise], _ALU_SRC: _SLOPE_ALU_SRC[depthwise]} if leaky else \
        _INPUT_DEPTHWISE if input_depthwise else _PLAIN_BIAS if plain else \
        _INPUT_DECONV if input_deconv else _FIXED[depthwise]
    _expect(regs, {**fixed, **_ACTIVATION[activation]}, where, f"int8 {kind}")
    offset = _reg(regs, TARGET_DPU, _OUT_CVT_OFFSET, where)
    scale = _reg(regs, TARGET_DPU, _OUT_CVT_SCALE, where)
    shift = _reg(regs, TARGET_DPU, _OUT_CVT_SHIFT, where)
    flag = _OUT_CVT_RESIDUAL if activation in ("Add", "AddRelu") else 0
    if scale & ~0xFFFF != flag or shift & ~0x3F:
        raise ModelInvalidError(f"{where}: OUT_CVT scale {scale:#x} / shift {shift:#x} in an rv1106 int8 {kind}; a "
                                f"16-bit scale{' with bit 16 set' if flag else ''} and a 6-bit shift were observed",
                                op="load")
    scale &= 0xFFFF
    offset = i32(offset)
    if _reg(regs, TARGET_DPU, _BN_CFG, where) == T4_BN_SHIFT:  # a residual conv's accumulator shifted before the add
        shift += residual_bn_shift(regs, where)
    truncated = core_truncation(regs, where, activation, T3_CORE_TRUNCATE)
    if input_depthwise:
        return Requant(scale, shift, None, offset, False, 0, truncated)
    if plain:
        operand = _reg(regs, TARGET_DPU, _ALU_SRC, where)
        minus_zp = t3_alu_operand(operand)
        if minus_zp is None or not -127 <= minus_zp <= 128:
            raise ModelInvalidError(f"{where}: DPU register {_ALU_SRC:#x} = {operand:#x} in an rv1106 int8 {kind}; "
                                    f"bit 31 and a {_OPERAND_BITS}-bit operand, minus an int8 weight zero point, were "
                                    "observed", op="load")
        return Requant(scale, shift, None, offset, False, -minus_zp, truncated)
    if leaky:
        if shift < LEAKY_SLOPE_BITS:
            raise ModelInvalidError(f"{where}: OUT_CVT shift {shift} in an rv1106 int8 {kind}, below the "
                                    f"{LEAKY_SLOPE_BITS} fraction bits of its slope", op="load")
        alu_src = _reg(regs, TARGET_DPU, _ALU_SRC, where)
        return Requant(scale, shift - LEAKY_SLOPE_BITS, alu_src >> 24 & 0x3F, offset, True, 0, truncated)
    return Requant(scale, shift, _MUL_SHIFT, offset, True, 0, truncated)


def t3_leaky_slope(regs: Dict[Tuple[int, int], int], where: str) -> float:
    """The slope of an rv1106 int8 ``ConvLeakyRelu`` (its ``BN_CFG`` checked by :func:`requant_t3`)
    or LeakyRelu: the high half of 0x4068, a signed 16-bit value over 2^14 (Abs, a slope of -1:
    0xc000), its low half 0."""
    bits = _reg(regs, TARGET_DPU, BN_MUL, where)
    slope = int8_leaky_slope(bits)
    if slope is None:
        raise ModelInvalidError(f"{where}: DPU register {BN_MUL:#x} = {bits:#x} of an rv1106 LeakyRelu; its slope "
                                "in the high half and 0 in the low half were observed", op="load")
    return slope


def t3_alu_operand(word: int) -> Optional[int]:
    """The signed operand of an rv1106 ``BS_ALU_SRC`` word (0x4054: bit 31 set over a 17-bit two's
    complement value, 0x1ffe6 for -26), or ``None`` when the word is not of that form."""
    value = word & ~_ALU_SRC_FLAG
    return signed(value, _OPERAND_BITS) if word & _ALU_SRC_FLAG and not value >> _OPERAND_BITS else None


def t3_prelu_slope(regs: Dict[Tuple[int, int], int], where: str) -> Optional[float]:
    """Where an rv1106 int8 ``ConvPRelu`` takes its slopes (its BN_CFG checked by
    :func:`requant_t3`): ``None`` for per-channel slopes read from memory (BN_MUL 0x1, the node's
    stored int16 slopes), else its one slope in BN_MUL, as a LeakyRelu's (:func:`t3_leaky_slope`)."""
    bits = _reg(regs, TARGET_DPU, BN_MUL, where)
    return None if bits == _PRELU_PER_CHANNEL else t3_leaky_slope(regs, where)


def t3_standalone_leaky_slope(regs: Dict[Tuple[int, int], int], where: str) -> float:
    """The slope of a standalone LeakyRelu (or Abs, slope -1) in an rv1106 file, which stores it
    nowhere else: its DPU-only task's ``BN_CFG`` 0x22, the slope as a conv's
    (:func:`t3_leaky_slope`; 0.1 is 0x666 / 2^14, ONNX's default 0.01 0xa4 / 2^14), read as the
    ONNX value it was rounded from, as a fused one is (:func:`.regcmd.slope_decimal`)."""
    _expect(regs, {_BN_CFG: _ACTIVATION["LeakyRelu"][_BN_CFG]}, where, "LeakyRelu task (a slope stage)")
    return slope_decimal(t3_leaky_slope(regs, where))


def t3_clip_bound(regs: Dict[Tuple[int, int], int], where: str) -> int:
    """The upper clamp of an rv1106 int8 ``ConvClip`` from 0 (its lower clamps 0, checked by
    :func:`requant_t3`): a positive integer in **channel 0's** accumulator unit, written twice
    (0x4028, 0x40e4), as rk3576 and rk3562 count it (:func:`.f2act.clamp_from_zero`)."""
    high = [_reg(regs, TARGET_DPU, a, where) for a in _CLAMP_HIGH]
    if high[0] != high[1] or not 0 < high[0] < _INT32_MAX:
        shown = ", ".join(f"{a:#x} = {v:#x}" for a, v in zip(_CLAMP_HIGH, high))
        raise ModelInvalidError(f"{where}: the upper clamps {shown} "
                                "of an rv1106 int8 ConvClip are not one positive bound; only a Clip from 0 to a "
                                "bound was decoded", op="load")
    return high[0]


def t3_clip_low(regs: Dict[Tuple[int, int], int], where: str) -> Optional[int]:
    """``None`` for an rv1106 int8 ``ConvClip`` from 0 (BN_CFG 0x12); for one whose lower bound is
    not 0 (BN_CFG 0x20010, the clamps a Clip from 0's, checked by :func:`requant_t3`), that bound
    truncated to an integer, as the compiler writes it in 0x4064 and negated in 0x4018 (in real
    units: probes Clip(-0.5, 1) and (-0.1, 0.6) write 0, Clip(-1, 2) and (-1.5, 0.5) -1 and 1).  Its
    real value is in no register: the simulator's outputs reach below 0 down to it, which the
    output grid's lowest value stands for (:meth:`.lower._Lowering.t3_activation`)."""
    if _reg(regs, TARGET_DPU, _BN_CFG, where) == _CLIP_FROM_ZERO:
        return None
    low, negated = (i32(_reg(regs, TARGET_DPU, a, where)) for a in (_CLIP_LOW, _CLIP_LOW_NEGATED))
    if negated != -low:
        raise ModelInvalidError(f"{where}: DPU registers {_CLIP_LOW:#x} = {low} and {_CLIP_LOW_NEGATED:#x} = "
                                f"{negated} of an rv1106 int8 ConvClip with BN_CFG {_CLIP_BELOW_ZERO:#x}; a lower "
                                "bound truncated to an integer and its negation were observed", op="load")
    return low


#: a standalone Clip's DPU-only task (BN_CFG 0x13, no bias stage): its lower bound as an input code,
#: negated (0x4018; INT32_MIN: none), its upper bound in the input's (code - zero point) units
#: (0x401c, again in 0x40dc; INT32_MAX: none, also written for an upper bound of 0): corpus
#: standalone_clip_rv110*, probes of one bound at a time over three input grids
_CLIP_LOW_CODE, _CLIP_HIGH = 0x4018, (0x401C, 0x40DC)


def t3_standalone_clip(regs: Dict[Tuple[int, int], int], zero_point: int,
                       where: str) -> Tuple[Optional[int], Optional[int]]:
    """The clamps of a standalone int8 Clip's DPU-only task in an rv1106 file (its stored bounds are
    checked against them: :func:`.t3nodes._clip`), in its input's ``code - zero_point`` units:
    ``(low, high)``, ``None`` for a side without a clamp (the compiler writes none for an upper bound
    of 0, which the output's grid, holding 0 at its top, then saturates at)."""
    _expect(regs, {_BN_CFG: _ACTIVATION[None][_BN_CFG]}, where, "Clip task (no bias or slope stage)")
    low = _reg(regs, TARGET_DPU, _CLIP_LOW_CODE, where)
    high = [_reg(regs, TARGET_DPU, a, where) for a in _CLIP_HIGH]
    if high[0] != high[1]:
        raise ModelInvalidError(f"{where}: the upper clamps {_CLIP_HIGH[0]:#x} = {high[0]:#x} and {_CLIP_HIGH[1]:#x} = "
                                f"{high[1]:#x} of an rv1106 Clip differ; one bound written twice was observed",
                                op="load")
    return (None if low == _INT32_MIN else -i32(low) - zero_point,
            None if high[0] == _INT32_MAX else i32(high[0]))


#: the DPU-only task of a standalone lookup-table op: no bias or multiplier stage, the table
#: indexed by the input's codes, OUT_CVT_SCALE with bit 16 set
_LUT_TASK = {0x4048: 0x0, 0x4050: 0x30000002, 0x4054: 0x0, _BN_CFG: T3_BN_LUT, **_NO_CLAMP,
             _EW_SCALE: 0x1, _EW_CLAMP_MIN: _INT32_MIN}
#: its EW_CFG: 0x4140 for a Sigmoid, 0x1004140 (a lookup-table conv's) for an exSwish
_LUT_TASK_EW = (0x4140, 0x01004140)


def t3_lut_task(regs: Dict[Tuple[int, int], int], where: str) -> Tuple[LutStage, Requant]:
    """The index map and output conversion of the DPU-only task that runs a standalone int8
    lookup-table op (Sigmoid, exSwish, HardSwish) in an rv1106 file: the table registers
    (:func:`_table_stage`) and ``OUT_CVT`` at rk3588's addresses, its scale's bit 16 set; no
    multiplier stage (``mul_shift`` ``None``).  For :func:`.lut.lower_lut_sigmoid`'s ``decode``."""
    _expect(regs, {**_LUT_TASK, _EW_CFG: _LUT_TASK_EW}, where, "lookup-table task")
    offset, scale, shift = (_reg(regs, TARGET_DPU, a, where) for a in
                            (_OUT_CVT_OFFSET, _OUT_CVT_SCALE, _OUT_CVT_SHIFT))
    if scale & ~0xFFFF != _OUT_CVT_RESIDUAL or shift & ~0x3F:
        raise ModelInvalidError(f"{where}: OUT_CVT scale {scale:#x} / shift {shift:#x} in an rv1106 lookup-table task; "
                                "a 16-bit scale with bit 16 set and a 6-bit shift were observed", op="load")
    return _table_stage(regs, where), Requant(scale & 0xFFFF, shift, None, i32(offset), False, 0)


#: the DPU-only task of an int8 -> float16 exDataConvert (a Softmax head's logits, corpus
#: classifier_heads_rv110*): the output in float16 (0x400c), every stage bypassed, OUT_CVT a unit
#: scale; it dequantizes by its input tensor's scale and zero point, which no register holds
_CONVERT_TASK = {0x400C: 0x1E5, 0x4040: 0x53, 0x4048: 0x0, 0x4050: 0x30000126, 0x4054: 0x0, **_ACTIVATION[None],
                 _OUT_CVT_OFFSET: 0x0, _OUT_CVT_SCALE: 0x10001, _OUT_CVT_SHIFT: 0x0}


def t3_check_convert_task(regs: Dict[Tuple[int, int], int], where: str) -> None:
    """Refuse the DPU-only task of an rv1106 int8 -> float16 ``exDataConvert`` unless every register
    of :data:`_CONVERT_TASK` holds the value observed."""
    _expect(regs, _CONVERT_TASK, where, "int8 -> float16 conversion task")


def t3_lut_stage(regs: Dict[Tuple[int, int], int], where: str, activation: str,
                 depthwise: bool) -> Tuple[LutStage, Requant]:
    """The index map and output conversion of an rv1106 int8 lookup-table conv (``activation``:
    Sigmoid, Swish, HardSwish or HardSigmoid): :func:`_table_stage` and :func:`requant_t3`.  For
    :func:`.lut.lower_lut_conv`'s ``stage_of``."""
    return _table_stage(regs, where), requant_t3(regs, where, activation, depthwise)


def _table_stage(regs: Dict[Tuple[int, int], int], where: str) -> LutStage:
    """rk3588's table registers (``LUT_CFG`` 0x68, ranges, slopes) behind ``BN_CFG``
    :data:`T3_BN_LUT`, with ``A`` (0x4064) added before the multiplication, as on rk3562:
    ``u = ((y + A) * M) >> s``, i.e. ``index_add = A * M`` (a standalone Sigmoid's ``A`` is
    ``-zp_in`` where rk3588 writes ``-zp_in * M``; the convs observed write ``A`` = 0)."""
    stage = lut_stage(regs, where, T3_BN_LUT)
    return replace(stage, index_add=stage.index_add * stage.index_mul)
