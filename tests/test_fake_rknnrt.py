"""The fake librknnrt (tests/fake_rknnrt) driven through ctypes: proves its call semantics
before the Cython binding is tested against it."""

from __future__ import annotations

import ctypes as C
import threading

import numpy as np
import pytest

from fake_model import FakeTensor, add_mul_model, fake_model_bytes, fake_node

# ---------------------------------------------------------------------------------------------
# Minimal ctypes mirrors of rknn_api.h / rknn_custom_op.h (test-only).

MAX_DIMS, NAME = 16, 256


class TensorAttr(C.Structure):
    _fields_ = [("index", C.c_uint32), ("n_dims", C.c_uint32), ("dims", C.c_uint32 * MAX_DIMS),
                ("name", C.c_char * NAME), ("n_elems", C.c_uint32), ("size", C.c_uint32), ("fmt", C.c_int),
                ("type", C.c_int), ("qnt_type", C.c_int), ("fl", C.c_int8), ("zp", C.c_int32), ("scale", C.c_float),
                ("w_stride", C.c_uint32), ("size_with_stride", C.c_uint32), ("pass_through", C.c_uint8),
                ("h_stride", C.c_uint32)]


class InputRange(C.Structure):
    _fields_ = [("index", C.c_uint32), ("shape_number", C.c_uint32), ("fmt", C.c_int), ("name", C.c_char * NAME),
                ("dyn_range", (C.c_uint32 * MAX_DIMS) * 512), ("n_dims", C.c_uint32)]


class InOutNum(C.Structure):
    _fields_ = [("n_input", C.c_uint32), ("n_output", C.c_uint32)]


class PerfDetail(C.Structure):
    _fields_ = [("perf_data", C.c_char_p), ("data_len", C.c_uint64)]


class PerfRun(C.Structure):
    _fields_ = [("run_duration", C.c_int64)]


class SdkVersion(C.Structure):
    _fields_ = [("api_version", C.c_char * 256), ("drv_version", C.c_char * 256)]


class MemSize(C.Structure):
    _fields_ = [("total_weight_size", C.c_uint32), ("total_internal_size", C.c_uint32),
                ("total_dma_allocated_size", C.c_uint64), ("total_sram_size", C.c_uint32),
                ("free_sram_size", C.c_uint32), ("reserved", C.c_uint32 * 10)]


class CustomString(C.Structure):
    _fields_ = [("string", C.c_char * 1024)]


class TensorMem(C.Structure):
    _fields_ = [("virt_addr", C.c_void_p), ("phys_addr", C.c_uint64), ("fd", C.c_int32), ("offset", C.c_int32),
                ("size", C.c_uint32), ("flags", C.c_uint32), ("priv_data", C.c_void_p)]


class Input(C.Structure):
    _fields_ = [("index", C.c_uint32), ("buf", C.c_void_p), ("size", C.c_uint32), ("pass_through", C.c_uint8),
                ("type", C.c_int), ("fmt", C.c_int)]


class Output(C.Structure):
    _fields_ = [("want_float", C.c_uint8), ("is_prealloc", C.c_uint8), ("index", C.c_uint32), ("buf", C.c_void_p),
                ("size", C.c_uint32)]


class InitExtend(C.Structure):
    _fields_ = [("ctx", C.c_uint64), ("real_model_offset", C.c_int32), ("real_model_size", C.c_uint32),
                ("model_buffer_fd", C.c_int32), ("model_buffer_flags", C.c_uint32), ("reserved", C.c_uint8 * 112)]


class RunExtend(C.Structure):
    _fields_ = [("frame_id", C.c_uint64), ("non_block", C.c_int32), ("timeout_ms", C.c_int32), ("fence_fd", C.c_int32)]


class OutputExtend(C.Structure):
    _fields_ = [("frame_id", C.c_uint64)]


class OpContext(C.Structure):
    _fields_ = [("target", C.c_int), ("internal_ctx", C.c_uint64), ("gpu_ctx", C.c_void_p * 3), ("priv_data", C.c_void_p)]


class OpTensor(C.Structure):
    _fields_ = [("attr", TensorAttr), ("mem", TensorMem)]


class OpAttr(C.Structure):
    _fields_ = [("name", C.c_char * NAME), ("dtype", C.c_int), ("n_elems", C.c_uint32), ("data", C.c_void_p)]


OP_CB = C.CFUNCTYPE(C.c_int, C.POINTER(OpContext), C.POINTER(OpTensor), C.c_uint32, C.POINTER(OpTensor), C.c_uint32)
OP_DESTROY = C.CFUNCTYPE(C.c_int, C.POINTER(OpContext))


class CustomOp(C.Structure):
    _fields_ = [("version", C.c_uint32), ("target", C.c_int), ("op_type", C.c_char * NAME),
                ("cl_kernel_name", C.c_char * NAME), ("cl_kernel_source", C.c_char_p), ("cl_source_size", C.c_uint64),
                ("cl_build_options", C.c_char * NAME), ("init", OP_CB), ("prepare", OP_CB), ("compute", OP_CB),
                ("compute_native", OP_CB), ("destroy", OP_DESTROY)]


SIZES = {TensorAttr: 376, InputRange: 33040, Input: 32, Output: 24, TensorMem: 40, InitExtend: 136, MemSize: 64,
         SdkVersion: 512, PerfDetail: 16, RunExtend: 24, CustomOp: 832, OpContext: 48, OpTensor: 416, OpAttr: 272}

# Constants (rknn_api.h)
SUCC, FAIL, PARAM, MODEL, CTX, INPUT, OUTPUT, PLATFORM = 0, -1, -5, -6, -7, -8, -9, -13
(Q_IN_OUT_NUM, Q_INPUT_ATTR, Q_OUTPUT_ATTR, Q_PERF_DETAIL, Q_PERF_RUN, Q_SDK_VERSION, Q_MEM_SIZE, Q_CUSTOM_STRING,
 Q_NATIVE_INPUT_ATTR, Q_NATIVE_OUTPUT_ATTR, Q_NATIVE_NHWC_INPUT_ATTR, Q_NATIVE_NHWC_OUTPUT_ATTR, Q_DEVICE_MEM_INFO,
 Q_INPUT_DYNAMIC_RANGE, Q_CURRENT_INPUT_ATTR, Q_CURRENT_OUTPUT_ATTR, Q_CURRENT_NATIVE_INPUT_ATTR,
 Q_CURRENT_NATIVE_OUTPUT_ATTR) = range(18)
T_F32, T_F16, T_I8, T_U8 = 0, 1, 2, 3
NCHW, NHWC, NC1HWC2, UNDEFINED = 0, 1, 2, 3
QNT_NONE, QNT_AFFINE = 0, 2
F_ASYNC, F_PERF, F_INFO_ONLY, F_NO_FLUSH_IN, F_NO_FLUSH_OUT = 0x4, 0x8, 0x100, 0x4000, 0x8000
SYNC_TO, SYNC_FROM = 1, 2
MEM_NON_CACHEABLE, MEM_NO_CONTEXT = 2, 0x20000

QUERY_STRUCTS = {Q_IN_OUT_NUM: InOutNum, Q_INPUT_ATTR: TensorAttr, Q_OUTPUT_ATTR: TensorAttr, Q_PERF_DETAIL: PerfDetail,
                 Q_PERF_RUN: PerfRun, Q_SDK_VERSION: SdkVersion, Q_MEM_SIZE: MemSize, Q_CUSTOM_STRING: CustomString,
                 Q_DEVICE_MEM_INFO: TensorMem, Q_INPUT_DYNAMIC_RANGE: InputRange}
for _cmd in range(Q_NATIVE_INPUT_ATTR, Q_CURRENT_NATIVE_OUTPUT_ATTR + 1):
    QUERY_STRUCTS.setdefault(_cmd, TensorAttr)


