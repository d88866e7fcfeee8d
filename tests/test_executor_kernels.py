"""The executor's storage passes (``rknnlite._native.executor_kernels``): float16 rounding
and int8 fake quantization give the reference values bit for bit on every length (the
vector body and the scalar tail), for special values too."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite._native.executor_kernels import fake_quant_inplace, is_fp16_exact, round_fp16_inplace

SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e6,
                    6e-8, 2.98e-8, 2.99e-8, -5.96e-8, 1e-40, -1e-40, 6.1e-5, 0.5, 1.5, 2.5, -2.5], np.float32)


def _values(n: int, seed: int) -> np.ndarray:
    """n float32 values mixing every magnitude, random bit patterns and the special values."""
    rng = np.random.default_rng(seed)
    scales = np.float32(10.0) ** rng.integers(-9, 6, n).astype(np.float32)
    x = (rng.standard_normal(n).astype(np.float32) * scales).astype(np.float32)
    bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[::3] = bits[::3]
    k = min(n, len(SPECIAL))
    x[:k] = SPECIAL[:k]
    return x


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 31, 32, 33, 1000, 4099])
def test_round_fp16_matches_numpy_cast(n):
    x = _values(n, n)
    y = x.copy()
    round_fp16_inplace(y)
    with np.errstate(over="ignore", invalid="ignore"):  # aarch64 numpy flags signalling NaNs as invalid
        ref = x.astype(np.float16).astype(np.float32)
    nan = np.isnan(x)
    np.testing.assert_array_equal(y.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])
    # nan keeps its exact bits (payload and sign)
    np.testing.assert_array_equal(y.view(np.uint32)[nan], x.view(np.uint32)[nan])
    assert is_fp16_exact(y)


def test_round_fp16_on_a_view_changes_only_the_view():
    x = np.full(40, 1.0001, np.float32)
    round_fp16_inplace(x[3:37])
    assert (x[3:37] == 1.0).all() and (x[:3] == np.float32(1.0001)).all() and (x[37:] == np.float32(1.0001)).all()


def _fake_quant_ref(x: np.ndarray, scale: float, zp: int, lo: int, hi: int) -> np.ndarray:
    s = np.float32(scale)
    q = np.rint(x / s) + np.float32(zp)
    q = np.where(np.isnan(q), q, np.clip(q, np.float32(lo), np.float32(hi))).astype(np.float32)
    return ((q - np.float32(zp)) * s).astype(np.float32)


@pytest.mark.parametrize("n", [1, 8, 9, 33, 4099])
@pytest.mark.parametrize("scale, zp, lo, hi", [(0.0173, 3, -128, 127), (1e-3, -128, -128, 127), (0.5, 0, -128, 127),
                                               (0.25, 128, 0, 255), (3.3e-5, 100, -32768, 32767)])
def test_fake_quant_matches_reference(n, scale, zp, lo, hi):
    x = _values(n, n + 1)
    x[n // 2:] = (np.random.default_rng(n).standard_normal(n - n // 2) * scale * 40).astype(np.float32)
    x[-1:] = np.float32(2.5 * scale)  # a tie: rounds half to even
    y = x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        fake_quant_inplace(y, scale, zp, lo, hi)
        ref = _fake_quant_ref(x, scale, zp, lo, hi)
    np.testing.assert_array_equal(y, ref)


def test_fake_quant_rejects_a_bad_scale():
    for scale in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="scale must be positive"):
            fake_quant_inplace(np.zeros(4, np.float32), scale, 0)
