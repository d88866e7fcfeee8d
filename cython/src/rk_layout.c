/* NCHW / NHWC <-> NC1HWC2 conversions and NHWC row padding as byte copies (see rk_layout.h and
 * the module doc of layout_kernels.pyx). */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>
#include "rk_layout.h"

#if defined(__GNUC__) || defined(__clang__)
#define LK_VECTOR 1
typedef uint8_t  lk_v1 __attribute__((vector_size(16)));
typedef uint16_t lk_v2 __attribute__((vector_size(16)));
typedef uint32_t lk_v4 __attribute__((vector_size(16)));
typedef uint64_t lk_v8 __attribute__((vector_size(16)));

#if defined(__clang__)
#define LK_SHUF(T, a, b, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define LK_SHUF(T, a, b, ...) __builtin_shuffle((a), (b), (T){__VA_ARGS__})
#endif

/* zip: lo = a0 b0 a1 b1 ... (low halves), hi = the same for the high halves. */
static inline void lk_zip1(lk_v1 a, lk_v1 b, lk_v1* lo, lk_v1* hi) {
    *lo = LK_SHUF(lk_v1, a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    *hi = LK_SHUF(lk_v1, a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}
static inline void lk_zip2(lk_v2 a, lk_v2 b, lk_v2* lo, lk_v2* hi) {
    *lo = LK_SHUF(lk_v2, a, b, 0, 8, 1, 9, 2, 10, 3, 11);
    *hi = LK_SHUF(lk_v2, a, b, 4, 12, 5, 13, 6, 14, 7, 15);
}
static inline void lk_zip4(lk_v4 a, lk_v4 b, lk_v4* lo, lk_v4* hi) {
    *lo = LK_SHUF(lk_v4, a, b, 0, 4, 1, 5);
    *hi = LK_SHUF(lk_v4, a, b, 2, 6, 3, 7);
}
static inline void lk_zip8(lk_v8 a, lk_v8 b, lk_v8* lo, lk_v8* hi) {
    *lo = LK_SHUF(lk_v8, a, b, 0, 2);
    *hi = LK_SHUF(lk_v8, a, b, 1, 3);
}

/* ROUNDS perfect shuffles of the K vectors r[0..K-1] (see the module docstring). */
#define LK_SHUFFLE(ES, K, ROUNDS, r) do {                                        \
    lk_v##ES t_[K];                                                               \
    _Pragma("GCC unroll 8")                                                       \
    for (int s_ = 0; s_ < (ROUNDS); s_++) {                                       \
        for (int j_ = 0; j_ < (K) / 2; j_++)                                      \
            lk_zip##ES(r[j_], r[j_ + (K) / 2], &t_[2 * j_], &t_[2 * j_ + 1]);     \
        for (int j_ = 0; j_ < (K); j_++) r[j_] = t_[j_];                          \
    }                                                                             \
} while (0)

/* K channel rows (row k at s + k * rs bytes) of P pixels -> P pixels x K lanes at d,
   and the inverse.  Returns the number of pixels done (a multiple of V). */
#define LK_DEFINE(ES, K, LOGK, LOGV)                                                    \
static ptrdiff_t lk_to_blocked_##ES##_##K(const uint8_t* restrict s, uint8_t* restrict d, \
                                          ptrdiff_t P, ptrdiff_t rs) {                 \
    enum { V = 16 / ES };                                                              \
    ptrdiff_t p = 0;                                                                   \
    for (; p + V <= P; p += V) {                                                       \
        lk_v##ES r[K];                                                                 \
        for (int k = 0; k < K; k++) memcpy(&r[k], s + k * rs + p * ES, 16);           \
        LK_SHUFFLE(ES, K, LOGK, r);                                                    \
        for (int k = 0; k < K; k++) memcpy(d + (p * K + k * V) * ES, &r[k], 16);      \
    }                                                                                  \
    return p;                                                                          \
}                                                                                      \
static ptrdiff_t lk_from_blocked_##ES##_##K(const uint8_t* restrict s, uint8_t* restrict d, \
                                            ptrdiff_t P, ptrdiff_t rs) {               \
    enum { V = 16 / ES };                                                              \
    ptrdiff_t p = 0;                                                                   \
    for (; p + V <= P; p += V) {                                                       \
        lk_v##ES r[K];                                                                 \
        for (int k = 0; k < K; k++) memcpy(&r[k], s + (p * K + k * V) * ES, 16);      \
        LK_SHUFFLE(ES, K, LOGV, r);                                                    \
        for (int k = 0; k < K; k++) memcpy(d + k * rs + p * ES, &r[k], 16);           \
    }                                                                                  \
    return p;                                                                          \
}

