"""The I/O-count and input-range records of ``rknn_query``: :class:`IoNum` and :class:`InputRange`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Tuple

from ..constants import TensorFormat

__all__ = ["IoNum", "InputRange"]


class IoNum(NamedTuple):
    """``rknn_input_output_num``: how many inputs and outputs the model has."""

    n_input: int
    n_output: int


@dataclass(frozen=True)
class InputRange:
    """``rknn_input_range``: the shapes a dynamic-shape model accepts for one input.

    Attributes:
        index: input position.
        name: input name.
        fmt: layout of the shapes (:class:`TensorFormat`, the model's).
        n_dims: rank of the input.
        shape_number: number of shape sets (at most 512).
        dyn_range: ``shape_number`` shapes; set ``s`` of every input go together
            (``set_input_shapes`` takes ``[r.dyn_range[s] for r in ranges]``).
    """

    index: int
    name: str
    fmt: TensorFormat
    n_dims: int
    shape_number: int
    dyn_range: Tuple[Tuple[int, ...], ...]

    def to_dict(self) -> dict:
        """Every field, enums by name and shapes as lists."""
        return {"index": self.index, "name": self.name, "fmt": self.fmt.name, "n_dims": self.n_dims,
                "shape_number": self.shape_number, "dyn_range": [list(s) for s in self.dyn_range]}
