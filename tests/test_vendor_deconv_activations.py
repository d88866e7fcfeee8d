"""ConvTranspose with a fused activation in vendor files (``ConvTransposeRelu``, ``ConvTransposeClip``,
... ``ConvTransposeexSwish``): what rk3588, rk3566 and rk3562 compile a deconv and the activation after it
to, and rk3576 with RKNN-Toolkit2 2.3.2 (corpus ``deconv_acts_*``, ``deconv_relu_clip_*``,
``deconv_asymmetric_*``; tools/vendor_corpus/models.py ``_deconv_acts``, ``_deconv_asymmetric``).  Such a node
has neither BSON nor parameter table: its kernel, strides and pads are read from its CNA registers
(rknnlite/model/rknn_graph/deconv_regs.py), which a plain ConvTranspose's BSON is checked against.  That each file matches the simulator is test_vendor_offboard's corpus test; here: what
the nodes lower to and the refusals around them."""

from __future__ import annotations

import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower_rockchip
from rknnlite.model.rknn_graph.accumulator import grid_code
from rknnlite.model.rknn_graph.deconv_regs import RK3562_DECONV, RK3566_DECONV, RK3588_DECONV, deconv_params
from rknnlite.model.rknn_graph.regcmd import TARGET_CNA, TARGET_DPU

from corpus import CORPUS, lowered
from vendor_files import doctored_copy, patch_registers

#: the activations of deconv_acts (models.DECONV_ACTS) in output order, and the executor op of each
FP16_ACTIVATIONS = {"relu": "Relu", "leakyrelu": "LeakyRelu", "clip": "Clip", "sigmoid": "Sigmoid",
                    "hardswish": "HardSwish", "hardsigmoid": "HardSigmoid", "prelu": "PRelu", "tanh": "Tanh",
                    "swish": "Mul"}
_PAD_CON0, _BN_RELUX = 0x1068, 0x406C
_RK3562_KERNEL, _RK3562_PADS, _RK3562_ZERO_POINT = 0x1024, 0x1080, 0x1084
#: deconv_asymmetric (models.DECONV_ASYMMETRIC): the two deconvs' ONNX attributes, the same whether
#: read from the BSON (``d<k>_plain``) or from the registers alone (``d<k>_relu``, ``d<k>_clip``)
ASYMMETRIC = ({"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 0, 0, 1], "output_padding": [1, 0]},
              {"kernel_shape": [2, 4], "strides": [1, 2], "pads": [0, 2, 1, 0], "output_padding": [0, 1]})


def _producers(graph, output: str) -> list:
    """The executor nodes of the vendor node writing ``output``, in order."""
    (last,) = [n for n in graph.nodes if output in n.outputs]
    return [n for n in graph.nodes if n.name == last.name]


@pytest.mark.parametrize("stem", ["deconv_acts_rk3588_fp16", "deconv_acts_rk3566_fp16", "deconv_acts_rk3562_fp16",
                                  "deconv_acts_rk3576_fp16_tk232"])  # (2.5.0 keeps rk3576's apart)
def test_fp16_fused_deconvs_are_the_deconv_then_the_activation(stem):
    graph = lowered(stem).graph
    for output, op in FP16_ACTIVATIONS.items():
        nodes = _producers(graph, output)
        assert nodes[0].op == "ConvTranspose" and nodes[-1].op == op, output
        # kernel 2, strides 2, no pads: read from the registers (the file stores them nowhere else)
        attrs = nodes[0].attrs
        assert (attrs["kernel_shape"], attrs["strides"], attrs["pads"]) == ([2, 2], [2, 2], [0, 0, 0, 0])


@pytest.mark.parametrize("platform", ["rk3588", "rk3566"])
def test_int8_fused_clip_clamps_at_its_register_bound(platform, tmp_path):
    # Clip(0, 6)'s grid ends at 6, where clamping changes nothing: its register bound (BN_RELUX 0x406c, the one
    # nonzero write in these files) halved, 3 on that grid
    patch = patch_registers(TARGET_DPU, {_BN_RELUX}, lambda v: v // 2)
    loaded = load_model(doctored_copy(CORPUS / f"deconv_relu_clip_{platform}_i8.rknn", tmp_path, patch))
    graph = lower_rockchip(loaded.payload, loaded.model).graph
    requant = {}
    for output in ("relu", "clip"):
        nodes = _producers(graph, output)
        assert [n.op for n in nodes][-2:] == ["ConvTranspose", "VendorRequant"]
        requant[output] = nodes[-1].attrs
    clip = requant["clip"]
    assert clip["qmin"] == clip["zero_point"] and clip["qmax"] < 10
    assert abs(clip["qmax"] - grid_code(3.0, clip["scale"], clip["zero_point"])) <= 1
    # Relu: from the zero point (here -128, the grid's own start)
    assert (requant["relu"]["qmin"], requant["relu"]["qmax"]) == (requant["relu"]["zero_point"], 127)


def test_an_int8_fused_activation_other_than_relu_or_clip_is_refused(tmp_path):
    # ConvTransposeClip -> ConvTransposeTanh (as long): the simulator's own int8 grid before the activation
    def to_tanh(data: bytearray) -> None:
        at = data.index(b"ConvTransposeClip")
        data[at:at + 17] = b"ConvTransposeTanh"

    path = doctored_copy(CORPUS / "deconv_relu_clip_rk3588_i8.rknn", tmp_path, to_tanh)
    with pytest.raises(ModelInvalidError, match=r"an int8 ConvTranspose with a fused Tanh: the vendor simulator puts "
                                                r"the deconv's output on an int8 grid of its own"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem", [f"deconv_asymmetric_{p}_{v}{suffix}" for p, suffix in (
    ("rk3588", ""), ("rk3566", ""), ("rk3562", ""), ("rk3576", ""), ("rk3576", "_tk232")) for v in ("fp16", "i8")]
    + ["deconv_asymmetric_rv1106_i8"])
