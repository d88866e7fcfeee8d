/* Whole-plane pooling of narrow 2-D planes with AVX-512 (see rk_pooling.h: rkp_narrow_fits,
 * rkp_narrow_pool).
 *
 * The row passes of rk_pooling.c cost a call, a vector loop's set-up and a scalar tail per output
 * row; on a 14 x 14 plane that is most of the time.  Here a plane's padded scratch row lives in
 * up to four zmm registers (lanes [pw, pw + W) the input row, identity elsewhere, loaded with one
 * masked load per register and input row), the vertical pass combines them row by row, and the
 * horizontal pass reads its taps with lane permutes: stride 1 tap k of output lane j is scratch
 * lane j + k; stride 2 splits the scratch into its even and odd lanes first.  The order of
 * operations is the row loops' own (vertical: rows in window order; horizontal: taps in order,
 * then * 1/count), so results are bit-identical to them. */
#include <stddef.h>
#include "rk_cpu.h"
#include "rk_pooling.h"

#if RK_X86
#include <immintrin.h>

#define RKN_REGS 4      /* scratch registers: pw + W <= 64 */
#define RKN_CHUNKS 2    /* output registers per row: OW <= 32 */

int rkp_narrow_fits(int isa, ptrdiff_t W, ptrdiff_t OW, int kw, int sw, int dw, int pw) {
    if (isa < 2 || dw != 1 || OW < 1 || W < 1 || pw < 0 || kw < 1) return 0;
    if (pw + W > 16 * RKN_REGS || OW > 16 * RKN_CHUNKS) return 0;
    if (sw == 1) return kw <= 17;   /* lane j + k of two registers */
    if (sw == 2) return kw <= 32;   /* lane j + k / 2 of two parity registers */
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

#define RKN_ARGS float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride, ptrdiff_t OW, ptrdiff_t nq, \
                 const int *nrows, const ptrdiff_t *offs, int per, int kw, int pw, __m512 ident, const float *inv, \
                 const __mmask16 *lmask, const __m512i *shift, const __m512i *parity
typedef void (*rkn_fn)(RKN_ARGS);
#define RKN_INSTANCE(M, S, R, C)                                                                            \
    __attribute__((target("avx512f"))) static void rkn_##M##S##R##C(RKN_ARGS) {                           \
        for (ptrdiff_t p = 0; p < planes; p++)                                                              \
            rkn_plane(M, S, R, C, y + p * nq * OW, x + p * in_stride, OW, nq, nrows, offs, per, kw, pw, ident, \
                      inv, lmask, shift, parity);                                                           \
    }
#define RKN_BY_C(M, S, R) RKN_INSTANCE(M, S, R, 1) RKN_INSTANCE(M, S, R, 2)
#define RKN_BY_R(M, S) RKN_BY_C(M, S, 1) RKN_BY_C(M, S, 2) RKN_BY_C(M, S, 3) RKN_BY_C(M, S, 4)
RKN_BY_R(0, 1) RKN_BY_R(0, 2) RKN_BY_R(1, 1) RKN_BY_R(1, 2)
#define RKN_ROW_C(M, S, R) {rkn_##M##S##R##1, rkn_##M##S##R##2}
#define RKN_ROW_R(M, S) {RKN_ROW_C(M, S, 1), RKN_ROW_C(M, S, 2), RKN_ROW_C(M, S, 3), RKN_ROW_C(M, S, 4)}
/* [is_max][sw - 1][NR - 1][NC - 1] */
static const rkn_fn rkn_table[2][2][RKN_REGS][RKN_CHUNKS] = {
    {RKN_ROW_R(0, 1), RKN_ROW_R(0, 2)}, {RKN_ROW_R(1, 1), RKN_ROW_R(1, 2)}};

__attribute__((target("avx512f")))
static void rkn_run(int is_max, float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride, ptrdiff_t W,
                    ptrdiff_t OW, ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs, int per, int kw, int sw,
                    int pw, float ident, const float *inv) {
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

void rkp_narrow_pool(int isa, int is_max, float *y, const float *x, ptrdiff_t planes, ptrdiff_t in_stride,
                     ptrdiff_t W, ptrdiff_t OW, ptrdiff_t nq, const int *nrows, const ptrdiff_t *offs, int per,
                     int kw, int sw, int pw, float ident, const float *inv) {
    (void)isa;
    rkn_run(is_max, y, x, planes, in_stride, W, OW, nq, nrows, offs, per, kw, sw, pw, ident, inv);
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
