/* Checks the vector forms of the Winograd template (cython/include/rk_conv_wino.h) on any CPU:
 * the template is instantiated three times, in its plain-C form (RK_WI_VEC 0, what generic and
 * AVX2 run), its 16-lane form (RK_WI_VEC 16, AVX-512) over an emulated __m512 whose intrinsics
 * work lane by lane in C, and its 4-lane form (RK_WI_VEC 4, NEON) over neon_emulated.h.  Every
 * form must write bit for bit the same V (input transforms, F(4x4, 3x3) and F(2x2, 3x3)) and y
 * (output transforms) for grids whose sizes are not multiples of 16 or 4, leave every float
 * outside the written range alone, and the aligned loads and stores of the 16-lane form must be
 * 64-byte aligned.  Prints "ok <cases>" and exits 0, else names the case and the form. */
#define _POSIX_C_SOURCE 200112L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "neon_emulated.h"
#include "rk_conv.h"

#define RK_MIN(a, b) ((a) < (b) ? (a) : (b))

static int misaligned = 0;

/* --- the emulated AVX-512 subset the template uses */
typedef struct { float v[16]; } __m512;
typedef uint16_t __mmask16;
static __mmask16 rk_mask16(int lo, int hi) {
    __mmask16 m = 0;
    for (int i = lo; i < hi; i++) m = (__mmask16)(m | (1u << i));
    return m;
}
static __m512 _mm512_maskz_loadu_ps(__mmask16 m, const float *p) {
    __m512 r;
    for (int i = 0; i < 16; i++) r.v[i] = (m >> i) & 1 ? p[i] : 0.0f;
    return r;
}
static __m512 _mm512_load_ps(const float *p) {
    __m512 r;
    if ((uintptr_t)p % 64) misaligned = 1;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static void _mm512_store_ps(float *p, __m512 v) {
    if ((uintptr_t)p % 64) misaligned = 1;
    memcpy(p, v.v, sizeof v.v);
}
static void _mm512_mask_storeu_ps(float *p, __mmask16 m, __m512 v) {
    for (int i = 0; i < 16; i++) if ((m >> i) & 1) p[i] = v.v[i];
}
#define RK_LANEWISE(name, op)                                                                 \
    static __m512 name(__m512 a, __m512 b) {                                                  \
        for (int i = 0; i < 16; i++) a.v[i] = a.v[i] op b.v[i];                               \
        return a;                                                                             \
    }
RK_LANEWISE(_mm512_add_ps, +)
RK_LANEWISE(_mm512_sub_ps, -)
RK_LANEWISE(_mm512_mul_ps, *)
static __m512 _mm512_set1_ps(float c) {
    __m512 r;
    for (int i = 0; i < 16; i++) r.v[i] = c;
    return r;
}

/* --- what the output transforms call in rk_conv.c */
static void rk_act_apply(float *p, long n, const rk_act *a) {
    if (!a || a->kind == 0) return;
    for (long i = 0; i < n; i++) p[i] = p[i] < a->lo ? a->lo : (p[i] > a->hi ? a->hi : p[i]);
}
static void rk_res_act_apply(float *p, const float *r, long n, const rk_act *a) {
    for (long i = 0; i < n; i++) p[i] += r[i];
    rk_act_apply(p, n, a);
}

#define RK_WIN_ARGS const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf
#define RK_WOUT_ARGS const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW, \
                     const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res

#define RK_WI_SUFFIX plain
#define RK_WI_ATTR
#define RK_WI_VEC 0
#include "rk_conv_wino.h"
#define RK_WI_SUFFIX vec16
#define RK_WI_ATTR
#define RK_WI_VEC 16
#include "rk_conv_wino.h"
#define RK_WI_SUFFIX vec4
#define RK_WI_ATTR
#define RK_WI_VEC 4
#include "rk_conv_wino.h"

typedef void (*wino_in_fn)(RK_WIN_ARGS);
typedef void (*wino_out_fn)(RK_WOUT_ARGS);
/* the vector forms, each against the plain one */
static const struct { const char *name; wino_in_fn in4, in2; wino_out_fn out4, out2; } forms[] = {
    {"16-lane", rk_wino_in_vec16, rk_wino2_in_vec16, rk_wino_out_vec16, rk_wino2_out_vec16},
    {"4-lane", rk_wino_in_vec4, rk_wino2_in_vec4, rk_wino_out_vec4, rk_wino2_out_vec4},
};

static float *alloc(long n, unsigned seed) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)n * sizeof(float)) != 0) { puts("out of memory"); exit(2); }
    float *f = (float *)p;
    for (long i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        f[i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
    return f;
}

static int same(const float *a, const float *b, long n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

/* One grid: input transform of tile t (4 or 2), then the output transform of its result, by the
   plain form and by vector form f. */
static int check(long C, long TH, long TW, int t, int f) {
    int nx = t == 4 ? 36 : 16;                       /* transformed components */
    long plane = (TH + 1) * (TW + 1), total = C * plane, ss = total + TW + 2 + 16;
    long ldv = total + 40;                           /* slack after each V row: must stay alone */
    float *S = alloc((long)t * t * ss, 1);
    float *buf1 = alloc(36L * RK_WIN_CHUNK, 2), *buf2 = alloc(36L * RK_WIN_CHUNK, 2);
    float *V1 = alloc(nx * ldv, 3), *V2 = alloc(nx * ldv, 3);
    if (t == 4) { rk_wino_in_plain(S, ss, C, TH, TW, V1, ldv, buf1); forms[f].in4(S, ss, C, TH, TW, V2, ldv, buf2); }
    else { rk_wino2_in_plain(S, ss, C, TH, TW, V1, ldv, buf1); forms[f].in2(S, ss, C, TH, TW, V2, ldv, buf2); }
    int ok = same(V1, V2, nx * ldv) && !misaligned;
    if (ok) {                                        /* output transform of V as M = C planes */
        long T = TH * TW, OH = t * TH - 1, OW = t * TW - 1, ldc = OH * OW;
        rk_act act = {1, -0.5f, 0.5f, 0.0f};
        float *bias = alloc(C, 4), *res = alloc(C * ldc, 5), *y1 = alloc(C * ldc, 6), *y2 = alloc(C * ldc, 6);
        float *ob1 = alloc(40 * T, 7), *ob2 = alloc(40 * T, 7);
        if (t == 4) {
            rk_wino_out_plain(V1, ldv, C, TH, TW, OH, OW, bias, y1, ldc, ob1, &act, res);
            forms[f].out4(V1, ldv, C, TH, TW, OH, OW, bias, y2, ldc, ob2, &act, res);
        } else {
            rk_wino2_out_plain(V1, ldv, C, TH, TW, OH, OW, bias, y1, ldc, ob1, &act, NULL);
            forms[f].out2(V1, ldv, C, TH, TW, OH, OW, bias, y2, ldc, ob2, &act, NULL);
        }
        ok = same(y1, y2, C * ldc);
        free(bias); free(res); free(y1); free(y2); free(ob1); free(ob2);
    }
    free(S); free(buf1); free(buf2); free(V1); free(V2);
    if (!ok) printf("F(%dx%d, 3x3) C=%ld TH=%ld TW=%ld: the %s form differs%s\n", t, t, C, TH, TW,
                    forms[f].name, misaligned ? " (misaligned aligned access)" : "");
    return ok;
}

int main(void) {
    static const long grids[][3] = {{1, 1, 1}, {3, 2, 3}, {5, 3, 2}, {2, 7, 7}, {17, 4, 5}, {9, 14, 14}};
    int cases = 0, bad = 0;
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++)
        for (int t = 2; t <= 4; t += 2)
            for (int f = 0; f < (int)(sizeof forms / sizeof forms[0]); f++, cases++)
                bad += !check(grids[g][0], grids[g][1], grids[g][2], t, f);
    if (bad) return 1;
    printf("ok %d\n", cases);
    return 0;
}
