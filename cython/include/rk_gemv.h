/* Matrix-vector product of a row-major matrix (cython/src/rk_gemv.c), used by
 * rknnlite._native.conv_kernels for a classifier's few-row products. */
#ifndef RK_GEMV_H
#define RK_GEMV_H

#include "rk_api.h"

/* y[j] = sum_k x[k] * w[j * ldw + k] for rows j in [j0, j1), k < K.  Each row's sum is formed the
 * same way whatever range or group of rows it is computed in (per-row partial sums over k in a
 * fixed order), so a split over threads never changes a value.  isa: 2 AVX-512F, 1 AVX2+FMA,
 * 0 generic C (x86-64; elsewhere the generic C). */
RK_API void rk_gemv_rows(int isa, const float *x, const float *w, long ldw, long K, float *y, long j0, long j1);

#endif
