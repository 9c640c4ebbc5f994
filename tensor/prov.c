/* prov.c — provenance sets (tfe_tensor.prov): the exact set of trainable
 * variables a tensor was computed from, as a refcounted, never mutated set
 * of variable ids named by a 64-bit handle (0: the empty set).
 *
 * Why sets and not a bloom: interp/builtins_autodiff.c (early_read) raises
 * when a tape's source gets no gradient while the target was computed from
 * it outside the tape's recording. A bloom of 64 bits is exact only while
 * each live variable has a bit alone; a real model has more variables than
 * that, and a shared bit can neither raise (it may be another variable's)
 * nor say nothing (the silent zeros the check is for). A set is exact for
 * any number of variables.
 *
 * Cost: a tensor computed from no variable (every tensor of a program
 * without trainable variables, and most in a graph) has handle 0 and costs
 * a zero test. An op whose inputs carry one set (or the same one) gives
 * that set (a compare). Only the union of two different sets comes here: a
 * direct-mapped cache of (a, b) -> a | b finds it again at the next step
 * of a loop, as the sets a training step makes are the same each step.
 *
 * Lifetime: a handle is held by the tensors that carry it (tfe_prov_assign,
 * released by tensor_decref) and by the variable it names. A set nobody
 * holds is kept (the cache may give it again) until enough such are kept,
 * then freed together by tfe_prov_collect, which runs only where no
 * unheld handle is in hand (at the start of a propagation). A handle has the
 * slot's generation in its high half, so a cached handle of a freed (and
 * reused) slot never matches. */
#include <stdlib.h>
#include <string.h>
#include "tensor/tensor.h"
#include "util/xalloc.h"

typedef struct ProvSet {
    uint32_t gen;      /* bumped each time the slot is freed */
    uint32_t refs;     /* holders (0: kept for the cache, freed at a collect) */
    uint32_t n;        /* ids, sorted ascending, no duplicates */
    bool used;
    uint32_t *ids;     /* (next free slot's index + 1 while free, in n) */
} ProvSet;

static ProvSet *sets;
static uint32_t nsets, capsets, free_head; /* free_head: index + 1 of a free slot, 0: none */
static uint32_t nunheld;                   /* used sets with refs 0 */

typedef struct CacheEnt { uint64_t a, b, c; } CacheEnt;
enum { CACHE_N = 4096, UNHELD_MAX = 8192 };
static CacheEnt cache[CACHE_N];

static inline ProvSet *slot_of(uint64_t h)
{
    uint32_t i = (uint32_t)h - 1;
    return i < nsets && sets[i].used && sets[i].gen == (uint32_t)(h >> 32) ? &sets[i] : NULL;
}

static uint64_t set_new(uint32_t *ids, uint32_t n)
{
    uint32_t i;
    if (free_head) {
        i = free_head - 1;
        free_head = sets[i].n;
    } else {
        if (nsets == capsets) {
            capsets = capsets ? capsets * 2 : 256;
            sets = xrealloc(sets, sizeof *sets * capsets);
        }
        i = nsets++;
        sets[i].gen = 1;
    }
    sets[i].used = true;
    sets[i].refs = 0;
    sets[i].n = n;
    sets[i].ids = ids;
    nunheld++;
    return (uint64_t)sets[i].gen << 32 | (i + 1);
}

uint64_t tfe_prov_singleton(uint32_t id)
{
    uint32_t *ids = xmalloc(sizeof *ids);
    ids[0] = id;
    uint64_t h = set_new(ids, 1);
    tfe_prov_retain(h);
    return h;
}

void tfe_prov_retain(uint64_t h)
{
    ProvSet *s = h ? slot_of(h) : NULL;
    if (s && s->refs++ == 0) nunheld--;
}

void tfe_prov_release(uint64_t h)
{
    ProvSet *s = h ? slot_of(h) : NULL;
    if (s && s->refs && --s->refs == 0) nunheld++;
}

void tfe_prov_assign_slow(uint64_t *field, uint64_t h)
{
    tfe_prov_retain(h);
    tfe_prov_release(*field);
    *field = h;
}

void tfe_prov_collect(void)
{
    if (nunheld <= UNHELD_MAX || nunheld <= nsets / 2) return;
    for (uint32_t i = 0; i < nsets; i++) {
        ProvSet *s = &sets[i];
        if (!s->used || s->refs) continue;
        free(s->ids);
        s->ids = NULL;
        s->used = false;
        s->gen++;
        s->n = free_head;
        free_head = i + 1;
    }
    nunheld = 0;
}

uint64_t tfe_prov_union_slow(uint64_t a, uint64_t b)
{
    if (a > b) {
        uint64_t t = a;
        a = b;
        b = t;
    }
    CacheEnt *e = &cache[(uint32_t)((a * 0x9e3779b97f4a7c15u) ^ (b * 0xc2b2ae3d27d4eb4fu)) >> 20 & (CACHE_N - 1)];
    if (e->a == a && e->b == b && slot_of(e->c)) return e->c;
    const ProvSet *x = slot_of(a), *y = slot_of(b);
    if (!x || !y) return x ? a : y ? b : 0; /* (not reached: the operands are held) */
    uint32_t *ids = xmalloc(sizeof *ids * (size_t)(x->n + y->n));
    uint32_t i = 0, j = 0, n = 0;
    while (i < x->n && j < y->n) {
        uint32_t u = x->ids[i], v = y->ids[j];
        ids[n++] = u < v ? u : v;
        i += u <= v;
        j += v <= u;
    }
    while (i < x->n) ids[n++] = x->ids[i++];
    while (j < y->n) ids[n++] = y->ids[j++];
    uint64_t c = n == x->n ? a : n == y->n ? b : 0; /* (one holds the other) */
    if (c) free(ids);
    else c = set_new(ids, n);
    e->a = a, e->b = b, e->c = c;
    return c;
}

bool tfe_prov_has(uint64_t h, uint32_t id)
{
    const ProvSet *s = h ? slot_of(h) : NULL;
    if (!s) return false;
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->ids[mid] == id) return true;
        if (s->ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return false;
}
