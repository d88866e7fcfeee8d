# Cython declarations of the executor's vector passes (cython/include/rk_executor.h).

cdef extern from "rk_executor.h" nogil:
    int rke_vector_ok()
    long rke_round_fp16_avx2(const float *s, float *d, long n)
    long rke_fake_quant_avx2(const float *s, float *d, long n, float scale, float zp, float qmin, float qmax)
    long rke_codes_avx2(const float *s, float *d, long n, float scale)
    long rke_requant_avx2(const float *s, float *d, long n, double mul, float zp, float qmin, float qmax,
                          float scale)
    long rke_add_requant_avx2(const float *acc, const float *res, float *d, long n, float step, float scale,
                              float zp, float qmin, float qmax, int relu)
