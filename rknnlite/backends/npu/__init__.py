"""The npu backend: Rockchip ``.rknn`` files on the board's NPU through librknnrt.

:class:`NpuBackend` adapts one ``rknn_context`` of the Cython binding
(:mod:`rknnlite._native.rknnrt`) to the Backend protocol, so ``Context`` and ``RKNNLite``
run unchanged on it.  librknnrt is found as :mod:`.library` describes (argument,
``LIBRKNNRT_PATH``, ``/usr/lib``, ``/usr/lib64``, the loader path) and loaded once per
process.

Data path of :meth:`NpuBackend.run` (general API): the Context has already checked and
converted each input to the dtype and layout of :attr:`inputs` (float32 for an
int8-quantized input, which the runtime normalises and quantizes itself); the arrays'
own memory goes to ``rknn_inputs_set`` (no copy here), and the runtime writes float32
outputs (``want_float=1``) straight into new numpy arrays.

Version rule (:mod:`.versions`): a model built by toolkit ``M.m.p`` needs librknnrt
``>= M.m.0``; when ``rknn_init`` fails and the runtime is older than that, the error says
"model built with toolkit X needs librknnrt >= Y, found Z" instead of the bare code.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...constants import CoreMask, InitFlag, QntType, QueryCmd, TensorFormat, TensorType
from ...errors import ModelInvalidError, RKNNError, error_class
from ...model.spec import QuantParams, TensorSpec
from ...tensors.perf import MemSize, PerfDetail
from ...tensors.attr import DTYPE_OF_TYPE, TYPE_OF_DTYPE, TensorAttr
from ..base import check_out
from .perf import parse_perf_detail
from .runtime import load_runtime
from .versions import version_mismatch

__all__ = ["NpuBackend", "spec_of_attr"]

_LAYOUT = {TensorFormat.NCHW: "NCHW", TensorFormat.NHWC: "NHWC"}
_QUANTIZED = (TensorType.INT8, TensorType.UINT8, TensorType.INT16)


def spec_of_attr(attr: TensorAttr, dims: Optional[Tuple[int, ...]] = None) -> TensorSpec:
    """The :class:`TensorSpec` the Context needs for a runtime-reported attribute (with
    ``dims`` instead of ``attr.dims`` when given, e.g. ``-1`` for dynamic dims).

    An affine-quantized tensor is fed and returned as float32 (the runtime quantizes and
    dequantizes) and keeps its quantization parameters; other tensors keep their type."""
    layout = _LAYOUT.get(attr.fmt, "UNDEFINED")
    dims = tuple(attr.dims) if dims is None else tuple(dims)
    if attr.qnt_type == QntType.AFFINE_ASYMMETRIC and attr.type in _QUANTIZED:
        quant = QuantParams(DTYPE_OF_TYPE[attr.type], (float(attr.scale),), (int(attr.zp),))
        return TensorSpec(attr.name, dims, "float32", layout, quant)
    dtype = DTYPE_OF_TYPE.get(attr.type)
    if dtype is None:
        raise ModelInvalidError(f"tensor {attr.name!r} has type {getattr(attr.type, 'name', attr.type)}, which has "
                                "no numpy dtype; rknnlite cannot feed or read it", op="rknn_query")
    return TensorSpec(attr.name, dims, dtype, layout)


class NpuBackend:
    """Backend over one librknnrt context.

    Args:
        loaded: a :class:`~rknnlite.model.loader.LoadedModel` of a Rockchip file (plain or
            ``CYPTRKNN``); its ``payload`` (the mapped file, or the in-memory decrypted
            bytes of an rknnlite envelope) is handed to ``rknn_init`` without a copy.
        custom_ops: Python custom operators, registered with ``rknn_register_custom_ops``.
        library: an explicit librknnrt path (else the search of :mod:`.library`).
        flags: :class:`~rknnlite.constants.InitFlag` bits for ``rknn_init``.
        share_with: another npu backend whose weights this model uses (``rknn_init`` with
            ``RKNN_FLAG_SHARE_WEIGHT_MEM`` and ``rknn_init_extend.ctx``; the model was built
            with ``remove_weight=True``).

    Raises:
        DeviceUnavailableError: librknnrt cannot be found or loaded (names where it looked).
        RKNNError subclasses: ``rknn_init`` failed (with the version diagnosis).
    """

    name = "npu"

    def __init__(self, loaded, custom_ops: Sequence = (), library: Optional[str] = None, flags: int = 0,
                 share_with: Optional["NpuBackend"] = None, _runtime=None, _ctx=None):
        self._loaded = loaded
        self._custom_ops = tuple(custom_ops)
        self._flags = int(flags)
        self._share = share_with
        if share_with is not None and _runtime is None:
            _runtime = share_with.runtime
        self.runtime = _runtime if _runtime is not None else load_runtime(library)
        self._ctx = _ctx if _ctx is not None else self._init_context(self._flags)
        self._describe()
        self._ran = False

    # -- setup -----------------------------------------------------------------------------

    def _init_context(self, flags: int):
        from .runtime import binding

        try:
            share = self._share._ctx if self._share is not None else None  # the binding sets SHARE_WEIGHT_MEM
            ctx = binding().RknnContext(self.runtime, self._loaded.payload, flags & ~InitFlag.SHARE_WEIGHT_MEM,
                                        share)
        except RKNNError as e:
            if e.op != "rknn_init":
                raise
            hint = version_mismatch(self._loaded.model, self.runtime.version)
            if hint is None:
                version = self.runtime.version or "version unknown"
                raise type(e)(f"{self._loaded.label}: librknnrt {self.runtime.path} ({version}) refused the model "
                              f"with {e.message} (its log on stderr says why; RKNN_LOG_LEVEL=3 for more)",
                              op=e.op, code=e.code) from None
            raise error_class(e.code)(f"{self._loaded.label}: {hint} (librknnrt said {e.message})",
                                      op="rknn_init", code=e.code) from None
        return self._with_custom_ops(ctx)

    def _describe(self) -> None:
        ctx = self._ctx
        self.input_attrs = [ctx.tensor_attr(QueryCmd.INPUT_ATTR, i) for i in range(ctx.n_input)]
        self.output_attrs = [ctx.tensor_attr(QueryCmd.OUTPUT_ATTR, i) for i in range(ctx.n_output)]
        self.inputs = [spec_of_attr(a, dims) for a, dims in zip(self.input_attrs, self._input_dims())]
        self.outputs = [spec_of_attr(a) for a in self.output_attrs]
        #: the input shapes the runtime is switched to; none yet for a dynamic model (the
        #: runtime needs rknn_set_input_shapes before its first run)
        self._current_in = [] if self.dynamic_shapes else [tuple(a.dims) for a in self.input_attrs]
        self._out_dims = [tuple(max(d, 0) for d in a.dims) for a in self.output_attrs]

    def _input_dims(self) -> List[Tuple[int, ...]]:
        """Per input its dims, ``-1`` where a dynamic-shape model's shape sets differ
        (``RKNN_QUERY_INPUT_DYNAMIC_RANGE``; asked only of files that say they are dynamic,
        since the runtime logs an error for a static one)."""
        dims = [tuple(a.dims) for a in self.input_attrs]
        self.dynamic_shapes: List[List[Tuple[int, ...]]] = []
        if not getattr(self._loaded.model, "is_dynamic", False):
            return dims
        ranges = self.input_ranges()
        count = min((r.shape_number for r in ranges), default=0)
        #: the shape sets of a dynamic model, each input's shape in its attribute's format
        #: (NHWC for a 4-D input the runtime presents as NHWC): ``dynamic_shapes[s][i]``
        self.dynamic_shapes = [[tuple(r.dyn_range[s]) for r in ranges] for s in range(count)]
        out = []
        for d, r in zip(dims, ranges):
            shapes = [s for s in r.dyn_range if len(s) == len(d)]
            out.append(tuple(x if all(s[k] == x for s in shapes) else -1 for k, x in enumerate(d)) if shapes else d)
        return out

    # -- running ---------------------------------------------------------------------------

    def run(self, inputs: List[np.ndarray], pass_through: Optional[Sequence[bool]] = None,
            out: Optional[Sequence[Optional[np.ndarray]]] = None) -> List[np.ndarray]:
        """``rknn_inputs_set`` + ``rknn_run`` + ``rknn_outputs_get(want_float=1)``; new float32
        output arrays the caller owns (``out[i]``, when given, receives output ``i`` instead).  A dynamic-shape model whose input shapes changed
        since the last run is switched first with ``rknn_set_input_shapes``.

        ``pass_through[i]``: ``inputs[i]`` (the input's layout and type, values untouched) goes
        to the runtime with ``pass_through=1`` in the input's native layout
        (``CURRENT_NATIVE_INPUT_ATTR``): packed to NC1HWC2, or NHWC with rows padded to
        ``w_stride`` (one copy); the runtime neither normalises nor quantizes it."""
        ctx = self._ctx
        arrays = [np.ascontiguousarray(x) for x in inputs]
        shapes = [tuple(x.shape) for x in arrays]
        if shapes != self._current_in:
            self._switch_shapes(shapes)
        fmts = [a.fmt for a in self.input_attrs]
        passes = [bool(p) for p in pass_through] if pass_through is not None else [False] * len(arrays)
        if any(passes):
            natives = self.native_attrs(True, False)
            for i, passed in enumerate(passes):
                if passed:
                    arrays[i], fmts[i] = _to_native(arrays[i], self.input_attrs[i].fmt, natives[i])
        types = [TYPE_OF_DTYPE[str(x.dtype)] for x in arrays]
        ctx.inputs_set(arrays, types, fmts, passes)
        ctx.run()
        n = len(self.output_attrs)
        outputs = ctx.outputs_get(list(self._out_dims), [True] * n, [np.float32] * n)
        self._ran = True
        if out is not None:
            check_out(out, [a.name for a in self.output_attrs], [(y.shape, y.dtype) for y in outputs])
            outputs = [y if o is None else _copy_into(o, y) for o, y in zip(out, outputs)]
        return outputs

    def _switch_shapes(self, shapes: List[Tuple[int, ...]]) -> None:
        """``rknn_set_input_shapes`` with ``shapes`` (in each input's format), then the new
        output dims from ``CURRENT_OUTPUT_ATTR``."""
        attrs = [a.replace(dims=s, w_stride=0, h_stride=0) for a, s in zip(self.input_attrs, shapes)]
        self._ctx.set_input_shapes(attrs)
        self._current_in = [tuple(s) for s in shapes]
        self._out_dims = [tuple(self._ctx.tensor_attr(QueryCmd.CURRENT_OUTPUT_ATTR, i).dims)
                          for i in range(len(self.output_attrs))]

    def set_input_shapes(self, shapes: Sequence[Tuple[int, ...]]) -> None:
        """``rknn_set_input_shapes`` with ``shapes`` (one of :attr:`dynamic_shapes`, in each
        input's format) unless they are current already."""
        shapes = [tuple(int(d) for d in s) for s in shapes]
        if shapes != self._current_in:
            self._switch_shapes(shapes)

    def native_attrs(self, is_input: bool, nhwc: bool, current: Optional[Sequence[TensorAttr]] = None
                     ) -> List[TensorAttr]:
        """The runtime's native attributes at the current shapes: ``NATIVE_(NHWC_)*_ATTR`` of a
        static model, ``CURRENT_NATIVE_*_ATTR`` of a dynamic one (the runtime refuses the plain
        native queries there; ``nhwc`` then gives the NHWC form of the current native
        attrs: ``current`` (the Context's attrs at the current shapes) are not needed otherwise)."""
        side = "INPUT" if is_input else "OUTPUT"
        if not self.dynamic_shapes:
            return self.query_attrs(QueryCmd[f"NATIVE_NHWC_{side}_ATTR" if nhwc else f"NATIVE_{side}_ATTR"])
        attrs = self.query_attrs(QueryCmd[f"CURRENT_NATIVE_{side}_ATTR"])
        if nhwc:
            plain = self.query_attrs(QueryCmd[f"CURRENT_{side}_ATTR"])
            attrs = [a if a.fmt != TensorFormat.NC1HWC2 else
                     a.replace(dims=_nhwc_dims(p), fmt=TensorFormat.NHWC, w_stride=_nhwc_dims(p)[2], h_stride=0)
                     for a, p in zip(attrs, plain)]
        return attrs

    def zero_copy(self, io):
        """librknnrt's zero-copy for the Context ``io`` describes (an
        :class:`~rknnlite.backends.io_host.IoHost`): a :class:`.zero_copy.NpuZeroCopy`."""
        from .zero_copy import NpuZeroCopy

        return NpuZeroCopy(io, self)

    # -- zero-copy (rknn_create_mem*, rknn_set_io_mem, rknn_mem_sync) --------------------------

    def create_mem(self, size: int, flags: int = 0):
        """Device memory of ``size`` bytes (``rknn_create_mem``, or ``rknn_create_mem2`` when
        ``flags`` (:class:`~rknnlite.constants.MemAllocFlag`) are given): a
        ``TensorMemory`` whose buffer aliases the memory (zero-copy)."""
        if flags:
            return self._ctx.create_mem2(int(size), int(flags))
        return self._ctx.create_mem(int(size))

    def create_mem_from_fd(self, fd: int, virt, size: int, offset: int = 0):
        """Wrap a dma-buf the caller allocated (``rknn_create_mem_from_fd``); zero-copy."""
        return self._ctx.create_mem_from_fd(int(fd), virt, int(size), int(offset))

    def create_mem_from_phys(self, phys_addr: int, virt, size: int):
        """Wrap physically contiguous memory the caller owns (``rknn_create_mem_from_phys``)."""
        return self._ctx.create_mem_from_phys(int(phys_addr), virt, int(size))

    def set_io_mem(self, mem, attr: TensorAttr) -> None:
        """Bind ``mem`` to the input or output ``attr`` describes (``rknn_set_io_mem``; an attr
        from a NATIVE_* query, possibly changed with ``replace`` to the type/format the data is in)."""
        self._ctx.set_io_mem(mem, attr)

    def set_weight_mem(self, mem) -> None:
        """``rknn_set_weight_mem`` with an :class:`~.zero_copy.NpuTensorMem` of this context."""
        self._ctx.set_weight_mem(mem._live_native("set_weight_mem"))

    def set_internal_mem(self, mem) -> None:
        """``rknn_set_internal_mem`` with an :class:`~.zero_copy.NpuTensorMem` of this context."""
        self._ctx.set_internal_mem(mem._live_native("set_internal_mem"))

    def mem_sync(self, mem, mode: int) -> None:
        """``rknn_mem_sync`` (:class:`~rknnlite.constants.MemSyncMode`)."""
        self._ctx.mem_sync(mem, int(mode))

    def run_bound(self) -> None:
        """``rknn_run`` on the memories bound with :meth:`set_io_mem` (no copies)."""
        self._ctx.run()
        self._ran = True

    # -- cores, batch, profiling -------------------------------------------------------------

    def set_core_mask(self, platform: str, mask: CoreMask) -> None:
        """``rknn_set_core_mask`` (the mask is already validated for ``platform``)."""
        self._ctx.set_core_mask(int(mask))

    def set_batch_core_num(self, n: int) -> None:
        """``rknn_set_batch_core_num``."""
        self._ctx.set_batch_core_num(int(n))

    def set_perf_collection(self, enabled: bool) -> None:
        """librknnrt only profiles contexts created with ``RKNN_FLAG_COLLECT_PERF_MASK``: when
        the setting changes, the context is created again with (or without) that flag,
        custom operators re-registered; core mask and shapes start from their defaults."""
        wanted = (self._flags | InitFlag.COLLECT_PERF_MASK) if enabled else (self._flags & ~InitFlag.COLLECT_PERF_MASK)
        if int(wanted) == self._flags:
            return
        ctx = self._init_context(int(wanted))
        old, self._ctx, self._flags = self._ctx, ctx, int(wanted)
        old.destroy()
        self._describe()
        self._ran = False

    def perf_detail(self) -> Optional[PerfDetail]:
        """``RKNN_QUERY_PERF_DETAIL`` parsed (its :meth:`text` is the runtime's table), or
        ``None`` before any run."""
        if not self._ran:
            return None
        return parse_perf_detail(self._ctx.perf_detail())

    def perf_run(self) -> Optional[int]:
        """``RKNN_QUERY_PERF_RUN`` (µs), or ``None`` before any run."""
        if not self._ran:
            return None
        return int(self._ctx.perf_run())

    def mem_size(self) -> MemSize:
        """``RKNN_QUERY_MEM_SIZE``."""
        return self._ctx.mem_size()

    # -- what the runtime reports (for callers that ask the backend) ------------------------------

    def query_attrs(self, cmd: QueryCmd) -> List[TensorAttr]:
        """Every tensor's attribute for an ``*_ATTR`` query command, as the runtime reports it."""
        cmd = QueryCmd(cmd)
        count = self._ctx.n_output if "OUTPUT" in cmd.name else self._ctx.n_input
        return [self._ctx.tensor_attr(cmd, i) for i in range(count)]

    def input_ranges(self) -> list:
        """``RKNN_QUERY_INPUT_DYNAMIC_RANGE`` per input (``InputRange``); the runtime's error
        (``ModelInvalidError``) for a static-shape model."""
        return [self._ctx.input_range(i) for i in range(self._ctx.n_input)]

    def sdk_version(self) -> dict:
        """``RKNN_QUERY_SDK_VERSION`` as ``{"api": ..., "drv": ...}``."""
        api, drv = self._ctx.sdk_version()
        return {"api": api, "drv": drv}

    @property
    def custom_string(self) -> str:
        """``RKNN_QUERY_CUSTOM_STRING``."""
        return self._ctx.custom_string()

    @property
    def library_path(self) -> str:
        """The librknnrt file this backend runs on."""
        return self.runtime.path

    # -- lifetime ----------------------------------------------------------------------------

    def dup(self) -> "NpuBackend":
        """``rknn_dup_context``: a backend on the same model sharing its weights."""
        ctx = self._with_custom_ops(self._ctx.dup())
        return NpuBackend(self._loaded, self._custom_ops, flags=self._flags, share_with=self._share,
                          _runtime=self.runtime, _ctx=ctx)

    def _with_custom_ops(self, ctx):
        """``ctx`` with this backend's custom ops registered (destroyed if that fails)."""
        if self._custom_ops:
            try:
                ctx.register_custom_ops(list(self._custom_ops))
            except BaseException:
                ctx.destroy()
                raise
        return ctx

    def close(self) -> None:
        """``rknn_destroy`` (after freeing this context's tensor memories); idempotent."""
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            ctx.destroy()

    def __repr__(self) -> str:
        return f"<NpuBackend {self._loaded.label} on {self.runtime.path}>"


def _nhwc_dims(attr: TensorAttr) -> Tuple[int, ...]:
    """The dims of a 4-D ``attr`` in NHWC order."""
    dims = tuple(attr.dims)
    if len(dims) == 4 and attr.fmt == TensorFormat.NCHW:
        return (dims[0], dims[2], dims[3], dims[1])
    return dims


def _to_native(x: np.ndarray, fmt: TensorFormat, native: TensorAttr) -> Tuple[np.ndarray, TensorFormat]:
    """Pass-through data ``x`` (4-D in ``fmt``) in the input's native layout, and that layout."""
    from ...tensors import layout

    if x.ndim != 4 or fmt not in (TensorFormat.NCHW, TensorFormat.NHWC):
        return x, fmt
    if native.fmt == TensorFormat.NC1HWC2:
        pack = layout.nchw_to_nc1hwc2 if fmt == TensorFormat.NCHW else layout.nhwc_to_nc1hwc2
        return pack(x, int(native.dims[4])), TensorFormat.NC1HWC2
    if native.fmt == TensorFormat.NHWC:
        nhwc = x.transpose(0, 2, 3, 1) if fmt == TensorFormat.NCHW else x
        if native.w_stride > nhwc.shape[2]:
            nhwc = layout.pad_width(nhwc, int(native.w_stride))
        return np.ascontiguousarray(nhwc), TensorFormat.NHWC
    return x, fmt


def _copy_into(target: np.ndarray, y: np.ndarray) -> np.ndarray:
    np.copyto(target, y, casting="same_kind")
    return target
