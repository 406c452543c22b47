/*
 * cli_run.c - the `flashattn run` subcommand: one attention forward pass on a chosen backend,
 * timed, with inputs either random (seeded, so runs are repeatable) or read from .npy files
 * in the order --layout names, optional .npy outputs in that order, and --check against the
 * CPU golden backend on the same inputs (a cpu run, the golden itself, against the naive
 * attention of tools/baselines: cli_run_check.c). With --backward (or --do) the backward pass
 * follows the forward: cli_run_bwd.c. This file is the top of the run files (see cli_run.h).
 *
 * Order of work: resolve the shape (from the options or the files), let the library validate
 * and plan it, check what the run will allocate against the host's and the device's memory, and
 * only then allocate and fill the big host tensors, so that a bad problem is reported by the
 * library and a too large one by its size, in milliseconds, rather than by a failed allocation
 * or an OOM kill.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* mkdir */
#endif

#include "cli_commands.h"
#include "cli_common.h"
#include "cli_memory.h"
#include "cli_modifiers.h"
#include "cli_run.h"
#include "cli_run_bwd.h"
#include "cli_run_check.h"
#include "cli_session.h"
#include "cli_tensor.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#include <direct.h>
#define cli_mkdir(path) _mkdir(path)
#else
#include <sys/stat.h>
#define cli_mkdir(path) mkdir(path, 0777)
#endif

/* Longest path built for --save-inputs. */
#define CLI_PATH_MAX 4096
/* Most timed repetitions. */
#define CLI_MAX_REPEAT 100000
#define KEY RUN_KEY

#define RUN_NOPTS (CLI_PROBLEM_NOPTS + CLI_SEQ_NOPTS + 18 + CLI_MOD_NOPTS + CLI_BM_NOPTS)

/* The option table; entries point into *a. Returns the number of entries. */
static size_t run_table(run_args *a, cli_opt *opts)
{
    const cli_opt where[2] = {
        {"backend", CLI_BACKEND, &a->backend, 0, 0, "B", "auto, cpu, opencl or cuda (default auto)",
         0},
        {"device", CLI_INT, &a->device, 0, INT32_MAX, "N", "device index (default 0)", 0},
    };
    const cli_opt rest[RUN_NOPTS - CLI_PROBLEM_NOPTS - CLI_SEQ_NOPTS - CLI_MOD_NOPTS -
                       CLI_BM_NOPTS - 2] = {
        {"seed", CLI_U64, &a->seed, 0, 0, "S", "seed of the random inputs (default 1)", 0},
        {"q", CLI_STRING, &a->q_path, 0, 0, "FILE",
         "Q from .npy in --layout ([batch, heads, seq, dim]), '<f4' or '<f2'", 0},
        {"k", CLI_STRING, &a->k_path, 0, 0, "FILE",
         "K from .npy in --layout ([batch, heads_kv, seq_k, dim])", 0},
        {"v", CLI_STRING, &a->v_path, 0, 0, "FILE", "V from .npy, the shape of K", 0},
        {"do", CLI_STRING, &a->do_path, 0, 0, "FILE",
         "dO from .npy, the shape of Q (with --q/--k/--v); implies --backward", 0},
        {"save-inputs", CLI_STRING, &a->save_dir, 0, 0, "DIR",
         "write the inputs as DIR/q.npy, k.npy, v.npy (and do.npy), in --layout", 0},
        {"out", CLI_STRING, &a->out_path, 0, 0, "FILE",
         "write O as .npy in --layout (float32 for bf16)", 0},
        {"lse", CLI_STRING, &a->lse_path, 0, 0, "FILE",
         "write LSE as float32 .npy [batch, heads, seq] (either layout, as flash-attn)", 0},
        {"dq", CLI_STRING, &a->dq_path, 0, 0, "FILE", "write dQ as .npy, the shape of Q", 0},
        {"dk", CLI_STRING, &a->dk_path, 0, 0, "FILE", "write dK as .npy, the shape of K", 0},
        {"dv", CLI_STRING, &a->dv_path, 0, 0, "FILE", "write dV as .npy, the shape of V", 0},
        {"dsinks", CLI_STRING, &a->dsinks_path, 0, 0, "FILE",
         "with --sinks: write the sinks' gradient as float32 .npy [heads]", 0},
        {"repeat", CLI_INT, &a->repeat, 1, CLI_MAX_REPEAT, "N",
         "time the median of N runs after one warm-up (default 1)", 0},
        {"backward", CLI_FLAG, &a->backward, 0, 0, NULL,
         "then the backward pass: dO -> dQ, dK, dV (random dO)", 0},
        {"check", CLI_FLAG, &a->check, 0, 0, NULL,
         "compare O (and dQ, dK, dV, dsinks) with the CPU golden (on cpu: the naive one)", 0},
        {"verbose", CLI_FLAG, &a->verbose, 0, 0, NULL,
         "the auto line in full: each backend passed over and the whole reason", 0},
    };
    memcpy(opts, where, sizeof where);
    cli_problem_opts(&a->pa, opts + 2);
    cli_seq_opts(&a->seq, opts + 2 + CLI_PROBLEM_NOPTS);
    memcpy(opts + 2 + CLI_PROBLEM_NOPTS + CLI_SEQ_NOPTS, rest, sizeof rest);
    cli_mod_opts(&a->mods, opts + RUN_NOPTS - CLI_MOD_NOPTS - CLI_BM_NOPTS);
    cli_bm_opts(&a->bm, opts + RUN_NOPTS - CLI_BM_NOPTS);
    return RUN_NOPTS;
}

