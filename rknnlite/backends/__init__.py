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


def _npu_unavailable(loaded: LoadedModel) -> DeviceUnavailableError:
    return DeviceUnavailableError(
        f"{loaded.label}: the npu backend (librknnrt.so through the Cython binding) is not part of this "
        "build yet, so Rockchip .rknn files cannot run here",
        op="rknn_init",
    )


def _software_refuses(loaded: LoadedModel) -> str:
    if loaded.format == ROCKCHIP_ENCRYPTED:
        return "a Rockchip-encrypted (CYPTRKNN) model can only be decrypted by librknnrt on a board"
    return (
        "the software backend runs portable rknnlite models; a Rockchip .rknn file needs the NPU "
        "(convert the source ONNX with rknnlite.toolkit to run it off-board)"
    )


def create_backend(loaded: LoadedModel, backend: str = "auto", custom_ops=()) -> Backend:
    """Initialise ``loaded`` on the named backend.

    ``custom_ops`` are Python custom operators (``op_type`` + ``compute(self, node, inputs)``).

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
        npu = _npu_unavailable(loaded)
        if backend == "npu":
            raise npu
        software = _software_refuses(loaded)
        if backend == "software":
            raise DeviceUnavailableError(f"{loaded.label}: {software}", op="rknn_init")
        raise DeviceUnavailableError(f"{npu.message}; and {software}", op="rknn_init")
    raise InvalidParamError(f"no backend handles format {loaded.format!r}", op="rknn_init")
