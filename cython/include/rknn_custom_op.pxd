# Cython declarations of the RKNN custom-operator C ABI (cython/include/rknn_custom_op.h).
# rknn_custom_op_get_op_attr is implemented (and exported) by rknnlite._native.custom_op_plugin;
# rknn_register_custom_ops belongs to librknnrt and is reached through dlsym (the *_fn type).

from libc.stdint cimport uint32_t, uint64_t

from rknn_api cimport rknn_context, rknn_tensor_attr, rknn_tensor_mem, rknn_tensor_type

cdef extern from "rknn_custom_op.h" nogil:
    enum:
        RKNN_CUSTOM_OP_MAX_STR_LEN
        RKNN_CUSTOM_OP_MAX_VALUE_LEN
        RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE

    const char* RKNN_CSTOP_PLUGIN_PREFIX

    ctypedef uint64_t rknn_custom_op_interal_context

    ctypedef enum rknn_target_type:
        RKNN_TARGET_TYPE_CPU
        RKNN_TARGET_TYPE_GPU
        RKNN_TARGET_TYPE_MAX

    ctypedef struct rknn_gpu_op_context:
        void* cl_context
        void* cl_command_queue
        void* cl_kernel

    ctypedef struct rknn_custom_op_context:
        rknn_target_type target
        rknn_custom_op_interal_context internal_ctx
        rknn_gpu_op_context gpu_ctx
        void* priv_data

    ctypedef struct rknn_custom_op_tensor:
        rknn_tensor_attr attr
        rknn_tensor_mem mem

    ctypedef struct rknn_custom_op_attr:
        char name[256]
        rknn_tensor_type dtype
        uint32_t n_elems
        void* data

    ctypedef int (*rknn_custom_op_callback)(rknn_custom_op_context* op_ctx,
                                            rknn_custom_op_tensor* inputs, uint32_t n_inputs,
                                            rknn_custom_op_tensor* outputs,
                                            uint32_t n_outputs) noexcept
    ctypedef int (*rknn_custom_op_destroy_callback)(rknn_custom_op_context* op_ctx) noexcept

    ctypedef struct rknn_custom_op:
        uint32_t version
        rknn_target_type target
        char op_type[256]
        char cl_kernel_name[256]
        char* cl_kernel_source
        uint64_t cl_source_size
        char cl_build_options[256]
        rknn_custom_op_callback init
        rknn_custom_op_callback prepare
        rknn_custom_op_callback compute
        rknn_custom_op_callback compute_native
        rknn_custom_op_destroy_callback destroy

    ctypedef rknn_custom_op* (*get_custom_op_func)() noexcept

    int rknn_register_custom_ops(rknn_context ctx, rknn_custom_op* op, uint32_t custom_op_num)
    void rknn_custom_op_get_op_attr(rknn_custom_op_context* op_ctx, const char* attr_name,
                                    rknn_custom_op_attr* op_attr)


ctypedef int (*rknn_register_custom_ops_fn)(rknn_context, rknn_custom_op*,
                                            uint32_t) noexcept nogil
