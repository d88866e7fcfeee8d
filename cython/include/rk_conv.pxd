# Cython declarations of the convolution kernels (cython/include/rk_conv.h).

from libc.stdint cimport int32_t

cdef extern from "rk_conv.h" nogil:
    long RK_WIN_CHUNK
    ctypedef struct rk_act:
        int kind
        float lo
        float hi
        float alpha
    int rk_isa_level()
    int rk_mr(int isa, int t)
    int rk_nr(int isa, int t)
    void rk_set_a_block_bytes(long bytes)
    void rk_im2col(const float *x, long C, long D, long H, long W, long cs,
                   long kd, long kh, long kw, long sd, long sh, long sw,
                   long dd, long dh, long dw, long pd, long ph, long pw,
                   long OD, long OH, long OW, float *cols, int accumulate_back)
    void rk_wino_in(int isa, const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf)
    void rk_wino_weights(const float *w, long MC, const double *G, int A, float *u)
    void rk_wino_split(int isa, const float *x, long C, long H, long W, long t, long pt, long pl,
                       long Hs, long Ws, float *S, long ss)
    void rk_wino2_in(int isa, const float *S, long ss, long C, long TH, long TW, float *V, long ldv, float *buf)
    void rk_wino2_out(int isa, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW,
                      const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res)
    void rk_wino_out(int isa, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW,
                     const float *bias, float *y, long ldc, float *buf, const rk_act *act, const float *res)
    void rk_gather_gemm_batch(int isa, long nb, const float *P, long pstride,
                              const int32_t *off, const int32_t *idx, long M, long K,
                              const float *Ap, long astride, float *Y, long ystride, long ldy,
                              float *Bp, long kcb, long ncb, long N, int direct_b)
    void rk_transpose(const float *src, long rows, long cols, long lds, float *dst, long ldd)
    void rk_phase_split(int isa, const float *x, long C, long D, long H, long W,
                        long sd, long sh, long sw, long pd, long ph, long pw,
                        long Ds, long Hs, long Ws, float *P)
    void rk_depthwise(int isa, const float *x, long C, long H, long W, const float *w, long M, long mult,
                      long kh, long kw, long sh, long sw, long dh, long dw,
                      long pt, long pl, long pb, long pr, long OH, long OW,
                      const float *bias, float *y, float *pad, const rk_act *act, const float *res)
    void rk_gather_gemm(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx,
                        long M, long K, const float *Ap, const float *bias,
                        float *Y, long ldy, float *Bp, long kcb, long ncb,
                        long n_begin, long n_end, long gw, long gow, const rk_act *act, const float *R,
                        const float *Bpre, int direct_b)
    long rk_bblock_stride(long kcb, long nc, int NR)
    void rk_pack_gather_b(int isa, int transposed, const float *P, const int32_t *off, const int32_t *idx,
                          long K, long kcb, long n0, long nc, long kb_begin, long kb_end, float *Bpre,
                          int direct_b)
    void rk_bias_act(int isa, float *y, long M, long N, long ldy, const float *bias, const rk_act *act,
                     const float *res, long ldr)
