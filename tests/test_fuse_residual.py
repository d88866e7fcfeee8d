"""The toolkit's residual-add fusion: ``Conv -> Add(., r) [-> Relu]`` becomes one Conv
with a residual input (see :func:`rknnlite.toolkit.optimize.fuse_residual_add`)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.backends.software.executor import Executor  # noqa: E402
from rknnlite.model.graph import Graph  # noqa: E402
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402
from rknnlite.toolkit.optimize import fuse_activations, fuse_residual_add, optimize  # noqa: E402

RNG = np.random.default_rng(17)
F = TensorProto.FLOAT


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def ort_run(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_graph(graph: Graph, feeds):
    graph.validate()
    return Executor(graph, "float32").run(list(feeds))


def ops(graph):
    return [n.op for n in graph.nodes]


def weights(m, c, k=3):
    return (RNG.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)


def block_model(add_op="Add", swap=False, relu=True, bias=True, shortcut_conv=False, shortcut_first=True,
                c=16, hw=10, extra_outputs=(), extra_nodes=()):
    """A residual block: x -> Conv(3x3) -> Relu -> Conv(1x1) -> c2; y = Relu(Add(c2, s)) where
    s is x or, with ``shortcut_conv``, a 1x1 Conv of x (computed before or after the main
    branch)."""
    inits = [init("w1", weights(c, c)), init("w2", weights(c, c, 1)), init("ws", weights(c, c, 1))]
    if bias:
        inits += [init("b1", RNG.standard_normal(c).astype(np.float32)),
                  init("b2", RNG.standard_normal(c).astype(np.float32))]
    b1 = ["b1"] if bias else []
    b2 = ["b2"] if bias else []
    main = [helper.make_node("Conv", ["x", "w1"] + b1, ["c1"], name="conv1", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
            helper.make_node("Conv", ["r1", "w2"] + b2, ["c2"], name="conv2")]
    short = [helper.make_node("Conv", ["x", "ws"], ["s"], name="short")] if shortcut_conv else []
    s = "s" if shortcut_conv else "x"
    nodes = (short + main) if shortcut_first else (main + short)
    operands = [s, "c2"] if swap else ["c2", s]
    nodes.append(helper.make_node(add_op, operands, ["a" if relu else "y"], name="add"))
    if relu:
        nodes.append(helper.make_node("Relu", ["a"], ["y"], name="relu2"))
    nodes += list(extra_nodes)
    outputs = [vi("y", [1, c, hw, hw])] + [vi(o, [1, c, hw, hw]) for o in extra_outputs]
    return model(nodes, [vi("x", [1, c, hw, hw])], outputs, inits)


def feeds(c=16, hw=10):
    return {"x": RNG.standard_normal((1, c, hw, hw)).astype(np.float32)}


def unfused(m):
    im = import_onnx(m)
    return optimize(im.graph, im.shapes, residual_fusion=False)


@pytest.mark.parametrize("add_op", ["Add", "Sum"])
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_fuse_residual_structure_and_numerics(add_op, swap, relu, bias):
    m = block_model(add_op, swap, relu, bias)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert ops(g) == ["Conv", "Conv"]
    conv = g.nodes[1]
    assert conv.attrs["_residual"] is True and conv.outputs == ["y"]
    assert conv.inputs == [g.nodes[0].outputs[0], "w2", "b2" if bias else "", "x"]
    assert ("_activation" in conv.attrs) == relu
    f = feeds()
    expected = ort_run(m, f)[0]
    actual = run_graph(g, [f["x"]])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)
    # bit for bit what Conv, Add, Relu compute as separate nodes
    ref = unfused(m)
    assert "Add" in ops(ref) or "Sum" in ops(ref)
    np.testing.assert_array_equal(actual, run_graph(ref, [f["x"]])[0])


@pytest.mark.parametrize("shortcut_first", [True, False])
def test_fuse_residual_two_convs(shortcut_first):
    """Add of two Conv outputs: the Conv whose partner is computed before it takes the
    residual, so the graph stays in order without moving nodes."""
    m = block_model(shortcut_conv=True, shortcut_first=shortcut_first)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert ops(g) == ["Conv", "Conv", "Conv"]
    fused = [n for n in g.nodes if n.attrs.get("_residual")]
    assert len(fused) == 1 and fused[0] is g.nodes[-1] and fused[0].attrs["_activation"] == "Relu"
    assert fused[0].name == ("conv2" if shortcut_first else "short")
    f = feeds()
    np.testing.assert_allclose(run_graph(g, [f["x"]])[0], ort_run(m, f)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(run_graph(g, [f["x"]])[0], run_graph(unfused(m), [f["x"]])[0])


def test_fuse_residual_moves_conv_after_its_residual():
    """When the only fusable Conv runs before its residual is computed, the fused Conv
    moves to the Add's place."""
    w = weights(8, 8, 1)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
               helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
               helper.make_node("Add", ["c", "s"], ["a"], name="add"),
               helper.make_node("Relu", ["a"], ["y"], name="relu")],
              [vi("x", [1, 8, 5, 5])], [vi("y", [1, 8, 5, 5])], [init("w", w)])
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert ops(g) == ["Sigmoid", "Conv"]
    assert g.nodes[1].inputs == ["x", "w", "", "s"] and g.nodes[1].attrs["_activation"] == "Relu"
    f = {"x": RNG.standard_normal((1, 8, 5, 5)).astype(np.float32)}
    np.testing.assert_allclose(run_graph(g, [f["x"]])[0], ort_run(m, f)[0], rtol=1e-5, atol=1e-5)


