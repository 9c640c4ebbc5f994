/* help.c — help(x), :help NAME and keyword completion read docs/reference.md
 * (compiled in as help_rows by interp/help_gen.awk): one source for the
 * reference and the help, so they cannot disagree. Values are described
 * from what they are (a tensor's dtype and shape, a function's parameters). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "interp/help.h"
#include "interp/internal.h"
#include "util/xalloc.h"

/* --- the reference's rows -------------------------------------------------- */

#define MAX_SPANS 16
#define SPAN_MAX 256

/* The `code spans` of a cell, up to max, each cut to SPAN_MAX - 1 bytes. */
static int cell_spans(const char *cell, char spans[][SPAN_MAX], int max)
{
    int n = 0;
    for (const char *p = cell; *p && n < max; p++) {
        if (*p != '`') continue;
        const char *e = strchr(p + 1, '`');
        if (!e) break;
        size_t len = (size_t)(e - p - 1);
        if (len >= SPAN_MAX) len = SPAN_MAX - 1;
        memcpy(spans[n], p + 1, len);
        spans[n][len] = 0;
        n++;
        p = e;
    }
    return n;
}

/* The names a span of the first cell gives: "zeros(shape)" -> zeros,
 * "@staged" -> staged, "bool int32 int64" -> each, "x.shape" (a field of
 * the tensor x) -> x.shape. Calls f(name, len, ctx); stops when f returns
 * true and returns true then. */
static bool span_names(const char *span, bool (*f)(const char *, size_t, void *), void *ctx)
{
    if (span[0] == 'x' && span[1] == '.') return f(span, strcspn(span, "( "), ctx);
    if (span[0] == '@') span++;
    const char *paren = strchr(span, '(');
    if (paren) return f(span, (size_t)(paren - span), ctx);
    const char *p = span;
    while (*p) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, " ");
        if (n && f(p, n, ctx)) return true;
        p += n;
    }
    return false;
}

static bool name_is(const char *s, size_t n, void *ctx)
{
    const char *want = ctx;
    return strlen(want) == n && memcmp(s, want, n) == 0;
}

static bool row_has(const HelpRow *r, const char *name)
{
    char spans[MAX_SPANS][SPAN_MAX];
    int n = cell_spans(r->names, spans, MAX_SPANS);
    for (int i = 0; i < n; i++)
        if (span_names(spans[i], name_is, (void *)name)) return true;
    return false;
}

static const HelpRow *find_row(const char *name)
{
    for (int i = 0; i < help_nrows; i++)
        if (row_has(&help_rows[i], name)) return &help_rows[i];
    return NULL;
}

/* A span's own parameter list "(shape, dtype=float32)", or NULL when it
 * has none or says "(...)" (the same as the row's first signature). */
static const char *span_params(const char *span)
{
    const char *paren = strchr(span, '(');
    if (!paren || strcmp(paren, "(...)") == 0) return NULL;
    return paren;
}

/* The signatures of name in row r, one per line, into out (size n):
 * its own spans with parameters; else the row's first signature or the
 * section's ("Unary, `name(x)`") under its name; else the bare name. */
static void row_signatures(const HelpRow *r, const char *name, char *out, size_t n)
{
    char spans[MAX_SPANS][SPAN_MAX];
    int k = cell_spans(r->names, spans, MAX_SPANS);
    size_t len = 0;
    out[0] = 0;
    const char *first = NULL;
    for (int i = 0; i < k; i++) {
        const char *pp = span_params(spans[i]);
        if (pp && !first) first = pp;
        const char *s = spans[i][0] == '@' ? spans[i] + 1 : spans[i];
        if (pp && name_is(s, (size_t)(strchr(s, '(') - s), (void *)name) && len + 1 < n) {
            int w = snprintf(out + len, n - len, "%s%s", len ? "\n" : "", s);
            len = w < 0 || (size_t)w >= n - len ? n - 1 : len + (size_t)w;
        }
    }
    if (len) return;
    if (name[0] == 'x' && name[1] == '.') {
        /* a tensor's field ("x.T" in the row of transpose) is its own signature */
        snprintf(out, n, "%s", name);
        return;
    }
    if (!first) {
        /* the section's signature: "`name(x, axis=nil, keepdims=false)`" */
        const char *p = strstr(r->intro, "`name(");
        if (p) {
            const char *e = strchr(p + 1, '`');
            if (e) {
                snprintf(out, n, "%s%.*s", name, (int)(e - p - 5), p + 5);
                return;
            }
        }
        snprintf(out, n, "%s", name);
        return;
    }
    snprintf(out, n, "%s%s", name, first);
}

