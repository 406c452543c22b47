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
 *
 * A file is read header first and then exactly the data its header announces, in chunks, so
 * what a file costs is what its shape says (which the caller can weigh before reading), never
 * what the file holds: a 1 GiB file behind a 4-element header, or /dev/zero, is refused after
 * a few bytes instead of being read into memory.
 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */
#endif

#include "npy.h"

#include "flashattn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(_WIN32)
typedef struct _stat64 npy_stat_t;
#define npy_fstat(f, st) _fstat64(_fileno(f), (st))
#define NPY_IS_REG(m) (((m) & _S_IFMT) == _S_IFREG)
#define NPY_IS_DIR(m) (((m) & _S_IFMT) == _S_IFDIR)
#else
typedef struct stat npy_stat_t;
#define npy_fstat(f, st) fstat(fileno(f), (st))
#define NPY_IS_REG(m) S_ISREG(m)
#define NPY_IS_DIR(m) S_ISDIR(m)
#endif

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
/* Elements decoded per fread, or encoded per fwrite (a 16 KiB buffer on the stack). */
#define NPY_CHUNK 4096

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
    static const char *const descr[] = {"<f4", "<f2", "|u1", "|b1"};
    return dtype >= NPY_F32 && dtype <= NPY_BOOL ? descr[dtype] : "?";
}

