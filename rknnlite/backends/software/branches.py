"""Independent branches of a graph, run side by side on a run's threads.

An Inception block reads one tensor in four branches (1x1; 1x1 then 3x3; 1x1 then two
3x3; a pool then 1x1) and joins them in a Concat; a SqueezeNet fire module has two.  On
two threads, splitting each small convolution of such a block across both threads gains
little (a 14x14 or 7x7 image gives each thread a few tiles, and they wait for each other
after every layer); running the branches at the same time, each on one thread, keeps
both threads busy with whole layers, as two independent single-threaded GEMMs do.

* :func:`find_regions` finds the blocks in the step order: a *region* lies between two
  places where at most one computed tensor is live (a block's input, its Concat's
  output), and holds the steps before its last one (the join), when they form two or
  more groups that read nothing from each other (*branches*).  A first step whose output
  several branches read (the merged 1x1 convs of a block, ``sibling_convs``) stays before
  the region, run by both threads.  Graph inputs count as tensors made before the first
  step; constants never separate anything.
* A planned run gives every tensor a region touches its own buffer until the region's
  last step (the executor's memory plan, ``_make_plan``), so the branches never share a
  buffer; :func:`conflicts` checks that on the compiled program's arrays once more before
  any region is forked.
* :class:`Probe` decides, per region, in a program's first runs: single-threaded
  timings of each call deal the branches to the threads (biggest first, to the least
  loaded), then the region is timed as a whole, forked and split call by call in turn,
  and stays forked where that was clearly faster.  Neither way changes a value: every
  kernel computes the same result whatever the thread count.
* :func:`run_forked` runs one region: stream ``i`` (its calls in step order) on thread
  slot ``i`` of the run's worker pool, every stream on one thread (no nested split);
  :func:`run_program` runs a whole program with its forks.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .parallel import WorkerPool, serial_pool, using

__all__ = ["Region", "Fork", "Probe", "find_regions", "conflicts", "deal", "run_forked", "run_program",
           "CallFailed"]


class Region(NamedTuple):
    """Steps that may run as parallel branches: ``branches[b]`` are step indices in step
    order; ``first`` and ``last`` bound every member (the join step comes after ``last``)."""

    branches: Tuple[Tuple[int, ...], ...]
    first: int
    last: int


class Fork(NamedTuple):
    """One region of a compiled program, forked: calls ``[start, stop)`` run as
    ``streams`` (call indices per thread, each in call order)."""

    start: int
    stop: int
    streams: Tuple[Tuple[int, ...], ...]


class CallFailed(Exception):
    """A call of a program run here raised: ``index`` is the call, ``error`` (also the
    ``__cause__``) its exception."""

    def __init__(self, index: int, error: BaseException):
        super().__init__(index, error)
        self.index = index
        self.error = error


def find_regions(steps: Sequence, input_slots: Sequence[int]) -> List[Region]:
    """The regions of a topologically ordered step list (objects with ``index``, ``ins`` and
    ``outs``, slot ``-1`` for an absent tensor) of a graph with inputs ``input_slots`` (live
    from the start, like a tensor made before the first step); see the module docstring."""
    n = len(steps)
    producer = {s: -1 for s in input_slots}
    for st in steps:
        for s in st.outs:
            if s >= 0:
                producer[s] = st.index
    last_read = {}
    for st in steps:
        for s in st.ins:
            if s in producer:
                last_read[s] = st.index
    # live[p]: computed tensors made before step p and read at step p or later
    delta = [0] * (n + 2)
    for s, p in producer.items():
        r = last_read.get(s)
        if r is not None and r > p:
            delta[p + 1] += 1
            delta[r + 1] -= 1
    cuts, live = [], 0
    for p in range(n + 1):
        live += delta[p]
        if live <= 1:
            cuts.append(p)
    regions = []
    for a, b in zip(cuts, cuts[1:]):
        last = b - 2  # step b - 1 joins the branches
        groups = _groups(steps, producer, a, last)
        # a prologue: a first step that several branches read (the merged 1x1 convs of an
        # Inception block, sibling_convs) runs before the fork, not inside one branch
        while last - a >= 2 and len(_groups(steps, producer, a + 1, last)) > len(groups):
            a += 1
            groups = _groups(steps, producer, a, last)
        if len(groups) > 1:
            regions.append(Region(groups, a, last))
    return regions


def _groups(steps: Sequence, producer: dict, a: int, last: int) -> Tuple[Tuple[int, ...], ...]:
    """Steps ``[a, last]`` in groups that read nothing from each other (each in step order,
    the groups sorted); none when the range has fewer than two steps."""
    if last - a < 1:
        return ()
    parent = list(range(a, last + 1))

    def root(i: int) -> int:
        while parent[i - a] != i:
            parent[i - a] = parent[parent[i - a] - a]
            i = parent[i - a]
        return i

    for st in steps[a:last + 1]:
        for s in st.ins:
            p = producer.get(s)
            if p is not None and p >= 0 and a <= p <= last:
                parent[root(st.index) - a] = root(p)
    groups = {}
    for i in range(a, last + 1):
        groups.setdefault(root(i), []).append(i)
    return tuple(sorted(tuple(g) for g in groups.values()))


def _extent(a: Optional[np.ndarray]) -> Optional[Tuple[int, int]]:
    if a is None or a.size == 0:
        return None
    lo, hi = np.lib.array_utils.byte_bounds(a)
    return lo, hi


def conflicts(streams: Sequence[Sequence[Tuple[List[np.ndarray], List[np.ndarray]]]]) -> bool:
    """Whether two streams touch the same bytes where one of them writes.  ``streams[i]``
    lists ``(reads, writes)`` per call (arrays; ``None`` entries are ignored)."""
    spans = []
    for i, calls in enumerate(streams):
        for reads, writes in calls:
            spans.extend((e, i, False) for e in map(_extent, reads) if e is not None)
            spans.extend((e, i, True) for e in map(_extent, writes) if e is not None)
    writes = [(e, i) for e, i, w in spans if w]
    return any(i != j and lo < whi and wlo < hi
               for (wlo, whi), i in writes for (lo, hi), j, _ in spans)


def deal(costs: Sequence[float], threads: int) -> Tuple[List[List[int]], float]:
    """Items dealt to ``threads`` bins biggest first, each to the least loaded (ties: the
    lowest bin); returns the bins (item indices, ascending) and the largest bin's load."""
    bins: List[List[int]] = [[] for _ in range(threads)]
    loads = [0.0] * threads
    for k in sorted(range(len(costs)), key=lambda k: (-costs[k], k)):
        b = loads.index(min(loads))
        bins[b].append(k)
        loads[b] += costs[k]
    return [sorted(b) for b in bins if b], max(loads)


