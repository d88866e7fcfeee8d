"""A portable model: the container's metadata and graph, with constants viewed in place."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelInvalidError
from .container import Container, pack_weights, read_container, write_container
from .graph import Graph
from .metadata import ModelMetadata, parse_metadata

__all__ = ["PortableModel", "read_portable", "write_portable"]


@dataclass(frozen=True)
class PortableModel:
    """A loaded portable model.

    Attributes:
        metadata: validated ``META`` section.
        graph: the graph; its constants are read-only numpy views of the file (no copy).
        container: the parsed container (version, sections, size).
    """

    metadata: ModelMetadata
    graph: Graph
    container: Container

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
        graph = Graph.from_dict(raw, constants)
        _check_io(metadata, graph)
    except ModelInvalidError as e:
        raise ModelInvalidError(f"{label}: {e.message}", op="load") from None
    return PortableModel(metadata, graph, container)


def _check_io(metadata: ModelMetadata, graph: Graph) -> None:
    names_in = [t.name for t in metadata.inputs]
    names_out = [t.name for t in metadata.outputs]
    if names_in != graph.inputs or names_out != graph.outputs:
        raise ModelInvalidError(
            f"metadata I/O {names_in} -> {names_out} does not match the graph's {graph.inputs} -> {graph.outputs}",
            op="load",
        )


def write_portable(metadata: ModelMetadata, graph: Graph) -> bytes:
    """Serialise a model to portable container bytes (deterministic for equal inputs)."""
    graph.validate()
    _check_io(metadata, graph)
    graph_dict, constants = graph.to_dict()
    blob, table = pack_weights(constants)
    graph_dict["constants"] = table
    return write_container(metadata.to_dict(), graph_dict, blob)
