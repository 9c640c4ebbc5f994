/* print.c — how values print (docs/language.md "Values"): value_str for print(),
 * value_repr inside containers (strings quoted), value_kind_name for errors.
 * Containers print as source that would rebuild them; cycles print as `...`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/value.h"

#include "util/buf.h"
#include "util/xalloc.h"

static void buf_take(Buf *b, char *s)
{
    if (s) buf_puts(b, s);
    else buf_puts(b, "<?>");
    free(s);
}

static char *buf_finish(Buf *b)
{
    buf_grow(b, 0);
    b->s[b->len] = '\0';
    return b->s;
}

/* Containers being printed, outermost first: a container already on this
 * stack is a cycle. Depth is capped so deep nesting cannot overflow the C
 * stack. */
#define MAX_DEPTH 200
typedef struct Ctx { const Obj *open[MAX_DEPTH]; int depth; bool ascii; } Ctx;

static void put_value(Buf *b, Value v, bool quoted, Ctx *cx);

static void put_scalar(Buf *b, Value v)
{
    char tmp[64];
    if (v.dtype == TFE_BOOL) {
        buf_puts(b, v.u.i ? "true" : "false");
    } else if (dtype_is_int(v.dtype)) {
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        buf_puts(b, tmp);
    } else {
        format_float_shortest(scalar_f(v), dtype_is_float(v.dtype) ? v.dtype : TFE_FLOAT32, tmp, sizeof tmp);
        buf_puts(b, tmp);
    }
}

/* Bytes of the well-formed UTF-8 character at s[0..n) (0 if it is not one:
 * a stray byte, a truncated or overlong sequence, a surrogate). */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* A string as source: double quotes and the escapes the lexer reads back
 * (a byte that is not part of a UTF-8 character as \xNN, "é"[0] "\xc3"). */
static void put_quoted(Buf *b, const char *s, size_t n, bool ascii)
{
    buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[16];
        switch (c) {
        case '\n': buf_add(b, "\\n", 2); break;
        case '\t': buf_add(b, "\\t", 2); break;
        case '\r': buf_add(b, "\\r", 2); break;
        case '\\': buf_add(b, "\\\\", 2); break;
        case '"':  buf_add(b, "\\\"", 2); break;
        case '\0': buf_add(b, "\\0", 2); break;
        default:
            if (c < 0x20 || c == 0x7f) {
                snprintf(tmp, sizeof tmp, "\\u{%x}", c);
                buf_puts(b, tmp);
            } else if (c >= 0x80) {
                size_t len = utf8_char((const unsigned char *)s + i, n - i);
                if (len && ascii) {
                    /* ascii(): the code point as the escape the lexer reads */
                    const unsigned char *u = (const unsigned char *)s + i;
                    uint32_t cp = len == 2 ? (uint32_t)(u[0] & 0x1f) : len == 3 ? (uint32_t)(u[0] & 0x0f)
                                                                                 : (uint32_t)(u[0] & 0x07);
                    for (size_t k = 1; k < len; k++) cp = cp << 6 | (u[k] & 0x3f);
                    snprintf(tmp, sizeof tmp, "\\u{%x}", (unsigned)cp);
                    buf_puts(b, tmp);
                    i += len - 1;
                } else if (len) {
                    buf_add(b, s + i, len);
                    i += len - 1;
                } else {
                    snprintf(tmp, sizeof tmp, "\\x%02x", c);
                    buf_puts(b, tmp);
                }
            } else {
                buf_add(b, (const char *)&s[i], 1);
            }
        }
    }
    buf_add(b, "\"", 1);
}

static bool is_keyword(const char *s, size_t n)
{
    static const char *const kw[] = {
        "let", "fn", "return", "if", "else", "while", "for", "in", "break",
        "continue", "with", "as", "import", "and", "or", "not", "true",
        "false", "nil",
    };
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
        if (strlen(kw[i]) == n && memcmp(kw[i], s, n) == 0) return true;
    return false;
}

/* Can this record key be written bare (`{a: 1}`) in source? */
static bool is_plain_name(const char *s, size_t n)
{
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        bool digit = c >= '0' && c <= '9';
        if (!alpha && !(digit && i > 0)) return false;
    }
    return !is_keyword(s, n);
}

/* Enter a container: false (and `...` written) when it is already open or
 * the nesting is too deep. */
static bool enter(Buf *b, const Obj *o, Ctx *cx)
{
    for (int i = 0; i < cx->depth; i++)
        if (cx->open[i] == o) { buf_puts(b, "..."); return false; }
    if (cx->depth >= MAX_DEPTH) { buf_puts(b, "..."); return false; }
    cx->open[cx->depth++] = o;
    return true;
}

