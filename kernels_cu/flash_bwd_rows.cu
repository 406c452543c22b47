/*
 * flash_bwd_rows.cu - the backward's passes over single query rows (CUDA, compiled at run time
 * by NVRTC), which need no K/V tile and so none of the tile code: the same kernels, steps and
 * order as in kernels_cl/flash_bwd.cl.
 *
 *   flash_bwd_pre     D[i] = rowsum(dO[i] * O[i]) into scratch (f32, at the row's LSE index).
 *   flash_bwd_dsinks  with sinks: their gradient per query head, in a fixed order.
 *
 * flash_bwd.cu's dK/dV and dQ passes read D. Varlen (-DSEQ with FA_SEQ_VARLEN): each sequence's
 * rows at its tokens, D and LSE at fa_lse_index. Every block loops over its grid's strides as
 * the forward does. Alone it includes flash_common.cu (compile with -I kernels_cu -I src).
 */
#ifndef FA_FLASH_COMMON_CU
#include "flash_common.cu"
#endif

/* ---- flash_bwd_pre: D = rowsum(dO * O), both paths -------------------------------------- */

/* THREADS_PER_ROW lanes per row as on CUDA cores; a tensor-core block (2 threads per row) takes
 * its rows in two rounds. Every lane runs every round, past Sq too: the shuffles are shared. */
#define PRE_ROWS_PER_ROUND (WG_SIZE / THREADS_PER_ROW)
static_assert(BLOCK_R % PRE_ROWS_PER_ROUND == 0, "flash_bwd_pre: whole rounds of rows");

extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_bwd_pre(const store_t *__restrict__ o, const store_t *__restrict__ d_o,
              float *__restrict__ delta, SEQ_PARAM const fa_kernel_params p)
{
    const int t = (int)threadIdx.x % THREADS_PER_ROW;
    const unsigned lanes = row_lanes();
    const seq_args seqs = SEQ_ARGS;
    for (i64 b = blockIdx.z; b < p.batch; b += gridDim.z) {
        const fa_seq s = seq_of(seqs, p, b); /* its rows: tokens q_start .. + seqlen_q */
        for (i64 h = blockIdx.y; h < p.heads_q; h += gridDim.y)
            for (i64 tile = blockIdx.x; tile * BLOCK_R < s.seqlen_q; tile += gridDim.x)
                for (int r = (int)threadIdx.x / THREADS_PER_ROW; r < BLOCK_R;
                     r += PRE_ROWS_PER_ROUND) {
                    const i64 row = tile * BLOCK_R + r, token = s.q_start + row;
                    /* Lane t's part: x = t + j*TPR of O[b][h][row] and dO[b][h][row]. */
                    float sum = 0.0f;
                    if (row < s.seqlen_q) {
                        const store_t *o_row = o + p.o_offset + b * p.o_stride_b +
                                               h * p.o_stride_h + token * p.o_stride_s;
                        const store_t *do_row = d_o + p.do_offset + b * p.do_stride_b +
                                                h * p.do_stride_h + token * p.do_stride_s;
                        for (int x = t; x < HEAD_DIM; x += THREADS_PER_ROW)
                            sum += to_f32(do_row[x]) * to_f32(o_row[x]);
                    }
                    sum = row_sum(sum, lanes);
                    if (row < s.seqlen_q && t == 0)
                        delta[fa_lse_index(&p, b, h, s.q_start, row)] = sum;
                }
    }
}

#if FEATURES & FA_FEATURE_SINKS
/*
 * flash_bwd_dsinks: the sinks' gradient, dsink[h] = -sum over b, then rows i, of
 * exp(sink[h] - LSE[b][h][i]) * D[b][h][i] (D from flash_bwd_pre), rows with LSE = -inf adding
 * nothing. One block per query head (grid (1, Hq, 1), grid-stride over heads): thread t sums
 * rows t, t + WG_SIZE, .. of each batch (its sequence's rows) in order, then a tree over the
 * block adds the partial sums in shared memory (WG_SIZE floats of the dynamic shared memory); no
 * atomics, a fixed order. With batch 0, delta (then a null pointer) is never read and dsinks
 * gets 0.
 */
extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_bwd_dsinks(const float *__restrict__ lse, const float *__restrict__ delta,
                 const float *__restrict__ sinks, float *__restrict__ dsinks,
                 SEQ_PARAM const fa_kernel_params p)
{
    extern __shared__ __align__(16) char smem[];
    float *partial = (float *)smem; /* partial[t]: thread t's sum */
    const int t = (int)threadIdx.x;
    const seq_args seqs = SEQ_ARGS;
    for (i64 h = blockIdx.y; h < p.heads_q; h += gridDim.y) {
        const float sink = sinks[h];
        float sum = 0.0f;
        for (i64 b = 0; b < p.batch; b++) {
            const fa_seq s = seq_of(seqs, p, b);
            for (i64 i = t; i < s.seqlen_q; i += WG_SIZE) {
                const i64 at = fa_lse_index(&p, b, h, s.q_start, i); /* LSE and D */
                const float l = lse[at];
                if (l != NEG_INF)
                    sum += expf(sink - l) * delta[at];
            }
        }
        __syncthreads(); /* the previous head's tree no longer reads partial */
        partial[t] = sum;
        __syncthreads();
        int step = 1; /* the largest power of two below WG_SIZE */
        while (step * 2 < WG_SIZE)
            step *= 2;
        for (; step > 0; step /= 2) { /* partial[t] += partial[t + step], within WG_SIZE */
            if (t < step && t + step < WG_SIZE)
                partial[t] += partial[t + step];
            __syncthreads();
        }
        if (t == 0)
            dsinks[h] = -partial[0];
    }
}
#endif
