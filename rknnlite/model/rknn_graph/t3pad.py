"""rv1106/rv1103 ("RKNPU t3") constant Pads: their pads and fill code from their DPU-only tasks.

A Pad's mode is stored nowhere in an rv1106 graph (no BSON, no parameter table); its pads and value
are shape constants (stored at their offsets), which :func:`.t3nodes._pad` checks against what its
tasks do (observed with RKNN-Toolkit2 2.5.0, 2.3.2, 2.3.0 and 2.2.0 on 8x8 to 96x96 maps, pads of 1
and 2 on each side, values 0, ±0.5, 1, 0.3 and -1.3: corpus ``pad_constant_rv110*``).  A constant
Pad of a 4-D map over its height and width is one copy task and one fill task per padded side, each
writing (DPU, target 0x1001):

* ``BN_CFG`` 0x4060: 0x13 for the copy of the input (no bias or slope stage), 0x20010 for a fill,
  whose code is ``BN_ADD`` 0x4064 (an int32);
* the destination 0x4020 (bytes in the NPU's memory) and the size 0x405c, ``(height - 1) << 16 |
  (width - 1)`` (0x4030 / 0x4034 hold them too, but a fill need not rewrite its height there: a
  2.3.2 rv1103 column fill after a one-row fill).

Later tasks write only what changes: a task's registers are the node's writes up to it.  A row
strip is as wide as the output, a column strip as tall as the input; a strip stored before the
copy pads the top (or left), one after it the bottom (or right).  A ``reflect`` or ``edge`` Pad is
copies only (seven tasks through a scratch map, not decoded) and is refused, as is any other
arrangement.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ...errors import ModelInvalidError
from .regcmd import TARGET_DPU, i32, task_register

__all__ = ["t3_constant_pad"]

_BN_CFG, _BN_ADD = 0x4060, 0x4064
_DESTINATION, _SIZE = 0x4020, 0x405C
_COPY, _FILL = 0x13, 0x20010


def t3_constant_pad(states: Sequence[Dict[Tuple[int, int], int]], x_shape: Sequence[int],
                    out_shape: Sequence[int], where: str) -> Tuple[List[int], Optional[int]]:
    """``(pads, code)`` of an rv1106 constant Pad: the ONNX ``pads`` of its NCHW input
    (``[0, 0, top, left, 0, 0, bottom, right]``) and the int8 code its fills write (``None``
    without a fill), from its tasks' registers (``states``: per task, the node's register writes
    up to it) and its input's and output's shapes.

    Raises:
        ModelInvalidError: another task arrangement (a reflect or edge Pad's copies, a split copy,
            two strips on one side), pads that do not give the output's shape, or fills of
            different codes.
    """
    def reg(state, address: int) -> int:
        return task_register(state, TARGET_DPU, address, where, "(rv1106 Pad)")

    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message}; only a constant Pad over the height and width (one copy of "
                                 "the input, one fill per padded side) was decoded", op="load")

    if len(x_shape) != 4 or len(out_shape) != 4 or list(x_shape[:2]) != list(out_shape[:2]):
        raise refuse(f"a Pad from {list(x_shape)} to {list(out_shape)}")
    boxes = [(reg(s, _BN_CFG), reg(s, _DESTINATION), (reg(s, _SIZE) & 0xFFFF) + 1, (reg(s, _SIZE) >> 16) + 1)
             for s in states]
    copies = [b for b in boxes if b[0] == _COPY]
    fills = [(b, i32(reg(s, _BN_ADD))) for b, s in zip(boxes, states) if b[0] == _FILL]
    (height, width), (out_h, out_w) = x_shape[2:], out_shape[2:]
    if len(copies) != 1 or len(copies) + len(fills) != len(boxes) or copies[0][2:] != (width, height):
        raise refuse(f"tasks of BN_CFG {[hex(b[0]) for b in boxes]} and sizes {[b[2:] for b in boxes]} (width, "
                     f"height) for an input of {width}x{height}")
    start = copies[0][1]
    sides: Dict[str, List[int]] = {"top": [], "bottom": [], "left": [], "right": []}
    for (_, at, w, h), _ in fills:
        if w == out_w:
            sides["top" if at < start else "bottom"].append(h)
        elif h == height:
            sides["left" if at < start else "right"].append(w)
        else:
            raise refuse(f"a fill of {w}x{h} at {at:#x}, neither a row of the {out_w}-wide output nor a column of the "
                         f"{height} input rows")
    if any(len(v) > 1 for v in sides.values()):
        raise refuse(f"fills {sides} (width or height per side)")
    top, bottom, left, right = (sum(sides[k]) for k in ("top", "bottom", "left", "right"))
    if height + top + bottom != out_h or width + left + right != out_w:
        raise refuse(f"pads top {top}, bottom {bottom}, left {left}, right {right} from its fills do not give "
                     f"{list(out_shape)} from {list(x_shape)}")
    codes = {code for _, code in fills}
    if len(codes) > 1:
        raise refuse(f"fills of codes {sorted(codes)}")
    return [0, 0, top, left, 0, 0, bottom, right], (codes.pop() if codes else None)
