"""The ONNX backend node test cases (``onnx.backend.test.case.node``), as a test helper.

``node_cases(op)`` lists the official cases of one op; ``run_with_kernels(case)``
runs a case's graph straight through the software kernels (no importer, no
executor), so each kernel can be checked against ONNX's reference outputs on its
own.  ``tests/test_conformance.py`` runs the same cases through the whole path.
"""

from __future__ import annotations

import functools
import warnings
from typing import List, Optional

import numpy as np

#: The ops the software backend must support (issue: software NPU backend).
REQUIRED_OPS = (
    "Conv ConvTranspose Gemm MatMul BatchNormalization Relu LeakyRelu PRelu Clip Sigmoid HardSigmoid "
    "HardSwish Tanh Elu Selu Softplus Gelu Erf Exp Log Sqrt Pow Abs Neg Reciprocal Floor Ceil Round Add Sub "
    "Mul Div Max Min Sum Mean Where Equal Greater Less GreaterOrEqual LessOrEqual Not And Or Cast MaxPool "
    "AveragePool GlobalAveragePool GlobalMaxPool LpNormalization Concat Split Slice Gather GatherElements "
    "ScatterND Reshape Flatten Squeeze Unsqueeze Transpose Expand Tile Pad Resize Upsample DepthToSpace "
    "SpaceToDepth Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL2 ArgMax "
    "ArgMin TopK LayerNormalization InstanceNormalization LSTM GRU Einsum Shape Size ConstantOfShape Range "
    "NonZero Identity Dropout"
).split()

# Element types the NPU runtime has no tensor type for; cases using them are out of scope.
_UNSUPPORTED_ELEM_TYPES = {"STRING", "BFLOAT16", "COMPLEX64", "COMPLEX128", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ",
                           "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1", "FLOAT8E8M0",
                           "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2"}


@functools.lru_cache(maxsize=1)
def _all_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # None = every op; older onnx releases (the last for Python 3.9) require the argument
        return tuple(collect_testcases(None))


def node_cases(op_type: str) -> List:
    """Official node cases whose graph is one ``op_type`` node (expanded variants excluded)."""
    out = []
    for case in _all_cases():
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type == op_type and nodes[0].domain in ("", "ai.onnx"):
            out.append(case)
    return out


def onnx_version() -> tuple:
    """The installed onnx release as ``(major, minor)``."""
    import onnx

    return tuple(int(p) for p in onnx.__version__.split(".")[:2])


#: Cases whose expected outputs older onnx releases (the last ones for Python 3.9) got
#: wrong, with the release that fixed them: the kernels follow the operator text.
_STALE_EXPECTATIONS = {
    "test_l2normalization_axis_0": ((1, 20), "expects nan for a zero vector; the operator defines 0"),
}


def unsupported_reason(case) -> Optional[str]:
    """Why a case is out of scope for an NPU runtime (an element type it lacks), or why its
    expected output cannot be trusted with the installed onnx; None when it is usable."""
    from onnx import TensorProto

    stale = _STALE_EXPECTATIONS.get(case.name)
    if stale is not None and onnx_version() < stale[0]:
        return f"onnx {'.'.join(map(str, onnx_version()))} {stale[1]} (fixed in {'.'.join(map(str, stale[0]))})"

    g = case.model.graph
    for vi in list(g.input) + list(g.output):
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            return f"{vi.name}: {kind} values (not tensors)"
        name = TensorProto.DataType.Name(vi.type.tensor_type.elem_type)
        if name in _UNSUPPORTED_ELEM_TYPES:
            return f"{vi.name}: element type {name}"
    return None


def as_array(x) -> np.ndarray:
    """Case data as numpy (newer onnx stores some cases' data as TensorProto)."""
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(x) if isinstance(x, TensorProto) else np.asarray(x)


def as_runtime_input(x) -> np.ndarray:
    """What the executor feeds a kernel: floats as float32, everything else unchanged."""
    x = as_array(x)
    return x.astype(np.float32) if x.dtype.kind == "f" else x


def run_with_kernels(case, inputs) -> List[np.ndarray]:
    """Run a node case's graph through the registered kernels (prepare, then call)."""
    from rknnlite.backends.software.ops import KERNELS
    from rknnlite.toolkit.onnx_attrs import default_opset, node_attrs

    opset = default_opset(case.model)
    g = case.model.graph
    env = {vi.name: as_runtime_input(x) for vi, x in zip(g.input, inputs)}
    for node in g.node:
        spec = KERNELS[node.op_type]
        args = [env[name] if name else None for name in node.input]
        attrs = node_attrs(node, opset)
        attrs["_num_outputs"] = len(node.output)
        if spec.prepare is not None:
            attrs = spec.prepare(attrs, [None] * len(args))
        results = spec.fn(args, attrs)
        for name, value in zip(node.output, results):
            if name:
                env[name] = value
    return [env[vi.name] for vi in g.output]


def assert_matches(case, actual: List[np.ndarray], expected: List[np.ndarray]) -> None:
    """Compare with the case's tolerances; float outputs compared in float32."""
    assert len(actual) == len(expected), f"{case.name}: {len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        e = as_array(e)
        a = np.asarray(a)
        assert a.shape == e.shape, f"{case.name} output {i}: shape {a.shape}, expected {e.shape}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float32).astype(np.float64),
                                       rtol=max(case.rtol, 1e-4), atol=max(case.atol, 1e-5),
                                       err_msg=f"{case.name} output {i}")
        else:
            assert a.dtype == e.dtype, f"{case.name} output {i}: dtype {a.dtype}, expected {e.dtype}"
            np.testing.assert_array_equal(a, e, err_msg=f"{case.name} output {i}")


def kernel_params(ops) -> list:
    """pytest params ``(case, data_set_index)`` for every in-scope case of ``ops``, with ids.

    Cases using element types the runtime lacks (see ``unsupported_reason``) are left
    out here; the conformance report lists them with their reason.
    """
    import pytest

    params = []
    for op in ops:
        for case in node_cases(op):
            if unsupported_reason(case) is None:
                params.extend(pytest.param(case, k, id=f"{case.name}[{k}]") for k in range(len(case.data_sets)))
    return params


def readonly(x) -> np.ndarray:
    """A read-only copy of ``x`` (kernels must never write into their inputs)."""
    x = np.array(x)
    x.setflags(write=False)
    return x


def run_node_checked(case, inputs, out=None, constant_inputs: bool = False) -> List[np.ndarray]:
    """Run a single-node case's kernel directly on read-only inputs, with or without ``out``,
    and assert the inputs are unchanged.  ``constant_inputs`` passes every input after the
    first to ``prepare`` as a constant, as the executor does for initializers."""
    from rknnlite.backends.software.ops import KERNELS
    from rknnlite.toolkit.onnx_attrs import default_opset, node_attrs

    g = case.model.graph
    node = g.node[0]
    env = {vi.name: readonly(as_runtime_input(x)) for vi, x in zip(g.input, inputs)}
    spec = KERNELS[node.op_type]
    args = [env[n] if n else None for n in node.input]
    attrs = node_attrs(node, default_opset(case.model))
    if spec.prepare is not None:
        consts = [None] + list(args[1:]) if constant_inputs else [None] * len(args)
        attrs = spec.prepare(attrs, consts)
    before = [None if a is None else a.copy() for a in args]
    result = spec.fn(args, attrs, out) if out is not None else spec.fn(args, attrs)
    for a, b in zip(args, before):
        if a is not None:
            np.testing.assert_array_equal(a, b)
    return result
