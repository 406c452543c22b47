/*
 * flash_softmax.cl - the online softmax's pieces on local memory: reductions of a vector, tile
 * copies global -> local, a lane's row max and exponentials, the lanes of a row meeting in
 * local memory, and probabilities too small to keep.
 */
/* The max / sum of the n elements of a floatn, pairwise (halves, then quarters ...), as
 * hmax_keys / hsum_keys for a float_keys and hsum_dims for a float_dims. */
float hmax1(float v) { return v; }
float hmax2(float2 v) { return fmax(v.lo, v.hi); }
float hmax4(float4 v) { return hmax2(fmax(v.lo, v.hi)); }
float hmax8(float8 v) { return hmax4(fmax(v.lo, v.hi)); }
float hmax16(float16 v) { return hmax8(fmax(v.lo, v.hi)); }
float hsum1(float v) { return v; }
float hsum2(float2 v) { return v.lo + v.hi; }
float hsum4(float4 v) { return hsum2(v.lo + v.hi); }
float hsum8(float8 v) { return hsum4(v.lo + v.hi); }
float hsum16(float16 v) { return hsum8(v.lo + v.hi); }
#define hmax_keys CAT(hmax, KEYS_PER_VEC)
#define hsum_keys CAT(hsum, KEYS_PER_VEC)
#define hsum_dims CAT(hsum, DIMS_PER_VEC)

/* Copies rows [row0, row0 + rows) of a [seq, d] slice (row stride `stride`) into a local tile,
 * zero past `seq`. Element idx = r * d + x of the rows x d block, r in [0, rows), x in [0, d):
 * transposed, tile[x * rows + r] (d x rows), else tile[idx] (rows x d). */
/* VEC_TILE_LOADS: CPUs with f32 tiles copy eight elements of a row as one vector, loaded (and
 * converted) at once: element by element, pocl's vload_half left f16 at 0.9x of f32's speed
 * (B1 H8 N2048 d64), and the copy was a large part of f32's time too. The same values in the
 * same places. GPUs copy element by element, so that neighbouring work-items read neighbouring
 * elements. */
#define VEC_TILE_LOADS (!GPU && (DTYPE == 0 || TILE_F32) && HEAD_DIM % 8 == 0)
#if VEC_TILE_LOADS
/* Stores elements x .. x + 7 of row r into a tile of `rows` rows (transposed: d x rows). */
void store_tile8(__local float *tile, float8 val, int r, int x, int rows, int transposed)
{
    if (!transposed) {
        vstore8(val, 0, tile + r * HEAD_DIM + x);
        return;
    }
    float vals[8];
    vstore8(val, 0, vals);
    for (int e = 0; e < 8; e++)
        tile[(x + e) * rows + r] = vals[e];
}

void load_tile(__local tile_t *tile, __global const store_t *src, long row0, long seq,
               long stride, int rows, int transposed)
{
    for (int idx = (int)get_local_id(0) * 8; idx < rows * HEAD_DIM; idx += WG_SIZE * 8) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        long row = row0 + r;
        float8 val = row < seq ? LOAD_N_F32_IN(__global, 8, src + row * stride + x)
                               : (float8)0.0f;
        store_tile8(tile, val, r, x, rows, transposed);
    }
}

/* Copies elements x .. x + TILE_LOAD_STEP of a row (r, of `rows`, from src; zeros where !valid)
 * into a tile as load_tile does: for copies row by row (flash_sequences.cl's pages). */
#define TILE_LOAD_STEP 8
void copy_tile_elems(__local tile_t *tile, __global const store_t *src, bool valid, int r, int x,
                     int rows, int transposed)
{
    store_tile8(tile, valid ? LOAD_N_F32_IN(__global, 8, src) : (float8)0.0f, r, x, rows,
                transposed);
}
#else
void load_tile(__local tile_t *tile, __global const store_t *src, long row0, long seq,
               long stride, int rows, int transposed)
{
    for (int idx = (int)get_local_id(0); idx < rows * HEAD_DIM; idx += WG_SIZE) {
        int r = idx / HEAD_DIM, x = idx - r * HEAD_DIM;
        long row = row0 + r;
        tile_t val = row < seq ? TILE_ELEM(src + row * stride + x) : (tile_t)0;
        tile[transposed ? x * rows + r : idx] = val;
    }
}

#define TILE_LOAD_STEP 1
void copy_tile_elems(__local tile_t *tile, __global const store_t *src, bool valid, int r, int x,
                     int rows, int transposed)
{
    tile[transposed ? x * rows + r : r * HEAD_DIM + x] = valid ? TILE_ELEM(src) : (tile_t)0;
}
#endif

/* A probability P below FLT_MIN (2^-126) as 0, by lanes (T: float or a float vector). Such a
 * P is a denormal, and on x86 CPUs every FMA with a denormal operand takes a microcode assist:
 * ALiBi's distant keys made about 14% of P denormal at N 2048 and the forward more than twice
 * as slow on pocl, back to no-modifier speed flushed (history.md, ch. 18). Neither O
 * nor the row sum moves by more than their rounding: l is at least 1 (the row's largest P) and
 * O's f32 accumulation rounds at 2^-24 of its largest term, far above 2^-126 of any. The CUDA
 * kernels do the same (flash_common.cu, flush_tiny). */
