"""Lite2's input handling (issue 20): ``RKNNLite.inference`` does what Lite2 2.5.0 does with
each kind of array (the rows of ``shared/reference/rknn-toolkit2-api-facts.md`` §8), with the
same messages, but one: a 4-D array that fits the input only in the other layout is never
handed on as it is (Lite2 gives NCHW data to the runtime labelled NHWC: a board computes
garbage).  NCHW data where NHWC is stated is transposed with Lite2's warning; anything else is
refused naming ``data_format``.  ``Context.run`` follows the same rules with typed errors.

One test (or parametrised group) per row of §8, in its order.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import rknnlite
from rknnlite import InputInvalidError, TensorFormat
from rknnlite.api import RKNNLite
from rknnlite.model.graph import Node
from rknnlite.model.spec import TensorSpec

NCHW_WARNING = ("The input[0] need NHWC data format, but NCHW set, the data format and data buffer will be "
                "changed to NHWC.")


def _relu(portable_model, shape, layout, **metadata):
    """Relu on one float32 input of ``shape`` (model order) in ``layout``: the output shows
    exactly how the data reached the graph."""
    return portable_model([Node("Relu", "relu", ["x"], ["y"])], [TensorSpec("x", shape, "float32", layout)],
                          [TensorSpec("y", shape, "float32", layout)], float_dtype="float32", **metadata)


@pytest.fixture(scope="module")
def models(portable_model, context_models):
    return {
        "image": _relu(portable_model, (1, 3, 8, 8), "NCHW"),  # presented NHWC [1, 8, 8, 3], as in §8
        "chw8": _relu(portable_model, (1, 8, 4, 6), "NCHW"),  # 8 channels: stays NCHW
        "undef4": _relu(portable_model, (1, 2, 3, 5), "UNDEFINED"),  # a 4-D UNDEFINED input
        "nhwc3": _relu(portable_model, (2, 3, 5), "NHWC"),  # an NHWC attribute of rank 3
        "add": context_models["add"],  # two (1, 4) inputs: UNDEFINED, not 4-D
        "dyn": context_models["dyn_conv"],  # NHWC (1, -1, -1, 3): 8x8, 4x6, 16x16
    }


@pytest.fixture()
def lite(models):
    opened = []

    def open_(name: str) -> RKNNLite:
        rk = RKNNLite()
        assert rk.load_rknn(models[name]) == 0 and rk.init_runtime() == 0
        opened.append(rk)
        return rk

    yield open_
    for rk in opened:
        rk.release()


def _image(seed: int = 0) -> np.ndarray:
    """An NCHW (1, 3, 8, 8) float32 array with negative values (so Relu shows them)."""
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def _fails(rk, caplog, message, **kwargs):
    """``inference(**kwargs)`` returns None and logs ``message``; the runtime stays usable."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        assert rk.inference(**kwargs) is None
    assert message in caplog.text, caplog.text


def _attr_check(rk, x):
    assert rk._ctx.inputs[0].fmt == TensorFormat.NHWC  # the model of §8: attr NHWC [1, 8, 8, 3]
    np.testing.assert_array_equal(rk.inference(inputs=[_nhwc(x)])[0], np.maximum(x, 0))


# -- inference(...) and exceptions in set_inputs ------------------------------------------------

@pytest.mark.parametrize("inputs", [lambda x: (_nhwc(x),), lambda x: [_nhwc(x), _nhwc(x)]],
                         ids=["tuple (AttributeError)", "more arrays than inputs (IndexError)"])
def test_an_exception_setting_inputs_is_caught_and_gives_none(lite, caplog, inputs):
    rk = lite("image")
    _fails(rk, caplog, "Catch exception when setting inputs.", inputs=inputs(_image()))
    _attr_check(rk, _image())


