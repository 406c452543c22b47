#!/usr/bin/env bash
# gpu_check.sh - the checks owed on a machine with an NVIDIA GPU, in two commands of at most
# 8 minutes each (the device tool lends a GPU for about 15 minutes in all, 10 a command), their
# steps ordered by what they prove per minute, each timed, so a command cut short still brings
# back its first results:
#
#   --stage 1  build (only the targets the checks need, all cores); the cuda suites with the
#              cuda backend and NVRTC required (forward, backward, modifiers, decode / paged /
#              varlen / split-KV with its merge, block-sparse, positions; CUDA-core f32 and
#              tensor-core f16/bf16 paths); compute-sanitizer memcheck on a forward (both paths),
#              a backward and a split-KV decode; our forward and backward against PyTorch SDPA
#              (flash) on the same GPU (tools/bench_torch.py: f16/bf16, d 64/128, N 512/2048/8192,
#              causal and not).
#   --stage 2  NVIDIA's OpenCL driver (registered from the bundle) running the opencl suites;
#              racecheck and synccheck; the decode benchmarks (split-KV against unsplit, paged
#              against contiguous, the GPU's copy bandwidth); the Python package's torch CUDA
#              tensor tests; the tensor-core forward's pipeline A/B.
#
# Each step writes OUT/NN-name.log and a line of OUT/summary.md (status, seconds); a step whose
# estimate no longer fits the budget is skipped and says so. The exit status is non-zero when a
# step failed. A machine without cmocka, an OpenCL loader or pkg-config (and no network) gets
# them from the Debian packages tools/gpu_bundle.sh fetched into .bundle beforehand, unpacked
# into /tmp/fa-bundle (BUNDLE_PREFIX), where NVIDIA's OpenCL driver is registered too. For the
# device tool (carry .bundle):
#   bash tools/gpu_check.sh --stage 1 --out "$OUT"
#
# usage: tools/gpu_check.sh [--dry-run] [--stage 1|2] [--out DIR] [BUILD_DIR]
#   BUILD_DIR defaults to build-gpu, --out to $OUT or BUILD_DIR/out. BUDGET_S (default 480) is
#   the command's time budget. --dry-run prints each step's commands and estimate instead of
#   running them, so the prepared command can be read and checked on a machine without a GPU.
#   SKIP="bench sanitize ..." leaves steps out by name.
set -uo pipefail

DRY_RUN=0
STAGE=1
OUT_DIR=${OUT:-}
while [ $# -gt 0 ]; do
    case $1 in
    --dry-run) DRY_RUN=1 ;;
    --stage) STAGE=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
case $STAGE in 1 | 2) ;; *) echo "gpu_check.sh: --stage is 1 or 2" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
OUT_DIR=${OUT_DIR:-$BUILD/out}
JOBS=$(nproc 2>/dev/null || echo 4)
BUNDLE=${BUNDLE:-$ROOT/.bundle}
BUDGET_S=${BUDGET_S:-480}
SKIP=${SKIP:-}
FA="$BUILD/tools/flashattn"
PY=${PYTHON:-python3}
START=$SECONDS
FAILED=""
NSTEP=0
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.md"

# Runs a command, or under --dry-run prints it.
run() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '+'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}

