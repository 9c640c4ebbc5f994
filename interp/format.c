/* format.c — format("{} {:.4f}", ...): Python's str.format over tfe values,
 * with the format-spec mini-language. Output and error texts follow CPython's
 * (errors prefixed "format: "), so a Python user's format strings just work. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/value.h"

#include "util/buf.h"
#include "util/xalloc.h"

static void buf_rep(Buf *b, const char *s, size_t n, size_t times)
{
    for (size_t i = 0; i < times; i++) buf_add(b, s, n);
}

/* One format call: the arguments, auto-numbering state and the first error. */
typedef struct Fmt {
    int argc;
    const Value *argv;
    int auto_idx;
    enum { NUM_NONE, NUM_AUTO, NUM_MANUAL } numbering;
    char *err;
} Fmt;

static int fail(Fmt *F, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Fmt *F, const char *fmt, ...)
{
    if (F->err) return -1;
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
    va_end(ap);
    F->err = msg ? msg : xstrdup("format: out of memory");
    return -1;
}

/* --- the spec -------------------------------------------------------------- */

typedef struct Spec {
    char fill[5];     /* one UTF-8 character */
    size_t fill_len;
    char align;       /* '<' '>' '^' '=' or 0 */
    char sign;        /* '+' '-' ' ' or 0 */
    bool z, alt;
    long width;       /* -1: none */
    char grouping;    /* ',' '_' or 0; after validation '4' means '_' every 4 */
    long precision;   /* -1: none */
    char type;        /* 0: none */
} Spec;

/* What kind of value the spec is applied to, for the defaults and messages. */
typedef enum { K_STR, K_INT, K_FLOAT } SpecKind;

static const char *kind_word(SpecKind k)
{
    return k == K_STR ? "a string" : k == K_INT ? "an int" : "a float";
}

static bool is_align(char c) { return c == '<' || c == '>' || c == '^' || c == '='; }

static size_t utf8_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) return 2;
    if ((c & 0xf0) == 0xe0) return 3;
    if ((c & 0xf8) == 0xf0) return 4;
    return 1;
}

/* Code points in a UTF-8 string (widths and precisions count characters). */
static size_t utf8_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) k++;
    return k;
}

#define MAX_DIGITS_VALUE 100000000L

static int parse_number(Fmt *F, const char *s, size_t n, size_t *pos, long *out)
{
    long v = 0;
    size_t i = *pos;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (s[i] - '0');
        if (v >= MAX_DIGITS_VALUE) return fail(F, "format: too many decimal digits in format string");
        i++;
    }
    *out = i > *pos ? v : -1;
    *pos = i;
    return 0;
}

/* [[fill]align][sign][z][#][0][width][grouping][.precision][type], as CPython
 * parses it: a '0' before the width sets fill '0' (when no fill was given)
 * and, for right-aligned kinds without an explicit alignment, align '='. */
