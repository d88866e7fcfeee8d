/* Block-sparse (CSR) GEMM of sparse Conv layers (cython/src/rk_sparse.c), used by
 * rknnlite._native.sparse_kernels. */
#ifndef RK_SPARSE_H
#define RK_SPARSE_H

#include <stdint.h>
#include "rk_api.h"

/* Y[m, n] = sum_j vals[j] * X[cols[j], n] over the non-zeros j of row m (blocked along K by blk,
 * nkb blocks), for n0 <= n < n1; xs / ys: row strides of X / Y in floats.  See csr_gemm in
 * sparse_kernels.pyx. */
RK_API void rks_csr_generic(const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M,
                            const float *X, long xs, float *Y, long ys, long n0, long n1);
/* The same with AVX2+FMA (falls back to rks_csr_generic where AVX2 cannot be built). */
RK_API void rks_csr_avx2(const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M,
                         const float *X, long xs, float *Y, long ys, long n0, long n1);
/* 1 when rks_csr_avx2 may run on this CPU. */
RK_API int rks_has_avx2(void);

#endif
