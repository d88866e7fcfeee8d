"""Image classification with the Lite2 API, as in rknn-toolkit-lite2's resnet18 example.

Usage::

    python examples/lite2_resnet18.py MODEL.rknn [--image IMG.npy] [--labels LABELS.txt]

``MODEL.rknn``: a classifier with one NCHW image input and one score output (for example a
resnet18 converted with ``rknnlite.toolkit.RKNN``, or the ``convnet`` fixture).
``--image``: an ``.npy`` RGB image, uint8, HWC or 1xHxWxC, of the model's input size (default:
a synthetic gradient image of ``--size`` pixels).  ``--labels``: one class name per line
(default: the class index).  The script feeds the NHWC uint8 image as Lite2 does, applies a
softmax when the model's output is not already a probability vector, and prints the top 5.

Application code, not library code: it configures logging so that the runtime's warnings
(``W ...`` lines, as Lite2 prints them) reach the console.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

from rknnlite.api import RKNNLite


def board_soc() -> str:
    """The SoC named by the device tree ("rk3588", ...), or "" off a board."""
    try:
        with open("/proc/device-tree/compatible", "rb") as f:
            compatible = f.read().decode("ascii", "replace")
    except OSError:
        return ""
    for soc in ("rk3588", "rk3576", "rk3562", "rk3568", "rk3566"):
        if soc in compatible:
            return soc
    return ""


def load_image(path, size: int) -> np.ndarray:
    """A 1xHxWx3 uint8 image: from an .npy file, or a synthetic gradient."""
    if path:
        img = np.load(path)
    else:
        ramp = np.linspace(0, 255, size, dtype=np.float32)
        img = np.stack([ramp[None, :].repeat(size, 0), ramp[:, None].repeat(size, 1),
                        np.full((size, size), 96, np.float32)], axis=-1)
    img = np.asarray(img).astype(np.uint8)
    return img if img.ndim == 4 else img[None]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def show_top5(scores: np.ndarray, labels, title: str) -> None:
    print(title)
    print("-----TOP 5-----")
    for index in np.argsort(scores)[::-1][:5]:
        name = labels[index] if labels and index < len(labels) else str(index)
        print('[%3d] score:%.6f class:"%s"' % (index, scores[index], name))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="path of the .rknn model")
    parser.add_argument("--image", help=".npy RGB uint8 image, HWC or 1xHxWxC")
    parser.add_argument("--size", type=int, default=224, help="synthetic image size when no --image is given")
    parser.add_argument("--labels", help="text file, one class name per line")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname).1s %(message)s", stream=sys.stdout)

    labels = None
    if args.labels:
        with open(args.labels, encoding="utf-8") as f:
            labels = [line.strip() for line in f]
    img = load_image(args.image, args.size)

    rknn_lite = RKNNLite()
    print("--> Load RKNN model")
    if rknn_lite.load_rknn(args.model) != 0:
        print("Load RKNN model failed")
        return 1
    print("done")

    print("--> Init runtime environment")
    if board_soc() in ("rk3576", "rk3588"):
        ret = rknn_lite.init_runtime(core_mask=RKNNLite.NPU_CORE_0)
    else:
        ret = rknn_lite.init_runtime()
    if ret != 0:
        print("Init runtime environment failed")
        return 1
    print("done")

    print("--> Running model")
    outputs = rknn_lite.inference(inputs=[img])
    if outputs is None:
        print("Inference failed")
        return 1
    scores = outputs[0].reshape(-1).astype(np.float64)
    is_probability = scores.min() >= 0 and abs(scores.sum() - 1) < 1e-3
    show_top5(scores if is_probability else softmax(scores), labels, "resnet18")
    print("done")

    rknn_lite.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
