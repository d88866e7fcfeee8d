"""Post-training int8 quantization: ``RKNN.build(do_quantization=True, dataset=...)``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.model.loader import load_model  # noqa: E402
from rknnlite.model.portable import read_portable  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.model.spec import QuantParams  # noqa: E402
from rknnlite.toolkit.quantize import activation_params, weight_axis, weight_params  # noqa: E402
from toolkit_logs import errors  # noqa: E402

RNG = np.random.default_rng(23)
F = TensorProto.FLOAT
CONVNET_MEAN, CONVNET_STD = [[0, 128, 64]], [[255, 64, 32]]


@pytest.fixture()
def toolkit_log(caplog):
    caplog.set_level(logging.DEBUG, logger="rknnlite.toolkit")
    return caplog


def cosine(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- vendor agreement --------------------------------------------------------------------------

def vendor_run(fixtures: Path, model: str) -> dict:
    manifest = json.loads((fixtures / "manifest.json").read_text())
    return next(r for r in manifest["runs"] if r["model"] == model and r["variant"] == "i8")


def build_vendor(fixtures: Path, model: str, method=None) -> RKNN:
    run = vendor_run(fixtures, model)
    assert run["build"]["do_quantization"] and run["build"]["dataset"] == f"dataset_{model}.txt"
    cfg = dict(run["config"])
    cfg.pop("dynamic_input", None)
    if method is not None:
        cfg["quantized_method"] = method
    rknn = RKNN()
    assert rknn.config(**cfg) == 0
    assert rknn.load_onnx(str(fixtures / "onnx" / f"{model}.onnx")) == 0
    assert rknn.build(do_quantization=True, dataset=run["build"]["dataset"]) == 0
    assert rknn.init_runtime() == 0
    return rknn


def vendor_cases(fixtures: Path, model: str):
    io = fixtures / "io"
    for case, outs in vendor_run(fixtures, model)["cases"].items():
        inputs = [np.load(p) for p in sorted(io.glob(f"{model}_{case}_in*.npy"))]
        sim = [np.load(io / f"{model}_i8_{case}_sim_out{k}.npy") for k in range(len(outs))]
        ref = [np.load(io / f"{model}_{case}_onnx_out{k}.npy") for k in range(len(outs))]
        yield case, inputs, sim, ref


@pytest.mark.parametrize("method", ["channel", "layer"])
@pytest.mark.parametrize("model", ["convnet", "add_mul"])
def test_int8_matches_the_vendor_simulator(vendor_fixtures, monkeypatch, model, method):
    monkeypatch.chdir(vendor_fixtures)
    rknn = build_vendor(vendor_fixtures, model, method)
    try:
        n = 0
        for case, inputs, sim, ref in vendor_cases(vendor_fixtures, model):
            outputs = rknn.inference(inputs, data_format="nchw")
            assert outputs is not None and len(outputs) == len(sim)
            for k, (a, s, r) in enumerate(zip(outputs, sim, ref)):
                assert a.shape == s.shape and a.dtype == np.float32
                assert cosine(a, s) >= 0.999, f"{model} {case} out{k}: cosine vs vendor {cosine(a, s)}"
                assert cosine(a, r) >= 0.999, f"{model} {case} out{k}: cosine vs onnx {cosine(a, r)}"
                n += 1
        assert n >= 1
    finally:
        rknn.release()


@pytest.mark.parametrize("model", ["convnet", "add_mul"])
def test_io_quantization_matches_the_vendor_file(vendor_fixtures, monkeypatch, model):
    """Same min/max formula as the vendor: the quantized inputs and outputs of its int8
    ``.rknn`` carry the same scale and zero point as ours."""
    monkeypatch.chdir(vendor_fixtures)
    rknn = build_vendor(vendor_fixtures, model)
    try:
        vendor = load_model((vendor_fixtures / "rknn" / f"{model}_i8.rknn").read_bytes()).model
        ours = read_portable(memoryview(rknn._model_bytes)).metadata
        assert ours.quantization == "int8"
        checked = 0
        for theirs, mine in zip(list(vendor.inputs) + list(vendor.outputs), list(ours.inputs) + list(ours.outputs)):
            assert theirs.name == mine.name
            if theirs.quant is None:  # a vendor float output (the convnet Softmax): ours stays float too
                assert mine.quant is None
                continue
            assert mine.quant is not None
            assert mine.quant.zero_point == theirs.quant.zero_point
            np.testing.assert_allclose(mine.quant.scale, theirs.quant.scale, rtol=1e-6)
            checked += 1
        assert checked >= 1
        attrs = rknn._ctx.inputs
        assert attrs[0].scale == pytest.approx(vendor.inputs[0].quant.scale[0], rel=1e-6)
        assert attrs[0].zp == vendor.inputs[0].quant.zero_point[0]
    finally:
        rknn.release()


def test_channel_and_layer_methods_differ_in_weight_tables(vendor_fixtures, monkeypatch):
    monkeypatch.chdir(vendor_fixtures)
    tables = {}
    for method in ("channel", "layer"):
        rknn = build_vendor(vendor_fixtures, "convnet", method)
        graph = read_portable(memoryview(rknn._model_bytes)).graph
        tables[method] = graph.quant
        rknn.release()
    ch, layer = tables["channel"], tables["layer"]
    assert len(ch["conv_w"].scale) == 8 and ch["conv_w"].axis == 0
    assert len(ch["fc_w"].scale) == 10 and ch["fc_w"].axis == 0  # Gemm transB=1: rows are outputs
    assert len(layer["conv_w"].scale) == 1 and layer["conv_w"].axis is None
    w = np.asarray(graph.constants["conv_w"], np.float64)  # one asymmetric range over all channels
    assert layer["conv_w"].scale[0] == pytest.approx((max(w.max(), 0) - min(w.min(), 0)) / 255, rel=1e-3)
    assert layer["conv_w"].scale[0] >= max(ch["conv_w"].scale)
    assert ch["relu"] == layer["relu"]  # activations do not depend on the method
    assert "conv_b" not in ch and "fc_b" not in ch  # biases stay float


# -- parameters on a tiny model ----------------------------------------------------------------

def tiny_model(gemm_trans_b=1):
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.5
    w[2] = 0  # an all-zero output channel
    b = RNG.standard_normal(4).astype(np.float32)
    fc = RNG.standard_normal((5, 4) if gemm_trans_b else (4, 5)).astype(np.float32)
    mm = RNG.standard_normal((5, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["g"], transB=gemm_trans_b),
        helper.make_node("MatMul", ["g", "mm"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in (("w", w), ("b", b), ("fc", fc), ("mm", mm))]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", F, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", F, [1, 6])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return m, {"w": w, "fc": fc, "mm": mm}


def write_dataset(tmp_path: Path, samples, name="dataset.txt") -> str:
    lines = []
    for i, sample in enumerate(samples):
        paths = []
        for k, x in enumerate(sample):
            p = tmp_path / f"s{i}_in{k}.npy"
            np.save(p, x)
            paths.append(p.name)
        lines.append(" ".join(paths))
    (tmp_path / name).write_text("\n".join(lines) + "\n")
    return name


def test_quant_params_follow_the_min_max_formula(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m, weights = tiny_model(gemm_trans_b=0)
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]
    samples = [[RNG.uniform(0, 255, (1, 3, 6, 6)).astype(np.float32)] for _ in range(3)]
    dataset = write_dataset(tmp_path, samples)

    # Reference ranges from onnxruntime on the normalised samples, every intermediate exposed.
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    for name in ("c", "r", "p", "f", "g"):
        probe.graph.output.append(helper.make_tensor_value_info(name, F, None))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    lo, hi = {}, {}
    for (x,) in samples:
        xn = ((x - np.float32(mean).reshape(1, 3, 1, 1)) / np.float32(std).reshape(1, 3, 1, 1)).astype(np.float32)
        for name, v in zip(["x"] + names, [xn] + sess.run(None, {"x": xn})):
            lo[name] = min(lo.get(name, np.inf), float(v.min()))
            hi[name] = max(hi.get(name, -np.inf), float(v.max()))

    rknn = RKNN()
    assert rknn.config(mean_values=[mean], std_values=[std], target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.load_onnx(m.SerializeToString()) == 0
    assert rknn.build(do_quantization=True, dataset=dataset) == 0
    out_path = tmp_path / "tiny.rknn"
    assert rknn.export_rknn(str(out_path)) == 0
    rknn.release()
    model = read_portable(memoryview(out_path.read_bytes()))
    quant = model.graph.quant
    assert model.metadata.quantization == "int8"

    for name in ("x", "r", "p", "y"):
        q = quant[name]
        vmin, vmax = min(lo[name], 0.0), max(hi[name], 0.0)
        scale = (vmax - vmin) / 255
        assert q.dtype == "int8" and q.axis is None
        assert q.scale[0] == pytest.approx(scale, rel=1e-5), name
        assert q.zero_point[0] == int(np.clip(np.round(-128 - vmin / scale), -128, 127)), name
    assert quant["r"].zero_point == (-128,)  # a Relu output starts at 0
    # Per-channel asymmetric weights (the vendor's rule) on each op's output-channel axis.
    w = weights["w"]
    assert quant["w"].axis == 0
    span = lambda a, axis: np.maximum(a.max(axis=axis), 0) - np.minimum(a.min(axis=axis), 0)  # noqa: E731
    np.testing.assert_allclose(quant["w"].scale[:2], span(w[:2].reshape(2, -1), 1) / 255, rtol=1e-6)
    assert quant["w"].scale[2] > 0 and quant["w"].zero_point[2] == 0  # all-zero channel
    assert quant["fc"].axis == 1  # Gemm transB=0: B is [K, N]
    np.testing.assert_allclose(quant["fc"].scale, span(weights["fc"], 0) / 255, rtol=1e-6)
    assert quant["mm"].axis == 1
    np.testing.assert_allclose(quant["mm"].scale, span(weights["mm"], 0) / 255, rtol=1e-6)
    assert "b" not in quant

    # The runtime reports the I/O quantization and runs the model close to float.
    x = samples[0][0]
    with rknnlite.Context(out_path.read_bytes()) as ctx:
        assert ctx.inputs[0].zp == quant["x"].zero_point[0]
        assert ctx.inputs[0].scale == pytest.approx(quant["x"].scale[0])
        assert ctx.outputs[0].zp == quant["y"].zero_point[0]
        got = ctx.run([x], data_format=["nchw"])[0]
    xn = ((x - np.float32(mean).reshape(1, 3, 1, 1)) / np.float32(std).reshape(1, 3, 1, 1)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xn})[0]
    assert cosine(got, ref) > 0.99
    step = quant["y"].scale[0]
    grid = got / step + quant["y"].zero_point[0]
    np.testing.assert_allclose(grid, np.round(grid), atol=1e-3)


def test_parameter_helpers():
    q = activation_params(-1.0, 3.0)
    assert q.scale[0] == pytest.approx(4 / 255) and q.zero_point == (int(np.round(-128 + 1 / (4 / 255))),)
    assert activation_params(0.5, 2.0).zero_point == (-128,)  # range widened to contain 0
    assert activation_params(-3.0, -1.0).zero_point == (127,)
    assert activation_params(0.0, 0.0).scale[0] > 0
    w = np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)
    # asymmetric per slice, the range widened to contain 0: every channel uses all 256 codes
    q = weight_params(w, 0)
    assert q.scale == pytest.approx((3 / 255, 0.5 / 255))
    assert q.zero_point == (int(np.round(-128 + 2 / (3 / 255))), -128)
    assert weight_params(w, 1).scale == pytest.approx((1 / 255, 2.25 / 255))
    assert weight_params(w, None).scale == pytest.approx((3 / 255,))
    assert weight_params(np.zeros((2, 3), np.float32), 0) == QuantParams("int8", (1.0, 1.0), (0, 0), 0)
    for channel, (scale, zp) in zip(w, zip(q.scale, q.zero_point)):  # the extremes land on -128 and 127
        codes = np.clip(np.round(channel / scale) + zp, -128, 127)
        assert codes.min() == -128 or codes.max() == 127
    assert weight_axis("Conv", {}, np.zeros((4, 3, 3, 3))) == 0
    assert weight_axis("ConvTranspose", {}, np.zeros((3, 4, 3, 3))) == 1
    assert weight_axis("Gemm", {"transB": 1}, w) == 0 and weight_axis("Gemm", {}, w) == 1
    assert weight_axis("MatMul", {}, np.zeros((2, 3, 4))) == 2


def test_layout_ops_after_a_softmax_stay_float(tmp_path, monkeypatch):
    """An SSD confidence head (``Softmax -> Flatten``; here ``Softmax -> Transpose ->
    Reshape``) stays float16 to the output in an int8 build, as the vendor's does (its
    caffe/vgg-ssd example): quantizing the Reshape would put the probabilities on 256 codes."""
    monkeypatch.chdir(tmp_path)
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["c"], ["sm"], axis=1),
             helper.make_node("Transpose", ["sm"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([1, -1, 8], np.int64), "shape")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 64, 8])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    samples = [[RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(2)]
    dataset = write_dataset(tmp_path, samples)
    rknn = RKNN()
    assert rknn.config(target_platform="rk3566") == 0
    assert rknn.load_onnx(m.SerializeToString()) == 0
    assert rknn.build(do_quantization=True, dataset=dataset) == 0
    assert rknn.export_rknn("head.rknn") == 0
    quant = load_model("head.rknn").model.graph.quant
    assert "c" in quant and not {"sm", "t", "y"} & set(quant)
    assert rknn.init_runtime() == 0
    (y,) = rknn.inference(samples[0], data_format="nchw")
    assert len(np.unique(y)) > 256  # not one int8 grid
    rknn.release()


def _int8_and_float(graph, shape, tmp_path, **config):
    """``graph`` (one input ``x`` of ``shape``) built in int8 for rk3588, calibrated on two random
    samples: its output on the first sample, and onnxruntime's float output."""
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    samples = [[RNG.standard_normal(shape).astype(np.float32)] for _ in range(2)]
    dataset = write_dataset(tmp_path, samples)
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", **config) == 0
    assert rknn.load_onnx(m.SerializeToString()) == 0
    assert rknn.build(do_quantization=True, dataset=dataset) == 0
    assert rknn.init_runtime() == 0
    (y,) = rknn.inference(samples[0], data_format="nchw")
    rknn.release()
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": samples[0][0]})[0]
    return y, ref


