# shellcheck shell=bash
# cli_decode_tests.sh - the decoding options of `run` and `plan` (--seqlens-k, --paged,
# --kv-splits) and `bench --decode`. Sourced by cli_tests.sh, whose helpers (fa, expect_*,
# same_files, $TMP) it uses. The golden of --check runs the same problem on the same page
# pool and block table, unsplit; on cpu that checks the paged and split paths of the golden
# against its plain one, on opencl the kernels against the golden.

DD=$TMP/decode
mkdir -p "$DD"
DEC=(--batch 3 --heads 4 --heads-kv 2 --seq 1 --seq-k 17 --dim 16)

# seq_check NAME ARGS...: run ... --check passes and the sequences line matches $SEQ_RE.
seq_check() {
    local name=$1
    shift
    expect_stdout "$name" '^check +PASS' run "$@" --check
    if ! grep -Eq -- "^sequences +$SEQ_RE" "$TMP/out"; then
        fail "$name: sequences line" "$(grep '^sequences' "$TMP/out")"
    fi
}

expect_stdout "run --help lists --paged" '^  --paged PAGE_SIZE +K and V in a shuffled pool' \
    run --help
expect_stdout "run --help lists --seqlens-k" '^  --seqlens-k LIST ' run --help
expect_stdout "run --help lists --kv-splits" '^  --kv-splits N ' run --help
expect_stdout "plan --help lists --kv-splits" '^  --kv-splits N ' plan --help
expect_stdout "bench --help names --decode" '^  --decode +the decode sweep' bench --help
expect_stdout "bench --decode --help" '^usage: flashattn bench --decode' bench --decode --help
expect_stdout "bench --decode --help lists --max-seqlen-k" '^  --max-seqlen-k N ' \
    bench --decode --help

# ---- run: paged, seqlens_k and split-KV against the golden ----------------------------------
SEQ_RE='seqlens_k \[5, 0, 17\], paged: 3 keys a page, 11 pages \(3 spare\), 6 a sequence, kv splits 1'
seq_check "decode: run --paged 3 --seqlens-k 5,0,17 --check (cpu)" --backend cpu "${DEC[@]}" \
    --paged 3 --seqlens-k 5,0,17
seq_check "decode: paged bshd, 4 rows bottom-right, f16 (cpu)" --backend cpu "${DEC[@]}" \
    --paged 3 --seqlens-k 5,0,17 --seq 4 --causal bottom-right --layout bshd --dtype f16
SEQ_RE='seqlens_k \[5, 0, 17\], kv splits 3 \(asked 3\)'
seq_check "decode: --kv-splits 3 with --seqlens-k (cpu)" --backend cpu "${DEC[@]}" \
    --seqlens-k 5,0,17 --kv-splits 3 --block-c 4
SEQ_RE='seqlens_k 17 each, paged: 1 keys a page, 54 pages \(3 spare\), 17 a sequence, kv splits 2 \(asked 2\)'
seq_check "decode: --paged 1 alone passes seqlens_k, split (cpu)" --backend cpu "${DEC[@]}" \
    --paged 1 --kv-splits 2 --block-c 8

# The pool holds the keys a contiguous run with the same seed has: the same O, to the bit on
# the golden (an unsplit forward reads the same values in the same order).
expect_ok "decode: contiguous O" run --backend cpu "${DEC[@]}" --seqlens-k 5,0,17 \
    --out "$DD/o_contig.npy"
expect_ok "decode: paged O" run --backend cpu "${DEC[@]}" --seqlens-k 5,0,17 --paged 3 \
    --out "$DD/o_paged.npy"
same_files "decode: paged O is the contiguous O" "$DD/o_contig.npy" "$DD/o_paged.npy"
expect_ok "decode: full lengths O" run --backend cpu "${DEC[@]}" --seqlens-k 17,17,17 \
    --out "$DD/o_full.npy"
expect_ok "decode: plain O" run --backend cpu "${DEC[@]}" --out "$DD/o_plain.npy"
same_files "decode: seqlens_k = seq_k is the plain O" "$DD/o_full.npy" "$DD/o_plain.npy"
expect_ok "decode: files in, paged" run --backend cpu "${DEC[@]}" --save-inputs "$DD/in"
expect_ok "decode: files paged O" run --backend cpu --q "$DD/in/q.npy" --k "$DD/in/k.npy" \
    --v "$DD/in/v.npy" --seqlens-k 5,0,17 --paged 4 --out "$DD/o_files.npy"
same_files "decode: files paged O is the contiguous O" "$DD/o_contig.npy" "$DD/o_files.npy"

