"""rk3576/rv1126b int8 convs whose fused part reads their accumulator's unit from more than OUT_CVT
(``table_conv_scales_*``; found by the stressed random graphs of ``random_campaign.py --stress``).

* A Tanh or Swish conv computes its function on the conv's real output, whose unit only the float16
  weight scales the file stores give; a channel of tiny weights has a subnormal there (8 % off at 5e-7),
  which ran up to 3 output steps from the simulator, silently.  Such a channel now takes the largest
  channel's scale times the ratio of their bias-block multipliers; where neither holds it within
  2^-7 the file is refused by name.
* A PRelu conv's unit comes from OUT_CVT less its slope stage's fraction bits, as a LeakyRelu conv's
  (it used the stored float16 scales); those bits are 3 to 14, stated twice in ``<output>_BsCfg_BScfgTensor``
  word 0 as ``(28 - b) << 8 | (14 - b)`` (only 12, 13 and 14 were read before).
* Under large biases every one of these convs truncates its accumulator (CORE 0x3024), refused before
  for all but plain, Relu and residual convs (HardSwish too: the stressed random graphs 103 and 131).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.rknn_graph.regcmd import TARGET_CORE, TARGET_DPU

from corpus import CORPUS, corpus_arrays, inputs_of, steps_from_simulator
from vendor_files import doctored_copy, patch_registers, register_values, tensor_bytes

STEMS = ["table_conv_scales_rk3576_i8", "table_conv_scales_rv1126b_i8"]
#: the outputs' least shares equal to the simulator's: tanh_small_channels, tanh, swish, sigmoid,
#: hard_sigmoid and hard_swish (the file's tables, as every rk3576 int8 ConvHardSigmoid and ConvHardSwish:
#: one step off at most), prelu, leaky_relu
_EXACT_SHARE = (0.99, 0.99, 0.99, 0.99, 0.35, 0.85, 0.99, 0.99)


@pytest.mark.parametrize("stem", STEMS)
def test_table_and_slope_convs_run_as_the_simulator_does(stem):
    steps = steps_from_simulator(stem)
    assert len(steps) == len(_EXACT_SHARE)
    for k, d in enumerate(steps):
        assert np.all(d < 1.5) and np.mean(d < 0.5) >= _EXACT_SHARE[k], (k, float(d.max()), float(np.mean(d < 0.5)))


def _tensor_words(stem: str, name: str, fmt: str, count: int):
    data = bytearray((CORPUS / f"{stem}.rknn").read_bytes())
    return struct.unpack_from(f"<{count}{fmt}", tensor_bytes(data, name), 0)


@pytest.mark.parametrize("stem", STEMS)
def test_the_files_hold_the_forms(stem):
    # what the tests below doctor is there: subnormal stored scales of the small-weight Tanh conv's
    # channels 3 and 5, slope stages of 7 and 8 bits, accumulators truncated by one and two bits
    scales = np.array(_tensor_words(stem, "w1_w4a16_weight", "e", 8))
    assert np.all(scales[[3, 5]] < 2.0 ** -14) and np.all(np.delete(scales, [3, 5]) > 0)
    assert _tensor_words(stem, "prelu_BsCfg_BScfgTensor", "I", 4) == (0x1507, 0, 0, 0)
    assert _tensor_words(stem, "leaky_relu_BsCfg_BScfgTensor", "I", 4) == (0x1406, 0, 0, 0)
    assert register_values(CORPUS / f"{stem}.rknn", TARGET_CORE, 0x3024) == {0, 0x21, 0x42}


def _refused(tmp_path, stem: str, patch, match: str) -> None:
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=match):
        rknnlite.Context(path, backend="software")


def _zero_scales(name: str):
    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, name)
        view[:] = bytes(len(view))

    return patch


@pytest.mark.parametrize("stem", STEMS)
def test_a_tanh_conv_whose_scales_nothing_holds_is_refused(tmp_path, stem):
    # zeros (a scale below float16's range) leave only the multiplier ratios, which need a precise largest one
    _refused(tmp_path, stem, _zero_scales("w1_w4a16_weight"),
             r"ConvTanh whose channel 0 has a weight scale which neither its float16 copy 'w1_w4a16_weight' "
             r"\(stored as 0\) nor its bias-block multiplier \d+ against the largest's \d+ holds within 0\.78%")


def _set_word(name: str, value: int):
    return lambda data: struct.pack_into("<I", tensor_bytes(data, name), 0, value)


@pytest.mark.parametrize("word", [0x1508, 0x1F0F, 0xD00])  # the two fields disagree; b = -1; b = 15
def test_a_slope_stage_word_of_another_form_is_refused(tmp_path, word):
    _refused(tmp_path, STEMS[0], _set_word("prelu_BsCfg_BScfgTensor", word),
             rf"an int8 PRelu conv's 'prelu_BsCfg_BScfgTensor' starts \['{word:#x}', .*word 0 \(28 - b\) << 8 \| "
             r"\(14 - b\) for b = 1\.\.14")


def test_the_slope_stage_word_sets_the_prelu_conv_unit(tmp_path):
    # 7 bits read as 8 halve the registers' weight scales against the stored ones: refused by that check
    _refused(tmp_path, STEMS[0], _set_word("prelu_BsCfg_BScfgTensor", 0x1406),
             r"give channel \d+ a weight scale of .* the file stores")


def test_another_prelu_act_cfg_is_refused(tmp_path):
    patch = patch_registers(TARGET_DPU, {0x4060}, lambda v: 0x502 if v == 0x602 else v)
    _refused(tmp_path, STEMS[0], patch, r"ACT_CFG \(0x4060\) = 0x502 on a PRelu conv, not 0x602 or 0x402")


def test_a_truncated_conv_of_another_fused_part_is_refused(tmp_path):
    # a Clip's bounds count in accumulator units, which no truncated Clip conv was checked in
    _refused(tmp_path, "conv_clip_rk3576_i8", patch_registers(TARGET_CORE, {0x3024}, lambda v: 0x21),
             r"int8 Clip conv whose accumulator is truncated by 1 bits \(CORE 0x3024 = 0x21\); only plain convs "
             r"and those fusing Relu, Add, AddRelu, LeakyRelu, PRelu, Tanh, Swish, Sigmoid, HardSigmoid, HardSwish")


def test_a_lookup_table_conv_runs_without_its_stored_scales(tmp_path):
    # a ConvSigmoid's index map comes from its registers: zeros in its stored float16 scales (a scale
    # below 2^-25 is stored so) change nothing, where they were refused before
    stem = "conv_sigmoid_rk3576_i8"
    feed = inputs_of(corpus_arrays(stem))
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, _zero_scales("w1_w4a16_weight"))
    with rknnlite.Context(path, backend="software") as doctored, \
            rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as original:
        for a, b in zip(doctored.run(feed, data_format="nchw"), original.run(feed, data_format="nchw"), strict=True):
            np.testing.assert_array_equal(a, b)
