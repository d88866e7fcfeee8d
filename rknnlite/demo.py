"""The bundled demo model and the ``rknnlite demo`` job.

``demo.rknn`` (shipped in ``rknnlite/data/``) is a small image classifier made by
:func:`build_demo_model` (regenerate it with ``python tools/make_demo_model.py``):

    image 1x3x32x32 (uint8 or float, NCHW; normalised by the model as (x - 127.5) / 127.5)
      -> Conv 3->8 3x3 pad 1 -> Relu -> Conv 8->16 3x3 stride 2 pad 1 -> Relu
      -> GlobalAveragePool -> Flatten -> Gemm 16->10 -> Softmax -> prob 1x10
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .errors import InvalidParamError
from .model.graph import Graph, Node
from .model.metadata import Preprocess, build_metadata
from .model.portable import write_portable
from .model.spec import TensorSpec

__all__ = ["DEMO_MODEL_PATH", "build_demo_model", "demo_image", "run_demo"]

DEMO_MODEL_PATH = Path(__file__).parent / "data" / "demo.rknn"
_SEED = 2026


def build_demo_model(float_dtype: str = "float16") -> bytes:
    """The demo classifier as portable model bytes (deterministic: same bytes every call)."""
    rng = np.random.default_rng(_SEED)

    def w(*shape):
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    constants = {
        "conv1.w": w(8, 3, 3, 3), "conv1.b": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "conv2.w": w(16, 8, 3, 3), "conv2.b": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "fc.w": w(10, 16), "fc.b": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }
    nodes = [
        Node("Conv", "conv1", ["image", "conv1.w", "conv1.b"], ["c1"], {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}),
        Node("Relu", "relu1", ["c1"], ["r1"]),
        Node("Conv", "conv2", ["r1", "conv2.w", "conv2.b"], ["c2"],
             {"pads": [1, 1, 1, 1], "strides": [2, 2], "kernel_shape": [3, 3]}),
        Node("Relu", "relu2", ["c2"], ["r2"]),
        Node("GlobalAveragePool", "gap", ["r2"], ["g"]),
        Node("Flatten", "flatten", ["g"], ["f"], {"axis": 1}),
        Node("Gemm", "fc", ["f", "fc.w", "fc.b"], ["logits"], {"transB": 1}),
        Node("Softmax", "softmax", ["logits"], ["prob"], {"axis": 1}),
    ]
    graph = Graph(nodes, ["image"], ["prob"], constants)
    metadata = build_metadata(
        [TensorSpec("image", (1, 3, 32, 32), "float32", "NCHW")],
        [TensorSpec("prob", (1, 10), "float32", "UNDEFINED")],
        target_platforms=("rk3588", "rk3576", "rk3568", "rk3566", "rk3562"),
        custom_string="rknnlite demo classifier",
        float_dtype=float_dtype,
        preprocess=(Preprocess((127.5, 127.5, 127.5), (127.5, 127.5, 127.5)),),
    )
    return write_portable(metadata, graph)


def demo_image() -> np.ndarray:
    """A deterministic 1x3x32x32 uint8 test picture (colour gradients), NCHW: give it to the demo
    model (whose input attribute is NHWC) with ``data_format="nchw"``."""
    y, x = np.mgrid[0:32, 0:32]
    planes = [x * 8, y * 8, (x + y) * 4]
    return np.clip(np.stack(planes), 0, 255).astype(np.uint8)[None]


def run_demo(model_path: Optional[Path] = None, runs: int = 20, write: Callable[[str], None] = print) -> dict:
    """Load the demo model on the software backend, run it, and report through ``write``.

    ``runs``: timed runs after the first (at least 1).  Returns ``{"outputs": [...],
    "load_ms": float, "first_ms": float, "mean_ms": float}``.

    Raises:
        InvalidParamError: ``runs`` is not an int >= 1.
    """
    from .runtime.context import Context

    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise InvalidParamError(f"runs (--runs) must be an int >= 1 (timed runs after the first), got {runs!r}",
                                op="demo")

    path = Path(model_path) if model_path else DEMO_MODEL_PATH
    t0 = time.perf_counter()
    ctx = Context(str(path), backend="software")
    load_ms = (time.perf_counter() - t0) * 1e3
    with ctx:
        write(f"model   {path} ({path.stat().st_size} bytes, {ctx.backend} backend, {ctx.custom_string!r})")
        for a in ctx.inputs:
            write(f"input   {a.index} {a.name}: {list(a.dims)} {a.type.name} {a.fmt.name}")
        for a in ctx.outputs:
            write(f"output  {a.index} {a.name}: {list(a.dims)} {a.type.name}")
        image = demo_image()
        write(f"feeding image {list(image.shape)} uint8 NCHW, pixel mean {image.mean():.1f}")
        t1 = time.perf_counter()
        outputs = ctx.run([image], data_format="nchw")
        first_ms = (time.perf_counter() - t1) * 1e3
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            ctx.run([image], data_format="nchw")
            times.append((time.perf_counter() - t) * 1e3)
    prob = outputs[0][0]
    top = np.argsort(prob)[::-1][:3]
    write("prob    " + " ".join(f"{p:.4f}" for p in prob))
    write("top-3   " + ", ".join(f"class {i}: {prob[i]:.4f}" for i in top))
    mean_ms = float(np.mean(times)) if times else first_ms
    write(f"timing  load {load_ms:.2f} ms, first run {first_ms:.2f} ms, "
          f"mean of {runs} runs {mean_ms:.3f} ms (min {min(times, default=first_ms):.3f} ms)")
    return {"outputs": outputs, "load_ms": load_ms, "first_ms": first_ms, "mean_ms": mean_ms}
