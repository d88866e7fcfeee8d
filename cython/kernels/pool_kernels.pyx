# cython: language_level=3
"""Pooling loops of the software backend (MaxPool, AveragePool, global pools), run without the GIL.

Every kernel works on a 4-D view ``(P, D, H, W)``: ``P`` = batch * channels planes,
and up to three spatial axes (1-D and 2-D pooling pass ``D = 1`` and/or ``H = 1``).
Output position ``o`` along an axis reads the input at ``o * stride - pad_begin + t *
dilation`` for kernel taps ``t``.

``max_pool`` and ``avg_pool`` reduce each window in two separable passes, per output
row (an ``(od, oh)`` pair):

1. vertical: the real input rows of the window (rows in the padding are skipped; which
   rows those are is worked out once per call, not per plane) are reduced element-wise,
   in window order, over the full width W into a scratch row.  A group of output rows
   (about 16 KB of scratch) gets its vertical pass before its horizontal one, so the
   horizontal loads do not wait on stores still in flight;
2. horizontal: the scratch row is stored with ``pad_begin`` identity values in front
   and identity values after it (``empty_value`` for max, ``0.0`` for sums), so every
   output column reduces exactly ``kernel_w`` scratch values, in tap order, with no
   bounds test.  Averages are then multiplied by the reciprocal of the window's count
   (float32, correctly rounded), precomputed per output position.

The common shapes (kernel 2 or 3, stride 1 or 2, no dilation) have their own loops
with compile-time strides, which the C compiler vectorises.  For float32 both passes run
in ``cython/src/rk_pooling.c``, built for each SIMD level of the machine (AVX-512F, AVX2,
baseline; :func:`limit_isa` narrows it, ``RKNNLITE_ISA`` through ``ops/pool.py``) with the
same order of operations as the loops here, which serve the other dtypes.  Three layouts skip the
per-row structure altogether:

* stride-1 "same" pooling of a 2-D plane (output as large as the input, e.g. 3x3 pad 1):
  the vertical pass runs as one loop over every row whose window is all real input,
  and the horizontal pass as one loop over the whole plane; the columns whose window
  crosses a row edge are then recomputed one by one.  The arithmetic, order included,
  is the row loops' own, so the results are bit-identical to them;
* narrow planes on x86-64 (AVX-512: padded row of at most 64 elements, at most 32 outputs per
  row, stride 1 or 2 along W, no dilation along W; AVX2: half those, stride 1 only up to 8
  outputs; :func:`narrow_fits`): whole planes in one C call (``cython/src/rk_pooling_narrow.c``),
  the padded scratch row held in vector registers and the taps read with lane permutes, in the
  row loops' order of operations (bit-identical to them).  The row loops' per-row set-up and
  scalar tails are most of their time on 7x7-28x28 planes;
* a window that covers the whole plane (global pooling, or a 7x7 kernel on a 7x7
  plane): the plane is reduced as one flat array in 8 interleaved partial results
  (lane ``j`` takes elements ``j, j+8, ...``) combined pairwise.  For max this is
  exactly the row loops' result; for sums the additions are grouped differently, so an
  average may differ from the row loops' in the last bits (float32 rounding).

Ties and special values: max keeps the value it holds unless a later one compares
greater (``v > best``, as SIMD max instructions do), so between -0.0 and +0.0 the first
in the loops' order wins (for the whole-plane layout, in lane order), and whether a NaN
in a window reaches the output depends on its position (NaN handling is unspecified).
Sums add padding as +0.0, so a border window whose real elements are all -0.0 averages
to +0.0; NaN and infinities propagate through averages as usual.

``specialise=False`` forces the generic row loops (tests compare the two).  Each call
handles the planes ``[p0, p1)``, so callers can split planes across threads; a plane's
result never depends on the split.

``max_pool_indices`` is the slower path that also returns the argmax positions (MaxPool's
optional second output); it takes per-output tap ranges computed by the caller.
"""

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from rk_pool cimport rk_range_fn

from rk_pooling cimport (rkp_cpu_level, rkp_horiz_avg, rkp_horiz_max, rkp_narrow_fits, rkp_narrow_pool,
                         rkp_vert_max, rkp_vert_sum)

include "pool_handle.pxi"

# The SIMD level of the float32 passes (rk_pooling.c): the CPU's best unless limit_isa narrows it.
cdef int _ISA = rkp_cpu_level()


def isa_level():
    """SIMD level of the float32 pooling passes: 2 AVX-512F, 1 AVX2 (x86-64) or NEON (aarch64,
    the baseline build there), 0 baseline."""
    return _ISA


def narrow_fits(Py_ssize_t W, Py_ssize_t OW, int kw, int sw, int dw, int pw):
    """Whether a float32 pool of this geometry along W (input width, output width, kernel, stride,
    dilation, begin pad) runs in the narrow-plane layout at the current SIMD level (module docstring)."""
    return bool(rkp_narrow_fits(_ISA, W, OW, kw, sw, dw, pw))


def limit_isa(int level):
    """Run the float32 passes at ``level`` at most (never above the CPU's); returns the level now in
    use.  Every level computes the same values (``RKNNLITE_ISA``, tests of each path)."""
    global _ISA
    _ISA = min(max(level, 0), rkp_cpu_level())
    return _ISA

ctypedef fused max_t:
    float
    double
    signed char
    unsigned char
    int
    long long

