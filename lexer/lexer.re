/* lexer.re — the re2c scanner of tfe: tokens and their locations, string and
 * number decoding, the newline rule (which newlines end statements) and the
 * stack of open brackets that syntax errors and the REPL consult. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lexer/lexer.h"
#include "util/buf.h"
#include "util/xalloc.h"

enum { RAW_NL = -2 }; /* a newline, before the newline rule judges it */

/* The one place where positions advance: the bytes s..e become a token (or
 * are skipped); its location is returned and line counting follows every
 * newline inside (newline tokens, strings spanning lines). */
static Loc take(Lexer *lx, const char *s, const char *e)
{
    Loc l = { lx->src, lx->line, (int)(s - lx->line_start) + 1,
              (int)(s - lx->src->text), (int)(e - s) };
    for (const char *p = s; p < e; p++)
        if (*p == '\n') {
            lx->line++;
            lx->line_start = p + 1;
        }
    lx->cur = e;
    return l;
}

/* The location of p (len bytes) inside a token that starts at start/base. */
static Loc loc_within(Loc base, const char *start, const char *p, int len)
{
    Loc l = base;
    const char *ls = NULL;
    for (const char *q = start; q < p; q++)
        if (*q == '\n') {
            l.line++;
            ls = q + 1;
        }
    l.col = ls ? (int)(p - ls) + 1 : base.col + (int)(p - start);
    l.off = base.off + (int)(p - start);
    l.len = len;
    return l;
}

static void verror(Lexer *lx, bool final, Loc loc, const char *fmt, va_list ap)
{
    if (lx->err_final)
        return;
    vsnprintf(lx->err, sizeof lx->err, fmt, ap);
    if (loc.len < 1)
        loc.len = 1;
    lx->err_loc = loc;
    lx->has_err = true;
    lx->err_final = final;
}

void lex_error(Lexer *lx, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(lx, false, loc, fmt, ap);
    va_end(ap);
}

void lex_error_final(Lexer *lx, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(lx, true, loc, fmt, ap);
    va_end(ap);
}

/* A lexical error: recorded as final, and the parser is handed LEXERR. */
#define LEXFAIL(loc, ...) do { lex_error_final(lx, (loc), __VA_ARGS__); return LEXERR; } while (0)

static bool is_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* An integer or float literal s..e; a name character (or '.digit') right
 * after it makes the whole run one malformed number. */
static int number(Lexer *lx, const char *s, const char *e, bool isfloat, YYSTYPE *val, Loc *loc)
{
    if (is_name_char(*e) || (*e == '.' && isdigit((unsigned char)e[1]))) {
        while (is_name_char(*e) || *e == '.')
            e++;
        *loc = take(lx, s, e);
        LEXFAIL(*loc, "malformed number '%.*s'", (int)(e - s), s);
    }
    *loc = take(lx, s, e);
    char *digits = xmalloc((size_t)(e - s) + 1);
    size_t n = 0;
    for (const char *p = s; p < e; p++)
        if (*p != '_')
            digits[n++] = *p;
    digits[n] = 0;
    Node *node;
    if (isfloat) {
        double v = strtod(digits, NULL);
        free(digits);
        if (isinf(v))
            LEXFAIL(*loc, "float literal is out of range");
        node = node_new(N_FLOAT, *loc);
        node->fval = v;
    } else {
        char kind = n > 1 && digits[0] == '0' ? (char)tolower((unsigned char)digits[1]) : 0;
        int base = kind == 'x' ? 16 : kind == 'b' ? 2 : kind == 'o' ? 8 : 10;
        if (base == 10 && digits[0] == '0' && digits[strspn(digits, "0")]) {
            /* 07: Python 3 refuses it (C and Python 2 read octal) */
            free(digits);
            const char *q = s;
            while (q < e && (*q == '0' || *q == '_')) q++;
            LEXFAIL(*loc, "leading zeros in a decimal integer are not allowed (an octal number is 0o%.*s)", (int)(e - q), q);
        }
        uint64_t v = 0;
        bool over = false;
        for (const char *p = digits + (base != 10 ? 2 : 0); *p; p++) {
            int d = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;
            if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base)
                over = true;
            v = v * (uint64_t)base + (uint64_t)d;
        }
        free(digits);
        if (over)
            LEXFAIL(*loc, "integer literal is too large for int64");
        node = node_new(N_INT, *loc);
        node->ival = (int64_t)v;
    }
    val->node = node;
    return isfloat ? FLOAT : INT;
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Bytes of the UTF-8 character at p (1 for a stray byte). */
static int utf8_len(const char *p)
{
    unsigned char c = (unsigned char)*p;
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    for (int i = 1; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80)
            return i;
    return n;
}

