#!/usr/bin/env bash
# run.sh - the main job: set up, build, and run one attention forward pass on the default
# backend (FA_BACKEND_AUTO: CUDA, else OpenCL, else CPU), checked against the CPU golden
# backend. Extra arguments go to `flashattn run` (see `build/tools/flashattn run --help`).
set -eu
cd "$(dirname "$0")/.."
mkdir -p build
# The first build takes about 20 s on 2 cores (packages missing: a few minutes more); its output
# goes to a log that is shown when something fails.
echo "run.sh: setting up and building (log: build/run-setup.log) ..."
bash scripts/bootstrap.sh >build/run-setup.log 2>&1 || { cat build/run-setup.log; exit 1; }
exec build/tools/flashattn run --check --batch 1 --heads 8 --seq 1024 --dim 64 --repeat 3 "$@"
