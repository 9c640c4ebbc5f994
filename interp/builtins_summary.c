/* builtins_summary.c — TensorBoard event files: _summary_writer(logdir)
 * (stdlib/summary.tfe binds it as summary.writer) returns a writer whose
 * methods scalar, histogram and text append one Event record each
 * (docs/visualizing.md). A record is TFRecord framing around an Event
 * protobuf: length (uint64 LE), masked CRC-32C of the length, the bytes,
 * masked CRC-32C of the bytes; the encoder and the CRC are util/pb.c and
 * util/crc32c.c. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "tensor/device.h"
#include "util/crc32c.h"
#include "util/pb.h"
#include "util/xalloc.h"

/* Field numbers of tensorboard/compat/proto/{event,summary,tensor,
 * tensor_shape}.proto. */
enum {
    EV_WALL_TIME = 1, EV_STEP = 2, EV_FILE_VERSION = 3, EV_SUMMARY = 5,
    SUM_VALUE = 1,
    VAL_TAG = 1, VAL_SIMPLE_VALUE = 2, VAL_HISTO = 5, VAL_TENSOR = 8, VAL_METADATA = 9,
    HIS_MIN = 1, HIS_MAX = 2, HIS_NUM = 3, HIS_SUM = 4, HIS_SUM_SQUARES = 5, HIS_BUCKET_LIMIT = 6, HIS_BUCKET = 7,
    META_PLUGIN_DATA = 1, PLUGIN_NAME = 1,
    TEN_DTYPE = 1, TEN_SHAPE = 2, TEN_STRING_VAL = 8,
    DT_STRING = 7,
};

#define HIST_BINS 30 /* tf.summary.histogram's default */

typedef struct Writer {
    Object o;
    FILE *f;        /* NULL once closed */
    char *logdir, *path;
} Writer;

static const ObjectClass writer_class;

static void writer_free(Obj *o)
{
    Writer *w = (Writer *)o;
    if (w->f) fclose(w->f); /* flushes what is buffered */
    free(w->logdir);
    free(w->path);
    free(w);
}

static char *writer_repr(Obj *o)
{
    Writer *w = (Writer *)o;
    size_t n = strlen(w->path) + 40;
    char *s = xmalloc(n);
    snprintf(s, n, "<summary writer %s%s>", w->path, w->f ? "" : " (closed)");
    return s;
}

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One TFRecord holding the Event: step, wall time, and (a message of field
 * `field`) the summary or file_version bytes. */
static int write_event(Interp *I, Writer *w, const char *fn, int64_t step, int field, const Buf *what)
{
    Buf ev = {0};
    pb_field_double(&ev, EV_WALL_TIME, wall_time());
    if (step) pb_field_varint(&ev, EV_STEP, (uint64_t)step);
    pb_field_bytes(&ev, field, what->s, what->len);
    unsigned char head[12];
    uint64_t len = ev.len;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
    uint32_t c = crc32c_mask(crc32c(head, 8));
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(c >> (8 * i));
    uint32_t d = crc32c_mask(crc32c(ev.s, ev.len));
    unsigned char tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (unsigned char)(d >> (8 * i));
    errno = 0;
    bool ok = fwrite(head, 1, 12, w->f) == 12 && fwrite(ev.s, 1, ev.len, w->f) == ev.len &&
              fwrite(tail, 1, 4, w->f) == 4;
    free(ev.s);
    if (!ok) return interp_raise(I, "%s: cannot write '%s': %s", fn, w->path, errno ? strerror(errno) : "write failed");
    return 0;
}

/* mkdir -p: every missing folder of path, then path must be a folder. */
static int make_dirs(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0777) && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    free(p);
    if (mkdir(path, 0777) && errno != EEXIST) return -1;
    struct stat st;
    if (stat(path, &st)) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* _summary_writer(logdir): a new event file in logdir (made when missing),
 * named as TensorFlow names them, so TensorBoard finds it; its first record
 * is the file version. */
