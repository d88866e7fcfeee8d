"""A portable model: the container's metadata and graph, with constants viewed in place."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, Mapping, Tuple

import numpy as np

from ..errors import ModelInvalidError
from .container import Container, pack_weights, read_container, write_container
from .graph import Graph
from .info import MetadataInfo
from .metadata import ModelMetadata, parse_metadata

__all__ = ["PortableModel", "read_portable", "write_portable", "share_weights", "weight_names"]

#: ops whose weight operand (input 1) a ``remove_weight=True`` build leaves out of the file
WEIGHT_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass(frozen=True)
class PortableModel(MetadataInfo):
    """A loaded portable model (a :class:`~rknnlite.model.info.ModelInfo`).

    Attributes:
        metadata: validated ``META`` section.
        graph: the graph; its constants are read-only numpy views of the file (no copy).
        container: the parsed container (version, sections, size).
        shared: the constants a weight-less model (built with ``remove_weight=True``)
            takes from another context's model, ``{name: (dtype, shape)}``; until
            :func:`share_weights` binds them the graph holds zero-byte placeholders.
    """

    metadata: ModelMetadata
    graph: Graph
    container: Container
    shared: Mapping[str, Tuple[str, Tuple[int, ...]]] = field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-ready description for ``rknnlite inspect``."""
        m = self.metadata
        return {
            "format": "rknnlite-portable",
            "format_version": "%d.%d" % self.container.version,
            "producer": f"{m.producer} {m.producer_version}".strip(),
            "target_platforms": list(m.target_platforms),
            "float_dtype": m.float_dtype,
            "quantization": m.quantization,
            "custom_string": m.custom_string,
            "inputs": [t.to_dict() for t in m.inputs],
            "outputs": [t.to_dict() for t in m.outputs],
            "dynamic_shapes": [[list(s) for s in ss] for ss in m.dynamic_shapes],
            "batch_size": m.batch_size,
            "shared_weights": sorted(self.shared),
            "nodes": len(self.graph.nodes),
            "weights_bytes": len(self.container.weights),
            "size": self.container.size,
        }


def read_portable(view: memoryview, label: str = "<buffer>") -> PortableModel:
    """Parse and verify a portable model (see :mod:`rknnlite.model.container`)."""
    container = read_container(view, label)
    try:
        metadata = parse_metadata(container.metadata)
        raw = container.graph
        table = raw.get("constants", {})
        if not isinstance(table, dict):
            raise ModelInvalidError("malformed graph: constants must be an object", op="load")
        constants = {name: container.constant(entry) for name, entry in table.items()}
        shared = _shared_table(raw.get("shared_constants", {}))
        for name, (dtype, shape) in shared.items():  # placeholders: no bytes behind them
            constants[name] = np.broadcast_to(np.zeros((), dtype), shape)
        graph = Graph.from_dict(raw, constants)
        _check_io(metadata, graph)
    except ModelInvalidError as e:
        raise ModelInvalidError(f"{label}: {e.message}", op="load") from None
    return PortableModel(metadata, graph, container, shared)


def _shared_table(table) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
    if not isinstance(table, dict):
        raise ModelInvalidError("malformed graph: shared_constants must be an object", op="load")
    out = {}
    for name, entry in table.items():
        try:
            dtype = np.dtype(entry["dtype"]).name
            shape = tuple(int(d) for d in entry["shape"])
        except (KeyError, TypeError, ValueError):
            raise ModelInvalidError(f"malformed graph: shared constant {name!r} needs a dtype and a shape",
                                    op="load") from None
        out[name] = (dtype, shape)
    return out


def weight_names(graph: Graph) -> Tuple[str, ...]:
    """The constants a ``remove_weight=True`` build leaves out: the weight operand (input 1)
    of every Conv, ConvTranspose, Gemm and MatMul node that is a constant, sorted."""
    names = {n.inputs[1] for n in graph.nodes
             if n.op in WEIGHT_OPS and len(n.inputs) > 1 and n.inputs[1] in graph.constants}
    return tuple(sorted(names))


def share_weights(model: PortableModel, donor: PortableModel, label: str = "the model") -> PortableModel:
    """``model`` (weight-less) with its shared constants taken from ``donor``'s graph (the
    donor's arrays themselves: views of its file, no copy).

    Raises:
        ModelInvalidError: ``model`` is not weight-less, or ``donor`` lacks one of the
            constants or has it with another dtype or shape (named).
    """
    if not model.shared:
        raise ModelInvalidError(f"{label} has all its weights (it was not built with config(remove_weight=True)); "
                                "share_weights_with is for weight-less models", op="rknn_init")
    constants = dict(model.graph.constants)
    for name, (dtype, shape) in model.shared.items():
        value = donor.graph.constants.get(name)
        if value is None:
            raise ModelInvalidError(f"{label} takes weight {name!r} from the shared context's model, which has no "
                                    "such constant (was it built from the same network?)", op="rknn_init")
        if value.dtype.name != dtype or tuple(value.shape) != tuple(shape):
            raise ModelInvalidError(f"{label} needs weight {name!r} as {dtype} {list(shape)}; the shared context's "
                                    f"model has {value.dtype.name} {list(value.shape)}", op="rknn_init")
        constants[name] = value
    graph = copy.copy(model.graph)
    graph.constants = constants
    return replace(model, graph=graph, shared={})


def _check_io(metadata: ModelMetadata, graph: Graph) -> None:
    names_in = [t.name for t in metadata.inputs]
    names_out = [t.name for t in metadata.outputs]
    if names_in != graph.inputs or names_out != graph.outputs:
        raise ModelInvalidError(
            f"metadata I/O {names_in} -> {names_out} does not match the graph's {graph.inputs} -> {graph.outputs}",
            op="load",
        )


def write_portable(metadata: ModelMetadata, graph: Graph, shared: Iterable[str] = ()) -> bytes:
    """Serialise a model to portable container bytes (deterministic for equal inputs).
    ``shared``: constants left out of the file (a weight-less model, ``remove_weight=True``):
    only their dtype and shape are written; a context gets them from another one's model."""
    graph.validate()
    _check_io(metadata, graph)
    graph_dict, constants = graph.to_dict()
    shared = sorted(set(shared))
    if shared:
        graph_dict["shared_constants"] = {name: {"dtype": np.asarray(constants[name]).dtype.name,
                                                 "shape": list(np.shape(constants[name]))} for name in shared}
        for name in shared:
            del constants[name]
    blob, table = pack_weights(constants)
    graph_dict["constants"] = table
    return write_container(metadata.to_dict(), graph_dict, blob)