static size_t npy_elem_size(npy_dtype dtype)
{
    return dtype == NPY_F16 ? 2 : dtype == NPY_U8 || dtype == NPY_BOOL ? 1 : 4;
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

/* Magic, version and header length: sets *header_start (the preamble's size) and *header_len
 * from the first len bytes of a file (the header itself need not be there yet). */
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

/* The header dict of hlen bytes: dtype, rank, shape and count into *a (data left NULL). */
static int parse_dict(const char *text, size_t hlen, npy_array *a, char *err, size_t err_size)
{
    char descr[NPY_DESCR_CAP] = "";
    int fortran = 0;
    npy_cursor c;
    const char *e;
    memset(a, 0, sizeof *a);
    c.s = text;
    c.n = hlen;
    c.i = 0;
    e = cur_dict(&c, a, descr, &fortran);
    if (e) {
        set_err(err, err_size, "bad header: %s", e);
        return -1;
    }
    if (strcmp(descr, "<f4") == 0) {
        a->dtype = NPY_F32;
    } else if (strcmp(descr, "<f2") == 0) {
        a->dtype = NPY_F16;
    } else if (strcmp(descr, "|u1") == 0 || strcmp(descr, "<u1") == 0) {
        a->dtype = NPY_U8; /* one byte has no byte order: NumPy writes '|' */
    } else if (strcmp(descr, "|b1") == 0) {
        a->dtype = NPY_BOOL;
    } else {
        char shown[4 * NPY_DESCR_CAP];
        escape_text(descr, shown, sizeof shown);
        set_err(err, err_size, "unsupported dtype '%s' (want '<f4', '<f2', '|u1' or '|b1')",
                shown);
        return -1;
    }
    if (fortran) {
        set_err(err, err_size, "fortran_order is True (only C order is supported)");
        return -1;
    }
    if (shape_count(a->rank, a->shape, &a->count) != 0) {
        set_err(err, err_size, "shape is too large (its size overflows)");
        return -1;
    }
    return 0;
}

/* Data bytes the header's shape needs (count is bounded by SIZE_MAX / sizeof(float)). */
static size_t data_bytes(const npy_array *a)
{
    return a->count * npy_elem_size(a->dtype);
}

/* The message of a file whose data is not the size its header says. */
static int size_mismatch(uint64_t need, uint64_t have, char *err, size_t err_size)
{
    set_err(err, err_size,
            "%s: the header's shape needs %" PRIu64 " data bytes, the file has %" PRIu64,
            have < need ? "file is truncated" : "file is longer than its header says", need, have);
    return -1;
}

int npy_parse(const unsigned char *buf, size_t len, npy_array *out, size_t *data_offset, char *err,
              size_t err_size)
{
    size_t hstart, hlen, have;
    npy_array a;
    if (parse_preamble(buf, len, &hstart, &hlen, err, err_size) != 0)
        return -1;
    if (hlen > len - hstart) {
        set_err(err, err_size, "truncated header (says %zu bytes, %zu present)", hlen,
                len - hstart);
        return -1;
    }
    if (parse_dict((const char *)buf + hstart, hlen, &a, err, err_size) != 0)
        return -1;
    have = len - hstart - hlen;
    if (have != data_bytes(&a))
        return size_mismatch(data_bytes(&a), have, err, err_size);
    *out = a;
    *data_offset = hstart + hlen;
    return 0;
}

/* ---- read -------------------------------------------------------------------------------- */

/* Why a read came up short: the stream's error, or the end of the file (`eof_msg`). */
static int short_read(FILE *f, const char *eof_msg, char *err, size_t err_size)
{
    if (ferror(f))
        set_err(err, err_size, "read error: %s", strerror(errno));
    else
        set_err(err, err_size, "%s", eof_msg);
    return -1;
}

/* The file's size when it is a regular file (*regular = 1); a directory is refused. */
static int file_kind(FILE *f, int *regular, uint64_t *size, char *err, size_t err_size)
{
    npy_stat_t st;
    if (npy_fstat(f, &st) != 0) {
        set_err(err, err_size, "cannot stat: %s", strerror(errno));
        return -1;
    }
    if (NPY_IS_DIR(st.st_mode)) {
        set_err(err, err_size, "is a directory, not a .npy file");
        return -1;
    }
    *regular = NPY_IS_REG(st.st_mode) && st.st_size >= 0;
    *size = *regular ? (uint64_t)st.st_size : 0;
    return 0;
}

/* Preamble and header dict from the stream; *end is where the data starts. */
static int read_header(npy_reader *r, uint64_t *end, char *err, size_t err_size)
{
    unsigned char pre[12];
    char *text, msg[96];
    size_t got = fread(pre, 1, 8, r->f), hstart, hlen;
    int rc;
    if (got == 8) /* the length field: 2 bytes in version 1.0, 4 after */
        got += fread(pre + 8, 1, pre[6] == 1 ? 2 : 4, r->f);
    if (ferror(r->f))
        return short_read(r->f, "", err, err_size);
    if (parse_preamble(pre, got, &hstart, &hlen, err, err_size) != 0)
        return -1;
    text = malloc(hlen ? hlen : 1);
    if (!text) {
        set_err(err, err_size, "out of memory for a %zu-byte header", hlen);
        return -1;
    }
    got = fread(text, 1, hlen, r->f);
    snprintf(msg, sizeof msg, "truncated header (says %zu bytes, %zu present)", hlen, got);
    rc = got < hlen ? short_read(r->f, msg, err, err_size)
                    : parse_dict(text, hlen, &r->a, err, err_size);
    free(text);
    *end = hstart + hlen;
    return rc;
}

int npy_open(const char *path, npy_reader *r, char *err, size_t err_size)
{
    uint64_t size = 0, end = 0;
    memset(r, 0, sizeof *r);
    r->f = fopen(path, "rb");
    if (!r->f) {
        set_err(err, err_size, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (file_kind(r->f, &r->regular, &size, err, err_size) != 0 ||
        read_header(r, &end, err, err_size) != 0) {
        npy_close(r);
        return -1;
    }
    /* A regular file's size settles it before any data is read (end <= size: it was read). */
    if (r->regular && size - end != data_bytes(&r->a)) {
        size_mismatch(data_bytes(&r->a), size > end ? size - end : 0, err, err_size);
        npy_close(r);
        return -1;
    }
    r->left = r->a.count;
    return 0;
}

static void decode(const unsigned char *src, npy_dtype dtype, size_t count, float *dst)
{
    size_t i;
    for (i = 0; i < count; i++) {
        if (dtype == NPY_F16) {
            const unsigned char *p = src + 2 * i;
            dst[i] = fa_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
        } else if (dtype == NPY_U8 || dtype == NPY_BOOL) {
            dst[i] = (float)src[i]; /* exact: 0..255 */
        } else {
            const unsigned char *p = src + 4 * i;
            uint32_t u =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&dst[i], &u, sizeof u);
        }
    }
}

int npy_read_values(npy_reader *r, float *dst, size_t n, char *err, size_t err_size)
{
    unsigned char chunk[NPY_CHUNK * 4];
    size_t esz = npy_elem_size(r->a.dtype);
    if (n > r->left) {
        set_err(err, err_size, "asked for %zu elements, %zu are left", n, r->left);
        return -1;
    }
    while (n > 0) {
        size_t want = n < NPY_CHUNK ? n : NPY_CHUNK, got = fread(chunk, esz, want, r->f);
        if (got < want) {
            char msg[128];
            uint64_t have = (uint64_t)(r->a.count - r->left + got) * esz;
            size_mismatch(data_bytes(&r->a), have, msg, sizeof msg);
            return short_read(r->f, msg, err, err_size);
        }
        decode(chunk, r->a.dtype, got, dst);
        dst += got;
        n -= got;
        r->left -= got;
    }
    return 0;
}

int npy_finish(npy_reader *r, char *err, size_t err_size)
{
    int more = r->left == 0 && !r->regular && fgetc(r->f) != EOF;
    int rc = 0;
    if (r->left != 0) {
        set_err(err, err_size, "%zu elements were not read", r->left);
        rc = -1;
    } else if (more) {
        set_err(err, err_size, "file is longer than its header says: more than the %zu data "
                "bytes its shape needs", data_bytes(&r->a));
        rc = -1;
    }
    npy_close(r);
    return rc;
}

void npy_close(npy_reader *r)
{
    if (r && r->f)
        fclose(r->f);
    if (r)
        r->f = NULL;
}

int npy_read(const char *path, npy_array *out, char *err, size_t err_size)
{
    npy_reader r;
    npy_array a;
    memset(out, 0, sizeof *out);
    if (npy_open(path, &r, err, err_size) != 0)
        return -1;
    a = r.a;
    if (a.count > 0) {
        a.data = malloc(a.count * sizeof(float)); /* bounded by shape_count */
        if (!a.data) {
            set_err(err, err_size, "out of memory for %zu elements", a.count);
            npy_close(&r);
            return -1;
        }
    }
    if (npy_read_values(&r, a.data, a.count, err, err_size) != 0 ||
        npy_finish(&r, err, err_size) != 0) {
        npy_close(&r);
        free(a.data);
        return -1;
    }
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
    unsigned char chunk[NPY_CHUNK * 4];
    size_t done = 0, esz = npy_elem_size(dtype);
    while (done < count) {
        size_t i, n = count - done < NPY_CHUNK ? count - done : NPY_CHUNK;
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

/* "write error: reason" and the partial file removed. */
static int write_failed(npy_writer *w, char *err, size_t err_size)
{
    set_err(err, err_size, "write error: %s", strerror(errno));
    npy_abort(w);
    return -1;
}

int npy_create(const char *path, npy_dtype dtype, int rank, const int64_t *shape, npy_writer *w,
               char *err, size_t err_size)
{
    char hdr[512];
    size_t hlen, count;
    memset(w, 0, sizeof *w);
    if (dtype != NPY_F32 && dtype != NPY_F16) {
        set_err(err, err_size, "cannot write dtype '%s'", npy_dtype_descr(dtype));
        return -1;
    }
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
    w->f = fopen(path, "wb");
    if (!w->f) {
        set_err(err, err_size, "cannot create: %s", strerror(errno));
        return -1;
    }
    w->path = path;
    w->dtype = dtype;
    w->left = count;
    return fwrite(hdr, 1, hlen, w->f) == hlen ? 0 : write_failed(w, err, err_size);
}

int npy_write_values(npy_writer *w, const float *values, size_t n, char *err, size_t err_size)
{
    if (n > w->left) {
        set_err(err, err_size, "%zu values given, the shape has room for %zu more", n, w->left);
        npy_abort(w);
        return -1;
    }
    if (write_values(w->f, w->dtype, values, n) != 0)
        return write_failed(w, err, err_size);
    w->left -= n;
    return 0;
}

int npy_commit(npy_writer *w, char *err, size_t err_size)
{
    FILE *f = w->f;
    if (w->left != 0) {
        set_err(err, err_size, "%zu values were not written", w->left);
        npy_abort(w);
        return -1;
    }
    w->f = NULL;
    if (fclose(f) != 0) {
        set_err(err, err_size, "write error: %s", strerror(errno));
        remove(w->path);
        return -1;
    }
    return 0;
}

void npy_abort(npy_writer *w)
{
    if (!w || !w->f)
        return;
    fclose(w->f);
    w->f = NULL;
    remove(w->path);
}

int npy_write(const char *path, npy_dtype dtype, int rank, const int64_t *shape,
              const float *values, char *err, size_t err_size)
{
    npy_writer w;
    if (npy_create(path, dtype, rank, shape, &w, err, err_size) != 0 ||
        npy_write_values(&w, values, w.left, err, err_size) != 0)
        return -1;
    return npy_commit(&w, err, err_size);
}
