"""TensorFlow Lite -> :class:`~rknnlite.toolkit.onnx_import.ImportedModel` (``RKNN.load_tflite``).

:func:`load_tflite` reads a ``.tflite`` FlatBuffer with the ``tflite`` schema package
(PyPI ``tflite``, which needs ``flatbuffers``; both imported lazily), rewrites the first
subgraph as an ONNX graph (opset 14) in the IR's NCHW layout and hands it to
:func:`~rknnlite.toolkit.onnx_import.import_onnx`, so the supported-op list, shape
inference and every later build step are the ONNX path's.

Layout (the decision, see ``docs/toolkit-loaders.md``):

* TFLite keeps activations NHWC, convolution weights OHWI and depthwise weights 1HWO.
  Inside the converted graph every 4-D activation is NCHW and weights are OIHW (a
  depthwise conv is a Conv with ``group = input channels``, ``depth_multiplier``
  output channels per group).  Operands that must be read in TFLite order (the flatten
  before FULLY_CONNECTED, RESHAPE, TRANSPOSE, ...) get a ``Transpose`` in front.
* A 4-D model input is ``NCHW`` ``[N, C, H, W]``, like every 4-D float input of this
  toolkit's models: ``RKNN.inference`` and ``RKNNLite.inference`` take NHWC data by
  default (``data_format='nhwc'``, the TFLite interpreter's arrays) and transpose it, and
  ``mean_values``/``std_values`` and calibration images work unchanged.
* A 4-D model output is transposed back and returned in TFLite's NHWC layout (spec
  layout ``"NHWC"``): outputs equal the TFLite interpreter's, as the vendor toolkit
  keeps a TFLite model's original output layout.
* ``SAME`` padding becomes ``auto_pad="SAME_UPPER"`` (TFLite puts the odd pixel at the
  end), ``VALID`` no padding.

Quantized models: a file whose activations are int8/uint8 (TFLite's post-training or
quantization-aware integer models) keeps its own parameters, except that an int8 grid with
zero point 0 becomes the symmetric one RKNN-Toolkit2 gives it (``scale * 128/127``, weights
re-rounded onto it: :func:`~rknnlite.toolkit.qdq.symmetric_grids`).  Weights and biases are
stored dequantized (``(q - zero_point) * scale``, exactly on their grids) and the
quantization table goes into ``ImportedModel.graph.quant``: activations per tensor,
weights per output channel (``QuantParams.axis`` follows the weight's new layout).
uint8 tensors become the runtime's asymmetric int8 by shifting their zero point by
-128 (the grid is the same).  ``RKNN.build(do_quantization=False)`` then builds an int8
model with those parameters without calibration; ``do_quantization=True`` is refused, as
RKNN-Toolkit2 refuses it (calibration would replace them).  ``QUANTIZE`` (float -> int)
and ``DEQUANTIZE`` (int -> float, also float16 -> float32 weights) are no nodes: both
sides are one tensor carrying the int side's parameters.  A uint8/int8 model input takes
the file's codes (``input_is_quant``, see :func:`load_tflite`).  A file with float
activations and int8 weights (dynamic-range "hybrid" models) is loaded as a float model
with the weights dequantized.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelInvalidError
from ..onnx_attrs import unique_name
from .common import read_source
from ...model.spec import QuantParams

__all__ = ["load_tflite", "SUPPORTED_OPS", "INSTALL_HINT"]

_OP = "load_tflite"
#: the largest zero point accepted (int16 tensors hold -32768..32767; uint16 up to 65535)
_ZP_LIMIT = 65535
_OPSET = 14
#: What to install when the ``tflite`` schema package is missing.
INSTALL_HINT = "pip install 'rknnlite-runtime[tflite]' (or: pip install tflite flatbuffers)"

# TFLite TensorType enum -> (numpy dtype of the stored data, ONNX element type name at the IR boundary)
_TYPES = {
    0: (np.float32, "FLOAT"), 1: (np.float16, "FLOAT"), 2: (np.int32, "INT32"), 3: (np.uint8, "UINT8"),
    4: (np.int64, "INT64"), 6: (np.bool_, "BOOL"), 7: (np.int16, "INT16"), 9: (np.int8, "INT8"),
    10: (np.float64, "FLOAT"), 15: (np.uint32, "UINT32"), 16: (np.uint16, "UINT16"),
}
_TYPE_NAMES = {5: "STRING", 8: "COMPLEX64", 11: "COMPLEX128", 12: "UINT64", 13: "RESOURCE", 14: "VARIANT",
               17: "INT4", 18: "BFLOAT16"}
_QUANT_TYPES = (3, 7, 9)  # UINT8, INT16, INT8: quantized activations

_NCHW = (0, 3, 1, 2)  # NHWC -> NCHW
_NHWC = (0, 2, 3, 1)  # NCHW -> NHWC
_AXIS_TO_NCHW = {0: 0, 1: 2, 2: 3, 3: 1}  # an NHWC axis -> its NCHW position

# ActivationFunctionType -> (ONNX op, attrs, clip bounds)
_ACTIVATIONS = {1: ("Relu", None), 2: ("Clip", (-1.0, 1.0)), 3: ("Clip", (0.0, 6.0)), 4: ("Tanh", None)}
_UNARY = {"RELU": ("Relu", None), "RELU6": ("Clip", (0.0, 6.0)), "RELU_N1_TO_1": ("Clip", (-1.0, 1.0)),
          "LOGISTIC": ("Sigmoid", None), "TANH": ("Tanh", None), "HARD_SWISH": ("HardSwish", None)}
_BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul"}



# -- reading ---------------------------------------------------------------------------------


@dataclass
class _Tensor:
    name: str
    shape: Tuple[int, ...]
    type: int
    data: Optional[np.ndarray]  # the constant's raw values (stored dtype), or None
    scale: Optional[np.ndarray]  # quantization, or None
    zero_point: Optional[np.ndarray]
    axis: int

    @property
    def quantized(self) -> bool:
        return self.scale is not None


@dataclass
class _Op:
    index: int
    name: str  # builtin op name, or "CUSTOM(<code>)"
    inputs: List[int]  # tensor indices; -1 = omitted optional input
    outputs: List[int]
    options: object  # the decoded builtin options table, or None


def _read_model(data: bytes, label: str, schema) -> Tuple[List[_Tensor], List[_Op], List[int], List[int]]:
    """The first subgraph as plain data: tensors, operators, input and output tensor indices.

    Raises ModelInvalidError naming ``label`` for a file that is not a TFLite FlatBuffer
    or whose tables point outside it."""
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelInvalidError(
            f"{label} is not a TFLite model: expected the FlatBuffer identifier 'TFL3' at bytes 4..8, found "
            f"{data[4:8]!r} ({len(data)} bytes)", op=_OP)
    try:
        return _parse(data, schema)
    except ModelInvalidError as e:
        raise ModelInvalidError(f"{label}: {e.message}", op=_OP) from None
    except Exception as e:  # a truncated or corrupted FlatBuffer fails in the generated accessors
        raise ModelInvalidError(f"{label} is a malformed TFLite file: {type(e).__name__}: {e}", op=_OP) from None


def _parse(data: bytes, schema):
    from tflite.utils import BUILTIN_OPCODE2NAME

    m = schema.Model.GetRootAsModel(data, 0)
    if m.SubgraphsLength() < 1:
        raise ModelInvalidError("the model has no subgraph", op=_OP)
    g = m.Subgraphs(0)
    opnames = []
    for i in range(m.OperatorCodesLength()):
        c = m.OperatorCodes(i)
        code = max(int(c.BuiltinCode()), int(c.DeprecatedBuiltinCode()))
        if code == 32:  # CUSTOM
            custom = c.CustomCode()
            opnames.append(f"CUSTOM({custom.decode('utf-8', 'replace') if custom else '?'})")
        else:
            opnames.append(BUILTIN_OPCODE2NAME.get(code, f"BUILTIN_{code}"))
    tensors = []
    for i in range(g.TensorsLength()):
        t = g.Tensors(i)
        name = (t.Name() or b"").decode("utf-8", "replace") or f"tensor_{i}"
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        ttype = int(t.Type())
        sparsity = t.Sparsity()
        if sparsity is None:
            values = _buffer(m, data, t.Buffer(), shape, ttype, name)
        else:
            values = _buffer(m, data, t.Buffer(), None, ttype, name)
            if values is None:
                raise ModelInvalidError(f"tensor {name!r} is sparse but holds no data", op=_OP)
            values = _densify(values, shape, sparsity, schema, name)
        tensors.append(_Tensor(name, shape, ttype, values, *_quantization(t.Quantization(), name)))
    ops = []
    for i in range(g.OperatorsLength()):
        op = g.Operators(i)
        k = op.OpcodeIndex()
        if not 0 <= k < len(opnames):
            raise ModelInvalidError(f"operator {i} uses opcode index {k}; the model has {len(opnames)}", op=_OP)
        ins = [int(x) for x in op.InputsAsNumpy()] if op.InputsLength() else []
        outs = [int(x) for x in op.OutputsAsNumpy()] if op.OutputsLength() else []
        for x in ins + outs:
            if not -1 <= x < len(tensors):
                raise ModelInvalidError(f"operator {i} ({opnames[k]}) refers to tensor {x}; the model has "
                                        f"{len(tensors)}", op=_OP)
        ops.append(_Op(i, opnames[k], ins, outs, _options(op, schema)))
    inputs = [int(x) for x in g.InputsAsNumpy()] if g.InputsLength() else []
    outputs = [int(x) for x in g.OutputsAsNumpy()] if g.OutputsLength() else []
    for x in inputs + outputs:
        if not 0 <= x < len(tensors):
            raise ModelInvalidError(f"a subgraph input/output refers to tensor {x}; the model has {len(tensors)}",
                                    op=_OP)
    return tensors, ops, inputs, outputs


def _buffer(m, data: bytes, index: int, shape, ttype: int, name: str) -> Optional[np.ndarray]:
    if index <= 0 or index >= m.BuffersLength():
        return None  # buffer 0 is the empty sentinel: an activation
    b = m.Buffers(index)
    if b.Offset() > 1:  # models over 2 GB keep the data after the FlatBuffer
        raw = data[b.Offset():b.Offset() + b.Size()]
        if len(raw) != b.Size():
            raise ModelInvalidError(f"tensor {name!r}: its data (offset {b.Offset()}, {b.Size()} bytes) lies "
                                    f"outside the file", op=_OP)
    elif b.DataLength():
        raw = b.DataAsNumpy().tobytes()
    else:
        return None
    if ttype not in _TYPES:
        raise ModelInvalidError(f"constant {name!r} has TFLite type {_TYPE_NAMES.get(ttype, ttype)}, which the "
                                f"runtime has no tensor type for", op=_OP)
    dtype = np.dtype(_TYPES[ttype][0])
    if shape is None:  # a sparse tensor's stored values: a flat array of any length
        if len(raw) % dtype.itemsize:
            raise ModelInvalidError(f"sparse constant {name!r} holds {len(raw)} bytes, no whole number of {dtype}",
                                    op=_OP)
        return np.frombuffer(raw, dtype)
    count = int(np.prod(shape)) if shape else 1
    if len(raw) != count * dtype.itemsize:
        raise ModelInvalidError(f"constant {name!r} holds {len(raw)} bytes; shape {list(shape)} of {dtype} needs "
                                f"{count * dtype.itemsize}", op=_OP)
    return np.frombuffer(raw, dtype).reshape(shape)


def _index_vector(kind: int, table, schema) -> np.ndarray:
    """A SparseIndexVector union member (Int32Vector, Uint16Vector or Uint8Vector) as int64."""
    classes = {1: schema.Int32Vector, 2: schema.Uint16Vector, 3: schema.Uint8Vector}
    if kind not in classes or table is None:
        raise ModelInvalidError(f"sparse index vector of kind {kind} is missing or unknown", op=_OP)
    vec = classes[kind]()
    vec.Init(table.Bytes, table.Pos)
    return np.asarray(vec.ValuesAsNumpy(), np.int64).reshape(-1) if vec.ValuesLength() else np.zeros(0, np.int64)


def _densify(values: np.ndarray, shape: Tuple[int, ...], sparsity, schema, name: str) -> np.ndarray:
    """A sparse constant (TFLite ``SparsityParameters``: per traversal level a DENSE dim of
    ``dense_size`` or a SPARSE_CSR dim of segments and indices; block dims after the
    original ones, ``block_map`` naming the dim each blocks) as its dense array.

    The levels are walked breadth-first with numpy: each level turns the positions of the
    previous one into its own positions and coordinates; the leaves index ``values``."""
    rank = len(shape)
    order = [int(v) for v in sparsity.TraversalOrderAsNumpy()] if sparsity.TraversalOrderLength() else []
    block_map = [int(v) for v in sparsity.BlockMapAsNumpy()] if sparsity.BlockMapLength() else []
    levels = sparsity.DimMetadataLength()
    if sorted(order) != list(range(rank + len(block_map))) or levels != len(order):
        raise ModelInvalidError(f"sparse tensor {name!r}: traversal order {order} and {levels} dim metadata do not "
                                f"fit shape {list(shape)} with {len(block_map)} block dim(s)", op=_OP)
    pos = np.zeros(1, np.int64)
    coords = np.zeros((rank + len(block_map), 1), np.int64)  # expanded dim -> coordinate per position
    sizes = {}
    for level in range(levels):
        md = sparsity.DimMetadata(level)
        dim = order[level]
        if md.Format() == 0:  # DENSE
            n = int(md.DenseSize())
            sizes[dim] = n
            new_pos = (pos[:, None] * n + np.arange(n)).reshape(-1)
            coords = np.repeat(coords, n, axis=1)
            coords[dim] = np.tile(np.arange(n), len(pos))
        else:  # SPARSE_CSR
            segments = _index_vector(md.ArraySegmentsType(), md.ArraySegments(), schema)
            indices = _index_vector(md.ArrayIndicesType(), md.ArrayIndices(), schema)
            if pos.size and (pos.max() + 1 >= segments.size or segments[-1] > indices.size):
                raise ModelInvalidError(f"sparse tensor {name!r}: level {level}'s segments do not cover its parent "
                                        f"positions", op=_OP)
            starts, counts = segments[pos], segments[pos + 1] - segments[pos]
            if np.any(counts < 0):
                raise ModelInvalidError(f"sparse tensor {name!r}: level {level}'s segments decrease", op=_OP)
            new_pos = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(
                starts, counts)
            coords = np.repeat(coords, counts, axis=1)
            coords[dim] = indices[new_pos]
        pos = new_pos
    if pos.size != values.size:
        raise ModelInvalidError(f"sparse tensor {name!r} stores {values.size} values; its index structure has "
                                f"{pos.size}", op=_OP)
    full = coords[:rank].copy()
    for j, d in enumerate(block_map):
        full[d] = full[d] * sizes.get(rank + j, 1) + coords[rank + j]
    if any(np.any(full[d] >= shape[d]) for d in range(rank)) or np.any(full < 0):
        raise ModelInvalidError(f"sparse tensor {name!r} has indices outside its shape {list(shape)}", op=_OP)
    dense = np.zeros(shape, values.dtype)
    dense[tuple(full)] = values[pos]
    return dense


def _quantization(q, name: str):
    if q is None or not q.ScaleLength():
        return None, None, 0
    scale = np.asarray(q.ScaleAsNumpy(), np.float64).reshape(-1)
    zp = np.asarray(q.ZeroPointAsNumpy(), np.int64).reshape(-1) if q.ZeroPointLength() else np.zeros(1, np.int64)
    if not (np.isfinite(scale).all() and (scale >= 0).all()) or (np.abs(zp) > _ZP_LIMIT).any():
        raise ModelInvalidError(f"tensor {name!r} has quantization scale {scale.tolist()[:4]} and zero point "
                                f"{zp.tolist()[:4]}; finite scales >= 0 and zero points within +-{_ZP_LIMIT} (an "
                                f"integer tensor's range) were expected", op=_OP)
    if zp.size == 1 and scale.size > 1:
        zp = np.repeat(zp, scale.size)
    return scale, zp, int(q.QuantizedDimension())


def _options(op, schema):
    """The operator's builtin options as the generated class (``Conv2DOptions``, ...), or None."""
    table = op.BuiltinOptions()
    if table is None:
        return None
    kind = op.BuiltinOptionsType()
    names = {v: k for k, v in vars(schema.BuiltinOptions).items() if isinstance(v, int)}
    cls = getattr(schema, names.get(kind, ""), None)
    if cls is None:
        return None
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    return obj


