"""``RKNN(verbose=True)`` writes the optimiser's stages as ``check*.onnx`` files, as RKNN-Toolkit2
2.5.0 does (issue 21).  The files and names are the vendor's, observed on the same models
(``docs/vendor-examples.md``); the files are valid ONNX that onnxruntime runs."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.model.graph import Graph, Node  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.check_models import CUSTOM_DOMAIN, STAGE_FILES, graph_to_onnx  # noqa: E402
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402
from rknnlite.toolkit.optimize import STAGES, correct_ops, optimize  # noqa: E402

F = TensorProto.FLOAT
CHECK0, CHECK1, CHECK2, CHECK3 = (STAGE_FILES[s] for s in STAGES)
ALL = [CHECK0, CHECK1, CHECK2, CHECK3]


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes, inits, out_shape, opset=13, in_shape=(1, 3, 8, 8)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, list(in_shape))],
                              [helper.make_tensor_value_info("y", F, list(out_shape))], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _conv_inits(rng, name="w", out=4):
    return [_init(name, (rng.standard_normal((out, 3, 3, 3)) * 0.3).astype(np.float32)),
            _init(f"{name}_b", rng.standard_normal(out).astype(np.float32) * 0.1)]


def _bn_inits(rng, channels):
    """BatchNormalization's scale, bias, mean and var, as ``sc``, ``sh``, ``mu``, ``va``."""
    return [_init("sc", rng.uniform(0.5, 2, channels).astype(np.float32)),
            _init("sh", rng.standard_normal(channels).astype(np.float32)),
            _init("mu", rng.standard_normal(channels).astype(np.float32) * 0.1),
            _init("va", rng.uniform(0.5, 2, channels).astype(np.float32))]


