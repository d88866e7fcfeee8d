"""The compiled matrix-vector product (``conv_kernels.gemv``) a classifier's Gemm (a few rows
against ``transB`` weights) and a 1x1 conv on a 1x1 map run on: every ISA path against a
float64 reference, and bit for bit the same on any thread count, through the kernels too."""

import numpy as np
import pytest

from rknnlite._native import conv_kernels as ck
from rknnlite.backends.software.ops import KERNELS
from rknnlite.backends.software.ops import linear
from rknnlite.backends.software.parallel import WorkerPool, using


@pytest.fixture
def two_threads():
    pool = WorkerPool(2)
    yield pool
    pool.close()


# K: under one vector, a vector and a tail, many steps and a tail; N: under and over a group of 4 rows
@pytest.mark.parametrize("K, N", [(1, 1), (15, 3), (33, 5), (1000, 7), (1024, 1000), (2047, 129)])
def test_every_path_and_split_gives_the_same_sums(kernel_isa, two_threads, K, N):
    rng = np.random.default_rng(K * 7 + N)
    x = rng.standard_normal(K).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    ref = w.astype(np.float64) @ x.astype(np.float64)
    whole = np.full(N, np.nan, np.float32)
    ck.gemv(None, x, w, whole)
    np.testing.assert_allclose(whole, ref, rtol=1e-5, atol=1e-5 * np.sqrt(K))
    for min_rows in (1, 3, 64):  # ranges starting anywhere, inside or across groups of 4 rows
        split = np.full(N, np.nan, np.float32)
        ck.gemv(two_threads.handle, x, w, split, min_rows=min_rows)
        np.testing.assert_array_equal(split, whole)


def test_bad_shapes_are_refused_and_empty_products_are_zero():
    x, w = np.ones(4, np.float32), np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="w is 3 x 4, x has 5 values"):
        ck.gemv(None, np.ones(5, np.float32), w, np.empty(3, np.float32))
    with pytest.raises(ValueError, match="y 2"):
        ck.gemv(None, x, w, np.empty(2, np.float32))
    with pytest.raises(ValueError, match="min_rows"):
        ck.gemv(None, x, w, np.empty(3, np.float32), min_rows=0)
    y = np.full(3, np.nan, np.float32)
    ck.gemv(None, np.ones(0, np.float32), np.ones((3, 0), np.float32), y)
    np.testing.assert_array_equal(y, 0)


def _run(op, inputs, attrs, pool):
    spec = KERNELS[op]
    prepared = spec.prepare(dict(attrs), [None] + list(inputs[1:])) if spec.prepare else attrs
    with using(pool):
        return spec.fn(inputs, prepared or attrs)[0]


def test_a_classifier_gemm_runs_on_gemv_the_same_on_one_and_two_threads(monkeypatch, two_threads):
    if ck.gemm_isa() == 0:
        pytest.skip("no micro-kernel level: Gemm stays on BLAS")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1, 1024)).astype(np.float32)
    w = rng.standard_normal((1000, 1024)).astype(np.float32)
    c = rng.standard_normal(1000).astype(np.float32)
    assert linear.gemv_fits(1, w)
    calls = []
    real = linear.gemv
    monkeypatch.setattr(linear, "gemv", lambda *args: (calls.append(1), real(*args))[1])
    attrs = {"transB": 1}
    one = _run("Gemm", [a, w, c], attrs, WorkerPool(1))
    two = _run("Gemm", [a, w, c], attrs, two_threads)
    assert len(calls) == 2
    np.testing.assert_array_equal(two, one)
    np.testing.assert_allclose(one, a @ w.T + c, rtol=1e-4, atol=1e-4)
    # transB = 0 (column-major weights for this product) stays on numpy's matmul
    calls.clear()
    np.testing.assert_allclose(_run("Gemm", [a, np.ascontiguousarray(w.T), c], {}, WorkerPool(1)), one,
                               rtol=1e-4, atol=1e-4)
    assert not calls


def test_a_1x1_conv_on_a_1x1_map_runs_on_gemv_the_same_on_one_and_two_threads(two_threads):
    if ck.gemm_isa() == 0:
        pytest.skip("no micro-kernel level: the conv stays on its GEMM paths")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 1024, 1, 1)).astype(np.float32)
    w = rng.standard_normal((1000, 1024, 1, 1)).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    attrs = {"kernel_shape": [1, 1], "_activation": "Relu"}
    one = _run("Conv", [x, w, b], attrs, WorkerPool(1))
    two = _run("Conv", [x, w, b], attrs, two_threads)
    np.testing.assert_array_equal(two, one)
    y = np.empty(1000, np.float32)
    ck.gemv(None, x.reshape(-1), w.reshape(1000, 1024), y)
    np.testing.assert_array_equal(one.reshape(-1), np.maximum(y + b, 0))
