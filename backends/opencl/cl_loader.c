/*
 * cl_loader.c - loads the OpenCL ICD loader (libOpenCL.so.1) with dlopen/dlsym at run time and
 * fills the backend's table of entry points (fa__cl), so the library links no OpenCL: a machine
 * without a loader runs the other backends, and the OpenCL backend reports itself unavailable
 * with the reason. Only the headers are needed at build time.
 *
 * Where the entry points come from, in order:
 *  1. FLASHATTN_OPENCL_LIBRARY, when set: that file or name alone, no fallback (a path the
 *     user named is the one they want; /nonexistent makes the backend unavailable, for tests).
 *  2. The process's own global symbols, when they hold every entry point: an application that
 *     links OpenCL (the interop's callers) or preloads an OpenCL runtime (Oclgrind's
 *     LD_PRELOAD) gets the one it already uses, as a library linked against OpenCL did.
 *  3. libOpenCL.so.1, then libOpenCL.so (a development install without the versioned name).
 *
 * The load runs once per process (pthread_once) and its result, good or bad, is kept. Handles
 * are never closed: the loader and its drivers stay resident while any cl_* object lives.
 */
#define _POSIX_C_SOURCE 200809L

#include "opencl_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

fa__cl_api fa__cl;

/* One entry point: its exported name and its slot in the table. */
typedef struct fa__cl_symbol {
    const char *name;
    size_t offset;
} fa__cl_symbol;

#define FA_CL_SYMBOL(field) {"cl" #field, offsetof(fa__cl_api, field)},
static const fa__cl_symbol symbols[] = {FA_CL_ENTRY_POINTS(FA_CL_SYMBOL)};
#undef FA_CL_SYMBOL

/* Every field's type is cl.h's prototype: an unevaluated assignment from the declared function
 * fails to compile on any mismatch, and references no symbol, so nothing is linked. */
#define FA_CL_PROTOTYPE_CHECK(field) (void)sizeof(fa__cl.field = cl##field);
static void prototypes_match(void)
{
    FA_CL_ENTRY_POINTS(FA_CL_PROTOTYPE_CHECK)
}
#undef FA_CL_PROTOTYPE_CHECK

/* What the one load found, returned to every caller. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static fa_status load_status = FA_STATUS_BACKEND_UNAVAILABLE;
static char load_why[1024];

/* Resolves every entry point from lib into table; on a missing one names it in why and returns
 * false. A function pointer is stored through memcpy: ISO C has no object-to-function
 * conversion, and POSIX guarantees the representations agree. */
static bool resolve(void *lib, const char *lib_name, fa__cl_api *table, char *why,
                    size_t why_size)
{
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *fn = dlsym(lib, symbols[i].name);
        if (!fn) {
            const char *e = dlerror();
            fa__format(why, why_size, "%s is not an OpenCL 1.2 ICD loader: no %s (%s)",
                       lib_name, symbols[i].name, e ? e : "dlsym returned NULL");
            return false;
        }
        memcpy((char *)table + symbols[i].offset, &fn, sizeof fn);
    }
    return true;
}

/* Opens one name or path; appends dlopen's message to tried when it fails. */
static void *try_open(const char *name, char *tried, size_t tried_size)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        fa__append(tried, tried_size, "%s%s", *tried ? "; " : "", e ? e : name);
    }
    return lib;
}

/* The process's global symbols, when they hold every entry point (see the banner, 2). */
static bool resolve_global(fa__cl_api *table)
{
    void *self = dlopen(NULL, RTLD_NOW | RTLD_LOCAL);
    char ignored[256];
    return self && resolve(self, "(the process's own symbols)", table, ignored, sizeof ignored);
}

static void load(void)
{
    prototypes_match(); /* compiles to nothing */
    fa__cl_api table;
    memset(&table, 0, sizeof table);
    char tried[768] = "";
    const char *named = getenv("FLASHATTN_OPENCL_LIBRARY");
    void *lib = NULL;
    bool ok = false;
    if (named && *named) {
        lib = try_open(named, tried, sizeof tried);
        if (!lib)
            fa__format(load_why, sizeof load_why,
                       "no OpenCL ICD loader (FLASHATTN_OPENCL_LIBRARY=%s): %s", named, tried);
        else
            ok = resolve(lib, named, &table, load_why, sizeof load_why);
    } else if (resolve_global(&table)) {
        ok = true;
    } else {
        static const char *const names[] = {"libOpenCL.so.1", "libOpenCL.so"};
        const char *name = names[0];
        for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++)
            lib = try_open(name = names[i], tried, sizeof tried);
        if (!lib)
            fa__format(load_why, sizeof load_why, "no OpenCL ICD loader (libOpenCL.so.1): %s",
                       tried);
        else
            ok = resolve(lib, name, &table, load_why, sizeof load_why);
    }
    if (ok) {
        fa__cl = table;
        load_status = FA_STATUS_OK;
    }
}

fa_status fa__cl_load(char *why, size_t why_size)
{
    int err = pthread_once(&load_once, load);
    if (err != 0) {
        fa__format(why, why_size, "OpenCL: loading the ICD loader failed (pthread_once: %s)",
                   strerror(err));
        return FA_STATUS_BACKEND_UNAVAILABLE;
    }
    if (load_status != FA_STATUS_OK)
        fa__format(why, why_size, "%s", load_why);
    return load_status;
}
