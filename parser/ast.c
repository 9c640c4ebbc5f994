/* ast.c — sources, AST nodes and their lifetime, the REPL's "needs more
 * input?" check, and an S-expression dump of a tree for tests and debugging.
 * The parser itself is parser/grammar.y (parse_program lives there). */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lexer/lexer.h"
#include "parser/ast.h"
#include "util/xalloc.h"

Source *source_new(const char *name, const char *text, size_t len)
{
    Source *s = xcalloc(1, sizeof *s);
    s->refcount = 1;
    s->name = xstrdup(name ? name : "<input>");
    s->text = xcalloc(1, len + 1);
    /* Python's universal newlines: CRLF and a lone CR are one '\n' (a
     * string literal over two lines of a CRLF file kept the '\r', and a
     * file of CR line ends was one line), and a UTF-8 byte order mark at the
     * start, which Windows editors write, is dropped */
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
        text += 3;
        len -= 3;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\r') {
            s->text[n++] = '\n';
            if (i + 1 < len && text[i + 1] == '\n') i++;
        } else {
            s->text[n++] = text[i];
        }
    }
    s->len = n;
    return s;
}

/* A source file's largest size: programs are far smaller; a device read as
 * one stops here with EFBIG */
#define SOURCE_MAX_BYTES ((size_t)64 << 20)

Source *source_from_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, len = 0;
    char *buf = xmalloc(cap);
    size_t got;
    bool too_big = false; /* a device that never ends (/dev/zero): an error, not a hang */
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len >= SOURCE_MAX_BYTES) {
            too_big = true;
            break;
        }
        if (len == cap) buf = xrealloc(buf, cap *= 2);
    }
    int failed = ferror(f) || too_big;
    int saved = too_big ? EFBIG : failed ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (failed) {
        free(buf);
        errno = saved;
        return NULL;
    }
    Source *s = source_new(path, buf, len);
    free(buf);
    char *copy = xstrdup(path);
    s->dir = xstrdup(dirname(copy));
    free(copy);
    return s;
}

void source_incref(Source *s)
{
    if (s)
        s->refcount++;
}

void source_decref(Source *s)
{
    if (!s || --s->refcount > 0)
        return;
    free(s->name);
    free(s->text);
    free(s->dir);
    free(s);
}

Node *node_new(NodeKind kind, Loc loc)
{
    Node *n = xcalloc(1, sizeof *n);
    n->kind = kind;
    if (loc.len < 1)
        loc.len = 1;
    n->loc = loc;
    n->opl = loc;
    return n;
}

void nodelist_push(NodeList *l, Node *n)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        l->items = xrealloc(l->items, sizeof *l->items * (size_t)cap);
        l->cap = cap;
    }
    l->items[l->n++] = n;
}

/* Iterative, so that a very deep tree (a + a + ... a) cannot overflow the C
 * stack. The N_PROGRAM root holds a reference to its Source. The resolver's
 * `info` is one malloc'd block (interp/resolve.c), freed here with the node. */
void ast_free(Node *root)
{
    if (!root)
        return;
    NodeList todo = {0};
    nodelist_push(&todo, root);
    while (todo.n > 0) {
        Node *n = todo.items[--todo.n];
        if (!n)
            continue;
        if (n->a) nodelist_push(&todo, n->a);
        if (n->b) nodelist_push(&todo, n->b);
        if (n->c) nodelist_push(&todo, n->c);
        for (int i = 0; i < n->list.n; i++)
            if (n->list.items[i]) nodelist_push(&todo, n->list.items[i]);
        for (int i = 0; i < n->list2.n; i++)
            if (n->list2.items[i]) nodelist_push(&todo, n->list2.items[i]);
        free(n->list.items);
        free(n->list2.items);
        free(n->str);
        free(n->str2);
        free(n->info);
        if (n->kind == N_PROGRAM)
            source_decref(n->loc.src);
        free(n);
    }
    free(todo.items);
}

const char *op_symbol(int op)
{
    switch (op) {
    case AOP_ADD: return "+";
    case AOP_SUB: return "-";
    case AOP_MUL: return "*";
    case AOP_DIV: return "/";
    case AOP_FLOORDIV: return "//";
    case AOP_MOD: return "%";
    case AOP_POW: return "**";
    case AOP_MATMUL: return "@";
    case AOP_EQ: return "==";
    case AOP_NE: return "!=";
    case AOP_LT: return "<";
    case AOP_LE: return "<=";
    case AOP_GT: return ">";
    case AOP_GE: return ">=";
    case AOP_NEG: return "-";
    case AOP_POS: return "+";
    case AOP_IN: return "in";
    case AOP_NOTIN: return "not in";
    default: return "?";
    }
}

