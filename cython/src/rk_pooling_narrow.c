/* Whole-plane pooling of narrow 2-D planes with AVX-512 or AVX2 (see rk_pooling.h: rkp_narrow_fits,
 * rkp_narrow_pool).
 *
 * The row passes of rk_pooling.c cost a call, a vector loop's set-up and a scalar tail per output
 * row; on a 14 x 14 plane that is most of the time.  Here a plane's padded scratch row lives in
 * up to four vector registers (lanes [pw, pw + W) the input row, identity elsewhere, loaded with one
 * masked load per register and input row), the vertical pass combines them row by row, and the
 * horizontal pass reads its taps with lane permutes: stride 1 tap k of output lane j is scratch
 * lane j + k; stride 2 splits the scratch into its even and odd lanes first.  The order of
 * operations is the row loops' own (vertical: rows in window order; horizontal: taps in order,
 * then * 1/count), so results are bit-identical to them.  AVX2 has no two-register permute: a tap
 * there is two one-register permutes and a blend, and its limits are half AVX-512's. */
#include <stddef.h>
#include "rk_cpu.h"
#include "rk_pooling.h"

#if RK_X86
#include <immintrin.h>

#define RKN_REGS 4      /* AVX-512 scratch registers: pw + W <= 64 */
#define RKN_CHUNKS 2    /* AVX-512 output registers per row: OW <= 32 */
#define RK2_REGS 4      /* AVX2: pw + W <= 32 */
#define RK2_CHUNKS 2    /* AVX2: OW <= 16 */

int rkp_narrow_fits(int isa, ptrdiff_t W, ptrdiff_t OW, int kw, int sw, int dw, int pw) {
    if (isa < 1 || dw != 1 || OW < 1 || W < 1 || pw < 0 || kw < 1) return 0;
    int lanes = isa >= 2 ? 16 : 8, regs = isa >= 2 ? RKN_REGS : RK2_REGS, chunks = isa >= 2 ? RKN_CHUNKS : RK2_CHUNKS;
    if (pw + W > lanes * regs || OW > lanes * chunks) return 0;
    /* AVX2's stride-1 taps (two permutes and a blend each, all on one port) lose to the row loops'
       flat "same" passes past one output register (bench_pool on the Xeon: 3x3 576@14 79 against 41 us) */
    if (isa < 2 && sw == 1 && OW > lanes) return 0;
    if (sw == 1) return kw <= lanes + 1;   /* lane j + k of two registers */
    if (sw == 2) return kw <= 2 * lanes;   /* lane j + k / 2 of two parity registers */
    return 0;
}

/* a + b or the row loops' max (b > a ? b : a), by kind */
#define RKN_COMBINE(is_max, a, b) ((is_max) ? _mm512_max_ps((b), (a)) : _mm512_add_ps((a), (b)))

/* One plane; IS_MAX, SW (1 or 2), NR scratch registers and NC output registers per row are constants
   in each instance (rkn_pick), so t and s stay in registers. */
