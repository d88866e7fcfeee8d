"""Shared B packing of row-split gather GEMMs, and the parallel input copy of strided Convs.

When a multithreaded gather-GEMM Conv is split by weight rows over one column block,
every row part multiplies the same B: it is packed once (``pack_gather_b``, K blocks
shared out across the threads) and each part reads it through ``gather_gemm``'s
``prepacked``, instead of every part packing its own copy.  The stride-phase split or
subsampled copy of a strided Conv's input is split by channels across the threads.
Either way every output is bit for bit what one thread computes.
"""

from __future__ import annotations

import numpy as np
import pytest

from conv_threads import (CONV, assert_every_thread_takes_part, assert_threads_give_the_one_thread_conv, conv_case,
                          run_conv)

from rknnlite._native import conv_kernels as ck
from rknnlite.backends.software.ops import conv as conv_mod

# every test on each micro-kernel path this CPU executes
pytestmark = [pytest.mark.skipif(ck.gemm_isa() == 0, reason="no gather-GEMM micro-kernel on this CPU"),
              pytest.mark.usefixtures("micro_kernel_isa")]


def _gemm_operands(K, M, N, transposed, seed=0):
    rng = np.random.default_rng(seed)
    P = rng.standard_normal(K * N + 64).astype(np.float32)
    off = (np.arange(K, dtype=np.int32) * N)
    idx = np.arange(N, dtype=np.int32)
    a = rng.standard_normal((M, K)).astype(np.float32)
    packs = ck.pack_weights(a, transposed)[None]
    bias = rng.standard_normal(M).astype(np.float32)
    return P, off, idx, a, packs, bias


