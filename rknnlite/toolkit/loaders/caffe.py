"""Caffe ``.prototxt`` + ``.caffemodel`` -> ONNX -> :class:`~rknnlite.toolkit.onnx_import.ImportedModel`.

Caffe itself is not needed: the ``.prototxt`` is read with the schema-less text-format
reader :mod:`.protobuf_text`, the ``.caffemodel`` with the wire-format reader
:mod:`.protobuf_wire` (only each layer's ``name`` and ``blobs`` are taken from it; the
structure and every parameter come from the ``.prototxt``), and the network is written
as an ONNX graph (opset 13) for :func:`~rknnlite.toolkit.onnx_import.import_onnx`.

Both layer formats are read: ``layer { type: "Convolution" ... }`` and the deprecated
``layers { type: CONVOLUTION ... }`` (and their binary forms).  Layers excluded from the
TEST phase (``include { phase: TRAIN }``, ``exclude { phase: TEST }``) are skipped.

Model boundary:

* inputs: the net-level ``input`` fields (shape from ``input_shape`` or four
  ``input_dim`` per input) and the tops of ``Input`` layers (``input_param { shape }``),
  float32, in file order (``input_name`` reorders them);
* outputs: the blobs no later layer reads (Caffe's net outputs), in the order they are
  produced, named as in the ``.prototxt``.  Layers that write in place
  (``top == bottom``) are chained; the blob's last version keeps its name.

Layers (Caffe semantics, inference phase):

* ``Convolution``: ``num_output``, ``kernel_size``/``kernel_h``/``kernel_w``, ``stride``,
  ``pad``, ``dilation``, ``group``, ``bias_term`` (2-D, ``axis: 1``).
* ``Pooling``: ``MAX``/``AVE``, ``kernel_size``/``_h``/``_w``, ``stride``, ``pad``,
  ``global_pooling``, ``round_mode`` (``CEIL``, Caffe's default: the output size rounds
  up and a last window starting in the end padding is dropped).  ``AVE`` divides by
  the window clipped to the padded extent (padding counts, the ceil overhang does not).
* ``ReLU`` (``negative_slope``), ``Sigmoid``, ``TanH``, ``Softmax`` (``axis``).
* ``InnerProduct``: ``num_output``, ``bias_term``, ``axis``, ``transpose``.
* ``BatchNorm``: ``(x - mean / s) / sqrt(var / s + eps)`` with the third blob ``s`` (the
  moving-average scale factor; 0 means no statistics), ``eps``.
* ``Scale``: learned (one bottom, ``axis``/``num_axes`` from the blob's shape) or a second
  bottom, ``bias_term``.
* ``Eltwise``: ``SUM`` (with ``coeff``), ``PROD``, ``MAX``.
* ``Concat`` (``axis``/``concat_dim``), ``Flatten`` (``axis``, ``end_axis``), ``Reshape``
  (``shape`` with ``0``/``-1``, ``axis``, ``num_axes``), ``Dropout`` (identity; times
  ``1 - dropout_ratio`` when ``scale_train: false``), ``Split``, ``Input``.
* SSD's layers: ``Permute`` (``order``; the axes it leaves out follow in their order),
  ``Normalize`` (``across_spatial``, ``channel_shared``; L2 norm times the scale blob).
  ``PriorBox`` layers are removed, with every layer that reads only what they produce (the
  ``mbox_priorbox`` Concat), as RKNN-Toolkit2 removes them: the priors are constants the
  application's post-processing holds, and the model's outputs are the location and
  confidence heads (a warning names the removed layers).

Other layer types raise :class:`~rknnlite.errors.ModelInvalidError` naming the type and
the layer.  ``onnx`` is imported only when :func:`load_caffe` runs.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelInvalidError
from ..onnx_attrs import unique_name
from .common import read_source, shape_sets, require_onnx
from . import protobuf_wire as wire
from .protobuf_text import Identifier, TextFormatError, TextMessage, parse_text

__all__ = ["load_caffe", "read_prototxt", "read_caffemodel", "caffe_to_onnx", "SUPPORTED_LAYERS"]

_OP = "load_caffe"
_OPSET = 13

# NetParameter / LayerParameter / V1LayerParameter / BlobProto / BlobShape field numbers (caffe.proto).
_NET_LAYER, _NET_LAYERS_V1 = 100, 2
_LAYER_NAME, _LAYER_BLOBS = 1, 7
_V1_NAME, _V1_BLOBS = 4, 6
_BLOB_NUM, _BLOB_CHANNELS, _BLOB_HEIGHT, _BLOB_WIDTH = 1, 2, 3, 4
_BLOB_DATA, _BLOB_SHAPE, _BLOB_DOUBLE_DATA = 5, 7, 8
_SHAPE_DIM = 1

# V1LayerParameter.LayerType names of the supported layers -> the current type strings.
_V1_TYPES = {"CONVOLUTION": "Convolution", "POOLING": "Pooling", "RELU": "ReLU", "SIGMOID": "Sigmoid",
             "TANH": "TanH", "INNER_PRODUCT": "InnerProduct", "SOFTMAX": "Softmax", "CONCAT": "Concat",
             "ELTWISE": "Eltwise", "FLATTEN": "Flatten", "DROPOUT": "Dropout", "SPLIT": "Split"}
_V1_TYPE_NUMBERS = {4: "CONVOLUTION", 17: "POOLING", 18: "RELU", 19: "SIGMOID", 23: "TANH", 14: "INNER_PRODUCT",
                    20: "SOFTMAX", 3: "CONCAT", 25: "ELTWISE", 8: "FLATTEN", 6: "DROPOUT", 22: "SPLIT"}

Shape = Tuple[int, ...]


# -- reading ---------------------------------------------------------------------------------


def read_prototxt(model) -> TextMessage:
    """Parse a ``.prototxt`` (path or bytes, UTF-8) into its NetParameter text tree.

    Raises:
        ModelInvalidError: missing file, not UTF-8, or a syntax error (with line and column).
    """
    data, label = read_source(model, "Caffe", "prototxt", _OP)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelInvalidError(f"{label} is not a text .prototxt (not UTF-8 at byte {e.start})", op=_OP) from None
    try:
        net = parse_text(text)
    except TextFormatError as e:
        raise ModelInvalidError(f"{label} is not valid protobuf text: {e}", op=_OP) from None
    if not net.has("layer") and not net.has("layers"):
        raise ModelInvalidError(f"{label} has no layer {{ ... }} (is it a Caffe net .prototxt?)", op=_OP)
    return net


def read_caffemodel(blobs) -> Dict[str, List[np.ndarray]]:
    """``{layer name: [blob, ...]}`` of a ``.caffemodel`` (path or bytes): each blob a new
    float32 array in its stored shape (``shape``, else the legacy ``num, channels,
    height, width``).  Layers without blobs are left out.

    Raises:
        ModelInvalidError: missing file, or bytes that are not a Caffe NetParameter
            (naming the layer and what is wrong).
    """
    data, label = read_source(blobs, "Caffe", "caffemodel", _OP)
    try:
        net = wire.parse_message(data)
    except wire.WireFormatError as e:
        raise ModelInvalidError(f"{label} is not a binary .caffemodel (protobuf NetParameter): {e}", op=_OP) from None
    out: Dict[str, List[np.ndarray]] = {}
    for number, name_field, blob_field in ((_NET_LAYER, _LAYER_NAME, _LAYER_BLOBS),
                                           (_NET_LAYERS_V1, _V1_NAME, _V1_BLOBS)):
        for i, raw in enumerate(net.get(number, [])):
            where = f"{label}: layer #{i}"
            try:
                if not isinstance(raw, memoryview):
                    raise wire.WireFormatError("a layer field that is not a message", 0)
                layer = wire.parse_message(raw)
                name = wire.text(layer[name_field][-1], "name") if name_field in layer else f"#{i}"
                where = f"{label}: layer {name!r}"
                arrays = [_blob(b) for b in layer.get(blob_field, [])]
            except wire.WireFormatError as e:
                raise ModelInvalidError(f"{where} is malformed: {e}", op=_OP) from None
            if arrays:
                out[name] = arrays
    if not net.get(_NET_LAYER) and not net.get(_NET_LAYERS_V1):
        raise ModelInvalidError(f"{label} holds no layers (is it a Caffe .caffemodel?)", op=_OP)
    return out


def _blob(raw) -> np.ndarray:
    if not isinstance(raw, memoryview):
        raise wire.WireFormatError("a blob field that is not a message", 0)
    b = wire.parse_message(raw)
    if b.get(_BLOB_DATA):
        data = wire.floats(b[_BLOB_DATA], "blob data")
    else:
        data = wire.doubles(b.get(_BLOB_DOUBLE_DATA, []), "blob double_data").astype(np.float32)
    if b.get(_BLOB_SHAPE):
        shape_msg = b[_BLOB_SHAPE][-1]
        if not isinstance(shape_msg, memoryview):
            raise wire.WireFormatError("blob shape is not a message", 0)
        dims = [wire.signed64(d) for d in wire.varints(wire.parse_message(shape_msg).get(_SHAPE_DIM, []), "dim")]
    else:
        legacy = [wire.signed64(b[f][-1]) if f in b and isinstance(b[f][-1], int) else 0
                  for f in (_BLOB_NUM, _BLOB_CHANNELS, _BLOB_HEIGHT, _BLOB_WIDTH)]
        dims = legacy if any(legacy) else [data.size]
    if any(d < 0 for d in dims) or int(np.prod(dims, dtype=np.int64)) != data.size:
        raise wire.WireFormatError(f"blob shape {dims} does not match its {data.size} values", 0)
    return data.reshape(dims)


# -- the network -----------------------------------------------------------------------------


@dataclass
class _Layer:
    name: str
    type: str
    bottoms: List[str]
    tops: List[str]
    msg: TextMessage

    @property
    def label(self) -> str:
        return f"layer {self.name!r} ({self.type}, line {self.msg.line})"

    def param(self, name: str) -> TextMessage:
        return self.msg.get(name) if isinstance(self.msg.get(name), TextMessage) else TextMessage(self.msg.line)


def _in_test_phase(msg: TextMessage) -> bool:
    """Caffe's NetStateRule check for the TEST phase (only ``phase`` is considered)."""
    def matches(rule) -> bool:
        return not isinstance(rule, TextMessage) or rule.get("phase") in (None, "TEST", 1)

    include, exclude = msg.all("include"), msg.all("exclude")
    if include:
        return any(matches(r) for r in include)
    return not any(matches(r) for r in exclude)