/* Decode the escapes of p..end (part of the token at s, located at *loc)
 * into out (decoding never lengthens); -1 after a lexical error. */
static int decode(Lexer *lx, const char *s, const Loc *loc, const char *p, const char *end,
                  char *out, size_t *len)
{
    size_t n = 0;
    while (p < end) {
        if (*p != '\\') {
            out[n++] = *p++;
            continue;
        }
        const char *esc = p++;
        switch (*p) {
        case 'n': out[n++] = '\n'; p++; continue;
        case 't': out[n++] = '\t'; p++; continue;
        case 'r': out[n++] = '\r'; p++; continue;
        case '0': out[n++] = '\0'; p++; continue;
        case '\\': case '"': case '\'': out[n++] = *p++; continue;
        case 'x': { /* one byte, \x00..\xff: tfe strings are bytes (Python's bytes literal) */
            int hi = isxdigit((unsigned char)p[1]) && p + 1 < end ? p[1] : 0;
            int lo = hi && isxdigit((unsigned char)p[2]) && p + 2 < end ? p[2] : 0;
            if (!lo) {
                lex_error_final(lx, loc_within(*loc, s, esc, hi ? 3 : 2),
                                "malformed byte escape (write two hex digits: \\xff)");
                return -1;
            }
            hi = isdigit(hi) ? hi - '0' : tolower(hi) - 'a' + 10;
            lo = isdigit(lo) ? lo - '0' : tolower(lo) - 'a' + 10;
            out[n++] = (char)(hi * 16 + lo);
            p += 3;
            continue;
        }
        case 'u': break;
        default: {
            int elen = 1 + utf8_len(p);
            lex_error_final(lx, loc_within(*loc, s, esc, elen), "unknown escape '%.*s'", elen, esc);
            return -1;
        }
        }
        const char *q = p + 1;
        uint32_t cp = 0;
        int nd = 0;
        if (*q == '{')
            for (q++; isxdigit((unsigned char)*q) && nd <= 6; q++, nd++)
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)*q) ? *q - '0'
                                          : tolower((unsigned char)*q) - 'a' + 10);
        if (p[1] != '{' || nd == 0 || nd > 6 || *q != '}' || q >= end) {
            lex_error_final(lx, loc_within(*loc, s, esc, (int)(q - esc)),
                            "malformed unicode escape (write it as \\u{1F600})");
            return -1;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            lex_error_final(lx, loc_within(*loc, s, esc, (int)(q + 1 - esc)),
                            "'%.*s' is not a unicode code point", (int)(q + 1 - esc), esc);
            return -1;
        }
        n += utf8_encode(cp, out + n);
        p = q + 1;
    }
    out[n] = 0;
    *len = n;
    return 0;
}

/* A complete string literal s..e (quotes included): decode its escapes. */
static int string(Lexer *lx, const char *s, const char *e, YYSTYPE *val, Loc *loc)
{
    *loc = take(lx, s, e);
    const char *p = s + 1, *end = e - 1;
    char *out = xmalloc((size_t)(end - p) + 1);
    size_t n = 0;
    if (decode(lx, s, loc, p, end, out, &n)) {
        free(out);
        return LEXERR;
    }
    Node *node = node_new(N_STR, *loc);
    node->str = out;
    node->slen = n;
    val->node = node;
    return STRING;
}

