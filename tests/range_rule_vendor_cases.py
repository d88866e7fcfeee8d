"""Toy models whose activation-input and pooled-tensor ranges were measured with RKNN-Toolkit2 2.5.0.

Imported by ``tests/test_quant_algorithms.py`` and by ``tools/vendor_corpus/range_rules.py``
(which runs in the vendor's venv and prints :data:`VENDOR`).  Every model is
``x [1, 1, 64, 64] -> identity 1x1 Conv -> m -> ... -> identity 1x1 Conv -> y``; what reads
``m`` is the model's kind (:data:`MODELS`; ``input_*`` kinds have no first Conv: ``x`` itself
is read).  The calibration data are 4 samples of ``scale * N(0, 1) + shift`` (:data:`DATA`).
The vendor ran ``hybrid_quantization_step1`` (rk3588, ``quantized_method='layer'``, mean 0,
std 1) and its ``.quantization.cfg`` gave the ranges of :func:`pinned` tensors.

What they show:

* Sigmoid / Tanh: a tensor whose only reader is a Sigmoid is clamped to ``[-7, 7]``, a Tanh's
  to ``[-3.2, 3.2]``, under ``normal``, ``kl_divergence`` and ``mmse`` alike, after the
  algorithm's range has been widened to contain 0 (data in ``[10.3, 18.7]`` gives
  ``[0, 7]``); ranges inside are kept.  A model input is clamped too.  No clamp when the
  tensor is a graph output, or is also read by a Conv, by the Mul of ``m * Sigmoid(m)``, by a
  second activation (Sigmoid and Tanh; two Sigmoids; HardSigmoid and HardSwish, each of which
  alone is bounded).
* Pools: an AveragePool's output ``p`` gets its input's range (the input's own ``normal`` /
  ``kl_divergence`` range, after the Relu rule) when its kernel is at most 7 x 7, also when
  ``p`` is a graph output or the input has other readers; with an 8 in the kernel (8 x 8, 2 x 8)
  the vendor rewrites the pool (depthwise convolutions) and ``p`` keeps its own range, as does
  a GlobalAveragePool's.  A MaxPool's input gets the output's range when the MaxPool is its
  only reader (a model input too); otherwise the output gets the input's.
* Where the rules meet (``*_then_*`` kinds), the clamp comes first and the sharing after it: a
  pooled tensor read by a Sigmoid alone is not clamped behind an AveragePool (it takes the
  pool input's unclamped range, ``[-73, 81]``), and behind a MaxPool the clamp reaches the
  pool's input too (both ``[-7, 7]``); a Relu output read by a Sigmoid (Tanh) alone is clamped
  to ``[0, 7]`` (``[0, 3.2]``) and the Relu's input takes it.
"""

import numpy as np

_AVG = "AveragePool"

