#!/usr/bin/env bash
# Runs the test suite against the INSTALLED rknnlite (a wheel), not the source tree.
#   packaging/run_tests.sh PROJECT_DIR full   # every test file
#   packaging/run_tests.sh PROJECT_DIR core   # the files listed in packaging/core-tests.txt
# Used by cibuildwheel's test-command (pyproject.toml) and by packaging/build_arm64.sh.
# Extra arguments after the mode go to pytest; PYTHON names the interpreter (default: python).
set -euo pipefail
project=$(cd "${1:?usage: run_tests.sh PROJECT_DIR full|core [pytest args]}" && pwd)
mode=${2:-full}
shift 2 || shift $#
python=${PYTHON:-python}
case "$mode" in
    full|core) ;;
    *) echo "run_tests.sh: mode must be 'full' or 'core', not '$mode'" >&2; exit 2 ;;
esac

# From outside the tree, so that "import rknnlite" finds the installed package.
cd "$(mktemp -d)"
"$python" -c 'import rknnlite, sys; sys.stdout.write("testing rknnlite %s from %s\n" % (rknnlite.__version__, rknnlite.__file__))'

case "$mode" in
    full) exec "$python" -m pytest -q -p no:cacheprovider "$@" "$project/tests" ;;
    core)
        files=()
        while read -r name; do
            case "$name" in ''|'#'*) continue ;; esac
            files+=("$project/tests/$name")
        done < "$project/packaging/core-tests.txt"
        exec "$python" -m pytest -q -p no:cacheprovider "$@" "${files[@]}" ;;
esac
