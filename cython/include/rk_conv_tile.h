/* Shared by the micro-kernels of every ISA (cython/src/rk_conv.c, rk_conv_neon.h): the fused
 * activation on a tile of accumulator registers, written once over the ISA's vector type and
 * its set1 / max / min / leaky operations, and the B packing of the kernels without masked
 * loads (AVX2, NEON).  Needs <string.h> and RK_MIN. */
#ifndef RK_CONV_TILE_H
#define RK_CONV_TILE_H

/* act (non-NULL) on the accumulator tile ACC[R][V] (R x V registers), kind hoisted. */
#define RK_ACT_TILE(ACC, R, V, act, VEC, SET1, MAX, MIN, LEAKY)                                     \
    do {                                                                                          \
        if ((act)->kind == 1) {                                                                   \
            VEC lo_ = SET1((act)->lo), hi_ = SET1((act)->hi);                                     \
            _Pragma("GCC unroll 8")                                                               \
            for (int r_ = 0; r_ < (R); r_++)                                                      \
                for (int v_ = 0; v_ < (V); v_++) ACC[r_][v_] = MIN(hi_, MAX(lo_, ACC[r_][v_]));   \
        } else if ((act)->kind == 2) {                                                            \
            VEC al_ = SET1((act)->alpha);                                                         \
            _Pragma("GCC unroll 8")                                                               \
            for (int r_ = 0; r_ < (R); r_++)                                                      \
                for (int v_ = 0; v_ < (V); v_++) ACC[r_][v_] = LEAKY(ACC[r_][v_], al_);           \
        }                                                                                         \
    } while (0)

/* Body of a B packer for panels of NR (a constant) columns: the B block [k0, k0 + kc) x
   [n0, n0 + nc) of the gather GEMM into Bp[p][k][NR].  A full panel whose columns are one
   contiguous run of the source is copied row by row (a constant-size memcpy: vector moves),
   any other gathered column by column, zeros past nc.  Parameters: P, off, idx, k0, kc, n0,
   nc, Bp as in rk_gather_gemm. */
#define RK_PACKB_BODY(NR) {                                                                      \
    for (long p = 0; p * (NR) < nc; p++) {                                                        \
        long nb = n0 + p * (NR), w = RK_MIN((NR), n0 + nc - nb);                                  \
        float *dst = Bp + p * kc * (NR);                                                          \
        if (w == (NR) && idx[nb + (NR) - 1] - idx[nb] == (NR) - 1) {                              \
            const float *base = P + idx[nb];                                                      \
            for (long k = 0; k < kc; k++, dst += (NR)) memcpy(dst, base + off[k0 + k], (NR) * sizeof(float)); \
            continue;                                                                             \
        }                                                                                         \
        for (long k = 0; k < kc; k++, dst += (NR)) {                                              \
            const float *s = P + off[k0 + k];                                                     \
            long t = 0;                                                                           \
            for (; t < w; t++) dst[t] = s[idx[nb + t]];                                           \
            for (; t < (NR); t++) dst[t] = 0.0f;                                                  \
        }                                                                                         \
    }                                                                                             \
}

#endif
