"""Runs a :class:`~rknnlite.model.graph.Graph` with the registered kernels and a static memory plan.

Compilation (once per model, shared by every context on it):
  * each node is bound to its kernel, and the kernel's ``prepare`` runs once with
    the constant inputs (weights are packed there, not per run);
  * constants are cast to the storage precision (float32, rounded to float16 in
    float16 mode).

Planning (once per context and input-shape signature): the first run with a new
signature allocates freely and records every tensor's shape and dtype; from it a
plan gives each output of an ``out``-capable kernel a buffer, reusing a buffer as
soon as every reader of its previous tensor has run.  Later runs with that
signature write into the planned buffers and allocate nothing tensor-sized, except
the returned outputs.  Tensors whose shape depends on data (after a
``data_dependent`` kernel) and outputs of kernels that cannot write in place stay
unplanned and are allocated per run.

Numeric modes: ``float16`` stores every float tensor at half precision between nodes
(rounded in place, as the NPU stores them) while kernels compute in float32;
``float32`` keeps full precision (an exact reference mode of this project).  In an
int8 model (``Graph.quant`` set), each quantized tensor is stored on its int8 grid
(``(clip(round(x / scale) + zp) - zp) * scale``; weights per tensor or per channel),
so every kernel sees exactly the values an int8 tensor holds; accumulation inside
kernels is float32, and tensors without quantization follow ``float_dtype``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..._native.executor_kernels import fake_quant_inplace, is_fp16_exact, round_fp16_inplace
from ...errors import InputInvalidError, InvalidParamError, ModelInvalidError, RKNNError
from ...model.graph import Graph, Node
from .ops import KERNELS, SHAPE_INPUTS, KernelSpec, supported_ops
from .parallel import WorkerPool, threads_from_env, using

__all__ = ["Executor", "ExecutionState", "CustomOpKernel"]

FLOAT_DTYPES = ("float16", "float32")

#: Ops whose float outputs only select, move or negate input values: given inputs already
#: at storage precision their outputs are too, so the float16 rounding pass is skipped.
VALUE_PRESERVING = frozenset(
    "Relu MaxPool GlobalMaxPool Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice Gather "
    "GatherElements Identity Dropout Neg Abs Max Min Tile Expand DepthToSpace SpaceToDepth".split()
)


class CustomOpKernel:
    """Adapts a Python custom operator (``op_type``, ``compute(self, node, inputs)``,
    as RKNN-Toolkit2 defines them) to the kernel calling convention."""

    def __init__(self, op):
        if not isinstance(getattr(op, "op_type", None), str) or not callable(getattr(op, "compute", None)):
            raise InvalidParamError(
                f"a custom operator needs a string 'op_type' and a 'compute(self, node, inputs)' method; "
                f"got {type(op).__name__}",
                op="rknn_register_custom_ops",
            )
        self.op = op

    def spec(self, node: Node) -> KernelSpec:
        op = self.op

        def run(inputs, attrs, out=None):
            results = op.compute(node, list(inputs))
            return [np.asarray(r) for r in results]

        return KernelSpec(op.op_type, run, out=False, prepare=None, data_dependent=True)


class _Step:
    __slots__ = ("node", "spec", "attrs", "ins", "outs", "index", "data_dependent", "exact")

    def __init__(self, index: int, node: Node, spec: KernelSpec, attrs: dict, ins: List[int], outs: List[int],
                 data_dependent: bool):
        self.index = index
        #: float outputs are already at storage precision (see VALUE_PRESERVING)
        self.exact = node.op in VALUE_PRESERVING
        self.node = node
        self.spec = spec
        self.attrs = attrs
        self.ins = ins
        self.outs = outs
        #: output shape may change with input values, not only input shapes
        self.data_dependent = data_dependent


class Executor:
    """A graph compiled to kernel calls.  Thread-safe: per-run state lives in an
    :class:`ExecutionState`, one per context.

    Args:
        graph: the model graph (topologically ordered).
        float_dtype: ``"float16"`` or ``"float32"`` storage precision.
        custom_ops: Python custom operators (objects with ``op_type`` and
            ``compute(self, node, inputs)``); they run nodes of their op type.
    """

    def __init__(self, graph: Graph, float_dtype: str = "float16", custom_ops: Sequence[Any] = ()):
        if float_dtype not in FLOAT_DTYPES:
            raise InvalidParamError(f"float_dtype must be 'float16' or 'float32', not {float_dtype!r}")
        self.graph = graph
        self.float_dtype = float_dtype
        self._round = float_dtype == "float16"
        custom = {k.op.op_type: k for k in map(CustomOpKernel, custom_ops)}
        self._check_ops(custom)

        names: Dict[str, int] = {}
        for name in list(graph.inputs) + list(graph.constants):
            names.setdefault(name, len(names))
        for node in graph.nodes:
            for name in node.outputs:
                if name:
                    names.setdefault(name, len(names))
        self.n_tensors = len(names)
        self.input_slots = [names[n] for n in graph.inputs]
        self.output_slots = [names[n] for n in graph.outputs]
        self._names = names
        qmax = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
        #: per-tensor quantized activations: slot -> (scale, zero point, qmin, qmax)
        self.quant_slots: Dict[int, Tuple[float, int, int, int]] = {
            names[k]: (q.scale[0], q.zero_point[0]) + qmax[q.dtype]
            for k, q in graph.quant.items() if k in names and k not in graph.constants and len(q.scale) == 1
        }
        self.constants: List[Tuple[int, np.ndarray]] = [
            (names[k], self._store_constant(np.asarray(v), graph.quant.get(k), qmax)) for k, v in graph.constants.items()
        ]
        const_values = dict(self.constants)
        self.constant_slots = frozenset(const_values)
        self.steps: List[_Step] = []
        for i, node in enumerate(graph.nodes):
            spec = custom[node.op].spec(node) if node.op in custom else KERNELS[node.op]
            ins = [names[n] if n else -1 for n in node.inputs]
            attrs = dict(node.attrs)
            attrs.setdefault("_num_outputs", len(node.outputs))
            if spec.prepare is not None:
                try:
                    attrs = spec.prepare(attrs, [const_values.get(s) for s in ins])
                except RKNNError as e:
                    raise ModelInvalidError(f"node {node.name!r} ({node.op}): {e.message}", op="rknn_init") from None
            shape_args = [ins[k] for k in SHAPE_INPUTS.get(node.op, ()) if k < len(ins) and ins[k] >= 0]
            data_dependent = spec.data_dependent or any(a not in const_values for a in shape_args)
            self.steps.append(_Step(i, node, spec, attrs, ins, [names[n] if n else -1 for n in node.outputs],
                                    data_dependent))
        # Slots no later step reads: dropped right after their last reader (or producer) runs,
        # so an unplanned run holds only live tensors.
        last = {}
        for step in self.steps:
            for slot in step.ins + step.outs:
                if slot >= 0:
                    last[slot] = step.index
        keep = set(self.output_slots) | {slot for slot, _ in self.constants}
        self.release_after: List[List[int]] = [[] for _ in self.steps]
        for slot, index in last.items():
            if slot not in keep:
                self.release_after[index].append(slot)

    def _check_ops(self, custom: Mapping[str, CustomOpKernel]) -> None:
        missing = sorted({n.op for n in self.graph.nodes if n.op not in KERNELS and n.op not in custom})
        if missing:
            first = next(n for n in self.graph.nodes if n.op in missing)
            raise ModelInvalidError(
                f"unsupported op {first.op!r} (node {first.name!r}); not available here: {', '.join(missing)} "
                f"(a custom operator must be registered for these); the software backend supports: "
                f"{', '.join(supported_ops())}",
                op="rknn_init",
            )

    def _store_constant(self, a: np.ndarray, quant=None, limits=None) -> np.ndarray:
        if a.dtype.kind != "f":
            return a
        if quant is not None:
            return _fake_quant_constant(a, quant, limits[quant.dtype])
        if self._round:
            if a.dtype == np.float32 and a.flags.c_contiguous and is_fp16_exact(a.reshape(-1)):
                return a  # rounded at build: used in place (e.g. straight from the mapped file)
            a = np.array(a, dtype=np.float32)
            round_fp16_inplace(a.reshape(-1))
            a.flags.writeable = False
            return a
        return a if a.dtype == np.float32 else np.asarray(a, dtype=np.float32)

    def new_state(self, threads: Optional[int] = None,
                  release: Optional[Callable[[np.ndarray], None]] = None) -> "ExecutionState":
        """Per-context run state (planned buffers, worker threads); contexts on one model
        share the Executor.  ``threads`` defaults to ``RKNNLITE_NUM_THREADS`` or 1;
        ``release(array)`` may drop a constant's file pages once a kernel has cached it."""
        return ExecutionState(self, threads, release)

    def run(self, feeds: Sequence[np.ndarray], state: Optional["ExecutionState"] = None) -> List[np.ndarray]:
        """Execute once; ``feeds`` in graph-input order.  Returns new arrays the caller owns."""
        return (state or ExecutionState(self)).run(feeds)

    def slot_name(self, slot: int) -> str:
        """The tensor name of a slot (for messages)."""
        for name, s in self._names.items():
            if s == slot:
                return name
        return f"#{slot}"


