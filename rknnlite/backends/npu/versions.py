"""Which librknnrt a Rockchip model needs, and the message when ``rknn_init`` refuses it.

The rule (documented in the NPU backend's docstring and ``rknnlite doctor``): a model built
by RKNN-Toolkit2 ``major.minor.patch`` needs librknnrt ``>= major.minor.0``.  Rockchip
releases the toolkit and the runtime together with the same version numbers; a runtime
older than the toolkit's minor release may not know the file's operators or format (the
public symptoms are "Invalid RKNN model version 6" from 1.4-era runtimes and
RKNN_ERR_MODEL_INVALID from older 2.x runtimes on 2.x+1 files), while newer runtimes
read older files.  The container format adds one floor of its own: format version 6
files (toolkit2 >= 1.5) need librknnrt >= 1.5.0.

The model's version comes from the file (``RockchipModel.compiler_version``, else the
leading numbers of ``toolkit_version``); the runtime's from ``rknn_query(SDK_VERSION)``
when a context exists, else from the version string embedded in the library
(:func:`rknnlite.backends.npu.library.embedded_version`).
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

__all__ = ["version_numbers", "model_toolkit_version", "required_runtime", "version_mismatch"]

Version = Tuple[int, int, int]

#: Format version -> the first runtime that reads it.
_FORMAT_FLOOR = {6: (1, 5, 0)}


def version_numbers(text: Optional[str]) -> Optional[Version]:
    """``"2.3.2 (429f97ae6b@...)"`` -> ``(2, 3, 2)``; ``"1.6"`` -> ``(1, 6, 0)``; ``None``
    when ``text`` holds no ``major.minor`` number."""
    if not text:
        return None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if match is None:
        return None
    major, minor, patch = match.groups(default="0")
    return int(major), int(minor), int(patch)


def _text(v: Version) -> str:
    return ".".join(str(x) for x in v)


def model_toolkit_version(model: Any) -> Optional[str]:
    """The toolkit version a Rockchip model was built with (``"2.5.0"``), or ``None``.

    Prefers the compiler version of the FlatBuffer (what the runtime checks), else the
    JSON trailer's ``version``."""
    for attr in ("compiler_version", "toolkit_version", "toolkit_full_version"):
        value = getattr(model, attr, None)
        if version_numbers(value) is not None:
            return str(value)
    return None


def required_runtime(model: Any) -> Optional[Version]:
    """The oldest librknnrt that runs ``model`` by the rule above, or ``None`` if unknown."""
    floors = []
    toolkit = version_numbers(model_toolkit_version(model))
    if toolkit is not None:
        floors.append((toolkit[0], toolkit[1], 0))
    fmt = _FORMAT_FLOOR.get(getattr(model, "format_version", None))
    if fmt is not None:
        floors.append(fmt)
    return max(floors) if floors else None


def version_mismatch(model: Any, runtime_version: Optional[str]) -> Optional[str]:
    """``"model built with toolkit X needs librknnrt >= Y, found Z"`` when the runtime is
    older than the model needs; ``None`` when it is new enough or a version is unknown."""
    need = required_runtime(model)
    have = version_numbers(runtime_version)
    if need is None or have is None or have >= need:
        return None
    toolkit = model_toolkit_version(model)
    built = f"toolkit {version_numbers(toolkit) and _text(version_numbers(toolkit))}" if toolkit else \
        f"file format version {getattr(model, 'format_version', '?')}"
    return (f"model built with {built} needs librknnrt >= {_text(need)}, found {runtime_version}; "
            "install a newer librknnrt.so (and the matching NPU driver) or rebuild the model with an older toolkit")
