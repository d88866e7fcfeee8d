"""Backend selection: which backend runs a loaded model.

``"software"`` runs portable rknnlite models on the CPU; ``"npu"`` runs Rockchip
``.rknn`` files through librknnrt on a board; ``"auto"`` picks the one the file needs.
An explicit choice never falls back silently.
"""

from __future__ import annotations

from ..errors import DeviceUnavailableError, InvalidParamError
from ..model.loader import PORTABLE, ROCKCHIP, ROCKCHIP_ENCRYPTED, LoadedModel
from .base import Backend

__all__ = ["Backend", "BACKENDS", "create_backend"]

BACKENDS = ("auto", "software", "npu")


def _npu_backend(loaded: LoadedModel, custom_ops, flags: int = 0) -> Backend:
    """The npu backend on ``loaded``; DeviceUnavailableError (naming where librknnrt was
    looked for and how to install it) when the runtime cannot be loaded."""
    from .npu import NpuBackend

    try:
        return NpuBackend(loaded, custom_ops=custom_ops, flags=flags)
    except DeviceUnavailableError as e:
        if e.op not in ("dlopen", "dlsym"):
            raise
        raise DeviceUnavailableError(f"{loaded.label}: the npu backend cannot run: {e.message}",
                                     op="rknn_init") from None


def _software_refuses(loaded: LoadedModel) -> str:
    if loaded.format == ROCKCHIP_ENCRYPTED:
        return "a Rockchip-encrypted (CYPTRKNN) model can only be decrypted by librknnrt on a board"
    return (
        "the software backend runs portable rknnlite models; a Rockchip .rknn file needs the NPU "
        "(convert the source ONNX with rknnlite.toolkit to run it off-board)"
    )


def create_backend(loaded: LoadedModel, backend: str = "auto", custom_ops=(), flags: int = 0) -> Backend:
    """Initialise ``loaded`` on the named backend.

    ``custom_ops`` are Python custom operators (``op_type`` + ``compute(self, node, inputs)``);
    ``flags`` the context's :class:`~rknnlite.constants.InitFlag` bits (``rknn_init``'s, on
    the npu backend).

    Raises:
        InvalidParamError: unknown backend name.
        DeviceUnavailableError: the model cannot run on the chosen backend here,
            naming every reason (for ``"auto"``, why each backend was refused).
    """
    if backend not in BACKENDS:
        raise InvalidParamError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}", op="rknn_init")
    if loaded.format == PORTABLE:
        if backend == "npu":
            raise DeviceUnavailableError(
                f"{loaded.label}: portable rknnlite models run on the software backend; the npu backend "
                "runs Rockchip .rknn files",
                op="rknn_init",
            )
        from .software import SoftwareBackend

        return SoftwareBackend(loaded.model, custom_ops=custom_ops, source=loaded.source)
    if loaded.format in (ROCKCHIP, ROCKCHIP_ENCRYPTED):
        software = _software_refuses(loaded)
        if backend == "software":
            raise DeviceUnavailableError(f"{loaded.label}: {software}", op="rknn_init")
        try:
            return _npu_backend(loaded, custom_ops, flags)
        except DeviceUnavailableError as npu:
            if backend == "npu" or npu.op != "rknn_init":
                raise
            raise DeviceUnavailableError(f"{npu.message}; and {software}", op="rknn_init") from None
    raise InvalidParamError(f"no backend handles format {loaded.format!r}", op="rknn_init")
