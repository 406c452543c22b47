# shellcheck shell=bash
# cli_block_sparse_tests.sh - the block-sparse options of `run` and `plan` (--block-mask,
# --block-size, --block-pattern) and `plan`'s tiles and --svg. Sourced by cli_tests.sh, whose
# helpers (fa, expect_*, same_files, $TMP) it uses. Runs are on the cpu backend, where --check
# compares the golden with itself, so what proves the options reach the library are outputs
# that must (a density-1 mask gives the dense O bitwise, a block mask equal to the causal mask
# at block level changes nothing under --causal) and must not (a sparser mask changes O) equal
# the dense run's. The mask files are written byte by byte (no numpy).

BS=$TMP/bsparse
mkdir -p "$BS"

# npy_bytes PATH DESCR SHAPE BYTES...: a one-byte-per-element .npy file ('|u1' or '|b1').
npy_bytes() {
    local path=$1 descr=$2 shape=$3 b
    shift 3
    local dict="{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"
    local pad=$(((64 - (10 + ${#dict} + 1) % 64) % 64))
    local hl=$((${#dict} + pad + 1))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((hl & 255)))\\x$(printf %02x $((hl >> 8)))"
        printf '%s%*s\n' "$dict" "$pad" ''
        for b in "$@"; do printf "\\x$(printf %02x "$b")"; done
    } >"$path"
}

# A problem of 4 x 4 blocks of 16 (seq 64), two heads.
SP=(--backend cpu --heads 2 --seq 64 --dim 16)
npy_bytes "$BS/ones.npy" '|u1' '(1, 1, 4, 4)' 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
npy_bytes "$BS/ones_b1.npy" '|b1' '(1, 1, 4, 4)' 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
npy_bytes "$BS/lower.npy" '|u1' '(1, 1, 4, 4)' 1 0 0 0 1 1 0 0 1 1 1 0 1 1 1 1
npy_bytes "$BS/diag.npy" '|u1' '(1, 2, 4, 4)' 1 0 0 0 0 1 0 0 0 0 1 0 0 0 0 1 \
    1 1 0 0 0 1 1 0 0 0 1 1 0 0 0 1
# Full blocks (2): below the diagonal under --causal every element is kept.
npy_bytes "$BS/full.npy" '|u1' '(1, 1, 4, 4)' 1 0 0 0 2 1 0 0 2 2 1 0 2 2 2 1
npy_bytes "$BS/bad3.npy" '|u1' '(1, 1, 4, 4)' 1 0 0 0 3 1 0 0 1 1 1 0 1 1 1 1
npy_bytes "$BS/rank3.npy" '|u1' '(1, 4, 4)' 1 0 0 0 1 1 0 0 1 1 1 0 1 1 1 1
npy_bytes "$BS/heads3.npy" '|u1' '(1, 3, 1, 4)' 1 1 1 1 1 1 1 1 1 1 1 1

expect_ok "bsparse: dense O" run "${SP[@]}" --out "$BS/o_dense.npy" --lse "$BS/l_dense.npy"
expect_stdout "bsparse: mask file, check" '^check +PASS' run "${SP[@]}" --block-mask \
    "$BS/ones.npy" --block-size 16,16 --check --out "$BS/o_ones.npy" --lse "$BS/l_ones.npy"
if ! grep -Eq '^block mask +file .*ones.npy \[1, 1, 4, 4\], blocks 16 x 16: 16 of 16 computed' \
    "$TMP/out"; then
    fail "bsparse: block mask line" "$(grep '^block mask' "$TMP/out")"
else
    pass "bsparse: block mask line"
fi
same_files "bsparse: density 1 gives the dense O" "$BS/o_dense.npy" "$BS/o_ones.npy"
same_files "bsparse: density 1 gives the dense LSE" "$BS/l_dense.npy" "$BS/l_ones.npy"
expect_ok "bsparse: bool mask file" run "${SP[@]}" --block-mask "$BS/ones_b1.npy" \
    --block-size 16,16 --out "$BS/o_b1.npy"
same_files "bsparse: bool mask reads as uint8" "$BS/o_dense.npy" "$BS/o_b1.npy"
expect_ok "bsparse: sparser mask" run "${SP[@]}" --block-mask "$BS/lower.npy" \
    --block-size 16,16 --out "$BS/o_lower.npy"
if cmp -s "$BS/o_dense.npy" "$BS/o_lower.npy"; then
    fail "bsparse: a sparser mask changes O" "O equals the dense run's"
else
    pass "bsparse: a sparser mask changes O"
fi

# Under --causal, the block-level lower triangle (and its full-block form) skips only blocks
# the causal mask empties: O is the causal run's, bitwise.
expect_ok "bsparse: causal dense" run "${SP[@]}" --causal top-left --out "$BS/o_causal.npy"
expect_ok "bsparse: causal + lower mask" run "${SP[@]}" --causal top-left --block-mask \
    "$BS/lower.npy" --block-size 16,16 --out "$BS/o_causal_lower.npy"
same_files "bsparse: causal AND its block mask" "$BS/o_causal.npy" "$BS/o_causal_lower.npy"
expect_stdout "bsparse: full blocks" 'computed \(density 0.625\), 6 full$' run "${SP[@]}" \
    --causal top-left --block-mask "$BS/full.npy" --block-size 16,16 --out "$BS/o_full.npy"
same_files "bsparse: full blocks give the causal O" "$BS/o_causal.npy" "$BS/o_full.npy"

# Per-head masks, patterns, every option of run with a mask: forward and backward checked.
expect_stdout "bsparse: per-head mask, backward" '^dV check +PASS' run "${SP[@]}" \
    --block-mask "$BS/diag.npy" --block-size 16,16 --backward --check --dq "$BS/dq.npy"
grad_file "bsparse: dQ written" "$BS/dq.npy" '<f4' '(1, 2, 64, 16)'
expect_ok "bsparse: backward dense" run "${SP[@]}" --backward --dq "$BS/dq_dense.npy"
expect_ok "bsparse: backward density 1" run "${SP[@]}" --backward --block-mask "$BS/ones.npy" \
    --block-size 16,16 --dq "$BS/dq_ones.npy"
same_files "bsparse: density 1 gives the dense dQ" "$BS/dq_dense.npy" "$BS/dq_ones.npy"
for pat in local:1 fixed:2 bigbird:1,1,1,7 longformer:0,1; do
    expect_stdout "bsparse: pattern $pat" '^check +PASS' run "${SP[@]}" --batch 2 --seq 100 \
        --seq-k 70 --block-pattern "$pat" --block-size 32,16 --check --backward
done
expect_stdout "bsparse: bigbird draws per head" 'bigbird:1,0,2,3 \[2, 2, 4, 5\]' run \
    "${SP[@]}" --batch 2 --seq 64 --seq-k 80 --block-pattern bigbird:1,0,2,3 --block-size 16,16
expect_stdout "bsparse: with modifiers and window" '^dK check +PASS' run "${SP[@]}" \
    --block-pattern local:1 --block-size 16,16 --window 20,3 --softcap 3 --alibi \
    --dropout 0.2 --sinks random --backward --check
expect_stdout "bsparse: with seqlens-k, paged" '^check +PASS' run "${SP[@]}" --batch 2 \
    --block-pattern fixed:2 --block-size 16,16 --seqlens-k 50,9 --paged 16 --check
expect_ok "bsparse: bshd inputs saved" run "${SP[@]}" --layout bshd --save-inputs "$BS/in"
expect_stdout "bsparse: bshd files" '^check +PASS' run --backend cpu --layout bshd --q \
    "$BS/in/q.npy" --k "$BS/in/k.npy" --v "$BS/in/v.npy" --block-pattern local:0 \
    --block-size 16,16 --check

# Errors: the command line's (usage, 2) and the data's (1, the library's statuses).
expect_error "bsparse: mask and pattern" 2 'exclude each other' run "${SP[@]}" --block-mask \
    "$BS/ones.npy" --block-pattern local:1 --block-size 16,16
expect_error "bsparse: mask without size" 2 '--block-mask needs --block-size' run "${SP[@]}" \
    --block-mask "$BS/ones.npy"
expect_error "bsparse: size alone" 2 '--block-size needs --block-mask or --block-pattern' run \
    "${SP[@]}" --block-size 16,16
expect_error "bsparse: one size" 2 "'16' is not BQ,BK" run "${SP[@]}" --block-pattern local:1 \
    --block-size 16
expect_error "bsparse: size not a number" 2 "'x' is not an integer" run "${SP[@]}" \
    --block-pattern local:1 --block-size 16,x
expect_error "bsparse: unknown pattern" 2 "'diag:1' is not local:W" run "${SP[@]}" \
    --block-pattern diag:1 --block-size 16,16
expect_error "bsparse: pattern arity" 2 'has 3 numbers, longformer takes 2' run "${SP[@]}" \
    --block-pattern longformer:1,2,3 --block-size 16,16
expect_error "bsparse: negative count" 2 "-1 is not a block count" run "${SP[@]}" \
    --block-pattern local:-1 --block-size 16,16
expect_error "bsparse: block size not a power of two" 1 \
    'FA_STATUS_INVALID_BLOCK_SIZE: block_q = 24, block_k = 16' run "${SP[@]}" \
    --block-pattern local:1 --block-size 24,16
expect_error "bsparse: block size too large" 1 'FA_STATUS_INVALID_BLOCK_SIZE' run "${SP[@]}" \
    --block-mask "$BS/ones.npy" --block-size 512,16
expect_error "bsparse: mask value 3" 1 'FA_STATUS_INVALID_BLOCK_MASK' run "${SP[@]}" \
    --block-mask "$BS/bad3.npy" --block-size 16,16
expect_error "bsparse: mask shape of other blocks" 1 \
    'shape \(1, 1, 4, 4\) is not a block mask of this problem: want \[1, 1 or 2, 4, 2\]' run \
    "${SP[@]}" --block-mask "$BS/ones.npy" --block-size 16,32
expect_error "bsparse: mask rank 3" 1 'shape \(1, 4, 4\) is not a block mask' run "${SP[@]}" \
    --block-mask "$BS/rank3.npy" --block-size 16,16
expect_error "bsparse: mask heads" 1 'shape \(1, 3, 1, 4\) is not a block mask' run "${SP[@]}" \
    --block-mask "$BS/heads3.npy" --block-size 16,16
expect_error "bsparse: mask of floats" 1 "unsupported dtype '<f4' \(want '\|u1' or '\|b1'\)" \
    run "${SP[@]}" --block-mask "$BS/o_dense.npy" --block-size 16,16
expect_error "bsparse: missing mask file" 1 'nope.npy: cannot open' run "${SP[@]}" \
    --block-mask "$BS/nope.npy" --block-size 16,16
expect_error "bsparse: Q of bytes" 1 "unsupported dtype '\|u1' \(want '<f4' or '<f2'\)" run \
    --backend cpu --q "$BS/ones.npy" --k "$BS/ones.npy" --v "$BS/ones.npy"

# ---- plan: tiles, block mask lines, --svg -------------------------------------------------
# Causal top-left, 256 x 256 in 64 x 64 tiles: 4 diagonal tiles partly masked, 6 below
# computed, 6 above skipped (worked out by hand).
PL=(plan --backend cpu --seq 256 --dim 64 --block-r 64 --block-c 64)
expect_stdout "plan: causal tiles" \
    '^tiles +16 \(batch 0, head 0\): computed 6, partly masked 4 \(causal/window 4, '"$(
    )"'block edge 0, both 0\), skipped 6$' \
    "${PL[@]}" --causal top-left --svg "$BS/causal.svg"
expect_stdout "plan: dense tiles and bytes" '^memory bytes +flash .*, naive .*x\)$' "${PL[@]}"
grep -Eq '^tiles +16 .*computed 16, partly masked 0' "$TMP/out" && pass "plan: dense tiles" ||
    fail "plan: dense tiles" "$(grep '^tiles' "$TMP/out")"
# A block mask of 128 x 64 blocks: blocks (0,0), (1,1), (1,2), (1,3) of 2 x 4; with Br 64
# each query block is two tiles, so 8 computed of 16 tiles; none straddles a block.
npy_bytes "$BS/plan.npy" '|u1' '(1, 1, 2, 4)' 1 0 0 0 0 1 1 1
expect_stdout "plan: block mask tiles" \
    '^tiles +16 .*computed 8, partly masked 0 .*skipped 8$' "${PL[@]}" --block-mask \
    "$BS/plan.npy" --block-size 128,64 --svg "$BS/sparse.svg"
for re in '^block mask +file .*plan.npy \[1, 1, 2, 4\], blocks 128 x 64: 4 of 8 computed '"$(
    )"'\(density 0.5\), 0 full$' \
    '^mask saves +4 of 8 blocks skipped' \
    '^tiles/blocks +Br 64: 2 tiles per block_q 128, none straddles a block; Bc 64 = block_k 64'; do
    grep -Eq -- "$re" "$TMP/out" && pass "plan: /$re/" || fail "plan: /$re/" "no such line"
done
# With causal too: tiles (1,0), (2,1), (3,1), (3,2) computed; the diagonal ones in computed
# blocks, (0,0), (2,2), (3,3), partly masked; the 9 others skipped.
expect_stdout "plan: causal and block mask" \
    '^tiles +16 .*computed 4, partly masked 3 \(causal/window 3, block edge 0, both 0\), '"$(
    )"'skipped 9$' \
    "${PL[@]}" --causal top-left --block-mask "$BS/plan.npy" --block-size 128,64
# Tiles of 128 keys over blocks of 64 (4 x 2 tiles): key tile 0 of every query tile holds a
# computed and a skipped block; key tile 1 is skipped by query block 0, computed by 1.
expect_stdout "plan: block edge" \
    'computed 2, partly masked 4 \(causal/window 0, block edge 4, both 0\), skipped 2$' \
    plan --backend cpu --seq 256 --dim 64 --block-r 64 --block-c 128 --block-mask \
    "$BS/plan.npy" --block-size 128,64

# The SVG: well-formed XML, one rect per tile, each class's count the plan's.
# svg_counts NAME FILE KIND=N...: rects of each class and the legend's count (LEGEND=0: the
# rects only, for a picture whose rects are cells of several tiles).
svg_counts() {
    local name=$1 file=$2 kv k n got
    shift 2
    if ! python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$file" \
        2>"$TMP/xml"; then
        fail "$name: well-formed" "$(head -1 "$TMP/xml")"
        return
    fi
    pass "$name: well-formed"
    for kv in "$@"; do
        k=${kv%=*}
        n=${kv#*=}
        got=$(grep -c "class=\"tile $k\"" "$file")
        [ "$got" = "$n" ] && pass "$name: $k tiles" || fail "$name: $k tiles" "$got, want $n"
        [ "${LEGEND:-1}" = 0 ] && continue
        grep -q "data-kind=\"$k\" data-tiles=\"$n\"" "$file" && pass "$name: $k in legend" ||
            fail "$name: $k in legend" "no data-tiles=\"$n\""
    done
}
svg_counts "svg causal" "$BS/causal.svg" computed=6 part-mask=4 skipped=6 part-block=0
svg_counts "svg sparse" "$BS/sparse.svg" computed=8 skipped=8 part-mask=0
grep -q 'class="block"' "$BS/sparse.svg" && pass "svg sparse: block edges drawn" ||
    fail "svg sparse: block edges drawn" "no line of class block"
# Many tiles: 8192 / 64 = 128 a side, drawn as 64 x 64 cells of 2 x 2 tiles, counts per tile.
expect_ok "plan: large svg" plan --backend cpu --seq 8192 --dim 64 --block-r 64 --block-c 64 \
    --causal top-left --svg "$BS/big.svg"
grep -Eq '^tiles +16384 .*computed 8128, partly masked 128 .*skipped 8128$' "$TMP/out" &&
    pass "plan: large tiles" || fail "plan: large tiles" "$(grep '^tiles' "$TMP/out")"
# The diagonal's 64 cells mix classes (2 partly masked tiles, 1 computed, 1 skipped).
LEGEND=0 svg_counts "svg large cells" "$BS/big.svg" computed=2016 skipped=2016 mixed=64 \
    part-mask=0
grep -q 'data-tiles="8128">computed: 8128 tiles' "$BS/big.svg" &&
    grep -q 'each cell is 2 x 2 tiles' "$BS/big.svg" && pass "svg large: legend per tile" ||
    fail "svg large: legend per tile" "no per-tile count or aggregation note"
expect_ok "plan: backward svg" plan --backend cpu --seq 100 --dim 32 --backward \
    --block-pattern local:1 --block-size 32,32 --svg "$BS/bwd.svg"
svg_counts "svg backward" "$BS/bwd.svg"
expect_error "plan: svg not writable" 1 'cannot create the SVG file' "${PL[@]}" --svg \
    "$BS/no/such/dir/x.svg"
# A long sequence: its tiles are counted in one pass over the rows (a fuzzer's input once ran
# for 36 minutes classifying 10^9 tiles one by one); 16384 x 16384 tiles of 64 x 64, causal.
expect_ok "plan: long sequence" plan --backend cpu --seq 1048576 --dim 64 --block-r 64 \
    --block-c 64 --causal top-left
grep -Eq '^tiles +268435456 .*computed 134209536, partly masked 16384 .*skipped 134209536$' \
    "$TMP/out" && pass "plan: long sequence's tiles" ||
    fail "plan: long sequence's tiles" "$(grep '^tiles' "$TMP/out")"
expect_stdout "plan: rows beyond the classified" \
    '^tiles +[0-9]+ \(batch 0, head 0\): not classified \(more than 16777216 query rows\)$' \
    plan --backend cpu --seq 16777217 --dim 64
expect_error "plan: no svg of unclassified tiles" 1 'no picture: the tiles are not classified' \
    plan --backend cpu --seq 16777217 --dim 64 --svg "$BS/huge.svg"
expect_stdout "plan: block mask beyond the classified" \
    'not classified \(a block mask over more than 4194304 tiles\)$' plan --backend cpu \
    --seq 131200 --dim 64 --block-r 64 --block-c 64 --block-pattern local:1 --block-size 64,64

# ---- bench --block-sparse: tiny sweeps on the cpu backend -----------------------------------
BB=(bench --block-sparse --backend cpu --heads 1 --dim 16 --repeat 1 --block-size 16,16)
expect_stdout "bench sparse: header" '^device: cpu, device 0' "${BB[@]}" --seq-list 64 \
    --densities 1,0.5 --fixed-seq 64,128,256 --plot "$BS/bench.svg"
for re in '^command: flashattn bench --block-sparse --backend cpu' '^date: 20[0-9-]+ ' \
    '^\| 64 \| 1\.000 \| 16 / 16 \| ' '^\| 64 \| 0\.500 \| 8 / 16 \| ' \
    '^\| 256 \| 4 \| 0\.438 \| ' '^growth \(least squares on log ms / log N\): fixed N\^' \
    '^wrote plot '; do
    grep -Eq -- "$re" "$TMP/out" && pass "bench sparse: /$re/" ||
        fail "bench sparse: /$re/" "no such line"
done
python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$BS/bench.svg" \
    2>/dev/null && grep -q 'fixed, stride sqrt(key blocks)' "$BS/bench.svg" &&
    grep -q 'against dense, forward' "$BS/bench.svg" &&
    pass "bench sparse: plot is SVG with its legend" ||
    fail "bench sparse: plot is SVG with its legend" "not XML or no legend"
expect_stdout "bench sparse: backward" 'against dense \(backward\)' "${BB[@]}" \
    --seq-list 64 --densities 0.5 --fixed-seq 64 --backward
expect_stdout "bench sparse: CPU time" 'median of 1 after one warm-up, process CPU ms$' \
    "${BB[@]}" --seq-list 64 --densities 0.5 --fixed-seq 64 --cpu-time
expect_error "bench sparse: density above 1" 2 "--densities: '1.5' is not a list" "${BB[@]}" \
    --densities 1.5
expect_error "bench sparse: plot of one length" 2 'needs at least two --fixed-seq' "${BB[@]}" \
    --fixed-seq 64 --plot "$BS/x.svg"
expect_error "bench sparse: block size" 2 "--block-size: 8 is not a block size" bench \
    --block-sparse --block-size 8,16
expect_stdout "bench help names --block-sparse" '--block-sparse +block-sparse against dense' \
    bench --help
