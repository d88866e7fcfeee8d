"""Test interpreters built from source, for the targets no distribution reachable here has an
interpreter for: musl CPython (x86_64 and aarch64, every version) and glibc aarch64 CPython 3.10
and 3.12 (Debian never released them; Ubuntu's arm64 archive is not reachable).

Each interpreter is cross-compiled with zig's clang for the target's triple, from the upstream
source tarball that Debian or Ubuntu ships (``SOURCES``: pinned address and SHA-256), with zlib
and libffi (``DEPENDENCIES``) linked in statically. It is installed under ``/opt/pythonX.Y`` of
the root it is tested in (``root_for``): a root holding only Debian's ``musl`` package for the
musl targets (no glibc at all, as on Alpine), Debian bookworm arm64 for glibc aarch64. Its
``include/pythonX.Y`` also gives the headers of the glibc aarch64 3.10 and 3.12 wheels.

What the cross build needs besides the knobs autoconf documents:

* the executable is position-independent (``-pie``, through ``LINKCC``): a non-PIE musl executable with exported
  symbols (CPython's ``-export-dynamic``) crashes in musl's loader before ``main``;
* the host's system header and library dirs never reach the compile: CPython 3.9-3.11's
  setup.py adds ``/usr/include`` and the Debian multiarch dirs (from ``cc -E -v`` and
  ``dpkg-architecture``), which are glibc's headers for the build host, so the compiler
  wrapper drops them, ``dpkg-architecture`` is hidden and ``pkg-config`` disabled;
* musl is told apart from glibc by its headers: CPython 3.13 and later preprocess
  ``Misc/platform_triplet.c``, which includes ``<stdarg.h>`` and looks for musl's
  ``__DEFINED_va_list``, but zig's clang finds its own ``stdarg.h`` first, so the triplet came
  out empty (extension suffix ``.cpython-313.so``, which no musllinux wheel carries); the
  source asks ``<stdio.h>`` instead (musl's, which marks ``va_list`` the same way), and a built
  interpreter whose extension suffix is not the target's is refused (``check_ext_suffix``);
* modules whose libraries are not built here (ssl, sqlite, lzma, bz2, uuid, curses, readline,
  dbm, tkinter) are listed as disabled; the tests and pip (installing from local wheels) need
  none of them, and ctypes (libffi), zlib and the rest of the standard library are built.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import debroot
import toolchain
from targets import DEBIAN_ARCH, Target


@dataclass(frozen=True)
class Source:
    """A source tarball: where it is, its SHA-256, and what it is (for the manifest)."""

    url: str
    sha256: str
    origin: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[1]

    @property
    def version(self) -> str:
        """The upstream version in a CPython tarball's name (``python3.13_3.13.5.orig.tar.xz``)."""
        return re.search(r"_(\d+\.\d+\.\d+)\.orig", self.filename).group(1)


DEBIAN = "http://deb.debian.org/debian/pool/main"
UBUNTU = "http://archive.ubuntu.com/ubuntu/pool/main"
SOURCES = {
    "3.9": Source(f"{DEBIAN}/p/python3.9/python3.9_3.9.2.orig.tar.xz",
                  "3c2034c54f811448f516668dce09d24008a0716c3a794dd8639b5388cbde247d",
                  "CPython 3.9.2 (Debian bullseye's python3.9 source)"),
    "3.10": Source(f"{UBUNTU}/p/python3.10/python3.10_3.10.12.orig.tar.xz",
                   "afb74bf19130e7a47d10312c8f5e784f24e0527981eab68e20546cfb865830b8",
                   "CPython 3.10.12 (Ubuntu jammy's python3.10 source)"),
    "3.11": Source(f"{DEBIAN}/p/python3.11/python3.11_3.11.2.orig.tar.gz",
                   "2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849",
                   "CPython 3.11.2 (Debian bookworm's python3.11 source)"),
    "3.12": Source(f"{UBUNTU}/p/python3.12/python3.12_3.12.3.orig.tar.xz",
                   "56bfef1fdfc1221ce6720e43a661e3eb41785dd914ce99698d8c7896af4bdaa1",
                   "CPython 3.12.3 (Ubuntu noble's python3.12 source)"),
    "3.13": Source(f"{DEBIAN}/p/python3.13/python3.13_3.13.5.orig.tar.xz",
                   "93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640",
                   "CPython 3.13.5 (Debian trixie's python3.13 source)"),
    # Debian forky's python3.14 source tarball is not served by the mirror reachable here
    "3.14": Source(f"{UBUNTU}/p/python3.14/python3.14_3.14.4.orig.tar.xz",
                   "d923c51303e38e249136fc1bdf3568d56ecb03214efdef48516176d3d7faaef8",
                   "CPython 3.14.4 (Ubuntu resolute's python3.14 source)"),
}
# bookworm's libffi tarball carries its configure script (trixie's is a git snapshot without)
DEPENDENCIES = {
    "zlib": Source(f"{DEBIAN}/z/zlib/zlib_1.3.dfsg+really1.3.1.orig.tar.gz",
                   "60dd315c07f616887caa029408308a018ace66e3d142726a97db164b3b8f69fb",
                   "zlib 1.3.1 (Debian trixie)"),
    "libffi": Source(f"{DEBIAN}/libf/libffi/libffi_3.4.4.orig.tar.gz",
                     "d66c56ad259a82cf2a9dfc408b32bf5da52371500b84745f7fb8b645712df676",
                     "libffi 3.4.4 (Debian bookworm)"),
}
DISABLED_MODULES = ("_uuid _lzma _bz2 nis _dbm _gdbm _sqlite3 _ssl _hashlib _tkinter readline "
                    "_curses _curses_panel _crypt spwd ossaudiodev").split()
