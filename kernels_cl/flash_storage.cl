/*
 * flash_storage.cl - the storage type and its conversions: what a tensor holds in global memory
 * (f32, f16 or bf16 bits), what a local tile holds, vector widths over keys and dims, and the
 * stores of O. Part of every OpenCL program after flash_common.cl (cl_program.c).
 */
/* VEC_NAME(a, b, n): the vector type or builtin a##b of width n (v, load, 4: vload4), pasted
 * from pieces no implementation defines as macros (pocl renames vload, vload2 .. each on its
 * own, so a pasted `vload` would already be renamed). Width 1 names the scalar forms below, so
 * a loop whose vectors are one element wide needs no branch. */
#define VEC_NAME_(a, b, n) a##b##n
#define VEC_NAME(a, b, n) VEC_NAME_(a, b, n)
#define float1 float
#define int1 int
#define vload1(offset, p) ((p)[offset])
#define vstore1(v, offset, p) ((p)[offset] = (v))
#define vload_half1 vload_half
#define vstore_half1_rte vstore_half_rte
#define as_float1 as_float
#define as_int1 as_int
#define convert_uint1 convert_uint

/* ---- storage type: raw copies global -> local, f32 conversion on loads from local ---------- */
/* One row per DTYPE (0 f32, 1 f16, 2 bf16): the type a tensor holds in global memory, and
 * LOAD_N_F32_IN_<DTYPE>(space, n, p), its elements p[0 .. n) in address space `space` as floatn
 * (n = 1: a float). f16 through vload_half (no cl_khr_fp16 needed); bf16 is the upper half of a
 * binary32. */
#define STORE_T_0 float
#define STORE_T_1 ushort
#define STORE_T_2 ushort
#define LOAD_N_F32_IN_0(space, n, p) VEC_NAME(v, load, n)(0, p)
#define LOAD_N_F32_IN_1(space, n, p) VEC_NAME(v, load_half, n)(0, (space const half *)(p))
#define LOAD_N_F32_IN_2(space, n, p)                                                           \
    VEC_NAME(as_, float, n)(VEC_NAME(convert_, uint, n)(VEC_NAME(v, load, n)(0, p)) << 16)
typedef CAT(STORE_T_, DTYPE) store_t;
/* LOAD_ONE_F32_IN(space, p): the element at p as f32; LOAD_N_F32_IN(space, n, p): p[0 .. n). */
#define LOAD_N_F32_IN(space, n, p) CAT(LOAD_N_F32_IN_, DTYPE)(space, n, p)
#define LOAD_ONE_F32_IN(space, p) LOAD_N_F32_IN(space, 1, p)

/* tile_t: an element of a local Q, K, V, dO tile; LOAD_ONE_F32 / LOAD_N_F32 read them as f32,
 * TILE_ELEM(p) is the global element at p as one. Under TILE_F32 (the host passes it for f16 and
 * bf16 storage where local memory is global memory: CPUs) tiles hold f32, converted once as a
 * tile is loaded, where each element was converted again at every read (Br rows read each K
 * and V element of a tile): the loops over tiles then run as they do for f32 storage. GPUs keep
 * the storage type, half the bytes of their scarce local memory. One row per TILE_F32 (with f32
 * storage both rows are the same). */
#define TILE_T_0 store_t
#define TILE_T_1 float
#define LOAD_N_F32_TILE_0(n, p) LOAD_N_F32_IN(__local, n, p)
#define LOAD_N_F32_TILE_1(n, p) VEC_NAME(v, load, n)(0, p)
#define TILE_ELEM_0(p) (*(p))
#define TILE_ELEM_1(p) LOAD_ONE_F32_IN(__global, p)
typedef CAT(TILE_T_, TILE_F32) tile_t;
#define LOAD_N_F32(n, p) CAT(LOAD_N_F32_TILE_, TILE_F32)(n, p)
#define LOAD_ONE_F32(p) LOAD_N_F32(1, p)
#define TILE_ELEM(p) CAT(TILE_ELEM_, TILE_F32)(p)

/* One f32 value stored in each storage type, rounding to nearest even; store_o(v, p) is
 * DTYPE's. bf16 keeps a NaN a (quiet) NaN, not an infinity. */
