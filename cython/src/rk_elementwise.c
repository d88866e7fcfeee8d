/* erf and exact gelu over float32 arrays, from exp terms numpy computed, and a vendor int8 conv's
 * lookup-table stage (see rk_elementwise.h). */
#include <math.h>
#include <stddef.h>
#include "rk_elementwise.h"

/* GCC will not if-convert the selects below (so will not vectorise the loops)
   while it must preserve floating-point trap semantics; nothing here reads the FP
   exception flags.  On x86-64 the loops are also cloned for AVX2+FMA and AVX-512
   (picked at load time by the CPU), as the baseline SSE2 build is ~4x slower. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) && defined(__linux__)
#define RKL_EW_VECTORIZE __attribute__((optimize("no-trapping-math"), \
    target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#define RKL_EW_VECTORIZE __attribute__((optimize("no-trapping-math")))
#else
#define RKL_EW_VECTORIZE
#endif

/* The same clones, with a * b + c never contracted to one fused multiply-add: the lookup-table
   stage must round as numpy does, on every CPU. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) && defined(__linux__)
#define RKL_EW_UNFUSED __attribute__((optimize("no-trapping-math", "fp-contract=off"), \
    target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#define RKL_EW_UNFUSED __attribute__((optimize("no-trapping-math", "fp-contract=off")))
#else
#define RKL_EW_UNFUSED
#endif

/* erf(z) for |z| < 1, u = z*z */
#define RKL_ERF_SMALL(z, u) ((z) * (1.1283791670580217 + u * (-0.3761263843464424 + u * (0.11283781973999803 + u * (-0.026865400035947277 + u * (0.0052209454153887835 + u * (-0.0008482828592512922 + u * (0.00011256946085566381 + u * (-9.641510905206318e-06)))))))))
/* erfc(a) for a >= 0, from e = exp(-a*a) and t = 1 / (1 + 0.3 a) */
#define RKL_ERFC_LARGE(e, t) ((e) * (t) * (0.16927974802384468 + t * (0.1687200487758329 + t * (0.16723426983721684 + t * (0.11227709015985211 + t * (0.2598426684084033 + t * (-0.26626941479899047 + t * (0.7478702944582541 + t * (-0.815011529318999 + t * (0.7281845352237946 + t * (-0.32688011281706925 + t * (0.05475240157045871))))))))))))

RKL_EW_VECTORIZE void rkl_erf_from_exp(const float *x, float *w, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        float v = x[i];
        double z = v, u = z * z;
        double a = fabs(z);
        double lo = a < 16.0 ? (double)(v * v) - u : 0.0;  /* fl(v*v) may overflow; w is 0 there */
        double e = w[i] * (1.0 + lo);
        double t = 1.0 / (1.0 + 0.3 * a);
        double small = RKL_ERF_SMALL(z, u);
        double large = 1.0 - RKL_ERFC_LARGE(e, t);
        large = z < 0 ? -large : large;
        w[i] = (float)(a < 1.0 ? small : large);
    }
}

/* gelu(x) = 0.5 x erfc(-x/sqrt(2)): for |z| < 1 as 1 + erf(z), beyond from the erfc
   form (reflected as 2 - erfc(|z|) for positive x), so neither side cancels. */
