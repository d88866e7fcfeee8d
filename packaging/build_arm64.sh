#!/usr/bin/env bash
# Builds the aarch64 wheel of rknnlite and runs tests against it on arm64.
#
#   packaging/build_arm64.sh [--root DIR] [--tests core|full] [--out DIR]
#
# On an aarch64 machine (a board, an arm64 CI runner) it builds and tests natively in a venv.
# On x86_64 it cross-builds the wheel and runs only the tests under emulation: Cython runs on the
# host and aarch64-linux-gnu-gcc compiles its C against a Debian 13 (trixie) arm64 root's Python
# and numpy headers (packaging/cross_build_arm64.py); the wheel is then installed in a venv in
# that root and tested under qemu user-mode emulation. It needs root, Cython 3/numpy/setuptools
# for the host's python3, and Debian's gcc-aarch64-linux-gnu, qemu-user-static, binfmt-support
# (binfmt_misc registers qemu-aarch64 with the F flag, so the chroot needs no copy of qemu) and
# debootstrap. The root is made once (10-30 minutes) and reused. Emulation is 10-30 times slower
# than native, so the default there is the core subset of the suite (packaging/core-tests.txt);
# --tests full runs it all (it needs onnx and onnxruntime, which the root does not have).
# RKNNLITE_ARM64_TIMEOUT (seconds, default 1800) caps the emulated install and test run.
#
# The wheel is a plain linux_aarch64 wheel for the root's interpreter (trixie's CPython 3.13);
# the manylinux/musllinux wheels for release come from cibuildwheel.
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

# --- x86_64: Cython on the host, a cross compiler, the tests under qemu ----------------------
# Only the tests run under emulation: Cython's C output does not depend on the architecture, so
# packaging/cross_build_arm64.py runs setup.py's cythonize on the host and compiles the C with
# aarch64-linux-gnu-gcc against the root's Python and numpy headers (2-5 minutes on 2 busy cores;
# the same build under qemu did not finish in 15 minutes). The root supplies those headers and the
# interpreter, numpy, cryptography, psutil and pytest that the tests run with.
tests=${tests:-core}
[ "$(id -u)" = 0 ] || { echo "build_arm64.sh: emulation needs root (chroot, mount, debootstrap)" >&2; exit 1; }
command -v aarch64-linux-gnu-gcc >/dev/null \
    || { echo "build_arm64.sh: no cross compiler; apt-get install gcc-aarch64-linux-gnu" >&2; exit 1; }
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    echo "build_arm64.sh: no qemu-aarch64 binfmt handler; apt-get install qemu-user-static binfmt-support" >&2
    exit 1
fi
grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
    || { echo "build_arm64.sh: the qemu-aarch64 handler lacks the F flag; a chroot cannot use it" >&2; exit 1; }

packages=python3,python3-dev,python3-pip,python3-numpy,python3-numpy-dev
packages=$packages,python3-cryptography,python3-cffi-backend,python3-psutil,python3-pytest
# (debootstrap does not resolve virtual packages: python3-cffi-backend is listed for python3-cryptography)
# gcc: the tests that compile a C check (tests/native: the NEON kernels, the Winograd template)
packages=$packages,gcc,libc6-dev
if [ ! -x "$root/usr/bin/python3" ]; then
    log "debootstrap: trixie arm64 into $root (one time)"
    debootstrap --arch=arm64 --variant=minbase --include="$packages" trixie "$root" "$mirror"
elif [ ! -x "$root/usr/bin/gcc" ]; then   # a root made before gcc was on the list
    log "apt-get: gcc into $root (one time)"
    chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q gcc libc6-dev
fi

work=$(mktemp -d)
trap 'rm -rf "$work" "$sdist_dir"' EXIT
tar xzf "$sdist" -C "$work"
log "cross-building the wheel (host Cython, aarch64-linux-gnu-gcc, headers from $root)"
python3 "$here/packaging/cross_build_arm64.py" --root "$root" --src "$work"/rknnlite_runtime-* --out "$work/wheel" \
    2>&1 | tee "$out/arm64-build.log" || { log "the cross build failed (log: $out/arm64-build.log)"; exit 1; }
wheel=$(ls "$work"/wheel/*linux_aarch64.whl)
cp "$wheel" "$out"/

mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
trap 'umount "$root/dev" "$root/proc" 2>/dev/null || true; rm -rf "$work" "$sdist_dir"' EXIT
rm -rf "$root/build"; mkdir -p "$root/build/wheelhouse"
cp "$wheel" "$root/build/wheelhouse/"
tar xzf "$sdist" -C "$root/build"   # the tests and examples, run from the root
src=$(basename "$root"/build/rknnlite_runtime-*)
log "emulated uname -m: $(chroot "$root" uname -m); python: $(chroot "$root" python3 --version)"

# The wheel goes into a venv that sees Debian's numpy/cryptography/psutil/pytest; pip installs it
# with --no-index, so its declared dependencies must be met by those (nothing is fetched).
inner="set -e
cd /build
echo \"[arm64 \$(date -u +%T)] installing $(basename "$wheel") into a venv\"
python3 -m venv --system-site-packages --without-pip venv
venv/bin/python -m pip install -q --no-index --no-cache-dir wheelhouse/*.whl
echo \"[arm64 \$(date -u +%T)] running the $tests tests\"
PYTHON=/build/venv/bin/python bash ./$src/packaging/run_tests.sh /build/$src $tests
echo \"[arm64 \$(date -u +%T)] done\""
status=0
# qemu emulates the oldest core of the supported SoCs (Cortex-A53, ARMv8.0-A; QEMU_CPU overrides):
# its default "max" core has features no board has, which would hide a kernel that needs them.
log "emulated core: ${QEMU_CPU:-cortex-a53}"
timeout "${RKNNLITE_ARM64_TIMEOUT:-1800}" chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LC_ALL=C.UTF-8 QEMU_CPU="${QEMU_CPU:-cortex-a53}" bash -c "$inner" 2>&1 | tee "$out/arm64-run.log" || status=$?
log "wheel: $out/$(basename "$wheel")"
[ "$status" = 124 ] && log "stopped by the ${RKNNLITE_ARM64_TIMEOUT:-1800} s limit"
log "exit status $status (log: $out/arm64-run.log)"
exit "$status"
