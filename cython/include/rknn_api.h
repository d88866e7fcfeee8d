/*
 * rknn_api.h -- the RKNN runtime C ABI (librknnrt, API v2.3.2) as declared by rknnlite.
 *
 * Written for rknnlite from the public facts collected in the project's reference
 * (rknn-api-facts.md §2): every constant, enum, struct and function of the runtime's C API,
 * with the byte layout of LP64 (x86_64 and aarch64).  tests/test_abi_layout.py compiles a
 * program against this header and checks every sizeof/offsetof against the reference.
 *
 * This header declares; it implements nothing.  The Cython binding resolves the functions
 * with dlsym() at run time, so nothing links against librknnrt at build time.
 */
#ifndef RKNNLITE_RKNN_API_H
#define RKNNLITE_RKNN_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- context handle: 64-bit everywhere except 32-bit ARM ---------------------------- */
#if defined(__arm__)
typedef uint32_t rknn_context;
#else
typedef uint64_t rknn_context;
#endif

/* ---- limits --------------------------------------------------------------------------- */
#define RKNN_MAX_DIMS 16
#define RKNN_MAX_NUM_CHANNEL 15
#define RKNN_MAX_NAME_LEN 256
#define RKNN_MAX_DYNAMIC_SHAPE_NUM 512

/* ---- rknn_init flags ------------------------------------------------------------------- */
#define RKNN_FLAG_PRIOR_HIGH 0x00000000
#define RKNN_FLAG_PRIOR_MEDIUM 0x00000001
#define RKNN_FLAG_PRIOR_LOW 0x00000002
#define RKNN_FLAG_ASYNC_MASK 0x00000004
#define RKNN_FLAG_COLLECT_PERF_MASK 0x00000008
#define RKNN_FLAG_MEM_ALLOC_OUTSIDE 0x00000010
#define RKNN_FLAG_SHARE_WEIGHT_MEM 0x00000020
#define RKNN_FLAG_FENCE_IN_OUTSIDE 0x00000040
#define RKNN_FLAG_FENCE_OUT_OUTSIDE 0x00000080
#define RKNN_FLAG_COLLECT_MODEL_INFO_ONLY 0x00000100
#define RKNN_FLAG_INTERNAL_ALLOC_OUTSIDE 0x00000200
#define RKNN_FLAG_EXECUTE_FALLBACK_PRIOR_DEVICE_GPU 0x00000400
#define RKNN_FLAG_ENABLE_SRAM 0x00000800
#define RKNN_FLAG_SHARE_SRAM 0x00001000
#define RKNN_FLAG_DISABLE_PROC_HIGH_PRIORITY 0x00002000
#define RKNN_FLAG_DISABLE_FLUSH_INPUT_MEM_CACHE 0x00004000
#define RKNN_FLAG_DISABLE_FLUSH_OUTPUT_MEM_CACHE 0x00008000
#define RKNN_FLAG_MODEL_BUFFER_ZERO_COPY 0x00010000
#define RKNN_MEM_FLAG_ALLOC_NO_CONTEXT 0x00020000

/* ---- return codes ----------------------------------------------------------------------- */
#define RKNN_SUCC 0
#define RKNN_ERR_FAIL -1
#define RKNN_ERR_TIMEOUT -2
#define RKNN_ERR_DEVICE_UNAVAILABLE -3
#define RKNN_ERR_MALLOC_FAIL -4
#define RKNN_ERR_PARAM_INVALID -5
#define RKNN_ERR_MODEL_INVALID -6
#define RKNN_ERR_CTX_INVALID -7
#define RKNN_ERR_INPUT_INVALID -8
#define RKNN_ERR_OUTPUT_INVALID -9
#define RKNN_ERR_DEVICE_UNMATCH -10
/* "INCOMPATILE" is the spelling of the public API. */
#define RKNN_ERR_INCOMPATILE_PRE_COMPILE_MODEL -11
#define RKNN_ERR_INCOMPATILE_OPTIMIZATION_LEVEL_VERSION -12
#define RKNN_ERR_TARGET_PLATFORM_UNMATCH -13

