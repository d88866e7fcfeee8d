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
unplanned and are allocated per run.  Two kinds of step copy nothing in a plan: a view
step (``KernelSpec.view``: Reshape and its kin) reads its input's buffer through a view,
and the producers of a Concat's inputs (``KernelSpec.joins``) write into its output's
slices, wherever no snapping or rounding pass could change a value another step reads.

Compiled runs: when every step of a signature is planned, the plan is also compiled into
a :class:`_Program`, a flat list of direct calls (each input staged into its own buffer in
one pass, each bindable kernel -- element-wise ops, one-image Convs -- bound to its
buffers, see ``fn.bind`` in ``ops/elementwise.py``, view steps and joined Concats left
out, rounding passes on the planned buffers) run under one floating-point error state
and without per-step bookkeeping.  A run whose inputs have exactly that signature's
shapes and dtypes takes it; it computes the same values as the step loop.  With several
threads, the independent branches of a block (an Inception block's four, a fire module's
two) may run side by side, one thread each (``branches``): such a plan keeps every tensor
of a block in a buffer of its own until the block ends, and the program's first runs
measure, per block, whether that beats splitting each call across the threads.

Outputs: ``run`` returns new arrays (copies of the output buffers), or, given
``out=[array, ...]``, writes each output into the caller's array with ``np.copyto``
(no other copy) and returns those arrays.

