/* ast.h — source text, locations and the abstract syntax tree of tfe.
 * Ownership: a Source is refcounted; the AST of one parse is owned by its root
 * (ast_free frees the whole tree), and every Node points into its Source. */
#ifndef TFE_AST_H
#define TFE_AST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "util/loc.h"

/* One piece of program text: a file, a -e string, one REPL entry. */
typedef struct Source {
    int refcount;
    char *name;   /* "train.tfe", "<cmdline>", "<stdin>", "<repl>" */
    char *text;   /* NUL-terminated copy of the text: line ends made '\n', no BOM (source_new) */
    size_t len;
    char *dir;    /* folder of the file (for import), or NULL */
    bool library; /* a stdlib module (import found it in the stdlib's folder) */
} Source;

Source *source_new(const char *name, const char *text, size_t len);
Source *source_from_file(const char *path); /* NULL (errno set) if unreadable */
void source_incref(Source *s);
void source_decref(Source *s);

/* Loc, a location in a Source: util/loc.h. */

typedef enum NodeKind {
    /* expressions */
    N_INT,       /* ival */
    N_FLOAT,     /* fval (a literal with '.' or exponent: float32) */
    N_STR,       /* str, slen (may contain NUL bytes) */
    N_TRUE, N_FALSE, N_NIL,
    N_NAME,      /* str = name; slot/depth filled by the resolver */
    N_BINOP,     /* op = one of the AOP_* below; a, b */
    N_UNOP,      /* op = AOP_NEG or AOP_POS; a */
    N_AND, N_OR, /* a, b (short-circuit) */
    N_NOT,       /* a */
    N_CALL,      /* a = callee; list = positional args; list2 = N_KWARG */
    N_KWARG,     /* str = name, a = value */
    N_INDEX,     /* a = target; list = items (exprs, N_SLICE, N_ELLIPSIS) */
    N_SLICE,     /* a = start, b = stop, c = step (each may be NULL) */
    N_ELLIPSIS,
    N_FIELD,     /* a = target, str = field name */
    N_ARRAY,     /* [e, ...] tensor literal: list */
    N_TUPLE,     /* (e, ...): list (a parenthesised single expr is not a tuple) */
    N_RECORD,    /* {k: v, ...}: list of N_FIELDINIT */
    N_FIELDINIT, /* str = key, a = value */
    N_FN,        /* str = name or NULL; list = N_PARAM; a = body: N_BLOCK, or an
                    expression when is_lambda (fn (x) => e); list2 = decorators
                    (expressions, outermost first) */
    N_PARAM,     /* str = name, a = default value or NULL */
    N_IFEXPR,    /* a if c else b: a = the N_IF it stands for, whose branches
                    are blocks of one N_ASSIGN to a hidden N_NAME (the resolver
                    gives it a slot of its own); opl = the 'if' */
    N_COMP,      /* [e for p in xs if c ...]: a = e; list = N_FOR (a = pattern,
                    b = iterable) and N_IF (a = condition) clauses */
    N_FSTRING,   /* f"...": list = N_STR pieces and N_FMTFIELD fields */
    N_FMTFIELD,  /* {expr!c:spec} of an f-string: a = expr; str = a format()
                    string for it ("{0!r:>{1}}"); list = expressions nested in
                    the spec ({1}, ...); opl = the field's text between braces */

    /* statements */
    N_LET,       /* a = pattern (N_PNAME / N_PTUPLE), b = value */
    N_PNAME,     /* str = name */
    N_PTUPLE,    /* list of N_PNAME / N_PTUPLE */
    N_ASSIGN,    /* a = target (N_NAME, N_INDEX, N_FIELD), b = value,
                    op = 0 for '=', or AOP_ADD/AOP_SUB/AOP_MUL/AOP_DIV for += -= *= /= */
    N_EXPR,      /* a = expression statement */
    N_FNDECL,    /* a = N_FN (with a name) */
    N_IF,        /* a = cond, b = then N_BLOCK, c = else (N_BLOCK, N_IF, or NULL) */
    N_WHILE,     /* a = cond, b = body */
    N_FOR,       /* a = pattern (N_PNAME/N_PTUPLE), b = iterable, c = body */
    N_BREAK, N_CONTINUE,
    N_RETURN,    /* a = value or NULL */
    N_WITH,      /* a = context expr, b = body N_BLOCK, str = "as" name or NULL */
    N_IMPORT,    /* str = module name (import nn) or path (import "x.tfe" as y);
                    is_path; str2 = binding name */
    N_BLOCK,     /* list of statements */
    N_PROGRAM,   /* list of statements */
    N_KIND_COUNT
} NodeKind;

enum {
    /* operator codes of N_BINOP, N_UNOP and N_ASSIGN (AOP_: "AST operator";
       the tensor library's ops are OP_* in tensor/ops.h) */
    AOP_ADD = 1, AOP_SUB, AOP_MUL, AOP_DIV, AOP_FLOORDIV, AOP_MOD, AOP_POW, AOP_MATMUL,
    AOP_EQ, AOP_NE, AOP_LT, AOP_LE, AOP_GT, AOP_GE, AOP_NEG, AOP_POS,
    AOP_IN, AOP_NOTIN /* x in xs, x not in xs: comparisons, after the rest (eval.c tests AOP_EQ..AOP_GE) */
};

typedef struct Node Node;
typedef struct NodeList { Node **items; int n, cap; bool has_fn; /* resolver: holds an N_FNDECL */ } NodeList;

struct Node {
    NodeKind kind;
    int op;
    Loc loc;            /* whole construct; for N_BINOP the operator token's span
                           is opl (errors point at the operator) */
    Loc opl;
    Node *a, *b, *c;
    NodeList list, list2;
    char *str, *str2;
    size_t slen;
    int64_t ival;
    double fval;
    bool is_lambda, is_path;
    int edepth;          /* parser: the expression's depth (grammar.y: deep()) */
    /* filled by the resolver (interp/resolve.c) */
    int slot, depth, nslots;
    void *info;          /* resolver data for functions/blocks */
};

Node *node_new(NodeKind kind, Loc loc);
void nodelist_push(NodeList *l, Node *n);
void ast_free(Node *n);
const char *op_symbol(int op); /* "+", "==", ... */
/* Debug/test aid: the tree as an S-expression, e.g. (+ 1 (* 2 x)). */
void ast_dump(const Node *n, FILE *f);

/* Parsing. On success returns the N_PROGRAM; on a syntax error returns NULL
 * and fills *err (message without location; err->loc says where). */
typedef struct ParseError {
    char msg[512];
    Loc loc;
} ParseError;

Node *parse_program(Source *src, ParseError *err);

/* For the REPL: does this text need more lines (open bracket, brace or
 * string, or a trailing binary operator / comma)? */
bool parse_needs_more(const char *text);

#endif
