# Cython declarations of the RKNN runtime C ABI (cython/include/rknn_api.h, API v2.3.2).
# Declarations only: the binding resolves the functions with dlsym(), using the *_fn pointer
# types below, so nothing links against librknnrt.  Sizes are asserted at import by
# rknnlite._native.abi and rknnrt (cython/npu/abi_sizes.pxd) and tested by tests/test_abi_layout.py.

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "rknn_api.h" nogil:
    ctypedef uint64_t rknn_context

    enum:
        RKNN_MAX_DIMS
        RKNN_MAX_NUM_CHANNEL
        RKNN_MAX_NAME_LEN
        RKNN_MAX_DYNAMIC_SHAPE_NUM

    enum:
        RKNN_FLAG_PRIOR_HIGH
        RKNN_FLAG_PRIOR_MEDIUM
        RKNN_FLAG_PRIOR_LOW
        RKNN_FLAG_ASYNC_MASK
        RKNN_FLAG_COLLECT_PERF_MASK
        RKNN_FLAG_MEM_ALLOC_OUTSIDE
        RKNN_FLAG_SHARE_WEIGHT_MEM
        RKNN_FLAG_FENCE_IN_OUTSIDE
        RKNN_FLAG_FENCE_OUT_OUTSIDE
        RKNN_FLAG_COLLECT_MODEL_INFO_ONLY
        RKNN_FLAG_INTERNAL_ALLOC_OUTSIDE
        RKNN_FLAG_EXECUTE_FALLBACK_PRIOR_DEVICE_GPU
        RKNN_FLAG_ENABLE_SRAM
        RKNN_FLAG_SHARE_SRAM
        RKNN_FLAG_DISABLE_PROC_HIGH_PRIORITY
        RKNN_FLAG_DISABLE_FLUSH_INPUT_MEM_CACHE
        RKNN_FLAG_DISABLE_FLUSH_OUTPUT_MEM_CACHE
        RKNN_FLAG_MODEL_BUFFER_ZERO_COPY
        RKNN_MEM_FLAG_ALLOC_NO_CONTEXT

    enum:
        RKNN_SUCC
        RKNN_ERR_FAIL
        RKNN_ERR_TIMEOUT
        RKNN_ERR_DEVICE_UNAVAILABLE
        RKNN_ERR_MALLOC_FAIL
        RKNN_ERR_PARAM_INVALID
        RKNN_ERR_MODEL_INVALID
        RKNN_ERR_CTX_INVALID
        RKNN_ERR_INPUT_INVALID
        RKNN_ERR_OUTPUT_INVALID
        RKNN_ERR_DEVICE_UNMATCH
        RKNN_ERR_INCOMPATILE_PRE_COMPILE_MODEL
        RKNN_ERR_INCOMPATILE_OPTIMIZATION_LEVEL_VERSION
        RKNN_ERR_TARGET_PLATFORM_UNMATCH

    ctypedef enum rknn_query_cmd:
        RKNN_QUERY_IN_OUT_NUM
        RKNN_QUERY_INPUT_ATTR
        RKNN_QUERY_OUTPUT_ATTR
        RKNN_QUERY_PERF_DETAIL
        RKNN_QUERY_PERF_RUN
        RKNN_QUERY_SDK_VERSION
        RKNN_QUERY_MEM_SIZE
        RKNN_QUERY_CUSTOM_STRING
        RKNN_QUERY_NATIVE_INPUT_ATTR
        RKNN_QUERY_NATIVE_OUTPUT_ATTR
        RKNN_QUERY_NATIVE_NC1HWC2_INPUT_ATTR
        RKNN_QUERY_NATIVE_NC1HWC2_OUTPUT_ATTR
        RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR
        RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR
        RKNN_QUERY_DEVICE_MEM_INFO
        RKNN_QUERY_INPUT_DYNAMIC_RANGE
        RKNN_QUERY_CURRENT_INPUT_ATTR
        RKNN_QUERY_CURRENT_OUTPUT_ATTR
        RKNN_QUERY_CURRENT_NATIVE_INPUT_ATTR
        RKNN_QUERY_CURRENT_NATIVE_OUTPUT_ATTR
        RKNN_QUERY_CMD_MAX

    ctypedef enum rknn_tensor_type:
        RKNN_TENSOR_FLOAT32
        RKNN_TENSOR_FLOAT16
        RKNN_TENSOR_INT8
        RKNN_TENSOR_UINT8
        RKNN_TENSOR_INT16
        RKNN_TENSOR_UINT16
        RKNN_TENSOR_INT32
        RKNN_TENSOR_UINT32
        RKNN_TENSOR_INT64
        RKNN_TENSOR_BOOL
        RKNN_TENSOR_INT4
        RKNN_TENSOR_BFLOAT16
        RKNN_TENSOR_TYPE_MAX

    ctypedef enum rknn_tensor_qnt_type:
        RKNN_TENSOR_QNT_NONE
        RKNN_TENSOR_QNT_DFP
        RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC
        RKNN_TENSOR_QNT_MAX

    ctypedef enum rknn_tensor_format:
        RKNN_TENSOR_NCHW
        RKNN_TENSOR_NHWC
        RKNN_TENSOR_NC1HWC2
        RKNN_TENSOR_UNDEFINED
        RKNN_TENSOR_FORMAT_MAX

    ctypedef enum rknn_core_mask:
        RKNN_NPU_CORE_AUTO
        RKNN_NPU_CORE_0
        RKNN_NPU_CORE_1
        RKNN_NPU_CORE_2
        RKNN_NPU_CORE_0_1
        RKNN_NPU_CORE_0_1_2
        RKNN_NPU_CORE_ALL
        RKNN_NPU_CORE_UNDEFINED

    ctypedef enum rknn_tensor_mem_flags:
        RKNN_TENSOR_MEMORY_FLAGS_ALLOC_INSIDE
        RKNN_TENSOR_MEMORY_FLAGS_FROM_FD
        RKNN_TENSOR_MEMORY_FLAGS_FROM_PHYS
        RKNN_TENSOR_MEMORY_FLAGS_UNKNOWN

    ctypedef enum rknn_mem_alloc_flags:
        RKNN_FLAG_MEMORY_FLAGS_DEFAULT
        RKNN_FLAG_MEMORY_CACHEABLE
        RKNN_FLAG_MEMORY_NON_CACHEABLE
        RKNN_FLAG_MEMORY_TRY_ALLOC_SRAM

    ctypedef enum rknn_mem_sync_mode:
        RKNN_MEMORY_SYNC_TO_DEVICE
        RKNN_MEMORY_SYNC_FROM_DEVICE
        RKNN_MEMORY_SYNC_BIDIRECTIONAL

    ctypedef struct rknn_input_output_num:
        uint32_t n_input
        uint32_t n_output

    ctypedef struct rknn_tensor_attr:
        uint32_t index
        uint32_t n_dims
        uint32_t dims[16]
        char name[256]
        uint32_t n_elems
        uint32_t size
        rknn_tensor_format fmt
        rknn_tensor_type type
        rknn_tensor_qnt_type qnt_type
        int8_t fl
        int32_t zp
        float scale
        uint32_t w_stride
        uint32_t size_with_stride
        uint8_t pass_through
        uint32_t h_stride

    ctypedef struct rknn_input_range:
        uint32_t index
        uint32_t shape_number
        rknn_tensor_format fmt
        char name[256]
        uint32_t dyn_range[512][16]
        uint32_t n_dims

    ctypedef struct rknn_perf_detail:
        char* perf_data
        uint64_t data_len

    ctypedef struct rknn_perf_run:
        int64_t run_duration

    ctypedef struct rknn_sdk_version:
        char api_version[256]
        char drv_version[256]

    ctypedef struct rknn_mem_size:
        uint32_t total_weight_size
        uint32_t total_internal_size
        uint64_t total_dma_allocated_size
        uint32_t total_sram_size
        uint32_t free_sram_size
        uint32_t reserved[10]

    ctypedef struct rknn_custom_string:
        char string[1024]

    ctypedef struct rknn_tensor_mem:
        void* virt_addr
        uint64_t phys_addr
        int32_t fd
        int32_t offset
        uint32_t size
        uint32_t flags
        void* priv_data

    ctypedef struct rknn_input:
        uint32_t index
        void* buf
        uint32_t size
        uint8_t pass_through
        rknn_tensor_type type
        rknn_tensor_format fmt

    ctypedef struct rknn_output:
        uint8_t want_float
        uint8_t is_prealloc
        uint32_t index
        void* buf
        uint32_t size

    ctypedef struct rknn_init_extend:
        rknn_context ctx
        int32_t real_model_offset
        uint32_t real_model_size
        int32_t model_buffer_fd
        uint32_t model_buffer_flags
        uint8_t reserved[112]

    ctypedef struct rknn_run_extend:
        uint64_t frame_id
        int32_t non_block
        int32_t timeout_ms
        int32_t fence_fd

    ctypedef struct rknn_output_extend:
        uint64_t frame_id

    # Prototypes (documentation of the ABI; call them through dlsym'ed *_fn pointers).
    int rknn_init(rknn_context* context, void* model, uint32_t size, uint32_t flag,
                  rknn_init_extend* extend)
    int rknn_dup_context(rknn_context* context_in, rknn_context* context_out)
    int rknn_destroy(rknn_context context)
    int rknn_query(rknn_context context, rknn_query_cmd cmd, void* info, uint32_t size)
    int rknn_inputs_set(rknn_context context, uint32_t n_inputs, rknn_input* inputs)
    int rknn_set_batch_core_num(rknn_context context, int core_num)
    int rknn_set_core_mask(rknn_context context, rknn_core_mask core_mask)
    int rknn_run(rknn_context context, rknn_run_extend* extend)
    int rknn_wait(rknn_context context, rknn_run_extend* extend)
    int rknn_outputs_get(rknn_context context, uint32_t n_outputs, rknn_output* outputs,
                         rknn_output_extend* extend)
    int rknn_outputs_release(rknn_context context, uint32_t n_ouputs, rknn_output* outputs)
    rknn_tensor_mem* rknn_create_mem_from_phys(rknn_context ctx, uint64_t phys_addr,
                                               void* virt_addr, uint32_t size)
    rknn_tensor_mem* rknn_create_mem_from_fd(rknn_context ctx, int32_t fd, void* virt_addr,
                                             uint32_t size, int32_t offset)
    rknn_tensor_mem* rknn_create_mem_from_mb_blk(rknn_context ctx, void* mb_blk, int32_t offset)
    rknn_tensor_mem* rknn_create_mem(rknn_context ctx, uint32_t size)
    rknn_tensor_mem* rknn_create_mem2(rknn_context ctx, uint64_t size, uint64_t alloc_flags)
    int rknn_destroy_mem(rknn_context ctx, rknn_tensor_mem* mem)
    int rknn_set_weight_mem(rknn_context ctx, rknn_tensor_mem* mem)
    int rknn_set_internal_mem(rknn_context ctx, rknn_tensor_mem* mem)
    int rknn_set_io_mem(rknn_context ctx, rknn_tensor_mem* mem, rknn_tensor_attr* attr)
    int rknn_set_input_shape(rknn_context ctx, rknn_tensor_attr* attr)
    int rknn_set_input_shapes(rknn_context ctx, uint32_t n_inputs, rknn_tensor_attr* attr)
    int rknn_mem_sync(rknn_context context, rknn_tensor_mem* mem, rknn_mem_sync_mode mode)


