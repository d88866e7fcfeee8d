/* Template of the Winograd transforms for one ISA, included by cython/src/rk_conv.c once per
 * ISA with:
 *   RK_WI_SUFFIX  name suffix of the functions (generic, avx2, avx512);
 *   RK_WI_ATTR    their attributes (the target of the ISA, or nothing);
 *   RK_WI_VEC     0: the loops are plain C over floats, which the compiler vectorises for the
 *                 target; 16: the input transforms run on explicit AVX-512 vectors of 16 floats
 *                 (masked at the end of a chunk), as the compiler leaves their second loop scalar;
 *                 4: the same on NEON vectors of 4 floats (a chunk's last partial vector goes
 *                 through rk_neon_load_part / rk_neon_store_part below).
 * One body per transform: F(4x4, 3x3) input / output (rk_wino_in_*, rk_wino_out_*) and
 * F(2x2, 3x3) input / output (rk_wino2_in_*, rk_wino2_out_*); see rk_conv.c for the layouts.
 * With RK_WI_VEC 0 every formula expands to the same C expression, operation for operation,
 * for every ISA. */

/* Before the output transforms' loops over tiles, whose streams (rows of Mt, of buf) never
   overlap: without it GCC needs more run-time alias checks than it allows and leaves the loops
   scalar on aarch64. */
#if defined(__clang__)
#define RK_WI_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define RK_WI_IVDEP _Pragma("GCC ivdep")
#else
#define RK_WI_IVDEP
#endif

#define RK_WI_CAT_(a, b) a##_##b
#define RK_WI_CAT(a, b) RK_WI_CAT_(a, b)
#define RK_WI_FN(name) RK_WI_CAT(name, RK_WI_SUFFIX)

#if RK_WI_VEC == 16
#define RK_V __m512
#define RK_W 16
#define RK_MASK(n) __mmask16 m_ = rk_mask16(0, (int)RK_MIN(16, (n)))
#define RK_LD_IN(p) _mm512_maskz_loadu_ps(m_, (p))     /* image phases: unaligned, masked */
#define RK_LD_TMP(p) _mm512_load_ps(p)                 /* buf: 64-byte aligned rows */
#define RK_ST_TMP(p, v) _mm512_store_ps((p), (v))
#define RK_ST_OUT(p, v) _mm512_mask_storeu_ps((p), m_, (v))
#define RK_ADD(a, b) _mm512_add_ps((a), (b))
#define RK_SUB(a, b) _mm512_sub_ps((a), (b))
#define RK_MUL(a, b) _mm512_mul_ps((a), (b))
#define RK_K(c) _mm512_set1_ps(c)
#elif RK_WI_VEC == 4
#ifndef RK_NEON_PARTS
#define RK_NEON_PARTS
/* The first n (< 4) floats at p, the other lanes zero; and the first n lanes of v stored to p. */
static inline float32x4_t rk_neon_load_part(const float *p, long n) {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (long i = 0; i < n; i++) t[i] = p[i];
    return vld1q_f32(t);
}
static inline void rk_neon_store_part(float *p, float32x4_t v, long n) {
    float t[4];
    vst1q_f32(t, v);
    for (long i = 0; i < n; i++) p[i] = t[i];
}
#endif
#define RK_V float32x4_t
#define RK_W 4
#define RK_MASK(n) long n_ = (n)
#define RK_LD_IN(p) (n_ >= 4 ? vld1q_f32(p) : rk_neon_load_part((p), n_))
#define RK_LD_TMP(p) vld1q_f32(p)                     /* buf rows: RK_WIN_CHUNK floats, a multiple of 4 */
#define RK_ST_TMP(p, v) vst1q_f32((p), (v))
#define RK_ST_OUT(p, v) (n_ >= 4 ? vst1q_f32((p), (v)) : rk_neon_store_part((p), (v), n_))
#define RK_ADD(a, b) vaddq_f32((a), (b))
#define RK_SUB(a, b) vsubq_f32((a), (b))
#define RK_MUL(a, b) vmulq_f32((a), (b))
#define RK_K(c) vdupq_n_f32(c)
#elif RK_WI_VEC == 0
#define RK_V float
#define RK_W 1
#define RK_MASK(n) (void)0
#define RK_LD_IN(p) (*(p))
#define RK_LD_TMP(p) (*(p))
#define RK_ST_TMP(p, v) (*(p) = (v))
#define RK_ST_OUT(p, v) (*(p) = (v))
#define RK_ADD(a, b) ((a) + (b))
#define RK_SUB(a, b) ((a) - (b))
#define RK_MUL(a, b) ((a) * (b))
#define RK_K(c) (c)
#else
#error "RK_WI_VEC must be 0, 4 or 16"
#endif

