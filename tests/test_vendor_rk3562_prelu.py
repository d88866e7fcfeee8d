"""rk3562 int8 ConvPRelu, depthwise ConvLeakyRelu and ConvTanh.

A ConvPRelu's slopes are an int16 input of the node (codes of 2^-14); rk3562 lays its registers out as a
LeakyRelu conv's (BN_CFG 0x22, 14 slope fraction bits in 0x4054's shift), on a depthwise conv too (bit 31
of 0x4054 clear, as any depthwise conv's; a depthwise ConvLeakyRelu the same, its slope in 0x4068).
A ConvTanh is a lookup-table conv (BN_CFG 0x20000) as a ConvSigmoid.  They were refused before (14 of
198 random rk3562 files); the corpus files (standalone_ops_rk3562, depthwise_prelu_rk3562,
depthwise_leaky_rk3562) match the simulator (``test_vendor_validated``).
"""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.rknn_graph.regcmd import TARGET_DPU

from corpus import CORPUS, corpus_arrays, inputs_of, lowered
from vendor_files import doctored_copy, patch_registers


def _producers(graph, output: str) -> list:
    (last,) = [n for n in graph.nodes if output in n.outputs]
    return [n for n in graph.nodes if n.name == last.name]


def test_a_depthwise_and_a_plain_conv_prelu_take_their_slopes():
    graph = lowered("depthwise_prelu_rk3562_i8").graph
    depthwise, plain = _producers(graph, "y"), _producers(graph, "z")
    assert any(n.op == "Conv" and n.attrs.get("group") == 8 for n in depthwise)
    for nodes, expected in ((depthwise, np.linspace(0.05, 0.4, 8)), (plain, [0.2] * 8)):
        (prelu,) = [n for n in nodes if n.op == "PRelu"]
        slopes = graph.constants[prelu.inputs[1]].ravel()
        np.testing.assert_allclose(slopes, expected, atol=2 ** -14)


def test_a_tanh_conv_runs_its_lookup_table():
    assert [n.op for n in _producers(lowered("standalone_ops_rk3562_i8").graph, "convtanh")][-1] == "VendorLutActivation"


def test_a_depthwise_prelu_conv_with_bit_31_of_its_multiplier_register_is_refused(tmp_path):
    patch = patch_registers(TARGET_DPU, {0x4054}, lambda v: v | 0x80000000 if v == 0xF0000 else v)
    path = doctored_copy(CORPUS / "depthwise_prelu_rk3562_i8.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"BS_MUL_CFG \(0x4054\) = 0x800f0000 .*only bit 31 clear and a shift "
                                                r"of at least 14 in bits 16..21 on a PRelu conv"):
        rknnlite.Context(path, backend="software")


def test_a_depthwise_leaky_relu_runs_as_its_rk3588_twin():
    # the simulator rounds a depthwise conv's output to an int8 grid of its own before the LeakyRelu (76-85 %
    # of the codes equal, all within one step, on rk3588 and rk3562 alike); off-board, the registers of the
    # two files give the same outputs bit for bit
    ours = {}
    for stem in ("depthwise_leaky_i8", "depthwise_leaky_rk3562_i8"):
        arrays = corpus_arrays(stem)
        with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
            ours[stem] = ctx.run(inputs_of(arrays), data_format="nchw")
        (leaky,) = {n.attrs["alpha"] for n in _producers(lowered(stem).graph, "y") if n.op == "LeakyRelu"}
        assert leaky == 0.1
    for a, b in zip(*ours.values()):
        np.testing.assert_array_equal(a, b)


def test_a_deconv_on_the_graph_input_writes_bit_31_clear(tmp_path):
    # deconv_input_rk3562: 0x4054 = 0xe0000 (a depthwise conv's value) on the one deconv, which reads the image
    assert "ConvTranspose" in lowered("deconv_input_rk3562_i8").vendor_ops
    patch = patch_registers(TARGET_DPU, {0x4054}, lambda v: v | 0x80000000 if v == 0xE0000 else v)
    with pytest.raises(ModelInvalidError, match=r"BS_MUL_CFG \(0x4054\) = 0x800e0000 .*only 0xe0000 \(shift 14 in "
                                                r"bits 16..21\) on a deconv of the graph input"):
        rknnlite.Context(doctored_copy(CORPUS / "deconv_input_rk3562_i8.rknn", tmp_path, patch), backend="software")
