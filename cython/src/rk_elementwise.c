/* erf and exact gelu over float32 arrays, from exp terms numpy computed (see rk_elementwise.h). */
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
