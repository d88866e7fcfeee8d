"""A ConvTranspose's attributes from its CNA registers.

The NPU runs a deconvolution as a stride-1 conv over its input spread out by the strides; rk3588,
rk3566/rk3568 and rv1106/rv1103 encode it alike in their CNA registers but for the fields
:class:`DeconvEncoding` holds (``docs/vendor-format-notes.md``):

* ``CONV_CON1`` 0x100c: the deconv flag (bit 16, not on rv1106), the processing and input
  precisions (bits 7..9 and 4..6: 0 for int8, 2 for float16 on rk3588, rk3566 writes 4 and 2)
  and the conv mode (bits 0..3: 0 plain, 3 depthwise; rv1106's depthwise: 7); a deconv reading
  the graph's input adds how it fetches it (rk3588: bits 13..15 and 29..30; rk3566: 13..15;
  rk3562: 0x2000a002 on 3 channels, 0x20008000 on 1; rv1106: 0x20008000 | (channels - 1) << 12, as
  its convs there);
* ``CONV_CON3`` 0x1014: the conv's unit strides (0x9) and the deconv's strides minus one in
  bits 8..10 (x) and 11..13 (y);
* ``PAD_CON0`` 0x1068: ``k - 1 - p`` for the deconv's top and left pads ``p``: the top in bits
  0..3, the left in bits 4..7 (rv1106: 8..11); rk3566's int8 files write the input's zero point
  (16 bits) in bits 16..31;
* 0x1038: kernel width << 24 | height << 16 | the output channels (a depthwise one: 1, rv1106's 2;
  the width first: an asymmetric kernel, corpus ``deconv_asymmetric_*``).

rk3562 ("RKNPU t4") writes the same strides and kernel fields, but the kernel in 0x1024 (a depthwise
one: 1 in float16, 2 in int8), the four pads as bytes of 0x1080 (``k - 1 - p`` for the top and
left, ``k - 1 - p + output_padding`` for the bottom and right, in that order) and an int8 input's
zero point (32 bits) in 0x1084; its ``CONV_CON1`` has no deconv flag (a conv's values: float16
0x200120, 0x200121 depthwise; int8 0, 5 depthwise, 1 for one channel to one).

The bottom and right pads and the output padding only size the output (the values at an output
index do not depend on them): the fewest end pads, then the output padding, that give the output
size are returned (rk3562's end bytes must agree with them).  Where the file also stores the
attributes (a BSON), they must agree.  Files store none for a ConvTranspose with a fused
activation (``ConvTransposeRelu`` ...) and none at all in an rv1106 container: there the
registers are the only source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple

from ...errors import ModelInvalidError
from .regcmd import REG_CNA_CONV_CON1, REG_CNA_PAD_CON1, TARGET_CNA, task_register

__all__ = ["DeconvEncoding", "RV1106_DECONV", "RK3588_DECONV", "RK3566_DECONV", "RK3562_DECONV", "RK3576_DECONV",
           "deconv_params", "input_fetch"]

_CONV_CON3, _KERNEL, _PAD_CON0 = 0x1014, 0x1038, 0x1068
#: CONV_CON3: unit conv strides (0x9), the deconv's strides minus one in bits 8..13
_UNIT_STRIDES, _DECONV_STRIDE_BITS = 0x9, 0x3F00
_PAD_VALUE_SHIFT = 16


@dataclass(frozen=True)
class DeconvEncoding:
    """How one platform family marks a ConvTranspose in its CNA registers.

    Attributes:
        name: the register map's name, in messages.
        con1: ``CONV_CON1`` per ``(int8 file, depthwise)``, only the values observed.
        depthwise_low: the kernel register's low field on a depthwise deconv, per ``int8 file``.
        left_shift: where ``PAD_CON0`` holds the left pad (4 bits).
        pad_value: whether ``PAD_CON0`` bits 16..31 hold an int8 input's zero point.
        input_fetch: the ``CONV_CON1`` bits a deconv reading the graph's input adds (how the input
            is fetched; they differ with its channels), the values observed.
        one_channel: an int8 deconv from one channel to one whose ``CONV_CON1`` and kernel low
            field are neither a plain nor a depthwise one's (rk3562: 1 and 1; rv1106: 3 and 1), or
            ``None``.
        kernel_address: the register of the kernel size and output channels.
        minus_one: whether that register holds each of them minus one (rk3576/rv1126b).
        pad_bytes: the register holding the four pads as bytes (then its successor holds an int8
            input's zero point), or ``None``: ``PAD_CON0``'s top and left fields.
    """

    name: str
    con1: Mapping[Tuple[bool, bool], int]
    depthwise_low: Mapping[bool, int]
    left_shift: int = 4
    pad_value: bool = False
    input_fetch: Tuple[int, ...] = ()
    one_channel: Optional[Tuple[int, int]] = None
    kernel_address: int = _KERNEL
    pad_bytes: Optional[int] = None
    minus_one: bool = False

    def zero_point_field(self) -> Tuple[int, int, int]:
        """Where the map's CNA registers hold a conv's int8 input zero point (the code it pads
        with), as ``(address, bit, width)``: the register after ``pad_bytes``, ``PAD_CON0`` bits
        16..31 (``pad_value``), else rk3588's ``CNA_PAD_CON1`` (sign-extended to 32 bits)."""
        if self.pad_bytes is not None:
            return self.pad_bytes + 4, 0, 32
        if self.pad_value:
            return _PAD_CON0, _PAD_VALUE_SHIFT, 16
        return REG_CNA_PAD_CON1, 0, 32


#: rv1106/rv1103 (int8 only): no deconv flag; the older releases' depthwise one (a bilinear
#: Resize) in conv mode 7; one channel to one in conv mode 3, the low field 1 (as the compiler's
#: depthwise conv on a graph input); on the graph's input of 1 to 4 channels, its convs' image
#: fetch besides
RV1106_DECONV = DeconvEncoding("rv1106", {(True, False): 0x0, (True, True): 0x7}, depthwise_low={True: 2},
                               left_shift=8, one_channel=(0x3, 1),
                               input_fetch=tuple(0x20008000 | (c - 1) << 12 for c in (4, 3, 2, 1)))
#: rk3588: the deconv flag, float16 precisions 2/2; on the graph's input, 0x6000a000 (3 channels) or
#: 0x60008000 (1 channel) besides, as its convs there
RK3588_DECONV = DeconvEncoding("rk3588", {(True, False): 0x10000, (True, True): 0x10003,
                                          (False, False): 0x10120, (False, True): 0x10123},
                               depthwise_low={True: 1, False: 1},
                               input_fetch=(0x6000A000, 0x60008000))
#: rk3566/rk3568: float16 precisions 4/2; int8 files write the input's zero point beside the pads; on
#: the graph's input, 0xa000 (3 channels) or 0x8000 (1 channel: deconv_one_channel_input_rk3566) besides
RK3566_DECONV = DeconvEncoding("rk3566", {(True, False): 0x10000, (True, True): 0x10003,
                                          (False, False): 0x10220, (False, True): 0x10223},
                               depthwise_low={True: 1, False: 1},
                               pad_value=True, input_fetch=(0xA000, 0x8000))

#: rk3562: a conv's CONV_CON1 values, besides on the graph's input 0x2000a002 (3 channels) or 0x20008000
#: (1 channel: deconv_one_channel_input_rk3562), the kernel in 0x1024 (width first), the pads in 0x1080's
#: bytes
RK3562_DECONV = DeconvEncoding("rk3562", {(True, False): 0x0, (True, True): 0x5,
                                          (False, False): 0x200120, (False, True): 0x200121},
                               depthwise_low={True: 2, False: 1}, input_fetch=(0x2000A002, 0x20008000),
                               one_channel=(0x1, 1), kernel_address=0x1024, pad_bytes=0x1080)
#: rk3576/rv1126b: rk3562's registers, the kernel fields each minus one (a depthwise one's low field:
#: 0 in float16, 1 in int8; one channel to one, int8: CONV_CON1 1, low field 0); on the graph's input
#: RKNN-Toolkit2 2.3.0 sets rk3562's 0x2000a002 (3 channels) or 0x20008000 (1 channel:
#: deconv_one_channel_input_rk3576_*_tk230) besides (2.3.2 and 2.5.0 do not)
RK3576_DECONV = DeconvEncoding("rk3576", {(True, False): 0x0, (True, True): 0x1,
                                          (False, False): 0x200120, (False, True): 0x200121},
                               depthwise_low={True: 1, False: 0}, input_fetch=(0x2000A002, 0x20008000),
                               one_channel=(0x1, 0),
                               kernel_address=0x1024, pad_bytes=0x1080, minus_one=True)


def input_fetch(regs: Dict[Tuple[int, int], int], encoding: DeconvEncoding) -> int:
    """The bits of ``encoding.input_fetch`` that a deconv's ``CONV_CON1`` holds (it fetches the
    graph's input as an image), or 0."""
    con1 = regs.get((TARGET_CNA, REG_CNA_CONV_CON1), 0)
    return next((bits for bits in encoding.input_fetch if con1 & bits == bits), 0)


def _reg(regs: Dict[Tuple[int, int], int], address: int, where: str, encoding: DeconvEncoding) -> int:
    return task_register(regs, TARGET_CNA, address, where, f"({encoding.name} map)")


def deconv_params(regs: Dict[Tuple[int, int], int], w_shape: Sequence[int], x_shape: Sequence[int],
                  out_shape: Sequence[int], where: str, encoding: DeconvEncoding = RV1106_DECONV,
                  int8: bool = True, zero_point: int = 0, graph_input: bool = False) -> Dict[str, object]:
    """The ONNX attributes of a ``ConvTranspose`` (``kernel_shape``, ``strides``, ``pads``,
    ``output_padding``, ``dilations``, ``group``) from its CNA registers (``regs``:
    :func:`.regcmd.node_registers`), its weight's shape ``[Cin, Cout, kh, kw]`` and its input and
    output NCHW shapes, in ``encoding``'s register map; ``int8``: the file's precision,
    ``zero_point``: the int8 input's, ``graph_input``: whether the input is the graph's (see the
    module doc).

    Raises:
        ModelInvalidError: a grouped or dilated deconv, a register value outside the decoded
            fields, or registers that disagree with the tensors' shapes.
    """
    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: {message} ({encoding.name} map: docs/vendor-format-notes.md)", op="load")

    if len(w_shape) != 4 or len(x_shape) != 4 or len(out_shape) != 4:
        raise refuse(f"weight {list(w_shape)}, input {list(x_shape)} and output {list(out_shape)} are not all 4-D")
    cin, cout, kh, kw = w_shape
    con1 = _reg(regs, REG_CNA_CONV_CON1, where, encoding)
    fetch = input_fetch(regs, encoding) if graph_input else 0
    con1 &= ~fetch
    con3 = _reg(regs, _CONV_CON3, where, encoding)
    # depthwise: weight [C, 1, kh, kw] on C channels (RKNN-Toolkit2 2.2.0/2.3.0 compile a bilinear
    # Resize to one; PyTorch's learned depthwise upsampling)
    one_channel = int8 and encoding.one_channel is not None and con1 == encoding.one_channel[0] and \
        cin == cout == x_shape[1] == 1
    depthwise = (con1 == encoding.con1.get((int8, True)) or one_channel) and cout == 1 and \
        x_shape[1] == cin == out_shape[1]
    plain = con1 == encoding.con1.get((int8, False)) and x_shape[1] == cin and out_shape[1] == cout
    if not (plain or depthwise) or con3 & ~_DECONV_STRIDE_BITS != _UNIT_STRIDES:
        observed = ", ".join(f"{v:#x}" for (i8, _), v in encoding.con1.items() if i8 == int8) or "none"
        raise refuse(f"a ConvTranspose with CNA_CONV_CON1 {con1:#x}, CNA_CONV_CON3 {con3:#x} and weight "
                     f"{list(w_shape)} from {x_shape[1]} to {out_shape[1]} channels in an {'int8' if int8 else 'fp16'} "
                     f"file; only undilated ones, ungrouped or depthwise (CONV_CON1 {observed}) with unit conv "
                     "strides, were decoded")
    strides = [((con3 >> 11) & 7) + 1, ((con3 >> 8) & 7) + 1]
    kernel = _reg(regs, encoding.kernel_address, where, encoding)
    low = (encoding.one_channel[1] if one_channel else encoding.depthwise_low[int8]) if depthwise else \
        cout - encoding.minus_one
    size = (kw - encoding.minus_one) << 24 | (kh - encoding.minus_one) << 16
    if kernel != size | low:
        raise refuse(f"register {encoding.kernel_address:#x} = {kernel:#x} is not a ConvTranspose's {kh}x{kw} "
                     f"kernel and {low} ({'depthwise' if depthwise else 'output channels'}): {size | low:#x}")
    top, left, ends, shown = _begin_pads(regs, kh, kw, where, encoding, int8, zero_point, refuse)
    pads, padding = [top, left, 0, 0], [0, 0]
    for axis, (k, begin) in enumerate(((kh, top), (kw, left))):
        full = (x_shape[2 + axis] - 1) * strides[axis] - begin + k  # the output size with no end pad
        end = max(0, full - out_shape[2 + axis])
        pads[2 + axis], padding[axis] = end, out_shape[2 + axis] - (full - end)
        if begin < 0 or not 0 <= padding[axis] < strides[axis] or \
                ends is not None and ends[axis] != k - 1 - end + padding[axis]:
            raise refuse(f"a {kh}x{kw} ConvTranspose with strides {strides} and pads from {shown} cannot map input "
                         f"{list(x_shape[2:])} to output {list(out_shape[2:])}")
    return {"kernel_shape": [kh, kw], "strides": strides, "pads": pads, "output_padding": padding,
            "dilations": [1, 1], "group": cin if depthwise else 1}


def _begin_pads(regs: Dict[Tuple[int, int], int], kh: int, kw: int, where: str, encoding: DeconvEncoding,
                int8: bool, zero_point: int, refuse) -> Tuple[int, int, Optional[Tuple[int, int]], str]:
    """The top and left pads of a deconv, where the map holds them its bottom and right registers'
    values (``k - 1 - pad + output_padding``), and the register's value for messages, checking the
    zero point written beside them (an int8 file's input's; 0 in float16 files and where the map
    writes none)."""
    if encoding.pad_bytes is None:
        pad = _reg(regs, _PAD_CON0, where, encoding)
        expected = zero_point & 0xFFFF if encoding.pad_value and int8 else 0
        pad_bits = 0xF | 0xF << encoding.left_shift | 0xFFFF << _PAD_VALUE_SHIFT
        if pad & ~pad_bits or pad >> _PAD_VALUE_SHIFT != expected:
            raise refuse(f"CNA_PAD_CON0 {pad:#x} holds more than a ConvTranspose's top and left pads (and "
                         f"{expected:#x} above them)")
        return kh - 1 - (pad & 0xF), kw - 1 - ((pad >> encoding.left_shift) & 0xF), None, f"{pad:#x}"
    pad = _reg(regs, encoding.pad_bytes, where, encoding)
    address = encoding.zero_point_field()[0]
    value = _reg(regs, address, where, encoding)
    expected = zero_point & 0xFFFFFFFF if int8 else 0
    if value != expected:
        raise refuse(f"register {address:#x} = {value:#x}, where the input's zero point "
                     f"{expected:#x} was expected")
    top, left, bottom, right = pad.to_bytes(4, "little")
    return kh - 1 - top, kw - 1 - left, (bottom, right), f"{encoding.pad_bytes:#x} = {pad:#x}"
