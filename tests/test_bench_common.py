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
