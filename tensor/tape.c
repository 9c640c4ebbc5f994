/* tape.c — the autodiff tape: a stack of active tapes that record the ops
 * whose inputs they track (tfe_tape_record, called by tfe_execute), and the
 * reverse sweep that turns a recording into gradients made of ordinary ops. */
#include <stdlib.h>
#include <string.h>

#include "tensor/device.h"
#include "tensor/grad.h"
#include "tensor/profile.h"
#include "util/xalloc.h"

int tfe_tapes_active;

/* --- pointer sets and maps ---------------------------------------------------------
 * Open addressing, power-of-two capacity, linear probing, no deletion (a map
 * entry is "removed" by clearing its value). Keys are tensors identified by
 * address: every key of a tape's tracked set is kept alive by the tape (a
 * watched tensor by the watch list, an op output by its entry), so an address
 * cannot be reused while it is a key. */

typedef struct pmap {
    size_t cap, n;               /* cap 0: empty, no storage */
    const tfe_tensor **keys;
    tfe_tensor **vals;           /* NULL for a plain set */
} pmap;

static inline size_t ptr_hash(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

/* Slot of key, or of the empty slot where it would go. cap must be > 0. */
static size_t pmap_slot(const pmap *m, const void *key) {
    size_t mask = m->cap - 1, i = ptr_hash(key) & mask;
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

static bool pmap_has(const pmap *m, const void *key) {
    return m->cap && m->keys[pmap_slot(m, key)] == key;
}

static void pmap_grow(pmap *m, bool with_vals) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    const tfe_tensor **nk = xcalloc(ncap, sizeof *nk);
    tfe_tensor **nv = with_vals ? xcalloc(ncap, sizeof *nv) : NULL;
    pmap old = *m;
    m->cap = ncap;
    m->keys = nk;
    m->vals = nv;
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.keys[i]) continue;
        size_t j = pmap_slot(m, old.keys[i]);
        m->keys[j] = old.keys[i];
        if (nv) nv[j] = old.vals[i];
    }
    free(old.keys);
    free(old.vals);
}

/* Insert key (no-op if present); returns its slot. */
static size_t pmap_put(pmap *m, const void *key, bool with_vals) {
    if ((m->n + 1) * 4 > m->cap * 3) pmap_grow(m, with_vals);
    size_t i = pmap_slot(m, key);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->n++;
    }
    return i;
}

static tfe_tensor *pmap_get(const pmap *m, const void *key) {
    if (!m->cap) return NULL;
    size_t i = pmap_slot(m, key);
    return m->keys[i] == key ? m->vals[i] : NULL;
}

/* Releases the values (owned references) too when the map has them. */
static void pmap_free(pmap *m) {
    if (m->vals)
        for (size_t i = 0; i < m->cap; i++)
            if (m->vals[i]) tensor_decref(m->vals[i]);
    free(m->keys);
    free(m->vals);
    *m = (pmap){0};
}

/* --- tapes ------------------------------------------------------------------------- */

/* One recorded op: the call by value. t[0..nin) are the inputs, t[nin..nin+nout)
 * the outputs; the entry owns one reference to each. */
typedef struct entry {
    tfe_op op;
    tfe_custom_grad *custom;  /* a staged call's entry (op unused), or NULL */
    int *same;                /* by output: the input it is at run time (eager code
                                 holds one tensor there), or -1; NULL: none is (owned) */
    /* conditional aliases (tfe_tape_cond_alias): output cs_out[i] is input
     * cs_to[i] where the traced bool cs_c[i] (owned) is true (a loop in a
     * trace that may run zero times, an if whose branch ends it on a value
     * from outside it) */
    int ncs;
    int *cs_out, *cs_to;
    tfe_tensor **cs_c;
    int nin, nout;
    tfe_attrs at;
    tfe_tensor *t[];
} entry;

struct tfe_tape {
    bool persistent;
    bool computing;     /* inside its own tfe_tape_gradient: records nothing */
    bool spent;         /* non-persistent and its one gradient call was made */
    int active;         /* times it is on the active stack (0 or 1 in practice) */
    pmap tracked;       /* watched tensors and outputs of recorded ops */
    pmap watchset;      /* the tensors t.watch was called on */
    tfe_tensor **watched; /* owned references that keep watched keys alive */
    int nwatched, capwatched;
    entry **entries;
    int nentries, capentries;
    bool keep_view;     /* tape(draw=true): a gradient call keeps the entries and every
                           gradient it computed, for t.graph() (tfe_tape_keep_view) */
    pmap view_grads;    /* ... those gradients, by tensor, of the last call (owned) */
    bool aside;         /* --check-staged's own (tfe_tape_set_aside): not counted by
                           tfe_tapes_recording */
};

/* The active tapes, innermost last: the stack of whoever runs the program
 * (an interpreter holds its own: tfe_tape_stack_use), else this one. */
static tfe_tape_stack own_stack, *stack = &own_stack;

void tfe_tape_stack_use(tfe_tape_stack *s) {
    stack = s ? s : &own_stack;
    tfe_tapes_active = stack->n;
}

tfe_tape *tfe_tape_new(bool persistent) {
    tfe_tape *t = xcalloc(1, sizeof *t);
    t->persistent = persistent;
    return t;
}

static void entry_free(entry *e) {
    if (!e) return;
    for (int i = 0; i < e->nin + e->nout; i++) tensor_decref(e->t[i]);
    if (e->custom && --e->custom->refcount == 0) e->custom->release(e->custom);
    free(e->same);
    for (int i = 0; i < e->ncs; i++) tensor_decref(e->cs_c[i]);
    free(e->cs_out);
    free(e->cs_to);
    free(e->cs_c);
    free(e);
}

/* Drop every recording (entries, tracked set, watched tensors). */
static void tape_clear(tfe_tape *t) {
    for (int i = 0; i < t->nentries; i++) entry_free(t->entries[i]);
    free(t->entries);
    t->entries = NULL;
    t->nentries = t->capentries = 0;
    pmap_free(&t->tracked);
    pmap_free(&t->watchset);
    for (int i = 0; i < t->nwatched; i++) tensor_decref(t->watched[i]);
    free(t->watched);
    t->watched = NULL;
    t->nwatched = t->capwatched = 0;
}

void tfe_tape_free(tfe_tape *t) {
    if (!t) return;
    while (t->active) tfe_tape_pop(t);
    tape_clear(t);
    pmap_free(&t->view_grads);
    free(t);
}

void tfe_tape_push(tfe_tape *t) {
    if (stack->n == stack->cap) {
        int ncap = stack->cap ? stack->cap * 2 : 8;
        stack->active = xrealloc(stack->active, sizeof *stack->active * (size_t)ncap);
        stack->cap = ncap;
    }
    stack->active[stack->n++] = t;
    t->active++;
    tfe_tapes_active = stack->n;
}

/* Removes the innermost occurrence of t (with blocks pop in LIFO order, but
 * a tape freed while active must not leave a dangling pointer). */
void tfe_tape_pop(tfe_tape *t) {
    for (int i = stack->n - 1; i >= 0; i--) {
        if (stack->active[i] != t) continue;
        memmove(stack->active + i, stack->active + i + 1, sizeof *stack->active * (size_t)(stack->n - i - 1));
        stack->n--;
        t->active--;
        break;
    }
    tfe_tapes_active = stack->n;
    if (stack->n == 0) {
        free(stack->active);
        stack->active = NULL;
        stack->cap = 0;
    }
}

bool tfe_tape_watches(const tfe_tape *t, const tfe_tensor *x) { return pmap_has(&t->watchset, x); }

