"""The graph inside a Rockchip ``.rknn`` FlatBuffer: subgraphs, tensors, nodes, buffers.

Slots and enum values (``shared/reference/rknn-graph-execution.md`` §1) were observed on
RKNN-Toolkit2 2.5.0 files.  Every value this module does not know (a dtype, a layout, a
tensor kind) raises :class:`~rknnlite.errors.ModelInvalidError` naming it and where it was
found: nothing is guessed.  An unknown parameter-union type is kept so the file's ops can
still be listed (``rknnlite inspect``); :meth:`VendorNode.check_params` refuses it.

Nothing here copies weights: :meth:`VendorFile.buffer` returns a read-only memoryview
of the file's bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ...errors import ModelInvalidError
from ..flatbuf import FlatBuffer, Table
from ..packed import PackedSections
from ..schema import DTYPES, V6, Schema
from .bson import decode_bson

__all__ = ["VendorTensor", "VendorNode", "VendorSubgraph", "VendorFile", "PackedVendorFile", "read_vendor_graph",
           "DTYPES", "LAYOUTS", "KINDS", "PARAM_TYPES", "UNREAD", "is_helper"]

#: Tensor slot 1: layout code -> name.
LAYOUTS = {0: "plain", 1: "NHWC", 2: "NCHW", 64: "NC1HWC2", 65: "weight"}
#: Tensor slot 2: kind code -> name.
KINDS = {0: "none", 1: "input", 2: "output", 3: "activation", 4: "const", 5: "shape", 6: "lut",
         8: "generated", 9: "regcmd", 10: "task"}
#: Node slot 7: parameter-union type -> the op family whose table it is.
PARAM_TYPES = {0: "none", 1: "conv", 2: "deconv", 3: "maxpool", 5: "avgpool", 9: "leakyrelu", 17: "batchnorm",
               19: "concat", 20: "split", 25: "transpose", 26: "resize", 30: "pad", 50: "gather", 51: "argmax",
               53: "reduce", 54: "reduce", 61: "softmax", 79: "erf", 87: "norm", 98: "lstm"}
#: Tensor kinds whose data is in a buffer.
CONST_KINDS = ("const", "shape", "lut", "generated", "regcmd", "task")



@dataclass(frozen=True)
class VendorTensor:
    """One tensor of a subgraph.

    Attributes:
        index: position in the subgraph's tensor table (what nodes refer to).
        name: its name (may be empty, and is not unique in every file).
        dtype / layout / kind: the decoded enum names (:data:`DTYPES`, :data:`LAYOUTS`,
            :data:`KINDS`).
        npu_shape: the NPU shape (NC1HWC2 for activations; 6-tuples of weight tiles).
        shape: the model (ONNX) shape.
        scale / zero_point: int8 activation quantization (empty when absent).
        buffer: index into the file's buffers for constants (0 = none).
        size: byte size on the NPU.
        offset: an rv1106 container's constant: its byte offset in the weight section (the
            generated section for the compiler's own constants); ``None`` in other files.
    """

    index: int
    name: str
    dtype: str
    layout: str
    kind: str
    npu_shape: Tuple[int, ...]
    shape: Tuple[int, ...]
    scale: Tuple[float, ...] = ()
    zero_point: Tuple[int, ...] = ()
    buffer: int = 0
    size: int = 0
    offset: Optional[int] = None

    @property
    def is_const(self) -> bool:
        """Whether the tensor's data is stored in the file."""
        return self.kind in CONST_KINDS


#: The tensor index a node's output has when nothing reads it (a Split's discarded part).
UNREAD = -1


