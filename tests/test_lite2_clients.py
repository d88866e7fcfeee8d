"""RKNNLite as real clients call it, each result against a plain sequential run.

* The hand-written pool most RK3588 projects copy (leafqycc/rknn-multi-threaded's
  ``rknnpool.py`` and ``func.py``): one ``RKNNLite`` per NPU core
  (``init_runtime(core_mask=RKNNLite.NPU_CORE_0/1/2)``), frames submitted round-robin to a
  ``ThreadPoolExecutor`` with as many workers as objects, futures read back in order, each
  frame an ``(H, W, 3)`` picture without its batch axis (the pattern written for Lite2 1.x).
  Futures ``i`` and ``i + 3`` share an object and may run at once (a worker frees up before
  the other finishes), so one object is also called from several threads at the same time.
* Frigate NVR's RKNN detector (``frigate/detectors/detection_runners.py``): ``RKNNLite(verbose=
  False)``, ``init_runtime(core_mask=2**num_cores - 1)`` for 0 to 3 cores, NHWC uint8 frames,
  ``release()`` from ``__del__``; it expects nothing on stdout.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from queue import Queue

import numpy as np
import pytest

from rknnlite.api import RKNNLite
from rknnlite.demo import DEMO_MODEL_PATH

FRAMES = 48


@pytest.fixture()
def frames():
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in range(FRAMES)]


@pytest.fixture()
def expected(frames):
    lite = RKNNLite()
    assert lite.load_rknn(str(DEMO_MODEL_PATH)) == 0 and lite.init_runtime() == 0
    try:
        return [lite.inference(inputs=[f[None]]) for f in frames]
    finally:
        lite.release()


def _object_per_core(masks):
    pool = []
    for mask in masks:
        lite = RKNNLite()
        assert lite.load_rknn(str(DEMO_MODEL_PATH)) == 0
        assert lite.init_runtime(core_mask=mask) == 0
        pool.append(lite)
    return pool


def _same(got, want) -> bool:
    return got is not None and len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def test_one_object_per_core_in_a_thread_pool(frames, expected, caplog):
    pool = _object_per_core([RKNNLite.NPU_CORE_0, RKNNLite.NPU_CORE_1, RKNNLite.NPU_CORE_2])
    executor = ThreadPoolExecutor(max_workers=len(pool))
    futures: Queue = Queue()
    try:
        with caplog.at_level(logging.WARNING, logger="rknnlite"):
            for n, frame in enumerate(frames):
                futures.put(executor.submit(lambda lite, f: lite.inference(inputs=[f]), pool[n % len(pool)], frame))
            results = [futures.get().result() for _ in frames]
    finally:
        executor.shutdown()
        for lite in pool:
            lite.release()
    assert [n for n, (got, want) in enumerate(zip(results, expected)) if not _same(got, want)] == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_one_object_called_from_many_threads_at_once(frames, expected):
    (lite,) = _object_per_core([RKNNLite.NPU_CORE_0_1_2])
    results = [None] * len(frames)
    start = threading.Barrier(6)

    def worker(k):
        start.wait()
        for j in range(k, len(frames), 6):
            results[j] = lite.inference(inputs=[frames[j]])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lite.release()
    assert [j for j, (got, want) in enumerate(zip(results, expected)) if not _same(got, want)] == []


@pytest.mark.parametrize("num_cores", [0, 1, 2, 3])
def test_frigates_runner(frames, expected, capsys, num_cores):
    class Runner:  # the calling pattern of Frigate's RKNNModelRunner
        def __init__(self, path, core_mask):
            self.rknn = RKNNLite(verbose=False)
            if self.rknn.load_rknn(path) != 0 or self.rknn.init_runtime(core_mask=core_mask) != 0:
                raise RuntimeError("Failed to initialize RKNN runtime")

        def run(self, tensor):
            return self.rknn.inference(inputs=[tensor])

        def __del__(self):
            if self.rknn:
                self.rknn.release()

    runner = Runner(str(DEMO_MODEL_PATH), 2 ** num_cores - 1)
    results = [runner.run(f[None]) for f in frames[:8]]
    del runner
    assert all(_same(got, want) for got, want in zip(results, expected[:8]))
    assert capsys.readouterr().out == ""