# How a call lays out its work (see the module docstring).
cdef enum:
    MODE_ROWS = 0
    MODE_SAME = 1
    MODE_PLANE = 2
    MODE_NARROW = 3


# ---------------------------------------------------------------------------- geometry


cdef inline Py_ssize_t _count_taps(Py_ssize_t o, int k, int s, int d, int pb,
                                   Py_ssize_t lo_bound, Py_ssize_t hi_bound) noexcept nogil:
    """How many of the k taps of output o land in [lo_bound, hi_bound)."""
    cdef Py_ssize_t t, pos, n = 0
    for t in range(k):
        pos = o * s - pb + t * d
        if lo_bound <= pos < hi_bound:
            n += 1
    return n


cdef void _row_plan(Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH,
                    int kd, int kh, int sd, int sh, int dd, int dh, int pd, int ph,
                    int* nrows, Py_ssize_t* offs) noexcept nogil:
    """For each output row q = od * OH + oh: the offsets (into a plane) of its real input
    rows, in window order, at ``offs[q * kd * kh:]``, and their number in ``nrows[q]``."""
    cdef Py_ssize_t od, oh, i, j, z, r, q, n
    cdef Py_ssize_t per = <Py_ssize_t> kd * kh
    for od in range(OD):
        for oh in range(OH):
            q = od * OH + oh
            n = 0
            for i in range(kd):
                z = od * sd - pd + i * dd
                if z < 0 or z >= D:
                    continue
                for j in range(kh):
                    r = oh * sh - ph + j * dh
                    if r < 0 or r >= H:
                        continue
                    offs[q * per + n] = (z * H + r) * W
                    n += 1
            nrows[q] = <int> n


cdef inline Py_ssize_t _scratch_len(Py_ssize_t W, Py_ssize_t OW, int kw, int sw, int dw, int pw) noexcept nogil:
    """Length of the padded scratch row: front padding, W values, and room for the last window."""
    cdef Py_ssize_t need = (OW - 1) * sw + <Py_ssize_t> (kw - 1) * dw + 1
    cdef Py_ssize_t have = pw + W
    return need if need > have else have


cdef int _choose_mode(Py_ssize_t D, Py_ssize_t H, Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW,
                      int kd, int kh, int kw, int sh, int sw, int dh, int dw, int pw,
                      const int* nrows, bint specialise, bint native) noexcept nogil:
    """The layout of the work (MODE_*): see the module docstring.  ``native``: float32, whose
    passes run in C."""
    if not specialise:
        return MODE_ROWS
    if OD == 1 and OH == 1 and OW == 1 and nrows[0] == D * H and _count_taps(0, kw, sw, dw, pw, 0, W) == W:
        return MODE_PLANE
    if native and rkp_narrow_fits(_ISA, W, OW, kw, sw, dw, pw):
        return MODE_NARROW
    if (D == 1 and kd == 1 and OD == 1 and sh == 1 and sw == 1 and dh == 1 and dw == 1
            and OH == H and OW == W and H >= kh and W >= kw):
        return MODE_SAME
    return MODE_ROWS


# ---------------------------------------------------------------------------- max passes


cdef struct _PoolPlan:
    int* nrows          # real input rows per output row (see _row_plan)
    Py_ssize_t* offs    # their offsets
    Py_ssize_t* rel     # (i - ph) * W per vertical tap i
    int mode            # MODE_* (see _choose_mode)
    Py_ssize_t L        # padded scratch row length
    Py_ssize_t G        # scratch rows per group (row mode)
    Py_ssize_t B        # planes per block ("same" mode)
    Py_ssize_t n_tmp    # scratch elements the pass needs


cdef void _pool_plan_free(_PoolPlan* pp) noexcept:
    free(pp.nrows)
    free(pp.offs)
    free(pp.rel)
    pp.nrows = NULL
    pp.offs = NULL
    pp.rel = NULL