/* The 1-D transforms on RK_W positions: B^T of F(4x4, 3x3) (6 points) and of F(2x2, 3x3)
   (4 points), from a0.. into the rows o0.. at offset q through the store ST. */
#define RK_WI_B6(ST, o0, o1, o2, o3, o4, o5, q) do {                                          \
    ST((o0) + (q), RK_ADD(RK_SUB(RK_MUL(RK_K(4.0f), a0), RK_MUL(RK_K(5.0f), a2)), a4));    \
    ST((o1) + (q), RK_ADD(RK_ADD(RK_MUL(RK_K(-4.0f), RK_ADD(a1, a2)), a3), a4));           \
    ST((o2) + (q), RK_ADD(RK_SUB(RK_MUL(RK_K(4.0f), RK_SUB(a1, a2)), a3), a4));            \
    ST((o3) + (q), RK_ADD(RK_SUB(RK_MUL(RK_K(2.0f), RK_SUB(a3, a1)), a2), a4));            \
    ST((o4) + (q), RK_ADD(RK_SUB(RK_MUL(RK_K(2.0f), RK_SUB(a1, a3)), a2), a4));            \
    ST((o5) + (q), RK_ADD(RK_SUB(RK_MUL(RK_K(4.0f), a1), RK_MUL(RK_K(5.0f), a3)), a5));    \
} while (0)
#define RK_WI_B4(ST, o0, o1, o2, o3, q) do {                                                  \
    ST((o0) + (q), RK_SUB(a0, a2)); ST((o1) + (q), RK_ADD(a1, a2));                         \
    ST((o2) + (q), RK_SUB(a2, a1)); ST((o3) + (q), RK_SUB(a1, a3));                         \
} while (0)

/* F(4x4, 3x3) input transform (see rk_conv.c).  buf: 36 * RK_WIN_CHUNK floats. */
RK_WI_ATTR static void RK_WI_FN(rk_wino_in)(RK_WIN_ARGS) {
    long Ws = TW + 1, plane = (TH + 1) * Ws, total = C * plane;
    float *tmp = buf;
    for (long f0 = 0; f0 < total; f0 += RK_WIN_CHUNK) {
        long L = RK_MIN(RK_WIN_CHUNK, total - f0);
        for (long j = 0; j < 6; j++) {
            const float *d[6];
            for (long i = 0; i < 6; i++)
                d[i] = S + ((i % 4) * 4 + j % 4) * ss + (i / 4) * Ws + j / 4 + f0;
            const float *restrict d0 = d[0], *restrict d1 = d[1], *restrict d2 = d[2];
            const float *restrict d3 = d[3], *restrict d4 = d[4], *restrict d5 = d[5];
            float *restrict t0 = tmp + j * RK_WIN_CHUNK, *restrict t1 = t0 + 6 * RK_WIN_CHUNK;
            float *restrict t2 = t1 + 6 * RK_WIN_CHUNK, *restrict t3 = t2 + 6 * RK_WIN_CHUNK;
            float *restrict t4 = t3 + 6 * RK_WIN_CHUNK, *restrict t5 = t4 + 6 * RK_WIN_CHUNK;
            for (long q = 0; q < L; q += RK_W) {
                RK_MASK(L - q);
                RK_V a0 = RK_LD_IN(d0 + q), a1 = RK_LD_IN(d1 + q), a2 = RK_LD_IN(d2 + q);
                RK_V a3 = RK_LD_IN(d3 + q), a4 = RK_LD_IN(d4 + q), a5 = RK_LD_IN(d5 + q);
                RK_WI_B6(RK_ST_TMP, t0, t1, t2, t3, t4, t5, q);
            }
        }
        for (long a = 0; a < 6; a++) {
            const float *restrict e0 = tmp + a * 6 * RK_WIN_CHUNK, *restrict e1 = e0 + RK_WIN_CHUNK;
            const float *restrict e2 = e1 + RK_WIN_CHUNK, *restrict e3 = e2 + RK_WIN_CHUNK;
            const float *restrict e4 = e3 + RK_WIN_CHUNK, *restrict e5 = e4 + RK_WIN_CHUNK;
            float *restrict v0 = V + (6 * a) * ldv + f0;
            float *restrict v1 = v0 + ldv, *restrict v2 = v1 + ldv, *restrict v3 = v2 + ldv;
            float *restrict v4 = v3 + ldv, *restrict v5 = v4 + ldv;
            for (long q = 0; q < L; q += RK_W) {
                RK_MASK(L - q);
                RK_V a0 = RK_LD_TMP(e0 + q), a1 = RK_LD_TMP(e1 + q), a2 = RK_LD_TMP(e2 + q);
                RK_V a3 = RK_LD_TMP(e3 + q), a4 = RK_LD_TMP(e4 + q), a5 = RK_LD_TMP(e5 + q);
                RK_WI_B6(RK_ST_OUT, v0, v1, v2, v3, v4, v5, q);
            }
        }
    }
}

