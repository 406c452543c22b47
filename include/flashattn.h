/*
 * flashattn.h - the public C API of flashattn, a portable FlashAttention library.
 *
 * This header is the reference documentation. The lifecycle of a call is:
 *
 *   fa_context_create   pick a backend (CPU, OpenCL, CUDA) and a device
 *   fa_buffer_create    memory owned by the context (or fa_buffer_wrap_host on the CPU backend)
 *   fa_problem_init     describe shapes, layout, dtype, mask and scale
 *   fa_plan_create      choose the tiles from the device's on-chip memory; inspectable
 *   fa_forward          run the online-softmax tile loop: O = softmax(Q K^T * scale) V
 *
 * Every function that can fail returns an fa_status. On failure the detailed message is kept in
 * the context (fa_context_last_error). The library never aborts, exits or prints; outputs are
 * left untouched when an argument is rejected.
 *
 * Thread safety: different contexts may be used from different threads at once. One context
 * (and its buffers and plans) must be used by one thread at a time.
 */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FLASHATTN_SHARED_BUILD)
#define FA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH" (of the library that is linked, not the header). */
FA_API const char *fa_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Status codes                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* One list generates the enum, fa_status_name and fa_status_message. New codes are appended. */
#define FA_STATUS_MAP(X)                                                                        \
    X(OK, "success")                                                                            \
    X(INVALID_ARGUMENT, "invalid argument")                                                     \
    X(NULL_POINTER, "a required pointer argument is NULL")                                      \
    X(INVALID_SHAPE, "invalid shape: a size is negative or too large")                          \
    X(INVALID_STRIDE, "invalid stride, offset or layout")                                       \
    X(BUFFER_TOO_SMALL, "a buffer is too small for the problem's layout")                       \
    X(UNSUPPORTED_DTYPE, "unsupported data type")                                               \
    X(UNSUPPORTED_HEAD_DIM, "unsupported head dimension")                                       \
    X(HEADS_MISMATCH, "heads_q is not a multiple of heads_kv")                                  \
    X(SRAM_TOO_SMALL, "the device's on-chip memory is too small for any tile plan")             \
    X(OUT_OF_MEMORY, "out of memory")                                                           \
    X(BACKEND_UNAVAILABLE, "the backend is not built in or has no usable device")               \
    X(DEVICE_NOT_FOUND, "no device with that index")                                            \
    X(DEVICE_ERROR, "the device or its driver reported an error")                               \
    X(KERNEL_BUILD_ERROR, "the kernel failed to compile for this device")                       \
    X(INVALID_MASK, "invalid mask mode")                                                        \
    X(INVALID_SCALE, "the softmax scale is not a finite number")                                \
    X(INVALID_TILE, "a tile size override is invalid")                                          \
    X(CONTEXT_MISMATCH, "a plan or buffer belongs to another context")                          \
    X(UNSUPPORTED, "the backend cannot run this problem")                                     \
    X(INVALID_PLAN, "the plan was made for another operation")                                \
    X(INVALID_DROPOUT, "the dropout probability is not in [0, 1)")                             \
    X(INVALID_SOFTCAP, "the logit softcap is not 0 or in [1e-18, 1e18]")                       \
    X(INVALID_WINDOW, "invalid sliding window: a bound below -1, or a bad switch")             \
    X(INVALID_BIAS, "invalid attention bias: its dtype, offset or strides")                    \
    X(INVALID_SEQLENS, "invalid sequence lengths: cu_seqlens or seqlens_k")                    \
    X(INVALID_BLOCK_TABLE, "invalid block table: a page outside the pool or the table")     \
    X(INVALID_BLOCK_SIZE, "a block mask's block size is not a power of two in [16, 256]")    \
    X(INVALID_BLOCK_MASK, "invalid block mask: a count, an index or an order in its lists")  \
    X(TRANSPORT_ERROR, "a transfer between ranks failed or timed out (flashattn_ring)")      \
    X(INVALID_POSITION, "invalid positions: negative, past the whole sequence, or unaligned")

typedef enum fa_status {
#define FA__STATUS_ENUM(name, msg) FA_STATUS_##name,
    FA_STATUS_MAP(FA__STATUS_ENUM)
#undef FA__STATUS_ENUM
    FA_STATUS_COUNT_ /* not a status: the number of codes */
} fa_status;

/* "FA_STATUS_OK", "FA_STATUS_NULL_POINTER", ...; "FA_STATUS_UNKNOWN" for an unknown code. */
FA_API const char *fa_status_name(fa_status status);
/* A one-line generic description of the code. The specific message is fa_context_last_error. */
FA_API const char *fa_status_message(fa_status status);

/* ------------------------------------------------------------------------------------------ */
/* Enumerations                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef enum fa_backend {
    FA_BACKEND_AUTO = 0, /* FLASHATTN_BACKEND, else the first available of CUDA, OpenCL, CPU */
    FA_BACKEND_CPU = 1,  /* scalar golden reference, fp64 accumulation */
    FA_BACKEND_OPENCL = 2,
    FA_BACKEND_CUDA = 3
} fa_backend;

/* "auto", "cpu", "opencl", "cuda"; NULL for an unknown value. */
FA_API const char *fa_backend_name(fa_backend backend);
/* Parses a name as above (case-insensitive). FA_STATUS_INVALID_ARGUMENT for an unknown one. */
FA_API fa_status fa_backend_from_name(const char *name, fa_backend *out);
/*
 * The backends this library knows, built in or not, in the order FA_BACKEND_AUTO tries them
 * (fastest first: cuda, opencl, cpu): fa_backend_at(i) for i in [0, fa_backend_count()), and
 * FA_BACKEND_AUTO for an index outside that range. fa_backend_device_count tells whether one is
 * built in and has a device.
 */
FA_API int fa_backend_count(void);
FA_API fa_backend fa_backend_at(int index);

typedef enum fa_dtype {
    FA_DTYPE_F32 = 0, /* IEEE binary32 */
    FA_DTYPE_F16 = 1, /* IEEE binary16, stored as uint16_t */
    FA_DTYPE_BF16 = 2 /* bfloat16 (upper half of binary32), stored as uint16_t */
} fa_dtype;

/* "f32", "f16", "bf16"; NULL for an unknown value. */
FA_API const char *fa_dtype_name(fa_dtype dtype);
FA_API fa_status fa_dtype_from_name(const char *name, fa_dtype *out);
/* Storage size of one element in bytes; 0 for an unknown dtype. */
FA_API size_t fa_dtype_size(fa_dtype dtype);

/*
 * Causal masks. Query row i may attend to key j when:
 *   FA_MASK_CAUSAL_TOP_LEFT:      j <= i                          (the diagonal starts top-left)
 *   FA_MASK_CAUSAL_BOTTOM_RIGHT:  j <= i + (seqlen_k - seqlen_q)  (the diagonal ends bottom-right,
 *                                 as in decoding with a KV cache; FlashAttention >= 2.1's rule)
 * Both are the same when seqlen_q == seqlen_k. A row with no key to attend to (possible with
 * bottom-right when seqlen_q > seqlen_k, or when seqlen_k == 0) gives O = 0 and LSE = -inf.
 */
