/* Convolution hot loops of the software backend (see rk_conv.h and conv_kernels.pyx). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "rk_conv.h"
#include "rk_conv_tile.h"
#include "rk_cpu.h"

#if RK_X86
#include <immintrin.h>
#endif
#if RK_NEON
#include <arm_neon.h>
#endif

#define RK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RK_MAX(a, b) ((a) > (b) ? (a) : (b))

/* floor(a / b) for b > 0 and any sign of a */
static inline long rk_floordiv(long a, long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Output positions o in [lo, hi) whose input coordinate o*s + t lies in [0, n). */
static inline void rk_valid_range(long n, long s, long t, long out, long *lo, long *hi) {
    long a = rk_floordiv(-t + s - 1, s);        /* ceil(-t / s) */
    long b = rk_floordiv(n - 1 - t, s) + 1;
    if (a < 0) a = 0;
    if (b > out) b = out;
    if (b < a) b = a;
    *lo = a; *hi = b;
}

/* 0: no micro-kernel (use BLAS); 1: AVX2+FMA (x86) or NEON (aarch64); 2: AVX-512F. */
int rk_isa_level(void) { return rk_cpu_level(); }

/* ---------------------------------------------------------------- fused activation
   Applied by every output stage (micro-kernel stores, Winograd output transform,
   depthwise, BLAS bias pass) to the finished values: kind 1 clips to [lo, hi] as
   min(max(x, lo), hi) (Relu: lo = 0, hi = +inf), kind 2 is LeakyRelu (x < 0 ? alpha*x : x).
   The operand order keeps nan: max(lo, x) and min(hi, x) return x when x is nan,
   like numpy's maximum / minimum.  A NULL rk_act (or kind 0) applies nothing (rk_act: rk_conv.h). */

#define RK_ACT_BODY {                                                                   \
    if (!a || a->kind == 0) return;                                                     \
    if (a->kind == 1) {                                                                 \
        float lo = a->lo, hi = a->hi;                                                   \
        for (long i = 0; i < n; i++) {                                                  \
            float v = p[i];                                                             \
            v = lo > v ? lo : v;                                                        \
            p[i] = hi < v ? hi : v;                                                     \
        }                                                                               \
    } else {                                                                            \
        float al = a->alpha;                                                            \
        for (long i = 0; i < n; i++) { float v = p[i]; p[i] = v < 0.0f ? v * al : v; }  \
    }                                                                                   \
}
/* p[i] = act(p[i]) for i < n (cache-hot data: a just-written plane or tile) */
static void rk_act_apply(float *p, long n, const rk_act *a) RK_ACT_BODY

/* Residual (fused Add): p[i] = act(p[i] + r[i]) for i < n; the same float32 sum as the
   separate Add kernel, the activation after it. */
static void rk_res_act_apply(float *p, const float *r, long n, const rk_act *a) {
    for (long i = 0; i < n; i++) p[i] += r[i];
    rk_act_apply(p, n, a);
}

/* ---------------------------------------------------------------- im2col / col2im
   Image (C, D, H, W), channels cs floats apart; output grid (OD, OH, OW); tap (a, i, j) of channel c reads
   (od*sd - pd + a*dd, oh*sh - ph + i*dh, ow*sw - pw + j*dw).  Row r = ((c*kd + a)*kh + i)*kw + j
   of cols holds that tap for every output position. */
void rk_im2col(const float *x, long C, long D, long H, long W, long cs,
                      long kd, long kh, long kw, long sd, long sh, long sw,
                      long dd, long dh, long dw, long pd, long ph, long pw,
                      long OD, long OH, long OW, float *cols, int accumulate_back) {
    long plane = OD * OH * OW;
    for (long c = 0; c < C; c++)
    for (long a = 0; a < kd; a++)
    for (long i = 0; i < kh; i++)
    for (long j = 0; j < kw; j++) {
        float *row = cols + (((c * kd + a) * kh + i) * kw + j) * plane;
        long xlo, xhi;
        rk_valid_range(W, sw, j * dw - pw, OW, &xlo, &xhi);
        for (long od = 0; od < OD; od++) {
            long id = od * sd - pd + a * dd;
            for (long oh = 0; oh < OH; oh++) {
                long ih = oh * sh - ph + i * dh;
                float *dst = row + (od * OH + oh) * OW;
                if (id < 0 || id >= D || ih < 0 || ih >= H) {
                    if (!accumulate_back) memset(dst, 0, OW * sizeof(float));
                    continue;
                }
                /* src[ow * sw] is the input pixel of output column ow */
                const float *src = x + c * cs + (id * H + ih) * W + (j * dw - pw);
                if (accumulate_back) {
                    /* col2im: scatter-add cols back into the image */
                    float *img = (float *)src;
                    if (sw == 1) for (long o = xlo; o < xhi; o++) img[o] += dst[o];
                    else for (long o = xlo; o < xhi; o++) img[o * sw] += dst[o];
                    continue;
                }
                if (xlo > 0) memset(dst, 0, xlo * sizeof(float));
                if (sw == 1) { if (xhi > xlo) memcpy(dst + xlo, src + xlo, (xhi - xlo) * sizeof(float)); }
                else for (long o = xlo; o < xhi; o++) dst[o] = src[o * sw];
                if (xhi < OW) memset(dst + xhi, 0, (OW - xhi) * sizeof(float));
            }
        }
    }
}

#if RK_X86
/* 8 x 8 block: d[c * ldd + r] = s[r * lds + c]. */
__attribute__((target("avx2")))
static inline void rk_tr8x8(const float *s, long lds, float *d, long ldd) {
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds), r2 = _mm256_loadu_ps(s + 2 * lds);
    __m256 r3 = _mm256_loadu_ps(s + 3 * lds), r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds);
    __m256 r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

__attribute__((target("avx2")))
static long rk_transpose_avx2(const float *src, long rows, long cols, long lds, float *dst, long ldd) {
    long r8 = rows & ~7L, c8 = cols & ~7L;
    for (long r0 = 0; r0 < r8; r0 += 8)
        for (long c0 = 0; c0 < c8; c0 += 8) rk_tr8x8(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
    /* ragged right columns and bottom rows */
    for (long r = 0; r < rows; r++)
        for (long c = (r < r8 ? c8 : 0); c < cols; c++) dst[c * ldd + r] = src[r * lds + c];
    return 1;
}
#endif

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols, in 16 x 16 blocks. */
void rk_transpose(const float *src, long rows, long cols, long lds, float *dst, long ldd) {
#if RK_X86
    if (rk_isa_level() >= 1) { rk_transpose_avx2(src, rows, cols, lds, dst, ldd); return; }
#endif
    for (long r0 = 0; r0 < rows; r0 += 16)
    for (long c0 = 0; c0 < cols; c0 += 16) {
        long r1 = RK_MIN(rows, r0 + 16), c1 = RK_MIN(cols, c0 + 16);
        for (long c = c0; c < c1; c++)
            for (long r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
    }
}

/* ---------------------------------------------------------------- phase split
   P[c][a][b][e][z][y][x] = X[c][z*sd + a - pd][y*sh + b - ph][x*sw + e - pw] (0 outside),
   plane (Ds, Hs, Ws).  A stride-s convolution becomes a stride-1 one on the phase planes. */
static int rk_isa_cached = -1;

#if RK_X86
/* dst[i] = src[i * 4] for i < n; reads stay below src[(n - 1) * 4 + 1].  (Stride 2 has its own
   split, rk_phase_split_w2.) */
__attribute__((target("avx512f")))
static long rk_strided_copy4_512(float *dst, const float *src, long n) {
    const __m512i ix = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i jx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31);
    long i = 0;
    for (; i + 16 < n; i += 16) {
        const float *p = src + 4 * i;
        __m512 lo = _mm512_permutex2var_ps(_mm512_loadu_ps(p), ix, _mm512_loadu_ps(p + 16));
        __m512 hi = _mm512_permutex2var_ps(_mm512_loadu_ps(p + 32), ix, _mm512_loadu_ps(p + 48));
        _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(lo, jx, hi));
    }
    return i;
}

/* Bit l set for the lanes l < 16 with 0 <= j + l < W. */
static inline unsigned rk_lanes_inside(long j, long W) {
    long lo = j < 0 ? -j : 0, hi = W - j < 16 ? W - j : 16;
    return hi <= lo ? 0u : ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}

/* Both column phases of one input row of a stride-2 split: d0[x] = R[2x], d1[x] = R[2x + 1] for
   x < Ws, R[j] = src[j - pw] inside [0, W), 0 outside.  Masked loads read only the row's own
   floats (masked-off lanes touch no memory), so the padding costs nothing extra; a row is a
   pair of loads, two permutes and two stores per 16 outputs, where the per-phase strided copy
   paid a call and a scalar tail per phase and row (most of the split of a 14x14 image). */
