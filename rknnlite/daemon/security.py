"""Security and limits of the daemon: bearer tokens, path confinement, concurrency limits.

Nothing here touches global state; the aiohttp middleware is built per application.
"""

from __future__ import annotations

import hmac
import math
import os
from typing import Optional

from ..errors import InvalidParamError
from .protocol import ProtocolError

__all__ = ["read_token_file", "check_token", "is_public_path", "confine", "check_listen_options",
           "ConcurrencyLimit", "DEFAULT_MAX_BODY_BYTES", "RETRY_AFTER_SECONDS"]

#: Default request body limit (bytes): 64 MiB holds a 4K RGB float32 frame.
DEFAULT_MAX_BODY_BYTES = 64 << 20
#: ``Retry-After`` (seconds) sent with 503 when a model is saturated.
RETRY_AFTER_SECONDS = 1


def check_listen_options(port, max_body_bytes, drain_timeout) -> None:
    """Refuse a port outside 0..65535 (the socket layer took 99999 as 34463, modulo 65536),
    a body limit below one byte and a drain timeout that is negative or not finite.

    Raises:
        InvalidParamError: naming the option and what it takes.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidParamError(f"port (--port) must be an int in 0..65535 (0: a free one), got {port!r}",
                                op="serve")
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise InvalidParamError(f"max_body_bytes (--max-body-bytes) must be an int >= 1, got {max_body_bytes!r}",
                                op="serve")
    if isinstance(drain_timeout, bool) or not isinstance(drain_timeout, (int, float)) \
            or not math.isfinite(drain_timeout) or drain_timeout < 0:
        raise InvalidParamError(f"drain_timeout (--drain-timeout) must be a number of seconds >= 0, got "
                                f"{drain_timeout!r}", op="serve")


def read_token_file(path: str) -> str:
    """The bearer token stored in ``path`` (surrounding whitespace stripped).

    Raises:
        InvalidParamError: the file cannot be read or holds no token.
    """
    try:
        with open(path, "r", encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidParamError(f"cannot read the token file {path}: {e}", op="serve") from None
    if not token or any(c.isspace() for c in token):
        raise InvalidParamError(f"the token file {path} must hold one token without spaces", op="serve")
    return token


def is_public_path(path: str) -> bool:
    """True for the endpoints reachable without a token: ``/v2/health/live`` and ``/v2/health/ready``."""
    return path in ("/v2/health/live", "/v2/health/ready")


def check_token(expected: Optional[str], authorization: Optional[str]) -> bool:
    """Whether an ``Authorization`` header carries the bearer token ``expected``
    (constant-time comparison); always True when no token is configured."""
    if expected is None:
        return True
    if not authorization:
        return False
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), expected.encode())


def confine(folder: str, relative, what: str) -> str:
    """The real path of ``relative`` inside ``folder``, refusing escapes.

    ``relative`` must be a relative path without ``..`` components, and its real path
    (symlinks resolved) must stay inside ``folder``'s real path.

    Raises:
        InvalidParamError: an absolute path, a ``..`` component, a symlink leading
            outside ``folder``, or not a string (``what`` names the file and key).
    """
    if not isinstance(relative, str) or not relative or "\0" in relative:
        raise InvalidParamError(f"{what} must be a non-empty relative path (no NUL byte), got {relative!r}",
                                op="serve")
    if os.path.isabs(relative) or relative.startswith("~"):
        raise InvalidParamError(f"{what} must be relative to the model folder, got {relative!r}", op="serve")
    parts = relative.replace("\\", "/").split("/")
    if ".." in parts:
        raise InvalidParamError(f"{what} must not contain '..', got {relative!r}", op="serve")
    root = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(root, relative))
    if os.path.commonpath([root, real]) != root:
        raise InvalidParamError(f"{what} {relative!r} leads outside the model folder (to {real})", op="serve")
    return real


class ConcurrencyLimit:
    """At most ``limit`` requests in flight; :meth:`acquire` refuses one more with a 503.

    Used from the event loop thread only (no lock needed)."""

    def __init__(self, limit: int, what: str):
        self.limit = int(limit)
        self.what = what
        self.active = 0

    def acquire(self) -> None:
        """Count one more request in flight.

        Raises:
            ProtocolError: (503, ``Retry-After``) ``limit`` requests are in flight already.
        """
        if self.active >= self.limit:
            raise ProtocolError(f"{self.what} is saturated ({self.limit} requests in flight); retry later",
                                status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        self.active += 1

    def release(self) -> None:
        """Count one request finished."""
        self.active -= 1