class RT:
    """The fake runtime through ctypes, with small conveniences for the tests."""

    def __init__(self, path):
        self.created = []  # contexts made by init(), destroyed by close()
        lib = self.lib = C.CDLL(str(path))
        for name, res in (("rknn_create_mem", C.POINTER(TensorMem)), ("rknn_create_mem_from_fd", C.POINTER(TensorMem)),
                          ("rknn_create_mem_from_phys", C.POINTER(TensorMem))):
            getattr(lib, name).restype = res
        lib.rknn_init.argtypes = [C.POINTER(C.c_uint64), C.c_void_p, C.c_uint32, C.c_uint32, C.c_void_p]
        lib.rknn_query.argtypes = [C.c_uint64, C.c_int, C.c_void_p, C.c_uint32]
        lib.rknn_destroy.argtypes = [C.c_uint64]
        lib.rknn_run.argtypes = [C.c_uint64, C.c_void_p]
        lib.rknn_inputs_set.argtypes = [C.c_uint64, C.c_uint32, C.POINTER(Input)]
        lib.rknn_outputs_get.argtypes = [C.c_uint64, C.c_uint32, C.POINTER(Output), C.c_void_p]
        lib.rknn_outputs_release.argtypes = [C.c_uint64, C.c_uint32, C.POINTER(Output)]
        lib.rknn_create_mem.argtypes = [C.c_uint64, C.c_uint32]
        lib.rknn_create_mem_from_fd.argtypes = [C.c_uint64, C.c_int32, C.c_void_p, C.c_uint32, C.c_int32]
        lib.rknn_create_mem_from_phys.argtypes = [C.c_uint64, C.c_uint64, C.c_void_p, C.c_uint32]
        lib.rknn_destroy_mem.argtypes = [C.c_uint64, C.POINTER(TensorMem)]
        lib.rknn_set_io_mem.argtypes = [C.c_uint64, C.POINTER(TensorMem), C.POINTER(TensorAttr)]
        lib.rknn_mem_sync.argtypes = [C.c_uint64, C.POINTER(TensorMem), C.c_int]
        lib.rknn_dup_context.argtypes = [C.POINTER(C.c_uint64), C.POINTER(C.c_uint64)]
        lib.rknn_set_batch_core_num.argtypes = [C.c_uint64, C.c_int]
        lib.rknn_register_custom_ops.argtypes = [C.c_uint64, C.POINTER(CustomOp), C.c_uint32]
        lib.rknn_custom_op_get_op_attr.argtypes = [C.POINTER(OpContext), C.c_char_p, C.POINTER(OpAttr)]
        if hasattr(lib, "rknn_create_mem2"):
            lib.rknn_create_mem2.restype = C.POINTER(TensorMem)
            lib.rknn_create_mem2.argtypes = [C.c_uint64, C.c_uint64, C.c_uint64]
            lib.rknn_set_core_mask.argtypes = [C.c_uint64, C.c_int]
            lib.rknn_set_input_shapes.argtypes = [C.c_uint64, C.c_uint32, C.POINTER(TensorAttr)]

    def init(self, model, flags=0, extend=None):
        """(ret, ctx) for model bytes (buffer) or a str path (size 0)."""
        ctx = C.c_uint64(0)
        if isinstance(model, str):
            ret = self.lib.rknn_init(C.byref(ctx), C.c_char_p(model.encode()), 0, flags, extend)
        else:
            buf = C.create_string_buffer(bytes(model), len(model))
            ret = self.lib.rknn_init(C.byref(ctx), buf, len(model), flags, extend)
        if ret == SUCC:
            self.created.append(ctx.value)
        return ret, ctx.value

    def close(self):
        for ctx in self.created:
            self.lib.rknn_destroy(ctx)  # RKNN_ERR_CTX_INVALID when the test destroyed it already

    def ctx(self, model, flags=0):
        ret, ctx = self.init(model, flags)
        assert ret == SUCC
        return ctx

    def query(self, ctx, cmd, index=0, size=None):
        """(ret, struct)."""
        info = QUERY_STRUCTS[cmd]()
        if hasattr(info, "index"):
            info.index = index
        ret = self.lib.rknn_query(ctx, cmd, C.byref(info), C.sizeof(info) if size is None else size)
        return ret, info

    def attr(self, ctx, cmd, index=0):
        ret, a = self.query(ctx, cmd, index)
        assert ret == SUCC, ret
        return a

    def set_inputs(self, ctx, arrays, types=None, fmts=None, pass_through=None):
        n = len(arrays)
        ins = (Input * n)()
        keep = []
        for i, arr in enumerate(arrays):
            arr = np.ascontiguousarray(arr)
            keep.append(arr)
            ins[i].index = i
            ins[i].buf = arr.ctypes.data
            ins[i].size = arr.nbytes
            ins[i].type = types[i] if types else {np.dtype(np.float32): T_F32, np.dtype(np.float16): T_F16,
                                                  np.dtype(np.int8): T_I8, np.dtype(np.uint8): T_U8}[arr.dtype]
            ins[i].fmt = fmts[i] if fmts else NCHW
            ins[i].pass_through = pass_through[i] if pass_through else 0
        return self.lib.rknn_inputs_set(ctx, n, ins)

    def get_outputs(self, ctx, n, want_float=True, frame=None):
        outs = (Output * n)()
        for i in range(n):
            outs[i].index = i
            outs[i].want_float = int(want_float)
        ext = OutputExtend()
        ret = self.lib.rknn_outputs_get(ctx, n, outs, C.byref(ext))
        assert ret == SUCC, ret
        result = [bytes(C.string_at(outs[i].buf, outs[i].size)) for i in range(n)]
        assert self.lib.rknn_outputs_release(ctx, n, outs) == SUCC
        if frame is not None:
            frame.append(ext.frame_id)
        return result

    def run(self, ctx, arrays, n_out, want_float=True, **kw):
        assert self.set_inputs(ctx, arrays, **kw) == SUCC
        assert self.lib.rknn_run(ctx, None) == SUCC
        return self.get_outputs(ctx, n_out, want_float)


def f32(raw, shape):
    return np.frombuffer(raw, np.float32).reshape(shape)


@pytest.fixture
def rt(fake_rknnrt, fake_rknnrt_log):
    runtime = RT(fake_rknnrt)
    yield runtime
    runtime.close()


@pytest.fixture
def log(fake_rknnrt_log):
    return fake_rknnrt_log


def ab(shape=(1, 3, 8, 8), seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-2, 2, shape).astype(np.float32), rng.uniform(-2, 2, shape).astype(np.float32)


def fp16(x):
    return x.astype(np.float16).astype(np.float32)


def quant(x, scale, zp):
    return np.clip(np.rint(x / scale) + zp, -128, 127).astype(np.int8)


# ---------------------------------------------------------------------------------------------
# Model files


def test_ctypes_mirrors_have_the_reference_sizes():
    for struct, size in SIZES.items():
        assert C.sizeof(struct) == size, struct.__name__


def test_model_file_is_a_rockchip_container():
    from rknnlite.model.loader import ROCKCHIP, detect_format
    from rknnlite.model.rockchip import read_rockchip

    data = add_mul_model(dtype="int8", platform="rk3566", toolkit_version="2.5.0", custom_string="cs",
                         dynamic_shapes=[[[1, 3, 8, 8], [1, 3, 8, 8]], [[1, 3, 4, 4], [1, 3, 4, 4]]])
    assert data[:8] == b"RKNN\0\0\0\0" and int.from_bytes(data[8:16], "little") == 6
    assert detect_format(data) == ROCKCHIP
    m = read_rockchip(data)
    assert m.target_platform == "rk3566" and m.target_platforms == ["rk3566"]
    assert m.toolkit_version == "2.5.0" and m.compiler_version == "2.5.0" and m.custom_string == "cs"
    assert [t.name for t in m.inputs] == ["a", "b"] and [t.name for t in m.outputs] == ["sum", "prod"]
    assert m.inputs[0].quant.scale == pytest.approx((0.05,)) and m.outputs[1].quant.scale == pytest.approx((0.2,))
    assert m.dynamic_shapes == [[(1, 3, 8, 8)] * 2, [(1, 3, 4, 4)] * 2]


# ---------------------------------------------------------------------------------------------
# rknn_init / rknn_destroy


def test_init_from_buffer_and_from_path(rt, log, tmp_path):
    path = tmp_path / "m.rknn"
    path.write_bytes(add_mul_model())
    for model in (add_mul_model(), str(path)):
        ret, ctx = rt.init(model)
        assert ret == SUCC and ctx != 0
        n = rt.attr(ctx, Q_IN_OUT_NUM)
        assert (n.n_input, n.n_output) == (2, 2)
        assert rt.lib.rknn_destroy(ctx) == SUCC
        assert rt.lib.rknn_destroy(ctx) == CTX
    assert log.live("contexts") == 0 and log.live("models") == 0
    assert f"path={path}" in log.calls("rknn_init")[1]


