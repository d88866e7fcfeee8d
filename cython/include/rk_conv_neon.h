/* The NEON micro-kernel of the gather GEMM (aarch64), included by cython/src/rk_conv.c where
 * RK_NEON is set, after <arm_neon.h>, rk_conv.h, rk_conv_tile.h and RK_MIN.  The intrinsics it
 * uses: vld1q_f32, vst1q_f32, vdupq_n_f32, vfmaq_laneq_f32, vaddq_f32, vmulq_f32, vmaxq_f32,
 * vminq_f32, vcltq_f32, vbslq_f32 (and vsubq_f32 in the Winograd template's 4-lane form);
 * tests/native/neon_emulated.h gives C versions of them, so its checks run on any host.
 * Packed layouts: see "gather GEMM" in rk_conv.c. */
#ifndef RK_CONV_NEON_H
#define RK_CONV_NEON_H

/* ---- NEON (aarch64): MR x NR = 8 x 12 (vectors of 4 along n, 24 of the 32 q registers
   accumulate; 3 hold the B row, 2 the A column).  Every aarch64 core has it: on an RK3588's
   Cortex-A76 two 128-bit FMA pipes, on the A55/A53 of the other SoCs one. */
#define KN_MR 8
#define KN_NR 12

#define RK_LEAKY128(v, al) vbslq_f32(vcltq_f32((v), vdupq_n_f32(0.0f)), vmulq_f32((v), (al)), (v))
#define RK_ACT_TILE128(ACC, R, V, act) \
    RK_ACT_TILE(ACC, R, V, act, float32x4_t, vdupq_n_f32, vmaxq_f32, vminq_f32, RK_LEAKY128)

/* B block into panels of 12 columns (RK_PACKB_BODY of rk_conv_tile.h). */
static void rk_packB_neon(const float *P, const int32_t *off, const int32_t *idx,
                          long k0, long kc, long n0, long nc, float *Bp) RK_PACKB_BODY(KN_NR)

/* Row r of the tile += a[r] * (b0, b1, b2): a[r] is lane L of the A vector AV. */
#define RK_NEON_ROW(R, AV, L)                                   \
    do {                                                         \
        acc[R][0] = vfmaq_laneq_f32(acc[R][0], b0, AV, L);       \
        acc[R][1] = vfmaq_laneq_f32(acc[R][1], b1, AV, L);       \
        acc[R][2] = vfmaq_laneq_f32(acc[R][2], b2, AV, L);       \
    } while (0)

/* Where a tile's 8 x 12 values are read from: c itself (row stride ldc) when the tile is full,
   else tmp (row stride 12) holding its mv x nv values and zeros. */
static inline const float *rk_neon_tile_src(const float *c, long ldc, int mv, int nv, float *tmp, long *ld) {
    if (mv == KN_MR && nv == KN_NR) { *ld = ldc; return c; }
    for (int r = 0; r < KN_MR; r++)
        for (int t = 0; t < KN_NR; t++) tmp[r * KN_NR + t] = (r < mv && t < nv) ? c[r * ldc + t] : 0.0f;
    *ld = KN_NR;
    return tmp;
}

/* C tile (mv x nv of 8 x 12) += A panel (kc x 8) * B panel (kc x 12); first: start from the
   bias (or zero) instead of C.  rc: residual added after the last K block (mirrors c).
   pf, npf: see rk_a_prefetch. */
static void rk_kernel_neon(long kc, const float *a, const float *b, float *c, long ldc,
                           int first, const float *bias, int mv, int nv, const rk_act *act,
                           const float *rc, const float *pf, long npf) {
    float32x4_t acc[KN_MR][3];
    float tmp[KN_MR * KN_NR];
    int full = (mv == KN_MR && nv == KN_NR);
    if (first) {
        for (int r = 0; r < KN_MR; r++) {
            float32x4_t init = vdupq_n_f32(bias ? bias[r < mv ? r : 0] : 0.0f);
            acc[r][0] = acc[r][1] = acc[r][2] = init;
        }
    } else {
        long ld;
        const float *src = rk_neon_tile_src(c, ldc, mv, nv, tmp, &ld);
        for (int r = 0; r < KN_MR; r++)
            for (int v = 0; v < 3; v++) acc[r][v] = vld1q_f32(src + r * ld + 4 * v);
    }
    for (long k = 0; k < kc; k++) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
        if (k < npf) __builtin_prefetch(pf + 16 * k, 0, 2);   /* see rk_a_prefetch */
        RK_NEON_ROW(0, a0, 0); RK_NEON_ROW(1, a0, 1); RK_NEON_ROW(2, a0, 2); RK_NEON_ROW(3, a0, 3);
        RK_NEON_ROW(4, a1, 0); RK_NEON_ROW(5, a1, 1); RK_NEON_ROW(6, a1, 2); RK_NEON_ROW(7, a1, 3);
        a += KN_MR;
        b += KN_NR;
    }
    if (rc) {   /* residual: rc mirrors c */
        long ld;
        const float *src = rk_neon_tile_src(rc, ldc, mv, nv, tmp, &ld);
        for (int r = 0; r < KN_MR; r++)
            for (int v = 0; v < 3; v++) acc[r][v] = vaddq_f32(acc[r][v], vld1q_f32(src + r * ld + 4 * v));
    }
    if (act) RK_ACT_TILE128(acc, KN_MR, 3, act);
    if (full) {
        for (int r = 0; r < KN_MR; r++)
            for (int v = 0; v < 3; v++) vst1q_f32(c + r * ldc + 4 * v, acc[r][v]);
    } else {
        for (int r = 0; r < KN_MR; r++)
            for (int v = 0; v < 3; v++) vst1q_f32(tmp + r * KN_NR + 4 * v, acc[r][v]);
        for (int r = 0; r < mv; r++)
            for (int t = 0; t < nv; t++) c[r * ldc + t] = tmp[r * KN_NR + t];
    }
}

#endif