@dataclass(frozen=True)
class VendorNode:
    """One vendor operator.

    Attributes:
        index: position in the subgraph's node table (tasks' ``op_idx`` refer to it).
        op: the vendor op type (``"ConvRelu"``, ``"exSoftmax13"``, ...).
        name: ``"Type:onnx_node"``, empty for compiler-inserted nodes.
        inputs / outputs: tensor indices; an output the graph never reads may be
            :data:`UNREAD` (-1: a Split part the model discards).
        param_type: the parameter-union type (:data:`PARAM_TYPES`; an unknown one is
            kept and refused by :meth:`check_params`, so a file can still be listed).
        params: the decoded parameter table (``{}`` when there is none).
        bson: the raw BSON blob of the original ONNX attributes (:attr:`attrs` decodes it).
        recovered: for a node of a file that stores no attributes (an rv1106 container), the
            attributes recovered from its registers and tensor shapes (:mod:`.t3nodes`), in the
            BSON's ``{"dtype", "value"}`` form; ``None`` for the nodes of other files.
    """

    index: int
    op: str
    name: str
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    param_type: int = 0
    params: Dict[str, Any] = field(default_factory=dict)
    bson: bytes = field(default=b"", repr=False)
    where: str = field(default="", repr=False)
    recovered: Optional[Dict[str, Any]] = field(default=None, repr=False)

    @property
    def attrs(self) -> Dict[str, Any]:
        """The original ONNX attributes, ``{name: {"dtype": ..., "value": ...}}``, decoded from
        the BSON blob on each access (only the ops that need them read it; some files
        leave garbage in blobs nobody reads), or the recovered ones."""
        if self.bson:
            return decode_bson(self.bson, self.where)
        return dict(self.recovered or {})

    def check_params(self) -> None:
        """Raise ModelInvalidError naming an unknown parameter-union type."""
        if self.param_type not in PARAM_TYPES:
            known = ", ".join(f"{k} {v}" for k, v in PARAM_TYPES.items())
            raise ModelInvalidError(f"{self.where} has unknown parameter-union type code {self.param_type} "
                                    f"(known: {known})", op="load")

    @property
    def label(self) -> str:
        """How messages name the node: ``node 3 (ConvRelu 'Conv:conv')``."""
        return f"node {self.index} ({self.op}{' ' + repr(self.name) if self.name else ''})"


@dataclass(frozen=True)
class VendorSubgraph:
    """One compiled graph (a dynamic-shape file has one per shape set).

    ``preproc[i]`` is ``(mean, std, channel_order)`` of input ``i`` as stored (at most 4
    channels; the Description holds the full lists)."""

    index: int
    tensors: Tuple[VendorTensor, ...]
    nodes: Tuple[VendorNode, ...]
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    preproc: Tuple[Tuple[Tuple[float, ...], Tuple[float, ...], Tuple[int, ...]], ...] = ()

    def tensor(self, index: int, where: str) -> VendorTensor:
        """Tensor ``index``; ModelInvalidError naming ``where`` when it does not exist."""
        if not 0 <= index < len(self.tensors):
            raise ModelInvalidError(f"{where} refers to tensor {index}; subgraph {self.index} has "
                                    f"{len(self.tensors)} tensors", op="load")
        return self.tensors[index]


@dataclass(frozen=True)
class VendorFile:
    """The decoded graph part of a vendor file: its subgraphs and its buffers."""

    label: str
    subgraphs: Tuple[VendorSubgraph, ...]
    _buffers: Any = field(repr=False)

    @property
    def num_buffers(self) -> int:
        """Entries of the buffer table (buffer 0 is the empty one)."""
        return len(self._buffers) if self._buffers is not None else 0

    def buffer(self, index: int, where: str) -> memoryview:
        """The bytes of buffer ``index`` (read-only view of the file, no copy)."""
        if not 0 < index < self.num_buffers:
            raise ModelInvalidError(f"{self.label}: {where} refers to buffer {index}; the file has "
                                    f"{self.num_buffers} buffers (1..{self.num_buffers - 1} hold data)", op="load")
        vec = self._buffers.table(index, "Buffer").vector(0, 1)
        return memoryview(b"") if vec is None else vec.raw().toreadonly()

    def tensor_data(self, sg: VendorSubgraph, tensor: VendorTensor, need: int = 0) -> memoryview:
        """The stored bytes of a constant tensor (empty for a constant stored without a
        buffer, e.g. an empty ``roi`` input).  ``need``: the bytes the caller reads (only an rv1106
        container's unsized constants use it: :meth:`PackedVendorFile.tensor_data`)."""
        where = f"subgraph {sg.index} tensor {tensor.index} ({tensor.name!r})"
        if not tensor.is_const:
            raise ModelInvalidError(f"{self.label}: {where} is a {tensor.kind} tensor, not stored data", op="load")
        if tensor.buffer == 0:
            return memoryview(b"")
        return self.buffer(tensor.buffer, where)


