"""Recover fused-activation parameters, per-layer int8 details and op attributes from vendor
``.rknn`` files, and print them next to what the ONNX model said.

Evidence for ``docs/vendor-format-notes.md``; every number printed here is read from the file
with the project's FlatBuffer reader (through ``rkdump``)::

    python tools/vendor_corpus/investigate_params.py [tests/data/vendor]

The decoding rules (all observed on RKNN-Toolkit2 2.5.0 output) are the functions below.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Dict, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rkdump import RknnFile  # noqa: E402

DPU = 0x1001
CNA_ENABLE = 1

# DPU register addresses used below (names as in public RKNPU register maps, for orientation).
BS_MUL_CFG = 0x4048
BS_OW_OP = 0x4054
BN_CFG = 0x4060
BN_ALU_OPERAND = 0x4064
BN_MUL_CFG = 0x4068
BN_RELUX_CMP = 0x406C
EW_CFG = 0x4070
OUT_CVT_OFFSET = 0x4080
OUT_CVT_SCALE = 0x4084
OUT_CVT_SHIFT = 0x4088
EW_OP_VALUE0 = 0x4090


def f32(v: int) -> float:
    return struct.unpack("<f", struct.pack("<I", v & 0xFFFFFFFF))[0]


def f16_hi(v: int) -> float:
    return float(np.frombuffer(struct.pack("<H", (v >> 16) & 0xFFFF), "<f2")[0])


def s32(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def node_dpu_regs(f: RknnFile, node_index: int) -> Dict[int, int]:
    """DPU register values of the node's first CNA-enabled task (the single-core stream)."""
    for task in f.tasks():
        if task.op_idx == node_index and task.enable_mask & CNA_ENABLE:
            return {reg: val for tgt, reg, val in f.task_regs(task) if tgt == DPU}
    return {}


def first_node(f: RknnFile, prefix: str):
    return next(n for n in f.nodes() if n.op.startswith(prefix))


def is_int8(f: RknnFile, node) -> bool:
    return f.tensors()[node.outputs[0]].dtype == 3


def acc_unit(f: RknnFile, node, regs: Dict[int, int]) -> float:
    """Real value of one accumulator unit after the BS stage, for a node whose output is NOT a
    LUT: s_out * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT."""
    s_out = f.tensors()[node.outputs[0]].scale[0]
    return s_out * regs[OUT_CVT_SCALE] / 2.0 ** regs[OUT_CVT_SHIFT]


def leaky_slope(f: RknnFile, node) -> float:
    regs = node_dpu_regs(f, node.index)
    v = regs[BN_MUL_CFG]
    return (v >> 16) / 2.0 ** 14 if is_int8(f, node) else f16_hi(v)


def clip_bounds(f: RknnFile, node) -> Tuple[float, float]:
    regs = node_dpu_regs(f, node.index)
    shifted = bool(regs[EW_CFG] >> 28 & 1)  # lo != 0: x - lo is clamped to [0, hi - lo], then lo added back
    if is_int8(f, node):
        u = acc_unit(f, node, regs)
        lo = s32(regs[EW_OP_VALUE0]) * u if shifted else 0.0
        return lo, s32(regs[BN_RELUX_CMP]) * u + lo
    lo = f32(regs[EW_OP_VALUE0]) if shifted else 0.0
    return lo, f32(regs[BN_RELUX_CMP]) + lo


def hardsigmoid_params(f: RknnFile, node) -> Tuple[Optional[float], float]:
    """(alpha, beta).  fp16: LUT index u = x*M + A with M = fp16 BN_MUL hi half, A = f32 operand;
    the LUT spans u in [-16384, 16384] for y in [0, 1].  int8: u = (acc*M + A) >> shift, so beta is
    exact and alpha needs the accumulator unit, which a LUT node's OUT_CVT does not give (None)."""
    regs = node_dpu_regs(f, node.index)
    mul = regs[BN_MUL_CFG]
    if is_int8(f, node):
        shift = (mul >> 8) & 0xFF
        return None, 0.5 + s32(regs[BN_ALU_OPERAND]) / (2.0 ** shift * 32768.0)
    m = f16_hi(mul)
    return m / 32768.0, 0.5 + f32(regs[BN_ALU_OPERAND]) / 32768.0


