/* builtins_ckpt.c — checkpoints in the safetensors format (docs/builtins.md, "Checkpoints"):
 * save(path, obj), restore(path, obj), load(path, flat=false). Writes are
 * atomic; the reader checks every header field against the file before it
 * reads any data, and restore checks everything before it changes anything.
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...,
 * "__metadata__": {"k": "v"}}), then the data: each tensor's bytes, C order,
 * little-endian, at [b, e) from the end of the header. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "interp/builtins_args.h"
#include "util/buf.h"
#include "interp/internal.h"
#include "util/profile.h"
#include "util/xalloc.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian, and builtins_ckpt.c copies tensor bytes as they are"
#endif

/* safetensors' dtype names, by tfe dtype */
static const char *const st_dtype_names[TFE_NDTYPES] = {
    [TFE_BOOL] = "BOOL", [TFE_INT32] = "I32", [TFE_INT64] = "I64", [TFE_FLOAT32] = "F32",
    [TFE_FLOAT64] = "F64", [TFE_FLOAT16] = "F16", [TFE_BFLOAT16] = "BF16",
};
_Static_assert(TFE_NDTYPES == 7, "a new dtype needs its safetensors name in st_dtype_names");

/* safetensors caps the header at 100 MB; so do we (a longer one is corrupt) */
#define ST_MAX_HEADER 100000000ULL
/* load() nests records by the parts of a dotted name; deeper is refused, not recursed into */
#define ST_MAX_DEPTH 256

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first name that appears twice in names (sorted in place), or NULL. */
static const char *find_duplicate(char **names, int n)
{
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 1; i < n; i++)
        if (!strcmp(names[i - 1], names[i])) return names[i];
    return NULL;
}

/* --- save ---------------------------------------------------------------------------- */

typedef struct Leaf {
    char *name;
    Value v;         /* the variable or tensor (borrowed from obj) */
    tfe_tensor *t;   /* save: its value, contiguous (owned) */
} Leaf;

typedef struct LeafList {
    Interp *I;
    const char *fn;  /* "save" or "restore", for errors */
    Leaf *l;
    int n, cap;
} LeafList;

static void leaves_clear(LeafList *L)
{
    for (int i = 0; i < L->n; i++) {
        free(L->l[i].name);
        if (L->l[i].t) tensor_decref(L->l[i].t);
    }
    free(L->l);
    L->l = NULL;
    L->n = L->cap = 0;
}

static int collect_visit(void *ctx, const char *path, Value leaf)
{
    LeafList *L = ctx;
    if (L->n == L->cap) {
        L->cap = L->cap ? L->cap * 2 : 16;
        L->l = xrealloc(L->l, sizeof *L->l * (size_t)L->cap);
    }
    L->l[L->n++] = (Leaf){xstrdup(path), leaf, NULL};
    return 0;
}

/* Every variable and tensor of obj with its dotted path; two values at one
 * path ({"a.b": x, a: {b: y}}) are an error. */
static int collect_leaves(Interp *I, const char *fn, Value obj, LeafList *L)
{
    *L = (LeafList){I, fn, NULL, 0, 0};
    state_walk(obj, WALK_TENSORS | WALK_UNTRAINABLE, collect_visit, L);
    char **names = xmalloc(sizeof *names * (size_t)(L->n ? L->n : 1));
    for (int i = 0; i < L->n; i++) names[i] = L->l[i].name;
    const char *dup = find_duplicate(names, L->n);
    int rc = 0;
    if (dup) rc = interp_raise(I, "%s(): two values in obj have the path '%s'", fn, dup);
    free(names);
    if (rc) leaves_clear(L);
    return rc;
}

static void json_string(Buf *b, const char *s)
{
    buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') { esc[0] = '\\'; esc[1] = (char)*p; buf_add(b, esc, 2); }
        else if (*p < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", *p); buf_puts(b, esc); }
        else buf_add(b, (const char *)p, 1);
    }
    buf_puts(b, "\"");
}

