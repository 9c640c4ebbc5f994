/* profile.c — the profiler's recorder: per-thread event buffers (no lock on
 * the recording path), sessions, snapshots, the Chrome trace writer and the
 * key averages. */
#include "util/profile.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/atomic_file.h"
#include "util/buf.h"
#include "util/xalloc.h"

int prof_hooked, prof_recording, prof_debug, prof_debug_notime;

/* A thread's events and their detail text (in blocks that never move, so
 * an event's detail pointer stays good while the buffer grows). */
typedef struct TextBlock { struct TextBlock *next; size_t used, cap; char data[]; } TextBlock;
typedef struct PThread {
    int tid;
    char *name;
    ProfEvent *ev;
    size_t n, cap;
    TextBlock *text;
    int64_t last_counter;
} PThread;

static __thread PThread *me;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static PThread **threads;
static int nthreads;
static int sessions;

static int64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Events are stamped with the CPU's time-stamp counter where there is one
 * (x86: an invariant TSC, one instruction, where clock_gettime cost ~60 ns a
 * call on the machines measured), converted to nanoseconds when a session
 * ends, by the rate between the process's first clock reading and that
 * moment: a linear map, so order and nesting are kept exactly. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline int64_t ticks(void) { return (int64_t)__rdtsc(); }
#else
static inline int64_t ticks(void) { return clock_ns(); }
#endif

static int64_t tick0, ns0; /* the calibration's first pair (prof_init) */

static void calibrate0(void)
{
    if (tick0) return;
    ns0 = clock_ns();
    tick0 = ticks();
}

int64_t prof_now(void) { return ticks(); }

/* ns per tick since the first pair, read now. */
static double tick_rate(void)
{
    int64_t t = ticks(), n = clock_ns();
    if (t <= tick0 || n <= ns0) return 1.0;
    return (double)(n - ns0) / (double)(t - tick0);
}

int64_t prof_ns(int64_t dticks) { return (int64_t)((double)dticks * tick_rate()); }

void prof_init(void)
{
    static int done;
    if (done) return;
    done = 1;
    calibrate0();
    const char *d = getenv("TFE_DEBUG");
    prof_debug = d ? atoi(d) : 0;
    const char *nt = getenv("TFE_DEBUG_NOTIME");
    prof_debug_notime = nt && *nt && strcmp(nt, "0") != 0;
    prof_hooked = prof_recording || prof_debug >= 2;
}

/* Interned names: a small open hash, only ever grown (names are few: ops,
 * functions, fused groups). */
static char **names;
static size_t nnames, capnames;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

const char *prof_intern(const char *s)
{
    pthread_mutex_lock(&mu);
    if (2 * (nnames + 1) > capnames) {
        size_t nc = capnames ? 2 * capnames : 256;
        char **nn = xcalloc(nc, sizeof *nn);
        for (size_t i = 0; i < capnames; i++) {
            if (!names[i]) continue;
            size_t j = hash_str(names[i]) & (nc - 1);
            while (nn[j]) j = (j + 1) & (nc - 1);
            nn[j] = names[i];
        }
        free(names);
        names = nn;
        capnames = nc;
    }
    size_t j = hash_str(s) & (capnames - 1);
    while (names[j] && strcmp(names[j], s) != 0) j = (j + 1) & (capnames - 1);
    if (!names[j]) {
        names[j] = xstrdup(s);
        nnames++;
    }
    const char *r = names[j];
    pthread_mutex_unlock(&mu);
    return r;
}

static PThread *self_thread(void)
{
    if (me) return me;
    PThread *t = xcalloc(1, sizeof *t);
    t->last_counter = -1;
    pthread_mutex_lock(&mu);
    t->tid = nthreads;
    threads = xrealloc(threads, sizeof *threads * (size_t)(nthreads + 1));
    threads[nthreads++] = t;
    pthread_mutex_unlock(&mu);
    char buf[32];
    snprintf(buf, sizeof buf, t->tid ? "thread %d" : "main", t->tid);
    t->name = xstrdup(buf);
    me = t;
    return t;
}

void prof_thread_name(const char *name)
{
    PThread *t = self_thread();
    free(t->name);
    t->name = xstrdup(name);
}

