#!/usr/bin/env bash
# run.sh - the main job: set up, build, and run one attention forward pass on the default
# backend (FA_BACKEND_AUTO: CUDA, else OpenCL, else CPU), checked against the CPU golden
# backend. Extra arguments go to `flashattn run` (see `build/tools/flashattn run --help`).
set -eu
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh >/dev/null
exec build/tools/flashattn run --check --batch 1 --heads 8 --seq 1024 --dim 64 --repeat 3 "$@"
