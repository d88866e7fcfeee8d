#!/usr/bin/env python3
"""Cross-builds the linux_aarch64 wheel of rknnlite on an x86_64 host.

    python3 packaging/cross_build_arm64.py --root ROOT --src SRC --out DIR [--jobs N]

ROOT is an arm64 Debian root (made by packaging/build_arm64.sh) holding the target interpreter's
headers (python3-dev), numpy's headers (python3-numpy) and the C library (libc6-dev). SRC is an
unpacked sdist (a scratch copy: the build writes into it). The wheel lands in DIR; its path is the
last line printed.

Only the compiler runs for the target; nothing is emulated:

1. Cython runs on the host. Its C output does not depend on the architecture, and the C is
   compiled later against the target's headers. The Cython step is setup.py's own ``cythonize``
   call (setup.py is executed with ``setuptools.setup`` intercepted), so the module list, the
   compiler directives, include dirs, macros and extra flags are the ones a native build uses.
2. Each generated C file is compiled and linked with the cross compiler named by the target
   interpreter's sysconfig (``CC``/``LDSHARED``, ``aarch64-linux-gnu-gcc`` on Debian:
   ``apt-get install gcc-aarch64-linux-gnu``) and the flags setuptools would take from that
   sysconfig (CFLAGS, CCSHARED, LDSHARED, the environment's CFLAGS and LDFLAGS). The interpreter's
   and numpy's headers are the root's; ``--sysroot=ROOT`` puts ROOT/usr/include after the cross
   toolchain's own C library headers, which is where the interpreter's pyconfig.h finds its
   multiarch half. The C library headers and the libraries linked are the cross toolchain's
   (glibc 2.36 on Debian 12); a C library no newer than the root's (2.41 on Debian 13) is what
   keeps the extensions loadable there. The host's numpy include dir is replaced by
   the root's. x86-only code in cython/src/*.c is under ``#if defined(__x86_64__)``, so the
   aarch64 build takes the portable paths.
3. The Python files and dist-info come from setuptools' bdist_wheel run on the host without
   extensions (a ``py3-none-any`` wheel); the script adds the cross-built extensions, marks the
   wheel as platlib and tags it ``cpXY-cpXY-linux_<machine>`` from the target's sysconfig, and
   rewrites RECORD.

Needs on the host: Python with Cython 3, numpy and setuptools (the build requirements), and the
cross compiler. Exits non-zero with a message on the first failure.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import glob
import hashlib
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ELF_MACHINE = {"aarch64": 183}  # e_machine of the extensions we expect, by target machine


class BuildError(Exception):
    """A step of the cross build failed; the message says which and why."""


def log(message: str) -> None:
    print(f"[cross_build_arm64 {time.strftime('%H:%M:%S', time.gmtime())}] {message}", flush=True)


def target_sysconfig(root: Path) -> dict:
    """The build-time variables of the root's python3 (its ``_sysconfigdata_*.py``)."""
    candidates = sorted(glob.glob(str(root / "usr/lib/python3.*/_sysconfigdata__*-linux-gnu.py")))
    # Debian ships the same data twice (``_sysconfigdata__<multiarch>`` and
    # ``_sysconfigdata__linux_<multiarch>``); either will do.
    if not candidates:
        raise BuildError(f"no _sysconfigdata__*.py under {root}/usr/lib/python3.*: is python3 installed in the root?")
    namespace: dict = {}
    exec(compile(Path(candidates[0]).read_text(), candidates[0], "exec"), namespace)
    variables = namespace["build_time_vars"]
    for key in ("CC", "LDSHARED", "CFLAGS", "CCSHARED", "EXT_SUFFIX", "INCLUDEPY", "VERSION", "MULTIARCH"):
        if key not in variables:
            raise BuildError(f"{candidates[0]} has no {key}")
    return variables


def target_numpy_include(root: Path) -> Path:
    """numpy's C include dir inside the root (numpy 2: numpy/_core/include, numpy 1: numpy/core/include)."""
    for pattern in ("usr/lib/python3/dist-packages/numpy/*/include", "usr/lib/python3*/site-packages/numpy/*/include",
                    "usr/local/lib/python3*/dist-packages/numpy/*/include"):
        for found in sorted(glob.glob(str(root / pattern))):
            if (Path(found) / "numpy" / "arrayobject.h").exists():
                return Path(found)
    raise BuildError(f"numpy's headers are not in {root}: install python3-numpy (and python3-numpy-dev) there")


