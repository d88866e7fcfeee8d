"""rk3576/rv1126b (and rk3562) int8 convs on a graph input, and a deconv of one channel.

The compiler moves a graph input whose first op is no conv into the NPU layout with a 1x1 conv of its
own (unnamed, weight ``Pre_weight<input>``).  Its weight takes a form per input: a depthwise conv
(CONV_CON1 low bits 1) of tiles alone on 8 or 16 channels, packed identity rows (bits 6) on 1-4
channels of an even width, compact rows on an odd width (``test_vendor_offboard``).  A model's own
depthwise conv reading the graph input (a split GlobalAveragePool) holds its zero points beside its
weights as any depthwise conv there; a deconv of one output channel has a plain int32 bias and its
weight zero point in its weight tile's spare lanes.  Each was refused (or, for the deconv, read
with zero point 0: cosine 0.43 against the simulator) before; the corpus files equal the simulator
(``test_vendor_validated``); these tests pin where each value is read and what is refused.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError

from rknnlite.model.rknn_graph.regcmd import TARGET_CNA, TARGET_DPU
from rknnlite.model.schema import V6

from corpus import CORPUS, corpus_arrays, inputs_of, lowered
from vendor_files import doctored_copy, patch_registers, tensor_bytes, tensor_table

PLATFORMS = ["rk3576", "rv1126b"]
_CONV_CON1 = 0x100C


def _run(path, stem):
    with rknnlite.Context(str(path), backend="software") as ctx:
        return ctx.run(inputs_of(corpus_arrays(stem)), data_format="nchw")


def _doctored(tmp_path, stem, patch):
    return doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)


def _set_word(name: str, index: int, value: int):
    return lambda data: struct.pack_into("<i", tensor_bytes(data, name), 4 * index, value)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_depthwise_input_conv_reads_its_zero_point_within_its_bscfg_extent(platform, tmp_path):
    """The 8-channel input's BScfgTensor is 8 int16 wide: four words, then uninitialised memory
    (random files held heap text there); a word past the four is not read, one within is refused."""
    stem = f"input_depthwise_{platform}_i8"
    graph = lowered(stem).graph
    for name, channels in (("x", 16), ("z", 8)):
        (conv,) = [n for n in graph.nodes if n.op == "Conv" and n.attrs.get("group") == channels]
        assert graph.constants[conv.inputs[1]].shape == (channels, 1, 1, 1)
    reference = _run(CORPUS / f"{stem}.rknn", stem)
    (tmp_path / "past").mkdir()
    past = _run(_doctored(tmp_path / "past", stem, _set_word("New_input_z_BScfgTensor", 5, 0x6F6C6C65)), stem)
    assert all(np.array_equal(a, b) for a, b in zip(past, reference))
    (tmp_path / "within").mkdir()
    within = _doctored(tmp_path / "within", stem, _set_word("New_input_z_BScfgTensor", 2, 7))
    with pytest.raises(ModelInvalidError, match=r"'New_input_z_BScfgTensor' \(NPU shape \[1, 1, 1, 1, 8\]\) starts "
                                                r"\[0, 0, 7, 0, .*then 3 zero words was expected"):
        rknnlite.Context(within, backend="software")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_packed_input_conv_is_an_identity_and_does_not_set_the_files_method(platform, tmp_path):
    """Its weight is 3 rows of 16 bytes (code 1 at byte o of row o) though its NPU size says 32 bytes;
    the file's only conv, it is per-layer in a per-channel build, so the file reads as per-channel."""
    stem = f"input_packed_{platform}_i8"
    model = lowered(stem)
    assert model.precision == "int8"
    assert [(n.op, n.inputs) for n in model.graph.nodes][0] == ("Identity", ["x"])  # the identity conv, dropped

    def second_row_two(data):  # row 1's code 1 -> 2
        view = tensor_bytes(data, "Pre_weightx")
        assert view[16 + 1] == 1
        view[16 + 1] = 2

    with pytest.raises(ModelInvalidError, match=r"packed compiler input weight \[3, 3, 1, 1\] that is not the "
                                                r"identity"):
        rknnlite.Context(_doctored(tmp_path, stem, second_row_two), backend="software")


