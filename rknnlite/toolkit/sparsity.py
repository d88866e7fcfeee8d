"""Weight sparsity patterns of RKNN sparse inference (SDK §4.1.7): detection, marking, reporting.

The NPUs of RK3576 and RV1126B skip zero weights that follow one of four patterns.  The
*input direction* of a weight is the axis its layer reduces over, the *output direction*
the axis of its output channels: for a 2-D Conv weight ``(C_out, C_in, K_h, K_w)`` input is
``C_in`` and output ``C_out``; for Gemm ``B`` it is ``K`` (``B`` is ``(K, N)``, or
``(N, K)`` with ``transB=1``) and ``N``; for MatMul's constant right operand ``(K, N)``
likewise.  Every weight is viewed as ``W[o, i, r]`` (``r``: the remaining kernel
positions, 1 for a matrix); an axis that is not a multiple of 4 is padded with zeros
(as the vendor pads).  With blocks of 4 consecutive indices along an axis:

``4:2_ic`` -- 4:2 along the input direction ("50% (IC)")
    for every ``(o, r)`` and every block of 4 consecutive ``i``, at least 2 of the 4
    values are zero.
``4:2_oc`` -- 4:2 along the output direction ("50% (OC)")
    for every ``(i, r)`` and every block of 4 consecutive ``o``, at least 2 zeros.
``16:4_io`` -- 16:4 input and output ("75%")
    4:2 along the input direction, then 4:2 along the output direction of the packed
    (2-slot) result: for every ``r`` and every 4x4 block (4 consecutive ``o`` x 4
    consecutive ``i``), each ``o`` row has at most 2 non-zeros and the block at most 4
    (exactly the blocks whose row non-zeros fit 2 slots with at most 2 rows per slot).
``16:4_oi`` -- 16:4 output and input ("75%")
    the same with the directions swapped: each ``i`` column of a 4x4 block has at most 2
    non-zeros and the block at most 4.

A weight satisfying several patterns is reported by the sparsest, input first
(``16:4_io``, ``16:4_oi``, ``4:2_ic``, ``4:2_oc``).  Eligible layers: 2-D Conv with
``group == 1`` (the seed's restriction), Gemm and MatMul, each with a constant weight;
anything else is reported "0%".  :func:`mark_graph` records the pattern in each eligible
node's ``attrs["_sparsity"]`` (a string that survives export; ``"none"`` when no pattern
holds; the node name goes to ``attrs["_sparsity_layer"]`` for the runtime's log lines), which the software backend reads (:mod:`rknnlite.backends.software.ops.sparse`).
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np

__all__ = ["MODES", "RATIO_TEXT", "SPARSE_PLATFORMS", "weight_view", "detect", "eligible_weight",
           "mark_graph", "mark_for_build", "ratio_text", "report_lines", "satisfies", "sparsify_weight",
           "layer_modes", "sparsify_model", "layer_costs", "sparsify"]

#: The four patterns, in detection priority.
MODES = ("16:4_io", "16:4_oi", "4:2_ic", "4:2_oc")
#: The vendor's "SparseRation" text per pattern (``"none"`` and ineligible layers: ``"0%"``).
RATIO_TEXT = {"4:2_ic": "50% (IC)", "4:2_oc": "50% (OC)", "16:4_io": "75%", "16:4_oi": "75%", "none": "0%"}
#: Platforms whose NPU runs sparse weights (seed §4.1.7: "RK3576 and RK1126B", i.e. RV1126B).
SPARSE_PLATFORMS = ("rk3576", "rv1126b")
#: The node attribute the pattern is recorded in.
ATTR = "_sparsity"
#: The node's name, recorded with it for the runtime's per-layer log lines.
LAYER_ATTR = "_sparsity_layer"


def weight_view(w: np.ndarray, op: str, trans_b: bool = False) -> np.ndarray:
    """``w`` as ``(O, I, R)`` (a view or a transposed view, no copy of the data).

    ``op``: ``"Conv"`` (``(O, I, kh, kw)``), ``"Gemm"`` (``(K, N)``, or ``(N, K)`` with
    ``trans_b``) or ``"MatMul"`` (``(K, N)``)."""
    w = np.asarray(w)
    if op == "Conv":
        return w.reshape(w.shape[0], w.shape[1], -1)
    m = w if (op == "Gemm" and trans_b) else w.T
    return m[:, :, None]


def _blocks(w3: np.ndarray) -> np.ndarray:
    """Non-zero mask padded to multiples of 4 on O and I, as ``(O/4, 4, I/4, 4, R)``."""
    o, i, r = w3.shape
    nz = np.zeros((-(-o // 4) * 4, -(-i // 4) * 4, r), bool)
    nz[:o, :i] = w3 != 0
    return nz.reshape(nz.shape[0] // 4, 4, nz.shape[1] // 4, 4, r)


def satisfies(w3: np.ndarray, mode: str) -> bool:
    """Whether an ``(O, I, R)`` weight satisfies ``mode`` (one of :data:`MODES`)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    return _satisfies(_blocks(np.asarray(w3)), mode)


