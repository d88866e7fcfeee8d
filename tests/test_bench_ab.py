"""tools/bench/bench_ab.py: two checkouts timed in alternation (the timings are never asserted)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "bench"))

import bench_ab  # noqa: E402


def test_a_checkout_that_does_not_hold_the_imported_rknnlite_is_refused(tmp_path):
    # tmp_path has no rknnlite: the worker would import another tree's and time that one
    with pytest.raises(SystemExit, match="did not start"):
        bench_ab._start(str(tmp_path), "unused.rknn", "unused.npy", 1)


def test_one_checkout_against_itself_prints_both_rows_and_the_ratio():
    pytest.importorskip("threadpoolctl")
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "bench" / "bench_ab.py"), str(ROOT), str(ROOT),
                          "--model", "squeezenet", "--runs", "2"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("CPU: ")
    rows = [line for line in lines if line.startswith(f"| {ROOT} |")]
    assert len(rows) == 2 and any(line.startswith("| after / before |") for line in lines)
