# cython: language_level=3
"""Convolution hot loops of the software backend (compiled, run without the GIL).

* ``gather_gemm``: ``Y[m, n] = bias[m] + sum_k A[m, k] * P[off[k] + idx[n]]`` with
  ``A`` pre-packed by ``pack_weights``: a GEMM whose right-hand matrix is gathered on
  the fly from an image (``off``/``idx`` tables describe a convolution, see
  ``phase_split``), packed block by block into a cache-sized scratch buffer, with
  AVX-512 / AVX2+FMA micro-kernels chosen at run time.  ``gemm_isa() == 0`` means
  no such kernel on this CPU (callers then use im2col + BLAS).
* ``phase_split``: zero-padded, stride-phase-split copy of an image, which turns
  every strided/dilated/padded convolution into offset lookups for ``gather_gemm``.
* ``im2col`` / ``col2im``: unfold / fold-and-accumulate one image (up to 3 spatial
  dims) for convolution and transposed convolution via BLAS.
* ``depthwise``: direct depthwise (grouped, one input channel per group) convolution.
* ``winograd_weights`` / ``winograd_input`` / ``winograd_output``: Winograd F(4x4, 3x3)
  and F(2x2, 3x3) transforms around ``gather_gemm_batch``.
* Fused activations (``act`` arguments, see ``ACT_CLIP`` / ``ACT_LEAKY``): Relu, Clip and
  LeakyRelu applied by the output stages above while the values are in registers or in
  cache; ``bias_act`` does the same after a BLAS product.
* Fused residual adds (``residual`` arguments): an array of the output's shape added by
  the same output stages after the bias and before the activation.
"""

import numpy as np

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport int32_t, int64_t, intptr_t
from libc.string cimport memset

from rk_pool cimport rk_pool, rk_pool_api, rk_range_fn, RK_POOL_API_CAPSULE, RK_POOL_CAPSULE

from rknnlite._native import thread_pool as _thread_pool

