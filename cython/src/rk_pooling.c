/* float32 passes of the pooling kernels (see rk_pooling.h and pool_kernels.pyx), built for each
 * SIMD level of the machine and picked by the caller's level. */
#include <string.h>
#include "rk_cpu.h"
#include "rk_pooling.h"

/* GCC if-converts the max selects into SIMD max instructions only without trapping-math; nothing
   here reads the floating-point exception flags.  a * b + c never appears, so no contraction can
   change a result. */
#if defined(__GNUC__) && !defined(__clang__)
#define RKP_OPT optimize("no-trapping-math")
#define RKP_BASE_ATTR __attribute__((RKP_OPT))
#else
#define RKP_OPT
#define RKP_BASE_ATTR
#endif

#define RKP_SUFFIX base
#define RKP_ATTR RKP_BASE_ATTR
#include "rk_pooling_body.h"
#if RK_X86
#define RKP_SUFFIX avx2
#define RKP_ATTR __attribute__((target("avx2,fma"), RKP_OPT))
#include "rk_pooling_body.h"
#define RKP_SUFFIX avx512
#define RKP_ATTR __attribute__((target("avx512f"), RKP_OPT))
#include "rk_pooling_body.h"
#define RKP_PICK(isa, f, ...) \
    ((isa) >= 2 ? f##_avx512(__VA_ARGS__) : (isa) == 1 ? f##_avx2(__VA_ARGS__) : f##_base(__VA_ARGS__))
#else
#define RKP_PICK(isa, f, ...) ((void)(isa), f##_base(__VA_ARGS__))
#endif

int rkp_cpu_level(void) { return rk_cpu_level(); }

void rkp_vert_max(int isa, float *d, const float *base, const ptrdiff_t *offs, int nr, ptrdiff_t n, int spec) {
    RKP_PICK(isa, rkp_vert_max, d, base, offs, nr, n, spec);
}

void rkp_vert_sum(int isa, float *d, const float *base, const ptrdiff_t *offs, int nr, ptrdiff_t n, int spec) {
    RKP_PICK(isa, rkp_vert_sum, d, base, offs, nr, n, spec);
}

void rkp_horiz_max(int isa, float *out, const float *t, ptrdiff_t OW, int kw, int sw, int dw, int spec) {
    RKP_PICK(isa, rkp_horiz_max, out, t, OW, kw, sw, dw, spec);
}

void rkp_horiz_avg(int isa, float *out, const float *t, ptrdiff_t OW, int kw, int sw, int dw, const float *inv,
                   int spec) {
    RKP_PICK(isa, rkp_horiz_avg, out, t, OW, kw, sw, dw, inv, spec);
}
