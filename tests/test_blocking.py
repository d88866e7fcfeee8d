"""The conv kernels' blocking sizes come from the host's caches (rknnlite/backends/software/blocking.py):
the rules, and that a process takes them from RKNNLITE_CPU_CACHES without any output changing."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rknnlite.backends.software.blocking import Blocking, derive_blocking, macs_per_cycle
from rknnlite.backends.software.host_cpu import CpuCaches

K, M = 1 << 10, 1 << 20


def test_the_tuning_cpus_get_the_sizes_the_rules_give():
    # AMD EPYC (Zen 4): 32 KiB L1d, 1 MiB L2, 32 MiB L3, AVX-512, where the fractions were tuned
    # (its K block and panel order now follow the L1d rules measured on the Xeon below)
    assert derive_blocking(CpuCaches(32 * K, M, 32 * M, "sysfs"), 2, "x86_64") == Blocking(
        b_block_floats=96 * K, max_kc=128, a_block_bytes=16 * K, direct_b_bytes=32 * K, wino_v_cache=512 * K,
        wino_v_band=256 * K, wino_u_cache=4 * M, column_split_weights_bytes=512 * K, parallel_min_macs=1 << 21,
        winograd_phases_min_macs=6 << 22)
    # Sapphire Rapids Xeon: 48 KiB L1d, 2 MiB L2, where the K block and panel order were measured
    xeon = derive_blocking(CpuCaches(48 * K, 2 * M, 480 * M, "sysfs"), 2, "x86_64")
    assert (xeon.max_kc, xeon.a_block_bytes) == (256, 24 * K)


@pytest.mark.parametrize("l1d", [32 * K, 48 * K])
def test_b_panels_are_read_unpacked_only_while_the_weights_fit_l1d(l1d):
    from rknnlite.backends.software.ops import conv

    assert derive_blocking(CpuCaches(l1d, M, 32 * M, "sysfs"), 2).direct_b_bytes == l1d
    x = np.zeros((1, 64, 8, 8), np.float32)
    limit = conv.BLOCKING.direct_b_bytes
    for m, expected in ((limit // (64 * 4), True), (limit // (64 * 4) + 1, False)):
        plan = conv._conv_prepare({"kernel_shape": [1, 1], "_opset": 17}, [None, np.zeros((m, 64, 1, 1), np.float32),
                                                                           None])["_conv"]
        assert conv._geometry(plan, x.shape, (m, 64, 1, 1)).direct_b is expected


def test_cache_sizes_scale_with_l2():
    small = derive_blocking(CpuCaches(32 * K, 512 * K, 32 * M, "sysfs"), 2)
    big = derive_blocking(CpuCaches(32 * K, 2 * M, 300 * M, "sysfs"), 2)   # a Xeon's 2 MiB L2
    assert big.b_block_floats == 4 * small.b_block_floats
    for name in ("wino_v_cache", "wino_v_band", "wino_u_cache", "column_split_weights_bytes"):
        assert getattr(big, name) == 4 * getattr(small, name), name
    assert big.a_block_bytes == small.a_block_bytes


@pytest.mark.parametrize("l1d", [16 * K, 32 * K, 48 * K, 64 * K])
def test_only_weights_that_fit_half_of_l1d_are_swept_b_panel_by_b_panel(l1d):
    assert derive_blocking(CpuCaches(l1d, M, 0, "sysfs"), 2).a_block_bytes == l1d // 2


@pytest.mark.parametrize("machine, level, l1d, kc", [
    # AVX-512: A panel 8 + B panel 32 floats per k (transposed tiles 32 + 7 fit the same)
    ("x86_64", 2, 16 * K, 128), ("x86_64", 2, 32 * K, 128), ("x86_64", 2, 48 * K, 256), ("x86_64", 2, 64 * K, 256),
    ("x86_64", 2, 128 * K, 512), ("x86_64", 2, 1 * K, 128),
    # AVX2: 6 + 16 floats per k
    ("x86_64", 1, 32 * K, 256), ("x86_64", 1, 48 * K, 512),
    # NEON: 8 + 12 floats per k
    ("aarch64", 1, 32 * K, 256), ("aarch64", 1, 64 * K, 512)])
def test_k_block_is_the_largest_power_of_two_whose_tile_panels_fit_l1d(machine, level, l1d, kc):
    assert derive_blocking(CpuCaches(l1d, M, 0, "sysfs"), level, machine).max_kc == kc


def test_transformed_weights_bound_by_half_the_last_level():
    assert derive_blocking(CpuCaches(32 * K, M, 3 * M, "sysfs"), 2).wino_u_cache == M + M // 2
    assert derive_blocking(CpuCaches(32 * K, M, 0, "sysfs"), 2).wino_u_cache == 4 * M   # no L3
    assert derive_blocking(CpuCaches(32 * K, M, 1 * M, "sysfs"), 2).wino_u_cache == M   # never below L2


def test_tiny_caches_still_give_workable_blocks():
    b = derive_blocking(CpuCaches(1, 1, 0, "RKNNLITE_CPU_CACHES"), 0)
    assert b.b_block_floats >= 16 * K and b.max_kc >= 128
    assert min(b.a_block_bytes, b.wino_v_cache, b.wino_v_band, b.wino_u_cache) > 0


def test_split_threshold_follows_the_paths_rate():
    rates = [macs_per_cycle(level, "x86_64") for level in (0, 1, 2)]
    assert rates == sorted(rates) and rates[2] == 2 * rates[1]
    caches = CpuCaches(32 * K, M, 0, "sysfs")
    assert [derive_blocking(caches, level, "x86_64").parallel_min_macs for level in (0, 1, 2)] == [1 << 19, 1 << 20, 1 << 21]
    # NEON: two 128-bit FMA pipes (Cortex-A76), the rate of the generic path
    assert [macs_per_cycle(level, "aarch64") for level in (0, 1)] == [8, 8]
    assert derive_blocking(caches, 1, "aarch64").parallel_min_macs == 1 << 19


SHAPE = (1, 48, 96, 96)
PROBE = """
import json, sys
import numpy as np
import rknnlite
from rknnlite.backends.software.ops import conv
x = np.random.default_rng(3).standard_normal((1, 48, 96, 96)).astype(np.float32)
with rknnlite.Context(sys.argv[1]) as ctx:
    y = ctx.run([x], data_format="nchw")[0]
