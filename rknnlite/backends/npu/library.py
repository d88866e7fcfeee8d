"""Finding ``librknnrt.so`` and reading its version without a model.

Search order (the first rule that applies decides; an explicit choice never falls back):

1. the ``path`` argument (a file, or a directory holding ``librknnrt.so``);
2. the ``LIBRKNNRT_PATH`` environment variable (same forms);
3. the system directories :data:`SEARCH_DIRS` (``/usr/lib``, ``/usr/lib64``, and the
   multiarch directories Debian-style boards use);
4. the dynamic loader's own search (``LD_LIBRARY_PATH``, ``ld.so.cache``), by soname.

:func:`find_library` only decides *which* file to try; loading it (``dlopen``) is the
binding's job (:mod:`rknnlite._native.rknnrt`).  :func:`embedded_version` reads the
version string librknnrt carries in its read-only data, which is how ``rknnlite doctor``
and the version diagnosis name the runtime's version before any context exists
(``rknn_query(SDK_VERSION)`` needs an initialised context).
"""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Tuple

__all__ = [
    "LIBRARY_NAME",
    "ENV_VAR",
    "SEARCH_DIRS",
    "LOADER_NAME",
    "INSTALL_HINT",
    "LibraryChoice",
    "find_library",
    "embedded_version",
]

LIBRARY_NAME = "librknnrt.so"
ENV_VAR = "LIBRKNNRT_PATH"
#: Directories searched when neither an argument nor ``LIBRKNNRT_PATH`` names the library.
SEARCH_DIRS: Tuple[str, ...] = ("/usr/lib", "/usr/lib64", "/usr/lib/aarch64-linux-gnu",
                                "/usr/lib/arm-linux-gnueabihf", "/usr/local/lib")
#: What the loader's own search is asked for (``dlopen`` of a bare soname).
LOADER_NAME = LIBRARY_NAME
INSTALL_HINT = (
    "install Rockchip's runtime: copy rknpu2/runtime/Linux/librknn_api/<arch>/librknnrt.so from "
    "github.com/airockchip/rknn-toolkit2 to /usr/lib (matching the board's NPU driver), or set "
    f"{ENV_VAR} to its path"
)

# "2.3.2 (429f97ae6b@2025-04-09T09:09:27)": the runtime's version string (also what
# rknn_query(SDK_VERSION) reports as api_version).
_VERSION_RE = re.compile(rb"(\d+\.\d+\.\d+[0-9A-Za-z.+-]*) \(([0-9a-fA-F]{6,40})@([0-9T:.-]{10,25})\)")
_SCAN_LIMIT = 64 << 20  # never scan more than this many bytes of a file


@dataclass(frozen=True)
class LibraryChoice:
    """Where to load librknnrt from, and why.

    Attributes:
        candidates: what to pass to ``dlopen``, in order (absolute paths, or the bare
            soname for the loader's own search).  Empty when nothing was found.
        source: which rule chose them: ``"argument"``, ``"LIBRKNNRT_PATH"``,
            ``"system"`` or ``"loader"``.
        looked: every place examined, for error messages.
        problem: why an explicit choice is unusable (a missing file), else ``None``.
    """

    candidates: Tuple[str, ...]
    source: str
    looked: Tuple[str, ...] = field(default=())
    problem: Optional[str] = None

    def where(self) -> str:
        """The places looked at, as one phrase for a message."""
        return ", ".join(self.looked) if self.looked else "nowhere"


def _explicit(value: str, source: str) -> LibraryChoice:
    path = os.path.expanduser(value)
    if os.path.isdir(path):
        path = os.path.join(path, LIBRARY_NAME)
    if not os.path.isfile(path):
        what = "the path argument" if source == "argument" else source
        return LibraryChoice((), source, (path,), f"{what} names {path}, which is not a file")
    return LibraryChoice((os.path.abspath(path),), source, (path,))


def find_library(path: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
                 dirs: Optional[Sequence[str]] = None, loader_name: Optional[str] = None) -> LibraryChoice:
    """Decide which librknnrt to load (see the module docstring for the order).

    ``environ`` (default ``os.environ``), ``dirs`` (default :data:`SEARCH_DIRS`) and
    ``loader_name`` (default :data:`LOADER_NAME`) exist for tests and ``rknnlite doctor``.
    Nothing is loaded here; the last candidate of a system search is always the loader
    name, so the loader's own path (``LD_LIBRARY_PATH``, ``ld.so.cache``) is tried.
    """
    environ = os.environ if environ is None else environ
    dirs = SEARCH_DIRS if dirs is None else dirs
    loader_name = LOADER_NAME if loader_name is None else loader_name
    if path:
        return _explicit(os.fspath(path), "argument")
    env = environ.get(ENV_VAR, "")
    if env.strip():
        return _explicit(env.strip(), ENV_VAR)
    files = [os.path.join(d, LIBRARY_NAME) for d in dirs]
    found = tuple(p for p in files if os.path.isfile(p))
    looked = tuple(files) + (f"the loader path ({loader_name} via LD_LIBRARY_PATH and ld.so.cache)",)
    if found:
        return LibraryChoice(found + (loader_name,), "system", looked)
    return LibraryChoice((loader_name,), "loader", looked)


def embedded_version(path: str) -> Optional[str]:
    """The version string a librknnrt file carries (e.g. ``"2.3.2 (429f97ae6b@2025-04-09T09:09:27)"``),
    or ``None`` when the file has none or cannot be read.  The file is memory-mapped, not read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return None
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                match = _VERSION_RE.search(m, 0, min(size, _SCAN_LIMIT))
                if match is None:
                    return None
                return match.group(0).decode("ascii", "replace")
    except (OSError, ValueError):
        return None
