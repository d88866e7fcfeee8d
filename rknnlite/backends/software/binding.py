"""Zero-copy I/O of a ``Context``: ``set_io_mem`` checks and ``run_bound`` runs.

``set_io_mem(mem, attr)`` binds a :class:`~rknnlite.backends.memory.TensorMem` to the input
or output ``attr`` names (by ``name`` and ``index``, as taken from ``ctx.inputs``,
``ctx.outputs``, ``ctx.native_inputs`` or ``ctx.native_outputs``, possibly changed with
``attr.replace(type=..., fmt=..., pass_through=...)``), in the layouts the vendor runtime
takes for zero-copy (RKNN API user guide, "zero-copy" and "I/O conversion"):

Inputs (4-D):

* ``NHWC``, raw data (before the model's mean/std and quantization) of a dtype the
  general API takes for that input (int8-quantized: INT8/UINT8/FLOAT32; float:
  UINT8/FLOAT16/FLOAT32), rows ``w_stride`` pixels apart: the platform's aligned width
  (what ``native_inputs`` reports for a 1/3/4-channel input; ``w_stride`` 0 is accepted
  when the width needs no padding); ``h_stride`` (rows per image of a multi-batch input)
  may be set, 0 meaning the height;
* ``NHWC`` with ``pass_through=True`` (inputs whose native layout is NHWC): data as the
  NPU takes it (int8 quantized values, or normalised FLOAT16/FLOAT32);
* ``NC1HWC2`` (inputs whose native layout is NC1HWC2): native data, as with pass-through,
  of the native type and dims (``native_inputs``), whatever ``pass_through`` says;
* ``NCHW`` only for 4-D BOOL/INT64 inputs, which keep the model's layout.

Inputs that are not 4-D: ``UNDEFINED`` (or the model's format), the model's dims.

Outputs: ``FLOAT32`` (dequantized), ``INT8`` (quantized values, int8 models) or
``FLOAT16`` (float models) in ``NCHW`` (the model's 4-D layout), ``NHWC``, or -- INT8 and
FLOAT16 only -- the native ``NC1HWC2`` (``native_outputs``); non-float outputs in their
own type and the model's layout; outputs that are not 4-D as ``UNDEFINED``.

``mem.size - mem.offset`` must hold ``attr.size_with_stride`` bytes.  Anything else
raises :class:`~rknnlite.errors.InvalidParamError` naming the tensor and what it takes.

``run_bound()`` reads every input from its bound memory and writes every output into
its bound memory.  An input already in the dtype and layout the executor runs is read
in place (no copy); otherwise the only copy is the conversion the general API also
does (layout, dtype, normalisation) into the input's reused staging buffer.  Each
output is written into the bound memory once, converted to the bound type and layout.

Release order (SDK, "Ressourcenfreigabe"): destroy the memory, then the context.  Both
other orders are safe here: destroying bound memory unbinds it (``run_bound`` then names
the unbound tensor), and closing a context unbinds everything and destroys the memory
it created (numpy views of it stay valid).  ``ctx.dup()`` starts with no bindings.
"""

from __future__ import annotations

import threading
import weakref
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...constants import InitFlag, MemAllocFlag, TensorFormat, TensorType
from ...errors import InvalidParamError, OutputInvalidError
from ...tensors import layout
from ...tensors.attr import TYPE_OF_DTYPE, TensorAttr
from ...tensors.memory import tensor_view
from ..io_host import IoHost, check_all_bound, find_tensor
from ..memory import TensorMem, allocate, map_fd

__all__ = ["EmulatedIo", "IoState"]

_NCHW, _NHWC, _NC1HWC2, _UNDEF = TensorFormat.NCHW, TensorFormat.NHWC, TensorFormat.NC1HWC2, TensorFormat.UNDEFINED
_FORMAT_ARG = {_NHWC: "nhwc", _NCHW: "nchw"}
# plain ints: ``int & IntFlag`` goes through the enum's slow reflected operator
_NO_FLUSH_IN = int(InitFlag.DISABLE_FLUSH_INPUT_MEM_CACHE)
_NO_FLUSH_OUT = int(InitFlag.DISABLE_FLUSH_OUTPUT_MEM_CACHE)


