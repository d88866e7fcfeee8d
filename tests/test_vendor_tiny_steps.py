"""int8 convs whose accumulator step is tiny against their output's step (``tiny_steps*``: a conv on a
map of range ~1e-3 added to one of range ~3, or under a large bias; silero-vad's STFT).

The compiler keeps OUT_CVT's shift in range in two ways the registers say: a residual conv's BN
stage shifts the biased accumulator right by ``s`` before the add (rk3588/rk3566 ``BN_CFG`` 0x42,
rk3562/rv1106/rv1103 0x2, the shift in ``BN_MUL``; rk3576/rv1126b ``ACT_CFG`` 0x2, the shift in the
residual's ``_BnCfg_BNcfgTensor``), and rk3576/rv1126b truncate the accumulator of a conv under a large bias by
``k`` bits (CORE 0x3024 = ``k | k << 5``), the bias then in units of 2^k steps.  Before they were read,
rk3588 and rk3566 ran such convs 2^s times too strong (34 % of a probe's outputs equal to the
simulator's) and the other platforms refused them.  A doctored field is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.rknn_graph.regcmd import BN_MUL, REG_BN_CFG, TARGET_CORE, TARGET_DPU

from corpus import CORPUS, steps_from_simulator
from vendor_files import doctored_copy, patch_registers, register_values, tensor_bytes

STEMS = ["tiny_steps_i8", "tiny_steps_rk3566_i8", "tiny_steps_rk3562_i8", "tiny_steps_rk3576_i8",
         "tiny_steps_rv1126b_i8", "tiny_steps_rv1106_i8", "tiny_steps_rv1103_i8"]
#: the residual whose BN-stage tensor rk3576/rv1126b keep: the 3x3 MaxPool's output
_POOL_BN_CFG = "maxpool_5_BnCfg_BNcfgTensor"


#: the share of each output equal to the simulator's: the convs under a bias of up to 40 (outputs 2 and 3)
#: sit up to 128 output steps from 0, where the registers' 14- and 16-bit multipliers (what the NPU
#: computes with) part from the simulator's exact scales by a few thousandths of a step: output 2's
#: lowest channel lies 0.002-0.016 steps below a .5 boundary, which the simulator rounds down and the
#: registers' arithmetic does not (24 of 512 values, one step each, on every platform)
_EXACT_SHARE = (0.99, 0.99, 0.95, 0.99)


@pytest.mark.parametrize("stem", STEMS)
def test_tiny_step_convs_run_as_the_simulator_does(stem):
    for k, d in enumerate(steps_from_simulator(stem)):
        assert np.all(d < 1.5) and np.mean(d < 0.5) >= _EXACT_SHARE[k], (k, float(d.max()), float(np.mean(d < 0.5)))


def _refused(tmp_path, stem: str, patch, match: str) -> None:
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=match):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem,reg,old,new,match", [
    # rk3588 / rk3566: BN_CFG 0x42 with a multiplier of 1 over 2^4; another form, another multiplier
    ("tiny_steps_i8", REG_BN_CFG, 0x42, 0x4A, r"BN_CFG \(0x4060\) = 0x4a on an int8 Add(Relu)? conv; "
                                              r"only 0x53 or 0x42"),
    ("tiny_steps_i8", REG_BN_CFG, 0x12, 0x42, r"BN_CFG \(0x4060\) = 0x42 on an int8 Relu conv; only 0x12 was"),
    ("tiny_steps_rk3566_i8", BN_MUL, 0x10400, 0x20400, r"BN_MUL \(0x4068\) 0x20400; only a multiplier of 1 over 2\^s"),
    # rk3562, rv1106: their BN_CFG 0x2 reads the same BN_MUL word
    ("tiny_steps_rk3562_i8", BN_MUL, 0x10400, 0x10000, r"BN_MUL \(0x4068\) 0x10000; only a multiplier of 1"),
    ("tiny_steps_rv1106_i8", BN_MUL, 0x10400, 0x10401, r"BN_MUL \(0x4068\) 0x10401; only a multiplier of 1"),
    ("tiny_steps_rv1103_i8", REG_BN_CFG, 0x2, 0x6, r"DPU register 0x4060 = 0x6 in an rv1106 int8 Add(Relu)? conv; "
                                                   r"only 0x13 or 0x2 was observed"),
])
def test_a_doctored_bn_shift_is_refused(tmp_path, stem, reg, old, new, match):
    _refused(tmp_path, stem, patch_registers(TARGET_DPU, {reg}, lambda v: new if v == old else v), match)


@pytest.mark.parametrize("stem", ["tiny_steps_rk3576_i8", "tiny_steps_rv1126b_i8"])
@pytest.mark.parametrize("at,value,match", [
    (17, 3, r"holds 010000000000000000000000000000000403"),  # the shift's two copies disagree
    (0, 2, r"holds 02000000"),  # a multiplier of 2
])
def test_a_doctored_residual_bn_tensor_is_refused(tmp_path, stem, at, value, match):
    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, _POOL_BN_CFG)
        assert view[0] == 1 and view[16] == view[17] == 4
        view[at] = value

    _refused(tmp_path, stem, patch, match + r".*only the multiplier 1 in word 0 and a shift s > 0")


def test_another_act_cfg_on_an_rk3576_residual_conv_is_refused(tmp_path):
    patch = patch_registers(TARGET_DPU, {0x4060}, lambda v: 0x6 if v == 0x2 else v)
    _refused(tmp_path, "tiny_steps_rk3576_i8", patch, r"ACT_CFG \(0x4060\) = 0x6 on an rk3576/rv1126b int8 residual "
                                                      r"conv; only 0x903 and 0x2")


@pytest.mark.parametrize("stem", ["tiny_steps_rk3576_i8", "tiny_steps_rv1126b_i8"])
def test_a_truncation_other_than_k_bits_twice_is_refused(tmp_path, stem):
    patch = patch_registers(TARGET_CORE, {0x3024}, lambda v: 0x41 if v == 0x21 else v)
    _refused(tmp_path, stem, patch, r"CORE register 0x3024 = 0x41 on an rk3576/rv1126b int8 conv; "
                                    r"only 0 or k \| k << 5")


def _written(stem: str, target: int, reg: int) -> set:
    return register_values(CORPUS / f"{stem}.rknn", target, reg)


def test_the_files_hold_both_forms():
    # what the tests above doctor is there: the shift by 2^4 on every platform, the truncation by one
    # bit on rk3576 and rv1126b only
    for stem, bn_cfg in (("tiny_steps_i8", 0x42), ("tiny_steps_rk3566_i8", 0x42), ("tiny_steps_rk3562_i8", 0x2),
                         ("tiny_steps_rv1106_i8", 0x2), ("tiny_steps_rv1103_i8", 0x2)):
        assert bn_cfg in _written(stem, TARGET_DPU, REG_BN_CFG)
        assert 0x10400 in _written(stem, TARGET_DPU, BN_MUL)
    for stem in ("tiny_steps_rk3576_i8", "tiny_steps_rv1126b_i8"):
        assert {0x2, 0x902, 0x903} <= _written(stem, TARGET_DPU, 0x4060)
        assert _written(stem, TARGET_CORE, 0x3024) == {0, 0x21}
    assert _written("tiny_steps_rk3562_i8", TARGET_CORE, 0x3024) == {0}


@pytest.mark.parametrize("stem", ["weight_underflow_rk3576_i8", "weight_underflow_rv1126b_i8"])
def test_weight_scales_below_float16_run_as_the_simulator_does(stem):
    # rk3576/rv1126b store those scales as 0 (the registers hold them); the convs on the tiny map truncate
    # their accumulators by 7 to 13 bits, the residual ones after a BN-stage shift.  The first conv's
    # output steps are ~400 accumulator steps: the registers' 14- and 16-bit multipliers and the
    # simulator's exact scales round 6 of its 512 values apart (one step)
    for k, d in enumerate(steps_from_simulator(stem)):
        assert np.all(d < 1.5) and np.mean(d < 0.5) >= (0.98 if k == 0 else 0.99), (k, float(np.mean(d < 0.5)))
    assert _written(stem, TARGET_CORE, 0x3024) >= {0xE7, 0x1AD}  # 7 and 13 bits


def _zero_scales(name: str):
    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, name)
        view[:] = bytes(len(view))

    return patch


def test_a_zero_weight_scale_the_registers_deny_is_refused(tmp_path):
    _refused(tmp_path, "tiny_steps_rk3576_i8", _zero_scales("w9_w4a16_weight"),
             r"give channel \d a weight scale of [\d.e-]+, the file stores 0; the register map is not the one decoded")