def _with_json(data: bytes, edit) -> bytes:
    """The model with its JSON trailer edited (lengths kept consistent)."""
    model_size = int.from_bytes(data[16:24], "little")
    text = edit(data[72 + model_size:])
    return data[:64 + model_size] + len(text).to_bytes(8, "little") + text


def _relu_model(**kw):
    return fake_model_bytes([FakeTensor("x", (1, 4))], [FakeTensor("y", (1, 4))], [fake_node("relu", ["x"], "y")], **kw)


@pytest.mark.parametrize("data, message", [
    (b"garbage" * 20, "Invalid RKNN format"),
    (b"CYPTRKNN" + bytes(100), "invalid rknn model magic"),
    (add_mul_model()[:-5], "JSON trailer"),
    (_relu_model().replace(b'"fake_graph"', b'"fake_grap_"'), "vendor graph is unknown"),
    (_with_json(_relu_model(), lambda t: t.replace(b'"relu"', b'"relu" "x"')), "not a JSON object"),
    (_with_json(_relu_model(), lambda t: t.replace(b'"float16"', b'"bfloat16"', 1)), "dtype bfloat16 unsupported"),
    (_with_json(_relu_model(), lambda t: t.replace(b'"relu"', b'"relu", "inputs": ["x", "x", "x"]')),
     "1..2 inputs"),
], ids=["garbage", "encrypted", "truncated", "no-graph", "bad-json", "bad-dtype", "three-inputs"])
def test_init_rejects_bad_files(rt, log, data, message):
    ret, _ = rt.init(data)
    assert ret == MODEL
    assert any(message in m for m in log.messages("E")), log.messages()
    assert "rknn_init, load model failed!" in log.messages("E")
    assert log.live("contexts") == 0


def test_init_rejects_bad_graphs(rt):
    t = FakeTensor("x", (1, 4))
    bad = [
        fake_model_bytes([t], [FakeTensor("y", (1, 4))], [fake_node("add", ["x"], "y")]),  # add needs 2 operands
        fake_model_bytes([t], [FakeTensor("y", (1, 5))], [fake_node("relu", ["x"], "y")]),  # declared shape differs
        fake_model_bytes([t], [FakeTensor("y", (1, 4))], [fake_node("relu", ["z"], "y")]),  # undefined operand
        fake_model_bytes([t, FakeTensor("w", (1, 3))], [FakeTensor("y", (1, 4))], [fake_node("add", ["x", "w"], "y")]),
    ]
    for data in bad:
        assert rt.init(data)[0] == MODEL


def test_init_parameter_errors(rt, tmp_path):
    model = add_mul_model()
    buf = C.create_string_buffer(model, len(model))
    assert rt.lib.rknn_init(None, buf, len(model), 0, None) == PARAM
    assert rt.init(str(tmp_path / "missing.rknn"))[0] == MODEL
    # SHARE_WEIGHT_MEM needs extend->ctx of a live context
    assert rt.init(model, 0x20)[0] == PARAM
    ctx = rt.ctx(model)
    ext = InitExtend(ctx=ctx)
    assert rt.init(model, 0x20, C.byref(ext))[0] == SUCC


def test_version_mismatch(rt, log, monkeypatch):
    model = add_mul_model(toolkit_version="2.6.0")
    ret, _ = rt.init(model)  # default runtime 2.5.0
    assert ret == MODEL
    assert "Invalid RKNN model version 6" in log.messages("E")
    assert any("toolkit 2.6.0" in m and "2.5.0" in m for m in log.messages("E"))
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "1.4.0")  # old runtimes answered RKNN_ERR_FAIL
    assert rt.init(add_mul_model(toolkit_version="1.6.0"))[0] == FAIL
    assert rt.init(add_mul_model(toolkit_version="1.4.2"))[0] == SUCC
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.6.1")
    assert rt.init(model)[0] == SUCC


def test_target_platform_mismatch(rt, log, monkeypatch):
    monkeypatch.setenv("FAKE_RKNNRT_PLATFORM", "rk3566")
    assert rt.init(add_mul_model(platform="rk3588"))[0] == PLATFORM
    assert rt.init(add_mul_model(platform="rk3566"))[0] == SUCC


# ---------------------------------------------------------------------------------------------
# rknn_query


@pytest.mark.parametrize("cmd", sorted(QUERY_STRUCTS))
def test_query_size_must_equal_the_struct(rt, log, cmd):
    ctx = rt.ctx(add_mul_model())
    expect = C.sizeof(QUERY_STRUCTS[cmd])
    for size in (expect - 1, expect + 4, 0):
        assert rt.query(ctx, cmd, size=size)[0] == PARAM
    assert any(f"size = {expect - 1}, expect {expect}!" in m for m in log.messages("E"))


def test_query_bad_arguments(rt):
    ctx = rt.ctx(add_mul_model())
    assert rt.lib.rknn_query(ctx, Q_INPUT_ATTR, None, 376) == PARAM
    assert rt.lib.rknn_query(ctx, 18, C.byref(TensorAttr()), 376) == PARAM
    assert rt.lib.rknn_query(ctx + 1000, Q_IN_OUT_NUM, C.byref(InOutNum()), 8) == CTX


@pytest.mark.parametrize("cmd, n", [(Q_INPUT_ATTR, 2), (Q_OUTPUT_ATTR, 2), (Q_NATIVE_INPUT_ATTR, 2),
                                    (Q_NATIVE_OUTPUT_ATTR, 2), (Q_NATIVE_NHWC_INPUT_ATTR, 2),
                                    (Q_NATIVE_NHWC_OUTPUT_ATTR, 2), (Q_CURRENT_INPUT_ATTR, 2),
                                    (Q_CURRENT_OUTPUT_ATTR, 2), (Q_CURRENT_NATIVE_INPUT_ATTR, 2),
                                    (Q_CURRENT_NATIVE_OUTPUT_ATTR, 2)])
def test_query_index_bounds(rt, cmd, n):
    ctx = rt.ctx(add_mul_model())
    assert rt.query(ctx, cmd, index=n - 1)[0] == SUCC
    assert rt.query(ctx, cmd, index=n)[0] == PARAM
    assert rt.query(ctx, cmd, index=0xFFFFFFFF)[0] == PARAM


def test_float16_attrs(rt):
    ctx = rt.ctx(add_mul_model())
    a = rt.attr(ctx, Q_INPUT_ATTR, 1)
    assert (a.index, a.name, a.n_dims, list(a.dims[:4])) == (1, b"b", 4, [1, 8, 8, 3])
    assert (a.fmt, a.type, a.qnt_type, a.n_elems, a.size) == (NHWC, T_F16, QNT_NONE, 192, 384)
    o = rt.attr(ctx, Q_OUTPUT_ATTR, 1)
    assert (o.name, o.fmt, list(o.dims[:4]), o.size) == (b"prod", NCHW, [1, 3, 8, 8], 384)


def test_int8_attrs(rt):
    ctx = rt.ctx(add_mul_model(dtype="int8", quant=((0.05, -3), (0.04, 5), (0.1, 0), (0.2, 7))))
    a = rt.attr(ctx, Q_INPUT_ATTR, 1)
    assert (a.type, a.qnt_type, a.zp, a.size) == (T_I8, QNT_AFFINE, 5, 192)
    assert a.scale == pytest.approx(0.04)
    o = rt.attr(ctx, Q_OUTPUT_ATTR, 1)
    assert (o.type, o.zp) == (T_I8, 7) and o.scale == pytest.approx(0.2)


@pytest.mark.parametrize("platform, dtype, c2, walign", [("rk3588", "float16", 8, 16), ("rk3588", "int8", 16, 16),
                                                         ("rk3566", "float16", 4, 8), ("rk3566", "int8", 8, 8),
                                                         ("rk3562", "int8", 16, 16)])
