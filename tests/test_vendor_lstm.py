"""Vendor LSTMs: RKNN-Toolkit2 2.5.0's ``exLSTM`` (silero-vad's decoder) and ``LSTM`` nodes.

Both run as an ONNX ``LSTM``: the weights from conv tiles whose gates are padded to a block of
rows, the bias as the two ONNX biases summed, the attributes from the parameter table (type 98).
The corpus files (``lstm*``) match the simulator (``test_vendor_validated``); these tests pin
what the lowering reads and that a doctored field is refused by name.  rk3588's int8 files
(``lstm*_i8``) hold int8 codes, bias blocks and no weight scale: the scales come from the gate
convs' output multipliers.
"""

from __future__ import annotations

import struct

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.schema import V6

from rknnlite.model.rknn_graph.regcmd import (REG_BN_CFG, REG_BS_ALU_CFG, REG_CNA_PAD_CON1, REG_OUT_CVT_SCALE,
                                             REG_OUT_CVT_SHIFT, TARGET_CNA, TARGET_CORE, TARGET_DPU)

from corpus import CORPUS, lowered, steps_from_simulator
from vendor_files import doctored_copy, node_tables, patch_registers, tensor_bytes


def _lstm_nodes(stem: str):
    graph = lowered(stem).graph
    return graph, [n for n in graph.nodes if n.op == "LSTM"]


def _onnx_lstms(model: str):
    m = onnx.load(str(CORPUS / "onnx" / f"{model}.onnx"))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    return [(n, [inits.get(i) for i in n.input[1:4]]) for n in m.graph.node if n.op_type == "LSTM"]


@pytest.mark.parametrize("stem", ["lstm_fp16", "lstm_rk3566_fp16", "lstm_rk3576_fp16", "lstm_bidir_fp16",
                                  "lstm_clip_reverse_rk3562_fp16"])
