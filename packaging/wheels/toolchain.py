"""What each target's compile needs besides the sources: headers, the compiler command, the
x86 CPU-model object, and a build venv of the matching CPython on the build host.

Headers. The CPython headers are architecture-independent except ``pyconfig.h``. For the
versions Debian carries (``targets.DEBIAN_SUITE``) both come from ``libpython3.X-dev`` of that
suite for the target's architecture: Debian installs the generic headers in
``/usr/include/python3.X`` and the real ``pyconfig.h`` in ``/usr/include/<multiarch>/python3.X``;
they are copied into one private folder, so that the compile sees no other header of the root
(its glibc headers are newer than the 2.17 that manylinux allows, and zig brings its own). For
3.10 and 3.12 (never released by Debian) only x86_64 is built, against the headers of the build
host's own interpreter of that version, the one that then tests the wheel. A musllinux wheel uses
the glibc ``pyconfig.h`` of its architecture: the sizes and ABI macros agree, and the ``HAVE_*``
differences concern the interpreter's own sources, not its public API.

CPU detection. zig's compiler-rt (0.17) stubs out the x86 CPU model: ``__builtin_cpu_supports``
answers 0 for every feature, which would silently disable the AVX2/AVX-512 kernels. Each x86_64
extension is therefore linked with ``cpuinfo.o`` from GCC's ``libgcc.a`` (Debian bookworm's
``libgcc-12-dev``, GCC runtime library exception), the implementation clang's builtins expect.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import debroot
from targets import DEBIAN_ARCH, Target

CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"  # looked up here: the guest's PATH is not the host's
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
CPUINFO_SUITE = "bookworm"  # libgcc-12-dev: cpuinfo.o for x86_64
BUILD_REQUIREMENTS = ["setuptools>=64", "wheel", "Cython>=3.0,<4", "numpy>=2.0"]

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def lock(key: str) -> threading.Lock:
    """The lock of one shared resource (a root, a venv, a header folder), by name."""
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


class Unavailable(RuntimeError):
    """This target cannot be built or tested here; the message says what is missing."""


def root_packages(suite: str, python: str, arch: str) -> list[str]:
    """What the Debian root of ``suite``/``arch`` holds: the headers, and on arm64 the test
    interpreter with its venv module and libstdc++ (every glibc system has it and manylinux lets
    wheels link it: NumPy's manylinux_2_28 aarch64 wheels for 3.14 do, and Debian's python3.14
    does not pull it in); bookworm amd64 also gives libgcc's cpuinfo.o."""
    packages = [f"libpython{python}-dev", f"python{python}-venv"]
    if arch != "amd64":
        packages.append("libstdc++6")
    if suite == CPUINFO_SUITE and arch == "amd64":
        packages.append("libgcc-12-dev")
    return packages


def debian_root(suite: str, python: str, arch: str, cache: Path, log: Path) -> Path:
    """The unpacked Debian root for ``suite``/``arch`` (Debian architecture name)."""
    with lock(f"root-{suite}-{arch}"):
        return debroot.fetch_root(suite, arch, root_packages(suite, python, arch), cache, log)


def host_python(version: str, cache: Path | None = None) -> str | None:
    """An x86_64 CPython ``version`` on the build host (PATH, then pyenv, then one that
    ``cpython.build_host`` built under ``cache``), or None."""
    found = shutil.which(f"python{version}")
    candidates = ([found] if found else []) + sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")),
        reverse=True)
    built = (cache.resolve() / "cpython" / "host" / f"python{version}") if cache else None
    if built and (built / ".built").is_file():
        candidates.append(str(built / "bin" / f"python{version}"))
    for path in candidates:
        done = subprocess.run(
            [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.executable)"],
            capture_output=True, text=True)
        found_version, _, executable = done.stdout.strip().partition(" ")
        if done.returncode == 0 and found_version == version:
            return executable  # the interpreter itself, not a pyenv shim

    return None


def host_interpreter(version: str, cache: Path, log: Path) -> str:
    """The build host's CPython ``version`` (``host_python``), or one built for it from the
    pinned source when the host has none (``cpython.build_host``)."""
    found = host_python(version, cache)
    if found:
        return found
    import cpython  # it builds with this module's tools

    return cpython.build_host(version, cache, log)


def build_venv(version: str, cache: Path, log: Path) -> Path:
    """A venv of the host's CPython ``version`` with the build requirements; its python."""
    with lock(f"venv-{version}"):
        venv = cache / "venvs" / f"build-{version}"
        python = venv / "bin" / "python"
        stamp = venv / ".rknnlite-ready"
        if stamp.is_file():
            return python
        interpreter = host_interpreter(version, cache, log)
        shutil.rmtree(venv, ignore_errors=True)
        run([interpreter, "-m", "venv", str(venv)], log)
        run([str(python), "-m", "pip", "install", "-q", *BUILD_REQUIREMENTS], log)
        stamp.touch()
        return python