/* Text with the backticks dropped (they mark code in the Markdown). */
static void put_plain(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s != '`') fputc(*s, f);
}

/* Collects the row's names other than the one asked for. */
static bool collect_other(const char *s, size_t n, void *ctx)
{
    void **c = ctx;
    char *buf = c[0];
    const char *name = c[1];
    if (strlen(name) == n && memcmp(s, name, n) == 0) return false;
    size_t len = strlen(buf);
    if (len + n + 3 < 512) snprintf(buf + len, 512 - len, "%s%.*s", len ? ", " : "", (int)n, s);
    return false;
}

static void print_row(FILE *f, const HelpRow *r, const char *name)
{
    char sig[1024];
    row_signatures(r, name, sig, sizeof sig);
    fprintf(f, "%s\n    ", sig);
    put_plain(f, r->what);
    fputs("\n    example: ", f);
    put_plain(f, r->example);
    fputc('\n', f);
    /* the other names of the row ("zeros" shows "ones") */
    char spans[MAX_SPANS][SPAN_MAX], others[512] = "";
    int k = cell_spans(r->names, spans, MAX_SPANS);
    void *ctx[2] = {others, (void *)name};
    for (int i = 0; i < k; i++) span_names(spans[i], collect_other, ctx);
    if (*others) fprintf(f, "    see also: %s\n", others);
}

/* --- sections -------------------------------------------------------------- */

/* Does query name the section: its title ("Reductions", case ignored), the
 * title's first word ("Autodiff"), or a name in backticks ("nn")? */
static bool section_matches(const char *title, const char *q)
{
    size_t ql = strlen(q);
    if (!ql) return false;
    char plain[256];
    size_t n = 0;
    for (const char *s = title; *s && n + 1 < sizeof plain; s++)
        if (*s != '`') plain[n++] = *s;
    plain[n] = 0;
    if (strcasecmp(plain, q) == 0) return true;
    if (strncasecmp(plain, q, ql) == 0 && (plain[ql] == ' ' || plain[ql] == ':' || plain[ql] == 0))
        return true;
    char spans[MAX_SPANS][SPAN_MAX];
    int k = cell_spans(title, spans, MAX_SPANS);
    for (int i = 0; i < k; i++)
        if (strcmp(spans[i], q) == 0) return true;
    return false;
}

typedef struct NameList { FILE *f; int col; char last[SPAN_MAX]; } NameList;

static bool print_name_list(const char *s, size_t n, void *ctx)
{
    NameList *nl = ctx;
    /* range(stop), range(start, stop, step=1): one name */
    if (strlen(nl->last) == n && memcmp(nl->last, s, n) == 0) return false;
    snprintf(nl->last, sizeof nl->last, "%.*s", (int)n, s);
    if (nl->col > 2 && nl->col + (int)n + 2 > 78) {
        fputs(",\n  ", nl->f);
        nl->col = 2;
    } else if (nl->col > 2) {
        fputs(", ", nl->f);
        nl->col += 2;
    }
    fprintf(nl->f, "%.*s", (int)n, s);
    nl->col += (int)n;
    return false;
}