/* save(path, obj) */
BUILTIN(bi_save)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "save", "path, obj", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    if (arg_string(I, "save()", "path", a[0], &path)) return -1;
    LeafList L;
    if (collect_leaves(I, "save", a[1], &L)) return -1;
    if (!L.n) {
        leaves_clear(&L);
        return interp_raise(I, "save(): obj holds no tensors or variables (got %s)", value_kind_name(a[1]));
    }
    int rc = 0;
    Buf h = {0};
    buf_puts(&h, "{\"__metadata__\":{\"format\":\"tfe\"}");
    uint64_t off = 0;
    for (int i = 0; i < L.n && !rc; i++) {
        tfe_tensor *t = value_is_variable(L.l[i].v) ? variable_peek(L.l[i].v) : L.l[i].v.u.t;
        if (!t->storage) {
            rc = interp_raise(I, "save(): '%s' has no value here (a staged function's symbolic tensor)", L.l[i].name);
            break;
        }
        if (t->storage->device != 0) {
            rc = interp_raise(I, "save(): '%s' is not on cpu:0 (move it with to(x, \"cpu\") first)", L.l[i].name);
            break;
        }
        L.l[i].t = tensor_contiguous(t);
        if (!L.l[i].t) { rc = interp_raise_tensor_error(I); break; }
        uint64_t nbytes = (uint64_t)tensor_numel(t) * dtype_size(t->dtype);
        char tmp[64];
        buf_puts(&h, ",");
        json_string(&h, L.l[i].name);
        buf_puts(&h, ":{\"dtype\":\"");
        buf_puts(&h, st_dtype_names[t->dtype]);
        buf_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < t->rank; d++) {
            snprintf(tmp, sizeof tmp, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            buf_puts(&h, tmp);
        }
        snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nbytes));
        buf_puts(&h, tmp);
        off += nbytes;
    }
    if (!rc) {
        buf_puts(&h, "}");
        while (h.len % 8) buf_puts(&h, " "); /* the data starts 8-byte aligned */
        unsigned char len8[8];
        for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.len >> (8 * k));
        int np = 2 + L.n;
        const void **parts = xmalloc(sizeof *parts * (size_t)np);
        size_t *sizes = xmalloc(sizeof *sizes * (size_t)np);
        parts[0] = len8;
        sizes[0] = 8;
        parts[1] = h.s;
        sizes[1] = h.len;
        for (int i = 0; i < L.n; i++) {
            parts[2 + i] = tensor_data(L.l[i].t);
            sizes[2 + i] = (size_t)tensor_numel(L.l[i].t) * dtype_size(L.l[i].t->dtype);
        }
        char err[600];
        if (write_file_atomic(path, (const void *const *)parts, sizes, np, err, sizeof err))
            rc = interp_raise(I, "save(): %s", err);
        free(parts);
        free(sizes);
    }
    free(h.s);
    leaves_clear(&L);
    if (!rc) *out = v_nil();
    return rc;
}

/* --- reading: a small strict JSON parser for the header ---------------------------------- */

typedef struct Json {
    const char *s;
    size_t n, i;
    char err[300];
} Json;

static bool jfail(Json *j, const char *what)
{
    if (!*j->err) snprintf(j->err, sizeof j->err, "bad header JSON at byte %zu: %s", j->i, what);
    return false;
}

