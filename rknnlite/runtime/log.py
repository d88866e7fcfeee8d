"""The package logger and the ``RKNN_LOG_LEVEL`` environment variable.

Only ``logging.getLogger("rknnlite")`` is used; the root logger, its handlers and
the global level names are never touched.  ``RKNN_LOG_LEVEL`` (0–5, as librknnrt
reads it) sets this logger's level when it is present.
"""

from __future__ import annotations

import logging
import os

__all__ = ["logger", "LOG_LEVELS", "TRACE", "apply_env_level"]

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
