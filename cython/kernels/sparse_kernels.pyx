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

from rk_sparse cimport rks_csr_avx2, rks_csr_generic, rks_has_avx2

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