static const char *keep_text(PThread *t, const char *s)
{
    size_t n = strlen(s) + 1;
    TextBlock *b = t->text;
    if (!b || b->used + n > b->cap) {
        size_t cap = n > 65536 ? n : 65536;
        b = xmalloc(sizeof *b + cap);
        b->next = t->text;
        b->used = 0;
        b->cap = cap;
        t->text = b;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    b->used += n;
    return p;
}

static ProfEvent *push(PThread *t)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 4096;
        t->ev = xrealloc(t->ev, sizeof *t->ev * t->cap);
    }
    return &t->ev[t->n++];
}

void prof_complete(int cat, const char *name, int64_t t0, const char *detail, int64_t bytes, int device)
{
    prof_complete_at(cat, name, t0, ticks(), detail, bytes, device);
}

void prof_complete_at(int cat, const char *name, int64_t t0, int64_t now, const char *detail, int64_t bytes,
                      int device)
{
    if (!__atomic_load_n(&prof_recording, __ATOMIC_RELAXED)) return;
    PThread *t = self_thread();
    ProfEvent *e = push(t);
    e->name = name;
    e->detail = detail && *detail ? keep_text(t, detail) : NULL;
    e->ts = t0;
    e->dur = now - t0;
    e->bytes = bytes;
    e->tid = t->tid;
    e->device = (int16_t)device;
    e->cat = (uint8_t)cat;
}

void prof_counter(const char *name, int64_t value) { prof_counter_at(name, value, ticks()); }

void prof_counter_at(const char *name, int64_t value, int64_t at)
{
    if (!prof_recording) return;
    PThread *t = self_thread();
    if (t->last_counter == value) return;
    t->last_counter = value;
    ProfEvent *e = push(t);
    *e = (ProfEvent){.name = name, .ts = at, .bytes = value, .tid = t->tid, .device = -1, .cat = PROF_COUNTER};
}

int64_t prof_start(void)
{
    prof_init();
    calibrate0();
    self_thread(); /* the thread that records sessions is the first: tid 0, "main" */
    if (sessions++ == 0) {
        __atomic_store_n(&prof_recording, 1, __ATOMIC_RELAXED);
        prof_hooked = 1;
    }
    me->last_counter = -1; /* a fresh first sample */
    return ticks();
}

static void clear_buffers(void)
{
    for (int i = 0; i < nthreads; i++) {
        PThread *t = threads[i];
        t->n = 0;
        t->last_counter = -1;
        while (t->text) {
            TextBlock *b = t->text;
            t->text = b->next;
            free(b);
        }
    }
}

