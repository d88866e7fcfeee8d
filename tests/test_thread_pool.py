"""The native worker pool (``rknnlite._native.thread_pool``): compiled kernels and Python
bodies on the same worker threads, across threads, forks and interpreter exit."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from rknnlite._native import conv_kernels as ck
from rknnlite._native.thread_pool import NativePool
from rknnlite.backends.software.parallel import WorkerPool



def needs_gemm(test):
    """A gather-GEMM test: run on each micro-kernel path this CPU executes, skipped without one."""
    test = pytest.mark.usefixtures("micro_kernel_isa")(test)
    return pytest.mark.skipif(ck.gemm_isa() == 0, reason="no gather-GEMM micro-kernel on this CPU")(test)


def covered(pool: NativePool, n: int) -> list:
    seen = []
    lock = threading.Lock()

    def body(a, b):
        with lock:
            seen.extend(range(a, b))

    pool.map_ranges(n, body)
    return sorted(seen)


def test_counts_follow_the_thread_slots():
    pool = NativePool(2)
    try:
        pool.take_counts()
        pool.map_ranges(2, lambda a, b: None)  # one range per thread: the worker runs range 1
        assert pool.take_counts() == [1, 1]
        assert pool.take_counts() == [0, 0]
        pool.map_ranges(1, lambda a, b: None)  # one piece: the caller alone
        assert pool.take_counts() == [1, 0]
    finally:
        pool.close()


@pytest.mark.parametrize("spin_ns", [0, 10_000_000])
def test_the_join_waits_for_every_worker_range_polling_or_asleep(spin_ns):
    """The caller ends its ranges first (the worker's range is slower) and waits for the
    worker: by polling (a long spin) or asleep on the join (no spin); either way the run
    returns only once every range is done, run after run."""
    import time

    pool = NativePool(2, spin_ns=spin_ns)
    try:
        for _ in range(20):
            done = []

            def body(a, b):
                if a > 0:  # the worker's range (the caller takes range 0)
                    time.sleep(0.002)
                done.append((a, b))

            pool.map_ranges(2, body)
            assert sorted(done) == [(0, 1), (1, 2)]
        assert pool.take_counts() == [20, 20]
    finally:
        pool.close()


def test_one_thread_pool_runs_everything_on_the_caller():
    pool = NativePool(1)
    seen = []
    pool.map_ranges(10, lambda a, b: seen.append((a, b, threading.get_ident())))
    assert seen == [(0, 10, threading.get_ident())]
    assert WorkerPool(1).handle is None  # compiled kernels then run on their caller


def test_concurrent_callers_share_one_pool():
    """Runs from several threads at once: each completes, every index once, none waits on another's work."""
    pool = NativePool(2)
    errors = []

    def caller(k):
        try:
            for n in range(1, 60):
                assert covered(pool, n + k) == list(range(n + k))
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    pool.close()
    assert not errors and not any(t.is_alive() for t in threads)


def _child(queue):
    pool = NativePool(2)
    got = covered(pool, 50)
    pool.map_ranges(2, lambda a, b: None)
    queue.put((got == list(range(50)), pool.take_counts()))


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_a_forked_child_starts_its_own_workers():
    """Workers do not survive fork: a pool used before the fork starts new ones in the child."""
    pool = NativePool(2)
    assert covered(pool, 20) == list(range(20))  # the parent's workers are running
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child():
        ok = covered(pool, 40) == list(range(40))
        pool.take_counts()
        pool.map_ranges(2, lambda a, b: None)
        queue.put((ok, pool.take_counts()))

    proc = ctx.Process(target=child)
    proc.start()
    ok, counts = queue.get(timeout=60)
    proc.join(60)
    pool.close()
    assert proc.exitcode == 0 and ok
    assert counts == [1, 1]  # a worker of the child's own ran range 1


LIVE_AT_EXIT = ("from rknnlite._native.thread_pool import NativePool\n"
                "p = NativePool(3)\n"
                "p.map_ranges(30, lambda a, b: None)\n"
                "q = NativePool(2)\n"
                "q.handle\n")
# atexit runs its hooks last-registered first: this one runs after thread_pool's own, so
# its pool's workers start after every pool was stopped, and are still there at finalization
STARTED_AFTER_THE_EXIT_HOOK = ("import atexit\n"
                               "def late():\n"
                               "    from rknnlite._native.thread_pool import NativePool\n"
                               "    global r\n"
                               "    r = NativePool(3)\n"
                               "    r.map_ranges(30, lambda a, b: None)\n"
                               "atexit.register(late)\n" + LIVE_AT_EXIT)


@pytest.mark.parametrize("code", [LIVE_AT_EXIT, STARTED_AFTER_THE_EXIT_HOOK],
                         ids=["live pools", "workers started after the exit hook"])
def test_interpreter_exits_with_a_live_pool(code):
    # CPython 3.14 parks for good a thread that takes the GIL once finalization began: a
    # worker dropping its thread state then, and a join waiting for it, hung the exit
    for _ in range(3):  # the hang depended on the workers' timing
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()


@needs_gemm
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gather_gemm_items_give_the_serial_result(threads):
    rng = np.random.default_rng(threads)
    K, M, N = 40, 50, 70
    a = rng.standard_normal((M, K)).astype(np.float32)
    P = rng.standard_normal(K * N).astype(np.float32)
    off = (np.arange(K) * N).astype(np.int32)
    idx = np.arange(N, dtype=np.int32)
    packs = ck.pack_weights(a)
    nr = ck.panel_shape()[1]
    ncb = nr
    one = np.zeros((M, N), np.float32)
    ck.gather_gemm(P, off, idx, packs, M, None, one, np.zeros(K * ncb + 16, np.float32), K, ncb)
    np.testing.assert_allclose(one, a @ P.reshape(K, N), rtol=1e-4, atol=1e-4)
    pool = WorkerPool(threads)
    try:
        y = np.full((M, N), np.nan, np.float32)
        scratch = np.zeros(threads * (K * ncb + 16) + 16, np.float32)
        panels = packs.shape[0]
        parts = [(0, 1), (1, panels)] if panels > 1 else None
        pool.take_counts()
        ck.gather_gemm_items(pool.handle, P, off, idx, packs, M, None, y, scratch, K, ncb, row_parts=parts)
        np.testing.assert_array_equal(y, one)
        if threads > 1:  # one thread: no pool, the caller runs the items itself
            assert sum(pool.take_counts()) == (len(parts) if parts else 1) * -(-N // ncb)
    finally:
        pool.close()


@needs_gemm
def test_gather_gemm_items_refuse_bad_work():
    K, M, N = 8, 8, 16
    P = np.zeros(K * N, np.float32)
    off = (np.arange(K) * N).astype(np.int32)
    idx = np.arange(N, dtype=np.int32)
    packs = ck.pack_weights(np.ones((M, K), np.float32))
    ncb = ck.panel_shape()[1]
    y = np.zeros((M, N), np.float32)
    pool = WorkerPool(2)
    try:
        with pytest.raises(ValueError, match="outside panels"):
            ck.gather_gemm_items(pool.handle, P, off, idx, packs, M, None, y, np.zeros(4096, np.float32), K, ncb,
                                 row_parts=[(0, packs.shape[0] + 1)])
        with pytest.raises(ValueError, match="row parts"):
            ck.gather_gemm_items(None, P, off, idx, packs, M, None, y, np.zeros(4096, np.float32), K, ncb,
                                 row_parts=[])
        with pytest.raises(ValueError, match="scratch buffer too small"):
            ck.gather_gemm_items(pool.handle, P, off, idx, packs, M, None, y, np.zeros(K * ncb, np.float32), K,
                                 ncb)
        with pytest.raises(ValueError, match="finish needs transposed tiles"):
            ck.gather_gemm_items(None, P, off, idx, packs, M, None, y, np.zeros(4096, np.float32), K, ncb,
                                 finish=(y, None, None))
        with pytest.raises(TypeError, match="WorkerPool.handle capsule"):
            ck.gather_gemm_items(object(), P, off, idx, packs, M, None, y, np.zeros(4096, np.float32), K, ncb)
        # still usable
        ck.gather_gemm_items(pool.handle, P, off, idx, packs, M, None, y, np.zeros(4096, np.float32), K, ncb)
    finally:
        pool.close()


_CLOSE_WHILE_RUNNING = """
import sys
import threading

sys.path.insert(0, {tests!r})
from rknnlite._native.thread_pool import NativePool
from test_thread_pool import covered

pool = NativePool(2)
stop = threading.Event()
errors, done = [], []


def runner():
    try:
        while not stop.is_set():
            assert covered(pool, 2) == [0, 1]  # one range per thread: the caller waits for the worker's
            assert covered(pool, 37) == list(range(37))
            done.append(1)
    except BaseException as e:
        errors.append(e)


thread = threading.Thread(target=runner)
thread.start()
for _ in range(300):
    pool.close()
stop.set()
thread.join()
pool.close()
assert not errors and done, errors
"""


def test_close_while_another_thread_runs():
    """close() from one thread while another keeps running: every run completes (serially
    while the workers leave, on new workers after).  In a child process, so that a
    deadlock fails the test instead of hanging the suite."""
    code = _CLOSE_WHILE_RUNNING.format(tests=os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()


@needs_gemm
def test_gather_gemm_items_take_any_number_of_row_parts():
    """One row part per weight panel (more parts than a small fixed table would hold: many threads
    on a tall layer), each computed as the whole GEMM does."""
    rng = np.random.default_rng(5)
    mr, nr = ck.panel_shape()
    K, M, N = 8, 300 * mr, 2 * nr
    a = rng.standard_normal((M, K)).astype(np.float32)
    P = rng.standard_normal(K * N).astype(np.float32)
    off = (np.arange(K) * N).astype(np.int32)
    idx = np.arange(N, dtype=np.int32)
    packs = ck.pack_weights(a)
    one = np.zeros((M, N), np.float32)
    ck.gather_gemm(P, off, idx, packs, M, None, one, np.zeros(K * N + 16, np.float32), K, N)
    pool = WorkerPool(2)
    try:
        y = np.full((M, N), np.nan, np.float32)
        parts = [(p, p + 1) for p in range(packs.shape[0])]
        ck.gather_gemm_items(pool.handle, P, off, idx, packs, M, None, y, np.zeros(2 * (K * N + 16) + 16, np.float32),
                             K, N, row_parts=parts)
        np.testing.assert_array_equal(y, one)
    finally:
        pool.close()
