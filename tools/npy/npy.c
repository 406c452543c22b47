/*
 * npy.c - a small, defensive reader and writer of NumPy .npy files (see npy.h).
 *
 * Format (numpy.lib.format): the magic "\x93NUMPY", a major and a minor version byte, the header
 * length (uint16 LE in 1.0, uint32 LE in 2.0 and 3.0), then a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (1, 8, 256, 64), }
 * padded with spaces and a newline, then the raw elements. The dict is parsed by a tiny
 * tokenizer rather than sscanf so that keys may come in any order and any malformed byte is
 * reported instead of read past. Elements are decoded byte by byte as little-endian, so the code
 * does not depend on the host's byte order or on the data being aligned.
 */
#include "npy.h"

#include "flashattn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define NPY_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define NPY_PRINTF(fmt, args)
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* NumPy refuses headers over 10000 bytes by default; anything past 1 MiB is not a real header
 * and would only make us allocate or scan for nothing. */
#define NPY_MAX_HEADER_LEN (1u << 20)
/* Longest descr we accept to look at ('<f4' is 3); longer ones are reported as unsupported. */
#define NPY_DESCR_CAP 32
/* Elements encoded per fwrite when writing. */
#define NPY_WRITE_CHUNK 4096

static void set_err(char *err, size_t err_size, const char *fmt, ...) NPY_PRINTF(3, 4);

