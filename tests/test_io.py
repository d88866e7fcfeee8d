"""General I/O of Context.run: list or dict inputs, the vendor's accepted dtypes, normalisation
and quantization, pass-through (native layouts included), want_float, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import InputInvalidError, InvalidParamError, TensorFormat
from rknnlite.tensors import layout

RNG = np.random.default_rng(3)
# the conv models' image input is NHWC (1, 8, 8, 3), as librknnrt reports it: data and mean/std in NHWC
MEAN = np.array([10.0, 20.0, 30.0], np.float32).reshape(1, 1, 1, 3)
STD = np.array([2.0, 4.0, 8.0], np.float32).reshape(1, 1, 1, 3)


@pytest.fixture()
def ctx_of(context_models):
    opened = []

    def make(name):
        ctx = rknnlite.Context(context_models[name])
        opened.append(ctx)
        return ctx

    yield make
    for ctx in opened:
        ctx.close()


def image(shape=(1, 8, 8, 3)):
    return RNG.integers(0, 256, shape).astype(np.uint8)


def quantize(x, scale, zp):
    return np.clip(np.rint(x / scale) + zp, -128, 127).astype(np.int8)


def test_dict_inputs_by_name(ctx_of):
    ctx = ctx_of("add")
    a, b = RNG.random((1, 4), np.float32), RNG.random((1, 4), np.float32)
    np.testing.assert_array_equal(ctx.run({"b": b, "a": a})[0], a + b)
    np.testing.assert_array_equal(ctx.run([a, b])[0], a + b)


@pytest.mark.parametrize("feeds, match", [
    ({"a": 1, "b": 2, "c": 3}, r"unknown input name\(s\) 'c'; the model's inputs are 'a', 'b'"),
    ({"a": 1}, r"missing 'b'; the model's inputs are 'a', 'b'"),
    ({"x": 1, "a": 2}, r"unknown input name\(s\) 'x'; missing 'b'"),
])
def test_bad_names_are_listed(ctx_of, feeds, match):
    ctx = ctx_of("add")
    with pytest.raises(InputInvalidError, match=match):
        ctx.run(feeds)
    assert ctx.run([np.ones((1, 4), np.float32)] * 2)[0].tolist() == [[2, 2, 2, 2]]


def test_float_model_takes_uint8_float16_float32_and_numpys_float64(ctx_of):
    ctx = ctx_of("conv_fp16")
    x = image()
    ref = ctx.run([x.astype(np.float32)])[0]
    np.testing.assert_array_equal(ctx.run([x])[0], ref)
    np.testing.assert_array_equal(ctx.run([x.astype(np.float16)])[0], ref)
    np.testing.assert_array_equal(ctx.run([x.astype(np.float64)])[0], ref)
    for bad in (np.int8, np.int32):
        with pytest.raises(InputInvalidError, match=rf"input 0 \('x'\) has dtype {np.dtype(bad)}; this float "
                                                     r"input takes uint8, float16, float32 or float64"):
            ctx.run([x.astype(bad)])


def test_int8_model_takes_int8_uint8_float32_and_quantizes_with_the_input_params(ctx_of):
    ctx = ctx_of("conv_i8")
    (attr,) = ctx.inputs
    assert (attr.type.name, attr.zp, attr.scale) == ("INT8", -5, 0.02)
    x = image()
    ref = ctx.run([x])[0]
    np.testing.assert_array_equal(ctx.run([x.astype(np.float32)])[0], ref)
    small = (x // 2).astype(np.int8)
    np.testing.assert_array_equal(ctx.run([small])[0], ctx.run([small.astype(np.float32)])[0])
    # the runtime normalises then quantizes with the input's scale/zp: passing that through gives the same
    q = quantize((x.astype(np.float32) - MEAN) / STD, attr.scale, attr.zp)
    np.testing.assert_array_equal(ctx.run([q], pass_through=True)[0], ref)
    with pytest.raises(InputInvalidError, match=r"int8-quantized \(scale 0.02, zero point -5\) input takes int8, "
                                                r"uint8 or float32"):
        ctx.run([x.astype(np.float16)])


def test_quantization_saturates_like_the_npu(ctx_of):
    ctx = ctx_of("conv_i8")
    huge = np.full((1, 8, 8, 3), 1e6, np.float32)
    clipped = np.full((1, 8, 8, 3), 127, np.int8)
    np.testing.assert_array_equal(ctx.run([huge])[0], ctx.run([clipped], pass_through=True)[0])


def test_want_float_false(ctx_of):
    ctx = ctx_of("conv_i8")
    x = image()
    real = ctx.run([x])[0]
    raw = ctx.run([x], want_float=False)[0]
    (out,) = ctx.outputs
    assert raw.dtype == np.int8 and raw.shape == real.shape
    np.testing.assert_array_equal(raw, quantize(real, out.scale, out.zp))
    np.testing.assert_allclose((raw.astype(np.float32) - out.zp) * out.scale, real, atol=1e-6)
    fp = ctx_of("conv_fp16")
    half = fp.run([x], want_float=False)[0]
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, fp.run([x])[0].astype(np.float16))
    assert ctx.run([x], want_float=0)[0].dtype == np.int8 and ctx.run([x], want_float=1)[0].dtype == np.float32


@pytest.mark.parametrize("options, message", [
    # each read as true before: float outputs for want_float="no", the input passed through for "no"
    (dict(want_float="no"), "rknn_run: want_float must be True/False (or 1/0), not 'no'"),
    (dict(want_float=None), "want_float must be True/False (or 1/0), not None"),
    (dict(pass_through="no"), "rknn_inputs_set: pass_through must be True/False (or 1/0), not 'no'"),
    (dict(pass_through=[2]), "pass_through must be True/False (or 1/0), not 2"),
])
def test_yes_no_options_take_only_booleans(ctx_of, options, message):
    ctx = ctx_of("conv_i8")
    with pytest.raises(InvalidParamError) as e:
        ctx.run([image()], **options)
    assert message in str(e.value)
    assert ctx.run([image()], pass_through=[0])[0].dtype == np.float32  # Lite2's 0/1 list still works


def test_input_dtypes_name_what_run_takes(ctx_of):
    assert ctx_of("conv_i8").input_dtypes == [(np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.float32))]
    assert ctx_of("conv_fp16").input_dtypes == [tuple(np.dtype(t) for t in (np.uint8, np.float16, np.float32,
                                                                            np.float64))]
    assert ctx_of("int64_bool").input_dtypes == [(np.dtype(np.int64),), (np.dtype(np.bool_),)]


def test_non_float_inputs_take_their_own_dtype(ctx_of):
    ctx = ctx_of("int64_bool")
    i, m = np.arange(6, dtype=np.int64).reshape(2, 3), np.array([True, False, True, False])
    j, n = ctx.run([i, m])
    assert j.dtype == np.int64 and n.dtype == np.bool_
    np.testing.assert_array_equal(j, i)
    np.testing.assert_array_equal(n, ~m)
    with pytest.raises(InputInvalidError, match=r"input 0 \('i'\) has dtype int32; this int64 input takes int64"):
        ctx.run([i.astype(np.int32), m])
    with pytest.raises(InputInvalidError, match=r"input 1 \('m'\) has dtype uint8; this bool input takes bool"):
        ctx.run([i, m.astype(np.uint8)])


def test_pass_through_skips_normalisation_of_a_float_model(ctx_of):
    ctx = ctx_of("conv_fp16")
    x = image()
    normalised = (x.astype(np.float32) - MEAN) / STD
    np.testing.assert_array_equal(ctx.run([normalised], pass_through=[True])[0], ctx.run([x])[0])
    with pytest.raises(InputInvalidError, match="passed through.*float16 or float32; got uint8"):
        ctx.run([x], pass_through=True)


def test_pass_through_takes_the_native_nc1hwc2_layout(ctx_of):
    ctx = ctx_of("relu13")
    (native,) = ctx.native_inputs
    assert native.fmt == TensorFormat.NC1HWC2 and native.dims == (1, 2, 2, 2, 8)
    x = RNG.standard_normal((1, 13, 2, 2)).astype(np.float32)
    blocked = layout.nchw_to_nc1hwc2(x.astype(np.float16), 8)
    np.testing.assert_array_equal(ctx.run([blocked], pass_through=True)[0], np.maximum(x.astype(np.float16), 0))
    with pytest.raises(InputInvalidError, match=r"native shape \[1, 2, 2, 2, 8\] \(N, C1, H, W, C2\); got shape "
                                                r"\[1, 13, 2, 2\]"):
        ctx.run([x], pass_through=True)
    np.testing.assert_array_equal(ctx.run([x])[0], np.maximum(x, 0))


def test_pass_through_takes_rows_padded_to_w_stride(ctx_of):
    ctx = ctx_of("conv_i8")
    (native,) = ctx.native_inputs
    assert native.fmt == TensorFormat.NHWC and native.w_stride == 16
    q = RNG.integers(-128, 128, (1, 3, 8, 8)).astype(np.int8)
    nhwc = np.ascontiguousarray(q.transpose(0, 2, 3, 1))
    padded = layout.pad_width(nhwc, native.w_stride)
    expected = ctx.run([q], pass_through=True, data_format="nchw")[0]
    np.testing.assert_array_equal(ctx.run([padded], pass_through=True)[0], expected)
    np.testing.assert_array_equal(ctx.run([nhwc], pass_through=True)[0], expected)


@pytest.mark.parametrize("feeds, kwargs, match", [
    ([image()] * 2, {}, r"the model has 1 input\(s\) \(x\), got 2"),
    ([image((1, 3, 8, 9))], {}, r"input 0 \('x'\) has shape \[1, 3, 8, 9\], which does not fit the input with "
                                r"data_format=None .*: expected NHWC \[1, 8, 8, 3\]"),
    ([image()], {"data_format": "nchw"}, r"has shape \[1, 8, 8, 3\].*the data fits as NHWC: pass data_format='nhwc'"),
    ([image((1, 8, 3, 8))], {"data_format": "nhwc"}, r"has shape \[1, 8, 3, 8\].*expected NHWC \[1, 8, 8, 3\]"),
    ([image()], {"data_format": "ncwh"}, r"data_format for input 0 \('x'\) must be None, 'nchw' or 'nhwc'"),
    ([image().astype(np.float32)], {"pass_through": True}, r"must already be int8-quantized .* dtype int8"),
    ([image().tolist()], {}, r"input 0 \('x'\) must be a numpy array, not list"),
    (image().astype(np.float32)[0], {},
     r"needs a 4-D array \(NHWC \[1, 8, 8, 3\]\); got a 3-D array of shape \[8, 8, 3\]"),
])
def test_errors_name_the_input_and_leave_the_context_usable(ctx_of, feeds, kwargs, match):
    ctx = ctx_of("conv_i8")
    x = image()
    before = ctx.run([x])[0]
    with pytest.raises(InputInvalidError, match=match):
        ctx.run(feeds, **kwargs)
    np.testing.assert_array_equal(ctx.run([x])[0], before)


def test_results_do_not_alias_inputs_or_each_other(ctx_of):
    ctx = ctx_of("add")
    a, b = np.ones((1, 4), np.float32), np.ones((1, 4), np.float32)
    first = ctx.run([a, b])[0]
    second = ctx.run([a * 3, b])[0]
    assert not np.shares_memory(first, second) and not np.shares_memory(first, a)
    assert first.tolist() == [[2] * 4] and second.tolist() == [[4] * 4]
