"""ONNX -> :class:`~rknnlite.model.graph.Graph`: the first step of the toolkit's conversion.

:func:`import_onnx` reads an ONNX model (path, bytes or ``ModelProto``), optionally
cuts it to the named inputs and outputs (as RKNN-Toolkit2's ``load_onnx`` does),
fixes dynamic input dims from ``input_size_list``, and returns the graph with its
initializers as constants and I/O descriptions for the model metadata.

With ``dynamic_input`` shape sets (see :mod:`rknnlite.toolkit.shapes`) the symbolic
dims that vary across the sets stay symbolic (``-1`` in the input specs and in
:attr:`ImportedModel.shapes`), so one graph serves every set and no build step treats
a varying dim as a constant; dims every set agrees on are fixed.

What the runtime boundary looks like:

* element types map to runtime dtype names (``FLOAT`` -> ``"float32"``, ``INT64`` ->
  ``"int64"``, ``BOOL`` -> ``"bool"``, ...).  ``FLOAT16`` and ``DOUBLE`` inputs and
  outputs become ``"float32"``: the software backend computes and returns floats in
  float32, and the caller's float16/float64 data is cast on the way in.
* types the NPU runtime has no tensor type for (string, complex, bfloat16, float8,
  int4/int2, uint64, ...) raise :class:`~rknnlite.errors.ModelInvalidError` naming the
  tensor, wherever they appear (I/O, initializers, ``Cast`` targets, inferred types).
* unknown and symbolic dims are ``-1``; 4-D float tensors are ``"NCHW"``, everything
  else ``"UNDEFINED"``.

Node attributes are :func:`~rknnlite.toolkit.onnx_attrs.node_attrs` (with ``"_opset"``)
plus ``"_num_outputs"``, the number of outputs the node declares (omitted trailing
optional outputs dropped; an omitted output before a used one gets a placeholder name).

``onnx`` is imported only when a function here runs.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..errors import ModelInvalidError
from ..model.graph import Graph, Node
from ..model.spec import TensorSpec
from .onnx_attrs import default_opset, node_attrs
from .qdq import QDQ_OPS, read_qdq
from .shapes import ShapeSets, check_sets_against_inputs, merge_shapes, validate_shape_sets

__all__ = ["ImportedModel", "import_onnx", "tensor_layout", "ONNX_DTYPES", "UNSUPPORTED_ELEM_TYPES"]

_OP = "load_onnx"

#: ONNX element type name -> runtime dtype name at the model boundary.
ONNX_DTYPES = {
    "FLOAT": "float32",
    "FLOAT16": "float32",
    "DOUBLE": "float32",
    "INT8": "int8",
    "UINT8": "uint8",
    "INT16": "int16",
    "UINT16": "uint16",
    "INT32": "int32",
    "UINT32": "uint32",
    "INT64": "int64",
    "BOOL": "bool",
}

#: ONNX element types with no runtime tensor type (``rknn_tensor_type`` has none of them).
UNSUPPORTED_ELEM_TYPES = (
    "STRING", "COMPLEX64", "COMPLEX128", "BFLOAT16", "UINT64",
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "FLOAT4E2M1",
    "INT4", "UINT4", "INT2", "UINT2", "FLOAT6E2M3", "FLOAT6E3M2",
)

_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class ImportedModel:
    """The result of :func:`import_onnx`.

    Attributes:
        graph: the graph (nodes in ONNX order, initializers and ``Constant`` nodes as
            constants; nothing optimised yet).
        input_specs, output_specs: one :class:`TensorSpec` per graph input/output, in order.
        opset: the model's default-domain opset version (also in every node's ``"_opset"``).
        shapes: static shapes known for tensors (ONNX shape inference plus the I/O specs);
            ``-1`` marks an unknown dim; tensors of unknown rank are absent.  The optimizer
            uses them to fold ``Shape``/``Size`` of statically shaped tensors.
        dynamic_shapes: the ``dynamic_input`` shape sets (``sets[s][i]``: input ``i`` in
            set ``s``), or ``()`` for a static import.
        raw_outputs: per output, ``(dtype, scale, zero_point)`` when the source file gives
            it an integer type (a quantized TFLite file's ``uint8``/``int8`` outputs), else
            None; ``()`` when none has one.  ``RKNN.inference`` returns such outputs in that
            type, as RKNN-Toolkit2 does.
        raw_inputs: per input, ``(dtype, scale, zero_point)`` of the source file's grid when
            the input takes that file's integer codes (a quantized TFLite file's
            ``uint8``/``int8`` inputs, as RKNN-Toolkit2 feeds them; ``mean_values`` and
            ``std_values`` do not apply to it), else None; ``()`` when none does.
    """

    graph: Graph
    input_specs: List[TensorSpec]
    output_specs: List[TensorSpec]
    opset: int
    shapes: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    dynamic_shapes: ShapeSets = ()
    raw_outputs: Tuple[Optional[Tuple[str, float, int]], ...] = ()
    raw_inputs: Tuple[Optional[Tuple[str, float, int]], ...] = ()


def import_onnx(model, inputs: Optional[Sequence[str]] = None, input_size_list=None,
                outputs: Optional[Sequence[str]] = None, dynamic_input=None, custom_ops=None,
                warn=None, input_initial_val=None) -> ImportedModel:
    """Convert an ONNX model to the runtime's graph IR.

    Args:
        model: a path to a ``.onnx`` file (external data is read from its directory),
            the serialized bytes, or an ``onnx.ModelProto`` (not modified).
        inputs: tensor names to use as the model's inputs, in this order (default: the
            graph inputs that are not initializers).  A name may be an internal tensor:
            the graph is cut there and the tensor becomes an input.
        input_size_list: one shape per input (in ``inputs`` order): fixes dynamic dims,
            and gives the shape of a cut-point input.  Dims the model fixes must agree.
        input_initial_val: one entry per input (in ``inputs`` order), ``None`` or an array:
            an input given an array becomes a constant of that value (cast to its element
            type, reshaped to its shape) and leaves the model's inputs, as RKNN-Toolkit2
            does, with its warning (``warn``) to drop that input's mean/std from config.
        outputs: tensor names to use as outputs (default: the graph outputs); nodes
            that none of them needs are dropped.
        dynamic_input: shape sets ``[[shape_in0, shape_in1, ...], ...]``: each set gives
            one shape per input; the ranks and fixed dims must agree with the model.
            Dims that vary across the sets stay symbolic (``-1``); tensor shapes the
            file declares for inner tensors (``value_info``) are ignored, since they
            may hold one particular size.  With ``input_size_list`` as well, its shapes
            must be one of the sets.
        custom_ops: ``{op_type: custom operator}`` (see :mod:`.custom_op`): nodes of these
            types (any domain) are imported as they are, their output types and shapes
            come from the operator's ``shape_infer``; ``warn(message)`` hears about a
            ``shape_infer`` that fails here.

    Raises:
        ModelInvalidError: unreadable model, unsupported op or domain (naming the op,
            the node and the supported ops), an element type the runtime lacks, bad
            ``inputs``/``outputs``/``input_size_list``/``dynamic_input``.
    """
    import onnx

    proto = _load(model)
    opset = default_opset(proto)
    g = proto.graph
    if len(g.sparse_initializer):
        raise ModelInvalidError("sparse initializers are not supported; densify them first", op=_OP)

    init_names = {t.name for t in g.initializer}
    declared = _declarations(g)
    default_inputs = [vi.name for vi in g.input if vi.name not in init_names]
    in_names = list(inputs) if inputs is not None else default_inputs
    out_names = list(outputs) if outputs is not None else [vi.name for vi in g.output]
    _check_names(in_names, "inputs")
    _check_names(out_names, "outputs")
    if not out_names:
        raise ModelInvalidError("the model has no outputs", op=_OP)
    sizes = _size_list(input_size_list, in_names)
    fixed: Set[str] = set()
    if input_initial_val is not None:
        proto, in_names, sizes, fixed = _fix_inputs(proto, in_names, sizes, input_initial_val, declared, warn,
                                                    copy_first=proto is model)
        g = proto.graph
        init_names = {t.name for t in g.initializer}
        declared = _declarations(g)
    sets: ShapeSets = ()
    if dynamic_input is not None:
        sets = _dynamic_sizes(dynamic_input, in_names, declared, sizes)
        sizes = merge_shapes(sets)

    # Nodes the outputs need, stopping at the chosen inputs.
    producers: Dict[str, int] = {}
    for i, node in enumerate(g.node):
        for name in node.output:
            if name:
                producers[name] = i
    needed = _needed_nodes(g, producers, set(in_names) | fixed, out_names)
    available = set(in_names) | init_names | {n for i in needed for n in g.node[i].output}
    for name in out_names:
        if name not in available:
            what = "a graph input that is not among the chosen inputs" if name in declared else \
                "not a tensor of this model"
            raise ModelInvalidError(f"output {name!r} is {what}", op=_OP)
    for name in in_names:
        if name not in declared and name not in producers and name not in init_names:
            raise ModelInvalidError(f"input {name!r} is not a tensor of this model", op=_OP)
    for i in needed:
        for name in g.node[i].input:
            if name and name not in available:
                if name in declared and name not in producers:
                    raise ModelInvalidError(
                        f"node {g.node[i].name or g.node[i].op_type!r} needs graph input {name!r}, which is not "
                        f"among the chosen inputs {in_names}", op=_OP)
                raise ModelInvalidError(
                    f"node {g.node[i].name or g.node[i].op_type!r} reads tensor {name!r}, which nothing produces",
                    op=_OP)
    nodes = [g.node[i] for i in sorted(needed)]
    custom = dict(custom_ops or {})
    _check_ops([n for n in nodes if n.op_type not in custom and n.op_type not in QDQ_OPS])
    if custom:
        from .custom_op import check_custom_node

        inits = {t.name: t for t in g.initializer}
        for n in nodes:
            if n.op_type in custom:
                check_custom_node(n, custom[n.op_type], inits)

    # Types and shapes: declared ones, refined by ONNX shape inference on the cut model.
    # A dynamic import infers from the inputs alone: declared output shapes may hold one size.
    infer_declared = {n: v if n in in_names else _shapeless(v) for n, v in declared.items()} if sets else declared
    inferred = _infer(proto, onnx, nodes, in_names, sizes, infer_declared, out_names, (custom, opset, warn))
    names = list(declared) + [n for n in inferred if n not in declared]
    types = {name: _merge(_declared_type(declared, name, in_names if sets else None), inferred.get(name))
             for name in names}

    # Constants: the initializers used, then Constant nodes.
    used = {n for node in nodes for n in node.input if n} | set(out_names)
    constants: Dict[str, np.ndarray] = {}
    for t in g.initializer:
        if t.name in used and t.name not in in_names:
            constants[t.name] = _tensor_value(t, f"initializer {t.name!r}")

    graph_nodes: List[Node] = []
    taken = set()
    for i, node in enumerate(nodes):
        if node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS:
            constants[node.output[0]] = _constant_node_value(node, opset)
            continue
        _check_node_types(node)
        _check_attribute_kinds(node, opset)
        name = node.name or f"{node.op_type}_{i}"
        if name in taken:
            k = 1
            while f"{name}_{k}" in taken:
                k += 1
            name = f"{name}_{k}"
        taken.add(name)
        outs = list(node.output)
        while outs and not outs[-1]:
            outs.pop()  # omitted trailing optional outputs
        # An omitted output before a used one still needs a name in the IR.
        outs = [o or f"{name}/unused_output_{k}" for k, o in enumerate(outs)]
        attrs = node_attrs(node, opset)
        # Kernels read the declared output count here (Split into equal parts, MaxPool indices...).
        attrs["_num_outputs"] = len(outs)
        graph_nodes.append(Node(node.op_type, name, list(node.input), outs, attrs))

    input_specs = [_spec(name, types.get(name), sizes[i], "input") for i, name in enumerate(in_names)]
    if warn is not None and not sets:
        for spec in input_specs:
            if any(d < 0 for d in spec.shape):
                warn(f"input {spec.name!r} has dims the model leaves open {list(spec.shape)}: RKNN-Toolkit2 refuses "
                     f"to load such a model ('The input shape ... is not support!'), rknnlite builds one that takes "
                     f"any size there. Fix the shape with input_size_list, or list the sizes with "
                     f"config(dynamic_input=...)")
    output_specs = [_spec(name, _output_type(name, types, constants), None, "output") for name in out_names]
    for name, (elem, _) in types.items():
        if elem is not None and name in available:
            _check_elem(elem, f"tensor {name!r}")

    graph = Graph(graph_nodes, in_names, out_names, constants)
    graph.quant = read_qdq(graph)
    try:
        graph.validate()
    except ModelInvalidError as e:
        raise ModelInvalidError(e.message, op=_OP) from None

    shapes: Dict[str, Tuple[int, ...]] = {}
    for name, (_, shape) in types.items():
        if shape is not None:
            shapes[name] = shape
    for spec in input_specs:
        shapes[spec.name] = spec.shape
    for name, value in constants.items():
        shapes[name] = tuple(value.shape)
    return ImportedModel(graph, input_specs, output_specs, opset, shapes, sets)


# -- loading ---------------------------------------------------------------------------------


def _load(model):
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            return onnx.load_from_string(bytes(model))
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if not os.path.isfile(path):
                raise ModelInvalidError(f"ONNX model file not found: {path}", op=_OP)
            return onnx.load(path)
    except ModelInvalidError:
        raise
    except (DecodeError, OSError, ValueError, RuntimeError) as e:
        raise ModelInvalidError(f"cannot read the ONNX model: {e}", op=_OP) from None
    raise ModelInvalidError(
        f"model must be a path, bytes or an onnx.ModelProto, not {type(model).__name__}", op=_OP)


def _check_names(names, what: str) -> None:
    if not all(isinstance(n, str) and n for n in names):
        raise ModelInvalidError(f"{what} must be a list of tensor names, got {names!r}", op=_OP)
    if len(set(names)) != len(names):
        raise ModelInvalidError(f"{what} name a tensor twice: {names}", op=_OP)


def _size_list(input_size_list, in_names) -> List[Optional[Tuple[int, ...]]]:
    if input_size_list is None:
        return [None] * len(in_names)
    sizes = list(input_size_list)
    if len(sizes) != len(in_names):
        raise ModelInvalidError(
            f"input_size_list has {len(sizes)} shapes for {len(in_names)} inputs ({', '.join(in_names)})", op=_OP)
    out = []
    for name, s in zip(in_names, sizes):
        try:
            dims = tuple(int(d) for d in s)
        except (TypeError, ValueError):
            raise ModelInvalidError(f"input_size_list entry for {name!r} is not a list of ints: {s!r}",
                                    op=_OP) from None
        if any(d < 0 for d in dims) or any(d != v for d, v in zip(dims, s)):
            raise ModelInvalidError(f"input_size_list entry for {name!r} must hold non-negative ints: {s!r}",
                                    op=_OP)
        out.append(dims)
    return out


def _fix_inputs(proto, in_names, sizes, values, declared, warn, copy_first: bool):
    """``input_initial_val``: the inputs given a value become initializers of ``proto``, or of a
    copy of it with ``copy_first`` (the caller's ModelProto; a model read from a path or bytes
    is changed in place); returns that model, the remaining inputs and their sizes, and the
    names fixed."""
    import onnx
    from onnx import numpy_helper

    if not isinstance(values, (list, tuple)) or len(values) != len(in_names):
        count = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise ModelInvalidError(f"input_initial_val must be a list with one entry (None or an array) per input "
                                f"({', '.join(in_names)}), got {count}", op=_OP)
    if all(v is None for v in values):
        return proto, in_names, sizes, set()
    if copy_first:
        proto = copy.deepcopy(proto)
    g = proto.graph
    keep = []
    fixed = set()
    for name, size, value in zip(in_names, sizes, values):
        if value is None:
            keep.append((name, size))
            continue
        elem, shape = _value_type(declared[name]) if name in declared else (None, None)
        shape = size if size is not None else shape
        if shape is None or any(d < 0 for d in shape):
            raise ModelInvalidError(f"input_initial_val for {name!r}: its shape is not known; give it in "
                                    f"input_size_list", op=_OP)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(getattr(onnx.TensorProto, elem)) if elem else np.float32
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise ModelInvalidError(f"input_initial_val for {name!r} must be numeric, not {array.dtype}", op=_OP)
        if array.size == int(np.prod(shape, dtype=np.int64)):
            array = array.reshape(shape)
        else:
            try:
                array = np.broadcast_to(array, shape)
            except ValueError:
                raise ModelInvalidError(f"input_initial_val for {name!r} has shape {list(array.shape)}; the input "
                                        f"is {list(shape)}", op=_OP) from None
        g.initializer.append(numpy_helper.from_array(np.ascontiguousarray(array, dtype=dtype), name))
        fixed.add(name)
        if warn is not None:
            warn(f"The input {name!r} will be removed from the model, please don't forget to remove the "
                 f"corresponding 'mean'/'std' of {name!r} in rknn.config!")
    kept_inputs = [vi for vi in g.input if vi.name not in fixed]
    del g.input[:]
    g.input.extend(kept_inputs)
    return proto, [n for n, _ in keep], [s for _, s in keep], fixed


def _dynamic_sizes(dynamic_input, in_names, declared, sizes) -> ShapeSets:
    """The validated shape sets, checked against the declared inputs and ``input_size_list``."""
    try:
        sets = validate_shape_sets(dynamic_input)
    except ValueError as e:
        raise ModelInvalidError(str(e), op=_OP) from None
    shapes = [_value_type(declared[n])[1] if n in declared else None for n in in_names]
    check_sets_against_inputs(sets, in_names, shapes, op=_OP)
    if any(s is not None for s in sizes):
        given = tuple(tuple(s) if s is not None else None for s in sizes)
        if not any(given == shape_set for shape_set in sets):
            raise ModelInvalidError(
                f"input_size_list {[list(s) for s in given]} is none of the dynamic_input sets "
                f"{[[list(x) for x in st] for st in sets]}; leave input_size_list out (the sets give the shapes)",
                op=_OP)
    return sets


def _declared_type(declared, name: str, keep_shapes_of: Optional[Sequence[str]]):
    """The type the file declares for ``name``; with ``keep_shapes_of`` (dynamic imports)
    only those tensors keep their declared shape: an inner or output tensor's declared
    shape may be one particular size of a symbolic dim."""
    if name not in declared:
        return None
    elem, shape = _value_type(declared[name])
    if keep_shapes_of is not None and name not in keep_shapes_of:
        shape = None
    return elem, shape


def _shapeless(vi):
    """A tensor declaration without its shape (other kinds of values unchanged)."""
    from onnx import helper

    if vi.type.WhichOneof("value") != "tensor_type":
        return vi
    return helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, None)


def _needed_nodes(g, producers, stop: set, out_names) -> set:
    needed = set()
    stack = [n for n in out_names if n not in stop]
    seen = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        i = producers.get(name)
        if i is None or i in needed:
            continue
        needed.add(i)
        for inp in g.node[i].input:
            if inp and inp not in stop and inp not in seen:
                stack.append(inp)
    return needed


def _check_ops(nodes) -> None:
    from ..backends.software.ops import KERNELS, supported_ops

    for node in nodes:
        label = node.name or "<unnamed>"
        if node.domain not in _DEFAULT_DOMAINS:
            raise ModelInvalidError(
                f"op {node.domain}::{node.op_type} (node {label!r}) is in a non-default domain; only the "
                f"ONNX default domain is supported: {', '.join(supported_ops())}", op=_OP)
        if node.op_type != "Constant" and node.op_type not in KERNELS:
            raise ModelInvalidError(
                f"unsupported op {node.op_type!r} (node {label!r}); supported ops: {', '.join(supported_ops())}",
                op=_OP)


# -- types -----------------------------------------------------------------------------------


def _elem_name(elem_type: int) -> str:
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"<type {elem_type}>"


def _check_elem(elem: str, what: str) -> None:
    if elem in UNSUPPORTED_ELEM_TYPES or elem not in ONNX_DTYPES:
        raise ModelInvalidError(
            f"{what} has element type {elem}, which the runtime has no tensor type for "
            f"(supported: {', '.join(ONNX_DTYPES)})", op=_OP)


def _value_type(vi) -> Tuple[Optional[str], Optional[Tuple[int, ...]]]:
    """``(elem type name or None, shape with -1 for unknown dims, or None if unknown rank)``."""
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        if kind is None:
            return None, None
        raise ModelInvalidError(f"tensor {vi.name!r} is a {kind} value; only tensors are supported", op=_OP)
    tt = vi.type.tensor_type
    elem = _elem_name(tt.elem_type) if tt.elem_type else None
    if not tt.HasField("shape"):
        return elem, None
    dims = tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else -1 for d in tt.shape.dim)
    return elem, dims


def _merge(a, b):
    """Combine two ``(elem, shape)`` guesses for one tensor, preferring known parts of ``a``."""
    if a is None:
        return b
    if b is None:
        return a
    elem = a[0] or b[0]
    if a[1] is None or (b[1] is not None and len(a[1]) != len(b[1])):
        shape = b[1] if a[1] is None else a[1]
    elif b[1] is None:
        shape = a[1]
    else:
        shape = tuple(x if x >= 0 else y for x, y in zip(a[1], b[1]))
    return elem, shape


def _infer(proto, onnx, nodes, in_names, sizes, declared, out_names, custom=None) -> Dict[str, Tuple]:
    """Types and shapes by ONNX shape inference on the cut graph with the fixed input sizes
    (``custom``: ``(custom ops, opset, warn)`` for :func:`.custom_op.infer_with_custom_ops`)."""
    from onnx import helper

    g = proto.graph
    pre = {}
    if any(n not in declared for n in in_names):
        pre = _run_inference(proto, onnx, custom)  # the types of cut-point inputs
    inputs = []
    for name, size in zip(in_names, sizes):
        vi = declared.get(name)
        elem, shape = _value_type(vi) if vi is not None else pre.get(name, (None, None))
        if elem is None:
            init = next((t for t in g.initializer if t.name == name), None)
            elem = _elem_name(init.data_type) if init is not None else "FLOAT"
            if shape is None and init is not None:
                shape = tuple(init.dims)
        if size is not None:
            shape = _fix_shape(name, shape, size)
        if shape is None:
            inputs.append(helper.make_tensor_value_info(name, getattr(onnx.TensorProto, elem, 1), None))
        else:
            inputs.append(helper.make_tensor_value_info(
                name, getattr(onnx.TensorProto, elem, 1), [d if d >= 0 else None for d in shape]))
    outputs = [declared[n] for n in out_names if n in declared]
    in_set = set(in_names)
    used = {n for node in nodes for n in node.input}
    # Inference needs the values of small (shape-like) initializers only; big ones are
    # declared as typed inputs so that their data is not copied.
    inits, weight_inputs = [], []
    for t in g.initializer:
        if t.name not in used or t.name in in_set:
            continue
        if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) or int(np.prod(t.dims)) <= 1024:
            inits.append(t)
        else:
            weight_inputs.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    # The original value_info is left out: fixed sizes and cuts may contradict it.
    cut = helper.make_graph(nodes, g.name or "graph", inputs + weight_inputs, outputs, inits)
    model = helper.make_model(cut, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    result = _run_inference(model, onnx, custom)
    for vi in inputs:
        result[vi.name] = _value_type(vi)
    for vi in weight_inputs:
        result.pop(vi.name, None)
    return result


def _run_inference(model, onnx, custom=None) -> Dict[str, Tuple]:
    def infer(m):
        try:
            return onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
        except Exception:  # inference is a help, not a requirement (e.g. models over 2 GB)
            return m

    if custom and custom[0]:
        from .custom_op import infer_with_custom_ops

        inferred = infer_with_custom_ops(model, custom[0], infer, custom[1], custom[2])
    else:
        inferred = infer(model)
    out = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        try:
            out[vi.name] = _value_type(vi)
        except ModelInvalidError:
            continue
    return out


def _fix_shape(name: str, shape, size: Tuple[int, ...]) -> Tuple[int, ...]:
    if shape is None:
        return size
    if len(shape) != len(size):
        raise ModelInvalidError(
            f"input_size_list gives {name!r} shape {list(size)}, but the model says rank {len(shape)} "
            f"({list(shape)})", op=_OP)
    for d, s in zip(shape, size):
        if d >= 0 and d != s:
            raise ModelInvalidError(
                f"input_size_list gives {name!r} shape {list(size)}, but the model fixes it to {list(shape)}",
                op=_OP)
    return tuple(size)


def _declarations(g) -> Dict[str, object]:
    """The graph's ValueInfo per tensor name.  A tensor declared twice keeps its graph input's
    declaration, then its graph output's: a graph that passes an input through as an output
    declares it twice, and the output's often has no shape."""
    return {vi.name: vi for vi in list(g.value_info) + list(g.output) + list(g.input)}