bool tfe_tape_made(const tfe_tape *t, const tfe_tensor *x) {
    for (int k = 0; k < t->nentries; k++) {
        const entry *e = t->entries[k];
        for (int j = 0; e && j < e->nout; j++)
            if (e->t[e->nin + j] == x) return true;
    }
    return false;
}

int tfe_tape_cond_aliases(const tfe_tape *t, const tfe_tensor *x, int max, tfe_tensor **ins, tfe_tensor **flags) {
    for (int k = t->nentries - 1; k >= 0; k--) {
        const entry *e = t->entries[k];
        for (int j = 0; e && j < e->nout; j++) {
            if (e->t[e->nin + j] != x) continue;
            int n = 0;
            for (int i = 0; i < e->ncs && n < max; i++)
                if (e->cs_out[i] == j) {
                    ins[n] = e->t[e->cs_to[i]];
                    flags[n++] = e->cs_c[i];
                }
            return n;
        }
    }
    return 0;
}

int tfe_tape_uses(const tfe_tape *t, const tfe_tensor *x, const tfe_tensor *target) {
    /* from the target back: the entries whose outputs it depends on */
    pmap reach = {0};
    pmap_put(&reach, target, false);
    int n = 0;
    for (int k = t->nentries - 1; k >= 0; k--) {
        const entry *e = t->entries[k];
        if (!e) continue;
        bool needed = false;
        for (int j = 0; j < e->nout && !needed; j++) needed = pmap_has(&reach, e->t[e->nin + j]);
        if (!needed) continue;
        bool reads = false;
        for (int i = 0; i < e->nin; i++) {
            reads |= e->t[i] == x;
            pmap_put(&reach, e->t[i], false);
        }
        n += reads;
    }
    pmap_free(&reach);
    return n;
}

void tfe_tape_watch(tfe_tape *t, tfe_tensor *x) {
    /* an op's output watched too is kept in the list: a staged cond's output
     * stands for whichever tensor its branch made, which eager code would
     * have had to watch (tfe_tape_watches) */
    if (t->spent || tfe_tape_watches(t, x)) return;
    if (t->nwatched == t->capwatched) {
        int ncap = t->capwatched ? t->capwatched * 2 : 8;
        t->watched = xrealloc(t->watched, sizeof *t->watched * (size_t)ncap);
        t->capwatched = ncap;
    }
    pmap_put(&t->tracked, x, false);
    pmap_put(&t->watchset, x, false);
    tensor_incref(x);
    t->watched[t->nwatched++] = x;
}

bool tfe_tape_is_watched(const tfe_tape *t, const tfe_tensor *x) { return pmap_has(&t->tracked, x); }

int tfe_tape_nentries(const tfe_tape *t) { return t->nentries; }

int tfe_tape_entry_swap_in(tfe_tape *t, int k, int from, const tfe_tensor *old, tfe_tensor *new_in) {
    entry *e = k >= 0 && k < t->nentries ? t->entries[k] : NULL;
    int n = 0;
    for (int i = from < 0 ? 0 : from; e && i < e->nin; i++) {
        if (e->t[i] != old) continue;
        tensor_incref(new_in);
        tensor_decref(e->t[i]);
        e->t[i] = new_in;
        n++;
    }
    return n;
}


/* Record c on t (one of its inputs is tracked). The tape's bookkeeping never
 * fails (xalloc.h): a dropped record would make a silently wrong gradient. */
static void record_on(tfe_tape *t, const tfe_opcall *c, tfe_custom_grad *custom, const int *same) {
    int n = c->nin + c->nout;
    entry *e = xmalloc(sizeof *e + sizeof(tfe_tensor *) * (size_t)n);
    if (t->nentries == t->capentries) {
        int ncap = t->capentries ? t->capentries * 2 : 64;
        t->entries = xrealloc(t->entries, sizeof *t->entries * (size_t)ncap);
        t->capentries = ncap;
    }
    e->op = c->op;
    e->custom = custom;
    if (custom) custom->refcount++;
    e->same = NULL;
    e->ncs = 0;
    e->cs_out = e->cs_to = NULL;
    e->cs_c = NULL;
    for (int j = 0; same && j < c->nout; j++)
        if (same[j] >= 0 && same[j] < c->nin + j) { /* (an input, or an earlier output) */
            if (!e->same) {
                e->same = xmalloc(sizeof *e->same * (size_t)c->nout);
                for (int k = 0; k < c->nout; k++) e->same[k] = -1;
            }
            e->same[j] = same[j];
        }
    e->nin = c->nin;
    e->nout = c->nout;
    e->at = *c->at;
    for (int i = 0; i < c->nin; i++) e->t[i] = c->in[i];
    for (int i = 0; i < c->nout; i++) e->t[c->nin + i] = c->out[i];
    for (int i = 0; i < n; i++) tensor_incref(e->t[i]);
    for (int i = 0; i < c->nout; i++) pmap_put(&t->tracked, c->out[i], false);
    t->entries[t->nentries++] = e;
}

static void record_active(const tfe_opcall *c, tfe_custom_grad *custom);
static void record_first(const tfe_opcall *c, tfe_custom_grad *custom, int n, const int *same, int nsame);

void tfe_tape_record(const tfe_opcall *c) {
    /* Ops without a gradient are not recorded: their outputs are constants to
     * every tape (this is what makes stop_gradient stop). */
    if (tfe_ops[c->op].flags & F_NODIFF) return;
    record_active(c, NULL);
}

void tfe_tape_record_outer(const tfe_opcall *c, int n) {
    if (tfe_ops[c->op].flags & F_NODIFF) return;
    record_first(c, NULL, n < stack->n ? n : stack->n, NULL, 0);
}

void tfe_tape_record_same_outer(tfe_tensor *in, tfe_tensor *out, int n) {
    static const tfe_attrs none = {.naxes = -1};
    static const int same[1] = {0};
    const tfe_opcall c = {.op = OP_COPY, .nin = 1, .nout = 1, .in = &in, .at = &none, .out = &out};
    n = n < stack->n ? n : stack->n;
    record_first(&c, NULL, n, same, n);
}

void tfe_tape_record_custom_same(tfe_custom_grad *g, int nin, tfe_tensor *const *in, int nout,
                                 tfe_tensor *const *out, const int *same, int nsame) {
    static const tfe_attrs none = {.naxes = -1};
    const tfe_opcall c = {.op = 0, .nin = nin, .nout = nout, .in = in, .at = &none,
                          .out = (tfe_tensor **)out};
    record_first(&c, g, stack->n, same, nsame);
}

void tfe_tape_cond_alias(int from, int nout, tfe_tensor *const *out, int n, const int *outk, const int *to,
                         tfe_tensor *const *cond) {
    for (int k = from; k < stack->n && nout > 0; k++) {
        tfe_tape *t = stack->active[k];
        entry *e = t->nentries ? t->entries[t->nentries - 1] : NULL;
        if (!e || e->nout < nout || e->t[e->nin] != out[0]) continue;
        for (int i = 0; i < n; i++) {
            /* (to[i] <= -2: the entry's earlier output -2 - to[i]) */
            int tt = to[i] <= -2 && -2 - to[i] < outk[i] ? e->nin + (-2 - to[i]) : to[i];
            if (outk[i] < 0 || outk[i] >= nout || !cond[i] || tt < 0 || (tt >= e->nin && to[i] >= 0)) continue;
            e->cs_out = xrealloc(e->cs_out, sizeof *e->cs_out * (size_t)(e->ncs + 1));
            e->cs_to = xrealloc(e->cs_to, sizeof *e->cs_to * (size_t)(e->ncs + 1));
            e->cs_c = xrealloc(e->cs_c, sizeof *e->cs_c * (size_t)(e->ncs + 1));
            e->cs_out[e->ncs] = outk[i];
            e->cs_to[e->ncs] = tt;
            e->cs_c[e->ncs++] = (tensor_incref(cond[i]), cond[i]);
        }
    }
}

