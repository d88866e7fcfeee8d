#!/usr/bin/env bash
# Compiles the project's C (cython/src/*.c and the headers of cython/include/) with -Wall -Wextra
# and fails on any warning in it (Cython-generated code aside), then builds the extension modules
# that link C files with AddressSanitizer + UndefinedBehaviorSanitizer into build/sanitize/ (the
# in-place .so files are untouched) and runs the kernel tests once against that build.
#
# How: a copy of the tree in build/sanitize/tree holds the sanitized .so files next to the
# normal ones of the modules without C files; pytest runs from there, so `import rknnlite` finds
# the copy.  CPython itself is not instrumented, so libasan is preloaded (LD_PRELOAD of gcc's
# libasan.so, found with `gcc -print-file-name`) and leak detection is off (detect_leaks=0: the
# interpreter keeps its allocations until exit).  use_sigaltstack=0: with gcc 12's libasan, the
# teardown of ASan's own alternate signal stack when a thread exits during interpreter shutdown
# reports a stack-buffer-overflow inside its sigaltstack interceptor (tests/test_thread_pool.py's
# exit-with-a-live-pool case), which is not in this project's code.  UBSan stops at the first report
# (-fno-sanitize-recover=all), so any finding fails the run.  Python's own -fwrapv stays, so
# signed overflow is defined behaviour here and not reported.
#
# Needs gcc and an in-place build (pip install -e . or python setup.py build_ext --inplace).
# Not run here: tests/test_custom_op_plugin.py.  Its models come from the toolkit's ONNX import,
# and onnx's shape inference (a C++ extension) aborts the process when it throws under the
# preloaded libasan, before any rknnlite code runs.
#
# Usage: tools/sanitize.sh [pytest args]   (default: the kernel tests below)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/sanitize
CC=${CC:-gcc}
PY=${PYTHON:-python}

# --- 1. -Wall -Wextra on the project's C --------------------------------------------------
PYINC=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
for src in cython/src/*.c; do
    $CC -std=gnu11 -Wall -Wextra -Werror -O3 -pthread -fPIC -Icython/include -I"$PYINC" -c "$src" -o /dev/null
done
echo "sanitize.sh: cython/src/*.c compile without warnings (-Wall -Wextra)"

# --- 2. sanitized build of the modules with C files -------------------------------------------
MODULES=$($PY -c "import ast, re; t = open('setup.py').read(); \
print(','.join(ast.literal_eval(re.search(r'C_SOURCES = (\{.*?\n\})', t, re.S).group(1))))")
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
mkdir -p "$OUT"
CFLAGS="-Wall -Wextra $SAN" LDFLAGS="$SAN" RKNNLITE_NATIVE_ONLY="$MODULES" \
    $PY setup.py -q build_ext --build-lib "$OUT/lib" --build-temp "$OUT/temp" --force 2>"$OUT/build.log" \
    || { cat "$OUT/build.log"; exit 1; }
if grep -E "^cython/(src|include)/[^:]+:[0-9]+:[0-9]+: warning" "$OUT/build.log"; then
    echo "sanitize.sh: warnings in project C (above)" >&2
    exit 1
fi

# --- 3. the kernel tests on the sanitized modules ----------------------------------------------
TREE=$OUT/tree
rm -rf "$TREE"
mkdir -p "$TREE"
cp -r rknnlite tests cython pyproject.toml "$TREE"/  # cython/include: the ABI test compiles against the headers
mkdir -p "$TREE"/tools && cp -r tools/vendor_corpus "$TREE"/tools/  # the vendor corpus tests regenerate inputs
cp "$OUT"/lib/rknnlite/_native/*.so "$TREE"/rknnlite/_native/
export LD_PRELOAD="$($CC -print-file-name=libasan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:use_sigaltstack=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$TREE"
$PY -c "import rknnlite._native.conv_kernels as m, sys; assert m.__file__.startswith(sys.argv[1]), m.__file__" "$TREE"
if [ $# -eq 0 ]; then
    set -- tests/test_channel_affine.py tests/test_conv_prepacked.py tests/test_conv_row_split.py \
        tests/test_winograd_band_order.py tests/test_ops_conv.py tests/test_executor_kernels.py \
        tests/test_layout.py tests/test_ops_elementwise.py tests/test_sparse_kernel.py \
        tests/test_thread_pool.py tests/test_abi_layout.py tests/test_vendor_int8_accumulator.py \
        tests/test_vendor_lut.py tests/test_conv_phase_split.py tests/test_gemv.py
fi
$PY -m pytest -q -p no:cacheprovider "$@"
echo "sanitize.sh: the kernel tests pass under AddressSanitizer + UndefinedBehaviorSanitizer"
