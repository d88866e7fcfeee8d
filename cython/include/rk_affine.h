/* Per-channel affine transform with a fused activation (cython/src/rk_affine.c), used by
 * rknnlite._native.affine_kernels. */
#ifndef RK_AFFINE_H
#define RK_AFFINE_H

#include "rk_api.h"

/* y[r * inner + i] = act(x[r * inner + i] * scale[r % C] + shift[r % C]) for rows r in [r0, r1)
 * of inner float32 values each (y may be x), product and sum rounded separately (no FMA).  kind:
 * 0 none, 1 min(max(v, lo), hi), 2 LeakyRelu with slope alpha.  AVX2 clone chosen at run time. */
RK_API void rka_channel_affine(const float *x, float *y, long r0, long r1, long C, long inner,
                               const float *scale, const float *shift, int kind, float lo, float hi,
                               float alpha);

#endif
