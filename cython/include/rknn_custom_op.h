/*
 * rknn_custom_op.h -- the RKNN custom-operator C ABI as declared by rknnlite.
 *
 * Written for rknnlite from the public facts (rknn-api-facts.md §3 and the SDK's custom-operator
 * chapter).  An operator is described by one rknn_custom_op; its callbacks receive the
 * operator's context and its input/output tensors (attribute + memory; a tensor's bytes start at
 * mem.virt_addr + mem.offset).  A plugin is a shared library named librkcst_<op>.so that exports
 * get_rknn_custom_op() returning its operator.
 *
 * rknnlite's software backend implements rknn_custom_op_get_op_attr (exported with default
 * visibility by rknnlite._native.custom_op_plugin, loaded RTLD_GLOBAL before any plugin).
 */
#ifndef RKNNLITE_RKNN_CUSTOM_OP_H
#define RKNNLITE_RKNN_CUSTOM_OP_H

#include <stdint.h>

#include "rknn_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RKNN_CUSTOM_OP_MAX_STR_LEN 64
#define RKNN_CUSTOM_OP_MAX_VALUE_LEN 32
#define RKNN_CUSTOM_OP_EXPORT __attribute__((visibility("default")))

/* Returned by init to ask the runtime to run its built-in operator of the same type instead. */
#define RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE -14

/* File-name prefix of custom-operator plugin libraries (librkcst_<op>.so). */
#define RKNN_CSTOP_PLUGIN_PREFIX "librkcst_"

/* Runtime-private part of an operator context ("interal" is the public API's spelling). */
#if defined(__arm__)
typedef uint32_t rknn_custom_op_interal_context;
#else
typedef uint64_t rknn_custom_op_interal_context;
#endif

typedef enum _rknn_target_type {
    RKNN_TARGET_TYPE_CPU = 1,
    RKNN_TARGET_TYPE_GPU = 2,
    RKNN_TARGET_TYPE_MAX
} rknn_target_type;

/* OpenCL objects of a GPU operator (cast to cl_context / cl_command_queue / cl_kernel). */
typedef struct _rknn_gpu_op_context {
    void* cl_context;
    void* cl_command_queue;
    void* cl_kernel;
} rknn_gpu_op_context;

/* Context handed to every callback, 48 bytes.  priv_data belongs to the operator (typically
 * allocated in init, used in prepare/compute, freed in destroy). */
typedef struct _rknn_custom_op_context {
    rknn_target_type target;
    rknn_custom_op_interal_context internal_ctx;
    rknn_gpu_op_context gpu_ctx;
    void* priv_data;
} rknn_custom_op_context;

/* One input or output tensor of an operator call, 416 bytes. */
typedef struct _rknn_custom_op_tensor {
    rknn_tensor_attr attr;
    rknn_tensor_mem mem;
} rknn_custom_op_tensor;

/* One attribute of the operator's node, 272 bytes: n_elems values of dtype at data (owned by
 * the runtime, valid while the callback runs).  n_elems == 0 when the attribute is absent. */
typedef struct _rknn_custom_op_attr {
    char name[RKNN_MAX_NAME_LEN];
    rknn_tensor_type dtype;
    uint32_t n_elems;
    void* data;
} rknn_custom_op_attr;

typedef int (*rknn_custom_op_callback)(rknn_custom_op_context* op_ctx,
                                       rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                                       rknn_custom_op_tensor* outputs, uint32_t n_outputs);
typedef int (*rknn_custom_op_destroy_callback)(rknn_custom_op_context* op_ctx);

/* Description of one custom operator, 832 bytes.
 *   init            optional; once at registration; may return RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE
 *   prepare         optional; before every compute
 *   compute         required; float32 NCHW/UNDEFINED data (int64 for int64 tensors)
 *   compute_native  reserved; must be NULL
 *   destroy         optional; once when the context is destroyed
 * cl_kernel_source is OpenCL source text when cl_source_size > 0, else a file path (GPU only). */
typedef struct _rknn_custom_op {
    uint32_t version;
    rknn_target_type target;
    char op_type[RKNN_MAX_NAME_LEN];
    char cl_kernel_name[RKNN_MAX_NAME_LEN];
    char* cl_kernel_source;
    uint64_t cl_source_size;
    char cl_build_options[RKNN_MAX_NAME_LEN];
    int (*init)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*prepare)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs,
                   uint32_t n_inputs, rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*compute)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs,
                   uint32_t n_inputs, rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*compute_native)(rknn_custom_op_context* op_ctx, rknn_custom_op_tensor* inputs,
                          uint32_t n_inputs, rknn_custom_op_tensor* outputs, uint32_t n_outputs);
    int (*destroy)(rknn_custom_op_context* op_ctx);
} rknn_custom_op;

/* Signature of a plugin's exported get_rknn_custom_op(). */
typedef rknn_custom_op* (*get_custom_op_func)(void);

/* Registers n operators on a context, after rknn_init and before rknn_run. */
int rknn_register_custom_ops(rknn_context ctx, rknn_custom_op* op, uint32_t custom_op_num);

/* Fills *op_attr with the attribute attr_name of the operator running in op_ctx. */
void rknn_custom_op_get_op_attr(rknn_custom_op_context* op_ctx, const char* attr_name,
                                rknn_custom_op_attr* op_attr);

#ifdef __cplusplus
}
#endif

#endif /* RKNNLITE_RKNN_CUSTOM_OP_H */
