"""The toolkit's first path: ONNX import, the optimisation passes, and the RKNN object."""

from __future__ import annotations

import copy
import logging
import os
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from toolkit_logs import errors  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite import ModelInvalidError  # noqa: E402
from rknnlite.backends.software.executor import Executor  # noqa: E402
from rknnlite.model.graph import Graph, Node  # noqa: E402
from rknnlite.model.loader import load_model  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402
from rknnlite.toolkit.static_shapes import static_shapes  # noqa: E402
from rknnlite.toolkit.optimize import (  # noqa: E402
    conv_fusable_activations,
    finalize_outputs,
    fold_batchnorm,
    fold_constants,
    fold_conv_affine,
    fold_dense_bias,
    fold_input_residual,
    fuse_activations,
    fuse_gelu,
    fuse_hard_swish,
    fuse_layer_norm,
    global_pool_stages,
    spatial_means_as_pools,
    split_global_average_pools,
    optimize,
    remove_dead_nodes,
    remove_identities,
)

RNG = np.random.default_rng(7)
F = TensorProto.FLOAT


def vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, inits=(), opset=17, ir=8):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


def ort_run(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_graph(graph: Graph, feeds):
    return Executor(graph, "float32").run(list(feeds))


def ops(graph):
    return [n.op for n in graph.nodes]


def conv_bn_model(extra_reader=False):
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    scale = RNG.uniform(0.5, 2, 4).astype(np.float32)
    beta = RNG.standard_normal(4).astype(np.float32)
    mean = RNG.standard_normal(4).astype(np.float32)
    var = RNG.uniform(0.1, 2, 4).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "s", "beta", "m", "v"], ["bn"], epsilon=1e-3, name="bn"),
        helper.make_node("Relu", ["bn"], ["y"], name="relu"),
    ]
    outputs = [vi("y", F, [1, 4, 6, 6])]
    if extra_reader:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"], name="sig"))
        outputs.append(vi("z", F, [1, 4, 6, 6]))
    return model(nodes, [vi("x", F, [1, 3, 6, 6])], outputs,
                 [init("w", w), init("b", b), init("s", scale), init("beta", beta), init("m", mean), init("v", var)])


# -- import -------------------------------------------------------------------------------------


def test_import_constants_specs_names_and_attrs():
    w = RNG.standard_normal((2, 3)).astype(np.float32)
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["t"]),
         helper.make_node("Relu", ["t"], ["u"]),
         helper.make_node("Softmax", ["u"], ["y"], axis=1, name="dup"),
         helper.make_node("Identity", ["u"], ["z"], name="dup")],
        # the initializer is also listed as a graph input, as older exporters did
        [vi("x", F, ["N", 2]), vi("w", F, [2, 3])],
        [vi("y", F, ["N", 3]), vi("z", F, ["N", 3])],
        [init("w", w)], opset=13)
    im = import_onnx(m)
    g = im.graph
    assert g.inputs == ["x"] and g.outputs == ["y", "z"]
    np.testing.assert_array_equal(g.constants["w"], w)
    assert im.opset == 13
    assert all(n.attrs["_opset"] == 13 for n in g.nodes)
    assert g.nodes[2].attrs["axis"] == 1
    names = [n.name for n in g.nodes]
    assert len(set(names)) == 4 and all(names)
    assert im.input_specs[0].shape == (-1, 2) and im.input_specs[0].dtype == "float32"
    assert im.input_specs[0].layout == "UNDEFINED"
    assert im.output_specs[0].shape == (-1, 3)


def test_import_from_bytes_path_and_errors(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [1, 3, 4, 4])], [vi("y", F, [1, 3, 4, 4])])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    for src in (m, m.SerializeToString(), str(path), path):
        im = import_onnx(src)
        assert im.input_specs[0].layout == "NCHW" and ops(im.graph) == ["Relu"]
    with pytest.raises(ModelInvalidError, match="cannot read"):
        import_onnx(b"\x08\x07garbage" * 10)
    with pytest.raises(ModelInvalidError, match="not found"):
        import_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelInvalidError, match="path, bytes or an onnx.ModelProto"):
        import_onnx(42)


def test_an_input_passed_through_as_an_output_keeps_its_declared_shape(tmp_path):
    """A graph output that is a graph input declares the tensor twice, the output's ValueInfo
    often without a shape: the input's shape holds (it was lost, and load_onnx refused the model
    with "input 'x' has no known shape")."""
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [1, 3, 4, 4])], [vi("x"), vi("y")])
    assert [s.shape for s in import_onnx(m).input_specs] == [(1, 3, 4, 4)]
    path = tmp_path / "m.onnx"
    onnx.save(model([], [vi("x", F, [1, 3, 4, 4])], [vi("x")]), str(path))  # no node at all: the identity
    onnx.save(m, str(tmp_path / "two.onnx"))
    for src, want in ((path, [x]), (tmp_path / "two.onnx", [x, np.maximum(x, 0)])):
        r = RKNN()
        assert r.config(target_platform="rk3588", float_dtype="float32") == 0
        assert r.load_onnx(str(src)) == 0 and r.build(do_quantization=False) == 0
        assert r.export_rknn(str(src) + ".rknn") == 0
        r.release()
        got = rknnlite.Context(str(src) + ".rknn", backend="software").run([x], data_format="nchw")
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def test_io_dtypes_and_layouts():
    m = model(
        [helper.make_node("Identity", ["a"], ["a2"]), helper.make_node("Identity", ["b"], ["b2"]),
         helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Identity", ["d"], ["d2"]),
         helper.make_node("Identity", ["e"], ["e2"])],
        [vi("a", TensorProto.FLOAT16, [1, 2, 3, 4]), vi("b", TensorProto.DOUBLE, [2, 3]),
         vi("c", TensorProto.INT64, [1, 2, 3, 4]), vi("d", TensorProto.BOOL, [3]), vi("e", TensorProto.UINT8, [])],
        [vi("a2", TensorProto.FLOAT16, [1, 2, 3, 4]), vi("b2", TensorProto.DOUBLE, [2, 3]),
         vi("c2", TensorProto.INT64, [1, 2, 3, 4]), vi("d2", TensorProto.BOOL, [3]), vi("e2", TensorProto.UINT8, [])])
    im = import_onnx(m)
    assert [(s.dtype, s.layout) for s in im.input_specs] == [
        ("float32", "NCHW"), ("float32", "UNDEFINED"), ("int64", "UNDEFINED"), ("bool", "UNDEFINED"),
        ("uint8", "UNDEFINED")]
    assert [s.dtype for s in im.output_specs] == ["float32", "float32", "int64", "bool", "uint8"]


@pytest.mark.parametrize("elem", [TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.COMPLEX64,
                                  TensorProto.FLOAT8E4M3FN, TensorProto.INT4, TensorProto.UINT64])
def test_element_types_outside_the_runtime(elem):
    name = TensorProto.DataType.Name(elem)
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", elem, [2])], [vi("y", elem, [2])])
    with pytest.raises(ModelInvalidError, match=f"element type {name}"):
        import_onnx(m)


def test_cast_to_an_unsupported_type_is_refused():
    m = model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16, name="to_bf16")],
              [vi("x", F, [2])], [vi("y", TensorProto.BFLOAT16, [2])])
    with pytest.raises(ModelInvalidError, match="to_bf16.*BFLOAT16|BFLOAT16"):
        import_onnx(m)


def test_unsupported_op_and_domain_are_named():
    m = model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Hardmax", ["t"], ["y"], name="hm")],
              [vi("x", F, [2, 2])], [vi("y", F, [2, 2])])
    with pytest.raises(ModelInvalidError) as e:
        import_onnx(m)
    msg = str(e.value)
    assert "'Hardmax'" in msg and "'hm'" in msg and "supported ops" in msg and "Relu" in msg
    m = model([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft", name="ms")],
              [vi("x", F, [2])], [vi("y", F, [2])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(ModelInvalidError, match="com.microsoft::Gelu.*'ms'"):
        import_onnx(m)


@pytest.mark.parametrize("node, fragment", [
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=2.0, name="mp"),
     "attribute 'strides' of node 'mp' (MaxPool) is FLOAT; ONNX declares MaxPool's strides as INTS"),
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=2, name="mp"),
     "attribute 'kernel_shape' of node 'mp' (MaxPool) is INT; ONNX declares MaxPool's kernel_shape as INTS"),
    (helper.make_node("LeakyRelu", ["x"], ["y"], alpha=[0.1], name="lr"),
     "attribute 'alpha' of node 'lr' (LeakyRelu) is FLOATS; ONNX declares LeakyRelu's alpha as FLOAT"),
])
def test_an_attribute_of_another_kind_than_onnx_declares_is_refused_at_import(node, fragment):
    # the kernels would refuse the built file only when it loads; ONNX Runtime refuses the model too
    m = model([node], [vi("x", F, [1, 2, 4, 4])], [vi("y", F, None)])
    with pytest.raises(ModelInvalidError, match=re.escape(fragment)):
        import_onnx(m)


@pytest.mark.parametrize("node", [
    helper.make_node("Pad", ["x"], ["p"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=float("-inf")),
    helper.make_node("Clip", ["x"], ["p"], min=float("-inf"), max=0.5),
])
def test_non_finite_float_attributes_build_and_run(tmp_path, node):
    # opset 10 keeps these as attributes (tf2onnx pads a SAME max pool with -inf); the file's JSON
    # could not hold them and the build failed with "Out of range float values are not JSON compliant"
    m = model([node, helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3])], [vi("x", F, [1, 3, 8, 8])],
              [vi("y", F, None)], opset=10)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort_run(m, {"x": x})[0]
    rknn = RKNN(verbose=False)
    rknn.config(target_platform="rk3588", float_dtype="float32")
    assert rknn.load_onnx(str(path)) == 0 and rknn.build(do_quantization=False) == 0 and rknn.init_runtime() == 0
    np.testing.assert_allclose(rknn.inference(inputs=[x], data_format="nchw")[0], want, rtol=1e-6, atol=1e-6)


def test_input_size_list_fixes_dynamic_dims():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [1, 3, "H", "W"])], [vi("y", F, [1, 3, "H", "W"])])
    im = import_onnx(m)
    assert im.input_specs[0].shape == (1, 3, -1, -1) and im.output_specs[0].shape == (1, 3, -1, -1)
    im = import_onnx(m, input_size_list=[[1, 3, 16, 24]])
    assert im.input_specs[0].shape == (1, 3, 16, 24) and im.output_specs[0].shape == (1, 3, 16, 24)
    with pytest.raises(ModelInvalidError, match="fixes it"):
        import_onnx(m, input_size_list=[[2, 3, 16, 24]])
    with pytest.raises(ModelInvalidError, match="rank"):
        import_onnx(m, input_size_list=[[3, 16, 24]])
    with pytest.raises(ModelInvalidError, match="1 inputs"):
        import_onnx(m, input_size_list=[[1, 3, 4, 4], [1]])


def test_inputs_and_outputs_cut_the_graph():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    m = model([helper.make_node("Relu", ["x"], ["a"], name="n0"),
               helper.make_node("MatMul", ["a", "w"], ["b"], name="n1"),
               helper.make_node("Sigmoid", ["b"], ["c"], name="n2"),
               helper.make_node("Softmax", ["c"], ["y"], name="n3")],
              [vi("x", F, [2, 4])], [vi("y", F, [2, 4])], [init("w", w)])
    im = import_onnx(m, inputs=["a"], input_size_list=[[2, 4]], outputs=["b"])
    g = im.graph
    assert g.inputs == ["a"] and g.outputs == ["b"] and [n.name for n in g.nodes] == ["n1"]
    assert im.input_specs[0].shape == (2, 4) and im.output_specs[0].shape == (2, 4)
    a = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(run_graph(g, [a])[0], a @ w, rtol=1e-5)
    im = import_onnx(m, outputs=["c", "a"])
    assert [n.name for n in im.graph.nodes] == ["n0", "n1", "n2"] and im.graph.outputs == ["c", "a"]
    with pytest.raises(ModelInvalidError, match="nope"):
        import_onnx(m, outputs=["nope"])
    with pytest.raises(ModelInvalidError, match="'x'"):
        m2 = model([helper.make_node("Add", ["x", "z"], ["y"])], [vi("x", F, [2]), vi("z", F, [2])],
                   [vi("y", F, [2])])
        import_onnx(m2, inputs=["z"])


def test_constant_nodes_become_constants():
    m = model([helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.float32([1, 2]))),
               helper.make_node("Constant", [], ["i"], value_ints=[3, 4]),
               helper.make_node("Add", ["x", "k"], ["y"])],
              [vi("x", F, [2])], [vi("y", F, [2])])
    g = import_onnx(m).graph
    assert ops(g) == ["Add"]
    np.testing.assert_array_equal(g.constants["k"], [1, 2])
    assert "i" not in g.constants  # unused


def test_output_counts_and_omitted_outputs():
    """Nodes carry ``_num_outputs``; omitted trailing outputs are dropped, omitted middle
    ones get placeholder names (the IR needs a name for every output)."""
    hidden = 3
    w = RNG.standard_normal((1, 4 * hidden, 2)).astype(np.float32)
    r = RNG.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)
    m = model([helper.make_node("Split", ["x"], ["a", "b"], axis=1, name="split"),
               helper.make_node("LSTM", ["a", "w", "r"], ["", "y_h", ""], hidden_size=hidden, name="lstm"),
               helper.make_node("Relu", ["b"], ["rb"])],
              [vi("x", F, [5, 4, 2])], [vi("y_h", F, [1, 5, hidden]), vi("rb", F, [5, 2, 2])],
              [init("w", w), init("r", r)], opset=13)
    im = import_onnx(m)
    split, lstm, _ = im.graph.nodes
    assert split.attrs["_num_outputs"] == 2
    assert lstm.outputs == ["lstm/unused_output_0", "y_h"] and lstm.attrs["_num_outputs"] == 2
    x = RNG.standard_normal((5, 4, 2)).astype(np.float32)
    check_against_ort(m, {"x": x}, rtol=1e-4, atol=1e-5)


