# cython: language_level=3
"""Element-wise float32 loops numpy has no ufunc for (erf, GELU); each runs without the GIL.

Every function takes flat, C-contiguous float32 arrays of equal length, writes
``out`` fully and returns nothing.  ``out`` may be the same buffer as ``x``.
"""

from libc.math cimport erff, erfcf, expf

cdef float _INV_SQRT2 = 0.70710678118654752440
cdef float _SQRT_2_OVER_PI = 0.79788456080286535588


cdef inline int _check(Py_ssize_t n, Py_ssize_t m) except -1:
    if n != m:
        raise ValueError(f"input has {n} elements but the output buffer {m}")
    return 0


def erf_f32(const float[::1] x, float[::1] out):
    """``out[i] = erf(x[i])`` (C ``erff``, correctly rounded to within an ulp)."""
    cdef Py_ssize_t i, n = x.shape[0]
    _check(n, out.shape[0])
    with nogil:
        for i in range(n):
            out[i] = erff(x[i])


def gelu_f32(const float[::1] x, float[::1] out):
    """Exact GELU ``0.5 * x * (1 + erf(x / sqrt(2)))``.

    Evaluated as ``0.5 * x * erfc(-x / sqrt(2))``: the same value, but without the
    cancellation ``1 + erf(...)`` suffers for negative ``x`` (so tails stay accurate).
    """
    cdef Py_ssize_t i, n = x.shape[0]
    cdef float v
    _check(n, out.shape[0])
    with nogil:
        for i in range(n):
            v = x[i]
            out[i] = 0.5 * v * erfcf(-v * _INV_SQRT2)


def gelu_tanh_f32(const float[::1] x, float[::1] out):
    """Tanh-approximated GELU ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``.

    Evaluated as ``x / (1 + exp(-2u))`` (``0.5 * (1 + tanh(u))`` is the logistic of
    ``2u``), which avoids cancellation for negative ``x``; ``exp`` overflowing to
    infinity gives the correct limit ``-0``.
    """
    cdef Py_ssize_t i, n = x.shape[0]
    cdef float v, u
    _check(n, out.shape[0])
    with nogil:
        for i in range(n):
            v = x[i]
            u = _SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)
            out[i] = v / (1.0 + expf(-2.0 * u))
