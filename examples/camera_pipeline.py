#!/usr/bin/env python3
"""Camera processing with ``rknnlite.pipeline``: capture, letterbox, infer, top-k, in parallel.

    python examples/camera_pipeline.py                       # synthetic frames, bundled demo model
    python examples/camera_pipeline.py --frames 300 --topk 5
    python examples/camera_pipeline.py --source video.mp4    # a video file (needs OpenCV)
    python examples/camera_pipeline.py --source /dev/video0  # a V4L2 camera (needs OpenCV)
    python examples/camera_pipeline.py --model classifier.rknn --jobs 3

Frames come from OpenCV (``pip install opencv-python-headless``) for files and cameras,
or from a built-in synthetic generator (moving colour bars, no dependency).  Each frame
goes through three stages on their own threads:

1. letterbox: scale the HxWx3 BGR frame into the model's input size keeping its aspect
   ratio, pad with grey, convert to the model's NHWC RGB uint8 input (image inputs are NHWC,
   as librknnrt reports them);
2. inference on an :class:`~rknnlite.pipeline.AsyncInferQueue` (one context per core);
3. postprocessing: the top-k classes of the classifier's probabilities.

The main thread prints every result in frame order and the live FPS once a second.  A
live camera drops its oldest waiting frame when the pipeline is full (``drop="oldest"``):
results stay real-time instead of lagging; a file or the generator waits instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Iterator, Optional, Tuple

import numpy as np

GREY = 114


# -- sources ----------------------------------------------------------------------------------

def synthetic_frames(n: Optional[int], height: int = 480, width: int = 640) -> Iterator[np.ndarray]:
    """Deterministic HxWx3 uint8 BGR frames: colour bars moving by 8 pixels a frame."""
    base = np.zeros((height, width, 3), np.uint8)
    x = np.arange(width)
    base[..., 0] = (x * 255 // max(1, width - 1)).astype(np.uint8)[None, :]
    base[..., 1] = (np.arange(height) * 255 // max(1, height - 1)).astype(np.uint8)[:, None]
    base[..., 2] = ((x // 80) % 2 * 255).astype(np.uint8)[None, :]
    k = 0
    while n is None or k < n:
        yield np.roll(base, 8 * k, axis=1)
        k += 1


def opencv_frames(source: str, n: Optional[int]) -> Iterator[np.ndarray]:
    """Frames of a video file or a camera (``/dev/videoN`` or its number) through OpenCV."""
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
            yield frame
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


# -- stages -----------------------------------------------------------------------------------

def letterbox(frame: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """``frame`` (HxWx3 uint8 BGR) scaled into ``size`` = (height, width) keeping its aspect
    ratio (nearest neighbour), centred on grey, as a 1xHxWx3 uint8 RGB array (NHWC, a new array)."""
    h, w = frame.shape[:2]
    th, tw = size
    scale = min(th / h, tw / w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    rows = np.minimum((np.arange(nh) + 0.5) / scale, h - 1).astype(np.intp)
    cols = np.minimum((np.arange(nw) + 0.5) / scale, w - 1).astype(np.intp)
    out = np.full((th, tw, 3), GREY, np.uint8)
    top, left = (th - nh) // 2, (tw - nw) // 2
    out[top:top + nh, left:left + nw] = frame[rows[:, None], cols[None, :]]
    return np.ascontiguousarray(out[..., ::-1])[None]


def top_k(outputs, k: int):
    """``[(class, probability), ...]``: the ``k`` best classes of the first output."""
    prob = np.asarray(outputs[0]).reshape(-1)
    best = np.argsort(prob)[::-1][:k]
    return [(int(i), float(prob[i])) for i in best]


def input_size(ctx) -> Tuple[int, int]:
    """(height, width) of the model's 4-D image input (NCHW or NHWC)."""
    attr = ctx.inputs[0]
    dims = tuple(attr.dims)
    if len(dims) != 4:
        raise SystemExit(f"the model's input {attr.name!r} has shape {list(dims)}; an image model is needed")
    return (dims[1], dims[2]) if attr.fmt.name == "NHWC" else (dims[2], dims[3])