def test_native_attrs(rt, platform, dtype, c2, walign):
    x, y = FakeTensor("x", (1, 3, 4, 5), dtype), FakeTensor("y", (1, 10, 4, 5), dtype)
    z = FakeTensor("z", (1, 10, 4, 5), dtype)
    ctx = rt.ctx(fake_model_bytes([x, y], [FakeTensor("r", (1, 3, 4, 5), dtype), z],
                                  [fake_node("relu", ["x"], "r"), fake_node("neg", ["y"], "z")], platform=platform))
    e = 1 if dtype == "int8" else 2
    # 3-channel input: native NHWC with the width padded to the platform's alignment
    a = rt.attr(ctx, Q_NATIVE_INPUT_ATTR, 0)
    assert (a.fmt, list(a.dims[:4]), a.w_stride) == (NHWC, [1, 4, 5, 3], walign)
    assert (a.size, a.size_with_stride) == (60 * e, 4 * walign * 3 * e)
    # 10-channel input and every 4-D output: NC1HWC2
    c1 = -(-10 // c2)
    for cmd, index in ((Q_NATIVE_INPUT_ATTR, 1), (Q_NATIVE_OUTPUT_ATTR, 1)):
        a = rt.attr(ctx, cmd, index)
        assert (a.fmt, a.n_dims, list(a.dims[:5])) == (NC1HWC2, 5, [1, c1, 4, 5, c2])
        assert a.size == c1 * 20 * c2 * e
    a = rt.attr(ctx, Q_NATIVE_NHWC_OUTPUT_ATTR, 1)
    assert (a.fmt, list(a.dims[:4]), a.w_stride) == (NHWC, [1, 4, 5, 10], 5)


def test_sdk_version_custom_string_mem_size(rt, monkeypatch):
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.9.7")
    t = FakeTensor("x", (2, 6))
    ctx = rt.ctx(fake_model_bytes([t], [FakeTensor("y", (2, 6))],
                                  [fake_node("relu", ["x"], "h"), fake_node("neg", ["h"], "y")], custom_string="hi!"))
    v = rt.attr(ctx, Q_SDK_VERSION)
    assert v.api_version.startswith(b"2.9.7") and v.drv_version == b"0.9.8"
    assert rt.attr(ctx, Q_CUSTOM_STRING).string == b"hi!"
    ms = rt.attr(ctx, Q_MEM_SIZE)
    assert ms.total_internal_size == 24  # the float16 intermediate h: 12 elements
    assert ms.total_dma_allocated_size == 24 + 24 + 24
    assert rt.query(ctx, Q_DEVICE_MEM_INFO)[0] == FAIL


def test_collect_model_info_only(rt):
    ctx = rt.ctx(add_mul_model(), F_INFO_ONLY)
    assert rt.query(ctx, Q_MEM_SIZE)[0] == SUCC
    assert rt.query(ctx, Q_INPUT_ATTR)[0] == CTX
    assert rt.lib.rknn_run(ctx, None) == CTX


# ---------------------------------------------------------------------------------------------
# General I/O


def test_run_float16(rt):
    ctx = rt.ctx(add_mul_model())
    a, b = ab()
    s, p = rt.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])
    es = fp16(fp16(a) + fp16(b))
    np.testing.assert_array_equal(f32(s, (1, 3, 8, 8)), es)
    np.testing.assert_allclose(f32(p, (1, 3, 8, 8)), fp16(es * fp16(b)), rtol=1e-3)
    raw_s, _ = rt.run(ctx, [a, b], 2, want_float=False, fmts=[NCHW, NCHW])
    assert len(raw_s) == 192 * 2
    np.testing.assert_array_equal(np.frombuffer(raw_s, np.float16).reshape(1, 3, 8, 8), es.astype(np.float16))


def test_run_int8_quantizes_inputs_and_outputs(rt):
    q = ((0.05, -3), (0.04, 5), (0.1, 2), (0.2, -7))
    ctx = rt.ctx(add_mul_model(dtype="int8", quant=q))
    a, b = ab()
    qa = (quant(a, *q[0]).astype(np.float32) - q[0][1]) * q[0][0]
    qb = (quant(b, *q[1]).astype(np.float32) - q[1][1]) * q[1][0]
    s_raw, p_raw = rt.run(ctx, [a, b], 2, want_float=False, fmts=[NCHW, NCHW])
    np.testing.assert_array_equal(np.frombuffer(s_raw, np.int8).reshape(1, 3, 8, 8), quant(qa + qb, *q[2]))
    np.testing.assert_array_equal(np.frombuffer(p_raw, np.int8).reshape(1, 3, 8, 8), quant((qa + qb) * qb, *q[3]))
    s, _ = rt.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])
    np.testing.assert_allclose(f32(s, (1, 3, 8, 8)), (quant(qa + qb, *q[2]).astype(np.float32) - 2) * 0.1, atol=1e-6)


def test_input_types_and_formats(rt):
    ctx = rt.ctx(add_mul_model())
    a, b = ab()
    base = f32(rt.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])[0], (1, 3, 8, 8))
    # NHWC data (the model's presented layout) gives the same result
    nhwc = [np.ascontiguousarray(x.transpose(0, 2, 3, 1)) for x in (a, b)]
    np.testing.assert_array_equal(f32(rt.run(ctx, nhwc, 2, fmts=[NHWC, NHWC])[0], (1, 3, 8, 8)), base)
    np.testing.assert_array_equal(f32(rt.run(ctx, nhwc, 2, fmts=[UNDEFINED, UNDEFINED])[0], (1, 3, 8, 8)), base)
    # float16 and uint8 data
    np.testing.assert_array_equal(
        f32(rt.run(ctx, [a.astype(np.float16), b.astype(np.float16)], 2, fmts=[NCHW, NCHW])[0], (1, 3, 8, 8)), base)
    u = np.arange(192, dtype=np.uint8).reshape(1, 3, 8, 8)
    np.testing.assert_array_equal(f32(rt.run(ctx, [u, u], 2, fmts=[NCHW, NCHW])[0], (1, 3, 8, 8)),
                                  fp16(u.astype(np.float32) * 2))


def test_pass_through_uses_the_native_layout(rt):
    ctx = rt.ctx(add_mul_model())
    a, b = ab()
    native = rt.attr(ctx, Q_NATIVE_INPUT_ATTR, 0)
    assert native.w_stride == 16  # width 8 padded to 16 on rk3588

    def padded(x):  # NHWC float16 with rows padded to w_stride
        out = np.zeros((1, 8, 16, 3), np.float16)
        out[:, :, :8, :] = x.transpose(0, 2, 3, 1)
        return out

    out = rt.run(ctx, [padded(a), padded(b)], 2, fmts=[NHWC, NHWC], pass_through=[1, 1])
    np.testing.assert_array_equal(f32(out[0], (1, 3, 8, 8)), fp16(fp16(a) + fp16(b)))
    # pass_through data must be in the model's type and size
    assert rt.set_inputs(ctx, [a, b], fmts=[NCHW, NCHW], pass_through=[1, 1]) == PARAM
    assert rt.set_inputs(ctx, [a.astype(np.float16)] * 2, fmts=[NHWC, NHWC], pass_through=[1, 1]) == PARAM


def _nc1hwc2(x, c2):
    n, c, h, w = x.shape
    c1 = -(-c // c2)
    padded = np.zeros((n, c1 * c2, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, c1, c2, h, w).transpose(0, 1, 3, 4, 2))


def test_pass_through_nc1hwc2_input(rt):
    x = FakeTensor("x", (1, 10, 2, 3), "float16", layout="NCHW")
    ctx = rt.ctx(fake_model_bytes([x], [FakeTensor("y", (1, 10, 2, 3))], [fake_node("neg", ["x"], "y")]))
    v = np.arange(60, dtype=np.float32).reshape(1, 10, 2, 3)
    native = _nc1hwc2(v.astype(np.float16), 8)
    assert native.nbytes == rt.attr(ctx, Q_NATIVE_INPUT_ATTR, 0).size == 192
    out = rt.run(ctx, [native], 1, fmts=[NC1HWC2], pass_through=[1])
    np.testing.assert_array_equal(f32(out[0], (1, 10, 2, 3)), -v)
    assert rt.set_inputs(ctx, [native], fmts=[NC1HWC2]) == PARAM  # NC1HWC2 data needs pass_through


def test_inputs_set_errors_leave_the_context_usable(rt, log):
    ctx = rt.ctx(add_mul_model())
    a, b = ab()
    assert rt.set_inputs(ctx, [a]) == PARAM  # wrong count
    assert rt.set_inputs(ctx, [a, b[:, :2]]) == PARAM  # wrong size
    assert any("size = 512, expect 768" in m for m in log.messages("E"))
    assert rt.set_inputs(ctx, [a.astype(np.int8), b.astype(np.int8)]) == PARAM  # int8 data for a float16 model
    assert rt.set_inputs(ctx, [a, b], fmts=[NC1HWC2, NC1HWC2]) == PARAM
    ins = (Input * 2)()
    ins[0].index = ins[1].index = 0
    assert rt.lib.rknn_inputs_set(ctx, 2, ins) == PARAM  # repeated index
    assert rt.lib.rknn_run(ctx, None) == INPUT  # never set
    assert rt.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])


