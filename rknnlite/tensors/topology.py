"""NPU topology: cores per platform and the rules for core masks and batch core counts.

The single source of truth for ``Context.set_core_mask``, ``Context.set_batch_core_num``
and ``RKNNLite.init_runtime(core_mask=...)``.  Facts (RKNN C API reference):

* NPU cores: RK3588 3, RK3576 2, every other platform 1.
* ``rknn_set_core_mask`` / ``rknn_set_batch_core_num`` work only on RK3588 and RK3576;
  elsewhere they fail.
* ``AUTO`` runs one inference on one (idle) core; ``CORE_n`` pins it to core n;
  ``CORE_0_1`` / ``CORE_0_1_2`` split one inference across those cores; ``ALL`` means
  every core of the platform (0_1_2 on RK3588, 0_1 on RK3576).
* RK3576 has no core 2: ``CORE_2`` and ``CORE_0_1_2`` cannot be set there (the C API
  rejects them; Lite2 remaps them to ``CORE_0`` / ``CORE_0_1`` with a warning).

The software backend emulates cores with worker threads: see
:func:`rknnlite.backends.software.parallel.threads_for_mask`.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from ..constants import CoreMask
from ..errors import InvalidParamError

__all__ = [
    "DEFAULT_PLATFORM",
    "CORE_COUNTS",
    "MULTI_CORE_PLATFORMS",
    "core_count",
    "supports_core_mask",
    "check_core_mask",
    "mask_cores",
    "lite2_remap",
    "check_batch_core_num",
    "usable_cpu_ids",
    "usable_cpus",
]

#: The platform whose rules (native layouts, cores) a model without target platforms follows.
DEFAULT_PLATFORM = "rk3588"

#: NPU cores of the multi-core platforms; every other platform has one.
CORE_COUNTS = {"rk3588": 3, "rk3576": 2}

#: Platforms where the core mask and the batch core count may be set.
MULTI_CORE_PLATFORMS = tuple(sorted(CORE_COUNTS))

_SETTABLE = frozenset(m for m in CoreMask if m != CoreMask.UNDEFINED)


def core_count(platform: str) -> int:
    """NPU cores of ``platform`` (``"rk3588"`` -> 3; unknown or empty -> 1)."""
    return CORE_COUNTS.get((platform or "").lower(), 1)


def supports_core_mask(platform: str) -> bool:
    """True on the platforms where ``set_core_mask``/``set_batch_core_num`` are allowed."""
    return (platform or "").lower() in CORE_COUNTS


def _only_multi_core(platform: str, what: str) -> None:
    if not supports_core_mask(platform):
        raise InvalidParamError(
            f"{what} is only supported on {' and '.join(p.upper() for p in MULTI_CORE_PLATFORMS)} "
            f"(multi-core NPUs); this context runs for {platform.upper() or 'an unnamed platform'} "
            "with a single NPU core",
            op="rknn_set_core_mask" if what == "set_core_mask" else "rknn_set_batch_core_num",
        )


def check_core_mask(platform: str, mask: Any) -> CoreMask:
    """``mask`` as a :class:`CoreMask` if ``platform`` accepts it, else ``InvalidParamError``.

    Rejected: any mask on a single-core platform; values that are not a settable
    ``CoreMask`` member (e.g. 5, 6, ``UNDEFINED``); masks naming a core the platform
    lacks (``CORE_2``/``CORE_0_1_2`` on RK3576).
    """
    _only_multi_core(platform, "set_core_mask")
    valid = ", ".join(f"{m.name}={m.value:#x}" for m in sorted(_SETTABLE, key=int) if _fits(platform, m))
    if isinstance(mask, bool) or not isinstance(mask, int) or mask not in {int(m) for m in _SETTABLE}:
        raise InvalidParamError(f"invalid core mask {mask!r}; {platform.upper()} accepts {valid}",
                                op="rknn_set_core_mask")
    mask = CoreMask(mask)
    if not _fits(platform, mask):
        raise InvalidParamError(
            f"core mask {mask.name} names core 2, but {platform.upper()} has {core_count(platform)} NPU cores; "
            f"it accepts {valid}",
            op="rknn_set_core_mask",
        )
    return mask


def _fits(platform: str, mask: CoreMask) -> bool:
    if mask in (CoreMask.AUTO, CoreMask.ALL):
        return True
    return int(mask) < (1 << core_count(platform))


def mask_cores(platform: str, mask: CoreMask) -> Tuple[int, ...]:
    """The emulated core indices one inference runs on: ``AUTO`` -> ``(0,)`` (the idle core
    the software NPU always picks), ``ALL`` -> every core, otherwise the mask's bits."""
    mask = CoreMask(mask)
    if mask == CoreMask.AUTO:
        return (0,)
    if mask == CoreMask.ALL:
        return tuple(range(core_count(platform)))
    return tuple(i for i in range(3) if int(mask) & (1 << i))


def lite2_remap(platform: str, mask: int) -> Tuple[int, Optional[str]]:
    """Lite2's RK3576 remapping for ``init_runtime(core_mask=...)``: ``CORE_2`` -> ``CORE_0``
    and ``CORE_0_1_2`` -> ``CORE_0_1``; returns ``(mask, warning or None)``."""
    if (platform or "").lower() != "rk3576" or mask not in (CoreMask.CORE_2, CoreMask.CORE_0_1_2):
        return mask, None
    remapped = CoreMask.CORE_0 if mask == CoreMask.CORE_2 else CoreMask.CORE_0_1
    return int(remapped), (f"RK3576 has 2 NPU cores: core_mask {CoreMask(mask).name} is changed to "
                           f"{remapped.name}")


def check_batch_core_num(platform: str, n: Any) -> int:
    """``n`` if ``platform`` may run a multi-batch model on ``n`` cores (1 <= n <= cores),
    else ``InvalidParamError``."""
    _only_multi_core(platform, "set_batch_core_num")
    cores = core_count(platform)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cores:
        raise InvalidParamError(f"batch core number must be an integer in 1..{cores} on {platform.upper()}, "
                                f"not {n!r}", op="rknn_set_batch_core_num")
    return n


def usable_cpu_ids() -> List[int]:
    """The CPU numbers this process may run on, ascending: its affinity set where the OS
    reports one, else ``0 .. cpu_count - 1``."""
    try:
        ids = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        ids = []
    return ids or list(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    """How many CPUs this process may run on (:func:`usable_cpu_ids`): the host side of the
    topology, what emulated cores and worker pools are bounded by."""
    return len(usable_cpu_ids())