/* F(4x4, 3x3) output transform: y[m][4ty + i][4tx + j] = bias[m] + (A^T M A)[i][j] (cropped to
   OH x OW) from Mt[xi * ldx + m * T + t], t = ty * TW + tx, then residual and activation.
   buf: 40 * T floats. */
RK_WI_ATTR static void RK_WI_FN(rk_wino_out)(RK_WOUT_ARGS) {
    long T = TH * TW;
    float *s1 = buf, *s2 = buf + 24 * T;
    for (long m = 0; m < M; m++) {
        float b0 = bias ? bias[m] : 0.0f;
        float *ym = y + m * ldc;
        for (long a = 0; a < 6; a++) {
            const float *q0 = Mt + (6 * a) * ldx + m * T;
            const float *q1 = q0 + ldx, *q2 = q1 + ldx, *q3 = q2 + ldx, *q4 = q3 + ldx, *q5 = q4 + ldx;
            float *r0 = s1 + a * 4 * T, *r1 = r0 + T, *r2 = r1 + T, *r3 = r2 + T;
            RK_WI_IVDEP
            for (long t = 0; t < T; t++) {
                float m0 = q0[t], m1 = q1[t], m2 = q2[t], m3 = q3[t], m4 = q4[t], m5 = q5[t];
                float p12 = m1 + m2, n12 = m1 - m2, p34 = m3 + m4, n34 = m3 - m4;
                r0[t] = m0 + p12 + p34;
                r1[t] = n12 + 2.0f * n34;
                r2[t] = p12 + 4.0f * p34;
                r3[t] = n12 + 8.0f * n34 + m5;
            }
        }
        for (long j = 0; j < 4; j++) {
            const float *q0 = s1 + j * T, *q1 = q0 + 4 * T, *q2 = q1 + 4 * T;
            const float *q3 = q2 + 4 * T, *q4 = q3 + 4 * T, *q5 = q4 + 4 * T;
            float *r0 = s2 + j * T, *r1 = r0 + 4 * T, *r2 = r1 + 4 * T, *r3 = r2 + 4 * T;
            RK_WI_IVDEP
            for (long t = 0; t < T; t++) {
                float m0 = q0[t], m1 = q1[t], m2 = q2[t], m3 = q3[t], m4 = q4[t], m5 = q5[t];
                float p12 = m1 + m2, n12 = m1 - m2, p34 = m3 + m4, n34 = m3 - m4;
                r0[t] = b0 + m0 + p12 + p34;
                r1[t] = b0 + n12 + 2.0f * n34;
                r2[t] = b0 + p12 + 4.0f * p34;
                r3[t] = b0 + n12 + 8.0f * n34 + m5;
            }
        }
        if (act && !res) rk_act_apply(s2, 16 * T, act);
        long full = RK_MIN(TW, OW / 4);
        for (long ty = 0; ty < TH; ty++) {
            for (long i = 0; i < 4; i++) {
                long row = 4 * ty + i;
                if (row >= OH) break;
                float *yr = ym + row * OW;
                const float *o0 = s2 + (4 * i) * T + ty * TW, *o1 = o0 + T, *o2 = o1 + T, *o3 = o2 + T;
                for (long tx = 0; tx < full; tx++) {
                    yr[4 * tx] = o0[tx]; yr[4 * tx + 1] = o1[tx];
                    yr[4 * tx + 2] = o2[tx]; yr[4 * tx + 3] = o3[tx];
                }
                for (long col = 4 * full; col < OW; col++) yr[col] = o0[(col % 4) * T + col / 4];
            }
        }
        if (res) rk_res_act_apply(ym, res + m * ldc, OH * OW, act);
    }
}

