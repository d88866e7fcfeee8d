"""Vendor runtime behaviours, written once for every backend.

The ``open_model`` fixture opens the fixture models (``tests/data/rknn-toolkit2``) on
each backend available here: "software" runs them converted by rknnlite.toolkit with the
vendor's settings; "npu" runs the vendor's own ``.rknn`` files through librknnrt (skipped
where that backend is unavailable); "fake-npu" runs them on the npu backend over the fake
librknnrt of ``tests/fake_rknnrt``: ``add_mul_fp16`` (a vendor graph the fake knows) as is,
``add_mul_i8`` as a fake-graph model with the vendor file's tensors and quantization.  The fake
has element-wise ops only, so only the tests marked ``fake_rknnrt_case`` (those opening add_mul alone)
get a "fake-npu" case; no case is generated that could never run.  Every test states one
behaviour of the vendor runtime
(C API reference, RKNN API user guide; ``reference/rknn-api-facts.md`` §2, §5).
"""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import (ContextInvalidError, DeviceUnavailableError, InputInvalidError, InvalidParamError,
                      ModelInvalidError, QntType, QueryCmd, TensorFormat, TensorType)
from rknnlite.model.loader import load_model

BACKENDS = ("software", "npu", "fake-npu")


def pytest_generate_tests(metafunc):
    if "open_model" in metafunc.fixturenames:
        fake = metafunc.definition.get_closest_marker("fake_rknnrt_case") is not None
        metafunc.parametrize("open_model", BACKENDS if fake else BACKENDS[:2], indirect=True)


def _fake_npu_model(request, vendor_fixtures, name: str, variant: str):
    """The model the fake librknnrt runs for fixture ``name``/``variant`` (and the fake set
    as librknnrt for this test); a test marked ``fake_rknnrt_case`` that opens another model fails."""
    pytest.importorskip("rknnlite._native.rknnrt")
    request.getfixturevalue("fake_rknnrt_env")
    vendor = vendor_fixtures / "rknn" / f"{name}_{variant}.rknn"
    if (name, variant) == ("add_mul", "fp16"):
        return vendor
    if (name, variant) == ("add_mul", "i8"):
        from fake_model import add_mul_model

        specs = list(vendor_spec(vendor_fixtures, name, variant).inputs) + \
            list(vendor_spec(vendor_fixtures, name, variant).outputs)
        quant = [(s.quant.scale[0], s.quant.zero_point[0]) for s in specs]
        path = request.getfixturevalue("tmp_path") / vendor.name
        path.write_bytes(add_mul_model(dtype="int8", quant=quant, toolkit_version="2.5.0"))
        return path
    pytest.fail(f"the fake librknnrt cannot run {vendor.name} (element-wise ops only): "
                "do not mark the test fake_rknnrt_case")


@pytest.fixture
def open_model(request, converted_fixture, vendor_fixtures):
    backend = request.param
    opened = []

    def open_(name: str, variant: str = "fp16", **kwargs):
        if backend == "software":
            path = converted_fixture(name, variant)
        elif backend == "fake-npu":
            path = _fake_npu_model(request, vendor_fixtures, name, variant)
        else:
            path = vendor_fixtures / "rknn" / f"{name}_{variant}.rknn"
        try:
            ctx = rknnlite.Context(str(path), backend=backend.replace("fake-", ""), **kwargs)
        except DeviceUnavailableError:
            pytest.skip(f"needs an NPU board with librknnrt.so (the {backend} backend is unavailable here)")
        opened.append(ctx)
        return ctx

    yield open_
    for ctx in opened:
        ctx.close()


def io(vendor_fixtures, name):
    return np.load(vendor_fixtures / "io" / f"{name}.npy")


def vendor_spec(vendor_fixtures, name, variant):
    return load_model(str(vendor_fixtures / "rknn" / f"{name}_{variant}.rknn")).model


def test_in_out_num(open_model):
    assert open_model("convnet").query(QueryCmd.IN_OUT_NUM) == (1, 1)
    assert tuple(open_model("add_mul").query(QueryCmd.IN_OUT_NUM)) == (2, 2)


def test_int8_inputs_report_int8_with_the_models_quant_params(open_model, vendor_fixtures):
    ctx = open_model("convnet", "i8")
    attr = ctx.query(QueryCmd.INPUT_ATTR, 0)
    quant = vendor_spec(vendor_fixtures, "convnet", "i8").inputs[0].quant
    assert (attr.type, attr.qnt_type) == (TensorType.INT8, QntType.AFFINE_ASYMMETRIC)
    assert attr.zp == quant.zero_point[0] and attr.scale == pytest.approx(quant.scale[0], rel=1e-6)


@pytest.mark.fake_rknnrt_case
@pytest.mark.parametrize("variant, type_, c2", [("fp16", TensorType.FLOAT16, 8), ("i8", TensorType.INT8, 16)])
def test_native_layouts_on_rk3588(open_model, variant, type_, c2):
    ctx = open_model("add_mul", variant)
    for attr in ctx.native_inputs:  # 3 channels: NHWC, rows aligned to 16 px
        assert (attr.fmt, attr.dims, attr.type, attr.w_stride) == (TensorFormat.NHWC, (1, 8, 8, 3), type_, 16)
    for attr in ctx.native_outputs:  # 4-D outputs: NC1HWC2
        assert (attr.fmt, attr.dims, attr.type) == (TensorFormat.NC1HWC2, (1, 1, 8, 8, c2), type_)
    nhwc = ctx.query(QueryCmd.NATIVE_NHWC_OUTPUT_ATTR, 1)
    assert (nhwc.fmt, nhwc.dims) == (TensorFormat.NHWC, (1, 8, 8, 3))