cnp.import_array()

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>

    #if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    #define RK_X86 1
    #include <immintrin.h>
    #else
    #define RK_X86 0
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

    /* 0: no micro-kernel (use BLAS); 1: AVX2+FMA; 2: AVX-512F. */
    static int rk_isa_level(void) {
    #if RK_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f")) return 2;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
    #endif
        return 0;
    }

    /* ---------------------------------------------------------------- fused activation
       Applied by every output stage (micro-kernel stores, Winograd output transform,
       depthwise, BLAS bias pass) to the finished values: kind 1 clips to [lo, hi] as
       min(max(x, lo), hi) (Relu: lo = 0, hi = +inf), kind 2 is LeakyRelu (x < 0 ? alpha*x : x).
       The operand order keeps nan: max(lo, x) and min(hi, x) return x when x is nan,
       like numpy's maximum / minimum.  A NULL rk_act (or kind 0) applies nothing. */
    typedef struct { int kind; float lo, hi, alpha; } rk_act;

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
    static void rk_im2col(const float *x, long C, long D, long H, long W, long cs,
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
    static void rk_transpose(const float *src, long rows, long cols, long lds, float *dst, long ldd) {
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
    /* dst[i] = src[i * s] for i < n, s in {2, 4}; reads stay below src[(n - 1) * s + 1]. */
    __attribute__((target("avx512f")))
    static long rk_strided_copy_512(float *dst, const float *src, long n, long s) {
        long i = 0;
        if (s == 2) {
            const __m512i ix = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            for (; i + 16 < n; i += 16) {
                __m512 a = _mm512_loadu_ps(src + 2 * i), b = _mm512_loadu_ps(src + 2 * i + 16);
                _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(a, ix, b));
            }
        } else if (s == 4) {
            const __m512i ix = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
            const __m512i jx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31);
            for (; i + 16 < n; i += 16) {
                const float *p = src + 4 * i;
                __m512 lo = _mm512_permutex2var_ps(_mm512_loadu_ps(p), ix, _mm512_loadu_ps(p + 16));
                __m512 hi = _mm512_permutex2var_ps(_mm512_loadu_ps(p + 32), ix, _mm512_loadu_ps(p + 48));
                _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(lo, jx, hi));
            }
        }
        return i;
    }
    #endif

    static void rk_strided_copy(float *dst, const float *src, long n, long s) {
        long i = 0;
    #if RK_X86
        if (rk_isa_cached < 0) rk_isa_cached = rk_isa_level();
        if (rk_isa_cached >= 2) i = rk_strided_copy_512(dst, src, n, s);
    #endif
        for (; i < n; i++) dst[i] = src[i * s];
    }

    #define RK_PS_ARGS const float *x, long C, long D, long H, long W, long sd, long sh, long sw, \
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
                        if (xhi > xlo) rk_strided_copy(dst + xlo, src + xlo * sw, xhi - xlo, sw); \
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
    static void rk_phase_split(RK_PS_ARGS) {
        if (rk_isa_cached < 0) rk_isa_cached = rk_isa_level();
    #if RK_X86
        if (rk_isa_cached >= 2) { rk_phase_split_avx512(x, C, D, H, W, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, P); return; }
        if (rk_isa_cached == 1) { rk_phase_split_avx2(x, C, D, H, W, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, P); return; }
    #endif
        rk_phase_split_generic(x, C, D, H, W, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, P);
    }

    /* ---------------------------------------------------------------- depthwise
       Output channel m reads input channel m / mult (group == C, M == C * mult).
       pad: scratch plane of (H + pt + pb) * (W + pl + pr) floats. */
    #define RK_DW_BODY                                                                       \
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
    #if RK_X86
    __attribute__((target("avx2,fma"))) static void rk_depthwise_avx2(RK_DW_ARGS) { RK_DW_BODY }
    __attribute__((target("avx512f"))) static void rk_depthwise_avx512(RK_DW_ARGS) { RK_DW_BODY }
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

    static void rk_depthwise(int isa, RK_DW_ARGS) {
    #if RK_X86
        if (isa >= 2 && kh == 3 && kw == 3 && dh == 1 && dw == 1 && (sw == 1 || sw == 2) && (sh == 1 || sh == 2)) {
            rk_depthwise3x3_512(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res);
            return;
        }
        if (isa >= 2) { rk_depthwise_avx512(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res); return; }
        if (isa == 1) { rk_depthwise_avx2(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad, act, res); return; }
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
    #define RK_WIN_CHUNK 256
    #define RK_WIN_BODY                                                                         \
        long Ws = TW + 1, plane = (TH + 1) * Ws, total = C * plane;                             \
        float *tmp = buf;                                                                       \
        for (long f0 = 0; f0 < total; f0 += RK_WIN_CHUNK) {                                     \
            long L = RK_MIN(RK_WIN_CHUNK, total - f0);                                          \
            for (long j = 0; j < 6; j++) {                                                      \
                const float *d[6];                                                              \
                for (long i = 0; i < 6; i++)                                                    \
                    d[i] = S + ((i % 4) * 4 + j % 4) * ss + (i / 4) * Ws + j / 4 + f0;          \
                const float *restrict d0 = d[0], *restrict d1 = d[1], *restrict d2 = d[2];           \
                const float *restrict d3 = d[3], *restrict d4 = d[4], *restrict d5 = d[5];           \
                float *restrict t0 = tmp + j * RK_WIN_CHUNK, *restrict t1 = t0 + 6 * RK_WIN_CHUNK;                \
                float *restrict t2 = t1 + 6 * RK_WIN_CHUNK, *restrict t3 = t2 + 6 * RK_WIN_CHUNK;                 \
                float *restrict t4 = t3 + 6 * RK_WIN_CHUNK, *restrict t5 = t4 + 6 * RK_WIN_CHUNK;                 \
                for (long q = 0; q < L; q++) {                                                  \
                    float a0 = d0[q], a1 = d1[q], a2 = d2[q], a3 = d3[q], a4 = d4[q], a5 = d5[q]; \
                    t0[q] = 4.0f * a0 - 5.0f * a2 + a4;                                         \
                    t1[q] = -4.0f * (a1 + a2) + a3 + a4;                                        \
                    t2[q] = 4.0f * (a1 - a2) - a3 + a4;                                         \
                    t3[q] = 2.0f * (a3 - a1) - a2 + a4;                                         \
                    t4[q] = 2.0f * (a1 - a3) - a2 + a4;                                         \
                    t5[q] = 4.0f * a1 - 5.0f * a3 + a5;                                         \
                }                                                                               \
            }                                                                                   \
            for (long a = 0; a < 6; a++) {                                                      \
                const float *restrict e0 = tmp + a * 6 * RK_WIN_CHUNK, *restrict e1 = e0 + RK_WIN_CHUNK;          \
                const float *restrict e2 = e1 + RK_WIN_CHUNK, *restrict e3 = e2 + RK_WIN_CHUNK;                   \
                const float *restrict e4 = e3 + RK_WIN_CHUNK, *restrict e5 = e4 + RK_WIN_CHUNK;                   \
                float *restrict v0 = V + (6 * a) * ldv + f0;                                             \
                float *restrict v1 = v0 + ldv, *restrict v2 = v1 + ldv, *restrict v3 = v2 + ldv;     \
                float *restrict v4 = v3 + ldv, *restrict v5 = v4 + ldv;                         \
                for (long q = 0; q < L; q++) {                                                  \
                    float a0 = e0[q], a1 = e1[q], a2 = e2[q], a3 = e3[q], a4 = e4[q], a5 = e5[q]; \
                    v0[q] = 4.0f * a0 - 5.0f * a2 + a4;                                         \
                    v1[q] = -4.0f * (a1 + a2) + a3 + a4;                                        \
                    v2[q] = 4.0f * (a1 - a2) - a3 + a4;                                         \
                    v3[q] = 2.0f * (a3 - a1) - a2 + a4;                                         \
                    v4[q] = 2.0f * (a1 - a3) - a2 + a4;                                         \
                    v5[q] = 4.0f * a1 - 5.0f * a3 + a5;                                         \
                }                                                                               \
            }                                                                                   \
        }

    #define RK_WIN_ARGS const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf

    /* y[m][4ty + i][4tx + j] = bias[m] + (A^T M A)[i][j] (cropped to OH x OW) from
       Mt[xi * ldx + m * T + t], t = ty * TW + tx.  buf: 40 * T floats. */
    #define RK_WOUT_BODY                                                                        \
        long T = TH * TW;                                                                       \
        float *s1 = buf, *s2 = buf + 24 * T;                                                    \
        for (long m = 0; m < M; m++) {                                                          \
            float b0 = bias ? bias[m] : 0.0f;                                                   \
            float *ym = y + m * ldc;                                                                \
            for (long a = 0; a < 6; a++) {                                                      \
                const float *q0 = Mt + (6 * a) * ldx + m * T;                                   \
                const float *q1 = q0 + ldx, *q2 = q1 + ldx, *q3 = q2 + ldx, *q4 = q3 + ldx, *q5 = q4 + ldx; \
                float *r0 = s1 + a * 4 * T, *r1 = r0 + T, *r2 = r1 + T, *r3 = r2 + T;           \
                for (long t = 0; t < T; t++) {                                                  \
                    float m0 = q0[t], m1 = q1[t], m2 = q2[t], m3 = q3[t], m4 = q4[t], m5 = q5[t]; \
                    float p12 = m1 + m2, n12 = m1 - m2, p34 = m3 + m4, n34 = m3 - m4;           \
                    r0[t] = m0 + p12 + p34;                                                     \
                    r1[t] = n12 + 2.0f * n34;                                                   \
                    r2[t] = p12 + 4.0f * p34;                                                   \
                    r3[t] = n12 + 8.0f * n34 + m5;                                              \
                }                                                                               \
            }                                                                                   \
            for (long j = 0; j < 4; j++) {                                                      \
                const float *q0 = s1 + j * T, *q1 = q0 + 4 * T, *q2 = q1 + 4 * T;               \
                const float *q3 = q2 + 4 * T, *q4 = q3 + 4 * T, *q5 = q4 + 4 * T;               \
                float *r0 = s2 + j * T, *r1 = r0 + 4 * T, *r2 = r1 + 4 * T, *r3 = r2 + 4 * T;   \
                for (long t = 0; t < T; t++) {                                                  \
                    float m0 = q0[t], m1 = q1[t], m2 = q2[t], m3 = q3[t], m4 = q4[t], m5 = q5[t]; \
                    float p12 = m1 + m2, n12 = m1 - m2, p34 = m3 + m4, n34 = m3 - m4;           \
                    r0[t] = b0 + m0 + p12 + p34;                                                \
                    r1[t] = b0 + n12 + 2.0f * n34;                                              \
                    r2[t] = b0 + p12 + 4.0f * p34;                                              \
                    r3[t] = b0 + n12 + 8.0f * n34 + m5;                                         \
                }                                                                               \
            }                                                                                   \
            if (act && !res) rk_act_apply(s2, 16 * T, act);                                     \
            long full = RK_MIN(TW, OW / 4);                                                     \
            for (long ty = 0; ty < TH; ty++) {                                                  \
                for (long i = 0; i < 4; i++) {                                                  \
                    long row = 4 * ty + i;                                                      \
                    if (row >= OH) break;                                                       \
                    float *yr = ym + row * OW;                                                  \
                    const float *o0 = s2 + (4 * i) * T + ty * TW, *o1 = o0 + T, *o2 = o1 + T, *o3 = o2 + T; \
                    for (long tx = 0; tx < full; tx++) {                                        \
                        yr[4 * tx] = o0[tx]; yr[4 * tx + 1] = o1[tx];                           \
                        yr[4 * tx + 2] = o2[tx]; yr[4 * tx + 3] = o3[tx];                       \
                    }                                                                           \
                    for (long col = 4 * full; col < OW; col++) yr[col] = o0[(col % 4) * T + col / 4]; \
                }                                                                               \
            }                                                                                   \
            if (res) rk_res_act_apply(ym, res + m * ldc, OH * OW, act);                         \
        }

    /* y (and res): M planes of OH x OW floats, ldc floats apart */
    #define RK_WOUT_ARGS const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW, \
                         const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res

    static void rk_wino_in_generic(RK_WIN_ARGS) { RK_WIN_BODY }
    static void rk_wino_out_generic(RK_WOUT_ARGS) { RK_WOUT_BODY }
    #if RK_X86
    __attribute__((target("avx2,fma"))) static void rk_wino_in_avx2(RK_WIN_ARGS) { RK_WIN_BODY }
    __attribute__((target("avx2,fma"))) static void rk_wino_out_avx2(RK_WOUT_ARGS) { RK_WOUT_BODY }

    /* The 1-D transforms of RK_WIN_BODY / RK_WIN2_BODY on 16 positions (same formulas). */
    #define RK_B6_512(a0, a1, a2, a3, a4, a5, o, st)  {                                         \
        __m512 c4 = _mm512_set1_ps(4.0f), c5 = _mm512_set1_ps(5.0f), c2 = _mm512_set1_ps(2.0f);  \
        __m512 s12 = _mm512_add_ps(a1, a2), d12 = _mm512_sub_ps(a1, a2);                         \
        __m512 d31 = _mm512_sub_ps(a3, a1), a34 = _mm512_add_ps(a3, a4), a24 = _mm512_sub_ps(a4, a2); \
        st(o[0], _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(c4, a0), _mm512_mul_ps(c5, a2)), a4));   \
        st(o[1], _mm512_sub_ps(a34, _mm512_mul_ps(c4, s12)));                                    \
        st(o[2], _mm512_add_ps(_mm512_mul_ps(c4, d12), _mm512_sub_ps(a4, a3)));                  \
        st(o[3], _mm512_add_ps(_mm512_mul_ps(c2, d31), a24));                                    \
        st(o[4], _mm512_sub_ps(a24, _mm512_mul_ps(c2, d31)));                                    \
        st(o[5], _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(c4, a1), _mm512_mul_ps(c5, a3)), a5));   \
    }

    /* RK_WIN_BODY with explicit AVX-512 vectors (the compiler leaves its second loop scalar). */
    __attribute__((target("avx512f")))
    static void rk_wino_in_avx512(RK_WIN_ARGS) {
        long Ws = TW + 1, plane = (TH + 1) * Ws, total = C * plane;
        float *tmp = buf;
        for (long f0 = 0; f0 < total; f0 += RK_WIN_CHUNK) {
            long L = RK_MIN(RK_WIN_CHUNK, total - f0);
            for (long j = 0; j < 6; j++) {
                const float *d[6];
                for (long i = 0; i < 6; i++)
                    d[i] = S + ((i % 4) * 4 + j % 4) * ss + (i / 4) * Ws + j / 4 + f0;
                for (long q = 0; q < L; q += 16) {
                    __mmask16 m = rk_mask16(0, (int)RK_MIN(16, L - q));
                    __m512 a0 = _mm512_maskz_loadu_ps(m, d[0] + q), a1 = _mm512_maskz_loadu_ps(m, d[1] + q);
                    __m512 a2 = _mm512_maskz_loadu_ps(m, d[2] + q), a3 = _mm512_maskz_loadu_ps(m, d[3] + q);
                    __m512 a4 = _mm512_maskz_loadu_ps(m, d[4] + q), a5 = _mm512_maskz_loadu_ps(m, d[5] + q);
                    float *o[6];
                    for (int r = 0; r < 6; r++) o[r] = tmp + (r * 6 + j) * RK_WIN_CHUNK + q;
                    #define RK_ST_TMP(p, v) _mm512_store_ps((p), (v))
                    RK_B6_512(a0, a1, a2, a3, a4, a5, o, RK_ST_TMP)
                    #undef RK_ST_TMP
                }
            }
            for (long a = 0; a < 6; a++) {
                const float *e = tmp + a * 6 * RK_WIN_CHUNK;
                for (long q = 0; q < L; q += 16) {
                    __mmask16 m = rk_mask16(0, (int)RK_MIN(16, L - q));
                    __m512 a0 = _mm512_load_ps(e + q), a1 = _mm512_load_ps(e + RK_WIN_CHUNK + q);
                    __m512 a2 = _mm512_load_ps(e + 2 * RK_WIN_CHUNK + q), a3 = _mm512_load_ps(e + 3 * RK_WIN_CHUNK + q);
                    __m512 a4 = _mm512_load_ps(e + 4 * RK_WIN_CHUNK + q), a5 = _mm512_load_ps(e + 5 * RK_WIN_CHUNK + q);
                    float *o[6];
                    for (int r = 0; r < 6; r++) o[r] = V + (6 * a + r) * ldv + f0 + q;
                    #define RK_ST_V(p, v) _mm512_mask_storeu_ps((p), m, (v))
                    RK_B6_512(a0, a1, a2, a3, a4, a5, o, RK_ST_V)
                    #undef RK_ST_V
                }
            }
        }
    }
    __attribute__((target("avx512f"))) static void rk_wino_out_avx512(RK_WOUT_ARGS) { RK_WOUT_BODY }
    #endif

    static void rk_wino_in(int isa, RK_WIN_ARGS) {
    #if RK_X86
        if (isa >= 2) { rk_wino_in_avx512(S, ss, C, TH, TW, V, ldv, buf); return; }
        if (isa == 1) { rk_wino_in_avx2(S, ss, C, TH, TW, V, ldv, buf); return; }
    #endif
        rk_wino_in_generic(S, ss, C, TH, TW, V, ldv, buf);
    }

    static void rk_wino_out(int isa, RK_WOUT_ARGS) {
    #if RK_X86
        if (isa >= 2) { rk_wino_out_avx512(Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res); return; }
        if (isa == 1) { rk_wino_out_avx2(Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res); return; }
    #endif
        rk_wino_out_generic(Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res);
    }

    /* ---------------------------------------------------------------- Winograd F(2x2, 3x3)
       Same layout with 2x2 output tiles and 4x4 patches (16 transformed components,
       xi = 4a + b): S is split into 2 x 2 phases, phase-major as above,
       S[(r * 2 + e) * ss + c * plane + y * (TW + 1) + u] = x[c][2y + r - pt][2u + e - pl];
       V = B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]; Y = A^T M A with
       A^T = [1 1 1 0; 0 1 -1 -1].  buf: 16 * RK_WIN_CHUNK floats (input), 12 * T floats (output). */
    #define RK_WIN2_BODY                                                                        \
        long Ws = TW + 1, plane = (TH + 1) * Ws, total = C * plane;                             \
        float *tmp = buf;                                                                       \
        for (long f0 = 0; f0 < total; f0 += RK_WIN_CHUNK) {                                     \
            long L = RK_MIN(RK_WIN_CHUNK, total - f0);                                          \
            for (long j = 0; j < 4; j++) {                                                      \
                const float *d[4];                                                              \
                for (long i = 0; i < 4; i++)                                                    \
                    d[i] = S + ((i % 2) * 2 + j % 2) * ss + (i / 2) * Ws + j / 2 + f0;          \
                const float *restrict d0 = d[0], *restrict d1 = d[1], *restrict d2 = d[2];           \
                const float *restrict d3 = d[3];                                                \
                float *restrict t0 = tmp + j * RK_WIN_CHUNK, *restrict t1 = t0 + 4 * RK_WIN_CHUNK;                \
                float *restrict t2 = t1 + 4 * RK_WIN_CHUNK, *restrict t3 = t2 + 4 * RK_WIN_CHUNK;                 \
                for (long q = 0; q < L; q++) {                                                  \
                    float a0 = d0[q], a1 = d1[q], a2 = d2[q], a3 = d3[q];                       \
                    t0[q] = a0 - a2; t1[q] = a1 + a2; t2[q] = a2 - a1; t3[q] = a1 - a3;         \
                }                                                                               \
            }                                                                                   \
            for (long a = 0; a < 4; a++) {                                                      \
                const float *restrict e0 = tmp + a * 4 * RK_WIN_CHUNK, *restrict e1 = e0 + RK_WIN_CHUNK;          \
                const float *restrict e2 = e1 + RK_WIN_CHUNK, *restrict e3 = e2 + RK_WIN_CHUNK;                   \
                float *restrict v0 = V + (4 * a) * ldv + f0;                                             \
                float *restrict v1 = v0 + ldv, *restrict v2 = v1 + ldv, *restrict v3 = v2 + ldv;     \
                for (long q = 0; q < L; q++) {                                                  \
                    float a0 = e0[q], a1 = e1[q], a2 = e2[q], a3 = e3[q];                       \
                    v0[q] = a0 - a2; v1[q] = a1 + a2; v2[q] = a2 - a1; v3[q] = a1 - a3;         \
                }                                                                               \
            }                                                                                   \
        }

    #define RK_WOUT2_BODY                                                                       \
        long T = TH * TW;                                                                       \
        float *s1 = buf, *s2 = buf + 8 * T;                                                     \
        for (long m = 0; m < M; m++) {                                                          \
            float b0 = bias ? bias[m] : 0.0f;                                                   \
            float *ym = y + m * ldc;                                                                \
            for (long a = 0; a < 4; a++) {                                                      \
                const float *q0 = Mt + (4 * a) * ldx + m * T;                                   \
                const float *q1 = q0 + ldx, *q2 = q1 + ldx, *q3 = q2 + ldx;                     \
                float *r0 = s1 + a * 2 * T, *r1 = r0 + T;                                       \
                for (long t = 0; t < T; t++) {                                                  \
                    float m1 = q1[t], m2 = q2[t];                                               \
                    r0[t] = q0[t] + m1 + m2;                                                    \
                    r1[t] = m1 - m2 - q3[t];                                                    \
                }                                                                               \
            }                                                                                   \
            for (long j = 0; j < 2; j++) {                                                      \
                const float *q0 = s1 + j * T, *q1 = q0 + 2 * T, *q2 = q1 + 2 * T, *q3 = q2 + 2 * T; \
                float *r0 = s2 + j * T, *r1 = r0 + 2 * T;                                       \
                for (long t = 0; t < T; t++) {                                                  \
                    float m1 = q1[t], m2 = q2[t];                                               \
                    r0[t] = b0 + (q0[t] + m1 + m2);                                             \
                    r1[t] = b0 + (m1 - m2 - q3[t]);                                             \
                }                                                                               \
            }                                                                                   \
            if (act && !res) rk_act_apply(s2, 4 * T, act);                                      \
            long full = RK_MIN(TW, OW / 2);                                                     \
            for (long ty = 0; ty < TH; ty++) {                                                  \
                for (long i = 0; i < 2; i++) {                                                  \
                    long row = 2 * ty + i;                                                      \
                    if (row >= OH) break;                                                       \
                    float *yr = ym + row * OW;                                                  \
                    const float *o0 = s2 + (2 * i) * T + ty * TW, *o1 = o0 + T;                 \
                    for (long tx = 0; tx < full; tx++) { yr[2 * tx] = o0[tx]; yr[2 * tx + 1] = o1[tx]; } \
                    if (2 * full < OW) yr[2 * full] = o0[full];                                 \
                }                                                                               \
            }                                                                                   \
            if (res) rk_res_act_apply(ym, res + m * ldc, OH * OW, act);                         \
        }

    static void rk_wino2_in_generic(RK_WIN_ARGS) { RK_WIN2_BODY }
    static void rk_wino2_out_generic(RK_WOUT_ARGS) { RK_WOUT2_BODY }
    #if RK_X86
    __attribute__((target("avx2,fma"))) static void rk_wino2_in_avx2(RK_WIN_ARGS) { RK_WIN2_BODY }
    __attribute__((target("avx2,fma"))) static void rk_wino2_out_avx2(RK_WOUT_ARGS) { RK_WOUT2_BODY }
    /* RK_WIN2_BODY with explicit AVX-512 vectors. */
    __attribute__((target("avx512f")))
    static void rk_wino2_in_avx512(RK_WIN_ARGS) {
        long Ws = TW + 1, plane = (TH + 1) * Ws, total = C * plane;
        float *tmp = buf;
        for (long f0 = 0; f0 < total; f0 += RK_WIN_CHUNK) {
            long L = RK_MIN(RK_WIN_CHUNK, total - f0);
            for (long j = 0; j < 4; j++) {
                const float *d[4];
                for (long i = 0; i < 4; i++)
                    d[i] = S + ((i % 2) * 2 + j % 2) * ss + (i / 2) * Ws + j / 2 + f0;
                for (long q = 0; q < L; q += 16) {
                    __mmask16 m = rk_mask16(0, (int)RK_MIN(16, L - q));
                    __m512 a0 = _mm512_maskz_loadu_ps(m, d[0] + q), a1 = _mm512_maskz_loadu_ps(m, d[1] + q);
                    __m512 a2 = _mm512_maskz_loadu_ps(m, d[2] + q), a3 = _mm512_maskz_loadu_ps(m, d[3] + q);
                    float *o = tmp + j * RK_WIN_CHUNK + q;
                    _mm512_store_ps(o, _mm512_sub_ps(a0, a2));
                    _mm512_store_ps(o + 4 * RK_WIN_CHUNK, _mm512_add_ps(a1, a2));
                    _mm512_store_ps(o + 8 * RK_WIN_CHUNK, _mm512_sub_ps(a2, a1));
                    _mm512_store_ps(o + 12 * RK_WIN_CHUNK, _mm512_sub_ps(a1, a3));
                }
            }
            for (long a = 0; a < 4; a++) {
                const float *e = tmp + a * 4 * RK_WIN_CHUNK;
                for (long q = 0; q < L; q += 16) {
                    __mmask16 m = rk_mask16(0, (int)RK_MIN(16, L - q));
                    __m512 a0 = _mm512_load_ps(e + q), a1 = _mm512_load_ps(e + RK_WIN_CHUNK + q);
                    __m512 a2 = _mm512_load_ps(e + 2 * RK_WIN_CHUNK + q), a3 = _mm512_load_ps(e + 3 * RK_WIN_CHUNK + q);
                    float *o = V + (4 * a) * ldv + f0 + q;
                    _mm512_mask_storeu_ps(o, m, _mm512_sub_ps(a0, a2));
                    _mm512_mask_storeu_ps(o + ldv, m, _mm512_add_ps(a1, a2));
                    _mm512_mask_storeu_ps(o + 2 * ldv, m, _mm512_sub_ps(a2, a1));
                    _mm512_mask_storeu_ps(o + 3 * ldv, m, _mm512_sub_ps(a1, a3));
                }
            }
        }
    }
    __attribute__((target("avx512f"))) static void rk_wino2_out_avx512(RK_WOUT_ARGS) { RK_WOUT2_BODY }
    #endif

    static void rk_wino2_in(int isa, RK_WIN_ARGS) {
    #if RK_X86
        if (isa >= 2) { rk_wino2_in_avx512(S, ss, C, TH, TW, V, ldv, buf); return; }
        if (isa == 1) { rk_wino2_in_avx2(S, ss, C, TH, TW, V, ldv, buf); return; }
    #endif
        rk_wino2_in_generic(S, ss, C, TH, TW, V, ldv, buf);
    }

    static void rk_wino2_out(int isa, RK_WOUT_ARGS) {
    #if RK_X86
        if (isa >= 2) { rk_wino2_out_avx512(Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res); return; }
        if (isa == 1) { rk_wino2_out_avx2(Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res); return; }
    #endif
        rk_wino2_out_generic(Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, act, res);
    }

    /* Winograd input split, phase-major (see RK_WIN_BODY): phase (r, e) of channel c at
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

    static void rk_wino_split(int isa, const float *x, long C, long H, long W, long t, long pt, long pl,
                              long Hs, long Ws, float *S, long ss) {
    #if RK_X86
        if (isa >= 2) { rk_wino_split_512(x, C, H, W, t, pt, pl, Hs, Ws, S, ss); return; }
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
    static void rk_bias_act(int isa, RK_BIAS_ACT_ARGS) {
    #if RK_X86
        if (isa >= 1) { rk_bias_act_avx2(y, M, N, ldy, bias, act, res, ldr); return; }
    #endif
        rk_bias_act_generic(y, M, N, ldy, bias, act, res, ldr);
    }

    /* ---------------------------------------------------------------- gather GEMM
       Packed A: panels of MR rows, A_p[panel][k][MR] (rows past M are zero).
       Packed B block: panels of NR columns, B_p[panel][k][NR] (columns past N are zero). */

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

    #if RK_X86
    /* ---- AVX-512.  Normal tiles: MR x NR = 8 x 32 (vectors along n, 16 zmm accumulators).
       Transposed tiles for small N: 32 x 7 (vectors along m, written into Y^T). */
    #define K5_MR 8
    #define K5_NR 32
    #define K5T_MR 32
    #define K5T_NR 7

    /* act (non-NULL) on the accumulator tile ACC[R][V] (R x V registers), kind hoisted. */
    #define RK_ACT_TILE(ACC, R, V, act, VEC, SET1, MAX, MIN, LEAKY)                                     \
        do {                                                                                          \
            if ((act)->kind == 1) {                                                                   \
                VEC lo_ = SET1((act)->lo), hi_ = SET1((act)->hi);                                     \
                _Pragma("GCC unroll 8")                                                               \
                for (int r_ = 0; r_ < (R); r_++)                                                      \
                    for (int v_ = 0; v_ < (V); v_++) ACC[r_][v_] = MIN(hi_, MAX(lo_, ACC[r_][v_]));   \
            } else if ((act)->kind == 2) {                                                            \
                VEC al_ = SET1((act)->alpha);                                                         \
                _Pragma("GCC unroll 8")                                                               \
                for (int r_ = 0; r_ < (R); r_++)                                                      \
                    for (int v_ = 0; v_ < (V); v_++) ACC[r_][v_] = LEAKY(ACC[r_][v_], al_);           \
            }                                                                                         \
        } while (0)
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
        /* the residual and output rows of the next tile along n (the next call in A-panel            \
           order): start fetching them now, this tile's FMAs hide the memory latency */               \
        if (!sp && kc >= 16) {                                                                        \
            for (int r = 0; r < mv; r++) {                                                            \
                for (int v = 0; v < NV; v++) {                                                        \
                    if (rc) _mm_prefetch((const char *)(rc + r * ldc + 32 + 16 * v), _MM_HINT_T0);    \
                    _mm_prefetch((const char *)(c + r * ldc + 32 + 16 * v), _MM_HINT_T0);             \
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

    __attribute__((target("avx2,fma")))
    static void rk_packB_256(const float *P, const int32_t *off, const int32_t *idx,
                             long k0, long kc, long n0, long nc, float *Bp) {
        for (long p = 0; p * K2_NR < nc; p++) {
            long nb = n0 + p * K2_NR, w = RK_MIN(K2_NR, n0 + nc - nb);
            float *dst = Bp + p * kc * K2_NR;
            if (w == K2_NR && idx[nb + K2_NR - 1] - idx[nb] == K2_NR - 1) {
                const float *base = P + idx[nb];
                for (long k = 0; k < kc; k++) {
                    const float *s = base + off[k0 + k];
                    _mm256_store_ps(dst, _mm256_loadu_ps(s));
                    _mm256_store_ps(dst + 8, _mm256_loadu_ps(s + 8));
                    dst += K2_NR;
                }
                continue;
            }
            for (long k = 0; k < kc; k++) {
                const float *s = P + off[k0 + k];
                long t = 0;
                for (; t < w; t++) dst[t] = s[idx[nb + t]];
                for (; t < K2_NR; t++) dst[t] = 0.0f;
                dst += K2_NR;
            }
        }
    }

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

    /* Tile geometry per (isa, transposed): rows per weight panel and columns per B panel. */
    static int rk_mr(int isa, int t) { return isa >= 2 ? (t ? 32 : 8) : 6; }    /* K5T_MR, K5_MR, K2_MR */
    static int rk_nr(int isa, int t) { return isa >= 2 ? (t ? 7 : 32) : 16; }    /* K5T_NR, K5_NR, K2_NR */

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
    static long rk_bblock_stride(long kcb, long nc, int NR) {
        return ((kcb * ((nc + NR - 1) / NR) * NR) + 15) & ~15L;
    }

    /* Y[m, n] (row stride ldy) = bias[m] + sum_k A[m, k] * P[off[k] + idx[n]], n in [n_begin, n_end).
       transposed (AVX-512 only): Y is Y^T instead, Y[n, m] with row stride ldy.
       Bp: scratch of at least kcb * ncb floats, 64-byte aligned.  Bpre: NULL, or the B blocks
       already packed by rk_pack_gather_b for the single column block [n_begin, n_end) (then
       n_end - n_begin <= ncb and Bp is unused): several calls on disjoint row ranges of A
       share one packing. */
    static void rk_gather_gemm(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx,
                               long M, long K, const float *Ap, const float *bias,
                               float *Y, long ldy, float *Bp, long kcb, long ncb,
                               long n_begin, long n_end, long gw, long gow, const rk_act *act,
                               const float *R, const float *Bpre) {
    #if RK_X86
        if (act && act->kind == 0) act = NULL;
        if (isa < 2) transposed = 0;
        if (isa < 2 || transposed) gw = 0;
        int MR = rk_mr(isa, transposed), NR = rk_nr(isa, transposed);
        int wide = (n_end - n_begin) >= 1024;
        rk_splan plans[RK_SPLAN_CACHE];
        for (long n0 = n_begin; n0 < n_end; n0 += ncb) {
            long nc = RK_MIN(ncb, n_end - n0);
            for (long k0 = 0; k0 < K; k0 += kcb) {
                long kc = RK_MIN(kcb, K - k0);
                const rk_act *ka = k0 + kc >= K ? act : NULL;   /* finished values: last K block */
                const float *kr = k0 + kc >= K ? R : NULL;
                if (Bpre) Bp = (float *)Bpre + (k0 / kcb) * rk_bblock_stride(kcb, nc, NR);
                else if (isa >= 2) rk_packB_512(P, off, idx, k0, kc, n0, nc, Bp, NR, !transposed);
                else rk_packB_256(P, off, idx, k0, kc, n0, nc, Bp);
                /* Stream the smaller operand: with A's block (M x kc) cache-resident, go panel
                   by panel of B reusing it (B panel hot in L1); otherwise keep each A panel hot
                   and sweep the B block (transposed tiles always: their A panels are large).
                   Wide outputs with more than two row panels also go A panel by A panel: a B
                   panel sweep would write short pieces of M output rows far apart (one write
                   stream per row, beyond what the prefetchers follow), an A panel sweep writes
                   MR rows sequentially. */
                int m_outer = transposed || M * kc * (long)sizeof(float) > 512 * 1024 || (wide && M > 2 * MR);
                long np = (nc + NR - 1) / NR, nm = (M + MR - 1) / MR;
                /* grid store plans of the block's panels, made once (not per m panel) */
                int cached = gw > 0 && np <= RK_SPLAN_CACHE;
                if (cached)
                    for (long p = 0; p < np; p++)
                        rk_make_splan(&plans[p], n0 + p * NR, (int)RK_MIN(NR, nc - p * NR), gw, gow);
                for (long outer = 0; outer < (m_outer ? nm : np); outer++)
                for (long inner = 0; inner < (m_outer ? np : nm); inner++) {
                    long p = m_outer ? inner : outer, m0 = (m_outer ? outer : inner) * MR;
                    int nv = (int)RK_MIN(NR, nc - p * NR);
                    long q0 = n0 + p * NR;
                    const float *bp = Bp + p * kc * NR;
                    int direct = isa >= 2 && !transposed && nv == 32 && idx[q0 + 31] - idx[q0] == 31;
                    rk_splan plan, *sp = NULL;
                    float *yc = Y + q0;   /* column q0 of row 0 (plain layout) */
                    if (gw > 0) {
                        if (cached) sp = &plans[p];
                        else { rk_make_splan(&plan, q0, nv, gw, gow); sp = &plan; }
                        yc = Y;
                    }
                    const float *ap = Ap + (m0 / MR) * K * MR + k0 * MR;
                    int mv = (int)RK_MIN(MR, M - m0);
                    const float *bm = bias ? bias + m0 : NULL;
                    float *yt = yc + m0 * ldy;
                    const float *rt = kr ? kr + (yt - Y) : NULL;   /* residual tile, Y's layout */
                    const float *pf;
                    long npf;
                    rk_a_prefetch(m_outer, outer, inner, np, M, K, MR, m0, kc, ap, &pf, &npf);
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
                }
            }
        }
    #endif
    }

    /* The packed B blocks of K blocks [kb_begin, kb_end) of columns [n0, n0 + nc) (one
       column block), exactly as rk_gather_gemm packs them, block kb at
       Bpre + kb * rk_bblock_stride(kcb, nc, NR) (Bpre 64-byte aligned). */
    static void rk_pack_gather_b(int isa, int transposed, const float *P, const int32_t *off,
                                 const int32_t *idx, long K, long kcb, long n0, long nc,
                                 long kb_begin, long kb_end, float *Bpre) {
    #if RK_X86
        if (isa < 2) transposed = 0;
        int NR = rk_nr(isa, transposed);
        long bs = rk_bblock_stride(kcb, nc, NR);
        for (long kb = kb_begin; kb < kb_end; kb++) {
            long k0 = kb * kcb, kc = RK_MIN(kcb, K - k0);
            if (isa >= 2) rk_packB_512(P, off, idx, k0, kc, n0, nc, Bpre + kb * bs, NR, !transposed);
            else rk_packB_256(P, off, idx, k0, kc, n0, nc, Bpre + kb * bs);
        }
    #endif
    }

    /* nb independent gather GEMMs: P, Ap and Y advance by pstride, astride, ystride floats. */
    static void rk_gather_gemm_batch(int isa, long nb, const float *P, long pstride,
                                     const int32_t *off, const int32_t *idx, long M, long K,
                                     const float *Ap, long astride, float *Y, long ystride, long ldy,
                                     float *Bp, long kcb, long ncb, long N) {
        for (long i = 0; i < nb; i++)
            rk_gather_gemm(isa, 0, P + i * pstride, off, idx, M, K, Ap + i * astride, NULL,
                           Y + i * ystride, ldy, Bp, kcb, ncb, 0, N, 0, 0, NULL, NULL, NULL);
    }
    """
    ctypedef struct rk_act:
        int kind
        float lo
        float hi
        float alpha
    int rk_isa_level()
    int rk_mr(int isa, int t)
    int rk_nr(int isa, int t)
    void rk_im2col(const float *x, long C, long D, long H, long W, long cs,
                   long kd, long kh, long kw, long sd, long sh, long sw,
                   long dd, long dh, long dw, long pd, long ph, long pw,
                   long OD, long OH, long OW, float *cols, int accumulate_back) nogil
    void rk_wino_in(int isa, const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf) nogil
    void rk_wino_split(int isa, const float *x, long C, long H, long W, long t, long pt, long pl,
                       long Hs, long Ws, float *S, long ss) nogil
    void rk_wino2_in(int isa, const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf) nogil
    void rk_wino2_out(int isa, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW,
                      const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res) nogil
    void rk_wino_out(int isa, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW,
                     const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res) nogil
    void rk_gather_gemm_batch(int isa, long nb, const float *P, long pstride,
                              const int32_t *off, const int32_t *idx, long M, long K,
                              const float *Ap, long astride, float *Y, long ystride, long ldy,
                              float *Bp, long kcb, long ncb, long N) nogil
    void rk_transpose(const float *src, long rows, long cols, long lds, float *dst, long ldd) nogil
    void rk_phase_split(const float *x, long C, long D, long H, long W,
                        long sd, long sh, long sw, long pd, long ph, long pw,
                        long Ds, long Hs, long Ws, float *P) nogil
    void rk_depthwise(int isa, const float *x, long C, long H, long W, const float *w, long M, long mult,
                      long kh, long kw, long sh, long sw, long dh, long dw,
                      long pt, long pl, long pb, long pr, long OH, long OW,
                      const float *bias, float *y, float *pad, const rk_act *act, const float *res) nogil
    void rk_gather_gemm(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx,
                        long M, long K, const float *Ap, const float *bias,
                        float *Y, long ldy, float *Bp, long kcb, long ncb,
                        long n_begin, long n_end, long gw, long gow, const rk_act *act, const float *R,
                        const float *Bpre) nogil
    long rk_bblock_stride(long kcb, long nc, int NR) nogil
    void rk_pack_gather_b(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx,
                          long K, long kcb, long n0, long nc, long kb_begin, long kb_end, float *Bpre) nogil
    void rk_bias_act(int isa, float *y, long M, long N, long ldy, const float *bias, const rk_act *act,
                     const float *res, long ldr) nogil


cdef int _ISA = rk_isa_level()

#: activation kinds of the ``act`` arguments: ``(ACT_CLIP, lo, hi)`` clips to [lo, hi]
#: (Relu is ``(ACT_CLIP, 0.0, inf)``), ``(ACT_LEAKY, alpha)`` is LeakyRelu.
ACT_CLIP = 1
ACT_LEAKY = 2


cdef int _act_from(object act, rk_act *a) except -1:
    """Fill ``a`` from an ``act`` argument (None, ``(1, lo, hi)`` or ``(2, alpha)``); returns its kind."""
    a.kind = 0
    a.lo = 0.0
    a.hi = 0.0
    a.alpha = 0.0
    if act is None:
        return 0
    kind = int(act[0])
    if kind == ACT_CLIP and len(act) == 3:
        a.lo = <float>float(act[1])
        a.hi = <float>float(act[2])
    elif kind == ACT_LEAKY and len(act) == 2:
        a.alpha = <float>float(act[1])
    else:
        raise ValueError(f"bad activation {act!r}: expected None, (1, lo, hi) or (2, alpha)")
    a.kind = kind
    return kind


cdef const float *_residual_ptr(object residual, tuple shape, Py_ssize_t ld, str who) except? NULL:
    """Address of ``residual`` (None: NULL), checked to have ``shape`` with contiguous rows
    ``ld`` floats apart (the layout of the output it is added to)."""
    cdef const float[:, :] r2
    cdef const float[:, :, :] r3
    if residual is None:
        return NULL
    if len(shape) == 2:
        r2 = residual
        if (r2.shape[0], r2.shape[1]) != shape or (r2.shape[1] > 1 and r2.strides[1] != 4) \
                or (r2.shape[0] > 1 and r2.strides[0] != 4 * ld):
            raise ValueError(f"{who}: residual must match the output's shape and layout")
        return &r2[0, 0]
    r3 = residual
    if (r3.shape[0], r3.shape[1], r3.shape[2]) != shape or not residual.flags.c_contiguous:
        raise ValueError(f"{who}: residual must be C-contiguous with the output's shape")
    return &r3[0, 0, 0]


def activation_numpy(y, act):
    """Apply an ``act`` argument (see ``ACT_CLIP`` / ``ACT_LEAKY``) to the float32 array ``y``
    in place with numpy, with the same results as the compiled output stages."""
    cdef rk_act a
    if _act_from(act, &a) == ACT_CLIP:
        np.minimum(np.float32(a.hi), np.maximum(np.float32(a.lo), y, out=y), out=y)
    elif a.kind == ACT_LEAKY:
        neg = y < 0
        np.multiply(y, np.float32(a.alpha), out=y, where=neg)


def gemm_isa():
    """Micro-kernel level of this CPU: 2 = AVX-512F, 1 = AVX2+FMA, 0 = none (use BLAS)."""
    return _ISA


def limit_isa(int level):
    """Use micro-kernels up to ``level`` (0 none, 1 AVX2+FMA, 2 AVX-512) -- never above what
    the CPU has; returns the level now in use.  For tests of the narrower code paths:
    weights packed before the change must be repacked (``panel_shape`` changes)."""
    global _ISA
    _ISA = min(max(level, 0), rk_isa_level())
    return _ISA


def panel_shape(transposed=False):
    """``(MR, NR)``: rows per packed weight panel and columns per packed B panel of the
    normal (vectors along n) or transposed (vectors along m, AVX-512 only) tiles."""
    t = 1 if (transposed and _ISA >= 2) else 0
    return rk_mr(_ISA, t), rk_nr(_ISA, t)


def pack_weights(const float[:, ::1] a, transposed=False):
    """Pack ``a`` (M, K) float32 into micro-kernel panels: a new array (ceil(M/MR), K, MR),
    panel ``p`` row ``k`` holding ``a[p*MR:(p+1)*MR, k]`` (zero past M), MR from
    ``panel_shape(transposed)``.  Copies."""
    cdef Py_ssize_t M = a.shape[0], K = a.shape[1]
    cdef int MR = panel_shape(transposed)[0]
    cdef Py_ssize_t npanel = (M + MR - 1) // MR
    out = np.zeros((npanel * MR, K), np.float32)
    out[:M] = a
    return np.ascontiguousarray(out.reshape(npanel, MR, K).transpose(0, 2, 1))


def _aligned_ptr(float[::1] buf, Py_ssize_t need):
    """Address of the first 64-byte aligned float of ``buf`` with ``need`` floats after it."""
    cdef intptr_t p = <intptr_t>&buf[0]
    cdef intptr_t q = (p + 63) & ~(<intptr_t>63)
    if (q - p) // 4 + need > buf.shape[0]:
        raise ValueError("scratch buffer too small")
    return q


def gather_gemm(const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx,
                a_packed, Py_ssize_t M, bias, float[:, :] y,
                float[::1] scratch, Py_ssize_t kcb, Py_ssize_t ncb,
                Py_ssize_t n_begin=0, Py_ssize_t n_end=-1, bint transposed=False, grid=None, act=None,
                Py_ssize_t pstride=0, residual=None, prepacked=None):
    """``y[m, n] = act(bias[m] + sum_k A[m, k] * P[off[k] + idx[n]] + residual[m, n])`` for n in
    [n_begin, n_end).

    ``a_packed``: ``pack_weights(A, transposed)`` of A (M, K); ``off`` (K,), ``idx`` (N,)
    int32 flat indices into ``P`` (every ``off[k] + idx[n]`` must lie inside ``P``);
    ``bias``: (M,) float32 or None; ``y``: (M, N) float32 rows (any row stride), written
    in place -- with ``transposed`` it is Y^T, (N, M), instead; ``scratch``: float32, at
    least ``kcb * ncb + 16`` floats (B blocks of ``kcb`` x ``ncb``, ``ncb`` a multiple
    of NR).  ``grid=(gw, gow)`` (AVX-512, normal tiles): the columns n are positions on
    a grid of rows of ``gw`` of which the first ``gow`` are real; ``y`` is then
    (M, N // gw * gow) and receives only the real ones.  ``act``: None or a fused
    activation (``(ACT_CLIP, lo, hi)``, ``(ACT_LEAKY, alpha)``) applied to the tiles in
    registers before they are stored.  ``residual``: None or a float32 array of ``y``'s shape
    and row stride (normal tiles only), added in registers on the last K block before
    the activation (a fused Add; same float32 sums as the separate Add).

    Grouped convolution in one call: ``a_packed`` of shape (G, panels, K, MR) holds G
    packed weight matrices of M rows each; group g reads ``P[g * pstride + off[k] + idx[n]]``
    and writes rows ``[g*M, (g+1)*M)`` of ``y`` (G*M rows; columns of Y^T when
    ``transposed``), with ``bias`` of G*M values.

    ``prepacked``: None, or a float32 buffer holding the B blocks of columns
    ``[n_begin, n_end)`` packed by :func:`pack_gather_b` with the same ``P``, ``off``,
    ``idx``, ``kcb`` and ``transposed`` (one group, ``n_end - n_begin <= ncb``): ``B`` is
    then read from it instead of being packed into ``scratch``, with the same values, so
    calls on disjoint row ranges of the weights can share one packing.  Releases the GIL.
    """
    cdef _Gemm g
    if _gemm_setup(&g, P, off, idx, a_packed, M, bias, y, kcb, ncb, n_begin, n_end, transposed, grid, act,
                   pstride, residual, prepacked) == 0:
        return
    cdef float *bp = <float *><intptr_t>_aligned_ptr(scratch, kcb * ncb)
    with nogil:
        _gemm_span(&g, bp, 0, g.panels, g.n_begin, g.n_end)


cdef int _tile_kind(bint transposed, str who) except -1:
    """1 for the transposed tiles, 0 for the normal ones; raises where this CPU has neither
    micro-kernel, or transposed tiles are asked for without AVX-512."""
    if _ISA == 0:
        raise RuntimeError(f"{who}: no micro-kernel for this CPU")
    if transposed and _ISA < 2:
        raise ValueError(f"{who}: transposed tiles need AVX-512")
    return 1 if transposed else 0


ctypedef struct _Gemm:
    # one gather GEMM, checked by _gemm_setup (see gather_gemm)
    int t, mr, has_act
    const float *P
    const int32_t *off
    const int32_t *idx
    long M, K, G, N, panels, pstride, astride, ldy, kcb, ncb, gw, gow, n_begin, n_end
    const float *a
    const float *bias
    float *y
    const float *res
    const float *pre
    rk_act act


cdef int _gemm_setup(_Gemm *g, const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx,
                     a_packed, Py_ssize_t M, bias, float[:, :] y, Py_ssize_t kcb, Py_ssize_t ncb,
                     Py_ssize_t n_begin, Py_ssize_t n_end, bint transposed, grid, act, Py_ssize_t pstride,
                     residual, prepacked) except -1:
    """Check gather_gemm's arguments and fill ``g``; 0 when there is nothing to compute."""
    cdef const float[:, :, :, ::1] a4 = a_packed if a_packed.ndim == 4 else a_packed[None]
    cdef Py_ssize_t G = a4.shape[0], K = off.shape[0], N = idx.shape[0]
    cdef int t = 1 if (transposed and _ISA >= 2) else 0
    cdef long gw = 0, gow = 0
    cdef Py_ssize_t ny = N
    if grid is not None:
        gw, gow = grid
        if _ISA < 2 or t or gw <= 0 or gow <= 0 or gow > gw or N % gw:
            raise ValueError("gather_gemm: grid output needs AVX-512 normal tiles and N a multiple of gw")
        ny = N // gw * gow
    cdef int MR = rk_mr(_ISA, t), NR = rk_nr(_ISA, t)
    cdef const float[::1] bview
    g.bias = NULL
    g.has_act = _act_from(act, &g.act) != 0
    _tile_kind(transposed, "gather_gemm")
    if n_end < 0:
        n_end = N
    if a4.shape[1] * MR < M or a4.shape[2] != K or a4.shape[3] != MR or G < 1 or (G > 1 and pstride < 0):
        raise ValueError("gather_gemm: packed weights do not match")
    if (y.shape[0], y.shape[1]) != ((N, G * M) if t else (G * M, ny)) or ncb % NR != 0 or ncb <= 0 \
            or n_begin < 0 or n_end > N:
        raise ValueError("gather_gemm: bad output or block shape")
    if bias is not None:
        bview = bias
        if bview.shape[0] != G * M:
            raise ValueError("gather_gemm: bias length")
        g.bias = &bview[0]
    if M == 0 or N == 0 or n_end <= n_begin:
        return 0
    if K == 0:
        raise ValueError("gather_gemm: K == 0")
    if y.strides[1] != 4 or y.strides[0] % 4:
        raise ValueError("gather_gemm: rows of y must be contiguous float32")
    g.pre = NULL
    if prepacked is not None:
        if G != 1 or n_end - n_begin > ncb:
            raise ValueError(f"gather_gemm: prepacked B needs one group and one column block (n_end - n_begin "
                             f"<= ncb), got {G} groups and {n_end - n_begin} columns for ncb={ncb}")
        g.pre = <const float *><intptr_t>_aligned_ptr(prepacked, prepacked_size(K, kcb, n_end - n_begin, transposed))
    g.ldy = y.strides[0] // 4
    g.res = NULL
    if residual is not None:
        if t:
            raise ValueError("gather_gemm: no residual with transposed tiles")
        g.res = _residual_ptr(residual, (y.shape[0], y.shape[1]), g.ldy, "gather_gemm")
    g.t, g.mr = t, MR
    g.P, g.off, g.idx = &P[0], &off[0], &idx[0]
    g.M, g.K, g.G, g.N, g.panels = M, K, G, N, (M + MR - 1) // MR
    g.pstride, g.astride = pstride, a4.shape[1] * a4.shape[2] * a4.shape[3]
    g.kcb, g.ncb, g.gw, g.gow, g.n_begin, g.n_end = kcb, ncb, gw, gow, n_begin, n_end
    g.a = &a4[0, 0, 0, 0]
    g.y = &y[0, 0]
    return 1


cdef void _gemm_span(const _Gemm *g, float *bp, long p0, long p1, long n0, long n1) noexcept nogil:
    """Rows of weight panels ``[p0, p1)`` (of every group) and columns ``[n0, n1)`` of ``g``,
    each tile exactly as the whole GEMM computes it (``bp``: this thread's B block)."""
    cdef long m0 = p0 * g.mr, m1 = min(g.M, p1 * g.mr), gi, r
    cdef const rk_act *ap = &g.act if g.has_act else NULL
    for gi in range(g.G):
        r = gi * g.M + m0
        rk_gather_gemm(_ISA, g.t, g.P + gi * g.pstride, g.off, g.idx, m1 - m0, g.K,
                       g.a + gi * g.astride + p0 * g.K * g.mr, g.bias + r if g.bias != NULL else NULL,
                       g.y + (r if g.t else r * g.ldy), g.ldy, bp, g.kcb, g.ncb, n0, n1, g.gw, g.gow, ap,
                       g.res + r * g.ldy if g.res != NULL else NULL, g.pre)


ctypedef struct _GemmItems:
    # a gather GEMM cut into (row part, column block) work items (see gather_gemm_items)
    _Gemm g
    float *scratch        # 64-byte aligned, one B block per thread slot
    long sstride
    long nblocks
    long parts
    const int64_t *rows   # panel ranges of the row parts: (begin, end) pairs
    float *fy             # finish: Y from the Y^T tiles, per row part (NULL: none)
    const float *fres
    int fhas_act
    rk_act fact


cdef long _round16(long n) noexcept nogil:
    return (n + 15) // 16 * 16


cdef int _gemm_items(void *ctx, int64_t j0, int64_t j1, int slot) noexcept nogil:
    cdef _GemmItems *it = <_GemmItems *>ctx
    cdef const _Gemm *g = &it.g
    cdef float *bp = it.scratch + slot * it.sstride
    cdef int64_t j, part, b, p0, p1
    cdef long m0, m1, n0, n1
    for j in range(j0, j1):
        part = j // it.nblocks  # part-major: a thread's range keeps to few weight rows
        b = j % it.nblocks
        n0 = b * g.ncb
        n1 = min(g.N, n0 + g.ncb)
        p0, p1 = it.rows[2 * part], it.rows[2 * part + 1]
        _gemm_span(g, bp, p0, p1, n0, n1)
        if it.fy != NULL:
            m0, m1 = p0 * g.mr, min(g.M, p1 * g.mr)
            rk_transpose(g.y + m0, g.N, m1 - m0, g.ldy, it.fy + m0 * g.N, g.N)
            if it.fres != NULL:
                rk_bias_act(_ISA, it.fy + m0 * g.N, m1 - m0, g.N, g.N, NULL, &it.fact if it.fhas_act else NULL,
                            it.fres + m0 * g.N, g.N)
    return 0


cdef rk_pool_api *_POOL_API = <rk_pool_api *>PyCapsule_GetPointer(_thread_pool.API, RK_POOL_API_CAPSULE)


cdef rk_pool *_pool_from(object handle) except? NULL:
    """The pool of a ``WorkerPool.handle`` capsule (None: NULL, run on the caller)."""
    if handle is None:
        return NULL
    if not PyCapsule_IsValid(handle, RK_POOL_CAPSULE):
        raise TypeError(f"pool must be a WorkerPool.handle capsule or None, got {type(handle).__name__}")
    return <rk_pool *>PyCapsule_GetPointer(handle, RK_POOL_CAPSULE)


cdef int _run_items(rk_pool *pool, rk_range_fn fn, void *ctx, int64_t n) noexcept nogil:
    """``fn`` over work items ``[0, n)``, on the pool's threads (one item per range piece)
    or, without a pool, on the caller."""
    if pool == NULL:
        return fn(ctx, 0, n, 0)
    return _POOL_API.run(pool, fn, ctx, n, 1)


def gather_gemm_items(pool, const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx,
                      a_packed, Py_ssize_t M, bias, float[:, :] y, float[::1] scratch, Py_ssize_t kcb,
                      Py_ssize_t ncb, row_parts=None, bint transposed=False, grid=None,
                      act=None, Py_ssize_t pstride=0, residual=None, prepacked=None, finish=None):
    """:func:`gather_gemm` over all columns, cut into work items run on the threads of
    ``pool`` (a ``WorkerPool.handle`` capsule; None: the caller alone) without the GIL.

    Item ``j`` is (row part ``j // nblocks``, column block ``j % nblocks``) with column
    blocks of ``ncb`` columns: every output value is the one the uncut GEMM computes.  ``row_parts``: None (one part, every
    row) or ``[(panel_begin, panel_end), ...]`` ranges of weight panels (one group).
    ``scratch``: float32, ``threads * (kcb * ncb + 16) + 16`` floats at least (one B
    block per thread).  ``finish=(y, residual, act)`` (transposed tiles, row parts and
    one column block only): after an item's rows are computed, they are transposed
    from ``y`` (Y^T) into ``finish``'s ``y`` (M, N), adding ``residual`` (or None) and
    then applying ``act`` when there is a residual, while they are in cache."""
    cdef _GemmItems it
    if _gemm_setup(&it.g, P, off, idx, a_packed, M, bias, y, kcb, ncb, 0, -1, transposed, grid, act, pstride,
                   residual, prepacked) == 0:
        return
    cdef rk_pool *pool_p = _pool_from(pool)
    cdef int threads = _POOL_API.threads(pool_p) if pool_p != NULL else 1
    it.nblocks = (it.g.N + ncb - 1) // ncb
    if it.g.pre != NULL and it.nblocks != 1:
        raise ValueError("gather_gemm_items: prepacked B needs one column block")
    cdef Py_ssize_t k
    cdef const int64_t[:, ::1] rv
    cdef int64_t whole[2]
    if row_parts is None:
        it.parts = 1
        whole[0], whole[1] = 0, it.g.panels
        it.rows = whole
    else:
        rv = parts_array = np.asarray(row_parts, dtype=np.int64).reshape(-1, 2)
        it.parts = rv.shape[0]
        if it.g.G != 1 or it.parts == 0:
            raise ValueError(f"gather_gemm_items: row parts of one group expected, got {it.parts} parts of "
                             f"{it.g.G} groups")
        for k in range(it.parts):
            if not 0 <= rv[k, 0] < rv[k, 1] <= it.g.panels:
                raise ValueError(f"gather_gemm_items: row part {tuple(parts_array[k])} outside panels "
                                 f"[0, {it.g.panels})")
        it.rows = &rv[0, 0]
    it.sstride = _round16(kcb * ncb)
    it.scratch = <float *><intptr_t>_aligned_ptr(scratch, threads * it.sstride)
    cdef float[:, ::1] fy
    it.fy, it.fres, it.fhas_act = NULL, NULL, 0
    if finish is not None:
        if not it.g.t or row_parts is None or it.nblocks != 1:
            raise ValueError("gather_gemm_items: finish needs transposed tiles, row parts and one column block")
        fy = finish[0]
        if fy.shape[0] != it.g.M or fy.shape[1] != it.g.N or (it.g.M > 1 and fy.strides[0] != 4 * it.g.N):
            raise ValueError("gather_gemm_items: finish output must be (M, N), C-contiguous")
        it.fy = &fy[0, 0]
        it.fres = _residual_ptr(finish[1], (fy.shape[0], fy.shape[1]), it.g.N, "gather_gemm_items")
        it.fhas_act = _act_from(finish[2], &it.fact) != 0 if it.fres != NULL else 0
    with nogil:
        _run_items(pool_p, _gemm_items, &it, it.parts * it.nblocks)


def prepacked_size(Py_ssize_t K, Py_ssize_t kcb, Py_ssize_t n, bint transposed=False):
    """Floats :func:`pack_gather_b` writes for a K x ``n`` gather GEMM in K blocks of
    ``kcb`` (its buffer needs 16 more, for alignment)."""
    if K <= 0 or kcb <= 0 or n < 0:
        raise ValueError(f"prepacked_size: K ({K}) and kcb ({kcb}) must be > 0 and n ({n}) >= 0")
    cdef int t = 1 if (transposed and _ISA >= 2) else 0
    return ((K + kcb - 1) // kcb) * rk_bblock_stride(kcb, n, rk_nr(_ISA, t))


def pack_gather_b(const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx, float[::1] out,
                  Py_ssize_t kcb, Py_ssize_t n_begin=0, Py_ssize_t n_end=-1, bint transposed=False,
                  Py_ssize_t kb_begin=0, Py_ssize_t kb_end=-1, pool=None):
    """Pack the B blocks (K blocks ``[kb_begin, kb_end)``, default all, of ``kcb`` rows) of
    columns ``[n_begin, n_end)`` of a gather GEMM into ``out`` (at least
    ``prepacked_size(K, kcb, n_end - n_begin, transposed) + 16`` floats), for
    :func:`gather_gemm`'s ``prepacked``: the same blocks it packs itself.  Disjoint K
    block ranges can be packed on several threads; ``pool`` (a ``WorkerPool.handle``
    capsule) shares the K blocks out across its threads itself.  Releases the GIL."""
    cdef Py_ssize_t K = off.shape[0], N = idx.shape[0]
    cdef int t = _tile_kind(transposed, "pack_gather_b")
    if n_end < 0:
        n_end = N
    cdef Py_ssize_t nkb = (K + kcb - 1) // kcb if kcb > 0 else 0
    if kb_end < 0:
        kb_end = nkb
    if K == 0 or kcb <= 0 or not 0 <= n_begin < n_end <= N or not 0 <= kb_begin <= kb_end <= nkb:
        raise ValueError(f"pack_gather_b: bad range: K={K}, kcb={kcb}, columns [{n_begin}, {n_end}) of {N}, "
                         f"K blocks [{kb_begin}, {kb_end}) of {nkb}")
    cdef _PackB pb
    pb.dst = <float *><intptr_t>_aligned_ptr(out, prepacked_size(K, kcb, n_end - n_begin, transposed))
    pb.t, pb.P, pb.off, pb.idx, pb.K, pb.kcb, pb.n0, pb.nc, pb.kb0 = t, &P[0], &off[0], &idx[0], K, kcb, n_begin, \
        n_end - n_begin, kb_begin
    cdef rk_pool *pool_p = _pool_from(pool)
    with nogil:
        _run_items(pool_p, _pack_b_items, &pb, kb_end - kb_begin)


ctypedef struct _PackB:
    # pack_gather_b's work: K blocks kb0 + [j0, j1) are the work items
    int t
    const float *P
    const int32_t *off
    const int32_t *idx
    long K, kcb, n0, nc, kb0
    float *dst


cdef int _pack_b_items(void *ctx, int64_t j0, int64_t j1, int slot) noexcept nogil:
    cdef _PackB *pb = <_PackB *>ctx
    rk_pack_gather_b(_ISA, pb.t, pb.P, pb.off, pb.idx, pb.K, pb.kcb, pb.n0, pb.nc, pb.kb0 + j0, pb.kb0 + j1, pb.dst)
    return 0


def transpose_into(const float[:, :] src, float[:, :] dst):
    """``dst[...] = src.T`` for ``src`` (R, C) and ``dst`` (C, R): rows contiguous, any row
    stride.  Cache-blocked (8 x 8 AVX2 blocks where available).  Releases the GIL."""
    cdef Py_ssize_t R = src.shape[0], C = src.shape[1]
    if dst.shape[0] != C or dst.shape[1] != R:
        raise ValueError("transpose_into: shapes do not match")
    if (R > 1 and C > 1) and (src.strides[1] != 4 or dst.strides[1] != 4 or src.strides[0] % 4 or dst.strides[0] % 4):
        raise ValueError("transpose_into: rows must be contiguous float32")
    if R == 0 or C == 0:
        return
    cdef float *dp = &dst[0, 0]
    cdef Py_ssize_t ldd = dst.strides[0] // 4
    with nogil:
        rk_transpose(&src[0, 0], R, C, src.strides[0] // 4, dp, ldd)


def phase_split(const float[:, :, :, ::1] x, int sd, int sh, int sw, int pd, int ph, int pw,
                int Ds, int Hs, int Ws, float[::1] out):
    """Zero-padded stride-phase split of ``x`` (C, D, H, W) into ``out`` (flat, at least
    C*sd*sh*sw*Ds*Hs*Ws floats): ``out[c, a, b, e, z, y, x] = x[c, z*sd+a-pd, y*sh+b-ph, x*sw+e-pw]``
    (0 outside the image).  Releases the GIL."""
    cdef Py_ssize_t C = x.shape[0]
    if out.shape[0] < C * sd * sh * sw * Ds * Hs * Ws:
        raise ValueError("phase_split: output too small")
    if C == 0 or x.shape[1] == 0 or x.shape[2] == 0 or x.shape[3] == 0:
        out[:] = 0
        return
    with nogil:
        rk_phase_split(&x[0, 0, 0, 0], C, x.shape[1], x.shape[2], x.shape[3], sd, sh, sw, pd, ph, pw,
                       Ds, Hs, Ws, &out[0])


def im2col(const float[:, :, :, :] x, float[:, ::1] cols, kernel, strides, dilations, pads_begin, out_shape):
    """Unfold ``x`` (C, D, H, W; each channel C-contiguous, channels any stride apart) into
    ``cols`` (C*kd*kh*kw, OD*OH*OW), written fully.

    Row ``((c*kd + a)*kh + i)*kw + j`` holds input pixel
    ``(c, od*sd - pd + a*dd, oh*sh - ph + i*dh, ow*sw - pw + j*dw)`` (0 in the padding)
    for every output position.  ``kernel``/``strides``/``dilations``/``pads_begin``/
    ``out_shape``: 3-tuples (d, h, w).  Releases the GIL."""
    cdef long kd = kernel[0], kh = kernel[1], kw = kernel[2]
    cdef long sd = strides[0], sh = strides[1], sw = strides[2]
    cdef long dd = dilations[0], dh = dilations[1], dw = dilations[2]
    cdef long pd = pads_begin[0], ph = pads_begin[1], pw = pads_begin[2]
    cdef long OD = out_shape[0], OH = out_shape[1], OW = out_shape[2]
    cdef long C = x.shape[0]
    if cols.shape[0] != C * kd * kh * kw or cols.shape[1] != OD * OH * OW:
        raise ValueError("im2col: cols has the wrong shape")
    if cols.shape[0] == 0 or cols.shape[1] == 0:
        return
    if x.shape[1] * x.shape[2] * x.shape[3] == 0:
        cols[:, :] = 0
        return
    if x.strides[3] != 4 or (x.shape[2] > 1 and x.strides[2] != 4 * x.shape[3]) or x.strides[0] % 4 \
            or (x.shape[1] > 1 and x.strides[1] != 4 * x.shape[3] * x.shape[2]):
        raise ValueError("im2col: each channel of x must be C-contiguous")
    cdef long cs = x.strides[0] // 4
    with nogil:
        rk_im2col(&x[0, 0, 0, 0], C, x.shape[1], x.shape[2], x.shape[3], cs, kd, kh, kw, sd, sh, sw,
                  dd, dh, dw, pd, ph, pw, OD, OH, OW, &cols[0, 0], 0)


def col2im(float[:, ::1] cols, float[:, :, :, ::1] y, kernel, strides, dilations, pads_begin, grid_shape):
    """Fold ``cols`` (C*kd*kh*kw, GD*GH*GW) back into ``y`` (C, D, H, W), accumulating:
    the adjoint of ``im2col`` with the same parameters (``grid_shape`` = its ``out_shape``).
    Taps falling in the padding are dropped.  Used by ConvTranspose.  Releases the GIL."""
    cdef long kd = kernel[0], kh = kernel[1], kw = kernel[2]
    cdef long sd = strides[0], sh = strides[1], sw = strides[2]
    cdef long dd = dilations[0], dh = dilations[1], dw = dilations[2]
    cdef long pd = pads_begin[0], ph = pads_begin[1], pw = pads_begin[2]
    cdef long GD = grid_shape[0], GH = grid_shape[1], GW = grid_shape[2]
    cdef long C = y.shape[0]
    if cols.shape[0] != C * kd * kh * kw or cols.shape[1] != GD * GH * GW:
        raise ValueError("col2im: cols has the wrong shape")
    if cols.shape[0] == 0 or cols.shape[1] == 0 or y.shape[1] * y.shape[2] * y.shape[3] == 0:
        return
    with nogil:
        rk_im2col(&y[0, 0, 0, 0], C, y.shape[1], y.shape[2], y.shape[3], y.shape[1] * y.shape[2] * y.shape[3],
                  kd, kh, kw, sd, sh, sw,
                  dd, dh, dw, pd, ph, pw, GD, GH, GW, &cols[0, 0], 1)


def depthwise_scratch_size(H, W, pt, pl, pb, pr):
    """Floats of scratch ``depthwise`` needs for an (H, W) plane with these pads."""
    return (H + pt + pb + 1) * (W + pl + pr) + 64


def depthwise(const float[:, :, ::1] x, const float[:, :, ::1] w, bias, float[:, :, ::1] y,
              int sh, int sw, int dh, int dw, int pt, int pl, int pb, int pr, float[::1] scratch, act=None,
              residual=None):
    """Depthwise 2-D convolution of one image, written into ``y`` (M, OH, OW).

    ``x`` (C, H, W); ``w`` (M, kh, kw) with M a multiple of C (output channel m reads
    input channel m // (M // C)); ``bias`` (M,) float32 or None; ``scratch``: at least
    ``depthwise_scratch_size(H, W, pt, pl, pb, pr)`` floats; ``act``: None or a fused
    activation (see ``gather_gemm``), applied to each channel plane as it is finished;
    ``residual``: None or a C-contiguous float32 (M, OH, OW) array added to each finished
    plane before the activation.  Releases the GIL."""
    cdef long C = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef long M = w.shape[0], kh = w.shape[1], kw = w.shape[2]
    cdef long OH = y.shape[1], OW = y.shape[2]
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    cdef float *pad = NULL
    cdef rk_act a
    cdef const rk_act *ap = &a if _act_from(act, &a) else NULL
    if M == 0 or OH == 0 or OW == 0:
        return
    if C == 0 or M % C != 0 or y.shape[0] != M:
        raise ValueError("depthwise: channel counts")
    if (OH - 1) * sh + (kh - 1) * dh >= H + pt + pb or (OW - 1) * sw + (kw - 1) * dw >= W + pl + pr:
        raise ValueError("depthwise: output shape too large")
    if bias is not None:
        bview = bias
        if bview.shape[0] != M:
            raise ValueError("depthwise: bias length")
        bptr = &bview[0]
    if scratch.shape[0] < depthwise_scratch_size(H, W, pt, pl, pb, pr):
        raise ValueError("depthwise: scratch too small")
    pad = &scratch[0]
    cdef const float *rp = _residual_ptr(residual, (M, OH, OW), OW, "depthwise")
    with nogil:
        rk_depthwise(_ISA, &x[0, 0, 0], C, H, W, &w[0, 0, 0], M, M // C, kh, kw, sh, sw, dh, dw,
                     pt, pl, pb, pr, OH, OW, bptr, &y[0, 0, 0], pad, ap, rp)


def winograd_weights(const float[:, :, :, ::1] w, int tile=4):
    """Winograd F(tile x tile, 3x3) weight transform (``tile`` 4 or 2): a new (A*A, M, C)
    float32 array (A = tile + 2), ``[A*a + b, m, c] = (G w[m, c] G^T)[a, b]`` (computed in
    float64).  Copies."""
    if tile == 4:
        G = np.array([[1.0, 0.0, 0.0], [-2.0 / 3.0, -2.0 / 3.0, -2.0 / 3.0], [-2.0 / 3.0, 2.0 / 3.0, -2.0 / 3.0],
                      [1.0 / 6.0, 1.0 / 3.0, 2.0 / 3.0], [1.0 / 6.0, -1.0 / 3.0, 2.0 / 3.0], [0.0, 0.0, 4.0]],
                     np.float64) / 4.0
    elif tile == 2:
        G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]], np.float64)
    else:
        raise ValueError("winograd_weights: tile must be 4 or 2")
    wa = np.asarray(w, dtype=np.float64)
    if wa.shape[2] != 3 or wa.shape[3] != 3:
        raise ValueError("winograd_weights: 3x3 kernels only")
    u = np.einsum("ai,mcij,bj->abmc", G, wa, G, optimize=True)
    a = tile + 2
    return np.ascontiguousarray(u.reshape(a * a, wa.shape[0], wa.shape[1]), dtype=np.float32)


cdef long _wino_stride(long n) noexcept nogil:
    """A stride of at least ``n`` floats between the rows (phases, components) the Winograd
    input transform reads and writes side by side: a multiple of 16 floats that is 64
    floats past a multiple of 1024, so those rows never sit a multiple of 4 KiB apart
    (same L1 sets, 4K aliasing between loads and stores: measured 2x slower)."""
    cdef long k = (n + 1023 - 64) // 1024
    return k * 1024 + 64


def winograd_scratch(Py_ssize_t C, Py_ssize_t TH, Py_ssize_t TW, int tile=4):
    """``(v, v_stride, split, buf)`` for :func:`winograd_input` on ``C`` channels and a TH x
    TW tile grid: the sizes in floats of its ``V``, ``split`` and ``buf`` arguments (``buf``
    also covers :func:`winograd_output`'s 40 * TH * TW) and the distance in floats between
    the transformed components in ``V`` (the ``pstride`` of ``gather_gemm_batch``); every
    channel takes ``(TH + 1) * (TW + 1)`` floats of a component (see ``winograd_input``)."""
    cdef Py_ssize_t plane = (TH + 1) * (TW + 1), A2 = (tile + 2) * (tile + 2)
    if tile != 4 and tile != 2:
        raise ValueError("winograd_scratch: tile must be 4 or 2")
    cdef long stride = _wino_stride(C * plane)
    return (A2 * stride, stride, tile * tile * stride + TW + 2 + 16, max(A2 * RK_WIN_CHUNK_ + 16, 40 * TH * TW))


cdef extern from *:
    """
    #define RK_WIN_CHUNK_ RK_WIN_CHUNK
    """
    long RK_WIN_CHUNK_


def winograd_input(const float[:, :, ::1] x, int pt, int pl, int TH, int TW, float[::1] V,
                   float[::1] split, float[::1] buf, Py_ssize_t c_begin=0, Py_ssize_t c_end=-1, int tile=4):
    """Winograd F(tile x tile, 3x3) input transform (``tile`` 4 or 2, A = tile + 2) of one
    image ``x`` (C, H, W) with pads (top ``pt``, left ``pl``) into ``V`` (A*A components
    ``v_stride`` floats apart, each (C, (TH+1)*(TW+1)); see :func:`winograd_scratch`): the AxA patch of the output tile (ty, tx) starts at input row
    tile*ty - pt, column tile*tx - pl and lands at grid column ty*(TW+1) + tx of its
    channel (columns with tx == TW and the row ty == TH are padding, never meaningful).
    ``split``: scratch shared by every channel range, ``buf``: one per concurrent caller;
    sizes from :func:`winograd_scratch`.  Only channels ``[c_begin, c_end)`` are
    transformed (default all), so disjoint ranges can run on several threads.  Releases
    the GIL."""
    cdef long C = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef long plane = (<long>TH + 1) * (TW + 1)
    cdef long A2 = (tile + 2) * (tile + 2), ph = tile * tile
    cdef long ss = _wino_stride(C * plane)   # floats between the phases of split, and the components of V
    if tile != 4 and tile != 2:
        raise ValueError("winograd_input: tile must be 4 or 2")
    if c_end < 0:
        c_end = C
    if V.shape[0] < A2 * ss or buf.shape[0] < A2 * RK_WIN_CHUNK_ + 16 \
            or split.shape[0] < ph * ss + TW + 2 + 16:
        raise ValueError("winograd_input: buffers too small")
    if not 0 <= c_begin <= c_end <= C:
        raise ValueError("winograd_input: bad channel range")
    if c_end == c_begin or TH == 0 or TW == 0 or H == 0 or W == 0:
        return
    cdef float *bufp = <float *><intptr_t>_aligned_ptr(buf, A2 * RK_WIN_CHUNK_)   # 64-byte aligned rows
    with nogil:
        _wino_in(&x[0, 0, 0], C, H, W, c_begin, c_end, tile, pt, pl, TH, TW, &split[0], &V[0], bufp)


cdef void _wino_in(const float *x, long C, long H, long W, long c0, long c1, int tile, long pt, long pl,
                   long TH, long TW, float *split, float *V, float *bufp) noexcept nogil:
    """winograd_input's work on channels ``[c0, c1)`` of ``x`` (C, H, W), arguments checked."""
    cdef long plane = (TH + 1) * (TW + 1), ph = tile * tile
    cdef long ss = _wino_stride(C * plane)
    rk_wino_split(_ISA, x + c0 * H * W, c1 - c0, H, W, tile, pt, pl, TH + 1, TW + 1, split + c0 * plane, ss)
    if c1 == C:  # the slack read past the last phase (padding positions only)
        memset(split + ph * ss, 0, (TW + 2 + 16) * sizeof(float))
    if tile == 4:
        rk_wino_in(_ISA, split + c0 * plane, ss, c1 - c0, TH, TW, V + c0 * plane, ss, bufp)
    else:
        rk_wino2_in(_ISA, split + c0 * plane, ss, c1 - c0, TH, TW, V + c0 * plane, ss, bufp)


def winograd_output(const float[::1] Mt, Py_ssize_t M, int TH, int TW, bias, float[:, :, ::1] y,
                    float[::1] buf, Py_ssize_t m_begin=0, Py_ssize_t m_end=-1, act=None, int tile=4,
                    residual=None, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1):
    """Winograd F(tile x tile, 3x3) output transform (``tile`` 4 or 2, A = tile + 2):
    ``y`` (M, OH, OW) = act(bias + A^T M A) per output tile from ``Mt`` (flat (A*A, M,
    TH*TW)), cropped to OH x OW.  ``buf``: at least 40*TH*TW floats, one per concurrent
    caller.  Only output channels ``[m_begin, m_end)`` are written (default all), and only
    output rows ``[row_begin, row_end)`` (default all; ``row_begin`` a multiple of
    ``tile``): the TH tile rows of ``Mt`` are then the tiles of those rows (a band of
    the output, transformed with its own tiles).
    ``act``: None or a fused activation (see ``gather_gemm``), applied to each channel's
    transformed tiles before they are scattered into ``y``.  ``residual``: None or a
    C-contiguous float32 array of ``y``'s shape, added to each finished channel plane
    before the activation.  Releases the GIL."""
    cdef long T = <long>TH * TW
    cdef long A2 = (tile + 2) * (tile + 2)
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    cdef rk_act a
    cdef const rk_act *ap = &a if _act_from(act, &a) else NULL
    if tile != 4 and tile != 2:
        raise ValueError("winograd_output: tile must be 4 or 2")
    if m_end < 0:
        m_end = M
    if row_end < 0:
        row_end = y.shape[1]
    if not 0 <= row_begin <= row_end <= y.shape[1] or row_begin % tile:
        raise ValueError("winograd_output: bad row range")
    cdef long OH = row_end - row_begin, OW = y.shape[2]
    if Mt.shape[0] < A2 * M * T or buf.shape[0] < 40 * T or y.shape[0] != M:
        raise ValueError("winograd_output: buffers too small")
    if OH > tile * TH or OW > tile * TW:
        raise ValueError("winograd_output: output larger than the tiles")
    if not 0 <= m_begin <= m_end <= M:
        raise ValueError("winograd_output: bad channel range")
    if bias is not None:
        bview = bias
        if bview.shape[0] != M:
            raise ValueError("winograd_output: bias length")
        bptr = &bview[m_begin]
    if m_end == m_begin or T == 0 or OH == 0 or OW == 0:
        return
    if (y.shape[0] > 1 and y.strides[0] != y.shape[1] * OW * 4) or (y.shape[1] > 1 and y.strides[1] != OW * 4):
        raise ValueError("winograd_output: y must be C-contiguous")
    cdef long ldc = y.shape[1] * OW
    cdef const float *rp = _residual_ptr(residual, (y.shape[0], y.shape[1], y.shape[2]), y.shape[2],
                                         "winograd_output")
    if rp != NULL:
        rp += m_begin * ldc + row_begin * OW
    with nogil:
        _wino_out(tile, &Mt[m_begin * T], M * T, m_end - m_begin, TH, TW, OH, OW, bptr, &y[m_begin, row_begin, 0],
                  ldc, &buf[0], ap, rp)


cdef inline void _wino_out(int tile, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW,
                           const float *bias, float *y, long ldc, float *buf, const rk_act *ap,
                           const float *rp) noexcept nogil:
    if tile == 4:
        rk_wino_out(_ISA, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, ap, rp)
    else:
        rk_wino2_out(_ISA, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, ap, rp)


def bias_act(float[:, :] y, bias, act=None, residual=None):
    """In place: ``y[m, n] = act(y[m, n] + bias[m] + residual[m, n])`` (in that order) for
    ``y`` (M, N) float32 with contiguous rows (any row stride); ``bias`` (M,) float32 or
    None; ``act`` None or a fused activation (see ``gather_gemm``); ``residual`` None or
    an (M, N) float32 array with contiguous rows (any row stride).  One pass.  Releases
    the GIL."""
    cdef Py_ssize_t M = y.shape[0], N = y.shape[1]
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    cdef rk_act a
    cdef const rk_act *ap = &a if _act_from(act, &a) else NULL
    if bias is not None:
        bview = bias
        if bview.shape[0] != M:
            raise ValueError("bias_act: bias length")
        bptr = &bview[0]
    cdef const float[:, :] rview
    cdef const float *rp = NULL
    cdef long ldr = 0
    if residual is not None:
        rview = residual
        if rview.shape[0] != M or rview.shape[1] != N:
            raise ValueError("bias_act: residual shape")
        if M and N:
            if (N > 1 and rview.strides[1] != 4) or rview.strides[0] % 4:
                raise ValueError("bias_act: rows of residual must be contiguous float32")
            rp = &rview[0, 0]
            ldr = rview.strides[0] // 4
    if M == 0 or N == 0 or (bptr == NULL and ap == NULL and rp == NULL):
        return
    if (N > 1 and y.strides[1] != 4) or y.strides[0] % 4:
        raise ValueError("bias_act: rows of y must be contiguous float32")
    cdef float *yp = &y[0, 0]
    cdef long ldy = y.strides[0] // 4
    with nogil:
        rk_bias_act(_ISA, yp, M, N, ldy, bptr, ap, rp, ldr)


def gather_gemm_batch(const float[::1] P, Py_ssize_t pstride, const int32_t[::1] off, const int32_t[::1] idx,
                      const float[:, :, :, ::1] a_packed, Py_ssize_t M, float[::1] y, float[::1] scratch,
                      Py_ssize_t kcb, Py_ssize_t ncb):
    """``nb = a_packed.shape[0]`` gather GEMMs (normal tiles, no bias):
    ``y[i, m, n] = sum_k A_i[m, k] * P[i * pstride + off[k] + idx[n]]``, ``y`` flat
    (nb, M, N).  ``a_packed[i]``: ``pack_weights(A_i)``.  Releases the GIL."""
    cdef Py_ssize_t nb = a_packed.shape[0], K = off.shape[0], N = idx.shape[0]
    cdef int MR = rk_mr(_ISA, 0), NR = rk_nr(_ISA, 0)
    if _ISA == 0:
        raise RuntimeError("gather_gemm_batch: no micro-kernel for this CPU")
    if a_packed.shape[1] * MR < M or a_packed.shape[2] != K or a_packed.shape[3] != MR:
        raise ValueError("gather_gemm_batch: packed weights do not match")
    if y.shape[0] < nb * M * N or ncb % NR != 0 or ncb <= 0 or K == 0:
        raise ValueError("gather_gemm_batch: bad output or block shape")
    if nb == 0 or M == 0 or N == 0:
        return
    cdef float *bp = <float *><intptr_t>_aligned_ptr(scratch, kcb * ncb)
    cdef long astride = a_packed.shape[1] * a_packed.shape[2] * a_packed.shape[3]
    with nogil:
        rk_gather_gemm_batch(_ISA, nb, &P[0], pstride, &off[0], &idx[0], M, K, &a_packed[0, 0, 0, 0],
                             astride, &y[0], M * N, N, bp, kcb, ncb, N)


ctypedef struct _WinoBand:
    long r0, r1, K, N, kcb, ncb
    const int32_t *off
    const int32_t *idx


ctypedef struct _WinoBands:
    # a banded Winograd Conv of every image (see winograd_bands)
    const float *x
    long C, H, W
    const float *u
    long nb, M, astride
    const float *bias
    float *y
    const float *res
    long OH, OW
    int tile, has_act
    rk_act act
    long pt, pl, TW
    _WinoBand *bands
    long nbands
    float *scratch
    long sstride, o_mt, o_buf, o_split, o_blk


cdef int _wino_band_items(void *ctx, int64_t j0, int64_t j1, int slot) noexcept nogil:
    cdef _WinoBands *wb = <_WinoBands *>ctx
    cdef float *base = wb.scratch + slot * wb.sstride
    cdef float *v = base
    cdef float *mt = base + wb.o_mt
    cdef float *buf = base + wb.o_buf
    cdef float *split = base + wb.o_split
    cdef float *blk = base + wb.o_blk
    cdef const _WinoBand *b
    cdef int64_t j, i
    cdef long n, t = wb.tile, row0, row1, ldc = wb.OH * wb.OW
    cdef const float *rp
    for j in range(j0, j1):
        i = j // wb.nbands
        b = &wb.bands[j % wb.nbands]
        n = b.r1 - b.r0
        _wino_in(wb.x + i * wb.C * wb.H * wb.W, wb.C, wb.H, wb.W, 0, wb.C, wb.tile, wb.pt - t * b.r0, wb.pl, n,
                 wb.TW, split, v, buf)
        rk_gather_gemm_batch(_ISA, wb.nb, v, _wino_stride(wb.C * (n + 1) * (wb.TW + 1)), b.off, b.idx, wb.M, b.K,
                             wb.u, wb.astride, mt, wb.M * b.N, b.N, blk, b.kcb, b.ncb, b.N)
        row0, row1 = t * b.r0, min(wb.OH, t * b.r1)
        rp = wb.res + i * wb.M * ldc + row0 * wb.OW if wb.res != NULL else NULL
        _wino_out(wb.tile, mt, wb.M * n * wb.TW, wb.M, n, wb.TW, row1 - row0, wb.OW, wb.bias,
                  wb.y + i * wb.M * ldc + row0 * wb.OW, ldc, buf, &wb.act if wb.has_act else NULL, rp)
    return 0


cdef long _wino_share(Py_ssize_t C, Py_ssize_t M, Py_ssize_t rows, Py_ssize_t TW, Py_ssize_t nblock, int tile,
                      long *parts) except -1:
    """Floats of one thread's share of :func:`winograd_bands`'s scratch; ``parts`` gets the
    offsets of its GEMM output, transform buffer, phase split and B block (its transformed
    input is first), each 64-byte aligned in an aligned share."""
    nv, _, nsplit, nbuf = winograd_scratch(C, rows, TW, tile)
    parts[0] = _round16(nv)
    parts[1] = parts[0] + _round16((tile + 2) * (tile + 2) * M * rows * TW)
    parts[2] = parts[1] + _round16(nbuf)
    parts[3] = parts[2] + _round16(nsplit)
    return parts[3] + _round16(nblock)


def winograd_bands_scratch(Py_ssize_t C, Py_ssize_t M, Py_ssize_t rows, Py_ssize_t TW, Py_ssize_t nblock,
                           int tile=4):
    """Floats one thread's share of :func:`winograd_bands`'s ``scratch`` takes, for bands of
    at most ``rows`` tile rows and B blocks of ``nblock`` floats."""
    cdef long parts[4]
    return _wino_share(C, M, rows, TW, nblock, tile, parts)


def winograd_bands(pool, const float[:, :, :, ::1] x, const float[:, :, :, ::1] u, bias, float[:, :, :, ::1] y,
                   residual, bands, int pt, int pl, int TW, float[::1] scratch, act=None, int tile=4):
    """Banded Winograd F(tile x tile, 3x3) Conv of every image of ``x`` (n, C, H, W) into
    ``y`` (n, M, OH, OW), on the threads of ``pool`` (a ``WorkerPool.handle`` capsule;
    None: the caller alone) without the GIL.

    Work item ``j`` is band ``bands[j % len(bands)]`` of image ``j // len(bands)``: its
    tile rows go through :func:`winograd_input`, :func:`gather_gemm_batch` and
    :func:`winograd_output` on one thread, in that thread's share of ``scratch`` (at
    least ``threads * winograd_bands_scratch(...) + 16`` floats), with the same values
    as those calls.  ``bands``: ``[(tile_row_begin, tile_row_end, off, idx, kcb, ncb),
    ...]`` (``off``/``idx``: int32 gather tables of that band height); ``u``:
    ``pack_weights`` of the (tile+2)^2 transformed weight matrices (M x C); ``pt``/``pl``:
    top/left padding; ``TW``: tiles per row; ``bias``, ``act``, ``residual`` (None or
    ``y``'s shape, C-contiguous) as in :func:`winograd_output`."""
    cdef _WinoBands wb
    cdef long nb = (tile + 2) * (tile + 2), k, rows = 0, nblock = 0
    cdef long parts[4]
    cdef Py_ssize_t n_img = x.shape[0]
    cdef const float[::1] bview
    cdef const int32_t[::1] off_k
    cdef const int32_t[::1] idx_k
    cdef int MR = rk_mr(_ISA, 0), NR = rk_nr(_ISA, 0)
    if tile != 4 and tile != 2:
        raise ValueError("winograd_bands: tile must be 4 or 2")
    if _ISA == 0:
        raise RuntimeError("winograd_bands: no micro-kernel for this CPU")
    wb.C, wb.H, wb.W, wb.M = x.shape[1], x.shape[2], x.shape[3], y.shape[1]
    wb.OH, wb.OW = y.shape[2], y.shape[3]
    if y.shape[0] != n_img or u.shape[0] != nb or u.shape[1] * MR < wb.M or u.shape[2] != wb.C or u.shape[3] != MR:
        raise ValueError("winograd_bands: weights, input and output do not match")
    if TW <= 0 or wb.OW > tile * TW or not bands:
        raise ValueError("winograd_bands: bad tile grid or no bands")
    wb.bias = NULL
    if bias is not None:
        bview = bias
        if bview.shape[0] != wb.M:
            raise ValueError("winograd_bands: bias length")
        wb.bias = &bview[0]
    if n_img == 0 or wb.M == 0 or wb.OH == 0 or wb.OW == 0:
        return
    cdef const float[:, :, :, ::1] r4
    wb.res = NULL
    if residual is not None:
        if tuple(residual.shape) != (n_img, wb.M, wb.OH, wb.OW) or not residual.flags.c_contiguous:
            raise ValueError("winograd_bands: residual must be C-contiguous with the output's shape")
        r4 = residual
        wb.res = &r4[0, 0, 0, 0]
    wb.has_act = _act_from(act, &wb.act) != 0
    wb.nbands = len(bands)
    band_list = list(bands)
    wb.bands = <_WinoBand *>PyMem_Malloc(wb.nbands * sizeof(_WinoBand))
    if wb.bands == NULL:
        raise MemoryError()
    try:
        for k in range(wb.nbands):
            r0, r1, off_o, idx_o, kcb, ncb = band_list[k]
            off_k, idx_k = off_o, idx_o
            n = r1 - r0
            if not 0 <= r0 < r1 or tile * r0 >= wb.OH or off_k.shape[0] != wb.C or idx_k.shape[0] != n * TW \
                    or kcb <= 0 or ncb <= 0 or ncb % NR:
                raise ValueError(f"winograd_bands: band {k} ({r0}, {r1}) does not match the tile grid or tables")
            wb.bands[k].r0, wb.bands[k].r1, wb.bands[k].K, wb.bands[k].N = r0, r1, wb.C, n * TW
            wb.bands[k].kcb, wb.bands[k].ncb = kcb, ncb
            wb.bands[k].off, wb.bands[k].idx = &off_k[0], &idx_k[0]
            rows = max(rows, n)
            nblock = max(nblock, kcb * ncb + 16)
        pool_p = _pool_from(pool)
        threads = _POOL_API.threads(pool_p) if pool_p != NULL else 1
        wb.sstride = _wino_share(wb.C, wb.M, rows, TW, nblock, tile, parts)
        wb.o_mt, wb.o_buf, wb.o_split, wb.o_blk = parts[0], parts[1], parts[2], parts[3]
        wb.scratch = <float *><intptr_t>_aligned_ptr(scratch, threads * wb.sstride)
        wb.x, wb.u, wb.y = &x[0, 0, 0, 0], &u[0, 0, 0, 0], &y[0, 0, 0, 0]
        wb.nb, wb.astride = nb, u.shape[1] * u.shape[2] * u.shape[3]
        wb.tile, wb.pt, wb.pl, wb.TW = tile, pt, pl, TW
        with nogil:
            _run_items(pool_p, _wino_band_items, &wb, n_img * wb.nbands)
    finally:
        PyMem_Free(wb.bands)
