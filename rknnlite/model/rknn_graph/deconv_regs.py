"""A ConvTranspose's attributes from its CNA registers.

The NPU runs a deconvolution as a stride-1 conv over its input spread out by the strides; rk3588,
rk3566/rk3568 and rv1106/rv1103 encode it alike in their CNA registers but for the fields
:class:`DeconvEncoding` holds (``docs/vendor-format-notes.md``):

* ``CONV_CON1`` 0x100c: the deconv flag (bit 16, not on rv1106), the processing and input
  precisions (bits 7..9 and 4..6: 0 for int8, 2 for float16 on rk3588, rk3566 writes 4 and 2)
  and the conv mode (bits 0..3: 0 plain, 3 depthwise; rv1106's depthwise: 7); a deconv reading
  the graph's input adds how it fetches it (rk3588: bits 13..15 and 29..30; rk3566: 13..15);
* ``CONV_CON3`` 0x1014: the conv's unit strides (0x9) and the deconv's strides minus one in
  bits 8..10 (x) and 11..13 (y);
* ``PAD_CON0`` 0x1068: ``k - 1 - p`` for the deconv's top and left pads ``p``: the top in bits
  0..3, the left in bits 4..7 (rv1106: 8..11); rk3566's int8 files write the input's zero point
  (16 bits) in bits 16..31;
* 0x1038: kernel height << 24 | width << 16 | the output channels (a depthwise one: 1, rv1106's 2).

The bottom and right pads and the output padding only size the output (the values at an output
index do not depend on them): the fewest end pads, then the output padding, that give the output
size are returned.  Where the file also stores the attributes (a BSON), they must agree.  Files
store none for a ConvTranspose with a fused activation (``ConvTransposeRelu`` ...) and none at
all in an rv1106 container: there the registers are the only source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Sequence, Tuple

from ...errors import ModelInvalidError
from .regcmd import REG_CNA_CONV_CON1, TARGET_CNA

__all__ = ["DeconvEncoding", "RV1106_DECONV", "RK3588_DECONV", "RK3566_DECONV", "deconv_params"]

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
        depthwise_low: the low field of 0x1038 on a depthwise deconv.
        left_shift: where ``PAD_CON0`` holds the left pad (4 bits).
        pad_value: whether ``PAD_CON0`` bits 16..31 hold an int8 input's zero point.
        input_fetch: the ``CONV_CON1`` bits a deconv reading the graph's input adds (how the input
            is fetched; they differ with its channels), the values observed.
    """

    name: str
    con1: Mapping[Tuple[bool, bool], int]
    depthwise_low: int
    left_shift: int = 4
    pad_value: bool = False
    input_fetch: Tuple[int, ...] = ()


#: rv1106/rv1103 (int8 only): no deconv flag; the older releases' depthwise one (a bilinear
#: Resize) in conv mode 7
RV1106_DECONV = DeconvEncoding("rv1106", {(True, False): 0x0, (True, True): 0x7}, depthwise_low=2, left_shift=8)
#: rk3588: the deconv flag, float16 precisions 2/2; on the graph's input, 0x6000a000 (3 channels) or
#: 0x60008000 (1 channel) besides, as its convs there
RK3588_DECONV = DeconvEncoding("rk3588", {(True, False): 0x10000, (True, True): 0x10003,
                                          (False, False): 0x10120, (False, True): 0x10123}, depthwise_low=1,
                               input_fetch=(0x6000A000, 0x60008000))
#: rk3566/rk3568: float16 precisions 4/2; int8 files write the input's zero point beside the pads; on
#: the graph's (3-channel) input, 0xa000 besides
RK3566_DECONV = DeconvEncoding("rk3566", {(True, False): 0x10000, (True, True): 0x10003,
                                          (False, False): 0x10220, (False, True): 0x10223}, depthwise_low=1,
                               pad_value=True, input_fetch=(0xA000,))


def _reg(regs: Dict[Tuple[int, int], int], address: int, where: str, encoding: DeconvEncoding) -> int:
    value = regs.get((TARGET_CNA, address))
    if value is None:
        raise ModelInvalidError(f"{where}: the node's task does not write CNA register {address:#x} "
                                f"({encoding.name} map)", op="load")
    return value


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
    fetch = [bits for bits in encoding.input_fetch if graph_input and con1 & bits == bits]
    if fetch:
        con1 &= ~fetch[0]
    con3 = _reg(regs, _CONV_CON3, where, encoding)
    # depthwise: weight [C, 1, kh, kw] on C channels (RKNN-Toolkit2 2.2.0/2.3.0 compile a bilinear
    # Resize to one; PyTorch's learned depthwise upsampling)
    depthwise = con1 == encoding.con1.get((int8, True)) and cout == 1 and x_shape[1] == cin == out_shape[1]
    plain = con1 == encoding.con1.get((int8, False)) and x_shape[1] == cin and out_shape[1] == cout
    if not (plain or depthwise) or con3 & ~_DECONV_STRIDE_BITS != _UNIT_STRIDES:
        observed = ", ".join(f"{v:#x}" for (i8, _), v in encoding.con1.items() if i8 == int8) or "none"
        raise refuse(f"a ConvTranspose with CNA_CONV_CON1 {con1:#x}, CNA_CONV_CON3 {con3:#x} and weight "
                     f"{list(w_shape)} from {x_shape[1]} to {out_shape[1]} channels in an {'int8' if int8 else 'fp16'} "
                     f"file; only undilated ones, ungrouped or depthwise (CONV_CON1 {observed}) with unit conv "
                     "strides, were decoded")
    strides = [((con3 >> 11) & 7) + 1, ((con3 >> 8) & 7) + 1]
    pad = _reg(regs, _PAD_CON0, where, encoding)
    pad_value = pad >> _PAD_VALUE_SHIFT
    expected_value = zero_point & 0xFFFF if encoding.pad_value and int8 else 0
    kernel = _reg(regs, _KERNEL, where, encoding)
    low = encoding.depthwise_low if depthwise else cout
    pad_bits = 0xF | 0xF << encoding.left_shift
    if pad & ~(pad_bits | 0xFFFF << _PAD_VALUE_SHIFT) or pad_value != expected_value or \
            kernel != (kh << 24 | kw << 16 | low):
        raise refuse(f"CNA_PAD_CON0 {pad:#x} / register {_KERNEL:#x} = {kernel:#x} are not a ConvTranspose's pads "
                     f"(and {expected_value:#x} above them) and its {kh}x{kw} kernel and {low} "
                     f"({'depthwise' if depthwise else 'output channels'})")
    top, left = kh - 1 - (pad & 0xF), kw - 1 - ((pad >> encoding.left_shift) & 0xF)
    pads, padding = [top, left, 0, 0], [0, 0]
    for axis, (k, begin) in enumerate(((kh, top), (kw, left))):
        full = (x_shape[2 + axis] - 1) * strides[axis] - begin + k  # the output size with no end pad
        end = max(0, full - out_shape[2 + axis])
        pads[2 + axis], padding[axis] = end, out_shape[2 + axis] - (full - end)
        if begin < 0 or not 0 <= padding[axis] < strides[axis]:
            raise refuse(f"a {kh}x{kw} ConvTranspose with strides {strides} and pads from {pad:#x} cannot map input "
                         f"{list(x_shape[2:])} to output {list(out_shape[2:])}")
    return {"kernel_shape": [kh, kw], "strides": strides, "pads": pads, "output_padding": padding,
            "dilations": [1, 1], "group": cin if depthwise else 1}
