/* atomic_file.c — the atomic writer (util/atomic_file.h). */
#include "util/atomic_file.h"
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/xalloc.h"

/* The file a write to path lands in, as open(path, "w") would reach it: a
 * symlink (a chain of them, dangling too) is followed to its target, so the
 * rename replaces the target and the link stays a link. A relative target is
 * taken from the link's folder. Malloc'd; NULL for a loop of links. */
static char *resolve_write_target(const char *path)
{
    char *p = xstrdup(path);
    for (int hops = 0; hops < 40; hops++) { /* Linux's MAXSYMLINKS */
        struct stat st;
        if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode)) return p;
        char *to = NULL;
        size_t cap = 256;
        ssize_t n;
        for (;;) { /* a link's target can be longer than any guess */
            to = xrealloc(to, cap);
            n = readlink(p, to, cap);
            if (n < 0 || (size_t)n < cap) break;
            cap *= 2;
        }
        if (n < 0) { free(to); return p; } /* let open() say what is wrong */
        to[n] = 0;
        const char *slash = strrchr(p, '/');
        if (to[0] != '/' && slash) {
            char *joined;
            if (asprintf(&joined, "%.*s%s", (int)(slash - p + 1), p, to) < 0) abort();
            free(to);
            to = joined;
        }
        free(p);
        p = to;
    }
    free(p);
    errno = ELOOP;
    return NULL;
}

/* Write all of buf to path atomically: a crash leaves the old file intact.
 * The temp file goes beside the file written (a symlink's target: see
 * resolve_write_target) and takes the mode of the file it replaces, so a
 * 0600 file stays private; a new file gets open()'s 0666 less the umask. */
int write_file_atomic(const char *path, const void *const *parts, const size_t *sizes, int nparts, char *err, size_t errcap)
{
    char *target = resolve_write_target(path);
    if (!target) {
        snprintf(err, errcap, "cannot write '%s': %s", path, strerror(errno));
        return -1;
    }
    struct stat old;
    bool replaces = stat(target, &old) == 0;
    char *tmp;
    if (asprintf(&tmp, "%s.tmp.%ld", target, (long)getpid()) < 0) abort();
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    /* fchmod, not the mode of open(): the umask would take bits off it */
    if (fd >= 0 && replaces && fchmod(fd, old.st_mode & 07777) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        fd = -1;
    }
    if (fd < 0) {
        snprintf(err, errcap, "cannot write '%s': %s", path, strerror(errno));
        free(tmp);
        free(target);
        return -1;
    }
    for (int i = 0; i < nparts; i++) {
        const char *p = parts[i];
        size_t left = sizes[i];
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0) {
                if (errno == EINTR) continue;
                snprintf(err, errcap, "cannot write '%s': %s", path, strerror(errno));
                close(fd);
                unlink(tmp);
                free(tmp);
                free(target);
                return -1;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, target) != 0) {
        snprintf(err, errcap, "cannot write '%s': %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        free(target);
        return -1;
    }
    free(tmp);
    free(target);
    return 0;
}