def test_fuse_residual_chain_of_blocks():
    """Two residual blocks in a row: each Add fuses into its own Conv (a Conv that already
    has a residual never takes a second one)."""
    c, hw = 8, 6
    inits = [init(f"w{i}", weights(c, c)) for i in range(4)]
    nodes = []
    prev = "x"
    for blk in range(2):
        nodes += [helper.make_node("Conv", [prev, f"w{2 * blk}"], [f"c{blk}a"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{blk}a"], [f"r{blk}a"]),
                  helper.make_node("Conv", [f"r{blk}a", f"w{2 * blk + 1}"], [f"c{blk}b"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", [f"c{blk}b", prev], [f"s{blk}"]),
                  helper.make_node("Relu", [f"s{blk}"], [f"o{blk}" if blk == 0 else "y"])]
        prev = f"o{blk}"
    m = model(nodes, [vi("x", [1, c, hw, hw])], [vi("y", [1, c, hw, hw])], inits)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert ops(g) == ["Conv"] * 4
    assert [bool(n.attrs.get("_residual")) for n in g.nodes] == [False, True, False, True]
    f = {"x": RNG.standard_normal((1, c, hw, hw)).astype(np.float32)}
    np.testing.assert_allclose(run_graph(g, [f["x"]])[0], ort_run(m, f)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(run_graph(g, [f["x"]])[0], run_graph(unfused(m), [f["x"]])[0])


def test_fuse_residual_through_file_and_float16():
    """A fused model survives the portable file format and runs in float16 mode too."""
    from rknnlite.model.metadata import build_metadata
    from rknnlite.model.portable import read_portable, write_portable

    m = block_model()
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    meta = build_metadata(im.input_specs, im.output_specs, target_platforms=("rk3588",), float_dtype="float32")
    data = write_portable(meta, g)
    back = read_portable(memoryview(data)).graph
    assert [n.attrs.get("_residual") for n in back.nodes] == [None, True]
    f = feeds()
    np.testing.assert_array_equal(run_graph(back, [f["x"]])[0], run_graph(g, [f["x"]])[0])
    y16 = Executor(back, "float16").run([f["x"]])[0]
    np.testing.assert_allclose(y16, ort_run(m, f)[0], rtol=2e-2, atol=2e-2)


def _count(m, **kw):
    im = import_onnx(m)
    g = im.graph
    return fuse_residual_add(g, im.shapes if kw.get("shapes", True) else None), g


def test_fuse_residual_refusals():
    # broadcasting add (per-channel tensor from the graph, not a constant)
    w = weights(4, 4, 1)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "v"], ["y"])],
              [vi("x", [1, 4, 5, 5]), vi("v", [1, 4, 1, 1])], [vi("y", [1, 4, 5, 5])], [init("w", w)])
    assert _count(m)[0] == 0
    # a constant as the other operand (fold_conv_affine's job; full-shape constant here)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "k"], ["y"])],
              [vi("x", [1, 4, 5, 5])], [vi("y", [1, 4, 5, 5])],
              [init("w", w), init("k", RNG.standard_normal((1, 4, 5, 5)).astype(np.float32))])
    assert _count(m)[0] == 0
    # the Conv already has an activation
    m = block_model(relu=False)
    im = import_onnx(m)
    conv2 = next(n for n in im.graph.nodes if n.name == "conv2")
    conv2.attrs["_activation"] = "Relu"
    assert fuse_residual_add(im.graph, im.shapes) == 0
    # the Conv output is read twice, or is a graph output
    m = block_model(extra_nodes=[helper.make_node("Sigmoid", ["c2"], ["z"])], extra_outputs=["z"])
    assert _count(m)[0] == 0
    m = block_model(extra_outputs=["c2"])
    assert _count(m)[0] == 0
    # unknown shapes
    assert _count(block_model(), shapes=False)[0] == 0
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "x"], ["y"])],
              [vi("x", [1, 4, "h", 5])], [vi("y", [1, 4, "h", 5])], [init("w", w)])
    assert _count(m)[0] == 0
    # Add(c, c): the Conv output is read twice by the same node
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "c"], ["y"])],
              [vi("x", [1, 4, 5, 5])], [vi("y", [1, 4, 5, 5])], [init("w", w)])
    assert _count(m)[0] == 0
    # three-input Sum, and a non-Conv producer
    m = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sum", ["c", "x", "x"], ["y"])],
              [vi("x", [1, 4, 5, 5])], [vi("y", [1, 4, 5, 5])], [init("w", w)])
    assert _count(m)[0] == 0
    m = model([helper.make_node("Sigmoid", ["x"], ["c"]), helper.make_node("Add", ["c", "x"], ["y"])],
              [vi("x", [1, 4, 5, 5])], [vi("y", [1, 4, 5, 5])])
    assert _count(m)[0] == 0
    # ConvTranspose is not fused
    wt = RNG.standard_normal((4, 4, 1, 1)).astype(np.float32)
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "x"], ["y"])],
              [vi("x", [1, 4, 5, 5])], [vi("y", [1, 4, 5, 5])], [init("w", wt)])
    assert _count(m)[0] == 0


