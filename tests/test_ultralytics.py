"""Ultralytics drives RKNNLite: ``YOLO("<name>_rknn_model")`` predicts with this package.

Ultralytics' RKNN backend (``ultralytics/nn/backends/rknn.py``) refuses non-Rockchip hosts
(``is_rockchip()``: patched here, the only patch), checks that a distribution named
``rknn-toolkit-lite2`` is installed (satisfied by the marker distribution built from
``packaging/rknn-toolkit-lite2``, installed into a temporary directory), then uses
``rknnlite.api.RKNNLite``: ``load_rknn``, ``init_runtime()``, ``inference(inputs=[im])`` with
BHWC uint8 frames.  The model is a YOLOv8n built from its yaml (no weights download), exported
to ONNX by Ultralytics and converted by rknnlite's toolkit with the settings of Ultralytics'
own RKNN export (mean 0, std 255).  Skipped when ultralytics (and torch) are not installed:
they are optional and large (see docs/ultralytics.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

ultralytics = pytest.importorskip("ultralytics", reason="ultralytics is not installed (optional, large: torch)")
pytest.importorskip("onnx", reason="the export needs onnx")

SHIM = Path(__file__).resolve().parents[1] / "packaging" / "rknn-toolkit-lite2"


@pytest.fixture(scope="module")
def shim_site(tmp_path_factory):
    """A directory holding the installed marker distribution ``rknn-toolkit-lite2``."""
    target = tmp_path_factory.mktemp("shim")
    source = tmp_path_factory.mktemp("shim_src") / "rknn-toolkit-lite2"
    shutil.copytree(SHIM, source)  # the build writes its egg-info beside the sources
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                    "--quiet", "--target", str(target), str(source)], check=True, cwd=source.parent)
    return target


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(``yolov8n_rknn_model`` directory, the ONNX file it was converted from)."""
    from ultralytics import YOLO
    from ultralytics.nn.backends.base import BaseBackend
    from ultralytics.utils import YAML

    from rknnlite.toolkit import RKNN

    root = tmp_path_factory.mktemp("yolo")
    onnx_file = Path(YOLO("yolov8n.yaml").export(format="onnx", imgsz=64, opset=17, simplify=False,
                                                 project=str(root)))
    onnx_file = onnx_file if onnx_file.is_absolute() else Path.cwd() / onnx_file
    moved = root / onnx_file.name
    onnx_file.replace(moved)
    out = root / "yolov8n_rknn_model"
    out.mkdir()
    rk = RKNN()
    try:
        assert rk.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], target_platform="rk3588") == 0
        assert rk.load_onnx(str(moved)) == 0
        assert rk.build() == 0
        assert rk.export_rknn(str(out / "yolov8n-rk3588.rknn")) == 0
    finally:
        rk.release()
    YAML.save(out / "metadata.yaml", BaseBackend.read_metadata(moved))  # what Ultralytics' export writes
    return out, moved


def test_yolo_predicts_through_rknnlite(shim_site, exported, monkeypatch):
    import ultralytics.nn.backends.rknn as rknn_backend
    from ultralytics import YOLO

    monkeypatch.syspath_prepend(str(shim_site))
    monkeypatch.delenv("ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS", raising=False)
    monkeypatch.setattr(rknn_backend, "is_rockchip", lambda: True)
    import ultralytics.utils.checks as checks

    monkeypatch.setattr(checks, "AUTOINSTALL", False)  # never pip-install anything from a test
    assert metadata.version("rknn-toolkit-lite2") == "2.5.0"
    assert checks.check_requirements("rknn-toolkit-lite2", install=False)

    model_dir, onnx_file = exported
    rng = np.random.default_rng(0)
    image = (rng.random((64, 64, 3)) * 255).astype(np.uint8)
    yolo = YOLO(str(model_dir), task="detect")
    result = yolo.predict(image, imgsz=64, conf=0.0001, verbose=False)[0]
    from rknnlite.api import RKNNLite

    assert isinstance(yolo.predictor.model.backend.model, RKNNLite)
    reference = YOLO(str(onnx_file), task="detect").predict(image, imgsz=64, conf=0.0001, verbose=False)[0]
    assert result.orig_shape == (64, 64) and len(result.boxes) == len(reference.boxes) > 0
    # fp16 storage of the portable model against onnxruntime's float32: the same detections
    np.testing.assert_allclose(result.boxes.xyxy.numpy(), reference.boxes.xyxy.numpy(), atol=1.0)
    np.testing.assert_array_equal(result.boxes.cls.numpy(), reference.boxes.cls.numpy())
