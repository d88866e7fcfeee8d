"""The NPU task table and register command stream of a vendor file, read for one purpose:
the int8 requantization of a node (reference §5).

* task records (tensor kind "task"): 40-byte ``struct rknpu_task``
  ``{u32 flags, op_idx, enable_mask, int_mask, int_clear, int_status, regcfg_amount,
  regcfg_offset; u64 regcmd_addr}``, ``regcmd_addr`` a byte offset into the regcmd blob;
* regcmd entries (tensor kind "regcmd"): u64 ``(target << 48) | (value << 16) | reg``.

A node's registers are those of the first task whose ``op_idx`` is the node's index and
which enables the CNA (``enable_mask & 1``).  DPU registers (target 0x1001) used:
``BS_CFG`` 0x4040 (bit 4 set with ``BS_MUL_CFG`` 0: the multiplier stage is bypassed, as
observed on identity convs and per-layer files), ``BS_MUL_CFG`` 0x4048 (bit 0: per-channel
multipliers from the bias block; bits 8..13: their shift; bit 0 clear with an operand in bits
16..31: that one multiplier for every channel, as a per-layer conv with a fused LeakyRelu or
PRelu writes it, folded into ``OUT_CVT``), 0x4050 (bit 0 set: per-channel
bias blocks; clear: a plain int32 bias, the weight zero point in 0x4054, negated),
``OUT_CVT_OFFSET`` 0x4080
(the output zero point, signed), ``OUT_CVT_SCALE`` 0x4084 (16-bit multiplier) and
``OUT_CVT_SHIFT`` 0x4088 (6-bit shift).  Bits this module does not understand set in
those registers raise :class:`~rknnlite.errors.ModelInvalidError`.

rk3562 ("RKNPU t4") int8 convs hold the same values in another map (:func:`requant_t4`,
``docs/vendor-format-notes.md`` §1c): OUT_CVT at 0x40ac/0x40b0/0x40b4 (0x4080..0x4088 there
convert a residual operand; 0x4088 = 0x80000000 when there is none), the multipliers' shift
in 0x4054, bias blocks of 4 channels.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ...errors import ModelInvalidError

__all__ = ["Task", "Requant", "ENABLE_CNA", "ENABLE_PPU", "read_tasks", "node_registers", "task_writes", "dpu_reader",
           "requant_of", "requant_t4", "fused_activation", "shortest_decimal", "f32", "i16", "i32", "signed",
           "TARGET_CNA", "TARGET_DPU", "TARGET_RDMA", "TARGET_CORE", "REG_CNA_CONV_CON1", "REG_CNA_PAD_CON1", "BN_LUT",
           "BN_LUT_LITE", "BN_CLIP_SHIFTED", "BN_CLIP_SHIFTED_LITE", "BN_MUL", "bn_multiplier", "conv_bn_shift",
           "residual_bn_shift", "core_truncation", "CORE_TRUNCATE", "T3_CORE_TRUNCATE", "T4_CORE_TRUNCATE"]

TASK_SIZE = 40
#: ``enable_mask`` bits of a task: the conv pipeline (CNA), the pooling unit (PPU)
ENABLE_CNA, ENABLE_PPU = 0x1, 0x20
_TASK = struct.Struct("<8IQ")
TARGET_CNA = 0x0201
TARGET_DPU = 0x1001
#: the DPU's read DMA (its input at 0x5018, an element-wise operand at 0x5038)
TARGET_RDMA = 0x2001
#: the conv core, between the CNA and the DPU (its registers at 0x3000..)
TARGET_CORE = 0x0801
#: CNA_CONV_CON1: its low four bits are 6 on rk3576/rv1126b int8 convs whose weight is packed
#: (:func:`.weights.decode_packed_weight`), 2 on those whose weight is in tiles
REG_CNA_CONV_CON1 = 0x100C
#: CNA_PAD_CON1: the code the CNA pads a conv's input with, its zero point (a real 0); rk3588 writes it
#: sign-extended to 32 bits, rv1106 as 16 bits
REG_CNA_PAD_CON1 = 0x1184
REG_BS_CFG = 0x4040
REG_BS_ALU_CFG = 0x4050  # bit 0: per-channel bias blocks; clear: plain int32 bias (per-layer files)
REG_BS_ALU_SRC = 0x4054  # plain-bias layout: minus the layer's weight zero point, a signed 16-bit field
REG_BS_MUL_CFG = 0x4048
_BS_MUL_BYPASS = 0x10
REG_OUT_CVT_OFFSET = 0x4080
REG_OUT_CVT_SCALE = 0x4084
REG_OUT_CVT_SHIFT = 0x4088
# fp16 fused activations (observed by comparing files that differ in one parameter)
REG_BN_CFG = 0x4060
REG_BN_ADD = 0x4064  # float32: a value added before the clip (ConvClip with a negative bound)
REG_BN_MUL = 0x4068  # high 16 bits: the LeakyRelu slope as float16
REG_BN_RELUX = 0x406C  # float32: the clip's upper bound (after the add)
REG_EW_ADD = tuple(range(0x4090, 0x40B0, 4))  # float32: the add undone after the clip
_BN_LEAKY = 0x62
_BN_CLIP = 0x92
BN_CLIP_SHIFTED = 0x20090
BN_CLIP_SHIFTED_LITE = 0x98  # rk3566/rk3568's BN_CFG of the same clip (corpus conv_clip_rk3566)
BN_LUT = 0x20040  # the conv output indexes a lookup table: u = x * f16(0x4068 >> 16) + f32(0x4064)
BN_LUT_LITE = 0x48  # the same on rk3566/rk3568 ("RKNPU lite"), whose int8 index map is otherwise rk3588's


@dataclass(frozen=True)
class Task:
    """One ``rknpu_task`` record."""

    flags: int
    op_idx: int
    enable_mask: int
    int_mask: int
    int_clear: int
    int_status: int
    regcfg_amount: int
    regcfg_offset: int
    regcmd_addr: int


@dataclass(frozen=True)
class Requant:
    """A node's output conversion: ``q_out = round(acc * scale / 2^shift * mul[c] / 2^mul_shift) + offset``,
    or without the ``mul[c]`` factor when ``mul_shift`` is ``None`` (the multiplier stage is
    bypassed: per-layer quantization and the compiler's identity convs).

    ``bias_blocks``: the bias tensor holds per-channel 64-byte blocks (bias, weight zero
    point, multiplier); otherwise it is a plain int32 array and the layer's weight zero
    point is ``weight_zp``.  ``truncated``: the bits a conv drops from its accumulator before
    adding the bias, whose integer is then in units of ``2^truncated`` steps (rk3588/rk3566:
    :func:`core_truncation`; rk3576/rv1126b: :func:`.f2act.f2_truncation`); ``shift`` and
    ``mul_shift`` are the registers', for the truncated accumulator: a caller forming the
    untruncated one (the bias shifted back) adds ``truncated`` to the shift of the stage that
    reads it."""

    scale: int
    shift: int
    mul_shift: Optional[int]
    offset: int
    bias_blocks: bool = True
    weight_zp: int = 0
    truncated: int = 0

    @property
    def multiplier(self) -> float:
        """``scale / 2^shift``: the requantization of the channel with the largest weight scale."""
        return self.scale / float(1 << self.shift)


#: the BN multiplier of an attention's scores conv (DPU 0x4068, rk3588's form, which rk3562 and
#: rv1106 keep): its 16-bit scale << 16 | 0x1000 | s << 8, the multiplier being scale / 2^(16 + s)
BN_MUL = 0x4068


def bn_multiplier(word: Optional[int]) -> Optional[Tuple[int, int]]:
    """``(scale, shift)`` of a :data:`BN_MUL` word (the multiplier ``scale / 2^shift``): the scale
    in bits 16..31, the shift in the 5-bit field of bits 8..12 (16..31 for multipliers below 1/2;
    an attention over heads of 2 or 4 scales its scores by 1/sqrt(2) or 1/2 with shift 15:
    0x5a820f00, 0x40000f00), or ``None`` when the word is absent or sets other bits."""
    if word is None or word & 0xE0FF:
        return None
    return word >> 16, (word >> 8) & 0x1F


#: BN_CFG of an int8 conv as rk3588 and rk3566 write it, by fused part: the BN stage bypassed (0x53) or
#: clamping at 0 (0x12); a residual conv may instead scale its biased accumulator there (:data:`BN_SHIFT`)
_BN_CFG_OF = {None: 0x53, "Relu": 0x12, "Add": 0x53, "AddRelu": 0x53}
#: BN_CFG of a residual conv (ConvAdd, ConvAddRelu) whose BN stage multiplies the biased accumulator by
#: its BN_MUL word, 1 over 2^s (:func:`residual_bn_shift`), before the residual is added: what the
#: compiler writes when the conv's accumulator step is so small against the output's step that
#: OUT_CVT's shift alone does not reach (a conv on a tensor of tiny range added to a large one: corpus
#: ``tiny_steps*``, silero-vad's STFT; rk3588 and rk3566; rk3562, rv1106, rv1103: :data:`T4_BN_SHIFT`).
#: Read as 0x53, the conv's contribution came out 2^s times too large (34 % of a probe's outputs equal)
BN_SHIFT = 0x42


def residual_bn_shift(regs: Dict[Tuple[int, int], int], where: str) -> int:
    """The ``s`` of a residual conv whose BN stage shifts its biased accumulator right by ``s``
    (:data:`BN_SHIFT`): its BN_MUL word is a multiplier of 1 over 2^s, ``1 << 16 | s << 8``
    (:func:`bn_multiplier`; s = 1..4 observed).

    Raises:
        ModelInvalidError: any other BN_MUL word."""
    word = regs.get((TARGET_DPU, BN_MUL))
    parsed = bn_multiplier(word)
    if parsed is None or parsed[0] != 1 or not parsed[1]:
        shown = "not written" if word is None else f"{word:#x}"
        raise ModelInvalidError(f"{where}: a residual conv's BN stage with BN_MUL ({BN_MUL:#x}) {shown}; only a "
                                "multiplier of 1 over 2^s (1 << 16 | s << 8, s > 0) was observed", op="load")
    return parsed[1]


def conv_bn_shift(regs: Dict[Tuple[int, int], int], where: str, activation: Optional[str]) -> int:
    """The right shift an rk3588/rk3566 int8 conv's BN stage applies to its biased accumulator:
    0 when the stage is bypassed or only clamps (``BN_CFG`` as :data:`_BN_CFG_OF` gives it), the
    BN_MUL shift of a residual conv's :data:`BN_SHIFT` form.  Fused parts with parameters of their
    own (Clip, LeakyRelu, lookup tables) are checked where those are read: 0 for them.

    Raises:
        ModelInvalidError: another ``BN_CFG``."""
    if activation not in _BN_CFG_OF:
        return 0
    cfg = task_register(regs, TARGET_DPU, REG_BN_CFG, where)
    if cfg == _BN_CFG_OF[activation]:
        return 0
    residual = activation in ("Add", "AddRelu")
    if residual and cfg == BN_SHIFT:
        return residual_bn_shift(regs, where)
    expected = f"{_BN_CFG_OF[activation]:#x}" + (f" or {BN_SHIFT:#x} (a shift before the residual add)" * residual)
    raise ModelInvalidError(f"{where}: DPU register BN_CFG ({REG_BN_CFG:#x}) = {cfg:#x} on an int8 "
                            f"{activation or 'plain'} conv; only {expected} was observed and decoded", op="load")


def read_tasks(raw, where: str) -> List[Task]:
    """The task records in ``raw`` (the "task" tensor's bytes)."""
    if len(raw) % TASK_SIZE:
        raise ModelInvalidError(f"{where}: the task table has {len(raw)} bytes, not a multiple of {TASK_SIZE}",
                                op="load")
    return [Task(*_TASK.unpack_from(raw, pos)) for pos in range(0, len(raw), TASK_SIZE)]


def node_registers(regcmd, tasks: List[Task], node_index: int, where: str,
                   unit: int = ENABLE_CNA) -> Dict[Tuple[int, int], int]:
    """``{(target, reg): value}`` written by the first task of node ``node_index`` that enables
    ``unit`` (an ``enable_mask`` bit: :data:`ENABLE_CNA`, or :data:`ENABLE_PPU` for a pool;
    later writes of a register win)."""
    for task in tasks:
        if task.op_idx == node_index and task.enable_mask & unit:
            break
    else:
        name = {ENABLE_CNA: "the CNA", ENABLE_PPU: "the PPU"}.get(unit, f"unit {unit:#x}")
        raise ModelInvalidError(f"{where}: no NPU task with {name} enabled runs node {node_index}", op="load")
    regs: Dict[Tuple[int, int], int] = {}
    for target, reg, value in task_writes(regcmd, task, where):
        regs[(target, reg)] = value
    return regs


def task_writes(regcmd, task: Task, where: str) -> List[Tuple[int, int, int]]:
    """The register writes of ``task``, in stream order: ``[(target, reg, value), ...]``."""
    start, count = task.regcmd_addr, task.regcfg_amount
    if start % 8 or start + 8 * count > len(regcmd):
        raise ModelInvalidError(
            f"{where}: the task of node {task.op_idx} reads {count} register commands at byte {start}, outside "
            f"the {len(regcmd)}-byte command stream", op="load")
    return [(entry >> 48, entry & 0xFFFF, (entry >> 16) & 0xFFFFFFFF)
            for entry in struct.unpack_from(f"<{count}Q", regcmd, start)]


def task_register(regs: Dict[Tuple[int, int], int], target: int, address: int, where: str,
                  context: str = "") -> int:
    """The value a task's register writes ``regs`` give register ``address`` of unit ``target``
    (:data:`TARGET_CNA`, :data:`TARGET_DPU`), raising :class:`~rknnlite.errors.ModelInvalidError`
    (``where``, then ``context``, e.g. "(rk3562 register map)") when the task does not write it."""
    value = regs.get((target, address))
    if value is None:
        unit = {TARGET_CNA: "CNA", TARGET_DPU: "DPU", TARGET_CORE: "CORE"}.get(target, f"{target:#x}")
        raise ModelInvalidError(f"{where}: the node's task does not write {unit} register {address:#x}"
                                f"{' ' + context if context else ''}", op="load")
    return value


def dpu_reader(regs: Dict[Tuple[int, int], int], where: str, context: str = "") -> Callable[[int], int]:
    """``reg(address)``: :func:`task_register` of the DPU."""
    return lambda address: task_register(regs, TARGET_DPU, address, where, context)


#: CORE registers holding ``k`` when a conv truncates its accumulator by k bits before adding the bias,
#: whose integer is then in units of 2^k steps, 0 otherwise: rk3588 writes 0x301c, rk3566/rk3568 0x302c,
#: each never the other's (every rk3588 and rk3566 file of the corpus: 7,156 and 1,581 tasks, all 0).
#: rk3562 (0x3024) and rv1106/rv1103 (0x301c, :data:`T3_CORE_TRUNCATE`) write k in bits 0..4 and k or
#: k + 1 in bits 5..9 (0x20 on most untruncated convs, 0 on other nodes' tasks, 0x21 for k = 1, 0x83 for
#: 3, 0xe6 for 6: the upper field's meaning unknown, k alone matching the simulator); rk3576/rv1126b
#: ``k | k << 5`` at 0x3024 (:func:`.f2act.f2_truncation`).  Convs of tiny weights or input truncate
#: (k = 1 to 8 in probes, the stressed random graphs and ``truncated_convs*``); read as 0 until
#: 2026-12-07, such convs ran with their accumulator 2^k times too strong beside the bias, silently (a
#: Gemm of asymmetric weights on rk3588: every output 155 steps off)
CORE_TRUNCATE = (0x301C, 0x302C)
T4_CORE_TRUNCATE = 0x3024
T3_CORE_TRUNCATE = 0x301C
_CORE_TRUNCATE_MAX = 31
#: the fused parts (``lower``'s names; None: a plain conv) of the convs observed truncated there
_CORE_TRUNCATED_FUSED = (None, "Relu", "Add", "AddRelu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish",
                         "Tanh")
_NOT_A_CONV = "not a conv"


def core_truncation(regs: Dict[Tuple[int, int], int], where: str, fused: Optional[str] = _NOT_A_CONV,
                    address: Optional[int] = None) -> int:
    """The bits ``k`` a node's conv core truncates its accumulator by before the bias
    (:data:`CORE_TRUNCATE`): ``address`` None reads rk3588's or rk3566's register (the value
    ``k``), else rk3562's or rv1106's (``k | k << 5`` or ``k | (k + 1) << 5``); 0 when the task
    writes none, as a DPU-only one.  ``fused``: the conv's fused part, one of :data:`_CORE_TRUNCATED_FUSED` where
    truncated; the default, a node that is no such conv (an LSTM's gate convs, a DPU-only task),
    refuses any truncation.

    Raises:
        ModelInvalidError: a value of another form, or a truncated node of another kind."""
    addresses = CORE_TRUNCATE if address is None else (address,)
    values = [regs.get((TARGET_CORE, a), 0) for a in addresses]
    if address is None:
        bits = max(values)
        valid = not min(values) and bits <= _CORE_TRUNCATE_MAX
        form = f"one of them 0 to {_CORE_TRUNCATE_MAX}"
    else:
        bits = values[0] & 0x1F
        valid = values[0] in (0, bits | bits << 5, bits | (bits + 1) << 5)
        form = "0, k | k << 5 or k | (k + 1) << 5"
    named = "/".join(hex(a) for a in addresses)
    if not valid:
        raise ModelInvalidError(f"{where}: CORE register {named} = {'/'.join(hex(v) for v in values)}; {form} (the "
                                "bits the accumulator is truncated by) was observed", op="load")
    if bits and fused not in _CORE_TRUNCATED_FUSED:
        what = "node" if fused == _NOT_A_CONV else f"{fused} conv"
        seen = ", ".join(str(f) for f in _CORE_TRUNCATED_FUSED if f)
        raise ModelInvalidError(f"{where}: an int8 {what} whose accumulator is truncated by {bits} bits (CORE "
                                f"{named}); only plain convs and those fusing {seen} were observed truncated",
                                op="load")
    return bits


def requant_of(regs: Dict[Tuple[int, int], int], where: str, fused: Optional[str] = _NOT_A_CONV) -> Requant:
    """The output conversion registers of a node (see the module doc), with the bits the conv
    core truncates its accumulator by (:func:`core_truncation`; ``fused``: the conv's fused part,
    the default a node that is no such conv, which may not truncate)."""
    def reg(address: int, mask: int, name: str) -> int:
        value = regs.get((TARGET_DPU, address))
        if value is None:
            raise ModelInvalidError(f"{where}: the node's task does not write DPU register {name} ({address:#x})",
                                    op="load")
        if value & ~mask:
            raise ModelInvalidError(
                f"{where}: DPU register {name} ({address:#x}) = {value:#x} sets bits outside {mask:#x}, whose "
                "meaning is unknown", op="load")
        return value

    scale = reg(REG_OUT_CVT_SCALE, 0xFFFF, "OUT_CVT_SCALE")
    shift = reg(REG_OUT_CVT_SHIFT, 0x3F, "OUT_CVT_SHIFT")
    mul_cfg = reg(REG_BS_MUL_CFG, 0xFFFF3F01, "BS_MUL_CFG")
    bs_cfg = reg(REG_BS_CFG, 0xFFFFFFFF, "BS_CFG")
    offset = reg(REG_OUT_CVT_OFFSET, 0xFFFFFFFF, "OUT_CVT_OFFSET")
    if offset >= 1 << 31:
        offset -= 1 << 32
    folded = False
    if mul_cfg & 1 and not mul_cfg >> 16:
        mul_shift: Optional[int] = (mul_cfg >> 8) & 0x3F
    elif mul_cfg == 0 and bs_cfg & _BS_MUL_BYPASS:
        mul_shift = None
    elif not mul_cfg & 1 and mul_cfg >> 16 and not bs_cfg & _BS_MUL_BYPASS:
        # one multiplier for every channel (its operand, bits 16..31, over 2^shift): folded into OUT_CVT
        scale, shift, mul_shift = scale * (mul_cfg >> 16), shift + ((mul_cfg >> 8) & 0x3F), None
        folded = True
    else:
        raise ModelInvalidError(
            f"{where}: BS_MUL_CFG = {mul_cfg:#x} with BS_CFG = {bs_cfg:#x} is neither the per-channel multiplier "
            "(bit 0), one multiplier for every channel (bits 16..31) nor a bypassed multiplier stage; its meaning "
            "is unknown", op="load")
    alu_cfg = reg(REG_BS_ALU_CFG, 0xFFFFFFFF, "BS_ALU_CFG")  # only bit 0 is read (e.g. 0x36d on depthwise convs)
    blocks = bool(alu_cfg & 1)
    if blocks and folded:
        raise ModelInvalidError(f"{where}: one multiplier for every channel (BS_MUL_CFG {mul_cfg:#x}) beside "
                                f"per-channel bias blocks (BS_ALU_CFG {alu_cfg:#x}) was never observed", op="load")
    weight_zp = 0
    if not blocks:
        if mul_shift is not None:
            raise ModelInvalidError(f"{where}: per-channel multipliers (BS_MUL_CFG {mul_cfg:#x}) without per-channel "
                                    f"bias blocks (BS_ALU_CFG {alu_cfg:#x}) were never observed", op="load")
        # A 16-bit field: rk3588 writes a zero point of 14 0xfff2, rk3566 sign-extends it (0xfffffff2)
        operand = reg(REG_BS_ALU_SRC, 0xFFFFFFFF, "BS_ALU_SRC")
        if operand >> 16 and not (operand >> 16 == 0xFFFF and operand & 0x8000):
            raise ModelInvalidError(f"{where}: DPU register BS_ALU_SRC ({REG_BS_ALU_SRC:#x}) = {operand:#x} is neither "
                                    "a 16-bit value nor one sign-extended to 32 bits", op="load")
        weight_zp = -i16(operand & 0xFFFF)
    return Requant(scale, shift, mul_shift, offset, blocks, weight_zp, core_truncation(regs, where, fused))


# rk3562 ("RKNPU t4") int8 convs: another DPU map (docs/vendor-format-notes.md §1c); only the values
# observed there are accepted
T4_OUT_CVT = (0x40AC, 0x40B0, 0x40B4)  # offset (signed), scale, shift: rk3588's 0x4080/84/88 moved by 0x2c
T4_OUT_CVT_RESIDUAL = 0x10000  # 0x40b0 bit 16, set on the residual convs (ConvAddRelu), the scale below it
T4_BS_MUL = 0x4054  # bit 31 and the channel multipliers' shift in bits 16..21 (rk3588: 0x4048 bits 8..13)
T4_BS_MUL_OBSERVED = 0x800E0000  # shift 14, the only value seen (the multipliers are normalised to 2^14)
T4_BS_MUL_DEPTHWISE = 0x000E0000  # depthwise convs: bit 31 clear, the multipliers still apply (simulator)
T4_FIXED = {0x4048: 0x80000000}  # rk3588's BS_MUL_CFG address (0x4050, rk3588's BS_ALU_CFG: by the bias layout)
T4_BS_ALU_DEPTHWISE = 0x125  # 0x4050 of depthwise convs (bias blocks on, as 0x1; their zero points in the weight)
T4_BS_ALU_PLAIN = 0x2  # 0x4050 of a plain int32 bias (a one-channel conv, or per-layer quantization)
#: 0x4050 of the compiler's depthwise 1x1 on a graph input (its weight the tiles alone) and of a one-channel
#: deconv: the depthwise bits with a plain int32 bias, 0x4054 = 0 (bit 31 clear; input_depthwise_rk3562)
T4_BS_ALU_DEPTHWISE_PLAIN = 0x126
T4_EW_CLAMP_MIN = 0x4088  # the element-wise stage's lower clamp: 0 (a Relu after the residual add) or INT32_MIN
T4_BN_CFG = 0x4060
T4_BN_LUT = 0x20000  # the conv output indexes the lookup table (rk3588: BN_LUT)
#: rk3562's (and rv1106's) BN_CFG of a residual conv that shifts its accumulator before the add (rk3588:
#: :data:`BN_SHIFT`)
T4_BN_SHIFT = 0x2
#: the ``BN_CFG`` values observed per fused activation (Clip: from 0, shifted; :mod:`.t4act`)
T4_BN_CFG_OF = {None: (0x13,), "Relu": (0x12,), "Add": (0x13, T4_BN_SHIFT), "AddRelu": (0x13, T4_BN_SHIFT),
                "Clip": (0x12, 0x20010), "LeakyRelu": (0x22,), "PRelu": (0x22,),
                **{lut: (T4_BN_LUT,) for lut in ("Sigmoid", "Swish", "HardSwish", "HardSigmoid", "Gelu", "Tanh")}}
T4_EW_CFG = 0x407C
T4_EW_CFG_PLAIN = 0x010041C1
#: ``EW_CFG`` (rk3576's clamp mode) where it is not the plain one: by BN_CFG, or on a residual conv
T4_EW_CFG_OF = {0x20010: 0x000241C0, T4_BN_LUT: 0x01004140, "Add": 0x8002C0C0, "AddRelu": 0x8002C0C0}
#: an int8 LeakyRelu's slope stage multiplies by round(alpha * 2^14) (by 2^14 on the positive side):
#: the slope register (BN_MUL's high half) holds that integer on every platform; rk3562's multiplier
#: shift in 0x4054 counts those 14 bits: the shift that scales the accumulator is the field minus 14
#: (fields 14 and 15 seen, rk3588's 0x4048 shifts 0 and 1 for the same files)
LEAKY_SLOPE_BITS = 14


def requant_t4(regs: Dict[Tuple[int, int], int], where: str, activation: Optional[str],
               depthwise: bool = False, depthwise_plain: bool = False, input_deconv: bool = False) -> Requant:
    """The output conversion of an rk3562 int8 conv (its "RKNPU t4" DPU map): ``OUT_CVT``
    offset/scale/shift at 0x40ac/0x40b0/0x40b4, per-channel bias blocks (0x4050 = 1) whose
    multipliers have the shift in 0x4054 bits 16..21 (bit 31 set).  A ``depthwise`` conv
    (its weight holds the zero points) writes 0x125 and bit 31 clear instead, with the same
    arithmetic as the simulator shows.  A conv with a plain int32 bias (0x4050 = 2: one output
    channel, e.g. YOLOv8's DFL conv) has no multiplier stage and 0x4054 = bit 31 | rk3588's
    BS_ALU_SRC (minus the weight zero point, 16 bits); the compiler's depthwise conv on a graph
    input and a one-channel deconv (``depthwise_plain``) write 0x126 and 0x4054 = 0 instead (zero
    point 0; the deconv's is in its weight tile).  A ``PRelu`` (its slopes an input
    tensor) is laid out as a ``LeakyRelu``, 14 fraction bits in 0x4054's shift, depthwise too (a
    depthwise LeakyRelu's registers are rk3588's values: its outputs equal rk3588's twin's,
    corpus ``depthwise_leaky*``).  A deconv reading the graph's input (``input_deconv``) writes
    bit 31 of 0x4054 clear, as a depthwise conv, where it fetches it as an image (``CONV_CON1``
    0x2000a002 besides: ``deconv_input_rk3562``; one reading a 16-channel input sets it).
    ``activation``: the conv's
    fused part (``None``, ``"Relu"``, ``"Add"``, ``"AddRelu"``, ``"Clip"``, ``"LeakyRelu"``, or a
    lookup-table activation), whose 0x4060, 0x407c and residual bits are checked (a Clip's or
    LeakyRelu's own parameters: :func:`.t4act.t4_activation`; a lookup table's:
    :func:`.t4act.t4_lut_stage`).  Every register value other than the observed ones is
    refused by name."""
    def reg(address: int, name: str) -> int:
        value = regs.get((TARGET_DPU, address))
        if value is None:
            raise ModelInvalidError(f"{where}: the node's task does not write DPU register {name} ({address:#x}) "
                                    "(rk3562 int8 map)", op="load")
        return value

    def refuse(name: str, address: int, value: int, expected: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: DPU register {name} ({address:#x}) = {value:#x} in an rk3562 int8 file; "
                                 f"only {expected} was observed and decoded", op="load")

    if activation not in T4_BN_CFG_OF:
        raise ModelInvalidError(f"{where}: a fused {activation} in an rk3562 int8 {'depthwise ' * depthwise}conv; its "
                                "registers were not decoded (plain, Relu, Clip, LeakyRelu, PRelu, lookup-table and "
                                "residual Add and AddRelu convs were)", op="load")
    residual = activation in ("Add", "AddRelu")
    leaky = activation in ("LeakyRelu", "PRelu")
    bs_alu = regs.get((TARGET_DPU, 0x4050))
    plain_layouts = (T4_BS_ALU_PLAIN, T4_BS_ALU_DEPTHWISE_PLAIN) if depthwise_plain else (T4_BS_ALU_PLAIN,)
    plain = not depthwise and not leaky and bs_alu in plain_layouts
    fixed = {**T4_FIXED, 0x4050: T4_BS_ALU_DEPTHWISE if depthwise else bs_alu if plain else 0x1}
    for address, expected in fixed.items():
        value = reg(address, f"{address:#x}")
        if value != expected:
            raise refuse(f"{address:#x}", address, value, f"{expected:#x}")
    cfg = reg(T4_BN_CFG, "BN_CFG")
    if cfg not in T4_BN_CFG_OF[activation]:
        raise refuse("BN_CFG", T4_BN_CFG, cfg, f"{' or '.join(hex(v) for v in T4_BN_CFG_OF[activation])} for "
                     f"{activation or 'a plain conv'}")
    ew_cfg = reg(T4_EW_CFG, "EW_CFG")
    ew_expected = T4_EW_CFG_OF.get(activation, T4_EW_CFG_OF.get(cfg, T4_EW_CFG_PLAIN))
    if ew_cfg != ew_expected:
        raise refuse("EW_CFG", T4_EW_CFG, ew_cfg,
                     f"{ew_expected:#x} for {activation or 'a plain conv'} (BN_CFG {cfg:#x})")
    ew_min = reg(T4_EW_CLAMP_MIN, "EW_CLAMP_MIN")
    if ew_min != (0 if activation == "AddRelu" else 0x80000000):
        raise refuse("EW_CLAMP_MIN", T4_EW_CLAMP_MIN, ew_min, "0 (the Relu after a residual add)" if
                     activation == "AddRelu" else "0x80000000 (INT32_MIN: no clamp after the element-wise stage)")
    mul_cfg = reg(T4_BS_MUL, "BS_MUL_CFG")
    if plain and bs_alu == T4_BS_ALU_DEPTHWISE_PLAIN:
        if mul_cfg:
            raise refuse("BS_MUL_CFG", T4_BS_MUL, mul_cfg, "0 on the compiler's depthwise input conv or a "
                         "one-channel deconv (0x4050 = 0x126)")
    elif plain:
        if mul_cfg & 0x7FFF0000 or not mul_cfg >> 31:
            raise refuse("BS_MUL_CFG", T4_BS_MUL, mul_cfg, "bit 31 and a 16-bit BS_ALU_SRC (minus the weight zero "
                         "point) on a plain-bias conv")
    elif leaky:
        base = (T4_BS_MUL_DEPTHWISE if depthwise else T4_BS_MUL_OBSERVED) & ~0x3F0000
        if mul_cfg & ~0x3F0000 != base or (mul_cfg >> 16) & 0x3F < LEAKY_SLOPE_BITS:
            bit31 = "bit 31 clear" if depthwise else "bit 31"
            raise refuse("BS_MUL_CFG", T4_BS_MUL, mul_cfg, f"{bit31} and a shift of at least 14 in bits 16..21 on a "
                         f"{activation} conv")
    elif depthwise or input_deconv:
        if mul_cfg != T4_BS_MUL_DEPTHWISE:
            kind = "depthwise conv" if depthwise else "deconv of the graph input"
            raise refuse("BS_MUL_CFG", T4_BS_MUL, mul_cfg, f"{T4_BS_MUL_DEPTHWISE:#x} (shift 14 in bits 16..21) on a "
                         f"{kind}")
    elif mul_cfg != T4_BS_MUL_OBSERVED:
        raise refuse("BS_MUL_CFG", T4_BS_MUL, mul_cfg, f"{T4_BS_MUL_OBSERVED:#x} (bit 31, shift 14 in bits 16..21)")
    offset, scale, shift = (reg(a, n) for a, n in zip(T4_OUT_CVT, ("OUT_CVT_OFFSET", "OUT_CVT_SCALE",
                                                                   "OUT_CVT_SHIFT")))
    flag = T4_OUT_CVT_RESIDUAL if residual else 0
    if scale & ~0xFFFF != flag:
        raise refuse("OUT_CVT_SCALE", T4_OUT_CVT[1], scale,
                      "a 16-bit scale" + (" with bit 16 set (residual convs)" if residual else ""))
    if shift & ~0x3F:
        raise refuse("OUT_CVT_SHIFT", T4_OUT_CVT[2], shift, "a 6-bit shift")
    if cfg == T4_BN_SHIFT:
        shift += residual_bn_shift(regs, where)
    truncated = core_truncation(regs, where, activation, T4_CORE_TRUNCATE)
    if plain:
        operand = mul_cfg & 0xFFFF
        return Requant(scale & 0xFFFF, shift, None, i32(offset), False, -i16(operand), truncated)
    mul_shift = ((mul_cfg >> 16) & 0x3F) - (LEAKY_SLOPE_BITS if leaky else 0)
    return Requant(scale & 0xFFFF, shift, mul_shift, i32(offset), True, 0, truncated)


def shortest_decimal(value: float, stored, preferred: Sequence[float] = ()) -> float:
    """The first of ``preferred``, else the decimal with the fewest significant digits (up to 9),
    for which ``stored(candidate)`` holds, else ``value``: the ONNX parameter a register value was
    rounded from (the vendor simulator uses the ONNX value, the register holds it rounded)."""
    for candidate in preferred:
        if stored(candidate):
            return candidate
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if stored(candidate):
            return candidate
    return value


def int8_leaky_slope(bits: int) -> Optional[float]:
    """The slope an int8 LeakyRelu's ``BN_MUL`` word holds: its high half a signed 16-bit value over
    2^:data:`LEAKY_SLOPE_BITS` (Abs, a slope of -1: 0xc000), its low half 0 (``None`` otherwise)."""
    return None if bits & 0xFFFF else i16(bits >> 16) / float(1 << LEAKY_SLOPE_BITS)


def slope_decimal(stored: float) -> float:
    """The ONNX slope an int8 LeakyRelu register's ``round(alpha * 2^14)`` (``stored`` over 2^14)
    was rounded from, taken to be the shortest decimal rounding to it (0.1, not 0.0999756)."""
    unit = 1 << LEAKY_SLOPE_BITS
    return shortest_decimal(stored, lambda a: round(a * unit) == round(stored * unit))


def f32(bits: int) -> float:
    """A 32-bit register word read as a float32."""
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def signed(bits: int, width: int) -> int:
    """A ``width``-bit register field (``0 <= bits < 2^width``) read as two's complement."""
    return bits - (1 << width) if bits >> (width - 1) & 1 else bits


def i32(bits: int) -> int:
    """A 32-bit register word read as a signed int32."""
    return signed(bits, 32)


def i16(bits: int) -> int:
    """A 16-bit register field read as a signed int16."""
    return signed(bits, 16)


def fused_activation(regs: Dict[Tuple[int, int], int], activation: str, where: str,
                     unit: Optional[float] = None, lut_cfg: int = BN_LUT,
                     clip_shifted_cfg: int = BN_CLIP_SHIFTED) -> Dict[str, float]:
    """The parameters of a conv's (or deconv's) fused ``activation``, from the node's DPU registers:
    ``{"alpha": slope}`` for ``LeakyRelu``, ``{"min": lo, "max": hi}`` for ``Clip``,
    and (fp16 files) ``{"lut_scale": M, "lut_offset": A}`` for ``HardSigmoid`` (its
    lookup-table index ``u = x * M + A``: ``M = f16(alpha * 32768)``,
    ``A = M * (beta - 0.5) / alpha``).  See ``docs/vendor-format-notes.md`` §1.

    ``unit``: ``None`` for an fp16 file, whose registers hold floats; for an int8 file the
    real value of one accumulator unit (``s_out * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT``), which
    scales its integer clip bounds; its LeakyRelu slope is ``round(alpha * 2^14)``.
    ``lut_cfg``: the platform's ``BN_CFG`` of a lookup-table conv (rk3566/rk3568: ``BN_LUT_LITE``);
    ``clip_shifted_cfg``: its ``BN_CFG`` of a shifted clip (rk3566/rk3568: ``BN_CLIP_SHIFTED_LITE``).

    Observed layouts (and only those are accepted): LeakyRelu: ``BN_CFG`` 0x62, the slope
    in the high half of 0x4068 (float16, or the integer).  Clip: ``BN_CFG`` 0x92 ->
    ``[0, r(0x406c)]``; ``BN_CFG`` 0x20090 -> ``x + a`` (``a = r(0x4064)``) clipped to
    ``[0, r(0x406c)]`` then ``- a`` (0x4090..0x40ac hold ``-a``): ``[-a, r(0x406c) - a]``,
    ``r`` the register as a float32 (fp16 files) or an int32 times ``unit``."""
    reg = dpu_reader(regs, where)

    def real(address: int) -> float:
        return f32(reg(address)) if unit is None else i32(reg(address)) * unit

    cfg = reg(REG_BN_CFG)
    if activation == "HardSigmoid" and cfg == lut_cfg and unit is None:
        bits = reg(REG_BN_MUL)
        if bits & 0xFFFF == 0:
            scale = struct.unpack("<e", struct.pack("<H", bits >> 16))[0]
            if scale > 0:
                return {"lut_scale": float(scale), "lut_offset": f32(reg(REG_BN_ADD))}
    elif activation == "LeakyRelu" and cfg == _BN_LEAKY:
        bits = reg(REG_BN_MUL)
        if bits & 0xFFFF == 0:
            if unit is None:
                return {"alpha": float(struct.unpack("<e", struct.pack("<H", bits >> 16))[0])}
            return {"alpha": int8_leaky_slope(bits)}
    elif activation == "Clip" and cfg == _BN_CLIP and reg(REG_BN_ADD) == 0:
        return {"min": 0.0, "max": real(REG_BN_RELUX)}
    elif activation == "Clip" and cfg == clip_shifted_cfg:
        add = real(REG_BN_ADD)
        if all(real(a) == -add for a in REG_EW_ADD):
            return {"min": -add, "max": real(REG_BN_RELUX) - add}
    shown = ", ".join(f"{a:#x}={regs.get((TARGET_DPU, a), 0):#x}" for a in (REG_BN_CFG, REG_BN_ADD, REG_BN_MUL,
                                                                            REG_BN_RELUX))
    precision = "fp16" if unit is None else "int8"
    raise ModelInvalidError(f"{where}: the DPU registers of its fused {activation} ({shown}) are not a layout whose "
                            f"activation parameters were decoded ({precision} file)", op="load")
