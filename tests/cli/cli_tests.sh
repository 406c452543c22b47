#!/usr/bin/env bash
# cli_tests.sh - end-to-end checks of the `flashattn` command-line program.
#
# usage: cli_tests.sh path/to/flashattn
#
# Prints one line per check ("PASS name" / "FAIL name: why") and a last line "N passed, N failed";
# exits 1 when any check failed. Needs only bash and coreutils: malformed .npy files are written
# byte by byte with printf, valid ones by the CLI itself (--save-inputs, --out), so numpy is not
# required. Every run is on the cpu backend except the one that exercises --backend auto.
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
    echo "usage: $0 path/to/flashattn" >&2
    exit 2
fi
FA=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/flashattn-cli.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT
ulimit -c 0 2>/dev/null # a crash must show as an exit status >= 128, not leave a core file

# The environment must not steer the runs below.
unset FLASHATTN_BACKEND FLASHATTN_DEVICE FLASHATTN_BLOCK_R FLASHATTN_BLOCK_C

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1: $2"; }

# fa ARGS...: runs the CLI; sets RC, and leaves stdout in $TMP/out and stderr in $TMP/err.
# With LIMIT=S set, a run that takes longer than S seconds is stopped (exit 124); with VMEM=K,
# it runs with its address space capped at K KiB (ulimit -v).
fa() {
    (
        if [ -n "${VMEM:-}" ]; then ulimit -v "$VMEM" || exit 125; fi
        if [ -n "${LIMIT:-}" ]; then exec timeout "$LIMIT" "$FA" "$@"; fi
        exec "$FA" "$@"
    ) >"$TMP/out" 2>"$TMP/err"
    RC=$?
}

err_lines() { wc -l <"$TMP/err" | tr -d ' '; }
first_err() { head -n 1 "$TMP/err"; }

# expect_ok NAME ARGS...: exit 0.
expect_ok() {
    local name=$1
    shift
    fa "$@"
    if [ "$RC" -eq 0 ]; then pass "$name"; else fail "$name" "exit $RC: $(first_err)"; fi
}

# expect_stdout NAME REGEX ARGS...: exit 0 and a stdout line matching the extended regex.
expect_stdout() {
    local name=$1 re=$2
    shift 2
    fa "$@"
    if [ "$RC" -ne 0 ]; then
        fail "$name" "exit $RC: $(first_err)"
    elif ! grep -Eq -- "$re" "$TMP/out"; then
        fail "$name" "no stdout line matches /$re/"
    else
        pass "$name"
    fi
}

# expect_error NAME WANT_RC REGEX ARGS...: the given exit status (or "nonzero": any 1..127),
# exactly one line on stderr, matching the regex, and nothing that looks like a crash.
expect_error() {
    local name=$1 want=$2 re=$3
    shift 3
    fa "$@"
    if [ "$RC" -ge 128 ]; then
        fail "$name" "crashed (exit $RC)"
    elif [ "$want" = nonzero ] && [ "$RC" -eq 0 ]; then
        fail "$name" "exit 0, want an error"
    elif [ "$want" != nonzero ] && [ "$RC" -ne "$want" ]; then
        fail "$name" "exit $RC, want $want: $(first_err)"
    elif [ "$(err_lines)" != 1 ]; then
        fail "$name" "$(err_lines) lines on stderr, want 1"
    elif ! grep -Eq -- "$re" "$TMP/err"; then
        fail "$name" "stderr '$(first_err)' does not match /$re/"
    else
        pass "$name"
    fi
}

# same_files NAME A B: byte-identical files.
same_files() {
    if [ ! -f "$2" ] || [ ! -f "$3" ]; then
        fail "$1" "missing output ($2 or $3)"
    elif cmp -s "$2" "$3"; then
        pass "$1"
    else
        fail "$1" "$2 and $3 differ"
    fi
}

# auto_short NAME REGEX ARGS...: the line matching REGEX (the AUTO backend's note) is one short
# line without status names or dlopen's messages; with --verbose it is the library's note in
# full, which names the status of each backend passed over.
auto_short() {
    local name=$1 re=$2 line full
    shift 2
    fa "$@"
    line=$(grep -E -- "$re" "$TMP/out" | head -n 1)
    fa "$@" --verbose
    full=$(grep -E -- "$re" "$TMP/out" | head -n 1)
    if [ -z "$line" ]; then
        fail "$name" "no line matches /$re/"
    elif [[ $line == *FA_STATUS_* || $line == *"dlopen says"* ]] || [ ${#line} -gt 100 ]; then
        fail "$name" "not short: $line"
    elif [[ $line == *"; picked "* && $full != *"skipped (FA_STATUS_"* ]]; then
        fail "$name" "--verbose does not give the reasons: $full"
    else
        pass "$name"
    fi
}

# le16 N / le32 N: N as 2 or 4 little-endian bytes, written with printf escapes.
le16() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))"; }
le32() { le16 $(($1 & 65535)); le16 $(($1 >> 16 & 65535)); }