static void jws(Json *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

/* Skip blanks, then take c if it is next. */
static bool jpeek(Json *j, char c)
{
    jws(j);
    if (j->i < j->n && j->s[j->i] == c) { j->i++; return true; }
    return false;
}

static bool jexpect(Json *j, char c)
{
    if (jpeek(j, c)) return true;
    char what[40];
    snprintf(what, sizeof what, "expected '%c'", c);
    return jfail(j, what);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool jhex4(Json *j, unsigned *u)
{
    if (j->n - j->i < 4) return jfail(j, "a \\u escape needs 4 hex digits");
    *u = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(j->s[j->i + (size_t)k]);
        if (h < 0) return jfail(j, "a \\u escape needs 4 hex digits");
        *u = *u << 4 | (unsigned)h;
    }
    j->i += 4;
    return true;
}

static void put_utf8(Buf *b, unsigned c)
{
    char u[4];
    size_t n;
    if (c < 0x80) { u[0] = (char)c; n = 1; }
    else if (c < 0x800) { u[0] = (char)(0xc0 | c >> 6); u[1] = (char)(0x80 | (c & 0x3f)); n = 2; }
    else if (c < 0x10000) {
        u[0] = (char)(0xe0 | c >> 12); u[1] = (char)(0x80 | (c >> 6 & 0x3f)); u[2] = (char)(0x80 | (c & 0x3f)); n = 3;
    } else {
        u[0] = (char)(0xf0 | c >> 18); u[1] = (char)(0x80 | (c >> 12 & 0x3f));
        u[2] = (char)(0x80 | (c >> 6 & 0x3f)); u[3] = (char)(0x80 | (c & 0x3f)); n = 4;
    }
    buf_add(b, u, n);
}

/* A string: a malloc'd copy with its escapes undone, or NULL (error set). */
static char *jstring(Json *j)
{
    if (!jexpect(j, '"')) return NULL;
    Buf b = {0};
    buf_add(&b, "", 0);
    for (;;) {
        if (j->i >= j->n) { jfail(j, "unterminated string"); break; }
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') { j->i++; return b.s; }
        if (c < 0x20) { jfail(j, "control character in a string"); break; }
        if (c != '\\') { buf_add(&b, (const char *)&c, 1); j->i++; continue; }
        j->i++;
        if (j->i >= j->n) { jfail(j, "unterminated string"); break; }
        char e = j->s[j->i++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) { buf_add(&b, &"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"], 1); continue; }
        if (e != 'u') { j->i--; jfail(j, "unknown escape in a string"); break; }
        unsigned u, lo;
        if (!jhex4(j, &u)) break;
        if (u >= 0xd800 && u < 0xdc00) { /* a surrogate pair */
            if (j->n - j->i < 2 || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u') { jfail(j, "unpaired surrogate"); break; }
            j->i += 2;
            if (!jhex4(j, &lo)) break;
            if (lo < 0xdc00 || lo >= 0xe000) { jfail(j, "unpaired surrogate"); break; }
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        } else if (u >= 0xdc00 && u < 0xe000) { jfail(j, "unpaired surrogate"); break; }
        if (u == 0) { jfail(j, "\\u0000 in a string"); break; }
        put_utf8(&b, u);
    }
    free(b.s);
    return NULL;
}

/* A non-negative integer below 2^62 (no sign, fraction or exponent). */
static bool jint(Json *j, uint64_t *out)
{
    jws(j);
    size_t start = j->i;
    uint64_t v = 0;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        v = v * 10 + (uint64_t)(j->s[j->i] - '0');
        if (v >= (1ULL << 62)) return jfail(j, "integer too large");
        j->i++;
    }
    if (j->i == start) return jfail(j, "expected a non-negative integer");
    if (j->i - start > 1 && j->s[start] == '0') { j->i = start; return jfail(j, "integer with a leading zero"); }
    if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
        return jfail(j, "expected an integer");
    *out = v;
    return true;
}

/* [int, int, ...]: at most max of them. */
static bool jint_array(Json *j, uint64_t *vals, int max, int *n, const char *toomany)
{
    *n = 0;
    if (!jexpect(j, '[')) return false;
    if (jpeek(j, ']')) return true;
    do {
        if (*n == max) return jfail(j, toomany);
        if (!jint(j, &vals[(*n)++])) return false;
    } while (jpeek(j, ','));
    return jexpect(j, ']');
}

/* --- reading: the file ------------------------------------------------------------------ */

typedef struct StEntry {
    char *name;
    tfe_dtype dtype;
    int rank;
    int64_t shape[TFE_MAX_RANK];
    uint64_t begin, end;       /* from the start of the data */
} StEntry;

typedef struct StFile {
    FILE *f;
    uint64_t data_start, data_size;
    StEntry *e;
    int n, cap;
} StFile;

