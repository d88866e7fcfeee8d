# Cython declarations of the float32 pooling passes (cython/include/rk_pooling.h).

cdef extern from "rk_pooling.h" nogil:
    int rkp_cpu_level()
    void rkp_vert_max(int isa, float *d, const float *base, const Py_ssize_t *offs, int nr, Py_ssize_t n,
                      int spec)
    void rkp_vert_sum(int isa, float *d, const float *base, const Py_ssize_t *offs, int nr, Py_ssize_t n,
                      int spec)
    void rkp_horiz_max(int isa, float *out, const float *t, Py_ssize_t OW, int kw, int sw, int dw, int spec)
    void rkp_horiz_avg(int isa, float *out, const float *t, Py_ssize_t OW, int kw, int sw, int dw,
                       const float *inv, int spec)
    int rkp_narrow_fits(int isa, Py_ssize_t W, Py_ssize_t OW, int kw, int sw, int dw, int pw)
    void rkp_narrow_pool(int isa, int is_max, float *y, const float *x, Py_ssize_t planes, Py_ssize_t in_stride,
                         Py_ssize_t W, Py_ssize_t OW, Py_ssize_t nq, const int *nrows, const Py_ssize_t *offs,
                         int per, int kw, int sw, int pw, float ident, const float *inv)