@dataclass(frozen=True)
class PackedVendorFile(VendorFile):
    """The graph of an rv1106 container: its constants, task records and register commands are
    sections of the file (``packed``: :class:`~rknnlite.model.packed.PackedSections`), not
    buffers (it has none)."""

    _payload: Any = field(default=None, repr=False)
    packed: Optional[PackedSections] = None

    def tensor_data(self, sg: VendorSubgraph, tensor: VendorTensor, need: int = 0) -> memoryview:
        """A constant's bytes from the weight section (``offset``, ``size``; shape constants too: a
        Split's sizes, a Reshape's target, a Clip's bounds, a Pad's pads, each in 64 bytes of its
        own), the generated section for the compiler's own constants; the "task" and "regcmd"
        tensors' from their sections.  Read-only views of the file, no copy.

        ``need``: the bytes the caller reads.  RKNN-Toolkit2 2.2.0 to 2.3.2 record some constants
        (an element-wise Add's, Sub's or Mul's operand) with size 0 and pack their bytes at their
        offset, unpadded, the next constant right after them (the task reads them there: its
        operand address is that offset); such a constant gives its ``need`` bytes, provided no other
        tensor of the section starts inside them."""
        where = f"subgraph {sg.index} tensor {tensor.index} ({tensor.name!r})"
        if not tensor.is_const:
            raise ModelInvalidError(f"{self.label}: {where} is a {tensor.kind} tensor, not stored data", op="load")
        if tensor.kind in ("task", "regcmd"):
            start, size = getattr(self.packed, "tasks" if tensor.kind == "task" else "regcmd")
            return self._payload[start:start + size]
        name = "generated" if tensor.kind == "generated" else "weights"
        start, section = getattr(self.packed, name)
        offset = tensor.offset or 0
        size = tensor.size
        if size == 0 and need > 0 and tensor.offset is not None:
            inside = [t.name for t in sg.tensors if t.is_const and t is not tensor and t.offset is not None
                      and (t.kind == "generated") == (tensor.kind == "generated") and offset < t.offset < offset + need]
            if inside:
                raise ModelInvalidError(f"{self.label}: {where} is recorded with 0 bytes; the {need} bytes it needs at "
                                        f"offset {offset} of the {name} section would run into {inside[0]!r}",
                                        op="load")
            size = need
        if offset + size > section:
            raise ModelInvalidError(f"{self.label}: {where} takes {size} bytes at offset {offset} of the "
                                    f"{section}-byte {name} section", op="load")
        return self._payload[start + offset:start + offset + size]


def read_vendor_graph(payload, offset: int, size: int, label: str, schema: Schema = V6,
                      packed: Optional[PackedSections] = None) -> VendorFile:
    """Decode the subgraphs of the FlatBuffer at ``payload[offset:offset+size]`` (for versions
    1-6 the model section: ``header_size`` and ``model_size`` as
    :func:`rknnlite.model.rockchip.read_rockchip` reports them; in general its ``graph_offset``,
    ``graph_size``, ``schema`` and ``packed``).  ``packed``: the sections of an rv1106 container,
    whose constants are in its weight section (:class:`PackedVendorFile`)."""
    fb = FlatBuffer(payload, offset, size, label)
    root = fb.root("Model")
    vec = root.vector(schema.m_subgraphs)
    if vec is None or len(vec) == 0:
        raise ModelInvalidError(f"{label}: the FlatBuffer Model has no subgraphs", op="load")
    subgraphs = tuple(_subgraph(vec.table(i, "Subgraph"), i, label, schema) for i in range(len(vec)))
    if packed is not None:
        return PackedVendorFile(label, subgraphs, None, memoryview(payload).toreadonly(), packed)
    if schema.m_buffers is None:
        raise ModelInvalidError(f"{label}: a {schema.name} graph keeps its constants in the container's sections, "
                                "which were not given", op="load")
    return VendorFile(label, subgraphs, root.vector(schema.m_buffers))


def _error(label: str, message: str) -> ModelInvalidError:
    return ModelInvalidError(f"{label}: {message}", op="load")


def _enum(table: Dict[int, str], code: int, what: str, where: str, label: str) -> str:
    name = table.get(code)
    if name is None:
        known = ", ".join(f"{k} {v}" for k, v in table.items())
        raise _error(label, f"{where} has unknown {what} code {code} (known: {known})")
    return name


