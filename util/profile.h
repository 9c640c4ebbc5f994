/* profile.h — the profiler's recorder (docs/profiling.md): timed events in
 * per-thread buffers, taken out as a snapshot and written as a Chrome trace
 * or averaged into rows. Below every layer (dist/ records its collectives),
 * so it knows nothing of tensors: callers hand it names and detail text. */
#ifndef TFE_UTIL_PROFILE_H
#define TFE_UTIL_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What an event is; also the "cat" of the trace file (prof_cat_name). */
enum {
    PROF_OP,      /* an eager op (tensor/dispatch.c): detail = input shapes */
    PROF_STAGED,  /* a staged call: a trace (detail = its reason) or a cached run */
    PROF_PLAN,    /* an instruction of a planned run (graph/exec.c) */
    PROF_FUSED,   /* a fused group: detail = its ops */
    PROF_BWD,     /* one backward op of a tape sweep (tensor/tape.c) */
    PROF_HOST,    /* a host call from staged code */
    PROF_CKPT,    /* checkpoint I/O: detail = the path */
    PROF_COLL,    /* a collective (dist/) */
    PROF_POOL,    /* a chunk of thread-pool work (tensor/thread.c) */
    PROF_COUNTER, /* a counter sample ("C"): bytes = the value */
    PROF_NCATS
};

typedef struct ProfEvent {
    const char *name;   /* static or prof_intern'ed */
    const char *detail; /* NULL, or text owned by the buffer (or the snapshot) */
    int64_t ts, dur;    /* in a buffer: ticks (prof_now); in a snapshot: ns */
    int64_t bytes;      /* bytes allocated during it, moved, or the counter's value; -1: none */
    int tid;            /* 0: the main thread; 1, 2, ...: other threads in order of first event */
    int16_t device;     /* the device's number (tfe_device_name), -1: none */
    uint8_t cat;
} ProfEvent;

/* Nonzero while something listens: a profile records (prof_recording) or
 * $TFE_DEBUG asks for per-op lines (level >= 2). The one branch the hot
 * paths take when nothing listens. */
extern int prof_hooked;
extern int prof_recording;
/* $TFE_DEBUG (0 when unset), read by prof_init; $TFE_DEBUG_NOTIME=1 prints
 * every time as "-" (for goldens). */
extern int prof_debug;
extern int prof_debug_notime;

void prof_init(void);             /* reads the environment; idempotent */
/* A time stamp in ticks (the TSC on x86, else ns of CLOCK_MONOTONIC): what
 * the recording functions take; prof_ns turns a difference into ns.
 * Snapshots hold ns. */
int64_t prof_now(void);
int64_t prof_ns(int64_t dticks);
const char *prof_intern(const char *s); /* a copy kept for the process */

/* A complete event from t0 to now on the calling thread. */
void prof_complete(int cat, const char *name, int64_t t0, const char *detail, int64_t bytes, int device);
/* The same from t0 to now, a time stamp the caller read. */
void prof_complete_at(int cat, const char *name, int64_t t0, int64_t now, const char *detail, int64_t bytes,
                      int device);
/* A counter sample at now (only when it changed since the last sample). */
void prof_counter(const char *name, int64_t value);
void prof_counter_at(const char *name, int64_t value, int64_t at);
/* Names the calling thread in the trace ("pool worker 1"). */
void prof_thread_name(const char *name);

/* Recording sessions nest: the first start turns recording on, the last
 * stop turns it off and drops the buffers. A session's events are those
 * that ended within it, copied out by prof_stop. */
typedef struct ProfSnapshot {
    ProfEvent *ev;
    size_t n;
    int64_t t0, t1;     /* the session's window (ns) */
    char **thread_names; /* by tid */
    int nthreads;
    char *text;          /* the details' bytes (a copy), or NULL */
    struct TextBlock *blocks; /* or the recorder's own blocks, taken over by the last session */
} ProfSnapshot;

int64_t prof_start(void);
void prof_stop(int64_t t0, ProfSnapshot *out);
void prof_snapshot_free(ProfSnapshot *s);

/* The Chrome trace event format (JSON): "X" events, "C" counters, "M"
 * thread names; written to path.tmp then renamed. 0, or -1 with errno. */
int prof_write_chrome(const ProfSnapshot *s, const char *path, const char *(*device_name)(int, char *, size_t));

/* Key averages: events (counters and pool chunks left out) grouped by name,
 * or by name and detail (by_detail), with total and self time (self: less
 * the direct children on the same thread). */
typedef struct ProfRow {
    const char *name, *detail; /* detail: NULL unless by_detail */
    int cat;
    int64_t calls, total, self; /* ns */
} ProfRow;
/* sort: "total", "self", "calls", "mean" or "name"; rows are malloc'd. */
ProfRow *prof_rows(const ProfSnapshot *s, bool by_detail, const char *sort, size_t *n);
const char *prof_cat_name(int cat);

/* A time for TFE_DEBUG lines: "1.234ms", or "-" under TFE_DEBUG_NOTIME. */
const char *prof_debug_time(int64_t ns, char *buf, size_t n);

#endif