if "$FA" devices 2>/dev/null | grep -Eq '^opencl: [1-9]'; then
    SEQ_RE='seqlens_k \[5, 0, 17\], paged: 3 keys a page, 11 pages \(3 spare\), 6 a sequence, '
    seq_check "decode: run --paged 3 --seqlens-k 5,0,17 --check (opencl)" --backend opencl \
        "${DEC[@]}" --paged 3 --seqlens-k 5,0,17
    seq_check "decode: paged f16 bottom-right 4 rows (opencl)" --backend opencl "${DEC[@]}" \
        --paged 3 --seqlens-k 5,0,17 --seq 4 --causal bottom-right --dtype f16
    SEQ_RE='seqlens_k \[5, 0, 170\], kv splits 4 \(asked 4\)'
    seq_check "decode: --kv-splits 4 --check (opencl)" --backend opencl "${DEC[@]}" --seq-k 170 \
        --seqlens-k 5,0,170 --kv-splits 4 --block-c 16
    # Heads packing on CPU devices (a pool holds a key's heads together): 32 query heads as
    # rows, here in four tiles of 8 (Br overridden), so rows past the first tile find their
    # K/V head too.
    if "$FA" devices --backend opencl | grep -q 'type *not a GPU'; then
        HP=(--backend opencl --heads 32 --heads-kv 8 --seq 1 --seq-k 300 --dim 32 --dtype f16
            --causal bottom-right --paged 7 --block-r 8)
        expect_stdout "decode: heads packing planned (opencl)" '^heads packing: the 32 query heads' \
            plan "${HP[@]}"
        SEQ_RE='seqlens_k 300 each, paged: 7 keys a page, 46 pages \(3 spare\), 43 a sequence, '
        seq_check "decode: heads packing over four tiles (opencl)" "${HP[@]}"
        # with sinks, ALiBi and a window (each row its head's), one tile split in 4 chunks
        SEQ_RE+='kv splits 4'
        seq_check "decode: heads packing, sinks alibi window, split (opencl)" "${HP[@]:0:18}" \
            --block-c 16 --kv-splits 4 --sinks random --alibi --window 100,0
        expect_stdout "decode: heads packing with sinks planned (opencl)" \
            '^heads packing: the 32 query heads' plan "${HP[@]:0:18}" --block-c 16 --kv-splits 4 \
            --sinks random --alibi
    fi
else
    echo "SKIP decode opencl: no OpenCL device"
fi

# ---- bad values: a usage error naming the option, exit 2 ------------------------------------
expect_error "decode: negative --seqlens-k" 2 '^flashattn run: --seqlens-k: -1 is not a key count' \
    run --backend cpu "${DEC[@]}" --seqlens-k 5,-1,17
expect_error "decode: too many --seqlens-k" 2 \
    '^flashattn run: --seqlens-k: 4 lengths for a batch of 3 \(one per sequence\)' \
    run --backend cpu "${DEC[@]}" --seqlens-k 5,0,17,1
expect_error "decode: too few --seqlens-k" 2 '^flashattn run: --seqlens-k: 2 lengths for a batch of 3' \
    run --backend cpu "${DEC[@]}" --seqlens-k 5,0
expect_error "decode: --seqlens-k past --seq-k" 2 \
    '^flashattn run: --seqlens-k: 18 keys for sequence 2, more than --seq-k 17' \
    run --backend cpu "${DEC[@]}" --seqlens-k 5,0,18
expect_error "decode: --seqlens-k empty item" 2 "^flashattn run: --seqlens-k: empty item in '5,,17'" \
    run --backend cpu "${DEC[@]}" --seqlens-k 5,,17
expect_error "decode: --seqlens-k not a number" 2 "^flashattn run: --seqlens-k: 'x' is not an integer" \
    run --backend cpu "${DEC[@]}" --seqlens-k 5,x,17
expect_error "decode: --paged 0" 2 '^flashattn run: --paged: a page holds 0 keys; PAGE_SIZE must be at least 1' \
    run --backend cpu "${DEC[@]}" --paged 0
expect_error "decode: --paged negative" 2 '^flashattn run: --paged: a page holds -2 keys' \
    run --backend cpu "${DEC[@]}" --paged -2
expect_error "decode: --kv-splits too many" 2 '^flashattn run: --kv-splits: 70000 is out of range' \
    run --backend cpu "${DEC[@]}" --kv-splits 70000
expect_error "decode: plan --paged 0" 2 '^flashattn plan: --paged: a page holds 0 keys' \
    plan --backend cpu --paged 0
expect_error "decode: paged backward is the library's" 1 \
    '^flashattn: FA_STATUS_UNSUPPORTED: .*paged' run --backend cpu "${DEC[@]}" --paged 3 --backward