def _subgraph(sg: Table, index: int, label: str, schema: Schema) -> VendorSubgraph:
    tensors = tuple(_tensor(t, i, index, label, schema) for i, t in enumerate(sg.tables(schema.sg_tensors) or ()))
    nodes = tuple(_node(n, i, index, label, schema) for i, n in enumerate(sg.tables(schema.sg_nodes) or ()))
    preproc = []
    for p in (sg.tables(schema.sg_preproc) if schema.sg_preproc is not None else None) or ():
        preproc.append((tuple(p.scalars(0, "f32") or ()), tuple(p.scalars(1, "f32") or ()),
                        tuple(p.scalars(2, "i32") or ())))
    result = VendorSubgraph(index, tensors, nodes, tuple(sg.scalars(schema.sg_inputs, "i32") or ()),
                            tuple(sg.scalars(schema.sg_outputs, "i32") or ()), tuple(preproc))
    for t in result.inputs + result.outputs:
        result.tensor(t, f"{label}: subgraph {index} I/O list")
    for node in nodes:
        for t in node.inputs + tuple(t for t in node.outputs if t != UNREAD):
            result.tensor(t, f"{label}: subgraph {index} {node.label}")
    return result


def _tensor(t: Table, index: int, sg: int, label: str, schema: Schema) -> VendorTensor:
    name = t.string(schema.t_name, "") or ""
    where = f"subgraph {sg} tensor {index} ({name!r})"
    dtype = _enum(DTYPES, t.u8(schema.t_dtype), "dtype", where, label)
    layout = _enum(LAYOUTS, t.u8(schema.t_layout), "layout", where, label)
    kind = _enum(KINDS, t.u8(schema.t_kind), "tensor kind", where, label)
    if (dtype == "none") != (kind == "none"):
        raise _error(label, f"{where}: dtype {dtype} with tensor kind {kind} (only the empty tensor has neither)")
    tensor = VendorTensor(
        index=index, name=name, dtype=dtype, layout=layout, kind=kind,
        npu_shape=tuple(t.scalars(schema.t_npu_shape, "i32") or ()),
        shape=tuple(t.scalars(schema.t_shape, "i32") or ()),
        scale=tuple(t.scalars(schema.t_scale, "f32") or ()),
        zero_point=tuple(t.scalars(schema.t_zero_point, "i32") or ()),
        buffer=t.u32(schema.t_buffer) if schema.t_buffer is not None else 0, size=t.u32(schema.t_size),
        offset=t.u32(schema.t_offset) if schema.t_offset is not None else None,
    )
    return tensor


def _node(n: Table, index: int, sg: int, label: str, schema: Schema) -> VendorNode:
    op = n.string(schema.n_type, "") or ""
    name = n.string(schema.n_name, "") or ""
    where = f"subgraph {sg} node {index} ({op} {name!r})"
    if not op:
        raise _error(label, f"subgraph {sg} node {index} has no op type")
    if schema.n_bson is None:  # T3: no BSON; only the parameter tables decoded there (.t3nodes)
        param_type = n.u8(schema.n_param_type)
        family = PARAM_TYPES.get(param_type) if param_type in _T3_PARAMS else None
        table = n.table(schema.n_param, "Param") if family else None
        return VendorNode(index, op, name, tuple(n.scalars(schema.n_inputs, "i32") or ()),
                          tuple(n.scalars(schema.n_outputs, "i32") or ()), param_type if family else 0,
                          _t3_params(family, table) if table is not None else {}, where=f"{label}: {where}")
    param_type = n.u8(schema.n_param_type)
    family = PARAM_TYPES.get(param_type)
    table = n.table(schema.n_param, "Param")
    if family not in (None, "none") and table is None:
        raise _error(label, f"{where} declares a {family} parameter table but has none")
    params = _params(family, table) if table is not None and family is not None else {}
    raw = n.scalars(schema.n_bson, "u8")
    return VendorNode(index, op, name, tuple(n.scalars(schema.n_inputs, "i32") or ()),
                      tuple(n.scalars(schema.n_outputs, "i32") or ()), param_type, params, bytes(raw or b""),
                      f"{label}: {where}")


#: the parameter-union types of an rv1106 graph whose tables were decoded (their slots as V6's, an
#: absent field its default): resize, softmax, split, concat, argmax, transpose
_T3_PARAMS = (26, 61, 20, 19, 51, 25)


