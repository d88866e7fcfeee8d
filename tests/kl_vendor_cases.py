"""Synthetic calibration data whose ``kl_divergence`` ranges were measured with RKNN-Toolkit2.

Imported by ``tests/test_quant_algorithms.py`` and by ``tools/vendor_corpus/kl_ranges.py``
(which runs in the vendor's venv, so this module needs numpy only).  Each case is a list of
calibration samples, each a ``(64, 64)`` float32 array: one channel of a ``[1, 1, 64, 64]``
input fed through an identity 1x1 convolution (``relu`` cases: followed by a Relu):
:func:`onnx_model`.
"""

import numpy as np


def onnx_model(kind):
    """``x [1, 1, 64, 64] -> identity 1x1 Conv (-> Relu for kind "relu") -> y`` as an ONNX
    ``ModelProto`` (needs the onnx package)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if kind == "relu" else "y"])]
    if kind == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64, 64])],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w"),
         numpy_helper.from_array(np.zeros(1, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def _samples(seed, n, gen):
    rng = np.random.default_rng(seed)
    return [gen(rng).astype(np.float32) for _ in range(n)]


def _outliers(rng):
    x = rng.standard_normal((64, 64))
    x[0, :3] = (30.0, -25.0, 40.0)
    return x


def _low_spike(rng):
    x = rng.standard_normal((64, 64))
    x[:8] = 0.01  # a spike just above zero: every candidate diverges, the range stays min/max
    return x


def _half_zero(rng):
    x = rng.standard_normal((64, 64))
    x[:, :32] = 0.0
    return x


#: name -> (samples, model kind: "conv" or "relu")
CASES = {
    "gauss_4": (lambda: _samples(1, 4, lambda r: r.standard_normal((64, 64))), "conv"),
    "gauss_16": (lambda: _samples(2, 16, lambda r: r.standard_normal((64, 64))), "conv"),
    "laplace_4": (lambda: _samples(3, 4, lambda r: r.laplace(0.0, 1.0, (64, 64))), "conv"),
    "student_t3_4": (lambda: _samples(4, 4, lambda r: r.standard_t(3, (64, 64))), "conv"),
    "lognormal_4": (lambda: _samples(5, 4, lambda r: np.exp(r.standard_normal((64, 64)))), "conv"),
    "uniform_4": (lambda: _samples(6, 4, lambda r: r.uniform(-1.0, 3.0, (64, 64))), "conv"),
    "relu_gauss_4": (lambda: _samples(7, 4, lambda r: r.standard_normal((64, 64))), "relu"),
    "half_zero_4": (lambda: _samples(8, 4, _half_zero), "conv"),
    "low_spike_4": (lambda: _samples(9, 4, _low_spike), "conv"),
    "outliers_4": (lambda: _samples(10, 4, _outliers), "conv"),
}
