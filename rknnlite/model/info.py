"""``ModelInfo``: what every parsed model says about itself, whatever its format.

:attr:`rknnlite.model.loader.LoadedModel.model` is a :class:`ModelInfo`, so the runtime and
the facades ask a model for its target platforms, custom string and host-side input
preprocessing without knowing which of the classes below it is:

* :class:`~rknnlite.model.portable.PortableModel` (rknnlite's own container),
* :class:`~rknnlite.model.rockchip.RockchipModel` (a vendor ``.rknn`` file as read),
* :class:`~rknnlite.model.rockchip.RockchipEncryptedInfo` (a vendor-encrypted file: it
  says nothing before librknnrt decrypts it),
* :class:`~rknnlite.model.rknn_graph.VendorModel` (a vendor file lowered for the software
  backend).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol, Sequence, Tuple, runtime_checkable

if TYPE_CHECKING:
    from .metadata import ModelMetadata, Preprocess

__all__ = ["ModelInfo", "MetadataInfo"]


@runtime_checkable
class ModelInfo(Protocol):
    """The facts every model class answers (read-only)."""

    @property
    def target_platforms(self) -> Sequence[str]:
        """The SoCs the model was built for, as the file writes them (``("rk3588",)``);
        empty when the file does not say."""

    @property
    def custom_string(self) -> Optional[str]:
        """The ``custom_string`` the model was built with (``""`` if none set; ``None`` when
        the file cannot say, e.g. vendor-encrypted)."""

    @property
    def input_preprocess(self) -> Sequence[Optional["Preprocess"]]:
        """Per input, the mean/std normalisation the host applies before the backend runs
        (``Context.run``); empty when there is none on the host side (a vendor file's own
        mean/std is applied by librknnrt, or by the lowered model itself)."""

    def summary(self) -> dict:
        """A JSON-ready description (``rknnlite inspect --json``)."""


class MetadataInfo:
    """The :class:`ModelInfo` properties of a model class that holds a validated
    ``metadata: ModelMetadata`` (the portable and the lowered vendor models)."""

    metadata: "ModelMetadata"

    @property
    def target_platforms(self) -> Tuple[str, ...]:
        """``metadata.target_platforms``."""
        return self.metadata.target_platforms

    @property
    def custom_string(self) -> str:
        """``metadata.custom_string``."""
        return self.metadata.custom_string

    @property
    def input_preprocess(self) -> Tuple[Optional["Preprocess"], ...]:
        """``metadata.preprocess`` (applied on the host by ``Context.run``)."""
        return self.metadata.preprocess
