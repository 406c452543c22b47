/*
 * flash_kv.cu - where a work item's keys are and how its K/V tiles reach shared memory (CUDA,
 * compiled at run time by NVRTC after flash_common.cu, before flash_fwd.cu): the key rows of a
 * head (dense, varlen or paged through the block table), the synchronous tile copies of both
 * forward paths and the backward's dQ pass, and the tensor-core forward's pipelined variant
 * (PIPELINE=1): two K/V buffers, the next tile's cp.async copy in flight while this one is used;
 * and which tiles block-sparse lists leave to visit (the forward's and both backward passes'
 * list walk and element mask). Alone it includes flash_common.cu (-I src -I kernels_cu).
 */
#ifndef FA_FLASH_COMMON_CU
#include "flash_common.cu"
#endif
#define FA_FLASH_KV_CU /* flash_fwd.cu builds on this file */

/* Where a work item's keys are: K and V of head h_kv of sequence b. Not paged, k and v point at
 * the sequence's key 0 (fa_key_row's b * stride_b + k_start * stride_s) and key j is j rows
 * further; paged (SEQ & FA_SEQ_PAGED), at the head's row 0 of page 0, and key j's row is
 * fa_key_row's, through the block table. */
struct kv_rows {
    const store_t *k, *v;
    const int *block_table; /* paged: the launch's block table */
    i64 b;                  /* the sequence */
};

__device__ __forceinline__ kv_rows kv_rows_of(const store_t *k, const store_t *v,
                                              const seq_args &a, const fa_kernel_params &p,
                                              i64 b, i64 h_kv, const fa_seq &s)
{
    const bool paged = (SEQ & FA_SEQ_PAGED) != 0;
    kv_rows kv = {k + p.k_offset + h_kv * p.k_stride_h, v + p.v_offset + h_kv * p.v_stride_h,
                  a.block_table, b};
    if (!paged) {
        kv.k += b * p.k_stride_b + s.k_start * p.k_stride_s;
        kv.v += b * p.v_stride_b + s.k_start * p.v_stride_s;
    }
    return kv;
}

/* Key k0 + r of a paged sequence: its row through the block table (fa_key_row). */
struct paged_rows {
    const fa_kernel_params *p;
    const int *block_table;
    i64 b, k0, stride_b, stride_s;
    __device__ __forceinline__ i64 offset(int r) const
    {
        return fa_key_row(p, SEQ, block_table, b, 0, k0 + r, stride_b, stride_s);
    }
};

/* Copies keys [k0, k0 + Bc) of K or V (src: kv's k or v, row strides stride_b, stride_s) into a
 * shared tile as load_tile does, zeros past Sk; paged, each key's row through fa_key_row (in
 * 16-byte chunks where the pool's row and page strides keep rows aligned). */
__device__ __forceinline__ void load_key_tile(store_t *tile, const store_t *src,
                                              const kv_rows &kv, const fa_kernel_params &p,
                                              i64 stride_b, i64 stride_s, i64 k0,
                                              bool transposed)
{
#if SEQ & FA_SEQ_PAGED
    const paged_rows at = {&p, kv.block_table, kv.b, k0, stride_b, stride_s};
    copy_rows(tile, src, at, BLOCK_C, p.seqlen_k - k0, transposed,
              chunked_rows(src, stride_s, stride_b));
#else
    (void)kv;
    (void)stride_b;
    load_tile(tile, src, k0, p.seqlen_k, stride_s, BLOCK_C, transposed);
#endif
}

/* Loads K/V tile rows [k0, k0 + Bc) of a work item's keys (kv) into k_tile (Bc x d or,
 * transposed, d x Bc) and v_tile (Bc x d), zeros past Sk. The barriers: the previous tiles are
 * no longer read; the new ones are complete before any thread reads them. */
__device__ __forceinline__ void load_kv_tiles(store_t *k_tile, store_t *v_tile,
                                              const kv_rows &kv, const fa_kernel_params &p,
                                              i64 k0, bool k_transposed)
{
    __syncthreads();
    load_key_tile(k_tile, kv.k, kv, p, p.k_stride_b, p.k_stride_s, k0, k_transposed);
    load_key_tile(v_tile, kv.v, kv, p, p.v_stride_b, p.v_stride_s, k0, false);
    __syncthreads();
}

/* ---- the K/V tiles of the tensor-core path: copied at the top of each tile, or (PIPELINE)
 * double-buffered, the next tile's cp.async copy in flight while this one is used ---------- */