def cythonize_with_setup_py(src: Path) -> dict:
    """Runs SRC/setup.py on the host with ``setuptools.setup`` intercepted.

    Returns the keyword arguments setup.py passed, whose ``ext_modules`` are cythonize's output:
    Extension objects whose sources are the generated C files (paths relative to SRC).
    """
    import setuptools

    captured: dict = {}
    real_setup = setuptools.setup
    setuptools.setup = lambda **kwargs: captured.update(kwargs)
    old_cwd, old_path = os.getcwd(), list(sys.path)
    only = os.environ.pop("RKNNLITE_NATIVE_ONLY", None)  # a wheel needs every module
    os.chdir(src)  # setup.py names its sources and build dir relative to the current directory
    sys.path.insert(0, str(src))
    try:
        runpy.run_path(str(src / "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = real_setup
        os.chdir(old_cwd)
        sys.path[:] = old_path
        if only is not None:
            os.environ["RKNNLITE_NATIVE_ONLY"] = only
    if not captured.get("ext_modules"):
        raise BuildError(f"{src}/setup.py declared no extensions")
    return captured


def compile_extension(ext, src: Path, root: Path, conf: dict, numpy_include: Path, host_numpy_include: str,
                      work: Path) -> Path:
    """Compiles and links one extension with the cross compiler; returns the built .so."""
    env_cflags = shlex.split(os.environ.get("CFLAGS", ""))
    env_ldflags = shlex.split(os.environ.get("LDFLAGS", ""))
    sysroot = [f"--sysroot={root}"]
    includes = []
    for directory in ext.include_dirs:
        if os.path.abspath(directory) == os.path.abspath(host_numpy_include):
            directory = str(numpy_include)
        includes.append("-I" + (directory if os.path.isabs(directory) else str(src / directory)))
    # setuptools adds the interpreter's include dir; pyconfig.h there includes the multiarch one,
    # which --sysroot finds under ROOT/usr/include/<multiarch>.
    includes.append("-I" + str(root / conf["INCLUDEPY"].lstrip("/")))
    macros = []
    for name, value in ext.define_macros:
        macros.append(f"-D{name}" if value is None else f"-D{name}={value}")
    macros += [f"-U{name}" for name in ext.undef_macros]
    target = work / (ext.name.replace(".", "/") + conf["EXT_SUFFIX"])
    target.parent.mkdir(parents=True, exist_ok=True)
    objects = []
    for source in ext.sources:
        obj = work / "obj" / (Path(source).stem + ".o")
        obj.parent.mkdir(parents=True, exist_ok=True)
        command = (shlex.split(conf["CC"]) + sysroot + shlex.split(conf["CFLAGS"]) + env_cflags
                   + shlex.split(conf["CCSHARED"]) + macros + includes
                   + ["-c", str(src / source), "-o", str(obj)] + list(ext.extra_compile_args))
        run(command, f"compiling {source}")
        objects.append(str(obj))
    command = (shlex.split(conf["LDSHARED"]) + sysroot + env_ldflags + env_cflags + objects
               + [f"-L{d}" for d in ext.library_dirs] + [f"-l{lib}" for lib in ext.libraries]
               + ["-o", str(target)] + list(ext.extra_link_args))
    run(command, f"linking {ext.name}")
    return target


def run(command: list, what: str) -> None:
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise BuildError(f"{what} failed ({done.returncode}): {shlex.join(command)}\n{done.stdout[-4000:]}")


def check_elf(path: Path, machine: str) -> None:
    """Raises unless PATH is a 64-bit little-endian ELF shared object for MACHINE."""
    header = path.read_bytes()[:20]
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        raise BuildError(f"{path} is not a 64-bit little-endian ELF file")
    e_type = int.from_bytes(header[16:18], "little")
    e_machine = int.from_bytes(header[18:20], "little")
    if e_type != 3 or e_machine != ELF_MACHINE.get(machine):
        raise BuildError(f"{path}: ELF type {e_type}, machine {e_machine}; expected a shared object (3) "
                         f"for {machine} ({ELF_MACHINE.get(machine)})")


def pure_wheel(src: Path, setup_kwargs: dict, out: Path) -> Path:
    """Builds SRC's wheel without extensions (Python files and dist-info only) into OUT."""
    import setuptools

    kwargs = dict(setup_kwargs, ext_modules=[])
    old_cwd = os.getcwd()
    os.chdir(src)
    try:
        setuptools.setup(**kwargs, script_args=["-q", "bdist_wheel", "--dist-dir", str(out)])
    finally:
        os.chdir(old_cwd)
    wheels = sorted(out.glob("*-py3-none-any.whl"))
    if len(wheels) != 1:
        raise BuildError(f"expected one py3-none-any wheel in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def platform_wheel(pure: Path, extensions: dict, tag: str, out: Path) -> Path:
    """Copies the pure wheel PURE into a platform wheel named for TAG with EXTENSIONS added.

    EXTENSIONS maps archive names (``rknnlite/_native/x.cpython-...so``) to built files.
    """
    distribution, version = pure.name.split("-")[:2]
    target = out / f"{distribution}-{version}-{tag}.whl"
    records = []
    with zipfile.ZipFile(pure) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        names = source.namelist()
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        wheel_name = record_name[: -len("RECORD")] + "WHEEL"
        for name in names:
            if name == record_name:
                continue
            data = source.read(name)
            if name == wheel_name:
                # (header lines only: an empty line would end the headers)
                lines = [line for line in data.decode().splitlines()
                         if line.strip() and not line.startswith(("Root-Is-Purelib:", "Tag:"))]
                lines += ["Root-Is-Purelib: false", f"Tag: {tag}"]
                data = ("\n".join(lines) + "\n").encode()
            info = source.getinfo(name)
            wheel.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            records.append(record_line(name, data))
        for name, path in sorted(extensions.items()):
            data = path.read_bytes()
            info = zipfile.ZipInfo(name, date_time=time.gmtime(path.stat().st_mtime)[:6])
            info.external_attr = 0o755 << 16
            wheel.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            records.append(record_line(name, data))
        records.append(f"{record_name},,")
        wheel.writestr(record_name, "\n".join(records) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, type=Path, help="arm64 root with python3-dev, python3-numpy, libc6-dev")
    parser.add_argument("--src", required=True, type=Path, help="unpacked sdist (scratch: the build writes into it)")
    parser.add_argument("--out", required=True, type=Path, help="directory for the wheel")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    args = parser.parse_args(argv)
    root, src, out = args.root.resolve(), args.src.resolve(), args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        conf = target_sysconfig(root)
        machine = conf["MULTIARCH"].split("-")[0]
        compiler = shlex.split(conf["CC"])[0]
        if not any(os.access(os.path.join(d, compiler), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)):
            raise BuildError(f"the cross compiler {compiler} is not on PATH (apt-get install gcc-{conf['MULTIARCH']})")
        numpy_include = target_numpy_include(root)
        import numpy

        start = time.monotonic()
        log(f"cythonizing on the host ({src}/setup.py)")
        setup_kwargs = cythonize_with_setup_py(src)
        extensions = setup_kwargs["ext_modules"]
        modules = sorted(ext.name.rsplit(".", 1)[-1] for ext in extensions)
        sources = sorted(path.stem for path in (src / "cython").glob("*/*.pyx"))
        if modules != sources:
            raise BuildError(f"setup.py declared the modules {modules}; {src}/cython has {sources}")
        log(f"cythonized {len(extensions)} modules in {time.monotonic() - start:.0f} s")

        start = time.monotonic()
        log(f"cross-compiling with {compiler} (sysroot {root}, numpy headers {numpy_include}, {args.jobs} jobs)")
        work = Path(tempfile.mkdtemp(prefix="cross-arm64-", dir=src))
        # largest C files first, so that the last job to start is a short one
        extensions.sort(key=lambda e: -sum((src / s).stat().st_size for s in e.sources))
        built = {}
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = {pool.submit(compile_extension, ext, src, root, conf, numpy_include, numpy.get_include(), work): ext
                       for ext in extensions}
            for future in concurrent.futures.as_completed(futures):
                path = future.result()
                check_elf(path, machine)
                built[str(path.relative_to(work))] = path
                log(f"built {path.name}")
        log(f"cross-compiled {len(built)} extensions in {time.monotonic() - start:.0f} s")

        start = time.monotonic()
        python_tag = "cp" + conf["VERSION"].replace(".", "")
        tag = f"{python_tag}-{python_tag}-linux_{machine}"
        with tempfile.TemporaryDirectory(prefix="pure-wheel-") as scratch:
            pure = pure_wheel(src, setup_kwargs, Path(scratch))
            wheel = platform_wheel(pure, built, tag, out)
        log(f"assembled {wheel.name} in {time.monotonic() - start:.0f} s")
    except BuildError as error:
        print(f"cross_build_arm64.py: {error}", file=sys.stderr)
        return 1
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
