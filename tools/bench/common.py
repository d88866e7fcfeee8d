"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def median_ms(fn: Callable[[], object], runs: int, warmup: int = 0) -> float:
    """Median wall time of ``fn()`` over ``runs`` calls, in milliseconds, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)