/* F(2x2, 3x3) input transform.  buf: 16 * RK_WIN_CHUNK floats. */
RK_WI_ATTR static void RK_WI_FN(rk_wino2_in)(RK_WIN_ARGS) {
    long Ws = TW + 1, plane = (TH + 1) * Ws, total = C * plane;
    float *tmp = buf;
    for (long f0 = 0; f0 < total; f0 += RK_WIN_CHUNK) {
        long L = RK_MIN(RK_WIN_CHUNK, total - f0);
        for (long j = 0; j < 4; j++) {
            const float *d[4];
            for (long i = 0; i < 4; i++)
                d[i] = S + ((i % 2) * 2 + j % 2) * ss + (i / 2) * Ws + j / 2 + f0;
            const float *restrict d0 = d[0], *restrict d1 = d[1], *restrict d2 = d[2];
            const float *restrict d3 = d[3];
            float *restrict t0 = tmp + j * RK_WIN_CHUNK, *restrict t1 = t0 + 4 * RK_WIN_CHUNK;
            float *restrict t2 = t1 + 4 * RK_WIN_CHUNK, *restrict t3 = t2 + 4 * RK_WIN_CHUNK;
            for (long q = 0; q < L; q += RK_W) {
                RK_MASK(L - q);
                RK_V a0 = RK_LD_IN(d0 + q), a1 = RK_LD_IN(d1 + q), a2 = RK_LD_IN(d2 + q);
                RK_V a3 = RK_LD_IN(d3 + q);
                RK_WI_B4(RK_ST_TMP, t0, t1, t2, t3, q);
            }
        }
        for (long a = 0; a < 4; a++) {
            const float *restrict e0 = tmp + a * 4 * RK_WIN_CHUNK, *restrict e1 = e0 + RK_WIN_CHUNK;
            const float *restrict e2 = e1 + RK_WIN_CHUNK, *restrict e3 = e2 + RK_WIN_CHUNK;
            float *restrict v0 = V + (4 * a) * ldv + f0;
            float *restrict v1 = v0 + ldv, *restrict v2 = v1 + ldv, *restrict v3 = v2 + ldv;
            for (long q = 0; q < L; q += RK_W) {
                RK_MASK(L - q);
                RK_V a0 = RK_LD_TMP(e0 + q), a1 = RK_LD_TMP(e1 + q), a2 = RK_LD_TMP(e2 + q);
                RK_V a3 = RK_LD_TMP(e3 + q);
                RK_WI_B4(RK_ST_OUT, v0, v1, v2, v3, q);
            }
        }
    }
}

/* F(2x2, 3x3) output transform.  buf: 12 * T floats. */
RK_WI_ATTR static void RK_WI_FN(rk_wino2_out)(RK_WOUT_ARGS) {
    long T = TH * TW;
    float *s1 = buf, *s2 = buf + 8 * T;
    for (long m = 0; m < M; m++) {
        float b0 = bias ? bias[m] : 0.0f;
        float *ym = y + m * ldc;
        for (long a = 0; a < 4; a++) {
            const float *q0 = Mt + (4 * a) * ldx + m * T;
            const float *q1 = q0 + ldx, *q2 = q1 + ldx, *q3 = q2 + ldx;
            float *r0 = s1 + a * 2 * T, *r1 = r0 + T;
            RK_WI_IVDEP
            for (long t = 0; t < T; t++) {
                float m1 = q1[t], m2 = q2[t];
                r0[t] = q0[t] + m1 + m2;
                r1[t] = m1 - m2 - q3[t];
            }
        }
        for (long j = 0; j < 2; j++) {
            const float *q0 = s1 + j * T, *q1 = q0 + 2 * T, *q2 = q1 + 2 * T, *q3 = q2 + 2 * T;
            float *r0 = s2 + j * T, *r1 = r0 + 2 * T;
            RK_WI_IVDEP
            for (long t = 0; t < T; t++) {
                float m1 = q1[t], m2 = q2[t];
                r0[t] = b0 + (q0[t] + m1 + m2);
                r1[t] = b0 + (m1 - m2 - q3[t]);
            }
        }
        if (act && !res) rk_act_apply(s2, 4 * T, act);
        long full = RK_MIN(TW, OW / 2);
        for (long ty = 0; ty < TH; ty++) {
            for (long i = 0; i < 2; i++) {
                long row = 2 * ty + i;
                if (row >= OH) break;
                float *yr = ym + row * OW;
                const float *o0 = s2 + (2 * i) * T + ty * TW, *o1 = o0 + T;
                for (long tx = 0; tx < full; tx++) { yr[2 * tx] = o0[tx]; yr[2 * tx + 1] = o1[tx]; }
                if (2 * full < OW) yr[2 * full] = o0[full];
            }
        }
        if (res) rk_res_act_apply(ym, res + m * ldc, OH * OW, act);
    }
}

#undef RK_WI_IVDEP
#undef RK_WI_B4
#undef RK_WI_B6
#undef RK_K
#undef RK_MUL
#undef RK_SUB
#undef RK_ADD
#undef RK_ST_OUT
#undef RK_ST_TMP
#undef RK_LD_TMP
#undef RK_LD_IN
#undef RK_MASK
#undef RK_W
#undef RK_V
#undef RK_WI_FN
#undef RK_WI_CAT
#undef RK_WI_CAT_
#undef RK_WI_VEC
#undef RK_WI_ATTR
#undef RK_WI_SUFFIX
