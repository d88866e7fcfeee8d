"""Context basics on the software backend: attributes, running, input errors, lifetime, dispatch."""

from __future__ import annotations

import re

import numpy as np
import pytest

import rknnlite
from rknnlite import ContextInvalidError, DeviceUnavailableError, InputInvalidError, InvalidParamError
from rknnlite.constants import TensorFormat, TensorType
from rknnlite.demo import DEMO_MODEL_PATH, build_demo_model, demo_image


@pytest.fixture()
def ctx():
    with rknnlite.Context(str(DEMO_MODEL_PATH)) as c:
        yield c


def test_attributes(ctx):
    (inp,), (out,) = ctx.inputs, ctx.outputs
    # an image input of a float16 model, as librknnrt reports it: NHWC, FLOAT16
    assert (inp.name, inp.dims, inp.fmt, inp.type) == ("image", (1, 32, 32, 3), TensorFormat.NHWC, TensorType.FLOAT16)
    assert (inp.n_elems, inp.size) == (3072, 6144)
    assert (out.name, out.dims) == ("prob", (1, 10))
    assert ctx.custom_string == "rknnlite demo classifier"
    assert ctx.backend == "software"


def test_tensor_attr_is_immutable_with_replace(ctx):
    attr = ctx.inputs[0]
    with pytest.raises(AttributeError):
        attr.name = "x"
    changed = attr.replace(type=TensorType.UINT8, fmt=TensorFormat.NCHW)
    assert (changed.type, changed.fmt, attr.type) == (TensorType.UINT8, TensorFormat.NCHW, TensorType.FLOAT16)
    assert changed.size == 3072


def test_run_is_a_probability_vector_and_deterministic(ctx):
    (prob,) = ctx.run([demo_image()], data_format="nchw")
    assert prob.shape == (1, 10) and prob.dtype == np.float32
    assert abs(float(prob.sum()) - 1.0) < 1e-3
    np.testing.assert_array_equal(prob, ctx.run([demo_image()], data_format="nchw")[0])


def test_nchw_data_is_transposed(ctx):
    nchw = demo_image()
    nhwc = np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(ctx.run([nhwc])[0], ctx.run([nchw], data_format="nchw")[0])


def test_pass_through_skips_normalisation(ctx):
    """Passed-through data is the NPU's own: float16 for this model's input, where the
    normalised image reaches the first conv in float32 (as the vendor's simulator has it), so
    the two agree to float16 precision, not bit for bit."""
    img = demo_image()
    normalised = (img.astype(np.float32) - 127.5) / 127.5
    np.testing.assert_allclose(ctx.run([normalised], pass_through=[True], data_format="nchw")[0],
                               ctx.run([img], data_format="nchw")[0], atol=2e-4)
    half = normalised.astype(np.float16)
    np.testing.assert_array_equal(ctx.run([half], pass_through=[True], data_format="nchw")[0],
                                  ctx.run([half.astype(np.float32)], pass_through=[True], data_format="nchw")[0])


@pytest.mark.parametrize(
    "inputs, match",
    [
        ([], "1 input"),
        ([demo_image(), demo_image()], "1 input"),
        ([np.zeros((1, 3, 16, 16), np.float32)], r"shape \[1, 3, 16, 16\].*expected NHWC \[1, 32, 32, 3\]"),
        ([np.zeros((3, 32, 32), np.float32)], "shape"),
        ([np.zeros((1, 3, 32, 32), np.complex64)], "dtype complex64"),
        ([[[1, 2, 3]]], "must be a numpy array"),
        ("image", "must be a list"),
    ],
)
def test_bad_inputs_raise_and_context_stays_usable(ctx, inputs, match):
    with pytest.raises(InputInvalidError, match=match):
        ctx.run(inputs)
    assert ctx.run([demo_image()], data_format="nchw")[0].shape == (1, 10)


def test_bad_data_format(ctx):
    with pytest.raises(InputInvalidError, match="nchw"):
        ctx.run([demo_image()], data_format="hwcn")
    with pytest.raises(InvalidParamError, match="one per input"):
        ctx.run([demo_image()], data_format=["nchw", "nhwc"])


def test_close_is_idempotent_and_later_calls_fail():
    c = rknnlite.Context(build_demo_model())
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(ContextInvalidError, match="closed"):
        c.run([demo_image()], data_format="nchw")


def test_dup_shares_weights_and_is_independent(ctx):
    twin = ctx.dup()
    np.testing.assert_array_equal(twin.run([demo_image()], data_format="nchw")[0], ctx.run([demo_image()], data_format="nchw")[0])
    twin.close()
    assert ctx.run([demo_image()], data_format="nchw")[0].shape == (1, 10)


def test_float32_model_is_close_to_float16_model():
    with rknnlite.Context(build_demo_model("float32")) as c32, rknnlite.Context(build_demo_model("float16")) as c16:
        a, b = c32.run([demo_image()], data_format="nchw")[0], c16.run([demo_image()], data_format="nchw")[0]
    assert not np.array_equal(a, b)
    np.testing.assert_allclose(a, b, atol=5e-3)


def test_backend_choice():
    with pytest.raises(DeviceUnavailableError, match="software backend"):
        rknnlite.Context(build_demo_model(), backend="npu")
    with pytest.raises(InvalidParamError, match="auto, software, npu"):
        rknnlite.Context(build_demo_model(), backend="gpu")


@pytest.mark.parametrize("kwargs, match", [
    (dict(backend=np.zeros(3)), "backend must be one of auto, software, npu, not array"),
    (dict(target_platform=3588), "target_platform must be a platform name such as 'rk3588', not 3588"),
    (dict(target_platform=["rk3588"]), "target_platform must be a platform name"),
    (dict(custom_ops=0), "custom_ops must be a list of custom operators, not int"),
    (dict(custom_ops=float("nan")), "custom_ops must be a list of custom operators, not float"),
])
def test_odd_constructor_arguments_are_refused_by_name(kwargs, match):
    """An array as the backend raised numpy's "truth value ... is ambiguous", a number as the
    platform AttributeError ('int' object has no attribute 'lower'), a number as custom_ops
    "'int' object is not iterable" (an argument fuzz of Context)."""
    with pytest.raises(InvalidParamError, match=re.escape(match)):
        rknnlite.Context(build_demo_model(), **kwargs)


def test_rockchip_files_run_off_board(vendor_rknn_files):
    for path in vendor_rknn_files:  # the vendor graph lowered for the software backend (test_vendor_offboard.py)
        with rknnlite.Context(str(path), backend="software") as ctx:
            assert ctx.backend == "software"
        with rknnlite.Context(str(path)) as ctx:  # auto: npu where librknnrt loads, else software
            assert ctx.backend in ("npu", "software")


def test_target_platform_mismatch_warns(caplog):
    with caplog.at_level("WARNING", logger="rknnlite"):
        rknnlite.Context(build_demo_model(), target_platform="rv1106").close()
    assert "rv1106" in caplog.text