Profiling (``ExecutionState.profiling``, the context's ``COLLECT_PERF_MASK``): each run
records an :class:`OpSample` per input transfer, step and output copy in
``last_profile``; when off, the run loop makes no timing calls.

Numeric modes: ``float16`` stores every float tensor at half precision between nodes
(rounded in place, as the NPU stores them) while kernels compute in float32;
``float32`` keeps full precision (an exact reference mode of this project).  In an
int8 model (``Graph.quant`` set), each quantized tensor is stored on its int8 grid
(``(clip(round(x / scale) + zp) - zp) * scale``; weights per tensor or per channel),
so every kernel sees exactly the values an int8 tensor holds, and tensors without
quantization follow ``float_dtype``.  int8 convs and dense layers sum their integer codes
exactly, as the NPU does (:mod:`.integer_convs`, applied when the graph is compiled); other
kernels compute in float32.  Pointwise convs reading one tensor run as one wider conv whose
output channels the original outputs view (:mod:`.sibling_convs`; every value as before).  Tensors a
graph names in ``keep_float`` (a vendor graph's float32 biases and the intermediates of fused
activations), every graph's 4-D inputs and every conv and dense bias stay float32 in float16
mode, as the vendor simulator keeps them: a float16 conv reading such an input computes from
the float32 values, any other op on one rounds its own output; an input of another rank is
rounded when staged, as the simulator's layout conversion rounds it (``Executor.staging``,
``tests/test_float16_inputs.py``).  A conv's fused residual is added after its output is
rounded; SiLU's sigmoid, a dense layer's product and an attention's scores and probabilities
are not rounded (:mod:`.float16_rules`).  A
step whose outputs are all on integer grids is told so (``attrs["_int_output"]``) for kernels
whose int8 arithmetic in the simulator is not their float one (an AveragePool's summation
order).
"""

from __future__ import annotations

from functools import partial
from time import perf_counter_ns
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..._native.executor_kernels import copy_fake_quant, fake_quant_inplace, is_fp16_exact, round_fp16_inplace
from ...errors import InputInvalidError, InvalidParamError, ModelInvalidError, RKNNError
from ...model.graph import Graph, Node
from ..base import check_out
from .ops import KERNELS, SHAPE_INPUTS, KernelSpec, supported_ops
from .ops.arity import FLOAT_INPUT_OPS, check_inputs
from .integer_convs import integer_convs
from .float16_rules import HALF_INPUT_OPS, attention_intermediates, split_residuals, swish_gates
from .sibling_convs import merge_sibling_convs
from .branches import CallFailed, Probe, Region, conflicts, find_regions, run_program
from .ops.elementwise import restore_fp, silence_fp
from .parallel import WorkerPool, WorkRecorder, branches_from_env, current_threads, threads_from_env, using

__all__ = ["Executor", "ExecutionState", "CustomOpKernel", "OpSample"]

FLOAT_DTYPES = ("float16", "float32")

#: Ops whose float outputs only select, move or negate input values: given inputs already
#: at storage precision their outputs are too, so the float16 rounding pass is skipped.
VALUE_PRESERVING = frozenset(
    "Relu MaxPool GlobalMaxPool Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice Gather "
    "GatherElements Identity Dropout Neg Abs Max Min Tile Expand DepthToSpace SpaceToDepth ChannelSlice".split()
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


#: :meth:`Executor.staging`'s value for a feed rounded to float16
HALF_STAGING = "float16"


class _Step:
    __slots__ = ("node", "spec", "attrs", "ins", "outs", "index", "data_dependent", "exact", "on_grid")

    def __init__(self, index: int, node: Node, spec: KernelSpec, attrs: dict, ins: List[int], outs: List[int],
                 data_dependent: bool):
        self.index = index
        #: float outputs are already at storage precision (see VALUE_PRESERVING)
        self.exact = node.op in VALUE_PRESERVING
        #: the kernel writes its output on that slot's int8 grid already (KernelSpec.grid)
        self.on_grid = False
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
        defer_missing: compile nodes of op types with no kernel and no custom operator
            anyway; running one raises :class:`ModelInvalidError` naming it, unless the
            state runs it with an override (:meth:`ExecutionState.use_kernels`).  Without
            it such a model fails here.
        expose: tensors a run returns after the graph's outputs, computed as when they are not
            returned (``graph.outputs`` extended instead would end the float16 rules' fused chains
            there: a dense layer's product or an attention's scores rounded; what
            ``accuracy_analysis`` must not change).
    """

    def __init__(self, graph: Graph, float_dtype: str = "float16", custom_ops: Sequence[Any] = (),
                 defer_missing: bool = False, expose: Sequence[str] = ()):
        if float_dtype not in FLOAT_DTYPES:
            raise InvalidParamError(f"float_dtype must be 'float16' or 'float32', not {float_dtype!r}")
        #: float16 mode rounds inputs of other ranks than 4 when staged (``Graph.layout_rounds_inputs``)
        self._half_feeds = float_dtype == "float16" and graph.layout_rounds_inputs
        if float_dtype == "float16":
            graph = split_residuals(graph)
        graph, exact_sums = merge_sibling_convs(*integer_convs(graph, expose))
        attention = attention_intermediates(graph) if float_dtype == "float16" else set()
        if float_dtype == "float16":
            exact_sums = exact_sums | swish_gates(graph) | set(graph.dense_layers()) | attention
        self.graph = graph
        self.float_dtype = float_dtype
        self._round = float_dtype == "float16"
        custom = {k.op.op_type: k for k in map(CustomOpKernel, custom_ops)}
        if not defer_missing:
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
        missing = [n for n in expose if n not in names]
        if missing:
            raise InvalidParamError(f"expose: {missing[:5]} are not tensors of the graph")
        #: what a run returns: the graph's outputs, then ``expose``
        self.output_names = list(graph.outputs) + list(expose)
        self.output_slots = [names[n] for n in self.output_names]
        self._names = names
        #: tensors stored at float32 even in float16 mode, which the vendor simulator does not
        #: round: the graph's inputs (normalised in float32; its float16 conv on an input
        #: computes from the float32 values), conv and dense biases and ChannelAffine parameters
        #: (``Graph.float32_constants``), SiLU's
        #: sigmoid (``float16_rules.swish_gates``), a dense layer's product
        #: (``Graph.dense_layers``), an attention's scores and probabilities
        #: (``attention_intermediates``) and ``graph.keep_float`` (a vendor graph's
        #: fused-activation intermediates)
        self.float_slots = frozenset(names[n] for n in exact_sums.union(getattr(graph, "keep_float", ()),
                                                                        graph.inputs, graph.float32_constants()) if n in names)
        #: tensors rounded to float16 in every mode (``graph.round_fp16``: the float16 tensors
        #: of a vendor int8 graph, e.g. after ``exDataConvert``)
        self.fp16_slots = frozenset(names[n] for n in getattr(graph, "round_fp16", ()) if n in names)
        qmax = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
        #: per-tensor quantized activations: slot -> (scale, zero point, qmin, qmax)
        self.quant_slots: Dict[int, Tuple[float, int, int, int]] = {
            names[k]: (q.scale[0], q.zero_point[0]) + qmax[q.dtype]
            for k, q in graph.quant.items() if k in names and k not in graph.constants and len(q.scale) == 1
        }
        self.constants: List[Tuple[int, np.ndarray]] = [
            (names[k], self._store_constant(np.asarray(v), graph.quant.get(k), qmax, names[k] in self.float_slots))
            for k, v in graph.constants.items()
        ]
        const_values = dict(self.constants)
        self.constant_slots = frozenset(const_values)
        self.steps: List[_Step] = []
        unrounded = set(self.float_slots)  # float32 tensors in float16 mode, and identities of them
        for i, node in enumerate(graph.nodes):
            if node.op not in custom:
                check_inputs(node.name, node.op, node.inputs, node.attrs.get("_opset"), "rknn_init")
            spec = custom[node.op].spec(node) if node.op in custom else KERNELS.get(node.op) or _unregistered(node)
            ins = [names[n] if n else -1 for n in node.inputs]
            attrs = dict(node.attrs)
            attrs.setdefault("_num_outputs", len(node.outputs))
            outs = [names[n] for n in node.outputs if n]
            if outs and all(slot in self.quant_slots for slot in outs):
                # for kernels whose integer arithmetic on the NPU is not their float one's
                # (the summation order of an int8 AveragePool)
                attrs["_int_output"] = True
            if self._round and node.op in HALF_INPUT_OPS and ins and ins[0] in unrounded \
                    and ins[0] not in self.quant_slots and node.inputs[0] not in attention:
                # the simulator's exNorm / exMatMul read float16 even from float32 (not an int8 input's values)
                attrs["_half_input"] = True
            if spec.prepare is not None:
                try:
                    attrs = spec.prepare(attrs, [const_values.get(s) for s in ins])
                except RKNNError as e:
                    raise ModelInvalidError(f"node {node.name!r} ({node.op}): {e.message}", op="rknn_init") from None
            shape_args = [ins[k] for k in SHAPE_INPUTS.get(node.op, ()) if k < len(ins) and ins[k] >= 0]
            data_dependent = spec.data_dependent or any(a not in const_values for a in shape_args)
            self.steps.append(_Step(i, node, spec, attrs, ins, [names[n] if n else -1 for n in node.outputs],
                                    data_dependent))
            if spec.grid is not None and len(self.steps[-1].outs) == 1:
                self.steps[-1].on_grid = _within(spec.grid(attrs), self.quant_slots.get(self.steps[-1].outs[0]))
            if any(slot in unrounded for slot in ins):
                # a value-preserving op would pass a float32 tensor (a vendor graph's input) through
                # unrounded, where the vendor simulator rounds its output (a Reshape or Relu opening
                # the graph); the compiler's identity convs pass it on unrounded (the next op computes
                # from float32 values)
                if node.op == "Identity":
                    unrounded.update(self.steps[-1].outs)
                else:
                    self.steps[-1].exact = False
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
        #: independent branches a run with several threads may run side by side (``branches``)
        self.regions: List[Region] = find_regions(self.steps, self.input_slots)

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

    def staging(self, slot: int, x: np.ndarray):
        """How the feed ``x`` of input ``slot`` is staged: its int8 grid ``(scale, zero point,
        qmin, qmax)``, :data:`HALF_STAGING`, or None (as given).  float16 mode rounds a float
        feed of any rank but 4 to float16: the vendor's simulator converts such an input's
        layout first, and every op reads the float16 copy (a 2-, 3- or 5-D input added to an
        activation: every value equal to the simulator's that way, 66-69 % unrounded); a 4-D
        input stays float32 (a conv and an Add read it so, ``tests/test_float16_inputs.py``), and so
        does any input of a graph whose nodes convert layouts themselves (a vendor file's)."""
        q = self.quant_slots.get(slot)
        if q is None and self._half_feeds and x.ndim != 4 and x.dtype.kind == "f":
            return HALF_STAGING
        return q

    def _store_constant(self, a: np.ndarray, quant=None, limits=None, keep_float: bool = False) -> np.ndarray:
        if a.dtype.kind != "f":
            return a
        if quant is not None:
            return _fake_quant_constant(a, quant, limits[quant.dtype])
        if self._round and not keep_float:
            if a.dtype == np.float32 and a.flags.c_contiguous and is_fp16_exact(a.reshape(-1)):
                return a  # rounded at build: used in place (e.g. straight from the mapped file)
            a = np.array(a, dtype=np.float32)
            round_fp16_inplace(a)
            a.flags.writeable = False
            return a
        return a if a.dtype == np.float32 else np.asarray(a, dtype=np.float32)

    def new_state(self, threads: Optional[int] = None,
                  release: Optional[Callable[[np.ndarray], None]] = None) -> "ExecutionState":
        """Per-context run state (planned buffers, worker threads); contexts on one model
        share the Executor.  ``threads`` defaults to ``RKNNLITE_NUM_THREADS`` or 1;
        ``release(array)`` may drop a constant's file pages once a kernel has cached it."""
        return ExecutionState(self, threads, release)

    def run(self, feeds: Sequence[np.ndarray], state: Optional["ExecutionState"] = None,
            out: Optional[Sequence[Optional[np.ndarray]]] = None) -> List[np.ndarray]:
        """Execute once; ``feeds`` in graph-input order.  Returns new arrays the caller owns,
        or writes into ``out`` (see :meth:`ExecutionState.run`)."""
        return (state or ExecutionState(self)).run(feeds, out)

    def slot_name(self, slot: int) -> str:
        """The tensor name of a slot (for messages)."""
        for name, s in self._names.items():
            if s == slot:
                return name
        return f"#{slot}"


