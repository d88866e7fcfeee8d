"""librknnrt's ``RKNN_QUERY_PERF_DETAIL`` text as a :class:`~rknnlite.tensors.perf.PerfDetail`.

The runtime answers with a fixed-width table (see :mod:`rknnlite.tensors.perf`); its rows
are parsed into :class:`~rknnlite.tensors.perf.OpPerf` records, and :meth:`text` returns
the runtime's own table unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ...tensors.perf import OpPerf, PerfDetail

__all__ = ["RuntimePerfDetail", "parse_perf_detail"]

_SHAPES = re.compile(r"\(([-\d,]*)\)")


@dataclass(frozen=True)
class RuntimePerfDetail(PerfDetail):
    """A :class:`PerfDetail` parsed from the runtime's text; :meth:`text` is that text."""

    raw: str = field(default="", repr=False)

    def text(self) -> str:
        """The runtime's table, exactly as librknnrt produced it."""
        return self.raw


def _shapes(cell: str) -> Tuple[Tuple[int, ...], ...]:
    return tuple(tuple(int(d) for d in m.split(",") if d) for m in _SHAPES.findall(cell))


def _fractions(cell: str) -> Tuple[float, float, float]:
    parts = [p.rstrip("%") for p in cell.split("/")]
    try:
        values = [float(p) / 100.0 for p in parts][:3]
    except ValueError:
        return (0.0, 0.0, 0.0)
    return tuple(values + [0.0] * (3 - len(values)))  # type: ignore[return-value]


def _row(tokens: List[str]) -> Optional[OpPerf]:
    # ID OpType DataType Target InputShape OutputShape Cycles Time(us) MacUsage WorkLoad RW(KB) FullName
    if len(tokens) < 12 or not tokens[0].isdigit():
        return None
    try:
        cycles = tuple(int(c) for c in tokens[6].split("/"))
        cycles = (cycles + (0, 0, 0))[:3]
        time_us = float(tokens[7])
        rw_kb = float(tokens[10])
    except ValueError:
        return None
    mac = None if tokens[8] in ("\\", "-") else tuple(float(m) for m in tokens[8].split("/") if _is_float(m))
    return OpPerf(id=int(tokens[0]), op_type=tokens[1], data_type=tokens[2], target=tokens[3],
                  input_shapes=_shapes(tokens[4]), output_shapes=_shapes(tokens[5]), cycles=cycles,  # type: ignore
                  time_us=time_us, mac_usage=mac or None, workload=_fractions(tokens[9]),
                  rw_bytes=int(round(rw_kb * 1024)), full_name=" ".join(tokens[11:]))


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def parse_perf_detail(text: str) -> RuntimePerfDetail:
    """Rows of the runtime's table (lines starting with an operator id); other lines
    (rules, titles, totals, the ranking table) are kept only in :meth:`text`."""
    records = []
    for line in text.splitlines():
        row = _row(line.split())
        if row is not None:
            records.append(row)
    return RuntimePerfDetail(tuple(records), raw=text)
