"""Vendor files run off-board only where the validated table says so, and the table is the corpus.

``rknnlite.model.rknn_graph.validated.VALIDATED`` lists, per target platform, RKNN-Toolkit2 release
and precision, the vendor op types checked against the vendor simulator.  These tests derive the
same table from the corpus (``tests/data/vendor``, every file with the simulator's outputs beside
it, ``tools/vendor_corpus/evidence.py``) and require equality; they require every corpus file the
table admits to meet the fidelity bounds; and they check that anything outside the table (a
platform, a toolkit release, a precision, an op type) is refused by name.

The first regression cases are the two silent wrong results of issue 19: per-layer int8 files
(a signed 16-bit weight zero point read as 32-bit) and an rv1126b two-input model (a packed
first-conv weight whose size matched the tiled layout by chance).
"""

from __future__ import annotations

import importlib.util
import struct
import sys
import warnings

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.rknn_graph import regcmd
from rknnlite.model.rknn_graph.regcmd import REG_BS_ALU_SRC, TARGET_DPU, requant_of
from rknnlite.model.rknn_graph.validated import (ALLOW_ENV, VALIDATED, UnvalidatedVendorFileWarning, toolkit_release,
                                             unvalidated)

from corpus import CORPUS, REPO, corpus_arrays, inputs_of
from vendor_files import doctored_copy, patch_registers, tensor_bytes