# Function-pointer types for symbols resolved one by one with dlsym().
ctypedef int (*rknn_init_fn)(rknn_context*, void*, uint32_t, uint32_t,
                             rknn_init_extend*) noexcept nogil
ctypedef int (*rknn_dup_context_fn)(rknn_context*, rknn_context*) noexcept nogil
ctypedef int (*rknn_destroy_fn)(rknn_context) noexcept nogil
ctypedef int (*rknn_query_fn)(rknn_context, rknn_query_cmd, void*, uint32_t) noexcept nogil
ctypedef int (*rknn_inputs_set_fn)(rknn_context, uint32_t, rknn_input*) noexcept nogil
ctypedef int (*rknn_set_batch_core_num_fn)(rknn_context, int) noexcept nogil
ctypedef int (*rknn_set_core_mask_fn)(rknn_context, rknn_core_mask) noexcept nogil
ctypedef int (*rknn_run_fn)(rknn_context, rknn_run_extend*) noexcept nogil
ctypedef int (*rknn_wait_fn)(rknn_context, rknn_run_extend*) noexcept nogil
ctypedef int (*rknn_outputs_get_fn)(rknn_context, uint32_t, rknn_output*,
                                    rknn_output_extend*) noexcept nogil
ctypedef int (*rknn_outputs_release_fn)(rknn_context, uint32_t, rknn_output*) noexcept nogil
ctypedef rknn_tensor_mem* (*rknn_create_mem_from_phys_fn)(rknn_context, uint64_t, void*,
                                                          uint32_t) noexcept nogil
