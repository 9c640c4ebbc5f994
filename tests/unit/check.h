/* check.h — a tiny assertion kit for the C unit tests: CHECK(cond, fmt...)
 * prints file:line and the message, and the test exits non-zero at the end. */
#ifndef TFE_CHECK_H
#define TFE_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
            check_failures++;                                              \
        }                                                                  \
    } while (0)

/* A failed precondition that makes the rest of the test meaningless
 * (cond is evaluated once). */
#define REQUIRE(cond, ...)                                                 \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: required: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

static inline int check_done(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    return 0;
}

/* FNV-1a over n bytes, from h (CHECK_FNV1A_START for a fresh hash): the
 * bit tests pin a kernel's output bytes by their hash. */
#define CHECK_FNV1A_START 1469598103934665603ull
static inline uint64_t check_fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#endif