@pytest.mark.parametrize("platform", PLATFORMS + ["rk3562"])
def test_a_one_channel_deconv_takes_its_weight_zero_point_from_its_tiles_spare_lanes(platform, tmp_path):
    stem = f"deconv_one_channel_{platform}_i8"
    reference = _run(CORPUS / f"{stem}.rknn", stem)[0]
    sim = corpus_arrays(stem)["out0"].reshape(reference.shape)
    assert np.abs(reference - sim).max() <= 1.0001 * float(np.abs(np.diff(np.unique(sim))).min())

    def lane(value):
        def patch(data):
            view = tensor_bytes(data, "w4")
            view[1] = value & 0xFF
        return patch

    (tmp_path / "lane").mkdir()
    with pytest.raises(ModelInvalidError, match=r"spare input lanes of weight tile \(1, 1, 4, 4, 1, (16|32)\) hold"):
        rknnlite.Context(_doctored(tmp_path / "lane", stem, lane(0)), backend="software")
    if platform == "rk3562":  # no BScfgTensor: DPU 0x4050 = 0x126, 0x4054 = 0 (checked by the test below)
        return
    (tmp_path / "cfg").mkdir()
    stated = _doctored(tmp_path / "cfg", stem, _set_word("y_BScfgTensor", 0, -3))
    with pytest.raises(ModelInvalidError, match=r"spare lanes hold zero point -?\d+ and its BScfgTensor or "
                                                r"registers 3"):
        rknnlite.Context(stated, backend="software")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_models_depthwise_conv_on_a_graph_input_holds_its_zero_points_beside_its_weights(platform):
    """GlobalAveragePool on the input: two depthwise convs (7x7, then 5x5) of weights 1/49 and 1/25."""
    graph = lowered(f"input_gap_{platform}_i8").graph
    first = [n for n in graph.nodes if n.op == "Conv" and n.attrs.get("group") == 16]
    assert [graph.constants[n.inputs[1]].shape for n in first] == [(16, 1, 7, 7), (16, 1, 5, 5)]


def test_a_graph_input_conv_of_another_weight_layout_is_refused_by_name(tmp_path):
    """CONV_CON1's low bits name the weight layout of a conv on a graph input; one never observed
    (3 here) is refused naming the register, not decoded as one of the known ones."""
    patch = patch_registers(TARGET_CNA, {_CONV_CON1}, lambda v: (v & ~0xF) | 3)
    path = doctored_copy(CORPUS / "input_depthwise_rk3576_i8.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"CNA_CONV_CON1 \(0x100c\) = 0x3 on an int8 rk3576 conv reading a graph "
                                                r"input; .*1 on a depthwise conv"):
        rknnlite.Context(path, backend="software")


def test_rk3562s_depthwise_input_conv_has_a_plain_bias_and_weight_zero_point_0(tmp_path):
    """rk3562 writes DPU 0x4050 = 0x126 (the depthwise bits with a plain int32 bias) and 0x4054 = 0 for the
    compiler's depthwise conv on a graph input, whose weight is its tiles alone (32 lanes of ones)."""
    graph = lowered("input_depthwise_rk3562_i8").graph
    groups = sorted(n.attrs.get("group", 1) for n in graph.nodes if n.op == "Conv")
    assert groups[-2:] == [8, 16]
    patch = patch_registers(TARGET_DPU, {0x4054}, lambda v: 0x10 if v == 0 else v)
    with pytest.raises(ModelInvalidError, match=r"BS_MUL_CFG \(0x4054\) = 0x10 in an rk3562 int8 file; only 0 on the "
                                                r"compiler's depthwise input conv or a one-channel deconv"):
        rknnlite.Context(doctored_copy(CORPUS / "input_depthwise_rk3562_i8.rknn", tmp_path, patch), backend="software")


