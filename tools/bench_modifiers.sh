#!/usr/bin/env bash
# bench_modifiers.sh - what each score modifier and dropout costs in the forward, measured side
# by side: every variant runs once per round, in turn, for ROUNDS rounds, and the median of its
# rounds is reported against the plain forward's. Prints the command, device and date so the
# table can go into docs/benchmarks.md as it is.
#
#   tools/bench_modifiers.sh [FLASHATTN_BINARY [BACKEND [SEQ [DIM [ROUNDS]]]]]
#   (defaults: build/tools/flashattn opencl 2048 64 3; batch 1, 8 heads, f32)
set -eu
fa=${1:-build/tools/flashattn}
backend=${2:-opencl}
seq=${3:-2048}
dim=${4:-64}
rounds=${5:-3}
base=(run --backend "$backend" --batch 1 --heads 8 --seq "$seq" --dim "$dim" --dtype f32 --repeat 3)
names=(none softcap alibi bias window sinks dropout window-256)
flags=("" "--softcap 30" "--alibi" "--bias random" "--window -1,-1" "--sinks random"
       "--dropout 0.1" "--window 256,0")

echo "command: $0 $fa $backend $seq $dim $rounds"
echo "each:    flashattn ${base[*]} <flags>"
echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
"$fa" "${base[@]}" | grep -m1 '^backend' | sed 's/^backend */device:  /'
declare -A times
for r in $(seq 1 "$rounds"); do
    for i in "${!names[@]}"; do
        # shellcheck disable=SC2086 # the flags are words on purpose
        ms=$("$fa" "${base[@]}" ${flags[$i]} | awk '/^time/ {print $2}')
        times[${names[$i]}]="${times[${names[$i]}]:-} $ms"
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
plain=$(echo "${times[none]}" | median)
printf '%-11s %-16s %-26s %s\n' feature flags "ms (each round)" "median vs none"
for i in "${!names[@]}"; do
    m=$(echo "${times[${names[$i]}]}" | median)
    printf '%-11s %-16s %-26s %s ms, %+.1f%%\n' "${names[$i]}" "${flags[$i]:--}" \
        "${times[${names[$i]}]# }" "$m" "$(awk -v a="$m" -v b="$plain" 'BEGIN {print (a / b - 1) * 100}')"
done
