# shellcheck shell=bash
# cli_bench_tests.sh - `flashattn bench`: tiny sweeps (seconds) of the flash path against the
# naive ones, the table, the CSV, the passes with the backward, the CLBlast (gemm) path, the
# figure (--plot) and the bad command lines. Sourced by cli_tests.sh after its run checks,
# whose helpers (fa, expect_ok, expect_stdout, expect_error, bwd_check, first_err, err_lines)
# it uses; $BENCH stays defined for the files sourced after it.

# ---- bench: tiny sweeps (seconds), flash vs naive --------------------------------------------
BENCH=(bench --seq-list 16,32 --dim 16 --heads 2 --repeat 1 --quiet)
BENCH_CSV_HEADER='backend,device,dtype,mask,batch,heads,dim,seq,flops,flash_state,flash_ms,flash_gflops,flash_peak_bytes,naive_state,naive_ms,naive_gflops,naive_peak_bytes,naive_need_bytes,speedup,mem_ratio,err_flash,err_naive,check,pass,gemm_state,gemm_ms,gemm_gflops,gemm_peak_bytes,speedup_gemm,err_gemm'
expect_stdout "bench header command line" '^# flashattn bench --seq-list 16,32 .*--backend cpu$' \
    "${BENCH[@]}" --backend cpu
expect_stdout "bench header date" '^# date +[0-9]{4}-[0-9]{2}-[0-9]{2} ' "${BENCH[@]}" --backend cpu
expect_stdout "bench header device" '^# device +cpu, device 0: ' "${BENCH[@]}" --backend cpu
expect_stdout "bench cpu table row" \
    '^cpu +f32 +none +16 +32 \| +[0-9.]+ +[0-9.-]+ +[0-9.]+K \| +[0-9.]+ +[0-9.-]+ +[0-9.]+K \| +[0-9.]+x +[0-9.]+x \| ref +[0-9.]+e' \
    "${BENCH[@]}" --backend cpu
expect_stdout "bench causal f16" '^cpu +f16 +top-left +16 +16 \|' \
    "${BENCH[@]}" --backend cpu --dtype f16 --causal top-left
# One spelling of the masks everywhere: run's --causal ALIGN, bench's --causal ALIGN and --mask
# none,top-left,bottom-right, and the same words in the table and the CSV.
expect_stdout "bench causal bottom-right" '^cpu +f32 +bottom-right +16 +32 \|' \
    "${BENCH[@]}" --backend cpu --causal bottom-right
fa "${BENCH[@]}" --backend cpu --mask none,top-left,bottom-right --csv "$TMP/masks.csv"
# The mask is the 5th field: the 2nd (the device) is quoted but holds exactly one comma.
masks=$(cut -d, -f5 "$TMP/masks.csv" | sed 1d | sort -u | tr '\n' ' ')
if [ "$RC" -eq 0 ] && [ "$masks" = 'bottom-right none top-left ' ]; then
    pass "bench csv mask names"
else
    fail "bench csv mask names" "exit $RC, masks: $masks"
fi
expect_error "bench mask causal is not a spelling" 2 \
    "unknown mask 'causal' \(none, top-left, bottom-right\)" \
    "${BENCH[@]}" --backend cpu --mask causal
expect_error "bench causal needs its alignment" 2 '--causal needs a value' \
    "${BENCH[@]}" --backend cpu --causal --repeat 3

# The CSV: the header, then one row per point (the quoted device name holds commas).
csv_check() { # csv_check NAME FILE ROWS
    local name=$1 file=$2 rows=$3 bad
    if [ "$RC" -ne 0 ] || [ ! -f "$file" ]; then
        fail "$name" "exit $RC, no $file: $(first_err)"
    elif [ "$(head -n 1 "$file")" != "$BENCH_CSV_HEADER" ]; then
        fail "$name" "header is '$(head -n 1 "$file")'"
    elif [ "$(wc -l <"$file" | tr -d ' ')" != $((rows + 1)) ]; then
        fail "$name" "$(wc -l <"$file" | tr -d ' ') lines, want $((rows + 1))"
    else
        bad=$(tail -n +2 "$file" | sed 's/"[^"]*"//' | awk -F, 'NF != 30' | wc -l | tr -d ' ')
        if [ "$bad" != 0 ]; then fail "$name" "$bad rows without 30 fields"; else pass "$name"; fi
    fi
}
fa "${BENCH[@]}" --backend cpu --dtype f32,bf16 --csv "$TMP/bench.csv"
csv_check "bench csv cpu" "$TMP/bench.csv" 4
if grep -q '^cpu,"cpu, device 0: [^"]*",bf16,none,1,2,16,32,[0-9]*,ok,[0-9.]*,[0-9.]*,[0-9]*,ok,' \
    "$TMP/bench.csv"; then pass "bench csv values"; else fail "bench csv values" "no bf16 seq 32 row"; fi