class _Bound:
    """One tensor bound to memory: the effective attr and how ``run_bound`` uses it."""

    __slots__ = ("mem", "attr", "index", "what", "fmt_arg", "pass_through", "model_dims", "model_fmt", "c2",
                 "_view", "_generation")

    def __init__(self, mem: TensorMem, attr: TensorAttr, index: int, what: str, model: TensorAttr,
                 pass_through: bool = False, c2: int = 0):
        self.mem = mem
        self.attr = attr
        self.index = index
        self.what = what
        self.fmt_arg = _FORMAT_ARG.get(attr.fmt) if len(attr.dims) == 4 else None
        self.pass_through = pass_through
        self.model_dims = tuple(model.dims)
        self.model_fmt = model.fmt
        self.c2 = c2
        self._view: Optional[np.ndarray] = None
        self._generation = -1

    def device_view(self) -> np.ndarray:
        """The tensor in the memory's device view (cached until the views come apart)."""
        mem = self.mem
        if self._view is None or self._generation != mem._generation:
            self._view = tensor_view(mem._device_bytes(), mem.offset, mem.size - mem.offset, self.attr)
            self._generation = mem._generation
        return self._view

    def direct_view(self) -> Optional[np.ndarray]:
        """The bound float32 memory as an array of the model's shape when the backend can
        write the output straight into it (same layout, no padding), else None."""
        if self.attr.type != TensorType.FLOAT32 or self.attr.fmt != self.model_fmt:
            return None
        view = self.device_view()
        if view.size != int(np.prod(self.model_dims)):
            return None
        direct = view.reshape(self.model_dims)
        return direct if np.shares_memory(direct, view) else None

    def store(self, y: np.ndarray, out_plan) -> None:
        """Write one backend output (model layout) into the bound memory, as ``attr`` says."""
        if tuple(y.shape) != self.model_dims:
            raise OutputInvalidError(f"{self.what} was bound for shape {list(self.model_dims)}, the run produced "
                                     f"{list(y.shape)} (the input shapes changed?); bind it again", op="rknn_run")
        view = self.device_view()
        t = self.attr.type
        src = y if t == TensorType.FLOAT32 or y.dtype.kind != "f" else out_plan.raw(y)
        fmt = self.attr.fmt
        if fmt == _NC1HWC2:
            to_blocked = layout.nhwc_to_nc1hwc2 if self.model_fmt == _NHWC else layout.nchw_to_nc1hwc2
            to_blocked(src, self.c2, out=view)
        elif fmt == _NHWC and self.model_fmt == _NCHW:
            np.copyto(view, src.transpose(0, 2, 3, 1))
        elif fmt == _NCHW and self.model_fmt == _NHWC:
            np.copyto(view, src.transpose(0, 3, 1, 2))
        else:
            np.copyto(view, src.reshape(view.shape))


class IoState:
    """The zero-copy state of one context: its bindings and the memory it created.
    Guarded by the context's lock (runs and binding changes do not interleave)."""

    def __init__(self, lock: threading.Lock):
        self.lock = lock
        self.inputs: Dict[int, _Bound] = {}
        self.outputs: Dict[int, _Bound] = {}
        #: memory created by this context: destroyed when it closes
        self.mems: "weakref.WeakSet[TensorMem]" = weakref.WeakSet()
        #: what run_bound walks: ([(input plan, bound)], [(output plan, bound)]); None after a change
        self.ready: Optional[tuple] = None

    def bind(self, is_input: bool, bound: _Bound) -> None:
        """Bind (the caller holds the lock)."""
        (self.inputs if is_input else self.outputs)[bound.index] = bound
        self.ready = None

    def forget(self, mem: TensorMem) -> None:
        """Unbind ``mem`` from every tensor (it is being destroyed)."""
        with self.lock:
            for table in (self.inputs, self.outputs):
                for k in [k for k, b in table.items() if b.mem is mem]:
                    del table[k]
            self.ready = None

    def clear(self) -> None:
        """Unbind everything (the caller holds the lock)."""
        self.inputs.clear()
        self.outputs.clear()
        self.ready = None

    def prepare(self, io: IoHost) -> tuple:
        """``ready``, or the error naming every unbound tensor (the caller holds the lock)."""
        check_all_bound(io, self.inputs, self.outputs)
        self.ready = ([(p, self.inputs[p.index]) for p in io.input_plans],
                      [(p, self.outputs[a.index]) for p, a in zip(io.output_plans, io.outputs)])
        return self.ready


