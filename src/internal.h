/*
 * internal.h - what the core and the backends share and users never see: the context, buffer
 * and plan structs, the backend interface, the planner and error helpers. Internal non-static
 * names use the fa__ prefix.
 */
#ifndef FA_INTERNAL_H
#define FA_INTERNAL_H

#include "flashattn.h"
#include "kernel_params.h"

#include <stdarg.h>
#include <stdbool.h>

/* ---- operations -------------------------------------------------------------------------- */

/*
 * What a plan computes. Each op names its on-chip formula, its tensors and its launches
 * (src/op_launches.c); a backend supports an op by running its launches. New ops are appended (the
 * backward, split-KV forward + combine, paged and varlen variants).
 */
typedef enum fa__op {
    FA__OP_FORWARD = 0, /* O, LSE = softmax(scale * Q K^T + mask) V: one launch, flash_fwd */
    FA__OP_BACKWARD,    /* dO -> dQ, dK, dV, recomputing P from LSE: flash_bwd_pre,
                           flash_bwd_dkdv and flash_bwd_dq (or one flash_bwd on the golden) */
    FA__OP_MERGE,       /* O, LSE from partial results: one flash_merge (fa_merge) */
    FA__OP_COUNT
} fa__op;

/* The tensors a launch may bind, in one numbering for every op; new ones are appended. */
typedef enum fa__tensor {
    FA__TENSOR_Q = 0,
    FA__TENSOR_K,
    FA__TENSOR_V,
    FA__TENSOR_O,
    FA__TENSOR_LSE,
    FA__TENSOR_DO,
    FA__TENSOR_DQ,
    FA__TENSOR_DK,
    FA__TENSOR_DV,
    FA__TENSOR_SCRATCH, /* device memory a run allocates for its launches (fa_plan_scratch_bytes) */
    FA__TENSOR_ALIBI,   /* the score modifiers' tensors (fa_modifier_buffers), bound only by */
    FA__TENSOR_BIAS,    /* launches of a plan whose problem turns them on */
    FA__TENSOR_SINKS,
    FA__TENSOR_DSINKS,
    FA__TENSOR_O_PARTS,     /* fa_merge's partial O and LSE (a split forward's are in scratch) */
    FA__TENSOR_LSE_PARTS,
    FA__TENSOR_CU_SEQLENS_Q, /* the sequence buffers (fa_seq_buffers), bound only by launches */
    FA__TENSOR_CU_SEQLENS_K, /* of a plan whose problem uses them */
    FA__TENSOR_SEQLENS_K,
    FA__TENSOR_BLOCK_TABLE,
    FA__TENSOR_KV_NUM_BLOCKS, /* block-sparse lists (flashattn_block_mask.h), bound only by */
    FA__TENSOR_KV_INDICES,    /* launches of a block-sparse plan */
    FA__TENSOR_FULL_KV_NUM_BLOCKS,
    FA__TENSOR_FULL_KV_INDICES,
    FA__TENSOR_Q_NUM_BLOCKS,
    FA__TENSOR_Q_INDICES,
    FA__TENSOR_FULL_Q_NUM_BLOCKS,
    FA__TENSOR_FULL_Q_INDICES,
    FA__TENSOR_COUNT
} fa__tensor;

/*
 * On-chip bytes one work-group holds, as a function of the tiles:
 *   (row_tiles * Br * d + col_tiles * Bc * d) * elem + score_tiles * Br * Bc * 4
 *     + row_floats * Br * 4
 * with elem the storage size and score tiles in f32.
 */
typedef struct fa__onchip_formula {
    uint32_t row_tiles;   /* Br x d tiles in the storage type (forward: Q) */
    uint32_t col_tiles;   /* Bc x d tiles in the storage type (forward: K and V) */
    uint32_t score_tiles; /* Br x Bc f32 tiles (forward: S; 0 when the kernel keeps S in
                             registers) */
    uint32_t row_floats;  /* f32 values per query row of a tile (backward: LSE and D) */
    uint32_t tile_bytes;  /* bytes of a row or col tile's element: 0, the storage type's;
                             4 where the kernel converts tiles to f32 as it loads them */
    uint32_t row_pad;     /* elements a row or col tile's rows hold past d (padding that moves
                             each row to other shared-memory banks); 0: none */
    const char *what;     /* the tiles, named for the explanation */
} fa__onchip_formula;

/* ---- planner (src/planner.c): a pure function of (device props, rules, problem) ---------- */

struct fa__launch;

/* How tiles may be shaped: the kernel's lanes, limits and measured preferences (a backend's
 * preferences are rows of its table, each with its reason: docs/extending.md). */
