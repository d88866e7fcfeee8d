"""Counters and latency windows behind :meth:`Pipeline.stats`.

Everything here is updated by the pipeline under its own lock; :class:`LatencyWindow`
keeps the most recent durations only (a fixed-size ring), so memory stays constant over
millions of frames and the percentiles describe recent behaviour.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Deque, Dict, List, Optional

__all__ = ["LatencyWindow", "LatencySummary", "StageStats", "PipelineStats", "RateWindow"]

#: durations kept per window (the percentiles cover the last this many frames)
WINDOW = 2048


@dataclass(frozen=True)
class LatencySummary:
    """Latency percentiles in milliseconds over the recent frames (``count`` of them);
    all 0.0 when nothing was measured yet."""

    count: int = 0
    mean_ms: float = 0.0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0


class LatencyWindow:
    """The last ``size`` durations (seconds) and their percentiles (nearest rank)."""

    def __init__(self, size: int = WINDOW):
        self._values: Deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        """Record one duration in seconds."""
        self._values.append(seconds)

    def summary(self) -> LatencySummary:
        """Percentiles of the recorded durations, in milliseconds."""
        values = sorted(self._values)
        n = len(values)
        if not n:
            return LatencySummary()

        def rank(p: float) -> float:
            # nearest-rank percentile: the smallest value with at least p% of values <= it
            k = max(0, min(n - 1, -(-n * p // 100) - 1))
            return values[int(k)] * 1e3

        return LatencySummary(n, sum(values) / n * 1e3, rank(50), rank(95), rank(99))


class RateWindow:
    """Completion timestamps of the last ``size`` frames, for a recent frames-per-second."""

    def __init__(self, size: int = 64):
        self._times: Deque[float] = deque(maxlen=size)

    def add(self, t: float) -> None:
        """Record one completion at ``time.perf_counter()`` value ``t``."""
        self._times.append(t)

    def fps(self) -> float:
        """Frames per second over the recorded completions (0.0 with fewer than two)."""
        if len(self._times) < 2:
            return 0.0
        span = self._times[-1] - self._times[0]
        return (len(self._times) - 1) / span if span > 0 else 0.0


@dataclass(frozen=True)
class StageStats:
    """One stage: its name, worker threads, frames waiting in its input queue now and at
    most so far, frames it processed (successes and failures) and failed, and the
    latency of one call of the stage."""

    name: str
    workers: int
    queue_depth: int
    max_queue_depth: int
    processed: int
    errors: int
    latency: LatencySummary


@dataclass(frozen=True)
class PipelineStats:
    """A snapshot of a :class:`~rknnlite.pipeline.Pipeline`.

    Frame accounting: every pushed frame is in exactly one of ``completed`` (a result was
    produced), ``failed`` (an error result was produced), ``cancelled`` (``close(drain=False)``),
    ``dropped`` (``drop="oldest"``) or ``in_flight`` (waiting or being processed in a stage):
    ``pushed == completed + failed + cancelled + dropped + in_flight``.  ``popped`` counts the
    results handed to the consumer (completed or failed).

    ``throughput_fps``: results produced per second between the first push and the last
    result; ``recent_fps``: over the last 64 results.  ``latency``: push to result produced,
    per frame.  ``stages``: one :class:`StageStats` per stage.
    """

    pushed: int
    completed: int
    failed: int
    cancelled: int
    dropped: int
    popped: int
    in_flight: int
    elapsed_s: float
    throughput_fps: float
    recent_fps: float
    latency: LatencySummary
    stages: List[StageStats] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        """The snapshot as plain dicts and lists (e.g. for JSON)."""
        return asdict(self)


def ratio(count: int, seconds: Optional[float]) -> float:
    """``count / seconds``, or 0.0 when no time has passed."""
    return count / seconds if seconds and seconds > 0 else 0.0
