# Cython declarations of the matrix-vector product (cython/include/rk_gemv.h).

cdef extern from "rk_gemv.h" nogil:
    void rk_gemv_rows(int isa, const float *x, const float *w, long ldw, long K, float *y, long j0, long j1)
