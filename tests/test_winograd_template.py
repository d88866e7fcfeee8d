"""The Winograd transforms come from one template (cython/include/rk_conv_wino.h) per ISA.  Its
AVX-512 and NEON forms cannot run on every CPU, so tests/native/wino_vec_check.c instantiates
them over an emulated 16-lane vector and emulated NEON intrinsics (tests/native/neon_emulated.h)
and checks each writes exactly what the plain-C form (generic, AVX2) writes, masks its chunk
tails and aligns its aligned accesses."""

import subprocess
from pathlib import Path

NATIVE = Path(__file__).parent / "native"
SOURCE = NATIVE / "wino_vec_check.c"


def test_the_16_and_4_lane_forms_match_the_plain_form(compile_c):
    exe = compile_c(SOURCE, "wino_vec_check", args=(f"-I{NATIVE}", "-lm"))
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok 24"