# -- the other input messages -----------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(inputs=[np.zeros((0, 8, 8, 3), np.float32)]), "Size of inputs[0] is invalid!"),
    (dict(inputs=[[[1.0, 2.0]]]), "Type of inputs[0] is not np.ndarray!"),
    (dict(inputs=[np.zeros((1, 8, 8, 3), np.float32)], data_type="float"), "Unsupport data type: float"),
    (dict(inputs=[np.zeros((1, 8, 8, 3), np.float32)], data_type="uint8"),
     "inputs[0].dtype: float32 is not same as data_type[0]"),
    (dict(inputs=[np.zeros((1, 8, 8, 3), np.float32)], data_type=["float32", "float32"]),
     "The lengths of data_type and inputs are not equal."),
    (dict(inputs=[np.zeros((1, 8, 8, 3), np.float32)], inputs_pass_through=[0, 0]),
     "The lengths of inputs_pass_through and inputs are not equal."),
    (dict(inputs=[np.zeros((1, 8, 8, 3), np.float32)], data_format=["nhwc", "nhwc"]),
     "The lengths of data_format and inputs are not equal."),
], ids=["size", "type", "data type name", "dtype vs data_type", "data_type length", "pass_through length",
        "data_format length"])
def test_lite2_input_messages(lite, caplog, kwargs, message):
    rk = lite("image")
    _fails(rk, caplog, message, **kwargs)
    _attr_check(rk, _image())


def test_a_shape_outside_the_dynamic_sets_fails_setting_the_shape(lite, caplog):
    rk = lite("dyn")
    _fails(rk, caplog, "Set input shape failed. error code: RKNN_ERR_INPUT_INVALID",
           inputs=[np.zeros((1, 5, 5, 3), np.float32)])
    assert "expected NHWC [1, 8, 8, 3] or [1, 4, 6, 3] or [1, 16, 16, 3]" in caplog.text
    assert rk.inference(inputs=[np.zeros((1, 4, 6, 3), np.float32)])[0].shape == (1, 2, 4, 6)


# -- confirmed behaviour, model attr NHWC [1, 8, 8, 3] -----------------------------------------

@pytest.mark.parametrize("data_format", [None, "nhwc", "nchw"])
def test_a_higher_rank_is_refused(lite, caplog, data_format):
    rk = lite("image")
    _fails(rk, caplog, "The input[0] need 4dims input, but 5dims input buffer feed.",
           inputs=[np.zeros((1, 1, 8, 8, 3), np.float32)], data_format=data_format)
    assert "Catch exception when setting inputs." in caplog.text  # raised inside Lite2's set_inputs
    _attr_check(rk, _image())


@pytest.mark.parametrize("data_format", [None, "nhwc"])
def test_a_picture_without_its_batch_axis_gets_it(lite, caplog, data_format):
    """Lite2 2.x refuses an (H, W, C) picture ("need 4dims input, but 3dims"), which broke code
    written for Lite2 1.x (leafqycc/rknn-multi-threaded's func.py, rknn_model_zoo demos); rknnlite
    gives it its batch axis with the simulator's warning, once per shape."""
    rk = lite("image")
    x = _image(3)
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        for _ in range(3):
            np.testing.assert_array_equal(rk.inference(inputs=[_nhwc(x)[0]], data_format=data_format)[0],
                                          np.maximum(x, 0))
    warned = [r.getMessage() for r in caplog.records if "expect dims is 4" in r.getMessage()]
    assert warned == ["The dims of input(ndarray) shape (8, 8, 3) is wrong, expect dims is 4! Try expand dims to "
                      "(1, 8, 8, 3)!"]
    # a (C, H, W) one is NCHW data once it has its batch axis: transposed with Lite2's warning
    np.testing.assert_array_equal(rk.inference(inputs=[x[0]], data_format=data_format)[0], np.maximum(x, 0))


@pytest.mark.parametrize("shape, data_format", [((8, 3), None), ((8, 8, 3), "nchw"), ((8, 8, 8), None)],
                         ids=["2-D", "3-D HWC as NCHW", "3-D of neither layout"])
def test_leading_ones_that_do_not_fit_are_refused(lite, caplog, shape, data_format):
    """Leading 1s never reorder anything: an array that does not fit afterwards is refused."""
    rk = lite("image")
    _fails(rk, caplog, "expected NHWC [1, 8, 8, 3]", inputs=[np.zeros(shape, np.float32)], data_format=data_format)
    _attr_check(rk, _image())