# autoconf cannot run the target's programs, so these answers are given (CPython's cross
# build documentation): /dev/ptmx exists on Linux, /dev/ptc does not, getaddrinfo works
CONFIG_SITE = ("ac_cv_file__dev_ptmx=yes\nac_cv_file__dev_ptc=no\nac_cv_buggy_getaddrinfo=no\n"
               "ac_cv_header_stropts_h=no\n")
HOST_DIRS = ("-I/usr/include", "-I/usr/include/*", "-I/usr/local/include", "-L/usr/lib",
             "-L/usr/lib/*", "-L/lib", "-L/lib64", "-L/usr/lib64", "-L/usr/local/lib")
# the musl roots hold Debian's musl package alone; the glibc aarch64 interpreters go into the
# bookworm root that also tests the 3.11 wheel (glibc 2.36 runs what is built for 2.17)
MUSL_SUITE = "trixie"
GLIBC_ROOT = ("bookworm", "3.11")


def needed(target: Target) -> bool:
    """Whether ``target``'s test interpreter is built here rather than taken from Debian."""
    return target.libc == "musllinux" or (target.arch == "aarch64" and not target.debian_suite)


def prefix(python: str) -> str:
    """Where the interpreter is installed inside its root."""
    return f"/opt/python{python}"


def triple(target: Target) -> tuple[str, str]:
    """The GNU triple autoconf is given (``--host``) and zig's (with the glibc version)."""
    gnu = f"{target.arch}-linux-{'musl' if target.libc == 'musllinux' else 'gnu'}"
    return gnu, target.zig_triple


def root_for(target: Target, cache: Path, log: Path) -> Path:
    """The root the built interpreter runs in (see the module's docstring)."""
    if target.libc == "musllinux":
        with toolchain.lock(f"root-musl-{target.arch}"):
            return debroot.fetch_root(MUSL_SUITE, DEBIAN_ARCH[target.arch], ["musl"], cache, log,
                                      name=f"musl-{target.arch}")
    suite, python = GLIBC_ROOT
    return toolchain.debian_root(suite, python, DEBIAN_ARCH[target.arch], cache, log)


def fetch(source: Source, cache: Path) -> Path:
    """The tarball, downloaded once into ``cache/sources`` and checked against its SHA-256."""
    dest = cache / "sources" / source.filename
    with toolchain.lock(f"source-{source.filename}"):
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_suffix(".partial")
            with urllib.request.urlopen(source.url, timeout=300) as response, \
                    open(partial, "wb") as out:
                shutil.copyfileobj(response, out)
            partial.rename(dest)
        digest = hashlib.sha256(dest.read_bytes()).hexdigest()
        if digest != source.sha256:
            dest.unlink()
            raise toolchain.Unavailable(f"{source.url}: SHA-256 {digest}, expected {source.sha256}")
    return dest


def _unpack(tarball: Path, into: Path) -> Path:
    with tarfile.open(tarball) as tar:
        top = tar.getnames()[0].split("/")[0]
        try:
            tar.extractall(into, filter="tar")
        except TypeError:  # Python before 3.11.4: no extraction filters
            tar.extractall(into)
    return into / top


MUSL_PROBE = ("#  include <stdarg.h>\n#  ifdef __DEFINED_va_list",
              "#  include <stdio.h>\n#  ifdef __DEFINED_va_list")