/* Options that make no sense together. */
static int run_validate(const cli_cmd *cmd, run_args *a, const cli_opt *opts, size_t n)
{
    static const char *const shape_opts[] = {"batch", "heads", "heads-kv", "seq",
                                             "seq-k", "dim",   "seed"};
    int files = (a->q_path != NULL) + (a->k_path != NULL) + (a->v_path != NULL);
    size_t i;
    if (files != 0 && files != 3)
        return cli_usage_error(cmd, "--q, --k and --v go together");
    for (i = 0; files && i < sizeof shape_opts / sizeof shape_opts[0]; i++)
        if (cli_find(opts, n, shape_opts[i])->seen)
            return cli_usage_error(
                cmd, "--%s cannot be combined with --q (the files give the shape)", shape_opts[i]);
    if (cli_mod_validate(cmd, &a->mods, opts, n) != 0 ||
        cli_seq_validate(cmd, &a->seq, opts, n) != 0 || cli_bm_validate(cmd, &a->bm) != 0)
        return CLI_EXIT_USAGE;
    return run_bwd_validate(cmd, a);
}

/* What keeps K (logical shape k) from going with Q: "batch" or "head_dim" (not Q's), "heads"
 * (not dividing Q's: GQA), or NULL; *dim is that dimension. */
static const char *kq_problem(const int64_t q[4], const int64_t k[4], int *dim)
{
    *dim = k[0] != q[0] ? 0 : k[3] != q[3] ? 3 : 1;
    if (k[0] != q[0])
        return "batch";
    if (k[3] != q[3])
        return "head_dim";
    return k[1] == 0 || q[1] % k[1] != 0 ? "heads" : NULL;
}

/*
 * K and V must agree with Q (batch, head_dim, heads dividing) and with each other, as read in
 * the run's layout. A disagreement is the command line's (the files in another layout, most
 * often), so it is a usage error naming each file's shape and how it was read, and saying so
 * when the other layout would fit.
 */
