"""Custom-operator plugins: finding and loading ``librkcst_<name>.so`` libraries, and turning
what ``Context.register_custom_op`` is given into a Python operator or a native one.

A plugin is a shared library named ``librkcst_<name>.so`` that exports
``rknn_custom_op* get_rknn_custom_op(void)`` (cython/include/rknn_custom_op.h); it may call
``rknn_custom_op_get_op_attr``, which this package provides (see
:mod:`rknnlite._native.custom_op_plugin`), so it must leave that symbol undefined rather
than link a ``librknnrt``.  A plugin name is searched in, in order:

1. each directory of ``RKNNLITE_OP_PLUGIN_DIR`` (``os.pathsep``-separated);
2. ``/usr/lib/rknpu/op_plugins`` (where the vendor's runtime tools look on Linux).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, List, Tuple

from ..errors import InvalidParamError
from ..log import logger

__all__ = ["PLUGIN_PREFIX", "PLUGIN_DIR_ENV", "DEFAULT_PLUGIN_DIR", "plugin_dirs", "find_plugin", "load_plugin",
           "native_op_from_address", "resolve_custom_op", "is_native_op"]

#: File-name prefix of plugin libraries (``RKNN_CSTOP_PLUGIN_PREFIX``).
PLUGIN_PREFIX = "librkcst_"
#: Environment variable with extra plugin directories, searched first.
PLUGIN_DIR_ENV = "RKNNLITE_OP_PLUGIN_DIR"
#: The vendor's plugin directory on Linux.
DEFAULT_PLUGIN_DIR = "/usr/lib/rknpu/op_plugins"

_OP = "rknn_register_custom_ops"


def _native():
    from .._native import custom_op_plugin

    return custom_op_plugin


def plugin_dirs() -> List[str]:
    """The directories a plugin name is searched in, in order (see the module doc)."""
    extra = [d for d in os.environ.get(PLUGIN_DIR_ENV, "").split(os.pathsep) if d]
    return extra + [DEFAULT_PLUGIN_DIR]


def _file_names(name: str) -> List[str]:
    """``softmax`` -> ``librkcst_softmax.so``; a name with the prefix or the suffix is kept."""
    if name.startswith(PLUGIN_PREFIX) and name.endswith(".so"):
        return [name]
    if name.startswith(PLUGIN_PREFIX):
        return [name + ".so"]
    return [f"{PLUGIN_PREFIX}{name}.so"]


def find_plugin(name: str) -> str:
    """The path of plugin ``name`` (``"softmax"``, ``"librkcst_softmax"`` or
    ``"librkcst_softmax.so"``), searched in :func:`plugin_dirs`.

    Raises:
        InvalidParamError: not found, listing every path tried.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidParamError(f"a plugin name must be a non-empty file name, not {name!r}", op=_OP)
    tried = []
    for directory in plugin_dirs():
        for file_name in _file_names(name):
            path = os.path.join(directory, file_name)
            tried.append(path)
            if os.path.isfile(path):
                return path
    raise InvalidParamError(
        f"custom operator plugin {name!r} not found; searched: {', '.join(tried)} "
        f"(set {PLUGIN_DIR_ENV} to add directories, or pass the library's path)", op=_OP)


def load_plugin(path_or_name) -> Any:
    """Load a plugin library and return its operator (a ``NativeOp``, which keeps the
    library loaded).  ``path_or_name``: a path (``str``/``os.PathLike``; anything with a
    ``/`` or an existing file) or a plugin name (see :func:`find_plugin`).

    Raises:
        InvalidParamError: not found, not loadable (the loader's message), no
            ``get_rknn_custom_op`` symbol, a NULL or invalid operator.
    """
    text = os.fspath(path_or_name)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "/" in text or os.path.isfile(text):
        path = text
        if not os.path.isfile(path):
            raise InvalidParamError(f"custom operator plugin {path!r} does not exist", op=_OP)
    else:
        path = find_plugin(text)
    native = _native()
    try:
        library = native.PluginLibrary(path)
    except OSError as e:
        raise InvalidParamError(f"cannot load custom operator plugin {path!r}: {e}", op=_OP) from None
    address = library.get_custom_op()
    if address is None:
        raise InvalidParamError(
            f"custom operator plugin {path!r} does not export get_rknn_custom_op() (a plugin exports "
            f"'rknn_custom_op* get_rknn_custom_op(void)' with C linkage)", op=_OP)
    if not address:
        raise InvalidParamError(f"get_rknn_custom_op() of plugin {path!r} returned NULL", op=_OP)
    op = native.NativeOp.from_address(address, library, path)
    _check_native(op)
    logger.debug("loaded custom operator plugin %s (op type %s)", path, op.op_type)
    return op


