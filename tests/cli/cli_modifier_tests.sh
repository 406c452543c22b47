# shellcheck shell=bash
# cli_modifier_tests.sh - the score modifier and dropout options of `run`, `bench` and `plan`
# (--softcap, --alibi, --alibi-slopes, --bias, --window, --sinks, --dsinks, --dropout,
# --dropout-seed, --dropout-offset). Sourced by cli_tests.sh, whose helpers (fa, expect_*,
# bwd_check, grad_file, $TMP) it uses; every run is on the cpu backend, where the golden runs
# every modifier, so --check compares the golden with itself here: what these checks prove is
# that each option reaches the library (O changes), that the files' shapes and broadcasting are
# read as documented, and that every bad value is a usage error naming its option.

MD=$TMP/mods
mkdir -p "$MD"
MOD=(--backend cpu --batch 2 --heads 2 --heads-kv 1 --seq 13 --seq-k 17 --dim 8)

# Files without numpy: O of a run with head_dim = seq_k has a bias's shape [B, H, Sq, Sk]; the
# sinks' gradient (--dsinks) is an f32 [heads] vector, good as sinks or ALiBi slopes.
expect_ok "mods: bias file [1, 2, 13, 17]" run --backend cpu --heads 2 --seq 13 --dim 17 \
    --out "$MD/b_full.npy"
expect_ok "mods: bias file [1, 1, 13, 17]" run --backend cpu --heads 1 --seq 13 --dim 17 \
    --out "$MD/b_11.npy"
expect_ok "mods: bias file [1, 2, 1, 17]" run --backend cpu --heads 2 --seq 1 --dim 17 \
    --out "$MD/b_row.npy"
expect_ok "mods: bias file [2, 2, 13, 13]" run --backend cpu --batch 2 --heads 2 --seq 13 \
    --dim 13 --out "$MD/b_wrong.npy"
expect_ok "mods: dsinks writes" run "${MOD[@]}" --sinks random --backward --dsinks "$MD/ds.npy"
grad_file "mods: dsinks file is f32 [heads]" "$MD/ds.npy" '<f4' '(2,)'

# Each option on its own, then all of them, forward (and backward) against the golden.
mod_check() { # mod_check NAME ARGS...: O's check PASS and the modifiers line names them
    local name=$1 re=$2
    shift 2
    expect_stdout "$name" '^check +PASS' run "${MOD[@]}" "$@" --check
    if ! grep -Eq -- "^modifiers +$re" "$TMP/out"; then
        fail "$name: modifiers line" "$(grep '^modifiers' "$TMP/out")"
    fi
}
mod_check "mods: softcap" 'softcap 2$' --softcap 2
mod_check "mods: alibi" 'alibi$' --alibi
mod_check "mods: alibi slopes file" 'alibi$' --alibi-slopes "$MD/ds.npy"
# --alibi-slopes [batch, heads] (the library's alibi 2: a slope per sequence and head). f32
# files written here: slopes_h [0.5, 0.25]; slopes_bh_same its rows twice; slopes_bh rows
# [0.5, 0.25] and [1, 0.125].
npy_f32() { # npy_f32 FILE SHAPE HEX...: a '<f4' .npy of the little-endian words HEX
    local file=$1 shape=$2 w
    shift 2
    make_npy "$file" 1 "$(dict '<f4' False "$shape")" 0
    for w in "$@"; do
        printf "\\x${w:6:2}\\x${w:4:2}\\x${w:2:2}\\x${w:0:2}" >>"$file"
    done
}
npy_f32 "$MD/slopes_h.npy" '(2,)' 3f000000 3e800000
npy_f32 "$MD/slopes_bh_same.npy" '(2, 2)' 3f000000 3e800000 3f000000 3e800000
npy_f32 "$MD/slopes_bh.npy" '(2, 2)' 3f000000 3e800000 3f800000 3e000000
mod_check "mods: alibi slopes [batch, heads]" 'alibi \[batch, heads\]$' \
    --alibi-slopes "$MD/slopes_bh.npy"
expect_ok "mods: alibi [heads] out" run "${MOD[@]}" --alibi-slopes "$MD/slopes_h.npy" \
    --out "$MD/o_h.npy"