__attribute__((target("avx512f")))
static void rk_row_w2_512(const float *src, long W, long pw, long Ws, float *d0, float *d1) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (long o = 0; o < Ws; o += 16) {
        long j = 2 * o - pw;
        __m512 lo = _mm512_maskz_loadu_ps((__mmask16)rk_lanes_inside(j, W), src + j);
        __m512 hi = _mm512_maskz_loadu_ps((__mmask16)rk_lanes_inside(j + 16, W), src + j + 16);
        __mmask16 m = (__mmask16)(Ws - o >= 16 ? 0xffffu : (1u << (Ws - o)) - 1u);
        _mm512_mask_storeu_ps(d0 + o, m, _mm512_permutex2var_ps(lo, ev, hi));
        _mm512_mask_storeu_ps(d1 + o, m, _mm512_permutex2var_ps(lo, od, hi));
    }
}

/* rk_row_w2_512 in 8 lanes: maskload reads only the lanes inside the row; a permute puts each
   half's even lanes low and odd lanes high, and 128-bit permutes pair them up. */
__attribute__((target("avx2,fma")))
static void rk_row_w2_avx2(const float *src, long W, long pw, long Ws, float *d0, float *d1) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i parity = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256i before = _mm256_set1_epi32(-1), width = _mm256_set1_epi32((int)W);
    for (long o = 0; o < Ws; o += 8) {
        long j = 2 * o - pw;
        __m256i ja = _mm256_add_epi32(lane, _mm256_set1_epi32((int)j));
        __m256i jb = _mm256_add_epi32(ja, _mm256_set1_epi32(8));
        __m256i ma = _mm256_and_si256(_mm256_cmpgt_epi32(ja, before), _mm256_cmpgt_epi32(width, ja));
        __m256i mb = _mm256_and_si256(_mm256_cmpgt_epi32(jb, before), _mm256_cmpgt_epi32(width, jb));
        __m256 a = _mm256_permutevar8x32_ps(_mm256_maskload_ps(src + j, ma), parity);
        __m256 b = _mm256_permutevar8x32_ps(_mm256_maskload_ps(src + j + 8, mb), parity);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(Ws - o < 8 ? Ws - o : 8)), lane);
        _mm256_maskstore_ps(d0 + o, m, _mm256_permute2f128_ps(a, b, 0x20));
        _mm256_maskstore_ps(d1 + o, m, _mm256_permute2f128_ps(a, b, 0x31));
    }
}

typedef void (*rk_row_w2_fn)(const float *, long, long, long, float *, float *);

/* rk_phase_split for sw == 2: the column phases of each row pair come from one pass over it. */
static void rk_phase_split_w2(rk_row_w2_fn row, const float *x, long C, long D, long H, long W, long sd,
                              long sh, long pd, long ph, long pw, long Ds, long Hs, long Ws, float *P) {
    long plane = Ds * Hs * Ws;
    for (long c = 0; c < C; c++)
    for (long a = 0; a < sd; a++)
    for (long b = 0; b < sh; b++) {
        float *p0 = P + ((c * sd + a) * sh + b) * 2 * plane, *p1 = p0 + plane;
        for (long z = 0; z < Ds; z++) {
            long iz = z * sd + a - pd;
            for (long y = 0; y < Hs; y++) {
                long iy = y * sh + b - ph, r = (z * Hs + y) * Ws;
                if (iz < 0 || iz >= D || iy < 0 || iy >= H) {
                    memset(p0 + r, 0, Ws * sizeof(float));
                    memset(p1 + r, 0, Ws * sizeof(float));
                } else {
                    row(x + ((c * D + iz) * H + iy) * W, W, pw, Ws, p0 + r, p1 + r);
                }
            }
        }
    }
}
#endif

static void rk_strided_copy(int isa, float *dst, const float *src, long n, long s) {
    long i = 0;
#if RK_X86
    if (isa >= 2 && s == 4) i = rk_strided_copy4_512(dst, src, n);
#else
    (void)isa;
#endif
    for (; i < n; i++) dst[i] = src[i * s];
}

#define RK_PS_ARGS int isa, const float *x, long C, long D, long H, long W, long sd, long sh, long sw, \
                   long pd, long ph, long pw, long Ds, long Hs, long Ws, float *P
#define RK_PS_BODY { \
    for (long c = 0; c < C; c++) \
    for (long a = 0; a < sd; a++) \
    for (long b = 0; b < sh; b++) \
    for (long e = 0; e < sw; e++) { \
        float *pl = P + (((c * sd + a) * sh + b) * sw + e) * Ds * Hs * Ws; \
        long xlo, xhi; \
        rk_valid_range(W, sw, e - pw, Ws, &xlo, &xhi); \
        for (long z = 0; z < Ds; z++) { \
            long iz = z * sd + a - pd; \
            for (long y = 0; y < Hs; y++) { \
                long iy = y * sh + b - ph; \
                float *dst = pl + (z * Hs + y) * Ws; \
                if (iz < 0 || iz >= D || iy < 0 || iy >= H) { memset(dst, 0, Ws * sizeof(float)); continue; } \
                const float *src = x + ((c * D + iz) * H + iy) * W + (e - pw); \
                if (sw != 1) { \
                    for (long o = 0; o < xlo; o++) dst[o] = 0.0f; \
                    if (xhi > xlo) rk_strided_copy(isa, dst + xlo, src + xlo * sw, xhi - xlo, sw); \
                    for (long o = xhi; o < Ws; o++) dst[o] = 0.0f; \
                    continue; \
                } \
                if (xlo > 0) memset(dst, 0, xlo * sizeof(float)); \
                if (xhi > xlo) memcpy(dst + xlo, src + xlo, (xhi - xlo) * sizeof(float)); \
                if (xhi < Ws) memset(dst + xhi, 0, (Ws - xhi) * sizeof(float)); \
            } \
        } \
    } \
}

static void rk_phase_split_generic(RK_PS_ARGS) RK_PS_BODY
#if RK_X86
__attribute__((target("avx2,fma"))) static void rk_phase_split_avx2(RK_PS_ARGS) RK_PS_BODY
__attribute__((target("avx512f"))) static void rk_phase_split_avx512(RK_PS_ARGS) RK_PS_BODY
#endif
void rk_phase_split(RK_PS_ARGS) {
#if RK_X86
    if (sw == 2 && isa >= 1) {
        rk_phase_split_w2(isa >= 2 ? rk_row_w2_512 : rk_row_w2_avx2, x, C, D, H, W, sd, sh, pd, ph, pw, Ds, Hs, Ws, P);
        return;
    }
    if (isa >= 2) { rk_phase_split_avx512(isa, x, C, D, H, W, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, P); return; }
    if (isa == 1) { rk_phase_split_avx2(isa, x, C, D, H, W, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, P); return; }
#endif
    rk_phase_split_generic(isa, x, C, D, H, W, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, P);
}

/* Winograd weight transform: u[(A*a + b) * MC + p] = (G k G^T)[a, b] for each 3x3 kernel k = w + 9 p,
   G (A x 3, double), the sums of three products as one multiply and two fused multiply-adds in index
   order (rows of G k, then of that times G^T), rounded to float32 at the end: bit for bit what
   numpy's einsum over OpenBLAS (dgemm, K = 3) computed before on the x86-64 hosts measured, now the
   same on every CPU (fma is exact: the generic path's libm call gives the same values). */
#define RK_WW_ARGS const float *w, long MC, const double *G, int A, float *u
#define RK_WW_BODY { \
    for (long p = 0; p < MC; p++) { \
        const float *k = w + 9 * p; \
        double t[6][3]; \
        for (int a = 0; a < A; a++) \
            for (int j = 0; j < 3; j++) \
                t[a][j] = fma((double)k[6 + j], G[3 * a + 2], \
                              fma((double)k[3 + j], G[3 * a + 1], (double)k[j] * G[3 * a])); \
        for (int a = 0; a < A; a++) \
            for (int b = 0; b < A; b++) \
                u[(long)(a * A + b) * MC + p] = (float)fma(t[a][2], G[3 * b + 2], \
                                                           fma(t[a][1], G[3 * b + 1], t[a][0] * G[3 * b])); \
    } \
}
static void rk_wino_weights_generic(RK_WW_ARGS) RK_WW_BODY
#if RK_X86
__attribute__((target("avx2,fma"))) static void rk_wino_weights_fma(RK_WW_ARGS) RK_WW_BODY
#endif
void rk_wino_weights(RK_WW_ARGS) {
    if (A < 1 || A > 6) return;
    if (rk_isa_cached < 0) rk_isa_cached = rk_isa_level();
#if RK_X86
    if (rk_isa_cached >= 1) { rk_wino_weights_fma(w, MC, G, A, u); return; }
#endif
    rk_wino_weights_generic(w, MC, G, A, u);
}

/* ---------------------------------------------------------------- depthwise
   Output channel m reads input channel m / mult (group == C, M == C * mult).
   pad: scratch plane of (H + pt + pb) * (W + pl + pr) floats. */

/* Outputs of a few columns (a split global pool's 7x7/7 stages: 2x2 outputs per plane): the
   plane loop below would run a handful of iterations per tap, so 16 channels go side by side
   instead.  Each output is its bias plus the taps in row-major order (padding taps add w * 0,
   as from a padded plane), every step a product then a sum, never one fused multiply-add
   (GCC: fp-contract=off; clang fuses only within one expression, and the product is a
   statement of its own): the same bits on every SIMD level and CPU. */
