/* float32 passes of the pooling kernels (cython/src/rk_pooling.c), used by
 * rknnlite._native.pool_kernels: the separable max and sum passes its module docstring
 * describes, in the exact order of operations of its generic loops (same results on every
 * path).  isa: 2 AVX-512F, 1 AVX2 (x86-64; NEON on aarch64 is the baseline build), 0 baseline;
 * a level the CPU lacks must not be passed (rkp_cpu_level). */
#ifndef RK_POOLING_H
#define RK_POOLING_H

#include <stddef.h>
#include "rk_api.h"

/* The best level this CPU executes. */
RK_API int rkp_cpu_level(void);
/* d[0:n] = element-wise max of the nr >= 1 rows base + offs[j], in order: u = row 0, then
 * u = v > u ? v : u for each later row's v.  spec: the 3-row case in one loop. */
RK_API void rkp_vert_max(int isa, float *d, const float *base, const ptrdiff_t *offs, int nr, ptrdiff_t n,
                         int spec);
/* d[0:n] = element-wise sum of the nr >= 1 rows base + offs[j], added in order. */
RK_API void rkp_vert_sum(int isa, float *d, const float *base, const ptrdiff_t *offs, int nr, ptrdiff_t n,
                         int spec);
/* out[o] = max of t[o*sw + k*dw] over k in [0, kw), taps in order, for o < OW.  spec: the
 * kernel 2 or 3, stride 1 or 2, dilation 1 cases in their own loops. */
RK_API void rkp_horiz_max(int isa, float *out, const float *t, ptrdiff_t OW, int kw, int sw, int dw, int spec);
/* out[o] = (sum of t[o*sw + k*dw] over k in [0, kw), in order) * inv[o]. */
RK_API void rkp_horiz_avg(int isa, float *out, const float *t, ptrdiff_t OW, int kw, int sw, int dw,
                          const float *inv, int spec);
/* Whether rkp_narrow_pool takes a 2-D window of this geometry at level isa: no dilation along W,
 * and with AVX-512F (isa 2) stride 1 (kernel <= 17) or 2 (kernel <= 32), pw + W <= 64, OW <= 32;
 * with AVX2 (isa 1 on x86-64) half of each (kernel <= 9 or 16, pw + W <= 32, OW <= 16), stride 1
 * only up to 8 outputs.  Never on other machines. */
RK_API int rkp_narrow_fits(int isa, ptrdiff_t W, ptrdiff_t OW, int kw, int sw, int dw, int pw);
/* Whole planes of max (is_max) or average pooling: for each of the planes (input stride in_stride,
 * output nq x OW), output row q reduces its nrows[q] real input rows (offsets offs[q * per + j] into
 * the plane) element-wise in order, then each output column reduces its kw taps of that row padded
 * with pw leading and enough trailing ident values (-inf, or the dtype's empty value, for max; 0 for
 * sums), in tap order; sums are then multiplied by inv[q * OW + o].  The row passes' exact order of
 * operations, so the same results.  Only for a geometry rkp_narrow_fits accepts. */
RK_API void rkp_narrow_pool(int isa, int is_max, float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride,
                            ptrdiff_t W, ptrdiff_t OW, ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs,
                            int per, int kw, int sw, int pw, float ident, const float *inv);

#endif