static int check_file_shapes(const cli_cmd *cmd, const run_args *a, const run_data *d)
{
    fa_layout l = a->pa.layout;
    int64_t oq[4], ok[4];
    char sq[96], sk[96], sv[96], hint[96] = "";
    int dim, unused;
    const char *what = kq_problem(d->q.shape, d->k.shape, &dim);
    run_file_shape_text(l, &d->q, sq, sizeof sq);
    run_file_shape_text(l, &d->k, sk, sizeof sk);
    run_file_shape_text(l, &d->v, sv, sizeof sv);
    if (what) {
        /* Read in the other layout, the logical shapes swap heads and seq. */
        cli_layout_file_shape(FA_LAYOUT_BSHD, d->q.shape, oq);
        cli_layout_file_shape(FA_LAYOUT_BSHD, d->k.shape, ok);
        if (!kq_problem(oq, ok, &unused))
            snprintf(hint, sizeof hint, "; read as --layout %s they agree",
                     cli_layout_name(l == FA_LAYOUT_BSHD ? FA_LAYOUT_BHSD : FA_LAYOUT_BSHD));
        return cli_usage_error(cmd, "%s: shape %s read as --layout %s %s: its %s %" PRId64
                               " %s %s's %" PRId64 " (shape %s)%s", a->k_path, sk,
                               cli_layout_name(l), cli_layout_dims(l), what, d->k.shape[dim],
                               dim == 1 ? "do not divide" : "does not match", a->q_path,
                               d->q.shape[dim], sq, hint);
    }
    if (memcmp(d->k.shape, d->v.shape, sizeof d->k.shape) != 0)
        return cli_usage_error(cmd, "%s: shape %s does not match %s's %s (V has the shape of K; "
                               "--layout %s %s)", a->v_path, sv, a->k_path, sk,
                               cli_layout_name(l), cli_layout_dims(l));
    return 0;
}

/* Loads --q/--k/--v in the run's layout; the problem's shape (and dtype, unless --dtype was
 * given) come from them. */
static int load_inputs(const cli_cmd *cmd, run_args *a, int dtype_given, run_data *d)
{
    fa_layout l = a->pa.layout;
    npy_dtype tq, tk, tv; /* the files' element types */
    int rc;
    if (cli_tensor_load(a->q_path, l, &d->q, &tq) || cli_tensor_load(a->k_path, l, &d->k, &tk) ||
        cli_tensor_load(a->v_path, l, &d->v, &tv))
        return CLI_EXIT_FAIL;
    if (tk != tq || tv != tq)
        return cli_error("%s: dtype '%s' does not match %s's '%s'",
                         tk != tq ? a->k_path : a->v_path, npy_dtype_descr(tk != tq ? tk : tv),
                         a->q_path, npy_dtype_descr(tq));
    rc = check_file_shapes(cmd, a, d);
    if (rc == 0 && a->do_path)
        rc = run_bwd_load(cmd, a, tq, d);
    if (rc != 0)
        return rc;
    a->pa.batch = d->q.shape[0];
    a->pa.heads = d->q.shape[1];
    a->pa.seq = d->q.shape[2];
    a->pa.dim = d->q.shape[3];
    a->pa.heads_kv = d->k.shape[1];
    a->pa.seq_k = d->k.shape[2];
    if (!dtype_given)
        a->pa.dtype = tq == NPY_F16 ? FA_DTYPE_F16 : FA_DTYPE_F32;
    return 0;
}

/* Random Q, K, V (and dO) from one splitmix64 stream, in that order, in logical BHSD order:
 * dO comes last so that Q, K and V are those of a forward-only run with the same seed. */
static int random_inputs(const run_args *a, const fa_problem *p, run_data *d)
{
    int64_t qs[4], kvs[4];
    uint64_t state = a->seed;
    cli_problem_shapes(p, qs, kvs);
    if (cli_tensor_alloc(&d->q, "q", qs[0], qs[1], qs[2], qs[3]) ||
        cli_tensor_alloc(&d->k, "k", kvs[0], kvs[1], kvs[2], kvs[3]) ||
        cli_tensor_alloc(&d->v, "v", kvs[0], kvs[1], kvs[2], kvs[3]))
        return CLI_EXIT_FAIL;
    cli_tensor_fill_random(&d->q, &state);
    cli_tensor_fill_random(&d->k, &state);
    cli_tensor_fill_random(&d->v, &state);
    if (!a->backward)
        return 0;
    if (cli_tensor_alloc(&d->d_o, "do", qs[0], qs[1], qs[2], qs[3]) != 0)
        return CLI_EXIT_FAIL;
    cli_tensor_fill_random(&d->d_o, &state);
    return 0;
}

static int join_path(char *buf, const char *dir, const char *name)
{
    int n = snprintf(buf, CLI_PATH_MAX, "%s/%s", dir, name);
    if (n < 0 || n >= CLI_PATH_MAX)
        return cli_error("%s: path too long", dir);
    return 0;
}

