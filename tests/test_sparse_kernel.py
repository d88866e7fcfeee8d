"""The software backend's sparse Conv kernel (ops/sparse.py, _native.sparse_kernels):
compressed weights, identical results to the dense kernels, the when-to-use rule."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite._native import sparse_kernels as sk
from rknnlite.backends.software.ops import sparse
from rknnlite.backends.software.ops.conv import _conv_prepare, conv
from rknnlite.toolkit.sparsity import sparsify_weight, weight_view


def _sparse_weight(shape, mode="4:2_ic", seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    return sparsify_weight(weight_view(w, "Conv"), mode).reshape(shape)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 200])
def test_csr_gemm_matches_reference_on_every_tail(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((9, 24)).astype(np.float32)
    a[rng.random(a.shape) < 0.6] = 0
    a[3] = 0  # an empty row
    x = rng.standard_normal((24, n)).astype(np.float32)
    m = sparse.SparseMatrix(a)
    assert m.nnz == np.count_nonzero(a) and m.blk[-1, -1] == m.nnz
    y = np.full((9, n), np.nan, np.float32)
    m.matmul_into(x, y)
    np.testing.assert_allclose(y, a.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    assert (y[3] == 0).all()
    # a column range computes exactly those columns, with the same values
    z = np.full((9, n), 7.0, np.float32)
    c0, c1 = n // 3, n - n // 4
    m.matmul_into(x, z, c0, c1)
    np.testing.assert_array_equal(z[:, c0:c1], y[:, c0:c1])
    assert (z[:, :c0] == 7).all() and (z[:, c1:] == 7).all()


def test_csr_gemm_summation_order_is_fixed():
    """Each output is one FMA chain in index order: equal to a float32 fma loop."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 40)).astype(np.float32)
    a[:, ::2] = 0
    x = rng.standard_normal((40, 70)).astype(np.float32)
    m = sparse.SparseMatrix(a)
    y = np.empty((3, 70), np.float32)
    m.matmul_into(x, y)
    # reproducible, and independent of how the columns are split into calls (threads)
    y2 = np.empty_like(y)
    m.matmul_into(x, y2)
    np.testing.assert_array_equal(y, y2)
    for c0 in (0, 5, 33):
        y3 = np.empty_like(y)
        m.matmul_into(x, y3, c0, 70)
        m.matmul_into(x, y3, 0, c0)
        np.testing.assert_array_equal(y3, y)


