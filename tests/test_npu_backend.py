"""The npu backend: the librknnrt binding and the NpuBackend adapter, against the fake
librknnrt of tests/fake_rknnrt (fixture ``fake_rknnrt``), plus the pieces that need no
runtime (version rule, perf table parsing)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rknnlite.backends.npu.perf import parse_perf_detail
from rknnlite.backends.npu.versions import model_toolkit_version, required_runtime, version_mismatch, version_numbers

# -- the version rule (no runtime needed) ------------------------------------------------------


def test_version_numbers():
    assert version_numbers("2.3.2 (429f97ae6b@2025-04-09T09:09:27)") == (2, 3, 2)
    assert version_numbers("1.6") == (1, 6, 0)
    assert version_numbers("librknnrt version: 2.5.0b1") == (2, 5, 0)
    assert version_numbers("unknown") is None
    assert version_numbers(None) is None


def test_toolkit_major_minor_needs_runtime_of_same_major_minor():
    model = SimpleNamespace(compiler_version="2.5.0", toolkit_version="2.5.0", format_version=6)
    assert model_toolkit_version(model) == "2.5.0"
    assert required_runtime(model) == (2, 5, 0)
    message = version_mismatch(model, "2.3.2 (429f97ae6b@2025-04-09T09:09:27)")
    assert message.startswith("model built with toolkit 2.5.0 needs librknnrt >= 2.5.0, found 2.3.2")
    assert version_mismatch(model, "2.5.0 (abcdef1@2026-01-01T00:00:00)") is None
    assert version_mismatch(model, "2.6.1") is None  # newer runtimes read older files
    # a patch release of the same minor is enough
    assert version_mismatch(SimpleNamespace(compiler_version="2.3.2"), "2.3.0") is None


def test_format_version_6_needs_runtime_1_5():
    model = SimpleNamespace(compiler_version=None, toolkit_version=None, toolkit_full_version=None, format_version=6)
    assert required_runtime(model) == (1, 5, 0)
    assert "file format version 6 needs librknnrt >= 1.5.0, found 1.4.0" in version_mismatch(model, "1.4.0")


def test_unknown_versions_give_no_diagnosis():
    assert version_mismatch(SimpleNamespace(), "1.0.0") is None
    assert version_mismatch(SimpleNamespace(compiler_version="2.5.0"), None) is None


def test_vendor_file_versions(vendor_rknn_files):
    from rknnlite.model.loader import load_model

    if not vendor_rknn_files:
        pytest.skip("no vendor .rknn fixture files")
    model = load_model(str(vendor_rknn_files[0])).model
    assert required_runtime(model) == (2, 5, 0)
    assert "needs librknnrt >= 2.5.0, found 2.3.2" in version_mismatch(model, "2.3.2")


# -- perf table parsing ---------------------------------------------------------------------------

_PERF = """\
---------------------------------------------------------------------------------------------------
                                         Network Layer Information Table
