# cython: language_level=3
"""Kernels the executor itself needs; each runs without the GIL."""

from libc.stdint cimport uint32_t
from libc.math cimport rint, rintf
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_WRITABLE

import sys

from rk_executor cimport rke_add_requant_avx2, rke_codes_avx2, rke_fake_quant_avx2, rke_requant_avx2, rke_round_fp16_avx2, rke_vector_ok

cdef bint _VECTOR = rke_vector_ok()


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


cdef int _float_buffer(object obj, Py_buffer *view, bint writable) except -1:
    """Get ``obj``'s buffer as C-contiguous native float32 (any number of dimensions);
    raises ValueError (BufferError from exporters other than numpy) when it is not one."""
    PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (PyBUF_WRITABLE if writable else 0))
    if view.itemsize != 4 or not _native_float(view.format):
        fmt = (<bytes>view.format).decode("ascii", "replace") if view.format != NULL else "B"
        PyBuffer_Release(view)
        raise ValueError(f"expected a C-contiguous float32 buffer, got buffer format {fmt!r}")
    return 0


cdef char _OWN_ORDER = b"<" if sys.byteorder == "little" else b">"


cdef inline bint _native_float(const char *f) noexcept:
    """The struct format of a native-endian float32 (``f``, ``=f``, ``@f``, or ``<f``/``>f``
    matching this machine's byte order)."""
    if f == NULL:
        return False
    if f[0] == b"=" or f[0] == b"@" or f[0] == _OWN_ORDER:
        f += 1
    return f[0] == b"f" and f[1] == 0


