"""Stub of the compiled ``rknnlite._native.vision_kernels`` (cython/kernels/vision_kernels.pyx): what Python calls."""

from typing import Any

from numpy.typing import ArrayLike as Buffer

def greedy_nms(boxes: Buffer, classes: Buffer, iou: float, max_det: int, keep: Buffer) -> Any: ...
