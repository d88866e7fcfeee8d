#!/usr/bin/env python3
"""Regenerate tests/data/vision: tiny YOLOv8 / YOLO11 / YOLOv8-seg / YOLOv8-pose models
built from Ultralytics' own model definitions (random weights), exported to ONNX by
Ultralytics, and Ultralytics' own postprocessing of their outputs on a few synthetic
pictures, the reference rknnlite.vision's decoders are tested against; and a YOLOv5n
(anchor-based) from the ``yolov5`` package with that package's own decoding and NMS.

    pip install ultralytics yolov5   # (with torch); only this generator needs them
    python tools/make_vision_fixtures.py

Per model ``<name>``: ``<name>.onnx`` and ``<name>.npz`` holding ``images`` (N, H, W, 3)
uint8 RGB, ``out<k>_<i>`` (onnxruntime's output k for picture i, float32) and
``det_<i>`` (Ultralytics' ``non_max_suppression`` rows: x1, y1, x2, y2, score, class,
then mask coefficients or keypoints) and, for seg, ``mask_<i>`` (``process_mask`` on the
prototype grid).  The models are a width-scaled "n" (8..64 channels) at a 64x96 input so
the files stay small; the weights are He-normal, the batch-norm statistics measured on the
pictures and the class-score bias -1.5, so the scores spread over (0, 1) instead of all
tying at Ultralytics' initial prior.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "vision"
SIZE = (64, 96)
CONF, IOU = 0.25, 0.45
#: name -> (Ultralytics model yaml, number of classes)
MODELS = {"yolov8": ("v8/yolov8.yaml", 3), "yolo11": ("11/yolo11.yaml", 3),
          "yolov8_seg": ("v8/yolov8-seg.yaml", 3), "yolov8_pose": ("v8/yolov8-pose.yaml", 1)}


def pictures(n: int = 3) -> np.ndarray:
    """Synthetic RGB pictures: coloured rectangles on noise (deterministic)."""
    rng = np.random.default_rng(2024)
    out = rng.integers(0, 60, (n, SIZE[0], SIZE[1], 3)).astype(np.uint8)
    for img in out:
        for _ in range(4):
            y, x = rng.integers(0, SIZE[0] - 16), rng.integers(0, SIZE[1] - 16)
            h, w = rng.integers(8, 30, 2)
            img[y:y + h, x:x + w] = rng.integers(80, 255, 3)
    return out


def build(name: str, cfg: str, nc: int, workdir: Path) -> Path:
    import torch
    import ultralytics
    import yaml
    from ultralytics import YOLO

    spec = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg" / "models" / cfg).read_text())
    spec["nc"] = nc
    spec["scales"] = {"n": [0.33, 0.125, 64]}
    path = workdir / f"{name.replace('_', '-').replace('yolov8', 'yolov8n').replace('yolo11', 'yolo11n')}.yaml"
    path.write_text(yaml.safe_dump(spec))
    torch.manual_seed(0)
    model = YOLO(str(path))
    calibrate(model.model, torch)
    head = model.model.model[-1]
    with torch.no_grad():
        for branch in head.cv3:
            branch[-1].bias.fill_(-1.5)
    onnx_path = Path(model.export(format="onnx", imgsz=list(SIZE), opset=17, simplify=False, dynamic=False))
    return onnx_path


def reference(name: str, onnx_path: Path, images: np.ndarray, nc: int) -> dict:
    import onnxruntime as ort
    import torch
    from ultralytics.utils import ops
    from ultralytics.utils.nms import non_max_suppression

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    data = {"images": images}
    for i, img in enumerate(images):
        x = (img.transpose(2, 0, 1)[None].astype(np.float32) / 255.0)
        outs = sess.run(None, {sess.get_inputs()[0].name: x})
        for k, y in enumerate(outs):
            data[f"out{k}_{i}"] = y
        det = non_max_suppression(torch.from_numpy(outs[0]), CONF, IOU, nc=nc, max_det=300)[0]
        data[f"det_{i}"] = det.numpy()
        if name.endswith("seg"):
            proto = torch.from_numpy(outs[1])[0]
            data[f"mask_{i}"] = ops.process_mask(proto, det[:, 6:], det[:, :4], SIZE, upsample=False).numpy()
    return data


def calibrate(model, torch) -> None:
    """He-normal convolution weights and batch-norm statistics measured on the pictures, so
    every layer's output keeps unit scale (see the module docstring)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d) and m.weight.requires_grad:
                torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if isinstance(m, torch.nn.BatchNorm2d):
                m.reset_running_stats()
                m.momentum = None
        model.train()
        model(torch.from_numpy(pictures().transpose(0, 3, 1, 2).astype(np.float32) / 255.0))
        model.eval()


