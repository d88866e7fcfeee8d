# cython: language_level=3
"""Convolution hot loops of the software backend (compiled, run without the GIL).

* ``gather_gemm``: ``Y[m, n] = bias[m] + sum_k A[m, k] * P[off[k] + idx[n]]`` with
  ``A`` pre-packed by ``pack_weights``: a GEMM whose right-hand matrix is gathered on
  the fly from an image (``off``/``idx`` tables describe a convolution, see
  ``phase_split``), packed block by block into a cache-sized scratch buffer, with
  AVX-512 / AVX2+FMA (x86-64) or NEON (aarch64) micro-kernels chosen at run time.  ``gemm_isa() == 0`` means
  no such kernel on this CPU (callers then use im2col + BLAS).
* ``phase_split``: zero-padded, stride-phase-split copy of an image, which turns
  every strided/dilated/padded convolution into offset lookups for ``gather_gemm``.
* ``im2col`` / ``col2im``: unfold / fold-and-accumulate one image (up to 3 spatial
  dims) for convolution and transposed convolution via BLAS.
* ``depthwise``: direct depthwise (grouped, one input channel per group) convolution.
* ``winograd_weights`` / ``winograd_input`` / ``winograd_output``: Winograd F(4x4, 3x3)
  and F(2x2, 3x3) transforms around ``gather_gemm_batch``.
* Fused activations (``act`` arguments, see ``ACT_CLIP`` / ``ACT_LEAKY``): Relu, Clip and
  LeakyRelu applied by the output stages above while the values are in registers or in
  cache; ``bias_act`` does the same after a BLAS product.
* Fused residual adds (``residual`` arguments): an array of the output's shape added by
  the same output stages after the bias and before the activation.
"""

import numpy as np

cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, intptr_t
from libc.string cimport memset

from rk_pool cimport rk_range_fn

include "pool_handle.pxi"

cnp.import_array()

from rk_conv cimport (RK_WIN_CHUNK, rk_act, rk_bblock_stride, rk_bias_act, rk_depthwise, rk_gather_gemm,
                     rk_gather_gemm_batch, rk_im2col, rk_isa_level, rk_mr, rk_nr, rk_pack_gather_b,
                     rk_phase_split, rk_set_a_block_bytes, rk_transpose, rk_wino2_in, rk_wino2_out, rk_wino_in,
                     rk_wino_out, rk_wino_split, rk_wino_weights)
from rk_gemv cimport rk_gemv_rows

cdef int _ISA = rk_isa_level()

#: activation kinds of the ``act`` arguments: ``(ACT_CLIP, lo, hi)`` clips to [lo, hi]
#: (Relu is ``(ACT_CLIP, 0.0, inf)``), ``(ACT_LEAKY, alpha)`` is LeakyRelu.
ACT_CLIP = 1
ACT_LEAKY = 2


cdef int _act_from(object act, rk_act *a) except -1:
    """Fill ``a`` from an ``act`` argument (None, ``(1, lo, hi)`` or ``(2, alpha)``); returns its kind."""
    a.kind = 0
    a.lo = 0.0
    a.hi = 0.0
    a.alpha = 0.0
    if act is None:
        return 0
    kind = int(act[0])
    if kind == ACT_CLIP and len(act) == 3:
        a.lo = <float>float(act[1])
        a.hi = <float>float(act[2])
    elif kind == ACT_LEAKY and len(act) == 2:
        a.alpha = <float>float(act[1])
    else:
        raise ValueError(f"bad activation {act!r}: expected None, (1, lo, hi) or (2, alpha)")
    a.kind = kind
    return kind


cdef const float *_residual_ptr(object residual, tuple shape, Py_ssize_t ld, str who) except? NULL:
    """Address of ``residual`` (None: NULL), checked to have ``shape`` with contiguous rows
    ``ld`` floats apart (the layout of the output it is added to)."""
    cdef const float[:, :] r2
    cdef const float[:, :, :] r3
    if residual is None:
        return NULL
    if len(shape) == 2:
        r2 = residual
        if (r2.shape[0], r2.shape[1]) != shape or (r2.shape[1] > 1 and r2.strides[1] != 4) \
                or (r2.shape[0] > 1 and r2.strides[0] != 4 * ld):
            raise ValueError(f"{who}: residual must match the output's shape and layout")
        return &r2[0, 0]
    r3 = residual
    if (r3.shape[0], r3.shape[1], r3.shape[2]) != shape or not residual.flags.c_contiguous:
        raise ValueError(f"{who}: residual must be C-contiguous with the output's shape")
    return &r3[0, 0, 0]


def activation_numpy(y, act):
    """Apply an ``act`` argument (see ``ACT_CLIP`` / ``ACT_LEAKY``) to the float32 array ``y``
    in place with numpy, with the same results as the compiled output stages."""
    cdef rk_act a
    if _act_from(act, &a) == ACT_CLIP:
        np.minimum(np.float32(a.hi), np.maximum(np.float32(a.lo), y, out=y), out=y)
    elif a.kind == ACT_LEAKY:
        neg = y < 0
        np.multiply(y, np.float32(a.alpha), out=y, where=neg)


def gemm_isa():
    """Micro-kernel level of this CPU: 2 = AVX-512F, 1 = AVX2+FMA (x86-64) or NEON (aarch64),
    0 = none (use BLAS)."""
    return _ISA


def limit_isa(int level):
    """Use micro-kernels up to ``level`` (0 none, 1 AVX2+FMA or NEON, 2 AVX-512) -- never above what
    the CPU has; returns the level now in use.  For tests of the narrower code paths:
    weights packed before the change must be repacked (``panel_shape`` changes)."""
    global _ISA
    _ISA = min(max(level, 0), rk_isa_level())
    return _ISA


def set_a_block_bytes(long nbytes):
    """Above how many bytes a K block of the weights (M x kc floats) makes the gather GEMM
    sweep weight panel by weight panel rather than B panel by B panel (half the host's L1d:
    ``Blocking.a_block_bytes``).  Process-wide; set once, before any GEMM runs (the conv op
    does it on import).  Changes speed only, never a value."""
    if nbytes <= 0:
        raise ValueError(f"set_a_block_bytes: {nbytes} is not a positive number of bytes")
    rk_set_a_block_bytes(nbytes)


def panel_shape(transposed=False):
    """``(MR, NR)``: rows per packed weight panel and columns per packed B panel of the
    normal (vectors along n) or transposed (vectors along m, AVX-512 only) tiles."""
    t = 1 if (transposed and _ISA >= 2) else 0
    return rk_mr(_ISA, t), rk_nr(_ISA, t)


def pack_weights(const float[:, ::1] a, transposed=False):
    """Pack ``a`` (M, K) float32 into micro-kernel panels: a new array (ceil(M/MR), K, MR),
    panel ``p`` row ``k`` holding ``a[p*MR:(p+1)*MR, k]`` (zero past M), MR from
    ``panel_shape(transposed)``.  Copies."""
    cdef Py_ssize_t M = a.shape[0], K = a.shape[1]
    cdef int MR = panel_shape(transposed)[0]
    cdef Py_ssize_t npanel = (M + MR - 1) // MR
    out = np.zeros((npanel * MR, K), np.float32)
    out[:M] = a
    return np.ascontiguousarray(out.reshape(npanel, MR, K).transpose(0, 2, 1))


def _aligned_ptr(float[::1] buf, Py_ssize_t need):
    """Address of the first 64-byte aligned float of ``buf`` with ``need`` floats after it."""
    cdef intptr_t p = <intptr_t>&buf[0]
    cdef intptr_t q = (p + 63) & ~(<intptr_t>63)
    if (q - p) // 4 + need > buf.shape[0]:
        raise ValueError("scratch buffer too small")
    return q


