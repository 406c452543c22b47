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

/* One kernel as a backend embeds it (cmake/embed.cmake: NUL-terminated text). */
typedef struct fa__kernel_text {
    const char *language; /* "OpenCL", "CUDA": names the kernel in messages */
    const char *file;     /* "flash_fwd.cl": the name in FLASHATTN_KERNEL_DIR and in #line */
    const char *params;   /* src/kernel_params.h */
    const char *body;     /* the kernel file */
} fa__kernel_text;

/* FLASHATTN_KERNEL_DIR, or NULL when it is unset or empty. */
const char *fa__kernel_dir(void);

/*
 * The source to compile, as a new heap string in *out: kernel_params.h, then `#line 1 "file"` so
 * the compiler's line numbers match the kernel file, then the kernel (FLASHATTN_KERNEL_DIR/file
 * when that is set, else the embedded copy). Returns OK, KERNEL_BUILD_ERROR ("cannot use the
 * <language> kernel from FLASHATTN_KERNEL_DIR: <reason>") or OUT_OF_MEMORY, the message in why.
 */
fa_status fa__kernel_source(const fa__kernel_text *k, char **out, char *why, size_t why_size);

/* ---- the cache ----------------------------------------------------------------------------- */

/* One compiled object (an OpenCL program, a CUDA module) and the options it was built with. */
typedef struct fa__kernel_entry {
    struct fa__kernel_entry *next;
    void *object; /* the backend's struct, builder->object_size bytes */
    char key[];   /* the options string */
} fa__kernel_entry;

/* A context's compiled objects; all zero is empty. Objects live until fa__kernel_cache_clear. */
typedef struct fa__kernel_cache {
    fa__kernel_entry *head;
} fa__kernel_cache;

/* What a backend compiles; `backend` is its per-context state. */
typedef struct fa__kernel_builder {
    const char *noun;   /* "program", "module": "cannot allocate a <noun> cache entry" */
    size_t object_size; /* the backend's struct, handed to build zeroed */
    /* Compiles `key` into object; errors go to ctx. A failure may leave object half built. */
    fa_status (*build)(fa_context *ctx, void *backend, const char *key, void *object);
    /* Releases what build made in object, built fully or half (the cache frees the memory). */
    void (*release)(void *backend, void *object);
} fa__kernel_builder;

/* The object built for `key`: from the cache, or built now and kept. Returns OK, OUT_OF_MEMORY
 * or build's status (a failed build is not kept, so a later call tries again). */
fa_status fa__kernel_cache_get(fa_context *ctx, fa__kernel_cache *cache,
                               const fa__kernel_builder *builder, void *backend,
                               const char *key, void **out);
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