class OpSample(NamedTuple):
    """What a profiled run measured for one step (or one input/output transfer).

    ``work`` holds the work items each thread slot ran (see
    :class:`~.parallel.WorkRecorder`); ``None`` for input/output transfers.
    """

    op_type: str
    name: str
    data_type: str
    input_shapes: Tuple[Tuple[int, ...], ...]
    output_shapes: Tuple[Tuple[int, ...], ...]
    ns: int
    rw_bytes: int
    work: Optional[List[int]]


_TYPE_NAMES = {"i1": "INT8", "u1": "UINT8", "i2": "INT16", "u2": "UINT16", "i4": "INT32",
               "u4": "UINT32", "i8": "INT64", "b1": "BOOL"}


class _Plan:
    """Preallocated outputs for one input-shape signature: ``outs[step] = [array | None, ...]``
    (``None`` for an unplanned step and for a view step), the steps whose output is a view
    of their input's buffer (``views``, ``KernelSpec.view``), the Concat steps whose inputs
    were all written into their output by their producers (``joins``: nothing left to
    copy), and the compiled run when every step is planned or a view."""

    __slots__ = ("outs", "views", "joins", "nbytes", "program")

    def __init__(self, outs: List[Optional[List[Optional[np.ndarray]]]], views: frozenset, joins: frozenset,
                 nbytes: int):
        self.outs = outs
        self.views = views
        self.joins = joins
        self.nbytes = nbytes
        self.program: Optional[_Program] = None

    @property
    def complete(self) -> bool:
        """Whether every step has its buffers or is a view step (the signature compiles)."""
        return all(outs is not None or i in self.views for i, outs in enumerate(self.outs))


