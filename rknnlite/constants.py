"""Enumerations mirroring the RKNN C API (rknn_api.h v2.3.2), with their exact values.

Members are the C names without their prefix: ``RKNN_TENSOR_INT8`` is
``TensorType.INT8``, ``RKNN_NPU_CORE_0_1_2`` is ``CoreMask.CORE_0_1_2``.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

__all__ = [
    "MAX_DIMS",
    "MAX_NUM_CHANNEL",
    "MAX_NAME_LEN",
    "MAX_DYNAMIC_SHAPE_NUM",
    "TensorType",
    "TensorFormat",
    "QntType",
    "CoreMask",
    "Lite2CoreMasks",
    "QueryCmd",
    "InitFlag",
    "TensorMemFlag",
    "MemAllocFlag",
    "MemSyncMode",
    "TargetType",
]

MAX_DIMS = 16
MAX_NUM_CHANNEL = 15
MAX_NAME_LEN = 256
MAX_DYNAMIC_SHAPE_NUM = 512


class TensorType(IntEnum):
    """``rknn_tensor_type``: element type of a tensor."""

    FLOAT32 = 0
    FLOAT16 = 1
    INT8 = 2
    UINT8 = 3
    INT16 = 4
    UINT16 = 5
    INT32 = 6
    UINT32 = 7
    INT64 = 8
    BOOL = 9
    INT4 = 10
    BFLOAT16 = 11

    @property
    def short_name(self) -> str:
        """The runtime's display string (``get_type_string``): ``"FP32"``, ``"INT8"``, ..."""
        return _TYPE_STRINGS[self]


_TYPE_STRINGS = {
    TensorType.FLOAT32: "FP32",
    TensorType.FLOAT16: "FP16",
    TensorType.INT8: "INT8",
    TensorType.UINT8: "UINT8",
    TensorType.INT16: "INT16",
    TensorType.UINT16: "UINT16",
    TensorType.INT32: "INT32",
    TensorType.UINT32: "UINT32",
    TensorType.INT64: "INT64",
    TensorType.BOOL: "BOOL",
    TensorType.INT4: "INT4",
    TensorType.BFLOAT16: "BF16",
}


class TensorFormat(IntEnum):
    """``rknn_tensor_format``: memory layout of a tensor."""

    NCHW = 0
    NHWC = 1
    NC1HWC2 = 2
    UNDEFINED = 3


class QntType(IntEnum):
    """``rknn_tensor_qnt_type``: quantization scheme of a tensor."""

    NONE = 0
    DFP = 1
    AFFINE_ASYMMETRIC = 2


class CoreMask(IntEnum):
    """``rknn_core_mask``: which NPU cores run a context (RK3588: 3 cores, RK3576: 2)."""

    AUTO = 0
    CORE_0 = 1
    CORE_1 = 2
    CORE_2 = 4
    CORE_0_1 = 3
    CORE_0_1_2 = 7
    ALL = 0xFFFF
    UNDEFINED = 0x10000


class Lite2CoreMasks:
    """The ``NPU_CORE_*`` class attributes of Lite2's ``RKNNLite`` and RKNN-Toolkit2's ``RKNN``
    (both inherit them), each the :class:`CoreMask` member itself (``NPU_CORE_0_1 is
    CoreMask.CORE_0_1``; IntEnum, so it compares equal to Lite2's plain ints)."""

    NPU_CORE_AUTO = CoreMask.AUTO
    NPU_CORE_0 = CoreMask.CORE_0
    NPU_CORE_1 = CoreMask.CORE_1
    NPU_CORE_2 = CoreMask.CORE_2
    NPU_CORE_0_1 = CoreMask.CORE_0_1
    NPU_CORE_0_1_2 = CoreMask.CORE_0_1_2
    NPU_CORE_ALL = CoreMask.ALL


class QueryCmd(IntEnum):
    """``rknn_query_cmd``: what ``rknn_query`` / ``Context.query`` reports."""

    IN_OUT_NUM = 0
    INPUT_ATTR = 1
    OUTPUT_ATTR = 2
    PERF_DETAIL = 3
    PERF_RUN = 4
    SDK_VERSION = 5
    MEM_SIZE = 6
    CUSTOM_STRING = 7
    NATIVE_INPUT_ATTR = 8
    NATIVE_OUTPUT_ATTR = 9
    NATIVE_NC1HWC2_INPUT_ATTR = 8
    NATIVE_NC1HWC2_OUTPUT_ATTR = 9
    NATIVE_NHWC_INPUT_ATTR = 10
    NATIVE_NHWC_OUTPUT_ATTR = 11
    DEVICE_MEM_INFO = 12
    INPUT_DYNAMIC_RANGE = 13
    CURRENT_INPUT_ATTR = 14
    CURRENT_OUTPUT_ATTR = 15
    CURRENT_NATIVE_INPUT_ATTR = 16
    CURRENT_NATIVE_OUTPUT_ATTR = 17


class InitFlag(IntFlag):
    """Flags of ``rknn_init`` (``RKNN_FLAG_*``)."""

    PRIOR_HIGH = 0x0
    PRIOR_MEDIUM = 0x1
    PRIOR_LOW = 0x2
    ASYNC_MASK = 0x4
    COLLECT_PERF_MASK = 0x8
    MEM_ALLOC_OUTSIDE = 0x10
    SHARE_WEIGHT_MEM = 0x20
    FENCE_IN_OUTSIDE = 0x40
    FENCE_OUT_OUTSIDE = 0x80
    COLLECT_MODEL_INFO_ONLY = 0x100
    INTERNAL_ALLOC_OUTSIDE = 0x200
    EXECUTE_FALLBACK_PRIOR_DEVICE_GPU = 0x400
    ENABLE_SRAM = 0x800
    SHARE_SRAM = 0x1000
    DISABLE_PROC_HIGH_PRIORITY = 0x2000
    DISABLE_FLUSH_INPUT_MEM_CACHE = 0x4000
    DISABLE_FLUSH_OUTPUT_MEM_CACHE = 0x8000
    MODEL_BUFFER_ZERO_COPY = 0x10000
    MEM_FLAG_ALLOC_NO_CONTEXT = 0x20000


class TensorMemFlag(IntEnum):
    """``rknn_tensor_mem_flags``: where a ``rknn_tensor_mem`` came from."""

    ALLOC_INSIDE = 1
    FROM_FD = 2
    FROM_PHYS = 3
    UNKNOWN = 4


class MemAllocFlag(IntFlag):
    """``rknn_mem_alloc_flags`` for ``create_mem`` (DEFAULT means cacheable)."""

    DEFAULT = 0
    CACHEABLE = 1
    NON_CACHEABLE = 2
    TRY_ALLOC_SRAM = 4


class MemSyncMode(IntEnum):
    """``rknn_mem_sync_mode``: direction of a cache sync."""

    TO_DEVICE = 1
    FROM_DEVICE = 2
    BIDIRECTIONAL = 3


class TargetType(IntEnum):
    """``rknn_target_type`` of a custom operator."""

    CPU = 1
    GPU = 2
