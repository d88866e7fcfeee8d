"""Hybrid quantization: int8 models with chosen layers kept in float16, and the diagnostics that
tell the user which layers quantization destroys.

RKNN-Toolkit2 defines the workflow (``shared/reference/rknn-toolkit2-api-facts.md`` §1):

* ``hybrid_quantization_step1(dataset, proposal=...)`` calibrates the loaded model and writes,
  in the current directory, ``<stem>.model``, ``<stem>.data`` and ``<stem>.quantization.cfg``
  (YAML: ``custom_quantize_layers``, tensor name -> dtype, and ``quantize_parameters``, one
  entry per activation tensor with its range and int8 parameters; only ``min`` / ``max`` may be
  edited);
* the user lists tensors to keep in ``float16`` under ``custom_quantize_layers``;
* ``hybrid_quantization_step2(model_input, data_input, model_quantization_cfg)`` builds the
  int8 model with those tensors (and the weights of the layers producing them) in float.

``build(auto_hybrid=True)`` and ``config(quantized_hybrid_level=N)`` choose the float tensors
themselves from each layer's error (:func:`layer_errors`): a layer whose quantized output has a
cosine below ``auto_hybrid_cos_thresh`` (default 0.98), or (when given) a euclidean distance above
``auto_hybrid_euc_thresh``, against the float value, each layer run alone on float inputs; and
an output most of whose channels quantize to one value, or to a few for maps
(:func:`collapsed_channels`), which a cosine over the whole tensor misses when its other
channels dominate the norm.

:func:`diagnose` is what ``build`` warns with after calibration: outputs whose channels mostly
quantize to one value (a concatenated detection head: pixel boxes beside 0..1 class scores) and
layers whose int8 output loses more than a threshold of cosine.

Here ``<stem>.model`` is a portable rknnlite container of the loaded float graph and
``<stem>.data`` a JSON file of the step1 configuration, the model's I/O and shapes and the
calibration ranges (the vendor writes ONNX and a pickle; the names and the cfg are the same).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from ..model.graph import Graph
from ..model.spec import QuantParams

__all__ = ["CFG_SUFFIX", "DATA_SUFFIX", "MODEL_SUFFIX", "HYBRID_DTYPES", "EDITABLE", "HybridError",
           "LayerError", "layer_errors", "auto_float_tensors", "subgraph_tensors", "quantize_parameters",
           "write_cfg", "read_cfg", "collapsed_channels", "with_layout_producers", "diagnose", "write_step1",
           "read_step2", "DEFAULT_COS_THRESH", "LEVEL_COS_THRESH", "fused_tensors"]

_log = logging.getLogger("rknnlite.toolkit")

MODEL_SUFFIX, DATA_SUFFIX, CFG_SUFFIX = ".model", ".data", ".quantization.cfg"
#: dtypes ``custom_quantize_layers`` accepts here (the vendor also has int16)
HYBRID_DTYPES = ("float16", "int8")
#: the ``quantize_parameters`` fields a user may edit
EDITABLE = ("min", "max")
_FIELDS = ("qtype", "qmethod", "dtype", "min", "max", "scale", "zero_point", "ori_min", "ori_max")
#: ``config(auto_hybrid_cos_thresh=...)``'s default, as the vendor's
DEFAULT_COS_THRESH = 0.98
#: the cosine threshold ``config(quantized_hybrid_level=N)`` applies for N = 1, 2, 3 (higher
#: keeps more layers in float16)
LEVEL_COS_THRESH = {1: 0.98, 2: 0.99, 3: 0.995}
#: the layer-error bound below which build() warns (cosine of the int8 layer against float)
WARN_COS = 0.98


class HybridError(ValueError):
    """A hybrid-quantization input (cfg file, layer name, dtype, threshold) is invalid; the
    message names it and what was expected."""


@dataclass(frozen=True)
class LayerError:
    """One tensor's int8 error, its producing layer run alone on float inputs: ``cos`` and
    ``euc`` against the float value (``nan`` where the tensor is not quantized)."""

    name: str
    op: str
    cos: float
    euc: float


def layer_errors(graph: Graph, quant: Mapping[str, QuantParams], feeds: Sequence[np.ndarray],
                 custom_ops: Sequence = ()) -> List[LayerError]:
    """Each node's quantized output error on one sample (``feeds``: the graph inputs after
    mean/std), the node run alone in int8 on the float values of its inputs, in graph order;
    a tensor only a Relu reads is compared on what the Relu keeps (:func:`.accuracy.relu_read`)."""
    from .accuracy import cosine, euclidean, float_outputs, relu_read, single_layer_outputs

    plain = Graph(graph.nodes, list(graph.inputs), graph.produced(), graph.constants)
    golden = float_outputs(plain, feeds, custom_ops)
    golden.update(zip(graph.inputs, feeds))
    quantized = Graph(graph.nodes, list(graph.inputs), list(graph.outputs), graph.constants, dict(quant))
    single = single_layer_outputs(quantized, golden, "float32", custom_ops)
    read = relu_read(graph)
    out = []
    for node in graph.nodes:
        for name in node.outputs:
            if not name or name not in single:
                continue
            if name not in quant:
                out.append(LayerError(name, node.op, math.nan, math.nan))
                continue
            s, g = single[name], golden[name]
            if name in read:
                s, g = np.maximum(s, 0), np.maximum(g, 0)
            out.append(LayerError(name, node.op, cosine(s, g), euclidean(s, g)))
    return out


def auto_float_tensors(errors: Iterable[LayerError], cos_thresh: float,
                       euc_thresh: Optional[float] = None) -> List[str]:
    """The tensors auto hybrid keeps in float16: cosine below ``cos_thresh``, or (when given)
    euclidean distance above ``euc_thresh``."""
    if not 0 <= cos_thresh <= 1:
        raise HybridError(f"Invalid auto_hybrid_cos_thresh '{cos_thresh}', expect between 0 to 1!")
    if euc_thresh is not None and not euc_thresh > 0:
        raise HybridError(f"Invalid auto_hybrid_euc_thresh '{euc_thresh}', expect greater 0!")
    return [e.name for e in errors if not math.isnan(e.cos) and
            (e.cos < cos_thresh or (euc_thresh is not None and e.euc > euc_thresh))]


def subgraph_tensors(graph: Graph, pairs: Sequence[Sequence[str]]) -> List[str]:
    """``custom_hybrid=[[input_name, output_name], ...]``: the tensors computed after each
    ``input_name`` up to and including ``output_name`` (those on a path between them)."""
    producers = {name: node for node in graph.nodes for name in node.outputs if name}
    known = set(graph.inputs) | set(producers)
    out: List[str] = []
    if not isinstance(pairs, (list, tuple)):
        raise HybridError(f"custom_hybrid is a list of [input_name, output_name] pairs, not {pairs!r}")
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise HybridError(f"custom_hybrid entries are [input_name, output_name] pairs, not {pair!r}")
        start, end = pair
        for name in (start, end):
            if name not in known:
                raise HybridError(f"custom_hybrid names {name!r}, which is not a tensor of the model")
        between: Set[str] = set()
        stack, seen = [end], set()
        while stack:  # walk back from the end to the start
            name = stack.pop()
            if name in seen or name == start:
                continue
            seen.add(name)
            node = producers.get(name)
            if node is None:
                continue
            if _reaches(node, start, producers, {}):
                between.update(n for n in node.outputs if n)
                stack.extend(i for i in node.inputs if i and i not in graph.constants)
        if not between:
            raise HybridError(f"custom_hybrid [{start!r}, {end!r}]: {end!r} is not computed from {start!r}")
        out.extend(n for n in graph.produced() if n in between and n not in out)
    return out


def _reaches(node, start: str, producers, memo: Dict[str, bool]) -> bool:
    """Whether ``node`` reads ``start`` directly or through other nodes."""
    for name in node.inputs:
        if not name:
            continue
        if name == start:
            return True
        if name not in memo:
            memo[name] = False  # cycles cannot occur, but keep the walk finite
            up = producers.get(name)
            memo[name] = up is not None and _reaches(up, start, producers, memo)
        if memo[name]:
            return True
    return False


def quantize_parameters(ranges: Mapping[str, Tuple[float, float]], quant: Mapping[str, QuantParams],
                        order: Sequence[str]) -> Dict[str, dict]:
    """The cfg's ``quantize_parameters``: per activation tensor (graph order), its int8
    parameters and range (``ori_*`` the calibrated one, ``min``/``max`` the one used)."""
    out: Dict[str, dict] = {}
    for name in order:
        if name not in ranges:
            continue
        vmin, vmax = (float(v) for v in ranges[name])
        q = quant.get(name)
        out[name] = {"qtype": "asym", "qmethod": "layer", "dtype": "int8" if q is not None else "float32",
                     "min": [vmin], "max": [vmax], "scale": [float(s) for s in q.scale] if q is not None else [],
                     "zero_point": [int(z) for z in q.zero_point] if q is not None else [],
                     "ori_min": [vmin], "ori_max": [vmax]}
    return out


def write_cfg(path: str, custom_layers: Mapping[str, str], parameters: Mapping[str, dict],
              proposals: Optional[Mapping[str, float]] = None) -> None:
    """Write a ``.quantization.cfg``: ``custom_quantize_layers`` (``{}`` when empty; proposed
    entries carry their layer cosine as a trailing comment) and ``quantize_parameters``."""
    lines = []
    if custom_layers:
        lines.append("custom_quantize_layers:" + (" # proposed: the layers whose int8 output loses the most"
                                                  if proposals else ""))
        for name, dtype in custom_layers.items():
            comment = f" # {proposals[name]:.6f}" if proposals and name in proposals else ""
            lines.append(f"    {_key(name)}: {dtype}{comment}")
    else:
        lines.append("custom_quantize_layers: {}" + (" # no layer proposed" if proposals is not None else ""))
    lines.append("quantize_parameters:")
    for name, fields in parameters.items():
        lines.append(f"    {_key(name)}:")
        for field in _FIELDS:
            value = fields[field]
            if isinstance(value, list):
                lines.append(f"        {field}:" + ("" if value else " []"))
                lines.extend(f"        -   {_scalar(v)}" for v in value)
            else:
                lines.append(f"        {field}: {value}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _key(name: str) -> str:
    return json.dumps(name) if not name.replace("_", "").replace(".", "").replace("-", "").isalnum() else name


def _scalar(value) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def read_cfg(path: str, parameters: Mapping[str, dict], tensors: Iterable[str],
             fused: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, str], Dict[str, Tuple[float, float]]]:
    """``(custom_quantize_layers, ranges)`` from an edited cfg: the layer dtypes (checked
    against ``tensors``, the model's tensors, or a name of ``fused``, the loaded model's
    tensors the optimiser fused into a layer, which stands for that layer's output, see
    :func:`fused_tensors`) and the activation ranges with the user's ``min`` / ``max`` edits.
    ``parameters`` are the ones step1 wrote; any other edited field raises
    :class:`HybridError`, as the vendor refuses it."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except UnicodeDecodeError as e:
        raise HybridError(f"{path} is not a text file (byte {e.start} is not UTF-8)") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise HybridError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    except yaml.YAMLError as e:
        raise HybridError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise HybridError(f"{path} must hold 'custom_quantize_layers' and 'quantize_parameters'")
    layers = doc.get("custom_quantize_layers") or {}
    if not isinstance(layers, dict):
        raise HybridError(f"custom_quantize_layers in {path} must be a mapping of tensor name -> dtype")
    known = set(tensors)
    fused = fused or {}
    chosen: Dict[str, str] = {}
    for name, dtype in layers.items():
        if name not in known and fused.get(name) not in known:
            raise HybridError(f"Invalid operands name '{name}' in custom_quantize_layers!")
        if dtype not in HYBRID_DTYPES:
            raise HybridError(f"'{dtype}' not supported in custom_quantize_layers! (supported here: "
                              f"{', '.join(HYBRID_DTYPES)})")
        if name not in known:
            _log.info("hybrid_quantization_step2: %r was fused into the layer of %r, which is kept in %s",
                      name, fused[name], dtype)
        chosen[name if name in known else fused[name]] = dtype
    layers = chosen
    edited = doc.get("quantize_parameters") or {}
    if not isinstance(edited, dict):
        raise HybridError(f"quantize_parameters in {path} must be a mapping of tensor name -> fields")
    ranges: Dict[str, Tuple[float, float]] = {}
    for name, fields in parameters.items():
        mine = edited.get(name, fields)
        if not isinstance(mine, dict):
            raise HybridError(f"quantize_parameters['{name}'] must be a mapping of its fields")
        for field in _FIELDS:
            if field not in EDITABLE and _norm(mine.get(field)) != _norm(fields[field]):
                raise HybridError(f"The quantize_parameters['{name}']['{field}'] is not allowed to be modified!")
        try:
            vmin, vmax = float(_one(mine["min"])), float(_one(mine["max"]))
        except (KeyError, TypeError, ValueError):
            raise HybridError(f"quantize_parameters['{name}'] min and max must be one number each") from None
        if not (math.isfinite(vmin) and math.isfinite(vmax)) or vmin > vmax:
            raise HybridError(f"quantize_parameters['{name}']: min {vmin} must not exceed max {vmax}")
        ranges[name] = (vmin, vmax)
    return dict(layers), ranges


