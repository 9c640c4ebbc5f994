/* builtins_str.c — Python's string methods (s.split(), sep.join(xs), s.strip(),
 * ...) bound to the string as self, and ord()/chr(). tfe strings are bytes
 * (len, indexing and for count bytes), so these work on bytes too: lower()
 * and upper() change ASCII letters only, ord() takes a one-byte string and
 * chr() gives one. Strings are host values: staged code runs these at trace
 * time, as len() and str(). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "util/xalloc.h"

static Str *self_str(const Value *argv) { return (Str *)argv[0].u.o; }

/* Python's str.isspace() set, for split() and strip() with no argument. */
static bool is_ws(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* The methods parse their arguments after self (argv[0]), so that a count
 * in an error is the caller's: "split() takes 1 argument but 2 were given". */

/* A string argument as bytes and length; raised when it is not a string. */
static int str_arg(Interp *I, const char *fn, const char *arg, Value v, const char **s, size_t *n)
{
    char call[32]; /* "split()", as the other builtins' errors name them */
    snprintf(call, sizeof call, "%s()", fn);
    if (v.kind != V_STR) return arg_error(I, call, arg, "a string", v);
    *s = ((Str *)v.u.o)->s;
    *n = ((Str *)v.u.o)->len;
    return 0;
}

/* The first occurrence of needle (m bytes) in hay[from..n), or -1. */
static int64_t find_at(const char *hay, size_t n, const char *needle, size_t m, size_t from)
{
    if (m == 0) return from <= n ? (int64_t)from : -1;
    for (size_t i = from; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return (int64_t)i;
    return -1;
}

/* s.split(sep=nil): nil splits at runs of whitespace and drops the ends'
 * (Python's "a  b ".split() is ["a", "b"]); a separator splits at each one,
 * keeping empty pieces ("a,,b".split(",") is ["a", "", "b"]). A list. */
static int str_split(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn, const Value *kwv,
                     Value *out, void *data)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "split", "sep=", argc - 1, argv + 1, nkw, kwn, kwv, a + 1, p + 1)) return -1;
    Str *s = self_str(argv);
    Seq *r = seq_new(8);
    if (a[1].kind == V_NIL) {
        size_t i = 0;
        for (;;) {
            while (i < s->len && is_ws((unsigned char)s->s[i])) i++;
            if (i >= s->len) break;
            size_t j = i;
            while (j < s->len && !is_ws((unsigned char)s->s[j])) j++;
            seq_push_take(r, v_str(s->s + i, j - i));
            i = j;
        }
    } else {
        const char *sep = NULL;
        size_t m = 0;
        if (str_arg(I, "split", "sep", a[1], &sep, &m)) { value_decref(v_obj(V_LIST, r)); return -1; }
        if (m == 0) {
            value_decref(v_obj(V_LIST, r));
            return interp_raise(I, "split(): empty separator (for the characters of s write [c for c in s])");
        }
        size_t i = 0;
        for (;;) {
            int64_t k = find_at(s->s, s->len, sep, m, i);
            size_t end = k < 0 ? s->len : (size_t)k;
            seq_push_take(r, v_str(s->s + i, end - i));
            if (k < 0) break;
            i = end + m;
        }
    }
    *out = v_obj(V_LIST, r);
    return 0;
}

/* sep.join(xs): the strings of a list or tuple (or the bytes of a string)
 * with sep between them; any other item is an error that names it. */
static int str_join(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn, const Value *kwv,
                    Value *out, void *data)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "join", "xs", argc - 1, argv + 1, nkw, kwn, kwv, a + 1, p + 1)) return -1;
    Str *sep = self_str(argv);
    Value xs = a[1];
    if (xs.kind == V_STR) {
        Str *x = (Str *)xs.u.o;
        size_t len = x->len ? x->len + (x->len - 1) * sep->len : 0;
        char *b = xmalloc(len + 1), *q = b;
        for (size_t i = 0; i < x->len; i++) {
            if (i) { memcpy(q, sep->s, sep->len); q += sep->len; }
            *q++ = x->s[i];
        }
        *out = v_str(b, len);
        free(b);
        return 0;
    }
    if (xs.kind != V_LIST && xs.kind != V_TUPLE) return arg_error(I, "join()", "xs", "a list or tuple of strings", xs);
    Seq *s = (Seq *)xs.u.o;
    size_t len = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->items[i].kind != V_STR)
            return interp_raise(I, "join(): item %d is not a string but %s (convert it with str(x))", i,
                                value_kind_name(s->items[i]));
        len += ((Str *)s->items[i].u.o)->len + (i ? sep->len : 0);
    }
    char *b = xmalloc(len + 1), *q = b;
    for (int i = 0; i < s->n; i++) {
        Str *x = (Str *)s->items[i].u.o;
        if (i) { memcpy(q, sep->s, sep->len); q += sep->len; }
        memcpy(q, x->s, x->len);
        q += x->len;
    }
    *out = v_str(b, len);
    free(b);
    return 0;
}