void prof_stop(int64_t t0, ProfSnapshot *s)
{
    int64_t t1 = ticks();
    double rate = tick_rate();
#define TO_NS(x) ((int64_t)((double)((x) - tick0) * rate))
    memset(s, 0, sizeof *s);
    s->t0 = TO_NS(t0);
    s->t1 = TO_NS(t1);
    /* the threads stay registered; only pool workers other than this one
     * record, and they are idle between parallel loops */
    size_t n = 0, text = 0;
    if (sessions == 1) {
        /* the last session: it takes the buffers (no copy), the main
         * thread's events first, the others' appended; the text blocks go
         * with them */
        PThread *m = threads[0];
        size_t total = 0;
        for (int i = 0; i < nthreads; i++) total += threads[i]->n;
        if (total > m->cap) {
            m->ev = xrealloc(m->ev, sizeof *m->ev * total);
            m->cap = total;
        }
        for (int i = 1; i < nthreads; i++) {
            PThread *t = threads[i];
            memcpy(m->ev + m->n, t->ev, sizeof *t->ev * t->n);
            m->n += t->n;
            t->n = 0;
        }
        for (size_t k = 0; k < m->n; k++) {
            ProfEvent e = m->ev[k];
            if (e.ts < t0 || e.ts + e.dur > t1) continue;
            /* from ticks to ns: both ends mapped, so a child stays inside its parent */
            int64_t a = TO_NS(e.ts), b = TO_NS(e.ts + e.dur);
            e.ts = a;
            e.dur = b - a;
            m->ev[n++] = e;
        }
        if (m->ev) s->ev = m->ev;
        else s->ev = xmalloc(sizeof *s->ev);
        m->ev = NULL;
        m->n = m->cap = 0;
        for (int i = 0; i < nthreads; i++) {
            PThread *t = threads[i];
            while (t->text) {
                TextBlock *b = t->text;
                t->text = b->next;
                b->next = s->blocks;
                s->blocks = b;
            }
        }
        s->text = NULL;
    } else {
        for (int i = 0; i < nthreads; i++)
            for (size_t k = 0; k < threads[i]->n; k++) {
                const ProfEvent *e = &threads[i]->ev[k];
                if (e->ts < t0 || e->ts + e->dur > t1) continue;
                n++;
                if (e->detail) text += strlen(e->detail) + 1;
            }
        s->ev = xmalloc(sizeof *s->ev * (n ? n : 1));
        s->text = xmalloc(text ? text : 1);
        size_t j = 0, off = 0;
        for (int i = 0; i < nthreads; i++)
            for (size_t k = 0; k < threads[i]->n; k++) {
                const ProfEvent *e = &threads[i]->ev[k];
                if (e->ts < t0 || e->ts + e->dur > t1) continue;
                s->ev[j] = *e;
                s->ev[j].ts = TO_NS(e->ts);
                s->ev[j].dur = TO_NS(e->ts + e->dur) - s->ev[j].ts;
                if (e->detail) {
                    size_t m = strlen(e->detail) + 1;
                    memcpy(s->text + off, e->detail, m);
                    s->ev[j].detail = s->text + off;
                    off += m;
                }
                j++;
            }
    }
#undef TO_NS
    s->n = n;
    s->nthreads = nthreads;
    s->thread_names = xcalloc((size_t)(nthreads ? nthreads : 1), sizeof *s->thread_names);
    for (int i = 0; i < nthreads; i++) s->thread_names[i] = xstrdup(threads[i]->name);
    if (sessions > 0 && --sessions == 0) {
        __atomic_store_n(&prof_recording, 0, __ATOMIC_RELAXED);
        prof_hooked = prof_debug >= 2;
        clear_buffers();
    }
}

void prof_snapshot_free(ProfSnapshot *s)
{
    free(s->ev);
    free(s->text);
    while (s->blocks) {
        TextBlock *b = s->blocks;
        s->blocks = b->next;
        free(b);
    }
    for (int i = 0; i < s->nthreads; i++) free(s->thread_names[i]);
    free(s->thread_names);
    memset(s, 0, sizeof *s);
}

const char *prof_cat_name(int cat)
{
    static const char *const n[PROF_NCATS] = {"op", "staged", "plan", "fused", "backward", "host",
                                              "checkpoint", "collective", "pool", "counter"};
    return cat >= 0 && cat < PROF_NCATS ? n[cat] : "?";
}

/* The key an event's detail has in the trace's args. */
static const char *detail_key(int cat)
{
    switch (cat) {
    case PROF_OP: case PROF_PLAN: case PROF_BWD: case PROF_FUSED: return "inputs";
    case PROF_STAGED: return "reason";
    case PROF_CKPT: return "path";
    default: return "detail";
    }
}

/* Events of a thread in the order they begin; a parent (longer) before a
 * child that begins at the same time. */
static const ProfEvent *sort_base;
static int by_start(const void *a, const void *b)
{
    const ProfEvent *x = &sort_base[*(const size_t *)a], *y = &sort_base[*(const size_t *)b];
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1;
    return a < b ? -1 : a > b;
}

static size_t *sorted_index(const ProfSnapshot *s)
{
    size_t *ix = xmalloc(sizeof *ix * (s->n ? s->n : 1));
    for (size_t i = 0; i < s->n; i++) ix[i] = i;
    sort_base = s->ev;
    qsort(ix, s->n, sizeof *ix, by_start);
    return ix;
}

/* The writer builds the file in memory with its own formatting (fprintf
 * per field cost ~1.5 us an event), then writes it at once. */
static void put_str(Buf *b, const char *s)
{
    buf_grow(b, 2 * strlen(s) + 8);
    char *p = b->s + b->len;
    *p++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') *p++ = '\\', *p++ = (char)c;
        else if (c == '\n') *p++ = '\\', *p++ = 'n';
        else if (c < 0x20) *p++ = ' ';
        else *p++ = (char)c;
    }
    *p++ = '"';
    *p = 0;
    b->len = (size_t)(p - b->s);
}

