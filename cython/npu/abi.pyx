# cython: language_level=3
"""Import-time check that the C declarations this package was compiled with
(``cython/include/rknn_api.h``, ``rknn_custom_op.h``) have the RKNN ABI layout (LP64).

``SIZES`` maps each struct name to ``sizeof`` as compiled; importing this module raises
:class:`ImportError` naming every struct whose size differs from the public ABI (a build
for an unsupported ABI, e.g. 32-bit ARM, or damaged headers), so no native call can ever
exchange a mis-sized struct with librknnrt or a plugin.
"""

from abi_sizes cimport compiled_sizes

__all__ = ["SIZES", "EXPECTED_SIZES", "check_abi"]

#: sizeof of every struct of the ABI on LP64 (x86_64, aarch64), from the public reference: the one
#: table of expected sizes (rknnrt checks its own compiled sizes against it too).
EXPECTED_SIZES = {
    "rknn_context": 8,
    "rknn_input_output_num": 8,
    "rknn_tensor_attr": 376,
    "rknn_input_range": 33040,
    "rknn_perf_detail": 16,
    "rknn_perf_run": 8,
    "rknn_sdk_version": 512,
    "rknn_mem_size": 64,
    "rknn_custom_string": 1024,
    "rknn_tensor_mem": 40,
    "rknn_input": 32,
    "rknn_output": 24,
    "rknn_init_extend": 136,
    "rknn_run_extend": 24,
    "rknn_output_extend": 8,
    "rknn_custom_op_context": 48,
    "rknn_custom_op_tensor": 416,
    "rknn_custom_op_attr": 272,
    "rknn_custom_op": 832,
}

#: sizeof of every struct as this extension was compiled.
SIZES = compiled_sizes()


def check_abi(sizes=None, expected=None):
    """Raise :class:`ImportError` listing every struct whose compiled size (``sizes``,
    default :data:`SIZES`) differs from ``expected`` (default :data:`EXPECTED_SIZES`)."""
    sizes = SIZES if sizes is None else sizes
    expected = EXPECTED_SIZES if expected is None else expected
    wrong = [f"{name} is {sizes.get(name)} bytes, the RKNN ABI needs {size}"
             for name, size in expected.items() if sizes.get(name) != size]
    if wrong:
        raise ImportError("rknnlite's native RKNN declarations do not match the RKNN C ABI (LP64): "
                          + "; ".join(wrong) + ". Rebuild rknnlite for a 64-bit platform from intact sources.")


check_abi()
