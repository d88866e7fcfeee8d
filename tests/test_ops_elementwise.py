"""Element-wise and activation kernels: official ONNX node cases, the ``out=`` path, edge cases."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from onnx import TensorProto

from onnx_cases import as_array, assert_matches, kernel_params, readonly, run_node_checked, run_with_kernels
from rknnlite.backends.software.ops import KERNELS
from rknnlite.backends.software.ops import elementwise as ew
from rknnlite.errors import ModelInvalidError

OPS = (
    "Relu LeakyRelu PRelu Clip Sigmoid HardSigmoid HardSwish Tanh Elu Selu Softplus Gelu Erf Exp Log Sqrt Pow "
    "Abs Neg Reciprocal Floor Ceil Round Add Sub Mul Div Max Min Sum Mean Where Equal Greater Less "
    "GreaterOrEqual LessOrEqual Not And Or Cast Softmax LogSoftmax"
).split()

PARAMS = kernel_params(OPS)  # 2-bit and other type-less cases are left out by onnx_cases


def _case_data(case, k):
    inputs, expected = case.data_sets[k]
    return [as_array(x) for x in inputs], [as_array(x) for x in expected]


def test_every_op_registered_with_out():
    for op in OPS:
        assert op in KERNELS, op
        assert KERNELS[op].out, op
        assert not KERNELS[op].data_dependent, op


@pytest.mark.parametrize("case, k", PARAMS)
def test_node_case(case, k):
    inputs, expected = _case_data(case, k)
    assert_matches(case, run_with_kernels(case, inputs), expected)


@pytest.mark.parametrize("case, k", PARAMS)
def test_node_case_out_path(case, k):
    """Into preallocated (garbage-filled) outputs: identical values, and the same arrays returned."""
    inputs, _ = _case_data(case, k)
    fresh = run_node_checked(case, inputs, None)
    out = []
    for r in fresh:
        buf = np.empty(r.shape, r.dtype)
        if buf.dtype.kind == "f":
            buf.fill(np.nan)
        elif buf.dtype.kind == "b":
            buf.fill(True)
        else:
            buf.fill(7)
        out.append(buf)
    result = run_node_checked(case, inputs, out)
    assert len(result) == len(out)
    for r, o, f in zip(result, out, fresh):
        assert r is o
        assert r.dtype == f.dtype and r.shape == f.shape
        np.testing.assert_array_equal(r, f)


# --------------------------------------------------------------------------- direct calls


def run(op, *inputs, opset=13, out=None, **attrs):
    """Prepare (no constants) and run ``op`` on numpy inputs; returns the first output."""
    spec = KERNELS[op]
    attrs = dict(attrs, _opset=opset)
    args = [None if x is None else readonly(x) for x in inputs]
    if spec.prepare is not None:
        attrs = spec.prepare(attrs, [None] * len(args))
    return spec.fn(args, attrs, out)[0]


f32 = np.float32


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_floating_point_edge_values_raise_no_warnings(no_warnings):
    x = np.array([-1e30, -100, -1, 0, 1, 100, 1e30, np.inf, -np.inf, np.nan], f32)
    for op in ("Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Softplus", "Elu", "Selu", "Tanh", "Erf", "Gelu"):
        run(op, x)
    run("Div", x, np.zeros_like(x))
    run("Pow", x, np.full_like(x, 0.5))
    run("Div", np.array([1, -1, 0], np.int32), np.zeros(3, np.int32))
    run("Cast", x, to=TensorProto.INT32)


def test_div_integer_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], np.int32)
    b = np.array([2, 2, -2, -2, 3, -3, 5, 1], np.int32)
    np.testing.assert_array_equal(run("Div", a, b), [3, -3, -3, 3, 2, 2, 0, 1])
    for dt in (np.int8, np.int16, np.int64):
        r = run("Div", a.astype(dt), b.astype(dt))
        assert r.dtype == dt
        np.testing.assert_array_equal(r, [3, -3, -3, 3, 2, 2, 0, 1])
    big = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min + 1], np.int64)
    np.testing.assert_array_equal(run("Div", big, np.array([-3], np.int64)),
                                  [-(np.iinfo(np.int64).max // 3), (np.iinfo(np.int64).max) // 3])
    u = run("Div", np.array([7, 255], np.uint8), np.array([2, 16], np.uint8))
    assert u.dtype == np.uint8
    np.testing.assert_array_equal(u, [3, 15])


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 0.9, -0.0, np.inf, np.nan], f32)
    r = run("Round", x)
    np.testing.assert_array_equal(r, [0, 2, 2, -0.0, -2, -2, 2, 1, -0.0, np.inf, np.nan])
    assert np.signbit(r[3]) and np.signbit(r[8])
    np.testing.assert_array_equal(run("Round", np.array([3, -4], np.int64)), [3, -4])
    np.testing.assert_array_equal(run("Floor", np.array([-1.5, 1.5], f32)), [-2, 1])
    np.testing.assert_array_equal(run("Ceil", np.array([-1.5, 1.5], f32)), [-1, 2])


def test_pow_mixed_types():
    r = run("Pow", np.array([2, 3, -2], np.int64), np.array([0.5, 2.0, 3.0], f32))
    assert r.dtype == np.int64
    np.testing.assert_array_equal(r, [1, 9, -8])
    r = run("Pow", np.array([2, 0.5], f32), np.array([3], np.int64))
    assert r.dtype == f32
    np.testing.assert_array_equal(r, [8, 0.125])


def test_variadic_broadcasting_and_single_input():
    a = np.array([[1.0], [4.0]], f32)
    b = np.array([3.0, 2.0, 0.0], f32)
    c = np.array(2.5, f32)
    np.testing.assert_array_equal(run("Max", a, b, c), np.maximum(np.maximum(a, b), c))
    np.testing.assert_array_equal(run("Min", a, b, c), np.minimum(np.minimum(a, b), c))
    np.testing.assert_allclose(run("Sum", a, b, c), a + b + c)
    np.testing.assert_allclose(run("Mean", a, b, c), (a + b + c) / 3)
    for op in ("Max", "Min", "Sum", "Mean"):
        r = run(op, b)
        np.testing.assert_array_equal(r, b)
        assert not np.shares_memory(r, b)
    np.testing.assert_array_equal(run("Max", np.array([1, np.nan], f32), np.array([2, 0], f32)), [2, np.nan])
    np.testing.assert_array_equal(run("Sum", np.array([100], np.int8), np.array([100], np.int8)), [-56])


def test_where_broadcasts_all_three():
    c = np.array([[True], [False]])
    x = np.array([1, 2, 3], np.int64)
    y = np.array(-1, np.int64)
    np.testing.assert_array_equal(run("Where", c, x, y), [[1, 2, 3], [-1, -1, -1]])


def test_comparisons_and_logic_types():
    a = np.array([1, 2, 3], np.int32)
    b = np.array([2], np.int32)
    assert run("Equal", a, b).dtype == np.bool_
    np.testing.assert_array_equal(run("GreaterOrEqual", a, b), [False, True, True])
    np.testing.assert_array_equal(run("LessOrEqual", a, b), [True, True, False])
    t = np.array([True, False])
    np.testing.assert_array_equal(run("Not", t), [False, True])
    np.testing.assert_array_equal(run("And", t, np.array(True)), [True, False])
    np.testing.assert_array_equal(run("Or", t, np.array(False)), [True, False])


def test_zero_dim_inputs_give_arrays():
    s = np.array(2.0, f32)
    for op in ("Add", "Mul", "Div", "Pow"):
        r = run(op, s, s)
        assert isinstance(r, np.ndarray) and r.shape == ()
    for op in ("Exp", "Relu", "Sigmoid", "Erf", "Gelu", "Softplus"):
        r = run(op, s)
        assert isinstance(r, np.ndarray) and r.shape == () and r.dtype == f32


# --------------------------------------------------------------------------- Clip


def test_clip_attribute_form_opset6():
    x = np.array([-3, -1, 0, 1, 3], f32)
    np.testing.assert_array_equal(run("Clip", x, opset=6, min=-1.5, max=2.0), [-1.5, -1, 0, 1, 2])
    np.testing.assert_array_equal(run("Clip", x, opset=6, max=0.5), [-3, -1, 0, 0.5, 0.5])
    np.testing.assert_array_equal(run("Clip", x, opset=6), x)


def test_clip_input_forms():
    x = np.array([[-3, 0, 3]], f32)
    np.testing.assert_array_equal(run("Clip", x, np.array([-1], f32), np.array([1], f32)), [[-1, 0, 1]])
    np.testing.assert_array_equal(run("Clip", x, None, np.array(1, f32)), [[-3, 0, 1]])
    np.testing.assert_array_equal(run("Clip", x, np.array(2, f32), np.array(1, f32)), [[1, 1, 1]])  # min > max
    np.testing.assert_array_equal(run("Clip", x, np.array([], f32)), x)  # empty = omitted
    np.testing.assert_array_equal(run("Clip", np.array(5, f32), np.array([0], f32), np.array([1], f32)), 1)
    np.testing.assert_array_equal(run("Clip", np.array([np.nan], f32), np.array(0, f32)), [np.nan])
    xi = np.array([-100, 0, 100], np.int64)
    np.testing.assert_array_equal(run("Clip", xi, np.array(-5, np.int64), np.array(5, np.int64)), [-5, 0, 5])
    with pytest.raises(ModelInvalidError, match="scalar"):
        run("Clip", x, np.array([0, 1], f32))


# --------------------------------------------------------------------------- activations


def test_leaky_relu_alpha_above_one_and_negative():
    x = np.array([-2, -0.5, 0, 1, 3], f32)
    for alpha in (0.01, 1.0, 3.0, -0.5, 0.0):
        np.testing.assert_allclose(run("LeakyRelu", x, alpha=alpha), np.where(x >= 0, x, alpha * x), rtol=1e-7)


def test_prelu_broadcast_slope_and_int():
    x = np.arange(-6, 6, dtype=f32).reshape(1, 3, 2, 2)
    slope = np.array([0.1, -2.0, 3.0], f32).reshape(3, 1, 1)
    np.testing.assert_allclose(run("PRelu", x, slope), np.where(x >= 0, x, slope * x))
    xi = np.array([-4, 4], np.int32)
    np.testing.assert_array_equal(run("PRelu", xi, np.array([2], np.int32)), [-8, 4])


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.0, 0.0, -1.0])
def test_elu_any_alpha(alpha):
    x = np.linspace(-10, 10, 201, dtype=f32)
    expected = np.where(x > 0, x, alpha * np.expm1(x.astype(np.float64)))
    np.testing.assert_allclose(run("Elu", x, alpha=alpha), expected, rtol=2e-6, atol=1e-7)


def test_selu_custom_and_default():
    x = np.linspace(-5, 5, 101, dtype=f32)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(run("Selu", x, alpha=2.0, gamma=3.0),
                               np.where(x > 0, 3 * xd, 3 * 2 * np.expm1(xd)), rtol=2e-6, atol=1e-7)
    a, g = 1.67326319217681884765625, 1.05070102214813232421875
    np.testing.assert_allclose(run("Selu", x), np.where(x > 0, g * xd, g * a * np.expm1(xd)), rtol=2e-6, atol=1e-7)


def test_sigmoid_softplus_extremes():
    x = np.array([-200, -88, -20, 0, 20, 88, 200], f32)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(run("Sigmoid", x), 1 / (1 + np.exp(-xd)), rtol=1e-6, atol=1e-44)
    np.testing.assert_allclose(run("Softplus", x), np.logaddexp(xd, 0), rtol=1e-6, atol=1e-44)


def test_hard_sigmoid_and_hard_swish():
    x = np.linspace(-5, 5, 41, dtype=f32)
    np.testing.assert_allclose(run("HardSigmoid", x, alpha=0.5, beta=0.25), np.clip(0.5 * x + 0.25, 0, 1), rtol=1e-6)
    np.testing.assert_allclose(run("HardSwish", x), x * np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- Erf / Gelu


_ERF_X = np.concatenate([
    np.array([0.0, -0.0, 1e-38, 1e-30, -1e-20, 1e-8, 1e-4, 0.5, 0.999, 1, 1.001, 2, 3, 3.9, 4, 6, 10, 1e10,
              3e19, -3e19, np.inf, -np.inf], f32),
    np.linspace(-6, 6, 24001, dtype=f32),
    np.random.default_rng(5).uniform(-4, 4, 20000).astype(f32),
])


def _erf_ref(x):
    return np.array([math.erf(float(v)) for v in x])


def test_erf_accuracy():
    """Within ~1 float32 ulp of the float64 reference everywhere (2 ulps of slack)."""
    np.testing.assert_allclose(run("Erf", _ERF_X), _erf_ref(_ERF_X), rtol=2.4e-7, atol=0)
    assert np.isnan(run("Erf", np.array([np.nan], f32)))[0]
    assert run("Erf", np.array([-0.0], f32))[0] == 0


def test_erf_fallback_without_native(monkeypatch):
    monkeypatch.setattr(ew, "_native", None)
    np.testing.assert_allclose(run("Erf", _ERF_X), _erf_ref(_ERF_X), rtol=6e-8, atol=0)


def test_erf_integer_input():
    r = run("Erf", np.array([-3, 0, 1, 2], np.int32))
    assert r.dtype == np.int32
    np.testing.assert_array_equal(r, [0, 0, 0, 0])  # erf in (-1, 1) truncates to 0 (+-1 only at +-inf)


def _gelu_exact(x):
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])


def _gelu_tanh(x):
    # 0.5 * x * (1 + tanh(u)) written as x / (1 + exp(-2u)): the same function, no cancellation.
    xd = x.astype(np.float64)
    u = math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)
    with np.errstate(over="ignore"):
        return xd / (1 + np.exp(-2 * u))


GELU_X = np.concatenate([
    np.linspace(-13, 13, 26001, dtype=f32),
    np.random.default_rng(6).uniform(-6, 6, 20000).astype(f32),
    np.array([-1e5, 1e5, 1e-38, 1e-20, -1e-20, 0, -0.0, np.inf], f32),
])


def test_gelu_exact_accuracy_including_tails():
    """Within a few float32 ulps of the float64 reference, including gelu(-13) ~ -1e-38."""
    r = run("Gelu", GELU_X, opset=20)
    np.testing.assert_allclose(r, _gelu_exact(GELU_X), rtol=4.8e-7, atol=1.2e-38)
    # A naive 0.5 * x * (1 + erf(x / sqrt(2))) in float32 returns 0 here (or garbage):
    np.testing.assert_allclose(run("Gelu", np.array([-5.0, -8.0], f32), opset=20),
                               _gelu_exact(np.array([-5.0, -8.0])), rtol=4.8e-7)


def test_gelu_tanh_accuracy():
    r = run("Gelu", GELU_X, opset=20, approximate="tanh")
    expected = _gelu_tanh(GELU_X)
    np.testing.assert_allclose(r, expected, rtol=3e-5, atol=1e-37)  # exp overflows below ~3e-38
    bulk = np.abs(GELU_X) <= 5
    np.testing.assert_allclose(r[bulk], expected[bulk], rtol=4e-6, atol=1e-44)


def test_gelu_fallback_without_native(monkeypatch):
    monkeypatch.setattr(ew, "_native", None)
    np.testing.assert_allclose(run("Gelu", GELU_X, opset=20), _gelu_exact(GELU_X), rtol=6e-8, atol=1.2e-38)


def test_compiled_kernels_non_contiguous_and_out_views():
    base = np.linspace(-3, 3, 60, dtype=f32).reshape(6, 10)
    x = base.T  # not C-contiguous
    for op, attrs in (("Erf", {}), ("Gelu", {"approximate": "none"}), ("Gelu", {"approximate": "tanh"})):
        expected = run(op, np.ascontiguousarray(x), opset=20, **attrs)
        np.testing.assert_array_equal(run(op, x, opset=20, **attrs), expected)
        holder = np.zeros((10, 12), f32)
        view = holder[:, 1:7]  # a strided output buffer
        r = run(op, x, opset=20, out=[view], **attrs)
        assert r is view
        np.testing.assert_array_equal(view, expected)
        assert (holder[:, 0] == 0).all() and (holder[:, 7:] == 0).all()


def test_gelu_bad_approximate():
    with pytest.raises(ModelInvalidError, match="approximate"):
        run("Gelu", np.zeros(2, f32), opset=20, approximate="fast")


# --------------------------------------------------------------------------- Softmax family


def _softmax_ref(x, axes):
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(axis=axes, keepdims=True))
    return e / e.sum(axis=axes, keepdims=True)


def test_softmax_opset_semantics():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(f32)
    # opset >= 13: one axis (default -1)
    np.testing.assert_allclose(run("Softmax", x, opset=13), _softmax_ref(x, (2,)), rtol=1e-5)
    np.testing.assert_allclose(run("Softmax", x, opset=13, axis=1), _softmax_ref(x, (1,)), rtol=1e-5)
    # opset < 13: coerced to 2-D at axis (default 1) -> normalised over axes 1 and 2
    np.testing.assert_allclose(run("Softmax", x, opset=11), _softmax_ref(x, (1, 2)), rtol=1e-5)
    np.testing.assert_allclose(run("Softmax", x, opset=11, axis=0), _softmax_ref(x, (0, 1, 2)), rtol=1e-5)
    np.testing.assert_allclose(run("Softmax", x, opset=11, axis=-1), _softmax_ref(x, (2,)), rtol=1e-5)
    np.testing.assert_allclose(run("Softmax", x, opset=11, axis=3), np.ones_like(x))
    np.testing.assert_allclose(run("LogSoftmax", x, opset=11), np.log(_softmax_ref(x, (1, 2))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run("LogSoftmax", x, opset=13, axis=0), np.log(_softmax_ref(x, (0,))),
                               rtol=1e-5, atol=1e-6)


def test_log_softmax_large_and_infinite_values():
    x = np.array([[1e4, 1e4 + 1, 1e4 + 2], [-np.inf, 0, 0]], f32)
    r = run("LogSoftmax", x)
    np.testing.assert_allclose(r[0], np.log(_softmax_ref(x[:1].astype(np.float64) - 1e4, (1,)))[0], rtol=1e-6)
    assert r[1, 0] == -np.inf
    np.testing.assert_allclose(r[1, 1:], [-math.log(2)] * 2, rtol=1e-6)
    np.testing.assert_allclose(run("Softmax", x)[1], [0, 0.5, 0.5])


def test_softmax_bad_axis():
    with pytest.raises(ModelInvalidError, match="axis"):
        run("Softmax", np.zeros((2, 3), f32), axis=2)
    with pytest.raises(ModelInvalidError, match="axis"):
        run("LogSoftmax", np.zeros((2, 3), f32), axis=-3)
    with pytest.raises(ModelInvalidError, match="axis"):
        run("Softmax", np.zeros((2, 3), f32), axis="1")


@pytest.fixture
def native_softmax_calls(monkeypatch):
    """The row counts of every native softmax call made while the test runs."""
    from rknnlite.backends.software.ops import activation
    calls = []
    native = activation.softmax_rows

    def counted(x, y):
        calls.append(x.shape[0])
        native(x, y)

    monkeypatch.setattr(activation, "softmax_rows", counted)
    return calls


@pytest.mark.parametrize("shape, axis, opset, axes", [
    ((1, 1000, 1, 1), 1, 9, (1, 2, 3)),   # a classifier's scores, legacy coercion to 2-D
    ((1, 1000, 1, 1), 1, 13, (1,)),       # one axis followed by size-1 axes only
    ((4, 37), -1, 13, (1,)),
    ((2, 3, 5), 1, 11, (1, 2)),
])
def test_a_small_softmax_over_trailing_axes_is_one_native_call(shape, axis, opset, axes, native_softmax_calls):
    x = (np.random.default_rng(3).standard_normal(shape) * 8).astype(f32)
    got = run("Softmax", x, opset=opset, axis=axis)
    assert native_softmax_calls == [x.size // math.prod(x.shape[a] for a in axes)]
    # float32 rounding of x - max (up to ~50 here) alone moves exp by up to ~4e-6
    np.testing.assert_allclose(got, _softmax_ref(x, axes), rtol=1e-5, atol=1e-30)


def test_softmax_over_a_middle_axis_or_a_big_tensor_stays_with_numpy(native_softmax_calls):
    from rknnlite.backends.software.ops.activation import _NATIVE_SOFTMAX_MAX
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(f32)
    np.testing.assert_allclose(run("Softmax", x, axis=1), _softmax_ref(x, (1,)), rtol=1e-5)
    big = np.random.default_rng(5).standard_normal((2, _NATIVE_SOFTMAX_MAX)).astype(f32)
    np.testing.assert_allclose(run("Softmax", big), _softmax_ref(big, (1,)), rtol=1e-5)
    assert native_softmax_calls == []


def test_native_softmax_special_values_follow_numpy(native_softmax_calls):
    x = np.array([[1, np.nan, 2], [-np.inf, 0, 0], [np.inf, 0, 1], [np.nan, 1, 1], [-np.inf] * 3], f32)
    got = run("Softmax", x)
    assert native_softmax_calls == [5]
    assert np.isnan(got[0]).all() and np.isnan(got[3]).all()  # a nan anywhere: the whole row
    np.testing.assert_array_equal(got[1], [0, 0.5, 0.5])
    assert np.isnan(got[2]).all()                             # inf - inf in the sum
    assert np.isnan(got[4]).all()
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(_softmax_ref(x, (1,))))


def test_a_compiled_softmax_calls_the_native_loop_directly(native_softmax_calls):
    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.graph import Graph, Node
    graph = Graph([Node("Relu", "r", ["x"], ["h"]), Node("Softmax", "s", ["h"], ["y"], {"axis": 1, "_opset": 9})],
                  ["x"], ["y"])
    ex = Executor(graph, "float32")
    state = ex.new_state()
    x = np.random.default_rng(6).standard_normal((1, 10, 1, 1)).astype(f32)
    for _ in range(3):
        np.testing.assert_allclose(state.run([x])[0], _softmax_ref(np.maximum(x, 0), (1, 2, 3)), rtol=1e-6)
    (plan,) = state._plans.values()
    assert "_bind_softmax" in plan.program.calls[-1].func.__qualname__
    assert len(native_softmax_calls) == 3


def test_a_bound_softmax_given_a_strided_input_takes_the_kernel(native_softmax_calls):
    spec = KERNELS["Softmax"]
    attrs = spec.prepare({"axis": -1, "_opset": 13}, [None])
    out = np.empty((2, 6), f32)
    call, extra = spec.fn.bind(attrs, [((2, 6), np.dtype(f32))], [out])
    x = np.random.default_rng(7).standard_normal((2, 12)).astype(f32)
    call(x[:, ::2], *extra)
    np.testing.assert_allclose(out, _softmax_ref(x[:, ::2], (1,)), rtol=1e-6)
    call(np.ascontiguousarray(x[:, 1::2]), *extra)
    np.testing.assert_allclose(out, _softmax_ref(x[:, 1::2], (1,)), rtol=1e-6)
    assert native_softmax_calls == [2]  # the strided input went through the kernel, which checks contiguity


def test_softmax_empty_tensor():
    assert run("Softmax", np.zeros((0, 3), f32)).shape == (0, 3)


# --------------------------------------------------------------------------- Cast


def test_cast_float_to_float16_rounds_and_stays_float32():
    x = np.array([0.1, 1 / 3, 65504, 65519, 65520, 1e-8, 6e-8, -2.0, np.inf, np.nan], f32)
    r = run("Cast", x, to=TensorProto.FLOAT16)
    assert r.dtype == f32
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(r, x.astype(np.float16).astype(f32))
    assert r[0] == np.float32(np.float16(0.1)) and r[0] != np.float32(0.1)
    assert r[4] == np.inf and r[3] == 65504
    big = np.random.default_rng(1).standard_normal(200_000).astype(f32) * 1000  # crosses chunk borders
    np.testing.assert_array_equal(run("Cast", big, to=TensorProto.FLOAT16), big.astype(np.float16).astype(f32))
    ints = np.array([2049, 70000, -3], np.int64)
    np.testing.assert_array_equal(run("Cast", ints, to=TensorProto.FLOAT16), [2048, np.inf, -3])


def test_cast_to_double_and_float_are_float32():
    x = np.array([1.5, -2.25], f32)
    for to in (TensorProto.FLOAT, TensorProto.DOUBLE):
        r = run("Cast", x, to=to)
        assert r.dtype == f32 and not np.shares_memory(r, x)
        np.testing.assert_array_equal(r, x)
    big = np.array([2**53 + 1, 2**24 + 1], np.int64)  # the double of 2**53+1 is 2**53
    np.testing.assert_array_equal(run("Cast", big, to=TensorProto.DOUBLE),
                                  big.astype(np.float64).astype(f32))


def test_cast_to_bfloat16_rounds_to_nearest_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -3.0, 3.4e38, np.inf, -np.inf, np.nan], f32)
    r = run("Cast", x, to=TensorProto.BFLOAT16)
    assert r.dtype == f32
    np.testing.assert_array_equal(r, [1.0, 1.0, 1 + 2**-6, 1 + 2**-7, -3.0, np.inf, np.inf, -np.inf, np.nan])


def test_cast_float_to_integers_and_bool():
    x = np.array([-2.7, -0.5, 0.0, 0.9, 2.5, 300.7], f32)
    np.testing.assert_array_equal(run("Cast", x, to=TensorProto.INT32), [-2, 0, 0, 0, 2, 300])
    np.testing.assert_array_equal(run("Cast", x, to=TensorProto.INT64), [-2, 0, 0, 0, 2, 300])
    assert run("Cast", x, to=TensorProto.UINT8).dtype == np.uint8
    np.testing.assert_array_equal(run("Cast", np.array([0.0, -0.0, 0.1, np.nan], f32), to=TensorProto.BOOL),
                                  [False, False, True, True])
    np.testing.assert_array_equal(run("Cast", np.array([200], np.int16), to=TensorProto.INT8), [-56])
    np.testing.assert_array_equal(run("Cast", np.array([True, False]), to=TensorProto.FLOAT), [1.0, 0.0])
    np.testing.assert_array_equal(run("Cast", np.array([3, 0], np.int64), to=TensorProto.BOOL), [True, False])
    for to, dt in ((2, np.uint8), (3, np.int8), (4, np.uint16), (5, np.int16), (6, np.int32), (7, np.int64),
                   (9, np.bool_), (12, np.uint32), (13, np.uint64)):
        assert run("Cast", np.array([1.0], f32), to=to).dtype == dt


@pytest.mark.parametrize("to", [TensorProto.STRING, TensorProto.FLOAT8E4M3FN, TensorProto.INT4,
                                TensorProto.COMPLEX64, 999])
def test_cast_unsupported_targets(to):
    with pytest.raises(ModelInvalidError, match="'to'"):
        run("Cast", np.zeros(2, f32), to=to)


def test_cast_missing_to():
    with pytest.raises(ModelInvalidError, match="'to'"):
        run("Cast", np.zeros(2, f32))


# --------------------------------------------------------------------------- prepare validation


@pytest.mark.parametrize("op, attrs", [
    ("LeakyRelu", {"alpha": "big"}),
    ("HardSigmoid", {"beta": [1.0]}),
    ("Elu", {"alpha": None}),
    ("Selu", {"gamma": "x"}),
])
def test_bad_float_attributes(op, attrs):
    with pytest.raises(ModelInvalidError) as info:
        run(op, np.zeros(2, f32), **attrs)
    assert info.value.op == op and repr(next(iter(attrs))) in str(info.value)
