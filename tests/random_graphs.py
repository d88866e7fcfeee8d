"""Seeded random ONNX graphs of the shapes real models have, for differential runs against
onnxruntime (``test_differential_graphs.py``).

Two families:

* :func:`image_graph`: an NCHW image through 2-6 random blocks: convolutions (1x1 to 7x7,
  strided, dilated, padded asymmetrically, grouped, depthwise, with bias and BatchNormalization),
  activations (Relu, Relu6, Clip, LeakyRelu, Sigmoid, x*Sigmoid(x), HardSigmoid, HardSwish,
  PRelu, Tanh), residual Adds, Concats, channel Splits, channel shuffles, per-channel Mul/Add/Sub
  in either operand order, Max/Average pools (ceil mode, padding), global means, Pads (constant,
  reflect, edge), ConvTranspose, Slices, NHWC round trips, Resizes (nearest and linear by scales,
  linear by sizes), channel reductions and element-wise math; sometimes a Flatten, Gemm and
  Softmax head.
* :func:`idiom_graph`: image blocks mixed with the idioms exporters write: PyTorch's
  Shape/Gather/Unsqueeze/Concat reshape chains, a GroupNorm as its arithmetic,
  InstanceNormalization, an L2 normalisation, Expand, Tile, Where on a comparison, Cast round
  trips, Unsqueeze/Squeeze pairs, TopK, MatMul by a constant, a self-attention over channels,
  Transposes and their inverses; sometimes an ArgMax head.
* :func:`token_graph`: (N, T, D) tokens through 1-2 transformer layers: LayerNormalization or its
  opset-13 chain, Linear layers as MatMul + Add, multi-head attention (Reshape, Transpose, MatMul,
  scaled Softmax), residual Adds, a GELU (Erf form), SiLU or Relu MLP; sometimes a mean-pooled
  Linear head.

Nearest Resize by ``sizes`` is left out: where an output position falls exactly on an input pixel
onnxruntime's float32 arithmetic sometimes takes the pixel before it, so it is no oracle there
(``test_ops_resize_rnn.py::test_nearest_by_sizes_lands_on_the_exact_source_pixel``).
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
from onnx import TensorProto, helper, numpy_helper

__all__ = ["idiom_graph", "image_graph", "token_graph", "with_taps"]

Shape = Tuple[int, ...]


class _Builder:
    """Nodes and initializers of one graph, with unique names."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.inits, self.count = rng, [], [], 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array) -> str:
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: List[str], outputs: int = 1, **attrs):
        names = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=self.name(f"n_{op}_"), **attrs))
        return names if outputs > 1 else names[0]

    def model(self, out: str, in_shape: Shape, seed: int):
        graph = helper.make_graph(self.nodes, f"g{seed}", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                          list(in_shape))],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _act(g: _Builder, x: str, shape: Shape) -> Tuple[str, Shape]:
    r = g.rng
    kind = r.choice(["Relu", "Relu6", "Clip", "LeakyRelu", "Sigmoid", "SiLU", "HardSigmoid", "HardSwish", "PRelu",
                     "Tanh"])
    if kind == "Relu6":
        return g.node("Clip", [x, g.const(np.float32(0)), g.const(np.float32(6))]), shape
    if kind == "Clip":
        lo, hi = np.float32(r.uniform(-1, 0)), np.float32(r.uniform(0.5, 3))
        return g.node("Clip", [x, g.const(lo), g.const(hi)]), shape
    if kind == "LeakyRelu":
        return g.node("LeakyRelu", [x], alpha=float(r.choice([0.01, 0.1, 0.2]))), shape
    if kind == "SiLU":
        return g.node("Mul", [x, g.node("Sigmoid", [x])]), shape
    if kind == "HardSigmoid":
        return g.node("HardSigmoid", [x], alpha=float(r.choice([0.2, 1 / 6])), beta=0.5), shape
    if kind == "PRelu":
        return g.node("PRelu", [x, g.const((0.25 * r.random((shape[1], 1, 1))).astype(np.float32))]), shape
    return g.node(str(kind), [x]), shape


def _conv_size(n: int, k: int, s: int, d: int, p0: int, p1: int) -> int:
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