typedef struct fa__shape_rules {
    uint32_t items_per_row; /* work-items per query row; 0: work-group size is 1 (CPU) */
    uint32_t tile_multiple; /* Br and Bc above it are rounded down to a multiple of it (>= 1) */
    uint32_t max_block_c;   /* 0: no limit; else the kernel's largest Bc */
    uint32_t pref_block_c;  /* 0: none; else a measured preference below max_block_c, which the
                               planner applies only where Bc is not overridden */
    const char *pref_block_c_why; /* why, for the explanation */
    uint32_t pref_block_r;  /* 0: none; else Br's preferred limit, applied where Br is not
                               overridden (the minimums below may raise it again) */
    const char *pref_block_r_why; /* why, for the explanation */
    uint32_t block_r_divides; /* 0: none; else a power of two that Br, where not overridden,
                                 divides or is a multiple of in the end (a mask's block_q) */
    uint32_t block_c_divides; /* 0: none; else a power of two that Bc, where not overridden,
                                 must divide in the end (a block mask's block_k) */
    uint32_t max_block_r;   /* 0: no limit; else the kernel's largest Br */
    uint32_t min_block_r;   /* 0: none; else Br below it is raised towards it after the fit,
                               as far as the sequence, the work-group limit and the on-chip
                               memory allow at the planned Bc (never past an override) */
    uint32_t min_work_group; /* 0: none; else Br is raised so a work-group has at least this
                                many items, shrinking Bc to make room (never past an override,
                                the sequence or the budget) */
    int32_t row_lanes;      /* lanes that share one query row in the kernel; 0: items_per_row */
    int32_t lanes_divide;   /* 1: the items_per_row lanes of a row split its Bc keys and d dims,
                               so the planner halves them until they divide both; 2: Br too
                               (a backward whose key pass splits Br-row query tiles between a
                               key's lanes) */
    int32_t pow2_clamp;     /* 1: tiles longer than a short sequence shrink to the next power
                               of two at or above its length, not to the length, so a growing
                               sequence needs few distinct kernel builds */
} fa__shape_rules;

/* What the tiles may hold on chip. */
typedef struct fa__memory_rules {
    fa__onchip_formula onchip; /* the op's formula (the core fills it first) */
    uint64_t sram_budget;   /* 0: all of the device's on-chip memory; else the tiles' budget
                               (less, so several work-groups stay resident on a GPU) */
    const char *budget_note; /* why that budget, for the explanation */
} fa__memory_rules;

/* Which kernel paths the backend has, chosen by the core before or from the sized tiles. */
typedef struct fa__path_rules {
    const char *path_note;  /* why that path, for the explanation; NULL: nothing to say */
    /* The backward's launches: 3 (the kernels: D = rowsum(dO * O) into scratch, then a dK/dV
     * pass over key tiles and a dQ pass over query tiles) or 1 (the CPU golden's one flash_bwd
     * in f64, its accumulators in scratch). */
    int32_t backward_launches;
    int32_t split_kv;       /* 1: the planner may split a forward's keys to fill the device
                               (kv_splits overrides apply either way) */
    int32_t gqa_pack;       /* 1: a forward that fa__gqa_pack accepts runs packed: a K/V head's
                               query heads as one tile's rows, so its K and V are read once per
                               group, not once per query head */
    /* The in-place path, decided by the core from the sized tiles: a forward whose tiles hold
     * at most in_place_rows rows at one lane a row runs one work-item per tile that reads K and
     * V where they are, declaring on chip only what in_place_onchip counts (Q and S); 0: no
     * such path. A one-row decode may be heads-packed (fa__heads_pack, where K and V hold a
     * key's heads together and its work-groups, batch x key chunks, fill the compute units)
     * only onto it, up to in_place_rows heads. */
    uint32_t in_place_rows;
    fa__onchip_formula in_place_onchip;
    /* The register-blocked path: 1 where a forward that does not run in place may run one
     * work-item per tile multiplying register blocks of rows over K^T and V tiles, declaring on
     * chip what reg_blocked_onchip counts, where that fits the budget; 0: no such path. */
    int32_t reg_blocked;
    fa__onchip_formula reg_blocked_onchip;
    int32_t dkdv_owns_br;   /* 1: where Br > Bc and Sk >= Br, the backward's dK/dV pass owns Br
                               keys per work-group and streams Bc-row query tiles, so each tile
                               it loads serves Br keys; 0 (and otherwise): it owns Bc keys and
                               streams Br-row query tiles. The on-chip formula bounds both */
    /* The bytes of scratch a launch of the backend's own needs beyond the op's (the golden's
     * f64 accumulators), placed at the next multiple of 8 after them; NULL: none. */
    uint64_t (*launch_scratch)(fa__op op, const struct fa__launch *launch);
} fa__path_rules;