RKL_EW_VECTORIZE void rkl_gelu_from_exp(const float *x, float *w, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        float v = x[i];
        double xd = v;
        double z = xd * 0.70710678118654752440, u = z * z;
        double a = fabs(z);
        double lo = a < 16.0 ? 0.5 * ((double)(v * v) - xd * xd) : 0.0;
        double e = w[i] * (1.0 + lo);
        double t = 1.0 / (1.0 + 0.3 * a);
        double small = 1.0 + RKL_ERF_SMALL(z, u);
        double c = RKL_ERFC_LARGE(e, t);
        double large = z < 0 ? c : 2.0 - c;
        w[i] = (float)(0.5 * xd * (a < 1.0 ? small : large));
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RKL_LUT_X86 1
#include <immintrin.h>

/* The loop below on 8 values at a time with AVX-512 gathers: the same double operations in the
   same order (no fused multiply-add).  Returns how many leading values it did (a multiple of 8). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx512f"), optimize("fp-contract=off")))
#else
__attribute__((target("avx512f")))
#endif
static ptrdiff_t rkl_lut_row_avx512(const float *a, float *o, ptrdiff_t n, double scale, const rkl_lut *p) {
    const double *both = p->both;
    const __m512d vscale = _mm512_set1_pd(scale), voffset = _mm512_set1_pd(p->index_offset);
    const __m512d vle_start = _mm512_set1_pd(p->le_start), vlo_start = _mm512_set1_pd(p->lo_start);
    const __m512d vlo_end = _mm512_set1_pd(p->lo_end), vinv = _mm512_set1_pd(1.0 / p->step);
    const __m512d vle_kmax = _mm512_set1_pd((double)(p->le_n - 2)), vlo_kmax = _mm512_set1_pd((double)(p->lo_n - 2));
    const __m512d vlo_base = _mm512_set1_pd((double)p->le_n), zero = _mm512_setzero_pd();
    const __m512d vle_first = _mm512_set1_pd(both[0]), vlo_last = _mm512_set1_pd(both[p->le_n + p->lo_n - 1]);
    const __m512d vle_slope = _mm512_set1_pd(p->le_uflow_slope), vlo_slope = _mm512_set1_pd(p->lo_oflow_slope);
    const __m512d vmul = _mm512_set1_pd(p->out_multiplier), vzp = _mm512_set1_pd(p->out_zero_point);
    const __m512d vhalf = _mm512_set1_pd(0.5), vqmin = _mm512_set1_pd(-128.0), vqmax = _mm512_set1_pd(127.0);
    const __m512d voscale = _mm512_set1_pd(p->out_scale);
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d u = _mm512_add_pd(_mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + i)), vscale), voffset);
        __mmask8 in_lo = _mm512_cmp_pd_mask(u, vlo_start, _CMP_GE_OQ);
        __m512d pos = _mm512_mul_pd(_mm512_sub_pd(u, _mm512_mask_blend_pd(in_lo, vle_start, vlo_start)), vinv);
        __m512d k = _mm512_roundscale_pd(pos, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        __m512d kmax = _mm512_mask_blend_pd(in_lo, vle_kmax, vlo_kmax);
        k = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(k, zero, _CMP_GE_OQ), zero, k);   /* nan -> 0 */
        k = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(k, kmax, _CMP_GT_OQ), k, kmax);
        __m256i at = _mm512_cvttpd_epi32(_mm512_add_pd(k, _mm512_maskz_mov_pd(in_lo, vlo_base)));
        __m512d t0 = _mm512_i32gather_pd(at, both, 8), t1 = _mm512_i32gather_pd(at, both + 1, 8);
        __m512d t = _mm512_add_pd(t0, _mm512_mul_pd(_mm512_sub_pd(t1, t0), _mm512_sub_pd(pos, k)));
        __m512d under = _mm512_add_pd(vle_first, _mm512_mul_pd(_mm512_sub_pd(u, vle_start), vle_slope));
        t = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(u, vle_start, _CMP_LT_OQ), t, under);
        __m512d over = _mm512_add_pd(vlo_last, _mm512_mul_pd(_mm512_sub_pd(u, vlo_end), vlo_slope));
        t = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(u, vlo_end, _CMP_GT_OQ), t, over);
        t = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(u, u, _CMP_UNORD_Q), t, u);
        __m512d q = _mm512_add_pd(_mm512_roundscale_pd(_mm512_add_pd(_mm512_mul_pd(t, vmul), vhalf),
                                                       _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), vzp);
        q = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(q, vqmin, _CMP_LT_OQ), q, vqmin);
        q = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(q, vqmax, _CMP_GT_OQ), q, vqmax);
        _mm256_storeu_ps(o + i, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_sub_pd(q, vzp), voscale)));
    }
    return i;
}
#else
#define RKL_LUT_X86 0
#endif

/* Branch-free, so the target clones vectorise it (gathers from the two tables laid end to end in
   p->both): u outside both tables still computes a clamped interpolation, then the select drops it.
   step is a power of two, so multiplying by its inverse is the division. */
RKL_EW_UNFUSED static void rkl_lut_row(const float *acc, float *out, ptrdiff_t rows, ptrdiff_t inner,
                                        const double *index_scale, ptrdiff_t channels, const rkl_lut *p) {
    const double *both = p->both;
    const double le_first = both[0], lo_last = both[p->le_n + p->lo_n - 1];
    const double le_last_k = (double)(p->le_n - 2), lo_last_k = (double)(p->lo_n - 2);
    const double inv_step = 1.0 / p->step, offset = p->index_offset;
    const double le_start = p->le_start, lo_start = p->lo_start, lo_end = p->lo_end;
    const double le_slope = p->le_uflow_slope, lo_slope = p->lo_oflow_slope;
    const double mul = p->out_multiplier, zp = p->out_zero_point, oscale = p->out_scale;
    const int lo_base = (int)p->le_n;
    for (ptrdiff_t row = 0; row < rows; row++) {
        const double scale = index_scale[row % channels];
        const float *a = acc + row * inner;
        float *o = out + row * inner;
        for (ptrdiff_t i = 0; i < inner; i++) {
            double u = (double)a[i] * scale + offset;
            int in_lo = u >= lo_start;
            double pos = (u - (in_lo ? lo_start : le_start)) * inv_step;
            double k = floor(pos);
            double kmax = in_lo ? lo_last_k : le_last_k;
            k = k >= 0.0 ? k : 0.0;  /* below the tables, and nan: entry 0 (dropped below) */
            k = k > kmax ? kmax : k;
            int at = (int)k + (in_lo ? lo_base : 0);
            double t = both[at] + (both[at + 1] - both[at]) * (pos - k);
            t = u < le_start ? le_first + (u - le_start) * le_slope : t;
            t = u > lo_end ? lo_last + (u - lo_end) * lo_slope : t;
            t = u == u ? t : u;  /* nan stays nan */
            double q = floor(t * mul + 0.5) + zp;
            q = q < -128.0 ? -128.0 : q;
            q = q > 127.0 ? 127.0 : q;
            o[i] = (float)((q - zp) * oscale);
        }
    }
}

