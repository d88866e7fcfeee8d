# Cython declarations of the element-wise kernels (cython/include/rk_elementwise.h).

cdef extern from "rk_elementwise.h" nogil:
    void rkl_erf_from_exp(const float *x, float *w, Py_ssize_t n)
    void rkl_gelu_from_exp(const float *x, float *w, Py_ssize_t n)
