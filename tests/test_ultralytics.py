"""Ultralytics drives RKNNLite: ``YOLO("<name>_rknn_model")`` predicts with this package.

Ultralytics' RKNN backend (``ultralytics/nn/backends/rknn.py``) refuses non-Rockchip hosts
(``is_rockchip()``: patched here, the only patch), checks that a distribution named
``rknn-toolkit-lite2`` is installed (satisfied by the marker distribution built from
``packaging/rknn-toolkit-lite2``, installed into a temporary directory), then uses
``rknnlite.api.RKNNLite``: ``load_rknn``, ``init_runtime()``, ``inference(inputs=[im])`` with
BHWC uint8 frames.  The model is a YOLOv8n built from its yaml (no weights download), exported
to ONNX by Ultralytics and converted by rknnlite's toolkit with the settings of Ultralytics'
own RKNN export (mean 0, std 255).

A second test predicts with a folder Ultralytics' own exporter wrote with RKNN-Toolkit2 2.3.2
(``tests/data/ultralytics``): a vendor file, run off-board, whose detections must be the ones
Ultralytics' NMS finds in the vendor simulator's output.

Ultralytics patches ``cv2`` and ``torch`` functions when it is imported, so everything runs in
a child process: the rest of the suite keeps the real ones.  Skipped when ultralytics (and
torch) are not installed: they are optional and large (see docs/ultralytics.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("ultralytics") is None:
    pytest.skip("ultralytics is not installed (optional, large: it needs torch)", allow_module_level=True)
pytest.importorskip("onnx", reason="the export needs onnx")

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "packaging" / "rknn-toolkit-lite2"

SCRIPT = r'''
import json
from importlib import metadata
from pathlib import Path

import numpy as np
import ultralytics.nn.backends.rknn as rknn_backend
import ultralytics.utils.checks as checks
from ultralytics import YOLO
from ultralytics.nn.backends.base import BaseBackend
from ultralytics.utils import YAML

from rknnlite.api import RKNNLite
from rknnlite.toolkit import RKNN

onnx_file = Path(YOLO("yolov8n.yaml").export(format="onnx", imgsz=64, opset=17, simplify=False)).resolve()
out = Path("yolov8n_rknn_model")
out.mkdir()
rk = RKNN()
assert rk.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], target_platform="rk3588") == 0
assert rk.load_onnx(str(onnx_file)) == 0
assert rk.build() == 0
assert rk.export_rknn(str(out / "yolov8n-rk3588.rknn")) == 0
rk.release()
YAML.save(out / "metadata.yaml", BaseBackend.read_metadata(onnx_file))  # what Ultralytics' export writes

rknn_backend.is_rockchip = lambda: True  # the only patch: this host is no Rockchip board
checks.AUTOINSTALL = False  # never pip-install anything from a test
assert checks.check_requirements("rknn-toolkit-lite2", install=False)

image = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
yolo = YOLO(str(out), task="detect")
result = yolo.predict(image, imgsz=64, conf=0.0001, verbose=False)[0]
reference = YOLO(str(onnx_file), task="detect").predict(image, imgsz=64, conf=0.0001, verbose=False)[0]
print(json.dumps({
    "lite2_version": metadata.version("rknn-toolkit-lite2"),
    "runtime": type(yolo.predictor.model.backend.model).__module__,
    "is_rknnlite": isinstance(yolo.predictor.model.backend.model, RKNNLite),
    "orig_shape": list(result.orig_shape),
    "xyxy": result.boxes.xyxy.numpy().tolist(), "cls": result.boxes.cls.numpy().tolist(),
    "ref_xyxy": reference.boxes.xyxy.numpy().tolist(), "ref_cls": reference.boxes.cls.numpy().tolist(),
}))
'''


#: A vendor file exported from a YOLOv8n yaml by Ultralytics' own exporter with RKNN-Toolkit2 2.3.2
#: (tests/data/ultralytics, tools/vendor_corpus/ultralytics_export.py), and the simulator's raw output
#: for its stored image: the reference is Ultralytics' own NMS on that output.
VENDOR_SCRIPT = r'''
import json, shutil, sys
from pathlib import Path

import numpy as np
import torch
import ultralytics.nn.backends.rknn as rknn_backend
import ultralytics.utils.checks as checks
from ultralytics import YOLO
from ultralytics.utils import nms, ops

source = Path(sys.argv[1])
out = Path("yolov8n_rknn_model")
shutil.copytree(source, out, ignore=shutil.ignore_patterns("*.npz"))
data = np.load(source / "yolov8n-rk3588.npz")
rknn_backend.is_rockchip = lambda: True  # the only patch: this host is no Rockchip board
checks.AUTOINSTALL = False

image = np.ascontiguousarray(data["in0"][0].transpose(1, 2, 0)[..., ::-1])  # the stored RGB image, as BGR
yolo = YOLO(str(out), task="detect")
result = yolo.predict(image, imgsz=64, conf=0.25, iou=0.7, verbose=False)[0]
(ref,) = nms.non_max_suppression(torch.from_numpy(data["out0"]).float(), 0.25, 0.7, max_det=300)
ref[:, :4] = ops.scale_boxes((64, 64), ref[:, :4], (64, 64))
print(json.dumps({
    "runtime": type(yolo.predictor.model.backend.model).__module__,
    "xyxy": result.boxes.xyxy.numpy().tolist(), "cls": result.boxes.cls.numpy().tolist(),
    "conf": result.boxes.conf.numpy().tolist(),
    "ref_xyxy": ref[:, :4].numpy().tolist(), "ref_cls": ref[:, 5].numpy().tolist(), "ref_conf": ref[:, 4].numpy().tolist(),
}))
'''


@pytest.fixture(scope="module")
def shim_site(tmp_path_factory):
    """A directory holding the installed marker distribution ``rknn-toolkit-lite2``."""
    target = tmp_path_factory.mktemp("shim")
    source = tmp_path_factory.mktemp("shim_src") / "rknn-toolkit-lite2"
    shutil.copytree(SHIM, source)  # the build writes its egg-info beside the sources
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                    "--quiet", "--target", str(target), str(source)], check=True, cwd=source.parent)
    return target


def _child(shim_site, tmp_path, script: str, *args: str) -> dict:
    """Run ``script`` in a child process with the marker distribution importable; its last line."""
    env = dict(os.environ)
    env.pop("ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(shim_site), str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    run = subprocess.run([sys.executable, "-c", script, *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_yolo_predicts_through_rknnlite(shim_site, tmp_path):
    import numpy as np

    got = _child(shim_site, tmp_path, SCRIPT)
    assert got["lite2_version"] == "2.5.0"  # the marker satisfied Ultralytics' check (nothing installed)
    assert got["is_rknnlite"] and got["runtime"] == "rknnlite.api.rknn_lite"
    assert got["orig_shape"] == [64, 64] and len(got["cls"]) == len(got["ref_cls"]) > 0
    # fp16 storage of the portable model against onnxruntime's float32: the same detections
    np.testing.assert_allclose(got["xyxy"], got["ref_xyxy"], atol=1.0)
    assert got["cls"] == got["ref_cls"]


def test_yolo_predicts_with_ultralytics_own_vendor_export(shim_site, tmp_path):
    import numpy as np

    got = _child(shim_site, tmp_path, VENDOR_SCRIPT, str(REPO / "tests" / "data" / "ultralytics" / "yolov8n_rknn_model"))
    assert got["runtime"] == "rknnlite.api.rknn_lite"
    assert len(got["cls"]) == len(got["ref_cls"]) > 0
    # off-board float16 against the simulator's: within a few float16 ulps of coordinates up to 64
    np.testing.assert_allclose(got["xyxy"], got["ref_xyxy"], atol=0.25)
    np.testing.assert_allclose(got["conf"], got["ref_conf"], atol=2e-3)
    assert got["cls"] == got["ref_cls"]