# -- optimisation passes ---------------------------------------------------------------------------


def check_against_ort(m, feeds, g=None, rtol=1e-5, atol=1e-6):
    expected = ort_run(m, feeds)
    if g is None:
        im = import_onnx(m)
        g = optimize(im.graph, im.shapes)
    actual = run_graph(g, [feeds[name] for name in g.inputs])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
    return g


def test_fold_constants_shape_chains_constantofshape_and_reshape():
    m = model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
         helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
         helper.make_node("Concat", ["d0u", "minus1"], ["shape2"], axis=0),
         helper.make_node("Reshape", ["x", "shape2"], ["flat"]),
         helper.make_node("ConstantOfShape", ["cs"], ["ones"],
                          value=numpy_helper.from_array(np.array([0.5], np.float32))),
         helper.make_node("Reshape", ["wraw", "wshape"], ["w"]),
         helper.make_node("Add", ["flat", "ones"], ["t"]),
         helper.make_node("Mul", ["t", "w"], ["y"])],
        [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 12])],
        [init("i0", np.int64(0)), init("ax", np.int64([0])), init("minus1", np.int64([-1])),
         init("cs", np.int64([2, 12])), init("wraw", np.arange(24, dtype=np.float32)),
         init("wshape", np.int64([2, 12]))])
    im = import_onnx(m)
    g = im.graph
    assert fold_constants(g, im.shapes) == 6
    assert ops(g) == ["Reshape", "Add", "Mul"]
    assert g.constants["s"].dtype == np.int64 and g.constants["shape2"].tolist() == [2, -1]
    assert g.constants["ones"].dtype == np.float32 and g.constants["ones"].shape == (2, 12)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    check_against_ort(m, {"x": x}, g)
    check_against_ort(m, {"x": x})


def test_shape_of_a_dynamic_tensor_is_not_folded():
    m = model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Shape", ["x"], ["t"], start=1)],
              [vi("x", F, ["N", 3])], [vi("s", TensorProto.INT64, [2]), vi("t", TensorProto.INT64, [1])])
    im = import_onnx(m)
    assert fold_constants(im.graph, im.shapes) == 0
    im = import_onnx(m, input_size_list=[[5, 3]])
    g = optimize(im.graph, im.shapes)
    # folded outputs are re-emitted by Identity nodes so that every output has a producer
    assert ops(g) == ["Identity", "Identity"]
    x = np.zeros((5, 3), np.float32)
    np.testing.assert_array_equal(run_graph(g, [x])[0], [5, 3])
    np.testing.assert_array_equal(run_graph(g, [x])[1], [3])


def test_fold_batchnorm_into_conv():
    m = conv_bn_model()
    im = import_onnx(m)
    g = im.graph
    assert fold_batchnorm(g) == 1
    assert ops(g) == ["Conv", "Relu"] and g.nodes[0].outputs == ["bn"]
    w = g.constants[g.nodes[0].inputs[1]]
    assert w.dtype == np.float32 and w.shape == (4, 3, 3, 3)
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    check_against_ort(m, {"x": x}, g, rtol=1e-4, atol=1e-5)
    g = check_against_ort(m, {"x": x}, rtol=1e-4, atol=1e-5)
    assert "BatchNormalization" not in ops(g)


def test_fold_batchnorm_without_conv_bias():
    m = conv_bn_model()
    conv = m.graph.node[0]
    del conv.input[2]
    im = import_onnx(m)
    assert fold_batchnorm(im.graph) == 1 and len(im.graph.nodes[0].inputs) == 3
    check_against_ort(m, {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}, im.graph, rtol=1e-4,
                      atol=1e-5)


def test_batchnorm_is_not_folded_when_the_conv_output_has_other_readers():
    m = conv_bn_model(extra_reader=True)
    im = import_onnx(m)
    assert fold_batchnorm(im.graph) == 0
    assert "BatchNormalization" in ops(im.graph)
    check_against_ort(m, {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_identity_and_dropout_removed_outputs_keep_their_names():
    m = model(
        [helper.make_node("Add", ["x", "x"], ["a"]),
         helper.make_node("Identity", ["a"], ["b"]),
         helper.make_node("Dropout", ["b"], ["c"]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Identity", ["r"], ["y"]),
         helper.make_node("Dropout", ["y", "ratio", "train"], ["z", "mask"]),
         helper.make_node("Identity", ["x"], ["x_out"])],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3]), vi("z", F, [2, 3]), vi("x_out", F, [2, 3])],
        [init("ratio", np.float32(0.5)), init("train", np.bool_(False))], opset=13)
    im = import_onnx(m)
    g = im.graph
    assert remove_identities(g) == 3
    # the graph output y is now produced by Relu; z cannot be renamed onto y
    # (its input is another graph output) so its Dropout stays, as does x -> x_out
    assert ops(g) == ["Add", "Relu", "Dropout", "Identity"]
    assert g.nodes[1].outputs == ["y"] and g.outputs == ["y", "z", "x_out"]
    check_against_ort(m, {"x": RNG.standard_normal((2, 3)).astype(np.float32)}, g)


def test_dropout_whose_mask_is_read_stays():
    m = model([helper.make_node("Dropout", ["x"], ["y", "mask"]),
               helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
               helper.make_node("Add", ["y", "m"], ["out"])],
              [vi("x", F, [3])], [vi("out", F, [3])], opset=12)
    g = import_onnx(m).graph
    assert remove_identities(g) == 0 and ops(g)[0] == "Dropout"


def test_activation_fusion():
    w = RNG.standard_normal((2, 3, 1, 1)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Relu", ["c"], ["y"])],
              [vi("x", F, [1, 3, 4, 4])], [vi("y", F, [1, 2, 4, 4])], [init("w", w)])
    # structure, with fusion declared supported
    g = import_onnx(m).graph
    assert fuse_activations(g, supported=("Relu",)) == 1
    assert ops(g) == ["Conv"] and g.nodes[0].attrs["_activation"] == "Relu" and g.nodes[0].outputs == ["y"]
    # never across a second reader or a graph output
    m2 = model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
               [vi("x", F, [1, 3, 4, 4])], [vi("y", F, [1, 2, 4, 4]), vi("c", F, [1, 2, 4, 4])], [init("w", w)])
    g2 = import_onnx(m2).graph
    assert fuse_activations(g2, supported=("Relu",)) == 0
    # the real pass fuses what the conv kernel supports
    assert "Relu" in conv_fusable_activations()
    g = import_onnx(m).graph
    assert fuse_activations(g) == 1
    assert ops(g) == ["Conv"] and g.nodes[0].attrs["_activation"] == "Relu"
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    check_against_ort(m, {"x": x}, g)
    # and bit for bit what the unfused graph computes
    unfused = import_onnx(m).graph
    np.testing.assert_array_equal(run_graph(g, [x])[0], run_graph(unfused, [x])[0])


def _conv_act_model(act_nodes, inits=(), opset=17, extra_outputs=()):
    """x -> Conv(3x3, pads 1, bias) -> c -> act_nodes -> y."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])
    return model([conv] + list(act_nodes), [vi("x", F, [1, 3, 6, 6])],
                 [vi("y", F, [1, 4, 6, 6])] + [vi(o, F, [1, 4, 6, 6]) for o in extra_outputs],
                 [init("w", w), init("b", b)] + list(inits), opset=opset)


@pytest.mark.parametrize("name, act_nodes, inits, opset, want", [
    ("relu6", [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
     [init("lo", np.float32(0)), init("hi", np.float32(6))], 17,
     {"_activation": "Clip", "_activation_min": 0.0, "_activation_max": 6.0}),
    ("clip-min-only", [helper.make_node("Clip", ["c", "lo"], ["y"])], [init("lo", np.float32(-0.25))], 13,
     {"_activation": "Clip", "_activation_min": -0.25}),
    ("clip-max-only", [helper.make_node("Clip", ["c", "", "hi"], ["y"])], [init("hi", np.float32(0.5))], 13,
     {"_activation": "Clip", "_activation_max": 0.5}),
    ("clip-attrs-opset6", [helper.make_node("Clip", ["c"], ["y"], min=-1.0, max=2.5)], [], 6,
     {"_activation": "Clip", "_activation_min": -1.0, "_activation_max": 2.5}),
    ("leaky", [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2)], [], 17,
     {"_activation": "LeakyRelu", "_activation_alpha": float(np.float32(0.2))}),
    ("leaky-default", [helper.make_node("LeakyRelu", ["c"], ["y"])], [], 17,
     {"_activation": "LeakyRelu", "_activation_alpha": float(np.float32(0.01))}),
])
def test_activation_fusion_clip_and_leaky(name, act_nodes, inits, opset, want):
    """Clip with constant bounds and LeakyRelu fuse into the Conv; the fused graph computes
    what onnxruntime computes, and exactly what the unfused graph computes."""
    m = _conv_act_model(act_nodes, inits, opset)
    g = import_onnx(m).graph
    assert fuse_activations(g) == 1
    assert ops(g) == ["Conv"] and g.nodes[0].outputs == ["y"]
    assert {k: v for k, v in g.nodes[0].attrs.items() if k.startswith("_activation")} == want
    x = (3 * RNG.standard_normal((1, 3, 6, 6))).astype(np.float32)
    # 27 products of up to ~10 each: a float32 sum's rounding is a few 1e-6 wherever terms
    # cancel, and the two runtimes add in different orders (seen: 2.9e-6 on a 0.106 output)
    check_against_ort(m, {"x": x}, g, atol=3e-5)
    np.testing.assert_array_equal(run_graph(g, [x])[0], run_graph(import_onnx(m).graph, [x])[0])
    # the full optimiser fuses too and drops the bounds' constants
    im = import_onnx(m)
    opt = optimize(im.graph, im.shapes)
    assert ops(opt) == ["Conv"] and not {"lo", "hi"} & set(opt.constants)


def test_activation_fusion_refusals():
    """No fusion through a runtime Clip bound, a nan bound, a second reader, a graph
    output, an activation the kernel does not support, or a non-Conv producer."""
    lo = vi("lo", F, [])
    m = _conv_act_model([helper.make_node("Clip", ["c", "lo"], ["y"])])
    m.graph.input.append(lo)  # the bound is a graph input: known only at run time
    g = import_onnx(m).graph
    assert fuse_activations(g) == 0 and ops(g) == ["Conv", "Clip"]
    m = _conv_act_model([helper.make_node("Clip", ["c", "lo"], ["y"])], [init("lo", np.float32(np.nan))])
    assert fuse_activations(import_onnx(m).graph) == 0
    m = _conv_act_model([helper.make_node("Relu", ["c"], ["y"]), helper.make_node("Neg", ["c"], ["n"])],
                        extra_outputs=["n"])
    assert fuse_activations(import_onnx(m).graph) == 0
    m = _conv_act_model([helper.make_node("Relu", ["c"], ["y"])], extra_outputs=["c"])
    assert fuse_activations(import_onnx(m).graph) == 0
    m = _conv_act_model([helper.make_node("Sigmoid", ["c"], ["y"])])
    assert fuse_activations(import_onnx(m).graph) == 0
    m = _conv_act_model([helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)])
    assert fuse_activations(import_onnx(m).graph, supported=("Relu",)) == 0
    m = _conv_act_model([helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Relu", ["r"], ["y"])])
    g = import_onnx(m).graph
    assert fuse_activations(g) == 1 and ops(g) == ["Conv", "Relu"]  # one activation per Conv


def test_dead_nodes_and_unused_constants_removed():
    m = model([helper.make_node("Relu", ["x"], ["y"]),
               helper.make_node("Mul", ["x", "k"], ["dead1"]),
               helper.make_node("Sigmoid", ["dead1"], ["dead2"])],
              [vi("x", F, [2])], [vi("y", F, [2])], [init("k", np.float32([2, 3]))])
    im = import_onnx(m, outputs=["y", "dead2"])
    g = im.graph
    g.outputs = ["y"]
    assert remove_dead_nodes(g) == 2
    assert ops(g) == ["Relu"] and g.constants == {}
    check_against_ort(m, {"x": np.float32([-1, 2])}, g)


def test_finalize_outputs_gives_constant_outputs_a_producer():
    g = Graph([], ["x"], ["k"], {"k": np.int64([1, 2])})
    assert finalize_outputs(g) == 1
    g.validate()
    assert ops(g) == ["Identity"] and g.nodes[0].outputs == ["k"] and "k" not in g.constants
    np.testing.assert_array_equal(run_graph(g, [np.zeros(1, np.float32)])[0], [1, 2])


def test_optimize_does_not_modify_its_input():
    im = import_onnx(conv_bn_model())
    before = [(n.op, list(n.inputs), list(n.outputs)) for n in im.graph.nodes]
    optimize(im.graph, im.shapes)
    assert [(n.op, list(n.inputs), list(n.outputs)) for n in im.graph.nodes] == before


# -- per-channel affine chains into Conv / ConvTranspose, bias Add into Gemm -------------------


def _conv_chain_model(chain, inits=(), *, op="Conv", bias=True, group=1, x_shape=(1, 4, 6, 6),
                      extra_outputs=(), extra_inputs=(), opset=17):
    """x -> Conv / ConvTranspose (3x3, pads 1, 4 output channels for Conv, 6 for
    ConvTranspose) -> c -> chain -> y."""
    c_in = x_shape[1]
    k = (3,) * (len(x_shape) - 2)
    if op == "Conv":
        w = RNG.standard_normal((4, c_in // group) + k).astype(np.float32)
        m = 4
    else:
        w = RNG.standard_normal((c_in, 6 // group) + k).astype(np.float32)
        m = 6
    b = RNG.standard_normal(m).astype(np.float32)
    conv = helper.make_node(op, ["x", "w"] + (["b"] if bias else []), ["c"], name="conv",
                            pads=[1] * (2 * len(k)), group=group)
    return model([conv] + list(chain), [vi("x", F, list(x_shape))] + list(extra_inputs),
                 [vi("y", F, None)] + [vi(o, F, None) for o in extra_outputs],
                 [init("w", w)] + ([init("b", b)] if bias else []) + list(inits), opset=opset)


def _chan(values, shape):
    return np.asarray(values, np.float32).reshape(shape)


def _mul_add_bn(m=4):
    """Inits for ``k`` (per-channel scale), ``t`` (per-channel shift) and a BN's parameters."""
    return [init("k", _chan(RNG.uniform(0.5, 2, m) * RNG.choice([-1, 1], m), (m, 1, 1))),
            init("t", _chan(RNG.standard_normal(m), (1, m, 1, 1))),
            init("s", RNG.uniform(0.5, 2, m).astype(np.float32)),
            init("beta", RNG.standard_normal(m).astype(np.float32)),
            init("mean", RNG.standard_normal(m).astype(np.float32)),
            init("var", RNG.uniform(0.1, 2, m).astype(np.float32))]