/* The names of every row of a section on wrapped lines. */
static void section_names(FILE *f, const char *title)
{
    NameList nl = {.f = f, .col = 2};
    fputs("  ", f);
    for (int i = 0; i < help_nrows; i++) {
        if (strcmp(help_rows[i].section, title) != 0) continue;
        char spans[MAX_SPANS][SPAN_MAX];
        int k = cell_spans(help_rows[i].names, spans, MAX_SPANS);
        for (int j = 0; j < k; j++) span_names(spans[j], print_name_list, &nl);
    }
    fputc('\n', f);
}

static bool print_section(FILE *f, const char *q)
{
    for (int i = 0; i < help_nrows; i++) {
        const char *title = help_rows[i].section;
        if (i > 0 && strcmp(title, help_rows[i - 1].section) == 0) continue;
        if (!section_matches(title, q)) continue;
        put_plain(f, title);
        fputs("\n", f);
        for (int j = i; j < help_nrows && strcmp(help_rows[j].section, title) == 0; j++) {
            fputs("  ", f);
            put_plain(f, help_rows[j].names);
            fputs(": ", f);
            put_plain(f, help_rows[j].what);
            fputc('\n', f);
        }
        fputs("help(\"name\") shows one of them.\n", f);
        return true;
    }
    return false;
}

void help_topics(FILE *f, bool repl)
{
    fputs("help(name) or help(\"name\") shows a function's signature and what it does;\n"
          "help(value) describes a value. The topics (help(\"Shapes\") lists one):\n", f);
    for (int i = 0; i < help_nrows; i++) {
        const char *title = help_rows[i].section;
        if (i > 0 && strcmp(title, help_rows[i - 1].section) == 0) continue;
        put_plain(f, title);
        fputs(":\n", f);
        section_names(f, title);
    }
    if (repl)
        fputs("REPL commands (:help commands shows them): :help [name], :history, :reload NAME, :quit\n",
              f);
    fputs("All of it is in docs/reference.md; the manual: man tfe (in a build tree: man ./docs/tfe.1).\n", f);
}

/* --- values ---------------------------------------------------------------- */

/* The signature under a given name (a module's field bound to a lambda). */
static char *signature_as(Obj *o, const char *as);

char *closure_signature(Obj *o) { return signature_as(o, NULL); }

static char *signature_as(Obj *o, const char *as)
{
    Closure *c = (Closure *)o;
    Node *fn = c->fn;
    size_t cap = 128, len = 0;
    char *s = xmalloc(cap);
    s[0] = 0;
#define ADD(p, n)                                                               \
    do {                                                                        \
        size_t n_ = (n);                                                        \
        while (len + n_ + 1 > cap) s = xrealloc(s, cap *= 2);                   \
        memcpy(s + len, (p), n_);                                               \
        len += n_;                                                              \
        s[len] = 0;                                                             \
    } while (0)
    const char *name = as ? as : c->name ? c->name : "fn";
    ADD(name, strlen(name));
    ADD("(", 1);
    for (int i = 0; i < fn->list.n; i++) {
        Node *p = fn->list.items[i];
        if (i) ADD(", ", 2);
        ADD(p->str, strlen(p->str));
        if (p->a && p->a->loc.src && p->a->loc.off >= 0 &&
            (size_t)p->a->loc.off + (size_t)p->a->loc.len <= p->a->loc.src->len) {
            ADD("=", 1);
            ADD(p->a->loc.src->text + p->a->loc.off, (size_t)p->a->loc.len);
        }
    }
    ADD(")", 1);
#undef ADD
    return s;
}