#define LK_DEFINE_ES(ES, LOGV) \
    LK_DEFINE(ES, 2, 1, LOGV) LK_DEFINE(ES, 4, 2, LOGV) LK_DEFINE(ES, 8, 3, LOGV) LK_DEFINE(ES, 16, 4, LOGV)
LK_DEFINE_ES(1, 4)
LK_DEFINE_ES(2, 3)
LK_DEFINE_ES(4, 2)
LK_DEFINE_ES(8, 1)

typedef ptrdiff_t (*lk_block_fn)(const uint8_t*, uint8_t*, ptrdiff_t, ptrdiff_t);

#define LK_ROW(ES, DIR) {lk_##DIR##_##ES##_2, lk_##DIR##_##ES##_4, lk_##DIR##_##ES##_8, lk_##DIR##_##ES##_16}
static const lk_block_fn lk_to_table[4][4] = {
    LK_ROW(1, to_blocked), LK_ROW(2, to_blocked), LK_ROW(4, to_blocked), LK_ROW(8, to_blocked)};
static const lk_block_fn lk_from_table[4][4] = {
    LK_ROW(1, from_blocked), LK_ROW(2, from_blocked), LK_ROW(4, from_blocked), LK_ROW(8, from_blocked)};

static inline int lk_log2_small(ptrdiff_t v) {
    switch (v) { case 1: return 0; case 2: return 1; case 4: return 2; case 8: return 3; case 16: return 4; }
    return -1;
}


/* 64-byte (AVX-512 VBMI) versions of the block kernels, chosen at run time: one
   vpermt2b per zip half (or unzip half) at any element size, through byte-index
   tables.  A row load or store is a whole cache line, so 16 channel rows a multiple
   of 4 KB apart no longer need the staging buffer.  NC1HWC2 -> NCHW runs log2(K)
   rounds of the inverse shuffle (an unzip: even / odd elements of two vectors), so
   both directions take log2(K) rounds.  The last pixels (fewer than 64 / es) go
   through the 16-byte kernels. */
#if defined(__x86_64__) && !defined(LK_NO_WIDE)
#include <immintrin.h>
#define LK_WIDE 1
/* [log2 es][zip low, zip high, even, odd][byte] */
static uint8_t lk_wide_idx[4][4][64];
static int lk_wide_ok = 0;

void lk_wide_init(void) {
    for (int e = 0; e < 4; e++) {
        int es = 1 << e, V = 64 >> e;
        for (int i = 0; i < V; i++) {
            for (int b = 0; b < es; b++) {
                int half = (i & 1) ? 64 : 0;   /* odd output elements come from the second vector */
                lk_wide_idx[e][0][i * es + b] = (uint8_t)(half + (i / 2) * es + b);
                lk_wide_idx[e][1][i * es + b] = (uint8_t)(half + (V / 2 + i / 2) * es + b);
                lk_wide_idx[e][2][i * es + b] = (uint8_t)(2 * i * es + b);
                lk_wide_idx[e][3][i * es + b] = (uint8_t)((2 * i + 1) * es + b);
            }
        }
    }
    __builtin_cpu_init();
    lk_wide_ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                 && __builtin_cpu_supports("avx512vbmi");
}