_BN = ["s", "beta", "mean", "var"]


@pytest.mark.parametrize("name, chain, inits, kwargs, removed", [
    ("mul", [helper.make_node("Mul", ["c", "k"], ["y"])], None, {}, 1),
    ("add-const-first", [helper.make_node("Add", ["t", "c"], ["y"])], None, {}, 1),
    ("mul-add", [helper.make_node("Mul", ["c", "k"], ["u"]), helper.make_node("Add", ["u", "t"], ["y"])],
     None, {}, 2),
    ("mul-add-no-bias", [helper.make_node("Mul", ["k", "c"], ["u"]), helper.make_node("Add", ["u", "t"], ["y"])],
     None, {"bias": False}, 2),
    ("scalar-mul-sub", [helper.make_node("Mul", ["c", "two"], ["u"]), helper.make_node("Sub", ["u", "t"], ["y"])],
     [init("two", np.float32(2.5)), init("t", _chan(RNG.standard_normal(4), (4, 1, 1)))], {}, 2),
    ("const-minus-conv", [helper.make_node("Sub", ["t", "c"], ["y"])], None, {}, 1),
    ("div", [helper.make_node("Div", ["c", "k"], ["y"])], None, {}, 1),
    ("add-only-no-bias", [helper.make_node("Add", ["c", "t"], ["y"])], None, {"bias": False}, 1),
    ("mul-bn-add", [helper.make_node("Mul", ["c", "k"], ["u"]),
                    helper.make_node("BatchNormalization", ["u"] + _BN, ["v"], epsilon=1e-3),
                    helper.make_node("Add", ["v", "t"], ["y"])], None, {}, 3),
    ("channel-1-shape", [helper.make_node("Mul", ["c", "one"], ["y"])],
     [init("one", np.full((1, 1, 1), 1.5, np.float32))], {}, 1),
    ("grouped", [helper.make_node("Mul", ["c", "k"], ["u"]), helper.make_node("Add", ["u", "t"], ["y"])],
     None, {"group": 2}, 2),
    ("conv1d", [helper.make_node("Mul", ["c", "k1"], ["u"]), helper.make_node("Add", ["u", "t1"], ["y"])],
     [init("k1", _chan(RNG.uniform(-2, 2, 4), (4, 1))), init("t1", _chan(RNG.standard_normal(4), (1, 4, 1)))],
     {"x_shape": (2, 4, 7)}, 2),
    ("convtranspose-grouped", [helper.make_node("Mul", ["c", "k6"], ["u"]),
                               helper.make_node("BatchNormalization", ["u"] + _BN, ["v"]),
                               helper.make_node("Add", ["v", "t6"], ["y"])],
     "transpose", {"op": "ConvTranspose", "group": 2}, 3),
    ("convtranspose-no-bias", [helper.make_node("Div", ["c", "k6"], ["y"])], "transpose",
     {"op": "ConvTranspose", "bias": False}, 1),
])
def test_fold_conv_affine_chains(name, chain, inits, kwargs, removed):
    """Each per-channel chain folds into the conv; the result matches onnxruntime and the
    unfolded graph."""
    if inits is None:
        inits = _mul_add_bn()
    elif inits == "transpose":
        inits = _mul_add_bn(6) + [init("k6", _chan(RNG.uniform(0.5, 2, 6), (6, 1, 1))),
                                  init("t6", _chan(RNG.standard_normal(6), (6, 1, 1)))]
    m = _conv_chain_model(chain, inits, **kwargs)
    g = import_onnx(m).graph
    assert fold_conv_affine(g) == removed
    op = kwargs.get("op", "Conv")
    assert ops(g) == [op] and g.nodes[0].outputs == ["y"] and len(g.nodes[0].inputs) == 3
    w_name, b_name = g.nodes[0].inputs[1:]
    assert g.constants[b_name].dtype == np.float32 and g.constants[b_name].shape == (4 if op == "Conv" else 6,)
    assert g.constants[w_name].dtype == np.float32 and g.constants[w_name].shape == tuple(m.graph.initializer[0].dims)
    if name.startswith("add"):
        assert w_name == "w"  # a shift only: the weights are not copied
    x = RNG.standard_normal(kwargs.get("x_shape", (1, 4, 6, 6))).astype(np.float32)
    check_against_ort(m, {"x": x}, g, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run_graph(g, [x])[0], run_graph(import_onnx(m).graph, [x])[0], rtol=1e-4, atol=1e-5)
    im = import_onnx(m)
    g = check_against_ort(m, {"x": x}, optimize(im.graph, im.shapes), rtol=1e-4, atol=1e-5)
    assert ops(g) == [op]


def test_conv_batchnorm_mul_add_relu_becomes_one_conv():
    """The inception_v2 shape: Conv -> BN -> Mul -> Add -> Relu is one Conv with a fused Relu."""
    chain = [helper.make_node("BatchNormalization", ["c"] + _BN, ["v"], epsilon=1e-5),
             helper.make_node("Mul", ["v", "k"], ["u"]), helper.make_node("Add", ["u", "t"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    m = _conv_chain_model(chain, _mul_add_bn(), bias=False)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert ops(g) == ["Conv"] and g.nodes[0].attrs["_activation"] == "Relu" and g.nodes[0].outputs == ["y"]
    assert set(g.constants) == {g.nodes[0].inputs[1], g.nodes[0].inputs[2]}  # the old ones are dead
    check_against_ort(m, {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}, g, rtol=1e-4, atol=1e-5)
    # step by step: the BN pass takes the BN, the affine pass the Mul and Add
    g = import_onnx(m).graph
    assert fold_batchnorm(g) == 1 and fold_conv_affine(g) == 2 and fuse_activations(g) == 1
    assert ops(g) == ["Conv"]


@pytest.mark.parametrize("name, chain, inits, kwargs", [
    ("runtime-operand", [helper.make_node("Mul", ["c", "k_in"], ["y"])], [],
     {"extra_inputs": [vi("k_in", F, [4, 1, 1])]}),
    ("spatial-operand", [helper.make_node("Mul", ["c", "kw"], ["y"])],
     [init("kw", RNG.standard_normal((1, 1, 1, 6)).astype(np.float32))], {}),
    # (4,) right-aligns with the width axis (6 wide here would not broadcast; 4 wide does)
    ("vector-on-width", [helper.make_node("Add", ["c", "kv"], ["y"])],
     [init("kv", RNG.standard_normal(4).astype(np.float32))], {"x_shape": (1, 4, 4, 4)}),
    ("per-batch", [helper.make_node("Mul", ["c", "kb"], ["y"])],
     [init("kb", RNG.standard_normal((2, 4, 1, 1)).astype(np.float32))], {"x_shape": (2, 4, 6, 6)}),
    ("rank-expanding", [helper.make_node("Add", ["c", "k5"], ["y"])],
     [init("k5", RNG.standard_normal((1, 1, 4, 1, 1)).astype(np.float32))], {}),
    ("const-over-conv", [helper.make_node("Div", ["k", "c"], ["y"])],
     [init("k", _chan(RNG.uniform(1, 2, 4), (4, 1, 1)))], {}),
    ("div-by-zero", [helper.make_node("Div", ["c", "k"], ["y"])], [init("k", _chan([1, 0, 2, 3], (4, 1, 1)))], {}),
    ("nan-operand", [helper.make_node("Add", ["c", "k"], ["y"])], [init("k", _chan([1, np.nan, 2, 3], (4, 1, 1)))],
     {}),
    ("second-reader", [helper.make_node("Mul", ["c", "k"], ["y"]), helper.make_node("Neg", ["c"], ["n"])],
     [init("k", _chan([1, 2, 3, 4], (4, 1, 1)))], {"extra_outputs": ["n"]}),
    ("conv-is-graph-output", [helper.make_node("Mul", ["c", "k"], ["y"])],
     [init("k", _chan([1, 2, 3, 4], (4, 1, 1)))], {"extra_outputs": ["c"]}),
    ("training-bn", [helper.make_node("BatchNormalization", ["c"] + _BN, ["y", "rm", "rv"], training_mode=1)],
     _mul_add_bn()[2:], {"extra_outputs": ["rm", "rv"]}),
])
def test_fold_conv_affine_refusals(name, chain, inits, kwargs):
    """Nothing folds through a runtime operand, an operand that is not per-channel, a
    non-affine or non-finite op, a second reader or a graph output; the full optimiser
    still matches onnxruntime."""
    m = _conv_chain_model(chain, inits, **kwargs)
    g = import_onnx(m).graph
    assert fold_conv_affine(g) == 0
    assert ops(g) == ["Conv"] + [n.op_type for n in chain]
    x_shape = kwargs.get("x_shape", (1, 4, 6, 6))
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    if name == "runtime-operand":
        feeds["k_in"] = RNG.standard_normal((4, 1, 1)).astype(np.float32)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert len(g.nodes) == 1 + len(chain)
    if name == "training-bn":
        return  # the runtime refuses training-mode BatchNormalization
    inputs = [feeds[n] for n in g.inputs]
    for a, e in zip(run_graph(g, inputs), run_graph(import_onnx(m).graph, inputs)):
        np.testing.assert_array_equal(a, e)
    if name != "const-over-conv":  # k / c amplifies the conv's rounding wherever c is near 0
        check_against_ort(m, feeds, g, rtol=1e-4, atol=1e-5)


def test_fold_conv_affine_stops_where_the_chain_branches():
    """A chain folds up to a tensor that is a graph output or read twice; the rest stays."""
    inits = _mul_add_bn()
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    # u (the Mul's output) is a graph output: the Mul folds, the Add stays and reads the Conv
    m = _conv_chain_model([helper.make_node("Mul", ["c", "k"], ["u"]), helper.make_node("Add", ["u", "t"], ["y"])],
                          inits, extra_outputs=["u"])
    g = import_onnx(m).graph
    assert fold_conv_affine(g) == 1 and ops(g) == ["Conv", "Add"] and g.nodes[0].outputs == ["u"]
    check_against_ort(m, {"x": x}, g, rtol=1e-4, atol=1e-5)
    # u read twice: same
    m = _conv_chain_model([helper.make_node("Mul", ["c", "k"], ["u"]), helper.make_node("Add", ["u", "t"], ["y"]),
                           helper.make_node("Sigmoid", ["u"], ["z"])], inits, extra_outputs=["z"])
    g = import_onnx(m).graph
    assert fold_conv_affine(g) == 1 and ops(g) == ["Conv", "Add", "Sigmoid"]
    check_against_ort(m, {"x": x}, g, rtol=1e-4, atol=1e-5)
    # a non-per-channel op in the middle ends the chain there
    m = _conv_chain_model([helper.make_node("Mul", ["c", "k"], ["u"]), helper.make_node("Add", ["u", "kw"], ["v"]),
                           helper.make_node("Add", ["v", "t"], ["y"])],
                          inits + [init("kw", RNG.standard_normal((1, 1, 1, 6)).astype(np.float32))])
    g = import_onnx(m).graph
    assert fold_conv_affine(g) == 1 and ops(g) == ["Conv", "Add", "Add"]
    check_against_ort(m, {"x": x}, g, rtol=1e-4, atol=1e-5)


def test_fold_conv_affine_refuses_integer_fused_overflowing_and_runtime_weights():
    """Integer operands, a Conv that already applies an activation, a scale that overflows
    float32 and weights known only at run time are left alone."""
    w = RNG.standard_normal((4, 3, 1, 1)).astype(np.float32)

    def graph(chain, consts, conv_attrs=None, w_const=True):
        nodes = [Node("Conv", "conv", ["x", "w"], ["c"], dict(conv_attrs or {}))] + chain
        return Graph(nodes, ["x"] if w_const else ["x", "w"], ["y"], dict(consts, **({"w": w} if w_const else {})))

    g = graph([Node("Mul", "mul", ["c", "k"], ["y"])], {"k": np.int64([1, 2, 3, 4]).reshape(4, 1, 1)})
    assert fold_conv_affine(g) == 0
    g = graph([Node("Mul", "mul", ["c", "k"], ["y"])], {"k": np.float32([1, 2, 3, 4]).reshape(4, 1, 1)},
              {"_activation": "Relu"})
    assert fold_conv_affine(g) == 0
    big = np.full((4, 1, 1), 1e30, np.float32)
    g = graph([Node("Mul", "m1", ["c", "k"], ["u"]), Node("Mul", "m2", ["u", "k"], ["y"])], {"k": big})
    assert fold_conv_affine(g) == 0 and ops(g) == ["Conv", "Mul", "Mul"]
    g = graph([Node("Mul", "mul", ["c", "k"], ["y"])], {"k": np.float32([1, 2, 3, 4]).reshape(4, 1, 1)},
              w_const=False)
    assert fold_conv_affine(g) == 0
    # a fold leaves the input constants alone (the weights may be shared)
    k = np.float32([1, 2, 3, 4]).reshape(4, 1, 1)
    g = graph([Node("Mul", "mul", ["c", "k"], ["y"])], {"k": k})
    assert fold_conv_affine(g) == 1
    np.testing.assert_array_equal(g.constants["w"], w)
    np.testing.assert_array_equal(g.constants[g.nodes[0].inputs[1]], w * k.reshape(4, 1, 1, 1))
    g.validate()


def _dense_model(first, chain, inits, a_shape=(3, 5), out_shape=(3, 4), extra_outputs=(), elem=F):
    return model([first] + list(chain), [vi("a", elem, list(a_shape))],
                 [vi("y", elem, list(out_shape) if out_shape else None)] + [vi(o, elem, None) for o in extra_outputs],
                 list(inits))


@pytest.mark.parametrize("name, first, chain, inits, a_shape", [
    ("gemm-add", helper.make_node("Gemm", ["a", "b"], ["p"], alpha=0.5, transB=1),
     [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((4, 5)).astype(np.float32)), init("k", RNG.standard_normal(4).astype(np.float32))],
     (3, 5)),
    ("gemm-add-const-first-beta-ignored", helper.make_node("Gemm", ["a", "b"], ["p"], beta=0.25),
     [helper.make_node("Add", ["k", "p"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)),
      init("k", RNG.standard_normal((1, 4)).astype(np.float32))], (3, 5)),
    ("gemm-sub-full-c", helper.make_node("Gemm", ["at", "b"], ["p"], transA=1),
     [helper.make_node("Sub", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)),
      init("k", RNG.standard_normal((3, 4)).astype(np.float32))], (5, 3)),
    ("matmul-add", helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", RNG.standard_normal(4).astype(np.float32))],
     (3, 5)),
    ("matmul-add-scalar", helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["k", "p"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.float32(0.75))], (3, 5)),
    ("matmul-add-column", helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)),
      init("k", RNG.standard_normal((3, 1)).astype(np.float32))], (3, 5)),
])
def test_fold_dense_bias(name, first, chain, inits, a_shape):
    """Gemm without C / MatMul by a constant matrix, plus a constant bias, is one Gemm that
    computes bit for bit what the two nodes did."""
    if name == "gemm-sub-full-c":
        first = helper.make_node("Transpose", ["a"], ["at"])
        chain = [helper.make_node("Gemm", ["at", "b"], ["p"], transA=1), helper.make_node("Sub", ["p", "k"], ["y"])]
    m = _dense_model(first, chain, inits, a_shape=(3, 5) if name == "gemm-sub-full-c" else a_shape)
    im = import_onnx(m)
    g = im.graph
    assert fold_dense_bias(g, im.shapes) == 1
    gemm = g.nodes[-1]
    assert gemm.op == "Gemm" and gemm.outputs == ["y"] and len(gemm.inputs) == 3 and len(g.nodes) == len(chain)
    assert gemm.attrs.get("beta", 1.0) == 1.0 and g.constants[gemm.inputs[2]].dtype == np.float32
    a = RNG.standard_normal((3, 5)).astype(np.float32)
    check_against_ort(m, {"a": a}, g)
    np.testing.assert_array_equal(run_graph(g, [a])[0], run_graph(import_onnx(m).graph, [a])[0])
    # without shapes: a MatMul's input may not be 2-D, and a bias with rows needs M
    assert fold_dense_bias(import_onnx(m).graph) == int(name in ("gemm-add", "gemm-add-const-first-beta-ignored"))
    im = import_onnx(m)
    g = check_against_ort(m, {"a": a}, optimize(im.graph, im.shapes))
    assert ops(g)[-1] == "Gemm" and "Add" not in ops(g) and "Sub" not in ops(g)