/* How the backend builds every kernel of a plan, fixed before the tiles are sized and copied
 * into each launch's variant (fa__kernel_variant has the defines they become). */
typedef struct fa__build_rules {
    int32_t mma;          /* 1: the tensor-core path (MMA); 0: the kernel's default path */
    int32_t vector_width; /* VEC_MAX: the widest float vector; 0: not a define */
    int32_t gpu;          /* GPU=1: GPU-only unrolling and layouts */
    int32_t tile_f32;     /* TILE_F32=1: f16 / bf16 tiles held as f32 on chip */
    int32_t pipeline;     /* PIPELINE=1: the forward's asynchronous, double-buffered K/V copies
                             into padded tiles (CUDA's tensor-core path) */
} fa__build_rules;

/* What a backend's kernel for an op asks of a plan, beyond the device's props, in four parts.
 * The core fills memory.onchip with the op's formula before the backend's plan_rules sees it. */
typedef struct fa__plan_rules {
    fa__shape_rules shape;
    fa__memory_rules memory;
    fa__path_rules paths;
    fa__build_rules build;
} fa__plan_rules;

typedef struct fa__tiles {
    int32_t block_r;         /* Br */
    int32_t block_c;         /* Bc */
    int32_t work_group_size; /* work-items per work-group: Br * row_lanes */
    int32_t row_lanes;       /* work-items per query row (items_per_row, fitted) */
    uint64_t sram_bytes;     /* the op's on-chip formula at (Br, Bc) */
} fa__tiles;

/*
 * Plans tiles for a problem already validated by fa__problem_validate. The problem's block_r /
 * block_c are overrides (0: none). Writes each step into explain (may be NULL). Returns
 * FA_STATUS_OK, SRAM_TOO_SMALL or INVALID_TILE, with the reason in `why`.
 */
fa_status fa__plan_tiles(const fa_device_props *dev, const fa__plan_rules *rules,
                         const fa_problem *p, fa__tiles *out, char *explain, size_t explain_size,
                         char *why, size_t why_size);
/* The most elements a tensor, a bias's span or scratch may cover, so every offset, stride and
 * extent the kernels compute fits in 64 bits. */
#define FA__MAX_ELEMS ((int64_t)1 << 60)
/* A split-KV chunk holds at least this many key tiles; a plan makes at most this many. */
#define FA__MIN_SPLIT_TILES 4
#define FA__MAX_KV_SPLITS 64

/*
 * Key chunks for a forward planned at tiles t: the problem's kv_splits override, else (when the
 * rules allow splitting) enough chunks for two work-groups per compute unit when the query
 * tiles alone are fewer than the compute units; never more chunks than key tiles. Each step is
 * appended to explain. 1: no split.
 */
int32_t fa__plan_kv_splits(const fa_device_props *dev, const fa__plan_rules *rules,
                           const fa_problem *p, const fa__tiles *t, char *explain,
                           size_t explain_size);
/* The on-chip formula at (Br, Bc, d) for a storage size elem. */
uint64_t fa__tile_bytes(const fa__onchip_formula *f, int64_t block_r, int64_t block_c,
                        int64_t head_dim, size_t elem);

/* ---- kernels and launches (src/op_launches.c) --------------------------------------------- */

/*
 * How a launch's kernel is specialised. fa__variant_defines spells it as compiler definitions,
 * the one place that does: the -D options of the OpenCL and CUDA builds and the key of their
 * caches. Shape fields are copied from the launch's params, so the kernel's constants and its
 * params cannot disagree.
 */
/* The kernels, by identity: each backend maps one to its program and function; the name is
 * the kernel function's in every kernel language (fa__kernel_entry). */
typedef enum fa__kernel {
    FA__KERNEL_FWD = 0,     /* flash_fwd: the forward, or a split forward's chunks */
    FA__KERNEL_MERGE,       /* flash_merge: partial results by LSE */
    FA__KERNEL_BWD_PRE,     /* flash_bwd_pre: D = rowsum(dO * O) */
    FA__KERNEL_BWD_DKDV,    /* flash_bwd_dkdv: the dK/dV pass */
    FA__KERNEL_BWD_DQ,      /* flash_bwd_dq: the dQ pass */
    FA__KERNEL_BWD_DSINKS,  /* flash_bwd_dsinks: the sinks' gradient */
    FA__KERNEL_BWD_GOLDEN,  /* flash_bwd: the cpu golden's whole backward */
    FA__KERNEL_COUNT
} fa__kernel;

/* The kernel function's name: "flash_fwd", ... */
const char *fa__kernel_entry(fa__kernel kernel);