# -- converting ------------------------------------------------------------------------------


class _Converter:
    """Builds the ONNX nodes and initializers of one TFLite subgraph (see the module doc)."""

    def __init__(self, tensors: List[_Tensor], inputs: List[int], outputs: List[int], input_is_quant: bool):
        from onnx import helper

        self.h = helper
        self.t = tensors
        self.graph_inputs, self.graph_outputs = inputs, outputs
        self.input_is_quant = input_is_quant
        self.nodes: List = []
        self.inits: Dict[str, np.ndarray] = {}
        self.const_names: Dict[tuple, str] = {}  # (tensor, perm, rank) -> initializer name
        self.quant: Dict[str, QuantParams] = {}
        self.raw_inputs: set = set()  # input_is_quant inputs: their step-1 grid is no file grid
        # input_is_quant inputs: TFLite tensor index -> (its scale constant, the dequantized tensor)
        self.code_inputs: Dict[int, Tuple[str, str]] = {}
        self.taken: set = set()
        self.ir: Dict[int, Tuple[str, bool]] = {}  # tensor -> (IR name, held as NCHW)
        self.nhwc_views: Dict[int, str] = {}
        self.alias: Dict[int, int] = {}
        # A file with integer activations keeps its quantization; hybrid files become float.
        self.quantized = any(t.quantized and t.data is None and t.type in _QUANT_TYPES for t in tensors)

    # names and tensors

    def fresh(self, base: str) -> str:
        base = re.sub(r"\s+", "_", base) or "t"
        return unique_name(base, self.taken)

    def root(self, i: int) -> int:
        while i in self.alias:
            i = self.alias[i]
        return i

    def rank(self, i: int) -> int:
        return len(self.t[i].shape)

    def quant_of(self, t: _Tensor, axis_map: Optional[Sequence[int]] = None) -> Optional[QuantParams]:
        if not self.quantized or not t.quantized or t.type not in _QUANT_TYPES:
            return None
        shift = 128 if t.type == 3 else 0
        dtype = "int16" if t.type == 7 else "int8"
        scales = tuple(float(s) if s > 0 else 1.0 for s in t.scale)  # 0: an all-zero channel
        zps = tuple(int(z) - shift for z in t.zero_point)
        if len(scales) == 1:
            return QuantParams(dtype, scales, zps[:1])
        axis = t.axis if axis_map is None else list(axis_map).index(t.axis)
        return QuantParams(dtype, scales, zps, axis)

    def value(self, i: int, perm: Optional[Sequence[int]] = None, rank: Optional[int] = None) -> str:
        """Tensor ``i`` as an IR name.  Constants are dequantized to float (integer types
        without quantization stay as they are), optionally first padded with leading 1s to
        ``rank`` and transposed by ``perm``; activations come as they are held."""
        i = self.root(i)
        t = self.t[i]
        if t.data is None:
            if i not in self.ir:
                raise ModelInvalidError(f"tensor {t.name!r} is read before any operator produces it", op=_OP)
            return self.ir[i][0]
        a = _dequantize(t)
        axis_map = list(range(a.ndim))
        if rank is not None and a.ndim < rank:
            pad = rank - a.ndim
            a = a.reshape((1,) * pad + a.shape)
            axis_map = list(range(pad)) + [d + pad for d in axis_map]
        if perm is not None:
            a = a.transpose(perm)
            axis_map = [axis_map[p] for p in perm]  # new axis -> original axis
        key = (i, tuple(perm or ()), rank)
        name = self.const_names.get(key)
        if name is None:
            name = self.const_names[key] = self.fresh(t.name)
            self.inits[name] = np.ascontiguousarray(a)
            q = self.quant_of(t, axis_map)
            if q is not None and a.dtype.kind == "f":
                self.quant[name] = q
        return name

    def nchw(self, i: int) -> str:
        """A 4-D operand in NCHW (transposed when it is held in TFLite's layout)."""
        i = self.root(i)
        if self.t[i].data is not None:
            return self.value(i, _NCHW, 4)
        name, is_nchw = self.ir[i]
        if is_nchw:
            return name
        view = self.fresh(f"{name}/nchw")
        self.transpose(name, view, _NCHW)
        self.ir[i] = (view, True)
        self.nhwc_views[i] = name
        return view

    def transpose(self, x: str, y: str, perm: Sequence[int]) -> None:
        """``y = Transpose(x)``; ``y`` is on ``x``'s quantization grid."""
        self.node("Transpose", [x], [y], perm=list(perm))
        if x in self.quant:
            self.quant[y] = self.quant[x]

    def tfl(self, i: int) -> str:
        """An operand in TFLite's own layout (NHWC for a 4-D activation: transposed once)."""
        i = self.root(i)
        if self.t[i].data is not None:
            return self.value(i)
        name, is_nchw = self.ir[i]
        if not is_nchw:
            return name
        if i not in self.nhwc_views:
            view = self.fresh(f"{name}/nhwc")
            self.transpose(name, view, _NHWC)
            self.nhwc_views[i] = view
        return self.nhwc_views[i]

    def define(self, i: int, is_nchw: bool) -> str:
        """The IR name an operator writes tensor ``i`` to (recording its quantization)."""
        t = self.t[i]
        name = self.fresh(f"{t.name}/nchw" if is_nchw and i in self.graph_outputs else t.name)
        self.ir[i] = (name, is_nchw)
        q = self.quant_of(t)
        if q is not None:
            self.quant[name] = q
        return name

    def out(self, op: _Op, k: int = 0) -> Tuple[int, str]:
        i = op.outputs[k]
        return i, self.define(i, self.rank(i) == 4)

    def node(self, op_type: str, ins: List[str], outs: List[str], **attrs) -> None:
        self.nodes.append(self.h.make_node(op_type, ins, outs, name=self.fresh(f"{op_type}:{outs[0]}"), **attrs))

    def const(self, base: str, value) -> str:
        name = self.fresh(base)
        self.inits[name] = np.asarray(value)
        return name

    def activate(self, code: int, x: str, y: str, what: str) -> None:
        """Write the fused activation ``code`` (not NONE) of ``x`` to ``y``."""
        if code not in _ACTIVATIONS:
            raise ModelInvalidError(f"{what}: fused activation {code} (SIGN_BIT) is not supported", op=_OP)
        op_type, bounds = _ACTIVATIONS[code]
        self.unary(op_type, bounds, x, y)

    def unary(self, op_type: str, bounds, x: str, y: str) -> None:
        if bounds is None:
            self.node(op_type, [x], [y])
        else:
            lo = self.const(f"{y}/min", np.float32(bounds[0]))
            hi = self.const(f"{y}/max", np.float32(bounds[1]))
            self.node(op_type, [x, lo, hi], [y])

    def with_activation(self, op: _Op, code: int, make: Callable[[str], None]) -> None:
        """Run ``make(target)`` and then the fused activation ``code`` into the op's output."""
        i, y = self.out(op)
        if code == 0:
            make(y)
            return
        pre = self.fresh(f"{y}/pre_activation")
        make(pre)
        self.activate(code, pre, y, self.label(op))

    def label(self, op: _Op) -> str:
        first = self.t[op.outputs[0]].name if op.outputs else "?"
        return f"op {op.name} (node {op.index}: {first!r})"

    # graph boundary

    def add_inputs(self) -> List:
        from onnx import TensorProto

        infos = []
        for i in self.graph_inputs:
            t = self.t[i]
            if t.type not in _TYPES:
                raise ModelInvalidError(f"input {t.name!r} has TFLite type {_TYPE_NAMES.get(t.type, t.type)}, which "
                                        f"the runtime has no tensor type for", op=_OP)
            elem = "FLOAT" if t.type in _QUANT_TYPES and t.quantized else _TYPES[t.type][1]
            shape = list(t.shape)
            is_nchw = len(shape) == 4 and elem == "FLOAT"  # 4-D float inputs are NCHW (module doc)
            if is_nchw:
                shape = [shape[p] for p in _NCHW]
            name = self.fresh(t.name)
            infos.append(self.h.make_tensor_value_info(name, getattr(TensorProto, elem), shape))
            q = self.quant_of(t)
            if self.input_is_quant and t.quantized and t.type in _QUANT_TYPES:
                self.code_inputs[i] = self.dequantize_input(t, name, q)
                name = self.code_inputs[i][1]  # the graph reads the dequantized tensor
            elif q is not None:
                self.quant[name] = q
            self.ir[i] = (name, is_nchw)
        return infos

    def dequantize_input(self, t: _Tensor, name: str, q: Optional[QuantParams]) -> Tuple[str, str]:
        """``input_is_quant=True``: the input ``name`` takes the quantized values (exact on
        an integer grid of step 1); ``(x - zero_point) * scale`` is the tensor the file means.
        Returns the names of the scale constant and of that tensor."""
        if t.scale.size != 1:
            raise ModelInvalidError(f"input {t.name!r} is quantized per channel; input_is_quant=True needs one "
                                    f"scale", op=_OP)
        if self.quantized:
            self.quant[name] = QuantParams("int16" if t.type == 7 else "int8", (1.0,), (-128 if t.type == 3 else 0,))
            self.raw_inputs.add(name)
        shifted = self.fresh(f"{name}/minus_zero_point")
        self.node("Sub", [name, self.const(f"{name}/zero_point", np.float32(t.zero_point[0]))], [shifted])
        real = self.fresh(f"{name}/dequantized")
        scale = self.const(f"{name}/scale", np.float32(t.scale[0]))
        self.node("Mul", [shifted, scale], [real])
        if q is not None:
            self.quant[real] = q
        return scale, real

    def add_outputs(self) -> List[str]:
        """Name the graph outputs as the file does, 4-D ones back in NHWC."""
        names = []
        for i in self.graph_outputs:
            r = self.root(i)
            want = self.t[i].name
            if self.t[r].data is not None:
                y = self.fresh(want)
                self.node("Identity", [self.value(r)], [y])
            else:
                name, is_nchw = self.ir[r]
                if is_nchw:
                    y = self.fresh(want)
                    self.transpose(name, y, _NHWC)
                elif name != want and want not in self.taken:  # an aliased DEQUANTIZE output
                    y = self.fresh(want)
                    self.node("Identity", [name], [y])
                    if name in self.quant:  # the build's optimizer renames the producer to y
                        self.quant[y] = self.quant[name]
                else:
                    y = name
            names.append(y)
        return names

    def initializers(self) -> List:
        from onnx import numpy_helper

        return [numpy_helper.from_array(v, k) for k, v in self.inits.items()]


