"""Tests a built wheel where it would run.

* x86_64 glibc: a fresh venv of the build host's CPython of that version; pip installs the
  wheel (its dependencies from the index) and the test requirements; then the core suite
  (``packaging/core-tests.txt``) and ``rknnlite demo``.
* everything else in a root (``test_in_root``), entered with ``chroot``, under qemu user-mode
  emulation for aarch64 (``chroot ROOT qemu-aarch64-static -cpu cortex-a53 ...``: ``BOARD_CPU``):
  - aarch64 glibc: the Debian root of the version's suite (``debroot``) and its python3.X; for
    3.10 and 3.12, which Debian never released, an interpreter built here (``cpython``) in the
    bookworm root;
  - musllinux: a root holding only Debian's ``musl`` package (no glibc, as on Alpine) and a musl
    CPython built here (``cpython``).
  A fresh venv is made inside the root by its interpreter; pip installs the wheel with
  ``--no-index`` from a wheelhouse downloaded on the host for that platform, so nothing
  compiles. ``rknnlite demo`` runs for every version; the core suite for every x86_64 musl
  wheel and for the aarch64 versions in ``--qemu-core``.

Every result is a dict: ``{"kind", "result": "passed"|"failed"|"not run", "summary",
"interpreter"}``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cpython
import toolchain
from targets import DEBIAN_ARCH, Target

TEST_REQUIREMENTS = ["pytest>=7", "PyYAML>=5.4", "Pillow>=9", "tqdm>=4.60"]
RUNTIME_REQUIREMENTS = ["numpy>=1.22", "cryptography>=41", "psutil>=5.8"]
PIP = "pip>=23"  # installed first in the test venvs of the roots
QEMU = "/usr/bin/qemu-aarch64-static"
# the CPU qemu emulates: the oldest core of the supported SoCs (RK3562, RK3576's little cores),
# ARMv8.0-A, so a wheel (or a dependency's wheel) that needs anything newer fails here; qemu's
# default "max" CPU has SVE and SME, and OpenBLAS's SME kernels raise spurious floating-point
# flags there (NumPy 2.5's musllinux wheels warned "overflow encountered in matmul")
BOARD_CPU = "cortex-a53"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# the CPythons that NumPy 1.22 (the oldest in [project].dependencies) has wheels for
OLDEST_NUMPY_PYTHONS = ("3.9", "3.10")
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|error).*?)\s*=*$", re.M)


def core_files(source: Path) -> list[str]:
    """The core test files (``packaging/core-tests.txt``), as paths under ``source/tests``."""
    names = []
    for line in (source / "packaging" / "core-tests.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return names


def _summary(output: str) -> str:
    found = SUMMARY.findall(output)
    return found[-1][0] if found else output.strip().splitlines()[-1][:200] if output.strip() else ""


def _outcome(kind: str, interpreter: str, steps) -> dict:
    """Runs ``steps`` (callables returning output) in order; the first failure ends it."""
    summary = ""
    try:
        for step in steps:
            out = step()
            summary = _summary(out) or summary
    except subprocess.TimeoutExpired as exc:
        return {"kind": kind, "result": "failed", "summary": f"timed out: {exc.cmd[-1]}",
                "interpreter": interpreter}
    except subprocess.CalledProcessError as exc:
        return {"kind": kind, "result": "failed", "summary": _summary(exc.output or ""),
                "interpreter": interpreter}
    return {"kind": kind, "result": "passed", "summary": summary, "interpreter": interpreter}


def test_x86_64(target: Target, wheel: Path, source: Path, cache: Path, log: Path) -> dict:
    """Fresh venv of the host's CPython; core suite and demo."""
    try:
        interpreter = toolchain.host_interpreter(target.python, cache, log)
    except (toolchain.Unavailable, subprocess.CalledProcessError) as exc:
        return {"kind": "core", "result": "not run", "interpreter": "",
                "summary": f"no CPython {target.python} here: {str(exc).splitlines()[0]}"}
    version = subprocess.run([interpreter, "--version"], capture_output=True, text=True).stdout.strip()
    venv = cache / "test-venvs" / target.name
    shutil.rmtree(venv, ignore_errors=True)
    python = str(venv / "bin" / "python")
    files = [str(source / "tests" / name) for name in core_files(source)]
    scratch = cache / "test-cwd" / target.name
    scratch.mkdir(parents=True, exist_ok=True)
    outcome = _outcome("core + demo", f"{version} ({interpreter})", [
        lambda: toolchain.run([interpreter, "-m", "venv", str(venv)], log),
        lambda: toolchain.run([python, "-m", "pip", "install", "-q",
                               str(wheel), *TEST_REQUIREMENTS], log),
        lambda: toolchain.run([str(venv / "bin" / "rknnlite"), "demo", "--runs", "2"], log, cwd=scratch),
        lambda: toolchain.run([python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *files], log,
                              cwd=scratch),
    ])
    if outcome["result"] == "passed" and target.python in OLDEST_NUMPY_PYTHONS:
        old = test_with_oldest_numpy(target, venv, log)
        outcome["kind"] += f" + {old['interpreter']}"
        if old["result"] != "passed":
            outcome.update(result="failed", summary=f"with {old['interpreter']}: {old['summary']}")
        else:
            outcome["summary"] += f"; with {old['summary']}"
    return outcome