# step NAME ESTIMATE_S FUNCTION: runs FUNCTION into OUT/NN-NAME.log (and the terminal) under
# what is left of the budget; records its status and seconds in the summary.
step() {
    local name=$1 est=$2 fn=$3 left=$((BUDGET_S - (SECONDS - START))) t0=$SECONDS rc=0
    NSTEP=$((NSTEP + 1))
    local log
    log=$(printf '%s/%02d-%s.log' "$OUT_DIR" "$NSTEP" "$name")
    printf '\n==== %s (estimate %d s, %d s of the budget left)\n' "$name" "$est" "$left"
    if [[ " $SKIP " == *" $name "* ]]; then
        echo "| $name | skipped (SKIP) | 0 |" >>"$SUMMARY"
        return 0
    fi
    if [ "$DRY_RUN" != 1 ] && [ "$est" -gt "$left" ]; then
        echo "skipped: the estimate does not fit what is left of the budget"
        echo "| $name | skipped (budget) | 0 |" >>"$SUMMARY"
        return 0
    fi
    "$fn" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    local took=$((SECONDS - t0))
    if [ "$rc" -ne 0 ]; then
        FAILED="$FAILED $name"
        echo "| $name | FAILED (exit $rc) | $took |" >>"$SUMMARY"
    else
        echo "| $name | ok | $took |" >>"$SUMMARY"
    fi
    printf '==== %s: exit %d after %d s\n' "$name" "$rc" "$took"
}

# The suites' environment: the backends that must run (not skip) and NVRTC required.
suite_env() {
    echo env FLASHATTN_REQUIRE_BACKENDS="$1" FLASHATTN_REQUIRE_NVRTC=1
}

# ---- the steps ------------------------------------------------------------------------------

s_gpu() {
    run nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
}

s_bundle() {
    if ! compgen -G "$BUNDLE/*.deb" >/dev/null; then
        echo "no bundle in $BUNDLE: cmocka, pkg-config and the OpenCL loader must be installed"
        return 0
    fi
    local exports
    if [ "$DRY_RUN" = 1 ]; then
        run bash "$ROOT/tools/gpu_bundle.sh" unpack "$BUNDLE" "${BUNDLE_PREFIX:-/tmp/fa-bundle}"
        return 0
    fi
    exports=$(bash "$ROOT/tools/gpu_bundle.sh" unpack "$BUNDLE" "${BUNDLE_PREFIX:-/tmp/fa-bundle}")
    echo "$exports" >"$OUT_DIR/bundle.env"
    echo "$exports"
}

# The targets the checks run: the library, the CLI, the suites that have a cuda or opencl case
# (not the host emulation's hundred configurations: they ran on the CPU in CI) and the examples
# the opencl suites run. tools/gpu_check_verify.py (ctest gpu_check_current) checks that they
# make every program the steps run.
TARGETS=(flashattn flashattn_cli test_forward test_backward test_modifiers test_decode
    test_block_sparse test_positions test_invalid test_nonfinite test_precision test_run
    test_plan_launches test_cuda test_cuda_host example_gpt_block example_train_attention
    example_decode)

s_build() {
    run cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHATTN_CUDA=ON \
        -DFLASHATTN_FUZZ=OFF || return 1
    run cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}" || return 1
    run "$FA" devices
}

s_cuda_suites() {
    run $(suite_env cpu,cuda) ctest --test-dir "$BUILD" -j8 --no-tests=error --output-on-failure \
        -R '_cuda$|^cuda$|^cuda_host$' -E 'ring'
}

# compute-sanitizer TOOL on the cases: SUITE:CASE (a forward runs f32 on CUDA cores, f16 and
# bf16 on tensor cores).
sanitize() {
    local tool=$1 san rc=0
    shift
    san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for sc in "$@"; do
        echo "-- $tool: ${sc%%:*} cuda --case=${sc#*:}"
        run env FLASHATTN_REQUIRE_BACKENDS=cuda "$san" --tool "$tool" --error-exitcode 1 \
            "$BUILD/tests/${sc%%:*}" cuda --case="${sc#*:}" || rc=1
    done
    return $rc
}

SMALL=("test_forward:mha97" "test_backward:mha97" "test_decode:split3 f32")
s_memcheck() {
    sanitize memcheck "${SMALL[@]}"
}

s_torch() {
    run_to "$OUT_DIR/bench_torch.md" "$PY" "$ROOT/tools/bench_torch.py" --flashattn "$FA" \
        --seqs 512,2048,8192 --backward --no-naive --no-opencl --repeat 10
}