def _evidence_module():
    spec = importlib.util.spec_from_file_location("_vendor_evidence", REPO / "tools" / "vendor_corpus" / "evidence.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def evidence():
    module = _evidence_module()
    return module, module.corpus_evidence()  # the corpus and the field exports (tests/data/ultralytics)


def test_the_validated_table_is_what_the_corpus_shows(evidence):
    module, files = evidence
    derived = module.derived_table(files)
    assert derived == VALIDATED, (
        "rknnlite/model/rknn_graph/validated.py's table differs from the corpus; print the corpus's with "
        "`python tools/vendor_corpus/evidence.py`")


def test_every_corpus_file_the_table_admits_meets_the_fidelity_bounds(evidence):
    _, files = evidence
    admitted = [e for e in files if e.precision != "?" and unvalidated(*e.key, e.precision, e.ops) is None]
    assert len(admitted) >= 100
    failing = [f"{e.name}: {e.detail}" for e in admitted if not e.passed]
    assert not failing


def test_the_corpus_spans_platforms_toolkits_and_precisions(evidence):
    _, files = evidence
    keys = {(e.key, e.precision) for e in files if e.passed}
    for platform in ("rk3588", "rk3566", "rk3568", "rk3562", "rk3576", "rv1126b"):
        assert any(k[0][0] == platform for k in keys), platform
    for release in ("2.5.0", "2.3.2", "2.3.0", "2.2.0"):
        assert any(k[0][1] == release for k in keys), release
    assert {p for _, p in keys} == {"fp16", "int8", "int8-layer"}


# -- the two silent wrong results of issue 19 ---------------------------------------------------


def _run(stem: str):
    data = corpus_arrays(stem)
    inputs = inputs_of(data)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outs = ctx.run(inputs, data_format="nchw")
        scale = ctx.outputs[0].scale if ctx.outputs[0].type == rknnlite.TensorType.INT8 else None
    return np.asarray(outs[0], np.float64).ravel(), np.asarray(data["out0"], np.float64).ravel(), scale


@pytest.mark.parametrize("stem", ["conv_add_relu_i8_layer", "mbblock_i8_layer", "concat_i8_layer",
                                  "conv_relu6_i8_layer", "conv_sigmoid_i8_layer", "convnet_i8_layer_tk232"])
def test_per_layer_int8_files_match_the_simulator(stem):
    # their layer weight zero point is negative: 0xfff2 in BS_ALU_SRC (cosine 0.0 to 0.46 before)
    ours, sim, scale = _run(stem)
    assert np.mean(np.abs(ours - sim) <= scale * 1.0001) >= 0.99
    assert ours @ sim / (np.linalg.norm(ours) * np.linalg.norm(sim)) >= 0.9999


def test_rv1126b_two_input_int8_matches_the_simulator():
    # two first convs of 8 channels: packed weights whose size equals the tiled layout's (cosine 0.62 before)
    ours, sim, scale = _run("two_input_rv1126b_i8")
    assert np.mean(np.abs(ours - sim) <= scale * 1.0001) >= 0.99
    assert ours @ sim / (np.linalg.norm(ours) * np.linalg.norm(sim)) >= 0.9999


def test_the_weight_zero_point_register_is_a_signed_16_bit_field():
    # the per-layer registers of conv_relu6_i8_layer's conv (multiplier stage bypassed, plain bias)
    base = {(TARGET_DPU, regcmd.REG_OUT_CVT_SCALE): 0x4857, (TARGET_DPU, regcmd.REG_OUT_CVT_SHIFT): 0x15,
            (TARGET_DPU, regcmd.REG_BS_MUL_CFG): 0, (TARGET_DPU, regcmd.REG_BS_CFG): 0x20150,
            (TARGET_DPU, regcmd.REG_OUT_CVT_OFFSET): 0xFFFFFF80, (TARGET_DPU, regcmd.REG_BS_ALU_CFG): 0}
    assert requant_of({**base, (TARGET_DPU, REG_BS_ALU_SRC): 0xFFF2}, "n").weight_zp == 14
    assert requant_of({**base, (TARGET_DPU, REG_BS_ALU_SRC): 0x0009}, "n").weight_zp == -9
    # rk3566 sign-extends it (random rk3566 int8 graphs: a one-channel conv's zero point 127, 0xffffff81)
    assert requant_of({**base, (TARGET_DPU, REG_BS_ALU_SRC): 0xFFFFFF81}, "n").weight_zp == 127
    for value in (0x1FFF2, 0xFFFF0009, 0x0001FF81):
        with pytest.raises(ModelInvalidError, match=rf"BS_ALU_SRC \(0x4054\) = {value:#x} is neither a 16-bit value "
                                                    r"nor one sign-extended"):
            requant_of({**base, (TARGET_DPU, REG_BS_ALU_SRC): value}, "n")


def test_one_multiplier_for_every_channel_folds_into_out_cvt():
    # conv_leaky01_i8_layer's conv (per-layer LeakyRelu): BS_MUL_CFG 0x40000100 is the operand 0x4000 over
    # 2^1 for every channel, the stage not bypassed (BS_CFG 0x20140); off-board 5119 of 5120 outputs equal
    # the simulator's
    base = {(TARGET_DPU, regcmd.REG_OUT_CVT_SCALE): 0x7C22, (TARGET_DPU, regcmd.REG_OUT_CVT_SHIFT): 0x24,
            (TARGET_DPU, regcmd.REG_BS_CFG): 0x20140, (TARGET_DPU, regcmd.REG_OUT_CVT_OFFSET): 0xFFFFFF91,
            (TARGET_DPU, regcmd.REG_BS_ALU_CFG): 0, (TARGET_DPU, REG_BS_ALU_SRC): 0x4}
    requant = requant_of({**base, (TARGET_DPU, regcmd.REG_BS_MUL_CFG): 0x40000100}, "n")
    assert requant.mul_shift is None and requant.multiplier == 0x7C22 * 0x4000 / 2.0 ** (0x24 + 1)
    for mul_cfg, bs_cfg in ((0x40000101, 0x20140), (0x40000100, 0x20150)):  # with per-channel bit 0; bypassed
        with pytest.raises(ModelInvalidError, match=rf"BS_MUL_CFG = {mul_cfg:#x} with BS_CFG = {bs_cfg:#x} is "
                                                    "neither"):
            requant_of({**base, (TARGET_DPU, regcmd.REG_BS_MUL_CFG): mul_cfg,
                        (TARGET_DPU, regcmd.REG_BS_CFG): bs_cfg}, "n")
    with pytest.raises(ModelInvalidError, match=r"one multiplier for every channel \(BS_MUL_CFG 0x40000100\) beside "
                                                r"per-channel bias blocks"):
        requant_of({**base, (TARGET_DPU, regcmd.REG_BS_MUL_CFG): 0x40000100,
                    (TARGET_DPU, regcmd.REG_BS_ALU_CFG): 0x1}, "n")


# -- refusals by name ---------------------------------------------------------------------------


def test_an_unvalidated_op_type_is_refused_naming_it_the_platform_and_the_toolkit():
    # 2.3.2's simulator computes rv1126b int8 ConvAddRelu otherwise (82 % of the outputs exact)
    with pytest.raises(ModelInvalidError) as info:
        rknnlite.Context(str(CORPUS / "two_input_rv1126b_i8_tk232.rknn"), backend="software")
    message = str(info.value)
    for part in ("ConvAddRelu", "int8 rv1126b", "RKNN-Toolkit2 2.3.2", "not validated", ALLOW_ENV):
        assert part in message


def test_the_environment_switch_runs_an_unvalidated_file_with_a_warning(monkeypatch):
    monkeypatch.setenv(ALLOW_ENV, "1")
    with pytest.warns(UnvalidatedVendorFileWarning, match="ConvAddRelu"):
        ctx = rknnlite.Context(str(CORPUS / "two_input_rv1126b_i8_tk232.rknn"), backend="software")
    with ctx:
        assert ctx.outputs[0].dims == (1, 4, 16, 16)
    monkeypatch.setenv(ALLOW_ENV, "yes")  # only "1" switches it
    with pytest.raises(ModelInvalidError, match="not validated"):
        rknnlite.Context(str(CORPUS / "two_input_rv1126b_i8_tk232.rknn"), backend="software")


def _doctored(tmp_path, stem: str, old: bytes, new: bytes) -> str:
    data = (CORPUS / f"{stem}.rknn").read_bytes()
    assert data.count(old) == 1 and len(old) == len(new)
    path = tmp_path / f"{stem}_doctored.rknn"
    path.write_bytes(data.replace(old, new))
    return str(path)


@pytest.mark.parametrize("old, new, expected", [
    (b'"version":"2.5.0"', b'"version":"1.6.0"', "RKNN-Toolkit2 1.6.0 was not validated for rk3588"),
    (b'"version":"2.5.0"', b'"version":"9.9.9"', "RKNN-Toolkit2 9.9.9 was not validated"),
    (b'"target_platform":["rk3588"]', b'"target_platform":["rk3599"]', "target platform 'rk3599' was not validated"),
])
def test_a_doctored_toolkit_version_or_platform_is_refused(tmp_path, old, new, expected):
    path = _doctored(tmp_path, "convnet_i8", old, new)
    with pytest.raises(ModelInvalidError, match=expected):
        rknnlite.Context(path, backend="software")


def test_inspect_names_what_keeps_a_file_from_running(capsys):
    from rknnlite.cli import main

    assert main(["inspect", str(CORPUS / "two_input_rv1126b_i8_tk232.rknn")]) == 0
    out = capsys.readouterr().out
    assert "off-board: cannot run" in out and "ConvAddRelu" in out and "2.3.2" in out
    assert "validated off-board: rv1126b / RKNN-Toolkit2 2.3.2: fp16, int8" in out


def test_inspect_says_when_a_platform_and_toolkit_were_never_validated(tmp_path, capsys):
    from rknnlite.cli import main

    path = _doctored(tmp_path, "convnet_i8", b'"version":"2.5.0"', b'"version":"1.6.0"')
    assert main(["inspect", path]) == 0
    assert "validated off-board: rk3588 / RKNN-Toolkit2 1.6.0: not validated" in capsys.readouterr().out


def test_unvalidated_explains_each_level():
    ops = {"InputOperator", "OutputOperator", "Conv"}
    assert unvalidated("rk3588", "2.5.0", "int8", ops) is None
    assert "target platform 'rk2118'" in unvalidated("rk2118", "2.5.0", "int8", ops)
    assert "RKNN-Toolkit2 (version not recorded)" in unvalidated("rk3588", None, "int8", ops)
    assert "int8-layer rk3566 files from RKNN-Toolkit2 2.5.0 were not validated" in \
        unvalidated("rk3566", "2.5.0", "int8-layer", ops)
    assert "vendor op type GRU in fp16 rk3588" in unvalidated("rk3588", "2.5.0", "fp16", ops | {"GRU"})
    with pytest.raises(ValueError, match="precision 'int4'"):
        unvalidated("rk3588", "2.5.0", "int4", ops)


def test_toolkit_release_takes_the_leading_version():
    assert toolkit_release("1.6.0+81f21f4d") == "1.6.0"
    assert toolkit_release("2.5.0(compiler version: 2.5.0 (74ea630ce@2026-09-29))") == "2.5.0"
    assert toolkit_release("") is None and toolkit_release(None) is None and toolkit_release("v2") is None


def test_rk3576_plain_bias_convs_take_their_weight_zero_point_from_the_bscfg_tensor(tmp_path):
    """An rk3576/rv1126b int8 conv with a plain int32 bias (BS_ALU_CFG 0x4050 bits 16..19 = 2: every
    conv of a per-layer file, YOLOv8's one-channel DFL conv) keeps its one weight zero point,
    negated, in word 0 of ``<output>_BScfgTensor`` (words 1..7 of its extent zero); the corpus test checks the
    file against the simulator.  The word is read (another value changes the output), anything
    else there, or another bias layout, is refused by name."""
    source = CORPUS / "convnet_rk3576_i8_layer.rknn"
    x = inputs_of(corpus_arrays("convnet_rk3576_i8_layer"))

    def run(path):
        with rknnlite.Context(str(path), backend="software") as ctx:
            return ctx.run(x, data_format="nchw")[0]

    reference = run(source)
    moved = doctored_copy(source, tmp_path, lambda d: struct.pack_into(
        "<i", tensor_bytes(d, "relu_5_BScfgTensor"), 0,
        struct.unpack_from("<i", tensor_bytes(d, "relu_5_BScfgTensor"), 0)[0] + 5))
    assert np.abs(run(moved) - reference).max() > 0
    (tmp_path / "a").mkdir()
    noise = doctored_copy(source, tmp_path / "a",
                          lambda d: struct.pack_into("<i", tensor_bytes(d, "relu_5_BScfgTensor"), 4, 7))
    with pytest.raises(ModelInvalidError, match="then 7 zero words was expected"):
        rknnlite.Context(noise, backend="software")
    (tmp_path / "b").mkdir()
    layout3 = doctored_copy(source, tmp_path / "b",
                            patch_registers(0x1001, (0x4050,), lambda v: (v & ~0xF0000) | 0x30000))
    with pytest.raises(ModelInvalidError, match=r"bias layout 3 \(bits 16..19\); only per-channel bias blocks \(1\) "
                                                r"or a plain int32 bias \(2\)"):
        rknnlite.Context(layout3, backend="software")


#: the vendor op types of torchvision's classifiers as RKNN-Toolkit2 2.5.0 compiles them (128x128,
#: ``torchvision_export.py`` then ``coverage.py build --onnx-dir``; every platform below, fp16 and
#: int8, holds a subset): issue 19's real architectures (docs/vendor-offboard.md, "torchvision's own
#: definitions").  ConvSigmoid, int8 ConvExSwish, the classifier's standalone HardSwish and ResNet's
#: standalone AddRelu were refused outside rk3588 until the ``conv_sigmoid_*``, ``conv_swish_*``,
#: ``gemm_hardswish_*`` and ``add_relu_*`` corpus files validated them there.
TORCHVISION_OPS = {
    "efficientnet_b0": {"Conv", "ConvAdd", "ConvExSwish", "ConvSigmoid", "Mul", "Reshape"},
    "mobilenet_v2": {"Conv", "ConvAdd", "ConvClip", "Reshape"},
    "mobilenet_v3_large": {"Conv", "ConvAdd", "ConvHardSigmoid", "ConvHardSwish", "ConvRelu", "HardSwish", "Mul",
                           "Reshape"},
    "resnet18": {"AddRelu", "Conv", "ConvAdd", "ConvAddRelu", "ConvRelu", "MaxPool", "Reshape", "Split"},
    "resnet50": {"Conv", "ConvAdd", "ConvAddRelu", "ConvRelu", "MaxPool", "Reshape", "Split"},
    "shufflenet_v2_x1_0": {"Concat", "Conv", "ConvAdd", "ConvRelu", "MaxPool", "Reshape", "Split"},
}


@pytest.mark.parametrize("precision", ["fp16", "int8"])
@pytest.mark.parametrize("platform", ["rk3588", "rk3576", "rk3566", "rk3562", "rv1126b"])
def test_torchvision_classifiers_op_types_are_validated_on_every_platform(platform, precision):
    refused = {arch: unvalidated(platform, "2.5.0", precision, ops | {"InputOperator", "OutputOperator"})
               for arch, ops in TORCHVISION_OPS.items()}
    assert {arch: why for arch, why in refused.items() if why} == {}


def test_validated_files_raise_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with rknnlite.Context(str(CORPUS / "convnet_i8_layer.rknn"), backend="software") as ctx:
            assert ctx.outputs[0].dims == (1, 10, 8, 8)


# -- YOLOv8's blocks: Split and a standalone exSwish --------------------------------------------


@pytest.mark.parametrize("stem", ["c2f_fp16", "c2f_i8", "conv_add_swish_fp16", "conv_add_swish_i8"])
def test_yolov8_blocks_run_like_the_simulator(stem):
    ours, sim, scale = _run(stem)
    if scale is not None:  # int8 output
        assert np.mean(np.abs(ours - sim) <= scale * 1.0001) >= 0.99
        assert ours @ sim / (np.linalg.norm(ours) * np.linalg.norm(sim)) >= 0.9999
    else:
        assert np.abs(ours - sim).max() <= 1e-3 * max(1.0, np.abs(sim).max())


def test_split_sizes_that_disagree_with_the_parameter_table_are_refused(tmp_path):
    import struct

    path = _doctored(tmp_path, "c2f_fp16", struct.pack("<2q", 8, 8), struct.pack("<2q", 4, 12))
    with pytest.raises(ModelInvalidError, match=r"split sizes \[4, 12\] / axis 1 disagree with its parameter table"):
        rknnlite.Context(path, backend="software")


def test_conv_transpose_weights_are_the_flipped_kernel():
    # deconv_k2s2/k4s2: the tiles hold the kernel flipped in both spatial axes; read unflipped, the
    # output had cosine -0.05 and 0.10 against the simulator
    for stem in ("deconv_k2s2_fp16", "deconv_k4s2_fp16", "deconv_k2s2_i8", "deconv_k4s2_i8"):
        ours, sim, scale = _run(stem)
        if scale is None:
            assert np.abs(ours - sim).max() <= 1e-3 * max(1.0, np.abs(sim).max())
        else:
            assert np.mean(np.abs(ours - sim) <= scale * 1.0001) >= 0.99


def test_the_docs_table_is_the_code_table():
    doc = (REPO / "docs" / "vendor-offboard.md").read_text()
    header = "| platform | RKNN-Toolkit2 | precision | vendor op types validated |"
    rows = doc.split(header, 1)[1].strip().splitlines()[1:]
    documented = {}
    for row in rows:
        if not row.startswith("|"):
            break
        platform, release, precision, ops = (cell.strip() for cell in row.strip().strip("|").split("|"))
        documented.setdefault((platform, release), {})[precision] = frozenset(ops.split(", "))
    io_ops = {"InputOperator", "OutputOperator"}  # every file has them; the docs leave them out
    assert documented == {key: {p: ops - io_ops for p, ops in table.items()} for key, table in VALIDATED.items()}
