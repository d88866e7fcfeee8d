"""Calibration datasets for ``RKNN.build(do_quantization=True, dataset=...)``.

The file format is RKNN-Toolkit2's:

* one sample per line, one path per model input separated by spaces (whitespace);
* a relative path is read from the dataset file's folder, as RKNN-Toolkit2 2.5.0 resolves
  it (its examples list ``./imgs/...`` beside their ``dataset.txt`` and run from elsewhere);
  one found only under the current working directory is read from there, with a warning
  (the vendor would not find it);
* blank lines are skipped (the vendor's chapter defines no comment syntax, so a line
  starting with ``#`` is a path like any other).

Each path names either

* an image (``.jpg``/``.jpeg``/``.png``/``.bmp``), decoded with Pillow into HWC RGB
  ``uint8`` pixels (a 1-channel input gets 8-bit grayscale), optionally reversed to BGR
  (``quant_img_RGB2BGR=True``, images only), then laid out like the model input
  (transposed to CHW for an NCHW input) with the batch dim added and cast to the
  input's dtype.  An image of another height or width is resized to the input's as
  RKNN-Toolkit2 2.5.0 does (silently; here an info log line): bilinear, OpenCV's
  ``INTER_LINEAR`` (:func:`resize_linear`);
* or a ``.npy`` array in the model's layout (NCHW for 4-D inputs, float32, as the
  vendor's 2.5.0 requires), with or without the batch dim of a batch-1 input.

Samples are raw values *before* mean/std: the model normalises them itself.
"""

from __future__ import annotations

import logging
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..model.spec import TensorSpec, numpy_dtype

__all__ = ["DatasetError", "IMAGE_EXTS", "read_dataset", "dataset_lines", "load_sample", "load_image",
           "resize_linear"]

_log = logging.getLogger("rknnlite.toolkit")

#: File name endings read as images (any case).
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp")


class DatasetError(ValueError):
    """A calibration dataset problem; the message names the file and, where it applies, the line."""


def read_dataset(path, input_specs: Sequence[TensorSpec], rgb2bgr=False) -> List[List[np.ndarray]]:
    """Read a calibration dataset file: returns one list of arrays (one per input) per sample.

    ``path`` is resolved against the current working directory, the paths inside it as
    :func:`dataset_lines` says.  Every returned array is new (files are read and closed),
    shaped like its input (a ``-1`` dim takes the sample's size) and of the input's dtype.  ``rgb2bgr`` reverses
    the channel order of image samples only (``config(quant_img_RGB2BGR=True)``); a list gives
    one flag per input.

    Raises :class:`DatasetError` naming the dataset file and line for: no dataset, an
    unreadable or empty dataset file, a line with the wrong number of paths, a missing
    or unreadable sample file, an unsupported file type, an image whose size or channel
    count does not fit the input, a ``.npy`` of the wrong shape, or Pillow missing for
    an image.
    """
    n = len(input_specs)
    flags = list(rgb2bgr) if isinstance(rgb2bgr, (list, tuple)) else [bool(rgb2bgr)] * n
    if len(flags) != n:
        raise DatasetError(f"quant_img_RGB2BGR has {len(flags)} value(s) for {n} model input(s); give one per "
                           f"input, or one True/False for all")
    samples = []
    lines = dataset_lines(path)
    name = os.fspath(path)
    for lineno, paths in lines:
        where = f"dataset {name!r} line {lineno}"
        if len(paths) != n:
            raise DatasetError(f"{where}: {len(paths)} path(s) for {n} model input(s); give one path per "
                               f"input separated by spaces")
        samples.append([_load_sample(p, spec, i, where, flags[i])
                        for i, (p, spec) in enumerate(zip(paths, input_specs))])
    if not samples:
        raise DatasetError(f"dataset {name!r} is empty: it needs at least one line with one path per input")
    return samples


