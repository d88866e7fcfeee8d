"""Damaged ONNX models through the toolkit: every one either converts and runs, or is refused
with a typed error the toolkit names; none reaches the "unexpected <exception>" report that
``RKNN`` keeps for converter bugs, and no exception escapes the API.

The mutants are seeded edits of two small graphs that cover the common op families: an
attribute's value or kind, an initializer's dtype or shape, an op type swapped, an input
renamed or dropped, a node removed, the graph input's shape or element type.  Each runs
``load_onnx``, ``build`` (float, or int8 on a one-sample dataset) and one ``inference``.
Defects such runs found (each now has its own test): non-finite float attributes the model
file could not hold, ``static_shapes`` on malformed Conv attributes and on an Unsqueeze naming
an axis twice, and float builds that wrote a file ``init_runtime`` refused.
"""

from __future__ import annotations

import copy
import logging
import random

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import AttributeProto, TensorProto, helper, numpy_helper  # noqa: E402
from onnx_builders import init, model, vi  # noqa: E402

from rknnlite.toolkit import RKNN  # noqa: E402

#: mutants per test case (four cases: 240 in all)
MUTANTS = 60
#: op types a node may be swapped to (some with no kernel: refused by name)
OP_TYPES = ("Conv", "Relu", "Add", "Mul", "MaxPool", "AveragePool", "Concat", "Sigmoid", "Slice", "Reshape", "MatMul",
            "Softmax", "Transpose", "Resize", "Gemm", "Split", "BatchNormalization", "LeakyRelu", "Clip", "Pad",
            "GlobalAveragePool", "Flatten", "Squeeze", "Unsqueeze", "ReduceMean", "HardSwish", "Gather",
            "ConvTranspose", "LayerNormalization", "Hardmax")


