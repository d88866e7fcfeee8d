"""The internal ``ChannelAffine`` kernel and the toolkit pass that makes it
(:func:`rknnlite.toolkit.optimize.fuse_channel_affine`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rknnlite.backends.software.ops import KERNELS
from rknnlite.errors import ModelInvalidError

RNG = np.random.default_rng(23)
SPEC = KERNELS["ChannelAffine"]


def run_kernel(x, s, b, attrs=None, out=None, consts=True):
    attrs = SPEC.prepare(dict(attrs or {}), [None, s, b] if consts else [None, None, None])
    return SPEC.fn([x, s, b], attrs, out=out)


def reference(x, s, b, attrs=None):
    """numpy in float32: ``x * s + b`` then the activation, as the separate kernels compute it."""
    attrs = attrs or {}
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = x * s.reshape(shape) + b.reshape(shape)
    act = attrs.get("_activation")
    if act == "Relu":
        y = np.maximum(y, np.float32(0))
    elif act == "Clip":
        lo = attrs.get("_activation_min")
        hi = attrs.get("_activation_max")
        if lo is not None:
            y = np.maximum(y, np.float32(lo))
        if hi is not None:
            y = np.minimum(y, np.float32(hi))
    elif act == "LeakyRelu":
        alpha = np.float32(attrs.get("_activation_alpha", 0.01))
        y = np.where(y < 0, y * alpha, y)
    return y.astype(np.float32)


ACTS = [
    {},
    {"_activation": None},
    {"_activation": "Relu"},
    {"_activation": "Clip", "_activation_min": 0.0, "_activation_max": 6.0},
    {"_activation": "Clip", "_activation_min": -0.25},
    {"_activation": "Clip", "_activation_max": 0.5},
    {"_activation": "LeakyRelu", "_activation_alpha": 0.1},
    {"_activation": "LeakyRelu"},
    {"_activation": "LeakyRelu", "_activation_alpha": 1.5},
]


def data(shape):
    c = shape[1]
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    s = RNG.standard_normal(c).astype(np.float32)
    b = RNG.standard_normal(c).astype(np.float32)
    return x, s, b


# -------------------------------------------------------------------------------- kernel


@pytest.mark.parametrize("attrs", ACTS)
@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (1, 3, 64, 64), (3, 4), (1, 6, 33), (2, 3, 2, 2, 5), (1, 1, 1, 1)])
def test_kernel_bit_exact(attrs, shape):
    x, s, b = data(shape)
    (y,) = run_kernel(x, s, b, attrs)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_array_equal(y, reference(x, s, b, attrs))


def test_kernel_no_fma():
    """Values where fma(x, s, b) and fl(fl(x * s) + b) differ: the kernel must match the latter."""
    x = np.full((1, 1, 1, 64), 1 + 2.0 ** -12, np.float32) * (1 + np.arange(64, dtype=np.float32) * 2.0 ** -20)
    s = np.array([1 + 2.0 ** -12], np.float32)
    b = np.array([-1.0], np.float32)
    (y,) = run_kernel(x, s, b)
    expected = reference(x, s, b)
    exact = (x.astype(np.float64) * s[0] + b[0]).astype(np.float32)  # what an FMA would give
    assert not np.array_equal(expected, exact)  # the data does tell the two apart
    np.testing.assert_array_equal(y, expected)


def test_kernel_nan_and_inf():
    x = np.array([np.nan, np.inf, -np.inf, -1.0, 0.0, 2.0], np.float32).reshape(1, 1, 6)
    s, b = np.array([2.0], np.float32), np.array([0.5], np.float32)
    for attrs in ACTS:
        (y,) = run_kernel(x, s, b, attrs)
        np.testing.assert_array_equal(y, reference(x, s, b, attrs))


@pytest.mark.parametrize("attrs", ACTS[2:5])
def test_kernel_out_path(attrs):
    x, s, b = data((2, 4, 5, 6))
    expected = run_kernel(x, s, b, attrs)[0]
    out = [np.full(x.shape, 7, np.float32)]
    got = run_kernel(x, s, b, attrs, out=out)
    assert got is out or got[0] is out[0]
    np.testing.assert_array_equal(out[0], expected)
    # a non-contiguous destination is filled through a temporary
    big = np.zeros((2, 4, 5, 12), np.float32)
    view = big[..., ::2]
    got = run_kernel(x, s, b, attrs, out=[view])
    assert got[0] is view
    np.testing.assert_array_equal(view, expected)
    assert np.all(big[..., 1::2] == 0)


def test_kernel_in_place_and_inputs_untouched():
    x, s, b = data((1, 3, 4, 4))
    x0 = x.copy()
    x.flags.writeable = False
    (y,) = run_kernel(x, s, b, {"_activation": "Relu"})
    np.testing.assert_array_equal(x, x0)
    work = x0.copy()
    run_kernel(work, s, b, {"_activation": "Relu"}, out=[work])
    np.testing.assert_array_equal(work, y)


def test_kernel_non_contiguous_input_and_params():
    x, s, b = data((2, 3, 8, 8))
    xt = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    s2 = np.repeat(s, 2)[::2]
    (y,) = run_kernel(xt, s2, b)
    np.testing.assert_array_equal(y, reference(x, s, b))


def test_kernel_without_prepare():
    x, s, b = data((1, 2, 3, 3))
    attrs = {"_activation": "Clip", "_activation_min": -1.0, "_activation_max": 1.0}
    (y,) = SPEC.fn([x, s, b], attrs)
    np.testing.assert_array_equal(y, reference(x, s, b, attrs))


@pytest.mark.parametrize("attrs, word", [
    ({"_activation": "Sigmoid"}, "_activation"),
    ({"_activation": "Clip", "_activation_min": "a"}, "_activation_min"),
    ({"_activation": "Clip", "_activation_max": float("nan")}, "_activation_max"),
    ({"_activation": "LeakyRelu", "_activation_alpha": float("inf")}, "_activation_alpha"),
    ({"_activation": "LeakyRelu", "_activation_alpha": True}, "_activation_alpha"),
])
def test_prepare_rejects_bad_attributes(attrs, word):
    with pytest.raises(ModelInvalidError) as e:
        SPEC.prepare(attrs, [None, None, None])
    assert word in str(e.value) and "ChannelAffine" in str(e.value)


def test_prepare_rejects_bad_constants():
    s = np.ones(3, np.float32)
    with pytest.raises(ModelInvalidError, match="same length"):
        SPEC.prepare({}, [None, s, np.ones(4, np.float32)])
    with pytest.raises(ModelInvalidError, match="1-D float"):
        SPEC.prepare({}, [None, s.reshape(3, 1), s])
    with pytest.raises(ModelInvalidError, match="1-D float"):
        SPEC.prepare({}, [None, s, np.ones(3, np.int64)])


def test_kernel_runtime_shape_errors():
    x, s, b = data((1, 3, 4, 4))
    with pytest.raises(ValueError):
        SPEC.fn([x, s[:2], b], {})
    with pytest.raises(ValueError):
        SPEC.fn([x.reshape(-1), s, b], {})
    with pytest.raises(ValueError):
        SPEC.fn([x.astype(np.float64), s, b], {})
    with pytest.raises(ValueError):
        SPEC.fn([x, s, b], {}, out=[np.empty((1, 3, 4, 5), np.float32)])
    with pytest.raises(ValueError):
        SPEC.fn([x, s], {})


def test_native_rejects_mismatch():
    from rknnlite._native import affine_kernels as ak
    x = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(ValueError):
        ak.channel_affine(x, np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros((1, 2, 4), np.float32))
    with pytest.raises(ValueError):
        ak.channel_affine(x, np.zeros(3, np.float32), np.zeros(2, np.float32), x)
    with pytest.raises(ValueError):
        ak.channel_affine(x, np.zeros(2, np.float32), np.zeros(2, np.float32), x, 7)


@pytest.mark.parametrize("shape", [(1, 128, 56, 56), (2, 7, 100, 190), (1, 992, 14, 14)])
def test_a_big_tensor_is_split_across_the_run_s_threads_with_the_same_bits(shape):
    """Split as native ranges from NATIVE_SPLIT_MIN_ELEMENTS per thread: DenseNet's 992x14x14
    BatchNormalization+Relu too."""
    from rknnlite.backends.software.parallel import WorkerPool, WorkRecorder, using
    x, s, b = data(shape)
    attrs = {"_activation": "Relu"}
    pool = WorkerPool(2)
    try:
        recorder = WorkRecorder(pool)
        with using(recorder):
            (y,) = run_kernel(x, s, b, attrs)
        counts = recorder.take()
    finally:
        pool.close()
    np.testing.assert_array_equal(y, reference(x, s, b, attrs))
    assert sum(counts) == shape[0] * shape[1] and len(counts) == 2  # every row once, handed to the pool


def test_a_small_tensor_stays_on_the_calling_thread():
    from rknnlite.backends.software.parallel import WorkerPool, WorkRecorder, using
    x, s, b = data((1, 8, 16, 16))
    pool = WorkerPool(2)
    try:
        recorder = WorkRecorder(pool)
        with using(recorder):
            run_kernel(x, s, b)
        assert recorder.take() == [0, 0]  # not handed to the pool at all
    finally:
        pool.close()


def test_native_rejects_a_pool_that_is_not_one():
    from rknnlite._native import affine_kernels as ak
    x = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(TypeError, match="pool must be"):
        ak.channel_affine(x, np.zeros(2, np.float32), np.zeros(2, np.float32), x, 0, 0.0, 0.0, 0.0, object())


def test_a_compiled_run_calls_the_native_loop_directly():
    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.graph import Graph, Node
    x, s, b = data((1, 6, 5, 5))
    graph = Graph([Node("Relu", "r", ["x"], ["h"]),
                   Node("ChannelAffine", "a", ["h", "s", "b"], ["y"], {"_activation": "LeakyRelu"})],
                  ["x"], ["y"], {"s": s, "b": b})
    state = Executor(graph, "float32").new_state()
    for seed in range(3):
        xi = (np.random.default_rng(seed).standard_normal(x.shape) * 3).astype(np.float32)
        want = reference(np.maximum(xi, 0), s, b, {"_activation": "LeakyRelu"})
        np.testing.assert_array_equal(state.run([xi])[0], want)
    (plan,) = state._plans.values()
    assert "_bind" in plan.program.calls[-1].func.__qualname__


def test_a_bound_call_given_strided_values_takes_the_kernel():
    x, s, b = data((2, 4, 6, 6))
    attrs = SPEC.prepare({"_activation": "Relu"}, [None, s, b])
    out = np.empty(x.shape, np.float32)
    call, extra = SPEC.fn.bind(attrs, [(x.shape, np.dtype(np.float32)), ((4,), np.dtype(np.float32)),
                                       ((4,), np.dtype(np.float32))], [out])
    wide = np.repeat(x, 2, axis=3)
    call(wide[..., ::2], s, b, *extra)
    np.testing.assert_array_equal(out, reference(x, s, b, {"_activation": "Relu"}))
    s2, b2 = np.repeat(s, 2)[::2], np.repeat(b, 2)[::2]
    call(x, s2, b2, *extra)
    np.testing.assert_array_equal(out, reference(x, s, b, {"_activation": "Relu"}))


def test_empty_tensor():
    x = np.zeros((0, 3, 2, 2), np.float32)
    (y,) = run_kernel(x, np.ones(3, np.float32), np.ones(3, np.float32))
    assert y.shape == x.shape


# -------------------------------------------------------------------------------- the pass

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.backends.software.executor import Executor  # noqa: E402
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402
from rknnlite.toolkit.optimize import fold_affine_into_conv, fuse_channel_affine, optimize  # noqa: E402

F = TensorProto.FLOAT
C, HW = 6, 5


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make_model(nodes, inits, out="y", in_shape=(1, C, HW, HW), extra_outputs=(), opset=17, elem=F):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", elem, list(in_shape))],
        [helper.make_tensor_value_info(out, elem, None)]
        + [helper.make_tensor_value_info(o, elem, None) for o in extra_outputs],
        list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def build(m, in_shape=(1, C, HW, HW)):
    imported = import_onnx(m, ["x"], [list(in_shape)], None)
    return optimize(imported.graph, imported.shapes)


def run_both(m, in_shape=(1, C, HW, HW)):
    g = build(m, in_shape)
    g.validate()
    x = RNG.standard_normal(in_shape).astype(np.float32)
    ours = Executor(g, "float32").run([x])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {"x": x})
    return g, ours, theirs


def ops(g):
    return [n.op for n in g.nodes]


def bn_nodes(inp="c", out="bn"):
    inits = [init("g", RNG.uniform(0.5, 2, C).astype(np.float32)), init("be", RNG.standard_normal(C).astype(np.float32)),
             init("mu", RNG.standard_normal(C).astype(np.float32)),
             init("var", RNG.uniform(0.5, 2, C).astype(np.float32))]
    return [helper.make_node("BatchNormalization", [inp, "g", "be", "mu", "var"], [out], epsilon=1e-3)], inits


def concat_input():
    """x -> Concat(x, Neg(x)) (2C channels): a BN input that is not a Conv output."""
    return [helper.make_node("Neg", ["x"], ["nx"]), helper.make_node("Concat", ["x", "nx"], ["c"], axis=1)]


def with_act(act, inp, out="y"):
    if act == "Relu":
        return [helper.make_node("Relu", [inp], [out])], []
    if act == "Clip":
        return [helper.make_node("Clip", [inp, "lo", "hi"], [out])], [init("lo", np.float32(0)),
                                                                       init("hi", np.float32(1.5))]
    if act == "LeakyRelu":
        return [helper.make_node("LeakyRelu", [inp], [out], alpha=0.2)], []
    return [helper.make_node("Identity", [inp], [out])], []


@pytest.mark.parametrize("act", [None, "Relu", "Clip", "LeakyRelu"])
def test_concat_bn_act(act):
    bn, inits = bn_nodes()
    # the BN sees 2C channels
    inits = [init(t.name, np.concatenate([numpy_helper.to_array(t)] * 2)) for t in inits]
    a, ai = with_act(act, "bn")
    m = make_model(concat_input() + bn + a, inits + ai)
    g, ours, theirs = run_both(m)
    assert "ChannelAffine" in ops(g)
    assert not {"BatchNormalization", "Relu", "Clip", "LeakyRelu"} & set(ops(g))
    node = [n for n in g.nodes if n.op == "ChannelAffine"][0]
    assert node.outputs == ["y"]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)


def test_bn_bit_exact_with_unfused_graph():
    """A lone BN becomes a ChannelAffine computing exactly what the BN kernel computed."""
    bn, inits = bn_nodes("x", "y")
    m = make_model(bn, inits)
    imported = import_onnx(m, ["x"], [[1, C, HW, HW]], None)
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    plain = Executor(imported.graph, "float32").run([x])[0]
    g = optimize(imported.graph, imported.shapes)
    assert ops(g) == ["ChannelAffine"]
    np.testing.assert_array_equal(Executor(g, "float32").run([x])[0], plain)


def test_mul_add_relu_chain():
    nodes = [helper.make_node("Mul", ["x", "k1"], ["a"]), helper.make_node("Add", ["kb", "a"], ["b"]),
             helper.make_node("Sub", ["b", "k2"], ["d"]), helper.make_node("Div", ["d", "k3"], ["e"]),
             helper.make_node("Relu", ["e"], ["y"])]
    inits = [init("k1", RNG.standard_normal((C, 1, 1)).astype(np.float32)),
             init("kb", RNG.standard_normal((1, C, 1, 1)).astype(np.float32)),
             init("k2", np.float32(0.3)), init("k3", RNG.uniform(1, 2, (1, 1, 1)).astype(np.float32))]
    g, ours, theirs = run_both(make_model(nodes, inits))
    assert ops(g) == ["ChannelAffine"]
    assert g.nodes[0].attrs.get("_activation") == "Relu" and g.nodes[0].outputs == ["y"]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)


def test_mul_add_bit_exact():
    """Mul then Add by constants: the composed scale/shift are the constants themselves."""
    nodes = [helper.make_node("Mul", ["x", "k1"], ["a"]), helper.make_node("Add", ["a", "k2"], ["y"])]
    inits = [init("k1", RNG.standard_normal((C, 1, 1)).astype(np.float32)),
             init("k2", RNG.standard_normal((C, 1, 1)).astype(np.float32))]
    g, ours, theirs = run_both(make_model(nodes, inits))
    assert ops(g) == ["ChannelAffine"]
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_sub_reversed_and_mul_first_operand():
    nodes = [helper.make_node("Mul", ["k1", "x"], ["a"]), helper.make_node("Sub", ["k2", "a"], ["y"])]
    inits = [init("k1", RNG.standard_normal((C, 1, 1)).astype(np.float32)), init("k2", np.float32(1.25))]
    g, ours, theirs = run_both(make_model(nodes, inits))
    assert ops(g) == ["ChannelAffine"]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, atol=1e-6)


def refused(nodes, inits, expect_ops, in_shape=(1, C, HW, HW), **kw):
    g, ours, theirs = run_both(make_model(nodes, inits, in_shape=in_shape, **kw), in_shape)
    assert "ChannelAffine" not in ops(g)
    assert ops(g) == expect_ops
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_refuses_lone_mul():
    refused([helper.make_node("Mul", ["x", "k"], ["y"])], [init("k", np.ones((C, 1, 1), np.float32))], ["Mul"])


def test_refuses_non_per_channel_constant():
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    refused(nodes, [init("k", RNG.standard_normal((1, 1, HW)).astype(np.float32))], ["Mul", "Relu"])


def test_refuses_non_constant_operand():
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    refused(nodes, [], ["Mul", "Relu"])


def test_refuses_shared_intermediate():
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    refused(nodes, [init("k", RNG.standard_normal((C, 1, 1)).astype(np.float32))], ["Mul", "Relu"],
            extra_outputs=("a",))


def test_refuses_div_by_constant_over_tensor():
    nodes = [helper.make_node("Div", ["k", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    refused(nodes, [init("k", RNG.uniform(1, 2, (C, 1, 1)).astype(np.float32))], ["Div", "Relu"])


def test_refuses_non_4d():
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    refused(nodes, [init("k", RNG.standard_normal((C, 1)).astype(np.float32))], ["Mul", "Relu"],
            in_shape=(1, C, HW))


def test_refuses_integer_chain():
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Add", ["a", "k"], ["y"])]
    m = make_model(nodes, [init("k", np.full((C, 1, 1), 3, np.int32))], elem=TensorProto.INT32)
    g = build(m)
    assert ops(g) == ["Mul", "Add"]
    x = RNG.integers(-5, 5, (1, C, HW, HW)).astype(np.int32)
    np.testing.assert_array_equal(Executor(g, "float32").run([x])[0], x * 3 + 3)


def test_unknown_shape_refused_by_pass():
    m = make_model([helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
                   [init("k", np.ones((C, 1, 1), np.float32))])
    imported = import_onnx(m, ["x"], [[1, C, HW, HW]], None)
    g = imported.graph
    assert fuse_channel_affine(g, {}) == 0
    assert fuse_channel_affine(g, {"x": (1, -1, HW, HW)}) == 0
    assert ops(g) == ["Mul", "Relu"]
    assert fuse_channel_affine(g, imported.shapes) == 1
    assert ops(g) == ["ChannelAffine"]


def test_conv_bn_still_folds_into_conv():
    w = (RNG.standard_normal((C, C, 3, 3)) / 10).astype(np.float32)
    bn, inits = bn_nodes("c", "b")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])] + bn + \
        [helper.make_node("Relu", ["b"], ["y"])]
    g, ours, theirs = run_both(make_model(nodes, inits + [init("w", w)]))
    assert ops(g) == ["Conv"]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-4, atol=1e-4)


def test_bn_after_shared_conv_fuses():
    """A Conv output read twice cannot absorb the BN; the BN becomes a ChannelAffine."""
    w = (RNG.standard_normal((C, C, 1, 1)) / 3).astype(np.float32)
    bn, inits = bn_nodes("c", "b")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"])] + bn + \
        [helper.make_node("Relu", ["b"], ["r"]), helper.make_node("Add", ["r", "c"], ["y"])]
    g, ours, theirs = run_both(make_model(nodes, inits + [init("w", w)]))
    assert "ChannelAffine" in ops(g) and "BatchNormalization" not in ops(g)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-4, atol=1e-4)


def test_float16_mode_close():
    bn, inits = bn_nodes()
    inits = [init(t.name, np.concatenate([numpy_helper.to_array(t)] * 2)) for t in inits]
    a, ai = with_act("Relu", "bn")
    m = make_model(concat_input() + bn + a, inits + ai)
    g = build(m)
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    ours = Executor(g, "float16").run([x])[0]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ours, sess.run(None, {"x": x})[0], rtol=5e-3, atol=5e-3)


def test_channels_propagated_when_shapes_are_missing():
    """Only the input's shape known: the channel count is carried through Conv / Concat / BN."""
    w = (RNG.standard_normal((C, C, 1, 1)) / 3).astype(np.float32)
    bn, inits = bn_nodes("cat", "b")
    inits = [init(t.name, np.concatenate([numpy_helper.to_array(t)] * 2)) for t in inits]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[1, 1]),
             helper.make_node("Concat", ["c", "p"], ["cat"], axis=1)] + bn + \
        [helper.make_node("Mul", ["b", "k"], ["mb"]), helper.make_node("Relu", ["mb"], ["y"])]
    inits += [init("w", w), init("k", RNG.standard_normal((2 * C, 1, 1)).astype(np.float32))]
    m = make_model(nodes, inits)
    imported = import_onnx(m, ["x"], [[1, C, HW, HW]], None)
    g = imported.graph
    assert fuse_channel_affine(g, {"x": (1, C, HW, HW)}) == 2
    assert ops(g) == ["Conv", "MaxPool", "Concat", "ChannelAffine"]
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(Executor(g, "float32").run([x])[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    # a per-channel constant whose length does not match the propagated channel count is refused
    g = import_onnx(m, ["x"], [[1, C, HW, HW]], None).graph
    assert fuse_channel_affine(g, {"x": (1, C + 1, HW, HW)}) == 0


# ------------------------------------------------------------ as RKNN-Toolkit2 compiles them

_AFFINE_SIM = Path(__file__).parent / "data" / "vendor_int8" / "affine_sim.npz"


def _affine_chain(sim, constant_first: bool, pointwise: bool = False):
    """``Conv -> HardSwish -> Mul -> Add -> Conv`` with per-channel ``c``, ``d``; the data operand
    of the Mul and the Add first (the vendor: one BatchNormalization, folded into an unpadded
    conv after it) or second (Mul and Add); the last conv 3x3 padded or (``pointwise``) 1x1."""
    last = helper.make_node("Conv", ["a", "w3", "b2"], ["y"]) if pointwise else \
        helper.make_node("Conv", ["a", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["h"], ["hs"]),
             helper.make_node("Mul", ["c", "hs"] if constant_first else ["hs", "c"], ["m"]),
             helper.make_node("Add", ["d", "m"] if constant_first else ["m", "d"], ["a"]), last]
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 16, 16])],
                             [helper.make_tensor_value_info("y", F, [1, 8, 16, 16])],
                             [init(k, sim[k]) for k in ("w1", "b1", "w3" if pointwise else "w2", "b2", "c", "d")])


