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

/* Branch-free, so the target clones vectorise it (gathers from the two tables laid end to end in
   p->both): u outside both tables still computes a clamped interpolation, then the select drops it.
   step is a power of two, so multiplying by its inverse is the division. */
RKL_EW_UNFUSED void rkl_lut_rows(const float *acc, float *out, ptrdiff_t rows, ptrdiff_t inner,
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