def _conv_graph(rng: np.random.Generator):
    """Conv, Relu, a residual Add, MaxPool, Concat, Sigmoid, Slice, Reshape, MatMul, Softmax."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r"], ["a"]),
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Concat", ["p", "p"], ["cc"], axis=1),
             helper.make_node("Sigmoid", ["cc"], ["s"]),
             helper.make_node("Slice", ["s", "starts", "ends", "axes"], ["sl"]),
             helper.make_node("Reshape", ["sl", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "g"], ["mm"]),
             helper.make_node("Softmax", ["mm"], ["y"], axis=-1)]
    inits = [init("w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
             init("b", rng.standard_normal(8).astype(np.float32)),
             init("w2", rng.standard_normal((8, 8, 1, 1)).astype(np.float32)),
             init("shape", np.array([1, -1], np.int64)), init("starts", np.array([0], np.int64)),
             init("ends", np.array([8], np.int64)), init("axes", np.array([1], np.int64)),
             init("g", rng.standard_normal((8 * 8 * 8, 10)).astype(np.float32))]
    return model(nodes, [vi("x", [1, 3, 16, 16])], [vi("y", None)], inits, opset=13)


def _layout_graph(rng: np.random.Generator):
    """Pad, Resize, Split, Transpose, ReduceMean, Gather, GlobalAveragePool, Flatten, Concat,
    LayerNormalization, Gemm, HardSwish."""
    nodes = [helper.make_node("Pad", ["x", "pads"], ["pd"], mode="reflect"),
             helper.make_node("Resize", ["pd", "", "scales"], ["rs"], mode="linear"),
             helper.make_node("Split", ["rs", "split"], ["s1", "s2"], axis=1),
             helper.make_node("Transpose", ["s1"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("ReduceMean", ["t"], ["rm"], axes=[1, 2], keepdims=0),
             helper.make_node("Gather", ["s2", "idx"], ["ga"], axis=1),
             helper.make_node("GlobalAveragePool", ["ga"], ["gp"]),
             helper.make_node("Flatten", ["gp"], ["fl"], axis=1),
             helper.make_node("Concat", ["rm", "fl"], ["cc"], axis=1),
             helper.make_node("LayerNormalization", ["cc", "lg", "lb"], ["ln"], axis=-1, epsilon=1e-5),
             helper.make_node("Gemm", ["ln", "gw", "gb"], ["gm"], transB=1),
             helper.make_node("HardSwish", ["gm"], ["y"])]
    inits = [init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
             init("scales", np.array([1, 1, 2, 2], np.float32)), init("split", np.array([1, 2], np.int64)),
             init("idx", np.array([0, 1], np.int64)), init("lg", np.ones(3, np.float32)),
             init("lb", np.zeros(3, np.float32)), init("gw", rng.standard_normal((5, 3)).astype(np.float32)),
             init("gb", np.zeros(5, np.float32))]
    return model(nodes, [vi("x", [1, 3, 16, 16])], [vi("y", None)], inits, opset=17)


def _mutate(m, rng: random.Random):
    """A copy of ``m`` with one seeded edit (module doc)."""
    m = copy.deepcopy(m)
    g = m.graph
    kind = rng.randrange(8)
    node = rng.choice(g.node)
    if kind == 0 and node.attribute:  # an attribute's value, sometimes its kind
        a = rng.choice(node.attribute)
        if a.type == AttributeProto.INTS:
            del a.ints[:]
            a.ints.extend(rng.choice([[], [0], [-1], [1 << 40], [3, 3, 3], [2, -2, 1, 1]]))
        elif a.type == AttributeProto.INT:
            a.i = rng.choice([0, -1, -5, 99, 1 << 40])
        elif a.type == AttributeProto.FLOAT:
            a.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e30])
        if rng.random() < 0.3:
            a.type = rng.choice([AttributeProto.FLOAT, AttributeProto.STRING, AttributeProto.INTS])
    elif kind == 0:  # an attribute the op may not have
        node.attribute.append(helper.make_attribute(rng.choice(["axis", "pads", "strides", "group", "perm"]),
                                                    rng.choice([0, -3, [1, 2], 7])))
    elif kind == 1:  # an initializer's dtype or shape
        t = rng.choice(g.initializer)
        arr = numpy_helper.to_array(t)
        edit = rng.randrange(4)
        if edit == 0 and arr.size > 1:
            arr = arr.reshape(-1)[:rng.randrange(1, arr.size)]
        elif edit == 1:
            arr = arr.astype(rng.choice([np.float16, np.int32, np.int64, np.float64, np.uint8, np.bool_]))
        elif edit == 2:
            arr = np.array([], arr.dtype)
        else:
            arr = arr.reshape(arr.shape + (1,))
        g.initializer.remove(t)
        g.initializer.append(numpy_helper.from_array(arr, t.name))
    elif kind == 2:
        node.op_type = rng.choice(OP_TYPES)
    elif kind == 3 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(["", "missing", node.output[0], "x"])
    elif kind == 4:
        g.node.remove(node)
    elif kind == 5:  # the graph input's shape
        dim = g.input[0].type.tensor_type.shape.dim[rng.randrange(4)]
        value = rng.choice([0, 1, 2, 5, 1 << 20, None])
        if value is None:
            dim.dim_param = "N"
        else:
            dim.dim_value = value
    elif kind == 6:  # the graph input's element type
        g.input[0].type.tensor_type.elem_type = rng.choice([TensorProto.INT64, TensorProto.FLOAT16,
                                                            TensorProto.UINT8, TensorProto.BOOL])
    else:  # a second producer of one tensor
        g.node[1].output[0] = g.node[0].output[0]
    return m


class _Reports(logging.Handler):
    """The toolkit's error records that carry a traceback: what ``RKNN`` logs as "unexpected"."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.unexpected = []

    def emit(self, record):
        if record.exc_info:
            self.unexpected.append(record.getMessage())


@pytest.mark.parametrize("seed", range(4))
def test_damaged_onnx_models_convert_or_are_refused_by_name(tmp_path, seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    bases = [_conv_graph(nrng), _layout_graph(nrng)]
    sample = tmp_path / "x.npy"
    np.save(sample, nrng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    dataset = tmp_path / "dataset.txt"
    dataset.write_text(f"{sample}\n")
    reports = _Reports()
    logger = logging.getLogger("rknnlite")
    logger.addHandler(reports)
    outcomes = {"refused at load": 0, "refused at build": 0, "ran": 0}
    try:
        for k in range(MUTANTS):
            mutant = rng.choice(bases)
            for _ in range(rng.choice([1, 1, 2])):
                mutant = _mutate(mutant, rng)
            rknn = RKNN(verbose=False)
            try:
                assert rknn.config(target_platform="rk3588") == 0
                if rknn.load_onnx(mutant.SerializeToString()) != 0:
                    outcomes["refused at load"] += 1
                    continue
                if rknn.build(do_quantization=rng.random() < 0.5, dataset=str(dataset)) != 0:
                    outcomes["refused at build"] += 1
                    continue
                if rknn.init_runtime() == 0 and rknn.inference(inputs=[nrng.standard_normal((1, 16, 16, 3))
                                                                       .astype(np.float32)]) is not None:
                    outcomes["ran"] += 1
            finally:
                rknn.release()
            assert not reports.unexpected, f"mutant {k}: {reports.unexpected}"
    finally:
        logger.removeHandler(reports)
    assert not reports.unexpected, reports.unexpected
    # the mutants reach every stage (the harness is not refused wholesale at load)
    assert all(outcomes.values()), outcomes