def oldest_numpy(pyproject: Path = Path(__file__).resolve().parents[2] / "pyproject.toml") -> str:
    """The oldest NumPy the dependencies accept, as a pip requirement (``numpy==1.22.*``)."""
    found = re.search(r'^dependencies\s*=.*?"numpy>=(\d+\.\d+)', pyproject.read_text(), re.M)
    return f"numpy=={found.group(1)}.*"


def test_with_oldest_numpy(target: Target, venv: Path, log: Path) -> dict:
    """In the test venv of an x86_64 wheel: downgrades NumPy to the oldest the dependencies
    accept and imports every extension and runs the demo. The extensions are built against
    NumPy 2's headers with ``NPY_TARGET_VERSION`` (toolchain.compile_env); without it they
    would refuse the older NumPy at import."""
    python = str(venv / "bin" / "python")
    # run from the venv's folder: from the source tree, ``import rknnlite`` would find the
    # uncompiled package there first and import no extension at all
    code = ("import pkgutil, importlib, sys, numpy, rknnlite._native as n\n"
            "assert n.__file__.startswith(sys.prefix), n.__file__\n"
            "names = [m.name for m in pkgutil.iter_modules(n.__path__)]\n"
            "assert names, 'no extension in ' + n.__path__[0]\n"
            "[importlib.import_module('rknnlite._native.' + m) for m in names]\n"
            "print(numpy.__version__, len(names), 'extensions imported')\n")
    imported = []
    outcome = _outcome("oldest numpy", oldest_numpy(), [
        lambda: toolchain.run([python, "-m", "pip", "install", "-q", "--only-binary=:all:",
                               oldest_numpy()], log),
        lambda: imported.append(toolchain.run([python, "-c", code], log, cwd=venv).strip()) or "",
        lambda: toolchain.run([str(venv / "bin" / "rknnlite"), "demo", "--runs", "2"], log,
                              cwd=venv),
    ])
    if outcome["result"] == "passed":
        outcome["summary"] = f"numpy {imported[0]}, demo ran"
    return outcome


def wheelhouse_platforms(target: Target) -> list[str]:
    """The platform tags ``pip download`` fetches the target's dependencies for: manylinux2014
    and manylinux_2_28 (NumPy's CPython 3.14 wheels are 2_28 only; every test root has a newer
    glibc), or musllinux_1_2 and its predecessor 1_1 (NumPy 2.0's CPython 3.9 wheels are 1_1)."""
    if target.libc == "musllinux":
        return [f"musllinux_1_2_{target.arch}", f"musllinux_1_1_{target.arch}"]
    return [f"manylinux2014_{target.arch}", f"manylinux_2_28_{target.arch}"]


def _wheelhouse(target: Target, cache: Path, log: Path) -> Path:
    """Binary wheels of the runtime and test requirements for a target tested in a root,
    downloaded on the host (nothing compiles in the root, or under emulation)."""
    dest = cache / "wheelhouse" / target.name
    stamp = dest / ".complete"
    wanted = [*RUNTIME_REQUIREMENTS, *TEST_REQUIREMENTS, *backports(target.python), PIP]
    if stamp.is_file() and stamp.read_text().split() == wanted:
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for tag in wheelhouse_platforms(target) for arg in ("--platform", tag)]
    toolchain.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                   *platforms, "--python-version", target.python,
                   "--implementation", "cp", "-d", str(dest), *wanted], log)
    stamp.write_text("\n".join(wanted) + "\n")
    return dest


