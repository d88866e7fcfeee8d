"""Layer-by-layer accuracy analysis of a built model (``RKNN.accuracy_analysis``).

The built model (portable format: graph, quantization table, storage precision) runs
twice on the same inputs, keeping every intermediate tensor:

* **golden**: the float model in float32: the optimised float graph of the ONNX model
  when the toolkit still has it (``reference_graph``; the toolkit's optimisations are
  exact rewrites, so its tensors are the original model's), else the built graph
  without quantization (its weights then keep the float16 rounding of the build);
* **simulator**: the model as built (int8 fake quantization and/or float16 storage),
  on rknnlite's software backend.

For each tensor two errors against golden are reported, as RKNN-Toolkit2 does:
*entire* (the simulator's value, errors accumulated through all earlier layers) and
*single* (the layer alone, run on the golden values of its inputs, so only its own
quantization / precision error shows).  Each is a cosine similarity and a euclidean
distance.

Files written under ``output_dir``, in RKNN-Toolkit2's snapshot layout: for each tensor
``golden/<file>.txt`` and ``simulator/<file>.txt`` (the values flattened in model layout,
one per line, 6 decimals) and ``golden/npy/<file>.npy`` / ``simulator/npy/<file>.npy``
(float32, shaped); ``<file>`` is the tensor name with ``/``, ``\\`` and ``:`` replaced by
``_`` (a clash gets ``_1``, ``_2``, ...; a name longer than 200 bytes is cut and gets a hash
of itself); ``map_name_to_file.txt`` maps tensor names to
file names; ``error_analysis.txt`` holds the table (see :func:`format_report`).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..model.graph import Graph

__all__ = ["LayerError", "AnalysisResult", "load_inputs", "analyse", "cosine", "euclidean", "format_report",
           "REPORT_NAME", "MAP_NAME", "format_name_map", "float_outputs", "single_layer_outputs", "relu_read"]

#: Name of the report file written into ``output_dir``.
REPORT_NAME = "error_analysis.txt"
#: Name of the tensor -> file name table written into ``output_dir``.
MAP_NAME = "map_name_to_file.txt"


@dataclass
class LayerError:
    """Errors of one tensor against its golden value.

    Attributes:
        op: ``"Input"`` for a model input, else the producing node's op type.
        name: tensor name.
        entire_cos, entire_euc: the simulator's value (errors accumulated).
        single_cos, single_euc: the producing layer alone on golden inputs.
    """

    op: str
    name: str
    entire_cos: float
    entire_euc: float
    single_cos: float
    single_euc: float


@dataclass
class AnalysisResult:
    """The per-tensor errors (model inputs first, then node outputs in execution order),
    the graph output names, and where the files went."""

    layers: List[LayerError]
    outputs: List[str]
    report_path: str
    ref_errors: List[Tuple[str, float, float]]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two arrays taken as flat float64 vectors: 1.0 when both are
    all zeros, 0.0 when only one is; NaN when either holds a NaN or infinity."""
    x = np.asarray(a, np.float64).reshape(-1)
    y = np.asarray(b, np.float64).reshape(-1)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return float("nan")
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0.0 and ny == 0.0:
        return 1.0
    if nx == 0.0 or ny == 0.0:
        return 0.0
    return float(np.dot(x, y) / (nx * ny))


def euclidean(a: np.ndarray, b: np.ndarray) -> float:
    """Euclidean distance of two same-sized arrays (float64)."""
    return float(np.linalg.norm(np.asarray(a, np.float64).reshape(-1) - np.asarray(b, np.float64).reshape(-1)))


