/*
 * npy.h - reading and writing NumPy .npy files for the flashattn command-line program.
 *
 * Only what the CLI needs: little-endian float32 ('<f4') and float16 ('<f2') arrays in C order,
 * and on read uint8 ('|u1') and bool ('|b1') ones (block masks), format versions 1.0, 2.0 and
 * 3.0 on read, 1.0 on write. Values are handed over widened to
 * float, so every caller works with one element type whatever the file holds (f16 -> f32 is
 * exact, and writing those floats back as f16 is exact too).
 *
 * The reader treats a file as untrusted input: every length and shape is bounds- and
 * overflow-checked, and every failure is a one-line message, never a crash.
 */
#ifndef FLASHATTN_TOOLS_NPY_H
#define FLASHATTN_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The most dimensions accepted on read (NumPy allows 64; the CLI needs at most 4). */
#define NPY_MAX_RANK 8

/* Element types of the files the CLI reads and writes. */
typedef enum npy_dtype {
    NPY_F32 = 0, /* '<f4' */
    NPY_F16 = 1, /* '<f2' */
    NPY_U8 = 2,  /* '|u1', read only */
    NPY_BOOL = 3 /* '|b1', read only */
} npy_dtype;

typedef struct npy_array {
    npy_dtype dtype;             /* element type in the file */
    int rank;                    /* number of dimensions, 0..NPY_MAX_RANK */
    int64_t shape[NPY_MAX_RANK]; /* sizes, outermost first (C order) */
    size_t count;                /* number of elements: the product of shape */
    float *data;                 /* count values widened to float; NULL when count == 0 */
} npy_array;

/* The descr string of a dtype: "<f4", "<f2", "|u1" or "|b1". */
const char *npy_dtype_descr(npy_dtype dtype);

/*
 * Parses the preamble and header of an in-memory .npy file of `len` bytes and checks that the
 * data that follows has exactly the size the header says. Fills everything in *out except data
 * (left NULL) and sets *data_offset to where the elements start. Returns 0, or -1 with a
 * one-line reason in err (always NUL-terminated when err_size > 0).
 */
int npy_parse(const unsigned char *buf, size_t len, npy_array *out, size_t *data_offset, char *err,
              size_t err_size);

/*
 * A .npy file open for reading, header first: npy_open reads and checks the header (at most
 * 1 MiB) and, for a regular file, the file's size against the shape, before a byte of data is
 * read, so a caller can weigh a.count against its memory before it allocates anything. A file
 * that is not regular (a pipe, a device) is read exactly as far as its header says, and
 * npy_finish then refuses it if more follows; a directory is refused at once.
 */
typedef struct npy_reader {
    FILE *f;
    npy_array a; /* the header's description; data stays NULL */
    size_t left; /* elements not yet read */
    int regular; /* the file's size was checked against the header */
} npy_reader;

/* Opens path and reads its header. Returns 0, or -1 with a one-line reason in err (closed). */
int npy_open(const char *path, npy_reader *r, char *err, size_t err_size);
/* Reads the next n elements (n <= r->left) widened to float into dst. 0, or -1 with a reason. */
int npy_read_values(npy_reader *r, float *dst, size_t n, char *err, size_t err_size);
/* After every element was read: checks that nothing follows them, and closes. 0 or -1. */
int npy_finish(npy_reader *r, char *err, size_t err_size);
/* Closes without checking; safe on a closed or zeroed reader. */
void npy_close(npy_reader *r);

/* Reads a whole .npy file. Returns 0, or -1 with a one-line reason in err. Free with npy_free. */
int npy_read(const char *path, npy_array *out, char *err, size_t err_size);

/*
 * A .npy file being written, values in C order in as many calls as the caller likes (so that a
 * transposed tensor needs no second copy). npy_commit after the last value; a failed write or
 * npy_abort removes the partial file. path must outlive the writer.
 */
typedef struct npy_writer {
    FILE *f;
    const char *path;
    npy_dtype dtype;
    size_t left; /* elements still to write */
} npy_writer;

/* Creates path and writes the version 1.0 header. 0, or -1 with a one-line reason in err. */
int npy_create(const char *path, npy_dtype dtype, int rank, const int64_t *shape, npy_writer *w,
               char *err, size_t err_size);
/* Writes the next n values (n <= w->left; f16 rounded to nearest even). 0, or -1 (removed). */
int npy_write_values(npy_writer *w, const float *values, size_t n, char *err, size_t err_size);
/* Closes a file whose every value was written. 0, or -1 with a reason (the file removed). */
int npy_commit(npy_writer *w, char *err, size_t err_size);
/* Closes and removes the file; safe on a closed or zeroed writer. */
void npy_abort(npy_writer *w);

/*
 * Writes `values` (the product of shape of them, in C order) as a version 1.0 .npy file of the
 * given dtype (f16 values are rounded to nearest even). A failed write removes the partial file.
 * Returns 0, or -1 with a one-line reason in err.
 */
int npy_write(const char *path, npy_dtype dtype, int rank, const int64_t *shape,
              const float *values, char *err, size_t err_size);

/* Releases the data of an array read by npy_read; safe on a zeroed or already freed array. */
void npy_free(npy_array *a);

#endif /* FLASHATTN_TOOLS_NPY_H */