/* --save-inputs: the rounded inputs in the run's layout, so that a later --q/--k/--v (--do)
 * run with the same --layout sees the same bytes. */
static int save_inputs(const char *dir, fa_layout l, const run_data *d, fa_dtype dtype)
{
    char path[CLI_PATH_MAX];
    cli_mkdir(dir); /* an existing folder is fine; other problems surface when writing */
    if (join_path(path, dir, "q.npy") || cli_tensor_save(path, l, &d->q, dtype) ||
        join_path(path, dir, "k.npy") || cli_tensor_save(path, l, &d->k, dtype) ||
        join_path(path, dir, "v.npy") || cli_tensor_save(path, l, &d->v, dtype))
        return CLI_EXIT_FAIL;
    if (d->d_o.data &&
        (join_path(path, dir, "do.npy") || cli_tensor_save(path, l, &d->d_o, dtype)))
        return CLI_EXIT_FAIL;
    return 0;
}

static void print_setup(const run_args *a, const run_data *d, const cli_session *s)
{
    char line[512], sram[64];
    cli_describe_context(s->ctx, a->backend == FA_BACKEND_AUTO, line, sizeof line);
    printf(KEY "%s\n", "backend", line);
    const char *note = fa_context_backend_note(s->ctx); /* "auto: " and why, when auto picked */
    if (strncmp(note, "auto: ", 6) == 0) {
        cli_auto_note(note + 6, a->verbose, line, sizeof line);
        printf(KEY "%s\n", "auto", line);
    }
    cli_describe_problem(&s->problem, a->pa.layout, line, sizeof line);
    printf(KEY "%s\n", "problem", line);
    cli_mod_describe(&s->problem, line, sizeof line);
    printf(KEY "%s\n", "modifiers", line);
    cli_seq_describe(&s->problem, &a->seq, fa_plan_kv_splits(s->plan), line, sizeof line);
    printf(KEY "%s\n", "sequences", line);
    if (s->problem.block_sparse) {
        cli_bm_describe(&a->bm, &d->bm, line, sizeof line);
        printf(KEY "%s\n", "block mask", line);
    }
    if (a->q_path)
        printf(KEY "%s, %s, %s\n", "inputs", a->q_path, a->k_path, a->v_path);
    else
        printf(KEY "uniform [-1, 1), seed %" PRIu64 "\n", "inputs", a->seed);
    cli_format_bytes(fa_plan_sram_bytes(s->plan), sram, sizeof sram);
    printf(KEY "Br %" PRId32 ", Bc %" PRId32 ", work-group %" PRId32
               ", sram %s, work-groups %" PRIu64 "\n",
           "plan", fa_plan_block_r(s->plan), fa_plan_block_c(s->plan),
           fa_plan_work_group_size(s->plan), sram, fa_plan_work_groups(s->plan));
    if (s->bwd_plan)
        run_bwd_print_plan(s);
}

/* The forward's FLOPs over the keys the sequences have (--seqlens-k may give fewer). */
static double seq_flops(const fa_problem *p, const cli_seq_args *a)
{
    double all = (double)p->batch * (double)p->seqlen_k;
    return all > 0.0 ? run_forward_flops(p) * cli_seq_keys(p, a) / all : 0.0;
}

/* The context's peak device bytes over the whole run (forward and backward). */
static void print_peak(const cli_session *s)
{
    uint64_t peak = 0;
    char mem[64];
    fa_context_memory(s->ctx, NULL, &peak);
    cli_format_bytes(peak, mem, sizeof mem);
    printf(KEY "%s\n", "peak memory", mem);
    if (s->bwd_plan)
        run_bwd_print_memory(s, peak);
}