/* The comment lines right above a function's definition, its doc. */
static void print_doc_comment(FILE *f, const Node *fn)
{
    const Source *src = fn->loc.src;
    if (!src || fn->loc.off < 0 || (size_t)fn->loc.off > src->len) return;
    const char *text = src->text;
    /* the start of the line of `fn` (or of its decorator) */
    size_t start = (size_t)fn->loc.off;
    while (start > 0 && text[start - 1] != '\n') start--;
    size_t top = start;
    for (;;) {
        if (top == 0) break;
        size_t ls = top - 1;
        while (ls > 0 && text[ls - 1] != '\n') ls--;
        size_t i = ls;
        while (i < top && (text[i] == ' ' || text[i] == '\t')) i++;
        if (i < top && text[i] == '@') { start = ls; top = ls; continue; }
        if (i >= top || text[i] != '#') break;
        top = ls;
    }
    for (size_t p = top; p < start;) {
        size_t e = p;
        while (e < start && text[e] != '\n') e++;
        size_t i = p;
        while (i < e && (text[i] == ' ' || text[i] == '\t')) i++;
        if (i < e && text[i] == '#') {
            i++;
            if (i < e && text[i] == ' ') i++;
            fprintf(f, "    %.*s\n", (int)(e - i), text + i);
        }
        p = e + 1;
    }
}

/* "nn" for a function bound in an imported module (nn.dense), "" for one
 * of the program or the REPL. */
static void module_of(Interp *I, const Closure *c, char *out, size_t n)
{
    out[0] = 0;
    Record *mods = I->modules;
    for (int i = 0; i < mods->n; i++) {
        if (mods->vals[i].kind != V_MODULE) continue;
        Record *m = (Record *)mods->vals[i].u.o;
        for (int j = 0; j < m->n; j++)
            if (m->vals[j].kind == V_FN && m->vals[j].u.o == &c->h && m->module_name) {
                snprintf(out, n, "%s", m->module_name);
                return;
            }
    }
}

static void help_closure(Interp *I, FILE *f, Closure *c)
{
    char mod[128];
    module_of(I, c, mod, sizeof mod);
    char qual[300];
    snprintf(qual, sizeof qual, "%s%s%s", mod, *mod ? "." : "", c->name ? c->name : "");
    const HelpRow *r = c->name && *mod ? find_row(qual) : NULL;
    char *sig = closure_signature(&c->h);
    fprintf(f, "%s%s%s\n", *mod ? mod : "", *mod ? "." : "", sig);
    free(sig);
    const Source *src = c->fn->loc.src;
    fprintf(f, "    a function defined at %s:%d\n", src ? src->name : "?", c->fn->loc.line);
    print_doc_comment(f, c->fn);
    if (r) {
        fputs("    ", f);
        put_plain(f, r->what);
        fputs("\n    example: ", f);
        put_plain(f, r->example);
        fputc('\n', f);
    }
}

/* "an int64 tensor", "a float32 tensor" */
static const char *article(tfe_dtype dt)
{
    return dtype_name(dt)[0] == 'i' ? "an" : "a";
}

static void help_tensor(FILE *f, Value v)
{
    Value out;
    Interp *I = interp_current();
    char sh[200];
    if (v.kind == V_SCALAR) {
        fprintf(f, "%s %s scalar (shape ()) on cpu:0\n", article((tfe_dtype)v.dtype), dtype_name((tfe_dtype)v.dtype));
    } else {
        tfe_tensor *t = v.u.t;
        shape_str(t->rank, t->shape, sh);
        const char *dev = "cpu:0";
        char buf[32];
        if (I && tensor_getattr(I, v, "device", &out) == 0) {
            if (out.kind == V_STR) snprintf(buf, sizeof buf, "%s", ((Str *)out.u.o)->s), dev = buf;
            value_decref(out);
        }
        fprintf(f, "%s %s tensor of shape %s on %s\n", article(t->dtype), dtype_name(t->dtype), sh, dev);
    }
    /* x.shape, x.T, and the methods where there are some: wrapped lines */
    fputs("    fields:", f);
    const char *const *names = interp_tensor_attr_names();
    int col = 11;
    for (int i = 0; names[i]; i++) {
        int w = (int)strlen(names[i]) + 2;
        if (col + w > 78) {
            fputs(i ? ",\n       " : "\n       ", f);
            col = 7;
        } else if (i) {
            fputc(',', f);
            col++;
        }
        fprintf(f, " %s", names[i]);
        col += w - 1;
    }
    fputs("\n    not a variable: gradients reach it only while a tape watches it (help(\"tape\"))\n", f);
}