static int parse_spec(Fmt *F, const char *s, size_t n, SpecKind kind, Spec *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->fill[0] = ' ';
    sp->fill_len = 1;
    sp->width = sp->precision = -1;
    bool fill_given = false, align_given = false;
    size_t pos = 0;

    size_t cl = n ? utf8_len((unsigned char)s[0]) : 0;
    if (cl && cl < n && is_align(s[cl])) {
        memcpy(sp->fill, s, cl);
        sp->fill_len = cl;
        sp->align = s[cl];
        fill_given = align_given = true;
        pos = cl + 1;
    } else if (n && is_align(s[0])) {
        sp->align = s[0];
        align_given = true;
        pos = 1;
    }
    if (pos < n && (s[pos] == '+' || s[pos] == '-' || s[pos] == ' ')) sp->sign = s[pos++];
    if (pos < n && s[pos] == 'z') { sp->z = true; pos++; }
    if (pos < n && s[pos] == '#') { sp->alt = true; pos++; }
    if (!fill_given && pos < n && s[pos] == '0') {
        sp->fill[0] = '0';
        sp->fill_len = 1;
        if (!align_given && kind != K_STR) sp->align = '=';
        pos++;
    }
    if (parse_number(F, s, n, &pos, &sp->width) < 0) return -1;
    if (pos < n && (s[pos] == ',' || s[pos] == '_')) {
        sp->grouping = s[pos++];
        if (pos < n && (s[pos] == ',' || s[pos] == '_')) {
            if (s[pos] == sp->grouping)
                return fail(F, "format: cannot specify '%c' with '%c'", s[pos], s[pos]);
            return fail(F, "format: cannot specify both ',' and '_'");
        }
    }
    if (pos < n && s[pos] == '.') {
        pos++;
        if (parse_number(F, s, n, &pos, &sp->precision) < 0) return -1;
        if (sp->precision < 0) return fail(F, "format: format specifier missing precision");
    }
    if (n - pos > 1)
        return fail(F, "format: invalid format specifier '%.*s' for %s value", (int)n, s,
                    kind_word(kind));
    if (pos < n) sp->type = s[pos];
    if (!sp->type && kind == K_STR) sp->type = 's';
    if (!sp->type && kind == K_INT) sp->type = 'd';

    if (sp->grouping) {
        switch (sp->type) {
        case 'd': case 'e': case 'f': case 'g': case 'E': case 'G': case '%': case 'F': case 0:
            break;
        case 'b': case 'o': case 'x': case 'X':
            if (sp->grouping == '_') { sp->grouping = '4'; break; }
            /* fall through */
        default:
            return fail(F, "format: cannot specify '%c' with '%c'", sp->grouping, sp->type);
        }
    }
    return 0;
}

/* --- layout ----------------------------------------------------------------- */

static void pad(Buf *b, const Spec *sp, size_t n)
{
    buf_rep(b, sp->fill, sp->fill_len, n);
}

/* Text (strings and everything printed as text): align and pad. */
static void emit_aligned(Buf *b, const Spec *sp, const char *s, size_t n, char default_align)
{
    size_t chars = utf8_count(s, n);
    size_t w = sp->width > 0 ? (size_t)sp->width : 0;
    size_t total = w > chars ? w - chars : 0;
    char align = sp->align ? sp->align : default_align;
    size_t left = align == '>' ? total : align == '^' ? total / 2 : 0;
    pad(b, sp, left);
    buf_add(b, s, n);
    pad(b, sp, total - left);
}

/* Digits grouped from the right every `every` with `sep`, extended with
 * zeros to at least min_width characters (CPython's zero-padding with
 * grouping: "00,001,234"). Writes into *out (reversed, then flipped). */
static void group_digits(Buf *out, const char *d, size_t nd, char sep, int every, long min_width)
{
    Buf r = {0};
    long remaining = (long)nd, minw = min_width;
    bool use_sep = false;
    for (;;) {
        long l = every;
        long m = remaining > minw ? remaining : minw;
        if (m < 1) m = 1;
        if (l > m) l = m;
        long nzeros = l - remaining > 0 ? l - remaining : 0;
        long nchars = remaining < l ? remaining : l;
        if (nchars < 0) nchars = 0;
        if (use_sep) buf_add(&r, &sep, 1);
        for (long i = 0; i < nchars; i++) buf_add(&r, &d[remaining - 1 - i], 1);
        for (long i = 0; i < nzeros; i++) buf_add(&r, "0", 1);
        use_sep = true;
        remaining -= nchars;
        minw -= l;
        if (remaining <= 0 && minw <= 0) break;
        minw -= 1;
    }
    for (size_t i = 0; i < r.len; i++) buf_add(out, &r.s[r.len - 1 - i], 1);
    free(r.s);
}

/* A number as sign + prefix + integer digits + rest ("." fraction, exponent,
 * "%"), padded per the spec. The first nd bytes of body are the digits. */
