/*
 * naive_blast.cl - the softmax between the two CLBlast GEMMs of the tuned-GEMM naive attention
 * (naive_blast.c), for `flashattn bench` only:
 *
 *   S = scale * Q K^T   (CLBlast SGEMM: every score, masked or not, as a GEMM computes them)
 *   P = softmax(S) row by row, the causal mask applied here     <- this kernel
 *   O = P V             (CLBlast SGEMM)
 *
 * S/P is f32 [rows = batch * heads_q * seq_q, seq_k], P overwriting S in place. Causal masks
 * keep a prefix of each row: row i sees keys j < visible(i), so the mask is one bound, not a
 * compare per element. A row with no visible key (bottom-right with seq_q > seq_k) becomes
 * P = 0, as in the plain naive kernels and the library.
 *
 * One work-group per row, the work-items striding over it and reducing the max and the sum in
 * local memory: a row is read three times and written twice, which is what a standard
 * attention's softmax costs; on a GPU a work-item per row would leave most lanes idle.
 */

/* Keys row i may see: j < visible(i). mask is fa_mask (0 none, 1 top-left, 2 bottom-right). */
long visible(long i, long seq_q, long seq_k, int mask)
{
    long end = seq_k;
    if (mask == 1)
        end = i + 1;
    else if (mask == 2)
        end = i + 1 + (seq_k - seq_q);
    return clamp(end, 0L, seq_k);
}

/* Tree reduction over the work-group (its size a power of two); op 0 max, 1 sum. */
float reduce(__local float *red, float x, int op)
{
    size_t lid = get_local_id(0);
    red[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (size_t step = get_local_size(0) / 2; step > 0; step /= 2) {
        if (lid < step)
            red[lid] = op == 0 ? fmax(red[lid], red[lid + step]) : red[lid] + red[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    x = red[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* red is reused by the next reduction */
    return x;
}

/* NDRange (rows * wg) with local size wg: work-group r owns row r. */
__kernel void blast_softmax(__global float *s, long seq_q, long seq_k, int mask,
                            __local float *red)
{
    ulong r = get_group_id(0);
    long lid = (long)get_local_id(0), wg = (long)get_local_size(0);
    long end = visible((long)(r % (ulong)seq_q), seq_q, seq_k, mask);
    __global float *row = s + r * (ulong)seq_k;
    float m = -INFINITY, sum = 0.0f;
    for (long j = lid; j < end; j += wg)
        m = fmax(m, row[j]);
    m = reduce(red, m, 0);
    /* Each work-item rereads only the elements it wrote: no barrier needed between passes. */
    for (long j = lid; j < end; j += wg) {
        float e = exp(row[j] - m);
        row[j] = e;
        sum += e;
    }
    sum = reduce(red, sum, 1);
    for (long j = lid; j < seq_k; j += wg)
        row[j] = j < end ? row[j] / sum : 0.0f;
}
