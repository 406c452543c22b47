/*
 * kernel_build.h - the compile-and-cache layer the OpenCL and CUDA backends share: the kernel
 * source they hand to their compilers (kernel_params.h, a #line, the kernel, embedded or read
 * from FLASHATTN_KERNEL_DIR), a per-context cache of compiled objects keyed by the options
 * string, and the build-log error message. A backend supplies only its compiler calls.
 */
#ifndef FA_KERNEL_BUILD_H
#define FA_KERNEL_BUILD_H

#include "internal.h"

/* ---- the source ---------------------------------------------------------------------------- */

#define FA__KERNEL_FILES_MAX 10

/* A backend's kernel files as it embeds them (cmake/embed.cmake: NUL-terminated text), compiled
 * as one program: every entry point of every op is in it. */
typedef struct fa__kernel_text {
    const char *language; /* "OpenCL", "CUDA": names the kernel in messages */
    const char *params;   /* src/kernel_params.h */
    int n_files;
    const char *files[FA__KERNEL_FILES_MAX];  /* "flash_fwd.cl": names in FLASHATTN_KERNEL_DIR
                                                 and in #line, in compile order */
    const char *bodies[FA__KERNEL_FILES_MAX]; /* the embedded files */
} fa__kernel_text;

/* FLASHATTN_KERNEL_DIR, or NULL when it is unset or empty. */
const char *fa__kernel_dir(void);

/*
 * The source to compile, as a new heap string in *out: kernel_params.h, then for each of the
 * first n_files files (an entry point needs its own file and those it builds on)
 * `#line 1 "file"` (so the compiler's line numbers match the file) and the file: all of them from
 * FLASHATTN_KERNEL_DIR when that is set (each must be there: no mix with the embedded copies),
 * else the embedded copies. Returns OK, KERNEL_BUILD_ERROR ("cannot use the <language> kernel
 * from FLASHATTN_KERNEL_DIR: <reason>") or OUT_OF_MEMORY, the message in why.
 */
fa_status fa__kernel_source(const fa__kernel_text *k, int n_files, char **out, char *why,
                            size_t why_size);

/* ---- the cache ----------------------------------------------------------------------------- */

/* One compiled object (an OpenCL program and kernel, a CUDA module and function) and what it was
 * built for. */
typedef struct fa__kernel_cached {
    struct fa__kernel_cached *next;
    void *object; /* the backend's struct, builder->object_size bytes */
    fa__kernel kernel;
    char options[]; /* the -D options it was built with */
} fa__kernel_cached;

/* A context's compiled objects; all zero is empty. Objects live until fa__kernel_cache_clear. */
typedef struct fa__kernel_cache {
    fa__kernel_cached *head;
} fa__kernel_cache;

/* What a backend compiles; `backend` is its per-context state. */
typedef struct fa__kernel_builder {
    const char *noun;   /* "program", "module": "cannot allocate a <noun> cache entry" */
    size_t object_size; /* the backend's struct, handed to build zeroed */
    /* Compiles the kernel with the options into object; errors go to ctx. A failure may leave
     * object half built. */
    fa_status (*build)(fa_context *ctx, void *backend, fa__kernel kernel, const char *options,
                       void *object);
    /* Releases what build made in object, built fully or half (the cache frees the memory). */
    void (*release)(void *backend, void *object);
} fa__kernel_builder;

/* The object built for (kernel, options): from the cache, or built now and kept. Returns OK,
 * OUT_OF_MEMORY or build's status (a failed build is not kept, so a later call tries again). */
fa_status fa__kernel_cache_get(fa_context *ctx, fa__kernel_cache *cache,
                               const fa__kernel_builder *builder, void *backend,
                               fa__kernel kernel, const char *options, void **out);
/* The object of a cached kernel that was built with these options from the same source as
 * `kernel` (same_source(cached kernel, kernel) is true), so that a build can share its program
 * or module; NULL when there is none. */
void *fa__kernel_cache_sibling(const fa__kernel_cache *cache, fa__kernel kernel,
                               const char *options,
                               bool (*same_source)(fa__kernel a, fa__kernel b));
/* Releases and frees every object; the cache is empty afterwards. */
void fa__kernel_cache_clear(fa__kernel_cache *cache, const fa__kernel_builder *builder,
                            void *backend);

/* ---- build logs ---------------------------------------------------------------------------- */

/* printf into a new heap string; NULL when out of memory. */
char *fa__heap_format(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* A failed build's message as a new heap string: the header (printf) followed by the compiler's
 * log, or by "(no log)" when log is NULL; NULL when out of memory. */
char *fa__build_log_message(const char *log, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Records message (from fa__build_log_message; may be NULL, out of memory) as ctx's error, or
 * `fallback` when it is NULL, so the failure still says what failed. Returns status. */
fa_status fa__error_build_log(fa_context *ctx, fa_status status, const char *message,
                              const char *fallback);

#endif /* FA_KERNEL_BUILD_H */