/* --- f-strings ----------------------------------------------------------------------
 * f"loss {loss:.4f}" is lexed here into an N_FSTRING: decoded literal pieces
 * and one N_FMTFIELD per {expr!c:spec}, whose expression is parsed from the
 * same Source (parse_fexpr), so its locations are exact. Formatting is
 * format()'s (interp/format.c): a field keeps a format string "{0!c:spec}". */

/* The end of a field's expression at p: the first '}', ':', '!' (not "!=")
 * or '#' outside brackets and strings, a backslash outside strings, or a
 * '=' that asks for the expression's text (f"{x = }": only blanks then
 * '}', ':' or '!' follow); *eq is then that '='. */
static const char *fexpr_end(const char *p, const char *end, const char **eq)
{
    int depth = 0;
    const char *start = p;
    *eq = NULL;
    while (p < end) {
        char c = *p;
        if (c == '\'' || c == '"') {
            for (p++; p < end && *p != c; p++)
                if (*p == '\\' && p + 1 < end)
                    p++;
            if (p < end)
                p++;
            continue;
        }
        if (c == '\\') /* f"{d[\"a\"]}": an escaped quote would not start a string */
            return p;
        if (c == '(' || c == '[' || c == '{') {
            depth++;
        } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
            depth--;
        } else if (depth == 0) {
            if (c == '}' || c == ':' || c == '#' || (c == '!' && p[1] != '='))
                return p;
            if (c == '=' && p[1] != '=' && (p == start || !strchr("=!<>", p[-1]))) {
                const char *q = p + 1;
                while (q < end && (*q == ' ' || *q == '\t'))
                    q++;
                if (q < end && (*q == '}' || *q == ':' || *q == '!')) {
                    *eq = p;
                    return q;
                }
            }
        }
        p++;
    }
    return p;
}

/* Parse the expression es..xe of a field of the f-string token at s
 * (which started on line0, whose line began at ls0). */
static Node *fexpr(Lexer *lx, const char *s, int line0, const char *ls0, const char *es, const char *xe)
{
    int line = line0;
    const char *ls = ls0;
    for (const char *q = s; q < es; q++)
        if (*q == '\n') {
            line++;
            ls = q + 1;
        }
    ParseError pe;
    Node *n = parse_fexpr(lx, es, xe, line, ls, &pe);
    if (!n)
        lex_error_final(lx, pe.loc, "%s", pe.msg);
    return n;
}

/* Move the decoded literal text in lit (if any) into a piece of fs. */
static void fstring_piece(Node *fs, Buf *lit)
{
    if (lit->len == 0) {
        free(lit->s);
        *lit = (Buf){0};
        return;
    }
    Node *piece = node_new(N_STR, fs->loc);
    piece->str = lit->s;
    piece->slen = lit->len;
    nodelist_push(&fs->list, piece);
    *lit = (Buf){0};
}

static bool blank(const char *p, const char *e)
{
    for (; p < e; p++)
        if (!strchr(" \t\r\n", *p))
            return false;
    return true;
}

