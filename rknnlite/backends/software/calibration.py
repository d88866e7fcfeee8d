"""One-time measurements of the kernel choices that neither the caches nor the SIMD path decide,
kept per CPU model in the user's cache directory.

A choice is measured the first time a process needs it, then stored as a small JSON file in
``$RKNNLITE_CACHE_DIR``, else ``$XDG_CACHE_HOME/rknnlite``, else ``~/.cache/rknnlite``: one
file per choice and key, the key naming the CPU model, the caches the kernels block for, the
micro-kernel level and the rknnlite version, so that another CPU (or a new release) measures
again and later processes on this one only read it.

``RKNNLITE_CALIBRATION`` says what to do:

===========  =========================================================================
``auto``     (or unset) read the stored measurement, measure and store it when there is none
``off``      neither measure nor read: every choice keeps its built-in rule
``refresh``  measure again and overwrite what is stored
===========  =========================================================================

Any other value is refused with :class:`~rknnlite.errors.InvalidParamError`.  A stored file
that cannot be read, is not this key's or is malformed is measured again; a directory that
cannot be written leaves the measurement to this process.  Neither is an error: both are
logged at debug level on the ``rknnlite`` logger.  Measurements only choose between
computations the runtime already offers, so a missing or stale one costs speed, never
correctness.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Mapping, Optional

from ..._version import __version__
from ...errors import InvalidParamError
from ...log import logger

__all__ = ["MODES", "cache_dir", "calibrated", "mode", "stored_path"]

#: RKNNLITE_CALIBRATION values
MODES = ("auto", "off", "refresh")


def mode(environ: Optional[Mapping[str, str]] = None) -> str:
    """``RKNNLITE_CALIBRATION``'s mode (``"auto"`` when unset or empty)."""
    raw = (os.environ if environ is None else environ).get("RKNNLITE_CALIBRATION", "").strip().lower()
    if not raw:
        return "auto"
    if raw not in MODES:
        raise InvalidParamError(f"RKNNLITE_CALIBRATION={raw!r} is not a calibration mode; expected one of "
                                f"{', '.join(MODES)} or unset")
    return raw


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """Where measurements are stored (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("RKNNLITE_CACHE_DIR"):
        return Path(env["RKNNLITE_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rknnlite"


def _versioned(key: Mapping) -> dict:
    """``key`` with this rknnlite release joined: a new release measures again."""
    return dict(key, rknnlite=__version__)


def stored_path(name: str, key: Mapping, environ: Optional[Mapping[str, str]] = None) -> Path:
    """The file that holds (or would hold) measurement ``name`` for ``key`` (this release)."""
    digest = hashlib.sha256(json.dumps(_versioned(key), sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir(environ) / f"{name}-{digest}.json"


def _read(path: Path, name: str, key: Mapping, accept: Optional[Callable[[dict], bool]]) -> Optional[dict]:
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logger.debug("calibration %s: cannot read %s (%s); measuring again", name, path, e)
        return None
    if not isinstance(stored, dict) or stored.get("key") != dict(key) or not isinstance(stored.get("value"), dict):
        logger.debug("calibration %s: %s holds another key or no value; measuring again", name, path)
        return None
    if accept is not None and not accept(stored["value"]):
        logger.debug("calibration %s: %s holds a value its reader refuses; measuring again", name, path)
        return None
    return stored["value"]


def _write(path: Path, name: str, key: Mapping, value: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"key": dict(key), "value": value}, f, indent=1, sort_keys=True)
            os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        logger.debug("calibration %s: cannot store it in %s (%s); kept for this process only", name, path, e)


def calibrated(name: str, key: Mapping, measure: Callable[[], dict],
               environ: Optional[Mapping[str, str]] = None,
               accept: Optional[Callable[[dict], bool]] = None) -> Optional[dict]:
    """The stored measurement ``name`` for ``key`` (JSON-serialisable mapping), made by
    ``measure()`` (a JSON-serialisable dict) and stored when there is none; None when
    ``RKNNLITE_CALIBRATION=off``.  The rknnlite version joins the key: a new release
    measures again.  ``accept(value)`` (optional) vets a stored value: one it refuses is
    measured again, like a damaged file.

    Raises:
        InvalidParamError: ``RKNNLITE_CALIBRATION`` holds an unknown mode.
    """
    how = mode(environ)
    if how == "off":
        return None
    full_key = _versioned(key)
    path = stored_path(name, key, environ)
    if how == "auto":
        value = _read(path, name, full_key, accept)
        if value is not None:
            return value
    value = measure()
    _write(path, name, full_key, value)
    logger.debug("calibration %s: measured %s, stored in %s", name, value, path)
    return value
