/* xalloc.c — checked heap allocation and TFE_FAIL_ALLOC fault injection
 * (see xalloc.h for the two kinds of allocation and when each is used). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/xalloc.h"

/* fail_at: the allocation number that fails (0: none); -1 until the
 * environment has been read. Reading it lazily keeps this file free of
 * initialisation order: the first allocation may come from anywhere.
 * large_only: count only large tensor allocations ("large:N"). */
static long long fail_at = -1, calls, large_calls;
static bool large_only;

static void report(void)
{
    fprintf(stderr, "allocations: %lld (%lld large tensors)\n", calls, large_calls);
}

static void read_env(void)
{
    const char *e = getenv("TFE_FAIL_ALLOC");
    fail_at = 0;
    if (!e) return;
    if (strcmp(e, "count") == 0) {
        atexit(report);
    } else {
        large_only = strncmp(e, "large:", 6) == 0;
        fail_at = atoll(large_only ? e + 6 : e);
    }
}

bool alloc_fault(void)
{
    if (fail_at < 0) read_env();
    return ++calls == fail_at && !large_only;
}

bool alloc_fault_large(void)
{
    if (fail_at < 0) read_env();
    return ++large_calls == fail_at && large_only;
}

_Noreturn void xalloc_die(void)
{
    static const char msg[] = "tfe: out of memory\n";
    /* Keep what the program printed so far, then leave without atexit
     * handlers: they (readline's history, OpenBLAS) would allocate again. */
    fflush(stdout);
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing left to try */ }
    _exit(1);
}

void *try_malloc(size_t n)
{
    return alloc_fault() ? NULL : malloc(n ? n : 1);
}

void *try_calloc(size_t n, size_t size)
{
    if (!n || !size) n = size = 1;
    return alloc_fault() ? NULL : calloc(n, size);
}

void *try_realloc(void *p, size_t n)
{
    return alloc_fault() ? NULL : realloc(p, n ? n : 1);
}

void *xmalloc(size_t n)
{
    void *p = try_malloc(n);
    if (!p) xalloc_die();
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = try_calloc(n, size);
    if (!p) xalloc_die();
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = try_realloc(p, n);
    if (!q) xalloc_die();
    return q;
}

static char *copy(const char *s, size_t len)
{
    char *d = xmalloc(len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *xstrndup(const char *s, size_t n)
{
    return copy(s, strnlen(s, n));
}

char *xstrdup(const char *s)
{
    return copy(s, strlen(s));
}