def conv_relu_reshape():
    """The vendor writes check0 and check2 (its Conv gets its implicit attributes)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "w_b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Reshape", ["r", "s"], ["y"])]
    return _model(nodes, _conv_inits(rng) + [_init("s", np.array([1, 256], np.int64))], [1, 256])


def fold_and_fuse():
    """Conv -> BN -> Mul(Add(k1, k2)) -> Relu -> Shape (dead) -> Flatten: the vendor writes all four."""
    rng = np.random.default_rng(1)
    inits = _conv_inits(rng) + [
        *_bn_inits(rng, 4), _init("k1", np.float32(2)), _init("k2", np.float32(3))]
    nodes = [helper.make_node("Conv", ["x", "w", "w_b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "sc", "sh", "mu", "va"], ["bn"]),
             helper.make_node("Add", ["k1", "k2"], ["k"]), helper.make_node("Mul", ["bn", "k"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]), helper.make_node("Shape", ["r"], ["shape_unused"]),
             helper.make_node("Flatten", ["r"], ["y"])]
    return _model(nodes, inits, [1, 256])


def fused_forms():
    """Every internal fused form of the optimiser: a Conv with a residual input and a Relu,
    Conv + Clip, Conv + LeakyRelu, a ChannelAffine with a Relu (BN after a Concat)."""
    rng = np.random.default_rng(2)
    inits = _conv_inits(rng, "w1") + _conv_inits(rng, "w2") + _conv_inits(rng, "w3") + [
        _init("lo", np.float32(0)), _init("hi", np.float32(0.5)), *_bn_inits(rng, 8)]
    nodes = [helper.make_node("Conv", ["x", "w1", "w1_b"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"]),
             helper.make_node("Conv", ["x", "w2", "w2_b"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c2"], ["a2"], alpha=0.2),
             helper.make_node("Conv", ["x", "w3", "w3_b"], ["c3"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c3", "a2"], ["s3"]), helper.make_node("Relu", ["s3"], ["a3"]),
             helper.make_node("Concat", ["a1", "a3"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "sc", "sh", "mu", "va"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["y"])]
    return _model(nodes, inits, [1, 8, 8, 8])


def hard_swish(opset):
    """``x * clip(x + 3, 0, 6) / 6``, which the optimiser makes one HardSwish node."""
    nodes = [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", ["a", "lo", "hi"], ["cl"]),
             helper.make_node("Mul", ["x", "cl"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])]
    inits = [_init("three", np.float32(3)), _init("lo", np.float32(0)), _init("hi", np.float32(6)),
             _init("six", np.float32(6))]
    return _model(nodes, inits, [1, 3, 8, 8], opset=opset)


def _ort(model, x):
    options = ort.SessionOptions()
    options.log_severity_level = 3  # initializers listed as inputs (as the vendor writes them) are not news
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _x(seed=5):
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _build(path, verbose=True, quantize=False):
    rknn = RKNN(verbose=verbose)
    assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.load_onnx(str(path)) == 0
    dataset = None
    if quantize:
        np.save(path.parent / "x.npy", _x())
        (path.parent / "dataset.txt").write_text("x.npy\n")
        dataset = str(path.parent / "dataset.txt")
    ret = rknn.build(do_quantization=quantize, dataset=dataset)
    return rknn, ret


def _checks(folder):
    return sorted(f for f in os.listdir(folder) if f.startswith("check") and f.endswith(".onnx"))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return models, cwd


@pytest.mark.parametrize("quantize", [False, True])
@pytest.mark.parametrize("make, expected", [(conv_relu_reshape, [CHECK0, CHECK2]), (fold_and_fuse, ALL)])
def test_build_writes_the_files_the_vendor_writes(workdir, make, expected, quantize):
    models, cwd = workdir
    path = models / "m.onnx"
    onnx.save(make(), path)
    rknn = RKNN(verbose=True)
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx(str(path)) == 0
    assert _checks(cwd) == []  # load_onnx writes none
    _, ret = _build(path, quantize=quantize)
    assert ret == 0
    assert _checks(cwd) == expected
    assert _checks(models) == []


@pytest.mark.parametrize("make", [conv_relu_reshape, fold_and_fuse])
def test_only_a_verbose_object_writes_them(workdir, make):
    models, cwd = workdir
    onnx.save(make(), models / "m.onnx")
    rknn, ret = _build(models / "m.onnx", verbose=False)
    assert ret == 0 and rknn.export_rknn(str(models / "m.rknn")) == 0
    assert _checks(cwd) == [] and _checks(models) == []
    assert _build(models / "m.onnx", verbose=True)[1] == 0
    assert CHECK0 in _checks(cwd) and _checks(models) == []


def test_the_stages_hold_what_each_one_did(workdir):
    models, cwd = workdir
    onnx.save(fold_and_fuse(), models / "m.onnx")
    assert _build(models / "m.onnx")[1] == 0
    files = {f: onnx.load(str(cwd / f)) for f in ALL}
    ops = {f: [n.op_type for n in m.graph.node] for f, m in files.items()}
    # (load_onnx drops the dead Shape already, where the vendor's check0 keeps it)
    assert ops[CHECK0] == ["Conv", "BatchNormalization", "Add", "Mul", "Relu", "Flatten"]
    assert ops[CHECK1] == ops[CHECK2] == ["Conv", "BatchNormalization", "Mul", "Relu", "Flatten"]
    assert "k" in {t.name for t in files[CHECK1].graph.initializer}  # Add(k1, k2) folded
    conv_attrs = {f: {a.name for a in m.graph.node[0].attribute} for f, m in files.items()}
    assert conv_attrs[CHECK1] == {"pads"}
    assert conv_attrs[CHECK2] == {"pads", "kernel_shape", "strides", "dilations"}
    assert ops[CHECK3] == ["Conv", "Relu", "Flatten"]  # BN and Mul in the weights, the Relu written out
    for m in files.values():
        assert m.opset_import[0].version == 13
        inputs = {i.name for i in m.graph.input}
        assert {t.name for t in m.graph.initializer} | {"x"} == inputs  # initializers listed as inputs
        assert {v.name for v in m.graph.value_info} == {o for n in m.graph.node for o in n.output} - {"y"}
        assert all(v.type.tensor_type.elem_type == F for v in m.graph.value_info)


@pytest.mark.parametrize("make", [fold_and_fuse, conv_relu_reshape, fused_forms])
def test_files_are_valid_and_compute_the_model(workdir, make):
    models, cwd = workdir
    source = make()
    onnx.save(source, models / "m.onnx")
    assert _build(models / "m.onnx")[1] == 0
    x = _x()
    want = _ort(source, x)
    names = _checks(cwd)
    assert CHECK0 in names
    for name in names:
        m = onnx.load(str(cwd / name))
        onnx.checker.check_model(m, full_check=True)
        assert not [a.name for n in m.graph.node for a in n.attribute if a.name.startswith("_")]
        if name in (CHECK0, CHECK3):
            np.testing.assert_allclose(_ort(m, x), want, rtol=1e-5, atol=1e-5)


def test_internal_fused_forms_are_written_as_standard_nodes(workdir):
    models, cwd = workdir
    onnx.save(fused_forms(), models / "m.onnx")
    rknn, ret = _build(models / "m.onnx")
    assert ret == 0
    fused = optimize(rknn._imported.graph, rknn._imported.shapes)
    assert "ChannelAffine" in [n.op for n in fused.nodes]
    assert {n.attrs.get("_activation") for n in fused.nodes if n.op == "Conv"} == {"Clip", "LeakyRelu", "Relu"}
    assert any(n.attrs.get("_residual") for n in fused.nodes)
    m = onnx.load(str(cwd / CHECK3))
    ops = [n.op_type for n in m.graph.node]
    assert "ChannelAffine" not in ops and all(n.domain == "" for n in m.graph.node)
    assert sorted(ops) == sorted(["Conv", "Clip", "Conv", "LeakyRelu", "Conv", "Add", "Relu", "Concat",
                                  "Mul", "Add", "Relu"])


@pytest.mark.parametrize("opset, ops", [(13, ["HardSigmoid", "Mul"]), (14, ["HardSwish"])])
def test_hard_swish_is_written_in_the_models_opset(workdir, opset, ops):
    models, cwd = workdir
    source = hard_swish(opset)
    onnx.save(source, models / "m.onnx")
    assert _build(models / "m.onnx")[1] == 0
    assert _checks(cwd) == [CHECK0, CHECK3]  # as the vendor's (nothing to fold or correct)
    m = onnx.load(str(cwd / CHECK3))
    onnx.checker.check_model(m, full_check=True)
    assert [n.op_type for n in m.graph.node] == ops
    x = _x() * 4
    np.testing.assert_allclose(_ort(m, x), _ort(source, x), rtol=1e-5, atol=1e-5)


def test_an_op_onnx_lacks_goes_in_a_custom_domain():
    graph = Graph([Node("Relu", "relu", ["x"], ["r"], {"_opset": 13}),
                   Node("MyCustomOp", "custom", ["r", "k"], ["y"], {"gain": 2.0, "_opset": 13, "_num_outputs": 1})],
                  ["x"], ["y"], {"k": np.ones(3, np.float32)})
    m = graph_to_onnx(graph, 13, shapes={"x": (1, 3), "y": (1, 3)})
    onnx.checker.check_model(m)
    assert [(n.op_type, n.domain) for n in m.graph.node] == [("Relu", ""), ("MyCustomOp", CUSTOM_DOMAIN)]
    assert [a.name for a in m.graph.node[1].attribute] == ["gain"]
    assert {(o.domain, o.version) for o in m.opset_import} == {("", 13), (CUSTOM_DOMAIN, 1)}


def test_an_unwritable_directory_is_a_warning_and_the_build_goes_on(workdir, caplog):
    models, cwd = workdir
    onnx.save(fold_and_fuse(), models / "m.onnx")
    for name in ALL:  # (a read-only directory alone does not stop root)
        (cwd / name).mkdir()
    os.chmod(cwd, 0o555)
    caplog.set_level(logging.DEBUG, logger="rknnlite.toolkit")
    try:
        rknn, ret = _build(models / "m.onnx")
    finally:
        os.chmod(cwd, 0o755)
    assert ret == 0 and rknn.export_rknn(str(models / "m.rknn")) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "check" in r.getMessage()]
    assert len(warnings) == 1 and CHECK0 in warnings[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_hybrid_step1_writes_them_and_step2_does_not(workdir):
    models, cwd = workdir
    onnx.save(fold_and_fuse(), cwd / "m.onnx")
    np.save(cwd / "x.npy", _x())
    (cwd / "dataset.txt").write_text("x.npy\n")
    rknn = RKNN(verbose=True)
    rknn.config(target_platform="rk3588")
    assert rknn.load_onnx("m.onnx") == 0
    assert rknn.hybrid_quantization_step1(dataset="dataset.txt") == 0
    assert _checks(cwd) == ALL
    for name in ALL:
        os.remove(name)
    step2 = RKNN(verbose=True)
    assert step2.hybrid_quantization_step2("m.model", "m.data", "m.quantization.cfg") == 0
    assert _checks(cwd) == []


def test_optimize_reports_the_stages_that_changed_the_graph():
    seen = []
    imported = import_onnx(conv_relu_reshape())
    optimize(imported.graph, imported.shapes, stages=lambda stage, g: seen.append((stage, [n.op for n in g.nodes])))
    # the Relu the Conv takes over is the kernel's business, not a fuse_ops change
    assert seen == [("base_optimize", ["Conv", "Relu", "Reshape"]), ("correct_ops", ["Conv", "Relu", "Reshape"])]


def test_correct_ops_states_conv_attributes_and_resolves_reshapes():
    w = np.zeros((4, 3, 3, 3), np.float32)
    graph = Graph([Node("Conv", "conv", ["x", "w"], ["c"], {"group": 1}),
                   Node("Conv", "same", ["c2", "w"], ["d"], {"auto_pad": "SAME_UPPER"}),
                   Node("Reshape", "flat", ["c", "s"], ["y"], {}),
                   Node("Reshape", "keep", ["c", "s2"], ["z"], {})],
                  ["x", "c2"], ["y", "z", "d"],
                  {"w": w, "s": np.array([0, -1], np.int64), "s2": np.array([1, 64], np.int64)})
    shapes = {"x": (1, 3, 6, 6), "c": (1, 4, 4, 4), "y": (1, 64), "z": (1, 64)}
    assert correct_ops(graph, shapes) == 3
    assert graph.nodes[0].attrs == {"group": 1, "kernel_shape": [3, 3], "strides": [1, 1], "dilations": [1, 1],
                                    "pads": [0, 0, 0, 0]}
    assert "pads" not in graph.nodes[1].attrs
    assert graph.constants["s"].tolist() == [1, 64]
    assert correct_ops(graph, shapes) == 0
