/*
 * cli_session.c - context, plans, buffers and transfers for one forward pass and its backward
 * (see cli_session.h). Transfers go through a host image in the device layout, so BSHD and BHSD
 * runs read and write the same logical host tensors.
 */
#include "cli_session.h"

#include "cli_common.h"
#include "cli_memory.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void cli_problem_shapes(const fa_problem *p, int64_t q_shape[4], int64_t kv_shape[4])
{
    q_shape[0] = p->batch;
    q_shape[1] = p->heads_q;
    q_shape[2] = p->seqlen_q;
    q_shape[3] = p->head_dim;
    kv_shape[0] = p->batch;
    kv_shape[1] = p->heads_kv;
    kv_shape[2] = p->seqlen_k;
    kv_shape[3] = p->head_dim;
}

int cli_session_open(cli_session *s, fa_backend backend, int device, const fa_problem *p)
{
    fa_status st;
    if (cli_context_open(backend, device, &s->ctx) != 0)
        return CLI_EXIT_FAIL;
    st = fa_plan_create(s->ctx, p, &s->plan);
    if (st != FA_STATUS_OK)
        return cli_plan_error(st, s->ctx, p);
    s->problem = *fa_plan_problem(s->plan);
    return 0;
}

/* The device buffer of one tensor of the session's problem, of the size fa_run checks. */
static int make_buffer(cli_session *s, fa_tensor_id tensor, fa_buffer **out)
{
    uint64_t bytes = cli_tensor_bytes(&s->problem, tensor);
    fa_status st;
    if (bytes == 0 || bytes > SIZE_MAX)
        return cli_error("tensor layout is too large for this machine");
    st = fa_buffer_create(s->ctx, (size_t)bytes, out);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

int cli_session_buffers(cli_session *s, int want_lse)
{
    if (make_buffer(s, FA_TENSOR_Q, &s->q) || make_buffer(s, FA_TENSOR_K, &s->k) ||
        make_buffer(s, FA_TENSOR_V, &s->v) || make_buffer(s, FA_TENSOR_O, &s->o))
        return CLI_EXIT_FAIL;
    return want_lse ? make_buffer(s, FA_TENSOR_LSE, &s->lse) : 0;
}

static int upload_one(cli_session *s, const cli_tensor *t, const fa_tensor_layout *l,
                      fa_buffer *buf)
{
    size_t bytes = fa_buffer_size(buf);
    void *image = calloc(1, bytes);
    fa_status st;
    if (!image)
        return cli_error("out of host memory for a %zu-byte transfer", bytes);
    cli_pack(t, l, s->problem.dtype, image);
    st = fa_buffer_write(buf, 0, image, bytes);
    free(image);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

int cli_session_upload(cli_session *s, const cli_tensor *q, const cli_tensor *k,
                       const cli_tensor *v)
{
    if (upload_one(s, q, &s->problem.q, s->q) || upload_one(s, k, &s->problem.k, s->k) ||
        upload_one(s, v, &s->problem.v, s->v))
        return CLI_EXIT_FAIL;
    return 0;
}

/* A device buffer holding `bytes` bytes of host memory. */
static int mod_buffer(cli_session *s, const void *host, size_t bytes, fa_buffer **out)
{
    fa_status st = fa_buffer_create(s->ctx, bytes ? bytes : 1, out);
    if (st == FA_STATUS_OK && bytes)
        st = fa_buffer_write(*out, 0, host, bytes);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

/* The bias in the problem's bias dtype. */
static int bias_buffer(cli_session *s, const cli_mod_data *m)
{
    size_t esz = fa_dtype_size(s->problem.bias_dtype), i;
    unsigned char *image = malloc(m->bias_count ? m->bias_count * esz : 1);
    int rc;
    if (!image)
        return cli_error("out of host memory for the bias");
    for (i = 0; i < m->bias_count; i++) {
        if (s->problem.bias_dtype == FA_DTYPE_F16) {
            uint16_t h = fa_f32_to_f16(m->bias[i]);
            memcpy(image + i * 2, &h, 2);
        } else {
            memcpy(image + i * 4, &m->bias[i], 4);
        }
    }
    rc = mod_buffer(s, image, m->bias_count * esz, &s->bias);
    free(image);
    return rc;
}

int cli_session_mod_buffers(cli_session *s, const cli_mod_data *m)
{
    const fa_problem *p = &s->problem;
    size_t heads = (size_t)p->heads_q * sizeof(float);
    size_t slopes = p->alibi == 2 ? (size_t)p->batch * heads : heads; /* [B, Hq] or [Hq] */
    if ((p->alibi && mod_buffer(s, m->slopes, slopes, &s->slopes)) ||
        (p->sinks && mod_buffer(s, m->sinks, heads, &s->sinks)) ||
        (p->bias && bias_buffer(s, m)))
        return CLI_EXIT_FAIL;
    return 0;
}

int cli_session_seq_buffers(cli_session *s, const int32_t *lens, const int32_t *table)
{
    const fa_problem *p = &s->problem;
    size_t n = (size_t)(p->batch * p->pages_per_seq) * sizeof(int32_t); /* fits: the table */
    if ((p->seqlens_k && mod_buffer(s, lens, (size_t)p->batch * sizeof(int32_t), &s->seqlens_k)) ||
        (p->page_size > 0 && mod_buffer(s, table, n, &s->block_table)))
        return CLI_EXIT_FAIL;
    return 0;
}

int cli_session_dsinks_buffer(cli_session *s)
{
    if (!s->problem.sinks || s->d_sinks)
        return 0;
    return make_buffer(s, FA_TENSOR_D_SINKS, &s->d_sinks);
}

fa_modifier_buffers cli_session_mods(const cli_session *s, int backward)
{
    fa_modifier_buffers m;
    m.alibi_slopes = s->slopes;
    m.bias = s->bias;
    m.sinks = s->sinks;
    m.d_sinks = backward ? s->d_sinks : NULL;
    return m;
}

int cli_session_bm_buffers(cli_session *s, const cli_bm_data *d)
{
    return cli_bm_buffers_create(s->ctx, &s->problem, d, &s->sparse);
}

/* The modifiers' buffers into t (d_sinks only for the backward). */
static void add_mods(const cli_session *s, int backward, fa_tensors *t)
{
    fa_modifier_buffers m = cli_session_mods(s, backward);
    t->alibi_slopes = m.alibi_slopes;
    t->bias = m.bias;
    t->sinks = m.sinks;
    t->d_sinks = m.d_sinks;
}

int cli_session_forward(cli_session *s)
{
    fa_tensors t = {.q = s->q, .k = s->k, .v = s->v, .o = s->o, .lse = s->lse,
                    .seqlens_k = s->seqlens_k, .block_table = s->block_table};
    add_mods(s, 0, &t);
    cli_bm_tensors(&s->sparse, &s->problem, 0, &t);
    fa_status st = fa_run(s->ctx, s->plan, &t);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

/* Reads buf (holding a tensor in layout l) back into the host tensor t. */
static int download_one(cli_session *s, const fa_buffer *buf, const fa_tensor_layout *l,
                        cli_tensor *t)
{
    size_t bytes = fa_buffer_size(buf);
    void *image = malloc(bytes);
    fa_status st;
    if (!image)
        return cli_error("out of host memory for a %zu-byte transfer", bytes);
    st = fa_buffer_read(buf, 0, image, bytes);
    if (st == FA_STATUS_OK)
        cli_unpack(image, l, s->problem.dtype, t);
    free(image);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

int cli_session_download(cli_session *s, cli_tensor *o, float *lse)
{
    fa_status st = FA_STATUS_OK;
    if (download_one(s, s->o, &s->problem.o, o) != 0)
        return CLI_EXIT_FAIL;
    if (lse && s->lse) {
        size_t n = (size_t)(s->problem.batch * s->problem.heads_q * s->problem.seqlen_q);
        if (n > 0)
            st = fa_buffer_read(s->lse, 0, lse, n * sizeof(float));
    }
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

int cli_session_plan_backward(cli_session *s, const fa_problem *p)
{
    fa_status st = fa_plan_create_backward(s->ctx, p, &s->bwd_plan);
    return st == FA_STATUS_OK ? 0 : cli_plan_error(st, s->ctx, p);
}

int cli_session_backward_buffers(cli_session *s)
{
    if (make_buffer(s, FA_TENSOR_DO, &s->d_o) || make_buffer(s, FA_TENSOR_DQ, &s->dq) ||
        make_buffer(s, FA_TENSOR_DK, &s->dk) || make_buffer(s, FA_TENSOR_DV, &s->dv) ||
        cli_session_dsinks_buffer(s))
        return CLI_EXIT_FAIL;
    return 0;
}

int cli_session_upload_do(cli_session *s, const cli_tensor *d_o)
{
    return upload_one(s, d_o, &s->problem.d_o, s->d_o);
}

int cli_session_backward(cli_session *s)
{
    fa_tensors t = {.q = s->q, .k = s->k, .v = s->v, .o = s->o, .lse = s->lse, .d_o = s->d_o,
                    .dq = s->dq, .dk = s->dk, .dv = s->dv};
    add_mods(s, 1, &t);
    cli_bm_tensors(&s->sparse, &s->problem, 1, &t);
    fa_status st = fa_run(s->ctx, s->bwd_plan, &t);
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

int cli_session_download_dsinks(cli_session *s, float *out)
{
    fa_status st = fa_buffer_read(s->d_sinks, 0, out, (size_t)s->problem.heads_q * sizeof(float));
    return st == FA_STATUS_OK ? 0 : cli_lib_error(st, s->ctx, NULL);
}

int cli_session_download_grads(cli_session *s, cli_tensor *dq, cli_tensor *dk, cli_tensor *dv)
{
    const fa_problem *p = &s->problem;
    if (download_one(s, s->dq, &p->dq, dq) || download_one(s, s->dk, &p->dk, dk) ||
        download_one(s, s->dv, &p->dv, dv))
        return CLI_EXIT_FAIL;
    return 0;
}

void cli_session_close(cli_session *s)
{
    cli_bm_buffers_free(&s->sparse);
    fa_buffer_destroy(s->block_table);
    fa_buffer_destroy(s->seqlens_k);
    fa_buffer_destroy(s->d_sinks);
    fa_buffer_destroy(s->sinks);
    fa_buffer_destroy(s->bias);
    fa_buffer_destroy(s->slopes);
    fa_buffer_destroy(s->dv);
    fa_buffer_destroy(s->dk);
    fa_buffer_destroy(s->dq);
    fa_buffer_destroy(s->d_o);
    fa_plan_destroy(s->bwd_plan);
    fa_buffer_destroy(s->lse);
    fa_buffer_destroy(s->o);
    fa_buffer_destroy(s->v);
    fa_buffer_destroy(s->k);
    fa_buffer_destroy(s->q);
    fa_plan_destroy(s->plan);
    fa_context_destroy(s->ctx);
    memset(s, 0, sizeof *s);
}
