"""The package logger and the ``RKNN_LOG_LEVEL`` environment variable.

Only ``logging.getLogger("rknnlite")`` is used; the root logger, its handlers and
the global level names are never touched.  ``RKNN_LOG_LEVEL`` (0–5, as librknnrt
reads it) sets this logger's level when it is present.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

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


def _shown(logger: logging.Logger, level: int) -> bool:
    """Whether the application's logging shows a ``level`` message of ``logger``: the level
    enabled and, on the way up, a handler (other than a NullHandler) that takes it."""
    if not logger.isEnabledFor(level):
        return False
    node: Optional[logging.Logger] = logger
    while node is not None:
        if any(not isinstance(h, logging.NullHandler) and level >= h.level for h in node.handlers):
            return True
        node = node.parent if node.propagate else None
    return False


def _private(name: str, handler: logging.Handler, fmt: str) -> logging.Logger:
    """A logger registered nowhere (not in logging's manager) with one handler."""
    own = logging.Logger(name, logging.DEBUG)
    handler.setFormatter(logging.Formatter(fmt))
    own.addHandler(handler)
    return own


class InstanceLog:
    """Messages of one API object (``RKNNLite``, the toolkit's ``RKNN``).

    They always go to the named package logger (``rknnlite.api``, ``rknnlite.toolkit``);
    with ``verbose`` also to stderr (unless the application's own logging configuration
    already shows that message: a handler on the way up and the level enabled, so no line
    is printed twice) and with ``verbose_file`` to that file (ignored when its directory
    does not exist, as Lite2 does), through handlers of private loggers that are
    registered nowhere: nothing global changes.
    """

    def __init__(self, name: str, verbose: bool = False, verbose_file: Optional[str] = None,
                 fmt: str = "%(levelname).1s %(message)s"):
        self._shared = logging.getLogger(name)
        self._console = _private(f"{name}.console", logging.StreamHandler(sys.stderr), fmt) if verbose else None
        self._file: Optional[logging.Logger] = None
        if verbose_file and os.path.isdir(os.path.dirname(os.path.abspath(verbose_file))):
            self._file = _private(f"{name}.file", logging.FileHandler(verbose_file), fmt)

    @property
    def logger(self) -> logging.Logger:
        """The named logger every object of this kind logs to (``rknnlite.api`` for
        ``RKNNLite``), as Lite2's ``rknn_log.logger``: ``setLevel`` on it, as clients do to
        quiet the runtime, also holds this object's verbose outputs back below that level."""
        return self._shared

    def log(self, level: int, msg: str, *args, exc_info=False) -> None:
        """Log to the package logger and, when verbose, to this object's own outputs."""
        self._shared.log(level, msg, *args, exc_info=exc_info)
        if level < self._shared.level:  # a level the application set on this logger itself
            return
        if self._console is not None and not _shown(self._shared, level):
            self._console.log(level, msg, *args, exc_info=exc_info)
        if self._file is not None:
            self._file.log(level, msg, *args, exc_info=exc_info)

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
        for own in (self._console, self._file):
            if own is not None:
                for h in list(own.handlers):
                    h.close()
                    own.removeHandler(h)
        self._console = self._file = None