expect_ok "mods: alibi [batch, heads] rows alike out" run "${MOD[@]}" \
    --alibi-slopes "$MD/slopes_bh_same.npy" --out "$MD/o_bh_same.npy"
expect_ok "mods: alibi [batch, heads] out" run "${MOD[@]}" --alibi-slopes "$MD/slopes_bh.npy" \
    --out "$MD/o_bh.npy"
same_files "mods: alibi [batch, heads] of equal rows is [heads]" "$MD/o_h.npy" "$MD/o_bh_same.npy"
if cmp -s "$MD/o_h.npy" "$MD/o_bh.npy"; then
    fail "mods: alibi [batch, heads] reaches the run" "O equals the [heads] run's"
else pass "mods: alibi [batch, heads] reaches the run"; fi
for be in cpu opencl; do
    expect_stdout "mods: alibi [batch, heads] $be checked" '^check +PASS' run --backend "$be" \
        --batch 2 --heads 2 --seq 40 --seq-k 56 --dim 32 --causal bottom-right \
        --alibi-slopes "$MD/slopes_bh.npy" --check
    bwd_check "mods: alibi [batch, heads] $be backward" run --backend "$be" --batch 2 --heads 2 \
        --seq 40 --seq-k 56 --dim 32 --alibi-slopes "$MD/slopes_bh.npy" --backward --check
done
mod_check "mods: bias random" 'bias f32$' --bias random
mod_check "mods: bias file" 'bias f32$' --bias "$MD/b_full.npy"
mod_check "mods: bias broadcast heads" 'bias f32$' --bias "$MD/b_11.npy"
mod_check "mods: bias broadcast rows" 'bias f32$' --bias "$MD/b_row.npy"
mod_check "mods: window" 'window \(3, 0\)$' --window 3,0
mod_check "mods: window unbounded left" 'window \(-1, 2\)$' --window=-1,2
mod_check "mods: sinks random" 'sinks$' --sinks random
mod_check "mods: sinks file" 'sinks$' --sinks "$MD/ds.npy"
mod_check "mods: dropout" 'dropout 0.25 \(seed 7, offset 3\)$' --dropout 0.25 \
    --dropout-seed 7 --dropout-offset 3
mod_check "mods: all" 'softcap 5, alibi, bias f32, window \(4, 1\), sinks, dropout 0.1 ' \
    --softcap 5 --alibi --bias random --window 4,1 --sinks random --dropout 0.1
mod_check "mods: all f16" 'softcap 5, alibi, bias f32, window \(4, 1\), sinks, dropout 0.1 ' \
    --dtype f16 --softcap 5 --alibi --bias random --window 4,1 --sinks random --dropout 0.1
bwd_check "mods: backward all" run "${MOD[@]}" --softcap 5 --alibi --bias random --window 4,1 \
    --sinks random --dropout 0.1 --backward --check
if grep -Eq '^dsinks check +PASS$' "$TMP/out"; then pass "mods: dsinks checked"
else fail "mods: dsinks checked" "$(grep '^dsinks' "$TMP/out")"; fi
bwd_check "mods: backward bshd causal" run "${MOD[@]}" --layout bshd --causal bottom-right \
    --softcap 3 --window 2,-1 --sinks "$MD/ds.npy" --dropout 0.3 --backward --check

# Each option changes O; the same dropout seed and offset give the same O, another offset not.
expect_ok "mods: plain O" run "${MOD[@]}" --out "$MD/o_plain.npy"
for m in "--softcap 0.5" "--alibi" "--bias random" "--window 2,0" "--sinks random" \
    "--dropout 0.5"; do
    # shellcheck disable=SC2086 # the option and its value are two words
    fa run "${MOD[@]}" $m --out "$MD/o_mod.npy"
    if [ "$RC" -eq 0 ] && ! cmp -s "$MD/o_plain.npy" "$MD/o_mod.npy"; then pass "mods: $m changes O"
    else fail "mods: $m changes O" "exit $RC, or O is the plain one"; fi
done
expect_ok "mods: dropout again" run "${MOD[@]}" --dropout 0.5 --out "$MD/o_drop2.npy"
same_files "mods: dropout repeats" "$MD/o_mod.npy" "$MD/o_drop2.npy"
expect_ok "mods: dropout offset" run "${MOD[@]}" --dropout 0.5 --dropout-offset 1 \
    --out "$MD/o_drop3.npy"
