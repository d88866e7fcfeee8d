"""``rknnlite.Context`` on the npu backend, against the fake librknnrt (tests/fake_rknnrt):
what the Context takes from the backend instead of computing itself (SDK version, shape
sets, native attributes), pass-through data handed over as is, init flags given to
``rknn_init`` once, and zero-copy through librknnrt's own memory and binding."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import rknnlite
from rknnlite.api import RKNNLite
from rknnlite.constants import InitFlag, MemAllocFlag, MemSyncMode, QueryCmd, TensorFormat, TensorType
from rknnlite.errors import ContextInvalidError, InputInvalidError, InvalidParamError, RKNNError

from fake_model import FakeTensor, add_mul_model, fake_model_bytes, fake_node

rknnrt = pytest.importorskip("rknnlite._native.rknnrt")


@pytest.fixture
def npu(fake_rknnrt_env, fake_rknnrt_log, monkeypatch):
    """The fake runtime as librknnrt (version 2.3.2, board rk3588), its call log."""
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.3.2")
    monkeypatch.delenv("FAKE_RKNNRT_PLATFORM", raising=False)
    return fake_rknnrt_log


def _relu_i8(channels=3, hw=4):
    x = FakeTensor("x", (1, channels, hw, hw), "int8", scale=0.05, zp=-3)
    y = FakeTensor("y", (1, channels, hw, hw), "int8", scale=0.1, zp=2)
    return fake_model_bytes([x], [y], [fake_node("relu", ["x"], "y")])


def _relu_ref(xq: np.ndarray) -> np.ndarray:
    """What the int8 relu model gives for int8 input values ``xq`` (dequantized output)."""
    y = np.maximum((xq.astype(np.float32) + 3) * 0.05, 0)
    return (np.clip(np.round(y / 0.1) + 2, -128, 127) - 2) * 0.1


def _dyn_neg():
    x = FakeTensor("x", (1, 3, 4, 4), "float16")
    y = FakeTensor("y", (1, 3, 4, 4), "float16")
    return fake_model_bytes([x], [y], [fake_node("neg", ["x"], "y")],
                            dynamic_shapes=[[[1, 3, 4, 4]], [[1, 3, 8, 8]]])


def _inputs_set_fields(line: str, k: int = 0) -> dict:
    part = line.split(f"in{k}=(", 1)[1].split(")", 1)[0]
    return dict(kv.split("=", 1) for kv in part.split(","))


# -- 1. the SDK version is the runtime's --------------------------------------------------------


def test_sdk_version_is_the_runtimes(npu, tmp_path):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        version = ctx.sdk_version()
        assert version["api"].startswith("2.3.2") and version["drv"] == "0.9.8"
        assert ctx.query(QueryCmd.SDK_VERSION) == version
    path = tmp_path / "m.rknn"
    path.write_bytes(add_mul_model())
    rk = RKNNLite()
    assert rk.load_rknn(str(path)) == 0 and rk.init_runtime() == 0
    text = rk.get_sdk_version()
    assert "API: 2.3.2" in text and "DRV: 0.9.8" in text
    rk.release()


def test_doctor_reports_the_runtimes_sdk_version(npu, tmp_path):
    from rknnlite.doctor import _model_check

    path = tmp_path / "m.rknn"
    path.write_bytes(add_mul_model())
    result = _model_check(str(path))
    assert result["backend"] == "npu" and result["sdk_version"]["drv"] == "0.9.8"


# -- 2. dynamic shapes in the runtime's layout ------------------------------------------------------


def test_dynamic_nhwc_input_runs_every_set(npu):
    with rknnlite.Context(_dyn_neg(), backend="npu") as ctx:
        assert ctx.inputs[0].fmt == TensorFormat.NHWC
        ranges = ctx.input_ranges()
        assert ranges[0].dyn_range == ((1, 4, 4, 3), (1, 8, 8, 3))  # as the runtime presents them
        big = np.arange(192, dtype=np.float32).reshape(1, 8, 8, 3) / 100
        out = ctx.run([big])[0]
        np.testing.assert_allclose(out, -big.transpose(0, 3, 1, 2), rtol=1e-3)
        small = np.ones((1, 3, 4, 4), np.float32)
        out = ctx.run([small], data_format="nchw")[0]  # NCHW data is transposed to the runtime's NHWC
        assert out.shape == (1, 3, 4, 4)
        np.testing.assert_allclose(out, -small)
        with pytest.raises(InputInvalidError, match="not one of the model's shape sets"):
            ctx.run([np.ones((1, 5, 5, 3), np.float32)])


def test_set_input_shapes_switches_the_runtime(npu):
    with rknnlite.Context(_dyn_neg(), backend="npu") as ctx:
        npu.clear()
        ctx.set_input_shapes([(1, 8, 8, 3)])
        assert npu.calls("rknn_set_input_shapes") and "-> 0" in npu.calls("rknn_set_input_shapes")[-1]
        assert ctx.current_inputs[0].dims == (1, 8, 8, 3)
        assert ctx.current_outputs[0].dims == (1, 3, 8, 8)
        native = ctx.query(QueryCmd.CURRENT_NATIVE_INPUT_ATTR, 0)
        assert native.dims[1:3] == (8, 8)  # the runtime's answer at the new shapes
        assert ctx.current_inputs[0].dims == (1, 8, 8, 3)  # finding output dims left the set current
        with pytest.raises(InputInvalidError):
            ctx.set_input_shapes([(1, 5, 5, 3)])


# -- 3. pass-through data reaches the runtime as is -----------------------------------------------


def test_int8_pass_through_goes_to_the_runtime_untouched(npu):
    rng = np.random.default_rng(0)
    xq = rng.integers(-128, 128, (1, 4, 4, 3), dtype=np.int8)  # NHWC, the input's layout
    with rknnlite.Context(_relu_i8(), backend="npu") as ctx:
        npu.clear()
        y = ctx.run([xq], pass_through=True)[0]
        fields = _inputs_set_fields(npu.calls("rknn_inputs_set")[-1])
        assert fields["pass"] == "1" and fields["type"] == str(int(TensorType.INT8))
        assert fields["fmt"] == str(int(TensorFormat.NHWC))
        # rows padded to the native w_stride (16 on rk3588): 4 rows x 16 px x 3 channels
        assert int(fields["size"]) == 4 * 16 * 3
        np.testing.assert_allclose(y, _relu_ref(xq.transpose(0, 3, 1, 2)), atol=1e-5)
        # the same data in NCHW, and already padded to w_stride, give the same result
        np.testing.assert_allclose(ctx.run([xq.transpose(0, 3, 1, 2)], data_format="nchw", pass_through=True)[0],
                                   y, atol=1e-6)
        padded = np.zeros((1, 4, 16, 3), np.int8)
        padded[:, :, :4] = xq
        np.testing.assert_allclose(ctx.run([padded], pass_through=True)[0], y, atol=1e-6)
        with pytest.raises(InputInvalidError, match="passed through"):
            ctx.run([xq.astype(np.float32)], pass_through=True)
        np.testing.assert_allclose(ctx.run([xq.astype(np.float32) * 0])[0].shape, y.shape)  # still usable


def test_nc1hwc2_pass_through_is_packed_for_the_runtime(npu):
    rng = np.random.default_rng(1)
    with rknnlite.Context(_relu_i8(channels=5), backend="npu") as ctx:
        native = ctx.native_inputs[0]
        assert native.fmt == TensorFormat.NC1HWC2
        xq = rng.integers(-128, 128, (1, 5, 4, 4), dtype=np.int8)
        from rknnlite.tensors.layout import nchw_to_nc1hwc2

        blocked = nchw_to_nc1hwc2(xq, native.dims[4])
        npu.clear()
        y = ctx.run([blocked], pass_through=True)[0]
        fields = _inputs_set_fields(npu.calls("rknn_inputs_set")[-1])
        assert fields["pass"] == "1" and fields["fmt"] == str(int(TensorFormat.NC1HWC2))
        np.testing.assert_allclose(y, _relu_ref(xq), atol=1e-5)


def test_pass_through_per_input(npu):
    data = add_mul_model()
    with rknnlite.Context(data, backend="npu") as ctx:
        a, b = (np.full((1, 8, 8, 3), v, np.float32) for v in (1.0, 2.0))
        npu.clear()
        s, _ = ctx.run([a, b.astype(np.float16)], pass_through=[False, True])
        line = npu.calls("rknn_inputs_set")[-1]
        assert _inputs_set_fields(line, 0)["pass"] == "0" and _inputs_set_fields(line, 1)["pass"] == "1"
        np.testing.assert_allclose(s, 3.0)


# -- 4. init flags reach rknn_init once -------------------------------------------------------------


def test_flags_are_given_to_rknn_init_once(npu):
    with rknnlite.Context(_relu_i8(), backend="npu", flags=InitFlag.COLLECT_PERF_MASK) as ctx:
        ctx.run([np.zeros((1, 4, 4, 3), np.float32)])
        assert ctx.perf_detail()
    inits = npu.calls("rknn_init")
    assert len(inits) == 1 and "flag=0x8" in inits[0]
    assert not npu.calls("rknn_destroy")[:-1]  # no context made and thrown away


# -- 5. native attributes are the runtime's -----------------------------------------------------------


def test_native_attrs_come_from_the_runtime(npu):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        npu.clear()
        natives = ctx.native_inputs
        assert any(" cmd=" in ln for ln in npu.calls("rknn_query"))
        assert natives == ctx._backend.query_attrs(QueryCmd.NATIVE_INPUT_ATTR)
        assert ctx.query(QueryCmd.NATIVE_OUTPUT_ATTR, 0).fmt == TensorFormat.NC1HWC2
        nhwc = ctx.query(QueryCmd.NATIVE_NHWC_OUTPUT_ATTR, 0)
        assert nhwc.fmt == TensorFormat.NHWC and nhwc.dims == (1, 8, 8, 3)
        assert ctx.current_native_outputs == ctx.native_outputs


def test_native_attrs_follow_the_board(npu, monkeypatch):
    """On an RK3566 the runtime aligns rows to 8 px and uses C2 = 8 for fp16: what the
    Context reports is whatever the runtime says."""
    monkeypatch.setenv("FAKE_RKNNRT_PLATFORM", "rk3566")
    x = FakeTensor("x", (1, 3, 4, 4), "float16")
    y = FakeTensor("y", (1, 3, 4, 4), "float16")
    data = fake_model_bytes([x], [y], [fake_node("relu", ["x"], "y")], platform="rk3566")
    with rknnlite.Context(data, backend="npu") as ctx:
        assert ctx.native_inputs[0].w_stride == 8
        assert ctx.native_outputs[0].dims[4] == 4


def test_dynamic_model_native_attrs_use_the_current_queries(npu):
    with rknnlite.Context(_dyn_neg(), backend="npu") as ctx:
        assert ctx.native_inputs[0].dims[1:3] == (4, 4)
        nhwc = ctx.query(QueryCmd.NATIVE_NHWC_OUTPUT_ATTR, 0)
        assert nhwc.fmt == TensorFormat.NHWC and nhwc.dims == (1, 4, 4, 3)
    assert not any("-> -1" in ln for ln in npu.calls("rknn_query"))  # no plain NATIVE_* query refused


# -- 6. zero-copy through librknnrt ----------------------------------------------------------------


def _bind_add_mul(ctx, a, b):
    """Bind FLOAT32 NHWC inputs (rows w_stride apart) and FLOAT32 NCHW outputs; the memories."""
    mems = []
    for attr, x in zip(ctx.native_inputs, (a, b)):
        attr = attr.replace(type=TensorType.FLOAT32)
        mem = ctx.create_mem(attr.size_with_stride)
        mem.view(attr)[...] = x.transpose(0, 2, 3, 1)
        ctx.set_io_mem(mem, attr)
        mems.append(mem)
    for attr in ctx.outputs:
        attr = attr.replace(type=TensorType.FLOAT32)
        mem = ctx.create_mem(attr.size_with_stride)
        ctx.set_io_mem(mem, attr)
        mems.append(mem)
    return mems


def test_zero_copy_run_bound(npu):
    gc.collect()
    live = npu.live("mems")
    a, b = (np.random.default_rng(k).uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32) for k in (0, 1))
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        mems = _bind_add_mul(ctx, a, b)
        assert npu.live("mems") == live + 4 and len(npu.calls("rknn_set_io_mem")) == 4
        npu.clear()
        ctx.run_bound()
        assert npu.names() == ["rknn_run"]  # no inputs_set, no outputs_get: the runtime uses the memory
        s = mems[2].view(ctx.outputs[0].replace(type=TensorType.FLOAT32))
        p = mems[3].array(np.float32, (1, 3, 8, 8))
        np.testing.assert_allclose(s, a + b, atol=2e-2)
        np.testing.assert_allclose(p, (a + b) * b, atol=5e-2)
        assert mems[0].flags.name == "ALLOC_INSIDE" and mems[0].virt_addr != 0
        del s, p
    assert all(m.destroyed for m in mems)
    gc.collect()
    assert npu.live("mems") == live


def test_zero_copy_errors_name_the_problem(npu):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        mems = _bind_add_mul(ctx, *(np.ones((1, 3, 8, 8), np.float32),) * 2)
        mems[1].destroy()
        with pytest.raises(InvalidParamError, match=r"not bound: input 1 \('b'\)"):
            ctx.run_bound()
        with pytest.raises(InvalidParamError, match="destroyed"):
            mems[1].array(np.uint8)
        with pytest.raises(InvalidParamError, match="no input or output"):
            ctx.set_io_mem(mems[0], ctx.inputs[0].replace(name="nope"))
        with pytest.raises(RKNNError) as info:  # librknnrt judges the layout
            ctx.set_io_mem(mems[0], ctx.inputs[1].replace(type=TensorType.INT16))
        assert info.value.op == "rknn_set_io_mem"
        with pytest.raises(InvalidParamError):
            ctx.create_mem(0)
        with pytest.raises(InvalidParamError):
            mems[0].sync(7)
        attr = ctx.native_inputs[1].replace(type=TensorType.FLOAT32)
        mem = ctx.create_mem(attr.size_with_stride)
        mem.view(attr)[...] = 1.0
        ctx.set_io_mem(mem, attr)
        ctx.run_bound()  # usable again
    with pytest.raises(ContextInvalidError):
        ctx.create_mem(64)


def test_create_mem_from_fd_maps_the_callers_memory(npu):
    attr = None
    fd = os.memfd_create("npu-test")
    try:
        with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
            attr = ctx.native_inputs[0].replace(type=TensorType.FLOAT32)
            os.ftruncate(fd, 64 + attr.size_with_stride)
            mem = ctx.create_mem_from_fd(fd, 64 + attr.size_with_stride, 64)
            assert (mem.fd, mem.offset, mem.flags.name) == (fd, 64, "FROM_FD")
            mem.view(attr)[...] = 2.5
            os.lseek(fd, 64, os.SEEK_SET)
            assert np.frombuffer(os.read(fd, 4), np.float32)[0] == 2.5  # the caller's memory, no copy
            ctx.set_io_mem(mem, attr)
        assert mem.destroyed
        os.fstat(fd)  # still the caller's
    finally:
        os.close(fd)


def test_disabled_input_flush_needs_sync(npu):
    """With DISABLE_FLUSH_INPUT_MEM_CACHE the runtime reads what was last synced to the device."""
    with rknnlite.Context(add_mul_model(), backend="npu", flags=InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE) as ctx:
        ones = np.ones((1, 3, 8, 8), np.float32)
        mems = _bind_add_mul(ctx, ones, ones)
        out = ctx.outputs[0].replace(type=TensorType.FLOAT32)
        ctx.run_bound()
        stale = np.array(mems[2].view(out))
        assert not np.allclose(stale, 2.0)  # CPU writes never reached the device
        for mem in mems[:2]:
            mem.sync(MemSyncMode.TO_DEVICE)
        ctx.run_bound()
        np.testing.assert_allclose(mems[2].view(out), 2.0, atol=1e-3)
    assert "flag=0x" in npu.calls("rknn_init")[0]


def test_non_cacheable_memory_uses_create_mem2(npu):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        mem = ctx.create_mem(128, MemAllocFlag.NON_CACHEABLE)
        assert not mem.cacheable and mem.alloc_flags == MemAllocFlag.NON_CACHEABLE
    assert npu.calls("rknn_create_mem2")


def test_memory_of_another_context_is_refused(npu):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        twin = ctx.dup()
        attr = ctx.native_inputs[0].replace(type=TensorType.FLOAT32)
        mem = ctx.create_mem(attr.size_with_stride)
        with pytest.raises(InvalidParamError, match="this context's create_mem"):
            twin.set_io_mem(mem, attr)
        twin.close()
        ctx.set_io_mem(mem, attr)  # its own context takes it
