"""rv1106/rv1103 ("RKNPU t3") pools: their attributes from the PPU registers.

An rv1106 graph stores no attributes (:mod:`.t3nodes`); a MaxPool or AveragePool runs on the
pooling unit, whose tasks (``enable_mask`` 0x60) write, in rk3588's encoding (target 0x4001;
observed with kernels 2, 3 and 5, strides 1 and 2, pads 0 to 2, RKNN-Toolkit2 2.2.0 to 2.5.0):

* ``OPERATION_MODE_CFG`` 0x6024: 0x11 max pooling, 0x10 average pooling; bits 16..27 the output
  columns a task leaves to the others (the map's output width less the task's own, 0x6018 + 1),
  where the compiler splits a wide map into column tiles, one task each;
* ``POOLING_KERNEL_CFG`` 0x6034: kernel width - 1 in bits 0..3, height - 1 in bits 8..11, stride
  x - 1 in bits 16..19, stride y - 1 in bits 20..23;
* ``POOLING_PADDING_CFG`` 0x6040: pads left, top, right, bottom in bits 0..2, 4..6, 8..10, 12..14
  (only what the output needs: a 3x3/2 pool with ONNX pads 1 on 16 rows writes 0 at the bottom;
  a ``ceil_mode`` window past the edge writes the pad it needs); a column tile writes the pads of
  its own edges, so the map's are, per side, the largest its tasks write;
* ``PADDING_VALUE_1..4`` 0x6044 to 0x6050 (19-bit two's complement): what 1 to 4 padded elements
  add: a max pool's -128 each, an average pool's input zero point times 1 to 4 (the padding is
  a real 0);
* an average pool's ``RECIP_KERNEL_WIDTH`` / ``HEIGHT`` 0x6038 / 0x603c: 2^16 / kernel size, so
  that a padded one divides by the whole kernel: ONNX's ``count_include_pad`` (PyTorch's
  AvgPool2d default; the compiler runs one that excludes the padding on the CPU, with no task).
  A ``ceil_mode`` window past the edge is padded too, but the simulator divides it by the elements
  inside (ONNX's rule: the corpus case ``avgpool_attrs`` built for rv1106 gave cosine 0.987 read as
  padded): an average pool padded more at the end
  than at the start, which the registers cannot tell from ONNX pads of that shape, is refused.

Every other value is refused by name.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from ...errors import ModelInvalidError
from .regcmd import signed

__all__ = ["t3_pool_params"]

_TARGET_PPU = 0x4001
_MODE, _OUT_WIDTH, _KERNEL, _RECIP_W, _RECIP_H, _PADDING = 0x6024, 0x6018, 0x6034, 0x6038, 0x603C, 0x6040
_PAD_VALUES = (0x6044, 0x6048, 0x604C, 0x6050)
_MODES = {"MaxPool": 0x11, "AveragePool": 0x10}
_MODE_BITS, _NOTCH_SHIFT = 0xFFFF, 16
_KERNEL_BITS, _PADDING_BITS = 0x00FF0F0F, 0x7777
_PAD_VALUE_BITS = 19
_MAX_PAD_VALUE = -128


def t3_pool_params(states: List[Dict[Tuple[int, int], int]], op: str, x_shape: Sequence[int],
                   out_shape: Sequence[int], zero_point: int, where: str) -> Dict[str, object]:
    """``{"kernel_shape", "strides", "pads"}`` of an rv1106 ``op`` (MaxPool or AveragePool) from
    its PPU tasks' registers (``states``: per task, the node's writes up to it), its NCHW input
    and output shapes and its input's ``zero_point``; an AveragePool with pads also gets
    ``count_include_pad`` 1.

    Raises:
        ModelInvalidError: no PPU task, another pooling mode, a task's column bits that are not
            what it leaves of the output, bits outside the decoded fields, tasks that disagree on
            the kernel, an average pool with other reciprocals or padded more at the end than at the
            start, padding that is not a real 0 (an average pool) or -128 (a max pool), or
            attributes that do not give the output shape.
    """
    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message} (rv1106 map: docs/vendor-format-notes.md)", op="load")

    if not states:
        raise ModelInvalidError(f"{where}: no NPU task with the PPU enabled runs this {op}: the compiler ran it on "
                                "the CPU (an AveragePool that excludes its padding from the divisor, say), and its "
                                "attributes are stored nowhere in the file", op="load")
    if len(x_shape) != 4 or len(out_shape) != 4 or list(out_shape[:2]) != list(x_shape[:2]):
        raise refuse(f"a {op} from {list(x_shape)} to {list(out_shape)}; 4-D maps of the same batch and channels "
                     "were expected")

    def reg(regs, address: int) -> int:
        value = regs.get((_TARGET_PPU, address))
        if value is None:
            raise ModelInvalidError(f"{where}: the pool's task does not write PPU register {address:#x} (rv1106 map)",
                                    op="load")
        return value

    kernels = {reg(regs, _KERNEL) for regs in states}
    if len(kernels) != 1:
        raise refuse(f"the pool's tasks write POOLING_KERNEL_CFG ({_KERNEL:#x}) values "
                     f"{', '.join(map(hex, sorted(kernels)))}; one kernel for the whole map was expected")
    kernel = kernels.pop()
    sides = [0, 0, 0, 0]  # left, top, right, bottom
    for regs in states:
        mode, padding = reg(regs, _MODE), reg(regs, _PADDING)
        notch = out_shape[3] - (reg(regs, _OUT_WIDTH) + 1)
        if mode & _MODE_BITS != _MODES.get(op) or notch < 0 or mode >> _NOTCH_SHIFT != notch:
            raise refuse(f"PPU OPERATION_MODE_CFG ({_MODE:#x}) = {mode:#x} on a {op} whose task writes "
                         f"{reg(regs, _OUT_WIDTH) + 1} of {out_shape[3]} output columns; only "
                         f"{_MODES.get(op, 0):#x} with the columns left to the other tasks in bits 16..27 "
                         f"({notch} here) was observed")
        if kernel & ~_KERNEL_BITS or padding & ~_PADDING_BITS:
            raise refuse(f"PPU POOLING_KERNEL_CFG ({_KERNEL:#x}) = {kernel:#x} / POOLING_PADDING_CFG ({_PADDING:#x}) "
                         f"= {padding:#x} set bits outside the kernel, stride and pad fields")
        sides = [max(side, (padding >> shift) & 0x7) for side, shift in zip(sides, (0, 4, 8, 12))]
    regs = states[0]
    kw, kh = (kernel & 0xF) + 1, ((kernel >> 8) & 0xF) + 1
    sx, sy = ((kernel >> 16) & 0xF) + 1, ((kernel >> 20) & 0xF) + 1
    left, top, right, bottom = sides
    padded = any(sides)
    attrs: Dict[str, object] = {}
    if op == "AveragePool":
        recips = (reg(regs, _RECIP_W), reg(regs, _RECIP_H))
        if recips != ((1 << 16) // kw, (1 << 16) // kh):
            raise refuse(f"an AveragePool {kh}x{kw} with reciprocals {[hex(r) for r in recips]}; only 2^16 / kernel "
                         "was observed")
        if bottom > top or right > left:
            raise refuse(f"an AveragePool {kh}x{kw} whose registers pad ({top}, {left}, {bottom}, {right}) more at the "
                         "end than at the start: a ceil_mode window past the edge (which the simulator divides by the "
                         "elements inside it, the registers by the whole kernel) or ONNX pads of that shape; the "
                         "registers cannot tell the two apart")
        if padded:
            attrs["count_include_pad"] = 1
    if padded:
        values = [signed(reg(regs, address), _PAD_VALUE_BITS) for address in _PAD_VALUES]
        expected = [_MAX_PAD_VALUE] * len(_PAD_VALUES) if op == "MaxPool" else \
            [zero_point * k for k in range(1, len(_PAD_VALUES) + 1)]
        if values != expected:
            raise refuse(f"a padded {op} whose padding values (PPU {_PAD_VALUES[0]:#x}..{_PAD_VALUES[-1]:#x}) are "
                         f"{values}; {expected} (a {'-128' if op == 'MaxPool' else 'real 0'}) was expected")
    if (x_shape[2] + top + bottom - kh) // sy + 1 != out_shape[2] or \
            (x_shape[3] + left + right - kw) // sx + 1 != out_shape[3]:
        raise refuse(f"a {kh}x{kw} {op} with strides ({sy}, {sx}) and pads ({top}, {left}, {bottom}, {right}) does "
                     f"not map {list(x_shape)} to {list(out_shape)}")
    return {"kernel_shape": [kh, kw], "strides": [sy, sx], "pads": [top, left, bottom, right], **attrs}