@pytest.mark.parametrize("name, first, chain, inits, a_shape, out_shape", [
    ("gemm-has-c", helper.make_node("Gemm", ["a", "b", "c0"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("c0", np.float32([1, 2, 3, 4])),
      init("k", np.float32([1, 2, 3, 4]))], (3, 5), (3, 4)),
    ("matmul-3d-dynamic", helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.float32([1, 2, 3, 4]))],
     ("N", 3, 5), ("N", 3, 4)),
    ("matmul-3d-bias-per-row", helper.make_node("MatMul", ["a", "b"], ["p"]),
     [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.ones((3, 1), np.float32))],
     (2, 3, 5), (2, 3, 4)),
    ("matmul-3d-weight", helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((1, 5, 4)).astype(np.float32)), init("k", np.float32([1, 2, 3, 4]))],
     (3, 5), (1, 3, 4)),
    ("bias-widens-the-output", helper.make_node("MatMul", ["a", "b"], ["p"]),
     [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 1)).astype(np.float32)), init("k", np.float32([1, 2, 3]))], (3, 5), (3, 3)),
    ("bias-rank-3", helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.ones((1, 1, 4), np.float32))],
     (3, 5), (1, 3, 4)),
    ("bias-rows-of-unknown-m", helper.make_node("MatMul", ["a", "b"], ["p"]),
     [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.ones((3, 4), np.float32))],
     ("M", 5), ("M", 4)),
    ("const-minus-gemm", helper.make_node("Gemm", ["a", "b"], ["p"]), [helper.make_node("Sub", ["k", "p"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.float32([1, 2, 3, 4]))], (3, 5), (3, 4)),
    ("runtime-bias", helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "p2"], ["y"]),
                                                                     helper.make_node("Neg", ["a"], ["na"]),
                                                                     helper.make_node("MatMul", ["na", "b"], ["p2"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32))], (3, 5), (3, 4)),
    ("second-reader", helper.make_node("Gemm", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"]),
                                                                    helper.make_node("Neg", ["p"], ["n"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.float32([1, 2, 3, 4]))], (3, 5), (3, 4)),
    ("product-is-graph-output", helper.make_node("MatMul", ["a", "b"], ["p"]),
     [helper.make_node("Add", ["p", "k"], ["y"])],
     [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", np.float32([1, 2, 3, 4]))], (3, 5), (3, 4)),
])
def test_fold_dense_bias_refusals(name, first, chain, inits, a_shape, out_shape):
    if name == "runtime-bias":  # topological order: p2 before the Add
        chain = chain[1:] + chain[:1]
    extra = {"second-reader": ["n"], "product-is-graph-output": ["p"]}.get(name, [])
    m = _dense_model(first, chain, inits, a_shape, out_shape, extra_outputs=extra)
    im = import_onnx(m)
    g = im.graph
    before = ops(g)
    assert fold_dense_bias(g, im.shapes) == 0 and ops(g) == before
    a = RNG.standard_normal((2, 3, 5) if name in ("matmul-3d-dynamic", "matmul-3d-bias-per-row") else (3, 5)).astype(np.float32)
    im = import_onnx(m)
    check_against_ort(m, {"a": a}, optimize(im.graph, im.shapes))


@pytest.mark.parametrize("activation", [None, "Relu", "Gelu"])
def test_a_dense_layer_on_tokens_is_a_gemm_on_their_rows(activation):
    """``Add(MatMul(a, W), b)`` on a (2, 3, 5) input is one Gemm between two Reshapes (the
    vendor's one 1x1 conv: its int8 form rounds once), computing the same values; an activation
    that alone reads the sum moves before the Reshape back, next to its producer."""
    chain = [helper.make_node("Add", ["p", "k"], ["s" if activation else "y"])]
    if activation:
        chain.append(helper.make_node(activation, ["s"], ["y"]))
    inits = [init("b", RNG.standard_normal((5, 4)).astype(np.float32)), init("k", RNG.standard_normal((1, 1, 4)).astype(np.float32))]
    m = _dense_model(helper.make_node("MatMul", ["a", "b"], ["p"]), chain, inits, (2, 3, 5), (2, 3, 4))
    if activation == "Gelu":
        m.opset_import[0].version = 20
    im = import_onnx(m)
    g = im.graph
    assert fold_dense_bias(g, im.shapes) == 1
    assert ops(g) == ["Reshape", "Gemm"] + ([activation] if activation else []) + ["Reshape"]
    assert [list(g.constants[n.inputs[1]]) for n in g.nodes if n.op == "Reshape"] == [[6, 5], [2, 3, 4]]
    assert g.nodes[-1].outputs == ["y"] and g.constants[g.nodes[1].inputs[2]].shape == (4,)
    a = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    np.testing.assert_allclose(run_graph(g, [a])[0], run_graph(import_onnx(m).graph, [a])[0], rtol=1e-6, atol=1e-6)
    if activation != "Gelu":
        check_against_ort(m, {"a": a}, g)


def test_dense_layers_on_one_input_share_its_rows():
    """q, k and v of one tensor: one Reshape to rows feeds the three Gemms."""
    nodes = []
    inits = []
    for n in "qkv":
        nodes += [helper.make_node("MatMul", ["a", f"w{n}"], [f"m{n}"]), helper.make_node("Add", [f"m{n}", f"b{n}"], [n])]
        inits += [init(f"w{n}", RNG.standard_normal((5, 4)).astype(np.float32)), init(f"b{n}", RNG.standard_normal(4).astype(np.float32))]
    nodes.append(helper.make_node("Sum", ["q", "k", "v"], ["y"]))
    m = _dense_model(nodes[0], nodes[1:], inits, (2, 3, 5), (2, 3, 4))
    im = import_onnx(m)
    g = im.graph
    assert fold_dense_bias(g, im.shapes) == 3
    assert ops(g).count("Reshape") == 4 and ops(g).count("Gemm") == 3
    check_against_ort(m, {"a": RNG.standard_normal((2, 3, 5)).astype(np.float32)}, g)


def _swish_model(form, opset=11, extra_reader=None, **consts):
    """A conv then a decomposed HardSwish of its output: ``paddle`` (``Add 3, Clip 0..6, Mul x,
    Div 6``; ``paddle-mul``: the last step ``Mul 1/6``, the Add's constant first) or ``torch``
    (``Mul(x, HardSigmoid(x, 1/6, 0.5))``)."""
    k = {"three": 3.0, "lo": 0.0, "hi": 6.0, "six": 6.0, "alpha": 1 / 6, **consts}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    inits = [init("w", (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32))]
    if form.startswith("paddle"):
        add_in = ["three", "c"] if form == "paddle-mul" else ["c", "three"]
        nodes += [helper.make_node("Add", add_in, ["a"]), helper.make_node("Clip", ["a", "lo", "hi"], ["g"]),
                  helper.make_node("Mul", ["c", "g"], ["m"])]
        if form == "paddle-mul":
            nodes.append(helper.make_node("Mul", ["m", "sixth"], ["y"]))
            inits.append(init("sixth", np.float32(1 / k["six"])))
        else:
            nodes.append(helper.make_node("Div", ["m", "six"], ["y"]))
            inits.append(init("six", np.float32(k["six"])))
        inits += [init(n, np.float32(k[n])) for n in ("three", "lo", "hi")]
    else:
        nodes += [helper.make_node("HardSigmoid", ["c"], ["g"], alpha=k["alpha"], beta=0.5),
                  helper.make_node("Mul", ["g", "c"], ["y"])]
    outputs = [vi("y", F, None)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", [extra_reader], ["n"]))
        outputs.append(vi("n", F, None))
    return model(nodes, [vi("x", F, [1, 3, 6, 6])], outputs, inits, opset=opset, ir=7)


@pytest.mark.parametrize("form", ["paddle", "paddle-mul", "torch"])
def test_fuse_hard_swish_makes_one_node_of_the_exported_forms(form):
    m = _swish_model(form)
    g = import_onnx(m).graph
    assert fuse_hard_swish(g) == 1 and ops(g) == ["Conv", "HardSwish"]
    assert g.nodes[1].inputs == ["c"] and g.nodes[1].outputs == ["y"]
    x = RNG.uniform(-2, 2, (1, 3, 6, 6)).astype(np.float32)
    im = import_onnx(m)
    assert "HardSwish" in ops(check_against_ort(m, {"x": x}, optimize(im.graph, im.shapes), atol=1e-5))


@pytest.mark.parametrize("form, change", [
    ("paddle", {"extra_reader": "a"}), ("paddle", {"extra_reader": "g"}), ("paddle", {"extra_reader": "m"}),
    ("paddle", {"three": 2.5}), ("paddle", {"hi": 5.0}), ("paddle", {"six": 3.0}), ("paddle-mul", {"six": 5.0}),
    ("torch", {"alpha": 0.2}), ("torch", {"extra_reader": "g"}),
])
def test_fuse_hard_swish_leaves_other_graphs(form, change):
    m = _swish_model(form, **change)
    g = import_onnx(m).graph
    before = ops(g)
    assert fuse_hard_swish(g) == 0 and ops(g) == before
    x = RNG.uniform(-4, 4, (1, 3, 6, 6)).astype(np.float32)
    im = import_onnx(m)
    check_against_ort(m, {"x": x}, optimize(im.graph, im.shapes), atol=1e-5)


#: The stages RKNN-Toolkit2 2.5.0 compiled GlobalAveragePools of these sizes into (its rk3588 int8
#: and float16 files, read back with the vendor lowering): (kernel, strides, pads) per stage.
VENDOR_POOL_STAGES = {
    (8, 8): [([7, 7], [7, 7], [3, 3, 3, 3]), ([2, 2], [1, 1], [0, 0, 0, 0])],
    (13, 13): [([7, 7], [7, 7], [0, 0, 1, 1]), ([2, 2], [1, 1], [0, 0, 0, 0])],
    (14, 14): [([7, 7], [7, 7], [0, 0, 0, 0]), ([2, 2], [1, 1], [0, 0, 0, 0])],
    (16, 16): [([7, 7], [7, 7], [2, 2, 3, 3]), ([3, 3], [1, 1], [0, 0, 0, 0])],
    (20, 7): [([7, 7], [7, 1], [0, 0, 1, 0]), ([3, 1], [1, 1], [0, 0, 0, 0])],
    (7, 20): [([7, 7], [1, 7], [0, 0, 0, 1]), ([1, 3], [1, 1], [0, 0, 0, 0])],
    (30, 30): [([7, 7], [7, 7], [2, 2, 3, 3]), ([5, 5], [1, 1], [0, 0, 0, 0])],
    (49, 49): [([7, 7], [7, 7], [0, 0, 0, 0]), ([7, 7], [1, 1], [0, 0, 0, 0])],
    (50, 50): [([7, 7], [7, 7], [3, 3, 3, 3]), ([7, 7], [7, 7], [3, 3, 3, 3]), ([2, 2], [1, 1], [0, 0, 0, 0])],
    (12, 96): [([7, 7], [7, 7], [1, 1, 1, 1]), ([2, 7], [1, 7], [0, 0, 0, 0]), ([1, 2], [1, 1], [0, 0, 0, 0])],
}


@pytest.mark.parametrize("size", sorted(VENDOR_POOL_STAGES))
def test_global_pool_stages_are_the_vendors(size):
    assert [tuple(stage) for stage in global_pool_stages(*size)] == [tuple(s) for s in VENDOR_POOL_STAGES[size]]


@pytest.mark.parametrize("size", [(13, 13), (12, 96), (50, 50), (7, 20)])
def test_split_global_average_pool_computes_the_mean_with_the_vendors_names(size):
    h, w = size
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")],
              [vi("x", F, [1, 5, h, w])], [vi("y", F, None)])
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    stages = VENDOR_POOL_STAGES[size]
    convs = [n for n in g.nodes if n.op == "Conv"]
    assert "GlobalAveragePool" not in ops(g) and len(convs) == len(stages)
    assert [n.name for n in convs] == [f"gap_2conv{k}" for k in range(len(stages))]
    assert [n.outputs[0] for n in convs] == [f"gap_2conv{k}" for k in range(len(stages) - 1)] + ["y"]
    factor = (1 / (h * w)) ** (1 / len(stages))
    for conv, (kernel, strides, pads) in zip(convs, stages):
        assert conv.attrs["kernel_shape"] == kernel and conv.attrs["strides"] == strides and conv.attrs["pads"] == pads
        assert conv.attrs["group"] == 5 and np.allclose(g.constants[conv.inputs[1]], factor, rtol=1e-7)
    x = RNG.uniform(-1, 1, (1, 5, h, w)).astype(np.float32)
    check_against_ort(m, {"x": x}, g, rtol=1e-5, atol=1e-6)


#: the most real elements one window of each stage covers, per pool size (from the stages above)
STAGE_TAPS = {(8, 8): [16, 4], (12, 12): [36, 4], (20, 20): [49, 9], (32, 32): [49, 25], (12, 96): [42, 14, 2]}


@pytest.mark.parametrize("size", sorted(STAGE_TAPS))
def test_each_pool_stage_records_its_most_real_taps(size):
    """``_pool_stage_taps`` (the gain of a stage's grid in a pre-quantized build) counts the
    unpadded elements of the fullest window: 8 x 8's first stage, 7 x 7 / 7 with 3 pixels of
    padding, covers 4 x 4 of them."""
    h, w = size
    m = model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], [vi("x", F, [1, 2, h, w])],
              [vi("y", F, None)])
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert [n.attrs["_pool_stage_taps"] for n in g.nodes if n.op == "Conv"] == STAGE_TAPS[size]


