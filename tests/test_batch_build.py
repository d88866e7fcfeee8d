"""Multi-batch builds: ``build(rknn_batch_size=N)`` multiplies axis 0 of every input and output
by N; the file keeps the batch-1 graph with ``batch_size=N`` and the runtime runs each sample."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx_builders import init, model, vi  # noqa: E402

from rknnlite import ModelInvalidError  # noqa: E402
from rknnlite.model.loader import load_model  # noqa: E402
from rknnlite.model.spec import QuantParams, TensorSpec  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.shapes import batch_specs  # noqa: E402
from toolkit_logs import errors  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)





def classifier_model():
    """x[1,3,6,6] -> Conv 3->4 -> Relu -> Reshape to the constant [1, 144] -> Gemm 144->5 ->
    Softmax; also the Relu output (feat[1,4,6,6]).  The constant Reshape only runs one sample
    at a time: batch 4 works only by running the batch-1 graph per sample."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    b = RNG.standard_normal(4).astype(np.float32)
    g = RNG.standard_normal((144, 5)).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["feat"], name="relu"),
        helper.make_node("Reshape", ["feat", "shape"], ["flat"], name="flatten_to_one"),
        helper.make_node("Gemm", ["flat", "g"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1, name="softmax"),
    ]
    return model(nodes, [vi("x", [1, 3, 6, 6])], [vi("prob", [1, 5]), vi("feat", [1, 4, 6, 6])],
                  [init("w", w), init("b", b), init("g", g), init("shape", np.array([1, 144], np.int64))])


def loaded(model, **config):
    r = RKNN()
    assert r.config(target_platform="rk3588", **config) == 0
    assert r.load_onnx(model.SerializeToString()) == 0
    return r


def metadata(r):
    return load_model(r._model_bytes).model


# -- specs and metadata ----------------------------------------------------------------------


def test_batch_4_multiplies_axis_0_of_every_input_and_output():
    r = loaded(classifier_model(), float_dtype="float32")
    assert r.build(rknn_batch_size=4) == 0
    model = metadata(r)
    meta = model.metadata
    assert meta.batch_size == 4
    assert [t.shape for t in meta.inputs] == [(4, 3, 6, 6)]
    assert [t.shape for t in meta.outputs] == [(4, 5), (4, 4, 6, 6)]
    assert meta.inputs[0].layout == "NCHW" and meta.outputs[1].layout == "NCHW"
    # the stored graph is the batch-1 graph: its constant Reshape target is untouched
    assert [list(v) for k, v in model.graph.constants.items() if k == "shape"] == [[1, 144]]
    assert r.init_runtime() == 0
    assert [a.dims for a in r._ctx.inputs] == [(4, 6, 6, 3)]  # as librknnrt reports an image input: NHWC
    r.release()


@pytest.mark.parametrize("n", [None, 1])
def test_batch_none_or_1_is_no_batching(n):
    r = loaded(classifier_model())
    assert r.build(rknn_batch_size=n) == 0
    meta = metadata(r).metadata
    assert meta.batch_size == 1 and meta.inputs[0].shape == (1, 3, 6, 6) and meta.outputs[0].shape == (1, 5)
    r.release()


