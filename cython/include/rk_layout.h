/* Tensor layout conversions as byte copies (cython/src/rk_layout.c), used by
 * rknnlite._native.layout_kernels (see its module doc for the algorithms).
 *
 * Geometry: N batches, C channels, P = H * W pixels, K = C2 channel lanes per NC1HWC2 block
 * (C1 = ceil(C / K) blocks), es bytes per element.  Buffers are flat C-contiguous bytes of the
 * full size of their layout; lanes of the last block beyond C are written as zeros on the way
 * into NC1HWC2 and never read on the way out. */
#ifndef RK_LAYOUT_H
#define RK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "rk_api.h"

/* 1 when the 16-byte vector kernels are compiled in (GCC or Clang), else 0. */
RK_API extern const int lk_vector;
/* Checks once whether the 64-byte (AVX-512 VBMI) kernels can run and builds their tables. */
RK_API void lk_wide_init(void);
/* Uses the 64-byte kernels when on and possible (0 forces the 16-byte ones, for tests);
 * returns the state in force. */
RK_API int lk_set_wide(int on);
/* NCHW (N, C, P) <-> NC1HWC2 (N, C1, P, K). */
RK_API void lk_planar_to_blocked(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                 ptrdiff_t P, ptrdiff_t K, ptrdiff_t es);
RK_API void lk_blocked_to_planar(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                 ptrdiff_t P, ptrdiff_t K, ptrdiff_t es);
/* NHWC (N, P, C) <-> NC1HWC2 (N, C1, P, K). */
RK_API void lk_interleaved_to_blocked(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                      ptrdiff_t P, ptrdiff_t K, ptrdiff_t es);
RK_API void lk_blocked_to_interleaved(const uint8_t* src, uint8_t* dst, ptrdiff_t N, ptrdiff_t C,
                                      ptrdiff_t P, ptrdiff_t K, ptrdiff_t es);
/* `rows` rows: copy `copy` bytes from each source row (stride src_row) to each destination
 * row (stride dst_row) and zero the rest of the destination row. */
RK_API void lk_copy_rows(const uint8_t* src, uint8_t* dst, ptrdiff_t rows, ptrdiff_t src_row,
                         ptrdiff_t dst_row, ptrdiff_t copy);

#endif
