"""Real Rockchip (vendor) ``.rknn`` files run off-board on the software backend (issue 11).

The files are RKNN-Toolkit2 2.5.0 builds (``tests/data/rknn-toolkit2``); the references
are the vendor simulator's outputs on the same inputs.  Doctored copies check that whatever
the lowering does not know (op type, parameter-union type, dtype, layout, tensor kind) is
named in a ModelInvalidError, never guessed.
"""

from __future__ import annotations

import json
import struct
import warnings

import numpy as np
import pytest

import rknnlite
from rknnlite import DeviceUnavailableError, ModelInvalidError, QntType, TensorFormat, TensorType
from rknnlite.backends.npu import library as npu_library
from rknnlite.model.graph import Node
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import SUPPORTED_OPS, f2act, lower_rockchip, op_support, t4act
from rknnlite.model.rknn_graph.graph import read_vendor_graph
from rknnlite.model.rknn_graph.lower import VendorGraph, read_graph
from rknnlite.model.rknn_graph.regcmd import requant_t4
from rknnlite.model.rknn_graph.validated import UnvalidatedVendorFileWarning
from rknnlite.model.schema import V6
from rknnlite.model.rknn_graph.weights import decode_depthwise_weight, decode_int8_bias, decode_weight

from corpus import CORPUS, MODELS, corpus_arrays, lowered
from vendor_files import doctored_copy, node_tables, patch_registers, subgraph_table, tensor_bytes, tensor_table

#: (model, case, inputs, outputs) of the fixture io/ files
CASES = [("convnet", "x0", 1, 1), ("add_mul", "ab0", 2, 2), ("dyn_conv", "s0_32x32", 1, 1),
         ("dyn_conv", "s1_16x16", 1, 1), ("dyn_conv", "s2_24x40", 1, 1)]


def _inputs(fixtures, model, case, n):
    return [np.load(fixtures / "io" / f"{model}_{case}_in{k}.npy") for k in range(n)]


def _reference(fixtures, model, variant, case, n):
    return [np.load(fixtures / "io" / f"{model}_{variant}_{case}_sim_out{k}.npy") for k in range(n)]


def _cos(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _open(fixtures, name, **kwargs):
    return rknnlite.Context(str(fixtures / "rknn" / f"{name}.rknn"), backend="software", **kwargs)


@pytest.fixture
def no_runtime(monkeypatch, tmp_path):
    """No librknnrt anywhere (as in test_backend_selection.py)."""
    monkeypatch.delenv("LIBRKNNRT_PATH", raising=False)
    monkeypatch.setattr(npu_library, "SEARCH_DIRS", (str(tmp_path / "usr" / "lib"),))
    monkeypatch.setattr(npu_library, "LOADER_NAME", "librknnrt-absent-for-tests.so")


# -- fidelity against the vendor simulator -----------------------------------------------------------


@pytest.mark.parametrize("variant", ["fp16", "i8"])
@pytest.mark.parametrize("model, case, n_in, n_out", CASES)
def test_fixture_matches_the_vendor_simulator(vendor_fixtures, model, case, n_in, n_out, variant):
    inputs = _inputs(vendor_fixtures, model, case, n_in)  # NCHW float32 before mean/std (ONNX order)
    with _open(vendor_fixtures, f"{model}_{variant}") as ctx:
        assert ctx.backend == "software"
        assert all(a.fmt == TensorFormat.NHWC for a in ctx.inputs)  # 3 channels: NHWC, as librknnrt says
        if model == "dyn_conv":
            ctx.set_input_shapes([ctx.inputs[0].replace(fmt=TensorFormat.NCHW, dims=inputs[0].shape)])
        outputs = ctx.run(inputs, data_format="nchw")
        nhwc = ctx.run([np.ascontiguousarray(x.transpose(0, 2, 3, 1)) for x in inputs], data_format="nhwc")
    for y, y_nhwc, ref in zip(outputs, nhwc, _reference(vendor_fixtures, model, variant, case, n_out)):
        assert y.shape == ref.shape and y.dtype == np.float32
        np.testing.assert_array_equal(y, y_nhwc)
        if variant == "fp16":
            assert np.abs(y - ref).max() <= 1e-3
        else:
            assert _cos(y, ref) >= 0.9999


def test_fp16_weights_are_the_onnx_initializers(vendor_fixtures):
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(vendor_fixtures / "onnx" / "convnet.onnx")).graph.initializer}
    loaded = load_model(str(vendor_fixtures / "rknn" / "convnet_fp16.rknn"))
    graph = lower_rockchip(loaded.payload, loaded.model).graph
    np.testing.assert_array_equal(graph.constants["conv_w"], init["conv_w"].astype(np.float16).astype(np.float32))
    fc = init["fc_w"]  # Gemm B (10, 8) or (8, 10): the vendor made it a 1x1 conv [10, 8, 1, 1]
    fc = fc if fc.shape[0] == 10 else fc.T
    np.testing.assert_array_equal(graph.constants["fc_w"][:, :, 0, 0], fc.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(graph.constants["conv_b"], init["conv_b"].astype(np.float32))
    # GlobalAveragePool became two depthwise convs of 1/32 weights: 1/1024 over 32x32
    assert graph.constants["gap_2conv0_i1"].shape == (8, 1, 7, 7)
    assert np.all(graph.constants["gap_2conv0_i1"] == 1 / 32)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_the_compilers_identity_convs_become_identities(vendor_fixtures, variant):
    # add_mul: an unnamed 1x1 identity conv before each input (the NHWC -> NC1HWC2 "Pre_weight")
    loaded = load_model(str(vendor_fixtures / "rknn" / f"add_mul_{variant}.rknn"))
    nodes = lower_rockchip(loaded.payload, loaded.model).graph.nodes
    identities = [n for n in nodes if n.op == "Identity"]
    assert len(identities) == 2 and all(n.name.startswith("Conv") for n in identities)
    assert not any(n.op in ("Conv", "VendorCodes", "VendorRequant") for n in nodes)


def test_int8_weights_dequantize_to_the_onnx_initializers(vendor_fixtures):
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(vendor_fixtures / "onnx" / "dyn_conv.onnx")).graph.initializer}
    loaded = load_model(str(vendor_fixtures / "rknn" / "dyn_conv_i8.rknn"))
    graph = lower_rockchip(loaded.payload, loaded.model, fuse=False).graph  # each conv with its VendorCodes
    for w_name, b_name in (("w1", "b1"), ("w2", "b2")):
        # the conv runs on integer weights and codes; VendorRequant's multipliers carry the scales
        conv = next(n for n in graph.nodes if n.op == "Conv" and n.inputs[1] == w_name)
        codes = next(n for n in graph.nodes if n.outputs[0] == conv.inputs[0])
        requant = next(n for n in graph.nodes if n.inputs[0] == conv.outputs[0])
        assert codes.op == "VendorCodes" and requant.op == "VendorRequant"
        w_int, b_int = graph.constants[w_name], graph.constants[b_name]
        assert np.array_equal(w_int, np.round(w_int)) and np.array_equal(b_int, np.round(b_int))
        step = np.asarray(requant.attrs["multiplier"]) * requant.attrs["scale"]  # s_in * s_w[c]
        w, ref = w_int * (step / codes.attrs["scale"]).reshape(-1, 1, 1, 1), init[w_name]
        q_step = (ref.max(axis=(1, 2, 3)) - ref.min(axis=(1, 2, 3))) / 255  # per-channel asymmetric int8 step
        assert np.all(np.abs(w - ref) <= q_step.reshape(-1, 1, 1, 1) * 0.51)
        np.testing.assert_allclose(b_int * step, init[b_name], atol=1e-3)


def test_weight_tiles_rows_and_padding():
    # fp16 [3, 40, 1, 1]: one row of two tiles (32 + 8 input lanes), O=3 in one block
    w = np.arange(3 * 40, dtype=np.float16).reshape(3, 40, 1, 1)
    first = w[:, :32, 0, 0][None, None, None]  # [n_iblk][kh][kw][oblk][iblk] = (1,1,1,3,32)
    second = w[:, 32:, 0, 0][None, None, None]
    raw = first.tobytes() + second.tobytes()
    out = decode_weight(raw, (1, 1, 1, 1, 3, 32, 1, 1, 1, 1, 3, 8), (3, 40, 1, 1), "float16", "w")
    np.testing.assert_array_equal(out, w)
    # int8 [3, 2, 1, 1] stored in one 4x16 block: padded output and input lanes are dropped
    block = np.zeros((1, 1, 1, 4, 16), np.int8)
    block[0, 0, 0, :3, :2] = np.arange(6).reshape(3, 2)
    block[0, 0, 0, 3, :] = 99
    out = decode_weight(block.tobytes(), (1, 1, 1, 1, 4, 16), (3, 2, 1, 1), "int8", "w")
    np.testing.assert_array_equal(out[:, :, 0, 0], np.arange(6).reshape(3, 2))
    with pytest.raises(ModelInvalidError, match=r"shape \[3, 40, 1, 1\] needs 240 bytes; the buffer has 100"):
        decode_weight(raw[:100], (1, 1, 1, 1, 3, 32, 1, 1, 1, 1, 3, 8), (3, 40, 1, 1), "float16", "w")
    with pytest.raises(ModelInvalidError, match="cover 3 of 5 output channels"):  # (padded to 5 channels' bytes)
        decode_weight(raw + bytes(160), (1, 1, 1, 1, 3, 32, 1, 1, 1, 1, 3, 8), (5, 40, 1, 1), "float16", "w")


def test_packed_int8_weight_of_rk3576_first_convs():
    # [kh][O][16 bytes]: per kw, the 3 input weights and the channel's zero point; then 4 zero bytes
    w = np.arange(2 * 3 * 2 * 3, dtype=np.int8).reshape(2, 3, 2, 3)  # [O=2, I=3, kh=2, kw=3]
    rows = np.zeros((2, 2, 16), np.int8)
    for h in range(2):
        for o in range(2):
            groups = [list(w[o, :, h, k]) + [100 + o] for k in range(3)]
            rows[h, o, :12] = np.array(groups, np.int8).ravel()
    out = decode_weight(rows.tobytes(), (1, 1, 2, 3, 2, 4), (2, 3, 2, 3), "int8", "w", npu_size=96,
                        packed=True)
    np.testing.assert_array_equal(out, w)
    with pytest.raises(ModelInvalidError, match="only the packed layout"):  # fp16 has no packed layout
        decode_weight(rows.tobytes(), (1, 1, 2, 3, 2, 4), (2, 3, 2, 3), "float16", "w", npu_size=999,
                      packed=True)
    with pytest.raises(ModelInvalidError, match="only the packed layout"):  # as many input channels as the block
        decode_weight(rows.tobytes(), (1, 1, 2, 3, 2, 4), (2, 4, 2, 3), "int8", "w", npu_size=96, packed=True)
    with pytest.raises(ModelInvalidError, match="needs 64 bytes"):
        decode_weight(rows.tobytes()[:40], (1, 1, 2, 3, 2, 4), (2, 3, 2, 3), "int8", "w", npu_size=96,
                      packed=True)
    with pytest.raises(ModelInvalidError, match="has NPU size 999; 96 was observed"):
        decode_weight(rows.tobytes(), (1, 1, 2, 3, 2, 4), (2, 3, 2, 3), "int8", "w", npu_size=999,
                      packed=True)
    # other platforms never pack: the same bytes are read as tiles (their size decides)
    with pytest.raises(ModelInvalidError, match="tensor's NPU size is 999"):
        decode_weight(rows.tobytes(), (1, 1, 2, 3, 2, 4), (2, 3, 2, 3), "int8", "w", npu_size=999)


def test_packed_layout_is_chosen_by_the_caller_even_when_the_size_matches_the_tiles():
    # rv1126b first conv of 8 channels: npu shape [1,1,3,3,16,4] holds 576 bytes of tiles, and the
    # packed layout's size is 8 * 3 * 3 * 8 = 576 as well; only the conv's registers tell them apart
    w = (np.arange(8 * 3 * 3 * 3) % 97 - 48).astype(np.int8).reshape(8, 3, 3, 3)
    rows = np.zeros((3, 16, 16), np.int8)
    for h in range(3):
        for o in range(8):
            rows[h, o, :12] = np.array([list(w[o, :, h, k]) + [7] for k in range(3)], np.int8).ravel()
    out = decode_weight(rows.tobytes(), (1, 1, 3, 3, 16, 4), (8, 3, 3, 3), "int8", "w", npu_size=576,
                        packed=True)
    np.testing.assert_array_equal(out, w)
    tiled = decode_weight(rows.tobytes(), (1, 1, 3, 3, 16, 4), (8, 3, 3, 3), "int8", "w", npu_size=576)
    assert not np.array_equal(tiled, w)


def test_packed_rows_of_a_wide_kernel_are_padded_to_32_bytes():
    # rk3576 7x7 stem (ResNet): 7 groups of the 3 input weights and the zero point fill 28 bytes of
    # a 32-byte row, one row per (kh, output lane)
    w = (np.arange(2 * 3 * 1 * 7) % 101 - 50).astype(np.int8).reshape(2, 3, 1, 7)  # [O=2, I=3, kh=1, kw=7]
    rows = np.zeros((1, 2, 32), np.int8)
    for o in range(2):
        rows[0, o, :28] = np.array([list(w[o, :, 0, k]) + [9] for k in range(7)], np.int8).ravel()
    out = decode_weight(rows.tobytes(), (1, 1, 1, 7, 2, 4), (2, 3, 1, 7), "int8", "w", npu_size=2 * 7 * 8, packed=True)
    np.testing.assert_array_equal(out, w)
    with pytest.raises(ModelInvalidError, match="needs 64 bytes"):
        decode_weight(rows.tobytes()[:48], (1, 1, 1, 7, 2, 4), (2, 3, 1, 7), "int8", "w", packed=True)