static void emit_number(Buf *b, const Spec *sp, char signch, const char *prefix,
                        const char *body, size_t nd)
{
    const char *rest = body + nd;
    size_t nrest = strlen(rest);
    size_t nsign = signch ? 1 : 0, npre = strlen(prefix);
    long w = sp->width > 0 ? sp->width : 0;
    char align = sp->align ? sp->align : '>';

    Buf digits = {0};
    if (sp->grouping && nd > 0) {
        long minw = 0;
        if (sp->fill_len == 1 && sp->fill[0] == '0' && align == '=')
            minw = w - (long)(nsign + npre + utf8_count(rest, nrest));
        char sep = sp->grouping == '4' ? '_' : sp->grouping;
        group_digits(&digits, body, nd, sep, sp->grouping == '4' ? 4 : 3, minw);
    } else {
        buf_add(&digits, body, nd);
    }
    if (!digits.s) buf_add(&digits, "", 0);

    size_t len = nsign + npre + digits.len + utf8_count(rest, nrest);
    size_t total = (size_t)w > len ? (size_t)w - len : 0;
    size_t left = align == '>' ? total : align == '^' ? total / 2 : 0;
    if (align != '=') pad(b, sp, left);
    if (signch) buf_add(b, &signch, 1);
    buf_puts(b, prefix);
    if (align == '=') pad(b, sp, total);
    buf_add(b, digits.s, digits.len);
    buf_add(b, rest, nrest);
    if (align != '=') pad(b, sp, total - left);
    free(digits.s);
}

static char sign_char(const Spec *sp, bool negative)
{
    if (negative) return '-';
    if (sp->sign == '+') return '+';
    if (sp->sign == ' ') return ' ';
    return 0;
}

static int format_string(Fmt *F, Buf *b, const Spec *sp, const char *s, size_t n)
{
    if (sp->type != 's')
        return fail(F, "format: unknown format code '%c' for a string value", sp->type);
    if (sp->sign) return fail(F, "format: sign not allowed in string format specifier");
    if (sp->z) return fail(F, "format: negative zero coercion (z) not allowed in string format specifier");
    if (sp->alt) return fail(F, "format: alternate form (#) not allowed in string format specifier");
    if (sp->align == '=') return fail(F, "format: '=' alignment not allowed in string format specifier");
    if (sp->precision >= 0) {
        /* truncate to `precision` characters */
        size_t i = 0, k = 0;
        while (i < n && k < (size_t)sp->precision) {
            i += utf8_len((unsigned char)s[i]);
            k++;
        }
        n = i < n ? i : n;
    }
    emit_aligned(b, sp, s, n, '<');
    return 0;
}

