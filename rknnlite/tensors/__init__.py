"""Value types every layer shares: tensor attributes, perf and range records, the
tensor-memory protocol, layout conversions and the NPU core topology.

This package imports only :mod:`rknnlite.errors`, :mod:`rknnlite.constants` and the
compiled layout kernels (layer 0 of docs/architecture.md); the model, the backends and the
runtime build on it.
"""

from .attr import TensorAttr
from .memory import TensorMemory
from .perf import MemSize, OpPerf, PerfDetail
from .ranges import InputRange, IoNum

__all__ = ["TensorAttr", "TensorMemory", "MemSize", "OpPerf", "PerfDetail", "InputRange", "IoNum"]
