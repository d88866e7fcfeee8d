"""int8 convs whose conv core truncates the accumulator before adding the bias (``truncated_convs*``;
found by the stressed random graphs of ``random_campaign.py --stress``: a Gemm of small weights on a
small input ran every output 155 steps from the simulator on rk3588).

The bits ``k`` are a CORE register of each map: rk3588 0x301c and rk3566 0x302c hold ``k``, rk3562
0x3024 and rv1106/rv1103 0x301c hold ``k`` in bits 0..4 (and ``k`` or ``k + 1`` above); the bias is then
in units of 2^k accumulator steps.  Read as 0 before, such convs ran their accumulators 2^k times too
strong beside the bias: the lookup-table convs of these files 58 to 89 steps off, the Gemm 115 to 122.
A doctored register is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower_rockchip
from rknnlite.model.rknn_graph.regcmd import TARGET_CORE, TARGET_DPU

from corpus import CORPUS, steps_from_simulator
from vendor_files import doctored_copy, patch_registers, register_values, tensor_bytes

#: stem: (the platform's CORE register, the values its tasks write)
#: (the convs truncate by one bit, the Gemm by three)
FILES = {"truncated_convs_i8": (0x301C, {0, 1, 3}), "truncated_convs_rk3566_i8": (0x302C, {0, 1, 3}),
         "truncated_convs_rk3562_i8": (0x3024, {0, 0x21, 0x63}), "truncated_convs_rv1106_i8": (0x301C, {0, 0x21, 0x63})}


@pytest.mark.parametrize("stem", sorted(FILES))
def test_truncated_convs_run_as_the_simulator_does(stem):
    # one channel of each conv (tiny weights under a bias of 1000) sits a step off here and there
    steps = steps_from_simulator(stem)
    assert len(steps) == 10
    for k, d in enumerate(steps):
        assert np.all(d < 1.5) and np.mean(d < 0.5) >= 0.76, (k, float(d.max()), float(np.mean(d < 0.5)))


@pytest.mark.parametrize("stem", sorted(FILES))
def test_the_files_truncate(stem):
    register, values = FILES[stem]
    assert register_values(CORPUS / f"{stem}.rknn", TARGET_CORE, register) == values
    if "rv1106" in stem:  # its LeakyRelu and PRelu convs' multipliers' shifts (14 to 16 before)
        assert register_values(CORPUS / f"{stem}.rknn", TARGET_DPU, 0x4054) >= {0x96000000, 0x97000000}


def _refused(tmp_path, stem: str, patch, match: str) -> None:
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=match):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem,old,new,match", [
    ("truncated_convs_i8", 1, 0x40, r"CORE register 0x301c/0x302c = 0x40/0x0; one of them 0 to 31"),
    ("truncated_convs_rk3566_i8", 1, 0x20, r"CORE register 0x301c/0x302c = 0x0/0x20; one of them 0 to 31"),
    # the fields disagree: k = 1 below, 3 above
    ("truncated_convs_rk3562_i8", 0x21, 0x61, r"CORE register 0x3024 = 0x61; 0, k \| k << 5 or k \| \(k \+ 1\) << 5"),
    ("truncated_convs_rv1106_i8", 0x21, 0x61, r"CORE register 0x301c = 0x61; 0, k \| k << 5 or k \| \(k \+ 1\) << 5"),
])
def test_a_truncation_of_another_form_is_refused(tmp_path, stem, old, new, match):
    register = FILES[stem][0]
    _refused(tmp_path, stem, patch_registers(TARGET_CORE, {register}, lambda v: new if v == old else v), match)


@pytest.mark.parametrize("stem,register,value,node", [
    ("conv_clip_i8", 0x301C, 2, "ConvClip"), ("lstm_i8", 0x301C, 2, "exLSTM"), ("lstm_rk3562_i8", 0x3024, 0x42, "exLSTM"),
    ("matmul_act_i8", 0x301C, 2, "exMatMul"), ("encoder_layer_rk3566_i8", 0x302C, 2, "exMatMul"),
    ("encoder_layer_dh2_i8", 0x301C, 2, "exSDPAttention"), ("encoder_layer_rk3562_i8", 0x3024, 0x42, "exSDPAttention"),
    ("psa_attention_nope_rv1106_i8", 0x301C, 0x42, "exSDPAttention"),
])
def test_a_truncated_node_of_another_kind_is_refused(tmp_path, stem, register, value, node):
    # a Clip's bounds, an LSTM's gate convs, an exMatMul's and an attention's tasks count in units no
    # truncated file was checked in (the plain convs before them take the doctored truncation)
    _refused(tmp_path, stem, patch_registers(TARGET_CORE, {register}, lambda v: value),
             rf"\({node} .*whose accumulator is truncated by 2 bits \(CORE (0x301c/0x302c|{register:#x})\); only plain convs "
             r"and those fusing Relu")


def test_a_channel_of_a_coarse_multiplier_is_noted(tmp_path):
    # the plain conv's channel 3 (weights a hundredth of the others') has multiplier 129 of 16384: no note;
    # at 2 its scale is held to two bits, which a board computes with and the simulator does not
    def notes(path) -> list:
        loaded = load_model(str(path))
        return [n for n in lower_rockchip(loaded.payload, loaded.model).notes if "multiplier" in n]

    assert notes(CORPUS / "truncated_convs_i8.rknn") == []

    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, "b2")  # blocks of 8 channels: 8 int32 biases, 8 int16 zero points, 8 u16 multipliers
        assert int.from_bytes(view[48 + 6:48 + 8], "little") == 129
        view[48 + 6:48 + 8] = (2).to_bytes(2, "little")

    (note,) = notes(doctored_copy(CORPUS / "truncated_convs_i8.rknn", tmp_path, patch))
    assert "channel 3's multiplier is 2 of the largest channel's 16384" in note and "about 2 bits" in note
