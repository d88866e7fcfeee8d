"""The project's C declarations of the RKNN ABI (cython/include/rknn_api.h, rknn_custom_op.h)
against the public reference: every struct size and field offset (LP64), every constant,
the enum values of rknnlite.constants, and the import-time size check of the extension."""

from __future__ import annotations

import struct
import subprocess

import pytest

from conftest import REPO
from rknnlite import constants as C

pytestmark = pytest.mark.skipif(struct.calcsize("P") != 8, reason="the reference layout is LP64")

#: struct -> (size, {field: offset}) from the public reference (rknn-api-facts.md §2, §3).
LAYOUT = {
    "rknn_input_output_num": (8, {"n_input": 0, "n_output": 4}),
    "rknn_tensor_attr": (376, {"index": 0, "n_dims": 4, "dims": 8, "name": 72, "n_elems": 328, "size": 332,
                               "fmt": 336, "type": 340, "qnt_type": 344, "fl": 348, "zp": 352, "scale": 356,
                               "w_stride": 360, "size_with_stride": 364, "pass_through": 368, "h_stride": 372}),
    "rknn_input_range": (33040, {"index": 0, "shape_number": 4, "fmt": 8, "name": 12, "dyn_range": 268,
                                 "n_dims": 33036}),
    "rknn_perf_detail": (16, {"perf_data": 0, "data_len": 8}),
    "rknn_perf_run": (8, {"run_duration": 0}),
    "rknn_sdk_version": (512, {"api_version": 0, "drv_version": 256}),
    "rknn_mem_size": (64, {"total_weight_size": 0, "total_internal_size": 4, "total_dma_allocated_size": 8,
                           "total_sram_size": 16, "free_sram_size": 20, "reserved": 24}),
    "rknn_custom_string": (1024, {"string": 0}),
    "rknn_tensor_mem": (40, {"virt_addr": 0, "phys_addr": 8, "fd": 16, "offset": 20, "size": 24, "flags": 28,
                             "priv_data": 32}),
    "rknn_input": (32, {"index": 0, "buf": 8, "size": 16, "pass_through": 20, "type": 24, "fmt": 28}),
    "rknn_output": (24, {"want_float": 0, "is_prealloc": 1, "index": 4, "buf": 8, "size": 16}),
    "rknn_init_extend": (136, {"ctx": 0, "real_model_offset": 8, "real_model_size": 12, "model_buffer_fd": 16,
                               "model_buffer_flags": 20, "reserved": 24}),
    "rknn_run_extend": (24, {"frame_id": 0, "non_block": 8, "timeout_ms": 12, "fence_fd": 16}),
    "rknn_output_extend": (8, {"frame_id": 0}),
    "rknn_gpu_op_context": (24, {"cl_context": 0, "cl_command_queue": 8, "cl_kernel": 16}),
    "rknn_custom_op_context": (48, {"target": 0, "internal_ctx": 8, "gpu_ctx": 16, "priv_data": 40}),
    "rknn_custom_op_tensor": (416, {"attr": 0, "mem": 376}),
    "rknn_custom_op_attr": (272, {"name": 0, "dtype": 256, "n_elems": 260, "data": 264}),
    "rknn_custom_op": (832, {"version": 0, "target": 4, "op_type": 8, "cl_kernel_name": 264,
                             "cl_kernel_source": 520, "cl_source_size": 528, "cl_build_options": 536,
                             "init": 792, "prepare": 800, "compute": 808, "compute_native": 816,
                             "destroy": 824}),
}

#: scalar types: 8-byte handles, 4-byte enums.
SCALARS = {"rknn_context": 8, "rknn_custom_op_interal_context": 8, "rknn_query_cmd": 4, "rknn_tensor_type": 4,
           "rknn_tensor_qnt_type": 4, "rknn_tensor_format": 4, "rknn_core_mask": 4, "rknn_tensor_mem_flags": 4,
           "rknn_mem_alloc_flags": 4, "rknn_mem_sync_mode": 4, "rknn_target_type": 4}

#: constants that have no member in rknnlite.constants.
OTHER_CONSTANTS = {
    "RKNN_SUCC": 0, "RKNN_ERR_FAIL": -1, "RKNN_ERR_TIMEOUT": -2, "RKNN_ERR_DEVICE_UNAVAILABLE": -3,
    "RKNN_ERR_MALLOC_FAIL": -4, "RKNN_ERR_PARAM_INVALID": -5, "RKNN_ERR_MODEL_INVALID": -6,
    "RKNN_ERR_CTX_INVALID": -7, "RKNN_ERR_INPUT_INVALID": -8, "RKNN_ERR_OUTPUT_INVALID": -9,
    "RKNN_ERR_DEVICE_UNMATCH": -10, "RKNN_ERR_INCOMPATILE_PRE_COMPILE_MODEL": -11,
    "RKNN_ERR_INCOMPATILE_OPTIMIZATION_LEVEL_VERSION": -12, "RKNN_ERR_TARGET_PLATFORM_UNMATCH": -13,
    "RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE": -14, "RKNN_QUERY_CMD_MAX": 18, "RKNN_TENSOR_TYPE_MAX": 12,
    "RKNN_TENSOR_QNT_MAX": 3, "RKNN_TENSOR_FORMAT_MAX": 4, "RKNN_TENSOR_MEMORY_FLAGS_UNKNOWN": 4,
    "RKNN_TARGET_TYPE_MAX": 3, "RKNN_CUSTOM_OP_MAX_STR_LEN": 64, "RKNN_CUSTOM_OP_MAX_VALUE_LEN": 32,
}