@pytest.mark.parametrize("variant", ["fp16", "i8"])
@pytest.mark.parametrize("platform", PLATFORMS + ["rk3562"])
def test_a_one_channel_conv_on_a_graph_input_states_a_size_of_its_own(platform, variant, tmp_path):
    """A pool or ReduceMean split into one-channel convs on a graph input states its weight's NPU size as
    ``(kh * kw + 1) * 8`` (400 for the 7x7 conv of a GlobalAveragePool) whatever its tiles, which the
    buffer holds; any other size that is not the tiles' is refused, as for any conv."""
    stem = f"input_pools_{platform}_{variant}"
    graph = lowered(stem).graph
    (conv,) = [n for n in graph.nodes if n.op == "Conv" and n.inputs[0] in ("a", "a__codes")]
    assert graph.constants[conv.inputs[1]].shape == (1, 1, 7, 7)

    def size_404(data: bytearray) -> None:
        pos = tensor_table(data, "GlobalAveragePool2_2conv0_i1").field_pos(V6.t_size)
        assert struct.unpack_from("<I", data, pos)[0] == 400
        struct.pack_into("<I", data, pos, 404)

    with pytest.raises(ModelInvalidError, match=r"GlobalAveragePool2_2conv0_i1.*weight tiles .* hold \d+ bytes but the "
                                                r"tensor's NPU size is 404"):
        rknnlite.Context(_doctored(tmp_path, stem, size_404), backend="software")


@pytest.mark.parametrize("variant", ["fp16", "i8"])
@pytest.mark.parametrize("platform", PLATFORMS + ["rk3562"])
def test_a_grouped_conv_on_a_graph_input_states_its_real_channels_size(platform, variant, tmp_path):
    """A grouped conv (3 -> 6 and 3 -> 9, group 3, 7x7) on a graph input is made dense, the other groups'
    weights each channel's zero point in int8; its weight states the size of its real channels' rows
    (rounded up to 8 bytes) times the kernel, rounded up to 16 bytes: 1968 for int8 [9, 3, 7, 7], 3536 for
    float16, whatever its tiles (random graph 129 was refused for it); another size is refused."""
    stem = f"grouped_input_{platform}_{variant}"
    graph = lowered(stem).graph
    weights = sorted(graph.constants[n.inputs[1]].shape for n in graph.nodes if n.op == "Conv")
    assert weights == [(6, 3, 7, 7), (9, 3, 7, 7)]
    stated = 1968 if variant == "i8" else 3536

    def resized(data: bytearray) -> None:
        pos = tensor_table(data, "Conv8#1_i1").field_pos(V6.t_size)
        assert struct.unpack_from("<I", data, pos)[0] == stated
        struct.pack_into("<I", data, pos, stated + 16)

    with pytest.raises(ModelInvalidError, match=rf"Conv8#1_i1.*weight tiles .* hold \d+ bytes but the tensor's NPU "
                                                rf"size is {stated + 16}"):
        rknnlite.Context(_doctored(tmp_path, stem, resized), backend="software")


@pytest.mark.parametrize("variant", ["fp16", "i8"])
@pytest.mark.parametrize("platform, fetch", [("rk3562", 0x20008000), ("rk3566", 0x8000),
                                             ("rk3576", 0x20008000)])  # RKNN-Toolkit2 2.3.0's (2.5.0 sets none)
def test_a_one_channel_deconv_on_a_one_channel_input_sets_its_fetch_bits(platform, fetch, variant, tmp_path):
    """ConvTransposes 1 -> 1 straight on a one-channel graph input: CONV_CON1 holds the platform's image
    fetch bits for one channel besides the deconv's own (random graphs 112 and 149 were refused); the 3x3
    weight's 36 bytes of tiles state 48 on rk3562 and rk3576 (weights end on 16 bytes there).  Without the
    fetch bits the rest is no deconv form, refused by name."""
    stem = f"deconv_one_channel_input_{platform}_{variant}" + ("_tk230" if platform == "rk3576" else "")
    graph = lowered(stem).graph
    deconvs = [n for n in graph.nodes if n.op == "ConvTranspose"]
    assert sorted(n.attrs["kernel_shape"] for n in deconvs) == [[2, 2], [3, 3]]
    data = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outs = ctx.run(inputs_of(data), data_format="nchw")
    for k, y in enumerate(outs):
        np.testing.assert_allclose(y, data[f"out{k}"].reshape(y.shape), atol=0.0 if variant == "fp16" else 1e-6)

    stray = patch_registers(TARGET_CNA, {0x100C}, lambda v: v ^ fetch ^ (fetch >> 1))
    with pytest.raises(ModelInvalidError, match=r"a ConvTranspose with CNA_CONV_CON1 0x[0-9a-f]+"):
        rknnlite.Context(_doctored(tmp_path, stem, stray), backend="software")