def _satisfies(nz: np.ndarray, mode: str) -> bool:
    per_row = nz.sum(axis=3)   # per (o, i-block, r): non-zeros along i
    per_col = nz.sum(axis=1)   # per (o-block, i, r): non-zeros along o
    if mode == "4:2_ic":
        return bool((per_row <= 2).all())
    if mode == "4:2_oc":
        return bool((per_col <= 2).all())
    total_ok = bool((nz.sum(axis=(1, 3)) <= 4).all())
    if mode == "16:4_io":
        return total_ok and bool((per_row <= 2).all())
    return total_ok and bool((per_col <= 2).all())


def detect(w3: np.ndarray) -> str:
    """The pattern an ``(O, I, R)`` weight satisfies exactly (see the module docstring):
    one of :data:`MODES`, or ``"none"``.  Only exact zeros count."""
    nz = _blocks(np.asarray(w3))
    for mode in MODES:
        if _satisfies(nz, mode):
            return mode
    return "none"


def eligible_weight(node, constants) -> Optional[np.ndarray]:
    """The ``(O, I, R)`` view of ``node``'s constant weight when the layer can run sparse
    (2-D Conv with group 1, Gemm, MatMul with a 2-D constant right operand), else None."""
    if len(node.inputs) < 2:
        return None
    w = constants.get(node.inputs[1])
    if w is None or np.asarray(w).dtype.kind != "f":
        return None
    w = np.asarray(w)
    if node.op == "Conv":
        if w.ndim != 4 or int(node.attrs.get("group", 1)) != 1:
            return None
        return weight_view(w, "Conv")
    if node.op == "Gemm" and w.ndim == 2:
        return weight_view(w, "Gemm", bool(node.attrs.get("transB", 0)))
    if node.op == "MatMul" and w.ndim == 2:
        return weight_view(w, "MatMul")
    return None


def mark_graph(graph) -> List[Tuple[str, str, str]]:
    """Detect every layer's pattern and record it in ``attrs["_sparsity"]`` of eligible
    nodes (in place).  Returns ``(node name, op, pattern or "ineligible")`` for every
    Conv, Gemm and MatMul node, in graph order.  Ineligible nodes get
    ``"ineligible"`` (reported "0%", never run sparse)."""
    rows = []
    for node in graph.nodes:
        if node.op not in ("Conv", "Gemm", "MatMul"):
            continue
        w3 = eligible_weight(node, graph.constants)
        mode = "ineligible" if w3 is None else detect(w3)
        node.attrs[ATTR] = mode
        node.attrs[LAYER_ATTR] = node.name
        rows.append((node.name, node.op, mode))
    return rows


def ratio_text(mode: Optional[str]) -> str:
    """``"50% (IC)"``, ``"50% (OC)"``, ``"75%"`` or ``"0%"`` for a recorded pattern
    (anything else, e.g. None or ``"ineligible"``: ``"0%"``)."""
    return RATIO_TEXT.get(mode or "none", "0%")


def report_lines(rows) -> List[str]:
    """One log line per layer, ``SparseRation`` as the vendor names it:
    ``"Conv:conv1 SparseRation: 50% (IC)"`` (rows as :func:`mark_graph` returns them)."""
    return [f"{op}:{name} SparseRation: {ratio_text(mode)}" for name, op, mode in rows]


