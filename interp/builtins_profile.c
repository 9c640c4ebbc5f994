/* builtins_profile.c — profile(): `with profile() as p { ... }` records what
 * ran (util/profile.h), then p.save(path) writes a Chrome trace, p.table()
 * prints key averages and p.rows() returns them; TFE_PROFILE=PATH records
 * the whole program. docs/profiling.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "tensor/device.h"
#include "tensor/profile.h"
#include "util/buf.h"
#include "util/profile.h"
#include "util/xalloc.h"

typedef struct Profile {
    Object o;
    int state; /* 0: not started, 1: recording, 2: done */
    int64_t t0;
    ProfSnapshot snap;
} Profile;

static void profile_free(Obj *o)
{
    Profile *p = (Profile *)o;
    if (p->state == 1) { /* an error left the block without exit: stop anyway */
        ProfSnapshot s;
        prof_stop(p->t0, &s);
        prof_snapshot_free(&s);
    }
    prof_snapshot_free(&p->snap);
    free(o);
}

static char *profile_repr(Obj *o)
{
    Profile *p = (Profile *)o;
    char b[120];
    if (p->state == 2)
        snprintf(b, sizeof b, "<profile: %zu events, %.3f ms>", p->snap.n, (double)(p->snap.t1 - p->snap.t0) / 1e6);
    else
        snprintf(b, sizeof b, "<profile: %s>", p->state ? "recording" : "not started");
    return xstrdup(b);
}

static int profile_enter(Interp *I, Obj *o, Value *as)
{
    Profile *p = (Profile *)o;
    if (p->state) return interp_raise(I, "profile: a profile records once; make a new one with profile()");
    p->t0 = prof_start();
    tfe_prof_live_bytes(); /* the counter's first sample */
    p->state = 1;
    o->refcount++;
    *as = v_obj(V_OBJECT, o);
    return 0;
}

static int profile_exit(Interp *I, Obj *o, bool failed)
{
    (void)I;
    (void)failed;
    Profile *p = (Profile *)o;
    if (p->state == 1) {
        prof_stop(p->t0, &p->snap);
        p->state = 2;
    }
    return 0;
}

static const char *device_name(int dev, char *buf, size_t n) { return tfe_device_name(dev, buf, n); }

static Profile *done_profile(Interp *I, const Value *self, const char *fn)
{
    Profile *p = (Profile *)self->u.o;
    if (p->state != 2) {
        interp_raise(I, "%s: the profile has not finished: call it after the 'with profile()' block", fn);
        return NULL;
    }
    return p;
}

/* p.save(path): the Chrome trace event format (Perfetto, chrome://tracing). */
BUILTIN(bi_profile_save)
{
    (void)data;
    Value a[2];
    bool pr[2];
    if (args_parse(I, "save", "self, path", argc, argv, nkw, kwnames, kwvals, a, pr)) return -1;
    const char *path;
    if (arg_string(I, "save()", "path", a[1], &path)) return -1;
    Profile *p = done_profile(I, &a[0], "save()");
    if (!p) return -1;
    if (prof_write_chrome(&p->snap, path, device_name))
        return interp_raise(I, "save(): cannot write '%s': %s", path, strerror(errno));
    *out = v_nil();
    return 0;
}

/* Arguments shared by table() and rows(): sort, group (nil or "shape"). */
static int table_args(Interp *I, const char *fn, Value sort, Value group, const char **s, bool *by_shape)
{
    if (arg_opt_string(I, fn, "sort", sort, s)) return -1;
    if (!*s) *s = "total";
    if (strcmp(*s, "total") && strcmp(*s, "self") && strcmp(*s, "calls") && strcmp(*s, "mean") && strcmp(*s, "name"))
        return interp_raise(I, "%s: sort must be \"total\", \"self\", \"calls\", \"mean\" or \"name\", got \"%s\"", fn, *s);
    const char *g;
    if (arg_opt_string(I, fn, "group", group, &g)) return -1;
    if (g && strcmp(g, "shape") && strcmp(g, "op"))
        return interp_raise(I, "%s: group must be \"op\" or \"shape\", got \"%s\"", fn, g);
    *by_shape = g && !strcmp(g, "shape");
    return 0;
}