cdef int _pool_plan(_PoolPlan* pp, str who, Py_ssize_t P, Py_ssize_t yP, Py_ssize_t D, Py_ssize_t H,
                    Py_ssize_t W, Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW, int kd, int kh, int kw,
                    int sd, int sh, int sw, int dd, int dh, int dw, int pd, int ph, int pw,
                    Py_ssize_t p0, Py_ssize_t p1, bint specialise, bint native) except -1:
    """The setup max_pool and avg_pool share: argument checks, the row plan, the pass mode
    and the scratch sizes.  Returns 0 when there is nothing to compute (nothing
    allocated), else 1 with ``pp``'s arrays allocated (free them with _pool_plan_free)."""
    cdef Py_ssize_t i, nq = OD * OH, HW = H * W, per = <Py_ssize_t> kd * kh
    pp.nrows = NULL
    pp.offs = NULL
    pp.rel = NULL
    if yP != P:
        raise ValueError(f"{who}: input and output plane counts differ")
    if not (0 <= p0 <= p1 <= P):
        raise ValueError(f"{who}: plane range out of bounds")
    if p0 == p1 or nq == 0 or OW == 0:
        return 0
    pp.nrows = <int*> malloc(nq * sizeof(int))
    pp.offs = <Py_ssize_t*> malloc(max(nq * per, 1) * sizeof(Py_ssize_t))
    pp.rel = <Py_ssize_t*> malloc(kh * sizeof(Py_ssize_t))
    if pp.nrows == NULL or pp.offs == NULL or pp.rel == NULL:
        _pool_plan_free(pp)
        raise MemoryError()
    _row_plan(D, H, W, OD, OH, kd, kh, sd, sh, dd, dh, pd, ph, pp.nrows, pp.offs)
    for i in range(kh):
        pp.rel[i] = (i - ph) * W
    pp.mode = _choose_mode(D, H, W, OD, OH, OW, kd, kh, kw, sh, sw, dh, dw, pw, pp.nrows, specialise, native)
    pp.L = _scratch_len(W, OW, kw, sw, dw, pw)
    # Row mode: up to G padded scratch rows (about 16 KB), all vertical results of a
    # group before its horizontal pass, so loads never wait on just-stored data.
    # "Same" mode: blocks of B planes (about 16 KB) in each flat loop.
    pp.G = max(1, min(nq, 4096 // pp.L))
    pp.B = max(1, min(p1 - p0, 4096 // HW)) if pp.mode == MODE_SAME else 1
    pp.n_tmp = max(pp.G * pp.L, pp.B * HW)
    return 1


cdef inline void _vert_max(max_t* dst, const max_t* base, const Py_ssize_t* offs, int nr,
                           Py_ssize_t n, bint spec) noexcept nogil:
    """dst[0:n] = element-wise max of the nr rows ``base + offs[j]``, in order (nr >= 1).  float32
    runs the C passes (rk_pooling.c, per SIMD level), other dtypes the loops below."""
    if max_t is float:
        rkp_vert_max(_ISA, dst, base, offs, nr, n, spec)
    else:
        _vert_max_loops(dst, base, offs, nr, n, spec)


cdef inline void _vert_max_loops(max_t* dst, const max_t* base, const Py_ssize_t* offs, int nr,
                                 Py_ssize_t n, bint spec) noexcept nogil:
    cdef const max_t* a = base + offs[0]
    cdef const max_t* b
    cdef const max_t* c
    cdef Py_ssize_t i
    cdef int j
    cdef max_t u, v
    if nr == 1:
        memcpy(dst, a, n * sizeof(max_t))
        return
    b = base + offs[1]
    if spec and nr == 3:
        c = base + offs[2]
        for i in range(n):
            u = a[i]
            v = b[i]
            u = v if v > u else u
            v = c[i]
            dst[i] = v if v > u else u
        return
    for i in range(n):
        u = a[i]
        v = b[i]
        dst[i] = v if v > u else u
    for j in range(2, nr):
        c = base + offs[j]
        for i in range(n):
            u = dst[i]
            v = c[i]
            dst[i] = v if v > u else u


cdef inline void _horiz_max(max_t* out, const max_t* t, Py_ssize_t OW, int kw, int sw, int dw,
                            bint spec) noexcept nogil:
    """out[o] = max of t[o*sw + k*dw] over k in [0, kw), taps in order.  float32 runs the C
    passes, as in _vert_max."""
    if max_t is float:
        rkp_horiz_max(_ISA, out, t, OW, kw, sw, dw, spec)
    else:
        _horiz_max_loops(out, t, OW, kw, sw, dw, spec)


cdef inline void _horiz_max_loops(max_t* out, const max_t* t, Py_ssize_t OW, int kw, int sw, int dw,
                                  bint spec) noexcept nogil:
    cdef Py_ssize_t o
    cdef int k
    cdef max_t u, v
    cdef const max_t* src
    if spec and dw == 1:
        if kw == 3 and sw == 2:
            for o in range(OW):
                u = t[2 * o]
                v = t[2 * o + 1]
                u = v if v > u else u
                v = t[2 * o + 2]
                out[o] = v if v > u else u
            return
        if kw == 3 and sw == 1:
            for o in range(OW):
                u = t[o]
                v = t[o + 1]
                u = v if v > u else u
                v = t[o + 2]
                out[o] = v if v > u else u
            return
        if kw == 2 and sw == 2:
            for o in range(OW):
                u = t[2 * o]
                v = t[2 * o + 1]
                out[o] = v if v > u else u
            return
        if kw == 2 and sw == 1:
            for o in range(OW):
                u = t[o]
                v = t[o + 1]
                out[o] = v if v > u else u
            return
    if OW >= 8 and sw == 1:
        # Tap by tap over the whole row: no loop-carried dependency, vectorises.
        memcpy(out, t, OW * sizeof(max_t))
        for k in range(1, kw):
            src = t + k * dw
            for o in range(OW):
                u = out[o]
                v = src[o]
                out[o] = v if v > u else u
        return
    for o in range(OW):
        src = t + o * sw
        u = src[0]
        for k in range(1, kw):
            v = src[k * dw]
            u = v if v > u else u
        out[o] = u


cdef void _edges_max(max_t* out, const max_t* v, Py_ssize_t H, Py_ssize_t W, int kw, int pw,
                    max_t empty) noexcept nogil:
    """Stride-1 "same" pooling: recompute the columns whose window crosses a row edge
    (the first pw and last kw-1-pw of each of the H rows of out and v, row stride W)
    exactly as _horiz_max over a padded row computes them (padding = ``empty``)."""
    cdef Py_ssize_t o, q
    cdef int k, klo, khi
    cdef max_t u, w
    cdef const max_t* src
    if kw == 3 and pw == 1:
        # The common 3x3 pad-1 case, unrolled: taps (pad, v0, v1) and (v[W-2], v[W-1], pad).
        for q in range(H):
            src = v + q * W
            u = empty
            w = src[0]
            u = w if w > u else u
            w = src[1]
            out[q * W] = w if w > u else u
            u = src[W - 2]
            w = src[W - 1]
            out[q * W + W - 1] = w if w > u else u
        return
    o = 0
    while o < W:
        if o == pw and W - (kw - 1 - pw) > pw:
            o = W - (kw - 1 - pw)  # skip the interior columns
            continue
        # Taps [klo, khi) are real; the others read padding.  Leading padding taps
        # leave ``empty``; trailing ones never win.
        klo = <int> (pw - o) if o < pw else 0
        khi = <int> (W + pw - o) if W + pw - o < kw else kw
        for q in range(H):
            src = v + q * W + o - pw
            u = src[klo] if klo == 0 else empty
            for k in range(klo if klo > 0 else 1, khi):
                w = src[k]
                u = w if w > u else u
            out[q * W + o] = u
        o += 1


cdef inline max_t _plane_max(const max_t* a, Py_ssize_t n, max_t empty) noexcept nogil:
    """Max of a[0:n] in 8 interleaved lanes (exact: max does not depend on the grouping)."""
    cdef max_t acc[8]
    cdef Py_ssize_t i, n8 = n - n % 8
    cdef int j
    cdef max_t u, v
    for j in range(8):
        acc[j] = empty
    i = 0
    while i < n8:
        for j in range(8):
            u = acc[j]
            v = a[i + j]
            acc[j] = v if v > u else u
        i += 8
    u = empty
    for j in range(8):
        v = acc[j]
        u = v if v > u else u
    for i in range(n8, n):
        v = a[i]
        u = v if v > u else u
    return u


cdef struct _Job:
    # one max_pool / avg_pool call, shared by the ranges of planes its threads run
    const void* x       # plane 0 of the input (D x H x W values per plane)
    void* y             # plane 0 of the output (nq x OW values per plane)
    const void* empty   # max: the value of a window with no real element (the dtype's)
    const float* inv    # avg: 1 / count per output position (B copies in "same" mode)
    _PoolPlan* pp
    Py_ssize_t p0       # the call's first plane: range [a, b) is planes p0 + a .. p0 + b
    Py_ssize_t H, W, HW, OW, nq, per
    int D, kh, kw, sw, dw, ph, pw, peh, pew
    int dtype           # max: which max_t (_DT_*)
    bint specialise


cdef enum:
    _DT_FLOAT = 0
    _DT_DOUBLE = 1
    _DT_INT8 = 2
    _DT_UINT8 = 3
    _DT_INT32 = 4
    _DT_INT64 = 5


cdef int _max_planes(const max_t* x, max_t* y, const _Job* j, max_t empty_value, Py_ssize_t p0,
                     Py_ssize_t p1) noexcept nogil:
    """Planes [p0, p1) of a max_pool call (see its docstring); -1 when out of memory."""
    cdef const _PoolPlan* pp = j.pp
    cdef Py_ssize_t H = j.H, W = j.W, HW = j.HW, OW = j.OW, nq = j.nq, per = j.per
    cdef Py_ssize_t D = j.D, L = pp.L, G = pp.G, B = pp.B
    cdef int kh = j.kh, kw = j.kw, sw = j.sw, dw = j.dw, ph = j.ph, pw = j.pw, pew = j.pew, peh = j.peh
    cdef bint specialise = j.specialise
    cdef const int* nrows = pp.nrows
    cdef const Py_ssize_t* offs = pp.offs
    cdef const Py_ssize_t* rel = pp.rel
    cdef Py_ssize_t p, q, q0, g, ng, nb, b, n, o
    cdef int nr
    cdef max_t* yrow
    cdef const max_t* plane
    cdef max_t* tmp
    if pp.mode == MODE_NARROW:
        if max_t is float:
            rkp_narrow_pool(_ISA, 1, y + p0 * nq * OW, x + p0 * D * HW, p1 - p0, D * HW, W, OW, nq, nrows, offs,
                            <int> per, kw, sw, pw, empty_value, NULL)
        return 0
    tmp = <max_t*> malloc(pp.n_tmp * sizeof(max_t))
    if tmp == NULL:
        return -1
    for o in range(pp.n_tmp):
        tmp[o] = empty_value
    if pp.mode == MODE_SAME:
        # tmp holds a block's vertical maxima (nb planes of H x W), then y the
        # horizontal ones; the first/last rows of each plane and the columns whose
        # window crosses a row edge are redone plane by plane.
        p = p0
        while p < p1:
            nb = min(B, p1 - p)
            n = nb * HW
            plane = x + p * HW
            yrow = y + p * HW
            _vert_max(tmp + ph * W, plane + ph * W, rel, kh, n - (ph + peh) * W, True)
            for b in range(nb):
                for q in range(ph):
                    _vert_max(tmp + b * HW + q * W, plane + b * HW, offs + q * per, nrows[q], W, True)
                for q in range(H - peh, H):
                    _vert_max(tmp + b * HW + q * W, plane + b * HW, offs + q * per, nrows[q], W, True)
            _horiz_max(yrow + pw, tmp, n - pw - pew, kw, 1, 1, True)
            for b in range(nb):
                _edges_max(yrow + b * HW, tmp + b * HW, H, W, kw, pw, empty_value)
            p += nb
    else:
        for p in range(p0, p1):
            plane = x + p * D * HW
            yrow = y + p * nq * OW
            if pp.mode == MODE_PLANE:
                yrow[0] = _plane_max(plane, D * HW, empty_value)
                continue
            q0 = 0
            while q0 < nq:
                ng = min(G, nq - q0)
                for g in range(ng):
                    nr = nrows[q0 + g]
                    if nr > 0:
                        _vert_max(tmp + g * L + pw, plane, offs + (q0 + g) * per, nr, W, specialise)
                for g in range(ng):
                    if nrows[q0 + g] == 0:
                        for o in range(OW):
                            yrow[o] = empty_value
                    else:
                        _horiz_max(yrow, tmp + g * L, OW, kw, sw, dw, specialise)
                    yrow += OW
                q0 += G
    free(tmp)
    return 0


cdef int _max_range(void* ctx, int64_t a, int64_t b, int slot) noexcept nogil:
    """rk_range_fn of max_pool: planes p0 + [a, b) in the call's dtype."""
    cdef const _Job* j = <const _Job*> ctx
    cdef Py_ssize_t p0 = j.p0 + a, p1 = j.p0 + b
    if j.dtype == _DT_FLOAT:
        return _max_planes(<const float*> j.x, <float*> j.y, j, (<const float*> j.empty)[0], p0, p1)
    if j.dtype == _DT_DOUBLE:
        return _max_planes(<const double*> j.x, <double*> j.y, j, (<const double*> j.empty)[0], p0, p1)
    if j.dtype == _DT_INT8:
        return _max_planes(<const signed char*> j.x, <signed char*> j.y, j, (<const signed char*> j.empty)[0], p0, p1)
    if j.dtype == _DT_UINT8:
        return _max_planes(<const unsigned char*> j.x, <unsigned char*> j.y, j, (<const unsigned char*> j.empty)[0],
                           p0, p1)
    if j.dtype == _DT_INT32:
        return _max_planes(<const int*> j.x, <int*> j.y, j, (<const int*> j.empty)[0], p0, p1)
    return _max_planes(<const long long*> j.x, <long long*> j.y, j, (<const long long*> j.empty)[0], p0, p1)


cdef void _job_geometry(_Job* job, _PoolPlan* pp, Py_ssize_t p0, Py_ssize_t D, Py_ssize_t H, Py_ssize_t W,
                        Py_ssize_t OD, Py_ssize_t OH, Py_ssize_t OW, int kd, int kh, int kw, int sw, int dw,
                        int ph, int pw, bint specialise) noexcept:
    job.pp = pp
    job.p0 = p0
    job.D, job.H, job.W, job.HW, job.OW, job.nq = D, H, W, H * W, OW, OD * OH
    job.per = <Py_ssize_t> kd * kh
    job.kh, job.kw, job.sw, job.dw, job.ph, job.pw = kh, kw, sw, dw, ph, pw
    job.peh, job.pew = kh - 1 - ph, kw - 1 - pw
    job.specialise = specialise


cdef int _run_planes(rk_range_fn fn, _Job* job, rk_pool* p, Py_ssize_t planes, int64_t min_chunk) noexcept nogil:
    """fn over the job's planes, on the caller alone (p NULL) or shared out over p's threads."""
    if p == NULL:
        return fn(job, 0, planes, 0)
    return _POOL_API.run(p, fn, job, planes, min_chunk if min_chunk > 1 else 1)


def max_pool(const max_t[:, :, :, ::1] x, max_t[:, :, :, ::1] y,
             int kd, int kh, int kw, int sd, int sh, int sw, int dd, int dh, int dw,
             int pd, int ph, int pw, max_t empty_value,
             Py_ssize_t p0, Py_ssize_t p1, bint specialise=True, pool=None, int64_t min_chunk=1):
    """Max over each pooling window of planes ``[p0, p1)``, written into ``y``.

    x: (P, D, H, W) input, C-contiguous.  y: (P, OD, OH, OW) output, C-contiguous; planes
    ``p0:p1`` are written fully.  Padding never wins: only real elements are compared,
    and a window with no real element gets ``empty_value``.  ``specialise=False`` forces
    the generic row loops (same results; for tests).  ``pool``: a ``WorkerPool.handle``
    capsule (None: the caller alone) whose threads share the planes, at least ``min_chunk``
    each, from compiled code (no GIL hand-off); a plane's result never depends on the split.
    Releases the GIL.
    """
    cdef Py_ssize_t P = x.shape[0], D = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OD = y.shape[1], OH = y.shape[2], OW = y.shape[3]
    cdef _PoolPlan pp
    cdef _Job job
    cdef rk_pool* p = _pool_from(pool)
    cdef int rc
    if not _pool_plan(&pp, "max_pool", P, y.shape[0], D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw,
                      dd, dh, dw, pd, ph, pw, p0, p1, specialise, max_t is float):
        return None
    _job_geometry(&job, &pp, p0, D, H, W, OD, OH, OW, kd, kh, kw, sw, dw, ph, pw, specialise)
    job.x = &x[0, 0, 0, 0]
    job.y = &y[0, 0, 0, 0]
    job.empty = &empty_value
    job.inv = NULL
    if max_t is float:
        job.dtype = _DT_FLOAT
    elif max_t is double:
        job.dtype = _DT_DOUBLE
    elif sizeof(max_t) == 1:
        job.dtype = _DT_INT8 if <max_t> -1 < 0 else _DT_UINT8
    elif sizeof(max_t) == 4:
        job.dtype = _DT_INT32
    else:
        job.dtype = _DT_INT64
    with nogil:
        rc = _run_planes(_max_range, &job, p, p1 - p0, min_chunk)
    _pool_plan_free(&pp)
    if rc:
        raise MemoryError()
    return None


# ---------------------------------------------------------------------------- average passes


cdef inline void _vert_sum(float* dst, const float* base, const Py_ssize_t* offs, int nr,
                           Py_ssize_t n, bint spec) noexcept nogil:
    """dst[0:n] = element-wise sum of the nr rows ``base + offs[j]``, added in order (nr >= 1)."""
    rkp_vert_sum(_ISA, dst, base, offs, nr, n, spec)


cdef inline void _horiz_avg(float* out, const float* t, Py_ssize_t OW, int kw, int sw, int dw,
                            const float* inv, bint spec) noexcept nogil:
    """out[o] = (sum of t[o*sw + k*dw] over k in [0, kw), in order) * inv[o]."""
    rkp_horiz_avg(_ISA, out, t, OW, kw, sw, dw, inv, spec)


cdef void _edges_avg(float* out, const float* v, Py_ssize_t H, Py_ssize_t W, int kw, int pw,
                    const float* inv) noexcept nogil:
    """Stride-1 "same" pooling: recompute the columns whose window crosses a row edge
    (the first pw and last kw-1-pw of each of the H rows of out, v and inv, row stride
    W) exactly as _horiz_avg over a zero-padded row computes them."""
    cdef Py_ssize_t o, q
    cdef int k, klo, khi
    cdef float acc, zero = 0
    cdef const float* src
    if kw == 3 and pw == 1:
        # The common 3x3 pad-1 case, unrolled: taps (0, v0, v1) and (v[W-2], v[W-1], 0).
        for q in range(H):
            src = v + q * W
            out[q * W] = ((zero + src[0]) + src[1]) * inv[q * W]
            out[q * W + W - 1] = ((src[W - 2] + src[W - 1]) + zero) * inv[q * W + W - 1]
        return
    o = 0
    while o < W:
        if o == pw and W - (kw - 1 - pw) > pw:
            o = W - (kw - 1 - pw)  # skip the interior columns
            continue
        # Taps [klo, khi) are real, the others add 0.0: leading ones leave 0.0, trailing
        # ones are one more "+ 0.0" (which only turns a -0.0 sum into +0.0).
        klo = <int> (pw - o) if o < pw else 0
        khi = <int> (W + pw - o) if W + pw - o < kw else kw
        for q in range(H):
            src = v + q * W + o - pw
            acc = src[klo] if klo == 0 else 0
            for k in range(klo if klo > 0 else 1, khi):
                acc = acc + src[k]
            if khi < kw:
                acc = acc + 0.0
            out[q * W + o] = acc * inv[q * W + o]
        o += 1


cdef inline float _plane_sum(const float* a, Py_ssize_t n) noexcept nogil:
    """Sum of a[0:n]: 8 interleaved partial sums (lane j takes a[j], a[j+8]...), combined pairwise."""
    cdef float acc[8]
    cdef Py_ssize_t i, n8 = n - n % 8
    cdef int j
    cdef float total
    for j in range(8):
        acc[j] = 0
    i = 0
    while i < n8:
        for j in range(8):
            acc[j] = acc[j] + a[i + j]
        i += 8
    total = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    for i in range(n8, n):
        total = total + a[i]
    return total


cdef int _avg_range(void* ctx, int64_t a, int64_t b, int slot) noexcept nogil:
    """rk_range_fn of avg_pool: planes p0 + [a, b) (see its docstring); -1 when out of memory."""
    cdef const _Job* j = <const _Job*> ctx
    cdef const _PoolPlan* pp = j.pp
    cdef const float* x = <const float*> j.x
    cdef float* y = <float*> j.y
    cdef const float* inv = j.inv
    cdef Py_ssize_t H = j.H, W = j.W, HW = j.HW, OW = j.OW, nq = j.nq, per = j.per
    cdef Py_ssize_t D = j.D, L = pp.L, G = pp.G, B = pp.B
    cdef int kh = j.kh, kw = j.kw, sw = j.sw, dw = j.dw, ph = j.ph, pw = j.pw, pew = j.pew, peh = j.peh
    cdef bint specialise = j.specialise
    cdef const int* nrows = pp.nrows
    cdef const Py_ssize_t* offs = pp.offs
    cdef const Py_ssize_t* rel = pp.rel
    cdef Py_ssize_t p0 = j.p0 + a, p1 = j.p0 + b
    cdef Py_ssize_t p, q, q0, g, ng, nb, bb, n, o
    cdef int nr
    cdef float* yrow
    cdef const float* plane
    cdef float* tmp
    if pp.mode == MODE_NARROW:
        rkp_narrow_pool(_ISA, 0, y + p0 * nq * OW, x + p0 * D * HW, p1 - p0, D * HW, W, OW, nq, nrows, offs,
                        <int> per, kw, sw, pw, 0, inv)
        return 0
    tmp = <float*> malloc(pp.n_tmp * sizeof(float))
    if tmp == NULL:
        return -1
    for o in range(pp.n_tmp):
        tmp[o] = 0
    if pp.mode == MODE_SAME:
        # As in max_pool: a block's vertical sums in tmp, then y; plane edges redone.
        p = p0
        while p < p1:
            nb = min(B, p1 - p)
            n = nb * HW
            plane = x + p * HW
            yrow = y + p * HW
            _vert_sum(tmp + ph * W, plane + ph * W, rel, kh, n - (ph + peh) * W, True)
            for bb in range(nb):
                for q in range(ph):
                    _vert_sum(tmp + bb * HW + q * W, plane + bb * HW, offs + q * per, nrows[q], W, True)
                for q in range(H - peh, H):
                    _vert_sum(tmp + bb * HW + q * W, plane + bb * HW, offs + q * per, nrows[q], W, True)
            _horiz_avg(yrow + pw, tmp, n - pw - pew, kw, 1, 1, inv + pw, True)
            for bb in range(nb):
                _edges_avg(yrow + bb * HW, tmp + bb * HW, H, W, kw, pw, inv)
            p += nb
    else:
        for p in range(p0, p1):
            plane = x + p * D * HW
            yrow = y + p * nq * OW
            if pp.mode == MODE_PLANE:
                yrow[0] = _plane_sum(plane, D * HW) * inv[0]
                continue
            q0 = 0
            while q0 < nq:
                ng = min(G, nq - q0)
                for g in range(ng):
                    nr = nrows[q0 + g]
                    if nr > 0:
                        _vert_sum(tmp + g * L + pw, plane, offs + (q0 + g) * per, nr, W, specialise)
                for g in range(ng):
                    if nrows[q0 + g] == 0:
                        for o in range(OW):
                            yrow[o] = 0
                    else:
                        _horiz_avg(yrow, tmp + g * L, OW, kw, sw, dw, inv + (q0 + g) * OW, specialise)
                    yrow += OW
                q0 += G
    free(tmp)
    return 0


def avg_pool(const float[:, :, :, ::1] x, float[:, :, :, ::1] y,
             int kd, int kh, int kw, int sd, int sh, int sw, int dd, int dh, int dw,
             int pd, int ph, int pw, int ped, int peh, int pew, bint count_include_pad,
             Py_ssize_t p0, Py_ssize_t p1, bint specialise=True, pool=None, int64_t min_chunk=1):
    """Mean over each pooling window of planes ``[p0, p1)``, written into ``y``.

    x: (P, D, H, W) float32, C-contiguous.  y: (P, OD, OH, OW) float32, C-contiguous;
    planes ``p0:p1`` are written fully.  The sum runs over the window's real elements
    (padding adds 0.0) and is multiplied by the float32 reciprocal of the number of real
    elements, or with ``count_include_pad`` of the number of taps inside the padded
    extent (begin pads ``pd, ph, pw``, end pads ``ped, peh, pew``; a ceil-mode overhang
    past the end padding is never counted).  A window with nothing to count gives 0.
    ``specialise=False`` forces the generic row loops (for tests; see the module
    docstring for when results may differ).  ``pool`` and ``min_chunk``: as in
    :func:`max_pool`.  Releases the GIL.
    """
    cdef Py_ssize_t P = x.shape[0], D = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OD = y.shape[1], OH = y.shape[2], OW = y.shape[3]
    cdef Py_ssize_t q, b, o, n, n_inv, nq = OD * OH, HW = H * W
    cdef _PoolPlan pp
    cdef _Job job
    cdef rk_pool* p = _pool_from(pool)
    cdef float* inv = NULL
    cdef float* wc = NULL
    cdef double rc
    cdef int failed
    if not _pool_plan(&pp, "avg_pool", P, y.shape[0], D, H, W, OD, OH, OW, kd, kh, kw, sd, sh, sw,
                      dd, dh, dw, pd, ph, pw, p0, p1, specialise, True):
        return None
    # in "same" mode inv holds B copies of the plane's reciprocals, so the block's
    # horizontal loop can scale as it goes
    n_inv = max(nq * OW, pp.B * HW)
    inv = <float*> malloc(n_inv * sizeof(float))
    wc = <float*> malloc(OW * sizeof(float))
    if inv == NULL or wc == NULL:
        _pool_plan_free(&pp)
        free(inv)
        free(wc)
        raise MemoryError()
    _job_geometry(&job, &pp, p0, D, H, W, OD, OH, OW, kd, kh, kw, sw, dw, ph, pw, specialise)
    job.x = &x[0, 0, 0, 0]
    job.y = &y[0, 0, 0, 0]
    job.empty = NULL
    job.inv = inv
    job.dtype = _DT_FLOAT
    with nogil:
        # 1 / count per output position.  A zero count only occurs where the sum is 0
        # (no real element), which then stays 0.
        for o in range(OW):
            if count_include_pad:
                n = _count_taps(o, kw, sw, dw, pw, -pw, W + pew)
            else:
                n = _count_taps(o, kw, sw, dw, pw, 0, W)
            wc[o] = <float> n
        for q in range(nq):
            if count_include_pad:
                rc = <double> (_count_taps(q // OH, kd, sd, dd, pd, -pd, D + ped)
                               * _count_taps(q % OH, kh, sh, dh, ph, -ph, H + peh))
            else:
                rc = <double> pp.nrows[q]
            for o in range(OW):
                inv[q * OW + o] = <float> (1.0 / (rc * wc[o])) if rc * wc[o] > 0 else 0
        if pp.mode == MODE_SAME:
            for b in range(1, pp.B):
                memcpy(inv + b * HW, inv, HW * sizeof(float))
        failed = _run_planes(_avg_range, &job, p, p1 - p0, min_chunk)
    _pool_plan_free(&pp)
    free(inv)
    free(wc)
    if failed:
        raise MemoryError()
    return None


# ---------------------------------------------------------------------------- max with indices


cdef inline void _row_argmax(const max_t* row, max_t* tv, int64_t* tc, Py_ssize_t OW, int sw, int dw, int pw,
                             const int64_t* lo, const int64_t* hi, max_t empty) noexcept nogil:
    """tv[o] = max of row over the W taps of output column o; tc[o] = its column (-1 if none)."""
    cdef Py_ssize_t o, k, c, best_c
    cdef max_t best, v
    for o in range(OW):
        best = empty
        best_c = -1
        c = o * sw - pw
        for k in range(lo[o], hi[o]):
            v = row[c + k * dw]
            if best_c < 0 or v > best:
                best = v
                best_c = c + k * dw
        tv[o] = best
        tc[o] = best_c


def max_pool_indices(const max_t[:, :, :, ::1] x, max_t[:, :, :, ::1] y, int64_t[:, :, :, ::1] idx,
                     int sd, int sh, int sw, int dd, int dh, int dw, int pd, int ph, int pw,
                     const int64_t[::1] d_lo, const int64_t[::1] d_hi,
                     const int64_t[::1] h_lo, const int64_t[::1] h_hi,
                     const int64_t[::1] w_lo, const int64_t[::1] w_hi,
                     max_t empty_value, bint col_major):
    """Max over each pooling window written into ``y``, and the argmax into ``idx``.

    x: (P, D, H, W) input, C-contiguous.  y, idx: (P, OD, OH, OW), written fully; idx
    (int64) receives the flat input index of each max: ``p*D*H*W + (z*H + r)*W + c``
    (row-major) or ``p*D*H*W + z + r*D + c*D*H`` when ``col_major``.  Output position
    ``o`` along an axis takes the taps ``[lo[o], hi[o])`` (those on real input).  Ties keep
    the first tap in row-major window order.  A window with no real input element gets
    ``empty_value`` (index -1).  Releases the GIL.
    """
    cdef Py_ssize_t P = x.shape[0], D = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t OD = y.shape[1], OH = y.shape[2], OW = y.shape[3]
    cdef Py_ssize_t p, od, oh, o, i, j, z, r, c, rows, trow_i
    cdef bint first
    cdef const max_t* plane
    cdef max_t* tv
    cdef max_t* trow
    cdef max_t* yrow
    cdef int64_t* tc
    cdef int64_t* tcrow
    cdef int64_t* irow
    cdef int64_t base, pos
    if y.shape[0] != P or d_lo.shape[0] != OD or h_lo.shape[0] != OH or w_lo.shape[0] != OW:
        raise ValueError("max_pool_indices: output or tap-range shapes do not match")
    if idx.shape[0] != P or idx.shape[1] != OD or idx.shape[2] != OH or idx.shape[3] != OW:
        raise ValueError("max_pool_indices: index output has the wrong shape")
    if P == 0 or OD == 0 or OH == 0 or OW == 0:
        return None
    rows = D * H
    tv = <max_t*> malloc(max(rows * OW, 1) * sizeof(max_t))
    tc = <int64_t*> malloc(max(rows * OW, 1) * sizeof(int64_t))
    if tv == NULL or tc == NULL:
        free(tv)
        free(tc)
        raise MemoryError()
    with nogil:
        for p in range(P):
            plane = &x[p, 0, 0, 0]
            for r in range(rows):
                _row_argmax(plane + r * W, tv + r * OW, tc + r * OW, OW, sw, dw, pw,
                            &w_lo[0], &w_hi[0], empty_value)
            base = p * D * H * W
            for od in range(OD):
                for oh in range(OH):
                    yrow = &y[p, od, oh, 0]
                    irow = &idx[p, od, oh, 0]
                    first = True
                    for i in range(d_lo[od], d_hi[od]):
                        z = od * sd - pd + i * dd
                        for j in range(h_lo[oh], h_hi[oh]):
                            r = oh * sh - ph + j * dh
                            trow_i = z * H + r
                            trow = tv + trow_i * OW
                            tcrow = tc + trow_i * OW
                            for o in range(OW):
                                if first or trow[o] > yrow[o]:
                                    yrow[o] = trow[o]
                                    irow[o] = -1 if tcrow[o] < 0 else trow_i * W + tcrow[o]
                            first = False
                    if first:
                        for o in range(OW):
                            yrow[o] = empty_value
                            irow[o] = -1
                        continue
                    for o in range(OW):
                        pos = irow[o]
                        if pos < 0:
                            continue
                        if col_major:
                            c = pos % W
                            r = (pos // W) % H
                            z = pos // (W * H)
                            irow[o] = base + z + r * D + c * D * H
                        else:
                            irow[o] = base + pos
    free(tv)
    free(tc)
    return None
