# cython: language_level=3
"""Pooling loops of the software backend (MaxPool, AveragePool), run without the GIL.

Every kernel works on a 4-D view ``(P, D, H, W)``: ``P`` = batch * channels planes,
and up to three spatial axes (1-D and 2-D pooling pass ``D = 1`` and/or ``H = 1``).
The caller computes, for every output coordinate along each axis, the half-open
range ``[lo, hi)`` of kernel taps that land on real input elements, so the loops
never test bounds per tap.  Output position ``o`` along an axis reads the input at
``o * stride - pad_begin + t * dilation`` for taps ``t`` in ``[lo[o], hi[o])``.

Both reductions are separable: a first pass reduces every input row along W at the
output columns (into a per-plane scratch of D*H*OW values), a second pass reduces
those rows over the (D, H) window taps, row by row, in loops the compiler vectorises.
"""

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

ctypedef fused max_t:
    float
    double
    signed char
    unsigned char
    int
    long long


cdef inline void _row_max(const max_t* row, max_t* tv, int64_t* tc, Py_ssize_t OW, int sw, int dw, int pw,
                          const int64_t* lo, const int64_t* hi, max_t empty, bint want) noexcept nogil:
    """tv[o] = max of row over the W taps of output column o; tc[o] = its column (-1 if none)."""
    cdef Py_ssize_t o, k, c, best_c
    cdef max_t best, v
    for o in range(OW):
        best = empty
        best_c = -1
        c = o * sw - pw
        for k in range(lo[o], hi[o]):
            v = row[c + k * dw]
            if best_c < 0 or v > best:
                best = v
                best_c = c + k * dw
        tv[o] = best
        if want:
            tc[o] = best_c


cdef inline void _vmax(max_t* acc, const max_t* row, Py_ssize_t n) noexcept nogil:
    """acc = max(acc, row) element-wise (unconditional stores, so it vectorises)."""
    cdef Py_ssize_t o
    cdef max_t a, v
    for o in range(n):
        a = acc[o]
        v = row[o]
        acc[o] = v if v > a else a


cdef inline void _vadd(float* acc, const float* row, Py_ssize_t n) noexcept nogil:
    """acc += row element-wise."""
    cdef Py_ssize_t o
    for o in range(n):
        acc[o] = acc[o] + row[o]


cdef inline int _interior(Py_ssize_t OW, const int64_t* lo, const int64_t* hi,
                          Py_ssize_t* o0, Py_ssize_t* o1) noexcept nogil:
    """Find [o0, o1), the first run of output columns sharing the tap range [0, kw).

    kw is the widest tap range; the run is usually every column whose window lies
    entirely on real input.  Returns kw.
    """
    cdef Py_ssize_t a = 0, b
    cdef int kw = 0
    for a in range(OW):
        if hi[a] > kw:
            kw = <int> hi[a]
    a = 0
    while a < OW and (lo[a] != 0 or hi[a] != kw):
        a += 1
    b = a
    while b < OW and lo[b] == 0 and hi[b] == kw:
        b += 1
    o0[0] = a
    o1[0] = b
    return kw


cdef inline void _row_max_fast(const max_t* row, max_t* tv, Py_ssize_t OW, int kw, int sw, int dw, int pw,
                               const int64_t* lo, const int64_t* hi, Py_ssize_t o0, Py_ssize_t o1,
                               max_t empty) noexcept nogil:
    """As _row_max without positions (``empty`` only shows for a window with no tap).

    Columns in [o0, o1) take every tap: there the loop runs tap by tap over all
    columns, which has no loop-carried dependency and vectorises.
    """
    cdef Py_ssize_t o, k, c
    cdef max_t best, v
    cdef const max_t* src
    for o in range(OW):
        if o0 <= o < o1:
            continue
        best = empty
        c = o * sw - pw
        for k in range(lo[o], hi[o]):
            v = row[c + k * dw]
            if v > best:
                best = v
        tv[o] = best
    if o1 <= o0:
        return
    src = row + o0 * sw - pw
    for o in range(o1 - o0):
        tv[o0 + o] = src[o * sw]
    for k in range(1, kw):
        src = row + o0 * sw - pw + k * dw
        if sw == 1:
            _vmax(tv + o0, src, o1 - o0)
        else:
            for o in range(o1 - o0):
                v = src[o * sw]
                best = tv[o0 + o]
                tv[o0 + o] = v if v > best else best


