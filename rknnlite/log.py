"""The package logger and the ``RKNN_LOG_LEVEL`` environment variable.

Only ``logging.getLogger("rknnlite")`` is used; the root logger, its handlers and
the global level names are never touched.  ``RKNN_LOG_LEVEL`` (0–5, as librknnrt
reads it) sets this logger's level when it is present.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import List, Optional

__all__ = ["logger", "LOG_LEVELS", "TRACE", "apply_env_level", "InstanceLog"]

logger = logging.getLogger("rknnlite")
# The library convention: without it, logging's last-resort handler would print our
# warnings to stderr when the application has configured no logging at all.
logger.addHandler(logging.NullHandler())

#: Level below DEBUG for per-layer traces; deliberately not registered by name,
#: because ``logging.addLevelName`` would change process-wide state.
TRACE = 5

#: RKNN_LOG_LEVEL -> logging level: 0 errors only, 1 warnings, 2 info,
#: 3 debug, 4 debug with per-layer lines, 5 everything.
LOG_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG, 4: logging.DEBUG, 5: TRACE}


def apply_env_level(environ=os.environ) -> int | None:
    """Set the ``rknnlite`` logger's level from ``RKNN_LOG_LEVEL``; return it, or None if unset.

    An unparsable value is ignored with a warning on the ``rknnlite`` logger.
    """
    raw = environ.get("RKNN_LOG_LEVEL")
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        logger.warning("RKNN_LOG_LEVEL=%r is not an integer 0-5; ignored", raw)
        return None
    level = LOG_LEVELS[min(max(value, 0), 5)]
    logger.setLevel(level)
    return level


class InstanceLog:
    """Messages of one API object (``RKNNLite``, the toolkit's ``RKNN``).

    They always go to the named package logger (``rknnlite.api``, ``rknnlite.toolkit``);
    with ``verbose`` also to stderr and with ``verbose_file`` to that file (ignored when
    its directory does not exist, as Lite2 does), through handlers of a private logger
    that is registered nowhere: nothing global changes.
    """

    def __init__(self, name: str, verbose: bool = False, verbose_file: Optional[str] = None,
                 fmt: str = "%(levelname).1s %(message)s"):
        self._shared = logging.getLogger(name)
        self._own: Optional[logging.Logger] = None
        handlers: List[logging.Handler] = []
        if verbose:
            handlers.append(logging.StreamHandler(sys.stderr))
        if verbose_file and os.path.isdir(os.path.dirname(os.path.abspath(verbose_file))):
            handlers.append(logging.FileHandler(verbose_file))
        if handlers:
            own = logging.Logger(f"{name}.instance", logging.DEBUG)
            for h in handlers:
                h.setFormatter(logging.Formatter(fmt))
                own.addHandler(h)
            self._own = own

    def log(self, level: int, msg: str, *args, exc_info=False) -> None:
        """Log to the package logger and, when verbose, to this object's own outputs."""
        self._shared.log(level, msg, *args, exc_info=exc_info)
        if self._own is not None:
            self._own.log(level, msg, *args, exc_info=exc_info)

    def debug(self, msg: str, *args) -> None:
        self.log(logging.DEBUG, msg, *args)

    def info(self, msg: str, *args) -> None:
        self.log(logging.INFO, msg, *args)

    def warning(self, msg: str, *args) -> None:
        self.log(logging.WARNING, msg, *args)

    def error(self, msg: str, *args, exc_info=False) -> None:
        self.log(logging.ERROR, msg, *args, exc_info=exc_info)

    def close(self) -> None:
        """Close this object's own handlers (idempotent)."""
        if self._own is not None:
            for h in list(self._own.handlers):
                h.close()
                self._own.removeHandler(h)
            self._own = None
