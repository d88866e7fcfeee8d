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
* Immich's machine-learning server (``app/sessions/rknn``): each of N ``RKNNLite`` objects is
  quieted with ``rknn_lite.rknn_log.logger.setLevel(logging.ERROR)`` before ``load_rknn`` and
  ``init_runtime(core_mask=RKNNLite.NPU_CORE_AUTO)``; a request is ``put`` to a
  ``ThreadPoolExecutor`` and its future read back by ``get``, running
  ``inference(inputs=..., data_format="nchw")``. Its face detector answers with 2-D outputs
  (scores ``(N, 1)``, boxes ``(N, 4)``), built by its exporter (``export/.../rknn.py``) with the
  toolkit: ``config(target_platform, dynamic_input=[[shape]], disable_rules=[...],
  enable_flash_attention=False, model_pruning=True)``, ``load_onnx(model=...)``,
  ``build(do_quantization=False)``, ``export_rknn``.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from queue import Queue

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

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


def _face_detector_onnx(path):
    """A detector shaped like Immich's SCRFD export: dynamic batch and size, a strided conv, then
    per-anchor scores (N, 1) and boxes (N, 4) as 2-D outputs."""
    rng = np.random.default_rng(3)
    consts = [numpy_helper.from_array((rng.standard_normal((5, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
              numpy_helper.from_array(np.array([-1, 1], np.int64), "rows1"),
              numpy_helper.from_array(np.array([-1, 4], np.int64), "rows4")]
    nodes = [helper.make_node("Conv", ["input.1", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Split", ["c"], ["s", "b"], axis=1, split=[1, 4]),
             helper.make_node("Sigmoid", ["s"], ["p"]),
             helper.make_node("Transpose", ["p"], ["pt"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["pt", "rows1"], ["score_8"]),
             helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["bt", "rows4"], ["bbox_8"])]
    graph = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("input.1", TensorProto.FLOAT,
                                                                           ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                               for n in ("score_8", "bbox_8")], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    onnx.save(model, str(path))


@pytest.fixture()
def quiet_api_logger():
    """Immich sets the level of the logger every RKNNLite shares: put it back afterwards."""
    logger = logging.getLogger("rknnlite.api")
    yield logger
    logger.setLevel(logging.NOTSET)


def test_immichs_exporter_and_pool(tmp_path, quiet_api_logger, capsys):
    from rknnlite.toolkit import RKNN

    source, exported = tmp_path / "model.onnx", tmp_path / "rknpu" / "rk3588" / "model.rknn"
    _face_detector_onnx(source)
    rknn = RKNN(verbose=False)
    assert rknn.config(target_platform="rk3588", dynamic_input=[[[1, 3, 32, 32]]],
                       disable_rules=["fuse_matmul_softmax_matmul_to_sdpa"], enable_flash_attention=False,
                       model_pruning=True) == 0
    assert rknn.load_onnx(model=source.as_posix()) == 0
    assert rknn.build(do_quantization=False) == 0
    exported.parent.mkdir(parents=True)
    assert rknn.export_rknn(exported.as_posix()) == 0
    rknn.release()

    def init_rknn(path):
        lite = RKNNLite()
        lite.rknn_log.logger.setLevel(logging.ERROR)
        assert lite.load_rknn(path) == 0
        assert lite.init_runtime(core_mask=RKNNLite.NPU_CORE_AUTO) == 0
        return lite

    lites = [init_rknn(exported.as_posix()) for _ in range(2)]
    assert quiet_api_logger.level == logging.ERROR
    executor, futures = ThreadPoolExecutor(max_workers=len(lites)), Queue()
    rng = np.random.default_rng(11)
    images = [rng.random((1, 3, 32, 32), dtype=np.float32) for _ in range(6)]
    try:
        for n, image in enumerate(images):  # put, then get: Immich's RknnSession.run
            futures.put(executor.submit(lambda lite, x: lite.inference(inputs=x, data_format="nchw"),
                                        lites[n % len(lites)], [np.ascontiguousarray(image)]))
            results = futures.get().result()
            import onnxruntime as ort

            want = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, {"input.1": image})
            assert [r.shape for r in results] == [(256, 1), (256, 4)]
            for got, ref in zip(results, want):
                np.testing.assert_allclose(got, ref, atol=2e-2, rtol=2e-2)  # a float16 build
    finally:
        executor.shutdown()
        for lite in lites:
            lite.release()
    assert capsys.readouterr().out == ""


def test_rknn_log_level_holds_verbose_output_back(quiet_api_logger, capsys, monkeypatch):
    """``rknn_log.logger.setLevel`` quiets a verbose object's stderr too, as Lite2's logger level does."""
    monkeypatch.setattr(quiet_api_logger, "propagate", False)  # an application that shows no log itself
    loud = RKNNLite(verbose=True)
    assert "W RKNN: rknn-toolkit-lite2 version" in capsys.readouterr().err
    loud.rknn_log.logger.setLevel(logging.ERROR)
    assert loud.load_rknn("/nonexistent/model.rknn") == -1     # an error: still shown
    RKNNLite(verbose=True)                                      # its version line is a warning: held back
    err = capsys.readouterr().err
    assert "E RKNN: Invalid RKNN model path" in err and "W RKNN: rknn-toolkit-lite2 version" not in err