#define LK_WIDE_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi")))
#define LK_WIDE_DEFINE(K, LOGK)                                                               \
LK_WIDE_TARGET static ptrdiff_t lk_wide_to_##K(const uint8_t* restrict s, uint8_t* restrict d, \
                                               ptrdiff_t P, ptrdiff_t rs, ptrdiff_t es, int e) { \
    const __m512i lo = _mm512_loadu_si512((const void*)lk_wide_idx[e][0]);                     \
    const __m512i hi = _mm512_loadu_si512((const void*)lk_wide_idx[e][1]);                     \
    ptrdiff_t V = 64 / es, p = 0;                                                             \
    for (; p + V <= P; p += V) {                                                              \
        __m512i r[K], t[K];                                                                   \
        for (int k = 0; k < K; k++) r[k] = _mm512_loadu_si512((const void*)(s + k * rs + p * es)); \
        for (int q = 0; q < LOGK; q++) {                                                      \
            for (int j = 0; j < K / 2; j++) {                                                 \
                t[2 * j] = _mm512_permutex2var_epi8(r[j], lo, r[j + K / 2]);                  \
                t[2 * j + 1] = _mm512_permutex2var_epi8(r[j], hi, r[j + K / 2]);              \
            }                                                                                 \
            for (int j = 0; j < K; j++) r[j] = t[j];                                          \
        }                                                                                     \
        for (int k = 0; k < K; k++) _mm512_storeu_si512((void*)(d + p * K * es + k * 64), r[k]); \
    }                                                                                         \
    return p;                                                                                 \
}                                                                                             \
LK_WIDE_TARGET static ptrdiff_t lk_wide_from_##K(const uint8_t* restrict s, uint8_t* restrict d, \
                                                 ptrdiff_t P, ptrdiff_t rs, ptrdiff_t es, int e) { \
    const __m512i ev = _mm512_loadu_si512((const void*)lk_wide_idx[e][2]);                     \
    const __m512i od = _mm512_loadu_si512((const void*)lk_wide_idx[e][3]);                     \
    ptrdiff_t V = 64 / es, p = 0;                                                             \
    for (; p + V <= P; p += V) {                                                              \
        __m512i r[K], t[K];                                                                   \
        for (int k = 0; k < K; k++) t[k] = _mm512_loadu_si512((const void*)(s + p * K * es + k * 64)); \
        for (int q = 0; q < LOGK; q++) {                                                      \
            for (int j = 0; j < K / 2; j++) {                                                 \
                r[j] = _mm512_permutex2var_epi8(t[2 * j], ev, t[2 * j + 1]);                  \
                r[j + K / 2] = _mm512_permutex2var_epi8(t[2 * j], od, t[2 * j + 1]);          \
            }                                                                                 \
            for (int j = 0; j < K; j++) t[j] = r[j];                                          \
        }                                                                                     \
        for (int k = 0; k < K; k++) _mm512_storeu_si512((void*)(d + k * rs + p * es), t[k]); \
    }                                                                                         \
    return p;                                                                                 \
}
LK_WIDE_DEFINE(2, 1)
LK_WIDE_DEFINE(4, 2)
LK_WIDE_DEFINE(8, 3)
LK_WIDE_DEFINE(16, 4)

/* The 64-byte kernel for the whole 64 / es pixel groups, then the 16-byte one. */
/* The 64-byte kernel for the whole 64 / es pixel groups, then the 16-byte one. */
#define LK_WIDE_PAIR(ES, LOGES, K)                                                             \
static ptrdiff_t lk_wto_##ES##_##K(const uint8_t* s, uint8_t* d, ptrdiff_t P, ptrdiff_t rs) {  \
    ptrdiff_t p = lk_wide_to_##K(s, d, P, rs, ES, LOGES);                                      \
    return p + lk_to_blocked_##ES##_##K(s + p * ES, d + p * K * ES, P - p, rs);                \
}                                                                                              \
static ptrdiff_t lk_wfrom_##ES##_##K(const uint8_t* s, uint8_t* d, ptrdiff_t P, ptrdiff_t rs) { \
    ptrdiff_t p = lk_wide_from_##K(s, d, P, rs, ES, LOGES);                                    \
    return p + lk_from_blocked_##ES##_##K(s + p * K * ES, d + p * ES, P - p, rs);              \
}
#define LK_WIDE_ES(ES, LOGES) \
    LK_WIDE_PAIR(ES, LOGES, 2) LK_WIDE_PAIR(ES, LOGES, 4) LK_WIDE_PAIR(ES, LOGES, 8) LK_WIDE_PAIR(ES, LOGES, 16)
LK_WIDE_ES(1, 0)
LK_WIDE_ES(2, 1)
LK_WIDE_ES(4, 2)
LK_WIDE_ES(8, 3)
#define LK_WROW(ES, DIR) {lk_##DIR##_##ES##_2, lk_##DIR##_##ES##_4, lk_##DIR##_##ES##_8, lk_##DIR##_##ES##_16}
static const lk_block_fn lk_wto_table[4][4] = {LK_WROW(1, wto), LK_WROW(2, wto), LK_WROW(4, wto), LK_WROW(8, wto)};
static const lk_block_fn lk_wfrom_table[4][4] = {
    LK_WROW(1, wfrom), LK_WROW(2, wfrom), LK_WROW(4, wfrom), LK_WROW(8, wfrom)};
