"""What every loader does the same way: read a model given as a path or as bytes, and check
``config(dynamic_input=...)`` shape sets against the model's inputs."""

from __future__ import annotations

import importlib
import os
from typing import Tuple

from ...errors import ModelInvalidError


def read_source(source, framework: str, what: str, op: str) -> Tuple[bytes, str]:
    """``(content, label)`` of a file given as a path or as bytes (copied once).

    ``framework`` and ``what`` name the file in errors ("darknet cfg file not found: x.cfg");
    ``label`` is the path, or "the <what> bytes".

    Raises:
        ModelInvalidError: a missing or unreadable path, or neither a path nor bytes.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), f"the {what} bytes"
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise ModelInvalidError(f"{framework} {what} file not found: {path}", op=op)
        try:
            with open(path, "rb") as f:
                return f.read(), path
        except OSError as e:
            raise ModelInvalidError(f"cannot read the {framework} {what} file {path}: {e.strerror or e}",
                                    op=op) from None
    raise ModelInvalidError(f"the {framework} {what} must be a path or bytes, not {type(source).__name__}", op=op)


def shape_sets(dynamic_input, n_inputs: int, op: str):
    """The validated ``dynamic_input`` shape sets (``None`` when not given), each holding one
    shape per model input.

    Raises:
        ModelInvalidError: malformed sets, or a set with the wrong number of shapes.
    """
    if dynamic_input is None:
        return None
    from ..shapes import validate_shape_sets

    try:
        sets = validate_shape_sets(dynamic_input)
    except ValueError as e:
        raise ModelInvalidError(str(e), op=op) from None
    for i, st in enumerate(sets):
        if len(st) != n_inputs:
            raise ModelInvalidError(f"dynamic_input set {i} has {len(st)} shapes for the model's {n_inputs} "
                                    f"input{'s' if n_inputs != 1 else ''}", op=op)
    return sets


def require_onnx(api: str) -> None:
    """Raise ImportError naming what to install when the onnx package, through which every
    loader converts, is missing."""
    try:
        importlib.import_module("onnx")
    except ImportError as e:
        raise ImportError(f"{api} converts through ONNX and needs the onnx package ({e}); install it with "
                          f"pip install 'rknnlite-runtime[toolkit]' (or pip install onnx)") from e
