"""Small ONNX models for the vendor ``.rknn`` corpus (see ``build_corpus.py``).

Every builder returns a :class:`Case`: the ONNX model (built with ``onnx.helper``
and fixed-seed random weights), the toolkit settings it is converted with, a
one-line graph description, and the input generator.  Nothing here imports the
vendor toolkit, so the models can also be rebuilt and inspected on their own.

Inputs are NCHW float32.  Three-channel "image" inputs are raw values in
[0, 255] and the toolkit is told ``mean_values``/``std_values`` (so the .rknn
model computes ``(x - mean) / std`` itself); the ONNX reference gets the
normalised input.  Other inputs are N(0, 1) and use no mean/std.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Case", "CASES", "DYNAMIC_SETS", "IMAGE_MEAN", "IMAGE_STD", "OPSET"]

OPSET = 13
IR_VERSION = 8
IMAGE_MEAN = [0.0, 128.0, 64.0]
IMAGE_STD = [255.0, 64.0, 32.0]


@dataclass
class Case:
    """One corpus model.

    Attributes:
        name: file stem (``<name>_<variant>.rknn``).
        graph: a one-line human description of the ONNX graph.
        build: ``() -> onnx.ModelProto``.
        inputs: ``[(name, shape, kind)]`` with kind ``"image"`` (raw 0..255, mean/std
            applied by the model) or ``"normal"`` (N(0,1), no mean/std).
        variants: which conversions to make: ``"fp16"``, ``"i8"`` (normal/channel),
            ``"i8_layer"`` (normal/layer).
        platform: the ``target_platform``.
        purpose: why this file is in the corpus.
    """

    name: str
    graph: str
    build: Callable[[], object]
    inputs: List[Tuple[str, Tuple[int, ...], str]]
    variants: Sequence[str] = ("fp16", "i8")
    platform: str = "rk3588"
    purpose: str = ""
    extra_config: Dict[str, object] = field(default_factory=dict)

    def mean_std(self) -> Tuple[Optional[list], Optional[list]]:
        """``mean_values``/``std_values`` for ``RKNN.config`` (``None`` when no input is an image)."""
        if not any(kind == "image" for _, _, kind in self.inputs):
            return None, None
        means, stds = [], []
        for _, shape, kind in self.inputs:
            c = shape[1]
            if kind == "image":
                means.append(list(IMAGE_MEAN[:c]))
                stds.append(list(IMAGE_STD[:c]))
            else:
                means.append([0.0] * c)
                stds.append([1.0] * c)
        return means, stds

    def make_inputs(self, seed: int) -> List[np.ndarray]:
        """Raw inputs (before mean/std), NCHW float32, reproducible from ``seed``."""
        rng = np.random.default_rng(seed)
        out = []
        for _, shape, kind in self.inputs:
            if kind == "image":
                out.append(rng.uniform(0.0, 255.0, size=shape).astype(np.float32))
            else:
                out.append(rng.standard_normal(size=shape).astype(np.float32))
        return out

    def normalise(self, raw: List[np.ndarray]) -> List[np.ndarray]:
        """What the ONNX graph sees: image inputs with ``(x - mean) / std`` applied."""
        out = []
        for x, (_, shape, kind) in zip(raw, self.inputs):
            if kind == "image":
                c = shape[1]
                mean = np.asarray(IMAGE_MEAN[:c], np.float32).reshape(1, c, 1, 1)
                std = np.asarray(IMAGE_STD[:c], np.float32).reshape(1, c, 1, 1)
                x = ((x - mean) / std).astype(np.float32)
            out.append(x)
        return out


# ---------------------------------------------------------------------------
# onnx.helper plumbing


class _G:
    """A tiny graph builder: nodes, initializers, fixed-seed weights."""

    def __init__(self, seed: int):
        import onnx  # noqa: F401  (fail early with a clear ImportError)

        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.n = 0

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, array: np.ndarray, prefix: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: List[str], n_out: int = 1, **attrs) -> List[str]:
        from onnx import helper

        outs = [self.name(op.lower() + "_") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, pad: Optional[int] = None,
             group: int = 1, bias: bool = True) -> str:
        pad = k // 2 if pad is None else pad
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * (1.5 / np.sqrt(fan_in))).astype(np.float32)
        ins = [x, self.const(w, "w")]
        if bias:
            ins.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
        return self.node("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad, pad, pad, pad], group=group)[0]

    def model(self, inputs, outputs):
        """``inputs``: [(name, shape)]; ``outputs``: [(tensor, name)] (renamed via Identity-free rename)."""
        import onnx
        from onnx import helper, TensorProto

        # Rename the last producer's output so the graph output gets a readable name.
        rename = {tensor: name for tensor, name in outputs}
        for nd in self.nodes:
            for i, o in enumerate(nd.output):
                if o in rename:
                    nd.output[i] = rename[o]
            for i, o in enumerate(nd.input):
                if o in rename:
                    nd.input[i] = rename[o]
        g = helper.make_graph(
            self.nodes, "g",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for _, name in outputs],
            initializer=self.inits,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rknnlite-corpus")
        m.ir_version = IR_VERSION
        m = onnx.shape_inference.infer_shapes(m)
        onnx.checker.check_model(m)
        return m


IMG = ("x", (1, 3, 16, 16), "image")


def _conv_act(seed: int, act: Callable[["_G", str], str]):
    def build():
        g = _G(seed)
        y = g.conv("x", 3, 20)
        y = act(g, y)
        return g.model([("x", IMG[1])], [(y, "y")])
    return build


def _clip(lo: float, hi: float):
    def act(g: _G, y: str) -> str:
        return g.node("Clip", [y, g.const(np.float32(lo)), g.const(np.float32(hi))])[0]
    return act


def _leaky(alpha: float):
    return lambda g, y: g.node("LeakyRelu", [y], alpha=alpha)[0]


def _sigmoid(g: _G, y: str) -> str:
    return g.node("Sigmoid", [y])[0]


def _hardsigmoid(alpha: float, beta: float):
    return lambda g, y: g.node("HardSigmoid", [y], alpha=alpha, beta=beta)[0]


def _hardswish(g: _G, y: str) -> str:
    hs = g.node("HardSigmoid", [y], alpha=1.0 / 6.0, beta=0.5)[0]
    return g.node("Mul", [y, hs])[0]


def _swish(g: _G, y: str) -> str:
    s = g.node("Sigmoid", [y])[0]
    return g.node("Mul", [y, s])[0]


def _pool(seed: int, kind: str):
    def build():
        g = _G(seed)
        y = g.conv("x", 3, 20)
        if kind == "maxpool":
            y = g.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])[0]
        elif kind == "avgpool":
            y = g.node("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])[0]
        else:
            y = g.node("GlobalAveragePool", [y])[0]
        return g.model([("x", IMG[1])], [(y, "y")])
    return build


def _concat():
    g = _G(301)
    a = g.conv("x", 3, 12)
    b = g.conv("x", 3, 20, k=1)
    y = g.node("Concat", [a, b], axis=1)[0]
    return g.model([("x", IMG[1])], [(y, "y")])


def _split():
    g = _G(302)
    y = g.conv("x", 3, 24)
    a, b = g.node("Split", [y, g.const(np.array([8, 16], np.int64))], n_out=2, axis=1)
    return g.model([("x", IMG[1])], [(a, "y0"), (b, "y1")])


def _slice():
    g = _G(303)
    y = g.conv("x", 3, 20)
    # channels 4..16, rows 2..14 step 1, columns 1..15 step 2
    s = g.node("Slice", [y, g.const(np.array([4, 2, 1], np.int64)), g.const(np.array([16, 14, 15], np.int64)),
                         g.const(np.array([1, 2, 3], np.int64)), g.const(np.array([1, 1, 2], np.int64))])[0]
    return g.model([("x", IMG[1])], [(s, "y")])


def _transpose():
    g = _G(304)
    y = g.conv("x", 3, 20)
    t = g.node("Transpose", [y], perm=[0, 2, 3, 1])[0]
    return g.model([("x", IMG[1])], [(t, "y")])


def _reshape():
    g = _G(305)
    y = g.conv("x", 3, 20)
    r = g.node("Reshape", [y, g.const(np.array([1, 20, 256], np.int64))])[0]
    return g.model([("x", IMG[1])], [(r, "y")])


def _sub():
    g = _G(306)
    d = g.node("Sub", ["a", "b"])[0]
    c = (g.rng.standard_normal((1, 20, 1, 1)) * 0.5).astype(np.float32)
    e = g.node("Sub", [d, g.const(c)])[0]
    return g.model([("a", (1, 20, 8, 8)), ("b", (1, 20, 8, 8))], [(e, "y")])


def _resize(mode: str):
    def build():
        g = _G(307 if mode == "nearest" else 308)
        y = g.conv("x", 3, 20)
        roi = g.const(np.zeros(0, np.float32))
        scales = g.const(np.array([1, 1, 2, 2], np.float32))
        if mode == "nearest":
            r = g.node("Resize", [y, roi, scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                       nearest_mode="floor")[0]
        else:
            r = g.node("Resize", [y, roi, scales], mode="linear", coordinate_transformation_mode="half_pixel")[0]
        return g.model([("x", IMG[1])], [(r, "y")])
    return build


def _mbblock():
    g = _G(401)
    y = g.node("Relu", [g.conv("x", 3, 16)])[0]
    e = g.node("Relu", [g.conv(y, 16, 32, k=1)])[0]
    d = g.node("Relu", [g.conv(e, 32, 32, k=3, group=32)])[0]
    p = g.conv(d, 32, 16, k=1)
    r = g.node("Add", [p, y])[0]
    return g.model([("x", IMG[1])], [(r, "y")])


def _conv_add_relu():
    # the residual is two convs back: the compiler folds a residual that is the conv's own input (or a
    # conv of the same input) into the conv's weights
    g = _G(402)
    a = g.node("Relu", [g.conv("x", 3, 16)])[0]
    c = g.node("Relu", [g.conv(a, 16, 16, k=1)])[0]
    b = g.conv(c, 16, 16)
    y = g.node("Relu", [g.node("Add", [b, a])[0]])[0]
    return g.model([("x", IMG[1])], [(y, "y")])


def _sigmoid_mul():
    # Sigmoid of a sum of two inputs: no conv to fuse it into; then a gate Mul with another tensor
    g = _G(403)
    s = g.node("Sigmoid", [g.node("Add", ["a", "b"])[0]])[0]
    y = g.node("Mul", [s, "a"])[0]
    return g.model([("a", (1, 20, 8, 8)), ("b", (1, 20, 8, 8))], [(y, "y")])


def _softmax():
    g = _G(404)
    y = g.conv("x", 3, 20)
    s = g.node("Softmax", [y], axis=1)[0]
    return g.model([("x", IMG[1])], [(s, "y")])


def _convnet(seed: int = 501, size=16):
    """``size``: the input's H and W (ints), or a name for a symbolic H and W (dynamic shapes)."""
    def build():
        g = _G(seed)
        y = g.node("Relu", [g.conv("x", 3, 16)])[0]
        y = g.node("Relu", [g.conv(y, 16, 24, stride=2)])[0]
        y = g.conv(y, 24, 10, k=1)
        hw = (size, size) if isinstance(size, int) else (size + "_h", size + "_w")
        return g.model([("x", (1, 3) + hw)], [(y, "y")])
    return build