s_opencl_suites() {
    [ -f "$OUT_DIR/bundle.env" ] && eval "$(cat "$OUT_DIR/bundle.env")"
    run $(suite_env cpu,opencl) ctest --test-dir "$BUILD" -j2 --no-tests=error --output-on-failure \
        -R '_opencl$' -E 'ring'
}

s_race_sync() {
    local rc=0
    sanitize racecheck "${SMALL[@]}" || rc=1
    sanitize synccheck "${SMALL[@]}" || rc=1
    sanitize memcheck "test_decode:paged3 f16" "test_decode:varlen f16 causal-br split" \
        "test_block_sparse:f16 255x127" "test_block_sparse:f32 odd 113x203" || rc=1
    return $rc
}

s_decode() {
    run_to "$OUT_DIR/bench_decode_cuda.md" env BENCH_DECODE_ARGS=--quiet \
        bash "$ROOT/tools/bench_decode.sh" "$FA" cuda 32768
}

s_python() {
    run env FLASHATTN_LIBRARY="$BUILD/libflashattn.so" PYTHONPATH="$ROOT/python" "$PY" -m pytest \
        -q -p no:cacheprovider -r s "$ROOT/tests/python/test_cuda_tensors.py" \
        "$ROOT/tests/python/test_cuda_interop.py"
}

s_pipeline_ab() {
    local p rc=0
    for p in 0 1; do
        echo "-- FLASHATTN_CUDA_PIPELINE=$p"
        run_to "$OUT_DIR/bench_pipeline_$p.md" env FLASHATTN_CUDA_PIPELINE=$p "$FA" bench \
            --backend cuda --dtype f16,bf16 --dim 64,128 --batch 4 --heads 16 \
            --seq-list 512,2048,8192 --mask none,bottom-right --repeat 9 --check-max-seq 512 \
            --quiet || rc=1
    done
    return $rc
}

# run_to FILE CMD...: the command's output into FILE as well.
run_to() {
    local out=$1
    shift
    if [ "$DRY_RUN" = 1 ]; then
        run "$@"
        echo "  > $out"
    else
        "$@" | tee "$out"
        return "${PIPESTATUS[0]}"
    fi
}

# ---- the stages --------------------------------------------------------------------------
# Estimates (seconds): the build step's configure and targets took 13 s on the 2-core CI
# machine without ccache (2026-11-27; 30 s leaves room for a slower CUDA detection); a cuda
# suite compiles each kernel variant it runs with NVRTC (0.15 s a module on the CI machine:
# ctest `cuda` compiled 133 sm_75 modules in 19.3 s), the largest suites a few hundred modules,
# 8 suites at a time; the rest from the commands' own loops. The first GPU run's summary.md
# gives the real ones: put them here.

echo "| step | status | seconds |" >"$SUMMARY"
echo "|---|---|---|" >>"$SUMMARY"
echo "gpu_check.sh stage $STAGE, budget $BUDGET_S s, logs in $OUT_DIR$([ "$DRY_RUN" = 1 ] &&
    echo ' (dry run)')"
step gpu 5 s_gpu
step bundle 10 s_bundle
[ -f "$OUT_DIR/bundle.env" ] && eval "$(cat "$OUT_DIR/bundle.env")"
step build 30 s_build
if [ "$STAGE" = 1 ]; then
    step cuda-suites 150 s_cuda_suites
    step memcheck 60 s_memcheck
    step torch 120 s_torch
else
    step opencl-suites 150 s_opencl_suites
    step race-sync 120 s_race_sync
    step decode 60 s_decode
    step python 40 s_python
    step pipeline-ab 90 s_pipeline_ab
fi
printf '\n==== summary (stage %s, %d s)\n' "$STAGE" $((SECONDS - START))
cat "$SUMMARY"
if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: nothing was run"
elif [ -n "$FAILED" ]; then
    echo "failed:$FAILED"
    exit 1
fi