def load_inputs(inputs: Sequence[Any], specs) -> List[np.ndarray]:
    """One array per model input from ``inputs``: paths to images or ``.npy`` files (read
    as the calibration dataset reads them: model layout, NCHW for 4-D inputs, raw values
    before mean/std), or arrays already in that form.

    Raises:
        ValueError: wrong count, unreadable file, wrong shape (the message names the input).
    """
    from .dataset import DatasetError, load_sample  # the calibration sample reader, shared on purpose

    if isinstance(inputs, (str, os.PathLike, np.ndarray)):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise ValueError(f"inputs must be a list with one image / .npy path per model input, not "
                         f"{type(inputs).__name__}")
    if len(inputs) != len(specs):
        raise ValueError(f"inputs has {len(inputs)} entries; the model has {len(specs)} input(s) "
                         f"({', '.join(s.name for s in specs)})")
    arrays = []
    for i, (item, spec) in enumerate(zip(inputs, specs)):
        if isinstance(item, np.ndarray):
            a = item[np.newaxis] if item.ndim + 1 == len(spec.shape) else item
            if a.ndim != len(spec.shape) or any(d >= 0 and d != s for d, s in zip(spec.shape, a.shape)):
                raise ValueError(f"inputs[{i}] has shape {list(item.shape)}; input {spec.name!r} needs "
                                 f"{list(spec.shape)}")
            arrays.append(a)
            continue
        if not isinstance(item, (str, os.PathLike)):
            raise ValueError(f"inputs[{i}] must be a path to an image or .npy file, not {type(item).__name__}")
        try:
            arrays.append(load_sample(os.fspath(item), spec, where=f"inputs[{i}]", index=i))
        except DatasetError as e:
            raise ValueError(str(e)) from None
    return arrays


def analyse(model, raw_inputs: Sequence[np.ndarray], output_dir: str, custom_ops: Sequence = (),
            ref_outputs: Optional[Sequence[np.ndarray]] = None,
            reference_graph: Optional[Graph] = None, tensor_files: bool = True) -> AnalysisResult:
    """Run the analysis on a loaded portable ``model`` (:class:`PortableModel`) and write
    the files (see the module doc; with ``tensor_files=False`` only ``error_analysis.txt``
    and ``map_name_to_file.txt``, as RKNN-Toolkit2 does for ``output_dir=None``).
    ``raw_inputs`` are model-layout arrays before mean/std; ``ref_outputs`` (optional)
    are expected final outputs compared with the simulator's; ``reference_graph``
    (optional) is the float graph the model was built from (same tensor names), run for
    the golden values.  Raises ``OSError`` when ``output_dir`` cannot be written and
    :class:`~rknnlite.errors.RKNNError` when the model cannot run."""
    from ..backends.software.executor import Executor

    meta = model.metadata
    graph: Graph = model.graph
    feeds = [_preprocess(x, spec, meta.preprocess[i] if meta.preprocess else None)
             for i, (x, spec) in enumerate(zip(raw_inputs, meta.inputs))]
    produced = graph.produced()
    op_of: Dict[str, str] = {name: node.op for node in graph.nodes for name in node.outputs if name}
    # exposed, not made outputs: the run computes every tensor as inference does
    values = Executor(graph, meta.float_dtype, custom_ops, expose=produced).run(feeds)
    simulated = dict(zip(produced, values[len(graph.outputs):]))
    golden = _golden(reference_graph, graph, produced, feeds, custom_ops)
    for name, x in zip(graph.inputs, feeds):
        golden[name] = x
        simulated[name] = _stored_input(x, graph.quant.get(name), meta.float_dtype)

    layers: List[LayerError] = []
    for name in graph.inputs:
        c, e = cosine(simulated[name], golden[name]), euclidean(simulated[name], golden[name])
        layers.append(LayerError("Input", name, c, e, c, e))
    single = single_layer_outputs(graph, golden, meta.float_dtype, custom_ops)
    seen = relu_read(graph)
    nan = float("nan")
    for name in produced:
        g, s = golden.get(name), simulated[name]
        if g is None:
            layers.append(LayerError(op_of[name], name, nan, nan, nan, nan))
            continue
        one = single.get(name)
        if name in seen:
            g, s, one = (None if v is None else np.maximum(v, 0) for v in (g, s, one))
        layers.append(LayerError(
            op_of[name], name, cosine(s, g), euclidean(s, g),
            cosine(one, g) if one is not None else nan, euclidean(one, g) if one is not None else nan))

    ref_errors: List[Tuple[str, float, float]] = []
    for name, ref in zip(graph.outputs, ref_outputs or ()):
        s = simulated[name]
        if np.size(ref) != s.size:
            raise ValueError(f"ref_outputs for {name!r} has {np.size(ref)} values, the output has {s.size}")
        ref_errors.append((name, cosine(s, ref), euclidean(s, ref)))

    os.makedirs(output_dir, exist_ok=True)
    names = _file_names(list(graph.inputs) + produced)
    for sub, values in (("golden", golden), ("simulator", simulated)) if tensor_files else ():
        folder = os.path.join(output_dir, sub)
        os.makedirs(os.path.join(folder, "npy"), exist_ok=True)
        for name, fname in names.items():
            if name not in values:
                continue
            value = np.asarray(values[name])
            value = value.astype(np.float32, copy=False) if value.dtype.kind == "f" else value
            np.save(os.path.join(folder, "npy", fname + ".npy"), value)
            np.savetxt(os.path.join(folder, fname + ".txt"), value.reshape(-1).astype(np.float64), fmt="%.6f")
    with open(os.path.join(output_dir, MAP_NAME), "w", encoding="utf-8") as f:
        f.write("\n".join(format_name_map(names)) + "\n")
    report_path = os.path.join(output_dir, REPORT_NAME)
    result = AnalysisResult(layers, list(graph.outputs), report_path, ref_errors)
    with open(report_path, "w", encoding="utf-8") as f:
        f.write("\n".join(format_report(result)) + "\n")
    return result


