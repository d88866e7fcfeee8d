"""``onnx_edit``: change the layout of an ONNX model's inputs and outputs (RKNN-Toolkit2 §2.1.9).

``from rknnlite.toolkit import onnx_edit`` mirrors the vendor's ``rknn.utils.onnx_edit``:
each input or output named in ``inputs_transform`` / ``outputs_transform`` gets the layout
its transformation formula describes (see :mod:`.formula` for the grammar), and the edited
model computes the same values as the original on correspondingly transformed data.

* An edited **input** keeps its name and takes the transformed shape; the inverse of the
  transform (Reshape/Transpose nodes, at most three) is inserted right after it, so the
  original graph sees the original layout.
* An edited **output** keeps its name and gets the transformed shape; the transform's
  nodes are appended after the tensor the original graph produced (renamed
  ``<name>_onnx_edit_src``).

With a ``dataset`` (the ``build`` dataset format: one sample per line, one path per
input), every sample is loaded and the input transforms are applied.  As the vendor's
``onnx_edit`` does, the result goes beside ``export_path``: a folder
``dataset_for_<export stem>/`` (stem = export file name minus its last extension) holding
one file per sample and input, named after the source file (a transformed input is saved
with ``np.save`` as ``<source name>.npy``, or ``<source name>`` when that already ends in
``.npy``; an untransformed input is a byte copy of its source file), and the listing
``dataset_for_<export stem>.txt`` (one sample per line).  The listing holds absolute
paths, so ``build(dataset='dataset_for_<stem>.txt')`` reads it from any working
directory (the vendor writes ``./dataset_for_<stem>/...``, right only from the export
directory).
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import InvalidParamError, ModelInvalidError, RKNNError
from .dataset import DatasetError
from .formula import Step, TransformPlan, plan_transform
from .onnx_attrs import unique_name

__all__ = ["onnx_edit", "dataset_names"]

_log = logging.getLogger("rknnlite.toolkit")
_OP = "onnx_edit"


def onnx_edit(model, export_path, inputs_transform: Optional[Mapping[str, str]] = None,
              outputs_transform: Optional[Mapping[str, str]] = None, dataset=None) -> int:
    """Edit the layout of a model's inputs/outputs and save the result; returns 0 or -1.

    Args:
        model: the ONNX model: a path, serialized bytes or an ``onnx.ModelProto`` (never
            modified; the edit works on a copy).
        export_path: where to write the edited ``.onnx`` file (its directory must exist).
        inputs_transform: ``{input name: formula}``, e.g. ``{'k_in': 'a,b,c,d->1,ad,b,c'}``;
            ``None`` or ``{}`` for none.  The edited model's input takes the right-hand
            shape.
        outputs_transform: ``{output name: formula}``; the edited model's output has the
            right-hand shape.
        dataset: optional path of a dataset file (as for ``RKNN.build``: ``.npy`` arrays
            or images, paths relative to the working directory) whose samples are
            rewritten for the edited model as ``dataset_for_<export stem>.txt`` and
            ``dataset_for_<export stem>/`` next to ``export_path`` (see the module
            docstring).

    The shapes the formulas apply to must be fully known (no dynamic dims).  As the
    vendor toolkit does, failures are not raised: the reason is logged on the
    ``rknnlite.toolkit`` logger (formula errors name the formula, the character position
    and what was expected) and -1 is returned.  Every check (model, formulas, dataset
    samples) runs before anything is written, so a bad argument writes nothing; only a
    disk error while writing can leave partial output.
    """
    try:
        import onnx  # noqa: F401  (the toolkit extra)
    except ImportError as e:
        _log.error("onnx_edit: the onnx package is needed to edit ONNX models: %s", e)
        return -1
    try:
        edited, specs, in_plans = _edit(model, inputs_transform, outputs_transform)
        samples = _read_samples(dataset, specs) if dataset is not None else None
        path = _save(edited, export_path)
        if samples is not None:
            listing = _write_dataset(samples, dataset, in_plans, specs, path)
            _log.info("onnx_edit: new dataset (%d sample(s)) has been saved to %r", len(samples), listing)
    except RKNNError as e:
        _log.error("onnx_edit: %s", e.message)
        return -1
    except DatasetError as e:
        _log.error("onnx_edit: %s", e)
        return -1
    except Exception as e:  # noqa: BLE001 - the 0/-1 contract: report, never raise
        _log.error("onnx_edit: unexpected %s: %s", type(e).__name__, e, exc_info=True)
        return -1
    _log.info("onnx_edit: saved %s", path)
    return 0


# -- editing -----------------------------------------------------------------------------------


def _edit(model, inputs_transform, outputs_transform):
    import onnx

    from .onnx_import import _load

    ins = _transforms(inputs_transform, "inputs_transform")
    outs = _transforms(outputs_transform, "outputs_transform")
    proto = _load(model)
    edited = onnx.ModelProto()
    edited.CopyFrom(proto)
    g = edited.graph
    initializers = {t.name for t in g.initializer}
    inputs = [vi for vi in g.input if vi.name not in initializers]
    in_names = [vi.name for vi in inputs]
    out_names = [vi.name for vi in g.output]
    _check_keys(ins, in_names, "inputs_transform", "input")
    _check_keys(outs, out_names, "outputs_transform", "output")
    if (ins or outs) and _opset(edited) < 5:
        raise ModelInvalidError(f"the model uses opset {_opset(edited)}; onnx_edit needs opset 5 or newer "
                                f"(Reshape with a shape input)", op=_OP)

    in_shapes = {vi.name: _shape(vi) for vi in inputs}
    in_plans = {name: plan_transform(f, in_shapes[name], f"input {name!r}") for name, f in ins.items()}
    out_shapes = _output_shapes(edited, outs)
    out_plans = {name: plan_transform(f, out_shapes[name], f"output {name!r}") for name, f in outs.items()}

    names = _Names(g)
    front: List = []
    for vi in inputs:
        plan = in_plans.get(vi.name)
        if plan is None or not plan.steps:
            continue
        if vi.name in out_names:
            raise ModelInvalidError(f"input {vi.name!r} is also a graph output; onnx_edit cannot give one "
                                    f"tensor two layouts", op=_OP)
        restored = names.fresh(f"{vi.name}_onnx_edit_restored")
        _rename_uses(g, vi.name, restored)
        front += _chain(plan.inverse_steps, vi.name, restored, names)
        _set_shape(vi, plan.dst_shape)
    back: List = []
    graph_inputs = set(in_names) | initializers
    for vi in g.output:
        plan = out_plans.get(vi.name)
        if plan is None or not plan.steps:
            continue
        if vi.name in graph_inputs:
            raise ModelInvalidError(f"output {vi.name!r} is a graph input or initializer, not computed by a "
                                    f"node; onnx_edit cannot give one tensor two layouts", op=_OP)
        if out_names.count(vi.name) > 1:
            raise ModelInvalidError(f"output {vi.name!r} is listed twice among the graph outputs", op=_OP)
        source = names.fresh(f"{vi.name}_onnx_edit_src")
        _rename_uses(g, vi.name, source)
        for node in g.node:
            for i, o in enumerate(node.output):
                if o == vi.name:
                    node.output[i] = source
        back += _chain(plan.steps, source, vi.name, names)
        _set_shape(vi, plan.dst_shape)
    edited_names = set(ins) | set(outs)
    kept = [vi for vi in g.value_info if vi.name not in edited_names]
    del g.value_info[:]
    g.value_info.extend(kept)
    nodes = front + list(g.node) + back
    del g.node[:]
    g.node.extend(nodes)
    for name, plan in list(in_plans.items()) + list(out_plans.items()):
        _log.debug("onnx_edit: %s %s -> %s: %s", name, list(plan.src_shape), list(plan.dst_shape),
                   ", ".join(f"{s.kind}{list(s.value)}" for s in plan.steps) or "no op")
    specs = [_input_spec(vi, in_shapes[vi.name]) for vi in inputs]
    return edited, specs, in_plans


def _transforms(value, what: str) -> Dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidParamError(f"{what} must be a dict {{tensor name: formula}}, not {type(value).__name__}",
                                op=_OP)
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidParamError(f"{what} must map tensor names (str) to formulas (str), got {k!r}: {v!r}",
                                    op=_OP)
    return dict(value)


def _check_keys(transforms: Dict[str, str], names: List[str], what: str, kind: str) -> None:
    for name in transforms:
        if name not in names:
            raise InvalidParamError(f"{what}: the model has no {kind} {name!r}; its {kind}s are {names}", op=_OP)


def _opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def _shape(vi) -> Optional[Tuple[int, ...]]:
    from .onnx_import import _value_type

    return _value_type(vi)[1]


def _output_shapes(model, outs: Dict[str, str]) -> Dict[str, Optional[Tuple[int, ...]]]:
    import onnx

    from .onnx_import import _run_inference

    shapes = {vi.name: _shape(vi) for vi in model.graph.output if vi.name in outs}
    if any(s is None or any(d < 0 for d in s) for s in shapes.values()):
        inferred = _run_inference(model, onnx)
        for name, shape in shapes.items():
            known = inferred.get(name, (None, None))[1]
            if known is not None and (shape is None or len(known) == len(shape)):
                shapes[name] = tuple(k if k >= 0 else d for k, d in zip(known, shape or known))
    return shapes


def _set_shape(vi, shape: Tuple[int, ...]) -> None:
    tt = vi.type.tensor_type
    tt.shape.Clear()
    for d in shape:
        tt.shape.dim.add().dim_value = int(d)


def _chain(steps: Tuple[Step, ...], src: str, dst: str, names: "_Names") -> List:
    """Nodes computing ``dst`` from ``src`` by ``steps`` (Reshape shapes as int64 initializers)."""
    from onnx import helper, numpy_helper

    nodes = []
    current = src
    for k, step in enumerate(steps):
        out = dst if k == len(steps) - 1 else names.fresh(f"{dst}_onnx_edit_{k}")
        node_name = names.fresh(f"{dst}_onnx_edit_{step.kind}_{k}")
        if step.kind == "reshape":
            shape_name = names.fresh(f"{node_name}_shape")
            names.graph.initializer.append(numpy_helper.from_array(np.asarray(step.value, np.int64), shape_name))
            nodes.append(helper.make_node("Reshape", [current, shape_name], [out], name=node_name))
        else:
            nodes.append(helper.make_node("Transpose", [current], [out], name=node_name, perm=list(step.value)))
        current = out
    return nodes


class _Names:
    """Every name used in a graph (tensors, nodes, subgraphs), for making fresh ones."""

    def __init__(self, graph):
        self.graph = graph
        self.used = set()
        self._collect(graph)

    def _collect(self, g) -> None:
        self.used.update(vi.name for vi in list(g.input) + list(g.output) + list(g.value_info))
        self.used.update(t.name for t in g.initializer)
        for node in g.node:
            self.used.add(node.name)
            self.used.update(node.input)
            self.used.update(node.output)
            for sub in _subgraphs(node):
                self._collect(sub)

    def fresh(self, base: str) -> str:
        return unique_name(base, self.used)


def _subgraphs(node):
    for a in node.attribute:
        if a.HasField("g"):
            yield a.g
        yield from a.graphs


def _rename_uses(g, old: str, new: str, top: bool = True) -> None:
    """Point every node input reading ``old`` (in ``g`` and its subgraphs, whose outputs may
    also name an outer tensor) at ``new``; the top graph's own outputs are left alone."""
    for node in g.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for sub in _subgraphs(node):
            _rename_uses(sub, old, new, top=False)
    if not top:
        for vi in g.output:
            if vi.name == old:
                vi.name = new