@pytest.mark.parametrize("precision", ["int8", "fp16"])
@pytest.mark.parametrize("kind", ["data_first", "constant_first", "data_first_1x1", "constant_first_1x1"])
def test_affine_chains_are_the_vendors(kind, precision, run_calibrated_build):
    """Every value the simulator's (RKNN-Toolkit2 2.5.0, ``tests/data/vendor_int8/README.md``):
    ``Mul(x, c) + d`` is one op computing in float32 from float32 parameters (float16 67 %, int8
    97.8 % with the parameters rounded to float16), folded into an unpadded conv that reads it
    (``_1x1``: 48 % and 84 % as an op); ``Mul(c, x)`` then ``Add(d, m)`` are two ops, each
    rounding, before either conv (int8 71.8 %, float16 48 % as one op), the int8 ones reading
    float32 constants (97.5 % with float16 ones)."""
    from float16_compare import assert_float16_matches

    sim = np.load(_AFFINE_SIM)
    (y,) = run_calibrated_build(_affine_chain(sim, kind.startswith("constant_first"), kind.endswith("_1x1")),
                                sim["cal"] if precision == "int8" else None, [sim["x"]], opset=14)
    want = sim[f"{kind}_{precision}"]
    if precision == "fp16":
        assert_float16_matches(y, want)
    else:
        step = np.diff(np.unique(want)).min()
        np.testing.assert_array_equal(np.rint(y / step), np.rint(want / step))


