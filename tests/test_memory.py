"""Memory: peak RSS of a resnet50 inference, and no growth over many runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MB = 1 << 20


@pytest.fixture(scope="module")
def resnet50_rknn(tmp_path_factory):
    onnx = pytest.importorskip("onnx")
    from rknnlite.toolkit import RKNN

    src = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    out = tmp_path_factory.mktemp("mem") / "resnet50.rknn"
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0 and rknn.load_onnx(str(src)) == 0
    assert rknn.build(do_quantization=False) == 0 and rknn.export_rknn(str(out)) == 0
    rknn.release()
    return out


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np, psutil
    import rknnlite
    from rknnlite.model.loader import load_model

    proc = psutil.Process()
    base = proc.memory_info().rss
    loaded = load_model(sys.argv[1])
    weights = len(loaded.model.container.weights)
    ctx = rknnlite.Context(loaded)
    x = np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype(np.float32)  # NHWC, as the input says
    for _ in range(3):
        ctx.run([x])
    after_warmup = proc.memory_info().rss
    for _ in range(int(sys.argv[2])):
        ctx.run([x])
    end = proc.memory_info().rss
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's at fork
    peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    live = ctx._backend._state.peak_live_bytes
    print(json.dumps(dict(base=base, peak=peak, weights=weights, live=live, warm=after_warmup, end=end)))
    """
)


def measure(path: Path, runs: int) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(path), str(runs)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
def test_resnet50_peak_rss_is_weights_plus_activations(resnet50_rknn):
    m = measure(resnet50_rknn, 2)
    budget = m["weights"] + 2 * m["live"] + 50 * MB
    used = m["peak"] - m["base"]
    assert m["weights"] > 90 * MB and m["live"] > 1 * MB
    assert used <= budget, f"peak {used / MB:.0f} MB > weights {m['weights'] / MB:.0f} MB + 2 x live " \
                           f"{m['live'] / MB:.1f} MB + 50 MB"


@pytest.mark.slow
def test_no_memory_growth_over_many_runs(resnet50_rknn):
    m = measure(resnet50_rknn, 60)
    assert m["end"] - m["warm"] < 2 * MB, f"RSS grew by {(m['end'] - m['warm']) / MB:.1f} MB over 60 runs"
