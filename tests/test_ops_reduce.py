"""Reduction kernels (Reduce*, ArgMax, ArgMin): official ONNX node cases, the ``out=`` path, edge cases."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from onnx_cases import assert_matches, kernel_params, readonly, run_node_checked, run_with_kernels
from rknnlite.backends.software.ops import KERNELS
from rknnlite.errors import ModelInvalidError

OPS = (
    "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL2 ReduceL1 ReduceSumSquare ReduceLogSum "
    "ReduceLogSumExp ArgMax ArgMin"
).split()
REDUCE_OPS = [op for op in OPS if op.startswith("Reduce")]

PARAMS = kernel_params(OPS)

f32 = np.float32


def test_every_op_registered_with_out():
    for op in OPS:
        assert op in KERNELS and KERNELS[op].out and not KERNELS[op].data_dependent, op


@pytest.mark.parametrize("case, k", PARAMS)
def test_node_case(case, k):
    inputs, expected = case.data_sets[k]
    assert_matches(case, run_with_kernels(case, inputs), expected)


@pytest.mark.parametrize("case, k", PARAMS)
def test_node_case_out_path(case, k):
    """Into preallocated garbage-filled outputs: identical values, the same arrays returned."""
    inputs, _ = case.data_sets[k]
    fresh = run_node_checked(case, inputs, None)
    out = []
    for r in fresh:
        buf = np.empty(r.shape, r.dtype)
        buf.fill(True if buf.dtype.kind == "b" else 7)
        out.append(buf)
    result = run_node_checked(case, inputs, out)
    for r, o, f in zip(result, out, fresh):
        assert r is o and r.dtype == f.dtype and r.shape == f.shape
        np.testing.assert_array_equal(r, f)


@pytest.mark.parametrize("case, k", PARAMS)
def test_node_case_constant_axes(case, k):
    """With the axes input known at compile time (cached by prepare): same results."""
    inputs, expected = case.data_sets[k]
    assert_matches(case, run_node_checked(case, inputs, None, constant_inputs=True), expected)


# --------------------------------------------------------------------------- direct calls


def run(op, *inputs, opset=18, out=None, consts=None, **attrs):
    spec = KERNELS[op]
    attrs = dict(attrs, _opset=opset)
    args = [None if x is None else readonly(x) for x in inputs]
    if spec.prepare is not None:
        attrs = spec.prepare(attrs, consts if consts is not None else [None] * len(args))
    return spec.fn(args, attrs, out)[0]


X = np.arange(1, 25, dtype=f32).reshape(2, 3, 4) / 7


@pytest.mark.parametrize("op, ref", [
    ("ReduceSum", np.sum), ("ReduceMean", np.mean), ("ReduceMax", np.max), ("ReduceMin", np.min),
    ("ReduceProd", np.prod),
    ("ReduceL2", lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))),
    ("ReduceL1", lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims)),
    ("ReduceSumSquare", lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims)),
    ("ReduceLogSum", lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims))),
    ("ReduceLogSumExp", lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))),
])
@pytest.mark.parametrize("axes, keepdims", [
    ([1], 1), ([-1], 0), ([0, 2], 1), ([2, 0], 0), (None, 1), (None, 0), ([], 0),
])
def test_axes_attribute_and_input_forms_agree(op, ref, axes, keepdims):
    xd = X.astype(np.float64)
    axis = None if not axes else tuple(a % 3 for a in axes)
    expected = ref(xd, axis=axis, keepdims=bool(keepdims))
    # attribute form (opset 11) ...
    attrs = {} if axes is None else {"axes": axes}
    a = run(op, X, opset=11, keepdims=keepdims, **attrs)
    # ... input form (opset 18), runtime and constant
    axes_in = None if axes is None else np.array(axes, np.int64)
    b = run(op, X, axes_in, keepdims=keepdims)
    c = run(op, X, axes_in, keepdims=keepdims, consts=[None, axes_in])
    for r in (a, b, c):
        assert r.shape == np.shape(expected) and r.dtype == f32
        np.testing.assert_allclose(r, expected, rtol=1e-5)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, c)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_noop_with_empty_axes_is_a_copy(op):
    r = run(op, X, np.array([], np.int64), noop_with_empty_axes=1)
    np.testing.assert_array_equal(r, X)
    assert not np.shares_memory(r, X)
    r = run(op, X, noop_with_empty_axes=1)  # axes input omitted
    np.testing.assert_array_equal(r, X)
    out = np.full(X.shape, np.nan, f32)
    assert run(op, X, None, noop_with_empty_axes=1, out=[out]) is out
    np.testing.assert_array_equal(out, X)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_scalar_input(op):
    s = np.array(3.0, f32)
    r = run(op, s)
    assert r.shape == ()
    r = run(op, s, keepdims=0)
    assert r.shape == ()


def test_integer_reductions_keep_dtype():
    x = np.array([[100, 100, 100], [1, 2, 3]], np.int8)
    r = run("ReduceSum", x, np.array([1], np.int64))
    assert r.dtype == np.int8
    np.testing.assert_array_equal(r, [[44], [6]])  # 300 wraps like int8 arithmetic
    xi = np.array([[1, 2], [3, 4]], np.int32)
    np.testing.assert_array_equal(run("ReduceMean", xi, np.array([1], np.int64)), [[1], [3]])  # 1.5 -> 1
    np.testing.assert_array_equal(run("ReduceProd", xi, keepdims=0), 24)
    np.testing.assert_array_equal(run("ReduceL2", xi, np.array([0], np.int64)), [[3, 4]])  # sqrt(10), sqrt(20)
    assert run("ReduceMax", xi).dtype == np.int32
    x64 = np.array([[2**40, 2**40]], np.int64)
    np.testing.assert_array_equal(run("ReduceSum", x64, keepdims=0), 2**41)


def test_empty_set_values():
    e = np.zeros((2, 0, 3), f32)
    ax = np.array([1], np.int64)
    np.testing.assert_array_equal(run("ReduceSum", e, ax), np.zeros((2, 1, 3)))
    np.testing.assert_array_equal(run("ReduceProd", e, ax), np.ones((2, 1, 3)))
    np.testing.assert_array_equal(run("ReduceMax", e, ax), np.full((2, 1, 3), -np.inf))
    np.testing.assert_array_equal(run("ReduceMin", e, ax), np.full((2, 1, 3), np.inf))
    np.testing.assert_array_equal(run("ReduceL2", e, ax), np.zeros((2, 1, 3)))
    np.testing.assert_array_equal(run("ReduceLogSumExp", e, ax), np.full((2, 1, 3), -np.inf))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(run("ReduceMean", e, ax)).all()
    ei = np.zeros((0, 2), np.int16)
    np.testing.assert_array_equal(run("ReduceMax", ei, np.array([0], np.int64)), [[-32768, -32768]])
    np.testing.assert_array_equal(run("ReduceMin", ei, np.array([0], np.int64)), [[32767, 32767]])
    eb = np.zeros((0, 2), np.bool_)
    np.testing.assert_array_equal(run("ReduceMax", eb, np.array([0], np.int64)), [[False, False]])
    np.testing.assert_array_equal(run("ReduceMin", eb, np.array([0], np.int64)), [[True, True]])


def test_max_min_propagate_nan_and_handle_bool():
    x = np.array([[1, np.nan, 3], [1, 2, 3]], f32)
    np.testing.assert_array_equal(run("ReduceMax", x, np.array([1], np.int64), keepdims=0), [np.nan, 3])
    b = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(run("ReduceMax", b, np.array([1], np.int64), keepdims=0), [True, False])
    np.testing.assert_array_equal(run("ReduceMin", b, np.array([1], np.int64), keepdims=0), [False, False])


def test_log_sum_exp_is_overflow_safe():
    x = np.array([[1000, 1000], [-1000, -np.inf], [-np.inf, -np.inf]], f32)
    r = run("ReduceLogSumExp", x, np.array([1], np.int64), keepdims=0)
    np.testing.assert_allclose(r, [1000 + np.log(2), -1000, -np.inf], rtol=1e-6)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_bad_axes(op):
    with pytest.raises(ModelInvalidError, match="out of range"):
        run(op, X, np.array([3], np.int64))
    with pytest.raises(ModelInvalidError, match="repeated"):
        run(op, X, np.array([1, -2], np.int64))
    with pytest.raises(ModelInvalidError, match="repeated"):
        run(op, X, opset=11, axes=[0, 0])
    with pytest.raises(ModelInvalidError, match="repeated"):
        run(op, X, np.array([2, 2], np.int64), consts=[None, np.array([2, 2], np.int64)])
    with pytest.raises(ModelInvalidError, match="ints"):
        run(op, X, opset=11, axes=["a"])
    # named by dtype and shape, not by the tensor's repr
    with pytest.raises(ModelInvalidError, match=r"must be a list of ints, got a float32 tensor of shape \[1, 3\] \("):
        run(op, X, np.zeros((1, 3), np.float32))


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("name, value", [("keepdims", 2), ("noop_with_empty_axes", -1), ("keepdims", "yes")])
def test_bad_flags(op, name, value):
    with pytest.raises(ModelInvalidError) as info:
        run(op, X, **{name: value})
    assert info.value.op == op and repr(name) in str(info.value)


# --------------------------------------------------------------------------- ArgMax / ArgMin


def test_arg_select_last_index_with_ties():
    x = np.array([[2, 5, 5, 1], [7, 7, 7, 7]], f32)
    for op, last, expected in (("ArgMax", 0, [[1], [0]]), ("ArgMax", 1, [[2], [3]]),
                               ("ArgMin", 0, [[3], [0]]), ("ArgMin", 1, [[3], [3]])):
        r = run(op, x, axis=1, select_last_index=last)
        assert r.dtype == np.int64
        np.testing.assert_array_equal(r, expected)
    np.testing.assert_array_equal(run("ArgMax", x, axis=-2, keepdims=0, select_last_index=1), [1, 1, 1, 1])


def test_arg_int_and_bool_inputs_and_out():
    x = np.array([[3, -1], [0, 9]], np.int32)
    np.testing.assert_array_equal(run("ArgMax", x, axis=0, keepdims=0), [0, 1])
    np.testing.assert_array_equal(run("ArgMin", np.array([True, False, False]), keepdims=0), 1)
    out = np.full((1, 2), 99, np.int64)
    r = run("ArgMin", x, axis=0, select_last_index=1, out=[out])
    assert r is out
    np.testing.assert_array_equal(out, [[1, 0]])


def test_arg_bad_attributes():
    x = np.zeros((2, 3), f32)
    with pytest.raises(ModelInvalidError, match="out of range"):
        run("ArgMax", x, axis=2)
    with pytest.raises(ModelInvalidError, match="'axis'"):
        run("ArgMin", x, axis=1.5)
    with pytest.raises(ModelInvalidError, match="'select_last_index'"):
        run("ArgMax", x, select_last_index=2)
    with pytest.raises(ModelInvalidError, match="'keepdims'"):
        run("ArgMin", x, keepdims=-1)
