"""Python custom operators, as RKNN-Toolkit2 defines them (``from rknnlite.toolkit.custom_op
import get_node_attr``).

A custom operator is a class (registered with ``RKNN.reg_custom_op``, or given to
``rknnlite.Context(custom_ops=[...])`` at run time) with:

* ``op_type``: a ``str``, the op type used in the ONNX model; it must not be a standard
  ONNX op nor an op of rknnlite's own (the vendor recommends a ``cst`` prefix);
* ``shape_infer(self, node, in_shapes, in_dtypes)``: ``in_shapes`` is a list with one
  ``list`` of ints per input (``-1`` for a dim unknown at that point), ``in_dtypes`` a
  list of ``numpy.dtype``; returns ``(out_shapes, out_dtypes)`` in the same form, one
  entry per output of the node;
* ``compute(self, node, inputs)``: ``inputs`` is a list of ``numpy.ndarray`` (float
  tensors arrive as float32, possibly read-only: do not write into them); returns a
  list with one array per output.

Method and parameter names must be exactly these.  ``node`` is the same kind of object in
both calls, in the toolkit and in the runtime: a :class:`rknnlite.model.graph.Node`
(``node.op``, ``node.name``, ``node.inputs``, ``node.outputs`` and ``node.attrs``); read
the op's ONNX attributes with :func:`get_node_attr`.

The vendor's rules, checked when the model is loaded (:func:`check_custom_node`): node
attributes are single values or arrays of bool, int32, float32 or int64 (ONNX ``INT``,
``INTS``, ``FLOAT``, ``FLOATS`` or a ``TENSOR`` of one of those types), and constant inputs
(initializers) are bool, int32, float32 or int64 tensors.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParamError, ModelInvalidError
from ..model.graph import Node

__all__ = [
    "get_node_attr",
    "standard_op_type",
    "validate_custom_op",
    "custom_op_label",
    "check_custom_node",
    "run_shape_infer",
    "infer_with_custom_ops",
    "check_custom_outputs",
    "ALLOWED_TYPES",
]

#: Element types custom-op attributes and constant inputs may have (the vendor's rule).
ALLOWED_TYPES = ("bool", "int32", "float32", "int64")

#: dtypes a custom op's ``shape_infer`` may declare for its outputs (the runtime's tensor types).
_OUTPUT_DTYPES = ("float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "bool")

_MISSING = object()
_METHODS = (("shape_infer", ("node", "in_shapes", "in_dtypes")), ("compute", ("node", "inputs")))
_OP = "reg_custom_op"
_log = logging.getLogger("rknnlite.toolkit")


def get_node_attr(node, name: str, default: Any = _MISSING) -> Any:
    """The value of attribute ``name`` of a custom op's ``node``.

    ``node`` is the object ``shape_infer`` / ``compute`` receive (a
    :class:`rknnlite.model.graph.Node`; an ``onnx.NodeProto`` works too).  Values come
    back as the ONNX attribute holds them: ``int``, ``float``, a list of those, or a
    ``numpy.ndarray`` for a tensor attribute (not copied: do not modify it).

    Raises:
        InvalidParamError: the node has no such attribute and no ``default`` is given
            (the message lists the attributes it has).
    """
    attrs = _attrs_of(node)
    if name in attrs:
        return attrs[name]
    if default is not _MISSING:
        return default
    label = getattr(node, "name", "") or getattr(node, "op", "") or getattr(node, "op_type", "")
    have = sorted(k for k in attrs if not k.startswith("_"))
    raise InvalidParamError(
        f"node {label!r} has no attribute {name!r}; its attributes: {', '.join(have) or 'none'}",
        op="get_node_attr",
    )


def _attrs_of(node) -> Mapping[str, Any]:
    attrs = getattr(node, "attrs", None)
    if isinstance(attrs, Mapping):
        return attrs
    if hasattr(node, "attribute") and hasattr(node, "op_type"):  # an onnx.NodeProto
        from .onnx_attrs import node_attrs

        return node_attrs(node, 0)
    raise InvalidParamError(
        f"get_node_attr needs the node a custom operator receives, not {type(node).__name__}",
        op="get_node_attr",
    )


# -- the operator class ----------------------------------------------------------------------


def custom_op_label(op) -> str:
    """``"op_type (class Name)"`` for messages."""
    return f"{getattr(op, 'op_type', '?')!s} (class {type(op).__name__})"


def validate_custom_op(obj, reserved: Sequence[str] = ()) -> Any:
    """Check a custom operator class (or instance) against the rules in the module doc and
    return an instance (a class is instantiated without arguments).

    ``reserved``: more op types it may not take (rknnlite's own kernels).

    Raises:
        InvalidParamError: naming the rule broken and what was expected.
    """
    if inspect.isclass(obj):
        try:
            op = obj()
        except Exception as e:
            raise InvalidParamError(
                f"custom operator class {obj.__name__} cannot be instantiated without arguments: "
                f"{type(e).__name__}: {e}", op=_OP) from None
    elif obj is None or isinstance(obj, (str, bytes, int, float, list, tuple, dict)):
        raise InvalidParamError(
            f"reg_custom_op needs a custom operator class (or an instance of one) with op_type, "
            f"shape_infer and compute, not {type(obj).__name__}", op=_OP)
    else:
        op = obj
    cls = type(op).__name__
    op_type = getattr(op, "op_type", None)
    if not isinstance(op_type, str) or not op_type:
        raise InvalidParamError(
            f"custom operator class {cls} needs a non-empty string variable 'op_type' (the op type in the "
            f"ONNX model), got {op_type!r}", op=_OP)
    if _is_onnx_op(op_type):
        raise InvalidParamError(
            f"custom operator class {cls}: op_type {op_type!r} is a standard ONNX operator; a custom operator "
            f"needs a new op type (the vendor recommends a 'cst' prefix, e.g. 'cst{op_type}')", op=_OP)
    if op_type in reserved:
        raise InvalidParamError(
            f"custom operator class {cls}: op_type {op_type!r} is an operator of rknnlite itself; choose "
            f"another name (e.g. 'cst{op_type}')", op=_OP)
    for method, params in _METHODS:
        fn = getattr(op, method, None)
        if not callable(fn):
            spellings = (method.lower(), method.replace("_", ""))
            near = [n for n in dir(op) if not n.startswith("_") and n.lower() in spellings]
            hint = f" (found {near[0]!r}: the name must be exactly {method!r})" if near else ""
            raise InvalidParamError(
                f"custom operator class {cls} ({op_type}) needs a member function "
                f"{method}(self, {', '.join(params)}){hint}", op=_OP)
        try:
            got = tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            continue  # a builtin or C callable: nothing to check
        if got != params:
            raise InvalidParamError(
                f"custom operator class {cls} ({op_type}): {method} must be {method}(self, {', '.join(params)}), "
                f"got {method}(self, {', '.join(got)}); the parameter names must be exactly these", op=_OP)
    return op


def standard_op_type(obj) -> Optional[str]:
    """The ``op_type`` of a custom operator class (or instance) when it names a standard ONNX
    operator (RKNN-Toolkit2 ignores such a registration with a warning), else None."""
    op_type = getattr(obj, "op_type", None)
    return op_type if isinstance(op_type, str) and op_type and _is_onnx_op(op_type) else None


def _is_onnx_op(op_type: str) -> bool:
    try:
        import onnx.defs
    except ImportError:  # pragma: no cover - the toolkit needs onnx anyway
        return False
    return bool(onnx.defs.has(op_type))


# -- model checks ----------------------------------------------------------------------------


def check_custom_node(node, op, initializers: Mapping[str, Any]) -> None:
    """Check an ``onnx.NodeProto`` of a custom op type against the vendor's rules:
    attribute and constant-input types (see the module doc).

    Raises:
        ModelInvalidError: naming the node, the attribute or input, its type and the
            allowed types.
    """
    from onnx import AttributeProto

    label = f"custom op {custom_op_label(op)}, node {node.name or node.op_type!r}"
    scalar = {AttributeProto.INT: "int64", AttributeProto.FLOAT: "float32",
              AttributeProto.INTS: "int64", AttributeProto.FLOATS: "float32"}
    for a in node.attribute:
        if a.type in scalar:
            continue
        if a.type == AttributeProto.TENSOR:
            elem = _elem(a.t.data_type)
            if elem in ALLOWED_TYPES:
                continue
            kind = f"a {elem} tensor"
        else:
            kind = AttributeProto.AttributeType.Name(a.type).lower()
        raise ModelInvalidError(
            f"{label}: attribute {a.name!r} is {kind}; custom operator attributes must be single values or "
            f"arrays of {', '.join(ALLOWED_TYPES)}", op="load_onnx")
    for name in node.input:
        t = initializers.get(name)
        if t is None:
            continue
        elem = _elem(t.data_type)
        if elem not in ALLOWED_TYPES:
            raise ModelInvalidError(
                f"{label}: constant input {name!r} is {elem}; custom operator constant inputs must be "
                f"{', '.join(ALLOWED_TYPES)}", op="load_onnx")


def _elem(data_type: int) -> str:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).name
    except Exception:
        return f"element type {data_type}"


def run_shape_infer(op, node: Node, in_shapes: Sequence[Sequence[int]], in_dtypes: Sequence[Any]
                    ) -> Tuple[List[List[int]], List[np.dtype]]:
    """Call ``op.shape_infer`` for ``node`` and check its result.

    Returns ``(out_shapes, out_dtypes)`` as lists of int lists and ``numpy.dtype``.

    Raises:
        ModelInvalidError: ``shape_infer`` raised, or did not return two lists with one
            shape (ints >= -1) and one supported dtype per node output; the message names
            the op type, its class and the node.
    """
    label = f"custom op {custom_op_label(op)}, node {node.name!r}"
    n_out = len(node.outputs)
    try:
        result = op.shape_infer(node, [list(s) for s in in_shapes], [np.dtype(d) for d in in_dtypes])
    except Exception as e:
        raise ModelInvalidError(f"{label}: shape_infer raised {type(e).__name__}: {e}", op="build") from None
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ModelInvalidError(
            f"{label}: shape_infer must return (out_shapes, out_dtypes), got {_short(result)}", op="build")
    shapes, dtypes = result
    if not isinstance(shapes, (list, tuple)) or not isinstance(dtypes, (list, tuple)):
        raise ModelInvalidError(
            f"{label}: shape_infer must return two lists (out_shapes, out_dtypes), got "
            f"{type(shapes).__name__} and {type(dtypes).__name__}", op="build")
    if len(shapes) != n_out or len(dtypes) != n_out:
        raise ModelInvalidError(
            f"{label}: the node has {n_out} output(s), shape_infer returned {len(shapes)} shape(s) and "
            f"{len(dtypes)} dtype(s)", op="build")
    out_shapes: List[List[int]] = []
    out_dtypes: List[np.dtype] = []
    for k, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        try:
            dims = [int(d) for d in shape]
            ok = all(d == v and d >= -1 and not isinstance(v, bool) for d, v in zip(dims, shape))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ModelInvalidError(
                f"{label}: shape_infer output {k} shape must be a list of ints, got {_short(shape)}", op="build")
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt is None or dt.name not in _OUTPUT_DTYPES:
            raise ModelInvalidError(
                f"{label}: shape_infer output {k} dtype must be a numpy dtype among {', '.join(_OUTPUT_DTYPES)}, "
                f"got {_short(dtype)}", op="build")
        out_shapes.append(dims)
        out_dtypes.append(dt)
    return out_shapes, out_dtypes


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- shape inference with custom ops (load_onnx) ---------------------------------------------


def infer_with_custom_ops(model, ops: Mapping[str, Any], infer: Callable, opset: int,
                          warn: Optional[Callable[[str], None]] = None):
    """ONNX shape inference through custom op nodes: returns the inferred ``ModelProto``.

    ``infer(model)`` is the plain ONNX inference.  It runs, then each custom node whose
    inputs' types and shapes are known gets its outputs from ``op.shape_infer`` (as
    ``value_info``), and inference runs again, until no more custom node can be
    resolved.  A ``shape_infer`` that fails or returns something malformed is reported
    through ``warn`` and its outputs stay unknown (``build`` then fails with the
    details).  Custom domains without an opset import get one (version 1) so that ONNX
    inference does not give up on the whole graph.  ``model`` is not modified.
    """
    from onnx import ModelProto, helper

    custom = [n for n in model.graph.node if n.op_type in ops]
    if not custom:
        return infer(model)
    work = ModelProto()
    work.CopyFrom(model)
    have = {imp.domain for imp in work.opset_import}
    for domain in sorted({n.domain for n in custom} - have - {"", "ai.onnx"}):
        work.opset_import.append(helper.make_opsetid(domain, 1))
    inits = {t.name: t for t in work.graph.initializer}
    done = set()
    while True:
        inferred = infer(work)
        known = {vi.name: vi for vi in list(inferred.graph.input) + list(inferred.graph.value_info)
                 + list(inferred.graph.output)}
        progress = False
        for i, proto in enumerate(custom):
            if i in done:
                continue
            in_shapes, in_dtypes = [], []
            for name in proto.input:
                t = _known_type(known.get(name), inits.get(name))
                if t is None:
                    break
                in_shapes.append(t[0])
                in_dtypes.append(t[1])
            else:
                done.add(i)
                op = ops[proto.op_type]
                node = _graph_node(proto, opset)
                try:
                    shapes, dtypes = run_shape_infer(op, node, in_shapes, in_dtypes)
                except ModelInvalidError as e:
                    if warn is not None:
                        warn(e.message)
                    continue
                # graph outputs are typed in graph.output (a value_info entry would be shadowed)
                outs = {vi.name: vi for vi in list(work.graph.value_info) + list(work.graph.output)}
                for name, shape, dtype in zip(proto.output, shapes, dtypes):
                    if not name:
                        continue
                    vi = helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype),
                                                       [d if d >= 0 else None for d in shape])
                    if name in outs:
                        outs[name].CopyFrom(vi)
                    else:
                        work.graph.value_info.append(vi)
                progress = True
        if not progress:
            return inferred


def _graph_node(proto, opset: int) -> Node:
    """The :class:`Node` a custom op's ``shape_infer`` receives at load time (as the
    imported graph holds it)."""
    from .onnx_attrs import node_attrs

    attrs = node_attrs(proto, opset)
    attrs["_num_outputs"] = len(proto.output)
    return Node(proto.op_type, proto.name or proto.op_type, list(proto.input), list(proto.output), attrs)


def _known_type(vi, init) -> Optional[Tuple[List[int], np.dtype]]:
    from onnx import helper

    if init is not None:
        return list(init.dims), np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type))
    if vi is None or vi.type.WhichOneof("value") != "tensor_type":
        return None
    tt = vi.type.tensor_type
    if not tt.elem_type or not tt.HasField("shape"):
        return None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except Exception:
        return None
    dims = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim]
    return dims, dtype


# -- build-time check ------------------------------------------------------------------------


def check_custom_outputs(graph, ops: Mapping[str, Any], input_specs, shapes: Mapping[str, Sequence[int]]) -> int:
    """Check every custom node's ``shape_infer`` at build time; returns the number checked.

    When every model input has a static shape, the graph runs once in float32 on
    synthetic data (floats uniform in [0, 1), integers 0): each custom node's
    ``shape_infer`` is called on the shapes and dtypes its ``compute`` actually receives
    and must return a well-formed result (:func:`run_shape_infer`), and ``compute`` must
    return one array per output with the shape and dtype kind ``shape_infer`` gives.  A
    run that fails elsewhere (e.g. data the model cannot take) is logged.  Without a
    run (dynamic inputs, or that failure) ``shape_infer`` is only called on the shapes known from
    loading (``shapes``; ``-1`` for unknown dims, float32 for non-constant inputs).

    Raises:
        ModelInvalidError: naming the op type, its class, the node and the problem.
    """
    custom_nodes = [n for n in graph.nodes if n.op in ops]
    if not custom_nodes:
        return 0
    if all(all(int(d) >= 0 for d in spec.shape) for spec in input_specs) and _dry_run(graph, ops, input_specs):
        return len(custom_nodes)
    consts = graph.constants
    for node in custom_nodes:
        in_shapes, in_dtypes = [], []
        for name in node.inputs:
            if name in consts:
                in_shapes.append(list(np.shape(consts[name])))
                in_dtypes.append(np.asarray(consts[name]).dtype)
            else:
                in_shapes.append([int(d) for d in shapes.get(name, ())])
                in_dtypes.append(np.dtype(np.float32))
        run_shape_infer(ops[node.op], node, in_shapes, in_dtypes)
    return len(custom_nodes)


class _Recorder:
    """Wraps a custom op for the build's dry run: checks ``compute`` against ``shape_infer``."""

    def __init__(self, op):
        self.op = op
        self.op_type = op.op_type

    def compute(self, node, inputs):
        results = self.op.compute(node, inputs)
        label = f"custom op {custom_op_label(self.op)}, node {node.name!r}"
        if not isinstance(results, (list, tuple)):
            raise _Mismatch(f"{label}: compute must return a list of arrays, got {type(results).__name__}")
        arrays = [np.asarray(r) for r in results]
        if len(arrays) != len(node.outputs):
            raise _Mismatch(f"{label}: the node has {len(node.outputs)} output(s), compute returned "
                            f"{len(arrays)}")
        try:
            want_shapes, want_dtypes = run_shape_infer(self.op, node, [list(x.shape) for x in inputs],
                                                       [x.dtype for x in inputs])
        except ModelInvalidError as e:
            raise _Mismatch(e.message) from None
        for k, (a, shape, dtype) in enumerate(zip(arrays, want_shapes, want_dtypes)):
            if len(shape) != a.ndim or any(d >= 0 and d != s for d, s in zip(shape, a.shape)):
                raise _Mismatch(f"{label}: shape_infer gives output {k} shape {shape}, but compute returned "
                                f"shape {list(a.shape)} (for input shapes {[list(x.shape) for x in inputs]})")
            if _kind(dtype) != _kind(a.dtype):
                raise _Mismatch(f"{label}: shape_infer gives output {k} dtype {dtype}, but compute returned "
                                f"{a.dtype}")
        return arrays


class _Mismatch(Exception):
    pass


def _kind(dtype) -> str:
    k = np.dtype(dtype).kind
    return "int" if k in "iu" else k


def _dry_run(graph, ops, input_specs) -> bool:
    """Run ``graph`` once with the recording ops; False when the run failed for a reason
    other than a custom op's mismatch (logged)."""
    from ..backends.software.executor import Executor
    from ..errors import RKNNError

    rng = np.random.default_rng(0)
    feeds = []
    for spec in input_specs:
        dtype = np.dtype(spec.dtype)
        shape = tuple(int(d) for d in spec.shape)
        feeds.append(rng.random(shape, dtype=np.float32).astype(dtype) if dtype.kind == "f"
                     else np.zeros(shape, dtype))
    recorders = [_Recorder(op) for op in ops.values()]
    try:
        Executor(graph, "float32", recorders).run(feeds)
    except RKNNError as e:
        cause = e.__cause__
        if isinstance(cause, _Mismatch):
            raise ModelInvalidError(str(cause), op="build") from None
        _log.warning(
            "build: could not check the custom operators' outputs on synthetic data: %s", e.message)
        return False
    return True
