"""How many inputs each kernel takes, and which of them must be present.

A node with too few or too many inputs, or an empty name (``""``) where an input is
required, used to reach its kernel and fail inside it with numpy's or Python's words
("list index out of range", "missing 4 required positional arguments"). The executor and
the toolkit's constant folding call :func:`check_inputs` before a kernel sees the node, so
the error names the node, the input and what the op takes.

The bounds follow the ONNX operator schemas, widened where this backend reads more:
``Conv``/``Gemm`` take a fused residual as input 3 (``toolkit.dense_residuals``, vendor int8
convs), and an op whose inputs changed across opsets accepts the widest form its kernel
reads. ``tests/test_op_arity.py`` checks that every schema's node of opset 7-22 fits.

:data:`FLOAT_INPUT_OPS` names the ops ONNX types as float-only: when such a kernel fails on an
integer or bool tensor, the executor says so instead of numpy's casting error (a failing call
only: the kernels that also take integers, as Floor or GlobalMaxPool do here, still do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from ....errors import ModelInvalidError

__all__ = ["Arity", "INPUT_ARITY", "FLOAT_INPUT_OPS", "check_inputs"]


@dataclass(frozen=True)
class Arity:
    """The inputs of one op type.

    ``required``: the names of the leading inputs that must be present (the ONNX names);
    ``most``: the most inputs a node may list, ``None`` for a variadic op;
    ``since``: ``(opset, names)`` pairs, the required inputs from that opset on (ascending).
    """

    required: Tuple[str, ...]
    most: Optional[int]
    since: Tuple[Tuple[int, Tuple[str, ...]], ...] = ()

    def required_at(self, opset: Optional[int]) -> Tuple[str, ...]:
        """The required inputs of a node of default-domain ``opset`` (the oldest form when
        the opset is unknown, e.g. a node lowered from a vendor file)."""
        names = self.required
        for version, later in self.since:
            if opset is not None and opset >= version:
                names = later
        return names


def _a(required: str, most: Optional[int], **since: str) -> Arity:
    return Arity(tuple(required.split()), most,
                 tuple(sorted((int(k[1:]), tuple(v.split())) for k, v in since.items())))


_UNARY = ("Abs", "Ceil", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu",
          "Log", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Softplus", "Sqrt", "Tanh")
_BINARY = ("Add", "And", "Div", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Mul", "Or", "Sub")
_REDUCE = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
           "ReduceProd", "ReduceSum", "ReduceSumSquare")
_ONE_INPUT = ("ArgMax", "ArgMin", "AveragePool", "Cast", "ConstantOfShape", "DepthToSpace", "Flatten",
              "GlobalAveragePool", "GlobalMaxPool", "Identity", "LRN", "LogSoftmax", "LpNormalization", "MaxPool",
              "NonZero", "Shape", "Size", "Softmax", "SpaceToDepth", "Transpose")

#: op type -> its inputs, for every kernel of the software backend
INPUT_ARITY: Dict[str, Arity] = {
    **{op: _a("X", 1) for op in _UNARY},
    **{op: _a("A B", 2) for op in _BINARY},
    **{op: _a("data", 2) for op in _REDUCE},
    **{op: _a("input", 1) for op in _ONE_INPUT},
    **{op: _a("data_0", None) for op in ("Max", "Mean", "Min", "Sum")},
    "BatchNormalization": _a("X scale B input_mean input_var", 5),
    "ChannelAffine": _a("x scale shift", 3),
    "ChannelSlice": _a("x", 1),
    "Clip": _a("input", 3),
    "Concat": _a("inputs", None),
    "Constant": _a("", 0),
    "Conv": _a("X W", 4),
    "ConvTranspose": _a("X W", 3),
    "Dropout": _a("data", 3),
    "Einsum": _a("Inputs", None),
    "Expand": _a("input shape", 2),
    "GRU": _a("X W R", 6),
    "Gather": _a("data indices", 2),
    "GatherElements": _a("data indices", 2),
    "Gemm": _a("A B", 4),
    "InstanceNormalization": _a("input scale B", 3),
    "LSTM": _a("X W R", 8),
    "LayerNormalization": _a("X Scale", 3),
    "MatMul": _a("A B", 2),
    "PRelu": _a("X slope", 2),
    "Pad": _a("data", 4, o11="data pads"),
    "Pow": _a("X Y", 2),
    "Range": _a("start limit delta", 3),
    "Reshape": _a("data", 2, o5="data shape"),
    "Resize": _a("X", 4),
    "ScatterND": _a("data indices updates", 3),
    "Slice": _a("data", 5, o10="data starts ends"),
    "Split": _a("input", 2),
    "Squeeze": _a("data", 2),
    "Tile": _a("input", 3, o6="input repeats"),
    "TopK": _a("X", 2, o10="X K"),
    "Unsqueeze": _a("data", 2, o13="data axes"),
    "Upsample": _a("X", 2, o9="X scales"),
    "VendorAddRequant": _a("acc residual", 2),
    "VendorCodes": _a("x", 1),
    "VendorLutActivation": _a("acc", 1),
    "VendorRequant": _a("acc", 1),
    "Where": _a("condition X Y", 3),
}


#: ops whose first input ONNX allows in float types only (its schemas' type constraint)
FLOAT_INPUT_OPS = frozenset(
    ("AveragePool", "BatchNormalization", "Conv", "ConvTranspose", "Elu", "Exp", "Gelu", "GlobalAveragePool",
     "GRU", "HardSigmoid", "HardSwish", "InstanceNormalization", "LayerNormalization", "LeakyRelu", "Log",
     "LogSoftmax", "LpNormalization", "LRN", "LSTM", "Reciprocal", "Selu", "Sigmoid", "Softmax", "Softplus",
     "Sqrt", "Tanh"))


def _inputs(n: int) -> str:
    return f"{n} input" + ("" if n == 1 else "s")


def check_inputs(name: str, op: str, inputs: Sequence[str], opset: Optional[int], stage: str) -> None:
    """Raise :class:`ModelInvalidError` when node ``name`` of type ``op`` lists more inputs than
    the op takes or leaves a required one out (an empty name); ``inputs`` are the node's input
    names, ``opset`` its default-domain opset (``None``: unknown). Ops without an entry pass."""
    arity = INPUT_ARITY.get(op)
    if arity is None:
        return
    required = arity.required_at(opset)
    if arity.most is not None and len(inputs) > arity.most:
        raise ModelInvalidError(
            f"node {name!r} ({op}) has {_inputs(len(inputs))}; {op} takes at most {arity.most}", op=stage)
    for i, input_name in enumerate(required):
        if i >= len(inputs) or not inputs[i]:
            given = "is empty" if i < len(inputs) else f"is missing (the node has {_inputs(len(inputs))})"
            raise ModelInvalidError(
                f"node {name!r} ({op}): input {i} ({input_name}) {given}; {op} needs "
                f"{', '.join(required)}" + ("" if arity.most is None or arity.most == len(required)
                                            else f" (and takes up to {arity.most} inputs)"),
                op=stage)
