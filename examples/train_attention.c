/*
 * train_attention.c - training with flashattn: a one-layer attention model learns to reverse a
 * sequence of tokens, with the attention's forward and backward passes run by the library and
 * everything else written out in plain C.
 *
 *   tokens  [B, T]            random tokens of a vocabulary of V; the target is the reverse
 *   x       [B, T, D]         = tok_emb[token] + pos_emb[t]
 *   q, k, v [B, T, D]         = x Wq, x Wk, x Wv          (one head, BSHD layout)
 *   o, lse  [B, T, D], [B, T] = attention(q, k, v)        fa_forward, no mask
 *   logits  [B, T, V]         = o Wo + bo
 *   loss                      = mean over the B*T positions of -log softmax(logits)[target]
 *
 * The gradients flow back the same way: through the softmax and Wo by hand, through the
 * attention with fa_backward (from the O and LSE that fa_forward left on the device), then
 * through the projections and the embeddings by hand. Plain SGD updates every weight.
 * Reversal cannot be done without attention: the output at position t must read the token at
 * position T-1-t, which the model finds only by learning positional queries and keys.
 *
 * Usage: train_attention [steps] (default 300). The backend is FA_BACKEND_AUTO, which honours
 * the FLASHATTN_BACKEND environment variable. Exits 1 when the loss on a held-out batch has not
 * fallen below a tenth of its value before training (150 steps take it to about a thousandth).
 */
#include <flashattn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 16, T = 8, D = 16, V = 10 }; /* sequences per step, tokens, model width, vocabulary */
enum { N = B * T };                      /* token positions per step */

#define DEFAULT_STEPS 300
#define LEARNING_RATE 1.0f
#define PASS_RATIO 0.1 /* the final held-out loss must be below this fraction of the first */

/* Every trainable weight in one array, so that SGD is one loop; OFF_* say where each lives. */
enum {
    OFF_TOK = 0,               /* tok_emb [V, D] */
    OFF_POS = OFF_TOK + V * D, /* pos_emb [T, D] */
    OFF_WQ = OFF_POS + T * D,  /* Wq [D, D] */
    OFF_WK = OFF_WQ + D * D,   /* Wk [D, D] */
    OFF_WV = OFF_WK + D * D,   /* Wv [D, D] */
    OFF_WO = OFF_WV + D * D,   /* Wo [D, V] */
    OFF_BO = OFF_WO + D * V,   /* bo [V] */
    N_PARAMS = OFF_BO + V
};

/* One step's activations and their gradients, [N, ...] row-major (N = B*T positions). */
typedef struct activations {
    int tokens[N], targets[N];
    float x[N * D], q[N * D], k[N * D], v[N * D], o[N * D];
    float probs[N * V]; /* softmax(logits) */
    float d_logits[N * V], d_o[N * D], dq[N * D], dk[N * D], dv[N * D], dx[N * D];
} activations;

/* A fixed-seed generator, so every run and platform trains the same way. */
static unsigned rnd_next(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8; /* the low bits of an LCG are poor; keep the top 24 */
}

static float rnd_uniform(unsigned *state) /* in [-0.5, 0.5) */
{
    return (float)(rnd_next(state) * (1.0 / 16777216.0)) - 0.5f;
}

/* ---- the attention: the only part that runs in the library ----------------------------- */

enum { BUF_Q, BUF_K, BUF_V, BUF_O, BUF_LSE, BUF_DO, BUF_DQ, BUF_DK, BUF_DV, BUF_COUNT };

typedef struct attention {
    fa_context *ctx;
    fa_plan *fwd, *bwd; /* planned once, reused by every step */
    fa_buffer *buf[BUF_COUNT];
} attention;

/* Every library call: on failure print the call and the context's message, which starts with
 * the status name (fa_problem_init keeps no message: then the status name alone). */