static void put_int(Buf *b, int64_t v)
{
    char tmp[24];
    int n = 0;
    bool neg = v < 0;
    uint64_t u = neg ? 0 - (uint64_t)v : (uint64_t)v;
    do tmp[n++] = (char)('0' + u % 10); while ((u /= 10) > 0);
    buf_grow(b, 24);
    if (neg) b->s[b->len++] = '-';
    while (n) b->s[b->len++] = tmp[--n];
    b->s[b->len] = 0;
}

/* ns as microseconds with three decimals: exact, so nesting survives the
 * printing. */
static void put_us(Buf *b, int64_t ns)
{
    if (ns < 0) ns = 0;
    put_int(b, ns / 1000);
    char f[5] = {'.', (char)('0' + ns % 1000 / 100), (char)('0' + ns % 100 / 10), (char)('0' + ns % 10), 0};
    buf_add(b, f, 4);
}

int prof_write_chrome(const ProfSnapshot *s, const char *path, const char *(*device_name)(int, char *, size_t))
{
    Buf b = {0};
    buf_grow(&b, s->n * 160 + 1024);
    buf_puts(&b, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    buf_puts(&b, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"tfe\"}}");
    for (int i = 0; i < s->nthreads; i++) {
        buf_puts(&b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":");
        put_int(&b, i);
        buf_puts(&b, ",\"args\":{\"name\":");
        put_str(&b, s->thread_names[i]);
        buf_puts(&b, "}}");
    }
    size_t *ix = sorted_index(s);
    const char *last_dev_name = NULL;
    int last_dev = -2;
    char devbuf[32];
    for (size_t k = 0; k < s->n; k++) {
        const ProfEvent *e = &s->ev[ix[k]];
        buf_puts(&b, ",\n{\"name\":");
        put_str(&b, e->name);
        if (e->cat == PROF_COUNTER) {
            buf_puts(&b, ",\"ph\":\"C\",\"ts\":");
            put_us(&b, e->ts - s->t0);
            buf_puts(&b, ",\"pid\":1,\"tid\":");
            put_int(&b, e->tid);
            buf_puts(&b, ",\"args\":{\"bytes\":");
            put_int(&b, e->bytes);
            buf_puts(&b, "}}");
            continue;
        }
        buf_puts(&b, ",\"cat\":\"");
        buf_puts(&b, prof_cat_name(e->cat));
        buf_puts(&b, "\",\"ph\":\"X\",\"ts\":");
        put_us(&b, e->ts - s->t0);
        buf_puts(&b, ",\"dur\":");
        put_us(&b, e->dur);
        buf_puts(&b, ",\"pid\":1,\"tid\":");
        put_int(&b, e->tid);
        buf_puts(&b, ",\"args\":{");
        const char *sep = "";
        if (e->detail) {
            buf_puts(&b, "\"");
            buf_puts(&b, detail_key(e->cat));
            buf_puts(&b, "\":");
            put_str(&b, e->detail);
            sep = ",";
        }
        if (e->device >= 0 && device_name) {
            if (e->device != last_dev) {
                last_dev = e->device;
                last_dev_name = device_name(e->device, devbuf, sizeof devbuf);
            }
            buf_puts(&b, sep);
            buf_puts(&b, "\"device\":");
            put_str(&b, last_dev_name);
            sep = ",";
        }
        if (e->bytes >= 0) {
            buf_puts(&b, sep);
            buf_puts(&b, "\"bytes\":");
            put_int(&b, e->bytes);
        }
        buf_puts(&b, "}}");
    }
    free(ix);
    buf_puts(&b, "\n]}\n");

    /* the one atomic writer (util/atomic_file.h): keeps the file's mode
     * and its symlinks, as every other file tfe writes */
    const void *parts[1] = {b.s};
    size_t sizes[1] = {b.len};
    char err[300];
    int rc = write_file_atomic(path, parts, sizes, 1, err, sizeof err);
    int e = errno;
    free(b.s);
    errno = e;
    return rc;
}

static const char *sort_key;
static int row_cmp(const void *a, const void *b)
{
    const ProfRow *x = a, *y = b;
    int64_t kx, ky;
    if (!strcmp(sort_key, "name")) {
        int c = strcmp(x->name, y->name);
        if (c) return c;
        return strcmp(x->detail ? x->detail : "", y->detail ? y->detail : "");
    }
    if (!strcmp(sort_key, "self")) kx = x->self, ky = y->self;
    else if (!strcmp(sort_key, "calls")) kx = x->calls, ky = y->calls;
    else if (!strcmp(sort_key, "mean")) kx = x->total / x->calls, ky = y->total / y->calls;
    else kx = x->total, ky = y->total;
    if (kx != ky) return kx > ky ? -1 : 1;
    int c = strcmp(x->name, y->name); /* ties: by name, so the order is stable */
    if (c) return c;
    return strcmp(x->detail ? x->detail : "", y->detail ? y->detail : "");
}

ProfRow *prof_rows(const ProfSnapshot *s, bool by_detail, const char *sort, size_t *nrows)
{
    /* self time: each event less its direct children on its thread */
    int64_t *self = xmalloc(sizeof *self * (s->n ? s->n : 1));
    size_t *ix = sorted_index(s), *stack = xmalloc(sizeof *stack * (s->n ? s->n : 1));
    size_t sp = 0;
    int tid = -1;
    for (size_t k = 0; k < s->n; k++) {
        const ProfEvent *e = &s->ev[ix[k]];
        if (e->cat == PROF_COUNTER) continue;
        self[ix[k]] = e->dur;
        if (e->tid != tid) sp = 0, tid = e->tid;
        while (sp) {
            const ProfEvent *p = &s->ev[stack[sp - 1]];
            if (e->ts >= p->ts && e->ts + e->dur <= p->ts + p->dur) break;
            sp--;
        }
        if (sp) self[stack[sp - 1]] -= e->dur;
        stack[sp++] = ix[k];
    }
    free(stack);
    /* group (a linear probe over the rows so far would be quadratic: hash) */
    size_t cap = 64, n = 0;
    ProfRow *rows = xmalloc(sizeof *rows * cap);
    size_t hcap = 1024;
    int64_t *slot = xmalloc(sizeof *slot * hcap);
    for (size_t i = 0; i < hcap; i++) slot[i] = -1;
    for (size_t k = 0; k < s->n; k++) {
        const ProfEvent *e = &s->ev[ix[k]];
        if (e->cat == PROF_COUNTER || e->cat == PROF_POOL) continue;
        const char *d = by_detail ? (e->detail ? e->detail : "") : NULL;
        uint64_t h = hash_str(e->name) * 31 + (d ? hash_str(d) : 0) + (uint64_t)e->cat;
        size_t j = h & (hcap - 1);
        while (slot[j] >= 0) {
            ProfRow *r = &rows[slot[j]];
            if (r->cat == e->cat && !strcmp(r->name, e->name) && (!d || !strcmp(r->detail, d))) break;
            j = (j + 1) & (hcap - 1);
        }
        if (slot[j] < 0) {
            if (n == cap) rows = xrealloc(rows, sizeof *rows * (cap *= 2));
            rows[n] = (ProfRow){.name = e->name, .detail = d, .cat = e->cat};
            slot[j] = (int64_t)n++;
            if (2 * n > hcap) { /* rehash */
                size_t nc = hcap * 2;
                int64_t *ns = xmalloc(sizeof *ns * nc);
                for (size_t i = 0; i < nc; i++) ns[i] = -1;
                for (size_t r = 0; r < n; r++) {
                    const ProfRow *rr = &rows[r];
                    uint64_t hh = hash_str(rr->name) * 31 + (rr->detail ? hash_str(rr->detail) : 0) + (uint64_t)rr->cat;
                    size_t q = hh & (nc - 1);
                    while (ns[q] >= 0) q = (q + 1) & (nc - 1);
                    ns[q] = (int64_t)r;
                }
                free(slot);
                slot = ns;
                hcap = nc;
                j = SIZE_MAX;
            }
        }
        ProfRow *r;
        if (j == SIZE_MAX) r = &rows[n - 1];
        else r = &rows[slot[j]];
        r->calls++;
        r->total += e->dur;
        r->self += self[ix[k]];
    }
    free(slot);
    free(ix);
    free(self);
    sort_key = sort ? sort : "total";
    qsort(rows, n, sizeof *rows, row_cmp);
    *nrows = n;
    return rows;
}

const char *prof_debug_time(int64_t ns, char *buf, size_t n)
{
    if (prof_debug_notime) return "-";
    snprintf(buf, n, "%.3fms", (double)ns / 1e6);
    return buf;
}
