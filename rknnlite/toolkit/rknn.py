"""``RKNN``: the RKNN-Toolkit2 conversion API (config -> load_onnx -> build -> export_rknn,
and init_runtime -> inference on the software backend).

Names, arguments and return values follow the vendor toolkit: methods return ``0`` on
success and ``-1`` on failure with the reason logged (``inference`` returns the outputs
or ``None``).  Messages go to the ``rknnlite.toolkit`` logger (never the root logger);
``verbose``/``verbose_file`` add this object's own handlers, as :class:`RKNNLite` does.

Differences from the vendor toolkit (this is the first path; see the docstrings):

* ``build`` makes float models (``float_dtype`` ``"float16"``, the NPU's precision, or
  ``"float32"``) and, with ``do_quantization=True``, int8 models (asymmetric int8,
  ``normal``, ``mmse`` or ``kl_divergence`` algorithm, ``channel`` or ``layer`` method;
  calibration data as images or ``.npy`` files), multi-batch (``rknn_batch_size``) and dynamic shapes
  (``config(dynamic_input=...)``).
* ``export_rknn`` writes rknnlite's portable container (``.rknn`` by name), which
  :class:`rknnlite.Context` and :class:`rknnlite.api.RKNNLite` run on any host; it is
  not a Rockchip ``.rknn`` file and cannot run on a board's librknnrt.
* ``export_encrypted_rknn_model`` wraps a model in rknnlite's AES-256-GCM envelope
  (opened by :class:`rknnlite.Context` / ``RKNNLite.load_rknn(key_path=...)`` with the
  key), not the vendor's ``CYPTRKNN`` format.
* ``init_runtime(target=None)`` runs the built model on the software backend (the
  vendor's simulator); board targets are refused.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._version import __version__
from ..constants import Lite2CoreMasks
from ..errors import RKNNError
from ..runtime.args import is_flag, is_int, is_number
from ..runtime.io import RANK_WARNING, with_leading_ones
from ..runtime.log import InstanceLog
from .build import float_outputs_per_sample, prepare, preprocess_pairs, proposed_floats, run_build

__all__ = ["RKNN", "TARGET_PLATFORMS"]

_LOGGER_NAME = "rknnlite.toolkit"

#: Platforms ``config(target_platform=...)`` accepts (lower case).
TARGET_PLATFORMS = ("rv1103", "rv1103b", "rv1106", "rv1106b", "rv1126b", "rk2118",
                    "rk3562", "rk3566", "rk3568", "rk3576", "rk3588")
_DEFAULT_PLATFORM = "rk3588"

# Vendor config() options that only steer RKNN-Toolkit2's NPU compiler (optimisation effort,
# weight compression, memory planning, core and CPU/NPU placement, its own optimiser's rules,
# the file variant for the smallest chips), with their vendor defaults.  The software NPU has
# none of that, so they change nothing here: accepted (a vendor script passes them, Immich's
# exporter passes disable_rules), with a warning when a value is not the default.
_COMPILER_SETTINGS = {"optimization_level": 3, "compress_weight": False, "single_core_mode": False,
                      "enable_flash_attention": False, "op_target": None, "memory_plan_strategy": "BestFit",
                      "compute_order": "WidthFirst", "compiler_control_file": None, "mini_rknn": False,
                      "disable_rules": None}
#: hybrid quantization options (see :mod:`rknnlite.toolkit.hybrid`) and their defaults
_HYBRID_DEFAULTS = {"auto_hybrid_cos_thresh": 0.98, "auto_hybrid_euc_thresh": None, "quantized_hybrid_level": 0}
_IGNORED_AT_DEFAULT = {"inputs_yuv_fmt": None,
                       "quantize_weight": False, "remove_reshape": False}

# Quantization options and their vendor defaults (checked by build(do_quantization=True)).
_QUANT_DEFAULTS = {"quantized_dtype": "asymmetric_quantized-8", "quantized_algorithm": "normal",
                   "quantized_method": "channel"}

# What RKNN-Toolkit2 2.5.0's config() takes (observed): anything else it refuses (see
# _vendor_quant_refusal). It reads the 1.x names as their 2.x ones.
_VENDOR_QUANT_DTYPES = ("w8a8", "w8a16", "w16a16i_dfp", "w4a16")
_LEGACY_QUANT_DTYPES = {"asymmetric_quantized-8": "w8a8", "asymmetric_quantized-16": "w16a16i"}
_VENDOR_DTYPE_PLATFORMS = {"w8a16": ("rk3562",), "w4a16": ("rk3576", "rv1126b")}
_VENDOR_QUANT_ALGORITHMS = ("normal", "mmse", "kl_divergence", "gdq")
_VENDOR_GROUP_SIZES = tuple(range(32, 257, 32))

_NO_MODEL = "Model is not loaded yet, this interface should be called after load_onnx!"
_NOT_BUILT = "RKNN model is not built yet, this interface should be called after build or load_rknn!"
_NO_RUNTIME = "The runtime has not been initialized, please call init_runtime first!"
_SIMULATOR_ONLY = "Not support in simulator environment, please set target in init_runtime!"


class RKNN(Lite2CoreMasks):
    """The toolkit object (``from rknnlite.toolkit import RKNN``).

    Args:
        verbose: also write this object's messages (debug level and up) to stderr.
        verbose_file: also append them to this file (ignored when its directory does
            not exist).

    The ``NPU_CORE_*`` constants are the :class:`~rknnlite.constants.CoreMask` members
    (:class:`~rknnlite.constants.Lite2CoreMasks`).
    """

    def __init__(self, verbose: bool = False, verbose_file: Optional[str] = None):
        self._log = InstanceLog(_LOGGER_NAME, verbose, verbose_file)
        self._verbose = bool(verbose)
        self._config: Optional[Dict[str, Any]] = None
        #: why the last config() was refused (the loaders refuse until a config() succeeds)
        self._config_error: Optional[str] = None
        self._imported = None
        self._model_bytes: Optional[bytes] = None
        #: whether _model_bytes is a file RKNN-Toolkit2 built (load_rknn): no source model behind it
        self._vendor_file = False
        #: the built model with its weights when the export is weight-less (the simulator runs it)
        self._full_bytes: Optional[bytes] = None
        self._ctx = None
        self._released = False
        self._custom_ops: Dict[str, Any] = {}  # op_type -> custom operator (reg_custom_op)
        self._source_name: Optional[str] = None  # the loaded model's file name (hybrid step1's stem)
        #: (custom_quantize_layers, ranges) of hybrid_quantization_step2, for build
        self._hybrid: Optional[Tuple[Dict[str, str], Dict[str, Tuple[float, float]]]] = None
        self._log.info("rknnlite toolkit %s (RKNN-Toolkit2 compatible API)", __version__)

    # -- configuration -------------------------------------------------------------------------

    def config(self, mean_values=None, std_values=None, quantized_dtype: str = "w8a8",
               quantized_algorithm: str = "normal", quantized_method: str = "channel",
               quantized_hybrid_level: int = 0, target_platform: Optional[str] = None,
               quant_img_RGB2BGR=False, float_dtype: str = "float16", optimization_level: int = 3,
               custom_string: Optional[str] = None, **other_toolkit_kwargs) -> int:
        """Set the conversion options; call it before :meth:`load_onnx`.  Returns 0 or -1.

        The parameters are in RKNN-Toolkit2 2.x's order (2.2.0 to 2.5.0), so a vendor script
        that passes them by position means the same here.

        Args:
            mean_values: per input, one value per channel (``[[m0, m1, m2]]``; a flat
                list is taken as the single input's); the built model computes
                ``(x - mean) / std`` itself.
            std_values: per input, one value per channel, as ``mean_values``.
            quantized_dtype: ``'w8a8'`` (also its 1.x name ``'asymmetric_quantized-8'``),
                quantized_algorithm (``'normal'``, ``'mmse'`` or ``'kl_divergence'``) and
                quantized_method (``'channel'`` or ``'layer'``): the quantization of
                ``build(do_quantization=True)``.  A value RKNN-Toolkit2 2.5.0 refuses
                (``'kl-divergence'``, ``'w4a16'`` on rk3588, ...) is refused in its words, and
                the other values it takes are accepted with a warning and make a quantized
                build fail.  After a refused config() the loaders refuse too, until a
                config() succeeds (the vendor's config raises, which stops a script that
                never reads the return code).
            quantized_hybrid_level: 0 (off) or 1-3: how many layers
                ``build(auto_hybrid=True)`` may keep in float16 (see :mod:`.hybrid`).
            target_platform: one of :data:`TARGET_PLATFORMS` (any case); default rk3588
                with a warning.
            quant_img_RGB2BGR: True/False, or one per input (as many as ``mean_values``
                has): reverse that input's calibration images to BGR.  As in the vendor
                toolkit it only concerns calibration images (quantization); inference never
                reorders channels.
            float_dtype: ``"float16"`` (the NPU's storage precision, default) or
                ``"float32"`` (full precision reference; rknnlite's own).
            optimization_level: the vendor compiler's (a number); any other value than 3 is
                accepted with a warning that it changes nothing here.
            custom_string: free text stored in the model (``RKNN_QUERY_CUSTOM_STRING``).
            **other_toolkit_kwargs: other vendor options.  Settings of the vendor's NPU
                compiler (``compress_weight``, ``single_core_mode``,
                ``enable_flash_attention``, ``op_target``, ``memory_plan_strategy``,
                ``compute_order``, ``compiler_control_file``, ``mini_rknn``, and
                ``disable_rules``: a list of its optimiser's rule names) change nothing
                here: accepted, with a warning when not at the vendor's default;
                ``remove_weight=True`` builds a weight-less model: the weights of its
                Conv, ConvTranspose, Gemm and MatMul nodes are left out of the exported
                file, which then runs only beside a context of the full model built from
                the same network (``Context(model, share_weights_with=full_ctx)``;
                ``RKNN_FLAG_SHARE_WEIGHT_MEM`` on a board); this toolkit's simulator still
                runs it with its weights, as the vendor's does.
                ``model_pruning=True`` makes :meth:`build` remove channels that cannot
                change any output (lossless; see :mod:`rknnlite.toolkit.prune`).
                ``sparse_infer=True`` (RK3576 / RV1126B; elsewhere a warning and no
                effect) makes :meth:`build` detect each Conv/Gemm/MatMul weight's sparsity
                pattern, record it in the model and log its ``SparseRation`` (see
                :mod:`rknnlite.toolkit.sparsity`); the software backend runs marked Conv
                layers with a sparse kernel where that is faster.
                Options that would change the model (``inputs_yuv_fmt``,
                ``quantize_weight``, ...) at a non-default value fail.
                ``dynamic_input=[[shape_in0, shape_in1, ...], ...]``: the shape sets the
                model must run (one shape per input per set, ints > 0, at most 512
                sets); the built model is one graph that runs each of them, and
                inference takes the shape from the arrays (see
                :mod:`rknnlite.toolkit.shapes`).
        """
        if not self._alive("config"):
            return -1
        if self._imported is not None:
            self._log.error("config: config() should be called before load_onnx()!")
            return -1
        try:
            mean = _per_input_values(mean_values, "mean_values")
            std = _per_input_values(std_values, "std_values")
        except ValueError as e:
            return self._refuse_config("%s", e)
        if std is not None and any(v == 0 for row in std for v in row):
            return self._refuse_config("std_values must not contain 0: %s", std_values)
        if target_platform is None:
            self._log.warning("config: target_platform is not set, using the default: %s", _DEFAULT_PLATFORM)
            platform = _DEFAULT_PLATFORM
        else:
            platform = str(target_platform).lower()
            if platform not in TARGET_PLATFORMS:
                return self._refuse_config("target_platform %r is not supported; supported: %s", target_platform,
                                           ", ".join(TARGET_PLATFORMS))
        if not isinstance(float_dtype, str) or float_dtype not in ("float16", "float32"):
            return self._refuse_config("float_dtype must be 'float16' or 'float32', not %r", float_dtype)
        if custom_string is not None and not isinstance(custom_string, str):
            return self._refuse_config("custom_string must be a str, not %s", type(custom_string).__name__)
        try:
            rgb2bgr = _per_input_flags(quant_img_RGB2BGR, len(mean) if mean is not None else None)
        except ValueError as e:
            return self._refuse_config("%s", e)
        vendor_order = {"quantized_dtype": quantized_dtype, "quantized_algorithm": quantized_algorithm,
                        "quantized_method": quantized_method, "quantized_hybrid_level": quantized_hybrid_level}
        if not is_number(optimization_level):
            return self._refuse_config("optimization_level must be a number (the vendor's levels are 0 to 3), "
                                       "not %r", optimization_level)
        if optimization_level != 3:
            vendor_order["optimization_level"] = optimization_level
        other_toolkit_kwargs = {**vendor_order, **other_toolkit_kwargs}
        quant_cfg = dict(_QUANT_DEFAULTS)
        hybrid_cfg = dict(_HYBRID_DEFAULTS)
        dynamic_input = None
        pruning = False
        sparse_infer = False
        remove_weight = False
        for key, value in other_toolkit_kwargs.items():
            if key in _QUANT_DEFAULTS:
                if not isinstance(value, str):
                    return self._refuse_config("%s must be a str, not %r", key, value)
                quant_cfg[key] = value
            elif key == "sparse_infer":
                if not isinstance(value, (bool, np.bool_)):
                    return self._refuse_config("sparse_infer must be True or False, not %r", value)
                sparse_infer = bool(value)
                if sparse_infer:
                    from .sparsity import SPARSE_PLATFORMS

                    if platform not in SPARSE_PLATFORMS:
                        self._log.warning("config: sparse_infer=True has no effect on %s: sparse inference is only "
                                          "supported on %s; the model is built dense", platform,
                                          ", ".join(SPARSE_PLATFORMS))
            elif key == "remove_weight":
                if not isinstance(value, (bool, np.bool_)):
                    return self._refuse_config("remove_weight must be True or False, not %r", value)
                remove_weight = bool(value)
            elif key == "model_pruning":
                if not isinstance(value, (bool, np.bool_)):
                    return self._refuse_config("model_pruning must be True or False, not %r", value)
                pruning = bool(value)
            elif key in _HYBRID_DEFAULTS:
                problem = _hybrid_option_problem(key, value)
                if problem:
                    return self._refuse_config("%s", problem)
                hybrid_cfg[key] = value
            elif key in _COMPILER_SETTINGS:
                if key == "disable_rules" and not _is_rule_list(value):
                    return self._refuse_config("disable_rules must be a list of optimizer rule names, not %r", value)
                if not _is_compiler_default(key, value):
                    self._log.warning("config: %s=%r is not supported yet by rknnlite and is ignored (it steers "
                                      "RKNN-Toolkit2's NPU compiler; it does not change the model's results)",
                                      key, value)
            elif key == "dynamic_input":
                if value is not None:
                    from .shapes import validate_shape_sets

                    try:
                        dynamic_input = validate_shape_sets(value)
                    except ValueError as e:
                        return self._refuse_config("%s", e)
            elif key in _IGNORED_AT_DEFAULT:
                if not _is_default(value, _IGNORED_AT_DEFAULT[key]):
                    return self._refuse_config("%s=%r is not supported yet by rknnlite", key, value)
            else:
                return self._refuse_config("unknown option %r", key)
        refusal = _vendor_quant_refusal(quant_cfg, platform)
        if refusal:
            return self._refuse_config("%s", refusal)
        for key in _QUANT_DEFAULTS:
            problem = _quant_option_problem(key, quant_cfg[key])
            if problem:
                self._log.warning("config: %s; build(do_quantization=True) will fail", problem)
        self._config_error = None
        self._config = {
            "mean_values": mean, "std_values": std, "quant_img_RGB2BGR": rgb2bgr,
            "target_platform": platform, "float_dtype": float_dtype, "custom_string": custom_string or "",
            "dynamic_input": dynamic_input, **quant_cfg, **hybrid_cfg,
        }
        self._config["model_pruning"] = pruning
        self._config["sparse_infer"] = sparse_infer
        self._config["remove_weight"] = remove_weight
        if any(rgb2bgr if isinstance(rgb2bgr, list) else [rgb2bgr]):
            self._log.warning("config: quant_img_RGB2BGR=%r: calibration images (jpg/jpeg/png/bmp) are reversed "
                              "to BGR when loaded, .npy samples are used as they are; mean_values / std_values "
                              "then apply in BGR order", quant_img_RGB2BGR)
        self._log.debug("config: %s", self._config)
        return 0

    def _refuse_config(self, message: str, *args) -> int:
        """Log why config() refuses its options and remember it: the vendor's config() raises,
        which stops a script that never reads its return code, so the loaders refuse after a
        refused config() instead of going on with the default configuration."""
        self._config_error = message % args if args else message
        self._log.error("config: %s", self._config_error)
        return -1

    def reg_custom_op(self, custom_op) -> int:
        """Register a Python custom operator (a class, or an instance of one); call it between
        :meth:`config` and :meth:`load_onnx`, as the vendor requires.  Returns 0 or -1.

        The class has a string ``op_type`` (not a standard ONNX op; ``cst...`` is
        recommended), ``shape_infer(self, node, in_shapes, in_dtypes)`` and
        ``compute(self, node, inputs)`` (see :mod:`rknnlite.toolkit.custom_op`).  Nodes of
        that op type are then imported with the output shapes ``shape_infer`` gives,
        checked against ``compute`` at :meth:`build`, stored in the model with their
        attributes, and run with ``compute`` by :meth:`init_runtime`/:meth:`inference`.
        At run time outside the toolkit, give an instance of the same class to
        ``rknnlite.Context(model, custom_ops=[...])``.  Registering an op type again
        replaces the earlier class (with a warning).  A class whose ``op_type`` is a standard
        ONNX operator is ignored with a warning and 0, as RKNN-Toolkit2 ignores it (Rockchip's
        ``custom_op/replace_onnx`` example registers ``ArgMax``).
        """
        if not self._alive("reg_custom_op"):
            return -1
        if self._config is None or self._imported is not None:
            self._log.error("reg_custom_op: rknn.reg_custom_op() needs to be called between rknn.config() and "
                            "rknn.load_xxx()")
            return -1
        from ..backends.software.ops import KERNELS
        from .custom_op import standard_op_type, validate_custom_op

        standard = standard_op_type(custom_op)
        if standard is not None:  # the vendor's answer: a warning, the call ignored, 0
            self._log.warning("reg_custom_op: op_type %r is a standard ONNX operator: this call is ignored and the "
                              "model runs %s as the standard op; a custom operator needs a new op type (e.g. "
                              "'cst%s')", standard, standard, standard)
            return 0
        try:
            op = validate_custom_op(custom_op, reserved=tuple(KERNELS))
        except RKNNError as e:
            self._log.error("reg_custom_op: %s", e.message)
            return -1
        if op.op_type in self._custom_ops:
            self._log.warning("reg_custom_op: %s was registered already; the new class %s replaces it",
                              op.op_type, type(op).__name__)
        self._custom_ops[op.op_type] = op
        self._log.info("reg_custom_op: registered custom op %s (class %s)", op.op_type, type(op).__name__)
        return 0

    # -- loading -------------------------------------------------------------------------------

    def load_onnx(self, model, inputs=None, input_size_list=None, input_initial_val=None, outputs=None) -> int:
        """Load an ONNX model (path, bytes or ``onnx.ModelProto``).  Returns 0 or -1.

        ``inputs``/``outputs`` name the tensors to use as the model's inputs and outputs
        (cutting the graph there); ``input_size_list`` gives one shape per input and
        fixes dynamic dims; ``input_initial_val`` (one entry per input, None or an array)
        turns the inputs given an array into constants of that value, which leave the
        model's inputs (RKNN-Toolkit2's argument, in its place).
        """
        def importer():
            from .onnx_import import import_onnx

            return import_onnx(model, inputs=inputs, input_size_list=input_size_list, outputs=outputs,
                               input_initial_val=input_initial_val, **self._import_options("load_onnx"))

        return self._load_model("load_onnx", model, importer)

    def load_tflite(self, model, input_is_nchw=False, input_is_quant=True) -> int:
        """Load a TensorFlow Lite model (``.tflite`` path or bytes).  Returns 0 or -1.

        ``input_is_nchw`` is RKNN-Toolkit2's argument (in its place): ``False``, the file's
        layout, is what this loader reads; ``True`` is refused as not supported yet.

        4-D inputs become NCHW model inputs (``inference`` takes NHWC data by default);
        4-D outputs stay NHWC, as the TFLite interpreter returns them.  An int8/uint8
        quantized file keeps its own scales and zero points: ``build(do_quantization=False)``
        makes an int8 model from them.  A quantized (uint8/int8) input takes the file's
        codes themselves (the uint8 image of a uint8 model), as RKNN-Toolkit2 feeds it,
        and ``mean_values``/``std_values`` do not apply to it; ``input_is_quant=False``
        (an rknnlite option) makes it take real values instead.  Needs the ``tflite`` package (see
        :mod:`rknnlite.toolkit.loaders.tflite`).
        """
        if input_is_nchw:
            self._log.error("load_tflite: input_is_nchw=True is not supported yet by rknnlite (the inputs are read "
                            "in the file's NHWC layout; inference takes NHWC data)")
            return -1

        def importer():
            from .loaders.tflite import load_tflite

            return load_tflite(model, input_is_quant, **self._import_options("load_tflite"))

        return self._load_model("load_tflite", model, importer)

    def load_tensorflow(self, tf_pb, inputs, input_size_list, outputs, input_is_nchw=False) -> int:
        """Load a frozen TensorFlow graph (``.pb`` path or bytes): ``inputs``/``outputs`` are
        node (or tensor) names, ``input_size_list`` one shape per input as TensorFlow sees
        it (``[[1, 224, 224, 3]]``).  4-D inputs become NCHW model inputs unless
        ``input_is_nchw``.  Returns 0 or -1.  Needs tensorflow and tf2onnx (see
        :mod:`rknnlite.toolkit.loaders.tensorflow`).
        """
        def importer():
            from .loaders.tensorflow import load_tensorflow

            return load_tensorflow(tf_pb, inputs, input_size_list, outputs, input_is_nchw,
                                   **self._import_options("load_tensorflow"))

        return self._load_model("load_tensorflow", tf_pb, importer)

    def load_caffe(self, model, blobs=None, input_name=None) -> int:
        """Load a Caffe model: ``model`` the ``.prototxt`` path (or its bytes), ``blobs`` the
        ``.caffemodel`` path (or its bytes; None: every layer must be weightless);
        ``input_name`` orders the inputs of a multi-input net (a list of names).  Returns 0
        or -1.  Needs no Caffe (see :mod:`rknnlite.toolkit.loaders.caffe`).
        """
        def importer():
            from .loaders.caffe import load_caffe

            return load_caffe(model, blobs, input_name, **self._import_options("load_caffe"))

        return self._load_model("load_caffe", model, importer)

    def load_darknet(self, model, weight) -> int:
        """Load a Darknet model: ``model`` is the ``.cfg`` path, ``weight`` the ``.weights``
        path (either may be the file's bytes).  Returns 0 or -1.  The input is ``"input"``
        (NCHW, from ``[net]``); each ``[yolo]`` layer ``i`` gives output ``"yolo_<i>"``, its
        raw head convolution (see :mod:`rknnlite.toolkit.loaders.darknet`).
        """
        def importer():
            from .loaders.darknet import load_darknet

            return load_darknet(model, weight, **self._import_options("load_darknet"))

        return self._load_model("load_darknet", model, importer)

    def load_pytorch(self, model, input_size_list) -> int:
        """Load a TorchScript model (``.pt`` path or bytes, saved with ``torch.jit.save`` or
        ``torch.jit.trace(...).save``) with one shape per input in ``input_size_list``
        (e.g. ``[[1, 3, 224, 224]]``).  Returns 0 or -1.  Needs torch (see
        :mod:`rknnlite.toolkit.loaders.pytorch`).
        """
        def importer():
            from .loaders.pytorch import load_pytorch

            return load_pytorch(model, input_size_list, **self._import_options("load_pytorch"))

        return self._load_model("load_pytorch", model, importer)

    def _import_options(self, api: str) -> Dict[str, Any]:
        """The keyword arguments every importer takes from this object's state: the
        ``dynamic_input`` shape sets, the registered custom ops and a warning sink."""
        return {"dynamic_input": (self._config or {}).get("dynamic_input"),
                "custom_ops": self._custom_ops,
                "warn": lambda m: self._log.warning("%s: %s", api, m)}

    def _load_model(self, api: str, model, importer) -> int:
        """Run ``importer()`` (which returns an ``ImportedModel``) as ``api`` does: drop the
        previous model and runtime, log what was loaded, and turn a missing framework
        (ImportError) or a bad model (``ModelInvalidError``) into an error line and -1."""
        if not self._alive(api):
            return -1
        if self._config_error is not None:
            self._log.error("%s: the last config() was refused (%s); call config() again with options it takes",
                            api, self._config_error)
            return -1
        from ..errors import ModelInvalidError

        self._release_runtime()
        self._imported = None
        self._model_bytes = None
        self._vendor_file = False
        label = model if isinstance(model, (str, os.PathLike)) else type(model).__name__
        self._log.info("Loading : %s", label)
        try:
            imported = importer()
        except ImportError as e:
            self._log.error("%s: a package this loader needs is missing: %s", api, e)
            return -1
        except ModelInvalidError as e:
            self._log.error("%s: %s", api, e.message)
            return -1
        except Exception as e:  # a converter bug: report it the toolkit way, with the traceback
            self._log.error("%s: unexpected %s: %s", api, type(e).__name__, e, exc_info=True)
            return -1
        self._imported = imported
        self._source_name = os.path.basename(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else None
        self._hybrid = None
        if self._config is None:
            self._log.warning("%s: config() was not called; using the default configuration", api)
        self._log.info("%s: %d nodes, inputs %s, outputs %s", api, len(imported.graph.nodes),
                       [s.name for s in imported.input_specs], [s.name for s in imported.output_specs])
        return 0

    def load_rknn(self, path) -> int:
        """Load a model (path or bytes) to run it with :meth:`init_runtime`: one this toolkit
        exported, or a file RKNN-Toolkit2 built, which the software NPU runs off-board where its
        platform and ops are validated (``init_runtime`` says why where they are not).
        RKNN-Toolkit2's own simulator refuses the latter ("RKNN model that loaded by
        'load_rknn' not support inference on the simulator"), so a warning says so; such a
        file has no source model for :meth:`accuracy_analysis` or hybrid quantization.
        Encrypted files are refused (run them with :class:`rknnlite.Context` and their key).
        Returns 0 or -1."""
        if not self._alive("load_rknn"):
            return -1
        from ..model.loader import PORTABLE, ROCKCHIP, load_model

        self._release_runtime()
        try:
            if isinstance(path, (str, os.PathLike)):
                with open(path, "rb") as f:
                    data = f.read()
            elif isinstance(path, (bytes, bytearray, memoryview)):
                data = bytes(path)
            else:  # bytes(5) would be five zero bytes, not a file
                raise TypeError(f"path must be a file path or the model's bytes, not {type(path).__name__}")
            loaded = load_model(data)
        except (OSError, TypeError, ValueError) as e:  # ValueError: a NUL byte in the path
            self._log.error("load_rknn: cannot read %s: %s", path, e)
            return -1
        except RKNNError as e:
            self._log.error("load_rknn: %s", e.message)
            return -1
        label = path if isinstance(path, (str, os.PathLike)) else "the model bytes"
        if loaded.format not in (PORTABLE, ROCKCHIP):
            self._log.error("load_rknn: %s is a %s model; the toolkit's simulator runs unencrypted models (run it "
                            "with rknnlite.Context and its key)", label, loaded.format)
            return -1
        if loaded.format == ROCKCHIP:
            self._log.warning("load_rknn: %s was built by RKNN-Toolkit2; init_runtime() runs it on rknnlite's "
                              "software NPU (RKNN-Toolkit2's simulator refuses files loaded by load_rknn)", label)
        self._imported = None
        self._model_bytes = data
        self._full_bytes = None
        self._vendor_file = loaded.format == ROCKCHIP
        return 0

    # -- building ------------------------------------------------------------------------------

    def build(self, do_quantization: Optional[bool] = None, dataset: Optional[str] = None,
              rknn_batch_size: Optional[int] = None, auto_hybrid: bool = False) -> int:
        """Optimise the loaded model and build the runtime model.  Returns 0 or -1.

        ``do_quantization`` not given follows RKNN-Toolkit2, whose default is ``True``: with a
        ``dataset`` the build is quantized (``build(dataset="dataset.txt")`` is an int8 build
        there and here); without one the vendor refuses, and this builds without quantization,
        with a warning.

        ``do_quantization=True`` builds an int8 model calibrated on ``dataset``: a text
        file with one sample per line and one path per model input separated by
        spaces, relative paths read from the dataset file's folder (as in the vendor
        toolkit); each path names an image (JPEG/PNG/BMP, RGB, resized to the input's size
        as the vendor resizes it; ``quant_img_RGB2BGR=True`` reverses it to BGR) or a ``.npy`` array in the
        model's layout (NCHW float32), raw values *before* mean/std (see
        :mod:`rknnlite.toolkit.dataset`).  Activations (graph inputs after mean/std and
        every node output) get asymmetric int8 per tensor from the range the
        ``quantized_algorithm`` chooses (``normal``: min/max; ``mmse``; ``kl_divergence``;
        see :mod:`rknnlite.toolkit.calibration`); the weights of Conv, ConvTranspose, Gemm
        and MatMul symmetric int8 per output channel (``quantized_method='channel'``)
        or per tensor (``'layer'``); biases stay float.  See
        :mod:`rknnlite.toolkit.quantize`.  A model loaded quantized already (QDQ ONNX,
        TensorFlow FakeQuant, an int8/uint8 TFLite or quantized PyTorch file) builds as int8
        with its own parameters when ``do_quantization=False``; ``True`` returns -1, as
        RKNN-Toolkit2 does ("If a quantized model has been import, please set
        do_quantization = False.").

        A model loaded with ``config(dynamic_input=...)`` is built as one graph and run
        once on every shape set (a set it cannot run fails the build, naming the set and
        the node); output shapes get ``-1`` on the dims that vary.  Its calibration
        samples must each match one set; a set no sample matches is calibrated on the
        samples centre-cropped / wrapped to its shapes.

        ``rknn_batch_size=N`` (a positive int; ``None`` or 1: no batching) multiplies
        axis 0 of every input and output by ``N``, as the vendor does: each input must
        have axis 0 equal to 1 and no input or output may be a scalar.  The model stores
        the batch-1 graph with ``batch_size=N`` in its metadata; the runtime runs the
        ``N`` samples of a batch through it.  It cannot be combined with
        ``dynamic_input`` (give the batch sizes in the shape sets instead).

        Hybrid quantization (:mod:`rknnlite.toolkit.hybrid`): ``auto_hybrid=True`` (or
        ``config(quantized_hybrid_level=N)``) keeps in float16 the layers whose int8 output,
        each layer run alone on float inputs, has a cosine below
        ``config(auto_hybrid_cos_thresh=0.98)`` (or a euclidean distance above
        ``auto_hybrid_euc_thresh``); :meth:`hybrid_quantization_step2` builds with the
        layers its cfg lists.  After calibration ``build`` warns about what quantization
        destroys: outputs whose channels mostly quantize to one value, layers whose int8
        output loses more than 2 % of cosine.

        With ``RKNN(verbose=True)`` the optimiser's stages are written into the current
        working directory as the vendor writes them: ``check0_base_optimize.onnx`` and,
        for each later stage that changed the graph, ``check1_fold_constant.onnx``,
        ``check2_correct_ops.onnx``, ``check3_fuse_ops.onnx`` (see
        :mod:`rknnlite.toolkit.check_models`; a file that cannot be written is a warning).

        The build itself is :mod:`rknnlite.toolkit.build`'s pipeline of named steps; this
        method checks the arguments and turns what the pipeline raises into ``-1``.
        """
        return self._build(do_quantization, dataset, rknn_batch_size, auto_hybrid, check_models=self._verbose)

    def _build(self, do_quantization: Optional[bool], dataset: Optional[str], rknn_batch_size: Optional[int],
               auto_hybrid: bool, check_models: bool) -> int:
        """:meth:`build`; ``check_models``: write the optimiser's ``check*.onnx`` files."""
        if not self._alive("build"):
            return -1
        if self._imported is None:
            self._log.error("build: %s", _NO_MODEL)
            return -1
        if not (do_quantization is None or is_flag(do_quantization)) or not is_flag(auto_hybrid):
            self._log.error("build: do_quantization and auto_hybrid take True or False, not %r and %r (the "
                            "dataset goes by name: build(do_quantization=True, dataset='dataset.txt'))",
                            do_quantization, auto_hybrid)
            return -1
        batch = 1 if rknn_batch_size is None else rknn_batch_size
        if not is_int(batch) or not 1 <= batch <= 4096:
            self._log.error("build: rknn_batch_size must be a positive int (at most 4096), not %r", rknn_batch_size)
            return -1
        batch = int(batch)
        sets = self._imported.dynamic_shapes
        if batch > 1 and sets:
            self._log.error("build: rknn_batch_size=%d cannot be combined with config(dynamic_input=...); give the "
                            "batch sizes in the dynamic_input shapes instead", batch)
            return -1
        if do_quantization is None:
            do_quantization = dataset is not None or bool(auto_hybrid)
            if not do_quantization and not self._imported.graph.quant:
                self._log.warning("build: do_quantization is not given and there is no dataset: building without "
                                  "quantization (RKNN-Toolkit2 quantizes by default and refuses a build without a "
                                  "dataset; say do_quantization=False for a float build)")
        elif dataset is not None and not do_quantization:
            self._log.warning("build: dataset is only used for quantization; ignored")
        cfg = self._config or self._default_config()
        try:
            job = prepare(self._imported, cfg, quantize=do_quantization, dataset=dataset, hybrid=self._hybrid,
                          batch=batch, auto_hybrid=auto_hybrid, custom_ops=self._custom_ops, log=self._log,
                          verbose=self._verbose, quant_problem=lambda: _quant_config_problem(cfg),
                          stages=self._stage_writer("build") if check_models else None)
        except RKNNError as e:
            self._log.error("build: %s", e.message)
            return -1
        self._release_runtime()
        self._model_bytes = None
        self._log.info("Building model (%s%s)", cfg["float_dtype"], ", int8 quantized" if do_quantization else "")
        try:
            run_build(job)
        except RKNNError as e:
            self._log.error("build: %s", e.message)
            return -1
        except Exception as e:  # a converter bug: report it the toolkit way, with the traceback
            self._log.error("build: unexpected %s: %s", type(e).__name__, e, exc_info=True)
            return -1
        self._log.info("build: %d nodes -> %d after optimisation, %d bytes",
                       len(self._imported.graph.nodes), len(job.graph.nodes), len(job.data))
        self._model_bytes = job.data
        self._full_bytes = job.full
        self._vendor_file = False
        return 0

    def _stage_writer(self, what: str):
        """The ``optimize`` callback writing the loaded model's ``check*.onnx`` files in the cwd."""
        from .check_models import stage_writer

        imported = self._imported
        return stage_writer(imported.input_specs, imported.output_specs, imported.opset, imported.shapes, self._log,
                            what)

    def _default_config(self) -> Dict[str, Any]:
        self._log.warning("build: target_platform is not set, using the default: %s", _DEFAULT_PLATFORM)
        self._config = {"mean_values": None, "std_values": None, "quant_img_RGB2BGR": False,
                        "target_platform": _DEFAULT_PLATFORM, "float_dtype": "float16", "custom_string": "",
                        **_QUANT_DEFAULTS}
        return self._config

    def export_rknn(self, export_path, cpp_gen_cfg: bool = False, **kwargs) -> int:
        """Write the built model to ``export_path``.  Returns 0 or -1."""
        if not self._alive("export_rknn"):
            return -1
        if self._model_bytes is None:
            self._log.error("export_rknn: %s", _NOT_BUILT)
            return -1
        if not isinstance(export_path, (str, os.PathLike)):  # open(3, "wb") writes into (and closes) fd 3
            self._log.error("export_rknn: export_path must be a file path, not %r", export_path)
            return -1
        if not is_flag(cpp_gen_cfg):
            self._log.error("export_rknn: cpp_gen_cfg must be True or False, not %r", cpp_gen_cfg)
            return -1
        if cpp_gen_cfg or kwargs:
            self._log.warning("export_rknn: cpp_gen_cfg and other options are not supported yet; ignored")
        try:
            with open(export_path, "wb") as f:
                f.write(self._model_bytes)
        except (OSError, TypeError, ValueError) as e:  # ValueError: a NUL byte in the path
            self._log.error("export_rknn: cannot write %s: %s", export_path, e)
            return -1
        self._log.info("export_rknn: %s (%d bytes)", export_path, len(self._model_bytes))
        return 0

    def export_encrypted_rknn_model(self, input_model, output_model=None, crypt_level: int = 1, key=None) -> int:
        """Encrypt an exported model file with rknnlite's envelope (AES-256-GCM, see
        :mod:`rknnlite.model.envelope`).  Returns 0 or -1.

        Args:
            input_model: path of a model file (a model this toolkit exported, or a
                Rockchip ``.rknn``).
            output_model: where to write; default ``<input without extension>.crypt.rknn``.
            crypt_level: 1, 2 or 3 as in the vendor toolkit (another value: warning, 1 is
                used).  Every level uses the same envelope: decryption costs the same.
            key: what :func:`rknnlite.model.envelope.resolve_key` takes, as
                ``rknnlite.Context(key=...)`` does: the 32-byte key as ``bytes``, a key
                file path, or a ``ModelKey`` (e.g. a passphrase).  ``None``: the
                ``RKNNLITE_MODEL_KEY`` variable when set, else the key file
                ``<output without extension>_key.bin`` (created with a new random key,
                mode 0600, when it does not exist).

        Load the result with ``rknnlite.Context(path, key=...)`` or
        ``RKNNLite.load_rknn(path, key_path=<key file>)``.
        """
        if not self._alive("export_encrypted_rknn_model"):
            return -1
        from ..model import envelope
        from ..model.loader import ENVELOPE, ROCKCHIP_ENCRYPTED, detect_format
        from ..model.source import open_source

        what = "export_encrypted_rknn_model"
        if not isinstance(input_model, (str, os.PathLike)) or not os.path.isfile(input_model):
            self._log.error("%s: input model not found: %s", what, input_model)
            return -1
        if output_model is None:
            output_model = os.path.splitext(os.fspath(input_model))[0] + ".crypt.rknn"
        if isinstance(crypt_level, bool) or crypt_level not in (1, 2, 3):
            self._log.warning("%s: crypt_level must be 1, 2 or 3, not %r; using 1", what, crypt_level)
            crypt_level = 1
        try:
            source = open_source(input_model)
            fmt = detect_format(source.view)
            if fmt in (ENVELOPE, ROCKCHIP_ENCRYPTED):
                self._log.error("%s: %s is already encrypted", what, input_model)
                return -1
            key_note = "the given key"
            if key is None and envelope.resolve_key(None) is None:
                key = os.path.splitext(os.fspath(output_model))[0] + "_key.bin"
                if os.path.exists(key):
                    key_note = f"the existing key file {key}"
                else:
                    envelope.write_key_file(key, envelope.generate_key())
                    key_note = f"a new key written to {key}"
            elif key is None:
                key_note = f"the key in {envelope.KEY_ENV_VAR}"
            data = envelope.encrypt(source.view, envelope.resolve_key(key))
            with open(output_model, "wb") as f:
                f.write(data)
        except RKNNError as e:
            self._log.error("%s: %s", what, e.message)
            return -1
        except OSError as e:
            self._log.error("%s: cannot write %s: %s", what, e.filename or output_model, e.strerror or e)
            return -1
        self._log.info("%s: %s -> %s (crypt_level %d, %s)", what, input_model, output_model, crypt_level, key_note)
        return 0

    def hybrid_quantization_step1(self, dataset: Optional[str] = "dataset.txt", rknn_batch_size: Optional[int] = None,
                                  proposal: bool = False, proposal_dataset_size: int = 1,
                                  custom_hybrid=None) -> int:
        """First step of hybrid quantization: calibrate the loaded model on ``dataset``
        (RKNN-Toolkit2's default, ``dataset.txt`` in the current directory) and
        write, in the current directory, ``<stem>.model`` (the optimised float graph),
        ``<stem>.data`` (the configuration and calibration) and ``<stem>.quantization.cfg``
        (``stem``: the loaded file's name without its last extension).  Edit the cfg's
        ``custom_quantize_layers`` (tensor name -> ``float16`` or ``int8``) and, if wanted,
        the ``min`` / ``max`` of ``quantize_parameters``, then call
        :meth:`hybrid_quantization_step2`.  ``proposal=True`` pre-fills
        ``custom_quantize_layers`` with the layers whose int8 output loses the most (their
        cosine as a comment, judged on ``proposal_dataset_size`` samples);
        ``custom_hybrid=[[input_name, output_name], ...]`` fills it with the tensors between
        each pair.  With ``RKNN(verbose=True)`` it also writes the optimiser's ``check*.onnx``
        files, as :meth:`build` does (step2's build does not, as in the vendor toolkit).
        Returns 0 or -1."""
        if not self._alive("hybrid_quantization_step1"):
            return -1
        if self._config is None:
            self._log.error("hybrid_quantization_step1: Please call rknn.config first!")
            return -1
        if self._imported is None:
            self._log.error("hybrid_quantization_step1: %s", _NO_MODEL)
            return -1
        if self._imported.graph.quant:  # RKNN-Toolkit2 2.5.0: -1, "Not support QAT model!"
            self._log.error("hybrid_quantization_step1: Not support QAT model! The model carries its own "
                            "quantization (QDQ pairs, FakeQuant nodes or a quantized file): build it with "
                            "build(do_quantization=False), which uses its grids")
            return -1
        if not (rknn_batch_size is None or (is_int(rknn_batch_size) and rknn_batch_size == 1)) \
                or self._config.get("dynamic_input"):
            self._log.error("hybrid_quantization_step1: rknn_batch_size and dynamic_input are not supported with "
                            "hybrid quantization yet")
            return -1
        if not is_flag(proposal):
            self._log.error("hybrid_quantization_step1: proposal must be True or False, not %r", proposal)
            return -1
        if not isinstance(proposal_dataset_size, int) or proposal_dataset_size < 1:
            self._log.error("hybrid_quantization_step1: proposal_dataset_size must be an int >= 1, not %r",
                            proposal_dataset_size)
            return -1
        from . import hybrid, quantize
        from .optimize import optimize

        cfg = self._config
        stem = os.path.splitext(self._source_name)[0] if self._source_name else "model"
        try:
            preprocess = preprocess_pairs(cfg, self._imported.input_specs, self._imported.raw_inputs)
            samples = quantize.read_dataset(dataset, self._imported.input_specs, rgb2bgr=cfg["quant_img_RGB2BGR"])
            # verbose: the optimiser's check*.onnx files, as the vendor's step1 writes them
            graph = optimize(self._imported.graph, self._imported.shapes, vendor_affines=True,
                             stages=self._stage_writer("hybrid_quantization_step1") if self._verbose else None)
            custom = list(self._custom_ops.values())
            algorithm = cfg.get("quantized_algorithm", "normal")
            method = cfg.get("quantized_method", "channel")
            ranges = quantize.calibrate(graph, samples, preprocess or None, algorithm, self._verbose,
                                        custom_ops=custom, method=method)
            quant = quantize.quantize_graph(graph, ranges, method)
            # the vendor's cfg under mmse shows the kl_divergence ranges; step2 builds with mmse's own
            shown, shown_quant = ranges, quant
            if algorithm == "mmse":
                shown = quantize.calibrate(graph, samples, preprocess or None, "kl_divergence", self._verbose,
                                           custom_ops=custom)
                shown_quant = quantize.quantize_graph(graph, shown, method)
            layers: Dict[str, str] = {}
            proposals: Optional[Dict[str, float]] = None
            if custom_hybrid is not None:
                layers.update((name, "float16") for name in hybrid.subgraph_tensors(graph, custom_hybrid))
            if proposal:
                proposals = proposed_floats(graph, quant, samples[:proposal_dataset_size],
                                            float_outputs_per_sample(graph, samples, preprocess, custom), preprocess,
                                            float(cfg["auto_hybrid_cos_thresh"]), cfg.get("auto_hybrid_euc_thresh"),
                                            custom)
                layers.update((name, "float16") for name in proposals)
            hybrid.write_step1(stem, graph, self._imported, cfg, shown, shown_quant, layers, proposals,
                               sorted(self._custom_ops), build_ranges=ranges if shown is not ranges else None)
        except (quantize.DatasetError, ValueError, RKNNError) as e:
            self._log.error("hybrid_quantization_step1: %s", getattr(e, "message", e))
            return -1
        except OSError as e:
            self._log.error("hybrid_quantization_step1: cannot write the step1 files: %s", e)
            return -1
        self._log.info("hybrid_quantization_step1: wrote %s%s, %s%s, %s%s", stem, hybrid.MODEL_SUFFIX, stem,
                       hybrid.DATA_SUFFIX, stem, hybrid.CFG_SUFFIX)
        return 0

    def hybrid_quantization_step2(self, model_input: str, data_input: str, model_quantization_cfg: str) -> int:
        """Second step of hybrid quantization: build the int8 model of step1's files with the
        tensors the (edited) cfg lists as ``float16`` kept in float, and its ranges.  A fresh
        ``RKNN`` object is enough (no :meth:`config`: step1's configuration is in the
        ``.data`` file).  :meth:`export_rknn`, :meth:`init_runtime` and
        :meth:`accuracy_analysis` work afterwards.  Returns 0 or -1."""
        if not self._alive("hybrid_quantization_step2"):
            return -1
        from . import hybrid

        try:
            imported, saved_cfg, layers, ranges = hybrid.read_step2(model_input, data_input, model_quantization_cfg,
                                                                  sorted(self._custom_ops))
        except (hybrid.HybridError, RKNNError) as e:
            self._log.error("hybrid_quantization_step2: %s", getattr(e, "message", e))
            return -1
        if self._config is not None and self._config != saved_cfg:
            self._log.warning("hybrid_quantization_step2: The config of 'step2' is inconsistent with 'step1', it is "
                              "better not to call the 'rknn.config' in step2!")
        self._config = saved_cfg
        self._imported = imported
        self._source_name = os.path.basename(os.fspath(model_input))
        self._hybrid = (layers, ranges)
        # the vendor's step2 writes no check*.onnx files, verbose or not
        return self._build(True, None, None, False, check_models=False)

    def accuracy_analysis(self, inputs, output_dir: str = "./snapshot", target=None, device_id=None,
                          ref_outputs=None) -> int:
        """Compare the built model with its float32 reference layer by layer on one sample
        and write the results to ``output_dir``.  Returns 0 or -1.

        ``inputs``: one path per model input, an image or a ``.npy`` array read as the
        calibration dataset reads them (model layout, NCHW for 4-D inputs, raw values
        before mean/std); arrays in that form are accepted too.  The parameters are in
        RKNN-Toolkit2's order; ``ref_outputs`` (an rknnlite option, after them):
        expected final outputs (``.npy`` paths or arrays) compared with the
        simulator's.  Writes ``golden/`` and ``simulator/`` (one ``.txt`` and one ``.npy``
        per tensor), ``map_name_to_file.txt`` and ``error_analysis.txt`` (per tensor: cosine
        and euclidean distance, accumulated ("entire") and of the layer alone ("single"));
        see :mod:`rknnlite.toolkit.accuracy`.  ``output_dir=None``, as in RKNN-Toolkit2,
        writes only the two tables, into ``./snapshot``.  The error table is also logged
        (info level: shown with ``verbose=True``).  Only the simulator is supported:
        ``target``/``device_id`` must be None.
        """
        what = "accuracy_analysis"
        if not self._alive(what):
            return -1
        if target is not None or device_id is not None:
            self._log.error("%s: target=%r: rknnlite analyses models on its software backend only (target=None)",
                            what, target)
            return -1
        if self._model_bytes is None:
            self._log.error("%s: %s", what, _NOT_BUILT)
            return -1
        if self._vendor_file:
            self._log.error("%s: the model loaded by load_rknn was built by RKNN-Toolkit2: there is no float model "
                            "behind it to compare its layers with; load and build the source model (load_onnx, "
                            "build), or compare the outputs of init_runtime()/inference() yourself", what)
            return -1
        from ..model.loader import load_model
        from .accuracy import MAP_NAME, analyse, format_report, load_inputs

        try:
            model = load_model(self._model_bytes).model
            raw = load_inputs(inputs, model.metadata.inputs)
            refs = None
            if ref_outputs is not None:
                refs = [np.load(r, allow_pickle=False) if isinstance(r, (str, os.PathLike)) else np.asarray(r)
                        for r in (ref_outputs if isinstance(ref_outputs, (list, tuple)) else [ref_outputs])]
            out_dir = os.path.join(".", "snapshot") if output_dir is None else os.fspath(output_dir)
            reference = self._float_reference(model.metadata.float_dtype, bool(model.graph.quant))
            result = analyse(model, raw, out_dir, list(self._custom_ops.values()), refs, reference,
                             tensor_files=output_dir is not None)
        except RKNNError as e:
            self._log.error("%s: %s", what, e.message)
            return -1
        except (ValueError, TypeError) as e:
            self._log.error("%s: %s", what, e)
            return -1
        except OSError as e:
            self._log.error("%s: cannot read or write %s: %s", what, e.filename or output_dir, e.strerror or e)
            return -1
        for line in format_report(result):
            self._log.info("%s", line)
        by_name = {layer.name: layer for layer in result.layers}
        for name in result.outputs:
            layer = by_name[name]
            self._log.info("%s: output %s: cos %.5f, euc %.5g (entire)", what, name, layer.entire_cos,
                           layer.entire_euc)
        self._log.info("%s: %d tensors analysed; The error analysis results save to: %s", what, len(result.layers),
                       result.report_path)
        self._log.info("%s: The mapping of layer_name & file_name save to: %s", what,
                       os.path.join(os.path.dirname(result.report_path), MAP_NAME))
        return 0

    def _float_reference(self, float_dtype: str, quantized: bool):
        """The float graph a model of ``float_dtype`` (quantized or not) built here comes from
        (optimised as that build was, pruned as configured, not quantized, not rounded), or None
        when the model was not built from ONNX here."""
        if self._imported is None:
            return None
        from .optimize import optimize, splits_pools

        rounds = splits_pools(float_dtype, quantized)
        graph = optimize(self._imported.graph, self._imported.shapes, split_pools=rounds, vendor_affines=rounds)
        if (self._config or {}).get("model_pruning"):
            from .prune import prune_channels

            prune_channels(graph, self._imported.shapes)
        return graph

    # -- running -------------------------------------------------------------------------------

    def init_runtime(self, target: Optional[str] = None, device_id=None, perf_debug: bool = False,
                     eval_mem: bool = False, async_mode: bool = False,
                     core_mask: int = Lite2CoreMasks.NPU_CORE_AUTO, fallback_prior_device: str = "cpu", *,
                     target_sub_class=None, **kwargs) -> int:
        """Initialise the simulator (``target=None``: the software backend) on the built or
        loaded model.  Board targets are refused.  Returns 0 or -1.

        The parameters are in RKNN-Toolkit2 2.x's order; ``target_sub_class`` (RKNN-Toolkit
        1.x's) goes by keyword.  The simulator has no use for the board options
        (``perf_debug``, ``eval_mem``, ``async_mode``, ``fallback_prior_device``...): set,
        they log a warning."""
        if not self._alive("init_runtime"):
            return -1
        if target is not None or device_id is not None:
            self._log.error("init_runtime: target=%r: rknnlite's toolkit runs models on its software backend "
                            "(target=None); to run on a board, copy the exported model there and use "
                            "rknnlite.api.RKNNLite", target)
            return -1
        if self._model_bytes is None:
            self._log.error("init_runtime: %s", _NOT_BUILT)
            return -1
        if not all(is_flag(v) for v in (perf_debug, eval_mem, async_mode)):
            self._log.error("init_runtime: perf_debug, eval_mem and async_mode take True or False, not %r, %r and %r",
                            perf_debug, eval_mem, async_mode)
            return -1
        if perf_debug or eval_mem or async_mode or not (isinstance(fallback_prior_device, str) and
                                                        fallback_prior_device == "cpu") or kwargs:
            self._log.warning("init_runtime: perf_debug, eval_mem, async_mode and other options are not "
                              "supported by the simulator; ignored")
        from ..runtime.context import Context

        self._release_runtime()
        self._log.info("init_runtime: target is None, using the software backend (simulator)")
        try:
            model = self._full_bytes or self._model_bytes
            self._ctx = Context(model, backend="software", custom_ops=list(self._custom_ops.values()))
        except RKNNError as e:
            self._log.error("init_runtime: %s", e.message)
            return -1
        except Exception as e:  # a runtime bug: report it the toolkit way, with the traceback
            self._log.error("init_runtime: unexpected %s: %s", type(e).__name__, e, exc_info=True)
            return -1
        return 0

    def inference(self, inputs, data_format=None, inputs_pass_through=None, get_frame_id: bool = False, *,
                  data_type=None):
        """Run the model; returns the outputs (float outputs as float32), or None.  The
        ``uint8``/``int8`` outputs of a quantized TFLite file come in that type, on the
        file's scale and zero point, as RKNN-Toolkit2 returns them.

        ``inputs``: a list with one array per model input.  An array of lower rank than
        its input gets leading 1s (``(128, 128, 1)`` -> ``(1, 128, 128, 1)``, a view) with
        the vendor simulator's warning "... expect dims is 4! Try expand dims to ...";
        a higher rank is refused.  ``data_format``: for 4-D inputs ``'nhwc'`` (default)
        or ``'nchw'``, one value or a list with one value per input.
        ``inputs_pass_through``: per input 0/1 (or True/False); 1 skips the model's mean/std.
        As the vendor's simulator, an input computed in float takes any numeric dtype (cast
        to float32); :class:`~rknnlite.Context` takes librknnrt's dtypes only.
        The parameters are in RKNN-Toolkit2 2.x's order; ``data_type`` (Lite2's and
        RKNN-Toolkit2 1.x's second parameter, ignored) goes by keyword.
        """
        if not self._alive("inference"):
            return None
        if self._ctx is None:
            self._log.error("inference: Runtime environment is not inited, please call init_runtime to init it "
                            "first!")
            return None
        if not isinstance(inputs, (list, tuple)):
            if isinstance(inputs, np.ndarray) and len(self._ctx.inputs) == 1:
                inputs = [inputs]
            else:
                self._log.error("inference: inputs should be placed in a list, like [img1, img2]")
                return None
        if data_type is not None:
            self._log.debug("inference: data_type is ignored (inputs are cast to the model's types)")
        n = len(self._ctx.inputs)
        if len(inputs) != n:
            self._log.error("inference: the model needs %d inputs, but %d inputs are fed", n, len(inputs))
            return None
        if data_format is None or isinstance(data_format, str):
            data_format = [data_format] * n
        if not isinstance(data_format, (list, tuple)) or len(data_format) != n:
            self._log.error("inference: data_format must be 'nhwc' or 'nchw', or a list with one per input (%d), "
                            "not %r", n, data_format)
            return None
        passes = _pass_through_flags(inputs_pass_through, n)
        if isinstance(passes, str):
            self._log.error("inference: %s", passes)
            return None
        formats = []
        inputs = list(inputs)
        for i, (x, fmt) in enumerate(zip(inputs, data_format)):
            if not isinstance(x, np.ndarray):
                self._log.error("inference: type of inputs[%d] is not np.ndarray", i)
                return None
            x = self._expand_rank(x, len(self._ctx.inputs[i].shape))
            x = inputs[i] = _simulator_feed(x, self._ctx.input_dtypes[i])
            fmt = (fmt or "nhwc").lower() if isinstance(fmt, str) or fmt is None else fmt
            if not isinstance(fmt, str) or fmt not in ("nhwc", "nchw"):
                self._log.error("inference: data_format[%d] %r is invalid, only 'nhwc' or 'nchw'", i, fmt)
                return None
            formats.append(fmt if x.ndim == 4 else None)
        try:
            outputs = self._ctx.run(inputs, data_format=formats, pass_through=passes)
        except RKNNError as e:
            self._log.error("inference: %s", e.message)
            return None
        except Exception as e:  # a runtime bug: report it the toolkit way, with the traceback
            self._log.error("inference: unexpected %s: %s", type(e).__name__, e, exc_info=True)
            return None
        outputs = [o.astype(np.float32, copy=False) if o.dtype.kind == "f" else o for o in outputs]
        raw = self._imported.raw_outputs if self._imported is not None else ()
        for k, spec in enumerate(raw):
            if spec is not None and outputs[k].dtype.kind == "f":
                dtype, scale, zp = spec
                info = np.iinfo(dtype)
                outputs[k] = np.clip(np.rint(outputs[k] / scale) + zp, info.min, info.max).astype(dtype)
        if get_frame_id:
            self._frames = getattr(self, "_frames", 0) + 1
            outputs.append(self._frames)
        return outputs

    def _expand_rank(self, x: np.ndarray, rank: int) -> np.ndarray:
        """The simulator's rank leniency: an array of lower rank than its input gets leading
        1s (a view, no copy) with the vendor's warning; a higher rank is left to the checks."""
        y = with_leading_ones(x, rank)
        if y is not x:
            self._log.warning("inference: " + RANK_WARNING, tuple(x.shape), rank, tuple(y.shape))
        return y

    # -- board-only calls, as the vendor's simulator answers them --------------------------------

    def eval_perf(self, is_print: bool = True, fix_freq: bool = True):
        """Per-layer time on a board.  The vendor's needs ``init_runtime(target=...)``; its
        simulator, like this toolkit (which has no board connection), raises ``ValueError``:
        "The runtime has not been initialized, please call init_runtime first!" before
        ``init_runtime``, "Not support in simulator environment, please set target in
        init_runtime!" after.  Time a model here with ``rknnlite.Context(...).run`` or
        ``tools/bench``."""
        return self._board_only("eval_perf")

    def eval_memory(self, is_print: bool = True):
        """Memory use on a board; raises ``ValueError`` here as :meth:`eval_perf` does."""
        return self._board_only("eval_memory")

    def get_sdk_version(self):
        """The board's runtime and driver versions; raises ``ValueError`` here as
        :meth:`eval_perf` does (``rknnlite.api.RKNNLite.get_sdk_version`` answers on a board)."""
        return self._board_only("get_sdk_version")

    def list_devices(self):
        """``(adb_devices, ntb_devices)``: the boards connected for ``init_runtime(target=...)``.
        Always ``([], [])``: this toolkit connects to none (the vendor's prints "None devices
        connected." in that case; this one logs it)."""
        self._log.info("list_devices: None devices connected.")
        return [], []

    def clear_op_cache(self) -> None:
        """Clears the simulator's per-op state kept between stream inferences.  The software
        backend keeps none between runs, so there is nothing to clear once ``init_runtime``
        has run; before it, ``ValueError`` as the vendor's (which fails on its missing runtime)."""
        if self._ctx is None:
            self._log.error("clear_op_cache: %s", _NO_RUNTIME)
            raise ValueError(_NO_RUNTIME)

    def codegen(self, output_path: str, inputs=None, overwrite: bool = False) -> int:
        """The vendor writes a C++ project that runs the exported model through librknnrt on a
        board.  librknnrt cannot load the portable ``.rknn`` files this toolkit exports, so
        such a project could only fail there: refused, -1, with the reason logged.  On a board,
        run the exported file with ``rknnlite.api.RKNNLite`` (or ``rknnlite serve``)."""
        if not self._alive("codegen"):
            return -1
        self._log.error("codegen: the generated C++ demo runs the model through librknnrt, which cannot load the "
                        "portable .rknn files rknnlite's toolkit exports; run %s on the board with "
                        "rknnlite.api.RKNNLite, or convert with RKNN-Toolkit2 for a C deployment",
                        "the exported file" if self._model_bytes is not None else "an exported file")
        return -1

    def optimize_onnx(self, model: str, optimized_path: Optional[str] = None, passes_enable=None,
                      inputs_for_dump=None) -> int:
        """The vendor's NPU graph optimisation of a quantization-annotated ONNX file (its
        ``quantization_annotation`` entries, from quantization-aware training).  Not
        implemented here: a missing file raises ``ValueError`` as the vendor's does; any
        other file is refused with -1 and the reason logged."""
        if not os.path.isfile(str(model)):
            message = f"Model file {model} not found!"
            self._log.error("optimize_onnx: %s", message)
            raise ValueError(message)
        self._log.error("optimize_onnx: not supported by rknnlite's toolkit (the vendor's optimises ONNX files "
                        "that carry 'quantization_annotation' from quantization-aware training); load the "
                        "model with load_onnx and build it")
        return -1

    def _board_only(self, name: str):
        message = _NO_RUNTIME if self._ctx is None else _SIMULATOR_ONLY
        self._log.error("%s: %s", name, message)
        raise ValueError(message)

    # -- lifetime ------------------------------------------------------------------------------

    def release(self) -> None:
        """Free the runtime and the model; idempotent.  Later calls fail with -1."""
        self._release_runtime()
        self._imported = None
        self._model_bytes = None
        self._released = True
        self._log.close()

    def _release_runtime(self) -> None:
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None

    def _alive(self, what: str) -> bool:
        if self._released:
            self._log.error("%s: this RKNN object has been released; create a new one", what)
            return False
        return True


def _hybrid_option_problem(key: str, value) -> Optional[str]:
    """Why a hybrid quantization option's value is refused (the vendor's messages), or None."""
    number = is_number(value)
    if key == "auto_hybrid_cos_thresh" and not (number and 0 <= value <= 1):
        return f"Invalid auto_hybrid_cos_thresh '{value}', expect between 0 to 1!"
    if key == "auto_hybrid_euc_thresh" and value is not None and not (number and value > 0):
        return f"Invalid auto_hybrid_euc_thresh '{value}', expect greater 0!"
    if key == "quantized_hybrid_level" and not (is_int(value) and value >= 0):
        return f"quantized_hybrid_level must be an int >= 0 (0: off; 1-3 keep more layers in float16), not {value!r}"
    return None


def _quant_config_problem(cfg: Dict[str, Any]) -> Optional[str]:
    """The first quantization option of ``cfg`` that ``build(do_quantization=True)`` cannot
    use (vendor defaults for the unset ones), or ``None``."""
    for key, default in _QUANT_DEFAULTS.items():
        problem = _quant_option_problem(key, cfg.get(key, default))
        if problem:
            return problem
    return None


def _simulator_feed(x: np.ndarray, accepted) -> np.ndarray:
    """``x`` as RKNN-Toolkit2's simulator takes it: an input computed in float (one whose
    ``accepted`` dtypes, :attr:`Context.input_dtypes`, include float32: a float or an
    int8-quantized one) takes any numeric array, cast to float32 (int32 images, bool masks,
    float16 for an int8 model), where the runtime, like librknnrt, takes only ``accepted``."""
    if x.dtype in accepted or np.dtype(np.float32) not in accepted or x.dtype.kind not in "biuf":
        return x
    return x.astype(np.float32)


def _is_rule_list(value) -> bool:
    """Whether ``value`` is what ``config(disable_rules=...)`` takes: None or a list of names."""
    return value is None or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))


def _is_compiler_default(key: str, value) -> bool:
    """Whether a :data:`_COMPILER_SETTINGS` option has its vendor default (an empty
    ``disable_rules`` list included), compared so that an array or any other odd value is
    simply not the default."""
    default = _COMPILER_SETTINGS[key]
    if key == "disable_rules":
        return not value
    if isinstance(default, str):
        return isinstance(value, str) and value == default
    if isinstance(default, bool) or default is None:
        return _is_default(value, default)
    return is_number(value) and value == default


def _is_default(value, default) -> bool:
    """Whether an option's ``value`` is its ``default`` (None or a bool), compared so that an
    array or any other odd value is simply not the default."""
    if default is None:
        return value is None
    return is_flag(value) and bool(value) == default


def _pass_through_flags(value, n: int):
    """inference()'s ``inputs_pass_through`` as None or one bool per input, or the reason it
    is refused (a str): a list of 0/1 (or True/False), one per input."""
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) == n and all(is_flag(v) for v in value)
    if not ok:
        return f"inputs_pass_through must be a list with one 0 or 1 per input ({n}), not {value!r}"
    return [bool(v) for v in value]