def _conv(g: _Builder, x: str, shape: Shape, depthwise: bool) -> Tuple[str, Shape]:
    r = g.rng
    N, C, H, W = shape
    k = int(r.choice([1, 1, 3, 3, 3, 5, 7]))
    s = int(r.choice([1, 1, 1, 2]))
    d = int(r.choice([1, 1, 1, 2])) if k > 1 else 1
    pads = [int(v) for v in r.integers(0, k, 4)] if r.random() < 0.3 else [(d * (k - 1)) // 2] * 4
    oh, ow = _conv_size(H, k, s, d, pads[0], pads[2]), _conv_size(W, k, s, d, pads[1], pads[3])
    if oh < 1 or ow < 1:
        return x, shape
    if depthwise:
        group = C
        M = C * int(r.choice([1, 1, 2]))
    else:
        group = int(r.choice([1, 1, 1, 2, 4])) if C % 4 == 0 else 1
        M = max(group, int(r.choice([4, 8, 16, 24, 32, 48, 64])) // group * group)
    w = (r.standard_normal((M, C // group, k, k)) / np.sqrt(C // group * k * k)).astype(np.float32)
    inputs = [x, g.const(w)]
    if r.random() < 0.7:
        inputs.append(g.const((r.standard_normal(M) * 0.1).astype(np.float32)))
    y = g.node("Conv", inputs, kernel_shape=[k, k], strides=[s, s], dilations=[d, d], pads=pads, group=group)
    if r.random() < 0.4:
        stats = [1 + 0.2 * r.standard_normal(M), 0.1 * r.standard_normal(M), 0.1 * r.standard_normal(M),
                 0.5 + r.random(M)]
        y = g.node("BatchNormalization", [y] + [g.const(v.astype(np.float32)) for v in stats], epsilon=1e-5)
    shape = (N, M, oh, ow)
    return _act(g, y, shape) if r.random() < 0.7 else (y, shape)


def _pool(g: _Builder, x: str, shape: Shape) -> Tuple[str, Shape]:
    r = g.rng
    N, C, H, W = shape
    op = str(r.choice(["MaxPool", "AveragePool"]))
    k, s = int(r.choice([2, 3, 3, 5])), int(r.choice([1, 2, 2]))
    p = int(r.integers(0, k // 2 + 1)) if r.random() < 0.5 else 0
    ceil = int(r.random() < 0.3)
    if k > H + 2 * p or k > W + 2 * p:
        return x, shape
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, ceil_mode=ceil)
    if op == "AveragePool":
        attrs["count_include_pad"] = int(r.random() < 0.5)

    def size(n):
        return -(-(n + 2 * p - k) // s) + 1 if ceil else (n + 2 * p - k) // s + 1

    # a ceil-mode window that would start in the right padding is dropped by the kernels (and
    # PyTorch), not by ONNX's shape inference, which onnxruntime then fails on: left out
    if ceil and any((size(n) - 1) * s >= n + p for n in (H, W)):
        attrs["ceil_mode"] = ceil = 0
    return g.node(op, [x], **attrs), (N, C, size(H), size(W))


def _resize(g: _Builder, x: str, shape: Shape) -> Tuple[str, Shape]:
    r = g.rng
    N, C, H, W = shape
    if r.random() < 0.5:
        if H * W * 4 * C > 200_000:
            return x, shape
        mode = str(r.choice(["nearest", "linear"]))
        attrs = dict(mode=mode)
        if mode == "linear":
            attrs["coordinate_transformation_mode"] = str(r.choice(["half_pixel", "align_corners", "asymmetric",
                                                                    "pytorch_half_pixel"]))
        else:
            attrs["coordinate_transformation_mode"] = str(r.choice(["asymmetric", "half_pixel"]))
            attrs["nearest_mode"] = str(r.choice(["floor", "round_prefer_floor", "round_prefer_ceil"]))
        return g.node("Resize", [x, "", g.const(np.array([1, 1, 2, 2], np.float32))], **attrs), (N, C, 2 * H, 2 * W)
    oh, ow = int(r.integers(2, 2 * H + 2)), int(r.integers(2, 2 * W + 2))
    if oh * ow * C > 200_000:
        return x, shape
    attrs = dict(mode="linear", coordinate_transformation_mode=str(r.choice(["half_pixel", "align_corners",
                                                                             "asymmetric"])))
    return g.node("Resize", [x, "", "", g.const(np.array([N, C, oh, ow], np.int64))], **attrs), (N, C, oh, ow)


def _elementwise(g: _Builder, x: str, shape: Shape) -> Tuple[str, Shape]:
    r = g.rng
    op = str(r.choice(["Div", "Sub", "Pow", "Sqrt", "Exp", "Abs", "Neg", "Max", "Min", "Softmax", "Erf"]))
    if op == "Div":
        return g.node("Div", [x, g.const((1 + r.random((1, shape[1], 1, 1))).astype(np.float32))]), shape
    if op == "Sub":
        return g.node("Sub", [x, _act(g, x, shape)[0]]), shape
    if op == "Pow":
        return g.node("Pow", [x, g.const(np.float32(2))]), shape
    if op == "Sqrt":
        return g.node("Sqrt", [g.node("Abs", [x])]), shape
    if op == "Exp":
        return g.node("Exp", [g.node("Tanh", [x])]), shape
    if op in ("Max", "Min"):
        return g.node(op, [x, g.const(np.float32(r.uniform(-0.5, 0.5)))]), shape
    if op == "Softmax":
        return g.node("Softmax", [x], axis=int(r.choice([1, -1]))), shape
    return g.node(op, [x]), shape


def _block(g: _Builder, x: str, shape: Shape) -> Tuple[str, Shape]:
    """One random block on ``x`` (N, C, H, W)."""
    r = g.rng
    N, C, H, W = shape
    kind = r.choice(["conv", "conv", "conv", "dw", "pool", "mean", "concat", "residual", "affine", "resize",
                     "shuffle", "act", "split", "pad", "deconv", "slice", "nhwc", "reduce", "elementwise"])
    if kind in ("conv", "dw"):
        return _conv(g, x, shape, kind == "dw")
    if kind == "act":
        return _act(g, x, shape)
    if kind == "pool":
        return _pool(g, x, shape)
    if kind == "resize":
        return _resize(g, x, shape)
    if kind == "elementwise":
        return _elementwise(g, x, shape)
    if kind == "mean":
        if r.random() < 0.5:
            return g.node("GlobalAveragePool", [x]), (N, C, 1, 1)
        return g.node("ReduceMean", [x], axes=[2, 3], keepdims=1), (N, C, 1, 1)
    if kind == "concat":
        y, ys = _block(g, x, shape)
        return (g.node("Concat", [x, y], axis=1), (N, C + ys[1], H, W)) if ys[2:] == shape[2:] else (y, ys)
    if kind == "residual":
        y, ys = _block(g, *_block(g, x, shape))
        if ys != shape:
            return y, ys
        z = g.node("Add", [y, x] if r.random() < 0.5 else [x, y])
        return _act(g, z, shape) if r.random() < 0.5 else (z, shape)
    if kind == "affine":
        cshape = [1, C, 1, 1] if r.random() < 0.8 else [1, 1, 1, 1]
        a = g.const((1 + 0.3 * r.standard_normal(cshape)).astype(np.float32))
        y = g.node("Mul", [x, a] if r.random() < 0.5 else [a, x])
        b = g.const((0.3 * r.standard_normal(cshape)).astype(np.float32))
        return g.node(str(r.choice(["Add", "Sub"])), [y, b] if r.random() < 0.5 else [b, y]), shape
    if kind == "shuffle":
        if C % 2:
            return x, shape
        y = g.node("Reshape", [x, g.const(np.array([N, 2, C // 2, H, W], np.int64))])
        y = g.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return g.node("Reshape", [y, g.const(np.array([N, C, H, W], np.int64))]), shape
    if kind == "split":
        if C < 2:
            return x, shape
        a = int(r.integers(1, C))
        first, second = g.node("Split", [x, g.const(np.array([a, C - a], np.int64))], outputs=2, axis=1)
        y, ys = _block(g, first, (N, a, H, W))
        if ys[2:] == (H, W):
            return g.node("Concat", [y, second], axis=1), (N, ys[1] + C - a, H, W)
        return y, ys
    if kind == "pad":
        mode = str(r.choice(["constant", "reflect", "edge"]))
        top, left, bottom, right = (int(v) for v in r.integers(0, 3, 4))
        if mode == "reflect" and (max(top, bottom) >= H or max(left, right) >= W):
            return x, shape
        inputs = [x, g.const(np.array([0, 0, top, left, 0, 0, bottom, right], np.int64))]
        if mode == "constant" and r.random() < 0.5:
            inputs.append(g.const(np.array(r.uniform(-1, 1), np.float32)))
        return g.node("Pad", inputs, mode=mode), (N, C, H + top + bottom, W + left + right)
    if kind == "deconv":
        k, s = int(r.choice([2, 3, 4])), int(r.choice([1, 2]))
        p, extra = int(r.integers(0, k // 2 + 1)), int(r.integers(0, s))
        group = int(r.choice([1, 1, C])) if C > 1 else 1
        M = C if group == C else int(r.choice([4, 8, 16]))
        oh, ow = (H - 1) * s - 2 * p + k + extra, (W - 1) * s - 2 * p + k + extra
        if oh < 1 or ow < 1 or oh * ow * M > 300_000:
            return x, shape
        w = (r.standard_normal((C, M // group, k, k)) / np.sqrt(C * k * k / s / s)).astype(np.float32)
        inputs = [x, g.const(w)]
        if r.random() < 0.5:
            inputs.append(g.const((0.1 * r.standard_normal(M)).astype(np.float32)))
        return g.node("ConvTranspose", inputs, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=group,
                      output_padding=[extra, extra]), (N, M, oh, ow)
    if kind == "slice":
        if H < 3:
            return x, shape
        h0, h1 = sorted(int(v) for v in r.choice(H + 1, 2, replace=False))
        step = int(r.choice([1, 1, 2]))
        y = g.node("Slice", [x, g.const(np.array([h0, 0], np.int64)), g.const(np.array([h1, W], np.int64)),
                             g.const(np.array([2, 3], np.int64)), g.const(np.array([step, 1], np.int64))])
        return y, (N, C, len(range(h0, h1, step)), W)
    if kind == "nhwc":
        y = g.node("Transpose", [x], perm=[0, 2, 3, 1])
        if r.random() < 0.5:
            y = g.node("Mul", [y, g.const((1 + 0.2 * r.standard_normal(C)).astype(np.float32))])
        return g.node("Transpose", [y], perm=[0, 3, 1, 2]), shape
    # reduce over channels
    op = str(r.choice(["ReduceMax", "ReduceMean", "ReduceSum", "ReduceMin"]))
    if op == "ReduceSum":
        return g.node(op, [x, g.const(np.array([1], np.int64))], keepdims=1), (N, 1, H, W)
    return g.node(op, [x], axes=[1], keepdims=1), (N, 1, H, W)


def image_graph(seed: int):
    """``(onnx.ModelProto, input shape)``: an opset-17 NCHW graph (see the module docstring)."""
    rng = np.random.default_rng(seed)
    g = _Builder(rng)
    N, C = int(rng.choice([1, 1, 1, 2])), int(rng.choice([1, 3, 3, 4, 8, 16]))
    H = int(rng.integers(5, 40))
    W = int(rng.integers(5, 40)) if rng.random() < 0.5 else H
    x, shape = "x", (N, C, H, W)
    for _ in range(int(rng.integers(2, 7))):
        x, shape = _block(g, x, shape)
    features = int(np.prod(shape[1:]))
    if rng.random() < 0.3 and features <= 4096:
        M = int(rng.choice([10, 16]))
        w = (rng.standard_normal((M, features)) / np.sqrt(features)).astype(np.float32)
        x = g.node("Gemm", [g.node("Flatten", [x], axis=1), g.const(w), g.const(np.zeros(M, np.float32))], transB=1)
        if rng.random() < 0.5:
            x = g.node("Softmax", [x], axis=1)
    if x == "x":  # every block left the input alone
        x = g.node("Relu", [x])
    return g.model(x, (N, C, H, W), seed), (N, C, H, W)


def _idiom(g: _Builder, x: str, shape: Shape) -> Tuple[str, Shape]:
    """One exporter idiom on ``x`` (N, C, H, W)."""
    r = g.rng
    N, C, H, W = shape
    kind = r.choice(["shape_chain", "instance_norm", "group_norm", "l2_norm", "expand", "tile", "where", "cast",
                     "unsqueeze", "topk", "matmul", "channel_attention", "transpose"])
    if kind == "shape_chain":  # x.view(x.size(0), x.size(1), -1).softmax(-1).view_as(x)
        dims = g.node("Shape", [x])
        parts = [g.node("Unsqueeze", [g.node("Gather", [dims, g.const(np.array(i, np.int64))], axis=0),
                                      g.const(np.array([0], np.int64))]) for i in (0, 1)]
        y = g.node("Reshape", [x, g.node("Concat", parts + [g.const(np.array([-1], np.int64))], axis=0)])
        return g.node("Reshape", [g.node("Softmax", [y], axis=-1), g.node("Shape", [x])]), shape
    if kind == "instance_norm":
        scale, bias = 1 + 0.1 * r.standard_normal(C), 0.1 * r.standard_normal(C)
        return g.node("InstanceNormalization", [x, g.const(scale.astype(np.float32)), g.const(bias.astype(np.float32))],
                      epsilon=1e-5), shape
    if kind == "group_norm":  # nn.GroupNorm below opset 18
        groups = int(r.choice([d for d in (1, 2, 4) if C % d == 0]))
        y = g.node("Reshape", [x, g.const(np.array([N, groups, -1], np.int64))])
        centred = g.node("Sub", [y, g.node("ReduceMean", [y], axes=[2], keepdims=1)])
        var = g.node("ReduceMean", [g.node("Mul", [centred, centred])], axes=[2], keepdims=1)
        y = g.node("Div", [centred, g.node("Sqrt", [g.node("Add", [var, g.const(np.float32(1e-2))])])])
        y = g.node("Reshape", [y, g.const(np.array([N, C, H, W], np.int64))])
        y = g.node("Mul", [y, g.const((1 + 0.1 * r.standard_normal((C, 1, 1))).astype(np.float32))])
        return g.node("Add", [y, g.const((0.1 * r.standard_normal((C, 1, 1))).astype(np.float32))]), shape
    if kind == "l2_norm":
        # the floor is kept above an int8 step: a 1e-6 rounds to 0 on the norm's grid and 0 / 0 is
        # NaN in an int8 build, as in RKNN-Toolkit2's simulator (a zero vector's F.normalize)
        norm = g.node("Sqrt", [g.node("ReduceSum", [g.node("Mul", [x, x]), g.const(np.array([1], np.int64))],
                                      keepdims=1)])
        return g.node("Div", [x, g.node("Max", [norm, g.const(np.float32(0.1))])]), shape
    if kind == "expand":
        y = g.node("ReduceMax", [x], axes=[1], keepdims=1) if C != 1 else x
        M = int(r.choice([2, 3, 8]))
        return g.node("Expand", [y, g.const(np.array([N, M, H, W], np.int64))]), (N, M, H, W)
    if kind == "tile":
        reps = [1, 1, int(r.choice([1, 2])), int(r.choice([1, 2]))]
        if H * W * C * reps[2] * reps[3] > 100_000:
            return x, shape
        return g.node("Tile", [x, g.const(np.array(reps, np.int64))]), (N, C, H * reps[2], W * reps[3])
    if kind == "where":
        mask = g.node("Greater", [x, g.const(np.float32(r.uniform(-0.5, 0.5)))])
        return g.node("Where", [mask, x, g.node("Mul", [x, g.const(np.float32(0.1))])]), shape
    if kind == "cast":
        codes = g.node("Cast", [g.node("Mul", [x, g.const(np.float32(4))])], to=TensorProto.INT32)
        return g.node("Cast", [codes], to=TensorProto.FLOAT), shape
    if kind == "unsqueeze":
        y = g.node("Unsqueeze", [x, g.const(np.array([2], np.int64))])
        return g.node("Squeeze", [y, g.const(np.array([2], np.int64))]), shape
    if kind == "topk":
        k = int(r.integers(1, W + 1))
        return g.node("TopK", [x, g.const(np.array([k], np.int64))], outputs=2, axis=-1)[0], (N, C, H, k)
    if kind == "matmul":
        return g.node("MatMul", [x, g.const((r.standard_normal((W, W)) / np.sqrt(W)).astype(np.float32))]), shape
    if kind == "channel_attention":  # softmax(x x^T) x over the channels of each row
        rows = g.node("Transpose", [x], perm=[0, 2, 1, 3])
        weights = g.node("Softmax", [g.node("MatMul", [rows, g.node("Transpose", [rows], perm=[0, 1, 3, 2])])],
                         axis=-1)
        return g.node("Transpose", [g.node("MatMul", [weights, rows])], perm=[0, 2, 1, 3]), shape
    perm = [0] + [int(p) for p in r.permutation([1, 2, 3])]
    y = g.node("Relu", [g.node("Transpose", [x], perm=perm)])
    return g.node("Transpose", [y], perm=[int(p) for p in np.argsort(perm)]), shape


def idiom_graph(seed: int):
    """``(onnx.ModelProto, input shape)``: image blocks and exporter idioms, opset 17."""
    rng = np.random.default_rng(seed)
    g = _Builder(rng)
    N, C = int(rng.choice([1, 2])), int(rng.choice([1, 3, 4, 8]))
    H, W = int(rng.integers(4, 24)), int(rng.integers(4, 24))
    x, shape = "x", (N, C, H, W)
    for _ in range(int(rng.integers(2, 6))):
        x, shape = (_idiom if rng.random() < 0.5 else _block)(g, x, shape)
    if rng.random() < 0.3:
        x = g.node("Cast", [g.node("ArgMax", [x], axis=1, keepdims=0)], to=TensorProto.FLOAT)
    if x == "x":
        x = g.node("Relu", [x])
    return g.model(x, (N, C, H, W), seed), (N, C, H, W)


def token_graph(seed: int):
    """``(onnx.ModelProto, input shape)``: an opset-17 (N, T, D) transformer graph."""
    rng = np.random.default_rng(seed)
    g = _Builder(rng)
    N, T, D = int(rng.choice([1, 2])), int(rng.integers(2, 20)), int(rng.choice([8, 16, 32, 48]))
    heads = int(rng.choice([h for h in (1, 2, 4) if D % h == 0]))
    dh = D // heads

    def linear(v, din, dout):
        y = g.node("MatMul", [v, g.const((rng.standard_normal((din, dout)) / np.sqrt(din)).astype(np.float32))])
        b = g.const((0.1 * rng.standard_normal(dout)).astype(np.float32))
        return g.node("Add", [y, b] if rng.random() < 0.5 else [b, y])

    def layer_norm(v):
        gamma = g.const((1 + 0.1 * rng.standard_normal(D)).astype(np.float32))
        beta = g.const((0.1 * rng.standard_normal(D)).astype(np.float32))
        if rng.random() < 0.5:
            return g.node("LayerNormalization", [v, gamma, beta], axis=-1, epsilon=1e-5)
        centred = g.node("Sub", [v, g.node("ReduceMean", [v], axes=[-1], keepdims=1)])
        var = g.node("ReduceMean", [g.node("Pow", [centred, g.const(np.float32(2))])], axes=[-1], keepdims=1)
        std = g.node("Sqrt", [g.node("Add", [var, g.const(np.float32(1e-5))])])
        return g.node("Add", [g.node("Mul", [g.node("Div", [centred, std]), gamma]), beta])

    def heads_of(t):
        t = g.node("Reshape", [t, g.const(np.array([N, T, heads, dh], np.int64))])
        return g.node("Transpose", [t], perm=[0, 2, 1, 3])

    x = "x"
    for _ in range(int(rng.integers(1, 3))):
        h = layer_norm(x)
        q, k, v = (heads_of(linear(h, D, D)) for _ in range(3))
        scores = g.node("MatMul", [q, g.node("Transpose", [k], perm=[0, 1, 3, 2])])
        if rng.random() < 0.5:
            scores = g.node("Mul", [scores, g.const(np.float32(1 / np.sqrt(dh)))])
        else:
            scores = g.node("Div", [scores, g.const(np.float32(np.sqrt(dh)))])
        mixed = g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v])
        mixed = g.node("Reshape", [g.node("Transpose", [mixed], perm=[0, 2, 1, 3]),
                                   g.const(np.array([N, T, D], np.int64))])
        x = g.node("Add", [x, linear(mixed, D, D)])
        hidden = int(rng.choice([D, 2 * D, 4 * D]))
        u = linear(layer_norm(x), D, hidden)
        kind = rng.choice(["gelu", "silu", "relu"])
        if kind == "gelu":
            erf = g.node("Erf", [g.node("Div", [u, g.const(np.float32(np.sqrt(2)))])])
            u = g.node("Mul", [g.node("Mul", [u, g.node("Add", [erf, g.const(np.float32(1))])]),
                               g.const(np.float32(0.5))])
        elif kind == "silu":
            u = g.node("Mul", [u, g.node("Sigmoid", [u])])
        else:
            u = g.node("Relu", [u])
        x = g.node("Add", [x, linear(u, hidden, D)])
    if rng.random() < 0.5:
        x = linear(g.node("ReduceMean", [x], axes=[1], keepdims=0), D, 10)
    return g.model(x, (N, T, D), seed), (N, T, D)


def with_taps(model, seed: int, most: int = 3):
    """``model`` with one to ``most`` of its intermediate tensors made graph outputs too (after
    the original output), as a model that exports a feature map beside its head: a fusion must
    then keep that tensor."""
    rng = np.random.default_rng(seed)
    names = [o for n in model.graph.node for o in n.output if o not in {v.name for v in model.graph.output}]
    for name in rng.choice(names, size=min(int(rng.integers(1, most + 1)), len(names)), replace=False):
        model.graph.output.append(helper.make_tensor_value_info(str(name), TensorProto.FLOAT, None))
    return model
