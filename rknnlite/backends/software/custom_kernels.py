"""Custom operators registered on one software context (``Context.register_custom_op``):
Python operators and native ``rknn_custom_op`` operators (C plugins), as kernels.

Native operators follow the vendor's call sequence (seed 000, rknn_custom_op.h):

* ``init`` once per model node of the op type, at registration, with the node's tensors
  described (attributes only: ``mem.virt_addr`` is NULL, memory exists during runs).  Shapes
  come from a probe run of the model on zeros (static-shape models), so ``attr.dims`` and
  ``n_elems`` are those of the first shape; a tensor whose shape the probe cannot tell has
  ``n_dims`` 0.  ``init`` may return ``RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE`` (-14): that node
  then runs the runtime's built-in op of the same type (an error if there is none).
* ``prepare`` then ``compute`` on every run, with ``rknn_custom_op_tensor`` inputs and
  outputs: float tensors as float32 (int64 as int64), model layout (NCHW for 4-D tensors),
  ``attr.fmt`` NCHW for 4-D and UNDEFINED otherwise; a tensor's bytes start at
  ``mem.virt_addr + mem.offset`` and ``mem.size`` bytes follow.  An input that is a view
  of a larger array is given as that array's start plus an offset.  Outputs live in one
  buffer per call at non-zero offsets (64-byte aligned, the first at 64), as tensors sit
  inside the runtime's internal memory on a board, so a plugin that ignores ``mem.offset``
  fails here as it would there (or in the executor's planned buffers, when it plans them).
* ``destroy`` once per node when the context closes (also for nodes whose init returned -14).

Output shapes and dtypes (the runtime's compiled model knows them; a portable model does
not store a custom node's outputs): ``shape_infer(node, in_shapes, in_dtypes)`` given at
registration (the toolkit-style method), else the model's static output shape when the
node output is a model output, else the shape and dtype of input 0 (element-wise ops such
as the vendor's softmax and relu examples).

Each node's callbacks run one at a time (a mutex per node), without the GIL.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import InputInvalidError, InvalidParamError, ModelInvalidError, RKNNError, check, error_name
from ...model.spec import numpy_dtype
from ...log import logger
from .executor import CustomOpKernel, Executor
from .ops import KERNELS, KernelSpec

__all__ = ["CustomOpRegistry", "node_attributes", "SKIP_CUSTOM_OP_COMPUTE"]

#: ``RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE``: init asks for the built-in op instead.
SKIP_CUSTOM_OP_COMPUTE = -14
_OP = "rknn_register_custom_ops"
_CPU = 1
_NCHW, _UNDEFINED = 0, 3
_ALIGN = 64

#: numpy dtype -> rknn_tensor_type
_TYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int8): 2, np.dtype(np.uint8): 3,
          np.dtype(np.int16): 4, np.dtype(np.uint16): 5, np.dtype(np.int32): 6, np.dtype(np.uint32): 7,
          np.dtype(np.int64): 8, np.dtype(np.bool_): 9}
_INT64, _FLOAT32, _UINT8, _BOOL = 8, 0, 3, 9

Layout = Tuple[Tuple[int, ...], np.dtype]


def node_attributes(node) -> List[Tuple[str, int, int, bytes]]:
    """The attributes ``rknn_custom_op_get_op_attr`` reports for ``node``:
    ``[(name, rknn_tensor_type, n_elems, bytes)]``.  Ints are INT64, floats FLOAT32, bools
    BOOL, strings UINT8 (UTF-8, ``n_elems`` = byte length), arrays their own type (float64 as
    FLOAT32); plus ``"name"``, the node's name, unless the node has such an attribute.
    Private keys (``_...``) and values of other kinds are left out."""
    out = []
    attrs = dict(node.attrs)
    attrs.setdefault("name", node.name)
    for key, value in attrs.items():
        if key.startswith("_"):
            continue
        encoded = _encode_attr(value)
        if encoded is None:
            logger.debug("custom op node %r: attribute %r (%s) is not passed to native operators",
                         node.name, key, type(value).__name__)
            continue
        out.append((key,) + encoded)
    return out


def _encode_attr(value) -> Optional[Tuple[int, int, bytes]]:
    if isinstance(value, str):
        data = value.encode()
        return _UINT8, len(data), data
    if isinstance(value, bytes):
        return _UINT8, len(value), value
    if isinstance(value, (bool, np.bool_)):
        return _BOOL, 1, bytes([bool(value)])
    if isinstance(value, (int, np.integer)):
        return _INT64, 1, np.int64(value).tobytes()
    if isinstance(value, (float, np.floating)):
        return _FLOAT32, 1, np.float32(value).tobytes()
    if isinstance(value, (list, tuple)):
        if not value:
            return _INT64, 0, b""
        if all(isinstance(v, (bool, np.bool_)) for v in value):
            return _BOOL, len(value), np.asarray(value, np.bool_).tobytes()
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            return _INT64, len(value), np.asarray(value, np.int64).tobytes()
        if all(isinstance(v, (int, float, np.integer, np.floating)) for v in value):
            return _FLOAT32, len(value), np.asarray(value, np.float32).tobytes()
        return None
    if isinstance(value, np.ndarray):
        a = value.astype(np.float32) if value.dtype == np.float64 else value
        code = _TYPES.get(a.dtype)
        if code is None:
            return None
        return code, int(a.size), np.ascontiguousarray(a).tobytes()
    return None


def _describe(index: int, name: str, layout: Optional[Layout], array: Optional[np.ndarray] = None,
              base: int = 0, offset: int = 0) -> tuple:
    """A tensor for NodeContext: ``(index, name, dims, type, fmt, virt_addr, offset, nbytes)``."""
    if layout is None:
        return (index, name.encode()[:255], (), _FLOAT32, _UNDEFINED, 0, 0, 0)
    shape, dtype = layout
    dims = tuple(int(d) for d in shape) or (1,)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if array is not None:
        nbytes = array.nbytes
    return (index, name.encode()[:255], dims, _TYPES[dtype], _NCHW if len(dims) == 4 else _UNDEFINED,
            base, offset, nbytes)


def _address(a: np.ndarray) -> Tuple[int, int]:
    """``(virt_addr, offset)`` of an array: the start of the buffer it is a view of, and its
    byte offset in it (``(data, 0)`` when it owns its data)."""
    ptr = a.__array_interface__["data"][0]
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is not a:
        start = root.__array_interface__["data"][0]
        offset = ptr - start
        if 0 <= offset < 2 ** 31 and offset + a.nbytes <= root.nbytes:
            return start, offset
    return ptr, 0


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype.kind == "f" else dtype


def _as_input(x: np.ndarray, node, k: int) -> np.ndarray:
    """An input as the native op takes it: C-contiguous, writable (the ABI pointer is not
    const), float as float32."""
    x = np.asarray(x)
    if x.dtype.kind == "f" and x.dtype != np.float32:
        x = x.astype(np.float32)
    if x.dtype not in _TYPES:
        raise InputInvalidError(f"custom operator {node.op!r} (node {node.name!r}): input {k} has dtype {x.dtype}, "
                                f"which no RKNN tensor type holds", op="rknn_run")
    if not x.flags.c_contiguous or not x.flags.writeable:
        x = np.array(x, order="C")
    return x


class _ProbeStop(RKNNError):
    """Ends a probe run early (no later node matters)."""


class _NativeNode:
    """The kernel of one model node run by a native operator."""

    def __init__(self, registry: "CustomOpRegistry", node, context, shape_infer):
        self.registry = registry
        self.node = node
        self.context = context
        self.shape_infer = shape_infer

    def spec(self) -> KernelSpec:
        return KernelSpec(self.node.op, self.run, out=True, data_dependent=True)

    def run(self, inputs, attrs, out=None) -> List[np.ndarray]:
        node = self.node
        present = [(name, x) for name, x in zip(node.inputs, inputs) if x is not None]
        arrays = [_as_input(x, node, k) for k, (_, x) in enumerate(present)]
        layouts = self.registry.output_layouts(node, self.shape_infer, [(a.shape, a.dtype) for a in arrays],
                                               op="rknn_run")
        outs = _given_outputs(out, layouts)
        if outs is None:
            outs = _arena(layouts)
        ins = [_describe(k, name, (a.shape, a.dtype), a, *_address(a)) for k, ((name, _), a) in
               enumerate(zip(present, arrays))]
        described = [_describe(k, name, layout, o, *_address(o))
                     for k, (name, layout, o) in enumerate(zip(node.outputs, layouts, outs))]
        code = self.context.run(ins, described)
        check(code, "rknn_run", f"custom operator {node.op!r} (node {node.name!r}, native "
                                f"{self.context.op.source}): prepare/compute returned {error_name(code)} ({code})")
        return outs


def _given_outputs(out, layouts: Sequence[Layout]) -> Optional[List[np.ndarray]]:
    """The executor's planned output arrays when they fit the layouts exactly."""
    if out is None or len(out) != len(layouts):
        return None
    for o, (shape, dtype) in zip(out, layouts):
        if o is None or o.shape != tuple(shape) or o.dtype != dtype or not o.flags.c_contiguous \
                or not o.flags.writeable:
            return None
    return list(out)


