"""int8 lookup-table activations of vendor files, run from the file's own tables.

An int8 ``ConvSigmoid``, ``ConvExSwish``, ``ConvHardSwish`` or ``ConvHardSigmoid`` runs its
function on the NPU's DPU lookup table (``docs/vendor-format-notes.md`` §1, §8):

* a task of the node before its conv task loads two tables: ``0x4100 = 0x20000`` (write
  access, table 0 "LE") then one write to ``0x4104`` per entry, ``0x4100 = 0x30000``
  (table 1 "LO") then its entries; each entry an int16 (the value sign-extended to 32 bits);
* the conv task's DPU registers map the int32 accumulator to the table index,
  ``u = ((acc * mul[c] >> ms) * M + A) >> s`` (``mul[c]``: the bias block's channel
  multiplier, ``ms`` the ``BS_MUL_CFG`` shift; ``M``, ``s``: 0x4068 bits 16..31 / 8..15;
  ``A``: 0x4064), give the tables' ranges (0x4110/0x4114 LE start/end, 0x4118/0x411c LO
  start/end; 0x410c bits 8..15 / 16..23 the log2 of the entry spacing), the slopes outside
  them (0x4120/0x4124 LE, 0x4128/0x412c LO: ``{oflow scale[31:16], uflow scale[15:0]}`` and
  ``{oflow shift[9:5], uflow shift[4:0]}``), and the output conversion of the table value to
  int8 (``OUT_CVT`` 0x4080/0x4084/0x4088).

:func:`lower_lut_conv` lowers such a node to three executor nodes: ``VendorCodes``
(the input's integer codes ``q - zp``), ``Conv`` on integer-valued weights ``q_w - zp_w``
and bias ``bias_i32 + zp_in * sum(q_w - zp_w)`` (the exact accumulator,
:mod:`.accumulator`), and ``VendorLutActivation``
(:mod:`rknnlite.backends.software.ops.vendor_lut`) with the decoded tables.  No weight
scale and no per-function constant is needed.  Registers outside the observed layout
raise :class:`~rknnlite.errors.ModelInvalidError` naming them.

A standalone int8 ``Sigmoid`` (no conv to fuse into) uses the same tables from a DPU-only
task: :func:`lower_lut_sigmoid` feeds the input's integer codes straight to
``VendorLutActivation``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .accumulator import Accumulator, emit_accumulator, emit_codes
from .regcmd import (BN_LUT, REG_BN_ADD, REG_BN_CFG, REG_BN_MUL, TARGET_DPU, Requant, Task, dpu_reader, i16, i32,
                     node_registers, requant_of, task_writes)

__all__ = ["LutTables", "LutStage", "read_lut_tables", "lut_stage", "lut_attrs", "table_problem", "lower_lut_conv",
           "lut_task_registers", "lower_lut_sigmoid"]

REG_LUT_ACCESS = 0x4100
REG_LUT_DATA = 0x4104
REG_LUT_CFG = 0x4108
REG_LUT_INFO = 0x410C
REG_LE_START, REG_LE_END, REG_LO_START, REG_LO_END = 0x4110, 0x4114, 0x4118, 0x411C
REG_LE_SLOPE_SCALE, REG_LE_SLOPE_SHIFT, REG_LO_SLOPE_SCALE, REG_LO_SLOPE_SHIFT = 0x4120, 0x4124, 0x4128, 0x412C
_LUT_CFG_SEEN = (0x68,)
_WRITE_LE, _WRITE_LO = 0x20000, 0x30000


@dataclass(frozen=True)
class LutTables:
    """The two tables a node's LUT task loads: ``le`` (table 0) and ``lo`` (table 1), int16
    values in 1/32768 units of the table's output, new arrays."""

    le: np.ndarray
    lo: np.ndarray


@dataclass(frozen=True)
class LutStage:
    """The conv task's lookup-table registers, decoded.

    ``u = (y * index_mul + index_add) / 2^index_shift`` with ``y`` the accumulator after the
    channel multipliers; tables over ``[le_start, le_end]`` and ``[lo_start, lo_end]`` with
    entries ``2^entry_shift`` apart; ``le_uflow_slope`` / ``lo_oflow_slope``: table units per
    index unit below / above them."""

    index_mul: int
    index_add: int
    index_shift: int
    le_start: int
    le_end: int
    lo_start: int
    lo_end: int
    entry_shift: int
    le_uflow_slope: float
    lo_oflow_slope: float