def sparsify_weight(w3: np.ndarray, mode: str) -> np.ndarray:
    """A copy of an ``(O, I, R)`` weight with the smallest-magnitude values zeroed so that it
    satisfies ``mode`` (one-shot magnitude pruning; ties keep the lower index).

    ``4:2_*`` keeps the 2 largest of each 4-block along the direction; ``16:4_io`` first
    does ``4:2_ic``, then in each 4x4 block keeps, per packed slot (the first / second
    kept value of each row), the 2 rows with the largest values (``16:4_oi`` mirrored)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    w3 = np.asarray(w3, dtype=np.float32)
    o, i, r = w3.shape
    po, pi = -(-o // 4) * 4, -(-i // 4) * 4
    pad = np.zeros((po, pi, r), np.float32)
    pad[:o, :i] = w3
    # (O/4, 4o, I/4, 4i, R) -> the "direction" axis last: (..., 4)
    b = pad.reshape(po // 4, 4, pi // 4, 4, r)
    if mode in ("4:2_ic", "16:4_io"):
        v = b.transpose(0, 1, 2, 4, 3)      # (Ob, 4o, Ib, R, 4i): 4-blocks along i
    else:
        v = b.transpose(0, 3, 2, 4, 1)      # (Ob, 4i, Ib, R, 4o): 4-blocks along o
    v = np.ascontiguousarray(v)
    keep = _keep_two(np.abs(v), axis=-1)
    v = np.where(keep, v, 0.0).astype(np.float32)
    if mode.startswith("16:4"):
        # packed slots: slot s of each 4-block is its s-th kept value (in index order)
        a = np.abs(v)
        rank = np.cumsum(keep, axis=-1) - 1  # slot of each kept value
        for s in (0, 1):
            in_slot = keep & (rank == s)
            mag = np.where(in_slot, a, -1.0).max(axis=-1)  # (Ob, 4, Ib, R): slot s magnitude per row
            best = _keep_two(mag, axis=1)                   # 2 of the 4 rows of the block per slot
            drop = in_slot & ~best[..., None]
            v = np.where(drop, 0.0, v).astype(np.float32)
    if mode in ("4:2_ic", "16:4_io"):
        out = v.transpose(0, 1, 2, 4, 3)
    else:
        out = v.transpose(0, 4, 2, 1, 3)
    return np.ascontiguousarray(out.reshape(po, pi, r)[:o, :i])


def _keep_two(a: np.ndarray, axis: int) -> np.ndarray:
    """Mask of the 2 largest of 4 along ``axis`` (stable: ties keep the lower index)."""
    order = np.argsort(-a, axis=axis, kind="stable")
    ranks = np.argsort(order, axis=axis, kind="stable")
    return ranks < 2


def layer_modes(graph) -> Dict[str, str]:
    """``{node name: pattern}`` recorded in the graph's nodes (``attrs["_sparsity"]``)."""
    return {n.name: n.attrs[ATTR] for n in graph.nodes if isinstance(n.attrs.get(ATTR), str)}


def mark_for_build(graph, platform: str, log) -> List[Tuple[str, str, str]]:
    """The ``config(sparse_infer=True)`` build step: on a sparse platform mark every layer
    (:func:`mark_graph`) and log its line (:func:`report_lines`) at INFO on ``log`` (the
    toolkit object's log: ``RKNN(verbose=True)`` shows it); elsewhere nothing is marked
    and a warning says so.  Returns the rows (empty when nothing was marked)."""
    if platform not in SPARSE_PLATFORMS:
        log.warning("build: sparse_infer=True has no effect on %s (sparse inference: %s only); built dense",
                    platform, ", ".join(SPARSE_PLATFORMS))
        return []
    rows = mark_graph(graph)
    for line in report_lines(rows):
        log.info("%s", line)
    sparse = sum(1 for _, _, mode in rows if mode in MODES)
    log.info("sparse_infer: %d of %d Conv/Gemm/MatMul layers have sparse weights", sparse, len(rows))
    return rows


# ---------------------------------------------------------------------------- ONNX sparsifier