typedef struct fa__kernel_variant {
    fa__kernel kernel;       /* which kernel (its function: fa__kernel_entry) */
    int32_t head_dim;        /* HEAD_DIM */
    int32_t block_r;         /* BLOCK_R: Br */
    int32_t block_c;         /* BLOCK_C: Bc */
    int32_t dtype;           /* DTYPE: fa_dtype */
    int32_t mask;            /* MASK: fa_mask */
    int32_t work_group_size; /* WG_SIZE: work-items per work-group */
    int32_t row_lanes;       /* TPR: lanes that share one query row */
    int32_t mma;             /* MMA: 1 = the tensor-core path (CUDA) */
    int32_t vector_width;    /* VEC_MAX: the widest float vector the kernel uses (OpenCL);
                                0: not a define of this kernel */
    int32_t features;        /* FEATURES: FA_FEATURE_* bits of the score modifiers and dropout
                                (0: a define only when nonzero, so plain kernels keep their key) */
    int32_t bias_dtype;      /* BIAS_DTYPE: fa_dtype of the bias, with FA_FEATURE_BIAS */
    int32_t seq;             /* SEQ: FA_SEQ_* bits (a define only when nonzero) */
    int32_t split;           /* SPLIT=1: flash_fwd writes f32 partials (a define only when 1) */
    int32_t parts_dtype;     /* PARTS_DTYPE (flash_merge's only): fa_dtype of its partial O */
    int32_t gpu;             /* GPU=1: the device is a GPU (OpenCL; a define only when 1) */
    int32_t direct_kv;       /* DIRECT_KV=1: flash_fwd reads K and V in global memory, no
                                local tiles (OpenCL; a define only when 1) */
    int32_t tile_f32;        /* TILE_F32=1: f16 / bf16 local tiles hold f32, converted as they
                                are loaded (OpenCL; a define only when 1) */
    int32_t head_rows;       /* HEAD_ROWS: query rows per K/V head of a heads-packed problem
                                (fa__heads_pack; a define only when nonzero) */
    int32_t packed;          /* PACKED=1: flash_fwd of a GQA- or heads-packed problem, whose
                                rows are query heads (a define only when 1) */
    int32_t pipeline;        /* PIPELINE=1: flash_fwd's double-buffered asynchronous K/V copies
                                (CUDA tensor cores; a define only when 1) */
    int32_t sparse_full;     /* SPARSE_FULL=1: a block-sparse kernel reads the full lists too
                                (a define only when 1) */
    int32_t reg_blocked;     /* REG_BLOCKED=1: flash_fwd's register-blocked path, one work-item
                                per tile (OpenCL CPUs; a define only when 1) */
} fa__kernel_variant;

/* Writes "<prefix>HEAD_DIM=64 <prefix>BLOCK_R=..." for a variant (prefix "-D " for OpenCL C,
 * "-D" for NVRTC). */
void fa__variant_defines(const fa__kernel_variant *v, const char *prefix, char *dst, size_t size);
/* The OpenCL build options of a variant, "-cl-std=CL1.2 -D HEAD_DIM=..": what the OpenCL
 * backend builds (and caches by) and what tools/cl_variants prints for the GPU compile check. */
#define FA__CL_OPTIONS_SIZE 320
void fa__cl_build_options(const fa__kernel_variant *v, char *dst, size_t size);

#define FA__MAX_LAUNCH_ARGS 18

/* One kernel launch of a plan, complete at plan time: running it only binds buffers. */
typedef struct fa__launch {
    fa__kernel_variant variant;
    uint64_t grid[3];        /* work-groups: x query tiles, y query heads, z batch */
    uint64_t onchip_bytes;   /* dynamic on-chip (local / shared) memory of one work-group */
    fa_kernel_params params; /* filled by fa_plan_create; has_lse is set per run */
    fa__tensor args[FA__MAX_LAUNCH_ARGS]; /* the kernel's buffer arguments, in order; params
                                             follow them */
    int n_args;
    void *backend_data;      /* the compiled kernel, owned by the context's cache */
    uint32_t kernel_wg_limit; /* set by a launch_prepare that fails because the compiled kernel
                                 allows fewer work-items per work-group than the plan (OpenCL's
                                 CL_KERNEL_WORK_GROUP_SIZE): the core re-plans once within it */
} fa__launch;

/* ---- layouts (src/layout.c) -------------------------------------------------------------- */

/* (n - 1) * stride for a count n >= 1 and a stride in [0, 2^60], or UINT64_MAX when it passes
 * 2^60: the product of a count below 2^31 and such a stride would not fit in 64 bits. */
