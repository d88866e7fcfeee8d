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
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, intptr_t

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

    /* ---------------------------------------------------------------- im2col / col2im
       Image (C, D, H, W); output grid (OD, OH, OW); tap (a, i, j) of channel c reads
       (od*sd - pd + a*dd, oh*sh - ph + i*dh, ow*sw - pw + j*dw).  Row r = ((c*kd + a)*kh + i)*kw + j
       of cols holds that tap for every output position. */
    static void rk_im2col(const float *x, long C, long D, long H, long W,
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
                    const float *src = x + ((c * D + id) * H + ih) * W + (j * dw - pw);
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

    /* ---------------------------------------------------------------- phase split
       P[c][a][b][e][z][y][x] = X[c][z*sd + a - pd][y*sh + b - ph][x*sw + e - pw] (0 outside),
       plane (Ds, Hs, Ws).  A stride-s convolution becomes a stride-1 one on the phase planes. */
    static void rk_phase_split(const float *x, long C, long D, long H, long W,
                               long sd, long sh, long sw, long pd, long ph, long pw,
                               long Ds, long Hs, long Ws, float *P) {
        for (long c = 0; c < C; c++)
        for (long a = 0; a < sd; a++)
        for (long b = 0; b < sh; b++)
        for (long e = 0; e < sw; e++) {
            float *pl = P + (((c * sd + a) * sh + b) * sw + e) * Ds * Hs * Ws;
            long xlo, xhi;
            rk_valid_range(W, sw, e - pw, Ws, &xlo, &xhi);
            for (long z = 0; z < Ds; z++) {
                long iz = z * sd + a - pd;
                for (long y = 0; y < Hs; y++) {
                    long iy = y * sh + b - ph;
                    float *dst = pl + (z * Hs + y) * Ws;
                    if (iz < 0 || iz >= D || iy < 0 || iy >= H) { memset(dst, 0, Ws * sizeof(float)); continue; }
                    const float *src = x + ((c * D + iz) * H + iy) * W + (e - pw);
                    if (xlo > 0) memset(dst, 0, xlo * sizeof(float));
                    if (sw == 1) { if (xhi > xlo) memcpy(dst + xlo, src + xlo, (xhi - xlo) * sizeof(float)); }
                    else for (long o = xlo; o < xhi; o++) dst[o] = src[o * sw];
                    if (xhi < Ws) memset(dst + xhi, 0, (Ws - xhi) * sizeof(float));
                }
            }
        }
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
        }

    #define RK_DW_ARGS const float *x, long C, long H, long W, const float *w, long M, long mult,   \
                       long kh, long kw, long sh, long sw, long dh, long dw,                        \
                       long pt, long pl, long pb, long pr, long OH, long OW,                        \
                       const float *bias, float *y, float *pad

    static void rk_depthwise_generic(RK_DW_ARGS) { RK_DW_BODY }
    #if RK_X86
    __attribute__((target("avx2,fma"))) static void rk_depthwise_avx2(RK_DW_ARGS) { RK_DW_BODY }
    __attribute__((target("avx512f"))) static void rk_depthwise_avx512(RK_DW_ARGS) { RK_DW_BODY }
    #endif

    static void rk_depthwise(int isa, RK_DW_ARGS) {
    #if RK_X86
        if (isa >= 2) { rk_depthwise_avx512(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad); return; }
        if (isa == 1) { rk_depthwise_avx2(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad); return; }
    #endif
        rk_depthwise_generic(x, C, H, W, w, M, mult, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, OH, OW, bias, y, pad);
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
    /* ---- AVX-512: MR x NR = 8 x 32 (16 zmm accumulators) */
    #define K5_MR 8
    #define K5_NV 2
    #define K5_NR (16 * K5_NV)

    __attribute__((target("avx512f")))
    static void rk_packB_512(const float *P, const int32_t *off, const int32_t *idx,
                             long k0, long kc, long n0, long nc, float *Bp) {
        int lane[K5_NR + 1];
        int32_t src[K5_NR + 1];
        /* per-vector masked loads: lanes [lo, hi) of vector v come from P[off + s - lo + lane] */
        int opv[2 * K5_NR + 2];
        __mmask16 opm[2 * K5_NR + 2];
        int32_t ops[2 * K5_NR + 2];
        for (long p = 0; p * K5_NR < nc; p++) {
            long nb = n0 + p * K5_NR, w = RK_MIN(K5_NR, n0 + nc - nb);
            float *dst = Bp + p * kc * K5_NR;
            if (w == K5_NR && idx[nb + K5_NR - 1] - idx[nb] == K5_NR - 1) {
                const float *base = P + idx[nb];
                for (long k = 0; k < kc; k++) {
                    const float *s = base + off[k0 + k];
                    for (int v = 0; v < K5_NV; v++) _mm512_store_ps(dst + 16 * v, _mm512_loadu_ps(s + 16 * v));
                    dst += K5_NR;
                }
                continue;
            }
            int nr = rk_runs(idx, nb, w, lane, src), nops = 0;
            for (int r = 0; r < nr; r++) {
                for (int v = lane[r] / 16; v * 16 < lane[r + 1]; v++) {
                    int lo = RK_MAX(lane[r], v * 16) - v * 16, hi = RK_MIN(lane[r + 1], v * 16 + 16) - v * 16;
                    opv[nops] = v;
                    opm[nops] = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
                    ops[nops] = src[r] + (v * 16 + lo - lane[r]) - lo;   /* source of lane 0 */
                    nops++;
                }
            }
            for (long k = 0; k < kc; k++) {
                const float *s = P + off[k0 + k];
                __m512 vec[K5_NV];
                for (int v = 0; v < K5_NV; v++) vec[v] = _mm512_setzero_ps();
                for (int o = 0; o < nops; o++)
                    vec[opv[o]] = _mm512_mask_loadu_ps(vec[opv[o]], opm[o], s + ops[o]);
                for (int v = 0; v < K5_NV; v++) _mm512_store_ps(dst + 16 * v, vec[v]);
                dst += K5_NR;
            }
        }
    }

    __attribute__((target("avx512f")))
    static void rk_kernel_512(long kc, const float *a, const float *b, float *c, long ldc,
                              int first, const float *bias, int mv, int nv) {
        __m512 acc[K5_MR][K5_NV];
        __mmask16 mask[K5_NV];
        for (int v = 0; v < K5_NV; v++) {
            int lo = v * 16, hi = RK_MIN(nv, lo + 16);
            mask[v] = hi <= lo ? 0 : (__mmask16)((hi - lo) >= 16 ? 0xFFFFu : ((1u << (hi - lo)) - 1u));
        }
        if (first) {
            #pragma GCC unroll 8
            for (int r = 0; r < K5_MR; r++) {
                __m512 init = bias ? _mm512_set1_ps(bias[r < mv ? r : 0]) : _mm512_setzero_ps();
                #pragma GCC unroll 4
                for (int v = 0; v < K5_NV; v++) acc[r][v] = init;
            }
        } else {
            #pragma GCC unroll 8
            for (int r = 0; r < K5_MR; r++) {
                #pragma GCC unroll 4
                for (int v = 0; v < K5_NV; v++)
                    acc[r][v] = r < mv ? _mm512_maskz_loadu_ps(mask[v], c + r * ldc + 16 * v) : _mm512_setzero_ps();
            }
        }
        for (long k = 0; k < kc; k++) {
            __m512 bv[K5_NV];
            #pragma GCC unroll 4
            for (int v = 0; v < K5_NV; v++) bv[v] = _mm512_load_ps(b + 16 * v);
            #pragma GCC unroll 8
            for (int r = 0; r < K5_MR; r++) {
                __m512 av = _mm512_set1_ps(a[r]);
                #pragma GCC unroll 4
                for (int v = 0; v < K5_NV; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
            }
            a += K5_MR;
            b += K5_NR;
        }
        if (mv == K5_MR && nv == K5_NR) {
            #pragma GCC unroll 8
            for (int r = 0; r < K5_MR; r++) {
                #pragma GCC unroll 4
                for (int v = 0; v < K5_NV; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
            }
        } else {
            #pragma GCC unroll 8
            for (int r = 0; r < K5_MR; r++) {
                if (r >= mv) break;
                #pragma GCC unroll 4
                for (int v = 0; v < K5_NV; v++) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mask[v], acc[r][v]);
            }
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
                              int first, const float *bias, int mv, int nv) {
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

    static int rk_mr(int isa) { return isa >= 2 ? 8 : 6; }
    static int rk_nr(int isa) { return isa >= 2 ? 32 : 16; }

    /* Y[m, n] (row stride ldy) = bias[m] + sum_k A[m, k] * P[off[k] + idx[n]].
       Bp: scratch of at least kcb * ncb floats, 64-byte aligned. */
    static void rk_gather_gemm(int isa, const float *P, const int32_t *off, const int32_t *idx,
                               long M, long K, long N, const float *Ap, const float *bias,
                               float *Y, long ldy, float *Bp, long kcb, long ncb,
                               long n_begin, long n_end) {
    #if RK_X86
        int MR = rk_mr(isa), NR = rk_nr(isa);
        for (long n0 = n_begin; n0 < n_end; n0 += ncb) {
            long nc = RK_MIN(ncb, n_end - n0);
            for (long k0 = 0; k0 < K; k0 += kcb) {
                long kc = RK_MIN(kcb, K - k0);
                if (isa >= 2) rk_packB_512(P, off, idx, k0, kc, n0, nc, Bp);
                else rk_packB_256(P, off, idx, k0, kc, n0, nc, Bp);
                for (long m0 = 0; m0 < M; m0 += MR) {
                    const float *ap = Ap + (m0 / MR) * K * MR + k0 * MR;
                    int mv = (int)RK_MIN(MR, M - m0);
                    const float *bm = bias ? bias + m0 : NULL;
                    for (long p = 0; p * NR < nc; p++) {
                        int nv = (int)RK_MIN(NR, nc - p * NR);
                        float *cp = Y + m0 * ldy + n0 + p * NR;
                        if (isa >= 2) rk_kernel_512(kc, ap, Bp + p * kc * NR, cp, ldy, k0 == 0, bm, mv, nv);
                        else rk_kernel_256(kc, ap, Bp + p * kc * NR, cp, ldy, k0 == 0, bm, mv, nv);
                    }
                }
            }
        }
    #endif
    }
    """
    int rk_isa_level()
    int rk_mr(int isa)
    int rk_nr(int isa)
    void rk_im2col(const float *x, long C, long D, long H, long W,
                   long kd, long kh, long kw, long sd, long sh, long sw,
                   long dd, long dh, long dw, long pd, long ph, long pw,
                   long OD, long OH, long OW, float *cols, int accumulate_back) nogil
    void rk_phase_split(const float *x, long C, long D, long H, long W,
                        long sd, long sh, long sw, long pd, long ph, long pw,
                        long Ds, long Hs, long Ws, float *P) nogil
    void rk_depthwise(int isa, const float *x, long C, long H, long W, const float *w, long M, long mult,
                      long kh, long kw, long sh, long sw, long dh, long dw,
                      long pt, long pl, long pb, long pr, long OH, long OW,
                      const float *bias, float *y, float *pad) nogil
    void rk_gather_gemm(int isa, const float *P, const int32_t *off, const int32_t *idx,
                        long M, long K, long N, const float *Ap, const float *bias,
                        float *Y, long ldy, float *Bp, long kcb, long ncb,
                        long n_begin, long n_end) nogil


cdef int _ISA = rk_isa_level()


def gemm_isa():
    """Micro-kernel level of this CPU: 2 = AVX-512F, 1 = AVX2+FMA, 0 = none (use BLAS)."""
    return _ISA


def panel_shape():
    """``(MR, NR)``: rows per packed weight panel and columns per packed B panel."""
    return rk_mr(_ISA), rk_nr(_ISA)


def pack_weights(const float[:, ::1] a):
    """Pack ``a`` (M, K) float32 into micro-kernel panels: a new array (ceil(M/MR), K, MR),
    panel ``p`` row ``k`` holding ``a[p*MR:(p+1)*MR, k]`` (zero past M).  Copies."""
    cdef Py_ssize_t M = a.shape[0], K = a.shape[1]
    cdef int MR = rk_mr(_ISA)
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
                const float[:, :, ::1] a_packed, Py_ssize_t M, bias, float[:, ::1] y,
                float[::1] scratch, Py_ssize_t kcb, Py_ssize_t ncb,
                Py_ssize_t n_begin=0, Py_ssize_t n_end=-1):
    """``y[m, n] = bias[m] + sum_k A[m, k] * P[off[k] + idx[n]]`` for n in [n_begin, n_end).

    ``a_packed``: ``pack_weights`` of A (M, K); ``off`` (K,), ``idx`` (N,) int32 flat
    indices into ``P`` (every ``off[k] + idx[n]`` must lie inside ``P``); ``bias``:
    (M,) float32 or None; ``y``: (M, N) float32 rows (any row stride), written in place;
    ``scratch``: float32, at least ``kcb * ncb + 16`` floats (B blocks of ``kcb`` x ``ncb``,
    ``ncb`` a multiple of NR).  Releases the GIL.
    """
    cdef Py_ssize_t K = off.shape[0], N = idx.shape[0]
    cdef int MR = rk_mr(_ISA), NR = rk_nr(_ISA)
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    if _ISA == 0:
        raise RuntimeError("gather_gemm: no micro-kernel for this CPU")
    if n_end < 0:
        n_end = N
    if a_packed.shape[0] * MR < M or a_packed.shape[1] != K or a_packed.shape[2] != MR:
        raise ValueError("gather_gemm: packed weights do not match")
    if y.shape[0] != M or y.shape[1] != N or ncb % NR != 0 or n_begin < 0 or n_end > N:
        raise ValueError("gather_gemm: bad output or block shape")
    if bias is not None:
        bview = bias
        if bview.shape[0] != M:
            raise ValueError("gather_gemm: bias length")
        bptr = &bview[0]
    cdef float *bp = <float *><intptr_t>_aligned_ptr(scratch, kcb * ncb)
    cdef float *yp = &y[0, 0]
    cdef Py_ssize_t ldy = y.strides[0] // 4
    if M == 0 or N == 0:
        return
    if K == 0:
        raise ValueError("gather_gemm: K == 0")
    with nogil:
        rk_gather_gemm(_ISA, &P[0], &off[0], &idx[0], M, K, N, &a_packed[0, 0, 0], bptr,
                       yp, ldy, bp, kcb, ncb, n_begin, n_end)


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


def im2col(const float[:, :, :, ::1] x, float[:, ::1] cols, kernel, strides, dilations, pads_begin, out_shape):
    """Unfold ``x`` (C, D, H, W) into ``cols`` (C*kd*kh*kw, OD*OH*OW), written fully.

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
    with nogil:
        rk_im2col(&x[0, 0, 0, 0], C, x.shape[1], x.shape[2], x.shape[3], kd, kh, kw, sd, sh, sw,
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
        rk_im2col(&y[0, 0, 0, 0], C, y.shape[1], y.shape[2], y.shape[3], kd, kh, kw, sd, sh, sw,
                  dd, dh, dw, pd, ph, pw, GD, GH, GW, &cols[0, 0], 1)


def depthwise(const float[:, :, ::1] x, const float[:, :, ::1] w, bias, float[:, :, ::1] y,
              int sh, int sw, int dh, int dw, int pt, int pl, int pb, int pr, float[::1] scratch):
    """Depthwise 2-D convolution of one image, written into ``y`` (M, OH, OW).

    ``x`` (C, H, W); ``w`` (M, kh, kw) with M a multiple of C (output channel m reads
    input channel m // (M // C)); ``bias`` (M,) float32 or None; ``scratch``: at least
    (H+pt+pb)*(W+pl+pr) floats when padded.  Releases the GIL."""
    cdef long C = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef long M = w.shape[0], kh = w.shape[1], kw = w.shape[2]
    cdef long OH = y.shape[1], OW = y.shape[2]
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    cdef float *pad = NULL
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
    if pt or pl or pb or pr:
        if scratch.shape[0] < (H + pt + pb) * (W + pl + pr):
            raise ValueError("depthwise: scratch too small")
        pad = &scratch[0]
    with nogil:
        rk_depthwise(_ISA, &x[0, 0, 0], C, H, W, &w[0, 0, 0], M, M // C, kh, kw, sh, sw, dh, dw,
                     pt, pl, pb, pr, OH, OW, bptr, &y[0, 0, 0], pad)