def gather_gemm(const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx,
                a_packed, Py_ssize_t M, bias, float[:, :] y,
                float[::1] scratch, Py_ssize_t kcb, Py_ssize_t ncb,
                Py_ssize_t n_begin=0, Py_ssize_t n_end=-1, bint transposed=False, grid=None, act=None,
                Py_ssize_t pstride=0, residual=None, prepacked=None, bint direct_b=True):
    """``y[m, n] = act(bias[m] + sum_k A[m, k] * P[off[k] + idx[n]] + residual[m, n])`` for n in
    [n_begin, n_end).

    ``a_packed``: ``pack_weights(A, transposed)`` of A (M, K); ``off`` (K,), ``idx`` (N,)
    int32 flat indices into ``P`` (every ``off[k] + idx[n]`` must lie inside ``P``);
    ``bias``: (M,) float32 or None; ``y``: (M, N) float32 rows (any row stride), written
    in place -- with ``transposed`` it is Y^T, (N, M), instead; ``scratch``: float32, at
    least ``kcb * ncb + 16`` floats (B blocks of ``kcb`` x ``ncb``, ``ncb`` a multiple
    of NR).  ``grid=(gw, gow)`` (AVX-512, normal tiles): the columns n are positions on
    a grid of rows of ``gw`` of which the first ``gow`` are real; ``y`` is then
    (M, N // gw * gow) and receives only the real ones.  ``act``: None or a fused
    activation (``(ACT_CLIP, lo, hi)``, ``(ACT_LEAKY, alpha)``) applied to the tiles in
    registers before they are stored.  ``residual``: None or a float32 array of ``y``'s shape
    and row stride (normal tiles only), added in registers on the last K block before
    the activation (a fused Add; same float32 sums as the separate Add).

    Grouped convolution in one call: ``a_packed`` of shape (G, panels, K, MR) holds G
    packed weight matrices of M rows each; group g reads ``P[g * pstride + off[k] + idx[n]]``
    and writes rows ``[g*M, (g+1)*M)`` of ``y`` (G*M rows; columns of Y^T when
    ``transposed``), with ``bias`` of G*M values.

    ``prepacked``: None, or a float32 buffer holding the B blocks of columns
    ``[n_begin, n_end)`` packed by :func:`pack_gather_b` with the same ``P``, ``off``,
    ``idx``, ``kcb`` and ``transposed`` (one group, ``n_end - n_begin <= ncb``): ``B`` is
    then read from it instead of being packed into ``scratch``, with the same values, so
    calls on disjoint row ranges of the weights can share one packing (it must have been
    packed with the same ``direct_b``).

    ``direct_b``: the normal AVX-512 tiles read a B panel of 32 contiguous columns straight
    from ``P`` instead of packing it (same values; faster while the weights are few, see
    ``Blocking.direct_b_bytes``).  Releases the GIL.
    """
    cdef _Gemm g
    if _gemm_setup(&g, P, off, idx, a_packed, M, bias, y, kcb, ncb, n_begin, n_end, transposed, grid, act,
                   pstride, residual, prepacked, direct_b) == 0:
        return
    cdef float *bp = <float *><intptr_t>_aligned_ptr(scratch, kcb * ncb)
    with nogil:
        _gemm_span(&g, bp, 0, g.panels, g.n_begin, g.n_end)


cdef int _tile_kind(bint transposed, str who) except -1:
    """1 for the transposed tiles, 0 for the normal ones; raises where this CPU has neither
    micro-kernel, or transposed tiles are asked for without AVX-512."""
    if _ISA == 0:
        raise RuntimeError(f"{who}: no micro-kernel for this CPU")
    if transposed and _ISA < 2:
        raise ValueError(f"{who}: transposed tiles need AVX-512")
    return 1 if transposed else 0


ctypedef struct _Gemm:
    # one gather GEMM, checked by _gemm_setup (see gather_gemm)
    int t, mr, has_act, direct_b
    const float *P
    const int32_t *off
    const int32_t *idx
    long M, K, G, N, panels, pstride, astride, ldy, kcb, ncb, gw, gow, n_begin, n_end
    const float *a
    const float *bias
    float *y
    const float *res
    const float *pre
    rk_act act


cdef int _gemm_setup(_Gemm *g, const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx,
                     a_packed, Py_ssize_t M, bias, float[:, :] y, Py_ssize_t kcb, Py_ssize_t ncb,
                     Py_ssize_t n_begin, Py_ssize_t n_end, bint transposed, grid, act, Py_ssize_t pstride,
                     residual, prepacked, bint direct_b) except -1:
    """Check gather_gemm's arguments and fill ``g``; 0 when there is nothing to compute."""
    cdef const float[:, :, :, ::1] a4 = a_packed if a_packed.ndim == 4 else a_packed[None]
    cdef Py_ssize_t G = a4.shape[0], K = off.shape[0], N = idx.shape[0]
    cdef int t = 1 if (transposed and _ISA >= 2) else 0
    cdef long gw = 0, gow = 0
    cdef Py_ssize_t ny = N
    if grid is not None:
        gw, gow = grid
        if _ISA < 2 or t or gw <= 0 or gow <= 0 or gow > gw or N % gw:
            raise ValueError("gather_gemm: grid output needs AVX-512 normal tiles and N a multiple of gw")
        ny = N // gw * gow
    cdef int MR = rk_mr(_ISA, t), NR = rk_nr(_ISA, t)
    cdef const float[::1] bview
    g.bias = NULL
    g.has_act = _act_from(act, &g.act) != 0
    _tile_kind(transposed, "gather_gemm")
    if n_end < 0:
        n_end = N
    if a4.shape[1] * MR < M or a4.shape[2] != K or a4.shape[3] != MR or G < 1 or (G > 1 and pstride < 0):
        raise ValueError("gather_gemm: packed weights do not match")
    if (y.shape[0], y.shape[1]) != ((N, G * M) if t else (G * M, ny)) or ncb % NR != 0 or ncb <= 0 \
            or n_begin < 0 or n_end > N:
        raise ValueError("gather_gemm: bad output or block shape")
    if bias is not None:
        bview = bias
        if bview.shape[0] != G * M:
            raise ValueError("gather_gemm: bias length")
        g.bias = &bview[0]
    if M == 0 or N == 0 or n_end <= n_begin:
        return 0
    if K == 0:
        raise ValueError("gather_gemm: K == 0")
    if y.strides[1] != 4 or y.strides[0] % 4:
        raise ValueError("gather_gemm: rows of y must be contiguous float32")
    g.pre = NULL
    if prepacked is not None:
        if G != 1 or n_end - n_begin > ncb:
            raise ValueError(f"gather_gemm: prepacked B needs one group and one column block (n_end - n_begin "
                             f"<= ncb), got {G} groups and {n_end - n_begin} columns for ncb={ncb}")
        g.pre = <const float *><intptr_t>_aligned_ptr(prepacked, prepacked_size(K, kcb, n_end - n_begin, transposed))
    g.ldy = y.strides[0] // 4
    g.res = NULL
    if residual is not None:
        if t:
            raise ValueError("gather_gemm: no residual with transposed tiles")
        g.res = _residual_ptr(residual, (y.shape[0], y.shape[1]), g.ldy, "gather_gemm")
    g.t, g.mr, g.direct_b = t, MR, direct_b
    g.P, g.off, g.idx = &P[0], &off[0], &idx[0]
    g.M, g.K, g.G, g.N, g.panels = M, K, G, N, (M + MR - 1) // MR
    g.pstride, g.astride = pstride, a4.shape[1] * a4.shape[2] * a4.shape[3]
    g.kcb, g.ncb, g.gw, g.gow, g.n_begin, g.n_end = kcb, ncb, gw, gow, n_begin, n_end
    g.a = &a4[0, 0, 0, 0]
    g.y = &y[0, 0]
    return 1


