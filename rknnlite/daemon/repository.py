"""The model repository: one folder per model, each with an optional ``config.json``.

Layout::

    REPO/
      yolo/                      model name = folder name ([A-Za-z0-9][A-Za-z0-9_.-]*)
        config.json              optional; without it the folder's only *.rknn is served
        yolo.rknn
        yolo.key                 for an encrypted model (32-byte key file)

``config.json`` keys (all optional; unknown keys are errors):

* ``model_file`` (str): the model, relative to the folder (default: the only ``*.rknn``).
* ``key_file`` (str): key of an encrypted model, relative to the folder.
* ``backend``: ``"auto"`` | ``"software"`` | ``"npu"`` (default ``"auto"``).
* ``core_mask``: a :class:`~rknnlite.constants.CoreMask` name (``"CORE_0_1_2"``) or int.
* ``instances`` (int >= 1): contexts running in parallel (dups sharing the weights).
* ``max_concurrency`` (int >= 1, default 64): requests in flight before answering 503.
* ``dynamic_batching``: ``{"max_batch_size": n, "max_queue_delay_us": us}`` for a
  multi-batch model (batch on axis 0 of every input and output, ``n`` <= that batch).
* ``inputs`` / ``outputs``: lists of ``{"name": protocol name, "tensor": model tensor
  name, "format": "nchw" | "nhwc"}`` (``format`` for 4-D tensors: the layout clients send
  or receive).  Without them the model's own names and layout (NCHW) are used.
* ``version`` (str of digits, default ``"1"``).

Model and key files must stay inside the model folder (no absolute paths, no ``..``, no
symlink leading out).  Errors name the file and the key.  Models given with ``--model
NAME=FILE`` use the defaults and are not confined (the operator named the file).
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from ..constants import CoreMask
from ..errors import InvalidParamError
from ..runtime.log import logger as _root_logger
from .protocol import ProtocolError
from .security import confine
from .served import ServedModel

__all__ = ["CONFIG_NAME", "ConfigError", "ModelConfig", "ModelRepository", "ModelManager", "parse_config"]

logger = _root_logger.getChild("daemon")

#: The config file of a model folder.
CONFIG_NAME = "config.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_KEYS = {"model_file", "key_file", "backend", "core_mask", "instances", "max_concurrency", "dynamic_batching",
         "inputs", "outputs", "version"}
_BACKENDS = ("auto", "software", "npu")


class ConfigError(InvalidParamError):
    """A model config that cannot be used; the message names the file and the key."""


@dataclass
class ModelConfig:
    """A checked model configuration (see the module doc for the keys).

    ``model_file``/``key_file`` are absolute real paths; ``max_batch_size`` is 0 when
    dynamic batching is off; ``path`` is the config file (or a description of its origin).
    """

    name: str
    path: str
    model_file: str
    key_file: Optional[str] = None
    backend: str = "auto"
    core_mask: Optional[int] = None
    instances: int = 1
    max_concurrency: int = 64
    max_batch_size: int = 0
    max_queue_delay_us: int = 0
    inputs: Optional[List[dict]] = None
    outputs: Optional[List[dict]] = None
    version: str = "1"


def _int(doc: dict, key: str, path: str, default: int, low: int, high: int = 1 << 30) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{path}: '{key}' must be an integer in {low}..{high}, got {value!r}", op="serve")
    return value


def _tensor_entries(doc: dict, key: str, path: str) -> Optional[List[dict]]:
    entries = doc.get(key)
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: '{key}' must be a list of objects", op="serve")
    seen = set()
    for k, entry in enumerate(entries):
        where = f"{path}: '{key}[{k}]'"
        if not isinstance(entry, dict) or not entry.keys() <= {"name", "tensor", "format"}:
            raise ConfigError(f"{where} must be an object with 'name', 'tensor' and/or 'format'", op="serve")
        for field in ("name", "tensor"):
            if field in entry and (not isinstance(entry[field], str) or not entry[field]):
                raise ConfigError(f"{where}.{field} must be a non-empty string", op="serve")
        if "format" in entry:
            if entry["format"] not in ("nchw", "nhwc"):
                raise ConfigError(f"{where}.format must be 'nchw' or 'nhwc', got {entry['format']!r}", op="serve")
        name = entry.get("name", entry.get("tensor"))
        if name in seen:
            raise ConfigError(f"{where}: the name {name!r} is used twice", op="serve")
        seen.add(name)
    return [dict(e) for e in entries]


def parse_config(name: str, folder: str, doc, path: str) -> ModelConfig:
    """Check a model folder's config document and resolve its files.

    Args:
        name: the model name; folder: the model folder; doc: the parsed JSON;
        path: the config file (for messages).

    Raises:
        ConfigError: a bad value, an unknown key, or a file outside the folder or missing
            (the message names ``path`` and the key).
    """
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the config must be a JSON object", op="serve")
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; known keys: "
                          f"{', '.join(sorted(_KEYS))}", op="serve")
    try:
        if "model_file" in doc:
            model_file = confine(folder, doc["model_file"], f"{path}: 'model_file'")
        else:
            candidates = sorted(glob.glob(os.path.join(glob.escape(folder), "*.rknn")))
            if len(candidates) != 1:
                raise ConfigError(f"{path}: no 'model_file' and {len(candidates)} *.rknn files in {folder}; "
                                  f"set 'model_file'", op="serve")
            model_file = confine(folder, os.path.basename(candidates[0]), f"{path}: the model file")
        key_file = confine(folder, doc["key_file"], f"{path}: 'key_file'") if "key_file" in doc else None
    except ConfigError:
        raise
    except InvalidParamError as e:
        raise ConfigError(e.message, op="serve") from None
    for key, file in (("model_file", model_file), ("key_file", key_file)):
        if file is not None and not os.path.isfile(file):
            raise ConfigError(f"{path}: '{key}' {file} is not a file", op="serve")
    backend = doc.get("backend", "auto")
    if backend not in _BACKENDS:
        raise ConfigError(f"{path}: 'backend' must be one of {', '.join(_BACKENDS)}, got {backend!r}", op="serve")
    core_mask = doc.get("core_mask")
    if core_mask is not None:
        if isinstance(core_mask, str) and core_mask.upper() in CoreMask.__members__:
            core_mask = int(CoreMask[core_mask.upper()])
        elif isinstance(core_mask, bool) or not isinstance(core_mask, int):
            raise ConfigError(f"{path}: 'core_mask' must be a CoreMask name ({', '.join(CoreMask.__members__)}) "
                              f"or an int, got {core_mask!r}", op="serve")
    batching = doc.get("dynamic_batching")
    max_batch = delay = 0
    if batching is not None:
        if not isinstance(batching, dict) or not batching.keys() <= {"max_batch_size", "max_queue_delay_us"}:
            raise ConfigError(f"{path}: 'dynamic_batching' must be an object with 'max_batch_size' and "
                              f"'max_queue_delay_us'", op="serve")
        max_batch = _int(batching, "max_batch_size", path + ": dynamic_batching", 1, 1, 4096)
        delay = _int(batching, "max_queue_delay_us", path + ": dynamic_batching", 0, 0, 10_000_000)
    version = doc.get("version", "1")
    if not isinstance(version, str) or not version.isdigit():
        raise ConfigError(f"{path}: 'version' must be a string of digits, got {version!r}", op="serve")
    return ModelConfig(
        name=name, path=path, model_file=model_file, key_file=key_file, backend=backend, core_mask=core_mask,
        instances=_int(doc, "instances", path, 1, 1, 64),
        max_concurrency=_int(doc, "max_concurrency", path, 64, 1, 1 << 20),
        max_batch_size=max_batch, max_queue_delay_us=delay,
        inputs=_tensor_entries(doc, "inputs", path), outputs=_tensor_entries(doc, "outputs", path), version=version)


def _stat(path: Optional[str]) -> Tuple:
    if path is None:
        return ()
    try:
        st = os.stat(path)
    except OSError:
        return (path, None)
    return (path, st.st_mtime_ns, st.st_size, st.st_ino)


class ModelRepository:
    """The models a daemon can serve: the folders of ``root`` plus single ``files``.

    Args:
        root: the repository folder, or None.
        files: ``{name: model file}`` served with default settings (``--model NAME=FILE``).

    Raises:
        InvalidParamError: ``root`` is not a folder, or a name in ``files`` is not valid.
    """

    def __init__(self, root: Optional[str] = None, files: Optional[Mapping[str, str]] = None):
        if root is not None and not os.path.isdir(root):
            raise InvalidParamError(f"the model repository {root} is not a folder", op="serve")
        self.root = os.path.realpath(root) if root is not None else None
        self.files: Dict[str, str] = {}
        for name, file in (files or {}).items():
            if not _NAME_RE.match(name):
                raise InvalidParamError(f"model name {name!r} must match {_NAME_RE.pattern}", op="serve")
            self.files[name] = os.path.abspath(file)

    def names(self) -> List[str]:
        """Every model name the repository holds now (folders are listed afresh)."""
        names = set(self.files)
        if self.root is not None:
            for entry in os.listdir(self.root):
                if _NAME_RE.match(entry) and self._folder(entry) is not None:
                    names.add(entry)
        return sorted(names)

    def _folder(self, name: str) -> Optional[str]:
        """The real path of model folder ``name``, or None when it is missing or escapes the root."""
        if self.root is None or not _NAME_RE.match(name):
            return None
        real = os.path.realpath(os.path.join(self.root, name))
        if os.path.commonpath([self.root, real]) != self.root or not os.path.isdir(real):
            return None
        return real

    def has(self, name: str) -> bool:
        """Whether ``name`` is a model of this repository."""
        return name in self.files or self._folder(name) is not None

    def config(self, name: str) -> ModelConfig:
        """The checked config of model ``name``.

        Raises:
            ConfigError: a bad or unreadable config (file and key named).
            ProtocolError: (404) no such model.
        """
        if name in self.files:
            file = self.files[name]
            if not os.path.isfile(file):
                raise ConfigError(f"--model {name}={file}: not a file", op="serve")
            return ModelConfig(name=name, path=f"--model {name}={file}", model_file=file)
        folder = self._folder(name)
        if folder is None:
            raise ProtocolError(f"unknown model {name!r}: not in the repository", status=404)
        path = os.path.join(folder, CONFIG_NAME)
        doc: dict = {}
        if os.path.lexists(path):
            if os.path.commonpath([folder, os.path.realpath(path)]) != folder:
                raise ConfigError(f"{path} leads outside the model folder", op="serve")
            try:
                with open(path, "r", encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"{path}: cannot read: {e}", op="serve") from None
            except ValueError as e:
                raise ConfigError(f"{path}: malformed JSON: {e}", op="serve") from None
        return parse_config(name, folder, doc, path)

    def fingerprint(self, name: str) -> Tuple:
        """A value that changes when model ``name``'s config, model or key file changes."""
        if name in self.files:
            return _stat(self.files[name])
        folder = self._folder(name)
        if folder is None:
            return ()
        parts = [_stat(os.path.join(folder, CONFIG_NAME))]
        try:
            config = self.config(name)
        except (ConfigError, ProtocolError):
            parts.append(tuple(_stat(p) for p in sorted(glob.glob(os.path.join(glob.escape(folder), "*")))))
        else:
            parts += [_stat(config.model_file), _stat(config.key_file)]
        return tuple(parts)


