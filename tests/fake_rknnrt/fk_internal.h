/*
 * fk_internal.h -- shared internals of the fake librknnrt (tests only; see README.md).
 *
 * Canonical order: every tensor's values are kept as float32 in the model's (ONNX) order,
 * i.e. NCHW for 4-D tensors.  An input whose layout is NHWC is only *presented* as NHWC
 * (attributes, default data format); its values are still stored NCHW.
 */
#ifndef FK_INTERNAL_H
#define FK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rknn_api.h"
#include "rknn_custom_op.h"

#define FK_MAX_IO 8
#define FK_MAX_TENSORS 64
#define FK_MAX_NODES 32
#define FK_MAX_ATTRS 8
#define FK_MAX_ATTR_VALUES 16
#define FK_MAX_SETS 16

typedef struct {
    char name[RKNN_MAX_NAME_LEN];
    uint32_t n_dims;
    uint32_t shape[RKNN_MAX_DIMS]; /* canonical (NCHW for 4-D); for dynamic models: set 0 */
    rknn_tensor_format layout;     /* how the runtime presents it: NHWC / NCHW / UNDEFINED */
    rknn_tensor_type dtype;        /* RKNN_TENSOR_FLOAT16 or RKNN_TENSOR_INT8 */
    float scale;                   /* int8 only */
    int32_t zp;                    /* int8 only */
} fk_io;

typedef struct {
    char name[64];
    rknn_tensor_type dtype; /* FLOAT32 (a JSON number with a fraction) or INT64 */
    uint32_t n;
    float f[FK_MAX_ATTR_VALUES];
    int64_t i[FK_MAX_ATTR_VALUES];
} fk_attr;

typedef struct {
    char op[RKNN_MAX_NAME_LEN]; /* "add", ... or a custom op type */
    char name[RKNN_MAX_NAME_LEN];
    int n_in;
    int in[2];    /* tensor ids */
    int out;      /* tensor id */
    int has_const;
    float cval;   /* second operand of a binary op with one input: the fake's "weights" */
    int shared;   /* weight-less model: cval comes from the SHARE_WEIGHT_MEM context's node of this name */
    int n_attrs;
    fk_attr attrs[FK_MAX_ATTRS];
} fk_node;

typedef struct fk_model {
    int refs; /* contexts sharing it (dup), guarded by the global lock */
    char platform[32];
    char toolkit_version[64];
    char custom_string[1024];
    int format_version;
    int batch;
    int n_in, n_out;
    fk_io in[FK_MAX_IO];
    fk_io out[FK_MAX_IO];
    int out_tensor[FK_MAX_IO]; /* tensor id of each output */
    int n_tensors;             /* ids 0..n_in-1 are the inputs */
    char tensor_name[FK_MAX_TENSORS][RKNN_MAX_NAME_LEN];
    int n_nodes;
    fk_node nodes[FK_MAX_NODES];
    int n_shared; /* nodes whose constant is shared (remove_weight model) */
    int n_sets; /* 0 = static */
    uint32_t sets[FK_MAX_SETS][FK_MAX_IO][RKNN_MAX_DIMS]; /* canonical shape of input i in set s */
} fk_model;

/* ---- fk_model.c ---- */
/* Parses a model file; NULL on failure with *code set (RKNN_ERR_*) and msg filled. */
fk_model* fk_model_parse(const uint8_t* data, size_t size, int* code, char* msg, size_t msg_size);
void fk_model_free(fk_model* m);
int fk_is_builtin_op(const char* op);
int fk_op_is_unary(const char* op);
/* 1 when the shapes of every node's operands are compatible for these input shapes. */
int fk_model_shapes_ok(const fk_model* m, uint32_t shapes[FK_MAX_IO][RKNN_MAX_DIMS], char* msg, size_t msg_size);
/* Shape of tensor t given the current canonical input shapes; returns n_dims. */
uint32_t fk_tensor_shape(const fk_model* m, uint32_t in_shapes[FK_MAX_IO][RKNN_MAX_DIMS], int t,
                         uint32_t out[RKNN_MAX_DIMS]);
float fk_apply(const char* op, float a, float b);

/* ---- fk_tensor.c ---- */
uint16_t fk_f2h(float f);
float fk_h2f(uint16_t h);
size_t fk_type_size(rknn_tensor_type t);
size_t fk_elems(uint32_t n_dims, const uint32_t* dims);
/* C2 of the NC1HWC2 layout on a platform for a dtype. */
uint32_t fk_c2(const char* platform, rknn_tensor_type dtype);
/* Width alignment (pixels) of NHWC native inputs on a platform. */
uint32_t fk_width_align(const char* platform);
/* Number of NPU cores of a platform. */
int fk_cores(const char* platform);
/* Rounds a float value to what the tensor type can hold (int8 quantize/dequantize, fp16). */
float fk_round_to(const fk_io* io, float v);
/* Reads element idx of a buffer of type t as a float / writes one. */
float fk_load(rknn_tensor_type t, const void* buf, size_t idx);
void fk_store(rknn_tensor_type t, void* buf, size_t idx, float v);

/* How a buffer lays out a tensor (canonical dims n_dims/shape). */
typedef struct {
    rknn_tensor_format fmt; /* NCHW, NHWC, NC1HWC2 or UNDEFINED */
    rknn_tensor_type type;
    uint32_t n_dims;
    uint32_t shape[RKNN_MAX_DIMS]; /* canonical */
    uint32_t w_stride;             /* NHWC: pixels per row (>= W) */
    uint32_t h_stride;             /* NHWC: rows per batch image (>= H) */
    uint32_t c2;                   /* NC1HWC2 */
    int nhwc_order;                /* UNDEFINED on an NHWC-presented 4-D tensor: NHWC order */
} fk_layout;

/* Bytes a buffer in this layout needs. */
size_t fk_layout_bytes(const fk_layout* l);
/* Element offset (in elements of l->type) of canonical flat index i. */
size_t fk_layout_offset(const fk_layout* l, size_t i);
/* Fills an attribute for a tensor in a given presentation. */
void fk_fill_attr(rknn_tensor_attr* a, uint32_t index, const fk_io* io, const uint32_t* canon, uint32_t n_dims,
                  rknn_tensor_format fmt, const char* platform, int native_input);

#endif