def read_lut_tables(regcmd, tasks: List[Task], node_index: int, where: str) -> LutTables:
    """The LE and LO tables of node ``node_index``: written to ``0x4104`` after ``0x4100`` =
    0x20000 (LE) / 0x30000 (LO) by its first task that loads them, or (rk3566, whose tasks hold
    fewer register writes) by two consecutive tasks, one table each."""
    tables: Dict[int, List[int]] = {}
    for task in tasks:
        if task.op_idx != node_index:
            continue
        writes = [(reg, value) for target, reg, value in task_writes(regcmd, task, where) if target == TARGET_DPU]
        if not any(reg == REG_LUT_ACCESS and value in (_WRITE_LE, _WRITE_LO) for reg, value in writes):
            continue
        current: Optional[int] = None
        for reg, value in writes:
            if reg == REG_LUT_ACCESS:
                if value in (_WRITE_LE, _WRITE_LO):
                    if value in tables:
                        raise ModelInvalidError(f"{where}: LUT table {value >> 16 & 1} is loaded twice before the "
                                                "other one", op="load")
                    current = value
                    tables[current] = []
                elif value == 0:
                    current = None
                else:
                    raise ModelInvalidError(f"{where}: LUT access register 0x4100 = {value:#x} is not a table write "
                                            "seen (0x20000 LE, 0x30000 LO, 0)", op="load")
            elif reg == REG_LUT_DATA and current is not None:
                if value >> 15 not in (0, 0x1FFFF):
                    raise ModelInvalidError(f"{where}: LUT entry {len(tables[current])} of table "
                                            f"{current >> 16 & 1} is {value:#x}, not a sign-extended int16", op="load")
                tables[current].append(i16(value & 0xFFFF))
        if set(tables) == {_WRITE_LE, _WRITE_LO}:
            return LutTables(np.array(tables[_WRITE_LE], np.int16), np.array(tables[_WRITE_LO], np.int16))
    if tables:
        raise ModelInvalidError(f"{where}: the tasks of node {node_index} load LUT tables "
                                f"{[t >> 16 & 1 for t in tables]}, not both table 0 (LE) and table 1 (LO)", op="load")
    raise ModelInvalidError(f"{where}: no task of node {node_index} loads a lookup table (0x4100 = 0x20000/0x30000)",
                            op="load")


def _node_tables(lowering, node, where: str) -> LutTables:
    """The tables node ``node`` loads (:func:`read_lut_tables`), without the entry rk3566/rk3568
    write after each (a copy of entry 1, as if the table wrapped around; anything else is
    refused)."""
    tables = read_lut_tables(lowering.regcmd(), lowering.tasks(), node.index, where)
    if not lowering.lite_platform():
        return tables
    for table, name in ((tables.le, "LE"), (tables.lo, "LO")):
        if len(table) != 514 or table[-1] != table[1]:
            raise ModelInvalidError(f"{where}: the rk3566 {name} table has {len(table)} entries ending in "
                                    f"{table[-1:].tolist()}; 513 and a copy of entry 1 were observed", op="load")
    return LutTables(tables.le[:513], tables.lo[:513])