/* A complete f-string s..e ('f', quotes included). */
static int fstring(Lexer *lx, const char *s, const char *e, YYSTYPE *val, Loc *loc)
{
    int line0 = lx->line;
    const char *ls0 = lx->line_start;
    *loc = take(lx, s, e);
    Node *fs = node_new(N_FSTRING, *loc);
    Buf lit = {0}, fmt = {0};
    char *tmp = xmalloc((size_t)(e - s) + 1);
    const char *p = s + 2, *end = e - 1, *run = p;
#define AT(q, n) loc_within(*loc, s, (q), (int)(n))
#define FAIL(l, ...) do { lex_error_final(lx, (l), __VA_ARGS__); goto fail; } while (0)
    for (;;) {
        if (p < end && *p == '\\') { /* an escape never opens or closes a field */
            p += 2;
            if (p[-1] == 'u' && p < end && *p == '{')
                while (p < end && *p++ != '}') {}
            continue;
        }
        if (p < end && *p != '{' && *p != '}') {
            p++;
            continue;
        }
        size_t n = 0;
        if (decode(lx, s, loc, run, p, tmp, &n))
            goto fail;
        buf_add(&lit, tmp, n);
        if (p >= end)
            break;
        if (p + 1 < end && p[1] == *p) { /* {{ and }} */
            buf_add(&lit, p, 1);
            p += 2;
            run = p;
            continue;
        }
        if (*p == '}')
            FAIL(AT(p, 1), "f-string: single '}' is not allowed (write '}}' for a literal '}')");
        const char *open = p, *es = p + 1, *eq;
        const char *q = fexpr_end(es, end, &eq);
        const char *xe = eq ? eq : q;
        if (q >= end)
            FAIL(AT(open, 1), "f-string: '{' is never closed (write '{{' for a literal '{')");
        if (*q == '#')
            FAIL(AT(q, 1), "f-string: '#' is not allowed inside braces");
        if (*q == '\\')
            FAIL(AT(q, 1), "f-string: a backslash is not allowed inside braces outside a string "
                           "(a string inside uses the other quote: f\"{d['a']}\")");
        if (blank(es, xe))
            FAIL(AT(open, q + 1 - open), "f-string: empty expression in braces (write '{{' for a literal '{')");
        if (eq)
            buf_add(&lit, es, (size_t)(q - es)); /* f"{x = }" shows "x = " */
        fstring_piece(fs, &lit);
        Node *field = node_new(N_FMTFIELD, *loc);
        nodelist_push(&fs->list, field);
        if (!(field->a = fexpr(lx, s, line0, ls0, es, xe)))
            goto fail;
        char conv = 0;
        if (*q == '!') {
            if (q + 1 >= end || !strchr("rsa", q[1]) || !q[1])
                FAIL(AT(q, 2), "f-string: the conversion after '!' must be r, s or a");
            conv = q[1];
            q += 2;
        }
        if (eq && !conv && *q != ':')
            conv = 'r';
        fmt.len = 0;
        buf_puts(&fmt, "{0");
        if (conv) {
            char c[3] = { '!', conv, 0 };
            buf_puts(&fmt, c);
        }
        Loc specl = AT(open, 1);
        if (*q == ':') {
            const char *ss = ++q;
            buf_puts(&fmt, ":");
            while (q < end && *q != '}') {
                if (*q == '\\') {
                    /* an escape in the spec is decoded, as Python does
                     * (f"{s:\t>5}"); its braces (\u{e9}) open no field */
                    const char *qe = q + 2 <= end ? q + 2 : end;
                    if (qe[-1] == 'x') /* \xNN: decode says if NN is missing */
                        for (int k = 0; k < 2 && qe < end && isxdigit((unsigned char)*qe); k++)
                            qe++;
                    if (qe[-1] == 'u' && qe < end && *qe == '{')
                        while (qe < end && *qe++ != '}') {}
                    size_t dn = 0;
                    if (decode(lx, s, loc, q, qe, tmp, &dn))
                        goto fail;
                    for (size_t k = 0; k < dn; k++) {
                        if (tmp[k] != '{' && tmp[k] != '}') {
                            buf_add(&fmt, &tmp[k], 1);
                            continue;
                        }
                        /* a brace written as an escape ("\x7b") is a fill,
                         * not a field: it comes in as a nested field whose
                         * value is that brace */
                        Node *br = node_new(N_STR, AT(q, qe - q));
                        br->str = xstrndup(&tmp[k], 1);
                        br->slen = 1;
                        nodelist_push(&field->list, br);
                        char num[24];
                        snprintf(num, sizeof num, "{%d}", field->list.n);
                        buf_puts(&fmt, num);
                    }
                    q = qe;
                    continue;
                }
                if (*q != '{') {
                    buf_add(&fmt, q++, 1);
                    continue;
                }
                const char *nq = fexpr_end(q + 1, end, &eq);
                if (nq >= end || *nq != '}' || eq)
                    FAIL(AT(q, 1), "f-string: a field nested in a format spec is {expression} alone");
                if (blank(q + 1, nq))
                    FAIL(AT(q, nq + 1 - q), "f-string: empty expression in braces");
                Node *x = fexpr(lx, s, line0, ls0, q + 1, nq);
                if (!x)
                    goto fail;
                nodelist_push(&field->list, x);
                char num[24];
                snprintf(num, sizeof num, "{%d}", field->list.n);
                buf_puts(&fmt, num);
                q = nq + 1;
            }
            specl = AT(ss, q > ss ? q - ss : 1);
        }
        if (q >= end || *q != '}')
            FAIL(AT(q < end ? q : open, 1), "f-string: expected '}' to close the field opened at %d:%d",
                 AT(open, 1).line, AT(open, 1).col);
        buf_puts(&fmt, "}");
        /* an escape in the spec may put a NUL in it: copied by length */
        field->str = xmalloc(fmt.len + 1);
        memcpy(field->str, fmt.s, fmt.len);
        field->str[fmt.len] = '\0';
        field->slen = fmt.len;
        field->loc = AT(open, q + 1 - open);
        field->opl = specl;
        p = run = q + 1;
    }
#undef AT
#undef FAIL
    fstring_piece(fs, &lit);
    free(lit.s); /* an empty buffer may still hold its first block */
    free(fmt.s);
    free(tmp);
    val->node = fs;
    return FSTRING;
fail:
    free(lit.s);
    free(fmt.s);
    free(tmp);
    ast_free(fs);
    return LEXERR;
}