static double ms(int64_t ns) { return (double)ns / 1e6; }

/* p.table(sort="total", top=20, group="op"): prints the key averages. */
BUILTIN(bi_profile_table)
{
    (void)data;
    Value a[4];
    bool pr[4];
    if (args_parse(I, "table", "self, sort=, top=, group=", argc, argv, nkw, kwnames, kwvals, a, pr)) return -1;
    Profile *p = done_profile(I, &a[0], "table()");
    if (!p) return -1;
    const char *sort;
    bool by_shape;
    if (table_args(I, "table()", a[1], a[3], &sort, &by_shape)) return -1;
    int64_t top = 20;
    if (pr[2] && a[2].kind != V_NIL && arg_int(I, "table()", "top", a[2], &top)) return -1;
    size_t n;
    ProfRow *rows = prof_rows(&p->snap, by_shape, sort, &n);
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    int namew = 4, shapew = 6;
    for (size_t i = 0; i < shown; i++) {
        int l = (int)strlen(rows[i].name);
        if (l > namew) namew = l;
        if (by_shape && rows[i].detail && (int)strlen(rows[i].detail) > shapew) shapew = (int)strlen(rows[i].detail);
    }
    if (namew > 48) namew = 48;
    if (shapew > 60) shapew = 60;
    int64_t run = p->snap.t1 - p->snap.t0;
    Buf b = {0};
    char line[512];
    snprintf(line, sizeof line, "%-*s  ", namew, "name");
    buf_puts(&b, line);
    if (by_shape) {
        snprintf(line, sizeof line, "%-*s  ", shapew, "inputs");
        buf_puts(&b, line);
    }
    snprintf(line, sizeof line, "%-10s  %8s  %12s  %12s  %12s  %7s\n", "kind", "calls", "total ms", "self ms", "mean ms",
             "% run");
    buf_puts(&b, line);
    int width = namew + 2 + (by_shape ? shapew + 2 : 0) + 10 + 2 + 8 + 3 * 14 + 9;
    for (int i = 0; i < width; i++) buf_puts(&b, "-");
    buf_puts(&b, "\n");
    for (size_t i = 0; i < shown; i++) {
        const ProfRow *r = &rows[i];
        snprintf(line, sizeof line, "%-*.*s  ", namew, namew, r->name);
        buf_puts(&b, line);
        if (by_shape) {
            snprintf(line, sizeof line, "%-*.*s  ", shapew, shapew, r->detail ? r->detail : "");
            buf_puts(&b, line);
        }
        snprintf(line, sizeof line, "%-10s  %8lld  %12.3f  %12.3f  %12.4f  %6.1f%%\n", prof_cat_name(r->cat),
                 (long long)r->calls, ms(r->total), ms(r->self), ms(r->total) / (double)r->calls,
                 run > 0 ? 100.0 * (double)r->total / (double)run : 0.0);
        buf_puts(&b, line);
    }
    snprintf(line, sizeof line, "%zu of %zu rows; run %.3f ms\n", shown, n, ms(run));
    buf_puts(&b, line);
    fwrite(b.s, 1, b.len, stdout);
    if (I->repl) fflush(stdout);
    free(b.s);
    free(rows);
    *out = v_nil();
    return 0;
}

static void set_field(Record *r, const char *k, Value v) { record_set_take(r, k, strlen(k), v); }

