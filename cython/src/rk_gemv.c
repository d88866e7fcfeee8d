/* Matrix-vector product y = W x, W row-major (see rk_gemv.h).  Memory-bound: every weight is
 * read once, four rows at a time (four sequential streams the prefetchers follow), each row
 * with two vector accumulators over k so the additions do not wait on each other. */
#include "rk_cpu.h"
#include "rk_gemv.h"

#if RK_X86
#include <immintrin.h>

/* R rows from row j: two 16-lane partial sums per row over k (32 per step, masked tail), added
 * together and reduced; the same operations per row for any R. */
#define RK_GEMV512_ROWS(R)                                                                       \
__attribute__((target("avx512f")))                                                               \
static void rk_gemv512_##R(const float *x, const float *w, long ldw, long K, float *y) {          \
    __m512 a[R], b[R];                                                                           \
    for (int r = 0; r < R; r++) { a[r] = _mm512_setzero_ps(); b[r] = _mm512_setzero_ps(); }     \
    long k = 0;                                                                                  \
    for (; k + 32 <= K; k += 32) {                                                               \
        __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);                     \
        for (int r = 0; r < R; r++) {                                                            \
            a[r] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w + r * ldw + k), a[r]);                  \
            b[r] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w + r * ldw + k + 16), b[r]);             \
        }                                                                                        \
    }                                                                                            \
    long rest = K - k;                                                                           \
    __mmask16 m0 = (__mmask16)(rest >= 16 ? 0xffffu : (1u << rest) - 1u);                        \
    __mmask16 m1 = (__mmask16)(rest <= 16 ? 0u : (1u << (rest - 16)) - 1u);                      \
    __m512 x0 = _mm512_maskz_loadu_ps(m0, x + k), x1 = _mm512_maskz_loadu_ps(m1, x + k + 16);     \
    for (int r = 0; r < R; r++) {                                                                \
        a[r] = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m0, w + r * ldw + k), a[r]);            \
        b[r] = _mm512_fmadd_ps(x1, _mm512_maskz_loadu_ps(m1, w + r * ldw + k + 16), b[r]);       \
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(a[r], b[r]));                                  \
    }                                                                                            \
}
RK_GEMV512_ROWS(4)
RK_GEMV512_ROWS(1)

/* The AVX2 form: 8 lanes, 16 per step, the tail through masked loads as above. */
#define RK_GEMV256_ROWS(R)                                                                       \
__attribute__((target("avx2,fma")))                                                              \
static void rk_gemv256_##R(const float *x, const float *w, long ldw, long K, float *y) {          \
    __m256 a[R], b[R];                                                                           \
    for (int r = 0; r < R; r++) { a[r] = _mm256_setzero_ps(); b[r] = _mm256_setzero_ps(); }     \
    long k = 0;                                                                                  \
    for (; k + 16 <= K; k += 16) {                                                               \
        __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + k + 8);                      \
        for (int r = 0; r < R; r++) {                                                            \
            a[r] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w + r * ldw + k), a[r]);                  \
            b[r] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w + r * ldw + k + 8), b[r]);              \
        }                                                                                        \
    }                                                                                            \
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);                              \
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(K - k)), lane);                      \
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(K - k - 8)), lane);                  \
    __m256 x0 = _mm256_maskload_ps(x + k, m0), x1 = _mm256_maskload_ps(x + k + 8, m1);           \
    for (int r = 0; r < R; r++) {                                                                \
        a[r] = _mm256_fmadd_ps(x0, _mm256_maskload_ps(w + r * ldw + k, m0), a[r]);                \
        b[r] = _mm256_fmadd_ps(x1, _mm256_maskload_ps(w + r * ldw + k + 8, m1), b[r]);            \
        __m256 s = _mm256_add_ps(a[r], b[r]);                                                    \
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));           \
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));                                                  \
        h = _mm_add_ss(h, _mm_movehdup_ps(h));                                                   \
        y[r] = _mm_cvtss_f32(h);                                                                 \
    }                                                                                            \
}
RK_GEMV256_ROWS(4)
RK_GEMV256_ROWS(1)
#endif

/* Generic C: four partial sums per row, k % 4 each, added in a fixed order. */
static void rk_gemv_generic(const float *x, const float *w, long ldw, long K, float *y, long rows) {
    for (long r = 0; r < rows; r++) {
        const float *wr = w + r * ldw;
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        long k = 0;
        for (; k + 4 <= K; k += 4)
            for (int i = 0; i < 4; i++) s[i] += x[k + i] * wr[k + i];
        for (; k < K; k++) s[k & 3] += x[k] * wr[k];
        y[r] = (s[0] + s[1]) + (s[2] + s[3]);
    }
}

void rk_gemv_rows(int isa, const float *x, const float *w, long ldw, long K, float *y, long j0, long j1) {
    long j = j0;
#if RK_X86
    if (isa >= 2) {
        for (; j + 4 <= j1; j += 4) rk_gemv512_4(x, w + j * ldw, ldw, K, y + j);
        for (; j < j1; j++) rk_gemv512_1(x, w + j * ldw, ldw, K, y + j);
        return;
    }
    if (isa == 1) {
        for (; j + 4 <= j1; j += 4) rk_gemv256_4(x, w + j * ldw, ldw, K, y + j);
        for (; j < j1; j++) rk_gemv256_1(x, w + j * ldw, ldw, K, y + j);
        return;
    }
#else
    (void)isa;
#endif
    rk_gemv_generic(x, w + j * ldw, ldw, K, y + j, j1 - j);
}
