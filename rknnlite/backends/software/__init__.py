"""The software NPU: runs portable models on the CPU with the runtime's semantics."""

from __future__ import annotations

from typing import List

import numpy as np

from ...model.portable import PortableModel
from .executor import Executor

__all__ = ["SoftwareBackend"]


class SoftwareBackend:
    """Backend over a :class:`PortableModel`; ``dup()`` shares the weights."""

    name = "software"

    def __init__(self, model: PortableModel, executor: Executor | None = None):
        self.model = model
        self.inputs = model.metadata.inputs
        self.outputs = model.metadata.outputs
        self._executor = executor or Executor(model.graph, model.metadata.float_dtype)

    def run(self, inputs: List[np.ndarray]) -> List[np.ndarray]:
        return self._executor.run(inputs)

    def dup(self) -> "SoftwareBackend":
        return SoftwareBackend(self.model, self._executor)

    def close(self) -> None:
        self._executor = None