def test_int8_build_quantizes_each_stage_of_a_split_pool(tmp_path):
    """The vendor's int8 files put an int8 grid on each stage's output, with a calibrated range
    (its hybrid cfg lists ``<pool>_2conv0`` ...): so does the build."""
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")],
              [vi("x", F, [1, 3, 13, 13])], [vi("y", F, None)])
    np.save(tmp_path / "x.npy", RNG.uniform(-1, 1, (1, 3, 13, 13)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("x.npy\n")
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(m) == 0 and rknn.build(do_quantization=True, dataset=str(tmp_path / "dataset.txt")) == 0
    graph = load_model(rknn._model_bytes).model.graph
    assert {"gap_2conv0", "y"} <= set(graph.quant) and graph.quant["gap_2conv0"].dtype == "int8"
    assert [n.op for n in graph.nodes if n.op == "Conv"] == ["Conv", "Conv"]


@pytest.mark.parametrize("float_dtype, quantize, split", [("float16", False, True), ("float32", False, False),
                                                         ("float32", True, True)])
def test_only_builds_that_round_split_a_wide_pool(tmp_path, float_dtype, quantize, split):
    """The stages round as the vendor's only where values are rounded (float16 storage, int8
    grids); a float32 build without quantization keeps the exact, one-pass pool, and
    ``accuracy_analysis`` compares it with a float graph optimised the same way."""
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")],
              [vi("x", F, [1, 3, 13, 13])], [vi("y", F, None)])
    np.save(tmp_path / "x.npy", RNG.uniform(-1, 1, (1, 3, 13, 13)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("x.npy\n")
    rknn = RKNN()
    rknn.config(target_platform="rk3588", float_dtype=float_dtype)
    assert rknn.load_onnx(m) == 0
    assert rknn.build(do_quantization=quantize, dataset=str(tmp_path / "dataset.txt") if quantize else None) == 0
    graph = load_model(rknn._model_bytes).model.graph
    assert ("GlobalAveragePool" not in [n.op for n in graph.nodes]) == split
    im = import_onnx(m)
    expected = optimize(im.graph, im.shapes, split_pools=split)
    assert [n.op for n in rknn._float_reference(float_dtype, quantize).nodes] == [n.op for n in expected.nodes]
    assert rknn.accuracy_analysis(inputs=[str(tmp_path / "x.npy")], output_dir=str(tmp_path / "snap")) == 0
    rknn.release()


@pytest.mark.parametrize("size, keepdims, opset, axes", [
    ((13, 13), 1, 13, [2, 3]), ((13, 13), 0, 13, [-1, -2]), ((12, 96), 1, 18, [2, 3]), ((7, 7), 0, 18, [3, 2]),
])
def test_spatial_mean_is_the_vendors_pool(size, keepdims, opset, axes):
    """RKNN-Toolkit2 compiles ``ReduceMean(r, axes=[2, 3])`` as a pool named ``r_gavg`` (split into
    ``r_gavg_2conv<k>`` stages), and ``keepdims=0`` as that pool then ``Reshape`` ``r_gavg_rs``
    (read from its rk3588 int8 files of 13 x 13 and 12 x 96 means)."""
    h, w = size
    mean = (helper.make_node("ReduceMean", ["r"], ["y"], axes=axes, keepdims=keepdims) if opset < 18 else
            helper.make_node("ReduceMean", ["r", "axes"], ["y"], keepdims=keepdims))
    inits = [init("axes", np.int64(axes))] if opset >= 18 else []
    m = model([helper.make_node("Relu", ["x"], ["r"]), mean], [vi("x", F, [1, 4, h, w])], [vi("y", F, None)],
              inits, opset=opset)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    stages = len(global_pool_stages(h, w)) if max(h, w) > 7 else 0
    names = [n.name for n in g.nodes[1:]]
    expect = [f"r_gavg_2conv{k}" for k in range(stages)] or ["r_gavg"]
    assert names == expect + (["r_gavg_rs"] if not keepdims else [])
    x = RNG.uniform(-1, 1, (1, 4, h, w)).astype(np.float32)
    check_against_ort(m, {"x": x}, g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axes, shape", [([1], [1, 4, 13, 13]), ([2], [1, 4, 13, 13]), ([1, 2], [1, 13, 13]),
                                         ([2, 3], [1, 4, "H", 13])])
def test_other_means_stay(axes, shape):
    m = model([helper.make_node("ReduceMean", ["x"], ["y"], axes=axes)], [vi("x", F, shape)], [vi("y", F, None)],
              opset=13)
    im = import_onnx(m)
    assert spatial_means_as_pools(im.graph, im.shapes) == 0 and ops(im.graph) == ["ReduceMean"]


def test_global_average_pool_stays_when_small_or_of_unknown_size():
    m = model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [vi("x", F, [1, 4, 7, 7])], [vi("y", F, None)])
    im = import_onnx(m)
    assert split_global_average_pools(im.graph, im.shapes) == 0 and ops(im.graph) == ["GlobalAveragePool"]
    m = model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [vi("x", F, [1, 4, "H", "W"])], [vi("y", F, None)])
    im = import_onnx(m)
    assert split_global_average_pools(im.graph, im.shapes) == 0 and ops(im.graph) == ["GlobalAveragePool"]


def test_dense_bias_folds_after_a_reshape_whose_shape_folding_computes():
    """PaddlePaddle's classifier head (PP-OCR cls): ``Reshape(x, Concat(Cast(Slice(Cast(Shape(x)))),
    Cast(4)))`` then ``MatMul`` and ``Add``, opset 11.  ONNX inference does not follow that chain,
    so import leaves the Reshape's output unknown;
    once folding makes its target constant, :func:`static_shapes` gives it (2, 4) and the
    head becomes one Gemm (quantized once, as the vendor's FC)."""
    i64 = TensorProto.INT64
    nodes = [helper.make_node("Shape", ["x"], ["s64"]),
             helper.make_node("Cast", ["s64"], ["s"], to=TensorProto.INT32),
             helper.make_node("Slice", ["s", "zero", "one", "zero"], ["s0"]),
             helper.make_node("Cast", ["s0"], ["c0"], to=i64),
             helper.make_node("Cast", ["four"], ["c1"], to=i64),
             helper.make_node("Concat", ["c0", "c1"], ["target"], axis=-1),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["p"]),
             helper.make_node("Add", ["p", "k"], ["y"])]
    inits = [init("zero", np.int64([0])), init("one", np.int64([1])), init("four", np.int32([4])),
             init("w", RNG.standard_normal((4, 3)).astype(np.float32)), init("k", np.float32([1, 2, 3]))]
    m = model(nodes, [vi("x", F, [2, 4, 1, 1])], [vi("y", F, None)], inits, opset=11, ir=7)
    im = import_onnx(m)
    g = im.graph
    fold_constants(g, im.shapes)
    assert im.shapes.get("r") is None and fold_dense_bias(copy.deepcopy(g), im.shapes) == 0
    shapes = static_shapes(g, im.shapes)
    assert shapes["r"] == (2, 4) and "r" not in im.shapes
    assert fold_dense_bias(g, shapes) == 1
    im = import_onnx(m)
    x = RNG.standard_normal((2, 4, 1, 1)).astype(np.float32)
    assert ops(check_against_ort(m, {"x": x}, optimize(im.graph, im.shapes)))[-1] == "Gemm"


def test_shapes_follow_through_a_folded_reshape_to_the_next_shape_and_dense_layer():
    """PP-OCRv4 rec's neck: a Reshape whose target Paddle computes from ``Shape`` (through Cast,
    Slice, Concat: unknown at import), a Transpose, then another such Reshape of the Transpose's
    output, then a Linear on the tokens.  Folding follows the shapes node by node
    (``static_shapes.output_shape``), so the second ``Shape`` folds and the Linear becomes a Gemm
    on rows."""
    i64 = TensorProto.INT64

    def paddle_reshape(x, rest, y):  # Reshape(x, Concat(Cast(Slice(Cast(Shape(x)), 0, 1)), rest))
        return [helper.make_node("Shape", [x], [f"{y}_s"]), helper.make_node("Cast", [f"{y}_s"], [f"{y}_s32"], to=TensorProto.INT32),
                helper.make_node("Slice", [f"{y}_s32", "zero", "one", "zero"], [f"{y}_n"]),
                helper.make_node("Cast", [f"{y}_n"], [f"{y}_n64"], to=i64),
                helper.make_node("Concat", [f"{y}_n64", rest], [f"{y}_t"], axis=0),
                helper.make_node("Reshape", [x, f"{y}_t"], [y])]

    nodes = paddle_reshape("x", "rest1", "r1") + [helper.make_node("Transpose", ["r1"], ["t"], perm=[0, 2, 1])] \
        + paddle_reshape("t", "rest2", "r2") + [helper.make_node("MatMul", ["r2", "w"], ["p"]),
                                                 helper.make_node("Add", ["p", "k"], ["y"])]
    inits = [init("zero", np.int64([0])), init("one", np.int64([1])), init("rest1", np.int64([4, 6])),
             init("rest2", np.int64([6, 4])), init("w", RNG.standard_normal((4, 3)).astype(np.float32)),
             init("k", np.float32([1, 2, 3]))]
    m = model(nodes, [vi("x", F, [1, 4, 6])], [vi("y", F, None)], inits, opset=11, ir=7)
    im = import_onnx(m)
    assert im.shapes.get("t") is None and im.shapes.get("r2") is None
    g = check_against_ort(m, {"x": RNG.standard_normal((1, 4, 6)).astype(np.float32)}, optimize(im.graph, im.shapes))
    assert "Shape" not in ops(g) and "Gemm" in ops(g) and "MatMul" not in ops(g)