typedef enum fa_mask {
    FA_MASK_NONE = 0,
    FA_MASK_CAUSAL_TOP_LEFT = 1,
    FA_MASK_CAUSAL_BOTTOM_RIGHT = 2
} fa_mask;

/*
 * Non-finite values and the f32 range (the same on every backend, tested by test_nonfinite):
 * - A score s = scale * q.k that is NaN or +inf makes its row's O and LSE NaN. LSE = -inf keeps
 *   its one meaning: the row had no key to attend to.
 * - A score of -inf weighs nothing, as a masked key does; a row whose every allowed score is
 *   -inf is a row with no key (O = 0, LSE = -inf).
 * - With a softcap the score that the rules above see is softcap * tanh(s / softcap): an s of
 *   +-inf becomes +-softcap, a finite score and no longer NaN, and a NaN stays NaN.
 * - ALiBi's term slope * |i' - j| and the modified score saturate like the plain score (the f32
 *   range below): a slope so large that the term passes FLT_MAX makes the key's score -inf (or
 *   +inf for a negative slope: a NaN row), while its distance-0 key keeps its score.
 * - NaN or +-inf in V reaches O but not LSE. On opencl and cuda it may also reach rows for
 *   which that key is masked but shares a key tile with allowed ones (0 * NaN is NaN); the cpu
 *   backend never reads a masked key.
 * - The f32 range: the GPU kernels form q.k and the score in f32, so a score whose magnitude
 *   passes FLT_MAX (3.4e38, counted in log2 units: |score| * 1.44) is +-inf there; the cpu
 *   backend saturates the same way, so such rows follow the two rules above everywhere. A
 *   partial sum of q.k that passes FLT_MAX while the whole does not is not mirrored by the cpu
 *   backend. O is accumulated unnormalised in f32: with |V| * seqlen_k below FLT_MAX every
 *   backend is exact to f32; past it opencl and cuda may return +-inf (never a finite wrong
 *   value), while the cpu backend, in fp64, returns the exact result.
 */

/* "none", "top-left", "bottom-right"; NULL for an unknown value. */
FA_API const char *fa_mask_name(fa_mask mask);
FA_API fa_status fa_mask_from_name(const char *name, fa_mask *out);

/* Element layouts that fa_problem_init can fill in. Any other layout: set the strides. */
typedef enum fa_layout {
    FA_LAYOUT_BHSD = 0, /* [batch, heads, seq, head_dim], contiguous */
    FA_LAYOUT_BSHD = 1  /* [batch, seq, heads, head_dim], contiguous (PyTorch / FlashAttention) */
} fa_layout;

/* ------------------------------------------------------------------------------------------ */
/* Devices                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct fa_device_props {
    char name[256];               /* device name as the driver reports it */
    char vendor[128];             /* vendor name */
    fa_backend backend;           /* the backend that serves this device */
    uint64_t sram_bytes;          /* on-chip memory one work-group / block may use, in bytes */
    uint64_t global_mem_bytes;    /* device memory in bytes (0 when unknown) */
    uint32_t max_work_group_size; /* most work-items / threads in one work-group / block */
    uint32_t compute_units;       /* compute units / SMs / cores */
    uint32_t fp16;                /* 1 when the device computes natively in fp16 */
    uint32_t bf16;                /* 1 when the device computes natively in bf16 */
    char arch[32];                /* architecture tag, e.g. "sm_90"; empty when none */
    uint32_t gpu;                 /* 1 for a GPU: every CUDA device, an OpenCL device of
                                     CL_DEVICE_TYPE_GPU; 0 for CPUs and accelerators */
    uint32_t local_mem_global;    /* 1 when the on-chip memory is global memory in disguise
                                     (OpenCL CL_DEVICE_LOCAL_MEM_TYPE = CL_GLOBAL, as on Mali) */
    uint32_t wg_multiple;         /* work-items the device runs in lockstep (warp, wavefront,
                                     SIMD width): work-groups should be a multiple; 0 unknown */
    uint32_t vector_width;        /* the device's preferred float vector width (OpenCL's
                                     CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, which
                                     FLASHATTN_OPENCL_VECTOR_WIDTH overrides); 0 unknown */
} fa_device_props;

/*
 * Number of devices a backend offers. For a backend that is not built in, or whose runtime finds
 * no platform or device, returns FA_STATUS_BACKEND_UNAVAILABLE with *count = 0 and the reason in
 * `why` (when why is not NULL; truncated to why_size bytes, always NUL-terminated).
 * FA_BACKEND_AUTO is not a backend here: FA_STATUS_INVALID_ARGUMENT.
 */
FA_API fa_status fa_backend_device_count(fa_backend backend, int *count, char *why,
                                         size_t why_size);
/*
 * Properties of device `index` of a backend. FA_STATUS_DEVICE_NOT_FOUND for a negative index
 * (whatever the backend has) or one at or past the count; BACKEND_UNAVAILABLE (as
 * fa_backend_device_count) when a backend built in has no device at all; INVALID_ARGUMENT for
 * FA_BACKEND_AUTO or a value that is not a backend.
 */
FA_API fa_status fa_backend_device_props(fa_backend backend, int index, fa_device_props *out,
                                         char *why, size_t why_size);

/* ------------------------------------------------------------------------------------------ */
/* Context                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct fa_context fa_context;

typedef struct fa_context_options {
    fa_backend backend; /* FA_BACKEND_AUTO (0) honours FLASHATTN_BACKEND and FLASHATTN_DEVICE */
    int device;         /* device index within the backend; 0 is the first */
} fa_context_options;

/*
 * Creates a context on one backend and device. opts may be NULL (AUTO, device 0).
 * With FA_BACKEND_AUTO, the environment variable FLASHATTN_BACKEND (cpu, opencl, cuda) names the
 * backend and FLASHATTN_DEVICE the device index; without them the first available backend of
 * CUDA, OpenCL and CPU is picked, once, here, and fa_context_backend_note says what was passed
 * over and why. Under AUTO, device 0 without FLASHATTN_DEVICE means the backend's first GPU in
 * its order, else its first device whose properties can be read (an OpenCL CPU runtime listed
 * before a GPU is passed over); the note names the device and why. An explicit backend never
 * falls back to another, and takes device indices as given.
 * Returns FA_STATUS_NULL_POINTER, INVALID_ARGUMENT (bad option, a negative device, or a bad
 * environment value), BACKEND_UNAVAILABLE, DEVICE_NOT_FOUND (a device index at or past the
 * count), DEVICE_ERROR or OUT_OF_MEMORY. On failure *out is NULL; the reason is in `why` when
 * given (the context does not exist to hold it).
 */
FA_API fa_status fa_context_create(fa_context **out, const fa_context_options *opts, char *why,
                                   size_t why_size);