def _dequantize(t: _Tensor) -> np.ndarray:
    """A constant's values as the model means them: float32 for float and quantized data,
    integers (shape arguments, indices) unchanged."""
    a = t.data
    if t.quantized and a.dtype.kind in "iu":
        shape = [1] * a.ndim
        if t.scale.size > 1:
            shape[t.axis] = t.scale.size
        scale = t.scale.reshape(shape) if a.ndim else t.scale.reshape(())
        zp = t.zero_point.reshape(shape) if a.ndim else t.zero_point.reshape(())
        real = (a.astype(np.float64) - zp) * scale
        if np.abs(real).max(initial=0.0) > np.finfo(np.float32).max:
            raise ModelInvalidError(f"tensor {t.name!r}: its scale {t.scale.tolist()[:4]} takes its values beyond "
                                    f"float32", op=_OP)
        return real.astype(np.float32)
    if a.dtype.kind == "f":
        return a.astype(np.float32)
    return a


# -- operators -------------------------------------------------------------------------------


def _conv(c: _Converter, op: _Op) -> None:
    o = op.options
    x, w = op.inputs[0], c.root(op.inputs[1])
    wt = c.t[w]
    if wt.data is None or len(wt.shape) != 4:
        raise ModelInvalidError(f"{c.label(op)}: the weights must be a constant 4-D tensor", op=_OP)
    depthwise = op.name == "DEPTHWISE_CONV_2D"
    in_channels = c.t[x].shape[3]
    if depthwise:  # 1HWO -> O1HW, one group per input channel
        weight = c.value(w, (3, 0, 1, 2))
        group = in_channels
    else:  # OHWI -> OIHW
        weight = c.value(w, _NCHW)
        if in_channels % wt.shape[3]:
            raise ModelInvalidError(f"{c.label(op)}: input channels {in_channels} are no multiple of the weight's "
                                    f"{wt.shape[3]}", op=_OP)
        group = in_channels // wt.shape[3]
    ins = [c.nchw(x), weight]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        ins.append(c.value(op.inputs[2]))
    attrs = dict(strides=[o.StrideH(), o.StrideW()], dilations=[o.DilationHFactor(), o.DilationWFactor()],
                 kernel_shape=[wt.shape[1], wt.shape[2]], group=group, **_padding(o.Padding()))
    c.with_activation(op, o.FusedActivationFunction(), lambda y: c.node("Conv", ins, [y], **attrs))


