/* Element-wise float32 loops fed with numpy's exp (cython/src/rk_elementwise.c), used by
 * rknnlite._native.elementwise_kernels. */
#ifndef RK_ELEMENTWISE_H
#define RK_ELEMENTWISE_H

#include <stddef.h>
#include "rk_api.h"

/* w[i] = erf(x[i]) for i < n, float32; on entry w[i] holds the exp term elementwise_kernels.pyx
 * computed with numpy for x[i] (see erf there). */
RK_API void rkl_erf_from_exp(const float *x, float *w, ptrdiff_t n);
/* w[i] = gelu(x[i]) (erf form) for i < n, float32; on entry w[i] holds the exp term
 * elementwise_kernels.pyx computed with numpy for x[i] (see gelu there). */
RK_API void rkl_gelu_from_exp(const float *x, float *w, ptrdiff_t n);

/* Softmax of rows rows of n contiguous float32 values (n >= 1): y = exp(x - max) / sum, the sum
 * accumulated in double; a nan in a row makes the whole row nan (as numpy's max does).  x and y
 * may be the same array. */
RK_API void rkl_softmax_rows(const float *x, float *y, ptrdiff_t rows, ptrdiff_t n);

/* A vendor int8 conv's lookup-table stage (rknnlite/backends/software/ops/vendor_lut.py): the two
 * tables laid end to end in both (le_n entries of LE, then lo_n of LO; entries step index units
 * apart over [le_start, le_end] and [lo_start, lo_end], adjacent: le_end == lo_start), the slopes
 * beyond them and the output conversion to int8. */
typedef struct {
    const double *both;
    ptrdiff_t le_n, lo_n;
    double index_offset, le_start, le_end, lo_start, lo_end, step;
    double le_uflow_slope, lo_oflow_slope, out_multiplier, out_zero_point, out_scale;
} rkl_lut;
/* For each of rows rows of inner values (row r in channel r % channels): u = acc * index_scale[c] +
 * index_offset (double); t interpolated in LO for u in [lo_start, lo_end], in LE for u in
 * [le_start, lo_start), extended by the slopes outside; out = (clip(floor(t * out_multiplier + 0.5)
 * + out_zero_point, -128, 127) - out_zero_point) * out_scale, rounded to float32; nan stays nan. */
RK_API void rkl_lut_rows(const float *acc, float *out, ptrdiff_t rows, ptrdiff_t inner, const double *index_scale,
                         ptrdiff_t channels, const rkl_lut *p);

/* RKNN-Toolkit2's mmse fake quantization, all in float32: for each of outer blocks of channels
 * channels of inner values (value i of channel c), q = rint(x / step[c]) + zp[c], clipped to
 * [qmin, qmax] (nan stays nan), y = (q - zp[c]) * step[c].  x and y may be the same array. */
RK_API void rkl_fake_quant(const float *x, float *y, ptrdiff_t outer, ptrdiff_t channels, ptrdiff_t inner,
                           const float *step, const float *zp, float qmin, float qmax);

/* RKNN-Toolkit2's mean squared error (its libcpputils2 mean_squared_error, AVX path) of each of
 * rows rows of n = npieces * len float32 values, u against v, into out[r] (double), where row r
 * of v is pieces[0][r * len ...] then pieces[1][r * len ...] and so on (len values each: the
 * pieces are read in place, never copied together; one piece is a plain rows x n array):
 * d = (u - v) * (u - v) in float32, eight float32 running sums over the blocks of eight
 * (i = 0, 8, ... while i + 8 <= n), folded as ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7))
 * in float32, the remaining d added in double one after another, the total divided by n
 * (n >= 1); inf and nan propagate. */
RK_API void rkl_mmse_pieces(const float *u, const float *const *pieces, ptrdiff_t npieces, ptrdiff_t len,
                            double *out, ptrdiff_t rows);

#endif
