"""Dynamic-shape models: input ranges, set_input_shapes, CURRENT_* attrs, runs that take the
shape from the arrays, and the vendor's errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import rknnlite
from rknnlite import InputInvalidError, ModelInvalidError, QueryCmd, TensorFormat
from rknnlite.api import RKNNLite

#: the model's shape sets (NCHW in the model; the input attribute is NHWC: NHWC_SETS)
SETS = ((1, 3, 8, 8), (1, 3, 4, 6), (1, 3, 16, 16))
NHWC_SETS = tuple((n, h, w, c) for n, c, h, w in SETS)


@pytest.fixture()
def dyn(context_models):
    with rknnlite.Context(context_models["dyn_conv"]) as c:
        yield c


def weights(context_models):
    from rknnlite.model.portable import read_portable

    return np.asarray(read_portable(memoryview(context_models["dyn_conv"])).graph.constants["w"])


def reference(x, w):
    return np.maximum(np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]), 0)


def test_input_ranges(dyn, context_models):
    (r,) = dyn.input_ranges()
    # in the input's NHWC, as librknnrt gives them
    assert (r.index, r.name, r.fmt, r.n_dims, r.shape_number, r.dyn_range) == (0, "x", TensorFormat.NHWC, 4, 3,
                                                                               NHWC_SETS)
    assert r.to_dict()["dyn_range"][1] == [1, 4, 6, 3]
    with rknnlite.Context(context_models["dyn_add"]) as c:
        a, b = c.input_ranges()
        assert a.dyn_range == b.dyn_range == ((1, 4), (1, 8)) and (a.name, b.name) == ("a", "b")


def test_static_model_range_query_is_model_invalid(context_models):
    with rknnlite.Context(context_models["add"]) as c:
        with pytest.raises(ModelInvalidError) as e:
            c.input_ranges()
        assert e.value.code == -6
        with pytest.raises(ModelInvalidError, match="static-shape model"):
            c.set_input_shapes([(1, 4), (1, 4)])


def test_set_input_shapes_and_current_attrs(dyn):
    assert dyn.inputs[0].dims == (1, -1, -1, 3)
    assert dyn.query(QueryCmd.CURRENT_INPUT_ATTR, 0).dims == NHWC_SETS[0]  # the first set until one is chosen
    dyn.set_input_shapes([[1, 4, 6, 3]])  # in the attribute's layout, NHWC
    assert dyn.query(QueryCmd.CURRENT_INPUT_ATTR, 0).dims == (1, 4, 6, 3)
    assert dyn.query(QueryCmd.CURRENT_OUTPUT_ATTR, 0).dims == (1, 2, 4, 6)
    native_in = dyn.query(QueryCmd.CURRENT_NATIVE_INPUT_ATTR, 0)
    assert (native_in.fmt, native_in.dims, native_in.w_stride) == (TensorFormat.NHWC, (1, 4, 6, 3), 16)
    native_out = dyn.query(QueryCmd.CURRENT_NATIVE_OUTPUT_ATTR, 0)
    assert (native_out.fmt, native_out.dims) == (TensorFormat.NC1HWC2, (1, 1, 4, 6, 8))
    # a TensorAttr in NCHW is understood too, and NCHW shapes with data_format="nchw"
    attr = dyn.inputs[0].replace(dims=(1, 3, 16, 16), fmt=TensorFormat.NCHW)
    dyn.set_input_shapes([attr])
    assert dyn.current_inputs[0].dims == (1, 16, 16, 3) and dyn.current_outputs[0].dims == (1, 2, 16, 16)
    dyn.set_input_shapes([(1, 3, 8, 8)], data_format="nchw")
    assert dyn.current_inputs[0].dims == (1, 8, 8, 3)
    with pytest.raises(InputInvalidError, match=r"input shapes \[1, 3, 8, 8\] are not one of.*the shapes fit as "
                                                r"NCHW: pass data_format='nchw'"):
        dyn.set_input_shapes([(1, 3, 8, 8)])  # NCHW without saying so


def test_shapes_outside_the_sets_are_refused_with_the_allowed_sets(dyn, context_models):
    allowed = (r"allowed \(in the inputs' attribute layouts\): set 0: \[1, 8, 8, 3\]; set 1: \[1, 4, 6, 3\]; "
               r"set 2: \[1, 16, 16, 3\]")
    with pytest.raises(InputInvalidError, match=r"input shapes \[1, 5, 5, 3\] are not one of .*" + allowed):
        dyn.set_input_shapes([(1, 5, 5, 3)])
    with pytest.raises(InputInvalidError, match=r"expected NHWC \[1, 8, 8, 3\] or \[1, 4, 6, 3\] or \[1, 16, 16, 3\]"):
        dyn.run([np.zeros((1, 5, 5, 3), np.float32)])
    with pytest.raises(InputInvalidError, match="one shape per input"):
        dyn.set_input_shapes([(1, 8, 8, 3), (1, 8, 8, 3)])
    assert dyn.current_inputs[0].dims == NHWC_SETS[0]
    with rknnlite.Context(context_models["dyn_add"]) as c:  # sets pair by index: no cross combinations
        with pytest.raises(InputInvalidError, match=r"\[1, 4\] \+ \[1, 8\] are not one of"):
            c.run([np.ones((1, 4), np.float32), np.ones((1, 8), np.float32)])
        assert c.run([np.ones((1, 8), np.float32)] * 2)[0].shape == (1, 8)


def test_run_takes_the_shape_from_the_arrays(dyn, context_models):
    w = weights(context_models)
    for k in (1, 2, 0, 1):
        x = np.random.default_rng(k).standard_normal(SETS[k]).astype(np.float32)
        (y,) = dyn.run([np.ascontiguousarray(x.transpose(0, 2, 3, 1))])
        np.testing.assert_allclose(y, reference(x, w), rtol=1e-5, atol=1e-5)
        assert dyn.current_inputs[0].dims == NHWC_SETS[k] and dyn.current_outputs[0].dims == y.shape
        np.testing.assert_array_equal(dyn.run([x], data_format="nchw")[0], y)


def test_rknnlite_runs_the_dynamic_shape_example_pattern(context_models, caplog):
    w = weights(context_models)
    rk = RKNNLite()
    assert rk.load_rknn(context_models["dyn_conv"]) == 0 and rk.init_runtime() == 0
    for shape in (SETS[2], SETS[1], SETS[0]):
        x = np.random.default_rng(1).integers(0, 255, shape).astype(np.uint8)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rknnlite"):
            (y,) = rk.inference(inputs=[x], data_format=["nchw"])
        np.testing.assert_allclose(y, reference(x.astype(np.float32), w), rtol=1e-5, atol=1e-4)
        assert "The input[0] need NHWC data format, but NCHW set" in caplog.text
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(rk.inference(inputs=[nhwc])[0], y)
    rk.release()
