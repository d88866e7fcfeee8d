"""Operator kernels of the software backend, keyed by ONNX op type.

A kernel is ``fn(inputs: list[np.ndarray | None], attrs: dict) -> list[np.ndarray]``
(``None`` for an omitted optional input).  Kernels compute in float32 for float
tensors; the executor applies the model's storage precision between nodes.
"""

from __future__ import annotations

from typing import Callable, Dict, List

KERNELS: Dict[str, Callable] = {}


def kernel(*op_types: str):
    """Register the decorated function as the kernel of ``op_types``."""

    def register(fn):
        for op in op_types:
            KERNELS[op] = fn
        return fn

    return register


def supported_ops() -> List[str]:
    """Every op type the software backend can run, sorted."""
    return sorted(KERNELS)


from . import elementwise, nn, shape  # noqa: E402,F401  (registers the kernels)
