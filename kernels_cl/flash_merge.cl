/*
 * flash_merge.cl - split-KV's merge kernel (OpenCL C 1.2): O and LSE of each row from the
 * partial O and LSE that flash_fwd wrote with SPLIT=1 for each range of keys (or that the caller
 * passed to fa_merge), weighted by exp(LSE_s - max LSE). Follows the shared files (flash_common.cl
 * first) in one program.
 */

#ifndef FA_FLASH_COMMON_CL
#include "flash_common.cl"
#endif

/* The partial O flash_merge reads (PARTS_DTYPE, by the storage rows of flash_storage.cl), and
 * LOAD_PART(ptr), one element as f32: 0 f32 (a split forward's scratch), else fa_merge's
 * partials in the storage type, 1 f16 or 2 bf16. */
typedef CAT(STORE_T_, PARTS_DTYPE) part_t;
#define LOAD_PART(ptr) CAT(LOAD_N_F32_IN_, PARTS_DTYPE)(__global, 1, ptr)

/* flash_merge: O and LSE from p.splits partials (the merge rule and their layout in
 * kernel_params.h), one work-group per (query tile, head, batch) as the forward's unsplit grid.
 * Per row M = max_s LSE_s (a NaN wins, so it reaches O and LSE), L = sum_s exp(LSE_s - M), then
 * O = sum_s exp(LSE_s - M) O_s / L, LSE = M + log L, sums in s order; all -inf: O = 0. */
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void
flash_merge(__global const part_t *o_parts, __global const float *lse_parts,
            __global store_t *o, __global float *lse SEQ_ARG, PARAMS_ARG)
{
    __local float row_max[BLOCK_R], row_sum[BLOCK_R]; /* M and L of the tile's rows */
    const int lid = (int)get_local_id(0);
    const long r0 = (long)get_group_id(0) * BLOCK_R;
    const long h = (long)get_group_id(1), b = (long)get_group_id(2);
    SEQ_SETUP(b);
    if (r0 >= p.seqlen_q)
        return; /* a tile past a shorter sequence's rows, the whole work-group */
    const int rows = (int)min((long)BLOCK_R, p.seqlen_q - r0);
    /* LSE_s of row r0 + r at lse_s[s * part_rows + r] */
    __global const float *lse_s = lse_parts + p.lse_parts_offset +
                                  fa_lse_index(&p, b, h, seq.q_start, r0);

    /* M and L per row, one work-item each; LSE when asked. */
    for (int r = lid; r < rows; r += WG_SIZE) {
        float m = -INFINITY, sum = 0.0f;
        for (int s = 0; s < p.splits; s++) {
            float ls = lse_s[s * p.part_rows + r];
            m = ls > m || isnan(ls) ? ls : m;
        }
        for (int s = 0; s < p.splits && m != -INFINITY; s++)
            sum += exp(lse_s[s * p.part_rows + r] - m);
        row_max[r] = m;
        row_sum[r] = sum;
        if (p.has_lse)
            lse[fa_lse_index(&p, b, h, seq.q_start, r0 + r)] =
                m == -INFINITY ? -INFINITY : m + log(sum);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* O, element (r, x) of the tile's rows x d in turn, so neighbours read neighbouring x. */
    for (int idx = lid; idx < rows * HEAD_DIM; idx += WG_SIZE) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        long t = seq.q_start + r0 + r; /* the row's token */
        __global const part_t *part = o_parts + p.parts_offset + b * p.parts_stride_b +
                                      h * p.parts_stride_h + t * p.parts_stride_s + x;
        float m = row_max[r], acc = 0.0f;
        for (int s = 0; s < p.splits && m != -INFINITY; s++)
            acc += exp(lse_s[s * p.part_rows + r] - m) * LOAD_PART(part + s * p.parts_stride);
        store_o(m == -INFINITY ? 0.0f : acc / row_sum[r],
                o + p.o_offset + b * p.o_stride_b + h * p.o_stride_h + t * p.o_stride_s + x);
    }
}
