"""Toy models whose Sigmoid / Tanh input ranges were measured with RKNN-Toolkit2 2.5.0.

Imported by ``tests/test_quant_algorithms.py`` and by ``tools/vendor_corpus/act_bounds.py``
(which runs in the vendor's venv and prints :data:`VENDOR`).  Every model starts with
``x [1, 1, 64, 64] -> identity 1x1 Conv -> m``; what reads ``m`` is the model's kind
(:data:`MODELS`).  The calibration data are 4 samples of ``scale * N(0, 1) + shift``
(:data:`DATA`).  The vendor ran ``hybrid_quantization_step1`` (rk3588,
``quantized_method='layer'``, mean 0, std 1) and its ``.quantization.cfg`` gave the ranges.

What they show: a tensor whose only reader is a Sigmoid is clamped to ``[-7, 7]``, a Tanh's
to ``[-3.2, 3.2]``, under ``normal``, ``kl_divergence`` and ``mmse`` alike, after the
algorithm's range has been widened to contain 0 (data in ``[10.3, 18.7]`` gives ``[0, 7]``);
ranges inside are kept.  A model input is clamped too.  No clamp when the tensor is a graph
output, or is also read by a Conv, by the Mul of ``m * Sigmoid(m)``, by a second activation
(Sigmoid and Tanh; two Sigmoids; HardSigmoid and HardSwish, each of which alone is bounded).
"""

import numpy as np

#: kind -> (what reads ``m``, graph outputs)
MODELS = {
    "sigmoid": ("m -> Sigmoid -> h -> Conv -> y", ("y",)),
    "tanh": ("m -> Tanh -> h -> Conv -> y", ("y",)),
    "sigmoid_and_conv": ("m -> Sigmoid -> h -> Conv -> y; m -> Conv -> z", ("y", "z")),
    "sigmoid_and_output": ("m -> Sigmoid -> h -> Conv -> y; m is an output too", ("y", "m")),
    "sigmoid_and_tanh": ("m -> Sigmoid -> s, m -> Tanh -> t, s + t -> h -> Conv -> y", ("y",)),
    "two_sigmoids": ("m -> Sigmoid -> s, m -> Sigmoid -> t, s + t -> h -> Conv -> y", ("y",)),
    "hardsigmoid_and_hardswish": ("m -> HardSigmoid(0.25, 0.4) -> s, m -> HardSwish -> t, s + t -> h -> Conv -> y",
                                  ("y",)),
    "swish": ("m -> Sigmoid -> s, m * s -> h -> Conv -> y", ("y",)),
    "input_sigmoid": ("x -> Sigmoid -> h -> Conv -> y (the model input feeds the Sigmoid)", ("y",)),
}

#: data name -> (seed, scale, shift)
DATA = {
    "wide": (3, 20.0, 0.0),  # about [-80, 80]: both ends beyond both bounds
    "narrow": (4, 0.5, 0.0),  # about [-2, 2]: inside both bounds
    "high": (5, 2.0, 8.0),  # about [0, 16]: only the upper end beyond the bounds
    "above": (6, 1.0, 15.0),  # about [11, 19]: entirely above both bounds
}


def samples(data):
    """The 4 calibration samples of ``data``, each ``(1, 1, 64, 64)`` float32."""
    seed, scale, shift = DATA[data]
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal((1, 1, 64, 64)) + shift).astype(np.float32) for _ in range(4)]


