"""The bundled demo model: shipped bytes, and agreement with onnxruntime as the oracle."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.demo import DEMO_MODEL_PATH, build_demo_model, demo_image, run_demo
from rknnlite.model.portable import read_portable


def test_shipped_demo_model_matches_its_generator():
    assert DEMO_MODEL_PATH.read_bytes() == build_demo_model(), "run: python tools/make_demo_model.py"


def _to_onnx(model_bytes: bytes) -> bytes:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    model = read_portable(memoryview(model_bytes))
    g = model.graph
    nodes = [helper.make_node(n.op, n.inputs, n.outputs, name=n.name, **n.attrs) for n in g.nodes]
    inits = [numpy_helper.from_array(np.array(v), k) for k, v in g.constants.items()]
    ins = [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.shape)) for t in model.metadata.inputs]
    outs = [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.shape)) for t in model.metadata.outputs]
    proto = helper.make_model(helper.make_graph(nodes, "demo", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


@pytest.fixture(scope="module")
def onnx_reference():
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(_to_onnx(build_demo_model("float32")), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    images = [demo_image()] + [rng.integers(0, 256, (1, 3, 32, 32), dtype=np.uint8) for _ in range(3)]
    refs = [session.run(None, {"image": (img.astype(np.float32) - 127.5) / 127.5})[0] for img in images]
    return images, refs


def test_float32_mode_matches_onnxruntime(onnx_reference):
    images, refs = onnx_reference
    with rknnlite.Context(build_demo_model("float32")) as ctx:
        for img, ref in zip(images, refs):
            np.testing.assert_allclose(ctx.run([img], data_format="nchw")[0], ref, rtol=1e-4, atol=1e-6)


def test_float16_mode_is_close_to_onnxruntime(onnx_reference):
    images, refs = onnx_reference
    with rknnlite.Context(str(DEMO_MODEL_PATH)) as ctx:
        for img, ref in zip(images, refs):
            np.testing.assert_allclose(ctx.run([img], data_format="nchw")[0], ref, atol=5e-3)


def test_run_demo_reports_inputs_outputs_and_timing():
    lines = []
    result = run_demo(runs=3, write=lines.append)
    text = "\n".join(lines)
    assert "input   0 image: [1, 32, 32, 3] FLOAT16 NHWC" in text  # as librknnrt reports an image input
    assert "output  0 prob: [1, 10]" in text
    assert "top-3" in text and "mean of 3 runs" in text
    assert result["outputs"][0].shape == (1, 10) and result["mean_ms"] > 0