def headers(target: Target, cache: Path, log: Path) -> tuple[Path, str]:
    """The folder holding this target's ``Python.h`` and real ``pyconfig.h``, and where it
    came from (for the manifest)."""
    dest = cache / "headers" / f"{target.cp}-{target.arch}" / f"python{target.python}"
    source_file = dest.parent / "SOURCE"
    with lock(f"headers-{target.cp}-{target.arch}"):
        if (dest / "Python.h").is_file() and source_file.is_file():
            return dest, source_file.read_text().strip()
        suite = target.debian_suite
        if suite:
            root = debian_root(suite, target.python, DEBIAN_ARCH[target.arch], cache, log)
            generic = root / "usr" / "include" / f"python{target.python}"
            config = root / "usr" / "include" / MULTIARCH[target.arch] / f"python{target.python}" / "pyconfig.h"
            source = f"Debian {suite} libpython{target.python}-dev ({DEBIAN_ARCH[target.arch]})"
        elif target.arch == "aarch64":
            import cpython  # it builds with this module's tools

            # the glibc interpreter's, for the musl wheel too (as with Debian's headers)
            glibc = Target(target.python, "manylinux", target.arch)
            generic = cpython.include_dir(glibc, cache, log)
            config = generic / "pyconfig.h"
            source = cpython.describe(glibc)
        elif target.arch == "x86_64" and host_python(target.python):
            interpreter = host_python(target.python)
            include = subprocess.run(
                [interpreter, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                capture_output=True, text=True, check=True).stdout.strip()
            generic, config = Path(include), Path(include) / "pyconfig.h"
            source = f"the build host's CPython {target.python} ({interpreter})"
        else:
            raise Unavailable(f"no {target.arch} headers for CPython {target.python}: Debian "
                              "has no suite with it and no CPython of it is on the build host")
        if not (generic / "Python.h").is_file() or not config.is_file():
            raise Unavailable(f"{source}: Python.h or pyconfig.h missing under {generic}")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(generic, dest, symlinks=False)
        (dest / "pyconfig.h").unlink()
        (dest / "pyconfig.h").write_text(without_crypt_h(config.read_text()))
        source_file.write_text(source + "\n")
        return dest, source


def without_crypt_h(pyconfig: str) -> str:
    """``pyconfig.h`` with ``HAVE_CRYPT_H`` undefined. CPython 3.9's Python.h includes
    <crypt.h> when it is set; zig's glibc has no crypt.h (libcrypt is a separate library), and
    no extension here uses crypt(3)."""
    return re.sub(r"^#define HAVE_CRYPT_H 1$", "/* #undef HAVE_CRYPT_H (packaging/wheels) */",
                  pyconfig, flags=re.M)


def cpuinfo_object(cache: Path, log: Path) -> Path:
    """``cpuinfo.o`` from Debian's libgcc-12-dev (amd64), extracted once."""
    dest = cache / "cpuinfo" / "cpuinfo.o"
    with lock("cpuinfo"):
        if dest.is_file():
            return dest
        root = debian_root(CPUINFO_SUITE, "3.11", "amd64", cache, log)
        archive = root / "usr" / "lib" / "gcc" / "x86_64-linux-gnu" / "12" / "libgcc.a"
        dest.parent.mkdir(parents=True, exist_ok=True)
        run(["ar", "x", str(archive), "cpuinfo.o"], log, cwd=dest.parent)
        return dest


def numpy_target(pyproject: Path = Path(__file__).resolve().parents[2] / "pyproject.toml") -> str:
    """The NumPy C-API macro of the oldest NumPy the project's dependencies accept
    (``numpy>=1.22`` gives ``NPY_1_22_API_VERSION``)."""
    found = re.search(r'^dependencies\s*=.*?"numpy>=(\d+)\.(\d+)', pyproject.read_text(), re.M)
    if not found:
        raise Unavailable(f"no 'numpy>=X.Y' in the dependencies of {pyproject}")
    return f"NPY_{found.group(1)}_{found.group(2)}_API_VERSION"


def compile_env(target: Target, include: Path, cache: Path, log: Path) -> dict[str, str]:
    """The environment that makes setuptools compile for ``target``: the standard knobs only
    (CC, LDSHARED, CFLAGS, the extension suffix and the host platform), so that setup.py
    needs no change and builds whatever extensions it declares."""
    zig = f"{sys.executable} -m ziglang cc -target {target.zig_triple}"
    link = f"{zig} -shared"
    if target.arch == "x86_64":
        link += f" {cpuinfo_object(cache, log)}"
    env = dict(os.environ)
    env.update({
        "CC": zig,
        "LDSHARED": link,
        # -I (not -isystem) so these headers come before the build interpreter's own. The
        # NumPy C API is pinned to the oldest NumPy that pyproject.toml accepts: NumPy 2's
        # headers otherwise default to a newer one and the extensions would refuse NumPy 1.22.
        "CFLAGS": f"-I{include} -g0 -DNPY_TARGET_VERSION={numpy_target()}",
        "LDFLAGS": "",
        "SETUPTOOLS_EXT_SUFFIX": target.ext_suffix,
        "_PYTHON_HOST_PLATFORM": f"linux-{target.arch}",
        "ZIG_GLOBAL_CACHE_DIR": str(cache / "zig"),
        "ZIG_LOCAL_CACHE_DIR": str(cache / "zig"),
    })
    return env


def run(cmd: list[str], log: Path, cwd: Path | None = None, env: dict | None = None,
        timeout: float | None = None) -> str:
    """Runs ``cmd`` with its output appended to ``log``; returns that output. Raises
    ``subprocess.CalledProcessError`` (with the output) when it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    with log.open("a") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n{done.stdout}{done.stderr}")
    if done.returncode:
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout + done.stderr)
    return done.stdout