#else
#define LK_WIDE 0
static int lk_wide_ok = 0;
void lk_wide_init(void) {}
#endif

/* 1 when the 64-byte kernels run (compiled in and the CPU has AVX-512 VBMI), else 0;
   lk_set_wide(0) forces the 16-byte ones (for tests).  Returns the state in force. */
static int lk_wide_state = 0;
int lk_set_wide(int on) {
    lk_wide_state = on && LK_WIDE && lk_wide_ok;
    return lk_wide_state;
}

/* The vector kernel for (es, K), or NULL when there is none. */
static lk_block_fn lk_block_kernel(ptrdiff_t es, ptrdiff_t K, int to_blocked) {
    int e = lk_log2_small(es), k = lk_log2_small(K);
    if (e < 0 || e > 3 || k < 1) return NULL;
#if LK_WIDE
    if (lk_wide_state) return to_blocked ? lk_wto_table[e][k - 1] : lk_wfrom_table[e][k - 1];
#endif
    return to_blocked ? lk_to_table[e][k - 1] : lk_from_table[e][k - 1];
}
#else
#define LK_VECTOR 0
#define LK_WIDE 0
typedef ptrdiff_t (*lk_block_fn)(const uint8_t*, uint8_t*, ptrdiff_t, ptrdiff_t);
static lk_block_fn lk_block_kernel(ptrdiff_t es, ptrdiff_t K, int to_blocked) { return NULL; }
static int lk_wide_ok = 0, lk_wide_state = 0;
void lk_wide_init(void) {}
int lk_set_wide(int on) { return 0; }
#endif

const int lk_vector = LK_VECTOR;

/* Scalar transposes of the pixels [p0, p1) of kc rows (row k at s + k * rs) to lanes
   0..kc-1 of pixel-major blocks of K lanes at d (pixel p at d + p * K * es), and back. */
static void lk_scalar_to_blocked(const uint8_t* s, uint8_t* d, ptrdiff_t p0, ptrdiff_t p1,
                                 ptrdiff_t rs, ptrdiff_t kc, ptrdiff_t K, ptrdiff_t es) {
    for (ptrdiff_t p = p0; p < p1; p++)
        for (ptrdiff_t k = 0; k < kc; k++) memcpy(d + (p * K + k) * es, s + k * rs + p * es, (size_t)es);
}
static void lk_scalar_from_blocked(const uint8_t* s, uint8_t* d, ptrdiff_t p0, ptrdiff_t p1,
                                   ptrdiff_t rs, ptrdiff_t kc, ptrdiff_t K, ptrdiff_t es) {
    for (ptrdiff_t p = p0; p < p1; p++)
        for (ptrdiff_t k = 0; k < kc; k++) memcpy(d + k * rs + p * es, s + (p * K + k) * es, (size_t)es);
}

/* Bytes of one channel row in the staging buffer (a multiple of 16). */
#define LK_STAGE_ROW 512

/* One block of kc <= K real channels through the vector kernel: chunks of the kc rows
   are copied into (or out of) a K-row staging buffer whose other rows hold zeros
   (to_blocked) or are dropped (from_blocked).  `planar` is the block's first channel
   row (rows rs bytes apart), `blocked` its P * K lanes. */
static void lk_partial_block(const uint8_t* planar_s, uint8_t* planar_d, const uint8_t* blocked_s,
                             uint8_t* blocked_d, ptrdiff_t P, ptrdiff_t rs, ptrdiff_t kc, ptrdiff_t K,
                             ptrdiff_t es, lk_block_fn fast, uint8_t* stage, int to_blocked) {
    ptrdiff_t B = LK_STAGE_ROW / es;
    if (to_blocked) memset(stage + kc * LK_STAGE_ROW, 0, (size_t)((K - kc) * LK_STAGE_ROW));
    for (ptrdiff_t p0 = 0; p0 < P; p0 += B) {
        ptrdiff_t nb = P - p0 < B ? P - p0 : B, done;
        if (to_blocked) {
            uint8_t* d = blocked_d + p0 * K * es;
            for (ptrdiff_t k = 0; k < kc; k++)
                memcpy(stage + k * LK_STAGE_ROW, planar_s + k * rs + p0 * es, (size_t)(nb * es));
            done = fast(stage, d, nb, LK_STAGE_ROW);
            lk_scalar_to_blocked(stage, d, done, nb, LK_STAGE_ROW, K, K, es);
        } else {
            const uint8_t* s = blocked_s + p0 * K * es;
            done = fast(s, stage, nb, LK_STAGE_ROW);
            lk_scalar_from_blocked(s, stage, done, nb, LK_STAGE_ROW, K, K, es);
            for (ptrdiff_t k = 0; k < kc; k++)
                memcpy(planar_d + k * rs + p0 * es, stage + k * LK_STAGE_ROW, (size_t)(nb * es));
        }
    }
}

