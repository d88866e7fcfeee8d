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

#endif