def test_nchw_data_without_data_format_is_transposed_with_the_warning_not_passed_on(lite, caplog):
    # Lite2 hands these bytes to librknnrt labelled NHWC (silent garbage); rknnlite transposes
    rk = lite("image")
    x = _image(1)
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        (y,) = rk.inference(inputs=[x])
    assert NCHW_WARNING in caplog.text
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_4d_data_that_fits_in_no_layout_is_refused_naming_data_format(lite, caplog):
    rk = lite("image")
    _fails(rk, caplog, "data_format", inputs=[np.zeros((1, 8, 3, 8), np.float32)])
    assert "expected NHWC [1, 8, 8, 3]" in caplog.text
    # data stated as NCHW that is NHWC: refused, not transposed into garbage
    _fails(rk, caplog, "the data fits as NHWC: pass data_format='nhwc'", inputs=[_nhwc(_image())],
           data_format="nchw")
    _attr_check(rk, _image())


@pytest.mark.parametrize("data_format", ["nchw", ["nchw"]], ids=["str", "list"])
def test_nchw_format_is_transposed_with_the_warning(lite, caplog, data_format):
    rk = lite("image")
    x = _image(2)
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        (y,) = rk.inference(inputs=[x], data_format=data_format)
    assert NCHW_WARNING in caplog.text
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    # None is 'nhwc': the same result from NHWC data, no warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        np.testing.assert_array_equal(rk.inference(inputs=[_nhwc(x)], data_format="nhwc")[0], y)
    assert NCHW_WARNING not in caplog.text


@pytest.mark.parametrize("data_format, message", [("NCHW", "Unsupport data format: NCHW"),
                                                  ([None], "Unsupport data format: None"),
                                                  ("hwc", "Unsupport data format: hwc")])
def test_data_format_is_lower_case_nhwc_or_nchw(lite, caplog, data_format, message):
    _fails(lite("image"), caplog, message, inputs=[_image()], data_format=data_format)


def test_nchw_attribute_takes_nhwc_data_as_lite2_and_its_own_layout_too(lite, caplog):
    # Lite2 sends data labelled NHWC (None = 'nhwc'), which librknnrt converts to the NCHW input;
    # NCHW data it would also send labelled NHWC (garbage): rknnlite takes it as it is
    rk = lite("chw8")
    assert rk._ctx.inputs[0].fmt == TensorFormat.NCHW
    x = np.random.default_rng(3).standard_normal((1, 8, 4, 6)).astype(np.float32)
    for data, data_format in ((_nhwc(x), None), (_nhwc(x), "nhwc"), (x, "nchw"), (x, None)):
        np.testing.assert_array_equal(rk.inference(inputs=[data], data_format=data_format)[0], np.maximum(x, 0))
    _fails(rk, caplog, "data_format", inputs=[np.zeros((1, 4, 8, 6), np.float32)])


def test_undefined_4d_attribute(lite, caplog):
    rk = lite("undef4")
    assert rk._ctx.inputs[0].fmt == TensorFormat.UNDEFINED and rk._ctx.inputs[0].dims == (1, 2, 3, 5)
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 5)).astype(np.float32)
    for data_format in (None, "nhwc"):  # NHWC data is transposed (0, 3, 1, 2), with Lite2's two warnings
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rknnlite"):
            (y,) = rk.inference(inputs=[_nhwc(x)], data_format=data_format)
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        assert ("The data format queried by input[0] is RKNN_TENSOR_UNDEFINED, but the input buffer filled in "
                "inference is in NHWC format.") in caplog.text
        assert "The input buffer will be transposed automatically." in caplog.text
    np.testing.assert_array_equal(rk.inference(inputs=[x], data_format="nchw")[0], np.maximum(x, 0))  # as it is


def test_non_4d_undefined_inputs_ignore_data_format(lite):
    rk = lite("add")
    a, b = np.arange(4, dtype=np.float32).reshape(1, 4), np.ones((1, 4), np.float32)
    for data_format in (None, "nchw", ["nhwc", "nchw"]):
        np.testing.assert_array_equal(rk.inference(inputs=[a, b], data_format=data_format)[0], a + b)


def test_nhwc_attribute_of_another_rank_with_nchw_warns_and_does_not_transpose(lite, caplog):
    rk = lite("nhwc3")
    x = np.random.default_rng(5).standard_normal((2, 3, 5)).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        (y,) = rk.inference(inputs=[x], data_format="nchw")
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert ("The input[0] need NHWC data format, but the shape is not 4D, no data transpose. Please try to feed "
            "input as 4D data.") in caplog.text