def lut_stage(regs: Dict[Tuple[int, int], int], where: str, bn_cfg: int = BN_LUT,
              lut_cfgs: Tuple[int, ...] = _LUT_CFG_SEEN) -> LutStage:
    """The lookup-table registers of a conv task (``{(target, reg): value}``), decoded and
    checked against the layout observed (see the module doc); ``bn_cfg``: the platform's
    ``BN_CFG`` of a lookup-table conv (rk3566/rk3568: ``BN_LUT_LITE``), ``lut_cfgs``: its
    ``LUT_CFG`` values seen (rk3562: :data:`.t4act.T4_LUT_CFG`)."""
    reg = dpu_reader(regs, where, "(a lookup-table conv needs it)")

    def refuse(address: int, expected: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: lookup-table register {address:#x} = {reg(address):#x} is not the "
                                 f"observed layout ({expected})", op="load")

    if reg(REG_BN_CFG) != bn_cfg:
        raise refuse(REG_BN_CFG, f"BN_CFG {bn_cfg:#x}")
    bits = reg(REG_BN_MUL)
    if bits & 0xFF or bits >> 16 == 0:
        raise refuse(REG_BN_MUL, "multiplier M in bits 16..31, shift s in bits 8..15, low byte 0")
    if reg(REG_LUT_CFG) not in lut_cfgs:
        raise refuse(REG_LUT_CFG, ", ".join(f"{v:#x}" for v in lut_cfgs))
    info = reg(REG_LUT_INFO)
    le_select, lo_select = (info >> 8) & 0xFF, (info >> 16) & 0xFF
    if info & ~0xFFFF00 or le_select != lo_select or not 0 < le_select < 16:
        raise refuse(REG_LUT_INFO, "one entry spacing 2^k for both tables in bits 8..15 and 16..23")
    le_start, le_end, lo_start, lo_end = (i32(reg(a)) for a in (REG_LE_START, REG_LE_END, REG_LO_START, REG_LO_END))
    if not le_start < le_end == lo_start < lo_end:
        raise ModelInvalidError(f"{where}: LUT ranges LE [{le_start}, {le_end}] and LO [{lo_start}, {lo_end}] are not "
                                "two adjacent ascending ranges (the observed layout)", op="load")
    le_scale, le_shift = reg(REG_LE_SLOPE_SCALE), reg(REG_LE_SLOPE_SHIFT)
    lo_scale, lo_shift = reg(REG_LO_SLOPE_SCALE), reg(REG_LO_SLOPE_SHIFT)
    # the LE table's overflow and the LO table's underflow never apply to adjacent ranges; zero was always seen
    if le_scale >> 16:
        raise refuse(REG_LE_SLOPE_SCALE, "no LE overflow slope")
    if lo_scale & 0xFFFF:
        raise refuse(REG_LO_SLOPE_SCALE, "no LO underflow slope")
    if le_shift & ~0x3FF or lo_shift & ~0x3FF:
        raise refuse(REG_LE_SLOPE_SHIFT if le_shift & ~0x3FF else REG_LO_SLOPE_SHIFT, "two 5-bit shifts")
    return LutStage(bits >> 16, i32(reg(REG_BN_ADD)), (bits >> 8) & 0xFF, le_start, le_end, lo_start, lo_end,
                    le_select, i16(le_scale & 0xFFFF) / float(1 << (le_shift & 0x1F)),
                    i16(lo_scale >> 16) / float(1 << ((lo_shift >> 5) & 0x1F)))


def table_problem(le_entries: int, lo_entries: int, le_start: int, le_end: int, lo_start: int, lo_end: int,
                  index_shift: int) -> Optional[str]:
    """What is wrong with tables of these sizes over these index ranges (two adjacent ascending
    ranges, one entry every ``2^index_shift`` units from start to end inclusive), or ``None``."""
    if not (0 <= index_shift < 31 and le_start < le_end == lo_start < lo_end):
        return (f"table ranges LE [{le_start}, {le_end}] and LO [{lo_start}, {lo_end}] with entry spacing "
                f"2^{index_shift} are not two adjacent ascending ranges")
    for name, count, (a, b) in (("LE", le_entries, (le_start, le_end)), ("LO", lo_entries, (lo_start, lo_end))):
        entries = ((b - a) >> index_shift) + 1
        if (b - a) % (1 << index_shift) or count != entries:
            return (f"the {name} table has {count} entries; its range [{a}, {b}] in steps of 2^{index_shift} "
                    f"needs {entries}")
    return None


def lut_attrs(stage: LutStage, tables: LutTables, mul: np.ndarray, mul_shift: Optional[int], out_multiplier: float,
              out_zero_point: int, out_scale: float, where: str) -> dict:
    """The ``VendorLutActivation`` attributes of a node: its index map per channel
    (``mul``: the channel multipliers, ignored when ``mul_shift`` is ``None``, the stage
    bypassed), tables, slopes and output conversion (``out_multiplier`` =
    ``OUT_CVT_SCALE / 2^OUT_CVT_SHIFT``; the output tensor's zero point and scale)."""
    problem = table_problem(len(tables.le), len(tables.lo), stage.le_start, stage.le_end, stage.lo_start,
                            stage.lo_end, stage.entry_shift)
    if problem:
        raise ModelInvalidError(f"{where}: {problem}", op="load")
    channel = np.ones(len(mul)) if mul_shift is None else mul.astype(np.float64) / float(1 << mul_shift)
    if not np.all(channel > 0):
        raise ModelInvalidError(f"{where}: the bias block's channel multipliers {mul.tolist()} are not all positive",
                                op="load")
    step = 2.0 ** -stage.index_shift
    return {"index_scale": (channel * stage.index_mul * step).tolist(), "index_offset": stage.index_add * step,
            "le_table": tables.le.tolist(), "lo_table": tables.lo.tolist(),
            "le_start": stage.le_start, "le_end": stage.le_end, "lo_start": stage.lo_start, "lo_end": stage.lo_end,
            "index_shift": stage.entry_shift, "le_uflow_slope": stage.le_uflow_slope,
            "lo_oflow_slope": stage.lo_oflow_slope, "out_multiplier": out_multiplier,
            "out_zero_point": int(out_zero_point), "out_scale": float(out_scale)}


def lower_lut_conv(lowering, node, x, out, w, q: np.ndarray, b, attrs: dict, activation: str,
                   stage_of: Optional[Callable[[LutTables], Tuple[LutStage, Requant]]] = None) -> None:
    """Emit the executor nodes of an int8 lookup-table conv (see the module doc) on
    ``lowering`` (lower.py's ``_Lowering``): ``x``/``out``/``w``/``b`` the vendor tensors,
    ``q`` the int8 weight in model layout (depthwise already ``[C, 1, kh, kw]``), ``attrs``
    the Conv attributes, ``activation`` the fused function (``lower``'s names: whether a
    truncated accumulator was checked, :func:`.regcmd.core_truncation`).  ``stage_of``: for a register map other than rk3588's
    (rk3576/rv1126b, :func:`.f2act.f2_lut_stage`), the index map and output conversion
    decoded from the node's tables; by default they are read from the rk3588 registers."""
    where = f"{lowering.label}: {node.label}"
    if x.dtype != "int8" or out.dtype != "int8" or q.dtype != np.int8:
        raise lowering.error(f"{node.label}: an int8 lookup-table conv needs int8 input, weight and output "
                             f"(got {x.dtype}, {q.dtype}, {out.dtype})")
    if b is None or b.dtype != "int32":
        raise lowering.error(f"{node.label} has no int32 bias; its accumulator cannot be recovered")
    tables = _node_tables(lowering, node, where)
    if stage_of is None:
        regs = node_registers(lowering.regcmd(), lowering.tasks(), node.index, where)
        requant, stage = requant_of(regs, where, activation), lut_stage(regs, where, lowering.lut_bn_cfg())
    else:
        stage, requant = stage_of(tables)
    channels = q.shape[0]
    bias_i32, w_zp, mul = lowering.int8_bias(node, x, out, b, requant, channels)
    if not requant.bias_blocks:  # per-layer: the table's index map takes a multiplier of one
        mul = np.ones(channels, np.int64)
    qi, qo = lowering.activation_quant(x), lowering.activation_quant(out)
    s_in, zp_in = qi.scale[0], qi.zero_point[0]
    if requant.offset != qo.zero_point[0]:
        raise lowering.error(f"{node.label}: OUT_CVT_OFFSET is {requant.offset} but the output's zero point is "
                             f"{qo.zero_point[0]}; the register layout is not the one decoded")
    acc = Accumulator.of(q, w_zp, bias_i32 << requant.truncated, zp_in, s_in)
    mul_shift = None if requant.mul_shift is None else requant.mul_shift + requant.truncated
    params = lut_attrs(stage, tables, mul, mul_shift, requant.multiplier, qo.zero_point[0], qo.scale[0], where)
    total = emit_accumulator(lowering, node, x, out, w, b, acc, attrs)
    lowering.emit(node, "VendorLutActivation", [total], params)


def lut_task_registers(regcmd, tasks: List[Task], node_index: int, where: str,
                       bn_cfg: int = BN_LUT) -> Dict[Tuple[int, int], int]:
    """``{(target, reg): value}`` of the first task of node ``node_index`` that runs the
    lookup table (writes ``BN_CFG`` = ``bn_cfg``, the platform's) without loading it: the
    DPU-only task of a standalone int8 LUT op (its tables are loaded by an earlier task of the
    same node)."""
    for task in tasks:
        if task.op_idx != node_index:
            continue
        writes = task_writes(regcmd, task, where)
        regs = {(target, reg): value for target, reg, value in writes}
        loads = any(target == TARGET_DPU and reg == REG_LUT_ACCESS and value in (_WRITE_LE, _WRITE_LO)
                    for target, reg, value in writes)
        if not loads and regs.get((TARGET_DPU, REG_BN_CFG)) == bn_cfg:
            return regs
    raise ModelInvalidError(f"{where}: no task of node {node_index} runs the lookup table (BN_CFG {bn_cfg:#x} "
                            "without a table load)", op="load")


def lower_lut_sigmoid(lowering, node, x, out,
                      decode: Optional[Callable[[Dict[Tuple[int, int], int], str, LutTables],
                                                Tuple[LutStage, Requant]]] = None) -> None:
    """Emit the executor nodes of a standalone int8 ``Sigmoid`` on ``lowering`` (lower.py's
    ``_Lowering``; ``x``/``out`` the vendor tensors).  The NPU runs it on the DPU alone: one
    task of the node loads the tables, a later one maps the input's raw int8 code ``q`` to the
    table index ``u = (q * M + A) >> s`` (``A`` = ``-zp_in * M`` folds the zero point in) and
    converts the table value to int8 with ``OUT_CVT``.  Lowered to ``VendorCodes`` (the
    codes ``q - zp_in``) and ``VendorLutActivation`` with offset ``(A + zp_in * M) / 2^s``.
    ``decode(regs, where, tables)``: for a register map other than rk3588's (rk3562,
    :func:`.t4act.t4_lut_task`; rk3576/rv1126b, :func:`.f2act.f2_lut_task`), the index map and
    output conversion of the task's registers."""
    where = f"{lowering.label}: {node.label}"
    if x.dtype != "int8" or out.dtype != "int8":
        raise lowering.error(f"{node.label}: an int8 lookup-table {node.op} needs int8 input and output "
                             f"(got {x.dtype}, {out.dtype})")
    regs = lut_task_registers(lowering.regcmd(), lowering.tasks(), node.index, where, lowering.lut_bn_cfg())
    tables = _node_tables(lowering, node, where)
    if decode is not None:
        stage, requant = decode(regs, where, tables)
    else:
        requant = requant_of(regs, where)
        stage = lut_stage(regs, where, lowering.lut_bn_cfg())
    if requant.mul_shift is not None:
        raise lowering.error(f"{node.label}: its lookup-table task enables the per-channel multiplier stage, which a "
                             "DPU-only op has no multipliers for; the register layout is not the one decoded")
    qi, qo = lowering.activation_quant(x), lowering.activation_quant(out)
    s_in, zp_in = qi.scale[0], qi.zero_point[0]
    if requant.offset != qo.zero_point[0]:
        raise lowering.error(f"{node.label}: OUT_CVT_OFFSET is {requant.offset} but the output's zero point is "
                             f"{qo.zero_point[0]}; the register layout is not the one decoded")
    if len(x.shape) < 2:
        raise lowering.error(f"{node.label}: a {len(x.shape)}-D lookup-table {node.op}; its channels are axis 1 of "
                             "a tensor of at least 2 dimensions")
    channels = x.shape[1]
    stage = replace(stage, index_add=stage.index_add + zp_in * stage.index_mul)  # the map of the codes q - zp_in
    params = lut_attrs(stage, tables, np.ones(channels, np.int64), None, requant.multiplier, qo.zero_point[0],
                       qo.scale[0], where)
    lowering.emit(node, "VendorLutActivation", [emit_codes(lowering, node, lowering.names[x.index], s_in)], params)
