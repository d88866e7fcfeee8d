#!/usr/bin/env python3
"""A camera application with ``rknnlite.pipeline`` and ``rknnlite.vision``: capture,
letterbox, YOLO inference, decode + NMS, draw, write, in parallel.

    python examples/camera_pipeline.py                          # synthetic clip, built-in detector
    python examples/camera_pipeline.py --frames 300 --out out/  # annotated PNGs (or out.mp4 with ffmpeg)
    python examples/camera_pipeline.py --model yolov8n.rknn --classes 80 --source /dev/video0
    python examples/camera_pipeline.py --model yolov8n.rknn --source video.mp4 --raw  # int8 decode

Frames come from OpenCV (``pip install opencv-python-headless``) for files and cameras,
or from a built-in synthetic clip (red, green and blue 48x48 squares moving over grey).
Each frame goes through three stages on their own threads:

1. letterbox into the model input (``vision.DetectionStages.preprocess``);
2. inference on an :class:`~rknnlite.pipeline.AsyncInferQueue` (one context per core);
3. decode + NMS (``vision.YOLOv8``, either output layout; ``--raw`` decodes the int8
   outputs of a quantized model directly) and the boxes mapped back to the frame.

The main thread draws the detections, writes the annotated frames (a video through
``ffmpeg`` when it is installed and ``--video`` is given, else a PNG sequence), prints the
live FPS, and at the end the per-stage times from the pipeline's statistics.

Without ``--model`` the detector is built here: a YOLOv8-layout model (Rockchip model
zoo's split heads: box distribution, class scores, score sum per stride) whose weights are
set by hand so that it finds the clip's coloured squares, converted with
``rknnlite.toolkit`` (needs the ``onnx`` package) and run on the software backend.  It
stands in for a trained YOLOv8 so the example runs anywhere without downloading weights.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from typing import Iterator, Optional

import numpy as np

#: the synthetic clip's classes, in the built-in detector's class order
SHAPE_CLASSES = ("red", "green", "blue")
#: box colours of the built-in detector's classes (yellow, magenta, white: visible on every square)
SHAPE_PALETTE = np.array([(255, 255, 0), (255, 0, 255), (255, 255, 255)], np.uint8)
SHAPE = 48          # side of the synthetic squares, pixels
INPUT = (256, 320)  # the built-in detector's input (height, width)


# -- sources ----------------------------------------------------------------------------------

def synthetic_frames(n: Optional[int], height: int = 240, width: int = 320) -> Iterator[np.ndarray]:
    """Deterministic HxWx3 uint8 RGB frames: three 48x48 squares (red, green, blue) moving
    over a grey background with a little noise."""
    rng = np.random.default_rng(7)
    pos = rng.uniform([0, 0], [height - SHAPE, width - SHAPE], (3, 2))
    vel = rng.uniform(-6, 6, (3, 2))
    noise = rng.integers(-12, 13, (height, width, 1))
    k = 0
    while n is None or k < n:
        frame = np.clip(110 + noise, 0, 255).astype(np.uint8).repeat(3, axis=2)
        for c, (y, x) in enumerate(pos.astype(int)):
            frame[y:y + SHAPE, x:x + SHAPE] = 30
            frame[y:y + SHAPE, x:x + SHAPE, c] = 230
        yield frame
        pos += vel
        bounce = (pos < 0) | (pos > [height - SHAPE, width - SHAPE])
        vel[bounce] *= -1
        pos = np.clip(pos, 0, [height - SHAPE, width - SHAPE])
        k += 1


def opencv_frames(source: str, n: Optional[int]) -> Iterator[np.ndarray]:
    """RGB frames of a video file or a camera (``/dev/videoN`` or its number) through OpenCV."""
    import cv2  # optional: only for files and cameras

    cap = cv2.VideoCapture(int(source) if source.isdigit() else source)
    if not cap.isOpened():
        raise SystemExit(f"cannot open {source!r} with OpenCV")
    try:
        k = 0
        while n is None or k < n:
            ok, frame = cap.read()
            if not ok:
                return
            yield frame[..., ::-1]  # BGR -> RGB
            k += 1
    finally:
        cap.release()


def is_camera(source: str) -> bool:
    return source.isdigit() or source.startswith("/dev/video")


def open_source(source: str, n: Optional[int]) -> Iterator[np.ndarray]:
    if source == "synthetic":
        return synthetic_frames(n)
    try:
        import cv2  # noqa: F401
    except ImportError:
        raise SystemExit(f"reading {source!r} needs OpenCV (pip install opencv-python-headless); "
                         "without it use --source synthetic") from None
    return opencv_frames(source, n)


# -- the built-in detector ----------------------------------------------------------------------

def squares_detector_onnx() -> bytes:
    """ONNX bytes of a YOLOv8-layout detector (model zoo split heads, 3 classes) whose
    stride-16 branch fires on cells centred in a 48x48 square of pure red, green or blue
    and predicts a 48x48 box there; the stride-8 and stride-32 branches never fire."""
    from onnx import TensorProto, helper, numpy_helper

    h, w = INPUT
    nodes, inits, outputs = [], [], []

    def const(name, array, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    # colour purity per class: own channel minus the mean of the other two
    purity = np.full((3, 3, 1, 1), -0.5, np.float32)
    purity[np.arange(3), np.arange(3)] = 1.0
    nodes.append(helper.make_node("Conv", ["x", const("purity_w", purity)], ["purity"]))
    bins = np.arange(16, dtype=np.float32)
    for stride in (8, 16, 32):
        gh, gw = h // stride, w // stride
        reg_bias = np.tile(-4.0 * (bins - 1.5) ** 2, 4) if stride == 16 else np.zeros(64)
        nodes.append(helper.make_node("Conv", ["x", const(f"reg{stride}_w", np.zeros((64, 3, stride, stride))),
                                               const(f"reg{stride}_b", reg_bias)], [f"reg{stride}"],
                                      kernel_shape=[stride, stride], strides=[stride, stride]))
        if stride == 16:
            # mean purity over the 48x48 window centred on the cell, sharpened: >= ~0.7 fires
            k = SHAPE
            win = np.zeros((3, 1, k, k), np.float32) + 20.0 / (k * k)
            nodes.append(helper.make_node("Conv", ["purity", const("win_w", win), const("win_b", [-13.0] * 3)],
                                          ["logit16"], kernel_shape=[k, k], strides=[16, 16], group=3,
                                          pads=[16, 16, 16, 16]))
        else:
            nodes.append(helper.make_node("Conv", ["x", const(f"cls{stride}_w", np.zeros((3, 3, stride, stride))),
                                                   const(f"cls{stride}_b", [-20.0] * 3)], [f"logit{stride}"],
                                          kernel_shape=[stride, stride], strides=[stride, stride]))
        nodes += [helper.make_node("Sigmoid", [f"logit{stride}"], [f"cls{stride}"]),
                  helper.make_node("ReduceSum", [f"cls{stride}", const(f"axis{stride}", [1], np.int64)],
                                   [f"sum{stride}_raw"], keepdims=1),
                  helper.make_node("Clip", [f"sum{stride}_raw", const(f"lo{stride}", 0.0), const(f"hi{stride}", 1.0)],
                                   [f"sum{stride}"])]
        outputs += [helper.make_tensor_value_info(f"reg{stride}", TensorProto.FLOAT, [1, 64, gh, gw]),
                    helper.make_tensor_value_info(f"cls{stride}", TensorProto.FLOAT, [1, 3, gh, gw]),
                    helper.make_tensor_value_info(f"sum{stride}", TensorProto.FLOAT, [1, 1, gh, gw])]
    graph = helper.make_graph(nodes, "squares", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def build_squares_detector(path: str) -> str:
    """Convert :func:`squares_detector_onnx` with ``rknnlite.toolkit`` into ``path``."""
    from rknnlite.toolkit import RKNN

    rknn = RKNN()
    rknn.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]],
                float_dtype="float32")
    if (rknn.load_onnx(squares_detector_onnx()) != 0 or rknn.build(do_quantization=False) != 0
            or rknn.export_rknn(path) != 0):
        raise SystemExit("building the built-in detector failed (see the rknnlite.toolkit log)")
    rknn.release()
    return path


# -- output -----------------------------------------------------------------------------------

def write_png(path: str, image: np.ndarray) -> None:
    """Write an HxWx3 uint8 RGB image as a PNG (zlib from the standard library)."""
    h, w, _ = image.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), image.reshape(h, w * 3)], axis=1)  # filter 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)) + chunk(b"IEND", b""))


def read_png(path: str) -> np.ndarray:
    """Read back a PNG written by :func:`write_png` (8-bit RGB, filter 0)."""
    data = open(path, "rb").read()
    pos, idat, size = 8, b"", None
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h = size
    return np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 3 * w)[:, 1:].reshape(h, w, 3)


class FrameWriter:
    """Annotated frames to ``out``: a video through ffmpeg when ``video`` and ffmpeg is
    installed, else ``frame_NNNNN.png`` files."""

    def __init__(self, out: Optional[str], video: bool, fps: float = 25.0):
        self.out = out
        self.proc = None
        self.count = 0
        if out is None:
            return
        ffmpeg = shutil.which("ffmpeg") if video else None
        if ffmpeg:
            self.path = out if out.endswith((".mp4", ".mkv", ".avi")) else os.path.join(out, "annotated.mp4")
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self.ffmpeg, self.fps = ffmpeg, fps
        else:
            if video:
                print("ffmpeg not found: writing a PNG sequence instead of a video", file=sys.stderr)
            os.makedirs(out, exist_ok=True)
            self.ffmpeg = None

    def write(self, frame_id: int, image: np.ndarray) -> None:
        if self.out is None:
            return
        if self.ffmpeg:
            if self.proc is None:
                h, w = image.shape[:2]
                self.proc = subprocess.Popen([self.ffmpeg, "-loglevel", "error", "-y", "-f", "rawvideo",
                                              "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", str(self.fps), "-i", "-",
                                              "-pix_fmt", "yuv420p", self.path], stdin=subprocess.PIPE)
            self.proc.stdin.write(np.ascontiguousarray(image).tobytes())
        else:
            write_png(os.path.join(self.out, f"frame_{frame_id:05d}.png"), image)
        self.count += 1

    def close(self) -> str:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            return f"{self.count} frames to {self.path}"
        return f"{self.count} PNG frames to {self.out}" if self.out else "no output written (--out not given)"


# -- the application --------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a YOLOv8/YOLO11 .rknn detector (default: the built-in squares detector)")
    parser.add_argument("--classes", type=int, default=None, help="classes of --model (default 80)")
    parser.add_argument("--source", default="synthetic", help="synthetic, a video file, /dev/videoN or N")
    parser.add_argument("--frames", type=int, default=100, help="frames to process (0: until the source ends)")
    parser.add_argument("--out", help="directory for annotated frames (or a .mp4 path with --video)")
    parser.add_argument("--video", action="store_true", help="write a video through ffmpeg when installed")
    parser.add_argument("--json", help="write each frame's detections as a JSON line to this file")
    parser.add_argument("--conf", type=float, default=0.25, help="score threshold")
    parser.add_argument("--raw", action="store_true", help="decode raw int8 outputs (want_float=False)")
    parser.add_argument("--jobs", type=int, default=0, help="inference contexts (0: one per core)")
    parser.add_argument("--fps-every", type=float, default=1.0, help="seconds between live FPS lines")
    parser.add_argument("--quiet", action="store_true", help="print only the FPS lines and the summary")
    args = parser.parse_args(argv)
    if args.frames < 0 or args.jobs < 0 or not 0 <= args.conf <= 1:
        parser.error("--frames and --jobs must be >= 0, --conf in [0, 1]")
    if args.model and not os.path.exists(args.model):
        parser.error(f"model not found: {args.model}")

    import rknnlite
    from rknnlite.pipeline import AsyncInferQueue, Pipeline, PipelineClosedError
    from rknnlite.vision import DetectionStages, YOLOv8, image_input

    tmp = tempfile.TemporaryDirectory()
    if args.model:
        model, labels, palette = args.model, None, None
        classes = args.classes or 80
    else:
        model = build_squares_detector(os.path.join(tmp.name, "squares.rknn"))
        labels, classes, palette = SHAPE_CLASSES, 3, SHAPE_PALETTE
    frames = open_source(args.source, args.frames or None)
    live = is_camera(args.source)
    writer = FrameWriter(args.out, args.video)
    log = open(args.json, "w") if args.json else None
    drawn = 0
    with rknnlite.Context(model) as ctx, AsyncInferQueue(ctx, jobs=args.jobs, want_float=not args.raw) as infer:
        (h, w), _ = image_input(ctx)
        decoder = YOLOv8(num_classes=classes, input_size=(h, w), conf=args.conf, labels=labels)
        stages = DetectionStages.from_context(decoder, ctx, raw=args.raw)
        print(f"model {os.path.basename(model)} ({ctx.backend} backend), input {h}x{w}, {len(infer)} inference "
              f"context(s), source {args.source}", flush=True)
        pipe = Pipeline(stages.preprocess, infer, stages.postprocess, maxsize=4 * len(infer) + 4,
                        drop="oldest" if live else "none")
        kept = {}  # frame id -> frame, until its result is drawn (drop="oldest" may skip some)
        lock = threading.Lock()

        def produce():
            try:
                for frame in frames:
                    with lock:
                        kept[pipe.push(frame)] = frame
            except PipelineClosedError:
                pass  # the consumer closed it (Ctrl-C)
            except Exception as e:  # noqa: BLE001 - a broken source ends the run, not the app
                print(f"source stopped: {e}", file=sys.stderr, flush=True)
            finally:
                pipe.close()

        producer = threading.Thread(target=produce, name="capture", daemon=True)
        t_draw = 0.0
        try:
            producer.start()
            next_report = time.monotonic() + args.fps_every
            for result in pipe:
                with lock:
                    frame = kept.pop(result.frame_id, None)
                    for old in [k for k in kept if k < result.frame_id]:  # dropped frames
                        del kept[old]
                if not result.ok:
                    print(f"frame {result.frame_id:5d}  failed in stage {result.stage}: {result.error}", flush=True)
                    continue
                dets = result.value
                t0 = time.perf_counter()
                writer.write(result.frame_id, dets.draw(frame, palette=palette))
                t_draw += time.perf_counter() - t0
                drawn += 1
                if log:
                    log.write(dets.to_json() + "\n")
                if not args.quiet:
                    text = "  ".join(f"{dets.label(i)} {dets.scores[i]:.2f}" for i in range(len(dets)))
                    print(f"frame {result.frame_id:5d}  {len(dets)} detection(s)  {text}", flush=True)
                if time.monotonic() >= next_report:
                    s = pipe.stats()
                    print(f"fps {s.recent_fps:.1f}  (done {s.completed + s.failed}, dropped {s.dropped})", flush=True)
                    next_report = time.monotonic() + args.fps_every
        except KeyboardInterrupt:
            pipe.close(drain=False)
        finally:
            pipe.close()
            producer.join()
            if log:
                log.close()
        s = pipe.stats()
    tmp.cleanup()
    names = ("letterbox", "inference", "decode+NMS")
    stage_ms = ", ".join(f"{n} p50 {st.latency.p50_ms:.2f} ms" for n, st in zip(names, s.stages))
    draw_ms = f", draw+write {t_draw / max(drawn, 1) * 1e3:.2f} ms/frame"
    print(f"fps {s.throughput_fps:.1f} overall; {s.completed} completed, {s.failed} failed, {s.dropped} dropped, "
          f"{s.cancelled} cancelled of {s.pushed}; latency p50 {s.latency.p50_ms:.2f} ms, "
          f"p99 {s.latency.p99_ms:.2f} ms; {stage_ms}{draw_ms}; {writer.close()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