class _Plan:
    """Preallocated outputs for one input-shape signature: ``outs[step] = [array | None, ...]``."""

    __slots__ = ("outs", "nbytes")

    def __init__(self, outs: List[Optional[List[Optional[np.ndarray]]]], nbytes: int):
        self.outs = outs
        self.nbytes = nbytes


class ExecutionState:
    """The buffers of one context: a plan per input-shape signature.  Not thread-safe
    by itself: the owning context serialises runs."""

    MAX_PLANS = 8

    def __init__(self, executor: Executor, threads: Optional[int] = None,
                 release: Optional[Callable[[np.ndarray], None]] = None):
        self.executor = executor
        #: called with a constant whose consumer keeps its own packed copy (see caches_inputs)
        self._release = release
        self._released: set = set()
        self.pool = WorkerPool(threads if threads is not None else threads_from_env())
        self._plans: Dict[tuple, _Plan] = {}
        self._env: List[Optional[np.ndarray]] = [None] * executor.n_tensors
        self._staging: Dict[int, np.ndarray] = {}
        #: Largest total size of the tensors alive at once (bytes), seen in unplanned runs.
        self.peak_live_bytes = 0

    def set_threads(self, threads: int) -> None:
        """Use ``threads`` worker threads (caller included) per run from now on."""
        if threads != self.pool.threads:
            self.pool.close()
            self.pool = WorkerPool(threads)

    def close(self) -> None:
        """Stop the worker threads and drop the buffers."""
        self.pool.close()
        self._plans.clear()
        self._staging.clear()

    @property
    def planned_bytes(self) -> int:
        """Bytes held by the planned buffers of every signature seen so far."""
        return sum(p.nbytes for p in self._plans.values())

    def run(self, feeds: Sequence[np.ndarray]) -> List[np.ndarray]:
        ex = self.executor
        if len(feeds) != len(ex.input_slots):
            raise InputInvalidError(f"the graph has {len(ex.input_slots)} inputs, got {len(feeds)}", op="rknn_run")
        signature = tuple((x.shape, x.dtype.char) for x in feeds)
        plan = self._plans.get(signature)
        env = self._env
        layout: Optional[List[Optional[Tuple[tuple, np.dtype]]]] = None if plan is not None else [None] * len(env)
        for slot, value in ex.constants:
            env[slot] = value
        for i, (slot, x) in enumerate(zip(ex.input_slots, feeds)):
            env[slot] = self._stage(i, x)
            if layout is not None:
                layout[slot] = (x.shape, env[slot].dtype)
        try:
            with using(self.pool):
                self._execute(env, plan, layout)
            results = [np.array(env[s]) for s in ex.output_slots]
            if layout is not None:
                self._remember(signature, layout)
        finally:
            for i in range(len(env)):
                env[i] = None
        return results

    def _stage(self, index: int, x: np.ndarray) -> np.ndarray:
        """A float input in storage precision (float16 rounding or its int8 grid), converted
        in a reused buffer; no copy when it already is float32 and needs neither."""
        ex = self.executor
        q = ex.quant_slots.get(ex.input_slots[index])
        if x.dtype.kind != "f" or (x.dtype == np.float32 and not ex._round and q is None):
            return x
        buf = self._staging.get(index)
        if buf is None or buf.shape != x.shape:
            buf = self._staging[index] = np.empty(x.shape, np.float32)
        np.copyto(buf, x, casting="unsafe")
        if q is not None:
            fake_quant_inplace(buf.reshape(-1), *q)
        elif ex._round:
            round_fp16_inplace(buf.reshape(-1))
        return buf

    def _execute(self, env: List[Optional[np.ndarray]], plan: Optional[_Plan], layout) -> None:
        rounding = self.executor._round
        quant = self.executor.quant_slots
        skip_exact = not quant  # int8 grid values reaching a float tensor still need rounding
        release_after = self.executor.release_after
        for step in self.executor.steps:
            args = [env[s] if s >= 0 else None for s in step.ins]
            out = plan.outs[step.index] if plan is not None else None
            spec = step.spec
            try:
                if out is not None:
                    results = spec.fn(args, step.attrs, out)
                else:
                    results = spec.fn(args, step.attrs)
            except RKNNError:
                raise
            except Exception as e:  # a kernel's numpy error: name the node, keep the cause
                raise InputInvalidError(
                    f"node {step.node.name!r} ({step.node.op}) failed on inputs "
                    f"{[None if a is None else list(a.shape) for a in args]}: {e}",
                    op="rknn_run",
                ) from e
            if len(results) < len(step.outs) and any(s >= 0 for s in step.outs[len(results):]):
                raise ModelInvalidError(
                    f"node {step.node.name!r} ({step.node.op}) declares {len(step.outs)} outputs, "
                    f"the kernel gave {len(results)}",
                    op="rknn_run",
                )
            for slot, value in zip(step.outs, results):
                if slot < 0:
                    continue
                if value.dtype.kind == "f":
                    q = quant.get(slot)
                    if q is not None:
                        value = _own_float32(value, args, out is not None)
                        fake_quant_inplace(value.reshape(-1), *q)
                    elif rounding and not (step.exact and skip_exact and value.dtype == np.float32):
                        value = _own_float32(value, args, out is not None)
                        round_fp16_inplace(value.reshape(-1))
                env[slot] = value
                if layout is not None:
                    layout[slot] = (value.shape, value.dtype)
            del args, results
            if self._release is not None and step.spec.caches_inputs:
                self._release_cached(step, env)
            if layout is not None:
                self._note_live(env)
            for slot in release_after[step.index]:
                env[slot] = None

    def _release_cached(self, step: _Step, env: List[Optional[np.ndarray]]) -> None:
        for k in step.spec.caches_inputs:
            slot = step.ins[k] if k < len(step.ins) else -1
            if slot in self.executor.constant_slots and slot not in self._released:
                self._released.add(slot)
                self._release(env[slot])

    def _note_live(self, env: List[Optional[np.ndarray]]) -> None:
        constants = self.executor.constant_slots
        live = sum(v.nbytes for i, v in enumerate(env) if v is not None and i not in constants)
        self.peak_live_bytes = max(self.peak_live_bytes, live)

    def _remember(self, signature: tuple, layout: List[Optional[Tuple[tuple, np.dtype]]]) -> None:
        if len(self._plans) >= self.MAX_PLANS:
            self._plans.pop(next(iter(self._plans)))
        self._plans[signature] = _make_plan(self.executor, layout)