def sparsify_model(model, mode: str):
    """One-shot magnitude sparsification of an ONNX model's eligible weights into ``mode``
    (one of :data:`MODES`).  ``model``: path, bytes or ``onnx.ModelProto`` (not modified).

    Eligible: constant weights (initializers, or made by ``Constant`` /
    ``ConstantOfShape`` nodes: those are replaced by a new initializer
    ``<name>_sparse``) of 2-D Conv with ``group == 1``, Gemm (``B``) and MatMul (2-D right
    operand); a weight several eligible nodes read is sparsified once, by its first
    reader's directions.  Returns ``(new ModelProto, [(node name, op,
    initializer name), ...])`` in graph order."""
    import onnx
    from onnx import numpy_helper

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = onnx.load_from_string(bytes(model))
    else:
        proto = onnx.load(model)
    inits = {t.name: t for t in proto.graph.initializer}
    computed = _computed_constants(proto, inits)
    done: Dict[str, str] = {}  # weight tensor -> initializer holding its sparsified values
    rows = []
    for node in list(proto.graph.node):
        if node.op_type not in ("Conv", "Gemm", "MatMul") or len(node.input) < 2:
            continue
        name = node.input[1]
        if name in inits:
            w = numpy_helper.to_array(inits[name])
        elif name in computed:
            w = computed[name]
        else:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if w.dtype.kind != "f":
            continue
        if node.op_type == "Conv" and (w.ndim != 4 or int(attrs.get("group", 1)) != 1):
            continue
        if node.op_type in ("Gemm", "MatMul") and w.ndim != 2:
            continue
        if name not in done:
            view = weight_view(w, node.op_type, bool(attrs.get("transB", 0)))
            new3 = sparsify_weight(view, mode)
            if node.op_type == "Conv":
                new = new3.reshape(w.shape)
            elif node.op_type == "Gemm" and attrs.get("transB", 0):
                new = new3[:, :, 0]
            else:
                new = new3[:, :, 0].T
            new = np.ascontiguousarray(new.astype(w.dtype))
            if name in inits:
                inits[name].CopyFrom(numpy_helper.from_array(new, name))
                done[name] = name
            else:  # a weight computed by Constant / ConstantOfShape nodes: a new initializer
                init = _unique_name(proto, f"{name}_sparse")
                proto.graph.initializer.append(numpy_helper.from_array(new, init))
                done[name] = init
        node.input[1] = done[name]
        rows.append((node.name or node.output[0], node.op_type, done[name]))
    return proto, rows


def _computed_constants(proto, inits) -> Dict[str, np.ndarray]:
    """Values of tensors made by ``Constant`` and ``ConstantOfShape`` (of a constant shape)
    nodes, e.g. the weights of the onnx package's light models."""
    import onnx
    from onnx import numpy_helper

    out: Dict[str, np.ndarray] = {}
    for node in proto.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Constant" and "value" in attrs:
            out[node.output[0]] = numpy_helper.to_array(attrs["value"].t)
        elif node.op_type == "ConstantOfShape" and node.input:
            shape = out.get(node.input[0])
            if shape is None and node.input[0] in inits:
                shape = numpy_helper.to_array(inits[node.input[0]])
            if shape is None:
                continue
            fill = numpy_helper.to_array(onnx.helper.get_attribute_value(attrs["value"])) if "value" in attrs \
                else np.zeros(1, np.float32)
            out[node.output[0]] = np.full(tuple(int(d) for d in shape), fill.reshape(-1)[0], fill.dtype)
    return out


def _unique_name(proto, base: str) -> str:
    used = {t.name for t in proto.graph.initializer} | {o for n in proto.graph.node for o in n.output} \
        | {i.name for i in proto.graph.input}
    name, k = base, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    return name


def _runner(model_proto, log):
    """``run(inputs) -> [outputs]`` for an ONNX model: onnxruntime when installed, else the
    toolkit's optimised graph on the software executor in float32."""
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model_proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        return lambda xs: sess.run(None, dict(zip(names, xs)))
    from .accuracy import float_outputs
    from .onnx_import import import_onnx
    from .optimize import optimize

    imported = import_onnx(model_proto)
    graph = optimize(imported.graph, imported.shapes)
    return lambda xs: list(float_outputs(graph, [np.asarray(x, np.float32) for x in xs]).values())


def _cosine(a: List[np.ndarray], b: List[np.ndarray]) -> float:
    x = np.concatenate([np.asarray(v, np.float64).ravel() for v in a])
    y = np.concatenate([np.asarray(v, np.float64).ravel() for v in b])
    den = np.linalg.norm(x) * np.linalg.norm(y)
    return float(x @ y / den) if den > 0 else float(np.array_equal(x, y))


def layer_costs(dense, sparse, rows, samples, log=None) -> List[Tuple[str, str, float]]:
    """Per sparsified layer, the cosine of the model outputs with only that layer's weight
    sparsified vs the dense model, averaged over ``samples`` (lists of input arrays);
    the last row, ``("<all>", "", cos)``, is the fully sparsified model.  ``dense`` and
    ``sparse``: ModelProtos as :func:`sparsify_model` takes and gives."""
    import onnx

    ref = _runner(dense, log)
    golden = [ref(s) for s in samples]
    sparse_inits = {t.name: t for t in sparse.graph.initializer}
    out = []
    for name, op, init in rows:
        one = onnx.ModelProto()
        one.CopyFrom(dense)
        for t in one.graph.initializer:
            if t.name == init:
                t.CopyFrom(sparse_inits[init])
        run = _runner(one, log)
        out.append((name, op, float(np.mean([_cosine(run(s), g) for s, g in zip(samples, golden)]))))
    run = _runner(sparse, log)
    out.append(("<all>", "", float(np.mean([_cosine(run(s), g) for s, g in zip(samples, golden)]))))
    return out