@pytest.mark.parametrize("algorithm", ["normal", "mmse"])
def test_near_zero_weight_channels_quantize_to_zero(tmp_path, monkeypatch, algorithm):
    """PP-OCRv4 rec has output channels of weights near 0: subnormal (``p2o.Conv.20``, max
    3e-39) or spanning 3.8e-36 (``conv2d_117.w_0``, whose step 1.5e-38 ``mmse`` halves).  The
    step would be no normal float32 and the build failed writing the model.  Such channels
    get scale 1, zero point 0 (all their codes 0), as an all-zero one does."""
    monkeypatch.chdir(tmp_path)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w[1] = RNG.uniform(-3e-39, 3e-39, (3, 3, 3)).astype(np.float32)
    w[3] = RNG.uniform(-2.7e-36, 1.0e-36, (3, 3, 3)).astype(np.float32)
    w[3, 0, 0, :2] = -2.7e-36, 1.0e-36
    q = weight_params(w, 0)
    assert q.scale[1] == q.scale[3] == 1.0 and q.zero_point[1] == q.zero_point[3] == 0
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "sub", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])],
                              [numpy_helper.from_array(w, "w")])
    y, ref = _int8_and_float(graph, (1, 3, 8, 8), tmp_path, quantized_algorithm=algorithm)
    assert np.abs(y[0, [1, 3]]).max() < 1e-6 and cosine(y, ref) > 0.99


