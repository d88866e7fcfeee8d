#!/usr/bin/env python3
"""Regenerate the YOLOX, YOLOv7, RetinaFace and SCRFD fixtures of tests/data/vision: models built from
the families' own definitions where one installs from PyPI without a GPU stack (random
weights), and the families' own postprocessing of their outputs, which
tests/test_vision_families.py holds rknnlite.vision's decoders to.

* YOLOX: ``yolox.models`` (YOLOPAFPN + YOLOXHead, Megvii's ``yolox`` package), exported with
  the head's per-stride outputs ``reg, sigmoid(obj), sigmoid(cls)`` (1, 5+nc, H, W) as
  Rockchip's model zoo exports it; reference ``head.decode_outputs`` + ``yolox.utils.postprocess``.
* YOLOv7: the ``yolov7detect`` package's ``Model`` (no model spec ships with it: a small
  YOLOv7-style one, :data:`YOLOV7_SPEC`, with the IDetect head and YOLOv7's anchors), exported
  as the model zoo exports it; reference its ``IDetect`` decoding + ``non_max_suppression``.
* RetinaFace: ``facexlib.detection.retinaface.RetinaFace('mobile0.25')`` exported as is
  (loc, softmax conf, landmarks); reference facexlib's ``PriorBox``, ``decode``,
  ``decode_landm`` and ``py_cpu_nms`` in the order its ``detect_faces`` runs them.
* SCRFD: no PyPI package carries its PyTorch definition (it lives in InsightFace's
  mmdetection tree), so the network is a small stand-in with SCRFD's nine-output layout;
  the reference is InsightFace's own ``insightface.model_zoo.scrfd.SCRFD.detect`` run on
  the exported ONNX (onnxruntime), i.e. its own decoding and NMS; the fixture also keeps its
  candidates before NMS (``cand_<i>``), because its NMS measures boxes in whole pixels
  (width ``x2 - x1 + 1``), which decides a few borderline pairs differently.

The packages are needed only here, and install without their pinned dependencies::

    pip install --no-deps yolox yolov7detect facexlib insightface loguru pandas seaborn
    python tools/make_family_fixtures.py [yolox yolov7 retinaface scrfd]   # default: all

Per model ``<name>``: ``<name>.onnx`` and ``<name>.npz`` holding ``images``, ``out<k>_<i>``
(output k for picture i, float32) and ``det_<i>``: rows x1, y1, x2, y2, score, then class
(YOLOX, YOLOv7) or ten landmark coordinates (faces); YOLOv7's also ``anchors`` (pixels).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_vision_fixtures import (CONF, IOU, OUT, SIZE, anchor_yolo, as_input, calibrate,  # noqa: E402
                                  export_heads, pictures, save, wrapped)

FACE_CONF, FACE_IOU = 0.5, 0.4
#: SCRFD's InsightFace preprocessing: (x - 127.5) / 128 on RGB
SCRFD_MEAN, SCRFD_STD = 127.5, 128.0


def yolox(workdir: Path, images: np.ndarray, nc: int = 3):
    """A YOLOX of depth 0.33 and width 1/16 (PAFPN + decoupled head) from ``yolox.models``."""
    import torch
    from yolox.models import YOLOPAFPN, YOLOX, YOLOXHead
    from yolox.utils import postprocess

    torch.manual_seed(0)
    width, depth = 0.0625, 0.33
    model = YOLOX(YOLOPAFPN(depth, width), YOLOXHead(nc, width))
    head = model.head

    def features(model, x):
        """Every batch-normalised layer, without YOLOX's training forward (which wants targets)."""
        for k, f in enumerate(model.backbone(x)):
            stem = model.head.stems[k](f)
            model.head.cls_convs[k](stem), model.head.reg_convs[k](stem)

    calibrate(wrapped(model, features), torch)
    with torch.no_grad():
        for conv in head.reg_preds:  # offsets and log sizes near 0, no sliver boxes
            conv.weight.mul_(0.2)
        for conv in head.obj_preds:
            conv.bias.fill_(-1.0)
        for conv in head.cls_preds:
            conv.bias.fill_(0.0)

    def heads(model, x):
        """The head's per-stride outputs, before YOLOX flattens and decodes them."""
        model.head.decode_in_inference = False
        flat = model(x)  # (1, N, 5+nc): per stride, its H*W cells row-major
        outs, start = [], 0
        for h, w in model.head.hw:
            outs.append(flat[:, start:start + h * w].permute(0, 2, 1).reshape(1, -1, h, w))
            start += h * w
        return tuple(outs)

    onnx_path, data = export_heads(wrapped(model, heads).eval(), workdir, "yolox", images)
    with torch.no_grad():
        for i, img in enumerate(images):
            x = as_input(img)
            head.decode_in_inference = True
            det = postprocess(model(x), nc, CONF, IOU)[0]
            det = torch.zeros(0, 7) if det is None else det
            # x1, y1, x2, y2, obj * class score, class
            data[f"det_{i}"] = torch.cat([det[:, :4], det[:, 4:5] * det[:, 5:6], det[:, 6:7]], 1).numpy()
    return onnx_path, data