def _layers(net: TextMessage, label: str) -> List[_Layer]:
    if net.has("layer") and net.has("layers"):
        raise ModelInvalidError(f"{label} mixes layer {{ }} and the deprecated layers {{ }}; use one", op=_OP)
    v1 = net.has("layers")
    out = []
    for i, msg in enumerate(net.all("layers" if v1 else "layer")):
        if not isinstance(msg, TextMessage):
            raise ModelInvalidError(f"{label}: layer #{i} is not a message", op=_OP)
        kind = msg.get("type")
        if v1:
            kind = _V1_TYPE_NUMBERS.get(kind, kind) if isinstance(kind, int) else kind
            kind = _V1_TYPES.get(kind, kind)
        if not isinstance(kind, str) or not kind:
            raise ModelInvalidError(f"{label}: layer #{i} (line {msg.line}) has no type", op=_OP)
        name = msg.get("name", f"#{i}")
        if not _in_test_phase(msg):
            continue
        names = msg.all("bottom") + msg.all("top")
        if not all(isinstance(n, str) for n in names):
            raise ModelInvalidError(f"{label}: layer {name!r} (line {msg.line}): bottom/top must be strings",
                                    op=_OP)
        out.append(_Layer(str(name), str(kind), list(msg.all("bottom")), list(msg.all("top")), msg))
    return out


