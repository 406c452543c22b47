/*
 * gpt_block.c - the causal self-attention block of a small GPT, with flashattn in the middle:
 *
 *   x   [B, T, C]              input activations (C = d_model = H * D)
 *   qkv [B, T, 3C] = x Wqkv + bqkv      one matmul; per token the Q, K, V of all heads
 *   y   [B, T, H, D] = attention(Q, K, V), causal (top-left)   Q, K, V read in place from qkv
 *   out [B, T, C]  = y Wo + bo          y is [B, T, C] already: heads side by side
 *
 * Q, K and V are strided views of the one qkv buffer (the BSHD layout with a token stride of
 * 3C and offsets 0, C, 2C), so the attention reads the projection's output without a copy or a
 * transpose. The same block is computed naively in double and the maximum error printed; the
 * program exits 1 when it is above the tolerance.
 *
 * Usage: gpt_block [cpu|opencl|cuda|auto]; without an argument the backend is FA_BACKEND_AUTO,
 * which honours the FLASHATTN_BACKEND environment variable.
 */
#include <flashattn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 2, T = 37, H = 4, D = 16, C = H * D }; /* batch, tokens, heads, head dim, d_model */

#define TOLERANCE 1e-5 /* f32 storage and accumulation against a double reference */

/* A fixed-seed generator, so every run and platform sees the same weights. */
static float rnd(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) * (1.0 / 16777216.0)) - 0.5f;
}

/* y[n, m] = x[n, :] w[:, m] + b[m] in f32: the library's input, as a model would compute it. */
static void matmul_f32(const float *x, const float *w, const float *b, float *y, int n, int k,
                       int m)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < m; j++) {
            float acc = b[j];
            for (int t = 0; t < k; t++)
                acc += x[(size_t)i * k + t] * w[(size_t)t * m + j];
            y[(size_t)i * m + j] = acc;
        }
    }
}

/* The same in double, for the reference. */
static void matmul_f64(const double *x, const float *w, const float *b, double *y, int n, int k,
                       int m)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < m; j++) {
            double acc = b[j];
            for (int t = 0; t < k; t++)
                acc += x[(size_t)i * k + t] * w[(size_t)t * m + j];
            y[(size_t)i * m + j] = acc;
        }
    }
}

/* The whole block in double: QKV projection, causal softmax attention per head, projection. */
static void reference(const float *x, const float *wqkv, const float *bqkv, const float *wo,
                      const float *bo, double *out)
{
    static double xd[B * T * C], qkv[B * T * 3 * C], y[B * T * C];
    for (int i = 0; i < B * T * C; i++)
        xd[i] = x[i];
    matmul_f64(xd, wqkv, bqkv, qkv, B * T, C, 3 * C);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)(b * T + i) * 3 * C) + h * D;
                double s[T], max = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) { /* causal: keys 0..i */
                    const double *k = qkv + ((size_t)(b * T + j) * 3 * C) + C + h * D;
                    s[j] = 0.0;
                    for (int x0 = 0; x0 < D; x0++)
                        s[j] += q[x0] * k[x0];
                    s[j] /= sqrt(D);
                    max = s[j] > max ? s[j] : max;
                }
                for (int j = 0; j <= i; j++)
                    sum += (s[j] = exp(s[j] - max));
                double *yrow = y + (size_t)(b * T + i) * C + h * D;
                for (int x0 = 0; x0 < D; x0++) {
                    yrow[x0] = 0.0;
                    for (int j = 0; j <= i; j++) {
                        const double *v = qkv + ((size_t)(b * T + j) * 3 * C) + 2 * C + h * D;
                        yrow[x0] += s[j] / sum * v[x0];
                    }
                }
            }
        }
    }
    matmul_f64(y, wo, bo, out, B * T, C, C);
}

/* Q, K, V as views of qkv [B, T, 3C]; O written [B, T, H, D]. Causal, top-left aligned. */
static void describe(fa_problem *p)
{
    fa_problem_init(p, FA_DTYPE_F32, FA_LAYOUT_BSHD, B, H, H, T, T, D);
    fa_tensor_layout view = {0, (int64_t)T * 3 * C, D, 3 * C}; /* offset, batch, head, seq */
    p->q = view;
    p->k = view;
    p->k.offset = C;
    p->v = view;
    p->v.offset = 2 * C;
    /* p->o keeps the contiguous BSHD strides fa_problem_init set: {0, T*C, D, C}. */
    p->mask = FA_MASK_CAUSAL_TOP_LEFT;
}