# A naive S/P buffer over the cap is OOM in the table; the flash path still runs.
expect_stdout "bench naive OOM" '^cpu +f32 +none +16 +32 \| +[0-9.]+ .*\| +OOM +- ' \
    "${BENCH[@]}" --backend cpu --naive-max-bytes 100
fa "${BENCH[@]}" --backend cpu --naive-max-bytes 100 --csv "$TMP/oom.csv"
if [ "$RC" -eq 0 ] && grep -q ',ok,[0-9.]*,[0-9.]*,[0-9]*,oom,,,,[0-9][0-9]*,' "$TMP/oom.csv"; then
    pass "bench csv OOM row"
else
    fail "bench csv OOM row" "exit $RC or no oom row in $TMP/oom.csv"
fi
expect_stdout "bench skips slow points" '^cpu +f32 +none +16 +64 \| +skip ' \
    bench --backend cpu --seq-list 16,32,64 --dim 16 --heads 2 --repeat 1 --quiet \
    --max-seconds 0.0000001
expect_stdout "bench check above the limit" '^cpu +f32 +none +16 +32 \|.*\| ref +- +\| +n/a +- +- +- *$' \
    "${BENCH[@]}" --backend cpu --check-max-seq 16

# --pass bwd and fwd+bwd: the backward against the naive backward (P and dP), same table.
BWD_ROW='^cpu +f32 +none +16 +32 \| +[0-9.]+ +[0-9.]+ +[0-9.]+K \| +[0-9.]+ +[0-9.]+ +[0-9.]+K \| +[0-9.]+x +[0-9.]+x \| ref +[0-9.]+e'
expect_stdout "bench bwd cpu row with GFLOP/s" "$BWD_ROW" "${BENCH[@]}" --backend cpu --pass bwd
expect_stdout "bench bwd says what it times" '^# pass +bwd: fa_backward' \
    "${BENCH[@]}" --backend cpu --pass bwd
expect_stdout "bench fwd+bwd cpu row" "$BWD_ROW" "${BENCH[@]}" --backend cpu --pass fwd+bwd
fa "${BENCH[@]}" --backend cpu --pass fwd
if [ "$RC" -eq 0 ] && ! grep -q '^# pass' "$TMP/out"; then pass "bench fwd table as before"
else fail "bench fwd table as before" "exit $RC, or a '# pass' line"; fi
# FLOPs of seq 32, dim 16, 2 heads: 4*2*32*32*16 = 131072 a forward; 2.5x and 3.5x that.
for want in fwd:131072 bwd:327680 fwd+bwd:458752; do
    ps=${want%%:*}
    fa "${BENCH[@]}" --backend cpu --pass "$ps" --csv "$TMP/pass.csv"
    csv_check "bench csv --pass $ps" "$TMP/pass.csv" 2
    if grep -q "^cpu,\"[^\"]*\",f32,none,1,2,16,32,${want#*:},ok,.*,$ps,unsupported,,,,,\$" \
        "$TMP/pass.csv"; then
        pass "bench csv --pass $ps flops"
    else
        fail "bench csv --pass $ps flops" "no seq 32 row with ${want#*:} FLOPs and pass $ps"
    fi
done
expect_stdout "bench bwd naive OOM" '^cpu +f32 +none +16 +32 \| +[0-9.]+ .*\| +OOM +- ' \
    "${BENCH[@]}" --backend cpu --pass bwd --naive-max-bytes 100
expect_error "bench bad pass" 2 "--pass: unknown pass 'backward' \(fwd, bwd, fwd\+bwd\)" \
    bench --pass backward

# The CLBlast (tuned-GEMM) naive path: the header says what it runs or that it was not built,
# never nothing; on cpu it is n/a.
expect_stdout "bench gemm header" '^# gemm +(CLBlast SGEMM|NOT BUILT: CLBlast was not found)' \
    "${BENCH[@]}" --backend cpu
expect_stdout "bench gemm n/a on cpu" '^cpu +f32 +none +16 +32 \|.*\| +n/a +- +- +- *$' \
    "${BENCH[@]}" --backend cpu