def _dims(msg, what: str) -> Shape:
    """The ``dim`` values of a BlobShape message."""
    dims = msg.all("dim") if isinstance(msg, TextMessage) else None
    if dims is None or not all(isinstance(d, int) and d > 0 for d in dims):
        raise ModelInvalidError(f"{what}: a shape must be dim: <positive int> entries, got {dims!r}", op=_OP)
    return tuple(dims)


def _net_inputs(net: TextMessage, layers: List[_Layer], label: str) -> List[Tuple[str, Optional[Shape], str]]:
    """(blob, declared shape or None, what declared it) of each network input, in file order."""
    inputs = []
    names = net.all("input")
    shapes = net.all("input_shape")
    dims = net.all("input_dim")
    if shapes and len(shapes) != len(names):
        raise ModelInvalidError(f"{label}: {len(names)} input fields but {len(shapes)} input_shape", op=_OP)
    if dims and len(dims) != 4 * len(names):
        raise ModelInvalidError(f"{label}: input_dim needs 4 values per input ({len(names)} inputs), "
                                f"got {len(dims)}", op=_OP)
    for i, name in enumerate(names):
        if shapes:
            shape: Optional[Shape] = _dims(shapes[i], f"{label}: input_shape of {name!r}")
        elif dims:
            shape = _dims(_msg_with_dims(dims[4 * i:4 * i + 4]), f"{label}: input_dim of {name!r}")
        else:
            shape = None
        inputs.append((str(name), shape, f"input {name!r}"))
    for layer in layers:
        if layer.type != "Input":
            continue
        shapes = layer.param("input_param").all("shape")
        if shapes and len(shapes) not in (1, len(layer.tops)):
            raise ModelInvalidError(f"{label}: {layer.label}: {len(shapes)} shapes for {len(layer.tops)} tops", op=_OP)
        for i, top in enumerate(layer.tops):
            shape = _dims(shapes[min(i, len(shapes) - 1)], f"{label}: {layer.label}") if shapes else None
            inputs.append((top, shape, layer.label))
    return inputs


def _msg_with_dims(values) -> TextMessage:
    m = TextMessage()
    for v in values:
        m.add("dim", v)
    return m


# -- conversion ------------------------------------------------------------------------------


