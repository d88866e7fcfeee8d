"""examples/camera_pipeline.py (issue 8 point 5) on the software backend: synthetic frames
(OpenCV is optional), letterbox, inference on the bundled demo model, top-k, live FPS."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import rknnlite
from conftest import REPO, THREAD_LIMIT  # noqa: E402
from rknnlite.demo import DEMO_MODEL_PATH

EXAMPLE = REPO / "examples" / "camera_pipeline.py"
LINE = re.compile(r"^frame +(\d+)  top-(\d+) (.*)$")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("camera_pipeline", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                          timeout=4 * THREAD_LIMIT, env=env)


def test_synthetic_run_prints_every_frame_in_order_with_the_right_top_k(example):
    done = run_example("--frames", "40", "--topk", "4", "--fps-every", "0")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("model demo.rknn (software backend), input 32x32")
    results = [LINE.match(ln) for ln in lines if ln.startswith("frame")]
    assert [int(m.group(1)) for m in results] == list(range(40))
    # the printed classes are those of a direct run on the same letterboxed frames
    frames = list(example.synthetic_frames(40))
    with rknnlite.Context(str(DEMO_MODEL_PATH)) as ctx:
        for m, frame in zip(results, frames):
            printed = [(int(c), float(p)) for c, p in (pair.split(":") for pair in m.group(3).split())]
            expected = example.top_k(ctx.run([example.letterbox(frame, (32, 32))]), 4)
            assert [c for c, _ in printed] == [c for c, _ in expected]
            np.testing.assert_allclose([p for _, p in printed], [p for _, p in expected], atol=5e-4)
    assert any(re.match(r"^fps \d+\.\d  \(done \d+, dropped 0\)$", ln) for ln in lines)  # live FPS
    assert re.match(r"^fps \d+\.\d overall; 40 completed, 0 failed, 0 dropped, 0 cancelled of 40;", lines[-1])


def test_a_file_source_without_opencv_says_what_is_missing():
    try:
        import cv2  # noqa: F401
        pytest.skip("OpenCV is installed: the file source would be read")
    except ImportError:
        pass
    done = run_example("--source", "missing.mp4", "--frames", "3")
    assert done.returncode != 0 and "needs OpenCV" in done.stderr


def test_a_missing_model_is_a_usage_error():
    done = run_example("--model", "/nonexistent/model.rknn", "--frames", "3")
    assert done.returncode == 2 and "model not found" in done.stderr


def test_letterbox_keeps_the_aspect_ratio_and_pads_with_grey(example):
    frame = np.zeros((40, 80, 3), np.uint8)
    frame[..., 0] = 10   # B
    frame[..., 2] = 200  # R
    out = example.letterbox(frame, (32, 32))
    assert out.shape == (1, 32, 32, 3) and out.dtype == np.uint8  # NHWC, as the model's input attribute
    # 80x40 scaled by 0.4 -> 32x16, centred: rows 8..23 hold the picture, RGB order
    assert (out[0, :8] == example.GREY).all() and (out[0, 24:] == example.GREY).all()
    assert (out[0, 8:24, :, 0] == 200).all() and (out[0, 8:24, :, 2] == 10).all() and (out[0, 8:24, :, 1] == 0).all()


def test_top_k_sorts_by_probability(example):
    assert example.top_k([np.array([[0.1, 0.5, 0.15, 0.25]], np.float32)], 2) == [(1, 0.5), (3, 0.25)]