def test_a_conv_bias_survives_a_near_zero_weight_channel(tmp_path, monkeypatch):
    """PP-OCRv4 rec's depthwise ``p2o.Conv.13`` has channels of weights within 1e-14 of 0 (step
    3e-17) under a bias of -0.45: in units of input step times weight step the bias is beyond
    int32 and was clipped, the channel's output 0 where the vendor's simulator gives the bias.
    The weight step is raised until the bias fits."""
    monkeypatch.chdir(tmp_path)
    w = RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)
    w[2] = RNG.uniform(-7e-15, 0, (1, 3, 3)).astype(np.float32)
    b = np.array([0.1, -0.2, -0.45, 0.3], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=4)]
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", F, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    y, ref = _int8_and_float(graph, (1, 4, 8, 8), tmp_path)
    step = (ref.max() - min(ref.min(), 0)) / 255  # about the output's int8 step
    np.testing.assert_allclose(y[0, 2], -0.45, atol=step)


# -- errors ------------------------------------------------------------------------------------

def build_tiny(dataset, target_platform="rk3588", **config):
    m, _ = tiny_model()
    rknn = RKNN()
    assert rknn.config(target_platform=target_platform, **config) == 0
    assert rknn.load_onnx(m.SerializeToString()) == 0
    try:
        return rknn.build(do_quantization=True, dataset=dataset)
    finally:
        rknn.release()