#if PIPELINE
/* One 16-byte asynchronous copy global -> shared (cp.async, sm_80+; the emulator copies now). */
__device__ __forceinline__ void cp_async16(store_t *dst, const store_t *src)
{
#ifdef FA_EMULATED
    memcpy(dst, src, 16);
#else
    unsigned shared_addr;
    asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
                 : "=r"(shared_addr)
                 : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_addr), "l"(src)
                 : "memory");
#endif
}

/* Closes the group of copies issued so far / waits until at most the newest group is in
 * flight (this thread's copies; a barrier after makes every thread's visible). */
__device__ __forceinline__ void cp_async_commit()
{
#ifndef FA_EMULATED
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

__device__ __forceinline__ void cp_async_wait_newest()
{
#ifndef FA_EMULATED
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#endif
}

/* Starts copying keys [k0, k0 + Bc) of K or V (src: kv's k or v) into a row-major tile as
 * load_key_tile does: 16-byte cp.async chunks where the rows allow them (rows past Sk get
 * zeros), else the synchronous copy. */
__device__ __forceinline__ void issue_key_tile(store_t *tile, const store_t *src,
                                               const kv_rows &kv, const fa_kernel_params &p,
                                               i64 stride_b, i64 stride_s, i64 k0)
{
#if SEQ & FA_SEQ_PAGED
    const paged_rows at = {&p, kv.block_table, kv.b, k0, stride_b, stride_s};
    const bool chunked = chunked_rows(src, stride_s, stride_b);
#else
    (void)kv;
    (void)stride_b;
    src += k0 * stride_s;
    const strided_rows at = {stride_s};
    const bool chunked = chunked_rows(src, stride_s, 0);
#endif
    const i64 valid = p.seqlen_k - k0;
    if (!chunked) {
        copy_rows(tile, src, at, BLOCK_C, valid, false, false);
        return;
    }
    for (int idx = (int)threadIdx.x; idx < BLOCK_C * ROW_CHUNKS; idx += WG_SIZE) {
        int r = idx / ROW_CHUNKS, x = (idx - r * ROW_CHUNKS) * CHUNK_ELEMS;
        if (r < valid)
            cp_async16(tile + r * TILE_LD + x, src + at.offset(r) + x);
        else
            *(chunk16 *)(tile + r * TILE_LD + x) = chunk16{{0u, 0u, 0u, 0u}};
    }
}

/* Buffer i (0, 1) of the K/V tiles: K then V, Bc x TILE_LD each. */
__device__ __forceinline__ store_t *kv_buffer(store_t *kv_tiles, int i)
{
    return kv_tiles + i * 2 * BLOCK_C * TILE_LD;
}

/* Starts the copy of keys [k0, k0 + Bc) into buffer i, as one group. */
__device__ __forceinline__ void issue_kv(store_t *kv_tiles, int i, const kv_rows &kv,
                                         const fa_kernel_params &p, i64 k0)
{
    store_t *k_tile = kv_buffer(kv_tiles, i);
    issue_key_tile(k_tile, kv.k, kv, p, p.k_stride_b, p.k_stride_s, k0);
    issue_key_tile(k_tile + BLOCK_C * TILE_LD, kv.v, kv, p, p.v_stride_b, p.v_stride_s, k0);
    cp_async_commit();
}
#endif

/* Before the K/V loop: PIPELINE starts the first tile's copy into buffer 0 (the Q tile's load
 * has waited for the previous work item); else nothing. */
__device__ __forceinline__ void kv_prefetch(store_t *kv_tiles, const kv_rows &kv,
                                            const fa_kernel_params &p, i64 kv_begin,
                                            i64 kv_end)
{
#if PIPELINE
    if (kv_begin < kv_end)
        issue_kv(kv_tiles, 0, kv, p, kv_begin);
#else
    (void)kv_tiles;
    (void)kv;
    (void)p;
    (void)kv_begin;
    (void)kv_end;
#endif
}

/* The K and V tiles of keys [k0, k0 + Bc), complete and visible to the block. Without
 * PIPELINE: copied now (load_kv_tiles). With it: once every thread is done with buffer buf ^ 1
 * (the previous tile), the copy of the next tile (keys from k_next: k0 + Bc, or block-sparse's
 * next listed tile) into it starts; then this tile's copy (buffer buf, started one tile
 * earlier) is awaited. */
__device__ __forceinline__ void next_kv_tiles(store_t *kv_tiles, const kv_rows &kv,
                                              const fa_kernel_params &p, i64 k0, i64 k_next,
                                              i64 kv_end, int buf, const store_t **k_tile,
                                              const store_t **v_tile)
{
#if PIPELINE
    (void)k0; /* its copy was issued one tile earlier (or by kv_prefetch) */
    __syncthreads();
    if (k_next < kv_end)
        issue_kv(kv_tiles, buf ^ 1, kv, p, k_next);
    else
        cp_async_commit(); /* an empty group, so that waiting for all but one waits for this */
    cp_async_wait_newest();
    __syncthreads();
    *k_tile = kv_buffer(kv_tiles, buf);
#else
    (void)k_next;
    (void)kv_end;
    (void)buf;
    load_kv_tiles(kv_tiles, kv_tiles + BLOCK_C * HEAD_DIM, kv, p, k0, false);
    *k_tile = kv_tiles;
#endif
    *v_tile = *k_tile + BLOCK_C * TILE_LD;
}

/* ---- block-sparse attention (FEATURES & FA_FEATURE_BLOCK_SPARSE; kernel_params.h) ---------- */
/* A tile loop walks only the tiles of its listed blocks (next_listed_tile) and masks, element by
 * element, the keys (or query rows) of blocks its own block does not list (block_listed_at); an
 * element in a block of the full lists skips the mask and window test (row_blocks.full). */
#ifndef SPARSE_FULL
#define SPARSE_FULL 0 /* 1: a block-sparse kernel reads the full lists too */
#endif
#define BLOCK_SPARSE ((FEATURES & FA_FEATURE_BLOCK_SPARSE) != 0)
#define LIST_END 0x7fffffff /* past every block index */

/* A launch's lists, after its sequence buffers in the host's order (src/op_launches.c
 * add_block_list_args): the forward's and the dQ pass's kv_num_blocks, kv_indices, or the dK/dV
 * pass's q_num_blocks, q_indices, then with SPARSE_FULL their full pair; null where absent. */
struct block_lists {
    const int *num, *idx;           /* the blocks to compute, ascending per row */
    const int *full_num, *full_idx; /* SPARSE_FULL: blocks wholly inside the mask and window */
};
#if BLOCK_SPARSE && SPARSE_FULL
#define FULL_LISTS_PARAM const int *__restrict__ full_num, const int *__restrict__ full_idx,
#define FULL_LISTS_ARGS full_num, full_idx
#else
#define FULL_LISTS_PARAM
#define FULL_LISTS_ARGS nullptr, nullptr
#endif
#if BLOCK_SPARSE
#define LISTS_PARAM                                                                            \
    const int *__restrict__ list_num, const int *__restrict__ list_idx, FULL_LISTS_PARAM
#define LISTS_ARGS {list_num, list_idx, FULL_LISTS_ARGS}
#else
#define LISTS_PARAM
#define LISTS_ARGS {nullptr, nullptr, nullptr, nullptr}
#endif

/* Which way a launch reads its lists: a row per `own` block (the rows the block owns), naming
 * `walk` blocks (what its tile loop streams). Forward and dQ: own = query blocks, walk = key
 * blocks; dK/dV: the transposed lists, own = key blocks, walk = query blocks. */
struct list_dir {
    i64 rows, cols;            /* a head's list rows, a row's length */
    i64 own_block, walk_block; /* block sizes (powers of two) */
};

__device__ __forceinline__ list_dir forward_lists(const fa_kernel_params &p)
{
    return {p.sparse_q_blocks, p.sparse_k_blocks, p.sparse_block_q, p.sparse_block_k};
}

__device__ __forceinline__ list_dir transposed_lists(const fa_kernel_params &p)
{
    return {p.sparse_k_blocks, p.sparse_q_blocks, p.sparse_block_k, p.sparse_block_q};
}

/* The index of the first entry >= target in list row `row` (num[row] ascending entries of idx's
 * row of `cols`): a binary search; num[row] when none. */
__device__ __forceinline__ int list_lower_bound(const int *num, const int *idx, i64 row,
                                                i64 cols, i64 target)
{
    int lo = 0, hi = num[row];
    const int *r = idx + row * cols;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (r[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first block >= target that list row `row` names, LIST_END when none. */
__device__ __forceinline__ i64 list_next(const int *num, const int *idx, i64 row, i64 cols,
                                         i64 target)
{
    int at = list_lower_bound(num, idx, row, cols, target);
    return at < num[row] ? (i64)idx[row * cols + at] : (i64)LIST_END;
}

/* Sets bit w - w0 of *bits for every block w in [w0, w1] that list row `row` names. */
__device__ __forceinline__ void list_bits(const int *num, const int *idx, i64 row, i64 cols,
                                          i64 w0, i64 w1, unsigned *bits)
{
    const int *r = idx + row * cols;
    for (int e = list_lower_bound(num, idx, row, cols, w0); e < num[row] && r[e] <= w1; e++)
        *bits |= 1u << (r[e] - w0);
}

/*
 * The tile walk: the first tile start >= from (tiles start at multiples of `step`) whose walk
 * elements hold a block that an own block of elements [own0, own_end) lists (either list);
 * `end` when none before it. Without BLOCK_SPARSE: from. Every thread reads the same lists, so
 * the result is uniform over the block.
 */
__device__ __forceinline__ i64 next_listed_tile(const block_lists &bl, const fa_kernel_params &p,
                                                const list_dir &d, i64 b, i64 h, i64 own0,
                                                i64 own_end, i64 from, int step, i64 end)
{
#if BLOCK_SPARSE
    i64 best = end;
    for (i64 ob = own0 / d.own_block; ob <= (own_end - 1) / d.own_block && from < best; ob++) {
        const i64 row = fa_block_list_row(&p, b, h, ob, d.rows), target = from / d.walk_block;
        i64 w = list_next(bl.num, bl.idx, row, d.cols, target);
#if SPARSE_FULL
        w = min(w, list_next(bl.full_num, bl.full_idx, row, d.cols, target));
#endif
        if (w == LIST_END)
            continue;
        const i64 first = w * d.walk_block; /* the block's first element */
        best = min(best, first <= from ? from : first / step * step);
    }
    return best;
#else
    (void)bl;
    (void)p;
    (void)d;
    (void)b;
    (void)h;
    (void)own0;
    (void)own_end;
    (void)step;
    (void)end;
    return from;
#endif
}

/* One own element's blocks over a tile's walk elements [start, start + len): bit j of `bits`
 * is walk block start / walk_block + j, listed (either list); `full`: every one of them is in
 * the full lists. Element c of the tile is in bit (off + c) >> shift. */
struct row_blocks {
    unsigned bits;
    bool full;
    int off, shift;
};

/* The row_blocks of own element `own` (none at or past own_len: it has no list row); a tile
 * spans at most 17 blocks (<= 256 elements over blocks of >= 16). Without BLOCK_SPARSE every
 * element is listed and none full. */
__device__ __forceinline__ row_blocks row_blocks_of(const block_lists &bl,
                                                    const fa_kernel_params &p,
                                                    const list_dir &d, i64 b, i64 h, i64 own,
                                                    i64 own_len, i64 start, int len)
{
    row_blocks rb = {~0u, false, 0, 0};
#if BLOCK_SPARSE
    const i64 w0 = start / d.walk_block, w1 = (start + (len > 0 ? len : 1) - 1) / d.walk_block;
    rb.bits = 0u;
    rb.off = (int)(start - w0 * d.walk_block);
    while (((i64)1 << rb.shift) < d.walk_block)
        rb.shift++;
    if (own >= own_len)
        return rb;
    const i64 row = fa_block_list_row(&p, b, h, own / d.own_block, d.rows);
    list_bits(bl.num, bl.idx, row, d.cols, w0, w1, &rb.bits);
#if SPARSE_FULL
    unsigned full = 0u;
    list_bits(bl.full_num, bl.full_idx, row, d.cols, w0, w1, &full);
    rb.bits |= full;
    rb.full = len > 0 && full == (~0u >> (31 - (int)(w1 - w0)));
#endif
#else
    (void)bl;
    (void)p;
    (void)d;
    (void)b;
    (void)h;
    (void)own;
    (void)own_len;
    (void)start;
    (void)len;
#endif
    return rb;
}

/* Whether element c of the tile is in a block its own element's lists name. */
__device__ __forceinline__ bool block_listed_at(const row_blocks &rb, int c)
{
    return !BLOCK_SPARSE || ((rb.bits >> ((rb.off + c) >> rb.shift)) & 1u) != 0;
}