def test_batch_keeps_quantization_of_the_specs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for k in range(3):
        np.save(tmp_path / f"s{k}.npy", RNG.uniform(-1, 1, (1, 3, 6, 6)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("s0.npy\ns1.npy\ns2.npy\n")
    r = loaded(classifier_model())
    assert r.build(do_quantization=True, dataset="ds.txt", rknn_batch_size=3) == 0
    meta = metadata(r).metadata
    assert meta.batch_size == 3 and meta.inputs[0].shape == (3, 3, 6, 6)
    assert meta.inputs[0].quant is not None and meta.outputs[1].quant is not None
    r.release()


def test_batch_specs_helper():
    q = QuantParams("int8", (0.5,), (3,))
    specs = [TensorSpec("a", (1, 3), "float32", "UNDEFINED", q), TensorSpec("b", (-1, 2), "int64")]
    out = batch_specs(specs, 8, "output", require_unit_batch=False)
    assert [t.shape for t in out] == [(8, 3), (-1, 2)] and out[0].quant == q
    with pytest.raises(ModelInvalidError, match="'b'.*axis 0 to be 1"):
        batch_specs(specs, 8, "input", require_unit_batch=True)
    with pytest.raises(ModelInvalidError, match="scalar"):
        batch_specs([TensorSpec("s", (), "float32")], 2, "output", require_unit_batch=False)


# -- bad configurations ----------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -2, 1.5, "4", True, 5000])
def test_bad_batch_sizes_fail_and_leave_the_object_usable(toolkit_log, n):
    r = loaded(classifier_model())
    assert r.build(rknn_batch_size=n) == -1
    assert "rknn_batch_size must be a positive int" in errors(toolkit_log)[-1]
    assert r.build(rknn_batch_size=2) == 0
    r.release()


def test_input_whose_axis_0_is_not_1_is_rejected(toolkit_log):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])])
    r = loaded(m)
    assert r.build(rknn_batch_size=4) == -1
    msg = errors(toolkit_log)[-1]
    assert "'x'" in msg and "[2, 3]" in msg and "axis 0 to be 1" in msg, msg
    assert r.build() == 0
    r.release()


def test_scalar_input_is_rejected(toolkit_log):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [])], [vi("y", [])])
    r = loaded(m)
    assert r.build(rknn_batch_size=2) == -1
    assert "'x'" in errors(toolkit_log)[-1] and "scalar" in errors(toolkit_log)[-1]
    r.release()


def test_scalar_output_is_rejected(toolkit_log):
    m = model([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], [vi("x", [1, 3])], [vi("y", [])])
    r = loaded(m)
    assert r.build(rknn_batch_size=2) == -1
    assert "output 'y'" in errors(toolkit_log)[-1] and "scalar" in errors(toolkit_log)[-1]
    r.release()


def test_batch_with_dynamic_input_is_rejected(toolkit_log):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, "L"])], [vi("y", [1, "L"])])
    r = loaded(m, dynamic_input=[[[1, 4]], [[1, 8]]])
    assert r.build(rknn_batch_size=2) == -1
    msg = errors(toolkit_log)[-1]
    assert "rknn_batch_size=2" in msg and "dynamic_input" in msg, msg
    assert r.build() == 0
    r.release()


# -- running ---------------------------------------------------------------------------------


@pytest.mark.parametrize("quantize", [False, True])
def test_batch_run_equals_running_each_sample_alone(tmp_path, monkeypatch, quantize):
    monkeypatch.chdir(tmp_path)
    samples = [RNG.uniform(0, 255, (1, 3, 6, 6)).astype(np.float32) for _ in range(4)]
    for k, s in enumerate(samples):
        np.save(tmp_path / f"s{k}.npy", s)
    (tmp_path / "ds.txt").write_text("".join(f"s{k}.npy\n" for k in range(4)))
    m = classifier_model()
    cfg = dict(mean_values=[[10, 20, 30]], std_values=[[50, 60, 70]])
    dataset = "ds.txt" if quantize else None
    single = loaded(m, **cfg)
    assert single.build(do_quantization=quantize, dataset=dataset) == 0 and single.init_runtime() == 0
    batched = loaded(m, **cfg)
    assert batched.build(do_quantization=quantize, dataset=dataset, rknn_batch_size=4) == 0
    assert batched.init_runtime() == 0
    outs = batched.inference([np.concatenate(samples, axis=0)], data_format="nchw")
    assert outs is not None and [o.shape for o in outs] == [(4, 5), (4, 4, 6, 6)]
    for k, s in enumerate(samples):
        alone = single.inference([s], data_format="nchw")
        for got, want in zip(outs, alone):
            np.testing.assert_array_equal(got[k:k + 1], want)
    # a batch-1 array does not fit a batch-4 model
    assert batched.inference([samples[0]], data_format="nchw") is None
    single.release()
    batched.release()
