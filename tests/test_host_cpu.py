"""The host CPU's caches and model as the conv kernels' blocking reads them
(rknnlite/backends/software/host_cpu.py), on fake sysfs trees and /proc/cpuinfo texts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rknnlite import InvalidParamError
from rknnlite.backends.software.host_cpu import DEFAULT_CACHES, CpuCaches, cpu_model, detect_caches, parse_size

K, M = 1 << 10, 1 << 20


def _cache(root: Path, cpu: int, index: int, level: int, kind: str, size: str, shared: str = None) -> None:
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")
    (d / "shared_cpu_list").write_text(f"{shared if shared is not None else cpu}\n")


def _core(root: Path, cpu: int, l1d: str, l2: str, l3: str = None, l2_shared: str = None, l3_shared: str = None):
    _cache(root, cpu, 0, 1, "Data", l1d)
    _cache(root, cpu, 1, 1, "Instruction", "64K")  # never counted
    _cache(root, cpu, 2, 2, "Unified", l2, l2_shared)
    if l3:
        _cache(root, cpu, 3, 3, "Unified", l3, l3_shared)


@pytest.mark.parametrize("text, size", [("48K", 48 * K), ("1024K\n", M), ("2M", 2 * M), ("32768", 32768),
                                        ("1G", 1 << 30), ("512KiB", 512 * K), (" 8 k ", 8 * K)])
def test_sizes_read_as_sysfs_writes_them(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "K", "1.5M", "-4K", "12 T", "lots"])
def test_malformed_sizes_are_refused(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_a_private_cache_per_core(tmp_path):
    for cpu in (0, 1):
        _core(tmp_path, cpu, "48K", "1024K", "32768K", l3_shared="0-1")
    assert detect_caches({}, sysfs=str(tmp_path), cpus=[0, 1]) == CpuCaches(48 * K, M, 32 * M, "sysfs")


def test_shared_l2_counts_as_its_share_and_the_last_level_whole(tmp_path):
    # a cluster of four cores sharing one 2 MiB L2 (Intel E-cores, Cortex-A53 clusters)
    for cpu in range(4):
        _core(tmp_path, cpu, "32K", "2048K", "8192K", l2_shared="0-3", l3_shared="0-3")
    caches = detect_caches({}, sysfs=str(tmp_path), cpus=range(4))
    assert (caches.l2, caches.l3) == (512 * K, 8 * M)


def test_big_little_takes_the_smallest_of_the_usable_cpus(tmp_path):
    # RK3588-like: four Cortex-A55 (32K L1d, 128K L2), four Cortex-A76 (64K, 512K), 3 MiB L3
    for cpu in range(4):
        _core(tmp_path, cpu, "32K", "128K", "3072K", l3_shared="0-7")
    for cpu in range(4, 8):
        _core(tmp_path, cpu, "64K", "512K", "3072K", l3_shared="0-7")
    assert detect_caches({}, sysfs=str(tmp_path), cpus=range(8)) == CpuCaches(32 * K, 128 * K, 3 * M, "sysfs")
    # a process pinned to the big cores gets theirs
    assert detect_caches({}, sysfs=str(tmp_path), cpus=range(4, 8)) == CpuCaches(64 * K, 512 * K, 3 * M, "sysfs")


def test_levels_sysfs_lacks_take_the_defaults(tmp_path):
    _cache(tmp_path, 0, 0, 1, "Data", "64K")
    (tmp_path / "cpu0" / "cache" / "index9").mkdir()  # unreadable entry: skipped
    caches = detect_caches({}, sysfs=str(tmp_path), cpus=[0], use_sysconf=False)
    assert caches == CpuCaches(64 * K, DEFAULT_CACHES.l2, DEFAULT_CACHES.l3, "sysfs")


def test_no_sysfs_falls_back_to_sysconf_then_defaults(tmp_path):
    caches = detect_caches({}, sysfs=str(tmp_path / "missing"), cpus=[0])
    assert caches.source in ("sysconf", "default")
    assert caches.l1d > 0 and caches.l2 > 0
    assert detect_caches({}, sysfs=str(tmp_path / "missing"), cpus=[0], use_sysconf=False) == DEFAULT_CACHES


def test_this_machine_reports_positive_sizes():
    caches = detect_caches({})
    assert caches.l1d >= 4 * K and caches.l2 >= caches.l1d
    assert caches.source in ("sysfs", "sysconf", "default")


def test_the_variable_overrides_the_levels_it_names(tmp_path):
    _core(tmp_path, 0, "48K", "1024K", "32768K")
    caches = detect_caches({"RKNNLITE_CPU_CACHES": "l2=2M, L1D=32768"}, sysfs=str(tmp_path), cpus=[0])
    assert caches == CpuCaches(32 * K, 2 * M, 32 * M, "sysfs+RKNNLITE_CPU_CACHES")
    assert detect_caches({"RKNNLITE_CPU_CACHES": "l3=0"}, sysfs=str(tmp_path), cpus=[0]).l3 == 0
    assert detect_caches({"RKNNLITE_CPU_CACHES": "  "}, sysfs=str(tmp_path), cpus=[0]).source == "sysfs"


@pytest.mark.parametrize("value, bad", [("l2", "'l2'"), ("l4=1M", "'l4=1M'"), ("l2=big", "'l2=big'"),
                                        ("l1d=0", "'l1d=0'"), ("l2=1M,l3", "'l3'")])
def test_a_malformed_variable_is_refused_by_name(tmp_path, value, bad):
    with pytest.raises(InvalidParamError) as info:
        detect_caches({"RKNNLITE_CPU_CACHES": value}, sysfs=str(tmp_path), cpus=[0])
    text = str(info.value)
    assert f"RKNNLITE_CPU_CACHES={value!r}" in text and bad in text
    assert "l1d, l2, l3" in text and "l1d=48K,l2=2M,l3=32M" in text


def test_describe_names_sizes_and_source():
    assert CpuCaches(48 * K, M, 32 * M, "sysfs").describe() == "L1d 48K, L2 1024K, L3 32768K (sysfs)"
    assert CpuCaches(32 * K, 512 * K, 0, "default").describe() == "L1d 32K, L2 512K (default)"


@pytest.mark.parametrize("text, model", [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R45\nflags\t\t: fpu\n", "AMD EPYC 9R45"),
    ("processor\t: 0\nBogoMIPS\t: 48.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0b\n\nHardware\t: Rockchip RK3588\n",
     "Rockchip RK3588")])
def test_cpu_model_from_cpuinfo(tmp_path, text, model):
    (tmp_path / "cpuinfo").write_text(text)
    assert cpu_model(str(tmp_path / "cpuinfo")) == model


def test_cpu_model_of_an_aarch64_kernel_without_hardware_line(tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd05\n")
    assert "implementer 0x41 part 0xd05" in cpu_model(str(tmp_path / "cpuinfo"))
    assert cpu_model(str(tmp_path / "missing"))  # never empty