static void put_utf8(Buf *b, uint32_t c)
{
    char t[4];
    size_t n;
    if (c < 0x80) { t[0] = (char)c; n = 1; }
    else if (c < 0x800) { t[0] = (char)(0xc0 | c >> 6); t[1] = (char)(0x80 | (c & 0x3f)); n = 2; }
    else if (c < 0x10000) {
        t[0] = (char)(0xe0 | c >> 12); t[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        t[2] = (char)(0x80 | (c & 0x3f)); n = 3;
    } else {
        t[0] = (char)(0xf0 | c >> 18); t[1] = (char)(0x80 | ((c >> 12) & 0x3f));
        t[2] = (char)(0x80 | ((c >> 6) & 0x3f)); t[3] = (char)(0x80 | (c & 0x3f)); n = 4;
    }
    buf_add(b, t, n);
}

static int format_float(Fmt *F, Buf *b, const Spec *sp, double v, tfe_dtype dt);

static int format_int(Fmt *F, Buf *b, const Spec *sp, int64_t v)
{
    char type = sp->type;
    switch (type) {
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case '%':
        return format_float(F, b, sp, (double)v, TFE_FLOAT64);
    case 'b': case 'c': case 'd': case 'n': case 'o': case 'x': case 'X':
        break;
    default:
        return fail(F, "format: unknown format code '%c' for an int value", type);
    }
    if (sp->precision >= 0) return fail(F, "format: precision not allowed in integer format specifier");
    if (sp->z) return fail(F, "format: negative zero coercion (z) not allowed in integer format specifier");
    if (type == 'c') {
        if (sp->sign) return fail(F, "format: sign not allowed with integer format specifier 'c'");
        if (sp->alt) return fail(F, "format: alternate form (#) not allowed with integer format specifier 'c'");
        if (v < 0 || v >= 0x110000) return fail(F, "format: %%c arg not in range(0x110000)");
        /* tfe strings are UTF-8, which has no encoding for a lone surrogate
         * (Python's str can hold one; it fails later, when printed) */
        if (v >= 0xD800 && v <= 0xDFFF)
            return fail(F, "format: %%c arg not in range: %lld (0x%llx) is a surrogate, not a character",
                        (long long)v, (long long)v);
        Buf c = {0};
        put_utf8(&c, (uint32_t)v);
        /* 'c' is a numeric presentation: '=' (and the '0' flag, which sets
         * it) pads on the left as for a number without a sign */
        Spec cs = *sp;
        if (cs.align == '=') cs.align = '>';
        emit_aligned(b, &cs, c.s, c.len, '>');
        free(c.s);
        return 0;
    }
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    unsigned base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
    const char *dig = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    char tmp[72];
    int i = (int)sizeof tmp - 1;
    tmp[i] = '\0';
    do { tmp[--i] = dig[mag % base]; mag /= base; } while (mag);
    const char *prefix = "";
    if (sp->alt) {
        if (type == 'b') prefix = "0b";
        else if (type == 'o') prefix = "0o";
        else if (type == 'x') prefix = "0x";
        else if (type == 'X') prefix = "0X";
    }
    emit_number(b, sp, sign_char(sp, v < 0), prefix, tmp + i, strlen(tmp + i));
    return 0;
}

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) xalloc_die();
    va_end(ap);
    return s;
}

/* Drop trailing zeros of the fraction (and a bare '.') before any exponent. */
static void strip_zeros(char *s)
{
    char *dot = strchr(s, '.');
    if (!dot) return;
    char *e = strpbrk(s, "eE");
    char *end = e ? e : s + strlen(s);
    char *p = end;
    while (p > dot + 1 && p[-1] == '0') p--;
    if (p == dot + 1) p = dot;
    memmove(p, end, strlen(end) + 1);
}

/* '#g' with p significant digits (p >= 1): the exponent is the one of the
 * value rounded to p digits, then fixed or scientific notation with exactly
 * p digits, trailing zeros and the point kept. Not printf's "%#g": glibc
 * drops the zeros when rounding carries into the exponent (999999.5 gives
 * "1.e+06", Python "1.00000e+06"); "%#.*e" and "%#.*f" keep them. */
static char *alt_general(double a, long p, bool upper)
{
    char *e = dup_printf("%.*e", (int)(p - 1), a);
    int exp = atoi(strchr(e, 'e') + 1);
    free(e);
    if (exp >= -4 && exp < p)
        return dup_printf("%#.*f", (int)(p - 1 - exp), a);
    return dup_printf(upper ? "%#.*E" : "%#.*e", (int)(p - 1), a);
}

