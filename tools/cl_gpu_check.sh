#!/usr/bin/env bash
# cl_gpu_check.sh - compiles every OpenCL kernel variant the planner produces for real GPU
# targets, without a GPU, and reports registers, scratch and spills per variant.
#
# The OpenCL kernels have only run on pocl (a CPU), where registers and spills do not show. Here
# clang-15 with libclc compiles them as a GPU driver would: for AMD (amdgcn, gfx90a and gfx1030)
# to assembly whose amdhsa metadata has the register, spill and scratch counts, and for NVIDIA
# to PTX that ptxas (CUDA Toolkit) assembles for sm_80 with -v. The variants are the library's
# own: tools/cl_variants prints, per device profile, the entry point and the exact build options
# of every launch its plans make (forward, split-KV decode with its merge, backward).
#
#   cl_gpu_check.sh CL_VARIANTS [--markdown]
#     CL_VARIANTS   the built tools/cl_variants
#     --markdown    print the table as markdown (for docs/backends-opencl.md)
#   env: CLANG (default clang-15), LIBCLC_DIR (default /usr/lib/clc), PTXAS (default ptxas on
#        PATH, else /usr/local/cuda/bin/ptxas), FLASHATTN_REQUIRE_CLANG_GPU=1: a missing
#        clang-15 or libclc fails instead of skipping.
#
# Exit status: 0 when every variant compiles and none with head_dim <= 128 has scratch or
# spills beyond tools/cl_gpu_known_spills.txt (FLASHATTN_KNOWN_SPILLS names another list); 1
# otherwise (head_dim 256 spills are reported, not failed: its accumulator row does not fit in
# registers by design); 77 (skipped) when clang-15 or libclc is missing.
set -eu

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { echo "usage: cl_gpu_check.sh CL_VARIANTS [--markdown]" >&2; exit 2; }
[ $# -ge 1 ] || usage
VARIANTS=$1
MARKDOWN=0
if [ $# -ge 2 ]; then
    [ "$2" = --markdown ] || usage
    MARKDOWN=1
fi
[ -x "$VARIANTS" ] || { echo "cl_gpu_check.sh: $VARIANTS is not an executable" >&2; exit 1; }

# ---- the tools; a machine without them skips unless told it must have them ----
export CLANG=${CLANG:-clang-15}
export LIBCLC_DIR=${LIBCLC_DIR:-/usr/lib/clc}
missing=""
command -v "$CLANG" >/dev/null 2>&1 || missing="$CLANG"
for bc in amdgcn--amdhsa.bc nvptx64--nvidiacl.bc; do
    [ -f "$LIBCLC_DIR/$bc" ] || missing="$missing $LIBCLC_DIR/$bc (libclc-15)"
done
if [ -n "$missing" ]; then
    echo "cl_gpu_check.sh: missing: $missing (apt-get install clang-15 libclc-15)" >&2
    [ "${FLASHATTN_REQUIRE_CLANG_GPU:-0}" = 1 ] && exit 1
    exit 77
fi
# ptxas only turns PTX into registers and spills; without it the .local bytes the PTX declares
# are the nearest number (what the kernel itself puts in private memory, before ptxas spills).
PTXAS=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
[ -x "$PTXAS" ] || PTXAS=""
export PTXAS

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export WORK

# The program source exactly as src/kernel_build.c assembles it: the params header, then each
# kernel file after a #line directive naming it (so clang's messages name the .cl file).
# A program is the shared files (backends/opencl/cl_program.c, FA_CL_SHARED_FILES), then the
# file of its entry point (the forward's and the backward's then their register-blocked paths':
# flash_blocks.cl and their own, empty without REG_BLOCKED).
shared="common storage softmax modifiers dropout sequences"
for name in fwd merge bwd; do
    after=""
    [ "$name" != merge ] && after="blocks ${name}_blocked"
    { cat "$ROOT/src/kernel_params.h"
      for f in $shared $name $after; do
          printf '\n#line 1 "flash_%s.cl"\n' "$f"
          cat "$ROOT/kernels_cl/flash_$f.cl"
      done; } >"$WORK/$name.cl"
done

# only_kernels "ENTRY ...": the program on stdin with the other kernels' definitions blanked
# (the lines kept, so messages keep their line numbers). A backward unit compiles the passes its
# launches use: 36 of gfx90a's 94 serve flash_bwd_dkdv alone and 36 flash_bwd_dq with
# flash_bwd_pre, and compiling the other large pass too cost a fifth of the check (204 -> 164
# CPU seconds). Each kernel is compiled and its registers allocated on its own: the 786 launches'
# registers, scratch and spills were the same as with whole programs when this was written.
# shellcheck disable=SC2317 # run by compile_unit through xargs, not called here
only_kernels() {
    awk -v keep=" $1 " '
        /^__kernel / { head = $0; named = 1; next }
        named { named = 0; name = $0; sub(/\(.*/, "", name)
                skip = index(keep, " " name " ") == 0
                if (skip) { print ""; print ""; next }
                print head }
        skip { print ""; if ($0 ~ /^}/) skip = 0; next }
        { print }'
}
export -f only_kernels

# compile_unit TARGET UNIT PROGRAM OPTIONS ENTRIES: compiles one program with one option set for
# one target to $WORK/out/TARGET.uUNIT.{s,ptx,v,log}, as the host builds it but with only the
# unit's entry points (only_kernels), so the launches that share a build (the backward's passes
# often do) share this compile. An AMD compile leaves the assembly with its amdhsa metadata; an
# NVIDIA one the PTX and, with ptxas, its -v report. The file .ok marks a compile that worked.
# shellcheck disable=SC2317 # run through xargs, not called here
compile_unit() {
    set -eu
    local target=$1 unit=$2 options=$4 src=$WORK/$3.cl
    local out=$WORK/out/$target.u$unit log=$WORK/out/$target.u$unit.log
    if [ "$3" = bwd ]; then
        only_kernels "$5" <"$src" >"$out.cl"
        src=$out.cl
    fi
    # libclc's builtins linked in as clang links a device library (-mlink-builtin-bitcode: its
    # functions take the kernel's target attributes); the triples differ only in the vendor
    # field, which the linker warns about.
    cl() {
        # shellcheck disable=SC2086 # the options are the -D list, split on purpose
        "$CLANG" -x cl -O3 -Wno-linker-warnings -Xclang -finclude-default-header \
            -Xclang -mlink-builtin-bitcode -Xclang "$LIBCLC_DIR/$1" "${@:2}" $options -S "$src"
    }
    case $target in
    gfx*)
        cl amdgcn--amdhsa.bc -target amdgcn-amd-amdhsa -mcpu="$target" -nogpulib \
            -o "$out.s" 2>"$log" && touch "$out.ok" ;;
    sm_*)
        if cl nvptx64--nvidiacl.bc -target nvptx64-nvidia-nvcl -march="$target" \
            -o "$out.ptx" 2>"$log"; then
            if [ -z "$PTXAS" ]; then
                touch "$out.ok"
            elif "$PTXAS" -v --gpu-name "$target" "$out.ptx" -o /dev/null >"$out.v" 2>&1; then
                touch "$out.ok"
            else
                cat "$out.v" >>"$log"
            fi
        fi ;;
    esac
    return 0
}
export -f compile_unit

