"""Tensor memory (``Context.create_mem``, ``create_mem_from_fd``, ``TensorMem``) and its lifetimes:
buffer protocol, numpy views without copies, fd mapping, destroy, context close, dup."""

from __future__ import annotations

import ctypes
import gc
import itertools
import mmap
import os
import pickle
import threading
import weakref

import numpy as np
import pytest

import rknnlite
from rknnlite import (
    ContextInvalidError,
    InvalidParamError,
    MemAllocFlag,
    MemSyncMode,
    RKNNMemoryError,
    TensorMem,
    TensorMemFlag,
    TensorType,
)

memfd_only = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs os.memfd_create (Linux)")


@pytest.fixture()
def ctx(context_models):
    c = rknnlite.Context(context_models["add"])
    yield c
    c.close()


@pytest.fixture()
def memfd():
    fds = []

    def make(size):
        fd = os.memfd_create("test")
        os.ftruncate(fd, size)
        fds.append(fd)
        return fd

    yield make
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def open_fds():
    return len(os.listdir("/proc/self/fd"))


# -- create_mem ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, cacheable", [
    (MemAllocFlag.DEFAULT, True), (MemAllocFlag.CACHEABLE, True), (MemAllocFlag.NON_CACHEABLE, False),
    (MemAllocFlag.TRY_ALLOC_SRAM, True), (MemAllocFlag.NON_CACHEABLE | MemAllocFlag.TRY_ALLOC_SRAM, False), (2, False),
])
def test_create_mem_fields_and_flags(ctx, flags, cacheable):
    mem = ctx.create_mem(100, flags)
    assert isinstance(mem, TensorMem) and isinstance(mem, mmap.mmap)
    assert (mem.size, mem.offset, mem.phys_addr, mem.flags) == (100, 0, 0, TensorMemFlag.ALLOC_INSIDE)
    assert mem.alloc_flags == flags and mem.cacheable is cacheable
    assert len(mem) == 100 and not mem.destroyed
    assert bytes(memoryview(mem)) == bytes(100)  # zero-filled
    mem.destroy()


def test_every_backends_memory_follows_the_tensor_memory_protocol(ctx):
    from rknnlite.backends.npu.zero_copy import NpuTensorMem
    from rknnlite.tensors.memory import TensorMemory

    members = [n for n in vars(TensorMemory) if not n.startswith("_")]
    assert {"size", "offset", "fd", "flags", "array", "view", "sync", "destroy", "check_alive"} <= set(members)
    for cls in (TensorMem, NpuTensorMem):
        assert [n for n in members if not hasattr(cls, n)] == [], cls
    mem = ctx.create_mem(16)
    assert isinstance(mem, TensorMemory)
    mem.destroy()
    with pytest.raises(InvalidParamError, match="check: this tensor memory was destroyed"):
        mem.check_alive("check")


def test_buffer_protocol_and_views_share_the_memory(ctx):
    mem = ctx.create_mem(64)
    a = mem.array(np.float32, (4, 4))
    assert a.shape == (4, 4) and a.flags.writeable and not a.flags.owndata
    a[1, 2] = 3.5
    mv = memoryview(mem)
    assert np.frombuffer(mv, np.float32)[6] == 3.5
    mv[0:4] = np.float32(-1).tobytes()
    assert a[0, 0] == -1
    b = mem.array(np.uint8, offset=8)  # 1-D over the rest
    assert b.shape == (56,) and np.shares_memory(a, b)
    b[:] = 7
    assert a[2, 0] == np.frombuffer(bytes([7] * 4), np.float32)[0]
    # virt_addr is where the views are
    assert mem.virt_addr == a.ctypes.data == ctypes.addressof(ctypes.c_char.from_buffer(mem))
    del a, b, mv
    mem.destroy()


