"""``Context``: one initialised model, the raising API under ``RKNNLite``."""

from __future__ import annotations

import os
import threading
from typing import List, Optional, Sequence, Union

import numpy as np

from .._version import __version__
from ..backends import create_backend
from ..errors import ContextInvalidError, InputInvalidError, InvalidParamError
from ..model.loader import LoadedModel, load_model
from ..model.metadata import Preprocess
from ..model.spec import TensorSpec, numpy_dtype
from .log import apply_env_level, logger
from .tensor_attr import TensorAttr

__all__ = ["Context"]

ModelArg = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class Context:
    """A model loaded and initialised on a backend; raises typed errors (:mod:`rknnlite.errors`).

    Args:
        model: a path (memory-mapped), or ``bytes``/``bytearray``/``memoryview``
            (used in place, not copied).  Portable rknnlite models, Rockchip ``.rknn``
            files, and either wrapped in rknnlite's encryption envelope.
        key: for encrypted models: the 32-byte key as ``bytes``, or a path to a key
            file; ``None`` tries ``RKNNLITE_MODEL_KEY``.
        backend: ``"auto"`` (what the file needs), ``"software"`` or ``"npu"``; an
            explicit choice never falls back.
        target_platform: expected SoC (e.g. ``"rk3588"``); a model built for other
            platforms is still run off-board, with a warning.
        flags: :class:`~rknnlite.constants.InitFlag` bits.
        custom_ops: Python custom operators (``op_type`` and ``compute(self, node,
            inputs)``, as RKNN-Toolkit2 defines them) for op types the model uses
            but the runtime does not have; a missing one fails here, naming it.

    A context is a context manager; :meth:`close` is idempotent.
    """

    def __init__(self, model: ModelArg, *, key=None, backend: str = "auto",
                 target_platform: Optional[str] = None, flags: int = 0, custom_ops: Sequence = ()):
        apply_env_level()
        if isinstance(model, LoadedModel):
            self._loaded = model
        else:
            self._loaded = load_model(model, key=key)
        self._backend = create_backend(self._loaded, backend, custom_ops=custom_ops)
        self.flags = int(flags)
        self._init_attrs()
        if target_platform is not None:
            self._check_platform(target_platform)
        logger.debug("context ready: %s on %s backend", self._loaded.label, self._backend.name)

    def _init_attrs(self) -> None:
        self._lock = threading.Lock()
        self._staging: dict = {}
        backend = self._backend
        self._inputs = [TensorAttr.from_spec(i, s) for i, s in enumerate(backend.inputs)]
        self._outputs = [TensorAttr.from_spec(i, s) for i, s in enumerate(backend.outputs)]
        meta = getattr(self._loaded.model, "metadata", None)
        self._preprocess: Sequence[Preprocess] = meta.preprocess if meta is not None else ()

    def _check_platform(self, target: str) -> None:
        meta = getattr(self._loaded.model, "metadata", None)
        targets = [t.lower() for t in getattr(meta, "target_platforms", ())]
        if targets and target.lower() not in targets:
            logger.warning("model was built for %s, not %s; running it anyway on the %s backend",
                           ", ".join(targets), target, self._backend.name)

    # -- description -----------------------------------------------------------------------

    @property
    def inputs(self) -> List[TensorAttr]:
        """Input tensor attributes in model layout (a new list; the attrs are immutable)."""
        return list(self._inputs)

    @property
    def outputs(self) -> List[TensorAttr]:
        """Output tensor attributes in model layout."""
        return list(self._outputs)

    @property
    def backend(self) -> str:
        """Name of the backend running this context (``"software"`` or ``"npu"``)."""
        return self._live().name

    @property
    def custom_string(self) -> str:
        """The ``custom_string`` the model was built with (``""`` if none)."""
        meta = getattr(self._loaded.model, "metadata", None)
        return getattr(meta, "custom_string", "") or getattr(self._loaded.model, "custom_string", "") or ""

    def sdk_version(self) -> dict:
        """``{"api": ..., "drv": ...}`` versions of the runtime serving this context."""
        self._live()
        return {"api": f"rknnlite {__version__}", "drv": f"{self._backend.name} backend"}

    # -- running ---------------------------------------------------------------------------

    def run(self, inputs, *, data_format=None, pass_through=None, want_float: bool = True) -> List[np.ndarray]:
        """Run once and return the outputs (new arrays the caller owns; inputs are copied).

        Args:
            inputs: one array per model input, in order (a single array is accepted
                for a single-input model).
            data_format: ``"nchw"``/``"nhwc"`` (or one per input) for 4-D inputs;
                ``None`` means the model's own layout.  NHWC data for an NCHW input is
                transposed.
            pass_through: per input, ``True`` to skip the model's mean/std normalisation.
            want_float: outputs as float32 (the only mode of the software backend).

        Raises:
            InputInvalidError: wrong count, shape, dtype or format, naming what was expected.
            ContextInvalidError: the context is closed.
        """
        with self._lock:
            backend = self._live()
            feeds = self._prepare(inputs, data_format, pass_through)
            return backend.run(feeds)

    def _prepare(self, inputs, data_format, pass_through) -> List[np.ndarray]:
        specs = self._backend.inputs
        if isinstance(inputs, np.ndarray) and len(specs) == 1:
            inputs = [inputs]
        if not isinstance(inputs, (list, tuple)):
            raise InputInvalidError(
                f"inputs must be a list of numpy arrays, like [img], not {type(inputs).__name__}", op="rknn_inputs_set"
            )
        if len(inputs) != len(specs):
            names = ", ".join(s.name for s in specs)
            raise InputInvalidError(
                f"the model has {len(specs)} input(s) ({names}), got {len(inputs)}", op="rknn_inputs_set"
            )
        formats = _per_input(data_format, len(specs), "data_format")
        passes = _per_input(pass_through, len(specs), "pass_through")
        return [
            self._prepare_one(i, spec, x, formats[i], bool(passes[i]))
            for i, (spec, x) in enumerate(zip(specs, inputs))
        ]

    def _prepare_one(self, i: int, spec: TensorSpec, x, fmt, passthrough: bool) -> np.ndarray:
        what = f"input {i} ({spec.name!r})"
        if isinstance(x, np.generic):
            x = np.asarray(x)
        if not isinstance(x, np.ndarray):
            raise InputInvalidError(f"{what} must be a numpy array, not {type(x).__name__}", op="rknn_inputs_set")
        if x.dtype.kind not in "biuf":
            raise InputInvalidError(f"{what} has dtype {x.dtype}; expected a numeric or bool array",
                                    op="rknn_inputs_set")
        if fmt is not None:
            fmt = str(fmt).lower()
            if fmt not in ("nchw", "nhwc"):
                raise InputInvalidError(f"data_format for {what} must be 'nchw' or 'nhwc', not {fmt!r}",
                                        op="rknn_inputs_set")
            if x.ndim == 4 and spec.layout != "UNDEFINED" and fmt != spec.layout.lower():
                x = x.transpose((0, 3, 1, 2)) if fmt == "nhwc" else x.transpose((0, 2, 3, 1))
        if len(x.shape) != len(spec.shape) or any(d != e and e != -1 for d, e in zip(x.shape, spec.shape)):
            raise InputInvalidError(
                f"{what} has shape {list(x.shape)}; expected {list(spec.shape)} ({spec.layout})", op="rknn_inputs_set"
            )
        target = numpy_dtype(spec.dtype)
        if self._preprocess and not passthrough and target.kind == "f":
            return _normalise(x, self._preprocess[i], self._stage(i, x.shape, np.float32))
        if x.dtype == target and x.flags.c_contiguous:
            return x
        stage = self._stage(i, x.shape, target)
        np.copyto(stage, x, casting="unsafe")
        return stage

    def _stage(self, index: int, shape, dtype) -> np.ndarray:
        """A reused per-input buffer (inputs are copied into it, never aliased by outputs)."""
        buf = self._staging.get(index)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = self._staging[index] = np.empty(shape, dtype)
        return buf

    # -- lifetime --------------------------------------------------------------------------

    def dup(self) -> "Context":
        """A new context on the same model sharing its weights (one per thread)."""
        self._live()
        twin = object.__new__(Context)
        twin._loaded = self._loaded
        twin._backend = self._backend.dup()
        twin.flags = self.flags
        twin._init_attrs()
        return twin

    def close(self) -> None:
        """Release the backend; idempotent.  Later calls raise ContextInvalidError."""
        backend, self._backend = getattr(self, "_backend", None), None
        if backend is not None:
            backend.close()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._backend is None

    def _live(self):
        if self._backend is None:
            raise ContextInvalidError("the context is closed", op="rknn_run")
        return self._backend

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self._backend.name
        return f"<rknnlite.Context {self._loaded.label} ({state})>"


def _per_input(value, n: int, what: str) -> list:
    if value is None or isinstance(value, (str, bool, int)):
        return [value] * n
    if isinstance(value, (list, tuple)) and len(value) == n:
        return list(value)
    raise InvalidParamError(f"{what} must be one value or a list of {n} (one per input), got {value!r}",
                            op="rknn_inputs_set")


def _normalise(x: np.ndarray, p: Preprocess, out: np.ndarray) -> np.ndarray:
    """``(x[:, reorder] - mean) / std`` per channel (axis 1, model layout NCHW), into ``out``."""
    if x.ndim != 4 or x.shape[1] != len(p.mean):
        raise InputInvalidError(
            f"the model normalises {len(p.mean)} channels on axis 1; got an input of shape {list(x.shape)}",
            op="rknn_inputs_set",
        )
    if p.reorder:
        x = x[:, list(p.reorder)]
    shape = (1, len(p.mean), 1, 1)
    np.subtract(x, np.reshape(p.mean_array, shape), out=out, casting="unsafe")
    np.divide(out, np.reshape(p.std_array, shape), out=out)
    return out