# OpenCL: the naive kernels on the same device, both outputs checked against the CPU golden.
if "$FA" devices 2>/dev/null | grep -Eq '^opencl: [1-9]'; then
    expect_stdout "bench opencl row" \
        '^opencl +f32 +none +16 +32 \| +[0-9.]+ .*\| +[0-9.]+ .*\| [0-9]\.[0-9]e[-+][0-9]+ +[0-9]\.[0-9]e' \
        "${BENCH[@]}" --backend opencl
    # all: every backend but the cpu golden (it checks them), and the header says so.
    fa "${BENCH[@]}" --backend all --csv "$TMP/all.csv"
    csv_check "bench csv all backends" "$TMP/all.csv" 2
    if grep -q '^cpu,' "$TMP/all.csv" || ! grep -q '^opencl,' "$TMP/all.csv"; then
        fail "bench all leaves the cpu golden out" "rows: $(cut -d, -f1 "$TMP/all.csv" | tr '\n' ' ')"
    else
        pass "bench all leaves the cpu golden out"
    fi
    expect_stdout "bench all says why cpu is out" \
        '^# skipped  (.*; )?cpu: the fp64 golden that checks the others \(--backend cpu times it\)$' \
        "${BENCH[@]}" --backend all
    if grep -Eq '^# skipped .*(dlopen says|FA_STATUS_)' "$TMP/out"; then
        fail "bench all skipped line is short" "$(grep '^# skipped' "$TMP/out")"
    else
        pass "bench all skipped line is short"
    fi
    expect_stdout "bench opencl naive OOM" '^opencl +f16 +none +16 +32 \| +[0-9.]+ .*\| +OOM ' \
        "${BENCH[@]}" --backend opencl --dtype f16 --naive-max-bytes 100
    # The CLBlast path where it is built: it runs, and matches the golden, unmasked and with
    # both causal alignments (the mask lives in its softmax kernel); f16 is n/a (f32 only).
    GEMM_OK='\| +[0-9.]+ +[0-9.]+ +[0-9.]+x [0-9]\.[0-9]e[-+][0-9]+ *$'
    if "$FA" "${BENCH[@]}" --backend cpu 2>/dev/null | grep -Eq '^# gemm +CLBlast SGEMM'; then
        for mk in none top-left bottom-right; do
            expect_stdout "bench gemm opencl $mk matches the golden" \
                "^opencl +f32 +$mk +16 +32 \\|.*$GEMM_OK" "${BENCH[@]}" --backend opencl --mask "$mk"
        done
        expect_stdout "bench gemm opencl f16 n/a" '^opencl +f16 +none +16 +32 \|.*\| +n/a +- ' \
            "${BENCH[@]}" --backend opencl --dtype f16
        expect_error "bench gemm-params malformed" 1 "--gemm-params: 'MWG' is not a list" \
            "${BENCH[@]}" --backend opencl --gemm-params MWG
        expect_error "bench gemm-params incomplete" 1 '--gemm-params: CLBlast refused' \
            "${BENCH[@]}" --backend opencl --gemm-params MWG=64
        fa "${BENCH[@]}" --backend opencl --csv "$TMP/gemm.csv"
        if [ "$RC" -eq 0 ] && grep -Eq ',fwd,ok,[0-9.]+,[0-9.]+,[0-9]+,[0-9.]+,[0-9.e+-]+$' "$TMP/gemm.csv"
        then pass "bench csv gemm columns"; else fail "bench csv gemm columns" "exit $RC"; fi
    else
        expect_stdout "bench gemm opencl not built says n/a" '^opencl +f32 +none +16 +32 \|.*\| +n/a ' \
            "${BENCH[@]}" --backend opencl
    fi
    # The backward where the opencl backend has one; where it has none yet, a clear one-line
    # error, never a silent skip (the naive backward exists either way).
    if "$FA" plan --backend opencl --seq 16 --dim 16 --backward >/dev/null 2>&1; then
        bwd_check "run backward check opencl" run --backend opencl --batch 1 --heads 4 \
            --heads-kv 2 --seq 37 --seq-k 29 --dim 16 --causal bottom-right --backward --check
        expect_stdout "bench bwd opencl row" \
            '^opencl +f32 +none +16 +32 \| +[0-9.]+ +[0-9.]+ .*\| +[0-9.]+ +[0-9.]+ .*\| [0-9]\.[0-9]e[-+][0-9]+ +[0-9]\.[0-9]e' \
            "${BENCH[@]}" --backend opencl --pass bwd
    else
        expect_error "run backward opencl unsupported" 1 '^flashattn: FA_STATUS_UNSUPPORTED: .*backward' \
            run --backend opencl --seq 16 --dim 16 --backward
        fa "${BENCH[@]}" --backend opencl --pass bwd
        if [ "$RC" -eq 1 ] && grep -q 'FA_STATUS_UNSUPPORTED' "$TMP/err" &&
            grep -Eq '^opencl +f32 +none +16 +32 \| +error .*\| +[0-9.]+ ' "$TMP/out"; then
            pass "bench bwd opencl unsupported, naive measured"
        else
            fail "bench bwd opencl unsupported, naive measured" "exit $RC: $(first_err)"
        fi
    fi