static int open_bracket(Lexer *lx, char ch, int kind, Loc loc)
{
    if (lx->depth == LEX_MAX_NESTING)
        LEXFAIL(loc, "expression nested too deeply");
    lx->stack[lx->depth++] = (LexBracket){ ch, loc };
    return kind;
}

/* A closer that does not match the innermost opener is an error here; one
 * with nothing open is left to the parser ("unexpected ')'"). */
static int close_bracket(Lexer *lx, char ch, int kind, Loc loc)
{
    char want = ch == ')' ? '(' : ch == ']' ? '[' : '{';
    if (lx->depth > 0) {
        const LexBracket *b = &lx->stack[lx->depth - 1];
        if (b->ch != want)
            LEXFAIL(loc, "'%c' does not match '%c' opened at %d:%d", ch, b->ch, b->loc.line, b->loc.col);
        lx->depth--;
    }
    return kind;
}

static int name(Lexer *lx, const char *s, const char *e, YYSTYPE *val, Loc *loc)
{
    *loc = take(lx, s, e);
    Node *n = node_new(N_NAME, *loc);
    n->str = xstrndup(s, (size_t)(e - s));
    val->node = n;
    return NAME;
}

/* One raw token: RAW_NL for a newline, YYEOF at the end, LEXERR on error. */
static int scan(Lexer *lx, YYSTYPE *val, Loc *loc)
{
#define TOK(k) do { *loc = take(lx, s, (const char *)YYCURSOR); return (k); } while (0)
#define CUR ((const char *)YYCURSOR)
    for (;;) {
        const char *s = lx->cur;
        if (lx->stop && s >= lx->stop)
            return YYEOF; /* the end of an f-string field's expression */
        const unsigned char *YYCURSOR = (const unsigned char *)s, *YYMARKER = YYCURSOR;
        /*!re2c
        re2c:define:YYCTYPE = "unsigned char";
        re2c:yyfill:enable = 0;

        dec  = [0-9] ("_"? [0-9])*;
        hex  = "0" [xX] [0-9a-fA-F] ("_"? [0-9a-fA-F])*;
        bin  = "0" [bB] [01] ("_"? [01])*;
        oct  = "0" [oO] [0-7] ("_"? [0-7])*;
        exp  = [eE] [+-]? dec;
        flt  = dec "." dec? exp? | dec exp;
        id   = [A-Za-z_] [A-Za-z0-9_]*;
        dqs  = ["] ([^"\\\x00] | "\\" [^\x00])*;
        sqs  = ['] ([^'\\\x00] | "\\" [^\x00])*;

        [ \t\r\f\v]+          { lx->cur = CUR; continue; }
        "#" [^\n\x00]*        { lx->cur = CUR; continue; }
        "\n"                  { TOK(RAW_NL); }

        "let"      { TOK(LET); }
        "fn"       { TOK(FN); }
        "return"   { TOK(RETURN); }
        "if"       { TOK(IF); }
        "else"     { TOK(ELSE); }
        "while"    { TOK(WHILE); }
        "for"      { TOK(FOR); }
        "in"       { TOK(IN); }
        "break"    { TOK(BREAK); }
        "continue" { TOK(CONTINUE); }
        "with"     { TOK(WITH); }
        "as"       { TOK(AS); }
        "import"   { TOK(IMPORT); }
        "and"      { TOK(AND); }
        "or"       { TOK(OR); }
        "not"      { TOK(NOT); }
        "true"     { TOK(TRUE); }
        "false"    { TOK(FALSE); }
        "nil"      { TOK(NIL); }
        id         { return name(lx, s, CUR, val, loc); }

        dec | hex | bin | oct { return number(lx, s, CUR, false, val, loc); }
        flt        { return number(lx, s, CUR, true, val, loc); }

        dqs ["] | sqs [']  { return string(lx, s, CUR, val, loc); }
        [fF] (dqs ["] | sqs [']) { return fstring(lx, s, CUR, val, loc); }
        [fF]? (dqs | sqs)  {
            const char *stop = CUR;
            *loc = take(lx, s, CUR);
            if (*stop == 0 && stop < lx->lim) /* a NUL byte inside: the string goes on past it */
                LEXFAIL(loc_within(*loc, s, stop, 1), "unexpected byte 0x00 in a string (write \\0 for a NUL)");
            loc->len = 1;
            lx->string_open = *stop == 0 && stop == lx->lim;
            LEXFAIL(*loc, "unterminated string");
        }

        "++" | "--" {
            /* i++ at a line's end is no increment: the '+' would continue
             * the expression on the next line, i + (+next), silently (a
             * loop that never ends, a value that never changes) */
            const char *p = CUR;
            while (p < lx->lim && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
            if (p == lx->lim || *p == '\n' || *p == '#' || *p == ';' || *p == '}' || *p == ')') {
                *loc = take(lx, s, CUR);
                bool named = lx->la_kind == NAME; /* the name before it, else i */
                LEXFAIL(*loc, "tfe has no '%c%c': write %.*s %c= 1", *s, *s, named ? lx->la_loc.len : 1,
                        named ? lx->src->text + lx->la_loc.off : "i", *s);
            }
            *loc = take(lx, s, s + 1); /* x + +y, x - -y: the first sign alone */
            return *s == '+' ? PLUS : MINUS;
        }
        "+"   { TOK(PLUS); }
        "-"   { TOK(MINUS); }
        "*"   { TOK(STAR); }
        "/"   { TOK(SLASH); }
        "//"  { TOK(DSLASH); }
        "%"   { TOK(PERCENT); }
        "**"  { TOK(POW); }
        "@"   { TOK(AT); }
        "=="  { TOK(EQ); }
        "!="  { TOK(NE); }
        "<"   { TOK(LT); }
        "<="  { TOK(LE); }
        ">"   { TOK(GT); }
        ">="  { TOK(GE); }
        "="   { TOK(ASSIGN); }
        "+="  { TOK(PLUSEQ); }
        "-="  { TOK(MINUSEQ); }
        "*="  { TOK(STAREQ); }
        "/="  { TOK(SLASHEQ); }
        "=>"  { TOK(ARROW); }
        "..." { TOK(ELLIPSIS); }
        "."   { TOK(DOT); }
        ","   { TOK(COMMA); }
        ":"   { TOK(COLON); }
        ";"   { TOK(SEMI); }
        "("   { TOK(LPAREN); }
        "["   { TOK(LBRACK); }
        "{"   { TOK(LBRACE); }
        ")"   { TOK(RPAREN); }
        "]"   { TOK(RBRACK); }
        "}"   { TOK(RBRACE); }

        "&&"  { *loc = take(lx, s, CUR); LEXFAIL(*loc, "unexpected '&&' (use 'and')"); }
        "||"  { *loc = take(lx, s, CUR); LEXFAIL(*loc, "unexpected '||' (use 'or')"); }
        "!"   { *loc = take(lx, s, CUR); LEXFAIL(*loc, "unexpected character '!' (use 'not')"); }

        [\x00] {
            if (s == lx->lim) {
                lx->cur = s;
                return YYEOF;
            }
            *loc = take(lx, s, CUR);
            LEXFAIL(*loc, "unexpected byte 0x00");
        }
        [\xc2-\xf4] [\x80-\xbf]+ {
            const char *e = s + utf8_len(s);
            *loc = take(lx, s, e);
            LEXFAIL(*loc, "unexpected character '%.*s'", (int)(e - s), s);
        }
        [\x21-\x7e] {
            *loc = take(lx, s, CUR);
            /* NumPy's and PyTorch's bitwise operators on masks */
            if (*s == '&' || *s == '|' || *s == '~') {
                const char *w = *s == '&' ? "and" : *s == '|' ? "or" : "not";
                LEXFAIL(*loc, "unexpected character '%c' (tfe writes '%s' for bools; for masks element by element, "
                              "logical_%s(%s))", *s, w, w, *s == '~' ? "x" : "a, b");
            }
            if (*s == '^') LEXFAIL(*loc, "unexpected character '^' (a power is x ** 2; for two masks, XOR is a != b)");
            LEXFAIL(*loc, "unexpected character '%c'", *s);
        }
        * {
            *loc = take(lx, s, CUR);
            LEXFAIL(*loc, "unexpected byte 0x%02x", (unsigned char)*s);
        }
        */
    }
#undef TOK
#undef CUR
}

