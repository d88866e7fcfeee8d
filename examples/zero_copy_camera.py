"""Zero-copy camera pipeline: NHWC uint8 frames -> bound input -> run_bound -> bound float32 output.

Usage::

    python examples/zero_copy_camera.py [MODEL.rknn] [--frames 5] [--no-flush]

``MODEL.rknn``: a model with one 4-D image input (3 channels) and 4-D outputs, e.g. a
detector converted with ``rknnlite.toolkit.RKNN`` with the camera's mean/std in
``config``.  Without it, the script converts a small 480x640 Conv+Relu model first (needs
``pip install "rknnlite[toolkit]"``).

The flow, as with the C zero-copy API:

1. ``ctx.native_inputs[0]`` is the input as the NPU reads it (NHWC, rows ``w_stride``
   pixels apart); ``.replace(type=TensorType.UINT8)`` asks for raw camera bytes, which
   the runtime normalises (mean/std) and quantizes itself.
2. ``ctx.outputs[i].replace(type=TensorType.FLOAT32)``: NCHW float32 outputs (dequantized
   for an int8 model, whose output attrs say INT8).
3. ``ctx.create_mem(attr.size_with_stride)`` and ``ctx.set_io_mem(mem, attr)`` once.
4. Per frame: write the frame into ``in_mem.view(in_attr)`` (a numpy view with the row
   padding skipped; a camera with a dma-buf fd would use ``create_mem_from_fd`` and
   write nothing), ``ctx.run_bound()``, read ``out_mem.array(np.float32, dims)``.
5. Destroy the memory, then close the context (the SDK's release order).

``--no-flush`` creates the context with ``DISABLE_FLUSH_INPUT_MEM_CACHE |
DISABLE_FLUSH_OUTPUT_MEM_CACHE``: the application then syncs the cacheable memory itself
(``sync(TO_DEVICE)`` after writing a frame, ``sync(FROM_DEVICE)`` before reading results),
as it must on a board.

Prints one line per frame with the output's mean, and checks the first frame against the
copying API (``ctx.run``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import rknnlite
from rknnlite import InitFlag, MemSyncMode, TensorType


def build_demo_model(path: Path, height: int = 480, width: int = 640) -> None:
    """Convert a Conv(3->8, 3x3, pad 1) + Relu ONNX model on a 1x3xHxW image, normalised
    with the camera's mean/std (0..255 -> about -1..1), with ``rknnlite.toolkit``."""
    from onnx import TensorProto, helper, numpy_helper

    from rknnlite.toolkit import RKNN

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["features"])],
        "camera", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 8, height, width])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    rk = RKNN()
    try:
        ok = (rk.config(mean_values=[[127.5, 127.5, 127.5]], std_values=[[127.5, 127.5, 127.5]],
                        target_platform="rk3588") == 0
              and rk.load_onnx(model) == 0 and rk.build(do_quantization=False) == 0
              and rk.export_rknn(str(path)) == 0)
    finally:
        rk.release()
    if not ok:
        raise SystemExit("converting the demo model failed")


def camera_frames(height: int, width: int, count: int):
    """Stand-in for a camera: ``count`` NHWC uint8 frames (1, H, W, 3) of a moving gradient."""
    ramp = np.arange(width, dtype=np.uint16)[None, :] + np.arange(height, dtype=np.uint16)[:, None]
    for k in range(count):
        frame = np.empty((1, height, width, 3), np.uint8)
        for c in range(3):
            frame[0, :, :, c] = (ramp * (c + 1) + 17 * k) % 256
        yield frame


def run(model_path: str, frames: int = 5, no_flush: bool = False) -> list:
    """The zero-copy loop; returns the mean of output 0 per frame."""
    flags = InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE | InitFlag.DISABLE_FLUSH_OUTPUT_MEM_CACHE if no_flush else 0
    ctx = rknnlite.Context(model_path, flags=flags)
    try:
        in_attr = ctx.native_inputs[0].replace(type=TensorType.UINT8)  # NHWC uint8, rows w_stride apart
        out_attrs = [a.replace(type=TensorType.FLOAT32) for a in ctx.outputs]  # NCHW; int8 models' say INT8
        in_mem = ctx.create_mem(in_attr.size_with_stride)
        out_mems = [ctx.create_mem(a.size_with_stride) for a in out_attrs]
        ctx.set_io_mem(in_mem, in_attr)
        for mem, attr in zip(out_mems, out_attrs):
            ctx.set_io_mem(mem, attr)
        frame_view = in_mem.view(in_attr)  # (1, H, W, 3) uint8, padding skipped; no copy
        outputs = [mem.array(np.float32, attr.dims) for mem, attr in zip(out_mems, out_attrs)]  # no copy

        n, h, w, _ = in_attr.dims
        means = []
        for k, frame in enumerate(camera_frames(h, w, frames)):
            frame_view[...] = frame  # the camera (or its DMA) fills the bound input
            if no_flush:
                in_mem.sync(MemSyncMode.TO_DEVICE)
            ctx.run_bound()
            if no_flush:
                for mem in out_mems:
                    mem.sync(MemSyncMode.FROM_DEVICE)
            if k == 0:  # the copying API gives the same result
                expected = ctx.run([frame], data_format="nhwc")
                assert all(np.array_equal(a, b) for a, b in zip(outputs, expected)), "zero-copy result differs"
            means.append(float(outputs[0].mean()))
            print(f"frame {k}: output 0 {list(outputs[0].shape)} mean {means[-1]:.6f}")
        del frame_view, outputs  # views may outlive the memory safely; dropping them frees it sooner
        in_mem.destroy()
        for mem in out_mems:
            mem.destroy()
    finally:
        ctx.close()
    return means


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="a .rknn model (default: convert a small 480x640 camera model)")
    parser.add_argument("--frames", type=int, default=5)
    parser.add_argument("--no-flush", action="store_true",
                        help="disable the runtime's cache flushes and sync the memory in the application")
    args = parser.parse_args(argv)
    if args.model:
        run(args.model, args.frames, args.no_flush)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "camera.rknn"
        build_demo_model(path)
        run(str(path), args.frames, args.no_flush)
    return 0


if __name__ == "__main__":
    sys.exit(main())