/* Whether full blocks go through the staging buffer too.  Channel rows a multiple of
   4 KB apart share L1 cache sets, and 8 or 16 of them (plus the other stream) do not
   fit an 8-way set, so each vector step misses.  Measured on x86-64 (8 MB tensors):
   staging wins for 16 rows either way and for 8 rows written (from_blocked), and loses
   everywhere else (the extra copy costs more than the conflicts). */
static inline int lk_stage_full_blocks(ptrdiff_t rs, ptrdiff_t K, int to_blocked) {
    if (lk_wide_state) return 0;  /* whole cache lines per row; staging measured no faster */
    return rs % 4096 == 0 && (K >= 16 || (!to_blocked && K >= 8));
}

/* NCHW (N, C, P) <-> NC1HWC2 (N, C1, P, K).  Full blocks run the vector kernel straight
   between the tensors, or through the staging buffer (lk_stage_full_blocks); a last
   block with fewer than K channels always goes through the staging buffer
   (lk_partial_block); without a vector kernel (or memory for the stage), scalar loops. */
static void lk_planar_blocked(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                              ptrdiff_t P, ptrdiff_t K, ptrdiff_t es, int to_blocked) {
    lk_block_fn fast = lk_block_kernel(es, K, to_blocked);
    uint8_t* stage = NULL;
    ptrdiff_t C1 = (C + K - 1) / K, rs = P * es;
    int stage_all = fast && lk_stage_full_blocks(rs, K, to_blocked);
    if (fast && (C % K || stage_all)) stage = (uint8_t*)calloc((size_t)K, LK_STAGE_ROW);
    for (ptrdiff_t n = 0; n < N; n++) {
        for (ptrdiff_t c1 = 0; c1 < C1; c1++) {
            ptrdiff_t kc = C - c1 * K < K ? C - c1 * K : K;
            ptrdiff_t planar = (n * C + c1 * K) * rs, blocked = (n * C1 + c1) * P * K * es;
            if (to_blocked) {
                const uint8_t* s = src + planar;
                uint8_t* d = dst + blocked;
                if (fast && kc == K && !(stage_all && stage)) {
                    lk_scalar_to_blocked(s, d, fast(s, d, P, rs), P, rs, K, K, es);
                } else if (fast && stage) {
                    lk_partial_block(s, NULL, NULL, d, P, rs, kc, K, es, fast, stage, 1);
                } else {
                    if (kc < K) memset(d, 0, (size_t)(P * K * es));
                    lk_scalar_to_blocked(s, d, 0, P, rs, kc, K, es);
                }
            } else {
                const uint8_t* s = src + blocked;
                uint8_t* d = dst + planar;
                if (fast && kc == K && !(stage_all && stage)) {
                    lk_scalar_from_blocked(s, d, fast(s, d, P, rs), P, rs, K, K, es);
                } else if (fast && stage) {
                    lk_partial_block(NULL, d, s, NULL, P, rs, kc, K, es, fast, stage, 0);
                } else {
                    lk_scalar_from_blocked(s, d, 0, P, rs, kc, K, es);
                }
            }
        }
    }
    free(stage);
}

void lk_planar_to_blocked(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                 ptrdiff_t P, ptrdiff_t K, ptrdiff_t es) {
    lk_planar_blocked(src, dst, N, C, P, K, es, 1);
}
void lk_blocked_to_planar(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                 ptrdiff_t P, ptrdiff_t K, ptrdiff_t es) {
    lk_planar_blocked(src, dst, N, C, P, K, es, 0);
}

/* Copy n <= 32 bytes without a call: two fixed-size copies that overlap in the middle
   (source and destination never overlap each other). */
