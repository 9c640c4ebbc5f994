/* builtins_progress.c — progress(iterable, label=nil): a value that `for`
 * walks as the iterable inside it (eval.c: exec_for) while a bar with count,
 * rate and ETA is drawn on stderr — redrawn in place on a terminal, a plain
 * line per 10% otherwise, nothing at all with TFE_PROGRESS=0.
 *
 * The language has no iterator protocol, so progress() does not produce the
 * items itself: `for` unwraps the progress value and walks the inner value as
 * it would walk it bare, telling the bar when the loop starts, after each
 * completed iteration and when the loop ends. The bar never writes to stdout
 * (it only flushes it, so output and bar keep their order in a shared log).
 *
 * print() shares the terminal with a bar being redrawn in place (tqdm.write's
 * way): progress_print_begin clears the bar's line, print writes its line,
 * progress_print_end draws the bar again below it. Without that the printed
 * text would land after the bar on its line and the next redraw (\r) would
 * overwrite it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "stage/trace.h"
#include "util/xalloc.h"

typedef struct Progress {
    Object o;
    Value inner;          /* what `for` walks (owned) */
    char *label;          /* NULL: no label */
    bool silent;          /* TFE_PROGRESS=0 when it was made */
    bool tty;             /* stderr is a terminal: redraw in place */
    double start, last_draw;
    int64_t total;
    int last_tenth;       /* plain mode: the last 10% step printed */
    int64_t last_done;    /* plain mode: the count on the last line printed (-1: none) */
    int64_t done;         /* iterations completed so far */
} Progress;

/* The bar drawn on the terminal's current line with no newline after it
 * (terminal mode, between its first and its final draw), or NULL: the line
 * print() must clear first and redraw after. */
static Progress *shown;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress_free(Obj *o)
{
    Progress *p = (Progress *)o;
    if (shown == p) shown = NULL;
    value_decref(p->inner);
    free(p->label);
    free(p);
}

static char *progress_repr(Obj *o)
{
    Progress *p = (Progress *)o;
    char *s;
    if (asprintf(&s, "<progress%s%s over %s>", p->label ? " " : "", p->label ? p->label : "",
                 value_kind_name(p->inner)) < 0)
        return xstrdup("<progress>");
    return s;
}

static const ObjectClass progress_class = {
    .name = "progress", .free = progress_free, .repr = progress_repr,
};

