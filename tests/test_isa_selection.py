"""RKNNLITE_ISA: the conv micro-kernel path and the pooling passes' SIMD level a process uses
(rknnlite/backends/software/isa.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rknnlite import InvalidParamError
from rknnlite._native import conv_kernels as ck
from rknnlite.backends.software.isa import ISA_LEVELS, isa_levels, requested_isa

#: the CPU's own best level (tests that lower it restore it)
CPU = ck.gemm_isa()

PROBE = """
import json, sys
import numpy as np
import rknnlite
from rknnlite._native import conv_kernels as ck
from rknnlite._native import pool_kernels as pk
x = np.random.default_rng(1).standard_normal((1, 8, 16, 16)).astype(np.float32)
try:
    with rknnlite.Context(sys.argv[1]) as ctx:
        y = ctx.run([x], data_format="nchw")[0]
except rknnlite.InvalidParamError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"level": ck.gemm_isa(), "pool_level": pk.isa_level(), "y": y.ravel().tolist()}))
"""


@pytest.mark.parametrize("machine, value, cpu, level", [
    ("x86_64", None, 2, 2), ("x86_64", "", 1, 1), ("x86_64", "  ", 0, 0), ("x86_64", "avx2", 2, 1),
    ("x86_64", "AVX2", 1, 1), ("x86_64", "generic", 2, 0), ("x86_64", "avx512", 2, 2), ("x86_64", "generic", 0, 0),
    ("aarch64", None, 1, 1), ("aarch64", "neon", 1, 1), ("aarch64", "NEON ", 1, 1), ("aarch64", "generic", 1, 0)])
def test_requested_level(machine, value, cpu, level):
    env = {} if value is None else {"RKNNLITE_ISA": value}
    assert requested_isa(cpu, env, isa_levels(machine)) == level


@pytest.mark.parametrize("machine, value, cpu, words", [
    ("x86_64", "neon", 2, ["'neon'", "is an arm path", "avx512, avx2, generic"]),
    ("x86_64", "sse4", 1, ["'sse4'", "avx512, avx2, generic"]),
    ("x86_64", "avx512", 1, ["'avx512'", "cannot execute", "'avx2'"]),
    ("x86_64", "avx2", 0, ["'avx2'", "cannot execute", "'generic'"]),
    ("aarch64", "avx2", 1, ["'avx2'", "is an x86 path", "neon, generic"]),
    ("aarch64", "neon", 0, ["'neon'", "cannot execute", "'generic'"]),
    ("riscv64", "neon", 0, ["'neon'", "is an arm path", "expected one of generic"])])
def test_unknown_or_unavailable_paths_are_refused(machine, value, cpu, words):
    with pytest.raises(InvalidParamError) as info:
        requested_isa(cpu, {"RKNNLITE_ISA": value}, isa_levels(machine))
    for word in words:
        assert word in str(info.value)


def test_this_machines_paths_are_the_ones_its_kernels_were_built_with():
    assert max(ISA_LEVELS.values()) >= CPU and ISA_LEVELS["generic"] == 0


def _probe(json_probe, model_path, value):
    return json_probe(PROBE, model_path, env=dict(os.environ, RKNNLITE_ISA=value))


@pytest.fixture(scope="module")
def model_path(conv_relu_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("isa") / "conv.rknn"
    path.write_bytes(conv_relu_model())
    return path


def test_each_path_this_cpu_executes_runs_a_model_to_the_same_result(model_path, json_probe):
    results = {name: _probe(json_probe, model_path, name) for name, level in ISA_LEVELS.items() if level <= CPU}
    for name, result in results.items():
        assert result["level"] == result["pool_level"] == ISA_LEVELS[name]
    reference = np.array(results["generic"]["y"], np.float32)
    for result in results.values():
        np.testing.assert_allclose(np.array(result["y"], np.float32), reference, rtol=1e-5, atol=1e-5)


def test_a_bad_value_fails_the_context_by_name(model_path, json_probe):
    result = _probe(json_probe, model_path, "sse4")
    assert "RKNNLITE_ISA='sse4'" in result["error"]