# ---- plan: the kv splits and the planner's reasons ------------------------------------------
# Bc 512 pinned: the cpu backend sizes its tiles by the host's L2 cache, and a 2 MiB one gives
# Bc 2048, two tiles of 4096 keys, so no four splits.
PK=(plan --backend cpu --seq 1 --seq-k 4096 --dim 64 --block-c 512)
expect_stdout "decode: plan --kv-splits 4 prints the splits" '^kv splits +4$' "${PK[@]}" --kv-splits 4
for re in '^kv splits 4: override$' '^split-KV: 4 chunks of [0-9]+ keys, then a merge$' \
    '^sequences +kv splits 4 \(asked 4\)$'; do
    if grep -Eq -- "$re" "$TMP/out"; then pass "decode: plan --kv-splits 4 explains /$re/"
    else fail "decode: plan --kv-splits 4 explains /$re/" "not in the output"; fi
done
expect_stdout "decode: plan --kv-splits 1" '^kv splits +1$' "${PK[@]}" --kv-splits 1
expect_stdout "decode: plan paged" \
    '^sequences +seqlens_k \[4096, 100\], paged: 16 keys a page, 266 pages \(3 spare\), 256 a sequence' \
    "${PK[@]}" --batch 2 --paged 16 --seqlens-k 4096,100

# ---- bench --decode -------------------------------------------------------------------------
BD=(bench --decode --backend cpu --max-seqlen-k 1024 --batch 1 --repeat 1 --copy-mib 16 --quiet)
expect_stdout "decode: bench --decode row (cpu)" \
    '^cpu +f16 +1 +1024 +contig +auto:1 +\| +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% \| +1\.00x$' "${BD[@]}"
for re in '^# flashattn bench --decode --backend cpu ' '^# date +[0-9]{4}-[0-9]{2}-[0-9]{2} ' \
    '^# device +cpu, device 0: ' '^# copy +host memcpy of 16 MiB, one thread: [0-9.]+ GB/s' \
    '^backend +dtype +batch +seq_k +layout +splits +\| +ms +tok/s +GB/s +%copy \| +speedup$'; do
    if grep -Eq -- "$re" "$TMP/out"; then pass "decode: bench header /$re/"
    else fail "decode: bench header /$re/" "not in the output"; fi
done
# Bc 256 (FLASHATTN_BLOCK_C; bench has no --block-c), so 1024 keys make the two splits asked
# whatever the host's cache.
export FLASHATTN_BLOCK_C=256
expect_stdout "decode: bench --compare-splits --compare-paged" \
    '^cpu +f32 +1 +1024 +paged8 +2 +\| +[0-9.]+ .*\| +[0-9.]+x$' \
    "${BD[@]}" --dtype f32 --compare-splits --compare-paged --paged 8 --kv-splits 2
unset FLASHATTN_BLOCK_C
if [ "$(grep -Ec '^cpu +f32 +1 +1024 ' "$TMP/out")" = 4 ] &&
    grep -Eq '^cpu +f32 +1 +1024 +contig +1 +\| .*\| +1\.00x$' "$TMP/out"; then
    pass "decode: bench compares four variants, the first contiguous and unsplit"
else
    fail "decode: bench compares four variants, the first contiguous and unsplit" \
        "$(grep '^cpu' "$TMP/out" | tr '\n' ';')"
fi
expect_error "decode: bench --compare-splits --kv-splits 1" 2 \
    '^flashattn bench --decode: --compare-splits compares --kv-splits 1' \
    "${BD[@]}" --compare-splits --kv-splits 1
expect_error "decode: bench --max-seqlen-k below the sweep" 2 \
    '^flashattn bench --decode: --max-seqlen-k: 100 is below' "${BD[@]}" --max-seqlen-k 100
expect_error "decode: bench --batch 0" 2 '^flashattn bench --decode: --batch: 0 is not a batch size' \
    "${BD[@]}" --batch 0
if "$FA" devices 2>/dev/null | grep -Eq '^opencl: [1-9]'; then
    expect_stdout "decode: bench --decode row (opencl)" \
        '^opencl +f16 +1 +1024 +paged16 +1 +\| +[0-9.]+ .*\| +[0-9.]+x$' \
        bench --decode --backend opencl --max-seqlen-k 1024 --batch 1 --repeat 1 --copy-mib 16 \
        --quiet --compare-splits --paged 16 --kv-splits 2
    if grep -Eq '^# copy +the library has no device copy' "$TMP/out"; then
        pass "decode: bench opencl says what the copy is"
    else
        fail "decode: bench opencl says what the copy is" "no such header line"
    fi
fi