# -- saving and the dataset --------------------------------------------------------------------


def _save(model, export_path) -> str:
    import onnx

    try:
        path = os.fspath(export_path)
    except TypeError:
        raise InvalidParamError(f"export_path must be a path, not {type(export_path).__name__}", op=_OP) from None
    try:
        onnx.save(model, path)
    except (OSError, ValueError) as e:
        raise RKNNError(f"cannot write {path}: {e}", op=_OP) from None
    return path


def _input_spec(vi, shape):
    from onnx import helper

    from ..model.spec import DTYPES, TensorSpec

    elem = vi.type.tensor_type.elem_type
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name
    except (KeyError, TypeError, ValueError):
        dtype = ""
    return TensorSpec(vi.name, tuple(shape) if shape is not None else (), dtype if dtype in DTYPES else "")


def _read_samples(dataset, specs) -> List[List[np.ndarray]]:
    from .dataset import read_dataset

    for spec in specs:
        if not spec.dtype:
            raise ModelInvalidError(f"input {spec.name!r} has an element type a .npy dataset cannot feed", op=_OP)
    return read_dataset(dataset, specs)


def dataset_names(model_path: str) -> Tuple[str, str]:
    """``(listing, folder)``: where ``onnx_edit`` writes the dataset of the model saved at
    ``model_path``: ``<dir>/dataset_for_<stem>.txt`` and ``<dir>/dataset_for_<stem>/``."""
    folder, base = os.path.split(os.path.abspath(model_path))
    stem = f"dataset_for_{os.path.splitext(base)[0]}"
    return os.path.join(folder, f"{stem}.txt"), os.path.join(folder, stem)


