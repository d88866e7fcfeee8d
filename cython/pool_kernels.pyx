# cython: language_level=3
"""Pooling loops of the software backend (MaxPool, AveragePool), run without the GIL.

Every kernel works on a 4-D view ``(P, D, H, W)``: ``P`` = batch * channels planes,
and up to three spatial axes (1-D and 2-D pooling pass ``D = 1`` and/or ``H = 1``).
The caller computes, for every output coordinate along each axis, the half-open
range ``[lo, hi)`` of kernel taps that land on real input elements, so the loops
never test bounds per tap.  Output position ``o`` along an axis reads the input at
``o * stride - pad_begin + t * dilation`` for taps ``t`` in ``[lo[o], hi[o])``.
"""

from libc.stdint cimport int64_t

ctypedef fused max_t:
    float
    double
    signed char
    unsigned char
    int
    long long


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
    cdef Py_ssize_t p, od, oh, ow, i, j, k, z, r, c, zb, rb, cb, best_pos, pos
    cdef bint want_idx = idx is not None
    cdef max_t best, v
    cdef const max_t* plane
    if y.shape[0] != P or d_lo.shape[0] != OD or h_lo.shape[0] != OH or w_lo.shape[0] != OW:
        raise ValueError("max_pool: output or tap-range shapes do not match")
    if want_idx and (idx.shape[0] != P or idx.shape[1] != OD or idx.shape[2] != OH or idx.shape[3] != OW):
        raise ValueError("max_pool: index output has the wrong shape")
    with nogil:
        for p in range(P):
            plane = &x[p, 0, 0, 0]
            for od in range(OD):
                zb = od * sd - pd
                for oh in range(OH):
                    rb = oh * sh - ph
                    for ow in range(OW):
                        cb = ow * sw - pw
                        best = empty_value
                        best_pos = -1
                        for i in range(d_lo[od], d_hi[od]):
                            z = zb + i * dd
                            for j in range(h_lo[oh], h_hi[oh]):
                                r = rb + j * dh
                                pos = (z * H + r) * W
                                for k in range(w_lo[ow], w_hi[ow]):
                                    c = cb + k * dw
                                    v = plane[pos + c]
                                    if best_pos < 0 or v > best:
                                        best = v
                                        best_pos = pos + c
                        y[p, od, oh, ow] = best
                        if want_idx:
                            if best_pos < 0:
                                idx[p, od, oh, ow] = -1
                            elif col_major:
                                c = best_pos % W
                                r = (best_pos // W) % H
                                z = best_pos // (W * H)
                                idx[p, od, oh, ow] = p * D * H * W + z + r * D + c * D * H
                            else:
                                idx[p, od, oh, ow] = p * D * H * W + best_pos
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
    cdef Py_ssize_t p, od, oh, ow, i, j, k, zb, rb, cb, pos, kl, kh
    cdef int64_t cnt
    cdef float acc
    cdef const float* plane
    cdef const float* row
    if y.shape[0] != P or d_lo.shape[0] != OD or h_lo.shape[0] != OH or w_lo.shape[0] != OW:
        raise ValueError("avg_pool: output or tap-range shapes do not match")
    if d_cnt.shape[0] != OD or h_cnt.shape[0] != OH or w_cnt.shape[0] != OW:
        raise ValueError("avg_pool: divisor shapes do not match")
    with nogil:
        for p in range(P):
            plane = &x[p, 0, 0, 0]
            for od in range(OD):
                zb = od * sd - pd
                for oh in range(OH):
                    rb = oh * sh - ph
                    for ow in range(OW):
                        cb = ow * sw - pw
                        kl = w_lo[ow]
                        kh = w_hi[ow]
                        acc = 0
                        for i in range(d_lo[od], d_hi[od]):
                            for j in range(h_lo[oh], h_hi[oh]):
                                pos = ((zb + i * dd) * H + rb + j * dh) * W + cb
                                row = plane + pos
                                if dw == 1:
                                    for k in range(kl, kh):
                                        acc = acc + row[k]
                                else:
                                    for k in range(kl, kh):
                                        acc = acc + row[k * dw]
                        cnt = d_cnt[od] * h_cnt[oh] * w_cnt[ow]
                        y[p, od, oh, ow] = acc / cnt if cnt > 0 else 0
    return None
