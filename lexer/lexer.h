/* lexer.h — the tfe scanner (lexer/lexer.re): tokens with locations for the
 * Bison parser, the newline rule, open-bracket tracking and the first error.
 * Ownership: a Lexer borrows its Source; token values it hands out are the
 * parser's to free (a token it still holds is freed by lex_free). */
#ifndef TFE_LEXER_H
#define TFE_LEXER_H

#include <stdbool.h>
#include "parser/ast.h"
#include "parser/grammar.h"

/* Brackets nest at most this deep ("expression nested too deeply"). */
#define LEX_MAX_NESTING 1000

typedef struct LexBracket {
    char ch;   /* '(' '[' '{' */
    Loc loc;
} LexBracket;

struct Lexer {
    Source *src;
    const char *cur, *lim;      /* lim is the text's NUL terminator */
    int line;                   /* line of cur; line_start is its first byte */
    const char *line_start;
    int last;                   /* last token handed to the parser; 0 at start */
    Loc last_loc;
    bool nl_pending;            /* a significant newline seen, not yet sent */
    bool buffered;              /* a token read past a pending newline */
    int buf_kind;
    YYSTYPE buf_val;
    Loc buf_loc;
    LexBracket stack[LEX_MAX_NESTING];
    int depth;
    int header[LEX_MAX_NESTING + 1]; /* per depth: the IF/WHILE/FOR/WITH/FN
                                        whose block '{' has not come yet */
    Loc end_loc;                /* just past the last token (where a newline
                                   or the end of input is reported) */
    int la_kind;                /* the token most recently handed out */
    Loc la_loc;
    int prev_kind;              /* and the one before it */
    Loc prev_loc;
    bool deco_open;             /* a decorator not yet followed by 'fn' */
    bool deco_nl;               /* ... and its line has ended */
    bool string_open;           /* scanning stopped inside a string */
    const char *stop;           /* a sub-lexer of an f-string field: the end of
                                   its expression (NULL otherwise) */
    bool fexpr_start;           /* that sub-lexer's first token is FEXPR */
    bool has_err, err_final;
    char err[512];
    Loc err_loc;
    Node *result;               /* the N_PROGRAM, set by the parser */
};

Lexer *lex_new(Source *src);
void lex_free(Lexer *lx);
/* The next token (a yytoken_kind_t); its value and location. */
int lex_next(Lexer *lx, YYSTYPE *val, Loc *loc);
/* Record an error: lex_error replaces an earlier one unless that was final
 * (lexical errors and unclosed brackets are final). */
void lex_error(Lexer *lx, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void lex_error_final(Lexer *lx, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Tokens after which a newline does not end a statement. */
bool lex_continues(int kind);
/* The expression of an f-string field, text start..stop of lx's Source
 * (parser/grammar.y); NULL with err filled on a syntax error. */
Node *parse_fexpr(Lexer *lx, const char *start, const char *stop, int line, const char *line_start,
                  ParseError *err);
/* "'+'", "'foo'", "string", "end of line", "end of input" for a token. */
void lex_describe(const Lexer *lx, int kind, Loc loc, char *buf, size_t n);

#endif