def test_an_asymmetric_deconv_is_read_from_its_registers_as_its_bson_says(stem):
    # kernel width above height in the kernel register, top and left pads apart, per-axis strides and
    # output padding; rk3588/rk3566/rv1106 read a square kernel's register alike either way.  The fused
    # deconvs (d<k>_relu, d<k>_clip) have their registers alone; RKNN-Toolkit2 2.5.0's rk3576 files and
    # the rv1106 container keep no fused one
    graph = lowered(stem).graph
    fused = not (stem.startswith("deconv_asymmetric_rv1106") or
                 stem.startswith("deconv_asymmetric_rk3576") and not stem.endswith("_tk232"))
    names = [n for n in graph.outputs if n.startswith("d") and (fused or n.endswith("_plain"))]
    assert len(names) == (6 if fused else 2)
    for name in names:
        (deconv,) = [n for n in _producers(graph, name) if n.op == "ConvTranspose"]
        assert {key: deconv.attrs[key] for key in ASYMMETRIC[0]} == ASYMMETRIC[int(name[1])], name


def test_rk3576_writes_each_kernel_field_minus_one(tmp_path):
    # deconv_asymmetric_rk3576: 0x1024 = (kw - 1) << 24 | (kh - 1) << 16 | (Cout - 1): 0x1020007 for the 3x2
    # kernel to 8 channels; rk3562's form of the same values is refused
    patch = patch_registers(TARGET_CNA, {_RK3562_KERNEL}, lambda v: 0x2030008 if v == 0x1020007 else v)
    path = doctored_copy(CORPUS / "deconv_asymmetric_rk3576_i8_tk232.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"register 0x1024 = 0x2030008 is not a ConvTranspose's 3x2 kernel and "
                                                r"7 \(output channels\): 0x1020007 \(rk3576 map"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("reg, change, match", [
    # the kernel's height above its width (3x2 -> 2x3)
    (_RK3562_KERNEL, lambda v: (v & 0xFFFF) | (v >> 8 & 0xFF0000) | (v << 8 & 0xFF000000),
     r"register 0x1024 = 0x3020008 is not a ConvTranspose's 3x2 kernel and 8 \(output channels\): 0x2030008"),
    # the bottom pad's byte one more than the output size allows
    (_RK3562_PADS, lambda v: v + (1 << 16),
     r"a 3x2 ConvTranspose with strides \[2, 1\] and pads from 0x1080 = 0x40102 cannot map input \[8, 8\] to "
     r"output \[18, 8\]"),
    (_RK3562_ZERO_POINT, lambda v: 5, r"register 0x1084 = 0x5, where the input's zero point 0xffffff80 was expected"),
])
def test_a_doctored_rk3562_deconv_register_is_refused(tmp_path, reg, change, match):
    # the first deconv's kernel and pads, its fused twins' too (the second's 2x4 kernel and pads are other
    # values); every deconv's zero point
    first = {_RK3562_KERNEL: 0x2030008, _RK3562_PADS: 0x30102}.get(reg)
    patch = patch_registers(TARGET_CNA, {reg}, lambda v: change(v) if first in (None, v) else v)
    path = doctored_copy(CORPUS / "deconv_asymmetric_rk3562_i8.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=match):
        rknnlite.Context(path, backend="software")


def test_a_plain_deconvs_registers_must_agree_with_its_bson(tmp_path):
    # deconv_k2s2 (rk3588, BSON pads 0): PAD_CON0 0x11 (k - 1 - p = 1) -> 0x10, a top pad of 1
    patch = patch_registers(TARGET_CNA, {_PAD_CON0}, lambda v: 0x10 if v == 0x11 else v)
    path = doctored_copy(CORPUS / "deconv_k2s2_fp16.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"its registers give pads \[1, 0\], its BSON \[0, 0\]"):
        rknnlite.Context(path, backend="software")


def test_rk3566_int8_pads_hold_the_input_zero_point(tmp_path):
    # rk3566 int8 files write the input's zero point (-128: 0xff80) above the pads; any other value is refused
    patch = patch_registers(TARGET_CNA, {_PAD_CON0}, lambda v: (v & 0xFFFF) | 0x12340000 if v >> 16 else v)
    path = doctored_copy(CORPUS / "deconv_relu_clip_rk3566_i8.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"CNA_PAD_CON0 0x12340011 holds more than a ConvTranspose's top and "
                                                r"left pads \(and 0xff80 above them\)"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("encoding, con1, channels", [
    (RK3588_DECONV, 0x6001A120, 3),  # fp16, a 3-channel image (random rk3588 graphs)
    (RK3588_DECONV, 0x60018003, 1),  # int8, one channel: a depthwise conv mode
    (RK3566_DECONV, 0x1A220, 3),
    (RK3562_DECONV, 0x2020A122, 3),  # fp16 (random rk3562 graphs)
    (RK3562_DECONV, 0x2000A002, 3),  # int8
])
def test_a_deconv_reading_the_graph_input_adds_its_fetch_bits(encoding, con1, channels):
    int8 = not con1 & 0x120
    depthwise = con1 & 0xF == 3
    low = encoding.depthwise_low[int8] if depthwise else 8
    regs = {(TARGET_CNA, 0x100C): con1, (TARGET_CNA, 0x1014): 0x909, (TARGET_CNA, _PAD_CON0): 0x11,
            (TARGET_CNA, 0x1038): 0x2020000 | low,
            # rk3562: the kernel in 0x1024, k - 1 - p = 1 in each of 0x1080's bytes, input zero point 0
            (TARGET_CNA, _RK3562_KERNEL): 0x2020000 | low, (TARGET_CNA, _RK3562_PADS): 0x1010101,
            (TARGET_CNA, _RK3562_ZERO_POINT): 0}
    w_shape, x_shape, out_shape = (channels, 1 if depthwise else 8, 2, 2), (1, channels, 8, 8), \
        (1, channels if depthwise else 8, 16, 16)
    attrs = deconv_params(regs, w_shape, x_shape, out_shape, "n", encoding, int8, graph_input=True)
    assert (attrs["strides"], attrs["pads"], attrs["group"]) == ([2, 2], [0, 0, 0, 0], channels if depthwise else 1)
    with pytest.raises(ModelInvalidError, match=rf"a ConvTranspose with CNA_CONV_CON1 {con1:#x}"):
        deconv_params(regs, w_shape, x_shape, out_shape, "n", encoding, int8, graph_input=False)