def dataset_lines(path) -> List[Tuple[int, List[str]]]:
    """The sample lines of a dataset file as ``(line number, [path per input])``, blank
    lines skipped.  A relative path is joined to the dataset file's folder (RKNN-Toolkit2
    2.5.0's rule); when no file is there but one is under the current working directory,
    that one is returned and a warning logged.  The files are not otherwise checked.

    Raises :class:`DatasetError` when ``path`` is None or the file cannot be read."""
    if path is None:
        raise DatasetError("no dataset given; quantization needs a calibration dataset file "
                           "(build(do_quantization=True, dataset='dataset.txt'))")
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise DatasetError(f"dataset must be the path of a dataset file (one line of sample paths per sample), "
                           f"not {type(path).__name__} {path!r}")
    name = os.fspath(path)
    try:
        with open(name, "r", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read dataset {name!r}: {e}") from None
    folder = os.path.dirname(os.path.abspath(name))
    return [(lineno, [_sample_path(p, folder, f"dataset {name!r} line {lineno}") for p in line.split()])
            for lineno, line in enumerate(lines, 1) if line.split()]


def _sample_path(path: str, folder: str, where: str) -> str:
    if os.path.isabs(path):
        return path
    beside = os.path.join(folder, path)
    try:  # relative to the current directory again, as short as it gets, for messages
        beside = os.path.relpath(beside)
    except ValueError:  # another drive (Windows)
        beside = os.path.normpath(beside)
    if not os.path.exists(beside) and os.path.exists(path):
        _log.warning("%s: %r is not in the dataset file's folder %r; read from the current directory "
                     "(RKNN-Toolkit2 reads relative dataset paths from the dataset file's folder only)",
                     where, path, folder)
        return path
    return beside


def load_sample(path: str, tensor, rgb2bgr: bool = False, where: Optional[str] = None,
                index: Optional[int] = None) -> np.ndarray:
    """One sample file (image or ``.npy``, as in a dataset line) for a model input, as a new
    array in the model's layout with the batch dim.

    ``tensor`` describes the input: a :class:`~rknnlite.model.spec.TensorSpec` (the
    array gets its dtype) or a runtime :class:`~rknnlite.runtime.TensorAttr` (4-D
    inputs are then given NCHW whatever ``attr.fmt`` says, as the toolkit's ONNX models
    take them, and quantized or float inputs get float32: raw values before mean/std and
    quantization).  Raises :class:`DatasetError` naming the file (and ``where``, e.g.
    ``"inputs[0]"``) and the input (``index``, default ``tensor.index`` or 0), as
    :func:`read_dataset`.
    """
    spec = tensor if isinstance(tensor, TensorSpec) else _spec_of_attr(tensor)
    if index is None:
        index = getattr(tensor, "index", 0)
    return _load_sample(path, spec, index, where or f"sample {path!r}", rgb2bgr)


def _spec_of_attr(attr) -> TensorSpec:
    shape = tuple(int(d) for d in attr.shape)
    fmt = getattr(getattr(attr, "fmt", None), "name", "")
    if len(shape) == 4 and fmt == "NHWC":
        shape = (shape[0], shape[3], shape[1], shape[2])
    dtype = np.dtype(attr.dtype)
    quantized = getattr(getattr(attr, "qnt_type", None), "name", "NONE") != "NONE"
    name = "float32" if dtype.kind == "f" or quantized else dtype.name
    return TensorSpec(attr.name, shape, name, "NCHW" if len(shape) == 4 else "UNDEFINED")


def _load_sample(path: str, spec: TensorSpec, index: int, where: str, rgb2bgr: bool) -> np.ndarray:
    ext = os.path.splitext(path)[1].lower()
    what = f"input {index} ({spec.name!r})"
    if ext in IMAGE_EXTS:
        a = _image_sample(path, spec, what, where, rgb2bgr)
    elif ext == ".npy":
        a = _npy_sample(path, spec, what, where)
    else:
        raise DatasetError(f"{where}: {path!r}: unsupported file type; calibration samples are images "
                           f"({', '.join(IMAGE_EXTS)}) or .npy arrays")
    return np.array(a, dtype=numpy_dtype(spec.dtype))


def _npy_sample(path: str, spec: TensorSpec, what: str, where: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise DatasetError(f"{where}: cannot read {path!r}: no such file")
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
        layout = " (NCHW, float32)" if len(shape) == 4 else ""
        raise DatasetError(f"{where}: {path!r} has shape {list(a.shape)}, {what} needs {list(shape)}{layout}")
    return a


def _image_layout(spec: TensorSpec) -> Tuple[bool, int, int, int]:
    """``(channels_first, C, H, W)`` of a 4-D input; ``-1`` for a dynamic dim."""
    shape = tuple(spec.shape)
    nhwc = spec.layout == "NHWC"
    if nhwc:
        return False, shape[3], shape[1], shape[2]
    return True, shape[1], shape[2], shape[3]


def load_image(path: str) -> np.ndarray:
    """Decode an image file into HWC ``uint8`` pixels (a new array): RGB for colour images
    (palette, RGBA and CMYK are converted, alpha dropped), HW1 for grayscale.  Needs
    Pillow; raises :class:`DatasetError` when it is missing or cannot read the file."""
    try:
        from PIL import Image
    except ImportError:
        raise DatasetError("reading images needs the Pillow package (pip install Pillow, or install "
                           "rknnlite with the 'toolkit' extra); or give .npy samples") from None
    try:
        with Image.open(path) as img:
            if img.mode in ("L", "1", "I;16", "I", "F"):
                img = img.convert("L")
            elif img.mode != "RGB":
                img = img.convert("RGB")
            a = np.asarray(img, dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise DatasetError(f"cannot read image {path!r}: {e}") from None
    return a[:, :, np.newaxis] if a.ndim == 2 else a


#: Fixed-point scale of OpenCV's bilinear weights for 8-bit images (INTER_RESIZE_COEF_BITS = 11).
_COEF_BITS = 11


def _linear_taps(n_src: int, n_dst: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per output index: the two source indices and their fixed-point weights, with
    OpenCV's half-pixel mapping ``(i + 0.5) * n_src / n_dst - 0.5`` (in float32) and its
    borders (an index before the first or past the last source sample takes that sample)."""
    f = ((np.arange(n_dst, dtype=np.float64) + 0.5) * (n_src / n_dst) - 0.5).astype(np.float32)
    i0 = np.floor(f).astype(np.int64)
    t = f - i0.astype(np.float32)
    t[i0 < 0] = 0
    i0 = np.maximum(i0, 0)
    t[i0 >= n_src - 1] = 0
    i0 = np.minimum(i0, n_src - 1)
    one = float(1 << _COEF_BITS)
    w0 = np.rint((np.float32(1) - t) * np.float32(one)).astype(np.int64)
    w1 = np.rint(t * np.float32(one)).astype(np.int64)
    return i0, np.minimum(i0 + 1, n_src - 1), w0, w1


def resize_linear(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """HWC ``uint8`` pixels resized to ``height`` x ``width`` (a new array) as RKNN-Toolkit2
    resizes calibration images that do not have the input's size: OpenCV's ``INTER_LINEAR``
    (half-pixel centres, no antialiasing, 11-bit fixed-point weights, the rows first, the
    rounding of its SIMD loop): equal to ``cv2.resize`` (OpenCV 4.11 and 5.1) on every
    downscale measured; enlarging, a few pixels (0.1-2 %) differ by one grey level."""
    ih, iw = pixels.shape[:2]
    x0, x1, a0, a1 = _linear_taps(iw, width)
    y0, y1, b0, b1 = _linear_taps(ih, height)
    src = pixels.astype(np.int64)
    rows = src[:, x0] * a0[None, :, None] + src[:, x1] * a1[None, :, None]
    # the rows' weighted sum as OpenCV's SIMD loop rounds it: 16-bit high products of the
    # rows shifted right by 4, then a rounding shift by 2
    top = (rows[y0] >> 4) * b0[:, None, None] >> 16
    bottom = (rows[y1] >> 4) * b1[:, None, None] >> 16
    return ((top + bottom + 2) >> 2).clip(0, 255).astype(np.uint8)


def _image_sample(path: str, spec: TensorSpec, what: str, where: str, rgb2bgr: bool) -> np.ndarray:
    if len(spec.shape) != 4:
        raise DatasetError(f"{where}: {path!r}: an image can only feed a 4-D input; {what} has shape "
                           f"{list(spec.shape)}; give a .npy array")
    if not os.path.isfile(path):
        raise DatasetError(f"{where}: cannot read {path!r}: no such file")
    channels_first, c, h, w = _image_layout(spec)
    if c not in (1, 3, -1):
        raise DatasetError(f"{where}: {path!r}: {what} has {c} channels; images give 1 (grayscale) or 3 (RGB); "
                           f"give a .npy array")
    try:
        pixels = load_image(path)
    except DatasetError as e:
        raise DatasetError(f"{where}: {e}") from None
    if c == 3 and pixels.shape[2] == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    elif c == 1 and pixels.shape[2] == 3:
        raise DatasetError(f"{where}: {path!r} is a colour image; {what} has 1 channel: give grayscale images")
    ih, iw = pixels.shape[:2]
    oh, ow = (ih if h < 0 else h), (iw if w < 0 else w)
    if (oh, ow) != (ih, iw):
        _log.info("%s: %r is %dx%d (width x height); resized to %dx%d for %s", where, path, iw, ih, ow, oh, what)
        pixels = resize_linear(pixels, oh, ow)
    if rgb2bgr and pixels.shape[2] == 3:
        pixels = pixels[:, :, ::-1]
    a = pixels.transpose(2, 0, 1) if channels_first else pixels
    return a[np.newaxis]