if cmp -s "$MD/o_mod.npy" "$MD/o_drop3.npy"; then fail "mods: another offset, another mask" "same O"
else pass "mods: another offset, another mask"; fi

# Broadcasting: [1, 1, Sq, Sk] is the [1, 2, Sq, Sk] bias that repeats it for each head, and
# [1, 2, 1, Sk] the one that repeats each head's row for every query (the same O bytes).
hdr=$(($(wc -c <"$MD/b_full.npy") - 2 * 13 * 17 * 4))
{ head -c "$hdr" "$MD/b_full.npy"; tail -c $((13 * 17 * 4)) "$MD/b_11.npy"
  tail -c $((13 * 17 * 4)) "$MD/b_11.npy"; } >"$MD/b_11_full.npy"
{ head -c "$hdr" "$MD/b_full.npy"
  for h in 0 1; do
      for _ in $(seq 13); do tail -c $(((2 - h) * 17 * 4)) "$MD/b_row.npy" | head -c $((17 * 4)); done
  done; } >"$MD/b_row_full.npy"
for b in b_11 b_row; do
    expect_ok "mods: $b broadcast" run "${MOD[@]}" --bias "$MD/$b.npy" --out "$MD/o_$b.npy"
    expect_ok "mods: $b expanded" run "${MOD[@]}" --bias "$MD/${b}_full.npy" --out "$MD/o_${b}_f.npy"
    same_files "mods: $b broadcast is its expansion" "$MD/o_$b.npy" "$MD/o_${b}_f.npy"
done

# plan: which modifiers are on.
expect_stdout "mods: plan none" '^modifiers +none$' plan --backend cpu --seq 64 --dim 16
expect_stdout "mods: plan softcap window" '^modifiers +softcap 30, window \(128, 0\)$' \
    plan --backend cpu --seq 256 --dim 64 --softcap 30 --window 128,0
expect_stdout "mods: plan backward sinks" '^modifiers +sinks$' \
    plan --backend cpu --heads 2 --seq 64 --dim 16 --sinks "$MD/ds.npy" --backward
for c in run bench plan; do
    expect_stdout "mods: $c --help" '^  --dropout-offset N ' "$c" --help
done

# bench: the flash path runs them (checked against the golden), the baselines say n/a.
MB=(bench --seq-list '16,32' --dim 16 --heads 2 --repeat 1 --quiet --backend cpu)
expect_stdout "mods: bench naive n/a" '^cpu +f32 +none +16 +32 \| +[0-9.]+ .* \| +n/a +- +- \|' \
    "${MB[@]}" --dropout 0.1 --softcap 3 --window 4,0 --sinks random --bias random --alibi \
    --csv "$MD/b.csv"
if grep -q '^# modifiers softcap 3, alibi, bias f32, window (4, 0), sinks, dropout 0.1' "$TMP/out"
then pass "mods: bench header"; else fail "mods: bench header" "no '# modifiers' line"; fi
# naive_state is the 14th field, the 15th in a row: the quoted device name holds one comma.
if [ "$(sed 1d "$MD/b.csv" | cut -d, -f15 | sort -u)" = unsupported ]; then
    pass "mods: bench csv naive unsupported"
else fail "mods: bench csv naive unsupported" "$(sed 1d "$MD/b.csv" | cut -d, -f15 | tr '\n' ' ')"; fi
expect_stdout "mods: bench bwd sinks" '^cpu +f32 +none +16 +16 \| +[0-9.]+ .* \| +n/a ' \
    "${MB[@]}" --seq-list 16 --pass fwd+bwd --sinks random --dropout 0.2
expect_error "mods: bench bias shape" 2 '^flashattn bench: --bias: .*not \[1, 2, 16, 16\]' \
    "${MB[@]}" --bias "$MD/b_full.npy"

# Bad values: exit 2, one line naming the option.
expect_error "mods: dropout 1" 2 '--dropout: 1 is not a probability in \[0, 1\)' \
    run "${MOD[@]}" --dropout 1