static void st_close(StFile *sf)
{
    for (int i = 0; i < sf->n; i++) free(sf->e[i].name);
    free(sf->e);
    if (sf->f) fclose(sf->f);
    *sf = (StFile){0};
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} of tensor e->name */
static bool parse_entry(Json *j, StEntry *e, char *msg, size_t msgcap)
{
    bool have[3] = {false, false, false};
    if (!jexpect(j, '{')) return false;
    if (!jpeek(j, '}')) {
        do {
            char *k = jstring(j);
            if (!k || !jexpect(j, ':')) { free(k); return false; }
            int which = !strcmp(k, "dtype") ? 0 : !strcmp(k, "shape") ? 1 : !strcmp(k, "data_offsets") ? 2 : -1;
            if (which < 0 || have[which]) {
                snprintf(msg, msgcap, "tensor '%s' has %s field '%s'", e->name, which < 0 ? "an unknown" : "a second", k);
                free(k);
                return false;
            }
            free(k);
            have[which] = true;
            if (which == 0) {
                char *d = jstring(j);
                if (!d) return false;
                int dt = -1;
                for (int t = 0; t < TFE_NDTYPES; t++)
                    if (!strcmp(d, st_dtype_names[t])) dt = t;
                if (dt < 0) {
                    snprintf(msg, msgcap, "tensor '%s' has dtype '%.40s', which tfe does not have", e->name, d);
                    free(d);
                    return false;
                }
                free(d);
                e->dtype = (tfe_dtype)dt;
            } else if (which == 1) {
                uint64_t dims[TFE_MAX_RANK];
                if (!jint_array(j, dims, TFE_MAX_RANK, &e->rank, "more than 8 dimensions")) return false;
                for (int d = 0; d < e->rank; d++) e->shape[d] = (int64_t)dims[d];
            } else {
                uint64_t offs[2];
                int n;
                if (!jint_array(j, offs, 2, &n, "data_offsets has more than 2 entries")) return false;
                if (n != 2) return jfail(j, "data_offsets needs 2 entries");
                e->begin = offs[0];
                e->end = offs[1];
            }
        } while (jpeek(j, ','));
        if (!jexpect(j, '}')) return false;
    }
    if (!have[0] || !have[1] || !have[2]) {
        snprintf(msg, msgcap, "tensor '%s' has no %s", e->name, !have[0] ? "dtype" : !have[1] ? "shape" : "data_offsets");
        return false;
    }
    return true;
}

static int cmp_begin(const void *a, const void *b)
{
    uint64_t x = (*(StEntry *const *)a)->begin, y = (*(StEntry *const *)b)->begin;
    return x < y ? -1 : x > y;
}

/* One "name": value member of the header object: the metadata (skipped) or a
 * tensor's entry, checked against the data's size. 0; -1 with msg set; or -1
 * with msg empty for a JSON error (in j->err). */
static int parse_member(StFile *sf, Json *j, bool *meta, char *msg, size_t msgcap)
{
    char *name = jstring(j);
    if (!name) return -1;
    if (!jexpect(j, ':')) { free(name); return -1; }
    if (!strcmp(name, "__metadata__")) {
        free(name);
        if (*meta) { snprintf(msg, msgcap, "__metadata__ appears twice"); return -1; }
        *meta = true;
        /* a map of strings to strings; we keep none of it */
        if (!jexpect(j, '{')) return -1;
        if (jpeek(j, '}')) return 0;
        do {
            char *k = jstring(j), *v = NULL;
            bool ok = k && jexpect(j, ':') && (v = jstring(j));
            free(k);
            free(v);
            if (!ok) return -1;
        } while (jpeek(j, ','));
        return jexpect(j, '}') ? 0 : -1;
    }
    if (sf->n == sf->cap) {
        sf->cap = sf->cap ? sf->cap * 2 : 16;
        sf->e = xrealloc(sf->e, sizeof *sf->e * (size_t)sf->cap);
    }
    StEntry *e = &sf->e[sf->n++];
    *e = (StEntry){.name = name};   /* owned by sf from here */
    if (!parse_entry(j, e, msg, msgcap)) return -1;
    char sh[200];
    shape_str(e->rank, e->shape, sh);
    int64_t numel = shape_numel(e->rank, e->shape);
    if (numel < 0 || (uint64_t)numel > (uint64_t)INT64_MAX / dtype_size(e->dtype)) {
        snprintf(msg, msgcap, "tensor '%s' has an impossible shape %s", name, sh);
        return -1;
    }
    uint64_t nbytes = (uint64_t)numel * dtype_size(e->dtype);
    if (e->begin > e->end || e->end - e->begin != nbytes) {
        snprintf(msg, msgcap, "tensor '%s' has data_offsets [%llu, %llu], but shape %s of %s needs %llu bytes",
                 name, (unsigned long long)e->begin, (unsigned long long)e->end, sh,
                 dtype_name(e->dtype), (unsigned long long)nbytes);
        return -1;
    }
    if (e->end > sf->data_size) {
        snprintf(msg, msgcap, "tensor '%s' has data_offsets [%llu, %llu], past the end of the data (%llu bytes)",
                 name, (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)sf->data_size);
        return -1;
    }
    return 0;
}

