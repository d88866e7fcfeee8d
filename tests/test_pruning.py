"""Lossless channel pruning: ``config(model_pruning=True)``."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.model.graph import Graph, Node  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.prune import format_result, prune_channels  # noqa: E402

F = onnx.TensorProto.FLOAT


def sparse_model(path, zero=True, exact=False):
    """x(1,3,10,10) -> Conv A (3->8) -> Relu -> Conv B (8->6, pad 1) -> Relu -> MaxPool ->
    Conv C (6->5) -> GlobalAveragePool -> Flatten -> Gemm D (5->7) -> Relu -> Gemm E (7->4).

    With ``zero``: A's channels 1 and 4 are zero with zero bias, channel 6 zero with a
    negative bias (Relu makes it 0), channel 3 zero with a positive bias (kept: it is the
    constant 0.5, not nothing); B reads nothing from A's channel 7; B's channel 2 and D's
    column 5 are zero with zero bias.

    With ``exact`` the weights and biases are small integers and the input is 8x8 (the
    average pool divides by 16): every float32 sum is then exact whatever its order, so
    pruned and full models must agree to the bit."""
    rng = np.random.default_rng(3)

    def values(shape):
        if exact:
            return rng.integers(-2, 3, shape).astype(np.float32)
        return rng.standard_normal(shape).astype(np.float32)

    wa, ba, wb, bb = values((8, 3, 3, 3)), values(8), values((6, 8, 3, 3)), values(6)
    wc, wd, bd, we = values((5, 6, 1, 1)), values((5, 7)), values(7), values((4, 7))
    if zero:
        wa[[1, 3, 4, 6]] = 0
        ba[[1, 4]] = 0
        ba[6] = -0.25
        ba[3] = 0.5
        wb[:, 7] = 0
        wb[2] = 0
        bb[2] = 0
        wd[:, 5] = 0
        bd[5] = 0
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((wa, "wa"), (ba, "ba"), (wb, "wb"), (bb, "bb"), (wc, "wc"), (wd, "wd"), (bd, "bd"), (we, "we"))]
    nodes = [
        helper.make_node("Conv", ["x", "wa", "ba"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "wb", "bb"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node("MaxPool", ["br"], ["bp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["bp", "wc"], ["c"]),
        helper.make_node("GlobalAveragePool", ["c"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wd", "bd"], ["d"]),
        helper.make_node("Relu", ["d"], ["dr"]),
        helper.make_node("Gemm", ["dr", "we"], ["y"], transB=1),
    ]
    size = 8 if exact else 10
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", F, [1, 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def build(path, pruning, float_dtype="float32"):
    rk = RKNN()
    assert rk.config(target_platform="rk3588", float_dtype=float_dtype, model_pruning=pruning) == 0
    assert rk.load_onnx(path) == 0
    assert rk.build() == 0
    return rk


def model_graph(rk, tmp_path, name):
    path = tmp_path / name
    assert rk.export_rknn(str(path)) == 0
    return path, rknnlite.Context(str(path))


X = np.random.default_rng(5).random((4, 1, 3, 10, 10)).astype(np.float32)


def weight_shapes(path):
    from rknnlite.model.loader import load_model

    g = load_model(str(path)).model.graph
    return {n.name: tuple(g.constants[n.inputs[1]].shape) for n in g.nodes if n.op in ("Conv", "Gemm")}, \
        sum(v.size for v in g.constants.values())


def test_pruned_model_gives_the_same_outputs_with_fewer_weights(tmp_path, caplog):
    onnx_path = sparse_model(tmp_path / "sparse.onnx")
    full_path, full = model_graph(build(onnx_path, False), tmp_path, "full.rknn")
    with caplog.at_level(logging.INFO, logger="rknnlite.toolkit"):
        pruned_rk = build(onnx_path, True)
    pruned_path, pruned = model_graph(pruned_rk, tmp_path, "pruned.rknn")
    for x in X:
        a = full.run([x], data_format="nchw")[0]
        b = pruned.run([x], data_format="nchw")[0]
        # only terms that were exactly 0 leave the sums; what remains is the float32
        # accumulation order of the smaller matrices (a few ulps, as against onnxruntime)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    full_shapes, full_count = weight_shapes(full_path)
    shapes, count = weight_shapes(pruned_path)
    assert count < full_count
    # A keeps channels 0, 2, 3 (constant 0.5), 5; B keeps 5 of 6 outputs and reads A's 4;
    # D keeps 6 of 7 columns, E reads 6.
    assert sorted(shapes.values()) == sorted([(4, 3, 3, 3), (5, 4, 3, 3), (5, 5, 1, 1), (5, 6), (4, 6)])
    messages = [r.getMessage() for r in caplog.records]
    assert "model_pruning results:" in messages
    weight = [m for m in messages if m.startswith("Weight: ")]
    flops = [m for m in messages if m.startswith("GFLOPs: ")]
    assert len(weight) == 1 and re.fullmatch(r"Weight: -\d+\.\d{5} MB \(-\d+\.\d%\)", weight[0])
    assert len(flops) == 1 and re.fullmatch(r"GFLOPs: -\d+\.\d{5} \(-\d+\.\d%\)", flops[0])
    removed = (full_count - count) * 4
    assert weight[0] == f"Weight: -{removed / 2 ** 20:.5f} MB (-{100 * removed / (full_count * 4):.1f}%)"
    assert float(re.search(r"-(\d+\.\d)%\)", flops[0]).group(1)) > 10


def test_pruning_is_lossless_to_the_bit_when_sums_are_exact(tmp_path):
    onnx_path = sparse_model(tmp_path / "exact.onnx", exact=True)
    _, full = model_graph(build(onnx_path, False), tmp_path, "full.rknn")
    _, pruned = model_graph(build(onnx_path, True), tmp_path, "pruned.rknn")
    rng = np.random.default_rng(7)
    for _ in range(4):
        x = rng.integers(0, 4, (1, 3, 8, 8)).astype(np.float32)
        a = full.run([x], data_format="nchw")[0]
        assert np.abs(a).max() > 0
        np.testing.assert_array_equal(pruned.run([x], data_format="nchw")[0], a)
    assert weight_shapes(tmp_path / "pruned.rknn")[1] < weight_shapes(tmp_path / "full.rknn")[1]


def test_int8_build_of_a_pruned_model_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    onnx_path = sparse_model(tmp_path / "sparse.onnx")
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", X[i])
    (tmp_path / "ds.txt").write_text("\n".join(f"s{i}.npy" for i in range(3)))
    rk = RKNN()
    rk.config(target_platform="rk3588", model_pruning=True)
    rk.load_onnx(onnx_path)
    assert rk.build(do_quantization=True, dataset="ds.txt") == 0
    assert rk.init_runtime() == 0
    ref_rk = build(onnx_path, False)
    ref_rk.init_runtime()
    for x in X[:3]:  # the calibrated samples
        a = rk.inference([x], data_format="nchw")[0].ravel()
        b = ref_rk.inference([x], data_format="nchw")[0].ravel()
        assert np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b) > 0.99


def test_nothing_prunable_leaves_the_model_unchanged(tmp_path, caplog):
    onnx_path = sparse_model(tmp_path / "dense.onnx", zero=False)
    full_path, _ = model_graph(build(onnx_path, False), tmp_path, "a.rknn")
    with caplog.at_level(logging.INFO, logger="rknnlite.toolkit"):
        rk = build(onnx_path, True)
    pruned_path, _ = model_graph(rk, tmp_path, "b.rknn")
    assert full_path.read_bytes() == pruned_path.read_bytes()
    messages = [r.getMessage() for r in caplog.records]
    assert not any(m.startswith("Weight: ") for m in messages)
    assert any("nothing can be pruned" in m and "unchanged" in m for m in messages)


def test_model_pruning_must_be_a_bool(caplog):
    rk = RKNN()
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.config(target_platform="rk3588", model_pruning="yes") == -1
    assert "model_pruning" in caplog.text


def _conv_graph(w1, b1, w2, between=(), outputs=("y",)):
    consts = {"w1": w1, "b1": b1, "w2": w2}
    nodes = [Node("Conv", "c1", ["x", "w1", "b1"], ["a"], {})]
    prev = "a"
    for k, (op, attrs, extra) in enumerate(between):
        nodes.append(Node(op, f"n{k}", [prev] + list(extra), [f"t{k}"], dict(attrs)))
        prev = f"t{k}"
    nodes.append(Node("Conv", "c2", [prev, "w2"], ["y"], {}))
    return Graph(nodes, ["x"], list(outputs), consts)


def test_channels_are_kept_where_removing_them_could_change_an_output():
    w1 = np.ones((3, 2, 1, 1), np.float32)
    w1[1] = 0
    b1 = np.zeros(3, np.float32)
    w2 = np.ones((2, 3, 1, 1), np.float32)
    # a zero channel through Sigmoid becomes 0.5: not removable where the consumer pads it
    g = _conv_graph(w1, b1, np.ones((2, 3, 3, 3), np.float32), between=[("Sigmoid", {}, ())])
    g.nodes[-1].attrs["pads"] = [1, 1, 1, 1]
    assert not prune_channels(g).pruned
    # read by a graph output: not removable
    g = _conv_graph(w1, b1, w2, outputs=("y", "a"))
    assert not prune_channels(g).pruned
    # a non-zero bias (no activation) makes a constant channel: not removable into a padded conv
    g = _conv_graph(w1, np.array([0, 1, 0], np.float32), np.ones((2, 3, 3, 3), np.float32))
    g.nodes[-1].attrs["auto_pad"] = "SAME_UPPER"
    assert not prune_channels(g).pruned
    # the same through Relu with a negative bias is zero: removed
    g = _conv_graph(w1, np.array([0, -1, 0], np.float32), w2, between=[("Relu", {}, ())])
    r = prune_channels(g)
    assert r.channels == {"c1": 1}
    assert g.constants[g.nodes[0].inputs[1]].shape == (2, 2, 1, 1)
    assert g.constants[g.nodes[-1].inputs[1]].shape == (2, 2, 1, 1)
    assert r.weight_bytes_after < r.weight_bytes_before
    # an unread channel with non-finite weights is kept (inf * 0 is NaN)
    w2b = w2.copy()
    w2b[:, 2] = 0
    w1b = w1.copy()
    w1b[2] = np.inf
    g = _conv_graph(w1b, b1, w2b)
    assert prune_channels(g).channels == {"c1": 1}  # channel 1 (zero) only
    assert g.constants[g.nodes[0].inputs[1]].shape[0] == 2


def test_constant_channels_fold_into_an_unpadded_consumers_bias():
    """RKNN-Toolkit2 removes a channel that is a non-zero constant where a 1x1 (unpadded) conv
    or a Gemm reads it, the constant joining the consumer's bias."""
    w1 = np.ones((3, 2, 1, 1), np.float32)
    w1[1] = 0
    w2 = np.arange(12, dtype=np.float32).reshape(4, 3, 1, 1)
    g = _conv_graph(w1, np.array([0, 2, 0], np.float32), w2, between=[("Sigmoid", {}, ())])
    assert prune_channels(g).channels == {"c1": 1}
    c2 = g.nodes[-1]
    assert g.constants[c2.inputs[1]].shape == (4, 2, 1, 1)
    s = 1 / (1 + np.exp(-2.0))  # the channel's constant after Sigmoid
    np.testing.assert_allclose(g.constants[c2.inputs[2]], s * w2[:, 1, 0, 0], rtol=1e-6)
    # a Gemm consumer (alpha 2, beta 0.5, no C): C gets alpha * v * B[j] / beta
    b = np.arange(15, dtype=np.float32).reshape(3, 5)
    g = Graph([Node("Conv", "c1", ["x", "w1", "b1"], ["a"], {}), Node("GlobalAveragePool", "p", ["a"], ["pa"], {}),
               Node("Flatten", "f", ["pa"], ["fa"], {"axis": 1}),
               Node("Gemm", "d", ["fa", "B"], ["y"], {"alpha": 2.0, "beta": 0.5})],
              ["x"], ["y"], {"w1": w1, "b1": np.array([0, 3, 0], np.float32), "B": b})
    assert prune_channels(g).channels == {"c1": 1}
    d = g.nodes[-1]
    assert g.constants[d.inputs[1]].shape == (2, 5)
    np.testing.assert_allclose(g.constants[d.inputs[2]], 2.0 * 3 * b[1] / 0.5, rtol=1e-6)
    # a C of one value per output row and column (not a bias) or a Conv bias computed at run time: kept
    g = Graph([Node("Conv", "c1", ["x", "w1", "b1"], ["a"], {}), Node("GlobalAveragePool", "p", ["a"], ["pa"], {}),
               Node("Flatten", "f", ["pa"], ["fa"], {"axis": 1}), Node("Gemm", "d", ["fa", "B", "C"], ["y"], {})],
              ["x"], ["y"], {"w1": w1, "b1": np.array([0, 3, 0], np.float32), "B": b,
                             "C": np.ones((4, 5), np.float32)})
    assert not prune_channels(g).pruned
    g = _conv_graph(w1, np.array([0, 2, 0], np.float32), w2, between=[("Sigmoid", {}, ())])
    g.nodes[-1].inputs.append("runtime_bias")
    g.inputs.append("runtime_bias")
    assert not prune_channels(g).pruned