/* Python's float formatting of |v| (finite) for one type; malloc'd. */
static char *float_body(const Spec *sp, double a, tfe_dtype dt)
{
    long p = sp->precision;
    char t = sp->type;
    const char *alt = sp->alt ? "#" : "";
    char fmt[16];
    switch (t) {
    case 'e': case 'E': case 'f': case 'F': case '%':
        snprintf(fmt, sizeof fmt, "%%%s.*%c", alt, t == '%' ? 'f' : t);
        return dup_printf(fmt, (int)(p < 0 ? 6 : p), t == '%' ? a * 100 : a);
    case 'g': case 'G': case 'n':
        if (sp->alt) return alt_general(a, p < 0 ? 6 : p == 0 ? 1 : p, t == 'G');
        snprintf(fmt, sizeof fmt, "%%.*%c", t == 'n' ? 'g' : t);
        return dup_printf(fmt, (int)(p < 0 ? 6 : p), a);
    default: break;
    }
    if (p < 0) {
        /* repr: the shortest round trip in the value's own dtype */
        char tmp[64];
        format_float_shortest(a, dt, tmp, sizeof tmp);
        if (sp->alt && !strchr(tmp, '.')) {
            char *e = strchr(tmp, 'e');
            if (e) return dup_printf("%.*s.%s", (int)(e - tmp), tmp, e);
        }
        return xstrdup(tmp);
    }
    /* No type with a precision: like 'g', but scientific from exp >= p-1,
     * and fixed-point keeps at least one fractional digit. */
    if (p == 0) p = 1;
    char *e = dup_printf("%.*e", (int)(p - 1), a);
    int exp = atoi(strchr(e, 'e') + 1);
    char *s;
    if (exp >= -4 && exp < p - 1) {
        free(e);
        s = dup_printf(sp->alt ? "%#.*f" : "%.*f", (int)(p - 1 - exp), a);
        if (!sp->alt) strip_zeros(s);
        if (!strchr(s, '.')) {
            char *s2 = dup_printf("%s.0", s);
            free(s);
            s = s2;
        }
    } else {
        free(e);
        s = dup_printf(sp->alt ? "%#.*e" : "%.*e", (int)(p - 1), a);
        if (!sp->alt) strip_zeros(s);
    }
    return s;
}

static int format_float(Fmt *F, Buf *b, const Spec *sp, double v, tfe_dtype dt)
{
    switch (sp->type) {
    case 0: case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'n': case '%':
        break;
    default:
        return fail(F, "format: unknown format code '%c' for a float value", sp->type);
    }
    bool upper = sp->type == 'E' || sp->type == 'F' || sp->type == 'G';
    char *body;
    bool neg = signbit(v) && !isnan(v);
    if (isnan(v) || isinf(v)) {
        const char *w = isnan(v) ? (upper ? "NAN" : "nan") : (upper ? "INF" : "inf");
        body = dup_printf("%s%s", w, sp->type == '%' ? "%" : "");
    } else {
        body = float_body(sp, fabs(v), dt);
        if (sp->type == '%') {
            char *b2 = dup_printf("%s%%", body);
            free(body);
            body = b2;
        }
        if (neg && sp->z) {
            /* negative zero after rounding prints unsigned */
            bool zero = true;
            for (const char *p = body; *p && *p != 'e' && *p != 'E'; p++)
                if (*p >= '1' && *p <= '9') zero = false;
            if (zero) neg = false;
        }
    }
    emit_number(b, sp, sign_char(sp, neg), "", body, strspn(body, "0123456789"));
    free(body);
    return 0;
}

/* --- values ---------------------------------------------------------------- */

/* The number inside a scalar or one-element tensor: 1 found, 0 not a number. */
static int number_of(Value v, Value *num)
{
    if (v.kind == V_SCALAR) { *num = v; return 1; }
    if (v.kind != V_TENSOR || tensor_numel(v.u.t) != 1) return 0;
    tfe_tensor *t = v.u.t;
    *num = v_nil();
    num->kind = V_SCALAR;
    if (dtype_is_float(t->dtype)) {
        /* the tensor's own float dtype: a spec without a type or precision
         * shows the shortest digits of that dtype, as {} and print do
         * (float16 0.1 is "0.1", not float32's "0.099975586") */
        num->dtype = t->dtype;
        num->u.f = tensor_get_f64(t, 0);
    } else {
        num->dtype = t->dtype;
        num->u.i = tensor_get_i64(t, 0);
    }
    return 1;
}

static int format_text(Fmt *F, Buf *b, const char *spec, size_t slen, const char *s, size_t n)
{
    Spec sp;
    if (parse_spec(F, spec, slen, K_STR, &sp) < 0) return -1;
    return format_string(F, b, &sp, s, n);
}