/* Parse the header; checks names, dtypes, shapes and offsets. 0, or -1 with msg. */
static int parse_header(StFile *sf, const char *hdr, size_t hlen, char *msg, size_t msgcap)
{
    Json j = {.s = hdr, .n = hlen};
    bool meta = false;
    *msg = 0;
    if (!jexpect(&j, '{')) goto json;
    if (!jpeek(&j, '}')) {
        do {
            if (parse_member(sf, &j, &meta, msg, msgcap)) {
                if (*msg) return -1;
                goto json;
            }
        } while (jpeek(&j, ','));
        if (!jexpect(&j, '}')) goto json;
    }
    jws(&j);
    if (j.i != j.n) { jfail(&j, "text after the header object"); goto json; }

    /* names once each; no two tensors' bytes overlap */
    int n = sf->n;
    char **names = xmalloc(sizeof *names * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) names[i] = sf->e[i].name;
    const char *dup = find_duplicate(names, n);
    if (dup) snprintf(msg, msgcap, "the name '%s' appears twice", dup);
    free(names);
    if (dup) return -1;
    StEntry **by = xmalloc(sizeof *by * (size_t)(n ? n : 1));
    int nb = 0;
    for (int i = 0; i < n; i++)
        if (sf->e[i].end > sf->e[i].begin) by[nb++] = &sf->e[i];
    qsort(by, (size_t)nb, sizeof *by, cmp_begin);
    for (int i = 1; i < nb; i++)
        if (by[i]->begin < by[i - 1]->end) {
            snprintf(msg, msgcap, "the data of tensors '%s' and '%s' overlap", by[i - 1]->name, by[i]->name);
            free(by);
            return -1;
        }
    free(by);
    return 0;
json:
    snprintf(msg, msgcap, "%s", j.err);
    return -1;
}

/* Open path and read its header: 0, or -1 raised (messages start "fn(): 'path'"). */
static int st_open(Interp *I, const char *fn, const char *path, StFile *sf)
{
    *sf = (StFile){0};
    sf->f = fopen(path, "rb");
    if (!sf->f) return interp_raise(I, "%s(): cannot open '%s': %s", fn, path, strerror(errno));
    struct stat st;
    if (fstat(fileno(sf->f), &st) != 0 || !S_ISREG(st.st_mode)) {
        st_close(sf);
        return interp_raise(I, "%s(): '%s' is not a regular file", fn, path);
    }
    uint64_t fsize = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (fsize < 8 || fread(len8, 1, 8, sf->f) != 8) {
        st_close(sf);
        return interp_raise(I, "%s(): '%s' is not a safetensors file: it is %llu bytes, too short for the header length",
                            fn, path, (unsigned long long)fsize);
    }
    /* files of other formats a learner mixes up with a checkpoint: say
     * which reader takes them */
    const char *other = !memcmp(len8, "\x93NUMPY", 6) ? " (it is a NumPy .npy file: read it with load_npy(path))"
                        : !memcmp(len8, "PK\x03\x04", 4) ? " (it is a zip archive, such as NumPy's .npz or PyTorch's .pt: "
                                                           "save the arrays as .npy or safetensors to read them)"
                        : NULL;
    if (other) {
        st_close(sf);
        return interp_raise(I, "%s(): '%s' is not a safetensors file%s", fn, path, other);
    }
    uint64_t hlen = 0;
    for (int k = 0; k < 8; k++) hlen |= (uint64_t)len8[k] << (8 * k);
    if (hlen > fsize - 8 || hlen > ST_MAX_HEADER) {
        st_close(sf);
        return interp_raise(I, "%s(): '%s' is not a safetensors file: its header length %llu is more than the "
                            "%llu bytes that follow it", fn, path, (unsigned long long)hlen,
                            (unsigned long long)(fsize - 8));
    }
    char *hdr = try_malloc(hlen);
    if (!hdr) {
        st_close(sf);
        return interp_raise(I, "%s(): out of memory reading the %llu-byte header of '%s'", fn,
                            (unsigned long long)hlen, path);
    }
    errno = 0;
    if (fread(hdr, 1, hlen, sf->f) != hlen) {
        free(hdr);
        st_close(sf);
        return interp_raise(I, "%s(): cannot read '%s': %s", fn, path, errno ? strerror(errno) : "short read");
    }
    sf->data_start = 8 + hlen;
    sf->data_size = fsize - 8 - hlen;
    char msg[700];
    int rc = parse_header(sf, hdr, hlen, msg, sizeof msg);
    free(hdr);
    if (rc) {
        st_close(sf);
        return interp_raise(I, "%s(): '%s' is not a valid safetensors file: %s", fn, path, msg);
    }
    return 0;
}

