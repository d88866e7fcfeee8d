"""TensorFlow frozen GraphDef (``.pb``) -> :class:`~rknnlite.toolkit.onnx_import.ImportedModel`.

:func:`load_tensorflow` converts the graph to ONNX with `tf2onnx` and hands the result to
:func:`~rknnlite.toolkit.onnx_import.import_onnx`, so the supported ops are the ONNX
importer's.  The conversion runs in a child Python process (this same interpreter, running
this module as a script): importing TensorFlow sets environment variables, installs logging
handlers and prints to stderr, none of which may happen in the caller's process.  The child
needs ``tensorflow`` (or ``tensorflow-cpu``) and ``tf2onnx``
(``pip install 'rknnlite-runtime[tensorflow]'``); the parent process never imports them.

Layouts: TensorFlow images are NHWC.  Unless ``input_is_nchw=True``, every 4-D input is
turned into an NCHW model input (tf2onnx's ``inputs_as_nchw``: the graph transposes it back
internally), so the model's inputs follow the toolkit's convention and ``inference`` takes
NHWC data as it does for every model.  ``input_size_list`` and ``dynamic_input`` give the
shapes as the TensorFlow graph sees them (NHWC).  Outputs keep TensorFlow's layout.

Quantization-aware graphs: tf2onnx turns an activation's ``FakeQuantWithMinMaxVars`` into a
QuantizeLinear / DequantizeLinear pair (read by :mod:`~rknnlite.toolkit.qdq`), but TensorFlow's
constant folding turns one on a constant (a weight) into a plain float constant, and its grid
would be lost.  The child reports those grids (TensorFlow's nudged scale and zero point, on
the int8 grid) for the constants tf2onnx names after the FakeQuant node, and
:func:`weight_grids` puts them in the model's quantization table as RKNN-Toolkit2 2.5.0 does:
the FakeQuant's own scale and zero point (not the symmetric x 128/127 grid a QDQ ONNX weight
with zero point 0 gets; with zero point 0 its codes are clipped to [-127, 127]).  A constant
tf2onnx folds again under a name of its own (a depthwise weight, ``const_fold_opt__N``) is
matched to its FakeQuant by value."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelInvalidError
from ...model.graph import Graph
from ...model.spec import QuantParams
from ..quantize import WEIGHT_OPS, implied_grids
from .common import shape_sets

__all__ = ["load_tensorflow", "weight_grids", "nudged_grid", "REQUIRED_PACKAGES", "INSTALL_HINT", "ONNX_OPSET"]

_OP = "load_tensorflow"

#: Python modules the conversion needs (looked up, never imported, in this process).
REQUIRED_PACKAGES = ("tensorflow", "tf2onnx")
#: What to install when one is missing.
INSTALL_HINT = "pip install 'rknnlite-runtime[tensorflow]' (or: pip install tensorflow-cpu tf2onnx)"
#: The ONNX opset tf2onnx is asked to write.
ONNX_OPSET = 13

#: Suffix of the file (beside the ONNX model) where the child writes the weight grids, JSON
#: ``{initializer name: [scale, zero point]}``.
_GRIDS = ".grids.json"

# Exit status and first stdout line of the conversion child: 0 and nothing on success;
# otherwise 2 and one JSON object {"kind": "missing" | "invalid", "message": ...}.
_CHILD_FAILED = 2


def load_tensorflow(tf_pb, inputs: Sequence[str], input_size_list, outputs: Sequence[str],
                    input_is_nchw: bool = False, dynamic_input=None, custom_ops=None, warn=None):
    """Convert a frozen TensorFlow graph to the toolkit's graph IR.

    Args:
        tf_pb: path to a frozen ``GraphDef`` (``.pb``, binary protobuf), or its bytes.
        inputs: the tensors to feed, as node names (``"input"``, meaning output 0) or tensor
            names (``"input:0"``); an inner node cuts the graph there.
        input_size_list: one shape per input, as the graph sees it (NHWC for images);
            ``None`` dims are fixed to 1.
        outputs: the tensors to return, node or tensor names.
        input_is_nchw: the 4-D inputs already are NCHW (no layout change).
        dynamic_input, custom_ops, warn: as for ``import_onnx``; the ``dynamic_input``
            shapes are given like ``input_size_list`` (NHWC for images).

    The model's input and output names are the names given in ``inputs``/``outputs``.

    Raises:
        ImportError: tensorflow or tf2onnx is not installed (the message says what to install).
        ModelInvalidError: unreadable or malformed file, unknown input/output name, bad
            shapes, a graph tf2onnx cannot convert, or an op the runtime does not support
            (naming the op and node).
    """
    from ..onnx_import import import_onnx

    missing = [name for name in REQUIRED_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"load_tensorflow converts the graph with tensorflow and tf2onnx, but "
                          f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: "
                          f"{INSTALL_HINT}")
    in_names = _names(inputs, "inputs")
    out_names = _names(outputs, "outputs")
    sizes = _sizes(input_size_list, in_names, warn)
    sets = shape_sets(dynamic_input, len(in_names), _OP)
    ranks = [len(s) for s in sizes]
    to_nchw = [] if input_is_nchw else [n for n, r in zip(in_names, ranks) if r == 4]
    override = _shape_override(in_names, sizes, sets)
    with tempfile.TemporaryDirectory(prefix="rknnlite-tf-") as tmp:
        pb_path = _pb_path(tf_pb, tmp)
        onnx_path = os.path.join(tmp, "model.onnx")
        request = {"pb": pb_path, "inputs": in_names, "outputs": out_names, "shapes": override,
                   "nchw": to_nchw, "opset": ONNX_OPSET, "out": onnx_path}
        _run_child(request, tf_pb)
        with open(onnx_path, "rb") as f:
            onnx_bytes = f.read()
        grids = {}
        if os.path.isfile(onnx_path + _GRIDS):
            with open(onnx_path + _GRIDS, encoding="utf-8") as f:
                grids = {name: (float(s), int(z)) for name, (s, z) in json.load(f).items()}
    nchw = set(to_nchw)
    onnx_sizes = [_to_nchw(s) if n in nchw else s for n, s in zip(in_names, sizes)]
    onnx_sets = None
    if sets is not None:
        onnx_sets = [[_to_nchw(s) if n in nchw else s for n, s in zip(in_names, st)] for st in sets]
    imported = import_onnx(onnx_bytes, input_size_list=onnx_sizes, dynamic_input=onnx_sets,
                           custom_ops=custom_ops, warn=warn)
    weight_grids(imported.graph, grids)
    return imported


def nudged_grid(lo: float, hi: float, narrow_range: bool = False) -> Tuple[float, int]:
    """``(scale, zero_point)`` of an 8-bit ``FakeQuantWithMinMaxVars(min=lo, max=hi)`` on the
    int8 grid: TensorFlow's nudging, in float32 (codes 0..255, or 1..255 with ``narrow_range``;
    the zero point ``qmin - lo / scale`` rounded half away from zero and clamped to the codes),
    the zero point then shifted by -128."""
    qmin, qmax = np.float32(1 if narrow_range else 0), np.float32(255)
    lo, hi = np.float32(lo), np.float32(hi)
    scale = (hi - lo) / (qmax - qmin)
    zp = qmin - lo / scale
    nudged = qmin if zp < qmin else qmax if zp > qmax else np.sign(zp) * np.floor(np.abs(zp) + np.float32(0.5))
    return float(scale), int(nudged) - 128


def weight_grids(graph: Graph, grids: Dict[str, Tuple[float, int]]) -> None:
    """Put each constant of ``grids`` (name -> ``(scale, zero_point)``, int8) that the graph
    still holds as the weight of a Conv, ConvTranspose, Gemm or MatMul whose input is on an
    int8 grid (its own, or one implied through layout ops, as a Dense's after a flatten), and
    that has no grid yet, on that grid in ``graph.quant``, its values re-rounded
    onto it (a conv reading a float input runs in float16 in the vendor's build, on the
    FakeQuant's values: such a weight is left as it is).  As RKNN-Toolkit2 2.5.0 builds such
    a weight (rk3566, the codes decoded from its files: narrow-range [-0.9, 0.9], full-range
    [-0.9, 0.9] and [-0.5, 1.0] FakeQuants): the FakeQuant's scale and zero point are kept;
    with zero point 0 the codes are clipped to [-127, 127] (a full-range code of -128 becomes
    -127), otherwise they keep [-128, 127].  Changes ``graph.quant`` and ``graph.constants``
    in place."""
    quant = implied_grids(graph, graph.quant)  # a Dense reads a FakeQuant'd conv's output through a flatten
    int8_reads = {node.inputs[1] for node in graph.nodes
                  if node.op in WEIGHT_OPS and len(node.inputs) > 1
                  and getattr(quant.get(node.inputs[0]), "dtype", None) == "int8"}
    for name, (scale, zp) in grids.items():
        if name not in graph.constants or name in graph.quant or name not in int8_reads:
            continue
        s = np.float32(scale)
        codes = np.clip(np.rint(np.asarray(graph.constants[name], np.float32) / s) + zp, -127 if zp == 0 else -128, 127)
        graph.constants[name] = ((codes - zp) * s).astype(np.float32)
        graph.quant[name] = QuantParams("int8", (float(s),), (zp,))


# -- arguments -------------------------------------------------------------------------------


def _names(names, what: str) -> List[str]:
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not names or \
            not all(isinstance(n, str) and n for n in names):
        raise ModelInvalidError(f"{what} must be a non-empty list of node or tensor names, like ['input'], "
                                f"not {names!r}", op=_OP)
    if len(set(names)) != len(names):
        raise ModelInvalidError(f"{what} name a tensor twice: {list(names)}", op=_OP)
    return list(names)


def _sizes(input_size_list, in_names: List[str], warn) -> List[Tuple[int, ...]]:
    if not isinstance(input_size_list, (list, tuple)) or len(input_size_list) != len(in_names):
        raise ModelInvalidError(f"input_size_list must hold one shape per input ({', '.join(in_names)}), "
                                f"like [[1, 224, 224, 3]], not {input_size_list!r}", op=_OP)
    out = []
    for name, shape in zip(in_names, input_size_list):
        if not isinstance(shape, (list, tuple)) or not all(
                d is None or (isinstance(d, int) and not isinstance(d, bool) and d > 0) for d in shape):
            raise ModelInvalidError(f"input_size_list entry for {name!r} must be a list of positive ints "
                                    f"(or None), not {shape!r}", op=_OP)
        if any(d is None for d in shape) and warn is not None:
            warn(f"input_size_list: the None dims of {name!r} {list(shape)} are fixed to 1")
        out.append(tuple(1 if d is None else int(d) for d in shape))
    return out


def _shape_override(in_names, sizes, sets) -> Dict[str, List[Optional[int]]]:
    """The input shapes tf2onnx fixes: ``input_size_list``, with the dims that vary across
    the ``dynamic_input`` sets left unknown (``None``)."""
    override = {}
    for i, (name, size) in enumerate(zip(in_names, sizes)):
        shape: List[Optional[int]] = list(size)
        if sets is not None:
            per_set = [st[i] for st in sets]
            if any(len(s) != len(size) for s in per_set):
                raise ModelInvalidError(f"dynamic_input shapes of {name!r} {[list(s) for s in per_set]} must "
                                        f"have the rank of its input_size_list entry {list(size)}", op=_OP)
            shape = [d if all(s[k] == d for s in per_set) else None for k, d in enumerate(size)]
        override[_tensor(name)] = shape
    return override


def _to_nchw(shape: Sequence[int]) -> Tuple[int, ...]:
    n, h, w, c = shape
    return (n, c, h, w)


def _tensor(name: str) -> str:
    """The TensorFlow tensor name of a node or tensor name (``"x"`` -> ``"x:0"``)."""
    return name if ":" in name else name + ":0"


def _pb_path(tf_pb, tmp: str) -> str:
    if isinstance(tf_pb, (bytes, bytearray, memoryview)):
        path = os.path.join(tmp, "model.pb")
        with open(path, "wb") as f:
            f.write(bytes(tf_pb))
        return path
    if isinstance(tf_pb, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(tf_pb))
        if not os.path.isfile(path):
            raise ModelInvalidError(f"TensorFlow model file not found: {os.fspath(tf_pb)}", op=_OP)
        return path
    raise ModelInvalidError(f"tf_pb must be a path or bytes, not {type(tf_pb).__name__}", op=_OP)


# -- the conversion child ----------------------------------------------------------------------


def _run_child(request: dict, tf_pb) -> None:
    """Run the conversion in a child interpreter; raise what it reports."""
    import rknnlite

    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"  # the child's C++ info/warning chatter; errors still come
    # tf2onnx names some nodes in set order: a fixed hash seed makes a .pb convert to the same
    # graph every time (hybrid_quantization_step1's .cfg keys and .model bytes differed by run)
    env["PYTHONHASHSEED"] = "0"
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(rknnlite.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-m", __name__], input=json.dumps(request).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, check=False)
    if proc.returncode == 0 and os.path.isfile(request["out"]):
        return
    label = tf_pb if isinstance(tf_pb, (str, os.PathLike)) else "the TensorFlow model"
    report = _child_report(proc.stdout)
    if report is not None and report.get("kind") == "missing":
        raise ImportError(f"{report.get('message')}: {INSTALL_HINT}")
    if report is not None:
        raise ModelInvalidError(f"{label}: {report.get('message')}", op=_OP)
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
    raise ModelInvalidError(f"{label}: the TensorFlow conversion process failed (exit status {proc.returncode}): "
                            f"{' | '.join(tail) or 'no message'}", op=_OP)


def _child_report(stdout: bytes) -> Optional[dict]:
    for line in stdout.decode(errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "kind" in obj:
            return obj
    return None


def _child_main() -> int:  # pragma: no cover - runs in the child process (covered by the tests' runs)
    request = json.loads(sys.stdin.read())

    def fail(kind: str, message: str) -> int:
        sys.stdout.write(json.dumps({"kind": kind, "message": message}) + "\n")
        sys.stdout.flush()
        return _CHILD_FAILED

    try:
        import tensorflow as tf
        import tf2onnx
    except ImportError as e:
        return fail("missing", f"cannot import {getattr(e, 'name', None) or e} in {sys.executable}")
    from google.protobuf.message import DecodeError

    with open(request["pb"], "rb") as f:
        data = f.read()
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        return fail("invalid", f"not a binary TensorFlow GraphDef (.pb): {e}")
    if not graph_def.node:
        return fail("invalid", "the GraphDef has no nodes (not a frozen TensorFlow graph?)")
    nodes = {n.name for n in graph_def.node}
    for what in ("inputs", "outputs"):
        for name in request[what]:
            node = name.split(":")[0]
            if node not in nodes:
                some = ", ".join(sorted(nodes)[:20]) + (", ..." if len(nodes) > 20 else "")
                return fail("invalid", f"{what}: {name!r} is not a node of the graph; its nodes: {some}")
    rename = {_tensor(n): n for n in request["inputs"] + request["outputs"] if _tensor(n) != n}
    try:
        model, _ = tf2onnx.convert.from_graph_def(
            graph_def, input_names=[_tensor(n) for n in request["inputs"]],
            output_names=[_tensor(n) for n in request["outputs"]], opset=request["opset"],
            inputs_as_nchw=[_tensor(n) for n in request["nchw"]] or None,
            shape_override=request["shapes"], tensors_to_rename=rename or None)
    except Exception as e:  # tf2onnx raises whatever its graph handling raised
        return fail("invalid", f"tf2onnx cannot convert the graph: {type(e).__name__}: {e}")
    grids = _constant_fake_quants(graph_def, tf.make_ndarray)
    folded = {}
    for init in model.graph.initializer:  # tf2onnx names a folded constant "<node>__<n>"
        node, _, n = init.name.rpartition("__")
        if node in grids and n.isdigit():
            folded[init.name] = grids[node]
    named = {init.rpartition("__")[0] for init in folded}
    unnamed = [node for node in grids if node not in named]
    if unnamed:
        folded.update(_match_by_value(model, graph_def, unnamed, grids, folded, tf))
    with open(request["out"] + _GRIDS, "w", encoding="utf-8") as f:
        json.dump(folded, f)
    with open(request["out"], "wb") as f:
        f.write(model.SerializeToString())
    return 0


def _match_by_value(model, graph_def, fake_quants: List[str], grids, taken, tf) -> Dict[str, Tuple[float, int]]:
    """Grids for the initializers tf2onnx folded again under a name of its own
    (``const_fold_opt__N``: a depthwise weight, transposed and reshaped): TensorFlow computes
    each FakeQuant's output, and an initializer holding exactly those values, in any layout,
    takes its grid.  A value set two initializers (or two FakeQuants) share is left alone."""
    from onnx import numpy_helper

    with tf.Graph().as_default() as g:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as session:
            values = session.run([f"{name}:0" for name in fake_quants])
    wanted: Dict[bytes, List[str]] = {}
    for name, v in zip(fake_quants, values):
        wanted.setdefault(np.sort(np.asarray(v, np.float32).reshape(-1)).tobytes(), []).append(name)
    found: Dict[bytes, List[str]] = {}
    for init in model.graph.initializer:
        if init.name in taken:
            continue
        arr = numpy_helper.to_array(init)
        if arr.dtype != np.float32 or arr.size == 0:
            continue
        key = np.sort(arr.reshape(-1)).tobytes()
        if key in wanted:
            found.setdefault(key, []).append(init.name)
    return {inits[0]: grids[wanted[key][0]] for key, inits in found.items()
            if len(inits) == 1 and len(wanted[key]) == 1}


def _constant_fake_quants(graph_def, make_ndarray) -> Dict[str, Tuple[float, int]]:
    """Per 8-bit ``FakeQuantWithMinMaxVars`` node whose min and max are constants (through
    Identity nodes, as ``<var>/read``) and whose input is computed from constants alone (a
    weight, or a weight folded with its batch norm, ``mul_fold``): its :func:`nudged_grid`."""
    nodes = {n.name: n for n in graph_def.node}
    known: Dict[str, bool] = {}

    def node_of(ref: str) -> str:
        return ref.lstrip("^").split(":")[0]

    def constant(ref: str):
        name = node_of(ref)
        while name in nodes and nodes[name].op == "Identity" and nodes[name].input:
            name = node_of(nodes[name].input[0])
        node = nodes.get(name)
        return make_ndarray(node.attr["value"].tensor) if node is not None and node.op == "Const" else None

    def from_constants(ref: str) -> bool:
        root, entered = node_of(ref), set()
        stack = [(root, False)]
        while stack:  # post-order without recursion: frozen graphs can be deep
            name, inputs_done = stack.pop()
            if name in known:
                continue
            node = nodes.get(name)
            if node is None or node.op == "Const" or not node.input:
                known[name] = node is not None and node.op == "Const"
            elif inputs_done:
                known[name] = all(known.get(node_of(i), False) for i in node.input)
            elif name in entered:  # a cycle (a loop's NextIteration): not a constant
                known[name] = False
            else:
                entered.add(name)
                stack.append((name, True))
                stack.extend((node_of(i), False) for i in node.input)
        return known[root]

    grids = {}
    for node in graph_def.node:
        if node.op != "FakeQuantWithMinMaxVars" or len(node.input) < 3 or node.attr["num_bits"].i not in (0, 8):
            continue
        lo, hi = constant(node.input[1]), constant(node.input[2])
        if lo is None or hi is None or lo.size != 1 or hi.size != 1 or not from_constants(node.input[0]):
            continue
        grids[node.name] = nudged_grid(float(lo), float(hi), bool(node.attr["narrow_range"].b))
    return grids


if __name__ == "__main__":  # pragma: no cover - the conversion child
    sys.exit(_child_main())
