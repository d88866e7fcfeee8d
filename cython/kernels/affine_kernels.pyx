# cython: language_level=3
"""Per-channel affine transform with a fused activation, in one pass (float32).

``y[n, c, i] = act(x[n, c, i] * scale[c] + shift[c])`` over a C-contiguous
``(N, C, inner)`` view.  The product and the sum are rounded to float32 separately
(no fused multiply-add), so the result is bit for bit numpy's
``x * scale + shift`` in float32 followed by the activation.  The loops are built
without FMA code generation: the baseline (SSE2) version cannot contract, and the
AVX2 clone picked at run time on x86-64 enables AVX2 only, not FMA, and turns
contraction off explicitly.
"""

cdef extern from *:
    """
    /* act kinds: 0 none, 1 clip to [lo, hi] as min(max(v, lo), hi) (Relu: lo = 0,
       hi = +inf), 2 LeakyRelu (v < 0 ? v * alpha : v).  The operand order keeps nan,
       like numpy's maximum / minimum. */
    #define RKA_BODY {                                                                     \
        for (long r = 0; r < rows; r++) {                                                  \
            const float s = scale[r % C], b = shift[r % C];                                \
            const float *xp = x + r * inner;                                               \
            float *yp = y + r * inner;                                                     \
            if (kind == 1) {                                                               \
                for (long i = 0; i < inner; i++) {                                         \
                    float v = xp[i] * s;                                                   \
                    v = v + b;                                                             \
                    v = lo > v ? lo : v;                                                   \
                    yp[i] = hi < v ? hi : v;                                               \
                }                                                                          \
            } else if (kind == 2) {                                                        \
                for (long i = 0; i < inner; i++) {                                         \
                    float v = xp[i] * s;                                                   \
                    v = v + b;                                                             \
                    yp[i] = v < 0.0f ? v * alpha : v;                                      \
                }                                                                          \
            } else {                                                                       \
                for (long i = 0; i < inner; i++) {                                         \
                    float v = xp[i] * s;                                                   \
                    yp[i] = v + b;                                                         \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
    }
    #define RKA_ARGS const float *x, float *y, long rows, long C, long inner,             \
                     const float *scale, const float *shift, int kind, float lo, float hi,  \
                     float alpha

    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    #define RKA_NOCONTRACT __attribute__((optimize("fp-contract=off", "no-trapping-math")))
    #define RKA_HAVE_AVX2 1
    #else
    #define RKA_NOCONTRACT
    #define RKA_HAVE_AVX2 0
    #endif

    RKA_NOCONTRACT static void rka_generic(RKA_ARGS) RKA_BODY
    #if RKA_HAVE_AVX2
    /* AVX2 without FMA: the separate multiply and add cannot be fused. */
    RKA_NOCONTRACT __attribute__((target("avx2"))) static void rka_avx2(RKA_ARGS) RKA_BODY
    #endif

    static void rka_channel_affine(RKA_ARGS) {
    #if RKA_HAVE_AVX2
        static int isa = -1;
        if (isa < 0) { __builtin_cpu_init(); isa = __builtin_cpu_supports("avx2") ? 1 : 0; }
        if (isa) { rka_avx2(x, y, rows, C, inner, scale, shift, kind, lo, hi, alpha); return; }
    #endif
        rka_generic(x, y, rows, C, inner, scale, shift, kind, lo, hi, alpha);
    }
    """
    void rka_channel_affine(const float *x, float *y, long rows, long C, long inner,
                            const float *scale, const float *shift, int kind, float lo, float hi,
                            float alpha) nogil


#: activation kinds of :func:`channel_affine`
ACT_NONE = 0
ACT_CLIP = 1
ACT_LEAKY = 2


def channel_affine(const float[:, :, ::1] x, const float[::1] scale, const float[::1] shift,
                   float[:, :, ::1] out, int kind=0, float lo=0.0, float hi=0.0, float alpha=0.0):
    """``out[n, c, i] = act(x[n, c, i] * scale[c] + shift[c])``, float32, no FMA.

    ``x`` and ``out`` are C-contiguous ``(N, C, inner)`` arrays of the same shape
    (``out`` may be ``x`` itself); ``scale`` / ``shift`` have length ``C``.  ``kind``:
    :data:`ACT_NONE`, :data:`ACT_CLIP` (``min(max(v, lo), hi)``; Relu is ``lo = 0,
    hi = inf``) or :data:`ACT_LEAKY` (``v * alpha`` where ``v < 0``).  Raises
    ValueError on mismatched shapes or an unknown ``kind``.  Releases the GIL.
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
    with nogil:
        rka_channel_affine(&x[0, 0, 0], &out[0, 0, 0], n * c, c, inner, &scale[0], &shift[0], kind, lo, hi, alpha)