#: kind -> (what reads ``m`` (or ``x``), op and attributes of the reader(s), graph outputs)
MODELS = {
    "sigmoid": ("m -> Sigmoid -> h", [("Sigmoid", {})], ("y",)),
    "tanh": ("m -> Tanh -> h", [("Tanh", {})], ("y",)),
    "sigmoid_and_conv": ("m -> Sigmoid -> h; m -> Conv -> z (an output)", [("Sigmoid", {}), ("Conv", {})],
                         ("y", "z")),
    "sigmoid_and_output": ("m -> Sigmoid -> h; m is an output too", [("Sigmoid", {})], ("y", "m")),
    "sigmoid_and_tanh": ("m -> Sigmoid -> s, m -> Tanh -> t, h = s + t", [("Sigmoid", {}), ("Tanh", {})], ("y",)),
    "two_sigmoids": ("m -> Sigmoid -> s, m -> Sigmoid -> t, h = s + t", [("Sigmoid", {}), ("Sigmoid", {})], ("y",)),
    "hardsigmoid_and_hardswish": ("m -> HardSigmoid(0.25, 0.4) -> s, m -> HardSwish -> t, h = s + t",
                                  [("HardSigmoid", {"alpha": 0.25, "beta": 0.4}), ("HardSwish", {})], ("y",)),
    "swish": ("m -> Sigmoid -> s, h = m * s", [("Swish", {})], ("y",)),
    "input_sigmoid": ("x -> Sigmoid -> h (the model input feeds the Sigmoid)", [("Sigmoid", {})], ("y",)),
    "avgpool_3x2": ("m -> AveragePool 3x2 stride 3x2 -> h", [(_AVG, {"kernel_shape": [3, 2], "strides": [3, 2]})],
                    ("y",)),
    "avgpool_3x3_pad1": ("m -> AveragePool 3x3 stride 1 pads 1 -> h",
                         [(_AVG, {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]})], ("y",)),
    "avgpool_7x7": ("m -> AveragePool 7x7 stride 7 -> h", [(_AVG, {"kernel_shape": [7, 7], "strides": [7, 7]})],
                    ("y",)),
    "avgpool_8x8": ("m -> AveragePool 8x8 stride 8 -> h", [(_AVG, {"kernel_shape": [8, 8], "strides": [8, 8]})],
                    ("y",)),
    "avgpool_2x8": ("m -> AveragePool 2x8 stride 2x8 -> h", [(_AVG, {"kernel_shape": [2, 8], "strides": [2, 8]})],
                    ("y",)),
    "globalavgpool": ("m -> GlobalAveragePool -> h", [("GlobalAveragePool", {})], ("y",)),
    "avgpool_3x2_output": ("m -> AveragePool 3x2 -> h; h is an output too",
                           [(_AVG, {"kernel_shape": [3, 2], "strides": [3, 2]})], ("y", "h")),
    "avgpool_3x2_and_conv": ("m -> AveragePool 3x2 -> h; m -> Conv -> z (an output)",
                             [(_AVG, {"kernel_shape": [3, 2], "strides": [3, 2]}), ("Conv", {})], ("y", "z")),
    "relu_avgpool_3x2": ("m -> Relu -> r -> AveragePool 3x2 -> h", [("Relu", {}),
                         (_AVG, {"kernel_shape": [3, 2], "strides": [3, 2]})], ("y",)),
    "input_avgpool_3x2": ("x -> AveragePool 3x2 -> h", [(_AVG, {"kernel_shape": [3, 2], "strides": [3, 2]})], ("y",)),
    "maxpool_2x2": ("m -> MaxPool 2x2 stride 2 -> h", [("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]})],
                    ("y",)),
    "maxpool_3x3_s2": ("m -> MaxPool 3x3 stride 2 pads 1 -> h",
                       [("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})], ("y",)),
    "maxpool_2x2_output": ("m -> MaxPool 2x2 -> h; h is an output too",
                           [("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]})], ("y", "h")),
    "maxpool_2x2_and_conv": ("m -> MaxPool 2x2 -> h; m -> Conv -> z (an output)",
                             [("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}), ("Conv", {})], ("y", "z")),
    "relu_maxpool_2x2": ("m -> Relu -> r -> MaxPool 2x2 -> h", [("Relu", {}),
                         ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]})], ("y",)),
    "input_maxpool_2x2": ("x -> MaxPool 2x2 -> h", [("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]})],
                          ("y",)),
    # where two rules meet: the pooled tensor (or the Relu's output) is read by a Sigmoid alone
    "avgpool_3x2_then_sigmoid": ("m -> AveragePool 3x2 -> p -> Sigmoid -> h",
                                 [(_AVG, {"kernel_shape": [3, 2], "strides": [3, 2]}), ("Sigmoid", {})], ("y",)),
    "maxpool_2x2_then_sigmoid": ("m -> MaxPool 2x2 -> p -> Sigmoid -> h",
                                 [("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}), ("Sigmoid", {})], ("y",)),
    "relu_then_sigmoid": ("m -> Relu -> r -> Sigmoid -> h", [("Relu", {}), ("Sigmoid", {})], ("y",)),
    "relu_then_tanh": ("m -> Relu -> r -> Tanh -> h", [("Relu", {}), ("Tanh", {})], ("y",)),
}

#: data name -> (seed, scale, shift)
DATA = {
    "wide": (3, 20.0, 0.0),  # about [-80, 80]: both ends beyond both bounds
    "narrow": (4, 0.5, 0.0),  # about [-2, 2]: inside both bounds
    "high": (5, 2.0, 8.0),  # about [0, 16]: only the upper end beyond the bounds
    "above": (6, 1.0, 15.0),  # about [11, 19]: entirely above both bounds
    "gauss": (7, 1.0, 0.0),  # N(0, 1), about [-3.7, 4.1]: a pool's output is narrower than its input
}


def samples(data):
    """The 4 calibration samples of ``data``, each ``(1, 1, 64, 64)`` float32."""
    seed, scale, shift = DATA[data]
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal((1, 1, 64, 64)) + shift).astype(np.float32) for _ in range(4)]


def source(kind):
    """The tensor the kind's reader(s) read: ``m``, or ``x`` for ``input_*`` kinds."""
    return "x" if kind.startswith("input_") else "m"


def pinned(kind):
    """The tensors whose ranges :data:`VENDOR` holds: the one read, or for pool kinds the
    pool's input and output ``h`` (the Relu's output ``r`` after a Relu: the Relu's input
    ``m`` gets ``r``'s range, and rknnlite fuses the Relu into the Conv).  The vendor's cfg
    calls a model input or output ``<name>_int8``."""
    readers = [op for op, _ in MODELS[kind][1]]
    first = "r" if "Relu" in readers else source(kind)
    if not any(op.endswith("Pool") for op in readers):
        return (first,)
    return (first, "p" if _chained(kind) else "h")


def _chained(kind):
    """Whether the kind's readers follow one another (``... -> p -> Sigmoid -> h``)."""
    return "_then_" in kind


def _pooled(size, attrs):
    k, s = attrs["kernel_shape"], attrs.get("strides", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    return [(size + pads[i] + pads[i + 2] - k[i]) // s[i] + 1 for i in range(2)]


def onnx_model(kind):
    """The ONNX model (a ``ModelProto``) of ``kind``; needs the onnx package."""
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node
    _, readers, outputs = MODELS[kind]
    src = source(kind)
    nodes = [] if src == "x" else [node("Conv", ["x", "w", "b"], ["m"], name="c1")]
    shape = [1, 1, 64, 64]
    shapes = {"x": shape, "m": shape, "y": shape, "z": shape}
    acts = [(op, attrs) for op, attrs in readers if op != "Conv"]
    if acts[0][0] == "Relu":
        nodes.append(node("Relu", [src], ["r"], name="relu"))
        src, acts = "r", acts[1:]
    if _chained(kind) and len(acts) == 2:  # pool -> p -> activation -> h
        (pool, pool_attrs), (act, act_attrs) = acts
        nodes += [node(pool, [src], ["p"], name="pool", **pool_attrs), node(act, ["p"], ["h"], name="act", **act_attrs)]
        shape = [1, 1] + _pooled(64, pool_attrs)
    elif kind == "swish":
        nodes += [node("Sigmoid", [src], ["s"], name="sig"), node("Mul", [src, "s"], ["h"], name="mul")]
    elif len(acts) == 2:
        nodes += [node(acts[0][0], [src], ["s"], name="act1", **acts[0][1]),
                  node(acts[1][0], [src], ["t"], name="act2", **acts[1][1]), node("Add", ["s", "t"], ["h"], name="add")]
    else:
        op, attrs = acts[0]
        nodes.append(node(op, [src], ["h"], name="act", **attrs))
        if op == "GlobalAveragePool":
            shape = [1, 1, 1, 1]
        elif op.endswith("Pool"):
            shape = [1, 1] + _pooled(64, attrs)
    shapes["y"] = shapes["h"] = shape
    nodes.append(node("Conv", ["h", "w", "b"], ["y"], name="c2"))
    if any(op == "Conv" for op, _ in readers):
        nodes.append(node("Conv", [src, "w", "b"], ["z"], name="c3"))
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shapes["x"])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs],
                              [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w"),
                               numpy_helper.from_array(np.zeros(1, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


_POOLS = [kind for kind, (_, readers, _) in MODELS.items() if any(op.endswith("Pool") for op, _ in readers)]

#: (kind, data, algorithm) measured
CASES = [(kind, data, algorithm) for kind in ("sigmoid", "tanh") for data in ("wide", "narrow", "high", "above")
         for algorithm in ("normal", "kl_divergence", "mmse")] + \
        [(kind, "wide", algorithm) for kind in ("sigmoid_and_conv", "sigmoid_and_output", "sigmoid_and_tanh",
                                                "two_sigmoids", "hardsigmoid_and_hardswish", "swish",
                                                "input_sigmoid") for algorithm in ("normal", "kl_divergence")] + \
        [(kind, "gauss", algorithm) for kind in _POOLS for algorithm in ("normal", "kl_divergence")] + \
        [(kind, "gauss", "mmse") for kind in ("avgpool_3x2", "maxpool_2x2")] + \
        [(kind, "wide", algorithm) for kind in ("avgpool_3x2_then_sigmoid", "maxpool_2x2_then_sigmoid",
                                                "relu_then_sigmoid", "relu_then_tanh")
         for algorithm in ("normal", "kl_divergence")]

#: (kind, data, algorithm) -> {tensor: (min, max)} of :func:`pinned` as the vendor's cfg writes
#: them (``tools/vendor_corpus/range_rules.py``).  The data's own min / max: wide
#: [-73.0369, 80.7372], narrow [-2.0285, 1.8345], high [0.5019, 15.5092], above
#: [10.2540, 18.6695], gauss [-3.6611, 4.0616].
VENDOR = {
    ('sigmoid', 'wide', 'normal'): {'m': (-7.0, 7.0)},
    ('sigmoid', 'wide', 'kl_divergence'): {'m': (-7.0, 7.0)},
    ('sigmoid', 'wide', 'mmse'): {'m': (-7.0, 7.0)},
    ('sigmoid', 'narrow', 'normal'): {'m': (-2.0284643173217773, 1.8344553709030151)},
    ('sigmoid', 'narrow', 'kl_divergence'): {'m': (-1.839286248665303, 1.8344553709030151)},
    ('sigmoid', 'narrow', 'mmse'): {'m': (-1.839286248665303, 1.8344553709030151)},
    ('sigmoid', 'high', 'normal'): {'m': (0.0, 7.0)},
    ('sigmoid', 'high', 'kl_divergence'): {'m': (0.0, 7.0)},
    ('sigmoid', 'high', 'mmse'): {'m': (0.0, 7.0)},
    ('sigmoid', 'above', 'normal'): {'m': (0.0, 7.0)},
    ('sigmoid', 'above', 'kl_divergence'): {'m': (0.0, 7.0)},
    ('sigmoid', 'above', 'mmse'): {'m': (0.0, 7.0)},
    ('tanh', 'wide', 'normal'): {'m': (-3.2, 3.2)},
    ('tanh', 'wide', 'kl_divergence'): {'m': (-3.2, 3.2)},
    ('tanh', 'wide', 'mmse'): {'m': (-3.2, 3.2)},
    ('tanh', 'narrow', 'normal'): {'m': (-2.0284643173217773, 1.8344553709030151)},
    ('tanh', 'narrow', 'kl_divergence'): {'m': (-1.839286248665303, 1.8344553709030151)},
    ('tanh', 'narrow', 'mmse'): {'m': (-1.839286248665303, 1.8344553709030151)},
    ('tanh', 'high', 'normal'): {'m': (0.0, 3.2)},
    ('tanh', 'high', 'kl_divergence'): {'m': (0.0, 3.2)},
    ('tanh', 'high', 'mmse'): {'m': (0.0, 3.2)},
    ('tanh', 'above', 'normal'): {'m': (0.0, 3.2)},
    ('tanh', 'above', 'kl_divergence'): {'m': (0.0, 3.2)},
    ('tanh', 'above', 'mmse'): {'m': (0.0, 3.2)},
    ('sigmoid_and_conv', 'wide', 'normal'): {'m': (-73.03689575195312, 80.73723602294922)},
    ('sigmoid_and_conv', 'wide', 'kl_divergence'): {'m': (-73.03689575195312, 73.20754262432456)},
    ('sigmoid_and_output', 'wide', 'normal'): {'m': (-73.03689575195312, 80.73723602294922)},
    ('sigmoid_and_output', 'wide', 'kl_divergence'): {'m': (-73.03689575195312, 73.20754262432456)},
    ('sigmoid_and_tanh', 'wide', 'normal'): {'m': (-73.03689575195312, 80.73723602294922)},
    ('sigmoid_and_tanh', 'wide', 'kl_divergence'): {'m': (-73.03689575195312, 73.20754262432456)},
    ('two_sigmoids', 'wide', 'normal'): {'m': (-73.03689575195312, 80.73723602294922)},
    ('two_sigmoids', 'wide', 'kl_divergence'): {'m': (-73.03689575195312, 73.20754262432456)},
    ('hardsigmoid_and_hardswish', 'wide', 'normal'): {'m': (-73.03689575195312, 80.73723602294922)},
    ('hardsigmoid_and_hardswish', 'wide', 'kl_divergence'): {'m': (-73.03689575195312, 73.20754262432456)},
    ('swish', 'wide', 'normal'): {'m': (-73.03689575195312, 80.73723602294922)},
    ('swish', 'wide', 'kl_divergence'): {'m': (-73.03689575195312, 73.20754262432456)},
    ('input_sigmoid', 'wide', 'normal'): {'x': (-7.0, 7.0)},
    ('input_sigmoid', 'wide', 'kl_divergence'): {'x': (-7.0, 7.0)},
    ('avgpool_3x2', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('avgpool_3x2', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-3.6610817909240723, 3.670914775226265),
    },
    ('avgpool_3x3_pad1', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('avgpool_3x3_pad1', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-3.6610817909240723, 3.670914775226265),
    },
    ('avgpool_7x7', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('avgpool_7x7', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-3.6610817909240723, 3.670914775226265),
    },
    ('avgpool_8x8', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-0.3448457717895508, 0.39076364040374756),
    },
    ('avgpool_8x8', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-0.3448457717895508, 0.39076364040374756),
    },
    ('avgpool_2x8', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-0.8101602792739868, 0.8672050833702087),
    },
    ('avgpool_2x8', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-0.8101602792739868, 0.8672050833702087),
    },
    ('globalavgpool', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-0.01679116301238537, 0.008666103705763817),
    },
    ('globalavgpool', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-0.01679116301238537, 0.008666103705763817),
    },
    ('avgpool_3x2_output', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('avgpool_3x2_output', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-3.6610817909240723, 3.670914775226265),
    },
    ('avgpool_3x2_and_conv', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('avgpool_3x2_and_conv', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-3.6610817909240723, 3.670914775226265),
    },
    ('relu_avgpool_3x2', 'gauss', 'normal'): {'r': (0.0, 4.061606407165527), 'h': (0.0, 4.061606407165527)},
    ('relu_avgpool_3x2', 'gauss', 'kl_divergence'): {'r': (0.0, 3.559855225030333), 'h': (0.0, 3.559855225030333)},
    ('input_avgpool_3x2', 'gauss', 'normal'): {
        'x': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('input_avgpool_3x2', 'gauss', 'kl_divergence'): {
        'x': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('maxpool_2x2', 'gauss', 'normal'): {
        'm': (-1.3217915296554565, 4.061606407165527),
        'h': (-1.3217915296554565, 4.061606407165527),
    },
    ('maxpool_2x2', 'gauss', 'kl_divergence'): {
        'm': (-1.3217915296554565, 4.061606407165527),
        'h': (-1.3217915296554565, 4.061606407165527),
    },
    ('maxpool_3x3_s2', 'gauss', 'normal'): {
        'm': (-0.48046159744262695, 4.061606407165527),
        'h': (-0.48046159744262695, 4.061606407165527),
    },
    ('maxpool_3x3_s2', 'gauss', 'kl_divergence'): {
        'm': (-0.48046159744262695, 4.061606407165527),
        'h': (-0.48046159744262695, 4.061606407165527),
    },
    ('maxpool_2x2_output', 'gauss', 'normal'): {
        'm': (-1.3217915296554565, 4.061606407165527),
        'h': (-1.3217915296554565, 4.061606407165527),
    },
    ('maxpool_2x2_output', 'gauss', 'kl_divergence'): {
        'm': (-1.3217915296554565, 4.061606407165527),
        'h': (-1.3217915296554565, 4.061606407165527),
    },
    ('maxpool_2x2_and_conv', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'h': (-3.6610817909240723, 4.061606407165527),
    },
    ('maxpool_2x2_and_conv', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-3.6610817909240723, 3.670914775226265),
    },
    ('relu_maxpool_2x2', 'gauss', 'normal'): {'r': (0.0, 4.061606407165527), 'h': (0.0, 4.061606407165527)},
    ('relu_maxpool_2x2', 'gauss', 'kl_divergence'): {'r': (0.0, 4.061606407165527), 'h': (0.0, 4.061606407165527)},
    ('input_maxpool_2x2', 'gauss', 'normal'): {
        'x': (-1.3217915296554565, 4.061606407165527),
        'h': (-1.3217915296554565, 4.061606407165527),
    },
    ('input_maxpool_2x2', 'gauss', 'kl_divergence'): {
        'x': (-1.3217915296554565, 4.061606407165527),
        'h': (-1.3217915296554565, 4.061606407165527),
    },
    ('avgpool_3x2', 'gauss', 'mmse'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'h': (-3.6610817909240723, 3.670914775226265),
    },
    ('maxpool_2x2', 'gauss', 'mmse'): {
        'm': (-1.3217915296554565, 4.061606407165527),
        'h': (-1.3217915296554565, 4.061606407165527),
    },
    ('avgpool_3x2_then_sigmoid', 'gauss', 'normal'): {
        'm': (-3.6610817909240723, 4.061606407165527),
        'p': (-3.6610817909240723, 4.061606407165527),
    },
    ('avgpool_3x2_then_sigmoid', 'gauss', 'kl_divergence'): {
        'm': (-3.6610817909240723, 3.670914775226265),
        'p': (-3.6610817909240723, 3.670914775226265),
    },
    ('maxpool_2x2_then_sigmoid', 'gauss', 'normal'): {
        'm': (-1.3217915296554565, 4.061606407165527),
        'p': (-1.3217915296554565, 4.061606407165527),
    },
    ('maxpool_2x2_then_sigmoid', 'gauss', 'kl_divergence'): {
        'm': (-1.3217915296554565, 4.061606407165527),
        'p': (-1.3217915296554565, 4.061606407165527),
    },
    ('avgpool_3x2_then_sigmoid', 'wide', 'normal'): {
        'm': (-73.03689575195312, 80.73723602294922),
        'p': (-73.03689575195312, 80.73723602294922),
    },
    ('avgpool_3x2_then_sigmoid', 'wide', 'kl_divergence'): {
        'm': (-73.03689575195312, 73.20754262432456),
        'p': (-73.03689575195312, 73.20754262432456),
    },
    ('maxpool_2x2_then_sigmoid', 'wide', 'normal'): {'m': (-7.0, 7.0), 'p': (-7.0, 7.0)},
    ('maxpool_2x2_then_sigmoid', 'wide', 'kl_divergence'): {'m': (-7.0, 7.0), 'p': (-7.0, 7.0)},
    ('relu_then_sigmoid', 'wide', 'normal'): {'r': (0.0, 7.0)},
    ('relu_then_sigmoid', 'wide', 'kl_divergence'): {'r': (0.0, 7.0)},
    ('relu_then_tanh', 'wide', 'normal'): {'r': (0.0, 3.2)},
    ('relu_then_tanh', 'wide', 'kl_divergence'): {'r': (0.0, 3.2)},
}