void tfe_tape_cond_same(int from, int nout, tfe_tensor *const *out, const int *csame, tfe_tensor *const *ccond) {
    int *outk = xmalloc(sizeof *outk * ((size_t)nout + 1)), n = 0;
    int *to = xmalloc(sizeof *to * ((size_t)nout + 1));
    tfe_tensor **c = xmalloc(sizeof *c * ((size_t)nout + 1));
    for (int j = 0; j < nout; j++)
        if (csame[j] >= 0 && ccond[j]) {
            outk[n] = j;
            to[n] = csame[j];
            c[n++] = ccond[j];
        }
    tfe_tape_cond_alias(from, nout, out, n, outk, to, c);
    free(outk);
    free(to);
    free(c);
}

void tfe_tape_record_custom(tfe_custom_grad *g, int nin, tfe_tensor *const *in, int nout,
                            tfe_tensor *const *out) {
    static const tfe_attrs none = {.naxes = -1};
    const tfe_opcall c = {.op = 0, .nin = nin, .nout = nout, .in = in, .at = &none,
                          .out = (tfe_tensor **)out};
    record_active(&c, g);
}

static void record_active(const tfe_opcall *c, tfe_custom_grad *custom) {
    record_first(c, custom, stack->n, NULL, 0);
}

/* A recording tape that tracks one of an entry's inputs but holds none of
 * its outputs began after the entry ran: to it the entry's forward values
 * are constants (eager code computed them before it), which a backward that
 * replays the forward under it would not give (stage/grad.c). */
bool tfe_tapes_late(int nin, tfe_tensor *const *in, int nout, tfe_tensor *const *out) {
    for (int k = 0; k < stack->n; k++) {
        tfe_tape *t = stack->active[k];
        if (t->computing || t->spent || !t->tracked.n) continue;
        bool tracks = false, made = false;
        for (int i = 0; i < nin && !tracks; i++) tracks = in[i] && pmap_has(&t->tracked, in[i]);
        for (int j = 0; j < nout && !made; j++) made = out[j] && pmap_has(&t->tracked, out[j]);
        if (tracks && !made) return true;
    }
    return false;
}

int tfe_tapes_tracking(int from, int to, int nin, tfe_tensor *const *in) {
    int n = 0;
    for (int k = from; k < to && k < stack->n; k++) {
        tfe_tape *t = stack->active[k];
        if (t->computing || t->spent || t->aside || !t->tracked.n) continue;
        bool dup = false, tracks = false;
        for (int j = k + 1; j < stack->n && !dup; j++) dup = stack->active[j] == t;
        for (int i = 0; i < nin && !tracks; i++) tracks = in[i] && pmap_has(&t->tracked, in[i]);
        n += tracks && !dup;
    }
    return n;
}

void tfe_tape_set_aside(tfe_tape *t) { t->aside = true; }

int tfe_tapes_recording_or(tfe_tape *const *also, int nalso) {
    return tfe_tapes_recording_below(stack->n, also, nalso);
}

int tfe_tapes_recording_below(int upto, tfe_tape *const *also, int nalso) {
    int n = 0;
    for (int k = 0; k < stack->n && k < upto; k++) {
        tfe_tape *t = stack->active[k];
        bool will = t->tracked.n > 0;
        for (int j = 0; j < nalso && !will; j++) will = also[j] == t;
        if (t->computing || t->spent || t->aside || !will) continue;
        bool dup = false;
        for (int j = k + 1; j < stack->n && j < upto && !dup; j++) dup = stack->active[j] == t;
        n += !dup;
    }
    return n;
}

int tfe_tapes_recording(void) {
    int n = 0;
    for (int k = 0; k < stack->n; k++) {
        tfe_tape *t = stack->active[k];
        if (t->computing || t->spent || t->aside || !t->tracked.n) continue;
        bool dup = false;
        for (int j = k + 1; j < stack->n && !dup; j++) dup = stack->active[j] == t;
        n += !dup;
    }
    return n;
}

/* Record c on the first n active tapes (the outermost) that track an input;
 * same (NULL: none) on the first nsame of the stack only. */
static void record_first(const tfe_opcall *c, tfe_custom_grad *custom, int n, const int *same, int nsame) {
    /* An output that is one of the inputs (an identity) needs no entry: the
     * gradient reaches the tensor either way, and an entry would count it twice. */
    for (int j = 0; j < c->nout; j++)
        for (int i = 0; i < c->nin; i++)
            if (c->out[j] == c->in[i]) return;
    for (int k = 0; k < n; k++) {
        tfe_tape *t = stack->active[k];
        if (t->computing || t->spent || !t->tracked.n) continue;
        /* a tape on the stack twice records once (its innermost occurrence) */
        bool dup = false;
        for (int j = k + 1; j < stack->n && !dup; j++) dup = stack->active[j] == t;
        if (dup) continue;
        for (int i = 0; i < c->nin; i++) {
            if (pmap_has(&t->tracked, c->in[i])) {
                record_on(t, c, custom, k < nsame ? same : NULL);
                break;
            }
        }
    }
}

/* --- the reverse sweep --------------------------------------------------------------- */

/* full(shape of like, v) of like's dtype, made by an op so that an outer tape
 * or (later) a trace sees it as a constant like any other. */
tfe_tensor *tfe_filled_like(const tfe_tensor *like, double v) {
    if (tfe_dyn_dims(like)) {
        /* while a trace records, like's sizes come from the data (x[mask]):
         * where(b, v, v), b a bool of like's shape, has them at run time */
        if (like->dtype < TFE_FLOAT16) {
            tfe_tensor *b = tfe_binary(OP_EQ, (tfe_tensor *)like, (tfe_tensor *)like);
            tfe_attrs ct;
            tfe_attrs_init(&ct);
            ct.dtype = like->dtype;
            ct.f[0] = v;
            tfe_tensor *c = b ? tfe_call1(OP_FULL, 0, NULL, &ct) : NULL;
            tfe_tensor *in[3] = {b, c, c};
            tfe_tensor *r = c ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
            if (c) tensor_decref(c);
            if (b) tensor_decref(b);
            return r;
        }
        if (tfe_value_read_hook) tfe_value_read_hook(like); /* the trace is for these sizes */
    }
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = like->dtype;
    at.nints = like->rank;
    for (int i = 0; i < like->rank; i++) at.ints[i] = like->shape[i] < 0 ? 0 : like->shape[i]; /* a traced unknown dim */
    at.f[0] = v;
    /* on like's device (tensor/device.c places a creation op on the default
     * device), so gradients stay where their tensors are */
    int saved = tfe_device_default(), dev = like->storage ? like->storage->device : saved;
    if (dev != saved) tfe_device_set_default(dev);
    tfe_tensor *r = tfe_call1(OP_FULL, 0, NULL, &at);
    if (dev != saved) tfe_device_set_default(saved);
    return r;
}

/* grads[key] += g (takes g). */
static int accumulate(pmap *grads, const tfe_tensor *key, tfe_tensor *g) {
    size_t i = pmap_put(grads, key, true);
    return tfe_grad_add(&grads->vals[i], g);
}

