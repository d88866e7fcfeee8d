"""Static shapes that ONNX's import-time inference could not give the optimiser.

Import infers what ONNX's shape inference follows.  It stops at a ``Reshape`` whose target is
computed from the tensor (``Shape -> Cast -> Slice -> Concat``, as PaddlePaddle exports every
flatten and head reshape), and so at everything after it.  Once
:func:`~rknnlite.toolkit.optimize.fold_constants` has made such targets constants,
:func:`static_shapes` walks the graph in order and gives the outputs of the ops below their
shapes from their inputs' static shapes; any other op, or a dynamic dim (``-1``, ``None``),
leaves its outputs unknown, and so what follows.

* ``Reshape`` by a constant target (ONNX rules: ``0`` copies the input's dim unless
  ``allowzero``, one ``-1`` takes what is left; an inconsistent target stays unknown);
* ``Transpose`` (``perm``, reversed by default);
* ops whose output has their first input's shape (:data:`SAME_SHAPE_OPS`);
* elementwise binary ops (:data:`BROADCAST_OPS`), numpy broadcasting of both inputs;
* ``ReduceMean`` / ``ReduceSum`` / ``ReduceMax`` / ``ReduceMin`` over axes given as an
  attribute or a constant input, with ``keepdims`` (default 1);
* ``MatMul`` of operands of rank 2 or more (batch dims broadcast);
* ``Slice`` (constant starts, ends, axes, steps; attributes below opset 10), ``Squeeze`` /
  ``Unsqueeze`` (axes as an attribute or a constant input), ``Concat``, ``Flatten``;
* ``Conv`` with a constant weight and ``MaxPool`` / ``AveragePool`` (kernel, strides, pads,
  dilations, ``auto_pad``, ``ceil_mode``), ``GlobalAveragePool`` / ``GlobalMaxPool``.

The passes use these shapes to decide rewrites (a dense layer's rows, a LayerNorm's axis), so
an unknown shape only means a rewrite is not made.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..model.graph import Graph, Node

__all__ = ["static_shapes", "output_shape", "SAME_SHAPE_OPS", "BROADCAST_OPS"]

Shape = Tuple[int, ...]

#: ops whose (first) output has the shape of their first input
SAME_SHAPE_OPS = frozenset(
    "Relu Sigmoid Tanh HardSwish HardSigmoid Gelu Erf Sqrt Neg Abs Exp Log Reciprocal Clip LeakyRelu Elu Selu "
    "Softplus Softsign Identity Cast Softmax LogSoftmax LayerNormalization BatchNormalization Dropout Round Floor "
    "Ceil Sign Not".split())
#: elementwise ops whose output has the numpy broadcast of their inputs' shapes
BROADCAST_OPS = frozenset("Add Sub Mul Div Pow Max Min Equal Less Greater And Or Where PRelu Mod".split())
_REDUCE_OPS = frozenset(("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"))


def static_shapes(graph: Graph, shapes: Optional[Mapping[str, Sequence[int]]]) -> Dict[str, Shape]:
    """``shapes`` (a new dict) with the static shapes of node outputs it does not hold, in graph
    order, so that each result feeds the next (module doc)."""
    out: Dict[str, Shape] = {k: tuple(v) for k, v in (shapes or {}).items()}
    for name, value in graph.constants.items():
        out.setdefault(name, tuple(np.shape(value)))
    for node in graph.nodes:
        if node.outputs and node.outputs[0] and node.outputs[0] not in out:
            shape = output_shape(node, graph.constants, out)
            if shape is not None:
                out[node.outputs[0]] = shape
    return out


def output_shape(node: Node, consts: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]]) -> Optional[Shape]:
    """The static shape of ``node``'s first output from ``shapes`` of its inputs (module doc),
    or None (also for attributes of the wrong kind, which the op's own checks name)."""
    try:
        shape = _output_shape(node, consts, shapes)
    except (TypeError, ValueError, IndexError, OverflowError):  # e.g. strides given as one int
        return None
    if shape is None or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _static(shapes: Mapping[str, Shape], name: str) -> Optional[Shape]:
    shape = shapes.get(name) if name else None
    if shape is None or any(d is None or int(d) < 0 for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _output_shape(node: Node, consts: Mapping[str, np.ndarray], shapes: Mapping[str, Shape]) -> Optional[Shape]:
    ins = [_static(shapes, n) for n in node.inputs]
    if not ins or ins[0] is None:
        return None
    x = ins[0]
    if node.op in SAME_SHAPE_OPS:
        return x
    if node.op in BROADCAST_OPS:
        if any(s is None for s in ins):
            return None
        try:
            return tuple(np.broadcast_shapes(*ins))
        except ValueError:
            return None
    if node.op == "Transpose":
        perm = list(node.attrs.get("perm", range(len(x) - 1, -1, -1)))
        return tuple(x[p] for p in perm) if sorted(perm) == list(range(len(x))) else None
    if node.op == "Reshape":
        return _reshaped(node, consts, x)
    if node.op in _REDUCE_OPS:
        return _reduced(node, consts, x)
    if node.op == "Slice":
        return _sliced(node, consts, x)
    if node.op in ("Squeeze", "Unsqueeze"):
        axes = _axes(node, consts)
        if node.op == "Squeeze":
            if axes is None:
                return tuple(d for d in x if d != 1)
            axes = {a % len(x) for a in axes}
            return tuple(d for k, d in enumerate(x) if k not in axes) if all(x[a] == 1 for a in axes) else None
        if axes is None:
            return None
        rank = len(x) + len(axes)
        axes = {int(a) % rank for a in axes}
        if len(axes) != rank - len(x):  # an axis given twice: the kernel refuses it
            return None
        rest = iter(x)
        return tuple(1 if k in axes else next(rest) for k in range(rank))
    if node.op == "Concat":
        axis = int(node.attrs.get("axis", 0)) % len(x) if x else 0
        if any(s is None or len(s) != len(x) or s[:axis] + s[axis + 1:] != x[:axis] + x[axis + 1:] for s in ins):
            return None
        return x[:axis] + (sum(s[axis] for s in ins),) + x[axis + 1:]
    if node.op == "Flatten":
        axis = int(node.attrs.get("axis", 1)) % (len(x) + 1)
        return (int(np.prod(x[:axis], dtype=np.int64)), int(np.prod(x[axis:], dtype=np.int64)))
    if node.op in ("Conv", "MaxPool", "AveragePool"):
        return _windowed(node, consts, x)
    if node.op in ("GlobalAveragePool", "GlobalMaxPool"):
        return x[:2] + (1,) * (len(x) - 2)
    if node.op == "MatMul" and len(ins) == 2 and ins[1] is not None and len(x) >= 2 and len(ins[1]) >= 2:
        a, b = x, ins[1]
        if a[-1] != b[-2]:
            return None
        try:
            return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-1])
        except ValueError:
            return None
    return None


