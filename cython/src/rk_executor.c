/* AVX2 passes of the software executor: float16 rounding and fake quantization (see
 * rk_executor.h). */
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
#else
long rke_round_fp16_avx2(const float *s, float *d, long n) { (void)s; (void)d; (void)n; return 0; }
long rke_fake_quant_avx2(const float *s, float *d, long n, float scale, float zp, float qmin,
                                float qmax) {
    (void)s; (void)d; (void)n; (void)scale; (void)zp; (void)qmin; (void)qmax; return 0;
}
#endif
