"""RKNNLITE_ISA: the conv micro-kernel path a process uses (rknnlite/backends/software/isa.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rknnlite import InvalidParamError
from rknnlite._native import conv_kernels as ck
from rknnlite.backends.software.isa import requested_isa

#: the CPU's own best level (tests that lower it restore it)
CPU = ck.gemm_isa()

PROBE = """
import json, sys
import numpy as np
import rknnlite
from rknnlite._native import conv_kernels as ck
x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
try:
    with rknnlite.Context(sys.argv[1]) as ctx:
        y = ctx.run([x], data_format="nchw")[0]
except rknnlite.InvalidParamError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"level": ck.gemm_isa(), "y": y.ravel().tolist()}))
"""


@pytest.mark.parametrize("value, cpu, level", [
    (None, 2, 2), ("", 1, 1), ("  ", 0, 0), ("avx2", 2, 1), ("AVX2", 1, 1), ("generic", 2, 0),
    ("avx512", 2, 2), ("generic", 0, 0)])
def test_requested_level(value, cpu, level):
    env = {} if value is None else {"RKNNLITE_ISA": value}
    assert requested_isa(cpu, env) == level


@pytest.mark.parametrize("value, cpu, words", [
    ("neon", 2, ["'neon'", "no NEON kernels", "avx512, avx2, generic"]),
    ("sse4", 1, ["'sse4'", "avx512, avx2, generic"]),
    ("avx512", 1, ["'avx512'", "cannot execute", "'avx2'"]),
    ("avx2", 0, ["'avx2'", "cannot execute", "'generic'"])])
def test_unknown_or_unavailable_paths_are_refused(value, cpu, words):
    with pytest.raises(InvalidParamError) as info:
        requested_isa(cpu, {"RKNNLITE_ISA": value})
    for word in words:
        assert word in str(info.value)


def _probe(json_probe, model_path, value):
    return json_probe(PROBE, model_path, env=dict(os.environ, RKNNLITE_ISA=value))


@pytest.fixture(scope="module")
def model_path(conv_relu_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("isa") / "conv.rknn"
    path.write_bytes(conv_relu_model())
    return path


def test_each_path_this_cpu_executes_runs_a_model_to_the_same_result(model_path, json_probe):
    results = {name: _probe(json_probe, model_path, name) for name, level in (("generic", 0), ("avx2", 1), ("avx512", 2))
               if level <= CPU}
    for name, result in results.items():
        assert result["level"] == {"generic": 0, "avx2": 1, "avx512": 2}[name]
    reference = np.array(results["generic"]["y"], np.float32)
    for result in results.values():
        np.testing.assert_allclose(np.array(result["y"], np.float32), reference, rtol=1e-5, atol=1e-5)


def test_a_bad_value_fails_the_context_by_name(model_path, json_probe):
    result = _probe(json_probe, model_path, "neon")
    assert "RKNNLITE_ISA='neon'" in result["error"]
