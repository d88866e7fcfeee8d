"""Context.query: every QueryCmd, index handling and the vendor's errors."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import InitFlag, InvalidParamError, ModelInvalidError, QueryCmd, TensorAttr, TensorFormat, TensorType
from rknnlite.tensors.ranges import InputRange, IoNum


@pytest.fixture()
def ctx(context_models):
    with rknnlite.Context(context_models["conv_i8"]) as c:
        yield c


def test_every_command_answers_or_raises_a_typed_error(ctx):
    ctx.run([np.zeros((1, 8, 8, 3), np.uint8)])
    for cmd in QueryCmd:
        try:
            answer = ctx.query(cmd)
        except rknnlite.RKNNError as e:
            assert cmd in (QueryCmd.PERF_DETAIL, QueryCmd.DEVICE_MEM_INFO, QueryCmd.INPUT_DYNAMIC_RANGE), (cmd, e)
        else:
            assert answer is not None, cmd


def test_in_out_num_and_attrs(ctx):
    assert ctx.query(QueryCmd.IN_OUT_NUM) == IoNum(1, 1) == (1, 1)
    assert ctx.query(QueryCmd.INPUT_ATTR) == ctx.inputs
    assert ctx.query(QueryCmd.OUTPUT_ATTR, index=0) == ctx.outputs[0]
    attr = ctx.query(QueryCmd.INPUT_ATTR, 0)
    assert isinstance(attr, TensorAttr) and (attr.type, attr.zp, attr.scale) == (TensorType.INT8, -5, 0.02)


def test_native_attrs_for_the_model_platform(ctx):
    (inp,) = ctx.query(QueryCmd.NATIVE_INPUT_ATTR)
    assert (inp.fmt, inp.dims, inp.type, inp.w_stride, inp.zp, inp.scale) == (
        TensorFormat.NHWC, (1, 8, 8, 3), TensorType.INT8, 16, -5, 0.02)  # rk3588: rows aligned to 16 px
    assert inp.size_with_stride == 8 * 16 * 3
    out = ctx.query(QueryCmd.NATIVE_OUTPUT_ATTR, 0)
    assert (out.fmt, out.dims, out.type) == (TensorFormat.NC1HWC2, (1, 1, 8, 8, 16), TensorType.INT8)
    assert ctx.query(QueryCmd.NATIVE_NC1HWC2_OUTPUT_ATTR, 0) == out
    nhwc = ctx.query(QueryCmd.NATIVE_NHWC_OUTPUT_ATTR, 0)
    assert (nhwc.fmt, nhwc.dims) == (TensorFormat.NHWC, (1, 8, 8, 4))
    assert ctx.query(QueryCmd.NATIVE_NHWC_INPUT_ATTR) == ctx.native_inputs


def test_float_models_are_float16_natively(context_models):
    with rknnlite.Context(context_models["relu13"]) as c:
        (inp,) = c.native_inputs
        assert (inp.type, inp.fmt, inp.dims) == (TensorType.FLOAT16, TensorFormat.NC1HWC2, (1, 2, 2, 2, 8))


def test_native_layout_follows_the_target_platform(context_models):
    import dataclasses

    from rknnlite.model.portable import read_portable, write_portable

    model = read_portable(memoryview(context_models["conv_i8"]))
    meta = dataclasses.replace(model.metadata, target_platforms=("rk3568",))
    with rknnlite.Context(write_portable(meta, model.graph)) as c:
        assert c.native_inputs[0].w_stride == 8  # RK3566/RK3568 align rows to 8 px
        assert c.native_outputs[0].dims == (1, 1, 8, 8, 8)  # int8 C2 = 8 there


def test_current_attrs_of_a_static_model(ctx):
    assert ctx.query(QueryCmd.CURRENT_INPUT_ATTR) == ctx.inputs
    assert ctx.query(QueryCmd.CURRENT_OUTPUT_ATTR) == ctx.outputs
    assert ctx.query(QueryCmd.CURRENT_NATIVE_INPUT_ATTR) == ctx.native_inputs
    assert ctx.query(QueryCmd.CURRENT_NATIVE_OUTPUT_ATTR) == ctx.native_outputs


def test_sdk_version_and_custom_string(portable_model):
    from rknnlite.model.graph import Node
    from rknnlite.model.spec import TensorSpec

    data = portable_model([Node("Relu", "r", ["x"], ["y"])], [TensorSpec("x", (4,), "float32")],
                          [TensorSpec("y", (4,), "float32")], custom_string="hello model")
    with rknnlite.Context(data) as c:
        assert c.query(QueryCmd.CUSTOM_STRING) == "hello model" == c.custom_string
        version = c.query(QueryCmd.SDK_VERSION)
        assert set(version) == {"api", "drv"} and "rknnlite" in version["api"]


def test_perf_and_mem_queries_delegate(context_models):
    x = np.zeros((1, 8, 8, 3), np.uint8)  # NHWC, as the image input says
    with rknnlite.Context(context_models["conv_i8"], flags=InitFlag.COLLECT_PERF_MASK) as c:
        c.run([x])
        assert c.query(QueryCmd.PERF_DETAIL) == c.perf_detail()
        assert isinstance(c.query(QueryCmd.PERF_RUN), int)
        assert c.query(QueryCmd.MEM_SIZE) == c.mem_size()
    with rknnlite.Context(context_models["conv_i8"]) as c:
        c.run([x])
        with pytest.raises(InvalidParamError, match="COLLECT_PERF_MASK"):
            c.query(QueryCmd.PERF_DETAIL)


def test_vendor_errors(ctx):
    with pytest.raises(InvalidParamError, match=r"index 1 is out of range; the model has 1 inputs"):
        ctx.query(QueryCmd.INPUT_ATTR, 1)
    with pytest.raises(InvalidParamError, match="out of range; the model has 1 outputs"):
        ctx.query(QueryCmd.CURRENT_NATIVE_OUTPUT_ATTR, -1)
    with pytest.raises(InvalidParamError, match="takes no index"):
        ctx.query(QueryCmd.IN_OUT_NUM, 0)
    with pytest.raises(InvalidParamError, match="unknown query command 99"):
        ctx.query(99)
    with pytest.raises(InvalidParamError, match="DEVICE_MEM_INFO .* not by the software backend"):
        ctx.query(QueryCmd.DEVICE_MEM_INFO)
    with pytest.raises(ModelInvalidError, match="static-shape model") as e:
        ctx.query(QueryCmd.INPUT_DYNAMIC_RANGE)
    assert e.value.code == -6
    assert ctx.query(QueryCmd.IN_OUT_NUM) == (1, 1)


def test_dynamic_range_query(context_models):
    with rknnlite.Context(context_models["dyn_add"]) as c:
        ranges = c.query(QueryCmd.INPUT_DYNAMIC_RANGE)
        assert ranges == c.input_ranges() and all(isinstance(r, InputRange) for r in ranges)
        assert c.query(QueryCmd.INPUT_DYNAMIC_RANGE, 1).name == "b"


def test_closed_context_refuses_queries(context_models):
    c = rknnlite.Context(context_models["add"])
    c.close()
    with pytest.raises(rknnlite.ContextInvalidError):
        c.query(QueryCmd.IN_OUT_NUM)
