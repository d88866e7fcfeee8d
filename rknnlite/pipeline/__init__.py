"""Threaded inference: :class:`AsyncInferQueue` (a pool of contexts of one model) and
:class:`Pipeline` (frames through stages on worker threads, results in order)."""

from .infer_queue import AsyncInferQueue
from .pipeline import Carry, FrameError, Pipeline, PipelineClosedError, Result
from .stats import LatencySummary, PipelineStats, StageStats

__all__ = ["AsyncInferQueue", "Pipeline", "Result", "Carry", "FrameError", "PipelineClosedError", "PipelineStats",
           "StageStats", "LatencySummary"]
