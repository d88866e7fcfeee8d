"""Dense kernels: Gemm and MatMul (see the package docstring for the calling convention).

Both run on numpy's BLAS (``np.matmul`` straight into the output buffer); MatMul
folds the batch axes of a contiguous left operand into one GEMM when the right
operand is a plain matrix.  A Gemm of a few rows against row-major weights (``transB``: a
classifier's matrix-vector product, bound by reading the weights) runs on the compiled
``gemv`` instead, its weight rows shared out across the run's threads (:func:`gemv`).
"""

from __future__ import annotations

import threading
from typing import Optional

import numpy as np

from ...._native import conv_kernels as _ck
from ....errors import ModelInvalidError
from ..parallel import NATIVE_SPLIT_MIN_ELEMENTS, current_handle
from . import kernel
from .sparse import log_layer

_tls = threading.local()


def _scratch(n: int, dtype) -> np.ndarray:
    """Per-thread scratch vector of ``n`` elements of ``dtype`` (grown, never shrunk)."""
    bufs = getattr(_tls, "bufs", None)
    if bufs is None:
        bufs = _tls.bufs = {}
    dtype = np.dtype(dtype)
    buf = bufs.get(dtype)
    if buf is None or buf.shape[0] < n:
        buf = np.empty(max(n, 16), dtype)
        bufs[dtype] = buf
    return buf[:n]


#: a product of at most this many rows against at least GEMV_MIN_WEIGHTS weights runs on
#: the compiled matrix-vector kernel (with a micro-kernel ISA: AVX2 / AVX-512 / NEON-class)
GEMV_MAX_ROWS = 4
GEMV_MIN_WEIGHTS = 1 << 14


def gemv_fits(rows: int, w: np.ndarray) -> bool:
    """Whether ``rows`` rows times the transposed row-major float32 matrix ``w`` (out x in) run
    on :func:`gemv`: a choice made from the shapes and the CPU alone, never the thread count."""
    return (_ck.gemm_isa() >= 1 and 0 < rows <= GEMV_MAX_ROWS and w.ndim == 2 and w.dtype == np.float32
            and w.flags.c_contiguous and w.size >= GEMV_MIN_WEIGHTS)