#define FLUSH_TINY(T, p) select((p), (T)0.0f, (p) < FLT_MIN)

/* 2^x for the exponents of P (x = S - m: at most 0, -inf, or NaN), KEYS_PER_VEC at a time: the
 * builtin exp2, or on the register-blocked path (CPUs) a polynomial, x = n + f with n the
 * nearest integer and f in [-1/2, 1/2], 2^f by Cephes' exp2f minimax polynomial (relative error
 * below 2e-7) and 2^n added to its exponent bits: pocl's exp2 took about 15% of that path's
 * time (perf, B1 H8 N2048 d64 f32), split into 8-wide halves with its special cases. Below
 * 2^-126 it gives 0 (FLUSH_TINY would), a NaN stays NaN. */
#if REG_BLOCKED
float_keys exp2_keys(float_keys x)
{
    /* n = x rounded to nearest by adding and removing 1.5 * 2^23 (pocl's rint took a dozen
     * instructions); its bits minus the constant's are n as an integer, for |x| < 2^22. */
    const float_keys zero = 0.0f, round = 12582912.0f;
    float_keys shifted = x + round, n = shifted - round, f = x - n;
    float_keys poly = 1.535336188319500e-4f;
    poly = poly * f + 1.339887440266574e-3f;
    poly = poly * f + 9.618437357674640e-3f;
    poly = poly * f + 5.550332471162809e-2f;
    poly = poly * f + 2.402264791363012e-1f;
    poly = poly * f + 6.931472028550421e-1f;
    poly = poly * f + 1.0f;
    int_keys n_bits = (AS_INT_KEYS(shifted) - AS_INT_KEYS(round)) << 23;
    float_keys r = select(AS_FLOAT_KEYS(AS_INT_KEYS(poly) + n_bits), zero, x < -126.0f);
    return select(r, x, isnan(x));
}
#else
#define exp2_keys exp2
#endif

/* The online softmax over one S row, in two steps around dropout: lane_max is the max of a
 * lane's keys (s_lane[c], c in [0, Bc / TPR)); lane_exp replaces them by P = exp2(S - m_use)
 * and returns their sum. The row's max and sum are the lanes' combined (across_lanes_max /
 * _sum). A row with no allowed key so far keeps m = -inf: exponents use m_use = 0 instead, so
 * P = 0 and the rescale alpha = 0, never NaN (the FlashAttention rescale rule). fmax skips a NaN
 * score, whose exp2 then makes l NaN, as does a +inf max (exp2(inf - inf)). */
float lane_max(__local const float *s_lane)
{
    float_keys tile_max = -INFINITY; /* lane-wise max over the lane's vectors */
    for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++)
        tile_max = fmax(tile_max, S_LOAD_KEYS(s_lane + kvec * KEYS_PER_VEC));
    return hmax_keys(tile_max);
}

float lane_exp(__local float *s_lane, float m_use)
{
    float_keys tile_sum = 0.0f; /* lane-wise sum of P over the lane's vectors */
    for (int kvec = 0; kvec < VECS_PER_LANE_KEYS; kvec++) {
        float_keys s = S_LOAD_KEYS(s_lane + kvec * KEYS_PER_VEC);
        float_keys p = FLUSH_TINY(float_keys, exp2_keys(s - m_use));
        S_STORE_KEYS(p, s_lane + kvec * KEYS_PER_VEC);
        tile_sum += p;
    }
    return hsum_keys(tile_sum);
}

/* A row's max and sum of its lanes' values v: through share[r * TPR + lane], after a barrier
 * (so every lane of the row reads every other's), in lane order, so the sum is the same on
 * every run. Call from every work-item; with one lane per row, v itself and no barrier. */
#if TPR > 1
float across_lanes_max(__local float *share, int r, int lane, float v)
{
    share[r * TPR + lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float m = share[r * TPR];
    for (int t = 1; t < TPR; t++)
        m = fmax(m, share[r * TPR + t]);
    return m;
}

float across_lanes_sum(__local float *share, int r, int lane, float v)
{
    share[r * TPR + lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = share[r * TPR];
    for (int t = 1; t < TPR; t++)
        sum += share[r * TPR + t];
    return sum;
}
#else
#define across_lanes_max(share, r, lane, v) (v)
#define across_lanes_sum(share, r, lane, v) (v)
#endif

/* The keys [0, end) that the tile starting at row r0 visits: those its last row may attend
 * to, so causal and window launches skip K tiles entirely past the diagonal or the window. */
long keys_to_visit(const fa_kernel_params *p, long r0)
{
    return fa_keys_end(p, MASK, FEATURES, min(r0 + BLOCK_R, p->seqlen_q) - 1);
}
