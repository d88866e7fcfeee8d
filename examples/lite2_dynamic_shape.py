"""A dynamic-shape model with the Lite2 API, as in rknn-toolkit-lite2's dynamic_shape example.

Usage::

    python examples/lite2_dynamic_shape.py MODEL.rknn [--image IMG.npy] [--sizes 224x224 160x160 256x256]

``MODEL.rknn``: a model built with ``config(dynamic_input=...)`` whose one NCHW image input
accepts each of ``--sizes`` (HxW).  The image (``--image``: an ``.npy`` RGB uint8 HWC image,
default a synthetic gradient) is resized to each size (nearest neighbour), fed as NCHW uint8
with ``data_format=['nchw']`` (the runtime warns and converts it, as Lite2 does) and the top 5
of the flattened output is printed for each size.  The runtime takes each run's input shape
from the array: no call sets it.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

from rknnlite.api import RKNNLite


def parse_size(text: str):
    h, _, w = text.lower().partition("x")
    return int(h), int(w or h)


def base_image(path) -> np.ndarray:
    """An HxWx3 uint8 RGB image: from an .npy file, or a 256x256 synthetic gradient."""
    if path:
        img = np.asarray(np.load(path))
        return (img[0] if img.ndim == 4 else img).astype(np.uint8)
    ramp = np.linspace(0, 255, 256, dtype=np.float32)
    return np.stack([ramp[None, :].repeat(256, 0), ramp[:, None].repeat(256, 1),
                     np.full((256, 256), 96, np.float32)], axis=-1).astype(np.uint8)


def resize(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """Nearest-neighbour resize of an HxWxC image."""
    rows = (np.arange(h) * img.shape[0] // h).clip(0, img.shape[0] - 1)
    cols = (np.arange(w) * img.shape[1] // w).clip(0, img.shape[1] - 1)
    return img[rows][:, cols]


def show_top5(scores: np.ndarray, title: str) -> None:
    print(title)
    print("-----TOP 5-----")
    for index in np.argsort(scores)[::-1][:5]:
        print('[%3d] score:%.6f class:"%s"' % (index, scores[index], index))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="path of the dynamic-shape .rknn model")
    parser.add_argument("--image", help=".npy RGB uint8 image, HWC or 1xHxWxC")
    parser.add_argument("--sizes", nargs="+", default=["224x224", "160x160", "256x256"],
                        help="input sizes HxW to run, each one of the model's shape sets")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname).1s %(message)s", stream=sys.stdout)
    img = base_image(args.image)

    rknn_lite = RKNNLite()
    print("--> Load RKNN model")
    if rknn_lite.load_rknn(args.model) != 0:
        print("Load RKNN model failed")
        return 1
    print("done")

    print("--> Init runtime environment")
    if rknn_lite.init_runtime() != 0:
        print("Init runtime environment failed")
        return 1
    print("done")

    for size in args.sizes:
        h, w = parse_size(size)
        nchw = np.ascontiguousarray(resize(img, h, w).transpose(2, 0, 1)[None])
        print(f"--> Running model ({h}x{w})")
        outputs = rknn_lite.inference(inputs=[nchw], data_format=["nchw"])
        if outputs is None:
            print("Inference failed")
            return 1
        show_top5(outputs[0].reshape(-1), f"dynamic shape {h}x{w}")
    print("done")

    rknn_lite.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
