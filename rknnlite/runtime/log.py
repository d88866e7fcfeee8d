"""The package logger (:mod:`rknnlite.log`), re-exported for the layers above the runtime."""

from ..log import LOG_LEVELS, TRACE, InstanceLog, apply_env_level, logger

__all__ = ["logger", "LOG_LEVELS", "TRACE", "apply_env_level", "InstanceLog"]
