"""Performance and memory queries: per-op records, the vendor's perf_detail table, mem_size.

:class:`OpPerf` is one row of ``RKNN_QUERY_PERF_DETAIL``; :class:`PerfDetail` holds a run's
rows and renders them in librknnrt's fixed-width text layout (``str(detail)`` /
:meth:`PerfDetail.text`), which tools written for the vendor runtime already parse::

    ------------------------------------------------------------- (title block)
    ID   OpType           DataType Target InputShape  OutputShape  Cycles(DDR/NPU/Total)
         Time(us)  MacUsage(%)  WorkLoad(0/1/2)  RW(KB)  FullName        (one line)
    1    InputOperator    FP32     CPU    \\  (1,3,32,32)  0/0/0  3  \\  100.0%/0.0%/0.0%  12  InputOperator:x
    ...
    Total Operator Elapsed Per Frame Time(us): 123
    Total Memory Read/Write Per Frame Size(KB): 456.00
    ------------------------------------------------ Operator Time Consuming Ranking Table
    OpType  CallNumber  CPUTime(us)  GPUTime(us)  NPUTime(us)  TotalTime(us)  TimeRatio(%)

:class:`MemSize` mirrors ``rknn_mem_size``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["OpPerf", "PerfDetail", "MemSize", "format_shapes", "format_perf_detail"]

# Column widths of the vendor's table (header text plus padding).
_COLUMNS = (
    ("ID", 5), ("OpType", 17), ("DataType", 9), ("Target", 7), ("InputShape", 41), ("OutputShape", 23),
    ("Cycles(DDR/NPU/Total)", 25), ("Time(us)", 13), ("MacUsage(%)", 21), ("WorkLoad(0/1/2)", 21),
    ("RW(KB)", 13), ("FullName", 0),
)
_RANKING = (("OpType", 19), ("CallNumber", 13), ("CPUTime(us)", 13), ("GPUTime(us)", 13), ("NPUTime(us)", 13),
            ("TotalTime(us)", 15), ("TimeRatio(%)", 14))
_WIDE_RULE = "-" * 220
_RANKING_RULE = "-" * 99


@dataclass(frozen=True)
class OpPerf:
    """One operator of the last run.

    Attributes:
        id: 1-based row number, in execution order.
        op_type: operator type (``"Conv"``, ``"InputOperator"``, ...).
        data_type: storage type of its first input (``"FP16"``, ``"INT8"``, ...).
        target: the device that ran it: ``"CPU"`` for the software NPU, ``"NPU"`` on a board.
        input_shapes / output_shapes: shapes of the tensors read / written (model order).
        cycles: ``(ddr, npu, total)`` clock cycles; the software NPU has no cycle counter
            and reports ``(0, 0, 0)``, as the vendor does for CPU-run operators.
        time_us: elapsed time in microseconds (float; the table rounds it).
        mac_usage: MAC utilisation per core in percent, or ``None`` where it does not
            apply (always ``None`` on the software NPU).
        workload: share of the operator's work done by NPU cores 0, 1 and 2 (fractions
            summing to 1, or all 0 for I/O rows).  On the software NPU each emulated core
            is a worker thread; the share is the fraction of the kernel's parallel work
            items that core's thread executed (a kernel that does not split its work runs
            wholly on the first core of the mask).
        rw_bytes: bytes read plus written (the actual sizes of its input and output tensors).
        full_name: ``"<OpType>:<node name>"``.
        sparsity: for a layer of a model built with ``sparse_infer=True``, its
            SparseRation (``"50% (IC)"``, ``"50% (OC)"``, ``"75%"``, ``"0%"``), else None;
            the table shows it after the full name (see :meth:`PerfDetail.with_sparsity`).
    """

    id: int
    op_type: str
    data_type: str
    target: str
    input_shapes: Tuple[Tuple[int, ...], ...]
    output_shapes: Tuple[Tuple[int, ...], ...]
    cycles: Tuple[int, int, int]
    time_us: float
    mac_usage: Optional[Tuple[float, ...]]
    workload: Tuple[float, float, float]
    rw_bytes: int
    full_name: str
    sparsity: Optional[str] = None

    @property
    def rw_kb(self) -> float:
        """``rw_bytes`` in KB (1024 bytes)."""
        return self.rw_bytes / 1024.0

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field (shapes as lists)."""
        d = asdict(self)
        d["input_shapes"] = [list(s) for s in self.input_shapes]
        d["output_shapes"] = [list(s) for s in self.output_shapes]
        return d


