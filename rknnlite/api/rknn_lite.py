"""``RKNNLite``: the rknn-toolkit-lite2 drop-in.

It keeps Lite2's calls, return values (0 / -1, ``None`` on failure) and log
messages, and translates: every call goes to a :class:`rknnlite.Context`, whose
typed exceptions become a logged message and the return value Lite2 users check.
One deliberate difference: it runs on any host (the software backend off-board)
where Lite2 refuses with "does not support simulator".
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

import numpy as np

from .._version import __version__
from ..constants import InitFlag, Lite2CoreMasks, TensorFormat
from ..errors import RKNNError, error_name
from ..model.loader import load_model
from ..platform import board_soc
from ..runtime.args import is_flag, is_int
from ..runtime.context import Context
from ..runtime.cores import lite2_remap, supports_core_mask
from ..runtime.io import RANK_WARNING, with_leading_ones
from ..runtime.log import InstanceLog

__all__ = ["RKNNLite"]

_LOGGER_NAME = "rknnlite.api"
#: dtypes Lite2 sends (each has an rknn_tensor_type), also the names ``data_type`` takes
_DTYPES = ("float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "int64", "bool")
_NP_DTYPES = frozenset(np.dtype(name) for name in _DTYPES)


class RKNNLite(Lite2CoreMasks):
    """Lite2-compatible runtime object (``from rknnlite.api import RKNNLite``).

    Args:
        verbose: also write debug-level messages of this object to stderr.
        verbose_file: also write them to this file (ignored, as in Lite2, when its
            directory does not exist).

    Neither option touches the root logger: messages go to the ``rknnlite.api``
    logger, and the verbose outputs are handlers of a private logger of this object.
    The ``NPU_CORE_*`` constants are the :class:`~rknnlite.constants.CoreMask` members
    (:class:`~rknnlite.constants.Lite2CoreMasks`).
    """

    def __init__(self, verbose: bool = False, verbose_file: Optional[str] = None):
        self._log = InstanceLog(_LOGGER_NAME, verbose, verbose_file, "%(levelname).1s RKNN: %(message)s")
        self._model = None
        self._ctx: Optional[Context] = None
        self._frame_id = 0
        self._reuse: List[np.ndarray] = []
        self._expanded_shapes: set = set()  # input shapes given leading 1s (warned once each)
        self._ranks: List[int] = []  # rank of each model input, set by init_runtime
        self._log.warning("rknn-toolkit-lite2 version: %s (rknnlite %s)", _LITE2_COMPAT_VERSION, __version__)

    @property
    def rknn_log(self) -> InstanceLog:
        """This object's log, under Lite2's name: ``rknn_log.logger`` is the ``rknnlite.api``
        logger all ``RKNNLite`` objects share, so ``rknn_lite.rknn_log.logger.setLevel(
        logging.ERROR)`` (Immich's runtime does this) quiets every one of them, as in Lite2."""
        return self._log

    # -- loading ---------------------------------------------------------------------------

    def load_rknn(self, path, key_path: Optional[str] = None) -> int:
        """Load a model from a path or from bytes; ``key_path`` names the key file of an
        encrypted model.  Returns 0, or -1 with the reason logged."""
        if isinstance(path, (str, os.PathLike)) and not os.path.isfile(path):
            self._log.error("Invalid RKNN model path: %s", path)
            return -1
        if key_path is not None and not (isinstance(key_path, (str, os.PathLike)) and os.path.isfile(key_path)):
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
                     core_mask: int = Lite2CoreMasks.NPU_CORE_AUTO) -> int:
        """Initialise the runtime on this host; returns 0, or -1 with the reason logged.

        ``target``/``device_id`` select a PC-attached board in Lite2; here they must be
        ``None`` (the model runs locally).  ``async_mode=True`` creates the context with
        ``InitFlag.ASYNC_MASK`` (``RKNN_FLAG_ASYNC_MASK``): :meth:`inference` returns the
        previous frame's outputs (the first call its own), from librknnrt on a board and
        emulated alike off-board; refused (-1) for a dynamic-shape model.
        On a Rockchip board the context is created for the board's SoC
        (``Context(target_platform=...)``, :func:`rknnlite.platform.board_soc`), whose core
        rules ``core_mask`` follows; elsewhere for the model's first target platform.
        """
        if target is not None or device_id is not None:
            self._log.error("target/device_id select a board attached to a PC, which rknnlite does not "
                            "support; call init_runtime() on the board or host that runs the model")
            return -1
        if self._model is None:
            self._log.error("Model is not loaded yet, this interface should be called after load_rknn!")
            return -1
        if not is_flag(async_mode):
            self._log.error("async_mode must be True or False, not %r", async_mode)
            return -1
        if not is_int(core_mask):
            self._log.error("Invalid core_mask: %r (an int: RKNNLite.NPU_CORE_AUTO, NPU_CORE_0, ...)", core_mask)
            return -1
        self._release_runtime()
        try:
            self._ctx = Context(self._model, target_platform=board_soc() or None,
                                flags=InitFlag.ASYNC_MASK if async_mode else 0)
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
        """Lite2's step: RK3576/RK3588 only, RK3576 remapping; the rules are runtime.cores',
        for the SoC the context runs for (``Context.core_platform``)."""
        platform_name = self._ctx.core_platform
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

    # -- inference -------------------------------------------------------------------------

    def inference(self, inputs, data_type=None, data_format=None, inputs_pass_through=None,
                  get_frame_id: bool = False, reuse_outputs: bool = False):
        """Run the model; returns a list of float32 arrays in the model's layout, or None
        (the reason logged with Lite2's message).

        Inputs are checked as Lite2 2.5.0 checks them: a list of ndarrays (a single array
        is wrapped, with Lite2's warning), dtypes with an RKNN tensor type (float64 is
        refused, nothing is cast), ``data_type`` naming each dtype exactly, the rank of the
        input's attribute.  One leniency: an array of lower rank gets leading 1s (a view)
        with RKNN-Toolkit2's simulator's warning "... expect dims is 4! Try expand dims to
        ...", so a ``(H, W, C)`` picture runs on a ``[1, H, W, C]`` input as it did with
        Lite2 1.x; Lite2 2.x refuses it ("The input[0] need 4dims input, but 3dims input
        buffer feed."), a common complaint of code written for 1.x.  ``data_format``
        ('nhwc' = None, or 'nchw'; lower case; one value or a list) applies to 4-D inputs: 'nchw' data for an NHWC input is transposed
        with Lite2's warning.  One deliberate difference: 4-D data that fits the input only
        in the other layout is never passed on as it is (Lite2 hands NCHW data to the
        runtime labelled NHWC): NCHW data is transposed with the same warning, anything
        else refused naming ``data_format`` (see :meth:`rknnlite.Context.run`).
        ``reuse_outputs=True`` returns views of internal buffers that the next call
        overwrites (no allocation per call); otherwise new arrays.
        """
        if self._ctx is None or self._ctx.closed:
            self._log.error("Runtime environment is not inited, please call init_runtime to init it first!")
            return None
        if isinstance(inputs, np.ndarray):
            self._log.warning("Inputs should be placed in a list, like [img1, img2], both the img1 and img2 are "
                              "ndarray.")
            inputs = [inputs]
        if not isinstance(inputs, list):  # Lite2's set_inputs fails on it (AttributeError)
            return self._setting_failed(f"inputs must be a list of np.ndarray, not {type(inputs).__name__}")
        if not inputs:
            self._log.error("Inputs are invalid.")
            return None
        if len(inputs) > len(self._ranks):  # Lite2's set_inputs fails on it (IndexError)
            return self._setting_failed(f"{len(inputs)} inputs given, but the model has {len(self._ranks)}")
        if self._bad_arrays(inputs) or self._bad_data_types(inputs, data_type):
            return None
        if not (is_flag(get_frame_id) and is_flag(reuse_outputs)):
            self._log.error("get_frame_id and reuse_outputs take True or False, not %r and %r", get_frame_id,
                            reuse_outputs)
            return None
        passes = None
        if inputs_pass_through is not None:
            if not isinstance(inputs_pass_through, (list, tuple)) or len(inputs_pass_through) != len(inputs):
                self._log.error("The lengths of inputs_pass_through and inputs are not equal.")
                return None
            if not all(is_flag(p) for p in inputs_pass_through):
                self._log.error("inputs_pass_through takes 0 or 1 per input, not %r", inputs_pass_through)
                return None
            passes = [bool(p) for p in inputs_pass_through]
        inputs = [self._with_batch(x, rank) for x, rank in zip(inputs, self._ranks)]
        formats = self._formats(inputs, data_format)
        if formats is _FAILED:
            return None
        try:
            outputs = self._ctx.run(inputs, data_format=formats, pass_through=passes)
        except RKNNError as e:
            if e.op == "rknn_set_input_shapes":
                self._log.error("Set input shape failed. error code: %s", error_name(e.code))
            self._log.error("%s", e)
            return None
        self._frame_id += 1
        if reuse_outputs:
            outputs = self._into_reused(outputs)
        if get_frame_id:
            outputs = list(outputs) + [self._frame_id]
        return outputs

    def _with_batch(self, x: np.ndarray, rank: int) -> np.ndarray:
        """``x`` with leading 1s up to ``rank``, with the simulator's warning the first time a
        shape needs them (not once per frame of a video loop)."""
        y = with_leading_ones(x, rank)
        if y is not x and x.shape not in self._expanded_shapes:
            self._expanded_shapes.add(x.shape)
            self._log.warning(RANK_WARNING, tuple(x.shape), rank, tuple(y.shape))
        return y

    def _setting_failed(self, why: str) -> None:
        """Lite2's answer to an exception while it sets the inputs (it also prints the traceback)."""
        self._log.error("Catch exception when setting inputs.")
        self._log.error("%s", why)
        return None

    def _bad_arrays(self, inputs: list) -> bool:
        """Log Lite2's error for the first input that is not an ndarray of a type it sends."""
        for i, x in enumerate(inputs):
            if not isinstance(x, np.ndarray):
                self._log.error("Type of inputs[%d] is not np.ndarray!", i)
                return True
            if x.size == 0:
                self._log.error("Size of inputs[%d] is invalid!", i)
                return True
            if x.dtype not in _NP_DTYPES:
                self._log.error("Unsupport inputs[%d].dtype: %s", i, x.dtype)
                return True
        return False

    def _bad_data_types(self, inputs: list, data_type) -> bool:
        """Log Lite2's error when ``data_type`` (one name, or one per input) does not name
        each input's dtype exactly (nothing is cast)."""
        if data_type is None:
            return False
        types = [data_type] * len(inputs) if isinstance(data_type, str) else data_type
        if not isinstance(types, (list, tuple)) or len(types) != len(inputs):
            self._log.error("The lengths of data_type and inputs are not equal.")
            return True
        for i, (x, t) in enumerate(zip(inputs, types)):
            if not isinstance(t, str) or t not in _DTYPES:
                self._log.error("Unsupport data type: %s", t)
                return True
            if x.dtype != np.dtype(t):
                self._log.error("inputs[%d].dtype: %s is not same as data_type[%d]", i, x.dtype, i)
                return True
        return False

    def _formats(self, inputs, data_format):
        """Per input the ``data_format`` for ``Context.run`` (Lite2's None is 'nhwc' for a
        4-D input), ``_FAILED`` after logging Lite2's error; Lite2's warnings on the way."""
        ranks, attrs = self._ranks, self._ctx.inputs
        if data_format is None or isinstance(data_format, str):
            data_format = [data_format or "nhwc"] * len(inputs)
        elif not isinstance(data_format, (list, tuple)) or len(data_format) != len(inputs):
            self._log.error("The lengths of data_format and inputs are not equal.")
            return _FAILED
        for fmt in data_format:
            if not isinstance(fmt, str) or fmt not in ("nhwc", "nchw"):  # lower case only, as Lite2
                self._log.error("Unsupport data format: %s", fmt)
                return _FAILED
        formats = []
        for i, (x, fmt) in enumerate(zip(inputs, data_format)):
            if x.ndim != ranks[i]:
                self._setting_failed(f"The input[{i}] need {ranks[i]}dims input, but {x.ndim}dims input buffer feed.")
                return _FAILED
            attr_fmt = attrs[i].fmt
            if x.ndim != 4:
                if attr_fmt == TensorFormat.NHWC and fmt == "nchw":
                    self._log.warning("The input[%d] need NHWC data format, but the shape is not 4D, no data "
                                      "transpose. Please try to feed input as 4D data.", i)
                formats.append(None)
                continue
            if attr_fmt == TensorFormat.NHWC and fmt == "nchw":
                self._log.warning("The input[%d] need NHWC data format, but NCHW set, the data format and data "
                                  "buffer will be changed to NHWC.", i)
            elif attr_fmt == TensorFormat.UNDEFINED and fmt == "nhwc" and tuple(x.shape) != tuple(attrs[i].dims):
                self._log.warning("The data format queried by input[%d] is RKNN_TENSOR_UNDEFINED, but the input "
                                  "buffer filled in inference is in NHWC format.", i)
                self._log.warning("The input buffer will be transposed automatically.")
            formats.append(fmt)
        return formats

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

    def list_devices(self) -> Tuple[List[str], List[str]]:
        """``(adb_devices, ntb_devices)``: the boards Lite2 reaches over adb or NTB from a host.
        Always ``([], [])``: rknnlite runs models on the machine it is on (its NPU, or the
        software backend) and drives no other; logs "None devices connected." as Lite2 prints."""
        self._log.info("None devices connected.")
        return [], []

    def list_support_target_platform(self, rknn_model=None) -> Optional[dict]:
        """Target platforms of a model file (default: the loaded one), as Lite2 reports them.

        Returns ``{"filled_target_platform": [...], "support_target_platform": [...]}``.
        """
        try:
            loaded = load_model(rknn_model) if rknn_model is not None else self._model
        except (RKNNError, TypeError) as e:  # TypeError: not a path nor bytes
            self._log.error("%s", e)
            return None
        if loaded is None:
            self._log.error("Model is not loaded yet, this interface should be called after load_rknn!")
            return None
        filled = list(loaded.model.target_platforms)
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

