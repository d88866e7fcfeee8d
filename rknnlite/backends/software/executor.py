"""Runs a :class:`~rknnlite.model.graph.Graph` node by node with numpy and Cython kernels."""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from ...errors import InvalidParamError, ModelInvalidError
from ...model.graph import Graph
from .ops import KERNELS, supported_ops

__all__ = ["Executor"]


class Executor:
    """A graph compiled to a list of kernel calls.

    ``float_dtype`` is the storage precision between nodes: ``"float16"`` rounds every
    float tensor to half precision after each node, as the NPU stores them;
    ``"float32"`` keeps full precision.  Arithmetic inside kernels is float32.
    """

    def __init__(self, graph: Graph, float_dtype: str = "float16"):
        if float_dtype not in ("float16", "float32"):
            raise InvalidParamError(f"float_dtype must be 'float16' or 'float32', not {float_dtype!r}")
        missing = sorted({n.op for n in graph.nodes if n.op not in KERNELS})
        if missing:
            first = next(n for n in graph.nodes if n.op in missing)
            raise ModelInvalidError(
                f"unsupported op {first.op!r} (node {first.name!r}); unsupported here: {', '.join(missing)}; "
                f"the software backend supports: {', '.join(supported_ops())}",
                op="rknn_init",
            )
        self.graph = graph
        self._round = float_dtype == "float16"
        self._steps = [(KERNELS[n.op], n) for n in graph.nodes]
        self._constants = {k: self._store(np.asarray(v)) for k, v in graph.constants.items()}

    def _store(self, a: np.ndarray) -> np.ndarray:
        if a.dtype.kind == "f":
            return a.astype(np.float16).astype(np.float32) if self._round else a.astype(np.float32, copy=False)
        return a

    def run(self, feeds: List[np.ndarray]) -> List[np.ndarray]:
        """Execute once; ``feeds`` in graph-input order.  Returns the graph outputs."""
        env: Dict[str, np.ndarray] = dict(self._constants)
        for name, value in zip(self.graph.inputs, feeds):
            env[name] = self._store(value)
        for fn, node in self._steps:
            args = [env[name] if name else None for name in node.inputs]
            results = fn(args, node.attrs)
            if len(results) < len(node.outputs):
                raise ModelInvalidError(
                    f"node {node.name!r} ({node.op}) declares {len(node.outputs)} outputs; the kernel gives {len(results)}",
                    op="rknn_run",
                )
            for name, value in zip(node.outputs, results):
                env[name] = self._store(value)
        return [np.array(env[name], copy=True) if env[name].base is not None else env[name]
                for name in self.graph.outputs]