@dataclass(frozen=True)
class PerfDetail:
    """The per-operator profile of one run (``RKNN_QUERY_PERF_DETAIL``).

    ``records`` are :class:`OpPerf` rows in execution order; :meth:`text` (also ``str()``)
    renders the vendor's table.  Totals are sums over the rows.
    """

    records: Tuple[OpPerf, ...]

    @property
    def total_time_us(self) -> float:
        """Sum of the operators' times (µs): the table's "Total Operator Elapsed" line."""
        return sum(r.time_us for r in self.records)

    @property
    def total_rw_kb(self) -> float:
        """Sum of the operators' memory traffic (KB)."""
        return sum(r.rw_bytes for r in self.records) / 1024.0

    def ranking(self) -> List[dict]:
        """Per op type: ``{"op_type", "calls", "cpu_us", "gpu_us", "npu_us", "total_us", "ratio"}``,
        slowest first (the table's "Operator Time Consuming Ranking")."""
        by_type: Dict[str, dict] = {}
        for r in self.records:
            row = by_type.setdefault(r.op_type, {"op_type": r.op_type, "calls": 0, "cpu_us": 0.0, "gpu_us": 0.0,
                                                 "npu_us": 0.0, "total_us": 0.0})
            row["calls"] += 1
            row[{"CPU": "cpu_us", "GPU": "gpu_us"}.get(r.target, "npu_us")] += r.time_us
            row["total_us"] += r.time_us
        total = self.total_time_us
        rows = sorted(by_type.values(), key=lambda row: -row["total_us"])
        for row in rows:
            row["ratio"] = 100.0 * row["total_us"] / total if total > 0 else 0.0
        return rows

    def with_sparsity(self, ratios: Dict[str, str]) -> "PerfDetail":
        """A copy whose rows named in ``ratios`` (``full_name`` -> SparseRation text, e.g.
        ``{"Conv:c1": "50% (IC)"}``) carry it in :attr:`OpPerf.sparsity`; the table then
        shows ``Conv:c1 [sparse 50% (IC)]``.  Other rows are unchanged."""
        from dataclasses import replace

        return PerfDetail(tuple(replace(r, sparsity=ratios[r.full_name]) if r.full_name in ratios else r
                                for r in self.records))

    def text(self) -> str:
        """The vendor's fixed-width text table (see the module docstring)."""
        return format_perf_detail(self.records, self.ranking())

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class MemSize:
    """``rknn_mem_size``: memory a context uses, in bytes.

    Attributes:
        total_weight_size: the model's weights (constants as stored in the file).
        total_internal_size: activation memory of the context: its planned intermediate
            buffers (the software NPU plans them on the first run with each input shape,
            so this is 0 before the first run).
        total_dma_allocated_size: everything the context allocated for the device:
            weights, internal buffers and I/O staging buffers.
        total_sram_size, free_sram_size: on-chip SRAM (none on the software NPU: 0).
    """

    total_weight_size: int
    total_internal_size: int
    total_dma_allocated_size: int
    total_sram_size: int = 0
    free_sram_size: int = 0

    def to_dict(self) -> dict:
        """The fields as a dict."""
        return asdict(self)


def format_shapes(shapes: Sequence[Tuple[int, ...]], width: int) -> str:
    """``(1,3,8,8),(8,3,3,3)`` as the vendor prints it, cut to ``...`` to fit ``width``;
    ``\\`` when there are none."""
    if not shapes:
        return "\\"
    parts = ["(" + ",".join(str(d) for d in s) + ")" for s in shapes]
    text = ",".join(parts)
    if len(text) < width:
        return text
    kept: List[str] = []
    for p in parts:
        if len(",".join(kept + [p])) + 4 >= width:
            break
        kept.append(p)
    return ",".join(kept + ["..."])


def _row(cells: Sequence[str], columns) -> str:
    out = []
    for text, (_, width) in zip(cells, columns):
        out.append(text.ljust(width - 1) + " " if width else text)
    return "".join(out)


def _workload(w: Sequence[float]) -> str:
    return "/".join(f"{100.0 * x:.1f}%" for x in w)


def _kb(value: float) -> str:
    return str(int(round(value))) if abs(value - round(value)) < 0.005 else f"{value:.2f}"


def format_perf_detail(records: Sequence[OpPerf], ranking: Sequence[dict]) -> str:
    """Render rows and the per-type ranking in librknnrt's perf_detail text layout."""
    lines = [_WIDE_RULE, "Network Layer Information Table".center(220).rstrip(), _WIDE_RULE,
             _row([name for name, _ in _COLUMNS], _COLUMNS), _WIDE_RULE]
    for r in records:
        mac = "\\" if r.mac_usage is None else "/".join(f"{m:.2f}" for m in r.mac_usage)
        lines.append(_row([
            str(r.id), r.op_type, r.data_type, r.target, format_shapes(r.input_shapes, 41),
            format_shapes(r.output_shapes, 23), "/".join(str(c) for c in r.cycles), str(int(round(r.time_us))),
            mac, _workload(r.workload), str(int(round(r.rw_kb))),
            r.full_name if r.sparsity is None else f"{r.full_name} [sparse {r.sparsity}]",
        ], _COLUMNS))
    total_time = sum(r.time_us for r in records)
    lines += [
        _WIDE_RULE,
        f"Total Operator Elapsed Per Frame Time(us): {int(round(total_time))}",
        f"Total Memory Read/Write Per Frame Size(KB): {_kb(sum(r.rw_bytes for r in records) / 1024.0)}",
        _WIDE_RULE,
        _RANKING_RULE,
        "Operator Time Consuming Ranking Table".center(99).rstrip(),
        _RANKING_RULE,
        _row([name for name, _ in _RANKING], _RANKING),
        _RANKING_RULE,
    ]
    sums = [0.0, 0.0, 0.0, 0.0]
    for row in ranking:
        times = [row["cpu_us"], row["gpu_us"], row["npu_us"], row["total_us"]]
        sums = [a + b for a, b in zip(sums, times)]
        lines.append(_row([row["op_type"], str(row["calls"])] + [str(int(round(t))) for t in times]
                          + [f"{row['ratio']:.2f}%"], _RANKING))
    lines += [_RANKING_RULE,
              _row(["Total", ""] + [str(int(round(t))) for t in sums] + [""], _RANKING).rstrip(),
              _RANKING_RULE]
    return "\n".join(lines) + "\n"
