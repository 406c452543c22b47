/*
 * npy.h - reading and writing NumPy .npy files for the flashattn command-line program.
 *
 * Only what the CLI needs: little-endian float32 ('<f4') and float16 ('<f2') arrays in C order,
 * format versions 1.0, 2.0 and 3.0 on read, 1.0 on write. Values are handed over widened to
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

/* The most dimensions accepted on read (NumPy allows 64; the CLI needs at most 4). */
#define NPY_MAX_RANK 8

/* Element types of the files the CLI reads and writes. */
typedef enum npy_dtype {
    NPY_F32 = 0, /* '<f4' */
    NPY_F16 = 1  /* '<f2' */
} npy_dtype;

typedef struct npy_array {
    npy_dtype dtype;             /* element type in the file */
    int rank;                    /* number of dimensions, 0..NPY_MAX_RANK */
    int64_t shape[NPY_MAX_RANK]; /* sizes, outermost first (C order) */
    size_t count;                /* number of elements: the product of shape */
    float *data;                 /* count values widened to float; NULL when count == 0 */
} npy_array;

/* The descr string of a dtype: "<f4" or "<f2". */
const char *npy_dtype_descr(npy_dtype dtype);

/*
 * Parses the preamble and header of an in-memory .npy file of `len` bytes and checks that the
 * data that follows has exactly the size the header says. Fills everything in *out except data
 * (left NULL) and sets *data_offset to where the elements start. Returns 0, or -1 with a
 * one-line reason in err (always NUL-terminated when err_size > 0).
 */
int npy_parse(const unsigned char *buf, size_t len, npy_array *out, size_t *data_offset, char *err,
              size_t err_size);

/* Reads a whole .npy file. Returns 0, or -1 with a one-line reason in err. Free with npy_free. */
int npy_read(const char *path, npy_array *out, char *err, size_t err_size);

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