class Probe:
    """Timings of a program's first runs, and the forks they call for.

    The first ``SINGLE_RUNS`` runs time every call on one thread; the branches of each
    region are then dealt to the threads by those costs (biggest first, to the least
    loaded).  The next ``2 * TRIALS`` runs time each such region as a whole, forked and
    split call by call, alternately (what a fork costs in hand-overs and shared caches
    shows in its own time, not in an estimate); a region runs forked from then on when
    its best forked time beats its best split one by ``MARGIN`` (a fork that only ties
    in a few trials is as likely to lose in the runs after them)."""

    SINGLE_RUNS = 2
    TRIALS = 5
    MARGIN = 0.1

    def __init__(self, regions: Sequence[Tuple[int, int, Sequence[Sequence[int]]]], n_calls: int, threads: int):
        self.regions = regions
        self.threads = threads
        self.single = [float("inf")] * n_calls
        self.candidates: List[Fork] = []
        self.forked: List[float] = []
        self.split: List[float] = []
        self.runs = 0

    def run(self, calls: Sequence[Callable[[], object]], pool: WorkerPool) -> Optional[List[Fork]]:
        """One run of the program's calls as the probing requires; returns the forks chosen
        once the last probing run is done, else None.  Raises :class:`CallFailed`."""
        if self.runs < self.SINGLE_RUNS:
            with using(serial_pool()):
                _run_calls(calls, 0, len(calls), self.single)
            self.runs += 1
            if self.runs == self.SINGLE_RUNS:
                self._deal()
            return None
        fork = (self.runs - self.SINGLE_RUNS) % 2 == 0
        times = self.forked if fork else self.split

        def trial(i: int, cand: Fork) -> None:
            t0 = perf_counter_ns()
            if fork:
                run_forked(calls, cand, pool)
            else:
                _run_calls(calls, cand.start, cand.stop)
            times[i] = min(times[i], perf_counter_ns() - t0)

        run_program(calls, self.candidates, pool, trial)
        self.runs += 1
        if self.runs < self.SINGLE_RUNS + 2 * self.TRIALS:
            return None
        return [c for c, f, s in zip(self.candidates, self.forked, self.split) if f < (1 - self.MARGIN) * s]

    def _deal(self) -> None:
        for start, stop, branches in self.regions:
            costs = [sum(self.single[k] for k in b) for b in branches]
            bins, _ = deal(costs, min(self.threads, len(branches)))
            if len(bins) > 1:
                streams = tuple(tuple(sorted(k for b in bin_ for k in branches[b])) for bin_ in bins)
                self.candidates.append(Fork(start, stop, streams))
        self.forked = [float("inf")] * len(self.candidates)
        self.split = [float("inf")] * len(self.candidates)


def _run_calls(calls: Sequence[Callable[[], object]], start: int, stop: int,
               times: Optional[List[float]] = None) -> None:
    """``calls[start:stop]`` in order, each timed into ``times`` (its minimum) when given;
    raises :class:`CallFailed`."""
    k = start
    try:
        if times is None:
            for k in range(start, stop):
                calls[k]()
        else:
            for k in range(start, stop):
                t0 = perf_counter_ns()
                calls[k]()
                times[k] = min(times[k], perf_counter_ns() - t0)
    except Exception as e:
        raise CallFailed(k, e) from e


def run_forked(calls: Sequence[Callable[[], object]], fork: Fork, pool: WorkerPool) -> None:
    """Run a fork's streams at once, one per thread slot of ``pool``, each on one thread
    (under the caller's floating-point error settings, see ``WorkerPool.map_ranges``);
    raises :class:`CallFailed` for the first call that raised (the other streams finish)."""
    streams = fork.streams

    def body(start: int, stop: int) -> None:
        with using(serial_pool()):
            for i in range(start, stop):
                for k in streams[i]:
                    try:
                        calls[k]()
                    except Exception as e:
                        raise CallFailed(k, e) from e

    pool.map_ranges(len(streams), body)


def run_program(calls: Sequence[Callable[[], object]], forks: Sequence[Fork], pool: WorkerPool,
                region: Optional[Callable[[int, Fork], None]] = None) -> None:
    """Every call of a program on ``pool``'s threads: the forks' regions forked (or, given
    ``region``, run by ``region(i, forks[i])``), the other calls split as usual.  Raises
    :class:`CallFailed`."""
    k = 0
    with using(pool):
        for i, fork in enumerate(forks):
            _run_calls(calls, k, fork.start)
            if region is None:
                run_forked(calls, fork, pool)
            else:
                region(i, fork)
            k = fork.stop
        _run_calls(calls, k, len(calls))
