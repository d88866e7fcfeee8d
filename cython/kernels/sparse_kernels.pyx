# cython: language_level=3
"""Sparse-weight GEMM of the software backend (compiled, run without the GIL).

``csr_gemm``: ``Y[m, n] = sum_j vals[j] * X[cols[j], n]`` over the non-zeros ``j`` of row
``m``, for the columns ``n0 <= n < n1``: a compressed
sparse row (CSR) weight matrix times a dense activation matrix (for a convolution, the
im2col matrix).  Every output element is one fused multiply-add chain over its row's
non-zeros in index order, starting from 0 (blocked along K for cache, the chain continued
through Y), whichever code path (AVX2+FMA tiles of 64, 32 or
8 columns, scalar tail, generic C) computes it: the result does not depend on the column
range, the CPU or the thread split.
"""

from libc.stdint cimport int32_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <math.h>

    #if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    #define RKS_X86 1
    #include <immintrin.h>
    #else
    #define RKS_X86 0
    #endif

    #define RKS_ARGS const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M, \
                     const float *X, long xs, float *Y, long ys, long n0, long n1

    static void rks_csr_generic(RKS_ARGS) {
        for (long m = 0; m < M; m++) {
            float *y = Y + m * ys;
            const int32_t *b = blk + m * (nkb + 1);
            for (long n = n0; n < n1; n++) {
                float a = 0.0f;
                for (long j = b[0]; j < b[nkb]; j++)
                    a = fmaf(vals[j], X[(long)cols[j] * xs + n], a);
                y[n] = a;
            }
        }
    }

    #if RKS_X86
    /* Y[m, n] (+)= chain over the non-zeros of row m with column indices in K block kb:
       blk[m * (nkb + 1) + kb] .. blk[m * (nkb + 1) + kb + 1].  The first block starts the
       chain from 0, later blocks continue it from Y (a float32 store/load is exact), so the
       chain is the same as without blocking. */
    #define RKS_TILE(W)                                                                  \
        for (long kb = 0; kb < nkb; kb++) {                                              \
            for (long m = 0; m < M; m++) {                                               \
                const int32_t *b = blk + m * (nkb + 1) + kb;                             \
                float *y = Y + m * ys + n;                                               \
                if (kb > 0 && b[0] == b[1]) continue;                                    \
                __m256 a[W];                                                             \
                for (int t = 0; t < W; t++)                                              \
                    a[t] = kb == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 8 * t);   \
                for (long j = b[0]; j < b[1]; j++) {                                     \
                    const __m256 v = _mm256_broadcast_ss(vals + j);                      \
                    const float *x = X + (long)cols[j] * xs + n;                         \
                    for (int t = 0; t < W; t++)                                          \
                        a[t] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + 8 * t), a[t]);     \
                }                                                                        \
                for (int t = 0; t < W; t++) _mm256_storeu_ps(y + 8 * t, a[t]);           \
            }                                                                            \
        }

    __attribute__((target("avx2,fma")))
    static void rks_csr_avx2(RKS_ARGS) {
        long n = n0;
        /* column tiles outer, K blocks inside: the (K block) x 64 panel of X stays in L1
           across all rows; 8 independent accumulators hide the FMA latency */
        for (; n + 64 <= n1; n += 64) { RKS_TILE(8) }
        for (; n + 32 <= n1; n += 32) { RKS_TILE(4) }
        for (; n + 8 <= n1; n += 8) { RKS_TILE(1) }
        for (; n < n1; n++) {
            for (long m = 0; m < M; m++) {
                const int32_t *b = blk + m * (nkb + 1);
                float a = 0.0f;
                for (long j = b[0]; j < b[nkb]; j++)
                    a = fmaf(vals[j], X[(long)cols[j] * xs + n], a);
                Y[m * ys + n] = a;
            }
        }
    }

    static int rks_has_avx2(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    #else
    static void rks_csr_avx2(RKS_ARGS) { rks_csr_generic(vals, cols, blk, nkb, M, X, xs, Y, ys, n0, n1); }
    static int rks_has_avx2(void) { return 0; }
    #endif
    """
    void rks_csr_generic(const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M,
                         const float *X, long xs, float *Y, long ys, long n0, long n1) nogil
    void rks_csr_avx2(const float *vals, const int32_t *cols, const int32_t *blk, long nkb, long M,
                      const float *X, long xs, float *Y, long ys, long n0, long n1) nogil
    int rks_has_avx2() nogil

cdef int _AVX2 = rks_has_avx2()


def has_simd():
    """True when the AVX2+FMA tiles run on this CPU (else the generic C loop)."""
    return bool(_AVX2)


def csr_gemm(const float[::1] vals, const int32_t[::1] cols, const int32_t[:, ::1] blk,
             const float[:, ::1] X, float[:, ::1] Y, Py_ssize_t n0=0, Py_ssize_t n1=-1):
    """``Y[:, n0:n1] = W @ X[:, n0:n1]`` in place for a CSR matrix ``W`` (see the module
    docstring).  ``vals``/``cols``: the non-zeros and their column indices (ascending within
    a row); ``blk``: ``(M, nkb + 1)`` int32, row ``m``'s non-zeros with columns in K block
    ``b`` are ``blk[m, b] <= j < blk[m, b + 1]`` (``blk[:, 0]`` and ``blk[:, -1]`` are the
    CSR row offsets; one block, ``nkb = 1``, is plain CSR).  ``X``: ``(K, N)`` float32,
    ``Y``: ``(M, N)`` float32, rows contiguous (row-strided views allowed).  Raises
    ValueError on mismatched shapes or indices (nothing written)."""
    cdef Py_ssize_t M = Y.shape[0], K = X.shape[0], N = X.shape[1]
    cdef Py_ssize_t nkb = blk.shape[1] - 1, nnz = vals.shape[0], j, m, b
    if n1 < 0:
        n1 = N
    if blk.shape[0] != M or nkb < 1 or Y.shape[1] != N:
        raise ValueError(f"csr_gemm: blk of shape ({blk.shape[0]}, {blk.shape[1]}) for {M} rows (needs >= 2 "
                         f"columns), Y {Y.shape[1]} vs X {N} columns")
    if not 0 <= n0 <= n1 <= N:
        raise ValueError(f"csr_gemm: column range [{n0}, {n1}) outside [0, {N}]")
    if cols.shape[0] != nnz or blk[0, 0] != 0 or blk[M - 1, nkb] != nnz if M else nnz != 0:
        raise ValueError("csr_gemm: blk does not cover vals/cols")
    for m in range(M):
        if m and blk[m, 0] != blk[m - 1, nkb]:
            raise ValueError("csr_gemm: blk rows are not consecutive")
        for b in range(nkb):
            if blk[m, b + 1] < blk[m, b]:
                raise ValueError("csr_gemm: blk offsets decrease")
    for j in range(nnz):
        if cols[j] < 0 or cols[j] >= K:
            raise ValueError(f"csr_gemm: column index {cols[j]} outside [0, {K})")
    if M == 0 or n0 == n1:
        return
    if nnz == 0:  # no non-zero at all (also K == 0): every output is 0
        Y[:, n0:n1] = 0
        return
    cdef const float *vp = &vals[0]
    cdef const int32_t *cp = &cols[0]
    with nogil:
        if _AVX2:
            rks_csr_avx2(vp, cp, &blk[0, 0], nkb, M, &X[0, 0], X.strides[0] // 4, &Y[0, 0], Y.strides[0] // 4,
                         n0, n1)
        else:
            rks_csr_generic(vp, cp, &blk[0, 0], nkb, M, &X[0, 0], X.strides[0] // 4, &Y[0, 0], Y.strides[0] // 4,
                            n0, n1)