def detect_musl_by_its_own_header(tree: Path) -> None:
    """Makes ``Misc/platform_triplet.c`` (CPython 3.13 on; earlier versions have none) look for
    musl's mark in a header that zig's clang does not replace (see the module's docstring)."""
    probe = tree / "Misc" / "platform_triplet.c"
    if not probe.is_file():
        return
    text = probe.read_text()
    if MUSL_PROBE[0] not in text:
        raise RuntimeError(f"{probe}: the musl heuristic is not the one expected here "
                           f"({MUSL_PROBE[0]!r}); check how this version detects musl")
    probe.write_text(text.replace(MUSL_PROBE[0], MUSL_PROBE[1]))


def check_ext_suffix(target: Target, stage: Path) -> None:
    """Refuses a built interpreter whose extension suffix is not ``target.ext_suffix`` (what
    the wheels of NumPy and of this project carry): it would import none of them."""
    library = stage / prefix(target.python).lstrip("/") / "lib" / f"python{target.python}"
    found = []
    for data in library.glob("_sysconfigdata_*.py"):
        namespace: dict = {}
        exec(compile(data.read_text(), str(data), "exec"), namespace)
        found.append(namespace["build_time_vars"]["EXT_SUFFIX"])
    if found != [target.ext_suffix]:
        raise RuntimeError(f"the CPython built for {target.zig_triple} has extension suffix "
                           f"{found or 'none'}; expected {target.ext_suffix!r}")


def compiler_dir(target: Target, cache: Path, zig: Path | None = None) -> Path:
    """A folder of small programs that autoconf and make find on PATH: ``<triple>-cc`` (zig's
    clang for the target, dropping the host's system dirs), ``-ar``, ``-ranlib``,
    ``-readelf`` (the host's: it reads any ELF), and a ``dpkg-architecture`` that fails."""
    gnu, target_triple = triple(target)
    tools = cache / "cpython" / "bin" / target.zig_triple
    if zig is None:
        # zig itself, not ``python -m ziglang``: CPython's build sets PYTHONPATH and
        # PYTHONHOME for its own interpreter, which would break the tools venv's
        import ziglang

        zig = Path(ziglang.__file__).parent / "zig"
    patterns = "|".join(HOST_DIRS)
    programs = {
        f"{gnu}-cc": ("#!/bin/sh\n# the build host's system dirs are not the target's\n"
                      "for a do\n  shift\n"
                      f"  case \"$a\" in {patterns}) ;; *) set -- \"$@\" \"$a\";; esac\n"
                      f"done\nexec {zig} cc -target {target_triple} \"$@\"\n"),
        f"{gnu}-ar": f"#!/bin/sh\nexec {zig} ar \"$@\"\n",
        f"{gnu}-ranlib": f"#!/bin/sh\nexec {zig} ranlib \"$@\"\n",
        f"{gnu}-readelf": f"#!/bin/sh\nexec {shutil.which('readelf') or 'readelf'} \"$@\"\n",
        "dpkg-architecture": "#!/bin/sh\nexit 1\n",
    }
    tools.mkdir(parents=True, exist_ok=True)
    for name, text in programs.items():
        path = tools / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            path.chmod(0o755)
    return tools


def build_triple(target: Target) -> str:
    """What configure is told the build machine is. For musl, ``linux-musl``: CPython 3.11 and
    3.12 name musl in their platform triplet (the ``.cpython-311-x86_64-linux-musl.so``
    extension suffix that musllinux wheels carry) only when the *build* OS is musl; the
    aliases still differ from ``--host``, so configure still cross-compiles."""
    return "x86_64-pc-linux-musl" if target.libc == "musllinux" else "x86_64-pc-linux-gnu"


def _env(target: Target, cache: Path, *path: Path) -> dict[str, str]:
    gnu, _ = triple(target)
    env = dict(os.environ)
    env.update({
        "PATH": ":".join(map(str, [compiler_dir(target, cache), *path, env["PATH"]])),
        "CC": f"{gnu}-cc", "AR": f"{gnu}-ar", "RANLIB": f"{gnu}-ranlib",
        "PKG_CONFIG": "false",
        "ZIG_GLOBAL_CACHE_DIR": str(cache / "zig"), "ZIG_LOCAL_CACHE_DIR": str(cache / "zig"),
    })
    return env


