"""``RKNNLite``: the rknn-toolkit-lite2 drop-in.

It keeps Lite2's calls, return values (0 / -1, ``None`` on failure) and log
messages, and translates: every call goes to a :class:`rknnlite.Context`, whose
typed exceptions become a logged message and the return value Lite2 users check.
One deliberate difference: it runs on any host (the software backend off-board)
where Lite2 refuses with "does not support simulator".
"""

from __future__ import annotations

import os
import platform
from typing import List, Optional

import numpy as np

from .._version import __version__
from ..constants import InitFlag
from ..errors import RKNNError, error_name
from ..model.loader import load_model
from ..runtime.context import Context
from ..runtime.cores import lite2_remap, supports_core_mask
from ..runtime.log import InstanceLog

__all__ = ["RKNNLite"]

_LOGGER_NAME = "rknnlite.api"
_DATA_TYPES = ("int8", "uint8", "int16", "float16", "float32")


class RKNNLite:
    """Lite2-compatible runtime object (``from rknnlite.api import RKNNLite``).

    Args:
        verbose: also write debug-level messages of this object to stderr.
        verbose_file: also write them to this file (ignored, as in Lite2, when its
            directory does not exist).

    Neither option touches the root logger: messages go to the ``rknnlite.api``
    logger, and the verbose outputs are handlers of a private logger of this object.
    """

    NPU_CORE_AUTO = 0
    NPU_CORE_0 = 1
    NPU_CORE_1 = 2
    NPU_CORE_2 = 4
    NPU_CORE_0_1 = 3
    NPU_CORE_0_1_2 = 7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, verbose: bool = False, verbose_file: Optional[str] = None):
        self._log = InstanceLog(_LOGGER_NAME, verbose, verbose_file, "%(levelname).1s RKNN: %(message)s")
        self._model = None
        self._ctx: Optional[Context] = None
        self._frame_id = 0
        self._reuse: List[np.ndarray] = []
        self._ranks: List[int] = []  # rank of each model input, set by init_runtime
        self._log.warning("rknn-toolkit-lite2 version: %s (rknnlite %s)", _LITE2_COMPAT_VERSION, __version__)

    # -- loading ---------------------------------------------------------------------------

    def load_rknn(self, path, key_path: Optional[str] = None) -> int:
        """Load a model from a path or from bytes; ``key_path`` names the key file of an
        encrypted model.  Returns 0, or -1 with the reason logged."""
        if isinstance(path, (str, os.PathLike)) and not os.path.isfile(path):
            self._log.error("Invalid RKNN model path: %s", path)
            return -1
        if key_path is not None and not os.path.isfile(key_path):
            self._log.error("Invalid key path: %s", key_path)
            return -1
        try:
            self._model = load_model(path, key=key_path)
        except RKNNError as e:
            self._log.error("Load RKNN model failed: %s", e)
            return -1
        except TypeError as e:
            self._log.error("Invalid RKNN model: %s", e)
            return -1
        return 0

    def init_runtime(self, target=None, device_id=None, async_mode: bool = False,
                     core_mask: int = NPU_CORE_AUTO) -> int:
        """Initialise the runtime on this host; returns 0, or -1 with the reason logged.

        ``target``/``device_id`` select a PC-attached board in Lite2; here they must be
        ``None`` (the model runs locally).  ``async_mode=True`` creates the context with
        ``InitFlag.ASYNC_MASK`` (``RKNN_FLAG_ASYNC_MASK``): :meth:`inference` returns the
        previous frame's outputs (the first call its own), from librknnrt on a board and
        emulated alike off-board; refused (-1) for a dynamic-shape model.
        """
        if target is not None or device_id is not None:
            self._log.error("target/device_id select a board attached to a PC, which rknnlite does not "
                            "support; call init_runtime() on the board or host that runs the model")
            return -1
        if self._model is None:
            self._log.error("Model is not loaded yet, this interface should be called after load_rknn!")
            return -1
        self._release_runtime()
        try:
            self._ctx = Context(self._model, flags=InitFlag.ASYNC_MASK if async_mode else 0)
        except RKNNError as e:
            self._log.error("Catch exception when init runtime!")
            self._log.error("RKNN init failed. error code: %s: %s", error_name(e.code), e.message)
            return -1
        self._ranks = [a.n_dims for a in self._ctx.inputs]
        ret = self._apply_core_mask(core_mask)
        if ret == 0:
            self._check_dynamic_shape()
        return ret

    def _check_dynamic_shape(self) -> None:
        """Lite2's last init step: query the input ranges; a static model only warns."""
        try:
            self._ctx.input_ranges()
        except RKNNError as e:
            self._log.warning("Query dynamic range failed. Ret code: %s. (If it is a static shape RKNN model, "
                              "please ignore the above warning message.)", error_name(e.code))

    def _apply_core_mask(self, core_mask: int) -> int:
        """Lite2's step: RK3576/RK3588 only, RK3576 remapping; the rules are runtime.cores'."""
        platform_name = self._platform()
        if not supports_core_mask(platform_name):
            if core_mask == self.NPU_CORE_AUTO:
                return 0
            self._log.error("The core_mask is only supported by RK3576/RK3588. "
                            "Please do not set this parameter on other platforms.")
            return -1
        core_mask, remapped = lite2_remap(platform_name, core_mask)
        if remapped:
            self._log.warning("%s", remapped)
        try:
            self._ctx.set_core_mask(core_mask)
        except RKNNError as e:
            self._log.error("Invalid core_mask: %s", e)
            return -1
        return 0

    def _platform(self) -> str:
        """The SoC this runs for: the board's, else the model's first target platform."""
        soc = _board_soc()
        if soc:
            return soc
        meta = getattr(self._model.model, "metadata", None)
        targets = getattr(meta, "target_platforms", None) or getattr(self._model.model, "target_platforms", ())
        return targets[0].lower() if targets else ""

    # -- inference -------------------------------------------------------------------------

    def inference(self, inputs, data_type=None, data_format=None, inputs_pass_through=None,
                  get_frame_id: bool = False, reuse_outputs: bool = False):
        """Run the model; returns a list of float32 arrays in the model's layout, or None.

        ``data_format`` ('nhwc' default, or 'nchw'; one value or a list) applies to 4-D
        inputs; NCHW data for an NHWC input is transposed with Lite2's warning.
        ``reuse_outputs=True`` returns views of internal buffers that the next call
        overwrites (no allocation per call); otherwise new arrays.
        """
        if self._ctx is None or self._ctx.closed:
            self._log.error("Runtime environment is not inited, please call init_runtime to init it first!")
            return None
        if not isinstance(inputs, list):
            self._log.error("Inputs should be placed in a list, like [img1, img2]")
            return None
        for i, x in enumerate(inputs):
            if not isinstance(x, np.ndarray):
                self._log.error("Type of inputs[%d] is not np.ndarray!", i)
                return None
        if data_type is not None:
            types = data_type if isinstance(data_type, (list, tuple)) else [data_type] * len(inputs)
            for i, (x, t) in enumerate(zip(inputs, types)):
                if t not in _DATA_TYPES:
                    self._log.error("data_type[%d]: %s is not one of %s", i, t, ", ".join(_DATA_TYPES))
                    return None
                if x.dtype != np.dtype(t):
                    self._log.error("inputs[%d].dtype: %s is not same as data_type[%d]", i, x.dtype, i)
                    return None
        formats = self._formats(inputs, data_format)
        if formats is _FAILED:
            return None
        passes = None
        if inputs_pass_through is not None:
            if len(inputs_pass_through) != len(inputs):
                self._log.error("inputs_pass_through must have one 0/1 per input (%d), got %d",
                                len(inputs), len(inputs_pass_through))
                return None
            passes = [bool(p) for p in inputs_pass_through]
        try:
            outputs = self._ctx.run(inputs, data_format=formats, pass_through=passes)
        except RKNNError as e:
            self._log.error("%s", e)
            return None
        self._frame_id += 1
        if reuse_outputs:
            outputs = self._into_reused(outputs)
        if get_frame_id:
            outputs = list(outputs) + [self._frame_id]
        return outputs

    def _formats(self, inputs, data_format):
        """Per input the layout of its data for ``Context.run`` (None for non-4-D inputs), or
        None when no input is 4-D; ``_FAILED`` after logging Lite2's error."""
        ranks = self._ranks
        if len(inputs) != len(ranks):
            self._log.error("The model needs %d inputs, but %d inputs are fed.", len(ranks), len(inputs))
            return _FAILED
        if data_format is None or isinstance(data_format, str):
            data_format = [data_format] * len(inputs)
        if len(data_format) != len(inputs):
            self._log.error("data_format must be one value or one per input (%d)", len(inputs))
            return _FAILED
        formats = []
        any_4d = False
        for i, (x, rank, fmt) in enumerate(zip(inputs, ranks, data_format)):
            fmt = (fmt or "nhwc").lower()
            if fmt not in ("nhwc", "nchw"):
                self._log.error("data_format[%d]: %s is invalid, only support nhwc or nchw", i, fmt)
                return _FAILED
            if x.ndim != rank:
                self._log.error("The input[%d] need %ddims input, but %ddims input buffer feed.", i, rank, x.ndim)
                return _FAILED
            if x.ndim != 4:
                formats.append(None)
                continue
            any_4d = True
            if fmt == "nchw":
                self._log.warning("The input[%d] need NHWC data format, but NCHW set, the data format and data "
                                  "buffer will be changed to NHWC.", i)
            formats.append(fmt)
        return formats if any_4d else None

    def _into_reused(self, outputs: List[np.ndarray]) -> List[np.ndarray]:
        views = []
        for i, out in enumerate(outputs):
            if i >= len(self._reuse):
                self._reuse.append(np.empty(0, np.uint8))
            if self._reuse[i].nbytes < out.nbytes:
                self._reuse[i] = np.empty(out.nbytes, np.uint8)
            view = self._reuse[i][: out.nbytes].view(out.dtype).reshape(out.shape)
            view[...] = out
            views.append(view)
        return views

    # -- information -----------------------------------------------------------------------

    def get_sdk_version(self) -> Optional[str]:
        """Lite2's version block (API and driver lines), or None before init_runtime."""
        if self._ctx is None or self._ctx.closed:
            self._log.error("Runtime environment is not inited, please call init_runtime to init it first!")
            return None
        v = self._ctx.sdk_version()
        return "\n".join(["=" * 51, "RKNN VERSION:", f"  API: {v['api']}", f"  DRV: {v['drv']}", "=" * 51])

    def list_support_target_platform(self, rknn_model=None) -> Optional[dict]:
        """Target platforms of a model file (default: the loaded one), as Lite2 reports them.

        Returns ``{"filled_target_platform": [...], "support_target_platform": [...]}``.
        """
        try:
            loaded = load_model(rknn_model) if rknn_model is not None else self._model
        except RKNNError as e:
            self._log.error("%s", e)
            return None
        if loaded is None:
            self._log.error("Model is not loaded yet, this interface should be called after load_rknn!")
            return None
        meta = getattr(loaded.model, "metadata", None)
        filled = list(getattr(meta, "target_platforms", None) or getattr(loaded.model, "target_platforms", ()))
        self._log.info("Target platforms filled in RKNN model: %s", filled)
        self._log.info("Target platforms supported by this RKNN model: %s", filled)
        return {"filled_target_platform": filled, "support_target_platform": filled}

    def release(self) -> None:
        """Free the runtime and the model; idempotent."""
        self._release_runtime()
        self._model = None
        self._log.close()

    def _release_runtime(self) -> None:
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
        self._reuse = []


#: What ``RKNNLite._formats`` returns after logging an error.
_FAILED = object()

#: The Lite2 release whose behaviour this facade follows.
_LITE2_COMPAT_VERSION = "2.5.0"


def _board_soc() -> str:
    """The Rockchip SoC named in ``/proc/device-tree/compatible`` (e.g. ``"rk3588"``), or ``""``."""
    if platform.machine() not in ("aarch64", "armv7l"):
        return ""
    try:
        with open("/proc/device-tree/compatible", "rb") as f:
            compatible = f.read().decode("ascii", "replace").lower()
    except OSError:
        return ""
    for soc in ("rk3588", "rk3576", "rk3568", "rk3566", "rk3562", "rv1126b", "rv1106", "rv1103"):
        if soc in compatible:
            return soc
    return ""