/* Entry i's tensor (new, on the CPU), or NULL raised. */
static tfe_tensor *st_read(Interp *I, const char *fn, const char *path, StFile *sf, int i)
{
    StEntry *e = &sf->e[i];
    tfe_tensor *t = tensor_new(e->dtype, e->rank, e->shape);
    if (!t) {
        interp_raise_tensor_error(I);
        return NULL;
    }
    size_t nbytes = (size_t)(e->end - e->begin);
    if (nbytes && (fseeko(sf->f, (off_t)(sf->data_start + e->begin), SEEK_SET) != 0 ||
                   fread(tensor_data(t), 1, nbytes, sf->f) != nbytes)) {
        tensor_decref(t);
        interp_raise(I, "%s(): cannot read tensor '%s' of '%s': %s", fn, e->name, path,
                     ferror(sf->f) ? strerror(errno) : "the file is shorter than when it was opened");
        return NULL;
    }
    if (e->dtype == TFE_BOOL) /* any nonzero byte is true; ours are 0 or 1 */
        for (size_t k = 0; k < nbytes; k++) ((uint8_t *)tensor_data(t))[k] = ((uint8_t *)tensor_data(t))[k] != 0;
    return t;
}

/* --- load -------------------------------------------------------------------------------- */

/* Records whose keys are exactly "0".."n-1" (a list or tuple when saved)
 * become lists, innermost first. Takes v, returns the result. */
static Value listify(Value v)
{
    if (v.kind != V_RECORD) return v;
    Record *r = (Record *)v.u.o;
    for (int i = 0; i < r->n; i++) r->vals[i] = listify(r->vals[i]);
    int n = r->n;
    int *pos = xmalloc(sizeof *pos * (size_t)n);
    for (int i = 0; i < n; i++) pos[i] = -1;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        const char *k = r->keys[i]->s;
        char *end;
        long idx = strtol(k, &end, 10);
        ok = k[0] >= '0' && k[0] <= '9' && !*end && (k[0] != '0' || !k[1]) && idx < n && pos[idx] < 0;
        if (ok) pos[idx] = i;
    }
    if (!ok) {
        free(pos);
        return v;
    }
    Seq *s = seq_new(n);
    for (int i = 0; i < n; i++) {
        value_incref(r->vals[pos[i]]);
        seq_push_take(s, r->vals[pos[i]]);
    }
    free(pos);
    value_decref(v);
    return v_obj(V_LIST, s);
}

/* Put t at the dotted name in root; -1 when it clashes with a name already there. */
static int nest_set(Record *root, const char *name, Value t, int *depth_err)
{
    Record *cur = root;
    const char *seg = name;
    for (int depth = 0;; depth++) {
        if (depth >= ST_MAX_DEPTH) { *depth_err = 1; return -1; }
        const char *dot = strchr(seg, '.');
        size_t sl = dot ? (size_t)(dot - seg) : strlen(seg);
        Value *v = record_get(cur, seg, sl);
        if (!dot) {
            if (v) return -1;
            record_set_take(cur, seg, sl, t);
            return 0;
        }
        if (!v) {
            Record *r = record_new();
            record_set_take(cur, seg, sl, v_obj(V_RECORD, r));
            cur = r;
        } else if (v->kind == V_RECORD) {
            cur = (Record *)v->u.o;
        } else {
            return -1;
        }
        seg = dot + 1;
    }
}

/* The other name that clashes with name: one that is a prefix of it at a dot,
 * or one it is a prefix of. */
static const char *clash_partner(StFile *sf, int me)
{
    const char *a = sf->e[me].name;
    size_t la = strlen(a);
    for (int i = 0; i < sf->n; i++) {
        if (i == me) continue;
        const char *b = sf->e[i].name;
        size_t lb = strlen(b);
        if ((lb < la && !strncmp(a, b, lb) && a[lb] == '.') || (la < lb && !strncmp(a, b, la) && b[la] == '.')) return b;
    }
    return "?";
}

