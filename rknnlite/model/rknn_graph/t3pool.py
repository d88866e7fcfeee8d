"""rv1106/rv1103 ("RKNPU t3") pools: their attributes from the PPU registers.

An rv1106 graph stores no attributes (:mod:`.t3nodes`); a MaxPool or AveragePool runs on the
pooling unit, whose task (``enable_mask`` 0x60) writes, in rk3588's encoding (target 0x4001;
observed with kernels 2, 3 and 5, strides 1 and 2, pads 0 to 2, RKNN-Toolkit2 2.5.0):

* ``OPERATION_MODE_CFG`` 0x6024: 0x11 max pooling, 0x10 average pooling;
* ``POOLING_KERNEL_CFG`` 0x6034: kernel width - 1 in bits 0..3, height - 1 in bits 8..11, stride
  x - 1 in bits 16..19, stride y - 1 in bits 20..23;
* ``POOLING_PADDING_CFG`` 0x6040: pads left, top, right, bottom in bits 0..2, 4..6, 8..10, 12..14
  (only what the output needs: a 3x3/2 pool with ONNX pads 1 on 16 rows writes 0 at the bottom);
* an average pool's ``RECIP_KERNEL_WIDTH`` / ``HEIGHT`` 0x6038 / 0x603c: 2^16 / kernel size.

Every other value is refused by name.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

from ...errors import ModelInvalidError

__all__ = ["t3_pool_params"]

_TARGET_PPU = 0x4001
_MODE, _KERNEL, _RECIP_W, _RECIP_H, _PADDING = 0x6024, 0x6034, 0x6038, 0x603C, 0x6040
_MODES = {"MaxPool": 0x11, "AveragePool": 0x10}
_KERNEL_BITS, _PADDING_BITS = 0x00FF0F0F, 0x7777


def t3_pool_params(regs: Dict[Tuple[int, int], int], op: str, x_shape: Sequence[int], out_shape: Sequence[int],
                   where: str) -> Dict[str, list]:
    """``{"kernel_shape", "strides", "pads"}`` of an rv1106 ``op`` (MaxPool or AveragePool) from
    its PPU task's registers (``regs``) and its NCHW input and output shapes.

    Raises:
        ModelInvalidError: another pooling mode, bits outside the decoded fields, an average pool
            with padding or another reciprocal, or attributes that do not give the output shape.
    """
    def reg(address: int) -> int:
        value = regs.get((_TARGET_PPU, address))
        if value is None:
            raise ModelInvalidError(f"{where}: the pool's task does not write PPU register {address:#x} (rv1106 map)",
                                    op="load")
        return value

    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message} (rv1106 map: docs/vendor-format-notes.md)", op="load")

    mode = reg(_MODE)
    if mode != _MODES.get(op):
        raise refuse(f"PPU OPERATION_MODE_CFG ({_MODE:#x}) = {mode:#x} on a {op}; only {_MODES.get(op, 0):#x} was "
                     "observed")
    kernel, padding = reg(_KERNEL), reg(_PADDING)
    if kernel & ~_KERNEL_BITS or padding & ~_PADDING_BITS:
        raise refuse(f"PPU POOLING_KERNEL_CFG ({_KERNEL:#x}) = {kernel:#x} / POOLING_PADDING_CFG ({_PADDING:#x}) = "
                     f"{padding:#x} set bits outside the kernel, stride and pad fields")
    kw, kh = (kernel & 0xF) + 1, ((kernel >> 8) & 0xF) + 1
    sx, sy = ((kernel >> 16) & 0xF) + 1, ((kernel >> 20) & 0xF) + 1
    left, top, right, bottom = ((padding >> shift) & 0x7 for shift in (0, 4, 8, 12))
    if op == "AveragePool":
        recips = (reg(_RECIP_W), reg(_RECIP_H))
        if padding or recips != ((1 << 16) // kw, (1 << 16) // kh):
            raise refuse(f"an AveragePool with pads {padding:#x} and reciprocals {[hex(r) for r in recips]}; only "
                         f"no padding and 2^16 / kernel ({kh}x{kw}) were observed")
    if len(x_shape) != 4 or len(out_shape) != 4 or list(out_shape[:2]) != list(x_shape[:2]) or \
            (x_shape[2] + top + bottom - kh) // sy + 1 != out_shape[2] or \
            (x_shape[3] + left + right - kw) // sx + 1 != out_shape[3]:
        raise refuse(f"a {kh}x{kw} {op} with strides ({sy}, {sx}) and pads ({top}, {left}, {bottom}, {right}) does "
                     f"not map {list(x_shape)} to {list(out_shape)}")
    return {"kernel_shape": [kh, kw], "strides": [sy, sx], "pads": [top, left, bottom, right]}