def test_outputs_get_and_release(rt, log):
    ctx = rt.ctx(add_mul_model())
    outs = (Output * 2)()
    outs[1].index = 1
    assert rt.lib.rknn_outputs_get(ctx, 2, outs, None) == OUTPUT  # no run yet
    a, b = ab()
    assert rt.set_inputs(ctx, [a, b], fmts=[NCHW, NCHW]) == SUCC and rt.lib.rknn_run(ctx, None) == SUCC
    outs[0].want_float = outs[1].want_float = 1
    outs[1].index = 2
    assert rt.lib.rknn_outputs_get(ctx, 2, outs, None) == PARAM  # index out of range
    outs[1].index = 1
    assert rt.lib.rknn_outputs_get(ctx, 2, outs, None) == SUCC
    assert outs[0].size == 768 and log.live("outputs") == 2  # the rt fixture leaves none behind
    kept = Output.from_buffer_copy(outs[0])
    assert rt.lib.rknn_outputs_release(ctx, 2, outs) == SUCC and log.live("outputs") == 0
    assert outs[0].buf is None
    assert rt.lib.rknn_outputs_release(ctx, 1, C.byref(kept)) == PARAM  # released twice
    # preallocated buffers: too small is refused; the right size is filled
    buf = (C.c_uint8 * 768)()
    pre = (Output * 1)()
    pre[0].want_float, pre[0].is_prealloc, pre[0].buf, pre[0].size = 1, 1, C.addressof(buf), 767
    assert rt.lib.rknn_outputs_get(ctx, 1, pre, None) == PARAM
    pre[0].size = 768
    assert rt.lib.rknn_outputs_get(ctx, 1, pre, None) == SUCC
    np.testing.assert_array_equal(np.frombuffer(bytes(buf), np.float32).reshape(1, 3, 8, 8), fp16(fp16(a) + fp16(b)))
    assert log.live("outputs") == 0 and rt.lib.rknn_outputs_release(ctx, 1, pre) == SUCC


def test_async_mode_returns_the_previous_frame(rt):
    ctx = rt.ctx(add_mul_model(), F_ASYNC)
    frames = []
    results = []
    for k in range(3):
        a = np.full((1, 3, 8, 8), k + 1, np.float32)
        assert rt.set_inputs(ctx, [a, np.zeros_like(a)], fmts=[NCHW, NCHW]) == SUCC
        ext = RunExtend()
        assert rt.lib.rknn_run(ctx, C.byref(ext)) == SUCC and ext.frame_id == k + 1
        results.append(f32(rt.get_outputs(ctx, 2, frame=frames)[0], (1, 3, 8, 8))[0, 0, 0, 0])
    # the first run gives its own outputs (no earlier frame), later ones the previous frame
    assert results == [1.0, 1.0, 2.0] and frames == [1, 1, 2]


# ---------------------------------------------------------------------------------------------
# Zero-copy


def _bind(rt, ctx, mem, attr):
    return rt.lib.rknn_set_io_mem(ctx, mem, C.byref(attr))


def _u8_model():
    x = FakeTensor("x", (1, 3, 4, 5), "int8", scale=1.0, zp=0)
    return fake_model_bytes([x], [FakeTensor("y", (1, 3, 4, 5), "int8", scale=1.0, zp=0)],
                            [fake_node("add", ["x"], "y", const=1)])


def test_zero_copy_uint8_nhwc_input_float_output(rt, log):
    ctx = rt.ctx(_u8_model())
    ia = rt.attr(ctx, Q_NATIVE_INPUT_ATTR, 0)
    ia.type, ia.fmt = T_U8, NHWC
    assert (ia.w_stride, ia.size_with_stride) == (16, 4 * 16 * 3)
    imem = rt.lib.rknn_create_mem(ctx, ia.size_with_stride)
    oa = rt.attr(ctx, Q_OUTPUT_ATTR, 0)
    oa.type = T_F32
    omem = rt.lib.rknn_create_mem(ctx, 60 * 4)
    assert _bind(rt, ctx, imem, ia) == SUCC and _bind(rt, ctx, omem, oa) == SUCC
    x = np.arange(60, dtype=np.uint8).reshape(1, 3, 4, 5) % 100
    staged = np.zeros((1, 4, 16, 3), np.uint8)
    staged[:, :, :5, :] = x.transpose(0, 2, 3, 1)
    C.memmove(imem.contents.virt_addr, staged.ctypes.data, staged.nbytes)
    assert rt.lib.rknn_run(ctx, None) == SUCC
    out = np.frombuffer(C.string_at(omem.contents.virt_addr, 240), np.float32).reshape(1, 3, 4, 5)
    np.testing.assert_array_equal(out, np.minimum(x.astype(np.float32), 127) + 1)
    assert log.live("mems") == 2
    assert rt.lib.rknn_destroy_mem(ctx, imem) == SUCC and rt.lib.rknn_destroy_mem(ctx, omem) == SUCC
    assert log.live("mems") == 0
    assert rt.lib.rknn_destroy_mem(ctx, imem) == PARAM
    assert rt.lib.rknn_run(ctx, None) == INPUT  # the bound memory is gone


def test_zero_copy_nhwc_strides_for_multi_batch_input(rt):
    x = FakeTensor("x", (2, 3, 2, 4), "int8", scale=1.0, zp=0)
    ctx = rt.ctx(fake_model_bytes([x], [FakeTensor("y", (2, 3, 2, 4), "int8", scale=1.0, zp=0)],
                                  [fake_node("add", ["x"], "y", const=1)], batch=2))
    ia = rt.attr(ctx, Q_NATIVE_INPUT_ATTR, 0)
    assert ia.w_stride == 16
    ia.h_stride = 3  # each batch image starts after 3 rows of w_stride pixels
    mem = rt.lib.rknn_create_mem(ctx, 2 * 3 * 16 * 3)
    assert _bind(rt, ctx, mem, ia) == SUCC
    v = np.arange(48, dtype=np.int8).reshape(2, 3, 2, 4)
    staged = np.full((2, 3, 16, 3), 99, np.int8)
    staged[:, :2, :4, :] = v.transpose(0, 2, 3, 1)
    C.memmove(mem.contents.virt_addr, staged.ctypes.data, staged.nbytes)
    assert rt.lib.rknn_run(ctx, None) == SUCC
    np.testing.assert_array_equal(np.frombuffer(rt.get_outputs(ctx, 1, want_float=False)[0], np.int8).reshape(v.shape),
                                  v + 1)
    ia.h_stride = 1  # smaller than the height
    assert _bind(rt, ctx, mem, ia) == PARAM


def test_zero_copy_native_nc1hwc2_output(rt):
    x = FakeTensor("x", (1, 10, 2, 3), "float16", layout="NCHW")
    ctx = rt.ctx(fake_model_bytes([x], [FakeTensor("y", (1, 10, 2, 3))], [fake_node("neg", ["x"], "y")]))
    oa = rt.attr(ctx, Q_NATIVE_OUTPUT_ATTR, 0)
    assert list(oa.dims[:5]) == [1, 2, 2, 3, 8]
    omem = rt.lib.rknn_create_mem(ctx, oa.size)
    assert _bind(rt, ctx, omem, oa) == SUCC
    v = np.arange(60, dtype=np.float32).reshape(1, 10, 2, 3)
    assert rt.set_inputs(ctx, [v], fmts=[NCHW]) == SUCC and rt.lib.rknn_run(ctx, None) == SUCC
    raw = np.frombuffer(C.string_at(omem.contents.virt_addr, oa.size), np.float16).reshape(1, 2, 2, 3, 8)
    np.testing.assert_array_equal(raw, _nc1hwc2(-v, 8).astype(np.float16))