def _padding(code: int) -> Dict[str, object]:
    return {"auto_pad": "SAME_UPPER"} if code == 0 else {"pads": [0, 0, 0, 0]}


def _pool(c: _Converter, op: _Op) -> None:
    o = op.options
    attrs = dict(kernel_shape=[o.FilterHeight(), o.FilterWidth()], strides=[o.StrideH(), o.StrideW()],
                 **_padding(o.Padding()))
    op_type = "AveragePool" if op.name == "AVERAGE_POOL_2D" else "MaxPool"
    if op_type == "AveragePool":
        attrs["count_include_pad"] = 0  # TFLite averages the pixels inside the image only
    x = c.nchw(op.inputs[0])
    c.with_activation(op, o.FusedActivationFunction(), lambda y: c.node(op_type, [x], [y], **attrs))


def _fully_connected(c: _Converter, op: _Op) -> None:
    o = op.options
    w = c.root(op.inputs[1])
    wt = c.t[w]
    if wt.data is None or len(wt.shape) != 2:
        raise ModelInvalidError(f"{c.label(op)}: the weights must be a constant 2-D tensor", op=_OP)
    if o is not None and o.WeightsFormat() != 0:
        raise ModelInvalidError(f"{c.label(op)}: shuffled weight formats are not supported", op=_OP)
    units, depth = wt.shape
    x = c.tfl(op.inputs[0])
    flat = c.fresh(f"{x}/flat")
    c.node("Reshape", [x, c.const(f"{flat}/shape", np.array([-1, depth], np.int64))], [flat])
    ins = [flat, c.value(w)]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        ins.append(c.value(op.inputs[2]))
    i = op.outputs[0]
    out_shape = c.t[i].shape
    code = o.FusedActivationFunction() if o is not None else 0
    if len(out_shape) == 2:
        c.with_activation(op, code, lambda y: c.node("Gemm", ins, [y], transB=1))
        return

    def make(y):  # keep_num_dims: back to the input's leading dims
        z = c.fresh(f"{y}/2d")
        c.node("Gemm", ins, [z], transB=1)
        target = c.fresh(f"{y}/nhwc") if c.rank(i) == 4 else y
        c.node("Reshape", [z, c.const(f"{z}/shape", np.array(out_shape, np.int64))], [target])
        if target != y:
            c.node("Transpose", [target], [y], perm=list(_NCHW))

    c.with_activation(op, code, make)