/* "01:05", "1:02:03" */
static void fmt_time(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 359999) { snprintf(buf, n, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

/* "123 it/s", "12.3 it/s", "1.23 it/s", and below one a second "4.56 s/it" */
static void fmt_rate(double rate, char *buf, size_t n)
{
    if (!(rate > 0)) snprintf(buf, n, "? it/s");
    else if (rate >= 100) snprintf(buf, n, "%.0f it/s", rate);
    else if (rate >= 10) snprintf(buf, n, "%.1f it/s", rate);
    else if (rate >= 1) snprintf(buf, n, "%.2f it/s", rate);
    else snprintf(buf, n, "%.2f s/it", 1 / rate);
}

/* One state line: "label: 40% 4/10 [00:02<00:03, 1.98 it/s]", with a bar
 * after the percentage on a terminal. */
static void draw(Progress *p, int64_t done, bool final)
{
    double t = now_s(), el = t - p->start;
    double rate = el > 0 && done > 0 ? done / el : 0;
    /* rounded as tqdm's {percentage:3.0f} (2 of 3 is 67%, not 66%) */
    int pct = p->total > 0 ? (int)rint((double)done * 100.0 / (double)p->total) : 100;
    char e[32], eta[32], r[32];
    fmt_time(el, e, sizeof e);
    if (done >= p->total) fmt_time(0, eta, sizeof eta);
    else if (rate > 0) fmt_time((double)(p->total - done) / rate, eta, sizeof eta);
    else snprintf(eta, sizeof eta, "?");
    fmt_rate(rate, r, sizeof r);
    char bar[20 * 3 + 1] = "";
    if (p->tty) {
        /* 10 cells of eighths: full blocks, one partial block, spaces */
        static const char *const part[8] = {"", "\u258f", "\u258e", "\u258d", "\u258c", "\u258b", "\u258a", "\u2589"};
        int eighths = p->total > 0 ? (int)(done * 80 / p->total) : 80;
        if (eighths > 80) eighths = 80;
        size_t k = 0;
        for (int i = 0; i < eighths / 8; i++) k += (size_t)snprintf(bar + k, sizeof bar - k, "\u2588");
        int cells = eighths / 8;
        if (cells < 10 && eighths % 8) { k += (size_t)snprintf(bar + k, sizeof bar - k, "%s", part[eighths % 8]); cells++; }
        for (; cells < 10; cells++) k += (size_t)snprintf(bar + k, sizeof bar - k, " ");
    }
    fflush(stdout);
    fprintf(stderr, "%s%s%s%3d%%%s%s%s %lld/%lld [%s<%s, %s]%s", p->tty ? "\r" : "",
            p->label ? p->label : "", p->label ? ": " : "", pct,
            p->tty ? "|" : "", bar, p->tty ? "|" : "",
            (long long)done, (long long)p->total, e, eta, r,
            p->tty ? (final ? (progress_in_place ? "\n" : "\033[K\n") : (progress_in_place ? "" : "\033[K")) : "\n");
    fflush(stderr);
    p->last_draw = t;
    if (p->tty) shown = final ? NULL : p;
}

bool progress_in_place;

void progress_print_begin(void)
{
    if (!shown) return;
    fflush(stdout);
    fputs(progress_in_place ? "\r" : "\r\033[K", stderr); /* the bar's line, empty again: print writes there */
    fflush(stderr);
}

void progress_print_end(void)
{
    if (!shown) return;
    fflush(stdout); /* the printed line reaches the terminal before the bar */
    draw(shown, shown->done, false);
}

Value progress_iterable(Value v)
{
    if (v.kind != V_OBJECT || ((Object *)v.u.o)->cls != &progress_class) return v_nil();
    return ((Progress *)v.u.o)->inner;
}

int progress_begin(Interp *I, Value bar, int64_t total, Loc loc)
{
    Progress *p = (Progress *)bar.u.o;
    /* a bar made outside and iterated inside a staged function: no builtin
     * call to flag (progress() itself is BF_NOT_STAGEABLE), the for loop asks */
    if (trace_recording(I) &&
        trace_fail(I, loc, "a progress bar cannot be drawn inside a staged function (the loop would "
                           "run once, at trace time); iterate with progress() outside it"))
        return -1;
    p->total = total;
    p->start = now_s();
    p->last_draw = 0;
    p->last_tenth = 0;
    p->last_done = -1;
    p->done = 0;
    if (!p->silent && p->tty) draw(p, 0, false);
    return 0;
}

void progress_step(Value bar, int64_t done, bool finished)
{
    Progress *p = (Progress *)bar.u.o;
    p->done = done;
    if (p->silent) return;
    if (p->tty) {
        /* at most ten redraws a second: a fast loop must not spend its time drawing */
        if (finished || now_s() - p->last_draw >= 0.1) draw(p, done, finished);
        return;
    }
    int tenth = p->total > 0 ? (int)(done * 10 / p->total) : 10;
    if (tenth > p->last_tenth || (finished && done != p->last_done)) {
        draw(p, done, finished);
        p->last_tenth = tenth;
        p->last_done = done;
    }
}

/* progress(iterable, label=nil) */
BUILTIN(bi_progress)
{
    Value a[2];
    bool pr[2];
    if (args_parse(I, "progress", "iterable, label=", argc, argv, nkw, kwnames, kwvals, a, pr)) return -1;
    Value it = a[0];
    switch ((ValueKind)it.kind) {
    case V_RANGE: case V_TUPLE: case V_LIST: case V_RECORD: case V_MODULE: case V_STR: break;
    case V_TENSOR:
        if (it.u.t->rank > 0) break;
        return interp_raise(I, "progress(): cannot iterate over a 0-d tensor");
    default:
        return interp_raise(I, "progress(): cannot iterate over a value of type %s", value_kind_name(it));
    }
    const char *label = NULL;
    if (pr[1] && arg_opt_string(I, "progress()", "label", a[1], &label)) return -1;
    Progress *p = object_new(sizeof *p, &progress_class);
    value_incref(it);
    p->inner = it;
    if (label) p->label = xstrdup(label);
    const char *env = getenv("TFE_PROGRESS");
    p->silent = env && strcmp(env, "0") == 0;
    p->tty = isatty(2) || progress_in_place;
    p->last_done = -1;
    *out = v_obj(V_OBJECT, p);
    return 0;
}

void builtins_progress_register(Interp *I)
{
    interp_define_builtin_flags(I, "progress", bi_progress, NULL, BF_NOT_STAGEABLE,
                                "progress() cannot be used inside a staged function (its loop would "
                                "run once, at trace time); iterate with progress() outside it");
}
