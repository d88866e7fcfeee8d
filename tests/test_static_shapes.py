"""``static_shapes``: the shapes the optimiser infers where import could not, checked against
the shapes a run produces."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite.backends.software.executor import Executor
from rknnlite.model.graph import Graph, Node
from rknnlite.toolkit.static_shapes import static_shapes

RNG = np.random.default_rng(21)
C = {
    "w3": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32),
    "w1x3": RNG.standard_normal((5, 3, 1, 3)).astype(np.float32),
    "bias": np.ones(6, np.float32),
    "col": np.ones((5, 1), np.float32),
    "m": RNG.standard_normal((6, 2)).astype(np.float32),
    "shape": np.array([0, -1], np.int64),
    "axes": np.array([1], np.int64),
    "axes_last": np.array([-1], np.int64),
    "starts": np.array([1, -1], np.int64), "ends": np.array([2 ** 62, -6], np.int64),
    "saxes": np.array([1, 3], np.int64), "steps": np.array([2, -2], np.int64),
}
X = (1, 3, 5, 6)
CASES = {
    "transpose": [Node("Transpose", "t", ["x"], ["y"], {"perm": [0, 2, 3, 1]})],
    "transpose-default": [Node("Transpose", "t", ["x"], ["y"], {})],
    "relu-softmax": [Node("Relu", "r", ["x"], ["a"]), Node("Softmax", "s", ["a"], ["y"], {"axis": -1})],
    "add-broadcast": [Node("Add", "a", ["x", "bias"], ["y"])],
    "mul-column": [Node("Mul", "m", ["x", "col"], ["y"])],
    "reduce-keep": [Node("ReduceMean", "r", ["x"], ["y"], {"axes": [-1]})],
    "reduce-drop": [Node("ReduceSum", "r", ["x", "axes"], ["y"], {"keepdims": 0})],
    "reduce-all": [Node("ReduceMax", "r", ["x"], ["y"], {"keepdims": 0})],
    "matmul": [Node("MatMul", "mm", ["x", "m"], ["y"])],
    "matmul-batch": [Node("Transpose", "t", ["x"], ["xt"], {"perm": [0, 1, 3, 2]}), Node("MatMul", "mm", ["x", "xt"], ["y"])],
    "reshape": [Node("Reshape", "r", ["x", "shape"], ["y"])],
    "slice": [Node("Slice", "s", ["x", "starts", "ends", "saxes", "steps"], ["y"])],
    "slice-attrs": [Node("Slice", "s", ["x"], ["y"], {"starts": [0, 2], "ends": [1, 100], "axes": [0, 2]})],
    "squeeze-unsqueeze": [Node("Unsqueeze", "u", ["x"], ["a"], {"axes": [0, -1]}),
                          Node("Squeeze", "s", ["a", "axes_last"], ["y"])],
    "concat": [Node("Relu", "r", ["x"], ["a"]), Node("Concat", "c", ["x", "a"], ["y"], {"axis": -1})],
    "flatten": [Node("Flatten", "f", ["x"], ["y"], {"axis": 2})],
    "conv": [Node("Conv", "c", ["x", "w3"], ["y"], {"pads": [1, 0, 1, 2], "strides": [2, 2], "dilations": [1, 2]})],
    "conv-same": [Node("Conv", "c", ["x", "w1x3"], ["y"], {"auto_pad": "SAME_UPPER", "strides": [2, 3]})],
    "maxpool-ceil": [Node("MaxPool", "p", ["x"], ["y"], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1})],
    "avgpool": [Node("AveragePool", "p", ["x"], ["y"], {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 1, 1, 1]})],
    "global-pool": [Node("GlobalAveragePool", "p", ["x"], ["y"])],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_static_shapes_are_the_shapes_a_run_gives(case):
    nodes = CASES[case]
    graph = Graph(nodes, ["x"], ["y"], {k: v for k, v in C.items() if any(k in n.inputs for n in nodes)})
    names = [o for n in nodes for o in n.outputs]
    values = Executor(graph, "float32", expose=names).run([RNG.standard_normal(X).astype(np.float32)])[1:]
    inferred = static_shapes(graph, {"x": X})
    assert {n: inferred.get(n) for n in names} == {n: v.shape for n, v in zip(names, values)}


@pytest.mark.parametrize("known", [{"x": (-1, 3, 5, 6)}, {}])
def test_a_dynamic_or_unknown_input_leaves_what_follows_unknown(known):
    graph = Graph(CASES["conv"] + [Node("Relu", "r", ["y"], ["z"])], ["x"], ["z"], {"w3": C["w3"]})
    inferred = static_shapes(graph, known)
    assert inferred.get("y") is None and inferred.get("z") is None


def test_an_op_it_does_not_know_stops_the_walk():
    graph = Graph([Node("TopK", "k", ["x", "kk"], ["v", "i"], {}), Node("Relu", "r", ["v"], ["y"])], ["x"], ["y"],
                  {"kk": np.array([2], np.int64)})
    inferred = static_shapes(graph, {"x": X})
    assert inferred.get("v") is None and inferred.get("y") is None


@pytest.mark.parametrize("attrs", [{"strides": 1}, {"kernel_shape": 3.0}, {"pads": 1}, {"dilations": [1, "x"]}])
def test_attributes_of_the_wrong_kind_leave_the_shape_unknown(attrs):
    # the op's own checks name such an attribute when the model loads; the walk must not crash
    graph = Graph([Node("Conv", "c", ["x", "w3"], ["y"], attrs), Node("Relu", "r", ["y"], ["z"])], ["x"], ["z"],
                  {"w3": C["w3"]})
    inferred = static_shapes(graph, {"x": X})
    assert inferred.get("y") is None and inferred.get("z") is None


def test_an_unsqueeze_axis_given_twice_leaves_the_shape_unknown():
    graph = Graph([Node("Unsqueeze", "u", ["x", "twice"], ["y"])], ["x"], ["y"], {"twice": np.array([1, 1], np.int64)})
    assert static_shapes(graph, {"x": X}).get("y") is None
