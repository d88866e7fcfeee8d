# sizeof of every struct of the RKNN C ABI as the including extension is compiled: the one list
# of the structs, shared by abi.pyx (which holds the expected sizes) and rknnrt.pyx.

from rknn_api cimport (rknn_context, rknn_custom_string, rknn_init_extend, rknn_input, rknn_input_output_num,
                       rknn_input_range, rknn_mem_size, rknn_output, rknn_output_extend, rknn_perf_detail,
                       rknn_perf_run, rknn_run_extend, rknn_sdk_version, rknn_tensor_attr, rknn_tensor_mem)
from rknn_custom_op cimport rknn_custom_op, rknn_custom_op_attr, rknn_custom_op_context, rknn_custom_op_tensor


cdef inline dict compiled_sizes():
    """{struct name: sizeof} of every ABI struct, as the calling extension was compiled."""
    return {
        "rknn_context": sizeof(rknn_context),
        "rknn_input_output_num": sizeof(rknn_input_output_num),
        "rknn_tensor_attr": sizeof(rknn_tensor_attr),
        "rknn_input_range": sizeof(rknn_input_range),
        "rknn_perf_detail": sizeof(rknn_perf_detail),
        "rknn_perf_run": sizeof(rknn_perf_run),
        "rknn_sdk_version": sizeof(rknn_sdk_version),
        "rknn_mem_size": sizeof(rknn_mem_size),
        "rknn_custom_string": sizeof(rknn_custom_string),
        "rknn_tensor_mem": sizeof(rknn_tensor_mem),
        "rknn_input": sizeof(rknn_input),
        "rknn_output": sizeof(rknn_output),
        "rknn_init_extend": sizeof(rknn_init_extend),
        "rknn_run_extend": sizeof(rknn_run_extend),
        "rknn_output_extend": sizeof(rknn_output_extend),
        "rknn_custom_op_context": sizeof(rknn_custom_op_context),
        "rknn_custom_op_tensor": sizeof(rknn_custom_op_tensor),
        "rknn_custom_op_attr": sizeof(rknn_custom_op_attr),
        "rknn_custom_op": sizeof(rknn_custom_op),
    }