@pytest.mark.parametrize("target, src, expect", [
    ([0, -1], (2, 3, 4), (2, 12)), ([-1], (2, 3), (6,)), ([4, 0], (2, 3), None), ([5, -1], (2, 3), None),
    ([-1, -1], (2, 3), None), ([0, 0, 0], (2, 3), None),
])
def test_static_shapes_reshape_as_onnx_does(target, src, expect):
    g = Graph([Node("Reshape", "r", ["x", "t"], ["y"], {})], ["x"], ["y"], {"t": np.int64(target)})
    assert static_shapes(g, {"x": src}).get("y") == expect
    assert static_shapes(g, {"x": (-1, 3)}).get("y") is None  # a dynamic input dim: unknown


def test_fold_dense_bias_refuses_integer_products():
    i32 = TensorProto.INT32
    m = _dense_model(helper.make_node("MatMul", ["a", "b"], ["p"]), [helper.make_node("Add", ["p", "k"], ["y"])],
                     [init("b", RNG.integers(-5, 5, (5, 4)).astype(np.int32)), init("k", np.int32([1, 2, 3, 4]))],
                     elem=i32)
    im = import_onnx(m)
    assert fold_dense_bias(im.graph, im.shapes) == 0 and ops(im.graph) == ["MatMul", "Add"]
    a = RNG.integers(-5, 5, (3, 5)).astype(np.int32)
    expected = ort_run(m, {"a": a})[0]
    im = import_onnx(m)
    actual = run_graph(optimize(im.graph, im.shapes), [a])[0]
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, expected)


# -- RKNN ------------------------------------------------------------------------------------------


def small_model_bytes():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["y"])],
              [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 4, 8, 8])], [init("w", w)])
    return m, m.SerializeToString()


@pytest.fixture()
def toolkit_log(caplog):
    caplog.set_level(logging.DEBUG, logger="rknnlite.toolkit")
    return caplog


def test_full_flow_export_and_run(tmp_path, toolkit_log):
    m, data = small_model_bytes()
    x = RNG.uniform(0, 255, (1, 3, 8, 8)).astype(np.float32)
    r = RKNN()
    assert r.config(mean_values=[[10, 20, 30]], std_values=[[2, 4, 8]], target_platform="RK3566",
                    float_dtype="float32", custom_string="hello") == 0
    assert r.load_onnx(data) == 0
    assert r.build(do_quantization=False) == 0
    path = tmp_path / "m.rknn"
    assert r.export_rknn(str(path)) == 0
    assert r.init_runtime() == 0
    nchw = r.inference([x], data_format="nchw")
    nhwc = r.inference([np.ascontiguousarray(x.transpose(0, 2, 3, 1))])
    np.testing.assert_array_equal(nchw[0], nhwc[0])
    mean = np.float32([10, 20, 30]).reshape(1, 3, 1, 1)
    std = np.float32([2, 4, 8]).reshape(1, 3, 1, 1)
    (expected,) = ort_run(m, {"x": (x - mean) / std})
    np.testing.assert_allclose(nchw[0], expected, rtol=1e-4, atol=1e-4)
    passed = r.inference([x], data_format="nchw", inputs_pass_through=[1])
    np.testing.assert_allclose(passed[0], ort_run(m, {"x": x})[0], rtol=1e-4, atol=1e-3)
    r.release()
    assert errors(toolkit_log) == []
    loaded = load_model(str(path))
    meta = loaded.model.metadata
    assert meta.target_platforms == ("rk3566",) and meta.custom_string == "hello" and meta.float_dtype == "float32"
    with rknnlite.Context(str(path)) as ctx:
        np.testing.assert_array_equal(ctx.run([x], data_format="nchw")[0], nchw[0])
    r2 = RKNN()
    assert r2.load_rknn(str(path)) == 0 and r2.init_runtime() == 0
    np.testing.assert_array_equal(r2.inference([x], data_format="nchw")[0], nchw[0])
    r2.release()


def test_float16_build_is_close_to_float32(toolkit_log):
    m, data = small_model_bytes()
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    out = {}
    for dtype in ("float16", "float32"):
        r = RKNN()
        assert r.config(target_platform="rk3588", float_dtype=dtype) == 0
        assert r.load_onnx(m) == 0 and r.build() == 0 and r.init_runtime() == 0
        out[dtype] = r.inference([x], data_format="nchw")[0]
        r.release()
    assert out["float16"].dtype == np.float32
    assert not np.array_equal(out["float16"], out["float32"])
    np.testing.assert_allclose(out["float16"], out["float32"], rtol=1e-2, atol=1e-2)


def test_calls_out_of_order(tmp_path, toolkit_log):
    m, data = small_model_bytes()
    r = RKNN()
    assert r.build() == -1
    assert r.export_rknn(str(tmp_path / "x.rknn")) == -1
    assert r.init_runtime() == -1
    assert r.inference([np.zeros((1, 8, 8, 3), np.float32)]) is None
    assert r.config(target_platform="rk3588") == 0
    assert r.load_onnx(data) == 0
    assert r.config(target_platform="rk3588") == -1  # config belongs before load_onnx
    assert r.init_runtime() == -1  # not built yet
    assert r.build() == 0
    assert r.inference([np.zeros((1, 8, 8, 3), np.float32)]) is None  # no runtime yet
    assert r.init_runtime() == 0
    assert r.inference([np.zeros((1, 8, 8, 3), np.float32)]) is not None
    r.release()
    r.release()  # idempotent
    assert r.load_onnx(data) == -1 and r.build() == -1 and r.inference([np.zeros(1)]) is None
    msgs = " | ".join(errors(toolkit_log))
    assert "after load_onnx" in msgs and "after build" in msgs and "init_runtime" in msgs
    assert "before load_onnx" in msgs and "released" in msgs


def test_config_validation(toolkit_log):
    r = RKNN()
    assert r.config(target_platform="rk9999") == -1
    assert r.config(target_platform="rk3588", float_dtype="int8") == -1
    assert r.config(mean_values="abc") == -1
    assert r.config(mean_values=[[1, 2, 3]], std_values=[[1, 0, 1]]) == -1
    assert r.config(mean_values=[[float("nan")] * 3]) == -1
    assert r.config(std_values=[[1, float("inf"), 1]]) == -1
    assert "std_values[0] must hold finite numbers, not [1, inf, 1]" in errors(toolkit_log)[-1]
    assert r.config(target_platform="rk3588", bogus_option=1) == -1
    assert r.config(target_platform="rk3588", dynamic_input=[[[1, 3, 0, 8]]]) == -1
    assert "dynamic_input" in " ".join(errors(toolkit_log))
    toolkit_log.clear()
    for platform in ("rv1103", "RV1106B", "rk2118", "Rk3576"):
        assert r.config(target_platform=platform) == 0
    assert r.config(target_platform="rk3588", optimization_level=2, quantized_algorithm="mmse",
                    dynamic_input=None, quant_img_RGB2BGR=True) == 0
    warnings = [rec.getMessage() for rec in toolkit_log.records if rec.levelno == logging.WARNING]
    assert any("optimization_level" in w and "not supported" in w for w in warnings)
    toolkit_log.clear()
    assert r.config() == 0
    assert any("rk3588" in rec.getMessage() for rec in toolkit_log.records if rec.levelno == logging.WARNING)
    assert errors(toolkit_log) == []
    r.release()


@pytest.mark.parametrize("options, message", [
    # RKNN-Toolkit2 2.5.0's config() raises each of these, in these words (observed)
    (dict(quantized_algorithm="entropy"),
     "Invalid quantized_algorithm 'entropy', expect in ['normal', 'mmse', 'kl_divergence', 'gdq']!"),
    (dict(quantized_algorithm="MMSE"), "Invalid quantized_algorithm 'MMSE'"),
    (dict(quantized_dtype="int4"),
     "Invalid quantized_dtype 'int4', expect in ['w8a8', 'w8a16', 'w16a16i_dfp', 'w4a16']!"),
    (dict(quantized_dtype="asymmetric_quantized-16"), "Invalid quantized_dtype 'w16a16i', expect in"),
    (dict(quantized_method="tensor"),
     "Invalid quantized_method 'tensor', expect in ['layer', 'channel', 'group{SIZE}']!"),
    (dict(quantized_method="group48"), "Invalid quantized_method 'group48', valid format is group{SIZE}, where {SIZE} "
                                       "is in [32, 64, 96, 128, 160, 192, 224, 256], e.g group32!"),
    (dict(quantized_dtype="w4a16"), "The quantized_dtype = 'w4a16' not support in 'rk3588'!"),
    (dict(quantized_dtype="w8a16"), "The quantized_dtype = 'w8a16' not support in 'rk3588'!"),
    (dict(quantized_algorithm="gdq"), "The quantized_algorithm = 'gdq' only support in ['w4a16', 'w8a16']!"),
    (dict(quantized_method="group32"), "The quantize_method = 'group32' only support when quantized_dtype = 'w4a16'"),
    (dict(quantized_dtype=None), "quantized_dtype must be a str, not None"),  # the vendor's: "Invalid ... 'None'"
    (dict(quantized_method=None), "quantized_method must be a str, not None"),  # the vendor's: AttributeError
])
def test_config_refuses_the_quantization_options_the_vendor_refuses(toolkit_log, options, message):
    r = RKNN()
    assert r.config(target_platform="rk3588", **options) == -1
    (line,) = errors(toolkit_log)
    assert line.startswith("config: " + message)
    r.release()


def test_the_vendors_other_quantization_values_warn_and_only_a_quantized_build_fails(toolkit_log):
    r = RKNN()
    assert r.config(target_platform="rk3576", quantized_dtype="w4a16", quantized_method="group32",
                    quantized_algorithm="gdq") == 0
    assert r.config(target_platform="rk3588", quantized_dtype="asymmetric_quantized-8") == 0  # the 1.x name
    assert errors(toolkit_log) == []
    r.release()


def test_configs_positional_arguments_are_the_vendors(toolkit_log):
    """RKNN-Toolkit2 2.x's config(mean_values, std_values, quantized_dtype, quantized_algorithm,
    quantized_method, quantized_hybrid_level, target_platform, quant_img_RGB2BGR, ...): rknnlite's
    third parameter was quant_img_RGB2BGR, so config(mean, std, 'w8a8') reversed every calibration
    image to BGR (a non-empty string is true) and the algorithm and platform given after it went
    elsewhere."""
    r = RKNN()
    assert r.config([[0, 0, 0]], [[255, 255, 255]], "w8a8", "kl_divergence", "layer", 0, "rk3566", False,
                    "float16", 3, "tag") == 0
    cfg = r._config
    assert (cfg["quantized_dtype"], cfg["quantized_algorithm"], cfg["quantized_method"]) == \
        ("w8a8", "kl_divergence", "layer")
    assert (cfg["target_platform"], cfg["quant_img_RGB2BGR"], cfg["custom_string"]) == ("rk3566", False, "tag")
    assert [rec.getMessage() for rec in toolkit_log.records if rec.levelname == "WARNING"] == []
    toolkit_log.clear()
    assert r.config(target_platform="rk3588", optimization_level=2) == 0  # only a non-default value warns
    assert any("optimization_level=2 is not supported yet" in rec.getMessage() for rec in toolkit_log.records)
    r.release()


@pytest.mark.parametrize("value, stored, message", [
    (True, True, None), (1, True, None), (None, False, None), ([True], [True], None),
    ("w8a8", None, "quant_img_RGB2BGR must be True or False (or a list with one per input), not 'w8a8'"),
    (2, None, "quant_img_RGB2BGR must be True or False (or a list with one per input), not 2"),
    ([True, "no"], None, "quant_img_RGB2BGR[1] must be True or False (or a list with one per input), not 'no'"),
    ([True, False], None, "The length of quant_img_RGB2BGR is different from mean_values! (2 value(s); "
                          "mean_values has 1 input(s))"),
])
def test_quant_img_rgb2bgr_takes_a_flag_or_one_per_input(toolkit_log, value, stored, message):
    """The vendor takes a bool or a list with one per input (as many as mean_values; observed);
    rknnlite read any value by its truth, so a list [True, False] reversed every input."""
    r = RKNN()
    ret = r.config(mean_values=[[0, 0, 0]], std_values=[[1, 1, 1]], target_platform="rk3588",
                   quant_img_RGB2BGR=value)
    if message is None:
        assert ret == 0 and r._config["quant_img_RGB2BGR"] == stored
    else:
        assert ret == -1 and errors(toolkit_log)[-1] == "config: " + message
    r.release()