class _Program:
    """A fully planned signature as direct calls (see "Compiled runs" in the module doc).

    ``env`` holds every tensor of the signature: constants, planned buffers and input
    staging buffers, permanently; only the inputs fed as they are and the views of them
    (``fed``) change per run and are cleared after it.  ``inputs[i]`` is ``(slot, staging
    buffer or None, staging rule: ``Executor.staging``)``; ``calls`` are zero-argument callables run in order,
    ``owners[k]`` the step of ``calls[k]`` (for error messages).
    """

    __slots__ = ("signature", "env", "inputs", "fed", "calls", "owners", "staging_bytes", "outputs", "regions",
                 "probe", "forks")

    def __init__(self, signature, env, inputs, calls, owners, output_slots, transient):
        #: ``[(shape, dtype), ...]`` the feeds must have exactly
        self.signature = signature
        #: ``[(shape, dtype), ...]`` of the graph outputs
        self.outputs = [(env[s].shape, env[s].dtype) if env[s] is not None else (None, None) for s in output_slots]
        self.env = env
        self.inputs = inputs
        #: the slots cleared after a run: inputs fed as they are, and views taken of them
        self.fed = [slot for slot in transient if env[slot] is None]
        self.calls = calls
        self.owners = owners
        self.staging_bytes = sum(buf.nbytes for _, buf, _ in inputs if buf is not None)
        #: with several threads: ``(start, stop, call indices per branch)`` per region
        #: that may run forked (``_call_regions``), its timings and the forks chosen
        #: (None until the probing runs are done)
        self.regions: List[Tuple[int, int, List[List[int]]]] = []
        self.probe: Optional[Probe] = None
        self.forks: Optional[list] = None


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
        #: whether several threads may run independent branches side by side (RKNNLITE_BRANCHES)
        self.branches = branches_from_env()
        self._plans: Dict[tuple, _Plan] = {}
        self._env: List[Optional[np.ndarray]] = [None] * executor.n_tensors
        self._staging: Dict[int, np.ndarray] = {}
        #: Largest total size of the tensors alive at once (bytes), seen in unplanned runs.
        self.peak_live_bytes = 0
        #: When True, each run times every step (``last_profile``); off, the run loop makes
        #: no timing calls at all.
        self.profiling = False
        #: The :class:`OpSample` rows of the last profiled run: inputs, steps, outputs.
        self.last_profile: Optional[List[OpSample]] = None
        #: step index -> kernel run instead of the compiled one (see use_kernels)
        self.overrides: Dict[int, KernelSpec] = {}
        #: the program of the signature run last (checked first)
        self._last: Optional[_Program] = None
        #: internal memory the planned buffers are carved from (``use_arena``), else None
        self.arena: Optional[np.ndarray] = None

    def use_arena(self, arena: Optional[np.ndarray]) -> None:
        """Carve the planned buffers from ``arena`` (a writable uint8 array, the context's
        internal memory) from the next run on; ``None``: own allocations.  Forgets the plans."""
        self.arena = arena
        self._plans.clear()
        self._last = None

    def use_kernels(self, overrides: Dict[int, KernelSpec]) -> None:
        """Run step ``i`` with ``overrides[i]`` instead of its compiled kernel (custom
        operators registered on one context).  The dict is used live, not copied; call this
        again after changing it, since it forgets the plans made so far."""
        self.overrides = overrides
        self._plans.clear()
        self._last = None

    def set_threads(self, threads: int) -> None:
        """Use ``threads`` worker threads (caller included) per run from now on (forgets the
        plans: one thread reuses buffers across branches, several keep them apart)."""
        if threads != self.pool.threads:
            self.pool.close()
            self.pool = WorkerPool(threads)
            self._plans.clear()
            self._last = None

    def close(self) -> None:
        """Stop the worker threads and drop the buffers."""
        self.pool.close()
        self._plans.clear()
        self._staging.clear()
        self._last = None

    @property
    def planned_bytes(self) -> int:
        """Bytes held by the planned buffers of every signature seen so far."""
        return sum(p.nbytes for p in self._plans.values())

    @property
    def staging_bytes(self) -> int:
        """Bytes of the reused input conversion buffers."""
        programs = sum(p.program.staging_bytes for p in self._plans.values() if p.program is not None)
        return programs + sum(b.nbytes for b in self._staging.values())

    def run(self, feeds: Sequence[np.ndarray],
            out: Optional[Sequence[Optional[np.ndarray]]] = None) -> List[np.ndarray]:
        """Run once; ``feeds`` in graph-input order.

        Returns one new array per graph output (copies the caller owns).  With ``out``, a
        list with one entry per output, each output is written into ``out[i]`` instead
        (``np.copyto`` with ``casting="same_kind"``: float16 destinations get the nearest
        float16) and ``out[i]`` itself is returned; a ``None`` entry gets a new array.
        Each ``out[i]`` must be a writable array of exactly that output's shape; they are
        all checked before any is written (:class:`InvalidParamError`, nothing written,
        the state stays usable).  The outputs are computed before any is written, so
        ``out`` may share memory with ``feeds``.
        """
        prog = self._last
        if prog is not None and not self.profiling and len(feeds) == len(prog.signature):
            for x, (shape, dtype) in zip(feeds, prog.signature):
                if x.shape != shape or x.dtype != dtype:
                    break
            else:
                return self._run_program(prog, feeds, out)
        ex = self.executor
        if len(feeds) != len(ex.input_slots):
            raise InputInvalidError(f"the graph has {len(ex.input_slots)} inputs, got {len(feeds)}", op="rknn_run")
        signature = tuple((x.shape, x.dtype.char) for x in feeds)
        plan = self._plans.get(signature)
        if plan is not None and plan.program is not None and not self.profiling and all(
                x.dtype == dtype for x, (_, dtype) in zip(feeds, plan.program.signature)):
            self._last = plan.program
            return self._run_program(plan.program, feeds, out)
        env = self._env
        layout: Optional[List[Optional[Tuple[tuple, np.dtype]]]] = None if plan is not None else [None] * len(env)
        for slot, value in ex.constants:
            env[slot] = value
        profile: Optional[List[OpSample]] = [] if self.profiling else None
        for i, (slot, x) in enumerate(zip(ex.input_slots, feeds)):
            t0 = perf_counter_ns() if profile is not None else 0
            env[slot] = self._stage(i, x)
            if profile is not None:
                profile.append(self._transfer("InputOperator", ex.graph.inputs[i], slot, env[slot], t0))
            if layout is not None:
                layout[slot] = (x.shape, env[slot].dtype)
        token = silence_fp()  # as in compiled runs: inf and nan are values here, not errors
        try:
            if profile is None:
                if self.pool.threads == 1 and current_threads() == 1:
                    self._execute(env, plan, layout)  # serial either way: no pool to install
                else:
                    with using(self.pool):
                        self._execute(env, plan, layout)
                results = self._deliver([env[s] for s in ex.output_slots], out)
            else:
                recorder = WorkRecorder(self.pool)
                with using(recorder):
                    self._execute(env, plan, layout, recorder, profile)
                values = [env[s] for s in ex.output_slots]
                if out is not None:
                    self._check_out(out, values)
                results = []
                for k, (name, s) in enumerate(zip(ex.output_names, ex.output_slots)):
                    t0 = perf_counter_ns()
                    results.append(self._deliver_one(env[s], None if out is None else out[k]))
                    profile.append(self._transfer("OutputOperator", name, s, env[s], t0))
                self.last_profile = profile
            if layout is not None:
                self._remember(signature, layout, feeds)
        finally:
            restore_fp(token)
            for i in range(len(env)):
                env[i] = None
        return results

    def _run_program(self, prog: "_Program", feeds: Sequence[np.ndarray],
                     out: Optional[Sequence[Optional[np.ndarray]]]) -> List[np.ndarray]:
        """A run of a compiled signature (the feeds match ``prog.signature`` exactly)."""
        env = prog.env
        try:
            for x, (slot, buf, q) in zip(feeds, prog.inputs):
                if buf is None:
                    env[slot] = x
                else:
                    _stage_into(buf, x, q)
            k = 0
            token = silence_fp()
            try:
                if self.pool.threads == 1 and current_threads() == 1:
                    for k, call in enumerate(prog.calls):
                        call()
                elif prog.regions:
                    self._run_branches(prog)
                else:
                    with using(self.pool):
                        for k, call in enumerate(prog.calls):
                            call()
            except Exception as e:  # name the node, keep the cause
                if isinstance(e, CallFailed):
                    k, e = e.index, e.error
                owner = prog.owners[k]
                error = _step_error(owner, [env[s] if s >= 0 else None for s in owner.ins], e)
                if error is e:
                    raise e from None
                raise error from e
            finally:
                restore_fp(token)
            if out is None:
                return [np.array(env[s]) for s in self.executor.output_slots]
            if type(out) is list and len(out) == len(prog.outputs):
                for o, (shape, dtype) in zip(out, prog.outputs):  # the usual out: exactly the outputs' arrays
                    if type(o) is not np.ndarray or o.shape != shape or o.dtype != dtype or not o.flags.writeable:
                        break
                else:
                    for o, s in zip(out, self.executor.output_slots):
                        o[...] = env[s]  # same dtype and shape: a plain copy (cheaper call than np.copyto)
                    return list(out)
            return self._deliver([env[s] for s in self.executor.output_slots], out)
        finally:
            for slot in prog.fed:
                env[slot] = None

    def _forks_branches(self) -> bool:
        """Whether this state's runs may fork regions (several threads, ``branches`` on)."""
        return self.pool.threads > 1 and self.branches

    def _run_branches(self, prog: "_Program") -> None:
        """The calls of a program with regions (``branches``) on several threads: its first
        runs probe (:class:`~.branches.Probe`), later ones fork the regions the probe chose
        and split the other calls across the threads as usual.  A failing call raises
        :class:`~.branches.CallFailed`."""
        if prog.forks is None:
            prog.forks = prog.probe.run(prog.calls, self.pool)
        else:
            run_program(prog.calls, prog.forks, self.pool)

    def _deliver(self, values: List[np.ndarray], out: Optional[Sequence[Optional[np.ndarray]]]) -> List[np.ndarray]:
        """The run's results: copies of ``values``, or ``values`` written into ``out``."""
        if out is None:
            return [np.array(v) for v in values]
        self._check_out(out, values)
        return [self._deliver_one(v, o) for v, o in zip(values, out)]

    def _check_out(self, out, values: List[np.ndarray]) -> None:
        check_out(out, self.executor.output_names, [(np.shape(v), v.dtype) for v in values])

    @staticmethod
    def _deliver_one(value: np.ndarray, dest: Optional[np.ndarray]) -> np.ndarray:
        if dest is None:
            return np.array(value)
        np.copyto(dest, value, casting="same_kind")
        return dest

    def _data_type(self, slot: int, value: Optional[np.ndarray]) -> str:
        """The runtime's type string of a tensor as stored (``"FP16"``, ``"INT8"``, ...)."""
        if value is None:
            return "UNKNOW"
        if slot in self.executor.quant_slots:
            return "INT8"
        if value.dtype.kind == "f":
            return "FP16" if self.executor._round else "FP32"
        return _TYPE_NAMES.get(f"{value.dtype.kind}{value.dtype.itemsize}", "UNKNOW")

    def _transfer(self, kind: str, name: str, slot: int, value: np.ndarray, t0: int) -> OpSample:
        """An input or output transfer row; like the vendor's, its traffic is the tensor's size once."""
        elapsed = perf_counter_ns() - t0
        shape = (tuple(value.shape),)
        ins, outs = ((), shape) if kind == "InputOperator" else (shape, ())
        return OpSample(kind, name, self._data_type(slot, value), ins, outs, elapsed, value.nbytes, None)

    def _sample(self, step: _Step, args: List[Optional[np.ndarray]], env: List[Optional[np.ndarray]], t0: int,
                recorder: WorkRecorder) -> OpSample:
        elapsed = perf_counter_ns() - t0
        outs = [env[s] for s in step.outs if s >= 0]
        first = next((k for k, a in enumerate(args) if a is not None), None)
        data_type = self._data_type(step.ins[first], args[first]) if first is not None else "UNKNOW"
        return OpSample(
            step.node.op, step.node.name, data_type,
            tuple(tuple(a.shape) for a in args if a is not None), tuple(tuple(o.shape) for o in outs if o is not None),
            elapsed, sum(a.nbytes for a in args if a is not None) + sum(o.nbytes for o in outs if o is not None),
            recorder.take(),
        )

    def _stage(self, index: int, x: np.ndarray) -> np.ndarray:
        """A float input as float32 (on its int8 grid when it has one; rounded to float16 as
        :meth:`Executor.staging` says), converted in a reused buffer; no copy when it already is
        float32 and nothing else applies."""
        ex = self.executor
        q = ex.staging(ex.input_slots[index], x)
        if not _staged(x, q):
            return x
        buf = self._staging.get(index)
        if buf is None or buf.shape != x.shape:
            buf = self._staging[index] = np.empty(x.shape, np.float32)
        _stage_into(buf, x, q)
        return buf

    def _execute(self, env: List[Optional[np.ndarray]], plan: Optional[_Plan], layout,
                 recorder: Optional[WorkRecorder] = None, profile: Optional[List[OpSample]] = None) -> None:
        """Run every step; with a ``recorder`` (profiled run) each step's time and traffic go to ``profile``."""
        rounding = self.executor._round
        quant = self.executor.quant_slots
        floats = self.executor.float_slots
        skip_exact = not quant  # int8 grid values reaching a float tensor still need rounding
        release_after = self.executor.release_after
        overrides = self.overrides
        for step in self.executor.steps:
            args = [env[s] if s >= 0 else None for s in step.ins]
            out = plan.outs[step.index] if plan is not None else None
            spec = overrides.get(step.index, step.spec) if overrides else step.spec
            if recorder is not None:
                t0 = perf_counter_ns()
            try:
                if out is not None:
                    results = spec.fn(args, step.attrs, out)
                else:
                    results = spec.fn(args, step.attrs)
            except Exception as e:  # name the node, keep the cause
                error = _step_error(step, args, e)
                if error is e:
                    raise
                raise error from e
            _check_count(step, results)
            for slot, value in zip(step.outs, results):
                if slot < 0:
                    continue
                if value.dtype.kind == "f":
                    q = quant.get(slot)
                    if q is not None:
                        value = _own_float32(value, args, out is not None)
                        if not step.on_grid:
                            fake_quant_inplace(value, *q)
                    elif (rounding and slot not in floats and not (step.exact and skip_exact
                                                                   and value.dtype == np.float32)) \
                            or slot in self.executor.fp16_slots:
                        value = _own_float32(value, args, out is not None)
                        round_fp16_inplace(value)
                env[slot] = value
                if layout is not None:
                    layout[slot] = (value.shape, value.dtype)
            if recorder is not None:
                profile.append(self._sample(step, args, env, t0, recorder))
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

    def _remember(self, signature: tuple, layout: List[Optional[Tuple[tuple, np.dtype]]],
                  feeds: Sequence[np.ndarray]) -> None:
        if len(self._plans) >= self.MAX_PLANS:
            evicted = self._plans.pop(next(iter(self._plans)))
            if evicted.program is not None and evicted.program is self._last:
                self._last = None
        regions = self.executor.regions if self._forks_branches() else ()
        plan = self._plans[signature] = _make_plan(self.executor, layout, self.arena, self.overrides, regions)
        if plan.complete:
            plan.program = self._compile(plan, layout, feeds)

    def _compile(self, plan: _Plan, layout: List[Optional[Tuple[tuple, np.dtype]]],
                 feeds: Sequence[np.ndarray]) -> "_Program":
        """The :class:`_Program` of a fully planned signature (after its first run, so every
        constant a kernel caches has been released already)."""
        ex = self.executor
        env: List[Optional[np.ndarray]] = [None] * ex.n_tensors
        for slot, value in ex.constants:
            env[slot] = value
        meta = list(layout)
        for slot, value in ex.constants:
            meta[slot] = (value.shape, value.dtype)
        inputs = []
        for i, (slot, x) in enumerate(zip(ex.input_slots, feeds)):
            q = ex.staging(slot, x)
            buf = None
            if _staged(x, q):
                buf = self._staging.pop(i, None)  # the first run's buffer: the program owns it now
                if buf is None or buf.shape != x.shape:
                    buf = np.empty(x.shape, np.float32)
                env[slot] = buf
            inputs.append((slot, buf, q))
        calls: List[Callable[[], Any]] = []
        owners: List[_Step] = []
        quant = ex.quant_slots
        transient = list(ex.input_slots)
        for step in ex.steps:
            out = plan.outs[step.index]
            spec = self.overrides.get(step.index, step.spec) if self.overrides else step.spec
            if step.index in plan.views:
                view = _view_call(step, spec, env)
                if view is not None:  # the input's buffer is not fixed: the view is taken per run
                    calls.append(view)
                    owners.append(step)
                    transient.append(step.outs[0])
                continue
            if step.index not in plan.joins:  # a join has nothing left to copy
                calls.append(_bound_call(step, spec, out, env, meta) or _kernel_call(step, spec, out, env))
                owners.append(step)
            for slot, o in zip(step.outs, out):
                if slot < 0:
                    continue
                env[slot] = o
                if o.dtype.kind != "f" or not _passes(ex, step, slot):
                    continue
                q = quant.get(slot)
                calls.append(partial(fake_quant_inplace, o, *q) if q is not None else partial(round_fp16_inplace, o))
                owners.append(step)
        signature = [(x.shape, x.dtype) for x in feeds]
        prog = _Program(signature, env, inputs, calls, owners, ex.output_slots, transient)
        if self._forks_branches():
            prog.regions = _call_regions(ex, owners, env, self.overrides)
            prog.probe = Probe(prog.regions, len(calls), self.pool.threads) if prog.regions else None
        return prog