static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    va_list ap;
    if (!err || err_size == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

const char *npy_dtype_descr(npy_dtype dtype)
{
    return dtype == NPY_F16 ? "<f2" : "<f4";
}

static size_t npy_elem_size(npy_dtype dtype)
{
    return dtype == NPY_F16 ? 2 : 4;
}

/* ---- header tokenizer --------------------------------------------------------------------- */

/* A read position in the header text; every access checks i < n. */
typedef struct npy_cursor {
    const char *s;
    size_t n;
    size_t i;
} npy_cursor;

static void cur_skip_ws(npy_cursor *c)
{
    while (c->i < c->n &&
           (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

/* The next non-blank character, or -1 at the end. */
static int cur_peek(npy_cursor *c)
{
    cur_skip_ws(c);
    return c->i < c->n ? (unsigned char)c->s[c->i] : -1;
}

static int cur_accept(npy_cursor *c, char ch)
{
    if (cur_peek(c) != (unsigned char)ch)
        return 0;
    c->i++;
    return 1;
}

/* A quoted string without escapes (NumPy's keys and simple descrs never need them). */
static const char *cur_string(npy_cursor *c, char *out, size_t cap)
{
    int quote = cur_peek(c);
    size_t start;
    if (quote != '\'' && quote != '"')
        return "expected a quoted string";
    start = ++c->i;
    while (c->i < c->n && c->s[c->i] != (char)quote) {
        if (c->s[c->i] == '\\')
            return "escape sequences in strings are not supported";
        c->i++;
    }
    if (c->i >= c->n)
        return "unterminated string";
    if (c->i - start >= cap)
        return "string too long";
    memcpy(out, c->s + start, c->i - start);
    out[c->i - start] = '\0';
    c->i++; /* the closing quote */
    return NULL;
}

static const char *cur_bool(npy_cursor *c, int *out)
{
    cur_peek(c);
    if (c->n - c->i >= 4 && memcmp(c->s + c->i, "True", 4) == 0) {
        *out = 1;
        c->i += 4;
        return NULL;
    }
    if (c->n - c->i >= 5 && memcmp(c->s + c->i, "False", 5) == 0) {
        *out = 0;
        c->i += 5;
        return NULL;
    }
    return "fortran_order is not True or False";
}

/* A non-negative decimal dimension, overflow-checked against INT64_MAX. */
static const char *cur_dim(npy_cursor *c, int64_t *out)
{
    int64_t v = 0;
    int ch = cur_peek(c);
    if (ch < '0' || ch > '9')
        return "shape holds something other than non-negative integers";
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        int d = c->s[c->i] - '0';
        if (v > (INT64_MAX - d) / 10)
            return "a shape dimension does not fit in 64 bits";
        v = v * 10 + d;
        c->i++;
    }
    if (c->i < c->n && c->s[c->i] == 'L') /* Python 2 era writers: (3L, 4L) */
        c->i++;
    *out = v;
    return NULL;
}

static const char *cur_shape(npy_cursor *c, npy_array *a)
{
    a->rank = 0;
    if (!cur_accept(c, '('))
        return "shape is not a tuple";
    for (;;) {
        const char *e;
        if (cur_accept(c, ')'))
            return NULL;
        if (a->rank == NPY_MAX_RANK)
            return "shape has too many dimensions";
        e = cur_dim(c, &a->shape[a->rank]);
        if (e)
            return e;
        a->rank++;
        if (cur_accept(c, ','))
            continue;
        if (cur_accept(c, ')'))
            return NULL;
        return "malformed shape tuple";
    }
}

/* Which keys the dict has held so far, to catch missing and repeated ones. */
enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

/* One `'key': value` entry of the header dict. */
static const char *cur_entry(npy_cursor *c, npy_array *a, char *descr, int *fortran, unsigned *seen)
{
    char key[32];
    unsigned bit;
    const char *e = cur_string(c, key, sizeof key);
    if (e)
        return "malformed header dict (a key is not a short quoted string)";
    if (!cur_accept(c, ':'))
        return "malformed header dict (no ':' after a key)";
    if (strcmp(key, "descr") == 0)
        bit = KEY_DESCR;
    else if (strcmp(key, "fortran_order") == 0)
        bit = KEY_FORTRAN;
    else if (strcmp(key, "shape") == 0)
        bit = KEY_SHAPE;
    else
        return "header has an unexpected key";
    if (*seen & bit)
        return "header repeats a key";
    *seen |= bit;
    if (bit == KEY_DESCR) {
        e = cur_string(c, descr, NPY_DESCR_CAP);
        return e ? "descr is not a simple dtype string" : NULL;
    }
    if (bit == KEY_FORTRAN)
        return cur_bool(c, fortran);
    return cur_shape(c, a);
}

static const char *cur_dict(npy_cursor *c, npy_array *a, char *descr, int *fortran)
{
    unsigned seen = 0;
    if (!cur_accept(c, '{'))
        return "header is not a dict";
    for (;;) {
        const char *e;
        if (cur_accept(c, '}'))
            break;
        e = cur_entry(c, a, descr, fortran, &seen);
        if (e)
            return e;
        if (cur_accept(c, ','))
            continue;
        if (cur_accept(c, '}'))
            break;
        return "malformed header dict (no ',' or '}' after a value)";
    }
    if (cur_peek(c) != -1)
        return "unexpected characters after the header dict";
    if (!(seen & KEY_DESCR))
        return "header has no 'descr'";
    if (!(seen & KEY_FORTRAN))
        return "header has no 'fortran_order'";
    if (!(seen & KEY_SHAPE))
        return "header has no 'shape'";
    return NULL;
}

/*
 * Copies text from a file into out for a message: printable ASCII as is, a backslash doubled,
 * anything else as \xNN, so a header cannot put control characters (terminal escapes) on the
 * user's screen. out needs 4 bytes per input byte plus 1.
 */
static void escape_text(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 5 <= cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\\')
            n += (size_t)snprintf(out + n, cap - n, "\\\\");
        else if (ch >= 0x20 && ch < 0x7f)
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", ch);
    }
    out[n] = '\0';
}

/* ---- parse ------------------------------------------------------------------------------- */

/* Magic, version and header length: sets *header_start and *header_len within buf. */
static int parse_preamble(const unsigned char *buf, size_t len, size_t *header_start,
                          size_t *header_len, char *err, size_t err_size)
{
    unsigned major, minor;
    uint32_t hlen;
    if (len < NPY_MAGIC_LEN || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        set_err(err, err_size, "bad magic: not a .npy file");
        return -1;
    }
    if (len < 8) {
        set_err(err, err_size, "truncated preamble (%zu bytes)", len);
        return -1;
    }
    major = buf[6];
    minor = buf[7];
    if (minor != 0 || major < 1 || major > 3) {
        set_err(err, err_size, "unsupported .npy format version %u.%u", major, minor);
        return -1;
    }
    *header_start = major == 1 ? 10 : 12;
    if (len < *header_start) {
        set_err(err, err_size, "truncated preamble (%zu bytes)", len);
        return -1;
    }
    if (major == 1)
        hlen = (uint32_t)buf[8] | (uint32_t)buf[9] << 8;
    else
        hlen = (uint32_t)buf[8] | (uint32_t)buf[9] << 8 | (uint32_t)buf[10] << 16 |
               (uint32_t)buf[11] << 24;
    if (hlen > NPY_MAX_HEADER_LEN) {
        set_err(err, err_size, "header length %" PRIu32 " is absurd (limit %u)", hlen,
                NPY_MAX_HEADER_LEN);
        return -1;
    }
    if (hlen > len - *header_start) {
        set_err(err, err_size, "truncated header (says %" PRIu32 " bytes, %zu present)", hlen,
                len - *header_start);
        return -1;
    }
    *header_len = hlen;
    return 0;
}

/* Element count of a shape, the one rule of the reader and the writer: every dimension and the
 * product must fit in size_t as floats (the in-memory form of both dtypes), so a shape that
 * npy_read accepts npy_write accepts too, whatever the order of its dimensions or a zero in it. */
static int shape_count(int rank, const int64_t *shape, size_t *count)
{
    const size_t cap = SIZE_MAX / sizeof(float);
    size_t n = 1;
    int r, zero = 0;
    for (r = 0; r < rank; r++) {
        if (shape[r] < 0 || (uint64_t)shape[r] > cap)
            return -1;
        zero |= shape[r] == 0;
    }
    for (r = 0; r < rank && !zero; r++) {
        if (n > cap / (size_t)shape[r])
            return -1;
        n *= (size_t)shape[r];
    }
    *count = zero ? 0 : n;
    return 0;
}

int npy_parse(const unsigned char *buf, size_t len, npy_array *out, size_t *data_offset, char *err,
              size_t err_size)
{
    size_t hstart, hlen, count, need, have;
    char descr[NPY_DESCR_CAP] = "";
    int fortran = 0;
    npy_array a;
    npy_cursor c;
    const char *e;

    memset(&a, 0, sizeof a);
    if (parse_preamble(buf, len, &hstart, &hlen, err, err_size) != 0)
        return -1;
    c.s = (const char *)buf + hstart;
    c.n = hlen;
    c.i = 0;
    e = cur_dict(&c, &a, descr, &fortran);
    if (e) {
        set_err(err, err_size, "bad header: %s", e);
        return -1;
    }
    if (strcmp(descr, "<f4") == 0) {
        a.dtype = NPY_F32;
    } else if (strcmp(descr, "<f2") == 0) {
        a.dtype = NPY_F16;
    } else {
        char shown[4 * NPY_DESCR_CAP];
        escape_text(descr, shown, sizeof shown);
        set_err(err, err_size, "unsupported dtype '%s' (want '<f4' or '<f2')", shown);
        return -1;
    }
    if (fortran) {
        set_err(err, err_size, "fortran_order is True (only C order is supported)");
        return -1;
    }
    if (shape_count(a.rank, a.shape, &count) != 0) {
        set_err(err, err_size, "shape is too large (its size overflows)");
        return -1;
    }
    need = count * npy_elem_size(a.dtype);
    have = len - hstart - hlen;
    if (have != need) {
        set_err(err, err_size, "%s: the header's shape needs %zu data bytes, the file has %zu",
                have < need ? "file is truncated" : "file is longer than its header says", need,
                have);
        return -1;
    }
    a.count = count;
    *out = a;
    *data_offset = hstart + hlen;
    return 0;
}

/* ---- read -------------------------------------------------------------------------------- */

/* Reads all of a file into a malloc'd buffer (grown by doubling, so only what exists is held). */
static int slurp(const char *path, unsigned char **out, size_t *out_len, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f) {
        set_err(err, err_size, "cannot open: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        size_t got;
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            unsigned char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) {
                set_err(err, err_size, "out of memory reading the file");
                break;
            }
            buf = nb;
            cap = ncap;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                set_err(err, err_size, "read error: %s", strerror(errno));
            else {
                fclose(f);
                *out = buf;
                *out_len = len;
                return 0;
            }
            break;
        }
    }
    fclose(f);
    free(buf);
    return -1;
}

