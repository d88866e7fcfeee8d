"""The protocol every backend implements; ``Context`` talks to nothing else."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

try:  # Python 3.8+: typing.Protocol
    from typing import Protocol
except ImportError:  # pragma: no cover
    Protocol = object  # type: ignore

from ..constants import CoreMask
from ..errors import InvalidParamError
from ..model.spec import TensorSpec
from ..tensors.perf import MemSize, PerfDetail
from ..tensors.attr import TensorAttr


class Backend(Protocol):
    """An initialised model on one execution device.

    ``inputs``/``outputs`` describe tensors in model order and dtype.  ``run`` takes
    one array per input, already checked and converted by the Context to the model's
    shape and the dtype of :func:`feed_specs`, and returns new float32 (or model-dtype)
    arrays the caller owns.
    A model built with ``rknn_batch_size=N`` has N-sample inputs and outputs (axis 0
    multiplied by N); the backend runs all N samples in one ``run``.
    """

    name: str
    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]

    #: optional: the inputs as ``run`` takes them when that differs from ``inputs`` (same
    #: names, shapes and layouts, a wider dtype): a vendor fp16 file on the software backend
    #: reports FLOAT16 inputs, as librknnrt does, but takes float32 data and normalises it
    #: with the file's mean/std before rounding.  Absent: ``inputs`` (see :func:`feed_specs`).
    feed_inputs: Sequence[TensorSpec]

    #: dynamic-shape models: the allowed shape sets, ``dynamic_shapes[s][i]`` being input
    #: ``i``'s shape in set ``s`` in the layout of ``inputs[i]`` (e.g. NHWC for a 4-D input
    #: librknnrt presents as NHWC); empty for a static-shape model
    dynamic_shapes: Sequence[Sequence[Tuple[int, ...]]]

    def run(self, inputs: List[np.ndarray], pass_through: Optional[Sequence[bool]] = None,
            out: Optional[Sequence[Optional[np.ndarray]]] = None) -> List[np.ndarray]:
        """Run once.  ``pass_through[i]`` true: ``inputs[i]`` is pass-through data, checked and
        put in the input's layout by the Context but not converted (int8 values of a quantized
        input, normalised floats of a float one); the backend hands it to the NPU as is
        (librknnrt ``pass_through=1``) or converts it itself (software).  ``out[i]``, when
        given, is a writable array of output ``i``'s exact shape that receives it (and is
        returned in its place).  ``inputs`` may be strided views of the caller's data (a
        transposed NCHW array given for an NHWC input): the backend copies what it needs
        contiguous."""

    def sdk_version(self) -> dict:
        """``{"api": ..., "drv": ...}``: the versions of the runtime serving this backend."""

    def native_attrs(self, is_input: bool, nhwc: bool, current: Sequence[TensorAttr]) -> List[TensorAttr]:
        """The inputs' (``is_input``) or outputs' attributes in the NPU's native layout at the
        current shapes (``CURRENT_NATIVE_*``; ``nhwc``: ``NATIVE_NHWC_*``).  ``current`` are
        the Context's attributes at the current shapes (model layout), for backends that
        derive the native ones from them."""

    def set_input_shapes(self, shapes: Sequence[Tuple[int, ...]]) -> None:
        """Switch a dynamic-shape model to ``shapes`` (one of :attr:`dynamic_shapes`)."""

    def zero_copy(self, io) -> "ZeroCopy":
        """The zero-copy I/O on this backend of the Context ``io`` describes (an
        :class:`~rknnlite.backends.io_host.IoHost`: its plans, attributes, lock and run step;
        made once per Context)."""

    def dup(self) -> "Backend": ...

    def close(self) -> None: ...

    def set_core_mask(self, platform: str, mask: CoreMask) -> None:
        """Run later inferences on the cores ``mask`` names (already validated for ``platform``
        by :func:`rknnlite.tensors.topology.check_core_mask`)."""

    def set_batch_core_num(self, n: int) -> None:
        """Split a multi-batch model's samples across ``n`` cores (already validated)."""

    def set_perf_collection(self, enabled: bool) -> None:
        """Profile every operator of each run from now on (``InitFlag.COLLECT_PERF_MASK``)."""

    def perf_detail(self) -> Optional[PerfDetail]:
        """The per-operator profile of the last run, or ``None`` before any profiled run."""

    def perf_run(self) -> Optional[int]:
        """Duration of the last run in microseconds, or ``None`` before any run."""

    def mem_size(self) -> MemSize:
        """The memory this backend's context uses (``rknn_mem_size``)."""

    def set_weight_mem(self, mem) -> None:
        """Hold the model's weights in ``mem`` from now on (``rknn_set_weight_mem``; the
        Context has checked the flag, the owner and the size)."""

    def set_internal_mem(self, mem) -> None:
        """Keep the intermediate tensors in ``mem`` from now on (``rknn_set_internal_mem``)."""

    def register_custom_op(self, op, native: bool = False, shape_infer=None) -> None:
        """Run every node of ``op.op_type`` with ``op`` from now on: a Python operator, or with
        ``native=True`` a native ``rknn_custom_op`` (``NativeOp``); ``shape_infer`` gives the
        output shapes of a native operator when the model does not store them."""


