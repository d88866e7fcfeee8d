"""The sections of the rv1106/rv1103 container (format 0x1004, ``"RKNPU t3"``).

Observed on int8 files from RKNN-Toolkit2 2.3.2 and 2.5.0 (``docs/vendor-format-notes.md``,
"The rv1106/rv1103 container"); offsets are from the start of the file::

    0x00  the 64-byte RKNN header (model size at 0x10; 0x18..0x2f hold leaked heap pointers)
    0x40  u32 graph_size, task_area, task_count, regcmd_size, activation_size, weight_size
    0x80  task_count 40-byte ``rknpu_task`` records, in a task_area-byte area
    ...   regcmd_size bytes of register commands
    ...   weight_size bytes of weights and bias blocks (tensors at their offsets)
    ...   graph_size bytes: a FlatBuffer (identifier "RKNN", :data:`~rknnlite.model.schema.T3`)

and the sections end where the model section ends (``0x40 + model_size``).  ``activation_size``
is the NPU memory the activations take; nothing is stored for it.

:func:`locate_sections` accepts only that arrangement: any other (sizes that do not add up to
the model section, a task area too small for its tasks) is reported as the reason the graph
could not be located, and the file is then refused by the lowering with that reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Tuple, Union

__all__ = ["PackedSections", "locate_sections", "TABLE_OFFSET", "TASKS_OFFSET"]

#: where the section table starts (right after the RKNN header)
TABLE_OFFSET = 0x40
#: where the task records start
TASKS_OFFSET = 0x80
_TABLE = struct.Struct("<6I")
_TASK_SIZE = 40


@dataclass(frozen=True)
class PackedSections:
    """Byte ranges ``(offset, size)`` of the container's sections, from the start of the file.

    Attributes:
        graph: the FlatBuffer.
        tasks: the task records (``task_count * 40`` bytes).
        regcmd: the register commands (task ``regcmd_addr`` values are offsets into it).
        weights: constant tensors (a tensor's offset is into this section).
        activation_size: the NPU memory of the activations, in bytes (not stored).
    """

    graph: Tuple[int, int]
    tasks: Tuple[int, int]
    regcmd: Tuple[int, int]
    weights: Tuple[int, int]
    activation_size: int

    def to_dict(self) -> dict:
        """A JSON-ready dict (``rknnlite inspect --json``)."""
        return {"graph": list(self.graph), "tasks": list(self.tasks), "regcmd": list(self.regcmd),
                "weights": list(self.weights), "activation_size": self.activation_size}


def locate_sections(view, model_size: int) -> Union[PackedSections, str]:
    """The sections of a 0x1004 container held in ``view`` (the whole file), or a sentence saying
    why they could not be located."""
    end = TABLE_OFFSET + model_size
    if end > len(view) or model_size < TASKS_OFFSET - TABLE_OFFSET:
        return f"its model section ({model_size} bytes) is too short for the section table at {TABLE_OFFSET:#x}"
    graph_size, task_area, task_count, regcmd_size, activation_size, weight_size = \
        _TABLE.unpack_from(view, TABLE_OFFSET)
    if task_count * _TASK_SIZE > task_area:
        return (f"the section table gives {task_count} tasks ({task_count * _TASK_SIZE} bytes) in a {task_area}-byte "
                "task area")
    regcmd = TASKS_OFFSET + task_area
    weights = regcmd + regcmd_size
    graph = weights + weight_size
    if graph + graph_size != end:
        return (f"its section table (task area {task_area}, register commands {regcmd_size}, weights {weight_size}, "
                f"graph {graph_size} bytes from {TASKS_OFFSET:#x}) ends at {graph + graph_size:#x}, not at the end of "
                f"the model section ({end:#x})")
    if graph_size < 8:
        return f"its graph section of {graph_size} bytes is too short for a FlatBuffer"
    return PackedSections(graph=(graph, graph_size), tasks=(TASKS_OFFSET, task_count * _TASK_SIZE),
                          regcmd=(regcmd, regcmd_size), weights=(weights, weight_size),
                          activation_size=activation_size)