/* Tokens after which a newline does not end the statement: binary
 * operators, ',', '=', '=>', compound assignment, openers, ':' and '.'. */
bool lex_continues(int kind)
{
    switch (kind) {
    case PLUS: case MINUS: case STAR: case SLASH: case DSLASH: case PERCENT:
    case POW: case AT: case DECO: case EQ: case NE: case LT: case LE: case GT:
    case GE: case AND: case OR: case NOT: case ASSIGN: case PLUSEQ:
    case MINUSEQ: case STAREQ: case SLASHEQ: case ARROW: case COMMA: case COLON:
    case DOT: case LPAREN: case LBRACK: case LBRACE:
        return true;
    default:
        return false;
    }
}

static bool at_statement_start(int last)
{
    return last == 0 || last == NEWLINE || last == SEMI || last == LBRACE;
}

/* Does a newline here end a statement? Not inside (...) or [...] (inside
 * {...} it does), not after a continuing token, and not twice in a row. */
static bool newline_counts(const Lexer *lx)
{
    if (lx->stop)
        return false; /* inside an f-string field */
    if (lx->depth > 0 && lx->stack[lx->depth - 1].ch != '{')
        return false;
    return !at_statement_start(lx->last) && !lex_continues(lx->last);
}

static bool has_value(int kind)
{
    return kind == NAME || kind == INT || kind == FLOAT || kind == STRING || kind == FSTRING;
}