def _vendor_quant_refusal(cfg: Dict[str, Any], platform: str) -> Optional[str]:
    """RKNN-Toolkit2 2.5.0's own refusal of ``cfg``'s quantization options on ``platform``, in
    its words (its config() raises them), or None. Values it takes that this toolkit cannot
    build yet (w8a16, gdq, group{N}, ...) pass here: they warn, and a quantized build fails."""
    dtype = _LEGACY_QUANT_DTYPES.get(cfg["quantized_dtype"], cfg["quantized_dtype"])
    algorithm, method = cfg["quantized_algorithm"], cfg["quantized_method"]
    if dtype not in _VENDOR_QUANT_DTYPES:
        return f"Invalid quantized_dtype '{dtype}', expect in {list(_VENDOR_QUANT_DTYPES)}!"
    if platform not in _VENDOR_DTYPE_PLATFORMS.get(dtype, (platform,)):
        return f"The quantized_dtype = '{dtype}' not support in '{platform}'!"
    if algorithm not in _VENDOR_QUANT_ALGORITHMS:
        return f"Invalid quantized_algorithm '{algorithm}', expect in {list(_VENDOR_QUANT_ALGORITHMS)}!"
    if algorithm == "gdq" and dtype not in ("w4a16", "w8a16"):
        return "The quantized_algorithm = 'gdq' only support in ['w4a16', 'w8a16']!"
    if method.startswith("group"):
        if method[5:] not in [str(n) for n in _VENDOR_GROUP_SIZES]:
            return (f"Invalid quantized_method '{method}', valid format is group{{SIZE}}, where {{SIZE}} is in "
                    f"{list(_VENDOR_GROUP_SIZES)}, e.g group32!")
        if dtype != "w4a16":
            return f"The quantize_method = '{method}' only support when quantized_dtype = 'w4a16'"
    elif method not in ("layer", "channel"):
        return f"Invalid quantized_method '{method}', expect in ['layer', 'channel', 'group{{SIZE}}']!"
    return None