def test_cache_coherency_needs_mem_sync_when_flush_is_disabled(rt):
    ctx = rt.ctx(_u8_model(), F_NO_FLUSH_IN | F_NO_FLUSH_OUT)
    ia = rt.attr(ctx, Q_INPUT_ATTR, 0)
    ia.type, ia.fmt = T_I8, NCHW
    oa = rt.attr(ctx, Q_OUTPUT_ATTR, 0)
    imem, omem = rt.lib.rknn_create_mem(ctx, 60), rt.lib.rknn_create_mem(ctx, 60)
    assert _bind(rt, ctx, imem, ia) == SUCC and _bind(rt, ctx, omem, oa) == SUCC
    C.memset(imem.contents.virt_addr, 5, 60)

    def out():
        return np.frombuffer(C.string_at(omem.contents.virt_addr, 60), np.int8)

    assert rt.lib.rknn_run(ctx, None) == SUCC
    assert (out() == 0).all()  # the CPU view of the output was not invalidated
    assert rt.lib.rknn_mem_sync(ctx, omem, SYNC_FROM) == SUCC
    assert (out() == 1).all()  # the device saw zeros: the input was not flushed
    assert rt.lib.rknn_mem_sync(ctx, imem, SYNC_TO) == SUCC
    assert rt.lib.rknn_run(ctx, None) == SUCC and rt.lib.rknn_mem_sync(ctx, omem, SYNC_FROM) == SUCC
    assert (out() == 6).all()
    assert rt.lib.rknn_mem_sync(ctx, omem, 7) == PARAM


def test_default_flags_flush_and_invalidate(rt):
    ctx = rt.ctx(_u8_model())
    ia = rt.attr(ctx, Q_INPUT_ATTR, 0)
    ia.type, ia.fmt = T_I8, NCHW
    imem, omem = rt.lib.rknn_create_mem(ctx, 60), rt.lib.rknn_create_mem(ctx, 60)
    assert _bind(rt, ctx, imem, ia) == SUCC and _bind(rt, ctx, omem, rt.attr(ctx, Q_OUTPUT_ATTR, 0)) == SUCC
    C.memset(imem.contents.virt_addr, 9, 60)
    assert rt.lib.rknn_run(ctx, None) == SUCC
    assert set(C.string_at(omem.contents.virt_addr, 60)) == {10}


def test_create_mem2_non_cacheable_and_without_context(rt):
    mem = rt.lib.rknn_create_mem2(0, 64, MEM_NO_CONTEXT | MEM_NON_CACHEABLE)
    assert mem and mem.contents.size == 64
    assert not rt.lib.rknn_create_mem2(0, 64, 0)  # no context, no ALLOC_NO_CONTEXT flag
    assert not rt.lib.rknn_create_mem2(0, 64, MEM_NO_CONTEXT | 3)  # cacheable and non-cacheable
    ctx = rt.ctx(_u8_model(), F_NO_FLUSH_IN | F_NO_FLUSH_OUT)
    ia = rt.attr(ctx, Q_INPUT_ATTR, 0)
    ia.type, ia.fmt = T_I8, NCHW
    omem = rt.lib.rknn_create_mem2(ctx, 60, MEM_NON_CACHEABLE)
    assert _bind(rt, ctx, mem, ia) == SUCC and _bind(rt, ctx, omem, rt.attr(ctx, Q_OUTPUT_ATTR, 0)) == SUCC
    C.memset(mem.contents.virt_addr, 3, 60)
    assert rt.lib.rknn_run(ctx, None) == SUCC
    assert set(C.string_at(omem.contents.virt_addr, 60)) == {4}  # coherent memory needs no sync
    assert rt.lib.rknn_destroy_mem(0, mem) == SUCC and rt.lib.rknn_destroy_mem(ctx, omem) == SUCC


def test_mem_from_fd_and_phys_use_the_callers_memory(rt):
    ctx = rt.ctx(_u8_model())
    backing = (C.c_int8 * 128)()
    for k in range(128):
        backing[k] = 2
    fd_mem = rt.lib.rknn_create_mem_from_fd(ctx, 42, C.addressof(backing), 128, 64)
    assert (fd_mem.contents.fd, fd_mem.contents.offset, fd_mem.contents.virt_addr) == (42, 64, C.addressof(backing))
    out = (C.c_int8 * 60)()
    ph = rt.lib.rknn_create_mem_from_phys(ctx, 0x40000000, C.addressof(out), 60)
    assert ph.contents.phys_addr == 0x40000000
    ia = rt.attr(ctx, Q_INPUT_ATTR, 0)
    ia.type, ia.fmt = T_I8, NCHW
    assert _bind(rt, ctx, fd_mem, ia) == SUCC and _bind(rt, ctx, ph, rt.attr(ctx, Q_OUTPUT_ATTR, 0)) == SUCC
    backing[64] = 7  # the tensor starts at virt_addr + offset
    assert rt.lib.rknn_run(ctx, None) == SUCC
    assert list(out)[:2] == [8, 3]
    assert not rt.lib.rknn_create_mem_from_fd(ctx, 3, None, 64, 0)
    assert not rt.lib.rknn_create_mem_from_phys(ctx, 0, C.addressof(out), 60)
    assert rt.lib.rknn_destroy_mem(ctx, fd_mem) == SUCC and rt.lib.rknn_destroy_mem(ctx, ph) == SUCC
    assert list(out)[:2] == [8, 3]  # the caller's memory outlives the tensor mem


def test_set_io_mem_errors(rt, log):
    ctx = rt.ctx(_u8_model())
    ia = rt.attr(ctx, Q_NATIVE_INPUT_ATTR, 0)
    small = rt.lib.rknn_create_mem(ctx, ia.size_with_stride - 1)
    assert _bind(rt, ctx, small, ia) == PARAM
    assert any("needs 192 bytes" in m for m in log.messages("E"))
    mem = rt.lib.rknn_create_mem(ctx, 1024)
    renamed = TensorAttr.from_buffer_copy(ia)
    renamed.name = b"nope"
    assert _bind(rt, ctx, mem, renamed) == PARAM
    wrong = TensorAttr.from_buffer_copy(ia)
    wrong.type = T_F16  # not accepted by an int8 model input
    assert _bind(rt, ctx, mem, wrong) == PARAM
    oa = rt.attr(ctx, Q_OUTPUT_ATTR, 0)
    oa.type = T_U8
    assert _bind(rt, ctx, mem, oa) == PARAM
    assert rt.lib.rknn_set_io_mem(ctx, mem, None) == PARAM
    assert rt.lib.rknn_set_io_mem(ctx, C.pointer(TensorMem()), C.byref(ia)) == PARAM
    assert rt.lib.rknn_create_mem(ctx, 0) is not None and not rt.lib.rknn_create_mem(ctx, 0)
    assert not rt.lib.rknn_create_mem(ctx + 99, 64)


# ---------------------------------------------------------------------------------------------
# Contexts, threads


def test_dup_context_shares_the_model_and_runs_in_threads(rt, log):
    ctx = rt.ctx(add_mul_model())
    dup = C.c_uint64(0)
    src = C.c_uint64(ctx)
    contexts, models = log.live("contexts"), log.live("models")
    assert rt.lib.rknn_dup_context(C.byref(src), C.byref(dup)) == SUCC and dup.value not in (0, ctx)
    assert log.live("contexts") == contexts + 1 and log.live("models") == models
    bad = C.c_uint64(ctx + 1000)
    assert rt.lib.rknn_dup_context(C.byref(bad), C.byref(C.c_uint64())) == CTX
    errors = []

    def work(c, seed):
        try:
            for k in range(30):
                a, b = ab(seed=seed * 100 + k)
                s = f32(rt.run(c, [a, b], 2, fmts=[NCHW, NCHW])[0], (1, 3, 8, 8))
                np.testing.assert_array_equal(s, fp16(fp16(a) + fp16(b)))
        except Exception as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(c, i)) for i, c in enumerate((ctx, dup.value))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert rt.lib.rknn_destroy(ctx) == SUCC and log.live("models") == models
    assert rt.run(dup.value, list(ab()), 2, fmts=[NCHW, NCHW])  # the model outlives the first context
    assert rt.lib.rknn_destroy(dup.value) == SUCC and log.live("models") == models - 1


