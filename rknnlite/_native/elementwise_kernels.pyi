"""Stub of the compiled ``rknnlite._native.elementwise_kernels`` (cython/kernels/elementwise_kernels.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

def erf_from_exp(x: Buffer, work: Buffer) -> Any: ...
def gelu_from_exp(x: Buffer, work: Buffer) -> Any: ...
def lut_rows(acc: Buffer, out: Buffer, index_scale: Buffer, inner: int, tables: Buffer, le_entries: int,
             index_offset: float,
             le_start: float, le_end: float, lo_start: float, lo_end: float, step: float, le_uflow_slope: float,
             lo_oflow_slope: float, out_multiplier: float, out_zero_point: float, out_scale: float) -> Any: ...