# measure_one TARGET INDEX ENTRY OPTIONS UNIT: reads one launch's entry point out of its unit's
# compile and writes one tab-separated line to $WORK/res/TARGET.INDEX: target entry d dtype mask
# Br Bc WG registers scratch spills bad (bad: 1 when it has scratch or spills, E when it did not
# compile). The unit's log becomes the line's log ($WORK/out/TARGET.INDEX.log).
measure_one() {
    local target=$1 index=$2 entry=$3 options=$4 out=$WORK/out/$1.u$5
    local log=$WORK/out/$target.$index.log
    local regs="-" scratch="-" spills="-" bad=0 v="" r=""
    cp "$out.log" "$log"
    if [ ! -f "$out.ok" ]; then
        bad=E
    else
        case $target in
        gfx*)
            # amdhsa metadata: one YAML map per kernel, its keys at 4 spaces, the first after
            # "  - " (the arguments' keys are deeper)
            read -r v s vs ss priv < <(awk -v want="$entry" '
                function flush() { if (name == want) print f["vgpr_count"], f["sgpr_count"],
                    f["vgpr_spill_count"], f["sgpr_spill_count"],
                    f["private_segment_fixed_size"]; delete f; name = "" }
                /^amdhsa.kernels:/ { on = 1; next }
                on && /^  - \./ { flush() }
                on && /^[a-z]/ { flush(); on = 0 }
                on && match($0, /^(    |  - )\.[a-z_]+: +[^ ]+$/) {
                    key = $0; sub(/^ +(- )?\./, "", key); sub(/:.*/, "", key)
                    if (key == "name") name = $NF; else f[key] = $NF }
                END { flush() }' "$out.s") || true
            if [ -n "${v:-}" ]; then
                regs="${v}v ${s}s" scratch=$priv spills="${vs}v ${ss}s"
                [ "$priv" = 0 ] && [ "$vs" = 0 ] && [ "$ss" = 0 ] || bad=1
            else
                echo "no $entry in the amdhsa metadata" >>"$log"; bad=E
            fi ;;
        sm_*)
            if ! grep -q "^\.entry $entry(" "$out.ptx"; then
                echo "no .entry $entry in the PTX" >>"$log"; bad=E
            elif [ -n "$PTXAS" ]; then
                read -r r stack st ld < <(awk -v want="$entry" '
                    /Compiling entry function/ { split($0, a, "'\''"); cur = a[2] }
                    /Function properties for/ { fp = $NF }
                    fp == want && /bytes stack frame/ { stack = $1; st = $5; ld = $9 }
                    cur == want && match($0, /Used [0-9]+ registers/) {
                        r = substr($0, RSTART + 5, RLENGTH - 15) }
                    END { print r, stack, st, ld }' "$out.v") || true
                if [ -z "$r" ]; then
                    cat "$out.v" >>"$log"; bad=E
                else
                    regs=$r scratch=$stack spills="${st}B st ${ld}B ld"
                    [ "$stack" = 0 ] && [ "$st" = 0 ] && [ "$ld" = 0 ] || bad=1
                fi
            else
                # The .local bytes of the entry's body (its __local_depot: private arrays).
                scratch=$(awk -v want="$entry" '
                    /^\.(visible )?\.?(entry|func)/ { on = ($0 ~ "\\.entry " want "\\(") }
                    on && /\.local .*\[[0-9]+\]/ { match($0, /\[[0-9]+\]/)
                        n += substr($0, RSTART + 1, RLENGTH - 2) }
                    END { print n + 0 }' "$out.ptx")
                regs="?" spills="? (no ptxas)"
                [ "$scratch" = 0 ] || bad=1
            fi ;;
        esac
    fi
    local o=" $options " d dtype mask br bc wg
    d=${o##* -D HEAD_DIM=}; d=${d%% *}
    dtype=${o##* -D DTYPE=}; dtype=${dtype%% *}
    mask=${o##* -D MASK=}; mask=${mask%% *}
    br=${o##* -D BLOCK_R=}; br=${br%% *}
    bc=${o##* -D BLOCK_C=}; bc=${bc%% *}
    wg=${o##* -D WG_SIZE=}; wg=${wg%% *}
    case $o in *" -D SPLIT=1 "*) entry="$entry (split)" ;; esac
    local features=${o##* -D FEATURES=}
    case $o in *" -D FEATURES="*) (((${features%% *} & 64) == 0)) || entry="$entry (sparse)" ;; esac
    case $dtype in 0) dtype=f32 ;; 1) dtype=f16 ;; 2) dtype=bf16 ;; esac
    case $mask in 0) mask=none ;; 1) mask=causal-tl ;; 2) mask=causal-br ;; esac
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$entry" "$d" "$dtype" \
        "$mask" "$br" "$bc" "$wg" "$regs" "$scratch" "$spills" "$bad" >"$WORK/res/$target.$index"
}