/*
 * Creates a planning-only context: the known properties of an architecture stand in for a device
 * this machine need not have ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90" on FA_BACKEND_CUDA;
 * the GPU profiles "amd-gfx90a", "amd-gfx1030", "intel-xe", "nvidia-sm80", "mali-g710",
 * "adreno-740" on FA_BACKEND_OPENCL, with the properties those devices' drivers report), so
 * fa_plan_create, the plan queries and fa_plan_explain answer as on that device. No kernel is
 * built; buffers and fa_forward return FA_STATUS_BACKEND_UNAVAILABLE.
 * Returns FA_STATUS_NULL_POINTER (out or arch NULL), INVALID_ARGUMENT (an unknown architecture;
 * why lists the known ones, or a value that is not a backend), UNSUPPORTED (a backend with no
 * known architectures: cpu), BACKEND_UNAVAILABLE (not built in) or OUT_OF_MEMORY. On
 * failure *out is NULL and the reason is in `why` when given.
 */
FA_API fa_status fa_context_create_planning(fa_context **out, fa_backend backend,
                                            const char *arch, char *why, size_t why_size);
/*
 * Whether runs check seqlens_k and the block table on an accelerator. on = 1: every run copies
 * them to the host and checks them (INVALID_SEQLENS, INVALID_BLOCK_TABLE, nothing written), a
 * device-to-host copy that waits for the device. on = 0 (a new context's setting): they are not
 * copied, so a decode step does not wait for the device, and the kernels clamp each value into
 * its range (a length into [0, seqlen_k], a page into [0, num_pages)): memory-safe, not
 * reported. The cpu backend checks them on every run in place (they are host memory), and
 * varlen's cu_seqlens are read and checked on every backend (their totals size the tensors).
 * Returns FA_STATUS_NULL_POINTER or INVALID_ARGUMENT (on not 0 or 1).
 */
FA_API fa_status fa_context_set_check_sequences(fa_context *ctx, int on);
/* Destroys a context. Buffers and plans made from it must be destroyed first. NULL is a no-op. */
FA_API void fa_context_destroy(fa_context *ctx);
/* The backend the context runs on (never FA_BACKEND_AUTO). */
FA_API fa_backend fa_context_backend(const fa_context *ctx);
/*
 * How an FA_BACKEND_AUTO context chose its backend: "auto: " then each backend passed over with
 * the status and reason it offered no device, then the one picked, e.g. "auto: cuda skipped
 * (FA_STATUS_BACKEND_UNAVAILABLE: ...); opencl skipped (...); picked cpu", or "auto:
 * FLASHATTN_BACKEND = opencl". "" for a context made with an explicit backend, through interop,
 * or NULL. Never NULL; valid as long as the context.
 */
FA_API const char *fa_context_backend_note(const fa_context *ctx);
/* The device index the context runs on. */
FA_API int fa_context_device(const fa_context *ctx);
/* Copies the context's device properties. */
FA_API fa_status fa_context_device_props(const fa_context *ctx, fa_device_props *out);
/*
 * The detailed message of the last failure on this context (including an OpenCL build log or an
 * NVRTC log), or "" when the last call succeeded. Getters that take a const context leave it as
 * it is. Valid until the next call on the context.
 */
FA_API const char *fa_context_last_error(const fa_context *ctx);
/*
 * Device bytes the context holds now and the most it held at once since creation or the last
 * reset: buffers it allocated plus any scratch the backend allocated. Wrapped caller memory is
 * not counted. Either pointer may be NULL.
 */
FA_API void fa_context_memory(const fa_context *ctx, uint64_t *current_bytes,
                              uint64_t *peak_bytes);
/* Sets the peak to the current value, so the next peak measures one region of work. */
FA_API void fa_context_reset_peak(fa_context *ctx);
/*
 * Frees the scratch the context keeps for its runs. A run that needs scratch
 * (fa_plan_scratch_bytes) reuses the context's, growing it when it is smaller, so runs neither
 * allocate nor free (on a GPU a free waits for the device); it stays counted in
 * fa_context_memory until this call or fa_context_destroy. For a context that ran a large
 * problem and goes on with small ones.
 */
FA_API void fa_context_release_scratch(fa_context *ctx);

/* ------------------------------------------------------------------------------------------ */
/* Buffers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

typedef struct fa_buffer fa_buffer;

/*
 * Allocates `bytes` of device memory (bytes > 0). FA_STATUS_OUT_OF_MEMORY when the device cannot
 * back it; on OpenCL, drivers that would allocate only at first use are made to allocate here, so
 * a buffer returned is usable. The contents are unspecified.
 */
FA_API fa_status fa_buffer_create(fa_context *ctx, size_t bytes, fa_buffer **out);
/*
 * Wraps caller host memory without a copy: on the cpu backend, and on OpenCL CPU devices (pocl),
 * whose memory is host memory (CL_MEM_USE_HOST_PTR; each run maps and unmaps it around its
 * launches, so the host's writes reach the kernels and theirs reach the host). Elsewhere (a GPU)
 * FA_STATUS_UNSUPPORTED: copy with fa_buffer_create and fa_buffer_write. The memory must stay
 * valid until the buffer is destroyed. Not counted in fa_context_memory.
 */
FA_API fa_status fa_buffer_wrap_host(fa_context *ctx, void *ptr, size_t bytes, fa_buffer **out);
/* Releases the buffer (and its memory, unless wrapped). NULL is a no-op. */
FA_API void fa_buffer_destroy(fa_buffer *buf);
/* Size in bytes; 0 for NULL. */
FA_API size_t fa_buffer_size(const fa_buffer *buf);
/* Copies host memory into the buffer at a byte offset. FA_STATUS_BUFFER_TOO_SMALL past the end. */
FA_API fa_status fa_buffer_write(fa_buffer *buf, size_t offset, const void *src, size_t bytes);
/* Copies from the buffer at a byte offset into host memory. */
FA_API fa_status fa_buffer_read(const fa_buffer *buf, size_t offset, void *dst, size_t bytes);

/* ------------------------------------------------------------------------------------------ */
/* Problem                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/*
 * Where one tensor's elements are. All values count elements, not bytes. Element (b, h, s, x) of
 * a tensor is at offset + b*stride_batch + h*stride_head + s*stride_seq + x: head_dim is
 * contiguous. Strides must be >= 0, and distinct (b, h, s) rows of O must not overlap.
 */
typedef struct fa_tensor_layout {
    int64_t offset;
    int64_t stride_batch;
    int64_t stride_head;
    int64_t stride_seq;
} fa_tensor_layout;

