"""The optimiser's stages as ONNX files: what ``RKNN(verbose=True)`` writes at ``build()``.

RKNN-Toolkit2 2.5.0, with ``verbose=True``, writes its graph optimiser's stages into the
current working directory during ``build()`` and ``hybrid_quantization_step1()`` (not
``load_onnx()``, not ``hybrid_quantization_step2()``'s build, never without ``verbose``):

* ``check0_base_optimize.onnx``: the loaded graph, always;
* ``check1_fold_constant.onnx``: after constant folding (dead nodes dropped), only when it
  changed the graph;
* ``check2_correct_ops.onnx``: after its attribute corrections (a Conv's implicit
  ``kernel_shape`` / ``strides`` / ``dilations`` / ``pads`` stated, a Reshape's ``0`` / ``-1``
  resolved), only when they changed the graph;
* ``check3_fuse_ops.onnx``: after its fusions (BatchNormalization and per-channel ``Mul`` into
  a Conv, Identity / Dropout removed, decomposed HardSwish...), only when they changed it.

A Conv followed by a Relu is no change (the vendor's compiler fuses that later).  rknnlite
reports the same stages from :func:`rknnlite.toolkit.optimize.optimize` (its ``stages``
callback; see :data:`~rknnlite.toolkit.optimize.STAGES`) and :func:`stage_writer` writes
them under the same names.  :func:`graph_to_onnx` makes each file valid ONNX
(``onnx.checker.check_model`` accepts it; onnxruntime runs it where every op is standard):

* rknnlite's internal fused forms are written back as standard nodes: a Conv's fused
  activation (``_activation``: Relu / Clip / LeakyRelu) and residual input (``_residual``)
  as ``Conv -> Add -> activation``; ``ChannelAffine`` as ``Mul -> Add [-> activation]``;
  ``HardSwish`` below opset 14 as ``HardSigmoid(1/6, 0.5) -> Mul``;
* attributes starting with ``_`` (rknnlite's own) are left out;
* an op ONNX does not define at the model's opset (a registered custom op) is written in
  the :data:`CUSTOM_DOMAIN` domain, as the vendor writes its own ops in a domain of its own;
* like the vendor's files: initializers are also listed as graph inputs, ``value_info``
  holds the intermediate tensors ONNX shape inference finds.  Unlike them: the model's own
  opset (the vendor converts to 19) and ``producer_name`` ``"rknnlite"``.

A file that cannot be written (a read-only directory, no ``onnx`` package) is a warning on
the toolkit's logger; the build goes on.  ``onnx`` is imported only when a file is made.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..model.graph import Graph, unique_name

__all__ = ["STAGE_FILES", "CUSTOM_DOMAIN", "graph_to_onnx", "stage_writer"]

#: The file each optimiser stage is written to (RKNN-Toolkit2's names).
STAGE_FILES = {
    "base_optimize": "check0_base_optimize.onnx",
    "fold_constant": "check1_fold_constant.onnx",
    "correct_ops": "check2_correct_ops.onnx",
    "fuse_ops": "check3_fuse_ops.onnx",
}

#: The domain of ops ONNX does not define (custom ops), opset version 1.
CUSTOM_DOMAIN = "rknnlite"

#: Opset from which ONNX defines HardSwish.
_HARD_SWISH_OPSET = 14


def graph_to_onnx(graph: Graph, opset: int, input_specs: Sequence[Any] = (), output_specs: Sequence[Any] = (),
                  shapes: Optional[Mapping[str, Sequence[int]]] = None, name: str = "rknnlite"):
    """``graph`` as an ``onnx.ModelProto`` of default-domain ``opset`` (see the module doc).

    ``input_specs`` / ``output_specs`` (:class:`~rknnlite.model.spec.TensorSpec`) type the
    graph inputs and outputs (a name without one is a float tensor of its shape in
    ``shapes``); ``shapes`` also gives the rank of a ``ChannelAffine``'s input (4 when
    unknown)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shapes = shapes or {}
    writer = _Writer(graph, opset, shapes)
    for node in graph.nodes:
        writer.node(node)
    specs = {t.name: t for t in list(input_specs) + list(output_specs)}

    def value_info(tensor: str):
        spec = specs.get(tensor)
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(spec.dtype)) if spec is not None else TensorProto.FLOAT
        shape = spec.shape if spec is not None else shapes.get(tensor)
        dims = None if shape is None else [int(d) if int(d) >= 0 else None for d in shape]
        return helper.make_tensor_value_info(tensor, elem, dims)

    initializers = [numpy_helper.from_array(np.asarray(v), k) for k, v in writer.constants.items()]
    inputs = [value_info(t) for t in graph.inputs]
    inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in initializers]
    proto_graph = helper.make_graph(writer.nodes, name, inputs, [value_info(t) for t in graph.outputs],
                                    initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(proto_graph, opset_imports=opsets, producer_name="rknnlite",
                              ir_version=helper.find_min_ir_version_for(opsets))
    if writer.custom:
        model.opset_import.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a graph inference cannot follow keeps no value_info
        return model
    model.graph.value_info.extend(inferred.graph.value_info)
    return model


class _Writer:
    """Turns rknnlite nodes into standard ONNX nodes (see :func:`graph_to_onnx`)."""

    def __init__(self, graph: Graph, opset: int, shapes: Mapping[str, Sequence[int]]):
        from onnx import defs, helper, numpy_helper

        self.helper, self.numpy_helper, self.defs = helper, numpy_helper, defs
        self.opset = opset
        self.shapes = shapes
        self.constants: Dict[str, np.ndarray] = dict(graph.constants)
        self.nodes: List[Any] = []
        self.custom = False
        self.tensors = set(graph.inputs) | set(graph.constants) | set(graph.outputs)
        self.tensors.update(o for n in graph.nodes for o in n.outputs)
        self.names = {n.name for n in graph.nodes}

    def _tensor(self, base: str) -> str:
        return unique_name(base, self.tensors)

    def _const(self, base: str, value: np.ndarray) -> str:
        name = unique_name(base, self.tensors)
        self.constants[name] = value
        return name

    def _emit(self, op: str, name: str, inputs: Sequence[str], outputs: Sequence[str], attrs: Mapping[str, Any],
              domain: str = "") -> None:
        made = [self._attribute(k, v) for k, v in attrs.items() if not k.startswith("_")]
        inputs = list(inputs)
        while inputs and not inputs[-1]:
            inputs.pop()  # omitted trailing optional inputs
        proto = self.helper.make_node(op, inputs, list(outputs), name=name, domain=domain)
        proto.attribute.extend(a for a in made if a is not None)
        self.nodes.append(proto)

    def _attribute(self, key: str, value: Any):
        if value is None:
            return None  # (an attribute set to nothing: ONNX's default)
        if isinstance(value, np.ndarray):
            value = self.numpy_helper.from_array(value)
        elif isinstance(value, (list, tuple)):
            if not value:
                return None  # an empty list has no ONNX type (and says what the default says)
            value = [self.numpy_helper.from_array(v) if isinstance(v, np.ndarray) else _plain(v) for v in value]
        else:
            value = _plain(value)
        return self.helper.make_attribute(key, value)

    def _standard(self, op: str) -> bool:
        try:
            self.defs.get_schema(op, self.opset, "")
        except Exception:  # onnx raises SchemaError: not defined at this opset
            return False
        return True

    def node(self, node) -> None:
        attrs = node.attrs
        if node.op in ("Conv", "ConvTranspose") and (attrs.get("_activation") or attrs.get("_residual")) \
                or node.op == "Gemm" and attrs.get("_residual"):
            self._conv(node)
        elif node.op == "ChannelAffine":
            self._channel_affine(node)
        elif node.op == "HardSwish" and self.opset < _HARD_SWISH_OPSET:
            gate = self._tensor(f"{node.outputs[0]}/hard_sigmoid")
            self._emit("HardSigmoid", unique_name(f"{node.name}/hard_sigmoid", self.names), node.inputs[:1], [gate],
                       {"alpha": 1.0 / 6, "beta": 0.5})
            self._emit("Mul", node.name, [node.inputs[0], gate], node.outputs, {})
        elif self._standard(node.op):
            self._emit(node.op, node.name, node.inputs, node.outputs, attrs)
        else:
            self.custom = True
            self._emit(node.op, node.name, node.inputs, node.outputs, attrs, CUSTOM_DOMAIN)

    def _conv(self, node) -> None:
        attrs = node.attrs
        out = node.outputs[0]
        steps = []  # (op, inputs after the running value, attrs)
        if attrs.get("_residual") and len(node.inputs) > 3:
            steps.append(("Add", [node.inputs[3]], {}))
        steps += self._activation(node)
        current = self._tensor(f"{out}/conv") if steps else out
        self._emit(node.op, node.name, node.inputs[:3], [current], attrs)
        self._chain(node, current, steps)

    def _channel_affine(self, node) -> None:
        x, scale, shift = node.inputs[:3]
        rank = len(self.shapes.get(x) or ()) or 4
        tail = (1,) * max(rank - 2, 0)
        steps = [("Mul", [self._const(f"{scale}/per_channel", np.asarray(self.constants[scale]).reshape((-1,) + tail))
                          if scale in self.constants else scale], {}),
                 ("Add", [self._const(f"{shift}/per_channel", np.asarray(self.constants[shift]).reshape((-1,) + tail))
                          if shift in self.constants else shift], {})]
        steps += self._activation(node)
        self._chain(node, x, steps, first_name=node.name)

    def _chain(self, node, current: str, steps, first_name: Optional[str] = None) -> None:
        """``steps`` applied to ``current`` in turn, the last one producing the node's output."""
        for k, (op, extra, attrs) in enumerate(steps):
            last = k == len(steps) - 1
            out = node.outputs[0] if last else self._tensor(f"{node.outputs[0]}/{op.lower()}")
            name = first_name if k == 0 and first_name else unique_name(f"{node.name}/{op.lower()}", self.names)
            self._emit(op, name, [current] + extra, [out], attrs)
            current = out

    def _activation(self, node) -> List[tuple]:
        """The standard node a ``_activation`` attribute stands for, as a chain step."""
        attrs = node.attrs
        act = attrs.get("_activation")
        if not act:
            return []
        if act == "LeakyRelu":
            return [("LeakyRelu", [], {"alpha": float(attrs.get("_activation_alpha", 0.01))})]
        if act == "Clip":
            lo, hi = attrs.get("_activation_min"), attrs.get("_activation_max")
            if self.opset < 11:
                bounds = {"min": float(lo) if lo is not None else float(np.finfo(np.float32).min),
                          "max": float(hi) if hi is not None else float(np.finfo(np.float32).max)}
                return [("Clip", [], bounds)]
            inputs = [self._const(f"{node.name}/clip_min", np.array(lo, np.float32)) if lo is not None else ""]
            if hi is not None:
                inputs.append(self._const(f"{node.name}/clip_max", np.array(hi, np.float32)))
            while inputs and not inputs[-1]:
                inputs.pop()
            return [("Clip", inputs, {})]
        return [(str(act), [], {})]


def _plain(value: Any) -> Any:
    """numpy scalars as Python ones, bools as ints (ONNX has no bool attribute)."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def stage_writer(input_specs: Sequence[Any], output_specs: Sequence[Any], opset: int,
                 shapes: Optional[Mapping[str, Sequence[int]]], log, what: str = "build",
                 directory: Optional[str] = None) -> Callable[[str, Graph], None]:
    """The ``stages`` callback of :func:`~rknnlite.toolkit.optimize.optimize` that writes each
    stage as :data:`STAGE_FILES` names it into ``directory`` (default: the current working
    directory when this is called), replacing a file of that name.  A file that cannot be
    made or written is a warning on ``log`` naming ``what`` (the API call), once: the
    stages after it are not written; nothing is raised."""
    folder = os.path.abspath(directory if directory is not None else os.getcwd())
    failed = []

    def write(stage: str, graph: Graph) -> None:
        if failed or stage not in STAGE_FILES:
            return
        path = os.path.join(folder, STAGE_FILES[stage])
        try:
            import onnx

            onnx.save(graph_to_onnx(graph, opset, input_specs, output_specs, shapes), path)
        except OSError as e:
            failed.append(path)
            log.warning("%s: cannot write %s: %s; the optimiser's check*.onnx files are not written", what, path,
                        e.strerror or e)
        except Exception as e:  # no onnx package, a model too large for one file...: the build goes on
            failed.append(path)
            log.warning("%s: cannot write %s: %s: %s; the optimiser's check*.onnx files are not written", what,
                        path, type(e).__name__, e)
        else:
            log.debug("%s: %s: wrote %s", what, stage, path)

    return write