/* load(path, flat=false) */
BUILTIN(bi_load)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "load", "path, flat=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    if (arg_string(I, "load()", "path", a[0], &path)) return -1;
    bool flat = false;
    /* load(path, model): PyTorch's load_state_dict and Keras' load_weights
     * put the values into a model, which here is restore */
    if (p[1] && (a[1].kind == V_RECORD || a[1].kind == V_MODULE || a[1].kind == V_OBJECT || a[1].kind == V_LIST || a[1].kind == V_TUPLE))
        return interp_raise(I, "load(path) returns the checkpoint's tensors as a record; its second argument is "
                               "flat=true or false, got %s (to assign the saved values into a model's variables, "
                               "write restore(path, model))", value_kind_name(a[1]));
    if (p[1] && arg_bool(I, "load()", "flat", a[1], &flat)) return -1;
    StFile sf;
    if (st_open(I, "load", path, &sf)) return -1;
    Record *root = record_new();
    int rc = 0;
    for (int i = 0; i < sf.n && !rc; i++) {
        tfe_tensor *t = st_read(I, "load", path, &sf, i);
        if (!t) { rc = -1; break; }
        Value tv = v_tensor_take(t); /* a 0-d tensor stays one, so save(load(p)) writes it again */
        if (flat) {
            record_set_take(root, sf.e[i].name, strlen(sf.e[i].name), tv);
            continue;
        }
        int deep = 0;
        if (nest_set(root, sf.e[i].name, tv, &deep)) {
            value_decref(tv);
            if (deep)
                rc = interp_raise(I, "load(): '%s': the name '%.100s...' has more than %d dotted parts; "
                                  "load(path, flat=true) keeps names whole", path, sf.e[i].name, ST_MAX_DEPTH);
            else
                rc = interp_raise(I, "load(): '%s': the names '%s' and '%s' clash (a tensor cannot also hold "
                                  "fields); load(path, flat=true) keeps names whole",
                                  path, clash_partner(&sf, i), sf.e[i].name);
        }
    }
    st_close(&sf);
    if (rc) {
        value_decref(v_obj(V_RECORD, root));
        return -1;
    }
    /* the root stays a record even when the names are 0, 1, ... */
    if (!flat)
        for (int i = 0; i < root->n; i++) root->vals[i] = listify(root->vals[i]);
    *out = v_obj(V_RECORD, root);
    return 0;
}

/* --- restore ------------------------------------------------------------------------------ */

static int cmp_entry_name(const void *a, const void *b)
{
    return strcmp((*(StEntry *const *)a)->name, (*(StEntry *const *)b)->name);
}

/* One group of the mismatch report: "missing a, b; " with at most 10 names shown. */
typedef struct Group { Buf b; int n; } Group;

static void group_add(Group *g, const char *item)
{
    if (g->n < 10) {
        if (g->n) buf_puts(&g->b, ", ");
        buf_puts(&g->b, item);
    }
    g->n++;
}

static void group_flush(Buf *msg, Group *g, const char *label)
{
    if (!g->n) return;
    char more[64] = "";
    if (g->n > 10) snprintf(more, sizeof more, " and %d more", g->n - 10);
    if (msg->s[msg->len - 1] != ':') buf_puts(msg, ";");
    buf_puts(msg, " ");
    buf_puts(msg, label);
    buf_puts(msg, " ");
    buf_puts(msg, g->b.s);
    buf_puts(msg, more);
    free(g->b.s);
}

static void describe(char *buf, size_t cap, tfe_dtype dt, int rank, const int64_t *shape)
{
    char sh[200];
    snprintf(buf, cap, "%s %s", dtype_name(dt), shape_str(rank, shape, sh));
}