uint64_t fa__step_span(int64_t n, int64_t stride);
/* Elements a tensor spans from element 0 of its buffer: offset + last index + 1 (0 if empty);
 * UINT64_MAX when that passes 2^60 (validation rejects such a layout: INVALID_STRIDE). */
uint64_t fa__layout_extent(const fa_tensor_layout *t, int64_t batch, int64_t heads, int64_t seq,
                           int64_t head_dim);
/* The rows one side of a problem spans: batch (the pages when paged, 1 when varlen), heads and
 * seq (page_size when paged, the packed tokens when varlen). */
typedef struct fa__dims {
    int64_t batch, heads, seq;
} fa__dims;
/* Q's side (Q, O, dO, dQ) and K's side (K, V, dK, dV); total_*: varlen's packed rows (the
 * longest sequence stands in at plan time). */
fa__dims fa__q_dims(const fa_problem *p, int64_t total_q);
fa__dims fa__kv_dims(const fa_problem *p, int64_t total_k);
/* A tensor layout as the kernels use it: varlen's stride_batch is 0. */
fa_tensor_layout fa__layout_used(const fa_problem *p, const fa_tensor_layout *t);
/* Elements a tensor spans at dims (fa__layout_extent of the layout used). */
uint64_t fa__tensor_extent(const fa_problem *p, const fa_tensor_layout *t, fa__dims dims);

/* ---- validation (src/problem.c) ---------------------------------------------------------- */

/* Checks every field of a problem; on failure sets ctx's error (ctx may be NULL) and returns it. */
fa_status fa__problem_validate(fa_context *ctx, const fa_problem *p);
/* fa__problem_validate, then the dO, dQ, dK and dV layouts (dQ, dK, dV rows must not overlap). */
fa_status fa__problem_validate_backward(fa_context *ctx, const fa_problem *p);
/* The softmax scale the problem resolves to. */
float fa__problem_scale(const fa_problem *p);

/* The layouts of Q, K, V, O (and dO, dQ, dK, dV when backward) at the given packed rows. */
fa_status fa__tensors_validate(fa_context *ctx, const fa_problem *p, int64_t total_q,
                               int64_t total_k, bool backward);

/* ---- packing (src/packing.c) ------------------------------------------------------------- */

/*
 * GQA packing of a one-row decode: where every query head of a K/V head group sees the same keys
 * with the same scores' rules, the group's G query heads become G query rows of one head:
 * heads_q -> heads_kv, seqlen_q 1 -> G, Q and O strides rewritten, LSE at the same indices.
 * Writes the packed problem to `out` and returns true when `p` allows it: a dense (not varlen)
 * forward with seqlen_q 1 and G > 1, no mask or causal bottom-right (row 0 sees every key
 * either way; packed, no mask), and no bias or dropout (they read the head and row through
 * their own indices). Softcap, ALiBi, a window and sinks are the kernel's to apply per packed
 * row: its query head's slope and sink, row 0's window and distances (OpenCL's PACKED).
 */
bool fa__gqa_pack(const fa_problem *p, fa_problem *out);
/*
 * Heads packing of a one-row decode: every query head of a sequence becomes a query row of one
 * head (heads_q, heads_kv -> 1, seqlen_q 1 -> Hq, Q and O strides rewritten, LSE at the same
 * indices), and the kernel reads row h's K and V at K/V head h / G (G = Hq / Hkv) through the
 * K and V head strides the packed problem keeps. Where p allows it as fa__gqa_pack does (any
 * G >= 1) and Hq <= max_rows, writes the packed problem to `out` and returns G; else 0.
 */
int64_t fa__heads_pack(const fa_problem *p, int64_t max_rows, fa_problem *out);

/* ---- kernel params (src/kernel_params.c) ------------------------------------------------- */

/* Fills the kernel params of a plan's problem (validated, scale resolved) for its Br. */
void fa__kernel_params_fill(const fa_problem *p, int32_t block_r, fa_kernel_params *kp);
/* Adds the backward's dO, dQ, dK and dV layouts to filled params. */
void fa__kernel_params_fill_backward(const fa_problem *p, fa_kernel_params *kp);

/* ---- sequences (src/sequences.c) --------------------------------------------------------- */

/* The FA_SEQ_* bits a problem uses. */
unsigned fa__problem_seq(const fa_problem *p);
/* Checks the varlen, seqlens_k, paged and kv_splits fields (called by fa__problem_validate). */
fa_status fa__seq_validate(fa_context *ctx, const fa_problem *p);
/* Fills the sequence fields of kernel params (LSE strides, varlen's zero batch strides, pages). */
void fa__kernel_params_fill_seq(const fa_problem *p, fa_kernel_params *kp);
/* Checks the int32 sequence buffers a run must check (INVALID_SEQLENS, INVALID_BLOCK_TABLE):
 * varlen's always, seqlens_k and the block table where they are host memory or the context
 * asks; *total_q, *total_k: varlen's packed rows, else seqlen_q, seqlen_k. */
