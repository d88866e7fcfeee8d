#!/usr/bin/env bash
# Build and test rknnlite from a clean clone under every CPython 3.9-3.13 found locally
# (pyenv or python3.X on PATH), each in its own venv.  Usage: tools/test_all_pythons.sh
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
status=0
for minor in 9 10 11 12 13; do
  py=""
  for candidate in "$(command -v "python3.$minor" || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.$minor.*/bin/python; do
    if [ -x "$candidate" ] && "$candidate" -c 'import sys' 2>/dev/null; then py=$candidate; break; fi
  done
  [ -n "$py" ] || { echo "3.$minor: not installed, skipped"; continue; }
  git clone -q "$repo" "$work/src-3.$minor"
  "$py" -m venv "$work/venv-3.$minor"
  if (cd "$work/src-3.$minor" && "$work/venv-3.$minor/bin/pip" install -q ".[test]" &&
      cd "$work" && "$work/venv-3.$minor/bin/python" -m pytest -q -p no:cacheprovider \
        "$work/src-3.$minor/tests") > "$work/3.$minor.log" 2>&1; then
    echo "3.$minor: $(tail -n 1 "$work/3.$minor.log")"
  else
    echo "3.$minor: FAILED (log: $work/3.$minor.log)"; status=1
  fi
done
exit $status
