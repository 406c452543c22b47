#!/usr/bin/env bash
# python_test.sh - the Python package's tests (tests/python, pytest) on the package installed by
# python_env.sh, with torch required (FLASHATTN_REQUIRE_TORCH=1) and the backends of
# FLASHATTN_REQUIRE_BACKENDS required as in the C suites. A skipped test fails the run: on this
# project's machines every Python test must run.
set -eu
cd "$(dirname "$0")/.."
py=$(bash scripts/python_env.sh | tail -n 1)
unset FLASHATTN_LIBRARY
export FLASHATTN_REQUIRE_TORCH=${FLASHATTN_REQUIRE_TORCH:-1}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
"$py" -m pytest -q -p no:cacheprovider -r s tests/python 2>&1 | tee "$log" || rc=$?
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi
if tail -n 3 "$log" | grep -Eq '[0-9]+ skipped'; then
    echo "python_test: tests were skipped (listed above); every Python test must run here" >&2
    exit 1
fi