/* Every call that can fail: on failure print its status and the context's message, clean up. */
#define TRY(call)                                                                              \
    do {                                                                                       \
        fa_status st_ = (call);                                                                \
        if (st_ != FA_STATUS_OK) {                                                             \
            fprintf(stderr, "%s failed: %s\n", #call, fa_context_last_error(ctx));              \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    static float x[B * T * C], wqkv[C * 3 * C], bqkv[3 * C], wo[C * C], bo[C];
    static float qkv[B * T * 3 * C], y[B * T * C], out[B * T * C];
    static double ref[B * T * C];
    unsigned seed = 42;
    for (int i = 0; i < B * T * C; i++)
        x[i] = rnd(&seed);
    for (int i = 0; i < C * 3 * C; i++)
        wqkv[i] = rnd(&seed) * 0.5f;
    for (int i = 0; i < 3 * C; i++)
        bqkv[i] = rnd(&seed) * 0.1f;
    for (int i = 0; i < C * C; i++)
        wo[i] = rnd(&seed) * 0.25f;
    for (int i = 0; i < C; i++)
        bo[i] = rnd(&seed) * 0.1f;

    fa_context_options opts = {FA_BACKEND_AUTO, 0};
    if (argc > 1 && fa_backend_from_name(argv[1], &opts.backend) != FA_STATUS_OK) {
        fprintf(stderr, "usage: %s [cpu|opencl|cuda|auto]\n", argv[0]);
        return 2;
    }
    fa_context *ctx = NULL;
    char why[512];
    fa_status st = fa_context_create(&ctx, &opts, why, sizeof why);
    if (st != FA_STATUS_OK) {
        fprintf(stderr, "fa_context_create failed: %s: %s\n", fa_status_name(st), why);
        return 1;
    }
    fa_device_props props;
    fa_context_device_props(ctx, &props);
    printf("backend %s, device \"%s\"\n", fa_backend_name(fa_context_backend(ctx)), props.name);

    int rc = 1;
    fa_problem p;
    describe(&p);
    fa_buffer *bqkv_buf = NULL, *by = NULL;
    fa_plan *plan = NULL;
    matmul_f32(x, wqkv, bqkv, qkv, B * T, C, 3 * C); /* the QKV projection */
    TRY(fa_buffer_create(ctx, sizeof qkv, &bqkv_buf));
    TRY(fa_buffer_create(ctx, sizeof y, &by));
    TRY(fa_buffer_write(bqkv_buf, 0, qkv, sizeof qkv));
    TRY(fa_plan_create(ctx, &p, &plan));
    printf("plan: Br = %d, Bc = %d, %llu work-groups\n", (int)fa_plan_block_r(plan),
           (int)fa_plan_block_c(plan), (unsigned long long)fa_plan_work_groups(plan));
    /* The same buffer three times: the problem's offsets and strides pick Q, K and V. */
    TRY(fa_forward(ctx, plan, bqkv_buf, bqkv_buf, bqkv_buf, by, NULL));
    TRY(fa_buffer_read(by, 0, y, sizeof y));
    matmul_f32(y, wo, bo, out, B * T, C, C); /* the output projection */

    reference(x, wqkv, bqkv, wo, bo, ref);
    double err = 0.0, mag = 0.0;
    for (int i = 0; i < B * T * C; i++) {
        double e = fabs(ref[i] - out[i]);
        err = e > err || isnan(e) ? e : err; /* a NaN stays and fails the check below */
        mag = fmax(mag, fabs(ref[i]));
    }
    printf("out[0, 0, 0:4] = %.6f %.6f %.6f %.6f\n", out[0], out[1], out[2], out[3]);
    printf("max abs error vs naive block = %.3g (max |out| = %.3g, tolerance %.0e)\n", err, mag,
           TOLERANCE);
    rc = err <= TOLERANCE ? 0 : 1;
    if (rc)
        fprintf(stderr, "FAILED: error above the tolerance\n");
done:
    fa_plan_destroy(plan);
    fa_buffer_destroy(bqkv_buf);
    fa_buffer_destroy(by);
    fa_context_destroy(ctx);
    return rc;
}
