"""perf_detail (vendor table and records), perf_run and mem_size on the software backend."""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite import InitFlag, InvalidParamError, QueryCmd, RKNNError
from rknnlite.backends.software import executor as executor_module
from rknnlite.tensors.perf import MemSize, OpPerf, PerfDetail, format_shapes

COLUMNS = ["ID", "OpType", "DataType", "Target", "InputShape", "OutputShape", "Cycles(DDR/NPU/Total)", "Time(us)",
           "MacUsage(%)", "WorkLoad(0/1/2)", "RW(KB)", "FullName"]


def x_input(channels=8, size=16, seed=1):
    return np.random.default_rng(seed).standard_normal((1, channels, size, size)).astype(np.float32)


@pytest.fixture()
def perf_ctx(conv_relu_model):
    with rknnlite.Context(conv_relu_model(), flags=InitFlag.COLLECT_PERF_MASK) as ctx:
        yield ctx


def parse_table(text):
    """Split the per-op rows at the header's column positions (as vendor-table parsers do)."""
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("ID "))
    starts = [header.index(name) for name in COLUMNS]
    rows = []
    for line in lines[lines.index(header) + 2:]:
        if line.startswith("-"):
            break
        rows.append([line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])])
    return header, rows


def test_table_layout_and_rows(perf_ctx):
    perf_ctx.run([x_input()])
    text = perf_ctx.perf_detail()
    assert isinstance(text, str)
    header, rows = parse_table(text)
    assert [h for h in header.split()] == COLUMNS
    assert "Network Layer Information Table" in text and "Operator Time Consuming Ranking Table" in text
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    assert [r[1] for r in rows] == ["InputOperator", "Conv", "Relu", "OutputOperator"]
    assert [r[-1] for r in rows] == ["InputOperator:x", "Conv:conv0", "Relu:relu0", "OutputOperator:y"]
    conv = rows[1]
    assert conv[2:4] == ["FP32", "CPU"]
    assert conv[4] == "(1,8,16,16),(16,8,3,3),(16)" and conv[5] == "(1,16,16,16)"
    assert conv[6] == "0/0/0" and conv[8] == "\\" and conv[9] == "100.0%/0.0%/0.0%"
    assert rows[0][4] == "\\" and rows[0][5] == "(1,8,16,16)" and rows[0][9] == "0.0%/0.0%/0.0%"
    assert rows[3][4] == "(1,16,16,16)" and rows[3][5] == "\\"


def test_totals_match_the_records(perf_ctx):
    perf_ctx.run([x_input()])
    detail = perf_ctx.perf_detail(as_text=False)
    assert isinstance(detail, PerfDetail) and all(isinstance(r, OpPerf) for r in detail.records)
    assert str(detail) == detail.text() == perf_ctx.perf_detail()
    text = detail.text()
    total_us = int(text.split("Total Operator Elapsed Per Frame Time(us): ")[1].split()[0])
    assert total_us == int(round(sum(r.time_us for r in detail.records))) and total_us > 0
    total_kb = float(text.split("Total Memory Read/Write Per Frame Size(KB): ")[1].split()[0])
    assert total_kb == pytest.approx(sum(r.rw_bytes for r in detail.records) / 1024, abs=0.01)
    ranking = detail.ranking()
    assert {r["op_type"]: r["calls"] for r in ranking} == {"InputOperator": 1, "Conv": 1, "Relu": 1,
                                                           "OutputOperator": 1}
    assert [r["total_us"] for r in ranking] == sorted((r["total_us"] for r in ranking), reverse=True)
    assert sum(r["ratio"] for r in ranking) == pytest.approx(100.0)
    total_row = [line for line in text.splitlines() if line.startswith("Total ")][-1].split()
    assert int(total_row[1]) == int(round(sum(r["cpu_us"] for r in ranking))) and total_row[2:4] == ["0", "0"]


def test_rw_is_the_bytes_read_and_written(perf_ctx):
    perf_ctx.run([x_input()])
    records = {r.op_type: r for r in perf_ctx.perf_detail(as_text=False).records}
    act = 16 * 16 * 16 * 4
    assert records["Relu"].rw_bytes == 2 * act
    assert records["Conv"].rw_bytes == 8 * 16 * 16 * 4 + (16 * 8 * 9 + 16) * 4 + act
    assert records["Relu"].input_shapes == ((1, 16, 16, 16),)
    assert records["Conv"].cycles == (0, 0, 0) and records["Conv"].mac_usage is None