# -- the application --------------------------------------------------------------------------

def main(argv=None) -> int:
    from rknnlite.demo import DEMO_MODEL_PATH

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEMO_MODEL_PATH), help="a .rknn classifier (default: the demo model)")
    parser.add_argument("--source", default="synthetic", help="synthetic, a video file, /dev/videoN or N")
    parser.add_argument("--frames", type=int, default=100, help="frames to process (0: until the source ends)")
    parser.add_argument("--topk", type=int, default=3, help="classes printed per frame")
    parser.add_argument("--jobs", type=int, default=0, help="inference contexts (0: one per core)")
    parser.add_argument("--fps-every", type=float, default=1.0, help="seconds between live FPS lines")
    parser.add_argument("--quiet", action="store_true", help="print only the FPS lines and the summary")
    args = parser.parse_args(argv)
    if args.frames < 0 or args.topk < 1 or args.jobs < 0:
        parser.error("--frames and --jobs must be >= 0, --topk >= 1")
    if not os.path.exists(args.model):
        parser.error(f"model not found: {args.model}")

    import rknnlite
    from rknnlite.pipeline import AsyncInferQueue, Pipeline, PipelineClosedError

    frames = open_source(args.source, args.frames or None)
    live = is_camera(args.source)
    with rknnlite.Context(args.model) as ctx, AsyncInferQueue(ctx, jobs=args.jobs) as infer:
        size = input_size(ctx)
        print(f"model {os.path.basename(args.model)} ({ctx.backend} backend), input {size[0]}x{size[1]}, "
              f"{len(infer)} inference context(s), source {args.source}", flush=True)

        def preprocess(frame):
            return letterbox(frame, size)

        def postprocess(outputs):
            return top_k(outputs, args.topk)

        pipe = Pipeline(preprocess, infer, postprocess, maxsize=4 * len(infer) + 4,
                        drop="oldest" if live else "none")

        def produce():
            try:
                for frame in frames:
                    pipe.push(frame)
            except PipelineClosedError:
                pass  # the consumer closed it (Ctrl-C)
            except Exception as e:  # noqa: BLE001 - a broken source ends the run, not the app
                print(f"source stopped: {e}", file=sys.stderr, flush=True)
            finally:
                pipe.close()

        producer = threading.Thread(target=produce, name="capture", daemon=True)
        try:
            producer.start()
            next_report = time.monotonic() + args.fps_every
            for result in pipe:
                if not args.quiet:
                    if result.ok:
                        text = "  ".join(f"{c}:{p:.3f}" for c, p in result.value)
                        print(f"frame {result.frame_id:5d}  top-{args.topk} {text}", flush=True)
                    else:
                        print(f"frame {result.frame_id:5d}  failed in stage {result.stage}: {result.error}",
                              flush=True)
                if time.monotonic() >= next_report:
                    s = pipe.stats()
                    print(f"fps {s.recent_fps:.1f}  (done {s.completed + s.failed}, dropped {s.dropped})", flush=True)
                    next_report = time.monotonic() + args.fps_every
        except KeyboardInterrupt:
            pipe.close(drain=False)
        finally:
            pipe.close()
            producer.join()
        s = pipe.stats()
    stage_ms = ", ".join(f"{st.name} p50 {st.latency.p50_ms:.2f} ms" for st in s.stages)
    print(f"fps {s.throughput_fps:.1f} overall; {s.completed} completed, {s.failed} failed, {s.dropped} dropped, "
          f"{s.cancelled} cancelled of {s.pushed}; latency p50 {s.latency.p50_ms:.2f} ms, "
          f"p99 {s.latency.p99_ms:.2f} ms; {stage_ms}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