def test_view_skips_row_padding(ctx):
    attr = rknnlite.TensorAttr(0, "x", (1, 2, 3, 2), rknnlite.TensorFormat.NHWC, TensorType.UINT8, w_stride=4)
    assert attr.size_with_stride == 16
    mem = ctx.create_mem(attr.size_with_stride)
    v = mem.view(attr)
    assert v.shape == (1, 2, 3, 2) and v.strides == (16, 8, 2, 1)
    v[...] = np.arange(12, dtype=np.uint8).reshape(1, 2, 3, 2) + 1
    rows = mem.array(np.uint8, (2, 4, 2))
    np.testing.assert_array_equal(rows[:, :3], v[0])
    assert not rows[:, 3].any()  # padding pixels untouched


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "8", None])
def test_bad_size(ctx, size):
    with pytest.raises(InvalidParamError, match="mem size must be an int >= 1"):
        ctx.create_mem(size)
    assert ctx.create_mem(8).size == 8  # the context stays usable


@pytest.mark.parametrize("flags, match", [
    (8, "unknown bits"), (-1, "unknown bits"), (MemAllocFlag.CACHEABLE | MemAllocFlag.NON_CACHEABLE, "exclude"),
    ("cacheable", "must be MemAllocFlag bits"), (1.0, "must be MemAllocFlag bits"),
])
def test_bad_flags(ctx, flags, match):
    with pytest.raises(InvalidParamError, match=match):
        ctx.create_mem(16, flags)


def test_memory_that_cannot_be_mapped_is_a_memory_error(ctx):
    with pytest.raises(RKNNMemoryError, match="cannot allocate"):
        ctx.create_mem(1 << 62)


@memfd_only
def test_create_mem_has_an_fd_closed_by_destroy(ctx):
    mem = ctx.create_mem(4096)
    assert mem.fd >= 0 and os.fstat(mem.fd).st_size == 4096
    os.pwrite(mem.fd, b"abc", 10)  # the fd is the memory
    assert bytes(mem[10:13]) == b"abc"
    fd = mem.fd
    mem.destroy()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_anonymous_memory_where_memfd_is_missing(ctx, monkeypatch):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    mem = ctx.create_mem(64)
    assert mem.fd == -1
    mem.array(np.uint8)[:] = 3
    assert bytes(memoryview(mem)) == bytes([3] * 64)
    mem.destroy()


# -- create_mem_from_fd --------------------------------------------------------------------------


@memfd_only
def test_fd_is_mapped_not_copied(ctx, memfd):
    fd = memfd(8192)
    mem = ctx.create_mem_from_fd(fd, 8192)
    assert (mem.fd, mem.size, mem.offset, mem.flags) == (fd, 8192, 0, TensorMemFlag.FROM_FD)
    view = mem.array(np.uint8)
    os.pwrite(fd, b"\x01\x02\x03", 100)  # written through the fd after mapping
    assert view[100:103].tolist() == [1, 2, 3]
    view[200] = 9  # written through the mapping
    assert os.pread(fd, 1, 200) == b"\x09"
    mem.destroy()
    assert os.fstat(fd).st_size == 8192  # the fd stays the caller's


@memfd_only
def test_fd_offset_starts_views_there(ctx, memfd):
    fd = memfd(4096)
    os.pwrite(fd, np.arange(4, dtype=np.float32).tobytes(), 256)
    mem = ctx.create_mem_from_fd(fd, 4096, offset=256)
    assert mem.offset == 256
    np.testing.assert_array_equal(mem.array(np.float32, (4,)), [0, 1, 2, 3])
    assert mem.virt_addr + 256 == mem.array(np.uint8).ctypes.data
    with pytest.raises(InvalidParamError, match="do not fit"):
        mem.array(np.float32, (1000,))  # 4000 bytes > 4096 - 256