void rkl_lut_rows(const float *acc, float *out, ptrdiff_t rows, ptrdiff_t inner, const double *index_scale,
                  ptrdiff_t channels, const rkl_lut *p) {
#if RKL_LUT_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        for (ptrdiff_t row = 0; row < rows; row++) {
            const float *a = acc + row * inner;
            float *o = out + row * inner;
            ptrdiff_t done = rkl_lut_row_avx512(a, o, inner, index_scale[row % channels], p);
            if (done < inner)  /* the tail: one row of inner - done values, its channel's scale */
                rkl_lut_row(a + done, o + done, 1, inner - done, index_scale + row % channels, 1, p);
        }
        return;
    }
#endif
    rkl_lut_row(acc, out, rows, inner, index_scale, channels, p);
}

/* Scalar: libm's expf does not vectorise here, and the rows this serves are short (a classifier's
   scores), where numpy's per-call cost is what this saves. */
void rkl_softmax_rows(const float *x, float *y, ptrdiff_t rows, ptrdiff_t n) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        const float *a = x + r * n;
        float *b = y + r * n;
        float m = a[0];
        for (ptrdiff_t i = 1; i < n && m == m; i++)
            if (a[i] > m || a[i] != a[i]) m = a[i];
        double s = 0.0;
        for (ptrdiff_t i = 0; i < n; i++) {
            float e = expf(a[i] - m);
            b[i] = e;
            s += e;
        }
        float total = (float)s;
        for (ptrdiff_t i = 0; i < n; i++) b[i] = b[i] / total;
    }
}

/* Unfused: the product is rounded to float32 after the subtraction, as numpy's two steps round. */
RKL_EW_UNFUSED void rkl_fake_quant(const float *x, float *y, ptrdiff_t outer, ptrdiff_t channels, ptrdiff_t inner,
                                   const float *step, const float *zp, float qmin, float qmax) {
    for (ptrdiff_t o = 0; o < outer; o++)
        for (ptrdiff_t c = 0; c < channels; c++) {
            const float s = step[c], z = zp[c];
            const float *a = x + (o * channels + c) * inner;
            float *b = y + (o * channels + c) * inner;
            for (ptrdiff_t i = 0; i < inner; i++) {
                float q = rintf(a[i] / s) + z;
                q = q < qmin ? qmin : q;
                q = q > qmax ? qmax : q;
                b[i] = (q - z) * s;
            }
        }
}

/* Unfused: each square is rounded to float32 before it is added, as the vendor's AVX loop rounds
   it.  The lane of value i is i % 8 wherever the pieces split the blocks; whole blocks inside a
   piece take the block loop, whose eight lanes are independent, so it vectorises without
   reordering a sum. */
RKL_EW_UNFUSED void rkl_mmse_pieces(const float *u, const float *const *pieces, ptrdiff_t npieces, ptrdiff_t len,
                                    double *out, ptrdiff_t rows) {
    const ptrdiff_t n = npieces * len, end = n - n % 8;  /* values [end, n) are the tail */
    for (ptrdiff_t r = 0; r < rows; r++) {
        float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, tail[8];
        ptrdiff_t i = 0;  /* index in the row */
        for (ptrdiff_t p = 0; p < npieces; p++) {
            const float *a = u + r * n + p * len, *b = pieces[p] + r * len;
            ptrdiff_t j = 0;
            for (; j < len && (i & 7) && i < end; j++, i++) {
                float d = a[j] - b[j];
                lane[i & 7] += d * d;
            }
            for (; j + 8 <= len && i + 8 <= end; j += 8, i += 8)
                for (int k = 0; k < 8; k++) {
                    float d = a[j + k] - b[j + k];
                    lane[k] += d * d;
                }
            for (; j < len; j++, i++) {
                float d = a[j] - b[j];
                if (i < end)
                    lane[i & 7] += d * d;
                else
                    tail[i - end] = d * d;
            }
        }
        double total = (double)(((lane[0] + lane[4]) + (lane[1] + lane[5]))
                                + ((lane[2] + lane[6]) + (lane[3] + lane[7])));
        for (ptrdiff_t k = 0; k < n - end; k++)
            total += (double)tail[k];
        out[r] = total / (double)n;
    }
}
