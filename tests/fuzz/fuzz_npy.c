/*
 * fuzz_npy.c - fuzz harness for the command-line program's .npy reader (tools/npy/npy.c). The
 * input is the file. The reader is the CLI's one parser of untrusted files: --q/--k/--v.
 *
 * Properties checked on every input:
 *   - npy_parse returns 0 or -1; on -1 the reason is non-empty, NUL-terminated within err_size,
 *     and nothing past err_size is written; with no err buffer it gives the same answer.
 *   - on 0 its description agrees with the bytes: rank within 0..NPY_MAX_RANK, no negative
 *     dimension, count = the product of the shape, and exactly count elements after the header.
 *   - npy_read of the same bytes from a file agrees with npy_parse, and its values are the
 *     file's elements (f32 bit for bit, f16 widened, u1 and b1 bytes as their values).
 *   - npy_write of those values and a second npy_read give the same shape and values back, with
 *     the data starting on a 64-byte boundary; for the byte dtypes, which the writer does not
 *     write, npy_write refuses with a reason and leaves no file.
 */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#endif

#include "fuzz.h"

#include "flashattn.h"
#include "npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reason buffer, and guard bytes after it that npy_parse must never touch. */
#define ERR_CAP 96
#define GUARD 0x5a

/* Files of the round trip, in a private directory made once per process. */
static char tmp_dir[512], in_path[600], out_path[600];

static void remove_tmp(void)
{
    remove(in_path);
    remove(out_path);
    rmdir(tmp_dir);
}

static void make_tmp(void)
{
    const char *base = getenv("TMPDIR");
    if (tmp_dir[0])
        return;
    snprintf(tmp_dir, sizeof tmp_dir, "%s/fuzz_npy.XXXXXX", base && *base ? base : "/tmp");
    FZ_CHECK(mkdtemp(tmp_dir) != NULL, "cannot create a directory like %s", tmp_dir);
    snprintf(in_path, sizeof in_path, "%s/in.npy", tmp_dir);
    snprintf(out_path, sizeof out_path, "%s/out.npy", tmp_dir);
    atexit(remove_tmp);
}

static size_t elem_size(npy_dtype dt)
{
    return dt == NPY_F16 ? 2 : dt == NPY_U8 || dt == NPY_BOOL ? 1 : 4;
}