# ---- the jobs: target (clang's -mcpu / -march) and the device profile the planner uses ----
mkdir -p "$WORK/out" "$WORK/res"
TARGETS="gfx90a:amd-gfx90a gfx1030:amd-gfx1030 sm_80:nvidia-sm80"
for t in $TARGETS; do
    "$VARIANTS" "${t#*:}" >"$WORK/${t%%:*}.variants" ||
        { echo "cl_gpu_check.sh: $VARIANTS ${t#*:} failed" >&2; exit 1; }
    awk -v t="${t%%:*}" '{ print t "\t" NR "\t" $0 }' "$WORK/${t%%:*}.variants"
done >"$WORK/jobs"
# One variant per line: "target<TAB>index<TAB>entry<TAB>options". The launches built from the
# same program with the same options are one compile unit: "target<TAB>unit<TAB>program<TAB>
# options<TAB>entry points" in $WORK/units, and each job's unit is its fifth field.
awk -F'\t' -v OFS='\t' '{ p = $3 ~ /^flash_bwd_/ ? "bwd" : $3 == "flash_merge" ? "merge" : "fwd"
    key = $1 "\t" p "\t" $4
    if (!(key in unit)) { unit[key] = ++n; keys[n] = key }
    u = unit[key]
    if (index(" " entries[u] " ", " " $3 " ") == 0) entries[u] = entries[u] " " $3
    print $0, u }
    END { for (v = 1; v <= n; v++) { split(keys[v], k, "\t")
            print k[1], v, k[2], k[3], substr(entries[v], 2) >units } }' \
    units="$WORK/units" "$WORK/jobs" >"$WORK/jobs.units"
