"""Cache coherency of cacheable tensor memory as on a board: with DISABLE_FLUSH_INPUT_MEM_CACHE /
DISABLE_FLUSH_OUTPUT_MEM_CACHE the application must ``mem.sync()`` (TO_DEVICE, FROM_DEVICE,
BIDIRECTIONAL); forgetting it gives stale data.  Non-cacheable memory and the default flush
behaviour need no sync."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import InitFlag, InvalidParamError, MemAllocFlag, MemSyncMode

NO_FLUSH_IN = InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE
NO_FLUSH_OUT = InitFlag.DISABLE_FLUSH_OUTPUT_MEM_CACHE
TO, FROM, BOTH = MemSyncMode.TO_DEVICE, MemSyncMode.FROM_DEVICE, MemSyncMode.BIDIRECTIONAL


@pytest.fixture()
def add(context_models):
    """``add(flags, mem_flags)`` -> (ctx, a, b, y views (CPU), (mem_a, mem_b, mem_y)) for y = a + b."""
    opened = []

    def make(flags=0, mem_flags=MemAllocFlag.DEFAULT):
        ctx = rknnlite.Context(context_models["add"], flags=flags)
        opened.append(ctx)
        mems = [ctx.create_mem(16, mem_flags) for _ in range(3)]
        for mem, attr in zip(mems, ctx.inputs + ctx.outputs):
            ctx.set_io_mem(mem, attr)
        a, b, y = (m.array(np.float32, (4,)) for m in mems)
        return ctx, a, b, y, mems

    yield make
    for ctx in opened:
        ctx.close()


def test_default_flush_needs_no_sync(add):
    ctx, a, b, y, _ = add()
    for k in range(3):
        a[:] = k
        b[:] = 10
        ctx.run_bound()
        assert y.tolist() == [10 + k] * 4


@pytest.mark.parametrize("flags", [NO_FLUSH_IN, NO_FLUSH_OUT, NO_FLUSH_IN | NO_FLUSH_OUT])
def test_non_cacheable_memory_needs_no_sync(add, flags):
    ctx, a, b, y, mems = add(flags, MemAllocFlag.NON_CACHEABLE)
    for k in range(3):
        a[:] = k
        b[:] = 1
        ctx.run_bound()
        assert y.tolist() == [1 + k] * 4
    for mem in mems:
        mem.sync(BOTH)  # allowed, nothing to do


def test_input_writes_reach_the_npu_only_after_sync_to_device(add):
    ctx, a, b, y, (ma, mb, _) = add(NO_FLUSH_IN)
    a[:] = 1
    b[:] = 2
    ctx.run_bound()  # forgot the sync: the NPU reads what was in DDR when the memory was bound (zeros)
    assert y.tolist() == [0] * 4
    ma.sync(TO)
    ctx.run_bound()
    assert y.tolist() == [1] * 4  # a reached the device, b not yet
    mb.sync(TO)
    ctx.run_bound()
    assert y.tolist() == [3] * 4
    a[:] = 5  # the next frame, without a sync: the NPU still sees the old one
    ctx.run_bound()
    assert y.tolist() == [3] * 4
    ma.sync(BOTH)  # BIDIRECTIONAL cleans the cache too
    ctx.run_bound()
    assert y.tolist() == [7] * 4
    assert a.tolist() == [5] * 4  # and keeps the CPU's data


def test_invalidating_an_input_drops_unflushed_cpu_writes(add):
    ctx, a, b, y, (ma, _, _) = add(NO_FLUSH_IN)
    a[:] = 4
    ma.sync(TO)
    a[:] = 9  # not cleaned
    ma.sync(FROM)  # invalidate: the CPU sees DDR again, its write is lost (as on ARM)
    assert a.tolist() == [4] * 4
    ctx.run_bound()
    assert y.tolist() == [4] * 4


def test_results_reach_the_cpu_only_after_sync_from_device(add):
    ctx, a, b, y, (_, _, my) = add(NO_FLUSH_OUT)
    a[:] = 1
    b[:] = 2
    ctx.run_bound()  # inputs are flushed by the runtime (only output flushing is disabled)
    assert y.tolist() == [0] * 4  # forgot the sync: the CPU reads its stale cache
    my.sync(TO)  # the wrong direction does not help
    assert y.tolist() == [0] * 4
    my.sync(FROM)
    assert y.tolist() == [3] * 4
    a[:] = 10
    ctx.run_bound()
    assert y.tolist() == [3] * 4  # the previous result, stale
    my.sync(BOTH)  # BIDIRECTIONAL invalidates too, and the clean CPU lines do not overwrite the result
    assert y.tolist() == [12] * 4


def test_both_directions_disabled_full_frame_loop(add):
    ctx, a, b, y, (ma, mb, my) = add(NO_FLUSH_IN | NO_FLUSH_OUT)
    b[:] = 100
    mb.sync(TO)
    for k in range(4):
        a[:] = k
        ma.sync(TO)
        ctx.run_bound()
        my.sync(FROM)
        assert y.tolist() == [100 + k] * 4


def test_stale_results_of_an_application_that_never_syncs(add):
    ctx, a, b, y, _ = add(NO_FLUSH_IN | NO_FLUSH_OUT)
    for k in range(3):
        a[:] = k + 1
        b[:] = 1
        ctx.run_bound()
        assert y.tolist() == [0] * 4  # every frame: nothing reaches the NPU, nothing comes back


def test_a_flushing_context_sharing_the_memory_flushes_it(context_models, add):
    ctx, a, b, y, (ma, mb, my) = add(NO_FLUSH_IN | NO_FLUSH_OUT)
    with rknnlite.Context(context_models["add"]) as flushing:
        for mem, attr in zip((ma, mb, my), flushing.inputs + flushing.outputs):
            flushing.set_io_mem(mem, attr)
        a[:] = 2
        b[:] = 3
        flushing.run_bound()  # its runtime cleans the inputs and invalidates the output
        assert y.tolist() == [5] * 4
        ctx.run_bound()  # the other context's NPU run now sees the flushed inputs
        assert y.tolist() == [5] * 4


def test_sync_mode_is_checked(add):
    ctx, a, b, y, (ma, _, _) = add(NO_FLUSH_IN)
    for bad in (0, 4, -1, "TO_DEVICE", None, True):
        with pytest.raises(InvalidParamError, match="sync mode must be MemSyncMode"):
            ma.sync(bad)
    ma.sync(1)  # the C values are accepted