/* Host O (and LSE) of the problem's shape. */
static int alloc_outputs(const cli_session *s, int want_lse, run_data *d)
{
    const fa_problem *p = &s->problem;
    if (cli_tensor_alloc(&d->o, "o", p->batch, p->heads_q, p->seqlen_q, p->head_dim) != 0)
        return CLI_EXIT_FAIL;
    if (!want_lse)
        return 0;
    /* head_dim >= 1 (the plan exists), so the rows number at most o's elements. */
    d->lse_count = (size_t)(p->batch * p->heads_q * p->seqlen_q);
    d->lse = malloc(d->lse_count ? d->lse_count * sizeof(float) : 1);
    return d->lse ? 0 : cli_error("out of host memory for the LSE");
}

static int write_outputs(const run_args *a, const cli_session *s, const run_data *d)
{
    const fa_problem *p = &s->problem;
    const int64_t lse_shape[3] = {p->batch, p->heads_q, p->seqlen_q};
    char err[256];
    if (a->out_path) {
        if (cli_tensor_save(a->out_path, a->pa.layout, &d->o, p->dtype) != 0)
            return CLI_EXIT_FAIL;
        printf(KEY "%s (%s)\n", "wrote O", a->out_path, npy_dtype_descr(cli_npy_dtype(p->dtype)));
    }
    if (a->lse_path) {
        if (npy_write(a->lse_path, NPY_F32, 3, lse_shape, d->lse, err, sizeof err) != 0)
            return cli_error("%s: %s", a->lse_path, err);
        printf(KEY "%s (<f4)\n", "wrote LSE", a->lse_path);
    }
    return 0;
}

/* Elements of a [batch, heads, seq, head_dim] shape (saturating). */
static uint64_t shape_elems(const int64_t s[4])
{
    return cli_mul_sat(cli_mul_sat((uint64_t)s[0], (uint64_t)s[1]),
                       cli_mul_sat((uint64_t)s[2], (uint64_t)s[3]));
}

/*
 * Everything the run allocates from here on, checked before the first large allocation: the
 * host tensors (f32; Q, K and V only when random, files are held already), one transfer image
 * at a time, the device buffers and, with --check, the CPU reference session's buffers (host
 * memory) and the reference O; with the backward, its share of each (run_bwd_need).
 */
static int check_memory(const run_args *a, const run_data *d, const cli_session *s)
{
    static const fa_tensor_id io[4] = {FA_TENSOR_Q, FA_TENSOR_K, FA_TENSOR_V, FA_TENSOR_O};
    const fa_problem *p = &s->problem;
    int64_t qs[4], kvs[4];
    uint64_t nq, nkv, rows, host_floats, device = 0, staging = 0;
    cli_memory_need need;
    char why[512];
    int i;
    for (i = 0; i < 4; i++) { /* the buffers, each staged through a host image in turn */
        uint64_t bytes = cli_tensor_bytes(p, io[i]);
        device = cli_add_sat(device, bytes);
        staging = bytes > staging ? bytes : staging;
    }
    cli_problem_shapes(p, qs, kvs);
    nq = shape_elems(qs);
    nkv = shape_elems(kvs);
    rows = cli_mul_sat(cli_mul_sat((uint64_t)p->batch, (uint64_t)p->heads_q),
                       (uint64_t)p->seqlen_q);
    host_floats = a->q_path ? nq : cli_add_sat(cli_mul_sat(nq, 2), cli_mul_sat(nkv, 2));
    if (a->lse_path)
        host_floats = cli_add_sat(host_floats, rows);
    if (a->check)
        host_floats = cli_add_sat(host_floats, nq);
    if (a->lse_path || a->backward)
        device = cli_add_sat(device, cli_tensor_bytes(p, FA_TENSOR_LSE));
    if (a->backward)
        run_bwd_need(a, s, &host_floats, &device);
    device = cli_add_sat(device, cli_mod_bytes(p)); /* and as much host memory for them */
    host_floats = cli_add_sat(host_floats, cli_mod_bytes(p) / sizeof(float));
    device = cli_add_sat(device, cli_seq_device_bytes(p)); /* the pools are K's and V's images */
    need.host = cli_add_sat(cli_mul_sat(host_floats, sizeof(float)), staging);
    need.host = cli_add_sat(need.host, cli_seq_host_bytes(p));
    device = cli_add_sat(device, cli_bm_bytes(&d->bm)); /* the lists, on both sides */
    if (a->check)
        need.host = cli_add_sat(need.host, device);
    need.device = device;
    if (cli_memory_fits(s->ctx, need, why, sizeof why) != 0)
        return cli_error("the run %s", why);
    return 0;
}