def _own_float32(value: np.ndarray, args: List[Optional[np.ndarray]], own_buffer: bool) -> np.ndarray:
    """``value`` as a float32 C-contiguous array that may be changed in place: the kernel's
    own buffer when it is one, else a copy (a view of an input must not be touched)."""
    if value.dtype != np.float32:
        return np.array(value, dtype=np.float32)
    if not own_buffer:
        own_buffer = value.flags.writeable and not any(a is not None and np.may_share_memory(value, a) for a in args)
    if not own_buffer or not value.flags.c_contiguous:
        return np.array(value, dtype=np.float32)
    return value


def _fake_quant_constant(a: np.ndarray, q, limits: Tuple[int, int]) -> np.ndarray:
    """A float constant snapped onto its quantization grid (per tensor or per channel)."""
    a = np.array(a, dtype=np.float32)
    if len(q.scale) == 1:
        fake_quant_inplace(a.reshape(-1), q.scale[0], q.zero_point[0], *limits)
    else:
        axis = q.axis if q.axis is not None else 0
        if a.shape[axis] != len(q.scale):
            raise ModelInvalidError(
                f"per-channel quantization has {len(q.scale)} scales for {a.shape[axis]} channels on axis {axis}",
                op="rknn_init",
            )
        moved = np.moveaxis(a, axis, 0)
        for c, (scale, zp) in enumerate(zip(q.scale, q.zero_point)):
            channel = np.ascontiguousarray(moved[c])
            fake_quant_inplace(channel.reshape(-1), scale, zp, *limits)
            moved[c] = channel
    a.flags.writeable = False
    return a