def _one(value):
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _norm(value):
    if isinstance(value, list):
        return [round(float(v), 6) if isinstance(v, float) else v for v in value]
    return value


#: A channel with at least :data:`MAP_VALUES` values per sample (a map, such as a detection head's
#: grid) whose range spans fewer than :data:`FEW_STEPS` int8 steps is as good as lost: its values
#: land on at most FEW_STEPS + 1 codes (YOLOX/YOLOv5-style heads that concatenate pixel boxes with
#: 0..1 scores: the scores get two to four).  Channels of one value per sample (a classifier's
#: logits) keep the one-step rule: their span across a few calibration samples says little.
FEW_STEPS = 4
MAP_VALUES = 16


def collapsed_channels(quant: Mapping[str, QuantParams], samples_out: Mapping[str, Sequence[np.ndarray]]
                       ) -> Dict[str, Tuple[int, int, float, int]]:
    """``{tensor: (flat channels, channels, widest channel span, steps)}`` for the int8 tensors
    (``samples_out``: their float values over the calibration samples) whose channels (axis 1)
    mostly span less than ``steps`` int8 steps: 1 (they come out as one value) or, failing
    that, for maps of at least :data:`MAP_VALUES` values per channel, :data:`FEW_STEPS`; at
    least a quarter of the channels, and two.  A channel whose calibration values are all
    equal (span 0, e.g. one value per channel and one sample) loses nothing and is not counted."""
    out = {}
    for name, values in samples_out.items():
        q = quant.get(name)
        if q is None or not values or np.ndim(values[0]) < 2 or np.shape(values[0])[1] < 2:
            continue
        channels = np.shape(values[0])[1]
        if any(np.ndim(v) < 2 or np.shape(v)[1] != channels for v in values):
            continue
        is_map = min(int(np.prod(np.shape(v)[2:])) for v in values) >= MAP_VALUES
        # per sample (their shapes may differ: dynamic shapes), then over the samples
        lows = [np.moveaxis(np.asarray(v, np.float64), 1, 0).reshape(channels, -1).min(axis=1) for v in values]
        highs = [np.moveaxis(np.asarray(v, np.float64), 1, 0).reshape(channels, -1).max(axis=1) for v in values]
        span = np.max(highs, axis=0) - np.min(lows, axis=0)
        for steps in (1, FEW_STEPS) if is_map else (1,):  # the strongest statement that holds
            flat = int(np.sum((span > 0) & (span < steps * q.scale[0])))
            if flat >= max(2, channels // 4):
                out[name] = (flat, channels, float(span.max()), steps)
                break
    return out


#: ops that only move values: a tensor they produce collapses as the tensor they read does (a Concat
#: joins tensors of their own scales, so the walk stops at it)
_LAYOUT_OPS = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Split")


def with_layout_producers(graph: Graph, names: Iterable[str]) -> List[str]:
    """``names`` and the tensors that reach them through layout ops only (Reshape, Transpose,
    Concat, ...): a collapsed output stays collapsed unless the Concat that joined its
    channels (and the reshapes after it) is float too."""
    producers = {o: node for node in graph.nodes for o in node.outputs if o}
    out: List[str] = []
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in out:
            continue
        out.append(name)
        node = producers.get(name)
        if node is not None and node.op in _LAYOUT_OPS:
            stack.extend(i for i in node.inputs[:1] if i and i not in graph.constants)
    return out


def diagnose(graph: Graph, quant: Mapping[str, QuantParams], samples_out: Mapping[str, Sequence[np.ndarray]],
             errors: Sequence[LayerError] = (), cos_warn: float = WARN_COS) -> List[str]:
    """Warnings about what quantization destroys, with the fix: the outputs of
    :func:`collapsed_channels`, and layers whose int8 output (``errors``,
    :func:`layer_errors`) has a cosine below ``cos_warn`` against float."""
    warnings = []
    for name, (flat, channels, widest, steps) in collapsed_channels(quant, samples_out).items():
        what = ("quantize to one value (their range is below one int8 step" if steps == 1 else
                f"quantize to at most {steps + 1} values (their range is below {steps} int8 steps")
        warnings.append(
            f"{flat} of {channels} channels of {name} {what} of {quant[name].scale[0]:.4g}: the tensor's range, "
            f"{widest:.4g} wide, is set by its other channels); keep {name} in float16 with hybrid quantization "
            "(hybrid_quantization_step1, custom_quantize_layers, or build(auto_hybrid=True)), or split the output "
            "so each part gets its own scale")
    for e in errors:
        if not math.isnan(e.cos) and e.cos < cos_warn:
            warnings.append(f"layer {e.op} -> {e.name}: its int8 output has cosine {e.cos:.4f} against float "
                            f"(below {cos_warn}); keep it in float16 with hybrid quantization")
    return warnings


_DATA_FORMAT = "rknnlite-hybrid-1"


def fused_tensors(loaded: Graph, optimised: Graph) -> Dict[str, str]:
    """``{tensor of the loaded graph: tensor of the optimised graph}`` for the tensors the
    optimiser fused away (a BatchNormalization folded into its Conv, an activation into its
    layer): each maps to the first tensor downstream, along its only readers, that the
    optimised graph still has.  RKNN-Toolkit2 keeps such tensors in its graph, and its
    hybrid_quant example's tips name one (``.../BatchNorm/batchnorm/add_1:0``)."""
    kept = set(optimised.inputs) | set(optimised.produced())
    readers: Dict[str, List] = {}
    for node in loaded.nodes:
        for name in set(node.inputs):
            readers.setdefault(name, []).append(node)
    out: Dict[str, str] = {}
    for name in loaded.produced():
        if name in kept:
            continue
        seen, current = set(), name
        while current not in kept and current not in seen:
            seen.add(current)
            after = readers.get(current, [])
            if len(after) != 1 or not after[0].outputs:
                break
            current = after[0].outputs[0]
        if current in kept:
            out[name] = current
    return out


def write_step1(stem: str, graph: Graph, imported, cfg: Mapping, ranges: Mapping[str, Tuple[float, float]],
                quant: Mapping[str, QuantParams], layers: Mapping[str, str],
                proposals: Optional[Mapping[str, float]], custom_ops: Sequence[str],
                build_ranges: Optional[Mapping[str, Tuple[float, float]]] = None) -> None:
    """Write step1's three files in the current directory (see the module doc): ``graph`` the
    optimised float graph of ``imported`` (the toolkit's ImportedModel), ``cfg`` the toolkit
    configuration, ``ranges``/``quant`` the calibration the cfg shows, ``layers`` the
    pre-filled ``custom_quantize_layers``, ``custom_ops`` the registered custom op types step2
    needs.  ``build_ranges``: the ranges step2 builds with when they are not the cfg's (``mmse``:
    the cfg shows the kl_divergence ranges, as the vendor's does, and its min/max may not be
    edited)."""
    from ..model.metadata import build_metadata
    from ..model.portable import write_portable

    plain = Graph(graph.nodes, list(graph.inputs), list(graph.outputs), graph.constants)
    metadata = build_metadata(list(imported.input_specs), list(imported.output_specs),
                              target_platforms=(cfg["target_platform"],), float_dtype="float32")
    with open(stem + MODEL_SUFFIX, "wb") as f:
        f.write(write_portable(metadata, plain))
    parameters = quantize_parameters(ranges, quant, list(graph.inputs) + graph.produced())
    data = {"format": _DATA_FORMAT, "config": _jsonable(dict(cfg)), "opset": int(imported.opset),
            "parameters": parameters, "custom_ops": list(custom_ops),
            "fused": fused_tensors(imported.graph, graph)}
    if build_ranges is not None:
        data["build_ranges"] = {name: [_jsonable_end(lo), _jsonable_end(hi)]
                                for name, (lo, hi) in build_ranges.items()}
    with open(stem + DATA_SUFFIX, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    write_cfg(stem + CFG_SUFFIX, layers, parameters, proposals)


def read_step2(model_input: str, data_input: str, cfg_path: str, custom_ops: Sequence[str]):
    """``(imported model, toolkit config, custom_quantize_layers, ranges)`` from step1's
    files as the user left them.  Raises :class:`HybridError` naming the file and the
    problem."""
    from ..model.loader import load_model
    from .onnx_import import ImportedModel

    try:
        with open(data_input, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise HybridError(f"cannot read {data_input}: {e.strerror or e}") from None
    except ValueError:
        raise HybridError(f"{data_input} is not a .data file written by hybrid_quantization_step1") from None
    if not isinstance(data, dict) or data.get("format") != _DATA_FORMAT:
        raise HybridError(f"{data_input} is not a .data file written by rknnlite's hybrid_quantization_step1")
    missing = sorted(set(data.get("custom_ops", ())) - set(custom_ops))
    if missing:
        raise HybridError(f"the model uses custom ops {missing}: call reg_custom_op for them before step2")
    try:
        loaded = load_model(model_input)
    except OSError as e:
        raise HybridError(f"cannot read {model_input}: {e.strerror or e}") from None
    graph = getattr(loaded.model, "graph", None)
    if graph is None or graph.quant:
        raise HybridError(f"{model_input} is not a .model file written by hybrid_quantization_step1")
    meta = loaded.model.metadata
    imported = ImportedModel(graph=Graph(graph.nodes, list(graph.inputs), list(graph.outputs), graph.constants),
                             input_specs=list(meta.inputs), output_specs=list(meta.outputs), opset=data["opset"])
    layers, ranges = read_cfg(cfg_path, data["parameters"], list(graph.inputs) + graph.produced(),
                              data.get("fused"))
    config = dict(data["config"])
    if "build_ranges" in data:  # mmse: its search's ranges, which the cfg does not show
        shown = {name: (float(_one(f["min"])), float(_one(f["max"]))) for name, f in data["parameters"].items()}
        if ranges != shown:
            raise HybridError(f"Not support modify quantize_parameters when config.quantized_algorithm = "
                              f"{config.get('quantized_algorithm')}")
        ranges = {name: (_range_end(lo), _range_end(hi)) for name, (lo, hi) in data["build_ranges"].items()}
    return imported, config, layers, ranges


def _jsonable_end(end):
    """A range end for the ``.data`` file: a float, or a list of them (an mmse weight's channels)."""
    return [float(v) for v in end] if isinstance(end, (tuple, list, np.ndarray)) else float(end)


def _range_end(end):
    """A range end read back from the ``.data`` file (see :func:`_jsonable_end`)."""
    return tuple(float(v) for v in end) if isinstance(end, list) else float(end)


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value
