"""Post-training int8 quantization for the toolkit's ``build(do_quantization=True)``.

The steps, as RKNN-Toolkit2's ``normal`` algorithm describes them:

1. :func:`read_dataset` reads the calibration list: one sample per line, one path per
   model input separated by spaces, paths relative to the current working directory
   (the vendor's rule).  Samples are ``.npy`` arrays in the model's layout (NCHW for
   4-D inputs), float32, *before* mean/std.
2. :func:`calibrate` runs the optimised float32 graph over the samples (after the
   configured mean/std, as the runtime applies it) and records the minimum and maximum
   of every float activation: the graph inputs after normalisation and every node output.
3. :func:`quantize_graph` turns those ranges into :class:`~rknnlite.model.spec.QuantParams`:
   activations asymmetric int8 per tensor (:func:`activation_params`), the constant
   weights of ``Conv`` / ``ConvTranspose`` / ``Gemm`` / ``MatMul`` symmetric int8 per
   output channel (method ``"channel"``) or per tensor (``"layer"``)
   (:func:`weight_params`).  Biases and other constants stay float.

The software executor then stores every quantized tensor on its int8 grid (fake
quantization), which is what the vendor's simulator does too.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..model.graph import Graph
from ..model.spec import QuantParams, TensorSpec, numpy_dtype

__all__ = [
    "DatasetError",
    "QUANTIZED_DTYPES",
    "QUANTIZED_ALGORITHMS",
    "QUANTIZED_METHODS",
    "read_dataset",
    "normalise",
    "calibrate",
    "activation_params",
    "weight_params",
    "weight_axis",
    "quantize_graph",
]

#: ``config(quantized_dtype=...)`` values this toolkit builds (both mean asymmetric int8).
QUANTIZED_DTYPES = ("asymmetric_quantized-8", "w8a8")
#: ``config(quantized_algorithm=...)`` values this toolkit builds.
QUANTIZED_ALGORITHMS = ("normal",)
#: ``config(quantized_method=...)`` values this toolkit builds.
QUANTIZED_METHODS = ("channel", "layer")

#: Ops whose outputs stay float (the vendor computes them in float16 after int8 inputs:
#: a Softmax output is a float16 tensor in its int8 models).
FLOAT_OUTPUT_OPS = ("Softmax", "LogSoftmax")

#: Ops whose constant input 1 is a weight quantized per output channel.
WEIGHT_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")

_IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
_QMIN, _QMAX = -128, 127


class DatasetError(ValueError):
    """A calibration dataset problem; the message names the file and, where it applies, the line."""


# -- dataset -----------------------------------------------------------------------------------


def read_dataset(path, input_specs: Sequence[TensorSpec]) -> List[List[np.ndarray]]:
    """Read a calibration dataset file: returns one list of arrays (one per input) per sample.

    ``path`` and the paths inside it are resolved against the current working directory.
    Blank lines are skipped.  Each array is loaded from a ``.npy`` file, checked
    against the input's shape (``-1`` dims match anything; a sample without the batch
    dim of a batch-1 input gets it added) and converted to the input's dtype (new
    arrays; the files are not kept open).  Raises :class:`DatasetError` naming the
    file and line for a missing or unreadable file, an empty dataset, a line with the
    wrong number of paths, an image file (not supported yet) or a shape mismatch.
    """
    if path is None:
        raise DatasetError("no dataset given; quantization needs a calibration dataset file "
                           "(build(do_quantization=True, dataset='dataset.txt'))")
    name = os.fspath(path)
    try:
        with open(name, "r", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read dataset {name!r}: {e}") from None
    n = len(input_specs)
    samples = []
    for lineno, line in enumerate(lines, 1):
        paths = line.split()
        if not paths:
            continue
        where = f"dataset {name!r} line {lineno}"
        if len(paths) != n:
            raise DatasetError(f"{where}: {len(paths)} path(s) for {n} model input(s); give one path per "
                               f"input separated by spaces")
        samples.append([_load_sample(p, spec, i, where) for i, (p, spec) in enumerate(zip(paths, input_specs))])
    if not samples:
        raise DatasetError(f"dataset {name!r} is empty: it needs at least one line with one path per input")
    return samples


def _load_sample(path: str, spec: TensorSpec, index: int, where: str) -> np.ndarray:
    ext = os.path.splitext(path)[1].lower()
    if ext in _IMAGE_EXTS:
        raise DatasetError(f"{where}: {path!r}: image files are not supported yet as calibration data; "
                           f"save the input as a .npy array (NCHW float32, before mean/std)")
    if ext != ".npy":
        raise DatasetError(f"{where}: {path!r}: only .npy files are supported as calibration data")
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{where}: cannot read {path!r}: {e}") from None
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: {path!r} does not hold a numeric array")
    shape = tuple(spec.shape)
    if len(shape) == a.ndim + 1 and shape[0] in (1, -1):
        a = a[np.newaxis]
    if a.ndim != len(shape) or any(d >= 0 and d != s for d, s in zip(shape, a.shape)):
        raise DatasetError(f"{where}: {path!r} has shape {list(a.shape)}, input {index} ({spec.name!r}) "
                           f"needs {list(shape)}")
    return np.array(a, dtype=numpy_dtype(spec.dtype))


# -- calibration -------------------------------------------------------------------------------


def normalise(x: np.ndarray, mean: Optional[Sequence[float]], std: Optional[Sequence[float]]) -> np.ndarray:
    """``(x - mean) / std`` per channel on axis 1 in float32, as the runtime computes it
    (a new array); ``x`` itself (no copy) when there is nothing to apply."""
    if mean is None or (all(m == 0 for m in mean) and all(s == 1 for s in std)):
        return x
    shape = (1, len(mean)) + (1,) * (x.ndim - 2)
    out = np.subtract(x, np.reshape(np.asarray(mean, np.float32), shape), dtype=np.float32)
    np.divide(out, np.reshape(np.asarray(std, np.float32), shape), out=out)
    return out


def calibrate(graph: Graph, samples: Iterable[Sequence[np.ndarray]],
              preprocess: Optional[Sequence[Optional[Tuple[Sequence[float], Sequence[float]]]]] = None
              ) -> Dict[str, Tuple[float, float]]:
    """Run ``graph`` in float32 over ``samples`` and return ``{tensor: (min, max)}`` for every
    float graph input (after ``preprocess``: per input ``(mean, std)`` or None) and every
    float node output.  Tensors holding NaN or infinities are left out.  ``graph`` is not
    changed."""
    from ..backends.software.executor import Executor

    produced = []
    seen = set(graph.inputs)
    for node in graph.nodes:
        for name in node.outputs:
            if name and name not in seen:
                seen.add(name)
                produced.append(name)
    watched = list(graph.inputs) + produced
    probe = Graph(graph.nodes, list(graph.inputs), produced, graph.constants)
    state = Executor(probe, "float32").new_state()
    lo: Dict[str, float] = {}
    hi: Dict[str, float] = {}
    bad = set()
    try:
        for sample in samples:
            feeds = []
            for i, x in enumerate(sample):
                p = preprocess[i] if preprocess and i < len(preprocess) else None
                feeds.append(normalise(x, *p) if p is not None and x.dtype.kind == "f" else x)
            outs = state.run(feeds)
            for name, value in zip(watched, feeds + outs):
                if value.dtype.kind != "f" or value.size == 0 or name in bad:
                    continue
                vmin, vmax = float(np.min(value)), float(np.max(value))
                if not (np.isfinite(vmin) and np.isfinite(vmax)):
                    bad.add(name)
                    continue
                lo[name] = min(lo.get(name, vmin), vmin)
                hi[name] = max(hi.get(name, vmax), vmax)
    finally:
        state.close()
    return {name: (lo[name], hi[name]) for name in watched if name in lo and name not in bad}


# -- parameters --------------------------------------------------------------------------------


def activation_params(vmin: float, vmax: float) -> QuantParams:
    """Asymmetric int8 per tensor for values in ``[vmin, vmax]``: the range is widened to
    contain 0, ``scale = (max - min) / 255`` and ``zero_point = round(-128 - min / scale)``
    clipped to int8.  An all-zero range gets scale 1."""
    lo, hi = min(float(vmin), 0.0), max(float(vmax), 0.0)
    scale = (hi - lo) / (_QMAX - _QMIN)
    if not scale > 0:
        return QuantParams("int8", (1.0,), (0,))
    zp = int(np.clip(np.round(_QMIN - lo / scale), _QMIN, _QMAX))
    return QuantParams("int8", (scale,), (zp,))


def weight_params(w: np.ndarray, axis: Optional[int]) -> QuantParams:
    """Symmetric int8 for a weight: ``scale = max|w| / 127``, zero point 0, per slice along
    ``axis`` (per channel) or for the whole tensor (``axis=None``).  All-zero channels
    get scale 1 (their values stay 0 whatever the scale)."""
    a = np.abs(np.asarray(w, dtype=np.float64))
    if axis is None:
        peaks = np.array([a.max() if a.size else 0.0])
    else:
        peaks = np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1).max(axis=1)
    scales = tuple(float(p / _QMAX) if p > 0 else 1.0 for p in peaks)
    return QuantParams("int8", scales, (0,) * len(scales), axis)


def weight_axis(op: str, attrs: Mapping, w: np.ndarray) -> Optional[int]:
    """The output-channel axis of ``op``'s weight ``w`` (input 1): 0 for Conv (``[M, C/g, k...]``),
    1 for ConvTranspose (``[C, M/g, k...]``), 0 or 1 for Gemm by ``transB``, the last
    axis for MatMul; None when the weight has no such axis (a 1-D MatMul operand)."""
    if op == "Conv":
        return 0
    if op == "ConvTranspose":
        return 1 if w.ndim >= 2 else None
    if op == "Gemm":
        return 0 if attrs.get("transB", 0) else 1
    if op == "MatMul":
        return w.ndim - 1 if w.ndim >= 2 else None
    raise ValueError(f"{op} has no quantized weight")


def quantize_graph(graph: Graph, ranges: Mapping[str, Tuple[float, float]],
                   method: str = "channel") -> Dict[str, QuantParams]:
    """The quantization table for ``graph`` from calibration ``ranges`` (see :func:`calibrate`):
    every calibrated activation per tensor, except tensors some node reads as a shape
    argument (they stay exact) and outputs of :data:`FLOAT_OUTPUT_OPS`; the float
    constant input 1 of Conv / ConvTranspose / Gemm / MatMul per channel
    (``method="channel"``) or per tensor (``"layer"``).
    Returns a new dict; ``graph`` is not changed."""
    if method not in QUANTIZED_METHODS:
        raise ValueError(f"quantized_method {method!r} is not one of {QUANTIZED_METHODS}")
    from ..backends.software.ops import SHAPE_INPUTS

    keep_float = set()
    for node in graph.nodes:
        if node.op in FLOAT_OUTPUT_OPS:
            keep_float.update(node.outputs)
        for k in SHAPE_INPUTS.get(node.op, ()):
            if k < len(node.inputs) and node.inputs[k]:
                keep_float.add(node.inputs[k])
    quant: Dict[str, QuantParams] = {}
    for name, (vmin, vmax) in ranges.items():
        if name not in graph.constants and name not in keep_float:
            quant[name] = activation_params(vmin, vmax)
    for node in graph.nodes:
        if node.op not in WEIGHT_OPS or len(node.inputs) < 2:
            continue
        name = node.inputs[1]
        w = graph.constants.get(name)
        if w is None or w.dtype.kind != "f" or w.size == 0 or name in keep_float:
            continue
        axis = weight_axis(node.op, node.attrs, w) if method == "channel" else None
        q = weight_params(w, axis)
        if name in quant and quant[name] != q:
            q = weight_params(w, None)  # shared by layers that disagree on the axis: one scale fits all
        quant[name] = q
    return quant
