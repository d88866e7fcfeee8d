#!/usr/bin/env bash
# Builds the Debian packages python3-rknnlite and rknnlite-daemon from this checkout, runs
# lintian on them and unpacks them into a scratch root to check that the installed command works.
#
#   packaging/build_deb.sh [--chroot DIR] [--out DIR]
#
# The source is the sdist (python -m build --sdist) with packaging/debian/ laid out as debian/.
# The build needs Cython >= 3.0, i.e. Debian 13 "trixie" or newer. On an older host, pass
# --chroot with a trixie root (made once with:
#   debootstrap --variant=minbase trixie DIR http://deb.debian.org/debian
# then inside it: apt-get install build-essential debhelper dh-python pybuild-plugin-pyproject
#   python3-all-dev python3-setuptools cython3 python3-numpy python3-cryptography python3-psutil
#   python3-pytest lintian fakeroot dpkg-dev python3-aiohttp python3-prometheus-client).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
chroot_dir=
out=$here/dist/debian
while [ $# -gt 0 ]; do
    case "$1" in
        --chroot) chroot_dir=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: $0 [--chroot DIR] [--out DIR]" >&2; exit 2 ;;
    esac
done
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$here/rknnlite/_version.py")

# 1. the upstream source: the sdist, built from this checkout
sdist_dir=$(mktemp -d)
python3 -m build --sdist --outdir "$sdist_dir" "$here" >"$sdist_dir/build.log" 2>&1 \
    || { tail -n 30 "$sdist_dir/build.log"; exit 1; }
sdist=$(ls "$sdist_dir"/*.tar.gz)

# 2. where the build runs: here, or /build inside the chroot
if [ -n "$chroot_dir" ]; then
    work_host=$chroot_dir/build; work=/build
    run() { chroot "$chroot_dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 bash -c "$1"; }
    mountpoint -q "$chroot_dir/proc" || mount -t proc proc "$chroot_dir/proc"
else
    work_host=$(mktemp -d); work=$work_host
    run() { bash -c "$1"; }
fi
rm -rf "$work_host"; mkdir -p "$work_host"
tar xzf "$sdist" -C "$work_host"
src=rknnlite-$version
mv "$work_host"/rknnlite_runtime-"$version" "$work_host/$src"
cp "$sdist" "$work_host/rknnlite_$version.orig.tar.gz"
cp -r "$here/packaging/debian" "$work_host/$src/debian"

# 3. build, lint, unpack into a scratch root and run the installed command
run "cd $work/$src && dpkg-buildpackage -us -uc -b" >"$work_host/dpkg-buildpackage.log" 2>&1 \
    || { tail -n 60 "$work_host/dpkg-buildpackage.log"; echo "dpkg-buildpackage failed: $work_host/dpkg-buildpackage.log" >&2; exit 1; }
run "cd $work && lintian --info --display-info --pedantic *.changes" >"$work_host/lintian.log" 2>&1 || true
run "cd $work && rm -rf root && for d in *.deb; do dpkg -x \$d root; done && \
     PYTHONPATH=\$PWD/root/usr/lib/python3/dist-packages python3 -m rknnlite --version && \
     PYTHONPATH=\$PWD/root/usr/lib/python3/dist-packages python3 -m rknnlite demo >/dev/null && echo 'demo ran from the scratch root' && \
     find root -path '*/_native/*.so' | sed 's|.*/||' | sort | tr '\n' ' ' && echo" >"$work_host/scratch-root.log" 2>&1 \
    || scratch_failed=1
mkdir -p "$out"
cp "$work_host"/*.deb "$work_host"/*.changes "$work_host"/*.buildinfo "$work_host"/*.log "$out"/
echo "packages in $out:"; ls "$out"
echo "--- lintian"; cat "$out/lintian.log"
echo "--- scratch root"; cat "$out/scratch-root.log"
[ -z "${scratch_failed:-}" ] || { echo "the packages did not work from the scratch root" >&2; exit 1; }
