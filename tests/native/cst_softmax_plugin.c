/*
 * A custom-operator plugin for rknnlite's tests: softmax over the node's "axis" attribute
 * (float32), written for this project against cython/include/rknn_custom_op.h.
 *
 * Build: cc -shared -fPIC -Icython/include cst_softmax_plugin.c -o librkcst_<name>.so
 *   -DCST_OP_TYPE=\"cstSoftmax\"  op type (default "cstSoftmax")
 *   -DCST_INIT_RESULT=-14          what init returns (default 0)
 *   -DCST_COMPUTE_RESULT=-5        what compute returns after computing (default 0)
 *   -DCST_TARGET=2                 target type (default RKNN_TARGET_TYPE_CPU)
 *   -DCST_NO_GETTER                do not export get_rknn_custom_op
 *   -DCST_WAIT_FOR_GO              compute sets cst_waiting, then waits (up to 20 s) for another
 *                                  thread to set cst_go; RKNN_ERR_TIMEOUT if nobody does
 *
 * It counts its callbacks and records what it saw in exported variables (cst_*), which the
 * tests read with ctypes.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rknn_custom_op.h"

#ifndef CST_OP_TYPE
#define CST_OP_TYPE "cstSoftmax"
#endif
#ifndef CST_INIT_RESULT
#define CST_INIT_RESULT 0
#endif
#ifndef CST_COMPUTE_RESULT
#define CST_COMPUTE_RESULT 0
#endif
#ifndef CST_TARGET
#define CST_TARGET RKNN_TARGET_TYPE_CPU
#endif

RKNN_CUSTOM_OP_EXPORT int cst_init_calls = 0;
RKNN_CUSTOM_OP_EXPORT int cst_prepare_calls = 0;
RKNN_CUSTOM_OP_EXPORT int cst_compute_calls = 0;
RKNN_CUSTOM_OP_EXPORT int cst_destroy_calls = 0;
/* what the last init saw: input 0's n_elems and dims[axis] */
RKNN_CUSTOM_OP_EXPORT uint32_t cst_init_n_elems = 0;
RKNN_CUSTOM_OP_EXPORT uint32_t cst_init_channels = 0;
/* what the last compute saw */
RKNN_CUSTOM_OP_EXPORT int64_t cst_last_axis = 0;
RKNN_CUSTOM_OP_EXPORT int32_t cst_last_out_offset = 0;
RKNN_CUSTOM_OP_EXPORT uint64_t cst_last_out_address = 0; /* virt_addr + offset */
RKNN_CUSTOM_OP_EXPORT uint32_t cst_last_in_n_dims = 0;
RKNN_CUSTOM_OP_EXPORT char cst_last_name[RKNN_MAX_NAME_LEN] = {0};
/* CST_WAIT_FOR_GO handshake */
RKNN_CUSTOM_OP_EXPORT volatile int cst_waiting = 0;
RKNN_CUSTOM_OP_EXPORT volatile int cst_go = 0;

/* per-node state kept in priv_data */
typedef struct {
    uint32_t channels; /* dims[axis] of input 0 at init */
    float* row;        /* scratch of that many floats */
} cst_state;

static int64_t read_axis(rknn_custom_op_context* op_ctx)
{
    rknn_custom_op_attr attr;
    rknn_custom_op_get_op_attr(op_ctx, "axis", &attr);
    if (attr.n_elems == 1 && attr.dtype == RKNN_TENSOR_INT64)
        return ((const int64_t*)attr.data)[0];
    return -1; /* ONNX Softmax default */
}

static int normalise_axis(int64_t axis, uint32_t n_dims)
{
    if (axis < 0)
        axis += n_dims;
    return (axis < 0 || axis >= (int64_t)n_dims) ? -1 : (int)axis;
}

static int cst_init(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                    rknn_custom_op_tensor* outputs, uint32_t n_outputs)
{
    cst_state* state;
    int axis;
    (void)outputs;
    cst_init_calls++;
    if (CST_INIT_RESULT != 0)
        return CST_INIT_RESULT;
    if (n_inputs != 1 || n_outputs != 1)
        return RKNN_ERR_PARAM_INVALID;
    state = (cst_state*)calloc(1, sizeof(cst_state));
    if (state == NULL)
        return RKNN_ERR_MALLOC_FAIL;
    axis = normalise_axis(read_axis(op_ctx), inputs[0].attr.n_dims);
    cst_init_n_elems = inputs[0].attr.n_elems;
    if (axis >= 0) {
        state->channels = inputs[0].attr.dims[axis];
        state->row = (float*)calloc(state->channels ? state->channels : 1, sizeof(float));
    }
    cst_init_channels = state->channels;
    op_ctx->priv_data = state;
    return 0;
}