static void decode(const unsigned char *src, npy_dtype dtype, size_t count, float *dst)
{
    size_t i;
    for (i = 0; i < count; i++) {
        if (dtype == NPY_F16) {
            const unsigned char *p = src + 2 * i;
            dst[i] = fa_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
        } else {
            const unsigned char *p = src + 4 * i;
            uint32_t u =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&dst[i], &u, sizeof u);
        }
    }
}

int npy_read(const char *path, npy_array *out, char *err, size_t err_size)
{
    unsigned char *buf;
    size_t len, off;
    npy_array a;

    memset(out, 0, sizeof *out);
    if (slurp(path, &buf, &len, err, err_size) != 0)
        return -1;
    if (npy_parse(buf, len, &a, &off, err, err_size) != 0) {
        free(buf);
        return -1;
    }
    if (a.count > 0) {
        /* npy_parse bounds count * elem_size, but f16 widened to float doubles it. */
        a.data = a.count <= SIZE_MAX / sizeof(float) ? malloc(a.count * sizeof(float)) : NULL;
        if (!a.data) {
            set_err(err, err_size, "out of memory for %zu elements", a.count);
            free(buf);
            return -1;
        }
        decode(buf + off, a.dtype, a.count, a.data);
    }
    free(buf);
    *out = a;
    return 0;
}

