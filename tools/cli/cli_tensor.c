/*
 * cli_tensor.c - host tensors for the `flashattn` program (see cli_tensor.h): allocation with
 * overflow checks, random fill, dtype rounding, .npy load/save and layout packing.
 */
#include "cli_tensor.h"

#include "cli_common.h"
#include "cli_memory.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_tensor_alloc(cli_tensor *t, const char *what, int64_t batch, int64_t heads, int64_t seq,
                     int64_t dim)
{
    const int64_t shape[4] = {batch, heads, seq, dim};
    size_t n = 1;
    int i;
    memset(t, 0, sizeof *t);
    for (i = 0; i < 4; i++) {
        if (shape[i] < 0 || (shape[i] != 0 && n > SIZE_MAX / sizeof(float) / (uint64_t)shape[i]))
            return cli_error("%s: shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                             "] is too large for this machine",
                             what, batch, heads, seq, dim);
        n *= (size_t)shape[i];
        t->shape[i] = shape[i];
    }
    t->count = n;
    if (n > 0) {
        t->data = calloc(n, sizeof(float));
        if (!t->data)
            return cli_error("%s: out of host memory for %zu elements", what, n);
    }
    return 0;
}

void cli_tensor_free(cli_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    t->data = NULL;
    t->count = 0;
}

void cli_tensor_fill_random(cli_tensor *t, uint64_t *state)
{
    size_t i;
    for (i = 0; i < t->count; i++)
        t->data[i] = cli_rand_uniform(state);
}

void cli_tensor_round(cli_tensor *t, fa_dtype dtype)
{
    size_t i;
    if (dtype == FA_DTYPE_F16)
        for (i = 0; i < t->count; i++)
            t->data[i] = fa_f16_to_f32(fa_f32_to_f16(t->data[i]));
    else if (dtype == FA_DTYPE_BF16)
        for (i = 0; i < t->count; i++)
            t->data[i] = fa_bf16_to_f32(fa_f32_to_bf16(t->data[i]));
}

/* Whether two values agree as far as NaN and infinity go (both finite counts as agreeing). */
static int same_non_finite(double x, double r)
{
    if (isfinite(x) && isfinite(r))
        return 1;
    return (isnan(x) && isnan(r)) || x == r;
}

void cli_tensor_compare(const cli_tensor *o, const cli_tensor *ref, cli_compare *out)
{
    double num = 0.0, den = 0.0;
    size_t i;
    memset(out, 0, sizeof *out);
    for (i = 0; i < ref->count; i++) {
        double x = o->data[i], r = ref->data[i], e;
        if (!same_non_finite(x, r)) {
            if (out->mismatches++ == 0) {
                out->first = i;
                out->first_x = o->data[i];
                out->first_ref = ref->data[i];
            }
            continue;
        }
        if (isfinite(r) && fabs(r) > out->max_ref)
            out->max_ref = fabs(r);
        if (!isfinite(x))
            continue; /* the same non-finite value on both sides */
        e = fabs(x - r);
        out->max_err = e > out->max_err ? e : out->max_err;
        num += e * e;
        den += r * r;
    }
    out->nmse = den > 0.0 ? num / den : num;
}

void cli_describe_mismatch(const cli_compare *c, const cli_tensor *ref, const char *name,
                           char *buf, size_t size)
{
    int64_t idx[4];
    size_t rest = c->first;
    int i;
    for (i = 3; i >= 0; i--) {
        idx[i] = ref->shape[i] > 0 ? (int64_t)(rest % (size_t)ref->shape[i]) : 0;
        rest = ref->shape[i] > 0 ? rest / (size_t)ref->shape[i] : rest;
    }
    snprintf(buf, size,
             "%zu output%s disagree%s with the reference on NaN or infinity; the first, "
             "%s[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], is %g where the reference "
             "is %g",
             c->mismatches, c->mismatches == 1 ? "" : "s", c->mismatches == 1 ? "s" : "", name,
             idx[0], idx[1], idx[2], idx[3], (double)c->first_x, (double)c->first_ref);
}

void cli_check_tolerance(fa_dtype dtype, double *atol, double *rtol)
{
    if (dtype == FA_DTYPE_F16) {
        *atol = 2e-3;
        *rtol = 2e-3;
    } else if (dtype == FA_DTYPE_BF16) {
        *atol = 1.6e-2;
        *rtol = 1.6e-2;
    } else {
        *atol = 1e-5;
        *rtol = 1e-5;
    }
}

npy_dtype cli_npy_dtype(fa_dtype dtype)
{
    return dtype == FA_DTYPE_F16 ? NPY_F16 : NPY_F32;
}