static int cst_prepare(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                       rknn_custom_op_tensor* outputs, uint32_t n_outputs)
{
    (void)op_ctx, (void)inputs, (void)n_inputs, (void)outputs, (void)n_outputs;
    cst_prepare_calls++;
    return 0;
}

static int cst_compute(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                       rknn_custom_op_tensor* outputs, uint32_t n_outputs)
{
    cst_state* state = (cst_state*)op_ctx->priv_data;
    const rknn_tensor_attr* attr = &inputs[0].attr;
    const float* in;
    float* out;
    rknn_custom_op_attr name;
    uint32_t outside = 1, inside = 1, channels, o, i, c, k;
    int axis;

    cst_compute_calls++;
    if (n_inputs != 1 || n_outputs != 1 || state == NULL)
        return RKNN_ERR_PARAM_INVALID;
#ifdef CST_WAIT_FOR_GO
    {
        struct timespec tick = {0, 1000000};
        int waited;
        cst_waiting = 1;
        for (waited = 0; !cst_go && waited < 20000; waited++)
            nanosleep(&tick, NULL);
        cst_waiting = 0;
        if (!cst_go)
            return RKNN_ERR_TIMEOUT;
    }
#endif
    if (attr->type != RKNN_TENSOR_FLOAT32 || outputs[0].attr.type != RKNN_TENSOR_FLOAT32)
        return RKNN_ERR_INPUT_INVALID;
    rknn_custom_op_get_op_attr(op_ctx, "name", &name);
    if (name.n_elems > 0 && name.dtype == RKNN_TENSOR_UINT8)
        strncpy(cst_last_name, (const char*)name.data, RKNN_MAX_NAME_LEN - 1);
    cst_last_axis = read_axis(op_ctx);
    axis = normalise_axis(cst_last_axis, attr->n_dims);
    if (axis < 0)
        return RKNN_ERR_PARAM_INVALID;
    channels = attr->dims[axis];
    if (channels > state->channels) /* init sized the scratch row from the same attributes */
        return RKNN_ERR_PARAM_INVALID;
    for (k = 0; k < (uint32_t)axis; k++)
        outside *= attr->dims[k];
    for (k = axis + 1; k < attr->n_dims; k++)
        inside *= attr->dims[k];

    in = (const float*)((const char*)inputs[0].mem.virt_addr + inputs[0].mem.offset);
    out = (float*)((char*)outputs[0].mem.virt_addr + outputs[0].mem.offset);
    cst_last_out_offset = outputs[0].mem.offset;
    cst_last_out_address = (uint64_t)(uintptr_t)out;
    cst_last_in_n_dims = attr->n_dims;

    for (o = 0; o < outside; o++) {
        for (i = 0; i < inside; i++) {
            const float* src = in + (size_t)o * channels * inside + i;
            float* dst = out + (size_t)o * channels * inside + i;
            float top = -INFINITY, sum = 0.0f;
            for (c = 0; c < channels; c++)
                top = fmaxf(top, src[(size_t)c * inside]);
            for (c = 0; c < channels; c++) {
                state->row[c] = expf(src[(size_t)c * inside] - top);
                sum += state->row[c];
            }
            for (c = 0; c < channels; c++)
                dst[(size_t)c * inside] = state->row[c] / sum;
        }
    }
    return CST_COMPUTE_RESULT;
}

static int cst_destroy(rknn_custom_op_context* op_ctx)
{
    cst_state* state = (cst_state*)op_ctx->priv_data;
    cst_destroy_calls++;
    if (state != NULL) {
        free(state->row);
        free(state);
        op_ctx->priv_data = NULL;
    }
    return 0;
}

static rknn_custom_op cst_op;

/* The operator (also usable by address, through ctypes, without the plugin getter). */
RKNN_CUSTOM_OP_EXPORT rknn_custom_op* cst_softmax_op(void)
{
    memset(&cst_op, 0, sizeof(cst_op));
    cst_op.version = 1;
    cst_op.target = CST_TARGET;
    strncpy(cst_op.op_type, CST_OP_TYPE, RKNN_MAX_NAME_LEN - 1);
    cst_op.init = cst_init;
    cst_op.prepare = cst_prepare;
    cst_op.compute = cst_compute;
    cst_op.destroy = cst_destroy;
    return &cst_op;
}

#ifndef CST_NO_GETTER
RKNN_CUSTOM_OP_EXPORT rknn_custom_op* get_rknn_custom_op(void)
{
    return cst_softmax_op();
}
#endif