static inline void lk_copy_small(uint8_t* d, const uint8_t* s, ptrdiff_t n) {
    if (n >= 16) { memcpy(d, s, 16); memcpy(d + n - 16, s + n - 16, 16); }
    else if (n >= 8) { memcpy(d, s, 8); memcpy(d + n - 8, s + n - 8, 8); }
    else if (n >= 4) { memcpy(d, s, 4); memcpy(d + n - 4, s + n - 4, 4); }
    else for (ptrdiff_t i = 0; i < n; i++) d[i] = s[i];
}

/* Copy `run` bytes for each of the pixels [p0, p1): from s + p * s_step to d + p * d_step.
   The common run lengths get a loop with a fixed-size copy (a single move); other runs
   up to 32 bytes (a last block with fewer than C2 channels) lk_copy_small. */
#define LK_RUN_LOOP(RUN) \
    for (ptrdiff_t p = p0; p < p1; p++) memcpy(d + p * d_step, s + p * s_step, (RUN))
static void lk_copy_runs(const uint8_t* s, ptrdiff_t s_step, uint8_t* d, ptrdiff_t d_step,
                         ptrdiff_t p0, ptrdiff_t p1, ptrdiff_t run) {
    switch (run) {
    case 1: LK_RUN_LOOP(1); break;
    case 2: LK_RUN_LOOP(2); break;
    case 4: LK_RUN_LOOP(4); break;
    case 8: LK_RUN_LOOP(8); break;
    case 16: LK_RUN_LOOP(16); break;
    case 32: LK_RUN_LOOP(32); break;
    case 64: LK_RUN_LOOP(64); break;
    default:
        if (run <= 32)
            for (ptrdiff_t p = p0; p < p1; p++) lk_copy_small(d + p * d_step, s + p * s_step, run);
        else
            LK_RUN_LOOP((size_t)run);
        break;
    }
}

/* Two full blocks of 8 bytes per pixel (C2 * es == 8: the RK3566/RK3568 C2 values) move
   as a 2 x 2 transpose of 8-byte elements per pixel pair: one 16-byte load covers both
   blocks of a pixel (NHWC side) or two pixels of a block (NC1HWC2 side).  Pixels
   [p0, p1); `nhwc` is the first block's run of pixel 0 (pixels nhwc_step bytes apart),
   b0 / b1 the two blocks' rows (8 bytes per pixel). */
static void lk_pairs8(uint8_t* nhwc, ptrdiff_t nhwc_step, uint8_t* b0, uint8_t* b1,
                      ptrdiff_t p0, ptrdiff_t p1, int to_blocked) {
    ptrdiff_t p = p0;
#if LK_VECTOR
    for (; p + 1 < p1; p += 2) {
        lk_v8 x, y, lo, hi;
        if (to_blocked) {
            memcpy(&x, nhwc + p * nhwc_step, 16);
            memcpy(&y, nhwc + (p + 1) * nhwc_step, 16);
            lk_zip8(x, y, &lo, &hi);
            memcpy(b0 + p * 8, &lo, 16);
            memcpy(b1 + p * 8, &hi, 16);
        } else {
            memcpy(&x, b0 + p * 8, 16);
            memcpy(&y, b1 + p * 8, 16);
            lk_zip8(x, y, &lo, &hi);
            memcpy(nhwc + p * nhwc_step, &lo, 16);
            memcpy(nhwc + (p + 1) * nhwc_step, &hi, 16);
        }
    }
#endif
    for (; p < p1; p++) {
        if (to_blocked) {
            memcpy(b0 + p * 8, nhwc + p * nhwc_step, 8);
            memcpy(b1 + p * 8, nhwc + p * nhwc_step + 8, 8);
        } else {
            memcpy(nhwc + p * nhwc_step, b0 + p * 8, 8);
            memcpy(nhwc + p * nhwc_step + 8, b1 + p * 8, 8);
        }
    }
}

/* The last block (run = kc * es < R bytes of real channels, R 8 or 16) of pixels [p0, p1):
   pixels [p0, pe) move whole R-byte runs, reading (NHWC -> NC1HWC2; the extra bytes are
   masked to zero) or writing (NC1HWC2 -> NHWC) the first R - run bytes of the next
   pixel, so they must lie inside the NHWC tensor, and on the way out the next pixel's
   first block (a full one) must be written afterwards.  Pixels [pe, p1) copy exactly. */
