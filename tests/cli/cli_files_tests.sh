# shellcheck shell=bash
# cli_files_tests.sh - .npy files in the order --layout names ([batch, seq, heads, head_dim]
# for bshd, read and written so), and the reader's bounds: a file's header is read and checked
# against the file's size and the memory available before any of its data. Sourced by
# cli_tests.sh after its .npy checks, whose helpers ($GOOD, make_npy, dict, grad_file) and
# files ($TMP/rt_f32 and $TMP/bwd_f32, bhsd, seeds 7 and 9) it uses.

L=$TMP/layout
mkdir -p "$L/fwd" "$L/bwd"

# npy_words FILE: the data of a .npy file the CLI wrote, one 32-bit word a line (a file's own
# bytes, whatever the host's byte order: two files are compared word for word).
npy_words() {
    local lo hi
    read -r lo hi < <(od -An -tu1 -j8 -N2 "$1")
    od -An -v -tx4 -j $((10 + lo + 256 * hi)) "$1" | tr -s ' ' '\n' | sed '/^$/d'
}

# is_bshd_of NAME BHSD_FILE BSHD_FILE B H S D: the second file holds the first's [B, H, S, D]
# elements in [B, S, H, D] order.
is_bshd_of() {
    local name=$1 why
    why=$(awk -v B="$4" -v H="$5" -v S="$6" -v D="$7" '
        NR == FNR { a[FNR - 1] = $1; next }
        { b[FNR - 1] = $1; n = FNR }
        END {
            if (n != B * H * S * D) { print n " elements"; exit }
            for (i = 0; i < B; i++) for (h = 0; h < H; h++) for (s = 0; s < S; s++)
                for (d = 0; d < D; d++)
                    if (a[((i * H + h) * S + s) * D + d] != b[((i * S + s) * H + h) * D + d]) {
                        print "element [" i ", " h ", " s ", " d "] differs"; exit
                    }
        }' <(npy_words "$2") <(npy_words "$3"))
    if [ ! -f "$3" ]; then fail "$name" "no $3"
    elif [ -n "$why" ]; then fail "$name" "$why"
    else pass "$name"; fi
}

# ---- --layout bshd: inputs read, outputs and --save-inputs written, as [B, S, H, D] -----------
F=$L/fwd
expect_ok "bshd save inputs" run --backend cpu "${SHAPE[@]}" --layout bshd --seed 7 \
    --save-inputs "$F" --out "$F/o1.npy"
grad_file "bshd q file is [B, S, H, D]" "$F/q.npy" '<f4' '(2, 33, 4, 24)'
grad_file "bshd k file is [B, S, H, D]" "$F/k.npy" '<f4' '(2, 40, 2, 24)'
grad_file "bshd O file is [B, S, H, D]" "$F/o1.npy" '<f4' '(2, 33, 4, 24)'
# The same seed gives the same logical tensors whatever the layout: only the order differs.
is_bshd_of "bshd q is bhsd q transposed" "$TMP/rt_f32/q.npy" "$F/q.npy" 2 4 33 24
is_bshd_of "bshd k is bhsd k transposed" "$TMP/rt_f32/k.npy" "$F/k.npy" 2 2 40 24
is_bshd_of "bshd O is bhsd O transposed" "$TMP/rt_f32/o1.npy" "$F/o1.npy" 2 4 33 24
expect_stdout "bshd files read as bshd" '^problem +batch 2, heads 4 \(kv 2\), seq 33 x 40, dim 24' \
    run --backend cpu --layout bshd --q "$F/q.npy" --k "$F/k.npy" --v "$F/v.npy" \
    --out "$F/o2.npy" --check
same_files "bshd files round trip O" "$F/o1.npy" "$F/o2.npy"
B=$L/bwd
expect_ok "bshd backward files" run --backend cpu "${SHAPE[@]}" --layout bshd --seed 9 \
    --backward --save-inputs "$B" --dq "$B/dq1.npy" --dk "$B/dk1.npy" --dv "$B/dv1.npy"
grad_file "bshd dO file is [B, S, H, D]" "$B/do.npy" '<f4' '(2, 33, 4, 24)'
is_bshd_of "bshd dQ is bhsd dQ transposed" "$TMP/bwd_f32/dq1.npy" "$B/dq1.npy" 2 4 33 24
is_bshd_of "bshd dK is bhsd dK transposed" "$TMP/bwd_f32/dk1.npy" "$B/dk1.npy" 2 2 40 24
bwd_check "bshd backward from files" run --backend cpu --layout bshd --q "$B/q.npy" \
    --k "$B/k.npy" --v "$B/v.npy" --do "$B/do.npy" --dq "$B/dq2.npy" --check
same_files "bshd files round trip dQ" "$B/dq1.npy" "$B/dq2.npy"

# PyTorch-ordered files [B, S, H, D] = [1, 256, 4, 16] are 4 heads of 256 rows under
# --layout bshd (they ran as 256 heads of 4 rows).
make_npy "$L/q_bshd.npy" 1 "$(dict '<f4' False '(1, 256, 4, 16)')" $((256 * 4 * 16 * 4))
expect_stdout "bshd zeros: heads 4, seq 256" '^problem +batch 1, heads 4 \(kv 4\), seq 256 x 256, dim 16, f32, layout bshd' \
    run --backend cpu --layout bshd --q "$L/q_bshd.npy" --k "$L/q_bshd.npy" --v "$L/q_bshd.npy"

# Files that cannot be the layout named: a usage error with the file, its shape, the layout,
# and the layout in which they would agree.
expect_error "bshd files read as bhsd" 2 \
    "k\\.npy: shape \\[2, 40, 2, 24\\] read as --layout bhsd \\[batch, heads, seq, head_dim\\]: its heads 40 do not divide .*q\\.npy's 33 \\(shape \\[2, 33, 4, 24\\]\\); read as --layout bshd they agree" \
    run --backend cpu --q "$F/q.npy" --k "$F/k.npy" --v "$F/v.npy"
expect_error "bhsd files read as bshd" 2 \
    "k\\.npy: shape \\[2, 2, 40, 24\\] read as --layout bshd \\[batch, seq, heads, head_dim\\]: its heads 40 do not divide .*; read as --layout bhsd they agree" \
    run --backend cpu --layout bshd --q "$TMP/rt_f32/q.npy" --k "$TMP/rt_f32/k.npy" \
    --v "$TMP/rt_f32/v.npy"
expect_error "bshd dO of another shape" 2 \
    "k\\.npy: shape \\[2, 40, 2, 24\\] does not match .*q\\.npy's \\[2, 33, 4, 24\\] \\(dO has the shape of Q and O; --layout bshd" \
    run --backend cpu --layout bshd --q "$B/q.npy" --k "$B/k.npy" --v "$B/v.npy" --do "$B/k.npy"

# ---- the reader: the header first, then exactly the data it announces ------------------------
# VM caps the address space (ulimit -v, KiB) where the program starts under such a cap (not
# under AddressSanitizer, which reserves terabytes); LIMIT times every run here either way.
VM=
if { (ulimit -v 400000 && "$FA" --version) >/dev/null 2>&1; } 2>/dev/null; then VM=400000; fi
[ -n "$VM" ] || echo "SKIP npy reads under ulimit -v: the program does not start under one"
GKV=(--k "$GOOD/k.npy" --v "$GOOD/v.npy")
# A 1 GiB sparse file behind a 4-element header: refused by its size, nothing read (it was
# read whole first: 2.2 GB of memory and 7.6 s).
make_npy "$L/sparse.npy" 1 "$(dict '<f4' False '(1, 1, 1, 4)')" 16
truncate -s 1G "$L/sparse.npy"
LIMIT=5 VMEM=$VM expect_error "npy 1 GiB behind a 4-element header" 1 \
    "sparse\\.npy: file is longer than its header says: the header's shape needs 16 data bytes, the file has 1073741" \
    run --backend cpu --q "$L/sparse.npy" "${GKV[@]}"
# A header that asks for more memory than there is: refused before the data is read.
if [ -n "$VM" ]; then
    make_npy "$L/big.npy" 1 "$(dict '<f4' False '(1, 1, 65536, 4096)')" 0
    truncate -s $(($(wc -c <"$L/big.npy") + 1073741824)) "$L/big.npy"
    LIMIT=5 VMEM=$VM expect_error "npy data past the memory guard" 1 \
        'big\.npy: its data needs 1073741824 B \(1\.0 GiB\) of host memory, more than the .* \(address-space limit' \
        run --backend cpu --q "$L/big.npy" "${GKV[@]}"
    LIMIT=5 VMEM=$VM expect_error "npy modifier file past the memory guard" 1 \
        'big\.npy: its data needs 1073741824 B' \
        run --backend cpu --seq 8 --dim 8 --alibi-slopes "$L/big.npy"
fi
# Not regular files: /dev/zero fails at its magic (it grew to 16 GiB), a pipe is read as far
# as its header says and refused when more follows.
GQKV=(--q "$GOOD/q.npy" "${GKV[@]}")
LIMIT=5 VMEM=$VM expect_error "npy --do /dev/zero" 1 '/dev/zero: bad magic' \
    run --backend cpu "${GQKV[@]}" --do /dev/zero
LIMIT=5 VMEM=$VM expect_error "npy --q /dev/zero" 1 '/dev/zero: bad magic' \
    run --backend cpu --q /dev/zero "${GKV[@]}"
if mkfifo "$L/fifo" 2>/dev/null; then
    cat "$GOOD/q.npy" /dev/zero >"$L/fifo" 2>/dev/null &
    writer=$!
    LIMIT=10 VMEM=$VM expect_error "npy pipe that goes on" 1 \
        'fifo: file is longer than its header says: more than the 25344 data bytes' \
        run --backend cpu --q "$L/fifo" "${GKV[@]}"
    kill "$writer" 2>/dev/null
    wait "$writer" 2>/dev/null
    cat "$GOOD/q.npy" >"$L/fifo" 2>/dev/null &
    writer=$!
    LIMIT=10 expect_ok "npy pipe of a whole file" run --backend cpu --q "$L/fifo" "${GKV[@]}"
    kill "$writer" 2>/dev/null
    wait "$writer" 2>/dev/null
else
    echo "SKIP npy pipes: no mkfifo"
fi