def test_the_vendors_compiler_settings_are_taken_and_warn_only_off_their_defaults(toolkit_log):
    """RKNN-Toolkit2 2.5.0's config() has memory_plan_strategy, compute_order and
    compiler_control_file in its signature, and clients pass its optimiser's rules to skip
    (Immich's exporter: disable_rules=['fuse_matmul_softmax_matmul_to_sdpa']): they steer the
    NPU compiler only, so they are taken; a script passing the defaults sees no warning."""
    r = RKNN()
    defaults = dict(memory_plan_strategy="BestFit", compute_order="WidthFirst", compiler_control_file=None,
                    mini_rknn=False, disable_rules=[], enable_flash_attention=False, single_core_mode=False,
                    compress_weight=False, op_target=None)
    assert r.config(target_platform="rk3588", **defaults) == 0
    assert [rec.getMessage() for rec in toolkit_log.records if rec.levelno >= logging.WARNING] == []
    for key, value in (("disable_rules", ["fuse_matmul_softmax_matmul_to_sdpa"]), ("compute_order", "DepthFirst"),
                       ("enable_flash_attention", True), ("mini_rknn", True)):
        toolkit_log.clear()
        assert r.config(target_platform="rk3588", **{key: value}) == 0
        assert [rec.getMessage().split(" (")[0] for rec in toolkit_log.records if rec.levelno >= logging.WARNING] \
            == [f"config: {key}={value!r} is not supported yet by rknnlite and is ignored"]
    for bad in ("fuse_matmul_softmax_matmul_to_sdpa", [3], {"rule": 1}):
        assert r.config(target_platform="rk3588", disable_rules=bad) == -1
        assert f"disable_rules must be a list of optimizer rule names, not {bad!r}" in errors(toolkit_log)[-1]
    r.release()


def test_a_refused_config_stops_the_loaders_until_one_is_taken(toolkit_log):
    """A vendor script never reads config()'s return (the vendor's raises): with a typo in an
    option, load_onnx went on with the default configuration (rk3588, normal) and said only
    'config() was not called'."""
    _, data = small_model_bytes()
    r = RKNN()
    assert r.config(target_platform="rk3588", quantized_algorithm="kl-divergence") == -1
    assert r.load_onnx(data) == -1
    assert errors(toolkit_log)[-1] == (
        "load_onnx: the last config() was refused (Invalid quantized_algorithm 'kl-divergence', expect in "
        "['normal', 'mmse', 'kl_divergence', 'gdq']!); call config() again with options it takes")
    assert r.config(target_platform="rk3566", quantized_algorithm="kl_divergence") == 0
    assert r.load_onnx(data) == 0
    r.release()


def test_init_runtimes_positional_arguments_are_the_vendors(toolkit_log):
    """RKNN-Toolkit2 2.x's init_runtime(target, device_id, perf_debug, ...): rknnlite's second
    parameter was 1.x's target_sub_class, so init_runtime(None, None, True) (perf_debug) was
    refused as a board device_id."""
    _, data = small_model_bytes()
    r = RKNN()
    assert r.config(target_platform="rk3588") == 0 and r.load_onnx(data) == 0 and r.build() == 0
    assert r.init_runtime(None, None, True) == 0
    assert errors(toolkit_log) == []
    assert any("perf_debug, eval_mem, async_mode and other options are not supported by the simulator" in
               rec.getMessage() for rec in toolkit_log.records)
    assert r.init_runtime(None, "0123456789ABCDEF") == -1  # a device id: a board
    assert r.init_runtime(target_sub_class="RK3399Pro") == 0
    r.release()


def test_odd_argument_values_are_refused_by_name(tmp_path, monkeypatch, toolkit_log):
    """Values of the wrong type give -1 and an error naming them, never an exception, and the
    object stays usable (found by a fuzz of every method's arguments). Before: load_rknn(5) read
    five zero bytes (10**12: MemoryError); export_rknn(3) wrote the model into file descriptor 3
    and closed it; build(dataset={}) and a non-list custom_hybrid raised TypeError; arrays as
    flags or options raised numpy's "truth value of an array is ambiguous"."""
    monkeypatch.chdir(tmp_path)
    np.save("s.npy", np.zeros((1, 3, 8, 8), np.float32))
    (tmp_path / "dataset.txt").write_text("s.npy\n")
    _, data = small_model_bytes()
    arr = np.zeros(3)
    r = RKNN()
    for bad in (dict(float_dtype=arr), dict(optimization_level=arr), dict(inputs_yuv_fmt=arr)):
        assert r.config(target_platform="rk3588", **bad) == -1, bad
    assert r.config(target_platform="rk3588") == 0 and r.load_onnx(data) == 0
    for bad in (dict(dataset={}), dict(dataset=(1,)), dict(do_quantization="dataset.txt"),
                dict(do_quantization=True, auto_hybrid=arr), dict(rknn_batch_size=arr)):
        assert r.build(**bad) == -1, bad
    for bad in (dict(rknn_batch_size=arr), dict(custom_hybrid=float("inf")), dict(proposal=arr)):
        assert r.hybrid_quantization_step1(dataset="dataset.txt", **bad) == -1, bad
    assert r.build() == 0
    read_end, write_end = os.pipe()
    try:
        assert r.export_rknn(write_end) == -1  # a file descriptor is not a path
        os.write(write_end, b"still open")
    finally:
        os.close(read_end)
        os.close(write_end)
    assert r.export_rknn(str(tmp_path / "m.rknn"), cpp_gen_cfg=arr) == -1
    assert r.export_rknn("m\0.rknn") == -1  # os's "embedded null byte" ValueError escaped
    assert r.init_runtime(async_mode=arr) == -1
    assert r.init_runtime(fallback_prior_device=arr) == 0  # a board option: a warning
    for bad in (5, 10**12, [1], "m\0.rknn"):
        assert r.load_rknn(bad) == -1
    messages = errors(toolkit_log)
    assert "build: do_quantization and auto_hybrid take True or False, not 'dataset.txt' and False (the dataset " \
           "goes by name: build(do_quantization=True, dataset='dataset.txt'))" in messages
    assert "build: do_quantization=True: dataset must be the path of a dataset file (one line of sample paths per " \
           "sample), not dict {}" in messages
    assert "export_rknn: export_path must be a file path, not %d" % write_end in messages
    assert "load_rknn: cannot read 5: path must be a file path or the model's bytes, not int" in messages
    assert "load_rknn: cannot read m\0.rknn: embedded null byte" in messages
    assert any("custom_hybrid is a list of [input_name, output_name] pairs, not inf" in m for m in messages)
    assert r.build() == 0 and r.export_rknn(str(tmp_path / "m.rknn")) == 0 and r.init_runtime() == 0
    assert r.inference([np.zeros((1, 8, 8, 3), np.float32)]) is not None
    r.release()


def test_build_refusals_and_board_targets(toolkit_log):
    _, data = small_model_bytes()
    r = RKNN()
    assert r.config(target_platform="rk3588") == 0 and r.load_onnx(data) == 0
    assert r.build(do_quantization=True, dataset="x.txt") == -1
    assert r.build(rknn_batch_size=0) == -1
    assert r.build() == 0
    assert r.init_runtime(target="rk3588") == -1
    assert "software backend" in errors(toolkit_log)[-1]
    msgs = " | ".join(errors(toolkit_log))
    assert "do_quantization" in msgs and "rknn_batch_size" in msgs
    r.release()


def test_mean_std_mismatch_fails_at_build(toolkit_log):
    _, data = small_model_bytes()
    r = RKNN()
    assert r.config(mean_values=[[1, 2]], std_values=[[1, 2]], target_platform="rk3588") == 0
    assert r.load_onnx(data) == 0
    assert r.build() == -1 and "channels" in errors(toolkit_log)[-1]
    r.release()


def test_load_failures_return_minus_one(tmp_path, toolkit_log):
    r = RKNN()
    assert r.load_onnx(str(tmp_path / "none.onnx")) == -1
    bad = model([helper.make_node("Hardmax", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, [2])])
    assert r.load_onnx(bad) == -1
    assert "Hardmax" in errors(toolkit_log)[-1]
    r.release()


def test_logging_stays_off_the_root_logger(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a verbose build writes its check*.onnx files there
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    log_file = tmp_path / "build.log"
    _, data = small_model_bytes()
    r = RKNN(verbose=True, verbose_file=str(log_file))
    r.config(target_platform="rk3588")
    r.load_onnx(data)
    r.build()
    r.release()
    assert root.handlers == handlers and root.level == level
    text = log_file.read_text()
    assert "load_onnx" in text and "build" in text


def test_vendor_flow_on_a_shape_fixed_dynamic_model(toolkit_log):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [1, 3, "H", "W"])],
              [vi("y", F, [1, 3, "H", "W"])])
    r = RKNN()
    assert r.config(target_platform="rk3588", float_dtype="float32") == 0
    assert r.load_onnx(m, input_size_list=[[1, 3, 5, 7]]) == 0 and r.build() == 0 and r.init_runtime() == 0
    x = RNG.standard_normal((1, 5, 7, 3)).astype(np.float32)
    np.testing.assert_array_equal(r.inference([x])[0], np.maximum(x.transpose(0, 3, 1, 2), 0))
    assert r.inference([np.zeros((1, 6, 7, 3), np.float32)]) is None
    r.release()


def test_importing_the_toolkit_does_not_import_onnx():
    import subprocess
    import sys

    code = "import sys, rknnlite.toolkit; assert 'onnx' not in sys.modules, 'onnx imported eagerly'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float16_build_rounds_float_constants_and_runtime_uses_them_in_place(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.portable import read_portable
    from rknnlite.toolkit import RKNN

    w = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    out = tmp_path / "m.rknn"
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0 and rknn.load_onnx(str(path)) == 0
    assert rknn.build(do_quantization=False) == 0 and rknn.export_rknn(str(out)) == 0
    model = read_portable(memoryview(out.read_bytes()))
    stored = model.graph.constants["w"]
    np.testing.assert_array_equal(stored, w.astype(np.float16).astype(np.float32))
    ex = Executor(model.graph, "float16")
    assert dict((ex.slot_name(s), v) for s, v in ex.constants)["w"] is stored


def _conv_add_model():
    w = (RNG.standard_normal((6, 6, 1, 1)) * 0.3).astype(np.float32)
    b = (RNG.standard_normal(6) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    return model(nodes, [vi("x", F, [1, 6, 5, 5])], [vi("y", F, None)], [init("w", w), init("b", b)], opset=13), w


def test_input_residual_folds_into_the_conv_weight():
    """Add(x, Conv1x1(x)) with as many output as input channels becomes one Conv with weight
    W + I, as RKNN-Toolkit2's compiler writes it (one Conv, weight ``w_new``, in float16 and
    int8 files)."""
    m, w = _conv_add_model()
    g = import_onnx(m).graph
    assert fold_input_residual(g) == 1
    assert ops(g) == ["Conv"] and g.nodes[0].outputs == ["y"] and g.nodes[0].inputs[1] == "w_new"
    np.testing.assert_allclose(g.constants["w_new"], w + np.eye(6, dtype=np.float32).reshape(6, 6, 1, 1))
    np.testing.assert_array_equal(g.constants["w"], w)  # the original (maybe shared) is untouched
    check_against_ort(m, {"x": RNG.standard_normal((1, 6, 5, 5)).astype(np.float32)}, g)


@pytest.mark.parametrize("kernel, attrs", [
    (3, {"pads": [1, 1, 1, 1]}),
    (5, {"pads": [2, 2, 2, 2]}),
    (3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    (3, {"pads": [1, 1, 1, 1], "group": 6}),
    (1, {"group": 6}),
    (1, {"auto_pad": "VALID"}),
])
def test_input_residual_folds_any_same_padded_conv(kernel, attrs):
    """RKNN-Toolkit2 2.5.0 folds the residual of any conv that keeps channels and size (its
    files hold ``<w>_new`` for 3x3 pad 1, 5x5 pad 2, 3x3 dilation 2 pad 2 and depthwise 3x3 and
    1x1, rk3588): the identity goes on the centre tap (on the one input channel of a depthwise
    weight)."""
    depthwise = attrs.get("group", 1) > 1
    w = (RNG.standard_normal((6, 1 if depthwise else 6, kernel, kernel)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], **attrs), helper.make_node("Add", ["c", "x"], ["y"])]
    m = model(nodes, [vi("x", F, [1, 6, 9, 9])], [vi("y", F, None)], [init("w", w)], opset=13)
    g = import_onnx(m).graph
    assert fold_input_residual(g) == 1 and ops(g) == ["Conv"]
    identity = np.zeros_like(w)
    identity[np.arange(6), 0 if depthwise else np.arange(6), kernel // 2, kernel // 2] = 1
    np.testing.assert_array_equal(g.constants["w_new"], w + identity)
    check_against_ort(m, {"x": RNG.standard_normal((1, 6, 9, 9)).astype(np.float32)}, g)


@pytest.mark.parametrize("change", ["channels", "kernel", "stride", "pads", "group", "activation", "reader", "output",
                                    "asymmetric"])
def test_input_residual_stays_where_the_fold_does_not_hold(change):
    w = np.zeros((8 if change == "channels" else 6, 6, 3 if change == "kernel" else 1) + ((3,) if change == "kernel" else (1,)),
                 np.float32)
    attrs = {"strides": [2, 2] if change == "stride" else [1, 1], "pads": [1, 1, 1, 1] if change == "pads" else [0] * 4,
             "group": 2 if change == "group" else 1}
    if change == "asymmetric":  # "same" size, but not centred: the vendor keeps its ConvAdd
        w = np.zeros((6, 6, 3, 3), np.float32)
        attrs["pads"] = [0, 0, 2, 2]
    if change == "activation":
        attrs["_activation"] = "Relu"
    nodes = [Node("Conv", "conv", ["x", "w"], ["c"], attrs), Node("Add", "add", ["x", "c"], ["y"], {})]
    outputs = ["y"]
    if change == "reader":
        nodes.append(Node("Relu", "relu", ["c"], ["r"], {}))
        outputs.append("r")
    if change == "output":
        outputs.append("c")
    g = Graph(nodes, ["x"], outputs, {"w": w})
    assert fold_input_residual(g) == 0 and ops(g)[:2] == ["Conv", "Add"]


def _layer_norm_chain(square="pow", scale=True, bias=True, axes=(-1,), tap=None, opset=13):
    """The opset-13 arithmetic of a LayerNorm of ``x`` (2, 5, 8), as PyTorch exports nn.LayerNorm;
    ``tap``: an intermediate tensor that is a graph output too."""
    g = (1 + 0.3 * RNG.standard_normal(8)).astype(np.float32)
    b = (0.2 * RNG.standard_normal(8)).astype(np.float32)
    inits = [init("two", np.float32(2)), init("eps", np.float32(1e-5)), init("g", g), init("b", b)]

    def mean(x, y):
        if opset >= 18:
            return helper.make_node("ReduceMean", [x, "axes"], [y])
        return helper.make_node("ReduceMean", [x], [y], axes=list(axes))

    if opset >= 18:
        inits.append(init("axes", np.array(axes, np.int64)))
    nodes = [mean("x", "m"), helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["p"]) if square == "pow" else helper.make_node("Mul", ["d", "d"], ["p"]),
             mean("p", "v"), helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["n"])]
    last = "n"
    if scale:
        nodes.append(helper.make_node("Mul", ["n", "g"], ["ng"]))
        last = "ng"
    if bias and scale:
        nodes.append(helper.make_node("Add", ["ng", "b"], ["nb"]))
        last = "nb"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    outputs = [vi("y", F, None)] + ([vi(tap, F, None)] if tap else [])
    return model(nodes, [vi("x", F, [2, 5, 8])], outputs, inits, opset=opset)


