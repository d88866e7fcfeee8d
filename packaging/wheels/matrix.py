"""Builds, checks and tests the wheel matrix into dist/ (run by packaging/build_wheels.sh).

    matrix.py [--only PATTERNS] [--jobs N] [--force] [--qemu-core 3.11,...] [--table-only]

For each target (packaging/wheels/targets.py): the sdist of the checked-out commit, Cython run
once (setup.py's own cythonize call) and the C compiled per target by setuptools with zig as
the compiler (``toolchain.compile_env``); ``auditwheel show`` checks the tag (``Matrix.check``)
and ``wheel tags`` writes it; ``testing`` installs and tests the wheel where it would run. Only a wheel whose tests passed is
copied into dist/. Each result is recorded in packaging/wheels.json at once, so an interrupted
run resumes: a target already built, checked and passed for the same commit is skipped unless
``--force``. The table in packaging/README.md is regenerated from wheels.json at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import manifest as manifest_io  # noqa: E402
import testing  # noqa: E402
import toolchain  # noqa: E402
from targets import PYTHONS, Target, parse_selection  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "packaging" / "wheels.json"
README = REPO / "packaging" / "README.md"
CONSISTENT = re.compile(r'consistent with\s+the following platform tag:\s+"([^"]+)"', re.S)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def source_commit() -> str:
    """HEAD's short hash, with ``-dirty`` when the work tree has uncommitted changes (other
    than this script's own outputs, the manifest and the README's table)."""
    commit = git("rev-parse", "--short=12", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                ":!packaging/wheels.json", ":!packaging/README.md")
    return commit + ("-dirty" if dirty else "")


def project_version() -> str:
    text = (REPO / "rknnlite" / "_version.py").read_text()
    return re.search(r'__version__\s*=\s*"([^"]+)"', text).group(1)


def seed_tree(commit: str, version: str, cache: Path, log: Path) -> Path:
    """The unpacked sdist of ``commit`` with Cython already run in it (a dirty tree is
    rebuilt every time)."""
    seed = cache / "seed" / commit
    stamp = seed / ".rknnlite-cythonized"
    if stamp.is_file() and not commit.endswith("-dirty"):
        return seed
    shutil.rmtree(seed, ignore_errors=True)
    out = cache / "sdist" / commit
    shutil.rmtree(out, ignore_errors=True)
    toolchain.run([sys.executable, "-m", "build", "--sdist", "-o", str(out), str(REPO)], log)
    sdist = next(out.glob(f"rknnlite_runtime-{version}.tar.gz"))
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        try:
            tar.extractall(seed.parent / "unpack", filter="data")
        except TypeError:  # Python before 3.11.4 / 3.10.12: no extraction filters
            tar.extractall(seed.parent / "unpack")
    (seed.parent / "unpack" / top).rename(seed)
    shutil.rmtree(seed.parent / "unpack", ignore_errors=True)
    # setup.py runs cythonize when it is loaded; any command will do
    toolchain.run([sys.executable, "setup.py", "--name"], log, cwd=seed)
    stamp.touch()
    return seed


def target_allows(wanted: str, found: str) -> bool:
    """Whether a wheel consistent with platform tag ``found`` may carry ``wanted``: the same
    C library family and architecture, and a version no newer (``manylinux_2_5_x86_64``
    allows ``manylinux_2_17_x86_64``)."""
    pattern = re.compile(r"(manylinux|musllinux)_(\d+)_(\d+)_(\w+)")
    a, b = pattern.fullmatch(wanted), pattern.fullmatch(found)
    if not a or not b or (a[1], a[4]) != (b[1], b[4]):
        return False
    return (int(b[2]), int(b[3])) <= (int(a[2]), int(a[3]))


def show_verdict(shown: str, name: str) -> str:
    """The platform tag that ``auditwheel show`` printed for wheel ``name``; raises when it
    printed none or did not say that the wheel requires no external shared library."""
    flat = " ".join(shown.split())
    found = CONSISTENT.search(flat)
    if not found:
        raise RuntimeError(f"auditwheel show printed no platform tag for {name}:\n{shown}")
    if "requires no external shared libraries" not in flat:
        raise RuntimeError(f"auditwheel: {name} needs external shared libraries:\n{shown}")
    return found.group(1)


def musl_needed(wheel: Path, arch: str, tools: Path, log: Path) -> Path:
    """The musl wheel with each extension's C library dependency named as on Alpine, where
    musllinux wheels are built: ``libc.musl-<arch>.so.1`` instead of zig's ``libc.so``.

    musl's loader takes any ``libc.*`` dependency for itself, so both load; but auditwheel
    recognises musl only by that name (or by a ``-linux-musl`` extension suffix, which the
    3.9 and 3.10 wheels do not have), and looks ``libc.so`` up on the host, where it finds
    glibc's linker script and fails to read it as ELF. ``patchelf --replace-needed`` changes
    only that entry; ``wheel pack`` rewrites the RECORD."""
    unpacked = wheel.parent / "musl-needed"
    shutil.rmtree(unpacked, ignore_errors=True)
    toolchain.run([sys.executable, "-m", "wheel", "unpack", "-d", str(unpacked), str(wheel)], log)
    tree = next(unpacked.iterdir())
    libraries = sorted(tree.rglob("*.so"))
    for library in libraries:
        needed = toolchain.run([str(tools / "patchelf"), "--print-needed", str(library)], log).split()
        if "libc.so" in needed:
            toolchain.run([str(tools / "patchelf"), "--replace-needed", "libc.so",
                           f"libc.musl-{arch}.so.1", str(library)], log)
    wheel.unlink()
    toolchain.run([sys.executable, "-m", "wheel", "pack", "-d", str(wheel.parent), str(tree)], log)
    shutil.rmtree(unpacked)
    return wheel


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_tags(wheel: Path) -> list[str]:
    """The ``Tag:`` lines of the wheel's WHEEL file."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        text = z.read(name).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