cdef void _round_into(const float *s, float *d, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i = 0
    if _VECTOR:
        i = rke_round_fp16_avx2(s, d, n)
    while i < n:
        d[i] = _round_half(s[i])
        i += 1


cdef void _fake_quant_into(const float *s, float *d, Py_ssize_t n, float scale, int zero_point, int qmin,
                           int qmax) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef float q
    if _VECTOR:
        i = rke_fake_quant_avx2(s, d, n, scale, <float>zero_point, <float>qmin, <float>qmax)
    while i < n:
        q = rintf(s[i] / scale) + zero_point
        if q < qmin:
            q = qmin
        elif q > qmax:
            q = qmax
        d[i] = (q - zero_point) * scale
        i += 1


def round_fp16_inplace(data):
    """Round every element of a C-contiguous float32 buffer (any shape) to float16 precision,
    in place.

    Same result as ``x.astype(np.float16).astype(np.float32)`` (round to nearest even,
    overflow to +-inf, float16 subnormals), with no allocation and the GIL released.
    Raises ValueError for a buffer that is not writable, C-contiguous native float32.
    """
    cdef Py_buffer view
    _float_buffer(data, &view, True)
    cdef float *p = <float *>view.buf
    cdef Py_ssize_t n = view.len // 4
    with nogil:
        _round_into(p, p, n)
    PyBuffer_Release(&view)


cdef bint _float_pair(object src, object dst, Py_buffer *s, Py_buffer *d) except -1:
    """Get ``src`` (read) and ``dst`` (written) as float32 buffers for a one-pass copy:
    False (nothing held) when ``src`` is not a C-contiguous native float32 buffer; a bad
    ``dst`` raises.  On True the caller releases both."""
    try:
        _float_buffer(src, s, False)
    except (ValueError, TypeError, BufferError):
        return False
    try:
        _float_buffer(dst, d, True)
    except BaseException:
        PyBuffer_Release(s)
        raise
    return True


def copy_round_fp16(src, dst):
    """``dst[...] = src`` rounded to float16 precision, in one pass (no temporary).

    ``dst`` must be a writable C-contiguous float32 buffer (any shape).  Returns True when
    done; returns False, leaving ``dst`` untouched, when ``src`` is not a C-contiguous
    native float32 buffer with as many elements (the caller converts it another way).
    The copy of an input into the executor's storage precision; GIL released.
    """
    cdef Py_buffer s, d
    if not _float_pair(src, dst, &s, &d):
        return False
    cdef bint same = s.len == d.len
    if same:
        with nogil:
            _round_into(<const float *>s.buf, <float *>d.buf, d.len // 4)
    PyBuffer_Release(&s)
    PyBuffer_Release(&d)
    return same


def fake_quant_inplace(data, float scale, int zero_point, int qmin=-128, int qmax=127):
    """Snap a C-contiguous float32 buffer (any shape) onto an affine integer grid, in place.

    Each value becomes ``(clip(round_half_even(x / scale) + zero_point, qmin, qmax) -
    zero_point) * scale``: what storing it as an int8 (by default) tensor with that
    scale and zero point and reading it back gives.  GIL released, no allocation.
    Raises ValueError for a bad scale or a buffer that is not writable C-contiguous float32.
    """
    if not scale > 0:
        raise ValueError(f"quantization scale must be positive, got {scale}")
    cdef Py_buffer view
    _float_buffer(data, &view, True)
    cdef float *p = <float *>view.buf
    cdef Py_ssize_t n = view.len // 4
    with nogil:
        _fake_quant_into(p, p, n, scale, zero_point, qmin, qmax)
    PyBuffer_Release(&view)


def copy_fake_quant(src, dst, float scale, int zero_point, int qmin=-128, int qmax=127):
    """``dst[...] = src`` snapped onto the grid of :func:`fake_quant_inplace`, in one pass.

    Same contract as :func:`copy_round_fp16`: True when done; False, leaving ``dst``
    untouched, when ``src`` is not a C-contiguous native float32 buffer of ``dst``'s size.
    """
    if not scale > 0:
        raise ValueError(f"quantization scale must be positive, got {scale}")
    cdef Py_buffer s, d
    if not _float_pair(src, dst, &s, &d):
        return False
    cdef bint same = s.len == d.len
    if same:
        with nogil:
            _fake_quant_into(<const float *>s.buf, <float *>d.buf, d.len // 4, scale, zero_point, qmin, qmax)
    PyBuffer_Release(&s)
    PyBuffer_Release(&d)
    return same


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



def int8_codes(const float[::1] src, float[::1] dst, float scale):
    """``dst[i] = rint(src[i] / scale)`` in one pass: the integer codes ``q - zp`` of an int8
    tensor the executor stores as ``(q - zp) * scale`` (exact: the quotient is within an ulp
    of the integer).  ``src`` and ``dst``: flat float32 of one length (``dst`` may be ``src``).
    GIL released, no allocation."""
    if not scale > 0:
        raise ValueError(f"quantization scale must be positive, got {scale}")
    cdef Py_ssize_t i = 0, n = _rows(src.shape[0], dst.shape[0], src.shape[0], 1, 1)
    if n == 0:
        return
    with nogil:
        if _VECTOR:
            i = rke_codes_avx2(&src[0], &dst[0], n, scale)
        while i < n:
            dst[i] = rintf(src[i] / scale)
            i += 1


cdef Py_ssize_t _rows(Py_ssize_t n, Py_ssize_t m, Py_ssize_t other, Py_ssize_t channels, Py_ssize_t inner) except -1:
    """Rows of ``inner`` values in flat buffers of ``n`` (source), ``m`` (destination) and
    ``other`` values (a second source), channel ``row % channels`` each; ValueError otherwise."""
    if channels < 1 or inner < 1:
        raise ValueError(f"{channels} channels of {inner} values: both must be positive")
    if n != m or other != m or n % (channels * inner):
        raise ValueError(f"sources of {n} and {other} values and a destination of {m} are not rows of {inner} "
                         f"in {channels} channels")
    return n // inner


def requant_channels(const float[::1] src, float[::1] dst, const double[::1] multiplier, Py_ssize_t inner,
                     int zero_point, float scale, int qmin=-128, int qmax=127):
    """Requantize an int8 conv's integer accumulator to its output's grid, in one pass.

    ``src`` holds ``(outer, C, inner)`` values in C order, flat (``C = len(multiplier)``); each
    becomes ``(clip(rint(acc * multiplier[c]) + zero_point, qmin, qmax) - zero_point) * scale``,
    the product in double (exact for an accumulator below 2^24 and a multiplier of up to 29
    significant bits), the result float32 as :func:`fake_quant_inplace` writes grid values.
    ``dst``: flat float32 of the same length (it may be ``src``).  GIL released, no allocation."""
    if not scale > 0:
        raise ValueError(f"quantization scale must be positive, got {scale}")
    cdef Py_ssize_t channels = multiplier.shape[0]
    cdef Py_ssize_t rows = _rows(src.shape[0], dst.shape[0], src.shape[0], channels, inner), row, i, k
    cdef double m, q
    cdef float zp = zero_point
    with nogil:
        for row in range(rows):
            m = multiplier[row % channels]
            k = row * inner
            i = rke_requant_avx2(&src[k], &dst[k], inner, m, zp, qmin, qmax, scale) if _VECTOR else 0
            while i < inner:
                q = rint(<double>src[k + i] * m) + zero_point
                if q < qmin:
                    q = qmin
                elif q > qmax:
                    q = qmax
                dst[k + i] = (<float>q - zp) * scale
                i += 1


def add_requant_channels(const float[::1] acc, const float[::1] residual, float[::1] dst, const float[::1] step,
                         Py_ssize_t inner, int zero_point, float scale, bint relu=False, int qmin=-128,
                         int qmax=127):
    """A conv's accumulator plus a residual, on the output's int8 grid, in one pass.

    ``acc`` and ``residual`` hold ``(outer, C, inner)`` values in C order, flat (``C =
    len(step)``); each output is ``v = acc * step[c] + residual`` (then ``max(v, 0)`` when
    ``relu``), snapped as :func:`fake_quant_inplace` snaps: float32 operations in the order a
    Mul, an Add, a Relu and the output's quantization would run them (this module is built
    without fused multiply-adds).  ``dst``: flat float32 of the same length (it may be ``acc``
    or ``residual``).  GIL released, no allocation."""
    if not scale > 0:
        raise ValueError(f"quantization scale must be positive, got {scale}")
    cdef Py_ssize_t channels = step.shape[0]
    cdef Py_ssize_t rows = _rows(acc.shape[0], dst.shape[0], residual.shape[0], channels, inner), row, i, k
    cdef float v, q, st, zp = zero_point
    with nogil:
        for row in range(rows):
            st = step[row % channels]
            k = row * inner
            i = rke_add_requant_avx2(&acc[k], &residual[k], &dst[k], inner, st, scale, zp, qmin, qmax, relu) \
                if _VECTOR else 0
            while i < inner:
                v = acc[k + i] * st + residual[k + i]
                if relu and v < 0:
                    v = 0
                q = rintf(v / scale) + zero_point
                if q < qmin:
                    q = qmin
                elif q > qmax:
                    q = qmax
                dst[k + i] = (q - zero_point) * scale
                i += 1
