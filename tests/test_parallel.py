"""Intra-op threading helper of the software backend."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.parallel import (WorkerPool, current_threads, parallel_for, spin_from_env,
                                                 threads_from_env, using)
from rknnlite.model.graph import Graph, Node


def covered(pool_threads: int, n: int, min_chunk: int = 1):
    seen, names = [], set()
    lock = threading.Lock()
    barrier_hit = threading.Event()

    def body(start, stop):
        with lock:
            seen.extend(range(start, stop))
            names.add(threading.get_ident())
        barrier_hit.set()

    pool = WorkerPool(pool_threads)
    try:
        with using(pool):
            assert current_threads() == pool_threads
            parallel_for(n, body, min_chunk)
    finally:
        pool.close()
    return sorted(seen), names


@pytest.mark.parametrize("threads, n", [(1, 10), (2, 10), (3, 7), (4, 2), (2, 0)])
def test_every_index_once(threads, n):
    seen, _ = covered(threads, n)
    assert seen == list(range(n))


def _on_caller_and_worker(n, work):
    """``parallel_for(n)`` on a two-thread pool whose ranges both the caller and a worker take
    (the caller's range waits until a worker has run one); ``work()`` runs in every range.
    Returns the idents of the threads that ran ranges."""
    caller = threading.get_ident()
    idents = set()
    lock = threading.Lock()
    worker_ran = threading.Event()

    def body(start, stop):
        with lock:
            idents.add(threading.get_ident())
        work()
        if threading.get_ident() != caller:
            worker_ran.set()
        else:
            worker_ran.wait(10)

    pool = WorkerPool(2)
    try:
        with using(pool):
            parallel_for(n, body)
    finally:
        pool.close()
    return idents


def test_work_runs_on_worker_threads():
    """While the caller is busy in a range, a worker takes the others."""
    idents = _on_caller_and_worker(100, lambda: None)
    assert threading.get_ident() in idents and len(idents) == 2


def test_workers_run_under_the_callers_floating_point_settings():
    """numpy keeps error settings per thread: a worker must not warn where the caller would not."""
    seen = {}

    def work():
        seen[threading.get_ident()] = np.geterr()["over"]
        np.float32(3e38) * np.float32(10)  # overflow: warns under numpy's default settings

    with warnings.catch_warnings(), np.errstate(over="ignore"):
        warnings.simplefilter("error")
        _on_caller_and_worker(2, work)
    assert len(seen) == 2 and set(seen.values()) == {"ignore"}


def test_a_run_while_the_pool_is_busy_runs_on_its_own_caller():
    """Two threads sharing one pool: the second run, started while the first is in
    progress, runs every range on its own thread instead of waiting for the pool."""
    pool = WorkerPool(2)
    inside, release = threading.Event(), threading.Event()
    seen = []

    def block(start, stop):
        inside.set()
        release.wait(10)

    first = threading.Thread(target=lambda: pool.map_ranges(2, block))
    try:
        first.start()
        assert inside.wait(10)
        pool.map_ranges(100, lambda a, b: seen.append((a, b, threading.get_ident())))
        assert sorted(i for a, b, _ in seen for i in range(a, b)) == list(range(100))
        assert {t for _, _, t in seen} == {threading.get_ident()}
    finally:
        release.set()
        first.join(10)
        pool.close()


def test_min_chunk_limits_the_split():
    _, names = covered(4, 10, min_chunk=10)
    assert names == {threading.get_ident()}


def test_serial_outside_a_run():
    assert current_threads() == 1
    seen = []
    parallel_for(5, lambda a, b: seen.append((a, b)))
    assert seen == [(0, 5)]


def test_errors_propagate():
    pool = WorkerPool(2)

    def body(start, stop):
        if start > 0:
            raise ValueError("boom")

    with using(pool), pytest.raises(ValueError, match="boom"):
        parallel_for(10, body)
    pool.close()


def test_pool_usable_after_an_error_and_after_close():
    pool = WorkerPool(2)
    calls = []

    def bad(start, stop):
        raise RuntimeError("first")

    with using(pool):
        with pytest.raises(RuntimeError, match="first"):
            parallel_for(10, bad)
        parallel_for(10, lambda a, b: calls.append((a, b)))
        pool.close()
        parallel_for(10, lambda a, b: calls.append((a, b)))  # new workers start lazily
    pool.close()
    pool.close()  # idempotent
    assert sorted(i for a, b in calls for i in range(a, b)) == sorted(list(range(10)) * 2)


def test_ranges_are_shared_out_dynamically():
    """More ranges than threads (so a delayed thread holds the call up by one range only),
    each at least min_chunk long, together covering everything once."""
    seen = []
    lock = threading.Lock()

    def body(start, stop):
        with lock:
            seen.append((start, stop))

    pool = WorkerPool(2)
    try:
        with using(pool):
            parallel_for(1000, body)
            assert len(seen) == 2 * WorkerPool.CHUNKS_PER_THREAD
            seen.clear()
            parallel_for(50, body, min_chunk=20)
            assert len(seen) == 2 and all(b - a >= 20 for a, b in seen)
    finally:
        pool.close()
    assert sorted(i for a, b in seen for i in range(a, b)) == list(range(50))


def test_one_range_per_thread_when_there_are_no_more_pieces():
    """n <= threads: thread i (the caller is 0) runs range i, and the call waits for all."""
    runs = {}
    lock = threading.Lock()

    def body(start, stop):
        with lock:
            runs[(start, stop)] = threading.get_ident()

    pool = WorkerPool(3)
    try:
        with using(pool):
            parallel_for(3, body)
    finally:
        pool.close()
    assert sorted(runs) == [(0, 1), (1, 2), (2, 3)]
    assert runs[(0, 1)] == threading.get_ident()
    assert len({runs[(1, 2)], runs[(2, 3)], threading.get_ident()}) == 3


def test_nested_call_runs_serially():
    """A body calling parallel_for on the same pool (here: the caller's thread) runs the
    inner loop on its own thread instead of waiting for itself."""
    pool = WorkerPool(2)
    inner = []
    lock = threading.Lock()

    caller_ran = threading.Event()

    def body(start, stop):
        if threading.current_thread() is threading.main_thread():
            with using(pool):
                parallel_for(4, lambda a, b: inner.append((a, b, threading.current_thread().name)))
            caller_ran.set()
        else:
            caller_ran.wait(10)  # leave ranges to the caller

    try:
        with using(pool):
            parallel_for(10, body)
    finally:
        pool.close()
    with lock:
        assert inner and set(inner) == {(0, 4, threading.main_thread().name)}


@pytest.mark.parametrize("value, expected", [("3", 3), ("0", 1), ("-2", 1), ("many", 1), ("", 1)])
def test_env_variable(monkeypatch, value, expected):
    monkeypatch.setenv("RKNNLITE_NUM_THREADS", value)
    assert threads_from_env() == expected


@pytest.mark.parametrize("value, expected", [("250", 250_000), ("0", 0), ("-5", -1), ("soon", -1), ("", -1)])
def test_spin_env_variable(monkeypatch, value, expected):
    from rknnlite._native.thread_pool import SPIN_NS

    monkeypatch.setenv("RKNNLITE_SPIN_US", value)
    assert spin_from_env() == expected
    pool = WorkerPool(2)
    assert pool._native.spin_ns == (SPIN_NS if expected < 0 else expected)
    seen = []
    pool.map_ranges(10, lambda a, b: seen.extend(range(a, b)))  # works with any polling time
    pool.close()
    assert sorted(seen) == list(range(10))


def test_state_threads_follow_env_and_setter(monkeypatch):
    ex = Executor(Graph([Node("Relu", "r", ["x"], ["y"])], ["x"], ["y"]), "float32")
    monkeypatch.setenv("RKNNLITE_NUM_THREADS", "2")
    state = ex.new_state()
    assert state.pool.threads == 2
    state.set_threads(3)
    assert state.pool.threads == 3
    state.close()


@pytest.mark.parametrize("kernel_shape, size", [(1, 56), (3, 28), (3, 56), (7, 30)])
def test_conv_results_do_not_depend_on_thread_count(kernel_shape, size):
    import numpy as np

    rng = np.random.default_rng(kernel_shape)
    w = rng.standard_normal((64, 32, kernel_shape, kernel_shape)).astype(np.float32)
    pad = kernel_shape // 2
    graph = Graph([Node("Conv", "c", ["x", "w"], ["y"], {"pads": [pad] * 4})], ["x"], ["y"], {"w": w})
    ex = Executor(graph, "float32")
    x = rng.standard_normal((1, 32, size, size)).astype(np.float32)
    one, two = ex.new_state(threads=1), ex.new_state(threads=2)
    try:
        for _ in range(2):
            np.testing.assert_array_equal(two.run([x])[0], one.run([x])[0])
    finally:
        one.close()
        two.close()


def test_resnet50_max_pool_is_split_over_both_threads():
    """The 3x3/2 max pool of resnet50's stem (64x112x112, 802k elements) runs on every
    thread, with the one-thread result bit for bit."""
    import numpy as np

    from conv_threads import assert_every_thread_takes_part, run_kernel

    from rknnlite.backends.software.ops import KERNELS

    mp = KERNELS["MaxPool"]
    x = np.random.default_rng(0).standard_normal((1, 64, 112, 112)).astype(np.float32)
    attrs = mp.prepare({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "_num_outputs": 1}, [None])

    one = run_kernel(mp, [x], attrs, (1, 64, 56, 56), 1)
    assert not np.isnan(one).any()
    assert_every_thread_takes_part(mp, [x], attrs, (1, 64, 56, 56), one)