def _make_plan(ex: Executor, layout: List[Optional[Tuple[tuple, np.dtype]]]) -> _Plan:
    """Assign buffers to the planned tensors of one run, reusing them by liveness.

    A step is planned when its kernel writes into given outputs, its output shapes are
    known and cannot change with the data.  An unplanned step's outputs may be views of
    its inputs, so they keep every buffer their inputs rely on alive while read.
    """
    steps = ex.steps
    dynamic = [False] * ex.n_tensors
    planned = [False] * len(steps)
    # deps[s]: the planned tensors whose buffers tensor s may live in (itself, or through views)
    deps: List[Tuple[int, ...]] = [()] * ex.n_tensors
    last_use: Dict[int, int] = {}
    for step in steps:
        tainted = step.data_dependent or any(s >= 0 and dynamic[s] for s in step.ins)
        planned[step.index] = (step.spec.out and not tainted
                               and all(s < 0 or layout[s] is not None for s in step.outs))
        for s in step.ins:
            for r in deps[s] if s >= 0 else ():
                last_use[r] = step.index
        inherited = tuple({r for s in step.ins if s >= 0 for r in deps[s]})
        for s in step.outs:
            if s >= 0:
                dynamic[s] = tainted
                deps[s] = (s,) if planned[step.index] else inherited
    for s in ex.output_slots:
        for r in deps[s]:
            last_use[r] = len(steps)

    outs: List[Optional[List[Optional[np.ndarray]]]] = [None] * len(steps)
    free: List[np.ndarray] = []  # byte buffers not in use
    busy: Dict[int, np.ndarray] = {}  # planned slot -> its byte buffer
    total = 0
    for step in steps:
        if planned[step.index]:
            arrays: List[Optional[np.ndarray]] = []
            for s in step.outs:
                if s < 0:
                    arrays.append(None)
                    continue
                shape, dtype = layout[s]
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                buf = _take(free, max(nbytes, 1))
                if buf is None:
                    buf = np.empty(max(nbytes, 1), np.uint8)
                    total += buf.nbytes
                busy[s] = buf
                arrays.append(buf[:nbytes].view(dtype).reshape(shape))
            outs[step.index] = arrays
        for r in [r for r in busy if last_use.get(r, step.index) <= step.index]:
            free.append(busy.pop(r))
    return _Plan(outs, total)


def _take(free: List[np.ndarray], nbytes: int) -> Optional[np.ndarray]:
    best = None
    for i, buf in enumerate(free):
        if buf.nbytes >= nbytes and (best is None or buf.nbytes < free[best].nbytes):
            best = i
    return free.pop(best) if best is not None else None