#: a small YOLOv7-style network in the yolov7 package's model-spec format (no spec ships with the
#: package): ELAN-like stem, max-pool downsampling, an upsampling neck and YOLOv7's IDetect head
#: with its default anchors (pixels, strides 8, 16, 32)
YOLOV7_SPEC = {
    "nc": 3, "depth_multiple": 1.0, "width_multiple": 1.0,
    "anchors": [[12, 16, 19, 36, 40, 28], [36, 75, 76, 55, 72, 146], [142, 110, 192, 243, 459, 401]],
    "backbone": [[-1, 1, "Conv", [8, 3, 2]], [-1, 1, "Conv", [16, 3, 2]],
                 [-1, 1, "Conv", [16, 1, 1]], [-2, 1, "Conv", [16, 1, 1]], [-1, 1, "Conv", [16, 3, 1]],
                 [[-1, -2, -3], 1, "Concat", [1]], [-1, 1, "Conv", [16, 1, 1]],
                 [-1, 1, "MP", []], [-1, 1, "Conv", [32, 3, 1]],     # 8: stride 8
                 [-1, 1, "MP", []], [-1, 1, "Conv", [32, 3, 1]],     # 10: stride 16
                 [-1, 1, "MP", []], [-1, 1, "Conv", [32, 3, 1]]],    # 12: stride 32
    "head": [[-1, 1, "Conv", [16, 1, 1]], [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
             [[-1, 10], 1, "Concat", [1]], [-1, 1, "Conv", [32, 3, 1]],   # 16
             [-1, 1, "Conv", [16, 1, 1]], [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
             [[-1, 8], 1, "Concat", [1]], [-1, 1, "Conv", [32, 3, 1]],    # 20
             [[20, 16, 12], 1, "IDetect", ["nc", "anchors"]]],
}


def yolov7(workdir: Path, images: np.ndarray):
    """A YOLOv7-style model built by the ``yolov7detect`` package's ``Model`` from
    :data:`YOLOV7_SPEC`, exported as the model zoo exports YOLOv7: per stride the head's
    convolution outputs after a sigmoid, (1, 3*(5+nc), H, W).  The reference is the
    package's own ``IDetect`` decoding and ``non_max_suppression``."""
    import copy

    import torch
    from yolov7.models.yolo import Model
    from yolov7.utils.general import non_max_suppression

    model, detect = anchor_yolo(Model, copy.deepcopy(YOLOV7_SPEC), -2.0)

    def heads(model, x):
        """IDetect's raw per-stride outputs (its export mode), back to NCHW, after a sigmoid."""
        detect.export = True
        raw = model(x)  # per stride (1, A, H, W, 5+nc)
        detect.export, detect.training = False, False
        return tuple(y.permute(0, 1, 4, 2, 3).reshape(1, -1, y.shape[2], y.shape[3]).sigmoid() for y in raw)

    onnx_path, data = export_heads(wrapped(model, heads).eval(), workdir, "yolov7", images)
    with torch.no_grad():
        for i, img in enumerate(images):
            x = as_input(img)
            model.eval()
            data[f"det_{i}"] = non_max_suppression(model(x)[0], CONF, IOU)[0].numpy()
    data["anchors"] = (detect.anchors * detect.stride.view(-1, 1, 1)).numpy()  # pixels
    return onnx_path, data


def retinaface(workdir: Path, images: np.ndarray):
    """facexlib's RetinaFace with its MobileNet-0.25 backbone."""
    import torch
    from facexlib.detection.retinaface import RetinaFace
    from facexlib.detection.retinaface_utils import PriorBox, decode, decode_landm, py_cpu_nms

    torch.manual_seed(0)
    model = RetinaFace(network_name="mobile0.25", device=torch.device("cpu"))
    calibrate(model, torch)
    with torch.no_grad():
        for head in model.ClassHead:  # (background, face) logits per anchor: few faces
            head.conv1x1.bias.view(-1, 2)[:, 1] = -2.0
    onnx_path, data = export_heads(model, workdir, "retinaface", images, ("loc", "conf", "landm"))
    h, w = SIZE
    scale = torch.tensor([w, h] * 2, dtype=torch.float32)
    scale1 = torch.tensor([w, h] * 5, dtype=torch.float32)
    priors = PriorBox(model.cfg, image_size=SIZE).forward()
    for i in range(len(images)):
        loc, conf, landm = (torch.from_numpy(data[f"out{k}_{i}"]) for k in range(3))
        # detect_faces' steps from the network's outputs on
        boxes = (decode(loc[0], priors, model.cfg["variance"]) * scale).numpy()
        landms = (decode_landm(landm[0], priors, model.cfg["variance"]) * scale1).numpy()
        scores = conf[0, :, 1].numpy()
        idx = np.where(scores > FACE_CONF)[0]
        order = idx[scores[idx].argsort()[::-1]]
        dets = np.hstack((boxes[order], scores[order, None])).astype(np.float32)
        keep = py_cpu_nms(dets, FACE_IOU)
        data[f"det_{i}"] = np.concatenate([dets[keep], landms[order][keep]], 1).reshape(-1, 15)
    return onnx_path, data


def scrfd(workdir: Path, images: np.ndarray):
    """A stand-in network with SCRFD's outputs: per stride 8, 16, 32, two anchors per cell,
    scores (N, 1) after a sigmoid, box distances (N, 4) and keypoint offsets (N, 10) in
    stride units, rows ordered (row, column, anchor); outputs scores, boxes, keypoints."""
    import cv2
    import torch
    from insightface.model_zoo.scrfd import SCRFD

    def block(cin, cout):
        return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(cout),
                                   torch.nn.ReLU())

    class Net(torch.nn.Module):
        def __init__(self, anchors=2):
            super().__init__()
            self.stem = torch.nn.Sequential(block(3, 8), block(8, 16), block(16, 16))
            self.down = torch.nn.ModuleList([torch.nn.Identity(), block(16, 16), block(16, 16)])
            self.heads = torch.nn.ModuleList([torch.nn.Conv2d(16, anchors * c, 1) for c in (1, 4, 10)])

        def forward(self, x):
            x = self.stem(x)
            feats = []
            for down in self.down:
                x = down(x)
                feats.append(x)
            outs = [[], [], []]
            for f in feats:
                for j, (head, width) in enumerate(zip(self.heads, (1, 4, 10))):
                    y = head(f).permute(0, 2, 3, 1).reshape(-1, width)
                    outs[j].append(y.sigmoid() if j == 0 else y)
            return tuple(outs[0] + outs[1] + outs[2])

    torch.manual_seed(0)
    net = Net()
    calibrate(net, torch)
    with torch.no_grad():
        net.heads[0].bias.fill_(-3.0)
        net.heads[1].weight.mul_(0.2)
        net.heads[1].bias.fill_(1.5)  # box distances 1.5 +- 0.2 strides: no inverted boxes
    net.eval()
    names = [f"{what}_{s}" for what in ("score", "bbox", "kps") for s in (8, 16, 32)]
    onnx_path, data = export_heads(
        net, workdir, "scrfd", images, names,
        lambda img: torch.from_numpy((img.transpose(2, 0, 1)[None].astype(np.float32) - SCRFD_MEAN) / SCRFD_STD))
    detector = SCRFD(model_file=str(onnx_path))
    detector.prepare(-1, det_thresh=FACE_CONF, nms_thresh=FACE_IOU)
    for i, img in enumerate(images):
        bgr = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
        # its decoding alone (candidates best first), then with its NMS
        cand, cand_kps = detector._detect_candidates(bgr, detector.input_size, FACE_CONF)
        data[f"cand_{i}"] = np.concatenate([cand, cand_kps.reshape(len(cand), 10)], 1).astype(np.float32)
        det, kps = detector.detect(bgr)
        data[f"det_{i}"] = np.concatenate([det, kps.reshape(len(det), 10)], 1).astype(np.float32)
    return onnx_path, data


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    images = pictures()
    with tempfile.TemporaryDirectory() as tmp:
        only = set(sys.argv[1:])
        for name, make in (("yolox", yolox), ("yolov7", yolov7), ("retinaface", retinaface), ("scrfd", scrfd)):
            if only and name not in only:
                continue
            save(name, *make(Path(tmp), images))
    return 0


if __name__ == "__main__":
    sys.exit(main())
