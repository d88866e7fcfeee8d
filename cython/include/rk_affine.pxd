# Cython declarations of the per-channel affine kernel (cython/include/rk_affine.h).

cdef extern from "rk_affine.h" nogil:
    void rka_channel_affine(const float *x, float *y, long r0, long r1, long C, long inner,
                            const float *scale, const float *shift, int kind, float lo, float hi,
                            float alpha)