class _Converter:
    """Accumulates ONNX nodes; maps each Caffe blob to the ONNX tensor of its current
    version and remembers every tensor's shape."""

    def __init__(self, weights: Dict[str, List[np.ndarray]], label: str, weights_label: str):
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.weights = weights
        self.label, self.weights_label = label, weights_label
        self.nodes: list = []
        self.inits: list = []
        self.current: Dict[str, str] = {}    # caffe blob -> onnx tensor of its latest version
        self.shapes: Dict[str, Shape] = {}   # onnx tensor -> shape
        self.used: set = set()               # onnx names taken
        self.writes_left: Counter = Counter()
        self.consumed: set = set()
        self.produced: List[str] = []

    def fresh(self, base: str) -> str:
        return unique_name(base, self.used)

    def error(self, layer: _Layer, message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{self.label}: {layer.label}: {message}", op=_OP)

    def bottom(self, layer: _Layer, i: int) -> Tuple[str, Shape]:
        if i >= len(layer.bottoms):
            raise self.error(layer, f"needs at least {i + 1} bottom blob(s), has {len(layer.bottoms)}")
        blob = layer.bottoms[i]
        if blob not in self.current:
            raise self.error(layer, f"bottom {blob!r} is not produced by an earlier layer nor a net input")
        tensor = self.current[blob]
        self.consumed.add(tensor)
        return tensor, self.shapes[tensor]

    def top(self, layer: _Layer, i: int, shape: Shape) -> str:
        """The ONNX name for top ``i`` of ``layer`` (its final version keeps the blob name)."""
        if i >= len(layer.tops):
            raise self.error(layer, f"needs at least {i + 1} top blob(s), has {len(layer.tops)}")
        blob = layer.tops[i]
        self.writes_left[blob] -= 1
        name = self.fresh(blob if self.writes_left[blob] == 0 and blob not in self.used else f"{blob}/{layer.name}")
        self.current[blob] = name
        self.shapes[name] = tuple(int(d) for d in shape)
        self.produced.append(name)
        return name

    def const(self, layer: _Layer, what: str, value) -> str:
        name = self.fresh(f"{layer.name}/{what}")
        self.inits.append(self.numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], output: str, **attrs) -> str:
        self.nodes.append(self.helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    def temp(self, layer: _Layer, what: str, shape: Shape) -> str:
        name = self.fresh(f"{layer.name}/{what}")
        self.shapes[name] = tuple(shape)
        return name

    def blobs(self, layer: _Layer, sizes: Sequence[Optional[Shape]]) -> List[np.ndarray]:
        """The layer's weight blobs reshaped to ``sizes`` (None: keep the stored shape)."""
        have = self.weights.get(layer.name)
        if have is None:
            raise self.error(layer, f"has no weights in {self.weights_label} (no layer of that name with blobs)")
        if len(have) < len(sizes):
            raise self.error(layer, f"needs {len(sizes)} blobs, {self.weights_label} has {len(have)}")
        out = []
        for k, (blob, size) in enumerate(zip(have, sizes)):
            if size is not None:
                if blob.size != int(np.prod(size, dtype=np.int64)):
                    raise self.error(layer, f"blob {k} holds {blob.size} values {list(blob.shape)}, expected "
                                            f"{' x '.join(map(str, size))} = {int(np.prod(size))}")
                blob = blob.reshape(size)
            out.append(blob.astype(np.float32, copy=False))
        return out


def _int(value, layer: _Layer, c: _Converter, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise c.error(layer, f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _float(value, layer: _Layer, c: _Converter, what: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, Identifier) and value.lower() in ("inf", "infinity", "nan"):
        return float(value)
    raise c.error(layer, f"{what} must be a number, got {value!r}")


def _bool(value, layer: _Layer, c: _Converter, what: str) -> bool:
    if value in ("true", "True", "t", 1):
        return True
    if value in ("false", "False", "f", 0):
        return False
    raise c.error(layer, f"{what} must be true or false, got {value!r}")


def _enum(value, names: Sequence[str], layer: _Layer, c: _Converter, what: str) -> str:
    """An enum field's name (written as its name or its number)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, Identifier) and value in names:
        return str(value)
    raise c.error(layer, f"{what} must be one of {', '.join(names)}, got {value!r}")


def _axis(value, rank: int, layer: _Layer, c: _Converter, what: str = "axis") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -rank <= value < rank:
        raise c.error(layer, f"{what} {value!r} is out of range for a rank-{rank} input")
    return value % rank


def _hw(p: TextMessage, both: str, h: str, w: str, default: Optional[int], layer, c, minimum: int) -> Tuple[int, int]:
    """A 2-D parameter given as ``<both>`` (one value, or one per spatial axis) or as
    ``<h>`` and ``<w>``."""
    if p.has(h) or p.has(w):
        if not (p.has(h) and p.has(w)):
            raise c.error(layer, f"{h} and {w} must be given together")
        if p.has(both):
            raise c.error(layer, f"give either {both} or {h}/{w}, not both")
        return _int(p.get(h), layer, c, h, minimum), _int(p.get(w), layer, c, w, minimum)
    values = p.all(both)
    if not values:
        if default is None:
            raise c.error(layer, f"{both} (or {h}/{w}) is required")
        return default, default
    if len(values) == 1:
        v = _int(values[0], layer, c, both, minimum)
        return v, v
    if len(values) == 2:
        return _int(values[0], layer, c, both, minimum), _int(values[1], layer, c, both, minimum)
    raise c.error(layer, f"{both} has {len(values)} values; only 2-D (1 or 2 values) is supported")


def _spatial_input(c: _Converter, layer: _Layer) -> Tuple[str, Shape]:
    x, shape = c.bottom(layer, 0)
    if len(shape) != 4:
        raise c.error(layer, f"needs a 4-D (N, C, H, W) input, got shape {list(shape)}")
    return x, shape


def _convolution(c: _Converter, layer: _Layer) -> None:
    p = layer.param("convolution_param")
    x, (n, ch, hh, ww) = _spatial_input(c, layer)
    if p.get("axis", 1) != 1:
        raise c.error(layer, "only axis: 1 (channels) is supported")
    cout = _int(p.get("num_output"), layer, c, "num_output", 1)
    kh, kw = _hw(p, "kernel_size", "kernel_h", "kernel_w", None, layer, c, 1)
    sh, sw = _hw(p, "stride", "stride_h", "stride_w", 1, layer, c, 1)
    ph, pw = _hw(p, "pad", "pad_h", "pad_w", 0, layer, c, 0)
    dh, dw = _hw(p, "dilation", "dilation_h", "dilation_w", 1, layer, c, 1)
    group = _int(p.get("group", 1), layer, c, "group", 1)
    bias = _bool(p.get("bias_term", "true"), layer, c, "bias_term")
    if ch % group or cout % group:
        raise c.error(layer, f"group {group} must divide the {ch} input channels and num_output {cout}")
    oh = (hh + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (ww + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    if oh < 1 or ow < 1:
        raise c.error(layer, f"the kernel does not fit the {hh}x{ww} input")
    blobs = c.blobs(layer, [(cout, ch // group, kh, kw)] + ([(cout,)] if bias else []))
    inputs = [x, c.const(layer, "weight", blobs[0])] + ([c.const(layer, "bias", blobs[1])] if bias else [])
    c.node("Conv", inputs, c.top(layer, 0, (n, cout, oh, ow)), kernel_shape=[kh, kw], strides=[sh, sw],
           pads=[ph, pw, ph, pw], dilations=[dh, dw], group=group)


def _pool_size(size: int, k: int, s: int, p: int, ceil: bool, layer, c) -> int:
    if ceil:
        out = -(-(size + 2 * p - k) // s) + 1
        if (out - 1) * s >= size + p:
            if p == 0:
                # Caffe keeps this window (it starts past the input and pools nothing)
                raise c.error(layer, f"in ceil mode the last {k}-wide window (stride {s}) starts past the "
                                     f"{size}-long input; Caffe's output there is undefined")
            out -= 1
    else:
        out = (size + 2 * p - k) // s + 1
    return out


def _pooling(c: _Converter, layer: _Layer) -> None:
    p = layer.param("pooling_param")
    x, (n, ch, hh, ww) = _spatial_input(c, layer)
    method = _enum(p.get("pool", 0), ("MAX", "AVE", "STOCHASTIC"), layer, c, "pool")
    if method == "STOCHASTIC":
        raise c.error(layer, "STOCHASTIC pooling is not supported (MAX and AVE are)")
    if _bool(p.get("global_pooling", "false"), layer, c, "global_pooling"):
        op = "GlobalMaxPool" if method == "MAX" else "GlobalAveragePool"
        c.node(op, [x], c.top(layer, 0, (n, ch, 1, 1)))
        return
    kh, kw = _hw(p, "kernel_size", "kernel_h", "kernel_w", None, layer, c, 1)
    sh, sw = _hw(p, "stride", "stride_h", "stride_w", 1, layer, c, 1)
    ph, pw = _hw(p, "pad", "pad_h", "pad_w", 0, layer, c, 0)
    if ph >= kh or pw >= kw:
        raise c.error(layer, f"pad ({ph}, {pw}) must be smaller than the kernel ({kh}, {kw})")
    ceil = _enum(p.get("round_mode", 0), ("CEIL", "FLOOR"), layer, c, "round_mode") == "CEIL"
    oh = _pool_size(hh, kh, sh, ph, ceil, layer, c)
    ow = _pool_size(ww, kw, sw, pw, ceil, layer, c)
    if oh < 1 or ow < 1:
        raise c.error(layer, f"the {kh}x{kw} window does not fit the {hh}x{ww} input")
    attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ph, pw], ceil_mode=int(ceil))
    if method == "MAX":
        c.node("MaxPool", [x], c.top(layer, 0, (n, ch, oh, ow)), **attrs)
    else:
        # Caffe divides by the window clipped to the padded extent: count_include_pad=1 (the
        # importer's AveragePool never counts the ceil-mode overhang past the end padding).
        c.node("AveragePool", [x], c.top(layer, 0, (n, ch, oh, ow)), count_include_pad=1, **attrs)


def _relu(c: _Converter, layer: _Layer) -> None:
    x, shape = c.bottom(layer, 0)
    slope = _float(layer.param("relu_param").get("negative_slope", 0.0), layer, c, "negative_slope")
    if slope == 0.0:
        c.node("Relu", [x], c.top(layer, 0, shape))
    else:
        c.node("LeakyRelu", [x], c.top(layer, 0, shape), alpha=slope)


def _unary(op: str) -> Callable[[_Converter, _Layer], None]:
    def convert(c: _Converter, layer: _Layer) -> None:
        x, shape = c.bottom(layer, 0)
        c.node(op, [x], c.top(layer, 0, shape))

    return convert


def _inner_product(c: _Converter, layer: _Layer) -> None:
    p = layer.param("inner_product_param")
    x, shape = c.bottom(layer, 0)
    axis = _axis(p.get("axis", 1), len(shape), layer, c)
    cout = _int(p.get("num_output"), layer, c, "num_output", 1)
    transpose = _bool(p.get("transpose", "false"), layer, c, "transpose")
    bias = _bool(p.get("bias_term", "true"), layer, c, "bias_term")
    k = int(np.prod(shape[axis:], dtype=np.int64))
    m = int(np.prod(shape[:axis], dtype=np.int64))
    blobs = c.blobs(layer, [(k, cout) if transpose else (cout, k)] + ([(cout,)] if bias else []))
    if len(shape) != 2 or axis != 1:
        x = c.node("Flatten", [x], c.temp(layer, "flat", (m, k)), axis=axis)
    inputs = [x, c.const(layer, "weight", blobs[0])] + ([c.const(layer, "bias", blobs[1])] if bias else [])
    out_shape = tuple(shape[:axis]) + (cout,)
    if axis == 1:
        c.node("Gemm", inputs, c.top(layer, 0, out_shape), transB=0 if transpose else 1)
        return
    y = c.node("Gemm", inputs, c.temp(layer, "gemm", (m, cout)), transB=0 if transpose else 1)
    target = c.const(layer, "shape", np.array(out_shape, np.int64))
    c.node("Reshape", [y, target], c.top(layer, 0, out_shape))


def _softmax(c: _Converter, layer: _Layer) -> None:
    x, shape = c.bottom(layer, 0)
    axis = _axis(layer.param("softmax_param").get("axis", 1), len(shape), layer, c)
    c.node("Softmax", [x], c.top(layer, 0, shape), axis=axis)


def _batch_norm(c: _Converter, layer: _Layer) -> None:
    p = layer.param("batch_norm_param")
    x, shape = c.bottom(layer, 0)
    if len(shape) < 2:
        raise c.error(layer, f"needs an (N, C, ...) input, got shape {list(shape)}")
    if p.has("use_global_stats") and not _bool(p.get("use_global_stats"), layer, c, "use_global_stats"):
        raise c.error(layer, "use_global_stats: false normalises with batch statistics, which a converted "
                             "model cannot do; remove it (the TEST phase uses the stored statistics)")
    eps = _float(p.get("eps", 1e-5), layer, c, "eps")
    ch = shape[1]
    mean, var, factor = c.blobs(layer, [(ch,), (ch,), None])
    if factor.size != 1:
        raise c.error(layer, f"blob 2 (the moving-average scale factor) must hold 1 value, holds {factor.size}")
    s = float(factor.reshape(-1)[0])
    s = 0.0 if s == 0.0 else 1.0 / s
    ones = np.ones(ch, np.float32)
    c.node("BatchNormalization",
           [x, c.const(layer, "scale", ones), c.const(layer, "bias", np.zeros(ch, np.float32)),
            c.const(layer, "mean", mean * np.float32(s)), c.const(layer, "var", var * np.float32(s))],
           c.top(layer, 0, shape), epsilon=eps)


def _scale(c: _Converter, layer: _Layer) -> None:
    p = layer.param("scale_param")
    x, shape = c.bottom(layer, 0)
    rank = len(shape)
    axis = _axis(p.get("axis", 1), rank, layer, c)
    bias = _bool(p.get("bias_term", "false"), layer, c, "bias_term")
    if len(layer.bottoms) > 1:
        factor, fshape = c.bottom(layer, 1)
        if tuple(shape[axis:axis + len(fshape)]) != tuple(fshape):
            raise c.error(layer, f"bottom 1 of shape {list(fshape)} does not match the input {list(shape)} at "
                                 f"axis {axis}")
        trailing = rank - axis - len(fshape)
        if trailing:
            target = c.const(layer, "scale_shape", np.array([0] * len(fshape) + [1] * trailing, np.int64))
            factor = c.node("Reshape", [factor, target], c.temp(layer, "scale", tuple(fshape) + (1,) * trailing))
        param_shape = tuple(fshape)
        blobs = c.blobs(layer, [None]) if bias else []
        bias_blob = blobs[0] if bias else None
    else:
        num_axes = _int(p.get("num_axes", 1), layer, c, "num_axes", -1)
        end = rank if num_axes == -1 else axis + num_axes
        if end > rank:
            raise c.error(layer, f"axis {axis} + num_axes {num_axes} exceeds the input rank {rank}")
        param_shape = tuple(shape[axis:end])
        blobs = c.blobs(layer, [param_shape] + ([param_shape] if bias else []))
        factor = c.const(layer, "scale", blobs[0].reshape(param_shape + (1,) * (rank - end)))
        bias_blob = blobs[1] if bias else None
    if bias_blob is None:
        c.node("Mul", [x, factor], c.top(layer, 0, shape))
        return
    if bias_blob.size != int(np.prod(param_shape, dtype=np.int64)):
        raise c.error(layer, f"the bias blob holds {bias_blob.size} values, expected {list(param_shape)}")
    y = c.node("Mul", [x, factor], c.temp(layer, "scaled", shape))
    trailing = rank - axis - len(param_shape)
    b = c.const(layer, "bias", bias_blob.reshape(param_shape + (1,) * trailing))
    c.node("Add", [y, b], c.top(layer, 0, shape))


def _eltwise(c: _Converter, layer: _Layer) -> None:
    p = layer.param("eltwise_param")
    op = _enum(p.get("operation", 1), ("PROD", "SUM", "MAX"), layer, c, "operation")
    terms = [c.bottom(layer, i) for i in range(max(2, len(layer.bottoms)))]
    shape = terms[0][1]
    if any(s != shape for _, s in terms):
        raise c.error(layer, f"bottoms must have one shape, got {[list(s) for _, s in terms]}")
    coeffs = [_float(v, layer, c, "coeff") for v in p.all("coeff")]
    if coeffs and op != "SUM":
        raise c.error(layer, "coeff is only allowed with operation SUM")
    if coeffs and len(coeffs) != len(terms):
        raise c.error(layer, f"{len(coeffs)} coeff values for {len(terms)} bottoms")
    names = [t for t, _ in terms]
    if coeffs:
        names = [t if k == 1.0 else c.node("Mul", [t, c.const(layer, f"coeff{i}", np.float32(k))],
                                            c.temp(layer, f"term{i}", shape))
                 for i, (t, k) in enumerate(zip(names, coeffs))]
    onnx_op = {"SUM": "Sum", "PROD": "Mul", "MAX": "Max"}[op]
    if onnx_op == "Mul" and len(names) > 2:
        acc = names[0]
        for i, t in enumerate(names[1:-1]):
            acc = c.node("Mul", [acc, t], c.temp(layer, f"prod{i}", shape))
        names = [acc, names[-1]]
    if onnx_op == "Sum" and len(names) == 2:
        onnx_op = "Add"
    c.node(onnx_op, names, c.top(layer, 0, shape))


def _concat(c: _Converter, layer: _Layer) -> None:
    p = layer.param("concat_param")
    terms = [c.bottom(layer, i) for i in range(len(layer.bottoms) or 1)]
    rank = len(terms[0][1])
    axis = _axis(p.get("axis", p.get("concat_dim", 1)), rank, layer, c)
    shapes = [s for _, s in terms]
    if any(len(s) != rank or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:] for s in shapes):
        raise c.error(layer, f"bottom shapes {[list(s) for s in shapes]} differ outside axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    c.node("Concat", [t for t, _ in terms], c.top(layer, 0, tuple(out)), axis=axis)


def _flatten(c: _Converter, layer: _Layer) -> None:
    p = layer.param("flatten_param")
    x, shape = c.bottom(layer, 0)
    rank = len(shape)
    axis = _axis(p.get("axis", 1), rank, layer, c)
    end = _axis(p.get("end_axis", -1), rank, layer, c, "end_axis")
    if end < axis:
        raise c.error(layer, f"end_axis {end} is before axis {axis}")
    out = shape[:axis] + (int(np.prod(shape[axis:end + 1], dtype=np.int64)),) + shape[end + 1:]
    # leading dims copied (0) and the flattened one inferred (-1): independent of the batch size
    target = c.const(layer, "shape", np.array([0] * axis + [-1] + list(shape[end + 1:]), np.int64))
    c.node("Reshape", [x, target], c.top(layer, 0, out))


def _reshape(c: _Converter, layer: _Layer) -> None:
    p = layer.param("reshape_param")
    x, shape = c.bottom(layer, 0)
    rank = len(shape)
    dims = p.get("shape")
    dims = list(dims.all("dim")) if isinstance(dims, TextMessage) else []
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in dims) or dims.count(-1) > 1:
        raise c.error(layer, f"shape dims must be ints >= -1 with at most one -1, got {dims}")
    axis = p.get("axis", 0)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -rank - 1 <= axis <= rank:
        raise c.error(layer, f"axis {axis!r} is out of range for a rank-{rank} input")
    axis = axis if axis >= 0 else rank + 1 + axis
    num_axes = _int(p.get("num_axes", -1), layer, c, "num_axes", -1)
    end = rank if num_axes == -1 else axis + num_axes
    if end > rank:
        raise c.error(layer, f"axis {axis} + num_axes {num_axes} exceeds the input rank {rank}")
    middle = []
    for i, d in enumerate(dims):
        if d == 0:
            if axis + i >= rank:
                raise c.error(layer, f"shape dim {i} is 0 (copy) but the input has no axis {axis + i}")
            middle.append(shape[axis + i])
        else:
            middle.append(d)
    total = int(np.prod(shape, dtype=np.int64))
    known = int(np.prod([d for d in middle if d != -1], dtype=np.int64)) * \
        int(np.prod(shape[:axis] + shape[end:], dtype=np.int64))
    if -1 in middle:
        if known == 0 or total % known:
            raise c.error(layer, f"cannot reshape {list(shape)} to {dims}: {total} values")
        middle[middle.index(-1)] = total // known
    out = tuple(shape[:axis]) + tuple(middle) + tuple(shape[end:])
    if int(np.prod(out, dtype=np.int64)) != total:
        raise c.error(layer, f"cannot reshape {list(shape)} ({total} values) to {list(out)}")
    # Caffe's 0 copies the input dim at the same position, as ONNX's 0 does
    target = [0] * axis + list(dims) + list(shape[end:])
    c.node("Reshape", [x, c.const(layer, "shape", np.array(target, np.int64))], c.top(layer, 0, out))


def _dropout(c: _Converter, layer: _Layer) -> None:
    p = layer.param("dropout_param")
    x, shape = c.bottom(layer, 0)
    if _bool(p.get("scale_train", "true"), layer, c, "scale_train"):
        c.node("Identity", [x], c.top(layer, 0, shape))
        return
    # without scale_train Caffe scales at test time instead
    keep = 1.0 - _float(p.get("dropout_ratio", 0.5), layer, c, "dropout_ratio")
    c.node("Mul", [x, c.const(layer, "keep", np.float32(keep))], c.top(layer, 0, shape))


def _split(c: _Converter, layer: _Layer) -> None:
    x, shape = c.bottom(layer, 0)
    for i in range(len(layer.tops)):
        c.node("Identity", [x], c.top(layer, i, shape))


def _permute(c: _Converter, layer: _Layer) -> None:
    x, shape = c.bottom(layer, 0)
    rank = len(shape)
    order = [_axis(v, rank, layer, c, "order") for v in layer.param("permute_param").all("order")]
    if len(set(order)) != len(order):
        raise c.error(layer, f"order {order} names an axis twice")
    # Caffe appends the axes the order leaves out, in their own order
    perm = order + [a for a in range(rank) if a not in order]
    c.node("Transpose", [x], c.top(layer, 0, tuple(shape[a] for a in perm)), perm=perm)


def _normalize(c: _Converter, layer: _Layer) -> None:
    """SSD's ``Normalize``: ``x / ||x||_2`` over the channels of each position
    (``across_spatial: false``) or over all of a sample (the default), times a learned
    scale per channel (or one, ``channel_shared``).  Caffe adds ``eps`` (1e-10) to the
    squared norm, which changes nothing a float32 norm can show but a zero vector."""
    p = layer.param("norm_param")
    x, shape = c.bottom(layer, 0)
    if len(shape) < 2:
        raise c.error(layer, f"needs an (N, C, ...) input, got shape {list(shape)}")
    across = _bool(p.get("across_spatial", "true"), layer, c, "across_spatial")
    shared = _bool(p.get("channel_shared", "true"), layer, c, "channel_shared")
    ch = shape[1]
    (scale,) = c.blobs(layer, [(1,) if shared else (ch,)])
    if across:
        flat = c.node("Flatten", [x], c.temp(layer, "flat", (shape[0], int(np.prod(shape[1:], dtype=np.int64)))),
                      axis=1)
        unit = c.node("LpNormalization", [flat], c.temp(layer, "l2", c.shapes[flat]), axis=1, p=2)
        target = c.const(layer, "shape", np.array([0] + list(shape[1:]), np.int64))
        unit = c.node("Reshape", [unit, target], c.temp(layer, "l2_shaped", shape))
    else:
        unit = c.node("LpNormalization", [x], c.temp(layer, "l2", shape), axis=1, p=2)
    factor = scale.reshape((1,) if shared else ((ch,) + (1,) * (len(shape) - 2)))
    c.node("Mul", [unit, c.const(layer, "scale", factor)], c.top(layer, 0, shape))


_CONVERTERS: Dict[str, Callable[[_Converter, _Layer], None]] = {
    "Convolution": _convolution, "Pooling": _pooling, "ReLU": _relu, "Sigmoid": _unary("Sigmoid"),
    "TanH": _unary("Tanh"), "InnerProduct": _inner_product, "Softmax": _softmax, "BatchNorm": _batch_norm,
    "Scale": _scale, "Eltwise": _eltwise, "Concat": _concat, "Flatten": _flatten, "Reshape": _reshape,
    "Dropout": _dropout, "Split": _split, "Permute": _permute, "Normalize": _normalize,
}

#: Layers that compute constants for a post-processing step: dropped with what only they
#: feed (RKNN-Toolkit2 removes them too), so their blobs are not model outputs.
_DROPPED_LAYERS = ("PriorBox",)

#: The Caffe layer types :func:`load_caffe` converts.
SUPPORTED_LAYERS = tuple(sorted(list(_CONVERTERS) + ["Input"] + list(_DROPPED_LAYERS)))


def caffe_to_onnx(net: TextMessage, weights: Dict[str, List[np.ndarray]], input_name=None,
                  dynamic_input=None, label: str = "the prototxt", weights_label: str = "the caffemodel",
                  warn=None):
    """The ``onnx.ModelProto`` (opset 13) of a parsed net and its weights (see the module
    docstring).  ``input_name``: input names (blob or ``Input`` layer names) to put first,
    in this order.  ``dynamic_input``: the shape sets; dims that vary across them become
    symbolic in the ONNX inputs.  ``warn``: called with a message naming the dropped
    ``PriorBox`` layers, if any.

    Raises:
        ModelInvalidError: an unsupported layer type or option, missing or mis-sized
            weights, inconsistent shapes, an unknown input name (naming the layer).
    """
    from onnx import TensorProto, helper

    layers = _layers(net, label)
    inputs = _net_inputs(net, layers, label)
    if not inputs:
        raise ModelInvalidError(f"{label} declares no input (input/input_shape or an Input layer)", op=_OP)
    inputs = _order_inputs(inputs, input_name, layers, label)
    sets = shape_sets(dynamic_input, len(inputs), _OP)
    c = _Converter(weights, label, weights_label)
    for layer in layers:
        if layer.type != "Input":
            c.writes_left.update(layer.tops)
    graph_inputs = []
    for i, (blob, shape, what) in enumerate(inputs):
        if shape is None:
            if sets is None:
                raise ModelInvalidError(f"{label}: {what} has no shape; give input_shape/input_dim, or "
                                        f"input_param {{ shape {{ dim: ... }} }} on the Input layer", op=_OP)
            shape = sets[0][i]
        if sets is not None and any(len(st[i]) != len(shape) for st in sets):
            raise ModelInvalidError(f"{label}: the dynamic_input shapes of {blob!r} {[list(st[i]) for st in sets]} "
                                    f"must have the rank of its declared shape {list(shape)}", op=_OP)
        dims = [d if sets is None or all(st[i][k] == d for st in sets) else f"{blob}_d{k}"
                for k, d in enumerate(shape)]
        if blob in c.used:
            raise ModelInvalidError(f"{label}: input {blob!r} is declared twice", op=_OP)
        c.used.add(blob)
        c.current[blob] = blob
        c.shapes[blob] = tuple(shape)
        graph_inputs.append(helper.make_tensor_value_info(blob, TensorProto.FLOAT, dims))
    dropped_blobs: set = set()
    dropped: List[str] = []
    for layer in layers:
        if layer.type == "Input":
            continue
        if layer.type in _DROPPED_LAYERS or (layer.bottoms and all(b in dropped_blobs for b in layer.bottoms)):
            for i, blob in enumerate(layer.bottoms):
                if blob not in dropped_blobs:
                    c.bottom(layer, i)  # read: a blob only this layer reads is no model output
            dropped_blobs.update(layer.tops)
            dropped.append(layer.name)
            continue
        late = [b for b in layer.bottoms if b in dropped_blobs]
        if late:
            raise c.error(layer, f"reads {', '.join(map(repr, late))}, which comes from a dropped "
                                 f"{'/'.join(_DROPPED_LAYERS)} layer, together with other blobs")
        convert = _CONVERTERS.get(layer.type)
        if convert is None:
            raise ModelInvalidError(f"{label}: {layer.label}: Caffe layer type {layer.type!r} is not supported; "
                                    f"supported: {', '.join(SUPPORTED_LAYERS)}", op=_OP)
        convert(c, layer)
    if dropped and warn is not None:
        warn(f"{', '.join(_DROPPED_LAYERS)} layers and what only they feed are removed, as RKNN-Toolkit2 "
             f"removes them (the priors are constants for the post-processing): {', '.join(dropped)}")
    latest = set(c.current.values())
    outputs = [t for t in c.produced if t not in c.consumed and t in latest]
    if not outputs:
        raise ModelInvalidError(f"{label} computes nothing: no layer output is left unread", op=_OP)
    graph = helper.make_graph(c.nodes, str(net.get("name", "caffe")), graph_inputs,
                              [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in outputs], c.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="rknnlite.caffe")


def _order_inputs(inputs, input_name, layers: List[_Layer], label: str):
    if input_name is None:
        return inputs
    names = [input_name] if isinstance(input_name, str) else input_name
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ModelInvalidError(f"input_name must be an input name or a list of them, not {input_name!r}", op=_OP)
    by_layer = {t: layer.name for layer in layers if layer.type == "Input" for t in layer.tops}
    ordered = []
    for name in names:
        match = [inp for inp in inputs if name in (inp[0], by_layer.get(inp[0]))]
        if not match:
            raise ModelInvalidError(f"input_name {name!r} is not an input of {label}; its inputs: "
                                    f"{', '.join(i[0] for i in inputs)}", op=_OP)
        ordered.extend(m for m in match if m not in ordered)
    return ordered + [inp for inp in inputs if inp not in ordered]


def load_caffe(model, blobs=None, input_name=None, dynamic_input=None, custom_ops=None, warn=None):
    """Convert a Caffe network (``.prototxt`` path or bytes, ``.caffemodel`` path or bytes;
    ``blobs=None`` when no layer has weights) to an
    :class:`~rknnlite.toolkit.onnx_import.ImportedModel`.

    ``input_name``: an input name or a list of them, put first in this order (by default
    the inputs keep their file order).  ``dynamic_input``, ``custom_ops`` and ``warn`` are
    passed to :func:`~rknnlite.toolkit.onnx_import.import_onnx`.

    Raises:
        ImportError: the onnx package is missing (the message says what to install).
        ModelInvalidError: missing or malformed files (naming the file and what is wrong),
            unsupported layer types or options (naming the layer), missing or mis-sized weights.
    """
    require_onnx("load_caffe")
    from ..onnx_import import import_onnx

    net = read_prototxt(model)
    weights = read_caffemodel(blobs) if blobs is not None else {}
    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "the prototxt"
    weights_label = os.fspath(blobs) if isinstance(blobs, (str, os.PathLike)) else \
        ("the caffemodel" if blobs is not None else "the model (blobs=None)")
    proto = caffe_to_onnx(net, weights, input_name, dynamic_input, label, weights_label, warn)
    return import_onnx(proto, dynamic_input=dynamic_input, custom_ops=custom_ops, warn=warn)
