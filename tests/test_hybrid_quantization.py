"""Hybrid quantization (issue 21 points 2 and 3): step1/step2, auto hybrid, and the build
warning when quantizing destroys an output.

The model is a detector head as YOLOv8 exports it: box coordinates in pixels (hundreds) and
class scores through a Sigmoid (0..1) concatenated into one output, so that one int8 scale
fits the boxes and every class score lands on one or two codes.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("yaml")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.model.spec import QuantParams  # noqa: E402
from rknnlite.toolkit.hybrid import HybridError, collapsed_channels, read_cfg  # noqa: E402

SEED = 41
CLASSES, BOXES = 12, 4
#: how far the class scores of a head kept in float16 may be from float: its input is still
#: int8 (0.022 on this model); plain int8 puts them on one or two codes, up to ~1 away
SCORE_TOL = 0.03


def _head_onnx(path, rng) -> str:
    """x (1, 3, 8, 8) -> Conv 3->16 Relu -> [Conv 16->4 (x 200, pixels), Sigmoid(Conv 16->12)] -> Concat
    -> Reshape (1, 16, 64): ``output0``."""
    w1 = (rng.standard_normal((16, 3, 3, 3)) * 0.5).astype(np.float32)
    wb = (rng.standard_normal((BOXES, 16, 1, 1)) * 0.3).astype(np.float32)
    wc = (rng.standard_normal((CLASSES, 16, 1, 1)) * 0.3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["feat"]),
        helper.make_node("Conv", ["feat", "wb"], ["box_raw"]),
        helper.make_node("Mul", ["box_raw", "px"], ["box"]),
        helper.make_node("Conv", ["feat", "wc"], ["cls_raw"]),
        helper.make_node("Sigmoid", ["cls_raw"], ["cls"]),
        helper.make_node("Concat", ["box", "cls"], ["cat"], axis=1),
        helper.make_node("Reshape", ["cat", "shape"], ["output0"]),
    ]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(wb, "wb"), numpy_helper.from_array(wc, "wc"),
             numpy_helper.from_array(np.array(200.0, np.float32), "px"),
             numpy_helper.from_array(np.array([1, BOXES + CLASSES, 64], np.int64), "shape")]
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, BOXES + CLASSES, 64])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """A scratch directory as the current one (step1 writes there), with the model and a
    4-sample dataset, the same in every test (a seeded generator of its own, so that no test's
    figures depend on which tests ran before it)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(SEED)
    _head_onnx(tmp_path / "head.onnx", rng)
    lines = []
    for i in range(4):
        np.save(tmp_path / f"s{i}.npy", rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
        lines.append(f"s{i}.npy")
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    return tmp_path


def _float_reference(path) -> np.ndarray:
    import onnxruntime as ort

    x = np.load(os.path.join(os.path.dirname(path), "s0.npy"))
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _run(model_bytes, x) -> np.ndarray:
    with rknnlite.Context(model_bytes) as ctx:
        return ctx.run([x], data_format="nchw")[0]


def _build(workdir, caplog, **build_kwargs):
    caplog.set_level(logging.INFO, logger="rknnlite.toolkit")
    rk = RKNN()
    assert rk.config(target_platform="rk3588", **build_kwargs.pop("config", {})) == 0
    assert rk.load_onnx("head.onnx") == 0
    assert rk.build(do_quantization=True, dataset="dataset.txt", **build_kwargs) == 0
    out = rk.export_rknn("head.rknn")
    assert out == 0
    rk.release()
    return (workdir / "head.rknn").read_bytes()


def _class_scores(y) -> np.ndarray:
    return np.asarray(y)[0, BOXES:, :]


def test_build_warns_when_an_output_s_channels_quantize_to_one_value(workdir, caplog):
    model = _build(workdir, caplog)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    flat = [w for w in warnings if "channels of output0 quantize to one value" in w]
    assert len(flat) == 1, warnings
    assert f"of {BOXES + CLASSES} channels of output0" in flat[0] and "hybrid quantization" in flat[0]
    assert "split the output" in flat[0]
    # and it is true: the class scores come out on one or two codes
    y = _run(model, np.load(workdir / "s0.npy"))
    assert len(np.unique(_class_scores(y))) <= 3


def test_collapsed_channels_takes_samples_of_different_shapes():
    # a dynamic-shape model is calibrated on every shape set: the samples differ in H and W
    from rknnlite.model.spec import QuantParams
    from rknnlite.toolkit.hybrid import collapsed_channels

    def sample(h, w):
        y = np.zeros((1, 4, h, w), np.float32)
        y[:, 0] = np.linspace(0, 100, h * w).reshape(h, w)  # channel 0 sets the scale
        y[:, 1:] = np.linspace(0, 0.1, h * w).reshape(h, w)  # 1..3 vary within one step (0.39): they collapse
        return y

    found = collapsed_channels({"y": QuantParams("int8", (100 / 255,), (-128,))}, {"y": [sample(6, 6), sample(4, 8)]})
    assert found == {"y": (3, 4, 100.0, 1)}


def test_map_channels_that_keep_a_few_values_are_reported():
    # a YOLOX/YOLOv5-style head: pixel box offsets beside 0..1 scores on an 8x8 grid.  The scores span
    # about 2.5 steps of the boxes' scale (0.39): not one value, but three at most, as good as lost
    from rknnlite.model.spec import QuantParams
    from rknnlite.toolkit.hybrid import FEW_STEPS, collapsed_channels, diagnose

    rng = np.random.default_rng(3)
    head = np.concatenate([rng.uniform(-50, 50, (1, 4, 8, 8)), rng.uniform(0, 1, (1, 12, 8, 8))], axis=1)
    q = QuantParams("int8", (100 / 255,), (0,))
    flat, channels, widest, steps = collapsed_channels({"y": q}, {"y": [head.astype(np.float32)]})["y"]
    assert (flat, channels, steps) == (12, 16, FEW_STEPS) and widest > 90
    (warning,) = diagnose(None, {"y": q}, {"y": [head.astype(np.float32)]})
    assert warning.startswith("12 of 16 channels of y quantize to at most 5 values (their range is below 4 int8 "
                              "steps of 0.3922")
    # one value per channel (logits): only the one-step rule applies, whatever the spans
    logits = [np.zeros((1, 16), np.float32), np.ones((1, 16), np.float32)]  # spans of 2.5 steps
    logits[0][0, 0] = 100.0
    assert collapsed_channels({"y": q}, {"y": logits}) == {}


def test_auto_hybrid_keeps_the_destroyed_output_in_float16(workdir, caplog):
    model = _build(workdir, caplog, auto_hybrid=True)
    assert any("Meet hybrid type, dtype: float16, tensor: output0" in r.getMessage() for r in caplog.records)
    ref = _float_reference(workdir / "head.onnx")
    y = _run(model, np.load(workdir / "s0.npy"))
    assert np.abs(_class_scores(y) - _class_scores(ref)).max() < SCORE_TOL  # scores survive
    with rknnlite.Context(model) as ctx:
        assert ctx.outputs[0].type != rknnlite.TensorType.INT8


def test_quantized_hybrid_level_chooses_layers_too(workdir, caplog):
    model = _build(workdir, caplog, config={"quantized_hybrid_level": 1})
    assert any("tensor: output0" in r.getMessage() for r in caplog.records if "Meet hybrid" in r.getMessage())
    y = _run(model, np.load(workdir / "s0.npy"))
    assert len(np.unique(_class_scores(y))) > 20


@pytest.mark.parametrize("key, value, message", [
    ("auto_hybrid_cos_thresh", 1.5, "Invalid auto_hybrid_cos_thresh '1.5', expect between 0 to 1!"),
    ("auto_hybrid_euc_thresh", -1, "Invalid auto_hybrid_euc_thresh '-1', expect greater 0!"),
    ("quantized_hybrid_level", "2", "quantized_hybrid_level must be an int"),
])
def test_bad_hybrid_options_are_refused(key, value, message, caplog):
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    assert RKNN().config(target_platform="rk3588", **{key: value}) == -1
    assert any(message in r.getMessage() for r in caplog.records)


def test_step1_writes_the_three_files_and_step2_builds_the_edited_cfg(workdir, caplog):
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("head.onnx") == 0
    assert rk.hybrid_quantization_step1() == 0  # RKNN-Toolkit2's default: ./dataset.txt (was None: -1)
    rk.release()
    for suffix in (".model", ".data", ".quantization.cfg"):
        assert (workdir / f"head{suffix}").is_file()
    cfg = (workdir / "head.quantization.cfg").read_text()
    assert cfg.startswith("custom_quantize_layers: {}\nquantize_parameters:\n")
    assert "    output0:\n        qtype: asym\n        qmethod: layer\n        dtype: int8\n" in cfg
    # the user keeps the head in float16
    (workdir / "head.quantization.cfg").write_text(
        cfg.replace("custom_quantize_layers: {}", "custom_quantize_layers:\n    output0: float16"))
    rk2 = RKNN()
    assert rk2.hybrid_quantization_step2("head.model", "head.data", "head.quantization.cfg") == 0
    assert rk2.export_rknn("hybrid.rknn") == 0
    assert rk2.init_runtime() == 0
    y = rk2.inference(inputs=[np.load("s0.npy")], data_format="nchw")[0]
    rk2.release()
    ref = _float_reference(workdir / "head.onnx")
    assert np.abs(_class_scores(y) - _class_scores(ref)).max() < SCORE_TOL


def test_step1_proposal_and_custom_hybrid_prefill_the_cfg(workdir):
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("head.onnx") == 0
    assert rk.hybrid_quantization_step1(dataset="dataset.txt", proposal=True) == 0
    cfg = (workdir / "head.quantization.cfg").read_text()
    assert cfg.startswith("custom_quantize_layers: # proposed") and "    output0: float16 # 0." in cfg
    assert rk.hybrid_quantization_step1(dataset="dataset.txt", custom_hybrid=[["feat", "cls"]]) == 0
    layers = (workdir / "head.quantization.cfg").read_text().split("quantize_parameters:")[0]
    assert "cls_raw: float16" in layers and "cls: float16" in layers and "box" not in layers
    rk.release()


def test_a_tensor_the_optimiser_fused_names_the_layer_it_went_into(workdir, caplog):
    """RKNN-Toolkit2 keeps tensors such as a BatchNormalization's output in its graph (its
    hybrid_quant example's tips name ``.../BatchNorm/batchnorm/add_1:0``); rknnlite fuses them
    into their layer, and such a name in custom_quantize_layers keeps that layer in float16."""
    from rknnlite.model.loader import load_model

    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("head.onnx") == 0
    assert rk.hybrid_quantization_step1(dataset="dataset.txt") == 0
    rk.release()
    cfg = (workdir / "head.quantization.cfg").read_text()
    assert "    c1:\n" not in cfg and "    feat:\n" in cfg  # the Conv's output went into Conv+Relu
    (workdir / "head.quantization.cfg").write_text(
        cfg.replace("custom_quantize_layers: {}", "custom_quantize_layers:\n    c1: float16"))
    rk2 = RKNN()
    with caplog.at_level(logging.INFO, logger="rknnlite.toolkit"):
        assert rk2.hybrid_quantization_step2("head.model", "head.data", "head.quantization.cfg") == 0
    assert "'c1' was fused into the layer of 'feat', which is kept in float16" in caplog.text
    quant = load_model(rk2._model_bytes).model.graph.quant
    assert "feat" not in quant and "cls" in quant
    rk2.release()


def test_step2_refuses_edits_it_cannot_honour(workdir, caplog):
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("head.onnx") == 0
    assert rk.hybrid_quantization_step1(dataset="dataset.txt") == 0
    cfg = (workdir / "head.quantization.cfg").read_text()
    cases = [
        (cfg.replace("custom_quantize_layers: {}", "custom_quantize_layers:\n    nosuch: float16"),
         "Invalid operands name 'nosuch' in custom_quantize_layers!"),
        (cfg.replace("custom_quantize_layers: {}", "custom_quantize_layers:\n    output0: bfloat16"),
         "'bfloat16' not supported in custom_quantize_layers!"),
        (cfg.replace("        qmethod: layer", "        qmethod: channel", 1), "is not allowed to be modified!"),
        ("[not: a mapping", "not valid YAML"),
    ]
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    for text, message in cases:
        (workdir / "head.quantization.cfg").write_text(text)
        assert RKNN().hybrid_quantization_step2("head.model", "head.data", "head.quantization.cfg") == -1
        assert any(message in r.getMessage() for r in caplog.records), message
    assert RKNN().hybrid_quantization_step2("head.model", "nosuch.data", "head.quantization.cfg") == -1
    # a binary file as the cfg (UnicodeDecodeError escaped), a NUL byte in its path (ValueError)
    (workdir / "binary.cfg").write_bytes(b"\x89PNG\r\n")
    assert RKNN().hybrid_quantization_step2("head.model", "head.data", "binary.cfg") == -1
    assert any("binary.cfg is not a text file (byte 0 is not UTF-8)" in r.getMessage() for r in caplog.records)
    assert RKNN().hybrid_quantization_step2("head.model", "head.data", "head\0.cfg") == -1
    assert any("cannot read head\0.cfg: embedded null byte" in r.getMessage() for r in caplog.records)


def test_editing_min_max_changes_the_parameters(workdir):
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("head.onnx") == 0
    assert rk.hybrid_quantization_step1(dataset="dataset.txt") == 0
    import json

    params = json.loads((workdir / "head.data").read_text())["parameters"]
    layers, ranges = read_cfg(str(workdir / "head.quantization.cfg"), params, list(params))
    assert layers == {} and ranges["output0"] == (params["output0"]["min"][0], params["output0"]["max"][0])
    text = (workdir / "head.quantization.cfg").read_text()
    head, tail = text.split("    output0:\n", 1)  # edit output0's entry, not another with the same range
    edited = head + "    output0:\n" + tail.replace(
        f"        max:\n        -   {params['output0']['max'][0]!r}", "        max:\n        -   1.0", 1)
    (workdir / "head.quantization.cfg").write_text(edited)
    _, ranges = read_cfg(str(workdir / "head.quantization.cfg"), params, list(params))
    assert ranges["output0"][1] == 1.0
    with pytest.raises(HybridError, match="min .* must not exceed max"):
        (workdir / "bad.cfg").write_text(edited.replace("        -   1.0", "        -   -1e9", 1))
        read_cfg(str(workdir / "bad.cfg"), params, list(params))


def _step1_parameters(workdir, algorithm):
    import json

    rk = RKNN()
    assert rk.config(target_platform="rk3588", quantized_algorithm=algorithm) == 0
    assert rk.load_onnx("head.onnx") == 0
    assert rk.hybrid_quantization_step1(dataset="dataset.txt") == 0
    rk.release()
    return json.loads((workdir / "head.data").read_text())["parameters"]


def _scales(model_bytes) -> dict:
    from rknnlite.model.loader import load_model

    return {name: q.scale for name, q in load_model(model_bytes).model.graph.quant.items()}


def test_mmse_step1_shows_kl_ranges_and_step2_builds_with_mmse(workdir, caplog):
    # RKNN-Toolkit2 2.5.0, measured (convnet, rk3588): under mmse, step1's cfg holds the kl_divergence
    # ranges (relu_5 max 10.373), step2 builds with the mmse search's (the plain mmse build's scales,
    # 0.042754 there) and refuses an edited min/max with the message below
    kl = _step1_parameters(workdir, "kl_divergence")
    shown = _step1_parameters(workdir, "mmse")
    assert {k: (v["min"], v["max"]) for k, v in shown.items()} == {k: (v["min"], v["max"]) for k, v in kl.items()}
    rk = RKNN()
    assert rk.hybrid_quantization_step2("head.model", "head.data", "head.quantization.cfg") == 0
    assert rk.export_rknn("step2.rknn") == 0
    stepped = _scales((workdir / "step2.rknn").read_bytes())
    plain = _scales(_build(workdir, caplog, config={"quantized_algorithm": "mmse"}))
    assert stepped == plain
    assert any(_scales(_build(workdir, caplog, config={"quantized_algorithm": "kl_divergence"}))[k] != v
               for k, v in plain.items())  # the two algorithms differ on this model: the check has teeth
    _step1_parameters(workdir, "mmse")
    text = (workdir / "head.quantization.cfg").read_text()
    head, tail = text.split("    output0:\n", 1)
    (workdir / "head.quantization.cfg").write_text(head + "    output0:\n" + tail.replace(
        f"        max:\n        -   {shown['output0']['max'][0]!r}", "        max:\n        -   1.0", 1))
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    assert RKNN().hybrid_quantization_step2("head.model", "head.data", "head.quantization.cfg") == -1
    assert "Not support modify quantize_parameters when config.quantized_algorithm = mmse" in caplog.text


def test_step1_needs_config_and_a_model(caplog):
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    assert RKNN().hybrid_quantization_step1(dataset="dataset.txt") == -1
    assert any("Please call rknn.config first!" in r.getMessage() for r in caplog.records)


def test_constant_channels_are_not_reported_as_collapsed():
    """One calibration sample of a (1, 8) output: each channel holds one value, nothing is
    lost by quantizing it (multi_input's example warned about all 8 channels before)."""
    q = QuantParams("int8", (1.0,), (0,))
    assert collapsed_channels({"y": q}, {"y": [np.arange(8, dtype=np.float32).reshape(1, 8) * 30]}) == {}
    # channels that vary below one step are reported
    varying = [np.full((1, 8), 0.1, np.float32), np.full((1, 8), 0.4, np.float32)]
    varying[1][0, :2] = [100.0, -100.0]
    flat, channels, widest, steps = collapsed_channels({"y": q}, {"y": varying})["y"]
    assert (flat, channels, steps) == (6, 8, 1) and widest == pytest.approx(100.1, abs=1e-4)
