"""The inference daemon: an Open Inference Protocol v2 (KServe v2) server over a model repository.

Re-exports only.  Needs the ``daemon`` extra (``pip install "rknnlite-runtime[daemon]"``: aiohttp
and prometheus-client); the names are imported on first use so ``import rknnlite.daemon``
alone needs neither.

    from rknnlite.daemon import Server
    with Server("/srv/models", port=0) as server:   # loopback, ephemeral port
        print(server.url)

See docs/daemon.md for the endpoints, the config format and ``rknnlite serve``.
"""

from __future__ import annotations

import importlib

__all__ = ["Server", "create_app", "ModelRepository", "ModelManager", "ModelConfig", "ConfigError",
           "DynamicBatcher", "DaemonMetrics", "ProtocolError"]

_WHERE = {
    "Server": "server", "create_app": "server",
    "ModelRepository": "repository", "ModelManager": "repository", "ModelConfig": "repository",
    "ConfigError": "repository", "DynamicBatcher": "batching", "DaemonMetrics": "metrics",
    "ProtocolError": "protocol",
}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rknnlite.daemon' has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f".{module}", __name__), name)
    except ModuleNotFoundError as e:
        if e.name in ("aiohttp", "prometheus_client"):
            raise ImportError(f"rknnlite.daemon needs {e.name}: pip install \"rknnlite-runtime[daemon]\"") from e
        raise
