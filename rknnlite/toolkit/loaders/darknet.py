"""Darknet ``.cfg`` + ``.weights`` -> ONNX -> :class:`~rknnlite.toolkit.onnx_import.ImportedModel`.

:func:`load_darknet` reads a Darknet network description and its weights file, writes the
network as an ONNX graph (opset 13) with :mod:`onnx.helper`, and hands that to
:func:`~rknnlite.toolkit.onnx_import.import_onnx`, so everything after loading (build,
quantization, ``dynamic_input``, export) is the ONNX path.

Model boundary:

* one input, ``"input"``, float32 NCHW ``(1, channels, height, width)`` from ``[net]``.
* one output per ``[yolo]`` / ``[region]`` section, named ``"yolo_<i>"`` / ``"region_<i>"``
  (``i``: the section's Darknet layer index, the index ``route``/``shortcut`` count with,
  ``[net]`` not counted), in file order.  It is that section's *input*, the raw head
  convolution ``(1, num_anchors * (5 + classes), h, w)``: no sigmoid/exp decode is applied.
  The anchors, masks and class count stay in the ``.cfg``; :func:`yolo_heads` returns them
  per output.  A network without such sections has one output, ``"output"``: the last
  layer's.

Layers (keys not listed are ignored with a warning, except Darknet's training-only keys):

* ``[convolutional]``: ``filters``, ``size``, ``stride`` (or ``stride_x``/``stride_y``),
  ``pad`` (1: padding ``size // 2``) / ``padding``, ``groups``, ``batch_normalize``,
  ``activation`` (``linear``, ``leaky`` (slope 0.1), ``relu``, ``relu6``, ``logistic``,
  ``tanh``, ``elu``, ``mish``, ``swish``; default ``logistic`` as in Darknet).
  Batch norm is ``(x - mean) / sqrt(var + 1e-5) * scale + bias`` (AlexeyAB's Darknet; the
  original adds ``1e-6`` to ``sqrt(var)`` instead, a difference far below float16 precision).
* ``[maxpool]``: ``size``, ``stride``, ``padding`` (default ``size - 1``); Darknet pads
  ``padding // 2`` before and what the output size ``(in + padding - size) // stride + 1``
  needs after (so the 2x2 stride-1 pool of yolov3-tiny keeps 13x13).
* ``[avgpool]`` (global average), ``[dropout]`` (identity at inference).
* ``[route]``: ``layers`` (negative: relative to the route), concatenated on channels;
  ``groups``/``group_id`` take channel slice ``group_id`` of each input (yolov4-tiny).
* ``[shortcut]``: ``from`` (one or more layers), ``alpha``/``beta`` (the previous layer's
  and the added layers' factors), ``activation``; shapes must match.
* ``[upsample]``: ``stride`` (nearest neighbour), ``scale`` (output factor).

The weights file: ``major, minor, revision`` as int32, then ``seen`` (int64 when
``major * 10 + minor >= 2`` and both are below 1000, else int32), then float32 values
in layer order; per convolution ``biases``, then with ``batch_normalize`` ``scales``,
``rolling_mean``, ``rolling_variance``, then the kernel ``[filters, channels / groups,
size, size]``.  Bytes after the last layer's values are ignored with a warning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .common import read_source, require_onnx

__all__ = ["load_darknet", "parse_cfg", "read_weights", "darknet_to_onnx", "yolo_heads",
           "CfgSection", "WeightsFile", "INPUT_NAME", "OPSET", "ACTIVATIONS"]

_OP = "load_darknet"

#: Name of the converted model's input.
INPUT_NAME = "input"
#: ONNX opset of the generated graph.
OPSET = 13
#: Darknet activations this loader converts.
ACTIVATIONS = ("linear", "leaky", "relu", "relu6", "logistic", "tanh", "elu", "mish", "swish")
_SECTIONS = ("convolutional", "maxpool", "avgpool", "dropout", "route", "shortcut", "upsample", "yolo", "region")
_HEADS = ("yolo", "region")
_BN_EPS = 1e-5

# Per section: the keys read here, and keys whose non-default value changes the result
# (an error, since it is not converted).  Other keys are warned about and ignored.
_KEYS = {
    "convolutional": {"filters", "size", "stride", "stride_x", "stride_y", "pad", "padding", "groups",
                      "batch_normalize", "activation"},
    "maxpool": {"size", "stride", "stride_x", "stride_y", "padding"},
    "avgpool": set(),
    "dropout": {"probability"},
    "route": {"layers", "groups", "group_id"},
    "shortcut": {"from", "alpha", "beta", "activation"},
    "upsample": {"stride", "scale"},
}
_MUST_DEFAULT = {
    "convolutional": {"dilation": "1", "binary": "0", "xnor": "0", "antialiasing": "0", "deform": "0",
                      "share_index": None, "dontload": "0", "dontloadscales": "0", "assisted_excitation": "0"},
    "maxpool": {"maxpool_depth": "0", "antialiasing": "0", "out_channels": None},
    "shortcut": {"weights_type": "none"},
}
# Keys that only matter for training (never warned about).
_TRAINING_KEYS = {"stopbackward", "train_only_bn", "learning_rate", "dropblock", "dropblock_size_rel",
                  "dropblock_size_abs", "weights_normalization", "stop_gradient"}


@dataclass
class CfgSection:
    """One ``[type]`` section of a ``.cfg`` file.

    Attributes:
        type: the section name, lower case (``"convolutional"``, ``"net"``, ...).
        line: its 1-based line number.
        options: ``{key: value}`` as written (strings, whitespace removed; a repeated key
            keeps its first value, as Darknet does).
        lines: ``{key: line number}``.
    """

    type: str
    line: int
    options: Dict[str, str] = field(default_factory=dict)
    lines: Dict[str, int] = field(default_factory=dict)


@dataclass
class WeightsFile:
    """A parsed ``.weights`` file.

    Attributes:
        version: ``(major, minor, revision)``.
        seen: images seen in training (from the header; not used).
        header_size: bytes before the first weight (20 or 16).
        values: the float32 weights (a read-only view of the file's bytes, not a copy).
        size: the file's size in bytes.
    """

    version: Tuple[int, int, int]
    seen: int
    header_size: int
    values: np.ndarray
    size: int


# -- reading ---------------------------------------------------------------------------------


def parse_cfg(model) -> List[CfgSection]:
    """Parse a Darknet ``.cfg`` (path or bytes) into its sections, in file order.

    Lines are stripped of all whitespace (as Darknet does); empty lines and lines starting
    with ``#`` or ``;`` are skipped.  Section names are not checked here.

    Raises:
        ModelInvalidError: unreadable file, a ``key=value`` line before the first section,
            a line that is neither, or an empty section name (naming the line).
    """
    data, label = read_source(model, "darknet", "cfg", _OP)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelInvalidError(f"{label} is not a text file (not UTF-8); expected a darknet .cfg", op=_OP) from None
    sections: List[CfgSection] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            if not line.endswith("]") or len(line) < 3:
                raise ModelInvalidError(f"{label} line {number}: malformed section header {raw.strip()!r}", op=_OP)
            sections.append(CfgSection(line[1:-1].lower(), number))
            continue
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise ModelInvalidError(f"{label} line {number}: expected 'key=value' or '[section]', got {raw.strip()!r}",
                                    op=_OP)
        if not sections:
            raise ModelInvalidError(f"{label} line {number}: option {key!r} before the first [section]", op=_OP)
        sec = sections[-1]
        if key not in sec.options:
            sec.options[key] = value
            sec.lines[key] = number
    if not sections:
        raise ModelInvalidError(f"{label} has no sections; expected a darknet .cfg starting with [net]", op=_OP)
    return sections


def read_weights(weight) -> WeightsFile:
    """Parse a Darknet ``.weights`` file (path or bytes): header and float32 values.

    Raises:
        ModelInvalidError: missing/unreadable file, or one shorter than its header
            (naming the expected and found sizes).
    """
    data, label = read_source(weight, "darknet", "weights", _OP)
    size = len(data)
    if size < 12:
        raise ModelInvalidError(f"weights file {label} is {size} bytes; its header alone needs at least 16 bytes",
                                op=_OP)
    major, minor, revision = (int(v) for v in np.frombuffer(data, "<i4", 3))
    wide = major * 10 + minor >= 2 and major < 1000 and minor < 1000
    header = 20 if wide else 16
    if size < header:
        raise ModelInvalidError(
            f"weights file {label} is {size} bytes; its header (version {major}.{minor}.{revision}) needs {header} "
            f"bytes", op=_OP)
    seen = int(np.frombuffer(data, "<i8" if wide else "<i4", 1, 12)[0])
    count = (size - header) // 4
    values = np.frombuffer(data, "<f4", count, header)
    return WeightsFile((major, minor, revision), seen, header, values, size)


# -- conversion ------------------------------------------------------------------------------


class _Weights:
    """Hands out consecutive float32 runs; records the total needed even past the end (there
    it hands out an empty placeholder: the conversion refuses the short file once every layer
    is counted, and a forged size in the cfg must not allocate its terabytes first)."""

    def __init__(self, values: np.ndarray):
        self.values = values
        self.used = 0

    def take(self, shape: Sequence[int]) -> np.ndarray:
        n = int(np.prod(shape))
        start, self.used = self.used, self.used + n
        if self.used > len(self.values):
            return np.zeros(0, np.float32)
        return self.values[start:self.used].astype(np.float32).reshape(shape)


class _Builder:
    """Accumulates ONNX nodes and initializers with unique names."""

    def __init__(self):
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list = []
        self.inits: list = []

    def const(self, name: str, value) -> str:
        self.inits.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], output: str, **attrs) -> str:
        self.nodes.append(self.helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output


@dataclass
class _Layer:
    tensor: str                   # the ONNX tensor holding the layer's output
    shape: Tuple[int, int, int]   # (c, h, w)
    type: str
    line: int


def _int(sec: CfgSection, key: str, default: Optional[int], label: str, minimum: Optional[int] = None) -> int:
    raw = sec.options.get(key)
    if raw is None:
        if default is None:
            raise ModelInvalidError(f"{label} line {sec.line}: [{sec.type}] needs '{key}'", op=_OP)
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ModelInvalidError(f"{label} line {sec.lines[key]}: [{sec.type}] {key}={raw!r} is not an integer",
                                op=_OP) from None
    if minimum is not None and value < minimum:
        raise ModelInvalidError(f"{label} line {sec.lines[key]}: [{sec.type}] {key}={value} must be >= {minimum}",
                                op=_OP)
    return value


def _float(sec: CfgSection, key: str, default: float, label: str) -> float:
    raw = sec.options.get(key)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ModelInvalidError(f"{label} line {sec.lines[key]}: [{sec.type}] {key}={raw!r} is not a number",
                                op=_OP) from None


def _int_list(sec: CfgSection, key: str, label: str) -> List[int]:
    raw = sec.options.get(key)
    if raw is None:
        raise ModelInvalidError(f"{label} line {sec.line}: [{sec.type}] needs '{key}'", op=_OP)
    try:
        return [int(v) for v in raw.split(",") if v != ""]
    except ValueError:
        raise ModelInvalidError(f"{label} line {sec.lines[key]}: [{sec.type}] {key}={raw!r} is not a list of "
                                f"integers", op=_OP) from None


def _check_keys(sec: CfgSection, label: str, warn: Callable[[str], None]) -> None:
    for key, default in _MUST_DEFAULT.get(sec.type, {}).items():
        if key in sec.options and sec.options[key] != default:
            raise ModelInvalidError(
                f"{label} line {sec.lines[key]}: [{sec.type}] {key}={sec.options[key]} is not supported "
                f"(only {key}={default})" if default is not None else
                f"{label} line {sec.lines[key]}: [{sec.type}] option {key!r} is not supported", op=_OP)
    known = _KEYS[sec.type] | set(_MUST_DEFAULT.get(sec.type, {})) | _TRAINING_KEYS
    for key in sec.options:
        if key not in known:
            warn(f"{label} line {sec.lines[key]}: [{sec.type}] option {key!r} is not used by this loader; ignored")


def _layer_index(value: int, current: int, sec: CfgSection, key: str, label: str) -> int:
    index = current + value if value < 0 else value
    if not 0 <= index < current:
        raise ModelInvalidError(
            f"{label} line {sec.lines.get(key, sec.line)}: [{sec.type}] (layer {current}) refers to layer {value} "
            f"-> {index}, which is not an earlier layer (0..{current - 1})", op=_OP)
    return index


def _activation(b: _Builder, x: str, name: str, sec: CfgSection, label: str, default: str) -> str:
    act = sec.options.get("activation", default).lower()
    if act == "linear":
        return x
    if act == "leaky":
        return b.node("LeakyRelu", [x], name, alpha=0.1)
    if act == "relu":
        return b.node("Relu", [x], name)
    if act == "relu6":
        return b.node("Clip", [x, b.const(name + "/min", np.float32(0)), b.const(name + "/max", np.float32(6))], name)
    if act == "logistic":
        return b.node("Sigmoid", [x], name)
    if act == "tanh":
        return b.node("Tanh", [x], name)
    if act == "elu":
        return b.node("Elu", [x], name, alpha=1.0)
    if act == "mish":  # x * tanh(softplus(x))
        t = b.node("Tanh", [b.node("Softplus", [x], name + "/softplus")], name + "/tanh")
        return b.node("Mul", [x, t], name)
    if act == "swish":  # x * sigmoid(x)
        return b.node("Mul", [x, b.node("Sigmoid", [x], name + "/sigmoid")], name)
    line = sec.lines.get("activation", sec.line)
    raise ModelInvalidError(f"{label} line {line}: activation {act!r} of [{sec.type}] is not supported; "
                            f"supported: {', '.join(ACTIVATIONS)}", op=_OP)


def _conv(b, sec, x: _Layer, w: _Weights, name: str, label: str) -> Tuple[str, Tuple[int, int, int]]:
    c, h, wd = x.shape
    filters = _int(sec, "filters", 1, label, 1)
    size = _int(sec, "size", 1, label, 1)
    stride = _int(sec, "stride", 1, label, 1)
    sy, sx = _int(sec, "stride_y", stride, label, 1), _int(sec, "stride_x", stride, label, 1)
    pad = _int(sec, "padding", 0, label, 0)
    if _int(sec, "pad", 0, label):
        pad = size // 2
    groups = _int(sec, "groups", 1, label, 1)
    bn = _int(sec, "batch_normalize", 0, label)
    if c % groups or filters % groups:
        raise ModelInvalidError(f"{label} line {sec.line}: [convolutional] groups={groups} must divide its "
                                f"{c} input channels and filters={filters}", op=_OP)
    oh, ow = (h + 2 * pad - size) // sy + 1, (wd + 2 * pad - size) // sx + 1
    if oh < 1 or ow < 1:
        raise ModelInvalidError(f"{label} line {sec.line}: [convolutional] size={size} does not fit its {h}x{wd} "
                                f"input (padding {pad})", op=_OP)
    bias = w.take((filters,))
    if bn:
        scales, mean, var = w.take((filters,)), w.take((filters,)), w.take((filters,))
    kernel = w.take((filters, c // groups, size, size))
    attrs = dict(kernel_shape=[size, size], strides=[sy, sx], pads=[pad, pad, pad, pad], group=groups)
    if bn:
        y = b.node("Conv", [x.tensor, b.const(name + "/weight", kernel)], name + "/conv", **attrs)
        y = b.node("BatchNormalization", [y, b.const(name + "/scale", scales), b.const(name + "/bias", bias),
                                          b.const(name + "/mean", mean), b.const(name + "/var", var)],
                   name + "/bn", epsilon=_BN_EPS)
    else:
        y = b.node("Conv", [x.tensor, b.const(name + "/weight", kernel), b.const(name + "/bias", bias)],
                   name + "/conv", **attrs)
    return _activation(b, y, name, sec, label, "logistic"), (filters, oh, ow)


def _maxpool(b, sec, x: _Layer, name: str, label: str) -> Tuple[str, Tuple[int, int, int]]:
    c, h, w = x.shape
    stride = _int(sec, "stride", 1, label, 1)
    sy, sx = _int(sec, "stride_y", stride, label, 1), _int(sec, "stride_x", stride, label, 1)
    size = _int(sec, "size", stride, label, 1)
    padding = _int(sec, "padding", size - 1, label, 0)
    oh, ow = (h + padding - size) // sy + 1, (w + padding - size) // sx + 1
    if oh < 1 or ow < 1:
        raise ModelInvalidError(f"{label} line {sec.line}: [maxpool] size={size} does not fit its {h}x{w} input",
                                op=_OP)
    # Darknet starts windows at -padding // 2; the far side pads what the last window reaches.
    begin = padding // 2
    end_h = max(0, (oh - 1) * sy + size - begin - h)
    end_w = max(0, (ow - 1) * sx + size - begin - w)
    y = b.node("MaxPool", [x.tensor], name, kernel_shape=[size, size], strides=[sy, sx],
               pads=[begin, begin, end_h, end_w])
    return y, (c, oh, ow)


def _route(b, sec, layers: List[_Layer], name: str, label: str) -> Tuple[str, Tuple[int, int, int]]:
    current = len(layers)
    groups = _int(sec, "groups", 1, label, 1)
    group_id = _int(sec, "group_id", 0, label, 0)
    if group_id >= groups:
        raise ModelInvalidError(f"{label} line {sec.lines['group_id']}: [route] group_id={group_id} must be below "
                                f"groups={groups}", op=_OP)
    sources = [layers[_layer_index(v, current, sec, "layers", label)] for v in _int_list(sec, "layers", label)]
    if not sources:
        raise ModelInvalidError(f"{label} line {sec.line}: [route] layers is empty", op=_OP)
    parts, channels = [], 0
    for k, src in enumerate(sources):
        c, h, w = src.shape
        if (h, w) != sources[0].shape[1:]:
            raise ModelInvalidError(
                f"{label} line {sec.line}: [route] (layer {current}) concatenates outputs of different sizes: "
                f"{[s.shape for s in sources]} (c, h, w)", op=_OP)
        tensor = src.tensor
        if groups > 1:
            if c % groups:
                raise ModelInvalidError(f"{label} line {sec.line}: [route] groups={groups} does not divide the "
                                        f"{c} channels of its input", op=_OP)
            part = c // groups
            tensor = b.node("Slice", [tensor, b.const(f"{name}/starts{k}", np.array([group_id * part], np.int64)),
                                      b.const(f"{name}/ends{k}", np.array([(group_id + 1) * part], np.int64)),
                                      b.const(f"{name}/axes{k}", np.array([1], np.int64))], f"{name}/slice{k}")
            c = part
        parts.append(tensor)
        channels += c
    out = parts[0] if len(parts) == 1 else b.node("Concat", parts, name, axis=1)
    return out, (channels, sources[0].shape[1], sources[0].shape[2])


def _shortcut(b, sec, layers: List[_Layer], name: str, label: str) -> Tuple[str, Tuple[int, int, int]]:
    current = len(layers)
    prev = layers[-1]
    sources = [layers[_layer_index(v, current, sec, "from", label)] for v in _int_list(sec, "from", label)]
    if not sources:
        raise ModelInvalidError(f"{label} line {sec.line}: [shortcut] from is empty", op=_OP)
    for src in sources:
        if src.shape != prev.shape:
            raise ModelInvalidError(
                f"{label} line {sec.line}: [shortcut] (layer {current}) adds an output of shape {src.shape} to one "
                f"of shape {prev.shape} (c, h, w); only equal shapes are supported", op=_OP)
    alpha, beta = _float(sec, "alpha", 1.0, label), _float(sec, "beta", 1.0, label)
    acc = prev.tensor
    if alpha != 1.0:
        acc = b.node("Mul", [acc, b.const(name + "/alpha", np.float32(alpha))], name + "/scaled")
    for k, src in enumerate(sources):
        add = src.tensor
        if beta != 1.0:
            add = b.node("Mul", [add, b.const(f"{name}/beta{k}", np.float32(beta))], f"{name}/from{k}")
        acc = b.node("Add", [acc, add], f"{name}/add{k}")
    return _activation(b, acc, name, sec, label, "linear"), prev.shape


def _upsample(b, sec, x: _Layer, name: str, label: str) -> Tuple[str, Tuple[int, int, int]]:
    stride = _int(sec, "stride", 2, label, 1)
    scale = _float(sec, "scale", 1.0, label)
    scales = np.array([1, 1, stride, stride], np.float32)
    y = b.node("Resize", [x.tensor, "", b.const(name + "/scales", scales)], name + "/resize" if scale != 1 else name,
               mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if scale != 1.0:
        y = b.node("Mul", [y, b.const(name + "/scale", np.float32(scale))], name)
    c, h, w = x.shape
    return y, (c, h * stride, w * stride)


def _net_shape(sec: CfgSection, label: str) -> Tuple[int, int, int]:
    shape = tuple(_int(sec, k, 0, label) for k in ("channels", "height", "width"))
    if min(shape) < 1:
        raise ModelInvalidError(f"{label} line {sec.line}: [{sec.type}] needs positive channels, height and width "
                                f"(got channels={shape[0]}, height={shape[1]}, width={shape[2]})", op=_OP)
    return shape  # type: ignore[return-value]


def darknet_to_onnx(sections: List[CfgSection], weights: WeightsFile, cfg_label: str = "the cfg",
                    weights_label: str = "the weights file", dynamic: bool = False, warn=None):
    """Write parsed ``.cfg`` sections and weights as an ``onnx.ModelProto`` (opset :data:`OPSET`).

    Weights are copied into the model's initializers.  ``dynamic``: declare the input's
    batch, height and width symbolic (for ``dynamic_input``); the sizes in ``[net]`` are
    still used to check the network.  ``warn(message)`` hears about ignored options and
    unused trailing weights.

    Raises:
        ModelInvalidError: an unknown section or activation, a bad option value (naming
            the line), or a weights file too short for the network.
    """
    from onnx import TensorProto, helper

    warn = warn or (lambda m: None)
    if sections[0].type not in ("net", "network"):
        raise ModelInvalidError(f"{cfg_label} line {sections[0].line}: the first section is [{sections[0].type}]; "
                                f"a darknet .cfg starts with [net]", op=_OP)
    c, h, w = _net_shape(sections[0], cfg_label)
    b = _Builder()
    reader = _Weights(weights.values)
    layers: List[_Layer] = []
    outputs: List[Tuple[str, str]] = []   # (graph output name, tensor)
    prev = _Layer(INPUT_NAME, (c, h, w), "net", sections[0].line)
    for sec in sections[1:]:
        i = len(layers)
        if sec.type not in _SECTIONS:
            raise ModelInvalidError(
                f"{cfg_label} line {sec.line}: section [{sec.type}] (layer {i}) is not supported; supported: "
                f"{', '.join('[%s]' % s for s in _SECTIONS)}", op=_OP)
        name = f"{i}_{sec.type}"
        if sec.type in _HEADS:
            if not layers:
                raise ModelInvalidError(f"{cfg_label} line {sec.line}: [{sec.type}] cannot be the first layer", op=_OP)
            outputs.append((f"{sec.type}_{i}", prev.tensor))
            # Its decoded output is not computed: later layers may not read it (checked below).
            layers.append(_Layer(prev.tensor, prev.shape, sec.type, sec.line))
            prev = layers[-1]
            continue
        _check_keys(sec, cfg_label, warn)
        if sec.type in ("route", "shortcut"):
            key = "layers" if sec.type == "route" else "from"
            for v in _int_list(sec, key, cfg_label):
                src = layers[_layer_index(v, i, sec, key, cfg_label)]
                if src.type in _HEADS:
                    raise ModelInvalidError(
                        f"{cfg_label} line {sec.line}: [{sec.type}] (layer {i}) reads the decoded output of "
                        f"[{src.type}] layer {v if v >= 0 else i + v}, which this loader does not compute", op=_OP)
            fn = _route if sec.type == "route" else _shortcut
            tensor, shape = fn(b, sec, layers, name, cfg_label)
        elif prev.type in _HEADS:
            raise ModelInvalidError(f"{cfg_label} line {sec.line}: [{sec.type}] (layer {i}) reads the decoded output "
                                    f"of [{prev.type}] layer {i - 1}, which this loader does not compute", op=_OP)
        elif sec.type == "convolutional":
            tensor, shape = _conv(b, sec, prev, reader, name, cfg_label)
        elif sec.type == "maxpool":
            tensor, shape = _maxpool(b, sec, prev, name, cfg_label)
        elif sec.type == "avgpool":
            tensor, shape = b.node("GlobalAveragePool", [prev.tensor], name), (prev.shape[0], 1, 1)
        elif sec.type == "dropout":
            tensor, shape = prev.tensor, prev.shape
        else:
            tensor, shape = _upsample(b, sec, prev, name, cfg_label)
        layers.append(_Layer(tensor, shape, sec.type, sec.line))
        prev = layers[-1]
    if not layers:
        raise ModelInvalidError(f"{cfg_label} has no layers after [net]", op=_OP)

    need, have = reader.used * 4, len(weights.values) * 4
    if need > have:
        raise ModelInvalidError(
            f"weights file {weights_label} is too short for {cfg_label}: the network needs {reader.used} float32 "
            f"values ({need} bytes) after the {weights.header_size}-byte header, so a file of "
            f"{weights.header_size + need} bytes; found {weights.size} bytes ({have} bytes of weights)", op=_OP)
    extra = weights.size - weights.header_size - need
    if extra:
        warn(f"weights file {weights_label} has {extra} bytes after the last layer's weights; ignored "
             f"(is it the weights of this cfg?)")

    if not outputs:
        outputs = [("output", prev.tensor)]
    nodes = list(b.nodes)
    for out_name, tensor in outputs:
        nodes.append(helper.make_node("Identity", [tensor], [out_name], name=out_name))
    dims = ["batch", c, "height", "width"] if dynamic else [1, c, h, w]
    graph = helper.make_graph(nodes, "darknet", [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n, _ in outputs],
                              b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                             producer_name="rknnlite.toolkit.loaders.darknet")


def yolo_heads(model) -> List[Dict[str, object]]:
    """The ``[yolo]``/``[region]`` sections of a ``.cfg`` (path or bytes), one dict per
    model output in output order: ``output`` (its name), ``type``, ``layer`` (index),
    ``classes`` (int), ``anchors`` (list of ``(w, h)`` pairs in input pixels for
    ``[yolo]``, grid cells for ``[region]``), ``mask`` (anchor indices used by this
    head; all anchors when absent), ``options`` (every key as written)."""
    heads = []
    sections = parse_cfg(model)
    for i, sec in enumerate(sections[1:]):
        if sec.type not in _HEADS:
            continue
        label = "the cfg"
        raw = [float(v) for v in sec.options.get("anchors", "").split(",") if v != ""]
        anchors = [(raw[k], raw[k + 1]) for k in range(0, len(raw) - 1, 2)]
        mask = _int_list(sec, "mask", label) if "mask" in sec.options else list(range(len(anchors)))
        heads.append({"output": f"{sec.type}_{i}", "type": sec.type, "layer": i,
                      "classes": _int(sec, "classes", 20, label), "anchors": anchors, "mask": mask,
                      "options": dict(sec.options)})
    return heads


def load_darknet(model, weight, dynamic_input=None, custom_ops=None, warn=None):
    """Convert a Darknet network (``.cfg`` path or bytes, ``.weights`` path or bytes) to an
    :class:`~rknnlite.toolkit.onnx_import.ImportedModel` (see the module docstring for the
    layers and the input/output names).

    ``dynamic_input``, ``custom_ops`` and ``warn`` are passed to
    :func:`~rknnlite.toolkit.onnx_import.import_onnx`; with ``dynamic_input`` the input's
    batch, height and width may vary across the shape sets.

    Raises:
        ImportError: the onnx package is missing (the message says what to install).
        ModelInvalidError: missing or malformed files, unknown sections (naming the section
            and its line), unsupported options, a short weights file (expected vs found bytes).
    """
    require_onnx("load_darknet")
    from ..onnx_import import import_onnx

    sections = parse_cfg(model)
    weights = read_weights(weight)
    cfg_label = model if isinstance(model, (str, os.PathLike)) else "the cfg"
    weights_label = weight if isinstance(weight, (str, os.PathLike)) else "(bytes)"
    proto = darknet_to_onnx(sections, weights, os.fspath(cfg_label), os.fspath(weights_label),
                            dynamic=dynamic_input is not None, warn=warn)
    return import_onnx(proto, dynamic_input=dynamic_input, custom_ops=custom_ops, warn=warn)