def _write_dataset(samples, dataset, in_plans: Dict[str, TransformPlan], specs, model_path: str) -> str:
    from .dataset import dataset_lines

    listing, data_dir = dataset_names(model_path)
    sources = [paths for _, paths in dataset_lines(dataset)]
    taken: Dict[str, str] = {}  # file name -> the source it holds (two sources never share a name)
    try:
        os.makedirs(data_dir, exist_ok=True)
        lines = []
        for n, (sample, srcs) in enumerate(zip(samples, sources)):
            paths = []
            for i, (array, spec, src) in enumerate(zip(sample, specs, srcs)):
                plan = in_plans.get(spec.name)
                base = os.path.basename(src)
                if plan is not None and not base.lower().endswith(".npy"):
                    base += ".npy"
                if taken.setdefault(base, src) != src:
                    base = f"{n}_{i}_{base}"
                    taken[base] = src
                p = os.path.join(data_dir, base)
                if plan is None:
                    shutil.copyfile(src, p)
                else:
                    np.save(p, np.ascontiguousarray(plan.apply(array)), allow_pickle=False)
                paths.append(p)
            lines.append(" ".join(paths))
        with open(listing, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as e:
        raise RKNNError(f"cannot write the edited dataset next to {model_path}: {e}", op=_OP) from None
    return listing
