"""Enum values are exactly the C API's (rknn_api.h v2.3.2)."""

from __future__ import annotations

from rknnlite import constants as C


def test_tensor_type():
    assert [(m.name, m.value) for m in C.TensorType] == [
        ("FLOAT32", 0), ("FLOAT16", 1), ("INT8", 2), ("UINT8", 3), ("INT16", 4), ("UINT16", 5),
        ("INT32", 6), ("UINT32", 7), ("INT64", 8), ("BOOL", 9), ("INT4", 10), ("BFLOAT16", 11),
    ]
    assert C.TensorType.FLOAT16.short_name == "FP16" and C.TensorType.BFLOAT16.short_name == "BF16"


def test_formats_qnt_core_masks():
    assert dict(C.TensorFormat.__members__) == {"NCHW": 0, "NHWC": 1, "NC1HWC2": 2, "UNDEFINED": 3}
    assert dict(C.QntType.__members__) == {"NONE": 0, "DFP": 1, "AFFINE_ASYMMETRIC": 2}
    assert {m.name: m.value for m in C.CoreMask} == {
        "AUTO": 0, "CORE_0": 1, "CORE_1": 2, "CORE_2": 4, "CORE_0_1": 3, "CORE_0_1_2": 7,
        "ALL": 0xFFFF, "UNDEFINED": 0x10000,
    }


def test_query_commands():
    values = {name: m.value for name, m in C.QueryCmd.__members__.items()}
    assert values == {
        "IN_OUT_NUM": 0, "INPUT_ATTR": 1, "OUTPUT_ATTR": 2, "PERF_DETAIL": 3, "PERF_RUN": 4,
        "SDK_VERSION": 5, "MEM_SIZE": 6, "CUSTOM_STRING": 7, "NATIVE_INPUT_ATTR": 8,
        "NATIVE_OUTPUT_ATTR": 9, "NATIVE_NC1HWC2_INPUT_ATTR": 8, "NATIVE_NC1HWC2_OUTPUT_ATTR": 9,
        "NATIVE_NHWC_INPUT_ATTR": 10, "NATIVE_NHWC_OUTPUT_ATTR": 11, "DEVICE_MEM_INFO": 12,
        "INPUT_DYNAMIC_RANGE": 13, "CURRENT_INPUT_ATTR": 14, "CURRENT_OUTPUT_ATTR": 15,
        "CURRENT_NATIVE_INPUT_ATTR": 16, "CURRENT_NATIVE_OUTPUT_ATTR": 17,
    }


def test_init_flags():
    expected = {
        "PRIOR_HIGH": 0x0, "PRIOR_MEDIUM": 0x1, "PRIOR_LOW": 0x2, "ASYNC_MASK": 0x4, "COLLECT_PERF_MASK": 0x8,
        "MEM_ALLOC_OUTSIDE": 0x10, "SHARE_WEIGHT_MEM": 0x20, "FENCE_IN_OUTSIDE": 0x40, "FENCE_OUT_OUTSIDE": 0x80,
        "COLLECT_MODEL_INFO_ONLY": 0x100, "INTERNAL_ALLOC_OUTSIDE": 0x200,
        "EXECUTE_FALLBACK_PRIOR_DEVICE_GPU": 0x400, "ENABLE_SRAM": 0x800, "SHARE_SRAM": 0x1000,
        "DISABLE_PROC_HIGH_PRIORITY": 0x2000, "DISABLE_FLUSH_INPUT_MEM_CACHE": 0x4000,
        "DISABLE_FLUSH_OUTPUT_MEM_CACHE": 0x8000, "MODEL_BUFFER_ZERO_COPY": 0x10000,
        "MEM_FLAG_ALLOC_NO_CONTEXT": 0x20000,
    }
    assert {name: int(m) for name, m in C.InitFlag.__members__.items()} == expected


def test_memory_enums():
    assert {n: int(m) for n, m in C.MemAllocFlag.__members__.items()} == {
        "DEFAULT": 0, "CACHEABLE": 1, "NON_CACHEABLE": 2, "TRY_ALLOC_SRAM": 4}
    assert {n: int(m) for n, m in C.MemSyncMode.__members__.items()} == {
        "TO_DEVICE": 1, "FROM_DEVICE": 2, "BIDIRECTIONAL": 3}
    assert {n: int(m) for n, m in C.TensorMemFlag.__members__.items()} == {
        "ALLOC_INSIDE": 1, "FROM_FD": 2, "FROM_PHYS": 3, "UNKNOWN": 4}
    assert {n: int(m) for n, m in C.TargetType.__members__.items()} == {"CPU": 1, "GPU": 2}


def test_limits():
    assert (C.MAX_DIMS, C.MAX_NUM_CHANNEL, C.MAX_NAME_LEN, C.MAX_DYNAMIC_SHAPE_NUM) == (16, 15, 256, 512)