def test_destroyed_context_is_invalid_everywhere(rt):
    ctx = rt.ctx(add_mul_model())
    assert rt.lib.rknn_destroy(ctx) == SUCC
    assert rt.query(ctx, Q_IN_OUT_NUM)[0] == CTX
    assert rt.set_inputs(ctx, list(ab())) == CTX
    assert rt.lib.rknn_run(ctx, None) == CTX
    assert rt.lib.rknn_outputs_get(ctx, 1, (Output * 1)(), None) == CTX
    assert rt.lib.rknn_set_core_mask(ctx, 1) == CTX
    assert rt.lib.rknn_set_batch_core_num(ctx, 1) == CTX
    assert not rt.lib.rknn_create_mem(ctx, 16)


# ---------------------------------------------------------------------------------------------
# Cores


VALID = {"rk3588": {0, 1, 2, 4, 3, 7, 0xFFFF}, "rk3576": {0, 1, 2, 3, 0xFFFF}}


@pytest.mark.parametrize("platform", ["rk3588", "rk3576", "rk3566", "rk3562"])
def test_core_mask_per_platform(rt, platform):
    ctx = rt.ctx(add_mul_model(platform=platform))
    for mask in (0, 1, 2, 4, 3, 7, 5, 6, 0xFFFF, 0x10000):
        ret = rt.lib.rknn_set_core_mask(ctx, mask)
        if platform not in VALID:
            assert ret == FAIL
        else:
            assert ret == (SUCC if mask in VALID[platform] else PARAM), (platform, hex(mask))
    cores = {"rk3588": 3, "rk3576": 2}.get(platform)
    if cores is None:
        assert rt.lib.rknn_set_batch_core_num(ctx, 1) == FAIL
    else:
        assert rt.lib.rknn_set_batch_core_num(ctx, cores) == SUCC
        assert rt.lib.rknn_set_batch_core_num(ctx, cores + 1) == PARAM
        assert rt.lib.rknn_set_batch_core_num(ctx, 0) == PARAM


def _perf(rt, ctx):
    ret, p = rt.query(ctx, Q_PERF_DETAIL)
    assert ret == SUCC
    assert p.data_len == len(p.perf_data or b"")
    return (p.perf_data or b"").decode()


def test_perf_detail_and_run(rt):
    plain = rt.ctx(add_mul_model())
    rt.run(plain, list(ab()), 2, fmts=[NCHW, NCHW])
    assert _perf(rt, plain) == ""  # needs RKNN_FLAG_COLLECT_PERF_MASK
    ctx = rt.ctx(add_mul_model(), F_PERF)
    assert _perf(rt, ctx) == ""  # nothing before the first run
    assert rt.attr(ctx, Q_PERF_RUN).run_duration == 0
    rt.run(ctx, list(ab()), 2, fmts=[NCHW, NCHW])
    text = _perf(rt, ctx)
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("ID"))
    for col in ("OpType", "DataType", "Target", "InputShape", "OutputShape", "Cycles(DDR/NPU/Total)", "Time(us)",
                "MacUsage(%)", "WorkLoad(0/1/2)", "RW(KB)", "FullName"):
        assert col in header
    rows = [ln.split() for ln in lines if ln[:1].isdigit()]
    assert [r[1] for r in rows] == ["InputOperator", "InputOperator", "add", "mul", "OutputOperator", "OutputOperator"]
    assert (rows[2][3], rows[2][4], rows[2][5], rows[2][-1]) == ("NPU", "(1,3,8,8),(1,3,8,8)", "(1,3,8,8)", "add:node0")
    assert any(ln.startswith("Total Operator Elapsed Per Frame Time(us):") for ln in lines)
    assert rt.attr(ctx, Q_PERF_RUN).run_duration >= 0


def test_core_mask_shows_in_the_perf_workload(rt):
    ctx = rt.ctx(add_mul_model(), F_PERF)
    rows = {}
    for mask in (0, 2, 7):
        assert rt.lib.rknn_set_core_mask(ctx, mask) == SUCC
        rt.run(ctx, list(ab()), 2, fmts=[NCHW, NCHW])
        rows[mask] = {r[1]: r for r in (ln.split() for ln in _perf(rt, ctx).splitlines() if ln[:1].isdigit())}
    assert "100.0%/0.0%/0.0%" in rows[0]["add"]
    assert "0.0%/100.0%/0.0%" in rows[2]["add"]
    assert "34.0%/33.0%/33.0%" in rows[7]["add"]  # Add is split across cores
    assert "100.0%/0.0%/0.0%" in rows[7]["mul"]  # Mul falls back to core 0


# ---------------------------------------------------------------------------------------------
# Dynamic shapes

DYN = [[[1, 3, 8, 8], [1, 3, 8, 8]], [[1, 3, 4, 6], [1, 3, 4, 6]]]


def _shapes(rt, ctx, shapes, fmt=NCHW):
    attrs = (TensorAttr * len(shapes))()
    for i, s in enumerate(shapes):
        attrs[i].index, attrs[i].n_dims, attrs[i].fmt = i, len(s), fmt
        attrs[i].dims[:len(s)] = s
    return rt.lib.rknn_set_input_shapes(ctx, len(shapes), attrs)


def test_static_model_has_no_dynamic_range(rt):
    ctx = rt.ctx(add_mul_model())
    assert rt.query(ctx, Q_INPUT_DYNAMIC_RANGE)[0] == MODEL
    assert _shapes(rt, ctx, [[1, 3, 8, 8]] * 2) == SUCC
    assert _shapes(rt, ctx, [[1, 3, 4, 4]] * 2) == PARAM


def test_dynamic_shapes(rt, log):
    ctx = rt.ctx(add_mul_model(dynamic_shapes=DYN))
    r = rt.attr(ctx, Q_INPUT_DYNAMIC_RANGE, 1)
    assert (r.index, r.shape_number, r.fmt, r.n_dims, r.name) == (1, 2, NHWC, 4, b"b")
    assert [list(r.dyn_range[s][:4]) for s in range(2)] == [[1, 8, 8, 3], [1, 4, 6, 3]]  # in the presented layout
    assert rt.query(ctx, Q_INPUT_DYNAMIC_RANGE, index=2)[0] == PARAM
    assert rt.query(ctx, Q_NATIVE_INPUT_ATTR)[0] == FAIL  # use CURRENT_NATIVE_* on dynamic models
    a, b = ab((1, 3, 4, 6))
    assert rt.set_inputs(ctx, [a, b], fmts=[NCHW, NCHW]) == PARAM  # the current shape is still set 0
    assert rt.lib.rknn_run(ctx, None) == INPUT  # set_input_shapes never called
    assert _shapes(rt, ctx, [[1, 4, 6, 3], [1, 3, 4, 6]][:1] * 2, fmt=NHWC) == SUCC
    assert list(rt.attr(ctx, Q_CURRENT_INPUT_ATTR, 0).dims[:4]) == [1, 4, 6, 3]
    assert list(rt.attr(ctx, Q_CURRENT_OUTPUT_ATTR, 1).dims[:4]) == [1, 3, 4, 6]
    assert list(rt.attr(ctx, Q_INPUT_ATTR, 0).dims[:4]) == [1, 8, 8, 3]  # the model attr does not change
    cn = rt.attr(ctx, Q_CURRENT_NATIVE_OUTPUT_ATTR, 0)
    assert (cn.fmt, list(cn.dims[:5])) == (NC1HWC2, [1, 1, 4, 6, 8])
    s, p = rt.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])
    np.testing.assert_array_equal(f32(s, (1, 3, 4, 6)), fp16(fp16(a) + fp16(b)))
    assert _shapes(rt, ctx, [[1, 3, 5, 5]] * 2) == PARAM  # not among the model's shapes
    assert _shapes(rt, ctx, [[1, 3, 8, 8]]) == PARAM  # one shape per input
    assert _shapes(rt, ctx, DYN[0]) == SUCC
    assert rt.lib.rknn_run(ctx, None) == INPUT  # inputs must be set again after a switch
    assert "dims=1x4x6x3" in log.calls("rknn_set_input_shapes")[0]