def test_unsupported_quantization_options(tmp_path, monkeypatch, toolkit_log):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "good.npy", RNG.standard_normal((1, 3, 6, 6)).astype(np.float32))
    (tmp_path / "ok.txt").write_text("good.npy\n")
    # what the vendor's config takes on those platforms (it refuses the rest: test_toolkit_onnx)
    for platform, options, unsupported in (
            ("rk3576", {"quantized_dtype": "w4a16"}, "quantized_dtype='w4a16'"),
            ("rk3562", {"quantized_dtype": "w8a16"}, "quantized_dtype='w8a16'"),
            ("rk3588", {"quantized_dtype": "w16a16i_dfp"}, "quantized_dtype='w16a16i_dfp'"),
            ("rv1126b", {"quantized_dtype": "w4a16", "quantized_method": "group32"}, "quantized_dtype='w4a16'"),
            ("rk3576", {"quantized_dtype": "w4a16", "quantized_algorithm": "gdq"}, "quantized_dtype='w4a16'")):
        toolkit_log.clear()
        assert build_tiny("ok.txt", platform, **options) == -1
        assert f"{unsupported} is not supported yet" in errors(toolkit_log)[-1]
    # A float build ignores them; explicit defaults are fine.
    m, _ = tiny_model()
    rknn = RKNN()
    assert rknn.config(target_platform="rk3576", quantized_dtype="w4a16", quantized_algorithm="gdq") == 0
    assert rknn.load_onnx(m.SerializeToString()) == 0 and rknn.build() == 0
    rknn.release()
    assert build_tiny("ok.txt", quantized_dtype="asymmetric_quantized-8", quantized_algorithm="normal",
                      quantized_method="layer") == 0
    rknn = RKNN()
    assert rknn.config(quantized_method=3) == -1