@pytest.mark.parametrize("constant_first", [False, True])
def test_constant_first_links_stay_ops_of_their_own_in_rounding_builds(constant_first):
    """``constant_first=False`` (builds that round as the vendor's) ends a chain before a
    ``Mul(c, x)`` / ``Add(c, x)``; a chain of data-first links still fuses, and a float32 build
    (the default) fuses either."""
    sim = np.load(_AFFINE_SIM)
    model = helper.make_model(_affine_chain(sim, constant_first), opset_imports=[helper.make_opsetid("", 14)])
    for keep_order in (False, True):
        im = import_onnx(model)
        fused = fuse_channel_affine(im.graph, im.shapes, constant_first=not keep_order)
        separate = keep_order and constant_first
        assert fused == (0 if separate else 1)
        assert ("ChannelAffine" in ops(im.graph)) is not separate
        assert fold_affine_into_conv(im.graph) == 0  # the 3x3 conv after it is padded


@pytest.mark.parametrize("group", [1, 2, 6])
def test_an_affine_an_unpadded_conv_reads_folds_into_it(group):
    """``conv(x * s + t)`` as one conv of weight ``W * s`` (per input channel of each output's
    group) and bias ``b + sum W * t``: float32 results within rounding of the two ops'; a padded
    conv, an affine with an activation or one the graph also outputs stay as they are."""
    w = RNG.standard_normal((C, C // group, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Mul", ["n", "s"], ["m"]),
             helper.make_node("Add", ["m", "t"], ["a"]), helper.make_node("Conv", ["a", "w", "b"], ["y"], group=group)]
    inits = [init("s", RNG.uniform(0.5, 2, (1, C, 1, 1)).astype(np.float32)),
             init("t", RNG.standard_normal((1, C, 1, 1)).astype(np.float32)), init("w", w),
             init("b", RNG.standard_normal(C).astype(np.float32))]
    m = make_model(nodes, inits)
    im = import_onnx(m, ["x"], [[1, C, HW, HW]], None)
    g = optimize(im.graph, im.shapes, vendor_affines=True)
    assert ops(g) == ["Neg", "Conv"]
    x = RNG.standard_normal((1, C, HW, HW)).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(Executor(g, "float32").run([x])[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    padded = make_model(nodes[:3] + [helper.make_node("Conv", ["a", "w", "b"], ["y"], group=group, pads=[1, 1, 1, 1])],
                        inits)
    im = import_onnx(padded, ["x"], [[1, C, HW, HW]], None)
    assert "ChannelAffine" in ops(optimize(im.graph, im.shapes, vendor_affines=True))
    also_output = make_model(nodes, inits, extra_outputs=["a"])
    im = import_onnx(also_output, ["x"], [[1, C, HW, HW]], None)
    assert "ChannelAffine" in ops(optimize(im.graph, im.shapes, vendor_affines=True))
