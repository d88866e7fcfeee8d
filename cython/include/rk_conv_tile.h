/* Shared by the micro-kernels of every ISA (cython/src/rk_conv.c, rk_conv_neon.h): the fused
 * activation on a tile of accumulator registers, written once over the ISA's vector type and
 * its set1 / max / min / leaky operations. */
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

#endif