def _two_inputs():
    # an image input (presented NHWC by librknnrt) and a 16-channel one (kept NCHW), joined by a
    # Concat (an Add would be fused into the conv, and an Add + Relu into an AddRelu)
    g = _G(502)
    y = g.node("Concat", [g.conv("x", 3, 16), "b"], axis=1)[0]
    return g.model([("x", (1, 3, 16, 16)), ("b", (1, 16, 16, 16))], [(y, "y")])


#: the shape sets of the dynamic-shape twins (``config(dynamic_input=...)``): one input, NCHW; the
#: largest (the toolkit's MaxShape, which calibration data must have) is the case's input shape
DYNAMIC_SETS = [[[1, 3, 12, 12]], [[1, 3, 8, 8]], [[1, 3, 8, 16]]]


def _bench():
    g = _G(601)
    chans = [3, 32, 64, 96, 128, 160, 192]
    y = "x"
    for i in range(len(chans) - 1):
        y = g.node("Relu", [g.conv(y, chans[i], chans[i + 1], stride=2 if i in (0, 2, 4) else 1)])[0]
    y = g.node("GlobalAveragePool", [y])[0]
    y = g.conv(y, 192, 16, k=1)
    return g.model([("x", (1, 3, 64, 64))], [(y, "y")])


def _cases() -> List[Case]:
    img = [IMG]
    acts = [
        ("conv_relu6", "Conv 3->20 3x3 p1, Clip(0, 6)", _clip(0.0, 6.0), 101),
        ("conv_clip", "Conv 3->20 3x3 p1, Clip(-1, 2)", _clip(-1.0, 2.0), 102),
        ("conv_leaky01", "Conv 3->20 3x3 p1, LeakyRelu(alpha=0.1)", _leaky(0.1), 103),
        ("conv_leaky03", "Conv 3->20 3x3 p1 (same weights as conv_leaky01), LeakyRelu(alpha=0.3)", _leaky(0.3), 103),
        ("conv_sigmoid", "Conv 3->20 3x3 p1, Sigmoid", _sigmoid, 105),
        ("conv_hardsigmoid", "Conv 3->20 3x3 p1, HardSigmoid(alpha=0.3, beta=0.4)", _hardsigmoid(0.3, 0.4), 106),
        ("conv_hardswish", "Conv 3->20 3x3 p1, y*HardSigmoid(y, alpha=1/6, beta=0.5)", _hardswish, 107),
        ("conv_swish", "Conv 3->20 3x3 p1, y*Sigmoid(y)", _swish, 108),
    ]
    cases = [Case(n, d, _conv_act(s, a), img, purpose="fused activation parameters") for n, d, a, s in acts]
    cases += [
        Case("maxpool", "Conv 3->20 3x3 p1, MaxPool 3x3 s2 p1", _pool(201, "maxpool"), img, purpose="pooling"),
        Case("avgpool", "Conv 3->20 3x3 p1, AveragePool 2x2 s2", _pool(202, "avgpool"), img, purpose="pooling"),
        Case("gap", "Conv 3->20 3x3 p1, GlobalAveragePool", _pool(203, "gap"), img, purpose="pooling"),
        Case("concat", "Conv 3->12 3x3 and Conv 3->20 1x1 on x, Concat(axis=1) -> 32 ch", _concat, img,
             purpose="shape ops"),
        Case("split", "Conv 3->24 3x3, Split(axis=1, [8, 16]) -> y0, y1", _split, img, purpose="shape ops"),
        Case("slice", "Conv 3->20 3x3, Slice c[4:16], h[2:14], w[1:15:2]", _slice, img, purpose="shape ops"),
        Case("transpose", "Conv 3->20 3x3, Transpose(0,2,3,1) -> 1x16x16x20", _transpose, img, purpose="shape ops"),
        Case("reshape", "Conv 3->20 3x3, Reshape -> 1x20x256", _reshape, img, purpose="shape ops"),
        Case("sub", "a-b, then minus a per-channel const 1x20x1x1; a, b 1x20x8x8", _sub,
             [("a", (1, 20, 8, 8), "normal"), ("b", (1, 20, 8, 8), "normal")], purpose="shape ops"),
        Case("resize_nearest", "Conv 3->20 3x3, Resize nearest x2 (asymmetric, floor)", _resize("nearest"), img,
             purpose="resize"),
        Case("resize_bilinear", "Conv 3->20 3x3, Resize linear x2 (half_pixel)", _resize("linear"), img,
             purpose="resize"),
        Case("mbblock", "Conv 3->16 3x3 Relu; Conv 16->32 1x1 Relu; depthwise 3x3 32 Relu; Conv 32->16 1x1; Add",
             _mbblock, img, purpose="mobilenet-like block"),
        Case("conv_add_relu", "Conv 3->16 3x3 Relu -> a; Conv 16->16 1x1 Relu; Conv 16->16 3x3; Add a; Relu",
             _conv_add_relu, img, purpose="ConvAddRelu"),
        Case("sigmoid_mul", "Sigmoid(a + b) * a; a, b 1x20x8x8", _sigmoid_mul,
             [("a", (1, 20, 8, 8), "normal"), ("b", (1, 20, 8, 8), "normal")], purpose="standalone Sigmoid, Mul"),
        Case("softmax", "Conv 3->20 3x3, Softmax(axis=1)", _softmax, img, purpose="exSoftmax13, exDataConvert"),
        Case("convnet", "Conv 3->16 3x3 Relu; Conv 16->24 3x3 s2 Relu; Conv 24->10 1x1", _convnet(), img,
             variants=("fp16", "i8", "i8_layer"), purpose="per-layer quantization (i8_layer) vs per-channel"),
        Case("convnet_rk3566", "same graph and weights as convnet", _convnet(), img, platform="rk3566",
             purpose="platform differences"),
        Case("convnet_rk3576", "same graph and weights as convnet", _convnet(), img, platform="rk3576",
             purpose="platform differences"),
        Case("conv_leaky_rk3576", "Conv 3->20 3x3 p1 (weights of conv_leaky01), LeakyRelu(alpha=0.1), rk3576",
             _conv_act(103, _leaky(0.1)), img, variants=("fp16", "i8"), platform="rk3576",
             purpose="rk3576 fused activation parameters (slope in <out>_BnCfg_BNcfgTensor (int8) or "
                     "<out>_BsCfg_BScfgTensor (fp16))"),
        Case("conv_clip_rk3576", "Conv 3->20 3x3 p1 (weights of conv_clip), Clip(-1, 2), rk3576",
             _conv_act(102, _clip(-1.0, 2.0)), img, variants=("fp16", "i8"), platform="rk3576",
             purpose="rk3576 fused activation parameters (int8: shifted clamp; fp16: two clamp pairs)"),
        Case("conv_relu6_rk3576", "Conv 3->20 3x3 p1 (weights of conv_clip), Clip(0, 6), rk3576",
             _conv_act(102, _clip(0.0, 6.0)), img, variants=("i8",), platform="rk3576",
             purpose="rk3576 int8 fused activation parameters (clamp in channel 0's accumulator unit)"),
        Case("conv_hardsigmoid_rk3576", "Conv 3->20 3x3 p1 (weights of conv_hardsigmoid), "
             "HardSigmoid(alpha=0.3, beta=0.4), rk3576", _conv_act(106, _hardsigmoid(0.3, 0.4)), img,
             variants=("fp16", "i8"), platform="rk3576",
             purpose="rk3576 lookup-table activation (index map in <out>_BnCfg_BNcfgTensor)"),
        Case("twoin", "Conv 3->16 3x3 on image x, Concat(axis=1) with b (1x16x16x16) -> 32 ch", _two_inputs,
             [IMG, ("b", (1, 16, 16, 16), "normal")], purpose="attribute parity: two inputs (NHWC image, NCHW other)"),
        Case("twoin_rk3566", "same graph and weights as twoin", _two_inputs,
             [IMG, ("b", (1, 16, 16, 16), "normal")], platform="rk3566",
             purpose="attribute parity: two inputs on rk3566"),
        Case("dynconv", "convnet's graph and weights with symbolic H, W; dynamic_input 12x12, 8x8, 8x16",
             _convnet(size="x"), [("x", (1, 3, 12, 12), "image")], extra_config=dict(dynamic_input=DYNAMIC_SETS),
             purpose="attribute parity: dynamic shapes"),
        Case("dynconv_rk3566", "same as dynconv, rk3566", _convnet(size="x"), [("x", (1, 3, 12, 12), "image")],
             platform="rk3566",
             extra_config=dict(dynamic_input=DYNAMIC_SETS), purpose="attribute parity: dynamic shapes on rk3566"),
        Case("bench", "6 x (Conv 3x3 Relu) 3-32-64-96-128-160-192, s2 at 1,3,5; GAP; Conv 192->16 1x1",
             _bench, [("x", (1, 3, 64, 64), "image")], purpose="benchmark"),
    ]
    return cases


CASES: List[Case] = _cases()