def test_fuse_residual_then_activation_only_once():
    """After the fusion, fuse_activations takes the Relu; a second Relu stays."""
    m = block_model(extra_nodes=[helper.make_node("Relu", ["y"], ["z"])], extra_outputs=["z"])
    im = import_onnx(m)
    g = im.graph
    assert fuse_residual_add(g, im.shapes) == 1
    assert fuse_activations(g) == 2  # relu1 into conv1, relu2 into the residual conv
    assert ops(g) == ["Conv", "Conv", "Relu"]
    f = feeds()
    for a, e in zip(run_graph(g, [f["x"]]), ort_run(m, f)):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def test_folding_passes_leave_a_residual_conv_alone():
    """BN / affine folding must not rescale a Conv that already adds a residual."""
    from rknnlite.model.graph import Node
    from rknnlite.toolkit.optimize import fold_batchnorm, fold_conv_affine

    rng = np.random.default_rng(0)
    consts = {"w": rng.standard_normal((4, 4, 1, 1)).astype(np.float32),
              "s": np.full(4, 2.0, np.float32), "b": np.zeros(4, np.float32),
              "m": np.zeros(4, np.float32), "v": np.ones(4, np.float32), "k": np.full((4, 1, 1), 3.0, np.float32)}
    for tail in (Node("BatchNormalization", "bn", ["y", "s", "b", "m", "v"], ["z"]),
                 Node("Mul", "mul", ["y", "k"], ["z"])):
        conv = Node("Conv", "conv", ["x", "w", "", "r"], ["y"], {"_residual": True})
        g = Graph([conv, tail], ["x", "r"], ["z"], dict(consts))
        assert fold_batchnorm(g) + fold_conv_affine(g) == 0
        assert [n.op for n in g.nodes] == ["Conv", tail.op]
