# Cython declarations of the sparse GEMM kernels (cython/include/rk_sparse.h).

from libc.stdint cimport int32_t

cdef extern from "rk_sparse.h" nogil:
    void rks_csr_generic(const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M,
                         const float *X, long xs, float *Y, long ys, long n0, long n1)
    void rks_csr_avx2(const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M,
                      const float *X, long xs, float *Y, long ys, long n0, long n1)
    int rks_has_avx2()
