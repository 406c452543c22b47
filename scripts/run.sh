#!/usr/bin/env bash
# run.sh - the main job: set up, build, and run one attention forward pass on the default
# backend (FA_BACKEND_AUTO: CUDA, else OpenCL, else CPU), checked against the CPU golden
# backend. Extra arguments go to `flashattn run` (see `build/tools/flashattn run --help`).
set -eu
cd "$(dirname "$0")/.."
mkdir -p build
# Only the command-line program and what it links are built (a minute on 2 cores from a fresh
# clone; packages missing: a few minutes more). The full output goes to a log shown when
# something fails; the steps and the build's progress show as they happen.
echo "run.sh: setting up and building flashattn (log: build/run-setup.log) ..."
progress() { # the setup's steps and the targets built, as they happen
    grep --line-buffered -E '^(bootstrap:|.*flashattn backends|\[ *[0-9]+%\] Built target)' |
        sed -u 's/^/run.sh: /'
    return 0
}
set -o pipefail
if ! FLASHATTN_BUILD_TARGETS=flashattn_cli bash scripts/bootstrap.sh 2>&1 |
    tee build/run-setup.log | progress; then
    cat build/run-setup.log
    exit 1
fi
exec build/tools/flashattn run --check --batch 1 --heads 8 --seq 1024 --dim 64 --repeat 3 "$@"
