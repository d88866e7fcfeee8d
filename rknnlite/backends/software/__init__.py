"""The software NPU: runs portable models on the CPU with the runtime's semantics."""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ...model.portable import PortableModel
from ...model.source import ModelSource
from .executor import Executor

__all__ = ["SoftwareBackend"]


class SoftwareBackend:
    """Backend over a :class:`PortableModel`; ``dup()`` shares the weights."""

    name = "software"

    def __init__(self, model: PortableModel, executor: Optional[Executor] = None, custom_ops=(),
                 source: Optional[ModelSource] = None):
        self.model = model
        self.inputs = model.metadata.inputs
        self.outputs = model.metadata.outputs
        self._source = source
        self._executor = executor or Executor(model.graph, model.metadata.float_dtype, custom_ops)
        if executor is None and source is not None:
            source.release_pages()  # compiling read the weights; running pages back what it uses
        self._state = self._executor.new_state(release=source.release_array if source is not None else None)

    def run(self, inputs: List[np.ndarray]) -> List[np.ndarray]:
        """Run once; new output arrays.  One run at a time per backend (the Context locks)."""
        return self._state.run(inputs)

    def dup(self) -> "SoftwareBackend":
        """A backend on the same compiled model (weights shared) with its own buffers."""
        return SoftwareBackend(self.model, self._executor, source=self._source)

    def close(self) -> None:
        if self._state is not None:
            self._state.close()
        self._executor = None
        self._state = None