def test_packed_rows_of_two_output_blocks_follow_each_other():
    # rk3576 ResNet stem (64 channels on a 32x32 or larger image): npu shape [2,1,7,7,32,4], the 7 kernel
    # rows of the first 32 channels, then those of the next 32: [block][kh][oblk][row]
    w = (np.arange(3 * 3 * 2 * 3) % 90 - 45).astype(np.int8).reshape(3, 3, 2, 3)  # [O=3, I=3, kh=2, kw=3]
    rows = np.zeros((2, 2, 2, 16), np.int8)  # two blocks of 2 output lanes
    for o in range(3):
        for h in range(2):
            rows[o // 2, h, o % 2, :12] = np.array([list(w[o, :, h, k]) + [o] for k in range(3)], np.int8).ravel()
    out = decode_weight(rows.tobytes(), (2, 1, 2, 3, 2, 4), (3, 3, 2, 3), "int8", "w", npu_size=3 * 6 * 8,
                        packed=True)
    np.testing.assert_array_equal(out, w)
    with pytest.raises(ModelInvalidError, match="cannot have 3 blocks of 2 rows"):
        decode_weight(bytes(256), (3, 1, 2, 3, 2, 4), (3, 3, 2, 3), "int8", "w", packed=True)


def _depthwise_bytes(w: np.ndarray, stored_zp: np.ndarray, iblk: int) -> bytes:
    """rk3576 depthwise layout: per input block and tap, each channel pair as w0 w1 -zp0 -zp1."""
    _, c, kh, kw = w.shape
    blocks = -(-c // iblk)
    lanes_w = np.zeros((kh, kw, blocks * iblk), np.int8)
    lanes_w[:, :, :c] = w[0].transpose(1, 2, 0)
    lanes_z = np.zeros((kh, kw, blocks * iblk), np.int8)
    lanes_z[:, :, :c] = stored_zp
    quads = np.stack([lanes_w.reshape(kh, kw, blocks, iblk // 2, 2), lanes_z.reshape(kh, kw, blocks, iblk // 2, 2)],
                     axis=4)  # kh, kw, block, pair, (w, z), member
    return quads.transpose(2, 0, 1, 3, 4, 5).tobytes()


def test_rk3576_depthwise_weight_holds_its_zero_points():
    w = (np.arange(5 * 2 * 3) % 37 - 18).astype(np.int8).reshape(1, 5, 2, 3)  # 5 channels, one block of 8
    zp = np.array([3, -4, 0, 127, -128])
    stored = ((-zp + 128) % 256 - 128).astype(np.int8)  # -zp as int8: 128 (zp -128) wraps to -128
    raw = _depthwise_bytes(w, stored, 8)
    weight, w_zp = decode_depthwise_weight(raw, (1, 1, 2, 3, 1, 8), (1, 5, 2, 3), "w", npu_size=len(raw))
    np.testing.assert_array_equal(weight, w)
    assert w_zp.tolist() == zp.tolist()
    # two input blocks of 4 (rk3576 writes (1, 2, kh, kw, 1, 64) for 128 channels)
    raw2 = _depthwise_bytes(w, stored, 4)
    weight, w_zp = decode_depthwise_weight(raw2, (1, 2, 2, 3, 1, 4), (1, 5, 2, 3), "w", npu_size=len(raw2))
    np.testing.assert_array_equal(weight, w)
    assert w_zp.tolist() == zp.tolist()
    # a row of several tiles (torchvision's 232-channel ShuffleNet: 3 blocks of 64, then one of 48), and a
    # tile of no blocks, which holds nothing: here 4 channels, then 2 (one padded)
    quads = []
    for lanes, iblk in ((range(0, 4), 4), (range(4, 6), 2)):
        ws = np.zeros((2, 3, iblk), np.int8)
        zs = np.zeros((2, 3, iblk), np.int8)
        for k, c in enumerate(lanes):
            if c < 5:
                ws[:, :, k], zs[:, :, k] = w[0, c], stored[c]
        quads.append(np.stack([ws.reshape(2, 3, iblk // 2, 2), zs.reshape(2, 3, iblk // 2, 2)], axis=3).tobytes())
    raw3 = b"".join(quads)
    weight, w_zp = decode_depthwise_weight(raw3, (1, 0, 2, 3, 1, 64, 1, 1, 2, 3, 1, 4, 1, 1, 2, 3, 1, 2),
                                           (1, 5, 2, 3), "w", npu_size=len(raw3))
    np.testing.assert_array_equal(weight, w)
    assert w_zp.tolist() == zp.tolist()
    with pytest.raises(ModelInvalidError, match="hold 96 bytes but the tensor's NPU size is 48"):
        decode_depthwise_weight(raw, (1, 1, 2, 3, 1, 8), (1, 5, 2, 3), "w", npu_size=48)
    with pytest.raises(ModelInvalidError, match="do not fit"):
        decode_depthwise_weight(raw, (1, 1, 3, 3, 1, 8), (1, 5, 2, 3), "w")
    with pytest.raises(ModelInvalidError, match="needs 96 bytes, has 50"):
        decode_depthwise_weight(raw[:50], (1, 1, 2, 3, 1, 8), (1, 5, 2, 3), "w")
    changed = bytearray(raw)
    changed[4 * 4 + 2] ^= 1  # the zero point of channel 0 at the second tap
    with pytest.raises(ModelInvalidError, match="differ between kernel taps"):
        decode_depthwise_weight(bytes(changed), (1, 1, 2, 3, 1, 8), (1, 5, 2, 3), "w")


def test_int8_bias_block_without_zero_points():
    # rk3576/rv1126b depthwise convs: i32 bias[8] | u16 mul[8] (their weight holds the zero points)
    block = np.arange(8, dtype="<i4").tobytes() + np.full(8, 16384, "<u2").tobytes()
    bias, zp, mul = decode_int8_bias(block * 2, 11, "b", zero_points=False)
    assert bias.tolist() == list(range(8)) + [0, 1, 2] and zp is None and mul.tolist() == [16384] * 11
    with pytest.raises(ModelInvalidError, match="need 96 bytes"):
        decode_int8_bias(block, 11, "b", zero_points=False)


@pytest.mark.parametrize("low_bits, refusal", [(5, r"CNA_CONV_CON1 \(0x100c\) = 0x2000a005 .* low bits 6 \(packed\), "
                                                    r"2 and 0 \(tiles\), and 1 on a depthwise conv, only"),
                                               (6, "a packed int8 weight .* has NPU size 288; 576 was observed")])
def test_rk3576_first_conv_layout_is_read_from_its_registers(tmp_path, low_bits, refusal):
    # depthwise_rk3576_i8's first conv (8 channels on an 8x8 image) keeps its weight in tiles (CNA_CONV_CON1
    # low bits 2); the same conv on a 16x16 image (classifier_ops) is packed (6).  Other bits are refused,
    # and with 6 the tiles are read as the packed layout, whose size they do not have.
    path = _doctored_corpus(tmp_path, "depthwise_rk3576_i8",
                            patch_registers(0x0201, (0x100C,), lambda v: (v & ~0xF) | low_bits if v & 0xF == 2 else v))
    with pytest.raises(ModelInvalidError, match=refusal):
        rknnlite.Context(path, backend="software")


def test_int8_bias_block():
    block = (np.arange(8, dtype="<i4").tobytes() + (-np.arange(8, dtype="<i2")).tobytes()
             + np.full(8, 16384, "<u2").tobytes())
    bias, zp, mul = decode_int8_bias(block, 5, "b")
    assert bias.tolist() == [0, 1, 2, 3, 4] and zp.tolist() == [0, 1, 2, 3, 4] and mul.tolist() == [16384] * 5
    with pytest.raises(ModelInvalidError, match="need 128 bytes"):
        decode_int8_bias(block, 9, "b")
    # rk3566: blocks of 4 channels (half its int8 C2 of 8)
    small = (np.arange(4, dtype="<i4").tobytes() + (-np.arange(4, dtype="<i2")).tobytes()
             + np.full(4, 9, "<u2").tobytes()) * 2
    bias, zp, mul = decode_int8_bias(small, 6, "b", per_block=4)
    assert bias.tolist() == [0, 1, 2, 3, 0, 1] and zp.tolist() == [0, 1, 2, 3, 0, 1] and mul.tolist() == [9] * 6


# -- what the lowering does not know is named -----------------------------------------------------


def _doctored(fixtures, tmp_path, name: str, patch) -> str:
    return doctored_copy(fixtures / "rknn" / f"{name}.rknn", tmp_path, patch)


def _rename_op(data: bytearray, old: bytes, new: bytes) -> None:
    needle = struct.pack("<I", len(old)) + old + b"\0"
    assert data.count(needle) == 1 and len(new) == len(old)
    at = data.index(needle) + 4
    data[at:at + len(old)] = new


def test_unknown_op_type_fails_at_load_naming_it(vendor_fixtures, tmp_path):
    path = _doctored(vendor_fixtures, tmp_path, "add_mul_fp16", lambda d: _rename_op(d, b"Add", b"Axx"))
    with pytest.raises(ModelInvalidError, match="vendor op type 'Axx'") as info:
        rknnlite.Context(path, backend="software")
    assert "node 4" in str(info.value) and "supported: " in str(info.value)
    loaded = load_model(path)
    assert ("Axx", 1, False) in op_support(loaded.payload, loaded.model)


def _patch_slot(subgraph_slot: int, index: int, slot: int, value: int):
    def patch(data: bytearray) -> None:
        table = subgraph_table(data).vector(subgraph_slot).table(index)
        pos = table.field_pos(slot)
        assert pos, "the fixture stores this field"
        data[pos] = value

    return patch


@pytest.mark.parametrize("what, subgraph_slot, index, slot, message", [
    ("param union", 1, 1, 7, "unknown parameter-union type code 99"),  # convnet node 1 ConvRelu
    ("dtype", 0, 10, 0, "unknown dtype code 99"),  # tensor 10: the input
    ("layout", 0, 10, 1, "unknown layout code 99"),
    ("kind", 0, 10, 2, "unknown tensor kind code 99"),
])
def test_unknown_enum_values_are_named(vendor_fixtures, tmp_path, what, subgraph_slot, index, slot, message):
    path = _doctored(vendor_fixtures, tmp_path, "convnet_fp16", _patch_slot(subgraph_slot, index, slot, 99))
    with pytest.raises(ModelInvalidError, match=message) as info:
        rknnlite.Context(path, backend="software")
    assert "known:" in str(info.value)


def test_unknown_register_bits_are_named(vendor_fixtures, tmp_path):
    patch = patch_registers(0x1001, (0x4088,), lambda value: value | 0x8000)  # OUT_CVT_SHIFT
    path = _doctored(vendor_fixtures, tmp_path, "convnet_i8", patch)
    with pytest.raises(ModelInvalidError, match="OUT_CVT_SHIFT .* sets bits outside 0x3f"):
        rknnlite.Context(path, backend="software")


def test_rgb2bgr_files_run_on_the_data_as_given(vendor_fixtures, tmp_path):
    # config(quant_img_RGB2BGR=True) reverses only the calibration images: RKNN-Toolkit2 2.5.0 marks the
    # input rgb2bgr, keeps the identity channel order, and its simulator gives the same outputs as
    # without the flag (checked on convnet fp16 and int8 builds); so the marked file runs as the plain one
    def mark(data: bytearray) -> None:
        needle = b"'rgb2bgr': False"
        assert data.count(needle) == 1
        at = data.index(needle)
        data[at:at + len(needle)] = b"'rgb2bgr': True "

    path = _doctored(vendor_fixtures, tmp_path, "convnet_fp16", mark)
    assert load_model(path).model.description["attrs"]["input"]["rgb2bgr"] is True
    with rknnlite.Context(path, backend="software") as ctx:
        (y,) = ctx.run(_inputs(vendor_fixtures, "convnet", "x0", 1), data_format="nchw")
    np.testing.assert_array_equal(y, _reference(vendor_fixtures, "convnet", "fp16", "x0", 1)[0])


def test_a_channel_reordering_is_refused_by_name(vendor_fixtures, tmp_path):
    def reorder(data: bytearray) -> None:  # the Preproc table's channel order (i32 vector) 0,1,2,3 -> 2,1,0,3
        needle = struct.pack("<5i", 4, 0, 1, 2, 3)
        assert data.count(needle) == 1
        at = data.index(needle) + 4
        data[at:at + 16] = struct.pack("<4i", 2, 1, 0, 3)

    path = _doctored(vendor_fixtures, tmp_path, "convnet_fp16", reorder)
    with pytest.raises(ModelInvalidError, match=r"'input' has channel order \[2, 1, 0, 3\]; reordering is not"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem", ["ultralytics_norm_fp16", "ultralytics_norm_i8", "ultralytics_norm_rv1106_i8"])
def test_a_mean_written_as_one_value_stands_for_every_channel(stem):
    # RKNN-Toolkit2 2.5.0 writes an all-zero mean (Ultralytics' mean_values=[[0, 0, 0]], std 255) as 'mean': [0]
    # beside three stds; such files were refused as "1 means and 3 stds"
    model = lowered(stem)
    assert model.rockchip.description["attrs"]["x"]["mean"] == [0]
    (pre,) = model.preprocess
    assert (pre.mean, pre.std) == ((0.0, 0.0, 0.0), (255.0, 255.0, 255.0))


def test_a_one_value_std_stands_for_every_channel(tmp_path):
    # 2.5.0 writes an all-one std as [1] too (mean [[5, 5, 5]], std [[1, 1, 1]] gave 'std': [1]); here the
    # file's three 255s written as one, the Description's length kept
    def std_one(data: bytearray) -> None:
        needle = b"'std': [255.0, 255.0, 255.0]"
        assert data.count(needle) == 1
        at = data.index(needle)
        data[at:at + len(needle)] = b"'std': [255.0]".ljust(len(needle))

    path = doctored_copy(CORPUS / "ultralytics_norm_i8.rknn", tmp_path, std_one)
    model = load_model(path)
    assert model.model.description["attrs"]["x"]["std"] == [255.0]
    (pre,) = lower_rockchip(model.payload, model.model).preprocess
    assert pre.std == (255.0, 255.0, 255.0)


def test_a_one_value_mean_the_preproc_table_contradicts_is_refused(tmp_path):
    def mean_one(data: bytearray) -> None:  # the Description's 'mean': [0] -> [1]
        needle = b"'mean': [0]"
        assert data.count(needle) == 1
        at = data.index(needle)
        data[at:at + len(needle)] = b"'mean': [1]"

    path = doctored_copy(CORPUS / "ultralytics_norm_i8.rknn", tmp_path, mean_one)
    with pytest.raises(ModelInvalidError, match=r"input 'x': the Description's one mean value 1 is not the Preproc "
                                                r"table's per-channel mean \[0.0, 0.0, 0.0\]"):
        rknnlite.Context(path, backend="software")


def _batch_of(n: int):
    """A patch setting Model[14], the batch size string ("0" in a default build), to ``n`` (< 10)."""
    def patch(data: bytearray) -> None:
        needle = struct.pack("<I", 1) + b"0\0"
        assert data.count(needle) == 1
        at = data.index(needle) + 4
        data[at:at + 1] = str(n).encode()
    return patch


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_multi_batch_files_run_every_sample(vendor_fixtures, tmp_path, variant):
    # RKNN-Toolkit2 2.5.0 stores a build(rknn_batch_size=2) file as the one-sample graph plus the batch
    # size (checked on convnet fp16 and int8 builds); its attributes multiply axis 0, as librknnrt's do
    path = _doctored(vendor_fixtures, tmp_path, f"convnet_{variant}", _batch_of(2))
    assert load_model(path).model.batch_size == 2
    (x,) = _inputs(vendor_fixtures, "convnet", "x0", 1)
    pair = np.concatenate([x, 255.0 - x])
    with rknnlite.Context(path, backend="software") as ctx, _open(vendor_fixtures, f"convnet_{variant}") as one:
        assert (ctx.inputs[0].dims, ctx.outputs[0].dims) == ((2, 32, 32, 3), (2, 10))
        assert ctx.inputs[0].type == one.inputs[0].type
        (y,) = ctx.run([pair], data_format="nchw")
        assert y.shape == (2, 10)
        for k in range(2):
            np.testing.assert_array_equal(y[k:k + 1], one.run([pair[k:k + 1]], data_format="nchw")[0])
        with pytest.raises(rknnlite.InputInvalidError):
            ctx.run([x], data_format="nchw")  # one sample for a two-sample input
        np.testing.assert_array_equal(ctx.run([pair], data_format="nchw")[0], y)
    if variant == "fp16":
        np.testing.assert_array_equal(y[:1], _reference(vendor_fixtures, "convnet", "fp16", "x0", 1)[0])


def test_multi_batch_with_dynamic_shapes_is_refused(vendor_fixtures, tmp_path):
    path = _doctored(vendor_fixtures, tmp_path, "dyn_conv_fp16", _batch_of(2))
    with pytest.raises(ModelInvalidError, match="rknn_batch_size=2 and dynamic shapes"):
        rknnlite.Context(path, backend="software")


def test_a_failed_load_leaves_nothing_broken(vendor_fixtures, tmp_path):
    path = _doctored(vendor_fixtures, tmp_path, "add_mul_fp16", lambda d: _rename_op(d, b"Mul", b"Mxl"))
    with pytest.raises(ModelInvalidError, match="'Mxl'"):
        rknnlite.Context(path, backend="software")
    with _open(vendor_fixtures, "add_mul_fp16") as ctx:  # the real file still loads and runs
        assert len(ctx.run(_inputs(vendor_fixtures, "add_mul", "ab0", 2), data_format="nchw")) == 2


# -- backend selection ------------------------------------------------------------------------------


def test_auto_prefers_the_npu_when_librknnrt_loads(vendor_fixtures, request):
    pytest.importorskip("rknnlite._native.rknnrt")
    request.getfixturevalue("fake_rknnrt_env")
    with rknnlite.Context(str(vendor_fixtures / "rknn" / "add_mul_fp16.rknn")) as ctx:
        assert ctx.backend == "npu"


def test_auto_runs_supported_files_on_software_without_librknnrt(vendor_fixtures, vendor_rknn_files, no_runtime):
    assert vendor_rknn_files
    for path in vendor_rknn_files:
        with rknnlite.Context(str(path)) as ctx:
            assert ctx.backend == "software"


def test_auto_names_both_reasons_when_an_op_is_unsupported(vendor_fixtures, tmp_path, no_runtime):
    path = _doctored(vendor_fixtures, tmp_path, "add_mul_fp16", lambda d: _rename_op(d, b"Add", b"Axx"))
    with pytest.raises(DeviceUnavailableError) as info:
        rknnlite.Context(path)
    message = str(info.value)
    assert "librknnrt.so was not found" in message
    assert "software backend cannot run it off-board" in message and "'Axx'" in message


def test_explicit_npu_never_falls_back(vendor_fixtures, no_runtime):
    with pytest.raises(DeviceUnavailableError, match="npu backend cannot run"):
        rknnlite.Context(str(vendor_fixtures / "rknn" / "convnet_fp16.rknn"), backend="npu")


# -- runtime features on vendor files ------------------------------------------------------------


def test_tensor_attributes_are_the_files(vendor_fixtures):
    specs = load_model(str(vendor_fixtures / "rknn" / "convnet_i8.rknn")).model
    with _open(vendor_fixtures, "convnet_i8") as ctx:
        (inp,), (out,) = ctx.inputs, ctx.outputs
        assert (inp.name, inp.dims, inp.fmt, inp.type) == ("input", (1, 32, 32, 3), TensorFormat.NHWC, TensorType.INT8)
        assert (inp.scale, inp.zp) == (specs.inputs[0].quant.scale[0], -64)
        assert (out.name, out.dims, out.type) == ("prob", (1, 10), TensorType.FLOAT16)
        assert ctx.custom_string == ""
    with _open(vendor_fixtures, "dyn_conv_i8") as ctx:
        (out,) = ctx.outputs
        assert out.type == TensorType.INT8 and (out.scale, out.zp) == (specs_scale(vendor_fixtures, "y"), -22)


FIXTURE_FILES = [f"{m}_{v}" for m in ("convnet", "add_mul", "dyn_conv") for v in ("fp16", "i8")]


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_input_attributes_have_the_types_librknnrt_reports(vendor_fixtures, name):
    # rknn_query(INPUT_ATTR): FLOAT16 for an fp16 file's inputs, INT8 with the file's scale and zero point
    specs = load_model(str(vendor_fixtures / "rknn" / f"{name}.rknn")).model.inputs
    with _open(vendor_fixtures, name) as ctx:
        assert len(ctx.inputs) == len(specs)
        for attr, spec in zip(ctx.inputs, specs):
            want = {"float16": TensorType.FLOAT16, "int8": TensorType.INT8}[spec.dtype]
            assert (attr.name, attr.type) == (spec.name, want)
            if spec.quant is None:
                assert attr.qnt_type == QntType.NONE
            else:
                assert (attr.qnt_type, attr.scale, attr.zp) == (QntType.AFFINE_ASYMMETRIC, spec.quant.scale[0],
                                                               spec.quant.zero_point[0])


def test_fp16_inputs_are_normalised_before_any_rounding():
    # The attribute says FLOAT16, but float32 data reaches the backend as it is: normalised in
    # float32 as the simulator does, not rounded to float16 first (bit-exact on this file).
    entry = dict(_corpus())["avgpool_fp16"]
    data = corpus_arrays("avgpool_fp16")
    x, ref = data["in0"], data["out0"]
    with rknnlite.Context(str(CORPUS / entry["file"]), backend="software") as ctx:
        assert ctx.inputs[0].type == TensorType.FLOAT16
        np.testing.assert_array_equal(ctx.run([x], data_format="nchw")[0], ref)
        # float16 data is taken too, as the attribute says
        rounded = ctx.run([x.astype(np.float16)], data_format="nchw")[0]
    assert rounded.shape == ref.shape and np.abs(rounded - ref).max() > 0  # so rounding first would show


def test_inputs_are_presented_in_librknnrt_layouts():
    # 4-D inputs with 1, 3 or 4 channels are NHWC (dims, dynamic ranges, default data layout); others keep NCHW
    entry = dict(_corpus())["sub_fp16"]  # two 20-channel inputs, no mean/std
    data = corpus_arrays("sub_fp16")
    a, b = data["in0"], data["in1"]
    with rknnlite.Context(str(CORPUS / entry["file"]), backend="software") as ctx:
        assert [(i.fmt, i.dims) for i in ctx.inputs] == [(TensorFormat.NCHW, (1, 20, 8, 8))] * 2
        np.testing.assert_array_equal(ctx.run([a, b])[0], data["out0"])
    entry = dict(_corpus())["convnet_fp16"]
    data = corpus_arrays("convnet_fp16")
    x = data["in0"]
    with rknnlite.Context(str(CORPUS / entry["file"]), backend="software") as ctx:
        (attr,) = ctx.inputs
        assert (attr.fmt, attr.dims) == (TensorFormat.NHWC, (x.shape[0], x.shape[2], x.shape[3], x.shape[1]))
        y = ctx.run([np.ascontiguousarray(x.transpose(0, 2, 3, 1))])[0]  # NHWC data by default, as on a board
        np.testing.assert_array_equal(ctx.run([x], data_format="nchw")[0], y)
        with pytest.raises(rknnlite.InputInvalidError, match=r"expected NHWC \[1, 16, 16, 3\]"):
            ctx.run([x[:, :, :8]])  # fits in neither layout
        np.testing.assert_array_equal(ctx.run([x])[0], y)  # NCHW data without data_format: transposed (warned)
        assert ctx.run([x], data_format="nchw")[0].shape == y.shape  # and the context stays usable


#: the fixtures the fake librknnrt opens (it knows one vendor graph: tests/fake_rknnrt/README.md)
FAKE_RKNNRT_FILES = ["add_mul_fp16", "add_mul_i8"]


@pytest.mark.parametrize("name", FAKE_RKNNRT_FILES)
def test_software_and_npu_backends_report_the_same_attributes(vendor_fixtures, name, request):
    pytest.importorskip("rknnlite._native.rknnrt")
    request.getfixturevalue("fake_rknnrt_env")
    path = str(vendor_fixtures / "rknn" / f"{name}.rknn")
    npu_path = path
    if name == "add_mul_i8":  # the fake refuses quantized vendor files: a fake-graph file with their tensors
        from fake_model import add_mul_model

        model = load_model(path).model
        quant = [(s.quant.scale[0], s.quant.zero_point[0]) for s in list(model.inputs) + list(model.outputs)]
        npu_path = str(request.getfixturevalue("tmp_path") / f"{name}.rknn")
        with open(npu_path, "wb") as f:
            f.write(add_mul_model(dtype="int8", quant=quant, toolkit_version="2.5.0"))
    with rknnlite.Context(npu_path, backend="npu") as npu, rknnlite.Context(path, backend="software") as sw:
        for kind in ("inputs", "outputs", "native_inputs", "native_outputs"):
            assert getattr(sw, kind) == getattr(npu, kind), kind
        assert sw.inputs[0].fmt == TensorFormat.NHWC  # 3 channels: presented as NHWC by both


def specs_scale(fixtures, name):
    model = load_model(str(fixtures / "rknn" / "dyn_conv_i8.rknn")).model
    return next(s.quant.scale[0] for s in model.outputs if s.name == name)


def test_native_layouts_and_pass_through(vendor_fixtures):
    (x,) = _inputs(vendor_fixtures, "dyn_conv", "s0_32x32", 1)
    with _open(vendor_fixtures, "dyn_conv_i8") as ctx:
        native_in, native_out = ctx.native_inputs[0], ctx.native_outputs[0]
        assert native_in.fmt == TensorFormat.NHWC and native_in.type == TensorType.INT8
        assert native_out.fmt == TensorFormat.NC1HWC2 and native_out.dims == (1, 1, 32, 32, 16)
        expected = ctx.run([x], data_format="nchw")[0]
        # pass-through: the normalised, quantized int8 values (no mean/std applied again), in the native NHWC
        a = ctx.inputs[0]
        normalised = (x - np.array([0, 128, 64], np.float32).reshape(1, 3, 1, 1)) / \
            np.array([255, 64, 32], np.float32).reshape(1, 3, 1, 1)
        q = np.clip(np.rint(normalised / np.float32(a.scale)) + a.zp, -128, 127).astype(np.int8)
        q = np.ascontiguousarray(q.transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(ctx.run([q], pass_through=True)[0], expected)
        raw = ctx.run([x], data_format="nchw", want_float=False)[0]
        assert raw.dtype == np.int8
        np.testing.assert_allclose((raw.astype(np.float32) - ctx.outputs[0].zp) * ctx.outputs[0].scale, expected,
                                   atol=1e-6)


def test_dynamic_shapes(vendor_fixtures):
    with _open(vendor_fixtures, "dyn_conv_fp16") as ctx:
        ranges = ctx.input_ranges()
        # in the input's NHWC, as librknnrt gives them
        assert list(ranges[0].dyn_range) == [(1, 32, 32, 3), (1, 24, 40, 3), (1, 16, 16, 3)]
        assert ranges[0].fmt == TensorFormat.NHWC
        ctx.set_input_shapes([(1, 24, 40, 3)])
        assert ctx.current_inputs[0].dims == (1, 24, 40, 3)
        assert ctx.current_outputs[0].dims == (1, 2, 24, 40)
        assert ctx.current_native_inputs[0].dims == (1, 24, 40, 3)
        with pytest.raises(rknnlite.InputInvalidError, match="not one of the model's shape sets"):
            ctx.set_input_shapes([(1, 8, 8, 3)])
        (x,) = _inputs(vendor_fixtures, "dyn_conv", "s1_16x16", 1)  # run switches by itself
        assert ctx.run([x], data_format="nchw")[0].shape == (1, 2, 16, 16)
        assert ctx.current_inputs[0].dims == (1, 16, 16, 3)


def test_dup_shares_the_lowered_weights(vendor_fixtures):
    inputs = _inputs(vendor_fixtures, "convnet", "x0", 1)
    with _open(vendor_fixtures, "convnet_i8") as ctx:
        twin = ctx.dup()
        try:
            assert twin._backend.model is ctx._backend.model
            np.testing.assert_array_equal(twin.run(inputs, data_format="nchw")[0],
                                          ctx.run(inputs, data_format="nchw")[0])
        finally:
            twin.close()


def test_zero_copy_run_bound(vendor_fixtures):
    a, b = _inputs(vendor_fixtures, "add_mul", "ab0", 2)
    with _open(vendor_fixtures, "add_mul_fp16") as ctx:
        expected = ctx.run([a, b], data_format="nchw")
        for attr, value in zip(ctx.native_inputs, (a, b)):  # NHWC, rows padded to w_stride
            attr = attr.replace(type=TensorType.FLOAT32)
            assert attr.fmt == TensorFormat.NHWC
            mem = ctx.create_mem(attr.size_with_stride)
            ctx.set_io_mem(mem, attr)
            mem.view(attr)[...] = value.transpose(0, 2, 3, 1)
        outs = []
        for attr in ctx.outputs:
            attr = attr.replace(type=TensorType.FLOAT32)
            mem = ctx.create_mem(attr.size_with_stride)
            ctx.set_io_mem(mem, attr)
            outs.append(mem.array(np.float32, attr.dims))
        ctx.run_bound()
        for y, ref in zip(outs, expected):
            np.testing.assert_array_equal(y, ref)


def test_pipeline_and_queue(vendor_fixtures):
    from rknnlite.pipeline import Pipeline

    inputs = [np.ascontiguousarray(x.transpose(0, 2, 3, 1)) for x in _inputs(vendor_fixtures, "convnet", "x0", 1)]
    with _open(vendor_fixtures, "convnet_fp16") as ctx:
        expected = ctx.run(inputs)[0]
        with Pipeline(ctx, maxsize=4) as pipe:
            for _ in range(3):
                pipe.push(inputs)
            results = [pipe.pop(timeout=60) for _ in range(3)]
    assert all(r.ok for r in results)
    for r in results:
        np.testing.assert_array_equal(r.value[0], expected)


# -- the executor hook: vendor fp16 inputs and float32 biases are not rounded ----------------------


@pytest.mark.parametrize("keep", [True, False])
def test_keep_float_tensors_are_not_rounded_in_float16_mode(keep):
    """A constant named in ``keep_float`` stays float32 in float16 mode; a graph input always
    does (the simulator reads inputs as given)."""
    from rknnlite.backends.software.executor import Executor

    x = np.full((1, 4), 1 + 2 ** -12, np.float32)  # not a float16 value
    c = np.full((1, 4), 1 + 2 ** -12, np.float32)
    graph = VendorGraph([Node("Sub", "d", ["x", "one"], ["d"]), Node("Sub", "e", ["c", "one"], ["e"])],
                        ["x"], ["d", "e"], {"one": np.ones((1, 4), np.float32), "c": c},
                        keep_float=("c",) if keep else ())
    d, e = Executor(graph, "float16").run([x])
    assert np.all(d == 2.0 ** -12)
    assert np.all(e == (2.0 ** -12 if keep else 0.0))  # rounded to float16, 1 + 2^-12 becomes 1


def test_value_preserving_ops_round_a_float32_input_as_the_simulator_does():
    # a Reshape or Relu opening the graph rounds the float32 input (corpus dist2bbox, relu_input);
    # the compiler's identity conv passes it on unrounded, to the op after it
    from rknnlite.backends.software.executor import Executor

    x = np.full((1, 4), 1 + 2 ** -12, np.float32)  # not a float16 value
    nodes = [Node("Reshape", "r", ["x", "shape"], ["r"]), Node("Identity", "i", ["x"], ["i"]),
             Node("Relu", "ir", ["i"], ["ir"]), Node("Sub", "is", ["i", "one"], ["is"])]
    graph = VendorGraph(nodes, ["x"], ["r", "ir", "is"],
                        {"shape": np.array([4, 1], np.int64), "one": np.ones((1, 4), np.float32)}, keep_float=("x",))
    r, ir, sub = Executor(graph, "float16").run([x])
    assert np.all(r == 1.0) and np.all(ir == 1.0)  # rounded to float16
    assert np.all(sub == 2.0 ** -12)  # computed from the unrounded identity


# -- inspect --------------------------------------------------------------------------------------


def test_inspect_lists_vendor_ops_and_support(vendor_fixtures, tmp_path, capsys):
    from rknnlite.cli import main

    assert main(["inspect", str(vendor_fixtures / "rknn" / "convnet_i8.rknn")]) == 0
    text = capsys.readouterr().out
    assert "vendor ops" in text
    assert any(line.split()[:1] == ["exSoftmax13"] and line.rstrip().endswith("supported") for line in text.splitlines())
    assert "off-board: runs on the software backend" in text
    path = _doctored(vendor_fixtures, tmp_path, "add_mul_fp16", lambda d: _rename_op(d, b"Add", b"Axx"))
    assert main(["inspect", "--json", path]) == 0
    ops = {v["op"]: v for v in json.loads(capsys.readouterr().out)["vendor_ops"]}
    assert ops["Axx"]["off_board"] is False and ops["Mul"]["off_board"] is True
    assert set(ops) - {"Axx"} <= SUPPORTED_OPS
    path = _doctored(vendor_fixtures, tmp_path, "convnet_fp16", _patch_slot(1, 1, 7, 99))
    assert main(["inspect", "--json", path]) == 0  # an unknown parameter union: ops listed, file refused
    summary = json.loads(capsys.readouterr().out)
    assert {v["op"] for v in summary["vendor_ops"]} >= {"ConvRelu", "exSoftmax13"}
    assert summary["off_board"]["runs"] is False and "parameter-union type code 99" in summary["off_board"]["error"]


def test_vendor_graph_decodes_every_fixture(vendor_rknn_files):
    for path in vendor_rknn_files:
        loaded = load_model(str(path))
        vf = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, str(path))
        assert len(vf.subgraphs) == loaded.model.num_subgraphs
        ops = [n.op for n in vf.subgraphs[0].nodes]
        assert ops[0] == "InputOperator" and ops[-1] == "OutputOperator"


# -- the vendor corpus (tests/data/vendor, built with RKNN-Toolkit2 2.5.0; see its manifest.json) --------

FIELD = CORPUS.parent / "ultralytics"  # vendor files exported by Ultralytics' own exporter

def _corpus():
    return sorted(json.loads((CORPUS / "manifest.json").read_text())["files"].items())


#: corpus files refused at load, each with what its refusal names (tests/test_vendor_validated.py)
CORPUS_REFUSED = {
    "two_input_rv1126b_i8_tk232": "ConvAddRelu in int8 rv1126b files from RKNN-Toolkit2 2.3.2 was not validated",
    # cosine 0.99989, 99.17 % within one step against the simulator: below the bounds
    "affine_ops_rv1126b_i8_tk232": "BatchNormalization, BatchNormalizationRelu, ConvHardSwish in int8 rv1126b files "
                                   "from RKNN-Toolkit2 2.3.2 were not validated",
    "dist2bbox_i8": "int8 constant 'c5' in NC1HWC2 layout",
    "dist2bbox_i8_tk232": "int8 constant 'c5' in NC1HWC2 layout",
    "wide_dilated_i8": "an exDataConvert without BSON",
    "conv_relu_add_i8": "an int8 ConvReluAdd: the simulator puts the Relu's output on an int8 grid",
    "standalone_elu_rk3588_i8": "an int8 Elu: its lookup table's index map was not decoded",
    "lstm_fp16_tk232": "an LSTM without a parameter table",
    # run with their custom op registered in tests/test_vendor_custom_ops.py
    "cst_softmax_fp16": "'cstChannelSoftmax' is a custom op: register it",
    "cst_softmax_i8": "'cstChannelSoftmax' is a custom op: register it",
}


@pytest.mark.parametrize("name, entry", _corpus())
def test_corpus_file_runs_like_the_simulator(name, entry):
    path = str(CORPUS / entry["file"])
    if name in CORPUS_REFUSED:
        with pytest.raises(ModelInvalidError, match=CORPUS_REFUSED[name]):
            rknnlite.Context(path, backend="software")
        return
    data = corpus_arrays(name)
    inputs = [data[f"in{k}"] for k in range(len(entry["inputs"]))]
    with rknnlite.Context(path, backend="software") as ctx:
        outputs = ctx.run(inputs, data_format="nchw")
    assert len(outputs) == len(entry["outputs"])
    for k, y in enumerate(outputs):
        ref = data[f"out{k}"].reshape(y.shape)
        if entry["variant"] == "fp16":
            # bit-exact but for float32-vs-float64 accumulation: at most a float16 ulp here and there (of the
            # largest output where a long reduction, such as exSDPAttention's, flips a rounding there)
            largest = np.abs(ref).max()
            bound = max(2 ** -9 * max(1.0, largest / 4), float(np.spacing(np.float16(largest))))
            assert _cos(y, ref) >= 0.99999 and np.abs(y - ref).max() <= bound
        elif ref.dtype.kind in "iu":  # ArgMax labels: a one-step difference in a tie may move one (evidence.py)
            assert np.mean(y == ref) >= 0.99
        else:
            assert _cos(y, ref) >= 0.9999


#: The figures docs/vendor-offboard.md states, per file (corpus stems; ``fixture_<model>_<variant>``
#: for tests/data/rknn-toolkit2, every case together): (max |diff| to 3 significant digits, max
#: |diff| in quantization steps of the output's scale (int8 outputs), in float16 ulps (float
#: outputs) or in labels (int64 outputs), percentage of exactly equal values), all outputs
#: together, as its "Exactness per file" table writes them.  Each is the worst figure measured on
#: the CPUs this runs on (AMD EPYC with AVX2, Intel Xeon with AVX-512): a file's float32 sums run in
#: another order on each (the conv micro-kernels, BLAS and numpy pick their SIMD per CPU), which
#: moves float16 ulps and int8 rounding ties, so the test takes them as bounds.  Keep the table and
#: the docs equal: tighten the code or loosen both.
FIDELITY = {
    "add_relu_fp16": ("0", 0, "100.00"), "add_relu_i8": ("0", 0, "100.00"),
    "argmax_fp16": ("0", 0, "100.00"), "argmax_i8": ("0", 0, "100.00"),
    "c2f_fp16": ("0.000488", 1, "99.90"), "c2f_i8": ("0.0663", 2, "96.90"),
    "conv_add_swish_fp16": ("0", 0, "100.00"), "conv_add_swish_i8": ("0.119", 2, "98.39"),
    "deconv_k2s2_fp16": ("4.77e-07", 1, "99.99"), "deconv_k2s2_i8": ("0.0956", 1, "99.91"),
    "deconv_k4s2_fp16": ("9.54e-07", 1, "99.99"), "deconv_k4s2_i8": ("0.071", 1, "99.98"),
    "avgpool_fp16": ("0", 0, "100.00"), "avgpool_i8": ("0.0985", 1, "95.23"),
    "avgpool_i8_layer": ("0.0985", 1, "95.16"), "bench_fp16": ("0.00195", 35, "43.75"),
    "bench_i8": ("0.0506", 1, "75.00"),
    "concat_fp16": ("0.000244", 1, "99.98"), "concat_i8": ("0.113", 1, "99.96"),
    "concat_i8_layer": ("0", 0, "100.00"), "conv_add_relu_fp16": ("0.000488", 3, "99.93"),
    "conv_add_relu_i8": ("0.0736", 1, "99.05"), "conv_add_relu_i8_layer": ("0.0736", 1, "99.80"),
    "conv_clip_fp16": ("0", 0, "100.00"), "conv_clip_i8": ("0.0118", 1, "99.94"),
    "conv_clip_rk3576_fp16": ("0", 0, "100.00"), "conv_clip_rk3576_i8": ("0.0118", 1, "99.65"),
    "conv_hardsigmoid_fp16": ("0.000244", 1, "99.59"), "conv_hardsigmoid_i8": ("0.00392", 1, "99.86"),
    "conv_hardsigmoid_rk3576_fp16": ("0", 0, "100.00"), "conv_hardsigmoid_rk3576_i8": ("0.00392", 1, "99.77"),
    "conv_hardswish_fp16": ("7.63e-06", 1, "99.96"), "conv_hardswish_i8": ("0.0434", 1, "99.90"),
    "conv_leaky01_fp16": ("0.000244", 1, "99.96"), "conv_leaky01_i8": ("0.0564", 1, "99.86"),
    "conv_leaky03_fp16": ("7.63e-06", 1, "99.98"), "conv_leaky03_i8": ("0.0641", 1, "99.96"),
    "conv_abs_fp16": ("0.00195", 1, "99.96"), "conv_abs_i8": ("0.0525", 1, "99.94"),
    "conv_prelu_fp16": ("0.00195", 1, "99.77"), "conv_prelu_i8": ("0.0854", 1, "99.94"),
    "conv_leaky_rk3576_fp16": ("0.000244", 1, "99.96"), "conv_leaky_rk3576_i8": ("0.0564", 1, "99.34"),
    "conv_relu6_fp16": ("4.77e-07", 1, "99.98"), "conv_relu6_fp16_tk220": ("4.77e-07", 1, "99.98"),
    "conv_relu6_fp16_tk230": ("4.77e-07", 1, "99.98"), "conv_relu6_fp16_tk232": ("4.77e-07", 1, "99.98"),
    "conv_relu6_i8": ("0.0235", 1, "99.90"), "conv_relu6_i8_layer": ("0.0235", 1, "99.94"),
    "conv_relu6_i8_layer_tk220": ("0.0235", 1, "99.94"), "conv_relu6_i8_layer_tk230": ("0.0235", 1, "99.94"),
    "conv_relu6_i8_layer_tk232": ("0.0235", 1, "99.94"), "conv_relu6_i8_tk220": ("0.0235", 1, "99.90"),
    "conv_relu6_i8_tk230": ("0.0235", 1, "99.90"), "conv_relu6_i8_tk232": ("0.0235", 1, "99.90"),
    "convnet_rk3576_i8_layer": ("0.0649", 1, "97.03"), "convnet_rv1126b_i8_layer": ("0.0649", 1, "97.03"),
    "conv_relu6_rk3576_i8": ("0.0235", 1, "99.49"), "conv_sigmoid_fp16": ("1.53e-05", 1, "99.80"),
    "conv_sigmoid_fp16_tk220": ("1.53e-05", 1, "99.80"), "conv_sigmoid_fp16_tk230": ("1.53e-05", 1, "99.80"),
    "conv_sigmoid_fp16_tk232": ("1.53e-05", 1, "99.80"), "conv_sigmoid_i8": ("0.00392", 1, "99.92"),
    "conv_sigmoid_i8_layer": ("0.00392", 1, "99.86"), "conv_sigmoid_i8_layer_tk220": ("0.00392", 1, "99.86"),
    "conv_sigmoid_i8_layer_tk230": ("0.00392", 1, "99.86"),
    "conv_sigmoid_i8_layer_tk232": ("0.00392", 1, "99.86"), "conv_sigmoid_i8_tk220": ("0.00392", 1, "99.92"),
    "conv_sigmoid_i8_tk230": ("0.00392", 1, "99.92"), "conv_sigmoid_i8_tk232": ("0.00392", 1, "99.92"),
    "conv_swish_fp16": ("0", 0, "100.00"), "conv_swish_i8": ("0.0536", 1, "99.24"),
    "convnet_fp16": ("0.000244", 1, "99.38"), "convnet_fp16_tk220": ("0.000244", 1, "99.38"),
    "convnet_fp16_tk230": ("0.000244", 1, "99.38"), "convnet_fp16_tk232": ("0.000244", 1, "99.38"),
    "convnet_i8": ("0.0649", 1, "98.12"), "convnet_i8_layer": ("0.0649", 1, "98.59"),
    "convnet_i8_layer_tk220": ("0.0649", 1, "98.59"), "convnet_i8_layer_tk230": ("0.0649", 1, "98.59"),
    "convnet_i8_layer_tk232": ("0.0649", 1, "98.59"), "convnet_i8_tk220": ("0.0649", 1, "98.12"),
    "convnet_i8_tk230": ("0.0649", 1, "98.12"), "convnet_i8_tk232": ("0.0649", 1, "98.12"),
    "convnet_rk3562_fp16": ("0.000244", 1, "99.38"), "convnet_rk3562_i8": ("0.0649", 1, "98.12"), "convnet_rk3566_fp16": ("0.000244", 1, "99.38"),
    "convnet_rk3566_fp16_tk220": ("0.000244", 1, "99.38"),
    "convnet_rk3566_fp16_tk230": ("0.000244", 1, "99.38"),
    "convnet_rk3566_fp16_tk232": ("0.000244", 1, "99.38"), "convnet_rk3566_i8": ("0.0649", 1, "98.12"),
    "convnet_rk3566_i8_tk220": ("0.0649", 1, "98.12"), "convnet_rk3566_i8_tk230": ("0.0649", 1, "98.12"),
    "convnet_rk3566_i8_tk232": ("0.0649", 1, "98.12"), "convnet_rk3568_fp16": ("0.000244", 1, "99.38"),
    "convnet_rk3568_i8": ("0.0649", 1, "98.12"), "convnet_rk3576_fp16": ("0.000244", 1, "99.38"),
    "convnet_rk3576_fp16_tk220": ("0.000244", 1, "99.38"),
    "convnet_rk3576_fp16_tk230": ("0.000244", 1, "99.38"),
    "convnet_rk3576_fp16_tk232": ("0.000244", 1, "99.38"), "convnet_rk3576_i8": ("0.0649", 1, "93.59"),
    "convnet_rk3576_i8_tk220": ("0.0649", 1, "93.59"), "convnet_rk3576_i8_tk230": ("0.0649", 1, "93.59"),
    "convnet_rk3576_i8_tk232": ("0.0649", 1, "93.59"), "convnet_rv1126b_fp16": ("0.000244", 1, "99.38"),
    "convnet_rv1126b_fp16_tk232": ("0.000244", 1, "99.38"), "convnet_rv1126b_i8": ("0.0649", 1, "93.59"),
    "convnet_rv1126b_i8_tk232": ("0.0649", 1, "93.59"), "gap_fp16": ("0", 0, "100.00"),
    "gap_i8": ("0", 0, "100.00"), "maxpool_fp16": ("0", 0, "100.00"), "maxpool_i8": ("0", 0, "100.00"),
    "mbblock_fp16": ("1.79e-07", 3, "99.95"), "mbblock_fp16_tk220": ("1.79e-07", 3, "99.95"),
    "mbblock_fp16_tk230": ("1.79e-07", 3, "99.95"), "mbblock_fp16_tk232": ("1.79e-07", 3, "99.95"),
    "mbblock_i8": ("0.0927", 1, "99.07"), "mbblock_i8_layer": ("0.0927", 1, "99.76"),
    "mbblock_i8_layer_tk220": ("0.0927", 1, "99.76"), "mbblock_i8_layer_tk230": ("0.0927", 1, "99.76"),
    "mbblock_i8_layer_tk232": ("0.0927", 1, "99.76"), "mbblock_i8_tk220": ("0.0927", 1, "99.07"),
    "mbblock_i8_tk230": ("0.0927", 1, "99.07"), "mbblock_i8_tk232": ("0.0927", 1, "99.07"),
    "reshape_fp16": ("0", 0, "100.00"), "reshape_i8": ("0", 0, "100.00"),
    "resize_bilinear_fp16": ("0", 0, "100.00"), "resize_bilinear_i8": ("0.0893", 1, "98.69"),
    "resize_nearest_fp16": ("3.05e-05", 1, "99.98"), "resize_nearest_i8": ("0.085", 1, "99.94"),
    "sigmoid_mul_fp16": ("0", 0, "100.00"), "sigmoid_mul_i8": ("0", 0, "100.00"),
    "slice_fp16": ("3.81e-06", 1, "99.90"), "slice_i8": ("0.0723", 1, "99.90"),
    "softmax_fp16": ("0", 0, "100.00"), "softmax_fp16_tk220": ("0", 0, "100.00"),
    "softmax_fp16_tk230": ("0", 0, "100.00"), "softmax_fp16_tk232": ("0", 0, "100.00"),
    "softmax_i8": ("0.0198", 162, "99.59"), "softmax_i8_tk220": ("0.0198", 162, "99.59"),
    "softmax_i8_tk230": ("0.0198", 162, "99.59"), "softmax_i8_tk232": ("0.0198", 162, "99.59"),
    "split_fp16": ("0", 0, "100.00"), "split_i8": ("0.0889", 1, "99.97"),
    "split_unused_fp16": ("0", 0, "100.00"), "split_unused_i8": ("0.106", 2, "99.78"), "sub_fp16": ("0", 0, "100.00"),
    "sub_i8": ("0", 0, "100.00"), "transpose_fp16": ("0.000977", 1, "99.98"),
    "transpose_i8": ("0.0944", 1, "99.98"), "two_input_fp16": ("0", 0, "100.00"),
    "two_input_fp16_tk220": ("0", 0, "100.00"), "two_input_fp16_tk230": ("0", 0, "100.00"),
    "two_input_fp16_tk232": ("0", 0, "100.00"), "two_input_i8": ("0.138", 1, "99.71"),
    "two_input_i8_layer": ("0", 0, "100.00"), "two_input_i8_layer_tk220": ("0", 0, "100.00"),
    "two_input_i8_layer_tk230": ("0", 0, "100.00"), "two_input_i8_layer_tk232": ("0", 0, "100.00"),
    "two_input_i8_tk220": ("0.138", 1, "99.71"), "two_input_i8_tk230": ("0.138", 1, "99.71"),
    "two_input_i8_tk232": ("0.138", 1, "99.71"), "two_input_rk3562_fp16": ("0", 0, "100.00"),
    "two_input_rk3562_i8": ("0.138", 1, "99.71"),
    "two_input_rk3566_fp16": ("0", 0, "100.00"), "two_input_rk3566_fp16_tk220": ("0", 0, "100.00"),
    "two_input_rk3566_fp16_tk230": ("0", 0, "100.00"), "two_input_rk3566_fp16_tk232": ("0", 0, "100.00"),
    "two_input_rk3566_i8": ("0.138", 1, "99.71"), "two_input_rk3566_i8_tk220": ("0.138", 1, "99.71"),
    "two_input_rk3566_i8_tk230": ("0.138", 1, "99.71"), "two_input_rk3566_i8_tk232": ("0.138", 1, "99.71"),
    "two_input_rv1126b_fp16": ("0", 0, "100.00"), "two_input_rv1126b_fp16_tk232": ("0", 0, "100.00"),
    "two_input_rv1126b_i8": ("0.138", 1, "98.83"), "fixture_convnet_fp16": ("0", 0, "100.00"),
    "fixture_convnet_i8": ("0", 0, "100.00"), "fixture_add_mul_fp16": ("0", 0, "100.00"),
    "fixture_add_mul_i8": ("0", 0, "100.00"), "fixture_dyn_conv_fp16": ("0.000977", 1, "99.98"),
    "fixture_dyn_conv_i8": ("0.0412", 1, "99.82"), "two_input_rv1126b_i8_tk232": ("0.968", 7, "82.52"),
    # Ultralytics' export of a YOLOv8n (tests/data/ultralytics): a box centre near 0 reaches 16 ulps
    # (anchor - distance cancels), the scores at most 11 ulps (0.00098)
    "yolov8n-rk3588": ("0.0938", 16, "66.54"),
    "dist2bbox_fp16": ("0", 0, "100.00"), "dist2bbox_fp16_tk232": ("0", 0, "100.00"),
    # YOLO11's attention: its float32 reductions round a few outputs differently
    "psa_attention_fp16": ("0.00195", 3, "99.12"), "psa_attention_fp16_tk232": ("0.00195", 3, "99.12"),
    # int8: 97.02 % on AMD EPYC; the attention's float32 sums run in another order on another CPU
    "psa_attention_i8": ("0.0991", 1, "96.80"), "psa_attention_i8_tk232": ("0.0991", 1, "96.80"),
    # BatchNormalization(Relu): the file holds the scale in float16, the simulator multiplies by the ONNX
    # model's float32 one (one ulp at the BatchNormalization on about half the values, which the next two
    # convs spread; an output near 0 counts 181 ulps of 0.0156, 8.9e-4 of the output's scale)
    "affine_ops_fp16": ("0.0156", 181, "41.26"), "affine_ops_i8": ("0.118", 1, "98.19"),
    # int8 exSDPAttention with zero points 0: q unconverted (64 tokens), v and the output (their registers
    # carried over)
    "encoder_layer_kl_i8": ("0.0603", 2, "89.21"), "psa_attention_kl_i8": ("0.0924", 1, "90.04"),
    "conv_add_hardswish_fp16": ("0", 0, "100.00"), "conv_add_hardswish_i8": ("0.0744", 1, "99.95"),
    "conv_add_hardswish_fp16_tk232": ("0", 0, "100.00"), "conv_add_hardswish_i8_tk232": ("0.0744", 1, "99.78"),
    "relu_input_fp16": ("2.38e-07", 1, "99.95"), "relu_input_i8": ("0", 0, "100.00"),
    "gemm_hardswish_fp16": ("0", 0, "100.00"), "gemm_hardswish_i8": ("0", 0, "100.00"),
    # rk3566 and rk3568: the op families ResNet and MobileNetV2 need there
    "maxpool_rk3566_fp16": ("0", 0, "100.00"), "maxpool_rk3566_i8": ("0", 0, "100.00"),
    "reshape_rk3566_fp16": ("0", 0, "100.00"), "reshape_rk3566_i8": ("0", 0, "100.00"),
    "mbblock_rk3566_fp16": ("1.79e-07", 3, "99.95"), "mbblock_rk3566_i8": ("0.0927", 1, "99.07"),
    "conv_relu6_rk3566_fp16": ("4.77e-07", 1, "99.98"), "conv_relu6_rk3566_i8": ("0.0235", 1, "99.90"),
    "maxpool_rk3568_fp16": ("0", 0, "100.00"), "maxpool_rk3568_i8": ("0", 0, "100.00"),
    "reshape_rk3568_fp16": ("0", 0, "100.00"), "reshape_rk3568_i8": ("0", 0, "100.00"),
    "mbblock_rk3568_fp16": ("1.79e-07", 3, "99.95"), "mbblock_rk3568_i8": ("0.0927", 1, "99.07"),
    "conv_relu6_rk3568_fp16": ("4.77e-07", 1, "99.98"), "conv_relu6_rk3568_i8": ("0.0235", 1, "99.90"),
    "add_relu_rk3566_fp16": ("0", 0, "100.00"),
    "add_relu_rk3566_i8": ("0", 0, "100.00"),
    "c2f_rk3566_fp16": ("0.000488", 1, "99.90"),
    "add_relu_rk3568_fp16": ("0", 0, "100.00"),
    "add_relu_rk3568_i8": ("0", 0, "100.00"),
    "c2f_rk3568_fp16": ("0.000488", 1, "99.90"),
    "relu_input_fp16_tk232": ("2.38e-07", 1, "99.95"), "relu_input_i8_tk232": ("0", 0, "100.00"),
    # Pad (measured on the Intel Xeon only): pad_value's first conv rounds one value a float16 ulp off the
    # simulator's, which the second conv spreads (14 ulps of an output near 0.07)
    "pad_zero_fp16": ("0", 0, "100.00"), "pad_zero_i8": ("0.063", 1, "99.95"),
    "pad_value_fp16": ("0.00781", 14, "98.79"), "pad_value_i8": ("0.104", 1, "99.87"),
    "pad_reflect_fp16": ("0.00195", 1, "99.96"), "pad_reflect_i8": ("0.144", 1, "99.74"),
    "pad_edge_fp16": ("0.00195", 1, "99.91"), "pad_edge_i8": ("0.119", 1, "99.35"),
    "dilated_pad_fp16": ("0", 0, "100.00"), "dilated_pad_i8": ("0", 0, "100.00"),
    # the compiler's split of a wide conv: the simulator computes the unsplit conv (summing the branches'
    # float16-rounded results instead: 401 of 1024 outputs off, up to 2 ulps)
    "wide_dilated_fp16": ("9.54e-07", 1, "99.90"),
    "resize_sizes_fp16": ("0", 0, "100.00"), "resize_sizes_i8": ("0.0764", 1, "98.83"),
    # a transformer's op types
    "layernorm13_fp16": ("0", 0, "100.00"), "layernorm13_i8": ("0.0495", 1, "99.61"),
    "layernorm17_fp16": ("0", 0, "100.00"), "linear_fp16": ("0", 0, "100.00"),
    "matmul_act_fp16": ("0", 0, "100.00"), "matmul_act_i8": ("0", 0, "100.00"),
    "linear_gelu_fp16": ("0", 0, "100.00"),
    "linear_gelu_i8": ("0.0157", 1, "99.61"),
    # the transformer_like architecture end to end: one-ulp conv, attention and GELU differences
    # (float32 sums in another order) carried through the residuals
    "encoder_layer_fp16": ("0.00195", 16, "88.48"),
    "gather_fp16": ("0", 0, "100.00"), "gather_i8": ("0", 0, "100.00"),
    # an embedding lookup (Gather on the CPU, int64 token ids), then a Linear (its conv: 1 ulp)
    "embedding_fp16": ("1.53e-05", 1, "99.61"),
}
#: corpus files refused unless RKNNLITE_VENDOR_UNVALIDATED=1, with the docs' percentage of values
#: within one step and cosine (5 decimals)
UNVALIDATED = {"two_input_rv1126b_i8_tk232": ("99.71", "0.99989")}
#: docs/vendor-offboard.md: "Cosine similarity is at least 0.99994 everywhere" (validated int8 files)
INT8_MIN_COSINE = 0.99994
DOC = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs" / "vendor-offboard.md"


def _fp16_order(x: np.ndarray) -> np.ndarray:
    """float16 values as integers in value order, so that a difference counts ulps."""
    bits = np.asarray(x, np.float16).view(np.int16).astype(np.int32)
    return np.where(bits < 0, -(bits & 0x7FFF), bits)


def _fidelity_runs(vendor_fixtures, stem: str):
    """[(output attr, output, simulator output)] of every output of every case of ``stem``."""
    if not stem.startswith("fixture_"):
        path = CORPUS / f"{stem}.rknn"
        if not path.exists():  # a field export: tests/data/ultralytics/<name>_rknn_model/<stem>.rknn
            (path,) = FIELD.rglob(f"{stem}.rknn")
        data = MODELS.stored_arrays(path.with_suffix(".npz"))
        with rknnlite.Context(str(path), backend="software") as ctx:
            outputs = ctx.run([data[f"in{k}"] for k in range(len(ctx.inputs))], data_format="nchw")
            return [(a, y, data[f"out{k}"].reshape(y.shape)) for k, (a, y) in enumerate(zip(ctx.outputs, outputs))]
    model, variant = stem[len("fixture_"):].rsplit("_", 1)
    runs = []
    for m, case, n_in, n_out in CASES:
        if m != model:
            continue
        inputs = _inputs(vendor_fixtures, model, case, n_in)
        with _open(vendor_fixtures, f"{model}_{variant}") as ctx:
            if model == "dyn_conv":
                ctx.set_input_shapes([ctx.inputs[0].replace(fmt=TensorFormat.NCHW, dims=inputs[0].shape)])
            outputs = ctx.run(inputs, data_format="nchw")
            runs += zip(ctx.outputs, outputs, _reference(vendor_fixtures, model, variant, case, n_out))
    return runs


def _figures(vendor_fixtures, stem: str) -> tuple:
    """(max |diff| to 3 significant digits, max units, percentage exact) of ``stem`` as FIDELITY
    writes them, checking each output's dtype and cosine on the way (an UNVALIDATED stem needs
    RKNNLITE_VENDOR_UNVALIDATED=1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnvalidatedVendorFileWarning)
        runs = _fidelity_runs(vendor_fixtures, stem)
    units = []
    for attr, y, ref in runs:
        assert y.shape == ref.shape
        if attr.type == TensorType.INT8:  # int8 steps of the output's scale
            units.append(np.rint(np.abs(y.astype(np.float64) - ref) / attr.scale).astype(np.int64).ravel())
            if stem in UNVALIDATED:
                assert f"{_cos(y, ref):.5f}" == UNVALIDATED[stem][1]
            else:
                assert _cos(y, ref) >= INT8_MIN_COSINE
        elif y.dtype.kind != "f":  # integer outputs (ArgMax's int64 labels): the difference itself
            units.append(np.abs(y.astype(np.int64) - ref.astype(np.int64)).ravel())
        else:  # float16 outputs (both sides hold float16 values): ulps apart
            assert np.array_equal(y.astype(np.float16).astype(np.float32), y)
            units.append(np.abs(_fp16_order(y) - _fp16_order(ref)).ravel())
    units = np.concatenate(units)
    if stem in UNVALIDATED:
        assert f"{100 * np.mean(units <= 1):.2f}" == UNVALIDATED[stem][0]
    return (f"{max(float(np.abs(y.astype(np.float64) - ref).max()) for _, y, ref in runs):.3g}",
            int(units.max()), f"{100 * np.mean(units == 0):.2f}")


@pytest.mark.parametrize("stem", sorted(FIDELITY))
def test_vendor_file_fidelity_is_the_documented_figure(vendor_fixtures, stem, monkeypatch):
    if stem in UNVALIDATED:
        monkeypatch.setenv("RKNNLITE_VENDOR_UNVALIDATED", "1")
    max_abs, max_units, exact = _figures(vendor_fixtures, stem)
    bound_abs, bound_units, floor_exact = FIDELITY[stem]
    assert float(max_abs) <= float(bound_abs) and max_units <= bound_units and float(exact) >= float(floor_exact)


def _doc_table(title: str) -> list:
    """The body rows (lists of cells) of the first Markdown table after heading ``title`` in DOC."""
    lines = DOC.read_text().split(title, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[2:]


def test_the_docs_exactness_table_is_the_asserted_one():
    documented = {}
    for name, *cells in _doc_table("### Exactness per file"):
        for variant, cell in zip(("fp16", "i8", "i8_layer"), cells):
            if cell != "—":
                max_abs, units, exact = (part.strip() for part in cell.split(";"))
                documented[name.strip("`").replace("*", variant)] = (max_abs, int(units.split()[0]), exact.rstrip(" %"))
    assert documented == FIDELITY


def test_the_docs_max_abs_figures_are_asserted_ones():
    import re

    # the files of the rows marked ¹ are not in the repository (see the table's footnote)
    cells = [row[1] for row in _doc_table("## Measured fidelity") if "¹" not in row[0]]
    figures = {f for cell in cells for f in re.sub(r"\([^)]*\)", " ", cell).replace("/", " ").split()}
    assert figures <= {max_abs for max_abs, _, _ in FIDELITY.values()}
    within, cosine = UNVALIDATED["two_input_rv1126b_i8_tk232"]
    assert f"{FIDELITY['two_input_rv1126b_i8_tk232'][2]} % of its outputs exactly and {within} % within one step " \
        f"(cosine {cosine}" in " ".join(DOC.read_text().split())


def _corpus_run(stem: str, path=None):
    """(outputs, simulator outputs) of corpus file ``stem`` (or of ``path``, a doctored copy)."""
    data = corpus_arrays(stem)
    entry = dict(_corpus())[stem]
    inputs = [data[f"in{k}"] for k in range(len(entry["inputs"]))]
    with rknnlite.Context(str(path or CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outputs = ctx.run(inputs, data_format="nchw")
    return outputs, [data[f"out{k}"].reshape(y.shape) for k, y in enumerate(outputs)]


def _doctored_corpus(tmp_path, stem: str, patch) -> str:
    return doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_conv_add_relu_is_conv_then_residual_add_then_relu(variant):
    stem = f"conv_add_relu_{variant}"
    model = lowered(stem)
    assert model.vendor_ops == ("InputOperator", "ConvRelu", "ConvAddRelu", "OutputOperator")
    nodes = [n for n in model.graph.nodes if n.name == "Conv:Conv16_ConvAddRelu"]
    if variant == "fp16":
        assert [n.op for n in nodes] == ["Conv", "Add", "Relu"]
        assert nodes[1].inputs == [nodes[0].outputs[0], "relu_5"]  # the residual: the output two convs back
    else:  # the integer accumulator, then acc * step + residual, Relu and the output's grid in one pass
        assert [n.op for n in nodes] == ["Conv", "VendorAddRequant"]
        assert nodes[1].inputs == [nodes[0].outputs[0], "relu_5"] and nodes[1].attrs["relu"] is True
        # its input's codes come straight from the previous conv's requantization (fuse_codes)
        (writer,) = [n for n in model.graph.nodes if n.outputs == [nodes[0].inputs[0]]]
        assert writer.op == "VendorRequant" and writer.attrs["scale"] == 1.0
    assert nodes[-1].outputs == ["y"]
    (y,), (ref,) = _corpus_run(stem)
    assert y.min() == 0.0 and ref.min() == 0.0 and (y == 0).mean() > 0.05  # the relu clips
    if variant == "fp16":
        assert np.abs(y - ref).max() <= 2 ** -9 * max(1.0, np.abs(ref).max() / 4)
    else:
        assert _cos(y, ref) >= 0.99999


def test_conv_add_relu_needs_its_residual(monkeypatch):
    # the residual count is checked: read as a conv without one (ConvRelu), the node is refused by name
    from rknnlite.model.rknn_graph import lower as lower_mod

    loaded = load_model(str(CORPUS / "conv_add_relu_fp16.rknn"))
    monkeypatch.setitem(lower_mod._CONV_ACTIVATIONS, "ConvAddRelu", "Relu")
    with pytest.raises(ModelInvalidError, match=r"Conv16_ConvAddRelu.* has 1 extra activation inputs \['relu_5'\]"):
        lower_rockchip(loaded.payload, loaded.model)


def test_fp16_standalone_sigmoid_is_a_rounded_float_sigmoid():
    model = lowered("sigmoid_mul_fp16")
    assert [n.op for n in model.graph.nodes] == ["Add", "Sigmoid", "Mul"]
    (y,), (ref,) = _corpus_run("sigmoid_mul_fp16")
    np.testing.assert_array_equal(y, ref)  # bit-exact: Add, Sigmoid and Mul each rounded to fp16


def test_int8_standalone_sigmoid_runs_the_files_lookup_table():
    model = lowered("sigmoid_mul_i8")
    assert [n.op for n in model.graph.nodes] == ["Add", "VendorCodes", "VendorLutActivation", "Mul"]
    lut = model.graph.nodes[2].attrs
    assert len(lut["le_table"]) == len(lut["lo_table"]) == 513
    assert lut["le_table"][-1] == lut["lo_table"][0] == 16384  # sigmoid(0) = 0.5 at 1.0 = 32768
    # the index map takes the codes q - zp: the file's offset A = -zp * M folds the zero point in
    assert lut["index_offset"] == 0.0 and lut["out_zero_point"] == -128
    (y,), (ref,) = _corpus_run("sigmoid_mul_i8")
    np.testing.assert_array_equal(y, ref)


def test_int8_standalone_sigmoid_reads_its_tables_from_the_file(tmp_path):
    # the same file with the lookup-table entries zeroed gives sigmoid 0 where the table is used
    path = _doctored_corpus(tmp_path, "sigmoid_mul_i8", patch_registers(0x1001, (0x4104,), lambda value: 0))
    (y,), (ref,) = _corpus_run("sigmoid_mul_i8", path)
    assert np.abs(y).max() < np.abs(ref).max() / 4


def test_int8_sigmoid_without_a_lookup_task_is_refused_by_name(tmp_path):
    # BN_CFG (0x4060) no longer says "lookup table" in the Sigmoid's DPU task
    path = _doctored_corpus(tmp_path, "sigmoid_mul_i8",
                            patch_registers(0x1001, (0x4060,), lambda value: 0x20041 if value == 0x20040 else value))
    with pytest.raises(ModelInvalidError, match=r"Sigmoid4.*no task of node 3 runs the lookup table"):
        rknnlite.Context(path, backend="software")
    (y,), (ref,) = _corpus_run("sigmoid_mul_i8")  # the real file still loads and runs
    np.testing.assert_array_equal(y, ref)


def test_int8_softmax_runs_in_float16_after_a_data_convert():
    model = lowered("softmax_i8")
    assert model.vendor_ops == ("InputOperator", "Conv", "exDataConvert", "exSoftmax13", "OutputOperator")
    assert [n.op for n in model.graph.nodes] == ["VendorCodes", "Conv", "VendorRequant", "Identity", "Softmax"]
    (y,), (ref,) = _corpus_run("softmax_i8")
    # rows of float16 probabilities: they sum to 1 within float16 rounding, as the simulator's do
    np.testing.assert_allclose(y.sum(axis=1), 1.0, atol=2 ** -10)
    np.testing.assert_allclose(ref.sum(axis=1), 1.0, atol=2 ** -10)
    assert _cos(y, ref) >= 0.99999


def test_fp16_activation_registers():
    from rknnlite.model.rknn_graph.regcmd import TARGET_DPU, fused_activation

    def regs(**values):
        return {(TARGET_DPU, int(k[1:], 16)): v for k, v in values.items()}

    leaky = regs(x4060=0x62, x4068=0x34CD0000)
    assert fused_activation(leaky, "LeakyRelu", "n")["alpha"] == pytest.approx(0.3, abs=1e-3)
    assert fused_activation(regs(x4060=0x92, x4064=0, x406c=0x40C00000), "Clip", "n") == {"min": 0.0, "max": 6.0}
    shifted = regs(x4060=0x20090, x4064=0x3F800000, x406c=0x40400000, **{f"x{a:x}": 0xBF800000
                                                                         for a in range(0x4090, 0x40B0, 4)})
    assert fused_activation(shifted, "Clip", "n") == {"min": -1.0, "max": 2.0}
    with pytest.raises(ModelInvalidError, match="not a layout whose activation parameters were decoded"):
        fused_activation(regs(x4060=0x77, x4064=0, x4068=0, x406c=0), "Clip", "n")
    # int8 files: integers in accumulator units, the slope as round(alpha * 2^14)
    unit = 1 / 5798.0
    int8_clip = regs(x4060=0x20090, x4064=5798, x406c=17394, **{f"x{a:x}": (-5798) & 0xFFFFFFFF
                                                                  for a in range(0x4090, 0x40B0, 4)})
    got = fused_activation(int8_clip, "Clip", "n", unit)
    assert got["min"] == pytest.approx(-1.0) and got["max"] == pytest.approx(2.0)
    assert fused_activation(regs(x4060=0x62, x4068=0x06660000), "LeakyRelu", "n", unit)["alpha"] == 1638 / 16384
    with pytest.raises(ModelInvalidError, match="int8 file"):  # an int8 HardSigmoid is a lookup table
        fused_activation(regs(x4060=0x20040, x4064=0, x4068=0x70CD0000, x406c=0), "HardSigmoid", "n", unit)


SIXTH = float(np.float32(1 / 6))  # PyTorch's Hardsigmoid, as the float32 ONNX attribute


@pytest.mark.parametrize("alpha, beta", [(0.3, 0.4), (0.3, 0.6), (0.2, 0.5), (0.5, 0.5), (0.1, 0.9), (SIXTH, 0.5),
                                         (SIXTH, 0.4)])
def test_hard_sigmoid_parameters_from_its_lookup_index_map(alpha, beta):
    from rknnlite.model.rknn_graph.f2act import hard_sigmoid_of
    from rknnlite.model.rknn_graph.lower import _hard_sigmoid_params

    scale = float(np.float16(alpha * 32768))  # what the registers hold (docs/vendor-format-notes.md §1)
    offset = float(np.float32(scale * (beta - 0.5) / alpha))
    assert _hard_sigmoid_params(scale, offset) == (alpha, beta)
    # rk3576/rv1126b and rk3562: u = (x + A) * M
    assert hard_sigmoid_of(float(np.float32((beta - 0.5) / alpha)), scale) == {"alpha": alpha, "beta": beta}


@pytest.mark.parametrize("stem", ["mobilenetv3_ops_rk3566_fp16", "mobilenetv3_ops_rk3576_fp16_tk232",
                                  "mobilenetv3_ops_rv1126b_fp16"])
def test_a_float16_squeeze_excitation_gate_takes_pytorch_s_slope(stem):
    # The SE gate's HardSigmoid(1/6, 0.5): the registers hold f16(alpha * 32768), whose shortest
    # decimal is 0.1666; with it a quarter of the gate's values were an ulp off (77 % of the
    # file's outputs equal to the simulator's, 99.9 % with 1/6)
    outputs, sims = _corpus_run(stem)
    equal = np.concatenate([(np.asarray(y, np.float32) == sim).ravel() for y, sim in zip(outputs, sims)])
    assert equal.mean() >= 0.998


# -- tools/bench/bench_vendor.py (timings are never asserted) ----------------------------------------


def test_bench_vendor_runs_on_one_fixture():
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("onnxruntime")
    pytest.importorskip("threadpoolctl")
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "tools" / "bench" / "bench_vendor.py"), "--runs", "1",
                           "--models", "add_mul", "--variants", "fp16"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| add_mul_fp16 |")]
    assert len(rows) == 1 and rows[0].count("|") == 8


# -- rk3576 / rv1126b int8 fused Clip and LeakyRelu (their own DPU map, .f2act) ----------------------


def _patch_tensor(name: str, change):
    """A patch replacing the stored bytes of tensor ``name`` (first subgraph) by ``change(bytes)``
    (same length)."""
    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, name)
        new = change(bytes(view))
        assert len(new) == len(view)
        view[:] = new

    return patch


def _fused_part(stem: str):
    """(op, attrs, constant inputs) of the lowered node after the conv of a one-conv corpus
    file (int8: after its accumulator, VendorCodes and the integer Conv, scaled to real units)."""
    model = lowered(stem)
    *conv, act = model.graph.nodes
    assert [n.op for n in conv] in (["Conv"], ["VendorCodes", "Conv", "Mul"]) and act.inputs[0] == conv[-1].outputs[0]
    return act.op, act.attrs, [model.graph.constants[name].tolist() for name in act.inputs[1:]]


def test_rk3576_int8_leaky_relu_slope_comes_from_its_bncfg_tensor():
    assert _fused_part("conv_leaky_rk3576_i8") == ("LeakyRelu", {"alpha": 0.1}, [])
    (y,), (ref,) = _corpus_run("conv_leaky_rk3576_i8")
    assert _cos(y, ref) >= 0.9999
    assert np.mean(np.abs(y - ref) < 1e-6) > 0.99  # single int8 steps at .5 boundaries only


@pytest.mark.parametrize("stem, bounds", [
    ("conv_clip_rk3576_i8", [-1.0, 2.0]),  # shifted clamp: ACT_CFG 0x920, EW_ADD 0x4090, BnCfg words
    ("conv_relu6_rk3576_i8", [0.0, 6.0]),  # CLAMP_MAX in channel 0's accumulator unit (not s_in * max s_w: 6.76)
])
def test_rk3576_int8_clip_bounds_come_from_its_registers(stem, bounds):
    # a Clip commutes with the rounding: it is the requantization's code range
    codes, conv, requant = lowered(stem).graph.nodes
    assert (codes.op, conv.op, requant.op) == ("VendorCodes", "Conv", "VendorRequant")
    a = requant.attrs
    assert [(a["qmin"] - a["zero_point"]) * a["scale"], (a["qmax"] - a["zero_point"]) * a["scale"]] == \
        pytest.approx(bounds, abs=a["scale"] / 2)
    (y,), (ref,) = _corpus_run(stem)
    assert _cos(y, ref) >= 0.9999
    assert y.min() >= bounds[0] - 1e-6 and y.max() <= bounds[1] + 1e-6


@pytest.mark.parametrize("stem, reg, change, message", [
    ("conv_leaky_rk3576_i8", 0x4060, lambda v: 0x403, r"ConvLeakyRelu on rk3576/rv1126b: not the LeakyRelu layout"),
    ("conv_leaky_rk3576_i8", 0x4090, lambda v: 5, r"not the LeakyRelu layout .*0x4090=0x5"),
    ("conv_leaky_rk3576_i8", 0x406C, lambda v: 0, r"second clamp pair \['0x80000000', '0x7fffffff'\] is not the first"),
    ("conv_clip_rk3576_i8", 0x407C, lambda v: 0x010041C1, r"not a clamp layout"),
    ("conv_clip_rk3576_i8", 0x4090, lambda v: (v + 1) & 0xFFFFFFFF, r"words \[5798, .*-EW_ADD \(5797\)"),
    ("conv_clip_rk3576_i8", 0x4078, lambda v: v + 1, r"second clamp pair .* is not the first"),
    ("conv_relu6_rk3576_i8", 0x40AC, lambda v: (v + 1) & 0xFFFFFFFF, r"OUT_CVT_OFFSET is -127 but the output's zero "
                                                                     r"point is -128"),
    # the registers' weight scales are checked against the float16 copies the file stores
    ("conv_relu6_rk3576_i8", 0x40B4, lambda v: v + 1, r"registers \(OUT_CVT 0x40ac..0x40b4 and the bias blocks' "
                                                       r"multipliers\) give channel \d+ a weight scale of .*, the file "
                                                       r"stores .*register map is not the one decoded"),
    ("conv_leaky_rk3576_i8", 0x40B4, lambda v: v - 1, r"give channel \d+ a weight scale of .*, the file stores"),
    ("conv_leaky_rk3576_i8", 0x40B4, lambda v: 12, r"OUT_CVT_SHIFT \(0x40b4\) 12, below the 13 bits a LeakyRelu.s slope stage adds"),
    ("conv_relu6_rk3576_i8", 0x40B0, lambda v: v | 0x10000, r"OUT_CVT scale/shift 0x1[0-9a-f]{4}/0x[0-9a-f]+ "
                                                            r"\(0x40b0/0x40b4\) are not a 16-bit scale and a shift"),
    ("conv_clip_rk3576_fp16", 0x406C, lambda v: 0xBF800000, r"first clamp pair is not the second with its negative"),
    ("conv_clip_rk3576_fp16", 0x4060, lambda v: 0x920, r"fp16 ConvClip on rk3576/rv1126b: not the clamp layout"),
    ("conv_clip_rk3576_fp16", 0x4090, lambda v: 0x3F800000, r"without an add-back .*0x4090=0x3f800000"),
    ("conv_clip_rk3576_fp16", 0x4078, lambda v: 0x7FC00000, r"finite float32 bounds"),
    ("conv_leaky_rk3576_fp16", 0x4060, lambda v: 0x402, r"fp16 ConvLeakyRelu on rk3576/rv1126b: not a LeakyRelu"),
    ("conv_leaky_rk3576_fp16", 0x4070, lambda v: 0x40000000, r"not a LeakyRelu layout \(ACT_CFG 0x903 or 0xc02, no "
                                                             r"clamp"),
    ("conv_leaky_rk3576_fp16", 0x407C, lambda v: 0x000241C0, r"not the plain clamp mode"),
])
def test_rk3576_activation_registers_outside_the_observed_layout_are_named(tmp_path, stem, reg, change, message):
    path = _doctored_corpus(tmp_path, stem, patch_registers(0x1001, (reg,), change))
    with pytest.raises(ModelInvalidError, match=message) as info:
        rknnlite.Context(path, backend="software")
    assert "Conv:Conv4" in str(info.value)
    (y,), (ref,) = _corpus_run(stem)  # the real file still loads and runs
    assert _cos(y, ref) >= 0.9999


# rk3562 convs ("RKNPU t4" DPU map, regcmd.requant_t4 and .t4act): every decoded register value doctored
@pytest.mark.parametrize("stem, reg, change, message", [
    ("convnet_rk3562_i8", 0x40B0, lambda v: v | 0x10000, r"OUT_CVT_SCALE \(0x40b0\) = 0x1599f .*only a 16-bit scale was"),
    ("two_input_rk3562_i8", 0x40B0, lambda v: v & 0xFFFF,
     r"OUT_CVT_SCALE \(0x40b0\) = 0x5a69 .*only a 16-bit scale with bit 16 set \(residual convs\)"),
    ("convnet_rk3562_i8", 0x40B4, lambda v: v | 0x40, r"OUT_CVT_SHIFT \(0x40b4\) = 0x56 .*a 6-bit shift"),
    ("convnet_rk3562_i8", 0x40AC, lambda v: (v + 1) & 0xFFFFFFFF, r"OUT_CVT_OFFSET is -127 but the output's zero point"),
    ("convnet_rk3562_i8", 0x4054, lambda v: 0x800F0000, r"BS_MUL_CFG \(0x4054\) = 0x800f0000 .*only 0x800e0000"),
    ("convnet_rk3562_i8", 0x4048, lambda v: 0xE01, r"0x4048 \(0x4048\) = 0xe01 in an rk3562 int8 file; only 0x80000000"),
    ("convnet_rk3562_i8", 0x4050, lambda v: 0x125, r"0x4050 \(0x4050\) = 0x125 .*only 0x1 was"),
    ("convnet_rk3562_i8", 0x4060, lambda v: 0x53, r"BN_CFG \(0x4060\) = 0x53 .*only 0x12 for Relu"),
    ("two_input_rk3562_i8", 0x4060, lambda v: 0x12, r"BN_CFG \(0x4060\) = 0x12 .*only 0x13 for a plain conv"),
    ("convnet_rk3562_i8", 0x407C, lambda v: 0x8002C0C0, r"EW_CFG \(0x407c\) = 0x8002c0c0 .*only 0x10041c1 for Relu"),
    ("two_input_rk3562_i8", 0x407C, lambda v: 0x010041C1, r"EW_CFG \(0x407c\) = 0x10041c1 .*only 0x8002c0c0 for AddRelu"),
    ("convnet_rk3562_i8", 0x4088, lambda v: 0, r"EW_CLAMP_MIN \(0x4088\) = 0x0 .*only 0x80000000 \(INT32_MIN"),
    ("two_input_rk3562_i8", 0x4088, lambda v: 0x80000000,
     r"EW_CLAMP_MIN \(0x4088\) = 0x80000000 .*only 0 \(the Relu after a residual add\)"),
    # a depthwise conv writes its own values of these two (its weight holds the zero points)
    ("activation_ops_rk3562_i8", 0x4050, lambda v: 0x1 if v == 0x125 else v,
     r"0x4050 \(0x4050\) = 0x1 .*only 0x125 was"),
    ("activation_ops_rk3562_i8", 0x4054, lambda v: 0x800E0000 if v == 0xE0000 else v,
     r"BS_MUL_CFG \(0x4054\) = 0x800e0000 .*only 0xe0000 \(shift 14 in bits 16..21\) on a depthwise conv"),
    # fused activations (t4act.t4_activation), fp16 files too
    ("activation_ops_hsig_rk3562_fp16", 0x4068, lambda v: v | 1 if v == 0x2E660000 else v,
     r"fp16 ConvLeakyRelu on rk3562: not the LeakyRelu layout .*0x4068=0x2e660001"),
    ("activation_ops_hsig_rk3562_fp16", 0x4040, lambda v: 0x3F000000 if v == 0x3F800000 else v,
     r"fp16 ConvClip on rk3562: not a clamp layout .*0x4064 = -0x4040"),
    ("activation_ops_hsig_rk3562_fp16", 0x4078, lambda v: 0x40A00000 if v == 0x40C00000 else v,
     r"fp16 ConvClip on rk3562: the second clamp pair \['0x0', '0x40a00000'\] is not the first"),
    ("activation_ops_hsig_rk3562_fp16", 0x4060, lambda v: 0x20040 if v == 0x20000 else v,
     r"fp16 ConvHardSigmoid on rk3562: not the HardSigmoid index layout"),
    ("activation_ops_rk3562_i8", 0x4068, lambda v: v | 1 if v == 0x06660000 else v,
     r"int8 ConvLeakyRelu on rk3562: not the LeakyRelu layout"),
    ("activation_ops_rk3562_i8", 0x4090, lambda v: (v + 1) & 0xFFFFFFFF if v else v,
     r"int8 ConvClip on rk3562: not a clamp layout \(BN_CFG 0x12, or 0x20010 with EW_ADD = -BN_ADD\)"),
    ("activation_ops_rk3562_i8", 0x4068, lambda v: 1 if v == 0 else v, r"int8 ConvClip on rk3562: BN_MUL is not 0"),
    # lookup-table convs: rk3588's table registers behind rk3562's BN_CFG and LUT_CFG
    ("activation_ops_rk3562_i8", 0x4108, lambda v: 0x68 if v == 0x160 else v,
     r"lookup-table register 0x4108 = 0x68 is not the observed layout \(0x160\)"),
    ("activation_ops_rk3562_i8", 0x4060, lambda v: 0x20040 if v == 0x20000 else v,
     r"lookup-table register 0x4060 = 0x20040 is not the observed layout \(BN_CFG 0x20000\)"),
    # requant_t4: a shifted clamp's BN_CFG needs its own EW_CFG
    ("activation_ops_rk3562_i8", 0x4060, lambda v: 0x20010 if v == 0x12 else v,
     r"EW_CFG \(0x407c\) = 0x10041c1 .*only 0x241c0 for Clip \(BN_CFG 0x20010\)"),
])
def test_rk3562_registers_outside_the_observed_map_are_named(tmp_path, stem, reg, change, message):
    path = _doctored_corpus(tmp_path, stem, patch_registers(0x1001, (reg,), change))
    with pytest.raises(ModelInvalidError, match=message):
        rknnlite.Context(path, backend="software")
    for y, ref in zip(*_corpus_run(stem)):  # the real file still loads and runs
        assert _cos(y, ref) >= 0.9999


def test_rk3566_lookup_tables_and_their_bn_cfg(tmp_path):
    # rk3566 tasks hold fewer register writes: one task loads the LE table, the next the LO table, each
    # with a 514th entry that copies entry 1; the conv's BN_CFG is 0x48 (rk3588: 0x20040)
    stem = "conv_add_swish_rk3566_lut_i8"
    (y,), (ref,) = _corpus_run(stem)
    assert _cos(y, ref) >= 0.9999
    one_table = patch_registers(0x1001, (0x4100,), lambda v: 0 if v == 0x30000 else v)
    with pytest.raises(ModelInvalidError, match=r"load LUT tables \[0\], not both table 0 \(LE\) and table 1"):
        rknnlite.Context(_doctored_corpus(tmp_path, stem, one_table), backend="software")
    # the LE table's 514th entry (the file's first LUT data write precedes the table) no longer a copy of entry 1
    extra = patch_registers(0x1001, (0x4104,), lambda v, n: v ^ 1 if n == 514 else v, indexed=True)
    with pytest.raises(ModelInvalidError, match=r"rk3566 LE table has 514 entries ending in \[.*\]; 513 and a copy"):
        rknnlite.Context(_doctored_corpus(tmp_path, stem, extra), backend="software")
    bn_cfg = patch_registers(0x1001, (0x4060,), lambda v: 0x20040 if v == 0x48 else v)
    with pytest.raises(ModelInvalidError, match=r"0x4060 = 0x20040 is not the observed layout \(BN_CFG 0x48\)"):
        rknnlite.Context(_doctored_corpus(tmp_path, stem, bn_cfg), backend="software")
    # fp16: the fused HardSigmoid's index map (M, A as on rk3588) behind that BN_CFG
    with pytest.raises(ModelInvalidError,
                       match=r"DPU registers of its fused HardSigmoid \(0x4060=0x20040, .*fp16 file"):
        rknnlite.Context(_doctored_corpus(tmp_path, "mobilenetv3_ops_rk3566_fp16", bn_cfg), backend="software")
    (y, e), (ref, ref_e) = _corpus_run("mobilenetv3_ops_rk3566_fp16")
    assert np.abs(e - ref_e.reshape(e.shape)).max() <= 1e-3 and np.abs(y - ref.reshape(y.shape)).max() <= 0.02


def test_rk3562_int8_bias_blocks_hold_four_channels(tmp_path):
    # 32-byte blocks (i32 bias x4 | i16 -zp_w x4 | u16 mul x4) although the activations' C2 is 16; read
    # as rk3588's 8-channel blocks, the multipliers of channels 0-3 would be the next block's zero points
    def biases(stem: str, per_block: int) -> dict:
        loaded = load_model(str(CORPUS / f"{stem}.rknn"))
        vf = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, stem)
        sg = vf.subgraphs[0]
        return {t.name: [a.tolist() for a in decode_int8_bias(vf.tensor_data(sg, t), t.shape[0], t.name, per_block)]
                for t in sg.tensors if t.name in ("b2", "b8", "b14")}

    assert biases("convnet_rk3562_i8", 4) == biases("convnet_i8", 8)  # the same values as rk3588's, regrouped
    assert biases("convnet_rk3562_i8", 8)["b14"][2][:4] == [14, 24, 65528, 65496]  # block 1's -zp_w as multipliers
    zero_mul = _patch_tensor("b14", lambda raw: raw[:24] + bytes(2) + raw[26:])  # block 0, channel 0's multiplier
    path = _doctored_corpus(tmp_path, "convnet_rk3562_i8", zero_mul)
    with pytest.raises(ModelInvalidError, match=r"Conv:Conv16.*channel multipliers \[0, 12485, 11518, 9613, 15465"):
        rknnlite.Context(path, backend="software")


def test_rk3562_int8_fused_activations_not_decoded_are_named(tmp_path):
    def clip(data: bytearray) -> None:  # the first ConvRelu node's type name -> ConvClip (same length)
        at = data.index(b"ConvRelu\0")
        data[at:at + 8] = b"ConvClip"

    # a Relu's registers (BN_CFG 0x12 as a Clip from 0, but nothing clamped) are not a Clip's
    path = _doctored_corpus(tmp_path, "convnet_rk3562_i8", clip)
    with pytest.raises(ModelInvalidError, match=r"int8 ConvClip on rk3562: not a clamp from 0 to a positive CLAMP_MAX"):
        rknnlite.Context(path, backend="software")
    with pytest.raises(ModelInvalidError, match=r"a fused ReluAdd in an rk3562 int8 conv"):
        requant_t4({}, "here", "ReluAdd")


def test_a_softmax_whose_bson_axis_is_not_its_parameter_table_s_is_refused(tmp_path):
    # exSoftmax13 holds its axis twice (parameter table and BSON); the lowering reads the table and checks the BSON
    def axis_2(data: bytearray) -> None:
        needle = b"\x03axis\x00\x1d\x00\x00\x00\x02dtype\x00\x02\x00\x00\x00i\x00\x10value\x00\x01\x00\x00\x00"
        assert data.count(needle) == 1
        at = data.index(needle) + len(needle) - 4
        data[at:at + 4] = struct.pack("<i", 2)

    with pytest.raises(ModelInvalidError, match=r"exSoftmax13 .*BSON axis 2 is not the parameter table's 1"):
        rknnlite.Context(_doctored_corpus(tmp_path, "softmax_fp16", axis_2), backend="software")


def test_rk3562_fused_activation_parameters_come_from_its_registers():
    # activation_ops: Clip(0, 6) twice (BN_CFG 0x12, the second on a depthwise conv), LeakyRelu(0.1) (0x22,
    # slope in 0x4068's high half), Clip(-1, 2) (0x20010: the shifted clamp) and, fp16, HardSigmoid(0.3, 0.4)
    # (0x20000: u = (x + A) * M, A in 0x4064, M in 0x4068); int8: the lookup tables, whose index adds A
    # before the multiplication (read as rk3588's y * M + A, the HardSigmoid's output is 51 % within a step)
    fp16 = lowered("activation_ops_hsig_rk3562_fp16").graph.nodes
    assert [(n.op, n.attrs.get("_activation_min"), n.attrs.get("_activation_max")) for n in fp16 if
            n.attrs.get("_activation") == "Clip"] == [("Conv", 0.0, 6.0), ("Conv", 0.0, 6.0), ("Conv", -1.0, 2.0)]
    assert [(n.op, n.attrs) for n in fp16 if n.op in ("LeakyRelu", "HardSigmoid")] == [
        ("LeakyRelu", {"alpha": 0.1}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})]
    int8 = lowered("activation_ops_rk3562_i8").graph.nodes
    assert [(n.op, n.attrs) for n in int8 if n.op == "LeakyRelu"] == [("LeakyRelu", {"alpha": 0.1})]
    # HardSwish, HardSigmoid, Swish and Sigmoid: the file's tables, rk3562's index map (t4act.t4_lut_stage)
    assert sum(n.op == "VendorLutActivation" for n in int8) == 4
    for stem in ("activation_ops_hsig_rk3562_fp16", "activation_ops_rk3562_i8"):
        for y, ref in zip(*_corpus_run(stem)):
            assert _cos(y, ref) >= 0.99998


def test_rk3562_leaky_relu_multiplier_shift_counts_its_slope_bits():
    # 0x4054's shift is 14 more than rk3588's 0x4048 shift for the same file (its slope stage is Q14)
    regs = {(0x1001, a): v for a, v in {0x4048: 0x80000000, 0x4050: 0x1, 0x4060: 0x22, 0x407C: 0x010041C1,
                                        0x4088: 0x80000000, 0x4054: 0x800F0000, 0x40AC: 0xFFFFFF91,
                                        0x40B0: 0x6A78, 0x40B4: 0x24}.items()}
    requant = requant_t4(regs, "here", "LeakyRelu")
    assert (requant.scale, requant.shift, requant.mul_shift, requant.offset) == (0x6A78, 0x24, 1, -111)
    assert requant_t4({**regs, (0x1001, 0x4054): 0x800E0000}, "here", "LeakyRelu").mul_shift == 0
    with pytest.raises(ModelInvalidError, match=r"0x800d0000 .*only bit 31 and a shift of at least 14"):
        requant_t4({**regs, (0x1001, 0x4054): 0x800D0000}, "here", "LeakyRelu")
    with pytest.raises(ModelInvalidError, match=r"BN_CFG \(0x4060\) = 0x22 .*only 0x12 or 0x20010 for Clip"):
        requant_t4(regs, "here", "Clip")
    # a depthwise one: bit 31 clear (depthwise_leaky_rk3562), as any depthwise conv's
    depthwise = {**regs, (0x1001, 0x4050): 0x125, (0x1001, 0x4054): 0xE0000}
    assert requant_t4(depthwise, "here", "LeakyRelu", depthwise=True).mul_shift == 0
    with pytest.raises(ModelInvalidError, match=r"0x800f0000 .*only bit 31 clear and a shift of at least 14"):
        requant_t4({**depthwise, (0x1001, 0x4054): 0x800F0000}, "here", "LeakyRelu", depthwise=True)


# the DPU registers of two rk3562 int8 tasks of vendor builds (probe files, docs/vendor-format-notes.md §1d):
# YOLOv8n's one-channel DFL conv (a plain int32 bias) and a standalone Sigmoid's lookup-table task
_RK3562_DFL_CONV = {0x4048: 0x80000000, 0x4050: 0x2, 0x4054: 0x80000080, 0x4060: 0x13, 0x407C: 0x010041C1,
                    0x4088: 0x80000000, 0x40AC: 0xFFFFFF80, 0x40B0: 0x4040, 0x40B4: 0x16}
_RK3562_SIGMOID_TASK = {0x4048: 0x80000000, 0x4050: 0x2, 0x4054: 0x0, 0x4060: 0x20000, 0x4064: 0x0,
                        0x4068: 0x47470700, 0x407C: 0x01004140, 0x4088: 0x0, 0x40AC: 0xFFFFFF80, 0x40B0: 0x17F81,
                        0x40B4: 0x16, 0x4108: 0x160, 0x410C: 0x50500, 0x4110: 0xFFFFC000, 0x4114: 0x0, 0x4118: 0x0,
                        0x411C: 0x4000, 0x4120: 0x5A43, 0x4124: 0x16, 0x4128: 0x0, 0x412C: 0x0}


def _dpu(values: dict, **changed) -> dict:
    return {(0x1001, a): v for a, v in {**values, **{int(k[1:], 16): v for k, v in changed.items()}}.items()}


def test_rk3562_plain_bias_conv_takes_its_weight_zero_point_from_0x4054():
    # 0x4050 = 2 (rk3588: BS_ALU_CFG bit 0 clear), 0x4054 = bit 31 | rk3588's BS_ALU_SRC (0x80: zp_w = -128)
    requant = requant_t4(_dpu(_RK3562_DFL_CONV), "here", None)
    assert (requant.scale, requant.shift, requant.mul_shift, requant.offset, requant.bias_blocks,
            requant.weight_zp) == (0x4040, 0x16, None, -128, False, -128)
    with pytest.raises(ModelInvalidError, match=r"0x4054\) = 0x800e0080 .*a 16-bit BS_ALU_SRC"):
        requant_t4(_dpu(_RK3562_DFL_CONV, r4054=0x800E0080), "here", None)
    with pytest.raises(ModelInvalidError, match=r"0x4050 \(0x4050\) = 0x2 .*only 0x125"):  # not on a depthwise conv
        requant_t4(_dpu(_RK3562_DFL_CONV), "here", None, depthwise=True)


def test_rk3562_standalone_lookup_table_task():
    # u = ((q + A) * M) >> s as in the lookup-table convs; no bias, no multipliers; OUT_CVT with bit 16 (the
    # input comes through the element-wise path)
    stage, requant = t4act.t4_lut_task(_dpu(_RK3562_SIGMOID_TASK, r4064=0xFFFFFFFF), "here")
    assert (stage.index_mul, stage.index_add, stage.index_shift) == (0x4747, -0x4747, 7)
    assert (requant.scale, requant.shift, requant.mul_shift, requant.offset) == (0x7F81, 0x16, None, -128)
    for changed, message in ((dict(r4050=0x1), r"0x4050 = 0x1 .*only 0x2"),
                             (dict(r4088=0x5), r"0x4088 = 0x5 .*only 0x0 or 0x80000000"),
                             (dict(r40B0=0x7F81), r"OUT_CVT scale/shift 0x7f81/0x16 .*bit 16 set"),
                             (dict(r4108=0x68), r"0x4108 = 0x68 is not the observed layout \(0x160\)")):
        with pytest.raises(ModelInvalidError, match=message):
            t4act.t4_lut_task(_dpu(_RK3562_SIGMOID_TASK, **changed), "here")


def test_rk3576_int8_bncfg_tensor_outside_the_observed_layout_is_named(tmp_path):
    no_slope = _patch_tensor("y_BnCfg_BNcfgTensor", lambda raw: bytes(len(raw)))
    path = _doctored_corpus(tmp_path, "conv_leaky_rk3576_i8", no_slope)
    with pytest.raises(ModelInvalidError, match=r"slope tensor holds \[0, 0,"):
        rknnlite.Context(path, backend="software")
    second_word = _patch_tensor("y_BnCfg_BNcfgTensor", lambda raw: raw[:4] + b"\1" + raw[5:])
    path = _doctored_corpus(tmp_path, "conv_leaky_rk3576_i8", second_word)
    with pytest.raises(ModelInvalidError, match=r"not one slope round\(alpha \* 2\^14\) then zeros"):
        rknnlite.Context(path, backend="software")
    renamed = _patch_tensor("y_BnCfg_BNcfgTensor", lambda raw: raw[:16] + struct.pack("<i", 77) + raw[20:])
    path = _doctored_corpus(tmp_path, "conv_clip_rk3576_i8", renamed)
    with pytest.raises(ModelInvalidError, match=r"add-before-clamp words \[5798, 0, 0, 0, 77"):
        rknnlite.Context(path, backend="software")


# -- rk3576 / rv1126b fp16 fused Clip and LeakyRelu (.f2act.f2_fp16_activation) ----------------------


def test_rk3576_fp16_leaky_relu_slope_comes_from_its_bscfg_tensor():
    # word 0 of y_BsCfg_BScfgTensor is float16 0x2e66 = 0.0999756; the ACT_CFG stays the plain conv's 0x903
    assert _fused_part("conv_leaky_rk3576_fp16") == ("LeakyRelu", {"alpha": 0.1}, [])
    (y,), (ref,) = _corpus_run("conv_leaky_rk3576_fp16")
    assert _cos(y, ref) >= 0.99999 and np.abs(y - ref).max() <= 1e-2
    assert (y < 0).any()  # the slope is exercised


def test_an_rk3562_int8_deconv_reads_a_plain_conv_s_registers(monkeypatch):
    # rk3562 writes a ConvTranspose's requantization as a plain conv's (corpus segmenter_ops_rk3562_i8: 0x4050 =
    # 1, 0x4054 = 0x800e0000, OUT_CVT at 0x40ac..0x40b4 with rk3588's values); rk3588's registers read that way
    # are refused by name (a KeyError before)
    from rknnlite.model.rknn_graph import lower as lower_mod
    from rknnlite.model.rknn_graph.deconv_regs import RK3588_DECONV

    assert "ConvTranspose" in lowered("segmenter_ops_rk3562_i8").vendor_ops
    for y, ref in zip(*_corpus_run("segmenter_ops_rk3562_i8")):
        assert _cos(y, ref) >= 0.9999
    original = lower_mod._Lowering.deconv

    def deconv(self, node):  # the rk3588 file's ConvTranspose, as if in an rk3562 file (but for its CNA map)
        self.t4_platform, self.platform = (lambda: True), (lambda: "rk3562")
        self.deconv_encoding = lambda: RK3588_DECONV
        return original(self, node)

    monkeypatch.setattr(lower_mod._Lowering, "deconv", deconv)
    with pytest.raises(ModelInvalidError, match=r"DPU register 0x4048 \(0x4048\) = 0xe01 in an rk3562 int8 file"):
        lowered("deconv_k2s2_i8")


def _depthwise_deconv(stem: str):
    nodes = lowered(stem).graph.nodes
    (node,) = [n for n in nodes if n.op == "ConvTranspose" and n.attrs.get("group", 1) > 1]
    return node


@pytest.mark.parametrize("stem", ["segmenter_ops_rk3562_fp16_tk230", "segmenter_ops_i8_tk220"])
def test_older_toolkits_bilinear_resize_is_a_depthwise_deconv(stem):
    # RKNN-Toolkit2 2.2.0/2.3.0 compile the segmenter's bilinear Resize to a group-16 ConvTranspose whose
    # 4x4 kernel is [1, 3, 3, 1] / 4 squared (1/16, 3/16, 9/16 in the fp16 tiles), refused before.  The
    # simulator follows the deconv, not ONNX's Resize (cos 0.987 against onnxruntime in the fp16 build)
    node = _depthwise_deconv(stem)
    assert node.attrs["group"] == 16 and node.attrs["kernel_shape"] == [4, 4]
    (logits, labels), (sim_logits, sim_labels) = _corpus_run(stem)
    assert np.array_equal(labels, sim_labels)
    if "_fp16" in stem:
        assert np.abs(logits - sim_logits).max() <= 1e-3 * max(1.0, np.abs(sim_logits).max())
    else:
        assert _cos(logits, sim_logits) >= 0.9999


def test_an_older_toolkits_depthwise_deconv_whose_kernel_tells_its_tap_order_is_refused(tmp_path):
    # the tiles are (kh, kw, C) float16; the first kernel row is 1/16, 3/16, 3/16, 1/16 for each of the
    # 16 channels.  A kernel no longer symmetric under a half turn needs the tap order, checked on the
    # releases' files of test_a_depthwise_deconv_holds_its_kernel_flipped only: the file is made a 2.1.0 one
    row = struct.pack("<64e", *[1 / 16] * 16, *[3 / 16] * 16, *[3 / 16] * 16, *[1 / 16] * 16)

    def patch(data):
        at = data.find(row)
        assert at > 0
        data[at:at + 2] = struct.pack("<e", 0.125)
        data[:] = data.replace(b"2.2.0", b"2.1.0")

    path = doctored_copy(CORPUS / "segmenter_ops_rk3562_fp16_tk220.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match="not symmetric under a half turn in an rk3562 file from RKNN-Toolkit2 "
                                                "2.1.0; the order of its taps was checked on RKNN-Toolkit2 2.5.0"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem", ["deconv_depthwise_fp16", "deconv_depthwise_i8", "deconv_depthwise_rk3576_i8",
                                  "deconv_depthwise_rk3562_i8", "deconv_depthwise_fp16_tk232",
                                  "deconv_depthwise_i8_tk232", "deconv_depthwise_rk3576_i8_tk232",
                                  "deconv_depthwise_rk3566_fp16_tk230", "deconv_depthwise_rk3576_i8_tk230",
                                  "deconv_depthwise_rk3562_i8_tk230", "deconv_depthwise_fp16_tk220",
                                  "deconv_depthwise_i8_tk220", "deconv_depthwise_rk3566_i8_tk220",
                                  "deconv_depthwise_rk3576_fp16_tk220", "deconv_depthwise_rv1106_i8",
                                  "deconv_depthwise_rv1103_i8_tk230", "deconv_depthwise_rv1106_i8_tk220"])
def test_a_depthwise_deconv_holds_its_kernel_flipped(stem):
    """A depthwise ConvTranspose's tiles hold each channel's kernel turned by a half turn, as a group-1
    deconv's (an asymmetric kernel tells: read as stored, cosine 0.78 against the simulator)."""
    from onnx import numpy_helper

    import onnx

    model = onnx.load(str(CORPUS / "onnx" / f"{dict(_corpus())[stem]['model']}.onnx"))
    (onnx_w,) = [numpy_helper.to_array(t) for t in model.graph.initializer if list(t.dims) == [8, 1, 3, 3]]
    weight = lowered(stem).graph.constants[_depthwise_deconv(stem).inputs[1]]
    if stem.endswith("_fp16"):
        np.testing.assert_array_equal(weight, onnx_w.astype(np.float16).astype(np.float32))
    else:  # integer codes: proportional to the ONNX kernel per channel, not to its half turn
        for k in range(8):
            assert _cos(weight[k].ravel(), onnx_w[k].ravel()) > 0.999
    outputs, sims = _corpus_run(stem)
    assert _cos(outputs[0], sims[0]) >= 0.9999


@pytest.mark.parametrize("stem", ["deconv_k2s2_rk3576_i8", "deconv_k2s2_rv1126b_i8", "segmenter_ops_rk3576_i8_tk232"])
def test_an_rk3576_int8_deconv_takes_its_scales_from_out_cvt_and_the_bias_blocks(stem):
    # no <weight>_w4a16_weight beside a ConvTranspose's weight: OUT_CVT (0x40ac..0x40b4) gives s_in * max s_w
    # (within 1.3e-4 of the stored scale on a conv that has one) and the bias blocks the multipliers over 2^14.
    # Refused before (read with rk3588's map: "OUT_CVT_SHIFT (0x4088) = 0x80000000"); exact layer by layer
    # against the simulator on segmenter_ops (layer_evidence.py --platform rk3576)
    assert "ConvTranspose" in lowered(stem).vendor_ops
    for y, ref in zip(*_corpus_run(stem)):
        if y.dtype.kind == "f":
            assert _cos(y, ref) >= 0.9999


@pytest.mark.parametrize("stem, twin", [
    ("convnet_rk3576_i8", "convnet_i8"),
    ("convnet_rk3576_i8_layer", "convnet_i8_layer"),  # a plain int32 bias: OUT_CVT alone
    ("conv_add_relu_rk3576_i8", "conv_add_relu_i8"),  # ConvAddRelu: OUT_CVT_SCALE bit 16
    ("two_input_rv1126b_i8", "two_input_i8"),
])
def test_rk3576_int8_convs_requantize_as_their_rk3588_twins(stem, twin):
    # the same model and calibration: the simulator gives both platforms the same outputs, and so
    # do their registers (OUT_CVT and the bias blocks' multipliers); the float16 weight scales the
    # rk3576 files also store are rounded copies, which moved 2-6 % of the outputs one step
    (ours, sim), (ours_twin, sim_twin) = _corpus_run(stem), _corpus_run(twin)
    for y, y_twin, ref, ref_twin in zip(ours, ours_twin, sim, sim_twin):
        assert np.array_equal(ref, ref_twin)
        assert np.array_equal(y, y_twin)


@pytest.mark.parametrize("stem, twin", [
    ("segmenter_ops_rk3576_i8_tk230", "segmenter_ops_i8_tk230"),
    ("segmenter_ops_rk3576_i8_tk220", "segmenter_ops_i8_tk220"),
    ("segmenter_ops_rv1106_i8_tk230", "segmenter_ops_i8_tk230"),  # the rv1106 container (t3conv)
    ("segmenter_ops_rv1103_i8_tk220", "segmenter_ops_i8_tk220"),
])
def test_the_older_releases_int8_depthwise_deconv_runs_as_rk3588_s(stem, twin):
    # RKNN-Toolkit2 2.2.0/2.3.0 compile a bilinear Resize x2 to a depthwise 4x4 ConvTranspose, whose
    # int8 weight keeps its zero points beside the weights there, as a depthwise conv's
    deconv = [n for n in lowered(stem).graph.nodes if n.op == "ConvTranspose" and n.attrs.get("group")]
    assert [(n.attrs["group"], n.attrs["kernel_shape"], n.attrs["strides"]) for n in deconv] == [(16, [4, 4], [2, 2])]
    (ours, sim), (ours_twin, sim_twin) = _corpus_run(stem), _corpus_run(twin)
    for y, y_twin, ref, ref_twin in zip(ours, ours_twin, sim, sim_twin):
        assert np.array_equal(ref, ref_twin)
        assert np.array_equal(y, y_twin)


def test_an_rk3576_int8_deconv_with_another_out_cvt_is_refused(tmp_path):
    # the deconv's writes only: the file's first node is a ConvRelu
    deconv = [n for n in lowered("deconv_k2s2_rk3576_i8").graph.nodes if n.op == "ConvTranspose"]
    assert deconv
    path = doctored_copy(CORPUS / "deconv_k2s2_rk3576_i8.rknn", tmp_path,
                         patch_registers(0x1001, (0x40B0,), lambda v, n: v | 0x20000 if n else v, indexed=True))
    with pytest.raises(ModelInvalidError, match=r"\(ConvTranspose .*OUT_CVT scale/shift 0x2[0-9a-f]{4}/0x[0-9a-f]+ "
                                                r"\(0x40b0/0x40b4\) are not a 16-bit scale and a shift on an "
                                                r"rk3576/rv1126b int8 conv"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("change, message", [
    (lambda v: v & 0xFFFF, r"are not a 16-bit scale with bit 16 set and a shift on an rk3576/rv1126b int8 conv"),
    (lambda v: v + (v & 0xFFFF) // 50, r"give channel \d+ a weight scale of .*, the file stores"),  # 2 % off
])
def test_an_rk3576_residual_conv_reads_its_out_cvt_below_bit_16(tmp_path, change, message):
    # ConvAdd / ConvAddRelu: OUT_CVT_SCALE bit 16 set (the residual through the element-wise path)
    stem = "conv_add_relu_rk3576_i8"
    assert "ConvAddRelu" in lowered(stem).vendor_ops
    path = _doctored_corpus(tmp_path, stem, patch_registers(0x1001, (0x40B0,), lambda v: change(v) if v >> 16 else v))
    with pytest.raises(ModelInvalidError, match=message) as info:
        rknnlite.Context(path, backend="software")
    assert "(ConvAddRelu " in str(info.value)


def test_conv_relu_add_adds_the_residual_after_the_relu():
    # corpus conv_relu_add: y = a + relu(conv(...)), which the toolkit fuses into one ConvReluAdd node; read as
    # ConvAddRelu (relu of the sum), a negative conv output would be subtracted from a instead of adding 0
    ops = [n.op for n in lowered("conv_relu_add_fp16").graph.nodes]
    assert ops[-2:] == ["Relu", "Add"]
    (y,), (ref,) = _corpus_run("conv_relu_add_fp16")
    assert np.abs(y - ref).max() <= 1e-3 * max(1.0, np.abs(ref).max())


def test_rk3576_fp16_clip_bounds_are_the_second_clamp_pair():
    # first pair (-4.0, 2.0), second (-1.0, 2.0): the second is the ONNX bounds, the simulator's clamp;
    # float16 values, so the clip commutes with the float16 rounding and is fused into the conv
    (conv,) = lowered("conv_clip_rk3576_fp16").graph.nodes
    assert conv.op == "Conv" and conv.attrs["_activation"] == "Clip"
    assert (conv.attrs["_activation_min"], conv.attrs["_activation_max"]) == (-1.0, 2.0)
    (y,), (ref,) = _corpus_run("conv_clip_rk3576_fp16")
    assert _cos(y, ref) >= 0.99999
    assert y.min() == -1.0 and y.max() == 2.0


def test_an_fp16_clip_to_bounds_float16_cannot_hold_stays_a_clip_after_the_rounded_conv(monkeypatch):
    # a bound float16 would round (0.1) does not commute with the rounding: Conv, then Clip
    from rknnlite.model.rknn_graph import lower as lower_mod

    original = lower_mod._Lowering.register_params

    def params(self, node, activation, unit, given):
        p = original(self, node, activation, unit, given)
        return dict(p, max=0.1) if node.op == "ConvClip" else p

    monkeypatch.setattr(lower_mod._Lowering, "register_params", params)
    model = lowered("conv_clip_rk3576_fp16")
    assert [n.op for n in model.graph.nodes] == ["Conv", "Clip"]
    assert model.graph.constants[model.graph.nodes[1].inputs[2]].tolist() == pytest.approx(0.1)


@pytest.mark.parametrize("bound, first", [
    (-1.0, -4.0), (-6.0, -0.75), (-0.1, -44.8), (-0.25, -16.0), (-1.5, -3.0), (-3.0, -1.5), (-5.0, -0.875),
    (-2.0, -2.0), (0.5, 0.5), (0.0, 0.0), (6.0, 6.0)])
def test_rk3576_fp16_first_clamp_pair_mirrors_negative_bounds(bound, first):
    # register values of probe files Clip(lo, hi) on rk3576 (docs/vendor-format-notes.md §1b)
    bits = struct.unpack("<I", struct.pack("<f", bound))[0]
    got = struct.unpack("<f", struct.pack("<I", f2act._mirrored(bits)))[0]
    assert got == pytest.approx(first, rel=1e-6)


def test_rk3576_fp16_bscfg_slope_outside_the_observed_layout_is_named(tmp_path):
    zero = _patch_tensor("y_BsCfg_BScfgTensor", lambda raw: bytes(2) + raw[2:])
    path = _doctored_corpus(tmp_path, "conv_leaky_rk3576_fp16", zero)
    with pytest.raises(ModelInvalidError, match=r"starts \[0, 0, .*not one float16 slope \(sign-extended to 32 bits\)"):
        rknnlite.Context(path, backend="software")
    second_word = _patch_tensor("y_BsCfg_BScfgTensor", lambda raw: raw[:2] + b"\1" + raw[3:])
    path = _doctored_corpus(tmp_path, "conv_leaky_rk3576_fp16", second_word)
    with pytest.raises(ModelInvalidError, match=r"starts \[11878, 1, "):
        rknnlite.Context(path, backend="software")
    # the sign extension must follow the slope's sign: Abs's -1 (0xbc00) without it, 0.1 with it
    cases = (("conv_abs_rk3576_fp16", lambda raw: raw[:2] + bytes(2) + raw[4:], r"\[48128, 0, "),
             ("conv_leaky_rk3576_fp16", lambda raw: raw[:2] + b"\xff\xff" + raw[4:], r"\[11878, 65535, "))
    for stem, patch, shown in cases:
        path = _doctored_corpus(tmp_path, stem, _patch_tensor("y_BsCfg_BScfgTensor", patch))
        with pytest.raises(ModelInvalidError, match=shown):
            rknnlite.Context(path, backend="software")


def test_rk3576_fp16_hard_sigmoid_comes_from_its_bncfg_index_map():
    # BnCfg words 0 and 4: A = f32 -0.33333337, word 8: M = f16 9832; u = (x + A) * M
    assert _fused_part("conv_hardsigmoid_rk3576_fp16") == ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, [])
    (y,), (ref,) = _corpus_run("conv_hardsigmoid_rk3576_fp16")
    assert _cos(y, ref) >= 0.99999 and np.abs(y - ref).max() <= 2 ** -10


def test_rk3576_fp16_hard_sigmoid_index_map_outside_the_observed_layout_is_named(tmp_path):
    second_add = _patch_tensor("y_BnCfg_BNcfgTensor", lambda raw: raw[:16] + struct.pack("<f", 1.0) + raw[20:])
    path = _doctored_corpus(tmp_path, "conv_hardsigmoid_rk3576_fp16", second_add)
    with pytest.raises(ModelInvalidError, match=r"fp16 ConvHardSigmoid on rk3576/rv1126b: the index-map words "
                                                 r"\['0xbeaaaaac', '0x0', '0x0', '0x0', '0x3f800000'"):
        rknnlite.Context(path, backend="software")
    path = _doctored_corpus(tmp_path, "conv_hardsigmoid_rk3576_fp16", patch_registers(0x1001, (0x4174,), lambda v: 1))
    with pytest.raises(ModelInvalidError, match=r"DPU register 0x4174 is not 0x0 \(the lookup-table layout\)"):
        rknnlite.Context(path, backend="software")


def test_packed_int8_weight_rows_follow_the_padded_output_block():
    # rk3576 first conv of 20 channels: npu shape [1,1,kh,kw,32,4], so 32 rows of 16 bytes per kh, 12 of them zero
    w = (np.arange(3 * 3 * 2 * 3) % 100).astype(np.int8).reshape(3, 3, 2, 3)  # [O=3, I=3, kh=2, kw=3]
    rows = np.zeros((2, 4, 16), np.int8)
    for h in range(2):
        for o in range(3):
            rows[h, o, :12] = np.array([list(w[o, :, h, k]) + [-1] for k in range(3)], np.int8).ravel()
    out = decode_weight(rows.tobytes(), (1, 1, 2, 3, 4, 4), (3, 3, 2, 3), "int8", "w", npu_size=144,
                        packed=True)
    np.testing.assert_array_equal(out, w)
    with pytest.raises(ModelInvalidError, match="needs 128 bytes"):
        decode_weight(rows.tobytes()[:100], (1, 1, 2, 3, 4, 4), (3, 3, 2, 3), "int8", "w", npu_size=144,
                      packed=True)


def test_weight_size_of_the_real_output_channels_is_accepted():
    # rk3576 fp16 conv of 20 channels: tiles of 16 + 8 output channels, the tensor size counts 20
    w = np.arange(6 * 2, dtype=np.float16).reshape(6, 2, 1, 1)
    tiles = np.zeros((2, 4, 2), np.float16)  # two rows of [oblk=4][iblk=2]
    tiles.reshape(8, 2)[:6] = w[:, :, 0, 0]
    shape = (1, 1, 1, 1, 4, 2, 1, 1, 1, 1, 4, 2)
    out = decode_weight(tiles.tobytes(), shape, (6, 2, 1, 1), "float16", "w", npu_size=6 * 2 * 2)
    np.testing.assert_array_equal(out, w)
    with pytest.raises(ModelInvalidError, match="hold 32 bytes but the tensor's NPU size is 20"):
        decode_weight(tiles.tobytes(), shape, (6, 2, 1, 1), "float16", "w", npu_size=20)


def test_int8_file_float16_tensors_are_rounded_like_the_simulator():
    """An int8 file's exDataConvert output and Softmax output are float16 tensors: rounded to
    fp16 after the op that writes them, as the simulator stores them (float32 there left
    none of the outputs bit-exact)."""
    model = lowered("softmax_i8")
    assert model.graph.round_fp16 == {"conv_3__float16", "y"}
    assert lowered("softmax_fp16").graph.round_fp16 == frozenset()  # fp16 files round everything anyway
    data = corpus_arrays("softmax_i8")
    ref = data["out0"]
    for flags in (0, rknnlite.InitFlag.COLLECT_PERF_MASK):  # planned runs, and profiled runs
        with rknnlite.Context(str(CORPUS / "softmax_i8.rknn"), backend="software", flags=flags) as ctx:
            for _ in range(2):  # the first run of a shape plans it; the next runs the plan
                (y,) = ctx.run([data["in0"]], data_format="nchw")
                np.testing.assert_array_equal(y, y.astype(np.float16).astype(np.float32))
                assert np.mean(y == ref.reshape(y.shape)) >= 0.99


# int8 exSDPAttention: its two int8 grids come from the scores tasks' registers (transformer.attention_grids)
@pytest.mark.parametrize("target, reg, change, message", [
    (0x1001, 0x4068, lambda v: v + 0x1000000 if v else v, r"multiplies by the scale 0\.17677"),
    (0x1001, 0x4068, lambda v: v | 0x2 if v else v, r"BN multiplier 0x4068 = 0x5a821102"),
    (0x0201, 0x1050, lambda v: v + 1 if v >> 16 != 1 else v, r"converts q \(its zero point -7\)"),
    (0x0201, 0x104C, lambda v: v | 0x30000000 if v & 0xF == 0xA else v, r"CVT_CON0 0x33cf3cfa"),
])
def test_int8_attention_registers_outside_the_decoded_form_are_named(tmp_path, target, reg, change, message):
    path = _doctored_corpus(tmp_path, "psa_attention_i8", patch_registers(target, (reg,), change))
    with pytest.raises(ModelInvalidError, match=message) as info:
        rknnlite.Context(path, backend="software")
    assert "exSDPAttention" in str(info.value)


def test_rk3576_rv1126b_and_rk3562_int8_attention_grids_are_rk3588_s_values_in_their_map():
    # the same attention built for each: every grid value of rk3588's map is in theirs
    # (transformer._moved_map_tasks)
    grids = {}
    for stem in ("encoder_layer_rk3576_i8", "encoder_layer_rv1126b_i8", "encoder_layer_rk3576_i8_tk232",
                 "encoder_layer_rk3562_i8", "encoder_layer_rk3562_i8_tk220"):
        model = lowered(stem)
        grids[stem] = [model.graph.quant[f"matmul_65_sdpa__{k}"] for k in ("scores", "attn")]
        (y,), (ref,) = _corpus_run(stem)
        assert _cos(y, ref) >= 0.9999
    assert len({str(g) for g in grids.values()}) == 1


@pytest.mark.parametrize("tensor, word, value, message", [
    ("matmul_65_sdpa_qk_conv_mul_add_output_BnCfg_BNcfgTensor", 0, 0x5000, r"multiplies by the scale 0\.25"),
    ("matmul_65_sdpa_qk_conv_mul_add_output_BnCfg_BNcfgTensor", 4, 0x1011, r"BN words \[16384, 0, 0, 0, 4113"),
    ("matmul_65_sdpa_BScfgTensor", 0, -3, r"BS words \[-3, .*-zp_v \(-2\)"),
])
def test_rk3576_int8_attention_tensor_words_outside_the_decoded_form_are_named(tmp_path, tensor, word, value, message):
    def patch(data):
        struct.pack_into("<i", tensor_bytes(data, tensor), 4 * word, value)

    path = _doctored_corpus(tmp_path, "encoder_layer_rk3576_i8", patch)
    with pytest.raises(ModelInvalidError, match=message):
        rknnlite.Context(path, backend="software")


# the other forms: q taken unconverted when its zero point is 0 (encoder_layer_kl_i8: CVT_CON0 0xb,
# CVT_CON1 0x10000, as PP-OCRv4 rec's kl_divergence and mmse files), a mixing task that leaves
# BS_ALU_SRC and the OUT_CVT offset as earlier tasks set them (psa_attention_kl_i8: zero points 0),
# and rk3576/rv1126b's map: CVT_CON0 at 0x1048, the four lanes' scales in 0x104c/0x1050 and offsets in
# 0x1054..0x1060 (rv1126b: times the scale), OUT_CVT at 0x40ac..0x40b4
@pytest.mark.parametrize("stem, target, reg, change, message", [
    ("encoder_layer_kl_i8", 0x0201, 0x1050, lambda v: v + 1 if v == 0x10000 else v,
     r"scores task CVT_CON0 0xb, CVT_CON1 0x10001"),
    ("encoder_layer_kl_i8", 0x0201, 0x104C, lambda v: v | 0x10 if v == 0xB else v, r"CVT_CON0 0x1b"),
    ("psa_attention_kl_i8", 0x1001, 0x4084, lambda v: v | 0x10000 if v == 21550 else v,
     r"2 scores tasks .* and 0 mixing tasks"),
    ("encoder_layer_rk3576_i8", 0x0201, 0x1054, lambda v: v + 1 if v == 3 else v, r"scores tasks \['\(None, "),
    ("encoder_layer_rv1126b_i8", 0x0201, 0x1058, lambda v: v + 1 if v > 1 << 16 else v, r"scores tasks \['\(None, "),
    ("encoder_layer_rk3576_i8", 0x0201, 0x1048, lambda v: v | 0x30000000 if v & 0xF == 0xA else v,
     r"CVT_CON0 0x33cf3cfa"),
    ("encoder_layer_rk3576_i8", 0x1001, 0x40B0, lambda v: v | 0x10000 if v == 0x5647 else v, r"and mixing tasks \[\]"),
    # rk3562: rk3588's BN word 0x4068, BS_ALU_SRC 0x4054 with bit 31 set over -zp_v
    ("encoder_layer_rk3562_i8", 0x1001, 0x4054, lambda v: v & 0xFFFF if v == 0x8000FFFE else v,
     r"mixing BS_ALU_SRC 0x4054 = 65534; .*bit 31 over -zp_v \(-2\) in 16 bits"),
    ("encoder_layer_rk3562_i8", 0x1001, 0x4068, lambda v: v | 0x2 if v else v, r"BN multiplier 0x4068 = 1073745922"),
    # q's zero point 0 (attention_q0_*): the scores task bypasses the conversion as the mixing tasks do and is
    # told from them by its own scale stage (rk3576/rv1126b ACT_CFG 2, rk3562/rv1106 BN 0x4068); rv1106's
    # BS_ALU_SRC operand is 17 bits wide (-zp_v = -11: 0x8001fff5)
    ("attention_q0_rv1126b_i8", 0x1001, 0x4060, lambda v: 0x903 if v == 0x2 else v, r"scores tasks \[\]"),
    ("attention_q0_rk3576_i8", 0x1001, 0x4060, lambda v: 0x903 if v == 0x2 else v, r"scores tasks \[\]"),
    ("attention_q0_rk3562_i8", 0x1001, 0x4068, lambda v: 0 if v == 0x5A821000 else v, r"scores tasks \[\]"),
    ("attention_q0_rv1106_i8", 0x1001, 0x4068, lambda v: 0 if v == 0x5A821000 else v, r"BN multiplier 0x4068 is 0x0"),
    ("attention_q0_rv1106_i8", 0x1001, 0x4054, lambda v: v & ~0x10000 if v == 0x8001FFF5 else v,
     r"mixing BS_ALU_SRC 0x4054 = 2147549173; .*-zp_v \(-11\) in 17 bits"),
])
def test_int8_attention_register_forms_outside_the_decoded_ones_are_named(tmp_path, stem, target, reg, change,
                                                                          message):
    path = _doctored_corpus(tmp_path, stem, patch_registers(target, (reg,), change))
    with pytest.raises(ModelInvalidError, match=message) as info:
        rknnlite.Context(path, backend="software")
    assert "exSDPAttention" in str(info.value)


@pytest.mark.parametrize("stem", ["attention_q0_rk3576_i8", "encoder_layer_rv1126b_i8"])
def test_a_truncated_rk3576_attention_task_is_refused(tmp_path, stem):
    # CORE 0x3024 (an accumulator truncated by k bits: convs of tiny steps) was never seen on an attention's
    # tasks, whose scales come from their OUT_CVT: on the exSDPAttention node's tasks alone, 0 -> 0x21
    from rknnlite.model.rknn_graph.regcmd import TARGET_CORE, read_tasks

    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    vf = read_graph(loaded.payload, loaded.model)
    (graph,) = vf.subgraphs
    (node,) = [n for n in graph.nodes if n.op == "exSDPAttention"]
    (table,) = [t for t in graph.tensors if t.kind == "task"]
    tasks = [t for t in read_tasks(vf.tensor_data(graph, table), stem) if t.op_idx == node.index]

    def patch(data: bytearray) -> None:
        view, found = tensor_bytes(data, "regcmd"), 0
        for task in tasks:
            for at in range(task.regcmd_addr, task.regcmd_addr + 8 * task.regcfg_amount, 8):
                (entry,) = struct.unpack_from("<Q", view, at)
                if entry >> 48 == TARGET_CORE and entry & 0xFFFF == 0x3024:
                    struct.pack_into("<Q", view, at, entry | 0x21 << 16)
                    found += 1
        assert found

    path = _doctored_corpus(tmp_path, stem, patch)
    with pytest.raises(ModelInvalidError, match=r"exSDPAttention conv whose accumulator is truncated by 1 bits"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("platform", ["rk3576", "rv1126b", "rk3562", "rv1106"])
def test_an_int8_attention_whose_q_has_zero_point_0_runs_bit_for_bit(platform):
    # refused before on every map but rk3588's (no scores task found: random token graphs 314, 318, 321)
    stem = f"attention_q0_{platform}_i8"
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    (graph,) = read_graph(loaded.payload, loaded.model).subgraphs
    (node,) = [n for n in graph.nodes if n.op == "exSDPAttention"]
    assert list(graph.tensors[node.inputs[0]].zero_point) == [0]
    (y,), (ref,) = _corpus_run(stem)
    assert np.array_equal(y, ref)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_a_split_part_nothing_reads_is_computed_and_dropped(variant, tmp_path):
    """``y0, _, y2 = y.split([8, 10, 6], 1)``: the compiler writes tensor index -1 for the part
    nothing reads (the file was refused as one referring to a missing tensor).  The part gets a
    name of its own in the lowered Split; the outputs are the simulator's (FIDELITY)."""
    (split,) = [n for n in lowered(f"split_unused_{variant}").graph.nodes if n.op == "Split"]
    assert len(split.outputs) == 3 and split.outputs[1].endswith("/unread_part1")
    outputs, sims = _corpus_run(f"split_unused_{variant}")
    assert [y.shape for y in outputs] == [(1, 8, 8, 8), (1, 6, 8, 8)]

    def no_part_read(data: bytearray):  # node 3's outputs [7, -1, 8] -> [-1, -1, -1]
        at = bytes(data).index(struct.pack("<4i", 3, 7, -1, 8))
        data[at + 4:at + 16] = struct.pack("<3i", -1, -1, -1)

    path = _doctored_corpus(tmp_path, f"split_unused_{variant}", no_part_read)
    with pytest.raises(rknnlite.ModelInvalidError, match=r"none of its outputs \[-1, -1, -1\] is a tensor"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("platform", ["", "_rk3566", "_rk3576", "_rk3562", "_rv1126b"])
@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_an_abs_after_a_conv_is_a_leaky_relu_of_slope_minus_one(platform, variant):
    """The compiler makes ``Abs(conv)`` a ConvLeakyRelu of slope -1: int8 0xc000 read unsigned was
    3.0, and the file ran at cosine 0.70 against the simulator without a word (rk3588; the other
    maps refused it).  Read signed, every platform's file gives the simulator's outputs
    (test_corpus_file_runs_like_the_simulator)."""
    model = lowered(f"conv_abs{platform}_{variant}")
    assert [n.attrs["alpha"] for n in model.graph.nodes if n.op == "LeakyRelu"] == [-1.0]
    outputs, sims = _corpus_run(f"conv_abs{platform}_{variant}")
    assert np.all(outputs[0] >= 0) and _cos(outputs[0], sims[0]) >= 0.9999


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_average_pools_keep_count_include_pad_and_ceil_mode(variant):
    """PyTorch's AvgPool2d counts the padding in the divisor by default (count_include_pad=1), and
    ceil_mode adds a last window past the edge; both were refused before (avgpool_attrs: each output
    bit-exact against the simulator, the corpus test checks the values)."""
    pools = [n.attrs for n in lowered(f"avgpool_attrs_{variant}").graph.nodes if n.op == "AveragePool"]
    assert [(a.get("count_include_pad", 0), a.get("ceil_mode", 0)) for a in pools] == [(1, 0), (0, 1), (1, 1)]
    outputs, _ = _corpus_run(f"avgpool_attrs_{variant}")
    assert [y.shape[2:] for y in outputs] == [(8, 8), (8, 8), (9, 9)]


def test_an_average_pool_count_include_pad_other_than_0_or_1_is_refused(tmp_path):
    def count_twice(data: bytearray) -> None:  # the first pool's BSON count_include_pad: 1 -> 2
        node = node_tables(data, "AveragePool")[0]
        bson = node.vector(V6.n_bson, 1)
        at = bytes(bson.raw()).index(b"count_include_pad\x00")
        at = bytes(bson.raw()).index(b"value\x00", at) + len(b"value\x00")
        assert struct.unpack_from("<i", data, bson.pos + at)[0] == 1
        struct.pack_into("<i", data, bson.pos + at, 2)

    with pytest.raises(ModelInvalidError, match=r"count_include_pad 2, ceil_mode 0; 0 or 1 expected"):
        rknnlite.Context(_doctored_corpus(tmp_path, "avgpool_attrs_fp16", count_twice), backend="software")


def test_the_compilers_per_layer_input_conv_does_not_make_a_file_per_layer():
    """An odd-width input whose first op is no conv: the compiler applies mean/std with an unnamed
    depthwise 1x1 conv quantized per layer, beside the model's per-channel convs ("its convs mix
    per-channel and per-layer quantization" before: 14 of 148 random int8 files)."""
    model = lowered("input_odd_i8")
    assert model.precision == "int8"
    outputs, sims = _corpus_run("input_odd_i8")
    assert _cos(outputs[0], sims[0]) >= 0.9999


@pytest.mark.parametrize("platform", ["rk3576", "rv1126b"])
@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_the_compilers_compact_input_conv_is_an_identity(platform, variant, tmp_path):
    """rk3576/rv1126b move a 3-channel odd-width input whose first op is no conv into the NPU layout with
    a 1x1 conv of the compiler's whose identity weight is stored in rows of 4 values, fewer bytes than its
    tiles (refused as "weight tiles hold 64 bytes but the tensor's NPU size is 16/32" before: a third of
    random rk3576 graphs).  Any value but the identity's is refused."""
    stem = f"input_compact_{platform}_{variant}"
    graph = lowered(stem).graph
    (first,) = [n for n in graph.nodes if "x" in n.inputs]
    if variant == "fp16":
        assert first.op == "Identity"
    outputs, sims = _corpus_run(stem)
    assert _cos(outputs[0], sims[0]) >= 0.9999

    def scale_first(data: bytearray) -> None:  # the first row's 1 -> 0.5 (fp16) or code 2 (int8)
        view = tensor_bytes(data, "Pre_weightx")
        if variant == "fp16":
            assert struct.unpack_from("<e", view)[0] == 1.0
            struct.pack_into("<e", view, 0, 0.5)
        else:
            assert view[0] == 1
            view[0] = 2

    with pytest.raises(ModelInvalidError, match=r"compact compiler input weight \[3, 3, 1, 1\] that is not the "
                                                r"identity"):
        rknnlite.Context(_doctored_corpus(tmp_path, stem, scale_first), backend="software")


def test_a_grouped_conv_concatenates_its_groups_on_the_tables_axis():
    """An fp16 group-2 conv compiles to a Split, a conv per group and a Concat of the compiler's own,
    with no BSON: its axis is the parameter table's (refused before for want of a BSON axis)."""
    graph = lowered("grouped_conv_fp16").graph
    (concat,) = [n for n in graph.nodes if n.op == "Concat"]
    assert concat.attrs == {"axis": 1} and [n.op for n in graph.nodes].count("Conv") == 3


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_a_conv_prelu_takes_its_per_channel_slopes(variant, tmp_path):
    """ConvPRelu: the slopes are a (1, C, 1, 1) constant after the weight and bias (float16, or int16
    codes of 2^-14, the slope times 2^14 truncated: 0.15 is 2457).  fp16 reads them back as the ONNX
    decimals (0.15, not 0.1500244): with the float16 values 31 % of the negative outputs were a float16
    ulp off the simulator's."""
    model = lowered(f"conv_prelu_{variant}")
    (prelu,) = [n for n in model.graph.nodes if n.op == "PRelu"]
    slopes = model.graph.constants[prelu.inputs[1]].ravel()
    decimals = np.array([round(0.05 * k, 2) for k in range(1, 21)], np.float32)
    if variant == "fp16":
        assert np.array_equal(slopes, decimals)
    else:
        assert np.array_equal(slopes * 2 ** 14, np.trunc(decimals.astype(np.float64) * 2 ** 14))

    def as_float32(data: bytearray):  # the slope constant's dtype code (slot 0): float16/int16 -> float32
        data[tensor_table(data, "c5").field_pos(0)] = 1

    with pytest.raises(ModelInvalidError, match=r"slope inputs \[\('c5', 'float32', \[1, 20, 1, 1\]\)\]"):
        rknnlite.Context(_doctored_corpus(tmp_path, f"conv_prelu_{variant}", as_float32), backend="software")


def test_a_concat_whose_bson_and_table_axes_differ_is_refused(tmp_path):
    """A Concat carries its axis twice, in the BSON and in its parameter table (the only place for
    the compiler's own Concats); a file where the two disagree is refused, not run on either."""
    stem = "concat_fp16"

    def move_axis(data: bytearray) -> None:  # the first Concat with a BSON: its table's axis 1 -> 2
        concat = next(n for n in node_tables(data, "Concat") if n.scalars(V6.n_bson, "u8"))
        table = concat.table(V6.n_param, "Param")
        assert table.i32(0) == 1
        struct.pack_into("<i", data, table.field_pos(0), 2)

    with pytest.raises(ModelInvalidError, match=r"the BSON's axis 1 and the parameter table's 2 name different axes"):
        rknnlite.Context(doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, move_axis), backend="software")
