"""rknnlite: an open-source runtime for Rockchip NPU ``.rknn`` models.

Importing the package changes nothing global (no logging configuration, no
signal handlers, no numpy options).  See ``rknnlite.Context`` for the raising
API and ``rknnlite.api.RKNNLite`` for the rknn-toolkit-lite2 drop-in.
"""

from ._version import __version__
from .constants import (
    CoreMask,
    InitFlag,
    MemAllocFlag,
    MemSyncMode,
    QntType,
    QueryCmd,
    TensorFormat,
    TensorMemFlag,
    TensorType,
)
from .errors import (
    ContextInvalidError,
    DecryptError,
    DeviceMismatchError,
    DeviceUnavailableError,
    IncompatibleOptimizationLevelError,
    IncompatiblePrecompiledModelError,
    InputInvalidError,
    InvalidParamError,
    KeyInvalidError,
    ModelInvalidError,
    OutputInvalidError,
    RKNNError,
    RKNNMemoryError,
    RKNNTimeoutError,
    TargetPlatformMismatchError,
)
from .runtime import Context, TensorAttr
from .backends.memory import TensorMem

__all__ = [
    "__version__",
    "Context",
    "TensorAttr",
    "TensorMem",
    "CoreMask",
    "InitFlag",
    "MemAllocFlag",
    "MemSyncMode",
    "QntType",
    "QueryCmd",
    "TensorFormat",
    "TensorMemFlag",
    "TensorType",
    "RKNNError",
    "RKNNTimeoutError",
    "DeviceUnavailableError",
    "RKNNMemoryError",
    "InvalidParamError",
    "ModelInvalidError",
    "ContextInvalidError",
    "InputInvalidError",
    "OutputInvalidError",
    "DeviceMismatchError",
    "IncompatiblePrecompiledModelError",
    "IncompatibleOptimizationLevelError",
    "TargetPlatformMismatchError",
    "DecryptError",
    "KeyInvalidError",
]