def _broadcast_operands(c: _Converter, op: _Op) -> List[str]:
    """The first two operands of an elementwise op, laid out like its output: NCHW when the
    output is 4-D (constants and lower-rank activations lifted to 4-D first), else as held."""
    rank = c.rank(op.outputs[0])
    ins = []
    for k in op.inputs[:2]:
        k = c.root(k)
        if rank != 4:
            ins.append(c.tfl(k))
        elif c.t[k].data is not None:
            ins.append(c.value(k, _NCHW, 4))
        elif c.rank(k) == 4:
            ins.append(c.nchw(k))
        else:  # a lower-rank activation broadcast against a 4-D one: lift it to 4-D NCHW
            src = c.tfl(k)
            lifted = c.fresh(f"{src}/4d")
            shape = (1,) * (4 - c.rank(k)) + c.t[k].shape
            c.node("Reshape", [src, c.const(f"{lifted}/shape", np.array(shape, np.int64))], [lifted])
            moved = c.fresh(f"{lifted}/nchw")
            c.node("Transpose", [lifted], [moved], perm=list(_NCHW))
            ins.append(moved)
    return ins


def _binary(c: _Converter, op: _Op) -> None:
    ins = _broadcast_operands(c, op)
    code = op.options.FusedActivationFunction() if op.options is not None else 0
    c.with_activation(op, code, lambda y: c.node(_BINARY[op.name], ins, [y]))


def _prelu(c: _Converter, op: _Op) -> None:
    """PRELU(x, alpha): ``x`` where positive, ``alpha * x`` elsewhere (alpha broadcasts)."""
    ins = _broadcast_operands(c, op)
    _, y = c.out(op)
    c.node("PRelu", ins, [y])


def _squared_difference(c: _Converter, op: _Op) -> None:
    """SQUARED_DIFFERENCE(a, b) = (a - b)^2."""
    a, b = _broadcast_operands(c, op)
    _, y = c.out(op)
    diff = c.fresh(f"{y}/difference")
    c.node("Sub", [a, b], [diff])
    c.node("Mul", [diff, diff], [y])


def _rsqrt(c: _Converter, op: _Op) -> None:
    """RSQRT(x) = 1 / sqrt(x)."""
    x, y = _same_layout(c, op)
    root = c.fresh(f"{y}/sqrt")
    c.node("Sqrt", [x], [root])
    c.node("Reciprocal", [root], [y])


def _same_layout(c: _Converter, op: _Op) -> Tuple[str, str]:
    """(input, output) IR names of an elementwise op: the output is held as the input is."""
    x = c.root(op.inputs[0])
    return c.value(x), c.define(op.outputs[0], c.t[x].data is None and c.ir[x][1])


def _unary(c: _Converter, op: _Op) -> None:
    op_type, bounds = _UNARY[op.name]
    c.unary(op_type, bounds, *_same_layout(c, op))


def _leaky_relu(c: _Converter, op: _Op) -> None:
    x, y = _same_layout(c, op)
    c.node("LeakyRelu", [x], [y], alpha=float(op.options.Alpha()))


def _reshape(c: _Converter, op: _Op) -> None:
    i = op.outputs[0]
    x = c.tfl(op.inputs[0])
    shape = np.array(c.t[i].shape, np.int64)
    if c.rank(i) == 4:
        y = c.define(i, True)
        flat = c.fresh(f"{y}/nhwc")
        c.node("Reshape", [x, c.const(f"{flat}/shape", shape)], [flat])
        c.node("Transpose", [flat], [y], perm=list(_NCHW))
    else:
        y = c.define(i, False)
        c.node("Reshape", [x, c.const(f"{y}/shape", shape)], [y])


def _const_ints(c: _Converter, op: _Op, k: int, what: str) -> np.ndarray:
    t = c.t[c.root(op.inputs[k])] if len(op.inputs) > k and op.inputs[k] >= 0 else None
    if t is None or t.data is None:
        raise ModelInvalidError(f"{c.label(op)}: {what} (input {k}) must be a constant", op=_OP)
    return np.asarray(t.data).astype(np.int64)


def _transpose(c: _Converter, op: _Op) -> None:
    perm = [int(p) for p in _const_ints(c, op, 1, "the permutation").reshape(-1)]
    x = c.root(op.inputs[0])
    i = op.outputs[0]
    # Compose with the layout changes on both sides into one Transpose.
    src = perm if c.t[x].data is not None or not c.ir[x][1] else [_NHWC[p] for p in perm]
    out_nchw = c.rank(i) == 4
    if out_nchw:
        src = [src[p] for p in _NCHW]
    name = c.value(x) if c.t[x].data is not None else c.ir[x][0]
    y = c.define(i, out_nchw)
    c.node("Transpose", [name], [y], perm=src)


