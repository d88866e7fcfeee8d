"""Multithreaded banded Winograd hands out its biggest bands first.

Threads take bands in turn; with the bands of 14 tile rows as 1,2,2,2,1,2,2,2 rows two
threads end one band-row apart, as 2,2,2,2,2,2,1,1 they end together.  The order never
changes a value: every band is transformed, multiplied and transformed back on its own.
"""

from __future__ import annotations

import numpy as np
import pytest

from conv_threads import CONV, assert_every_thread_takes_part, conv_case, run_conv

from rknnlite._native import conv_kernels as ck
from rknnlite.backends.software.ops import conv as conv_mod

# every test on each micro-kernel path this CPU executes
pytestmark = [pytest.mark.skipif(ck.gemm_isa() == 0, reason="no Winograd micro-kernels on this CPU"),
              pytest.mark.usefixtures("micro_kernel_isa")]


@pytest.mark.parametrize("th, tw", [(14, 14), (7, 7), (9, 5)])
def test_bands_cover_every_row_once_biggest_first(th, tw):
    bands = conv_mod._winograd_bands(4, th, tw, 64, 64, conv_mod._WINO_MT_BAND_MIN_TILES, 0)
    assert bands is not None
    sizes = [r1 - r0 for r0, r1, *_ in bands]
    assert sizes == sorted(sizes, reverse=True)
    rows = sorted((r0, r1) for r0, r1, *_ in bands)
    assert rows[0][0] == 0 and rows[-1][1] == th
    assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