void store_f32(float v, __global float *p)
{
    *p = v;
}
void store_f16(float v, __global ushort *p)
{
    vstore_half_rte(v, 0, (__global half *)p);
}
void store_bf16(float v, __global ushort *p)
{
    uint u = as_uint(v);
    *p = isnan(v) ? (ushort)((u >> 16) | 0x40u) : (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
#define STORE_ONE_0 store_f32
#define STORE_ONE_1 store_f16
#define STORE_ONE_2 store_bf16
#define store_o CAT(STORE_ONE_, DTYPE)

/* float_keys: KEYS_PER_VEC keys of one S row; float_dims: DIMS_PER_VEC elements of one O row;
 * int_keys: KEYS_PER_VEC ints, a float_keys comparison's result. LOAD_KEYS_F32 / LOAD_DIMS_F32:
 * that many stored elements from a local tile, as f32; S_LOAD_KEYS / S_STORE_KEYS: that many
 * keys of the f32 S tile; VLOAD_KEYS: KEYS_PER_VEC elements of any type and address space;
 * STORE_DIMS_PRIVATE: a float_dims to a private float array. */
typedef VEC_NAME(, float, KEYS_PER_VEC) float_keys;
typedef VEC_NAME(, int, KEYS_PER_VEC) int_keys;
typedef VEC_NAME(, float, DIMS_PER_VEC) float_dims;
#define AS_FLOAT_KEYS VEC_NAME(as_, float, KEYS_PER_VEC) /* an int_keys' bits as floats, back */
#define AS_INT_KEYS VEC_NAME(as_, int, KEYS_PER_VEC)
#define LOAD_KEYS_F32(p) LOAD_N_F32(KEYS_PER_VEC, p)
#define VLOAD_KEYS(p) VEC_NAME(v, load, KEYS_PER_VEC)(0, p)
#define S_LOAD_KEYS(p) VLOAD_KEYS(p)
#define S_STORE_KEYS(val, p) VEC_NAME(v, store, KEYS_PER_VEC)(val, 0, p)
/* The register-blocked path (CPUs) stores S and its f32 O tile as one unaligned vector move
 * each: pocl 3.1's vstore16 wrote four 128-bit pieces, and the 512-bit loads that read them
 * next waited on store forwarding (perf: a third of the softmax's samples on those stores). */
#if REG_BLOCKED && KEYS_PER_VEC > 1
typedef float float_keys_unaligned __attribute__((ext_vector_type(KEYS_PER_VEC), aligned(4)));
#undef S_STORE_KEYS
#define S_STORE_KEYS(val, p) (*(__local float_keys_unaligned *)(p) = (val))
#endif
#define LOAD_DIMS_F32(p) LOAD_N_F32(DIMS_PER_VEC, p)
#define LOAD_GLOBAL_DIMS_F32(p) LOAD_N_F32_IN(__global, DIMS_PER_VEC, p)
#define STORE_DIMS_PRIVATE(val, p) VEC_NAME(v, store, DIMS_PER_VEC)(val, 0, p)

/* Stores the DIMS_PER_VEC values of v to global memory from p in the storage type, rounded as
 * store_o rounds: store_dims is DTYPE's. f16 as one vstore_halfN_rte: element by element from a
 * private array, the array stayed in a stack frame around libclc's software rounding (sm_80: 48
 * bytes per work-item, tools/cl_gpu_check.sh). */
void store_dims_each(float_dims v, __global store_t *p)
{
    float vals[DIMS_PER_VEC];
    STORE_DIMS_PRIVATE(v, vals);
    for (int e = 0; e < DIMS_PER_VEC; e++)
        store_o(vals[e], p + e);
}
void store_dims_f16(float_dims v, __global store_t *p)
{
    CAT(VEC_NAME(v, store_half, DIMS_PER_VEC), _rte)(v, 0, (__global half *)p);
}
#define STORE_DIMS_0 store_dims_each
#define STORE_DIMS_1 store_dims_f16
#define STORE_DIMS_2 store_dims_each
#define store_dims CAT(STORE_DIMS_, DTYPE)

/* Forced inline on GPUs (CPUs keep the compiler's choice): a function that takes a pointer to
 * the kernel's params, accumulators or a row's state and is not inlined makes them memory. With
 * softcap, ALiBi, a window and dropout compiled in, clang left row_scores a call, and the
 * params (536 bytes) went to sm_80's stack frame (tools/cl_gpu_check.sh; ROW_SCORES_INLINE). */
#define INLINE_WHERE_GPU_0
#define INLINE_WHERE_GPU_1 __attribute__((always_inline))
#define INLINE_ON_GPU CAT(INLINE_WHERE_GPU_, GPU)
#define ALWAYS_INLINE __attribute__((always_inline)) /* on every device, where a comment says why */