typedef struct fa_problem {
    fa_dtype dtype;     /* storage type of Q, K, V and O; accumulation is always f32 or wider */
    int64_t batch;      /* >= 0; 0 is a no-op */
    int64_t heads_q;    /* >= 1 */
    int64_t heads_kv;   /* >= 1, heads_q % heads_kv == 0 (GQA; 1 is MQA) */
    int64_t seqlen_q;   /* >= 0; 0: the forward is a no-op, the backward writes dK = dV = 0 */
    int64_t seqlen_k;   /* >= 0; 0 gives O = 0 and LSE = -inf */
    int64_t head_dim;   /* 1..256 */
    fa_tensor_layout q; /* [batch, heads_q, seqlen_q, head_dim] */
    fa_tensor_layout k; /* [batch, heads_kv, seqlen_k, head_dim] */
    fa_tensor_layout v; /* [batch, heads_kv, seqlen_k, head_dim] */
    fa_tensor_layout o; /* [batch, heads_q, seqlen_q, head_dim], written */
    fa_mask mask;
    float scale;     /* softmax scale; 0 means 1/sqrt(head_dim) */
    int32_t block_r; /* tile override: query rows per tile; 0 lets the planner choose */
    int32_t block_c; /* tile override: keys per tile; 0 lets the planner choose */
    /* The backward's tensors (read only by fa_plan_create_backward): dO like O, dQ like Q, dK and
     * dV like K and V, in the storage dtype. fa_problem_init fills them like their twins. */
    fa_tensor_layout d_o;
    fa_tensor_layout dq;
    fa_tensor_layout dk;
    fa_tensor_layout dv;
    /* Score modifiers and dropout, applied inside the tile loop in this order (docs/algorithm.md,
     * "Score modifiers"): s = scale * q.k -> softcap -> + ALiBi + bias -> causal and window mask
     * -> softmax (with the sink in its denominator) -> dropout on the probabilities -> P V.
     * Each is off at zero, so fa_problem_init (and a zeroed struct) turns them all off, and an
     * off feature costs nothing. The tensors they read are given to fa_forward_ex and
     * fa_backward_ex (fa_modifier_buffers). */
    float softcap;  /* in [FA_SOFTCAP_MIN, FA_SOFTCAP_MAX]: s = softcap * tanh(s / softcap)
                       (Gemma 2's logit softcap); 0: off */
    int32_t alibi;  /* 1: s += -slope[h] * |i + seqlen_k - seqlen_q - j| with slopes f32
                       [heads_q] (FlashAttention-2's convention); 2: the same with slopes f32
                       [batch, heads_q], slope[b][h] (flash-attn's (batch, nheads)); 0: off */
    int32_t bias;   /* 1: s += bias[b][h][i][j] (bias_layout, bias_dtype); 0: off. No gradient
                       is computed for it */
    fa_dtype bias_dtype;          /* FA_DTYPE_F32 or the problem's dtype */
    fa_tensor_layout bias_layout; /* element (b, h, i, j) at offset + b*stride_batch +
                                     h*stride_head + i*stride_seq + j: keys contiguous, a stride
                                     of 0 broadcasts that dimension (h counts query heads) */
    int32_t window; /* 1: sliding window: key j is visible to row i when
                       i' - window_left <= j <= i' + window_right, i' = i + seqlen_k - seqlen_q
                       (FlashAttention-2's window_size), on top of the mask; 0: off */
    int64_t window_left;  /* >= 0, or -1: unbounded on the left */
    int64_t window_right; /* >= 0, or -1: unbounded on the right */
    int32_t sinks;  /* 1: a learned logit sink[h] (f32 [heads_q]) joins the softmax's denominator
                       only (gpt-oss's attention sinks); the backward returns its gradient */
    float dropout_p;         /* in [0, 1): each probability is dropped with this chance and the
                                kept ones are scaled by (float)(1 / (1 - p)); 0: off */
    uint64_t dropout_seed;   /* Philox4x32-10 key: (seed & 0xffffffff, seed >> 32) */
    uint32_t dropout_offset; /* the counter's 4th word; advance it between calls */
    /* Sequences and decoding ("Sequences, pages and split-KV" below). Each is off at zero. The
     * buffers they read are given to fa_forward_seq and fa_backward_seq (fa_seq_buffers). */
    int32_t varlen;        /* 1: a packed variable-length batch (cu_seqlens_q, cu_seqlens_k);
                              seqlen_q and seqlen_k are then the longest sequence's lengths */
    int32_t seqlens_k;     /* 1: sequence b has seqlens_k[b] <= seqlen_k keys (a KV cache's
                              lengths); 0: every sequence has seqlen_k */
    int64_t page_size;     /* > 0: K and V are pages of page_size keys in a pool, addressed by
                              a block table; 0: not paged */
    int64_t num_pages;     /* paged: the pool's pages (K and V: [num_pages, ...] by their
                              layout, batch standing for the page) */
    int64_t pages_per_seq; /* paged: the block table's row length; page_size * pages_per_seq
                              >= seqlen_k */
    int32_t kv_splits;     /* split-KV (forward): 0 lets the planner choose, 1 never splits,
                              n > 1 splits the keys in n chunks (fewer when there are fewer key
                              tiles); FLASHATTN_KV_SPLITS stands in for 0 */
    /* Block-sparse attention (flashattn_block_mask.h; off at zero): query block qb (rows
     * [qb * sparse_block_q, +sparse_block_q)) computes only the key blocks its list names,
     * inside the causal mask and the window (an AND); every modifier and dropout apply inside
     * computed blocks. The lists are fa_tensors' kv_num_blocks / kv_indices (the backward also
     * reads the transposed q_num_blocks / q_indices), int32 [sparse_batch, sparse_heads, rows,
     * cols]; with sparse_full the full pairs too, whose blocks the run checks are wholly inside
     * the causal mask and the window. Each run reads the lists and checks them
     * (fa_block_mask_check; FA_STATUS_INVALID_BLOCK_MASK). Every built-in backend runs it,
     * forward and backward. */
    int32_t block_sparse;   /* 1: on; 0: off */
    int32_t sparse_block_q; /* query rows per block: a power of two in [16, 256] */
    int32_t sparse_block_k; /* keys per block: a power of two in [16, 256] */
    int32_t sparse_batch;   /* the lists' batch dimension: 1 (broadcast) or batch */
    int32_t sparse_heads;   /* the lists' head dimension: 1 (broadcast) or heads_q */
    int32_t sparse_full;    /* 1: the full pairs are given; 0: not */
    /* Positions (off at zero): the problem is a block of a longer one, its rows at positions
     * [q_position, q_position + seqlen_q) of a query sequence of whole_seqlen_q, its keys at
     * [k_position, k_position + seqlen_k) of a key sequence of whole_seqlen_k (ring attention,
     * a problem run in blocks). Every rule that compares a row with a key then uses the whole
     * problem's: the causal mask (top-left: position j <= position i; bottom-right: j <= i +
     * whole_seqlen_k - whole_seqlen_q), the window and ALiBi (i' = position i + whole_seqlen_k
     * - whole_seqlen_q, j the key's position), and dropout's Philox counter (positions i, j).
     * So blocks that cover the whole problem, merged by LSE (fa_merge), give the whole run's O
     * and LSE. Not with varlen or seqlens_k; with dropout, k_position is a multiple of 4 (the
     * counter draws words for 4 keys at once). FA_STATUS_INVALID_POSITION otherwise. */
    int64_t q_position;     /* >= 0 */
    int64_t k_position;     /* >= 0 */
    int64_t whole_seqlen_q; /* >= q_position + seqlen_q; 0: q_position + seqlen_q */
    int64_t whole_seqlen_k; /* >= k_position + seqlen_k; 0: k_position + seqlen_k */
} fa_problem;

/* LSE, when requested, is f32 [batch, heads_q, seqlen_q], contiguous, natural log. */

