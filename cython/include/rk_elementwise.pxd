# Cython declarations of the element-wise kernels (cython/include/rk_elementwise.h).

cdef extern from "rk_elementwise.h" nogil:
    void rkl_erf_from_exp(const float *x, float *w, Py_ssize_t n)
    void rkl_gelu_from_exp(const float *x, float *w, Py_ssize_t n)
    void rkl_softmax_rows(const float *x, float *y, Py_ssize_t rows, Py_ssize_t n)
    ctypedef struct rkl_lut:
        const double *both
        Py_ssize_t le_n, lo_n
        double index_offset, le_start, le_end, lo_start, lo_end, step
        double le_uflow_slope, lo_oflow_slope, out_multiplier, out_zero_point, out_scale
    void rkl_lut_rows(const float *acc, float *out, Py_ssize_t rows, Py_ssize_t inner, const double *index_scale,
                      Py_ssize_t channels, const rkl_lut *p)
    void rkl_fake_quant(const float *x, float *y, Py_ssize_t outer, Py_ssize_t channels, Py_ssize_t inner,
                        const float *step, const float *zp, float qmin, float qmax)
    void rkl_mmse_pieces(const float *u, const float *const *pieces, Py_ssize_t npieces, Py_ssize_t len,
                         double *out, Py_ssize_t rows)
