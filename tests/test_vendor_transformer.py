"""A transformer encoder's vendor op types off-board: ``exNorm`` (LayerNorm), ``exMatMul`` (a
MatMul of two activations), ``exGelu`` / ``ConvExGelu`` (GELU), and the bfloat16 tensor (dtype
code 16) an ``exNorm`` carries.

The corpus cases ``layernorm13`` (the opset-13 ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add chain),
``layernorm17`` (opset 17's LayerNormalization), ``matmul_act``, ``linear`` (a MatMul by a
constant: a 1x1 Conv) and ``linear_gelu`` were built with RKNN-Toolkit2 2.5.0 for rk3588
(``tools/vendor_corpus/models.py``); their fidelity against the simulator is asserted in
``tests/test_vendor_offboard.py`` (``FIDELITY``; the int8 builds of the new op types are refused
there, ``CORPUS_REFUSED``).  Each field the lowering decodes is doctored here and must be
refused naming it.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower as lower_mod
from rknnlite.model.rknn_graph import lower_rockchip
from rknnlite.model.rknn_graph.graph import attr_value, read_vendor_graph

from corpus import CORPUS, corpus_arrays
from vendor_files import doctored_copy, patch_registers, subgraph_table, tensor_bytes, tensor_table



def _lowered(stem: str, validate: bool = True):
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    return lower_rockchip(loaded.payload, loaded.model, validate=validate)


def _run(stem: str):
    data = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outs = ctx.run([data[f"in{k}"] for k in range(len(ctx.inputs))], data_format="nchw")
    return outs, [data[f"out{k}"].reshape(y.shape) for k, y in enumerate(outs)]


def _onnx_initializers(case: str):
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    model = onnx.load(str(CORPUS / "onnx" / f"{case}.onnx"))
    return [numpy_helper.to_array(i) for i in model.graph.initializer]


def _node_table(data: bytearray, op: str):
    return next(n for n in subgraph_table(data).tables(1) if n.string(1, "") == op)


def _doctored(tmp_path, stem: str, patch) -> str:
    return doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)


# -- LayerNorm: exNorm ---------------------------------------------------------------------------

@pytest.mark.parametrize("stem, case", [("layernorm13_fp16", "layernorm13"), ("layernorm17_fp16", "layernorm17")])
def test_layer_norm_is_layer_normalization_over_the_channels(stem, case):
    model = _lowered(stem)
    assert "exNorm" in model.vendor_ops
    nodes = [n for n in model.graph.nodes if n.name.startswith("exNorm:")]
    assert [n.op for n in nodes] == ["Transpose", "LayerNormalization", "Transpose"]
    assert nodes[1].attrs == {"axis": -1, "epsilon": pytest.approx(1e-5)}  # eps from the parameter table
    # one NPU op: only its output is rounded to float16
    assert {n.outputs[0] for n in nodes[:-1]} <= set(model.graph.keep_float)
    assert nodes[-1].outputs[0] not in model.graph.keep_float
    gamma, beta = (model.graph.constants[name] for name in nodes[1].inputs[1:])
    weights = [w for w in _onnx_initializers(case) if w.shape == (32,)]
    np.testing.assert_array_equal(gamma, weights[0].astype(np.float16).astype(np.float32))  # stored float16
    np.testing.assert_array_equal(beta, weights[1])  # stored float32 (the executor rounds it in fp16 mode)


def test_layer_norm_matches_the_simulator_bit_for_bit():
    for stem in ("layernorm13_fp16", "layernorm17_fp16"):
        (y,), (ref,) = _run(stem)
        assert np.array_equal(y, ref)


def test_toolkit_2_2_0_layer_norm_takes_its_axes_from_the_bson(tmp_path):
    # RKNN-Toolkit2 2.2.0 leaves the norm table's axes empty (later releases write [1]); its BSON says [1]
    loaded = load_model(str(CORPUS / "encoder_layer_fp16_tk220.rknn"))
    sg = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, "f").subgraphs[0]
    norms = [n for n in sg.nodes if n.op == "exNorm"]
    assert norms and all(n.params["axes"] == [] for n in norms)
    (y,), (ref,) = _run("encoder_layer_fp16_tk220")
    assert np.abs(y - ref).max() <= 1e-3 * max(1.0, np.abs(ref).max())
    axes_one = b"axes\x00&\x00\x00\x00\x02dtype\x00\x03\x00\x00\x00is\x00\x04value\x00\x0c\x00\x00\x00\x100\x00\x01"

    def patch(data):  # the first exNorm's BSON axes [1] -> [2]
        at = data.find(axes_one)
        assert at > 0
        data[at + len(axes_one) - 1] = 2

    with pytest.raises(ModelInvalidError, match=r"parameter table .*'axes': \[\]\} \(type 87\), BSON axes \[2\]; only "
                                                r"mode 'layer' over axes \[1\]"):
        rknnlite.Context(_doctored(tmp_path, "encoder_layer_fp16_tk220", patch), backend="software")


def test_the_bfloat16_tensor_is_the_reduce_mean_weight_of_ones():
    loaded = load_model(str(CORPUS / "layernorm13_fp16.rknn"))
    sg = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, "f").subgraphs[0]
    (bf16,) = [t for t in sg.tensors if t.dtype == "bfloat16"]
    assert bf16.name == "ReduceMean2_2ln_rm_bf16_weight" and bf16.kind == "generated" and bf16.shape == (1, 32, 1, 1)
    data = bytearray((CORPUS / "layernorm13_fp16.rknn").read_bytes())
    assert bytes(tensor_bytes(data, bf16.name)) == struct.pack("<H", 0x3F80) * 32  # bfloat16 1.0


def test_an_unknown_dtype_code_beside_bfloat16_is_named(tmp_path):
    def patch(data):
        data[tensor_table(data, "ReduceMean2_2ln_rm_bf16_weight").field_pos(0)] = 17

    with pytest.raises(ModelInvalidError, match=r"tensor 17 \('ReduceMean2_2ln_rm_bf16_weight'\) has unknown "
                                                r"dtype code 17 \(known: .*16 bfloat16\)"):
        rknnlite.Context(_doctored(tmp_path, "layernorm13_fp16", patch), backend="software")


@pytest.mark.parametrize("name, dtype", [("ReduceMean2_2ln_rm_bf16_weight", 10), ("ReduceMean2_2ln_rm_fp16_weight", 16)])
def test_a_reduce_mean_weight_of_another_dtype_is_refused(tmp_path, name, dtype):
    def patch(data):
        data[tensor_table(data, name).field_pos(0)] = dtype

    expected = "bfloat16" if "bf16" in name else "float16"
    with pytest.raises(ModelInvalidError, match=rf"reduce-mean weight '{name}' is a \w+ generated tensor of shape "
                                                rf"\[1, 32, 1, 1\]; 32 {expected} values were expected"):
        rknnlite.Context(_doctored(tmp_path, "layernorm13_fp16", patch), backend="software")


@pytest.mark.parametrize("name, one", [("ReduceMean2_2ln_rm_bf16_weight", 0x3F80),
                                       ("ReduceMean2_2ln_rm_fp16_weight", 0x3C00)])
def test_a_reduce_mean_weight_other_than_ones_is_refused(tmp_path, name, one):
    def patch(data):
        view = tensor_bytes(data, name)
        assert bytes(view[:2]) == struct.pack("<H", one)
        view[:2] = struct.pack("<H", one + 0x80)  # 1.0 -> 2.0 (bfloat16) / 1.125 (float16)

    with pytest.raises(ModelInvalidError, match=rf"reduce-mean weight '{name}' holds \[(2\.0|1\.125), 1\.0, .*only ones"):
        rknnlite.Context(_doctored(tmp_path, "layernorm13_fp16", patch), backend="software")


def test_a_layer_norm_of_another_mode_is_refused(tmp_path):
    def patch(data):
        needle = struct.pack("<I", 5) + b"layer\0"  # the parameter table's string (the BSON's has another prefix)
        assert data.count(needle) == 1
        at = data.index(needle) + 4
        data[at:at + 5] = b"group"

    with pytest.raises(ModelInvalidError, match=r"exNorm 'exNorm:ReduceMean2_2ln'\): parameter table \{'mode': "
                                                r"'group', .*only mode 'layer' over axes \[1\]"):
        rknnlite.Context(_doctored(tmp_path, "layernorm13_fp16", patch), backend="software")


def test_a_layer_norm_over_other_axes_is_refused(tmp_path):
    def patch(data):
        vec = _node_table(data, "exNorm").table(8).vector(2, 4)
        assert struct.unpack_from("<i", data, vec.pos)[0] == 1
        struct.pack_into("<i", data, vec.pos, 3)

    with pytest.raises(ModelInvalidError, match=r"'axes': \[3\]\} \(type 87\), BSON axes \[1\]; only mode 'layer' over "
                                                r"axes \[1\]"):
        rknnlite.Context(_doctored(tmp_path, "layernorm13_fp16", patch), backend="software")


@pytest.mark.parametrize("eps", [-2.0, float("inf")])
def test_a_layer_norm_epsilon_that_is_not_positive_is_refused(tmp_path, eps):
    def patch(data):
        pos = _node_table(data, "exNorm").table(8).field_pos(1)
        assert struct.unpack_from("<f", data, pos)[0] == np.float32(1e-5)
        struct.pack_into("<f", data, pos, eps)

    with pytest.raises(ModelInvalidError, match=rf"parameter eps is {eps!r}; a positive float was expected"):
        rknnlite.Context(_doctored(tmp_path, "layernorm13_fp16", patch), backend="software")


def test_the_epsilon_is_the_parameter_tables(tmp_path):
    def patch(data):
        struct.pack_into("<f", data, _node_table(data, "exNorm").table(8).field_pos(1), 0.5)

    loaded = load_model(_doctored(tmp_path, "layernorm13_fp16", patch))
    model = lower_rockchip(loaded.payload, loaded.model)
    (norm,) = [n for n in model.graph.nodes if n.op == "LayerNormalization"]
    assert norm.attrs["epsilon"] == 0.5


def test_a_layer_norm_scale_of_another_dtype_is_refused(tmp_path):
    def patch(data):  # the scale (float16) relabelled as the bias's float32
        data[tensor_table(data, "c17").field_pos(0)] = 1

    with pytest.raises(ModelInvalidError, match=r"constant inputs \[\('c17', 'float32', \[1, 32, 1, 1\]\), \('c20', "
                                                r"'float32', \[1, 32, 1, 1\]\)\]; a float16 scale and a float32 bias"):
        rknnlite.Context(_doctored(tmp_path, "layernorm13_fp16", patch), backend="software")


def test_a_layer_norm_without_scale_and_bias_is_the_identity_affine(monkeypatch):
    # the compiler drops a LayerNorm's scale of ones and bias of zeros (the transformer_like
    # architecture's exNorm has only its reduce-mean weights): the lowering uses ones and zeros
    original = lower_mod.read_vendor_graph

    def read_vendor_graph(*args, **kwargs):
        vf = original(*args, **kwargs)
        sg = vf.subgraphs[0]
        drop = {t.index for t in sg.tensors if t.name in ("c17", "c20")}
        nodes = tuple(dataclasses.replace(n, inputs=tuple(i for i in n.inputs if i not in drop)) for n in sg.nodes)
        return dataclasses.replace(vf, subgraphs=(dataclasses.replace(sg, nodes=nodes),) + vf.subgraphs[1:])

    monkeypatch.setattr(lower_mod, "read_vendor_graph", read_vendor_graph)
    model = _lowered("layernorm13_fp16", validate=False)
    (norm,) = [n for n in model.graph.nodes if n.op == "LayerNormalization"]
    np.testing.assert_array_equal(model.graph.constants[norm.inputs[1]], np.ones(32, np.float32))
    np.testing.assert_array_equal(model.graph.constants[norm.inputs[2]], np.zeros(32, np.float32))


# -- MatMul of two activations: exMatMul ------------------------------------------------------------

def test_matmul_of_two_activations_is_a_batched_matmul():
    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.graph import Graph

    model = _lowered("matmul_act_fp16")
    nodes = [n for n in model.graph.nodes if n.name.startswith("exMatMul:")]
    assert [n.op for n in nodes] == ["Transpose", "Transpose", "MatMul", "Transpose"]
    assert {n.outputs[0] for n in nodes[:-1]} <= set(model.graph.keep_float)
    graph = Graph(nodes, [nodes[0].inputs[0], nodes[1].inputs[0]], [nodes[-1].outputs[0]], {})
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 8, 1, 16)).astype(np.float32)  # (H, K, 1, M)
    b = rng.standard_normal((2, 8, 1, 12)).astype(np.float32)  # (H, K, 1, N)
    (got,) = Executor(graph, "float32").run([a, b])
    np.testing.assert_allclose(got[:, :, 0], np.einsum("hkm,hkn->hmn", a[:, :, 0], b[:, :, 0]), rtol=1e-5, atol=1e-5)
    (y,), (ref,) = _run("matmul_act_fp16")
    assert np.array_equal(y, ref)


def test_matmul_of_another_geometry_is_refused(tmp_path):
    def patch(data):  # the output (2, 16, 1, 12) made (2, 12, 1, 16)
        vec = tensor_table(data, "y_mm").vector(4, 4)
        assert struct.unpack_from("<4i", data, vec.pos) == (2, 16, 1, 12)
        struct.pack_into("<4i", data, vec.pos, 2, 12, 1, 16)

    with pytest.raises(ModelInvalidError, match=r"operands \[2, 8, 1, 16\], \[2, 8, 1, 12\] -> \[2, 12, 1, 16\]; "
                                                r"\(H, K, 1, M\), \(H, K, 1, N\) -> \(H, M, 1, N\) was expected"):
        rknnlite.Context(_doctored(tmp_path, "matmul_act_fp16", patch), backend="software")


def test_a_matmul_times_a_constant_keeps_its_fused_factor():
    # (a @ b) * 0.25 compiles to one exMatMul with BSON c_type "mul" and the float32 scalar as a third input (an
    # attention's 1/sqrt(d); rk3566 has no exSDPAttention). Read without it the output was 4x the simulator's
    # (max |d| 7.99) in a validated rk3588 file.
    model = _lowered("matmul_scaled_fp16")
    nodes = [n for n in model.graph.nodes if n.name.startswith("exMatMul:")]
    assert [n.op for n in nodes] == ["Transpose", "Transpose", "MatMul", "Mul", "Transpose"]
    assert model.graph.constants[nodes[3].inputs[1]].tolist() == 0.25
    (y,), (ref,) = _run("matmul_scaled_fp16")
    assert np.array_equal(y, ref)


def _c_type_add(data: bytearray) -> None:  # the exMatMul's BSON c_type "mul" made "add" (same length)
    at = data.index(b"mul\0", data.index(b"c_type"))
    data[at:at + 3] = b"add"


@pytest.mark.parametrize("patch, message", [
    (lambda data: tensor_bytes(data, "c3").__setitem__(slice(0, 4), struct.pack("<f", -0.25)),
     r"an exMatMul multiplied by -0.25; only positive finite factors"),
    (_c_type_add, r"c_type 'add' with constant inputs \[\('c3', 'float32', \[1, 1, 1, 1\]\)\]; only 'mul' by one "
                  r"float32 scalar"),
])
def test_a_matmul_factor_outside_the_checked_ones_is_refused(tmp_path, patch, message):
    with pytest.raises(ModelInvalidError, match=message):
        rknnlite.Context(_doctored(tmp_path, "matmul_scaled_fp16", patch), backend="software")


def test_a_bson_attribute_the_lowering_does_not_read_is_refused(tmp_path):
    # every op's BSON names are checked against those its lowering reads (lower._BSON_ATTRIBUTES): an
    # attribute nothing reads would be dropped, as exMatMul's c_type was; here c_type renamed c_typf
    def rename(data: bytearray) -> None:
        at = data.index(b"c_type\0")
        data[at:at + 6] = b"c_typf"

    with pytest.raises(ModelInvalidError, match=r"BSON attribute\(s\) \['c_typf'\] of a exMatMul, whose meaning the "
                                                r"lowering does not read \(it reads \['c_type'\]\)"):
        rknnlite.Context(_doctored(tmp_path, "matmul_scaled_fp16", rename), backend="software")


# -- GELU: exGelu, ConvExGelu -----------------------------------------------------------------------

def test_gelu_is_the_exact_erf_form_after_a_rounded_conv():
    model = _lowered("linear_gelu_fp16")
    assert model.vendor_ops == ("InputOperator", "Reshape", "Transpose", "exGelu", "ConvExGelu", "OutputOperator")
    assert [n.op for n in model.graph.nodes if n.name == "exGelu:Mul32_2gelu"] == ["Gelu"]
    conv, gelu = [n for n in model.graph.nodes if n.name == "Conv:MatMul3#2"]
    assert (conv.op, gelu.op) == ("Conv", "Gelu") and gelu.inputs == conv.outputs
    assert conv.outputs[0] not in model.graph.keep_float  # the conv output is rounded to fp16 first
    ys, refs = _run("linear_gelu_fp16")
    assert all(np.array_equal(y, ref) for y, ref in zip(ys, refs))


def test_a_linear_layer_is_a_one_by_one_conv():
    model = _lowered("linear_fp16")
    assert "Conv" in model.vendor_ops and [n.op for n in model.graph.nodes if n.name == "Conv:MatMul3#2"] == ["Conv"]
    w = [w for w in _onnx_initializers("linear") if w.ndim == 2][0]  # (32, 48): ONNX MatMul's (K, N)
    (conv,) = [n for n in model.graph.nodes if n.name == "Conv:MatMul3#2"]
    np.testing.assert_array_equal(model.graph.constants[conv.inputs[1]][:, :, 0, 0],
                                  w.T.astype(np.float16).astype(np.float32))


def test_int8_matmul_is_the_npus_integer_pipeline():
    model = _lowered("matmul_act_i8")
    nodes = [n for n in model.graph.nodes if n.name.startswith("exMatMul:")]
    assert [n.op for n in nodes] == ["VendorCodes", "VendorCodes", "Mul", "Add", "Floor", "Transpose", "Transpose",
                                     "MatMul", "Mul", "Transpose"]
    consts = model.graph.constants
    (cvt,) = [consts[i] for n in nodes if n.op == "Mul" for i in n.inputs if i.endswith("__cvt")]
    assert float(cvt) == 0x7328 / 2 ** 15  # CNA_CVT_CON1's scale 29480 over its 15-bit truncate
    (unit,) = [consts[i] for n in nodes if n.op == "Mul" for i in n.inputs if i.endswith("__unit")]
    assert float(unit) == pytest.approx(0x41D3 / 2 ** 21 * model.graph.quant["y_mm"].scale[0], rel=1e-6)
    (y,), (ref,) = _run("matmul_act_i8")
    assert np.array_equal(y, ref)  # without the CNA conversion of b: 77.6 % equal (cosine 0.99989)


@pytest.mark.parametrize("regs, change, message", [
    ((0x1050, 0x1054, 0x1058, 0x105C), lambda v: v + 1, r"CNA_CVT_CON1 \(0x1050\) = 0x7328000f \(scale 29480, offset 15\) with shift 15; the "
                              r"offset must undo the zero point -14 of 'b_rs'"),
    ((0x1058,), lambda v: v + 0x10000, r"CNA_CVT_CON1..4 \(0x1050-0x105c\) differ"),
    ((0x104C,), lambda v: v ^ 0x10, r"CNA_CVT_CON0 \(0x104c\) = 0x3cf3cea; the observed layout is four equal"),
    ((0x104C,), lambda v: v | 0x4, r"CNA_CVT_CON0 \(0x104c\) = 0x3cf3cfe; the observed layout"),
])
def test_int8_matmul_cna_conversion_registers_are_checked(tmp_path, regs, change, message):
    path = _doctored(tmp_path, "matmul_act_i8", patch_registers(0x0201, regs, change))
    with pytest.raises(ModelInvalidError, match=r"exMatMul 'exMatMul:MatMul2#1'\): " + message):
        rknnlite.Context(path, backend="software")


def test_int8_matmul_with_a_bn_stage_is_refused(tmp_path):
    def patch(data):  # the conv task's 0x405c write becomes a BN_MUL (0x4068) write, as an attention's
        view = tensor_bytes(data, "regcmd")
        for at in range(0, len(view) - 7, 8):
            (entry,) = struct.unpack_from("<Q", view, at)
            if entry >> 48 == 0x1001 and entry & 0xFFFF == 0x405C:
                struct.pack_into("<Q", view, at, (0x1001 << 48) | (0x40001000 << 16) | 0x4068)

    with pytest.raises(ModelInvalidError, match=r"its conv task writes the BN stage \(0x4068 = 0x40001000\), the "
                                                r"multiplier of no fused factor \(None"):
        rknnlite.Context(_doctored(tmp_path, "matmul_act_i8", patch), backend="software")


# rk3566's int8 attention: two exMatMuls whose data operand DPU-only tasks convert before the conv task
# (q: scale 0x7d1c, shift 15, offset -zp_q; the probabilities: 0x7f7f, 16, 128), the scores' 1/sqrt(d)
# in the conv task's BN stage
@pytest.mark.parametrize("target, reg, change, message", [
    (0x1001, 0x4044, lambda v: v + 1 if v == 3 else v, r"\(scale 32028, offset 4\) with shift 15; the offset must "
                                                       r"undo the zero point -3"),
    (0x1001, 0x4088, lambda v: v + 1 if v == 0xF else v, r"convert it with \(scale, shift, offset\) \[\(32028, 15, 3\), "
                                                        r"\(32028, 16, 3\)\]"),
    (0x1001, 0x4068, lambda v: v + 0x10000 if v == 0x40001000 else v, r"0x4068 = 0x40011000\), the multiplier of no "
                                                                     r"fused factor \(0.25"),
])
def test_rk3566_int8_attention_matmul_registers_are_checked(tmp_path, target, reg, change, message):
    assert "exMatMul" in _lowered("encoder_layer_rk3566_i8").vendor_ops
    (y,), (ref,) = _run("encoder_layer_rk3566_i8")
    step = load_model(str(CORPUS / "encoder_layer_rk3566_i8.rknn")).model.outputs[0].quant.scale[0]
    assert np.mean(np.abs(y - ref) <= step * 1.0001) >= 0.99
    indexed = reg == 0x4088  # the second of the two conversion tasks only: tasks that disagree
    patch = patch_registers(target, (reg,), (lambda v, n: change(v) if n % 2 else v) if indexed else change,
                            indexed=indexed)
    with pytest.raises(ModelInvalidError, match=message):
        rknnlite.Context(_doctored(tmp_path, "encoder_layer_rk3566_i8", patch), backend="software")


def test_rk3566_int8_attention_reads_the_registers_its_dpu_only_tasks_left(tmp_path):
    # k of zero point 0 (attention_k0_rk3566): the scores conv task writes no BS_ALU_SRC, the node's DPU-only
    # tasks before it having written 0 (refused before as a missing register; random token graphs 310, 311)
    (y,), (ref,) = _run("attention_k0_rk3566_i8")
    model = _lowered("attention_k0_rk3566_i8")
    assert "exMatMul" in model.vendor_ops
    step = model.graph.quant["y"].scale[0]
    cos = float(np.dot(y.ravel(), ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)))
    assert cos >= 0.9999 and np.mean(np.abs(y - ref) <= 1.01 * step) >= 0.99
    # what those tasks wrote is read: 5 there is a weight zero point of -5
    patch = patch_registers(0x1001, (0x4054,), lambda v: 0x5 if v == 0 else v)
    with pytest.raises(ModelInvalidError, match=r"BS_ALU_SRC \(0x4054\) give weight zero point -5; a plain layer "
                                                r"zero point equal to 'transpose_34_rs''s \(0\)"):
        rknnlite.Context(_doctored(tmp_path, "attention_k0_rk3566_i8", patch), backend="software")


@pytest.mark.parametrize("regs, change, message", [
    ((0x4054,), lambda v: v - 1, r"BS_ALU_SRC \(0x4054\) give weight zero point 21; a plain layer zero point equal to "
                              r"'a_tp_rs''s \(20\)"),
    ((0x4080,), lambda v: 0, r"OUT_CVT offset 0, scale 0x41d3, shift 0x15; the output's zero point -2"),
])
def test_int8_matmul_dpu_registers_are_checked(tmp_path, regs, change, message):
    path = _doctored(tmp_path, "matmul_act_i8", patch_registers(0x1001, regs, change))
    with pytest.raises(ModelInvalidError, match=message):
        rknnlite.Context(path, backend="software")


# -- int8: exNorm on the grids of its scale and bias, GELU from the file's tables ----------------------

def test_int8_layer_norm_puts_its_scale_and_bias_on_their_int8_grids():
    model = _lowered("layernorm13_i8")
    loaded = load_model(str(CORPUS / "layernorm13_i8.rknn"))
    sg = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, "f").subgraphs[0]
    stored = {t.name: t for t in sg.tensors if t.name in ("c17", "c20")}
    (norm,) = [n for n in model.graph.nodes if n.op == "LayerNormalization"]
    gamma, beta = (model.graph.constants[name] for name in norm.inputs[1:])
    weights = [w for w in _onnx_initializers("layernorm13") if w.shape == (32,)]
    for got, t, raw in ((gamma, stored["c17"], weights[0].astype(np.float16)), (beta, stored["c20"], weights[1])):
        (s,), (zp,) = t.scale, t.zero_point
        codes = np.clip(np.rint(raw.astype(np.float64) / s) + zp, -128, 127)
        np.testing.assert_allclose(got, (codes - zp) * s, rtol=1e-6)
        assert not np.allclose(got, raw, rtol=0, atol=1e-6)  # not the stored values themselves
    (y,), (ref,) = _run("layernorm13_i8")
    step = model.graph.quant["y"].scale[0]
    assert np.mean(y == ref) >= 0.996 and np.abs(y - ref).max() <= 1.01 * step  # 94-97 % off the grids


def test_int8_layer_norm_scale_codes_its_float16_values_do_not_tell_are_noted():
    # the simulator puts the ONNX model's float32 scale on the grid; the file holds it in float16, and on
    # channels 0 and 14 a tie of the grid lies within half a float16 step (channel 0's float32 value rounds
    # the other way): with the float32 values' codes the file is bit-exact, with the float16 values' its
    # one-step differences are on the noted channels alone
    from rknnlite.backends.software.executor import Executor

    model = _lowered("layernorm13_i8")
    (note,) = model.notes
    assert "exNorm" in note and "scale 'c17': channels [0, 14] of 32" in note and "one step" in note
    loaded = load_model(str(CORPUS / "layernorm13_i8.rknn"))
    sg = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, "f").subgraphs[0]
    (t,) = [t for t in sg.tensors if t.name == "c17"]
    (s,), (zp,) = t.scale, t.zero_point
    gamma32 = [w for w in _onnx_initializers("layernorm13") if w.shape == (32,)][0].astype(np.float64)
    on_grid = ((np.clip(np.rint(gamma32 / s) + zp, -128, 127) - zp) * s).astype(np.float32)
    (norm,) = [n for n in model.graph.nodes if n.op == "LayerNormalization"]
    assert set(np.nonzero(on_grid != model.graph.constants[norm.inputs[1]])[0]) == {0}
    data = corpus_arrays("layernorm13_i8")
    ref = data["out0"]

    def run():
        (y,) = Executor(model.graph, model.metadata.float_dtype).run(model.graph_inputs([data["in0"]]))
        return y.reshape(ref.shape)

    y = run()
    assert set(np.nonzero(y != ref)[-1]) == {0}  # (1, tokens, channels)
    model.graph.constants[norm.inputs[1]] = on_grid
    assert np.array_equal(run(), ref)


def test_inspect_shows_what_may_keep_a_file_from_the_simulators_outputs(capsys):
    import json

    from rknnlite.cli import main

    assert main(["inspect", str(CORPUS / "layernorm13_i8.rknn")]) == 0
    text = capsys.readouterr().out
    assert "off-board: runs on the software backend\n  note: " in text and "channels [0, 14] of 32" in text
    assert main(["inspect", "--json", str(CORPUS / "layernorm13_fp16.rknn")]) == 0
    assert json.loads(capsys.readouterr().out)["off_board"]["notes"] == []


@pytest.mark.parametrize("value, ambiguous", [(0.015, True), (0.02, False), (0.0249, False)])
def test_a_float16_value_is_ambiguous_on_a_grid_when_a_tie_lies_within_half_its_step(value, ambiguous):
    from rknnlite.model.rknn_graph.transformer import ambiguous_grid_codes

    assert ambiguous_grid_codes(np.array([0.0, value], np.float16), 0.01).tolist() == ([1] if ambiguous else [])


def test_an_int8_layer_norm_scale_without_quantization_is_refused(monkeypatch):
    original = lower_mod._Lowering.tensor

    def tensor(self, index, node):
        t = original(self, index, node)
        return dataclasses.replace(t, scale=(), zero_point=()) if t.name == "c20" else t

    monkeypatch.setattr(lower_mod._Lowering, "tensor", tensor)
    with pytest.raises(ModelInvalidError, match=r"constant 'c20' of an int8 file has scale \[\] and zero point \[\]; "
                                                "one positive scale and one int8 zero point were expected"):
        _lowered("layernorm13_i8")


def test_int8_gelu_runs_from_the_files_lookup_tables():
    model = _lowered("linear_gelu_i8")
    assert [n.op for n in model.graph.nodes if n.name == "exGelu:Mul32_2gelu"] == ["VendorCodes",
                                                                                    "VendorLutActivation"]
    assert [n.op for n in model.graph.nodes if n.name == "Conv:MatMul3#2"][-1] == "VendorLutActivation"
    ys, refs = _run("linear_gelu_i8")
    for y, ref in zip(ys, refs):
        assert np.mean(y == ref) >= 0.99 and np.abs(y - ref).max() <= 0.016


@pytest.mark.parametrize("stem, op", [("encoder_layer_rk3576_i8", "exGelu"), ("encoder_layer_rv1126b_i8", "ConvExGelu"),
                                      ("encoder_layer_rk3562_i8", "ConvExGelu")])
def test_int8_gelu_on_rk3576_rv1126b_and_rk3562_runs_its_table_in_their_index_map(stem, op):
    # refused before ("its lookup-table index map there was not decoded"); the DPU task's index map is
    # the platform's, as for its Sigmoid (f2act, t4act), the tables the file's own
    model = _lowered(stem)
    assert op in model.vendor_ops
    gelu = [n for n in model.graph.nodes if n.op == "VendorLutActivation"]
    assert gelu
    ys, refs = _run(stem)
    step = load_model(str(CORPUS / f"{stem}.rknn")).model.outputs[0].quant.scale[0]
    for y, ref in zip(ys, refs):
        assert np.mean(np.abs(y - ref) <= step * 1.0001) >= 0.99


def _sdpa_attribute(stem: str, name: str):
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    vf = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, stem)
    (sdpa,) = [n for n in vf.subgraphs[0].nodes if n.op == "exSDPAttention"]
    return attr_value(sdpa, name)


@pytest.mark.parametrize("stem", ["encoder_layer_i8_tk230", "encoder_layer_i8_tk220", "encoder_layer_rk3576_i8_tk230"])
def test_the_older_releases_q_add_names_a_grid_the_simulator_does_not_apply(stem):
    # RKNN-Toolkit2 2.2.0/2.3.0 name a third grid in an int8 exSDPAttention's BSON; their simulator's
    # outputs are 2.3.2's (which has none) bit for bit, and so are rknnlite's
    assert _sdpa_attribute(stem, "q_add") is not None
    assert _sdpa_attribute("encoder_layer_rk3576_i8_tk232", "q_add") is None
    (ys, refs), (ys_232, refs_232) = _run(stem), _run("encoder_layer_rk3576_i8_tk232")
    for y, ref, y_232, ref_232 in zip(ys, refs, ys_232, refs_232):
        assert np.array_equal(ref, ref_232) and np.array_equal(y, y_232)


@pytest.mark.parametrize("stem", ["gather_fp16", "gather_i8"])
def test_a_gather_of_tokens_is_a_one_by_one_conv_selecting_them(stem):
    model = _lowered(stem)
    assert "Gather" not in model.vendor_ops
    nodes = [n for n in model.graph.nodes if n.name == "Conv:Gather3_2conv"]
    (conv,) = [n for n in nodes if n.op == "Conv"]
    weight = model.graph.constants[conv.inputs[1]][:, :, 0, 0]
    (value,) = {float(v) for v in weight[weight != 0]}  # one nonzero per row: 1 (int8: its integer code)
    np.testing.assert_array_equal(np.argmax(weight, axis=1), [0, 5, 2, 15])
    scale = 1.0
    if stem.endswith("_i8"):  # the integer accumulator: the code times the input and weight scales is 1
        (codes,) = [n for n in nodes if n.op == "VendorCodes"]
        (requant,) = [n for n in nodes if n.op == "VendorRequant"]
        scale = requant.attrs["multiplier"][0] * requant.attrs["scale"] / codes.attrs["scale"]
    assert (weight != 0).sum() == 4 and value * scale == pytest.approx(1, rel=1e-2)
    (y,), (ref,) = _run(stem)
    assert np.array_equal(y, ref)


# -- an embedding lookup: Gather on the CPU ----------------------------------------------------------

def test_an_embedding_lookup_is_a_gather_of_the_float16_table_by_the_int64_ids():
    model = _lowered("embedding_fp16")
    (gather,) = [n for n in model.graph.nodes if n.op == "Gather"]
    assert gather.attrs == {"axis": 0} and gather.inputs[1] == "ids"
    (table,) = [w for w in _onnx_initializers("embedding") if w.shape == (50, 32)]
    np.testing.assert_array_equal(model.graph.constants[gather.inputs[0]], table.astype(np.float16).astype(np.float32))
    assert model.metadata.inputs[0].dtype == "int64"
    data = corpus_arrays("embedding_fp16")
    with rknnlite.Context(str(CORPUS / "embedding_fp16.rknn"), backend="software") as ctx:
        (y,) = ctx.run([data["in0"]])
    ref = data["out0"].reshape(y.shape)
    assert np.mean(y == ref) >= 0.99 and np.abs(y - ref).max() <= 2 ** -14  # the Linear's conv: 1 ulp


def test_an_embedding_table_of_another_dtype_is_refused(tmp_path):
    def patch(data):  # the float16 table relabelled int16
        data[tensor_table(data, "table1").field_pos(0)] = 5

    with pytest.raises(ModelInvalidError, match=r"a Gather of a int16 shape tensor 'table1' by int64 input 'ids'; only "
                                                "a float16 constant table indexed by an int64 graph input"):
        rknnlite.Context(_doctored(tmp_path, "embedding_fp16", patch), backend="software")


def test_token_ids_that_another_op_reads_are_refused(tmp_path):
    def patch(data):  # the ids relabelled float16: no longer int64 token ids
        data[tensor_table(data, "ids").field_pos(0)] = 10

    with pytest.raises(ModelInvalidError, match=r"Gather of a float16 shape tensor 'table1' by float16 input 'ids'"):
        rknnlite.Context(_doctored(tmp_path, "embedding_fp16", patch), backend="software")


def test_an_embedding_gather_on_another_axis_is_refused(monkeypatch):
    original = lower_mod._Lowering.bson

    def bson(self, node, name, default=None):
        return 1 if (node.op, name) == ("Gather", "axis") else original(self, node, name, default)

    monkeypatch.setattr(lower_mod._Lowering, "bson", bson)
    with pytest.raises(ModelInvalidError, match=r"axis 1 of a \[50, 32\] table by \[1, 16\] indices -> \[1, 16, 32\]; "
                                                r"rows \(axis 0\) of a 2-D table were expected"):
        _lowered("embedding_fp16")


@pytest.mark.parametrize("stem", ["scores_dh24_fp16", "scores_dh24_i8", "encoder_layer_dh24_rk3566_fp16",
                                  "encoder_layer_dh24_rk3566_i8"])
def test_a_fused_factor_that_is_no_power_of_two_runs(stem):
    """Scores scaled by 1/sqrt(24) (heads of 24): the exMatMul's factor is no power of two (refused until
    2026-12-06, found by random token graphs built with RKNN-Toolkit2).  int8 multiplies by the conv task's
    16-bit BN multiplier, 26755 / 2^17, not the float32 factor."""
    model = _lowered(stem)
    factors = [model.graph.constants[n.inputs[1]].item() for n in model.graph.nodes
               if n.name.startswith("exMatMul:") and n.op == "Mul" and n.outputs[0].endswith("factored")]
    assert factors and all(f == pytest.approx(1 / np.sqrt(24), rel=2 ** -15) for f in factors)
    if stem.endswith("_i8"):
        assert all(f * 2 ** 17 == round(f * 2 ** 17) for f in factors)  # the register's value
    outputs, sims = _run(stem)
    for y, ref in zip(outputs, sims):
        assert float(np.dot(y.ravel(), ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref))) >= 0.9999


def test_an_int8_factor_the_bn_multiplier_does_not_hold_is_refused(tmp_path):
    def other_multiplier(value: int) -> int:  # 0x4068: the 16-bit scale in the high half, now 1.5x
        return (((value >> 16) * 3 // 2) << 16) | (value & 0xFFFF)

    path = _doctored(tmp_path, "scores_dh24_i8", patch_registers(0x1001, (0x4068,), other_multiplier))
    with pytest.raises(ModelInvalidError, match=r"the multiplier of no fused factor \(0.2041"):
        rknnlite.Context(path, backend="software")


def test_an_attention_scale_above_one_half_has_a_shift_below_16():
    """Heads of 2 scale the scores by 1/sqrt(2): the BN word 0x5a820f00 holds 23170 / 2^15, its 5-bit
    shift field (bits 8..12) below 16, where every attention seen before had 0x1000 | s << 8.  The
    int8 file was refused; it runs like the simulator (corpus encoder_layer_dh2)."""
    from rknnlite.model.rknn_graph.regcmd import bn_multiplier

    assert bn_multiplier(0x5A820F00) == (0x5A82, 15) and bn_multiplier(0x40000F00) == (0x4000, 15)
    assert bn_multiplier(0x5A821100) == (0x5A82, 17)
    assert bn_multiplier(0x5A822F00) is None and bn_multiplier(0x5A820F01) is None  # other bits set
    outputs, sims = _run("encoder_layer_dh2_i8")
    for y, ref in zip(outputs, sims):
        assert float(np.dot(y.ravel(), ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref))) >= 0.9999