static void lk_last_block(uint8_t* nhwc, ptrdiff_t nhwc_step, uint8_t* b, ptrdiff_t p0, ptrdiff_t pe,
                          ptrdiff_t p1, ptrdiff_t run, ptrdiff_t R, int to_blocked) {
    if (!to_blocked) {
        lk_copy_runs(b, R, nhwc, nhwc_step, p0, pe, R);
        lk_copy_runs(b, R, nhwc, nhwc_step, pe, p1, run);
        return;
    }
    uint8_t mb[16] = {0};
    uint64_t m[2];
    memset(mb, 0xff, (size_t)run);
    memcpy(m, mb, 16);  /* byte masks: the AND keeps the first `run` bytes whatever the endianness */
    if (R == 8) {
        for (ptrdiff_t p = p0; p < pe; p++) {
            uint64_t v;
            memcpy(&v, nhwc + p * nhwc_step, 8);
            v &= m[0];
            memcpy(b + p * 8, &v, 8);
        }
    } else {
        for (ptrdiff_t p = p0; p < pe; p++) {
            uint64_t v[2];
            memcpy(v, nhwc + p * nhwc_step, 16);
            v[0] &= m[0];
            v[1] &= m[1];
            memcpy(b + p * 16, v, 16);
        }
    }
    if (p1 > pe) memset(b + pe * R, 0, (size_t)((p1 - pe) * R));
    lk_copy_runs(nhwc, nhwc_step, b, R, pe, p1, run);
}

/* Four full blocks of 16 bytes per pixel (C2 * es == 16: RK3588) with the 64-byte
   kernels on: 4 pixels x 4 blocks move as a 4 x 4 transpose of 16-byte lanes in four
   64-byte registers, so each load and store covers 64 bytes (4 blocks of a pixel on
   the NHWC side, 4 pixels of a block on the NC1HWC2 side).  Pixels [p0, p1); `nhwc`
   is the first block's run of pixel 0 (pixels nhwc_step bytes apart), `b` the first
   block's row (blocks bstep bytes apart, 16 bytes per pixel).  Returns the first pixel
   not done (the last p1 - p0 mod 4 pixels are left to the caller). */
