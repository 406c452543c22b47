/*
 * flash_merge.cu - the merge of partial results (CUDA, compiled at run time by NVRTC): the key
 * chunks of a split-KV forward (flash_fwd.cu with -DSPLIT=1: f32 partial O and LSE in scratch)
 * or fa_merge's parts (in the storage type), combined by their LSEs with kernel_params.h's merge
 * rule, in its order: per row, m = max_s LSE_s, L = sum_s exp(LSE_s - m) in s order, then
 * O = sum_s exp(LSE_s - m) O_s / L in s order and LSE = m + log(L); a row whose partials all
 * have LSE = -inf gives O = 0 and LSE = -inf, a NaN partial LSE a NaN row. The same steps as
 * kernels_cl's flash_merge.
 *
 * One block per (query tile, head, batch), the unsplit forward's grid, with its block size
 * (-DWG_SIZE, -DBLOCK_R; the forward's -DTPR and -DMMA come along and change nothing here);
 * every block loops over its grid's strides. Partial s of row i of (b, h) of a sequence at
 * q_start (token t = q_start + i): O_s at parts_offset + s * parts_stride + b * parts_stride_b +
 * h * parts_stride_h + t * parts_stride_s (+ x) in -DPARTS_DTYPE, LSE_s at lse_parts_offset +
 * s * part_rows + the row's LSE index (fa_lse_index). O goes to O's layout at token t, LSE (when
 * asked) to the LSE index. Dynamic shared memory: 2 * BLOCK_R floats (each row's m and L).
 * Alone it includes flash_common.cu (compile with -I kernels_cu -I src).
 */
#ifndef FA_FLASH_COMMON_CU
#include "flash_common.cu"
#endif

#ifndef PARTS_DTYPE
#define PARTS_DTYPE 0 /* the partial O's fa_dtype: 0 f32 (a split forward's scratch), else DTYPE */
#endif
static_assert(PARTS_DTYPE == 0 || PARTS_DTYPE == DTYPE, "PARTS_DTYPE: f32 or the storage type");
static_assert(WG_SIZE >= BLOCK_R, "flash_merge: one thread per row for its weights");

/* One partial O element and its f32 value. */
#if PARTS_DTYPE == 0
typedef float part_t;
__device__ __forceinline__ float part_to_f32(part_t v) { return v; }
#else
typedef store_t part_t;
__device__ __forceinline__ float part_to_f32(part_t v) { return to_f32(v); }
#endif

/* The largest of a row's partial LSEs, in s order: a NaN partial makes (and keeps) it NaN;
 * -inf when every partial is -inf (no key). Then L = sum_s exp(LSE_s - m), in s order.
 * lse_row: partial 0's LSE, partial s part_rows further. */
__device__ __forceinline__ void row_weights(const float *lse_row, const fa_kernel_params &p,
                                            float *m_out, float *l_out)
{
    float m = NEG_INF, l = 0.0f;
    for (i64 s = 0; s < p.splits; s++) {
        const float v = lse_row[s * p.part_rows];
        m = v > m || v != v ? v : m;
    }
    for (i64 s = 0; s < p.splits && m != NEG_INF; s++)
        l += expf(lse_row[s * p.part_rows] - m);
    *m_out = m;
    *l_out = l;
}

extern "C" __global__ void __launch_bounds__(WG_SIZE)
flash_merge(const part_t *__restrict__ o_parts, const float *__restrict__ lse_parts,
            store_t *__restrict__ o, float *__restrict__ lse, SEQ_PARAM const fa_kernel_params p)
{
    extern __shared__ __align__(16) char smem[];
    float *row_m = (float *)smem;     /* per row of the tile: m = max_s LSE_s */
    float *row_l = row_m + BLOCK_R;   /* per row of the tile: L = sum_s exp(LSE_s - m) */
    const seq_args seqs = SEQ_ARGS;
    const int tid = (int)threadIdx.x;
    /* Grid-stride loops, every thread the same trips: b in [0, B), h in [0, Hq), and the query
     * tiles of the sequence's rows. */
    for (i64 b = blockIdx.z; b < p.batch; b += gridDim.z) {
        const fa_seq s = seq_of(seqs, p, b);
        for (i64 h = blockIdx.y; h < p.heads_q; h += gridDim.y)
            for (i64 tile = blockIdx.x; tile * BLOCK_R < s.seqlen_q; tile += gridDim.x) {
                const i64 r0 = tile * BLOCK_R; /* first row of the tile */
                /* M and L per row, one thread each (row_weights); LSE when asked:
                 * M + log(L), -inf for a row without keys. */
                __syncthreads(); /* the previous tile's m and L are no longer read */
                if (tid < BLOCK_R && r0 + tid < s.seqlen_q) {
                    const i64 at = fa_lse_index(&p, b, h, s.q_start, r0 + tid);
                    float m, l;
                    row_weights(lse_parts + p.lse_parts_offset + at, p, &m, &l);
                    row_m[tid] = m;
                    row_l[tid] = l;
                    if (p.has_lse)
                        lse[at] = m == NEG_INF ? NEG_INF : m + logf(l);
                }
                __syncthreads();
                /* O, element (r, x) of the tile's rows x d in turn (idx = r * d + x by
                 * WG_SIZE), so neighbours read neighbouring x: sum_s exp(LSE_s - M) O_s / L in
                 * s order, 0 for a row without keys. */
                for (int idx = tid; idx < BLOCK_R * HEAD_DIM; idx += WG_SIZE) {
                    const int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
                    const i64 row = r0 + r, token = s.q_start + row;
                    if (row >= s.seqlen_q)
                        break; /* the rows after it are past the sequence too */
                    const float m = row_m[r];
                    float acc = 0.0f;
                    if (m != NEG_INF) {
                        const float *lse_row = lse_parts + p.lse_parts_offset +
                                               fa_lse_index(&p, b, h, s.q_start, row);
                        const part_t *part = o_parts + p.parts_offset + b * p.parts_stride_b +
                                             h * p.parts_stride_h + token * p.parts_stride_s + x;
                        for (i64 sp = 0; sp < p.splits; sp++)
                            acc += expf(lse_row[sp * p.part_rows] - m) *
                                   part_to_f32(part[sp * p.parts_stride]);
                        acc /= row_l[r];
                    }
                    o[p.o_offset + b * p.o_stride_b + h * p.o_stride_h + token * p.o_stride_s +
                      x] = to_store(acc);
                }
            }
    }
}