/* A bool with a spec that only a number takes ("{:,}", "{:+}"): say why,
 * rather than the string error about a type 's' the user never wrote. */
static int bool_spec_error(Fmt *F, const char *spec, size_t slen)
{
    Fmt T = {0};
    Spec sp;
    bool text_ok = parse_spec(&T, spec, slen, K_STR, &sp) == 0 && !sp.sign && !sp.z &&
                   !sp.alt && sp.align != '=';
    free(T.err);
    if (text_ok) return 0;
    T.err = NULL;
    bool num_ok = parse_spec(&T, spec, slen, K_INT, &sp) == 0;
    free(T.err);
    if (!num_ok) return 0; /* not a numeric spec either: the usual error */
    return fail(F, "format: a bool formats as a word (true/false), which takes no numeric spec "
                "'%.*s'; format int(b) for 0/1", (int)slen, spec);
}

static int format_value(Fmt *F, Buf *b, Value v, char conv, const char *spec, size_t slen)
{
    /* Text is taken with its length: a string may hold NUL bytes. */
    if (conv) {
        size_t n = 0;
        char *s = conv == 's' ? value_str_n(v, &n) : conv == 'a' ? value_ascii(v, &n) : value_repr(v);
        if (conv == 'r') n = strlen(s); /* repr escapes NUL as \0 */
        int rc = format_text(F, b, spec, slen, s, n);
        free(s);
        return rc;
    }
    if (slen == 0) {
        size_t n;
        char *s = value_str_n(v, &n);
        buf_add(b, s, n);
        free(s);
        return 0;
    }
    if (v.kind == V_STR) {
        const Str *s = (const Str *)v.u.o;
        return format_text(F, b, spec, slen, s->s, s->len);
    }
    if (v.kind == V_OBJECT && ((Object *)v.u.o)->cls->to_tensor) {
        /* a variable with a format spec formats its value ({w:.3f}, as
         * PyTorch formats a 0-d parameter); without one it prints as itself */
        tfe_tensor *t = ((Object *)v.u.o)->cls->to_tensor(v.u.o);
        if (t) {
            Value tv = v_tensor_take(t);
            int rc = format_value(F, b, tv, conv, spec, slen);
            value_decref(tv);
            return rc;
        }
    }
    Value num;
    if (number_of(v, &num)) {
        /* bools print as words unless a numeric type asks for 0/1 */
        char last = spec[slen - 1];
        bool typed = strchr("bcdoxXneEfFgG%", last) != NULL;
        if (num.dtype == TFE_BOOL && !typed) {
            if (bool_spec_error(F, spec, slen) < 0) return -1;
            return format_text(F, b, spec, slen, num.u.i ? "true" : "false", num.u.i ? 4 : 5);
        }
        Spec sp;
        if (dtype_is_float(num.dtype)) {
            if (parse_spec(F, spec, slen, K_FLOAT, &sp) < 0) return -1;
            return format_float(F, b, &sp, scalar_f(num), num.dtype);
        }
        if (parse_spec(F, spec, slen, K_INT, &sp) < 0) return -1;
        return format_int(F, b, &sp, num.u.i);
    }
    /* Anything else formats as its printed text. */
    size_t sn;
    char *s = value_str_n(v, &sn);
    Spec sp;
    int rc = parse_spec(F, spec, slen, K_STR, &sp);
    if (rc == 0 && sp.type != 's') {
        if (v.kind == V_TENSOR) {
            char shape[256];
            shape_str(v.u.t->rank, v.u.t->shape, shape);
            rc = fail(F, "format: format code '%c' needs a number or a one-element tensor, "
                      "got a tensor of shape %s", sp.type, shape);
        } else {
            rc = fail(F, "format: unknown format code '%c' for a %s value", sp.type,
                      value_kind_name(v));
        }
    }
    if (rc == 0) rc = format_string(F, b, &sp, s, sn);
    free(s);
    return rc;
}

/* --- the format string ---------------------------------------------------- */