@memfd_only
def test_fd_errors(ctx, memfd):
    fd = memfd(100)
    with pytest.raises(InvalidParamError, match="fd 100000 is not an open file descriptor"):
        ctx.create_mem_from_fd(100000, 100)
    with pytest.raises(InvalidParamError, match="fd 1099511627776 is not an open file descriptor: too large"):
        ctx.create_mem_from_fd(2**40, 100)  # OverflowError from os.fstat before
    with pytest.raises(InvalidParamError, match="has 100 bytes, fewer than size 4096"):
        ctx.create_mem_from_fd(fd, 4096)
    with pytest.raises(InvalidParamError, match="offset 100 must be smaller than size 100"):
        ctx.create_mem_from_fd(fd, 100, offset=100)
    with pytest.raises(InvalidParamError, match="fd must be an int >= 0"):
        ctx.create_mem_from_fd(-1, 100)
    r, w = os.pipe()
    try:
        with pytest.raises(InvalidParamError, match=f"cannot map fd {r}"):
            ctx.create_mem_from_fd(r, 100)
    finally:
        os.close(r)
        os.close(w)
    assert ctx.create_mem_from_fd(fd, 100).size == 100


def test_read_only_file_cannot_be_mapped(ctx, tmp_path):
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(64))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(InvalidParamError, match="cannot map fd"):
            ctx.create_mem_from_fd(fd, 64)
    finally:
        os.close(fd)


# -- destroy and lifetimes -----------------------------------------------------------------------


def test_destroy_is_idempotent_and_later_use_raises(ctx):
    mem = ctx.create_mem(32)
    mem.destroy()
    mem.destroy()
    assert mem.destroyed and "destroyed" in repr(mem)
    for call in (lambda: mem.array(np.uint8), lambda: mem.view(ctx.inputs[0]), lambda: mem.sync(MemSyncMode.TO_DEVICE),
                 lambda: mem.virt_addr, lambda: ctx.set_io_mem(mem, ctx.inputs[0])):
        with pytest.raises(InvalidParamError, match=r"destroyed \(destroy\(\) was called\)"):
            call()


def test_context_manager_and_close_destroy(ctx):
    with ctx.create_mem(16) as mem:
        mem.array(np.uint8)[:] = 1
    assert mem.destroyed
    other = ctx.create_mem(16)
    other.close()
    assert other.destroyed


def test_tensor_mem_is_made_by_a_context_only(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(10))
    with open(path, "r+b") as f, pytest.raises(TypeError, match="Context.create_mem"):
        TensorMem(f.fileno(), 1 << 20)  # unchecked, touching it past the file's end would crash


def test_destroy_while_another_thread_runs_is_safe(context_models):
    ctx, (a, b, y) = bound_add_context(context_models["add"])
    errors, done = [], threading.Event()

    def loop():
        while not done.is_set():
            try:
                ctx.run_bound()
            except InvalidParamError as e:  # once destroyed: "not bound"
                errors.append(str(e))
                return

    worker = threading.Thread(target=loop)
    worker.start()
    view = a.array(np.float32)
    a.destroy()
    worker.join(timeout=60)
    done.set()
    worker.join()
    assert errors and "not bound: input 0 ('a')" in errors[0]
    view[:] = 1  # still valid
    ctx.close()


def test_cannot_resize_or_pickle(ctx):
    mem = ctx.create_mem(16)
    with pytest.raises(InvalidParamError, match="cannot be resized"):
        mem.resize(32)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(mem)


def test_a_numpy_view_keeps_the_memory_alive(ctx):
    mem = ctx.create_mem(1 << 16)
    ref = weakref.ref(mem)
    view = mem.array(np.int32)
    view[:] = np.arange(view.size)
    del mem
    gc.collect()
    assert ref() is not None  # the view holds it
    np.testing.assert_array_equal(view, np.arange(view.size))
    view += 1  # still valid memory
    assert view[-1] == view.size
    del view
    gc.collect()
    assert ref() is None


def test_a_view_outlives_destroy_and_context_close(ctx):
    mem = ctx.create_mem(4096)
    view = mem.array(np.uint8)
    view[:] = 5
    mem.destroy()
    assert view.sum() == 5 * 4096  # no crash, the mapping is still there
    view[:] = 6
    mem2 = ctx.create_mem(4096)
    view2 = mem2.array(np.uint8)
    ctx.close()
    assert mem2.destroyed
    view2[:] = 1
    assert view2.sum() == 4096


