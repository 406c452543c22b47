/*
 * flash_blocks.cl - the register-blocked paths' two matrix products (REG_BLOCKED, CPUs only:
 * backends/opencl/cl_rules.c), shared by the forward's (flash_fwd_blocked.cl) and the
 * backward's (flash_bwd_blocked.cl): block_scores, REG_ROWS rows of a row-major tile times a
 * transposed tile (S = Q K^T; the backward's dP, S^T and dP^T too), and block_values, REG_ROWS
 * rows of weights times a row-major tile added to f32 rows (O += P V; dQ, dK and dV too). Each
 * loaded vector is multiplied into REG_ROWS accumulators.
 *
 * Part of the forward and the backward programs (cl_program.c), after the entry's file.
 */
#if REG_BLOCKED
#if BLOCK_R % REG_ROWS != 0
#error "REG_BLOCKED: BLOCK_R a multiple of REG_ROWS"
#endif

/* The f32 O tile's vectors, DIMS_PER_VEC elements: loads, and stores as one unaligned vector
 * move (S_STORE_KEYS says why). */
#define O_LOAD_DIMS(p) VEC_NAME(v, load, DIMS_PER_VEC)(0, p)
#if DIMS_PER_VEC > 1
typedef float float_dims_unaligned __attribute__((ext_vector_type(DIMS_PER_VEC), aligned(4)));
#define O_STORE_DIMS(val, p) (*(__local float_dims_unaligned *)(p) = (val))
#else
#define O_STORE_DIMS(val, p) (*(p) = (val))
#endif

/* Keys of S that block_scores makes at a time: KEY_VECS vectors. */
#define SCORE_CHUNK (KEY_VECS * KEYS_PER_VEC)

/* S[i][c] = sum_x Q[i][x] * K^T[x][c] * scale_log2 for the block's REG_ROWS rows (q_rows: rows of
 * the Q tile, d apart; s_rows: rows of S, Bc apart) and the keys c of the tile in [c_lo, c_hi)
 * (k_t: the d x Bc K^T tile), by whole chunks of SCORE_CHUNK keys: per KEY_VECS key vectors,
 * REG_ROWS x KEY_VECS accumulators (16 of AVX-512's 32 registers), each K^T vector loaded once
 * and multiplied by the rows' Q[i][x], broadcast. */
void block_scores(__local float *s_rows, __local const float *q_rows, __local const float *k_t,
                  float scale_log2, int c_lo, int c_hi)
{
    for (int c0 = c_lo / SCORE_CHUNK * SCORE_CHUNK; c0 < c_hi; c0 += SCORE_CHUNK) {
        float_keys acc[REG_ROWS][KEY_VECS]; /* acc[i][j]: S[i][c0 + KEYS_PER_VEC * j ..] */
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < KEY_VECS; j++)
                acc[i][j] = 0.0f;
        for (int x = 0; x < HEAD_DIM; x++) {
            float_keys k_vec[KEY_VECS]; /* K^T[x][c0 + KEYS_PER_VEC * j ..] */
#pragma unroll
            for (int j = 0; j < KEY_VECS; j++)
                k_vec[j] = VLOAD_KEYS(k_t + x * BLOCK_C + c0 + j * KEYS_PER_VEC);
#pragma unroll
            for (int i = 0; i < REG_ROWS; i++) {
                float q_ix = q_rows[i * HEAD_DIM + x]; /* Q[i][x] */
#pragma unroll
                for (int j = 0; j < KEY_VECS; j++)
                    acc[i][j] += q_ix * k_vec[j];
            }
        }
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < KEY_VECS; j++)
                S_STORE_KEYS(acc[i][j] * scale_log2, s_rows + i * BLOCK_C + c0 + j * KEYS_PER_VEC);
    }
}

/* O[i][x] = O[i][x] * alpha[i] + sum_c P[i][c] * V[c][x], c in [c_lo, c_hi) (keys outside it
 * have P = 0 and are skipped), for the block's REG_ROWS rows (o_rows: rows of the f32 O tile, d
 * apart; p_rows: rows of P, Bc apart; v: the Bc x d V tile): per DIM_VECS vectors of an O row,
 * REG_ROWS x DIM_VECS accumulators, each V vector loaded once and multiplied by the rows'
 * P[i][c], broadcast. */
void block_values(__local float *o_rows, __local const float *p_rows, __local const float *v,
                  const float *alpha, int c_lo, int c_hi)
{
    for (int x0 = 0; x0 < HEAD_DIM; x0 += DIM_VECS * DIMS_PER_VEC) {
        float_dims acc[REG_ROWS][DIM_VECS]; /* acc[i][j]: O[i][x0 + DIMS_PER_VEC * j ..] */
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < DIM_VECS; j++)
                acc[i][j] = alpha[i] * O_LOAD_DIMS(o_rows + i * HEAD_DIM + x0 + j * DIMS_PER_VEC);
        for (int c = c_lo; c < c_hi; c++) {
            float_dims v_vec[DIM_VECS]; /* V[c][x0 + DIMS_PER_VEC * j ..] */
#pragma unroll
            for (int j = 0; j < DIM_VECS; j++)
                v_vec[j] = O_LOAD_DIMS(v + c * HEAD_DIM + x0 + j * DIMS_PER_VEC);
#pragma unroll
            for (int i = 0; i < REG_ROWS; i++) {
                float p_ic = p_rows[i * BLOCK_C + c]; /* P[i][c] */
#pragma unroll
                for (int j = 0; j < DIM_VECS; j++)
                    acc[i][j] += p_ic * v_vec[j];
            }
        }
#pragma unroll
        for (int i = 0; i < REG_ROWS; i++)
#pragma unroll
            for (int j = 0; j < DIM_VECS; j++)
                O_STORE_DIMS(acc[i][j], o_rows + i * HEAD_DIM + x0 + j * DIMS_PER_VEC);
    }
}
#endif
