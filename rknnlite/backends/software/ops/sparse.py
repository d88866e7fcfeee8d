"""Sparse-weight Conv for layers the toolkit marked sparse (``attrs["_sparsity"]``, see
:mod:`rknnlite.toolkit.sparsity`).

Representation: the weight ``(M, C, kh, kw)`` as an ``(M, K)`` matrix (``K = C kh kw``, the
im2col row order) in compressed sparse rows: the non-zero values (float32), their column
indices (int32) and, per row, offsets splitting its non-zeros into blocks of 64 columns
(the kernel walks K in cache-sized blocks).  Any of the four patterns (and any other zero
layout) packs the same way; at 50 % sparsity it takes as many bytes as the dense weight,
at 75 % half.

Kernel: im2col of each image (none for a 1x1 stride-1 unpadded Conv) and
:func:`rknnlite._native.sparse_kernels.csr_gemm` over column bands shared out across the
run's threads, then the compiled output stage of the dense path (bias, fused residual,
fused activation).  Each output is one fused multiply-add chain over its row's non-zeros;
the dense paths sum the same products in another order (blocked, Winograd), so the two
agree to float32 rounding of the sum (relative ~1e-6 of the output scale), not bit for
bit; the sparse result itself does not depend on the thread count.

When it runs (decided per input shape, from the shapes alone -- no timing): only
2-D ``group == 1`` Conv with constant weights, never instead of Winograd (3x3 stride-1
layers: 2.25-4x fewer multiply-adds than direct, more than 4:2 sparsity saves) nor
when the im2col matrix would pass :data:`MAX_COLS_FLOATS`, and only when the modelled
cost ``nnz cols(N) / SPARSE_RATE + K N IM2COL_COST`` is below the dense ``M K N``
(``cols(N)``: ``N`` weighted by the kernel's column tiles, narrow tails cost more; the
rates are relative to the dense micro-kernels, measured with ``tools/bench/bench_sparse.py``).
In practice 4:2 (50 %) layers stay dense on an AVX2 core (the CSR kernel cannot reuse a
loaded activation across output rows as the dense micro-kernels do) and 16:4 (75 %)
pointwise layers run sparse.
Gemm and MatMul layers are marked and reported but run dense: at batch 1 they are
matrix-vector products bound by reading the weights, which CSR with 32-bit indices does
not shrink at 50 % sparsity.
"""

from __future__ import annotations

import logging
import threading
from typing import Dict, Optional

import numpy as np

from ...._native import conv_kernels as _ck
from ...._native import sparse_kernels as _sk
from ..parallel import parallel_for

__all__ = ["SparseMatrix", "SparseConv", "prepare_conv", "log_layer", "layer_ratios", "SPARSE_RATE", "IM2COL_COST", "MAX_COLS_FLOATS"]

_log = logging.getLogger("rknnlite.backends.software.sparse")

#: Multiply-adds per unit time of ``csr_gemm`` relative to the dense Conv micro-kernels
#: (bench_sparse.py on an AVX2 x86 core; the generic C loop is far slower).
SPARSE_RATE = 0.4 if _sk.has_simd() else 0.05
#: Extra cost per im2col element (``K N`` of them), in dense multiply-add units: measured,
#: it includes the cache misses of streaming a large unfolded matrix through the kernel.
IM2COL_COST = 32.0
#: Largest im2col matrix (floats) the sparse path builds; larger layers run dense.
MAX_COLS_FLOATS = 4 * 1024 * 1024
#: Patterns (``attrs["_sparsity"]``) that make a layer a candidate.
_SPARSE_MODES = ("4:2_ic", "4:2_oc", "16:4_io", "16:4_oi")
_RATIO = {"4:2_ic": "50% (IC)", "4:2_oc": "50% (OC)", "16:4_io": "75%", "16:4_oi": "75%"}
#: columns per band of the output (a multiple of the kernel's 32-column tile)
_BAND = 512

_tls = threading.local()


def _column_cost(n: int) -> float:
    """``n`` output columns in units of a column of the kernel's 64-wide tile: the 32-wide
    tile has half the accumulators, the 8-wide one a single (latency-bound) chain, the
    scalar tail no vectors (relative costs measured with bench_sparse.py)."""
    n64 = n // 64 * 64
    n32 = (n - n64) // 32 * 32
    n8 = (n - n64 - n32) // 8 * 8
    return n64 + 1.5 * n32 + 4.0 * n8 + 8.0 * (n - n64 - n32 - n8)


def _cols_scratch(n: int) -> np.ndarray:
    buf = getattr(_tls, "cols", None)
    if buf is None or buf.shape[0] < n:
        buf = _tls.cols = np.empty(max(n, 64), np.float32)
    return buf[:n]