@pytest.mark.parametrize("transposed, direct_b", [(False, True), (False, False), (True, True)])
@pytest.mark.parametrize("K, kcb", [(300, 100), (300, 128), (77, 77)])
def test_prepacked_b_gives_the_packing_gemm_result(transposed, direct_b, K, kcb):
    if transposed and ck.gemm_isa() < 2:
        pytest.skip("transposed tiles need AVX-512")
    M, N = 40, 70  # two whole 32-column panels (read unpacked with direct_b) and a partial one
    P, off, idx, a, packs, bias = _gemm_operands(K, M, N, transposed)
    shape = (N, M) if transposed else (M, N)
    ncb = -(-N // ck.panel_shape(transposed)[1]) * ck.panel_shape(transposed)[1]
    scratch = np.empty(kcb * ncb + 16, np.float32)
    ref = np.full(shape, np.nan, np.float32)
    ck.gather_gemm(P, off, idx, packs, M, bias, ref, scratch, kcb, ncb, transposed=transposed)
    if not transposed:  # packed or read unpacked, the same sums in the same order
        other = np.full(shape, np.nan, np.float32)
        ck.gather_gemm(P, off, idx, packs, M, bias, other, scratch, kcb, ncb, direct_b=not direct_b)
        np.testing.assert_array_equal(other, ref)
    # packed in two K block ranges (as two threads would), then read by two row parts
    pre = np.full(ck.prepacked_size(K, kcb, N, transposed) + 16, np.nan, np.float32)
    nkb = -(-K // kcb)
    ck.pack_gather_b(P, off, idx, pre, kcb, transposed=transposed, kb_begin=0, kb_end=nkb // 2, direct_b=direct_b)
    ck.pack_gather_b(P, off, idx, pre, kcb, transposed=transposed, kb_begin=nkb // 2, kb_end=nkb, direct_b=direct_b)
    mr = ck.panel_shape(transposed)[0]
    cut = mr * (packs.shape[1] // 2) or M
    got = np.full(shape, np.nan, np.float32)
    for m0, m1 in ((0, cut), (cut, M)):
        if m0 == m1:
            continue
        p0, p1 = m0 // mr, -(-m1 // mr)
        ck.gather_gemm(P, off, idx, packs[:, p0:p1], m1 - m0, bias[m0:m1],
                       got[:, m0:m1] if transposed else got[m0:m1], scratch, kcb, ncb, transposed=transposed,
                       prepacked=pre, direct_b=direct_b)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(ref if not transposed else ref.T,
                               a.astype(np.float64) @ P[:K * N].reshape(K, N) + bias[:, None], rtol=1e-4, atol=1e-4)


def _conv(*case):
    return conv_case(*case, weight_scale=0.05)


def test_prepacked_size_is_whole_aligned_k_blocks():
    nr = ck.panel_shape(False)[1]
    assert ck.prepacked_size(300, 100, 49) == 3 * (-(-100 * (-(-49 // nr) * nr) // 16) * 16)
    assert ck.prepacked_size(301, 100, 49) == 4 * ck.prepacked_size(100, 100, 49)
    with pytest.raises(ValueError, match="kcb"):
        ck.prepacked_size(300, 0, 49)


def test_bad_prepacked_arguments_raise_and_leave_buffers_usable():
    K, M, N, kcb = 64, 16, 40, 64
    P, off, idx, _, packs, bias = _gemm_operands(K, M, N, False)
    nr = ck.panel_shape(False)[1]
    ncb = -(-N // nr) * nr
    scratch = np.empty(kcb * ncb + 16, np.float32)
    y = np.empty((M, N), np.float32)
    pre = np.empty(ck.prepacked_size(K, kcb, N) + 16, np.float32)
    with pytest.raises(ValueError, match="K blocks"):
        ck.pack_gather_b(P, off, idx, pre, kcb, kb_begin=0, kb_end=2)
    with pytest.raises(ValueError, match="columns"):
        ck.pack_gather_b(P, off, idx, pre, kcb, n_begin=10, n_end=5)
    with pytest.raises(ValueError, match="too small"):
        ck.pack_gather_b(P, off, idx, pre[:8], kcb)
    with pytest.raises(ValueError, match="one column block"):
        ck.gather_gemm(P, off, idx, packs, M, bias, y, scratch, kcb, nr, prepacked=pre)
    with pytest.raises(ValueError, match="one group"):
        ck.gather_gemm(P, off, idx, np.concatenate([packs, packs]), M // 2, None, y, scratch, kcb, ncb,
                       pstride=0, prepacked=pre)
    ck.pack_gather_b(P, off, idx, pre, kcb)
    ck.gather_gemm(P, off, idx, packs, M, bias, y, scratch, kcb, ncb, prepacked=pre)
    ref = np.empty_like(y)
    ck.gather_gemm(P, off, idx, packs, M, bias, ref, scratch, kcb, ncb)
    np.testing.assert_array_equal(y, ref)


# (C, M, size, kernel, stride, residual): 7x7 3x3 (transposed tiles, padded copy), 7x7 1x1
# with residual (transposed), strided 3x3 28 -> 14 (normal tiles, rows), strided 3x3 56 -> 28
# (phase split by channels), strided 1x1 (subsampled copy by channels)
CASES = [
    (512, 512, 7, 3, 1, False),
    (1024, 256, 7, 1, 1, True),
    (256, 256, 28, 3, 2, False),
    (128, 128, 56, 3, 2, True),
    (256, 128, 56, 1, 2, False),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("threads", [2, 3])
def test_several_threads_give_the_one_thread_result(case, threads):
    inputs, attrs, shape = _conv(*case)
    assert_threads_give_the_one_thread_conv(inputs, attrs, shape, threads, case[3], case[4])


@pytest.mark.parametrize("case", CASES[:3])
def test_row_parts_share_one_packing(monkeypatch, case):
    """Row-split layers pack B once per image (K blocks spread over the threads), and every
    row part reads that packing."""
    packed, prepacked = [], []
    real_pack, real_gemm, real_items = ck.pack_gather_b, ck.gather_gemm, ck.gather_gemm_items

    def pack(*args, **kw):
        names = ("P", "off", "idx", "out", "kcb", "n_begin", "n_end", "transposed", "kb_begin", "kb_end")
        kw.update(zip(names, args))
        packed.append((kw.get("kb_begin", 0), kw.get("kb_end", -1), kw.get("pool") is not None))
        return real_pack(**kw)

    def gemm(*args, **kw):
        prepacked.append(kw.get("prepacked") is not None)
        return real_gemm(*args, **kw)

    def items(*args, **kw):
        prepacked.append(kw.get("prepacked") is not None and kw.get("row_parts") is not None)
        return real_items(*args, **kw)

    monkeypatch.setattr(conv_mod._ck, "pack_gather_b", pack)
    monkeypatch.setattr(conv_mod._ck, "gather_gemm", gemm)
    monkeypatch.setattr(conv_mod._ck, "gather_gemm_items", items)
    inputs, attrs, shape = _conv(*case)
    run_conv(inputs, attrs, shape, 1)
    assert packed == [] and prepacked == [False]  # one thread: the GEMM packs as it goes
    prepacked.clear()
    run_conv(inputs, attrs, shape, 2)
    # one packing of every K block, shared out by the run's native pool when it is big enough
    g = conv_mod._geometry(attrs["_conv"], inputs[0].shape, inputs[1].shape)
    if not g.transposed and g.K == g.Cg and g.direct_b:
        # a 1x1 Conv in normal tiles (the AVX2 kernel has no transposed tiles) whose weights fit
        # Blocking.direct_b_bytes reads B straight from the image: nothing to pack or share
        assert packed == [] and prepacked == [False]
        return
    shared = -(-g.K // g.kcb) > 1 and g.K * len(g.idx) >= conv_mod._PARALLEL_MIN_PACK
    assert packed == [(0, -1, shared)]
    assert prepacked == [True]  # one call, every row part reading the shared packing


@pytest.mark.parametrize("case", CASES)
def test_work_items_are_spread_over_both_threads(case):
    inputs, attrs, shape = _conv(*case)
    assert_every_thread_takes_part(CONV, inputs, attrs, shape, run_conv(inputs, attrs, shape, 1))


@pytest.mark.parametrize("case", CASES[3:])
def test_strided_input_copy_is_split_by_channels(monkeypatch, case):
    seen = []
    real = conv_mod.parallel_for

    def recording(n, body, min_chunk=1):
        seen.append((getattr(getattr(body, "func", None), "__name__", ""), n))
        return real(n, body, min_chunk)

    monkeypatch.setattr(conv_mod, "parallel_for", recording)
    inputs, attrs, shape = _conv(*case)
    one = run_conv(inputs, attrs, shape, 1)
    assert not [n for name, n in seen if name in ("_phase_split_channels", "_subsample_channels")]
    seen.clear()
    np.testing.assert_array_equal(run_conv(inputs, attrs, shape, 2), one)
    copies = [n for name, n in seen if name in ("_phase_split_channels", "_subsample_channels")]
    assert copies == [case[0]]  # one copy per image, over the C channels
    # a small copy stays on the calling thread
    monkeypatch.setattr(conv_mod, "_PARALLEL_MIN_COPY", 1 << 30)
    seen.clear()
    np.testing.assert_array_equal(run_conv(inputs, attrs, shape, 2), one)
    assert not [n for name, n in seen if name in ("_phase_split_channels", "_subsample_channels")]