/* Every output path can be written, checked before any work. */
static int check_outputs(const run_args *a)
{
    const char *const paths[6] = {a->out_path, a->lse_path, a->dq_path,
                                  a->dk_path,  a->dv_path,  a->dsinks_path};
    static const char *const what[6] = {"the O file",  "the LSE file", "the dQ file",
                                        "the dK file", "the dV file",  "the dsinks file"};
    int i;
    for (i = 0; i < 6; i++)
        if (paths[i] && cli_check_writable(paths[i], what[i]) != 0)
            return CLI_EXIT_FAIL;
    return 0;
}

/* The inputs, from the files or the seed, rounded to the dtype (and saved with --save-inputs). */
static int prepare_inputs(const run_args *a, const cli_session *s, run_data *d)
{
    fa_dtype dtype = s->problem.dtype;
    if (!a->q_path && random_inputs(a, &s->problem, d) != 0)
        return CLI_EXIT_FAIL;
    if (cli_mod_fill(&a->mods, &d->mod_files, &s->problem, a->seed, &d->mods) != 0)
        return CLI_EXIT_FAIL;
    cli_tensor_round(&d->q, dtype);
    cli_tensor_round(&d->k, dtype);
    cli_tensor_round(&d->v, dtype);
    cli_tensor_round(&d->d_o, dtype);
    if (cli_seq_fill(&a->seq, &s->problem, a->seed, &d->k, &d->v, &d->seq) != 0)
        return CLI_EXIT_FAIL;
    if (a->save_dir && save_inputs(a->save_dir, a->pa.layout, d, dtype) != 0)
        return CLI_EXIT_FAIL;
    return 0;
}

/* Everything after option parsing; d and s are released by the caller. */
static int run_body(const cli_cmd *cmd, run_args *a, int dtype_given, run_data *d,
                    cli_session *s)
{
    int want_lse = a->lse_path != NULL;
    double ms = 0.0;
    fa_problem p;
    int rc;
    if (check_outputs(a) != 0)
        return CLI_EXIT_FAIL;
    rc = a->q_path ? load_inputs(cmd, a, dtype_given, d) : 0;
    if (rc != 0)
        return rc;
    if (cli_mod_load(&a->mods, &d->mod_files) != 0 || cli_problem_build(&a->pa, &p) != 0)
        return CLI_EXIT_FAIL;
    rc = cli_mod_apply(cmd, &a->mods, &d->mod_files, &p);
    if (rc == 0)
        rc = cli_seq_apply(cmd, &a->seq, &p);
    if (rc == 0)
        rc = cli_bm_apply(&a->bm, &p, &d->bm);
    if (rc != 0)
        return rc;
    if (cli_session_open(s, a->backend, (int)a->device, &p) != 0 ||
        (a->backward && cli_session_plan_backward(s, &p) != 0) || check_memory(a, d, s) != 0 ||
        prepare_inputs(a, s, d) != 0)
        return CLI_EXIT_FAIL;
    /* The backward reads the LSE the forward writes, so it needs the buffer either way. */
    if (cli_session_buffers(s, want_lse || a->backward) || run_upload_inputs(s, d) ||
        cli_session_mod_buffers(s, &d->mods) || cli_session_bm_buffers(s, &d->bm) ||
        alloc_outputs(s, want_lse, d) ||
        (a->backward && run_bwd_prepare(s, d) != 0))
        return CLI_EXIT_FAIL;
    print_setup(a, d, s);
    fflush(stdout);
    if (run_timed(cli_session_forward, s, a->repeat, &ms) ||
        cli_session_download(s, &d->o, d->lse))
        return CLI_EXIT_FAIL;
    run_print_time("", ms, a->repeat, seq_flops(&s->problem, &a->seq), "");
    if (a->backward && run_bwd_time(a, s, d) != 0)
        return CLI_EXIT_FAIL;
    print_peak(s);
    if (write_outputs(a, s, d) != 0 || (a->backward && run_bwd_write(a, s, d) != 0))
        return CLI_EXIT_FAIL;
    return a->check ? run_check(a, s, d) : 0;
}

