"""Sparse inference (seed 004 §4.1.7): pattern detection, config(sparse_infer), the build's
and the runtime's per-layer SparseRation lines, and the ONNX sparsifier."""

from __future__ import annotations

import logging

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.model.loader import load_model  # noqa: E402
from rknnlite.toolkit import RKNN, sparsify  # noqa: E402
from rknnlite.toolkit.sparsity import (MODES, detect, mark_graph, ratio_text, satisfies,  # noqa: E402
                                       sparsify_model, sparsify_weight, weight_view)


def _dense(shape, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    w[w == 0] = 1.0
    return w


def _conv_weight(mode, shape=(8, 8, 3, 3), seed=0):
    w = _dense(shape, seed)
    return sparsify_weight(weight_view(w, "Conv"), mode).reshape(shape)


# ---------------------------------------------------------------------------- detection


def test_4_2_ic_exact_and_broken_by_one_value():
    w = np.ones((4, 8, 1), np.float32)
    w[:, [1, 2, 4, 7]] = 0  # 2 of each 4 consecutive input channels, every output row
    assert detect(w) == "4:2_ic"
    assert not satisfies(w, "4:2_oc") and not satisfies(w, "16:4_io")
    w[2, 1, 0] = 0.5  # one value breaks it: 3 non-zeros in one block
    assert detect(w) == "none"
    # a single output row pads to 4 rows with 3 zero rows: its 4 non-zeros per block are also 16:4
    one = np.zeros((1, 8, 1), np.float32)
    one[0, [0, 3, 5, 6], 0] = 1.0
    assert detect(one) == "16:4_io"


def test_4_2_oc_exact_and_broken():
    w = np.ones((8, 4, 2), np.float32)
    w[[0, 2, 5, 7]] = 0  # 2 zeros in each block of 4 output channels
    assert detect(w) == "4:2_oc"
    assert not satisfies(w, "4:2_ic")
    w[0, 3, 1] = -1.0
    assert detect(w) == "none"


def test_16_4_both_orders_exact_and_broken():
    io = np.zeros((4, 4, 1), np.float32)
    io[0, [0, 1], 0] = 1
    io[1, [2, 3], 0] = 1  # rows <= 2 non-zeros, block 4; column 2 and 3 fine, but row 0 has 2
    assert detect(io) == "16:4_io"
    io[2, 0, 0] = 1  # 5 non-zeros in the block
    assert detect(io) == "4:2_ic"
    oi = np.zeros((4, 4, 1), np.float32)
    oi[0, [0, 1, 2], 0] = 1  # a row with 3 (not io), every column <= 2, block 3 + 1
    oi[3, 3, 0] = 1
    assert detect(oi) == "16:4_oi"
    oi[1, 0, 0] = 1  # 5 in the block
    assert detect(oi) == "4:2_oc"


def test_padding_when_not_4_aligned():
    w = np.ones((4, 6, 1), np.float32)
    w[:, [1, 2]] = 0  # block 2 is (4, 5, pad, pad)
    assert detect(w) == "4:2_ic"
    w = np.ones((4, 7, 1), np.float32)
    w[:, [1, 2]] = 0  # block 2 is (4, 5, 6, pad): 3 non-zeros
    assert detect(w) == "none"
    w = np.ones((6, 4, 1), np.float32)
    w[[1, 2]] = 0  # output blocks (0..3) and (4, 5, pad, pad)
    assert detect(w) == "4:2_oc"


@pytest.mark.parametrize("mode", MODES)
def test_sparsifier_produces_each_pattern(mode):
    w = _dense((12, 20, 3, 3))
    s3 = sparsify_weight(weight_view(w, "Conv"), mode)
    assert satisfies(s3, mode)
    kept = s3 != 0
    np.testing.assert_array_equal(s3[kept], weight_view(w, "Conv")[kept])  # kept values unchanged
    density = kept.mean()
    assert density == pytest.approx(0.25 if mode.startswith("16:4") else 0.5, abs=0.02)
    assert detect(s3) == mode or (mode == "16:4_oi" and detect(s3) == "16:4_io")
    # magnitude: the kept values of each input-direction block are at least the dropped ones
    if mode == "4:2_ic":
        a = np.abs(weight_view(w, "Conv")).reshape(12, 5, 4, 9)
        k = kept.reshape(12, 5, 4, 9)
        assert (np.where(k, a, np.inf).min(axis=2) >= np.where(k, -np.inf, a).max(axis=2)).all()


def test_sparsify_weight_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        sparsify_weight(np.ones((4, 4, 1), np.float32), "2:1")
    with pytest.raises(ValueError, match="mode must be one of"):
        satisfies(np.ones((4, 4, 1), np.float32), "8:4")


def test_gemm_and_matmul_directions():
    wt = _dense((8, 12))  # Gemm transB=1: (N, K): output axis 0
    s = sparsify_weight(weight_view(wt, "Gemm", trans_b=True), "4:2_ic")[:, :, 0]
    assert (np.count_nonzero(s.reshape(8, 3, 4), axis=2) <= 2).all()  # along K per output row
    wm = _dense((12, 8))  # MatMul (K, N)
    v = weight_view(wm, "MatMul")
    assert v.shape == (8, 12, 1)
    s = sparsify_weight(v, "4:2_ic")[:, :, 0].T  # back to (K, N)
    assert (np.count_nonzero(s.reshape(3, 4, 8), axis=1) <= 2).all()  # along K per column


# ---------------------------------------------------------------------------- models


def _model(weights, group_w=None, gemm=None):
    """x(1,8,6,6) -> Conv c1 (weights) [-> grouped Conv c2] [-> GAP, Flatten, Gemm fc]."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y1"], name="c1", pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(weights, "w1")]
    last, ch = "y1", weights.shape[0]
    if group_w is not None:
        nodes.append(helper.make_node("Conv", [last, "w2"], ["y2"], name="c2", pads=[1, 1, 1, 1], group=2))
        inits.append(numpy_helper.from_array(group_w, "w2"))
        last, ch = "y2", group_w.shape[0]
    shape = [1, ch, 6, 6]
    if gemm is not None:
        nodes += [helper.make_node("GlobalAveragePool", [last], ["p"], name="gap"),
                  helper.make_node("Flatten", ["p"], ["f"], name="flat"),
                  helper.make_node("Gemm", ["f", "wf"], ["z"], name="fc", transB=1)]
        inits.append(numpy_helper.from_array(gemm, "wf"))
        last, shape = "z", [1, gemm.shape[0]]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append((record.levelno, record.getMessage()))


@pytest.fixture
def records():
    h = _Records()
    logger = logging.getLogger("rknnlite")
    level = logger.level
    logger.addHandler(h)
    try:
        yield h
    finally:
        logger.removeHandler(h)
        logger.setLevel(level)


def _build(model, platform="rk3576", sparse=True, verbose=False):
    rk = RKNN(verbose=verbose)
    assert rk.config(target_platform=platform, float_dtype="float32", sparse_infer=sparse) == 0
    assert rk.load_onnx(model) == 0
    assert rk.build() == 0
    return rk


@pytest.mark.parametrize("mode,text", [("4:2_ic", "50% (IC)"), ("4:2_oc", "50% (OC)"), ("16:4_io", "75%"),
                                       ("16:4_oi", "75%")])
def test_build_logs_sparse_ratio_per_layer(records, mode, text):
    logging.getLogger("rknnlite").setLevel(logging.DEBUG)
    rk = _build(_model(_conv_weight(mode), group_w=_dense((8, 4, 3, 3)),
                       gemm=sparsify_weight(weight_view(_dense((4, 8)), "Gemm", True), "4:2_ic")[:, :, 0]))
    try:
        lines = [m for lv, m in records.lines if lv == logging.INFO]
        assert f"Conv:c1 SparseRation: {text}" in lines
        assert "Conv:c2 SparseRation: 0%" in lines  # grouped conv: not eligible
        assert "Gemm:fc SparseRation: 50% (IC)" in lines
        nodes = {n.name: n for n in load_model(rk._model_bytes).model.graph.nodes}
        assert nodes["c2"].attrs["_sparsity"] == "ineligible"
        assert ratio_text(nodes["c1"].attrs["_sparsity"]) == text
    finally:
        rk.release()


def test_verbose_build_prints_the_lines(capfd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a verbose build writes its check*.onnx files there
    rk = _build(_model(_conv_weight("4:2_ic")), verbose=True)
    rk.release()
    assert "Conv:c1 SparseRation: 50% (IC)" in capfd.readouterr().err


def test_dense_layer_reported_0_percent(records):
    logging.getLogger("rknnlite").setLevel(logging.DEBUG)
    rk = _build(_model(_dense((8, 8, 3, 3))))
    rk.release()
    assert (logging.INFO, "Conv:c1 SparseRation: 0%") in records.lines


def test_marks_survive_export_and_runtime_logs_at_level_4(records, tmp_path, monkeypatch):
    fc = sparsify_weight(weight_view(_dense((4, 8)), "Gemm", True), "4:2_ic")[:, :, 0]
    rk = _build(_model(_conv_weight("4:2_oc"), group_w=_dense((8, 4, 3, 3)), gemm=fc))
    path = str(tmp_path / "m.rknn")
    assert rk.export_rknn(path) == 0
    rk.release()
    monkeypatch.setenv("RKNN_LOG_LEVEL", "4")
    rknnlite.runtime.log.apply_env_level()
    records.lines.clear()
    with rknnlite.Context(path, backend="software") as ctx:
        debug = [m for lv, m in records.lines if lv == logging.DEBUG]
        assert "Conv:c1 SparseRation: 50% (OC)" in debug
        assert "Conv:c2 SparseRation: 0%" in debug
        assert "Gemm:fc SparseRation: 50% (IC)" in debug
        assert debug.count("Conv:c1 SparseRation: 50% (OC)") == 1
        ctx.run([np.ones((1, 8, 6, 6), np.float32)], data_format=["nchw"])
    assert [m for _, m in records.lines].count("Conv:c1 SparseRation: 50% (OC)") == 1  # once, not per run
    monkeypatch.setenv("RKNN_LOG_LEVEL", "2")
    rknnlite.runtime.log.apply_env_level()
    records.lines.clear()
    with rknnlite.Context(path, backend="software"):
        pass
    assert not [m for lv, m in records.lines if "SparseRation" in m and lv >= logging.getLogger("rknnlite").level]


def test_config_sparse_infer_validation_and_other_platforms(records):
    logging.getLogger("rknnlite").setLevel(logging.DEBUG)
    rk = RKNN()
    assert rk.config(target_platform="rk3576", sparse_infer="yes") == -1
    assert any(lv == logging.ERROR and "sparse_infer must be True or False" in m for lv, m in records.lines)
    assert rk.config(target_platform="rv1126b", sparse_infer=True) == 0
    rk.release()
    records.lines.clear()
    rk = _build(_model(_conv_weight("4:2_ic")), platform="rk3588")
    try:
        warnings = [m for lv, m in records.lines if lv == logging.WARNING]
        assert any("sparse_infer=True has no effect on rk3588" in m for m in warnings)
        assert not any("SparseRation" in m for _, m in records.lines)
        node = load_model(rk._model_bytes).model.graph.nodes[0]
        assert "_sparsity" not in node.attrs
    finally:
        rk.release()


def test_sparse_infer_false_marks_nothing(records):
    logging.getLogger("rknnlite").setLevel(logging.DEBUG)
    rk = _build(_model(_conv_weight("4:2_ic")), sparse=False)
    try:
        assert "_sparsity" not in load_model(rk._model_bytes).model.graph.nodes[0].attrs
        assert not any("SparseRation" in m for _, m in records.lines)
    finally:
        rk.release()


def test_mark_graph_rows():
    from rknnlite.toolkit.onnx_import import import_onnx

    imported = import_onnx(_model(_conv_weight("16:4_io"), group_w=_dense((8, 4, 3, 3))))
    rows = mark_graph(imported.graph)
    assert rows == [("c1", "Conv", "16:4_io"), ("c2", "Conv", "ineligible")]


# ---------------------------------------------------------------------------- sparsify()


@pytest.mark.parametrize("mode", MODES)
def test_sparsify_onnx_each_pattern(tmp_path, mode):
    src = _model(_dense((8, 8, 3, 3)), group_w=_dense((8, 4, 3, 3), 1), gemm=_dense((4, 8), 2))
    out = str(tmp_path / "s.onnx")
    assert sparsify(src, out, mode=mode) == 0
    m = onnx.load(out)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    assert satisfies(weight_view(inits["w1"], "Conv"), mode)
    assert satisfies(weight_view(inits["wf"], "Gemm", True), mode)
    np.testing.assert_array_equal(inits["w2"], _dense((8, 4, 3, 3), 1))  # grouped: untouched
    # the toolkit detects the pattern it was given
    rk = _build(m)
    try:
        node = {n.name: n for n in load_model(rk._model_bytes).model.graph.nodes}["c1"]
        assert node.attrs["_sparsity"] == mode or (mode == "16:4_oi" and node.attrs["_sparsity"] == "16:4_io")
    finally:
        rk.release()


@pytest.mark.parametrize("engine", ["onnxruntime", "software"])
def test_sparsify_reports_accuracy_on_a_dataset(tmp_path, records, monkeypatch, engine):
    if engine == "software":
        monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)  # import fails: software backend
    else:
        pytest.importorskip("onnxruntime")
    logging.getLogger("rknnlite").setLevel(logging.DEBUG)
    src = _model(_dense((8, 8, 3, 3)), gemm=_dense((4, 8), 2))
    rng = np.random.default_rng(3)
    samples = [[rng.standard_normal((1, 8, 6, 6)).astype(np.float32)] for _ in range(2)]
    assert sparsify(src, str(tmp_path / "s.onnx"), mode="4:2_ic", dataset=samples) == 0
    lines = [m for _, m in records.lines]
    per_layer = [m for m in lines if m.startswith("sparsify: Conv:c1 cosine") or m.startswith("sparsify: Gemm:fc cosine")]
    assert len(per_layer) == 2
    cos = [float(m.split("cosine ")[1].split()[0]) for m in per_layer]
    assert all(0.0 < c < 1.0 for c in cos)  # pruning half the weights costs something
    assert any(m.startswith("sparsify: whole model: cosine") for m in lines)


def test_sparsify_errors(tmp_path, records):
    src = _model(_dense((8, 8, 3, 3)))
    assert sparsify(src, str(tmp_path / "s.onnx"), mode="2:1") == -1
    assert sparsify(str(tmp_path / "missing.onnx"), str(tmp_path / "s.onnx")) == -1
    assert sparsify(src, str(tmp_path / "no" / "dir.onnx")) == -1
    assert sparsify(src, str(tmp_path / "s.onnx"), dataset=[["not an array"]]) == -1
    errors = [m for lv, m in records.lines if lv == logging.ERROR]
    assert len(errors) == 4 and "mode must be one of" in errors[0]


def test_sparsify_model_is_pure():
    src = _model(_dense((8, 8, 3, 3)))
    before = src.SerializeToString()
    new, rows = sparsify_model(src, "4:2_oc")
    assert src.SerializeToString() == before
    assert rows == [("c1", "Conv", "w1")]


def test_sparsify_weights_made_by_constant_nodes(tmp_path):
    """The onnx package's light models make their weights with ConstantOfShape."""
    shape = numpy_helper.from_array(np.array([8, 8, 3, 3], np.int64), "wshape")
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["w"], name="fill",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Constant", [], ["b"], name="bias",
                              value=numpy_helper.from_array(np.arange(8, dtype=np.float32))),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c1", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], [shape])
    src = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    new, rows = sparsify_model(src, "4:2_ic")
    assert rows == [("c1", "Conv", "w_sparse")]
    w = numpy_helper.to_array({t.name: t for t in new.graph.initializer}["w_sparse"])
    assert detect(weight_view(w, "Conv")) == "4:2_ic" and (w[w != 0] == 0.5).all()
    rk = _build(new)
    try:
        node = {n.name: n for n in load_model(rk._model_bytes).model.graph.nodes}["c1"]
        assert node.attrs["_sparsity"] == "4:2_ic"
    finally:
        rk.release()


def test_runtime_logs_matmul_layers_at_level_4(records, monkeypatch):
    w = sparsify_weight(weight_view(_dense((8, 4)), "MatMul"), "4:2_ic")[:, :, 0].T.copy()  # back to (K, N)
    assert satisfies(weight_view(w, "MatMul"), "4:2_ic")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                          [numpy_helper.from_array(w, "w")])
    rk = _build(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    blob = rk._model_bytes
    rk.release()
    monkeypatch.setenv("RKNN_LOG_LEVEL", "4")
    rknnlite.runtime.log.apply_env_level()
    try:
        records.lines.clear()
        with rknnlite.Context(blob, backend="software") as ctx:
            x = np.arange(16, dtype=np.float32).reshape(2, 8)
            np.testing.assert_allclose(ctx.run([x])[0], x @ w, rtol=1e-6)
        assert "MatMul:mm SparseRation: 50% (IC)" in [m for lv, m in records.lines if lv == logging.DEBUG]
    finally:
        monkeypatch.setenv("RKNN_LOG_LEVEL", "2")
        rknnlite.runtime.log.apply_env_level()