class Matrix:
    """One run over the selected targets; results go to the manifest as they come."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cache = Path(args.cache).resolve()
        self.dist = Path(args.dist).resolve()
        self.commit = source_commit()
        self.version = project_version()
        self.lock = threading.Lock()
        self.manifest = manifest_io.load(MANIFEST)
        self.manifest.update({"project": "rknnlite-runtime", "version": self.version,
                              "pythons": list(PYTHONS)})
        self.qemu_core = {v for v in args.qemu_core.split(",") if v}

    def record(self, name: str, entry: dict | None, skipped: str | None = None) -> None:
        with self.lock:
            self.manifest["wheels"].pop(name, None)
            self.manifest["skipped"].pop(name, None)
            if entry is not None:
                self.manifest["wheels"][name] = entry
            if skipped is not None:
                self.manifest["skipped"][name] = skipped
            manifest_io.save(MANIFEST, self.manifest)

    def done_before(self, target: Target) -> bool:
        entry = self.manifest["wheels"].get(target.name)
        if self.args.force or not entry or entry["commit"] != self.commit:
            return False
        return entry["published"] and (self.dist / entry["file"]).is_file() \
            and sha256(self.dist / entry["file"]) == entry["sha256"]

    def build(self, target: Target, seed: Path, log: Path) -> Path:
        """Compiles the wheel (``linux_<arch>``) and returns it."""
        include, _ = toolchain.headers(target, self.cache, log)
        python = toolchain.build_venv(target.python, self.cache, log)
        env = toolchain.compile_env(target, include, self.cache, log)
        work = self.cache / "work" / target.name
        raw = self.cache / "raw" / target.name
        for d in (work, raw):
            shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(seed, work, symlinks=True)
        toolchain.run([str(python), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps",
                       "-w", str(raw), str(work)], log, env=env)
        return next(raw.glob("*.whl"))

    def check(self, target: Target, raw: Path, log: Path) -> tuple[Path, str]:
        """Checks the ``linux_<arch>`` wheel with ``auditwheel show`` and tags it: returns the
        tagged wheel and the tag auditwheel found it consistent with.

        ``auditwheel repair`` only repairs wheels of the host's architecture, and these wheels
        need no grafted library, so the check is ``show``'s verdict: no external library, and
        a platform tag no newer than the target's. The wheel is then retagged
        (``wheel tags``) and shown again."""
        tools = Path(sys.executable).parent
        if target.libc == "musllinux":
            raw = musl_needed(raw, target.arch, tools, log)
        verdict = self.auditwheel(tools, raw, log)
        if verdict != target.platform_tag and not target_allows(target.platform_tag, verdict):
            raise RuntimeError(f"auditwheel: {raw.name} is consistent with {verdict}, "
                               f"not {target.platform_tag}")
        out = self.cache / "checked" / self.commit / target.name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        tags = target.platform_tag
        if target.libc == "manylinux":  # PEP 599's alias of manylinux_2_17
            tags += f".manylinux2014_{target.arch}"
        printed = toolchain.run([sys.executable, "-m", "wheel", "tags", "--platform-tag", tags,
                                 str(raw)], log)
        made = raw.parent / printed.strip().splitlines()[-1]  # wheel prints the new name
        wheel = out / made.name
        shutil.move(made, wheel)
        again = self.auditwheel(tools, wheel, log)
        if again != verdict:
            raise RuntimeError(f"auditwheel: the retagged {wheel.name} is consistent with {again}")
        return wheel, verdict

    def auditwheel(self, tools: Path, wheel: Path, log: Path) -> str:
        """``auditwheel show``'s platform tag for ``wheel``; raises when it names an external
        shared library. ``-v``: when the versioned symbols constrain the tag (GLIBC_2.14's
        memcpy on x86_64, whose oldest policy is manylinux_2_5), ``show`` stops before its
        verdict on external libraries unless it is verbose."""
        shown = toolchain.run([str(tools / "auditwheel"), "-v", "show", str(wheel)], log)
        return show_verdict(shown, wheel.name)

    def test(self, target: Target, wheel: Path, seed: Path, log: Path) -> dict:
        if target.arch == "x86_64" and target.libc == "manylinux":
            return testing.test_x86_64(target, wheel, seed, self.cache, log)
        return testing.test_in_root(target, wheel, seed, self.cache, log,
                                    core=target.arch == "x86_64" or target.python in self.qemu_core,
                                    timeout=self.args.timeout)

    def one(self, target: Target, seed: Path) -> str:
        if self.done_before(target):
            return f"{target.name}: already built, checked and passed for {self.commit}"
        log = self.cache / "logs" / f"{target.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        try:
            _, headers_from = toolchain.headers(target, self.cache, log)
            raw = self.build(target, seed, log)
            wheel, consistent = self.check(target, raw, log)
        except toolchain.Unavailable as exc:
            self.record(target.name, None, skipped=str(exc))
            return f"{target.name}: skipped: {exc}"
        except (subprocess.CalledProcessError, RuntimeError, StopIteration) as exc:
            self.record(target.name, None, skipped=f"build or check failed (log: {log.name}): "
                        f"{str(getattr(exc, 'output', '') or exc).strip().splitlines()[-1:]}")
            return f"{target.name}: FAILED to build or check; see {log}"
        result = self.test(target, wheel, seed, log)
        published = result["result"] == "passed"
        stale = self.dist / wheel.name
        if published:
            self.dist.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(wheel, stale)
        elif stale.exists():
            stale.unlink()
        self.record(target.name, {
            "file": wheel.name, "size": wheel.stat().st_size, "sha256": sha256(wheel),
            "tags": wheel_tags(wheel), "python": target.python, "platform_tag": target.platform_tag,
            "commit": self.commit, "headers": headers_from, "auditwheel": consistent,
            "test": result, "published": published,
        })
        return f"{target.name}: {wheel.name}: test {result['result']} ({result['summary']})"

    def run(self, targets: list[Target]) -> int:
        log = self.cache / "logs" / "common.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        seed = seed_tree(self.commit, self.version, self.cache, log)
        failed = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.args.jobs) as pool:
            for line in pool.map(lambda t: self.one(t, seed), targets):
                print(line, flush=True)
                failed += "FAILED" in line or "test failed" in line
        manifest_io.write_table(README, self.manifest)
        return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="all", help="comma-separated target patterns "
                        "(fnmatch on e.g. cp311-manylinux_aarch64); default all")
    parser.add_argument("--jobs", type=int, default=2, help="targets at once (default 2)")
    parser.add_argument("--force", action="store_true", help="rebuild targets already passed")
    parser.add_argument("--qemu-core", default="3.11",
                        help="versions whose aarch64 wheels (glibc and musl) run the core "
                             "suite under qemu (the others: import and demo); default 3.11")
    parser.add_argument("--cache", default=str(REPO / "build" / "wheel-cache"),
                        help="toolchains, Debian roots, venvs, work trees, logs")
    parser.add_argument("--dist", default=str(REPO / "dist"), help="where passing wheels go")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds for each emulated step (default 3600)")
    parser.add_argument("--table-only", action="store_true",
                        help="only regenerate packaging/README.md's table from wheels.json")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    if args.table_only:
        manifest_io.write_table(README, manifest_io.load(MANIFEST))
        return 0
    try:
        targets = parse_selection(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    return Matrix(args).run(targets)


if __name__ == "__main__":
    sys.exit(main())