@pytest.mark.fake_rknnrt_case
def test_outputs_are_float32_in_model_layout(open_model, vendor_fixtures):
    ctx = open_model("add_mul")
    a, b = io(vendor_fixtures, "add_mul_ab0_in0"), io(vendor_fixtures, "add_mul_ab0_in1")
    outs = ctx.run([a, b], data_format="nchw")  # ONNX data; the npu presents these inputs as NHWC
    assert [(o.dtype, o.shape) for o in outs] == [(np.dtype(np.float32), (1, 3, 8, 8))] * 2
    for k, out in enumerate(outs):
        np.testing.assert_allclose(out, io(vendor_fixtures, f"add_mul_ab0_onnx_out{k}"), atol=2e-2, rtol=2e-3)


def test_want_float_false_gives_int8_for_quantized_outputs(open_model, vendor_fixtures):
    ctx = open_model("dyn_conv", "i8")
    x = io(vendor_fixtures, "dyn_conv_s1_16x16_in0")
    real = ctx.run([x], data_format="nchw")[0]
    raw = ctx.run([x], data_format="nchw", want_float=False)[0]
    out = ctx.query(QueryCmd.OUTPUT_ATTR, 0)
    assert raw.dtype == np.int8 and raw.shape == real.shape
    np.testing.assert_allclose((raw.astype(np.float32) - out.zp) * out.scale, real, atol=1e-5)


def test_want_float_false_gives_float16_for_float_outputs(open_model, vendor_fixtures):
    ctx = open_model("convnet", "i8")  # the Softmax output stays float in the int8 model
    raw = ctx.run([io(vendor_fixtures, "convnet_x0_in0")], data_format="nchw", want_float=False)[0]
    assert raw.dtype == np.float16 and raw.shape == (1, 10)


def test_static_model_has_no_dynamic_range(open_model):
    ctx = open_model("convnet")
    with pytest.raises(ModelInvalidError) as e:
        ctx.query(QueryCmd.INPUT_DYNAMIC_RANGE, 0)
    assert e.value.code == -6


def test_dynamic_model_ranges_and_current_attrs(open_model):
    ctx = open_model("dyn_conv", "i8")
    (r,) = ctx.input_ranges()
    # an image input: NHWC shapes, in the order the file keeps them (the largest first)
    assert r.fmt == TensorFormat.NHWC and r.dyn_range == ((1, 32, 32, 3), (1, 24, 40, 3), (1, 16, 16, 3))
    ctx.set_input_shapes([(1, 24, 40, 3)])
    assert ctx.query(QueryCmd.CURRENT_INPUT_ATTR, 0).dims == (1, 24, 40, 3)
    assert ctx.query(QueryCmd.CURRENT_OUTPUT_ATTR, 0).dims == (1, 2, 24, 40)
    with pytest.raises(InputInvalidError, match=r"\[1, 24, 24, 3\] are not one of the model's shape sets") as e:
        ctx.set_input_shapes([(1, 24, 24, 3)])
    assert e.value.code == -8


def test_dynamic_model_runs_each_set_from_the_arrays(open_model, vendor_fixtures):
    ctx = open_model("dyn_conv", "fp16")
    for case in ("s0_32x32", "s1_16x16", "s2_24x40"):
        out = ctx.run([io(vendor_fixtures, f"dyn_conv_{case}_in0")], data_format="nchw")[0]
        np.testing.assert_allclose(out, io(vendor_fixtures, f"dyn_conv_{case}_onnx_out0"), atol=1e-2, rtol=1e-2)


def test_bad_input_is_input_invalid_and_the_context_stays_usable(open_model, vendor_fixtures):
    ctx = open_model("convnet")
    x = io(vendor_fixtures, "convnet_x0_in0")
    with pytest.raises(InputInvalidError) as e:
        ctx.run([x, x])
    assert e.value.code == -8
    with pytest.raises(InputInvalidError):
        ctx.run([x[:, :, :16]])
    np.testing.assert_allclose(ctx.run([x], data_format="nchw")[0], io(vendor_fixtures, "convnet_x0_onnx_out0"),
                               atol=1e-2)


def test_query_errors(open_model):
    ctx = open_model("convnet")
    with pytest.raises(InvalidParamError):
        ctx.query(QueryCmd.OUTPUT_ATTR, 5)
    with pytest.raises(InvalidParamError):
        ctx.query(QueryCmd.PERF_DETAIL)  # needs InitFlag.COLLECT_PERF_MASK


def test_closed_context_is_context_invalid(open_model, vendor_fixtures):
    ctx = open_model("convnet")
    ctx.close()
    with pytest.raises(ContextInvalidError) as e:
        ctx.run([io(vendor_fixtures, "convnet_x0_in0")])
    assert e.value.code == -7
