"""``exSDPAttention``: the compiler's fused attention (YOLO11's C2PSA) in vendor files, off-board.

The corpus case ``psa_attention`` is Ultralytics' ONNX form of that attention, built with
RKNN-Toolkit2 2.5.0 and 2.3.2 (``tools/vendor_corpus/models.py``); both compile it to one
``exSDPAttention`` node.  Its fidelity against the simulator is asserted in
``tests/test_vendor_offboard.py`` (``FIDELITY``; the int8 builds are refused there).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower as lower_mod
from rknnlite.model.rknn_graph import lower_rockchip

from corpus import CORPUS

NODE = "exSDPAttention:MatMul25#1_2sdpa"


@pytest.fixture(scope="module", params=["psa_attention_fp16", "psa_attention_fp16_tk232"])
def loaded(request):
    return load_model(str(CORPUS / f"{request.param}.rknn"))


def test_attention_lowers_to_its_onnx_steps(loaded):
    model = lower_rockchip(loaded.payload, loaded.model)
    nodes = [n for n in model.graph.nodes if n.name == NODE]
    assert [n.op for n in nodes] == ["Transpose", "Transpose", "MatMul", "Mul", "Softmax", "Transpose", "Transpose",
                                     "MatMul", "Transpose"]
    (mul,) = [n for n in nodes if n.op == "Mul"]
    assert float(model.graph.constants[mul.inputs[1]]) == pytest.approx(32 ** -0.5)  # key_dim 32, from the BSON
    assert [n.attrs["axis"] for n in nodes if n.op == "Softmax"] == [-1]
    # one NPU op: only its output is rounded to float16
    assert {n.outputs[0] for n in nodes[:-1]} <= set(model.graph.keep_float)
    assert nodes[-1].outputs[0] not in model.graph.keep_float


def test_the_decomposition_is_scaled_dot_product_attention(loaded):
    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.graph import Graph

    model = lower_rockchip(loaded.payload, loaded.model)
    nodes = [n for n in model.graph.nodes if n.name == NODE]
    q, k, v = nodes[0].inputs[0], nodes[1].inputs[0], nodes[5].inputs[0]
    consts = {name: model.graph.constants[name] for n in nodes for name in n.inputs if name in model.graph.constants}
    graph = Graph(nodes, [q, k, v], [nodes[-1].outputs[0]], consts)
    rng = np.random.default_rng(0)
    xq, xk = rng.standard_normal((2, 2, 32, 1, 16)).astype(np.float32)
    xv = rng.standard_normal((2, 64, 1, 16)).astype(np.float32)
    (got,) = Executor(graph, "float32").run([xq, xk, xv])
    scores = np.einsum("hdi,hdj->hij", xq[:, :, 0], xk[:, :, 0]) * 32 ** -0.5
    attn = np.exp(scores - scores.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    np.testing.assert_allclose(got[:, :, 0], np.einsum("hcj,hij->hci", xv[:, :, 0], attn), rtol=1e-5, atol=1e-5)


def test_attention_without_its_scale_is_refused(loaded, monkeypatch):
    original = lower_mod._Lowering.bson

    def bson(self, node, name, default=None):
        return "0.17" if (node.op, name) == ("exSDPAttention", "scale") else original(self, node, name, default)

    monkeypatch.setattr(lower_mod._Lowering, "bson", bson)
    with pytest.raises(ModelInvalidError, match="attribute 'scale' is '0.17'; a finite float was expected"):
        lower_rockchip(loaded.payload, loaded.model)


def test_attention_of_another_geometry_is_refused(loaded, monkeypatch):
    original = lower_mod.read_vendor_graph

    def read_vendor_graph(*args, **kwargs):
        vf = original(*args, **kwargs)
        sg = vf.subgraphs[0]
        (node,) = [n for n in sg.nodes if n.op == "exSDPAttention"]
        (out,) = node.outputs
        tensors = tuple(dataclasses.replace(t, shape=(2, 64, 2, 8)) if t.index == out else t for t in sg.tensors)
        return dataclasses.replace(vf, subgraphs=(dataclasses.replace(sg, tensors=tensors),) + vf.subgraphs[1:])

    monkeypatch.setattr(lower_mod, "read_vendor_graph", read_vendor_graph)
    with pytest.raises(ModelInvalidError, match=r"q, k, v and output shapes \[\[2, 32, 1, 16\], \[2, 32, 1, 16\], "
                                                 r"\[2, 64, 1, 16\], \[2, 64, 2, 8\]\] are not \(heads, d, 1, tokens\)"):
        lower_rockchip(loaded.payload, loaded.model)