def _softmax(c: _Converter, op: _Op) -> None:
    x = c.root(op.inputs[0])
    i = op.outputs[0]
    nchw = c.rank(i) == 4
    name = c.nchw(x) if nchw else c.tfl(x)
    beta = float(op.options.Beta()) if op.options is not None else 1.0
    y = c.define(i, nchw)
    if beta != 1.0:
        scaled = c.fresh(f"{y}/scaled")
        c.node("Mul", [name, c.const(f"{y}/beta", np.float32(beta))], [scaled])
        name = scaled
    c.node("Softmax", [name], [y], axis=1 if nchw else -1)


def _axis(c: _Converter, axis: int, rank: int) -> int:
    axis = axis + rank if axis < 0 else axis
    return _AXIS_TO_NCHW[axis] if rank == 4 else axis


def _concat(c: _Converter, op: _Op) -> None:
    i = op.outputs[0]
    rank = c.rank(i)
    ins = [c.nchw(k) if rank == 4 else c.tfl(k) for k in op.inputs]
    axis = _axis(c, int(op.options.Axis()), rank)
    c.with_activation(op, op.options.FusedActivationFunction(),
                      lambda y: c.node("Concat", ins, [y], axis=axis))


def _shape(c: _Converter, op: _Op) -> None:
    """SHAPE(x): a constant, the static shape the file gives ``x`` in TFLite's layout (Keras
    writes SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE for a model saved with a dynamic batch;
    the runtime shapes are fixed)."""
    x = c.root(op.inputs[0])
    i = op.outputs[0]
    dtype = np.int64 if op.options is not None and op.options.OutType() == 4 else np.int32  # TensorType INT64
    c.t[i] = replace(c.t[i], data=np.array(c.t[x].shape, dtype))


def _pack(c: _Converter, op: _Op) -> None:
    """PACK(values..., axis): the inputs (TFLite's layout) stacked on a new ``axis``."""
    i = op.outputs[0]
    axis = int(op.options.Axis()) if op.options is not None else 0
    axis = axis + c.rank(i) if axis < 0 else axis
    if not 0 <= axis < c.rank(i):
        raise ModelInvalidError(f"{c.label(op)}: axis {axis} of a rank-{c.rank(i)} output", op=_OP)
    ins = []
    for k in op.inputs:
        name = c.tfl(k)
        lifted = c.fresh(f"{name}/unsqueezed")
        c.node("Unsqueeze", [name, c.const(f"{lifted}/axes", np.array([axis], np.int64))], [lifted])
        ins.append(lifted)
    c.node("Concat", ins, [c.define(i, False)], axis=axis)


def _mean(c: _Converter, op: _Op) -> None:
    x = c.root(op.inputs[0])
    rank = c.rank(x)
    axes = sorted({int(a) + rank if a < 0 else int(a) for a in _const_ints(c, op, 1, "the axes").reshape(-1)})
    keep = bool(op.options.KeepDims()) if op.options is not None else False
    i = op.outputs[0]
    if rank != 4:
        y = c.define(i, False)
        c.node("ReduceMean", [c.tfl(x)], [y], axes=axes, keepdims=int(keep))
        return
    ir_axes = sorted(_AXIS_TO_NCHW[a] for a in axes)
    kept_nhwc = [a for a in range(4) if a not in axes]
    kept_nchw = [_NHWC[p] for p in range(4) if _NHWC[p] not in axes]
    if keep:
        y = c.define(i, True)
        c.node("ReduceMean", [c.nchw(x)], [y], axes=ir_axes, keepdims=1)
    elif kept_nhwc == kept_nchw:  # e.g. the global average over H, W: [N, C] either way
        y = c.define(i, False)
        c.node("ReduceMean", [c.nchw(x)], [y], axes=ir_axes, keepdims=0)
    else:
        y = c.define(i, False)
        c.node("ReduceMean", [c.tfl(x)], [y], axes=axes, keepdims=0)


def _pad(c: _Converter, op: _Op) -> None:
    pads = _const_ints(c, op, 1, "the paddings").reshape(-1, 2)
    x = c.root(op.inputs[0])
    i = op.outputs[0]
    rank = c.rank(i)
    if rank == 4:
        pads = pads[list(_NCHW)]
    ins = [c.nchw(x) if rank == 4 else c.tfl(x),
           c.const(f"{c.t[i].name}/pads", np.concatenate([pads[:, 0], pads[:, 1]]).astype(np.int64))]
    if op.name == "PADV2" and len(op.inputs) > 2 and op.inputs[2] >= 0:
        ins.append(c.value(op.inputs[2]))
    y = c.define(i, rank == 4)
    c.node("Pad", ins, [y], mode="constant")


def _resize(c: _Converter, op: _Op) -> None:
    size = [int(v) for v in _const_ints(c, op, 1, "the output size").reshape(-1)]
    x = c.root(op.inputs[0])
    n, _, _, ch = c.t[x].shape
    o = op.options
    align = bool(o.AlignCorners()) if o is not None else False
    half = bool(o.HalfPixelCenters()) if o is not None else False
    if op.name == "RESIZE_BILINEAR":
        attrs = dict(mode="linear",
                     coordinate_transformation_mode="align_corners" if align else "half_pixel" if half else
                     "asymmetric")
    else:  # TFLite: floor((x + 0.5 * half) * scale), or round(x * scale) with align_corners
        attrs = dict(mode="nearest",
                     coordinate_transformation_mode="align_corners" if align else "half_pixel" if half else
                     "asymmetric",
                     nearest_mode="round_prefer_ceil" if align or half else "floor")
    y = c.define(op.outputs[0], True)
    sizes = c.const(f"{y}/sizes", np.array([n, ch, size[0], size[1]], np.int64))
    c.node("Resize", [c.nchw(x), "", "", sizes], [y], **attrs)