mv "$WORK/jobs.units" "$WORK/jobs"
# shellcheck disable=SC2016 # $1 is expanded by the inner bash
tr '\n' '\0' <"$WORK/units" | xargs -0 -P "$(nproc)" -n 1 bash -c \
    'IFS=$(printf "\t") read -r t u p o e <<<"$1"; compile_unit "$t" "$u" "$p" "$o" "$e"' _
while IFS=$'\t' read -r t i e o u; do
    measure_one "$t" "$i" "$e" "$o" "$u"
done <"$WORK/jobs"
echo "# $(wc -l <"$WORK/jobs") launches' kernels in $(wc -l <"$WORK/units") compiles"

# ---- the table, in job order, and the verdict ----
results() {
    while IFS=$'\t' read -r t i _; do cat "$WORK/res/$t.$i"; done <"$WORK/jobs"
}
results >"$WORK/table"
ptxas_version=none
[ -z "$PTXAS" ] || ptxas_version="$PTXAS ($("$PTXAS" --version | grep -o 'release .*' || true))"
echo "# clang: $("$CLANG" --version | head -n 1); libclc: $LIBCLC_DIR; ptxas: $ptxas_version"
echo "# registers: AMD VGPRs+SGPRs, NVIDIA per thread; scratch: AMD private segment bytes per" \
    "work-item, NVIDIA stack frame bytes; spills: AMD registers, NVIDIA bytes stored/loaded"
awk -F'\t' -v md="$MARKDOWN" '
    BEGIN { split("target entry d dtype mask Br Bc WG registers scratch spills result", h, " ")
            fmt = "%-8s %-22s %4s %-5s %-10s %3s %4s %4s %-11s %7s %-16s %s\n" }
    function row(a) {
        if (md) { s = "|"; for (k = 1; k <= 12; k++) s = s " " a[k] " |"; print s }
        else printf fmt, a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12]
    }
    NR == 1 { row(h); if (md) print "|---|---|--:|---|---|--:|--:|--:|---|--:|---|---|" }
    { for (k = 1; k <= 11; k++) c[k] = $k
      c[12] = $12 == "E" ? "COMPILE ERROR" : $12 == 0 ? "ok" : $3 > 128 ? "spills (d > 128: reported)" : "FAIL"
      row(c) }' "$WORK/table"

# Failures: any compile error; scratch or spills at head_dim <= 128 beyond the known ones.
# tools/cl_gpu_known_spills.txt lists the variants that spill today (target, entry, options,
# scratch bytes), each a debt with its reason there: they fail only when their scratch grows.
# A variant that no longer spills is reported, so its line can go.
KNOWN=${FLASHATTN_KNOWN_SPILLS:-$ROOT/tools/cl_gpu_known_spills.txt}
known_scratch() { # TARGET ENTRY OPTIONS: the listed scratch bytes, or nothing
    awk -F'\t' -v t="$1" -v e="$2" -v o="$3" '$1 == t && $2 == e && $3 == o { print $4 }' \
        "$KNOWN" 2>/dev/null || true
}
fail=0 known=0
echo
for t in $TARGETS; do
    t=${t%%:*}
    awk -F'\t' -v t="$t" '$1 == t { n++; if ($12 == "E") e++; else if ($12 == 1) { if ($3 > 128) r++; else f++ } }
        END { printf "%-8s %d variants: %d with scratch or spills (d <= 128), %d compile errors, %d reported (d > 128)\n", t, n, f, e, r }' "$WORK/table"
done
new_spills=""
while IFS=$'\t' read -r t i e o _; do
    IFS=$'\t' read -r _ entry d _ _ _ _ _ _ scratch _ bad <"$WORK/res/$t.$i"
    listed=$(known_scratch "$t" "$e" "$o")
    if [ "$bad" = E ]; then
        echo "--- $t $entry: compile error ($o):"
        head -n 30 "$WORK/out/$t.$i.log"
        fail=1
    elif [ "$bad" = 1 ] && [ "$d" -le 128 ]; then
        if [ -n "$listed" ] && [ "$scratch" -le "$listed" ]; then
            known=$((known + 1))
        else
            echo "--- $t $entry: scratch $scratch bytes (listed: ${listed:-no}): $o"
            new_spills="$new_spills$t\t$e\t$o\t$scratch\n"
            fail=1
        fi
    elif [ -n "$listed" ]; then
        echo "--- $t $entry no longer spills: remove its line from $KNOWN: $o"
    fi
done <"$WORK/jobs"
echo "$known variants with d <= 128 spill as listed in $KNOWN"
if [ -n "$new_spills" ]; then
    echo "new or grown spills (lines for $KNOWN, if accepted):"
    printf '%b' "$new_spills"
fi
[ "$fail" = 0 ] && echo "cl_gpu_check.sh: PASS" || echo "cl_gpu_check.sh: FAIL"
exit "$fail"