ctypedef rknn_tensor_mem* (*rknn_create_mem_from_fd_fn)(rknn_context, int32_t, void*, uint32_t,
                                                        int32_t) noexcept nogil
ctypedef rknn_tensor_mem* (*rknn_create_mem_from_mb_blk_fn)(rknn_context, void*,
                                                            int32_t) noexcept nogil
ctypedef rknn_tensor_mem* (*rknn_create_mem_fn)(rknn_context, uint32_t) noexcept nogil
ctypedef rknn_tensor_mem* (*rknn_create_mem2_fn)(rknn_context, uint64_t, uint64_t) noexcept nogil
ctypedef int (*rknn_destroy_mem_fn)(rknn_context, rknn_tensor_mem*) noexcept nogil
ctypedef int (*rknn_set_weight_mem_fn)(rknn_context, rknn_tensor_mem*) noexcept nogil
ctypedef int (*rknn_set_internal_mem_fn)(rknn_context, rknn_tensor_mem*) noexcept nogil
ctypedef int (*rknn_set_io_mem_fn)(rknn_context, rknn_tensor_mem*, rknn_tensor_attr*) noexcept nogil
ctypedef int (*rknn_set_input_shape_fn)(rknn_context, rknn_tensor_attr*) noexcept nogil
ctypedef int (*rknn_set_input_shapes_fn)(rknn_context, uint32_t, rknn_tensor_attr*) noexcept nogil
ctypedef int (*rknn_mem_sync_fn)(rknn_context, rknn_tensor_mem*, rknn_mem_sync_mode) noexcept nogil
