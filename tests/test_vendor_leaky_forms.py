"""rk3576/rv1126b store a fused LeakyRelu two ways, and the file says which.

int8: the slope stage adds 13 fraction bits to a LeakyRelu conv's OUT_CVT shift on an image or after a
Relu conv (``<output>_BsCfg_BScfgTensor`` word 0 = 0xf01, corpus conv_leaky_*), 14 on an input that is
no image (0xe00, conv_leaky_input_*; 7 random rk3576 files were refused before, their stored weight
scales twice what 13 bits made of the registers), 12 where 13 would take the OUT_CVT shift past 36
(0x1002, leaky_wide_*: a 7x7 conv of 16 channels; random graphs 127 and 135 were refused).  fp16: a conv with a bias keeps the slope in the BS
stage (ACT_CFG 0x903, BsCfg word 0), one without a bias or a depthwise one in the BN stage (ACT_CFG
0xc02, ``<output>_BnCfg_BNcfgTensor`` word 0).  The corpus files equal the simulator
(``test_vendor_validated``); these tests pin where each value is read and what is refused.
"""

from __future__ import annotations

import struct

import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower_rockchip

from corpus import CORPUS, lowered
from vendor_files import doctored_copy, tensor_bytes

PLATFORMS = ["rk3576", "rv1126b"]
#: conv_leaky_input's outputs and their ONNX slopes
ALPHAS = {"y": 0.1, "z": 0.2, "w": 0.01}


def _alphas(model) -> dict:
    return {n.outputs[0]: n.attrs["alpha"] for n in model.graph.nodes if n.op == "LeakyRelu"}


def _set_word(name: str, value: int, fmt: str = "<i"):
    return lambda data: struct.pack_into(fmt, tensor_bytes(data, name), 0, value)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_both_leaky_relu_forms_give_the_onnx_slopes(platform, variant):
    assert _alphas(lowered(f"conv_leaky_input_{platform}_{variant}")) == ALPHAS
    assert _alphas(lowered(f"conv_leaky_{platform}_{variant}")) == {"y": 0.1}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_int8_slope_stage_width_is_read_from_the_bscfg_word(platform, tmp_path):
    stem = f"conv_leaky_input_{platform}_i8"
    # 0xe00 -> 0xf01: 13 bits make the registers' weight scales half the stored ones, refused by that check
    (tmp_path / "f01").mkdir()
    other = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path / "f01", _set_word("y_BsCfg_BScfgTensor", 0xF01))
    with pytest.raises(ModelInvalidError, match=r"give channel \d+ a weight scale of .* the file stores"):
        rknnlite.Context(other, backend="software")
    (tmp_path / "d00").mkdir()
    unknown = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path / "d00", _set_word("y_BsCfg_BScfgTensor", 0xD00))
    with pytest.raises(ModelInvalidError, match=r"'y_BsCfg_BScfgTensor' starts \['0xd00', .*word 0 \(28 - b\) << 8 \| "
                                                r"\(14 - b\) for b = 1\.\.14"):
        rknnlite.Context(unknown, backend="software")


@pytest.mark.parametrize("stem", ["leaky_wide_rk3576_i8", "leaky_wide_rv1126b_i8", "leaky_wide_rk3576_i8_tk220"])
def test_a_slope_stage_of_12_bits_keeps_the_out_cvt_shift_at_36(stem, tmp_path):
    # word 0x1002: 12 fraction bits, OUT_CVT_SHIFT 36 (24 for the conv); read with 13 the registers' weight
    # scales are twice the stored ones, which that check refuses
    assert _alphas(lowered(stem)) == {"y": 0.1}
    other = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, _set_word("y_BsCfg_BScfgTensor", 0xF01))
    with pytest.raises(ModelInvalidError, match=r"give channel \d+ a weight scale of .* the file stores"):
        rknnlite.Context(other, backend="software")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_an_fp16_bn_stage_leaky_relu_reads_its_slope_from_the_bncfg_tensor(platform, tmp_path):
    stem = f"conv_leaky_input_{platform}_fp16"
    # z has no bias: ACT_CFG 0xc02 and its slope (float16 0.2) in z_BnCfg_BNcfgTensor; 0.5 there is read
    doctored = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, _set_word("z_BnCfg_BNcfgTensor", 0x3800, "<H"))
    loaded = load_model(doctored)
    assert _alphas(lower_rockchip(loaded.payload, loaded.model)) == {**ALPHAS, "z": 0.5}
