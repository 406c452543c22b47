/*
 * fma_peak.c - the host's f32 multiply-add peak, measured: each thread runs CHAINS independent
 * chains of 16-float multiply-adds (GCC/Clang vector extensions, so the compiler emits the
 * widest FMA that -march=native allows), and the best of several timed rounds counts
 * 2 FLOPs per lane per FMA. tools/bench_cpu.py builds and runs it beside the attention timings.
 *
 * usage: fma_peak [threads (default 2)] [iterations per chain (default 200000000 / 16)]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 12 /* enough independent FMAs to cover two pipes' latency (4 cycles x 2 + room) */
#define LANES 16

typedef float vec16 __attribute__((vector_size(LANES * sizeof(float))));

typedef struct job {
    long iterations;
    float sink; /* the chains' sum, so the compiler keeps them */
} job;

static void *run_chains(void *arg)
{
    job *j = arg;
    vec16 acc[CHAINS], mul, add;
    for (int i = 0; i < LANES; i++) {
        mul[i] = 0.999999f;
        add[i] = 1e-7f;
    }
    for (int c = 0; c < CHAINS; c++)
        acc[c] = mul * (float)(c + 1);
    for (long it = 0; it < j->iterations; it++)
#pragma GCC unroll 12 /* the chains in registers, not an array in memory */
        for (int c = 0; c < CHAINS; c++)
            acc[c] = acc[c] * mul + add;
    float s = 0.0f;
    for (int c = 0; c < CHAINS; c++)
        for (int i = 0; i < LANES; i++)
            s += acc[c][i];
    j->sink = s;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    long iterations = argc > 2 ? atol(argv[2]) : 200000000L / LANES;
    if (threads < 1 || threads > 256 || iterations < 1) {
        fprintf(stderr, "usage: fma_peak [threads 1..256] [iterations >= 1]\n");
        return 2;
    }
    pthread_t tid[256];
    job jobs[256];
    double best = 0.0;
    for (int round = 0; round < 5; round++) {
        double t0 = now_s();
        for (int t = 0; t < threads; t++) {
            jobs[t].iterations = iterations;
            if (pthread_create(&tid[t], NULL, run_chains, &jobs[t]) != 0) {
                fprintf(stderr, "fma_peak: pthread_create failed\n");
                return 1;
            }
        }
        for (int t = 0; t < threads; t++)
            pthread_join(tid[t], NULL);
        double s = now_s() - t0;
        double gflops = 2.0 * LANES * CHAINS * (double)iterations * threads / s * 1e-9;
        if (gflops > best)
            best = gflops;
    }
    printf("%.1f\n", best);
    return jobs[0].sink == 12345.0f; /* never: keeps the sums alive */
}