#define CHECK(ctx, call)                                                                       \
    do {                                                                                       \
        fa_status st_ = (call);                                                                \
        if (st_ != FA_STATUS_OK) {                                                             \
            const char *msg_ = fa_context_last_error(ctx);                                     \
            fprintf(stderr, "%s failed: %s\n", #call, *msg_ ? msg_ : fa_status_name(st_));     \
            return st_;                                                                        \
        }                                                                                      \
    } while (0)

/* Plans the forward and the backward of one problem, and makes their device buffers. */
static fa_status attention_create(attention *a)
{
    fa_problem p; /* [B, T, 1 head, D] contiguous: the same memory as our [N, D] matrices */
    CHECK(a->ctx, fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BSHD, B, 1, 1, T, T, D));
    CHECK(a->ctx, fa_plan_create(a->ctx, &p, &a->fwd));
    CHECK(a->ctx, fa_plan_create_backward(a->ctx, &p, &a->bwd));
    for (int i = 0; i < BUF_COUNT; i++) {
        size_t bytes = (size_t)(i == BUF_LSE ? N : N * D) * sizeof(float);
        CHECK(a->ctx, fa_buffer_create(a->ctx, bytes, &a->buf[i]));
    }
    return FA_STATUS_OK;
}

static void attention_destroy(attention *a)
{
    for (int i = 0; i < BUF_COUNT; i++)
        fa_buffer_destroy(a->buf[i]);
    fa_plan_destroy(a->bwd);
    fa_plan_destroy(a->fwd);
    fa_context_destroy(a->ctx);
}

/* o = attention(q, k, v). O and LSE stay on the device too: the backward reads them there. */
static fa_status attention_forward(attention *a, activations *s)
{
    fa_buffer **b = a->buf;
    CHECK(a->ctx, fa_buffer_write(b[BUF_Q], 0, s->q, sizeof s->q));
    CHECK(a->ctx, fa_buffer_write(b[BUF_K], 0, s->k, sizeof s->k));
    CHECK(a->ctx, fa_buffer_write(b[BUF_V], 0, s->v, sizeof s->v));
    CHECK(a->ctx, fa_forward(a->ctx, a->fwd, b[BUF_Q], b[BUF_K], b[BUF_V], b[BUF_O], b[BUF_LSE]));
    CHECK(a->ctx, fa_buffer_read(b[BUF_O], 0, s->o, sizeof s->o));
    return FA_STATUS_OK;
}

/* dq, dk, dv from d_o and the last attention_forward's q, k, v, o and lse. */
static fa_status attention_backward(attention *a, activations *s)
{
    fa_buffer **b = a->buf;
    CHECK(a->ctx, fa_buffer_write(b[BUF_DO], 0, s->d_o, sizeof s->d_o));
    CHECK(a->ctx, fa_backward(a->ctx, a->bwd, b[BUF_Q], b[BUF_K], b[BUF_V], b[BUF_O],
                              b[BUF_LSE], b[BUF_DO], b[BUF_DQ], b[BUF_DK], b[BUF_DV]));
    CHECK(a->ctx, fa_buffer_read(b[BUF_DQ], 0, s->dq, sizeof s->dq));
    CHECK(a->ctx, fa_buffer_read(b[BUF_DK], 0, s->dk, sizeof s->dk));
    CHECK(a->ctx, fa_buffer_read(b[BUF_DV], 0, s->dv, sizeof s->dv));
    return FA_STATUS_OK;
}

/* ---- the rest of the model, in plain C -------------------------------------------------- */

/* y[n, m] = x[n, k] w[k, m] */
static void matmul(const float *x, const float *w, float *y, int n, int k, int m)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            float acc = 0.0f;
            for (int t = 0; t < k; t++)
                acc += x[i * k + t] * w[t * m + j];
            y[i * m + j] = acc;
        }
}

/* dw[k, m] += x[n, k]^T dy[n, m]: the gradient of the weight of y = x w. */
static void matmul_grad_w(const float *x, const float *dy, float *dw, int n, int k, int m)
{
    for (int i = 0; i < n; i++)
        for (int t = 0; t < k; t++)
            for (int j = 0; j < m; j++)
                dw[t * m + j] += x[i * k + t] * dy[i * m + j];
}