@pytest.mark.parametrize("kwargs", [{}, {"square": "mul"}, {"bias": False}, {"scale": False}, {"axes": (2,)},
                                    {"opset": 18}])
def test_layer_norm_arithmetic_becomes_one_node(kwargs):
    """nn.LayerNorm exported below opset 17 (PyTorch) is one LayerNormalization, as the vendor
    compiles it (one exNorm); the values are onnxruntime's."""
    m = _layer_norm_chain(**kwargs)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert ops(g) == ["LayerNormalization"]
    assert g.nodes[0].attrs["axis"] == -1 and g.nodes[0].attrs["epsilon"] == pytest.approx(1e-5)
    check_against_ort(m, {"x": RNG.standard_normal((2, 5, 8)).astype(np.float32) * 3}, g, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kwargs", [{"axes": (1,)}, {"axes": (1, 2)}] + [{"tap": t} for t in ("m", "d", "p", "v", "ve",
                                                                                        "s", "n", "ng")])
def test_layer_norm_arithmetic_stays_where_the_fusion_does_not_hold(kwargs, tmp_path):
    """A mean over another axis or over two, or an intermediate of the normalisation that is a
    graph output too: unchanged, and the build gives every output onnxruntime gives (the standard
    deviation ``s`` as an output was fused away, and build failed: "graph output 's' is never
    produced").  The normalised ``n`` or scaled ``ng`` as an output ends the fused node there."""
    m = _layer_norm_chain(**kwargs)
    im = import_onnx(m)
    g = im.graph
    partial_chain = kwargs.get("tap") in ("n", "ng")
    assert fuse_layer_norm(g, im.shapes) == int(partial_chain)
    assert ("LayerNormalization" in ops(g)) == partial_chain
    onnx.save(m, str(tmp_path / "m.onnx"))
    r = RKNN()
    assert r.config(target_platform="rk3588", float_dtype="float32") == 0
    assert r.load_onnx(str(tmp_path / "m.onnx")) == 0 and r.build(do_quantization=False) == 0
    assert r.init_runtime() == 0
    x = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    got = r.inference([x])
    assert got is not None and len(got) == len(m.graph.output)
    for got, want in zip(got, ort_run(m, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    r.release()


def _gelu_chain(form="div", half_first=False, extra_reader=False):
    """The exact GELU of ``x`` as PyTorch exports ``nn.GELU()`` below opset 20."""
    inits = [init("one", np.float32(1)), init("half", np.float32(0.5)),
             init("k", np.float32(np.sqrt(2)) if form == "div" else np.float32(1 / np.sqrt(2)))]
    scale = helper.make_node("Div" if form == "div" else "Mul", ["x", "k"], ["s"])
    nodes = [helper.make_node("Relu", ["i"], ["x"]), scale, helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"])]
    if half_first:
        nodes += [helper.make_node("Mul", ["x", "half"], ["xh"]), helper.make_node("Mul", ["xh", "e1"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "e1"], ["xe"]), helper.make_node("Mul", ["xe", "half"], ["y"])]
    outputs = [vi("y", F, None)] + ([vi("e", F, None)] if extra_reader else [])
    return model(nodes, [vi("i", F, [2, 7])], outputs, inits, opset=13)


@pytest.mark.parametrize("kwargs", [{}, {"form": "mul"}, {"half_first": True}])
def test_gelu_arithmetic_becomes_one_node(kwargs):
    """nn.GELU() exported below opset 20 is one Gelu (the vendor's exGelu); onnxruntime's values."""
    m = _gelu_chain(**kwargs)
    im = import_onnx(m)
    g = optimize(im.graph, im.shapes)
    assert ops(g) == ["Relu", "Gelu"]
    check_against_ort(m, {"i": RNG.standard_normal((2, 7)).astype(np.float32) * 3}, g)


def test_gelu_arithmetic_stays_when_a_step_is_read_elsewhere():
    im = import_onnx(_gelu_chain(extra_reader=True))
    assert fuse_gelu(im.graph) == 0 and "Gelu" not in ops(im.graph)


def test_input_initial_val_makes_an_input_a_constant(toolkit_log):
    """RKNN-Toolkit2's load_onnx(..., input_initial_val=[...]): an input given a value becomes a
    constant and leaves the model's inputs, with the vendor's warning (observed with 2.5.0: an
    Add of x and s with s fixed to 2 takes x alone and returns x + 2). rknnlite had no such
    argument: a TypeError."""
    m = model([helper.make_node("Add", ["x", "s"], ["y"])], [vi("x", F, [1, 3, 4, 4]), vi("s", F, [1, 3, 1, 1])],
              [vi("y")], [], opset=13)
    before = m.SerializeToString()
    r = RKNN()
    assert r.config(target_platform="rk3588", float_dtype="float32") == 0
    assert r.load_onnx(m, inputs=["x", "s"], input_size_list=[[1, 3, 4, 4], [1, 3, 1, 1]],
                       input_initial_val=[None, np.full(3, 2.0)]) == 0
    assert m.SerializeToString() == before  # the caller's model is not modified
    assert any("The input 's' will be removed from the model" in rec.getMessage() for rec in toolkit_log.records)
    assert r.build(do_quantization=False) == 0 and r.init_runtime() == 0
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(r.inference([x], data_format="nchw")[0], x + 2)
    r.release()


@pytest.mark.parametrize("values, message", [
    ([None], "input_initial_val must be a list with one entry (None or an array) per input (x, s), got 1"),
    ([None, np.zeros(4)], "input_initial_val for 's' has shape [4]; the input is [1, 3, 1, 1]"),
    ([None, np.array(["a"] * 3)], "input_initial_val for 's' must be numeric, not <U1"),
])
def test_input_initial_val_of_the_wrong_length_or_shape_is_refused(toolkit_log, values, message):
    m = model([helper.make_node("Add", ["x", "s"], ["y"])], [vi("x", F, [1, 3, 4, 4]), vi("s", F, [1, 3, 1, 1])],
              [vi("y")], [], opset=13)
    r = RKNN()
    assert r.load_onnx(m, input_initial_val=values) == -1
    assert errors(toolkit_log)[-1] == "load_onnx: " + message
    r.release()


def test_inferences_positional_arguments_are_the_vendors(toolkit_log):
    """RKNN-Toolkit2 2.x's inference(inputs, data_format, inputs_pass_through, get_frame_id) has no
    data_type (Lite2's and 1.x's second parameter): inference([x], 'nchw') took 'nchw' as an
    ignored data_type and read x as NHWC, and a third positional (the vendor's pass-through list)
    became the data_format.  data_type now goes by keyword; a dtype where the layout goes is refused
    by name, and so is a pass-through that is not one 0/1 per input ('nchw' passed every input
    through)."""
    _, data = small_model_bytes()
    r = RKNN()
    assert r.config(target_platform="rk3588") == 0
    assert r.load_onnx(data) == 0 and r.build(do_quantization=False) == 0 and r.init_runtime() == 0
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = r.inference([x], data_format="nchw")[0]
    np.testing.assert_array_equal(r.inference([x], "nchw")[0], want)
    np.testing.assert_array_equal(r.inference([x], ["nchw"])[0], want)
    np.testing.assert_array_equal(r.inference([x.transpose(0, 2, 3, 1)], data_type="float32")[0], want)
    passed = r.inference([x], "nchw", [1])[0]
    np.testing.assert_array_equal(passed, r.inference([x], data_format="nchw", inputs_pass_through=[1])[0])
    assert r.inference([x], "nchw", [1], True)[-1] == 1  # get_frame_id fourth
    assert r.inference([x], "float32") is None
    assert errors(toolkit_log)[-1] == "inference: data_format[0] 'float32' is invalid, only 'nhwc' or 'nchw'"
    for bad in ("nchw", [2], [1, 0], 1):
        assert r.inference([x], "nchw", bad) is None
        assert errors(toolkit_log)[-1] == (f"inference: inputs_pass_through must be a list with one 0 or 1 per "
                                           f"input (1), not {bad!r}")
    assert r.inference([x], 3) is None
    assert errors(toolkit_log)[-1] == ("inference: data_format must be 'nhwc' or 'nchw', or a list with one per "
                                       "input (1), not 3")
    np.testing.assert_array_equal(r.inference([x], "nchw")[0], want)  # still usable
    r.release()


def test_the_toolkits_parameters_are_in_the_vendors_order():
    """A vendor script may pass them by position: RKNN-Toolkit2 2.2.0-2.5.0's signatures (read from
    its wheels); rknnlite's own options come after them."""
    import inspect

    vendor = {
        "load_onnx": ["model", "inputs", "input_size_list", "input_initial_val", "outputs"],
        "load_tflite": ["model", "input_is_nchw"],
        "build": ["do_quantization", "dataset", "rknn_batch_size"],
        "config": ["mean_values", "std_values", "quantized_dtype", "quantized_algorithm", "quantized_method",
                   "quantized_hybrid_level", "target_platform", "quant_img_RGB2BGR", "float_dtype",
                   "optimization_level", "custom_string"],
        "init_runtime": ["target", "device_id", "perf_debug", "eval_mem", "async_mode", "core_mask",
                         "fallback_prior_device"],
        "inference": ["inputs", "data_format", "inputs_pass_through", "get_frame_id"],
        "accuracy_analysis": ["inputs", "output_dir", "target", "device_id"],
        "hybrid_quantization_step1": ["dataset", "rknn_batch_size", "proposal", "proposal_dataset_size",
                                      "custom_hybrid"],
        "hybrid_quantization_step2": ["model_input", "data_input", "model_quantization_cfg"],
    }
    for name, params in vendor.items():
        ours = [p for p in inspect.signature(getattr(RKNN, name)).parameters if p != "self"]
        assert ours[:len(params)] == params, name
    assert inspect.signature(RKNN.hybrid_quantization_step1).parameters["dataset"].default == "dataset.txt"


def test_an_input_with_open_dims_loads_with_the_vendors_refusal_as_a_warning(toolkit_log):
    """RKNN-Toolkit2 2.5.0 refuses load_onnx of an input shaped ['N', 3, 'H', 'W'] without
    input_size_list or dynamic_input (observed); rknnlite builds a model taking any size, and
    now says that the vendor would not."""
    w = init("w", np.ones((4, 3, 1, 1), np.float32))
    m = model([helper.make_node("Conv", ["x", "w"], ["y"])], [vi("x", F, ["N", 3, "H", "W"])], [vi("y")], [w])
    for sizes, warned in ((None, True), ([[1, 3, 8, 8]], False)):
        toolkit_log.clear()
        r = RKNN()
        assert r.config(target_platform="rk3588") == 0
        assert r.load_onnx(m, input_size_list=sizes) == 0
        r.release()
        warnings = [rec.getMessage() for rec in toolkit_log.records if rec.levelname == "WARNING"]
        assert any("input 'x' has dims the model leaves open [-1, 3, -1, -1]: RKNN-Toolkit2 refuses" in w
                   for w in warnings) == warned, warnings


@pytest.mark.parametrize("quantize", [False, True])
def test_inference_takes_any_numeric_dtype_as_the_vendors_simulator_does(tmp_path, toolkit_log, quantize):
    """RKNN-Toolkit2 2.5.0's simulator casts int32, int8, bool and float16 arrays to a float or
    int8-quantized input (observed, with these results); rknnlite refused them with the
    runtime's dtype rule (librknnrt's)."""
    _, data = small_model_bytes()
    rng = np.random.default_rng(3)
    np.save(tmp_path / "s.npy", rng.uniform(0, 255, (1, 3, 8, 8)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("s.npy\n")
    r = RKNN()
    assert r.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]]) == 0
    assert r.load_onnx(data) == 0
    assert r.build(do_quantization=quantize, dataset=str(tmp_path / "ds.txt") if quantize else None) == 0
    assert r.init_runtime() == 0
    x = np.arange(8 * 8 * 3).reshape(1, 8, 8, 3) % 100
    for dtype in (np.int32, np.int8, np.int64, np.bool_, np.float16):
        got = r.inference([x.astype(dtype)])
        assert got is not None, (dtype, errors(toolkit_log))
        np.testing.assert_array_equal(got[0], r.inference([x.astype(dtype).astype(np.float32)])[0])
    r.release()