def lut_tables(f: RknnFile):
    """The two 513-entry int16 tables a LUT-loading task writes through DPU 0x4100/0x4104."""
    for task in f.tasks():
        writes = [(reg, val) for tgt, reg, val in f.task_regs(task) if tgt == DPU and reg in (0x4100, 0x4104)]
        if sum(1 for reg, _ in writes if reg == 0x4104) >= 1026:
            tables, cur = {}, None
            for reg, val in writes:
                if reg == 0x4100:
                    cur = tables.setdefault(val, [])
                elif cur is not None:
                    cur.append(s32(val))
            return {k: np.array(v) for k, v in tables.items() if len(v) > 1}
    return {}


def param_strings(node) -> Dict[int, str]:
    out = {}
    if node.param is None:
        return out
    for slot in range(node.param.num_slots):
        if node.param.has(slot):
            try:
                out[slot] = node.param.string(slot)
            except Exception:
                pass
    return out


def main(argv=None) -> int:
    d = (argv or sys.argv[1:] or [os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "vendor")])[0]

    def open_(name):
        return RknnFile(os.path.join(d, name))

    print("LeakyRelu slope (ONNX 0.1 / 0.3):")
    for v in ("fp16", "i8"):
        for stem in ("conv_leaky01", "conv_leaky03"):
            f = open_(f"{stem}_{v}.rknn")
            print(f"  {stem}_{v}: {leaky_slope(f, first_node(f, 'Conv')):.6f}")
    print("Clip bounds (ONNX conv_clip = (-1, 2), conv_relu6 = (0, 6)):")
    for v in ("fp16", "i8"):
        for stem in ("conv_clip", "conv_relu6"):
            f = open_(f"{stem}_{v}.rknn")
            lo, hi = clip_bounds(f, first_node(f, "Conv"))
            print(f"  {stem}_{v}: lo {lo:.5f} hi {hi:.5f}")
    print("HardSigmoid (ONNX alpha 0.3, beta 0.4):")
    for v in ("fp16", "i8"):
        f = open_(f"conv_hardsigmoid_{v}.rknn")
        print(f"  conv_hardsigmoid_{v}: alpha, beta = {hardsigmoid_params(f, first_node(f, 'Conv'))}")
    print("LUT tables (first / middle / last entry of each half):")
    for stem in ("conv_sigmoid", "conv_hardsigmoid", "conv_hardswish", "conv_swish"):
        f = open_(f"{stem}_fp16.rknn")
        for sel, t in lut_tables(f).items():
            print(f"  {stem}: select {sel:#x}: {len(t)} entries {t[0]} {t[len(t) // 2]} {t[-1]}")
    print("Per-layer int8 weight zero point (DPU 0x4054 = -zp_w) vs per-channel:")
    for v in ("i8", "i8_layer"):
        f = open_(f"convnet_{v}.rknn")
        convs = [n for n in f.nodes() if n.op.startswith("Conv")]
        print(f"  convnet_{v}: " + ", ".join(
            f"{n.name}: 0x4054={s32(node_dpu_regs(f, n.index).get(BS_OW_OP, 0))} "
            f"BS_MUL={node_dpu_regs(f, n.index).get(BS_MUL_CFG, 0):#x}" for n in convs))
    print("Resize param strings (slot: value):")
    for stem in ("resize_nearest_fp16", "resize_bilinear_fp16"):
        f = open_(f"{stem}.rknn")
        print(f"  {stem}: {param_strings(first_node(f, 'Resize'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