/* p.rows(sort="total", group="op"): the table's rows as records. */
BUILTIN(bi_profile_rows)
{
    (void)data;
    Value a[3];
    bool pr[3];
    if (args_parse(I, "rows", "self, sort=, group=", argc, argv, nkw, kwnames, kwvals, a, pr)) return -1;
    Profile *p = done_profile(I, &a[0], "rows()");
    if (!p) return -1;
    const char *sort;
    bool by_shape;
    if (table_args(I, "rows()", a[1], a[2], &sort, &by_shape)) return -1;
    size_t n;
    ProfRow *rows = prof_rows(&p->snap, by_shape, sort, &n);
    int64_t run = p->snap.t1 - p->snap.t0;
    Seq *list = seq_new((int)n);
    for (size_t i = 0; i < n; i++) {
        const ProfRow *r = &rows[i];
        Record *rec = record_new();
        set_field(rec, "name", v_cstr(r->name));
        set_field(rec, "kind", v_cstr(prof_cat_name(r->cat)));
        if (by_shape) set_field(rec, "inputs", v_cstr(r->detail ? r->detail : ""));
        set_field(rec, "calls", v_int(r->calls));
        set_field(rec, "total_ms", v_float(ms(r->total), TFE_FLOAT64));
        set_field(rec, "self_ms", v_float(ms(r->self), TFE_FLOAT64));
        set_field(rec, "mean_ms", v_float(ms(r->total) / (double)r->calls, TFE_FLOAT64));
        set_field(rec, "percent", v_float(run > 0 ? 100.0 * (double)r->total / (double)run : 0.0, TFE_FLOAT64));
        seq_push_take(list, v_obj(V_RECORD, rec));
    }
    free(rows);
    *out = v_obj(V_LIST, list);
    return 0;
}

/* p.total_ms(): the recorded window's length. */
BUILTIN(bi_profile_total)
{
    (void)data;
    if (argc != 1 || nkw) return interp_raise(I, "total_ms() takes no arguments");
    Profile *p = done_profile(I, &argv[0], "total_ms()");
    if (!p) return -1;
    *out = v_float(ms(p->snap.t1 - p->snap.t0), TFE_FLOAT64);
    return 0;
}

static int profile_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    (void)I;
    BuiltinFn fn = !strcmp(name, "save") ? bi_profile_save : !strcmp(name, "table") ? bi_profile_table
                 : !strcmp(name, "rows") ? bi_profile_rows : !strcmp(name, "total_ms") ? bi_profile_total : NULL;
    if (!fn) return 1;
    Value b = builtin_new(name, fn, NULL);
    o->refcount++;
    ((Builtin *)b.u.o)->self = v_obj(V_OBJECT, o);
    *out = b;
    return 0;
}

static const ObjectClass profile_class = {
    .name = "profile", .free = profile_free, .repr = profile_repr, .getattr = profile_getattr,
    .enter = profile_enter, .exit = profile_exit,
};

/* profile(): a profile to record with `with profile() as p { ... }`. */
BUILTIN(bi_profile)
{
    (void)data;
    (void)kwnames;
    (void)kwvals;
    (void)argv;
    if (argc || nkw) return interp_raise(I, "profile() takes no arguments");
    Profile *p = object_new(sizeof *p, &profile_class);
    *out = v_obj(V_OBJECT, p);
    return 0;
}

/* TFE_PROFILE=PATH: the whole run recorded, written when the interpreter
 * ends (a rank other than 0 of a job writes PATH with ".rankN" before its
 * extension). */
static int64_t env_t0 = -1;

void profile_env_start(void)
{
    prof_init();
    const char *path = getenv("TFE_PROFILE");
    if (path && *path && env_t0 < 0) {
        env_t0 = prof_start();
        tfe_prof_live_bytes();
    }
}

void profile_env_finish(void)
{
    if (env_t0 < 0) return;
    ProfSnapshot s;
    prof_stop(env_t0, &s);
    env_t0 = -1;
    const char *path = getenv("TFE_PROFILE");
    char *own = NULL;
    if (dist_rank() > 0) {
        size_t n = strlen(path) + 32;
        own = xmalloc(n);
        const char *dot = strrchr(path, '.');
        if (!dot || strchr(dot, '/')) dot = path + strlen(path);
        snprintf(own, n, "%.*s.rank%d%s", (int)(dot - path), path, dist_rank(), dot);
        path = own;
    }
    if (prof_write_chrome(&s, path, device_name))
        fprintf(stderr, "tfe: TFE_PROFILE: cannot write '%s': %s\n", path, strerror(errno));
    free(own);
    prof_snapshot_free(&s);
}

void builtins_profile_register(Interp *I)
{
    interp_define_builtin_flags(I, "profile", bi_profile, NULL, BF_NOT_STAGEABLE,
                                "profile() records around staged calls, not inside one: put the 'with profile()' "
                                "block around the call");
}
