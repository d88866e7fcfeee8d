/* Per-channel affine transform with a fused activation (see rk_affine.h). */
#include "rk_affine.h"

/* act kinds: 0 none, 1 clip to [lo, hi] as min(max(v, lo), hi) (Relu: lo = 0,
   hi = +inf), 2 LeakyRelu (v < 0 ? v * alpha : v).  The operand order keeps nan,
   like numpy's maximum / minimum. */
#define RKA_BODY {                                                                     \
    for (long r = r0; r < r1; r++) {                                                   \
        const float s = scale[r % C], b = shift[r % C];                                \
        const float *xp = x + r * inner;                                               \
        float *yp = y + r * inner;                                                     \
        if (kind == 1) {                                                               \
            for (long i = 0; i < inner; i++) {                                         \
                float v = xp[i] * s;                                                   \
                v = v + b;                                                             \
                v = lo > v ? lo : v;                                                   \
                yp[i] = hi < v ? hi : v;                                               \
            }                                                                          \
        } else if (kind == 2) {                                                        \
            for (long i = 0; i < inner; i++) {                                         \
                float v = xp[i] * s;                                                   \
                v = v + b;                                                             \
                yp[i] = v < 0.0f ? v * alpha : v;                                      \
            }                                                                          \
        } else {                                                                       \
            for (long i = 0; i < inner; i++) {                                         \
                float v = xp[i] * s;                                                   \
                yp[i] = v + b;                                                         \
            }                                                                          \
        }                                                                              \
    }                                                                                  \
}
#define RKA_ARGS const float *x, float *y, long r0, long r1, long C, long inner,      \
                 const float *scale, const float *shift, int kind, float lo, float hi,  \
                 float alpha

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define RKA_NOCONTRACT __attribute__((optimize("fp-contract=off", "no-trapping-math")))
#define RKA_HAVE_AVX2 1
#else
#define RKA_NOCONTRACT
#define RKA_HAVE_AVX2 0
#endif

RKA_NOCONTRACT static void rka_generic(RKA_ARGS) RKA_BODY
#if RKA_HAVE_AVX2
/* AVX2 without FMA: the separate multiply and add cannot be fused. */
RKA_NOCONTRACT __attribute__((target("avx2"))) static void rka_avx2(RKA_ARGS) RKA_BODY
#endif

void rka_channel_affine(RKA_ARGS) {
#if RKA_HAVE_AVX2
    static int isa = -1;
    if (isa < 0) { __builtin_cpu_init(); isa = __builtin_cpu_supports("avx2") ? 1 : 0; }
    if (isa) { rka_avx2(x, y, r0, r1, C, inner, scale, shift, kind, lo, hi, alpha); return; }
#endif
    rka_generic(x, y, r0, r1, C, inner, scale, shift, kind, lo, hi, alpha);
}