class SparseMatrix:
    """An ``(M, K)`` float32 matrix in compressed sparse rows (copies the non-zeros).

    Attributes: ``vals`` (nnz float32), ``cols`` (nnz int32, ascending per row),
    ``blk`` (``(M, nkb + 1)`` int32: row ``m``'s non-zeros with columns in the K block
    ``[b k_block, (b + 1) k_block)`` are ``blk[m, b]:blk[m, b + 1]``; ``blk[:, 0]`` and
    ``blk[:, -1]`` are the CSR row offsets), ``shape``, ``nnz``, ``density`` (nnz / (M K)).
    ``k_block`` rows of a 64-column panel of the right operand fit the L1 cache."""

    def __init__(self, dense: np.ndarray, k_block: int = 64):
        a = np.ascontiguousarray(dense, dtype=np.float32)
        if a.ndim != 2:
            raise ValueError(f"SparseMatrix needs a 2-D matrix, got shape {list(a.shape)}")
        rows, cols = np.nonzero(a)
        m, k = a.shape
        self.shape = a.shape
        self.vals = np.ascontiguousarray(a[rows, cols])
        self.cols = cols.astype(np.int32)
        nkb = max(1, -(-k // k_block))
        counts = np.bincount(rows * nkb + cols // k_block, minlength=m * nkb)
        self.blk = np.zeros((m, nkb + 1), np.int32)
        ends = np.cumsum(counts).reshape(m, nkb)
        self.blk[:, 1:] = ends
        self.blk[1:, 0] = ends[:-1, -1]
        self.nnz = int(self.vals.shape[0])
        self.density = self.nnz / a.size if a.size else 1.0

    def matmul_into(self, x: np.ndarray, y: np.ndarray, c0: int = 0, c1: int = -1) -> None:
        """``y[:, c0:c1] = self @ x[:, c0:c1]`` in place (``x`` (K, N), ``y`` (M, N),
        float32 with contiguous rows)."""
        _sk.csr_gemm(self.vals, self.cols, self.blk, x, y, c0, c1)


class SparseConv:
    """The sparse form of one marked Conv node (shared by every context of the model)."""

    def __init__(self, w: np.ndarray, mode: str):
        self.mode = mode
        self.matrix = SparseMatrix(np.asarray(w, np.float32).reshape(w.shape[0], -1))
        self.M, self.K = self.matrix.shape

    def use(self, path: str, N: int, pointwise: bool) -> bool:
        """Whether the sparse kernel is modelled faster than the dense ``path`` for an
        output of ``N`` positions (see the module docstring)."""
        if path in ("winograd", "depthwise", "empty") or self.K * N > MAX_COLS_FLOATS:
            return False
        dense = float(self.M) * self.K * N
        sparse = self.matrix.nnz * _column_cost(N) / SPARSE_RATE + (0.0 if pointwise else IM2COL_COST * self.K * N)
        return sparse < dense

    def run(self, x: np.ndarray, y3: np.ndarray, bias, act, res3, geometry) -> None:
        """``y3[i] = act(W x[i] + bias + res3[i])`` for every image: ``x`` (n, C, H, W)
        float32 contiguous, ``y3`` (n, M, N) float32 contiguous, ``geometry``
        ``(in_sp, out_sp, ksz, strides, dilations, pads_begin, pointwise)``."""
        in_sp, out_sp, ksz, strides, dilations, pb, pointwise = geometry
        n_img, C = x.shape[0], x.shape[1]
        N = y3.shape[2]
        nbands = -(-N // _BAND)
        stage = bias is not None or act is not None or res3 is not None
        for i in range(n_img):
            if pointwise:
                cols = x[i].reshape(C, N)
            else:
                cols = _cols_scratch(self.K * N).reshape(self.K, N)
                _ck.im2col(x[i].reshape((C, 1) + tuple(in_sp)), cols, [1] + list(ksz), [1] + list(strides),
                           [1] + list(dilations), [0] + list(pb), [1] + list(out_sp))
            y = y3[i]
            res = None if res3 is None else res3[i]

            def body(j0: int, j1: int, cols=cols, y=y, res=res) -> None:
                for j in range(j0, j1):
                    c0, c1 = j * _BAND, min(N, (j + 1) * _BAND)
                    self.matrix.matmul_into(cols, y, c0, c1)
                    if stage:
                        _ck.bias_act(y[:, c0:c1], bias, act, residual=None if res is None else res[:, c0:c1])

            parallel_for(nbands, body)


def log_layer(op: str, attrs) -> Optional[str]:
    """Log ``<op>:<layer> SparseRation: <ratio>`` at DEBUG when the toolkit recorded a
    sparsity pattern in ``attrs["_sparsity"]`` (built with ``sparse_infer=True``); returns
    the pattern (None when there is none)."""
    mode = attrs.get("_sparsity")
    if not isinstance(mode, str):
        return None
    _log.debug("%s:%s SparseRation: %s", op, attrs.get("_sparsity_layer", "?"), _RATIO.get(mode, "0%"))
    return mode


def prepare_conv(attrs, w: Optional[np.ndarray], nd: Optional[int], group: int) -> Optional[SparseConv]:
    """The :class:`SparseConv` of a Conv node marked sparse by the toolkit, or None.

    Logs the layer's sparsity line (``Conv:<name> SparseRation: 50% (IC)``, as the build
    does) at DEBUG on the ``rknnlite`` logger tree (``RKNN_LOG_LEVEL=4`` shows it) for
    every node carrying ``_sparsity`` (named by ``attrs["_sparsity_layer"]``, which the
    toolkit records with it: kernels do not see node names)."""
    mode = log_layer("Conv", attrs)
    if mode is None or mode not in _SPARSE_MODES or w is None or nd != 2 or group != 1 or np.asarray(w).dtype.kind != "f":
        return None
    return SparseConv(np.asarray(w), mode)


def layer_ratios(graph) -> Dict[str, str]:
    """``{"<op>:<node name>": SparseRation}`` for every node the toolkit marked
    (``attrs["_sparsity"]``), keyed like perf_detail's FullName column: the argument of
    :meth:`rknnlite.tensors.perf.PerfDetail.with_sparsity`."""
    return {f"{n.op}:{n.name}": _RATIO.get(n.attrs["_sparsity"], "0%") for n in graph.nodes
            if isinstance(n.attrs.get("_sparsity"), str)}
