"""``ContextIo``: the one I/O object a ``Context`` hands its backend's zero-copy I/O.

It implements :class:`rknnlite.backends.io_host.IoHost`: the backend sees the context's
plans, attributes, native attributes, lock and flags, and runs through the same step as
``Context.run`` (:meth:`ContextIo.execute`), never the Context's own fields.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..errors import ContextInvalidError
from ..tensors.attr import TensorAttr

__all__ = ["ContextIo"]


class ContextIo:
    """The I/O side of one Context (see :class:`rknnlite.backends.io_host.IoHost`).  The
    lists are the Context's own (attributes immutable, plans shared); made once per Context
    by ``Context._zero_copy``."""

    __slots__ = ("lock", "flags", "inputs", "outputs", "input_plans", "output_plans", "dynamic", "_ctx")

    def __init__(self, ctx):
        self._ctx = ctx
        self.lock = ctx._lock
        self.flags = int(ctx.flags)
        self.inputs: List[TensorAttr] = ctx._inputs
        self.outputs: List[TensorAttr] = ctx._outputs
        self.input_plans = ctx._plans
        self.output_plans = ctx._out_plans
        self.dynamic = bool(ctx._shape_sets)

    @property
    def current_inputs(self) -> List[TensorAttr]:
        """The input attributes at the current input shapes (``ctx.current_inputs``)."""
        return self._ctx.current_inputs

    @property
    def current_outputs(self) -> List[TensorAttr]:
        """The output attributes at the current input shapes (``ctx.current_outputs``)."""
        return self._ctx.current_outputs

    def native(self, is_input: bool, nhwc: bool) -> List[TensorAttr]:
        """Native attributes at the current shapes (the Context's cache; not a copy)."""
        return self._ctx._native("in" if is_input else "out", nhwc)

    def live(self, op: str):
        """The Context's backend, or ``ContextInvalidError`` naming ``op`` once it is closed."""
        backend = self._ctx._backend
        if backend is None:
            raise ContextInvalidError("the context is closed", op=op)
        return backend

    def execute(self, backend, feeds: List[np.ndarray], passes: Optional[List[bool]] = None,
                out: Optional[list] = None) -> List[np.ndarray]:
        """``Context._execute``: the run step of ``run`` and ``run_bound`` (the lock held)."""
        return self._ctx._execute(backend, feeds, passes, out)