/*
 * The modifiers, precisely (every backend computes the same; docs/algorithm.md):
 * - Softcap, ALiBi and bias change the score before the mask; the mask (causal and window)
 *   then removes keys. A row with no key left gives O = 0 and LSE = -inf, as without them.
 * - Sinks: the denominator of row i of head h is exp(sink[h]) + sum_j exp(s_ij). LSE is the log
 *   of that denominator, so a row with no key but a finite sink gives O = 0 and LSE = sink[h]
 *   (to f32 rounding: the GPU kernels carry it in log2 units).
 *   A sink of -inf is no sink.
 * - Dropout: the keep mask is a pure function of (seed, offset, b, h, i, j), the same bits on
 *   every backend, regenerated by the backward instead of stored. Philox4x32-10 (Salmon et al.,
 *   2011) with key (seed & 0xffffffff, seed >> 32) and counter (j >> 2, i, b * heads_q + h,
 *   offset) (each word mod 2^32) gives four words; element j uses word (j & 3) and is kept when
 *   word >= floor(p * 2^32) (computed in double). Kept probabilities are multiplied by
 *   (float)(1.0 / (1.0 - p)); LSE is the log of the denominator without dropout.
 */

/*
 * Sequences, pages and split-KV (docs/algorithm.md, "Decoding"):
 * - varlen: Q, O (and dO, dQ) hold the batch's rows packed: row i of sequence b is token
 *   t = cu_seqlens_q[b] + i, at offset + t * stride_seq + h * stride_head (stride_batch is not
 *   used); K, V (dK, dV) likewise with cu_seqlens_k. cu_seqlens are int32 [batch + 1],
 *   non-decreasing from cu_seqlens[0] >= 0; each sequence has at most seqlen_q rows and
 *   seqlen_k keys. The mask and the modifiers apply per sequence with its own lengths. LSE is
 *   f32 [heads_q, total_q] (total_q = cu_seqlens_q[batch]): row i of (b, h) at
 *   h * total_q + cu_seqlens_q[b] + i. The bias is indexed (b, h, i, j) within a sequence.
 * - seqlens_k: sequence b attends to its first seqlens_k[b] keys (int32 [batch], each in
 *   [0, seqlen_k]); bottom-right causal aligns to that length. Not with varlen.
 * - paged: key j of sequence b lives in page block_table[b][j / page_size] (int32
 *   [batch, pages_per_seq]) at slot j % page_size: element (page, h, slot, x) of K at
 *   k.offset + page * k.stride_batch + h * k.stride_head + slot * k.stride_seq + x (V alike).
 *   fa_problem_set_paged fills a contiguous [num_pages, page_size, heads_kv, head_dim] pool.
 *   Only the pages a sequence's keys use are read; each must be in [0, num_pages). Pages may be
 *   shared between sequences. Forward only; not with varlen.
 * - Buffers of int32 are read back to the host and checked by every run (a few bytes per
 *   sequence): a bad value is INVALID_SEQLENS or INVALID_BLOCK_TABLE with nothing written.
 * - split-KV: when a forward's query tiles alone cannot fill the device's compute units, the
 *   plan splits the keys into chunks (fa_plan_kv_splits); each chunk's partial O (f32) and LSE
 *   go to scratch and a merge launch combines them as fa_merge does. The result matches the
 *   unsplit forward to rounding and is bitwise repeatable.
 */

#define FA_MAX_HEAD_DIM 256
/* The logit softcap's accepted range (besides 0, off): the kernels form 2 log2(e) / softcap and
 * softcap * log2(e) in f32, which this keeps far from both ends of the f32 range. */
#define FA_SOFTCAP_MIN 1e-18f
#define FA_SOFTCAP_MAX 1e18f

/*
 * Fills a problem: the shape, dtype, FA_MASK_NONE, scale 0, no tile overrides, and contiguous
 * strides in `layout` for Q, K, V and O with offset 0. Change any field afterwards.
 * Returns FA_STATUS_NULL_POINTER, or INVALID_ARGUMENT for an unknown layout; shapes are checked
 * by fa_plan_create.
 */
FA_API fa_status fa_problem_init(fa_problem *p, fa_dtype dtype, fa_layout layout, int64_t batch,
                                 int64_t heads_q, int64_t heads_kv, int64_t seqlen_q,
                                 int64_t seqlen_k, int64_t head_dim);
/* Fills only the strides and offsets of Q, K, V, O, dO, dQ, dK and dV for a contiguous layout. */
FA_API fa_status fa_problem_set_layout(fa_problem *p, fa_layout layout);

/*
 * Turns paging on: page_size, num_pages and pages_per_seq set, and K, V (and dK, dV) laid out
 * as a contiguous pool [num_pages, page_size, heads_kv, head_dim]. seqlen_k stays the longest
 * sequence's key count. FA_STATUS_NULL_POINTER; sizes are checked by fa_plan_create.
 */
FA_API fa_status fa_problem_set_paged(fa_problem *p, int64_t page_size, int64_t num_pages,
                                      int64_t pages_per_seq);

/*
 * The support query: validates the problem and asks the context's backend whether it can run it,
 * without planning or running anything. FA_STATUS_OK, or the status fa_plan_create would return
 * with the reason in fa_context_last_error.
 */
FA_API fa_status fa_problem_check(fa_context *ctx, const fa_problem *p);

/* ------------------------------------------------------------------------------------------ */
/* Plan                                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct fa_plan fa_plan;

/*
 * Validates the problem and plans the tiling for the context's device: the FlashAttention rule
 * Bc = ceil(M / 4d), Br = min(Bc, d) with M the on-chip memory in elements of the dtype, then
 * fitted to the sequence lengths, the backend's work-group limits and the on-chip memory. Each
 * fitting step is recorded (fa_plan_explain). The tile overrides of the problem, else the
 * environment variables FLASHATTN_BLOCK_R and FLASHATTN_BLOCK_C, replace the rule's values and
 * are validated like any input (FA_STATUS_INVALID_TILE).
 * Returns FA_STATUS_NULL_POINTER, INVALID_SHAPE, INVALID_STRIDE, UNSUPPORTED_DTYPE,
 * UNSUPPORTED_HEAD_DIM, HEADS_MISMATCH, INVALID_MASK, INVALID_SCALE, INVALID_TILE,
 * INVALID_DROPOUT, INVALID_SOFTCAP, INVALID_WINDOW, INVALID_BIAS, INVALID_POSITION,
 * INVALID_ARGUMENT (a modifier switch other than 0 or 1), SRAM_TOO_SMALL, UNSUPPORTED (also: a
 * modifier the backend does not run yet, named in the message), KERNEL_BUILD_ERROR (backends
 * that compile at plan time), OUT_OF_MEMORY.
 */
FA_API fa_status fa_plan_create(fa_context *ctx, const fa_problem *p, fa_plan **out);
/* NULL is a no-op. */
FA_API void fa_plan_destroy(fa_plan *plan);
/* Query rows per tile (Br). Where the plan packs a one-row GQA decode (the OpenCL backend; the
 * explanation says "GQA packing"), the rows are the query heads of a K/V head's group; where it
 * says "heads packing" (OpenCL on CPUs, K and V paged or BSHD), all query heads of a sequence. */
