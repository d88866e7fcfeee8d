"""``rknnlite serve``: the daemon as an application (the only place that handles signals).

* SIGTERM / SIGINT: stop accepting connections, let requests in flight finish within
  ``--drain-timeout`` seconds, close the models, exit 0.
* SIGHUP: re-scan the model repository (new, changed, broken and removed models).
* systemd: with ``NOTIFY_SOCKET`` set (``Type=notify``) sends ``READY=1`` once serving,
  ``RELOADING=1``/``READY=1`` around reloads and ``STOPPING=1`` when draining.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from typing import Dict, List, Optional

from ..errors import InvalidParamError
from .security import DEFAULT_MAX_BODY_BYTES, check_listen_options, read_token_file

__all__ = ["add_arguments", "run", "parse_models", "sd_notify", "loop_kind"]

_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def add_arguments(p) -> None:
    """Add the ``serve`` options to an argparse (sub)parser."""
    p.add_argument("--model-repository", metavar="DIR", help="folder with one sub-folder per model")
    p.add_argument("--model", action="append", default=[], metavar="NAME=FILE",
                   help="serve one model file without a repository folder (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--token", help="require 'Authorization: Bearer TOKEN' on every endpoint but health")
    auth.add_argument("--token-file", metavar="PATH", help="read the bearer token from PATH")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help=f"request body limit in bytes (default {DEFAULT_MAX_BODY_BYTES})")
    p.add_argument("--drain-timeout", type=float, default=30.0,
                   help="seconds requests in flight may take to finish on SIGTERM (default 30)")
    p.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"],
                   help="event loop: uvloop when installed (auto, the default), uvloop (an error without it) "
                        "or asyncio's own")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="level of the log lines written to stderr (default info)")


def parse_models(items: List[str]) -> Dict[str, str]:
    """``["a=x.rknn", ...]`` -> ``{"a": "x.rknn"}``.

    Raises:
        InvalidParamError: an item without ``=`` or a name given twice.
    """
    models: Dict[str, str] = {}
    for item in items:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise InvalidParamError(f"--model takes NAME=FILE, got {item!r}", op="serve")
        if name in models:
            raise InvalidParamError(f"--model {name} is given twice", op="serve")
        models[name] = file
    return models


def sd_notify(message: str, environ=os.environ) -> bool:
    """Send ``message`` to systemd's notify socket (``NOTIFY_SOCKET``); False without one."""
    address = environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(address)
            s.sendall(message.encode())
    except OSError:
        return False
    return True


def run(args) -> int:
    """Run the daemon until SIGTERM/SIGINT; returns the exit status (0 after a clean drain)."""
    from .repository import ModelRepository

    if not args.model_repository and not args.model:
        raise InvalidParamError("serve needs --model-repository DIR and/or --model NAME=FILE", op="serve")
    check_listen_options(args.port, args.max_body_bytes, args.drain_timeout)
    token: Optional[str] = args.token
    if args.token_file:
        token = read_token_file(args.token_file)
    repository = ModelRepository(args.model_repository, parse_models(args.model))
    log = logging.getLogger("rknnlite")
    # The command is the application: it shows the daemon's log on stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(getattr(logging, args.log_level.upper()))
    try:
        if args.host not in _LOOPBACK and token is None:
            log.warning("listening on %s without --token: anyone who reaches this address can run the models",
                        args.host)
        return _run_loop(_serve(repository, args, token), args.loop)
    finally:
        log.removeHandler(handler)


def loop_kind(loop) -> str:
    """``"uvloop"`` or ``"asyncio"``: which implementation ``loop`` is."""
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"


def _run_loop(coro, kind: str):
    """Run ``coro`` on a new event loop of its own and return its result.

    ``kind``: ``"uvloop"`` (uvloop's loop; InvalidParamError when it is not installed),
    ``"asyncio"`` (the standard library's), ``"auto"`` (uvloop's when installed).  Only
    this loop is uvloop's: the process's event loop policy is left alone.
    """
    loop = None
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise InvalidParamError("--loop uvloop: uvloop is not installed (pip install uvloop)",
                                        op="serve") from None
        else:
            loop = uvloop.new_event_loop()
    if loop is None:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


async def _serve(repository, args, token: Optional[str]) -> int:
    from .server import MANAGER_KEY, create_app, start_app, stop_app

    log = logging.getLogger("rknnlite.daemon")
    app = await create_app(repository, token=token, max_body_bytes=args.max_body_bytes)
    runner, port = await start_app(app, args.host, args.port, args.drain_timeout)
    manager = app[MANAGER_KEY]
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reloads: set = set()

    async def reload() -> None:
        sd_notify("RELOADING=1")
        try:
            changed = await manager.reload()
            log.info("reloaded the repository: %s", ", ".join(changed) or "nothing changed")
        except Exception:  # a reload must never kill the daemon
            log.exception("reload failed")
        finally:
            sd_notify("READY=1")

    def on_hup() -> None:
        task = loop.create_task(reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, on_hup)
    try:
        ready = sum(1 for m in manager.models.values() if m.ready)
        log.info("serving %d of %d model(s) on http://%s:%d (%s event loop)", ready, len(manager.models), args.host,
                 port, loop_kind(loop))
        sd_notify("READY=1")
        await stop.wait()
        log.info("stopping: draining requests in flight (up to %.0f s)", args.drain_timeout)
        sd_notify("STOPPING=1")
        if reloads:
            await asyncio.gather(*list(reloads), return_exceptions=True)
        await stop_app(runner)
        log.info("stopped")
        return 0
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
