/*
 * files.c - reading a kernel source file for FLASHATTN_KERNEL_DIR: a regular file of bounded
 * size, never a FIFO or device, with the reason for anything else.
 */
#define _POSIX_C_SOURCE 200809L /* open, fstat, read, strerror_r (the XSI one) */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- files -------------------------------------------------------------------------------- */

/* What a path that is not a regular file is, for the message. */
static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "a special file";
}

/* errno as text; strerror_r (the XSI one) because strerror may share one buffer among threads. */
static void errno_text(int err, char *dst, size_t size)
{
    if (strerror_r(err, dst, size) != 0)
        fa__format(dst, size, "errno %d", err);
}

/* Reads exactly n bytes (fewer if the file shrank meanwhile); false on a read error. */
static bool read_all(int fd, char *dst, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = read(fd, dst + *got, n - *got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return true;
}

/* The checks before reading: a regular, non-empty file within the limit. */
static bool check_file(const char *path, const struct stat *st, size_t max_bytes, char *why,
                       size_t why_size)
{
    if (!S_ISREG(st->st_mode))
        fa__format(why, why_size, "\"%s\" is %s, not a regular file", path,
                   file_kind(st->st_mode));
    else if (st->st_size == 0)
        fa__format(why, why_size, "\"%s\" is empty", path);
    else if ((uintmax_t)st->st_size > max_bytes)
        fa__format(why, why_size, "\"%s\" has %jd bytes, more than the %zu allowed", path,
                   (intmax_t)st->st_size, max_bytes);
    else
        return true;
    return false;
}

char *fa__read_file(const char *path, size_t max_bytes, size_t *len, char *why, size_t why_size)
{
    char err[128] = "";
    /* O_NONBLOCK: opening a FIFO to read would otherwise wait for a writer, forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        errno_text(errno, err, sizeof err);
        fa__format(why, why_size, "cannot open \"%s\": %s", path, err);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *text = NULL;
    size_t got = 0;
    if (check_file(path, &st, max_bytes, why, why_size)) {
        text = malloc((size_t)st.st_size + 1);
        if (!text)
            fa__format(why, why_size, "no memory for the %jd bytes of \"%s\"",
                       (intmax_t)st.st_size, path);
        else if (!read_all(fd, text, (size_t)st.st_size, &got)) {
            errno_text(errno, err, sizeof err);
            fa__format(why, why_size, "cannot read \"%s\": %s", path, err);
            free(text);
            text = NULL;
        }
    }
    close(fd);
    if (text) {
        text[got] = '\0';
        *len = got;
    }
    return text;
}
