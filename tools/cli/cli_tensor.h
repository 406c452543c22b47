/*
 * cli_tensor.h - host tensors of the `flashattn` program: logical [batch, heads, seq, head_dim]
 * arrays of float, filled at random or from .npy files, saved to .npy, and packed into (or
 * unpacked from) the byte image a device buffer holds for a given layout and dtype.
 *
 * Keeping every host tensor as float in BHSD order, already rounded to the run's dtype, means
 * the same seed gives the same logical inputs whatever the layout, and a tensor saved and
 * loaded again gives bit-identical device bytes.
 */
#ifndef FLASHATTN_TOOLS_CLI_TENSOR_H
#define FLASHATTN_TOOLS_CLI_TENSOR_H

#include "flashattn.h"
#include "npy.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cli_tensor {
    int64_t shape[4]; /* batch, heads, seq, head_dim */
    size_t count;     /* product of shape */
    float *data;      /* count values in C order; NULL when count == 0 */
} cli_tensor;

/*
 * Allocates a zeroed tensor named `what` (for messages). Checks that the element count and
 * its byte size do not overflow; prints and returns CLI_EXIT_FAIL on failure, 0 on success.
 */
int cli_tensor_alloc(cli_tensor *t, const char *what, int64_t batch, int64_t heads, int64_t seq,
                     int64_t dim);
/* Frees the data; safe on a zeroed or freed tensor. */
void cli_tensor_free(cli_tensor *t);
/* Fills with uniform [-1, 1) values from the generator. */
void cli_tensor_fill_random(cli_tensor *t, uint64_t *state);
/* Rounds every value to the nearest value of dtype (a no-op for f32). */
void cli_tensor_round(cli_tensor *t, fa_dtype dtype);

/*
 * Comparing an output with a reference (`run --check`, bench's err columns). Two non-finite
 * values agree when they are the same: NaN and NaN (the library gives NaN in a row whose scores
 * hold NaN or +inf, on every backend), +inf and +inf, -inf and -inf. Any other pair with a
 * non-finite value is a mismatch, whatever the tolerance.
 */
typedef struct cli_compare {
    double max_err;    /* max |x - ref| where both are finite */
    double max_ref;    /* max |ref| where it is finite */
    double nmse;       /* sum (x - ref)^2 / sum ref^2 where both are finite */
    size_t mismatches; /* elements that disagree on NaN or infinity */
    size_t first;      /* the first of them (when mismatches > 0) */
    float first_x, first_ref;
} cli_compare;

/* Compares o with ref (the same shape). */
void cli_tensor_compare(const cli_tensor *o, const cli_tensor *ref, cli_compare *out);
/*
 * "3 outputs disagree with the reference on NaN or infinity; the first, O[0, 1, 5, 2], is nan
 * where the reference is 0.25" into buf (shape from ref; `name` is the tensor's: "O", "dQ").
 */
void cli_describe_mismatch(const cli_compare *c, const cli_tensor *ref, const char *name,
                           char *buf, size_t size);
/*
 * The check's tolerance: max |O - ref| <= atol + rtol * max |ref|. f32 matches the tests' rule;
 * f16 and bf16 allow for the rounding of O itself to the storage type (2^-11 and 2^-8 relative,
 * with headroom for the different accumulation order of a tiled kernel).
 */
void cli_check_tolerance(fa_dtype dtype, double *atol, double *rtol);

/* The file element type used to store values of dtype: '<f2' for f16, '<f4' otherwise. */
npy_dtype cli_npy_dtype(fa_dtype dtype);
/*
 * A tensor's files are in the layout of the run (--layout): [batch, heads, seq, head_dim] for
 * bhsd, [batch, seq, heads, head_dim] for bshd (PyTorch's and flash-attn's order). These give
 * the file's shape of a logical BHSD shape (the swap is its own inverse, so they also turn a
 * file's shape into the logical one) and the layout's dimension names for messages.
 */
void cli_layout_file_shape(fa_layout layout, const int64_t in[4], int64_t out[4]);
const char *cli_layout_dims(fa_layout layout);
/*
 * npy_read of a float file ('<f4' or '<f2') with the host-memory check between the header and
 * the data: a file costs what its shape says, checked against the memory available before any
 * is allocated. Prints
 * "flashattn: PATH: reason" and returns CLI_EXIT_FAIL on any problem.
 */
int cli_npy_read(const char *path, npy_array *out);
/* The same for a file of bytes ('|u1' or '|b1': a block mask), values widened to float. */
int cli_npy_read_bytes(const char *path, npy_array *out);
/*
 * Loads a rank-4 .npy file holding a tensor in `layout` into the logical BHSD tensor t, the
 * same way (header and memory first, then only the data the header announces). Any problem
 * prints "flashattn: PATH: reason" and returns CLI_EXIT_FAIL. *file_dtype receives the file's
 * element type.
 */
int cli_tensor_load(const char *path, fa_layout layout, cli_tensor *t, npy_dtype *file_dtype);
/* Saves as .npy in `layout` and cli_npy_dtype(dtype); prints and returns CLI_EXIT_FAIL on
 * failure. */
int cli_tensor_save(const char *path, fa_layout layout, const cli_tensor *t, fa_dtype dtype);

/* Writes the tensor's values into a device image of layout l and dtype. */
void cli_pack(const cli_tensor *t, const fa_tensor_layout *l, fa_dtype dtype, void *image);
/* Reads the tensor's values back from a device image of layout l and dtype. */
void cli_unpack(const void *image, const fa_tensor_layout *l, fa_dtype dtype, cli_tensor *t);

#endif /* FLASHATTN_TOOLS_CLI_TENSOR_H */