fa_status fa__seq_check_run(fa_context *ctx, const fa_problem *p, const fa_seq_buffers *seqs,
                            int64_t *total_q, int64_t *total_k);

/* ---- score modifiers and dropout (src/modifiers.c) --------------------------------------- */

/* The FA_FEATURE_* bits a problem turns on. */
unsigned fa__problem_features(const fa_problem *p);
/* "softcap", "alibi", ... for one bit. */
const char *fa__feature_name(unsigned bit);
/* "softcap, window" for a set of bits; "none" for 0. */
void fa__features_spell(unsigned features, char *dst, size_t size);
/* Checks the modifier and dropout fields (called by fa__problem_validate). */
fa_status fa__modifiers_validate(fa_context *ctx, const fa_problem *p);
/* Fills the modifier and dropout fields of kernel params from a validated problem. */
void fa__kernel_params_fill_modifiers(const fa_problem *p, fa_kernel_params *kp);

/* ---- positions: a block of a longer problem (src/positions.c) ---------------------------- */

/* The whole sequences' lengths (whole_seqlen_q/k, or the block's end when 0). */
int64_t fa__whole_seqlen_q(const fa_problem *p);
int64_t fa__whole_seqlen_k(const fa_problem *p);
/* Whether any position field is set. */
bool fa__positioned(const fa_problem *p);
/* Checks the position fields (called by fa__problem_validate; OK when off). */
fa_status fa__positions_validate(fa_context *ctx, const fa_problem *p);
/* Fills the position fields of kernel params (zero when off). */
void fa__kernel_params_fill_positions(const fa_problem *p, fa_kernel_params *kp);

/* ---- block-sparse attention (src/block_sparse.c) ----------------------------------------- */

/* Checks the block-sparse fields (called by fa__modifiers_validate; OK when off). */
fa_status fa__block_sparse_validate(fa_context *ctx, const fa_problem *p);
/* Fills the block-sparse fields of kernel params (zero when off). */
void fa__block_sparse_params(const fa_problem *p, fa_kernel_params *kp);
/* Whether an op of the problem reads a block-sparse list tensor. */
bool fa__block_sparse_role(const fa_problem *p, fa__op op, fa__tensor tensor);
/* The int32 entries of a block-sparse list tensor of the problem. */
uint64_t fa__block_sparse_ints(const fa_problem *p, fa__tensor tensor);
/* A run's lists read back and checked (fa_block_mask_check, and full blocks wholly inside the
 * causal mask and the window): FA_STATUS_INVALID_BLOCK_MASK, nothing written. */
fa_status fa__block_sparse_check_run(fa_context *ctx, const fa_plan *plan, const fa_tensors *t);

/* ---- backends ---------------------------------------------------------------------------- */

#define FA__BACKEND_API_VERSION 2

/*
 * A backend: a table of functions, written with designated initializers. Slots marked optional
 * may be NULL. New slots are only ever appended. `state` is what context_open returned; buffer
 * memory `mem` is what buffer_alloc returned (a host pointer on the CPU backend, a cl_mem on
 * OpenCL, ...).
 */
