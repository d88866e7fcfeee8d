# cython: language_level=3
"""Vectorised float32 erf and exact GELU (numpy has no erf ufunc), the softmax of short rows
(:func:`softmax_rows`), and the lookup-table stage of a vendor int8 conv (:func:`lut_rows`).

A loop calling C ``erff``/``erfcf`` costs ~15 ns per element, far from memory speed.
These loops are instead branch-free arithmetic the C compiler vectorises, finishing
a computation numpy starts: the caller first fills a float32 work buffer with
``exp(-fl(x*x))`` (erf) or ``exp(-0.5 * fl(x*x))`` (GELU), ``fl`` being float32
rounding, using numpy's SIMD ``exp``; the loop then turns it into the result in place.

Approximations (fitted for this project by weighted least squares against Python's
``math.erf``/``math.erfc``; evaluated in double precision):

* ``|z| < 1``: ``erf(z) = z * P(z*z)``, P of degree 7, relative error < 4e-11;
* ``|z| >= 1``: ``erfc(|z|) = exp(-z*z) * t * Q(t)`` with ``t = 1 / (1 + 0.3 |z|)``,
  Q of degree 10, relative error < 5e-10 for ``|z|`` up to 10.2 (beyond that the
  exponential underflows float32 anyway).

The float32 rounding of the exponent's argument (an error growing with ``z*z``) is
undone exactly by the factor ``1 + lo``, ``lo`` being the dropped part recomputed in
double.  Measured: erf within 1 float32 ulp, GELU within 4 ulps (tails included).
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc

from rk_elementwise cimport (rkl_erf_from_exp, rkl_fake_quant, rkl_gelu_from_exp, rkl_lut, rkl_lut_rows,
                            rkl_mmse_pieces, rkl_softmax_rows)

cdef inline int _check(Py_ssize_t n, Py_ssize_t m) except -1:
    if n != m:
        raise ValueError(f"input has {n} elements but the work buffer {m}")
    return 0


def erf_from_exp(const float[::1] x, float[::1] work):
    """Turn ``work[i] = exp(-fl(x[i]*x[i]))`` into ``erf(x[i])``, in place.

    ``x`` and ``work``: flat C-contiguous float32 of equal length, not overlapping.
    """
    cdef Py_ssize_t n = x.shape[0]
    _check(n, work.shape[0])
    if n:
        with nogil:
            rkl_erf_from_exp(&x[0], &work[0], n)


def gelu_from_exp(const float[::1] x, float[::1] work):
    """Turn ``work[i] = exp(-0.5 * fl(x[i]*x[i]))`` into ``gelu(x[i]) = 0.5 x (1 + erf(x/sqrt(2)))``, in place.

    ``x`` and ``work``: flat C-contiguous float32 of equal length, not overlapping.
    """
    cdef Py_ssize_t n = x.shape[0]
    _check(n, work.shape[0])
    if n:
        with nogil:
            rkl_gelu_from_exp(&x[0], &work[0], n)


def softmax_rows(const float[:, ::1] x, float[:, ::1] y):
    """Softmax of each row of ``x`` into ``y`` (float32, C-contiguous, same shape; may be the
    same array): ``exp(x - max) / sum`` with libm's ``expf`` and the sum in double, a row with a
    nan all nan.  Releases the GIL."""
    cdef Py_ssize_t rows = x.shape[0], n = x.shape[1]
    if y.shape[0] != rows or y.shape[1] != n:
        raise ValueError(f"output shape ({y.shape[0]}, {y.shape[1]}) differs from the input's ({rows}, {n})")
    if rows and n:
        with nogil:
            rkl_softmax_rows(&x[0, 0], &y[0, 0], rows, n)


def lut_rows(const float[::1] acc, float[::1] out, const double[::1] index_scale, Py_ssize_t inner,
             const double[::1] tables, Py_ssize_t le_entries, double index_offset, double le_start, double le_end,
             double lo_start, double lo_end, double step, double le_uflow_slope, double lo_oflow_slope,
             double out_multiplier, double out_zero_point, double out_scale):
    """The NPU lookup-table stage over ``acc`` (flat float32, ``rows x inner`` values, row ``r``
    in channel ``r % len(index_scale)``) into ``out`` (flat float32, same length), as
    ``rknnlite.backends.software.ops.vendor_lut`` defines it.  ``tables``: the LE table's
    ``le_entries`` values, then the LO table's; adjacent ranges (``le_end == lo_start``), entries
    ``step`` index units apart, at least two in each table."""
    cdef Py_ssize_t n = acc.shape[0], channels = index_scale.shape[0]
    _check(n, out.shape[0])
    if channels < 1 or inner < 1 or n % (channels * inner):
        raise ValueError(f"{n} values are not rows of {inner} in {channels} channels")
    if le_entries < 2 or tables.shape[0] - le_entries < 2 or le_end != lo_start or not step > 0:
        raise ValueError("the tables need two entries or more, adjacent ranges and a positive step")
    cdef rkl_lut p
    p.both, p.le_n, p.lo_n = &tables[0], le_entries, tables.shape[0] - le_entries
    p.index_offset, p.le_start, p.le_end, p.lo_start, p.lo_end, p.step = (
        index_offset, le_start, le_end, lo_start, lo_end, step)
    p.le_uflow_slope, p.lo_oflow_slope = le_uflow_slope, lo_oflow_slope
    p.out_multiplier, p.out_zero_point, p.out_scale = out_multiplier, out_zero_point, out_scale
    if n:
        with nogil:
            rkl_lut_rows(&acc[0], &out[0], n // inner, inner, &index_scale[0], channels, &p)


def fake_quant(const float[::1] x, float[::1] y, Py_ssize_t channels, Py_ssize_t inner, const float[::1] step,
               const float[::1] zp, float qmin, float qmax):
    """RKNN-Toolkit2's ``mmse`` fake quantization of ``x`` into ``y`` (flat float32 of equal
    length; may be the same array), in float32: ``q = rint(x / step) + zp`` clipped to
    ``[qmin, qmax]`` (nan stays nan), ``y = (q - zp) * step``.  ``x`` is blocks of ``channels``
    runs of ``inner`` values (a C-contiguous array with ``channels`` along one axis, ``inner``
    the product of the later axes), run ``c`` of each block taking ``step[c]`` and ``zp[c]``
    (see ``rknnlite.toolkit.calibration.mmse_fake_quant``).  Releases the GIL."""
    cdef Py_ssize_t n = x.shape[0]
    _check(n, y.shape[0])
    if channels < 1 or inner < 0 or step.shape[0] != channels or zp.shape[0] != channels:
        raise ValueError(f"{channels} channels, {step.shape[0]} steps and {zp.shape[0]} zero points")
    if inner == 0 or n % (channels * inner):
        if n == 0:
            return
        raise ValueError(f"{n} values are not blocks of {channels} runs of {inner}")
    with nogil:
        rkl_fake_quant(&x[0], &y[0], n // (channels * inner), channels, inner, &step[0], &zp[0], qmin, qmax)


def mmse_pieces(const float[:, ::1] u, pieces, double[::1] out):
    """RKNN-Toolkit2's mean squared error of each row of ``u`` (float32, C-contiguous, rows x n,
    n >= 1) against the same row made of ``pieces`` laid side by side (a sequence of float32
    C-contiguous arrays of rows x n / len(pieces) values each: row r is piece 0's row r, then
    piece 1's, ...; one piece is a plain array of u's shape), into ``out`` (float64, one per
    row), reading the pieces in place: eight float32 lane sums over the blocks of eight,
    folded, the tail in float64 (see ``rknnlite.toolkit.calibration.mmse_errors``).  Releases
    the GIL."""
    cdef Py_ssize_t rows = u.shape[0], n = u.shape[1], npieces = len(pieces), length, p
    cdef const float[:, ::1] view
    if out.shape[0] != rows:
        raise ValueError(f"{rows} rows but {out.shape[0]} outputs")
    if npieces < 1 or n < 1 or n % npieces:
        raise ValueError(f"rows of {n} values are not {npieces} pieces")
    length = n // npieces
    if rows == 0:
        return
    cdef const float **ptrs = <const float **>PyMem_Malloc(npieces * sizeof(float *))
    if ptrs == NULL:
        raise MemoryError()
    try:
        for p in range(npieces):
            view = pieces[p]
            if view.shape[0] != rows or view.shape[1] != length:
                raise ValueError(f"piece {p} is ({view.shape[0]}, {view.shape[1]}), not ({rows}, {length})")
            ptrs[p] = &view[0, 0]
        with nogil:
            rkl_mmse_pieces(&u[0, 0], ptrs, npieces, length, &out[0], rows)
    finally:
        PyMem_Free(ptrs)
