# cython: language_level=3
"""Per-channel affine transform with a fused activation, in one pass (float32).

``y[n, c, i] = act(x[n, c, i] * scale[c] + shift[c])`` over a C-contiguous
``(N, C, inner)`` view.  The product and the sum are rounded to float32 separately
(no fused multiply-add), so the result is bit for bit numpy's
``x * scale + shift`` in float32 followed by the activation.  The loops are built
without FMA code generation: the baseline (SSE2) version cannot contract, and the
AVX2 clone picked at run time on x86-64 enables AVX2 only, not FMA, and turns
contraction off explicitly.  Given a worker pool, the rows (an image's channel) are
shared out across its threads from compiled code; a row's values never depend on the split.
"""

from libc.stdint cimport int64_t

from rk_affine cimport rka_channel_affine

include "pool_handle.pxi"


cdef struct _Job:
    const float *x
    float *y
    long C, inner
    const float *scale
    const float *shift
    int kind
    float lo, hi, alpha


cdef int _rows(void *ctx, int64_t r0, int64_t r1, int slot) noexcept nogil:
    cdef _Job *j = <_Job *>ctx
    rka_channel_affine(j.x, j.y, r0, r1, j.C, j.inner, j.scale, j.shift, j.kind, j.lo, j.hi, j.alpha)
    return 0

#: activation kinds of :func:`channel_affine`
ACT_NONE = 0
ACT_CLIP = 1
ACT_LEAKY = 2


def channel_affine(const float[:, :, ::1] x, const float[::1] scale, const float[::1] shift,
                   float[:, :, ::1] out, int kind=0, float lo=0.0, float hi=0.0, float alpha=0.0,
                   pool=None, int64_t min_rows=1):
    """``out[n, c, i] = act(x[n, c, i] * scale[c] + shift[c])``, float32, no FMA.

    ``x`` and ``out`` are C-contiguous ``(N, C, inner)`` arrays of the same shape
    (``out`` may be ``x`` itself); ``scale`` / ``shift`` have length ``C``.  ``kind``:
    :data:`ACT_NONE`, :data:`ACT_CLIP` (``min(max(v, lo), hi)``; Relu is ``lo = 0,
    hi = inf``) or :data:`ACT_LEAKY` (``v * alpha`` where ``v < 0``).  ``pool``: a
    ``WorkerPool.handle`` capsule (None: the caller alone) whose threads share the N * C rows,
    at least ``min_rows`` each.  Raises ValueError on mismatched shapes or an unknown ``kind``.
    Releases the GIL.
    """
    cdef long n = x.shape[0], c = x.shape[1], inner = x.shape[2]
    if out.shape[0] != n or out.shape[1] != c or out.shape[2] != inner:
        raise ValueError(f"channel_affine: out has shape {(out.shape[0], out.shape[1], out.shape[2])}, expected {(n, c, inner)}")
    if scale.shape[0] != c or shift.shape[0] != c:
        raise ValueError(f"channel_affine: scale/shift have {scale.shape[0]}/{shift.shape[0]} values "
                         f"for {c} channels")
    if kind not in (ACT_NONE, ACT_CLIP, ACT_LEAKY):
        raise ValueError(f"channel_affine: unknown activation kind {kind}")
    if n * c * inner == 0:
        return
    cdef rk_pool *p = _pool_from(pool)
    cdef _Job job = _Job(&x[0, 0, 0], &out[0, 0, 0], c, inner, &scale[0], &shift[0], kind, lo, hi, alpha)
    with nogil:
        if p == NULL:
            _rows(&job, 0, n * c, 0)
        else:
            _POOL_API.run(p, _rows, &job, n * c, min_rows)