typedef struct fa__backend_ops {
    int api_version;    /* FA__BACKEND_API_VERSION */
    fa_backend backend; /* which backend this is */
    unsigned supported_ops; /* bit (1u << op) for each fa__op the backend runs */
    /* Devices offered; BACKEND_UNAVAILABLE with a reason when there are none. */
    fa_status (*device_count)(int *count, char *why, size_t why_size);
    /* Properties of one device; DEVICE_NOT_FOUND for a bad index. */
    fa_status (*device_props)(int index, fa_device_props *out, char *why, size_t why_size);
    /* The kernel's demands on a plan of `op` for this device and problem; rules->onchip holds
     * the op's formula, which the backend may lower (S in registers). */
    void (*plan_rules)(const fa_device_props *dev, const fa_problem *p, fa__op op,
                       fa__plan_rules *rules);
    /* Opens a device for a context; errors go to ctx. */
    fa_status (*context_open)(fa_context *ctx, int device, void **state);
    /* Releases what context_open made. */
    void (*context_close)(void *state);
    /* Allocates device memory; OUT_OF_MEMORY when it cannot. */
    fa_status (*buffer_alloc)(fa_context *ctx, size_t bytes, void **mem);
    /* Frees device memory from buffer_alloc. */
    void (*buffer_free)(fa_context *ctx, void *mem);
    /* Host to device copy at a byte offset (bounds already checked). */
    fa_status (*buffer_write)(fa_context *ctx, void *mem, size_t offset, const void *src,
                              size_t bytes);
    /* Device to host copy at a byte offset (bounds already checked). */
    fa_status (*buffer_read)(fa_context *ctx, void *mem, size_t offset, void *dst, size_t bytes);
    /* Optional: backend-specific support check of a validated problem. */
    fa_status (*problem_check)(fa_context *ctx, const fa_problem *p);
    /* Optional: readies one launch of a final plan (finds or builds its kernel, checks what the
     * compiled kernel allows) and sets launch->backend_data; the plan itself is read-only. */
    fa_status (*launch_prepare)(fa_context *ctx, const fa_plan *plan, fa__launch *launch);
    /* Runs one launch and waits for it. `mem` holds every tensor of the op (buffer memory as
     * buffer_alloc returned it); kp is the launch's params with the per-run fields set. */
    fa_status (*launch)(fa_context *ctx, const fa_plan *plan, const fa__launch *launch,
                        const fa_kernel_params *kp, void *const mem[FA__TENSOR_COUNT]);
    /* Optional: known props of an architecture, for planning-only contexts
     * (fa_context_create_planning); INVALID_ARGUMENT listing the known ones. */
    fa_status (*arch_props)(const char *arch, fa_device_props *out, char *why, size_t why_size);
    /* The FA_FEATURE_* bits (score modifiers, dropout) the backend's launches of each op run;
     * a problem using another is UNSUPPORTED, named, at plan time. */
    unsigned supported_features[FA__OP_COUNT];
    /* Optional: where a buffer's bytes live, so that two handles of the same memory (two wraps
     * of one pointer, a cl_mem and its sub-buffer) are seen to overlap: *space names an address
     * space (NULL: the host's or the device's flat one), *addr the first byte in it. Without
     * it a buffer is its own space from 0. */
    void (*buffer_region)(fa_context *ctx, void *mem, const void **space, uint64_t *addr);
    /* Optional (the cpu backend wraps host memory itself): caller host memory as the backend's
     * buffer, without a copy; the caller keeps the array. Absent: fa_buffer_wrap_host is
     * FA_STATUS_UNSUPPORTED. */
    fa_status (*buffer_wrap_host)(fa_context *ctx, void *ptr, size_t bytes, void **mem);
    /* With buffer_wrap_host: makes the host's writes to a wrapped array visible to the device
     * and the device's to the host, in order with the launches (a run calls it before and after
     * them); `finish`: and waits for everything queued. */
    fa_status (*host_view_sync)(fa_context *ctx, void *mem, size_t bytes, bool finish);
} fa__backend_ops;

/* AUTO's device within a backend (src/context.c): its first GPU, else its first device whose
 * properties can be read, else 0; appends the choice and any device passed over to note. */
int fa__auto_device(const fa__backend_ops *ops, char *note, size_t note_size);

/* The registry (src/registry.c): the ops of a built-in backend, or NULL. */
const fa__backend_ops *fa__backend_ops_get(fa_backend backend);

/* ---- objects ----------------------------------------------------------------------------- */

#define FA__BACKEND_NOTE_SIZE 1024

struct fa_context {
    const fa__backend_ops *ops;
    void *state; /* backend's */
    int device;
    fa_device_props props;
    char *error; /* heap message of the last failure, or NULL */
    /* The last failure's code and generic message when its detailed one could not be allocated,
     * so a failure never reads as success; "" otherwise. */
    char error_fallback[160];
    /* How FA_BACKEND_AUTO chose the backend (fa_context_backend_note); "" otherwise. */
    char backend_note[FA__BACKEND_NOTE_SIZE];
    uint64_t mem_current;
    uint64_t mem_peak;
    bool check_sequences; /* fa_context_set_check_sequences */
    /* The runs' scratch, kept between runs and grown to the largest a run needed (counted in
     * mem_current), so a run neither allocates nor frees: a GPU's free waits for the device.
     * fa_context_release_scratch and fa_context_destroy free it. */
    void *scratch;
    uint64_t scratch_bytes;
};

struct fa_buffer {
    fa_context *ctx;
    void *mem;
    size_t bytes;
    bool wrapped;  /* caller memory: not counted in the context's bytes */
    bool borrowed; /* host memory wrapped on the CPU backend: never handed to buffer_free */
    bool host_view; /* host memory a backend's buffer_wrap_host wrapped: synchronised around
                       each run (host_view_sync) */
    const void *space; /* where its bytes live (fa__backend_ops.buffer_region): two buffers */
    uint64_t addr;     /* overlap when their spaces match and [addr, addr + bytes) meet */
};

#define FA__MAX_LAUNCHES 4