/* dx[n, k] += dy[n, m] w[k, m]^T: the gradient of the input of y = x w. */
static void matmul_grad_x(const float *dy, const float *w, float *dx, int n, int k, int m)
{
    for (int i = 0; i < n; i++)
        for (int t = 0; t < k; t++)
            for (int j = 0; j < m; j++)
                dx[i * k + t] += dy[i * m + j] * w[t * m + j];
}

/* Small random weights: the attention starts almost uniform and the loss near ln(V). */
static void init_weights(float *w)
{
    unsigned seed = 42;
    for (int i = 0; i < OFF_BO; i++)
        w[i] = rnd_uniform(&seed) * (i < OFF_WQ ? 2.0f : 2.0f / sqrtf(D));
    for (int i = OFF_BO; i < N_PARAMS; i++)
        w[i] = 0.0f;
}

/* B random sequences; the target at position t is the token at T-1-t. */
static void make_batch(unsigned *seed, activations *s)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            s->tokens[b * T + t] = (int)(rnd_next(seed) % V);
        for (int t = 0; t < T; t++)
            s->targets[b * T + t] = s->tokens[b * T + (T - 1 - t)];
    }
}

/* probs = softmax(logits + bo) row by row, in place; returns the mean cross-entropy. */
static float softmax_cross_entropy(const float *bo, activations *s)
{
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        float *row = s->probs + n * V, max = -INFINITY, sum = 0.0f;
        for (int c = 0; c < V; c++) {
            row[c] += bo[c];
            max = fmaxf(max, row[c]);
        }
        for (int c = 0; c < V; c++) /* subtracting the max keeps exp from overflowing */
            sum += (row[c] = expf(row[c] - max));
        for (int c = 0; c < V; c++)
            row[c] /= sum;
        total -= log(row[s->targets[n]]);
    }
    return (float)(total / N);
}

/* The whole model on s->tokens: leaves every activation in s and the mean loss in *loss. */
static fa_status model_forward(attention *a, const float *w, activations *s, float *loss)
{
    for (int n = 0; n < N; n++)
        for (int j = 0; j < D; j++)
            s->x[n * D + j] = w[OFF_TOK + s->tokens[n] * D + j] + w[OFF_POS + (n % T) * D + j];
    matmul(s->x, w + OFF_WQ, s->q, N, D, D);
    matmul(s->x, w + OFF_WK, s->k, N, D, D);
    matmul(s->x, w + OFF_WV, s->v, N, D, D);
    fa_status st = attention_forward(a, s);
    if (st != FA_STATUS_OK)
        return st;
    matmul(s->o, w + OFF_WO, s->probs, N, D, V); /* the logits, before the bias */
    *loss = softmax_cross_entropy(w + OFF_BO, s);
    return FA_STATUS_OK;
}

/* The gradient g of the mean loss with respect to every weight, after model_forward. */
static fa_status model_backward(attention *a, const float *w, activations *s, float *g)
{
    memset(g, 0, N_PARAMS * sizeof *g);
    /* Softmax and cross-entropy together: d loss / d logits = (probs - onehot(target)) / N. */
    for (int n = 0; n < N; n++)
        for (int c = 0; c < V; c++)
            s->d_logits[n * V + c] = (s->probs[n * V + c] - (c == s->targets[n])) / N;
    /* logits = o Wo + bo */
    matmul_grad_w(s->o, s->d_logits, g + OFF_WO, N, D, V);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < V; c++)
            g[OFF_BO + c] += s->d_logits[n * V + c];
    memset(s->d_o, 0, sizeof s->d_o);
    matmul_grad_x(s->d_logits, w + OFF_WO, s->d_o, N, D, V);
    /* o = attention(q, k, v): the library's backward pass */
    fa_status st = attention_backward(a, s);
    if (st != FA_STATUS_OK)
        return st;
    /* q, k, v = x Wq, x Wk, x Wv: x feeds all three, so its gradient is the sum */
    matmul_grad_w(s->x, s->dq, g + OFF_WQ, N, D, D);
    matmul_grad_w(s->x, s->dk, g + OFF_WK, N, D, D);
    matmul_grad_w(s->x, s->dv, g + OFF_WV, N, D, D);
    memset(s->dx, 0, sizeof s->dx);
    matmul_grad_x(s->dq, w + OFF_WQ, s->dx, N, D, D);
    matmul_grad_x(s->dk, w + OFF_WK, s->dx, N, D, D);
    matmul_grad_x(s->dv, w + OFF_WV, s->dx, N, D, D);
    /* x = tok_emb[token] + pos_emb[t]: each row goes back to the two rows it came from */
    for (int n = 0; n < N; n++)
        for (int j = 0; j < D; j++) {
            g[OFF_TOK + s->tokens[n] * D + j] += s->dx[n * D + j];
            g[OFF_POS + (n % T) * D + j] += s->dx[n * D + j];
        }
    return FA_STATUS_OK;
}

