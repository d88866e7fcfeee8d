"""Loading librknnrt through the Cython binding, once per file per process.

:func:`load_runtime` follows :func:`rknnlite.backends.npu.library.find_library`'s search
order, ``dlopen``\\ s the first candidate that loads and returns the binding's
:class:`rknnlite._native.rknnrt.Library`.  Every failure is a
:class:`~rknnlite.errors.DeviceUnavailableError` naming each place looked at, why each
failed, and how to install the runtime.  An explicit path (argument or ``LIBRKNNRT_PATH``)
never falls back to the system search.
"""

from __future__ import annotations

import threading
from typing import Dict, Mapping, Optional, Sequence

from ...errors import DeviceUnavailableError
from .library import INSTALL_HINT, embedded_version, find_library

__all__ = ["load_runtime", "binding"]

_lock = threading.Lock()
_loaded: Dict[str, object] = {}


def binding():
    """The compiled binding module (:mod:`rknnlite._native.rknnrt`).

    Raises:
        DeviceUnavailableError: this build of rknnlite has no compiled binding.
    """
    try:
        from ..._native import rknnrt
    except ImportError as e:
        raise DeviceUnavailableError(
            f"the librknnrt binding (rknnlite._native.rknnrt) is not compiled into this installation ({e}); "
            "reinstall rknnlite from a wheel or build it with 'python setup.py build_ext --inplace'",
            op="dlopen") from None
    return rknnrt


def load_runtime(path: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
                 dirs: Optional[Sequence[str]] = None, loader_name: Optional[str] = None):
    """The loaded librknnrt (a ``Library``), loading it on first use.

    ``path`` is an explicit file or directory; ``environ``/``dirs``/``loader_name`` let
    tests and ``rknnlite doctor`` control the search.

    Raises:
        DeviceUnavailableError: no candidate loads; the message names every place
            looked at, each failure, and how to install librknnrt.
    """
    choice = find_library(path, environ, dirs, loader_name)
    if choice.problem is not None:
        raise DeviceUnavailableError(f"librknnrt not found: {choice.problem}; {INSTALL_HINT}", op="dlopen")
    rknnrt = binding()
    failures = []
    for candidate in choice.candidates:
        with _lock:
            library = _loaded.get(candidate)
            if library is None:
                try:
                    library = rknnrt.open_library(candidate, embedded_version(candidate))
                except DeviceUnavailableError as e:
                    failures.append(e.message)
                    continue
                _loaded[candidate] = library
        return library
    if choice.source in ("system", "loader") and all("cannot load" in f and "No such file" in f for f in failures):
        reason = f"librknnrt.so was not found (looked in {choice.where()})"
    else:
        reason = f"librknnrt could not be loaded (looked in {choice.where()}): {'; '.join(failures)}"
    raise DeviceUnavailableError(f"{reason}; {INSTALL_HINT}", op="dlopen")
