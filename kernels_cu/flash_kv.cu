/*
 * flash_kv.cu - where a work item's keys are and how its K/V tiles reach shared memory (CUDA,
 * compiled at run time by NVRTC after flash_common.cu, before flash_fwd.cu): the key rows of a
 * head (dense, varlen or paged through the block table), the synchronous tile copies of both
 * forward paths and the backward's dQ pass, and the tensor-core forward's pipelined variant
 * (PIPELINE=1): two K/V buffers, the next tile's cp.async copy in flight while this one is used.
 * Alone it includes flash_common.cu (-I src -I kernels_cu).
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
 * (the previous tile), the copy of the next tile into it starts; then this tile's copy (buffer
 * buf, started one tile earlier) is awaited. */
__device__ __forceinline__ void next_kv_tiles(store_t *kv_tiles, const kv_rows &kv,
                                              const fa_kernel_params &p, i64 k0, i64 kv_end,
                                              int buf, const store_t **k_tile,
                                              const store_t **v_tile)
{
#if PIPELINE
    __syncthreads();
    if (k0 + BLOCK_C < kv_end)
        issue_kv(kv_tiles, buf ^ 1, kv, p, k0 + BLOCK_C);
    else
        cp_async_commit(); /* an empty group, so that waiting for all but one waits for this */
    cp_async_wait_newest();
    __syncthreads();
    *k_tile = kv_buffer(kv_tiles, buf);
#else
    (void)kv_end;
    (void)buf;
    load_kv_tiles(kv_tiles, kv_tiles + BLOCK_C * HEAD_DIM, kv, p, k0, false);
    *k_tile = kv_tiles;
#endif
    *v_tile = *k_tile + BLOCK_C * TILE_LD;
}