/* --- none flags --------------------------------------------------------------------
 * Inside a trace, the backward of a staged call (or of a traced if or loop)
 * cannot tell at trace time whether a gradient it hands back is none in
 * eager terms: that depends on the path the graph takes when it runs. It
 * hands back -0.0s there (adding them changes nothing) and a traced bool
 * flag, true where the gradient is none. The tape keeps the flags beside the
 * gradients (by tensor), so that what eager code would skip adds nothing and
 * a source nothing reached gets zeros. Eager tapes never see a flag. */

/* flags[key] = f (takes f; NULL: real). */
static void flag_set(pmap *flags, const tfe_tensor *key, tfe_tensor *f) {
    if (!f && !pmap_has(flags, key)) return;
    size_t i = pmap_put(flags, key, true);
    if (flags->vals[i]) tensor_decref(flags->vals[i]);
    flags->vals[i] = f;
}

/* grads[key] += g (takes g), g's flag f (borrowed): the sum is none only
 * where both are. */
static int accumulate_f(pmap *grads, pmap *flags, const tfe_tensor *key, tfe_tensor *g, tfe_tensor *f) {
    tfe_tensor *old = pmap_get(grads, key);
    if (old || f) {
        tfe_tensor *nf = old ? tfe_grad_flag_and(pmap_get(flags, key), f) : (tensor_incref(f), f);
        flag_set(flags, key, nf);
    }
    return accumulate(grads, key, g);
}

/* Conditional aliases (entry.cs_*): y is x where the traced bool c is. */
typedef struct calias {
    int n;
    const tfe_tensor **y, **x;
    tfe_tensor **c;
} calias;

static int cal_find(const calias *ca, const tfe_tensor *key) {
    for (int i = 0; i < ca->n; i++)
        if (ca->y[i] == key) return i;
    return -1;
}

/* c ? a : b for flags (borrowed; NULL: real), new ref or NULL. */
static tfe_tensor *cflag_where(tfe_tensor *c, tfe_tensor *a, tfe_tensor *b) {
    if (!a && !b) return NULL;
    tfe_tensor *fa = a ? (tensor_incref(a), a) : tensor_from_i64(0, TFE_BOOL);
    tfe_tensor *fb = b ? (tensor_incref(b), b) : tensor_from_i64(0, TFE_BOOL);
    tfe_tensor *in[3] = {c, fa, fb};
    tfe_tensor *r = fa && fb ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
    if (fa) tensor_decref(fa);
    if (fb) tensor_decref(fb);
    return r;
}

/* grads[key] = on ? grads[key] + g : grads[key] (g, f borrowed; on a traced
 * bool): with no gradient so far, -0.0s flagged none, which adding leaves
 * exact. */
static int accumulate_where(pmap *grads, pmap *flags, const tfe_tensor *key, tfe_tensor *g, tfe_tensor *f,
                            tfe_tensor *on) {
    tfe_tensor *old = pmap_get(grads, key);
    tfe_tensor *base = old ? (tensor_incref(old), old) : tfe_filled_like(g, -0.0);
    tfe_tensor *sum = base ? tfe_binary(OP_ADD, base, g) : NULL;
    tfe_tensor *in[3] = {on, sum, base};
    tfe_tensor *r = sum ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
    tfe_tensor *fold = old ? pmap_get(flags, key) : tensor_from_i64(1, TFE_BOOL); /* (owned when !old) */
    tfe_tensor *fsum = fold ? tfe_grad_flag_and(fold, f) : NULL;
    tfe_tensor *fnew = r ? cflag_where(on, fsum, fold) : NULL;
    if (fsum) tensor_decref(fsum);
    if (!old && fold) tensor_decref(fold);
    if (base) tensor_decref(base);
    if (sum) tensor_decref(sum);
    if (!r) {
        if (fnew) tensor_decref(fnew);
        return -1;
    }
    size_t i = pmap_put(grads, key, true);
    if (grads->vals[i]) tensor_decref(grads->vals[i]);
    grads->vals[i] = r;
    flag_set(flags, key, fnew);
    return 0;
}

/* grads[key] += g where the traced bool on is (NULL: everywhere; g, f
 * borrowed), and where key is, under a traced bool, another tensor
 * (calias), there to that one's sum instead, and so on along a chain (a
 * loop's result that is its initial value where it ran zero times, which
 * is an if's result that is x where its branch ran). */
static int accumulate_on(pmap *grads, pmap *flags, const calias *ca, const tfe_tensor *key, tfe_tensor *g,
                         tfe_tensor *f, tfe_tensor *on, int depth) {
    int i = depth < 8 ? cal_find(ca, key) : -1;
    if (i < 0) {
        if (on) return accumulate_where(grads, flags, key, g, f, on);
        tensor_incref(g);
        return accumulate_f(grads, flags, key, g, f);
    }
    /* (a key may have several, under exclusive bools: each adds there; the
     * key keeps what none of them takes) */
    tfe_tensor *any = NULL;
    int rc = 0;
    for (; i < ca->n && !rc; i++) {
        if (ca->y[i] != key) continue;
        tfe_tensor *ci = on ? tfe_binary(OP_LOGICAL_AND, on, ca->c[i]) : (tensor_incref(ca->c[i]), ca->c[i]);
        if (!ci || accumulate_on(grads, flags, ca, ca->x[i], g, f, ci, depth + 1)) rc = -1;
        if (ci) tensor_decref(ci);
        tfe_tensor *a2 = any ? tfe_binary(OP_LOGICAL_OR, any, ca->c[i]) : (tensor_incref(ca->c[i]), ca->c[i]);
        if (any) tensor_decref(any);
        if (!(any = a2)) rc = -1;
    }
    tfe_tensor *no = any ? tfe_call1(OP_LOGICAL_NOT, 1, &any, NULL) : NULL;
    tfe_tensor *here = no && on ? tfe_binary(OP_LOGICAL_AND, on, no) : no ? (tensor_incref(no), no) : NULL;
    if (!rc && (!here || accumulate_where(grads, flags, key, g, f, here))) rc = -1;
    if (here) tensor_decref(here);
    if (no) tensor_decref(no);
    if (any) tensor_decref(any);
    return rc;
}

/* grads[key] += g (takes g; flag f borrowed), where key is, under a
 * traced bool, another tensor (calias): there to that one's sum instead. */
static int accumulate_c(pmap *grads, pmap *flags, const calias *ca, const tfe_tensor *key, tfe_tensor *g,
                        tfe_tensor *f) {
    if (cal_find(ca, key) < 0) return accumulate_f(grads, flags, key, g, f);
    int rc = accumulate_on(grads, flags, ca, key, g, f, NULL, 0);
    tensor_decref(g);
    return rc;
}

/* A custom entry (a traced loop, say) whose input j is, where a traced bool
 * says so, the tensor x (tfe_tape_cond_alias: `if p { acc = x }`, then a
 * loop reading acc, and x too or not, with a tape made inside the staged
 * function): eager code holds one tensor there, and the loop's uses of it
 * add to x's one running sum in the order they come, which the entry's
 * backward gives only when it is handed the one tensor in all its places
 * and starts from x's gradient so far. The sweep runs the backward with
 * them apart (what the other calls need); this runs it again so (a merge
 * of the places, acc's given x's tensor), then picks x's gradient by the
 * bool: the merged sum where the alias holds.
 * A group: key (x's, canon), xi (x's own place among the inputs, with a
 * total, or -1), in_grp[k] (acc's places), c (where the alias holds,
 * borrowed), oldg/oldf (x's gradient so far and its flag before the first
 * run, borrowed; NULL: none). Returns 0, or -1 on failure. */
typedef struct MergeGroup {
    const tfe_tensor *key, *y; /* (y: acc's key; another one for the same x: none of this) */
    bool mixed;
    int xi;
    bool *in_grp;
    tfe_tensor *c, *oldg, *oldf;
} MergeGroup;