# -- a real network ----------------------------------------------------------------------------

def test_light_resnet50_int8_stays_close_to_float(tmp_path, monkeypatch):
    from onnx.backend.test.runner import Runner

    monkeypatch.chdir(tmp_path)
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    if not path.exists():
        pytest.skip("light_resnet50.onnx is not in this onnx package")
    m = onnx.load(str(path))
    inits = {i.name for i in m.graph.initializer}
    vis = [vi for vi in m.graph.input if vi.name not in inits]
    x = [np.asarray(Runner.generate_dummy_data(vi, seed=0, name="resnet50", random=False), np.float32)
         for vi in vis]
    rng = np.random.default_rng(0)
    samples = [[xi + rng.normal(0, 0.05 * (float(np.std(xi)) or 1.0), xi.shape).astype(np.float32) for xi in x]
               for _ in range(4)]
    dataset = write_dataset(tmp_path, samples)
    outputs = {}
    for quantized in (False, True):
        rknn = RKNN()
        assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
        # The light models' weights are constants, so their logits are uniform; two deep
        # feature maps (which vary) are checked as outputs too.
        assert rknn.load_onnx(str(path), outputs=["r109", "r157", m.graph.output[0].name]) == 0
        assert rknn.build(do_quantization=quantized, dataset=dataset if quantized else None) == 0
        assert rknn.init_runtime() == 0
        outputs[quantized] = rknn.inference(x, data_format="nchw")
        rknn.release()
    assert len(outputs[True]) == 3
    for f, q in zip(outputs[False][:2], outputs[True][:2]):
        assert not np.array_equal(f, q)  # the feature maps really went through int8
    for f, q in zip(outputs[False], outputs[True]):
        assert cosine(q, f) >= 0.99, cosine(q, f)