# ---------------------------------------------------------------------------------------------
# Custom operators


def _custom_model():
    t = FakeTensor("x", (1, 4))
    return fake_model_bytes([t], [FakeTensor("y", (1, 4))],
                            [fake_node("cstScale", ["x"], "h", attrs={"alpha": 2.5, "axis": [1, 3]}),
                             fake_node("relu", ["h"], "y")])


def _op(op_type, calls, rt, init_ret=0, compute_ret=0, target=1):
    def init(octx, ins, n_in, outs, n_out):
        calls.append(("init", n_in, n_out, ins[0].attr.name, outs[0].attr.n_elems))
        return init_ret

    def compute(octx, ins, n_in, outs, n_out):
        a = OpAttr()
        rt.lib.rknn_custom_op_get_op_attr(octx, b"alpha", C.byref(a))
        alpha = C.cast(a.data, C.POINTER(C.c_float))[0]
        ax = OpAttr()
        rt.lib.rknn_custom_op_get_op_attr(octx, b"axis", C.byref(ax))
        axis = [C.cast(ax.data, C.POINTER(C.c_int64))[k] for k in range(ax.n_elems)]
        missing = OpAttr()
        rt.lib.rknn_custom_op_get_op_attr(octx, b"nope", C.byref(missing))
        calls.append(("compute", alpha, a.dtype, axis, ax.dtype, missing.n_elems))
        x = C.cast(ins[0].mem.virt_addr, C.POINTER(C.c_float))
        y = C.cast(outs[0].mem.virt_addr, C.POINTER(C.c_float))
        for k in range(ins[0].attr.n_elems):
            y[k] = x[k] * alpha
        return compute_ret

    def destroy(octx):
        calls.append(("destroy",))
        return 0

    cbs = (OP_CB(init), OP_CB(compute), OP_DESTROY(destroy))
    op = CustomOp(version=1, target=target, op_type=op_type, init=cbs[0], compute=cbs[1], destroy=cbs[2])
    return op, cbs


def test_custom_op_runs_on_the_cpu(rt, log):
    ctx = rt.ctx(_custom_model())
    x = np.array([[1, -2, 3, -4]], np.float32)
    assert rt.set_inputs(ctx, [x]) == SUCC
    assert rt.lib.rknn_run(ctx, None) == MODEL  # cstScale is not registered
    assert any("cstScale" in m for m in log.messages("E"))
    calls = []
    op, keep = _op(b"cstScale", calls, rt)
    assert rt.lib.rknn_register_custom_ops(ctx, C.byref(op), 1) == SUCC
    assert calls == [("init", 1, 1, b"x", 4)]
    assert rt.lib.rknn_register_custom_ops(ctx, C.byref(op), 1) == PARAM  # registered twice
    assert rt.lib.rknn_run(ctx, None) == SUCC
    assert calls[1] == ("compute", 2.5, T_F32, [1, 3], 8, 0)
    y = f32(rt.get_outputs(ctx, 1)[0], (1, 4))
    np.testing.assert_array_equal(y, fp16(np.maximum(x * 2.5, 0)))
    assert rt.lib.rknn_destroy(ctx) == SUCC
    assert calls[-1] == ("destroy",)
    del keep


def test_custom_op_errors(rt):
    ctx = rt.ctx(_custom_model())
    calls = []
    gpu, k1 = _op(b"cstScale", calls, rt, target=2)
    assert rt.lib.rknn_register_custom_ops(ctx, C.byref(gpu), 1) == PARAM
    failing, k2 = _op(b"cstScale", calls, rt, init_ret=-3)
    assert rt.lib.rknn_register_custom_ops(ctx, C.byref(failing), 1) == -3
    assert rt.lib.rknn_register_custom_ops(ctx, None, 0) == PARAM
    bad_compute, k3 = _op(b"cstScale", calls, rt, compute_ret=5)
    assert rt.lib.rknn_register_custom_ops(ctx, C.byref(bad_compute), 1) == SUCC
    assert rt.set_inputs(ctx, [np.ones((1, 4), np.float32)]) == SUCC
    assert rt.lib.rknn_run(ctx, None) == FAIL
    assert rt.lib.rknn_destroy(ctx) == SUCC  # calls destroy: the callbacks must still be alive
    del k1, k2, k3


def test_custom_op_init_may_fall_back_to_the_builtin(rt):
    ctx = rt.ctx(add_mul_model())
    calls = []
    op, keep = _op(b"add", calls, rt, init_ret=-14)  # RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE
    assert rt.lib.rknn_register_custom_ops(ctx, C.byref(op), 1) == SUCC
    a, b = ab()
    s = f32(rt.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])[0], (1, 3, 8, 8))
    np.testing.assert_array_equal(s, fp16(fp16(a) + fp16(b)))
    assert [c[0] for c in calls] == ["init"]  # compute never called
    assert rt.lib.rknn_destroy(ctx) == SUCC and calls[-1] == ("destroy",)
    del keep


# ---------------------------------------------------------------------------------------------
# Call log, old runtime, vendor file


def test_call_log_records_order_and_arguments(rt, log):
    ctx = rt.ctx(add_mul_model(), F_PERF)
    rt.query(ctx, Q_INPUT_ATTR, index=1)
    rt.run(ctx, list(ab()), 2, fmts=[NCHW, NCHW])
    rt.lib.rknn_destroy(ctx)
    assert log.names() == ["rknn_init", "rknn_query", "rknn_inputs_set", "rknn_run", "rknn_outputs_get",
                           "rknn_outputs_release", "rknn_destroy"]
    calls = log.calls()
    assert f"rknn_init ctx={ctx} size=" in calls[0] and "flag=0x8" in calls[0] and calls[0].endswith("-> 0")
    assert f"ctx={ctx} cmd=1 size=376 index=1 -> 0" in calls[1]
    assert "in1=(index=1,size=768,type=0,fmt=0,pass=0)" in calls[2]
    assert "out0=(index=0,want_float=1,is_prealloc=0)" in calls[4]
    log.clear()
    assert log.text() == ""


def test_old_runtime_lacks_newer_symbols(fake_rknnrt_old, fake_rknnrt_old_log):
    lib = C.CDLL(str(fake_rknnrt_old))
    for name in ("rknn_set_core_mask", "rknn_set_input_shapes", "rknn_create_mem2"):
        assert not hasattr(lib, name), name
    old = RT(fake_rknnrt_old)
    assert old.init(add_mul_model())[0] == FAIL  # a 2.3.2 model on runtime 1.4.0
    ctx = old.ctx(add_mul_model(toolkit_version="1.4.0"))
    assert old.attr(ctx, Q_SDK_VERSION).api_version.startswith(b"1.4.0")
    a, b = ab()
    s = f32(old.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])[0], (1, 3, 8, 8))
    np.testing.assert_array_equal(s, fp16(fp16(a) + fp16(b)))
    assert fake_rknnrt_old_log.names()[-3:] == ["rknn_run", "rknn_outputs_get", "rknn_outputs_release"]


def test_vendor_add_mul_fixture(rt, vendor_fixtures):
    path = vendor_fixtures / "rknn" / "add_mul_fp16.rknn"
    ctx = rt.ctx(str(path))
    assert rt.attr(ctx, Q_INPUT_ATTR, 0).name == b"a"
    assert list(rt.attr(ctx, Q_INPUT_ATTR, 0).dims[:4]) == [1, 8, 8, 3]
    io = vendor_fixtures / "io"
    a, b = (np.load(io / f"add_mul_ab0_in{k}.npy").astype(np.float32) for k in range(2))
    s, p = rt.run(ctx, [a, b], 2, fmts=[NCHW, NCHW])
    for k, raw in enumerate((s, p)):
        sim = np.load(io / f"add_mul_fp16_ab0_sim_out{k}.npy")
        np.testing.assert_allclose(f32(raw, sim.shape), sim, atol=2e-2, rtol=1e-2)
    assert rt.init(str(vendor_fixtures / "rknn" / "add_mul_i8.rknn"))[0] == MODEL  # not executable by the fake