/* s.strip(chars=nil), lstrip, rstrip: drop the bytes of chars (nil:
 * whitespace) from both ends, the left or the right. data: 1 left, 2 right,
 * 3 both. */
static int str_strip(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn, const Value *kwv,
                     Value *out, void *data)
{
    int ends = (int)(intptr_t)data;
    const char *fn = ends == 1 ? "lstrip" : ends == 2 ? "rstrip" : "strip";
    Value a[2];
    bool p[2];
    if (args_parse(I, fn, "chars=", argc - 1, argv + 1, nkw, kwn, kwv, a + 1, p + 1)) return -1;
    Str *s = self_str(argv);
    const char *chars = NULL;
    size_t nc = 0;
    if (a[1].kind != V_NIL && str_arg(I, fn, "chars", a[1], &chars, &nc)) return -1;
#define DROP(c) (chars ? memchr(chars, (c), nc) != NULL : is_ws((unsigned char)(c)))
    size_t i = 0, j = s->len;
    if (ends & 1) while (i < j && DROP(s->s[i])) i++;
    if (ends & 2) while (j > i && DROP(s->s[j - 1])) j--;
#undef DROP
    *out = v_str(s->s + i, j - i);
    return 0;
}

/* s.lower(), s.upper(): ASCII letters; other bytes (UTF-8 included) stay. */
static int str_case(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn, const Value *kwv,
                    Value *out, void *data)
{
    (void)kwn; (void)kwv;
    bool up = data != NULL;
    if (argc != 1 || nkw) return interp_raise(I, "%s() takes no arguments", up ? "upper" : "lower");
    Str *s = self_str(argv);
    char *b = xmalloc(s->len + 1);
    for (size_t i = 0; i < s->len; i++) {
        char c = s->s[i];
        if (up && c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
        else if (!up && c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        b[i] = c;
    }
    *out = v_str(b, s->len);
    free(b);
    return 0;
}

/* s.replace(old, new): every non-overlapping old, left to right, by new (an
 * empty old puts new between all bytes and at both ends, as Python). */
static int str_replace(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn, const Value *kwv,
                       Value *out, void *data)
{
    (void)data;
    Value a[3];
    bool p[3];
    if (args_parse(I, "replace", "old, new", argc - 1, argv + 1, nkw, kwn, kwv, a + 1, p + 1)) return -1;
    Str *s = self_str(argv);
    const char *old = NULL, *nw = NULL;
    size_t no = 0, nn = 0;
    if (str_arg(I, "replace", "old", a[1], &old, &no) || str_arg(I, "replace", "new", a[2], &nw, &nn)) return -1;
    size_t cap = s->len + 16, len = 0;
    char *b = xmalloc(cap);
#define PUT(src, k) do { \
        if (len + (k) + 1 > cap) { while (len + (k) + 1 > cap) cap *= 2; b = xrealloc(b, cap); } \
        memcpy(b + len, (src), (k)); len += (k); } while (0)
    if (no == 0) {
        for (size_t i = 0; i < s->len; i++) { PUT(nw, nn); PUT(s->s + i, 1); }
        PUT(nw, nn);
    } else {
        size_t i = 0;
        for (;;) {
            int64_t k = find_at(s->s, s->len, old, no, i);
            size_t end = k < 0 ? s->len : (size_t)k;
            PUT(s->s + i, end - i);
            if (k < 0) break;
            PUT(nw, nn);
            i = end + no;
        }
    }
#undef PUT
    *out = v_str(b, len);
    free(b);
    return 0;
}

/* s.startswith(p), s.endswith(p): p a string or a tuple of strings (any of
 * them). data: NULL start, non-NULL end. */
static int str_affix(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn, const Value *kwv,
                     Value *out, void *data)
{
    bool end = data != NULL;
    const char *fn = end ? "endswith" : "startswith";
    Value a[2];
    bool p[2];
    if (args_parse(I, fn, "p", argc - 1, argv + 1, nkw, kwn, kwv, a + 1, p + 1)) return -1;
    Str *s = self_str(argv);
    int n = a[1].kind == V_TUPLE ? ((Seq *)a[1].u.o)->n : 1;
    const Value *ps = a[1].kind == V_TUPLE ? ((Seq *)a[1].u.o)->items : &a[1];
    bool hit = false;
    for (int i = 0; i < n; i++) {
        const char *x;
        size_t m;
        if (ps[i].kind != V_STR)
            return arg_error(I, end ? "endswith()" : "startswith()", "p", "a string or a tuple of strings", ps[i]);
        x = ((Str *)ps[i].u.o)->s;
        m = ((Str *)ps[i].u.o)->len;
        if (m <= s->len && memcmp(end ? s->s + s->len - m : s->s, x, m) == 0) hit = true;
    }
    *out = v_bool(hit);
    return 0;
}

/* s.find(sub): the byte index of the first sub, -1 when absent;
 * s.count(sub): how many non-overlapping subs (an empty sub: len(s) + 1).
 * data: NULL find, non-NULL count. */
static int str_search(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn, const Value *kwv,
                      Value *out, void *data)
{
    bool count = data != NULL;
    const char *fn = count ? "count" : "find";
    Value a[2];
    bool p[2];
    if (args_parse(I, fn, "sub", argc - 1, argv + 1, nkw, kwn, kwv, a + 1, p + 1)) return -1;
    Str *s = self_str(argv);
    const char *sub = NULL;
    size_t m = 0;
    if (str_arg(I, fn, "sub", a[1], &sub, &m)) return -1;
    if (!count) {
        *out = v_int(find_at(s->s, s->len, sub, m, 0));
        return 0;
    }
    int64_t n = 0;
    if (m == 0) n = (int64_t)s->len + 1;
    else
        for (int64_t k = find_at(s->s, s->len, sub, m, 0); k >= 0; k = find_at(s->s, s->len, sub, m, (size_t)k + m))
            n++;
    *out = v_int(n);
    return 0;
}

/* The methods of a string: the name, the bound builtin's name (as
 * docs/reference.md's row, so help(s.split) finds it), the function and the
 * variant it gets as data. */
static const struct { const char *name, *full; BuiltinFn fn; intptr_t data; } str_methods[] = {
    {"split", "s.split", str_split, 0},           {"join", "sep.join", str_join, 0},
    {"strip", "s.strip", str_strip, 3},           {"lstrip", "s.lstrip", str_strip, 1},
    {"rstrip", "s.rstrip", str_strip, 2},         {"lower", "s.lower", str_case, 0},
    {"upper", "s.upper", str_case, 1},            {"replace", "s.replace", str_replace, 0},
    {"startswith", "s.startswith", str_affix, 0}, {"endswith", "s.endswith", str_affix, 1},
    {"find", "s.find", str_search, 0},            {"count", "s.count", str_search, 1},
};
#define NSTR_METHODS (sizeof str_methods / sizeof *str_methods)

const char *const *interp_string_method_names(void)
{
    static const char *names[NSTR_METHODS + 1];
    if (!names[0])
        for (size_t i = 0; i < NSTR_METHODS; i++) names[i] = str_methods[i].name;
    return names;
}

int string_method(Interp *I, Value self, const char *name, Value *out)
{
    (void)I;
    for (size_t i = 0; i < NSTR_METHODS; i++) {
        if (strcmp(str_methods[i].name, name)) continue;
        Value m = builtin_new(str_methods[i].full, str_methods[i].fn, (void *)str_methods[i].data);
        value_incref(self);
        ((Builtin *)m.u.o)->self = self;
        *out = m;
        return 0;
    }
    return 1;
}

/* ord(c): the byte of a one-byte string, 0..255 */
BUILTIN(bi_ord)
{
    Value a[1];
    bool p[1];
    if (args_parse(I, "ord", "c", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR) return arg_error(I, "ord()", "c", "a one-byte string", a[0]);
    Str *s = (Str *)a[0].u.o;
    if (s->len != 1)
        return interp_raise(I, "ord(): expected a one-byte string, got %zu bytes (tfe strings are bytes: "
                               "s[i] is one byte, and a non-ASCII character is several)", s->len);
    *out = v_int((unsigned char)s->s[0]);
    return 0;
}

/* chr(i): the one-byte string of byte i, 0..255 */
BUILTIN(bi_chr)
{
    Value a[1];
    bool p[1];
    int64_t i;
    if (args_parse(I, "chr", "i", argc, argv, nkw, kwnames, kwvals, a, p) || arg_int(I, "chr()", "i", a[0], &i))
        return -1;
    if (i < 0 || i > 255)
        return interp_raise(I, "chr(): %lld is not a byte, 0..255 (tfe strings are bytes)", (long long)i);
    char c = (char)(unsigned char)i;
    *out = v_str(&c, 1);
    return 0;
}

void builtins_str_register(Interp *I)
{
    interp_define_builtin(I, "ord", bi_ord, NULL);
    interp_define_builtin(I, "chr", bi_chr, NULL);
}