def _quant_option_problem(key: str, value) -> Optional[str]:
    """Why a quantization option's value cannot be built, or None when it can."""
    from .quantize import QUANTIZED_ALGORITHMS, QUANTIZED_DTYPES, QUANTIZED_METHODS

    supported = {"quantized_dtype": QUANTIZED_DTYPES, "quantized_algorithm": QUANTIZED_ALGORITHMS,
                 "quantized_method": QUANTIZED_METHODS}[key]
    if value in supported:
        return None
    return f"{key}={value!r} is not supported yet by rknnlite (supported: {', '.join(supported)})"


def _per_input_flags(value, n_inputs: Optional[int]):
    """config()'s ``quant_img_RGB2BGR`` as a bool, or a list of bools (one per input, as many
    as ``mean_values`` has when it is given: the vendor's rule and message).  None is False
    (the vendor takes it); anything but True/False/0/1 is refused, so a value meant for
    another parameter is not read as True."""
    def flag(v, where):
        if is_flag(v):
            return bool(v)
        raise ValueError(f"{where} must be True or False (or a list with one per input), not {v!r}")

    if value is None:
        return False
    if not isinstance(value, (list, tuple)):
        return flag(value, "quant_img_RGB2BGR")
    flags = [flag(v, f"quant_img_RGB2BGR[{i}]") for i, v in enumerate(value)]
    if not flags or (n_inputs is not None and len(flags) != n_inputs):
        raise ValueError(f"The length of quant_img_RGB2BGR is different from mean_values! ({len(flags)} value(s); "
                         f"mean_values has {n_inputs} input(s))")
    return flags


def _per_input_values(values, what: str) -> Optional[List[List[float]]]:
    """``[[...], ...]`` per input from the vendor forms (a flat list means one input)."""
    if values is None:
        return None
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{what} must be a list with one list of per-channel values per input, like "
                         f"[[123.675, 116.28, 103.53]], not {values!r}")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        values = [values]
    rows = []
    for i, row in enumerate(values):
        if not isinstance(row, (list, tuple)) or not row or \
                not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row):
            raise ValueError(f"{what}[{i}] must be a non-empty list of numbers, not {row!r}")
        if not all(math.isfinite(v) for v in row):
            raise ValueError(f"{what}[{i}] must hold finite numbers, not {row!r}")
        rows.append([float(v) for v in row])
    return rows
