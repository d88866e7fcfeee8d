"""The sections of the rv1106/rv1103 container (format 0x1004, ``"RKNPU t3"``).

Observed on int8 files from RKNN-Toolkit2 2.3.2 and 2.5.0 (``docs/vendor-format-notes.md``,
"The rv1106/rv1103 container"); offsets are from the start of the file::

    0x00  the 64-byte RKNN header (model size at 0x10; 0x18..0x2f hold leaked heap pointers)
    0x40  u32 graph_size, task_area, task_count, regcmd_size, activation_size, weight_size
    0x80  task_count 40-byte ``rknpu_task`` records, in a task_area-byte area
    ...   regcmd_size bytes of register commands
    ...   the compiler's generated constants (the weights of the convs it adds, e.g. for a concat
          or a channel shuffle): their size is not in the table, it is what the others leave
    ...   weight_size bytes of weights and bias blocks (constant tensors at their offsets)
    ...   graph_size bytes: a FlatBuffer (identifier "RKNN", :data:`~rknnlite.model.schema.T3`)

and the graph ends where the model section ends (``0x40 + model_size``).  ``activation_size``
is the NPU memory the activations take; nothing is stored for it.

:func:`locate_sections` accepts only that arrangement: any other (sections that overrun the model
section, a task area too small for its tasks) is reported as the reason the graph could not be
located, and the file is then refused by the lowering with that reason.
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
        generated: the compiler's generated constants (tensor kind "generated").
        activation_size: the NPU memory of the activations, in bytes (not stored).
    """

    graph: Tuple[int, int]
    tasks: Tuple[int, int]
    regcmd: Tuple[int, int]
    weights: Tuple[int, int]
    generated: Tuple[int, int]
    activation_size: int

    def to_dict(self) -> dict:
        """A JSON-ready dict (``rknnlite inspect --json``)."""
        return {"graph": list(self.graph), "tasks": list(self.tasks), "regcmd": list(self.regcmd),
                "weights": list(self.weights), "generated": list(self.generated),
                "activation_size": self.activation_size}


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
    generated = regcmd + regcmd_size
    graph = end - graph_size
    weights = graph - weight_size
    if weights < generated:
        return (f"its section table (task area {task_area}, register commands {regcmd_size} bytes from "
                f"{TASKS_OFFSET:#x}; weights {weight_size} and graph {graph_size} bytes) needs {generated - weights} "
                f"bytes more than the {model_size}-byte model section")
    if graph_size < 8:
        return f"its graph section of {graph_size} bytes is too short for a FlatBuffer"
    return PackedSections(graph=(graph, graph_size), tasks=(TASKS_OFFSET, task_count * _TASK_SIZE),
                          regcmd=(regcmd, regcmd_size), weights=(weights, weight_size),
                          generated=(generated, weights - generated), activation_size=activation_size)
