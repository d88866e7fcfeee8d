"""Tensor layouts (rknnlite.tensors.layout): platform rules, native layouts, sizes and the
NCHW / NHWC <-> NC1HWC2 and row-padding conversions."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite.constants import TensorFormat, TensorType
from rknnlite.errors import InvalidParamError
from rknnlite.tensors import layout as L

DTYPES = ["int8", "uint8", "float16", "int16", "float32", "int32", "int64", "float64", "bool"]


def _random(shape, dtype, rng):
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(-100, 100, size=shape).astype(dtype)


# ---------------------------------------------------------------- numpy references (pad + reshape + transpose)


def ref_nchw_to_nc1hwc2(x, c2):
    n, c, h, w = x.shape
    c1 = -(-c // c2)
    padded = np.zeros((n, c1 * c2, h, w), x.dtype)
    padded[:, :c] = x
    return padded.reshape(n, c1, c2, h, w).transpose(0, 1, 3, 4, 2).copy()


def ref_nc1hwc2_to_nchw(y, channels):
    n, c1, h, w, c2 = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c2, h, w)[:, :channels].copy()


def ref_nhwc_to_nc1hwc2(x, c2):
    return ref_nchw_to_nc1hwc2(x.transpose(0, 3, 1, 2), c2)


def ref_nc1hwc2_to_nhwc(y, channels):
    return ref_nc1hwc2_to_nchw(y, channels).transpose(0, 2, 3, 1).copy()


# ---------------------------------------------------------------- the SDK guide's worked examples


def test_guide_example_13x4x4_int8_rk3568():
    """(1, 13, 4, 4) int8 on RK3568 -> (1, 2, 4, 4, 8); block 2 holds 5 real lanes and 3 of padding."""
    c2 = L.c2_for("rk3568", TensorType.INT8)
    assert c2 == 8
    x = np.arange(13 * 16, dtype=np.int16).reshape(1, 13, 4, 4).astype(np.int8)
    y = L.nchw_to_nc1hwc2(x, c2)
    assert y.shape == (1, 2, 4, 4, 8) and y.dtype == np.int8
    # Memory order low -> high: C2, W, H, C1, N.
    flat = y.reshape(-1)
    for c in range(13):
        for h in range(4):
            for w in range(4):
                addr = (((c // 8) * 4 + h) * 4 + w) * 8 + c % 8
                assert flat[addr] == x[0, c, h, w]
    assert not y[0, 1, :, :, 5:].any()  # the 3 alignment lanes of block 2 are zero
    np.testing.assert_array_equal(L.nc1hwc2_to_nchw(y, 13), x)


def test_guide_example_13x2x2_to_nchw_and_nhwc_ignores_padding():
    """(1, 13, 2, 2) on RK3568 is (1, 2, 2, 2, 8); converting back drops the padding lanes
    whatever they hold (NCHW (1, 13, 2, 2) and NHWC (1, 2, 2, 13))."""
    y = np.full((1, 2, 2, 2, 8), 99, np.int8)  # 99 marks the red padding cells
    for c in range(13):  # fill the valid lanes in NCHW order: element value = c * 4 + h * 2 + w
        for h in range(2):
            for w in range(2):
                y[0, c // 8, h, w, c % 8] = c * 4 + h * 2 + w
    nchw = L.nc1hwc2_to_nchw(y, 13)
    assert nchw.shape == (1, 13, 2, 2)
    np.testing.assert_array_equal(nchw.reshape(-1), np.arange(52, dtype=np.int8))
    nhwc = L.nc1hwc2_to_nhwc(y, 13)
    assert nhwc.shape == (1, 2, 2, 13)
    for h in range(2):
        for w in range(2):
            np.testing.assert_array_equal(nhwc[0, h, w], np.arange(13) * 4 + h * 2 + w)
    assert 99 not in nchw and 99 not in nhwc


def test_facts_example_nhwc_32_channels_rk3566():
    """1x1x1x32 NHWC int8 on RK3566 -> 1x4x1x1x8."""
    x = np.arange(32, dtype=np.int8).reshape(1, 1, 1, 32)
    y = L.nhwc_to_nc1hwc2(x, L.c2_for("rk3566", TensorType.INT8))
    assert y.shape == (1, 4, 1, 1, 8)
    np.testing.assert_array_equal(y.reshape(-1), np.arange(32, dtype=np.int8))


# ---------------------------------------------------------------- conversions against the reference


@pytest.fixture(params=[True, False], ids=["wide", "narrow"])
def kernel_width(request):
    """Runs a test with the 64-byte (AVX-512 VBMI) kernels on where the CPU has them, and
    with the 16-byte ones; restores the default (on) afterwards."""
    from rknnlite._native import layout_kernels as K

    state = K.set_wide(request.param)
    yield state
    K.set_wide(True)


SHAPES = [(1, 13, 4, 4), (2, 5, 3, 1), (1, 32, 7, 9), (3, 17, 1, 40), (1, 64, 16, 33), (2, 1, 5, 5), (1, 8, 1, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c2", [1, 2, 3, 4, 8, 16])
def test_conversions_match_numpy_reference(dtype, c2, kernel_width):
    rng = np.random.default_rng(c2)
    for shape in SHAPES:
        x = _random(shape, dtype, rng)
        c = shape[1]
        blocked = L.nchw_to_nc1hwc2(x, c2)
        np.testing.assert_array_equal(blocked, ref_nchw_to_nc1hwc2(x, c2))
        np.testing.assert_array_equal(L.nc1hwc2_to_nchw(blocked, c), x)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        blocked2 = L.nhwc_to_nc1hwc2(nhwc, c2)
        np.testing.assert_array_equal(blocked2, blocked)
        np.testing.assert_array_equal(L.nc1hwc2_to_nhwc(blocked2, c), nhwc)


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "int64"])
def test_large_shapes_use_every_code_path(dtype, kernel_width):
    """Rows longer than the vector width and the staging chunks, with odd tails, full and
    partial channel blocks, N > 1, and channel planes a multiple of 4 KB apart (with the
    16-byte kernels the full blocks then go through the staging buffer)."""
    rng = np.random.default_rng(7)
    for shape, c2 in [((2, 40, 16, 64), 16), ((1, 21, 33, 67), 8), ((2, 19, 1, 1031), 4), ((1, 16, 64, 64), 16),
                      ((1, 9, 300, 3), 2), ((2, 16, 64, 64), 8), ((2, 13, 32, 128), 8), ((1, 40, 64, 96), 16)]:
        x = _random(shape, dtype, rng)
        blocked = L.nchw_to_nc1hwc2(x, c2)
        np.testing.assert_array_equal(blocked, ref_nchw_to_nc1hwc2(x, c2))
        np.testing.assert_array_equal(L.nc1hwc2_to_nchw(blocked, shape[1]), x)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(L.nhwc_to_nc1hwc2(nhwc, c2), blocked)
        np.testing.assert_array_equal(L.nc1hwc2_to_nhwc(blocked, shape[1]), nhwc)


@pytest.mark.parametrize("dtype,c2", [("int8", 16), ("float16", 8), ("float32", 4), ("int64", 2),
                                      ("int8", 8), ("float16", 4), ("int16", 8)])
def test_nhwc_block_groups_and_partial_last_block(dtype, c2, kernel_width):
    """NHWC <-> NC1HWC2 with 16- or 8-byte blocks: groups of 4 full blocks over 4 pixels at
    a time (with 1..3 pixels left), single full blocks after them, and a last block with
    fewer than C2 channels moved as whole runs that read (and, on the way out, write) the
    next pixel's first bytes, except for the tensor's last pixel; N > 1 so batches meet."""
    rng = np.random.default_rng(c2)
    for n, c, h, w in [(2, 5 * c2 + 3, 7, 9), (3, 4 * c2 + 1, 1, 6), (1, 2 * c2 - 1, 5, 5), (2, c2 + 1, 1, 1),
                       (1, 4 * c2, 3, 5), (2, 6 * c2 + c2 - 1, 2, 3)]:
        x = _random((n, c, h, w), dtype, rng)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        blocked = L.nhwc_to_nc1hwc2(nhwc, c2)
        np.testing.assert_array_equal(blocked, ref_nchw_to_nc1hwc2(x, c2))
        garbage = blocked.copy()
        garbage.reshape(n, -1, h * w, c2)[:, -1, :, c % c2 or c2:] = 77  # padding lanes must not leak out
        out = np.full_like(nhwc, 55)
        np.testing.assert_array_equal(L.nc1hwc2_to_nhwc(garbage, c, out=out), nhwc)


def test_set_wide_reports_the_kernels_in_use():
    from rknnlite._native import layout_kernels as K

    try:
        assert K.set_wide(False) is False
        assert K.set_wide(True) in (True, False)
    finally:
        K.set_wide(True)


@pytest.mark.parametrize("seed", range(6))
def test_random_round_trips(seed, kernel_width):
    rng = np.random.default_rng(100 + seed)
    for _ in range(20):
        dtype = DTYPES[rng.integers(len(DTYPES))]
        c2 = int(rng.choice([1, 2, 4, 5, 8, 16, 32]))
        shape = tuple(int(v) for v in (rng.integers(1, 4), rng.integers(1, 40), rng.integers(1, 12),
                                       rng.integers(1, 50)))
        x = _random(shape, dtype, rng)
        blocked = L.nchw_to_nc1hwc2(x, c2)
        assert blocked.shape == (shape[0], -(-shape[1] // c2), shape[2], shape[3], c2)
        np.testing.assert_array_equal(L.nc1hwc2_to_nchw(blocked, shape[1]), x)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(L.nc1hwc2_to_nhwc(L.nhwc_to_nc1hwc2(nhwc, c2), shape[1]), nhwc)


def test_padding_lanes_are_zeroed_even_in_a_reused_out():
    x = np.ones((1, 13, 3, 5), np.float16)
    out = np.full((1, 2, 3, 5, 8), 7, np.float16)
    L.nchw_to_nc1hwc2(x, 8, out=out)
    assert not out[..., 1, :, :, 5:].any() and (out[0, 1, :, :, :5] == 1).all()
    out[...] = 7
    L.nhwc_to_nc1hwc2(np.ones((1, 3, 5, 13), np.float16), 8, out=out)
    assert not out[0, 1, :, :, 5:].any() and (out[0, 0] == 1).all()


def test_padding_lanes_are_ignored_on_the_way_out():
    rng = np.random.default_rng(3)
    x = _random((2, 13, 6, 19), "int8", rng)
    blocked = L.nchw_to_nc1hwc2(x, 16)
    blocked[:, -1, :, :, 13:] = 55
    np.testing.assert_array_equal(L.nc1hwc2_to_nchw(blocked, 13), x)
    np.testing.assert_array_equal(L.nc1hwc2_to_nhwc(blocked, 13), x.transpose(0, 2, 3, 1))


def test_non_contiguous_input_is_accepted_and_not_modified():
    rng = np.random.default_rng(5)
    base = _random((1, 20, 8, 24), "int8", rng)
    before = base.copy()
    x = base[:, ::2, :, ::2]  # a strided view
    expect = ref_nchw_to_nc1hwc2(np.ascontiguousarray(x), 8)
    np.testing.assert_array_equal(L.nchw_to_nc1hwc2(x, 8), expect)
    np.testing.assert_array_equal(L.nhwc_to_nc1hwc2(x.transpose(0, 2, 3, 1), 8), expect)
    big = np.zeros((1, 2, 8, 24, 8), np.int8)
    big[:, :, :, ::2] = expect
    view = big[:, :, :, ::2]  # a strided NC1HWC2 view
    np.testing.assert_array_equal(L.nc1hwc2_to_nchw(view, 10), x)
    np.testing.assert_array_equal(L.nc1hwc2_to_nhwc(view, 10), x.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(base, before)


def test_read_only_input():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.int16).reshape(2, 3, 4, 5)
    x.setflags(write=False)
    np.testing.assert_array_equal(L.nchw_to_nc1hwc2(x, 4), ref_nchw_to_nc1hwc2(x, 4))


def test_empty_tensors():
    x = np.zeros((0, 5, 3, 3), np.int8)
    assert L.nchw_to_nc1hwc2(x, 8).shape == (0, 1, 3, 3, 8)
    assert L.nhwc_to_nc1hwc2(np.zeros((1, 0, 3, 5), np.int8), 8).shape == (1, 1, 0, 3, 8)
    assert L.nc1hwc2_to_nchw(np.zeros((1, 0, 2, 2, 8), np.int8), 0).shape == (1, 0, 2, 2)
    assert L.pad_width(np.zeros((1, 2, 0, 3), np.uint8), 16).shape == (1, 2, 16, 3)
    assert not L.pad_width(np.zeros((1, 2, 0, 3), np.uint8), 16).any()


# ---------------------------------------------------------------- out= path


def test_out_is_filled_and_returned():
    rng = np.random.default_rng(11)
    x = _random((2, 13, 4, 6), "float16", rng)
    out = np.empty((2, 2, 4, 6, 8), np.float16)
    assert L.nchw_to_nc1hwc2(x, 8, out=out) is out
    np.testing.assert_array_equal(out, ref_nchw_to_nc1hwc2(x, 8))
    back = np.empty_like(x)
    assert L.nc1hwc2_to_nchw(out, 13, out=back) is back
    np.testing.assert_array_equal(back, x)
    nhwc = np.empty((2, 4, 6, 13), np.float16)
    assert L.nc1hwc2_to_nhwc(out, 13, out=nhwc) is nhwc
    out2 = np.empty_like(out)
    assert L.nhwc_to_nc1hwc2(nhwc, 8, out=out2) is out2
    np.testing.assert_array_equal(out2, out)
    padded = np.empty((2, 4, 16, 13), np.float16)
    assert L.pad_width(nhwc, 16, out=padded) is padded
    unpadded = np.empty_like(nhwc)
    assert L.unpad_width(padded, 6, out=unpadded) is unpadded
    np.testing.assert_array_equal(unpadded, nhwc)


def test_results_are_copies():
    x = np.zeros((1, 4, 2, 3), np.int8)
    y = L.nchw_to_nc1hwc2(x, 4)
    y[...] = 1
    assert not x.any()
    nhwc = np.zeros((1, 2, 16, 3), np.uint8)
    u = L.unpad_width(nhwc, 16)
    u[...] = 1
    assert not nhwc.any()


# ---------------------------------------------------------------- width padding


@pytest.mark.parametrize("dtype", ["uint8", "int8", "float16", "float32"])
def test_pad_and_unpad_width(dtype):
    rng = np.random.default_rng(2)
    x = _random((2, 5, 13, 3), dtype, rng)
    p = L.pad_width(x, 16)
    assert p.shape == (2, 5, 16, 3) and p.dtype == x.dtype
    np.testing.assert_array_equal(p[:, :, :13], x)
    assert not p[:, :, 13:].any()
    np.testing.assert_array_equal(L.unpad_width(p, 13), x)
    np.testing.assert_array_equal(L.pad_width(x, 13), x)  # already aligned: a plain copy
    out = np.full((2, 5, 16, 3), 9, dtype)
    L.pad_width(x, 16, out=out)
    assert not out[:, :, 13:].any()  # stale padding is overwritten with zeros


# ---------------------------------------------------------------- platform rules


def test_c2_per_platform_and_type():
    assert [L.c2_for(p, TensorType.INT8) for p in ("rk3566", "rk3568")] == [8, 8]
    assert [L.c2_for(p, TensorType.FLOAT16) for p in ("rk3566", "rk3568")] == [4, 4]
    assert L.c2_for("rk3566", TensorType.INT16) == 4
    for p in ("rk3588", "rk3562", "rv1106", "rv1103"):
        assert (L.c2_for(p, TensorType.INT8), L.c2_for(p, TensorType.FLOAT16), L.c2_for(p, TensorType.INT16)) \
            == (16, 8, 8)
    # Platforms the guide does not list take RK3588's values.
    for p in ("rk3576", "rv1126b", "rk2118"):
        assert (L.c2_for(p, TensorType.INT8), L.c2_for(p, TensorType.FLOAT16)) == (16, 8)
    assert L.c2_for("RK3588", TensorType.UINT8) == 16  # case-insensitive, uint8 like int8
    assert L.c2_for("rk3588", int(TensorType.FLOAT16)) == 8  # plain int value of the enum
    assert L.c2_for("rk3588", TensorType.FLOAT32) == 4 and L.c2_for("rk3566", TensorType.FLOAT32) == 2


def test_width_alignment_per_platform():
    assert L.width_alignment("rk3566") == L.width_alignment("rk3568") == 8
    for p in ("rk3562", "rk3588", "rv1106", "rv1103", "rk3576", "rv1126b", "rk2118"):
        assert L.width_alignment(p) == 16


def test_unknown_platform_lists_the_known_ones():
    for call in (lambda: L.c2_for("rk9999", TensorType.INT8), lambda: L.width_alignment("rk9999"),
                 lambda: L.width_alignment(None),
                 lambda: L.native_layout((1, 3, 4, 4), TensorFormat.NCHW, TensorType.INT8, "x", is_input=True)):
        with pytest.raises(InvalidParamError) as e:
            call()
        assert "rk3588" in str(e.value) and "rk3566" in str(e.value)


def test_c2_rejects_int4_and_non_types():
    with pytest.raises(InvalidParamError, match="INT4"):
        L.c2_for("rk3588", TensorType.INT4)
    with pytest.raises(InvalidParamError, match="TensorType"):
        L.c2_for("rk3588", 99)
    with pytest.raises(InvalidParamError, match="TensorType"):
        L.c2_for("rk3588", "int8")


# ---------------------------------------------------------------- native layouts


def test_native_layout_three_channel_input_is_nhwc_with_aligned_width():
    lay = L.native_layout((1, 3, 224, 223), TensorFormat.NCHW, TensorType.INT8, "rk3566", is_input=True)
    assert lay == L.NativeLayout(TensorFormat.NHWC, (1, 224, 223, 3), 224, 0, 224 * 224 * 3)
    lay = L.native_layout((1, 3, 224, 223), TensorFormat.NCHW, TensorType.INT8, "rk3588", is_input=True)
    assert lay.w_stride == 224 and lay.dims == (1, 224, 223, 3)
    lay = L.native_layout((1, 3, 10, 20), TensorFormat.NCHW, TensorType.UINT8, "rk3588", is_input=True)
    assert lay.w_stride == 32 and lay.size_with_stride == 10 * 32 * 3
    lay = L.native_layout((1, 10, 20, 3), TensorFormat.NHWC, TensorType.UINT8, "rk3566", is_input=True)
    assert (lay.dims, lay.w_stride) == ((1, 10, 20, 3), 24)
    for c in (1, 4):
        lay = L.native_layout((2, c, 5, 5), TensorFormat.NCHW, TensorType.FLOAT16, "rk3568", is_input=True)
        assert lay.fmt == TensorFormat.NHWC and lay.w_stride == 8 and lay.size_with_stride == 2 * 5 * 8 * c * 2


def test_native_layout_other_channel_counts_are_nc1hwc2():
    lay = L.native_layout((1, 13, 4, 4), TensorFormat.NCHW, TensorType.INT8, "rk3568", is_input=False)
    assert lay == L.NativeLayout(TensorFormat.NC1HWC2, (1, 2, 4, 4, 8), 4, 0, 2 * 4 * 4 * 8)
    lay = L.native_layout((1, 13, 4, 4), TensorFormat.NCHW, TensorType.INT8, "rk3588", is_input=True)
    assert lay.dims == (1, 1, 4, 4, 16) and lay.size_with_stride == 256
    lay = L.native_layout((1, 4, 4, 13), TensorFormat.NHWC, TensorType.FLOAT16, "rk3588", is_input=False)
    assert lay.dims == (1, 2, 4, 4, 8) and lay.size_with_stride == 2 * 16 * 8 * 2
    # An output with 3 channels is not an NPU-read input: NC1HWC2.
    lay = L.native_layout((1, 3, 8, 8), TensorFormat.NCHW, TensorType.INT8, "rk3566", is_input=False)
    assert lay.fmt == TensorFormat.NC1HWC2 and lay.dims == (1, 1, 8, 8, 8)


def test_native_layout_nhwc_queries():
    lay = L.native_layout((1, 13, 4, 5), TensorFormat.NCHW, TensorType.INT8, "rk3588", is_input=True, nhwc=True)
    assert (lay.fmt, lay.dims, lay.w_stride) == (TensorFormat.NHWC, (1, 4, 5, 13), 16)
    assert lay.size_with_stride == 4 * 16 * 13
    lay = L.native_layout((1, 13, 4, 5), TensorFormat.NCHW, TensorType.INT8, "rk3588", is_input=False, nhwc=True)
    assert (lay.fmt, lay.dims, lay.w_stride, lay.size_with_stride) == (TensorFormat.NHWC, (1, 4, 5, 13), 5, 260)


def test_native_layout_undefined_and_model_layout_cases():
    lay = L.native_layout((1, 1000), TensorFormat.UNDEFINED, TensorType.FLOAT16, "rk3588", is_input=False)
    assert lay == L.NativeLayout(TensorFormat.UNDEFINED, (1, 1000), 0, 0, 2000)
    lay = L.native_layout((2, 3, 4), TensorFormat.UNDEFINED, TensorType.INT8, "rk3566", is_input=True)
    assert (lay.fmt, lay.dims, lay.size_with_stride) == (TensorFormat.UNDEFINED, (2, 3, 4), 24)
    lay = L.native_layout((1, 3, 4, 4), TensorFormat.UNDEFINED, TensorType.INT8, "rk3566", is_input=True)
    assert lay.fmt == TensorFormat.UNDEFINED and lay.dims == (1, 3, 4, 4)
    for t in (TensorType.INT64, TensorType.BOOL):
        lay = L.native_layout((1, 3, 4, 5), TensorFormat.NCHW, t, "rk3588", is_input=True)
        assert (lay.fmt, lay.dims, lay.w_stride) == (TensorFormat.NCHW, (1, 3, 4, 5), 5)


def test_native_layout_bad_input():
    with pytest.raises(InvalidParamError, match="dynamic"):
        L.native_layout((1, 3, -1, -1), TensorFormat.NCHW, TensorType.INT8, "rk3588", is_input=True)
    with pytest.raises(InvalidParamError, match="NCHW, NHWC or UNDEFINED"):
        L.native_layout((1, 3, 4, 4), TensorFormat.NC1HWC2, TensorType.INT8, "rk3588", is_input=True)
    with pytest.raises(InvalidParamError, match="TensorFormat"):
        L.native_layout((1, 3, 4, 4), 7, TensorType.INT8, "rk3588", is_input=True)
    with pytest.raises(InvalidParamError, match="sequence of ints"):
        L.native_layout(5, TensorFormat.NCHW, TensorType.INT8, "rk3588", is_input=True)
    with pytest.raises(InvalidParamError, match="TensorType"):
        L.native_layout((1, 3, 4, 4), TensorFormat.NCHW, None, "rk3588", is_input=True)


# ---------------------------------------------------------------- size_with_stride


def test_size_with_stride_values():
    S = L.size_with_stride
    assert S((1, 224, 223, 3), TensorFormat.NHWC, TensorType.UINT8, 224) == 224 * 224 * 3
    assert S((1, 224, 223, 3), TensorFormat.NHWC, TensorType.UINT8, 0) == 224 * 223 * 3
    assert S((2, 10, 20, 3), TensorFormat.NHWC, TensorType.FLOAT16, 32, 12) == 2 * 12 * 32 * 3 * 2
    assert S((1, 3, 10, 20), TensorFormat.NCHW, TensorType.FLOAT32, 32) == 3 * 10 * 32 * 4
    assert S((1, 2, 4, 4, 8), TensorFormat.NC1HWC2, TensorType.INT8, 4) == 256
    assert S((1, 2, 4, 4, 8), TensorFormat.NC1HWC2, TensorType.FLOAT16, 8) == 2 * 4 * 8 * 8 * 2
    assert S((1, 1000), TensorFormat.UNDEFINED, TensorType.FLOAT32, 0) == 4000
    assert S((1, 1000), TensorFormat.UNDEFINED, TensorType.FLOAT32, 2000) == 4000  # strides do not apply
    assert S((3, 5), TensorFormat.UNDEFINED, TensorType.INT4, 0) == 8  # 15 nibbles -> 8 bytes
    assert S((1, 3, -1, -1), TensorFormat.NCHW, TensorType.INT8, 0) == 0  # dynamic: 0 until shapes are set
    assert S((), TensorFormat.UNDEFINED, TensorType.INT64, 0) == 8  # a scalar


def test_size_with_stride_bad_input():
    S = L.size_with_stride
    with pytest.raises(InvalidParamError, match="4 entries"):
        S((1, 3, 4), TensorFormat.NHWC, TensorType.INT8, 0)
    with pytest.raises(InvalidParamError, match="5 entries"):
        S((1, 3, 4, 4), TensorFormat.NC1HWC2, TensorType.INT8, 0)
    with pytest.raises(InvalidParamError, match="smaller than"):
        S((1, 4, 20, 3), TensorFormat.NHWC, TensorType.INT8, 16)
    with pytest.raises(InvalidParamError, match="h_stride"):
        S((1, 4, 20, 3), TensorFormat.NHWC, TensorType.INT8, 32, 2)
    with pytest.raises(InvalidParamError, match="w_stride"):
        S((1, 4, 20, 3), TensorFormat.NHWC, TensorType.INT8, -1)
    with pytest.raises(InvalidParamError, match="w_stride"):
        S((1, 4, 20, 3), TensorFormat.NHWC, TensorType.INT8, 1.5)
    with pytest.raises(InvalidParamError, match="dims"):
        S((1, -2, 3, 3), TensorFormat.NCHW, TensorType.INT8, 0)
    with pytest.raises(InvalidParamError, match="dims"):
        S((1, 2.5, 3, 3), TensorFormat.NCHW, TensorType.INT8, 0)
    with pytest.raises(InvalidParamError, match="TensorType"):
        S((1, 3, 3, 3), TensorFormat.NCHW, 42, 0)


# ---------------------------------------------------------------- bad conversion input


def test_conversion_errors_name_what_was_expected():
    x4 = np.zeros((1, 5, 2, 2), np.int8)
    y5 = np.zeros((1, 1, 2, 2, 8), np.int8)
    cases = [
        (lambda: L.nchw_to_nc1hwc2([[1]], 8), "numpy.ndarray"),
        (lambda: L.nchw_to_nc1hwc2(np.zeros((5, 2, 2), np.int8), 8), "4 dims"),
        (lambda: L.nhwc_to_nc1hwc2(np.zeros((1, 2, 2, 2, 5), np.int8), 8), "4 dims"),
        (lambda: L.nchw_to_nc1hwc2(x4.astype(object), 8), "dtype"),
        (lambda: L.nchw_to_nc1hwc2(x4.astype(np.complex64), 8), "dtype"),
        (lambda: L.nchw_to_nc1hwc2(x4, 0), "c2"),
        (lambda: L.nchw_to_nc1hwc2(x4, 8.0), "c2"),
        (lambda: L.nhwc_to_nc1hwc2(x4, True), "c2"),
        (lambda: L.nc1hwc2_to_nchw(x4, 5), "5 dims"),
        (lambda: L.nc1hwc2_to_nchw(y5, 9), "channels"),
        (lambda: L.nc1hwc2_to_nhwc(y5, 0), "1..8"),
        (lambda: L.nc1hwc2_to_nhwc(y5, -1), "channels"),
        (lambda: L.nc1hwc2_to_nchw(np.zeros((1, 1, 2, 2, 0), np.int8), 1), "channels"),
        (lambda: L.nchw_to_nc1hwc2(x4, 8, out=np.zeros((1, 1, 2, 2, 8), np.uint8)), "dtype int8"),
        (lambda: L.nchw_to_nc1hwc2(x4, 8, out=np.zeros((1, 2, 2, 2, 8), np.int8)), "expected shape"),
        (lambda: L.nchw_to_nc1hwc2(x4, 8, out=np.zeros((1, 1, 2, 2, 16), np.int8)[..., ::2]), "C-contiguous"),
        (lambda: L.nchw_to_nc1hwc2(x4, 8, out=[0] * 32), "out must be a numpy.ndarray"),
        (lambda: L.nc1hwc2_to_nchw(y5, 5, out=y5[:, :, :, :, :5]), "shape"),
        (lambda: L.pad_width(x4, 1), "smaller than the width 2"),
        (lambda: L.pad_width(x4, 0), "w_stride"),
        (lambda: L.pad_width(x4, "16"), "w_stride"),
        (lambda: L.pad_width(np.zeros((4, 4), np.uint8), 16), "4 dims"),
        (lambda: L.unpad_width(x4, 3), "larger than the padded row"),
        (lambda: L.unpad_width(x4, 0), "width"),
    ]
    for call, needle in cases:
        with pytest.raises(InvalidParamError) as e:
            call()
        assert needle in str(e.value), (needle, str(e.value))
        assert isinstance(e.value, ValueError)


def test_out_overlapping_the_input_is_refused():
    buf = np.zeros(2 * 16 * 16, np.uint8)
    x = buf[:3 * 16].reshape(1, 1, 16, 3)
    with pytest.raises(InvalidParamError, match="overlap"):
        L.pad_width(x, 32, out=buf[:32 * 3].reshape(1, 1, 32, 3))
    ro = np.zeros((1, 1, 32, 3), np.uint8)
    ro.setflags(write=False)
    with pytest.raises(InvalidParamError, match="writeable"):
        L.pad_width(x, 32, out=ro)


def test_native_kernels_guard_buffer_sizes():
    """The compiled kernels refuse buffers smaller than the geometry they are told."""
    from rknnlite._native import layout_kernels as K

    with pytest.raises(ValueError, match="too small"):
        K.planar_to_blocked(np.zeros(10, np.uint8), np.zeros(100, np.uint8), 1, 3, 4, 8, 1)
    with pytest.raises(ValueError, match="too small"):
        K.blocked_to_interleaved(np.zeros(100, np.uint8), np.zeros(5, np.uint8), 1, 3, 4, 8, 1)
    with pytest.raises(ValueError, match="does not fit"):
        K.copy_rows(np.zeros(100, np.uint8), np.zeros(100, np.uint8), 2, 10, 5, 8)