__attribute__((target("avx512f"), always_inline))
static inline void rkn_plane(const int IS_MAX, const int SW, const int NR, const int NC, float *y, const float *plane,
                             ptrdiff_t OW, ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs, int per, int kw,
                             int pw, __m512 ident, const float *inv, const __mmask16 *lmask, const __m512i *shift,
                             const __m512i *parity) {
    const __mmask16 last = (__mmask16)((1u << (OW - 16 * (NC - 1))) - 1);
    for (ptrdiff_t q = 0; q < nq; q++, y += OW) {
        const int nr = nrows[q];
        const ptrdiff_t *rows = offs + q * per;
        __m512 t[2 * RKN_CHUNKS + 2];   /* scratch registers, identity past NR */
        for (int i = 0; i < 2 * RKN_CHUNKS + 2; i++) t[i] = ident;
        if (nr > 0) {
            /* zero in the padding lanes while the rows combine (max(0, 0) and 0 + 0 are 0), the identity after */
            for (int i = 0; i < NR; i++) t[i] = _mm512_maskz_loadu_ps(lmask[i], plane + rows[0] - pw + 16 * i);
            for (int r = 1; r < nr; r++)
                for (int i = 0; i < NR; i++) {
                    __m512 v = _mm512_maskz_loadu_ps(lmask[i], plane + rows[r] - pw + 16 * i);
                    t[i] = RKN_COMBINE(IS_MAX, t[i], v);
                }
            if (IS_MAX)
                for (int i = 0; i < NR; i++) t[i] = _mm512_mask_blend_ps(lmask[i], ident, t[i]);
        }
        /* stride 2: e[c] the even scratch lanes 32c.., o[c] the odd ones */
        __m512 e[RKN_CHUNKS + 1], o[RKN_CHUNKS + 1];
        if (SW == 2)
            for (int c = 0; c <= NC; c++) {
                e[c] = _mm512_permutex2var_ps(t[2 * c], parity[0], t[2 * c + 1]);
                o[c] = _mm512_permutex2var_ps(t[2 * c], parity[1], t[2 * c + 1]);
            }
        for (int c = 0; c < NC; c++) {
            __m512 acc;
            if (nr == 0) {
                acc = ident;    /* no real row: the empty value, or a zero sum (times its 0 reciprocal) */
            } else if (SW == 1) {
                acc = t[c];
                for (int k = 1; k < kw; k++)
                    acc = RKN_COMBINE(IS_MAX, acc, _mm512_permutex2var_ps(t[c], shift[k], t[c + 1]));
            } else {
                acc = e[c];
                for (int k = 1; k < kw; k++) {
                    __m512 lo = (k & 1) ? o[c] : e[c], hi = (k & 1) ? o[c + 1] : e[c + 1];
                    acc = RKN_COMBINE(IS_MAX, acc, (k >> 1) ? _mm512_permutex2var_ps(lo, shift[k >> 1], hi) : lo);
                }
            }
            __mmask16 om = c == NC - 1 ? last : (__mmask16)0xFFFF;
            if (!IS_MAX) acc = _mm512_mul_ps(acc, _mm512_maskz_loadu_ps(om, inv + q * OW + 16 * c));
            _mm512_mask_storeu_ps(y + 16 * c, om, acc);
        }
    }
}

/* Instances P_<is_max><stride><NR><NC> of P_plane for every case, each a loop over the planes,
   and P_table[is_max][stride - 1][NR - 1][NC - 1] of them (P: rkn AVX-512, rk2 AVX2; P_ARGS their
   parameters, ta and tb the lane tables P_plane reads) */
_Static_assert(RKN_REGS == 4 && RKN_CHUNKS == 2 && RK2_REGS == 4 && RK2_CHUNKS == 2,
               "RKX_TABLE makes the instances of 1-4 scratch and 1-2 output registers");
#define RKX_INSTANCE(P, ISA, M, S, R, C)                                                                    \
    __attribute__((target(ISA))) static void P##_##M##S##R##C(P##_ARGS) {                                  \
        for (ptrdiff_t p = 0; p < planes; p++)                                                              \
            P##_plane(M, S, R, C, y + p * nq * OW, x + p * in_stride, OW, nq, nrows, offs, per, kw, pw, ident, \
                      inv, lmask, ta, tb);                                                                  \
    }
#define RKX_BY_C(P, ISA, M, S, R) RKX_INSTANCE(P, ISA, M, S, R, 1) RKX_INSTANCE(P, ISA, M, S, R, 2)
#define RKX_BY_R(P, ISA, M, S) \
    RKX_BY_C(P, ISA, M, S, 1) RKX_BY_C(P, ISA, M, S, 2) RKX_BY_C(P, ISA, M, S, 3) RKX_BY_C(P, ISA, M, S, 4)
#define RKX_ROW_C(P, M, S, R) {P##_##M##S##R##1, P##_##M##S##R##2}
#define RKX_ROW_R(P, M, S) {RKX_ROW_C(P, M, S, 1), RKX_ROW_C(P, M, S, 2), RKX_ROW_C(P, M, S, 3), RKX_ROW_C(P, M, S, 4)}
#define RKX_TABLE(P, ISA)                                                                                   \
    typedef void (*P##_fn)(P##_ARGS);                                                                       \
    RKX_BY_R(P, ISA, 0, 1) RKX_BY_R(P, ISA, 0, 2) RKX_BY_R(P, ISA, 1, 1) RKX_BY_R(P, ISA, 1, 2)           \
    static const P##_fn P##_table[2][2][4][2] = {{RKX_ROW_R(P, 0, 1), RKX_ROW_R(P, 0, 2)},                 \
                                                 {RKX_ROW_R(P, 1, 1), RKX_ROW_R(P, 1, 2)}};