cdef void _gemm_span(const _Gemm *g, float *bp, long p0, long p1, long n0, long n1) noexcept nogil:
    """Rows of weight panels ``[p0, p1)`` (of every group) and columns ``[n0, n1)`` of ``g``,
    each tile exactly as the whole GEMM computes it (``bp``: this thread's B block)."""
    cdef long m0 = p0 * g.mr, m1 = min(g.M, p1 * g.mr), gi, r
    cdef const rk_act *ap = &g.act if g.has_act else NULL
    for gi in range(g.G):
        r = gi * g.M + m0
        rk_gather_gemm(_ISA, g.t, g.P + gi * g.pstride, g.off, g.idx, m1 - m0, g.K,
                       g.a + gi * g.astride + p0 * g.K * g.mr, g.bias + r if g.bias != NULL else NULL,
                       g.y + (r if g.t else r * g.ldy), g.ldy, bp, g.kcb, g.ncb, n0, n1, g.gw, g.gow, ap,
                       g.res + r * g.ldy if g.res != NULL else NULL, g.pre, g.direct_b)


ctypedef struct _GemmItems:
    # a gather GEMM cut into (row part, column block) work items (see gather_gemm_items)
    _Gemm g
    float *scratch        # 64-byte aligned, one B block per thread slot
    long sstride
    long nblocks
    long parts
    const int64_t *rows   # panel ranges of the row parts: (begin, end) pairs
    float *fy             # finish: Y from the Y^T tiles, per row part (NULL: none)
    const float *fres
    int fhas_act
    rk_act fact


cdef long _round16(long n) noexcept nogil:
    return (n + 15) // 16 * 16


cdef int _gemm_items(void *ctx, int64_t j0, int64_t j1, int slot) noexcept nogil:
    cdef _GemmItems *it = <_GemmItems *>ctx
    cdef const _Gemm *g = &it.g
    cdef float *bp = it.scratch + slot * it.sstride
    cdef int64_t j, part, b, p0, p1
    cdef long m0, m1, n0, n1
    for j in range(j0, j1):
        part = j // it.nblocks  # part-major: a thread's range keeps to few weight rows
        b = j % it.nblocks
        n0 = b * g.ncb
        n1 = min(g.N, n0 + g.ncb)
        p0, p1 = it.rows[2 * part], it.rows[2 * part + 1]
        _gemm_span(g, bp, p0, p1, n0, n1)
        if it.fy != NULL:
            m0, m1 = p0 * g.mr, min(g.M, p1 * g.mr)
            rk_transpose(g.y + m0, g.N, m1 - m0, g.ldy, it.fy + m0 * g.N, g.N)
            if it.fres != NULL:
                rk_bias_act(_ISA, it.fy + m0 * g.N, m1 - m0, g.N, g.N, NULL, &it.fact if it.fhas_act else NULL,
                            it.fres + m0 * g.N, g.N)
    return 0


cdef int _run_items(rk_pool *pool, rk_range_fn fn, void *ctx, int64_t n) noexcept nogil:
    """``fn`` over work items ``[0, n)``, on the pool's threads (one item per range piece)
    or, without a pool, on the caller."""
    if pool == NULL:
        return fn(ctx, 0, n, 0)
    return _POOL_API.run(pool, fn, ctx, n, 1)


def gather_gemm_items(pool, const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx,
                      a_packed, Py_ssize_t M, bias, float[:, :] y, float[::1] scratch, Py_ssize_t kcb,
                      Py_ssize_t ncb, row_parts=None, bint transposed=False, grid=None,
                      act=None, Py_ssize_t pstride=0, residual=None, prepacked=None, finish=None,
                      bint direct_b=True):
    """:func:`gather_gemm` over all columns, cut into work items run on the threads of
    ``pool`` (a ``WorkerPool.handle`` capsule; None: the caller alone) without the GIL.

    Item ``j`` is (row part ``j // nblocks``, column block ``j % nblocks``) with column
    blocks of ``ncb`` columns: every output value is the one the uncut GEMM computes.  ``row_parts``: None (one part, every
    row) or ``[(panel_begin, panel_end), ...]`` ranges of weight panels (one group).
    ``scratch``: float32, ``threads * (kcb * ncb + 16) + 16`` floats at least (one B
    block per thread).  ``finish=(y, residual, act)`` (transposed tiles, row parts and
    one column block only): after an item's rows are computed, they are transposed
    from ``y`` (Y^T) into ``finish``'s ``y`` (M, N), adding ``residual`` (or None) and
    then applying ``act`` when there is a residual, while they are in cache.  ``direct_b``
    as in :func:`gather_gemm`."""
    cdef _GemmItems it
    if _gemm_setup(&it.g, P, off, idx, a_packed, M, bias, y, kcb, ncb, 0, -1, transposed, grid, act, pstride,
                   residual, prepacked, direct_b) == 0:
        return
    cdef rk_pool *pool_p = _pool_from(pool)
    cdef int threads = _POOL_API.threads(pool_p) if pool_p != NULL else 1
    it.nblocks = (it.g.N + ncb - 1) // ncb
    if it.g.pre != NULL and it.nblocks != 1:
        raise ValueError("gather_gemm_items: prepacked B needs one column block")
    cdef Py_ssize_t k
    cdef const int64_t[:, ::1] rv
    cdef int64_t whole[2]
    if row_parts is None:
        it.parts = 1
        whole[0], whole[1] = 0, it.g.panels
        it.rows = whole
    else:
        rv = parts_array = np.asarray(row_parts, dtype=np.int64).reshape(-1, 2)
        it.parts = rv.shape[0]
        if it.g.G != 1 or it.parts == 0:
            raise ValueError(f"gather_gemm_items: row parts of one group expected, got {it.parts} parts of "
                             f"{it.g.G} groups")
        for k in range(it.parts):
            if not 0 <= rv[k, 0] < rv[k, 1] <= it.g.panels:
                raise ValueError(f"gather_gemm_items: row part {tuple(parts_array[k])} outside panels "
                                 f"[0, {it.g.panels})")
        it.rows = &rv[0, 0]
    it.sstride = _round16(kcb * ncb)
    it.scratch = <float *><intptr_t>_aligned_ptr(scratch, threads * it.sstride)
    cdef float[:, ::1] fy
    it.fy, it.fres, it.fhas_act = NULL, NULL, 0
    if finish is not None:
        if not it.g.t or row_parts is None or it.nblocks != 1:
            raise ValueError("gather_gemm_items: finish needs transposed tiles, row parts and one column block")
        fy = finish[0]
        if fy.shape[0] != it.g.M or fy.shape[1] != it.g.N or (it.g.M > 1 and fy.strides[0] != 4 * it.g.N):
            raise ValueError("gather_gemm_items: finish output must be (M, N), C-contiguous")
        it.fy = &fy[0, 0]
        it.fres = _residual_ptr(finish[1], (fy.shape[0], fy.shape[1]), it.g.N, "gather_gemm_items")
        it.fhas_act = _act_from(finish[2], &it.fact) != 0 if it.fres != NULL else 0
    with nogil:
        _run_items(pool_p, _gemm_items, &it, it.parts * it.nblocks)