static void help_record(FILE *f, Value v)
{
    Record *r = (Record *)v.u.o;
    if (v.kind == V_MODULE)
        fprintf(f, "the module %s, with %d names:\n", r->module_name ? r->module_name : "?", r->n);
    else
        fprintf(f, "a record with %d field%s:\n", r->n, r->n == 1 ? "" : "s");
    for (int i = 0; i < r->n; i++) {
        Value x = r->vals[i];
        if (x.kind == V_FN) {
            char *sig = signature_as(x.u.o, r->keys[i]->s);
            fprintf(f, "  %s\n", sig);
            free(sig);
        } else {
            char *s = value_repr(x);
            /* long values (tensors) are cut: this is an overview */
            char *nl = strchr(s, '\n');
            if (nl) strcpy(nl, " ...");
            if (strlen(s) > 60) strcpy(s + 57, "...");
            fprintf(f, "  %s: %s\n", r->keys[i]->s, s);
            free(s);
        }
    }
}

void help_value(Interp *I, Value v, FILE *f)
{
    switch (v.kind) {
    case V_NIL: fputs("nil\n", f); return;
    case V_SCALAR: case V_TENSOR: help_tensor(f, v); return;
    case V_FN: help_closure(I, f, (Closure *)v.u.o); return;
    case V_RECORD: case V_MODULE: help_record(f, v); return;
    case V_BUILTIN: {
        Builtin *b = (Builtin *)v.u.o;
        if (b->self.kind != V_NIL) {
            /* x.sum is sum bound to x: the built-in's entry, if it has one */
            const HelpRow *r = find_row(b->name);
            /* a string's own methods are named as their rows, "s.split" */
            bool own = strchr(b->name, '.') != NULL;
            fprintf(f, "%s: a method of a %s%s\n", b->name, value_kind_name(b->self),
                    r && !own ? ", the built-in below with it as the first argument" : "");
            if (r) print_row(f, r, b->name);
            return;
        }
        const HelpRow *r = find_row(b->name);
        if (r) print_row(f, r, b->name);
        else fprintf(f, "%s: a built-in function\n", b->name);
        return;
    }
    case V_OBJECT: {
        Object *o = (Object *)v.u.o;
        char *s = o->cls->repr ? o->cls->repr(v.u.o) : xstrdup(o->cls->name);
        fprintf(f, "%s\n", s);
        free(s);
        Value x;
        if (o->cls->getattr && o->cls->getattr(I, v.u.o, "trainable", &x) == 0) {
            /* a variable: its value's facts and how it is trained */
            bool tr = x.kind == V_SCALAR && x.u.i;
            value_decref(x);
            if (o->cls->getattr(I, v.u.o, "device", &x) == 0) {
                if (x.kind == V_STR) fprintf(f, "    on %s\n", ((Str *)x.u.o)->s);
                value_decref(x);
            }
            fprintf(f, "    %s\n", tr ? "trainable: every tape records its reads (params() finds it)"
                                       : "not trainable (params() leaves it out)");
        }
        const HelpRow *r = find_row(o->cls->name);
        if (r) {
            fputs("    ", f);
            put_plain(f, r->what);
            fputc('\n', f);
        }
        return;
    }
    default: {
        char *s = value_repr(v);
        fprintf(f, "a %s: %s\n", value_kind_name(v), s);
        free(s);
        return;
    }
    }
}

/* --- names ----------------------------------------------------------------- */