def dependencies(target: Target, cache: Path, log: Path) -> Path:
    """zlib and libffi built as static, position-independent libraries for the target's
    triple; returns their install prefix."""
    gnu, _ = triple(target)
    deps = cache / "cpython" / "deps" / target.zig_triple
    stamp = deps / ".built"
    with toolchain.lock(f"deps-{target.zig_triple}"):
        if stamp.is_file():
            return deps
        shutil.rmtree(deps, ignore_errors=True)
        work = cache / "cpython" / "work" / f"deps-{target.zig_triple}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        env = _env(target, cache)
        env["CFLAGS"] = "-O2 -fPIC"
        zlib = _unpack(fetch(DEPENDENCIES["zlib"], cache), work)
        toolchain.run(["./configure", "--static", f"--prefix={deps}"], log, cwd=zlib,
                      env={**env, "CHOST": gnu})
        toolchain.run(["make", "-j2", "install"], log, cwd=zlib, env=env)
        ffi = _unpack(fetch(DEPENDENCIES["libffi"], cache), work)
        # the static trampolines do not build with clang 16 and later against musl
        toolchain.run(["./configure", f"--host={gnu}", "--build=x86_64-pc-linux-gnu",
                       f"--prefix={deps}", "--disable-shared", "--enable-static", "--disable-docs",
                       "--disable-multi-os-directory", "--disable-exec-static-tramp"],
                      log, cwd=ffi, env=env)
        toolchain.run(["make", "-j2", "install"], log, cwd=ffi, env=env)
        shutil.rmtree(work, ignore_errors=True)
        stamp.touch()
        return deps


