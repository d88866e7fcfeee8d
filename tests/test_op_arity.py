"""A node with too few, too many or empty inputs is refused by name before its kernel runs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import onnx.defs  # noqa: E402
from onnx import helper  # noqa: E402
from onnx_builders import model, vi  # noqa: E402
from toolkit_logs import errors  # noqa: E402

from rknnlite import ModelInvalidError  # noqa: E402
from rknnlite.backends.software.executor import Executor  # noqa: E402
from rknnlite.backends.software.ops import KERNELS  # noqa: E402
from rknnlite.backends.software.ops.arity import FLOAT_INPUT_OPS, INPUT_ARITY  # noqa: E402
from rknnlite.model.graph import Graph, Node  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402

_PARAM = onnx.defs.OpSchema.FormalParameterOption


def test_every_kernel_declares_its_inputs():
    assert set(INPUT_ARITY) == set(KERNELS)


def _schemas(op):
    for opset in range(7, 23):
        try:
            yield opset, onnx.defs.get_schema(op, opset, "")
        except onnx.defs.SchemaError:
            continue


@pytest.mark.parametrize("op", sorted(op for op in KERNELS if onnx.defs.has(op)))
def test_every_schema_form_of_an_onnx_op_fits(op):
    """No node ONNX allows is refused: at every opset 7-22, the schema's required inputs are
    at least those required here, and its most inputs at most those taken here."""
    arity = INPUT_ARITY[op]
    for opset, schema in _schemas(op):
        variadic = any(p.option == _PARAM.Variadic for p in schema.inputs)
        leading = 0
        for p in schema.inputs:
            if p.option != _PARAM.Single:
                break
            leading += 1
        schema_required = schema.min_input if variadic else leading
        assert len(arity.required_at(opset)) <= schema_required, (opset, schema_required)
        if variadic:
            assert arity.most is None, opset
        elif arity.most is not None:
            assert arity.most >= len(schema.inputs), (opset, len(schema.inputs))


def test_the_required_inputs_follow_the_opset():
    assert INPUT_ARITY["Slice"].required_at(9) == ("data",)  # starts/ends were attributes
    assert INPUT_ARITY["Slice"].required_at(10) == ("data", "starts", "ends")
    assert INPUT_ARITY["Slice"].required_at(None) == ("data",)  # a vendor file's node: no opset


def _graph(node: Node, consts=None) -> Graph:
    return Graph([node], ["x"], list(node.outputs), dict(consts or {}))


W = np.ones((2, 3, 1, 1), np.float32)


@pytest.mark.parametrize("node, consts, message", [
    (Node("Add", "add", ["x"], ["y"]), {},
     "node 'add' (Add): input 1 (B) is missing (the node has 1 input); Add needs A, B"),
    (Node("Relu", "relu", ["x", "x"], ["y"]), {}, "node 'relu' (Relu) has 2 inputs; Relu takes at most 1"),
    (Node("Conv", "conv", ["x", ""], ["y"]), {},
     "node 'conv' (Conv): input 1 (W) is empty; Conv needs X, W (and takes up to 4 inputs)"),
    (Node("BatchNormalization", "bn", ["x", "s"], ["y"]), {"s": np.ones(3, np.float32)},
     "input 2 (B) is missing (the node has 2 inputs); BatchNormalization needs X, scale, B, input_mean, input_var"),
    (Node("Concat", "cat", [], ["y"], {"axis": 1}), {}, "node 'cat' (Concat): input 0 (inputs) is missing"),
    (Node("Slice", "slice", ["x", "st"], ["y"], {"_opset": 13}), {"st": np.array([0])},
     "input 2 (ends) is missing (the node has 2 inputs); Slice needs data, starts, ends (and takes up to 5"),
    (Node("Conv", "conv", ["x", "w", "", "x", "x"], ["y"]), {"w": W}, "has 5 inputs; Conv takes at most 4"),
])
def test_executor_refuses_a_node_by_its_inputs(node, consts, message):
    with pytest.raises(ModelInvalidError) as e:
        Executor(_graph(node, consts), "float32")
    assert message in str(e.value)


def test_an_optional_input_left_out_still_runs():
    """Conv without its bias, Clip with only a max, Resize with empty roi: present where needed."""
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2)
    conv = Executor(_graph(Node("Conv", "conv", ["x", "w"], ["y"]), {"w": W}), "float32")
    np.testing.assert_allclose(conv.run([x])[0], np.broadcast_to(x.sum(axis=1, keepdims=True), (1, 2, 2, 2)))
    clip = Executor(_graph(Node("Clip", "clip", ["x", "", "hi"], ["y"], {"_opset": 13}),
                           {"hi": np.array(5, np.float32)}), "float32")
    np.testing.assert_array_equal(clip.run([x])[0], np.minimum(x, 5))


def test_the_toolkit_names_the_node_at_build(toolkit_log):
    """An ONNX Add with one input (onnxruntime refuses it too) fails build, naming the node, where
    its kernel used to fail with 'list index out of range'."""
    m = model([helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r"], ["y"], name="add1")],
              [vi("x", [1, 3, 4, 4])], [vi("y", None)], [])
    r = RKNN()
    assert r.load_onnx(m.SerializeToString()) == 0
    assert r.build(do_quantization=False) == -1
    r.release()
    assert any("node 'add1' (Add): input 1 (B) is missing" in e for e in errors(toolkit_log)), errors(toolkit_log)


def test_a_constant_node_is_checked_before_folding():
    """The toolkit's constant folding runs kernels on constant nodes; a folded node with an empty
    required input is refused by name, not with 'NoneType' object has no attribute 'ndim'."""
    from rknnlite.toolkit.optimize import fold_constants

    graph = Graph([Node("Transpose", "t", [""], ["c"]), Node("Add", "add", ["x", "c"], ["y"])],
                  ["x"], ["y"], {})
    with pytest.raises(ModelInvalidError, match=r"node 't' \(Transpose\): input 0 \(input\) is empty"):
        fold_constants(graph)


@pytest.mark.parametrize("op", sorted(FLOAT_INPUT_OPS))
def test_the_float_input_ops_are_float_only_in_every_schema(op):
    for opset, schema in _schemas(op):
        constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
        allowed = constraints.get(schema.inputs[0].type_str, [schema.inputs[0].type_str])
        assert all("float" in t or "double" in t for t in allowed), (opset, allowed)


def test_a_float_op_failing_on_an_integer_tensor_says_so():
    """Was numpy's "Cannot cast ufunc 'exp' output from dtype('float16') to dtype('uint8')"."""
    state = Executor(Graph([Node("Sigmoid", "gate", ["x"], ["y"])], ["x"], ["y"]), "float32").new_state()
    with pytest.raises(ModelInvalidError) as e:
        state.run([np.arange(6, dtype=np.uint8).reshape(2, 3)])
    assert e.value.message == "node 'gate' (Sigmoid): input 0 is a uint8 tensor; Sigmoid takes float tensors"
    np.testing.assert_allclose(state.run([np.zeros((2, 3), np.float32)])[0], 0.5)
