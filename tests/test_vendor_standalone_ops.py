"""Standalone activations in vendor files: lookup-table ops (Tanh, Softplus, Elu, ConvTanh), DPU-only
ones (LeakyRelu, Abs as LeakyRelu of slope -1, PRelu, ConvPRelu, Clip, HardSigmoid, Max, Min, Pow as a
square) and the runtime's CPU ops (Exp, Erf, ReduceMax, ReduceMin), as RKNN-Toolkit2 2.5.0 compiles
them (corpus ``standalone_ops_*``, ``standalone_elu_*``; tools/vendor_corpus/models.py
``_standalone_ops``).  That each file matches the simulator is test_vendor_offboard's; here: what each
op lowers to, and the refusals around them."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph.lower import read_graph
from rknnlite.model.rknn_graph.regcmd import TASK_SIZE
from rknnlite.model.rknn_graph.validated import ALLOW_ENV
from rknnlite.model.schema import V6

from corpus import CORPUS, corpus_arrays, inputs_of, lowered
from vendor_files import doctored_copy, node_tables, tensor_bytes

#: the outputs of standalone_ops_rk3588 (tools/vendor_corpus/models.py STANDALONE_OPS), in order
OUTPUTS = ("tanh", "softplus", "leakyrelu", "prelu", "abs", "exp", "erf", "reducemax", "convtanh", "convprelu", "max",
           "min", "pow", "clip", "hardsigmoid", "reducemin", "leakyrelu001", "prelu1", "convprelu1")


def _producer(graph, output: str):
    (node,) = [n for n in graph.nodes if output in n.outputs]
    return node


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_each_op_lowers_to_its_function(variant):
    graph = lowered(f"standalone_ops_rk3588_{variant}").graph
    ops = {name: _producer(graph, name) for name in OUTPUTS}
    lut = "VendorLutActivation" if variant == "i8" else None
    assert ops["tanh"].op == (lut or "Tanh") and ops["softplus"].op == (lut or "Softplus")
    assert ops["convtanh"].op == (lut or "Tanh")
    assert ops["leakyrelu"].op == "LeakyRelu" and ops["leakyrelu"].attrs["alpha"] == pytest.approx(0.1)
    assert ops["abs"].op == "LeakyRelu" and ops["abs"].attrs["alpha"] == -1.0  # Abs compiles to slope -1
    # ONNX's default slope: neither the BSON nor the parameter table stores it
    assert ops["leakyrelu001"].op == "LeakyRelu" and ops["leakyrelu001"].attrs["alpha"] == pytest.approx(0.01)
    assert ops["prelu"].op == "PRelu" and ops["convprelu"].op == "PRelu"
    assert ops["exp"].op == "Exp" and ops["erf"].op == "Erf"
    assert ops["reducemax"].op == "ReduceMax" and ops["reducemax"].attrs == {"axes": [1], "keepdims": 1}
    assert (ops["max"].op, ops["min"].op, ops["pow"].op) == ("Max", "Min", "Pow")
    assert graph.constants[ops["pow"].inputs[1]].ravel().tolist() == [2.0]
    assert ops["clip"].op == "Clip" and [graph.constants[n].item() for n in ops["clip"].inputs[1:]] == [-0.5, 1.5]
    # HardSigmoid: the float function in int8 files too (the simulator computes it so: standalone_hardsigmoid_*)
    assert ops["hardsigmoid"].op == "HardSigmoid"
    assert ops["hardsigmoid"].attrs == pytest.approx({"alpha": 0.3, "beta": 0.4})
    assert ops["reducemin"].op == "ReduceMin" and ops["reducemin"].attrs == {"axes": [1], "keepdims": 1}


@pytest.mark.parametrize("variant", ["fp16", "i8"])
@pytest.mark.parametrize("toolkit", ["", "_tk232"])  # 2.3.2 keeps the ONNX slope shapes: (C, 1, 1), (1, 1, 1)
def test_standalone_prelu_slopes_are_the_onnx_ones(variant, toolkit):
    graph = lowered(f"standalone_ops_rk3588_{variant}{toolkit}").graph
    slopes = {name: graph.constants[_producer(graph, name).inputs[1]].ravel() for name in ("prelu", "prelu1",
                                                                                          "convprelu1")}
    np.testing.assert_allclose(slopes["prelu"], np.arange(1, 17) * 0.05, rtol=1e-3)
    # one slope for every channel (nn.PReLU()'s default): a float32 (1, 1, 1, 1) constant, fp16 and int8 alike
    assert slopes["prelu1"].tolist() == [np.float32(0.2)] * 16
    assert slopes["convprelu1"].tolist() == [np.float32(0.15)] * 8


def test_standalone_ops_match_the_simulator_per_output():
    # each output on its own (the corpus test checks the file as a whole): Exp's int8 grid is 20.7 wide
    data = corpus_arrays("standalone_ops_rk3566_i8")
    with rknnlite.Context(str(CORPUS / "standalone_ops_rk3566_i8.rknn"), backend="software") as ctx:
        outs = ctx.run(inputs_of(data), data_format="nchw")
        scales = [a.scale for a in ctx.outputs]
    for k, (name, y) in enumerate(zip(OUTPUTS, outs)):
        sim = data[f"out{k}"].reshape(y.shape)
        assert np.mean(np.abs(y - sim) <= scales[k] * 1.0001) >= 0.99, name


def _elu_i8() -> str:
    return str(CORPUS / "standalone_elu_rk3588_i8.rknn")


def test_int8_elu_is_refused_by_name_even_when_unvalidated_files_may_run(monkeypatch):
    with pytest.raises(ModelInvalidError, match="an int8 Elu: its lookup table's index map was not decoded"):
        rknnlite.Context(_elu_i8(), backend="software")
    monkeypatch.setenv(ALLOW_ENV, "1")
    with pytest.raises(ModelInvalidError, match="an int8 Elu"):
        rknnlite.Context(_elu_i8(), backend="software")


def test_fp16_elu_takes_alpha_from_the_bson():
    graph = lowered("standalone_elu_rk3588_fp16").graph
    node = _producer(graph, "elu")
    assert node.op == "Elu" and node.attrs["alpha"] == pytest.approx(0.7)


def _node(stem: str, op: str):
    """The first subgraph and its one node of type ``op`` in corpus file ``stem``."""
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    subgraph = read_graph(loaded.payload, loaded.model).subgraphs[0]
    (node,) = [n for n in subgraph.nodes if n.op == op]
    return subgraph, node


_CPU_ONLY = "a {op} with NPU tasks; only the runtime's CPU {op}"
# rk3576 runs a channel ReduceMax as NPU tasks with scratch tensors (reducemax_npu_*), which this one lacks
_NO_SCRATCH = r"a ReduceMax run as NPU tasks with scratch tensors \[\]; only the channel maximum of rk3576"


@pytest.mark.parametrize("stem, op, refusal", [("standalone_ops_rk3588_fp16", "ReduceMax", _CPU_ONLY),
                                               ("reducemax_one_channel_rk3576_i8_tk230", "ReduceMax", _NO_SCRATCH),
                                               # an fp16 Sqrt's tasks are fine
                                               ("standalone_sqrt_rk3588_i8", "Sqrt", _CPU_ONLY)])
def test_a_cpu_op_the_file_gives_an_npu_task_is_refused(tmp_path, stem, op, refusal):
    index = _node(stem, op)[1].index

    def patch(data: bytearray) -> None:  # the last task now claims to run the op
        tasks = tensor_bytes(data, "task")
        struct.pack_into("<I", tasks, len(tasks) - TASK_SIZE + 4, index)

    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)
    expected = rf"node {index} \({op} .*" + refusal.format(op=op)
    with pytest.raises(ModelInvalidError, match=expected):
        rknnlite.Context(path, backend="software")


def test_a_leaky_relu_whose_parameter_table_disagrees_with_its_bson_is_refused(tmp_path):
    def patch(data: bytearray) -> None:  # the parameter table's float32 0.1 -> 0.2 (the BSON keeps 0.1)
        at = bytes(data).find(struct.pack("<f", 0.1))
        assert at >= 0 and bytes(data).count(struct.pack("<f", 0.1)) == 1
        data[at:at + 4] = struct.pack("<f", 0.2)

    path = doctored_copy(CORPUS / "standalone_ops_rk3588_fp16.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match="parameter-table alpha 0.2.* is not the BSON's 0.1"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("exponent", [3.0, 0.5])
def test_a_pow_other_than_the_square_is_refused(tmp_path, exponent):
    stem = "standalone_ops_rk3588_i8"
    subgraph, node = _node(stem, "Pow")
    name = subgraph.tensor(node.inputs[1], "test").name

    def patch(data: bytearray) -> None:
        view = tensor_bytes(data, name)
        assert struct.unpack_from("<f", view)[0] == 2.0
        struct.pack_into("<f", view, 0, exponent)

    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=rf"a Pow with exponent {exponent}; only the square"):
        rknnlite.Context(path, backend="software")


def test_a_clip_whose_bounds_cross_is_refused(tmp_path):
    stem = "standalone_ops_rk3588_fp16"
    subgraph, node = _node(stem, "Clip")
    name = subgraph.tensor(node.inputs[2], "test").name

    def patch(data: bytearray) -> None:  # max 1.5 -> -1.0, below min -0.5
        view = tensor_bytes(data, name)
        assert struct.unpack_from("<f", view)[0] == 1.5
        struct.pack_into("<f", view, 0, -1.0)

    path = doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"bounds \[-0.5, -1.0\]; a min and a max, min <= max"):
        rknnlite.Context(path, backend="software")


def test_a_reduce_whose_table_and_bson_keepdims_differ_is_refused(tmp_path):
    def drop_keepdims(data: bytearray) -> None:  # ReduceMax's parameter table: keepdims [1] -> [0]
        keepdims = node_tables(data, "ReduceMax")[0].table(V6.n_param, "Param").vector(0, 1)
        assert bytes(keepdims.raw()) == b"\x01"
        data[keepdims.pos] = 0

    path = doctored_copy(CORPUS / "standalone_ops_rk3588_fp16.rknn", tmp_path, drop_keepdims)
    with pytest.raises(ModelInvalidError, match=r"its parameter table's keepdims \[0\] is not the BSON's 1"):
        rknnlite.Context(path, backend="software")


def _task_ops(stem: str) -> list:
    """The node index each task of corpus file ``stem`` runs."""
    tasks = bytes(tensor_bytes(bytearray((CORPUS / f"{stem}.rknn").read_bytes()), "task"))
    return [struct.unpack_from("<I", tasks, at + 4)[0] for at in range(0, len(tasks) - TASK_SIZE + 1, TASK_SIZE)]


@pytest.mark.parametrize("platform", ["rk3588", "rk3566", "rk3576", "rk3562", "rv1126b"])
@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_sqrt_is_the_float_function(platform, variant):
    """Sqrt: an int8 file runs it as a CPU op (no task); an fp16 file as dozens of DPU tasks, which the
    simulator computes as the square root rounded to float16 (bit-exact off-board on five platforms)."""
    stem = f"standalone_sqrt_{platform}_{variant}"
    index = _node(stem, "Sqrt")[1].index
    assert (index in _task_ops(stem)) == (variant == "fp16")
    assert _producer(lowered(stem).graph, "sqrt").op == "Sqrt"
    arrays = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        (y,) = ctx.run(inputs_of(arrays), data_format="nchw")
    sim = arrays["out0"].reshape(y.shape)
    if variant == "fp16":
        assert np.array_equal(y, sim)
    else:  # the CPU's float32 square root on the dequantized input, put on the output's grid
        assert float(np.dot(y.ravel(), sim.ravel()) / (np.linalg.norm(y) * np.linalg.norm(sim))) >= 0.9999


@pytest.mark.parametrize("stem", ["standalone_hardsigmoid_i8", "standalone_hardsigmoid_rk3576_i8",
                                  "standalone_hardsigmoid_rk3562_i8", "standalone_hardsigmoid_rv1126b_i8"])
def test_an_int8_standalone_hardsigmoid_is_the_simulators_float_function(stem):
    # the simulator computes clip(alpha * x + beta, 0, 1) on the dequantized input, the output on its grid:
    # bit for bit, where the table task the file loads gave 60-88 % of the codes (the rest one step away)
    data = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outs = ctx.run(inputs_of(data), data_format="nchw")
    for k, y in enumerate(outs):
        np.testing.assert_array_equal(y, data[f"out{k}"].reshape(y.shape))
    hard = [n for n in lowered(stem).graph.nodes if n.op == "HardSigmoid"]
    assert [n.attrs for n in hard] == [pytest.approx({"alpha": 0.2, "beta": 0.5}),
                                       pytest.approx({"alpha": 0.3, "beta": 0.4})]
