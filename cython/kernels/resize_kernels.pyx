# cython: language_level=3
"""Resampling loops of the software backend (Resize, Upsample), run without the GIL.

Resize is separable: every resized axis is one pass over a 3-D view
``(outer, L, inner)`` of the tensor, where output position ``j`` along the axis
combines the input rows ``idx[j, t]`` with weights ``w[j, t]`` (taps ``t``).  Nearest
neighbour is a pure gather, done on the raw bytes of any element type (the caller
views the data as an unsigned integer of the same width).
"""

from libc.stdint cimport int64_t
from libc.string cimport memcpy

ctypedef fused word_t:
    unsigned char
    unsigned short
    unsigned int
    unsigned long long


def gather_axis(const word_t[:, :, ::1] x, word_t[:, :, ::1] y, const int64_t[::1] idx):
    """``y[o, j, :] = x[o, idx[j], :]`` (nearest neighbour along the middle axis).

    x: (outer, L, inner), y: (outer, len(idx), inner), both C-contiguous, same element
    width.  Indices must lie in ``[0, L)`` (not checked).
    """
    cdef Py_ssize_t outer = x.shape[0], inner = x.shape[2], n = idx.shape[0]
    cdef Py_ssize_t L = x.shape[1], o, j
    cdef const word_t* src
    cdef word_t* dst
    if y.shape[0] != outer or y.shape[1] != n or y.shape[2] != inner:
        raise ValueError("gather_axis: output has the wrong shape")
    if outer == 0 or n == 0 or inner == 0:
        return None
    if L == 0:
        raise ValueError("gather_axis: empty input axis")
    with nogil:
        for o in range(outer):
            src = &x[o, 0, 0]
            dst = &y[o, 0, 0]
            if inner == 1:
                for j in range(n):
                    dst[j] = src[idx[j]]
            else:
                for j in range(n):
                    memcpy(dst + j * inner, src + idx[j] * inner, inner * sizeof(word_t))
    return None


def nearest_2d(const word_t[:, :, ::1] x, word_t[:, :, ::1] y, const int64_t[::1] ih, const int64_t[::1] iw):
    """``y[p, i, j] = x[p, ih[i], iw[j]]``: nearest-neighbour resize of the last two axes.

    x: (P, H, W), y: (P, len(ih), len(iw)), C-contiguous, same element width.  An
    output row repeating the previous one's source row is copied from it.
    """
    cdef Py_ssize_t P = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef Py_ssize_t OH = ih.shape[0], OW = iw.shape[0], p, i, j
    cdef const word_t* src
    cdef word_t* dst
    if y.shape[0] != P or y.shape[1] != OH or y.shape[2] != OW:
        raise ValueError("nearest_2d: output has the wrong shape")
    if P == 0 or OH == 0 or OW == 0:
        return None
    if H == 0 or W == 0:
        raise ValueError("nearest_2d: empty input axis")
    with nogil:
        for p in range(P):
            for i in range(OH):
                dst = &y[p, i, 0]
                if i > 0 and ih[i] == ih[i - 1]:
                    memcpy(dst, dst - OW, OW * sizeof(word_t))
                    continue
                src = &x[p, ih[i], 0]
                for j in range(OW):
                    dst[j] = src[iw[j]]
    return None


def interp_axis(const float[:, :, ::1] x, float[:, :, ::1] y, const int64_t[:, ::1] idx, const float[:, ::1] w):
    """``y[o, j, :] = sum_t w[j, t] * x[o, idx[j, t], :]`` (one separable resampling pass).

    x: (outer, L, inner) float32, y: (outer, n_out, inner) float32, C-contiguous;
    idx/w: (n_out, taps), indices in ``[0, L)`` (not checked).
    """
    cdef Py_ssize_t outer = x.shape[0], inner = x.shape[2], n = idx.shape[0], taps = idx.shape[1]
    cdef Py_ssize_t o, j, t, k
    cdef const float* src
    cdef const float* row
    cdef float* dst
    cdef float* out_row
    cdef const int64_t* ip
    cdef const float* wp
    cdef float acc, wt
    if y.shape[0] != outer or y.shape[1] != n or y.shape[2] != inner:
        raise ValueError("interp_axis: output has the wrong shape")
    if w.shape[0] != n or w.shape[1] != taps:
        raise ValueError("interp_axis: weights and indices differ in shape")
    if outer == 0 or n == 0 or inner == 0:
        return None
    if x.shape[1] == 0 or taps == 0:
        raise ValueError("interp_axis: empty input axis or no taps")
    ip = &idx[0, 0]
    wp = &w[0, 0]
    with nogil:
        for o in range(outer):
            src = &x[o, 0, 0]
            dst = &y[o, 0, 0]
            if inner == 1:
                if taps == 2:
                    for j in range(n):
                        dst[j] = wp[2 * j] * src[ip[2 * j]] + wp[2 * j + 1] * src[ip[2 * j + 1]]
                else:
                    for j in range(n):
                        acc = 0
                        for t in range(taps):
                            acc = acc + wp[j * taps + t] * src[ip[j * taps + t]]
                        dst[j] = acc
            else:
                for j in range(n):
                    out_row = dst + j * inner
                    wt = wp[j * taps]
                    row = src + ip[j * taps] * inner
                    for k in range(inner):
                        out_row[k] = wt * row[k]
                    for t in range(1, taps):
                        wt = wp[j * taps + t]
                        row = src + ip[j * taps + t] * inner
                        for k in range(inner):
                            out_row[k] = out_row[k] + wt * row[k]
    return None