def sparsify(onnx_in, onnx_out, mode: str = "4:2_ic", dataset=None, verbose: bool = False) -> int:
    """Sparsify an ONNX model's eligible weights into ``mode`` and save it (RKNN-Toolkit2
    style: returns 0, or -1 with the reason logged on ``rknnlite.toolkit``).

    Args:
        onnx_in: path, bytes or ``onnx.ModelProto`` of the dense model.
        onnx_out: path to write the sparsified model to.
        mode: ``"4:2_ic"``, ``"4:2_oc"``, ``"16:4_io"`` or ``"16:4_oi"`` (see the module
            docstring; one-shot magnitude pruning, no retraining -- the vendor's
            training-time ``autosparsity`` needs CUDA and is not reproduced).
        dataset: optional samples to measure the accuracy cost on: a dataset file as
            ``RKNN.build`` takes it (one line per sample, ``.npy``/image paths), or a list
            of samples, each a list of input arrays (NCHW float32).  Per sparsified layer
            the cosine of the model outputs (that layer alone sparsified vs dense) and the
            fully sparsified model's are logged at INFO (on onnxruntime when installed,
            else the software backend).
        verbose: also write the messages to stderr.
    """
    from ..runtime.log import InstanceLog

    log = InstanceLog("rknnlite.toolkit", verbose)
    try:
        try:
            import onnx  # noqa: F401
        except ImportError as e:
            log.error("sparsify: the onnx package is needed: %s", e)
            return -1
        if mode not in MODES:
            log.error("sparsify: mode must be one of %s, not %r", ", ".join(MODES), mode)
            return -1
        try:
            sparse, rows = sparsify_model(onnx_in, mode)
        except (OSError, ValueError, TypeError) as e:
            log.error("sparsify: cannot read %r: %s", onnx_in if isinstance(onnx_in, (str, os.PathLike)) else
                      type(onnx_in).__name__, e)
            return -1
        if not rows:
            log.warning("sparsify: no eligible layer (2-D Conv with group 1, Gemm, MatMul with an initializer "
                        "weight); the model is written unchanged")
        for name, op, init in rows:
            log.info("sparsify: %s:%s (%s) -> %s", op, name, init, mode)
        if dataset is not None and rows:
            try:
                dense = _load_proto(onnx_in)
                samples = _samples(dataset, dense)
                for name, op, cos in layer_costs(dense, sparse, rows, samples, log):
                    if name == "<all>":
                        log.info("sparsify: whole model: cosine %.6f vs dense on %d samples", cos, len(samples))
                    else:
                        log.info("sparsify: %s:%s cosine %.6f vs dense", op, name, cos)
            except Exception as e:  # a dataset or runtime problem: report it the toolkit way
                log.error("sparsify: accuracy on the dataset failed: %s: %s", type(e).__name__, e)
                return -1
        try:
            with open(onnx_out, "wb") as f:
                f.write(sparse.SerializeToString())
        except (OSError, TypeError) as e:
            log.error("sparsify: cannot write %s: %s", onnx_out, e)
            return -1
        log.info("sparsify: %d layers sparsified (%s) -> %s", len(rows), mode, onnx_out)
        return 0
    finally:
        log.close()


def _load_proto(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return onnx.load_from_string(bytes(model))
    return onnx.load(model)


def _samples(dataset, proto) -> List[List[np.ndarray]]:
    """Samples from a dataset file (via the toolkit's reader) or a list of input lists."""
    if isinstance(dataset, (str, os.PathLike)):
        from .dataset import read_dataset
        from .onnx_import import import_onnx

        return read_dataset(dataset, import_onnx(proto).input_specs)
    samples = []
    for i, s in enumerate(dataset):
        if isinstance(s, np.ndarray):
            s = [s]
        if not isinstance(s, (list, tuple)) or not all(isinstance(a, np.ndarray) for a in s):
            raise ValueError(f"dataset[{i}] must be a list of input arrays")
        samples.append([np.asarray(a, np.float32) for a in s])
    if not samples:
        raise ValueError("dataset has no samples")
    return samples