def _transpose_conv(c: _Converter, op: _Op) -> None:
    """TRANSPOSE_CONV(output_shape, weights OHWI, x[, bias]): a ConvTranspose whose pads
    give exactly the file's output size (TFLite pads like the forward conv from that size:
    the odd pixel at the end; a larger output is filled by ``output_padding``)."""
    o = op.options
    out_shape = [int(v) for v in _const_ints(c, op, 0, "the output shape").reshape(-1)]
    w, x = c.root(op.inputs[1]), op.inputs[2]
    wt = c.t[w]
    if wt.data is None or len(wt.shape) != 4:
        raise ModelInvalidError(f"{c.label(op)}: the weights must be a constant 4-D tensor", op=_OP)
    if len(out_shape) != 4 or c.rank(x) != 4:
        raise ModelInvalidError(f"{c.label(op)}: only 2-D transposed convolutions (4-D NHWC tensors) are "
                                f"supported", op=_OP)
    kh, kw = wt.shape[1], wt.shape[2]
    strides = [o.StrideH(), o.StrideW()]
    begin, end, extra = [], [], []
    for size_in, size_out, k, s in zip(c.t[x].shape[1:3], out_shape[1:3], (kh, kw), strides):
        full = (size_in - 1) * s + k
        total = full - size_out
        if total >= 0:
            begin.append(total // 2 if o.Padding() == 0 else 0)
            end.append(total - begin[-1])
            extra.append(0)
        else:
            begin.append(0)
            end.append(0)
            extra.append(-total)
    ins = [c.nchw(x), c.value(w, (3, 0, 1, 2))]  # OHWI -> IOHW
    if len(op.inputs) > 3 and op.inputs[3] >= 0:
        ins.append(c.value(op.inputs[3]))
    attrs = dict(strides=strides, kernel_shape=[kh, kw], pads=begin + end)
    if any(extra):
        attrs["output_padding"] = extra
    code = o.FusedActivationFunction() if hasattr(o, "FusedActivationFunction") else 0
    c.with_activation(op, code, lambda y: c.node("ConvTranspose", ins, [y], **attrs))


def _split(c: _Converter, op: _Op) -> None:
    """SPLIT(axis, x) into equal parts; SPLIT_V(x, size_splits, axis) into given sizes."""
    if op.name == "SPLIT":
        axis_k, x = 0, c.root(op.inputs[1])
    else:
        axis_k, x = 2, c.root(op.inputs[0])
    rank = c.rank(x)
    axis = int(_const_ints(c, op, axis_k, "the axis").reshape(-1)[0])
    axis = axis + rank if axis < 0 else axis
    sizes = [c.t[i].shape[axis] for i in op.outputs]
    nchw = rank == 4
    src = c.nchw(x) if nchw else c.tfl(x)
    outs = [c.define(i, nchw) for i in op.outputs]
    c.node("Split", [src, c.const(f"{outs[0]}/split", np.array(sizes, np.int64))], outs,
           axis=_AXIS_TO_NCHW[axis] if nchw else axis)


def _strided_slice(c: _Converter, op: _Op) -> None:
    """STRIDED_SLICE(x, begin, end, strides) with begin/end/shrink-axis masks (a Slice, then
    a Reshape dropping the shrunk axes); ellipsis and new-axis masks are refused."""
    o = op.options
    if o is not None and (o.EllipsisMask() or o.NewAxisMask()):
        raise ModelInvalidError(f"{c.label(op)}: ellipsis_mask and new_axis_mask are not supported", op=_OP)
    if o is not None and hasattr(o, "Offset") and o.Offset():
        raise ModelInvalidError(f"{c.label(op)}: offset=True is not supported", op=_OP)
    x = c.root(op.inputs[0])
    rank = c.rank(x)
    begin = _const_ints(c, op, 1, "begin").reshape(-1)
    end = _const_ints(c, op, 2, "end").reshape(-1)
    steps = _const_ints(c, op, 3, "strides").reshape(-1)
    if not len(begin) == len(end) == len(steps) == rank:
        raise ModelInvalidError(f"{c.label(op)}: begin, end and strides need {rank} values each", op=_OP)
    bmask = o.BeginMask() if o is not None else 0
    emask = o.EndMask() if o is not None else 0
    shrink = o.ShrinkAxisMask() if o is not None else 0
    big = np.iinfo(np.int64).max
    starts, ends = [], []
    for d in range(rank):
        step = int(steps[d])
        if step == 0:
            raise ModelInvalidError(f"{c.label(op)}: stride 0 on axis {d}", op=_OP)
        b, e = int(begin[d]), int(end[d])
        if bmask >> d & 1:
            b = 0 if step > 0 else big
        if shrink >> d & 1:  # one element: [b, b + 1)
            e = b + 1 if b != -1 else big
            step = 1
        elif emask >> d & 1:
            e = big if step > 0 else -big
        starts.append(b)
        ends.append(e)
        steps[d] = step
    i = op.outputs[0]
    keep_nchw = rank == 4 and c.rank(i) == 4 and not shrink
    axes = [_AXIS_TO_NCHW[d] for d in range(rank)] if keep_nchw else list(range(rank))
    src = c.nchw(x) if keep_nchw else c.tfl(x)
    args = [np.array(v, np.int64) for v in (starts, ends, axes, list(steps))]
    if keep_nchw or not shrink:
        y = c.define(i, keep_nchw)
        c.node("Slice", [src] + [c.const(f"{y}/{n}", a) for n, a in zip(("starts", "ends", "axes", "steps"), args)],
               [y])
        return
    y = c.define(i, False)
    part = c.fresh(f"{y}/slice")
    c.node("Slice", [src] + [c.const(f"{y}/{n}", a) for n, a in zip(("starts", "ends", "axes", "steps"), args)],
           [part])
    c.node("Reshape", [part, c.const(f"{y}/shape", np.array(c.t[i].shape, np.int64))], [y])


def _batch_matmul(c: _Converter, op: _Op) -> None:
    """BATCH_MATMUL(a, b) with adj_x / adj_y (the last two axes swapped first), in TFLite's
    own layout; the output is held as TFLite lays it out."""
    o = op.options
    names = []
    for k, adj in zip(op.inputs[:2], (o.AdjX() if o else False, o.AdjY() if o else False)):
        name = c.tfl(k)
        if adj:
            r = c.rank(c.root(k))
            swapped = c.fresh(f"{name}/adjoint")
            c.node("Transpose", [name], [swapped], perm=list(range(r - 2)) + [r - 1, r - 2])
            name = swapped
        names.append(name)
    y = c.define(op.outputs[0], False)
    c.node("MatMul", names, [y])


def _gather(c: _Converter, op: _Op) -> None:
    """GATHER(params, indices) along ``axis`` (batch_dims 0), in TFLite's own layout."""
    o = op.options
    if o is not None and o.BatchDims():
        raise ModelInvalidError(f"{c.label(op)}: batch_dims={o.BatchDims()} is not supported", op=_OP)
    x = c.root(op.inputs[0])
    axis = int(o.Axis()) if o is not None else 0
    ind = c.root(op.inputs[1])
    if c.t[ind].data is not None:
        indices = c.const(f"{c.t[ind].name}/int64", np.asarray(c.t[ind].data).astype(np.int64))
    else:
        indices = c.tfl(ind)
    y = c.define(op.outputs[0], False)
    c.node("Gather", [c.tfl(x), indices], [y], axis=axis + c.rank(x) if axis < 0 else axis)


def _densify_op(c: _Converter, op: _Op) -> None:
    """DENSIFY: its sparse input was expanded when the file was read; the output is that tensor."""
    src = c.root(op.inputs[0])
    if c.t[src].data is None:
        raise ModelInvalidError(f"{c.label(op)}: the input must be a constant sparse tensor", op=_OP)
    c.alias[op.outputs[0]] = src


def _depth_to_space(c: _Converter, op: _Op) -> None:
    """DEPTH_TO_SPACE: TFLite's channel order (row, column, depth) is ONNX's ``DCR`` mode."""
    x = c.nchw(op.inputs[0])
    _, y = c.out(op)
    c.node("DepthToSpace", [x], [y], blocksize=int(op.options.BlockSize()), mode="DCR")


def _quantize(c: _Converter, op: _Op) -> None:
    """QUANTIZE / DEQUANTIZE: one tensor on both sides (see the module doc); a requantize
    (int -> int with other parameters) is an Identity whose output keeps its own grid."""
    src, dst = c.root(op.inputs[0]), op.outputs[0]
    s, d = c.t[src], c.t[dst]
    requantize = op.name == "QUANTIZE" and s.type in _QUANT_TYPES and s.quantized
    if requantize or (s.data is None and dst in c.graph_outputs and src in c.graph_inputs):
        x, y = _same_layout(c, op)
        c.node("Identity", [x], [y])
        return
    c.alias[dst] = src
    if s.data is None and op.name == "QUANTIZE":
        q = c.quant_of(d)
        name = c.ir[src][0]
        if q is not None and name not in c.quant:
            c.quant[name] = q


_CONVERTERS = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _conv, "FULLY_CONNECTED": _fully_connected,
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "RESHAPE": _reshape, "SOFTMAX": _softmax,
    "CONCATENATION": _concat, "MEAN": _mean, "PAD": _pad, "PADV2": _pad, "RESIZE_NEAREST_NEIGHBOR": _resize,
    "RESIZE_BILINEAR": _resize, "TRANSPOSE": _transpose, "QUANTIZE": _quantize, "DEQUANTIZE": _quantize,
    "LEAKY_RELU": _leaky_relu, "PRELU": _prelu, "SQUARED_DIFFERENCE": _squared_difference, "RSQRT": _rsqrt,
    "TRANSPOSE_CONV": _transpose_conv, "SPLIT": _split, "SPLIT_V": _split, "STRIDED_SLICE": _strided_slice,
    "BATCH_MATMUL": _batch_matmul, "GATHER": _gather, "DEPTH_TO_SPACE": _depth_to_space,
    "DENSIFY": _densify_op, "SHAPE": _shape, "PACK": _pack,
    **{k: _binary for k in _BINARY}, **{k: _unary for k in _UNARY},
}
#: Builtin TFLite ops this loader converts.
SUPPORTED_OPS = tuple(sorted(_CONVERTERS))


