"""What a backend's zero-copy I/O may use of the ``Context`` it serves: the :class:`IoHost`
protocol, and the tensor lookups every backend's ``set_io_mem``/``run_bound`` share.

``Backend.zero_copy(io)`` receives one :class:`IoHost` (made by the runtime,
:class:`rknnlite.runtime.context_io.ContextIo`) instead of the Context itself, so that a
backend reads no private field of the runtime, and so that ``Context.run`` and
``Context.run_bound`` go through the same run step (:meth:`IoHost.execute`).
"""

from __future__ import annotations

import threading
from typing import Collection, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError
from ..tensors.attr import TensorAttr

__all__ = ["IoHost", "find_tensor", "check_all_bound"]


class IoHost(Protocol):
    """One Context as its backend's zero-copy I/O sees it.

    Attributes:
        lock: the Context's lock: runs and binding changes hold it, so they never interleave.
        flags: the Context's ``InitFlag`` bits (an int).
        inputs, outputs: the model's tensor attributes (as ``ctx.inputs``/``ctx.outputs``).
        input_plans, output_plans: the Context's per-tensor conversions
            (``rknnlite.runtime.io.InputPlan``/``OutputPlan``): ``plan.convert`` turns user
            data into what :meth:`Backend.run` takes, ``plan.raw`` an output into its raw type.
        dynamic: whether the model has shape sets (dynamic shapes).
    """

    lock: threading.Lock
    flags: int
    inputs: List[TensorAttr]
    outputs: List[TensorAttr]
    input_plans: Sequence
    output_plans: Sequence
    dynamic: bool

    @property
    def current_inputs(self) -> List[TensorAttr]:
        """The input attributes at the current input shapes."""

    @property
    def current_outputs(self) -> List[TensorAttr]:
        """The output attributes at the current input shapes."""

    def native(self, is_input: bool, nhwc: bool) -> List[TensorAttr]:
        """The inputs' (``is_input``) or outputs' attributes in the NPU's native layout at the
        current shapes (``nhwc``: the NATIVE_NHWC_* variant); cached by the Context."""

    def live(self, op: str):
        """The Context's backend; ``ContextInvalidError`` (naming ``op``) once it is closed."""

    def execute(self, backend, feeds: List[np.ndarray], passes: Optional[List[bool]] = None,
                out: Optional[list] = None) -> List[np.ndarray]:
        """The run step ``Context.run`` uses too (the lock held, ``backend`` live): switch a
        dynamic-shape model to the shape set of ``feeds``, run ``backend``, remember the set's
        output shapes.  ``out`` (static shapes only) as in :meth:`Backend.run`."""


def find_tensor(io: IoHost, attr: TensorAttr) -> Tuple[bool, int]:
    """(is_input, index) of the tensor of ``io``'s context that ``attr`` names (by name, at index).

    Raises:
        InvalidParamError: no such tensor, or its index differs.
    """
    for is_input, attrs in ((True, io.inputs), (False, io.outputs)):
        for a in attrs:
            if a.name == attr.name:
                if a.index != attr.index:
                    kind = "input" if is_input else "output"
                    raise InvalidParamError(f"attr names {kind} {attr.name!r}, which has index {a.index}, but its "
                                            f"index is {attr.index}", op="rknn_set_io_mem")
                return is_input, a.index
    names = ", ".join([f"input {a.index} {a.name!r}" for a in io.inputs]
                      + [f"output {a.index} {a.name!r}" for a in io.outputs])
    raise InvalidParamError(f"attr name {attr.name!r} is no input or output of the model ({names})",
                            op="rknn_set_io_mem")


def check_all_bound(io: IoHost, inputs: Collection[int], outputs: Collection[int]) -> None:
    """Raise the error of ``run_bound`` naming every input/output of ``io``'s context whose
    index is not in ``inputs``/``outputs`` (the bound indexes)."""
    missing = [f"input {a.index} ({a.name!r})" for a in io.inputs if a.index not in inputs]
    missing += [f"output {a.index} ({a.name!r})" for a in io.outputs if a.index not in outputs]
    if missing:
        raise InvalidParamError(f"run_bound needs every input and output bound with set_io_mem; not bound: "
                                f"{', '.join(missing)}", op="rknn_run")
