/* Runs the conv kernels of cython/src/rk_conv.c on the CPU they were compiled for, through their
 * public entry points, against plain C: the gather GEMM (packing per call and prepacked, several
 * K and column blocks, row panels and columns that do not fill a tile, gathered columns, bias,
 * residual, both activations, a column range that starts past 0), the Winograd input transforms
 * at the micro-kernel level against the generic ones, and its output transforms against A^T M A.  Built for aarch64 it checks the NEON path
 * (rk_isa_level() must be 1 there); tests/test_neon_kernels.py runs it natively or under qemu.
 * Prints "ok <cases>" and exits 0, else names the first failing case. */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk_conv.h"

static unsigned seed = 7;
static float rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
}
static float *falloc(long n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(n > 0 ? n : 1) * sizeof(float)) != 0) { puts("out of memory"); exit(2); }
    return (float *)p;
}

static float act_ref(float x, const rk_act *a) {
    if (!a || a->kind == 0) return x;
    if (a->kind == 1) return x < a->lo ? a->lo : (x > a->hi ? a->hi : x);
    return x < 0.0f ? x * a->alpha : x;
}

/* Y (M x N) of the GEMM whose column n, row k is P[off[k] + idx[n]]: a 3x3 convolution of an
   image of C channels x H x W (K = 9 C) when gathered, else contiguous columns. */
static int check_gemm(long M, long C, long W, int gathered, long kcb, long ncb, int prepacked,
                      int with_res, int act_kind, long n_begin) {
    int isa = rk_isa_level(), MR = rk_mr(isa, 0), NR = rk_nr(isa, 0);
    long H = 5, K = 9 * C, N = gathered ? (H - 2) * (W - 2) : W * H;
    long plane = H * W, n_end = N;
    float *P = falloc(C * plane + 16), *A = falloc(M * K), *Ap = falloc(((M + MR - 1) / MR) * MR * K);
    float *bias = falloc(M), *R = falloc(M * N), *Y = falloc(M * N), *Bp = falloc(kcb * (ncb + NR));
    int32_t *off = malloc(K * sizeof *off), *idx = malloc(N * sizeof *idx);
    for (long i = 0; i < C * plane + 16; i++) P[i] = rnd();
    for (long i = 0; i < M * K; i++) A[i] = rnd();
    for (long i = 0; i < M; i++) bias[i] = rnd();
    for (long i = 0; i < M * N; i++) { R[i] = rnd(); Y[i] = 1e30f; }
    for (long k = 0; k < K; k++) off[k] = (int32_t)(gathered ? (k / 9) * plane + ((k % 9) / 3) * W + k % 3 : k * 3);
    for (long n = 0; n < N; n++) idx[n] = (int32_t)(gathered ? (n / (W - 2)) * W + n % (W - 2) : n);
    for (long p = 0; p * MR < M; p++)                       /* A_p[panel][k][MR], zero past M */
        for (long k = 0; k < K; k++)
            for (long r = 0; r < MR; r++) Ap[(p * K + k) * MR + r] = p * MR + r < M ? A[(p * MR + r) * K + k] : 0.0f;
    rk_act act = {act_kind, -0.5f, 0.75f, 0.1f};
    float *Bpre = NULL;
    if (prepacked) {                                        /* one column block: [n_begin, N) */
        long nc = n_end - n_begin, nkb = (K + kcb - 1) / kcb;
        ncb = nc;
        Bpre = falloc(nkb * rk_bblock_stride(kcb, nc, NR));
        rk_pack_gather_b(isa, 0, P, off, idx, K, kcb, n_begin, nc, 0, nkb, Bpre, 1);
    }
    rk_gather_gemm(isa, 0, P, off, idx, M, K, Ap, bias, Y, N, Bp, kcb, ncb, n_begin, n_end, 0, 0,
                   act_kind ? &act : NULL, with_res ? R : NULL, Bpre, 1);
    int ok = 1;
    for (long m = 0; m < M && ok; m++)
        for (long n = 0; n < N && ok; n++) {
            float got = Y[m * N + n];
            if (n < n_begin) { ok = got == 1e30f; continue; }
            double s = bias[m], mag = fabs(bias[m]);
            for (long k = 0; k < K; k++) {
                double t = (double)A[m * K + k] * P[off[k] + idx[n]];
                s += t; mag += fabs(t);
            }
            if (with_res) { s += R[m * N + n]; mag += fabs(R[m * N + n]); }
            float want = act_ref((float)s, act_kind ? &act : NULL);
            ok = fabs((double)got - want) <= 1e-5 * (mag + 1.0);
            if (!ok) printf("gemm M=%ld K=%ld N=%ld gathered=%d kcb=%ld ncb=%ld prepacked=%d res=%d act=%d "
                            "n_begin=%ld: Y[%ld, %ld] = %.9g, expected %.9g\n", M, K, N, gathered, kcb, ncb,
                            prepacked, with_res, act_kind, n_begin, m, n, got, want);
        }
    free(P); free(A); free(Ap); free(bias); free(R); free(Y); free(Bp); free(off); free(idx); free(Bpre);
    return ok;
}