def test_dropping_memory_without_destroy_releases_its_fd(ctx):
    gc.collect()
    before = open_fds()
    for _ in range(50):
        ctx.create_mem(4096).array(np.uint8)[:] = 1
    gc.collect()
    assert open_fds() == before
    for _ in range(50):
        mem = ctx.create_mem(4096)
        mem.destroy()
    del mem  # the mapping (and the fd mmap keeps for it) goes with the last reference
    assert open_fds() == before


def test_closed_context_raises_context_invalid(ctx, context_models):
    mem = ctx.create_mem(64)
    ctx.close()
    ctx.close()  # idempotent
    assert mem.destroyed  # the context's memory goes with it
    mem.destroy()  # and destroying it again is fine
    with pytest.raises(ContextInvalidError, match="closed"):
        ctx.create_mem(16)
    with pytest.raises(ContextInvalidError, match="closed"):
        ctx.create_mem_from_fd(0, 16)
    with pytest.raises(ContextInvalidError, match="closed"):
        ctx.run_bound()
    with pytest.raises(ContextInvalidError, match="closed"):
        with rknnlite.Context(context_models["add"]) as other:
            ctx.set_io_mem(other.create_mem(16), ctx.inputs[0])


def bound_add_context(model):
    ctx = rknnlite.Context(model)
    mems = [ctx.create_mem(a.size_with_stride) for a in ctx.inputs + ctx.outputs]
    for mem, attr in zip(mems, ctx.inputs + ctx.outputs):
        ctx.set_io_mem(mem, attr)
    return ctx, mems


def test_every_release_order_is_safe(context_models):
    steps = ["destroy a", "destroy b", "destroy y", "close", "drop views"]
    for order in itertools.permutations(steps):
        ctx, (a, b, y) = bound_add_context(context_models["add"])
        views = [m.array(np.float32, (1, 4)) for m in (a, b, y)]
        views[0][:] = 1
        views[1][:] = 2
        ctx.run_bound()
        assert views[2].tolist() == [[3, 3, 3, 3]]
        mems = {"a": a, "b": b, "y": y}
        for step in order:
            if step == "close":
                ctx.close()
            elif step == "drop views":
                views = []
            else:
                mems[step[-1]].destroy()
            if not ctx.closed and any(m.destroyed for m in mems.values()):
                with pytest.raises(InvalidParamError, match="not bound"):
                    ctx.run_bound()
            for v in views:
                v += 0  # views stay valid memory
        assert all(m.destroyed for m in mems.values())
        with pytest.raises(ContextInvalidError):
            ctx.run_bound()
        gc.collect()


def test_memory_of_another_context_survives_its_user_closing(context_models):
    owner = rknnlite.Context(context_models["add"])
    user, _ = bound_add_context(context_models["add"])
    shared = owner.create_mem(16)
    user.set_io_mem(shared, user.inputs[0])
    user.close()
    assert not shared.destroyed  # it belongs to `owner`
    shared.array(np.float32)[:] = 1
    owner.close()
    assert shared.destroyed


def test_dup_has_its_own_bindings(context_models):
    ctx, (a, b, y) = bound_add_context(context_models["add"])
    twin = ctx.dup()
    with pytest.raises(InvalidParamError, match=r"not bound: input 0 \('a'\), input 1 \('b'\), output 0 \('y'\)"):
        twin.run_bound()
    ta, tb, ty = (twin.create_mem(16) for _ in range(3))
    for mem, attr in zip((ta, tb, ty), twin.inputs + twin.outputs):
        twin.set_io_mem(mem, attr)
    a.array(np.float32)[:] = 1
    b.array(np.float32)[:] = 2
    ta.array(np.float32)[:] = 10
    tb.array(np.float32)[:] = 20
    ctx.run_bound()
    twin.run_bound()
    assert y.array(np.float32).tolist() == [3] * 4 and ty.array(np.float32).tolist() == [30] * 4
    twin.close()
    assert ta.destroyed and not a.destroyed  # closing the twin leaves the original's memory alone
    ctx.run_bound()
    ctx.close()