def _call_regions(ex: Executor, owners: List[_Step], env: List[Optional[np.ndarray]],
                  overrides: Mapping[int, KernelSpec]) -> List[Tuple[int, int, List[List[int]]]]:
    """The executor's regions as calls of a program: ``(start, stop, [call indices per
    branch])``, calls ``[start, stop)`` being the region's.  A region is left out when fewer
    than two branches have a call, when a step of it runs another kernel than its own
    (``overrides``: a custom operator, user code not assumed safe to run beside another
    call), or when branches would share bytes one of them writes (:func:`conflicts`: a
    plan made for one thread)."""
    result = []
    for region in ex.regions:
        branch_of = {i: b for b, steps in enumerate(region.branches) for i in steps}
        members = [k for k, st in enumerate(owners) if st.index in branch_of]
        if not members or any(i in overrides for i in branch_of):
            continue
        start, stop = members[0], members[-1] + 1
        branches: List[List[int]] = [[] for _ in region.branches]
        for k in range(start, stop):
            branches[branch_of[owners[k].index]].append(k)
        branches = [b for b in branches if b]
        if len(branches) < 2:
            continue
        touched = [[([env[s] for s in owners[k].ins if s >= 0], [env[s] for s in owners[k].outs if s >= 0])
                    for k in b] for b in branches]
        if not conflicts(touched):
            result.append((start, stop, branches))
    return result