def _arena(layouts: Sequence[Layout]) -> List[np.ndarray]:
    """Outputs in one zeroed buffer, each 64-byte aligned, the first at offset 64."""
    offsets = []
    end = _ALIGN
    for shape, dtype in layouts:
        offsets.append(end)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        end += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN or _ALIGN
    arena = np.zeros(end, np.uint8)
    return [arena[off:off + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize].view(dtype).reshape(shape)
            for off, (shape, dtype) in zip(offsets, layouts)]


class CustomOpRegistry:
    """The custom operators registered on one software context, as per-step kernel
    overrides (``overrides``: step index -> :class:`KernelSpec`, used live by the context's
    execution states).

    Args:
        executor: the compiled model.
        input_specs / output_specs: the model's I/O (:class:`~rknnlite.model.spec.TensorSpec`).
        batch: samples per run of a multi-batch model (the graph holds one).
        prepare: ``(inputs, pass_through) -> graph inputs`` when the graph takes its inputs
            otherwise than the specs give them (a vendor file's NHWC inputs, its mean/std;
            :meth:`~rknnlite.model.rknn_graph.VendorModel.graph_inputs`), for the probe run.
    """

    def __init__(self, executor: Executor, input_specs, output_specs, batch: int = 1,
                 prepare: Optional[Callable] = None):
        self.executor = executor
        self.input_specs = tuple(input_specs)
        self.output_specs = tuple(output_specs)
        self.batch = batch
        self.prepare = prepare
        self.overrides: Dict[int, KernelSpec] = {}
        #: (operator, native, shape_infer) in registration order
        self.registered: List[Tuple[Any, bool, Optional[Callable]]] = []
        self._contexts: List[Any] = []

    @property
    def op_types(self) -> List[str]:
        """Op types registered so far, in order."""
        return [op.op_type for op, _, _ in self.registered]

    def register(self, op, native: bool, shape_infer: Optional[Callable] = None) -> None:
        """Register a Python operator (``native=False``) or a ``NativeOp`` for every node of
        its op type.  Native operators get ``init`` per node here; ``shape_infer`` only
        matters for them (Python operators return their outputs).

        Raises:
            InvalidParamError: the op type is registered already, a GPU operator, a bad
                ``shape_infer``, or init returned -14 for an op with no built-in kernel.
            RKNNError: (typed by code) init returned an error; nothing stays registered.
        """
        op_type = op.op_type
        if op_type in self.op_types:
            raise InvalidParamError(f"custom operator {op_type!r} is registered on this context already "
                                    f"(one registration per op type)", op=_OP)
        if shape_infer is not None and not callable(shape_infer):
            raise InvalidParamError(f"shape_infer must be callable (node, in_shapes, in_dtypes), not "
                                    f"{type(shape_infer).__name__}", op=_OP)
        steps = [s for s in self.executor.steps if s.node.op == op_type]
        if not steps:
            logger.warning("register_custom_op: the model has no %s node; the operator is registered but unused",
                           op_type)
        if not native:
            kernel = CustomOpKernel(op)
            new = {s.index: kernel.spec(s.node) for s in steps}
            contexts: List[Any] = []
        else:
            new, contexts = self._init_native(op, steps, shape_infer)
        self.overrides.update(new)
        self._contexts.extend(contexts)
        self.registered.append((op, native, shape_infer))
        logger.debug("registered custom op %s (%s) on %d node(s)", op_type, "native" if native else "python",
                     len(steps))

    def _init_native(self, op, steps, shape_infer):
        from ..._native.custom_op_plugin import NodeContext

        if op.target != _CPU:
            raise InvalidParamError(
                f"custom operator {op.op_type!r} ({op.source}) has target {op.target}; the software backend runs "
                f"CPU operators (RKNN_TARGET_TYPE_CPU = 1) only", op=_OP)
        layouts = self._probe(op.op_type, steps, shape_infer) if steps else {}
        new: Dict[int, KernelSpec] = {}
        contexts = []
        try:
            for step in steps:
                node = step.node
                context = NodeContext(op, node_attributes(node))
                contexts.append(context)
                ins, outs = layouts.get(step.index, (None, None))
                names = [n for n in node.inputs if n]
                in_desc = [_describe(k, name, ins[k] if ins is not None and k < len(ins) else None)
                           for k, name in enumerate(names)]
                out_desc = [_describe(k, name, outs[k] if outs is not None and k < len(outs) else None)
                            for k, name in enumerate(node.outputs)]
                code = context.init(in_desc, out_desc)
                if code == SKIP_CUSTOM_OP_COMPUTE:
                    if op.op_type not in KERNELS:
                        raise InvalidParamError(
                            f"init of custom operator {op.op_type!r} (node {node.name!r}) returned "
                            f"RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE (-14), but the runtime has no built-in "
                            f"{op.op_type} to fall back to", op=_OP)
                    logger.info("custom op %s (node %r): init asked for the built-in op", op.op_type, node.name)
                    continue
                check(code, _OP, f"init of custom operator {op.op_type!r} (node {node.name!r}, {op.source}) "
                                 f"returned {error_name(code)} ({code})")
                new[step.index] = _NativeNode(self, node, context, shape_infer).spec()
        except BaseException:
            for context in reversed(contexts):
                context.destroy()
            raise
        return new, contexts

    def _probe(self, op_type: str, steps, shape_infer) -> Dict[int, Tuple[List[Layout], List[Layout]]]:
        """Input and output layouts of each node of ``op_type`` for the model's first input
        shapes: one run on zeros, the nodes of ``op_type`` giving zeros of their output
        layouts.  Nodes not reached (dynamic shapes, another op missing before them) are absent."""
        feeds = []
        for spec in self.input_specs:
            shape = tuple(spec.shape)
            if not shape or any(d <= 0 for d in shape):
                return {}
            if self.batch > 1:
                shape = (shape[0] // self.batch,) + shape[1:]
            feeds.append(np.zeros(shape, numpy_dtype(spec.dtype)))
        if self.prepare is not None:
            feeds = self.prepare(feeds, None)
        found: Dict[int, Tuple[List[Layout], List[Layout]]] = {}
        targets = {s.index for s in steps}

        def capture(index, node):
            def fn(inputs, attrs, out=None):
                ins = [(tuple(x.shape), _compute_dtype(x.dtype)) for x in inputs if x is not None]
                outs = self.output_layouts(node, shape_infer, ins, op=_OP)
                found[index] = (ins, outs)
                if len(found) == len(targets):
                    raise _ProbeStop("probe done")
                return [np.zeros(shape, dtype) for shape, dtype in outs]
            return KernelSpec(node.op, fn, data_dependent=True)

        state = self.executor.new_state(threads=1)
        try:
            state.use_kernels({**self.overrides, **{s.index: capture(s.index, s.node) for s in steps}})
            with np.errstate(all="ignore"):
                state.run(feeds)
        except _ProbeStop:
            pass
        except InvalidParamError:
            raise  # a bad shape_infer
        except RKNNError as e:
            logger.debug("custom op %s: probe run stopped (%s); init gets the shapes known so far", op_type, e)
        finally:
            state.close()
        return found

    def output_layouts(self, node, shape_infer, ins: Sequence[Layout], op: str) -> List[Layout]:
        """Shapes and dtypes of ``node``'s outputs for inputs ``ins`` (see the module doc)."""
        n = len(node.outputs)
        if shape_infer is not None:
            try:
                shapes, dtypes = shape_infer(node, [list(s) for s, _ in ins], [d for _, d in ins])
                result = [(tuple(int(d) for d in s), np.dtype(t)) for s, t in zip(shapes, dtypes)]
            except Exception as e:
                raise InvalidParamError(f"shape_infer of custom operator {node.op!r} (node {node.name!r}) failed: "
                                        f"{e}", op=op) from None
            if len(result) != n or any(d < 0 for s, _ in result for d in s) or \
                    any(t not in _TYPES for _, t in result):
                raise InvalidParamError(
                    f"shape_infer of custom operator {node.op!r} (node {node.name!r}) must give {n} static shape(s) "
                    f"and RKNN dtypes, gave {result}", op=op)
            return [(s, _compute_dtype(t)) for s, t in result]
        if not ins:
            raise ModelInvalidError(f"custom operator {node.op!r} (node {node.name!r}) has no input to take its "
                                    f"output shape from; register it with shape_infer=", op=op)
        first_shape, first_dtype = ins[0]
        outputs = list(self.executor.graph.outputs)
        result = []
        for name in node.outputs:
            layout = (tuple(first_shape), _compute_dtype(first_dtype))
            if name in outputs and self.batch == 1:
                shape = tuple(self.output_specs[outputs.index(name)].shape)
                if shape and all(d > 0 for d in shape):
                    layout = (shape, layout[1])
            result.append(layout)
        return result

    def clone(self, executor: Executor) -> "CustomOpRegistry":
        """The same registrations on another context of the same model (native operators
        get their own node contexts, ``init`` included)."""
        twin = CustomOpRegistry(executor, self.input_specs, self.output_specs, self.batch, prepare=self.prepare)
        try:
            for op, native, shape_infer in self.registered:
                twin.register(op, native, shape_infer)
        except BaseException:
            twin.close()
            raise
        return twin

    def close(self) -> None:
        """Call ``destroy`` of every native node context (once; a failing destroy is logged)
        and drop every registration.  Idempotent."""
        contexts, self._contexts = self._contexts, []
        self.overrides.clear()
        for context in reversed(contexts):
            code = context.destroy()
            if code < 0:
                logger.warning("destroy of custom operator %r (%s) returned %s (%d)", context.op.op_type,
                               context.op.source, error_name(code), code)