# -- binding -----------------------------------------------------------------------------------


def _describe(attr: TensorAttr) -> str:
    text = f"{attr.type.name} {attr.fmt.name} {list(attr.dims)}"
    if attr.w_stride:
        text += f" w_stride {attr.w_stride}"
    if attr.h_stride:
        text += f" h_stride {attr.h_stride}"
    if attr.pass_through:
        text += " pass_through"
    return text


def _reject(what: str, attr: TensorAttr, problem: str, allowed: List[str]) -> InvalidParamError:
    return InvalidParamError(f"{what} cannot be bound as {_describe(attr)}: {problem}; zero-copy takes "
                             + "; or ".join(allowed), op="rknn_set_io_mem")


def _types(names) -> str:
    return "/".join(TensorType(t).name for t in names)


def _is_4d(model: TensorAttr) -> bool:
    return len(model.dims) == 4 and model.fmt in (_NCHW, _NHWC)


def _input(io: IoHost, i: int, attr: TensorAttr, mem: TensorMem) -> _Bound:
    model = io.current_inputs[i]
    plan = io.input_plans[i]
    native = io.native(True, False)[i]
    nhwc = io.native(True, True)[i]
    what = f"input {i} ({model.name!r})"
    raw_types = [TYPE_OF_DTYPE[d.name] for d in plan.accepted if d.name in TYPE_OF_DTYPE]
    if plan.quant is not None:
        passed_types = [model.type]
    elif plan.feed.kind == "f":
        passed_types = [TensorType.FLOAT16, TensorType.FLOAT32]
    else:
        passed_types = [model.type]
    allowed: List[str] = []
    combos = []  # (fmt, types, dims, w_stride, pass_through or None = either)
    if not _is_4d(model):
        combos.append(((_UNDEF, model.fmt), raw_types, model.dims, 0, False))
        combos.append(((_UNDEF, model.fmt), passed_types, model.dims, 0, True))
        allowed.append(f"{_types(raw_types)} UNDEFINED {list(model.dims)} (pass_through: {_types(passed_types)})")
    elif native.fmt == _NCHW:  # BOOL/INT64 keep the model's layout
        combos.append(((_NCHW,), raw_types, model.dims, model.dims[3], None))
        allowed.append(f"{_types(raw_types)} NCHW {list(model.dims)}")
    else:
        ws = nhwc.w_stride
        combos.append(((_NHWC,), raw_types, nhwc.dims, ws, False))
        allowed.append(f"{_types(raw_types)} NHWC {list(nhwc.dims)} w_stride {ws}")
        if native.fmt == _NHWC:
            combos.append(((_NHWC,), passed_types, nhwc.dims, ws, True))
            allowed.append(f"pass_through {_types(passed_types)} NHWC {list(nhwc.dims)} w_stride {ws}")
        else:
            combos.append(((_NC1HWC2,), [native.type], native.dims, native.dims[3], None))
            allowed.append(f"native {native.type.name} NC1HWC2 {list(native.dims)}")
    fitting = [c for c in combos if attr.fmt in c[0]]
    if not fitting:
        raise _reject(what, attr, f"format {attr.fmt.name} is not taken", allowed)
    passing = attr.pass_through or attr.fmt == _NC1HWC2
    fitting = [c for c in fitting if c[4] is None or c[4] == bool(attr.pass_through)]
    if not fitting:
        raise _reject(what, attr, f"pass_through={bool(attr.pass_through)} is not taken in {attr.fmt.name}", allowed)
    combo = next((c for c in fitting if attr.type in c[1]), None)
    if combo is None:
        types = list(dict.fromkeys(t for c in fitting for t in c[1]))
        raise _reject(what, attr, f"type {attr.type.name} is not taken (here: {_types(types)})", allowed)
    _, _, dims, w_stride, _ = combo
    attr = _check_dims(what, attr, tuple(dims), w_stride, allowed, h_stride_ok=attr.fmt == _NHWC)
    return _Bound(mem, attr, i, what, model, pass_through=passing)