def gemv(a: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
    """``y = a @ w.T`` (``a``: rows x K float32, ``w``: N x K row-major, ``y``: rows x N, both
    C-contiguous) on the compiled matrix-vector kernel, one row of ``a`` at a time, ``w``'s rows
    shared out across the run's threads when each gets at least ``NATIVE_SPLIT_MIN_ELEMENTS``
    weights; every output is summed the same way on any thread count."""
    n, k = w.shape
    split = w.size >= 2 * NATIVE_SPLIT_MIN_ELEMENTS
    pool = current_handle() if split else None
    min_rows = max(16, -(-NATIVE_SPLIT_MIN_ELEMENTS // max(k, 1)))
    for i in range(a.shape[0]):
        _ck.gemv(pool, a[i], w, y[i], min_rows=min_rows)


def _gemm_prepare(attrs, consts):
    for name in ("transA", "transB"):
        v = attrs.get(name, 0)
        if v not in (0, 1):
            raise ModelInvalidError(f"attribute {name} must be 0 or 1, got {v!r}", op="Gemm")
    for name in ("alpha", "beta"):
        v = attrs.get(name, 1.0)
        if not isinstance(v, (int, float, np.floating, np.integer)) or isinstance(v, bool):
            raise ModelInvalidError(f"attribute {name} must be a float, got {v!r}", op="Gemm")
    for i, c in enumerate(consts[:2] if consts else []):
        if c is not None and np.ndim(c) != 2:
            raise ModelInvalidError(f"input {'AB'[i]} must be 2-D, got shape {list(np.shape(c))}", op="Gemm")
    log_layer("Gemm", attrs)  # sparse_infer models: the per-layer SparseRation line (runs dense)
    return dict(attrs)


def _broadcasts_to(shape, target) -> bool:
    """Whether an array of ``shape`` broadcasts unidirectionally to ``target``."""
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def _product_error(a_shape, b_shape) -> Optional[ValueError]:
    """Why ``a_shape @ b_shape`` is undefined under numpy's matmul rules, in MatMul's terms
    (``None`` when it is defined)."""
    if not a_shape or not b_shape:
        return ValueError(f"MatMul: A {list(a_shape)} and B {list(b_shape)}: operands must have rank >= 1")
    k_b = b_shape[0] if len(b_shape) == 1 else b_shape[-2]
    if a_shape[-1] != k_b:
        return ValueError(f"MatMul: A of shape {list(a_shape)} has {a_shape[-1]} columns and B of shape "
                          f"{list(b_shape)} {k_b} rows; they must be equal")
    try:
        np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        return ValueError(f"MatMul: the batch axes {list(a_shape[:-2])} of A and {list(b_shape[:-2])} of B "
                          f"do not broadcast")
    return None


def _out_dtype(a: np.ndarray, b: np.ndarray) -> np.dtype:
    dt = np.result_type(a.dtype, b.dtype)
    return np.dtype(np.float32) if dt.kind == "f" else dt


@kernel("Gemm", out=True, prepare=_gemm_prepare)
def gemm(inputs, attrs, out=None):
    """ONNX Gemm: ``Y = alpha * A' @ B' + beta * C`` with ``A' = A.T`` if transA (same for B);
    C optional and unidirectionally broadcast to (M, N); with ``attrs["_residual"]`` plus a 4th
    input of shape (M, N).  Writes into ``out[0]`` when given (only a C-sized scratch when
    ``beta`` is neither 0 nor 1)."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if a.ndim != 2 or b.ndim != 2:
        raise ModelInvalidError(f"A and B must be 2-D, got shapes {list(a.shape)} and {list(b.shape)}", op="Gemm")
    w = b if attrs.get("transB", 0) else None  # row-major weights of a matrix-vector product
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"Gemm: A' of shape {list(a.shape)} has {a.shape[1]} columns and B' of shape "
                         f"{list(b.shape)} {b.shape[0]} rows (after transA={attrs.get('transA', 0)}, "
                         f"transB={attrs.get('transB', 0)}); they must be equal")
    if c is not None and not _broadcasts_to(np.shape(c), (a.shape[0], b.shape[1])):
        raise ValueError(f"Gemm: C of shape {list(np.shape(c))} does not broadcast to the product's "
                         f"{[a.shape[0], b.shape[1]]}")
    alpha = float(attrs.get("alpha", 1.0))
    beta = float(attrs.get("beta", 1.0))
    dtype = _out_dtype(a, b)
    target = out[0] if out is not None else None
    if dtype.kind != "f":
        # integer Gemm: exact product, scaled in float64, cast back like ONNX's typed result
        res = np.matmul(a, b).astype(np.float64) * alpha
        if c is not None and beta != 0.0:
            res = res + beta * np.asarray(c, dtype=np.float64)
        res = res.astype(dtype)
        if target is not None:
            np.copyto(target, res)
            return out
        return [res]
    shape = (a.shape[0], b.shape[1])
    y = target if target is not None else np.empty(shape, dtype)
    a = a.astype(np.float32, copy=False)
    if (w is not None and gemv_fits(a.shape[0], w) and a.flags.c_contiguous and y.dtype == np.float32
            and y.flags.c_contiguous):
        gemv(a, w, y)
    else:
        np.matmul(a, b.astype(np.float32, copy=False), out=y)
    if alpha != 1.0:
        y *= alpha
    if c is not None and beta != 0.0:
        if beta == 1.0:
            y += c
        else:
            c = np.asarray(c)
            tmp = _scratch(c.size, y.dtype).reshape(c.shape)
            np.multiply(c, beta, out=tmp, casting="unsafe")
            y += tmp
    if attrs.get("_residual"):  # a dense layer's fused residual (toolkit.dense_residuals), (M, N)
        if len(inputs) < 4 or np.shape(inputs[3]) != y.shape:
            raise ModelInvalidError(f"attribute _residual needs a 4th input of shape {list(y.shape)}", op="Gemm")
        y += inputs[3]
    return [y] if target is None else out


def _matmul_prepare(attrs, consts):
    log_layer("MatMul", attrs)  # sparse_infer models: the per-layer SparseRation line (runs dense)
    return attrs


@kernel("MatMul", out=True, prepare=_matmul_prepare)
def matmul(inputs, attrs, out=None):
    """ONNX MatMul (numpy ``matmul`` semantics: N-D batch broadcasting, 1-D operands
    promoted and their axis removed).  With ``attrs["_half_input"]`` (set by the float16
    executor) A is first rounded to float16 (a copy).  Writes into ``out[0]`` when given."""
    a, b = inputs[0], inputs[1]
    dtype = _out_dtype(a, b)
    if dtype.kind == "f":
        a = a.astype(np.float32, copy=False)
        b = b.astype(np.float32, copy=False)
        if attrs.get("_half_input"):  # float16 mode, a float32 input (see backends.software.float16_rules)
            a = a.astype(np.float16).astype(np.float32)
    target = out[0] if out is not None else None
    if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
        # (..., M, K) @ (K, N): one GEMM over all rows instead of one per batch entry
        shape = a.shape[:-1] + (b.shape[1],)
        if a.shape[-1] != b.shape[0]:
            raise _product_error(a.shape, b.shape)
        y = target if (target is not None and target.flags.c_contiguous) else np.empty(shape, dtype)
        np.matmul(a.reshape(-1, a.shape[-1]), b, out=y.reshape(-1, b.shape[1]))
        if target is not None and y is not target:
            np.copyto(target, y)
            return out
        return [y] if target is None else out
    try:
        if target is not None:
            np.matmul(a, b, out=target)
            return out
        return [np.matmul(a, b).astype(dtype, copy=False)]
    except ValueError:
        error = _product_error(a.shape, b.shape)
        if error is None:
            raise  # the operands fit: an ``out`` of the wrong shape
        raise error from None