void npy_free(npy_array *a)
{
    if (!a)
        return;
    free(a->data);
    a->data = NULL;
    a->count = 0;
}

/* ---- write ------------------------------------------------------------------------------- */

/* The 1.0 preamble and header, padded so that the data starts on a 64-byte boundary. */
static int build_header(npy_dtype dtype, int rank, const int64_t *shape, char *hdr, size_t cap,
                        size_t *hdr_len)
{
    size_t n;
    int r, w;
    w = snprintf(hdr + 10, cap - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                 npy_dtype_descr(dtype));
    n = 10 + (size_t)w;
    for (r = 0; r < rank; r++) {
        w = snprintf(hdr + n, cap - n, "%s%" PRId64, r ? ", " : "", shape[r]);
        n += (size_t)w;
    }
    w = snprintf(hdr + n, cap - n, "%s), }", rank == 1 ? "," : "");
    n += (size_t)w;
    while ((n + 1) % 64 != 0 && n + 1 < cap)
        hdr[n++] = ' ';
    if (n + 1 >= cap || (n + 1) % 64 != 0)
        return -1;
    hdr[n++] = '\n';
    memcpy(hdr, NPY_MAGIC, NPY_MAGIC_LEN);
    hdr[6] = 1;
    hdr[7] = 0;
    hdr[8] = (char)((n - 10) & 0xff);
    hdr[9] = (char)((n - 10) >> 8);
    *hdr_len = n;
    return 0;
}

/* Encodes and writes count values as little-endian elements of dtype. */
static int write_values(FILE *f, npy_dtype dtype, const float *values, size_t count)
{
    unsigned char chunk[NPY_WRITE_CHUNK * 4];
    size_t done = 0, esz = npy_elem_size(dtype);
    while (done < count) {
        size_t i, n = count - done < NPY_WRITE_CHUNK ? count - done : NPY_WRITE_CHUNK;
        for (i = 0; i < n; i++) {
            unsigned char *p = chunk + i * esz;
            if (dtype == NPY_F16) {
                uint16_t h = fa_f32_to_f16(values[done + i]);
                p[0] = (unsigned char)(h & 0xff);
                p[1] = (unsigned char)(h >> 8);
            } else {
                uint32_t u;
                memcpy(&u, &values[done + i], sizeof u);
                p[0] = (unsigned char)(u & 0xff);
                p[1] = (unsigned char)(u >> 8 & 0xff);
                p[2] = (unsigned char)(u >> 16 & 0xff);
                p[3] = (unsigned char)(u >> 24);
            }
        }
        if (fwrite(chunk, esz, n, f) != n)
            return -1;
        done += n;
    }
    return 0;
}

int npy_write(const char *path, npy_dtype dtype, int rank, const int64_t *shape,
              const float *values, char *err, size_t err_size)
{
    char hdr[512];
    size_t hlen, count;
    FILE *f;
    int bad;

    if (rank < 0 || rank > NPY_MAX_RANK) {
        set_err(err, err_size, "cannot write rank %d", rank);
        return -1;
    }
    if (shape_count(rank, shape, &count) != 0) {
        set_err(err, err_size, "cannot write: bad or too large shape");
        return -1;
    }
    if (build_header(dtype, rank, shape, hdr, sizeof hdr, &hlen) != 0) {
        set_err(err, err_size, "cannot write: header too long");
        return -1;
    }
    f = fopen(path, "wb");
    if (!f) {
        set_err(err, err_size, "cannot create: %s", strerror(errno));
        return -1;
    }
    bad = fwrite(hdr, 1, hlen, f) != hlen || write_values(f, dtype, values, count) != 0;
    bad = fclose(f) != 0 || bad;
    if (bad) {
        set_err(err, err_size, "write error: %s", strerror(errno));
        remove(path);
        return -1;
    }
    return 0;
}