def _output(io: IoHost, i: int, attr: TensorAttr, mem: TensorMem) -> _Bound:
    model = io.current_outputs[i]
    plan = io.output_plans[i]
    native = io.native(False, False)[i]
    what = f"output {i} ({model.name!r})"
    if plan.quant is not None:
        types = [TensorType.FLOAT32, TensorType.INT8]
    elif model.type in (TensorType.FLOAT32, TensorType.FLOAT16):
        types = [TensorType.FLOAT32, TensorType.FLOAT16]
    else:
        types = [model.type]
    combos = []  # (fmt, types, dims, w_stride)
    allowed: List[str] = []
    if _is_4d(model):
        if model.fmt == _NCHW:
            n, c, h, w = model.dims
        else:
            n, h, w, c = model.dims
        combos.append((_NCHW, types, (n, c, h, w), w))
        combos.append((_NHWC, types, (n, h, w, c), w))
        allowed.append(f"{_types(types)} NCHW {[n, c, h, w]} or NHWC {[n, h, w, c]}")
        if native.fmt == _NC1HWC2 and native.type in types:
            combos.append((_NC1HWC2, [native.type], native.dims, w))
            allowed.append(f"native {native.type.name} NC1HWC2 {list(native.dims)}")
    else:
        combos.append((_UNDEF, types, model.dims, 0))
        if model.fmt != _UNDEF:
            combos.append((model.fmt, types, model.dims, 0))
        allowed.append(f"{_types(types)} UNDEFINED {list(model.dims)}")
    fitting = [c for c in combos if c[0] == attr.fmt]
    if not fitting:
        raise _reject(what, attr, f"format {attr.fmt.name} is not taken", allowed)
    combo = next((c for c in fitting if attr.type in c[1]), None)
    if combo is None:
        raise _reject(what, attr, f"type {attr.type.name} is not taken in {attr.fmt.name} (here: "
                                  f"{_types(fitting[0][1])})", allowed)
    if attr.pass_through:
        raise _reject(what, attr, "pass_through applies to inputs only", allowed)
    _, _, dims, w_stride = combo
    attr = _check_dims(what, attr, tuple(dims), w_stride, allowed, h_stride_ok=False)
    c2 = native.dims[4] if attr.fmt == _NC1HWC2 else 0
    return _Bound(mem, attr, i, what, model, c2=c2)


def _check_dims(what: str, attr: TensorAttr, dims: Tuple[int, ...], w_stride: int, allowed: List[str],
                h_stride_ok: bool) -> TensorAttr:
    """``attr`` with the strides the NPU uses, after checking its dims and strides."""
    if tuple(attr.dims) != dims:
        raise _reject(what, attr, f"dims must be {list(dims)}", allowed)
    if not w_stride:  # no rows (UNDEFINED)
        if attr.w_stride or attr.h_stride:
            raise _reject(what, attr, "strides apply to NCHW/NHWC/NC1HWC2 only", allowed)
        return attr
    width = dims[2] if attr.fmt == _NHWC else dims[3]
    if attr.w_stride not in (w_stride, 0) or (attr.w_stride == 0 and width != w_stride):
        raise _reject(what, attr, f"rows are {w_stride} pixels apart (w_stride {w_stride}; take the attr from "
                                  f"ctx.native_inputs or ctx.native_outputs and lay rows out with its w_stride)",
                      allowed)
    height = dims[1] if attr.fmt == _NHWC else dims[2]
    if attr.h_stride and (not h_stride_ok or attr.h_stride < height):
        problem = f"h_stride must be 0 or >= the height {height}" if h_stride_ok else \
            "h_stride applies to NHWC inputs only"
        raise _reject(what, attr, problem, allowed)
    return attr.replace(w_stride=w_stride)


# -- the zero-copy object ----------------------------------------------------------------------


