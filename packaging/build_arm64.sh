#!/usr/bin/env bash
# Builds the aarch64 wheel of rknnlite and runs tests against it on arm64.
#
#   packaging/build_arm64.sh [--root DIR] [--tests core|full] [--out DIR]
#
# On an aarch64 machine (a board, an arm64 CI runner) it builds and tests natively in a venv.
# On x86_64 it runs the same steps in a Debian 13 (trixie) arm64 root under qemu user-mode
# emulation: it needs root, Debian's qemu-user-static and binfmt-support (binfmt_misc registers
# qemu-aarch64 with the F flag, so the chroot needs no copy of qemu) and debootstrap. The root is
# made once (about 10 minutes) and reused. Emulation is 10-30 times slower than native, so the
# default there is the core subset of the suite (packaging/core-tests.txt); --tests full runs it all.
# RKNNLITE_ARM64_TIMEOUT (seconds, default 900) caps the build and test run under emulation.
#
# The wheel is a plain linux_aarch64 wheel for the interpreter it was built with (trixie's
# CPython 3.13 under emulation); the manylinux/musllinux wheels for release come from cibuildwheel.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=/var/tmp/rknnlite-arm64
tests=
out=$here/dist/arm64
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root=$2; shift 2 ;;
        --tests) tests=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: $0 [--root DIR] [--tests core|full] [--out DIR]" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
log() { printf '[build_arm64 %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

sdist_dir=$(mktemp -d)
log "building the sdist"
python3 -m build --sdist --outdir "$sdist_dir" "$here" >"$sdist_dir/build.log" 2>&1 \
    || { tail -n 30 "$sdist_dir/build.log"; exit 1; }
sdist=$(ls "$sdist_dir"/*.tar.gz)

if [ "$(uname -m)" = aarch64 ]; then
    # Native: a venv with the build and test requirements from PyPI.
    tests=${tests:-full}
    venv=$(mktemp -d)/venv
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q build
    "$venv/bin/python" -m build --wheel --outdir "$out" "$sdist"
    wheel=$(ls -t "$out"/*aarch64*.whl | head -n 1)
    "$venv/bin/pip" install -q "$wheel[test]"
    src=$(mktemp -d); tar xzf "$sdist" -C "$src"
    PYTHON=$venv/bin/python bash "$here/packaging/run_tests.sh" "$src"/rknnlite_runtime-* "$tests"
    exit $?
fi

# --- emulated: qemu-user + binfmt_misc + a debootstrapped arm64 root -----------------------
tests=${tests:-core}
[ "$(id -u)" = 0 ] || { echo "build_arm64.sh: emulation needs root (chroot, mount, debootstrap)" >&2; exit 1; }
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    echo "build_arm64.sh: no qemu-aarch64 binfmt handler; apt-get install qemu-user-static binfmt-support" >&2
    exit 1
fi
grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
    || { echo "build_arm64.sh: the qemu-aarch64 handler lacks the F flag; a chroot cannot use it" >&2; exit 1; }

packages=python3,python3-dev,python3-pip,python3-setuptools,python3-wheel,cython3,python3-numpy
packages=$packages,python3-cryptography,python3-cffi-backend,python3-psutil,python3-pytest
packages=$packages,gcc,libc6-dev
# (debootstrap does not resolve virtual packages: python3-cffi-backend is listed for python3-cryptography)
if [ ! -x "$root/usr/bin/python3" ]; then
    log "debootstrap: trixie arm64 into $root (one time)"
    debootstrap --arch=arm64 --variant=minbase --include="$packages" trixie "$root" "$mirror"
fi
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
trap 'umount "$root/dev" "$root/proc" 2>/dev/null || true' EXIT

rm -rf "$root/build"; mkdir -p "$root/build/wheelhouse"
tar xzf "$sdist" -C "$root/build"
src=$(basename "$root"/build/rknnlite_runtime-*)
log "emulated uname -m: $(chroot "$root" uname -m); python: $(chroot "$root" python3 --version)"

# The build uses Debian's Cython, numpy and setuptools (no build isolation: nothing is fetched
# under emulation); the wheel is unpacked into /build/site and tested with Debian's
# numpy/cryptography/psutil/pytest.
inner="set -e
cd /build
echo \"[arm64] building the wheel\"; date -u +%T
python3 -m pip wheel --no-build-isolation --no-deps -w wheelhouse ./$src
date -u +%T
rm -rf site && python3 -m zipfile -e wheelhouse/*.whl site   # the wheel, installed by unpacking
echo \"[arm64] running the $tests tests\"; date -u +%T
PYTHONPATH=/build/site PYTHON=python3 bash ./$src/packaging/run_tests.sh /build/$src $tests
date -u +%T"
status=0
timeout "${RKNNLITE_ARM64_TIMEOUT:-900}" chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LC_ALL=C.UTF-8 CFLAGS=-g0 bash -c "$inner" 2>&1 | tee "$out/arm64-run.log" || status=$?
cp "$root"/build/wheelhouse/*.whl "$out"/ 2>/dev/null || true
log "wheel(s): $(ls "$out"/*.whl 2>/dev/null | tr '\n' ' ')"
[ "$status" = 124 ] && log "stopped by the ${RKNNLITE_ARM64_TIMEOUT:-900} s limit"
log "exit status $status (log: $out/arm64-run.log)"
exit "$status"