/* Element i of the file's data as the reader must hand it over. */
static float element(const uint8_t *p, npy_dtype dt, size_t i)
{
    float f;
    if (dt == NPY_F16)
        return fa_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    if (dt == NPY_U8 || dt == NPY_BOOL)
        return (float)p[i];
    uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                 (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Same value: bit for bit, except that any NaN matches any NaN (f32 -> f16 may change a
 * payload). */
static int same_value(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

/* npy_parse with a reason buffer of err_size bytes; returns its result, checks the reason. */
static int parse_checked(const uint8_t *data, size_t size, size_t err_size, npy_array *a,
                         size_t *off)
{
    char err[ERR_CAP + 16];
    memset(err, GUARD, sizeof err);
    int r = npy_parse(data, size, a, off, err, err_size);
    FZ_CHECK(r == 0 || r == -1, "npy_parse returned %d", r);
    for (size_t i = err_size; i < sizeof err; i++)
        FZ_CHECK((unsigned char)err[i] == GUARD, "npy_parse wrote err[%zu], past err_size %zu", i,
                 err_size);
    if (r != 0) {
        FZ_CHECK(memchr(err, '\0', err_size) != NULL, "the reason is not NUL-terminated");
        FZ_CHECK(err_size == 1 || err[0] != '\0', "npy_parse failed with an empty reason");
    }
    return r;
}

static void check_description(const npy_array *a, size_t off, size_t size)
{
    size_t count = 1;
    int zero = 0, overflow = 0;
    FZ_CHECK(a->rank >= 0 && a->rank <= NPY_MAX_RANK, "rank %d", a->rank);
    FZ_CHECK(a->dtype == NPY_F32 || a->dtype == NPY_F16 || a->dtype == NPY_U8 ||
                 a->dtype == NPY_BOOL,
             "dtype %d", (int)a->dtype);
    for (int i = 0; i < a->rank; i++) {
        uint64_t d = (uint64_t)a->shape[i];
        FZ_CHECK(a->shape[i] >= 0, "shape[%d] = %lld", i, (long long)a->shape[i]);
        if (d == 0)
            zero = 1;
        else if (d > SIZE_MAX / count)
            overflow = 1;
        else
            count *= (size_t)d;
    }
    /* A zero dimension empties the array whatever the others are. */
    count = zero ? 0 : count;
    FZ_CHECK(zero || !overflow, "npy_parse accepted a shape whose size overflows");
    FZ_CHECK(count == a->count, "count %zu, but the shape's product is %zu", a->count, count);
    FZ_CHECK(a->data == NULL, "npy_parse set data");
    FZ_CHECK(off <= size && (size - off) / elem_size(a->dtype) == a->count &&
                 (size - off) % elem_size(a->dtype) == 0,
             "%zu elements do not fill the %zu bytes after the header", a->count, size - off);
}

/* npy_read must agree with `want` on the shape and, when elems is given, give those elements.
 * The caller frees *got. */
static void read_checked(const char *path, const npy_array *want, const uint8_t *elems,
                         npy_array *got)
{
    char err[ERR_CAP];
    int r = npy_read(path, got, err, sizeof err);
    FZ_CHECK(r == 0, "npy_read of %s failed where it should not: %s", path, err);
    FZ_CHECK(got->dtype == want->dtype && got->rank == want->rank && got->count == want->count &&
                 memcmp(got->shape, want->shape, sizeof got->shape[0] * (size_t)got->rank) == 0,
             "npy_read and npy_parse disagree on dtype, rank or shape");
    FZ_CHECK((got->count == 0) == (got->data == NULL), "data is %s for %zu elements",
             got->data ? "set" : "NULL", got->count);
    for (size_t i = 0; elems && i < got->count; i++)
        FZ_CHECK(same_value(got->data[i], element(elems, want->dtype, i)),
                 "element %zu: read %a, the file holds %a", i, (double)got->data[i],
                 (double)element(elems, want->dtype, i));
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    FZ_CHECK(f != NULL, "cannot create %s", path);
    FZ_CHECK(fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s", path);
}

/* Read the input back from a file, write what was read, and read that again. */
static void round_trip(const uint8_t *data, size_t size, const npy_array *a, size_t off)
{
    char err[ERR_CAP];
    npy_array first, again;
    struct stat st;
    make_tmp();
    write_file(in_path, data, size);
    read_checked(in_path, a, data + off, &first);
    remove(out_path); /* an earlier input's; a refused write must leave none */
    int w = npy_write(out_path, first.dtype, first.rank, first.shape, first.data, err, sizeof err);
    if (first.dtype == NPY_U8 || first.dtype == NPY_BOOL) {
        FZ_CHECK(w == -1 && err[0] != '\0' && stat(out_path, &st) != 0,
                 "npy_write of a byte dtype did not refuse cleanly");
        npy_free(&first);
        return;
    }
    FZ_CHECK(w == 0, "npy_write of what npy_read gave failed: %s", err);
    size_t data_bytes = first.count * elem_size(first.dtype);
    FZ_CHECK(stat(out_path, &st) == 0 && (size_t)st.st_size >= data_bytes &&
                 ((size_t)st.st_size - data_bytes) % 64 == 0,
             "npy_write's data does not start on a 64-byte boundary");
    read_checked(out_path, &first, NULL, &again);
    for (size_t i = 0; i < first.count; i++)
        FZ_CHECK(same_value(again.data[i], first.data[i]), "element %zu: wrote %a, read %a", i,
                 (double)first.data[i], (double)again.data[i]);
    npy_free(&again);
    npy_free(&first);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    npy_array a, b;
    size_t off = 0, off2 = 0;
    /* Reason buffers from 1 to ERR_CAP bytes, so truncation is exercised too. */
    int r = parse_checked(data, size, 1 + size % ERR_CAP, &a, &off);
    int r2 = npy_parse(data, size, &b, &off2, NULL, 0);
    FZ_CHECK(r == r2, "npy_parse answers %d with a reason buffer, %d without", r, r2);
    if (r != 0)
        return 0;
    FZ_CHECK(off == off2 && a.count == b.count, "npy_parse is not repeatable");
    check_description(&a, off, size);
    round_trip(data, size, &a, off);
    return 0;
}