---------------------------------------------------------------------------------------------------
ID   OpType           DataType Target InputShape                               OutputShape            Cycles(DDR/NPU/Total)    Time(us)     MacUsage(%)          WorkLoad(0/1/2)      RW(KB)       FullName
---------------------------------------------------------------------------------------------------
1    InputOperator    UINT8    CPU    \\                                        (1,3,224,224)          0/0/0                    11           \\                    0.0%/0.0%/0.0%       0            InputOperator:input
2    ConvRelu         UINT8    NPU    (1,3,224,224),(32,3,3,3),(32)            (1,32,112,112)         48524/150528/150528      328          5.16                 100.0%/0.0%/0.0%     294          Conv:Conv_0
---------------------------------------------------------------------------------------------------
Total Operator Elapsed Per Frame Time(us): 339
"""


def test_parse_runtime_perf_table():
    detail = parse_perf_detail(_PERF)
    assert [r.id for r in detail.records] == [1, 2]
    conv = detail.records[1]
    assert conv.op_type == "ConvRelu" and conv.target == "NPU"
    assert conv.input_shapes == ((1, 3, 224, 224), (32, 3, 3, 3), (32,))
    assert conv.cycles == (48524, 150528, 150528)
    assert conv.time_us == 328.0 and conv.mac_usage == (5.16,)
    assert conv.workload == (1.0, 0.0, 0.0)
    assert conv.full_name == "Conv:Conv_0"
    assert detail.records[0].mac_usage is None
    assert detail.text() == _PERF  # the runtime's own table, unchanged
    assert detail.total_time_us == 339.0


# -- contract tests against the fake librknnrt ------------------------------------------------------

import gc  # noqa: E402
import shutil  # noqa: E402

import numpy as np  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.api import RKNNLite  # noqa: E402
from rknnlite.constants import CoreMask, InitFlag, MemSyncMode, QntType, QueryCmd, TensorFormat, TensorType  # noqa: E402
from rknnlite.errors import (ContextInvalidError, InvalidParamError, ModelInvalidError, RKNNError,  # noqa: E402
                             TargetPlatformMismatchError)

from fake_model import FakeTensor, add_mul_model, fake_model_bytes, fake_node  # noqa: E402

rknnrt = pytest.importorskip("rknnlite._native.rknnrt")


@pytest.fixture
def npu(fake_rknnrt_env, fake_rknnrt_log, monkeypatch):
    """The fake runtime as librknnrt (version 2.3.2), its call log."""
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.3.2")
    monkeypatch.delenv("FAKE_RKNNRT_PLATFORM", raising=False)
    return fake_rknnrt_log


def _ab(shape=(1, 3, 8, 8), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, shape).astype(np.float32) for _ in range(2)]


def _relu_i8(platform="rk3588", **kwargs):
    x = FakeTensor("x", (1, 3, 4, 4), "int8", scale=0.05, zp=-3)
    y = FakeTensor("y", (1, 3, 4, 4), "int8", scale=0.1, zp=2)
    return fake_model_bytes([x], [y], [fake_node("relu", ["x"], "y")], platform=platform, **kwargs)


def test_context_from_path_bytes_and_memoryview(npu, tmp_path):
    data = add_mul_model()
    path = tmp_path / "add_mul.rknn"
    path.write_bytes(data)
    a, b = _ab()
    for model in (str(path), data, memoryview(bytearray(data))):
        with rknnlite.Context(model, backend="npu") as ctx:
            assert ctx.backend == "npu"
            s, p = ctx.run([a, b], data_format="nchw")
            np.testing.assert_allclose(s, a + b, atol=2e-2)
            np.testing.assert_allclose(p, (a + b) * b, atol=5e-2)
    inits = npu.calls("rknn_init")
    assert len(inits) == 3
    # the model is always handed over as a buffer of the file's size (never re-read by path)
    assert all(f"size={len(data)} " in line and "path=-" in line for line in inits)


def test_auto_selects_npu_when_the_runtime_loads(npu):
    with rknnlite.Context(add_mul_model()) as ctx:
        assert ctx.backend == "npu"


def test_attrs_come_from_the_runtime(npu):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        a = ctx.query(QueryCmd.INPUT_ATTR, 0)
        assert (a.name, a.dims, a.fmt, a.type) == ("a", (1, 8, 8, 3), TensorFormat.NHWC, TensorType.FLOAT16)
        out = ctx.outputs[1]
        assert (out.name, out.dims, out.fmt) == ("prod", (1, 3, 8, 8), TensorFormat.NCHW)
        assert ctx.query(QueryCmd.IN_OUT_NUM) == (2, 2)
        assert [ln.split(" ", 1)[0] for ln in npu.calls("rknn_query")]  # answered by rknn_query
    assert any("cmd=INPUT_ATTR" in ln or "cmd=1" in ln for ln in npu.calls("rknn_query"))


def test_int8_model_quantization_and_want_float(npu):
    with rknnlite.Context(_relu_i8(), backend="npu") as ctx:
        x_attr = ctx.inputs[0]
        assert x_attr.type == TensorType.INT8 and x_attr.qnt_type == QntType.AFFINE_ASYMMETRIC
        assert x_attr.zp == -3 and x_attr.scale == pytest.approx(0.05)
        x = np.linspace(-3, 3, 48, dtype=np.float32).reshape(1, 4, 4, 3)
        y = ctx.run([x])[0]
        assert y.dtype == np.float32 and y.shape == (1, 3, 4, 4)
        xq = np.clip(np.round(x / 0.05) - 3, -128, 127)
        want = np.maximum((xq + 3) * 0.05, 0).transpose(0, 3, 1, 2)
        np.testing.assert_allclose(y, want, atol=0.1 + 1e-6)
        q = ctx.run([x], want_float=False)[0]
        assert q.dtype == np.int8
        np.testing.assert_array_equal(q, np.clip(np.round(y / 0.1) + 2, -128, 127).astype(np.int8))


def test_inputs_are_handed_over_in_the_runtime_format(npu):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        npu.clear()
        ctx.run(_ab(), data_format="nchw")
    line = npu.calls("rknn_inputs_set")[0]
    assert "NHWC" in line or "fmt=1" in line
    assert npu.names()[:3] == ["rknn_inputs_set", "rknn_run", "rknn_outputs_get"]
    assert "rknn_outputs_release" in npu.names()
    assert npu.live("outputs") == 0


def test_queries(npu):
    data = _relu_i8(custom_string="hello npu")
    with rknnlite.Context(data, backend="npu") as ctx:
        backend = ctx._backend
        assert backend.sdk_version()["api"].startswith("2.3.2")
        assert backend.sdk_version()["drv"] == "0.9.8"
        assert backend.custom_string == "hello npu"
        assert ctx.custom_string == "hello npu"
        mem = ctx.mem_size()
        assert mem.total_dma_allocated_size > 0
        with pytest.raises(RKNNError, match="no run yet"):
            ctx.perf_run()
        ctx.run([np.zeros((1, 4, 4, 3), np.float32)])
        assert ctx.perf_run() >= 0
        natives = backend.query_attrs(QueryCmd.NATIVE_INPUT_ATTR)
        assert natives[0].w_stride == 16 and natives[0].fmt == TensorFormat.NHWC
        assert ctx.native_inputs[0] == natives[0]  # the Context's rules agree with the runtime
        with pytest.raises(ModelInvalidError):
            backend.input_ranges()  # static model: the runtime's -6


def test_perf_detail_needs_the_flag_and_is_the_runtime_table(npu):
    with rknnlite.Context(_relu_i8(), backend="npu", flags=InitFlag.COLLECT_PERF_MASK) as ctx:
        ctx.run([np.zeros((1, 4, 4, 3), np.float32)])
        text = ctx.perf_detail()
        detail = ctx.perf_detail(as_text=False)
        assert "fake librknnrt" in text
        assert [r.op_type for r in detail.records]
        assert detail.text() == text
    assert any("flag=0x8" in ln for ln in npu.calls("rknn_init"))


def test_dup_shares_the_model_and_runs_alone(npu):
    gc.collect()
    contexts = npu.live("contexts")
    a, b = _ab()
    ctx = rknnlite.Context(add_mul_model(), backend="npu")
    twin = ctx.dup()
    assert twin.backend == "npu"
    assert len(npu.calls("rknn_dup_context")) == 1
    ctx.close()
    s, _ = twin.run([a, b], data_format="nchw")
    np.testing.assert_allclose(s, a + b, atol=2e-2)
    twin.close()
    assert npu.live("contexts") == contexts


def test_core_mask_and_batch_core_num(npu):
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        ctx.set_core_mask(CoreMask.CORE_0_1)
        assert "mask=0x3" in npu.calls("rknn_set_core_mask")[-1]
        ctx.set_batch_core_num(2)
        assert npu.calls("rknn_set_batch_core_num")
    with rknnlite.Context(add_mul_model(platform="rk3566"), backend="npu") as ctx:
        with pytest.raises(InvalidParamError, match="RK3588"):
            ctx.set_core_mask(CoreMask.CORE_0)
        backend = ctx._backend
        with pytest.raises(RKNNError) as info:
            backend.set_core_mask("rk3566", CoreMask.CORE_0)  # the runtime refuses too
        assert info.value.op == "rknn_set_core_mask"


def test_close_is_idempotent_and_later_calls_fail(npu):
    gc.collect()
    contexts = npu.live("contexts")
    ctx = rknnlite.Context(add_mul_model(), backend="npu")
    ctx.close()
    ctx.close()
    with pytest.raises(ContextInvalidError):
        ctx.run(_ab(), data_format="nchw")
    assert npu.live("contexts") == contexts


def test_bad_input_is_a_typed_error_and_the_context_stays_usable(npu):
    from rknnlite.errors import InputInvalidError

    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        with pytest.raises(InputInvalidError):
            ctx.run([np.zeros((1, 2, 2, 3), np.float32)] * 2)
        s, _ = ctx.run(_ab(), data_format="nchw")
        assert s.shape == (1, 3, 8, 8)


def test_rknn_init_error_is_typed(npu, monkeypatch):
    monkeypatch.setenv("FAKE_RKNNRT_PLATFORM", "rk3566")
    with pytest.raises(TargetPlatformMismatchError) as info:
        rknnlite.Context(add_mul_model(platform="rk3588"), backend="npu")
    assert info.value.op == "rknn_init"


def test_dynamic_shapes_switch_with_set_input_shapes(npu):
    x = FakeTensor("x", (1, 5), "float16")
    y = FakeTensor("y", (1, 5), "float16")
    data = fake_model_bytes([x], [y], [fake_node("neg", ["x"], "y")], dynamic_shapes=[[[1, 5]], [[2, 7]]])
    with rknnlite.Context(data, backend="npu") as ctx:
        ranges = ctx._backend.input_ranges()
        assert ranges[0].dyn_range == ((1, 5), (2, 7))
        v = np.arange(14, dtype=np.float32).reshape(2, 7)
        out = ctx.run([v])[0]
        assert out.shape == (2, 7)
        np.testing.assert_allclose(out, -v)
        assert npu.calls("rknn_set_input_shapes")
        out = ctx.run([np.ones((1, 5), np.float32)])[0]
        assert out.shape == (1, 5)


def test_zero_copy_io(npu):
    gc.collect()
    mems, contexts = npu.live("mems"), npu.live("contexts")
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        backend = ctx._backend
        ins = backend.query_attrs(QueryCmd.NATIVE_INPUT_ATTR)
        outs = backend.query_attrs(QueryCmd.NATIVE_OUTPUT_ATTR)
        a, b = _ab()
        in_mems = []
        for attr, x in zip(ins, (a, b)):
            attr = attr.replace(type=TensorType.FLOAT32, fmt=TensorFormat.NHWC)
            n, h, w, c = attr.dims
            stride = attr.w_stride or w  # rows are padded to w_stride pixels
            mem = backend.create_mem(attr.size_with_stride)
            view = np.frombuffer(mem, np.float32, count=n * h * stride * c).reshape(n, h, stride, c)
            view[:, :, :w, :] = x.transpose(0, 2, 3, 1)
            del view
            mem.sync(MemSyncMode.TO_DEVICE)
            backend.set_io_mem(mem, attr)
            in_mems.append(mem)
        out_attr = backend.output_attrs[0].replace(type=TensorType.FLOAT32)
        out_mem = backend.create_mem(out_attr.size)
        backend.set_io_mem(out_mem, out_attr)
        backend.run_bound()
        out_mem.sync(MemSyncMode.FROM_DEVICE)
        got = np.frombuffer(out_mem, np.float32, count=out_attr.n_elems).reshape(out_attr.dims)
        np.testing.assert_allclose(got, a + b, atol=2e-2)
        assert outs[0].fmt == TensorFormat.NC1HWC2
        assert npu.live("mems") == mems + 3
        del got
        for mem in in_mems:
            mem.close()
        assert npu.live("mems") == mems + 1
    assert npu.live("mems") == mems and npu.live("contexts") == contexts


def test_destroy_waits_for_a_live_view_of_tensor_memory(npu):
    gc.collect()
    mems, contexts = npu.live("mems"), npu.live("contexts")
    ctx = rknnlite.Context(add_mul_model(), backend="npu")
    mem = ctx._backend.create_mem(64)
    view = np.frombuffer(mem, np.uint8)
    with pytest.raises(InvalidParamError, match="buffer view"):
        mem.close()
    ctx.close()
    # rknn_destroy waits: the view still points into the memory
    assert npu.live("contexts") == contexts + 1 and npu.live("mems") == mems + 1
    view[:] = 7  # still valid memory
    del view
    gc.collect()
    assert npu.live("mems") == mems and npu.live("contexts") == contexts


class _Square:
    op_type = "cstSquare"

    def __init__(self):
        self.nodes = []

    def compute(self, node, inputs):
        self.nodes.append((node.op, node.inputs, node.outputs, node.attr("alpha")))
        return [inputs[0].astype(np.float32) ** 2 * float(node.attr("alpha")[0])]


class _Broken:
    op_type = "cstSquare"

    def compute(self, node, inputs):
        raise ZeroDivisionError("broken op")


def _square_model():
    x = FakeTensor("x", (1, 6), "float16")
    y = FakeTensor("y", (1, 6), "float16")
    return fake_model_bytes([x], [y], [fake_node("cstSquare", ["x"], "y", attrs={"alpha": 0.5})])


def test_python_custom_op_runs_as_a_native_callback(npu):
    op = _Square()
    with rknnlite.Context(_square_model(), backend="npu", custom_ops=[op]) as ctx:
        x = np.arange(6, dtype=np.float32).reshape(1, 6)
        y = ctx.run([x])[0]
        np.testing.assert_allclose(y, x ** 2 * 0.5, rtol=1e-3)
        assert op.nodes[0][0] == "cstSquare" and op.nodes[0][3][0] == pytest.approx(0.5)
        twin = ctx.dup()
        np.testing.assert_allclose(twin.run([x])[0], x ** 2 * 0.5, rtol=1e-3)
        twin.close()
    assert npu.calls("rknn_register_custom_ops")


def test_custom_op_exception_is_reraised_after_rknn_run(npu):
    with rknnlite.Context(_square_model(), backend="npu", custom_ops=[_Broken()]) as ctx:
        with pytest.raises(ZeroDivisionError, match="broken op"):
            ctx.run([np.ones((1, 6), np.float32)])
        with pytest.raises(ZeroDivisionError):  # and again: nothing left half-done
            ctx.run([np.ones((1, 6), np.float32)])


def test_missing_custom_op_is_a_runtime_error(npu):
    with rknnlite.Context(_square_model(), backend="npu") as ctx:
        with pytest.raises(RKNNError) as info:
            ctx.run([np.ones((1, 6), np.float32)])
        assert info.value.op == "rknn_run"


def test_old_runtime_fails_only_when_a_missing_symbol_is_used(fake_rknnrt_old, fake_rknnrt_old_log, monkeypatch):
    monkeypatch.setenv("LIBRKNNRT_PATH", str(fake_rknnrt_old))
    monkeypatch.delenv("FAKE_RKNNRT_VERSION", raising=False)
    data = add_mul_model(toolkit_version="1.4.0")
    with rknnlite.Context(data, backend="npu") as ctx:
        s, _ = ctx.run(_ab(), data_format="nchw")  # everything else works
        with pytest.raises(RKNNError) as info:
            ctx.set_core_mask(CoreMask.CORE_0_1)
    message = str(info.value)
    assert "rknn_set_core_mask" in message and str(fake_rknnrt_old) in message and "1.4.0" in message
    assert not fake_rknnrt_old_log.calls("rknn_set_core_mask")


def _with_banner(lib, tmp_path, version):
    """A copy of the fake runtime carrying a vendor-style version string, as librknnrt does."""
    copy = tmp_path / f"librknnrt-{version}.so"
    shutil.copyfile(lib, copy)
    with open(copy, "ab") as f:
        f.write(f"\0{version} (0123abcd@2026-01-01T00:00:00)\0".encode())
    return copy


def test_version_mismatch_is_diagnosed_before_any_context(fake_rknnrt, tmp_path, monkeypatch):
    lib = _with_banner(fake_rknnrt, tmp_path, "2.3.2")
    monkeypatch.setenv("LIBRKNNRT_PATH", str(lib))
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.3.2")
    with pytest.raises(ModelInvalidError) as info:
        rknnlite.Context(add_mul_model(toolkit_version="2.5.0"), backend="npu")
    assert "model built with toolkit 2.5.0 needs librknnrt >= 2.5.0, found 2.3.2" in str(info.value)
    assert info.value.op == "rknn_init"
    # the same runtime runs a model of its own minor version
    with rknnlite.Context(add_mul_model(toolkit_version="2.3.0"), backend="npu") as ctx:
        assert ctx.backend == "npu"


def test_old_runtime_version_error(fake_rknnrt_old, tmp_path, monkeypatch):
    lib = _with_banner(fake_rknnrt_old, tmp_path, "1.4.0")
    monkeypatch.setenv("LIBRKNNRT_PATH", str(lib))
    monkeypatch.delenv("FAKE_RKNNRT_VERSION", raising=False)
    with pytest.raises(RKNNError, match=r"needs librknnrt >= 2\.3\.0, found 1\.4\.0"):
        rknnlite.Context(add_mul_model(toolkit_version="2.3.2"), backend="npu")


def test_rknnlite_facade_on_the_npu(npu, tmp_path):
    gc.collect()
    contexts = npu.live("contexts")
    path = tmp_path / "add_mul.rknn"
    path.write_bytes(add_mul_model())
    rk = RKNNLite()
    assert rk.load_rknn(str(path)) == 0
    assert rk.init_runtime() == 0
    a, b = _ab()
    outs = rk.inference(inputs=[a.transpose(0, 2, 3, 1), b.transpose(0, 2, 3, 1)])
    np.testing.assert_allclose(outs[0], a + b, atol=2e-2)
    rk.release()
    assert npu.live("contexts") == contexts


def test_encrypted_envelope_is_decrypted_in_memory(npu, tmp_path):
    from rknnlite.model import envelope

    key = bytes(range(32))
    sealed = envelope.encrypt(memoryview(add_mul_model()), key)
    with rknnlite.Context(sealed, key=key, backend="npu") as ctx:
        s, _ = ctx.run(_ab(), data_format="nchw")
        assert s.shape == (1, 3, 8, 8)
    assert all("path=-" in ln for ln in npu.calls("rknn_init"))


def test_binding_struct_sizes():
    assert rknnrt.ABI_SIZES["rknn_tensor_attr"] == 376
    assert rknnrt.ABI_SIZES["rknn_custom_op"] == 832


def test_dynamic_4d_input_switches_in_the_runtime_layout(npu):
    x = FakeTensor("x", (1, 3, 4, 4), "float16")
    y = FakeTensor("y", (1, 3, 4, 4), "float16")
    data = fake_model_bytes([x], [y], [fake_node("neg", ["x"], "y")], dynamic_shapes=[[[1, 3, 4, 4]], [[1, 3, 8, 8]]])
    with rknnlite.Context(data, backend="npu") as ctx:
        backend = ctx._backend
        assert backend.dynamic_shapes == [[(1, 4, 4, 3)], [(1, 8, 8, 3)]]  # NHWC, as the runtime presents it
        assert backend.inputs[0].shape == (1, -1, -1, 3)
        v = np.arange(192, dtype=np.float16).reshape(1, 8, 8, 3)
        out = backend.run([v])[0]
        np.testing.assert_allclose(out, -v.transpose(0, 3, 1, 2).astype(np.float32), rtol=1e-3)
        line = npu.calls("rknn_set_input_shapes")[-1]
        assert "-> 0" in line


def test_user_memory_and_flags(npu):
    from rknnlite.constants import MemAllocFlag

    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        backend = ctx._backend
        mem = backend.create_mem(100, MemAllocFlag.CACHEABLE)
        assert mem.size == 100
        assert "rknn_create_mem2" in npu.names()
        buf = bytearray(256)
        phys = backend.create_mem_from_phys(0x10000, buf, 256)
        assert phys.phys_addr == 0x10000
        np.frombuffer(phys, np.uint8)[:4] = 9  # the memory is the user's buffer: no copy
        assert bytes(buf[:4]) == b"\x09" * 4
        from_fd = backend.create_mem_from_fd(5, buf, 128, 64)
        assert (from_fd.fd, from_fd.offset, from_fd.size) == (5, 64, 128)
        np.frombuffer(from_fd, np.uint8)[:2] = 3
        assert bytes(buf[64:66]) == b"\x03\x03"
        with pytest.raises(InvalidParamError, match="does not fit"):
            backend.create_mem_from_fd(5, bytearray(10), 128, 0)
    assert mem.closed and phys.closed and from_fd.closed


def test_run_writes_outputs_into_caller_arrays(npu):
    a, b = _ab()
    with rknnlite.Context(add_mul_model(), backend="npu") as ctx:
        backend = ctx._backend
        feeds = [np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if attr.fmt == rknnlite.TensorFormat.NHWC else x
                 for x, attr in zip((a, b), ctx.inputs)]
        expected = backend.run(feeds)
        target = np.empty_like(expected[0])
        got = backend.run(feeds, out=[target, None])
        assert got[0] is target and got[1] is not None
        np.testing.assert_array_equal(target, expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
        with pytest.raises(rknnlite.InvalidParamError, match="shape"):
            backend.run(feeds, out=[np.empty((1, 2)), None])
