/* Checks the NEON micro-kernel of the gather GEMM (cython/include/rk_conv_neon.h) on any host,
 * over the C intrinsics of neon_emulated.h: B packing (a contiguous panel, gathered columns, a
 * partial panel padded with zeros) and the 8 x 12 tile against a scalar model that does the
 * same operations in the same order (one fused multiply-add per k from the bias, zero or the
 * stored tile; the residual; the activation), for full and partial tiles, so every value must
 * match bit for bit and nothing outside the mv x nv tile may be written.  Prints "ok <cases>"
 * and exits 0, else names the first failing case. */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "neon_emulated.h"
#include "rk_conv.h"
#include "rk_conv_tile.h"

#define RK_MIN(a, b) ((a) < (b) ? (a) : (b))
#include "rk_conv_neon.h"

#define GUARD 12345.0f

static unsigned seed = 1;
static float rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
}

/* Packing: column n of the B block is P[off[k] + idx[n]]. */
static int check_pack(int gathered, long nc) {
    enum { K = 5, NMAX = 40, SRC = 4096 };
    float P[SRC], Bp[K * 48];
    int32_t off[K], idx[NMAX];
    for (long i = 0; i < SRC; i++) P[i] = rnd();
    for (long k = 0; k < K; k++) off[k] = (int32_t)(k * 300);
    for (long n = 0; n < NMAX; n++) idx[n] = (int32_t)(gathered ? 3 * n + (n % 5 == 4) : n + 7);
    long n0 = 2, np = (nc + KN_NR - 1) / KN_NR;
    rk_packB_neon(P, off, idx, 1, K - 1, n0, nc, Bp);
    for (long p = 0; p < np; p++)
        for (long k = 0; k < K - 1; k++)
            for (long t = 0; t < KN_NR; t++) {
                long n = p * KN_NR + t;
                float want = n < nc ? P[off[1 + k] + idx[n0 + n]] : 0.0f;
                if (memcmp(&Bp[(p * (K - 1) + k) * KN_NR + t], &want, 4) != 0) {
                    printf("packB gathered=%d nc=%ld: panel %ld k %ld column %ld\n", gathered, nc, p, k, t);
                    return 0;
                }
            }
    return 1;
}

static float act_model(float x, const rk_act *a) {
    if (!a) return x;
    if (a->kind == 1) {
        float lo = a->lo, hi = a->hi;
        x = (x > lo || (x == lo && !signbit(x))) ? x : lo;   /* FMAX(lo, x) */
        return (x < hi || (x == hi && signbit(x))) ? x : hi; /* FMIN(hi, x) */
    }
    return x < 0.0f ? x * a->alpha : x;
}

/* One tile: kc steps, mv x nv valid, first or accumulating, with or without bias and residual.
   C and the residual are heap blocks that end at the tile's last value, (mv - 1) * LDC + nv
   floats, so under AddressSanitizer any access past the tile's rows or its last row's columns
   is reported; a write between the tile's rows (columns nv .. LDC - 1) changes a guard value. */
static int check_tile(long kc, int mv, int nv, int first, int with_bias, int with_res, int act_kind) {
    enum { LDC = 19 };
    long n = (long)(mv - 1) * LDC + nv;
    float a[64 * KN_MR], b[64 * KN_NR], bias[KN_MR];
    float *c = malloc(n * sizeof *c), *want = malloc(n * sizeof *want), *rc = malloc(n * sizeof *rc);
    if (!c || !want || !rc) { puts("out of memory"); exit(2); }
    for (long i = 0; i < kc * KN_MR; i++) a[i] = rnd();
    for (long i = 0; i < kc * KN_NR; i++) b[i] = rnd();
    for (int i = 0; i < KN_MR; i++) bias[i] = rnd();
    for (long i = 0; i < n; i++) { rc[i] = rnd(); c[i] = i % LDC < nv ? rnd() : GUARD; }
    memcpy(want, c, n * sizeof *c);
    rk_act act = {act_kind, -0.25f, 0.5f, 0.125f};
    const rk_act *ap = act_kind ? &act : NULL;
    for (int r = 0; r < mv; r++)
        for (int t = 0; t < nv; t++) {
            float s = first ? (with_bias ? bias[r] : 0.0f) : want[r * LDC + t];
            for (long k = 0; k < kc; k++) s = fmaf(b[k * KN_NR + t], a[k * KN_MR + r], s);
            if (with_res) s += rc[r * LDC + t];
            want[r * LDC + t] = act_model(s, ap);
        }
    float pf[16 * 64];   /* a prefetch target: never read as data */
    rk_kernel_neon(kc, a, b, c, LDC, first, with_bias ? bias : NULL, mv, nv, ap, with_res ? rc : NULL, pf, kc / 2);
    int ok = memcmp(c, want, n * sizeof *c) == 0;
    for (long i = 0; i < n && !ok; i++)
        if (memcmp(&c[i], &want[i], 4) != 0) {
            printf("tile kc=%ld mv=%d nv=%d first=%d bias=%d res=%d act=%d: row %ld column %ld is %.9g, "
                   "expected %.9g\n", kc, mv, nv, first, with_bias, with_res, act_kind, i / LDC, i % LDC,
                   c[i], want[i]);
            break;
        }
    free(c); free(want); free(rc);
    return ok;
}

int main(void) {
    int cases = 0, bad = 0;
    for (int g = 0; g < 2; g++) {
        static const long widths[] = {12, 24, 13, 5, 30};
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++, cases++) bad += !check_pack(g, widths[w]);
    }
    static const long kcs[] = {1, 3, 17, 64};
    static const int mvs[] = {8, 5, 1}, nvs[] = {12, 7, 1};
    for (size_t k = 0; k < 4; k++)
        for (size_t m = 0; m < 3; m++)
            for (size_t n = 0; n < 3; n++)
                for (int first = 0; first < 2; first++)
                    for (int act = 0; act < 3; act++, cases++)
                        bad += !check_tile(kcs[k], mvs[m], nvs[n], first, (int)(m + n + act) % 2,
                                           (int)(k + m + first) % 2, act);
    if (bad) return 1;
    printf("ok %d\n", cases);
    return 0;
}
