"""The protocol every backend implements; ``Context`` talks to nothing else."""

from __future__ import annotations

from typing import List, Sequence

import numpy as np

try:  # Python 3.8+: typing.Protocol
    from typing import Protocol
except ImportError:  # pragma: no cover
    Protocol = object  # type: ignore

from ..model.spec import TensorSpec


class Backend(Protocol):
    """An initialised model on one execution device.

    ``inputs``/``outputs`` describe tensors in model order and dtype.  ``run`` takes
    one array per input, already checked and converted by the Context to the model's
    shape and dtype, and returns new float32 (or model-dtype) arrays the caller owns.
    """

    name: str
    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]

    def run(self, inputs: List[np.ndarray]) -> List[np.ndarray]: ...

    def dup(self) -> "Backend": ...

    def close(self) -> None: ...
