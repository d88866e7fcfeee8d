"""Pointwise convs reading one tensor run as one wider conv (sibling_convs): the same values as
the convs run one by one, the original outputs views of the merged one, and every conv that
cannot merge left alone."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite.backends.software import executor as executor_module
from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.ops import KERNELS
from rknnlite.backends.software.sibling_convs import merge_sibling_convs
from rknnlite.errors import ModelInvalidError
from rknnlite.model.graph import Graph, Node
from rknnlite.model.spec import QuantParams

RNG = np.random.default_rng(21)


def _conv(name, x, w, b=None, **attrs):
    return Node("Conv", name, [x, w] + ([b] if b else []), [name], attrs)


def _inception_head(channels=(16, 24, 8), cin=12) -> Graph:
    """Three 1x1 convs of ``x`` with a fused Relu (the second without a bias), each read by a Neg
    and all three by a Concat, beside a 3x3 and a strided 1x1 conv of ``x`` (neither merges)."""
    consts = {}
    nodes = []
    for k, c in enumerate(channels):
        consts[f"w{k}"] = RNG.standard_normal((c, cin, 1, 1)).astype(np.float32)
        consts[f"b{k}"] = RNG.standard_normal(c).astype(np.float32)
        nodes.append(_conv(f"c{k}", "x", f"w{k}", f"b{k}" if k != 1 else None, _activation="Relu"))
    consts["w3x3"] = RNG.standard_normal((8, cin, 3, 3)).astype(np.float32)
    consts["ws2"] = RNG.standard_normal((8, cin, 1, 1)).astype(np.float32)
    nodes += [_conv("c3x3", "x", "w3x3", pads=[1, 1, 1, 1], _activation="Relu"),
              _conv("cs2", "x", "ws2", strides=[2, 2], _activation="Relu")]
    outputs = []
    for k in range(len(channels)):
        nodes.append(Node("Neg", f"n{k}", [f"c{k}"], [f"y{k}"]))
        outputs.append(f"y{k}")
    nodes.append(Node("Concat", "cat", [f"c{k}" for k in range(len(channels))], ["cat"], {"axis": 1}))
    return Graph(nodes, ["x"], outputs + ["cat", "c3x3", "cs2"], consts)


def _unmerged(monkeypatch):
    monkeypatch.setattr(executor_module, "merge_sibling_convs", lambda graph, keep: (graph, keep))


def _ops(ex: Executor):
    return [n.op for n in ex.graph.nodes]


def test_sibling_pointwise_convs_become_one_conv_and_channel_slices():
    graph = _inception_head()
    merged, _ = merge_sibling_convs(graph)
    ops = [n.op for n in merged.nodes]
    assert ops.count("Conv") == 3 and ops.count("ChannelSlice") == 3  # merged, 3x3, strided
    conv = merged.nodes[0]
    assert conv.op == "Conv" and conv.inputs[0] == "x" and conv.attrs["_activation"] == "Relu"
    weight, bias = merged.constants[conv.inputs[1]], merged.constants[conv.inputs[2]]
    assert weight.shape == (48, 12, 1, 1)
    np.testing.assert_array_equal(weight, np.concatenate([graph.constants[f"w{k}"] for k in range(3)]))
    np.testing.assert_array_equal(bias[16:40], 0)  # the conv without a bias adds zeros
    slices = {n.outputs[0]: (n.attrs["start"], n.attrs["end"]) for n in merged.nodes if n.op == "ChannelSlice"}
    assert slices == {"c0": (0, 16), "c1": (16, 40), "c2": (40, 48)}
    assert not {"w0", "w1", "w2", "b0", "b2"} & set(merged.constants)  # the stacked copies replace them
    merged.validate()


@pytest.mark.parametrize("float_dtype", ["float32", "float16"])
@pytest.mark.parametrize("batch", [1, 3])
def test_merged_convs_give_the_values_of_the_convs_run_one_by_one(monkeypatch, float_dtype, batch):
    graph = _inception_head()
    x = RNG.standard_normal((batch, 12, 9, 9)).astype(np.float32)
    ex = Executor(graph, float_dtype)
    assert "ChannelSlice" in _ops(ex)
    state = ex.new_state()
    got = [state.run([x]) for _ in range(2)]  # planned, then compiled
    _unmerged(monkeypatch)
    reference = Executor(graph, float_dtype)
    assert "ChannelSlice" not in _ops(reference)
    want = reference.run([x])
    for run in got:
        for g, w in zip(run, want):
            np.testing.assert_array_equal(g, w)


def test_the_slices_of_one_image_are_views_of_the_merged_output():
    ex = Executor(_inception_head(), "float32")
    state = ex.new_state()
    state.run([RNG.standard_normal((1, 12, 9, 9)).astype(np.float32)])
    plan = next(iter(state._plans.values()))
    env = plan.program.env
    merged = next(n.outputs[0] for n in ex.graph.nodes if n.op == "Conv" and n.inputs[1].endswith("__weight"))
    for name in ("c0", "c1", "c2"):
        assert np.shares_memory(env[ex._names[name]], env[ex._names[merged]])
    assert not any(owner.node.op == "ChannelSlice" for owner in plan.program.owners)  # nothing runs for them


@pytest.mark.parametrize("change", ["group", "residual", "sparse", "quantized", "attrs", "one", "3x3"])
def test_convs_that_cannot_merge_are_left_alone(change):
    consts = {"w0": RNG.standard_normal((4, 4, 1, 1)).astype(np.float32),
              "w1": RNG.standard_normal((4, 4, 1, 1)).astype(np.float32), "r": np.ones((1, 4, 3, 3), np.float32)}
    a, b = _conv("c0", "x", "w0"), _conv("c1", "x", "w1")
    quant = {}
    if change == "group":
        consts["w0"] = consts["w0"][:, :2].copy()
        consts["w1"] = consts["w1"][:, :2].copy()
        a.attrs["group"] = b.attrs["group"] = 2
    elif change == "residual":
        a.inputs += ["", "r"]
        a.attrs["_residual"] = True
    elif change == "sparse":
        b.attrs["_sparsity"] = 0.5
    elif change == "quantized":
        quant["c1"] = QuantParams("int8", (0.1,), (0,))
    elif change == "attrs":
        b.attrs["_activation"] = "Relu"
    elif change == "3x3":
        consts["w0"] = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
        consts["w1"] = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)
    nodes = [a] if change == "one" else [a, b]
    graph = Graph(nodes, ["x"], [n.outputs[0] for n in nodes], consts, quant)
    merged, keep = merge_sibling_convs(graph, frozenset({"c0"}))
    assert merged is graph and keep == {"c0"}


def test_integer_convs_of_an_int8_model_merge_and_stay_float32():
    """The exact integer convs of two int8 siblings (integer_convs) are float convs on codes: they
    merge, and the merged accumulator stays float32 in float16 mode like theirs."""
    q = QuantParams("int8", (0.02,), (3,))
    consts = {f"w{k}": RNG.uniform(-1, 1, (6, 5, 1, 1)).astype(np.float32) for k in range(2)}
    quant = {"x": q, "c0": QuantParams("int8", (0.05,), (-2,)), "c1": QuantParams("int8", (0.07,), (1,))}
    for k in range(2):
        quant[f"w{k}"] = QuantParams("int8", tuple(np.abs(consts[f"w{k}"]).reshape(6, -1).max(1) / 127), (0,) * 6, 0)
    graph = Graph([_conv("c0", "x", "w0"), _conv("c1", "x", "w1")], ["x"], ["c0", "c1"], consts, quant)
    ex = Executor(graph, "float16")
    accumulators = [n.outputs[0] for n in ex.graph.nodes if n.op == "Conv"]
    assert len(accumulators) == 1 and ex._names[accumulators[0]] in ex.float_slots
    x = RNG.uniform(-2, 2, (1, 5, 4, 4)).astype(np.float32)
    got = ex.run([x])
    for k in range(2):  # each conv's output alone, where nothing merges
        alone = Graph([_conv(f"c{k}", "x", f"w{k}")], ["x"], [f"c{k}"], {f"w{k}": consts[f"w{k}"]},
                      {t: quant[t] for t in ("x", f"c{k}", f"w{k}")})
        np.testing.assert_array_equal(got[k], Executor(alone, "float16").run([x])[0])


def test_channel_slice_refuses_a_range_outside_its_input():
    spec = KERNELS["ChannelSlice"]
    with pytest.raises(ModelInvalidError, match="start"):
        spec.prepare({"start": 3, "end": 3}, [None])
    with pytest.raises(ModelInvalidError, match="channels \\[2, 9\\) of an input with 4 channels"):
        spec.fn([np.zeros((1, 4, 2, 2), np.float32)], {"start": 2, "end": 9})


def test_float32_biases_of_a_vendor_graph_stay_float32_when_merged(monkeypatch):
    """A vendor graph keeps its biases float32 in float16 mode (``keep_float``): the merged bias
    does too, so the merged convs give the unmerged values (rounded to float16 the biases would
    move by up to half a float16 step)."""
    consts = {f"w{k}": RNG.standard_normal((8, 6, 1, 1)).astype(np.float32) for k in range(2)}
    consts.update({f"b{k}": (RNG.standard_normal(8) * 1000 + 0.3).astype(np.float32) for k in range(2)})
    graph = Graph([_conv("c0", "x", "w0", "b0"), _conv("c1", "x", "w1", "b1")], ["x"], ["c0", "c1"], consts)
    graph.keep_float = {"b0", "b1"}
    x = RNG.standard_normal((1, 6, 5, 5)).astype(np.float32)
    ex = Executor(graph, "float16")
    assert "ChannelSlice" in _ops(ex)
    got = ex.run([x])
    _unmerged(monkeypatch)
    for g, w in zip(got, Executor(graph, "float16").run([x])):
        np.testing.assert_array_equal(g, w)
