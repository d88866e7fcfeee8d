"""rv1106/rv1103 files (the 0x1004 container, "RKNPU t3") run off-board, or are refused by name.

The container packs task records, register commands and weights ahead of a FlatBuffer graph of
its own schema (:mod:`rknnlite.model.packed`, :data:`rknnlite.model.schema.T3`).  Its nodes
carry no attributes: a conv's strides and pads are read from its CNA registers, its
requantization from its DPU registers (:mod:`rknnlite.model.rknn_graph.t3conv`).  The corpus
files ``conv_pads_rv1106_i8*`` / ``conv_pads_rv1103_i8*`` (RKNN-Toolkit2 2.2.0 to 2.5.0) hold one
conv attribute per layer; that they meet the fidelity bounds is checked with every corpus file
(``tests/test_vendor_validated.py``).  Here: the container's decoding, the attributes against the
ONNX model's, and a refusal for every decoder input doctored.
"""

from __future__ import annotations

import json
import struct
import sys

import numpy as np
import pytest

import rknnlite
from rknnlite.cli import main as cli_main
from rknnlite.errors import ModelInvalidError
from rknnlite.model.packed import locate_sections
from rknnlite.model.rknn_graph.lower import lower_rockchip
from rknnlite.model.rknn_graph.regcmd import TARGET_CNA, TARGET_DPU, TARGET_RDMA
from rknnlite.model.rknn_graph.t3conv import t3_conv_params
from rknnlite.model.rknn_graph.t3nodes import t3_unsupported_ops
from rknnlite.model.rknn_graph.graph import VendorNode, read_vendor_graph
from rknnlite.model.rknn_graph.weights import decode_depthwise_weight, decode_weight
from rknnlite.model.rockchip import read_rockchip
from rknnlite.model.schema import T3

from corpus import CORPUS, REPO
from vendor_files import doctored_copy, patch_registers, subgraph_table, tensor_bytes, tensor_table

STEMS = [f"conv_pads_{p}_i8{s}" for p in ("rv1106", "rv1103") for s in ("", "_tk232", "_tk230", "_tk220")]
STEM = "conv_pads_rv1106_i8"


def _model(stem: str = STEM):
    data = (CORPUS / f"{stem}.rknn").read_bytes()
    return data, read_rockchip(data, label=stem)


@pytest.mark.parametrize("stem", STEMS)
def test_the_container_sections_and_graph_are_located(stem):
    data, rk = _model(stem)
    assert rk.format_version == 0x1004 and rk.flatbuffer and rk.schema is T3 and rk.graph_error is None
    assert rk.npu_target == "RKNPU t3" and rk.target_platform == stem.split("_")[2]
    p = rk.packed
    # the sections follow one another up to the end of the model section, the graph last
    assert p.tasks[0] == 0x80 and p.tasks[1] % 40 == 0
    assert p.regcmd[0] + p.regcmd[1] == p.generated[0] and p.generated[0] + p.generated[1] == p.weights[0]
    assert p.weights[0] + p.weights[1] == p.graph[0]
    assert (rk.graph_offset, rk.graph_size) == p.graph and p.graph[0] + p.graph[1] == 0x40 + rk.model_size
    assert data[p.graph[0] + 4:p.graph[0] + 8] == b"RKNN"
    # the I/O tensors are int8 with the graph's quantization
    assert [t.dtype for t in rk.inputs + rk.outputs] == ["int8", "int8"]
    assert rk.inputs[0].quant is not None and rk.outputs[0].quant is not None
    assert rk.summary()["packed"]["weights"] == list(p.weights)


def test_the_conv_attributes_from_the_registers_are_the_onnx_model_s():
    sys.path.insert(0, str(REPO / "tools" / "vendor_corpus"))
    import models

    onnx_convs = [n for n in models.case_named(STEM[:-3]).build().graph.node if n.op_type == "Conv"]
    model = lower_rockchip(*_model())
    convs = [n for n in model.graph.nodes if n.op == "Conv"]
    assert len(convs) == len(onnx_convs) == 5
    for ours, theirs in zip(convs, onnx_convs):
        want = {a.name: list(a.ints) if a.ints else a.i for a in theirs.attribute}
        assert ours.attrs["kernel_shape"] == want["kernel_shape"] and ours.attrs["strides"] == want["strides"]
        top, left, bottom, right = ours.attrs["pads"]
        w_top, w_left, w_bottom, w_right = want["pads"]
        assert (top, left) == (w_top, w_left)
        # the registers hold the fewest bottom/right pads that give the output size: the same output
        assert bottom <= w_bottom and right <= w_right


def test_the_corpus_file_runs_and_matches_the_simulator():
    from corpus import corpus_arrays, inputs_of

    arrays = corpus_arrays(STEM)
    with rknnlite.Context(str(CORPUS / f"{STEM}.rknn"), backend="software") as ctx:
        (ours,) = ctx.run(inputs_of(arrays))
    sim = arrays["out0"]
    scale = read_rockchip((CORPUS / f"{STEM}.rknn").read_bytes()).outputs[0].quant.scale[0]
    assert ours.shape == sim.shape
    assert np.abs(ours - sim).max() <= scale * 1.0001


def _refused(tmp_path, patch, match: str, stem: str = STEM) -> None:
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=match):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("reg, change, match", [
    (0x100C, lambda v: v | 7, r"CNA_CONV_CON1 \(0x100c\) = 0x[0-9a-f]*7: only plain convs"),
    (0x1014, lambda v: v | 0x4000000,
     r"CNA_CONV_CON3 \(0x1014\) = 0x40000[0-9a-f]+ sets bits beyond the strides and dilations"),
    (0x1068, lambda v: v | 0x30, r"CNA_PAD_CON0 \(0x1068\) = 0x[0-9a-f]+ sets bits beyond the top and left pads"),
    (0x1068, lambda v: v + 1, r"cannot map input"),
    (0x1038, lambda v: v + 1, r"register 0x1038 = 0x[0-9a-f]+ is not the weight's kernel"),
])
def test_a_doctored_cna_register_is_refused_by_name(tmp_path, reg, change, match):
    _refused(tmp_path, patch_registers(TARGET_CNA, {reg}, change), match)


@pytest.mark.parametrize("reg, value, match", [
    (0x4054, 0x8F000000, r"DPU register 0x4054 = 0x8f000000 in an rv1106 int8 .*only 0x8e000000"),
    (0x4048, 0x0, r"DPU register 0x4048 = 0x0 in an rv1106 int8 .*only 0x1"),
    (0x4060, 0x22, r"DPU register 0x4060 = 0x22 in an rv1106 int8"),
    (0x4050, 0x30000003, r"DPU register 0x4050 = 0x30000003"),
])
def test_a_doctored_dpu_register_is_refused_by_name(tmp_path, reg, value, match):
    _refused(tmp_path, patch_registers(TARGET_DPU, {reg}, lambda v: value), match)


def test_an_op_type_whose_attributes_are_not_recovered_is_refused_naming_it(tmp_path):
    def patch(data: bytearray) -> None:  # an op type string "Conv" -> "LSTM", which runs on other platforms
        at = data.index(b"\x04\x00\x00\x00Conv\x00", read_rockchip(bytes(data)).graph_offset)
        data[at + 4:at + 8] = b"LSTM"

    _refused(tmp_path, patch, r"vendor op type LSTM in an rv1106/rv1103 container cannot run off-board: its graph "
                              r"stores no attributes, and those of only .*Conv, ConvAdd")


def test_an_exnorm_is_refused_saying_its_epsilon_is_not_in_the_file(tmp_path):
    def patch(data: bytearray) -> None:  # an op type string "Concat" -> "exNorm" (same length)
        at = data.index(b"\x06\x00\x00\x00Concat\x00", read_rockchip(bytes(data)).graph_offset)
        data[at + 4:at + 10] = b"exNorm"

    _refused(tmp_path, patch, r"vendor op type exNorm in an rv1106/rv1103 container cannot run off-board: .*; an exNorm "
                              r"runs on the CPU in this container .* its epsilon is stored nowhere in the file",
             "classifier_ops_rv1106_i8")


def test_a_section_table_that_does_not_add_up_is_refused_with_the_reason(tmp_path):
    def patch(data: bytearray) -> None:  # register commands running into the graph
        struct.pack_into("<I", data, 0x40 + 12, struct.unpack_from("<I", data, 0x40 + 12)[0] + 0x400)

    path = doctored_copy(CORPUS / f"{STEM}.rknn", tmp_path, patch)
    rk = read_rockchip(open(path, "rb").read())  # the file still reads (librknnrt would load it on a board)
    assert not rk.flatbuffer and "section table" in rk.graph_error
    with pytest.raises(ModelInvalidError, match="keep their graph in a section that could not be read: its section "
                                                "table"):
        rknnlite.Context(path, backend="software")