expect_error "mods: dropout nan" 2 '--dropout: nan is not a probability' run "${MOD[@]}" --dropout nan
expect_error "mods: dropout -0.1" 2 '--dropout: -0.1 is not' run "${MOD[@]}" --dropout -0.1
expect_error "mods: dropout abc" 2 "--dropout: 'abc' is not a number" run "${MOD[@]}" --dropout abc
expect_error "mods: window -2,0" 2 "--window: '-2,0' is not L,R" run "${MOD[@]}" --window -2,0
expect_error "mods: window 5" 2 "--window: '5' is not L,R" run "${MOD[@]}" --window 5
expect_error "mods: window 1,2,3" 2 "--window: '1,2,3' is not L,R" run "${MOD[@]}" --window 1,2,3
expect_error "mods: softcap -1" 2 '--softcap: -1 is not 0 \(off\) or in \[1e-18, 1e\+18\]' \
    run "${MOD[@]}" --softcap -1
expect_error "mods: softcap denormal" 2 '--softcap: 5e-39 is not 0' run "${MOD[@]}" --softcap 5e-39
expect_stdout "mods: softcap 1e7 on opencl checked" '^check +PASS' run --backend opencl --seq 64 \
    --dim 32 --softcap 1e7 --check
expect_error "mods: softcap inf" 2 '--softcap: inf is not' run "${MOD[@]}" --softcap inf
expect_error "mods: dropout offset range" 2 '--dropout-offset: 4294967296 is out of range' \
    run "${MOD[@]}" --dropout 0.1 --dropout-offset 4294967296
expect_error "mods: dropout seed alone" 2 '--dropout-seed goes with --dropout' \
    run "${MOD[@]}" --dropout-seed 3
expect_error "mods: alibi twice" 2 '--alibi and --alibi-slopes' \
    run "${MOD[@]}" --alibi --alibi-slopes "$MD/ds.npy"
expect_error "mods: sinks wrong length" 2 '--sinks: .*ds.npy has shape \[2\], not \[4\]' \
    run "${MOD[@]}" --heads 4 --sinks "$MD/ds.npy"
expect_error "mods: alibi slopes wrong length" 2 \
    '--alibi-slopes: .*has shape \[2\], not \[4\] or \[2, 4\]' \
    run "${MOD[@]}" --heads 4 --alibi-slopes "$MD/ds.npy"
expect_error "mods: alibi slopes [batch, heads] of another batch" 2 \
    '--alibi-slopes: .*slopes_bh.npy has shape \[2, 2\], not \[2\] or \[3, 2\]' \
    run "${MOD[@]}" --batch 3 --alibi-slopes "$MD/slopes_bh.npy"
expect_error "mods: bias wrong shape" 2 \
    '--bias: .*b_wrong.npy has shape \[2, 2, 13, 13\], not \[2, 2, 13, 17\]' \
    run "${MOD[@]}" --bias "$MD/b_wrong.npy"
expect_error "mods: bias rank 1" 2 '--bias: .*has shape \[2\], not' run "${MOD[@]}" --bias "$MD/ds.npy"
expect_error "mods: bias missing file" 1 'nofile.npy: cannot open' \
    run "${MOD[@]}" --bias "$MD/nofile.npy"
expect_error "mods: dsinks without sinks" 2 '--dsinks needs --sinks' \
    run "${MOD[@]}" --backward --dsinks "$MD/x.npy"
expect_error "mods: dsinks without backward" 2 '--dsinks needs the backward pass' \
    run "${MOD[@]}" --sinks random --dsinks "$MD/x.npy"
expect_error "mods: plan dropout 1" 2 '^flashattn plan: --dropout: 1 is not' plan --dropout 1
expect_error "mods: bench window 5" 2 "^flashattn bench: --window: '5' is not" \
    "${MB[@]}" --window 5

# On OpenCL (pocl in CI), when present: every modifier, forward and backward, against the golden.
if "$FA" devices 2>/dev/null | grep -Eq '^opencl: [1-9]'; then
    bwd_check "mods: opencl backward all" run "${MOD[@]}" --backend opencl --softcap 5 --alibi \
        --bias "$MD/b_row.npy" --window 4,1 --sinks random --dropout 0.1 --backward --check
fi
