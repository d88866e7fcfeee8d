"""Stub of the compiled ``rknnlite._native.custom_op_plugin`` (cython/npu/custom_op_plugin.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

class NativeOp:
    address: Any
    @staticmethod
    def from_address(address: int, owner: Any = ..., source: str = ...) -> Any: ...
    has_compute: Any
    has_compute_native: Any
    has_destroy: Any
    has_init: Any
    has_prepare: Any
    op_type: Any
    owner: Any
    source: Any
    target: Any
    version: Any

class NodeContext:
    address: Any
    def destroy(self) -> int: ...
    destroyed: Any
    def init(self, ins: list, outs: list) -> int: ...
    op: Any
    priv_data: Any
    def run(self, ins: list, outs: list) -> int: ...

class PluginLibrary:
    def get_custom_op(self) -> Any: ...
    path: Any
    def symbol(self, name: str) -> Any: ...

def export_symbols() -> Any: ...
def get_op_attr_address() -> Any: ...
