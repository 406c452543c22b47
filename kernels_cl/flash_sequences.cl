/*
 * flash_sequences.cl - where a tile's keys are: the first key tile a row sees, loop bounds every
 * work-item sees alike, and the sequence arguments (SEQ): each sequence's rows and keys, pages
 * through the block table, key tiles loaded from them.
 */
/* The first key tile (a multiple of Bc) any row of the tile at r0 may see: with a window, the
 * tiles wholly left of the first row's window are skipped. */
long keys_first_tile(const fa_kernel_params *p, long r0)
{
    return fa_keys_begin(p, FEATURES, r0) / BLOCK_C * BLOCK_C;
}

/* Sets range[0], range[1] to `first` and `end`, the bounds of a loop over tiles, seen by the
 * whole work-group. Loop bounds that depend on the mask or the window pass through local
 * memory: pocl did not see them as uniform and ran the tile loop (it holds barriers) about 1.5x
 * slower (history.md, ch. 14); from local memory it does. Call from every work-item. Beyond
 * the window, only on devices that are not GPUs and without sequences (SEQ): on GPUs the range
 * held across the loop grew the backward's spills (tools/cl_gpu_check.sh), and with sequences a
 * tile past its sequence's rows returns first, after which pocl 3.1 miscompiled this barrier
 * (test_decode's paged and varlen cases under GPU rules: NaN outputs, wrong LSE). */