def build_interpreter(version: str, cache: Path, log: Path) -> str:
    """The interpreter that runs a cross build's own scripts: the host's CPython of exactly the
    source's version, else one built for the host from that source (``build_host``). Another
    patch release does not do: 3.13.5's build fails under 3.13.0 with 3.13.5's library."""
    found = toolchain.host_python(version)
    if found:
        done = subprocess.run([found, "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True)
        if done.stdout.strip() == SOURCES[version].version:
            return found
    return build_host(version, cache, log)


def build(target: Target, cache: Path, log: Path) -> Path:
    """The interpreter for ``target``, installed (``DESTDIR``) into a staging tree under the
    cache; returns that tree, which mirrors the root (``opt/pythonX.Y/...``)."""
    gnu, _ = triple(target)
    name = f"{target.cp}-{target.zig_triple}"
    stage = cache / "cpython" / "stage" / name
    stamp = stage / ".built"
    with toolchain.lock(f"cpython-{name}"):
        if stamp.is_file():
            return stage
        build_python = build_interpreter(target.python, cache, log)
        deps = dependencies(target, cache, log)
        work = cache / "cpython" / "work" / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        tree = _unpack(fetch(SOURCES[target.python], cache), work)
        (tree / "config.site").write_text(CONFIG_SITE)
        if target.libc == "musllinux":
            detect_musl_by_its_own_header(tree)
        (tree / "Modules" / "Setup.local").write_text("*disabled*\n" + "\n".join(DISABLED_MODULES) + "\n")
        # 3.9 and 3.10 find the build interpreter on PATH; 3.11 on are told
        env = _env(target, cache, Path(build_python).parent)
        env.update({
            "CONFIG_SITE": str(tree / "config.site"),
            # -fPIC, not -fPIE: CPython 3.9's setup.py also passes CFLAGS when it links a
            # module (-shared), and zig refuses -fPIE there; PIC objects link into a PIE too.
            # zig makes __DATE__ (Modules/getbuildinfo.c) an error.
            "CFLAGS": "-O2 -fPIC -Wno-error=date-time -Wno-date-time",
            "CPPFLAGS": f"-I{deps}/include",
            "LINKCC": f"{gnu}-cc -pie",  # links the executables only
            "LDFLAGS": f"-L{deps}/lib" + (" -dynamic" if target.libc == "musllinux" else ""),
            "LIBFFI_CFLAGS": f"-I{deps}/include", "LIBFFI_LIBS": f"-L{deps}/lib -lffi",
            "ZLIB_CFLAGS": f"-I{deps}/include", "ZLIB_LIBS": f"-L{deps}/lib -lz",
        })
        configure = ["./configure", f"--host={gnu}", f"--build={build_triple(target)}",
                     f"--prefix={prefix(target.python)}", "--without-ensurepip",
                     "--with-system-ffi", "--enable-ipv6"]
        if target.python not in ("3.9", "3.10"):
            configure.append(f"--with-build-python={build_python}")
        toolchain.run(configure, log, cwd=tree, env=env)
        toolchain.run(["make", "-j2"], log, cwd=tree, env=env)
        shutil.rmtree(stage, ignore_errors=True)
        toolchain.run(["make", f"DESTDIR={stage}", "install"], log, cwd=tree, env=env)
        library = stage / prefix(target.python).lstrip("/") / "lib" / f"python{target.python}"
        shutil.rmtree(library / "test", ignore_errors=True)  # CPython's own tests: not needed
        check_ext_suffix(target, stage)
        shutil.rmtree(work, ignore_errors=True)
        stamp.touch()
        return stage


def build_host(version: str, cache: Path, log: Path) -> str:
    """A CPython ``version`` for the build host itself, from the pinned source: built natively
    with the host's compiler and libraries (so with ssl, for pip), installed under
    ``cache/cpython/host``; returns its interpreter. For a version the host lacks (3.14 here)
    it builds and tests the x86_64 glibc wheel; for one whose patch release differs from the
    source's (3.13.0 here, 3.13.5 pinned) it runs the cross builds' scripts."""
    if version not in SOURCES:
        raise toolchain.Unavailable(f"no CPython {version} on the build host, and no source "
                                    "pinned to build one (packaging/wheels/cpython.py)")
    dest = cache.resolve() / "cpython" / "host" / f"python{version}"
    python = dest / "bin" / f"python{version}"
    with toolchain.lock(f"host-{version}"):
        if (dest / ".built").is_file():
            return str(python)
        work = cache / "cpython" / "work" / f"host-{version}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        tree = _unpack(fetch(SOURCES[version], cache), work)
        env = {k: v for k, v in os.environ.items()
               if k not in ("CC", "CFLAGS", "LDFLAGS", "CPPFLAGS", "LDSHARED")}
        shutil.rmtree(dest, ignore_errors=True)
        toolchain.run(["./configure", f"--prefix={dest}"], log, cwd=tree, env=env)
        toolchain.run(["make", "-j2"], log, cwd=tree, env=env)
        toolchain.run(["make", "install"], log, cwd=tree, env=env)
        shutil.rmtree(dest / "lib" / f"python{version}" / "test", ignore_errors=True)
        toolchain.run([str(python), "-c", "import ssl, " + ", ".join(REQUIRED_MODULES)], log)
        shutil.rmtree(work, ignore_errors=True)
        (dest / ".built").touch()
        return str(python)


# what the tests and pip need of the standard library's extension modules: CPython's build
# reports a module it failed to build and goes on
REQUIRED_MODULES = ("_ctypes", "zlib", "_posixsubprocess", "select", "fcntl", "math",
                    "_multiprocessing", "_socket", "_struct", "pyexpat", "_json", "_decimal", "hashlib",
                    "_random", "binascii", "unicodedata")


def install(target: Target, root: Path, runner: list[str], cache: Path, log: Path) -> tuple[str, str]:
    """Builds (once) and copies the interpreter into ``root``, then imports in the root, run
    through ``runner`` (qemu, or nothing), every module of ``REQUIRED_MODULES``; returns its
    path inside the root and a description for the manifest. A build that lacks one is
    discarded, so that the next run builds it again."""
    stage = build(target, cache, log)
    interpreter = f"{prefix(target.python)}/bin/python{target.python}"
    inside = prefix(target.python).lstrip("/")
    with toolchain.lock(f"install-{root}"):
        shutil.rmtree(root / inside, ignore_errors=True)
        shutil.copytree(stage / inside, root / inside, symlinks=True)
        try:
            toolchain.run([toolchain.CHROOT, str(root), *runner, interpreter, "-c",
                           "import " + ", ".join(REQUIRED_MODULES)], log)
        except subprocess.CalledProcessError as exc:
            (stage / ".built").unlink()
            raise RuntimeError(f"the CPython built for {target.zig_triple} lacks a module: "
                               f"{exc.output.strip().splitlines()[-1:]}") from None
    libc = "musl" if target.libc == "musllinux" else "glibc 2.17"
    return interpreter, f"{SOURCES[target.python].origin}, built here for {target.arch} {libc}"


def include_dir(target: Target, cache: Path, log: Path) -> Path:
    """The built interpreter's ``include/pythonX.Y`` (headers and its own ``pyconfig.h``)."""
    stage = build(target, cache, log)
    return stage / prefix(target.python).lstrip("/") / "include" / f"python{target.python}"


def describe(target: Target) -> str:
    """Where a built interpreter's headers come from (for the manifest)."""
    return f"{SOURCES[target.python].origin}, cross-built here for {target.zig_triple}"

