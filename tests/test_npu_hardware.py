"""The npu backend on a real board (``-m npu``): real vendor files on the NPU.

Skipped, with the reason, unless librknnrt loads and an NPU device node exists (see
``rknnlite doctor``).  The fixture files are built for rk3588; on another SoC the
runtime must refuse them with a typed error rather than crash.
"""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import doctor
from rknnlite.constants import QueryCmd
from rknnlite.errors import RKNNError

pytestmark = pytest.mark.npu


def _board_reason():
    """Why this machine cannot run the hardware tests, or ``None``."""
    try:
        from rknnlite.backends.npu.runtime import load_runtime

        load_runtime()
    except RKNNError as e:
        return f"librknnrt is not available: {e.message}"
    if not doctor.npu_device_nodes("/"):
        return "no NPU device node (/dev/rknpu or an RKNPU DRM render node)"
    return None


_REASON = _board_reason()
requires_board = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture
def rk3588_board():
    soc = doctor.read_soc("/")["soc"]
    if soc != "rk3588":
        pytest.skip(f"the fixture models are built for rk3588; this board is {soc}")


@requires_board
def test_vendor_add_mul_on_the_npu(vendor_fixtures, rk3588_board):
    io = vendor_fixtures / "io"
    a, b = np.load(io / "add_mul_ab0_in0.npy"), np.load(io / "add_mul_ab0_in1.npy")
    want = [np.load(io / "add_mul_fp16_ab0_sim_out0.npy"), np.load(io / "add_mul_fp16_ab0_sim_out1.npy")]
    with rknnlite.Context(str(vendor_fixtures / "rknn" / "add_mul_fp16.rknn"), backend="npu") as ctx:
        assert ctx.backend == "npu"
        outs = ctx.run([a, b], data_format="nchw")
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got.reshape(ref.shape), ref, atol=5e-3)


@requires_board
def test_vendor_convnet_i8_queries_and_run(vendor_fixtures, rk3588_board):
    io = vendor_fixtures / "io"
    x = np.load(io / "convnet_x0_in0.npy")
    ref = np.load(io / "convnet_i8_x0_sim_out0.npy")
    with rknnlite.Context(str(vendor_fixtures / "rknn" / "convnet_i8.rknn"), backend="npu") as ctx:
        assert ctx.query(QueryCmd.IN_OUT_NUM) == (1, 1)
        assert ctx.inputs[0].type == rknnlite.TensorType.INT8
        out = ctx.run([x], data_format="nchw")[0]
        cos = float(np.dot(out.ravel(), ref.ravel()) / (np.linalg.norm(out) * np.linalg.norm(ref)))
        assert cos > 0.999
        assert ctx.perf_run() > 0


@requires_board
def test_runtime_version_is_reported():
    from rknnlite.backends.npu.runtime import load_runtime

    lib = load_runtime()
    report = doctor.collect()
    assert report["librknnrt"]["loaded"] is True
    assert report["librknnrt"]["path"] == lib.path
    assert report["backends"]["npu"]["available"] is True


@requires_board
def test_bad_model_is_a_typed_error_not_a_crash(tmp_path):
    bad = b"RKNN\0\0\0\0" + (6).to_bytes(8, "little") + b"\xff" * 200
    with pytest.raises(RKNNError):
        rknnlite.Context(bad, backend="npu")