#if LK_WIDE
LK_WIDE_TARGET static ptrdiff_t lk_quads16(uint8_t* nhwc, ptrdiff_t nhwc_step, uint8_t* b, ptrdiff_t bstep,
                                           ptrdiff_t p0, ptrdiff_t p1, int to_blocked) {
    ptrdiff_t p = p0;
    for (; p + 4 <= p1; p += 4) {
        __m512i x[4], t0, t1, t2, t3;
        for (int i = 0; i < 4; i++)
            x[i] = _mm512_loadu_si512(to_blocked ? (const void*)(nhwc + (p + i) * nhwc_step)
                                                 : (const void*)(b + i * bstep + p * 16));
        t0 = _mm512_shuffle_i64x2(x[0], x[1], 0x44);
        t1 = _mm512_shuffle_i64x2(x[0], x[1], 0xEE);
        t2 = _mm512_shuffle_i64x2(x[2], x[3], 0x44);
        t3 = _mm512_shuffle_i64x2(x[2], x[3], 0xEE);
        x[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
        x[1] = _mm512_shuffle_i64x2(t0, t2, 0xDD);
        x[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
        x[3] = _mm512_shuffle_i64x2(t1, t3, 0xDD);
        for (int i = 0; i < 4; i++)
            _mm512_storeu_si512(to_blocked ? (void*)(b + i * bstep + p * 16) : (void*)(nhwc + (p + i) * nhwc_step),
                                x[i]);
    }
    return p;
}
#endif

/* Pixels per tile of the NHWC walks: about 4 KB of NHWC data, at least one pixel
   (measured best among 1 KB..256 KB on x86-64 for C2 runs of 8 and 16 bytes). */
static inline ptrdiff_t lk_tile(ptrdiff_t C, ptrdiff_t es) {
    ptrdiff_t t = 4096 / (C * es > 0 ? C * es : 1);
    return t > 0 ? t : 1;
}

/* NHWC (N, P, C) <-> NC1HWC2 (N, C1, P, K): per tile of pixels, block by block, a run of
   kc * es bytes per pixel (pairs of 8-byte blocks through lk_pairs8).  NHWC -> NC1HWC2
   zeroes the padding lanes; NC1HWC2 -> NHWC does not read them. */
static void lk_interleaved_blocked(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                   ptrdiff_t P, ptrdiff_t K, ptrdiff_t es, int to_blocked) {
    ptrdiff_t C1 = (C + K - 1) / K, T = lk_tile(C, es), R = K * es;
    ptrdiff_t last = C1 - 1, kl = C - last * K;       /* the last block and its real channels */
    /* A last block with fewer than K channels moves whole R-byte runs (lk_last_block)
       for the pixels whose run ends inside the NHWC tensor: before global pixel g_end. */
    int whole_last = kl < K && C1 >= 2 && (R == 8 || R == 16);
    ptrdiff_t slack = N * P * C * es - C1 * R;
    ptrdiff_t g_end = slack < 0 ? 0 : slack / (C * es) + 1;
    for (ptrdiff_t n = 0; n < N; n++) {
        const uint8_t* x = to_blocked ? src : dst;            /* the NHWC tensor */
        uint8_t* nhwc = (uint8_t*)x + n * P * C * es;
        uint8_t* blocked = (to_blocked ? dst : (uint8_t*)src) + n * C1 * P * R;
        for (ptrdiff_t p0 = 0; p0 < P; p0 += T) {
            ptrdiff_t p1 = p0 + T < P ? p0 + T : P, nfull = C1;
            if (whole_last) {  /* first: NC1HWC2 -> NHWC relies on the other blocks coming after */
                ptrdiff_t pe = g_end - n * P;
                pe = pe < p0 ? p0 : (pe > p1 ? p1 : pe);
                lk_last_block(nhwc + last * R, C * es, blocked + last * P * R, p0, pe, p1, kl * es, R,
                              to_blocked);
                nfull = last;
            }
            for (ptrdiff_t c1 = 0; c1 < nfull;) {
                ptrdiff_t kc = C - c1 * K < K ? C - c1 * K : K;
                uint8_t* b = blocked + c1 * P * R;
#if LK_WIDE
                if (R == 16 && lk_wide_state && c1 + 4 <= nfull) {
                    ptrdiff_t pd = lk_quads16(nhwc + c1 * R, C * es, b, P * R, p0, p1, to_blocked);
                    for (int i = 0; i < 4; i++) {
                        uint8_t* bi = b + i * P * R;
                        if (to_blocked) lk_copy_runs(nhwc + (c1 + i) * R, C * es, bi, R, pd, p1, R);
                        else lk_copy_runs(bi, R, nhwc + (c1 + i) * R, C * es, pd, p1, R);
                    }
                    c1 += 4;
                    continue;
                }
#endif
                if (R == 8 && (c1 + 2) * K <= C) {
                    lk_pairs8(nhwc + c1 * R, C * es, b, b + P * R, p0, p1, to_blocked);
                    c1 += 2;
                    continue;
                }
                if (to_blocked) {
                    if (kc < K) memset(b + p0 * R, 0, (size_t)((p1 - p0) * R));
                    lk_copy_runs(nhwc + c1 * R, C * es, b, R, p0, p1, kc * es);
                } else {
                    lk_copy_runs(b, R, nhwc + c1 * R, C * es, p0, p1, kc * es);
                }
                c1++;
            }
        }
    }
}

void lk_interleaved_to_blocked(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                      ptrdiff_t P, ptrdiff_t K, ptrdiff_t es) {
    lk_interleaved_blocked(src, dst, N, C, P, K, es, 1);
}
void lk_blocked_to_interleaved(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                      ptrdiff_t P, ptrdiff_t K, ptrdiff_t es) {
    lk_interleaved_blocked(src, dst, N, C, P, K, es, 0);
}

/* `rows` rows: copy `copy` bytes from each source row (stride src_row) to each
   destination row (stride dst_row) and zero the rest of the destination row. */
void lk_copy_rows(const uint8_t* src, uint8_t* dst, ptrdiff_t rows, ptrdiff_t src_row,
                         ptrdiff_t dst_row, ptrdiff_t copy) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        if (copy) memcpy(dst + r * dst_row, src + r * src_row, (size_t)copy);
        if (dst_row > copy) memset(dst + r * dst_row + copy, 0, (size_t)(dst_row - copy));
    }
}