def as_input(img: np.ndarray):
    """An HWC uint8 RGB picture as the models' input: a (1, 3, H, W) float tensor in 0..1."""
    import torch
    return torch.from_numpy(img.transpose(2, 0, 1)[None].astype(np.float32) / 255.0)


def export_heads(heads, workdir: Path, name: str, images: np.ndarray, output_names=("head8", "head16", "head32"),
                 to_input=as_input):
    """Export the torch module ``heads`` to ``workdir/<name>.onnx`` (input ``images``, SIZE)
    and run it on ``images``: (the path, ``{"images", "out<k>_<i>"}``)."""
    import torch
    path = workdir / f"{name}.onnx"
    torch.onnx.export(heads, torch.zeros(1, 3, *SIZE), str(path), opset_version=17, input_names=["images"],
                      output_names=list(output_names), dynamo=False)
    data = {"images": images}
    with torch.no_grad():
        for i, img in enumerate(images):
            for k, y in enumerate(heads(to_input(img))):
                data[f"out{k}_{i}"] = y.numpy()
    return path, data


def wrapped(model, forward):
    """A torch module holding ``model`` (as its ``model`` attribute) whose forward is
    ``forward(model, x)``: the part of a family's model a fixture exports."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return forward(self.model, x)

    return Wrapped()


def anchor_yolo(model_class, spec, objectness: float, **kwargs):
    """An anchor-based YOLO ``model_class(spec, ch=3, **kwargs)`` (the yolov5 / yolov7 packages'
    ``Model``) with seeded He-normal weights, :func:`calibrate`\ d batch norm, and its head's
    biases ``objectness`` for every anchor's objectness logit and 0 for the class logits:
    (model, its detect head)."""
    import torch

    torch.manual_seed(0)
    model = model_class(spec, ch=3, **kwargs)
    calibrate(model, torch)
    detect = model.model[-1]
    with torch.no_grad():
        for conv in detect.m:
            bias = conv.bias.view(detect.na, -1)
            bias[:, 4] = objectness
            bias[:, 5:] = 0.0
    return model, detect


def yolov5(workdir: Path, images: np.ndarray, nc: int = 3):
    """YOLOv5n (Ultralytics' yolov5 package, anchor-based) at width 1/16, exported the way
    Rockchip's model zoo exports it: the three heads' convolution outputs after a sigmoid,
    (1, 3*(5+nc), H, W), no decoding in the graph.  The reference is the package's own
    ``Detect`` decoding and ``non_max_suppression``, on the same model in torch."""
    import torch
    import yaml
    import yolov5
    from yolov5.models.yolo import Model
    from yolov5.utils.general import non_max_suppression

    spec = yaml.safe_load((Path(yolov5.__file__).parent / "models" / "yolov5n.yaml").read_text())
    spec["nc"], spec["width_multiple"] = nc, 0.0625
    model, detect = anchor_yolo(Model, spec, -1.0, nc=nc)

    def heads(model, x):
        """The model up to the head convolutions, each followed by a sigmoid."""
        y = []
        for m in model.model:
            if m.f != -1:
                x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
            if m is detect:
                return tuple(detect.m[i](x[i]).sigmoid() for i in range(detect.nl))
            x = m(x)
            y.append(x if m.i in model.save else None)

    heads = wrapped(model, heads).eval()
    onnx_path, data = export_heads(heads, workdir, "yolov5", images)
    with torch.no_grad():
        for i, img in enumerate(images):
            x = as_input(img)
            pred = model(x)[0]
            data[f"det_{i}"] = non_max_suppression(pred, CONF, IOU, max_det=300)[0].numpy()
    data["anchors"] = (detect.anchors * detect.stride.view(-1, 1, 1)).numpy()  # pixels
    return onnx_path, data


def save(name: str, onnx_path: Path, data: dict) -> None:
    """Write fixture ``name`` (its ONNX file and npz) to tests/data/vision and say what it holds."""
    (OUT / f"{name}.onnx").write_bytes(onnx_path.read_bytes())
    np.savez_compressed(OUT / f"{name}.npz", **data)
    counts = [len(data[k]) for k in sorted(data) if k.startswith("det_")]
    print(f"{name}: {onnx_path.stat().st_size} bytes of ONNX, detections per picture {counts}")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    images = pictures()
    with tempfile.TemporaryDirectory() as tmp:
        made = [(name, *(lambda p: (p, reference(name, p, images, nc)))(build(name, cfg, nc, Path(tmp))))
                for name, (cfg, nc) in MODELS.items()]
        made.append(("yolov5", *yolov5(Path(tmp), images)))
        for name, onnx_path, data in made:
            save(name, onnx_path, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