/* The REPL asks for another line while a bracket or string is open, or the
 * text ends with a token that continues the statement (binary operator, ',',
 * '=', '=>'), or with a decorator that still waits for its 'fn'. */
bool parse_needs_more(const char *text)
{
    Source *src = source_new("<repl>", text, strlen(text));
    Lexer *lx = lex_new(src);
    int k, prev = 0;
    YYSTYPE val;
    Loc loc;
    while ((k = lex_next(lx, &val, &loc)) != YYEOF && k != LEXERR) {
        if (k == NAME || k == INT || k == FLOAT || k == STRING || k == FSTRING)
            ast_free(val.node);
        prev = k;
    }
    bool more;
    if (k == LEXERR)
        more = lx->string_open;
    else
        /* a ':' outside brackets continues nothing: it is Python's block
         * colon (for x in xs:), an error to report now, not a '...' prompt */
        more = lx->depth > 0 || (lex_continues(prev) && prev != COLON) || lx->deco_open;
    lex_free(lx);
    source_decref(src);
    return more;
}

/* --- S-expression dump ---------------------------------------------------- */

static void dump_str(const char *s, size_t n, FILE *f)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (c < 0x20 || c == 0x7f)
                fprintf(f, "\\x%02x", c);
            else
                fputc(c, f);
        }
    }
    fputc('"', f);
}

static void dump_list(const NodeList *l, FILE *f)
{
    for (int i = 0; i < l->n; i++) {
        fputc(' ', f);
        ast_dump(l->items[i], f);
    }
}

static void dump_opt(const Node *n, FILE *f)
{
    fputc(' ', f);
    if (n)
        ast_dump(n, f);
    else
        fputc('_', f);
}

/* Recursive for readability; past this depth a subtree prints as "...". */
#define DUMP_MAX_DEPTH 2000
static int dump_depth;

static void dump_node(const Node *n, FILE *f);

void ast_dump(const Node *n, FILE *f)
{
    if (!n) {
        fputc('_', f);
        return;
    }
    if (dump_depth >= DUMP_MAX_DEPTH) {
        fputs("...", f);
        return;
    }
    dump_depth++;
    dump_node(n, f);
    dump_depth--;
}