def test_inspect_shows_the_container_version_and_why_its_graph_cannot_be_read(tmp_path, capsys):
    code = cli_main(["inspect", str(CORPUS / f"{STEM}.rknn"), "--json"])
    info = json.loads(capsys.readouterr().out)
    assert code == 0 and info["format_version"] == "0x1004" and info["graph_error"] is None
    assert info["off_board"] == {"runs": True, "error": None, "notes": []}

    def patch(data: bytearray) -> None:  # as above: the register commands run into the graph
        struct.pack_into("<I", data, 0x40 + 12, struct.unpack_from("<I", data, 0x40 + 12)[0] + 0x400)

    path = doctored_copy(CORPUS / f"{STEM}.rknn", tmp_path, patch)
    assert cli_main(["inspect", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "format:   rockchip-rknn v0x1004" in lines
    graph = [line for line in lines if line.startswith("graph:")]
    assert len(graph) == 1 and "section table" in graph[0]
    assert cli_main(["inspect", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format_version"] == "0x1004" and "section table" in info["graph_error"]
    assert "off_board" not in info and "vendor_ops" not in info


def test_locate_sections_names_what_does_not_fit():
    table = struct.pack("<6I", 100, 0x40, 3, 8, 0, 0)  # three 40-byte tasks in a 64-byte area
    assert "3 tasks (120 bytes) in a 64-byte task area" in locate_sections(bytes(0x40) + table + bytes(300), 300)
    assert "too short for the section table" in locate_sections(bytes(0x48), 8)
    table = struct.pack("<6I", 4, 0x100, 1, 0, 0, 0)  # a 4-byte graph after the task area
    assert "too short for a FlatBuffer" in locate_sections(bytes(0x40) + table + bytes(0x184 - 0x58), 0x144)
    table = struct.pack("<6I", 100, 0x100, 1, 0, 0, 0)
    assert "weights 0 and graph 100 bytes) needs 96 bytes more than the 324-byte model section" in \
        locate_sections(bytes(0x40) + table + bytes(0x184 - 0x58), 0x144)


def test_a_weight_whose_size_is_not_its_tiles_rounded_to_64_bytes_is_refused():
    raw = np.arange(1600, dtype=np.uint8).astype(np.int8).tobytes()
    tiles, shape = (1, 1, 7, 7, 8, 4), (8, 3, 7, 7)  # 1568 bytes, 1600 on 64
    assert decode_weight(raw, tiles, shape, "int8", "w", 1600, align=64).shape == shape
    with pytest.raises(ModelInvalidError, match="hold 1568 bytes but the tensor's NPU size is 1600"):
        decode_weight(raw, tiles, shape, "int8", "w", 1600)
    with pytest.raises(ModelInvalidError, match="NPU size is 1664"):
        decode_weight(raw + bytes(64), tiles, shape, "int8", "w", 1664, align=64)


def test_t3_conv_params_refuse_registers_that_contradict_the_shapes():
    regs = {(TARGET_CNA, 0x100C): 0, (TARGET_CNA, 0x1014): 0x9, (TARGET_CNA, 0x1068): 0x101,
            (TARGET_CNA, 0x1038): 0x3030008, (TARGET_CNA, 0x1184): 5}
    params = t3_conv_params(regs, (8, 4, 3, 3), (1, 4, 10, 10), (1, 8, 10, 10), 5, "c")
    assert params["pads"] == [1, 1, 1, 1] and params["strides"] == [1, 1] and params["group"] == 1
    with pytest.raises(ModelInvalidError, match="cannot map input"):
        t3_conv_params(regs, (8, 4, 3, 3), (1, 4, 10, 10), (1, 8, 12, 10), 5, "c")
    with pytest.raises(ModelInvalidError, match="does not write CNA register 0x1068"):
        t3_conv_params({k: v for k, v in regs.items() if k[1] != 0x1068}, (8, 4, 3, 3), (1, 4, 10, 10),
                       (1, 8, 10, 10), 5, "c")
    # the code it pads with must be the input's zero point, a real 0
    with pytest.raises(ModelInvalidError, match=r"CNA register 0x1184 = 0x6: the conv pads its input with code 6, "
                                                r"not with its zero point 5"):
        t3_conv_params({**regs, (TARGET_CNA, 0x1184): 6}, (8, 4, 3, 3), (1, 4, 10, 10), (1, 8, 10, 10), 5, "c")
    # a 1x1 conv may pad past its kernel (a Pad the compiler folded into it, corpus folded_pad_rv110*)
    one = {**regs, (TARGET_CNA, 0x1014): 0x9, (TARGET_CNA, 0x1068): 0x1, (TARGET_CNA, 0x1038): 0x1010008}
    assert t3_conv_params(one, (8, 4, 1, 1), (1, 4, 13, 13), (1, 8, 15, 15), 5, "c")["pads"] == [1, 0, 1, 2]


def test_a_conv_on_the_image_input_writes_its_channels_rounded_up():
    # 1x1 to a multiple of 4 lanes, larger kernels to a multiple of 2 (corpus image_lanes_rv110*)
    regs = {(TARGET_CNA, 0x100C): 0x2000A000, (TARGET_CNA, 0x1014): 0x9, (TARGET_CNA, 0x1184): 0xFFC0}
    for (cout, k), lanes in (((1, 1), 4), ((5, 1), 8), ((1, 3), 2), ((5, 3), 6), ((1, 7), 2)):
        kernel = {(TARGET_CNA, 0x1038): k << 24 | k << 16 | lanes, (TARGET_CNA, 0x1068): (k // 2) * 0x101}
        params = t3_conv_params({**regs, **kernel}, (cout, 3, k, k), (1, 3, 8, 8), (1, cout, 8, 8), -64, "c")
        assert params["kernel_shape"] == [k, k]
        with pytest.raises(ModelInvalidError, match=f"is not the weight's kernel {k}x{k} and {lanes} "):
            kernel[(TARGET_CNA, 0x1038)] = k << 24 | k << 16 | cout
            t3_conv_params({**regs, **kernel}, (cout, 3, k, k), (1, 3, 8, 8), (1, cout, 8, 8), -64, "c")


def test_inspect_lists_the_ops_of_an_rv1106_file(capsys):
    from rknnlite.cli import main

    assert main(["inspect", str(CORPUS / f"{STEM}.rknn")]) == 0
    out = capsys.readouterr().out
    assert "RKNPU t3" in out and "ConvRelu" in out and "off-board: runs" in out


def test_tensor_table_reads_the_t3_schema():
    data = bytearray((CORPUS / f"{STEM}.rknn").read_bytes())
    rk = read_rockchip(bytes(data))
    names = [t.name for t in lower_rockchip(bytes(data), rk).graph.nodes]
    assert names  # the graph lowered
    t = tensor_table(data, rk.inputs[0].name)
    assert tuple(t.scalars(T3.t_scale, "f32")) == rk.inputs[0].quant.scale


FAMILY = "classifier_ops_rv1106_i8"


def test_the_classifier_families_recover_their_attributes():
    """Depthwise convs, a Clip, residual Adds, a MaxPool, a Split, a Concat and a Reshape: each
    lowered with the attributes of the ONNX model (classifier_ops)."""
    model = lower_rockchip(*_model(FAMILY))
    by_op = {}
    for node in model.graph.nodes:
        by_op.setdefault(node.op, []).append(node)
    (pool,) = by_op["MaxPool"]
    # ONNX pads (1, 1, 1, 1); the registers hold the ones the output needs: no bottom or right row
    assert (pool.attrs["kernel_shape"], pool.attrs["strides"], pool.attrs["pads"]) == ([3, 3], [2, 2], [1, 1, 0, 0])
    assert [n.attrs["axis"] for n in by_op["Split"]] == [1] and [n.attrs["axis"] for n in by_op["Concat"]] == [1]
    groups = sorted(n.attrs["group"] for n in by_op["Conv"])
    assert groups[-3:] == [8, 8, 16]  # the global pool's two depthwise convs and the inverted residual's
    assert "VendorAddRequant" in by_op and len(by_op["Reshape"]) == 1


def _ppu_refused(tmp_path, reg, change, match):
    _refused(tmp_path, patch_registers(0x4001, {reg}, change), match, FAMILY)


@pytest.mark.parametrize("reg, change, match", [
    (0x6024, lambda v: 0x10, r"OPERATION_MODE_CFG \(0x6024\) = 0x10 on a MaxPool whose task writes 8 of 8 output "
                             r"columns; only 0x11"),
    (0x6034, lambda v: v | 0x1000, r"set bits outside the kernel, stride and pad fields"),
    (0x6034, lambda v: v + 1, r"a 3x4 MaxPool with strides \(2, 2\) .* does not map"),
    (0x6040, lambda v: v | 0x2000, r"pads \(1, 1, 2, 0\) does not map"),
])
def test_a_doctored_ppu_register_is_refused_by_name(tmp_path, reg, change, match):
    _ppu_refused(tmp_path, reg, change, match)


def test_a_clip_bound_written_twice_differently_is_refused(tmp_path):
    _refused(tmp_path, patch_registers(TARGET_DPU, {0x40E4}, lambda v: v if v >= 0x7FFFFFFF else v + 1),
             r"the upper clamps 0x4028 = 0x[0-9a-f]+, 0x40e4 = 0x[0-9a-f]+ of an rv1106 int8 ConvClip", FAMILY)


def test_a_residual_conv_without_its_scale_flag_is_refused(tmp_path):
    _refused(tmp_path, patch_registers(TARGET_DPU, {0x4084}, lambda v: v & 0xFFFF),
             r"OUT_CVT scale 0x[0-9a-f]+ / shift 0x[0-9a-f]+ in an rv1106 int8 AddRelu conv; a 16-bit scale with bit "
             r"16 set", FAMILY)


def test_an_axis_the_shapes_cannot_tell_is_refused():
    from rknnlite.model.rknn_graph import t3nodes

    class Node:
        node = type("N", (), {"where": "n"})()

        def refuse(self, message):
            return ModelInvalidError(message)

    assert t3nodes._axis(Node(), (1, 8, 4, 4), [(1, 3, 4, 4), (1, 5, 4, 4)]) == 1
    for whole, parts in (((1, 8, 4, 4), [(1, 8, 4, 4)]), ((1, 8, 4, 4), [(1, 4, 2, 4), (1, 4, 2, 4)]),
                         ((1, 8, 4, 4), [(1, 3, 4, 4), (1, 3, 4, 4)]), ((1, 8, 4), [(1, 8, 4, 4)])):
        with pytest.raises(ModelInvalidError):
            t3nodes._axis(Node(), whole, parts)


def test_an_rv1106_depthwise_weight_interleaves_each_channel_with_its_zero_point():
    weight = np.arange(-8, 10, dtype=np.int8).reshape(1, 2, 3, 3)  # two channels
    zp = np.array([3, -128])
    lanes = np.zeros((3, 3, 4, 2), np.int8)  # [kh][kw][lane of 4][weight, -zp]
    lanes[:, :, :2, 0] = weight[0].transpose(1, 2, 0)
    lanes[:, :, :2, 1] = (-zp).astype(np.int8)  # -(-128) is stored as -128
    raw = lanes.tobytes() + bytes(56)  # 72 bytes of tiles, 128 on 64
    got, got_zp = decode_depthwise_weight(raw, (1, 1, 3, 3, 1, 4), (1, 2, 3, 3), "w", 128, group=1, align=64)
    assert np.array_equal(got, weight) and got_zp.tolist() == [3, -128]
    with pytest.raises(ModelInvalidError, match="hold 72 bytes but the tensor's NPU size is 128"):
        decode_depthwise_weight(raw, (1, 1, 3, 3, 1, 4), (1, 2, 3, 3), "w", 128, group=1)


LUT = "sigmoid_mul_rv1106_i8"


@pytest.mark.parametrize("reg, value, match", [
    (0x4050, 0x30000001, r"DPU register 0x4050 = 0x30000001 in an rv1106 lookup-table task; only 0x30000002"),
    (0x4084, 0x400F, r"OUT_CVT scale 0x400f / shift 0x[0-9a-f]+ in an rv1106 lookup-table task"),
])
def test_a_doctored_lookup_table_task_is_refused_by_name(tmp_path, reg, value, match):
    def change(v):  # only the DPU-only task's writes: the table is indexed there (BN_CFG 0x20000 is its, too)
        return value if v in (0x30000002, 0x1400F) else v

    _refused(tmp_path, patch_registers(TARGET_DPU, {reg}, change), match, LUT)


def test_a_standalone_sigmoid_adds_its_index_offset_before_the_multiplication():
    """rv1106 writes A = -zp_in where rk3588 writes -zp_in * M (the same model built for both):
    the lowered index offset is A * M, which rk3588's form would have read as A."""
    model = lower_rockchip(*_model(LUT))
    (lut,) = [n for n in model.graph.nodes if n.op == "VendorLutActivation"]
    rk3588 = lower_rockchip(*_model("sigmoid_mul_i8"))
    (twin,) = [n for n in rk3588.graph.nodes if n.op == "VendorLutActivation"]
    assert lut.attrs == twin.attrs


DETECTOR = "detector_ops_rv1106_i8"


def test_the_detector_families_recover_their_attributes():
    """YOLOv8's nearest Resize (whole factors, DPU-only tasks), its DFL Softmax over axis 1 and
    its one-channel conv with a plain int32 bias, as in the rk3588 twin's parameter tables."""
    model = lower_rockchip(*_model(DETECTOR))
    twin = lower_rockchip(*_model("detector_ops_i8"))
    for op in ("Resize", "Softmax", "Split"):
        ours = [n.attrs for n in model.graph.nodes if n.op == op]
        theirs = [n.attrs for n in twin.graph.nodes if n.op == op]
        assert ours == theirs, op


def test_a_softmax_whose_sum_weight_is_not_the_observed_one_is_refused(tmp_path):
    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, "reshape_89_rs_weight")
        view[32:34] = np.float16(2).tobytes()  # the second channel's one, doubled

    _refused(tmp_path, patch, r"an exSoftmax13 over 16 values of axis 1 whose reduce-sum weight "
                              r"'reshape_89_rs_weight' \(float16, \[16, 16, 1, 1\]\) is not \[16, 16, 1, 1\] with a "
                              r"float16 1 in lane 0 of the first 16 rows of its column blocks", DETECTOR)


@pytest.mark.parametrize("stem", ["classifier_heads_rv1106_i8", "classifier_heads_rv1103_i8_tk220"])
def test_softmax_heads_of_up_to_16_classes_run_in_float16(stem):
    # models._classifier_heads: logits of 10 and 16 classes converted to float16 (exDataConvert) and a
    # Softmax over each; the outputs equal the simulator's (test_vendor_validated)
    data, rk = _model(stem)
    sg = read_vendor_graph(data, rk.graph_offset, rk.graph_size, stem, rk.schema, rk.packed).subgraphs[0]
    assert sorted(sg.tensor(n.inputs[0], "").shape[1] for n in sg.nodes if n.op == "exSoftmax13") == [10, 16]
    model = lower_rockchip(data, rk)
    assert [n.attrs for n in model.graph.nodes if n.op == "Softmax"] == [{"axis": 1}, {"axis": 1}]
    assert [n.op for n in model.graph.nodes].count("Identity") == 2  # the conversions, dequantized by the tensors


def test_a_softmax_head_whose_sum_weight_sums_a_padding_row_is_refused(tmp_path):
    def patch(data: bytearray) -> None:
        rk = read_rockchip(bytes(data))
        vf = read_vendor_graph(bytes(data), rk.graph_offset, rk.graph_size, "f", rk.schema, rk.packed)
        sg = vf.subgraphs[0]
        (head,) = [n for n in sg.nodes if n.op == "exSoftmax13" and sg.tensor(n.inputs[0], "").shape[1] == 10]
        weight = next(sg.tensor(i, "").name for i in head.inputs if sg.tensor(i, "").name.endswith("_rs_weight"))
        tensor_bytes(data, weight)[12 * 32:12 * 32 + 2] = np.float16(1).tobytes()  # its row 12: a padding class

    _refused(tmp_path, patch, r"an exSoftmax13 over 10 values of axis 1 whose reduce-sum weight",
             "classifier_heads_rv1106_i8")


def test_a_data_convert_before_another_op_is_refused(tmp_path):
    # only the Softmax heads' conversion was observed: the compiler's own around a float16 split conv, on
    # other platforms, does not match the simulator (test_vendor_offboard)
    def patch(data: bytearray) -> None:
        for node in subgraph_table(data).tables(T3.sg_nodes):
            if node.string(T3.n_type) == "exSoftmax13":  # renamed in place, the string's length kept
                at = node.field_pos(T3.n_type)
                at += struct.unpack_from("<I", data, at)[0]
                struct.pack_into("<I", data, at, len("ReduceMax"))
                data[at + 4:at + 15] = b"ReduceMax\0\0"

    _refused(tmp_path, patch, r"an exDataConvert from int8 to float16 read by \['ReduceMax'\]; only int8 to float16 "
                              r"before an exSoftmax13 was observed", "classifier_heads_rv1106_i8")


def test_a_doctored_data_convert_task_is_refused_by_name(tmp_path):
    # the conversion tasks' OUT_CVT scale: a unit one (the convs' scales have no bit 16 here)
    _refused(tmp_path, patch_registers(TARGET_DPU, {0x4084}, lambda v: 0x10002 if v == 0x10001 else v),
             r"DPU register 0x4084 = 0x10002 in an rv1106 int8 -> float16 conversion task; only 0x10001",
             "classifier_heads_rv1106_i8")


def test_a_resize_with_a_conv_task_is_refused(tmp_path):
    def patch(data: bytearray) -> None:  # the Resize's task enables the CNA: a bilinear one's form
        rk = read_rockchip(bytes(data))
        vf = read_vendor_graph(bytes(data), rk.graph_offset, rk.graph_size, "f", rk.schema, rk.packed)
        (resize,) = [n for n in vf.subgraphs[0].nodes if n.op == "Resize"]
        start = rk.packed.tasks[0]
        for k in range(rk.packed.tasks[1] // 40):
            if struct.unpack_from("<I", data, start + 40 * k + 4)[0] == resize.index:
                struct.pack_into("<I", data, start + 40 * k + 8, 0x1D)

    _refused(tmp_path, patch, r"a nearest Resize run by tasks with enable masks \['0x1d'\]; a nearest one on "
                              r"DPU-only tasks", DETECTOR)


@pytest.mark.parametrize("change, shown", [
    (lambda v: v & 0xFFFF, "0x80"),  # no flag
    (lambda v: v + 1, "0x80000081"),  # minus a zero point of -129, beyond int8
    (lambda v: v | 0x40000, "0x80040080"),  # bits beyond the 17-bit operand
])
def test_a_plain_bias_conv_operand_outside_the_decoded_field_is_refused(tmp_path, change, shown):
    # bit 31 and minus the weight zero point, 17-bit two's complement (image_lanes_rv110*: 0x1ffxx)
    _refused(tmp_path, patch_registers(TARGET_DPU, {0x4054}, lambda v: change(v) if v >> 31 and v & 0xFFFF else v),
             rf"DPU register 0x4054 = {shown} in an rv1106 int8 plain-bias conv; bit 31 and a 17-bit operand, minus "
             r"an int8 weight zero point", DETECTOR)


def test_an_io_tensor_without_a_json_dtype_takes_the_graph_s():
    """An rv1106 graph has no I/O info (where other files say each I/O tensor's dtype): an output
    the JSON leaves untyped (an ArgMax's int64 label, in a real file) takes its graph tensor's
    dtype instead of the float16 default."""
    data = (CORPUS / f"{STEM}.rknn").read_bytes()
    typed = b'"dtype":{"qnt_method":"layer","qnt_type":"int8","vx_type":"int8"},"size":[1,4,4,3]'
    assert data.count(typed) == 1
    untyped = b'"dtype":{"qnt_method":"","qnt_type":"","vx_type":""},"size":[1,4,4,3]'.ljust(len(typed))
    rk = read_rockchip(data.replace(typed, untyped))
    assert rk.outputs[0].dtype == "int8" and rk.outputs[0].quant is not None


def test_a_container_with_several_subgraphs_is_refused():
    """Dynamic input shapes give one subgraph per shape set; where their constants lie was not
    decoded (a 2.5.0 build read as one graph's gave non-positive bias multipliers)."""
    import dataclasses

    from rknnlite.model.rknn_graph.t3nodes import complete_t3_nodes

    data, rk = _model()
    vf = read_vendor_graph(data, rk.graph_offset, rk.graph_size, STEM, rk.schema, rk.packed)
    twice = dataclasses.replace(vf, subgraphs=vf.subgraphs * 2)
    with pytest.raises(ModelInvalidError, match="container with 2 subgraphs \\(dynamic input shapes\\) cannot run"):
        complete_t3_nodes(twice)
    assert complete_t3_nodes(vf).subgraphs[0].nodes[1].params["strides"] == [2, 2]


def test_a_dynamic_shape_rv1106_build_is_a_flatbuffer_file_with_rv1106_registers():
    """rv1106's dynamic-shape builds are no container: a format-6 FlatBuffer (its parameter tables
    and BSON as other platforms') whose npu target "RKNPU t3" says the DPU registers are rv1106's
    (read with rk3588's map, the per-channel multipliers came out negative)."""
    data, rk = _model("dynconv_rv1106_i8")
    assert rk.format_version == 6 and rk.packed is None and rk.npu_target == "RKNPU t3" and rk.num_subgraphs == 3
    model = lower_rockchip(data, rk)
    assert model.platform == "rv1106" and model.rockchip.is_dynamic


@pytest.mark.parametrize("stem, attrs", [
    ("deconv_k4s2_rv1106_i8", {"kernel_shape": [4, 4], "strides": [2, 2], "pads": [1, 1, 1, 1],
                               "output_padding": [0, 0]}),
    # ONNX pads 1 and output padding 1: the registers give the same output from pads (1, 1, 0, 0)
    ("deconv_k3s2op1_rv1106_i8", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 0],
                                  "output_padding": [0, 0]}),
])
def test_a_conv_transpose_recovers_its_attributes(stem, attrs):
    model = lower_rockchip(*_model(stem))
    (deconv,) = [n for n in model.graph.nodes if n.op == "ConvTranspose"]
    assert {key: deconv.attrs[key] for key in attrs} == attrs


def test_asymmetric_convs_recover_their_attributes():
    # corpus conv_asymmetric_rv1106 (models.CONV_ASYMMETRIC): 0x1038 holds the kernel's width above its
    # height; top and left pads and the x and y strides apart (the ONNX end pads (1, 0) and (1, 1) of the
    # strided ones read as the fewest that give the output size: no window reads past them)
    model = lower_rockchip(*_model("conv_asymmetric_rv1106_i8"))
    convs = [n.attrs for n in model.graph.nodes if n.op == "Conv"][1:]
    assert [(a["kernel_shape"], a["strides"], a["pads"]) for a in convs] == [
        ([1, 3], [1, 1], [0, 1, 0, 1]), ([3, 1], [2, 1], [1, 0, 0, 0]), ([2, 3], [1, 2], [0, 1, 1, 0])]


def test_an_asymmetric_conv_read_height_first_is_refused(tmp_path):
    # the 1x3 conv's 0x1038 (0x3010008) with its halves swapped, as a 3x1 kernel would be
    patch = patch_registers(TARGET_CNA, {0x1038}, lambda v: 0x1030008 if v == 0x3010008 else v)
    _refused(tmp_path, patch, r"register 0x1038 = 0x1030008 is not the weight's kernel 1x3 and 8",
             "conv_asymmetric_rv1106_i8")


@pytest.mark.parametrize("reg, change, match", [
    (0x1014, lambda v: v | 0x10000, r"a ConvTranspose with CNA_CONV_CON1 0x0, CNA_CONV_CON3 0x10909"),
    (0x1068, lambda v: v | 0x5, r"a 4x4 ConvTranspose with strides \[2, 2\] and pads from 0x207 cannot map"),
])
def test_a_doctored_conv_transpose_register_is_refused(tmp_path, reg, change, match):
    # only the ConvTranspose's writes: the second conv task's (the first is the Conv before it)
    patch = patch_registers(TARGET_CNA, {reg}, lambda v, n: change(v) if n == 1 else v, indexed=True)
    _refused(tmp_path, patch, match, "deconv_k4s2_rv1106_i8")


@pytest.mark.parametrize("reg, value, change, match", [
    (0x100C, 0x7, 0x0, r"a ConvTranspose with CNA_CONV_CON1 0x0, CNA_CONV_CON3 0x909 and weight \[16, 1, 4, 4\] from 16 "
                       r"to 16 channels"),
    (0x1038, 0x4040002, 0x4040010, r"register 0x1038 = 0x4040010 is not a ConvTranspose's 4x4 kernel and 2 "
                                   r"\(depthwise\): 0x4040002"),
])
def test_a_doctored_depthwise_conv_transpose_register_is_refused(tmp_path, reg, value, change, match):
    # the older releases' depthwise deconv (a bilinear Resize), the file's one conv mode 7 and its
    # one 4x4 kernel: 2 in 0x1038's low bits
    patch = patch_registers(TARGET_CNA, {reg}, lambda v: change if v == value else v)
    _refused(tmp_path, patch, match, "segmenter_ops_rv1106_i8_tk230")


ATTENTION = "psa_attention_nope_rv1106_i8"


def test_an_attention_takes_its_scale_from_its_bn_multiplier_and_rk3588_s_grids():
    # no BSON: the scale is the scores task's BN multiplier (0x4068 = 0x5a821100: 0x5a82 / 2^17), which
    # 1/sqrt(32) rounds to (q has 32 channels); the grids are the rk3588 build's of the same model
    model = lower_rockchip(*_model(ATTENTION))
    (scaled,) = [n for n in model.graph.nodes if n.op == "Mul" and n.name.startswith("exSDPAttention")]
    assert model.graph.constants[scaled.inputs[1]] == np.float32(32 ** -0.5)
    rk3588 = lower_rockchip(*_model("psa_attention_i8"))
    for grid in ("scores", "attn"):
        assert model.graph.quant[f"matmul_24_mm__{grid}"] == rk3588.graph.quant[f"matmul_24_mm__{grid}"]


@pytest.mark.parametrize("target, reg, change, match", [
    (TARGET_DPU, 0x4068, lambda v: v | 0x2 if v else v, r"BN multiplier 0x4068 is 0x5a821102"),
    (TARGET_CNA, 0x1058, lambda v: v + 1 if v > 1 << 15 else v, r"scores tasks \['\(None, "),
    (TARGET_CNA, 0x104C, lambda v: v & 0x0FFFFFFF if v & 0xF == 0x8 else v, r"scores tasks \['\(None, "),
])
def test_a_doctored_attention_register_is_refused(tmp_path, target, reg, change, match):
    _refused(tmp_path, patch_registers(target, {reg}, change), match, ATTENTION)


def test_a_gelu_runs_its_table_as_the_rk3588_twin_does():
    # ConvExGelu and the standalone exGelu: the lookup-table stage of the other tables (t3_lut_stage /
    # t3_lut_task); outputs and simulator outputs equal the rk3588 build's of the same model
    from corpus import corpus_arrays, inputs_of

    model = lower_rockchip(*_model("linear_gelu_rv1106_i8"))
    assert {"ConvExGelu", "exGelu"} <= set(model.vendor_ops)
    runs = []
    for stem in ("linear_gelu_rv1106_i8", "linear_gelu_i8"):
        arrays = corpus_arrays(stem)
        with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
            runs.append((ctx.run(inputs_of(arrays)), [arrays[f"out{k}"] for k in range(len(ctx.outputs))]))
    (ours, sim), (ours_twin, sim_twin) = runs
    for y, y_twin, ref, ref_twin in zip(ours, ours_twin, sim, sim_twin):
        assert np.array_equal(ref, ref_twin) and np.array_equal(y, y_twin)


SEGMENTER = "segmenter_ops_rv1106_i8"


def test_the_segmenter_families_read_their_parameter_tables():
    """The nodes other than convs keep a parameter table (slots 6 and 7 of an rv1106 node): a
    bilinear Resize's modes and an ArgMax's axis come from there, as the ONNX model has them."""
    sys.path.insert(0, str(REPO / "tools" / "vendor_corpus"))
    import models

    onnx_nodes = models.case_named("segmenter_ops").build().graph.node
    want = {n.op_type: {a.name: (a.s.decode() if a.s else a.i) for a in n.attribute}
            for n in onnx_nodes if n.op_type in ("Resize", "ArgMax")}
    model = lower_rockchip(*_model(SEGMENTER))
    got = {n.op: n.attrs for n in model.graph.nodes if n.op in ("Resize", "ArgMax")}
    assert got["Resize"]["mode"] == want["Resize"]["mode"] == "linear"
    assert got["Resize"]["coordinate_transformation_mode"] == want["Resize"].get("coordinate_transformation_mode",
                                                                                   "half_pixel")
    assert (got["ArgMax"]["axis"], got["ArgMax"]["keepdims"]) == (want["ArgMax"]["axis"],
                                                                  want["ArgMax"].get("keepdims", 1))


def _fake(op, params, inputs, outputs, shapes):
    from rknnlite.model.rknn_graph import t3nodes
    from rknnlite.model.rknn_graph.graph import VendorNode, VendorSubgraph, VendorTensor

    tensors = tuple(VendorTensor(i, f"t{i}", "int8", "NC1HWC2", "activation", (), shape)
                    for i, shape in enumerate(shapes))
    sg = VendorSubgraph(0, tensors, (), (), ())
    node = VendorNode(0, op, op, inputs, outputs, params=params, where="n")
    return t3nodes._Node(None, sg, node, lambda unit: {}, lambda: [])


def test_a_table_axis_the_shapes_contradict_is_refused():
    from rknnlite.model.rknn_graph import t3nodes

    n = _fake("Concat", {"axis": 1}, (0, 1), (2,), [(1, 3, 4, 4), (1, 5, 4, 4), (1, 8, 4, 4)])
    assert t3nodes._concat(n).recovered["axis"]["value"] == 1
    with pytest.raises(ModelInvalidError, match="parameter table's axis 2 is not axis 1"):
        t3nodes._concat(_fake("Concat", {"axis": 2}, (0, 1), (2,), [(1, 3, 4, 4), (1, 5, 4, 4), (1, 8, 4, 4)]))
    with pytest.raises(ModelInvalidError, match="parameter table's axis 0 is not axis 1"):
        t3nodes._split(_fake("Split", {"axis": 0, "split": [3, 5]}, (0,), (1, 2),
                             [(1, 8, 4, 4), (1, 3, 4, 4), (1, 5, 4, 4)]))


def test_an_argmax_takes_its_table_axis_and_refuses_other_fields():
    from rknnlite.model.rknn_graph import t3nodes

    node = t3nodes._argmax(_fake("ArgMax", {"axis": 1, "_slots": [0]}, (0,), (1,), [(1, 5, 4, 4), (1, 1, 4, 4)]))
    assert {k: v["value"] for k, v in node.recovered.items()} == {"axis": 1, "keepdims": 1, "select_last_index": 0}
    dropped = t3nodes._argmax(_fake("ArgMax", {"axis": 1, "_slots": [0]}, (0,), (1,), [(1, 5, 4, 4), (1, 4, 4)]))
    assert dropped.recovered["keepdims"]["value"] == 0
    with pytest.raises(ModelInvalidError, match=r"parameter-table fields \[0, 2\]"):
        t3nodes._argmax(_fake("ArgMax", {"axis": 1, "_slots": [0, 2]}, (0,), (1,), [(1, 5, 4, 4), (1, 1, 4, 4)]))


def test_a_transpose_takes_its_table_permutation_checked_against_its_shapes():
    from rknnlite.model.rknn_graph import t3nodes

    node = t3nodes._transpose(_fake("Transpose", {"perm": [2, 1, 0, 3]}, (0,), (1,), [(4, 16, 1, 9), (1, 16, 4, 9)]))
    assert node.recovered["perm"]["value"] == [2, 1, 0, 3]
    with pytest.raises(ModelInvalidError, match=r"permutation \[0, 1, 2, 3\] does not map \[4, 16, 1, 9\]"):
        t3nodes._transpose(_fake("Transpose", {"perm": [0, 1, 2, 3]}, (0,), (1,), [(4, 16, 1, 9), (1, 16, 4, 9)]))
    model = lower_rockchip(*_model("detector_ops_rv1106_i8_tk232"))
    assert [n.attrs["perm"] for n in model.graph.nodes if n.op == "Transpose"]


def test_an_expand_broadcasts_to_its_output_shape():
    from rknnlite.model.rknn_graph import t3nodes

    assert t3nodes._expand(_fake("Expand", {}, (0,), (1,), [(1, 1, 4, 1), (1, 8, 4, 6)])).recovered == {}
    with pytest.raises(ModelInvalidError, match=r"an Expand from \[1, 3, 4, 1\] to \[1, 8, 4, 6\]"):
        t3nodes._expand(_fake("Expand", {}, (0,), (1,), [(1, 3, 4, 1), (1, 8, 4, 6)]))
    model = lower_rockchip(*_model("detector_ops_rv1106_i8_tk230"))
    assert any(n.op == "Expand" for n in model.graph.nodes)


@pytest.mark.parametrize("stem, slopes", [
    ("conv_leaky_rv1106_i8", [0.1]),
    ("conv_abs_rv1106_i8", [-1.0]),  # Abs: a LeakyRelu of slope -1 (0xc000)
    ("depthwise_leaky_rv1106_i8", [0.1, 0.25]),
    # Abs, LeakyRelu(0.1) and LeakyRelu at ONNX's default 0.01, each a DPU-only task of its own
    ("standalone_leaky_rv1106_i8", [-1.0, 0.1, 0.01]),
    ("standalone_leaky_rv1103_i8_tk220", [-1.0, 0.1, 0.01]),
])
def test_leaky_relu_slopes_are_read_from_the_dpu_registers(stem, slopes):
    model = lower_rockchip(*_model(stem))
    assert [n.attrs["alpha"] for n in model.graph.nodes if n.op == "LeakyRelu"] == slopes


@pytest.mark.parametrize("stem", ["conv_leaky_rv1106_i8", "standalone_leaky_rv1106_i8"])
def test_a_leaky_slope_follows_its_register(tmp_path, stem):
    # 0x3333 / 2^14 = 0.79998..., read as the 0.8 it rounds from: nothing else in the file holds a slope
    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path,
                         patch_registers(TARGET_DPU, {0x4068}, lambda v: 0x33330000 if v else v))
    data = open(path, "rb").read()
    model = lower_rockchip(data, read_rockchip(data, label=stem))
    assert {n.attrs["alpha"] for n in model.graph.nodes if n.op == "LeakyRelu"} == {0.8}


@pytest.mark.parametrize("stem, reg, change, match", [
    ("conv_leaky_rv1106_i8", 0x4068, lambda v: v | 0x100,
     r"DPU register 0x4068 = 0x6660100 of an rv1106 LeakyRelu; its slope in the high half"),
    # the multipliers' shift 15 here, 14 in classifier_heads_rv110*, 16 in prelu_shift16_rv110*, 22 and 23
    # in truncated_convs_rv1106; 13 and 30 were never seen
    ("conv_leaky_rv1106_i8", 0x4054, lambda v: 0x8D000000,
     r"DPU register 0x4054 = 0x8d000000 in an rv1106 int8 LeakyRelu conv; only 0x8e000000 or 0x8f000000"),
    ("prelu_shift16_rv1106_i8", 0x4054, lambda v: 0x9E000000 if v == 0x90000000 else v,
     r"DPU register 0x4054 = 0x9e000000 in an rv1106 int8 PRelu conv; only 0x8e000000 or 0x8f000000 or "
     r"0x90000000"),
    ("conv_leaky_rv1106_i8", 0x4088, lambda v: 5,
     r"OUT_CVT shift 5 in an rv1106 int8 LeakyRelu conv, below the 14 fraction bits of its slope"),
    # the depthwise convs' (bit 31 clear) and not the plain ConvRelu's before them
    ("depthwise_leaky_rv1106_i8", 0x4054, lambda v: 0x0D000000 if v == 0x0E000000 else v,
     r"DPU register 0x4054 = 0xd000000 in an rv1106 int8 depthwise LeakyRelu conv; only 0xe000000 or 0xf000000"),
    # the LeakyRelu tasks' slope stage (the Concat's convs write 0x13)
    ("standalone_leaky_rv1106_i8", 0x4060, lambda v: 0x12 if v == 0x22 else v,
     r"DPU register 0x4060 = 0x12 in an rv1106 LeakyRelu task \(a slope stage\); only 0x22"),
])
def test_a_doctored_leaky_relu_register_is_refused_by_name(tmp_path, stem, reg, change, match):
    _refused(tmp_path, patch_registers(TARGET_DPU, {reg}, change), match, stem)


def test_ops_without_attributes_run_as_stored():
    # lookup-table ops (Tanh, Softplus, and ConvTanh a lookup-table conv), the CPU's Exp and Erf and
    # element-wise Max, Min and Sub: nothing of theirs is missing from an rv1106 graph; each output
    # meets the corpus bounds (test_vendor_validated)
    model = lower_rockchip(*_model("standalone_attr_free_rv1106_i8"))
    ops = [n.op for n in model.graph.nodes]
    assert set(model.vendor_ops) >= {"Tanh", "Softplus", "ConvTanh", "Exp", "Erf", "Max", "Min", "Sub"}
    assert ops.count("VendorLutActivation") == 3 and {"Exp", "Erf", "Max", "Min", "Sub"} <= set(ops)
    # Sqrt (a CPU op: no task) of a standalone Relu (random graph seed 77 of 2.5.0: refused before)
    model = lower_rockchip(*_model("standalone_sqrt_rv1106_i8"))
    assert {"Relu", "Sqrt"} <= set(model.vendor_ops) and {"Relu", "Sqrt"} <= {n.op for n in model.graph.nodes}


def test_an_op_with_attributes_in_no_tensor_is_not_run_as_stored():
    # an Elu's alpha is an ONNX attribute, in no rv1106 tensor: run with ONNX's defaults, such ops gave wrong
    # numbers (a standalone HardSigmoid(0.3, 0.4) read as (0.2, 0.5): 2 % of the values within one step; it
    # runs on its own table now: test_a_standalone_hardsigmoid_runs_on_the_files_own_table)
    assert t3_unsupported_ops(["Elu", "HardSigmoid"]) == ["Elu"]


def _clip_bounds(model):
    return [tuple(float(model.graph.constants[name]) for name in n.inputs[1:]) for n in model.graph.nodes
            if n.op == "Clip"]


@pytest.mark.parametrize("stem", ["standalone_clip_rv1106_i8", "standalone_clip_rv1103_i8_tk220"])
def test_clip_bounds_are_its_stored_constants(stem):
    # models._standalone_clips: Clip(-0.5, 1.5), (0, 6), (-1, 0), (min -0.5), (max 1.5), (0.25, 0.75) of a Concat
    # whose grid spans about [-9, 13]; an absent bound is stored as -+FLT_MAX (no clamp in the task); each output
    # equals the simulator's (test_vendor_validated)
    big = float(np.finfo(np.float32).max)
    assert _clip_bounds(lower_rockchip(*_model(stem))) == [(-0.5, 1.5), (0.0, 6.0), (-1.0, 0.0), (-0.5, big),
                                                         (-big, 1.5), (0.25, 0.75)]


def test_a_stored_clip_bound_its_clamp_contradicts_is_refused(tmp_path):
    # Clip(0, 6)'s lower clamp is the input code 13 (0x4018 = -13: the zero point); code 16 is 3 steps up
    _refused(tmp_path, patch_registers(TARGET_DPU, {0x4018}, lambda v: 0xFFFFFFF0 if v == 0xFFFFFFF3 else v),
             r"its stored lower bound 0.0 is 0 steps of its input's grid, where its task's clamp is 3",
             "standalone_clip_rv1106_i8")


def test_clip_clamps_are_decoded_one_side_at_a_time():
    from rknnlite.model.rknn_graph.t3conv import t3_standalone_clip

    def regs(low, high, again=None, cfg=0x13):
        return {(TARGET_DPU, 0x4060): cfg, (TARGET_DPU, 0x4018): low, (TARGET_DPU, 0x401C): high,
                (TARGET_DPU, 0x40DC): high if again is None else again}

    # the lower clamp is a negated input code, the upper one counts steps from the zero point
    assert t3_standalone_clip(regs(0x13, 0x10), -14, "n") == (-5, 16)
    assert t3_standalone_clip(regs(0x53, 0xFFFFFFF5), -57, "n") == (-26, -11)
    assert t3_standalone_clip(regs(0x80000000, 0x7FFFFFFF), 3, "n") == (None, None)
    with pytest.raises(ModelInvalidError, match=r"upper clamps 0x401c = 0x10 and 0x40dc = 0x11 of an rv1106 Clip"):
        t3_standalone_clip(regs(0x13, 0x10, again=0x11), -14, "n")
    with pytest.raises(ModelInvalidError, match=r"DPU register 0x4060 = 0x12 in an rv1106 Clip task"):
        t3_standalone_clip(regs(0x13, 0x10, cfg=0x12), -14, "n")


@pytest.mark.parametrize("stem", ["detector_ops_rv1106_i8", "psa_attention_nope_rv1106_i8", "c2f_rv1103_i8_tk220",
                                  "split_unused_rv1106_i8"])
def test_shape_constants_are_stored_at_their_offsets(stem):
    # each in 64 bytes of the weight section: a Reshape's target is its output's shape, a Split's sizes its
    # table's (whose parts the shapes check)
    data, rk = _model(stem)
    vf = read_vendor_graph(data, rk.graph_offset, rk.graph_size, stem, rk.schema, rk.packed)
    sg = vf.subgraphs[0]
    checked = 0
    for node in sg.nodes:
        shapes = [sg.tensor(i, "") for i in node.inputs if sg.tensor(i, "").kind == "shape"]
        if node.op == "Reshape":
            (target,) = shapes
            stored = np.frombuffer(bytes(vf.tensor_data(sg, target))[:8 * target.shape[0]], "<i8")
            assert stored.tolist() == list(sg.tensor(node.outputs[0], "").shape)
            checked += 1
        elif node.op == "Split":
            (sizes,) = shapes
            stored = np.frombuffer(bytes(vf.tensor_data(sg, sizes))[:8 * sizes.shape[0]], "<i8")
            assert stored.tolist() == node.params["split"]
            checked += 1
    assert checked


def test_slices_and_prelu_slopes_are_their_stored_constants():
    # models._slices: starts, ends, axes and steps (the lowering checks them against the output's shape)
    model = lower_rockchip(*_model("slices_rv1106_i8"))
    slices = [[model.graph.constants[name].tolist() for name in n.inputs[1:]] for n in model.graph.nodes
              if n.op == "Slice"]
    assert slices == [[[1], [7], [2], [1]], [[0, 1], [8, 8], [2, 3], [2, 2]], [[2], [14], [1], [1]],
                      [[1, 0], [8, 5], [3, 2], [2, 1]]]
    # a PRelu's slopes 0.05..0.8 as int16 codes over 2^14 (the compiler truncates: 0.15 is 2457), one slope 0.2
    # as one float32; the ConvPRelus' 0.05..0.4 and 0.15
    model = lower_rockchip(*_model("standalone_prelu_rv1106_i8"))
    one, each, conv_each, conv_one = (model.graph.constants[n.inputs[1]].ravel() for n in model.graph.nodes
                                      if n.op == "PRelu")
    assert np.array_equal(each, np.trunc(np.arange(1, 17) * 0.05 * 2 ** 14 + 1e-6) / 2 ** 14)
    assert np.array_equal(conv_each, each[:8])
    assert one.tolist() == [np.float32(0.2)] * 16 and conv_one.tolist() == [np.float32(0.15)] * 8


def test_conv_prelu_slopes_are_the_stored_ones_the_register_names():
    # depthwise_prelu: a depthwise ConvPRelu (slopes 0.05..0.4 read from memory: BN_MUL 1) and a 1x1 ConvPRelu of
    # one slope 0.2 (in BN_MUL, rk3588's LeakyRelu form; its 0x4054 multiplier shift 14, the depthwise one's 15)
    model = lower_rockchip(*_model("depthwise_prelu_rv1106_i8"))
    slopes = [model.graph.constants[n.inputs[1]].ravel() for n in model.graph.nodes if n.op == "PRelu"]
    assert np.array_equal(slopes[0], np.float32(np.trunc(np.linspace(0.05, 0.4, 8) * 2 ** 14 + 1e-6) / 2 ** 14))
    assert slopes[1].tolist() == [np.float32(0.2)] * 8


@pytest.mark.parametrize("reg, change, match", [
    # the depthwise conv's per-channel flag made one slope 0.8
    (0x4068, lambda v: 0x33330000 if v == 1 else v,
     r"an rv1106 int8 ConvPRelu whose BN_MUL gives one slope 0.79998779296875, where its stored slopes are \[0.04998"),
    (0x4054, lambda v: 0x0D000000 if v == 0x0F000000 else v,
     r"DPU register 0x4054 = 0xd000000 in an rv1106 int8 depthwise PRelu conv; only 0xe000000 or 0xf000000"),
])
def test_a_doctored_conv_prelu_register_is_refused_by_name(tmp_path, reg, change, match):
    _refused(tmp_path, patch_registers(TARGET_DPU, {reg}, change), match, "depthwise_prelu_rv1106_i8")


def test_stored_constants_are_checked_against_what_the_node_does(tmp_path):
    def store(name, values, dtype):
        def patch(data):
            raw = np.array(values, dtype).tobytes()
            tensor_bytes(data, name)[:len(raw)] = raw
        return patch

    # a ReduceMax over the channels whose stored axes say the rows
    _refused(tmp_path, store("ReduceMax12_axes", [2], "<i8"),
             r"a ReduceMax of \[1, 16, 8, 8\] over its stored axes \[2\] \(keepdims 1\); its output is \[1, 1, 8, 8\]",
             "standalone_reduce_rv1106_i8")
    # Pad (1, 2, 2, 1) whose stored pads say (2, 1, 1, 2)
    _refused(tmp_path, store("c11", [0, 0, 2, 1, 0, 0, 1, 2], "<i8"),
             r"stored pads \[0, 0, 2, 1, 0, 0, 1, 2\], where its tasks pad \[0, 0, 1, 2, 0, 0, 2, 1\]",
             "pad_constant_rv1106_i8")
    # Clip(-0.5, 1.5) whose stored lower bound says -1.5
    _refused(tmp_path, store("c11", [-1.5], "<f4"), r"its stored lower bound -1.5 is -\d+.\d+ steps of its input's "
             r"grid, where its task's clamp is -\d+", "standalone_clip_rv1106_i8")


def test_a_resize_on_the_cpu_runs_from_its_stored_sizes_or_scales(tmp_path):
    # models._cpu_resizes: linear to 5x3 (sizes) and by 1.5 (scales): no NPU task, the constants as stored
    model = lower_rockchip(*_model("cpu_resize_rv1106_i8"))
    resizes = [[model.graph.constants[i].tolist() for i in n.inputs[1:] if i] for n in model.graph.nodes
               if n.op == "Resize"]
    assert resizes == [[[1, 16, 5, 3]], [[1.0, 1.0, 1.5, 1.5]]]

    def sizes(data):  # the first Resize's sizes constant, "c11"
        tensor_bytes(data, "c11")[:32] = np.array([1, 16, 4, 3], "<i8").tobytes()

    _refused(tmp_path, sizes, r"sizes \[1, 16, 4, 3\] of a rank-4 input are not the output shape \[1, 16, 5, 3\]",
             "cpu_resize_rv1106_i8")


@pytest.mark.parametrize("stem", ["avgpool_rv1106_i8", "avgpool_rv1103_i8_tk220"])
def test_an_average_pool_is_read_from_its_ppu_registers(stem):
    # AveragePool 2x2 s2 (PPU mode 0x10, reciprocals 2^16 / 2): its output equals the simulator's
    model = lower_rockchip(*_model(stem))
    (pool,) = [n for n in model.graph.nodes if n.op == "AveragePool"]
    assert (pool.attrs["kernel_shape"], pool.attrs["strides"], pool.attrs["pads"]) == ([2, 2], [2, 2], [0, 0, 0, 0])


POOLS = "padded_pools_rv1106_i8"


def test_padded_and_tiled_pools_are_read_from_every_ppu_task():
    # padded AveragePools divide by the whole kernel (count_include_pad); a map wider than one PPU task
    # takes is split into column tiles, each padding its own edges (the map's: per side, the largest)
    model = lower_rockchip(*_model(POOLS))
    pools = [(n.op, n.attrs["kernel_shape"][0], n.attrs["strides"][0], n.attrs["pads"], n.attrs.get("count_include_pad"))
             for n in model.graph.nodes if n.op in ("AveragePool", "MaxPool")]
    assert pools == [("AveragePool", 3, 2, [1, 1, 0, 0], 1), ("AveragePool", 5, 1, [2, 2, 2, 2], 1),
                     ("AveragePool", 2, 1, [1, 1, 0, 0], 1), ("AveragePool", 3, 3, [1, 1, 0, 0], 1),
                     ("AveragePool", 5, 1, [0, 0, 0, 0], None), ("MaxPool", 3, 1, [1, 1, 1, 1], None)]


@pytest.mark.parametrize("reg, change, match", [
    # a one-task pool claiming columns left to other tasks, and a column tile claiming one more
    (0x6024, lambda v: v + 0x10000 if v >> 16 == 0 else v,
     r"OPERATION_MODE_CFG \(0x6024\) = 0x10010 on a AveragePool whose task writes 24 of 24 output columns; only "
     r"0x10 with the columns left to the other tasks in bits 16..27 \(0 here\)"),
    (0x6024, lambda v: v + 0x10000 if v >> 16 else v, r"= 0x[0-9a-f]+0010 on a AveragePool whose task writes \d+ of 48"),
    # padding that is not a real 0: one more than the input's zero point
    (0x6044, lambda v: v + 1, r"a padded AveragePool whose padding values \(PPU 0x6044..0x6050\) are \[-?\d+, "),
    # pads at the end beyond those at the start: a ceil_mode window past the edge, or ONNX pads of that shape
    (0x6040, lambda v: 0x1100 if v == 0x11 else v,
     r"an AveragePool 3x3 whose registers pad \(0, 0, 1, 1\) more at the end than at the start"),
    (0x6038, lambda v: v + 1, r"an AveragePool 3x3 with reciprocals \['0x5556', '0x5555'\]; only 2\^16 / kernel"),
])
def test_a_doctored_pool_register_is_refused_by_name(tmp_path, reg, change, match):
    _refused(tmp_path, patch_registers(0x4001, {reg}, change), match, POOLS)


def test_a_pool_the_compiler_ran_on_the_cpu_is_refused_by_name():
    # an AveragePool excluding its pads from the divisor has no task, and no attribute anywhere
    from rknnlite.model.rknn_graph.t3pool import t3_pool_params

    with pytest.raises(ModelInvalidError, match=r"pool: no NPU task with the PPU enabled runs this AveragePool: the "
                                                r"compiler ran it on the CPU"):
        t3_pool_params([], "AveragePool", (1, 8, 8, 8), (1, 8, 8, 8), 0, "pool")


def _operands(model) -> list:
    return [[np.ravel(model.graph.constants[i]).tolist() for i in n.inputs if i in model.graph.constants]
            for n in model.graph.nodes if n.op in ("Mul", "Add", "Sub")]


def test_an_older_release_constant_recorded_without_size_is_read_at_its_offset(tmp_path):
    # Mul(1.28, y), Add(c, y), Sub(c, y), Sub(0.5, y): RKNN-Toolkit2 2.3.0 records a first operand with
    # size 0 and packs its bytes unpadded at its offset; 2.5.0 stores 64 bytes each: the same values
    older, newer = (lower_rockchip(*_model(f"constants_first_rv1106_i8{suffix}")) for suffix in ("_tk230", ""))
    assert _operands(older) == _operands(newer)
    assert _operands(older)[0] == [[pytest.approx(1.28, abs=1e-4)]] and len(_operands(older)[1][0]) == 8

    def overlap(data):  # the Sub's operand moved inside the 32 bytes of the Add's
        t = tensor_table(data, "c6")
        struct.pack_into("<I", data, t.field_pos(T3.t_offset), t.u32(T3.t_offset) - 16)

    _refused(tmp_path, overlap, r"tensor \d+ \('c5'\) is recorded with 0 bytes; the 32 bytes it needs at offset 448 of "
             r"the weights section would run into 'c6'", "constants_first_rv1106_i8_tk230")


def test_a_pow_is_its_input_multiplied_by_itself(tmp_path):
    # standalone_pow: a DPU-only product of the input by itself, the exponent a stored float32 2
    model = lower_rockchip(*_model("standalone_pow_rv1106_i8"))
    (pow_node,) = [n for n in model.graph.nodes if n.op == "Pow"]
    assert model.graph.constants[pow_node.inputs[1]].tolist() == [2.0]
    product = 0x81004094  # EW_CFG of a product of two activations (sigmoid_mul_rv110*)
    _refused(tmp_path, patch_registers(TARGET_DPU, {0x4070}, lambda v: v ^ 1 if v == product else v),
             r"a Pow of 'concat_9' whose task writes EW_CFG \(0x4070\) = 0x81004095", "standalone_pow_rv1106_i8")
    _refused(tmp_path, patch_registers(TARGET_RDMA, {0x5038}, lambda v: v + 0x40 if v else v),
             r"reads its operand at 0x[0-9a-f]+, its input at 0x[0-9a-f]+; only the input multiplied by itself",
             "standalone_pow_rv1106_i8")

    def cube(data):
        tensor_bytes(data, "c11")[:4] = np.array([3.0], "<f4").tobytes()

    _refused(tmp_path, cube, r"a Pow with exponent 3.0; only the square", "standalone_pow_rv1106_i8")


def test_a_standalone_hardsigmoid_runs_on_the_files_own_table():
    # no alpha or beta anywhere in the file: its lookup table, as the NPU reads it
    model = lower_rockchip(*_model("standalone_hardsigmoid_rv1106_i8"))
    assert [n.op for n in model.graph.nodes].count("VendorLutActivation") == 2
    assert "HardSigmoid" not in [n.op for n in model.graph.nodes]


def test_a_gather_takes_the_one_axis_its_shapes_allow():
    # RKNN-Toolkit2 2.3.0's pooled channel shuffle: [24, 1, 1, 1] gathered by 24 indices on axis 0
    model = lower_rockchip(*_model("pooled_shuffle_rv1106_i8_tk230"))
    assert [n.attrs["axis"] for n in model.graph.nodes if n.op == "Gather"] == [0]
    from rknnlite.model.rknn_graph import t3nodes

    def node(data_shape, ids_shape, out_shape):
        tensors = {0: type("T", (), {"kind": "activation", "shape": data_shape, "name": "x"})(),
                   1: type("T", (), {"kind": "shape", "shape": ids_shape, "name": "i"})(),
                   2: type("T", (), {"kind": "activation", "shape": out_shape, "name": "y"})()}

        class Node(t3nodes._Node):
            def __init__(self):
                self.node = VendorNode(4, "Gather", "g", (0, 1), (2,), 0, {}, where="g")
                self.sg = type("S", (), {"tensor": lambda _, i, where: tensors[i]})()

            def activations(self):
                return [tensors[0]]

        return Node()

    assert t3nodes._gather(node((24, 1, 1, 1), (24,), (24, 1, 1, 1))) is not None
    with pytest.raises(ModelInvalidError, match=r"a Gather of \[4, 4\] by \[4\] indices into \[4, 4\]: axes \[0, 1\]"):
        t3nodes._gather(node((4, 4), (4,), (4, 4)))


def test_a_pad_the_compiler_runs_on_the_cpu_is_refused_by_name():
    # RKNN-Toolkit2 2.3.0 runs a constant Pad of a graph input on the CPU: no task tells its mode
    from rknnlite.model.rknn_graph import t3nodes

    class Node(t3nodes._Node):
        def __init__(self):
            self.node = type("N", (), {"where": "p", "index": 1, "inputs": (0, 1, 2), "outputs": (3,)})()
            self.tasks = lambda: []

    with pytest.raises(ModelInvalidError, match=r"a Pad the compiler runs on the CPU \(no NPU task.*its mode is "
                                                r"stored nowhere"):
        t3nodes._pad(Node())


def test_a_deconv_of_the_image_input_is_read_from_its_registers(tmp_path):
    # ConvTranspose 3->8 k3 s2 p1 output padding 1 on the RGB input: CONV_CON1 0x2000a000 (the image
    # fetch), its weight tiles ending on 64 bytes, its multiplier stage in the depthwise form
    model = lower_rockchip(*_model("deconv_input_rv1106_i8"))
    (deconv,) = [n for n in model.graph.nodes if n.op == "ConvTranspose"]
    # ONNX's end pads 1 and output padding 1 only size the output: the fewest that give it (deconv_regs)
    assert (deconv.attrs["strides"], deconv.attrs["pads"], deconv.attrs["output_padding"]) == \
        ([2, 2], [1, 1, 0, 0], [0, 0])
    _refused(tmp_path, patch_registers(TARGET_DPU, {0x4054}, lambda v: v | 0x80000000),
             r"DPU register 0x4054 = 0x8e000000 in an rv1106 int8 image-input transposed conv; only 0xe000000 was observed",
             "deconv_input_rv1106_i8")


def test_a_deconv_from_one_channel_takes_its_weight_zero_point_from_its_tiles_spare_lanes(tmp_path):
    # three ConvTransposes 1->1 after a 1->1 conv: conv mode 3 (CONV_CON1 3, 0x1038's low field 1), a plain
    # int32 bias and no multiplier stage, as the compiler's depthwise input conv; the weight zero point in
    # the 15 spare input lanes of each tap's 16-byte row (refused as an unknown CONV_CON1 before; random graph
    # seed 11)
    stem = "deconv_one_channel_rv1106_i8"
    model = lower_rockchip(*_model(stem))
    deconvs = [n for n in model.graph.nodes if n.op == "ConvTranspose"]
    assert [(n.attrs["kernel_shape"], n.attrs["strides"], n.attrs["pads"]) for n in deconvs] == \
        [([4, 4], [1, 1], [1, 1, 1, 1]), ([4, 4], [2, 2], [1, 1, 1, 1]), ([3, 3], [2, 2], [0, 0, 0, 0])]
    data = bytearray((CORPUS / f"{stem}.rknn").read_bytes())
    rows = np.frombuffer(tensor_bytes(data, "w05"), np.int8)[:16 * 16].reshape(16, 16)  # the first deconv's taps
    zero_point = int(rows[0, 1])
    assert zero_point != 0 and np.all(rows[:, 1:] == zero_point)
    weight = model.graph.constants[deconvs[0].inputs[1]]  # the integer weight, flipped: q - zp
    assert sorted(weight.ravel().tolist()) == sorted((rows[:, 0].astype(int) - zero_point).tolist())

    def lane(data):
        tensor_bytes(data, "w05")[1] = (zero_point + 1) & 0xFF

    (tmp_path / "lane").mkdir()
    _refused(tmp_path / "lane", lane, r"spare input lanes of weight tile \(1, 1, 4, 4, 1, 16\) hold", stem)
    (tmp_path / "dpu").mkdir()  # bias blocks where the mode-3 form has a plain bias
    _refused(tmp_path / "dpu", patch_registers(TARGET_DPU, {0x4050}, lambda v, n: 0x30000001 if n == 1 else v,
                                               indexed=True),
             r"DPU register 0x4050 = 0x30000001 in an rv1106 int8 input depthwise conv", stem)


def test_a_conv_clip_below_zero_clips_where_its_output_grid_starts(tmp_path):
    # Clip(-0.5, 1), (-1, 2), (-0.1, 0.6), (-1.5, 0.5) and (0, 1) after five convs: BN_CFG 0x20010 but for
    # the last (0x12), the clamps a Clip from 0's and the lower bound truncated in 0x4064 (negated in
    # 0x4018); the output grids start at the bounds (refused as an unknown BN_CFG before; 7 of 60 random
    # graphs of RKNN-Toolkit2 2.5.0)
    stem = "clip_below_zero_rv1106_i8"
    model = lower_rockchip(*_model(stem))
    requants = [n for n in model.graph.nodes if n.op == "VendorRequant"]
    # each Clip's bounds are its output grid's ends: the lower from the grid, the upper from the clamp
    assert [(n.attrs["qmin"], n.attrs["qmax"]) for n in requants] == [(-128, 127)] * 5
    (tmp_path / "above").mkdir()  # the Clip from 0 on a grid from 0, read as a lower bound other than 0
    _refused(tmp_path / "above", patch_registers(TARGET_DPU, {0x4060}, lambda v: 0x20010 if v == 0x12 else v),
             r"BN_CFG 0x20010 \(a lower bound other than 0, truncated to 0\) whose output grid starts at 0: only a "
             r"bound below 0", stem)
    (tmp_path / "negated").mkdir()
    _refused(tmp_path / "negated", patch_registers(TARGET_DPU, {0x4018}, lambda v: 2 if v == 1 else v),
             r"DPU registers 0x4064 = -1 and 0x4018 = 2 of an rv1106 int8 ConvClip", stem)


def test_a_softmax_sums_its_axis_in_blocks_of_16_rows(tmp_path):
    # Softmax over the width (40 values: reduce-sum blocks of 14, 13 and 13 rows; 20: 10 and 10), over 48
    # channels (3 blocks of 16) and over the width of a HardSigmoid's output: the parameter table's axis,
    # checked against the reduce-sum weight (refused before: axis 3, more than 16 values)
    stem = "softmax_axes_rv1106_i8"
    model = lower_rockchip(*_model(stem))
    assert [n.attrs["axis"] for n in model.graph.nodes if n.op == "Softmax"] == [3, 3, 1, 3]

    def drop_one(data):  # the last of the 40 width values' ones: row 12 of the third block
        view = np.frombuffer(tensor_bytes(data, "conv_9__float16_rs_weight"), "<f2").reshape(16, 48)
        assert view[12, 32] == 1 and view[13, 32] == 0
        tensor_bytes(data, "conv_9__float16_rs_weight")[(12 * 48 + 32) * 2:(12 * 48 + 33) * 2] = b"\0\0"

    _refused(tmp_path, drop_one, r"an exSoftmax13 over 40 values of axis 3 whose reduce-sum weight "
             r"'conv_9__float16_rs_weight' \(float16, \[16, 48, 1, 1\]\) is not .* the first 14, 13, 13 rows", stem)


def test_a_pad_whose_input_lies_in_its_map_s_addresses_copies_it_whole(tmp_path):
    # a batch of two, reflect: the second input copy's source is inside the output map's addresses (the
    # buffers overlap); a copy of the input's size reads the input (refused before: "input copies to
    # (batch, row, column) [(0, 2, 1)]")
    model = lower_rockchip(*_model("pad_batch_overlap_rv1106_i8"))
    (pad,) = [n for n in model.graph.nodes if n.op == "Pad"]
    assert (pad.attrs["mode"], list(model.graph.constants[pad.inputs[1]])) == ("reflect", [0, 0, 2, 1, 0, 0, 0, 2])


def test_a_prelu_conv_takes_the_multipliers_shift_the_compiler_wrote():
    # 0x4054 bits 24..29: 16 on a 7x7 ConvPRelu of 3136 inputs (random graph 126 of 2.5.0: refused before,
    # as only 14 and 15 had been seen); the file equals the simulator (test_vendor_validated)
    stem = "prelu_shift16_rv1106_i8"
    data = (CORPUS / f"{stem}.rknn").read_bytes()
    view = tensor_bytes(bytearray(data), "regcmd")
    writes = {struct.unpack_from("<Q", view, at)[0] for at in range(0, len(view) - 7, 8)}
    assert (TARGET_DPU << 48 | (0x80000000 | 16 << 24) << 16 | 0x4054) in writes
    model = lower_rockchip(data, read_rockchip(data, label=stem))
    assert "ConvPRelu" in model.vendor_ops


def test_a_depthwise_1x1_conv_of_stride_2_sets_the_plain_ones_bit_29(tmp_path):
    # CONV_CON1 0x20000007: conv mode 7 with bit 29, as a plain 1x1 conv of stride 2 (random graph 154 of
    # 2.5.0: refused before as an unknown CONV_CON1)
    stem = "depthwise_stride2_rv1106_i8"
    model = lower_rockchip(*_model(stem))
    convs = [(n.attrs["group"], n.attrs["strides"], n.attrs["kernel_shape"]) for n in model.graph.nodes
             if n.op == "Conv" and n.attrs.get("group", 1) > 1]
    assert (8, [2, 2], [1, 1]) in convs
    _refused(tmp_path, patch_registers(TARGET_CNA, {0x100C}, lambda v: 0x20000006 if v == 0x20000007 else v),
             r"CNA_CONV_CON1 \(0x100c\) = 0x20000006: only plain convs .* and depthwise ones \(0x7, 0x20000007",
             stem)


def test_batch_norms_run_from_their_stored_folded_constants(tmp_path):
    # affine_ops: Mul + Add (a BatchNormalization) and BatchNormalization + Relu, in the compiler's folded form
    model = lower_rockchip(*_model("affine_ops_rv1106_i8"))
    affines = [n.attrs.get("_activation") for n in model.graph.nodes if n.op == "ChannelAffine"]
    assert affines == [None, "Relu"]

    def mean(data):  # the first one's stored mean, 0 in the folded form
        tensor_bytes(data, "Mul12_2bn_i3")[:4] = np.array([5], "<i4").tobytes()

    _refused(tmp_path, mean, r"mean \[5, 0, 0, 0\]\.\.\., variance \[1, 1, 1, 1\]\.\.\., epsilon 0.0; only the "
             r"compiler's folded form", "affine_ops_rv1106_i8")


# -- Pads (.t3pad) ---------------------------------------------------------------------------------------

_RDMA = 0x2001


def _pad_task(cfg, at, w, h, code=None, src=None, stride=0x7C0):
    regs = {(TARGET_DPU, 0x4060): cfg, (TARGET_DPU, 0x4020): at, (TARGET_DPU, 0x405C): (h - 1) << 16 | (w - 1),
            (TARGET_DPU, 0x4024): stride}
    if code is not None:
        regs[(TARGET_DPU, 0x4064)] = code & 0xFFFFFFFF
    if src is not None:
        regs[(_RDMA, 0x5018)] = src
    return regs


def _pad_states(*tasks):
    states, state = [], {}
    for regs in tasks:
        state.update(regs)
        states.append(dict(state))
    return states


#: probes reflect_2 and edge_2 (RKNN-Toolkit2 2.5.0, rv1106): Pads (top 2, left 1, bottom 1, right 2) of
#: an 8x8 map of 16 channels (176 bytes a row, the map at 0x2c00): the input copied in, the rows copied
#: (top, then bottom), then the columns over the whole height; (destination, source) per copy
_COPIES = {"reflect": [(0x2C00, 0x2EC0), (0x2CB0, 0x2E10), (0x32E0, 0x3180), (0x2C00, 0x2C20), (0x2C90, 0x2C70),
                       (0x2CA0, 0x2C60)],
           "edge": [(0x2C00, 0x2D60), (0x2CB0, 0x2D60), (0x32E0, 0x3230), (0x2C00, 0x2C10), (0x2C90, 0x2C80),
                    (0x2CA0, 0x2C80)]}


def _mode_states(mode, change=None):
    copies = [(to, frm, 11, 1) for to, frm in _COPIES[mode][:3]] + [(to, frm, 1, 11) for to, frm in _COPIES[mode][3:]]
    if change:
        copies = change(copies)
    return _pad_states(_pad_task(0x13, 0x2D70, 8, 8, src=0x3580),
                       *(_pad_task(0x13, to, w, h, src=frm) for to, frm, w, h in copies))


def test_a_pad_is_read_from_what_its_copies_and_fills_do():
    from rknnlite.model.rknn_graph.t3pad import t3_pad

    # probe pa: Pad (top 1, left 2, bottom 2, right 1) of 0 (zero point -14): the copy, then the fills (the
    # column fills inherit BN_CFG and BN_ADD)
    columns = [{(TARGET_DPU, 0x4020): at, (TARGET_DPU, 0x405C): size} for at, size in ((0x2C30, 0x70001),
                                                                                      (0x2CD0, 0x70000))]
    pa = _pad_states(_pad_task(0x13, 0x2C50, 8, 8, src=0x3580), _pad_task(0x20010, 0x2B80, 11, 1, -14),
                     _pad_task(0x20010, 0x31B0, 11, 2, -14), *columns)
    assert t3_pad(pa, (1, 16, 8, 8), (1, 16, 11, 11), "n") == ("constant", [0, 0, 1, 2, 0, 0, 2, 1], -14)
    # a bottom and right pad alone (TensorFlow's SAME padding)
    states = _pad_states(_pad_task(0x13, 0x2980, 8, 8, src=0x3000), _pad_task(0x20010, 0x2E00, 9, 1, -14),
                         {(TARGET_DPU, 0x4020): 0x2A00, (TARGET_DPU, 0x405C): 0x70000})
    assert t3_pad(states, (1, 16, 8, 8), (1, 16, 9, 9), "n") == ("constant", [0, 0, 0, 0, 0, 0, 1, 1], -14)
    # reflect and edge: the same tasks, the rows and columns copied from one further in for reflect
    for mode in ("reflect", "edge"):
        assert t3_pad(_mode_states(mode), (1, 16, 8, 8), (1, 16, 11, 11), "n") == (mode, [0, 0, 2, 1, 0, 0, 1, 2],
                                                                                   None)


@pytest.mark.parametrize("change, match", [
    # the right column copied from one column too far in: neither reflect nor edge
    (lambda c: c[:5] + [(0x2CA0, 0x2C50, 1, 11)], r"copies and fills whose result no constant, reflect or edge Pad "
                                                  r"of pads \[0, 0, 2, 1, 0, 0, 1, 2\] gives"),
    # the last column never copied
    (lambda c: c[:5], r"no task writes pixel \(batch 0, row 0, column 10\) of the 11x11 map"),
    # a row copy one row past the map's end
    (lambda c: c[:2] + [(0x3390, 0x3180, 11, 1)] + c[3:], r"a 11x1 box at 0x3390, outside the 11x11 map at 0x2c00"),
    # a second input copy (from outside the map) for a batch of one
    (lambda c: c + [(0x2D70, 0x4000, 8, 8)], r"a copy of 8x8 pixels from 0x4000 \(outside the map\) into it, the "
                                             r"2th; one copy of each of the 1 8x8 inputs"),
])
def test_a_pad_whose_tasks_give_no_mode_is_refused(change, match):
    from rknnlite.model.rknn_graph.t3pad import t3_pad

    with pytest.raises(ModelInvalidError, match=match):
        t3_pad(_mode_states("reflect", change), (1, 16, 8, 8), (1, 16, 11, 11), "n")
    with pytest.raises(ModelInvalidError, match=r"tasks of BN_CFG \['0x13', '0x12'"):
        t3_pad(_pad_states(_pad_task(0x13, 0x2D70, 8, 8, src=0x3580), _pad_task(0x12, 0x2C00, 11, 1, src=0x2EC0)),
               (1, 16, 8, 8), (1, 16, 11, 11), "n")


@pytest.mark.parametrize("stem", ["input_depthwise_rv1106_i8", "input_depthwise_rv1103_i8_tk220"])
def test_the_compilers_depthwise_conv_on_an_input_is_read(stem):
    # models._input_depthwise: inputs of 16 and 8 channels whose first op is a Pad: the compiler moves each into
    # the NPU layout with a depthwise 1x1 conv of its own (CONV_CON1 3), ones in its tiles, a plain int32 bias
    model = lower_rockchip(*_model(stem))
    convs = [n for n in model.graph.nodes if n.op == "Conv" and n.attrs["group"] > 1]
    assert sorted(n.attrs["group"] for n in convs) == [8, 16]
    assert all(np.all(model.graph.constants[n.inputs[1]] == 1) for n in convs)


@pytest.mark.parametrize("target, reg, change, match", [
    (TARGET_DPU, 0x4054, lambda v: 0x1 if v == 0 else v,
     r"DPU register 0x4054 = 0x1 in an rv1106 int8 input depthwise conv; only 0x0"),
    (TARGET_CNA, 0x1038, lambda v: v + 1 if v & 0xFFFF == 1 else v,
     r"register 0x1038 = 0x1010002 is not the weight's kernel 1x1 and 1 \(depthwise\)"),
])
def test_a_doctored_input_depthwise_conv_is_refused_by_name(tmp_path, target, reg, change, match):
    _refused(tmp_path, patch_registers(target, {reg}, change), match, "input_depthwise_rv1106_i8")


@pytest.mark.parametrize("stem", ["pad_modes_rv1106_i8", "pad_modes_rv1103_i8_tk220"])
def test_reflect_and_edge_pads_run_with_their_modes(stem):
    # models._pad_modes: a batch of two 6x6 maps of 20 channels (two surfaces); each output meets the
    # corpus bounds (test_vendor_validated)
    model = lower_rockchip(*_model(stem))
    pads = [(n.attrs["mode"], model.graph.constants[n.inputs[1]].tolist()) for n in model.graph.nodes if n.op == "Pad"]
    assert pads == [("reflect", [0, 0, 1, 2, 0, 0, 2, 1]), ("edge", [0, 0, 2, 0, 0, 0, 1, 1]),
                    ("reflect", [0, 0, 0, 1, 0, 0, 0, 1]), ("edge", [0, 0, 1, 0, 0, 0, 0, 0])]


@pytest.mark.parametrize("reg, change, match", [
    # the fills of a Pad of 0 write the zero point 13: another code is another value
    (0x4064, lambda v: 16 if v == 13 else v,
     r"its stored value 0.0 fills code 13 \(truncated, as the compiler computes it\), where its tasks fill 16"),
    # its one-row top fill made two rows, over the input's first
    (0x405C, lambda v: 0x1000A if v == 0xA else v, r"copies and fills whose result no constant, reflect or edge Pad"),
])
def test_a_doctored_pad_task_is_refused_by_name(tmp_path, reg, change, match):
    _refused(tmp_path, patch_registers(TARGET_DPU, {reg}, change), match, "pad_constant_rv1106_i8")


def test_dilations_are_read_from_con3():
    # corpus dilated_rv1106 (models._dilated_convs): dilations less one in CONV_CON3 bits 16..20 (x) and
    # 21..25 (y); the end pads the fewest that give the output size, as without dilation
    model = lower_rockchip(*_model("dilated_rv1106_i8"))
    convs = [n.attrs for n in model.graph.nodes if n.op == "Conv"][1:]
    assert [(a["dilations"], a["strides"], a["pads"]) for a in convs] == [
        ([2, 2], [1, 1], [2, 2, 2, 2]), ([1, 3], [1, 1], [1, 3, 1, 3]), ([2, 2], [2, 2], [2, 2, 1, 1]),
        ([3, 2], [1, 2], [3, 2, 3, 1])]


@pytest.mark.parametrize("stem, channels", [("image_channels1_rv1106_i8", 1), ("image_channels2_rv1106_i8", 2),
                                            ("image_channels4_rv1106_i8", 4), ("conv_pads_rv1106_i8", 3)])
def test_a_conv_on_the_image_fetches_its_channel_count(tmp_path, stem, channels):
    # CONV_CON1 0x20008000 | (channels - 1) << 12; another count than the input's is refused
    fetch = 0x20008000 | (channels - 1) << 12
    other = fetch ^ 0x1000
    _refused(tmp_path, patch_registers(TARGET_CNA, {0x100C}, lambda v: other if v == fetch else v),
             f"CNA_CONV_CON1 \\(0x100c\\) = {other:#x} fetches an image of {(other >> 12 & 3) + 1} channels; the "
             f"conv's input has {channels}", stem)


@pytest.mark.parametrize("stem", ["image_channels1_sigmoid_rv1106_i8", "image_channels3_sigmoid_rv1106_i8"])
def test_the_compiler_s_input_conv_writes_four_lanes(tmp_path, stem):
    # a Sigmoid first: the compiler applies mean/std in a 1x1 conv of its own, 4 output lanes in 0x1038
    model = lower_rockchip(*_model(stem))
    assert set(model.vendor_ops) >= {"Conv", "Sigmoid", "ConvRelu"}
    _refused(tmp_path, patch_registers(TARGET_CNA, {0x1038}, lambda v: 0x1010005 if v == 0x1010004 else v),
             r"register 0x1038 = 0x1010005 is not the weight's kernel 1x1", stem)


def test_a_split_part_nothing_reads_takes_the_table_s_sizes():
    # split_unused: Split(axis=1, [8, 10, 6]), the middle part unread (tensor index -1, no shape)
    model = lower_rockchip(*_model("split_unused_rv1106_i8"))
    (split,) = [n for n in model.graph.nodes if n.op == "Split"]
    assert split.attrs["axis"] == 1 and len(split.outputs) == 3
    assert list(model.graph.constants[split.inputs[1]]) == [8, 10, 6]


def test_a_split_part_nothing_reads_must_match_the_table():
    from rknnlite.model.rknn_graph import t3nodes

    shapes = [(1, 24, 4, 4), (1, 8, 4, 4), (1, 6, 4, 4)]
    split = t3nodes._split(_fake("Split", {"axis": 1, "split": [8, 10, 6]}, (0,), (1, -1, 2), shapes))
    assert split.params == {"axis": 1, "split": [8, 10, 6]}
    with pytest.raises(ModelInvalidError, match=r"sizes \[8, 10, 5\]; sizes of its 3 parts adding up"):
        t3nodes._split(_fake("Split", {"axis": 1, "split": [8, 10, 5]}, (0,), (1, -1, 2), shapes))
    with pytest.raises(ModelInvalidError, match=r"a Split part \[1, 6, 4, 4\] of \[1, 24, 4, 4\]; its parameter table"):
        t3nodes._split(_fake("Split", {"axis": 1, "split": [8, 12, 4]}, (0,), (1, -1, 2), shapes))


@pytest.mark.parametrize("shapes, axes, keepdims", [
    ([(1, 16, 8, 8), (1, 1, 8, 8)], [1], 1),
    ([(1, 16, 8, 8), (1, 8, 8)], [1], 0),
    ([(1, 1, 8, 8), (1, 1, 8, 8)], [0, 1], 1),  # over dims of size 1 only: the identity, as ONNX's would be
    ([(1, 1, 6), (1, 6)], [0], 0),  # axis 0 or 1, both of size 1: the same values
])
def test_reduce_axes_are_recovered_from_the_shapes(shapes, axes, keepdims):
    from rknnlite.model.rknn_graph import t3nodes

    node = t3nodes._reduce(_fake("ReduceMax", {}, (0,), (1,), shapes))
    assert node.attrs == {"axes": {"dtype": "is", "value": axes}, "keepdims": {"dtype": "i", "value": keepdims}}


@pytest.mark.parametrize("shapes, match", [
    ([(1, 16, 8, 8), (1, 16, 8)], r"2 sets of axes give that shape reducing different dims"),  # axis 2 or 3
    ([(1, 16, 8, 8), (1, 16, 4, 8)], r"0 sets of axes give that shape"),
])
def test_reduce_shapes_that_do_not_tell_the_axes_are_refused(shapes, match):
    from rknnlite.model.rknn_graph import t3nodes

    with pytest.raises(ModelInvalidError, match=match):
        t3nodes._reduce(_fake("ReduceMin", {}, (0,), (1,), shapes))


def test_reductions_run_with_the_axes_their_shapes_give():
    # standalone_reduce: ReduceMax and ReduceMin over the channels, and a ReduceMin with keepdims 0, which the
    # compiler makes keepdims 1 and a Reshape; the container stores neither the axes constant nor a table
    model = lower_rockchip(*_model("standalone_reduce_rv1106_i8"))
    reductions = [(n.op, n.attrs) for n in model.graph.nodes if n.op.startswith("Reduce")]
    assert reductions == [("ReduceMax", {"axes": [1], "keepdims": 1}), ("ReduceMin", {"axes": [1], "keepdims": 1}),
                          ("ReduceMin", {"axes": [1], "keepdims": 1})]
    assert "Reshape" in model.vendor_ops


def test_an_int8_build_that_keeps_every_op_in_float16_runs_and_checks_each_sum_weight(tmp_path):
    # Softmax then Resize on the graph input: nothing quantizes, so the rv1106 file is float16 throughout
    # (random graph 215 of 2.5.0, refused as an unvalidated fp16 file); the second softmax of one input has
    # its reduce-sum weight named with the compiler's counter, and it is checked as the first one is
    stem = "float_only_rv1106_i8"
    model = lower_rockchip(*_model(stem))
    assert [n.attrs["axis"] for n in model.graph.nodes if n.op == "Softmax"] == [1, 3]

    def drop_one(data):
        view = np.frombuffer(tensor_bytes(data, "x_rs_weight_0"), "<f2")
        assert view[0] == 1
        tensor_bytes(data, "x_rs_weight_0")[0:2] = b"\0\0"

    _refused(tmp_path, drop_one, r"an exSoftmax13 over 4 values of axis 3 whose reduce-sum weight 'x_rs_weight_0'",
             stem)