static void put_seq(Buf *b, const Seq *s, bool is_list, Ctx *cx)
{
    if (!enter(b, &s->h, cx)) return;
    buf_puts(b, is_list ? "list(" : "(");
    for (int i = 0; i < s->n; i++) {
        if (i) buf_puts(b, ", ");
        put_value(b, s->items[i], true, cx);
    }
    if (!is_list && s->n == 1) buf_puts(b, ",");
    buf_puts(b, ")");
    cx->depth--;
}

static void put_record(Buf *b, const Record *r, Ctx *cx)
{
    if (!enter(b, &r->h, cx)) return;
    buf_puts(b, "{");
    for (int i = 0; i < r->n; i++) {
        if (i) buf_puts(b, ", ");
        const Str *k = r->keys[i];
        if (is_plain_name(k->s, k->len)) buf_add(b, k->s, k->len);
        else put_quoted(b, k->s, k->len, cx->ascii);
        buf_puts(b, ": ");
        put_value(b, r->vals[i], true, cx);
    }
    buf_puts(b, "}");
    cx->depth--;
}

static void put_value(Buf *b, Value v, bool quoted, Ctx *cx)
{
    char tmp[128];
    switch ((ValueKind)v.kind) {
    case V_NIL: buf_puts(b, "nil"); break;
    case V_SCALAR: put_scalar(b, v); break;
    case V_TENSOR: buf_take(b, tensor_to_string(v.u.t)); break;
    case V_STR: {
        const Str *s = (const Str *)v.u.o;
        if (quoted) put_quoted(b, s->s, s->len, cx->ascii);
        else buf_add(b, s->s, s->len);
        break;
    }
    case V_TUPLE: put_seq(b, (const Seq *)v.u.o, false, cx); break;
    case V_LIST: put_seq(b, (const Seq *)v.u.o, true, cx); break;
    case V_RECORD: put_record(b, (const Record *)v.u.o, cx); break;
    case V_FN: buf_take(b, closure_repr(v.u.o)); break;
    case V_BUILTIN:
        buf_puts(b, "<builtin ");
        buf_puts(b, ((const Builtin *)v.u.o)->name);
        buf_puts(b, ">");
        break;
    case V_MODULE: {
        const Record *m = (const Record *)v.u.o;
        buf_puts(b, "<module ");
        buf_puts(b, m->module_name ? m->module_name : "?");
        buf_puts(b, ">");
        break;
    }
    case V_RANGE: {
        const Range *r = (const Range *)v.u.o;
        if (r->step == 1)
            snprintf(tmp, sizeof tmp, "range(%lld, %lld)", (long long)r->start, (long long)r->stop);
        else
            snprintf(tmp, sizeof tmp, "range(%lld, %lld, %lld)", (long long)r->start,
                     (long long)r->stop, (long long)r->step);
        buf_puts(b, tmp);
        break;
    }
    case V_OBJECT: {
        const Object *o = (const Object *)v.u.o;
        if (o->cls->repr) {
            buf_take(b, o->cls->repr(v.u.o));
        } else {
            buf_puts(b, "<");
            buf_puts(b, o->cls->name);
            buf_puts(b, ">");
        }
        break;
    }
    default:
        snprintf(tmp, sizeof tmp, "<value kind %d>", v.kind);
        buf_puts(b, tmp);
    }
}

static char *to_string(Value v, bool quoted, bool ascii, size_t *len)
{
    Buf b = {0};
    Ctx *cx = xmalloc(sizeof *cx);
    cx->depth = 0;
    cx->ascii = ascii;
    put_value(&b, v, quoted, cx);
    free(cx);
    char *s = buf_finish(&b);
    if (len) *len = b.len;
    return s;
}

char *value_str(Value v) { return to_string(v, false, false, NULL); }
char *value_repr(Value v) { return to_string(v, true, false, NULL); }
char *value_str_n(Value v, size_t *len) { return to_string(v, false, false, len); }
char *value_ascii(Value v, size_t *len) { return to_string(v, true, true, len); }

const char *value_kind_name(Value v)
{
    switch ((ValueKind)v.kind) {
    case V_NIL: return "nil";
    case V_SCALAR:
        if (v.dtype == TFE_BOOL) return "bool";
        return dtype_is_int(v.dtype) ? "int" : "float";
    case V_TENSOR:
        /* a number traced by a staged function is boxed; it is still a number */
        if (v.u.t->rank == 0 && v.u.t->node) {
            if (v.u.t->dtype == TFE_BOOL) return "bool";
            return dtype_is_int(v.u.t->dtype) ? "int" : "float";
        }
        return "tensor";
    case V_STR: return "string";
    case V_TUPLE: return "tuple";
    case V_LIST: return "list";
    case V_RECORD: return "record";
    case V_FN: return "function";
    case V_BUILTIN: return "builtin";
    case V_RANGE: return "range";
    case V_MODULE: return "module";
    case V_OBJECT: return ((const Object *)v.u.o)->cls->name;
    }
    return "value";
}