/* restore(path, obj): every variable of obj takes the tensor at its path */
BUILTIN(bi_restore)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "restore", "path, obj", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    if (arg_string(I, "restore()", "path", a[0], &path)) return -1;
    LeafList L;
    if (collect_leaves(I, "restore", a[1], &L)) return -1;
    StFile sf;
    if (st_open(I, "restore", path, &sf)) {
        leaves_clear(&L);
        return -1;
    }
    int rc = 0;
    StEntry **by = xmalloc(sizeof *by * (size_t)(sf.n ? sf.n : 1));
    for (int i = 0; i < sf.n; i++) by[i] = &sf.e[i];
    qsort(by, (size_t)sf.n, sizeof *by, cmp_entry_name);
    bool *used = xcalloc((size_t)(sf.n ? sf.n : 1), 1);
    int *match = xmalloc(sizeof *match * (size_t)(L.n ? L.n : 1)); /* leaf -> entry index, -1 none */
    Group missing = {0}, extra = {0}, wrong = {0};
    for (int i = 0; i < L.n; i++) {
        StEntry key = {.name = L.l[i].name}, *kp = &key;
        StEntry **hit = bsearch(&kp, by, (size_t)sf.n, sizeof *by, cmp_entry_name);
        match[i] = hit ? (int)(*hit - sf.e) : -1;
        if (hit) used[match[i]] = true;
        /* plain tensors are constants: an entry at their path is expected, not restored */
        if (!value_is_variable(L.l[i].v)) { match[i] = -1; continue; }
        tfe_tensor *t = variable_peek(L.l[i].v);
        char item[600], d1[260], d2[260];
        if (!hit) {
            describe(d1, sizeof d1, t->dtype, t->rank, t->shape);
            snprintf(item, sizeof item, "%s (%s)", L.l[i].name, d1);
            group_add(&missing, item);
            continue;
        }
        StEntry *e = *hit;
        if (e->dtype != t->dtype || e->rank != t->rank || memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)t->rank)) {
            describe(d1, sizeof d1, e->dtype, e->rank, e->shape);
            describe(d2, sizeof d2, t->dtype, t->rank, t->shape);
            snprintf(item, sizeof item, "%s (file %s, variable %s)", L.l[i].name, d1, d2);
            group_add(&wrong, item);
        }
    }
    for (int i = 0; i < sf.n; i++)
        if (!used[i]) {
            char item[600], d1[260];
            describe(d1, sizeof d1, sf.e[i].dtype, sf.e[i].rank, sf.e[i].shape);
            snprintf(item, sizeof item, "%s (%s)", sf.e[i].name, d1);
            group_add(&extra, item);
        }
    if (missing.n || extra.n || wrong.n) {
        Buf msg = {0};
        buf_puts(&msg, "restore(): '");
        buf_puts(&msg, path);
        buf_puts(&msg, "' does not fit obj, so nothing was restored:");
        group_flush(&msg, &missing, "missing");
        group_flush(&msg, &extra, "extra");
        group_flush(&msg, &wrong, "mismatched");
        rc = raise_msg_at(I, I->cur_loc, msg.s);
        free(msg.s);
    }
    /* read every new value first, so a failing read changes nothing */
    for (int i = 0; i < L.n && !rc; i++)
        if (match[i] >= 0 && !(L.l[i].t = st_read(I, "restore", path, &sf, match[i]))) rc = -1;
    if (!rc)
        for (int i = 0; i < L.n; i++)
            if (L.l[i].t) {
                variable_replace_take(L.l[i].v, L.l[i].t);
                L.l[i].t = NULL;
            }
    free(by);
    free(used);
    free(match);
    st_close(&sf);
    leaves_clear(&L);
    if (!rc) *out = v_nil();
    return rc;
}

/* The profiler's checkpoint I/O events: save, load and restore timed, with
 * the path and the file's size. */
typedef struct CkptTimed {
    const char *name;
    int (*fn)(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals, Value *out,
              void *data);
} CkptTimed;

BUILTIN(bi_ckpt_timed)
{
    const CkptTimed *t = data;
    if (!prof_recording) return t->fn(I, argc, argv, nkw, kwnames, kwvals, out, NULL);
    int64_t t0 = prof_now();
    int rc = t->fn(I, argc, argv, nkw, kwnames, kwvals, out, NULL);
    if (rc) return rc;
    const char *path = NULL;
    if (argc >= 1 && argv[0].kind == V_STR) path = ((Str *)argv[0].u.o)->s;
    for (int k = 0; k < nkw && !path; k++)
        if (!strcmp(kwnames[k]->s, "path") && kwvals[k].kind == V_STR) path = ((Str *)kwvals[k].u.o)->s;
    struct stat sb;
    int64_t bytes = path && stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
    prof_complete(PROF_CKPT, t->name, t0, path, bytes, -1);
    return 0;
}

static const CkptTimed save_timed = {"save", bi_save}, restore_timed = {"restore", bi_restore},
                       load_timed = {"load", bi_load};

void builtins_ckpt_register(Interp *I)
{
    interp_define_builtin_flags(I, "save", bi_ckpt_timed, (void *)&save_timed, BF_EFFECT, NULL);
    /* restore assigns variables, like v.assign(): again at every call */
    interp_define_builtin_flags(I, "restore", bi_ckpt_timed, (void *)&restore_timed, BF_EFFECT, NULL);
    /* a record is not a value staged code can take from the host: under
     * --stage-all the function runs eagerly, under @staged it is an error */
    interp_define_builtin_flags(I, "load", bi_ckpt_timed, (void *)&load_timed, BF_NOT_STAGEABLE,
                                "load() returns a record, which a staged function cannot take from the host; "
                                "call load() outside it and pass the tensors in");
}
