/* CSR sparse-weight GEMM, generic C and AVX2+FMA (see rk_sparse.h). */
#include <stdint.h>
#include <math.h>
#include "rk_sparse.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RKS_X86 1
#include <immintrin.h>
#else
#define RKS_X86 0
#endif

#define RKS_ARGS const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M, \
                 const float *X, long xs, float *Y, long ys, long n0, long n1

void rks_csr_generic(RKS_ARGS) {
    for (long m = 0; m < M; m++) {
        float *y = Y + m * ys;
        const int32_t *b = blk + m * (nkb + 1);
        for (long n = n0; n < n1; n++) {
            float a = 0.0f;
            for (long j = b[0]; j < b[nkb]; j++)
                a = fmaf(vals[j], X[(long)cols[j] * xs + n], a);
            y[n] = a;
        }
    }
}

#if RKS_X86
/* Y[m, n] (+)= chain over the non-zeros of row m with column indices in K block kb:
   blk[m * (nkb + 1) + kb] .. blk[m * (nkb + 1) + kb + 1].  The first block starts the
   chain from 0, later blocks continue it from Y (a float32 store/load is exact), so the
   chain is the same as without blocking. */
#define RKS_TILE(W)                                                                  \
    for (long kb = 0; kb < nkb; kb++) {                                              \
        for (long m = 0; m < M; m++) {                                               \
            const int32_t *b = blk + m * (nkb + 1) + kb;                             \
            float *y = Y + m * ys + n;                                               \
            if (kb > 0 && b[0] == b[1]) continue;                                    \
            __m256 a[W];                                                             \
            for (int t = 0; t < W; t++)                                              \
                a[t] = kb == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 8 * t);   \
            for (long j = b[0]; j < b[1]; j++) {                                     \
                const __m256 v = _mm256_broadcast_ss(vals + j);                      \
                const float *x = X + (long)cols[j] * xs + n;                         \
                for (int t = 0; t < W; t++)                                          \
                    a[t] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + 8 * t), a[t]);     \
            }                                                                        \
            for (int t = 0; t < W; t++) _mm256_storeu_ps(y + 8 * t, a[t]);           \
        }                                                                            \
    }

__attribute__((target("avx2,fma")))
void rks_csr_avx2(RKS_ARGS) {
    long n = n0;
    /* column tiles outer, K blocks inside: the (K block) x 64 panel of X stays in L1
       across all rows; 8 independent accumulators hide the FMA latency */
    for (; n + 64 <= n1; n += 64) { RKS_TILE(8) }
    for (; n + 32 <= n1; n += 32) { RKS_TILE(4) }
    for (; n + 8 <= n1; n += 8) { RKS_TILE(1) }
    for (; n < n1; n++) {
        for (long m = 0; m < M; m++) {
            const int32_t *b = blk + m * (nkb + 1);
            float a = 0.0f;
            for (long j = b[0]; j < b[nkb]; j++)
                a = fmaf(vals[j], X[(long)cols[j] * xs + n], a);
            Y[m * ys + n] = a;
        }
    }
}

int rks_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
void rks_csr_avx2(RKS_ARGS) { rks_csr_generic(vals, cols, blk, nkb, M, X, xs, Y, ys, n0, n1); }
int rks_has_avx2(void) { return 0; }
#endif
