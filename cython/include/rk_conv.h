/* Convolution hot loops of the software backend (cython/src/rk_conv.c), used by
 * rknnlite._native.conv_kernels (see its module doc).  Every function takes the ISA level
 * rk_isa_level() returned where it has variants, and runs without the GIL. */
#ifndef RK_CONV_H
#define RK_CONV_H

#include <stdint.h>
#include "rk_api.h"

/* Fused activation: kind 0 none, 1 clip to [lo, hi] as min(max(x, lo), hi) (Relu: lo = 0,
   hi = +inf), 2 LeakyRelu (x < 0 ? alpha * x : x).  A NULL rk_act applies nothing. */
typedef struct { int kind; float lo, hi, alpha; } rk_act;

/* Positions per chunk of the Winograd input transforms (their buf holds 36 or 16 chunks). */
#define RK_WIN_CHUNK 256

/* 0: no micro-kernel on this CPU (callers use im2col + BLAS); 1: AVX2+FMA (x86-64) or NEON
 * (aarch64, always); 2: AVX-512F. */
RK_API int rk_isa_level(void);
/* Rows per weight panel (MR) of the micro-kernel of isa, transposed (t) or not. */
RK_API int rk_mr(int isa, int t);
/* Columns per B panel (NR) of the micro-kernel of isa, transposed (t) or not. */
RK_API int rk_nr(int isa, int t);
/* rk_gather_gemm sweeps a K block of A (M x kc floats) larger than this many bytes A panel
 * by A panel; derived from the host's L2 (rknnlite/backends/software/blocking.py).  Set it
 * before any GEMM runs: it is read without synchronisation. */
RK_API void rk_set_a_block_bytes(long bytes);
/* Unfolds one image (C channels of D x H x W, channel stride cs) into cols for a convolution
 * (accumulate_back 0), or folds cols back into it, accumulating (col2im, accumulate_back 1). */
RK_API void rk_im2col(const float *x, long C, long D, long H, long W, long cs, long kd, long kh, long kw, long sd, long sh, long sw, long dd, long dh, long dw, long pd, long ph, long pw, long OD, long OH, long OW, float *cols, int accumulate_back);
/* Winograd F(4x4, 3x3) input transform of the phase-split image S into V (see rk_conv.c);
 * buf: 36 * RK_WIN_CHUNK floats, 64-byte aligned. */
RK_API void rk_wino_in(int isa, const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf);
/* Winograd F(A-2 x A-2, 3x3) weight transform of MC 3x3 float32 kernels w by G (A x 3 doubles, A <= 6)
 * into u (A*A rows of MC float32): (G k G^T) in double, each sum of three products as a multiply and two
 * fused multiply-adds in index order (see rk_conv.c). */
RK_API void rk_wino_weights(const float *w, long MC, const double *G, int A, float *u);
/* Zero-padded split of x into t x t phases (t = 2 or 4) for the Winograd transforms. */
RK_API void rk_wino_split(int isa, const float *x, long C, long H, long W, long t, long pt, long pl, long Hs, long Ws, float *S, long ss);
/* Winograd F(2x2, 3x3) input transform; buf: 16 * RK_WIN_CHUNK floats. */
RK_API void rk_wino2_in(int isa, const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf);
/* Winograd F(2x2, 3x3) output transform with bias, residual and activation; buf: 12 * T floats. */
RK_API void rk_wino2_out(int isa, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW, const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res);
/* Winograd F(4x4, 3x3) output transform with bias, residual and activation; buf: 40 * T floats. */
RK_API void rk_wino_out(int isa, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW, const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res);
/* nb independent gather GEMMs: P, Ap and Y advance by pstride, astride, ystride floats. */
RK_API void rk_gather_gemm_batch(int isa, long nb, const float *P, long pstride, const int32_t *off, const int32_t *idx, long M, long K, const float *Ap, long astride, float *Y, long ystride, long ldy, float *Bp, long kcb, long ncb, long N, int direct_b);
/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols. */
RK_API void rk_transpose(const float *src, long rows, long cols, long lds, float *dst, long ldd);
/* Zero-padded, stride-phase-split copy of an image (C x D x H x W) into P. */
RK_API void rk_phase_split(int isa, const float *x, long C, long D, long H, long W, long sd, long sh, long sw, long pd, long ph, long pw, long Ds, long Hs, long Ws, float *P);
/* Direct depthwise convolution (one input channel per group, mult outputs each) with bias,
 * residual and activation; pad: scratch for a padded row. */
RK_API void rk_depthwise(int isa, const float *x, long C, long H, long W, const float *w, long M, long mult, long kh, long kw, long sh, long sw, long dh, long dw, long pt, long pl, long pb, long pr, long OH, long OW, const float *bias, float *y, float *pad, const rk_act *act, const float *res);
/* Y[m, n] (row stride ldy) = bias[m] + sum_k A[m, k] * P[off[k] + idx[n]], n in [n_begin, n_end),
 * A packed by pack_weights; then residual R and activation.  Bp: B scratch; Bpre: prepacked B or NULL;
 * direct_b: B panels of 32 contiguous columns read straight from P (AVX-512 normal tiles) instead of packed. */
RK_API void rk_gather_gemm(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx, long M, long K, const float *Ap, const float *bias, float *Y, long ldy, float *Bp, long kcb, long ncb, long n_begin, long n_end, long gw, long gow, const rk_act *act, const float *R, const float *Bpre, int direct_b);
/* Floats between the K blocks of prepacked B (rk_pack_gather_b). */
RK_API long rk_bblock_stride(long kcb, long nc, int NR);
/* Packs the B blocks of K blocks [kb_begin, kb_end) of columns [n0, n0 + nc) into Bpre (direct_b as the
 * rk_gather_gemm calls reading them: the panels they read straight from P are left out). */
RK_API void rk_pack_gather_b(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx, long K, long kcb, long n0, long nc, long kb_begin, long kb_end, float *Bpre, int direct_b);
/* y[m][n] = act(y[m][n] + bias[m] + res[m][n]) for an (M, N) block (row strides ldy, ldr). */
RK_API void rk_bias_act(int isa, float *y, long M, long N, long ldy, const float *bias, const rk_act *act, const float *res, long ldr);

#endif