def _unregistered(node: Node) -> KernelSpec:
    """The kernel of a node whose op type nothing runs yet (``defer_missing``)."""

    def fn(inputs, attrs, out=None):
        raise ModelInvalidError(
            f"op {node.op!r} (node {node.name!r}) has no kernel here: register a custom operator for it with "
            f"Context.register_custom_op() (a Python operator or a librkcst_ plugin) before running; the software "
            f"backend's own ops: {', '.join(supported_ops())}",
            op="rknn_run",
        )

    return KernelSpec(node.op, fn, data_dependent=True)


def _within(grid, q) -> bool:
    """Whether values on ``grid`` (a kernel's ``(scale, zero point, qmin, qmax)``) are on the
    quantized slot's grid ``q`` (same float32 scale and zero point, a range inside its)."""
    if q is None or grid is None:
        return False
    scale, zp, lo, hi = grid
    return np.float32(scale) == np.float32(q[0]) and zp == q[1] and q[2] <= lo <= hi <= q[3]


def _staged(x: np.ndarray, q) -> bool:
    """Whether a feed is converted into a staging buffer (a float input that is not float32
    already, or needs its int8 grid or float16 rounding ``q``), else used as it is."""
    return x.dtype.kind == "f" and (x.dtype != np.float32 or q is not None)


def _stage_into(buf: np.ndarray, x: np.ndarray, q) -> None:
    """``buf[...] = x`` (float32), on the int8 grid ``q`` when given, rounded to float16 when
    ``q`` is :data:`HALF_STAGING`; one pass when ``x`` is C-contiguous float32 on a grid."""
    if q is HALF_STAGING:
        np.copyto(buf, x, casting="unsafe")
        round_fp16_inplace(buf.reshape(-1))
    elif q is not None:
        if not copy_fake_quant(x, buf, *q):
            np.copyto(buf, x, casting="unsafe")
            fake_quant_inplace(buf, *q)
    else:
        np.copyto(buf, x, casting="unsafe")


