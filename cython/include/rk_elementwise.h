/* Element-wise float32 loops fed with numpy's exp (cython/src/rk_elementwise.c), used by
 * rknnlite._native.elementwise_kernels. */
#ifndef RK_ELEMENTWISE_H
#define RK_ELEMENTWISE_H

#include <stddef.h>
#include "rk_api.h"

/* w[i] = erf(x[i]) for i < n, float32; on entry w[i] holds the exp term elementwise_kernels.pyx
 * computed with numpy for x[i] (see erf there). */
RK_API void rkl_erf_from_exp(const float *x, float *w, ptrdiff_t n);
/* w[i] = gelu(x[i]) (erf form) for i < n, float32; on entry w[i] holds the exp term
 * elementwise_kernels.pyx computed with numpy for x[i] (see gelu there). */
RK_API void rkl_gelu_from_exp(const float *x, float *w, ptrdiff_t n);

#endif
