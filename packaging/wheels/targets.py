"""The wheel matrix: which CPython versions, C libraries and architectures, and where each
target's headers and test interpreter come from.

A target is one wheel: (CPython version, libc, architecture). Its compiler is zig's clang
(``zig cc -target <triple>``) with the C library zig ships for that triple: glibc 2.17 for
manylinux_2_17, musl (1.2 API) for musllinux_1_2.
"""

from __future__ import annotations

from dataclasses import dataclass

PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
ARCHS = ("x86_64", "aarch64")
LIBCS = ("manylinux", "musllinux")

# Debian suites carrying each CPython as the suite's python3.X (headers: libpython3.X-dev; the
# aarch64 test interpreter: python3.X from the same suite). Debian never released 3.10 or 3.12;
# 3.14 is in forky (testing).
DEBIAN_SUITE = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie", "3.14": "forky"}
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
PLATFORM_TAG = {"manylinux": "manylinux_2_17", "musllinux": "musllinux_1_2"}
ZIG_TRIPLE = {"manylinux": "{arch}-linux-gnu.2.17", "musllinux": "{arch}-linux-musl"}
EXT_LIBC = {"manylinux": "gnu", "musllinux": "musl"}


@dataclass(frozen=True)
class Target:
    """One wheel of the matrix."""

    python: str  # "3.11"
    libc: str  # "manylinux" | "musllinux"
    arch: str  # "x86_64" | "aarch64"

    @property
    def cp(self) -> str:
        """The CPython tag, e.g. ``cp311``."""
        return "cp" + self.python.replace(".", "")

    @property
    def name(self) -> str:
        """The identifier used for work dirs and the manifest, e.g. ``cp311-manylinux_x86_64``
        (cibuildwheel's build identifier)."""
        return f"{self.cp}-{self.libc}_{self.arch}"

    @property
    def platform_tag(self) -> str:
        """The wheel's platform tag, e.g. ``manylinux_2_17_aarch64``."""
        return f"{PLATFORM_TAG[self.libc]}_{self.arch}"

    @property
    def zig_triple(self) -> str:
        """zig's target triple, with the glibc version for manylinux."""
        return ZIG_TRIPLE[self.libc].format(arch=self.arch)

    @property
    def ext_suffix(self) -> str:
        """The extension-module suffix the target interpreter expects (its EXT_SUFFIX).

        CPython names musl in its platform triplet from 3.11 on; a 3.9 or 3.10 built on musl
        (the musllinux images' own) says ``linux-gnu``, as NumPy's musllinux wheels show."""
        libc = EXT_LIBC[self.libc]
        if libc == "musl" and self.python in ("3.9", "3.10"):
            libc = "gnu"
        return f".cpython-{self.cp[2:]}-{self.arch}-linux-{libc}.so"

    @property
    def debian_suite(self) -> str | None:
        """The Debian suite whose packages give this version's headers, or None."""
        return DEBIAN_SUITE.get(self.python)


def parse_selection(text: str) -> list[Target]:
    """The targets named by a comma-separated list of patterns (``fnmatch`` on ``Target.name``,
    e.g. ``cp311-*,*-manylinux_aarch64``); ``all`` or an empty string selects everything."""
    import fnmatch

    every = [Target(p, libc, arch) for libc in LIBCS for arch in ARCHS for p in PYTHONS]
    patterns = [p for p in text.split(",") if p and p != "all"]
    if not patterns:
        return every
    chosen = [t for t in every if any(fnmatch.fnmatch(t.name, p) for p in patterns)]
    if not chosen:
        names = ", ".join(t.name for t in every)
        raise ValueError(f"--only {text!r} selects no target; the targets are: {names}")
    return chosen
