"""The core-mask rules a ``Context`` applies: the platform it runs for (:func:`model_platform`),
and the NPU topology (:mod:`rknnlite.tensors.topology`), re-exported for the layers above.
The software backend's thread policy is :func:`rknnlite.backends.software.parallel.threads_for_mask`.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..tensors.topology import (CORE_COUNTS, MULTI_CORE_PLATFORMS, check_batch_core_num, check_core_mask, core_count,
                                lite2_remap, mask_cores, supports_core_mask, usable_cpus)

__all__ = [
    "CORE_COUNTS",
    "MULTI_CORE_PLATFORMS",
    "core_count",
    "supports_core_mask",
    "model_platform",
    "check_core_mask",
    "mask_cores",
    "lite2_remap",
    "check_batch_core_num",
    "usable_cpus",
]


def model_platform(model: Any, target_platform: Optional[str] = None) -> str:
    """The platform a context runs for, lower case: ``target_platform`` when given, else the
    first of the model's target platforms, else ``""`` (treated as a one-core NPU)."""
    if target_platform:
        return str(target_platform).lower()
    targets: Sequence[str] = model.target_platforms  # a rknnlite.model.info.ModelInfo
    return str(targets[0]).lower() if targets else ""