def relu_read(graph: Graph) -> Set[str]:
    """The tensors (not graph outputs) that only a Relu reads.  Quantization gives such a
    tensor the Relu's range (the vendor's rule,
    :func:`~rknnlite.toolkit.quantize.bound_activation_inputs`): its negative values
    are lost, and nothing reads them.  Errors are measured on what is read, so that a
    correctly quantized Conv before a Relu does not report the loss of values the Relu
    drops anyway: compare ``max(x, 0)`` of such tensors."""
    readers: Dict[str, List[str]] = {}
    for node in graph.nodes:
        for name in set(node.inputs):
            readers.setdefault(name, []).append(node.op)
    outputs = set(graph.outputs)
    return {name for name, ops in readers.items() if ops == ["Relu"] and name not in outputs}


def format_report(result: AnalysisResult) -> List[str]:
    """The lines of ``error_analysis.txt``: a header explaining the columns, then one row
    per tensor ``[Op] name  entire cos | euc  single cos | euc`` (cos with 5 decimals),
    and, with reference outputs, their cosine and distance."""
    width = max([len(f"[{l.op}] {l.name}") for l in result.layers] + [40]) + 2
    lines = [
        "# simulator_error: the error of each layer's output on the simulator (the built model on rknnlite's "
        "software backend),",
        "#                  compared with the 'golden' value (the float model in float32).",
        "#     entire: errors accumulated layer by layer (the simulator's own inputs to each layer).",
        "#     single: the error of that layer alone (its inputs are the golden values).",
        "#     cos: cosine similarity; euc: euclidean distance.",
        "",
        f"{'layer_name':<{width}}simulator_error",
        f"{'':<{width}}{'entire':<20}single",
        f"{'':<{width}}{'cos':<9}{'euc':<11}{'cos':<9}euc",
        "-" * (width + 40),
    ]
    for l in result.layers:
        label = f"[{l.op}] {l.name}"
        lines.append(f"{label:<{width}}{_cell(l.entire_cos, l.entire_euc)}{_cell(l.single_cos, l.single_euc)}".rstrip())
    if result.ref_errors:
        lines += ["", "# reference outputs (ref_outputs) vs the simulator:", ""]
        for name, c, e in result.ref_errors:
            lines.append(f"{'[Output] ' + name:<{width}}{_cell(c, e)}".rstrip())
    return lines


def _cell(cos: float, euc: float) -> str:
    if math.isnan(cos):
        return f"{'-':<20}"
    return f"{cos:.5f} | {euc:<8.5f}  "


def _preprocess(x: np.ndarray, spec, p) -> np.ndarray:
    """The graph input the runtime makes of raw input ``x``: cast to the input's dtype,
    then ``(x[:, reorder] - mean) / std`` for a normalised float input."""
    from ..model.spec import numpy_dtype
    from .quantize import normalise

    x = np.asarray(x, dtype=numpy_dtype(spec.dtype))
    if p is None or x.dtype.kind != "f":
        return x
    if p.reorder:
        x = x[:, list(p.reorder)]
    return normalise(x, list(p.mean), list(p.std))


