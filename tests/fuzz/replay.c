/*
 * replay.c - main() for a fuzz harness built without libFuzzer: runs every input file named on
 * the command line, or found in a directory named there, through LLVMFuzzerTestOneInput once.
 * This is how the seed corpus and saved crash inputs (tests/fuzz/corpus/<name>/) run as ctest
 * cases with the normal compiler, in the plain and the sanitizer trees alike.
 *
 * A violated property aborts inside the harness, so the case fails with the input's name as the
 * last line printed before it. Directories are read in sorted order so that runs are repeatable.
 */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* scandir, alphasort */
#endif

#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Inputs larger than this are not fuzz inputs; refusing them keeps a stray file from hanging. */
#define REPLAY_MAX_BYTES (1u << 20)

/* Reads a whole file into an exactly sized buffer (so ASan sees reads past its end). */
static int read_file(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0 || st.st_size < 0 || st.st_size > REPLAY_MAX_BYTES) {
        if (f)
            fclose(f);
        return -1;
    }
    *len = (size_t)st.st_size;
    *out = malloc(*len ? *len : 1);
    if (!*out || fread(*out, 1, *len, f) != *len) {
        free(*out);
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

static int replay_file(const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    if (read_file(path, &data, &len) != 0) {
        fprintf(stderr, "replay: cannot read %s (or it is over %u bytes)\n", path,
                REPLAY_MAX_BYTES);
        return -1;
    }
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 0;
}

/* Every regular, non-hidden file of a directory; returns how many ran, or -1. */
static int replay_dir(const char *dir)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort), ran = 0;
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s\n", dir);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        int skip = names[i]->d_name[0] == '.';
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (!skip && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(path) != 0)
                ran = -1;
            else if (ran >= 0)
                ran++;
        }
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int ran;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
            ran = replay_dir(argv[i]);
        else
            ran = replay_file(argv[i]) == 0 ? 1 : -1;
        if (ran < 0)
            return 1;
        total += ran;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no inputs (usage: %s FILE_OR_DIR...)\n", argv[0]);
        return 1;
    }
    fprintf(stderr, "replay: %d inputs, every property held\n", total);
    return 0;
}