def prepacked_size(Py_ssize_t K, Py_ssize_t kcb, Py_ssize_t n, bint transposed=False):
    """Floats :func:`pack_gather_b` writes for a K x ``n`` gather GEMM in K blocks of
    ``kcb`` (its buffer needs 16 more, for alignment)."""
    if K <= 0 or kcb <= 0 or n < 0:
        raise ValueError(f"prepacked_size: K ({K}) and kcb ({kcb}) must be > 0 and n ({n}) >= 0")
    cdef int t = 1 if (transposed and _ISA >= 2) else 0
    return ((K + kcb - 1) // kcb) * rk_bblock_stride(kcb, n, rk_nr(_ISA, t))


def pack_gather_b(const float[::1] P, const int32_t[::1] off, const int32_t[::1] idx, float[::1] out,
                  Py_ssize_t kcb, Py_ssize_t n_begin=0, Py_ssize_t n_end=-1, bint transposed=False,
                  Py_ssize_t kb_begin=0, Py_ssize_t kb_end=-1, pool=None, bint direct_b=True):
    """Pack the B blocks (K blocks ``[kb_begin, kb_end)``, default all, of ``kcb`` rows) of
    columns ``[n_begin, n_end)`` of a gather GEMM into ``out`` (at least
    ``prepacked_size(K, kcb, n_end - n_begin, transposed) + 16`` floats), for
    :func:`gather_gemm`'s ``prepacked``: the same blocks it packs itself with the same
    ``direct_b`` (the panels it reads straight from ``P`` are left out).  Disjoint K
    block ranges can be packed on several threads; ``pool`` (a ``WorkerPool.handle``
    capsule) shares the K blocks out across its threads itself.  Releases the GIL."""
    cdef Py_ssize_t K = off.shape[0], N = idx.shape[0]
    cdef int t = _tile_kind(transposed, "pack_gather_b")
    if n_end < 0:
        n_end = N
    cdef Py_ssize_t nkb = (K + kcb - 1) // kcb if kcb > 0 else 0
    if kb_end < 0:
        kb_end = nkb
    if K == 0 or kcb <= 0 or not 0 <= n_begin < n_end <= N or not 0 <= kb_begin <= kb_end <= nkb:
        raise ValueError(f"pack_gather_b: bad range: K={K}, kcb={kcb}, columns [{n_begin}, {n_end}) of {N}, "
                         f"K blocks [{kb_begin}, {kb_end}) of {nkb}")
    cdef _PackB pb
    pb.dst = <float *><intptr_t>_aligned_ptr(out, prepacked_size(K, kcb, n_end - n_begin, transposed))
    pb.t, pb.P, pb.off, pb.idx, pb.K, pb.kcb, pb.n0, pb.nc, pb.kb0 = t, &P[0], &off[0], &idx[0], K, kcb, n_begin, \
        n_end - n_begin, kb_begin
    pb.direct_b = direct_b
    cdef rk_pool *pool_p = _pool_from(pool)
    with nogil:
        _run_items(pool_p, _pack_b_items, &pb, kb_end - kb_begin)


ctypedef struct _PackB:
    # pack_gather_b's work: K blocks kb0 + [j0, j1) are the work items
    int t, direct_b
    const float *P
    const int32_t *off
    const int32_t *idx
    long K, kcb, n0, nc, kb0
    float *dst


cdef int _pack_b_items(void *ctx, int64_t j0, int64_t j1, int slot) noexcept nogil:
    cdef _PackB *pb = <_PackB *>ctx
    rk_pack_gather_b(_ISA, pb.t, pb.P, pb.off, pb.idx, pb.K, pb.kcb, pb.n0, pb.nc, pb.kb0 + j0, pb.kb0 + j1, pb.dst,
                     pb.direct_b)
    return 0


def transpose_into(const float[:, :] src, float[:, :] dst):
    """``dst[...] = src.T`` for ``src`` (R, C) and ``dst`` (C, R): rows contiguous, any row
    stride.  Cache-blocked (8 x 8 AVX2 blocks where available).  Releases the GIL."""
    cdef Py_ssize_t R = src.shape[0], C = src.shape[1]
    if dst.shape[0] != C or dst.shape[1] != R:
        raise ValueError("transpose_into: shapes do not match")
    if (R > 1 and C > 1) and (src.strides[1] != 4 or dst.strides[1] != 4 or src.strides[0] % 4 or dst.strides[0] % 4):
        raise ValueError("transpose_into: rows must be contiguous float32")
    if R == 0 or C == 0:
        return
    cdef float *dp = &dst[0, 0]
    cdef Py_ssize_t ldd = dst.strides[0] // 4
    with nogil:
        rk_transpose(&src[0, 0], R, C, src.strides[0] // 4, dp, ldd)


def phase_split(const float[:, :, :, ::1] x, int sd, int sh, int sw, int pd, int ph, int pw,
                int Ds, int Hs, int Ws, float[::1] out):
    """Zero-padded stride-phase split of ``x`` (C, D, H, W) into ``out`` (flat, at least
    C*sd*sh*sw*Ds*Hs*Ws floats): ``out[c, a, b, e, z, y, x] = x[c, z*sd+a-pd, y*sh+b-ph, x*sw+e-pw]``
    (0 outside the image).  Releases the GIL."""
    cdef Py_ssize_t C = x.shape[0]
    if out.shape[0] < C * sd * sh * sw * Ds * Hs * Ws:
        raise ValueError("phase_split: output too small")
    if C == 0 or x.shape[1] == 0 or x.shape[2] == 0 or x.shape[3] == 0:
        out[:] = 0
        return
    with nogil:
        rk_phase_split(_ISA, &x[0, 0, 0, 0], C, x.shape[1], x.shape[2], x.shape[3], sd, sh, sw, pd, ph, pw,
                       Ds, Hs, Ws, &out[0])


def im2col(const float[:, :, :, :] x, float[:, ::1] cols, kernel, strides, dilations, pads_begin, out_shape):
    """Unfold ``x`` (C, D, H, W; each channel C-contiguous, channels any stride apart) into
    ``cols`` (C*kd*kh*kw, OD*OH*OW), written fully.

    Row ``((c*kd + a)*kh + i)*kw + j`` holds input pixel
    ``(c, od*sd - pd + a*dd, oh*sh - ph + i*dh, ow*sw - pw + j*dw)`` (0 in the padding)
    for every output position.  ``kernel``/``strides``/``dilations``/``pads_begin``/
    ``out_shape``: 3-tuples (d, h, w).  Releases the GIL."""
    cdef long kd = kernel[0], kh = kernel[1], kw = kernel[2]
    cdef long sd = strides[0], sh = strides[1], sw = strides[2]
    cdef long dd = dilations[0], dh = dilations[1], dw = dilations[2]
    cdef long pd = pads_begin[0], ph = pads_begin[1], pw = pads_begin[2]
    cdef long OD = out_shape[0], OH = out_shape[1], OW = out_shape[2]
    cdef long C = x.shape[0]
    if cols.shape[0] != C * kd * kh * kw or cols.shape[1] != OD * OH * OW:
        raise ValueError("im2col: cols has the wrong shape")
    if cols.shape[0] == 0 or cols.shape[1] == 0:
        return
    if x.shape[1] * x.shape[2] * x.shape[3] == 0:
        cols[:, :] = 0
        return
    if x.strides[3] != 4 or (x.shape[2] > 1 and x.strides[2] != 4 * x.shape[3]) or x.strides[0] % 4 \
            or (x.shape[1] > 1 and x.strides[1] != 4 * x.shape[3] * x.shape[2]):
        raise ValueError("im2col: each channel of x must be C-contiguous")
    cdef long cs = x.strides[0] // 4
    with nogil:
        rk_im2col(&x[0, 0, 0, 0], C, x.shape[1], x.shape[2], x.shape[3], cs, kd, kh, kw, sd, sh, sw,
                  dd, dh, dw, pd, ph, pw, OD, OH, OW, &cols[0, 0], 0)


def col2im(float[:, ::1] cols, float[:, :, :, ::1] y, kernel, strides, dilations, pads_begin, grid_shape):
    """Fold ``cols`` (C*kd*kh*kw, GD*GH*GW) back into ``y`` (C, D, H, W), accumulating:
    the adjoint of ``im2col`` with the same parameters (``grid_shape`` = its ``out_shape``).
    Taps falling in the padding are dropped.  Used by ConvTranspose.  Releases the GIL."""
    cdef long kd = kernel[0], kh = kernel[1], kw = kernel[2]
    cdef long sd = strides[0], sh = strides[1], sw = strides[2]
    cdef long dd = dilations[0], dh = dilations[1], dw = dilations[2]
    cdef long pd = pads_begin[0], ph = pads_begin[1], pw = pads_begin[2]
    cdef long GD = grid_shape[0], GH = grid_shape[1], GW = grid_shape[2]
    cdef long C = y.shape[0]
    if cols.shape[0] != C * kd * kh * kw or cols.shape[1] != GD * GH * GW:
        raise ValueError("col2im: cols has the wrong shape")
    if cols.shape[0] == 0 or cols.shape[1] == 0 or y.shape[1] * y.shape[2] * y.shape[3] == 0:
        return
    with nogil:
        rk_im2col(&y[0, 0, 0, 0], C, y.shape[1], y.shape[2], y.shape[3], y.shape[1] * y.shape[2] * y.shape[3],
                  kd, kh, kw, sd, sh, sw,
                  dd, dh, dw, pd, ph, pw, GD, GH, GW, &cols[0, 0], 1)


cdef struct _Gemv:
    int isa
    const float *x
    const float *w
    long ldw, K
    float *y


cdef int _gemv_items(void *ctx, int64_t j0, int64_t j1, int slot) noexcept nogil:
    cdef _Gemv *g = <_Gemv *>ctx
    rk_gemv_rows(g.isa, g.x, g.w, g.ldw, g.K, g.y, j0, j1)
    return 0


def gemv(pool, const float[::1] x, const float[:, ::1] w, float[::1] y, Py_ssize_t min_rows=64):
    """``y[j] = sum_k x[k] * w[j, k]`` (``w``: rows x K, row-major; ``x``: K; ``y``: rows),
    rows shared out in ranges of at least ``min_rows`` across the threads of ``pool`` (a
    ``WorkerPool.handle`` capsule; None: the caller alone), without the GIL.  Each row's sum is
    formed the same way whatever range it falls in, so the thread count never changes a
    value.  The kernels' ISA level (``limit_isa``): AVX-512, AVX2+FMA or generic C."""
    cdef _Gemv g
    if x.shape[0] != w.shape[1] or y.shape[0] != w.shape[0]:
        raise ValueError(f"gemv: w is {w.shape[0]} x {w.shape[1]}, x has {x.shape[0]} values, y {y.shape[0]}")
    if min_rows < 1:
        raise ValueError(f"gemv: min_rows must be >= 1, got {min_rows}")
    if w.shape[0] == 0:
        return
    if w.shape[1] == 0:
        y[:] = 0
        return
    g.isa, g.x, g.w, g.ldw, g.K, g.y = _ISA, &x[0], &w[0, 0], w.shape[1], w.shape[1], &y[0]
    cdef rk_pool *pool_p = _pool_from(pool)
    cdef int64_t rows = w.shape[0]
    with nogil:
        if pool_p == NULL:
            _gemv_items(&g, 0, rows, 0)
        else:
            _POOL_API.run(pool_p, _gemv_items, &g, rows, min_rows)


def depthwise_scratch_size(H, W, pt, pl, pb, pr):
    """Floats of scratch ``depthwise`` needs for an (H, W) plane with these pads."""
    return (H + pt + pb + 1) * (W + pl + pr) + 64


def depthwise(const float[:, :, ::1] x, const float[:, :, ::1] w, bias, float[:, :, ::1] y,
              int sh, int sw, int dh, int dw, int pt, int pl, int pb, int pr, float[::1] scratch, act=None,
              residual=None):
    """Depthwise 2-D convolution of one image, written into ``y`` (M, OH, OW).

    ``x`` (C, H, W); ``w`` (M, kh, kw) with M a multiple of C (output channel m reads
    input channel m // (M // C)); ``bias`` (M,) float32 or None; ``scratch``: at least
    ``depthwise_scratch_size(H, W, pt, pl, pb, pr)`` floats; ``act``: None or a fused
    activation (see ``gather_gemm``), applied to each channel plane as it is finished;
    ``residual``: None or a C-contiguous float32 (M, OH, OW) array added to each finished
    plane before the activation.  Releases the GIL."""
    cdef long C = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef long M = w.shape[0], kh = w.shape[1], kw = w.shape[2]
    cdef long OH = y.shape[1], OW = y.shape[2]
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    cdef float *pad = NULL
    cdef rk_act a
    cdef const rk_act *ap = &a if _act_from(act, &a) else NULL
    if M == 0 or OH == 0 or OW == 0:
        return
    if C == 0 or M % C != 0 or y.shape[0] != M:
        raise ValueError("depthwise: channel counts")
    if (OH - 1) * sh + (kh - 1) * dh >= H + pt + pb or (OW - 1) * sw + (kw - 1) * dw >= W + pl + pr:
        raise ValueError("depthwise: output shape too large")
    if bias is not None:
        bview = bias
        if bview.shape[0] != M:
            raise ValueError("depthwise: bias length")
        bptr = &bview[0]
    if scratch.shape[0] < depthwise_scratch_size(H, W, pt, pl, pb, pr):
        raise ValueError("depthwise: scratch too small")
    pad = &scratch[0]
    cdef const float *rp = _residual_ptr(residual, (M, OH, OW), OW, "depthwise")
    with nogil:
        rk_depthwise(_ISA, &x[0, 0, 0], C, H, W, &w[0, 0, 0], M, M // C, kh, kw, sh, sw, dh, dw,
                     pt, pl, pb, pr, OH, OW, bptr, &y[0, 0, 0], pad, ap, rp)


def winograd_weights(const float[:, :, :, ::1] w, int tile=4):
    """Winograd F(tile x tile, 3x3) weight transform (``tile`` 4 or 2): a new (A*A, M, C)
    float32 array (A = tile + 2), ``[A*a + b, m, c] = (G w[m, c] G^T)[a, b]`` computed in
    float64 (each sum of three products as a multiply and two fused multiply-adds, in index
    order: the values numpy's ``einsum`` gave over OpenBLAS), rounded to float32.  Copies;
    releases the GIL."""
    if tile == 4:
        G = np.array([[1.0, 0.0, 0.0], [-2.0 / 3.0, -2.0 / 3.0, -2.0 / 3.0], [-2.0 / 3.0, 2.0 / 3.0, -2.0 / 3.0],
                      [1.0 / 6.0, 1.0 / 3.0, 2.0 / 3.0], [1.0 / 6.0, -1.0 / 3.0, 2.0 / 3.0], [0.0, 0.0, 4.0]],
                     np.float64) / 4.0
    elif tile == 2:
        G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]], np.float64)
    else:
        raise ValueError("winograd_weights: tile must be 4 or 2")
    if w.shape[2] != 3 or w.shape[3] != 3:
        raise ValueError("winograd_weights: 3x3 kernels only")
    cdef int a = tile + 2
    cdef long M = w.shape[0], C = w.shape[1]
    u = np.empty((a * a, M, C), np.float32)
    cdef const double[:, ::1] g = G
    cdef float[:, :, ::1] uv = u
    if M and C:
        with nogil:
            rk_wino_weights(&w[0, 0, 0, 0], M * C, &g[0, 0], a, &uv[0, 0, 0])
    return u


