/* Vector passes of the software executor (cython/src/rk_executor.c), used by
 * rknnlite._native.executor_kernels. */
#ifndef RK_EXECUTOR_H
#define RK_EXECUTOR_H

#include "rk_api.h"

/* 1 when AVX2 and F16C run here (the two passes below do work), else 0. */
RK_API int rke_vector_ok(void);
/* d[i] = s[i] rounded to float16 precision (round to nearest even, NaN bits kept; d may be s)
 * for the leading values it handles; returns how many (a multiple of 8; 0 without AVX2). */
RK_API long rke_round_fp16_avx2(const float *s, float *d, long n);
/* d[i] = (clip(rint(s[i] / scale) + zp, qmin, qmax) - zp) * scale for the leading values it
 * handles; returns how many (0 without AVX2). */
RK_API long rke_fake_quant_avx2(const float *s, float *d, long n, float scale, float zp, float qmin,
                                float qmax);
/* d[i] = rint(s[i] / scale) for the leading values it handles; returns how many (0 without AVX2). */
RK_API long rke_codes_avx2(const float *s, float *d, long n, float scale);
/* d[i] = (clip(rint(s[i] * mul) + zp, qmin, qmax) - zp) * scale (the product in double) for the
 * leading values it handles; returns how many (0 without AVX2). */
RK_API long rke_requant_avx2(const float *s, float *d, long n, double mul, float zp, float qmin, float qmax,
                             float scale);
/* d[i] = (clip(rint(v / scale) + zp, qmin, qmax) - zp) * scale, v = acc[i] * step + res[i] (then
 * max(v, 0) when relu), in float32, for the leading values it handles; returns how many (0 without AVX2). */
RK_API long rke_add_requant_avx2(const float *acc, const float *res, float *d, long n, float step, float scale,
                                 float zp, float qmin, float qmax, int relu);

#endif