FA_API int32_t fa_plan_block_r(const fa_plan *plan);
/* Keys per tile (Bc). */
FA_API int32_t fa_plan_block_c(const fa_plan *plan);
/* Work-items (threads) per work-group (block) the backend launches; 1 on the CPU backend and
 * where one OpenCL work-item holds a whole tile (DIRECT_KV or REG_BLOCKED in the explanation;
 * a backward's REG_BLOCKED: its dK/dV and dQ passes, whose D pass runs Br work-items). */
FA_API int32_t fa_plan_work_group_size(const fa_plan *plan);
/*
 * On-chip bytes one work-group of the plan's main kernel declares: (Br*d + 2*Bc*d) * elem for
 * the Q, K and V tiles (elem: the storage type's size, or 4 where OpenCL on a CPU holds f16 and
 * bf16 tiles as f32), plus Br*Bc*4 for the f32 S tile where the kernel keeps S on chip (the cpu
 * and opencl backends, and cuda's CUDA-core path); cuda's tensor-core path keeps S in registers
 * and uses (Br*d + 2*Bc*d) * elem; OpenCL's in-place path (DIRECT_KV) holds only Q and S,
 * Br*d * elem + Br*Bc*4, and its register-blocked path (REG_BLOCKED, CPUs) an f32 O tile more,
 * (2*Br*d + 2*Bc*d) * 4 + Br*Bc*4 (a backward's, CPUs: (4*Br*d + 4*Bc*d) * 4 + Br*Bc*4 +
 * 3*Br*4). Each launch's own is in fa_plan_launch; `flashattn plan`
 * prints the formula the plan used.
 */
FA_API uint64_t fa_plan_sram_bytes(const fa_plan *plan);
/*
 * Work-groups the plan's launches run in all: the sum over its launches (fa_plan_launch) of
 * grid[0] * grid[1] * grid[2]. A forward plan runs batch * heads * ceil(rows / Br), a head's rows
 * being seqlen_q, or for a packed decode (the explanation says which) its group's
 * heads_q / heads_kv query heads times seqlen_q over heads_kv heads (GQA packing), or all heads_q
 * query heads as the rows of one head (heads packing); a split-KV forward runs that once per key
 * chunk, then the merge. A backward plan on opencl and cuda runs the D and dQ passes over the
 * query tiles of each query head and the dK/dV pass over the key tiles of each K/V head (of Bc
 * keys, or Br where the explanation says the pass owns Br keys); on cpu batch * heads_kv; with
 * sinks one more launch of heads_q work-groups.
 */
FA_API uint64_t fa_plan_work_groups(const fa_plan *plan);
/* One launch of a plan, as fa_plan_launch describes it. */
typedef struct fa_plan_launch_info {
    const char *kernel;      /* its kernel: "flash_fwd", "flash_merge", "flash_bwd_pre", ... */
    uint64_t grid[3];        /* work-groups along x (tiles, times key chunks when split), y
                                (heads), z (batch) */
    uint64_t onchip_bytes;   /* on-chip (local / shared) bytes of one work-group */
    int32_t work_group_size; /* work-items (threads) per work-group */
    int32_t block_r;         /* rows one work-group owns (keys, in the dK/dV pass) */
    int32_t block_c;         /* keys per tile it streams (query rows, in the dK/dV pass) */
} fa_plan_launch_info;
/* How many launches one run of the plan makes, in order (0 for NULL). */
FA_API int32_t fa_plan_launch_count(const fa_plan *plan);
/* Describes launch `index` (0 .. fa_plan_launch_count - 1). NULL_POINTER, INVALID_ARGUMENT for
 * an index out of range. */
FA_API fa_status fa_plan_launch(const fa_plan *plan, int32_t index, fa_plan_launch_info *out);
/*
 * Device bytes a run of the plan allocates for itself beyond the caller's tensors, counted in
 * the context's memory (fa_context_memory) and freed before the run returns. opencl and cuda: 0
 * for a forward plan, batch * heads_q * seqlen_q * 4 for a backward plan (D = rowsum(dO * O),
 * f32). cpu: (Br * d + 2 * Br + Bc) * 8 for a forward plan (one tile's f64 state), and
 * (2 * seqlen_k * d + d) * 8 for a backward plan (f64 dK and dV accumulators of one K/V head).
 * A split-KV forward adds splits * batch * heads_q * seqlen_q * (d + 1) * 4 (f32 partial O and
 * LSE) on every backend. A varlen run indexes these rows by token, as LSE: where its
 * cu_seqlens_q[batch] passes batch * seqlen_q (cu_seqlens_q[0] > 0), heads_q *
 * cu_seqlens_q[batch] rows take the place of batch * heads_q * seqlen_q in both figures.
 */
FA_API uint64_t fa_plan_scratch_bytes(const fa_plan *plan);
/* Key chunks of a split-KV forward plan (1: not split); the explanation says why. */
FA_API int32_t fa_plan_kv_splits(const fa_plan *plan);
/* A copy of the problem the plan was made for (scale resolved, overrides as given). */
FA_API const fa_problem *fa_plan_problem(const fa_plan *plan);
/*
 * Sets the dropout's seed and offset of a plan made for a problem with dropout (dropout_p > 0),
 * as if it had been made with them: its next runs draw the keep mask of (seed, offset), bitwise
 * what a plan made with them gives, with no re-planning (a new seed or offset every call, as
 * training steps use, costs nothing). fa_plan_problem reports them. FA_STATUS_NULL_POINTER;
 * FA_STATUS_INVALID_PLAN for a plan without dropout (the plan is left as it was).
 */
FA_API fa_status fa_plan_set_dropout(fa_plan *plan, uint64_t seed, uint32_t offset);
/* Human-readable, multi-line explanation of the rule and each fitting step. */
FA_API const char *fa_plan_explain(const fa_plan *plan);

/* ------------------------------------------------------------------------------------------ */
/* Running a plan                                                                              */
/* ------------------------------------------------------------------------------------------ */

/*
 * The tensors of one run, by name. A plan's op reads and writes some of them, and a member must
 * be given exactly when the run uses it (FA_STATUS_NULL_POINTER naming a missing one,
 * INVALID_ARGUMENT naming one given that the run does not use); zero-initialise the struct and
 * set what the op needs:
 *   forward (fa_plan_create):            q, k, v -> o, and lse when wanted (f32 [batch,
 *                                         heads_q, seqlen_q]; varlen: [heads_q, total_q]).
 *   backward (fa_plan_create_backward):  q, k, v, o, lse, d_o -> dq, dk, dv.
 *   merge (fa_plan_create_merge):        o_parts, lse_parts -> o, and lse when wanted.
 * and, for a forward or backward, what the problem turns on: alibi_slopes, bias, sinks (and
 * d_sinks, written by a backward), cu_seqlens_q and cu_seqlens_k (varlen), seqlens_k,
 * block_table (paged). Each tensor's layout and dtype are the problem's (see fa_problem).
 */
