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

#endif
