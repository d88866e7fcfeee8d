"""Which SIMD path the software backend's conv micro-kernels (GEMM and Winograd) take.

By default the best the CPU has (``conv_kernels.gemm_isa()``: on x86-64 2 AVX-512F,
1 AVX2+FMA; on aarch64 1 NEON; 0 none, where the GEMMs go to numpy's BLAS).  ``RKNNLITE_ISA``
chooses a narrower one, so that one machine can run, test and time every path it can execute:

==============  =====  =======  ==========================================================
RKNNLITE_ISA    level  machine  path
==============  =====  =======  ==========================================================
``avx512``      2      x86-64   AVX-512F micro-kernels (the CPU must have them)
``avx2``        1      x86-64   AVX2+FMA micro-kernels (the CPU must have them)
``neon``        1      aarch64  NEON micro-kernels (8 x 12 GEMM tiles, 4-lane Winograd)
``generic``     0      any      no micro-kernel: BLAS GEMMs, plain-C Winograd
unset, ``""``   best   any      the CPU's best
==============  =====  =======  ==========================================================

A name of the other architecture, any other value, and a path the CPU cannot execute are refused
with :class:`~rknnlite.errors.InvalidParamError`: a typo must not quietly leave the default in
place.
The variable is read once, when the backend's conv and pooling ops are first imported (the first
software Context of the process); the float32 pooling passes take the same level (NEON on aarch64
is their baseline build).  Element-wise and layout kernels choose their own SIMD and do not
follow it.
"""

from __future__ import annotations

import os
import platform
from typing import Callable, Dict, Mapping, Optional

from ...errors import InvalidParamError

__all__ = ["ISA_LEVELS", "ISA_NAMES", "isa_levels", "requested_isa", "select_isa"]

#: micro-kernel paths by machine (``platform.machine()``), best first
_PATHS = {"x86": {"avx512": 2, "avx2": 1, "generic": 0}, "arm": {"neon": 1, "generic": 0}}


def isa_levels(machine: Optional[str] = None) -> Dict[str, int]:
    """The ``RKNNLITE_ISA`` names of ``machine`` (default this one) and their levels; a machine
    with no micro-kernels has only ``generic``."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64", "i386", "i686", "x86"):
        return dict(_PATHS["x86"])
    if machine in ("aarch64", "arm64"):
        return dict(_PATHS["arm"])
    return {"generic": 0}


#: this machine's RKNNLITE_ISA values and their micro-kernel levels
ISA_LEVELS = isa_levels()
#: level -> name
ISA_NAMES = {level: name for name, level in ISA_LEVELS.items()}


def requested_isa(cpu_level: int, environ: Optional[Mapping[str, str]] = None,
                  levels: Optional[Mapping[str, int]] = None) -> int:
    """The micro-kernel level ``RKNNLITE_ISA`` asks for (``cpu_level``, the CPU's best, when
    unset or empty), among ``levels`` (default :data:`ISA_LEVELS`, this machine's paths).
    Raises :class:`InvalidParamError` for an unknown name, a path of another architecture or a
    path above ``cpu_level``."""
    levels = ISA_LEVELS if levels is None else levels
    raw = (os.environ if environ is None else environ).get("RKNNLITE_ISA", "").strip().lower()
    if not raw:
        return cpu_level
    if raw not in levels:
        other = next((machine for machine, paths in _PATHS.items() if raw in paths), None)
        hint = f" of this machine: {raw!r} is an {other} path" if other else ""
        raise InvalidParamError(f"RKNNLITE_ISA={raw!r} is not a kernel path{hint}; expected one of "
                                f"{', '.join(levels)} or unset")
    level = levels[raw]
    if level > cpu_level:
        best = next((name for name, value in levels.items() if value == cpu_level), f"level {cpu_level}")
        raise InvalidParamError(f"RKNNLITE_ISA={raw!r}: this CPU cannot execute that path; its best is {best!r}")
    return level


def select_isa(limit: Callable[[int], int], cpu_level: int) -> int:
    """Apply ``RKNNLITE_ISA`` to compiled kernels whose best level is ``cpu_level``: ``limit(level)``
    (their ``limit_isa``) sets it; returns the level now in use."""
    return limit(requested_isa(cpu_level))
