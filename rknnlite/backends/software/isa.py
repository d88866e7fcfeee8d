"""Which SIMD path the software backend's conv micro-kernels (GEMM and Winograd) take.

By default the best the CPU has (``conv_kernels.gemm_isa()``: 2 AVX-512F, 1 AVX2+FMA,
0 none, where the GEMMs go to numpy's BLAS).  ``RKNNLITE_ISA`` chooses a narrower one, so that
one machine can run, test and time every path it can execute:

==============  =====  ===============================================
RKNNLITE_ISA    level  path
==============  =====  ===============================================
``avx512``      2      AVX-512F micro-kernels (the CPU must have them)
``avx2``        1      AVX2+FMA micro-kernels (the CPU must have them)
``generic``     0      no micro-kernel: BLAS GEMMs, plain-C Winograd
unset, ``""``   best   the CPU's best
==============  =====  ===============================================

``neon`` and any other value are refused with :class:`~rknnlite.errors.InvalidParamError`,
as is a path the CPU cannot execute: a typo must not quietly leave the default in place.
The variable is read once, when the backend's conv op is first imported (the first software
Context of the process).  Element-wise and layout kernels choose their own SIMD and do not
follow it.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from ...errors import InvalidParamError

__all__ = ["ISA_LEVELS", "ISA_NAMES", "requested_isa", "select_isa"]

#: RKNNLITE_ISA values and their micro-kernel levels
ISA_LEVELS = {"avx512": 2, "avx2": 1, "generic": 0}
#: level -> name
ISA_NAMES = {level: name for name, level in ISA_LEVELS.items()}


def requested_isa(cpu_level: int, environ: Optional[Mapping[str, str]] = None) -> int:
    """The micro-kernel level ``RKNNLITE_ISA`` asks for (``cpu_level``, the CPU's best, when
    unset or empty).  Raises :class:`InvalidParamError` for an unknown name or a path above
    ``cpu_level``."""
    raw = (os.environ if environ is None else environ).get("RKNNLITE_ISA", "").strip().lower()
    if not raw:
        return cpu_level
    if raw not in ISA_LEVELS:
        hint = " (this build has no NEON kernels yet; aarch64 uses the generic path)" if raw == "neon" else ""
        raise InvalidParamError(f"RKNNLITE_ISA={raw!r} is not a kernel path{hint}; expected one of "
                                f"{', '.join(ISA_LEVELS)} or unset")
    level = ISA_LEVELS[raw]
    if level > cpu_level:
        raise InvalidParamError(f"RKNNLITE_ISA={raw!r}: this CPU cannot execute that path; its best is "
                                f"{ISA_NAMES[cpu_level]!r}")
    return level


def select_isa(kernels) -> int:
    """Apply ``RKNNLITE_ISA`` to the compiled conv kernels (``kernels.limit_isa``) and return the
    level now in use."""
    return kernels.limit_isa(requested_isa(kernels.gemm_isa()))
