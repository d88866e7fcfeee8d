/* One build of the pooling passes (included by rk_pooling.c once per SIMD level, with
 * RKP_SUFFIX naming it and RKP_ATTR its target).  The loops are plain C the compiler vectorises;
 * each keeps the order of operations rk_pooling.h states. */

#define RKP_CAT2(a, b) a##_##b
#define RKP_CAT(a, b) RKP_CAT2(a, b)
#define RKP_NAME(f) RKP_CAT(f, RKP_SUFFIX)
#define RKP_GT(u, v) ((v) > (u) ? (v) : (u))   /* keeps u unless v compares greater */

RKP_ATTR static void RKP_NAME(rkp_max3)(float *restrict d, const float *restrict a, const float *restrict b,
                                        const float *restrict c, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        float u = RKP_GT(a[i], b[i]);
        d[i] = RKP_GT(u, c[i]);
    }
}

RKP_ATTR static void RKP_NAME(rkp_max2)(float *restrict d, const float *restrict a, const float *restrict b,
                                        ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) d[i] = RKP_GT(a[i], b[i]);
}

RKP_ATTR static void RKP_NAME(rkp_max_into)(float *restrict d, const float *restrict c, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) d[i] = RKP_GT(d[i], c[i]);
}

/* d[0:n] = the nr >= 1 rows base + offs[j] combined in order by OP's three-row, two-row and
   in-place passes (OP3, OP2, OP_into) */
#ifndef RKP_VERT_BODY
#define RKP_VERT_BODY(OP)                                                                       \
    {                                                                                           \
        if (nr == 1) {                                                                          \
            memcpy(d, base + offs[0], (size_t)n * sizeof(float));                               \
        } else if (spec && nr == 3) {                                                           \
            RKP_NAME(OP##3)(d, base + offs[0], base + offs[1], base + offs[2], n);              \
        } else {                                                                                \
            RKP_NAME(OP##2)(d, base + offs[0], base + offs[1], n);                              \
            for (int j = 2; j < nr; j++) RKP_NAME(OP##_into)(d, base + offs[j], n);             \
        }                                                                                       \
    }
#endif

RKP_ATTR static void RKP_NAME(rkp_vert_max)(float *d, const float *base, const ptrdiff_t *offs, int nr,
                                            ptrdiff_t n, int spec) RKP_VERT_BODY(rkp_max)

RKP_ATTR static void RKP_NAME(rkp_sum3)(float *restrict d, const float *restrict a, const float *restrict b,
                                        const float *restrict c, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) d[i] = (a[i] + b[i]) + c[i];
}

RKP_ATTR static void RKP_NAME(rkp_sum2)(float *restrict d, const float *restrict a, const float *restrict b,
                                        ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) d[i] = a[i] + b[i];
}

RKP_ATTR static void RKP_NAME(rkp_sum_into)(float *restrict d, const float *restrict c, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) d[i] = d[i] + c[i];
}

RKP_ATTR static void RKP_NAME(rkp_vert_sum)(float *d, const float *base, const ptrdiff_t *offs, int nr,
                                            ptrdiff_t n, int spec) RKP_VERT_BODY(rkp_sum)

RKP_ATTR static void RKP_NAME(rkp_horiz_max)(float *restrict out, const float *restrict t, ptrdiff_t OW, int kw,
                                             int sw, int dw, int spec) {
    if (spec && dw == 1 && (kw == 2 || kw == 3) && (sw == 1 || sw == 2)) {
        if (kw == 3 && sw == 2) {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = RKP_GT(RKP_GT(t[2 * o], t[2 * o + 1]), t[2 * o + 2]);
        } else if (kw == 3) {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = RKP_GT(RKP_GT(t[o], t[o + 1]), t[o + 2]);
        } else if (sw == 2) {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = RKP_GT(t[2 * o], t[2 * o + 1]);
        } else {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = RKP_GT(t[o], t[o + 1]);
        }
        return;
    }
    if (OW >= 8 && sw == 1) {  /* tap by tap over the whole row: no loop-carried dependency */
        memcpy(out, t, (size_t)OW * sizeof(float));
        for (int k = 1; k < kw; k++) RKP_NAME(rkp_max_into)(out, t + (ptrdiff_t)k * dw, OW);
        return;
    }
    for (ptrdiff_t o = 0; o < OW; o++) {
        const float *src = t + o * sw;
        float u = src[0];
        for (int k = 1; k < kw; k++) u = RKP_GT(u, src[(ptrdiff_t)k * dw]);
        out[o] = u;
    }
}

RKP_ATTR static void RKP_NAME(rkp_horiz_avg)(float *restrict out, const float *restrict t, ptrdiff_t OW, int kw,
                                             int sw, int dw, const float *restrict inv, int spec) {
    if (spec && dw == 1 && (kw == 2 || kw == 3) && (sw == 1 || sw == 2)) {
        if (kw == 3 && sw == 2) {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = ((t[2 * o] + t[2 * o + 1]) + t[2 * o + 2]) * inv[o];
        } else if (kw == 3) {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = ((t[o] + t[o + 1]) + t[o + 2]) * inv[o];
        } else if (sw == 2) {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = (t[2 * o] + t[2 * o + 1]) * inv[o];
        } else {
            for (ptrdiff_t o = 0; o < OW; o++) out[o] = (t[o] + t[o + 1]) * inv[o];
        }
        return;
    }
    if (OW >= 8 && sw == 1) {
        memcpy(out, t, (size_t)OW * sizeof(float));
        for (int k = 1; k < kw; k++) RKP_NAME(rkp_sum_into)(out, t + (ptrdiff_t)k * dw, OW);
        for (ptrdiff_t o = 0; o < OW; o++) out[o] = out[o] * inv[o];
        return;
    }
    for (ptrdiff_t o = 0; o < OW; o++) {
        const float *src = t + o * sw;
        float acc = src[0];
        for (int k = 1; k < kw; k++) acc = acc + src[(ptrdiff_t)k * dw];
        out[o] = acc * inv[o];
    }
}

#undef RKP_SUFFIX
#undef RKP_ATTR