def _spec(name: str, t, size, what: str) -> TensorSpec:
    elem, shape = t if t is not None else (None, None)
    if elem is None:
        elem = "FLOAT"
    _check_elem(elem, f"{what} {name!r}")
    if size is not None:
        shape = _fix_shape(name, shape, size)
    if shape is None:
        if what == "input":
            raise ModelInvalidError(
                f"input {name!r} has no known shape; give it with input_size_list", op=_OP)
        shape = ()
        unknown_rank = True
    else:
        unknown_rank = False
    dtype = ONNX_DTYPES[elem]
    layout = tensor_layout(dtype, shape) if not unknown_rank else "UNDEFINED"
    return TensorSpec(name, tuple(shape), dtype, layout)


def tensor_layout(dtype: str, shape: Sequence[int]) -> str:
    """The layout of an imported I/O tensor: ``"NCHW"`` for 4-D float32, else ``"UNDEFINED"``."""
    return "NCHW" if len(shape) == 4 and dtype == "float32" else "UNDEFINED"


def _output_type(name, types, constants):
    t = types.get(name)
    if (t is None or t[0] is None) and name in constants:
        c = constants[name]
        return (_numpy_elem(c.dtype), tuple(c.shape))
    return t


def _numpy_elem(dtype: np.dtype) -> str:
    from onnx import helper

    return _elem_name(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def _check_node_types(node) -> None:
    from onnx import TensorProto

    if node.op_type == "Cast":
        for a in node.attribute:
            if a.name == "to":
                _check_elem(_elem_name(a.i), f"node {node.name or node.op_type!r} (Cast) target")
    for a in node.attribute:
        if a.type == a.TENSOR and a.t.data_type not in (TensorProto.UNDEFINED,):
            _check_elem(_elem_name(a.t.data_type), f"attribute {a.name!r} of node {node.name or node.op_type!r}")


def _check_attribute_kinds(node, opset: int) -> None:
    """Refuse an attribute whose kind is not the one ONNX declares for the op at ``opset`` (a
    single int where a list of ints is due, a float for an int...): the kernels would refuse
    the built file at load.  Ops and attributes ONNX does not declare are left to the kernels."""
    from onnx import AttributeProto, defs

    if node.domain not in _DEFAULT_DOMAINS:
        return
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        return
    for a in node.attribute:
        declared = schema.attributes.get(a.name)
        if declared is None or a.type == AttributeProto.UNDEFINED or a.type == declared.type:
            continue
        raise ModelInvalidError(
            f"attribute {a.name!r} of node {node.name or node.op_type!r} ({node.op_type}) is "
            f"{AttributeProto.AttributeType.Name(a.type)}; ONNX declares {node.op_type}'s {a.name} as "
            f"{AttributeProto.AttributeType.Name(int(declared.type))}", op=_OP)


def _tensor_value(t, what: str) -> np.ndarray:
    from onnx import numpy_helper

    elem = _elem_name(t.data_type)
    if elem in UNSUPPORTED_ELEM_TYPES or elem not in ONNX_DTYPES:
        raise ModelInvalidError(f"{what} has element type {elem}, which the runtime has no tensor type for",
                                op=_OP)
    try:
        value = numpy_helper.to_array(t)
    except Exception as e:  # e.g. external data that could not be found
        raise ModelInvalidError(f"cannot read {what}: {e}", op=_OP) from None
    return np.asarray(value)


def _constant_node_value(node, opset: int) -> np.ndarray:
    label = node.name or node.output[0]
    for a in node.attribute:
        if a.name == "value":
            return _tensor_value(a.t, f"Constant node {label!r}")  # exact dtype, element type checked
    from ..backends.software.ops import KERNELS

    spec = KERNELS["Constant"]  # value_float(s) / value_int(s); clear errors for the rest
    try:
        return spec.fn([], spec.prepare(node_attrs(node, opset), []))[0]
    except ModelInvalidError as e:
        raise ModelInvalidError(f"Constant node {label!r}: {e.message}", op=_OP) from None