def _reshaped(node: Node, consts: Mapping[str, np.ndarray], src: Shape) -> Optional[Shape]:
    target = consts.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if target is None or target.dtype.kind not in "iu":
        return None
    dims = [int(d) for d in np.ravel(target)]
    if not node.attrs.get("allowzero", 0):
        dims = [src[k] if d == 0 and k < len(src) else d for k, d in enumerate(dims)]
    size, known = int(np.prod(src, dtype=np.int64)), int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if dims.count(-1) == 1 and known > 0 and size % known == 0:
        dims[dims.index(-1)] = size // known
    if all(d >= 0 for d in dims) and int(np.prod(dims, dtype=np.int64)) == size:
        return tuple(dims)
    return None


def _reduced(node: Node, consts: Mapping[str, np.ndarray], src: Shape) -> Optional[Shape]:
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        value = consts.get(node.inputs[1])
        if value is None:
            return None
        axes = [int(a) for a in np.ravel(value)]
    if axes is None:
        if node.attrs.get("noop_with_empty_axes", 0):
            return src
        axes = list(range(len(src)))
    axes = {int(a) % len(src) for a in axes} if src else set()
    if node.attrs.get("keepdims", 1):
        return tuple(1 if k in axes else d for k, d in enumerate(src))
    return tuple(d for k, d in enumerate(src) if k not in axes)


def _axes(node: Node, consts: Mapping[str, np.ndarray]) -> Optional[list]:
    """A node's ``axes``: the attribute, else its constant second input; None when neither."""
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1] and node.inputs[1] in consts:
        axes = np.ravel(consts[node.inputs[1]]).tolist()
    return None if axes is None else [int(a) for a in axes]


def _sliced(node: Node, consts: Mapping[str, np.ndarray], src: Shape) -> Optional[Shape]:
    if len(node.inputs) > 1:  # opset 10+: starts, ends[, axes[, steps]] as inputs
        parts = []
        for k in range(1, 5):
            name = node.inputs[k] if k < len(node.inputs) else ""
            if name and name not in consts:
                return None
            parts.append(np.ravel(consts[name]).tolist() if name else None)
        starts, ends, axes, steps = parts
    else:
        starts, ends, axes, steps = node.attrs.get("starts"), node.attrs.get("ends"), node.attrs.get("axes"), None
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    out = list(src)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = int(axis) % len(src)
        if int(step) == 0:
            return None
        out[axis] = len(range(*slice(int(start), int(end), int(step)).indices(src[axis])))
    return tuple(out)


def _windowed(node: Node, consts: Mapping[str, np.ndarray], src: Shape) -> Optional[Shape]:
    """A conv's or pool's output shape (NC + spatial dims)."""
    spatial = len(src) - 2
    if spatial < 1:
        return None
    if node.op == "Conv":
        w = consts.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if w is None or w.ndim != len(src):
            return None
        channels, kernel = int(w.shape[0]), list(node.attrs.get("kernel_shape", w.shape[2:]))
    else:
        channels, kernel = src[1], list(node.attrs.get("kernel_shape", ()))
    strides = list(node.attrs.get("strides", [1] * spatial))
    dilations = list(node.attrs.get("dilations", [1] * spatial))
    pads = list(node.attrs.get("pads", [0] * (2 * spatial)))
    if not (len(kernel) == len(strides) == len(dilations) == spatial and len(pads) == 2 * spatial):
        return None
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    ceil_mode = bool(node.attrs.get("ceil_mode", 0)) and node.op != "Conv"
    out = []
    for k in range(spatial):
        size, stride, reach = src[2 + k], int(strides[k]), int(dilations[k]) * (int(kernel[k]) - 1) + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-size // stride))
        elif auto_pad == "VALID":
            out.append((size - reach) // stride + 1)
        elif auto_pad == "NOTSET":
            span = size + int(pads[k]) + int(pads[k + spatial]) - reach
            n = (-(-span // stride) if ceil_mode else span // stride) + 1
            if ceil_mode and (n - 1) * stride >= size + int(pads[k]):
                n -= 1  # the last window must start inside the input or its leading pad
            out.append(n)
        else:
            return None
    return (src[0], channels) + tuple(out)