cdef long _wino_stride(long n) noexcept nogil:
    """A stride of at least ``n`` floats between the rows (phases, components) the Winograd
    input transform reads and writes side by side: a multiple of 16 floats that is 64
    floats past a multiple of 1024, so those rows never sit a multiple of 4 KiB apart
    (same L1 sets, 4K aliasing between loads and stores: measured 2x slower)."""
    cdef long k = (n + 1023 - 64) // 1024
    return k * 1024 + 64


def winograd_scratch(Py_ssize_t C, Py_ssize_t TH, Py_ssize_t TW, int tile=4):
    """``(v, v_stride, split, buf)`` for :func:`winograd_input` on ``C`` channels and a TH x
    TW tile grid: the sizes in floats of its ``V``, ``split`` and ``buf`` arguments (``buf``
    also covers :func:`winograd_output`'s 40 * TH * TW) and the distance in floats between
    the transformed components in ``V`` (the ``pstride`` of ``gather_gemm_batch``); every
    channel takes ``(TH + 1) * (TW + 1)`` floats of a component (see ``winograd_input``)."""
    cdef Py_ssize_t plane = (TH + 1) * (TW + 1), A2 = (tile + 2) * (tile + 2)
    if tile != 4 and tile != 2:
        raise ValueError("winograd_scratch: tile must be 4 or 2")
    cdef long stride = _wino_stride(C * plane)
    return (A2 * stride, stride, tile * tile * stride + TW + 2 + 16, max(A2 * RK_WIN_CHUNK + 16, 40 * TH * TW))