@pytest.mark.parametrize("C, size, residual", [(64, 56, False), (64, 56, True), (128, 28, False), (256, 14, True)])
def test_two_threads_give_the_one_thread_result_on_both_threads(C, size, residual):
    inputs, attrs, shape = conv_case(C, C, size, 3, 1, residual, weight_scale=0.05, winograd=None)
    g = conv_mod._geometry(attrs["_conv"], inputs[0].shape, inputs[1].shape)
    assert g.path == "winograd" and g.wbands_mt is not None
    one = run_conv(inputs, attrs, shape, 1)
    assert not np.isnan(one).any()
    assert_every_thread_takes_part(CONV, inputs, attrs, shape, one)
    # and it is the convolution (Winograd's float32 error is ~1e-5 of the output scale)
    x, w, b = (a.astype(np.float64) for a in inputs[:3])
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x[0], ((0, 0), (1, 1), (1, 1))), (3, 3), axis=(1, 2))
    ref = np.einsum("mcij,chwij->mhw", w, win) + b[:, None, None]
    if residual:
        ref += inputs[3][0]
    np.testing.assert_allclose(one[0], np.maximum(ref, 0), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("C, M, size, residual", [(96, 128, 14, False), (128, 160, 14, True), (192, 320, 7, False),
                                                  (128, 72, 14, True)])
def test_images_too_small_for_bands_share_their_output_channels(C, M, size, residual):
    """A 14x14 or 7x7 layer has too few tiles for two bands: with two threads, each transforms
    the whole input and computes about half of the output channels (whole weight panels:
    72 channels split 40 + 32 on 8-row panels), bit for bit the one-thread result."""
    inputs, attrs, shape = conv_case(C, M, size, 3, 1, residual, weight_scale=0.05, winograd=None)
    g = conv_mod._geometry(attrs["_conv"], inputs[0].shape, inputs[1].shape)
    assert g.path == "winograd" and g.wbands_mt is None and g.wband_whole is not None
    one = run_conv(inputs, attrs, shape, 1)
    assert not np.isnan(one).any()
    assert_every_thread_takes_part(CONV, inputs, attrs, shape, one)
    three = run_conv(inputs, attrs, shape, 3)  # more parts than some layers have panels for each
    np.testing.assert_array_equal(three, one)


def test_one_thread_runs_a_small_image_as_one_native_call(monkeypatch):
    """On one thread too, a 14x14 layer whose transformed input is cache-sized runs as one band
    in one native call (transform, products, inverse), not as three Python-driven passes over
    the whole image; both give the same values bit for bit."""
    inputs, attrs, shape = conv_case(128, 160, 14, 3, 1, True, weight_scale=0.05, winograd=None)
    g = conv_mod._geometry(attrs["_conv"], inputs[0].shape, inputs[1].shape)
    assert g.path == "winograd" and g.wbands is None and g.wband_whole is not None
    passes = []
    transform = conv_mod._ck.winograd_input
    monkeypatch.setattr(conv_mod._ck, "winograd_input", lambda *a, **k: (passes.append(a), transform(*a, **k))[1])
    one = run_conv(inputs, attrs, shape, 1)
    assert passes == []
    monkeypatch.setattr(g, "wband_whole", None)
    three = run_conv(inputs, attrs, shape, 1)
    assert passes, "without the whole band the three passes run"
    np.testing.assert_array_equal(one, three)


def test_channel_parts_of_one_band_cover_every_channel_once():
    inputs, attrs, shape = conv_case(64, 20, 14, 3, 1, True, weight_scale=0.05, winograd=None)
    g = conv_mod._geometry(attrs["_conv"], inputs[0].shape, inputs[1].shape)
    u = attrs["_conv"].winograd_for(inputs[1], g.wtile)
    th, tw = g.tiles
    scratch = np.zeros(ck.winograd_bands_scratch(64, 20, th, tw, 1 << 16) + 16, np.float32)
    want = run_conv(inputs, attrs, shape, 1)
    for mparts in (1, 2, 3, 7):  # 20 channels are 3 panels of 8 (or 4 of 6): some parts get none
        y = np.full(shape, np.nan, np.float32)
        ck.winograd_bands(None, inputs[0], u, inputs[2], y, inputs[3], g.wband_whole, 1, 1, tw, scratch,
                          act=attrs["_conv"].act, tile=g.wtile, mparts=mparts)
        np.testing.assert_array_equal(y, want, err_msg=f"mparts={mparts}")
    with pytest.raises(ValueError, match="mparts"):
        ck.winograd_bands(None, inputs[0], u, inputs[2], y, inputs[3], g.wband_whole, 1, 1, tw, scratch,
                          act=attrs["_conv"].act, tile=g.wtile, mparts=0)


def test_winograd_bands_refuse_work_that_does_not_match():
    inputs, attrs, shape = conv_case(64, 64, 56, 3, 1, True, weight_scale=0.05, winograd=None)
    g = conv_mod._geometry(attrs["_conv"], inputs[0].shape, inputs[1].shape)
    u = attrs["_conv"].winograd_for(inputs[1], g.wtile)
    x, y, res = inputs[0], np.zeros(shape, np.float32), inputs[3]
    th, tw = g.tiles
    bands = g.wbands_mt
    scratch = np.zeros(2 * ck.winograd_bands_scratch(64, 64, 8, tw, 1 << 16) + 16, np.float32)

    def call(**kw):
        args = dict(pool=None, x=x, u=u, bias=None, y=y, residual=res, bands=bands, pt=1, pl=1, TW=tw,
                    scratch=scratch)
        args.update(kw)
        ck.winograd_bands(args.pop("pool"), args.pop("x"), args.pop("u"), args.pop("bias"), args.pop("y"),
                          args.pop("residual"), args.pop("bands"), args.pop("pt"), args.pop("pl"), args.pop("TW"),
                          args.pop("scratch"), **args)

    r0, r1, off, idx, kcb, ncb = bands[0]
    with pytest.raises(ValueError, match="band 0"):
        call(bands=[(r0, r1 + 1, off, idx, kcb, ncb)] + bands[1:])  # the gather tables are for r1 - r0 rows
    with pytest.raises(ValueError, match="residual"):
        call(residual=res[:, :, :-1])
    with pytest.raises(ValueError, match="bias length"):
        call(bias=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="scratch buffer too small"):
        call(scratch=np.zeros(64, np.float32))
    with pytest.raises(ValueError, match="no bands"):
        call(bands=[])
    call(bias=inputs[2], act=attrs["_conv"].act)  # and the right call is the Conv kernel's result
    np.testing.assert_array_equal(y, run_conv(inputs, attrs, shape, 1))