#if defined(__GNUC__) && !defined(__clang__)
#define RK_DW_UNFUSED __attribute__((optimize("fp-contract=off")))
#else
#define RK_DW_UNFUSED
#endif
#define RK_DW_FEW_COLUMNS                                                                \
    (mult == 1 && OW < 8 && !(kh == 3 && kw == 3 && dh == 1 && dw == 1 && (sw == 1 || sw == 2)))
#define RK_DW_FEW_BODY                                                                   \
    (void)C; (void)mult; (void)pb; (void)pr; (void)pad;                                  \
    for (long m0 = 0; m0 < M; m0 += 16) {                                                \
        long nb = RK_MIN(16, M - m0);                                                    \
        for (long oy = 0; oy < OH; oy++)                                                 \
        for (long ox = 0; ox < OW; ox++) {                                               \
            float acc[16];                                                               \
            for (long l = 0; l < nb; l++) acc[l] = bias ? bias[m0 + l] : 0.0f;           \
            for (long i = 0; i < kh; i++) {                                              \
                long iy = oy * sh + i * dh - pt;                                         \
                for (long j = 0; j < kw; j++) {                                          \
                    long ix = ox * sw + j * dw - pl;                                     \
                    const float *ws = w + m0 * kh * kw + i * kw + j;                     \
                    if (iy >= 0 && iy < H && ix >= 0 && ix < W) {                        \
                        const float *xs = x + m0 * H * W + iy * W + ix;                  \
                        for (long l = 0; l < nb; l++) {                                  \
                            float p = ws[l * kh * kw] * xs[l * H * W];                   \
                            acc[l] = acc[l] + p;                                         \
                        }                                                                \
                    } else {                                                             \
                        for (long l = 0; l < nb; l++) {                                  \
                            float p = ws[l * kh * kw] * 0.0f;                            \
                            acc[l] = acc[l] + p;                                         \
                        }                                                                \
                    }                                                                    \
                }                                                                        \
            }                                                                            \
            for (long l = 0; l < nb; l++) y[(m0 + l) * OH * OW + oy * OW + ox] = acc[l]; \
        }                                                                                \
        for (long m = m0; m < m0 + nb; m++) {                                            \
            float *ym = y + m * OH * OW;                                                 \
            if (res) rk_res_act_apply(ym, res + m * OH * OW, OH * OW, act);              \
            else if (act) rk_act_apply(ym, OH * OW, act);                                \
        }                                                                                \
    }

