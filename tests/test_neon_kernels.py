"""The NEON (aarch64) conv micro-kernels: cython/include/rk_conv_neon.h (the 8 x 12 gather-GEMM
tile and its B packing) and the 4-lane form of the Winograd template.

One check runs the NEON code over C versions of its intrinsics (tests/native/neon_emulated.h) on
any host, bit for bit against a scalar model.  The other (tests/native/neon_gemm_check.c) runs
cython/src/rk_conv.c built for aarch64 through its public entry points against plain C: natively
on aarch64, under qemu user-mode emulation where a cross compiler and qemu are installed, and
on every host built by zig's clang (PyPI ``ziglang``) for aarch64 musl and run on the Unicorn
CPU emulator (PyPI ``unicorn``, tests/aarch64_user.py), so CI executes the NEON kernels too.
The model-level tests parametrised by ``micro_kernel_isa`` run the NEON path through the
extension on aarch64 (the arm64 run of packaging/build_arm64.sh)."""

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aarch64_user import run as run_on_unicorn

NATIVE = Path(__file__).parent / "native"
SOURCE = Path(__file__).parent.parent / "cython" / "src" / "rk_conv.c"
#: the oldest core of the supported SoCs (RK3562, RK3576's little cores): ARMv8.0-A
BOARD_CPU = "cortex-a53"
#: what neon_gemm_check prints when every case holds
GEMM_CHECK_OK = "ok 160"
#: how a check is built for aarch64 by a cross compiler (static: it runs without a root)
STATIC_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-static", f"-I{SOURCE.parent.parent / 'include'}")


def _build_static(compiler, sources, exe, env=None) -> str:
    """``exe`` built from ``sources`` by ``compiler`` (a command list) with STATIC_FLAGS; a
    compile error fails the test with the compiler's output."""
    cmd = [*compiler, *STATIC_FLAGS, *map(str, sources), "-o", str(exe), "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, " ".join(cmd) + "\n" + done.stdout + done.stderr
    return str(exe)


#: AddressSanitizer and UndefinedBehaviorSanitizer, stopping at the first report
SANITIZERS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")


@pytest.mark.parametrize("sanitized", [False, True], ids=["plain", "asan-ubsan"])
def test_the_neon_tile_and_packing_match_a_scalar_model(compile_c, sanitized, tmp_path):
    """Also under ASan + UBSan: the guard values catch a write outside the tile, the sanitizers
    a read outside any buffer (a partial tile's rows or columns past mv x nv)."""
    args = (f"-I{NATIVE}", "-lm")
    if sanitized and platform.machine().lower() not in ("x86_64", "amd64"):
        # aarch64 test runs are mostly qemu-user, where an ASan program's shadow memory takes all
        # of the host's memory (the kernel's OOM killer ends it); the x86-64 run covers this case
        pytest.skip("the sanitized tile check runs on x86-64 hosts")
    if sanitized:
        probe = tmp_path / "probe.c"
        probe.write_text("int main(void) { return 0; }\n")
        if subprocess.run([compile_c.cc, *SANITIZERS, str(probe), "-o", str(tmp_path / "probe")],
                          capture_output=True).returncode != 0:
            pytest.skip(f"{compile_c.cc} cannot build with {SANITIZERS[0]} (no libasan/libubsan)")
        if subprocess.run([str(tmp_path / "probe")], capture_output=True, timeout=120).returncode != 0:
            pytest.skip(f"a program built with {SANITIZERS[0]} does not run here (under qemu, say)")
        args = (*SANITIZERS, *args)
    exe = compile_c(NATIVE / "neon_tile_check.c", "neon_tile_check" + ("_san" if sanitized else ""), args=args)
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok 226"


def _aarch64_program(compile_c, tmp_path):
    """The check built for aarch64 and the command that runs it here, or a skip saying what is
    missing."""
    sources = [NATIVE / "neon_gemm_check.c", SOURCE]
    if platform.machine().lower() in ("aarch64", "arm64"):
        return [str(compile_c(sources, "neon_gemm_check", args=("-O2", "-lm")))]
    cc, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")
    if not (cc and qemu):
        pytest.skip("running the NEON kernels on this x86-64 host needs aarch64-linux-gnu-gcc and qemu-aarch64 "
                    "(Debian: gcc-aarch64-linux-gnu qemu-user-static); the arm64 run of packaging/build_arm64.sh "
                    "runs them under emulation")
    return [qemu, "-cpu", BOARD_CPU, _build_static([cc], sources, tmp_path / "neon_gemm_check")]


def test_the_neon_gemm_and_winograd_paths_of_rk_conv_match_plain_c_on_aarch64(compile_c, tmp_path):
    command = _aarch64_program(compile_c, tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == GEMM_CHECK_OK


@pytest.fixture(scope="module")
def zig_aarch64(tmp_path_factory):
    """``build(sources, name)`` -> a static aarch64 (musl) program built by zig's clang, with
    ``cython/include`` on the include path; one zig cache per module (not ~/.cache/zig): its first
    build compiles musl for aarch64, about a minute on two cores.  Skips without ziglang or
    unicorn."""
    pytest.importorskip("unicorn", reason="the Unicorn CPU emulator (pip install unicorn) runs the aarch64 build")
    pytest.importorskip("ziglang", reason="zig's clang (pip install ziglang) builds the check for aarch64")
    out = tmp_path_factory.mktemp("zig-aarch64")
    cache = str(out / "cache")

    def build(sources, name):
        return _build_static([sys.executable, "-m", "ziglang", "cc", "-target", "aarch64-linux-musl"], sources,
                             out / name, env={**os.environ, "ZIG_GLOBAL_CACHE_DIR": cache, "ZIG_LOCAL_CACHE_DIR": cache})

    return build


@pytest.mark.slow
def test_the_neon_gemm_and_winograd_paths_of_rk_conv_match_plain_c_on_an_emulated_cortex_a53(zig_aarch64):
    ran = run_on_unicorn(zig_aarch64([NATIVE / "neon_gemm_check.c", SOURCE], "neon_gemm_check"), cpu="A53")
    assert (ran.status, ran.stdout.strip()) == (0, GEMM_CHECK_OK), ran


@pytest.mark.slow
def test_the_emulator_reports_a_failing_program_and_refuses_what_it_cannot_run(zig_aarch64, tmp_path):
    source = tmp_path / "fails.c"
    source.write_text('#include <stdio.h>\nint main(void) { printf("bad case %d\\n", 7); '
                      'fprintf(stderr, "details\\n"); return 3; }\n')
    ran = run_on_unicorn(zig_aarch64([source], "fails"))
    assert (ran.status, ran.stdout, ran.stderr) == (3, "bad case 7\n", "details\n")
    spin = tmp_path / "spin.c"
    spin.write_text("int main(void) { volatile unsigned x = 0; for (;;) x++; }\n")
    with pytest.raises(RuntimeError, match="still running after 0.5 s"):
        run_on_unicorn(zig_aarch64([spin], "spin"), timeout_s=0.5)
    with pytest.raises(ValueError, match="not a 64-bit aarch64 ELF"):
        run_on_unicorn(str(source))
    with pytest.raises(ValueError, match="not a (64-bit aarch64 ELF|static executable)"):
        run_on_unicorn(sys.executable)  # this host's interpreter: another machine, or dynamically linked