void cli_layout_file_shape(fa_layout layout, const int64_t in[4], int64_t out[4])
{
    int swap = layout == FA_LAYOUT_BSHD;
    out[0] = in[0];
    out[1] = in[swap ? 2 : 1];
    out[2] = in[swap ? 1 : 2];
    out[3] = in[3];
}

const char *cli_layout_dims(fa_layout layout)
{
    return layout == FA_LAYOUT_BSHD ? "[batch, seq, heads, head_dim]"
                                    : "[batch, heads, seq, head_dim]";
}

/* The header's tensor against the host memory left; prints why it does not fit. */
static int check_file_memory(const char *path, const npy_array *hdr)
{
    cli_memory_need need;
    char why[256];
    need.host = cli_mul_sat((uint64_t)hdr->count, sizeof(float));
    need.device = 0;
    if (cli_memory_fits(NULL, need, why, sizeof why) != 0)
        return cli_error("%s: its data %s", path, why);
    return 0;
}

/* Whether a file's dtype is one of the byte types (a block mask's), not a tensor's. */
static int byte_dtype(npy_dtype t)
{
    return t == NPY_U8 || t == NPY_BOOL;
}

/* A whole file of the float dtypes, or with `bytes` of the byte ones, widened to float. */
static int read_whole(const char *path, int bytes, npy_array *out)
{
    char err[256];
    npy_reader r;
    npy_array a;
    memset(out, 0, sizeof *out);
    if (npy_open(path, &r, err, sizeof err) != 0)
        return cli_error("%s: %s", path, err);
    a = r.a;
    if (byte_dtype(a.dtype) != bytes) {
        npy_close(&r);
        return cli_error("%s: unsupported dtype '%s' (want %s)", path, npy_dtype_descr(a.dtype),
                         bytes ? "'|u1' or '|b1'" : "'<f4' or '<f2'");
    }
    if (check_file_memory(path, &a) != 0) {
        npy_close(&r);
        return CLI_EXIT_FAIL;
    }
    a.data = a.count ? malloc(a.count * sizeof(float)) : NULL; /* bounded by npy_open */
    if (a.count && !a.data) {
        npy_close(&r);
        return cli_error("%s: out of host memory for %zu elements", path, a.count);
    }
    if (npy_read_values(&r, a.data, a.count, err, sizeof err) != 0 ||
        npy_finish(&r, err, sizeof err) != 0) {
        npy_close(&r);
        free(a.data);
        return cli_error("%s: %s", path, err);
    }
    *out = a;
    return 0;
}

int cli_npy_read(const char *path, npy_array *out)
{
    return read_whole(path, 0, out);
}

int cli_npy_read_bytes(const char *path, npy_array *out)
{
    return read_whole(path, 1, out);
}

/* The file's rank and dimensions, before any data is read. */
static int check_file_shape(const char *path, fa_layout layout, const npy_array *a)
{
    int i;
    if (a->rank != 4)
        return cli_error("%s: rank %d, want 4 (%s for --layout %s)", path, a->rank,
                         cli_layout_dims(layout), cli_layout_name(layout));
    for (i = 0; i < 4; i++)
        /* A zero elsewhere can make a huge shape hold no data; refuse such sizes anyway. */
        if (a->shape[i] > CLI_MAX_SIZE)
            return cli_error("%s: dimension %d is %" PRId64 ", more than %d", path, i, a->shape[i],
                             CLI_MAX_SIZE);
    return 0;
}

/* The file's rows in its own order (b, then the layout's second and third dimensions), each
 * placed where it belongs in the BHSD tensor t. */
static int read_rows(npy_reader *r, fa_layout layout, cli_tensor *t, char *err, size_t size)
{
    const int64_t *s = t->shape;
    int64_t b, i, j, d = s[3];
    int swap = layout == FA_LAYOUT_BSHD;
    if (!swap || t->count == 0)
        return npy_read_values(r, t->data, t->count, err, size);
    for (b = 0; b < s[0]; b++)
        for (i = 0; i < s[2]; i++)     /* seq */
            for (j = 0; j < s[1]; j++) /* heads */
                if (npy_read_values(r, t->data + ((b * s[1] + j) * s[2] + i) * d, (size_t)d, err,
                                    size) != 0)
                    return -1;
    return 0;
}