def feed_specs(backend) -> Sequence[TensorSpec]:
    """The specs of the data ``backend.run`` takes, one per input: its ``feed_inputs`` when
    it declares them, else its ``inputs`` (the Context converts user data to these)."""
    feeds = getattr(backend, "feed_inputs", None)
    return backend.inputs if feeds is None else feeds


class ZeroCopy(Protocol):
    """Zero-copy I/O of one Context (``Context.create_mem``/``set_io_mem``/``run_bound``):
    emulated on the host by the software backend (:mod:`rknnlite.backends.software.binding`),
    ``rknn_create_mem``/``rknn_set_io_mem``/``rknn_mem_sync`` on the npu backend.  The
    memory objects have the :class:`~rknnlite.backends.memory.TensorMem` interface."""

    def create_mem(self, size: int, flags: int = 0): ...

    def create_mem_from_fd(self, fd: int, size: int, offset: int = 0, flags: int = 0): ...

    def set_io_mem(self, mem, attr: TensorAttr) -> None: ...

    def run_bound(self) -> None: ...

    def owns(self, mem) -> bool:
        """Whether ``mem`` was made by this context's ``create_mem``/``create_mem_from_fd``."""

    def release(self) -> None:
        """The Context closes: unbind everything, destroy the memory it created."""


def check_out(out, names: Sequence[str], expected: Sequence[Tuple[tuple, np.dtype]]) -> None:
    """Reject an ``out`` list (see :meth:`Backend.run`) that cannot take the outputs
    ``names`` of ``expected`` ``(shape, dtype)``: raises :class:`InvalidParamError` naming
    the entry and what it needs.  Run before anything is written."""
    if not isinstance(out, (list, tuple)) or len(out) != len(expected):
        got = f"{len(out)} entries" if isinstance(out, (list, tuple)) else f"a {type(out).__name__}"
        raise InvalidParamError(
            f"out must be a list with one array (or None) per output ({len(expected)}: {', '.join(names)}); "
            f"got {got}", op="rknn_outputs_get")
    for i, (o, (shape, dtype)) in enumerate(zip(out, expected)):
        if o is None:
            continue
        what = f"out[{i}] (output {names[i]!r})"
        if not isinstance(o, np.ndarray):
            raise InvalidParamError(f"{what} must be a numpy array or None, not {type(o).__name__}",
                                    op="rknn_outputs_get")
        if o.shape != tuple(shape):
            raise InvalidParamError(f"{what} has shape {list(o.shape)}; the output has shape {list(shape)}",
                                    op="rknn_outputs_get")
        if not o.flags.writeable:
            raise InvalidParamError(f"{what} is read-only", op="rknn_outputs_get")
        if not np.can_cast(dtype, o.dtype, "same_kind"):
            raise InvalidParamError(f"{what} has dtype {o.dtype}; the output is {np.dtype(dtype)}, which casts "
                                    f"only to the same kind of type", op="rknn_outputs_get")
