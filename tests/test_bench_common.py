"""tools/bench/common.py: the benchmark harness's shared pieces (timings are never asserted)."""

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "bench"))

from common import ort_one_node  # noqa: E402


def test_a_one_node_run_keeps_its_bound_output_alive():
    pytest.importorskip("onnxruntime")
    x = np.arange(-8, 8, dtype=np.float32).reshape(1, 1, 4, 4)
    run, out = ort_one_node("Relu", x, {})
    del out  # onnxruntime writes into the bound buffer: the run must keep it alive
    gc.collect()
    for _ in range(3):
        y = run()
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_every_benchmark_prints_the_machine_line_with_its_tables():
    """Each script names the CPU model, caches and SIMD path its numbers come from (machine())."""
    from common import machine

    line = machine()
    assert line.startswith("CPU: ") and "caches" in line and "conv kernels" in line
    bench = Path(__file__).resolve().parent.parent / "tools" / "bench"
    scripts = sorted(bench.glob("bench_*.py"))
    assert len(scripts) >= 10
    missing = [p.name for p in scripts if "print(machine())" not in p.read_text()]
    assert not missing, f"these benchmarks print tables without the machine line: {missing}"