int cli_tensor_load(const char *path, fa_layout layout, cli_tensor *t, npy_dtype *file_dtype)
{
    char err[256];
    npy_reader r;
    memset(t, 0, sizeof *t);
    if (npy_open(path, &r, err, sizeof err) != 0)
        return cli_error("%s: %s", path, err);
    if (byte_dtype(r.a.dtype)) {
        npy_close(&r);
        return cli_error("%s: unsupported dtype '%s' (want '<f4' or '<f2')", path,
                         npy_dtype_descr(r.a.dtype));
    }
    if (check_file_shape(path, layout, &r.a) != 0 || check_file_memory(path, &r.a) != 0) {
        npy_close(&r);
        return CLI_EXIT_FAIL;
    }
    cli_layout_file_shape(layout, r.a.shape, t->shape);
    t->count = r.a.count;
    t->data = t->count ? malloc(t->count * sizeof(float)) : NULL; /* bounded by npy_open */
    if (t->count && !t->data) {
        npy_close(&r);
        return cli_error("%s: out of host memory for %zu elements", path, t->count);
    }
    if (read_rows(&r, layout, t, err, sizeof err) != 0 || npy_finish(&r, err, sizeof err) != 0) {
        npy_close(&r);
        cli_tensor_free(t);
        return cli_error("%s: %s", path, err);
    }
    *file_dtype = r.a.dtype;
    return 0;
}

/* The tensor's rows in the file's order (see read_rows). */
static int write_rows(npy_writer *w, fa_layout layout, const cli_tensor *t, char *err,
                      size_t size)
{
    const int64_t *s = t->shape;
    int64_t b, i, j, d = s[3];
    if (layout != FA_LAYOUT_BSHD || t->count == 0)
        return npy_write_values(w, t->data, t->count, err, size);
    for (b = 0; b < s[0]; b++)
        for (i = 0; i < s[2]; i++)
            for (j = 0; j < s[1]; j++)
                if (npy_write_values(w, t->data + ((b * s[1] + j) * s[2] + i) * d, (size_t)d, err,
                                     size) != 0)
                    return -1;
    return 0;
}

int cli_tensor_save(const char *path, fa_layout layout, const cli_tensor *t, fa_dtype dtype)
{
    char err[256];
    int64_t shape[4];
    npy_writer w;
    cli_layout_file_shape(layout, t->shape, shape);
    if (npy_create(path, cli_npy_dtype(dtype), 4, shape, &w, err, sizeof err) != 0 ||
        write_rows(&w, layout, t, err, sizeof err) != 0 || npy_commit(&w, err, sizeof err) != 0)
        return cli_error("%s: %s", path, err);
    return 0;
}

static void store(void *image, size_t i, fa_dtype dtype, float v)
{
    if (dtype == FA_DTYPE_F16)
        ((uint16_t *)image)[i] = fa_f32_to_f16(v);
    else if (dtype == FA_DTYPE_BF16)
        ((uint16_t *)image)[i] = fa_f32_to_bf16(v);
    else
        ((float *)image)[i] = v;
}

static float load(const void *image, size_t i, fa_dtype dtype)
{
    if (dtype == FA_DTYPE_F16)
        return fa_f16_to_f32(((const uint16_t *)image)[i]);
    if (dtype == FA_DTYPE_BF16)
        return fa_bf16_to_f32(((const uint16_t *)image)[i]);
    return ((const float *)image)[i];
}

/* Element index of row (b, h, s) in the image, whose buffer holds the tensor's extent
 * (cli_tensor_bytes, of a problem the library validated). */
static size_t row_start(const fa_tensor_layout *l, int64_t b, int64_t h, int64_t s)
{
    return (size_t)(l->offset + b * l->stride_batch + h * l->stride_head + s * l->stride_seq);
}

void cli_pack(const cli_tensor *t, const fa_tensor_layout *l, fa_dtype dtype, void *image)
{
    const float *src = t->data;
    int64_t b, h, s, x;
    for (b = 0; b < t->shape[0]; b++)
        for (h = 0; h < t->shape[1]; h++)
            for (s = 0; s < t->shape[2]; s++) {
                size_t row = row_start(l, b, h, s);
                for (x = 0; x < t->shape[3]; x++)
                    store(image, row + (size_t)x, dtype, *src++);
            }
}

void cli_unpack(const void *image, const fa_tensor_layout *l, fa_dtype dtype, cli_tensor *t)
{
    float *dst = t->data;
    int64_t b, h, s, x;
    for (b = 0; b < t->shape[0]; b++)
        for (h = 0; h < t->shape[1]; h++)
            for (s = 0; s < t->shape[2]; s++) {
                size_t row = row_start(l, b, h, s);
                for (x = 0; x < t->shape[3]; x++)
                    *dst++ = load(image, row + (size_t)x, dtype);
            }
}