class EmulatedIo:
    """The software backend's zero-copy (``Backend.zero_copy(io)``) for the context ``io``
    describes (:class:`~rknnlite.backends.io_host.IoHost`): its bindings and memory
    (:class:`IoState`), checked and run as the module documentation says."""

    __slots__ = ("io", "state")

    def __init__(self, io: IoHost):
        self.io = io
        self.state = IoState(io.lock)

    def create_mem(self, size: int, flags=MemAllocFlag.DEFAULT) -> TensorMem:
        """``Context.create_mem``: new memory owned by the context."""
        self.io.live("rknn_create_mem")
        mem = allocate(size, flags)
        self.state.mems.add(mem)
        return mem

    def create_mem_from_fd(self, fd: int, size: int, offset: int = 0, flags=MemAllocFlag.DEFAULT) -> TensorMem:
        """``Context.create_mem_from_fd``: ``fd`` mapped, owned by the context."""
        self.io.live("rknn_create_mem_from_fd")
        mem = map_fd(fd, size, offset, flags)
        self.state.mems.add(mem)
        return mem

    def set_io_mem(self, mem, attr) -> None:
        """``Context.set_io_mem``: check ``attr`` against the tensor it names, then bind."""
        op = "rknn_set_io_mem"
        io, state = self.io, self.state
        if not isinstance(mem, TensorMem):
            raise InvalidParamError(f"set_io_mem takes a TensorMem from create_mem/create_mem_from_fd, got "
                                    f"{type(mem).__name__}", op=op)
        if mem.destroyed:
            mem.check_alive("set_io_mem")
        if not isinstance(attr, TensorAttr):
            raise InvalidParamError(f"set_io_mem takes a TensorAttr (from ctx.inputs, ctx.outputs, "
                                    f"ctx.native_inputs or ctx.native_outputs), got {type(attr).__name__}", op=op)
        io.live(op)
        is_input, index = find_tensor(io, attr)
        bound = _input(io, index, attr, mem) if is_input else _output(io, index, attr, mem)
        need = bound.attr.size_with_stride
        if mem.size - mem.offset < need:
            raise InvalidParamError(f"{bound.what} needs {need} bytes (size_with_stride of {_describe(bound.attr)}); "
                                    f"the memory has {mem.size - mem.offset} (size {mem.size} - offset "
                                    f"{mem.offset})", op=op)
        flag = _NO_FLUSH_IN if is_input else _NO_FLUSH_OUT
        with state.lock:
            io.live(op)
            mem.check_alive("set_io_mem")
            if io.flags & flag:
                mem._split()
            state.bind(is_input, bound)
            mem._bound.add(state)

    def run_bound(self) -> None:
        """``Context.run_bound``: one run from and into the bound memory, through the
        context's run step (``io.execute``, the one ``Context.run`` uses)."""
        io, state = self.io, self.state
        with state.lock:
            backend = io.live("rknn_run")
            inputs, outputs = state.ready or state.prepare(io)
            flags = io.flags
            feeds = []
            passes = [bound.pass_through for _, bound in inputs]
            for plan, bound in inputs:
                if bound.mem._device is not None and not flags & _NO_FLUSH_IN:
                    bound.mem._flush()  # the runtime cleans the CPU cache before the NPU reads
                if bound.pass_through and plan.native is None:
                    plan.native = io.native(True, False)[plan.index]
                feeds.append(plan.convert(bound.device_view(), bound.fmt_arg, bound.pass_through))
            # Outputs bound as float32 in the model's layout are written by the run itself.
            direct = None if io.dynamic else [bound.direct_view() for _, bound in outputs]
            results = io.execute(backend, feeds, passes if any(passes) else None, direct)
            for k, ((out_plan, bound), y) in enumerate(zip(outputs, results)):
                if direct is None or direct[k] is None:
                    bound.store(y, out_plan)
            if not flags & _NO_FLUSH_OUT:
                for _, bound in outputs:
                    if bound.mem._device is not None:
                        bound.mem._invalidate()  # the runtime invalidates the CPU cache after the NPU wrote

    def owns(self, mem) -> bool:
        """Whether ``mem`` was made by this context's ``create_mem``/``create_mem_from_fd``."""
        self.io.live("rknn_tensor_mem")
        return mem in self.state.mems

    def release(self) -> None:
        """On ``Context.close``: unbind everything, destroy the memory the context created."""
        state = self.state
        with state.lock:
            state.clear()
            mems = list(state.mems)
        for mem in mems:
            mem._release("the context that created it was closed")