def onnx_model(kind):
    """The ONNX model (a ``ModelProto``) of ``kind``; needs the onnx package."""
    from onnx import TensorProto, helper, numpy_helper

    eye = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w")
    zero = numpy_helper.from_array(np.zeros(1, np.float32), "b")
    node = helper.make_node
    src = "x" if kind == "input_sigmoid" else "m"
    nodes = [] if kind == "input_sigmoid" else [node("Conv", ["x", "w", "b"], ["m"], name="c1")]
    pairs = {"sigmoid_and_tanh": ("Sigmoid", "Tanh"), "two_sigmoids": ("Sigmoid", "Sigmoid"),
             "hardsigmoid_and_hardswish": ("HardSigmoid", "HardSwish")}
    if kind in ("sigmoid", "tanh", "sigmoid_and_conv", "sigmoid_and_output", "input_sigmoid"):
        nodes.append(node("Tanh" if kind == "tanh" else "Sigmoid", [src], ["h"], name="act"))
    elif kind in pairs:
        first, second = pairs[kind]
        extra = {"alpha": 0.25, "beta": 0.4} if first == "HardSigmoid" else {}
        nodes += [node(first, ["m"], ["s"], name="act1", **extra), node(second, ["m"], ["t"], name="act2"),
                  node("Add", ["s", "t"], ["h"], name="add")]
    elif kind == "swish":
        nodes += [node("Sigmoid", ["m"], ["s"], name="sig"), node("Mul", ["m", "s"], ["h"], name="mul")]
    else:
        raise ValueError(kind)
    nodes.append(node("Conv", ["h", "w", "b"], ["y"], name="c2"))
    if kind == "sigmoid_and_conv":
        nodes.append(node("Conv", ["m", "w", "b"], ["z"], name="c3"))
    shape = [1, 1, 64, 64]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, shape) for o in MODELS[kind][1]],
                              [eye, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def activation_input(kind):
    """The tensor that feeds the activation(s): ``m``, or ``x`` for ``input_sigmoid`` (the
    vendor's cfg calls a model input or output ``<name>_int8``)."""
    return "x" if kind == "input_sigmoid" else "m"


#: (kind, data, algorithm) measured
CASES = [(kind, data, algorithm) for kind in ("sigmoid", "tanh") for data in DATA
         for algorithm in ("normal", "kl_divergence", "mmse")] + \
        [(kind, "wide", algorithm) for kind in ("sigmoid_and_conv", "sigmoid_and_output", "sigmoid_and_tanh",
                                                "two_sigmoids", "hardsigmoid_and_hardswish", "swish",
                                                "input_sigmoid") for algorithm in ("normal", "kl_divergence")]

#: (kind, data, algorithm) -> (min, max) of :func:`activation_input` as the vendor's cfg
#: writes it (``tools/vendor_corpus/act_bounds.py``)
VENDOR = {
    ('sigmoid', 'wide', 'normal'): (-7.0, 7.0),  # data [-73.0369, 80.7372]
    ('sigmoid', 'wide', 'kl_divergence'): (-7.0, 7.0),  # data [-73.0369, 80.7372]
    ('sigmoid', 'wide', 'mmse'): (-7.0, 7.0),  # data [-73.0369, 80.7372]
    ('sigmoid', 'narrow', 'normal'): (-2.0284643173217773, 1.8344553709030151),  # data [-2.0285, 1.8345]
    ('sigmoid', 'narrow', 'kl_divergence'): (-1.839286248665303, 1.8344553709030151),  # data [-2.0285, 1.8345]
    ('sigmoid', 'narrow', 'mmse'): (-1.839286248665303, 1.8344553709030151),  # data [-2.0285, 1.8345]
    ('sigmoid', 'high', 'normal'): (0.0, 7.0),  # data [0.5019, 15.5092]
    ('sigmoid', 'high', 'kl_divergence'): (0.0, 7.0),  # data [0.5019, 15.5092]
    ('sigmoid', 'high', 'mmse'): (0.0, 7.0),  # data [0.5019, 15.5092]
    ('sigmoid', 'above', 'normal'): (0.0, 7.0),  # data [10.2540, 18.6695]
    ('sigmoid', 'above', 'kl_divergence'): (0.0, 7.0),  # data [10.2540, 18.6695]
    ('sigmoid', 'above', 'mmse'): (0.0, 7.0),  # data [10.2540, 18.6695]
    ('tanh', 'wide', 'normal'): (-3.2, 3.2),  # data [-73.0369, 80.7372]
    ('tanh', 'wide', 'kl_divergence'): (-3.2, 3.2),  # data [-73.0369, 80.7372]
    ('tanh', 'wide', 'mmse'): (-3.2, 3.2),  # data [-73.0369, 80.7372]
    ('tanh', 'narrow', 'normal'): (-2.0284643173217773, 1.8344553709030151),  # data [-2.0285, 1.8345]
    ('tanh', 'narrow', 'kl_divergence'): (-1.839286248665303, 1.8344553709030151),  # data [-2.0285, 1.8345]
    ('tanh', 'narrow', 'mmse'): (-1.839286248665303, 1.8344553709030151),  # data [-2.0285, 1.8345]
    ('tanh', 'high', 'normal'): (0.0, 3.2),  # data [0.5019, 15.5092]
    ('tanh', 'high', 'kl_divergence'): (0.0, 3.2),  # data [0.5019, 15.5092]
    ('tanh', 'high', 'mmse'): (0.0, 3.2),  # data [0.5019, 15.5092]
    ('tanh', 'above', 'normal'): (0.0, 3.2),  # data [10.2540, 18.6695]
    ('tanh', 'above', 'kl_divergence'): (0.0, 3.2),  # data [10.2540, 18.6695]
    ('tanh', 'above', 'mmse'): (0.0, 3.2),  # data [10.2540, 18.6695]
    ('sigmoid_and_conv', 'wide', 'normal'): (-73.03689575195312, 80.73723602294922),  # data [-73.0369, 80.7372]
    ('sigmoid_and_conv', 'wide', 'kl_divergence'): (-73.03689575195312, 73.20754262432456),  # data [-73.0369, 80.7372]
    ('sigmoid_and_output', 'wide', 'normal'): (-73.03689575195312, 80.73723602294922),  # data [-73.0369, 80.7372]
    ('sigmoid_and_output', 'wide', 'kl_divergence'): (-73.03689575195312, 73.20754262432456),  # data [-73.0369, 80.7372]
    ('sigmoid_and_tanh', 'wide', 'normal'): (-73.03689575195312, 80.73723602294922),  # data [-73.0369, 80.7372]
    ('sigmoid_and_tanh', 'wide', 'kl_divergence'): (-73.03689575195312, 73.20754262432456),  # data [-73.0369, 80.7372]
    ('two_sigmoids', 'wide', 'normal'): (-73.03689575195312, 80.73723602294922),  # data [-73.0369, 80.7372]
    ('two_sigmoids', 'wide', 'kl_divergence'): (-73.03689575195312, 73.20754262432456),  # data [-73.0369, 80.7372]
    ('hardsigmoid_and_hardswish', 'wide', 'normal'): (-73.03689575195312, 80.73723602294922),  # data [-73.0369, 80.7372]
    ('hardsigmoid_and_hardswish', 'wide', 'kl_divergence'): (-73.03689575195312, 73.20754262432456),  # data [-73.0369, 80.7372]
    ('swish', 'wide', 'normal'): (-73.03689575195312, 80.73723602294922),  # data [-73.0369, 80.7372]
    ('swish', 'wide', 'kl_divergence'): (-73.03689575195312, 73.20754262432456),  # data [-73.0369, 80.7372]
    ('input_sigmoid', 'wide', 'normal'): (-7.0, 7.0),  # data [-73.0369, 80.7372]
    ('input_sigmoid', 'wide', 'kl_divergence'): (-7.0, 7.0),  # data [-73.0369, 80.7372]
}
