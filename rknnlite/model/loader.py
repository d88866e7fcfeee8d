"""Recognising a model file and opening it, whatever its format.

Formats: the portable container (runs on the software backend), Rockchip's
``.rknn`` (``RKNN`` + version; runs on the NPU), Rockchip's own encrypted files
(``CYPTRKNN``; decrypted only inside librknnrt on a board), and this project's
encryption envelope around either of the first two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from ..errors import ModelInvalidError
from . import envelope, rockchip
from .container import MAGIC as PORTABLE_MAGIC
from .info import ModelInfo
from .portable import read_portable
from .source import ModelSource, open_source

__all__ = ["LoadedModel", "load_model", "detect_format", "PORTABLE", "ROCKCHIP", "ROCKCHIP_ENCRYPTED"]

PORTABLE = "rknnlite-portable"
ROCKCHIP = "rockchip-rknn"
ROCKCHIP_ENCRYPTED = "rockchip-encrypted"
ENVELOPE = "rknnlite-encrypted"


def detect_format(buf) -> str:
    """Name the format of a model's first bytes; :class:`ModelInvalidError` if unknown."""
    head = bytes(buf[:16])
    if envelope.is_encrypted(head):
        return ENVELOPE
    if head.startswith(PORTABLE_MAGIC):
        return PORTABLE
    if rockchip.is_rockchip_encrypted(head):
        return ROCKCHIP_ENCRYPTED
    if rockchip.is_rockchip(head):
        return ROCKCHIP
    shown = head[:8].hex(" ") if head else "an empty buffer"
    raise ModelInvalidError(
        f"unknown model format (first bytes {shown}); expected a rknnlite model, a Rockchip .rknn "
        f"(\"RKNN\"), a Rockchip encrypted model (\"CYPTRKNN\") or a rknnlite encrypted model",
        op="load",
    )


@dataclass(frozen=True)
class LoadedModel:
    """A parsed model and how it was stored.

    Attributes:
        format: ``PORTABLE``, ``ROCKCHIP`` or ``ROCKCHIP_ENCRYPTED``.
        model: ``PortableModel``, ``RockchipModel`` or ``RockchipEncryptedInfo``, each a
            :class:`~rknnlite.model.info.ModelInfo`.
        payload: the model bytes (decrypted when the file was encrypted; in memory only).
        source: where the file came from (path or buffer).
        encryption: the envelope's header info when the file was encrypted, else None.
    """

    format: str
    model: ModelInfo
    payload: memoryview
    source: ModelSource
    encryption: Optional[Any] = None

    @property
    def label(self) -> str:
        return self.source.label

    def summary(self) -> dict:
        """JSON-ready description (``rknnlite inspect --json``)."""
        d = self.model.summary()
        if self.encryption is not None:
            d["encryption"] = encryption_summary(self.encryption)
        return d


def encryption_summary(info) -> dict:
    """JSON-ready description of an envelope header."""
    return {
        "envelope_version": info.version,
        "key_kind": info.key_kind,
        "device_bound": info.device_bound,
        "chunk_size": info.chunk_size,
        "payload_size": info.payload_size,
    }


def load_model(model: Union[str, bytes, bytearray, memoryview, ModelSource], key=None) -> LoadedModel:
    """Open, decrypt if needed, and parse a model.

    ``key`` (for encrypted files) is anything :func:`rknnlite.model.envelope.resolve_key`
    accepts; without it ``RKNNLITE_MODEL_KEY`` is tried.  Paths are memory-mapped and
    buffers used in place; only decryption makes a (private, in-memory) copy.

    Raises:
        ModelInvalidError: unknown or malformed file.
        KeyInvalidError / DecryptError: an encrypted file that the key does not open.
    """
    source = open_source(model)
    payload = source.view
    fmt = detect_format(payload)
    info = None
    if fmt == ENVELOPE:
        info = envelope.envelope_info(payload)
        payload = memoryview(envelope.decrypt(payload, key)).toreadonly()
        fmt = detect_format(payload)
        if fmt == ENVELOPE:
            raise ModelInvalidError(f"{source.label}: an encrypted model inside an encrypted model", op="load")
    model = parse_payload(fmt, payload, source.label)
    source.release_pages()  # verified: keep resident only what running the model touches
    return LoadedModel(fmt, model, payload, source, info)


def parse_payload(fmt: str, payload: memoryview, label: str) -> ModelInfo:
    """Parse plain (not encrypted) model bytes of a known format."""
    if fmt == PORTABLE:
        return read_portable(payload, label)
    if fmt == ROCKCHIP:
        return rockchip.read_rockchip(payload, label)
    return rockchip.rockchip_encrypted_info(payload)