/* The Winograd input transforms at the micro-kernel level against the generic ones. */
static int check_wino(long C, long TH, long TW, int t) {
    int isa = rk_isa_level();
    long plane = (TH + 1) * (TW + 1), total = C * plane, ss = total + TW + 2 + 16, nx = t == 4 ? 36 : 16;
    float *S = falloc(t * t * ss), *V0 = falloc(nx * total), *V1 = falloc(nx * total);
    float *buf = falloc(36L * RK_WIN_CHUNK);
    for (long i = 0; i < t * t * ss; i++) S[i] = rnd();
    if (t == 4) { rk_wino_in(0, S, ss, C, TH, TW, V0, total, buf); rk_wino_in(isa, S, ss, C, TH, TW, V1, total, buf); }
    else { rk_wino2_in(0, S, ss, C, TH, TW, V0, total, buf); rk_wino2_in(isa, S, ss, C, TH, TW, V1, total, buf); }
    int ok = 1;
    for (long i = 0; i < nx * total && ok; i++) ok = fabsf(V0[i] - V1[i]) <= 1e-5f * (fabsf(V0[i]) + 16.0f);
    if (!ok) printf("winograd F(%dx%d) C=%ld TH=%ld TW=%ld: the level-%d transform differs\n", t, t, C, TH, TW, isa);
    free(S); free(V0); free(V1); free(buf);
    return ok;
}

/* The Winograd output transforms at the micro-kernel level against y = bias + A^T M A per tile
   (cropped to OH x OW), then the residual and a clip, in double. */
static int check_wino_out(long M, long TH, long TW, int t) {
    static const double A4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
    static const double A2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
    int isa = rk_isa_level(), n = t + 2;
    long T = TH * TW, OH = t * TH - 1, OW = t * TW - 1, ldx = M * T + 3, ldc = OH * OW;
    float *Mt = falloc(n * n * ldx), *bias = falloc(M), *res = falloc(M * ldc), *y = falloc(M * ldc);
    float *buf = falloc(40 * T);
    for (long i = 0; i < n * n * ldx; i++) Mt[i] = rnd();
    for (long i = 0; i < M; i++) bias[i] = rnd();
    for (long i = 0; i < M * ldc; i++) res[i] = rnd();
    rk_act act = {1, -1.5f, 1.5f, 0.0f};
    if (t == 4) rk_wino_out(isa, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, &act, res);
    else rk_wino2_out(isa, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, &act, res);
    int ok = 1;
    for (long m = 0; m < M && ok; m++)
        for (long oy = 0; oy < OH && ok; oy++)
            for (long ox = 0; ox < OW && ok; ox++) {
                long ty = oy / t, tx = ox / t, i = oy % t, j = ox % t, q = ty * TW + tx;
                double s = bias[m];
                for (int a = 0; a < n; a++)
                    for (int b = 0; b < n; b++) {
                        double at = t == 4 ? A4[i][a] * A4[j][b] : A2[i][a] * A2[j][b];
                        s += at * Mt[(a * n + b) * ldx + m * T + q];
                    }
                s += res[m * ldc + oy * OW + ox];
                float want = act_ref((float)s, &act), got = y[m * ldc + oy * OW + ox];
                ok = fabsf(got - want) <= 1e-4f * (1.0f + fabsf(want));
                if (!ok) printf("winograd output F(%dx%d) M=%ld TH=%ld TW=%ld: y[%ld, %ld, %ld] = %.9g, expected %.9g\n",
                                t, t, M, TH, TW, m, oy, ox, got, want);
            }
    free(Mt); free(bias); free(res); free(y); free(buf);
    return ok;
}

int main(void) {
#if defined(__aarch64__)
    if (rk_isa_level() != 1) { printf("rk_isa_level() is %d on aarch64, expected 1 (NEON)\n", rk_isa_level()); return 1; }
#endif
    int cases = 0, bad = 0;
    static const long Ms[] = {1, 8, 13, 40}, Cs[] = {1, 3, 20}, Ws[] = {6, 17, 40};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t c = 0; c < 3; c++)
                for (int v = 0; v < 4; v++, cases++)
                    bad += !check_gemm(Ms[a], Cs[b], Ws[c], v & 1, v < 2 ? 64 : 32, v < 2 ? 48 : 24, v == 3,
                                       (int)(a + c) % 2, (int)(a + b + v) % 3, v == 3 ? 5 : 0);
    static const long grids[][3] = {{1, 1, 1}, {3, 2, 3}, {17, 4, 5}, {9, 14, 14}};
    for (size_t g = 0; g < 4; g++)
        for (int t = 2; t <= 4; t += 2, cases += 2) {
            bad += !check_wino(grids[g][0], grids[g][1], grids[g][2], t);
            bad += !check_wino_out(grids[g][0], grids[g][1], grids[g][2], t);
        }
    if (bad) return 1;
    printf("ok %d\n", cases);
    return 0;
}