def winograd_input(const float[:, :, ::1] x, int pt, int pl, int TH, int TW, float[::1] V,
                   float[::1] split, float[::1] buf, Py_ssize_t c_begin=0, Py_ssize_t c_end=-1, int tile=4):
    """Winograd F(tile x tile, 3x3) input transform (``tile`` 4 or 2, A = tile + 2) of one
    image ``x`` (C, H, W) with pads (top ``pt``, left ``pl``) into ``V`` (A*A components
    ``v_stride`` floats apart, each (C, (TH+1)*(TW+1)); see :func:`winograd_scratch`): the AxA patch of the output tile (ty, tx) starts at input row
    tile*ty - pt, column tile*tx - pl and lands at grid column ty*(TW+1) + tx of its
    channel (columns with tx == TW and the row ty == TH are padding, never meaningful).
    ``split``: scratch shared by every channel range, ``buf``: one per concurrent caller;
    sizes from :func:`winograd_scratch`.  Only channels ``[c_begin, c_end)`` are
    transformed (default all), so disjoint ranges can run on several threads.  Releases
    the GIL."""
    cdef long C = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef long plane = (<long>TH + 1) * (TW + 1)
    cdef long A2 = (tile + 2) * (tile + 2), ph = tile * tile
    cdef long ss = _wino_stride(C * plane)   # floats between the phases of split, and the components of V
    if tile != 4 and tile != 2:
        raise ValueError("winograd_input: tile must be 4 or 2")
    if c_end < 0:
        c_end = C
    if V.shape[0] < A2 * ss or buf.shape[0] < A2 * RK_WIN_CHUNK + 16 \
            or split.shape[0] < ph * ss + TW + 2 + 16:
        raise ValueError("winograd_input: buffers too small")
    if not 0 <= c_begin <= c_end <= C:
        raise ValueError("winograd_input: bad channel range")
    if c_end == c_begin or TH == 0 or TW == 0 or H == 0 or W == 0:
        return
    cdef float *bufp = <float *><intptr_t>_aligned_ptr(buf, A2 * RK_WIN_CHUNK)   # 64-byte aligned rows
    with nogil:
        _wino_in(&x[0, 0, 0], C, H, W, c_begin, c_end, tile, pt, pl, TH, TW, &split[0], &V[0], bufp)


cdef void _wino_in(const float *x, long C, long H, long W, long c0, long c1, int tile, long pt, long pl,
                   long TH, long TW, float *split, float *V, float *bufp) noexcept nogil:
    """winograd_input's work on channels ``[c0, c1)`` of ``x`` (C, H, W), arguments checked."""
    cdef long plane = (TH + 1) * (TW + 1), ph = tile * tile
    cdef long ss = _wino_stride(C * plane)
    rk_wino_split(_ISA, x + c0 * H * W, c1 - c0, H, W, tile, pt, pl, TH + 1, TW + 1, split + c0 * plane, ss)
    if c1 == C:  # the slack read past the last phase (padding positions only)
        memset(split + ph * ss, 0, (TW + 2 + 16) * sizeof(float))
    if tile == 4:
        rk_wino_in(_ISA, split + c0 * plane, ss, c1 - c0, TH, TW, V + c0 * plane, ss, bufp)
    else:
        rk_wino2_in(_ISA, split + c0 * plane, ss, c1 - c0, TH, TW, V + c0 * plane, ss, bufp)


def winograd_output(const float[::1] Mt, Py_ssize_t M, int TH, int TW, bias, float[:, :, ::1] y,
                    float[::1] buf, Py_ssize_t m_begin=0, Py_ssize_t m_end=-1, act=None, int tile=4,
                    residual=None, Py_ssize_t row_begin=0, Py_ssize_t row_end=-1):
    """Winograd F(tile x tile, 3x3) output transform (``tile`` 4 or 2, A = tile + 2):
    ``y`` (M, OH, OW) = act(bias + A^T M A) per output tile from ``Mt`` (flat (A*A, M,
    TH*TW)), cropped to OH x OW.  ``buf``: at least 40*TH*TW floats, one per concurrent
    caller.  Only output channels ``[m_begin, m_end)`` are written (default all), and only
    output rows ``[row_begin, row_end)`` (default all; ``row_begin`` a multiple of
    ``tile``): the TH tile rows of ``Mt`` are then the tiles of those rows (a band of
    the output, transformed with its own tiles).
    ``act``: None or a fused activation (see ``gather_gemm``), applied to each channel's
    transformed tiles before they are scattered into ``y``.  ``residual``: None or a
    C-contiguous float32 array of ``y``'s shape, added to each finished channel plane
    before the activation.  Releases the GIL."""
    cdef long T = <long>TH * TW
    cdef long A2 = (tile + 2) * (tile + 2)
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    cdef rk_act a
    cdef const rk_act *ap = &a if _act_from(act, &a) else NULL
    if tile != 4 and tile != 2:
        raise ValueError("winograd_output: tile must be 4 or 2")
    if m_end < 0:
        m_end = M
    if row_end < 0:
        row_end = y.shape[1]
    if not 0 <= row_begin <= row_end <= y.shape[1] or row_begin % tile:
        raise ValueError("winograd_output: bad row range")
    cdef long OH = row_end - row_begin, OW = y.shape[2]
    if Mt.shape[0] < A2 * M * T or buf.shape[0] < 40 * T or y.shape[0] != M:
        raise ValueError("winograd_output: buffers too small")
    if OH > tile * TH or OW > tile * TW:
        raise ValueError("winograd_output: output larger than the tiles")
    if not 0 <= m_begin <= m_end <= M:
        raise ValueError("winograd_output: bad channel range")
    if bias is not None:
        bview = bias
        if bview.shape[0] != M:
            raise ValueError("winograd_output: bias length")
        bptr = &bview[m_begin]
    if m_end == m_begin or T == 0 or OH == 0 or OW == 0:
        return
    if (y.shape[0] > 1 and y.strides[0] != y.shape[1] * OW * 4) or (y.shape[1] > 1 and y.strides[1] != OW * 4):
        raise ValueError("winograd_output: y must be C-contiguous")
    cdef long ldc = y.shape[1] * OW
    cdef const float *rp = _residual_ptr(residual, (y.shape[0], y.shape[1], y.shape[2]), y.shape[2],
                                         "winograd_output")
    if rp != NULL:
        rp += m_begin * ldc + row_begin * OW
    with nogil:
        _wino_out(tile, &Mt[m_begin * T], M * T, m_end - m_begin, TH, TW, OH, OW, bptr, &y[m_begin, row_begin, 0],
                  ldc, &buf[0], ap, rp)