BUILTIN(bi_summary_writer)
{
    (void)data;
    Value a[1];
    bool p[1];
    if (args_parse(I, "summary.writer", "logdir", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *dir;
    if (arg_string(I, "summary.writer()", "logdir", a[0], &dir)) return -1;
    if (!*dir) return interp_raise(I, "summary.writer(): logdir is empty");
    if (make_dirs(dir))
        return interp_raise(I, "summary.writer(): cannot use '%s' as the log folder: %s", dir, strerror(errno));
    static int counter; /* a second writer in the same second gets its own file */
    char host[256] = "localhost";
    if (gethostname(host, sizeof host)) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    size_t n = strlen(dir) + strlen(host) + 100;
    char *path = xmalloc(n);
    snprintf(path, n, "%s%sevents.out.tfevents.%010lld.%s.%ld.%d", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
             (long long)time(NULL), host, (long)getpid(), counter++);
    FILE *f = fopen(path, "ab");
    if (!f) {
        int r = interp_raise(I, "summary.writer(): cannot create '%s': %s", path, strerror(errno));
        free(path);
        return r;
    }
    Writer *w = object_new(sizeof *w, &writer_class);
    w->f = f;
    w->logdir = xstrdup(dir);
    w->path = path;
    Buf v = {0};
    buf_puts(&v, "brain.Event:2");
    int r = write_event(I, w, "summary.writer()", 0, EV_FILE_VERSION, &v);
    free(v.s);
    *out = v_obj(V_OBJECT, w);
    if (r) {
        value_decref(*out);
        return -1;
    }
    return 0;
}

/* The writer (self) of a method, open; its tag and step arguments. */
static int method_head(Interp *I, const char *fn, const Value *a, Writer **w, const char **tag, int64_t *step)
{
    *w = (Writer *)a[0].u.o;
    if (!(*w)->f) return interp_raise(I, "%s: the writer of '%s' is closed", fn, (*w)->path);
    if (arg_string(I, fn, "tag", a[1], tag)) return -1; /* (fn: "scalar()", as the errors say it) */
    if (!**tag) return interp_raise(I, "%s: tag is empty", fn);
    if (arg_int(I, fn, "step", a[3], step)) return -1;
    return 0;
}

/* An Event's summary of one value: tag, then the value's fields (body). */
static int write_value(Interp *I, Writer *w, const char *fn, int64_t step, const char *tag, const Buf *body)
{
    Buf val = {0}, sum = {0};
    pb_field_string(&val, VAL_TAG, tag);
    buf_add(&val, body->s ? body->s : "", body->len);
    pb_field_bytes(&sum, SUM_VALUE, val.s, val.len);
    int r = write_event(I, w, fn, step, EV_SUMMARY, &sum);
    free(val.s);
    free(sum.s);
    return r;
}

/* w.scalar(tag, value, step): simple_value, a float32 as TensorBoard keeps it. */
BUILTIN(bi_summary_scalar)
{
    (void)data;
    Value a[4];
    bool p[4];
    if (args_parse(I, "scalar", "self, tag, value, step", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    Writer *w;
    const char *tag;
    int64_t step;
    double x;
    if (method_head(I, "scalar()", a, &w, &tag, &step)) return -1;
    if (!arg_as_number(a[2], &x, NULL)) { /* name the conversion visualizing.md gives */
        if (value_is_variable(a[2]))
            return interp_raise(I, "scalar(): value must be a number or a 0-d tensor, got a variable (write v.value)");
        if (a[2].kind == V_TENSOR && tensor_numel(a[2].u.t) == 1) {
            char b[200];
            return interp_raise(I, "scalar(): value must be a number or a 0-d tensor, got a tensor of shape %s "
                                   "(x.item() is its number)", shape_str(a[2].u.t->rank, a[2].u.t->shape, b));
        }
        return arg_number(I, "scalar()", "value", a[2], &x, NULL);
    }
    Buf body = {0};
    /* beyond float32's range is inf (a cast there would be undefined) */
    float fx = isnan(x) ? NAN : x > FLT_MAX ? INFINITY : x < -FLT_MAX ? -INFINITY : (float)x;
    pb_field_float(&body, VAL_SIMPLE_VALUE, fx);
    int r = write_value(I, w, "scalar()", step, tag, &body);
    free(body.s);
    if (!r) *out = v_nil();
    return r;
}

/* w.histogram(tag, x, step, bins=30): HistogramProto of x's elements: min,
 * max, count, sum, sum of squares, and bins of equal width from min to max
 * (bucket_limit holds each bin's right edge; a bin holds [left, right), the
 * last one its right edge too), as tf.summary.histogram bins. */
BUILTIN(bi_summary_histogram)
{
    (void)data;
    Value a[5];
    bool p[5];
    if (args_parse(I, "histogram", "self, tag, values, step, bins=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    Writer *w;
    const char *tag;
    int64_t step, bins = HIST_BINS;
    if (method_head(I, "histogram()", a, &w, &tag, &step)) return -1;
    if (p[4] && arg_int(I, "histogram()", "bins", a[4], &bins)) return -1;
    if (bins < 1 || bins > 10000) return interp_raise(I, "histogram(): bins must be 1 to 10000, got %lld", (long long)bins);
    tfe_tensor *t = arg_tensor(I, "histogram()", "values", a[2]);
    if (!t) return -1;
    if (!t->storage) {
        tensor_decref(t);
        return interp_raise(I, "histogram(): the values of '%s' have none here (a staged branch's symbolic tensor)", tag);
    }
    if (t->storage->device != 0) { /* read on the host */
        tfe_tensor *h = tensor_to_device(t, 0);
        tensor_decref(t);
        if (!(t = h)) return interp_raise_tensor_error(I);
    }
    int64_t n = tensor_numel(t);
    double *x = xmalloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = tensor_get_f64(t, i);
    tensor_decref(t);
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            const char *what = isnan(x[i]) ? "nan" : "inf";
            free(x);
            return interp_raise(I, "histogram(): the values of '%s' hold %s (element %lld)", tag, what, (long long)i);
        }
        lo = fmin(lo, x[i]);
        hi = fmax(hi, x[i]);
        sum += x[i];
        sq += x[i] * x[i];
    }
    if (!n) lo = hi = 0;
    /* all equal (or none): one bin whose right edge is the value */
    int64_t k = n && hi > lo ? bins : n ? 1 : 0;
    double *limit = xmalloc(sizeof(double) * (size_t)(k ? k : 1));
    double *count = xcalloc((size_t)(k ? k : 1), sizeof(double));
    double width = k > 1 ? (hi - lo) / (double)k : 0;
    for (int64_t j = 0; j < k; j++) limit[j] = j == k - 1 ? hi : lo + width * (double)(j + 1);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = k > 1 ? (int64_t)((x[i] - lo) / width) : 0;
        if (j >= k) j = k - 1;
        while (j > 0 && x[i] < limit[j - 1]) j--; /* rounding of the division */
        while (j < k - 1 && x[i] >= limit[j]) j++;
        count[j] += 1;
    }
    free(x);
    Buf h = {0}, body = {0};
    pb_field_double(&h, HIS_MIN, lo);
    pb_field_double(&h, HIS_MAX, hi);
    pb_field_double(&h, HIS_NUM, (double)n);
    pb_field_double(&h, HIS_SUM, sum);
    pb_field_double(&h, HIS_SUM_SQUARES, sq);
    if (k) {
        pb_field_packed_doubles(&h, HIS_BUCKET_LIMIT, limit, (size_t)k);
        pb_field_packed_doubles(&h, HIS_BUCKET, count, (size_t)k);
    }
    free(limit);
    free(count);
    pb_field_bytes(&body, VAL_HISTO, h.s, h.len);
    free(h.s);
    int r = write_value(I, w, "histogram()", step, tag, &body);
    free(body.s);
    if (!r) *out = v_nil();
    return r;
}

/* w.text(tag, s, step): a 0-d string tensor marked for the text plugin,
 * as tf.summary.text writes it (TensorBoard shows it as Markdown). */
BUILTIN(bi_summary_text)
{
    (void)data;
    Value a[4];
    bool p[4];
    if (args_parse(I, "text", "self, tag, text, step", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    Writer *w;
    const char *tag;
    int64_t step;
    if (method_head(I, "text()", a, &w, &tag, &step)) return -1;
    if (a[2].kind != V_STR) return arg_error(I, "text()", "text", "a string", a[2]);
    const Str *s = (const Str *)a[2].u.o;
    Buf plugin = {0}, meta = {0}, ten = {0}, body = {0};
    pb_field_string(&plugin, PLUGIN_NAME, "text");
    pb_field_bytes(&meta, META_PLUGIN_DATA, plugin.s, plugin.len);
    pb_field_varint(&ten, TEN_DTYPE, DT_STRING);
    pb_field_bytes(&ten, TEN_SHAPE, "", 0); /* no dims: a 0-d tensor */
    pb_field_bytes(&ten, TEN_STRING_VAL, s->s, s->len);
    pb_field_bytes(&body, VAL_TENSOR, ten.s, ten.len);
    pb_field_bytes(&body, VAL_METADATA, meta.s, meta.len);
    free(plugin.s);
    free(meta.s);
    free(ten.s);
    int r = write_value(I, w, "text()", step, tag, &body);
    free(body.s);
    if (!r) *out = v_nil();
    return r;
}

/* w.flush(): what is buffered goes to the file (TensorBoard sees it). */
BUILTIN(bi_summary_flush)
{
    (void)data;
    Value self[1];
    bool has[1];
    if (args_parse(I, "flush", "self", argc, argv, nkw, kwnames, kwvals, self, has)) return -1;
    Writer *w = (Writer *)argv[0].u.o;
    if (w->f && fflush(w->f)) return interp_raise(I, "flush(): cannot write '%s': %s", w->path, strerror(errno));
    *out = v_nil();
    return 0;
}

/* w.close(): flush and close; closing again does nothing. */
BUILTIN(bi_summary_close)
{
    (void)data;
    Value self[1];
    bool has[1];
    if (args_parse(I, "close", "self", argc, argv, nkw, kwnames, kwvals, self, has)) return -1;
    Writer *w = (Writer *)argv[0].u.o;
    if (w->f) {
        int bad = fclose(w->f);
        w->f = NULL;
        if (bad) return interp_raise(I, "close(): cannot write '%s': %s", w->path, strerror(errno));
    }
    *out = v_nil();
    return 0;
}

/* Methods are effects: a staged function writes at every call, with the
 * values of that call (a host call, as print). */
static const struct { const char *name; BuiltinFn fn; } methods[] = {
    {"scalar", bi_summary_scalar}, {"histogram", bi_summary_histogram}, {"text", bi_summary_text},
    {"flush", bi_summary_flush},   {"close", bi_summary_close},
};

static int writer_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    (void)I;
    Writer *w = (Writer *)o;
    if (!strcmp(name, "path") || !strcmp(name, "logdir")) {
        *out = v_cstr(name[0] == 'p' ? w->path : w->logdir);
        return 0;
    }
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        if (strcmp(name, methods[i].name)) continue;
        Value b = builtin_new(methods[i].name, methods[i].fn, NULL);
        ((Builtin *)b.u.o)->effect = BF_EFFECT;
        o->refcount++;
        ((Builtin *)b.u.o)->self = v_obj(V_OBJECT, o);
        *out = b;
        return 0;
    }
    return 1;
}

static const ObjectClass writer_class = {
    .name = "summary writer", .free = writer_free, .repr = writer_repr, .getattr = writer_getattr,
};

void builtins_summary_register(Interp *I)
{
    interp_define_builtin_flags(I, "_summary_writer", bi_summary_writer, NULL, BF_NOT_STAGEABLE,
                                "summary.writer() opens a file: make the writer outside the staged function");
}
