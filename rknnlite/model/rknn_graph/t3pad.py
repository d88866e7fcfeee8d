"""rv1106/rv1103 ("RKNPU t3") Pads: their mode, pads and fill code from what their DPU-only tasks do.

A Pad's mode is stored nowhere in an rv1106 graph (no BSON, no parameter table); its pads and value
are shape constants (stored at their offsets), which :func:`.t3nodes._pad` checks against what its
tasks do.  Every task copies a box of pixels into the output map or fills one with a code (DPU,
target 0x1001; observed with RKNN-Toolkit2 2.5.0, 2.3.2, 2.3.0 and 2.2.0 on 4x4 to 96x96 maps of 3
to 64 channels, batches of 1 and 2, pads of 0 to 2 per side: corpus ``pad_constant_rv110*``,
``pad_modes_rv110*``):

* ``BN_CFG`` 0x4060: 0x13 a copy (no bias or slope stage), 0x20010 a fill, whose code is
  ``BN_ADD`` 0x4064 (an int32);
* the destination 0x4020 and, for a copy, the source (the DPU's read DMA, target 0x2001, 0x5018),
  bytes in the NPU's memory (the input's buffer may overlap the map's: a copy of the input's size
  reads the input wherever its source is); the box's size 0x405c, ``(height - 1) << 16 |
  (width - 1)`` (0x4030 / 0x4034 hold them too, but a fill need not rewrite its height there: a 2.3.2 rv1103 column fill
  after a one-row fill);
* the output's surface stride 0x4024: a map of ``C`` channels is ``ceil(C / 16)`` surfaces of
  16-byte pixels, rows of ``width * 16`` bytes, one batch after another.

Later tasks write only what changes: a task's registers are the node's writes up to it.  A constant
Pad copies each batch of its input into the map and fills the strips around it; a ``reflect`` or
``edge`` Pad copies rows of the map into the rows around it, then columns (over the whole height,
which sets the corners), and a reflect Pad copies from one row or column further in.
:func:`t3_pad` replays the tasks over the map's pixels (which input pixel, or which fill code,
each ends up holding) and names the mode whose result that is: nothing is assumed of the
arrangement but the geometry above, and anything else is refused.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .regcmd import TARGET_DPU, TARGET_RDMA, i32, task_register

__all__ = ["t3_pad"]

_BN_CFG, _BN_ADD = 0x4060, 0x4064
_DESTINATION, _SIZE, _SOURCE, _SURFACE_STRIDE = 0x4020, 0x405C, 0x5018, 0x4024
_COPY, _FILL = 0x13, 0x20010
#: bytes of one pixel of one surface (16 int8 channels)
_PIXEL = 16
#: a map cell no task wrote
_UNSET = -1


def _fill_cell(code: int) -> int:
    """A map cell holding fill ``code``: below :data:`_UNSET`, where input pixels are >= 0."""
    return -2 - (code + (1 << 31))


def t3_pad(states: Sequence[Dict[Tuple[int, int], int]], x_shape: Sequence[int], out_shape: Sequence[int],
           where: str) -> Tuple[str, List[int], Optional[int]]:
    """``(mode, pads, code)`` of an rv1106 Pad over the height and width of its NCHW input: the
    ONNX mode (``"constant"``, ``"reflect"`` or ``"edge"``), its ``pads`` (``[0, 0, top, left, 0,
    0, bottom, right]``) and the int8 code its fills write (``None`` without a fill), from its
    tasks' registers (``states``: per task, the node's register writes up to it).

    Raises:
        ModelInvalidError: a task that neither copies nor fills, a box outside the map, an input
            copy not of the input's size, a pixel no task writes, or a result no mode gives.
    """
    def reg(state, address: int, target: int = TARGET_DPU) -> int:
        return task_register(state, target, address, where, "(rv1106 Pad)")

    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message}; only a constant, reflect or edge Pad over the height and width "
                                 "(copies and fills of boxes of its output map) was decoded", op="load")

    if len(x_shape) != 4 or len(out_shape) != 4 or list(x_shape[:2]) != list(out_shape[:2]):
        raise refuse(f"a Pad from {list(x_shape)} to {list(out_shape)}")
    batches, channels, height, width = (int(d) for d in x_shape)
    out_h, out_w = (int(d) for d in out_shape[2:])
    boxes = [(reg(s, _BN_CFG), reg(s, _DESTINATION), (reg(s, _SIZE) & 0xFFFF) + 1, (reg(s, _SIZE) >> 16) + 1)
             for s in states]
    if not boxes or any(cfg not in (_COPY, _FILL) for cfg, *_ in boxes):
        raise refuse(f"tasks of BN_CFG {[hex(b[0]) for b in boxes]}; copies ({_COPY:#x}) and fills ({_FILL:#x}) "
                     "were expected")
    base = min(at for _, at, _, _ in boxes)  # the map's first pixel: some box starts there
    batch_bytes = -(-channels // _PIXEL) * reg(states[0], _SURFACE_STRIDE) if batches > 1 else 0

    def cell(address: int, w: int, h: int) -> Optional[Tuple[int, int, int]]:
        """The (batch, row, column) of a box of w x h pixels at ``address`` in the map, None outside it."""
        offset = address - base
        batch, rest = divmod(offset, batch_bytes) if batch_bytes else (0, offset)
        row, column = divmod(rest // _PIXEL, out_w)
        if offset < 0 or rest % _PIXEL or batch >= batches or row + h > out_h or column + w > out_w:
            return None
        return batch, row, column

    pixels = np.full((batches, out_h, out_w), _UNSET, np.int64)
    inputs = np.arange(batches * height * width, dtype=np.int64).reshape(batches, height, width)
    origins = []  # where each batch's input copy puts the input
    for state, (cfg, at, w, h) in zip(states, boxes):
        to = cell(at, w, h)
        if to is None:
            raise refuse(f"a {w}x{h} box at {at:#x}, outside the {out_w}x{out_h} map at {base:#x}")
        b, r, c = to
        if cfg == _FILL:
            pixels[b, r:r + h, c:c + w] = _fill_cell(i32(reg(state, _BN_ADD)))
            continue
        src = reg(state, _SOURCE, TARGET_RDMA)
        frm = cell(src, w, h)
        # from the input, the next batch whole: from outside the map, or a box of the input's size (no row
        # or column a reflect or edge Pad copies has it when the input has two rows and columns at least),
        # whose source may lie in the map's addresses (the buffers overlap: a batch of two, random graph
        # seed 73 of 2.5.0)
        whole = (w, h) == (width, height) and len(origins) < batches
        if frm is None or (whole and min(width, height) > 1):
            if not whole:
                raise refuse(f"a copy of {w}x{h} pixels from {src:#x} (outside the map) into it, the "
                             f"{len(origins) + 1}th; one copy of each of the {batches} {width}x{height} inputs was "
                             "expected")
            pixels[b, r:r + h, c:c + w] = inputs[len(origins)]
            origins.append((b, r, c))
            continue
        fb, fr, fc = frm
        pixels[b, r:r + h, c:c + w] = pixels[fb, fr:fr + h, fc:fc + w].copy()
    if len(origins) != batches or any(o != (b,) + origins[0][1:] for b, o in enumerate(origins)):
        raise refuse(f"input copies to (batch, row, column) {origins}; one per batch, in order, each at one place "
                     "were expected")
    top, left = origins[0][1:]
    bottom, right = out_h - height - top, out_w - width - left
    pads = [0, 0, top, left, 0, 0, bottom, right]
    if (pixels == _UNSET).any():
        b, r, c = np.argwhere(pixels == _UNSET)[0]
        raise refuse(f"no task writes pixel (batch {b}, row {r}, column {c}) of the {out_w}x{out_h} map")
    border = np.ones((out_h, out_w), bool)
    border[top:top + height, left:left + width] = False
    if (pixels[:, ~border] == inputs.reshape(batches, -1)).all():
        codes = np.unique(pixels[:, border])
        if codes.size == 0:
            return "constant", pads, None
        if codes.size == 1 and codes[0] < _UNSET:
            return "constant", pads, int(-2 - codes[0] - (1 << 31))
        rows, columns = np.arange(out_h) - top, np.arange(out_w) - left
        if max(top, bottom) < height and max(left, right) < width and \
                (pixels == inputs[:, _reflect(rows, height)[:, None], _reflect(columns, width)]).all():
            return "reflect", pads, None
        if (pixels == inputs[:, np.clip(rows, 0, height - 1)[:, None], np.clip(columns, 0, width - 1)]).all():
            return "edge", pads, None
    raise refuse(f"copies and fills whose result no constant, reflect or edge Pad of pads {pads} gives")


def _reflect(positions: np.ndarray, size: int) -> np.ndarray:
    """ONNX's reflect indices of ``positions`` (ints, within one size of the axis) into an axis of
    ``size`` > 1: -1 -> 1, size -> size - 2."""
    folded = np.abs(positions)
    return np.where(folded < size, folded, 2 * (size - 1) - folded)