/* ---- enums (all 4 bytes) -------------------------------------------------------------- */
typedef enum _rknn_query_cmd {
    RKNN_QUERY_IN_OUT_NUM = 0,
    RKNN_QUERY_INPUT_ATTR = 1,
    RKNN_QUERY_OUTPUT_ATTR = 2,
    RKNN_QUERY_PERF_DETAIL = 3,
    RKNN_QUERY_PERF_RUN = 4,
    RKNN_QUERY_SDK_VERSION = 5,
    RKNN_QUERY_MEM_SIZE = 6,
    RKNN_QUERY_CUSTOM_STRING = 7,
    RKNN_QUERY_NATIVE_INPUT_ATTR = 8,
    RKNN_QUERY_NATIVE_OUTPUT_ATTR = 9,
    RKNN_QUERY_NATIVE_NC1HWC2_INPUT_ATTR = 8,
    RKNN_QUERY_NATIVE_NC1HWC2_OUTPUT_ATTR = 9,
    RKNN_QUERY_NATIVE_NHWC_INPUT_ATTR = 10,
    RKNN_QUERY_NATIVE_NHWC_OUTPUT_ATTR = 11,
    RKNN_QUERY_DEVICE_MEM_INFO = 12,
    RKNN_QUERY_INPUT_DYNAMIC_RANGE = 13,
    RKNN_QUERY_CURRENT_INPUT_ATTR = 14,
    RKNN_QUERY_CURRENT_OUTPUT_ATTR = 15,
    RKNN_QUERY_CURRENT_NATIVE_INPUT_ATTR = 16,
    RKNN_QUERY_CURRENT_NATIVE_OUTPUT_ATTR = 17,
    RKNN_QUERY_CMD_MAX
} rknn_query_cmd;

typedef enum _rknn_tensor_type {
    RKNN_TENSOR_FLOAT32 = 0,
    RKNN_TENSOR_FLOAT16 = 1,
    RKNN_TENSOR_INT8 = 2,
    RKNN_TENSOR_UINT8 = 3,
    RKNN_TENSOR_INT16 = 4,
    RKNN_TENSOR_UINT16 = 5,
    RKNN_TENSOR_INT32 = 6,
    RKNN_TENSOR_UINT32 = 7,
    RKNN_TENSOR_INT64 = 8,
    RKNN_TENSOR_BOOL = 9,
    RKNN_TENSOR_INT4 = 10,
    RKNN_TENSOR_BFLOAT16 = 11,
    RKNN_TENSOR_TYPE_MAX
} rknn_tensor_type;

typedef enum _rknn_tensor_qnt_type {
    RKNN_TENSOR_QNT_NONE = 0,
    RKNN_TENSOR_QNT_DFP = 1,
    RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC = 2,
    RKNN_TENSOR_QNT_MAX
} rknn_tensor_qnt_type;

typedef enum _rknn_tensor_format {
    RKNN_TENSOR_NCHW = 0,
    RKNN_TENSOR_NHWC = 1,
    RKNN_TENSOR_NC1HWC2 = 2,
    RKNN_TENSOR_UNDEFINED = 3,
    RKNN_TENSOR_FORMAT_MAX
} rknn_tensor_format;

typedef enum _rknn_core_mask {
    RKNN_NPU_CORE_AUTO = 0,
    RKNN_NPU_CORE_0 = 1,
    RKNN_NPU_CORE_1 = 2,
    RKNN_NPU_CORE_2 = 4,
    RKNN_NPU_CORE_0_1 = 3,
    RKNN_NPU_CORE_0_1_2 = 7,
    RKNN_NPU_CORE_ALL = 0xffff,
    RKNN_NPU_CORE_UNDEFINED = 0x10000
} rknn_core_mask;

typedef enum _rknn_tensor_mem_flags {
    RKNN_TENSOR_MEMORY_FLAGS_ALLOC_INSIDE = 1,
    RKNN_TENSOR_MEMORY_FLAGS_FROM_FD = 2,
    RKNN_TENSOR_MEMORY_FLAGS_FROM_PHYS = 3,
    RKNN_TENSOR_MEMORY_FLAGS_UNKNOWN
} rknn_tensor_mem_flags;