def max_pool(const max_t[:, :, :, ::1] x, max_t[:, :, :, ::1] y, int64_t[:, :, :, ::1] idx,
             int sd, int sh, int sw, int dd, int dh, int dw, int pd, int ph, int pw,
             const int64_t[::1] d_lo, const int64_t[::1] d_hi,
             const int64_t[::1] h_lo, const int64_t[::1] h_hi,
             const int64_t[::1] w_lo, const int64_t[::1] w_hi,
             max_t empty_value, bint col_major):
    """Max over each pooling window, written into ``y`` (and the argmax into ``idx``).

    x: (P, D, H, W) input, C-contiguous.  y: (P, OD, OH, OW), written fully.
    idx: None, or int64 (P, OD, OH, OW) receiving the flat input index of each max:
    ``p*D*H*W + (z*H + r)*W + c`` (row-major) or ``p*D*H*W + z + r*D + c*D*H`` when
    ``col_major``.  Ties keep the first tap in row-major window order.  A window with
    no real input element gets ``empty_value`` (index -1).
    """
    cdef Py_ssize_t P = x.shape[0], D = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OD = y.shape[1], OH = y.shape[2], OW = y.shape[3]
    cdef Py_ssize_t p, od, oh, o, i, j, z, r, c, rows, trow_i, o0, o1
    cdef int kw
    cdef bint want = idx is not None
    cdef bint first
    cdef const max_t* plane
    cdef max_t* tv
    cdef max_t* trow
    cdef max_t* yrow
    cdef int64_t* tc = NULL
    cdef int64_t* tcrow
    cdef int64_t* irow
    cdef int64_t base, pos
    if y.shape[0] != P or d_lo.shape[0] != OD or h_lo.shape[0] != OH or w_lo.shape[0] != OW:
        raise ValueError("max_pool: output or tap-range shapes do not match")
    if want and (idx.shape[0] != P or idx.shape[1] != OD or idx.shape[2] != OH or idx.shape[3] != OW):
        raise ValueError("max_pool: index output has the wrong shape")
    if P == 0 or OD == 0 or OH == 0 or OW == 0:
        return None
    rows = D * H
    kw = _interior(OW, &w_lo[0], &w_hi[0], &o0, &o1)
    tv = <max_t*> malloc(max(rows * OW, 1) * sizeof(max_t))
    if want:
        tc = <int64_t*> malloc(max(rows * OW, 1) * sizeof(int64_t))
    if tv == NULL or (want and tc == NULL):
        free(tv)
        free(tc)
        raise MemoryError()
    with nogil:
        for p in range(P):
            plane = &x[p, 0, 0, 0]
            for r in range(rows):
                if want:
                    _row_max(plane + r * W, tv + r * OW, tc + r * OW, OW, sw, dw, pw,
                             &w_lo[0], &w_hi[0], empty_value, True)
                else:
                    _row_max_fast(plane + r * W, tv + r * OW, OW, kw, sw, dw, pw,
                                  &w_lo[0], &w_hi[0], o0, o1, empty_value)
            base = p * D * H * W
            for od in range(OD):
                for oh in range(OH):
                    yrow = &y[p, od, oh, 0]
                    irow = &idx[p, od, oh, 0] if want else NULL
                    first = True
                    for i in range(d_lo[od], d_hi[od]):
                        z = od * sd - pd + i * dd
                        for j in range(h_lo[oh], h_hi[oh]):
                            r = oh * sh - ph + j * dh
                            trow_i = z * H + r
                            trow = tv + trow_i * OW
                            if not want:
                                if first:
                                    memcpy(yrow, trow, OW * sizeof(max_t))
                                else:
                                    _vmax(yrow, trow, OW)
                            else:
                                tcrow = tc + trow_i * OW
                                for o in range(OW):
                                    if first or trow[o] > yrow[o]:
                                        yrow[o] = trow[o]
                                        irow[o] = -1 if tcrow[o] < 0 else trow_i * W + tcrow[o]
                            first = False
                    if first:
                        for o in range(OW):
                            yrow[o] = empty_value
                            if want:
                                irow[o] = -1
                    elif want:
                        for o in range(OW):
                            pos = irow[o]
                            if pos < 0:
                                continue
                            if col_major:
                                c = pos % W
                                r = (pos // W) % H
                                z = pos // (W * H)
                                irow[o] = base + z + r * D + c * D * H
                            else:
                                irow[o] = base + pos
    free(tv)
    free(tc)
    return None


def avg_pool(const float[:, :, :, ::1] x, float[:, :, :, ::1] y,
             int sd, int sh, int sw, int dd, int dh, int dw, int pd, int ph, int pw,
             const int64_t[::1] d_lo, const int64_t[::1] d_hi,
             const int64_t[::1] h_lo, const int64_t[::1] h_hi,
             const int64_t[::1] w_lo, const int64_t[::1] w_hi,
             const int64_t[::1] d_cnt, const int64_t[::1] h_cnt, const int64_t[::1] w_cnt):
    """Mean over each pooling window, written into ``y``.

    x: (P, D, H, W) float32, C-contiguous.  y: (P, OD, OH, OW) float32, written fully.
    The sum runs over the real input taps; it is divided by
    ``d_cnt[od] * h_cnt[oh] * w_cnt[ow]`` (the caller counts either the real taps or
    the taps inside the padded extent, per ``count_include_pad``).  A zero count gives 0.
    """
    cdef Py_ssize_t P = x.shape[0], D = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OD = y.shape[1], OH = y.shape[2], OW = y.shape[3]
    cdef Py_ssize_t p, od, oh, o, i, j, k, z, r, c, rows, o0, o1
    cdef int kw
    cdef const float* src
    cdef float acc, dcnt
    cdef bint first
    cdef const float* plane
    cdef const float* row
    cdef float* tv
    cdef float* wc
    cdef float* trow
    cdef float* yrow
    if y.shape[0] != P or d_lo.shape[0] != OD or h_lo.shape[0] != OH or w_lo.shape[0] != OW:
        raise ValueError("avg_pool: output or tap-range shapes do not match")
    if d_cnt.shape[0] != OD or h_cnt.shape[0] != OH or w_cnt.shape[0] != OW:
        raise ValueError("avg_pool: divisor shapes do not match")
    if P == 0 or OD == 0 or OH == 0 or OW == 0:
        return None
    rows = D * H
    kw = _interior(OW, &w_lo[0], &w_hi[0], &o0, &o1)
    tv = <float*> malloc(max(rows * OW, 1) * sizeof(float))
    wc = <float*> malloc(OW * sizeof(float))
    if tv == NULL or wc == NULL:
        free(tv)
        free(wc)
        raise MemoryError()
    for o in range(OW):
        wc[o] = <float> w_cnt[o] if w_cnt[o] > 0 else 1
    with nogil:
        for p in range(P):
            plane = &x[p, 0, 0, 0]
            for r in range(rows):
                row = plane + r * W
                trow = tv + r * OW
                for o in range(OW):
                    if o0 <= o < o1:
                        continue
                    c = o * sw - pw
                    acc = 0
                    for k in range(w_lo[o], w_hi[o]):
                        acc = acc + row[c + k * dw]
                    trow[o] = acc
                if o1 > o0:
                    # Full windows tap by tap: no loop-carried dependency, vectorises.
                    src = row + o0 * sw - pw
                    for o in range(o1 - o0):
                        trow[o0 + o] = src[o * sw]
                    for k in range(1, kw):
                        src = row + o0 * sw - pw + k * dw
                        if sw == 1:
                            _vadd(trow + o0, src, o1 - o0)
                        else:
                            for o in range(o1 - o0):
                                trow[o0 + o] = trow[o0 + o] + src[o * sw]
            for od in range(OD):
                for oh in range(OH):
                    yrow = &y[p, od, oh, 0]
                    first = True
                    for i in range(d_lo[od], d_hi[od]):
                        z = od * sd - pd + i * dd
                        for j in range(h_lo[oh], h_hi[oh]):
                            r = oh * sh - ph + j * dh
                            trow = tv + (z * H + r) * OW
                            if first:
                                memcpy(yrow, trow, OW * sizeof(float))
                                first = False
                            else:
                                _vadd(yrow, trow, OW)
                    if first:
                        for o in range(OW):
                            yrow[o] = 0
                        continue
                    # A zero count only occurs with no real tap, where the sum is 0: divide by 1.
                    dcnt = <float> (d_cnt[od] * h_cnt[oh])
                    if dcnt == 0:
                        dcnt = 1
                    for o in range(OW):
                        yrow[o] = yrow[o] / (dcnt * wc[o])
    free(tv)
    free(wc)
    return None