def test_a_dense_layer_on_tokens_rounds_once_as_the_vendors_conv(run_calibrated_build):
    """``Relu(MatMul(x, w) + b)`` on 1x16x32 tokens: the vendor's one ConvRelu sums the bias in
    int32 and rounds once; as two nodes, the product got an int8 grid of its own (75 % of the
    values equal to the simulator's).  As a Gemm on the token rows, with the weight codes of the
    float32 weights (``snap_weights``; from float16-rounded ones, 99 %): every value."""
    sim = np.load(Path(__file__).parent / "data" / "vendor_int8" / "dense_tokens_sim.npz")
    F = TensorProto.FLOAT
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 16, 32])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(sim["w"], "w"), numpy_helper.from_array(sim["b"], "b")])
    (y,) = run_calibrated_build(g, sim["cal"], [sim["x"]])
    np.testing.assert_array_equal(y, sim["vendor"])


def test_weights_keep_the_codes_of_their_float32_values(tmp_path):
    """A calibrated build stores each int8 weight on its grid, codes from the float32 weights in
    float64 (``snap_weights``); float16 storage keeps them, except where a channel's step is below
    float16's range (``codes_lost_in_float16``: those stay float32)."""
    from rknnlite.model.graph import Graph, Node
    from rknnlite.toolkit.quantize import codes_lost_in_float16, snap_weights, weight_params

    rng = np.random.default_rng(15)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    w[3] *= 1e-9  # a channel of step ~1e-11: no float16 value
    graph = Graph([Node("Conv", "c", ["x", "w"], ["y"])], ["x"], ["y"], {"w": w})
    q = weight_params(w, 0)
    graph.quant = {"w": q}
    assert snap_weights(graph) == 1
    stored = graph.constants["w"]
    scale = np.asarray(q.scale).reshape(-1, 1, 1, 1)
    zp = np.asarray(q.zero_point).reshape(-1, 1, 1, 1)
    codes = np.rint(stored / scale) + zp
    np.testing.assert_allclose(stored / scale + zp, codes, atol=1e-3)  # on the grid
    np.testing.assert_array_equal(codes, np.clip(np.rint(w.astype(np.float64) / scale) + zp, -128, 127))
    assert codes_lost_in_float16(graph) == {"w"}
    graph.constants["w"] = stored[:3].copy()
    graph.quant = {"w": weight_params(graph.constants["w"], 0)}
    snap_weights(graph)
    assert codes_lost_in_float16(graph) == set()
