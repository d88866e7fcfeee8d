"""Vendor LSTMs: RKNN-Toolkit2 2.5.0's ``exLSTM`` (silero-vad's decoder) and ``LSTM`` nodes.

Both run as an ONNX ``LSTM``: the weights from conv tiles whose gates are padded to a block of
rows, the bias as the two ONNX biases summed, the attributes from the parameter table (type 98).
The corpus files (``lstm*``) match the simulator (``test_vendor_validated``); these tests pin
what the lowering reads and that a doctored field is refused by name.
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

from corpus import CORPUS, lowered
from vendor_files import doctored_copy, node_tables, tensor_bytes


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