/* an instance's parameters: VEC the vector type, MASK the load masks', TA and TB the lane tables' */
#define RKX_ARGS(VEC, MASK, TA, TB)                                                                         \
    float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride, ptrdiff_t OW, ptrdiff_t nq,            \
    const int *nrows, const ptrdiff_t *offs, int per, int kw, int pw, VEC ident, const float *inv,          \
    const MASK *lmask, const TA *ta, const TB *tb
/* P_run's: rkp_narrow_pool's, but for the level */
#define RKX_RUN_ARGS                                                                                        \
    int is_max, float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride, ptrdiff_t W, ptrdiff_t OW, \
    ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs, int per, int kw, int sw, int pw, float ident,    \
    const float *inv

#define rkn_ARGS RKX_ARGS(__m512, __mmask16, __m512i, __m512i)
RKX_TABLE(rkn, "avx512f")

__attribute__((target("avx512f")))
static void rkn_run(RKX_RUN_ARGS) {
    __mmask16 lmask[RKN_REGS];
    int nregs = 0;
    for (int i = 0; i < RKN_REGS; i++) {
        unsigned m = 0;
        for (int j = 0; j < 16; j++) {
            ptrdiff_t lane = 16 * i + j;
            if (lane >= pw && lane < pw + W) m |= 1u << j;
        }
        lmask[i] = (__mmask16)m;
        if (m) nregs = i + 1;
    }
    __m512i shift[17], parity[2];
    for (int k = 0; k < 17; k++) shift[k] = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                                                  11, 12, 13, 14, 15),
                                                              _mm512_set1_epi32(k));
    parity[0] = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    parity[1] = _mm512_add_epi32(parity[0], _mm512_set1_epi32(1));
    rkn_table[is_max != 0][sw - 1][nregs - 1][(OW + 15) / 16 - 1](y, x, planes, in_stride, OW, nq, nrows, offs, per,
                                                                   kw, pw, _mm512_set1_ps(ident), inv, lmask, shift,
                                                                   parity);
}

/* ---- AVX2: 8 lanes, the same passes */

#define RK2_COMBINE(is_max, a, b) ((is_max) ? _mm256_max_ps((b), (a)) : _mm256_add_ps((a), (b)))

/* lanes j + s (s in [0, 8]) of the 16-lane concatenation (lo, hi): idx = (j + s) & 7, hi_lanes
   selects the lanes j + s >= 8 */
#define RK2_SHIFT(lo, hi, idx, hi_lanes) \
    _mm256_blendv_ps(_mm256_permutevar8x32_ps((lo), (idx)), _mm256_permutevar8x32_ps((hi), (idx)), (hi_lanes))

