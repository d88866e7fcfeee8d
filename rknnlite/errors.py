"""Exception hierarchy and the RKNN error-code table.

Every failure the runtime reports is an :class:`RKNNError` carrying the C API
error code (``.code``) and the operation that failed (``.op``, e.g.
``"rknn_run"`` or ``"load"``).  Each subclass also derives from the builtin
exception a Python user would naturally catch (``ValueError`` for bad input,
``OSError`` for a missing device, ...), so ``except ValueError`` keeps working.

``check(ret, op)`` turns a native return code into the matching exception; the
Cython binding and the software backend both go through it.
"""

from __future__ import annotations

__all__ = [
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
    "ERROR_NAMES",
    "error_name",
    "error_class",
    "check",
]

#: C API error codes and their names (rknn_api.h; "INCOMPATILE" is the header's spelling).
ERROR_NAMES: dict[int, str] = {
    0: "RKNN_SUCC",
    -1: "RKNN_ERR_FAIL",
    -2: "RKNN_ERR_TIMEOUT",
    -3: "RKNN_ERR_DEVICE_UNAVAILABLE",
    -4: "RKNN_ERR_MALLOC_FAIL",
    -5: "RKNN_ERR_PARAM_INVALID",
    -6: "RKNN_ERR_MODEL_INVALID",
    -7: "RKNN_ERR_CTX_INVALID",
    -8: "RKNN_ERR_INPUT_INVALID",
    -9: "RKNN_ERR_OUTPUT_INVALID",
    -10: "RKNN_ERR_DEVICE_UNMATCH",
    -11: "RKNN_ERR_INCOMPATILE_PRE_COMPILE_MODEL",
    -12: "RKNN_ERR_INCOMPATILE_OPTIMIZATION_LEVEL_VERSION",
    -13: "RKNN_ERR_TARGET_PLATFORM_UNMATCH",
    -14: "RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE",
}


def error_name(code: int) -> str:
    """The C name of an error code (``-6`` -> ``"RKNN_ERR_MODEL_INVALID"``)."""
    return ERROR_NAMES.get(code, f"RKNN_ERR_UNKNOWN({code})")


class RKNNError(Exception):
    """Base of every rknnlite error.

    Attributes:
        code: the RKNN error code (negative int; -1 for a generic failure).
        op: the operation that failed (``"rknn_init"``, ``"load"``, ...) or ``None``.
    """

    code = -1

    def __init__(self, message: str = "", *, op: str | None = None, code: int | None = None):
        if code is not None:
            self.code = code
        self.op = op
        self.message = message or error_name(self.code)
        super().__init__(self.message)

    def __str__(self) -> str:
        prefix = f"{self.op}: " if self.op else ""
        return f"{prefix}{self.message} ({error_name(self.code)})"

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.op, self.code))


def _rebuild(cls, message, op, code):
    return cls(message, op=op, code=code)


class RKNNTimeoutError(RKNNError, TimeoutError):
    """The NPU or a wait did not finish in time (-2)."""

    code = -2


class DeviceUnavailableError(RKNNError, OSError):
    """No device can run this model here: driver, library or backend missing (-3)."""

    code = -3


class RKNNMemoryError(RKNNError, MemoryError):
    """An allocation failed (-4)."""

    code = -4


class InvalidParamError(RKNNError, ValueError):
    """A parameter is out of range or of the wrong kind (-5)."""

    code = -5


class ModelInvalidError(RKNNError, ValueError):
    """The model file is malformed, truncated or unsupported (-6)."""

    code = -6


class ContextInvalidError(RKNNError, RuntimeError):
    """The context is closed or was never initialised (-7)."""

    code = -7


class InputInvalidError(RKNNError, ValueError):
    """An input tensor has the wrong count, shape, dtype or layout (-8)."""

    code = -8


class OutputInvalidError(RKNNError, RuntimeError):
    """Outputs could not be produced or fetched (-9)."""

    code = -9


class DeviceMismatchError(RKNNError, OSError):
    """Runtime library and driver versions do not match (-10)."""

    code = -10


class IncompatiblePrecompiledModelError(ModelInvalidError):
    """A pre-compiled model does not fit this runtime (-11)."""

    code = -11


class IncompatibleOptimizationLevelError(ModelInvalidError):
    """The model's optimisation level is not supported by this runtime (-12)."""

    code = -12


class TargetPlatformMismatchError(RKNNError, ValueError):
    """The model was built for another SoC (-13)."""

    code = -13


# Lite2 2.5.0 names RKNN_ERR_DECRYPT_FAILED and RKNN_ERR_KEY_INVALID but their numeric
# values are not published, so both report -6 (the model cannot be used as given).
class DecryptError(ModelInvalidError):
    """An encrypted model is truncated, reordered or tampered with."""

    code = -6


class KeyInvalidError(RKNNError, ValueError):
    """The key does not open this encrypted model (wrong key, or bound to another device)."""

    code = -6


_BY_CODE: dict[int, type[RKNNError]] = {
    cls.code: cls
    for cls in (
        RKNNTimeoutError,
        DeviceUnavailableError,
        RKNNMemoryError,
        InvalidParamError,
        ModelInvalidError,
        ContextInvalidError,
        InputInvalidError,
        OutputInvalidError,
        DeviceMismatchError,
        IncompatiblePrecompiledModelError,
        IncompatibleOptimizationLevelError,
        TargetPlatformMismatchError,
    )
}


def error_class(code: int) -> type[RKNNError]:
    """The exception class for an RKNN error code (``RKNNError`` for unknown codes)."""
    return _BY_CODE.get(code, RKNNError)


def check(ret: int, op: str, detail: str = "") -> int:
    """Return ``ret`` when it is success (>= 0), else raise the matching typed error.

    ``op`` names the call (``"rknn_run"``); ``detail`` adds context to the message.
    """
    if ret >= 0:
        return ret
    raise error_class(ret)(detail or error_name(ret), op=op, code=ret)