typedef enum _rknn_mem_alloc_flags {
    RKNN_FLAG_MEMORY_FLAGS_DEFAULT = 0,   /* cacheable */
    RKNN_FLAG_MEMORY_CACHEABLE = 1,
    RKNN_FLAG_MEMORY_NON_CACHEABLE = 2,
    RKNN_FLAG_MEMORY_TRY_ALLOC_SRAM = 4
} rknn_mem_alloc_flags;

typedef enum _rknn_mem_sync_mode {
    RKNN_MEMORY_SYNC_TO_DEVICE = 0x1,
    RKNN_MEMORY_SYNC_FROM_DEVICE = 0x2,
    RKNN_MEMORY_SYNC_BIDIRECTIONAL = 0x3
} rknn_mem_sync_mode;

/* ---- structs (LP64 sizes in the comments) ---------------------------------------------- */

/* RKNN_QUERY_IN_OUT_NUM, 8 bytes. */
typedef struct _rknn_input_output_num {
    uint32_t n_input;
    uint32_t n_output;
} rknn_input_output_num;

/* RKNN_QUERY_*_ATTR, 376 bytes.  w_stride is filled by the runtime; h_stride is set by the
 * caller (multi-batch NHWC zero-copy input), 0 meaning "height". */
typedef struct _rknn_tensor_attr {
    uint32_t index;
    uint32_t n_dims;
    uint32_t dims[RKNN_MAX_DIMS];
    char name[RKNN_MAX_NAME_LEN];
    uint32_t n_elems;
    uint32_t size;
    rknn_tensor_format fmt;
    rknn_tensor_type type;
    rknn_tensor_qnt_type qnt_type;
    int8_t fl;
    int32_t zp;
    float scale;
    uint32_t w_stride;
    uint32_t size_with_stride;
    uint8_t pass_through;
    uint32_t h_stride;
} rknn_tensor_attr;

/* RKNN_QUERY_INPUT_DYNAMIC_RANGE, 33040 bytes. */
typedef struct _rknn_input_range {
    uint32_t index;
    uint32_t shape_number;
    rknn_tensor_format fmt;
    char name[RKNN_MAX_NAME_LEN];
    uint32_t dyn_range[RKNN_MAX_DYNAMIC_SHAPE_NUM][RKNN_MAX_DIMS];
    uint32_t n_dims;
} rknn_input_range;

/* RKNN_QUERY_PERF_DETAIL, 16 bytes; perf_data is owned by the runtime (never free it). */
typedef struct _rknn_perf_detail {
    char* perf_data;
    uint64_t data_len;
} rknn_perf_detail;

/* RKNN_QUERY_PERF_RUN, 8 bytes; microseconds. */
typedef struct _rknn_perf_run {
    int64_t run_duration;
} rknn_perf_run;

/* RKNN_QUERY_SDK_VERSION, 512 bytes. */
typedef struct _rknn_sdk_version {
    char api_version[256];
    char drv_version[256];
} rknn_sdk_version;

/* RKNN_QUERY_MEM_SIZE, 64 bytes. */
typedef struct _rknn_mem_size {
    uint32_t total_weight_size;
    uint32_t total_internal_size;
    uint64_t total_dma_allocated_size;
    uint32_t total_sram_size;
    uint32_t free_sram_size;
    uint32_t reserved[10];
} rknn_mem_size;

/* RKNN_QUERY_CUSTOM_STRING, 1024 bytes. */
typedef struct _rknn_custom_string {
    char string[1024];
} rknn_custom_string;

/* Tensor memory (rknn_create_mem*), 40 bytes.  A tensor's bytes start at virt_addr + offset. */
typedef struct _rknn_tensor_mem {
    void* virt_addr;
    uint64_t phys_addr;
    int32_t fd;
    int32_t offset;
    uint32_t size;
    uint32_t flags;
    void* priv_data;
} rknn_tensor_mem;