else
    echo "SKIP bench opencl: no OpenCL device"
    expect_stdout "bench all is the cpu alone" '^cpu +f32 +none +16 +32 \|' "${BENCH[@]}" --backend all
fi

# --plot: a PNG when gnuplot is there; a clear one-line error when it is not.
if command -v gnuplot >/dev/null 2>&1; then
    fa "${BENCH[@]}" --backend cpu --plot "$TMP/bench.png"
    if [ "$RC" -eq 0 ] && [ -s "$TMP/bench.png" ] && head -c 4 "$TMP/bench.png" | grep -q PNG; then
        pass "bench plot png"
    else
        fail "bench plot png" "exit $RC, $(first_err)"
    fi
    # The figure reads alone: each path and baseline named in the legend, every device in the
    # title (an SVG is text, so the words can be checked). --backend all leaves the cpu golden
    # out where another backend is, so the cpu legend is drawn on its own.
    fa "${BENCH[@]}" --backend cpu --plot "$TMP/bench.svg"
    if [ "$RC" -ne 0 ] || [ ! -s "$TMP/bench.svg" ]; then
        fail "bench plot svg" "exit $RC, $(first_err)"
    elif ! grep -q 'cpu flash (fp64 golden reference' "$TMP/bench.svg" ||
        ! grep -q 'cpu naive (plain f32 C loop)' "$TMP/bench.svg"; then
        fail "bench plot svg" "the legend does not say what the cpu paths are"
    elif grep -q 'and others' "$TMP/bench.svg" || ! grep -q 'cpu, device 0: ' "$TMP/bench.svg"; then
        fail "bench plot svg" "the title does not name every device"
    else
        pass "bench plot svg"
    fi
    # The legend stands under both panels (not beside them, where it took a third of the
    # width), inside the figure: its entries' text is placed below 3/4 of the height.
    legend_below() { # legend_below SVG TEXT: TEXT's y is in the figure's bottom quarter
        local h y x
        h=$(sed -n 's/^ *viewBox="0 0 [0-9.]* \([0-9.]*\)".*/\1/p' "$1" | head -n 1)
        read -r x y < <(grep -B1 -F ">$2<" "$1" |
            sed -n 's/.*translate(\([0-9.-]*\),\([0-9.-]*\)).*/\1 \2/p' | head -n 1)
        [ -n "$h" ] && [ -n "$y" ] &&
            awk -v x="$x" -v y="$y" -v h="$h" 'BEGIN { exit !(x >= 0 && y > 0.75 * h && y < h) }'
    }
    if legend_below "$TMP/bench.svg" 'cpu flash (fp64 golden reference, scalar)' &&
        legend_below "$TMP/bench.svg" 'cpu naive (plain f32 C loop)'; then
        pass "bench plot legend under the panels"
    else
        fail "bench plot legend under the panels" "an entry is not in the figure's bottom quarter"
    fi
    # The gemm path: drawn with its own legend entry where it ran, and where it did not, the
    # figure says so and why (never silently absent).
    if grep -q '>no gemm line (naive attention on CLBlast SGEMM): ' "$TMP/bench.svg" &&
        ! grep -q 'gemm (naive attention on CLBlast SGEMM)<' "$TMP/bench.svg"; then
        pass "bench plot svg says there is no gemm line on cpu"
    else
        fail "bench plot svg says there is no gemm line on cpu" "no 'no gemm line' note"
    fi
    fa "${BENCH[@]}" --backend cpu --pass bwd --plot "$TMP/bwd.svg"
    if [ "$RC" -eq 0 ] && grep -q 'time per backward' "$TMP/bwd.svg" &&
        grep -Eq '>no gemm line \(naive attention on CLBlast SGEMM\): (it is forward only|not built)' \
            "$TMP/bwd.svg"; then
        pass "bench plot svg bwd"
    else
        fail "bench plot svg bwd" "exit $RC, or no backward title or gemm note"
    fi
    if "$FA" devices 2>/dev/null | grep -Eq '^opencl: [1-9]'; then
        fa "${BENCH[@]}" --backend all --plot "$TMP/all.svg"
        if [ "$RC" -ne 0 ] || ! grep -q '>opencl flash<' "$TMP/all.svg" ||
            ! grep -q 'opencl naive (untuned reference kernels)' "$TMP/all.svg" ||
            ! grep -q 'opencl, device 0: ' "$TMP/all.svg"; then
            fail "bench plot svg all" "exit $RC, or the legend or title does not name opencl"
        elif ! legend_below "$TMP/all.svg" 'opencl naive (untuned reference kernels)'; then
            fail "bench plot svg all" "the legend is not under the panels"
        else
            pass "bench plot svg all"
        fi
        if "$FA" "${BENCH[@]}" --backend cpu 2>/dev/null | grep -Eq '^# gemm +CLBlast SGEMM'; then
            if grep -q '>opencl gemm (naive attention on CLBlast SGEMM)<' "$TMP/all.svg" &&
                ! grep -q 'no gemm line' "$TMP/all.svg" &&
                legend_below "$TMP/all.svg" 'opencl gemm (naive attention on CLBlast SGEMM)'; then
                pass "bench plot svg names the gemm path"
            else
                fail "bench plot svg names the gemm path" "no gemm legend entry in $TMP/all.svg"
            fi
            # f32 and f16: gemm ran for f32 only, and the figure says where it is drawn.
            fa "${BENCH[@]}" --backend opencl --dtype f32,f16 --plot "$TMP/mixed.svg"
            if [ "$RC" -eq 0 ] && grep -q '>opencl f32 gemm (naive attention on CLBlast SGEMM)<' \
                "$TMP/mixed.svg" && grep -q 'is drawn where it ran' "$TMP/mixed.svg"; then
                pass "bench plot svg gemm where it ran"
            else
                fail "bench plot svg gemm where it ran" "exit $RC, or no f32 gemm entry or note"
            fi
        elif grep -q '>no gemm line (naive attention on CLBlast SGEMM): not built' "$TMP/all.svg"; then
            pass "bench plot svg says gemm was not built"
        else
            fail "bench plot svg says gemm was not built" "no 'not built' note in $TMP/all.svg"
        fi
    fi
    # A one-point sweep draws without gnuplot's "empty x range" warnings.
    fa "${BENCH[@]}" --seq-list 32 --backend cpu --plot "$TMP/one.png"
    if [ "$RC" -eq 0 ] && [ -s "$TMP/one.png" ] && [ ! -s "$TMP/err" ]; then
        pass "bench plot one point"
    else
        fail "bench plot one point" "exit $RC, stderr: $(first_err)"
    fi
    # An unwritable --plot fails before the sweep (no table), in one line.
    expect_error "bench unwritable plot" 1 'no/such/dir/b.png: cannot create the plot' \
        "${BENCH[@]}" --backend cpu --plot "$TMP/no/such/dir/b.png"
    if [ -s "$TMP/out" ]; then fail "bench unwritable plot: before the sweep" "a table was printed"
    else pass "bench unwritable plot: before the sweep"; fi