def test_float16_model_reports_fp16(conv_relu_model):
    with rknnlite.Context(conv_relu_model(float_dtype="float16"), flags=InitFlag.COLLECT_PERF_MASK) as ctx:
        ctx.run([x_input()])
        assert {r.data_type for r in ctx.perf_detail(as_text=False).records} == {"FP16"}


def test_each_run_replaces_the_profile(perf_ctx):
    perf_ctx.run([x_input()])
    first = perf_ctx.perf_detail(as_text=False)
    perf_ctx.run([x_input()])
    second = perf_ctx.perf_detail(as_text=False)
    assert first is not second and len(first.records) == len(second.records)


def test_without_the_flag(conv_relu_model):
    with rknnlite.Context(conv_relu_model()) as ctx:
        ctx.run([x_input()])
        with pytest.raises(InvalidParamError, match="COLLECT_PERF_MASK") as err:
            ctx.perf_detail()
        assert err.value.code == -5
        with pytest.raises(InvalidParamError, match="COLLECT_PERF_MASK"):
            ctx.query(QueryCmd.PERF_DETAIL)
        assert ctx.perf_run() > 0  # PERF_RUN needs no flag


def test_no_timing_calls_per_op_without_the_flag(conv_relu_model, monkeypatch):
    def forbidden():
        raise AssertionError("a run without COLLECT_PERF_MASK timed an operator")

    with rknnlite.Context(conv_relu_model()) as plain, \
            rknnlite.Context(conv_relu_model(), flags=InitFlag.COLLECT_PERF_MASK) as profiled:
        monkeypatch.setattr(executor_module, "perf_counter_ns", forbidden)
        plain.run([x_input()])
        assert plain._backend._state.last_profile is None
        with pytest.raises(AssertionError, match="timed an operator"):
            profiled.run([x_input()])


def test_before_any_run(perf_ctx):
    with pytest.raises(RKNNError, match="call run"):
        perf_ctx.perf_detail()
    with pytest.raises(RKNNError, match="call run"):
        perf_ctx.perf_run()


def test_perf_run_is_positive_microseconds(perf_ctx):
    perf_ctx.run([x_input()])
    us = perf_ctx.perf_run()
    assert isinstance(us, int) and us > 0
    assert perf_ctx.query(QueryCmd.PERF_RUN) == perf_ctx.perf_run()


def test_dup_keeps_profiling(perf_ctx):
    twin = perf_ctx.dup()
    twin.run([x_input()])
    assert len(twin.perf_detail(as_text=False).records) == 4
    twin.close()


def test_closed_context(conv_relu_model):
    ctx = rknnlite.Context(conv_relu_model(), flags=InitFlag.COLLECT_PERF_MASK)
    ctx.close()
    for call in (ctx.perf_detail, ctx.perf_run, ctx.mem_size):
        with pytest.raises(rknnlite.ContextInvalidError):
            call()


def test_mem_size(conv_relu_model):
    with rknnlite.Context(conv_relu_model()) as ctx:
        weights = (16 * 8 * 9 + 16) * 4
        before = ctx.mem_size()
        assert isinstance(before, MemSize)
        assert (before.total_weight_size, before.total_internal_size) == (weights, 0)
        assert before.total_sram_size == before.free_sram_size == 0
        ctx.run([x_input()])
        after = ctx.mem_size()
        state = ctx._backend._state
        assert after.total_internal_size == state.planned_bytes > 0
        assert after.total_dma_allocated_size == weights + state.planned_bytes + state.staging_bytes
        assert ctx.query(QueryCmd.MEM_SIZE) == after
        assert set(after.to_dict()) == {"total_weight_size", "total_internal_size", "total_dma_allocated_size",
                                        "total_sram_size", "free_sram_size"}


def test_format_shapes():
    assert format_shapes([], 41) == "\\"
    assert format_shapes([(1, 3, 8, 8), (8, 3, 3, 3)], 41) == "(1,3,8,8),(8,3,3,3)"
    long = format_shapes([(1, 16, 480, 480)] * 3, 41)
    assert long == "(1,16,480,480),(1,16,480,480),..." and len(long) < 41
    assert format_shapes([(1, 16, 480, 480)] * 2, 23) == "(1,16,480,480),..."


def test_io_rows_count_the_tensor_once(perf_ctx):
    perf_ctx.run([x_input()])
    records = perf_ctx.perf_detail(as_text=False).records
    assert (records[0].op_type, records[0].rw_bytes) == ("InputOperator", 8 * 16 * 16 * 4)
    assert (records[-1].op_type, records[-1].rw_bytes) == ("OutputOperator", 16 * 16 * 16 * 4)
    assert records[0].workload == records[-1].workload == (0.0, 0.0, 0.0)