def backports(python: str) -> list[str]:
    """What the requirements need on ``python`` beyond what ``pip download`` fetches for it.

    ``pip download --python-version`` picks wheels for the target version but evaluates the
    environment markers for the interpreter that runs it (the tools venv's 3.11): pytest's
    ``exceptiongroup; python_version < "3.11"`` and the like are left out for 3.9 and 3.10."""
    if tuple(map(int, python.split("."))) < (3, 11):
        return ["exceptiongroup>=1", "tomli>=1", "typing-extensions>=4.6"]
    return []


BINFMT = Path("/proc/sys/fs/binfmt_misc")
BINFMT_CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")  # from Debian's qemu-user-static


def ensure_binfmt() -> str | None:
    """Makes the kernel run aarch64 programs through qemu (binfmt_misc), as the tests spawn
    interpreters of their own (venv's ensurepip, the CLI tests). Registers Debian's entry,
    whose ``F`` flag opens qemu at registration, so it also works inside the chroot. Returns
    None when it is in place, else why not."""
    if not (BINFMT / "register").exists():
        mounted = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
                                 capture_output=True, text=True)
        if mounted.returncode:
            return f"binfmt_misc cannot be mounted: {mounted.stderr.strip()}"
    entry = BINFMT / "qemu-aarch64"
    if not entry.exists():
        if not BINFMT_CONF.is_file():
            return f"{BINFMT_CONF} missing (apt-get install qemu-user-static)"
        try:
            (BINFMT / "register").write_text(BINFMT_CONF.read_text().strip())
        except OSError as exc:
            return f"binfmt_misc refused the qemu-aarch64 entry: {exc}"
    text = entry.read_text()
    flags = re.search(r"^flags:\s*(\S*)", text, re.M)
    if not text.startswith("enabled") or not flags or "F" not in flags.group(1):
        return f"binfmt_misc's qemu-aarch64 entry is disabled or lacks the F flag:\n{text}"
    return None


def _prepare_root(root: Path, emulated: bool) -> None:
    """Makes an unpacked root enterable (the tests of several targets may share it)."""
    with toolchain.lock(f"prepare-{root}"):
        # merged /usr (trixie's libc6 ships only /usr/lib/ld-linux-aarch64.so.1): the links that
        # a debootstrapped root has and an unpacked one lacks
        for alias in ("bin", "sbin", "lib"):
            if not os.path.lexists(root / alias) and (root / "usr" / alias).is_dir():
                os.symlink(f"usr/{alias}", root / alias)
        (root / "dev").mkdir(exist_ok=True)
        for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
            node = root / "dev" / name
            if not node.exists():
                subprocess.run(["mknod", "-m", "666", str(node), "c", "1", str(minor)], check=True)
        # /dev/shm: POSIX semaphores (multiprocessing's locks, used by the fork tests)
        for sub in ("proc", "tmp", "dev/shm"):
            (root / sub).mkdir(exist_ok=True)
        os.chmod(root / "tmp", 0o1777)
        os.chmod(root / "dev" / "shm", 0o1777)
        # pip (Debian's ensurepip wheel, 25.x in trixie) loads the system CA bundle when it starts,
        # even with --no-index; an unpacked root has no bundle (update-ca-certificates never ran),
        # so it gets the host's public one
        bundle = root / "etc" / "ssl" / "certs" / "ca-certificates.crt"
        if not bundle.is_file() and HOST_CA_BUNDLE.is_file():
            bundle.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(HOST_CA_BUNDLE, bundle)
        inside = root / "usr" / "bin" / "qemu-aarch64-static"
        if emulated and not (inside.is_file() and inside.read_bytes() == Path(QEMU).read_bytes()):
            # replaced, not rewritten: another test of the same root may be running it
            inside.parent.mkdir(parents=True, exist_ok=True)
            partial = inside.with_suffix(".partial")
            shutil.copyfile(QEMU, partial)
            os.chmod(partial, 0o755)
            os.replace(partial, inside)


def _interpreter(target: Target, runner: list[str], cache: Path, log: Path) -> tuple[Path, str, str]:
    """The root a target is tested in (prepared), the interpreter's path inside it and its
    description: Debian's python3.X in its suite's arm64 root, or one built here (``cpython``)."""
    if cpython.needed(target):
        root = cpython.root_for(target, cache, log)
        _prepare_root(root, bool(runner))
        path, label = cpython.install(target, root, runner, cache, log)
        return root, path, label
    suite = target.debian_suite
    root = toolchain.debian_root(suite, target.python, DEBIAN_ARCH[target.arch], cache, log)
    _prepare_root(root, bool(runner))
    version = (root / "usr" / "bin" / f"python{target.python}").resolve().name
    return root, f"/usr/bin/python{target.python}", f"Debian {suite} arm64 {version}"


