/* xalloc.h — the one way tfe's C code gets heap memory, and the hook that
 * makes any allocation fail on purpose for tests.
 *
 * Two kinds of allocation (docs/testing.md, "Allocation failure"):
 *   xmalloc/xcalloc/xrealloc/xstrdup/xstrndup: the interpreter's bookkeeping
 *     (nodes, values, graphs, tapes, names). These never return NULL: when
 *     the system has no memory left for a few bytes of bookkeeping, tfe
 *     prints "tfe: out of memory" and exits with status 1, without a signal
 *     and without running anything that could allocate again.
 *   try_malloc/try_calloc/try_realloc and tfe_alloc (tensor/alloc.c): sizes
 *     that come from data (tensor bytes, file headers, argument lists). These
 *     return NULL and the caller reports a located error the program can
 *     survive; the REPL keeps its bindings.
 * Raw malloc/calloc/realloc/strdup are not used outside this file.
 *
 * Fault injection: TFE_FAIL_ALLOC=N makes the Nth allocation of either kind
 * (counted from the start of the process) fail, once; TFE_FAIL_ALLOC=large:N
 * the Nth large tensor (over 4 KiB: the ones whose failure is an error, not
 * an exit; see tensor/alloc.c). TFE_FAIL_ALLOC=count prints
 * "allocations: N (M large tensors)" on stderr at exit. tests/alloc_faults.sh
 * sweeps N over whole programs. */
#ifndef TFE_XALLOC_H
#define TFE_XALLOC_H

#include <stdbool.h>
#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

void *try_malloc(size_t n);
void *try_calloc(size_t n, size_t size);
void *try_realloc(void *p, size_t n);

/* True when this allocation is the one TFE_FAIL_ALLOC says must fail
 * (counts the allocation either way). tfe_alloc calls alloc_fault for every
 * tensor and alloc_fault_large too for a large one. */
bool alloc_fault(void);
bool alloc_fault_large(void);

/* Print "tfe: out of memory" and exit(1) at once (no atexit handlers). */
_Noreturn void xalloc_die(void);

#endif