#define SHARE_RANGES ((FEATURES & FA_FEATURE_WINDOW) || (!SEQ && !GPU))
void share_range(__local long *range, long first, long end)
{
    if (get_local_id(0) == 0) {
        range[0] = first;
        range[1] = end;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* LOCAL_RANGE(name): the kernel's local memory for a shared range, declared at its scope
 * (OpenCL C 1.2 has no other place for it) only where SHARE_RANGES uses it: an unused array
 * still takes pocl's local memory, and one of a few bytes misaligned the tiles after it. */
#if SHARE_RANGES
#define LOCAL_RANGE(name) __local long name[2]
#else
#define LOCAL_RANGE(name) __local long *name = 0
#endif

/* The bounds [*begin, *end) of a loop over tiles from [first, end): through `range`
 * (LOCAL_RANGE) where SHARE_RANGES says so. Inlined on every device: left to pocl's choice, the
 * forward's causal tile loop ran 1.8x slower, its bounds no longer seen as uniform. */
ALWAYS_INLINE void loop_range(__local long *range, long first, long end, long *begin_out,
                              long *end_out)
{
    if (SHARE_RANGES) {
        share_range(range, first, end);
        first = range[0];
        end = range[1];
    }
    *begin_out = first;
    *end_out = end;
}

/* ---- sequences and split-KV (SEQ, SPLIT; flashattn.h, "Sequences, pages and split-KV") ----- */

/* The sequence buffers (int32) after the modifier tensors, in the host's order (src/op_launches.c,
 * add_seq_args); those SEQ leaves out are null pointers for fa_seq_of and fa_key_row. */
#if SEQ & FA_SEQ_VARLEN
#define VARLEN_ARG , __global const int *cu_seqlens_q, __global const int *cu_seqlens_k
#define VARLEN_PTRS cu_seqlens_q, cu_seqlens_k
#else
#define VARLEN_ARG
#define VARLEN_PTRS 0, 0
#endif
#if SEQ & FA_SEQ_SEQLENS_K
#define SEQLENS_K_ARG , __global const int *seqlens_k
#define SEQLENS_K_PTR seqlens_k
#else
#define SEQLENS_K_ARG
#define SEQLENS_K_PTR 0
#endif
#if SEQ & FA_SEQ_PAGED
#define BLOCK_TABLE_ARG , __global const int *block_table
#define BLOCK_TABLE_PTR block_table
#else
#define BLOCK_TABLE_ARG
#define BLOCK_TABLE_PTR 0
#endif
#define SEQ_ARG VARLEN_ARG SEQLENS_K_ARG BLOCK_TABLE_ARG

/* A kernel's params argument (PARAMS_ARG) and its first step, SEQ_SETUP(b), which declares
 * `seq`, where sequence b is, and `p`, the params as that sequence sees them: under SEQ a
 * private copy with the sequence's lengths, so every mask, window, ALiBi and bottom-right rule
 * applies per sequence unchanged; without SEQ the argument itself, untouched. */
#if SEQ
#define PARAMS_ARG const fa_kernel_params p_in
#define SEQ_SETUP(b)                                                                            \
    fa_kernel_params p = p_in;                                                                  \
    const fa_seq seq = fa_seq_of(&p, SEQ, VARLEN_PTRS, SEQLENS_K_PTR, b);                       \
    p.seqlen_q = seq.seqlen_q;                                                                  \
    p.seqlen_k = seq.seqlen_k
#else
#define PARAMS_ARG const fa_kernel_params p
#define SEQ_SETUP(b) const fa_seq seq = {0, p.seqlen_q, 0, p.seqlen_k}
#endif

/* Row 0 of head h_kv of K or V (at t, with that tensor's offset and strides) for sequence b
 * starting at key k_start; paged, the head term only (load_keys adds each key's page). */
__global const store_t *key_head(__global const store_t *t, long offset, long stride_b,
                                 long stride_h, long stride_s, long b, long h_kv, long k_start)
{
    if (SEQ & FA_SEQ_PAGED)
        return t + offset + h_kv * stride_h;
    return t + offset + b * stride_b + h_kv * stride_h + k_start * stride_s;
}

/* Where key j's row of K or V starts, from `head` (key_head): paged, in the page the block
 * table gives it (fa_key_row). */
long key_row(long j, long stride_b, long stride_s, const fa_kernel_params *p,
             __global const int *block_table, long b)
{
    if (SEQ & FA_SEQ_PAGED)
        return fa_key_row(p, SEQ, block_table, b, 0, j, stride_b, stride_s);
    return j * stride_s;
}

/* Copies keys [k0, k0 + Bc) of paged K or V into a local tile as load_tile does, zero past
 * `sk`: key j's row is at fa_key_row (its page from the block table), looked up once per key a
 * work-item meets, not once per element: with one work-item per work-group (a decode's Br = 1
 * on pocl) a lookup per element made the paged forward 2.9x slower than the contiguous one (B1
 * Sk 32768 d128 f16); now it is one division per key. */
void load_page_keys(__local tile_t *tile, __global const store_t *head, long k0, long sk,
                    long stride_b, long stride_s, int transposed, const fa_kernel_params *p,
                    __global const int *block_table, long b)
{
    int row_of = -1;
    long row = 0;
    for (int idx = (int)get_local_id(0) * TILE_LOAD_STEP; idx < BLOCK_C * HEAD_DIM;
         idx += WG_SIZE * TILE_LOAD_STEP) {
        int c = idx / HEAD_DIM, x = idx - c * HEAD_DIM; /* key k0 + c, elements x .. */
        long j = k0 + c;
        if (c != row_of && j < sk) {
            row_of = c;
            row = key_row(j, stride_b, stride_s, p, block_table, b);
        }
        copy_tile_elems(tile, head + row + x, j < sk, c, x, BLOCK_C, transposed);
    }
}

/* Copies keys [k0, k0 + Bc) of K or V (row 0 at `head`, key_head) into a local tile as
 * load_tile does, zero past `sk`; paged, each key from its page (load_page_keys). */
void load_keys(__local tile_t *tile, __global const store_t *head, long k0, long sk,
               long stride_b, long stride_s, int transposed, const fa_kernel_params *p,
               __global const int *block_table, long b)
{
    if (SEQ & FA_SEQ_PAGED)
        load_page_keys(tile, head, k0, sk, stride_b, stride_s, transposed, p, block_table, b);
    else
        load_tile(tile, head, k0, sk, stride_s, BLOCK_C, transposed);
}