static void dump_node(const Node *n, FILE *f)
{
    switch (n->kind) {
    case N_INT: fprintf(f, "%lld", (long long)n->ival); break;
    case N_FLOAT: fprintf(f, "%.17gf", n->fval); break;
    case N_STR: dump_str(n->str, n->slen, f); break;
    case N_TRUE: fputs("true", f); break;
    case N_FALSE: fputs("false", f); break;
    case N_NIL: fputs("nil", f); break;
    case N_NAME: fputs(n->str, f); break;
    case N_BINOP:
        fprintf(f, "(%s ", op_symbol(n->op));
        ast_dump(n->a, f);
        fputc(' ', f);
        ast_dump(n->b, f);
        fputc(')', f);
        break;
    case N_UNOP:
        fprintf(f, "(%s ", n->op == AOP_NEG ? "neg" : "pos");
        ast_dump(n->a, f);
        fputc(')', f);
        break;
    case N_AND: case N_OR:
        fprintf(f, "(%s ", n->kind == N_AND ? "and" : "or");
        ast_dump(n->a, f);
        fputc(' ', f);
        ast_dump(n->b, f);
        fputc(')', f);
        break;
    case N_NOT: fputs("(not ", f); ast_dump(n->a, f); fputc(')', f); break;
    case N_CALL:
        fputs("(call ", f);
        ast_dump(n->a, f);
        dump_list(&n->list, f);
        dump_list(&n->list2, f);
        fputc(')', f);
        break;
    case N_KWARG: fprintf(f, "(kw %s ", n->str); ast_dump(n->a, f); fputc(')', f); break;
    case N_INDEX:
        fputs("(index ", f);
        ast_dump(n->a, f);
        dump_list(&n->list, f);
        fputc(')', f);
        break;
    case N_SLICE:
        fputs("(slice", f);
        dump_opt(n->a, f);
        dump_opt(n->b, f);
        dump_opt(n->c, f);
        fputc(')', f);
        break;
    case N_ELLIPSIS: fputs("...", f); break;
    case N_FIELD: fputs("(. ", f); ast_dump(n->a, f); fprintf(f, " %s)", n->str); break;
    case N_ARRAY: fputs("(array", f); dump_list(&n->list, f); fputc(')', f); break;
    case N_TUPLE: fputs("(tuple", f); dump_list(&n->list, f); fputc(')', f); break;
    case N_RECORD: fputs("(record", f); dump_list(&n->list, f); fputc(')', f); break;
    case N_FIELDINIT:
        fputc('(', f);
        dump_str(n->str, strlen(n->str), f);
        fputc(' ', f);
        ast_dump(n->a, f);
        fputc(')', f);
        break;
    case N_FN:
        fprintf(f, "(%s %s (params", n->is_lambda ? "lambda" : "fn", n->str ? n->str : "_");
        dump_list(&n->list, f);
        fputc(')', f);
        if (n->list2.n) {
            fputs(" (decorators", f);
            dump_list(&n->list2, f);
            fputc(')', f);
        }
        fputc(' ', f);
        ast_dump(n->a, f);
        fputc(')', f);
        break;
    case N_PARAM:
        if (n->a) {
            fprintf(f, "(%s ", n->str);
            ast_dump(n->a, f);
            fputc(')', f);
        } else {
            fputs(n->str, f);
        }
        break;
    case N_IFEXPR:
        fputs("(ifexpr ", f);
        ast_dump(n->a->a, f);
        fputc(' ', f);
        ast_dump(n->a->b->list.items[0]->b, f);
        fputc(' ', f);
        ast_dump(n->a->c->list.items[0]->b, f);
        fputc(')', f);
        break;
    case N_COMP:
        fputs("(comp ", f);
        ast_dump(n->a, f);
        for (int i = 0; i < n->list.n; i++) {
            const Node *c = n->list.items[i];
            fputs(c->kind == N_FOR ? " (for " : " (if ", f);
            ast_dump(c->a, f);
            if (c->kind == N_FOR) {
                fputc(' ', f);
                ast_dump(c->b, f);
            }
            fputc(')', f);
        }
        fputc(')', f);
        break;
    case N_FSTRING: fputs("(fstring", f); dump_list(&n->list, f); fputc(')', f); break;
    case N_FMTFIELD:
        fputs("(field ", f);
        dump_str(n->str, n->slen, f);
        fputc(' ', f);
        ast_dump(n->a, f);
        dump_list(&n->list, f);
        fputc(')', f);
        break;
    case N_LET: fputs("(let ", f); ast_dump(n->a, f); fputc(' ', f); ast_dump(n->b, f); fputc(')', f); break;
    case N_PNAME: fputs(n->str, f); break;
    case N_PTUPLE: fputs("(ptuple", f); dump_list(&n->list, f); fputc(')', f); break;
    case N_ASSIGN:
        fprintf(f, "(%s%s ", n->op ? op_symbol(n->op) : "", "=");
        ast_dump(n->a, f);
        fputc(' ', f);
        ast_dump(n->b, f);
        fputc(')', f);
        break;
    case N_EXPR: fputs("(expr ", f); ast_dump(n->a, f); fputc(')', f); break;
    case N_FNDECL: fputs("(fndecl ", f); ast_dump(n->a, f); fputc(')', f); break;
    case N_IF:
        fputs("(if ", f);
        ast_dump(n->a, f);
        fputc(' ', f);
        ast_dump(n->b, f);
        dump_opt(n->c, f);
        fputc(')', f);
        break;
    case N_WHILE: fputs("(while ", f); ast_dump(n->a, f); fputc(' ', f); ast_dump(n->b, f); fputc(')', f); break;
    case N_FOR:
        fputs("(for ", f);
        ast_dump(n->a, f);
        fputc(' ', f);
        ast_dump(n->b, f);
        fputc(' ', f);
        ast_dump(n->c, f);
        fputc(')', f);
        break;
    case N_BREAK: fputs("break", f); break;
    case N_CONTINUE: fputs("continue", f); break;
    case N_RETURN: fputs("(return", f); dump_opt(n->a, f); fputc(')', f); break;
    case N_WITH:
        fputs("(with ", f);
        ast_dump(n->a, f);
        fprintf(f, " %s ", n->str ? n->str : "_");
        ast_dump(n->b, f);
        fputc(')', f);
        break;
    case N_IMPORT:
        fputs("(import ", f);
        if (n->is_path)
            dump_str(n->str, strlen(n->str), f);
        else
            fputs(n->str, f);
        fprintf(f, " %s)", n->str2);
        break;
    case N_BLOCK: fputs("(block", f); dump_list(&n->list, f); fputc(')', f); break;
    case N_PROGRAM:
        fputs("(program", f);
        for (int i = 0; i < n->list.n; i++) {
            fputs("\n  ", f);
            ast_dump(n->list.items[i], f);
        }
        fputs(")\n", f);
        break;
    case N_KIND_COUNT: fputs("?", f); break;
    }
}
