/* builtins_io.c — NumPy .npy files (save_npy/load_npy) and CSV (load_csv, a
 * numeric matrix; read_csv, named columns; plain or gzip-compressed). Writes are atomic (temp file + fsync +
 * rename); readers check every header field against the file's size before
 * reading data. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "util/buf.h"
#include "tensor/ops.h"
#include "util/xalloc.h"

static const char *npy_descr(tfe_dtype dt)
{
    switch (dt) {
    case TFE_BOOL: return "|b1";
    case TFE_INT32: return "<i4";
    case TFE_INT64: return "<i8";
    case TFE_FLOAT32: return "<f4";
    case TFE_FLOAT64: return "<f8";
    case TFE_FLOAT16: return "<f2"; /* IEEE half, NumPy's float16 */
    default: return NULL; /* bfloat16: NumPy has no such dtype */
    }
}

BUILTIN(bi_save_npy)
{
    Value s[2];
    bool p[2];
    if (args_parse(I, "save_npy", "path, x", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    const char *pathname;
    if (arg_string(I, "save_npy()", "path", s[0], &pathname)) return -1;
    tfe_tensor *t = value_to_tensor(s[1]);
    if (!t) return arg_error(I, "save_npy()", "x", "a tensor", s[1]);
    const char *descr = npy_descr(t->dtype);
    if (!descr) {
        tensor_decref(t);
        return interp_raise(I, "save_npy(): dtype %s has no .npy form (NumPy has no such dtype); cast it to float32 "
                            "first, which is exact", dtype_name(t->dtype));
    }
    tfe_tensor *c = tensor_contiguous(t);
    tensor_decref(t);
    if (!c) return interp_raise_tensor_error(I);
    char shape[512];
    size_t k = 0;
    k += (size_t)snprintf(shape + k, sizeof shape - k, "(");
    for (int i = 0; i < c->rank; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, "%lld%s", (long long)c->shape[i],
                              c->rank == 1 ? "," : (i + 1 < c->rank ? ", " : ""));
    snprintf(shape + k, sizeof shape - k, ")");
    char header[1024];
    int hl = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    /* magic(6) + version(2) + len(2) + header + padding + '\n' is a multiple of 64 */
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    char pre[1200];
    memcpy(pre, "\x93NUMPY\x01\x00", 8);
    int hlen = hl + pad + 1;
    pre[8] = (char)(hlen & 0xff);
    pre[9] = (char)(hlen >> 8);
    memcpy(pre + 10, header, (size_t)hl);
    memset(pre + 10 + hl, ' ', (size_t)pad);
    pre[10 + hl + pad] = '\n';
    const void *parts[2] = {pre, tensor_data(c)};
    size_t sizes[2] = {(size_t)(10 + hlen), (size_t)tensor_numel(c) * dtype_size(c->dtype)};
    char err[512];
    int rc = write_file_atomic(pathname, parts, sizes, 2, err, sizeof err);
    tensor_decref(c);
    if (rc) return interp_raise(I, "save_npy(): %s", err);
    *out = v_nil();
    return 0;
}

/* Find 'key': in a .npy header dict and return a pointer just past the colon. */
static const char *dict_find(const char *h, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

BUILTIN(bi_load_npy)
{
    Value s[1];
    bool p[1];
    if (args_parse(I, "load_npy", "path", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    const char *path;
    if (arg_string(I, "load_npy()", "path", s[0], &path)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return interp_raise(I, "load_npy(): cannot open '%s': %s", path, strerror(errno));
    struct stat fst;
    if (fstat(fileno(f), &fst) == 0 && S_ISDIR(fst.st_mode)) { /* fopen opens a folder; reading it fails */
        fclose(f);
        return interp_raise(I, "load_npy(): cannot open '%s': %s", path, strerror(EISDIR));
    }
    int rc = -1;
    char *header = NULL;
    tfe_tensor *t = NULL;
    unsigned char pre[12];
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t got = fread(pre, 1, 10, f);
    if (got < 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        /* a file that starts like a .npy file but stops early is truncated, not foreign */
        bool cut = got < 10 && memcmp(pre, "\x93NUMPY", got < 6 ? got : 6) == 0 && got > 0;
        interp_raise(I, cut ? "load_npy(): '%s' is truncated" : "load_npy(): '%s' is not a .npy file", path);
        goto out;
    }
    size_t hlen, hstart;
    if (pre[6] == 1) { hlen = pre[8] | (size_t)pre[9] << 8; hstart = 10; }
    else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) { interp_raise(I, "load_npy(): '%s' is truncated", path); goto out; }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        hstart = 12;
    } else { interp_raise(I, "load_npy(): '%s' has unknown .npy version %d", path, pre[6]); goto out; }
    if (hlen > 1 << 20) { interp_raise(I, "load_npy(): '%s' has an implausible header length of %zu bytes", path, hlen); goto out; }
    if ((long)(hstart + hlen) > fsize) {
        interp_raise(I, "load_npy(): '%s' is truncated: its header says %zu bytes, but %ld follow", path, hlen,
                     fsize > (long)hstart ? fsize - (long)hstart : 0L);
        goto out;
    }
    header = try_malloc(hlen + 1);
    if (!header) { interp_raise(I, "load_npy(): out of memory"); goto out; }
    if (fread(header, 1, hlen, f) != hlen) { interp_raise(I, "load_npy(): '%s' is truncated", path); goto out; }
    header[hlen] = 0;
    const char *d = dict_find(header, "descr"), *fo = dict_find(header, "fortran_order"), *sh = dict_find(header, "shape");
    if (!d || !fo || !sh) { /* name the first key that is missing */
        interp_raise(I, "load_npy(): '%s' has a malformed header: no '%s' key", path, !d ? "descr" : !fo ? "fortran_order" : "shape");
        goto out;
    }
    if (*d != '\'' || *sh != '(') { interp_raise(I, "load_npy(): '%s' has a malformed header", path); goto out; }
    char descr[16] = {0};
    for (int i = 0; i < 15 && d[i + 1] && d[i + 1] != '\''; i++) descr[i] = d[i + 1];
    tfe_dtype dt;
    if (!strcmp(descr, "<f4")) dt = TFE_FLOAT32;
    else if (!strcmp(descr, "<f8")) dt = TFE_FLOAT64;
    else if (!strcmp(descr, "<i4")) dt = TFE_INT32;
    else if (!strcmp(descr, "<i8")) dt = TFE_INT64;
    else if (!strcmp(descr, "|b1")) dt = TFE_BOOL;
    else if (!strcmp(descr, "<f2")) dt = TFE_FLOAT16;
    else {
        /* uint8 images, int16 audio, big-endian data: say what fits and how */
        interp_raise(I, "load_npy(): '%s' has unsupported dtype '%s' (tfe reads little-endian float16, float32, "
                        "float64, int32, int64 and bool: '<f2' '<f4' '<f8' '<i4' '<i8' '|b1'; convert it in NumPy "
                        "first, e.g. np.save(path, a.astype(np.float32)))", path, descr);
        goto out;
    }
    /* fortran_order must be a Python bool: reading anything else as False
     * would silently load the data with its axes reversed */
    bool fortran = strncmp(fo, "True", 4) == 0;
    if (!fortran && strncmp(fo, "False", 5) != 0) {
        interp_raise(I, "load_npy(): '%s' has a malformed header: fortran_order is not True or False", path);
        goto out;
    }
    int64_t shape[TFE_MAX_RANK];
    int rank = 0;
    const char *q = sh + 1;
    for (;;) {
        while (*q == ' ' || *q == ',') q++;
        if (*q == ')') break;
        char *end;
        errno = 0; /* a stale ERANGE from elsewhere must not reject a good dimension */
        long long v = isdigit((unsigned char)*q) && rank < TFE_MAX_RANK ? strtoll(q, &end, 10) : -1;
        if (v < 0 || errno == ERANGE) {
            bool deep = rank == TFE_MAX_RANK && isdigit((unsigned char)*q);
            /* name the shape as written (up to its ')'), bounded by the header's end */
            int sl = 0;
            while (sl < 80 && sh[sl] && sh[sl] != ')') sl++;
            bool cut = sh[sl] && sh[sl] != ')';
            /* a long one is cut after a whole dimension, not inside a number */
            if (cut)
                while (sl > 1 && sh[sl - 1] != ',') sl--;
            if (deep)
                interp_raise(I, "load_npy(): '%s' has a shape of more than %d dimensions, the most a tfe tensor has: "
                             "%.*s%s", path, TFE_MAX_RANK, sl, sh, sh[sl] == ')' ? ")" : cut ? " ..." : "");
            else
                interp_raise(I, "load_npy(): '%s' has a bad shape %.*s%s", path, sl, sh,
                             sh[sl] == ')' ? ")" : cut ? " ..." : "");
            goto out;
        }
        shape[rank++] = v;
        q = end;
    }
    int64_t n = shape_numel(rank, shape);
    if (n < 0 || (uint64_t)n > (uint64_t)(fsize - (long)(hstart + hlen)) / dtype_size(dt) ||
        (long)(hstart + hlen) + n * (int64_t)dtype_size(dt) != fsize) {
        interp_raise(I, "load_npy(): '%s' holds %ld data bytes, but its header says shape %s of %s",
                     path, fsize - (long)(hstart + hlen), shape_str(rank, shape, (char[200]){0}), dtype_name(dt));
        goto out;
    }
    if (fortran) {
        int64_t rev[TFE_MAX_RANK];
        for (int i = 0; i < rank; i++) rev[i] = shape[rank - 1 - i];
        t = tensor_new(dt, rank, rev);
    } else {
        t = tensor_new(dt, rank, shape);
    }
    if (!t) { interp_raise_tensor_error(I); goto out; }
    if (n && fread(tensor_data(t), dtype_size(dt), (size_t)n, f) != (size_t)n) { interp_raise(I, "load_npy(): '%s' is truncated", path); goto out; }
    if (dt == TFE_BOOL)
        for (int64_t i = 0; i < n; i++) ((uint8_t *)tensor_data(t))[i] = ((uint8_t *)tensor_data(t))[i] != 0;
    if (fortran && rank > 1) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        tfe_tensor *tr = tfe_call1(OP_TRANSPOSE, 1, &t, &at);
        if (!tr) { interp_raise_tensor_error(I); goto out; }
        tfe_tensor *c = tfe_call1(OP_COPY, 1, &tr, &at);
        tensor_decref(tr);
        if (!c) { interp_raise_tensor_error(I); goto out; }
        tensor_decref(t);
        t = c;
    }
    *out = value_from_tensor_take(t);
    t = NULL;
    rc = 0;
out:
    if (t) tensor_decref(t);
    free(header);
    fclose(f);
    return rc;
}

/* Why reading f stopped early, or NULL (Z_BUF_ERROR: a gzip stream cut short). */
static const char *gz_failure(gzFile f)
{
    int e;
    const char *msg = gzerror(f, &e);
    if (e == Z_OK) return NULL;
    if (e == Z_ERRNO) return strerror(errno);
    if (e == Z_BUF_ERROR) return "the gzip data is truncated";
    /* zlib's message is "path: what", and the caller names the path already
     * (the last ": ": a path may hold one, zlib's own texts do not) */
    const char *colon = NULL;
    for (const char *c = strstr(msg, ": "); c; c = strstr(c + 1, ": ")) colon = c;
    return colon ? colon + 2 : msg;
}

/* One line of f into *buf (grown as needed) with its newline, if it has
 * one, and a NUL after it; its length, or -1 at the end of the file. zlib
 * reads gzip files and plain files alike. Byte by byte (gzgetc is a macro
 * on zlib's buffer), not gzgets: gzgets cannot say where a line holding a
 * NUL byte ends, so such a line was cut short at the NUL. */
static ssize_t gz_getline(gzFile f, char **buf, size_t *cap)
{
    if (!*buf) { *cap = 256; *buf = xmalloc(*cap); }
    size_t len = 0;
    int c = -1;
    while ((c = gzgetc(f)) != -1) {
        if (len + 2 > *cap) { *cap *= 2; *buf = xrealloc(*buf, *cap); }
        (*buf)[len++] = (char)c;
        if (c == '\n') break;
    }
    (*buf)[len] = 0;
    return len ? (ssize_t)len : -1;
}

/* A NUL byte in a line of len bytes: where (1-based), or 0. The CSV reader
 * works on C strings, where a NUL would silently end the line (its fields
 * after it lost), so a file holding one (a binary file, UTF-16 text) is an
 * error that says so. */
static size_t csv_nul_at(const char *line, size_t len)
{
    const char *z = memchr(line, 0, len);
    return z ? (size_t)(z - line) + 1 : 0;
}

#define CSV_NUL_FMT "%s(): '%s' line %d holds a NUL byte (byte %zu of the line): a binary file, or text not in UTF-8 (UTF-16?)"

/* ---- CSV -------------------------------------------------------------------
 * One line at a time (a quoted field cannot span lines). Fields are split at
 * the delimiter outside double quotes; a quoted field keeps its delimiters
 * and reads "" as one quote (RFC 4180, as Python's csv and pandas read it);
 * blanks around a field are dropped; with delimiter " ", a run of spaces is
 * one delimiter. A UTF-8 byte order mark before the first
 * line is skipped. */

typedef struct CsvFields {
    int n, cap;
    char **f; /* each field, unquoted, NUL-terminated (in the line's buffer) */
} CsvFields;

/* Splits line (modified in place) into fields; NULL, or what is wrong. */
static const char *csv_split(char *line, char delim, CsvFields *fs)
{
    fs->n = 0;
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    bool blank_delim = delim == ' ' || delim == '\t';
    char *r = line, *w = line;
    if (delim == ' ') /* runs of spaces are one delimiter, as in whitespace-separated files */
        while (*r == ' ') r++;
    for (;;) {
        if (!blank_delim)
            while (*r == ' ' || *r == '\t') r++;
        char *start = w, *last_kept = w; /* trailing blanks of an unquoted field go */
        if (*r == '"') {
            r++;
            for (;;) {
                if (!*r) return "a quoted field has no closing quote (fields cannot span lines)";
                if (*r == '"' && r[1] == '"') { *w++ = '"'; r += 2; continue; }
                if (*r == '"') { r++; break; }
                *w++ = *r++;
            }
            last_kept = w;
            if (!blank_delim)
                while (*r == ' ' || *r == '\t') r++;
            if (*r && *r != delim) return "a quoted field is followed by text before the next delimiter";
        } else {
            while (*r && *r != delim) {
                if (*r != ' ' && *r != '\t') last_kept = w + 1;
                *w++ = *r++;
            }
        }
        w = last_kept;
        if (fs->n == fs->cap) {
            fs->cap = fs->cap ? 2 * fs->cap : 16;
            fs->f = xrealloc(fs->f, sizeof *fs->f * (size_t)fs->cap);
        }
        fs->f[fs->n++] = start;
        bool more = *r == delim;
        if (more && delim == ' ') {
            while (r[1] == ' ') r++;
            more = r[1] != 0; /* trailing spaces end the line */
        }
        *w++ = 0; /* w never passes r: the field's text only shrinks */
        if (!more) return NULL;
        r++;
    }
}

/* A field as a number: the whole field must be one, in the syntax pandas'
 * read_csv reads as a number: an optional sign, digits with an optional
 * point (at least one digit), an optional exponent; "inf" or "infinity" in
 * any case, with a sign; the NaN spellings nan NaN -nan -NaN. An empty field
 * is NaN (missing, as NumPy's genfromtxt and pandas read it). strtod alone
 * also takes hex (0x10, 0x1p3), "nan(123)", "NAN", "+nan" and leading
 * blanks, which pandas keeps as text, so the syntax is checked first. */
static bool csv_number_syntax(const char *f)
{
    if (!strcmp(f, "nan") || !strcmp(f, "NaN") || !strcmp(f, "-nan") || !strcmp(f, "-NaN")) return true;
    if (*f == '+' || *f == '-') f++;
    if (!strcasecmp(f, "inf") || !strcasecmp(f, "infinity")) return true;
    int digits = 0;
    while (isdigit((unsigned char)*f)) f++, digits++;
    if (*f == '.')
        for (f++; isdigit((unsigned char)*f); f++) digits++;
    if (!digits) return false;
    if (*f == 'e' || *f == 'E') {
        f++;
        if (*f == '+' || *f == '-') f++;
        if (!isdigit((unsigned char)*f)) return false;
        while (isdigit((unsigned char)*f)) f++;
    }
    return !*f;
}

static bool csv_number(const char *f, bool f64, double *out)
{
    if (!*f) { *out = NAN; return true; }
    if (!csv_number_syntax(f)) return false;
    char *end;
    *out = f64 ? strtod(f, &end) : (double)strtof(f, &end);
    return end != f && !*end;
}

/* A field that reads as a word (a column name), not a mistyped number. */
static bool csv_wordlike(const char *f)
{
    double v;
    return *f && (isalpha((unsigned char)*f) || *f == '_' || (unsigned char)*f >= 0x80) && !csv_number(f, true, &v);
}

static void csv_skip_bom(char *line, bool first)
{
    if (first && !memcmp(line, "\xEF\xBB\xBF", 3)) memmove(line, line + 3, strlen(line + 3) + 1);
}

static bool csv_blank(const char *line)
{
    while (*line == ' ' || *line == '\t' || *line == '\r' || *line == '\n') line++;
    return !*line;
}

/* A field such as 1,5 or -0,25e3: digits, one comma, digits (a number
 * written with a decimal comma). */
static bool csv_decimal_comma(const char *f)
{
    while (*f == ' ' || *f == '\t') f++;
    if (*f == '-' || *f == '+') f++;
    int before = 0, after = 0;
    while (isdigit((unsigned char)*f)) f++, before++;
    if (*f++ != ',') return false;
    while (isdigit((unsigned char)*f)) f++, after++;
    return before > 0 && after > 0;
}

/* The error names what was passed: "ab", "" and '"' are wrong for
 * different reasons, and a message about the quote misled for the others. */
static int csv_delimiter(Interp *I, const char *fn, Value v, bool given, char *out)
{
    *out = ',';
    if (!given || v.kind == V_NIL) return 0;
    if (v.kind != V_STR) return arg_error(I, fn, "delimiter", "a one-character string", v);
    const Str *d = (const Str *)v.u.o;
    if (d->len == 1 && d->s[0] == '"')
        return interp_raise(I, "%s: delimiter cannot be '\"', the quote character", fn);
    if (d->len != 1) {
        char *shown = value_repr(v); /* quoted and escaped: "" and "\t\t" show */
        int rc = interp_raise(I, "%s: delimiter must be one character, got %s", fn, shown);
        free(shown);
        return rc;
    }
    *out = d->s[0];
    return 0;
}

/* load_csv(path, skip_header=false, delimiter=","): a float32 matrix of
 * numbers. A path ending in .gz (or any gzip file) is decompressed as it is
 * read; skip_header=true drops the first line whatever it holds (sklearn's
 * iris.csv starts with "150,4,setosa,versicolor,virginica"). */
BUILTIN(bi_load_csv)
{
    Value s[3];
    bool p[3];
    if (args_parse(I, "load_csv", "path, skip_header=, delimiter=", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    const char *path;
    if (arg_string(I, "load_csv()", "path", s[0], &path)) return -1;
    bool skip = false;
    if (p[1] && arg_bool(I, "load_csv()", "skip_header", s[1], &skip)) return -1;
    char delim;
    if (csv_delimiter(I, "load_csv()", s[2], p[2], &delim)) return -1;
    bool delim_given = p[2] && s[2].kind != V_NIL;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return interp_raise(I, "load_csv(): cannot open '%s': %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 16);
    float *vals = NULL;
    size_t nv = 0, cap = 0;
    int64_t rows = 0, cols = -1;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    CsvFields fs = {0};
    while ((len = gz_getline(f, &line, &lcap)) >= 0) {
        lineno++;
        const char *why = len && line[len - 1] != '\n' ? gz_failure(f) : NULL; /* a last line cut short */
        if (why) { rc = interp_raise(I, "load_csv(): cannot read '%s': %s", path, why); goto out; }
        size_t nul = csv_nul_at(line, (size_t)len);
        if (nul) { rc = interp_raise(I, CSV_NUL_FMT, "load_csv", path, lineno, nul); goto out; }
        csv_skip_bom(line, lineno == 1);
        if (skip && lineno == 1) continue;
        if (csv_blank(line)) continue;
        if ((why = csv_split(line, delim, &fs))) { rc = interp_raise(I, "load_csv(): '%s' line %d: %s", path, lineno, why); goto out; }
        for (int c = 0; c < fs.n; c++) {
            double v;
            if (!csv_number(fs.f[c], false, &v)) {
                /* the hint only where the line reads as a header: the
                 * first line, at least half of its fields words */
                int words = 0;
                for (int k = 0; k < fs.n; k++) words += csv_wordlike(fs.f[k]);
                bool header = rows == 0 && !skip && 2 * words >= fs.n; /* not when it was skipped */
                /* a field holding another common delimiter: the file is
                 * split at something else (a European ';' CSV, a TSV);
                 * only when the program did not choose the delimiter */
                const char *other = NULL;
                static const char *const seps[][2] = {{";", "\";\""}, {"\t", "\"\\t\""}, {"|", "\"|\""}, {",", "\",\""}};
                for (size_t k = 0; k < sizeof seps / sizeof *seps && !other && !delim_given; k++)
                    if (seps[k][0][0] != delim && strchr(fs.f[c], seps[k][0][0])) other = seps[k][1];
                /* 1,5 in a field split at something else: a decimal comma
                 * (a European CSV read with delimiter=";") */
                bool decimal_comma = delim != ',' && csv_decimal_comma(fs.f[c]);
                char hint[120] = "";
                if (other)
                    snprintf(hint, sizeof hint, " (its fields look separated by %s: pass delimiter=%s)", other, other);
                rc = interp_raise(I, "load_csv(): '%s' line %d: field %d is not a number%s", path, lineno, c + 1,
                                  decimal_comma ? " (a decimal comma? load_csv() reads numbers with a decimal point: "
                                                  "replace the file's decimal commas with points)"
                                  : other ? hint
                                  : header ? " (a header line? pass skip_header=true)"
                                  : csv_wordlike(fs.f[c]) ? " (a text column? read_csv() reads named columns, text too)"
                                  : "");
                goto out;
            }
            if (nv == cap) { /* the file's size: an error the program survives */
                float *more = try_realloc(vals, (cap ? cap * 2 : 1024) * sizeof(float));
                if (!more) {
                    rc = interp_raise(I, "load_csv(): out of memory reading '%s' (line %d)", path, lineno);
                    goto out;
                }
                vals = more;
                cap = cap ? cap * 2 : 1024;
            }
            vals[nv++] = (float)v;
        }
        if (cols >= 0 && fs.n != cols) { rc = interp_raise(I, "load_csv(): '%s' line %d has %d fields, earlier lines have %lld", path, lineno, fs.n, (long long)cols); goto out; }
        cols = fs.n;
        rows++;
    }
    const char *why = gz_failure(f);
    if (why) { rc = interp_raise(I, "load_csv(): cannot read '%s': %s", path, why); goto out; }
    {
        int64_t shape[2] = {rows, cols < 0 ? 0 : cols};
        tfe_tensor *t = tensor_new(TFE_FLOAT32, 2, shape);
        if (!t) { rc = interp_raise_tensor_error(I); goto out; }
        if (nv) memcpy(tensor_data(t), vals, nv * sizeof(float));
        *out = v_tensor_take(t);
    }
out:
    free(fs.f);
    free(line);
    free(vals);
    gzclose(f);
    return rc;
}

/* read_csv(path, header=true, delimiter=",", dtype=float32): a record of
 * columns, pandas' read_csv as a dict of columns. Names come from the first
 * line (header=false: "0", "1", ...). A column whose fields are all integers
 * is int64; one whose fields are all numbers or empty is float (dtype; empty
 * fields are NaN); any other is a list of strings. A column of integers one
 * of which is past int64's range is a list of strings too: as a float
 * column (float32!) its int64 neighbours would silently lose digits, and
 * pandas reads it as uint64 or, with a negative or empty field, as text. */
typedef struct CsvCol {
    char **cells; /* owned copies */
    bool ints, nums;
    bool intlike; /* every field empty or an integer, whatever its size */
    bool big;     /* an integer past int64's range */
} CsvCol;

BUILTIN(bi_read_csv)
{
    Value s[4];
    bool p[4];
    if (args_parse(I, "read_csv", "path, header=, delimiter=, dtype=", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    const char *path;
    if (arg_string(I, "read_csv()", "path", s[0], &path)) return -1;
    bool header = true;
    if (arg_opt_bool(I, "read_csv()", "header", s[1], true, &header)) return -1;
    char delim;
    if (csv_delimiter(I, "read_csv()", s[2], p[2], &delim)) return -1;
    tfe_dtype fdt = TFE_FLOAT32;
    if (s[3].kind != V_NIL) {
        const char *d;
        if (arg_string(I, "read_csv()", "dtype", s[3], &d)) return -1;
        int k = dtype_from_name(d);
        if (k != TFE_FLOAT32 && k != TFE_FLOAT64)
            return interp_raise(I, "read_csv(): dtype must be float32 or float64, got \"%s\"", d);
        fdt = (tfe_dtype)k;
    }
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return interp_raise(I, "read_csv(): cannot open '%s': %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 16);
    char *line = NULL, **names = NULL;
    size_t lcap = 0;
    ssize_t len;
    int lineno = 0, rc = 0, ncols = -1;
    int64_t rows = 0, rcap = 0;
    CsvFields fs = {0};
    CsvCol *cols = NULL;
    while ((len = gz_getline(f, &line, &lcap)) >= 0) {
        lineno++;
        const char *why = len && line[len - 1] != '\n' ? gz_failure(f) : NULL;
        if (why) { rc = interp_raise(I, "read_csv(): cannot read '%s': %s", path, why); goto out; }
        size_t nul = csv_nul_at(line, (size_t)len);
        if (nul) { rc = interp_raise(I, CSV_NUL_FMT, "read_csv", path, lineno, nul); goto out; }
        csv_skip_bom(line, lineno == 1);
        if (csv_blank(line)) continue;
        if ((why = csv_split(line, delim, &fs))) { rc = interp_raise(I, "read_csv(): '%s' line %d: %s", path, lineno, why); goto out; }
        if (ncols < 0) {
            ncols = fs.n;
            cols = xcalloc((size_t)ncols, sizeof *cols);
            names = xcalloc((size_t)ncols, sizeof *names);
            for (int c = 0; c < ncols; c++) {
                cols[c].ints = cols[c].nums = cols[c].intlike = true;
                /* an empty name is pandas' "Unnamed: i" (an index column's) */
                if (!header) { if (asprintf(&names[c], "%d", c) < 0) abort(); }
                else if (!*fs.f[c]) { if (asprintf(&names[c], "Unnamed: %d", c) < 0) abort(); }
                else names[c] = xstrdup(fs.f[c]);
                for (int k = 0; k < c; k++)
                    if (!strcmp(names[k], names[c])) {
                        rc = interp_raise(I, "read_csv(): '%s' line %d: the column name '%s' appears twice", path,
                                          lineno, names[c]);
                        goto out;
                    }
            }
            if (header) continue;
        }
        if (fs.n != ncols) {
            rc = interp_raise(I, "read_csv(): '%s' line %d has %d fields, %s %d", path, lineno, fs.n,
                              header ? "the header has" : "the first line has", ncols);
            goto out;
        }
        if (rows == rcap) {
            rcap = rcap ? 2 * rcap : 256;
            for (int c = 0; c < ncols; c++) cols[c].cells = xrealloc(cols[c].cells, sizeof(char *) * (size_t)rcap);
        }
        for (int c = 0; c < ncols; c++) {
            const char *x = fs.f[c];
            double v;
            if (cols[c].nums && !csv_number(x, true, &v)) cols[c].nums = cols[c].ints = false;
            if (!*x) cols[c].ints = false; /* missing: a float column's NaN */
            else if (cols[c].intlike) { /* digits with an optional sign; ints: within int64 */
                const char *q = x + (*x == '-' || *x == '+');
                if (!isdigit((unsigned char)*q) || q[strspn(q, "0123456789")]) cols[c].ints = cols[c].intlike = false;
                else {
                    errno = 0;
                    (void)strtoll(x, NULL, 10);
                    if (errno == ERANGE) cols[c].ints = false, cols[c].big = true;
                }
            }
            cols[c].cells[rows] = xstrdup(x);
        }
        rows++;
    }
    const char *why = gz_failure(f);
    if (why) { rc = interp_raise(I, "read_csv(): cannot read '%s': %s", path, why); goto out; }
    {
        Record *r = record_new();
        Value rv = v_obj(V_RECORD, r); /* owns r from here: an error drops it */
        for (int c = 0; c < ncols; c++) {
            Value col;
            if (cols[c].nums && !(cols[c].big && cols[c].intlike)) {
                tfe_dtype dt = cols[c].ints ? TFE_INT64 : fdt;
                tfe_tensor *t = tensor_new(dt, 1, &rows);
                if (!t) { value_decref(rv); rc = interp_raise_tensor_error(I); goto out; }
                for (int64_t i = 0; i < rows; i++) {
                    double v = 0;
                    if (dt == TFE_INT64) ((int64_t *)tensor_data(t))[i] = strtoll(cols[c].cells[i], NULL, 10);
                    else if (csv_number(cols[c].cells[i], dt == TFE_FLOAT64, &v) && dt == TFE_FLOAT64)
                        ((double *)tensor_data(t))[i] = v;
                    else ((float *)tensor_data(t))[i] = (float)v;
                }
                col = v_tensor_take(t);
            } else {
                Seq *sq = seq_new((int)rows);
                for (int64_t i = 0; i < rows; i++) seq_push_take(sq, v_cstr(cols[c].cells[i]));
                col = v_obj(V_LIST, sq);
            }
            record_set_take(r, names[c], strlen(names[c]), col);
        }
        *out = rv;
    }
out:
    for (int c = 0; c < ncols && cols; c++) {
        for (int64_t i = 0; i < rows; i++) free(cols[c].cells[i]);
        free(cols[c].cells);
        if (names) free(names[c]);
    }
    free(cols);
    free(names);
    free(fs.f);
    free(line);
    gzclose(f);
    return rc;
}

/* data_dir(): the folder of the data sets bundled with tfe (examples/data),
 * wherever the program runs from. Beside the stdlib that import uses: for
 * each folder of module_search_dirs holding data.tfe, its ../examples/data
 * (a source or build tree) or ../data (installed: $(pkgdatadir)/stdlib and
 * $(pkgdatadir)/data); then the installed folder, TFE_DATA_DIR. */
BUILTIN(bi_data_dir)
{
    Value s[1];
    bool p[1];
    if (args_parse(I, "data_dir", "", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    char *dirs[64], *found = NULL;
    int nd = module_search_dirs(I, dirs, 62);
    dirs[nd++] = xstrdup(TFE_DATA_DIR);
    Buf searched = {0};
    for (int i = 0; i < nd; i++) {
        static const char *const rel[] = {"/../examples/data", "/../data"};
        char *mod, *cand, *marker;
        bool last = i == nd - 1; /* TFE_DATA_DIR itself */
        if (asprintf(&mod, "%s/data.tfe", dirs[i]) < 0) abort();
        bool has_stdlib = access(mod, R_OK) == 0;
        free(mod);
        for (int k = 0; k < (last ? 1 : 2) && !found && (has_stdlib || last); k++) {
            if (asprintf(&cand, "%s%s", dirs[i], last ? "" : rel[k]) < 0) abort();
            if (asprintf(&marker, "%s/iris.csv", cand) < 0) abort();
            if (access(marker, R_OK) == 0) found = realpath(cand, NULL);
            else {
                if (searched.len) buf_puts(&searched, ", ");
                buf_puts(&searched, cand);
            }
            free(marker);
            free(cand);
        }
        free(dirs[i]);
    }
    if (!found) {
        int rc = interp_raise(I, "data_dir(): the data sets bundled with tfe were not found (searched: %s); pass "
                              "dir= the folder of a copy of examples/data", searched.len ? searched.s : "nothing");
        free(searched.s);
        return rc;
    }
    free(searched.s);
    *out = v_cstr(found);
    free(found);
    return 0;
}

void builtins_text_register(Interp *I); /* builtins_text.c */

void builtins_io_register(Interp *I)
{
    interp_define_builtin_flags(I, "save_npy", bi_save_npy, NULL, BF_EFFECT, NULL);
    interp_define_builtin_flags(I, "load_npy", bi_load_npy, NULL, BF_EFFECT_VALUE, NULL);
    interp_define_builtin_flags(I, "load_csv", bi_load_csv, NULL, BF_EFFECT_VALUE, NULL);
    interp_define_builtin_flags(I, "read_csv", bi_read_csv, NULL, BF_NOT_STAGEABLE,
                                "read_csv() returns a record, which a staged function cannot take from the host; "
                                "call read_csv() outside it and pass the columns in");
    /* a string: read at trace time, as getenv (the folders do not move) */
    interp_define_builtin(I, "data_dir", bi_data_dir, NULL);
    builtins_text_register(I);
}
