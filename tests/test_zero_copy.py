"""Zero-copy I/O: ``Context.set_io_mem`` in the layouts the vendor allows, ``run_bound`` reading and
writing the bound memory (no copy of the bound data), clear errors, and the camera example."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rknnlite
from rknnlite import InputInvalidError, InvalidParamError, TensorFormat, TensorType
from rknnlite.runtime.context_io import ContextIo
from rknnlite.tensors import layout

REPO = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(11)
MEAN = np.array([10.0, 20.0, 30.0], np.float32).reshape(1, 3, 1, 1)
STD = np.array([2.0, 4.0, 8.0], np.float32).reshape(1, 3, 1, 1)
NHWC, NCHW, NC1HWC2, UNDEF = TensorFormat.NHWC, TensorFormat.NCHW, TensorFormat.NC1HWC2, TensorFormat.UNDEFINED


@pytest.fixture()
def ctx_of(context_models):
    opened = []

    def make(name, **kwargs):
        ctx = rknnlite.Context(context_models[name], **kwargs)
        opened.append(ctx)
        return ctx

    yield make
    for ctx in opened:
        ctx.close()


def bind(ctx, attr):
    mem = ctx.create_mem(attr.size_with_stride)
    ctx.set_io_mem(mem, attr)
    return mem


def image(shape=(1, 3, 8, 8)):
    return RNG.integers(0, 256, shape).astype(np.uint8)


def nhwc(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def quantize(x, scale, zp):
    return np.clip(np.rint(x / scale) + zp, -128, 127).astype(np.int8)


# -- inputs and outputs in every allowed layout ---------------------------------------------------


@pytest.mark.parametrize("model", ["conv_fp16", "conv_i8"])
def test_uint8_nhwc_frame_with_padded_rows_to_float32_output(ctx_of, model):
    ctx = ctx_of(model)
    in_attr = ctx.native_inputs[0].replace(type=TensorType.UINT8)
    assert in_attr.fmt == NHWC and in_attr.w_stride == 16 and in_attr.dims == (1, 8, 8, 3)  # width 8 padded to 16
    in_mem = bind(ctx, in_attr)
    out_attr = ctx.outputs[0].replace(type=TensorType.FLOAT32)  # an int8 model's output attr says INT8
    out_mem = bind(ctx, out_attr)
    frame = in_mem.view(in_attr)
    result = out_mem.array(np.float32, out_attr.dims)
    for _ in range(2):  # written AFTER binding, a new frame each time: the run sees it
        x = image()
        frame[...] = nhwc(x)
        ctx.run_bound()
        np.testing.assert_array_equal(result, ctx.run([x], data_format="nchw")[0])
    assert not in_mem.array(np.uint8, (8, 16, 3))[:, 8:].any()  # the row padding is not written


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_float_model_takes_raw_nhwc_input_dtypes(ctx_of, dtype):
    ctx = ctx_of("conv_fp16")
    attr = ctx.native_inputs[0].replace(type=rknnlite.tensors.attr.TYPE_OF_DTYPE[np.dtype(dtype).name])
    x = image().astype(dtype)
    bind(ctx, attr).view(attr)[...] = nhwc(x)
    out = bind(ctx, ctx.outputs[0].replace(type=TensorType.FLOAT32))  # a float16 model's output says FLOAT16
    ctx.run_bound()
    np.testing.assert_array_equal(out.array(np.float32, (1, 4, 8, 8)), ctx.run([x], data_format="nchw")[0])


def test_int8_model_pass_through_takes_quantized_nhwc(ctx_of):
    ctx = ctx_of("conv_i8")
    attr = ctx.native_inputs[0].replace(pass_through=True)
    assert attr.type == TensorType.INT8
    x = image()
    q = quantize((x.astype(np.float32) - MEAN) / STD, ctx.inputs[0].scale, ctx.inputs[0].zp)
    bind(ctx, attr).view(attr)[...] = nhwc(q)
    out = bind(ctx, ctx.outputs[0].replace(type=TensorType.FLOAT32))
    ctx.run_bound()
    np.testing.assert_array_equal(out.array(np.float32, (1, 4, 8, 8)), ctx.run([x], data_format="nchw")[0])


def test_int8_model_raw_int8_input_is_normalised_and_quantized(ctx_of):
    ctx = ctx_of("conv_i8")
    attr = ctx.native_inputs[0]  # INT8 NHWC, pass_through False: raw int8 values
    small = (image() // 2).astype(np.int8)
    bind(ctx, attr).view(attr)[...] = nhwc(small)
    out = bind(ctx, ctx.outputs[0].replace(type=TensorType.FLOAT32))
    ctx.run_bound()
    np.testing.assert_array_equal(out.array(np.float32, (1, 4, 8, 8)), ctx.run([small], data_format="nchw")[0])


def test_native_nc1hwc2_input_and_outputs(ctx_of):
    ctx = ctx_of("relu13")
    (native_in,), (native_out,) = ctx.native_inputs, ctx.native_outputs
    assert native_in.fmt == NC1HWC2 and native_in.dims == (1, 2, 2, 2, 8) and native_in.type == TensorType.FLOAT16
    x = RNG.standard_normal((1, 13, 2, 2)).astype(np.float32)
    bind(ctx, native_in).view(native_in)[...] = layout.nchw_to_nc1hwc2(x.astype(np.float16), 8)
    expected = np.maximum(x.astype(np.float16), 0)
    blocked = bind(ctx, native_out)
    ctx.run_bound()
    np.testing.assert_array_equal(blocked.view(native_out), layout.nchw_to_nc1hwc2(expected, 8))
    f16 = bind(ctx, ctx.outputs[0].replace(type=TensorType.FLOAT16))  # binding output 0 again replaces its memory
    f32_nhwc_attr = ctx.outputs[0].replace(fmt=NHWC, dims=(1, 2, 2, 13))
    ctx.run_bound()
    np.testing.assert_array_equal(f16.array(np.float16, (1, 13, 2, 2)), expected)
    blocked.array(np.uint8)[:] = 0
    f32_nhwc = bind(ctx, f32_nhwc_attr)
    ctx.run_bound()
    np.testing.assert_array_equal(f32_nhwc.array(np.float32, (1, 2, 2, 13)), nhwc(expected.astype(np.float32)))
    assert not blocked.array(np.uint8).any()  # no longer bound: not written


def test_int8_and_float16_outputs_match_want_float_false(ctx_of):
    for name, out_type, dtype in (("conv_i8", TensorType.INT8, np.int8), ("conv_fp16", TensorType.FLOAT16, np.float16)):
        ctx = ctx_of(name)
        x = image()
        in_attr = ctx.native_inputs[0].replace(type=TensorType.UINT8)
        bind(ctx, in_attr).view(in_attr)[...] = nhwc(x)
        raw = ctx.run([x], data_format="nchw", want_float=False)[0]
        for attr in (ctx.outputs[0].replace(type=out_type), ctx.native_outputs[0]):
            out = bind(ctx, attr)
            ctx.run_bound()
            got = out.view(attr)
            if attr.fmt == NC1HWC2:
                assert attr.type == out_type
                got = layout.nc1hwc2_to_nchw(np.ascontiguousarray(got), 4)
            assert got.dtype == dtype
            np.testing.assert_array_equal(got, raw)


def test_non_4d_and_non_float_tensors(ctx_of):
    ctx = ctx_of("int64_bool")
    i, m = ctx.inputs
    j, n = ctx.outputs
    assert (i.fmt, m.fmt) == (UNDEF, UNDEF)
    mi, mm, mj, mn = bind(ctx, i), bind(ctx, m), bind(ctx, j), bind(ctx, n)
    mi.view(i)[...] = np.arange(6).reshape(2, 3)
    mm.view(m)[...] = [True, False, False, True]
    ctx.run_bound()
    np.testing.assert_array_equal(mj.view(j), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(mn.view(n), [False, True, True, False])


def test_input_in_the_executors_dtype_is_read_in_place(ctx_of):
    ctx = ctx_of("add")  # float32 inputs, float32 execution
    a, b = (bind(ctx, attr) for attr in ctx.inputs)
    y = bind(ctx, ctx.outputs[0])
    seen = []
    run = ctx._backend.run

    def spy(feeds, **kwargs):
        seen.append(list(feeds))
        return run(feeds, **kwargs)

    ctx._backend.run = spy
    a.array(np.float32)[:] = [1, 2, 3, 4]
    b.array(np.float32)[:] = 10
    ctx.run_bound()
    assert y.array(np.float32).tolist() == [11, 12, 13, 14]
    feed_a, feed_b = seen[0]
    assert np.shares_memory(feed_a, a.array(np.float32)) and np.shares_memory(feed_b, b.array(np.float32))
    a.array(np.float32)[:] = 0  # written after binding and after a run
    ctx.run_bound()
    assert y.array(np.float32).tolist() == [10] * 4


def test_float32_output_is_written_by_the_run_itself(ctx_of):
    ctx = ctx_of("add")
    for attr in ctx.inputs:
        bind(ctx, attr).array(np.float32)[:] = 1
    y = bind(ctx, ctx.outputs[0])
    outs = []
    run = ctx._backend.run

    def spy(feeds, **kwargs):
        outs.append(kwargs.get("out"))
        return run(feeds, **kwargs)

    ctx._backend.run = spy
    ctx.run_bound()
    (target,) = outs[0]
    assert target is not None and np.shares_memory(target, y.array(np.float32))
    assert y.array(np.float32).tolist() == [2] * 4


def test_one_memory_for_several_tensors_at_offsets_and_in_place(ctx_of, tmp_path):
    ctx = ctx_of("relu13")
    (native,) = ctx.native_inputs
    mem = bind(ctx, native)
    ctx.set_io_mem(mem, ctx.native_outputs[0])  # in place: output over the input
    x = RNG.standard_normal((1, 13, 2, 2)).astype(np.float16)
    mem.view(native)[...] = layout.nchw_to_nc1hwc2(x, 8)
    ctx.run_bound()
    np.testing.assert_array_equal(layout.nc1hwc2_to_nchw(mem.view(native).copy(), 13), np.maximum(x, 0))
    if hasattr(os, "memfd_create"):  # a tensor at an offset of an fd's memory
        fd = os.memfd_create("zc")
        try:
            os.ftruncate(fd, 4096)
            ctx2 = ctx_of("add")
            a = ctx2.create_mem_from_fd(fd, 4096, offset=64)
            b = ctx2.create_mem_from_fd(fd, 4096, offset=128)
            y = ctx2.create_mem_from_fd(fd, 4096, offset=256)
            for mem2, attr in zip((a, b, y), ctx2.inputs + ctx2.outputs):
                ctx2.set_io_mem(mem2, attr)
            os.pwrite(fd, np.full(4, 2, np.float32).tobytes(), 64)
            os.pwrite(fd, np.full(4, 5, np.float32).tobytes(), 128)
            ctx2.run_bound()
            assert np.frombuffer(os.pread(fd, 16, 256), np.float32).tolist() == [7] * 4
        finally:
            os.close(fd)


def test_multi_batch_style_h_stride(ctx_of):
    ctx = ctx_of("conv_fp16")
    attr = ctx.native_inputs[0].replace(type=TensorType.UINT8, h_stride=10)
    assert attr.size_with_stride == 10 * 16 * 3
    x = image()
    bind(ctx, attr).view(attr)[...] = nhwc(x)
    out = bind(ctx, ctx.outputs[0].replace(type=TensorType.FLOAT32))
    ctx.run_bound()
    np.testing.assert_array_equal(out.array(np.float32, (1, 4, 8, 8)), ctx.run([x], data_format="nchw")[0])


# -- errors ----------------------------------------------------------------------------------------


def _cases():
    u8 = TensorType.UINT8
    return [
        ("conv_fp16", lambda c: c.inputs[0].replace(type=u8, fmt=TensorFormat.NCHW, dims=(1, 3, 8, 8)),
         r"input 0 \('x'\) cannot be bound as UINT8 NCHW "
         r"\[1, 3, 8, 8\]: format NCHW is not taken; zero-copy takes UINT8/FLOAT16/FLOAT32 NHWC \[1, 8, 8, 3\] "
         r"w_stride 16"),
        ("conv_fp16", lambda c: c.native_inputs[0].replace(type=TensorType.INT16), r"type INT16 is not taken"),
        ("conv_fp16", lambda c: c.native_inputs[0].replace(type=u8, w_stride=0), r"rows are 16 pixels apart"),
        ("conv_fp16", lambda c: c.native_inputs[0].replace(type=u8, w_stride=12), r"rows are 16 pixels apart"),
        ("conv_fp16", lambda c: c.native_inputs[0].replace(type=u8, dims=(1, 8, 8, 4)), r"dims must be \[1, 8, 8, 3\]"),
        ("conv_fp16", lambda c: c.native_inputs[0].replace(type=u8, h_stride=4), r"h_stride must be 0 or >= the "
         r"height 8"),
        ("conv_fp16", lambda c: c.native_inputs[0].replace(type=u8, pass_through=True), r"w_stride 16 pass_through: "
         r"type UINT8 is not taken \(here: FLOAT16/FLOAT32\)"),
        ("conv_i8", lambda c: c.native_inputs[0].replace(type=TensorType.FLOAT16), r"type FLOAT16 is not taken \(here: "
         r"INT8/UINT8/FLOAT32\)"),
        ("relu13", lambda c: c.native_inputs[0].replace(fmt=NHWC, dims=(1, 2, 2, 13), pass_through=True),
         r"pass_through=True is not taken in NHWC.*native FLOAT16 NC1HWC2 \[1, 2, 2, 2, 8\]"),
        ("relu13", lambda c: c.native_inputs[0].replace(type=TensorType.FLOAT32), r"type FLOAT32 is not taken"),
        ("conv_fp16", lambda c: c.native_outputs[0].replace(type=TensorType.FLOAT32), r"output 0 \('y'\) cannot be "
         r"bound as FLOAT32 NC1HWC2 .*type FLOAT32 is not taken in NC1HWC2 \(here: FLOAT16\)"),
        ("conv_fp16", lambda c: c.outputs[0].replace(type=TensorType.INT8), r"type INT8 is not taken in NCHW \(here: "
         r"FLOAT32/FLOAT16\)"),
        ("conv_i8", lambda c: c.outputs[0].replace(type=TensorType.FLOAT16), r"type FLOAT16 is not taken in NCHW "
         r"\(here: FLOAT32/INT8\)"),
        ("conv_fp16", lambda c: c.outputs[0].replace(pass_through=True), r"pass_through applies to inputs only"),
        ("conv_fp16", lambda c: c.outputs[0].replace(fmt=UNDEF), r"format UNDEFINED is not taken"),
        ("add", lambda c: c.inputs[0].replace(dims=(4,)), r"dims must be \[1, 4\]"),
        ("add", lambda c: c.inputs[0].replace(name="nope"), r"attr name 'nope' is no input or output of the model "
         r"\(input 0 'a', input 1 'b', output 0 'y'\)"),
        ("add", lambda c: c.inputs[0].replace(index=1), r"attr names input 'a', which has index 0, but its index is 1"),
    ]


@pytest.mark.parametrize("model, make, match", _cases())
def test_disallowed_bindings_say_what_is_allowed(ctx_of, model, make, match):
    ctx = ctx_of(model)
    attr = make(ctx)
    mem = ctx.create_mem(4096)
    with pytest.raises(InvalidParamError, match=match):
        ctx.set_io_mem(mem, attr)
    with pytest.raises(InvalidParamError, match="not bound"):  # nothing was bound by the failed call
        ctx.run_bound()


def test_memory_too_small_and_wrong_objects(ctx_of):
    ctx = ctx_of("conv_fp16")
    attr = ctx.native_inputs[0].replace(type=TensorType.UINT8)
    small = ctx.create_mem(attr.size_with_stride - 1)
    with pytest.raises(InvalidParamError, match=r"input 0 \('x'\) needs 384 bytes \(size_with_stride of UINT8 NHWC "
                                                r"\[1, 8, 8, 3\] w_stride 16\); the memory has 383"):
        ctx.set_io_mem(small, attr)
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("small")
        try:
            os.ftruncate(fd, 400)
            with pytest.raises(InvalidParamError, match=r"the memory has 300 \(size 400 - offset 100\)"):
                ctx.set_io_mem(ctx.create_mem_from_fd(fd, 400, offset=100), attr)
        finally:
            os.close(fd)
    with pytest.raises(InvalidParamError, match="takes a TensorMem"):
        ctx.set_io_mem(np.zeros(384, np.uint8), attr)
    with pytest.raises(InvalidParamError, match="takes a TensorAttr"):
        ctx.set_io_mem(small, {"index": 0})


def test_run_bound_names_unbound_tensors(ctx_of):
    ctx = ctx_of("add")
    with pytest.raises(InvalidParamError, match=r"not bound: input 0 \('a'\), input 1 \('b'\), output 0 \('y'\)"):
        ctx.run_bound()
    a, b = bind(ctx, ctx.inputs[0]), bind(ctx, ctx.inputs[1])
    with pytest.raises(InvalidParamError, match=r"not bound: output 0 \('y'\) \("):
        ctx.run_bound()
    y = bind(ctx, ctx.outputs[0])
    ctx.run_bound()
    b.destroy()  # destroying bound memory unbinds it
    with pytest.raises(InvalidParamError, match=r"not bound: input 1 \('b'\) \("):
        ctx.run_bound()
    bind(ctx, ctx.inputs[1]).array(np.float32)[:] = 1
    a.array(np.float32)[:] = 1
    ctx.run_bound()
    assert y.array(np.float32).tolist() == [2] * 4
    assert ctx.run([np.ones((1, 4), np.float32)] * 2)[0].tolist() == [[2] * 4]  # the copying API still works


def test_dynamic_shape_binding_follows_the_current_shapes(ctx_of):
    ctx = ctx_of("dyn_add")
    ctx.set_input_shapes([(1, 8), (1, 8)])
    a, b = bind(ctx, ctx.current_inputs[0]), bind(ctx, ctx.current_inputs[1])
    y = bind(ctx, ctx.current_outputs[0])
    a.array(np.float32)[:] = 1
    b.array(np.float32)[:] = np.arange(8)
    ctx.run_bound()
    assert y.array(np.float32).tolist() == list(range(1, 9))
    ctx.set_input_shapes([(1, 4), (1, 4)])  # the bound inputs still say (1, 8): the run goes back to that set
    ctx.run_bound()
    assert ctx.current_inputs[0].dims == (1, 8)
    with pytest.raises(InputInvalidError):
        ctx.run([np.ones((1, 5), np.float32)] * 2)


# -- the context's one I/O object ------------------------------------------------------------------


def test_the_backend_gets_the_io_object_not_the_context(ctx_of, monkeypatch):
    ctx = ctx_of("add")
    given = []
    make = type(ctx._backend).zero_copy

    def spy(backend, io):
        given.append(io)
        return make(backend, io)

    monkeypatch.setattr(type(ctx._backend), "zero_copy", spy)
    bind(ctx, ctx.inputs[0])
    (io,) = given
    assert io is not ctx and isinstance(io, ContextIo)
    assert io.inputs == ctx.inputs and io.outputs == ctx.outputs and io.lock is ctx._lock
    assert io.native(True, False) == ctx.native_inputs and io.live("rknn_run") is ctx._backend
    ctx.close()
    with pytest.raises(rknnlite.ContextInvalidError, match="closed"):
        io.live("rknn_run")


@pytest.mark.parametrize("model, shapes", [("add", None), ("dyn_add", [(1, 8), (1, 8)])])
def test_run_and_run_bound_share_one_run_step(ctx_of, monkeypatch, model, shapes):
    ctx = ctx_of(model)
    if shapes:
        ctx.set_input_shapes(shapes)
    steps = []
    step = rknnlite.Context._execute

    def spy(self, backend, feeds, passes=None, out=None):
        steps.append([x.shape for x in feeds])
        return step(self, backend, feeds, passes, out)

    monkeypatch.setattr(rknnlite.Context, "_execute", spy)
    xs = [np.full(a.dims, k + 1, np.float32) for k, a in enumerate(ctx.current_inputs)]
    for attr, x in zip(ctx.current_inputs, xs):
        bind(ctx, attr).array(np.float32)[:] = x.ravel()
    y = bind(ctx, ctx.current_outputs[0])
    ctx.run_bound()
    expected = ctx.run(xs)[0]
    assert steps == [[x.shape for x in xs]] * 2
    np.testing.assert_array_equal(y.array(np.float32, expected.shape), expected)


# -- the README's camera example ---------------------------------------------------------------------


def test_camera_example_runs():
    pytest.importorskip("onnx")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for extra in ([], ["--no-flush"]):
        done = subprocess.run([sys.executable, str(REPO / "examples" / "zero_copy_camera.py"), "--frames", "3", *extra],
                              capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert [line.split(":")[0] for line in lines] == ["frame 0", "frame 1", "frame 2"]
        assert all("[1, 8, 480, 640]" in line for line in lines)