def native_op_from_address(pointer) -> Any:
    """A ``NativeOp`` from a ctypes pointer to an ``rknn_custom_op`` (or a ctypes structure
    of its size, or ``ctypes.c_void_p``); the struct is copied, and the ctypes object is kept
    as the owner of the callbacks' code.

    Raises:
        InvalidParamError: a NULL pointer or an invalid operator.
    """
    if isinstance(pointer, ctypes.c_void_p):
        address = pointer.value or 0
    elif isinstance(pointer, ctypes._Pointer):  # noqa: SLF001 - the public base of ctypes pointers
        address = ctypes.cast(pointer, ctypes.c_void_p).value or 0
    elif isinstance(pointer, (ctypes.Structure, ctypes.Array)):
        if ctypes.sizeof(pointer) != 832:
            raise InvalidParamError(f"a ctypes rknn_custom_op must be 832 bytes, {type(pointer).__name__} is "
                                    f"{ctypes.sizeof(pointer)}", op=_OP)
        address = ctypes.addressof(pointer)
    else:
        raise InvalidParamError(f"expected a ctypes pointer to an rknn_custom_op, got {type(pointer).__name__}",
                                op=_OP)
    if not address:
        raise InvalidParamError("the rknn_custom_op pointer is NULL", op=_OP)
    op = _native().NativeOp.from_address(address, pointer, f"rknn_custom_op at {address:#x}")
    _check_native(op)
    return op


def _check_native(op) -> None:
    try:
        op_type = op.op_type
    except ValueError as e:
        raise InvalidParamError(f"{op.source}: {e}", op=_OP) from None
    if not op_type:
        raise InvalidParamError(f"{op.source}: rknn_custom_op.op_type is empty", op=_OP)
    if not op.has_compute:
        raise InvalidParamError(f"{op.source}: custom operator {op_type!r} has no compute callback (required)",
                                op=_OP)


def is_native_op(op) -> bool:
    """True for a ``NativeOp`` (what :func:`load_plugin` returns)."""
    try:
        return isinstance(op, _native().NativeOp)
    except ImportError:
        return False


def resolve_custom_op(op) -> Tuple[Any, bool]:
    """``(operator, native)`` for what ``register_custom_op`` was given:

    * a ``NativeOp``, a ctypes pointer/structure of an ``rknn_custom_op``, a path to a
      plugin or a plugin name -> a ``NativeOp``, ``native=True``;
    * a Python operator class (instantiated) or instance with ``op_type`` and
      ``compute(self, node, inputs)`` -> it, ``native=False``.

    Raises:
        InvalidParamError: anything else, or a plugin problem (see :func:`load_plugin`).
    """
    if is_native_op(op):
        return op, True
    if isinstance(op, (ctypes._Pointer, ctypes.c_void_p, ctypes.Structure, ctypes.Array)):  # noqa: SLF001
        return native_op_from_address(op), True
    if isinstance(op, (str, bytes, os.PathLike)):
        return load_plugin(op), True
    if isinstance(op, type):
        try:
            op = op()
        except Exception as e:
            raise InvalidParamError(f"custom operator class {op.__name__} cannot be instantiated without "
                                    f"arguments: {e}", op=_OP) from None
    if not isinstance(getattr(op, "op_type", None), str) or not callable(getattr(op, "compute", None)):
        raise InvalidParamError(
            f"register_custom_op takes a Python operator (a string 'op_type' and 'compute(self, node, inputs)'), "
            f"a librkcst_ plugin path or name, or a ctypes pointer to an rknn_custom_op; got {type(op).__name__}",
            op=_OP)
    return op, False
