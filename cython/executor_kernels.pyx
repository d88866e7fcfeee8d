# cython: language_level=3
"""Kernels the executor itself needs; each runs without the GIL."""

from libc.stdint cimport uint32_t
from libc.math cimport rintf
from libc.string cimport memcpy


cdef inline float _round_half(float x) noexcept nogil:
    """Round to the nearest float16 value (ties to even), kept in float32 format.

    Branch-free so the loops vectorise: the normal range drops 13 mantissa bits with
    round-to-nearest-even on the bit pattern; float16 subnormals (|x| < 2**-14) round to
    a multiple of 2**-24 by adding and subtracting 0.75 (whose ulp is 2**-24);
    |x| >= 65520 becomes +-inf; NaN and inf pass through.
    """
    cdef uint32_t u, a, normal, tiny, result
    cdef float magic = 0.75
    cdef float sub = (x + magic) - magic
    memcpy(&u, &x, 4)
    memcpy(&tiny, &sub, 4)
    a = u & 0x7FFFFFFFU
    normal = (u + 0xFFF + ((u >> 13) & 1)) & ~(<uint32_t>0x1FFF)
    tiny = tiny | (u & 0x80000000U)
    result = normal
    if a < 0x38800000:
        result = tiny
    if a >= 0x477FF000:
        result = (u & 0x80000000U) | 0x7F800000U
    if a > 0x7F800000:
        result = u
    memcpy(&x, &result, 4)
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
