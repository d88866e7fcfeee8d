# Cython declarations of the layout conversions (cython/include/rk_layout.h).

from libc.stdint cimport uint8_t

cdef extern from "rk_layout.h" nogil:
    const int LK_VECTOR "lk_vector"
    void lk_wide_init() nogil
    int lk_set_wide(int on) nogil
    void lk_planar_to_blocked(const uint8_t* src, uint8_t* dst, Py_ssize_t N, Py_ssize_t C,
                              Py_ssize_t P, Py_ssize_t K, Py_ssize_t es) nogil
    void lk_blocked_to_planar(const uint8_t* src, uint8_t* dst, Py_ssize_t N, Py_ssize_t C,
                              Py_ssize_t P, Py_ssize_t K, Py_ssize_t es) nogil
    void lk_interleaved_to_blocked(const uint8_t* src, uint8_t* dst, Py_ssize_t N, Py_ssize_t C,
                                   Py_ssize_t P, Py_ssize_t K, Py_ssize_t es) nogil
    void lk_blocked_to_interleaved(const uint8_t* src, uint8_t* dst, Py_ssize_t N, Py_ssize_t C,
                                   Py_ssize_t P, Py_ssize_t K, Py_ssize_t es) nogil
    void lk_copy_rows(const uint8_t* src, uint8_t* dst, Py_ssize_t rows, Py_ssize_t src_row,
                      Py_ssize_t dst_row, Py_ssize_t copy) nogil