static int merge_pick(entry *e, tfe_tensor *const *cin, tfe_tensor *const *dy, tfe_tensor **dyf, tfe_tensor *enone,
                      const MergeGroup *mg, pmap *gmap, pmap *flags) {
    int nin = e->nin, rc = -1, fst = -1;
    tfe_tensor **cin2 = xcalloc((size_t)nin + 1, sizeof *cin2), **dx = xcalloc((size_t)nin + 1, sizeof *dx);
    tfe_tensor **dxf = xcalloc((size_t)nin + 1, sizeof *dxf), **dxfin = NULL;
    bool *grp = xcalloc((size_t)nin + 1, sizeof *grp);
    tfe_tensor *tot = NULL, *totf = NULL;
    for (int k = 0; k < nin; k++) {
        grp[k] = mg->in_grp[k] || k == mg->xi;
        if (grp[k] && fst < 0) fst = k;
    }
    /* (the one tensor: x's where x is an input, else the first acc's) */
    for (int k = 0; k < nin; k++) cin2[k] = grp[k] ? cin[mg->xi >= 0 ? mg->xi : fst] : cin[k];
    /* the group's first place takes x's gradient so far (a total, as the
     * sweep gives a tensor passed twice), its others a part; the other
     * inputs are the first run's */
    for (int k = 0; k < nin; k++) dx[k] = !grp[k] ? TFE_GRAD_SKIP : k == fst ? mg->oldg : NULL;
    if (dyf) {
        dxfin = xcalloc((size_t)nin + 1, sizeof *dxfin);
        dxfin[fst] = mg->oldf;
    }
    e->custom->dy_none = dyf;
    e->custom->dx_none_in = dxfin;
    e->custom->dx_none = dxf;
    e->custom->one_inputs = true;
    int brc = e->custom->backward(e->custom, nin, cin2, e->nout, e->t + nin, dy, dx);
    e->custom->one_inputs = false;
    e->custom->dy_none = NULL;
    e->custom->dx_none_in = NULL;
    e->custom->dx_none = NULL;
    for (int k = 0; k < nin; k++) /* (the total's place holds a new reference, as in the sweep) */
        if (dx[k] == TFE_GRAD_SKIP || (k == fst && dx[k] == mg->oldg)) dx[k] = NULL;
    if (brc || !dx[fst]) goto out;
    /* the total, then the parts, as the sweep adds them */
    if (tfe_grad_place(&dx[fst], e->t[fst])) goto out;
    tot = dx[fst];
    totf = dxf[fst];
    dx[fst] = dxf[fst] = NULL;
    for (int k = 0; k < nin; k++) {
        if (!grp[k] || k == fst || !dx[k]) continue;
        tfe_tensor *fk = dxf[k];
        dxf[k] = NULL;
        if (!fk && enone) {
            tfe_tensor *m = tfe_grad_flag_fill(enone, dx[k], -0.0);
            tensor_decref(dx[k]);
            if (!(dx[k] = m)) goto out;
            fk = (tensor_incref(enone), enone);
        }
        tfe_tensor *sum = tfe_grad_place(&dx[k], e->t[k]) ? NULL : tfe_binary(OP_ADD, tot, dx[k]);
        tfe_tensor *sf = sum && (totf || fk) ? tfe_grad_flag_and(totf, fk) : NULL;
        if (fk) tensor_decref(fk);
        if (!sum) goto out;
        tensor_decref(tot);
        tot = sum;
        if (totf) tensor_decref(totf);
        totf = sf;
    }
    /* x's gradient: the merged sum where the alias holds, else the first run's */
    tfe_tensor *old = pmap_get(gmap, mg->key);
    if (!old) { /* (the first run gave none: keep that) */
        rc = 0;
        goto out;
    }
    tfe_tensor *in[3] = {mg->c, tot, old};
    tfe_tensor *r = tfe_call1(OP_WHERE, 3, in, NULL);
    if (!r) goto out;
    tfe_tensor *f = totf || pmap_get(flags, mg->key) ? cflag_where(mg->c, totf, pmap_get(flags, mg->key)) : NULL;
    size_t s = pmap_put(gmap, mg->key, true);
    tensor_decref(gmap->vals[s]);
    gmap->vals[s] = r;
    flag_set(flags, mg->key, f);
    rc = 0;
out:
    for (int k = 0; k < nin; k++) {
        if (dx[k]) tensor_decref(dx[k]);
        if (dxf[k]) tensor_decref(dxf[k]);
    }
    if (tot) tensor_decref(tot);
    if (totf) tensor_decref(totf);
    free(cin2);
    free(dx);
    free(dxf);
    free(dxfin);
    free(grp);
    return rc;
}

int tfe_tape_gradient(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources, tfe_tensor **grads) {
    return tfe_tape_gradient_from(t, target, n, sources, NULL, grads);
}

static int gradient_impl(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources,
                         tfe_tensor *const *init, tfe_tensor *const *alias, bool keep, tfe_tensor **grads);

int tfe_tape_gradient_from(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources,
                           tfe_tensor *const *init, tfe_tensor **grads) {
    return gradient_impl(t, target, n, sources, init, NULL, false, grads);
}

int tfe_tape_gradient_alias(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources,
                            tfe_tensor *const *alias, bool keep, tfe_tensor **grads) {
    return gradient_impl(t, target, n, sources, NULL, alias, keep, grads);
}

/* tape(draw=true): x's final gradient g kept for the picture (a reference). */
static void view_keep(tfe_tape *t, const tfe_tensor *x, tfe_tensor *g) {
    size_t s = pmap_put(&t->view_grads, x, true);
    if (t->view_grads.vals[s]) return;
    tensor_incref(g);
    t->view_grads.vals[s] = g;
}

/* The key a gradient of x is summed under: the source it is an alias of. */
static const tfe_tensor *canon(const pmap *al, const tfe_tensor *x) {
    const tfe_tensor *c = al->n ? pmap_get(al, x) : NULL;
    return c ? c : x;
}