/* The newline rule: a significant newline is held back until the next token
 * is known, and dropped before '}', 'else' and the end of input. */
int lex_next(Lexer *lx, YYSTYPE *val, Loc *loc)
{
    int k;
    if (lx->fexpr_start) {
        lx->fexpr_start = false;
        *loc = lx->end_loc;
        lx->la_kind = FEXPR;
        lx->la_loc = *loc;
        return FEXPR;
    }
    if (lx->buffered) {
        lx->buffered = false;
        k = lx->buf_kind;
        *val = lx->buf_val;
        *loc = lx->buf_loc;
    } else {
        while ((k = scan(lx, val, loc)) == RAW_NL)
            if (newline_counts(lx))
                lx->nl_pending = true;
        if (lx->nl_pending) {
            lx->nl_pending = false;
            if (k != RBRACE && k != ELSE && k != YYEOF && k != LEXERR) {
                lx->buffered = true;
                lx->buf_kind = k;
                lx->buf_val = *val;
                lx->buf_loc = *loc;
                k = NEWLINE;
                *loc = lx->end_loc;
            }
        }
    }
    if (lx->stop && k != YYEOF && k != LEXERR && loc->off + loc->len > (int)(lx->stop - lx->src->text)) {
        /* a token running past the field's end (the field split disagrees) */
        if (has_value(k))
            ast_free(val->node);
        lex_error_final(lx, *loc, "f-string: cannot parse this field");
        k = LEXERR;
    }
    /* brackets count when handed out, so that the stack never runs ahead
       of the parser by a buffered token */
    switch (k) {
    case LPAREN: k = open_bracket(lx, '(', k, *loc); break;
    case LBRACK: k = open_bracket(lx, '[', k, *loc); break;
    case LBRACE: k = open_bracket(lx, '{', k, *loc); break;
    case RPAREN: k = close_bracket(lx, ')', k, *loc); break;
    case RBRACK: k = close_bracket(lx, ']', k, *loc); break;
    case RBRACE: k = close_bracket(lx, '}', k, *loc); break;
    case AT: if (at_statement_start(lx->last)) k = DECO; break;
    default: break;
    }
    if (k == YYEOF)
        *loc = lx->end_loc;
    else if (k != NEWLINE)
        lx->end_loc = loc_within(*loc, lx->src->text + loc->off,
                                 lx->src->text + loc->off + loc->len, 1);
    if (k == IF || k == WHILE || k == FOR || k == WITH || k == FN)
        lx->header[lx->depth] = k;
    else if (k == LBRACE)
        lx->header[lx->depth - 1] = 0; /* depth counts this '{' already */
    /* a decorator waits for its 'fn' (the REPL's '...'): on its own line
     * only its name and arguments may follow it, and after that line only
     * 'fn'; anything else ends the wait (the parser's error follows) */
    if (k == DECO) {
        lx->deco_open = true;
        lx->deco_nl = false;
    } else if (k == FN) {
        lx->deco_open = false;
    } else if (lx->deco_open && lx->depth == 0 && k != YYEOF) {
        if (k == NEWLINE) lx->deco_nl = true;
        else if (lx->deco_nl || (k != NAME && k != DOT && k != RPAREN)) lx->deco_open = false;
    }
    lx->last = k;
    lx->prev_kind = lx->la_kind;
    lx->prev_loc = lx->la_loc;
    lx->la_kind = k;
    lx->la_loc = *loc;
    return k;
}