def _t3_params(family: str, p: Table) -> Dict[str, Any]:
    """An rv1106 node's parameter table.  Besides V6's families, a Concat's and an ArgMax's hold
    the axis in slot 0, a Transpose's the permutation; ``_slots`` lists the table's fields (an
    ArgMax with more than its axis has a keepdims or select_last_index that was never observed)."""
    if family in ("concat", "argmax"):
        return {"axis": p.i32(0, 0), "_slots": [s for s in range(8) if p.has(s)]}
    if family == "split":
        return {"axis": p.i32(0, 0), "split": list(p.scalars(1, "i32") or ())}
    if family == "transpose":  # V6 keeps the permutation in the BSON
        return {"perm": list(p.scalars(0, "i32") or ())}
    return _params(family, p)


def _params(family: str, p: Table) -> Dict[str, Any]:
    if family == "deconv":  # its other slots are not the conv table's: only these were checked
        return {"auto_pad": p.string(0, "NOTSET"), "dilations": list(p.scalars(1, "i32") or (1, 1)),
                "kernel_shape": list(p.scalars(3, "i32") or ())}
    if family == "conv":
        out = {"auto_pad": p.string(0, "NOTSET"), "dilations": list(p.scalars(1, "i32") or (1, 1)),
               "group": p.i32(2, 1), "kernel_shape": list(p.scalars(3, "i32") or ()),
               "pads": list(p.scalars(4, "i32") or (0, 0, 0, 0)), "strides": list(p.scalars(5, "i32") or (1, 1))}
        return out
    if family == "softmax":
        return {"axis": p.i32(0, 1)}
    if family == "split":
        return {"axis": p.i32(0, 0), "split": list(p.scalars(1, "i32") or ())}
    if family == "norm":  # exNorm (LayerNorm): also in the BSON as mode / eps / axes
        return {"mode": p.string(0), "eps": p.f32(1, float("nan")), "axes": list(p.scalars(2, "i32") or ())}
    if family == "resize":
        return {"coordinate_transformation_mode": p.string(0), "mode": p.string(4), "nearest_mode": p.string(5)}
    if family == "batchnorm":  # slot 1: the training momentum (the BSON has both)
        return {"epsilon": p.f32(0, 0.0)}
    if family == "pad":  # slot 0: the ONNX mode string (the BSON has it too)
        return {"mode": p.string(0)}
    if family == "leakyrelu":  # a standalone LeakyRelu (Abs: slope -1); the BSON has alpha too.  ONNX's default
        # 0.01 is the slot's default: the FlatBuffer leaves it out (checked on RKNN-Toolkit2 2.5.0's files)
        return {"alpha": p.f32(0, 0.01)}
    if family == "reduce":  # ReduceMax (53), ReduceMin (54): slot 0 a one-byte vector, keepdims (the BSON has it too)
        return {"keepdims": list(p.scalars(0, "u8") or ())}
    if family == "concat":  # slot 0: the axis (the BSON has it too, but for the compiler's own Concats)
        return {"axis": p.i32(0, 0)}
    if family == "lstm":  # exLSTM and LSTM (.recurrent): ONNX's attributes and the compiler's layouts
        return {"activation_alpha": tuple(p.scalars(0, "f32") or ()),
                "activation_beta": tuple(p.scalars(1, "f32") or ()), "activations": tuple(p.strings(2) or ()),
                "batch": p.i32(3, 0), "direction": p.string(5),
                "hidden_size": p.i32(6, 0), "input_layout": p.string(8), "output_layout": p.string(9),
                "seq_length": p.i32(11, 0), "_slots": [s for s in range(16) if p.has(s)],
                **({"clip": p.f32(4)} if p.has(4) else {})}
    return {}  # maxpool, avgpool, transpose, erf: their attributes (if any) are in the BSON


def is_helper(t: VendorTensor) -> bool:
    """An NPU scratch activation a node lists as an input (``*_exSecondary``, rk3562's
    ``*_exSecondary0``/``1`` output conversions, ``empty_placeholder_*``): not data the CPU
    computation reads."""
    return re.search(r"_exSecondary\d*$", t.name) is not None or t.name.startswith("empty_placeholder_")


def attr_value(node: VendorNode, name: str, default=None):
    """The value of ONNX attribute ``name`` from a node's BSON (``{"dtype", "value"}``
    entries), or ``default``."""
    entry = node.attrs.get(name)
    if isinstance(entry, dict) and "value" in entry:
        return entry["value"]
    return default if entry is None else entry