static int gradient_impl(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources,
                         tfe_tensor *const *init, tfe_tensor *const *alias, bool keep, tfe_tensor **grads) {
    for (int i = 0; i < n; i++) grads[i] = NULL;
    if (t->spent) {
        tfe_error_set("gradient: a non-persistent tape can be used for only one gradient call "
                      "(use tape(persistent=true))");
        return -1;
    }
    if (t->computing) {
        tfe_error_set("gradient: the tape is already computing a gradient");
        return -1;
    }
    t->computing = true;
    int rc = -1;
    pmap reach = {0}, srcset = {0}, gmap = {0}, flags = {0}, al = {0};
    calias ca = {0};
    tfe_tensor **alkeys = NULL; /* the keys of entries' aliases (owned) */
    int nalkeys = 0;
    bool *needed = NULL;
    bool was_persistent = t->persistent;
    if (keep) t->persistent = true; /* another gradient call follows */
    if (t->keep_view) pmap_free(&t->view_grads); /* the last call's are drawn */
    for (int i = 0; alias && i < n; i++)
        if (alias[i] && alias[i] != sources[i] && !pmap_get(&al, sources[i])) {
            tensor_incref(alias[i]); /* (the map owns its values) */
            size_t s = pmap_put(&al, sources[i], true);
            al.vals[s] = alias[i];
        }

    /* Forward pass: an entry matters only if one of its inputs depends on a
     * source. A source the tape does not track cannot be reached (its
     * gradient is zeros), as in TensorFlow where an unwatched tensor gets none. */
    for (int i = 0; i < n; i++) {
        pmap_put(&srcset, sources[i], false);
        if (pmap_has(&t->tracked, sources[i])) pmap_put(&reach, sources[i], false);
    }
    needed = xcalloc((size_t)t->nentries, sizeof *needed);
    if (reach.n && pmap_has(&t->tracked, target)) {
        for (int k = 0; k < t->nentries; k++) {
            entry *e = t->entries[k];
            /* (an entry standing for ops with a source among its outputs:
             * its other outputs may be computed from it, so what reaches
             * them is checked, below) */
            bool srcout = false;
            for (int j = 0; e->custom && e->custom->composite && j < e->nout; j++)
                srcout |= pmap_has(&srcset, e->t[e->nin + j]);
            for (int j = 0; srcout && j < e->nout; j++) pmap_put(&reach, e->t[e->nin + j], false);
            for (int i = 0; i < e->nin && !needed[k]; i++) needed[k] = pmap_has(&reach, e->t[i]);
            if (!needed[k]) continue;
            for (int j = 0; j < e->nout; j++)
                pmap_put(&reach, e->t[e->nin + j], false);
            /* an output that is an input at run time (a staged loop that ran
             * zero times, a variable read again): eager code holds one
             * tensor, whose uses add to one running sum, so the output's
             * gradient is summed under the input's key (its entry then
             * gets none for it) */
            for (int j = 0; e->same && j < e->nout; j++) {
                tfe_tensor *y = e->t[e->nin + j];
                if (e->same[j] < 0 || pmap_get(&al, y)) continue;
                tfe_tensor *x = (tfe_tensor *)canon(&al, e->t[e->same[j]]);
                tensor_incref(x);
                tensor_incref(y); /* (the key outlives the entry, freed as the sweep goes) */
                size_t s = pmap_put(&al, y, true);
                al.vals[s] = x;
                alkeys = xrealloc(alkeys, sizeof *alkeys * (size_t)(nalkeys + 1));
                alkeys[nalkeys++] = y;
            }
            /* ... or is so where a traced bool is (a loop in a trace that
             * may run zero times: tfe_tape_cond_same): what reaches it is
             * added, there, to the input's sum as it comes */
            for (int i = 0; i < e->ncs; i++) {
                tfe_tensor *y = e->t[e->nin + e->cs_out[i]];
                if (pmap_get(&al, y)) continue;
                ca.y = xrealloc(ca.y, sizeof *ca.y * (size_t)(ca.n + 1));
                ca.x = xrealloc(ca.x, sizeof *ca.x * (size_t)(ca.n + 1));
                ca.c = xrealloc(ca.c, sizeof *ca.c * (size_t)(ca.n + 1));
                tensor_incref(y); /* (the key outlives the entry) */
                ca.y[ca.n] = y;
                ca.x[ca.n] = canon(&al, e->t[e->cs_to[i]]);
                ca.c[ca.n++] = (tensor_incref(e->cs_c[i]), e->cs_c[i]);
            }
        }
        /* Backward pass from the target (ones of its shape: the target is summed). */
        if (pmap_has(&reach, target)) {
            tfe_tensor *seed = tfe_filled_like(target, 1.0);
            if (!seed || accumulate_c(&gmap, &flags, &ca, canon(&al, target), seed, NULL)) goto out;
        }
    }
    /* gradients so far: what the backward finds adds to them, in its order */
    for (int i = 0; init && i < n; i++) {
        if (!init[i] || pmap_get(&gmap, sources[i])) continue;
        tensor_incref(init[i]);
        if (accumulate(&gmap, sources[i], init[i])) goto out;
    }
    for (int k = t->nentries - 1; k >= 0 && gmap.n; k--) {
        entry *e = t->entries[k];
        /* a source that is an output of a custom entry standing for ops
         * (a staged call's graph), where another of its outputs has a
         * gradient: eager code's gradient of the source would include what
         * flows into it through that output's ops, which the entry's
         * backward does not give (its sources are its inputs): refused,
         * never the direct uses alone */
        for (int j = 0; e->custom && e->custom->composite && j < e->nout; j++) {
            if (!pmap_has(&srcset, e->t[e->nin + j])) continue;
            for (int o = 0; o < e->nout; o++)
                if (o != j && canon(&al, e->t[e->nin + o]) != canon(&al, e->t[e->nin + j]) &&
                    pmap_get(&gmap, canon(&al, e->t[e->nin + o]))) {
                    tfe_error_set("gradient: a source is a result of a staged call (or of a traced if or loop "
                                  "inside one), and the target also uses another of that call's results, "
                                  "which may be computed from it inside the call: the call's gradient is "
                                  "taken with respect to its inputs only, so the path through the other "
                                  "result would be lost; take the gradient with respect to an input of the "
                                  "call (watch it before the call), or compute the other result from this "
                                  "one outside the staged function");
                    goto out;
                }
        }
        if (!needed[k]) continue;
        /* ops have nout <= 32 (split's sections are counted in at->ints[32]);
         * a staged call's entry may have more */
        int ndy = e->nout > 32 ? e->nout : 32;
        tfe_tensor *dy[ndy];
        bool any = false;
        for (int j = 0; j < e->nout; j++) {
            dy[j] = pmap_get(&gmap, e->t[e->nin + j]);
            any |= dy[j] != NULL;
        }
        if (any && !e->custom) { /* an op: its rule, one step shared with stage/grad.c */
            bool skipb[64], *skip = e->nin <= 64 ? skipb : xmalloc(sizeof *skip * (size_t)e->nin);
            tfe_tensor *dyf[ndy], *dxbuf[64], *enone = NULL;
            tfe_tensor **dx = e->nin <= 64 ? dxbuf : xmalloc(sizeof *dx * (size_t)e->nin);
            for (int i = 0; i < e->nin; i++) skip[i] = !pmap_has(&reach, e->t[i]);
            for (int j = 0; j < e->nout; j++) dyf[j] = dy[j] && flags.n ? pmap_get(&flags, e->t[e->nin + j]) : NULL;
            const tfe_opcall c = {.op = e->op, .nin = e->nin, .nout = e->nout, .in = e->t,
                                  .at = &e->at, .out = e->t + e->nin};
            int64_t pt0 = prof_recording ? prof_now() : 0; /* the profiler: one backward op */
            bool fail = tfe_grad_step(&c, dy, flags.n ? dyf : NULL, skip, dx, &enone) != 0;
            if (pt0) {
                char sh[512];
                tfe_prof_shapes(sh, sizeof sh, e->nin, e->t);
                prof_complete(PROF_BWD, tfe_prof_bwd_name(e->op), pt0, sh, -1, tfe_prof_device(e->nin, e->t));
            }
            for (int i = 0; i < e->nin && !fail; i++) {
                if (!dx[i]) continue;
                /* inputs that no source reaches need no gradient */
                if (!pmap_has(&reach, e->t[i])) tensor_decref(dx[i]);
                else if (accumulate_c(&gmap, &flags, &ca, canon(&al, e->t[i]), dx[i], enone)) fail = true;
                dx[i] = NULL;
            }
            for (int i = 0; i < e->nin; i++)
                if (dx[i]) tensor_decref(dx[i]);
            if (enone) tensor_decref(enone);
            if (dx != dxbuf) free(dx);
            if (skip != skipb) free(skip);
            if (fail) goto out;
        } else if (any) { /* a custom entry (a staged call's graph) */
            tfe_tensor *dxbuf[64];
            bool made[ndy], fail = false;
            memset(made, 0, sizeof made);
            tfe_tensor **dx = e->nin <= 64 ? dxbuf : xmalloc(sizeof *dx * (size_t)e->nin);
            /* none flags (only inside a trace): where all the output
             * gradients are none, what the backward makes is none too
             * (-0.0s), unless it says otherwise */
            tfe_tensor *enone = NULL, **dyf = NULL, **dxfin = NULL;
            /* (a staged call's backward in a trace may hand out flags) */
            tfe_tensor **dxf = xcalloc((size_t)e->nin + 1, sizeof *dxf);
            if (flags.n) {
                dyf = xcalloc((size_t)e->nout + 1, sizeof *dyf);
                dxfin = xcalloc((size_t)e->nin + 1, sizeof *dxfin);
                for (int j = 0; j < e->nout; j++)
                    if (dy[j]) dyf[j] = pmap_get(&flags, e->t[e->nin + j]);
                enone = tfe_grad_none_all(e->nout, dy, dyf);
            }
            /* inputs that no source reaches need no gradient: the backward skips them */
            for (int i = 0; i < e->nin; i++) dx[i] = pmap_has(&reach, e->t[i]) ? NULL : TFE_GRAD_SKIP;
            /* outputs nobody used get zeros (made only now that they are needed) */
            for (int j = 0; j < e->nout && !fail; j++) {
                if (dy[j] || e->custom->totals) continue; /* it takes NULL: none */
                if (!(dy[j] = tfe_filled_like(e->t[e->nin + j], 0.0))) fail = true;
                else made[j] = true;
            }
            /* a custom entry adds its contributions to an input's gradient so
             * far itself, one by one in the order the ops it stands for would
             * (bit for bit an eager tape's sums); it returns the total. Only
             * at an input's first place: a tensor passed twice gets the rest
             * as usual. */
            bool totb[64], *total = e->nin <= 64 ? totb : xmalloc(sizeof *total * (size_t)e->nin);
            for (int i = 0; i < e->nin; i++) {
                total[i] = e->custom->totals && dx[i] == NULL && cal_find(&ca, canon(&al, e->t[i])) < 0;
                for (int j = 0; j < i && total[i]; j++) total[i] = canon(&al, e->t[j]) != canon(&al, e->t[i]);
                if (total[i] && !fail) dx[i] = pmap_get(&gmap, canon(&al, e->t[i])); /* borrowed */
                if (total[i] && dxfin) dxfin[i] = pmap_get(&flags, canon(&al, e->t[i]));
            }
            /* an input that is, under a traced bool c, a tensor x (a loop's
             * result that is its initial value where it ran zero times),
             * with a gradient so far (what reached it after the entry): where
             * c does not hold it is a tensor of its own, whose uses in the
             * entry add to that running sum in the order they come, so it
             * gets that sum as a total too (the sweep keeps its old value
             * where c holds, and merge_pick gives x's there). Only where the
             * merge below runs (one alias, x no other input without a total,
             * no other input aliased to x): else as before, a part added
             * after, which differed from eager's in the last bit. */
            bool ctotb[64], *ctot = e->nin <= 64 ? ctotb : xmalloc(sizeof *ctot * (size_t)e->nin);
            tfe_tensor *ctc[64] = {NULL}, **ctcv = e->nin <= 64 ? ctc : xcalloc((size_t)e->nin, sizeof *ctcv);
            for (int i = 0; i < e->nin; i++) {
                const tfe_tensor *key = canon(&al, e->t[i]);
                int r = cal_find(&ca, key);
                ctot[i] = !fail && e->custom->totals && e->custom->rerun && dx[i] == NULL && r >= 0 &&
                          pmap_get(&gmap, key) != NULL && pmap_get(&gmap, ca.x[r]) != NULL; /* (merge_pick keeps x's none) */
                for (int r2 = r + 1; ctot[i] && r2 < ca.n; r2++) ctot[i] = ca.y[r2] != key;
                for (int k2 = 0; k2 < e->nin && ctot[i]; k2++) {
                    const tfe_tensor *k2key = canon(&al, e->t[k2]);
                    if (k2 == i) continue;
                    if (k2key == key) ctot[i] = false;
                    else if (k2key == ca.x[r] && !total[k2]) ctot[i] = false;
                    else if (cal_find(&ca, k2key) >= 0)
                        for (int r2 = 0; r2 < ca.n; r2++)
                            if (ca.y[r2] == k2key && ca.x[r2] == ca.x[r]) ctot[i] = false;
                }
                if (ctot[i] && key != e->t[i]) ctot[i] = false; /* (the merge takes such places only) */
                if (!ctot[i]) continue;
                ctcv[i] = ca.c[r];
                dx[i] = pmap_get(&gmap, key); /* borrowed */
                if (dxfin) dxfin[i] = pmap_get(&flags, key);
            }
            e->custom->dy_none = dyf;
            e->custom->dx_none_in = dxfin;
            e->custom->dx_none = dxf;
            /* an input this sweep sums under another's key (a traced if's
             * result that is a value from outside it, b = x, in the call
             * that traces) is that tensor to the backward too, so that it
             * sums the uses of both into one gradient as eager code does */
            tfe_tensor *cinb[64], **cin = e->t;
            for (int i = 0; i < e->nin && al.n && cin == e->t; i++)
                if (canon(&al, e->t[i]) != e->t[i]) {
                    cin = e->nin <= 64 ? cinb : xmalloc(sizeof *cin * (size_t)e->nin);
                    for (int j = 0; j < e->nin; j++) cin[j] = (tfe_tensor *)canon(&al, e->t[j]);
                }
            /* an input that is, under a traced bool, a tensor x that is
             * another input with a total, or no input (tfe_tape_cond_alias):
             * the backward runs again with the one tensor in those places,
             * from x's gradient so far, picked where the bool holds
             * (merge_pick), once per such x */
            MergeGroup *mg = NULL;
            int nmg = 0;
            for (int j = 0; j < e->nin && ca.n && !fail && e->custom->totals && e->custom->rerun; j++) {
                if (dx[j] == TFE_GRAD_SKIP || total[j] || e->t[j] != cin[j]) continue;
                for (int r = 0; r < ca.n; r++) {
                    if (ca.y[r] != canon(&al, e->t[j])) continue;
                    int xi = -1;
                    bool other = false; /* (x an input with no total: as before) */
                    for (int k2 = 0; k2 < e->nin; k2++)
                        if (canon(&al, e->t[k2]) == ca.x[r]) {
                            if (total[k2] && e->t[k2] == cin[k2] && xi < 0) xi = k2;
                            else if (!total[k2] && k2 != j) other = true;
                        }
                    if (other) continue;
                    int g = 0;
                    while (g < nmg && mg[g].key != ca.x[r]) g++;
                    if (g == nmg) {
                        mg = xrealloc(mg, sizeof *mg * (size_t)(nmg + 1));
                        tfe_tensor *old = pmap_get(&gmap, ca.x[r]), *of = pmap_get(&flags, ca.x[r]);
                        mg[nmg++] = (MergeGroup){ca.x[r], ca.y[r], false, xi,
                                                 xcalloc((size_t)e->nin, sizeof(bool)), NULL,
                                                 old ? (tensor_incref(old), old) : NULL,
                                                 of ? (tensor_incref(of), of) : NULL};
                    }
                    mg[g].mixed |= mg[g].y != ca.y[r];
                    mg[g].in_grp[j] = true;
                    tfe_tensor *c2 = mg[g].c ? tfe_binary(OP_LOGICAL_OR, mg[g].c, ca.c[r])
                                             : (tensor_incref(ca.c[r]), ca.c[r]);
                    if (mg[g].c) tensor_decref(mg[g].c);
                    if (!(mg[g].c = c2)) fail = true;
                }
            }
            int64_t pt0 = prof_recording ? prof_now() : 0;
            if (!fail && e->custom->backward(e->custom, e->nin, cin, e->nout, e->t + e->nin, dy, dx))
                fail = true;
            if (pt0) prof_complete(PROF_BWD, "backward staged call", pt0, NULL, -1, -1);
            e->custom->dy_none = NULL;
            e->custom->dx_none_in = NULL;
            e->custom->dx_none = NULL;
            /* the totals first: a total replaces its tensor's gradient so
             * far, which another input's part may add to (an input that is
             * that tensor where a traced bool says so: tfe_tape_cond_alias) */
            for (int q = 0; q < 2 * e->nin; q++) {
                int i = q % e->nin;
                if ((total[i] || ctot[i]) != (q < e->nin)) continue;
                if (dx[i] == TFE_GRAD_SKIP) dx[i] = NULL;
                /* dx[i]'s flag: the backward's, or, where it does not say,
                 * where all outputs' are none */
                tfe_tensor *fi = dxf[i];
                dxf[i] = NULL;
                if (!fi && enone && !total[i] && dx[i] && !fail) {
                    tfe_tensor *m = tfe_grad_flag_fill(enone, dx[i], -0.0);
                    tensor_decref(dx[i]);
                    if (!(dx[i] = m)) fail = true;
                    else fi = (tensor_incref(enone), enone);
                }
                if (!dx[i] || fail || !pmap_has(&reach, e->t[i])) {
                    if (fi) tensor_decref(fi);
                    if (dx[i] && (fail || !pmap_has(&reach, e->t[i]))) {
                        tensor_decref(dx[i]);
                        dx[i] = NULL;
                    }
                    continue;
                }
                if (tfe_grad_place(&dx[i], e->t[i])) {
                    if (fi) tensor_decref(fi);
                    fail = true;
                    continue;
                }
                if (ctot[i]) { /* (where c does not hold; the old one where it does) */
                    const tfe_tensor *key = canon(&al, e->t[i]);
                    tfe_tensor *old = pmap_get(&gmap, key), *oldf = pmap_get(&flags, key);
                    tfe_tensor *notc = tfe_call1(OP_LOGICAL_NOT, 1, &ctcv[i], NULL);
                    tfe_tensor *in[3] = {notc, dx[i], old};
                    tfe_tensor *r = notc && old ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
                    tfe_tensor *f = r && (fi || oldf) ? cflag_where(notc, fi, oldf) : NULL;
                    if (notc) tensor_decref(notc);
                    tensor_decref(dx[i]);
                    dx[i] = NULL;
                    if (!r || ((fi || oldf) && !f)) {
                        if (r) tensor_decref(r);
                        if (fi) tensor_decref(fi);
                        fail = true;
                        continue;
                    }
                    size_t s = pmap_put(&gmap, key, true);
                    if (gmap.vals[s]) tensor_decref(gmap.vals[s]);
                    gmap.vals[s] = r;
                    flag_set(&flags, key, f);
                } else if (total[i]) { /* the whole gradient so far: it replaces the old one */
                    size_t s = pmap_put(&gmap, canon(&al, e->t[i]), true);
                    if (gmap.vals[s]) tensor_decref(gmap.vals[s]);
                    gmap.vals[s] = dx[i];
                    flag_set(&flags, canon(&al, e->t[i]), fi);
                    fi = NULL;
                } else if (accumulate_c(&gmap, &flags, &ca, canon(&al, e->t[i]), dx[i], fi)) fail = true;
                if (fi) tensor_decref(fi);
            }
            for (int g = 0; g < nmg; g++) {
                if (!fail && !mg[g].mixed && merge_pick(e, cin, dy, dyf, enone, &mg[g], &gmap, &flags)) fail = true;
                if (mg[g].c) tensor_decref(mg[g].c);
                if (mg[g].oldg) tensor_decref(mg[g].oldg);
                if (mg[g].oldf) tensor_decref(mg[g].oldf);
                free(mg[g].in_grp);
            }
            free(mg);
            if (cin != e->t && cin != cinb) free(cin);
            for (int j = 0; j < e->nout; j++)
                if (made[j]) tensor_decref(dy[j]);
            for (int i = 0; i < e->nin; i++)
                if (dxf[i]) tensor_decref(dxf[i]);
            free(dyf);
            free(dxf);
            free(dxfin);
            if (enone) tensor_decref(enone);
            if (dx != dxbuf) free(dx);
            if (total != totb) free(total);
            if (ctot != ctotb) free(ctot);
            if (ctcv != ctc) free(ctcv);
            if (fail) goto out;
        }
        /* Every consumer of these outputs came later and is done: their
         * gradients are final, and only the sources' are still wanted. */
        for (int j = 0; j < e->nout; j++) {
            const tfe_tensor *y = e->t[e->nin + j];
            if (pmap_has(&srcset, y)) continue;
            size_t s = pmap_slot(&gmap, y);
            if (gmap.keys[s] == y && gmap.vals[s]) {
                if (t->keep_view) view_keep(t, y, gmap.vals[s]);
                tensor_decref(gmap.vals[s]);
                gmap.vals[s] = NULL;
            }
            flag_set(&flags, y, NULL);
        }
        /* A tape that answers one call frees its activations as it goes. */
        if (!t->persistent && !t->keep_view) { /* (keep: persistent for this call) */
            entry_free(e);
            t->entries[k] = NULL;
        }
    }
    for (int i = 0; i < n; i++) {
        tfe_tensor *g = pmap_get(&gmap, canon(&al, sources[i])), *f = pmap_get(&flags, canon(&al, sources[i]));
        if (g && f) g = tfe_grad_flag_fill(f, g, 0.0); /* none: zeros, as for a source nothing reached */
        else if (g) tensor_incref(g);
        else g = tfe_filled_like(sources[i], 0.0);
        if (!g) goto out;
        grads[i] = g;
    }
    /* what is left (the sources' and other leaves') for the picture */
    for (size_t i = 0; t->keep_view && i < gmap.cap; i++)
        if (gmap.keys[i] && gmap.vals[i]) view_keep(t, gmap.keys[i], gmap.vals[i]);
    rc = 0;
out:
    if (rc)
        for (int i = 0; i < n; i++) {
            if (grads[i]) tensor_decref(grads[i]);
            grads[i] = NULL;
        }
    free(needed);
    pmap_free(&reach);
    pmap_free(&srcset);
    pmap_free(&gmap);
    pmap_free(&flags);
    pmap_free(&al);
    for (int i = 0; i < nalkeys; i++) tensor_decref(alkeys[i]);
    for (int i = 0; i < ca.n; i++) {
        tensor_decref((tfe_tensor *)ca.y[i]);
        tensor_decref(ca.c[i]);
    }
    free(ca.y);
    free(ca.x);
    free(ca.c);
    free(alkeys);
    t->computing = false;
    t->persistent = was_persistent;
    if (!t->persistent && !keep) {
        t->spent = true;
        if (!t->keep_view) tape_clear(t);
    }
    return rc;
}

void tfe_tape_keep_view(tfe_tape *t, bool on) { t->keep_view = on; }

bool tfe_tape_entry(const tfe_tape *t, int k, tfe_op *op, bool *custom, int *nin, int *nout,
                    tfe_tensor *const **ts) {
    if (k < 0 || k >= t->nentries || !t->entries[k]) return false;
    const entry *e = t->entries[k];
    *op = e->op;
    *custom = e->custom != NULL;
    *nin = e->nin;
    *nout = e->nout;
    *ts = e->t;
    return true;
}

tfe_tensor *tfe_tape_view_grad(const tfe_tape *t, const tfe_tensor *x) { return pmap_get(&t->view_grads, x); }
