/* C versions of the NEON intrinsics that cython/include/rk_conv_neon.h and the 4-lane form of
 * the Winograd template use, lane by lane with the instructions' arithmetic (FMLA is one
 * rounding: fmaf; FMAX/FMIN return NaN when either lane is NaN and order -0 below +0), so the
 * kernels written for aarch64 can be checked on any host.  Only for tests/native checks. */
#ifndef NEON_EMULATED_H
#define NEON_EMULATED_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct { float v[4]; } float32x4_t;
typedef struct { uint32_t v[4]; } uint32x4_t;

static inline float32x4_t vld1q_f32(const float *p) {
    float32x4_t r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static inline void vst1q_f32(float *p, float32x4_t v) { memcpy(p, v.v, sizeof v.v); }
static inline float32x4_t vdupq_n_f32(float c) {
    float32x4_t r = {{c, c, c, c}};
    return r;
}
#define NEON_LANEWISE(name, expr)                                                             \
    static inline float32x4_t name(float32x4_t a, float32x4_t b) {                            \
        float32x4_t r;                                                                        \
        for (int i = 0; i < 4; i++) { float x = a.v[i], y = b.v[i]; r.v[i] = (expr); }        \
        return r;                                                                             \
    }
NEON_LANEWISE(vaddq_f32, x + y)
NEON_LANEWISE(vsubq_f32, x - y)
NEON_LANEWISE(vmulq_f32, x * y)
NEON_LANEWISE(vmaxq_f32, (isnan(x) || isnan(y)) ? NAN : (x > y || (x == y && !signbit(x)) ? x : y))
NEON_LANEWISE(vminq_f32, (isnan(x) || isnan(y)) ? NAN : (x < y || (x == y && signbit(x)) ? x : y))
/* a + b * v[lane], one rounding */
static inline float32x4_t vfmaq_laneq_f32(float32x4_t a, float32x4_t b, float32x4_t v, int lane) {
    for (int i = 0; i < 4; i++) a.v[i] = fmaf(b.v[i], v.v[lane], a.v[i]);
    return a;
}
static inline uint32x4_t vcltq_f32(float32x4_t a, float32x4_t b) {
    uint32x4_t r;
    for (int i = 0; i < 4; i++) r.v[i] = a.v[i] < b.v[i] ? 0xFFFFFFFFu : 0u;
    return r;
}
/* bitwise select: bits of b where m is set, of c elsewhere */
static inline float32x4_t vbslq_f32(uint32x4_t m, float32x4_t b, float32x4_t c) {
    float32x4_t r;
    for (int i = 0; i < 4; i++) {
        uint32_t x, y;
        memcpy(&x, &b.v[i], 4);
        memcpy(&y, &c.v[i], 4);
        x = (x & m.v[i]) | (y & ~m.v[i]);
        memcpy(&r.v[i], &x, 4);
    }
    return r;
}

#endif
