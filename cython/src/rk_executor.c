/* AVX2 passes of the software executor: float16 rounding, fake quantization and the int8
 * codes / requantization of a vendor int8 conv (see rk_executor.h). */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "rk_executor.h"
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RKE_X86 1
#include <immintrin.h>
#else
#define RKE_X86 0
#endif

/* 1 when AVX2 and F16C run here (the vector passes below), else 0. */
int rke_vector_ok(void) {
#if RKE_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

#if RKE_X86
/* d[i] = s[i] rounded to float16 precision through the hardware conversion (round
   to nearest even, overflow to inf, float16 subnormals); NaN lanes keep their bits.
   d == s rounds in place.  Returns how many leading elements were done (a multiple of 8). */
__attribute__((target("avx2,f16c")))
long rke_round_fp16_avx2(const float *s, float *d, long n) {
    long i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int u = 0; u < 4; u++) {
            __m256 x = _mm256_loadu_ps(s + i + 8 * u);
            __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
            _mm256_storeu_ps(d + i + 8 * u, _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(s + i);
        __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_ps(d + i, _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    }
    return i;
}

/* d[i] = (clip(rint(s[i] / scale) + zp, qmin, qmax) - zp) * scale, the same float32
   operations as the scalar loop (division, not a reciprocal product; nan stays nan).
   d == s works in place.  Returns how many leading elements were done (a multiple of 8). */
__attribute__((target("avx2")))
long rke_fake_quant_avx2(const float *s, float *d, long n, float scale, float zp, float qmin,
                                float qmax) {
    __m256 vs = _mm256_set1_ps(scale), vz = _mm256_set1_ps(zp);
    __m256 vlo = _mm256_set1_ps(qmin), vhi = _mm256_set1_ps(qmax);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(s + i), vs),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_add_ps(q, vz);
        q = _mm256_min_ps(vhi, _mm256_max_ps(vlo, q));   /* operand order: nan passes */
        _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_sub_ps(q, vz), vs));
    }
    return i;
}

/* d[i] = rint(s[i] / scale): the integer code of an int8 grid value (division, as the
   scalar loop).  Returns how many leading elements were done (a multiple of 8). */
__attribute__((target("avx2")))
long rke_codes_avx2(const float *s, float *d, long n, float scale) {
    __m256 vs = _mm256_set1_ps(scale);
    long i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(s + i), vs),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return i;
}

/* d[i] = (clip(rint(s[i] * mul) + zp, qmin, qmax) - zp) * scale, the product in double
   (an integer accumulator below 2^24 times a multiplier of up to 29 significant bits is
   exact there), the rest as the scalar loop.  Returns how many leading elements were done
   (a multiple of 8). */
__attribute__((target("avx2")))
long rke_requant_avx2(const float *s, float *d, long n, double mul, float zp, float qmin, float qmax,
                      float scale) {
    __m256d vm = _mm256_set1_pd(mul), vz = _mm256_set1_pd(zp);
    __m256d vlo = _mm256_set1_pd(qmin), vhi = _mm256_set1_pd(qmax);
    __m256 vzf = _mm256_set1_ps(zp), vs = _mm256_set1_ps(scale);
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(s + i);
        __m256d lo = _mm256_round_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), vm),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256d hi = _mm256_round_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), vm),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        lo = _mm256_min_pd(vhi, _mm256_max_pd(vlo, _mm256_add_pd(lo, vz)));   /* operand order: nan passes */
        hi = _mm256_min_pd(vhi, _mm256_max_pd(vlo, _mm256_add_pd(hi, vz)));
        __m256 q = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
        _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_sub_ps(q, vzf), vs));
    }
    return i;
}

/* d[i] = (clip(rint(v / scale) + zp, qmin, qmax) - zp) * scale with v = acc[i] * step + res[i]
   (then max(v, 0) when relu): float32 operations in the order of a Mul, an Add, a Relu and the
   output's quantization, fused in one pass.  Returns how many leading elements were done (a
   multiple of 8). */
__attribute__((target("avx2")))
long rke_add_requant_avx2(const float *acc, const float *res, float *d, long n, float step, float scale, float zp,
                          float qmin, float qmax, int relu) {
    __m256 vstep = _mm256_set1_ps(step), vs = _mm256_set1_ps(scale), vz = _mm256_set1_ps(zp);
    __m256 vlo = _mm256_set1_ps(qmin), vhi = _mm256_set1_ps(qmax), zero = _mm256_setzero_ps();
    long i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(acc + i), vstep), _mm256_loadu_ps(res + i));
        if (relu)
            v = _mm256_max_ps(zero, v);   /* operand order: nan passes */
        __m256 q = _mm256_round_ps(_mm256_div_ps(v, vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_min_ps(vhi, _mm256_max_ps(vlo, _mm256_add_ps(q, vz)));
        _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_sub_ps(q, vz), vs));
    }
    return i;
}
#else
long rke_add_requant_avx2(const float *acc, const float *res, float *d, long n, float step, float scale, float zp,
                          float qmin, float qmax, int relu) {
    (void)acc; (void)res; (void)d; (void)n; (void)step; (void)scale; (void)zp; (void)qmin; (void)qmax; (void)relu;
    return 0;
}
long rke_codes_avx2(const float *s, float *d, long n, float scale) {
    (void)s; (void)d; (void)n; (void)scale; return 0;
}
long rke_requant_avx2(const float *s, float *d, long n, double mul, float zp, float qmin, float qmax,
                      float scale) {
    (void)s; (void)d; (void)n; (void)mul; (void)zp; (void)qmin; (void)qmax; (void)scale; return 0;
}
long rke_round_fp16_avx2(const float *s, float *d, long n) { (void)s; (void)d; (void)n; return 0; }
long rke_fake_quant_avx2(const float *s, float *d, long n, float scale, float zp, float qmin,
                                float qmax) {
    (void)s; (void)d; (void)n; (void)scale; (void)zp; (void)qmin; (void)qmax; return 0;
}
#endif