typedef struct fa_tensors {
    const fa_buffer *q, *k, *v;
    fa_buffer *o;   /* forward, merge: written; backward: the forward's O, read */
    fa_buffer *lse; /* forward, merge: written when given; backward: the forward's LSE, read */
    const fa_buffer *d_o;
    fa_buffer *dq, *dk, *dv;
    const fa_buffer *alibi_slopes; /* f32 [heads_q] (alibi 1) or [batch, heads_q] (2) */
    const fa_buffer *bias;         /* problem.bias_layout in problem.bias_dtype, when problem.bias */
    const fa_buffer *sinks;        /* f32 [heads_q], when problem.sinks */
    fa_buffer *d_sinks;            /* backward, when problem.sinks: f32 [heads_q], dL/dsink[h] =
                                      -sum_{b,i} exp(sink[h] - LSE[b][h][i]) * D[b][h][i],
                                      D = rowsum(dO * O) */
    const fa_buffer *cu_seqlens_q; /* int32 [batch + 1], when problem.varlen */
    const fa_buffer *cu_seqlens_k; /* int32 [batch + 1], when problem.varlen */
    const fa_buffer *seqlens_k;    /* int32 [batch], when problem.seqlens_k */
    const fa_buffer *block_table;  /* int32 [batch, pages_per_seq], when problem.page_size */
    const fa_buffer *o_parts;      /* merge: the partial outputs (fa_merge) */
    const fa_buffer *lse_parts;    /* merge: their f32 LSEs (fa_merge) */
    /* Block-sparse lists (problem.block_sparse; fa_block_lists' layout): the forward's, read by
     * both passes, and the transposed ones, read by the backward; the full pairs with
     * problem.sparse_full. */
    const fa_buffer *kv_num_blocks, *kv_indices, *full_kv_num_blocks, *full_kv_indices;
    const fa_buffer *q_num_blocks, *q_indices, *full_q_num_blocks, *full_q_indices;
} fa_tensors;

/* The tensors of fa_tensors, for fa_problem_tensor_bytes. */
typedef enum fa_tensor_id {
    FA_TENSOR_Q = 0,
    FA_TENSOR_K,
    FA_TENSOR_V,
    FA_TENSOR_O,
    FA_TENSOR_LSE,
    FA_TENSOR_DO,
    FA_TENSOR_DQ,
    FA_TENSOR_DK,
    FA_TENSOR_DV,
    FA_TENSOR_ALIBI_SLOPES,
    FA_TENSOR_BIAS,
    FA_TENSOR_SINKS,
    FA_TENSOR_D_SINKS,
    FA_TENSOR_CU_SEQLENS_Q,
    FA_TENSOR_CU_SEQLENS_K,
    FA_TENSOR_SEQLENS_K,
    FA_TENSOR_BLOCK_TABLE,
    FA_TENSOR_KV_NUM_BLOCKS,
    FA_TENSOR_KV_INDICES,
    FA_TENSOR_FULL_KV_NUM_BLOCKS,
    FA_TENSOR_FULL_KV_INDICES,
    FA_TENSOR_Q_NUM_BLOCKS,
    FA_TENSOR_Q_INDICES,
    FA_TENSOR_FULL_Q_NUM_BLOCKS,
    FA_TENSOR_FULL_Q_INDICES
} fa_tensor_id;

/*
 * The smallest buffer, in bytes, that holds a tensor of the problem: the end of its last element
 * counted from byte 0 of the buffer (its layout's offset included), as fa_run checks it. For a
 * varlen problem Q's side has packed_q rows and K's side packed_k (cu_seqlens_q[batch],
 * cu_seqlens_k[batch]); otherwise both are ignored. A tensor the problem does not use still has
 * its size (a bias of the problem's bias layout, ...). Returns FA_STATUS_NULL_POINTER,
 * INVALID_ARGUMENT (an unknown tensor), INVALID_SEQLENS (negative packed rows) or the status
 * fa_problem_check gives a bad problem.
 */
FA_API fa_status fa_problem_tensor_bytes(const fa_problem *p, fa_tensor_id tensor,
                                         int64_t packed_q, int64_t packed_k, uint64_t *bytes);

/*
 * Runs a plan on the tensors: the plan's op (forward, backward or merge, as the plan was made)
 * with every launch it planned. Each buffer is checked against the problem's layout before
 * anything runs, and so are the sequence buffers' values where they are checked (varlen's
 * always; seqlens_k and the block table on the cpu backend, or on an accelerator after
 * fa_context_set_check_sequences); an error leaves every output untouched. Same inputs, plan
 * and device give bitwise identical outputs.
 * Returns FA_STATUS_NULL_POINTER, CONTEXT_MISMATCH (a plan or buffer of another context),
 * BUFFER_TOO_SMALL (a buffer smaller than its tensor's layout needs), INVALID_ARGUMENT (a
 * tensor the run does not use; an output overlapping another tensor, compared by memory, so two
 * handles of one allocation count as one), INVALID_SEQLENS, INVALID_BLOCK_TABLE,
 * DEVICE_ERROR, OUT_OF_MEMORY.
 */
FA_API fa_status fa_run(fa_context *ctx, const fa_plan *plan, const fa_tensors *tensors);

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/*
 * O = softmax(Q K^T * scale + mask) V for the plan's problem, on the plan's context: fa_run
 * with q, k, v, o and lse (which may be NULL; otherwise it receives f32 [batch, heads_q,
 * seqlen_q] log-sum-exp values), for a problem with no modifier and no sequence buffer.
 * Returns what fa_run returns, and INVALID_PLAN for a plan that is not a forward's.
 */
FA_API fa_status fa_forward(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                            const fa_buffer *k, const fa_buffer *v, fa_buffer *o,
                            fa_buffer *lse);

/*
 * The older forms below (fa_forward_ex, fa_forward_seq, fa_backward_ex, fa_backward_seq) are
 * fa_run with these members of fa_tensors grouped; they stay for existing callers until 1.0,
 * and new code calls fa_run. A member must be given exactly when the problem turns its feature
 * on (FA_STATUS_NULL_POINTER when missing, INVALID_ARGUMENT when given for a feature that is off).
 */
typedef struct fa_modifier_buffers {
    const fa_buffer *alibi_slopes; /* f32 [heads_q] (alibi 1) or [batch, heads_q] (2) */
    const fa_buffer *bias;         /* problem.bias_layout in problem.bias_dtype, when problem.bias */
    const fa_buffer *sinks;        /* f32 [heads_q], when problem.sinks */
    fa_buffer *d_sinks;            /* fa_backward_ex only, when problem.sinks: f32 [heads_q],
                                      written with dL/dsink[h] = -sum_{b,i} exp(sink[h] -
                                      LSE[b][h][i]) * D[b][h][i], D = rowsum(dO * O) */
} fa_modifier_buffers;

/*
 * fa_forward with the buffers of the problem's score modifiers (mods may be NULL when none is
 * on). The same statuses as fa_forward; a modifier buffer too small for its tensor is
 * BUFFER_TOO_SMALL naming it. fa_forward(...) is fa_forward_ex(..., NULL).
 */
FA_API fa_status fa_forward_ex(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                               const fa_buffer *k, const fa_buffer *v, fa_buffer *o,
                               fa_buffer *lse, const fa_modifier_buffers *mods);

