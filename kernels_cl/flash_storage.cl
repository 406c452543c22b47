/*
 * flash_storage.cl - the storage type and its conversions: what a tensor holds in global memory
 * (f32, f16 or bf16 bits), what a local tile holds, vector widths over keys and dims, and the
 * stores of O. Part of every OpenCL program after flash_common.cl (cl_program.c).
 */
/* ---- storage type: raw copies global -> local, f32 conversion on loads from local ---------- */
/* LOAD_ONE_F32(p): the element at p as f32; LOAD_N_F32(n, p): elements p[0 .. n) as floatn;
 * both from __local memory, and from address space `space` as LOAD_ONE_F32_IN / LOAD_N_F32_IN. */
#if DTYPE == 0
typedef float store_t;
#define LOAD_ONE_F32_IN(space, p) (*(p))
#define LOAD_N_F32_IN(space, n, p) CAT(vload, n)(0, p)
#elif DTYPE == 1
typedef ushort store_t; /* half bits; vload_half needs no cl_khr_fp16 */
#define LOAD_ONE_F32_IN(space, p) vload_half(0, (space const half *)(p))
#define LOAD_N_F32_IN(space, n, p) CAT(vload_half, n)(0, (space const half *)(p))
#else
typedef ushort store_t; /* bf16 bits: the upper half of a binary32 */
#define LOAD_ONE_F32_IN(space, p) as_float((uint)(*(p)) << 16)
#define LOAD_N_F32_IN(space, n, p)                                                             \
    CAT(as_float, n)(CAT(convert_uint, n)(CAT(vload, n)(0, p)) << 16)
#endif

/* tile_t: an element of a local Q, K, V, dO tile; LOAD_ONE_F32 / LOAD_N_F32 read them as f32,
 * TILE_ELEM(p) is the global element at p as one. Under TILE_F32 (the host passes it for f16 and
 * bf16 storage where local memory is global memory: CPUs) tiles hold f32, converted once as a
 * tile is loaded, where each element was converted again at every read (Br rows read each K
 * and V element of a tile): the loops over tiles then run as they do for f32 storage. GPUs keep
 * the storage type, half the bytes of their scarce local memory. */
#ifndef TILE_F32
#define TILE_F32 0
#endif
#if TILE_F32 && DTYPE != 0
typedef float tile_t;
#define LOAD_ONE_F32(p) (*(p))
#define LOAD_N_F32(n, p) CAT(vload, n)(0, p)
#define TILE_ELEM(p) LOAD_ONE_F32_IN(__global, p)
#else
typedef store_t tile_t;
#define LOAD_ONE_F32(p) LOAD_ONE_F32_IN(__local, p)
#define LOAD_N_F32(n, p) LOAD_N_F32_IN(__local, n, p)
#define TILE_ELEM(p) (*(p))
#endif

/* Stores one f32 value to global O in the storage type, rounding to nearest even. */
void store_o(float v, __global store_t *p)
{
#if DTYPE == 0
    *p = v;
#elif DTYPE == 1
    vstore_half_rte(v, 0, (__global half *)p);
#else
    uint u = as_uint(v);
    if (isnan(v))
        *p = (ushort)((u >> 16) | 0x40u); /* keep NaN a (quiet) NaN, not an infinity */
    else
        *p = (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
#endif
}

/* float_keys: KEYS_PER_VEC keys of one S row; float_dims: DIMS_PER_VEC elements of one O row.
 * LOAD_KEYS_F32 / LOAD_DIMS_F32: that many stored elements from a local tile, as f32;
 * S_LOAD_KEYS / S_STORE_KEYS: that many keys of the f32 S tile; STORE_DIMS_PRIVATE: a float_dims
 * to a private float array. */
#if KEYS_PER_VEC == 1
typedef float float_keys;
#define AS_FLOAT_KEYS as_float /* the bits of an int_keys (or float_keys) as floats, and back */
#define AS_INT_KEYS as_int
#define LOAD_KEYS_F32(p) LOAD_ONE_F32(p)
#define S_LOAD_KEYS(p) (*(p))
#define S_STORE_KEYS(v, p) (*(p) = (v))
#else
typedef CAT(float, KEYS_PER_VEC) float_keys;
#define AS_FLOAT_KEYS CAT(as_float, KEYS_PER_VEC)
#define AS_INT_KEYS CAT(as_int, KEYS_PER_VEC)
#define LOAD_KEYS_F32(p) LOAD_N_F32(KEYS_PER_VEC, p)
#define S_LOAD_KEYS(p) CAT(vload, KEYS_PER_VEC)(0, p)
#define S_STORE_KEYS(v, p) CAT(vstore, KEYS_PER_VEC)(v, 0, p)
#endif
#if DIMS_PER_VEC == 1
typedef float float_dims;
#define LOAD_DIMS_F32(p) LOAD_ONE_F32(p)
#define LOAD_GLOBAL_DIMS_F32(p) LOAD_ONE_F32_IN(__global, p)
#define STORE_DIMS_PRIVATE(v, p) (*(p) = (v))
#else
typedef CAT(float, DIMS_PER_VEC) float_dims;
#define LOAD_DIMS_F32(p) LOAD_N_F32(DIMS_PER_VEC, p)
#define LOAD_GLOBAL_DIMS_F32(p) LOAD_N_F32_IN(__global, DIMS_PER_VEC, p)
#define STORE_DIMS_PRIVATE(v, p) CAT(vstore, DIMS_PER_VEC)(v, 0, p)
#endif

/* Stores the DIMS_PER_VEC values of v to global memory from p in the storage type, rounded as
 * store_o rounds. f16 as one vstore_halfN_rte: element by element from a private array, the
 * array stayed in a stack frame around libclc's software rounding (sm_80: 48 bytes per
 * work-item, tools/cl_gpu_check.sh). */
void store_dims(float_dims v, __global store_t *p)
{
#if DTYPE == 1 && DIMS_PER_VEC > 1
    CAT(CAT(vstore_half, DIMS_PER_VEC), _rte)(v, 0, (__global half *)p);
#else
    float vals[DIMS_PER_VEC];
    STORE_DIMS_PRIVATE(v, vals);
    for (int e = 0; e < DIMS_PER_VEC; e++)
        store_o(vals[e], p + e);
#endif
}

/* Forced inline on GPUs (CPUs keep the compiler's choice): a function that takes a pointer to
 * the kernel's params, accumulators or a row's state and is not inlined makes them memory. With
 * softcap, ALiBi, a window and dropout compiled in, clang left row_scores a call, and the
 * params (536 bytes) went to sm_80's stack frame (tools/cl_gpu_check.sh). A plain row_scores
 * keeps clang's choice: forced, gfx90a's d 32 f16 forward grew from 109 to 144 VGPRs. */
#if GPU
#define INLINE_ON_GPU __attribute__((always_inline))
#else
#define INLINE_ON_GPU
#endif
#if FEATURES & (FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI)
#define ROW_SCORES_INLINE INLINE_ON_GPU
#else
#define ROW_SCORES_INLINE
#endif
