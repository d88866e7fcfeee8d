"""The software NPU: runs portable models on the CPU with the runtime's semantics.

Emulated NPU cores are worker threads.  The core mask sets how many threads one
inference uses (see :func:`rknnlite.backends.software.parallel.threads_for_mask`); a model built with
``rknn_batch_size=N`` is run sample by sample through the batch-1 graph stored in the
file, on ``set_batch_core_num(n)`` emulated cores in parallel, each with its own buffers.

Profiling (``COLLECT_PERF_MASK``): ``perf_detail`` rows say ``Target`` ``CPU`` (the work
really runs on the host CPU) and show the emulated cores in ``WorkLoad(0/1/2)``: the share
of each operator's parallel work items each core's thread executed.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...constants import CoreMask
from ...errors import InputInvalidError, ModelInvalidError
from ...model.portable import PortableModel
from ...model.source import ModelSource
from ...tensors.topology import mask_cores
from .emulation import EmulatedNpu, presented_input, presented_output, to_graph_layout
from ...tensors.perf import MemSize, OpPerf, PerfDetail
from .custom_kernels import CustomOpRegistry
from .ops import sparse
from ..base import check_out
from .executor import ExecutionState, Executor, OpSample
from .parallel import WorkerPool, threads_for_mask, threads_from_env

__all__ = ["SoftwareBackend"]


class SoftwareBackend(EmulatedNpu):
    """Backend over a :class:`PortableModel` (or a vendor file lowered to one,
    :class:`~rknnlite.model.rknn_graph.VendorModel`); ``dup()`` shares the weights.  Native layouts,
    pass-through data, zero-copy and the SDK version are emulated (:class:`EmulatedNpu`)."""

    name = "software"

    def __init__(self, model: PortableModel, executor: Optional[Executor] = None, custom_ops=(),
                 source: Optional[ModelSource] = None, shared: Sequence[str] = ()):
        self.model = model
        #: constants taken from another context's model (share_weights_with): not this one's weights
        self.shared = tuple(shared)
        meta = model.metadata
        #: the I/O as librknnrt presents it (NHWC image inputs, FLOAT16 for a float16 model's
        #: float tensors); the graph takes ``model.metadata.inputs`` (NCHW), and ``run`` transposes
        self.inputs = tuple(presented_input(s, meta.float_dtype) for s in meta.inputs)
        #: what ``run`` takes (Backend.feed_inputs): float32 data for float16 inputs, in the
        #: presented layouts
        self.feed_inputs = tuple(presented_input(s) for s in getattr(model, "feed_inputs", None) or meta.inputs)
        self.outputs = tuple(presented_output(s, meta.float_dtype) for s in meta.outputs)
        #: samples per run (``rknn_batch_size`` of the build); the graph holds one sample
        self.batch = model.metadata.batch_size
        self._check_batch_axis()
        self._source = source
        self._custom_ops = tuple(custom_ops)
        self._executor = executor or Executor(model.graph, model.metadata.float_dtype, custom_ops,
                                              defer_missing=True)
        if executor is None and source is not None:
            source.release_pages()  # compiling read the weights; running pages back what it uses
        #: custom operators registered on this context (register_custom_op)
        self._custom = CustomOpRegistry(self._executor, meta.inputs, meta.outputs, self.batch,
                                        prepare=getattr(model, "graph_inputs", None))
        self._state = self._new_state()
        #: emulated cores one inference of the main state runs on (AUTO: core 0)
        self._cores: Tuple[int, ...] = (0,)
        #: one state per emulated core when a multi-batch model is split across cores
        self._batch_states: List[ExecutionState] = []
        self._batch_pool: Optional[WorkerPool] = None
        self._batch_core_num = 1
        self._profiling = False
        self._last_ns: Optional[int] = None
        self._last_profile: Optional[PerfDetail] = None

    def _new_state(self, threads: Optional[int] = None) -> ExecutionState:
        release = self._source.release_array if self._source is not None else None
        state = self._executor.new_state(threads, release=release)
        state.use_kernels(self._custom.overrides)
        return state

    def register_custom_op(self, op, native: bool = False, shape_infer=None) -> None:
        """Run every node of ``op.op_type`` with ``op`` on this backend from now on: a Python
        operator, or with ``native=True`` a ``NativeOp`` (init per node now, destroy at
        close; see :mod:`.custom_kernels`).  ``shape_infer`` gives native outputs' shapes."""
        self._custom.register(op, native, shape_infer)
        for state in [self._state] + self._batch_states:
            state.use_kernels(self._custom.overrides)

    def _check_batch_axis(self) -> None:
        if self.batch == 1:
            return
        for spec in tuple(self.inputs) + tuple(self.outputs):
            if not spec.shape or (spec.shape[0] != -1 and spec.shape[0] % self.batch):
                raise ModelInvalidError(
                    f"tensor {spec.name!r} has shape {list(spec.shape)}, but a model built with batch size "
                    f"{self.batch} needs axis 0 to be a multiple of {self.batch}",
                    op="rknn_init",
                )

    # -- running ---------------------------------------------------------------------------

    def run(self, inputs: List[np.ndarray], pass_through: Optional[Sequence[bool]] = None,
            out: Optional[Sequence[Optional[np.ndarray]]] = None) -> List[np.ndarray]:
        """Run once; new output arrays (float32, or the model's dtype for non-float outputs,
        in the model's layout).  One run at a time per backend (the Context locks).

        ``out``: one entry per output; each output is written into ``out[i]`` (``np.copyto``
        with ``casting="same_kind"``, a float16 array gets the nearest float16) instead of a
        new array, and the list returned holds those arrays (a ``None`` entry gets a new
        array).  ``out[i]`` must be a writable array of exactly the output's shape (all
        samples of a multi-batch model); a bad ``out`` raises :class:`InvalidParamError`
        before any is written, after the run.  The only copy is the one into ``out``.

        A multi-batch model's inputs are split along axis 0 into ``batch`` samples (views,
        no copy); each sample runs alone and the outputs are concatenated along axis 0
        (straight into ``out`` when given).  Passed-through inputs are dequantized first
        (:meth:`EmulatedNpu.from_pass_through`).  Inputs presented as NHWC (image inputs,
        :func:`~rknnlite.backends.software.emulation.presented_input`) are first copied into the graph's
        NCHW; a vendor ``.rknn`` model (:class:`~rknnlite.model.rknn_graph.VendorModel`) then
        normalises them with the file's mean/std (new arrays;
        :meth:`~rknnlite.model.rknn_graph.VendorModel.graph_inputs`).
        """
        inputs = to_graph_layout(inputs, self.model.metadata.inputs, self.inputs)
        graph_inputs = getattr(self.model, "graph_inputs", None)
        if graph_inputs is not None:  # a vendor file (VendorModel): its mean/std
            inputs = graph_inputs(inputs, pass_through)
        if pass_through is not None:
            inputs = self.from_pass_through(inputs, pass_through)
        t0 = perf_counter_ns()
        if self.batch == 1:
            outputs = self._state.run(inputs, out)
            self._last_ns = perf_counter_ns() - t0
            if self._profiling:
                self._last_profile = _merge_profiles([(self._state.last_profile, self._cores)])
            return outputs
        outputs, runs = self._run_batch(inputs, out)
        self._last_ns = perf_counter_ns() - t0
        if self._profiling:
            self._last_profile = _merge_profiles(runs)
        return outputs

    def _run_batch(self, inputs: List[np.ndarray], out: Optional[Sequence[Optional[np.ndarray]]] = None):
        n = self.batch
        samples = [[_sample(x, n, k, i, self.inputs[i].name) for i, x in enumerate(inputs)] for k in range(n)]
        results: list = [None] * n
        if not self._batch_states:
            for k in range(n):
                results[k] = (self._state.run(samples[k]), self._state.last_profile, self._cores)
        else:
            states = self._batch_states

            def body(first: int, stop: int) -> None:
                # emulated core c runs samples c, c + cores, ...: each state has one thread at a time
                for core in range(first, stop):
                    for k in range(core, n, len(states)):
                        results[k] = (states[core].run(samples[k]), states[core].last_profile, (core,))

            self._batch_pool.map_ranges(len(states), body)
        parts = [[r[0][i] for r in results] for i in range(len(self.outputs))]
        if out is None:
            outputs = [np.concatenate(p, axis=0) for p in parts]
        else:
            check_out(out, [spec.name for spec in self.outputs],
                      [((sum(len(a) for a in p),) + p[0].shape[1:], p[0].dtype) for p in parts])
            outputs = [np.concatenate(p, axis=0, out=o, casting="same_kind") if o is not None
                       else np.concatenate(p, axis=0) for p, o in zip(parts, out)]
        runs = [(r[1], r[2]) for r in results] if self._profiling else []
        return outputs, runs

    # -- cores, batch, profiling -----------------------------------------------------------

    def set_core_mask(self, platform: str, mask: CoreMask) -> None:
        """Use one worker thread per emulated core the mask names (``AUTO``: one core, with
        ``RKNNLITE_NUM_THREADS`` threads or 1), capped by the usable CPUs."""
        self._cores = mask_cores(platform, mask)
        self._state.set_threads(threads_for_mask(platform, mask, threads_from_env()))

    @property
    def threads(self) -> int:
        """Worker threads (caller included) one inference of the main state uses."""
        return self._state.pool.threads

    def set_batch_core_num(self, n: int) -> None:
        """Run the samples of a multi-batch model on ``n`` emulated cores in parallel: one
        execution state (own buffers, one thread) per core, on a pool of as many threads;
        sample ``k`` runs on core ``k % n``.  ``n=1`` runs the samples one after the other
        on the main state (with the core mask's threads).  No effect on a batch-1 model."""
        self._close_batch()
        self._batch_core_num = n
        cores = min(n, self.batch)
        if cores > 1:
            self._batch_states = [self._new_state(1) for _ in range(cores)]
            for state in self._batch_states:
                state.profiling = self._profiling
            self._batch_pool = WorkerPool(cores)

    @property
    def batch_core_num(self) -> int:
        """Emulated cores the samples of a multi-batch model are split across."""
        return self._batch_core_num

    def set_perf_collection(self, enabled: bool) -> None:
        """Time every operator of each later run (``perf_detail``); off, runs make no timing
        calls per operator."""
        self._profiling = bool(enabled)
        for state in [self._state] + self._batch_states:
            state.profiling = self._profiling

    def perf_detail(self) -> Optional[PerfDetail]:
        """The profile of the last run (layers the toolkit marked sparse say so), or ``None``
        before any profiled run."""
        if self._last_profile is None:
            return None
        return self._last_profile.with_sparsity(sparse.layer_ratios(self.model.graph))

    def perf_run(self) -> Optional[int]:
        """Wall time of the last ``run`` in µs (rounded, at least 1), or ``None`` before any run."""
        return None if self._last_ns is None else max(1, (self._last_ns + 500) // 1000)

    def mem_size(self) -> MemSize:
        """Weights (the file's own constants, each from a 64-byte boundary as
        :meth:`set_weight_mem` lays them out; shared ones not counted), planned activation
        buffers of every state of this backend, and those plus the input staging buffers as
        the "DMA" total."""
        weights = _weight_layout(self._own_constants())[1]
        states = [self._state] + self._batch_states
        internal = sum(s.planned_bytes for s in states)
        staging = sum(s.staging_bytes for s in states)
        return MemSize(total_weight_size=weights, total_internal_size=internal,
                       total_dma_allocated_size=weights + internal + staging)

    def _own_constants(self) -> dict:
        shared = set(self.shared)
        return {k: v for k, v in self.model.graph.constants.items() if k not in shared}

    # -- memory the caller provides (MEM_ALLOC_OUTSIDE / INTERNAL_ALLOC_OUTSIDE) ----------------

    def set_weight_mem(self, mem) -> None:
        """Copy this model's own weights into ``mem`` (each constant from a 64-byte boundary
        after ``mem.offset``, in name order) and run on them from now on: the executor is
        rebuilt on views of that memory (kernels that pack a weight for speed, e.g. Conv,
        keep their packed copy made at that moment, so later writes to the memory do not
        change them).  The size was checked by the Context (``mem_size().total_weight_size``)."""
        constants = self._own_constants()
        offsets, total = _weight_layout(constants)
        raw = mem.array(np.uint8)
        views = dict(self.model.graph.constants)
        for name, offset in offsets.items():
            a = np.ascontiguousarray(constants[name])
            dst = raw[offset:offset + a.nbytes].view(a.dtype).reshape(a.shape)
            np.copyto(dst, a)
            views[name] = dst
        import copy
        from dataclasses import replace

        graph = copy.copy(self.model.graph)  # a vendor graph keeps its keep_float/round_fp16 names
        graph.constants = views
        self.model = replace(self.model, graph=graph)
        executor = Executor(self.model.graph, self.model.metadata.float_dtype, self._custom_ops, defer_missing=True)
        custom = self._custom.clone(executor)
        threads, arena = self._state.pool.threads, self._state.arena
        self._close_batch()
        self._state.close()
        self._custom.close()
        self._executor, self._custom = executor, custom
        self._state = self._new_state(threads)
        self._state.profiling = self._profiling
        self._state.use_arena(arena)
        self.set_batch_core_num(self._batch_core_num)

    def set_internal_mem(self, mem) -> None:
        """Carve the planned activation buffers from ``mem`` (its bytes after ``mem.offset``)
        from now on; the first run plans them there."""
        self._state.use_arena(mem.array(np.uint8))

    # -- lifetime --------------------------------------------------------------------------

    def dup(self) -> "SoftwareBackend":
        """A backend on the same compiled model (weights shared) with its own buffers; it
        keeps the profiling setting, and starts with the AUTO core mask and batch core number 1."""
        twin = SoftwareBackend(self.model, self._executor, source=self._source, shared=self.shared)
        twin.set_perf_collection(self._profiling)
        try:
            twin._custom = self._custom.clone(self._executor)  # own native operator contexts
        except BaseException:
            twin.close()
            raise
        twin._state.use_kernels(twin._custom.overrides)
        return twin

    def _close_batch(self) -> None:
        for state in self._batch_states:
            state.close()
        self._batch_states = []
        if self._batch_pool is not None:
            self._batch_pool.close()
            self._batch_pool = None

    def close(self) -> None:
        self._close_batch()
        if self._state is not None:
            self._state.close()
        self._custom.close()  # native operators' destroy
        self._executor = None
        self._state = None


def _sample(x: np.ndarray, n: int, k: int, index: int, name: str) -> np.ndarray:
    """Sample ``k`` of ``n`` along axis 0 of input ``index`` (a view)."""
    rows, rest = divmod(x.shape[0], n) if x.ndim else (0, 1)
    if rest or not rows:
        raise InputInvalidError(
            f"input {index} ({name!r}) has shape {list(x.shape)}; a model built with batch size {n} needs "
            f"axis 0 to be a positive multiple of {n}",
            op="rknn_run",
        )
    return x[k * rows:(k + 1) * rows]


def _merge_profiles(runs: Sequence[Tuple[Optional[List[OpSample]], Tuple[int, ...]]]) -> Optional[PerfDetail]:
    """One :class:`OpPerf` row per operator: times and traffic summed over the samples of a
    multi-batch run (shapes are one sample's), work shares per emulated core."""
    runs = [(profile, cores) for profile, cores in runs if profile is not None]
    if not runs:
        return None
    records = []
    for i, first in enumerate(runs[0][0]):
        ns = rw = 0
        work = [0.0, 0.0, 0.0]
        for profile, cores in runs:
            row = profile[i]
            ns += row.ns
            rw += row.rw_bytes
            if row.work is not None:
                _add_work(work, row.work, cores)
        total = sum(work)
        records.append(OpPerf(
            id=i + 1, op_type=first.op_type, data_type=first.data_type, target="CPU",
            input_shapes=first.input_shapes, output_shapes=first.output_shapes, cycles=(0, 0, 0),
            time_us=ns / 1000.0, mac_usage=None,
            workload=tuple(w / total for w in work) if total else (0.0, 0.0, 0.0),
            rw_bytes=rw, full_name=f"{first.op_type}:{first.name}",
        ))
    return PerfDetail(tuple(records))


def _add_work(work: List[float], counts: Sequence[int], cores: Tuple[int, ...]) -> None:
    """Add one run's per-thread work items to the per-core totals; thread slot k ran on
    ``cores[k % len(cores)]``.  Work that was not split counts as one unit on the first core."""
    if not any(counts):
        work[cores[0]] += 1.0
        return
    for slot, count in enumerate(counts):
        work[cores[slot % len(cores)]] += count / sum(counts)


def _weight_layout(constants) -> Tuple[dict, int]:
    """``({name: byte offset}, total bytes)``: the constants in name order, each from a
    64-byte boundary (the layout of :meth:`SoftwareBackend.set_weight_mem`)."""
    offsets, total = {}, 0
    for name in sorted(constants):
        offsets[name] = total
        total += -(-int(np.asarray(constants[name]).nbytes) // 64) * 64
    return offsets, total
