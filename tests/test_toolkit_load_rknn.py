"""``RKNN.load_rknn`` of a file RKNN-Toolkit2 built, then ``init_runtime()`` on the host.

RKNN-Toolkit2's simulator refuses it ("RKNN model that loaded by 'load_rknn' not support
inference on the simulator, please set 'target' first!"), so a script that checks a
converted file on a PC needs a board. rknnlite's toolkit runs it on the software NPU
(what ``rknnlite.Context`` does with it), with a warning that says so; a file the software
NPU does not take is refused at ``init_runtime`` naming why.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import rknnlite
from rknnlite.toolkit import RKNN

from conftest import REPO


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def _errors(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("model, variant, sample, n_inputs", [
    ("convnet", "fp16", "x0", 1), ("convnet", "i8", "x0", 1), ("add_mul", "i8", "ab0", 2),
    ("dyn_conv", "fp16", "s1_16x16", 1)])
def test_a_vendor_file_runs_like_the_simulator_ran_its_source(vendor_fixtures, toolkit_log, model, variant, sample,
                                                               n_inputs):
    name = f"{model}_{variant}"
    path = vendor_fixtures / "rknn" / f"{name}.rknn"
    io = vendor_fixtures / "io"
    inputs = [np.load(io / f"{model}_{sample}_in{k}.npy") for k in range(n_inputs)]
    r = RKNN()
    assert r.load_rknn(str(path)) == 0
    assert any("was built by RKNN-Toolkit2; init_runtime() runs it on rknnlite's software NPU" in m
               for m in _warnings(toolkit_log))
    assert r.init_runtime() == 0
    outputs = r.inference(inputs, data_format="nchw")
    with rknnlite.Context(str(path), backend="software") as ctx:
        expected = ctx.run(inputs, data_format="nchw")
    assert len(outputs) == len(expected)
    for k, (got, want) in enumerate(zip(outputs, expected)):
        np.testing.assert_array_equal(got, want)
        sim = np.load(io / f"{name}_{sample}_sim_out{k}.npy")
        np.testing.assert_allclose(got.reshape(sim.shape), sim, atol=2e-2 * (np.abs(sim).max() + 1e-6))
    r.release()


def test_what_needs_the_source_model_is_refused(vendor_fixtures, toolkit_log, tmp_path):
    path = vendor_fixtures / "rknn" / "convnet_fp16.rknn"
    x = np.load(vendor_fixtures / "io" / "convnet_x0_in0.npy")
    r = RKNN()
    assert r.load_rknn(str(path)) == 0
    assert r.accuracy_analysis([x], output_dir=str(tmp_path / "snap")) == -1
    assert any("there is no float model behind it" in m for m in _errors(toolkit_log))
    assert r.export_rknn(str(tmp_path / "copy.rknn")) == 0  # the file as it was loaded
    assert (tmp_path / "copy.rknn").read_bytes() == path.read_bytes()
    # a model the toolkit builds afterwards is its own again
    assert r.config(target_platform="rk3588") == 0
    assert r.load_onnx(str(vendor_fixtures / "onnx" / "convnet.onnx")) == 0
    assert r.build(do_quantization=False) == 0
    assert r.accuracy_analysis([x], output_dir=str(tmp_path / "snap")) == 0
    r.release()


def test_a_file_the_software_npu_refuses_fails_init_runtime_by_name(toolkit_log):
    r = RKNN()
    assert r.load_rknn(str(REPO / "tests" / "data" / "vendor" / "conv_relu_add_i8.rknn")) == 0
    assert r.init_runtime() == -1
    assert any("an int8 ConvReluAdd: the simulator puts the Relu's output on an int8 grid" in m
               for m in _errors(toolkit_log))
    assert r.inference([np.zeros((1, 3, 8, 8), np.float32)]) is None  # no runtime: refused, not a crash
    r.release()


def test_rknn_model_zoos_container_runs_off_board(vendor_fixtures):
    """rknn_model_zoo's ``py_utils/rknn_executor.py`` with ``target=None``: ``load_rknn``, then
    ``init_runtime()``, then ``inference(inputs=[img])`` with an (H, W, 3) uint8 picture (the
    simulator's rank leniency gives it its batch axis); its container ignores load_rknn's return
    and exits on init_runtime's."""
    path = str(vendor_fixtures / "rknn" / "convnet_i8.rknn")
    img = np.random.default_rng(5).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    rknn = RKNN()
    rknn.load_rknn(path)
    assert rknn.init_runtime() == 0
    outputs = rknn.inference(inputs=[img])
    rknn.release()
    with rknnlite.Context(path, backend="software") as ctx:
        expected = ctx.run([img[None]])
    np.testing.assert_array_equal(outputs[0], expected[0])
