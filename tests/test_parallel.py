"""Intra-op threading helper of the software backend."""

from __future__ import annotations

import threading

import pytest

from rknnlite.backends.software.executor import Executor
from rknnlite.backends.software.parallel import WorkerPool, current_threads, parallel_for, threads_from_env, using
from rknnlite.model.graph import Graph, Node


def covered(pool_threads: int, n: int, min_chunk: int = 1):
    seen, names = [], set()
    lock = threading.Lock()
    barrier_hit = threading.Event()

    def body(start, stop):
        with lock:
            seen.extend(range(start, stop))
            names.add(threading.current_thread().name)
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


def test_work_runs_on_worker_threads():
    _, names = covered(2, 100)
    assert any(name.startswith("rknnlite-worker") for name in names)
    assert threading.current_thread().name in names


def test_min_chunk_limits_the_split():
    _, names = covered(4, 10, min_chunk=10)
    assert names == {threading.current_thread().name}


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


@pytest.mark.parametrize("value, expected", [("3", 3), ("0", 1), ("-2", 1), ("many", 1), ("", 1)])
def test_env_variable(monkeypatch, value, expected):
    monkeypatch.setenv("RKNNLITE_NUM_THREADS", value)
    assert threads_from_env() == expected


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
