/*
 * kernel_build.c - the compile-and-cache layer of the OpenCL and CUDA backends (kernel_build.h):
 * what is the same whichever compiler runs. Assembling the source, keeping one compiled object
 * per options string and turning a build log into the context's error were written twice, once
 * per backend; here they are written once, and a backend keeps only its compiler's calls.
 */
#include "kernel_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the source ---------------------------------------------------------------------------- */

const char *fa__kernel_dir(void)
{
    const char *dir = getenv("FLASHATTN_KERNEL_DIR");
    return dir && *dir ? dir : NULL;
}

/* Reads dir/file into a heap string; NULL with the status and the reason in why. */
static char *read_kernel_file(const fa__kernel_text *k, const char *file, const char *dir,
                              fa_status *st, char *why, size_t why_size)
{
    char *path = fa__heap_format("%s/%s", dir, file);
    if (!path) {
        fa__format(why, why_size, "cannot allocate a kernel path");
        *st = FA_STATUS_OUT_OF_MEMORY;
        return NULL;
    }
    char reason[1024];
    size_t len = 0;
    char *text = fa__read_file(path, FA__KERNEL_FILE_MAX, &len, reason, sizeof reason);
    free(path);
    if (!text) {
        fa__format(why, why_size, "cannot use the %s kernel from FLASHATTN_KERNEL_DIR: %s",
                   k->language, reason);
        *st = FA_STATUS_KERNEL_BUILD_ERROR;
    }
    return text;
}

/* Appends `#line 1 "file"` and text to the heap string *src (freed on failure); false when out
 * of memory. */
static bool append_file(char **src, const char *file, const char *text)
{
    char *joined = fa__heap_format("%s\n#line 1 \"%s\"\n%s", *src, file, text);
    free(*src);
    *src = joined;
    return joined != NULL;
}

fa_status fa__kernel_source(const fa__kernel_text *k, int n_files, char **out, char *why,
                            size_t why_size)
{
    const char *dir = fa__kernel_dir();
    fa_status st = FA_STATUS_OK;
    char *src = fa__heap_format("%s", k->params);
    bool ok = src != NULL;
    for (int i = 0; i < n_files && i < k->n_files && ok; i++) {
        char *file = NULL;
        if (dir && !(file = read_kernel_file(k, k->files[i], dir, &st, why, why_size))) {
            free(src);
            return st;
        }
        ok = append_file(&src, k->files[i], file ? file : k->bodies[i]);
        free(file);
    }
    *out = ok ? src : NULL;
    if (!ok) {
        fa__format(why, why_size, "cannot allocate the kernel source");
        return FA_STATUS_OUT_OF_MEMORY;
    }
    return FA_STATUS_OK;
}

/* ---- the cache ----------------------------------------------------------------------------- */

static void entry_free(fa__kernel_cached *e, const fa__kernel_builder *builder, void *backend)
{
    if (e->object) {
        builder->release(backend, e->object);
        free(e->object);
    }
    free(e);
}

/* An entry for (kernel, options) with a zeroed object; NULL when out of memory. */
static fa__kernel_cached *entry_new(fa__kernel kernel, const char *options, size_t object_size)
{
    size_t n = strlen(options) + 1;
    fa__kernel_cached *e = malloc(sizeof *e + n);
    if (!e)
        return NULL;
    e->next = NULL;
    e->kernel = kernel;
    memcpy(e->options, options, n);
    e->object = calloc(1, object_size);
    if (!e->object) {
        free(e);
        return NULL;
    }
    return e;
}

fa_status fa__kernel_cache_get(fa_context *ctx, fa__kernel_cache *cache,
                               const fa__kernel_builder *builder, void *backend,
                               fa__kernel kernel, const char *options, void **out)
{
    for (fa__kernel_cached *e = cache->head; e; e = e->next) {
        if (e->kernel == kernel && strcmp(e->options, options) == 0) {
            *out = e->object;
            return FA_STATUS_OK;
        }
    }
    fa__kernel_cached *e = entry_new(kernel, options, builder->object_size);
    if (!e)
        return fa__error(ctx, FA_STATUS_OUT_OF_MEMORY, "cannot allocate a %s cache entry",
                         builder->noun);
    fa_status st = builder->build(ctx, backend, kernel, options, e->object);
    if (st != FA_STATUS_OK) {
        entry_free(e, builder, backend);
        return st;
    }
    e->next = cache->head;
    cache->head = e;
    *out = e->object;
    return FA_STATUS_OK;
}

void *fa__kernel_cache_sibling(const fa__kernel_cache *cache, fa__kernel kernel,
                               const char *options,
                               bool (*same_source)(fa__kernel a, fa__kernel b))
{
    for (const fa__kernel_cached *e = cache->head; e; e = e->next) {
        if (strcmp(e->options, options) == 0 && same_source(e->kernel, kernel))
            return e->object;
    }
    return NULL;
}

void fa__kernel_cache_clear(fa__kernel_cache *cache, const fa__kernel_builder *builder,
                            void *backend)
{
    while (cache->head) {
        fa__kernel_cached *e = cache->head;
        cache->head = e->next;
        entry_free(e, builder, backend);
    }
}

/* ---- build logs ---------------------------------------------------------------------------- */

static char *heap_vformat(const char *fmt, va_list ap)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 0)))
#endif
    ;

static char *heap_vformat(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s)
        vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    return s;
}

char *fa__heap_format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = heap_vformat(fmt, ap);
    va_end(ap);
    return s;
}

char *fa__build_log_message(const char *log, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *header = heap_vformat(fmt, ap);
    va_end(ap);
    char *msg = header ? fa__heap_format("%s%s", header, log ? log : "(no log)") : NULL;
    free(header);
    return msg;
}

fa_status fa__error_build_log(fa_context *ctx, fa_status status, const char *message,
                              const char *fallback)
{
    return message ? fa__error_text(ctx, status, message)
                   : fa__error(ctx, status, "%s", fallback);
}