def _step_error(step: _Step, args: List[Optional[np.ndarray]], e: BaseException) -> BaseException:
    """What a step whose kernel raised ``e`` raises: the kernel's own error (an RKNNError whose
    ``op`` is the node's op type, see ``ops.shape._invalid``) with the node's name added; any
    other RKNNError as it is; another exception (a numpy error) as a ModelInvalidError when the
    op takes float tensors only (:data:`~.ops.arity.FLOAT_INPUT_OPS`) and its input is not
    float, else as an InputInvalidError naming the node and its inputs' shapes."""
    if isinstance(e, RKNNError):
        if e.op != step.node.op:
            return e
        return type(e)(f"node {step.node.name!r} ({step.node.op}): {e.message}", op="rknn_run", code=e.code)
    if not isinstance(e, Exception):
        return e
    x = args[0] if args else None
    if step.node.op in FLOAT_INPUT_OPS and x is not None and x.dtype.kind not in "fc":
        return ModelInvalidError(f"node {step.node.name!r} ({step.node.op}): input 0 is a {x.dtype} tensor; "
                                 f"{step.node.op} takes float tensors", op="rknn_run")
    return InputInvalidError(
        f"node {step.node.name!r} ({step.node.op}) failed on inputs "
        f"{[None if a is None else list(a.shape) for a in args]}: {e}",
        op="rknn_run",
    )


def _check_count(step: _Step, results: Sequence[np.ndarray]) -> None:
    if len(results) < len(step.outs) and any(s >= 0 for s in step.outs[len(results):]):
        raise ModelInvalidError(
            f"node {step.node.name!r} ({step.node.op}) declares {len(step.outs)} outputs, "
            f"the kernel gave {len(results)}",
            op="rknn_run",
        )


def _bound_call(step: _Step, spec: KernelSpec, out: List[Optional[np.ndarray]], env: List[Optional[np.ndarray]],
                meta: List[Optional[Tuple[tuple, np.dtype]]]) -> Optional[Callable[[], Any]]:
    """A step of a program as one direct call of the kernel's ``bind`` result (see
    ``ops/elementwise.py``), or None when the kernel has no binding for it."""
    bind = getattr(spec.fn, "bind", None)
    if bind is None or any(s < 0 or meta[s] is None for s in step.ins):
        return None
    bound = bind(step.attrs, [meta[s] for s in step.ins], out)
    if bound is None:
        return None
    fn, extra = bound
    args = [env[s] for s in step.ins]
    if all(a is not None for a in args):
        return partial(fn, *args, *extra)  # every input lives in a fixed buffer
    ins = step.ins
    return lambda: fn(*[env[s] for s in ins], *extra)


def _view_call(step: _Step, spec: KernelSpec, env: List[Optional[np.ndarray]]) -> Optional[Callable[[], None]]:
    """A view step of a program (``KernelSpec.view``): its output set in ``env`` once, as a
    view of its input's fixed buffer (None returned: nothing to run), or, when that input
    changes per run (a graph input fed as it is), a call taking the view each run."""
    ins, slot = step.ins, step.outs[0]
    if env[ins[0]] is not None:
        view = spec.fn([env[s] if s >= 0 else None for s in ins], step.attrs)[0]
        if np.shares_memory(view, env[ins[0]]):
            env[slot] = view
            return None

    def call() -> None:
        env[slot] = spec.fn([env[s] if s >= 0 else None for s in ins], step.attrs)[0]

    return call


def _kernel_call(step: _Step, spec: KernelSpec, out: List[Optional[np.ndarray]],
                 env: List[Optional[np.ndarray]]) -> Callable[[], None]:
    """A step of a program calling its kernel with its planned outputs.  A kernel that
    returns another array than its buffer has it copied there, so every later step may
    read the planned buffer."""
    fn, attrs, ins = spec.fn, step.attrs, step.ins

    def call() -> None:
        results = fn([env[s] if s >= 0 else None for s in ins], attrs, out)
        _check_count(step, results)
        for o, value in zip(out, results):
            if o is not None and value is not o:
                np.copyto(o, value, casting="unsafe")

    return call


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
        fake_quant_inplace(a, q.scale[0], q.zero_point[0], *limits)
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
            fake_quant_inplace(channel, scale, zp, *limits)
            moved[c] = channel
    a.flags.writeable = False
    return a


