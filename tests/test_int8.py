"""int8 mode of the executor, with hand-set quantization parameters."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import ModelInvalidError
from rknnlite.backends.software.executor import Executor
from rknnlite.model.graph import Graph, Node
from rknnlite.model.metadata import build_metadata
from rknnlite.model.portable import read_portable, write_portable
from rknnlite.model.spec import QuantParams, TensorSpec

RNG = np.random.default_rng(11)
W = (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32) * 0.1
W_SCALES = tuple(float(s) for s in np.abs(W).reshape(4, -1).max(axis=1) / 127)
Q_X = QuantParams("int8", (0.02,), (-5,))
Q_Y = QuantParams("int8", (0.06,), (3,))
Q_W = QuantParams("int8", W_SCALES, (0, 0, 0, 0), axis=0)


def graph(quant=True) -> Graph:
    nodes = [Node("Conv", "conv", ["x", "w", "b"], ["y"], {"pads": [1, 1, 1, 1]})]
    q = {"x": Q_X, "y": Q_Y, "w": Q_W} if quant else {}
    return Graph(nodes, ["x"], ["y"], {"w": W, "b": B}, q)


def quantize(x, scale, zp):
    return np.clip(np.round(x / scale) + zp, -128, 127).astype(np.int64)


def reference(x):
    """Integer reference: int8 input and per-channel int8 weights, exact int64 accumulation,
    float bias, requantized to the output grid."""
    qx = quantize(x, Q_X.scale[0], Q_X.zero_point[0]) - Q_X.zero_point[0]
    qw = np.stack([quantize(W[c], W_SCALES[c], 0) for c in range(4)])
    xp = np.pad(qx, ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, c, h, w = x.shape
    acc = np.zeros((n, 4, h, w), np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + h, j:j + w], qw[:, :, i, j])
    y = acc * (Q_X.scale[0] * np.asarray(W_SCALES).reshape(1, 4, 1, 1)) + B.reshape(1, 4, 1, 1)
    return (quantize(y, Q_Y.scale[0], Q_Y.zero_point[0]) - Q_Y.zero_point[0]) * Q_Y.scale[0]


def test_int8_conv_matches_integer_reference():
    x = RNG.uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32)
    state = Executor(graph(), "float16").new_state()
    for _ in range(2):  # unplanned, then planned
        out = state.run([x])[0]
        step = Q_Y.scale[0]
        np.testing.assert_allclose(out, reference(x), atol=step * 1.01)
        assert np.mean(np.abs(out - reference(x)) < 1e-6) > 0.98
        grid = out / step + Q_Y.zero_point[0]
        np.testing.assert_allclose(grid, np.round(grid), atol=1e-3)  # on the int8 grid
        assert grid.max() <= 127 + 1e-3 and grid.min() >= -128 - 1e-3


def test_int8_output_saturates():
    x = np.full((1, 3, 8, 8), 100.0, np.float32)  # far above the input range
    out = Executor(graph(), "float32").run([x])[0]
    assert np.all(out <= (127 - Q_Y.zero_point[0]) * Q_Y.scale[0] + 1e-6)
    assert np.all(out >= (-128 - Q_Y.zero_point[0]) * Q_Y.scale[0] - 1e-6)


def test_quant_params_survive_the_file_and_run_through_context():
    meta = build_metadata([TensorSpec("x", (1, 3, 8, 8), "float32", "NCHW")],
                          [TensorSpec("y", (1, 4, 8, 8), "float32", "NCHW")], quantization="int8")
    data = write_portable(meta, graph())
    model = read_portable(memoryview(data))
    assert model.graph.quant["w"] == Q_W and model.graph.quant["y"] == Q_Y
    x = RNG.uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32)
    with rknnlite.Context(data) as ctx:
        np.testing.assert_allclose(ctx.run([x], data_format="nchw")[0], reference(x), atol=Q_Y.scale[0] * 1.01)


def test_int8_differs_from_float_but_stays_close():
    x = RNG.uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32)
    q = Executor(graph(), "float32").run([x])[0]
    f = Executor(graph(quant=False), "float32").run([x])[0]
    assert not np.array_equal(q, f)
    cos = float(np.dot(q.ravel(), f.ravel()) / np.linalg.norm(q) / np.linalg.norm(f))
    assert cos > 0.999


@pytest.mark.parametrize("bad, match", [
    ({"x": QuantParams("int8", (0.0,), (0,))}, "positive scales"),
    ({"x": QuantParams("int4", (0.1,), (0,))}, "dtype"),
    ({"nope": QuantParams("int8", (0.1,), (0,))}, "unknown tensor"),
])
def test_bad_quantization_is_rejected(bad, match):
    g = graph(quant=False)
    g.quant = bad
    meta = build_metadata([TensorSpec("x", (1, 3, 8, 8), "float32", "NCHW")],
                          [TensorSpec("y", (1, 4, 8, 8), "float32", "NCHW")], quantization="int8")
    with pytest.raises(ModelInvalidError, match=match):
        write_portable(meta, g)


def test_per_channel_scale_count_must_match():
    g = graph()
    g.quant["w"] = QuantParams("int8", (0.1, 0.2), (0, 0), axis=0)
    with pytest.raises(ModelInvalidError, match="2 scales for 4 channels"):
        Executor(g, "float32")
