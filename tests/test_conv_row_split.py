"""Multithreaded gather-GEMM Conv on narrow outputs: by columns while the weights stay in L2, else by rows.

A 14x14 or 7x7 output has only 7 column panels; split across 2 threads by columns alone
one thread does 4 of them and the other 3.  While the weights fit half of L2
(``Blocking.column_split_weights_bytes``) ``_gemm_blocks`` splits them so anyway: each thread
packs only its own columns, and no packing is shared between cores.  Bigger weights (and
weights that outweigh the image) are cut by rows instead, on weight-panel boundaries, so
every thread gets about 4 work items.  Either way every output stays bit for bit what one
thread computes.
"""

from __future__ import annotations

import numpy as np
import pytest

from conv_threads import CONV, assert_threads_give_the_one_thread_conv, conv_case, run_conv

from rknnlite._native import conv_kernels as ck
from rknnlite.backends.software.ops import conv as conv_mod

# every test on each micro-kernel path this CPU executes
pytestmark = [pytest.mark.skipif(ck.gemm_isa() == 0, reason="no gather-GEMM micro-kernel on this CPU"),
              pytest.mark.usefixtures("micro_kernel_isa")]

# (C, M, size, kernel, stride, residual): 1x1 at 14x14 (normal tiles), 1x1 at 7x7 (transposed
# tiles), strided 3x3 (phase planes; at 40 -> 20 computed on the plane grid), and M not a
# multiple of any panel height
CASES = [
    (256, 96, 14, 1, 1, True),
    (512, 256, 7, 1, 1, True),
    (64, 72, 28, 3, 2, False),
    (64, 72, 40, 3, 2, True),
    (256, 100, 14, 1, 1, False),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("threads", [2, 4])
def test_several_threads_give_the_one_thread_result(case, threads):
    inputs, attrs, shape = conv_case(*case)
    assert_threads_give_the_one_thread_conv(inputs, attrs, shape, threads, case[3], case[4])


def recording_items(monkeypatch):
    """The work items (row parts x column blocks) and ``finish`` of every gather_gemm_items call."""
    calls = []
    real = ck.gather_gemm_items

    def recording(pool, P, off, idx, packs, M, bias, y, scratch, kcb, ncb, row_parts=None, **kw):
        nblocks = -(-idx.shape[0] // ncb)
        calls.append((len(row_parts or [None]) * nblocks, row_parts, kw.get("finish")))
        return real(pool, P, off, idx, packs, M, bias, y, scratch, kcb, ncb, row_parts=row_parts, **kw)

    monkeypatch.setattr(conv_mod._ck, "gather_gemm_items", recording)
    return calls


@pytest.mark.parametrize("case, threads", [(CASES[0], 2), (CASES[1], 2), (CASES[0], 3), (CASES[3], 2),
                                           (CASES[4], 2)])
def test_narrow_outputs_with_big_weights_give_every_thread_several_items(monkeypatch, case, threads):
    """Weights past the column-split bound: 7 column panels alone would give 2 threads a 4/3
    split, and every column block would read the weights again: the rows are cut instead."""
    monkeypatch.setattr(conv_mod, "_COLUMN_SPLIT_WEIGHTS", 0)
    calls = recording_items(monkeypatch)
    inputs, attrs, shape = conv_case(*case)
    run_conv(inputs, attrs, shape, threads)
    assert calls and min(items for items, _, _ in calls) >= 4 * threads


@pytest.mark.parametrize("case", [CASES[0], CASES[4]])
def test_narrow_outputs_whose_weights_stay_in_l2_are_split_by_columns(monkeypatch, case):
    inputs, attrs, shape = conv_case(*case)
    C, M = case[0], case[1]
    assert M * C * 4 <= conv_mod._COLUMN_SPLIT_WEIGHTS and M < case[2] ** 2   # fits; the image outweighs them
    calls = recording_items(monkeypatch)
    np.testing.assert_array_equal(run_conv(inputs, attrs, shape, 2), run_conv(inputs, attrs, shape, 1))
    nr = ck.panel_shape(False)[1]
    assert calls == [(-(-case[2] ** 2 // nr), None, None)]   # one item per column panel, every row in each


def test_row_parts_start_on_panel_boundaries():
    parts = conv_mod._row_parts(13, nblocks=3, threads=2)
    assert len(parts) == 3
    assert parts[0][0] == 0 and parts[-1][1] == 13
    for (p0, p1), nxt in zip(parts, parts[1:] + [None]):
        assert p1 > p0
        if nxt is not None:
            assert nxt[0] == p1
    # enough columns: one part; never more parts than panels
    assert conv_mod._row_parts(13, nblocks=8, threads=2) == [(0, 13)]
    assert len(conv_mod._row_parts(13, nblocks=1, threads=8)) == 13


@pytest.mark.parametrize("size", [14, 7])
def test_grouped_weights_are_split_by_columns_only(size):
    """Grouped weights hold several row blocks; work items then keep every row of every group."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 128, size, size)).astype(np.float32)
    w = (rng.standard_normal((256, 64, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    attrs = CONV.prepare({"pads": [1] * 4, "group": 2, "_activation": "Relu"}, [x, w, b])
    g = conv_mod._geometry(attrs["_conv"], x.shape, w.shape)
    assert g.path == "gather"
    shape = (1, 256, size, size)
    one = run_conv([x, w, b], attrs, shape, 1)
    np.testing.assert_array_equal(run_conv([x, w, b], attrs, shape, 2), one)
    ref = np.stack([np.einsum("mcij,chwij->mhw", w[gi * 128:(gi + 1) * 128].astype(np.float64),
                              np.lib.stride_tricks.sliding_window_view(
                                  np.pad(x[0, gi * 64:(gi + 1) * 64].astype(np.float64), ((0, 0), (1, 1), (1, 1))),
                                  (3, 3), axis=(1, 2)))
                    for gi in range(2)]).reshape(256, size, size)
    np.testing.assert_allclose(one[0], np.maximum(ref + b[:, None, None], 0), rtol=1e-4, atol=1e-4)


def test_transposed_rows_are_finished_by_their_work_items(monkeypatch):
    """7x7 outputs run as transposed tiles: each row part is transposed back (and gets its
    residual and activation) in the work item that computed it, not in one serial pass."""
    if conv_mod._ISA < 2:
        pytest.skip("transposed tiles need AVX-512 (this path runs 7x7 outputs in normal tiles)")
    ranges = []
    real = conv_mod._untranspose

    def recording(yt, y, r, act, m0, m1):
        ranges.append((m0, m1))
        real(yt, y, r, act, m0, m1)

    monkeypatch.setattr(conv_mod, "_untranspose", recording)
    calls = recording_items(monkeypatch)
    inputs, attrs, shape = conv_case(*CASES[1])
    g = conv_mod._geometry(attrs["_conv"], inputs[0].shape, inputs[1].shape)
    assert g.transposed
    one = run_conv(inputs, attrs, shape, 1)
    assert ranges == [(0, shape[1])] and calls == []  # one thread: one serial pass
    ranges.clear()
    np.testing.assert_array_equal(run_conv(inputs, attrs, shape, 2), one)
    assert ranges == []  # no serial pass: the items finished their rows
    ((items, parts, finish),) = calls
    assert items >= 8 and finish is not None and finish[1] is not None  # residual added by the items