bands = conv._winograd_bands(4, 12, 12, 16, 96, conv._WINO_BAND_MIN_TILES, conv._WINO_V_CACHE)
print(json.dumps({"block": conv._BLOCK_FLOATS, "kc": conv._MAX_KC, "bands": 0 if bands is None else len(bands),
                  "panel_major": 96 * conv._MAX_KC * 4 > conv.BLOCKING.a_block_bytes,
                  "y": y.ravel().view(np.uint32).tolist()}))
"""


@pytest.fixture(scope="module")
def conv_stack_path(portable_model, tmp_path_factory):
    """Conv 3x3 stride 2 (gather GEMM, K = 432, 96 weight rows), a 1x1 Conv (K = 96) and a
    Winograd Conv 3x3 (16 -> 96 channels on 12 x 12 tiles): every blocked kernel of the
    float path."""
    from rknnlite.model.graph import Node
    from rknnlite.model.spec import TensorSpec

    rng = np.random.default_rng(0)
    consts = {"w0": (rng.standard_normal((96, 48, 3, 3)) * 0.1).astype(np.float32),
              "w1": (rng.standard_normal((16, 96, 1, 1)) * 0.1).astype(np.float32),
              "w2": (rng.standard_normal((96, 16, 3, 3)) * 0.2).astype(np.float32),
              "b0": rng.standard_normal(96).astype(np.float32), "b1": rng.standard_normal(16).astype(np.float32),
              "b2": rng.standard_normal(96).astype(np.float32)}
    nodes = [Node("Conv", "c0", ["x", "w0", "b0"], ["a"], {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
             Node("Relu", "r0", ["a"], ["ar"]),
             Node("Conv", "c1", ["ar", "w1", "b1"], ["c"]),
             Node("Conv", "c2", ["c", "w2", "b2"], ["y"], {"pads": [1, 1, 1, 1]})]
    data = portable_model(nodes, [TensorSpec("x", SHAPE, "float32", "NCHW")],
                          [TensorSpec("y", (1, 96, 48, 48), "float32", "NCHW")], consts)
    path = tmp_path_factory.mktemp("blocking") / "convs.rknn"
    path.write_bytes(data)
    return path


def _probe(json_probe, path, caches=None, threads=1):
    env = dict(os.environ, RKNNLITE_NUM_THREADS=str(threads))
    env.pop("RKNNLITE_CPU_CACHES", None)
    if caches is not None:
        env["RKNNLITE_CPU_CACHES"] = caches
    return json_probe(PROBE, path, env=env)


@pytest.mark.parametrize("threads", [1, 2])
def test_blocking_from_other_caches_changes_no_output_bit(conv_stack_path, threads, json_probe):
    native = _probe(json_probe, conv_stack_path, threads=threads)
    # K blocks of 128 and weight-panel-major sweeps (A blocks past 4 KiB)
    tiny = _probe(json_probe, conv_stack_path, "l1d=8K,l2=64K,l3=256K", threads=threads)
    # the Winograd layer in bands (its transformed input passes 128 KiB, its weights fit 1 MiB)
    banded = _probe(json_probe, conv_stack_path, "l2=256K,l3=64M", threads=threads)
    # K blocks of 4096 (every K in one block), one pass everywhere, B-panel sweeps
    huge = _probe(json_probe, conv_stack_path, "l1d=4M,l2=8M,l3=512M", threads=threads)
    assert (tiny["kc"], tiny["block"], tiny["panel_major"]) == (128, 16 * K, True)
    assert (banded["bands"], huge["bands"]) == (2, 0)
    assert (huge["kc"], huge["block"], huge["panel_major"]) == (4096, 3 * 8 * M // 8 // 4, False)
    assert native["y"] == tiny["y"] == banded["y"] == huge["y"]
