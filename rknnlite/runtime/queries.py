"""``Context.query``: every ``rknn_query`` command, answered with Python objects.

| command | answer |
|---|---|
| IN_OUT_NUM | :class:`IoNum` ``(n_input, n_output)`` |
| INPUT_ATTR, OUTPUT_ATTR | :class:`TensorAttr` (model layout) |
| NATIVE_INPUT_ATTR, NATIVE_OUTPUT_ATTR (= NATIVE_NC1HWC2_*) | :class:`TensorAttr` (NPU layout) |
| NATIVE_NHWC_INPUT_ATTR, NATIVE_NHWC_OUTPUT_ATTR | :class:`TensorAttr` (NPU layout, 4-D as NHWC) |
| CURRENT_INPUT_ATTR, CURRENT_OUTPUT_ATTR, CURRENT_NATIVE_* | the same for the current input shapes |
| INPUT_DYNAMIC_RANGE | :class:`InputRange` |
| PERF_DETAIL, PERF_RUN, MEM_SIZE | ``ctx.perf_detail()``, ``ctx.perf_run()``, ``ctx.mem_size()`` |
| SDK_VERSION | ``{"api": ..., "drv": ...}`` (the backend's: librknnrt's, or rknnlite's own) |
| CUSTOM_STRING | ``str`` |
| DEVICE_MEM_INFO | not available (RV1106/RK2118 only): :class:`InvalidParamError` |

Native attributes and the SDK version are the backend's answers (``Backend.native_attrs``,
``Backend.sdk_version``: librknnrt's on the npu backend).  Attribute and range queries take ``index``; ``None`` answers a list with one entry
per input (or output).
"""

from __future__ import annotations

from typing import Callable, Dict, List

from ..constants import QueryCmd
from ..errors import InvalidParamError, RKNNError
from ..tensors.ranges import InputRange, IoNum

__all__ = ["IoNum", "InputRange", "query", "INDEXED"]

_OP = "rknn_query"


def _attrs(getter: str) -> Callable:
    return lambda ctx: getattr(ctx, getter)


def _delegate(method: str) -> Callable:
    def call(ctx):
        fn = getattr(ctx, method, None)
        if fn is None:
            raise RKNNError(f"{method}() is not available in this build of rknnlite", op=_OP)
        return fn()
    return call


def _device_mem_info(ctx):
    raise InvalidParamError(
        f"DEVICE_MEM_INFO (the model buffer as an rknn_tensor_mem) is only reported on RV1106/RK2118 "
        f"runtimes, not by the {ctx.backend} backend", op=_OP)


#: Commands answered per tensor, with the context attribute holding the list.
INDEXED: Dict[QueryCmd, str] = {
    QueryCmd.INPUT_ATTR: "inputs",
    QueryCmd.OUTPUT_ATTR: "outputs",
    QueryCmd.NATIVE_INPUT_ATTR: "native_inputs",
    QueryCmd.NATIVE_OUTPUT_ATTR: "native_outputs",
    QueryCmd.NATIVE_NHWC_INPUT_ATTR: "_native_nhwc_inputs",
    QueryCmd.NATIVE_NHWC_OUTPUT_ATTR: "_native_nhwc_outputs",
    QueryCmd.INPUT_DYNAMIC_RANGE: "_input_range_list",
    QueryCmd.CURRENT_INPUT_ATTR: "current_inputs",
    QueryCmd.CURRENT_OUTPUT_ATTR: "current_outputs",
    QueryCmd.CURRENT_NATIVE_INPUT_ATTR: "current_native_inputs",
    QueryCmd.CURRENT_NATIVE_OUTPUT_ATTR: "current_native_outputs",
}

_WHOLE: Dict[QueryCmd, Callable] = {
    QueryCmd.IN_OUT_NUM: lambda ctx: IoNum(len(ctx.inputs), len(ctx.outputs)),
    QueryCmd.PERF_DETAIL: _delegate("perf_detail"),  # raises without InitFlag.COLLECT_PERF_MASK
    QueryCmd.PERF_RUN: _delegate("perf_run"),
    QueryCmd.SDK_VERSION: lambda ctx: ctx.sdk_version(),
    QueryCmd.MEM_SIZE: _delegate("mem_size"),
    QueryCmd.CUSTOM_STRING: lambda ctx: ctx.custom_string,
    QueryCmd.DEVICE_MEM_INFO: _device_mem_info,
}


def query(ctx, cmd, index=None):
    """Answer ``rknn_query(cmd)`` for ``ctx`` (see the module docstring for each command).

    Raises:
        InvalidParamError: an unknown command, an index out of range, or an index
            given to a command that does not take one.
        ModelInvalidError: INPUT_DYNAMIC_RANGE on a static-shape model (the vendor's -6).
    """
    try:
        cmd = QueryCmd(cmd)
    except ValueError:
        known = ", ".join(f"{c.name}={c.value}" for c in QueryCmd)
        raise InvalidParamError(f"unknown query command {cmd!r}; the commands are {known}", op=_OP) from None
    ctx._live()
    if cmd in INDEXED:
        values: List = getattr(ctx, INDEXED[cmd])
        if index is None:
            return list(values)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(values):
            what = "outputs" if "OUTPUT" in cmd.name else "inputs"
            raise InvalidParamError(
                f"{cmd.name}: index {index!r} is out of range; the model has {len(values)} {what} "
                f"(index 0..{len(values) - 1})", op=_OP)
        return values[index]
    if index is not None:
        raise InvalidParamError(f"{cmd.name} takes no index (got {index!r})", op=_OP)
    return _WHOLE[cmd](ctx)
