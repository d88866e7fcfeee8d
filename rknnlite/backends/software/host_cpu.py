"""The host CPU as the software backend's kernels see it: its model name and cache sizes.

The caches are read from Linux sysfs (``/sys/devices/system/cpu/cpuN/cache/index*``) for the
CPUs this process may run on (``os.sched_getaffinity``).  Each level is the smallest among
those CPUs, since a kernel's thread may run on any of them (on RK3588 a Cortex-A55 has a
quarter of a Cortex-A76's L2), and a cache shared by several CPUs counts as its share per
CPU (L1d and L2), except the last level, which is given whole.  Where sysfs lists no caches
(many aarch64 kernels, some containers) glibc's ``os.sysconf("SC_LEVEL*_CACHE_SIZE")`` is
asked, and where that knows nothing either, :data:`DEFAULT_CACHES`.

``RKNNLITE_CPU_CACHES`` overrides what was detected, level by level, e.g.
``RKNNLITE_CPU_CACHES=l1d=48K,l2=2M,l3=32M``: sizes in bytes or with a ``K``, ``M`` or ``G``
(binary) suffix; levels it leaves out keep the detected size.  A malformed value is refused
with :class:`~rknnlite.errors.InvalidParamError` naming it: a typo must not quietly leave
the detected sizes in place.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Mapping, Optional

from ...errors import InvalidParamError
from ...tensors.topology import usable_cpu_ids

__all__ = ["CpuCaches", "DEFAULT_CACHES", "cpu_model", "detect_caches", "parse_size"]

_SYSFS_CPUS = "/sys/devices/system/cpu"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_LEVELS = ("l1d", "l2", "l3")


@dataclass(frozen=True)
class CpuCaches:
    """Data cache sizes in bytes: ``l1d`` and ``l2`` per CPU (a shared cache's share),
    ``l3`` the whole last level (0 where there is none).  ``source`` says where they came
    from: ``"sysfs"``, ``"sysconf"``, ``"default"``, with ``"+RKNNLITE_CPU_CACHES"`` appended
    when the variable overrode a level."""

    l1d: int
    l2: int
    l3: int
    source: str

    def describe(self) -> str:
        """``"L1d 48K, L2 1024K, L3 32768K (sysfs)"``: sizes in KiB, for logs and bench headers."""
        parts = [f"{name} {size >> 10}K" for name, size in (("L1d", self.l1d), ("L2", self.l2), ("L3", self.l3))
                 if size]
        return f"{', '.join(parts)} ({self.source})"


#: Used where neither sysfs nor sysconf knows the caches: a common small core's (32 KiB L1d,
#: 512 KiB L2, no L3), so that blocking derived from them errs on the small side.
DEFAULT_CACHES = CpuCaches(l1d=32 << 10, l2=512 << 10, l3=0, source="default")


def parse_size(text: str) -> int:
    """Bytes in ``text``: a decimal integer with an optional ``K``/``M``/``G`` (binary)
    suffix, as sysfs writes cache sizes (``"48K"``) and ``RKNNLITE_CPU_CACHES`` takes them.
    Raises ``ValueError`` for anything else."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not a size")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _cpu_list(text: str) -> set:
    """CPU numbers of a sysfs list such as ``"0-3,8"``."""
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _from_sysfs(root: Path, cpus: list) -> dict:
    """``{"l1d": bytes, ...}`` from sysfs, smallest per level over ``cpus`` (levels sysfs
    does not list are absent)."""
    found: dict = {}
    for cpu in cpus:
        per_cpu = {}
        for index in (root / f"cpu{cpu}" / "cache").glob("index*"):
            try:
                level = int((index / "level").read_text())
                kind = (index / "type").read_text().strip()
                size = parse_size((index / "size").read_text())
                try:
                    sharers = max(1, len(_cpu_list((index / "shared_cpu_list").read_text())))
                except OSError:
                    sharers = 1
            except (OSError, ValueError):
                continue
            if kind == "Instruction" or not 1 <= level <= 3 or size <= 0:
                continue
            name = _LEVELS[level - 1]
            per_cpu[name] = size if name == "l3" else size // sharers
        for name, size in per_cpu.items():
            found[name] = min(found.get(name, size), size)
    return found


def _from_sysconf() -> dict:
    found = {}
    for name, key in (("l1d", "SC_LEVEL1_DCACHE_SIZE"), ("l2", "SC_LEVEL2_CACHE_SIZE"),
                      ("l3", "SC_LEVEL3_CACHE_SIZE")):
        try:
            size = os.sysconf(key)
        except (ValueError, OSError, AttributeError):
            continue
        if size and size > 0:
            found[name] = int(size)
    return found


def _override(caches: CpuCaches, raw: str) -> CpuCaches:
    sizes = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        try:
            if not sep or name not in _LEVELS:
                raise ValueError(item)
            sizes[name] = parse_size(value)
            if sizes[name] <= 0 and name != "l3":
                raise ValueError(item)
        except ValueError:
            raise InvalidParamError(
                f"RKNNLITE_CPU_CACHES={raw!r}: cannot read {item!r}; expected comma-separated "
                f"LEVEL=SIZE with LEVEL one of {', '.join(_LEVELS)} and SIZE in bytes or with a K, M "
                f"or G suffix (e.g. l1d=48K,l2=2M,l3=32M)") from None
    if not sizes:
        return caches
    return replace(caches, source=caches.source + "+RKNNLITE_CPU_CACHES", **sizes)


def detect_caches(environ: Optional[Mapping[str, str]] = None, *, sysfs: str = _SYSFS_CPUS,
                  cpus: Optional[Iterable[int]] = None, use_sysconf: bool = True) -> CpuCaches:
    """The data cache sizes of the CPUs this process may run on (see the module docstring
    for where they come from).  ``environ`` (default ``os.environ``) supplies
    ``RKNNLITE_CPU_CACHES``; ``sysfs``, ``cpus`` and ``use_sysconf`` exist for tests.  A
    level no source knows takes :data:`DEFAULT_CACHES`' size, and ``source`` names the
    first source that gave any level.

    Raises:
        InvalidParamError: ``RKNNLITE_CPU_CACHES`` is set and malformed.
    """
    env = os.environ if environ is None else environ
    usable = usable_cpu_ids() if cpus is None else sorted(cpus)
    sizes, source = _from_sysfs(Path(sysfs), usable), "sysfs"
    if not sizes and use_sysconf:
        sizes, source = _from_sysconf(), "sysconf"
    if not sizes:
        source = "default"
    caches = CpuCaches(l1d=sizes.get("l1d", DEFAULT_CACHES.l1d), l2=sizes.get("l2", DEFAULT_CACHES.l2),
                       l3=sizes.get("l3", DEFAULT_CACHES.l3), source=source)
    raw = env.get("RKNNLITE_CPU_CACHES", "").strip()
    return _override(caches, raw) if raw else caches


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name as ``/proc/cpuinfo`` gives it (x86 ``model name``, or an
    aarch64 kernel's ``Hardware`` / ``CPU implementer``+``CPU part``), else
    ``platform.processor()`` or the machine type."""
    try:
        lines = Path(cpuinfo).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    fields = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    if fields.get("model name"):
        return fields["model name"]
    if fields.get("hardware"):
        return fields["hardware"]
    if fields.get("cpu implementer") and fields.get("cpu part"):
        return f"{platform.machine()} implementer {fields['cpu implementer']} part {fields['cpu part']}"
    return platform.processor() or platform.machine() or "unknown"
