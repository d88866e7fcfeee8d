"""The HTTP side of the daemon: an aiohttp application speaking the Open Inference Protocol v2.

Endpoints (``{name}`` a model, ``[/versions/{version}]`` optional):

* ``GET /v2/health/live``, ``GET /v2/health/ready`` (never need a token)
* ``GET /v2`` (server metadata), ``GET /v2/models/{name}[/versions/{version}]`` (model
  metadata, with ``state`` and ``reason``), ``GET .../ready``, ``GET .../config``
* ``POST /v2/models/{name}[/versions/{version}]/infer`` (JSON tensors and the binary
  tensor data extension)
* ``POST /v2/repository/index``, ``POST /v2/repository/models/{name}/load``, ``.../unload``
* ``GET /metrics`` (Prometheus text)

Errors answer ``{"error": "..."}`` with a 4xx status (503 with ``Retry-After`` when a model
is saturated, 500 for an unexpected failure).  Nothing here installs signal handlers:
:class:`Server` runs the application in a thread (tests, embedding); the ``rknnlite serve``
command (:mod:`rknnlite.daemon.command`) is the application that handles signals.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List, Mapping, Optional

from aiohttp import web

from .._version import __version__
from ..errors import RKNNError
from .metrics import DaemonMetrics
from .protocol import (HEADER_LENGTH, ProtocolError, RequestParser, dumps, encode_infer_response, error_body, loads,
                       parse_infer_request)
from .repository import ModelManager, ModelRepository, logger
from .security import DEFAULT_MAX_BODY_BYTES, check_listen_options, check_token, is_public_path

__all__ = ["create_app", "start_app", "Server", "MANAGER_KEY", "STATE_KEY"]

#: Extensions announced in the server metadata.
EXTENSIONS = ["binary_tensor_data", "model_repository", "model_configuration", "metrics"]

_JSON = "application/json"
#: JSON request parts (bytes) and JSON output elements beyond which decoding/encoding runs
#: in the default executor instead of on the event loop (they take milliseconds).
_OFFLOAD_JSON_BYTES = 64 << 10
_OFFLOAD_JSON_ELEMENTS = 16 << 10


class _State:
    """Per-application settings and counters (used on the event loop only)."""

    def __init__(self, manager: ModelManager, metrics: Optional[DaemonMetrics], token: Optional[str],
                 max_body: int):
        self.manager = manager
        self.max_body = max_body
        self.metrics = metrics
        self.token = token
        self.draining = False
        self.in_flight = 0
        self.parser = RequestParser()


MANAGER_KEY = web.AppKey("rknnlite_manager", ModelManager)
STATE_KEY = web.AppKey("rknnlite_state", _State)


def _json(doc, status: int = 200, headers: Optional[Mapping[str, str]] = None) -> web.Response:
    return web.Response(body=dumps(doc), status=status, content_type=_JSON, headers=headers)


def _error(message: str, status: int, headers: Optional[Mapping[str, str]] = None) -> web.Response:
    return web.Response(body=error_body(message), status=status, content_type=_JSON, headers=headers)


@web.middleware
async def _middleware(request: web.Request, handler):
    state: _State = request.app[STATE_KEY]
    start = time.perf_counter()
    state.in_flight += 1
    try:
        if state.token is not None and not is_public_path(request.path) \
                and not check_token(state.token, request.headers.get("Authorization")):
            response = _error("missing or wrong bearer token (Authorization: Bearer <token>)", 401,
                              {"WWW-Authenticate": 'Bearer realm="rknnlite"'})
        else:
            try:
                response = await handler(request)
            except ProtocolError as e:
                response = _error(e.message, e.status, e.headers)
            except web.HTTPException as e:
                if e.status < 400:
                    raise
                text = e.text if e.text and not e.text.startswith(f"{e.status}:") else e.reason
                if e.status == 413:
                    text = f"request body too large (limit {state.max_body} bytes)"
                response = _error(text or e.reason, e.status)
            except ValueError as e:  # the runtime refused inputs: InputInvalidError and friends
                response = _error(getattr(e, "message", None) or str(e), 400)
            except RKNNError as e:
                logger.error("inference failed on %s: %s", request.path, e)
                response = _error(e.message or str(e), 500)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never leak a traceback to the client; log it
                logger.exception("unexpected error on %s %s", request.method, request.path)
                response = _error(f"internal error: {type(e).__name__}", 500)
        metrics = state.metrics
        if metrics is not None:
            match = request.match_info
            name = match.get("name")
            model = "" if name is None else (name if name in state.manager.models else "_unknown")
            metrics.observe_request(model, getattr(match.route, "name", None) or "unmatched", response.status,
                                    time.perf_counter() - start)
        return response
    finally:
        state.in_flight -= 1


# -- handlers ---------------------------------------------------------------------------------


def _model(request: web.Request):
    """The model a request names (any state), checking the version when given."""
    name = request.match_info["name"]
    model = request.app[MANAGER_KEY].get(name)
    if model is None:
        raise ProtocolError(f"unknown model {name!r}", status=404)
    version = request.match_info.get("version")
    if version is not None and version != model.version:
        raise ProtocolError(f"unknown version {version!r} of model {name!r}; it has version {model.version}",
                            status=404)
    return model


async def _live(request: web.Request) -> web.Response:
    return _json({"live": True})


async def _ready(request: web.Request) -> web.Response:
    if request.app[STATE_KEY].draining:
        return _json({"ready": False}, status=503)
    return _json({"ready": True})


async def _server_metadata(request: web.Request) -> web.Response:
    return _json({"name": "rknnlite", "version": __version__, "extensions": EXTENSIONS})


async def _model_metadata(request: web.Request) -> web.Response:
    return _json(_model(request).metadata())


async def _model_ready(request: web.Request) -> web.Response:
    model = _model(request)
    if not model.ready:
        return _json({"name": model.name, "ready": False, "reason": model.reason or ""}, status=400)
    return _json({"name": model.name, "ready": True})


async def _model_config(request: web.Request) -> web.Response:
    model = _model(request)
    if not model.ready:
        raise ProtocolError(f"model {model.name!r} is not ready: {model.reason}")
    return _json(model.config())


async def _infer(request: web.Request) -> web.Response:
    model = _model(request)
    if not model.ready:
        raise ProtocolError(f"model {model.name!r} is not ready" + (f": {model.reason}" if model.reason else ""))
    state = request.app[STATE_KEY]
    metrics = state.metrics
    model.limit.acquire()  # also what rknnlite_queue_depth reports
    try:
        body = await request.read()
        header = request.headers.get(HEADER_LENGTH)
        json_part = len(body) if header is None else (int(header) if header.isdigit() else 0)
        loop = asyncio.get_running_loop()
        if json_part > _OFFLOAD_JSON_BYTES:  # big JSON tensors: decode off the event loop
            infer = await loop.run_in_executor(None, parse_infer_request, body, header)
        else:
            infer = state.parser.parse(body, header)
        arrays, rows = model.check_inputs(infer.inputs)
        if infer.outputs is not None:
            wanted = [(model.output_spec(o.name).name, o.binary) for o in infer.outputs]
        else:
            wanted = [(t.name, infer.binary_output) for t in model.outputs]
        try:
            results = await model.infer(arrays, rows)
        except (ValueError, RKNNError):
            if metrics is not None:
                metrics.labels(metrics.errors, model.name, "runtime").inc()
            raise
        sent = [(n, results[n], b) for n, b in wanted]
        if sum(y.size for _, y, b in sent if not b) > _OFFLOAD_JSON_ELEMENTS:
            payload, header_length = await loop.run_in_executor(None, encode_infer_response, model.name,
                                                                model.version, infer.id, sent)
        else:
            payload, header_length = encode_infer_response(model.name, model.version, infer.id, sent)
    except ProtocolError:
        if metrics is not None:
            metrics.labels(metrics.errors, model.name, "client").inc()
        raise
    finally:
        model.limit.release()
    if header_length is None:
        return web.Response(body=payload, content_type=_JSON)
    return web.Response(body=payload, content_type="application/octet-stream",
                        headers={HEADER_LENGTH: str(header_length)})


async def _optional_json(request: web.Request) -> dict:
    body = await request.read()
    if not body.strip():
        return {}
    try:
        doc = loads(body)
    except ValueError as e:
        raise ProtocolError(f"malformed JSON in the request: {e}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("the request body must be a JSON object")
    return doc


async def _repository_index(request: web.Request) -> web.Response:
    doc = await _optional_json(request)
    return _json(request.app[MANAGER_KEY].index(ready_only=bool(doc.get("ready", False))))


async def _repository_load(request: web.Request) -> web.Response:
    await _optional_json(request)
    name = request.match_info["name"]
    model = await request.app[MANAGER_KEY].load(name)
    if not model.ready:
        raise ProtocolError(f"failed to load model {name!r}: {model.reason}")
    return _json({})


async def _repository_unload(request: web.Request) -> web.Response:
    await _optional_json(request)
    await request.app[MANAGER_KEY].unload(request.match_info["name"])
    return _json({})


async def _metrics(request: web.Request) -> web.Response:
    metrics = request.app[STATE_KEY].metrics
    if metrics is None:
        raise ProtocolError("metrics are disabled", status=404)
    body, content_type = metrics.render()
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response


# -- application ------------------------------------------------------------------------------


async def create_app(repository: ModelRepository, *, token: Optional[str] = None,
                     max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, metrics: bool = True,
                     load: bool = True) -> web.Application:
    """The aiohttp application serving ``repository``'s models.

    Args:
        repository: the models (:class:`~rknnlite.daemon.repository.ModelRepository`).
        token: bearer token required on every endpoint but health; None: no auth.
        max_body_bytes: request body limit (larger bodies get 413).
        metrics: serve ``/metrics`` (a private registry per application).
        load: load every model now (blocking loads run in the loop's default executor).

    The models are closed when the application is cleaned up.  Installs no signal handler.
    """
    collected = DaemonMetrics() if metrics else None
    manager = ModelManager(repository, collected)
    app = web.Application(middlewares=[_middleware], client_max_size=int(max_body_bytes))
    app[MANAGER_KEY] = manager
    app[STATE_KEY] = _State(manager, collected, token, int(max_body_bytes))
    r = app.router
    # the router tries resources in the order they are added: inference first
    r.add_post("/v2/models/{name}/infer", _infer, name="infer")
    r.add_post("/v2/models/{name}/versions/{version}/infer", _infer, name="infer_version")
    r.add_get("/v2/health/live", _live, name="health_live")
    r.add_get("/v2/health/ready", _ready, name="health_ready")
    r.add_get("/v2", _server_metadata, name="server_metadata")
    for prefix, suffix in (("/v2/models/{name}", ""), ("/v2/models/{name}/versions/{version}", "_version")):
        r.add_get(prefix, _model_metadata, name="model_metadata" + suffix)
        r.add_get(prefix + "/ready", _model_ready, name="model_ready" + suffix)
        r.add_get(prefix + "/config", _model_config, name="model_config" + suffix)
    r.add_post("/v2/repository/index", _repository_index, name="repository_index")
    r.add_post("/v2/repository/models/{name}/load", _repository_load, name="repository_load")
    r.add_post("/v2/repository/models/{name}/unload", _repository_unload, name="repository_unload")
    r.add_get("/metrics", _metrics, name="metrics")

    async def close_models(app: web.Application) -> None:
        await manager.close()

    app.on_cleanup.append(close_models)
    if load:
        await manager.load_all()
    return app


async def start_app(app: web.Application, host: str = "127.0.0.1", port: int = 8000,
                    drain_timeout: float = 30.0):
    """Serve ``app`` on ``host:port`` (port 0: an ephemeral one); returns ``(runner, port)``.

    ``await stop_app(runner)`` stops accepting connections, lets requests in flight finish
    within ``drain_timeout`` seconds, then closes the models.
    """
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=float(drain_timeout))
    await runner.setup()
    site = web.TCPSite(runner, host, int(port))
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else int(port)
    return runner, bound


async def stop_app(runner) -> None:
    """Stop a runner from :func:`start_app`: refuse new connections, drain (requests waiting
    for a dynamic batch run at once, without waiting out the queue delay), clean up."""
    app = runner.app
    app[STATE_KEY].draining = True
    app[MANAGER_KEY].flush()
    await runner.cleanup()


class Server:
    """The daemon in a background thread with its own event loop (tests, embedding).

    Args:
        model_repository: a repository folder, or None.
        models: ``{name: model file}`` served without a folder.
        host, port: where to listen (port 0: an ephemeral port, see :attr:`port`).
        token, max_body_bytes, metrics: as :func:`create_app`.
        drain_timeout: seconds :meth:`stop` lets requests in flight finish.

    ``start()`` returns once the models are loaded and the port is bound; ``stop()``
    drains and closes.  Also a context manager.  No signal handlers are installed.
    """

    def __init__(self, model_repository: Optional[str] = None, models: Optional[Mapping[str, str]] = None, *,
                 host: str = "127.0.0.1", port: int = 0, token: Optional[str] = None,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, metrics: bool = True, drain_timeout: float = 30.0):
        check_listen_options(port, max_body_bytes, drain_timeout)
        self.repository = ModelRepository(model_repository, models)
        self.host = host
        self.port = int(port)
        self._options = dict(token=token, max_body_bytes=max_body_bytes, metrics=metrics)
        self._drain = drain_timeout
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._runner = None
        self.app: Optional[web.Application] = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self.host}:{self.port}"

    @property
    def manager(self) -> ModelManager:
        """The served models (see :class:`ModelManager`); use it from the server's loop only."""
        return self.app[MANAGER_KEY]

    def start(self) -> "Server":
        """Load the models, bind the port and serve in a background thread.

        Raises:
            OSError: the port cannot be bound.
            InvalidParamError: bad settings.
        """
        if self._thread is not None:
            raise RuntimeError("the server is already started")
        started = threading.Event()
        failure: List[BaseException] = []
        loop = self._loop = asyncio.new_event_loop()

        async def boot() -> None:
            self.app = await create_app(self.repository, **self._options)
            self._runner, self.port = await start_app(self.app, self.host, self.port, self._drain)

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(boot())
            except BaseException as e:  # reported to start()
                failure.append(e)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=main, name="rknnlite-server", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def call(self, coro, timeout: Optional[float] = None):
        """Run a coroutine on the server's loop and return its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def reload(self) -> List[str]:
        """What SIGHUP does for ``rknnlite serve``: re-scan the repository (see
        :meth:`ModelManager.reload`); returns the names (re)loaded or dropped."""
        return self.call(self.manager.reload())

    def stop(self) -> None:
        """Stop accepting, drain requests in flight (``drain_timeout``), close the models; idempotent."""
        if self._thread is None:
            return
        try:
            self.call(stop_app(self._runner))
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