static int vformat(Fmt *F, Buf *out, const char *s, size_t n, int depth);

/* One replacement field, the text between '{' and its '}'. */
static int do_field(Fmt *F, Buf *out, const char *f, size_t n, int depth)
{
    size_t i = 0;
    while (i < n && f[i] != ':' && f[i] != '!') i++;
    size_t name_len = i;
    char conv = 0;
    if (i < n && f[i] == '!') {
        if (i + 1 >= n) return fail(F, "format: end of string while looking for conversion specifier");
        conv = f[i + 1];
        if (i + 2 < n && f[i + 2] != ':') return fail(F, "format: expected ':' after conversion specifier");
        if (conv != 'r' && conv != 's' && conv != 'a')
            return fail(F, "format: unknown conversion specifier '%c'", conv);
        i += 2;
    }
    const char *spec = i < n ? f + i + 1 : f + n;
    size_t slen = i < n ? n - i - 1 : 0;

    int idx;
    if (name_len == 0) {
        if (F->numbering == NUM_MANUAL)
            return fail(F, "format: cannot switch from manual field specification to automatic field numbering");
        F->numbering = NUM_AUTO;
        idx = F->auto_idx++;
    } else {
        long k = 0;
        for (size_t j = 0; j < name_len; j++) {
            if (f[j] < '0' || f[j] > '9' || k > 100000000)
                return fail(F, "format: unsupported field '{%.*s}' (use '{}' or '{0}')", (int)n, f);
            k = k * 10 + (f[j] - '0');
        }
        if (F->numbering == NUM_AUTO)
            return fail(F, "format: cannot switch from automatic field numbering to manual field specification");
        F->numbering = NUM_MANUAL;
        idx = (int)k;
    }
    if (idx >= F->argc)
        return fail(F, "format: not enough arguments for '{%.*s}' (%d given)", (int)n, f, F->argc);

    /* Nested fields in the spec ("{:>{}}") are expanded first. */
    Buf sb = {0};
    if (memchr(spec, '{', slen) || memchr(spec, '}', slen)) {
        if (vformat(F, &sb, spec, slen, depth - 1) < 0) { free(sb.s); return -1; }
        spec = sb.s ? sb.s : "";
        slen = sb.len;
    }
    int rc = format_value(F, out, F->argv[idx], conv, spec, slen);
    free(sb.s);
    return rc;
}

static int vformat(Fmt *F, Buf *out, const char *s, size_t n, int depth)
{
    if (depth <= 0) return fail(F, "format: max string recursion exceeded");
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '{' && s[j] != '}') j++;
        buf_add(out, s + i, j - i);
        if (j >= n) break;
        if (s[j] == '}') {
            if (j + 1 < n && s[j + 1] == '}') { buf_add(out, "}", 1); i = j + 2; continue; }
            return fail(F, "format: unmatched '}'");
        }
        if (j + 1 < n && s[j + 1] == '{') { buf_add(out, "{", 1); i = j + 2; continue; }
        /* find the '}' that closes this field, counting nested braces */
        size_t k = j + 1;
        int level = 1;
        while (k < n) {
            if (s[k] == '{') level++;
            else if (s[k] == '}' && --level == 0) break;
            k++;
        }
        if (k >= n) return fail(F, "format: unmatched '{'");
        if (do_field(F, out, s + j + 1, k - j - 1, depth) < 0) return -1;
        i = k + 1;
    }
    return 0;
}

char *format_values(const char *fmt, size_t fmtlen, int argc, const Value *argv, size_t *outlen,
                    char **err)
{
    Fmt F = { .argc = argc, .argv = argv };
    Buf out = {0};
    *err = NULL;
    if (vformat(&F, &out, fmt, fmtlen, 2) < 0) {
        free(out.s);
        *err = F.err;
        return NULL;
    }
    buf_grow(&out, 0);
    out.s[out.len] = '\0';
    *outlen = out.len; /* the text may hold NUL bytes ("a\0b" formatted) */
    return out.s;
}