class ModelManager:
    """The models a server serves, loaded from a :class:`ModelRepository`.

    All methods run on the server's event loop; loading and closing contexts run in the
    loop's default executor.  A model that fails to load stays listed as unavailable with
    the reason (also logged); other models are unaffected.
    """

    def __init__(self, repository: ModelRepository, metrics=None):
        self.repository = repository
        self.metrics = metrics
        self.models: Dict[str, ServedModel] = {}
        self._prints: Dict[str, Tuple] = {}
        self._unloaded: set = set()
        self._lock: Optional[asyncio.Lock] = None

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def get(self, name: str) -> Optional[ServedModel]:
        """The served (or unavailable) model ``name``, or None when not loaded."""
        return self.models.get(name)

    def index(self, ready_only: bool = False) -> List[dict]:
        """The repository index: ``{"name", "version", "state", "reason"}`` per model."""
        out = []
        for name in self.repository.names() + sorted(set(self.models) - set(self.repository.names())):
            model = self.models.get(name)
            if model is None:
                entry = {"name": name, "state": "UNAVAILABLE", "reason": "unloaded"}
            else:
                entry = {"name": name, "version": model.version, "state": model.state, "reason": model.reason or ""}
            if not ready_only or entry["state"] == "READY":
                out.append(entry)
        return out

    async def _open(self, name: str) -> ServedModel:
        loop = asyncio.get_running_loop()
        version = "1"
        try:
            config = self.repository.config(name)
            version = config.version
            model = await loop.run_in_executor(None, ServedModel.open, name, config)
        except ProtocolError as e:
            if e.status == 404:
                raise
            model = ServedModel.unavailable(name, version, e.message)
        except Exception as e:  # any failure makes only this model unavailable
            reason = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
            model = ServedModel.unavailable(name, version, reason)
        if model.reason:
            logger.error("model %s is unavailable: %s", name, model.reason)
        else:
            logger.info("model %s version %s ready (%s)", name, model.version, model.source)
        model.metrics = self.metrics
        return model

    async def load(self, name: str) -> ServedModel:
        """(Re)load model ``name`` from the repository; the previous one is closed after
        its requests in flight.  Returns the new model (maybe unavailable: see ``reason``).

        Raises:
            ProtocolError: (404) the repository has no such model.
        """
        async with self._guard():
            return await self._load(name)

    async def _load(self, name: str) -> ServedModel:
        prints = self.repository.fingerprint(name)
        model = await self._open(name)
        old = self.models.get(name)
        self.models[name] = model
        self._prints[name] = prints
        self._unloaded.discard(name)
        if self.metrics is not None:
            self.metrics.model_ready.labels(name).set(1 if model.ready else 0)
            # read at scrape time: no gauge update per request
            self.metrics.queue_depth.labels(name).set_function(lambda limit=model.limit: limit.active)
        if old is not None:
            await old.close()
        return model

    async def unload(self, name: str) -> None:
        """Stop serving ``name`` (after its requests in flight); SIGHUP reloads leave it unloaded.

        Raises:
            ProtocolError: (404) ``name`` is not loaded.
        """
        async with self._guard():
            model = self.models.pop(name, None)
            if model is None:
                raise ProtocolError(f"unknown model {name!r}: not loaded", status=404)
            self._prints.pop(name, None)
            self._unloaded.add(name)
            if self.metrics is not None:
                self.metrics.forget_model(name)
            await model.close()
            logger.info("model %s unloaded", name)

    async def load_all(self) -> None:
        """Load every model of the repository."""
        async with self._guard():
            for name in self.repository.names():
                await self._load(name)

    async def reload(self) -> List[str]:
        """Re-scan the repository (SIGHUP): load new models, reload changed or unavailable
        ones, drop models whose folder is gone; models unloaded through the API stay
        unloaded.  Returns the names (re)loaded or dropped."""
        changed = []
        async with self._guard():
            names = set(self.repository.names())
            for name in sorted(set(self.models) - names):
                model = self.models.pop(name)
                self._prints.pop(name, None)
                if self.metrics is not None:
                    self.metrics.forget_model(name)
                await model.close()
                changed.append(name)
                logger.info("model %s removed from the repository; unloaded", name)
            for name in sorted(names - self._unloaded):
                model = self.models.get(name)
                if model is None or not model.ready or self.repository.fingerprint(name) != self._prints.get(name):
                    await self._load(name)
                    changed.append(name)
        return changed

    def flush(self) -> None:
        """Every model runs the requests waiting for a dynamic batch at once from now on (a
        draining server does not wait out the queue delays)."""
        for model in self.models.values():
            model.flush()

    async def close(self) -> None:
        """Close every model (after their requests in flight)."""
        async with self._guard():
            models, self.models = list(self.models.values()), {}
            for model in models:
                await model.close()
