#!/usr/bin/env python3
"""Per-stage time of a YOLOv8n 640x640 camera frame with ``rknnlite.vision``.

    python tools/bench/bench_vision.py [--runs 200] [--onnx yolov8n.onnx] [--infer-runs 5]

Stages, each timed alone, single thread, interleaved rounds (median over ``--runs``):

* letterbox of a 1920x1080 and a 640x480 uint8 frame into 640x640;
* inference of ``--onnx`` (an Ultralytics YOLOv8n export at 640, e.g.
  ``yolo export model=yolov8n.pt format=onnx`` or the random-weight model of
  ``tools/make_vision_fixtures.py``'s recipe at 640) converted by ``rknnlite.toolkit``
  (float32, and int8 with ``--int8``) on the software backend; left out without ``--onnx``;
* decode + NMS of 8400 candidates x 80 classes on synthetic outputs of the two layouts:
  the concatenated (1, 84, 8400) float32 output, and the model zoo's split heads (box
  distribution, class scores, score sum per stride) in float32 and raw int8.  Two
  scenes: 30 objects of random classes, and a crowd of 30 objects of one class (NMS's
  hardest case: every candidate competes with every other).  About 20 cells fire per
  object, so ~600 candidates reach NMS.

Times are the calling thread's CPU time (``--clock cpu``, the default; this machine's
cores are shared, wall time mostly measures the wait for one) or wall time (``--clock wall``).
Target: decode + NMS <= 1.5 ms, float or int8.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleaved_ms, machine  # noqa: E402
from rknnlite.vision import YOLOv8, letterbox  # noqa: E402

SIZE = 640
GRIDS = [(80, 80), (40, 40), (20, 20)]
NC = 80


def scene(rng, objects: int = 30, classes=None):
    """(1, 84, 8400) float32 YOLOv8 output: background scores log-uniform in 1e-6..1e-3 (a trained model's
    background; their sum stays below the threshold, as the score-sum output assumes), ~20 cells around
    each object scoring 0.3-0.9 for its class, boxes of 50-70 pixels there."""
    cx = np.concatenate([np.tile((np.arange(w) + 0.5) * SIZE / w, h) for h, w in GRIDS])
    cy = np.concatenate([np.repeat((np.arange(h) + 0.5) * SIZE / h, w) for h, w in GRIDS])
    n = cx.size
    y = np.empty((1, 4 + NC, n), np.float32)
    y[0, 0], y[0, 1] = cx, cy
    y[0, 2:4] = rng.uniform(10, 100, (2, n))
    y[0, 4:] = 10 ** rng.uniform(-6, -3, (NC, n))  # background: log-uniform 1e-6..1e-3
    for ox, oy in rng.uniform(40, SIZE - 40, (objects, 2)):
        near = np.argsort(np.hypot(cx - ox, cy - oy))[:20]
        cls = rng.integers(NC) if classes is None else classes
        y[0, 4 + cls, near] = rng.uniform(0.3, 0.9, near.size)
        y[0, 2:4, near] = rng.uniform(50, 70, (near.size, 2))  # (advanced index first)
    return y


def split_heads(y):
    """The same scene as the model zoo's 9 outputs: per stride the 64-bin box distribution
    (logits peaked at each side's distance in cells), class scores, their clipped sum."""
    outs, start = [], 0
    bins = np.arange(16, dtype=np.float32)
    for (h, w), stride in zip(GRIDS, (8, 16, 32)):
        cells = y[0, :, start:start + h * w]
        start += h * w
        half = np.clip(np.stack([cells[2], cells[3], cells[2], cells[3]]) / 2 / stride, 0, 15)  # l, t, r, b
        reg = -0.5 * (bins[None, :, None] - half[:, None, :]) ** 2                             # (4, 16, cells)
        outs.append(reg.reshape(1, 64, h, w).astype(np.float32))
        cls = cells[4:].reshape(1, NC, h, w)
        outs.append(np.ascontiguousarray(cls))
        outs.append(np.clip(cls.sum(1, keepdims=True), 0, 1))
    return outs


def quantize(outs):
    """int8 codes and (scale, zp) per output: box logits in [-112, 0], scores in [0, 1]."""
    qs = [((112.5 / 255, 127) if k % 3 == 0 else (1 / 255, -128)) for k in range(len(outs))]
    return [np.clip(np.rint(y / s) + z, -128, 127).astype(np.int8) for y, (s, z) in zip(outs, qs)], qs


def inference_rows(onnx_path: str, runs: int, int8: bool, clock):
    import rknnlite
    from rknnlite.toolkit import RKNN

    rows = []
    rng = np.random.default_rng(1)
    frame, _ = letterbox(rng.integers(0, 255, (1080, 1920, 3), np.uint8), SIZE)
    for quantized in ([False, True] if int8 else [False]):
        with tempfile.TemporaryDirectory() as tmp:
            rknn = RKNN()
            rknn.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]],
                        float_dtype="float32")
            if rknn.load_onnx(onnx_path) != 0:
                raise SystemExit(f"load_onnx failed for {onnx_path}")
            dataset = None
            if quantized:
                for i in range(4):
                    np.save(Path(tmp) / f"f{i}.npy",
                            rng.integers(0, 255, (1, 3, SIZE, SIZE)).astype(np.float32))
                (Path(tmp) / "ds.txt").write_text("".join(f"{tmp}/f{i}.npy\n" for i in range(4)))
                dataset = f"{tmp}/ds.txt"
            if rknn.build(do_quantization=quantized, dataset=dataset) != 0:
                raise SystemExit("build failed")
            path = str(Path(tmp) / "m.rknn")
            rknn.export_rknn(path)
            rknn.release()
            with rknnlite.Context(path, backend="software") as ctx:
                nchw = ctx.inputs[0].fmt.name == "NCHW"
                x = np.ascontiguousarray(frame.transpose(2, 0, 1))[None] if nchw else frame[None]
                fmt = "nchw" if nchw else "nhwc"
                ms = interleaved_ms([lambda: ctx.run([x], data_format=fmt)], runs, warmup=1, clocks=[clock])[0]
        rows.append((f"inference, YOLOv8n {'int8' if quantized else 'float32'} (software backend)",
                     f"{Path(onnx_path).name}", statistics.median(ms), None))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="timed rounds of the numpy stages")
    parser.add_argument("--onnx", help="YOLOv8n ONNX (640x640) to time the inference stage")
    parser.add_argument("--infer-runs", type=int, default=5, help="timed inference runs")
    parser.add_argument("--int8", action="store_true", help="also an int8 build of --onnx")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args(argv)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    rng = np.random.default_rng(0)
    hd = rng.integers(0, 255, (1080, 1920, 3), np.uint8)
    vga = rng.integers(0, 255, (480, 640, 3), np.uint8)
    dec = YOLOv8(num_classes=NC, input_size=SIZE)
    cases = []
    for name, classes in (("30 objects, random classes", None), ("crowd: 30 objects, one class", 0)):
        y = scene(np.random.default_rng(2), classes=classes)
        split = split_heads(y)
        raw, qs = quantize(split)
        n_cand = int((y[0, 4:].max(0) >= dec.conf).sum())
        cases += [(f"decode + NMS, (1, 84, 8400) float32, {name}", f"{n_cand} candidates", lambda y=y: dec([y])),
                  (f"decode + NMS, split heads float32, {name}", f"{len(dec(split))} kept",
                   lambda s=split: dec(s)),
                  (f"decode + NMS, split heads int8, {name}", f"{len(dec(raw, qs))} kept",
                   lambda r=raw, q=qs: dec(r, q))]
    stages = [("letterbox 1920x1080 -> 640x640", "uint8 HWC", lambda: letterbox(hd, SIZE)),
              ("letterbox 640x480 -> 640x640", "uint8 HWC", lambda: letterbox(vga, SIZE))] + cases
    times = interleaved_ms([fn for _, _, fn in stages], args.runs, warmup=10, clocks=[clock] * len(stages))
    rows = [(name, what, statistics.median(t), 1.5 if name.startswith("decode") else None)
            for (name, what, _), t in zip(stages, times)]
    if args.onnx:
        rows[2:2] = inference_rows(args.onnx, args.infer_runs, args.int8, clock)

    print(machine())
    print(f"clock: {'calling thread CPU time' if args.clock == 'cpu' else 'wall time'}; "
          f"median of {args.runs} rounds ({args.infer_runs} for inference)\n")
    print("| stage | input | ms | target |")
    print("|---|---|---:|---|")
    for name, what, ms, target in rows:
        mark = "" if target is None else (f"<= {target} ms: {'met' if ms <= target else 'MISSED'}")
        print(f"| {name} | {what} | {ms:.3f} | {mark} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