bool help_lookup_value(Interp *I, const char *name, Value *out)
{
    char base[256];
    const char *dot = strchr(name, '.');
    size_t bl = dot ? (size_t)(dot - name) : strlen(name);
    if (bl >= sizeof base) return false;
    memcpy(base, name, bl);
    base[bl] = 0;
    Value v;
    int slot = global_slot(I, base, false);
    if (slot >= 0 && slot < I->globals->nslots && !(I->globals->slots[slot].kind == V_NIL &&
                                                    I->globals->slots[slot].dtype == 1)) {
        v = I->globals->slots[slot];
    } else {
        int b = builtin_index(I, base);
        if (b < 0) return false;
        v = I->builtin_vals[b];
    }
    while (dot) {
        const char *field = dot + 1;
        dot = strchr(field, '.');
        size_t fl = dot ? (size_t)(dot - field) : strlen(field);
        if (v.kind != V_RECORD && v.kind != V_MODULE) return false;
        Value *x = record_get((Record *)v.u.o, field, fl);
        if (!x) return false;
        v = *x;
    }
    *out = v;
    return true;
}

static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    int d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

typedef struct Near { const char *want; int best; char names[3][64]; int n; } Near;

static void near_add(Near *nr, const char *s, size_t n)
{
    char name[64];
    if (n >= sizeof name) return;
    memcpy(name, s, n);
    name[n] = 0;
    int d = edit_distance(nr->want, name);
    size_t wl = strlen(nr->want);
    int limit = wl <= 3 ? 1 : wl <= 6 ? 2 : 3;
    if (d > limit || d > nr->best) return;
    if (d < nr->best) { nr->best = d; nr->n = 0; }
    for (int i = 0; i < nr->n; i++)
        if (strcmp(nr->names[i], name) == 0) return;
    if (nr->n < 3) strcpy(nr->names[nr->n++], name);
}

static bool near_span(const char *s, size_t n, void *ctx)
{
    near_add(ctx, s, n);
    return false;
}

void help_name(Interp *I, const char *name, FILE *f)
{
    const HelpRow *r = find_row(name);
    if (r) {
        print_row(f, r, name);
        return;
    }
    if (print_section(f, name)) return;
    Value v;
    if (help_lookup_value(I, name, &v)) {
        help_value(I, v, f);
        return;
    }
    if (name[strspn(name, " \t\n")] == 0) { /* help(""): nothing to be near */
        fputs("help takes a name: help(\"matmul\") or help(matmul); help() lists the topics\n", f);
        return;
    }
    fprintf(f, "no help for '%s'", name);
    Near nr = {.want = name, .best = 99};
    for (int i = 0; i < help_nrows; i++) {
        char spans[MAX_SPANS][SPAN_MAX];
        int k = cell_spans(help_rows[i].names, spans, MAX_SPANS);
        for (int j = 0; j < k; j++) span_names(spans[j], near_span, &nr);
    }
    Scope *g = I->global_scope;
    for (int i = 0; i < g->n; i++) near_add(&nr, g->names[i], strlen(g->names[i]));
    if (nr.n) {
        fputs(" (did you mean ", f);
        for (int i = 0; i < nr.n; i++)
            fprintf(f, "%s'%s'", i == 0 ? "" : i == nr.n - 1 ? " or " : ", ", nr.names[i]);
        fputs("?)", f);
    }
    fputs("; help() lists the topics\n", f);
}

/* --- parameters, for completion -------------------------------------------- */

/* "x.sum" where x is a tensor (or a variable) and sum one of its methods:
 * the method's name, else NULL. */
static const char *tensor_method_of(Interp *I, const char *fname)
{
    const char *dot = strrchr(fname, '.');
    if (!dot) return NULL;
    char base[256];
    size_t bl = (size_t)(dot - fname);
    if (bl >= sizeof base) return NULL;
    memcpy(base, fname, bl);
    base[bl] = 0;
    Value v;
    if (!help_lookup_value(I, base, &v)) return NULL;
    if (!(v.kind == V_SCALAR || v.kind == V_TENSOR ||
          (v.kind == V_OBJECT && ((Object *)v.u.o)->cls->to_tensor)))
        return NULL;
    const char *const *names = interp_tensor_attr_names();
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], dot + 1) == 0) return dot + 1;
    return NULL;
}