def test_csr_gemm_rejects_bad_arguments():
    m = sparse.SparseMatrix(np.eye(4, dtype=np.float32))
    x = np.ones((4, 8), np.float32)
    with pytest.raises(ValueError, match="column range"):
        m.matmul_into(x, np.empty((4, 8), np.float32), 3, 9)
    with pytest.raises(ValueError, match="rows"):
        m.matmul_into(x, np.empty((5, 8), np.float32))
    with pytest.raises(ValueError, match="column index"):
        sk.csr_gemm(m.vals, np.array([0, 1, 2, 9], np.int32), m.blk, x, np.empty((4, 8), np.float32))
    with pytest.raises(ValueError, match="cover"):
        sk.csr_gemm(m.vals[:3], m.cols[:3], m.blk, x, np.empty((4, 8), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        sparse.SparseMatrix(np.ones((2, 2, 2), np.float32))
    y = np.empty((4, 8), np.float32)
    m.matmul_into(x, y)  # still usable
    np.testing.assert_array_equal(y, x)


def _run_conv(w, x, attrs, force, bias=None, res=None):
    a = dict(attrs, _winograd=False)
    if force is not None:
        a["_sparsity"] = "4:2_ic"
    consts = [None, w, bias] + ([None] if res is not None else [])
    p = _conv_prepare(a, consts)
    if force is not None:
        assert p["_sparse"] is not None
        p["_sparse"].use = lambda *args: force
    inputs = [x, w] + ([bias] if bias is not None or res is not None else [])
    if res is not None:
        inputs.append(res)
    return conv(inputs, p)[0]


@pytest.mark.parametrize("case", [
    dict(shape=(16, 12, 1, 1), x=(2, 12, 9, 11), attrs={}),
    dict(shape=(16, 12, 3, 3), x=(1, 12, 10, 7), attrs={"pads": [1, 1, 1, 1]}),
    dict(shape=(8, 6, 3, 3), x=(1, 6, 13, 13), attrs={"pads": [0, 1, 2, 1], "strides": [2, 2]}),
    dict(shape=(8, 5, 3, 2), x=(1, 5, 12, 12), attrs={"dilations": [2, 1]}),
    dict(shape=(24, 16, 1, 1), x=(1, 16, 20, 20), attrs={"strides": [2, 2]}),
])
@pytest.mark.parametrize("fused", [None, "Relu", "residual"])
def test_sparse_conv_equals_dense(case, fused):
    rng = np.random.default_rng(0)
    w = _sparse_weight(case["shape"])
    x = rng.standard_normal(case["x"]).astype(np.float32)
    bias = rng.standard_normal(case["shape"][0]).astype(np.float32)
    attrs = dict(case["attrs"])
    res = None
    if fused == "Relu":
        attrs["_activation"] = "Relu"
    elif fused == "residual":
        attrs["_residual"] = True
        dense_shape = _run_conv(w, x, case["attrs"], None, bias).shape
        res = rng.standard_normal(dense_shape).astype(np.float32)
    dense = _run_conv(w, x, attrs, None, bias, res)
    sp = _run_conv(w, x, attrs, True, bias, res)
    assert sp.shape == dense.shape and sp.dtype == np.float32
    # same products, possibly another summation order: float32 rounding of the sum only
    scale = np.abs(dense).max()
    np.testing.assert_allclose(sp, dense, rtol=0, atol=2e-6 * scale)
    # against float64 (independent of both kernels)
    not_sparse = _run_conv(w, x, attrs, False, bias, res)
    np.testing.assert_array_equal(not_sparse, dense)  # the hook off: the dense path itself


def test_sparse_marked_grouped_or_3d_conv_never_sparse():
    w = _sparse_weight((8, 4, 3, 3))
    assert _conv_prepare({"group": 2, "_sparsity": "4:2_ic"}, [None, w, None])["_sparse"] is None
    w3 = np.zeros((4, 4, 1, 1, 1), np.float32)
    assert _conv_prepare({"_sparsity": "4:2_ic"}, [None, w3, None])["_sparse"] is None
    assert _conv_prepare({"_sparsity": "none"}, [None, _sparse_weight((8, 8, 1, 1)), None])["_sparse"] is None
    assert _conv_prepare({}, [None, _sparse_weight((8, 8, 1, 1)), None])["_sparse"] is None


def test_use_rule(monkeypatch):
    sc = sparse.SparseConv(_sparse_weight((64, 64, 1, 1)), "4:2_ic")
    assert sc.matrix.density == pytest.approx(0.5)
    for path in ("winograd", "depthwise", "empty"):
        assert not sc.use(path, 1000, True)
    monkeypatch.setattr(sparse, "SPARSE_RATE", 1.0)
    assert sc.use("gather", 1000, True)  # half the multiply-adds at the dense rate
    assert not sc.use("gather", sparse.MAX_COLS_FLOATS, False)  # im2col too large
    monkeypatch.setattr(sparse, "SPARSE_RATE", 0.4)
    assert not sc.use("gather", 1000, True)  # 0.5 / 0.4 > 1: dense is faster
    dense = sparse.SparseConv(np.ones((64, 64, 1, 1), np.float32), "4:2_ic")
    monkeypatch.setattr(sparse, "SPARSE_RATE", 1.0)
    assert not dense.use("gather", 1000, True)


def test_model_runs_sparse_kernel_with_dense_results(monkeypatch):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import rknnlite
    from rknnlite.toolkit import RKNN

    w1 = _sparse_weight((32, 16, 1, 1), "4:2_oc")
    w2 = _sparse_weight((32, 32, 3, 3), "16:4_io", 1)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["a"], name="pw"), helper.make_node("Relu", ["a"], ["r"], name="relu"),
         helper.make_node("Conv", ["r", "w2"], ["y"], name="c3", pads=[1, 1, 1, 1], strides=[2, 2])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 10])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    blobs = {}
    for sparse_infer in (False, True):
        rk = RKNN()
        assert rk.config(target_platform="rk3576", float_dtype="float32", sparse_infer=sparse_infer) == 0
        assert rk.load_onnx(model) == 0 and rk.build() == 0
        blobs[sparse_infer] = rk._model_bytes
        rk.release()
    x = np.random.default_rng(2).standard_normal((1, 16, 20, 20)).astype(np.float32)
    with rknnlite.Context(blobs[False]) as ctx:
        dense = ctx.run([x], data_format=["nchw"])[0]
    calls = []
    real = sparse.SparseConv.run

    def counting(self, *args):
        calls.append(self.mode)
        return real(self, *args)

    monkeypatch.setattr(sparse, "SPARSE_RATE", 10.0)  # model the sparse kernel as faster
    monkeypatch.setattr(sparse, "IM2COL_COST", 0.0)
    monkeypatch.setattr(sparse.SparseConv, "run", counting)
    with rknnlite.Context(blobs[True]) as ctx:
        sp = ctx.run([x], data_format=["nchw"])[0]
    assert sorted(calls) == ["16:4_io", "4:2_oc"]
    np.testing.assert_allclose(sp, dense, rtol=0, atol=2e-6 * np.abs(dense).max())


def test_perf_detail_marks_sparse_layers():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import rknnlite
    from rknnlite.model.loader import load_model
    from rknnlite.toolkit import RKNN

    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["a"], name="pw"),
         helper.make_node("Conv", ["a", "w2"], ["y"], name="dw", group=8)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        [numpy_helper.from_array(_sparse_weight((8, 8, 1, 1)), "w1"),
         numpy_helper.from_array(np.ones((8, 1, 1, 1), np.float32), "w2")])
    rk = RKNN()
    assert rk.config(target_platform="rk3576", sparse_infer=True) == 0
    assert rk.load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])) == 0
    assert rk.build() == 0
    blob = rk._model_bytes
    rk.release()
    ratios = sparse.layer_ratios(load_model(blob).model.graph)
    assert ratios == {"Conv:pw": "50% (IC)", "Conv:dw": "0%"}
    with rknnlite.Context(blob, flags=rknnlite.InitFlag.COLLECT_PERF_MASK) as ctx:
        ctx.run([np.ones((1, 8, 4, 4), np.float32)], data_format=["nchw"])
        detail = ctx.perf_detail(as_text=False)  # the context marks the layers itself
        text = ctx.perf_detail()
    rows = {r.full_name: r for r in detail.records}
    assert rows["Conv:pw"].sparsity == "50% (IC)" and rows["Conv:dw"].sparsity == "0%"
    assert rows["Conv:pw"].to_dict()["sparsity"] == "50% (IC)"
    assert "Conv:pw [sparse 50% (IC)]" in detail.text() and "Conv:pw [sparse 50% (IC)]" in text
    assert all(r.sparsity is None for r in detail.records if not r.full_name.startswith("Conv:"))
