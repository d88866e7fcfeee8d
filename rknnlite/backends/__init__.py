"""Backend selection: which backend runs a loaded model.

``"software"`` runs portable rknnlite models on the CPU, and Rockchip ``.rknn`` files whose
every op the vendor-graph lowering knows (:mod:`rknnlite.model.rknn_graph`); ``"npu"`` runs
Rockchip ``.rknn`` files through librknnrt on a board; ``"auto"`` picks the one the file
needs: for a Rockchip file the npu backend when librknnrt loads, else the software backend
when the lowering accepts the file.  An explicit choice never falls back silently.
"""

from __future__ import annotations

from ..errors import DeviceUnavailableError, InvalidParamError, ModelInvalidError
from ..model.loader import PORTABLE, ROCKCHIP, ROCKCHIP_ENCRYPTED, LoadedModel
from typing import Optional

from .base import Backend

__all__ = ["Backend", "BACKENDS", "create_backend"]

BACKENDS = ("auto", "software", "npu")


def _npu_backend(loaded: LoadedModel, custom_ops, flags: int = 0, share_with=None) -> Backend:
    """The npu backend on ``loaded``; DeviceUnavailableError (naming where librknnrt was
    looked for and how to install it) when the runtime cannot be loaded."""
    from .npu import NpuBackend

    try:
        return NpuBackend(loaded, custom_ops=custom_ops, flags=flags, share_with=share_with)
    except DeviceUnavailableError as e:
        if e.op not in ("dlopen", "dlsym"):
            raise
        raise DeviceUnavailableError(f"{loaded.label}: the npu backend cannot run: {e.message}",
                                     op="rknn_init") from None


def _software_refuses(loaded: LoadedModel) -> str:
    return "a Rockchip-encrypted (CYPTRKNN) model can only be decrypted by librknnrt on a board"


def _vendor_software_backend(loaded: LoadedModel, custom_ops) -> Backend:
    """The software backend on a Rockchip ``.rknn`` file, lowered here (only when this backend
    is chosen, so a board never pays for it); ModelInvalidError naming what the lowering
    does not know.  The file's op types that no built-in lowering runs are run by a custom
    operator: one of ``custom_ops`` (Python, RKNN-Toolkit2's class form), else a
    ``librkcst_<op type>.so`` plugin found where librknnrt looks for plugins
    (:mod:`rknnlite.backends.plugins`), registered as librknnrt does at init."""
    from ..errors import InvalidParamError
    from ..model.rknn_graph import lower_rockchip
    from .plugins import find_plugin, resolve_custom_op
    from .software import SoftwareBackend

    python_types = {getattr(op, "op_type", None) for op in custom_ops}
    plugins = {}

    def provided(op: str) -> bool:
        if op in python_types:
            return True
        try:
            plugins[op] = find_plugin(op)
            return True
        except InvalidParamError:
            return False  # the lowering refuses the op, naming both ways to provide it

    model = lower_rockchip(loaded.payload, loaded.model, custom=provided)
    backend = SoftwareBackend(model, custom_ops=custom_ops, source=loaded.source)
    for path in plugins.values():
        resolved, native = resolve_custom_op(path)
        backend.register_custom_op(resolved, native=native)
    return backend


def create_backend(loaded: LoadedModel, backend: str = "auto", custom_ops=(), flags: int = 0,
                   share_with: Optional[Backend] = None) -> Backend:
    """Initialise ``loaded`` on the named backend.

    ``custom_ops`` are Python custom operators (``op_type`` + ``compute(self, node, inputs)``);
    ``flags`` the context's :class:`~rknnlite.constants.InitFlag` bits (``rknn_init``'s, on
    the npu backend).  ``share_with``: the backend of the context whose weights this
    weight-less model uses; the model runs on that backend's kind (``backend`` must allow it).

    Raises:
        InvalidParamError: unknown backend name.
        DeviceUnavailableError: the model cannot run on the chosen backend here,
            naming every reason (for ``"auto"``, why each backend was refused).
        ModelInvalidError: ``"software"`` on a Rockchip file the lowering does not accept
            (naming the op, dtype, parameter... it does not know).
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InvalidParamError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}", op="rknn_init")
    if share_with is not None:
        return _sharing_backend(loaded, backend, custom_ops, flags, share_with)
    if loaded.format == PORTABLE:
        if backend == "npu":
            raise DeviceUnavailableError(
                f"{loaded.label}: portable rknnlite models run on the software backend; the npu backend "
                "runs Rockchip .rknn files",
                op="rknn_init",
            )
        from .software import SoftwareBackend

        if loaded.model.shared:
            raise ModelInvalidError(
                f"{loaded.label} is a weight-less model (built with config(remove_weight=True)): it has no "
                f"weights of its own ({len(loaded.model.shared)} left out); create it with "
                "share_weights_with=<a context of the full model built from the same network>", op="rknn_init")
        return SoftwareBackend(loaded.model, custom_ops=custom_ops, source=loaded.source)
    if loaded.format == ROCKCHIP and backend == "software":
        return _vendor_software_backend(loaded, custom_ops)
    if loaded.format in (ROCKCHIP, ROCKCHIP_ENCRYPTED):
        if backend == "software":
            raise DeviceUnavailableError(f"{loaded.label}: {_software_refuses(loaded)}", op="rknn_init")
        try:
            return _npu_backend(loaded, custom_ops, flags)
        except DeviceUnavailableError as npu:
            if backend == "npu" or npu.op != "rknn_init":
                raise
            if loaded.format == ROCKCHIP_ENCRYPTED:
                software = _software_refuses(loaded)
            else:
                try:
                    return _vendor_software_backend(loaded, custom_ops)
                except ModelInvalidError as e:
                    software = f"the software backend cannot run it off-board: {e.message}"
            raise DeviceUnavailableError(f"{npu.message}; and {software}", op="rknn_init") from None
    raise InvalidParamError(f"no backend handles format {loaded.format!r}", op="rknn_init")


def _sharing_backend(loaded: LoadedModel, backend: str, custom_ops, flags: int, donor: Backend) -> Backend:
    """A weight-less model on the backend of the context it takes its weights from: the npu
    backend (``rknn_init`` with ``rknn_init_extend.ctx``) or the software backend (the
    portable model's left-out constants bound to the donor model's arrays)."""
    if backend not in ("auto", donor.name):
        raise InvalidParamError(f"share_weights_with: the shared context runs on the {donor.name} backend; this "
                                f"model must run there too, not on {backend!r}", op="rknn_init")
    if donor.name == "npu":
        if loaded.format == PORTABLE:
            raise InvalidParamError(f"{loaded.label}: a portable model cannot share the weights of a context on the "
                                    "npu backend; build both models the same way", op="rknn_init")
        return _npu_backend(loaded, custom_ops, flags, share_with=donor)
    from ..model.portable import PortableModel, share_weights
    from .software import SoftwareBackend

    donor_model = getattr(donor, "model", None)
    if loaded.format != PORTABLE or not isinstance(donor_model, PortableModel):
        raise InvalidParamError(f"{loaded.label}: off-board, weight sharing (share_weights_with) works between "
                                "portable models built by rknnlite's toolkit (the weight-less one with "
                                "config(remove_weight=True)); Rockchip files share weights on a board",
                                op="rknn_init")
    shared = tuple(loaded.model.shared)
    model = share_weights(loaded.model, donor_model, loaded.label)
    return SoftwareBackend(model, custom_ops=custom_ops, source=loaded.source, shared=shared)