Lexer *lex_new(Source *src)
{
    Lexer *lx = xcalloc(1, sizeof *lx);
    lx->src = src;
    lx->cur = src->text;
    lx->lim = src->text + src->len;
    lx->line = 1;
    lx->line_start = src->text;
    lx->end_loc = (Loc){ src, 1, 1, 0, 1 };
    return lx;
}

void lex_free(Lexer *lx)
{
    if (!lx)
        return;
    if (lx->buffered && has_value(lx->buf_kind))
        ast_free(lx->buf_val.node);
    free(lx);
}

void lex_describe(const Lexer *lx, int kind, Loc loc, char *buf, size_t n)
{
    switch (kind) {
    case YYEOF:
        if (lx->stop) /* the end of an f-string field: the character there */
            snprintf(buf, n, "'%c'", *lx->stop);
        else
            snprintf(buf, n, "end of input");
        return;
    case NEWLINE: snprintf(buf, n, "end of line"); return;
    case STRING: snprintf(buf, n, "string"); return;
    case FSTRING: snprintf(buf, n, "f-string"); return;
    case LEXERR: snprintf(buf, n, "invalid token"); return;
    default: break;
    }
    const char *t = lx->src->text + loc.off;
    if (loc.len > 32)
        snprintf(buf, n, "'%.29s...'", t);
    else
        snprintf(buf, n, "'%.*s'", loc.len, t);
}