def test_the_weights_and_bias_are_the_models(stem):
    # W and R in ONNX's gate order from tiles padded per gate (rk3588, rk3576: 16 rows; rk3566: 8),
    # B the two biases summed (ONNX's Wb, with Rb zero)
    graph, nodes = _lstm_nodes(stem)
    model = stem.rsplit("_fp16", 1)[0]
    expected = _onnx_lstms(model)
    assert len(nodes) == len(expected)
    for node, (_, (w, r, b)) in zip(nodes, expected):
        got_w, got_r, got_b = (graph.constants[name] for name in node.inputs[1:4])
        np.testing.assert_array_equal(got_w, w.astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(got_r, r.astype(np.float16).astype(np.float32))
        hidden = w.shape[1] // 4
        np.testing.assert_allclose(got_b[:, :4 * hidden], b[:, :4 * hidden] + b[:, 4 * hidden:], rtol=1e-6)
        assert not got_b[:, 4 * hidden:].any()


def test_the_lstm_node_form_reads_clip_and_direction():
    _, (reverse, clipped) = _lstm_nodes("lstm_clip_reverse_fp16")
    assert reverse.attrs == {"hidden_size": 8, "direction": "reverse"}
    assert clipped.attrs == {"hidden_size": 8, "direction": "forward", "clip": 0.5}


def test_states_the_model_omits_are_the_compilers_zero_constants():
    _, (node,) = _lstm_nodes("lstm_bidir_fp16")
    assert node.attrs["direction"] == "bidirectional"
    assert node.inputs[4:] == ["", "", ""]


def test_silero_vads_decoder_form_runs_from_graph_states():
    graph, (node,) = _lstm_nodes("lstm_fp16")
    assert node.inputs[5:] == ["h0", "c0"]
    assert set(lowered("lstm_fp16").vendor_ops) == {"InputOperator", "exLSTM", "OutputOperator"}


def _param_slot(data: bytearray, op: str, slot: int) -> int:
    (node,) = node_tables(data, op)
    pos = node.table(V6.n_param, "Param").field_pos(slot)
    assert pos
    return pos


def test_a_parameter_table_of_another_hidden_size_is_refused(tmp_path):
    def patch(data: bytearray) -> None:
        struct.pack_into("<i", data, _param_slot(data, "exLSTM", 6), 16)

    path = doctored_copy(CORPUS / "lstm_fp16.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"exLSTM.*output 'y' is \[3, 1, 1, 8\], an LSTM's of hidden size 16 "
                                                r"is \[3, 1, 1, 16\]"):
        rknnlite.Context(path, backend="software")


def test_a_batch_other_than_the_inputs_is_refused(tmp_path):
    def patch(data: bytearray) -> None:
        struct.pack_into("<i", data, _param_slot(data, "exLSTM", 3), 2)

    path = doctored_copy(CORPUS / "lstm_fp16.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"exLSTM.*'batch': 2.*'batch': 1"):
        rknnlite.Context(path, backend="software")


def test_a_bias_past_the_summed_gates_is_refused(tmp_path):
    def patch(data: bytearray) -> None:  # the second half of the float32 bias is zeros
        view = tensor_bytes(data, "b3")
        struct.pack_into("<f", view, len(view) - 4, 0.25)

    path = doctored_copy(CORPUS / "lstm_fp16.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"bias 'b3' holds values past each gate's 8 summed biases"):
        rknnlite.Context(path, backend="software")


def test_a_dropout_or_projection_helper_that_is_not_zero_is_refused(tmp_path):
    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, "y_input_proj")
        view[0:2] = struct.pack("<e", 0.5)

    path = doctored_copy(CORPUS / "lstm_fp16.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"its helper constant 'y_input_proj' is not all zeros"):
        rknnlite.Context(path, backend="software")


def test_an_older_toolkits_lstm_without_a_parameter_table_is_refused_by_name():
    # RKNN-Toolkit2 2.3.2 writes neither a table nor a BSON: forward and reverse look the same
    with pytest.raises(ModelInvalidError, match=r"an LSTM without a parameter table \(RKNN-Toolkit2 2.3.2 and older "
                                                r"write none\): its direction, forward or reverse, is nowhere"):
        rknnlite.Context(str(CORPUS / "lstm_fp16_tk232.rknn"), backend="software")


def test_an_lstm_whose_blob_is_a_bson_document_is_refused(tmp_path):
    # its blob is no BSON document (zeros and the layouts' names); one holding attributes the table
    # does not would be dropped, so it is refused
    def patch(data: bytearray) -> None:
        (node,) = node_tables(data, "exLSTM")
        blob = node.vector(V6.n_bson, 1)
        element = b"\x10clip\x00" + struct.pack("<i", 3)
        document = struct.pack("<i", 4 + len(element) + 1) + element + b"\x00"
        data[blob.pos:blob.pos + len(blob)] = document.ljust(len(blob), b"\x00")

    path = doctored_copy(CORPUS / "lstm_fp16.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"exLSTM.*BSON attributes \['clip'\]; an exLSTM's blob was never"):
        rknnlite.Context(path, backend="software")


def _asymmetric_rows(a: np.ndarray) -> np.ndarray:
    """``a``'s rows on the grids RKNN-Toolkit2 quantizes weights to per channel: asymmetric int8
    over each row's range including 0, dequantized."""
    lo, hi = np.minimum(a.min(-1, keepdims=True), 0), np.maximum(a.max(-1, keepdims=True), 0)
    scale = (hi - lo) / 255
    zero = np.round(-128 - lo / scale)
    return (np.clip(np.round(a / scale) + zero, -128, 127) - zero) * scale


_INT8 = ["lstm_bidir_i8"] + [f"{model}{platform}_i8" for model in ("lstm", "lstm_clip_reverse")
                              for platform in ("", "_rk3566", "_rk3562", "_rk3576", "_rv1126b")]


@pytest.mark.parametrize("stem", _INT8)
def test_int8_weights_are_the_models_codes_scaled_by_the_gate_convs_multipliers(stem):
    # no tensor stores the weights' scales: each row's is its bias block's multiplier over 2^14
    # times the largest, which the gate conv's OUT_CVT multiplier gives (to 16 bits); B from the
    # int32 bias blocks with the input's zero point folded back out
    graph, nodes = _lstm_nodes(stem)
    expected = _onnx_lstms(stem.rsplit("_i8", 1)[0])
    assert len(nodes) == len(expected)
    for node, (_, (w, r, b)) in zip(nodes, expected):
        got_w, got_r, got_b = (graph.constants[name] for name in node.inputs[1:4])
        for got, model in ((got_w, w), (got_r, r)):
            want = _asymmetric_rows(model)
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
        hidden = w.shape[1] // 4
        summed = got_b[:, :4 * hidden] + got_b[:, 4 * hidden:]
        assert np.abs(summed - (b[:, :4 * hidden] + b[:, 4 * hidden:])).max() <= 1e-3 * np.abs(b).max()


@pytest.mark.parametrize("stem", _INT8)
def test_int8_lstms_run_as_the_simulator_does(stem):
    # the simulator runs a float LSTM on the dequantized codes and puts each output on its grid
    d = np.concatenate(steps_from_simulator(stem))
    assert np.all(d < 1.5) and np.mean(d < 0.5) >= 0.95


def test_an_int8_lstm_of_another_platform_is_refused_by_name(tmp_path):
    # each platform's gate convs are read in its own register map; rv1106's container holds no exLSTM
    data = (CORPUS / "lstm_i8.rknn").read_bytes()
    old = b'"target_platform":["rk3588"]'
    assert data.count(old) == 1
    path = tmp_path / "lstm_i8_rv1106.rknn"
    path.write_bytes(data.replace(old, old.replace(b"rk3588", b"rv1106")))
    with pytest.raises(ModelInvalidError, match=r"an int8 exLSTM on rv1106: its weights' scales are read from the "
                                                r"gate convs' registers, decoded for rk3588, rk3566, rk3568, rk3562, "
                                                r"rk3576, rv1126b only"):
        rknnlite.Context(str(path), backend="software")


@pytest.mark.parametrize("stem, register, change", [
    ("lstm_i8", REG_CNA_PAD_CON1, lambda v: 5 if v == 0 else v),
    ("lstm_rk3566_i8", 0x1068, lambda v: v | 5 << 16 if not v >> 16 else v),  # above PAD_CON0's pads there
    ("lstm_rk3562_i8", 0x1084, lambda v: 5 if v == 0 else v),
    ("lstm_rv1126b_i8", 0x1084, lambda v: 5 if v == 0 else v),
])
def test_an_int8_lstm_whose_state_conv_pads_with_another_code_is_refused(tmp_path, stem, register, change):
    # R's conv pads the state with the state's zero point (0 here); x's conv with x's
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch_registers(TARGET_CNA, {register}, change))
    with pytest.raises(ModelInvalidError, match=r"R \(on the state\)'s gate conv pads with 5.*its input's zero "
                                                r"point 0"):
        rknnlite.Context(path, backend="software")


def test_int8_bias_block_multipliers_not_normalised_to_the_largest_are_refused(tmp_path):
    def patch(data: bytearray) -> None:  # every block's u16 multipliers (its last 16 bytes) lowered by one
        view = tensor_bytes(data, "b3")
        for block in range(0, len(view), 64):
            for at in range(block + 48, block + 64, 2):
                (mul,) = struct.unpack_from("<H", view, at)
                if mul:
                    struct.pack_into("<H", view, at, mul - 1)

    path = doctored_copy(CORPUS / "lstm_i8.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"W's largest bias-block multiplier is 16383, not 2\^14"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem, registers, change, match", [
    # W's and R's scales come from two multipliers; one alone cannot give both
    ("lstm_i8", {REG_OUT_CVT_SCALE, REG_OUT_CVT_SHIFT}, lambda v: 14,
     r"1 gate conv multiplier\(s\) among its CNA tasks; W's and R's"),
    # rk3562's gate convs write BS_ALU_CFG 0x36d (R's first 0x126), which no other rk3562 conv does
    ("lstm_rk3562_i8", {REG_BS_ALU_CFG}, lambda v: 0x1 if v == 0x36D else v,
     r"an rk3562 exLSTM gate conv with BS_ALU_CFG, 0x4054 0x1, 0x800e0000"),
    # rk3576/rv1126b: BS_ALU_CFG bits 16..19 = 1 (bias blocks) on the gate convs, 2 on R's first gate
    ("lstm_rv1126b_i8", {REG_BS_ALU_CFG}, lambda v: v | 0x20000 if (v >> 16) & 0xF == 1 else v,
     r"BS_ALU_CFG \(0x4050\) = 0x80037777 on an rk3576/rv1126b int8 conv: bias layout 3"),
    # rk3588/rk3566: the gate convs' BN stage bypassed (a shift there, as residual convs of tiny steps
    # write it, would scale the weights read from OUT_CVT)
    ("lstm_rk3566_i8", {REG_BN_CFG}, lambda v: 0x42 if v == 0x53 else v,
     r"BN_CFG \(0x4060\) = 0x42 on an int8 plain conv; only 0x53 was observed"),
    ("lstm_rk3562_i8", {REG_BN_CFG}, lambda v: 0x2 if v == 0x13 else v,
     r"an rk3562 exLSTM gate conv with BS_ALU_CFG, 0x4054 0x36d, 0x800e0000, BN_CFG 0x2"),
])
def test_doctored_gate_conv_registers_are_refused(tmp_path, stem, registers, change, match):
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch_registers(TARGET_DPU, registers, change))
    with pytest.raises(ModelInvalidError, match=match):
        rknnlite.Context(path, backend="software")


def test_a_truncated_rk3576_gate_conv_is_refused(tmp_path):
    # CORE 0x3024 (a conv's accumulator truncated by k bits) was never seen on a gate conv: OUT_CVT would
    # read 2^k times the weights' scale
    patch = patch_registers(TARGET_CORE, {0x3024}, lambda v: 0x21)
    path = doctored_copy(CORPUS / "lstm_rk3576_i8.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"LSTM gate conv whose accumulator is truncated by 1 bits"):
        rknnlite.Context(path, backend="software")