/* The launches of one op on one problem and device, decided once by fa_plan_create. */
struct fa_plan {
    fa_context *ctx;
    fa__op op;
    fa_problem problem; /* scale resolved, overrides as applied */
    fa_problem kernel_problem; /* what the launches run: problem, or its GQA or heads packing */
    int32_t head_rows;         /* heads packing's G (fa__heads_pack); 0: not heads-packed */
    int32_t packed;            /* 1: kernel_problem is GQA- or heads-packed */
    int32_t in_place;          /* 1: the forward runs the rules' in-place path */
    int32_t reg_blocked;       /* 1: the forward runs the rules' register-blocked path */
    fa__tiles tiles;
    fa__launch launches[FA__MAX_LAUNCHES];
    int n_launches;
    uint64_t scratch_bytes; /* FA__TENSOR_SCRATCH, allocated by each run (0: none): set by the
                               op's launches, then the backend's own after scratch_base bytes
                               (rules->paths.launch_scratch) */
    uint64_t scratch_base;  /* bytes of scratch the op's launches use (a split forward's
                               partials, the backward's D); a backend's own scratch starts at
                               the next multiple of 8 */
    uint64_t scratch_row_bytes; /* the op's scratch per query row: scratch_base at B x Hq x Sq
                                   rows, more for a varlen run (fa__run_scratch_bytes) */
    int32_t kv_splits;      /* a forward's key chunks (1: not split); a merge plan's parts */
    char explain[4096];
};

/* Builds the launches of plan->op from plan->problem and plan->tiles (src/op_launches.c). */
void fa__op_launches(fa_plan *plan, const fa__plan_rules *rules);
/* A launch's params for one run: has_lse and, for varlen, the run's packed rows total_q (LSE's
 * head stride, and a split's partials laid out for its tokens). */
void fa__run_params(const fa_plan *plan, const fa__launch *l, bool has_lse, int64_t total_q,
                    fa_kernel_params *kp);
/* The scratch one run allocates: fa_plan_scratch_bytes, or more for a varlen run whose tokens
 * (cu_seqlens_q[batch], past batch x seqlen_q when cu_seqlens_q[0] > 0) index more rows. */
uint64_t fa__run_scratch_bytes(const fa_plan *plan, int64_t total_q);
/* Where a backend's own scratch starts in a run whose params fa__run_params gave (bytes). */
uint64_t fa__run_own_scratch_offset(const fa_plan *plan, const fa_kernel_params *kp);
/* The op's on-chip formula before a backend lowers it. */
fa__onchip_formula fa__op_onchip(fa__op op);

/* ---- errors (src/errors.c), memory accounting (src/context.c) ---------------------------- */

/* Records "message" as the context's last error and returns status. ctx may be NULL. */
fa_status fa__error(fa_context *ctx, fa_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Records a long message (a build log) as is. */
fa_status fa__error_text(fa_context *ctx, fa_status status, const char *text);
/* Clears the last error (a call that succeeds leaves ""). */
void fa__error_clear(fa_context *ctx);
void fa__mem_add(fa_context *ctx, uint64_t bytes);
void fa__mem_sub(fa_context *ctx, uint64_t bytes);

/*
 * Makes a context around a backend state that is already open (interop: a caller's OpenCL
 * context or CUDA stream). On failure the state is closed with ops->context_close.
 */
fa_status fa__context_adopt(fa_context **out, const fa__backend_ops *ops, int device, void *state,
                            const fa_device_props *props, char *why, size_t why_size);
/*
 * Makes a buffer around backend memory. wrapped = true: caller memory, not counted in the
 * context's bytes; fa_buffer_destroy still calls ops->buffer_free (backends retain what they
 * wrap), except for host memory wrapped on the CPU backend.
 */
fa_status fa__buffer_adopt(fa_context *ctx, void *mem, size_t bytes, bool wrapped,
                           fa_buffer **out);

/* The most a kernel source file read through FLASHATTN_KERNEL_DIR may hold. */
#define FA__KERNEL_FILE_MAX ((size_t)16 << 20)

/*
 * Reads a regular file of 1 to max_bytes bytes into a NUL-terminated heap string (*len bytes
 * before the NUL). NULL with the reason, naming the path, in `why` for anything else: a missing
 * or unreadable file, a directory, a FIFO or device (never waited on), an empty or larger file.
 */
char *fa__read_file(const char *path, size_t max_bytes, size_t *len, char *why, size_t why_size);

/* snprintf into a fixed buffer that may be NULL; always terminates. */
void fa__format(char *dst, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Appends to a NUL-terminated buffer, truncating. */
void fa__append(char *dst, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif /* FA_INTERNAL_H */