#define RK_DW_BODY                                                                       \
    (void)C;                        /* implied by M and mult */                         \
    long HP = H + pt + pb, WP = W + pl + pr;                                            \
    for (long m = 0; m < M; m++) {                                                      \
        const float *xc = x + (m / mult) * H * W;                                       \
        const float *wm = w + m * kh * kw;                                              \
        float b0 = bias ? bias[m] : 0.0f;                                               \
        float *ym = y + m * OH * OW;                                                    \
        const float *src = xc;                                                          \
        long ld = W;                                                                    \
        if (pt || pb || pl || pr) {                                                     \
            if (m % mult == 0) {                                                        \
                memset(pad, 0, HP * WP * sizeof(float));                                \
                for (long r = 0; r < H; r++)                                            \
                    memcpy(pad + (r + pt) * WP + pl, xc + r * W, W * sizeof(float));    \
            }                                                                           \
            src = pad; ld = WP;                                                         \
        }                                                                               \
        if (kh == 3 && kw == 3 && dh == 1 && dw == 1 && sw == 1) {                      \
            float w0 = wm[0], w1 = wm[1], w2 = wm[2], w3 = wm[3], w4 = wm[4];           \
            float w5 = wm[5], w6 = wm[6], w7 = wm[7], w8 = wm[8];                       \
            for (long oy = 0; oy < OH; oy++) {                                          \
                const float *r0 = src + oy * sh * ld, *r1 = r0 + ld, *r2 = r1 + ld;     \
                float *o = ym + oy * OW;                                                \
                for (long ox = 0; ox < OW; ox++)                                        \
                    o[ox] = b0 + w0 * r0[ox] + w1 * r0[ox + 1] + w2 * r0[ox + 2]        \
                               + w3 * r1[ox] + w4 * r1[ox + 1] + w5 * r1[ox + 2]        \
                               + w6 * r2[ox] + w7 * r2[ox + 1] + w8 * r2[ox + 2];       \
            }                                                                           \
        } else if (kh == 3 && kw == 3 && dh == 1 && dw == 1 && sw == 2) {               \
            float w0 = wm[0], w1 = wm[1], w2 = wm[2], w3 = wm[3], w4 = wm[4];           \
            float w5 = wm[5], w6 = wm[6], w7 = wm[7], w8 = wm[8];                       \
            for (long oy = 0; oy < OH; oy++) {                                          \
                const float *r0 = src + oy * sh * ld, *r1 = r0 + ld, *r2 = r1 + ld;     \
                float *o = ym + oy * OW;                                                \
                for (long ox = 0; ox < OW; ox++)                                        \
                    o[ox] = b0 + w0 * r0[2 * ox] + w1 * r0[2 * ox + 1] + w2 * r0[2 * ox + 2] \
                               + w3 * r1[2 * ox] + w4 * r1[2 * ox + 1] + w5 * r1[2 * ox + 2] \
                               + w6 * r2[2 * ox] + w7 * r2[2 * ox + 1] + w8 * r2[2 * ox + 2];\
            }                                                                           \
        } else {                                                                        \
            for (long oy = 0; oy < OH; oy++) {                                          \
                float *o = ym + oy * OW;                                                \
                for (long ox = 0; ox < OW; ox++) o[ox] = b0;                            \
                for (long i = 0; i < kh; i++) {                                         \
                    const float *r = src + (oy * sh + i * dh) * ld;                     \
                    for (long j = 0; j < kw; j++) {                                     \
                        float wv = wm[i * kw + j];                                      \
                        const float *p = r + j * dw;                                    \
                        if (sw == 1) for (long ox = 0; ox < OW; ox++) o[ox] += wv * p[ox]; \
                        else for (long ox = 0; ox < OW; ox++) o[ox] += wv * p[ox * sw]; \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
        }                                                                               \
        if (res) rk_res_act_apply(ym, res + m * OH * OW, OH * OW, act);                 \
        else if (act) rk_act_apply(ym, OH * OW, act);                                   \
    }

#define RK_DW_ARGS const float *x, long C, long H, long W, const float *w, long M, long mult,   \
                   long kh, long kw, long sh, long sw, long dh, long dw,                        \
                   long pt, long pl, long pb, long pr, long OH, long OW,                        \
                   const float *bias, float *y, float *pad, const rk_act *act, const float *res

static void rk_depthwise_generic(RK_DW_ARGS) { RK_DW_BODY }
RK_DW_UNFUSED static void rk_depthwise_few_generic(RK_DW_ARGS) { RK_DW_FEW_BODY }
#if RK_X86
__attribute__((target("avx2,fma"))) static void rk_depthwise_avx2(RK_DW_ARGS) { RK_DW_BODY }
__attribute__((target("avx512f"))) static void rk_depthwise_avx512(RK_DW_ARGS) { RK_DW_BODY }
RK_DW_UNFUSED __attribute__((target("avx2"))) static void rk_depthwise_few_avx2(RK_DW_ARGS) { RK_DW_FEW_BODY }
RK_DW_UNFUSED __attribute__((target("avx512f"))) static void rk_depthwise_few_avx512(RK_DW_ARGS) { RK_DW_FEW_BODY }
#endif

#if RK_X86
static inline __mmask16 rk_mask16(int lo, int hi) {   /* lanes [lo, hi) of 16 */
    if (hi <= lo) return 0;
    unsigned m = hi >= 16 ? 0xFFFFu : ((1u << hi) - 1u);
    return (__mmask16)(m & ~((1u << lo) - 1u));
}

/* Activation of a register (see rk_act; a non-NULL act with kind 1 or 2). */
__attribute__((target("avx512f")))
static inline __m512 rk_act512(__m512 v, const rk_act *a) {
    if (a->kind == 1) return _mm512_min_ps(_mm512_set1_ps(a->hi), _mm512_max_ps(_mm512_set1_ps(a->lo), v));
    return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, _mm512_set1_ps(a->alpha));
}

/* Depthwise 3x3 (undilated, stride 1 or 2 along x, 1 or 2 along y) for AVX-512, straight from
   the image: columns in the padding are masked to zero, rows in the padding read a zero row
   (no padded copy).  Four output rows at a time: every input row is loaded once (three
   column-shifted vectors) for all the output rows it feeds, and the four accumulation
   chains run in parallel; each output still sums its taps in row-major order. */
#define RK_DW3_ROWS(SH)                                                                        \
    for (long oy0 = 0; oy0 < OH; oy0 += 4) {                                                   \
        long base = oy0 * (SH) - pt;                                                           \
        __m512 acc0 = bias0, acc1 = bias0, acc2 = bias0, acc3 = bias0;                         \
        _Pragma("GCC unroll 16")                                                               \
        for (int k = 0; k < 3 * (SH) + 3; k++) {                                               \
            long ir = base + k;                                                                \
            const float *row = (ir >= 0 && ir < H) ? xc + ir * W : zero_row;                   \
            __m512 t0, t1, t2;                                                                 \
            if (sw == 1) {                                                                     \
                t0 = _mm512_maskz_loadu_ps(cm[0][0], row + c0[0]);                             \
                t1 = _mm512_maskz_loadu_ps(cm[1][0], row + c0[1]);                             \
                t2 = _mm512_maskz_loadu_ps(cm[2][0], row + c0[2]);                             \
            } else {                                                                           \
                __m512 v0 = _mm512_maskz_loadu_ps(cm[0][0], row + c0[0]);                      \
                __m512 v1 = _mm512_maskz_loadu_ps(cm[0][1], row + c0[0] + 16);                 \
                __m512 u0 = _mm512_maskz_loadu_ps(cm[2][0], row + c0[2]);                      \
                __m512 u1 = _mm512_maskz_loadu_ps(cm[2][1], row + c0[2] + 16);                 \
                t0 = _mm512_permutex2var_ps(v0, ev, v1);                                       \
                t1 = _mm512_permutex2var_ps(v0, od, v1);                                       \
                t2 = _mm512_permutex2var_ps(u0, ev, u1);                                       \
            }                                                                                  \
            RK_DW3_TAP(acc0, k);                                                               \
            RK_DW3_TAP(acc1, k - (SH));                                                        \
            RK_DW3_TAP(acc2, k - 2 * (SH));                                                    \
            RK_DW3_TAP(acc3, k - 3 * (SH));                                                    \
        }                                                                                      \
        __m512 res[4] = {acc0, acc1, acc2, acc3};                                              \
        for (long r = 0; r < 4 && oy0 + r < OH; r++) {                                         \
            __m512 v = res[r];                                                                 \
            if (rs) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(om, rs + (oy0 + r) * OW + ox));     \
            if (act) v = rk_act512(v, act);                                                    \
            _mm512_mask_storeu_ps(ym + (oy0 + r) * OW + ox, om, v);                            \
        }                                                                                      \
    }
/* tap row I (a compile-time constant after unrolling) of one output row */
#define RK_DW3_TAP(ACC, I)                                                                     \
    if ((I) >= 0 && (I) <= 2) {                                                                \
        ACC = _mm512_fmadd_ps(wv[3 * ((I) < 0 ? 0 : (I) > 2 ? 2 : (I))], t0, ACC);              \
        ACC = _mm512_fmadd_ps(wv[3 * ((I) < 0 ? 0 : (I) > 2 ? 2 : (I)) + 1], t1, ACC);          \
        ACC = _mm512_fmadd_ps(wv[3 * ((I) < 0 ? 0 : (I) > 2 ? 2 : (I)) + 2], t2, ACC);          \
    }

__attribute__((target("avx512f")))
static void rk_depthwise3x3_512(RK_DW_ARGS) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    (void)pb; (void)pr; (void)kh; (void)kw; (void)dh; (void)dw; (void)C;
    /* a zero row, long enough for every masked read of a padding row */
    const float *zero_row = pad + 16;
    memset(pad, 0, (W + 64) * sizeof(float));
    for (long m = 0; m < M; m++) {
        const float *xc = x + (m / mult) * H * W;
        const float *wm = w + m * 9;
        __m512 wv[9];
        for (int t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(wm[t]);
        __m512 bias0 = _mm512_set1_ps(bias ? bias[m] : 0.0f);
        float *ym = y + m * OH * OW;
        const float *rs = res ? res + m * OH * OW : NULL;   /* this plane's residual */
        for (long ox = 0; ox < OW; ox += 16) {
            int nv = (int)RK_MIN(16, OW - ox);
            __mmask16 om = rk_mask16(0, nv);
            /* lane l of tap column j reads image column c0[j] + l (sw == 1), or element l of
               the 32 floats from c0[j] (sw == 2); valid when inside [0, W) */
            __mmask16 cm[3][2];
            long c0[3];
            for (int j = 0; j < 3; j++) {
                long c = sw == 1 ? ox - pl + j : 2 * ox - pl + (j == 2 ? 2 : 0);
                long lo = -c, hi = W - c;
                c0[j] = c;
                cm[j][0] = rk_mask16((int)RK_MAX(0, RK_MIN(16, lo)), (int)RK_MAX(0, RK_MIN(16, hi)));
                cm[j][1] = rk_mask16((int)RK_MAX(0, RK_MIN(16, lo - 16)), (int)RK_MAX(0, RK_MIN(16, hi - 16)));
                if (sw == 1) cm[j][0] &= om;
            }
            if (sh == 1) { RK_DW3_ROWS(1) } else { RK_DW3_ROWS(2) }
        }
    }
}
#endif

void rk_depthwise(int isa, RK_DW_ARGS) {
    if (RK_DW_FEW_COLUMNS) {
#if RK_X86
        if (isa >= 2) { rk_depthwise_few_avx512(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res); return; }
        if (isa == 1) { rk_depthwise_few_avx2(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res); return; }
#endif
        rk_depthwise_few_generic(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res);
        return;
    }
#if RK_X86
    if (isa >= 2 && kh == 3 && kw == 3 && dh == 1 && dw == 1 && (sw == 1 || sw == 2) && (sh == 1 || sh == 2)) {
        rk_depthwise3x3_512(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res);
        return;
    }
    if (isa >= 2) { rk_depthwise_avx512(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res); return; }
    if (isa == 1) { rk_depthwise_avx2(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res); return; }
#else
    (void)isa;
#endif
    rk_depthwise_generic(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res);
}

/* ---------------------------------------------------------------- Winograd F(4x4, 3x3)
   Stride-1, dilation-1 3x3 convolution: per 4x4 output tile, V = B^T d B of the 6x6 input
   patch, 36 GEMMs M_xi = U_xi V_xi over channels (U = G g G^T, from the weights), and
   Y = A^T M A.  Tiles: TH x TW, t = ty * TW + tx. */

/* Input transform on the tile grid, every channel in one flat sweep: V[xi * ldv + c * plane + q]
   for xi = 6a + b, grid tile q = ty * (TW + 1) + tx, plane = (TH + 1) * (TW + 1) (grid
   positions with tx == TW or ty == TH are padding, computed from neighbouring data and never
   read back).  S: the image zero-padded and split into 4 x 4 phases, phase-major:
   S[(r * 4 + e) * ss + c * plane + y * (TW + 1) + u] = x[c][4y + r - pt][4u + e - pl] with
   y < TH + 1, u < TW + 1, plus at least TW + 2 floats of slack after the last phase (read
   for padding positions only).  Since a channel's plane and its transformed plane have the
   same size, position f = c * plane + q of every phase maps to position f of every V row:
   the transform is one long vectorisable loop over f (in chunks of RK_WIN_CHUNK floats
   whose intermediate rows stay in L1), not C short loops of TH * (TW + 1).
   buf: 36 * RK_WIN_CHUNK floats. */

#define RK_WIN_ARGS const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf
/* y (and res): M planes of OH x OW floats, ldc floats apart */
#define RK_WOUT_ARGS const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW, \
                     const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res

/* ---------------------------------------------------------------- Winograd F(2x2, 3x3)
   Same layout with 2x2 output tiles and 4x4 patches (16 transformed components,
   xi = 4a + b): S is split into 2 x 2 phases, phase-major as above,
   S[(r * 2 + e) * ss + c * plane + y * (TW + 1) + u] = x[c][2y + r - pt][2u + e - pl];
   V = B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]; Y = A^T M A with
   A^T = [1 1 1 0; 0 1 -1 -1].  buf: 16 * RK_WIN_CHUNK floats (input), 12 * T floats (output). */

#if RK_NEON
#include "rk_conv_neon.h"
#endif

/* The four transforms per ISA, from one body each (the template rk_conv_wino.h): plain C
   for generic and AVX2+FMA (the compiler vectorises it), explicit AVX-512 or NEON vectors for
   the input transforms of AVX-512F and of NEON. */
#define RK_WI_SUFFIX generic
#define RK_WI_ATTR
#define RK_WI_VEC 0
#include "rk_conv_wino.h"
#if RK_X86
#define RK_WI_SUFFIX avx2
#define RK_WI_ATTR __attribute__((target("avx2,fma")))
#define RK_WI_VEC 0
#include "rk_conv_wino.h"
#define RK_WI_SUFFIX avx512
#define RK_WI_ATTR __attribute__((target("avx512f")))
#define RK_WI_VEC 16
#include "rk_conv_wino.h"
#endif
#if RK_NEON
#define RK_WI_SUFFIX neon
#define RK_WI_ATTR
#define RK_WI_VEC 4
#include "rk_conv_wino.h"
#endif

/* Calls fn's variant for isa (2: AVX-512F, 1: AVX2+FMA or NEON, else generic) with the arguments. */
#if RK_X86
#define RK_WI_DISPATCH(fn, ...) do {                                                          \
    if (isa >= 2) { fn##_avx512(__VA_ARGS__); return; }                                     \
    if (isa == 1) { fn##_avx2(__VA_ARGS__); return; }                                       \
    fn##_generic(__VA_ARGS__);                                                              \
} while (0)
#elif RK_NEON
#define RK_WI_DISPATCH(fn, ...) do {                                                          \
    if (isa >= 1) { fn##_neon(__VA_ARGS__); return; }                                       \
    fn##_generic(__VA_ARGS__);                                                              \
} while (0)
#else
#define RK_WI_DISPATCH(fn, ...) do { (void)isa; fn##_generic(__VA_ARGS__); } while (0)
#endif

void rk_wino_in(int isa, RK_WIN_ARGS) { RK_WI_DISPATCH(rk_wino_in, S, ss, C, TH, TW, V, ldv, buf); }
void rk_wino2_in(int isa, RK_WIN_ARGS) { RK_WI_DISPATCH(rk_wino2_in, S, ss, C, TH, TW, V, ldv, buf); }
void rk_wino_out(int isa, RK_WOUT_ARGS) {
    RK_WI_DISPATCH(rk_wino_out, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res);
}
void rk_wino2_out(int isa, RK_WOUT_ARGS) {
    RK_WI_DISPATCH(rk_wino2_out, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res);
}

/* Winograd input split, phase-major (see the F(4x4, 3x3) input transform): phase (r, e) of channel c at
   S + (r * t + e) * ss + c * Hs * Ws, S[..][y][u] = x[c][t*y + r - pt][t*u + e - pl] (0 outside
   the image), planes (Hs, Ws), t = 2 or 4.  The AVX-512 version reads each image row once and
   deals it to its t column phases with vector permutes. */
#if RK_X86
__attribute__((target("avx512f")))
static void rk_wino_split_512(const float *x, long C, long H, long W, long t, long pt, long pl,
                              long Hs, long Ws, float *S, long ss) {
    const __m512i ix4[4] = {
        _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_setr_epi32(1, 5, 9, 13, 17, 21, 25, 29, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_setr_epi32(3, 7, 11, 15, 19, 23, 27, 31, 0, 0, 0, 0, 0, 0, 0, 0)};
    const __m512i jx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i ix2[2] = {
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)};
    long plane = Hs * Ws;
    for (long c = 0; c < C; c++)
    for (long y = 0; y < Hs; y++)
    for (long r = 0; r < t; r++) {
        long iy = t * y + r - pt;
        float *dst = S + r * t * ss + c * plane + y * Ws;   /* phase (r, e) at dst + e * ss */
        if (iy < 0 || iy >= H) {
            for (long e = 0; e < t; e++) memset(dst + e * ss, 0, Ws * sizeof(float));
            continue;
        }
        const float *src = x + (c * H + iy) * W;
        for (long u0 = 0; u0 < Ws; u0 += 16) {
            __mmask16 om = rk_mask16(0, (int)RK_MIN(16, Ws - u0));
            __m512 v[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (long k = 0; k < t; k++) {
                long cb = t * u0 - pl + 16 * k;   /* image column of lane 0 */
                __mmask16 lm = rk_mask16((int)RK_MAX(0, RK_MIN(16, -cb)), (int)RK_MAX(0, RK_MIN(16, W - cb)));
                v[k] = _mm512_maskz_loadu_ps(lm, src + cb);
            }
            if (t == 4) {
                for (int e = 0; e < 4; e++) {
                    __m512 a = _mm512_permutex2var_ps(v[0], ix4[e], v[1]);
                    __m512 b = _mm512_permutex2var_ps(v[2], ix4[e], v[3]);
                    _mm512_mask_storeu_ps(dst + e * ss + u0, om, _mm512_permutex2var_ps(a, jx, b));
                }
            } else {
                for (int e = 0; e < 2; e++)
                    _mm512_mask_storeu_ps(dst + e * ss + u0, om, _mm512_permutex2var_ps(v[0], ix2[e], v[1]));
            }
        }
    }
}
#endif

void rk_wino_split(int isa, const float *x, long C, long H, long W, long t, long pt, long pl,
                          long Hs, long Ws, float *S, long ss) {
#if RK_X86
    if (isa >= 2) { rk_wino_split_512(x, C, H, W, t, pt, pl, Hs, Ws, S, ss); return; }
#else
    (void)isa;
#endif
    long plane = Hs * Ws;
    for (long c = 0; c < C; c++)
    for (long r = 0; r < t; r++)
    for (long e = 0; e < t; e++) {
        float *pl_ = S + (r * t + e) * ss + c * plane;
        for (long y = 0; y < Hs; y++) {
            long iy = t * y + r - pt;
            float *dst = pl_ + y * Ws;
            if (iy < 0 || iy >= H) { memset(dst, 0, Ws * sizeof(float)); continue; }
            const float *src = x + (c * H + iy) * W;
            for (long u = 0; u < Ws; u++) {
                long ix = t * u + e - pl;
                dst[u] = (ix >= 0 && ix < W) ? src[ix] : 0.0f;
            }
        }
    }
}

/* y[m][n] = act(y[m][n] + bias[m] + res[m][n]) for an (M, N) block with row stride ldy
   (bias, res may be NULL; res rows ldr apart): the BLAS path's one pass after np.matmul. */
#define RK_BIAS_ACT_BODY {                                                                  \
    for (long m = 0; m < M; m++) {                                                          \
        float *p = y + m * ldy;                                                             \
        if (bias) { float b = bias[m]; for (long n = 0; n < N; n++) p[n] += b; }            \
        if (res) { const float *q = res + m * ldr; for (long n = 0; n < N; n++) p[n] += q[n]; } \
        if (act) rk_act_apply(p, N, act);                                                   \
    }                                                                                       \
}
#define RK_BIAS_ACT_ARGS float *y, long M, long N, long ldy, const float *bias, const rk_act *act, \
                         const float *res, long ldr
static void rk_bias_act_generic(RK_BIAS_ACT_ARGS) RK_BIAS_ACT_BODY
#if RK_X86
__attribute__((target("avx2,fma"))) static void rk_bias_act_avx2(RK_BIAS_ACT_ARGS) RK_BIAS_ACT_BODY
#endif
void rk_bias_act(int isa, RK_BIAS_ACT_ARGS) {
#if RK_X86
    if (isa >= 1) { rk_bias_act_avx2(y, M, N, ldy, bias, act, res, ldr); return; }
#else
    (void)isa;
#endif
    rk_bias_act_generic(y, M, N, ldy, bias, act, res, ldr);
}

/* ---------------------------------------------------------------- gather GEMM
   Packed A: panels of MR rows, A_p[panel][k][MR] (rows past M are zero).
   Packed B block: panels of NR columns, B_p[panel][k][NR] (columns past N are zero). */

#if RK_X86
/* Contiguous runs of idx[n0 .. n0+w): run r covers lanes [lane[r], lane[r+1]) and
   starts at source index src[r].  Returns the number of runs. */
static int rk_runs(const int32_t *idx, long n0, long w, int *lane, int32_t *src) {
    int nr = 0;
    for (long t = 0; t < w; t++) {
        if (t == 0 || idx[n0 + t] != idx[n0 + t - 1] + 1) { lane[nr] = (int)t; src[nr] = idx[n0 + t]; nr++; }
    }
    lane[nr] = (int)w;
    return nr;
}

/* ---- AVX-512.  Normal tiles: MR x NR = 8 x 32 (vectors along n, 16 zmm accumulators).
   Transposed tiles for small N: 32 x 7 (vectors along m, written into Y^T). */
#define K5_MR 8
#define K5_NR 32
#define K5T_MR 32
#define K5T_NR 7

#define RK_LEAKY512(v, al) _mm512_mask_mul_ps((v), _mm512_cmp_ps_mask((v), _mm512_setzero_ps(), _CMP_LT_OQ), (v), (al))
#define RK_LEAKY256(v, al) _mm256_blendv_ps((v), _mm256_mul_ps((v), (al)), _mm256_cmp_ps((v), _mm256_setzero_ps(), _CMP_LT_OQ))
#define RK_ACT_TILE512(ACC, R, V, act) \
    RK_ACT_TILE(ACC, R, V, act, __m512, _mm512_set1_ps, _mm512_max_ps, _mm512_min_ps, RK_LEAKY512)
#define RK_ACT_TILE256(ACC, R, V, act) \
    RK_ACT_TILE(ACC, R, V, act, __m256, _mm256_set1_ps, _mm256_max_ps, _mm256_min_ps, RK_LEAKY256)


/* B block [k0, k0+kc) x [n0, n0+nc) into panels of pw (<= 32) columns: Bp[p][k][pw]. */
__attribute__((target("avx512f")))
static void rk_packB_512(const float *P, const int32_t *off, const int32_t *idx,
                         long k0, long kc, long n0, long nc, float *Bp, int pw, int skip_direct) {
    int lane[33];
    int32_t src[33];
    /* per vector v: cnt[v] masked loads; load o fills lanes opm[v][o] from P[off + ops[v][o] + lane] */
    int cnt[2];
    __mmask16 opm[2][17];
    int32_t ops[2][17];
    int nvec = (pw + 15) / 16;
    __mmask16 smask[2] = {rk_mask16(0, RK_MIN(pw, 16)), rk_mask16(0, pw - 16)};
    for (long p = 0; p * pw < nc; p++) {
        long nb = n0 + p * pw, w = RK_MIN(pw, n0 + nc - nb);
        float *dst = Bp + p * kc * pw;
        if (pw == 32 && w == 32 && idx[nb + 31] - idx[nb] == 31) {
            if (skip_direct) continue;
            const float *base = P + idx[nb];
            for (long k = 0; k < kc; k++) {
                const float *s = base + off[k0 + k];
                _mm512_store_ps(dst, _mm512_loadu_ps(s));
                _mm512_store_ps(dst + 16, _mm512_loadu_ps(s + 16));
                dst += 32;
            }
            continue;
        }
        int nr = rk_runs(idx, nb, w, lane, src);
        cnt[0] = cnt[1] = 0;
        for (int r = 0; r < nr; r++) {
            for (int v = lane[r] / 16; v * 16 < lane[r + 1]; v++) {
                int lo = RK_MAX(lane[r], v * 16) - v * 16, hi = RK_MIN(lane[r + 1], v * 16 + 16) - v * 16;
                int o = cnt[v]++;
                opm[v][o] = rk_mask16(lo, hi);
                ops[v][o] = src[r] + (v * 16 - lane[r]);   /* source index of lane 0 */
            }
        }
        for (long k = 0; k < kc; k++) {
            const float *s = P + off[k0 + k];
            for (int v = 0; v < nvec; v++) {
                __m512 x = _mm512_setzero_ps();
                for (int o = 0; o < cnt[v]; o++) x = _mm512_mask_loadu_ps(x, opm[v][o], s + ops[v][o]);
                _mm512_mask_storeu_ps(dst + 16 * v, smask[v], x);
            }
            dst += pw;
        }
    }
}

/* Where the lanes of a tile row go when the GEMM runs on a grid with padding columns:
   vector v stores lanes m[v][o] at c + off[v][o] + lane, o < cnt[v]. */
typedef struct { int cnt[2]; __mmask16 m[2][8]; int32_t off[2][8]; } rk_splan;

/* Plan for the nv lanes from grid position q0 (grid rows of gw, the first gow valid). */
static void rk_make_splan(rk_splan *sp, long q0, int nv, long gw, long gow) {
    long row = q0 / gw, col = q0 - row * gw, prev = -2;   /* one division, then step along */
    sp->cnt[0] = sp->cnt[1] = 0;
    for (int t = 0; t < nv; t++) {
        int v = t >> 4, l = t & 15;
        if (l == 0) prev = -2;
        if (col < gow) {
            long dst = row * gow + col;
            if (dst != prev + 1) {
                int o = sp->cnt[v]++;
                sp->m[v][o] = 0;
                sp->off[v][o] = (int32_t)(dst - l);
            }
            sp->m[v][sp->cnt[v] - 1] |= (__mmask16)(1u << l);
            prev = dst;
        } else {
            prev = -2;
        }
        if (++col == gw) { col = 0; row++; }
    }
}

/* grid store plans of a block's panels kept on the stack; more go to the heap */
#define RK_SPLAN_CACHE 128

/* C tile (mv x nv of 8 x 16*NV) += A panel (kc x 8) * B panel (kc x 32, first 16*NV used).
   DIRECT: B row k is the 16*NV floats at b + boff[k] (unpacked, straight from the image). */
#define RK_KERNEL_512(NAME, NV, DIRECT)                                                                 \
__attribute__((target("avx512f")))                                                                \
static void NAME(long kc, const float *a, const float *b, const int32_t *boff, float *c, long ldc, \
                 int first, const float *bias, int mv, int nv, const rk_splan *sp, const rk_act *act, \
                 const float *rc, const float *pf, long npf) {                                    \
    __m512 acc[K5_MR][NV];                                                                        \
    __mmask16 mask[NV];                                                                           \
    for (int v = 0; v < NV; v++) mask[v] = rk_mask16(0, nv - 16 * v);                             \
    _Pragma("GCC unroll 8")                                                                       \
    for (int r = 0; r < K5_MR; r++) {                                                             \
        _Pragma("GCC unroll 2")                                                                   \
        for (int v = 0; v < NV; v++) {                                                            \
            if (first) acc[r][v] = bias ? _mm512_set1_ps(bias[r < mv ? r : 0]) : _mm512_setzero_ps(); \
            else if (r >= mv) acc[r][v] = _mm512_setzero_ps();                                    \
            else if (!sp) acc[r][v] = _mm512_maskz_loadu_ps(mask[v], c + r * ldc + 16 * v);       \
            else {                                                                                \
                acc[r][v] = _mm512_setzero_ps();                                                  \
                for (int o = 0; o < sp->cnt[v]; o++)                                              \
                    acc[r][v] = _mm512_mask_loadu_ps(acc[r][v], sp->m[v][o], c + r * ldc + sp->off[v][o]); \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    /* the residual and output rows of a later tile along n (the next calls in A-panel order):   \
       start fetching them now, this tile's FMAs hide the memory latency; grid stores (sp) fetch \
       two panels ahead (a strided conv's big output comes from memory: the 3->64 stem 25 % faster) */ \
    if (kc >= 16) {                                                                               \
        for (int r = 0; r < mv; r++) {                                                            \
            for (int v = 0; v < NV; v++) {                                                        \
                long ahead = sp ? sp->off[v][0] + 64 : 32 + 16 * v;                               \
                if (rc) _mm_prefetch((const char *)(rc + r * ldc + ahead), _MM_HINT_T0);          \
                _mm_prefetch((const char *)(c + r * ldc + ahead), _MM_HINT_T0);                   \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    for (long k = 0; k < kc; k++) {                                                               \
        __m512 bv[NV];                                                                            \
        _Pragma("GCC unroll 2")                                                                   \
        for (int v = 0; v < NV; v++)                                                              \
            bv[v] = DIRECT ? _mm512_loadu_ps(b + boff[k] + 16 * v) : _mm512_load_ps(b + 16 * v);  \
        if (k < npf) _mm_prefetch((const char *)(pf + 16 * k), _MM_HINT_T1);  /* see rk_a_prefetch */ \
        if (DIRECT) {   /* row k of the next B panel (the next call in A-panel order) */          \
            _mm_prefetch((const char *)(b + boff[k] + 32), _MM_HINT_T0);                          \
            _mm_prefetch((const char *)(b + boff[k] + 48), _MM_HINT_T0);                          \
        }                                                                                         \
        _Pragma("GCC unroll 8")                                                                   \
        for (int r = 0; r < K5_MR; r++) {                                                         \
            __m512 av = _mm512_set1_ps(a[r]);                                                     \
            _Pragma("GCC unroll 2")                                                               \
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);       \
        }                                                                                         \
        a += K5_MR;                                                                               \
        if (!DIRECT) b += K5_NR;                                                                  \
    }                                                                                             \
    if (rc) {   /* residual: rc mirrors c (same offsets), rows past mv are never read */          \
        _Pragma("GCC unroll 8")                                                                   \
        for (int r = 0; r < K5_MR; r++) {                                                         \
            if (r >= mv) continue;                                                                \
            _Pragma("GCC unroll 2")                                                               \
            for (int v = 0; v < NV; v++) {                                                        \
                __m512 rv;                                                                        \
                if (!sp) rv = _mm512_maskz_loadu_ps(mask[v], rc + r * ldc + 16 * v);               \
                else {                                                                            \
                    rv = _mm512_setzero_ps();                                                     \
                    for (int o = 0; o < sp->cnt[v]; o++)                                          \
                        rv = _mm512_mask_loadu_ps(rv, sp->m[v][o], rc + r * ldc + sp->off[v][o]); \
                }                                                                                 \
                acc[r][v] = _mm512_add_ps(acc[r][v], rv);                                         \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    if (act) RK_ACT_TILE512(acc, K5_MR, NV, act);                                                 \
    if (sp) {                                                                                     \
        /* one contiguous full run per vector (most panels): plain stores */                     \
        int whole = 1;                                                                            \
        for (int v = 0; v < NV; v++) whole &= sp->cnt[v] == 1 && sp->m[v][0] == (__mmask16)0xFFFF; \
        if (whole) {                                                                              \
            for (int r = 0; r < mv; r++)                                                          \
                for (int v = 0; v < NV; v++) _mm512_storeu_ps(c + r * ldc + sp->off[v][0], acc[r][v]); \
        } else {                                                                                  \
            for (int r = 0; r < mv; r++)                                                          \
                for (int v = 0; v < NV; v++)                                                      \
                    for (int o = 0; o < sp->cnt[v]; o++)                                          \
                        _mm512_mask_storeu_ps(c + r * ldc + sp->off[v][o], sp->m[v][o], acc[r][v]); \
        }                                                                                         \
    } else if (mv == K5_MR && nv == 16 * NV) {                                                    \
        _Pragma("GCC unroll 8")                                                                   \
        for (int r = 0; r < K5_MR; r++) {                                                         \
            _Pragma("GCC unroll 2")                                                               \
            for (int v = 0; v < NV; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);       \
        }                                                                                         \
    } else {                                                                                      \
        for (int r = 0; r < mv; r++)                                                              \
            for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mask[v], acc[r][v]); \
    }                                                                                             \
}
RK_KERNEL_512(rk_kernel_512, 2, 0)
RK_KERNEL_512(rk_kernel_512_half, 1, 0)
RK_KERNEL_512(rk_kernel_512_direct, 2, 1)

/* Transposed: C^T tile (nv rows n of ct, ldct apart) x (mv of 32 m) += B^T * A^T.
   a: A panel (kc x 32); b: B panel (kc x 7). */
__attribute__((target("avx512f")))
static void rk_kernel_512t(long kc, const float *a, const float *b, float *ct, long ldct,
                           int first, const float *bias, int mv, int nv, const rk_act *act,
                           const float *pf, long npf) {
    __m512 acc[K5T_NR][2];
    __mmask16 mask[2] = {rk_mask16(0, mv), rk_mask16(0, mv - 16)};
    __m512 init[2];
    init[0] = bias ? _mm512_maskz_loadu_ps(mask[0], bias) : _mm512_setzero_ps();
    init[1] = bias ? _mm512_maskz_loadu_ps(mask[1], bias + 16) : _mm512_setzero_ps();
    #pragma GCC unroll 7
    for (int j = 0; j < K5T_NR; j++) {
        #pragma GCC unroll 2
        for (int v = 0; v < 2; v++)
            acc[j][v] = first ? init[v] : (j < nv ? _mm512_maskz_loadu_ps(mask[v], ct + j * ldct + 16 * v)
                                                 : _mm512_setzero_ps());
    }
    for (long k = 0; k < kc; k++) {
        __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);
        if (k < npf) _mm_prefetch((const char *)(pf + 16 * k), _MM_HINT_T1);   /* see rk_a_prefetch */
        #pragma GCC unroll 7
        for (int j = 0; j < K5T_NR; j++) {
            __m512 bj = _mm512_set1_ps(b[j]);
            acc[j][0] = _mm512_fmadd_ps(a0, bj, acc[j][0]);
            acc[j][1] = _mm512_fmadd_ps(a1, bj, acc[j][1]);
        }
        a += K5T_MR;
        b += K5T_NR;
    }
    if (act) RK_ACT_TILE512(acc, K5T_NR, 2, act);
    for (int j = 0; j < nv; j++) {
        _mm512_mask_storeu_ps(ct + j * ldct, mask[0], acc[j][0]);
        _mm512_mask_storeu_ps(ct + j * ldct + 16, mask[1], acc[j][1]);
    }
}

/* ---- AVX2+FMA: MR x NR = 6 x 16 (12 ymm accumulators) */
#define K2_MR 6
#define K2_NR 16

/* B block into panels of 16 columns (RK_PACKB_BODY). */
__attribute__((target("avx2,fma")))
static void rk_packB_256(const float *P, const int32_t *off, const int32_t *idx,
                         long k0, long kc, long n0, long nc, float *Bp) RK_PACKB_BODY(K2_NR)

__attribute__((target("avx2,fma")))
static void rk_kernel_256(long kc, const float *a, const float *b, float *c, long ldc,
                          int first, const float *bias, int mv, int nv, const rk_act *act,
                          const float *rc) {
    __m256 acc[K2_MR][2];
    float tmp[K2_MR * K2_NR];
    int full = (mv == K2_MR && nv == K2_NR);
    if (first) {
        #pragma GCC unroll 6
        for (int r = 0; r < K2_MR; r++) {
            __m256 init = bias ? _mm256_set1_ps(bias[r < mv ? r : 0]) : _mm256_setzero_ps();
            acc[r][0] = init; acc[r][1] = init;
        }
    } else if (full) {
        #pragma GCC unroll 6
        for (int r = 0; r < K2_MR; r++) {
            acc[r][0] = _mm256_loadu_ps(c + r * ldc);
            acc[r][1] = _mm256_loadu_ps(c + r * ldc + 8);
        }
    } else {
        for (int r = 0; r < K2_MR; r++)
            for (int t = 0; t < K2_NR; t++) tmp[r * K2_NR + t] = (r < mv && t < nv) ? c[r * ldc + t] : 0.0f;
        #pragma GCC unroll 6
        for (int r = 0; r < K2_MR; r++) {
            acc[r][0] = _mm256_loadu_ps(tmp + r * K2_NR);
            acc[r][1] = _mm256_loadu_ps(tmp + r * K2_NR + 8);
        }
    }
    for (long k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        #pragma GCC unroll 6
        for (int r = 0; r < K2_MR; r++) {
            __m256 av = _mm256_broadcast_ss(a + r);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
        a += K2_MR;
        b += K2_NR;
    }
    if (rc) {   /* residual: rc mirrors c */
        if (!full)
            for (int r = 0; r < K2_MR; r++)
                for (int t = 0; t < K2_NR; t++) tmp[r * K2_NR + t] = (r < mv && t < nv) ? rc[r * ldc + t] : 0.0f;
        #pragma GCC unroll 6
        for (int r = 0; r < K2_MR; r++) {
            const float *q = full ? rc + r * ldc : tmp + r * K2_NR;
            acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(q));
            acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(q + 8));
        }
    }
    if (act) RK_ACT_TILE256(acc, K2_MR, 2, act);
    if (full) {
        #pragma GCC unroll 6
        for (int r = 0; r < K2_MR; r++) {
            _mm256_storeu_ps(c + r * ldc, acc[r][0]);
            _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
        }
    } else {
        #pragma GCC unroll 6
        for (int r = 0; r < K2_MR; r++) {
            _mm256_storeu_ps(tmp + r * K2_NR, acc[r][0]);
            _mm256_storeu_ps(tmp + r * K2_NR + 8, acc[r][1]);
        }
        for (int r = 0; r < mv; r++)
            for (int t = 0; t < nv; t++) c[r * ldc + t] = tmp[r * K2_NR + t];
    }
}
#endif

/* A K block of A (M x kc floats) past this many bytes is swept A panel by A panel
   (rk_gather_gemm); set from the host's L1d by rk_set_a_block_bytes. */
static long rk_a_block_bytes = 24 * 1024;

void rk_set_a_block_bytes(long bytes) { rk_a_block_bytes = bytes > 0 ? bytes : 1; }

/* Tile geometry per (isa, transposed): rows per weight panel and columns per B panel. */
#if RK_NEON
int rk_mr(int isa, int t) { (void)isa; (void)t; return KN_MR; }
int rk_nr(int isa, int t) { (void)isa; (void)t; return KN_NR; }
#else
int rk_mr(int isa, int t) { return isa >= 2 ? (t ? 32 : 8) : 6; }    /* K5T_MR, K5_MR, K2_MR */
int rk_nr(int isa, int t) { return isa >= 2 ? (t ? 7 : 32) : 16; }    /* K5T_NR, K5_NR, K2_NR */
#endif

/* Weights are read from memory once per K block, by the first tile of each A panel (the
   other tiles find the panel in cache): left alone, that tile waits on memory for the whole
   panel (64 KB in a few microseconds) while the rest run from cache.  Instead each tile
   prefetches (into L2, one line per k step) its share of the panel the next sweep starts
   with, so the weights stream in evenly across the tiles.  Sets *pf, *npf for the tile of
   A panel m0 / B panel p: A-panel-major, the next A panel, spread over the np tiles of this
   panel; B-panel-major, the first pass (p == 0) fetches the A panel after the next. */
static void rk_a_prefetch(int m_outer, long outer, long inner, long np, long M, long K, long MR,
                          long m0, long kc, const float *ap, const float **pf, long *npf) {
    long lines = kc * MR / 16;   /* 64-byte lines of one A panel's K block */
    *pf = NULL; *npf = 0;
    if (m_outer) {
        if (m0 + MR >= M) return;
        long l0 = lines * inner / np, l1 = lines * (inner + 1) / np;
        *pf = ap + K * MR + 16 * l0; *npf = l1 - l0;
    } else if (outer == 0 && m0 + 2 * MR < M) {
        *pf = ap + 2 * K * MR; *npf = lines;
    }
    if (*npf > kc) *npf = kc;
}

/* Floats between the K blocks of prepacked B (rk_pack_gather_b): kcb x nc packed in
   panels of NR, rounded up to 16 floats so every block starts 64-byte aligned. */
long rk_bblock_stride(long kcb, long nc, int NR) {
    return ((kcb * ((nc + NR - 1) / NR) * NR) + 15) & ~15L;
}

#if RK_X86 || RK_NEON
/* B block [k0, k0 + kc) x [n0, n0 + nc) packed in panels of the NR columns of isa's tiles;
   skip_direct: the panels the normal AVX-512 tiles read straight from P are left out. */
static void rk_packB(int isa, int transposed, int skip_direct, const float *P, const int32_t *off,
                     const int32_t *idx, long k0, long kc, long n0, long nc, float *Bp, int NR) {
#if RK_X86
    if (isa >= 2) rk_packB_512(P, off, idx, k0, kc, n0, nc, Bp, NR, skip_direct && !transposed);
    else rk_packB_256(P, off, idx, k0, kc, n0, nc, Bp);
#else
    (void)isa; (void)transposed; (void)skip_direct; (void)NR;
    rk_packB_neon(P, off, idx, k0, kc, n0, nc, Bp);
#endif
}
#endif

/* Y[m, n] (row stride ldy) = bias[m] + sum_k A[m, k] * P[off[k] + idx[n]], n in [n_begin, n_end).
   transposed (AVX-512 only): Y is Y^T instead, Y[n, m] with row stride ldy.
   Bp: scratch of at least kcb * ncb floats, 64-byte aligned.  Bpre: NULL, or the B blocks
   already packed by rk_pack_gather_b for the single column block [n_begin, n_end) (then
   n_end - n_begin <= ncb and Bp is unused): several calls on disjoint row ranges of A
   share one packing.  direct_b: the normal AVX-512 tiles read a B panel of 32 contiguous
   columns straight from P instead of packing it (the packing and every call sharing it
   must agree; see Blocking.direct_b_bytes for when it pays). */
void rk_gather_gemm(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx,
                           long M, long K, const float *Ap, const float *bias,
                           float *Y, long ldy, float *Bp, long kcb, long ncb,
                           long n_begin, long n_end, long gw, long gow, const rk_act *act,
                           const float *R, const float *Bpre, int direct_b) {
#if RK_X86 || RK_NEON
    if (act && act->kind == 0) act = NULL;
    if (isa < 2) transposed = 0;
    if (isa < 2 || transposed) direct_b = 0;
    if (isa < 2 || transposed) gw = 0;
#if RK_NEON
    (void)gw; (void)gow;   /* grid stores: AVX-512 only */
#endif
    int MR = rk_mr(isa, transposed), NR = rk_nr(isa, transposed);
    int wide = (n_end - n_begin) >= 1024;
#if RK_X86
    /* a grid GEMM makes each panel's store plan once per block, not once per tile (a plan per
       tile took a third of a 3x3/2 3->64 stem's time: short K, a block of 227 panels) */
    rk_splan plans_stack[RK_SPLAN_CACHE], *plans = plans_stack;
    long plans_cap = RK_SPLAN_CACHE, npmax = (RK_MIN(ncb, n_end - n_begin) + NR - 1) / NR;
    if (gw > 0 && npmax > plans_cap) {
        rk_splan *heap = malloc((size_t)npmax * sizeof(rk_splan));
        if (heap) { plans = heap; plans_cap = npmax; }   /* else: plans made per tile */
    }
#endif
    for (long n0 = n_begin; n0 < n_end; n0 += ncb) {
        long nc = RK_MIN(ncb, n_end - n0);
        for (long k0 = 0; k0 < K; k0 += kcb) {
            long kc = RK_MIN(kcb, K - k0);
            const rk_act *ka = k0 + kc >= K ? act : NULL;   /* finished values: last K block */
            const float *kr = k0 + kc >= K ? R : NULL;
            if (Bpre) Bp = (float *)Bpre + (k0 / kcb) * rk_bblock_stride(kcb, nc, NR);
            else rk_packB(isa, transposed, direct_b, P, off, idx, k0, kc, n0, nc, Bp, NR);
            /* With A's block (M x kc) small enough to stay in L1 beside a B panel, go panel
               by panel of B reusing it; otherwise keep each A panel hot and sweep the B block
               (transposed tiles always: their A panels are large): the weights, cold in a
               model, then stream in once and evenly, where a B-panel sweep would read the
               whole block of them during its first pass (see Blocking.a_block_bytes).
               Wide outputs with more than two row panels also go A panel by A panel: a B
               panel sweep would write short pieces of M output rows far apart (one write
               stream per row, beyond what the prefetchers follow), an A panel sweep writes
               MR rows sequentially. */
            int m_outer = transposed || M * kc * (long)sizeof(float) > rk_a_block_bytes || (wide && M > 2 * MR);
            long np = (nc + NR - 1) / NR, nm = (M + MR - 1) / MR;
#if RK_X86
            /* grid store plans of the block's panels, made once (not per m panel) */
            int cached = gw > 0 && np <= plans_cap;
            if (cached)
                for (long p = 0; p < np; p++)
                    rk_make_splan(&plans[p], n0 + p * NR, (int)RK_MIN(NR, nc - p * NR), gw, gow);
#endif
            for (long outer = 0; outer < (m_outer ? nm : np); outer++)
            for (long inner = 0; inner < (m_outer ? np : nm); inner++) {
                long p = m_outer ? inner : outer, m0 = (m_outer ? outer : inner) * MR;
                int nv = (int)RK_MIN(NR, nc - p * NR);
                long q0 = n0 + p * NR;
                const float *bp = Bp + p * kc * NR;
                float *yc = Y + q0;   /* column q0 of row 0 (plain layout) */
#if RK_X86
                int direct = direct_b && nv == 32 && idx[q0 + 31] - idx[q0] == 31;
                rk_splan plan, *sp = NULL;
                if (gw > 0) {
                    if (cached) sp = &plans[p];
                    else { rk_make_splan(&plan, q0, nv, gw, gow); sp = &plan; }
                    yc = Y;
                }
#endif
                const float *ap = Ap + (m0 / MR) * K * MR + k0 * MR;
                int mv = (int)RK_MIN(MR, M - m0);
                const float *bm = bias ? bias + m0 : NULL;
                float *yt = yc + m0 * ldy;
                const float *rt = kr ? kr + (yt - Y) : NULL;   /* residual tile, Y's layout */
                const float *pf;
                long npf;
                rk_a_prefetch(m_outer, outer, inner, np, M, K, MR, m0, kc, ap, &pf, &npf);
#if RK_NEON
                rk_kernel_neon(kc, ap, bp, yt, ldy, k0 == 0, bm, mv, nv, ka, rt, pf, npf);
#else
                if (transposed)
                    rk_kernel_512t(kc, ap, bp, Y + q0 * ldy + m0, ldy, k0 == 0, bm, mv, nv, ka, pf, npf);
                else if (direct)
                    rk_kernel_512_direct(kc, ap, P + idx[q0], off + k0, yt, ldy, k0 == 0, bm, mv, nv, sp, ka, rt, pf, npf);
                else if (isa >= 2 && nv <= 16)
                    rk_kernel_512_half(kc, ap, bp, NULL, yt, ldy, k0 == 0, bm, mv, nv, sp, ka, rt, pf, npf);
                else if (isa >= 2)
                    rk_kernel_512(kc, ap, bp, NULL, yt, ldy, k0 == 0, bm, mv, nv, sp, ka, rt, pf, npf);
                else
                    rk_kernel_256(kc, ap, bp, yt, ldy, k0 == 0, bm, mv, nv, ka, rt);
#endif
            }
        }
    }
#if RK_X86
    if (plans != plans_stack) free(plans);
#endif
#endif
}

/* The packed B blocks of K blocks [kb_begin, kb_end) of columns [n0, n0 + nc) (one
   column block), exactly as rk_gather_gemm packs them, block kb at
   Bpre + kb * rk_bblock_stride(kcb, nc, NR) (Bpre 64-byte aligned). */
void rk_pack_gather_b(int isa, int transposed, const float *P, const int32_t *off,
                             const int32_t *idx, long K, long kcb, long n0, long nc,
                             long kb_begin, long kb_end, float *Bpre, int direct_b) {
#if RK_X86 || RK_NEON
    if (isa < 2) transposed = 0;
    int NR = rk_nr(isa, transposed);
    long bs = rk_bblock_stride(kcb, nc, NR);
    for (long kb = kb_begin; kb < kb_end; kb++) {
        long k0 = kb * kcb, kc = RK_MIN(kcb, K - k0);
        rk_packB(isa, transposed, direct_b, P, off, idx, k0, kc, n0, nc, Bpre + kb * bs, NR);
    }
#endif
}

/* nb independent gather GEMMs: P, Ap and Y advance by pstride, astride, ystride floats. */
void rk_gather_gemm_batch(int isa, long nb, const float *P, long pstride,
                                 const int32_t *off, const int32_t *idx, long M, long K,
                                 const float *Ap, long astride, float *Y, long ystride, long ldy,
                                 float *Bp, long kcb, long ncb, long N, int direct_b) {
    for (long i = 0; i < nb; i++)
        rk_gather_gemm(isa, 0, P + i * pstride, off, idx, M, K, Ap + i * astride, NULL,
                       Y + i * ystride, ldy, Bp, kcb, ncb, 0, N, 0, 0, NULL, NULL, NULL, direct_b);
}