else
    echo "SKIP bench plot png: no gnuplot"
fi
PATH=/nonexistent "$FA" "${BENCH[@]}" --backend cpu --plot "$TMP/none.png" >"$TMP/out" 2>"$TMP/err"
RC=$?
if [ "$RC" -eq 1 ] && [ "$(err_lines)" = 1 ] && grep -q 'gnuplot not found' "$TMP/err"; then
    pass "bench plot without gnuplot"
else
    fail "bench plot without gnuplot" "exit $RC: $(first_err)"
fi

expect_error "bench seq-list abc" 2 "'abc' is not a positive integer" bench --seq-list 256,abc
expect_error "bench seq-list empty item" 2 'empty item' bench --seq-list 256,,512
expect_error "bench seq-list 0" 2 'out of range' bench --seq-list 0
expect_error "bench dim 300" 2 'out of range' bench --dim 64,300
expect_error "bench bad backend" 2 "unknown backend 'tpu'" bench --backend tpu
expect_error "bench bad dtype" 2 "unknown dtype 'f64'" bench --dtype f32,f64
expect_error "bench bad mask" 2 "unknown mask 'diagonal'" bench --mask diagonal
expect_error "bench causal and mask" 2 'go together only' bench --causal top-left --mask none
expect_error "bench max-seconds 0" 2 'positive' bench --max-seconds 0
expect_error "bench repeat 0" 2 'out of range' bench --repeat 0
expect_error "bench naive-max-bytes -1" 2 'not a non-negative' bench --naive-max-bytes -1
expect_error "bench unknown option" 2 "unknown option '--seq'" bench --seq 256
expect_error "bench unwritable csv" 1 'cannot create' \
    "${BENCH[@]}" --backend cpu --csv "$TMP/no/such/dir/b.csv"
