/*
 * fk_tensor.c -- element types, float16, platform constants, tensor layouts (NCHW, NHWC with
 * row/height strides, NC1HWC2) and tensor attributes for the fake librknnrt.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fk_internal.h"

uint16_t fk_f2h(float f) {
    uint32_t x, sign, mant;
    int32_t exp;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    exp = (int32_t)((x >> 23) & 0xFF);
    mant = x & 0x7FFFFFu;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u)); /* inf / nan */
    exp = exp - 127 + 15;
    if (exp >= 0x1F) return (uint16_t)(sign | 0x7C00u); /* overflow -> inf */
    if (exp <= 0) {                                      /* subnormal or zero */
        uint32_t shift, half, rem, out;
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        shift = (uint32_t)(14 - exp);
        out = mant >> shift;
        rem = mant & ((1u << shift) - 1u);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (out & 1u))) out++;
        return (uint16_t)(sign | out);
    }
    {
        uint32_t out = ((uint32_t)exp << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (out & 1u))) out++; /* may carry into exp: still right */
        return (uint16_t)(sign | out);
    }
}

float fk_h2f(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, x;
    float f;
    if (exp == 0) {
        f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    if (exp == 0x1F) x = sign | 0x7F800000u | (mant << 13);
    else x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    memcpy(&f, &x, 4);
    return f;
}

size_t fk_type_size(rknn_tensor_type t) {
    switch (t) {
        case RKNN_TENSOR_FLOAT32: case RKNN_TENSOR_INT32: case RKNN_TENSOR_UINT32: return 4;
        case RKNN_TENSOR_FLOAT16: case RKNN_TENSOR_INT16: case RKNN_TENSOR_UINT16: case RKNN_TENSOR_BFLOAT16: return 2;
        case RKNN_TENSOR_INT64: return 8;
        default: return 1;
    }
}

size_t fk_elems(uint32_t n_dims, const uint32_t* dims) {
    size_t n = 1;
    uint32_t i;
    for (i = 0; i < n_dims; i++) n *= dims[i];
    return n;
}

static int is_rk356x(const char* p) { return strcmp(p, "rk3566") == 0 || strcmp(p, "rk3568") == 0; }

uint32_t fk_c2(const char* platform, rknn_tensor_type dtype) {
    int small = is_rk356x(platform);
    if (dtype == RKNN_TENSOR_INT8 || dtype == RKNN_TENSOR_UINT8) return small ? 8 : 16;
    return small ? 4 : 8; /* float16, int16 */
}

uint32_t fk_width_align(const char* platform) { return is_rk356x(platform) ? 8 : 16; }

int fk_cores(const char* platform) {
    if (strcmp(platform, "rk3588") == 0) return 3;
    if (strcmp(platform, "rk3576") == 0) return 2;
    return 1;
}

float fk_round_to(const fk_io* io, float v) {
    if (io->dtype == RKNN_TENSOR_INT8) {
        float q = nearbyintf(v / io->scale) + (float)io->zp;
        if (q < -128.0f) q = -128.0f;
        if (q > 127.0f) q = 127.0f;
        return (q - (float)io->zp) * io->scale;
    }
    return fk_h2f(fk_f2h(v));
}

float fk_load(rknn_tensor_type t, const void* buf, size_t idx) {
    switch (t) {
        case RKNN_TENSOR_FLOAT32: { float v; memcpy(&v, (const char*)buf + idx * 4, 4); return v; }
        case RKNN_TENSOR_FLOAT16: { uint16_t v; memcpy(&v, (const char*)buf + idx * 2, 2); return fk_h2f(v); }
        case RKNN_TENSOR_INT8: return (float)((const int8_t*)buf)[idx];
        case RKNN_TENSOR_UINT8: return (float)((const uint8_t*)buf)[idx];
        default: return 0.0f;
    }
}

void fk_store(rknn_tensor_type t, void* buf, size_t idx, float v) {
    switch (t) {
        case RKNN_TENSOR_FLOAT32: memcpy((char*)buf + idx * 4, &v, 4); break;
        case RKNN_TENSOR_FLOAT16: { uint16_t h = fk_f2h(v); memcpy((char*)buf + idx * 2, &h, 2); break; }
        case RKNN_TENSOR_INT8: {
            float q = nearbyintf(v);
            ((int8_t*)buf)[idx] = (int8_t)(q < -128.0f ? -128.0f : (q > 127.0f ? 127.0f : q));
            break;
        }
        case RKNN_TENSOR_UINT8: {
            float q = nearbyintf(v);
            ((uint8_t*)buf)[idx] = (uint8_t)(q < 0.0f ? 0.0f : (q > 255.0f ? 255.0f : q));
            break;
        }
        default: break;
    }
}

static int is_4d_nhwc(const fk_layout* l) {
    return l->n_dims == 4 && (l->fmt == RKNN_TENSOR_NHWC || (l->fmt == RKNN_TENSOR_UNDEFINED && l->nhwc_order));
}

size_t fk_layout_bytes(const fk_layout* l) {
    size_t e = fk_type_size(l->type);
    if (l->n_dims == 4 && l->fmt == RKNN_TENSOR_NC1HWC2) {
        size_t c1 = (l->shape[1] + l->c2 - 1) / l->c2;
        return (size_t)l->shape[0] * c1 * l->shape[2] * l->shape[3] * l->c2 * e;
    }
    if (is_4d_nhwc(l)) return (size_t)l->shape[0] * l->h_stride * l->w_stride * l->shape[1] * e;
    return fk_elems(l->n_dims, l->shape) * e;
}

size_t fk_layout_offset(const fk_layout* l, size_t i) {
    size_t n, c, h, w, C, H, W;
    if (l->n_dims != 4 || (!is_4d_nhwc(l) && l->fmt != RKNN_TENSOR_NC1HWC2)) return i;
    C = l->shape[1];
    H = l->shape[2];
    W = l->shape[3];
    w = i % W;
    h = (i / W) % H;
    c = (i / (W * H)) % C;
    n = i / (W * H * C);
    if (l->fmt == RKNN_TENSOR_NC1HWC2) {
        size_t c1n = (C + l->c2 - 1) / l->c2;
        return (((n * c1n + c / l->c2) * H + h) * W + w) * l->c2 + c % l->c2;
    }
    return ((n * l->h_stride + h) * l->w_stride + w) * C + c;
}

void fk_fill_attr(rknn_tensor_attr* a, uint32_t index, const fk_io* io, const uint32_t* canon, uint32_t n_dims,
                  rknn_tensor_format fmt, const char* platform, int native_input) {
    size_t e = fk_type_size(io->dtype);
    uint32_t i;
    memset(a, 0, sizeof(*a));
    a->index = index;
    snprintf(a->name, sizeof(a->name), "%s", io->name);
    a->type = io->dtype;
    a->qnt_type = io->dtype == RKNN_TENSOR_INT8 ? RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC : RKNN_TENSOR_QNT_NONE;
    a->zp = io->dtype == RKNN_TENSOR_INT8 ? io->zp : 0;
    a->scale = io->dtype == RKNN_TENSOR_INT8 ? io->scale : 1.0f;
    a->fmt = n_dims == 4 ? fmt : RKNN_TENSOR_UNDEFINED;
    if (a->fmt == RKNN_TENSOR_NHWC) {
        a->n_dims = 4;
        a->dims[0] = canon[0];
        a->dims[1] = canon[2];
        a->dims[2] = canon[3];
        a->dims[3] = canon[1];
        a->n_elems = (uint32_t)fk_elems(4, a->dims);
        a->size = (uint32_t)(a->n_elems * e);
        if (native_input) {
            uint32_t al = fk_width_align(platform);
            a->w_stride = (canon[3] + al - 1) / al * al;
        } else {
            a->w_stride = canon[3];
        }
        a->size_with_stride = (uint32_t)((size_t)canon[0] * canon[2] * a->w_stride * canon[1] * e);
        return;
    }
    if (a->fmt == RKNN_TENSOR_NC1HWC2) {
        uint32_t c2 = fk_c2(platform, io->dtype);
        a->n_dims = 5;
        a->dims[0] = canon[0];
        a->dims[1] = (canon[1] + c2 - 1) / c2;
        a->dims[2] = canon[2];
        a->dims[3] = canon[3];
        a->dims[4] = c2;
        a->n_elems = (uint32_t)fk_elems(5, a->dims);
        a->size = (uint32_t)(a->n_elems * e);
        a->w_stride = canon[3];
        a->size_with_stride = a->size;
        return;
    }
    a->n_dims = n_dims;
    for (i = 0; i < n_dims; i++) a->dims[i] = canon[i];
    a->n_elems = (uint32_t)fk_elems(n_dims, canon);
    a->size = (uint32_t)(a->n_elems * e);
    a->w_stride = n_dims == 4 ? canon[3] : 0;
    a->size_with_stride = a->size;
}