#: C prefix of each rknnlite.constants enum (member name = C name without the prefix).
ENUM_PREFIXES = [
    (C.TensorType, "RKNN_TENSOR_"), (C.TensorFormat, "RKNN_TENSOR_"), (C.QntType, "RKNN_TENSOR_QNT_"),
    (C.CoreMask, "RKNN_NPU_CORE_"), (C.QueryCmd, "RKNN_QUERY_"), (C.MemSyncMode, "RKNN_MEMORY_SYNC_"),
]


@pytest.fixture(scope="module")
def layout(compile_c):
    exe = compile_c([REPO / "tests" / "native" / "abi_layout.c"], "abi_layout", args=["-pedantic"])
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    facts = {}
    for line in out.splitlines():
        kind, name, value = line.split(" ", 2)
        facts[(kind, name)] = value if kind == "prefix" else int(value)
    return facts


@pytest.mark.parametrize("name", sorted(LAYOUT))
def test_struct_size_and_every_offset(layout, name):
    size, offsets = LAYOUT[name]
    assert layout[("size", name)] == size
    declared = {k[1].split(".", 1)[1]: v for k, v in layout.items() if k[0] == "offset" and k[1].startswith(name + ".")}
    assert declared == offsets  # every field, in the reference's order and place


def test_scalar_sizes(layout):
    assert {name: layout[("size", name)] for name in SCALARS} == SCALARS


def test_constants_match_rknnlite_constants(layout):
    consts = {k[1]: v for k, v in layout.items() if k[0] == "const"}
    checked = 0
    for enum, prefix in ENUM_PREFIXES:
        for member in enum:
            for name in [n for n, m in enum.__members__.items() if m is member]:
                c_name = prefix + (name[5:] if enum is C.CoreMask and name.startswith("CORE_") else name)
                assert consts[c_name] == int(member), c_name
                checked += 1
    flags = {"RKNN_FLAG_" + n: int(m) for n, m in C.InitFlag.__members__.items()}
    flags["RKNN_MEM_FLAG_ALLOC_NO_CONTEXT"] = flags.pop("RKNN_FLAG_MEM_FLAG_ALLOC_NO_CONTEXT")
    for name, value in flags.items():
        assert consts[name] == value, name
    memflags = {"DEFAULT": "RKNN_FLAG_MEMORY_FLAGS_DEFAULT", "CACHEABLE": "RKNN_FLAG_MEMORY_CACHEABLE",
                "NON_CACHEABLE": "RKNN_FLAG_MEMORY_NON_CACHEABLE", "TRY_ALLOC_SRAM": "RKNN_FLAG_MEMORY_TRY_ALLOC_SRAM"}
    for name, member in C.MemAllocFlag.__members__.items():
        assert consts[memflags[name]] == int(member), name
    for name, member in C.TensorMemFlag.__members__.items():
        assert consts["RKNN_TENSOR_MEMORY_FLAGS_" + name] == int(member), name
    for name, member in C.TargetType.__members__.items():
        assert consts["RKNN_TARGET_TYPE_" + name] == int(member), name
    assert checked >= 50  # every member of the six enums, aliases included
    for name in ("MAX_DIMS", "MAX_NUM_CHANNEL", "MAX_NAME_LEN", "MAX_DYNAMIC_SHAPE_NUM"):
        assert consts["RKNN_" + name] == getattr(C, name)
    for name, value in OTHER_CONSTANTS.items():
        assert consts[name] == value, name
    assert layout[("prefix", "RKNN_CSTOP_PLUGIN_PREFIX")] == "librkcst_"


def test_error_codes_match_rknnlite_errors(layout):
    from rknnlite.errors import error_name

    for code in range(-14, 1):
        name = error_name(code)
        assert layout[("const", name)] == code


def test_the_binding_checks_against_the_one_size_table():
    abi = pytest.importorskip("rknnlite._native.abi")
    rknnrt = pytest.importorskip("rknnlite._native.rknnrt")
    assert rknnrt.ABI_SIZES is abi.EXPECTED_SIZES


def test_extension_asserts_the_same_sizes_at_import():
    abi = pytest.importorskip("rknnlite._native.abi")
    assert abi.SIZES == abi.EXPECTED_SIZES
    assert abi.EXPECTED_SIZES == {**{k: v[0] for k, v in LAYOUT.items() if k != "rknn_gpu_op_context"},
                                  "rknn_context": 8}
    wrong = dict(abi.SIZES, rknn_tensor_attr=372)
    with pytest.raises(ImportError, match="rknn_tensor_attr is 372 bytes, the RKNN ABI needs 376"):
        abi.check_abi(wrong)