# make_npy FILE MAJOR DICT DATA_BYTES [HEADER_LEN]: a .npy file with a raw header dict, padded
# as NumPy pads it, followed by DATA_BYTES zero bytes. HEADER_LEN overrides the length field.
make_npy() {
    local file=$1 major=$2 dict=$3 nbytes=$4 pre len pad header
    pre=$((major == 1 ? 10 : 12))
    pad=$(((64 - (pre + ${#dict} + 1) % 64) % 64))
    header="$dict$(printf '%*s' "$pad" '')"
    len=${5:-$((${#header} + 1))}
    {
        printf '\x93NUMPY'
        printf "\\x$(printf %02x "$major")\\x00"
        if [ "$major" -eq 1 ]; then le16 "$len"; else le32 "$len"; fi
        printf '%s\n' "$header"
        head -c "$nbytes" /dev/zero
    } >"$file"
}

# dict DESCR FORTRAN SHAPE: a header dict as NumPy writes it.
dict() { printf "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" "$1" "$2" "$3"; }

# ---- help, version, dispatch ----------------------------------------------------------------
expect_stdout "help" '^usage: flashattn' --help
for cmd in devices plan run bench; do
    expect_stdout "$cmd --help" "^usage: flashattn $cmd" "$cmd" --help
done
expect_stdout "run --help lists --backward" '^  --backward +then the backward pass' run --help
expect_stdout "run --help lists --do" '^  --do FILE +dO from \.npy' run --help
expect_stdout "run --help lists --dq" '^  --dq FILE +write dQ' run --help
expect_stdout "plan --help lists --backward" '^  --backward +plan the backward pass' plan --help
expect_stdout "bench --help lists --pass" '^  --pass P +what is timed: fwd, bwd or fwd\+bwd' \
    bench --help
expect_stdout "version" '^flashattn [0-9]+\.[0-9]+\.[0-9]+' --version
expect_error "no command" 2 'missing command'
expect_error "unknown command" 2 "unknown command 'frobnicate'" frobnicate

# ---- devices and plan -----------------------------------------------------------------------
expect_stdout "devices lists cpu" '^cpu: [1-9][0-9]* device' devices
expect_stdout "devices lists opencl" '^opencl: ' devices
expect_stdout "devices lists cuda" '^cuda: ' devices
# f16/bf16 storage works on every device; the native-arithmetic flag is a separate line, so a
# "no" there is not read as "f16 does not run".
expect_stdout "devices f16/bf16 storage" '^    f16/bf16 storage +yes / yes' devices --backend cpu
expect_stdout "devices f16/bf16 math" '^    f16/bf16 math +(yes|no) / (yes|no) \(informational' \
    devices --backend cpu
expect_stdout "plan prints Br" '^Br +[1-9][0-9]*$' plan --backend cpu --seq 128 --dim 64
expect_stdout "plan prints Bc" '^Bc +[1-9][0-9]*$' plan --backend cpu --seq 128 --dim 64
expect_stdout "plan prints work-groups" '^work-groups +[1-9]' plan --backend cpu --seq 128 --dim 64
expect_stdout "plan gqa causal f16" '^problem .*heads 8 \(kv 2\).*f16.*mask bottom-right' \
    plan --backend cpu --seq 100 --seq-k 300 --heads 8 --heads-kv 2 --dim 80 --dtype f16 \
    --causal bottom-right
expect_error "plan head_dim too large" 2 '--dim: 1000 is out of range \(1\.\.256\)' \
    plan --backend cpu --dim 1000
expect_error "plan heads mismatch" 1 '^flashattn: FA_STATUS_HEADS_MISMATCH: ' \
    plan --backend cpu --heads 8 --heads-kv 3

# plan --backward: the backward plan and its memory formula, whose numbers add up, and whose
# peak is what a backward run on the cpu backend measures (its scratch outweighs the forward's).
PB=(--backend cpu --heads 2 --seq 37 --dim 16)
expect_stdout "plan backward pass" '^pass +backward: dO -> dQ, dK, dV$' plan "${PB[@]}" --backward
expect_stdout "plan backward tensors" \
    '^tensors +Q 4736 \+ K 4736 \+ V 4736 \+ O 4736 \+ dO 4736 \+ dQ 4736 \+ dK 4736 \+ dV 4736 \+ LSE 296 .*= 38184 B$' \
    plan "${PB[@]}" --backward
fa plan "${PB[@]}" --backward
# The terms of the tensors line ("Q 4736 + K 4736 + ... + LSE 296 (..) = 38184 B") add up to
# its total, and the peak line is that total plus the scratch line.
terms=$(sed -n 's/^tensors *\(.*\) = [0-9]* B$/\1/p' "$TMP/out" | grep -o '[A-Za-z]* [0-9][0-9]*' |
    awk '{ t += $2 } END { print t + 0 }')
total=$(sed -n 's/^tensors .* = \([0-9]*\) B$/\1/p' "$TMP/out")
scratch=$(sed -n 's/^scratch *\([0-9]*\) B .*/\1/p' "$TMP/out")
peak=$(sed -n 's/^peak memory *tensors \([0-9]*\) B + scratch \([0-9]*\) B = \([0-9]*\) B.*/\1 \2 \3/p' "$TMP/out")
if [ "$RC" -eq 0 ] && [ -n "$total" ] && [ "$terms" = "$total" ] && [ -n "$scratch" ] &&
    [ "$peak" = "$total $scratch $((total + scratch))" ]; then
    pass "plan backward peak = tensors + scratch"
else
    fail "plan backward peak = tensors + scratch" "exit $RC, terms $terms, total $total, scratch $scratch, peak line: $peak"
fi
plan_peak=$(awk '/^peak memory / { for (i = 1; i <= NF; i++) if ($i == "=") print $(i + 1) }' "$TMP/out")
plan_scratch=$(awk '/^scratch / { print $2 }' "$TMP/out")
fa run "${PB[@]}" --backward
run_peak=$(awk '/^peak memory / { print $3 }' "$TMP/out")
run_scratch=$(sed -n 's/^bwd plan .*, scratch \([0-9]*\) B.*/\1/p' "$TMP/out")
if [ "$RC" -eq 0 ] && [ -n "$plan_peak" ] && [ "$plan_peak" = "$run_peak" ] &&
    [ "$plan_scratch" = "$run_scratch" ]; then
    pass "plan backward peak is the run's"
else
    fail "plan backward peak is the run's" "plan $plan_peak (scratch $plan_scratch), run $run_peak (scratch $run_scratch)"
fi
expect_stdout "plan forward has no memory formula" '^work-groups ' plan "${PB[@]}"
if grep -q '^tensors ' "$TMP/out"; then fail "plan forward prints no formula" "it does"
else pass "plan forward prints no formula"; fi
# --arch plans for a known CUDA architecture without a GPU; only when the backend is built in.
if ! "$FA" devices --backend cuda 2>/dev/null | grep -q 'not built into'; then
    expect_stdout "plan cuda --arch sm_90" '^Br +128$' \
        plan --backend cuda --arch sm_90 --dtype f16 --dim 128 --seq 4096
    expect_stdout "plan cuda --arch sm_90 Bc" '^Bc +64$' \
        plan --backend cuda --arch sm_90 --dtype f16 --dim 128 --seq 4096
    expect_stdout "plan cuda --arch sm_90 tensor cores" '^kernel: tensor cores' \
        plan --backend cuda --arch sm_90 --dtype f16 --dim 128 --seq 4096
    expect_stdout "plan cuda --arch sm_75 CUDA cores" '^kernel: CUDA cores' \
        plan --backend cuda --arch sm_75 --dtype f16 --dim 128 --seq 4096
    expect_error "plan cuda --arch unknown" 1 'unknown CUDA architecture "sm_70"' \
        plan --backend cuda --arch sm_70
    expect_error "plan --arch needs cuda" 2 'needs --backend cuda' plan --backend cpu --arch sm_90
fi
# --profile plans for a known OpenCL GPU without it: half of gfx90a's 64 KiB, 64 work-items
# (32 rows of 2 lanes, Bc 32; docs/backends-opencl.md, "Plan rules").
if ! "$FA" devices --backend opencl 2>/dev/null | grep -q 'not built into'; then
    expect_stdout "plan opencl --profile amd-gfx90a" '^work-group +64$' \
        plan --backend opencl --profile amd-gfx90a --dim 64 --seq 2048
    expect_stdout "plan opencl --profile Bc" '^Bc +32$' \
        plan --backend opencl --profile amd-gfx90a --dim 64 --seq 2048
    expect_stdout "plan opencl --profile budget" '^on-chip budget 32768 of 65536 bytes' \
        plan --backend opencl --profile amd-gfx90a --dim 64 --seq 2048
    expect_error "plan opencl --profile unknown" 1 'unknown OpenCL device profile "gfx90a"' \
        plan --backend opencl --profile gfx90a
    expect_error "plan --profile needs opencl" 2 'needs --backend opencl' \
        plan --backend cpu --profile amd-gfx90a
fi
expect_stdout "devices says what auto picks" '^auto: (cpu|opencl|cuda) device [0-9]+ \(' devices
auto_short "devices auto line" '^auto: ' devices

# ---- run and --check ------------------------------------------------------------------------
SMALL=(--backend cpu --batch 1 --heads 2 --seq 37 --dim 16)
expect_stdout "run check f32" '^check +PASS' run "${SMALL[@]}" --check
expect_stdout "run check f16" '^check +PASS' run "${SMALL[@]}" --dtype f16 --check
expect_stdout "run check bf16" '^check +PASS' run "${SMALL[@]}" --dtype bf16 --check
expect_stdout "run check causal top-left" '^check +PASS' \
    run "${SMALL[@]}" --causal top-left --check
expect_stdout "run check causal bottom-right" '^check +PASS' \
    run "${SMALL[@]}" --seq-k 50 --causal bottom-right --check
expect_stdout "run check gqa bshd" '^check +PASS' \
    run --backend cpu --batch 2 --heads 4 --heads-kv 2 --seq 19 --seq-k 23 --dim 8 \
    --layout bshd --check
expect_stdout "run check tile overrides" '^plan +Br 4, Bc 8,' \
    run "${SMALL[@]}" --block-r 4 --block-c 8 --check
expect_stdout "run prints GFLOP/s" 'GFLOP/s|too fast' run "${SMALL[@]}"
expect_stdout "run prints peak memory" '^peak memory +[1-9][0-9]* B' run "${SMALL[@]}"
expect_stdout "run repeat median" 'median of 3 after 1 warm-up' run "${SMALL[@]}" --repeat 3
expect_stdout "run auto backend" '^backend +[a-z]+ \(picked by auto\)' run --seq 16 --dim 16
expect_stdout "run auto says why" '^auto +.*picked [a-z]+$' run --seq 16 --dim 16
auto_short "run auto line" '^auto ' run --seq 16 --dim 16
auto_short "plan auto line" '^auto ' plan --seq 16 --dim 16
FLASHATTN_BACKEND=cpu expect_stdout "plan auto from the environment" '^auto +FLASHATTN_BACKEND = cpu$' \
    plan --seq 16 --dim 16
expect_stdout "run seq_k 0" '^check +PASS' run "${SMALL[@]}" --seq-k 0 --check
# On cpu the run is the golden: --check takes the naive attention of tools/baselines instead,
# or says plainly that it checks the golden against itself.
expect_stdout "run cpu check: naive reference" \
    '^reference +naive attention \(tools/baselines.*independent of the golden$' \
    run "${SMALL[@]}" --causal bottom-right --seq-k 29 --check
expect_stdout "run cpu check: golden against itself, said" \
    '^reference +cpu, .*the golden checked against itself.*: it has no score modifiers' \
    run "${SMALL[@]}" --softcap 30 --check

# ---- run --backward: dO -> dQ, dK, dV, checked against the CPU golden --------------------------
# bwd_check NAME ARGS...: exit 0, O's check and each gradient's check PASS.
bwd_check() {
    local name=$1 n
    shift
    fa "$@"
    n=$(grep -Ec '^d[QKV] check +PASS$' "$TMP/out")
    if [ "$RC" -ne 0 ]; then
        fail "$name" "exit $RC: $(first_err)"
    elif [ "$n" != 3 ] || ! grep -Eq '^check +PASS$' "$TMP/out"; then
        fail "$name" "$n of dQ, dK, dV checked PASS, O: $(grep -E '^check' "$TMP/out")"
    else
        pass "$name"
    fi
}
bwd_check "run backward check f32" run "${SMALL[@]}" --backward --check
bwd_check "run backward check f16" run "${SMALL[@]}" --backward --dtype f16 --check
bwd_check "run backward check bf16" run "${SMALL[@]}" --backward --dtype bf16 --check
bwd_check "run backward check gqa bshd bottom-right" run --backend cpu --batch 2 --heads 4 \
    --heads-kv 2 --seq 19 --seq-k 23 --dim 8 --layout bshd --causal bottom-right --backward --check
bwd_check "run backward check fully masked rows" run "${SMALL[@]}" --seq-k 20 \
    --causal bottom-right --backward --check
expect_stdout "run backward prints its plan" '^bwd plan +Br [1-9][0-9]*, Bc [1-9][0-9]*, .*scratch ' \
    run "${SMALL[@]}" --backward
# The backward's GFLOP/s counts 2.5 forwards: 2.5 * 4*B*H*S*S*d = 438080 FLOP here.
fa run "${SMALL[@]}" --backward --repeat 3
rate=$(awk '/^bwd time / { ms = $3 } /^bwd throughput / { gf = $3 }
    END { if (ms > 0 && gf > 0) { r = gf / (438080 / (ms * 1e6)); print (r > 0.95 && r < 1.05) ? "ok" : r } }' "$TMP/out")
if [ "$RC" -eq 0 ] && [ "$rate" = ok ]; then pass "run backward GFLOP/s counts 2.5 forwards"
else fail "run backward GFLOP/s counts 2.5 forwards" "exit $RC, GFLOP/s / expected = '$rate'"; fi
# dO is drawn after Q, K and V: the forward of a --backward run is that of a forward-only one.
expect_ok "run forward only, O" run "${SMALL[@]}" --seed 3 --out "$TMP/o_fwd.npy"
expect_ok "run backward, O" run "${SMALL[@]}" --seed 3 --backward --out "$TMP/o_bwd.npy"
same_files "run backward leaves the forward's inputs" "$TMP/o_fwd.npy" "$TMP/o_bwd.npy"

# ---- .npy round trips -----------------------------------------------------------------------
SHAPE=(--batch 2 --heads 4 --heads-kv 2 --seq 33 --seq-k 40 --dim 24)
for dt in f32 f16 bf16; do
    D=$TMP/rt_$dt
    mkdir -p "$D"
    expect_ok "save inputs $dt" run --backend cpu "${SHAPE[@]}" --dtype "$dt" --seed 7 \
        --save-inputs "$D" --out "$D/o1.npy" --lse "$D/l1.npy"
    # f16 comes back as '<f2' by itself; bf16 inputs are saved as float32 and need --dtype.
    extra=()
    [ "$dt" = bf16 ] && extra=(--dtype bf16)
    expect_ok "load inputs $dt" run --backend cpu --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" \
        "${extra[@]}" --out "$D/o2.npy" --lse "$D/l2.npy"
    same_files "round trip O $dt" "$D/o1.npy" "$D/o2.npy"
    same_files "round trip LSE $dt" "$D/l1.npy" "$D/l2.npy"
done

# A version 2.0 file holding the same data as a 1.0 one reads the same.
RT=$TMP/rt_f32
for t in q k v; do
    case $t in q) shape='(2, 4, 33, 24)'; n=$((2 * 4 * 33 * 24)) ;; *) shape='(2, 2, 40, 24)'; n=$((2 * 2 * 40 * 24)) ;; esac
    make_npy "$TMP/v2_$t.npy" 2 "$(dict '<f4' False "$shape")" 0
    tail -c $((n * 4)) "$RT/$t.npy" >>"$TMP/v2_$t.npy"
done
expect_ok "read npy 2.0" run --backend cpu --q "$TMP/v2_q.npy" --k "$TMP/v2_k.npy" \
    --v "$TMP/v2_v.npy" --out "$TMP/o_v2.npy"
same_files "npy 2.0 matches 1.0" "$RT/o1.npy" "$TMP/o_v2.npy"

# The backward through files: dO saved with the inputs, the gradients written, read back the
# same, each with its tensor's shape and the inputs' dtype ('<f2' for f16, '<f4' otherwise).
npy_header() { head -c 128 "$1" | tr -c '[:print:]' ' '; }
# grad_file NAME FILE DESCR SHAPE: the file's header holds that dtype and shape.
grad_file() {
    local h
    h=$(npy_header "$2")
    if [ ! -f "$2" ]; then fail "$1" "no $2"
    elif [[ $h != *"'descr': '$3'"* ]] || [[ $h != *"'shape': $4"* ]]; then fail "$1" "header: $h"
    else pass "$1"; fi
}
for dt in f32 f16; do
    D=$TMP/bwd_$dt
    mkdir -p "$D"
    descr='<f4'
    [ "$dt" = f16 ] && descr='<f2'
    expect_ok "backward save inputs $dt" run --backend cpu "${SHAPE[@]}" --dtype "$dt" --seed 9 \
        --backward --save-inputs "$D" --dq "$D/dq1.npy" --dk "$D/dk1.npy" --dv "$D/dv1.npy"
    grad_file "backward saves dO $dt" "$D/do.npy" "$descr" '(2, 4, 33, 24)'
    grad_file "dQ file $dt" "$D/dq1.npy" "$descr" '(2, 4, 33, 24)'
    grad_file "dK file $dt" "$D/dk1.npy" "$descr" '(2, 2, 40, 24)'
    grad_file "dV file $dt" "$D/dv1.npy" "$descr" '(2, 2, 40, 24)'
    bwd_check "backward from files $dt" run --backend cpu --q "$D/q.npy" --k "$D/k.npy" \
        --v "$D/v.npy" --do "$D/do.npy" --dq "$D/dq2.npy" --dk "$D/dk2.npy" --dv "$D/dv2.npy" \
        --check
    for g in dq dk dv; do
        same_files "round trip $g $dt" "$D/${g}1.npy" "$D/${g}2.npy"
    done
done

# ---- malformed .npy inputs: one line on stderr naming the file, exit 1..127 -----------------
# Valid all-zero inputs written here, so these checks do not depend on any backend working.
GOOD=$TMP/good
M=$TMP/bad
mkdir -p "$GOOD" "$M"
make_npy "$GOOD/q.npy" 1 "$(dict '<f4' False '(2, 4, 33, 24)')" $((2 * 4 * 33 * 24 * 4))
make_npy "$GOOD/k.npy" 1 "$(dict '<f4' False '(2, 2, 40, 24)')" $((2 * 2 * 40 * 24 * 4))
cp "$GOOD/k.npy" "$GOOD/v.npy"
make_npy "$GOOD/k16.npy" 1 "$(dict '<f2' False '(2, 2, 40, 24)')" $((2 * 2 * 40 * 24 * 2))
expect_ok "npy zeros read" run --backend cpu --q "$GOOD/q.npy" --k "$GOOD/k.npy" --v "$GOOD/v.npy"
bad_q() { # bad_q NAME REGEX FILE: the bad file as Q, good K and V.
    expect_error "npy $1" nonzero "$3: .*$2" run --backend cpu --q "$3" --k "$GOOD/k.npy" \
        --v "$GOOD/v.npy"
}
head -c 100 "$GOOD/q.npy" >"$M/trunc_data.npy"
bad_q "truncated data" 'truncated' "$M/trunc_data.npy"
head -c 30 "$GOOD/q.npy" >"$M/trunc_header.npy"
bad_q "truncated header" 'truncated header' "$M/trunc_header.npy"
head -c 7 "$GOOD/q.npy" >"$M/trunc_preamble.npy"
bad_q "truncated preamble" 'truncated preamble' "$M/trunc_preamble.npy"
: >"$M/empty.npy"
bad_q "empty file" 'bad magic' "$M/empty.npy"
{ printf 'XNUMPY'; tail -c +7 "$GOOD/q.npy"; } >"$M/magic.npy"
bad_q "bad magic" 'bad magic' "$M/magic.npy"
make_npy "$M/f8.npy" 1 "$(dict '<f8' False '(2, 4, 33, 24)')" $((2 * 4 * 33 * 24 * 8))
bad_q "dtype <f8" "unsupported dtype '<f8'" "$M/f8.npy"
make_npy "$M/esc.npy" 1 "$(dict $'\x1b[31m\x01' False '(2, 4, 33, 24)')" 64
bad_q "dtype with control bytes, escaped" "unsupported dtype '\\\\x1b\\[31m\\\\x01'" "$M/esc.npy"
if grep -q $'\x1b' "$TMP/err"; then fail "npy descr: no raw escape byte" "stderr holds ESC"
else pass "npy descr: no raw escape byte"; fi
make_npy "$M/be.npy" 1 "$(dict '>f4' False '(2, 4, 33, 24)')" $((2 * 4 * 33 * 24 * 4))
bad_q "dtype >f4" "unsupported dtype '>f4'" "$M/be.npy"
make_npy "$M/fortran.npy" 1 "$(dict '<f4' True '(2, 4, 33, 24)')" $((2 * 4 * 33 * 24 * 4))
bad_q "fortran order" 'fortran_order' "$M/fortran.npy"
make_npy "$M/rank3.npy" 1 "$(dict '<f4' False '(8, 33, 24)')" $((8 * 33 * 24 * 4))
bad_q "rank 3" 'rank 3' "$M/rank3.npy"
make_npy "$M/giant.npy" 1 "$(dict '<f4' False '(1, 1, 100000000, 64)')" 64
bad_q "giant shape, short file" 'truncated' "$M/giant.npy"
make_npy "$M/overflow.npy" 1 "$(dict '<f4' False '(4611686018427387904, 4611686018427387904, 1, 1)')" 64
bad_q "shape overflows size_t" 'too large' "$M/overflow.npy"
make_npy "$M/overflow64.npy" 1 "$(dict '<f4' False '(99999999999999999999, 1, 1, 1)')" 64
bad_q "dimension past 64 bits" '64 bits' "$M/overflow64.npy"
make_npy "$M/zero_huge.npy" 1 "$(dict '<f4' False '(0, 4611686018427387904, 1, 1)')" 0
bad_q "empty but huge dimension" 'too large' "$M/zero_huge.npy"
make_npy "$M/negative.npy" 1 "$(dict '<f4' False '(2, -4, 33, 24)')" 64
bad_q "negative dimension" 'non-negative' "$M/negative.npy"
make_npy "$M/absurd.npy" 2 "$(dict '<f4' False '(2, 4, 33, 24)')" 0 4294967280
bad_q "absurd header length" 'absurd' "$M/absurd.npy"
make_npy "$M/past_end.npy" 1 "$(dict '<f4' False '(2, 4, 33, 24)')" 0 60000
bad_q "header length past the end" 'truncated header' "$M/past_end.npy"
{ head -c 6 "$GOOD/q.npy"; printf '\x09\x00'; tail -c +9 "$GOOD/q.npy"; } >"$M/version.npy"
bad_q "unknown version" 'version 9.0' "$M/version.npy"
make_npy "$M/garbage.npy" 1 "hello, world" 0
bad_q "header not a dict" 'not a dict' "$M/garbage.npy"
make_npy "$M/noshape.npy" 1 "{'descr': '<f4', 'fortran_order': False, }" 4
bad_q "header without shape" "no 'shape'" "$M/noshape.npy"
make_npy "$M/unterminated.npy" 1 "{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }" 4
bad_q "malformed header" 'bad header' "$M/unterminated.npy"
{ cat "$GOOD/q.npy"; printf 'xx'; } >"$M/trailing.npy"
bad_q "trailing data" 'longer than' "$M/trailing.npy"
bad_q "missing file" 'cannot open' "$M/does_not_exist.npy"
bad_q "a directory" 'is a directory' "$M"

# Files that are fine alone but do not agree with each other: a usage error (the layout read
# may be the wrong one) naming the file, its shape and the layout.
make_npy "$M/k_dim.npy" 1 "$(dict '<f4' False '(2, 2, 40, 16)')" $((2 * 2 * 40 * 16 * 4))
expect_error "npy head_dim mismatch" 2 \
    'k_dim.npy: shape \[2, 2, 40, 16\] read as --layout bhsd .*: its head_dim 16 does not match' \
    run --backend cpu --q "$GOOD/q.npy" --k "$M/k_dim.npy" --v "$M/k_dim.npy"
make_npy "$M/k_batch.npy" 1 "$(dict '<f4' False '(3, 2, 40, 24)')" $((3 * 2 * 40 * 24 * 4))
expect_error "npy batch mismatch" 2 'k_batch.npy: shape \[3, 2, 40, 24\] .*its batch 3 does not match' \
    run --backend cpu --q "$GOOD/q.npy" --k "$M/k_batch.npy" --v "$M/k_batch.npy"
make_npy "$M/k_heads.npy" 1 "$(dict '<f4' False '(2, 3, 40, 24)')" $((2 * 3 * 40 * 24 * 4))
expect_error "npy heads do not divide" 2 'k_heads.npy: .*its heads 3 do not divide' \
    run --backend cpu --q "$GOOD/q.npy" --k "$M/k_heads.npy" --v "$M/k_heads.npy"
make_npy "$M/v_seq.npy" 1 "$(dict '<f4' False '(2, 2, 41, 24)')" $((2 * 2 * 41 * 24 * 4))
expect_error "npy v shape differs from k" 2 'v_seq.npy: shape \[2, 2, 41, 24\] does not match' \
    run --backend cpu --q "$GOOD/q.npy" --k "$GOOD/k.npy" --v "$M/v_seq.npy"
expect_error "npy dtype mismatch" 1 "k16.npy: dtype '<f2' does not match" \
    run --backend cpu --q "$GOOD/q.npy" --k "$GOOD/k16.npy" --v "$GOOD/v.npy"
expect_error "--q without --k" 2 'go together' run --backend cpu --q "$GOOD/q.npy"
expect_error "--seq with --q" 2 'cannot be combined' \
    run --backend cpu --q "$GOOD/q.npy" --k "$GOOD/k.npy" --v "$GOOD/v.npy" --seq 10
expect_error "unwritable --out" 1 'cannot create' \
    run "${SMALL[@]}" --out "$TMP/no/such/dir/o.npy"

# The backward's options that do not go together: one line, before any work.
BD=$TMP/bwd_f32
FILES=(--q "$BD/q.npy" --k "$BD/k.npy" --v "$BD/v.npy")
expect_error "--dq without --do" 2 '--dq needs the backward pass: --backward, or --do FILE' \
    run --backend cpu "${FILES[@]}" --dq "$TMP/dq.npy"
expect_error "--dk without --backward" 2 '--dk needs the backward pass' \
    run "${SMALL[@]}" --dk "$TMP/dk.npy"
expect_error "--backward with files needs --do" 2 '--backward with --q, --k and --v needs --do' \
    run --backend cpu "${FILES[@]}" --backward
expect_error "--do without --q" 2 '--do goes with --q, --k and --v' \
    run "${SMALL[@]}" --do "$BD/do.npy"
expect_error "--do shape is not Q's" 2 'k.npy: shape \[2, 2, 40, 24\] does not match .*dO has the shape of Q' \
    run --backend cpu "${FILES[@]}" --do "$BD/k.npy"
expect_error "--do dtype is not Q's" 1 "do.npy: dtype '<f2' does not match" \
    run --backend cpu "${FILES[@]}" --do "$TMP/bwd_f16/do.npy"
expect_error "unwritable --dv" 1 'cannot create the dV file' \
    run "${SMALL[@]}" --backward --dv "$TMP/no/such/dir/dv.npy"
if [ -e "$TMP/dq.npy" ] || [ -e "$TMP/dk.npy" ]; then fail "bad backward lines write nothing" "a file was made"
else pass "bad backward lines write nothing"; fi

# ---- .npy files in --layout, and the reader's bounds: cli_files_tests.sh ----------------------
# shellcheck source=cli_files_tests.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_files_tests.sh"

# ---- bench: cli_bench_tests.sh -------------------------------------------------------------
# shellcheck source=cli_bench_tests.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_bench_tests.sh"

# ---- score modifiers and dropout: cli_modifier_tests.sh ------------------------------------
# shellcheck source=cli_modifier_tests.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_modifier_tests.sh"
# shellcheck source=cli_decode_tests.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_decode_tests.sh"
# ---- block-sparse options, plan's tiles and --svg: cli_block_sparse_tests.sh ----------------
# shellcheck source=cli_block_sparse_tests.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_block_sparse_tests.sh"

# ---- bad command lines: one line on stderr, exit 2 ------------------------------------------
expect_error "seq abc" 2 "'abc' is not an integer" run --seq abc
expect_error "seq -5" 2 'out of range' run --seq -5
expect_error "seq overflow" 2 'out of range' run --seq 99999999999999999999999
expect_error "seq too large" 2 'out of range' run --seq 3000000000
expect_error "seq 1.5" 2 'not an integer' run --seq 1.5
expect_error "seq empty" 2 'not an integer' run --seq=
expect_error "dim 12x" 2 'not an integer' plan --dim 12x
expect_error "repeat 0" 2 'out of range' run --repeat 0
expect_error "seed -1" 2 'not a non-negative integer' run --seed -1
expect_error "device -1" 2 'out of range' run --device -1
expect_error "scale abc" 2 'not a number' run --scale abc
expect_error "scale 1e999" 2 'out of range' run --scale 1e999
expect_error "missing value" 2 'needs a value' run --seq
expect_error "unknown option" 2 "unknown option '--frobnicate'" run --frobnicate 3
expect_error "flag with a value" 2 'takes no value' run --check=yes
expect_error "value missing before an option" 2 \
    '--causal needs a value \(ALIGN: top-left, bottom-right or none\)' run --causal --check
expect_error "layout value missing" 2 '--layout needs a value \(L: bhsd or bshd\)' run --layout
# Sizes the library would refuse by a field the user never gave (num_pages): a usage error
# naming the options.
PAGED=(--backend cpu --seq 16 --dim 16 --paged 1 --batch 2000 --seq-k 2000000)
expect_error "run paged pool too large" 2 \
    '^flashattn run: --paged 1: 2000 sequences \(--batch\) of 2000000 keys \(--seq-k\) need 4000000003 pages, more than' \
    run "${PAGED[@]}"
expect_error "plan paged pool too large" 2 '^flashattn plan: --paged 1: 2000 sequences' \
    plan "${PAGED[@]}"
expect_error "bench decode pool too large" 2 \
    '^flashattn bench --decode: --paged 1: --batch 2000000000 at seq_k 1024 \(--max-seqlen-k\)' \
    bench --decode --backend cpu --batch 2000000000 --paged 1 --max-seqlen-k 1024
# --heads 4 with the default --heads-kv (8) is multi-head attention, not an error about 8.
expect_stdout "bench decode --heads 4" '^# problem +decode: .*heads 4 \(kv 4\)' \
    bench --decode --backend cpu --heads 4 --dim 16 --batch 1 --max-seqlen-k 1024 --repeat 1 \
    --copy-mib 1 --quiet
expect_error "bench decode --heads-kv given" 2 '--heads-kv 3 does not divide --heads 4' \
    bench --decode --heads 4 --heads-kv 3
# The options' ranges are the library's limits, not INT32_MAX.
expect_error "dim 0" 2 '--dim: 0 is out of range \(1\.\.256\)' run --backend cpu --dim 0
expect_error "heads 0" 2 '--heads: 0 is out of range \(1\.\.' run --backend cpu --heads 0
expect_error "heads-kv 0" 2 '--heads-kv: 0 is out of range \(1\.\.' run --backend cpu --heads-kv 0
expect_error "positional argument" 2 "unexpected argument 'extra'" run extra
expect_error "bad backend" 2 "unknown backend 'tpu'" run --backend tpu
expect_error "bad dtype" 2 "unknown dtype 'f64'" run --dtype f64
expect_error "bad causal" 2 "unknown mask 'diagonal'" run --causal diagonal
expect_error "bad layout" 2 "unknown layout 'sbhd'" run --layout sbhd
expect_error "devices unknown option" 2 "unknown option" devices --all

# ---- library errors: "flashattn: FA_STATUS_X: message", exit 1 ------------------------------
expect_error "run heads mismatch" 1 '^flashattn: FA_STATUS_HEADS_MISMATCH: ' \
    run --backend cpu --heads 8 --heads-kv 3
expect_error "run head_dim 300" 2 '--dim: 300 is out of range \(1\.\.256\)' \
    run --backend cpu --dim 300
expect_error "run scale nan" 1 '^flashattn: FA_STATUS_INVALID_SCALE: ' \
    run --backend cpu --scale nan
expect_error "run bad device" 1 '^flashattn: FA_STATUS_DEVICE_NOT_FOUND: ' \
    run --backend cpu --device 7
expect_error "run huge problem" 1 '^flashattn: ' \
    run --backend cpu --batch 2000000000 --heads 2000000000 --seq 2000000000 --dim 64

# The status name once: "flashattn: FA_STATUS_X: message", not "FA_STATUS_X: FA_STATUS_X: ...".
status_once() { # status_once NAME ARGS...: one FA_STATUS_ word on stderr
    local name=$1
    shift
    fa "$@"
    if [ "$RC" -ne 1 ]; then
        fail "$name" "exit $RC, want 1: $(first_err)"
    elif [ "$(grep -o 'FA_STATUS_[A-Z_]*' "$TMP/err" | wc -l | tr -d ' ')" != 1 ]; then
        fail "$name" "stderr '$(first_err)' names the status more than once"
    else
        pass "$name"
    fi
}
status_once "status once: heads mismatch" run --backend cpu --heads 8 --heads-kv 3
status_once "status once: scale nan" run --backend cpu --scale nan
status_once "status once: plan" plan --backend cpu --heads 8 --heads-kv 3
FLASHATTN_BLOCK_R=abc status_once "status once: FLASHATTN_BLOCK_R=abc" run --backend cpu

# A tile override that cannot fit is named as requested, not as clamped to the sequence.
BIG_TILES=(plan --backend cpu --seq 3000 --dim 256)
expect_error "override named as requested" 1 \
    'INVALID_TILE: .*; requested Br = 5000 \(--block-r\), Bc = 5000 \(--block-c\)$' \
    "${BIG_TILES[@]}" --block-r 5000 --block-c 5000
FLASHATTN_BLOCK_R=5000 FLASHATTN_BLOCK_C=5000 expect_error "env override named as requested" 1 \
    'requested Br = 5000 \(FLASHATTN_BLOCK_R\), Bc = 5000 \(FLASHATTN_BLOCK_C\)$' "${BIG_TILES[@]}"

# ---- sizes past this machine's memory: one line with the numbers, at once -------------------
# 1e9 rows of 64 floats is terabytes: past any host; before the check it was OOM-killed (with
# overcommit) or failed in calloc with no numbers.
LIMIT=20
expect_error "run too large for host memory" 1 \
    'the run needs [0-9]+ B \([0-9.]+ TiB\) of host memory, more than the [0-9]+ B .* available' \
    run --backend cpu --seq 1000000000
expect_error "bench too large for host memory" 1 \
    'seq 1000000000: the point needs [0-9]+ B .* of host memory, more than .* available.*neither' \
    bench --backend cpu --seq-list 1000000000 --dim 16 --heads 2 --repeat 1 --quiet
if grep -Eq '^cpu +f32 +none +16 1000000000 \| +OOM .*\| +OOM ' "$TMP/out" &&
    grep -q '^# FAILED: ' "$TMP/out"; then
    pass "bench host OOM row says OOM"
else
    fail "bench host OOM row says OOM" "row: $(grep '^cpu' "$TMP/out")"
fi
if "$FA" devices 2>/dev/null | grep -Eq '^opencl: [1-9]'; then
    expect_error "run too large for the device" 1 \
        'the run needs [0-9]+ B .* of (device|host) memory, more than the [0-9]+ B' \
        run --backend opencl --seq 100000000
fi
unset LIMIT

# ---- NaN: the same NaN in O and in the reference is agreement -------------------------------
# Q row 0 starts with a NaN, so row 0 of O is NaN on every backend (both sides of --check).
N=$TMP/nan
mkdir -p "$N"
make_npy "$N/q.npy" 1 "$(dict '<f4' False '(1, 1, 4, 8)')" 0
{ printf '\x00\x00\xc0\x7f'; head -c $((31 * 4)) /dev/zero; } >>"$N/q.npy"
make_npy "$N/k.npy" 1 "$(dict '<f4' False '(1, 1, 4, 8)')" $((32 * 4))
cp "$N/k.npy" "$N/v.npy"
expect_stdout "check: NaN where the reference has NaN" '^check +PASS' \
    run --backend cpu --q "$N/q.npy" --k "$N/k.npy" --v "$N/v.npy" --check
if "$FA" devices 2>/dev/null | grep -Eq '^opencl: [1-9]'; then
    expect_stdout "check opencl: NaN where the reference has NaN" '^check +PASS' \
        run --backend opencl --q "$N/q.npy" --k "$N/k.npy" --v "$N/v.npy" --check
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