__attribute__((target("avx2"), always_inline))
static inline void rk2_plane(const int IS_MAX, const int SW, const int NR, const int NC, float *y, const float *plane,
                             ptrdiff_t OW, ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs, int per, int kw,
                             int pw, __m256 ident, const float *inv, const __m256i *lmask, const __m256i *idx,
                             const __m256 *hi_lanes) {
    const int left = (int)(OW - 8 * (NC - 1));
    const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i all = _mm256_set1_epi32(-1);
    /* stride 2: the even / odd lanes of a register pair, from lanes 0, 2, 4, 6 (1, 3, 5, 7) of each */
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
    const __m256 upper = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1));
    for (ptrdiff_t q = 0; q < nq; q++, y += OW) {
        const int nr = nrows[q];
        const ptrdiff_t *rows = offs + q * per;
        __m256 t[2 * RK2_CHUNKS + 2];
        for (int i = 0; i < 2 * RK2_CHUNKS + 2; i++) t[i] = ident;
        if (nr > 0) {
            for (int i = 0; i < NR; i++) t[i] = _mm256_maskload_ps(plane + rows[0] - pw + 8 * i, lmask[i]);
            for (int r = 1; r < nr; r++)
                for (int i = 0; i < NR; i++) {
                    __m256 v = _mm256_maskload_ps(plane + rows[r] - pw + 8 * i, lmask[i]);
                    t[i] = RK2_COMBINE(IS_MAX, t[i], v);
                }
            if (IS_MAX)
                for (int i = 0; i < NR; i++) t[i] = _mm256_blendv_ps(ident, t[i], _mm256_castsi256_ps(lmask[i]));
        }
        __m256 e[RK2_CHUNKS + 1], o[RK2_CHUNKS + 1];
        if (SW == 2)
            for (int c = 0; c <= NC; c++) {
                e[c] = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[2 * c], even),
                                        _mm256_permutevar8x32_ps(t[2 * c + 1], even), upper);
                o[c] = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[2 * c], odd),
                                        _mm256_permutevar8x32_ps(t[2 * c + 1], odd), upper);
            }
        for (int c = 0; c < NC; c++) {
            __m256 acc;
            if (nr == 0) {
                acc = ident;
            } else if (SW == 1) {
                acc = t[c];
                for (int k = 1; k < kw; k++)
                    acc = RK2_COMBINE(IS_MAX, acc, RK2_SHIFT(t[c], t[c + 1], idx[k], hi_lanes[k]));
            } else {
                acc = e[c];
                for (int k = 1; k < kw; k++) {
                    __m256 lo = (k & 1) ? o[c] : e[c], hi = (k & 1) ? o[c + 1] : e[c + 1];
                    int a = k >> 1;
                    acc = RK2_COMBINE(IS_MAX, acc, a ? RK2_SHIFT(lo, hi, idx[a], hi_lanes[a]) : lo);
                }
            }
            __m256i om = c == NC - 1 ? last : all;
            if (!IS_MAX) acc = _mm256_mul_ps(acc, _mm256_maskload_ps(inv + q * OW + 8 * c, om));
            _mm256_maskstore_ps(y + 8 * c, om, acc);
        }
    }
}

#define rk2_ARGS RKX_ARGS(__m256, __m256i, __m256i, __m256)
RKX_TABLE(rk2, "avx2")

__attribute__((target("avx2")))
static void rk2_run(RKX_RUN_ARGS) {
    __m256i lmask[RK2_REGS], idx[9];
    __m256 hi_lanes[9];
    int nregs = 0;
    for (int i = 0; i < RK2_REGS; i++) {
        int m[8], any = 0;
        for (int j = 0; j < 8; j++) {
            m[j] = (8 * i + j >= pw && 8 * i + j < pw + W) ? -1 : 0;
            any |= m[j];
        }
        lmask[i] = _mm256_loadu_si256((const __m256i *)m);
        if (any) nregs = i + 1;
    }
    for (int s = 0; s <= 8; s++) {
        int ix[8], hi[8];
        for (int j = 0; j < 8; j++) { ix[j] = (j + s) & 7; hi[j] = j + s >= 8 ? -1 : 0; }
        idx[s] = _mm256_loadu_si256((const __m256i *)ix);
        hi_lanes[s] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)hi));
    }
    rk2_table[is_max != 0][sw - 1][nregs - 1][(OW + 7) / 8 - 1](y, x, planes, in_stride, OW, nq, nrows, offs, per,
                                                                 kw, pw, _mm256_set1_ps(ident), inv, lmask, idx,
                                                                 hi_lanes);
}

void rkp_narrow_pool(int isa, int is_max, float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride,
                     ptrdiff_t W, ptrdiff_t OW, ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs, int per,
                     int kw, int sw, int pw, float ident, const float *inv) {
    if (isa >= 2) rkn_run(is_max, y, x, planes, in_stride, W, OW, nq, nrows, offs, per, kw, sw, pw, ident, inv);
    else rk2_run(is_max, y, x, planes, in_stride, W, OW, nq, nrows, offs, per, kw, sw, pw, ident, inv);
}

#else

int rkp_narrow_fits(int isa, ptrdiff_t W, ptrdiff_t OW, int kw, int sw, int dw, int pw) {
    (void)isa, (void)W, (void)OW, (void)kw, (void)sw, (void)dw, (void)pw;
    return 0;
}

void rkp_narrow_pool(int isa, int is_max, float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride,
                     ptrdiff_t W, ptrdiff_t OW, ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs, int per,
                     int kw, int sw, int pw, float ident, const float *inv) {
    (void)isa, (void)is_max, (void)y, (void)x, (void)planes, (void)in_stride, (void)W, (void)OW, (void)nq;
    (void)nrows, (void)offs, (void)per, (void)kw, (void)sw, (void)pw, (void)ident, (void)inv;
}

#endif