cdef inline void _wino_out(int tile, const float *Mt, long ldx, long M, long TH, long TW, long OH, long OW,
                           const float *bias, float *y, long ldc, float *buf, const rk_act *ap,
                           const float *rp) noexcept nogil:
    if tile == 4:
        rk_wino_out(_ISA, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, ap, rp)
    else:
        rk_wino2_out(_ISA, Mt, ldx, M, TH, TW, OH, OW, bias, y, ldc, buf, ap, rp)


def bias_act(float[:, :] y, bias, act=None, residual=None):
    """In place: ``y[m, n] = act(y[m, n] + bias[m] + residual[m, n])`` (in that order) for
    ``y`` (M, N) float32 with contiguous rows (any row stride); ``bias`` (M,) float32 or
    None; ``act`` None or a fused activation (see ``gather_gemm``); ``residual`` None or
    an (M, N) float32 array with contiguous rows (any row stride).  One pass.  Releases
    the GIL."""
    cdef Py_ssize_t M = y.shape[0], N = y.shape[1]
    cdef const float[::1] bview
    cdef const float *bptr = NULL
    cdef rk_act a
    cdef const rk_act *ap = &a if _act_from(act, &a) else NULL
    if bias is not None:
        bview = bias
        if bview.shape[0] != M:
            raise ValueError("bias_act: bias length")
        bptr = &bview[0]
    cdef const float[:, :] rview
    cdef const float *rp = NULL
    cdef long ldr = 0
    if residual is not None:
        rview = residual
        if rview.shape[0] != M or rview.shape[1] != N:
            raise ValueError("bias_act: residual shape")
        if M and N:
            if (N > 1 and rview.strides[1] != 4) or rview.strides[0] % 4:
                raise ValueError("bias_act: rows of residual must be contiguous float32")
            rp = &rview[0, 0]
            ldr = rview.strides[0] // 4
    if M == 0 or N == 0 or (bptr == NULL and ap == NULL and rp == NULL):
        return
    if (N > 1 and y.strides[1] != 4) or y.strides[0] % 4:
        raise ValueError("bias_act: rows of y must be contiguous float32")
    cdef float *yp = &y[0, 0]
    cdef long ldy = y.strides[0] // 4
    with nogil:
        rk_bias_act(_ISA, yp, M, N, ldy, bptr, ap, rp, ldr)


def gather_gemm_batch(const float[::1] P, Py_ssize_t pstride, const int32_t[::1] off, const int32_t[::1] idx,
                      const float[:, :, :, ::1] a_packed, Py_ssize_t M, float[::1] y, float[::1] scratch,
                      Py_ssize_t kcb, Py_ssize_t ncb):
    """``nb = a_packed.shape[0]`` gather GEMMs (normal tiles, no bias):
    ``y[i, m, n] = sum_k A_i[m, k] * P[i * pstride + off[k] + idx[n]]``, ``y`` flat
    (nb, M, N).  ``a_packed[i]``: ``pack_weights(A_i)``.  Releases the GIL."""
    cdef Py_ssize_t nb = a_packed.shape[0], K = off.shape[0], N = idx.shape[0]
    cdef int MR = rk_mr(_ISA, 0), NR = rk_nr(_ISA, 0)
    if _ISA == 0:
        raise RuntimeError("gather_gemm_batch: no micro-kernel for this CPU")
    if a_packed.shape[1] * MR < M or a_packed.shape[2] != K or a_packed.shape[3] != MR:
        raise ValueError("gather_gemm_batch: packed weights do not match")
    if y.shape[0] < nb * M * N or ncb % NR != 0 or ncb <= 0 or K == 0:
        raise ValueError("gather_gemm_batch: bad output or block shape")
    if nb == 0 or M == 0 or N == 0:
        return
    cdef float *bp = <float *><intptr_t>_aligned_ptr(scratch, kcb * ncb)
    cdef long astride = a_packed.shape[1] * a_packed.shape[2] * a_packed.shape[3]
    with nogil:
        rk_gather_gemm_batch(_ISA, nb, &P[0], pstride, &off[0], &idx[0], M, K, &a_packed[0, 0, 0, 0],
                             astride, &y[0], M * N, N, bp, kcb, ncb, N, 1)


ctypedef struct _WinoBand:
    long r0, r1, K, N, kcb, ncb
    const int32_t *off
    const int32_t *idx


ctypedef struct _WinoBands:
    # a banded Winograd Conv of every image (see winograd_bands)
    const float *x
    long C, H, W
    const float *u
    long nb, M, astride
    const float *bias
    float *y
    const float *res
    long OH, OW
    int tile, has_act
    rk_act act
    long pt, pl, TW
    _WinoBand *bands
    long nbands, mparts
    float *scratch
    long sstride, o_mt, o_buf, o_split, o_blk


