#!/usr/bin/env bash
# bench_decode.sh - the decoding comparisons, one `flashattn bench --decode` each, their tables
# printed one after the other (each with its command line, device and date, so it can go into
# docs/benchmarks.md as it is):
#   1. split-KV (the planner's choice) against split-KV off (--kv-splits 1), contiguous K/V;
#   2. paged K/V (pages of PAGE keys) against contiguous, split-KV as the planner chooses.
#
#   tools/bench_decode.sh [FLASHATTN_BINARY [BACKEND [MAX_SEQLEN_K [PAGE [DTYPE]]]]]
#   (defaults: build/tools/flashattn opencl 131072 16 f16; batch 1 and 8, heads 32 (kv 8),
#   dim 128; extra options for both runs in BENCH_DECODE_ARGS, e.g. "--repeat 9 --quiet")
set -eu
fa=${1:-build/tools/flashattn}
backend=${2:-opencl}
max=${3:-131072}
page=${4:-16}
dtype=${5:-f16}
read -r -a extra <<<"${BENCH_DECODE_ARGS:-}"
base=(bench --decode --backend "$backend" --dtype "$dtype" --max-seqlen-k "$max" "${extra[@]}")

echo "## split-KV on (the planner) vs off (--kv-splits 1)"
"$fa" "${base[@]}" --compare-splits
echo
echo "## paged (pages of $page keys) vs contiguous"
"$fa" "${base[@]}" --compare-paged --paged "$page"