int cli_cmd_run(int argc, char **argv)
{
    static const cli_cmd cmd = {
        "run", "[options]",
        "Runs one attention forward pass O = softmax(Q K^T * scale) V and reports its time,\n"
        "throughput and peak device memory. Inputs are random (seeded) or --q/--k/--v .npy\n"
        "files (float32 or float16, C order) in the order --layout names: [batch, heads, seq,\n"
        "head_dim] for bhsd, [batch, seq, heads, head_dim] for bshd (PyTorch's); O, dQ, dK,\n"
        "dV and --save-inputs are written in it too, LSE as [batch, heads, seq]. --backward (or\n"
        "--do FILE with the files) then runs the backward pass dO -> dQ, dK, dV on the same\n"
        "backend and reports it the same way (GFLOP/s counting 2.5x the forward's FLOPs); dO is\n"
        "random like the inputs, or --do. --check compares O (and dQ, dK, dV) with the CPU\n"
        "golden backend (a cpu run, which is the golden, with the naive attention bench times,\n"
        "where that serves: no modifiers, dropout, seqlens or pages, finite inputs; else with\n"
        "the golden again, and the reference line says so) and fails when max|x - ref| > atol\n"
        "+ rtol * max|ref| (max|ref| of each tensor on its own) or when they disagree on NaN or\n"
        "infinity (NaN where the reference has NaN agrees).\n"
        "Score modifiers and dropout (fa_forward_ex, fa_backward_ex; the golden runs them too):\n"
        "--softcap, --alibi or --alibi-slopes, --bias, --window, --sinks (--dsinks writes their\n"
        "gradient), --dropout with --dropout-seed and --dropout-offset. --bias random ([1, 1,\n"
        "seq, seq_k]) and --sinks random draw uniform [-1, 1) values from --seed (streams of\n"
        "their own, so Q, K and V stay those of a plain run).\n"
        "Decoding (fa_forward_seq): --seqlens-k gives each sequence's keys (a KV cache's\n"
        "lengths); --paged PAGE_SIZE places K and V in a shuffled pool of pages addressed by a\n"
        "block table (the same keys as a contiguous run with the same seed; seqlens_k is passed\n"
        "either way); --kv-splits N splits the keys in N chunks (1: never). The golden runs the\n"
        "same problem on the same pool and table, unsplit."};
    run_args a;
    run_data d;
    cli_session s;
    cli_opt opts[RUN_NOPTS];
    size_t n;
    int r;

    memset(&a, 0, sizeof a);
    memset(&d, 0, sizeof d);
    memset(&s, 0, sizeof s);
    cli_problem_defaults(&a.pa);
    cli_mod_defaults(&a.mods);
    cli_seq_defaults(&a.seq);
    a.backend = FA_BACKEND_AUTO;
    a.repeat = 1;
    a.seed = 1;
    n = run_table(&a, opts);
    r = cli_parse(&cmd, argc, argv, opts, n);
    if (r == CLI_PARSE_HELP) {
        cli_print_help(&cmd, opts, n);
        return CLI_EXIT_OK;
    }
    if (r != CLI_PARSE_OK || run_validate(&cmd, &a, opts, n) != 0) {
        cli_seq_args_free(&a.seq);
        return CLI_EXIT_USAGE;
    }
    a.backward = a.backward || a.do_path; /* --do implies the backward */
    cli_problem_resolve(&a.pa, opts, n);
    r = run_body(&cmd, &a, cli_find(opts, n, "dtype")->seen, &d, &s);
    cli_session_close(&s);
    cli_tensor_free(&d.q);
    cli_tensor_free(&d.k);
    cli_tensor_free(&d.v);
    cli_tensor_free(&d.o);
    cli_tensor_free(&d.ref);
    run_bwd_free(&d);
    cli_mod_data_free(&d.mods);
    cli_mod_files_free(&d.mod_files);
    cli_seq_data_free(&d.seq);
    cli_seq_args_free(&a.seq);
    cli_bm_data_free(&d.bm);
    free(d.lse);
    return r;
}