def _mobilenet_block(path):
    """x(1,3,12,12) -> Conv (3->8) -> Relu -> depthwise 3x3 (pad 1) -> BatchNormalization -> Clip(0, 6) ->
    Conv 1x1 (8->6) -> Relu -> GlobalAveragePool -> Flatten -> Gemm (6->5): channels 2 and 5 of the
    first conv have zero weights and a bias (3, -1)."""
    rng = np.random.default_rng(11)
    w1, b1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    w1[[2, 5]] = 0
    b1[2], b1[5] = 3.0, -1.0
    wd, bd = rng.standard_normal((8, 1, 3, 3)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    scale, shift = rng.random(8).astype(np.float32) + 0.5, rng.standard_normal(8).astype(np.float32)
    mean, var = rng.standard_normal(8).astype(np.float32), rng.random(8).astype(np.float32) + 0.5
    w2, b2 = rng.standard_normal((6, 8, 1, 1)).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    wg = rng.standard_normal((6, 5)).astype(np.float32)
    names = "w1 b1 wd bd scale shift mean var w2 b2 wg lo hi".split()
    arrays = [w1, b1, wd, bd, scale, shift, mean, var, w2, b2, wg, np.float32(0), np.float32(6)]
    inits = [numpy_helper.from_array(np.asarray(a), n) for a, n in zip(arrays, names)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("BatchNormalization", ["d", "scale", "shift", "mean", "var"], ["bn"]),
        helper.make_node("Clip", ["bn", "lo", "hi"], ["r6"]),
        helper.make_node("Conv", ["r6", "w2", "b2"], ["c"]),
        helper.make_node("Relu", ["c"], ["cr"]),
        helper.make_node("GlobalAveragePool", ["cr"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wg"], ["y"]),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", F, [1, 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def test_zero_channels_are_pruned_through_a_depthwise_block(tmp_path):
    """A zero channel of a MobileNet block (channel 5: bias -1 through Relu) goes from the first
    conv, the depthwise conv and its BatchNormalization; the constant it holds after them joins the
    1x1 conv's bias.  Channel 2 (the constant 3) stays: the padded depthwise conv makes it vary at
    the border."""
    onnx_path = _mobilenet_block(tmp_path / "m.onnx")
    full_path, full = model_graph(build(onnx_path, False), tmp_path, "full.rknn")
    pruned_path, pruned = model_graph(build(onnx_path, True), tmp_path, "pruned.rknn")
    x = np.random.default_rng(2).random((1, 3, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(pruned.run([x], data_format="nchw")[0], full.run([x], data_format="nchw")[0],
                               rtol=1e-5, atol=1e-5)
    shapes = sorted(weight_shapes(pruned_path)[0].values())
    # a float32 build keeps the 12 x 12 GlobalAveragePool whole: it has no weights to prune
    assert shapes == [(6, 5), (6, 7, 1, 1), (7, 1, 3, 3), (7, 3, 3, 3)], shapes
    # a float16 build splits it into the vendor's two depthwise convs, (6, 1, 7, 7) and
    # (6, 1, 2, 2), pruned to the 6 channels left along with the rest
    half_path, _ = model_graph(build(onnx_path, True, "float16"), tmp_path, "half.rknn")
    shapes = sorted(weight_shapes(half_path)[0].values())
    assert shapes == [(6, 1, 2, 2), (6, 1, 7, 7), (6, 5), (6, 7, 1, 1), (7, 1, 3, 3), (7, 3, 3, 3)], shapes
    assert weight_shapes(pruned_path)[1] < weight_shapes(full_path)[1]


def test_shared_weights_are_not_modified_in_place():
    w1 = np.ones((3, 2, 1, 1), np.float32)
    w1[0] = 0
    b1 = np.zeros(3, np.float32)
    w2 = np.ones((2, 3, 1, 1), np.float32)
    g = _conv_graph(w1, b1, w2)
    g.nodes.append(Node("Conv", "c3", ["x", "w1", "b1"], ["z"], {}))
    g.outputs.append("z")
    before = {k: v.copy() for k, v in g.constants.items()}
    prune_channels(g)
    assert g.nodes[0].inputs[1] != "w1" and g.nodes[-1].inputs[1] == "w1"
    np.testing.assert_array_equal(g.constants["w1"], before["w1"])


def test_format_result_lines():
    from rknnlite.toolkit.prune import PruneResult

    r = PruneResult({"c": 1}, weight_bytes_before=16_000_000, weight_bytes_after=14_824_070,
                    flops_before=1_161_417_910, flops_after=1_005_787_910)
    assert format_result(r) == ["model_pruning results:", "Weight: -1.12145 MB (-7.3%)", "GFLOPs: -0.15563 (-13.4%)"]