cdef int _wino_band_items(void *ctx, int64_t j0, int64_t j1, int slot) noexcept nogil:
    cdef _WinoBands *wb = <_WinoBands *>ctx
    cdef float *base = wb.scratch + slot * wb.sstride
    cdef float *v = base
    cdef float *mt = base + wb.o_mt
    cdef float *buf = base + wb.o_buf
    cdef float *split = base + wb.o_split
    cdef float *blk = base + wb.o_blk
    cdef const _WinoBand *b
    cdef int64_t j, i, per = wb.nbands * wb.mparts
    cdef long n, t = wb.tile, row0, row1, ldc = wb.OH * wb.OW, part, p0, p1, m0, mc
    cdef long MR = rk_mr(_ISA, 0), panels = (wb.M + MR - 1) // MR
    cdef const float *rp
    for j in range(j0, j1):
        i = j // per
        b = &wb.bands[(j % per) // wb.mparts]
        part = (j % per) % wb.mparts
        # this item's output channels: whole weight panels, so every row is computed as unsplit
        p0, p1 = panels * part // wb.mparts, panels * (part + 1) // wb.mparts
        m0 = p0 * MR
        mc = min(wb.M, p1 * MR) - m0
        if mc <= 0:
            continue
        n = b.r1 - b.r0
        _wino_in(wb.x + i * wb.C * wb.H * wb.W, wb.C, wb.H, wb.W, 0, wb.C, wb.tile, wb.pt - t * b.r0, wb.pl, n,
                 wb.TW, split, v, buf)
        rk_gather_gemm_batch(_ISA, wb.nb, v, _wino_stride(wb.C * (n + 1) * (wb.TW + 1)), b.off, b.idx, mc, b.K,
                             wb.u + p0 * b.K * MR, wb.astride, mt, mc * b.N, b.N, blk, b.kcb, b.ncb, b.N, 1)
        row0, row1 = t * b.r0, min(wb.OH, t * b.r1)
        rp = wb.res + i * wb.M * ldc + m0 * ldc + row0 * wb.OW if wb.res != NULL else NULL
        _wino_out(wb.tile, mt, mc * n * wb.TW, mc, n, wb.TW, row1 - row0, wb.OW,
                  wb.bias + m0 if wb.bias != NULL else NULL,
                  wb.y + i * wb.M * ldc + m0 * ldc + row0 * wb.OW, ldc, buf, &wb.act if wb.has_act else NULL, rp)
    return 0


cdef long _wino_share(Py_ssize_t C, Py_ssize_t M, Py_ssize_t rows, Py_ssize_t TW, Py_ssize_t nblock, int tile,
                      long *parts) except -1:
    """Floats of one thread's share of :func:`winograd_bands`'s scratch; ``parts`` gets the
    offsets of its GEMM output, transform buffer, phase split and B block (its transformed
    input is first), each 64-byte aligned in an aligned share."""
    nv, _, nsplit, nbuf = winograd_scratch(C, rows, TW, tile)
    parts[0] = _round16(nv)
    parts[1] = parts[0] + _round16((tile + 2) * (tile + 2) * M * rows * TW)
    parts[2] = parts[1] + _round16(nbuf)
    parts[3] = parts[2] + _round16(nsplit)
    return parts[3] + _round16(nblock)


def winograd_bands_scratch(Py_ssize_t C, Py_ssize_t M, Py_ssize_t rows, Py_ssize_t TW, Py_ssize_t nblock,
                           int tile=4):
    """Floats one thread's share of :func:`winograd_bands`'s ``scratch`` takes, for bands of
    at most ``rows`` tile rows and B blocks of ``nblock`` floats."""
    cdef long parts[4]
    return _wino_share(C, M, rows, TW, nblock, tile, parts)


def winograd_bands(pool, const float[:, :, :, ::1] x, const float[:, :, :, ::1] u, bias, float[:, :, :, ::1] y,
                   residual, bands, int pt, int pl, int TW, float[::1] scratch, act=None, int tile=4,
                   int mparts=1):
    """Banded Winograd F(tile x tile, 3x3) Conv of every image of ``x`` (n, C, H, W) into
    ``y`` (n, M, OH, OW), on the threads of ``pool`` (a ``WorkerPool.handle`` capsule;
    None: the caller alone) without the GIL.

    Work items are (image, band, channel part), channel part fastest: a band's tile rows go
    through :func:`winograd_input`, then :func:`gather_gemm_batch` and
    :func:`winograd_output` for part ``k`` of ``mparts`` near-equal runs of whole weight
    panels (output channels), on one thread, in that thread's share of ``scratch`` (at
    least ``threads * winograd_bands_scratch(...) + 16`` floats), with the same values as
    those calls.  ``mparts`` > 1 shares one band among threads (each transforms the band's
    input itself): for images too small to cut into bands.  ``bands``:
    ``[(tile_row_begin, tile_row_end, off, idx, kcb, ncb), ...]`` (``off``/``idx``: int32
    gather tables of that band height); ``u``:
    ``pack_weights`` of the (tile+2)^2 transformed weight matrices (M x C); ``pt``/``pl``:
    top/left padding; ``TW``: tiles per row; ``bias``, ``act``, ``residual`` (None or
    ``y``'s shape, C-contiguous) as in :func:`winograd_output`."""
    cdef _WinoBands wb
    cdef long nb = (tile + 2) * (tile + 2), k, rows = 0, nblock = 0
    cdef long parts[4]
    cdef Py_ssize_t n_img = x.shape[0]
    cdef const float[::1] bview
    cdef const int32_t[::1] off_k
    cdef const int32_t[::1] idx_k
    cdef int MR = rk_mr(_ISA, 0), NR = rk_nr(_ISA, 0)
    if tile != 4 and tile != 2:
        raise ValueError("winograd_bands: tile must be 4 or 2")
    if _ISA == 0:
        raise RuntimeError("winograd_bands: no micro-kernel for this CPU")
    wb.C, wb.H, wb.W, wb.M = x.shape[1], x.shape[2], x.shape[3], y.shape[1]
    wb.OH, wb.OW = y.shape[2], y.shape[3]
    if y.shape[0] != n_img or u.shape[0] != nb or u.shape[1] * MR < wb.M or u.shape[2] != wb.C or u.shape[3] != MR:
        raise ValueError("winograd_bands: weights, input and output do not match")
    if TW <= 0 or wb.OW > tile * TW or not bands:
        raise ValueError("winograd_bands: bad tile grid or no bands")
    if mparts < 1:
        raise ValueError(f"winograd_bands: mparts must be >= 1, got {mparts}")
    wb.mparts = mparts
    wb.bias = NULL
    if bias is not None:
        bview = bias
        if bview.shape[0] != wb.M:
            raise ValueError("winograd_bands: bias length")
        wb.bias = &bview[0]
    if n_img == 0 or wb.M == 0 or wb.OH == 0 or wb.OW == 0:
        return
    cdef const float[:, :, :, ::1] r4
    wb.res = NULL
    if residual is not None:
        if tuple(residual.shape) != (n_img, wb.M, wb.OH, wb.OW) or not residual.flags.c_contiguous:
            raise ValueError("winograd_bands: residual must be C-contiguous with the output's shape")
        r4 = residual
        wb.res = &r4[0, 0, 0, 0]
    wb.has_act = _act_from(act, &wb.act) != 0
    wb.nbands = len(bands)
    band_list = list(bands)
    wb.bands = <_WinoBand *>PyMem_Malloc(wb.nbands * sizeof(_WinoBand))
    if wb.bands == NULL:
        raise MemoryError()
    try:
        for k in range(wb.nbands):
            r0, r1, off_o, idx_o, kcb, ncb = band_list[k]
            off_k, idx_k = off_o, idx_o
            n = r1 - r0
            if not 0 <= r0 < r1 or tile * r0 >= wb.OH or off_k.shape[0] != wb.C or idx_k.shape[0] != n * TW \
                    or kcb <= 0 or ncb <= 0 or ncb % NR:
                raise ValueError(f"winograd_bands: band {k} ({r0}, {r1}) does not match the tile grid or tables")
            wb.bands[k].r0, wb.bands[k].r1, wb.bands[k].K, wb.bands[k].N = r0, r1, wb.C, n * TW
            wb.bands[k].kcb, wb.bands[k].ncb = kcb, ncb
            wb.bands[k].off, wb.bands[k].idx = &off_k[0], &idx_k[0]
            rows = max(rows, n)
            nblock = max(nblock, kcb * ncb + 16)
        pool_p = _pool_from(pool)
        threads = _POOL_API.threads(pool_p) if pool_p != NULL else 1
        wb.sstride = _wino_share(wb.C, wb.M, rows, TW, nblock, tile, parts)
        wb.o_mt, wb.o_buf, wb.o_split, wb.o_blk = parts[0], parts[1], parts[2], parts[3]
        wb.scratch = <float *><intptr_t>_aligned_ptr(scratch, threads * wb.sstride)
        wb.x, wb.u, wb.y = &x[0, 0, 0, 0], &u[0, 0, 0, 0], &y[0, 0, 0, 0]
        wb.nb, wb.astride = nb, u.shape[1] * u.shape[2] * u.shape[3]
        wb.tile, wb.pt, wb.pl, wb.TW = tile, pt, pl, TW
        with nogil:
            _run_items(pool_p, _wino_band_items, &wb, n_img * wb.nbands * mparts)
    finally:
        PyMem_Free(wb.bands)