void help_params(Interp *I, const char *fname, void (*add)(const char *, void *), void *ctx)
{
    Value v;
    if (help_lookup_value(I, fname, &v) && v.kind == V_FN) {
        Node *fn = ((Closure *)v.u.o)->fn;
        for (int i = 0; i < fn->list.n; i++) add(fn->list.items[i]->str, ctx);
        return;
    }
    /* x.sum(ax<Tab>: sum's parameters after the first, which x is */
    const char *method = tensor_method_of(I, fname);
    int skip = method ? 1 : 0;
    const HelpRow *r = find_row(method ? method : fname);
    if (!r) return;
    if (method) fname = method;
    char sig[1024];
    row_signatures(r, fname, sig, sizeof sig);
    /* every "name" or "name=default" inside the parentheses, each line */
    for (char *line = sig; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *p = strchr(line, '(');
        int depth = 0;
        bool at_start = true;
        skip = method ? 1 : 0;
        for (p = p ? p + 1 : NULL; p && *p; p++) {
            if (*p == '(' || *p == '[') depth++;
            else if (*p == ')' || *p == ']') { if (depth-- == 0) break; }
            else if (*p == ',' && depth == 0) { at_start = true; continue; }
            if (at_start && depth == 0 && (isalpha((unsigned char)*p) || *p == '_')) {
                size_t n = 0;
                while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
                char name[64];
                if (skip > 0) {
                    skip--;
                } else if (n < sizeof name) {
                    memcpy(name, p, n);
                    name[n] = 0;
                    add(name, ctx);
                }
                p += n - 1;
                at_start = false;
            } else if (*p != ' ') {
                at_start = false;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
}

/* --- the built-in ---------------------------------------------------------- */

/* help(), help(x), help("name"): prints and returns nil. */
BUILTIN(bi_help)
{
    (void)data;
    if (nkw) return interp_raise(I, "help: takes no keyword argument ('%s')", kwnames[0]->s);
    if (argc > 1) return interp_raise(I, "help: takes one argument (a value or a name), got %d", argc);
    fflush(stdout);
    if (argc == 0) help_topics(stdout, I->repl);
    else if (argv[0].kind == V_STR) help_name(I, ((Str *)argv[0].u.o)->s, stdout);
    else help_value(I, argv[0], stdout);
    fflush(stdout);
    *out = v_nil();
    return 0;
}

void builtins_help_register(Interp *I)
{
    interp_define_builtin_flags(I, "help", bi_help, NULL, BF_NOT_STAGEABLE,
                                "help() cannot be used inside a staged function (it would print once, at "
                                "trace time); call it outside it");
}

/* --- the REPL's echo ------------------------------------------------------- */

char *value_echo_repr(Value v)
{
    if (v.kind == V_FN) {
        char *sig = closure_signature(v.u.o), *s = NULL;
        if (asprintf(&s, "<fn %s>", sig) < 0) s = NULL;
        free(sig);
        return s ? s : xstrdup("<fn>");
    }
    if (v.kind == V_OBJECT) {
        /* an object that stands for a tensor (a variable): its value too */
        Object *o = (Object *)v.u.o;
        if (o->cls->to_tensor && o->cls->repr) {
            char *r = o->cls->repr(v.u.o);
            tfe_tensor *t = o->cls->to_tensor(v.u.o);
            if (!t) return r;
            Value tv = value_from_tensor_take(t);
            char *vs = value_repr(tv);
            value_decref(tv);
            size_t rl = strlen(r);
            if (rl && r[rl - 1] == '>') r[--rl] = 0;
            char *s = NULL;
            if (asprintf(&s, "%s = %s>", r, vs) < 0) s = NULL;
            free(r);
            free(vs);
            return s ? s : value_repr(v);
        }
    }
    return value_repr(v);
}
