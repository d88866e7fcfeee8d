"""The vendor toolkit's calls that need a board (or a vendor-only tool) answer off-board as the
vendor's own simulator does (RKNN-Toolkit2 2.5.0, observed): a script that calls them gets the
same return or the same exception, never an ``AttributeError``."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from test_toolkit_build import loaded  # noqa: E402

from rknnlite.toolkit import RKNN  # noqa: E402

#: every public method of RKNN-Toolkit2 2.5.0's ``rknn.api.RKNN`` (its rknn/api/rknn.py)
VENDOR_METHODS = (
    "accuracy_analysis", "build", "clear_op_cache", "codegen", "config", "eval_memory", "eval_perf", "export_rknn",
    "get_sdk_version", "hybrid_quantization_step1", "hybrid_quantization_step2", "inference", "init_runtime",
    "list_devices", "load_caffe", "load_darknet", "load_onnx", "load_pytorch", "load_rknn", "load_tensorflow",
    "load_tflite", "optimize_onnx", "reg_custom_op", "release",
)
SIMULATOR = "Not support in simulator environment, please set target in init_runtime!"


def test_every_vendor_method_exists():
    assert [m for m in VENDOR_METHODS if not callable(getattr(RKNN, m, None))] == []


@pytest.mark.parametrize("call", [lambda r: r.eval_perf(), lambda r: r.eval_memory(is_print=False),
                                  lambda r: r.get_sdk_version()], ids=["eval_perf", "eval_memory", "get_sdk_version"])
def test_board_measurements_raise_as_the_vendors_simulator(call, toolkit_log):
    r = loaded()
    assert r.build(do_quantization=False) == 0
    with pytest.raises(ValueError, match="call init_runtime first"):
        call(r)
    assert r.init_runtime() == 0
    with pytest.raises(ValueError, match="Not support in simulator environment"):
        call(r)
    assert any(SIMULATOR in rec.getMessage() for rec in toolkit_log.records)
    r.release()


def test_no_devices_and_nothing_to_clear(toolkit_log):
    r = loaded()
    assert r.list_devices() == ([], [])
    assert any("None devices connected." in rec.getMessage() for rec in toolkit_log.records)
    with pytest.raises(ValueError, match="call init_runtime first"):
        r.clear_op_cache()
    assert r.build(do_quantization=False) == 0 and r.init_runtime() == 0
    assert r.clear_op_cache() is None
    r.release()


def test_codegen_refuses_because_librknnrt_cannot_load_portable_files(tmp_path, toolkit_log):
    r = loaded()
    assert r.build(do_quantization=False) == 0
    assert r.export_rknn(str(tmp_path / "m.rknn")) == 0
    assert r.codegen(str(tmp_path / "demo"), overwrite=True) == -1
    assert not (tmp_path / "demo").exists()
    assert any("librknnrt" in rec.getMessage() and "RKNNLite" in rec.getMessage() for rec in toolkit_log.records)
    r.release()
    assert r.codegen(str(tmp_path / "demo")) == -1  # released: -1 too


def test_optimize_onnx(tmp_path, toolkit_log):
    r = RKNN()
    with pytest.raises(ValueError, match="Model file .*nope.onnx not found!"):
        r.optimize_onnx(str(tmp_path / "nope.onnx"))
    from test_toolkit_build import conv_model

    (tmp_path / "m.onnx").write_bytes(conv_model().SerializeToString())
    assert r.optimize_onnx(str(tmp_path / "m.onnx"), str(tmp_path / "opt.onnx")) == -1
    assert not (tmp_path / "opt.onnx").exists()
    assert any("quantization_annotation" in rec.getMessage() for rec in toolkit_log.records)
