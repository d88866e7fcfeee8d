"""``Context``: one initialised model, the raising API under ``RKNNLite``."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..backends import create_backend
from ..backends.base import feed_specs
from ..constants import InitFlag, TensorFormat
from ..errors import ContextInvalidError, InputInvalidError, InvalidParamError, ModelInvalidError, RKNNError
from ..log import apply_env_level, logger
from ..model.loader import LoadedModel, load_model
from ..tensors.attr import TensorAttr
from ..tensors.perf import MemSize, PerfDetail
from ..tensors.ranges import InputRange
from ..tensors.topology import DEFAULT_PLATFORM
from .args import is_flag
from .context_io import ContextIo
from .cores import check_batch_core_num, check_core_mask, model_platform
from .flags import ALLOC_OUTSIDE, check_init_flags
from .io import FORMATS, InputPlan, OutputPlan, reorder_shape
from .queries import query

if TYPE_CHECKING:  # annotations only
    from ..tensors.memory import TensorMemory

__all__ = ["Context", "DEFAULT_PLATFORM"]

ModelArg = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class Context:
    """A model loaded and initialised on a backend; raises typed errors (:mod:`rknnlite.errors`).

    Args:
        model: a path (memory-mapped), or ``bytes``/``bytearray``/``memoryview``
            (used in place, not copied).  Portable rknnlite models, Rockchip ``.rknn``
            files, and either wrapped in rknnlite's encryption envelope.
        key: for encrypted models: the 32-byte key as ``bytes``, or a path to a key
            file; ``None`` tries ``RKNNLITE_MODEL_KEY``.
        backend: ``"auto"`` (what the file needs), ``"software"`` or ``"npu"``; an
            explicit choice never falls back.
        target_platform: expected SoC (e.g. ``"rk3588"``); a model built for other
            platforms is still run off-board, with a warning.
        flags: :class:`~rknnlite.constants.InitFlag` bits; :mod:`rknnlite.runtime.flags`
            lists what each does on each backend.  A flag rknnlite does not implement on
            both backends is refused (``InvalidParamError`` naming it).
            ``ASYNC_MASK``: :meth:`run` returns the previous run's outputs (the first run
            its own), as librknnrt's ``rknn_outputs_get`` does; static-shape models only.
            ``MEM_ALLOC_OUTSIDE``/``INTERNAL_ALLOC_OUTSIDE``: give the weight and/or
            internal memory with :meth:`set_weight_mem`/:meth:`set_internal_mem` (sizes
            from :meth:`mem_size`) before the first run.
        share_weights_with: a context of the full model whose weights this weight-less
            model (built with ``config(remove_weight=True)`` from the same network, e.g.
            at another input size) uses: ``RKNN_FLAG_SHARE_WEIGHT_MEM`` with
            ``rknn_init_extend.ctx`` on the npu backend; off-board the portable model's
            left-out weights are the other model's arrays (no copy).  The other context
            stays usable; on the npu backend its ``rknn_destroy`` waits for this one.
        custom_ops: Python custom operators (``op_type`` and ``compute(self, node,
            inputs)``, as RKNN-Toolkit2 defines them) for op types the model uses
            but the runtime does not have.  Ops can also be registered after creation
            (:meth:`register_custom_op`); running a node whose op type has neither a
            kernel nor a registered operator raises ``ModelInvalidError`` naming it.

    A context is a context manager; :meth:`close` is idempotent.
    """

    def __init__(self, model: ModelArg, *, key=None, backend: str = "auto",
                 target_platform: Optional[str] = None, flags: int = 0, custom_ops: Sequence = (),
                 share_weights_with: Optional["Context"] = None):
        apply_env_level()
        if target_platform is not None and not isinstance(target_platform, str):
            raise InvalidParamError(f"target_platform must be a platform name such as 'rk3588', not "
                                    f"{target_platform!r}", op="rknn_init")
        if not isinstance(custom_ops, (list, tuple)):
            raise InvalidParamError(f"custom_ops must be a list of custom operators, not {type(custom_ops).__name__}",
                                    op="rknn_init")
        if share_weights_with is not None and not isinstance(share_weights_with, Context):
            raise InvalidParamError(f"share_weights_with must be a Context, not {type(share_weights_with).__name__}",
                                    op="rknn_init")
        self.flags = check_init_flags(flags, share_weights_with is not None)
        if isinstance(model, LoadedModel):
            self._loaded = model
        else:
            self._loaded = load_model(model, key=key)
        donor = share_weights_with._live() if share_weights_with is not None else None
        self._backend = create_backend(self._loaded, backend, custom_ops=custom_ops, flags=self.flags,
                                       share_with=donor)
        self._init_attrs()
        if self.flags & InitFlag.ASYNC_MASK and self._shape_sets:
            self._backend.close()
            self._backend = None
            raise InvalidParamError("InitFlag.ASYNC_MASK is refused for a dynamic-shape model: the previous run's "
                                    "outputs can have other shapes than the current one", op="rknn_init")
        #: the SoC whose NPU cores set_core_mask/set_batch_core_num emulate (see runtime.cores)
        self._core_platform = model_platform(self._loaded.model, target_platform) or self._platform
        self._backend.set_perf_collection(bool(self.flags & InitFlag.COLLECT_PERF_MASK))
        if target_platform is not None:
            self._check_platform(target_platform)
        logger.debug("context ready: %s on %s backend", self._loaded.label, self._backend.name)

    def _init_attrs(self) -> None:
        self._lock = threading.Lock()
        backend = self._backend
        model = self._loaded.model
        self._inputs = [TensorAttr.from_spec(i, s) for i, s in enumerate(backend.inputs)]
        self._outputs = [TensorAttr.from_spec(i, s) for i, s in enumerate(backend.outputs)]
        sets = backend.dynamic_shapes or ()
        #: dynamic-shape models: the allowed shape sets (one shape per input, in the layout
        #: of each input's attribute: NHWC for an image input, as librknnrt gives them)
        self._shape_sets: Tuple[Tuple[Tuple[int, ...], ...], ...] = tuple(
            tuple(tuple(int(d) for d in shape) for shape in shape_set) for shape_set in sets)
        preprocess = model.input_preprocess
        self._plans = [InputPlan(a, s, preprocess[i] if preprocess else None,
                                 shapes=[shape_set[i] for shape_set in self._shape_sets])
                       for i, (a, s) in enumerate(zip(self._inputs, feed_specs(backend)))]
        self._out_plans = [OutputPlan(a, s) for a, s in zip(self._outputs, backend.outputs)]
        self._index_of = {a.name: a.index for a in self._inputs}
        #: the SoC the model was built for (its first target platform)
        self._platform = model_platform(model) or DEFAULT_PLATFORM
        self._natives: dict = {}
        self._set_of = {shape_set: k for k, shape_set in enumerate(self._shape_sets)}
        self._current_set = 0
        self._set_outputs: dict = {}
        #: memory given with set_weight_mem/set_internal_mem (MEM_ALLOC_OUTSIDE contexts)
        self._model_mem: dict = {"weight": None, "internal": None}
        #: ASYNC_MASK on a backend without librknnrt: the outputs the next run returns
        self._previous: Optional[List[np.ndarray]] = None
        self._emulate_async = bool(self.flags & InitFlag.ASYNC_MASK) and backend.name != "npu"

    def _check_platform(self, target: str) -> None:
        targets = [t.lower() for t in self._loaded.model.target_platforms]
        if targets and target.lower() not in targets:
            logger.warning("model was built for %s, not %s; running it anyway on the %s backend",
                           ", ".join(targets), target, self._backend.name)

    # -- description -----------------------------------------------------------------------

    @property
    def inputs(self) -> List[TensorAttr]:
        """Input tensor attributes as librknnrt reports them (``INPUT_ATTR``; a new list, the
        attrs are immutable): a 4-D image input (1, 3 or 4 channels) is NHWC ``(N, H, W, C)``,
        for portable and vendor files alike; other inputs keep the model's layout (4-D NCHW,
        UNDEFINED for other ranks).  :meth:`run` takes data in this layout by default."""
        return list(self._inputs)

    @property
    def outputs(self) -> List[TensorAttr]:
        """Output tensor attributes as librknnrt reports them: the model's layout (NCHW)."""
        return list(self._outputs)

    @property
    def input_dtypes(self) -> List[Tuple[np.dtype, ...]]:
        """Per input, the numpy dtypes :meth:`run` takes for it without pass-through, as
        librknnrt does: an int8-quantized input int8, uint8 or float32; a float input uint8,
        float16, float32 or float64 (cast to float32); any other input its own dtype only."""
        return [p.accepted for p in self._plans]

    @property
    def backend(self) -> str:
        """Name of the backend running this context (``"software"`` or ``"npu"``)."""
        return self._live().name

    @property
    def core_platform(self) -> str:
        """The SoC whose NPU cores ``set_core_mask`` and ``set_batch_core_num`` address
        (``Context(target_platform=...)``, else the model's first target; lower case)."""
        return self._core_platform or ""

    @property
    def custom_string(self) -> str:
        """The ``custom_string`` the model was built with (``""`` if none): librknnrt's
        ``RKNN_QUERY_CUSTOM_STRING`` on the npu backend (the only reader of a vendor-encrypted
        file), the file's metadata on the software backend."""
        asked = getattr(self._live(), "custom_string", None)
        if isinstance(asked, str):
            return asked
        return self._loaded.model.custom_string or ""

    def sdk_version(self) -> dict:
        """``{"api": ..., "drv": ...}`` versions of the runtime serving this context, as its
        backend reports them: librknnrt's ``RKNN_QUERY_SDK_VERSION`` on the npu backend,
        rknnlite's own version on the software backend."""
        return self._live().sdk_version()

    # -- native layouts and current shapes -----------------------------------------------------

    @property
    def native_inputs(self) -> List[TensorAttr]:
        """Input attributes in the NPU's native layout (``NATIVE_INPUT_ATTR``), as the
        backend reports them: librknnrt's answer on the npu backend; on the software
        backend the rules for the model's platform (:func:`rknnlite.backends.software.emulation.native_attr`):
        1/3/4-channel 4-D inputs as NHWC with the platform's ``w_stride``, other 4-D inputs
        NC1HWC2, int8 models INT8 with their zero point and scale, float models FLOAT16.
        For a dynamic-shape model: at the current shapes."""
        return list(self._native("in", False))

    @property
    def native_outputs(self) -> List[TensorAttr]:
        """Output attributes in the NPU's native layout (``NATIVE_OUTPUT_ATTR``), as the
        backend reports them (software: 4-D outputs NC1HWC2, INT8 (int8 models) or FLOAT16)."""
        return list(self._native("out", False))

    @property
    def _native_nhwc_inputs(self) -> List[TensorAttr]:
        return list(self._native("in", True))

    @property
    def _native_nhwc_outputs(self) -> List[TensorAttr]:
        return list(self._native("out", True))

    @property
    def current_inputs(self) -> List[TensorAttr]:
        """Input attributes at the current input shapes (``CURRENT_INPUT_ATTR``); the
        model's own for a static-shape model."""
        if not self._shape_sets:
            return list(self._inputs)
        return [a.replace(dims=shape) for a, shape in zip(self._inputs, self._shape_sets[self._current_set])]

    @property
    def current_outputs(self) -> List[TensorAttr]:
        """Output attributes at the current input shapes (``CURRENT_OUTPUT_ATTR``)."""
        if not self._shape_sets:
            return list(self._outputs)
        return [a.replace(dims=dims) for a, dims in zip(self._outputs, self._output_dims(self._current_set))]

    @property
    def current_native_inputs(self) -> List[TensorAttr]:
        """:attr:`native_inputs` at the current input shapes (``CURRENT_NATIVE_INPUT_ATTR``)."""
        return self.native_inputs

    @property
    def current_native_outputs(self) -> List[TensorAttr]:
        """:attr:`native_outputs` at the current input shapes (``CURRENT_NATIVE_OUTPUT_ATTR``)."""
        return self.native_outputs

    def _native(self, kind: str, nhwc: bool) -> List[TensorAttr]:
        """Native attrs (cached per shape set) of the inputs (``kind="in"``) or outputs."""
        key = (kind, nhwc, self._current_set if self._shape_sets else None)
        attrs = self._natives.get(key)
        if attrs is None:
            base = self.current_inputs if kind == "in" else self.current_outputs
            attrs = self._natives[key] = list(self._live().native_attrs(kind == "in", nhwc, base))
        return attrs

    # -- dynamic shapes --------------------------------------------------------------------

    def input_ranges(self) -> List[InputRange]:
        """The shape sets of a dynamic-shape model, one :class:`InputRange` per input
        (``INPUT_DYNAMIC_RANGE``); set ``s`` of every input go together.

        Raises:
            ModelInvalidError: a static-shape model (the vendor's RKNN_ERR_MODEL_INVALID).
        """
        self._live()
        if not self._shape_sets:
            raise ModelInvalidError("query dynamic range failed: this is a static-shape model (its input shapes "
                                    "are fixed: " + _shapes_text([tuple(a.dims) for a in self._inputs]) + ")",
                                    op="rknn_query")
        return [
            InputRange(a.index, a.name, a.fmt, a.n_dims, len(self._shape_sets),
                       tuple(shape_set[a.index] for shape_set in self._shape_sets))
            for a in self._inputs
        ]

    @property
    def _input_range_list(self) -> List[InputRange]:
        return self.input_ranges()

    def set_input_shapes(self, shapes, *, data_format=None) -> None:
        """Choose the input shapes of a dynamic-shape model for the next runs
        (``rknn_set_input_shapes``): one shape per input, or one :class:`TensorAttr` per
        input (its ``dims`` in its ``fmt``).  Shapes are in the layout of each input's
        attribute (NHWC for an image input, as :attr:`inputs` and :meth:`input_ranges`
        give them); ``data_format="nchw"`` (or one per input) takes the 4-D shapes in NCHW.
        Only the model's shape sets are accepted.  ``run`` also switches by itself when
        given arrays of another set's shapes.

        Raises:
            InputInvalidError: not one shape per input, or shapes outside the model's sets
                (the message lists the allowed sets).
            InvalidParamError: a ``data_format`` other than None, "nchw", "nhwc".
            ModelInvalidError: a static-shape model.
        """
        with self._lock:
            self._live()
            if not self._shape_sets:
                raise ModelInvalidError("set_input_shapes: this is a static-shape model; its input shapes are "
                                        + _shapes_text([tuple(a.dims) for a in self._inputs]),
                                        op="rknn_set_input_shapes")
            if not isinstance(shapes, (list, tuple)) or len(shapes) != len(self._inputs):
                raise InputInvalidError(f"set_input_shapes takes one shape per input ({len(self._inputs)}), "
                                        f"got {shapes!r}", op="rknn_set_input_shapes")
            formats = _per_input(data_format, len(shapes), "data_format")
            wanted = tuple(self._model_shape(i, s, f) for i, (s, f) in enumerate(zip(shapes, formats)))
            k = self._set_of.get(wanted)
            if k is None:
                text = self._not_a_set(wanted)
                if data_format is None and tuple(self._model_shape(i, s, "nchw") for i, s in enumerate(shapes)) \
                        in self._set_of:
                    text += "; the shapes fit as NCHW: pass data_format='nchw'"
                raise InputInvalidError(text, op="rknn_set_input_shapes")
            self._switch_set(k)

    def _model_shape(self, i: int, shape, data_format=None) -> Tuple[int, ...]:
        """Input ``i``'s ``shape`` (a TensorAttr, or ints in ``data_format``) in its attribute's layout."""
        order = self._plans[i].order
        if isinstance(shape, TensorAttr):
            given = {TensorFormat.NHWC: "nhwc", TensorFormat.NCHW: "nchw"}.get(shape.fmt)
            dims = tuple(shape.dims)
        else:
            given = _format_arg(data_format, f"data_format for input {i}", "rknn_set_input_shapes")
            try:
                dims = tuple(int(d) for d in shape)
            except (TypeError, ValueError):
                raise InputInvalidError(f"set_input_shapes: the shape of input {i} must be a list of ints or a "
                                        f"TensorAttr, not {shape!r}", op="rknn_set_input_shapes") from None
        if order is not None and given is not None and len(dims) == 4 and self._inputs[i].fmt != TensorFormat.UNDEFINED:
            dims = reorder_shape(dims, given, order)
        return dims

    def _not_a_set(self, shapes) -> str:
        allowed = "; ".join(f"set {k}: {_shapes_text(s)}" for k, s in enumerate(self._shape_sets))
        return (f"input shapes {_shapes_text(shapes)} are not one of the model's shape sets; "
                f"allowed (in the inputs' attribute layouts): {allowed}")

    def _switch_set(self, k: int) -> None:
        """Make shape set ``k`` current, here and in the backend (the caller holds the lock)."""
        if k != self._current_set:
            self._live().set_input_shapes(self._shape_sets[k])
            self._current_set = k
            for plan in self._plans:
                plan.native = None

    def _output_dims(self, k: int) -> List[Tuple[int, ...]]:
        """Output dims for shape set ``k``: remembered from a run with those shapes, else
        found by one run on zeros (once per set; the current set stays current)."""
        dims = self._set_outputs.get(k)
        if dims is None:
            feeds = self._zero_feeds(k)
            with self._lock:
                backend = self._live()
                outputs = backend.run(feeds)
                if k != self._current_set:
                    backend.set_input_shapes(self._shape_sets[self._current_set])
            dims = self._set_outputs[k] = [tuple(y.shape) for y in outputs]
        return dims

    # -- queries ---------------------------------------------------------------------------

    def query(self, cmd, index: Optional[int] = None):
        """Answer a C API query command (:class:`~rknnlite.constants.QueryCmd`) with a
        Python object: :class:`~rknnlite.runtime.queries.IoNum` for IN_OUT_NUM; a
        :class:`TensorAttr` (``index`` given) or a list of them for the ``*_ATTR``
        commands; :class:`~rknnlite.runtime.queries.InputRange` (or a list) for
        INPUT_DYNAMIC_RANGE; ``perf_detail()``, ``perf_run()``, ``mem_size()``,
        ``sdk_version()`` and ``custom_string`` for the others.  See
        :mod:`rknnlite.runtime.queries`.

        Raises:
            InvalidParamError: unknown command, index out of range, DEVICE_MEM_INFO off
                RV1106/RK2118, PERF_DETAIL without ``InitFlag.COLLECT_PERF_MASK``.
            ModelInvalidError: INPUT_DYNAMIC_RANGE on a static-shape model.
        """
        return query(self, cmd, index)

    # -- cores, batches, profiling (rules: tensors.topology; records: tensors.perf) -------------

    def set_core_mask(self, mask) -> None:
        """Choose the NPU cores later runs use (``rknn_set_core_mask``); RK3588/RK3576 only.

        ``mask`` is a :class:`~rknnlite.constants.CoreMask` (or its int): ``AUTO`` (one idle
        core), ``CORE_0``/``CORE_1``/``CORE_2``, ``CORE_0_1``, ``CORE_0_1_2``, ``ALL``.  The
        platform is ``Context(target_platform=...)`` or the model's first target platform.
        On the software backend each emulated core is one worker thread of an inference
        (``AUTO``: ``RKNNLITE_NUM_THREADS`` or 1), capped by the usable CPUs.

        Raises:
            InvalidParamError: a single-core platform, a value that is no core mask, or a
                core the platform lacks (``CORE_2``/``CORE_0_1_2`` on RK3576).
        """
        with self._lock:
            self._live().set_core_mask(self._core_platform, check_core_mask(self._core_platform, mask))

    def set_batch_core_num(self, n: int) -> None:
        """Run the samples of a multi-batch model (built with ``rknn_batch_size``) on ``n``
        NPU cores in parallel (``rknn_set_batch_core_num``); RK3588/RK3576 only, 1 <= n <= cores.

        Raises:
            InvalidParamError: a single-core platform, or ``n`` out of range.
        """
        with self._lock:
            self._live().set_batch_core_num(check_batch_core_num(self._core_platform, n))

    def perf_detail(self, as_text: bool = True):
        """The per-operator profile of the last run (``RKNN_QUERY_PERF_DETAIL``).

        Returns the vendor's fixed-width text table (a new ``str``), or with
        ``as_text=False`` a :class:`~rknnlite.tensors.perf.PerfDetail` whose ``records``
        are :class:`~rknnlite.tensors.perf.OpPerf` rows (fields documented there: cycle
        counts are 0 and MAC usage is absent on the software backend).

        Raises:
            InvalidParamError: the context was not created with
                ``flags=InitFlag.COLLECT_PERF_MASK``.
            RKNNError: no run has finished since the context was created.
        """
        with self._lock:
            backend = self._live()
            if not self.flags & InitFlag.COLLECT_PERF_MASK:
                raise InvalidParamError("perf_detail needs a context created with "
                                        "flags=InitFlag.COLLECT_PERF_MASK (RKNN_FLAG_COLLECT_PERF_MASK)",
                                        op="rknn_query")
            detail: Optional[PerfDetail] = backend.perf_detail()
        if detail is None:
            raise RKNNError("no profile yet: perf_detail reports the last run; call run() first", op="rknn_query")
        return detail.text() if as_text else detail

    def perf_run(self) -> int:
        """Duration of the last run in microseconds (``RKNN_QUERY_PERF_RUN``): the backend's
        execution, without the input conversion done before it.  Needs no flag.

        Raises:
            RKNNError: no run has finished since the context was created.
        """
        with self._lock:
            us = self._live().perf_run()
        if us is None:
            raise RKNNError("no run yet: perf_run reports the last run; call run() first", op="rknn_query")
        return int(us)

    def mem_size(self) -> MemSize:
        """Memory this context uses (``RKNN_QUERY_MEM_SIZE``), in bytes: a
        :class:`~rknnlite.tensors.perf.MemSize` (``.to_dict()`` for a dict).  The software
        backend plans its activation buffers on the first run with each input shape, so
        ``total_internal_size`` is 0 before the first run, except on a context created with
        ``MEM_ALLOC_OUTSIDE``/``INTERNAL_ALLOC_OUTSIDE``, whose first call plans them with one
        run on zeros (the size :meth:`set_internal_mem` needs)."""
        with self._lock:
            backend = self._live()
            size = backend.mem_size()
            if self.flags & ALLOC_OUTSIDE and backend.name != "npu" and size.total_internal_size == 0:
                backend.run(self._zero_feeds(self._current_set))
                size = backend.mem_size()
            return size

    def _zero_feeds(self, k: int) -> List[np.ndarray]:
        """Zeros for every input at shape set ``k`` (the model's shapes when static)."""
        if self._shape_sets:
            shapes = self._shape_sets[k]
        else:
            shapes = [tuple(s.shape) for s in feed_specs(self._backend)]
        return [np.zeros(shape, p.feed) for p, shape in zip(self._plans, shapes)]

    # -- memory the caller provides (MEM_ALLOC_OUTSIDE / INTERNAL_ALLOC_OUTSIDE) ---------------

    def set_weight_mem(self, mem: "TensorMemory") -> None:
        """Put the model's weights in ``mem`` (``rknn_set_weight_mem``), memory from this
        context's :meth:`create_mem`/:meth:`create_mem_from_fd` of at least
        ``mem_size().total_weight_size`` bytes after its offset.  Only on a context created
        with ``InitFlag.MEM_ALLOC_OUTSIDE``, before runs need it (a run without it raises).
        The runtime writes the weights into it; the software backend copies each constant
        there (from a 64-byte boundary) and runs on that memory from then on.

        Raises:
            InvalidParamError: the context was not created with ``MEM_ALLOC_OUTSIDE``, memory
                of another context or destroyed, or smaller than needed (sizes named).
            ContextInvalidError: the context is closed.
        """
        self._set_model_mem("weight", mem, InitFlag.MEM_ALLOC_OUTSIDE)

    def set_internal_mem(self, mem: "TensorMemory") -> None:
        """Keep the model's intermediate tensors in ``mem`` (``rknn_set_internal_mem``), memory
        from this context of at least ``mem_size().total_internal_size`` bytes after its
        offset (one memory can serve several contexts run one after the other: wrap it with
        each context's :meth:`create_mem_from_fd`).  Only on a context created with
        ``MEM_ALLOC_OUTSIDE`` or ``INTERNAL_ALLOC_OUTSIDE``.  On the software backend the
        planned activation buffers are carved from it (a run with other input shapes that
        need more raises ``InvalidParamError``).

        Raises:
            InvalidParamError: the context was not created with one of those flags, memory
                of another context or destroyed, or smaller than needed.
            ContextInvalidError: the context is closed.
        """
        self._set_model_mem("internal", mem, ALLOC_OUTSIDE)

    def _set_model_mem(self, kind: str, mem, flags: int) -> None:
        op = f"rknn_set_{kind}_mem"
        if not self.flags & flags:
            names = " or ".join(f"InitFlag.{f.name}" for f in InitFlag if f & flags)
            raise InvalidParamError(f"set_{kind}_mem needs a context created with {names}", op=op)
        zc = self._zero_copy(op)
        if not zc.owns(mem):
            raise InvalidParamError(f"set_{kind}_mem takes memory made by this context's create_mem or "
                                    f"create_mem_from_fd, not {mem!r}", op=op)
        if mem.destroyed:
            raise InvalidParamError(f"set_{kind}_mem: this tensor memory was destroyed", op=op)
        size = self.mem_size()
        need = size.total_weight_size if kind == "weight" else size.total_internal_size
        room = mem.size - mem.offset
        if room < need:
            raise InvalidParamError(f"set_{kind}_mem: the memory has {room} bytes after its offset; the model needs "
                                    f"{need} (mem_size().total_{kind}_size)", op=op)
        with self._lock:
            getattr(self._live(), f"set_{kind}_mem")(mem)
            self._model_mem[kind] = mem
            if kind == "internal" and self._live().name != "npu":
                self._live().run(self._zero_feeds(self._current_set))  # plan the buffers in it now

    def _check_model_mem(self, op: str) -> None:
        """Before a run of a MEM_ALLOC_OUTSIDE/INTERNAL_ALLOC_OUTSIDE context: the memory given."""
        if not self.flags & ALLOC_OUTSIDE:
            return
        missing = [k for k in ("weight", "internal")
                   if (k == "internal" or self.flags & InitFlag.MEM_ALLOC_OUTSIDE)
                   and (self._model_mem[k] is None or self._model_mem[k].destroyed)]
        if missing:
            calls = " and ".join(f"set_{k}_mem()" for k in missing)
            flag = InitFlag.MEM_ALLOC_OUTSIDE if self.flags & InitFlag.MEM_ALLOC_OUTSIDE else \
                InitFlag.INTERNAL_ALLOC_OUTSIDE
            raise InvalidParamError(f"this context was created with InitFlag.{flag.name}: call {calls} (sizes "
                                    "from mem_size()) before running", op=op)

    # -- running ---------------------------------------------------------------------------

    def run(self, inputs, *, data_format=None, pass_through=None, want_float: bool = True) -> List[np.ndarray]:
        """Run once and return the outputs (new arrays the caller owns; inputs are copied
        or converted, never kept).  One run at a time per context: concurrent calls from
        several threads wait for each other (use :meth:`dup` for parallel runs).

        Args:
            inputs: one array per model input: a list in model order, a dict by input
                name, or a single array for a single-input model.  Accepted dtypes
                follow the vendor: int8-quantized inputs take int8/uint8/float32, float
                inputs uint8/float16/float32, bool and integer inputs their own dtype.
                Data is raw (before the model's mean/std normalisation and
                quantization, which ``run`` applies).  A dynamic-shape model takes
                arrays of any one of its shape sets (and switches to that set).
            data_format: the layout of 4-D data, ``"nchw"``/``"nhwc"`` (or one per input);
                ``None`` means the layout of the input's attribute (:attr:`inputs`: NHWC for
                an image input).  Data stated in the other layout is transposed (a copy).
                4-D data that fits only in the other layout is never taken as it is: NCHW
                data where NHWC is stated is transposed, with Lite2's warning "The input[i]
                need NHWC data format, but NCHW set, ..." on the ``rknnlite`` logger;
                anything else is refused with an ``InputInvalidError`` naming
                ``data_format``.  Ignored for other ranks.
            pass_through: ``True`` (or one per input) hands data in as the NPU takes it:
                no normalisation and no quantization: quantized inputs take their int8
                values, float inputs float16/float32; a 4-D input whose native layout is
                NC1HWC2 (see :attr:`native_inputs`) takes that 5-D layout, and a native
                NHWC input also takes its rows padded to ``w_stride``.
            want_float: ``True``: float32 outputs (int8 outputs dequantized).
                ``False``: int8 outputs of a quantized model as their int8 values
                (quantized with the output's scale and zero point), float16 otherwise.
                Outputs are in the model's layout (NCHW) either way.

        Raises:
            InputInvalidError: wrong count, names, shape, dtype or format, naming the input
                and what was expected (the context stays usable).
            InvalidParamError: ``pass_through`` or ``want_float`` that is not True/False (or
                1/0): a string such as ``"no"`` would read as true.
            ContextInvalidError: the context is closed.
        """
        if want_float is not True:
            want_float = _flag(want_float, "want_float", "rknn_run")
        with self._lock:
            backend = self._backend
            if backend is None:
                raise ContextInvalidError("the context is closed", op="rknn_run")
            self._check_model_mem("rknn_run")
            plans = self._plans
            passes = None
            if data_format is None and pass_through is None and type(inputs) is list and len(inputs) == len(plans):
                feeds = [p.convert(x) for p, x in zip(plans, inputs)]
            else:
                feeds, passes = self._feeds(inputs, data_format, pass_through)
            outputs = self._execute(backend, feeds, passes)
            if self._emulate_async:  # librknnrt's ASYNC_MASK: the previous frame (the first: its own)
                previous = self._previous if self._previous is not None else [y.copy() for y in outputs]
                outputs, self._previous = previous, outputs
        if not want_float:
            return [p.raw(y) for p, y in zip(self._out_plans, outputs)]
        return outputs

    def _feeds(self, inputs, data_format, pass_through) -> Tuple[List[np.ndarray], Optional[List[bool]]]:
        """The general path of :meth:`run`: any input container and per-input options; the
        feeds and which of them are passed through (``None``: none)."""
        plans = self._plans
        n = len(plans)
        if isinstance(inputs, np.ndarray) and n == 1:
            inputs = [inputs]
        elif isinstance(inputs, dict):
            inputs = self._by_name(inputs)
        elif not isinstance(inputs, (list, tuple)):
            raise InputInvalidError(
                f"inputs must be a list of numpy arrays, like [img], or a dict by input name, not "
                f"{type(inputs).__name__}", op="rknn_inputs_set")
        if len(inputs) != n:
            raise InputInvalidError(f"the model has {n} input(s) ({', '.join(p.name for p in plans)}), "
                                    f"got {len(inputs)}", op="rknn_inputs_set")
        formats = _per_input(data_format, n, "data_format")
        passes = [p is not None and _flag(p, "pass_through", "rknn_inputs_set")
                  for p in _per_input(pass_through, n, "pass_through")]
        feeds = []
        for i, (plan, x, fmt, passed) in enumerate(zip(plans, inputs, formats, passes)):
            fmt = _format_arg(fmt, f"data_format for {plan.what}", "rknn_inputs_set")
            if passed and plan.native is None:
                plan.native = self._native("in", False)[i]
            feeds.append(plan.convert(x, fmt, bool(passed)))
        flags = [bool(p) for p in passes]
        return feeds, (flags if any(flags) else None)

    def _by_name(self, inputs: dict) -> list:
        names = [p.name for p in self._plans]
        unknown = [k for k in inputs if k not in self._index_of]
        missing = [k for k in names if k not in inputs]
        if unknown or missing:
            problems = []
            if unknown:
                problems.append(f"unknown input name(s) {', '.join(map(repr, unknown))}")
            if missing:
                problems.append(f"missing {', '.join(map(repr, missing))}")
            raise InputInvalidError(f"{'; '.join(problems)}; the model's inputs are {', '.join(map(repr, names))}",
                                    op="rknn_inputs_set")
        return [inputs[k] for k in names]

    def _execute(self, backend, feeds: List[np.ndarray], passes: Optional[List[bool]] = None,
                 out: Optional[list] = None) -> List[np.ndarray]:
        """The one run step of :meth:`run` and :meth:`run_bound` (the lock held, ``backend``
        live): a dynamic-shape model switches to the shape set of ``feeds`` (model layout) and
        remembers that set's output shapes; ``passes`` flags the passed-through inputs
        (``None``: none); ``out`` (static shapes only) takes outputs written in place."""
        if not self._shape_sets:
            if out is not None:
                return backend.run(feeds, pass_through=passes, out=out)
            return backend.run(feeds, pass_through=passes) if passes else backend.run(feeds)
        self._use_set_of(feeds)
        outputs = backend.run(feeds, pass_through=passes) if passes else backend.run(feeds)
        if self._current_set not in self._set_outputs:
            self._set_outputs[self._current_set] = [tuple(y.shape) for y in outputs]
        return outputs

    def _use_set_of(self, feeds: List[np.ndarray]) -> None:
        """Switch a dynamic-shape model to the shape set of ``feeds`` (model layout)."""
        shapes = tuple(x.shape for x in feeds)
        k = self._set_of.get(shapes)
        if k is None:
            raise InputInvalidError(self._not_a_set(shapes), op="rknn_set_input_shapes")
        self._switch_set(k)

    # -- zero-copy memory (through the backend: Backend.zero_copy) ------------------------------

    def _zero_copy(self, op: str):
        """The backend's zero-copy I/O for this context, made on first use."""
        zc = self.__dict__.get("_zc")
        if zc is None:
            with self._lock:
                backend = self._backend
                if backend is None:
                    raise ContextInvalidError("the context is closed", op=op)
                zc = self.__dict__.get("_zc")
                if zc is None:
                    zc = self._zc = backend.zero_copy(ContextIo(self))
        elif self._backend is None:
            raise ContextInvalidError("the context is closed", op=op)
        return zc

    def create_mem(self, size: int, flags=0) -> "TensorMemory":
        """New zero-filled tensor memory of ``size`` bytes (``rknn_create_mem2``), e.g.
        ``attr.size_with_stride`` bytes for one tensor.  ``flags``:
        :class:`~rknnlite.constants.MemAllocFlag` ``DEFAULT`` (cacheable), ``CACHEABLE``,
        ``NON_CACHEABLE``, optionally ``| TRY_ALLOC_SRAM`` (accepted; ordinary memory on the
        software backend).  The context owns it: closing the context destroys it.  On the
        npu backend this is librknnrt's memory (:class:`~rknnlite.backends.npu.zero_copy.NpuTensorMem`,
        the same interface); on the software backend a :class:`~rknnlite.backends.memory.TensorMem`.

        Raises:
            InvalidParamError: ``size`` not an int > 0, or bad ``flags``.
            RKNNMemoryError: the memory could not be mapped.
            ContextInvalidError: the context is closed.
        """
        return self._zero_copy("rknn_create_mem").create_mem(size, flags)

    def create_mem_from_fd(self, fd: int, size: int, offset: int = 0, *, flags=0) -> "TensorMemory":
        """Tensor memory over bytes ``[0, size)`` of ``fd`` (``rknn_create_mem_from_fd``): a
        memfd, a dma-buf (camera, DMA heap) or any mappable file, mapped shared, not copied;
        tensors bound to it start at byte ``offset``.  The fd stays the caller's (never
        closed here).  ``flags`` says whether the memory is cacheable (default) or
        ``MemAllocFlag.NON_CACHEABLE``.

        Raises:
            InvalidParamError: a closed or unmappable fd, ``offset >= size``, or a file
                shorter than ``size``.
            ContextInvalidError: the context is closed.
        """
        return self._zero_copy("rknn_create_mem_from_fd").create_mem_from_fd(fd, size, offset, flags)

    def set_io_mem(self, mem: "TensorMemory", attr: TensorAttr) -> None:
        """Bind ``mem`` to the input or output ``attr`` names (``rknn_set_io_mem``): later
        :meth:`run_bound` calls read that input from it, or write that output into it, in
        the layout and type ``attr`` gives.  Nothing is copied here.  Take ``attr`` from
        :attr:`inputs`/:attr:`outputs`/:attr:`native_inputs`/:attr:`native_outputs`, changed
        with ``attr.replace(type=..., fmt=..., pass_through=...)``; the layouts accepted
        are listed in :mod:`rknnlite.backends.software.binding` (e.g. UINT8 NHWC camera frames with
        rows ``w_stride`` apart, FLOAT32 NCHW outputs); on the npu backend librknnrt
        judges the attr (``rknn_set_io_mem``).  Binding a tensor again replaces its memory.

        Raises:
            InvalidParamError: a layout, type, dims or stride the tensor does not take, a
                memory smaller than ``attr.size_with_stride`` after its offset, destroyed
                memory, or an attr naming no tensor of the model (each message says what
                is allowed).
            ContextInvalidError: the context is closed.
        """
        self._zero_copy("rknn_set_io_mem").set_io_mem(mem, attr)

    def run_bound(self) -> None:
        """Run once from the bound input memory into the bound output memory (zero-copy
        ``rknn_run``; on the npu backend librknnrt reads and writes the memory itself).
        On the software backend inputs already in the executor's dtype and layout are read in place;
        others are converted once (as :meth:`run` does) into a reused staging buffer; each
        output is written into its memory once.  By default the runtime flushes the
        inputs' CPU cache before and invalidates the outputs' after; a context created
        with ``InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE``/``DISABLE_FLUSH_OUTPUT_MEM_CACHE``
        leaves that to ``mem.sync()`` for cacheable memory (see :mod:`rknnlite.backends.memory`).

        Raises:
            InvalidParamError: an input or output is not bound (all are named).
            ContextInvalidError: the context is closed.
        """
        zc = self._zero_copy("rknn_run")
        with self._lock:
            self._check_model_mem("rknn_run")
        zc.run_bound()

    # -- custom operators ------------------------------------------------------------------

    def register_custom_op(self, op, *, shape_infer=None) -> None:
        """Register a custom operator for every node of its op type (``rknn_register_custom_ops``);
        call it after creating the context and before running.  One registration per op type.

        ``op`` is one of:

        * a Python operator, as RKNN-Toolkit2 defines them: a class (instantiated) or an
          instance with a string ``op_type`` and ``compute(self, node, inputs)``;
        * a native operator following the ``rknn_custom_op`` C ABI
          (cython/include/rknn_custom_op.h): a path to a ``librkcst_<name>.so`` plugin
          exporting ``get_rknn_custom_op()``, a plugin name (``"softmax"`` or
          ``"librkcst_softmax"``, searched in ``RKNNLITE_OP_PLUGIN_DIR`` then
          ``/usr/lib/rknpu/op_plugins``), a ctypes pointer to an ``rknn_custom_op`` (the
          struct is copied; the ctypes object is kept alive), or what
          :func:`rknnlite.backends.plugins.load_plugin` returns.  Its ``init`` runs once per
          node now (it may return -14 to keep the runtime's built-in op of that type),
          ``prepare`` and ``compute`` on every run, ``destroy`` at :meth:`close`; see
          :mod:`rknnlite.backends.software.custom_kernels` for the tensors they get.

        ``shape_infer(node, in_shapes, in_dtypes) -> (out_shapes, out_dtypes)`` (the
        toolkit-style method) gives a native operator's output shapes; without it an output
        takes the model's output shape when it is one, else input 0's shape and dtype.
        Contexts made later with :meth:`dup` get the same registrations.

        Raises:
            InvalidParamError: not an operator, a plugin not found (listing the paths
                searched), not loadable or without ``get_rknn_custom_op``, a GPU operator,
                an op type registered already.
            RKNNError: (typed by code) a native ``init`` failed; nothing is registered.
            ContextInvalidError: the context is closed.
        """
        from ..backends.plugins import resolve_custom_op

        resolved, native = resolve_custom_op(op)
        with self._lock:
            backend = self._live()
            register = getattr(backend, "register_custom_op", None)
            if register is None:
                raise InvalidParamError(f"the {backend.name} backend cannot register custom operators",
                                        op="rknn_register_custom_ops")
            register(resolved, native=native, shape_infer=shape_infer)

    # -- lifetime --------------------------------------------------------------------------

    def dup(self) -> "Context":
        """A new context on the same model sharing its weights (one per thread)."""
        self._live()
        twin = object.__new__(Context)
        twin._loaded = self._loaded
        twin._backend = self._backend.dup()
        twin.flags = self.flags
        twin._init_attrs()
        twin._core_platform = self._core_platform
        twin._model_mem["weight"] = self._model_mem["weight"]  # dup shares the weights, not the internals
        return twin

    def close(self) -> None:
        """Release the backend; idempotent.  Later calls raise ContextInvalidError.  Waits for
        a run in progress on another thread to finish."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the attributes were set
            self._backend = None
            return
        with lock:
            backend, self._backend = getattr(self, "_backend", None), None
        zc = self.__dict__.pop("_zc", None)
        if zc is not None:
            zc.release()  # unbinds all memory, destroys the memory this context created
        if backend is not None:
            backend.close()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._backend is None

    def _live(self):
        if self._backend is None:
            raise ContextInvalidError("the context is closed", op="rknn_run")
        return self._backend

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self._backend.name
        return f"<rknnlite.Context {self._loaded.label} ({state})>"


def _per_input(value, n: int, what: str) -> list:
    if value is None or isinstance(value, (str, bool, int)):
        return [value] * n
    if isinstance(value, (list, tuple)) and len(value) == n:
        return list(value)
    raise InvalidParamError(f"{what} must be one value or a list of {n} (one per input), got {value!r}",
                            op="rknn_inputs_set")


def _flag(value, what: str, op: str) -> bool:
    """A yes/no option: a bool or 0/1 (``pass_through=[1]`` as Lite2 takes it); a string such as
    ``"no"`` would read as true, so anything else is refused."""
    if is_flag(value):
        return bool(value)
    raise InvalidParamError(f"{what} must be True/False (or 1/0), not {value!r}", op=op)


def _format_arg(fmt, what: str, op: str) -> Optional[str]:
    """A ``data_format`` value as "nchw"/"nhwc" (any case), or None; InputInvalidError otherwise."""
    if fmt is None:
        return None
    text = str(fmt).lower()
    if text not in FORMATS:
        raise InputInvalidError(f"{what} must be None, 'nchw' or 'nhwc', not {fmt!r}", op=op)
    return text


def _shapes_text(shapes) -> str:
    """``[1, 3, 32, 32] + [1, 4]``: one shape set for messages."""
    return " + ".join(str(list(s)) for s in shapes)