def _stored_input(x: np.ndarray, q, float_dtype: str) -> np.ndarray:
    """A graph input as the built model stores it: on its int8 grid, or rounded to float16."""
    if x.dtype.kind != "f":
        return x
    if q is not None:
        lo, hi = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}[q.dtype]
        s, zp = q.scale[0], q.zero_point[0]
        return ((np.clip(np.round(x / s) + zp, lo, hi) - zp) * s).astype(np.float32)
    if float_dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    return x


def float_outputs(graph: Graph, feeds, custom_ops: Sequence = ()) -> Dict[str, np.ndarray]:
    """``{output name: value}`` of ``graph`` run in float32 without quantization."""
    from ..backends.software.executor import Executor

    plain = Graph(graph.nodes, list(graph.inputs), list(graph.outputs), graph.constants)
    return dict(zip(graph.outputs, Executor(plain, "float32", custom_ops).run(feeds)))


def _golden(reference: Optional[Graph], graph: Graph, produced: List[str], feeds, custom_ops
            ) -> Dict[str, np.ndarray]:
    """Float32 values of the built graph's tensors: from ``reference`` where it has a
    tensor of that name and shape, else from the built graph without quantization."""
    from ..backends.software.executor import Executor

    golden = float_outputs(Graph(graph.nodes, list(graph.inputs), produced, graph.constants), feeds, custom_ops)
    if reference is None:
        return golden
    seen = set(reference.inputs)
    names = []
    for node in reference.nodes:
        names += [o for o in node.outputs if o and o not in seen and o in golden]
        seen.update(node.outputs)
    if not names:
        return golden
    probe = Graph(reference.nodes, list(reference.inputs), names, reference.constants)
    for name, value in zip(names, Executor(probe, "float32", custom_ops).run(feeds)):
        if value.shape == golden[name].shape:
            golden[name] = value
    return golden


def single_layer_outputs(graph: Graph, golden: Dict[str, np.ndarray], float_dtype: str,
                          custom_ops: Sequence) -> Dict[str, np.ndarray]:
    """Each node run alone, in the built model's precision, on the golden values of its inputs."""
    from ..backends.software.executor import Executor

    out: Dict[str, np.ndarray] = {}
    for node in graph.nodes:
        ins = [n for n in dict.fromkeys(node.inputs) if n and n not in graph.constants]
        consts = {n: graph.constants[n] for n in node.inputs if n in graph.constants}
        outs = [o for o in node.outputs if o]
        names = set(ins) | set(consts) | set(outs)
        quant = {k: v for k, v in graph.quant.items() if k in names}
        one = Graph([node], ins, outs, consts, quant)
        values = Executor(one, float_dtype, custom_ops).run([golden[n] for n in ins])
        out.update(zip(outs, values))
    return out


def format_name_map(names: Dict[str, str]) -> List[str]:
    """The lines of ``map_name_to_file.txt``: a ``layer_name  file_name`` header, a dashed
    line, then one ``tensor  file`` row per tensor (the ``.txt`` file's name, as the vendor
    writes it)."""
    width = max([len(n) for n in names] + [len("layer_name")]) + 2
    lines = [f"{'layer_name':<{width}}file_name", "-" * (width + 20)]
    lines += [f"{name:<{width}}{fname}.txt" for name, fname in names.items()]
    return lines


#: Longest file name stem (in UTF-8 bytes) of a snapshot file: file systems take 255 bytes,
#: and TFLite's fused tensor names (``a;b;c``) run to several hundred.
_MAX_STEM_BYTES = 200


def _file_names(names: Sequence[str]) -> Dict[str, str]:
    taken = set()
    result = {}
    for name in names:
        base = re.sub(r"[/\\:\x00]", "_", name) or "tensor"
        if base in (".", ".."):
            base = "tensor"
        if len(base.encode()) > _MAX_STEM_BYTES:  # a prefix, and a hash of the whole name to tell them apart
            digest = hashlib.sha1(name.encode()).hexdigest()[:12]
            base = base.encode()[:_MAX_STEM_BYTES - 13].decode(errors="ignore") + "_" + digest
        fname, k = base, 1
        while fname.lower() in taken:
            fname = f"{base}_{k}"
            k += 1
        taken.add(fname.lower())
        result[name] = fname
    return result
