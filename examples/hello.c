/*
 * hello.c - the shortest complete flashattn program: one forward pass on the default backend
 * (FA_BACKEND_AUTO: FLASHATTN_BACKEND if set, else the first of CUDA, OpenCL, CPU with a
 * device), checked against a naive attention computed right here. Exits 0 when they agree.
 */
#include <flashattn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { HEADS = 2, SEQ = 5, DIM = 8, N = HEADS * SEQ * DIM }; /* batch 1, BHSD */

/* Every call that can fail: on failure print its status and the context's message, clean up. */
#define TRY(call)                                                                              \
    do {                                                                                       \
        fa_status st_ = (call);                                                                \
        if (st_ != FA_STATUS_OK) {                                                             \
            fprintf(stderr, "%s failed: %s\n", #call, fa_context_last_error(ctx));              \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

/* O = softmax(Q K^T / sqrt(d)) V for one head, in double: the check. */
static void naive(const float *q, const float *k, const float *v, double *o)
{
    for (int i = 0; i < SEQ; i++) {
        double s[SEQ], max = -INFINITY, sum = 0.0;
        for (int j = 0; j < SEQ; j++) {
            s[j] = 0.0;
            for (int x = 0; x < DIM; x++)
                s[j] += (double)q[i * DIM + x] * k[j * DIM + x];
            s[j] /= sqrt(DIM);
            max = s[j] > max ? s[j] : max;
        }
        for (int j = 0; j < SEQ; j++)
            sum += (s[j] = exp(s[j] - max));
        for (int x = 0; x < DIM; x++) {
            o[i * DIM + x] = 0.0;
            for (int j = 0; j < SEQ; j++)
                o[i * DIM + x] += s[j] / sum * v[j * DIM + x];
        }
    }
}

int main(void)
{
    float q[N], k[N], v[N], o[N];
    srand(1);
    for (int i = 0; i < N; i++) {
        q[i] = (float)rand() / RAND_MAX - 0.5f;
        k[i] = (float)rand() / RAND_MAX - 0.5f;
        v[i] = (float)rand() / RAND_MAX - 0.5f;
    }

    fa_context *ctx = NULL;
    char why[512];
    int rc = 1;
    fa_status st = fa_context_create(&ctx, NULL, why, sizeof why);
    if (st != FA_STATUS_OK) {
        fprintf(stderr, "fa_context_create failed: %s: %s\n", fa_status_name(st), why);
        return 1;
    }
    printf("backend %s\n", fa_backend_name(fa_context_backend(ctx)));

    fa_problem p;
    fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, HEADS, HEADS, SEQ, SEQ, DIM);
    fa_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL;
    fa_plan *plan = NULL;
    TRY(fa_buffer_create(ctx, sizeof q, &bq));
    TRY(fa_buffer_create(ctx, sizeof k, &bk));
    TRY(fa_buffer_create(ctx, sizeof v, &bv));
    TRY(fa_buffer_create(ctx, sizeof o, &bo));
    TRY(fa_buffer_write(bq, 0, q, sizeof q));
    TRY(fa_buffer_write(bk, 0, k, sizeof k));
    TRY(fa_buffer_write(bv, 0, v, sizeof v));
    TRY(fa_plan_create(ctx, &p, &plan));
    TRY(fa_forward(ctx, plan, bq, bk, bv, bo, NULL));
    TRY(fa_buffer_read(bo, 0, o, sizeof o));

    double err = 0.0;
    for (int h = 0; h < HEADS; h++) {
        double ref[SEQ * DIM];
        naive(q + h * SEQ * DIM, k + h * SEQ * DIM, v + h * SEQ * DIM, ref);
        for (int i = 0; i < SEQ * DIM; i++) {
            double e = fabs(ref[i] - o[h * SEQ * DIM + i]);
            err = e > err || isnan(e) ? e : err; /* a NaN stays and fails the check */
        }
    }
    printf("O[0, 0, 0, 0:4] = %.6f %.6f %.6f %.6f\n", o[0], o[1], o[2], o[3]);
    printf("max abs error vs naive = %.3g\n", err);
    rc = err <= 1e-5 ? 0 : 1;
    if (rc)
        fprintf(stderr, "error above the tolerance 1e-5\n");
done:
    fa_plan_destroy(plan);
    fa_buffer_destroy(bq);
    fa_buffer_destroy(bk);
    fa_buffer_destroy(bv);
    fa_buffer_destroy(bo);
    fa_context_destroy(ctx);
    return rc;
}
