# cython: language_level=3
"""Kernels the executor itself needs; each runs without the GIL."""

from libc.stdint cimport uint32_t
from libc.math cimport fabsf, rintf, INFINITY
from libc.string cimport memcpy


cdef inline float _round_half(float x) noexcept nogil:
    """Round to the nearest float16 value (ties to even), kept in float32 format."""
    cdef uint32_t u
    cdef float a = fabsf(x)
    if x != x:  # NaN
        return x
    if a >= 65520.0:  # rounds to +-inf in float16 (max finite 65504)
        return INFINITY if x > 0 else -INFINITY
    if a < 6.103515625e-05:  # float16 subnormal range: multiples of 2**-24
        return rintf(x * 16777216.0) * (1.0 / 16777216.0)
    memcpy(&u, &x, 4)
    u = (u + 0xFFF + ((u >> 13) & 1)) & ~(<uint32_t>0x1FFF)
    memcpy(&x, &u, 4)
    return x


def round_fp16_inplace(float[::1] data):
    """Round every element of a contiguous float32 buffer to float16 precision, in place.

    Same result as ``x.astype(np.float16).astype(np.float32)`` (round to nearest even,
    overflow to +-inf, float16 subnormals), with no allocation and the GIL released.
    """
    cdef Py_ssize_t i, n = data.shape[0]
    with nogil:
        for i in range(n):
            data[i] = _round_half(data[i])


def fake_quant_inplace(float[::1] data, float scale, int zero_point, int qmin=-128, int qmax=127):
    """Snap a float32 buffer onto an affine integer grid, in place.

    Each value becomes ``(clip(round_half_even(x / scale) + zero_point, qmin, qmax) -
    zero_point) * scale``: what storing it as an int8 (by default) tensor with that
    scale and zero point and reading it back gives.  GIL released, no allocation.
    """
    cdef Py_ssize_t i, n = data.shape[0]
    cdef float q
    if not scale > 0:
        raise ValueError(f"quantization scale must be positive, got {scale}")
    with nogil:
        for i in range(n):
            q = rintf(data[i] / scale) + zero_point
            if q < qmin:
                q = qmin
            elif q > qmax:
                q = qmax
            data[i] = (q - zero_point) * scale


def is_fp16_exact(const float[::1] data):
    """True when every element already has float16 precision (rounding would not change it).

    Lets a float16 model whose weights were rounded at build time use them in place.
    """
    cdef Py_ssize_t i, n = data.shape[0]
    cdef bint exact = True
    with nogil:
        for i in range(n):
            if _round_half(data[i]) != data[i] and data[i] == data[i]:
                exact = False
                break
    return exact
