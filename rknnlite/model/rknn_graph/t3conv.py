"""rv1106/rv1103 ("RKNPU t3") int8 convs: their attributes from the CNA registers and their
requantization from the DPU registers.

The graph embedded in an rv1106 container (:data:`rknnlite.model.schema.T3`) gives each node
its type, name and tensors, but no parameter table and no BSON: a conv's stride and padding
are only in the register commands of its task.  Observed on RKNN-Toolkit2 2.3.2 and 2.5.0
files, one attribute varied at a time (``docs/vendor-format-notes.md``, "The rv1106/rv1103
container"), in rk3588's register encoding:

* CNA (target 0x0201) ``CONV_CON1`` 0x100c = 0 on a plain conv, 0x2000a000 on one reading the
  graph's image input (7 on a depthwise conv, whose weight and bias layouts were not decoded:
  refused); ``CONV_CON3`` 0x1014: the x stride in
  bits 0..2, the y stride in bits 3..5 (dilation sets bits from 16: refused); ``PAD_CON0``
  0x1068: the top pad in bits 0..3, the left pad in bits 8..11; the bottom and right pads
  follow from the output size (the NPU reads no row or column past it); 0x1038: kernel
  height, width and output channels in bits 24..31, 16..23 and 0..15.
* DPU (target 0x1001): ``OUT_CVT`` offset / scale / shift at rk3588's addresses 0x4080 /
  0x4084 / 0x4088; per-channel bias blocks of 4 channels (0x4050 = 0x30000001) whose
  multipliers have the shift 14 in 0x4054 (0x8e000000: bit 31 and the shift in bits 24..29;
  rk3588 keeps it in 0x4048 bits 8..13, where rv1106 writes 1); ``BN_CFG`` 0x4060 0x13 on a
  plain conv and 0x12 with a fused Relu, whose lower clamps 0x406c and 0x40e0 are then 0
  (``INT32_MIN`` otherwise) and upper clamps 0x4028 and 0x40e4 ``INT32_MAX``.

Every other value of those registers is refused by name: a register variant that was never
checked against the simulator could produce numbers, and wrong numbers are worse than none.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ...errors import ModelInvalidError
from .regcmd import TARGET_CNA, TARGET_DPU, Requant

__all__ = ["T3_PLATFORMS", "T3_OPS", "t3_conv_params", "requant_t3", "t3_unsupported_ops"]

#: the platforms whose files are the rv1106 container
T3_PLATFORMS = ("rv1106", "rv1103")
#: the vendor op types of those files whose attributes were decoded from their registers
T3_OPS = frozenset({"InputOperator", "OutputOperator", "Conv", "ConvRelu"})

_CONV_CON1 = 0x100C
#: CONV_CON1 of a plain conv: conv mode 0 in bits 0..3, int8 in bits 4..9; a conv on the graph's
#: image input also sets bits 13, 15 and 29 (how its pixels are fetched; rk3588 writes 0x6000a000)
_PLAIN_CON1 = (0x0, 0x2000A000)
_CONV_CON3 = 0x1014
_KERNEL = 0x1038
_PAD_CON0 = 0x1068
_STRIDE_BITS = 0x3F
_PAD_BITS = 0x0F0F

_OUT_CVT_OFFSET, _OUT_CVT_SCALE, _OUT_CVT_SHIFT = 0x4080, 0x4084, 0x4088
_BN_CFG = 0x4060
_INT32_MIN, _INT32_MAX = 0x80000000, 0x7FFFFFFF
#: the DPU values every decoded conv writes
_FIXED = {0x4048: 0x1, 0x404C: _INT32_MIN, 0x4050: 0x30000001, 0x4054: 0x8E000000}
_MUL_SHIFT = 14  # 0x4054 = bit 31 | 14 << 24
#: per fused activation: BN_CFG, the lower clamps (0x406c, 0x40e0) and the upper ones (0x4028, 0x40e4)
_ACTIVATION = {None: {_BN_CFG: 0x13, 0x406C: _INT32_MIN, 0x40E0: _INT32_MIN, 0x4028: _INT32_MAX, 0x40E4: _INT32_MAX},
               "Relu": {_BN_CFG: 0x12, 0x406C: 0, 0x40E0: 0, 0x4028: _INT32_MAX, 0x40E4: _INT32_MAX}}


def t3_unsupported_ops(ops: Sequence[str]) -> List[str]:
    """The op types among ``ops`` whose attributes were not decoded from an rv1106 file."""
    return sorted(set(ops) - T3_OPS)


def _reg(regs: Dict[Tuple[int, int], int], target: int, address: int, where: str, unit: str) -> int:
    value = regs.get((target, address))
    if value is None:
        raise ModelInvalidError(f"{where}: the conv's task does not write {unit} register {address:#x} "
                                "(rv1106 map)", op="load")
    return value


def t3_conv_params(regs: Dict[Tuple[int, int], int], w_shape: Sequence[int], x_shape: Sequence[int],
                   out_shape: Sequence[int], where: str) -> Dict[str, object]:
    """The ONNX attributes of an rv1106 conv (``kernel_shape``, ``pads``, ``strides``,
    ``dilations``, ``group``) from its CNA registers (``regs``: :func:`.regcmd.node_registers`),
    its weight's model shape ``[O, I, kh, kw]`` and its input and output NCHW shapes.

    Raises:
        ModelInvalidError: a depthwise or dilated conv, a register value outside the decoded
            fields, or registers that disagree with the tensors' shapes.
    """
    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message} (rv1106 map: docs/vendor-format-notes.md)", op="load")

    if len(w_shape) != 4 or len(x_shape) != 4 or len(out_shape) != 4:
        raise refuse(f"weight {list(w_shape)}, input {list(x_shape)} and output {list(out_shape)} are not all 4-D")
    con1 = _reg(regs, TARGET_CNA, _CONV_CON1, where, "CNA")
    if con1 not in _PLAIN_CON1:
        raise refuse(f"CNA_CONV_CON1 ({_CONV_CON1:#x}) = {con1:#x}: only plain convs ({', '.join(map(hex, _PLAIN_CON1))}) "
                     "were decoded, not depthwise or grouped ones (7)")
    con3 = _reg(regs, TARGET_CNA, _CONV_CON3, where, "CNA")
    if con3 & ~_STRIDE_BITS:
        raise refuse(f"CNA_CONV_CON3 ({_CONV_CON3:#x}) = {con3:#x} sets bits beyond the strides (dilated convs "
                     "were not decoded)")
    stride_x, stride_y = con3 & 7, (con3 >> 3) & 7
    pad = _reg(regs, TARGET_CNA, _PAD_CON0, where, "CNA")
    if pad & ~_PAD_BITS:
        raise refuse(f"CNA_PAD_CON0 ({_PAD_CON0:#x}) = {pad:#x} sets bits beyond the top and left pads")
    top, left = pad & 0xF, (pad >> 8) & 0xF
    channels_out, _, kh, kw = w_shape
    kernel = _reg(regs, TARGET_CNA, _KERNEL, where, "CNA")
    if kernel != (kh << 24 | kw << 16 | channels_out):
        raise refuse(f"register {_KERNEL:#x} = {kernel:#x} is not the weight's kernel {kh}x{kw} and {channels_out} "
                     "output channels")
    if min(stride_x, stride_y) < 1:
        raise refuse(f"CNA_CONV_CON3 ({_CONV_CON3:#x}) = {con3:#x} gives a stride of 0")
    # the fewest bottom/right pads that give the output size (rows past the last window are never read)
    bottom = max(0, (out_shape[2] - 1) * stride_y + kh - x_shape[2] - top)
    right = max(0, (out_shape[3] - 1) * stride_x + kw - x_shape[3] - left)
    if (x_shape[2] + top + bottom - kh) // stride_y + 1 != out_shape[2] or bottom >= kh or \
            (x_shape[3] + left + right - kw) // stride_x + 1 != out_shape[3] or right >= kw:
        raise refuse(f"a {kh}x{kw} conv with strides ({stride_y}, {stride_x}) and top/left pads ({top}, {left}) "
                     f"cannot map input {list(x_shape[2:])} to output {list(out_shape[2:])}")
    return {"kernel_shape": [kh, kw], "pads": [top, left, bottom, right], "strides": [stride_y, stride_x],
            "dilations": [1, 1], "group": 1, "auto_pad": "NOTSET"}


def requant_t3(regs: Dict[Tuple[int, int], int], where: str, activation: Optional[str]) -> Requant:
    """The output conversion of an rv1106 int8 conv (``activation``: its fused part, ``None``
    or ``"Relu"``): ``OUT_CVT`` at rk3588's addresses, per-channel bias blocks whose
    multipliers are normalised to 2^14.  Every other register value is refused by name."""
    if activation not in _ACTIVATION:
        raise ModelInvalidError(f"{where}: a fused {activation} in an rv1106 int8 conv; its registers were not "
                                "decoded (plain and Relu convs were)", op="load")
    for address, expected in {**_FIXED, **_ACTIVATION[activation]}.items():
        value = _reg(regs, TARGET_DPU, address, where, "DPU")
        if value != expected:
            raise ModelInvalidError(f"{where}: DPU register {address:#x} = {value:#x} in an rv1106 int8 "
                                    f"{'conv' if activation is None else activation + ' conv'}; only {expected:#x} was "
                                    "observed and decoded", op="load")
    offset = _reg(regs, TARGET_DPU, _OUT_CVT_OFFSET, where, "DPU")
    scale = _reg(regs, TARGET_DPU, _OUT_CVT_SCALE, where, "DPU")
    shift = _reg(regs, TARGET_DPU, _OUT_CVT_SHIFT, where, "DPU")
    if scale & ~0xFFFF or shift & ~0x3F:
        raise ModelInvalidError(f"{where}: OUT_CVT scale {scale:#x} / shift {shift:#x} set bits outside 16 and 6 bits",
                                op="load")
    if offset >= 1 << 31:
        offset -= 1 << 32
    return Requant(scale, shift, _MUL_SHIFT, offset, True, 0)
