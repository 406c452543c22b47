/*
 * cli_session.h - one forward-pass setup for the `flashattn run` command: a context, a plan, the
 * device buffers for Q, K, V, O and LSE, and the transfers between them and host tensors; and,
 * for the backward pass, a backward plan and the dO, dQ, dK and dV buffers beside them.
 * `run` opens one session on the chosen backend and, with --check, a second on the CPU golden.
 * Every failure prints "flashattn: FA_STATUS_X: message" and returns CLI_EXIT_FAIL.
 */
#ifndef FLASHATTN_TOOLS_CLI_SESSION_H
#define FLASHATTN_TOOLS_CLI_SESSION_H

#include "cli_block_mask.h"
#include "cli_modifiers.h"
#include "cli_tensor.h"
#include "flashattn.h"

typedef struct cli_session {
    fa_context *ctx;
    fa_plan *plan;
    fa_problem problem; /* as planned */
    fa_buffer *q, *k, *v, *o, *lse;
    fa_plan *bwd_plan;                 /* the backward's plan, when there is one */
    fa_buffer *d_o, *dq, *dk, *dv;     /* the backward's buffers */
    fa_buffer *slopes, *bias, *sinks;  /* the score modifiers' tensors, when the problem has them */
    fa_buffer *d_sinks;                /* the sinks' gradient (the backward, with sinks) */
    fa_buffer *seqlens_k, *block_table; /* int32 sequence buffers, when the problem reads them */
    cli_bm_buffers sparse;              /* the block-sparse lists, when the problem has them */
} cli_session;

/* The logical shapes of Q (and O) and of K (and V) for a problem. */
void cli_problem_shapes(const fa_problem *p, int64_t q_shape[4], int64_t kv_shape[4]);

/* Creates the context and the plan (validating the problem). The session must be zeroed. */
int cli_session_open(cli_session *s, fa_backend backend, int device, const fa_problem *p);
/* Creates the device buffers; the LSE buffer only when want_lse is set. */
int cli_session_buffers(cli_session *s, int want_lse);
/* Copies host tensors into the Q, K and V buffers in the problem's layout and dtype (K and V
 * of a paged problem: its pools [num_pages, heads_kv, page_size, head_dim], element
 * (page, h, slot, x) in p->k's layout). */
int cli_session_upload(cli_session *s, const cli_tensor *q, const cli_tensor *k,
                       const cli_tensor *v);
/* The buffers of the problem's score modifiers (none when it has none), filled from m. */
int cli_session_mod_buffers(cli_session *s, const cli_mod_data *m);
/* The int32 buffers of a seqlens_k or paged problem (none for others), filled from lens
 * [batch] and table [batch, pages_per_seq]. */
int cli_session_seq_buffers(cli_session *s, const int32_t *lens, const int32_t *table);
/* The d_sinks buffer of the backward, when the problem has sinks (else nothing). */
int cli_session_dsinks_buffer(cli_session *s);
/* The fa_modifier_buffers of the session's buffers; d_sinks only for the backward. */
fa_modifier_buffers cli_session_mods(const cli_session *s, int backward);
/* The block-sparse lists of a block-sparse problem (none for others), from d. */
int cli_session_bm_buffers(cli_session *s, const cli_bm_data *d);
/* One forward run (fa_run; the sequence buffers and block lists, when the problem has them). */
int cli_session_forward(cli_session *s);
/* Reads O back into a tensor of Q's shape and, when both exist, LSE into lse. */
int cli_session_download(cli_session *s, cli_tensor *o, float *lse);
/*
 * The backward: its plan for the problem p the session was opened with (the caller's, so that
 * an INVALID_TILE names the overrides as given), then its dO, dQ, dK and dV buffers. The forward
 * buffers must have been made with want_lse (the backward reads LSE).
 */
int cli_session_plan_backward(cli_session *s, const fa_problem *p);
int cli_session_backward_buffers(cli_session *s);
/* Copies a host dO (Q's shape) into its buffer in the problem's layout and dtype. */
int cli_session_upload_do(cli_session *s, const cli_tensor *d_o);
/* Reads the sinks' gradient (f32 [heads_q]) back into out. */
int cli_session_download_dsinks(cli_session *s, float *out);
/* One backward run (fa_run: the modifiers and block lists), from the O and LSE that the last
 * forward wrote. */
int cli_session_backward(cli_session *s);
/* Reads dQ (Q's shape), dK and dV (K's shape) back into host tensors. */
int cli_session_download_grads(cli_session *s, cli_tensor *dq, cli_tensor *dk, cli_tensor *dv);
/* Releases everything; safe on a zeroed or partly opened session. */
void cli_session_close(cli_session *s);

#endif /* FLASHATTN_TOOLS_CLI_SESSION_H */