/* The int32 tensors of varlen, seqlens_k and paged problems (fa_problem, "Sequences, pages and
 * split-KV"). A member must be given exactly when the problem turns its feature on. */
typedef struct fa_seq_buffers {
    const fa_buffer *cu_seqlens_q; /* int32 [batch + 1], when problem.varlen */
    const fa_buffer *cu_seqlens_k; /* int32 [batch + 1], when problem.varlen */
    const fa_buffer *seqlens_k;    /* int32 [batch], when problem.seqlens_k */
    const fa_buffer *block_table;  /* int32 [batch, pages_per_seq], when problem.page_size */
} fa_seq_buffers;

/*
 * fa_forward_ex with the sequence buffers (seqs may be NULL when the problem uses none). Also
 * returns INVALID_SEQLENS and INVALID_BLOCK_TABLE (nothing written), and BUFFER_TOO_SMALL when
 * the packed rows cu_seqlens name pass a tensor's buffer.
 */
FA_API fa_status fa_forward_seq(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                                const fa_buffer *k, const fa_buffer *v, fa_buffer *o,
                                fa_buffer *lse, const fa_modifier_buffers *mods,
                                const fa_seq_buffers *seqs);

/* ------------------------------------------------------------------------------------------ */
/* Merge                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/*
 * Plans the merge of `parts` partial results of the same queries (the keys split across calls
 * or devices) into one, as a split-KV forward's merge launch does: for each row, with m the
 * largest partial LSE, O = sum_s exp(LSE_s - m) O_s / sum_s exp(LSE_s - m) and
 * LSE = m + log(sum_s exp(LSE_s - m)); a row whose partials all have LSE = -inf (no key) gives
 * O = 0, LSE = -inf. The problem gives dtype, batch, heads_q, seqlen_q, head_dim and O's layout
 * (the other fields are validated as for a forward); varlen and paged problems are rejected
 * (FA_STATUS_UNSUPPORTED). parts in [1, 65536] (INVALID_ARGUMENT). Same statuses as
 * fa_plan_create otherwise.
 */
FA_API fa_status fa_plan_create_merge(fa_context *ctx, const fa_problem *p, int32_t parts,
                                      fa_plan **out);
/*
 * Runs a merge plan. o_parts holds the partial outputs one after another, each in the problem's
 * dtype and O layout: part s's element (b, h, i, x) at s * E + o.offset + b * o.stride_batch +
 * h * o.stride_head + i * o.stride_seq + x, with E the elements O's layout spans (offset
 * included). lse_parts is f32 [parts, batch, heads_q, seqlen_q] contiguous (each as fa_forward
 * wrote it). o (the problem's O layout) and lse (f32 [batch, heads_q, seqlen_q], may be NULL)
 * receive the merge. Accumulates in f32 (the cpu backend in f64), parts in order: bitwise
 * repeatable. Returns NULL_POINTER, CONTEXT_MISMATCH, INVALID_PLAN (not a merge plan),
 * BUFFER_TOO_SMALL, INVALID_ARGUMENT (an output overlapping an input), DEVICE_ERROR,
 * OUT_OF_MEMORY.
 */
FA_API fa_status fa_merge(fa_context *ctx, const fa_plan *plan, const fa_buffer *o_parts,
                          const fa_buffer *lse_parts, fa_buffer *o, fa_buffer *lse);

/* ------------------------------------------------------------------------------------------ */
/* Backward                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/*
 * Plans the backward pass of the problem (dO -> dQ, dK, dV), validating the dO, dQ, dK and dV
 * layouts too. The planner fits the backward's tiles (it holds more at once than the forward:
 * fa_plan_explain gives its formula). Same statuses as fa_plan_create, and
 * FA_STATUS_UNSUPPORTED on a backend without a backward pass (every built-in backend has one).
 * A run allocates fa_plan_scratch_bytes of scratch for itself.
 */
FA_API fa_status fa_plan_create_backward(fa_context *ctx, const fa_problem *p, fa_plan **out);

/*
 * Gradients of O = softmax(Q K^T * scale + mask) V given dO: dQ (like Q), dK and dV (like K and
 * V; with GQA summed over the query heads of a group), in the storage dtype, from Q, K, V, O and
 * LSE (f32 [batch, heads_q, seqlen_q] as fa_forward wrote it for the same problem). P is
 * recomputed from LSE, never stored: the extra memory is linear in the sequence lengths. Rows
 * with no key (LSE = -inf) get dQ = 0 and add nothing to dK and dV. dK and dV rows must not
 * overlap: K and V broadcast over the batch (stride_batch 0) need dK and dV with their own
 * batch stride, which then receive each batch's gradient (the caller sums them).
 * Deterministic: the same inputs give bitwise the same gradients (the reduction order is fixed;
 * docs/algorithm.md).
 * Returns FA_STATUS_NULL_POINTER, CONTEXT_MISMATCH, INVALID_PLAN (a plan of fa_plan_create),
 * BUFFER_TOO_SMALL, INVALID_ARGUMENT (an output overlapping an input or another output),
 * DEVICE_ERROR, OUT_OF_MEMORY; outputs are untouched on every error.
 */
FA_API fa_status fa_backward(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                             const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                             const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq,
                             fa_buffer *dk, fa_buffer *dv);
/*
 * fa_backward for a problem with score modifiers or dropout: the same tensors, plus the
 * modifiers' buffers (mods may be NULL when none is on). The gradients are those of the
 * modified forward: softcap's derivative is applied, dropout's mask is regenerated from the
 * problem's seed and offset (use the forward's), and with sinks d_sinks receives their gradient.
 * No gradient is computed for the bias or the ALiBi slopes. Same statuses as fa_backward.
 */
FA_API fa_status fa_backward_ex(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                                const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                                const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq,
                                fa_buffer *dk, fa_buffer *dv, const fa_modifier_buffers *mods);

/*
 * fa_backward_ex with the sequence buffers: varlen problems (packed rows, as fa_forward_seq;
 * dQ, dK and dV packed like Q, K and V). seqlens_k and paged problems have no backward yet
 * (FA_STATUS_UNSUPPORTED at plan time). Same statuses as fa_backward, and INVALID_SEQLENS.
 */
FA_API fa_status fa_backward_seq(fa_context *ctx, const fa_plan *plan, const fa_buffer *q,
                                 const fa_buffer *k, const fa_buffer *v, const fa_buffer *o,
                                 const fa_buffer *lse, const fa_buffer *d_o, fa_buffer *dq,
                                 fa_buffer *dk, fa_buffer *dv, const fa_modifier_buffers *mods,
                                 const fa_seq_buffers *seqs);

/* ------------------------------------------------------------------------------------------ */
/* Conversions (round to nearest even; NaN stays NaN, infinities and subnormals are exact)     */
/* ------------------------------------------------------------------------------------------ */

FA_API uint16_t fa_f32_to_f16(float x);
FA_API float fa_f16_to_f32(uint16_t h);
FA_API uint16_t fa_f32_to_bf16(float x);
FA_API float fa_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H */