def _make_plan(ex: Executor, layout: List[Optional[Tuple[tuple, np.dtype]]],
               arena: Optional[np.ndarray] = None, overrides: Optional[Dict[int, KernelSpec]] = None,
               regions: Sequence[Region] = ()) -> _Plan:
    """Assign buffers to the planned tensors of one run, reusing them by liveness.

    A step is planned when its kernel writes into given outputs, its output shapes are
    known and cannot change with the data.  An unplanned step's outputs may be views of
    its inputs, so they keep every buffer their inputs rely on alive while read.  Each
    buffer is a multiple of 64 bytes; with ``arena`` (a uint8 array: the context's internal
    memory, ``set_internal_mem``) the buffers are consecutive slices of it instead of new
    allocations (:class:`InvalidParamError` when it is too small).  Views and joins
    (:func:`_aliases`, :func:`_joined_slots`) follow the kernel a step runs (``overrides``).
    Every tensor a step of one of ``regions`` reads or writes keeps its buffer until the
    region's last step, so that branches run side by side never share one (``branches``).
    """
    steps = ex.steps
    specs = [overrides.get(step.index, step.spec) if overrides else step.spec for step in steps]
    dynamic = [False] * ex.n_tensors
    planned = [False] * len(steps)
    views = set()
    # deps[s]: the planned tensors whose buffers tensor s may live in (itself, or through views)
    deps: List[Tuple[int, ...]] = [()] * ex.n_tensors
    last_use: Dict[int, int] = {}
    for step in steps:
        tainted = step.data_dependent or any(s >= 0 and dynamic[s] for s in step.ins)
        planned[step.index] = (step.spec.out and not tainted
                               and all(s < 0 or layout[s] is not None for s in step.outs))
        if planned[step.index] and _aliases(ex, step, specs[step.index], layout):
            views.add(step.index)
        for s in step.ins:
            for r in deps[s] if s >= 0 else ():
                last_use[r] = step.index
        inherited = tuple({r for s in step.ins if s >= 0 for r in deps[s]})
        for s in step.outs:
            if s >= 0:
                dynamic[s] = tainted
                deps[s] = (s,) if planned[step.index] and step.index not in views else inherited
    for s in ex.output_slots:
        for r in deps[s]:
            last_use[r] = len(steps)
    for region in regions:
        for i in (i for branch in region.branches for i in branch):
            for s in steps[i].ins + steps[i].outs:
                for r in deps[s] if s >= 0 else ():
                    last_use[r] = max(last_use.get(r, region.last), region.last)

    joined = _joined_slots(ex, layout, specs, planned, views)
    for s, (root, _) in joined.items():  # a root's buffer holds its members while they are read
        last_use[root] = max(last_use.get(root, -1), last_use.get(s, -1))
    outs: List[Optional[List[Optional[np.ndarray]]]] = [None] * len(steps)
    free: List[np.ndarray] = []  # byte buffers not in use
    busy: Dict[int, np.ndarray] = {}  # planned slot -> its byte buffer
    total = 0

    def buffer(s: int) -> np.ndarray:
        """Slot ``s``'s array, its byte buffer taken (from ``free``, else new) when it has none."""
        nonlocal total
        shape, dtype = layout[s]
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = busy.get(s)
        if buf is None:
            buf = _take(free, max(nbytes, 1))
            if buf is None:
                size = -(-max(nbytes, 1) // 64) * 64
                if arena is None:
                    buf = np.empty(size, np.uint8)
                elif total + size <= arena.nbytes:
                    buf = arena[total:total + size]
                else:
                    raise InvalidParamError(
                        f"the internal memory has {arena.nbytes} bytes; these input shapes need more "
                        f"(mem_size().total_internal_size after a run with them)", op="rknn_run")
                total += buf.nbytes
            busy[s] = buf
        return buf[:nbytes].view(dtype).reshape(shape)

    for step in steps:
        if planned[step.index] and step.index not in views:
            arrays: List[Optional[np.ndarray]] = []
            for s in step.outs:
                if s < 0:
                    arrays.append(None)
                elif s in joined:  # written straight into its slice of a Concat's output
                    root, chain = joined[s]
                    view = buffer(root)
                    for index in reversed(chain):
                        view = view[index]
                    arrays.append(view)
                else:
                    arrays.append(buffer(s))
            outs[step.index] = arrays
        for r in [r for r in busy if last_use.get(r, step.index) <= step.index]:
            free.append(busy.pop(r))
    joins = frozenset(step.index for step in steps if specs[step.index].joins and step.outs
                      and all(s in joined for s in step.ins))
    return _Plan(outs, frozenset(views), joins, total)


def _joined_slots(ex: Executor, layout: List[Optional[Tuple[tuple, np.dtype]]], specs: List[KernelSpec],
                  planned: List[bool], views: set) -> Dict[int, Tuple[int, List[tuple]]]:
    """The tensors a planned run writes straight into their slice of a Concat's output
    (``KernelSpec.joins``): ``{slot: (root slot, [index, ...])}``, the slot's array being
    ``root[index_k]...[index_1]`` -- a Concat's output may itself be joined into the next
    one (DenseNet's growing feature maps all live in the last Concat's buffer).

    A Concat's input is joined when a planned step produces it, it is no graph output, it
    appears once in that Concat and in no earlier joined one, its slice is contiguous (the
    axes before the concat axis all have size 1), and its values cannot change while it is
    read: either nothing but that Concat reads it, or no Concat it ends up in snaps or
    rounds its output in place (:func:`_passes`)."""
    readers: Dict[int, int] = {}
    producer: Dict[int, _Step] = {}
    for step in ex.steps:
        for s in step.ins:
            readers[s] = readers.get(s, 0) + 1
        for s in step.outs:
            producer[s] = step
    outputs = set(ex.output_slots)
    direct: Dict[int, Tuple[int, tuple]] = {}  # slot -> (Concat output, its slice)
    steady: Dict[int, bool] = {}  # Concat output -> leaves its values as written
    for step in ex.steps:
        if not (specs[step.index].joins and planned[step.index] and len(step.outs) == 1 and step.outs[0] >= 0
                and all(s >= 0 and layout[s] is not None for s in step.ins)):
            continue
        target = step.outs[0]
        shape, dtype = layout[target]
        axis = step.attrs.get("axis", 0)
        axis = axis + len(shape) if axis < 0 else axis
        if not 0 <= axis < len(shape) or int(np.prod(shape[:axis], dtype=np.int64)) != 1:
            continue
        steady[target] = not _passes(ex, step, target)
        start = 0
        for s in step.ins:
            width = layout[s][0][axis]
            p = producer.get(s)
            if (p is not None and planned[p.index] and p.index not in views and s not in outputs and s not in direct
                    and step.ins.count(s) == 1 and layout[s][1] == dtype):
                direct[s] = (target, (slice(None),) * axis + (slice(start, start + width),))
            start += width
    for s in list(direct):
        if readers.get(s, 0) > 1:  # read elsewhere too: every Concat above it must leave it as written
            t = direct[s][0]
            while t is not None and steady[t]:
                t = direct[t][0] if t in direct else None
            if t is not None:
                del direct[s]
    joined: Dict[int, Tuple[int, List[tuple]]] = {}
    for s, (t, index) in direct.items():
        chain = [index]
        while t in direct:
            t, outer = direct[t]
            chain.append(outer)
        joined[s] = (t, chain)
    return joined


def _aliases(ex: Executor, step: _Step, spec: KernelSpec, layout: List[Optional[Tuple[tuple, np.dtype]]]) -> bool:
    """Whether a planned ``step`` reads its input's buffer through a view instead of a buffer
    of its own: a view kernel (``KernelSpec.view``) with one output, of its input's dtype,
    that the executor leaves as the kernel gives it (no rounding or snapping pass, which
    would change the input's values in place)."""
    if not spec.view or len(step.outs) != 1 or step.outs[0] < 0 or not step.ins or step.ins[0] < 0:
        return False
    slot = step.outs[0]
    source = layout[step.ins[0]]
    if source is None or source[1] != layout[slot][1]:
        return False
    return layout[slot][1].kind != "f" or not _passes(ex, step, slot)


def _passes(ex: Executor, step: _Step, slot: int) -> bool:
    """Whether a planned run snaps ``step``'s float output ``slot`` to its int8 grid or rounds
    it to float16 after the step (in place, in the output's buffer)."""
    if slot in ex.quant_slots:
        return not step.on_grid
    return (ex._round and slot not in ex.float_slots and not (step.exact and not ex.quant_slots)) \
        or slot in ex.fp16_slots


def _take(free: List[np.ndarray], nbytes: int) -> Optional[np.ndarray]:
    best = None
    for i, buf in enumerate(free):
        if buf.nbytes >= nbytes and (best is None or buf.nbytes < free[best].nbytes):
            best = i
    return free.pop(best) if best is not None else None
