"""Comparing a float16 build's outputs with the vendor simulator's across CPUs."""

from __future__ import annotations

import numpy as np

__all__ = ["assert_float16_matches"]


def assert_float16_matches(y: np.ndarray, want: np.ndarray, spare: float = 0.005) -> None:
    """``y`` equals ``want`` (both float16 values) on all but ``spare`` of the values, those at
    most one float16 unit apart.  The kernels' float32 sums run in another order on another
    CPU (numpy's BLAS and the conv micro-kernels pick their SIMD per ISA), which moves a value
    across a float16 rounding boundary now and then; on the machine a rule was probed on they
    are all equal."""
    assert y.shape == want.shape, (y.shape, want.shape)
    unequal = y != want
    assert np.mean(unequal) <= spare, f"{np.mean(~unequal):.4f} equal"
    if unequal.any():
        unit = np.spacing(np.abs(want[unequal]).astype(np.float16)).astype(np.float32)
        assert np.all(np.abs(y[unequal] - want[unequal]) <= unit), "a value more than one float16 unit off"