# -- entry point -----------------------------------------------------------------------------


def load_tflite(model, input_is_quant: bool = True, *, dynamic_input=None, custom_ops=None,
                warn=None):
    """Convert a TensorFlow Lite model to the toolkit's IR (what ``RKNN.load_tflite`` calls).

    Args:
        model: path of a ``.tflite`` file, or its bytes (read once; not kept).
        input_is_quant: for inputs the file quantizes (int8/uint8 input tensors): ``True``
            (default) means the caller feeds the quantized values themselves (the image's
            uint8 pixels of a uint8 model, as to the TFLite interpreter) and the model
            dequantizes them with the file's scale and zero point, as RKNN-Toolkit2 2.5.0
            does (it has no such option, and ignores ``mean_values``/``std_values`` there);
            ``False`` means the input takes real values, quantized onto the file's grid
            (an rknnlite option).  Float inputs ignore it.
        dynamic_input, custom_ops, warn: as :func:`~rknnlite.toolkit.onnx_import.import_onnx`
            (``dynamic_input`` shapes are given in the model's input layout: NCHW for
            4-D inputs).

    Returns:
        an :class:`~rknnlite.toolkit.onnx_import.ImportedModel`; a quantized file's table is
        in ``graph.quant`` (see the module doc).  4-D input specs are NCHW, 4-D output
        specs NHWC.

    Raises:
        ImportError: the ``tflite`` (or ``onnx``) package is missing; the message says what to
            install.
        ModelInvalidError: not a readable TFLite file (naming it and the problem), an
            unsupported op (named with its operator index and output tensor, and the
            supported ops), non-constant weights, an unsupported tensor type.
    """
    try:
        import tflite as schema
    except ImportError as e:
        raise ImportError(f"load_tflite needs the 'tflite' FlatBuffer schema package ({e}); {INSTALL_HINT}") from None
    from onnx import helper

    from ..onnx_import import import_onnx
    from ..qdq import symmetric_grids
    from ..quantize import live_quant

    data, label = read_source(model, "TFLite", "model", _OP)
    tensors, ops, inputs, outputs = _read_model(data, label, schema)
    if not outputs:
        raise ModelInvalidError(f"{label}: the model has no outputs", op=_OP)
    c = _Converter(tensors, inputs, outputs, bool(input_is_quant))
    for op in ops:
        if op.name not in _CONVERTERS:
            first = tensors[op.outputs[0]].name if op.outputs else "?"
            if op.name.startswith("CUSTOM("):
                raise ModelInvalidError(
                    f"op {op.name} (node {op.index}: {first!r}) is a custom op: the framework that wrote the file "
                    f"(MediaPipe, TensorFlow's detection post-processing, ...) implements it in its own kernels and "
                    f"it is no TFLite builtin, so it cannot be converted; cut the model before it or replace it with "
                    f"builtin ops", op=_OP)
            raise ModelInvalidError(f"op {op.name} (node {op.index}: {first!r}) is not supported; supported: "
                                    f"{', '.join(SUPPORTED_OPS)}", op=_OP)
    input_infos = c.add_inputs()
    for op in ops:
        for k in op.inputs:
            if k >= 0 and tensors[c.root(k)].type not in _TYPES:
                raise ModelInvalidError(f"{c.label(op)}: tensor {tensors[k].name!r} has TFLite type "
                                        f"{_TYPE_NAMES.get(tensors[k].type, tensors[k].type)}, which the runtime "
                                        f"has no tensor type for", op=_OP)
        try:
            _CONVERTERS[op.name](c, op)
        except ModelInvalidError:
            raise
        except (AttributeError, IndexError, KeyError, ValueError, TypeError, struct.error) as e:
            # options or operands missing; struct.error: an options table pointing past the file's end
            raise ModelInvalidError(f"{label}: {c.label(op)} is malformed: {type(e).__name__}: {e}", op=_OP) from None
    out_names = c.add_outputs()
    output_infos = [helper.make_empty_tensor_value_info(n) for n in out_names]
    graph = helper.make_graph(c.nodes, "tflite", input_infos, output_infos, c.initializers())
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)],
                              producer_name="rknnlite.load_tflite")
    imported = import_onnx(proto, dynamic_input=dynamic_input, custom_ops=custom_ops, warn=warn)
    imported.output_specs = [replace(s, layout="NHWC") if c.rank(i) == 4 and s.layout == "NCHW" else s
                             for s, i in zip(imported.output_specs, outputs)]
    imported.graph.quant = c.quant
    imported.graph.quant = symmetric_grids(live_quant(imported.graph), imported.graph.constants, keep=c.raw_inputs,
                                           unrounded=imported.graph.unrounded)
    _codes_keep_their_values(imported.graph, c.code_inputs)
    imported.raw_outputs = _raw_grids([tensors[i] for i in outputs])
    imported.raw_inputs = _raw_grids([tensors[i] if i in c.code_inputs else None for i in inputs])
    return imported


def _codes_keep_their_values(graph, code_inputs: Dict[int, Tuple[str, str]]) -> None:
    """An input taking the file's codes whose grid became the symmetric one keeps its codes:
    RKNN-Toolkit2 2.5.0 stores the new scale (x 128/127) on the model input and feeds the
    codes unchanged (a uint8 input of zero point 128: ``x - 128`` on scale ``s * 128/127``),
    so the dequantizing ``Mul`` takes the new scale rather than re-rounding the codes."""
    for scale, real in code_inputs.values():
        q = graph.quant.get(real)
        if q is not None and scale in graph.constants and len(q.scale) == 1:
            graph.constants[scale] = np.asarray(np.float32(q.scale[0]), graph.constants[scale].dtype)


def _raw_grids(tensors: Sequence[Optional[_Tensor]]) -> tuple:
    """``ImportedModel.raw_outputs`` / ``raw_inputs`` of a file's tensors: ``(dtype, scale,
    zp)`` of each per-tensor quantized ``uint8``/``int8`` one (None for the others)."""
    names = {3: "uint8", 9: "int8"}  # TFLite's UINT8, INT8
    raw = tuple((names[t.type], float(t.scale[0]), int(t.zero_point[0]))
                if t is not None and t.quantized and t.type in names and len(t.scale) == 1 else None
                for t in tensors)
    return raw if any(r is not None for r in raw) else ()
