"""Stub of the compiled ``rknnlite._native.thread_pool`` (cython/kernels/thread_pool.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

API: Any
CHUNKS_PER_THREAD: int
class NativePool:
    def __init__(self, threads: int = ..., spin_ns: int = ...) -> None: ...
    def close(self) -> Any: ...
    handle: Any
    def map_ranges(self, n: int, body: Any, min_chunk: int = ...) -> Any: ...
    spin_ns: Any
    def take_counts(self) -> Any: ...
    threads: Any

SPIN_NS: int
