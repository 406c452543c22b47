/*
 * consumer.c - the smallest user of an installed flashattn: one forward on the CPU backend,
 * checked against a direct computation. Built by install_test.sh through find_package and
 * through pkg-config, so a broken install is a test failure.
 */
#include <flashattn.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    enum { S = 3, D = 4 };
    float q[S * D], k[S * D], v[S * D], o[S * D];
    for (int i = 0; i < S * D; i++) {
        q[i] = (float)((i * 7) % 5) * 0.25f;
        k[i] = (float)((i * 3) % 7) * 0.125f;
        v[i] = (float)i;
    }
    char why[256];
    fa_context *ctx = NULL;
    fa_context_options opts = {FA_BACKEND_CPU, 0};
    fa_status st = fa_context_create(&ctx, &opts, why, sizeof why);
    if (st != FA_STATUS_OK) {
        fprintf(stderr, "consumer: %s\n", why);
        return 1;
    }
    fa_problem p;
    fa_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL;
    fa_plan *plan = NULL;
    st = fa_problem_init(&p, FA_DTYPE_F32, FA_LAYOUT_BHSD, 1, 1, 1, S, S, D);
    if (st == FA_STATUS_OK)
        st = fa_buffer_wrap_host(ctx, q, sizeof q, &bq);
    if (st == FA_STATUS_OK)
        st = fa_buffer_wrap_host(ctx, k, sizeof k, &bk);
    if (st == FA_STATUS_OK)
        st = fa_buffer_wrap_host(ctx, v, sizeof v, &bv);
    if (st == FA_STATUS_OK)
        st = fa_buffer_wrap_host(ctx, o, sizeof o, &bo);
    if (st == FA_STATUS_OK)
        st = fa_plan_create(ctx, &p, &plan);
    if (st == FA_STATUS_OK)
        st = fa_forward(ctx, plan, bq, bk, bv, bo, NULL);
    if (st != FA_STATUS_OK)
        fprintf(stderr, "consumer: %s\n", fa_context_last_error(ctx));
    fa_plan_destroy(plan);
    fa_buffer_destroy(bq);
    fa_buffer_destroy(bk);
    fa_buffer_destroy(bv);
    fa_buffer_destroy(bo);
    fa_context_destroy(ctx);
    if (st != FA_STATUS_OK)
        return 1;
    double worst = 0.0;
    for (int i = 0; i < S; i++) {
        double s[S], mx = -INFINITY, l = 0.0;
        for (int j = 0; j < S; j++) {
            s[j] = 0.0;
            for (int x = 0; x < D; x++)
                s[j] += (double)q[i * D + x] * k[j * D + x] * 0.5; /* 1/sqrt(4) */
            mx = s[j] > mx ? s[j] : mx;
        }
        for (int j = 0; j < S; j++)
            l += exp(s[j] - mx);
        for (int x = 0; x < D; x++) {
            double ref = 0.0;
            for (int j = 0; j < S; j++)
                ref += exp(s[j] - mx) / l * v[j * D + x];
            double err = fabs(ref - o[i * D + x]);
            worst = err > worst ? err : worst;
        }
    }
    printf("flashattn %s: max abs error %.3g\n", fa_version(), worst);
    return worst < 1e-5 ? 0 : 1;
}