/* The loss and the share of tokens predicted right on a fixed held-out batch. */
static fa_status evaluate(attention *a, const float *w, activations *s, float *loss,
                          float *accuracy)
{
    unsigned seed = 7; /* never used for training batches */
    make_batch(&seed, s);
    fa_status st = model_forward(a, w, s, loss);
    if (st != FA_STATUS_OK)
        return st;
    int right = 0;
    for (int n = 0; n < N; n++) {
        int best = 0;
        for (int c = 1; c < V; c++)
            best = s->probs[n * V + c] > s->probs[n * V + best] ? c : best;
        right += best == s->targets[n];
    }
    *accuracy = (float)right / N;
    return FA_STATUS_OK;
}

/* The training loop: a fresh batch per step, then w -= LEARNING_RATE * gradient. */
static fa_status train(attention *a, float *w, int steps)
{
    static activations s;
    static float g[N_PARAMS];
    unsigned seed = 1;
    int every = steps >= 10 ? steps / 10 : 1;
    for (int step = 1; step <= steps; step++) {
        float loss;
        make_batch(&seed, &s);
        fa_status st = model_forward(a, w, &s, &loss);
        if (st == FA_STATUS_OK)
            st = model_backward(a, w, &s, g);
        if (st != FA_STATUS_OK)
            return st;
        for (int i = 0; i < N_PARAMS; i++)
            w[i] -= LEARNING_RATE * g[i];
        if (step == 1 || step % every == 0)
            printf("step %4d  training loss %.4f\n", step, loss);
    }
    return FA_STATUS_OK;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    long steps = argc > 1 ? strtol(argv[1], &end, 10) : DEFAULT_STEPS;
    if (argc > 2 || (end && *end) || steps < 1 || steps > 1000000) {
        fprintf(stderr, "usage: %s [steps]   (default %d; backend: FLASHATTN_BACKEND)\n",
                argv[0], DEFAULT_STEPS);
        return 2;
    }
    attention a = {0};
    char why[512];
    fa_status st = fa_context_create(&a.ctx, NULL, why, sizeof why);
    if (st != FA_STATUS_OK) {
        fprintf(stderr, "fa_context_create failed: %s: %s\n", fa_status_name(st), why);
        return 1;
    }
    printf("backend %s; reversing %d tokens of %d, batch %d, d %d, %ld steps of SGD\n",
           fa_backend_name(fa_context_backend(a.ctx)), T, V, B, D, steps);

    static float w[N_PARAMS];
    static activations held_out;
    float loss0, acc0, loss1, acc1;
    int rc = 1;
    init_weights(w);
    if (attention_create(&a) != FA_STATUS_OK ||
        evaluate(&a, w, &held_out, &loss0, &acc0) != FA_STATUS_OK ||
        train(&a, w, (int)steps) != FA_STATUS_OK ||
        evaluate(&a, w, &held_out, &loss1, &acc1) != FA_STATUS_OK)
        goto done; /* the failing call has printed why */

    printf("held-out loss %.4f -> %.4f (chance ln %d = %.4f), tokens right %.0f%% -> %.0f%%\n",
           loss0, loss1, V, log(V), 100.0 * acc0, 100.0 * acc1);
    rc = loss1 < PASS_RATIO * loss0 ? 0 : 1;
    if (rc)
        fprintf(stderr, "FAILED: the held-out loss did not fall below %.2f of its start (%.4f)\n",
                PASS_RATIO, PASS_RATIO * loss0);
done:
    attention_destroy(&a);
    return rc;
}
