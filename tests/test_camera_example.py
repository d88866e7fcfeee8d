"""examples/camera_pipeline.py on the software backend: a synthetic clip through letterbox,
the built-in YOLOv8-layout detector and decode + NMS; the annotated frames it writes show
each box where the decoder put it, around the square of its colour."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import rknnlite
from conftest import REPO, THREAD_LIMIT  # noqa: E402
from rknnlite.vision import DetectionStages, YOLOv8, box_iou

EXAMPLE = REPO / "examples" / "camera_pipeline.py"
FRAMES = 6


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("camera_pipeline", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                          timeout=8 * THREAD_LIMIT, env=env)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("camera")
    done = run_example("--frames", str(FRAMES), "--out", str(out), "--json", str(out / "dets.jsonl"),
                       "--fps-every", "0")
    assert done.returncode == 0, done.stderr
    return done, out


def squares(frame):
    """The true boxes of the synthetic squares: {class: (x1, y1, x2, y2)}."""
    truth = {}
    for c in range(3):
        mask = (frame[..., c] == 230) & (frame[..., (c + 1) % 3] == 30)
        ys, xs = np.nonzero(mask)
        truth[c] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
    return truth


def test_the_run_prints_frames_in_order_live_fps_and_per_stage_times(run):
    done, _ = run
    lines = done.stdout.splitlines()
    assert lines[0].startswith("model squares.rknn (software backend), input 256x320")
    ids = [int(m.group(1)) for m in (re.match(r"^frame +(\d+)  (\d+) detection", ln) for ln in lines) if m]
    assert ids == list(range(FRAMES))
    assert any(re.match(r"^fps \d+\.\d  \(done \d+, dropped 0\)$", ln) for ln in lines)  # live FPS
    assert re.match(rf"^fps \d+\.\d overall; {FRAMES} completed, 0 failed, 0 dropped, 0 cancelled of {FRAMES}; "
                    r"latency p50 .*; letterbox p50 \d+\.\d\d ms, inference p50 \d+\.\d\d ms, decode\+NMS p50 "
                    rf"\d+\.\d\d ms, draw\+write \d+\.\d\d ms/frame; {FRAMES} PNG frames to ", lines[-1])


def test_boxes_are_drawn_where_the_decoder_said_around_the_squares(run, example):
    _, out = run
    records = [json.loads(line) for line in (out / "dets.jsonl").read_text().splitlines()]
    assert [r["frame_id"] for r in records] == list(range(FRAMES))
    found = 0
    for frame, record in zip(example.synthetic_frames(FRAMES), records):
        picture = example.read_png(str(out / f"frame_{record['frame_id']:05d}.png"))
        assert picture.shape == frame.shape
        truth = squares(frame)
        # which box's outline each pixel shows, painted in order with plain loops (a later
        # box paints over an earlier one); label text (above each box) hides pixels
        owner = np.full(frame.shape[:2], -1)
        hidden = np.zeros(frame.shape[:2], bool)
        for i, det in enumerate(record["detections"]):
            x1, y1, x2, y2 = (int(np.floor(v)) for v in det["box"])
            for y in range(max(y1, 0), min(y2 + 1, frame.shape[0])):
                for x in range(max(x1, 0), min(x2 + 1, frame.shape[1])):
                    if y < y1 + 2 or y > y2 - 2 or x < x1 + 2 or x > x2 - 2:
                        owner[y, x] = i
            hidden[max(y1 - 12, 0):max(y1, 0), max(x1, 0):x1 + 90] = True
        for i, det in enumerate(record["detections"]):
            mine = (owner == i) & ~hidden
            assert mine.sum() > 100
            assert (picture[mine] == example.SHAPE_PALETTE[det["class_id"]]).all(), det
            assert det["label"] == example.SHAPE_CLASSES[det["class_id"]]
            # and it sits on the square of its colour
            iou = box_iou(np.array([det["box"]]), np.array([truth[det["class_id"]]]))[0, 0]
            assert iou > 0.5, (det, truth)
            found += 1
        assert not (picture == frame).all()
    assert found >= 2 * FRAMES  # most squares are found in most frames


def test_the_written_detections_are_the_decoders_on_each_frame(run, example, tmp_path):
    _, out = run
    records = [json.loads(line) for line in (out / "dets.jsonl").read_text().splitlines()]
    path = example.build_squares_detector(str(tmp_path / "squares.rknn"))
    with rknnlite.Context(path) as ctx:
        stages = DetectionStages.from_context(YOLOv8(num_classes=3, input_size=(256, 320)), ctx)
        for frame, record in zip(example.synthetic_frames(FRAMES), records):
            dets = stages(ctx, frame)
            assert len(dets) == len(record["detections"])
            np.testing.assert_allclose([d["box"] for d in record["detections"]], dets.boxes.reshape(-1, 4),
                                       atol=0.01)
            assert [d["class_id"] for d in record["detections"]] == dets.class_ids.tolist()


def test_png_round_trip(example, tmp_path):
    img = np.random.default_rng(0).integers(0, 255, (7, 5, 3), np.uint8)
    example.write_png(str(tmp_path / "x.png"), img)
    np.testing.assert_array_equal(example.read_png(str(tmp_path / "x.png")), img)
    pil = pytest.importorskip("PIL.Image")
    np.testing.assert_array_equal(np.asarray(pil.open(tmp_path / "x.png")), img)


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