/* rknn_inputs_set element, 32 bytes. */
typedef struct _rknn_input {
    uint32_t index;
    void* buf;
    uint32_t size;
    uint8_t pass_through;
    rknn_tensor_type type;
    rknn_tensor_format fmt;
} rknn_input;

/* rknn_outputs_get element, 24 bytes.  is_prealloc == 0: buf belongs to the runtime until
 * rknn_outputs_release. */
typedef struct _rknn_output {
    uint8_t want_float;
    uint8_t is_prealloc;
    uint32_t index;
    void* buf;
    uint32_t size;
} rknn_output;

/* Optional rknn_init argument, 136 bytes. */
typedef struct _rknn_init_extend {
    rknn_context ctx;
    int32_t real_model_offset;
    uint32_t real_model_size;
    int32_t model_buffer_fd;
    uint32_t model_buffer_flags;
    uint8_t reserved[112];
} rknn_init_extend;

/* Optional rknn_run / rknn_wait argument, 24 bytes (documented as not available: pass NULL). */
typedef struct _rknn_run_extend {
    uint64_t frame_id;
    int32_t non_block;
    int32_t timeout_ms;
    int32_t fence_fd;
} rknn_run_extend;

/* Optional rknn_outputs_get argument, 8 bytes. */
typedef struct _rknn_output_extend {
    uint64_t frame_id;
} rknn_output_extend;

/* ---- functions ------------------------------------------------------------------------ */
/* size > 0: model points to a buffer of size bytes; size == 0: model is a file path. */
int rknn_init(rknn_context* context, void* model, uint32_t size, uint32_t flag,
              rknn_init_extend* extend);
int rknn_dup_context(rknn_context* context_in, rknn_context* context_out);
int rknn_destroy(rknn_context context);
int rknn_query(rknn_context context, rknn_query_cmd cmd, void* info, uint32_t size);
int rknn_inputs_set(rknn_context context, uint32_t n_inputs, rknn_input inputs[]);
int rknn_set_batch_core_num(rknn_context context, int core_num);
int rknn_set_core_mask(rknn_context context, rknn_core_mask core_mask);
int rknn_run(rknn_context context, rknn_run_extend* extend);
int rknn_wait(rknn_context context, rknn_run_extend* extend);
int rknn_outputs_get(rknn_context context, uint32_t n_outputs, rknn_output outputs[],
                     rknn_output_extend* extend);
int rknn_outputs_release(rknn_context context, uint32_t n_ouputs, rknn_output outputs[]);

rknn_tensor_mem* rknn_create_mem_from_phys(rknn_context ctx, uint64_t phys_addr,
                                           void* virt_addr, uint32_t size);
rknn_tensor_mem* rknn_create_mem_from_fd(rknn_context ctx, int32_t fd, void* virt_addr,
                                         uint32_t size, int32_t offset);
rknn_tensor_mem* rknn_create_mem_from_mb_blk(rknn_context ctx, void* mb_blk, int32_t offset);
rknn_tensor_mem* rknn_create_mem(rknn_context ctx, uint32_t size);
rknn_tensor_mem* rknn_create_mem2(rknn_context ctx, uint64_t size, uint64_t alloc_flags);
int rknn_destroy_mem(rknn_context ctx, rknn_tensor_mem* mem);

int rknn_set_weight_mem(rknn_context ctx, rknn_tensor_mem* mem);
int rknn_set_internal_mem(rknn_context ctx, rknn_tensor_mem* mem);
int rknn_set_io_mem(rknn_context ctx, rknn_tensor_mem* mem, rknn_tensor_attr* attr);

/* Deprecated: absent from current runtimes (use rknn_set_input_shapes). */
int rknn_set_input_shape(rknn_context ctx, rknn_tensor_attr* attr);
int rknn_set_input_shapes(rknn_context ctx, uint32_t n_inputs, rknn_tensor_attr attr[]);

int rknn_mem_sync(rknn_context context, rknn_tensor_mem* mem, rknn_mem_sync_mode mode);

#ifdef __cplusplus
}
#endif

#endif /* RKNNLITE_RKNN_API_H */