def emulation(emulated: bool) -> tuple[list[str], dict[str, str]]:
    """The command prefix that runs an aarch64 program under qemu as ``BOARD_CPU``, and the
    environment that makes the programs it spawns (through binfmt_misc, which passes no
    ``-cpu``) emulate the same CPU; nothing for a native target."""
    if not emulated:
        return [], {}
    return [QEMU, "-cpu", BOARD_CPU], {"QEMU_CPU": BOARD_CPU}


def test_in_root(target: Target, wheel: Path, source: Path, cache: Path, log: Path,
                 core: bool, timeout: float) -> dict:
    """In the target's root (``chroot``; aarch64 under qemu): fresh venv, pip install
    --no-index, demo, and the core suite when ``core``."""
    emulated = target.arch == "aarch64"
    kind = ("core + demo" if core else "import + demo") + (" (qemu)" if emulated else "")
    if emulated:
        if not Path(QEMU).is_file():
            return {"kind": kind, "result": "not run", "interpreter": "",
                    "summary": f"{QEMU} missing (apt-get install qemu-user-static)"}
        missing = ensure_binfmt()
        if missing:
            return {"kind": kind, "result": "not run", "interpreter": "", "summary": missing}
    runner, qemu_env = emulation(emulated)
    try:
        root, interpreter, label = _interpreter(target, runner, cache, log)
    except toolchain.Unavailable as exc:
        return {"kind": kind, "result": "not run", "interpreter": "", "summary": str(exc)}
    except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
        lines = str(getattr(exc, "output", "") or exc).strip().splitlines()
        return {"kind": kind, "result": "failed", "interpreter": "",
                "summary": f"no interpreter: {lines[-1] if lines else type(exc).__name__}"}
    house = _wheelhouse(target, cache, log)
    inside = Path("/tmp") / f"rknnlite-{target.name}"
    shutil.rmtree(root / inside.relative_to("/"), ignore_errors=True)
    (root / inside.relative_to("/")).mkdir(parents=True)
    shutil.copytree(house, root / inside.relative_to("/") / "wheels")
    shutil.copy(wheel, root / inside.relative_to("/") / "wheels")
    shutil.copytree(source / "tests", root / inside.relative_to("/") / "src" / "tests")
    shutil.copytree(source / "packaging", root / inside.relative_to("/") / "src" / "packaging")
    shutil.copytree(source / "examples", root / inside.relative_to("/") / "src" / "examples")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(inside), "LANG": "C.UTF-8", **qemu_env}

    def guest(*argv: str) -> list[str]:
        return [toolchain.CHROOT, str(root), *runner, *argv]

    python = str(inside / "venv" / "bin" / "python")
    files = [str(inside / "src" / "tests" / name) for name in core_files(source)]
    steps = [
        lambda: toolchain.run(guest(interpreter, "-m", "venv", str(inside / "venv")), log,
                              env=env, timeout=timeout),
        # the pip of 3.9's ensurepip (20.2) knows no musllinux tag
        lambda: toolchain.run(guest(python, "-m", "pip", "install", "-q", "--no-index", "--upgrade",
                                    "--find-links", str(inside / "wheels"), "pip"), log, env=env,
                              timeout=timeout),
        lambda: toolchain.run(guest(python, "-m", "pip", "install", "-q", "--no-index", "--only-binary=:all:",
                                    "--find-links", str(inside / "wheels"), "rknnlite-runtime",
                                    *TEST_REQUIREMENTS), log, env=env, timeout=timeout),
        lambda: toolchain.run(guest(python, "-c", "import platform, rknnlite; print(platform.machine(), "
                                    "rknnlite.__version__, rknnlite.__file__)"), log, env=env),
        lambda: toolchain.run(guest(python, str(inside / "venv" / "bin" / "rknnlite"), "demo",
                                    "--runs", "2"), log, env=env, timeout=timeout),
    ]
    if core:
        steps.append(lambda: toolchain.run(guest(python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                                                 *files), log, env=env, timeout=timeout))
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        outcome = _outcome(kind, label + (" under qemu" if emulated else ""), steps)
    finally:
        subprocess.run(["umount", str(root / "proc")], check=False)
    if outcome["result"] == "passed" and not core:
        outcome["summary"] = "imported and ran the demo"
    return outcome