def test_dynamic_shape_model_takes_the_arrays_shape(lite, caplog):
    rk = lite("dyn")
    x = np.random.default_rng(6).standard_normal((1, 3, 4, 6)).astype(np.float32)
    expected = rk.inference(inputs=[_nhwc(x)])[0]
    assert expected.shape == (1, 2, 4, 6) and rk._ctx.current_inputs[0].dims == (1, 4, 6, 3)
    np.testing.assert_array_equal(rk.inference(inputs=[x], data_format="nchw")[0], expected)  # after the transpose
    with caplog.at_level(logging.WARNING, logger="rknnlite"):  # NCHW with None: not declared as NHWC dims
        np.testing.assert_array_equal(rk.inference(inputs=[x])[0], expected)
    assert NCHW_WARNING in caplog.text


def test_dtypes_map_by_name_without_casting(lite, caplog):
    rk = lite("image")
    x = _image(7)
    _fails(rk, caplog, "Unsupport inputs[0].dtype: float64", inputs=[_nhwc(x).astype(np.float64)])
    np.testing.assert_array_equal(rk.inference(inputs=[_nhwc(x)], data_type="float32")[0], np.maximum(x, 0))
    np.testing.assert_array_equal(rk.inference(inputs=[_nhwc(x)], data_type=["float32"])[0], np.maximum(x, 0))
    strided = np.zeros((1, 8, 16, 3), np.float32)[:, :, ::2]  # not contiguous: copied
    strided[...] = _nhwc(x)
    np.testing.assert_array_equal(rk.inference(inputs=[strided])[0], np.maximum(x, 0))
    half = rk.inference(inputs=[_nhwc(x).astype(np.float16)], data_type="float16")[0]
    np.testing.assert_array_equal(half, np.maximum(x.astype(np.float16).astype(np.float32), 0))


def test_containers(lite, caplog):
    rk = lite("image")
    x = _image(8)
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        (y,) = rk.inference(inputs=_nhwc(x))  # a single ndarray: warned, then wrapped
    assert ("Inputs should be placed in a list, like [img1, img2], both the img1 and img2 are ndarray."
            in caplog.text)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    _fails(rk, caplog, "Inputs are invalid.", inputs=[])
    # pass_through only sets the flag: the 'nchw' transpose still happens
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        (y,) = rk.inference(inputs=[x], data_format="nchw", inputs_pass_through=[1])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert NCHW_WARNING in caplog.text


# -- Context.run: the same rules, typed errors --------------------------------------------------

def test_context_run_follows_the_same_rules(models, caplog):
    x = _image(9)
    with rknnlite.Context(models["image"]) as ctx:
        with caplog.at_level(logging.WARNING, logger="rknnlite"):
            np.testing.assert_array_equal(ctx.run([x])[0], np.maximum(x, 0))  # unambiguous NCHW: transposed
        assert NCHW_WARNING in caplog.text
        with pytest.raises(InputInvalidError, match=r"data_format=None .*expected NHWC \[1, 8, 8, 3\]"):
            ctx.run([np.zeros((1, 8, 3, 8), np.float32)])
        with pytest.raises(InputInvalidError, match="the data fits as NHWC: pass data_format='nhwc'"):
            ctx.run([_nhwc(x)], data_format="nchw")
        with pytest.raises(InputInvalidError, match=r"needs a 4-D array \(NHWC \[1, 8, 8, 3\]\); got a 3-D array"):
            ctx.run([_nhwc(x)[0]])
        np.testing.assert_array_equal(ctx.run([x], data_format="NCHW")[0], np.maximum(x, 0))  # any case here
    with rknnlite.Context(models["chw8"]) as ctx:  # its own layout (NCHW) by default; NHWC on request
        z = np.random.default_rng(10).standard_normal((1, 8, 4, 6)).astype(np.float32)
        np.testing.assert_array_equal(ctx.run([z])[0], np.maximum(z, 0))
        np.testing.assert_array_equal(ctx.run([_nhwc(z)], data_format="nhwc")[0], np.maximum(z, 0))
        with pytest.raises(InputInvalidError, match="the data fits as NHWC: pass data_format='nhwc'"):
            ctx.run([_nhwc(z)])
