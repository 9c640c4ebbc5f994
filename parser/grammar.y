/* grammar.y — the Bison grammar of tfe: statements and expressions to AST.
 * Pure parser over lexer/lexer.re; stops at the first syntax error, which
 * yyreport_syntax_error describes, with hints for the common mistakes. */

%code requires {
#include "parser/ast.h"
typedef struct Lexer Lexer;
}

%code provides {
int yylex(YYSTYPE *val, Loc *loc, Lexer *lx);
}

%code {
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lexer/lexer.h"
#include "util/xalloc.h"

/* A span from the first to the last non-empty symbol; an empty rule is an
 * empty span just after the previous symbol. */
#define YYLLOC_DEFAULT(Cur, Rhs, N) parse_loc_span(&(Cur), (Rhs), (N))
static void parse_loc_span(Loc *cur, const Loc *rhs, int n);

static void yyerror(Loc *loc, Lexer *lx, const char *msg);
static Node *mk(NodeKind k, Loc loc) { return node_new(k, loc); }
static Node *mk2(NodeKind k, Loc loc, Node *a, Node *b);
static Node *binop(int op, Loc loc, Loc opl, Node *a, Node *b);
static bool deep(Lexer *lx, Node *n, int weight);

/* The deepest expression the parser builds. The resolver, the evaluator
 * and ast_free recurse once or more per level (a chain 1 + 1 + ... + 1 of
 * 100000 terms overflowed the C stack; ASan's larger frames overflow near
 * 30000 levels), and brackets alone cannot bound it (a chain needs none),
 * so operators, calls, indexing and fields count here, each node more
 * than its deepest child. */
#define MAX_EXPR_DEPTH 3000
/* A call, an indexing or a field costs the evaluator about three times an
 * operator's stack (an ASan build ran 3000 indexings in 6 to 8 MiB, 3000
 * additions in under 4), so each counts three: at most 1000 in a chain. */
#define POSTFIX_WEIGHT 3
static void list_move(NodeList *dst, Node *carrier);
static Node *assign(Lexer *lx, int op, Loc loc, Loc opl, Node *t, Node *v);
static Node *ifexpr(Loc loc, Loc opl, Node *cond, Node *then, Node *other);
static bool starts_expr(yysymbol_kind_t k);
}

%define api.pure full
%initial-action { @$ = (Loc){ lx->src, 1, 1, 0, 0 }; }
%define api.location.type {Loc}
%locations
%define parse.error custom
%param {Lexer *lx}
%expect 0
/* No default reductions: errors are found in the state where the lookahead
 * first fails, so the expected-token set that the messages use is exact. */
%define lr.type canonical-lr
%define lr.default-reduction accepting

%union {
    Node *node;
    int op;
}

%token <node> NAME "name" INT "integer" FLOAT "number" STRING "string"
%token LET "let" FN "fn" RETURN "return" IF "if" ELSE "else" WHILE "while"
%token FOR "for" IN "in" BREAK "break" CONTINUE "continue" WITH "with"
%token AS "as" IMPORT "import" AND "and" OR "or" NOT "not" TRUE "true"
%token FALSE "false" NIL "nil"
%token PLUS "+" MINUS "-" STAR "*" SLASH "/" DSLASH "//" PERCENT "%"
%token POW "**" AT "@" DECO "decorator"
%token EQ "==" NE "!=" LT "<" LE "<=" GT ">" GE ">="
%token ASSIGN "=" PLUSEQ "+=" MINUSEQ "-=" STAREQ "*=" SLASHEQ "/="
%token LPAREN "(" RPAREN ")" LBRACK "[" RBRACK "]" LBRACE "{" RBRACE "}"
%token COMMA "," COLON ":" DOT "." SEMI ";" ARROW "=>" ELLIPSIS "..."
%token NEWLINE "end of line"
%token <node> FSTRING "f-string"
%token FEXPR "start of an f-string field" /* first token of a sub-parse: the expression in an f-string's braces */
%token LEXERR "invalid token"

%type <node> stmt_list stmt simple_stmt if_stmt else_part block block_body
%type <node> fn_decl decorators decorator params param_list param
%type <node> pattern pattern_top pattern_list
%type <node> texpr cond_expr comp_clauses expr lambda or_expr and_expr not_expr cmp sum term unary power
%type <node> postfix primary expr_list args arg_list arg items item opt_expr
%type <node> fields field
%type <op> cmpop mulop augop

%destructor { ast_free($$); } <node>

%%

/* program -> seps? (stmt (seps stmt)*)? seps? */
program
    : opt_seps                      { lx->result = mk(N_PROGRAM, @$); }
    | opt_seps stmt_list opt_seps   { $2->kind = N_PROGRAM; $2->loc = @$; lx->result = $2; }
    | FEXPR expr                    { lx->result = $2; } /* parse_fexpr */
    ;

opt_seps: %empty | seps ;
seps: sep | seps sep ;
sep: NEWLINE | ";" ;

stmt_list
    : stmt                          { $$ = mk(N_BLOCK, @$); nodelist_push(&$$->list, $1); }
    | stmt_list seps stmt           { $$ = $1; nodelist_push(&$$->list, $3); }
    ;

/* block -> '{' statements '}' (newlines after '{' and before '}' are dropped
 * by the lexer) */
block
    : "{" block_body "}"            { $$ = $2; $$->loc = @$; }
    ;
block_body
    : opt_seps                      { $$ = mk(N_BLOCK, @$); }
    | opt_seps stmt_list opt_seps   { $$ = $2; }
    ;

stmt
    : simple_stmt
    | if_stmt
    | fn_decl
    | decorators fn_decl            { $$ = $2; $$->loc = @$; list_move(&$2->a->list2, $1); }
    | "while" expr block            { $$ = mk2(N_WHILE, @$, $2, $3); }
    | "for" pattern_top "in" expr block
                                    { $$ = mk2(N_FOR, @$, $2, $4); $$->c = $5; }
    | "with" expr block             { $$ = mk2(N_WITH, @$, $2, $3); }
    | "with" expr "as" NAME block   { $$ = mk2(N_WITH, @$, $2, $5); $$->str = $4->str; $4->str = NULL; ast_free($4); }
    ;

simple_stmt
    : "let" pattern_top "=" texpr   { $$ = mk2(N_LET, @$, $2, $4); }
    | texpr                         { $$ = mk(N_EXPR, @$); $$->a = $1; }
    | texpr "=" texpr               { if (!($$ = assign(lx, 0, @$, @2, $1, $3))) YYABORT; }
    | texpr augop texpr             { if (!($$ = assign(lx, $2, @$, @2, $1, $3))) YYABORT; }
    | "break"                       { $$ = mk(N_BREAK, @$); }
    | "continue"                    { $$ = mk(N_CONTINUE, @$); }
    | "return"                      { $$ = mk(N_RETURN, @$); }
    | "return" texpr                { $$ = mk(N_RETURN, @$); $$->a = $2; }
    | "import" NAME                 { $$ = mk(N_IMPORT, @$); $$->str = xstrdup($2->str); $$->str2 = $2->str; $2->str = NULL; ast_free($2); }
    | "import" NAME "as" NAME       { $$ = mk(N_IMPORT, @$); $$->str = $2->str; $$->str2 = $4->str;
                                      $2->str = $4->str = NULL; ast_free($2); ast_free($4); }
    | "import" STRING "as" NAME     { $$ = mk(N_IMPORT, @$); $$->str = $2->str; $$->str2 = $4->str; $$->is_path = true;
                                      $2->str = $4->str = NULL; ast_free($2); ast_free($4); }
    ;

augop
    : "+=" { $$ = AOP_ADD; } | "-=" { $$ = AOP_SUB; }
    | "*=" { $$ = AOP_MUL; } | "/=" { $$ = AOP_DIV; }
    ;

/* if_stmt -> 'if' expr block ('else' (block | if_stmt))? */
if_stmt
    : "if" expr block else_part     { $$ = mk2(N_IF, @$, $2, $3); $$->c = $4; }
    ;
else_part
    : %empty                        { $$ = NULL; }
    | "else" block                  { $$ = $2; }
    | "else" if_stmt                { $$ = $2; }    ;

/* fn_decl -> 'fn' NAME '(' params ')' block */
fn_decl
    : "fn" NAME "(" params ")" block {
          Node *f = mk(N_FN, @$);
          f->str = $2->str; $2->str = NULL; ast_free($2);
          list_move(&f->list, $4);
          f->a = $6;
          $$ = mk(N_FNDECL, @$); $$->a = f;
      }
    ;

/* decorators -> ('@' postfix NEWLINE?)+, outermost first */
decorators
    : decorator                     { $$ = mk(N_TUPLE, @$); nodelist_push(&$$->list, $1); }
    | decorators decorator          { $$ = $1; nodelist_push(&$$->list, $2); }
    ;
decorator
    : DECO postfix opt_newline      { $$ = $2; }
    ;
opt_newline: %empty | NEWLINE ;

params
    : %empty                        { $$ = mk(N_TUPLE, @$); }
    | param_list opt_comma          { $$ = $1; }
    ;
param_list
    : param                         { $$ = mk(N_TUPLE, @$); nodelist_push(&$$->list, $1); }
    | param_list "," param {
          $$ = $1;
          Node *last = $$->list.items[$$->list.n - 1];
          if (last->a && !$3->a) {
              lex_error(lx, $3->loc, "parameter '%s' without a default follows a parameter with one", $3->str);
              ast_free($1); ast_free($3); $$ = NULL; YYABORT;
          }
          nodelist_push(&$$->list, $3);
      }
    ;
param
    : NAME                          { $$ = $1; $$->kind = N_PARAM; }
    | NAME "=" expr                 { $$ = $1; $$->kind = N_PARAM; $$->a = $3; $$->loc = @$; }
    ;
opt_comma: %empty | "," ;

/* patterns: x, (a, (b, c)), and a bare a, b list in let/for */
pattern_top
    : pattern
    | pattern "," {
          $$ = mk(N_PTUPLE, @$); nodelist_push(&$$->list, $1);
      }
    | pattern "," pattern_list opt_comma {
          $$ = $3; $$->loc = @$;
          nodelist_push(&$$->list, NULL);
          memmove($$->list.items + 1, $$->list.items, sizeof(Node *) * ($$->list.n - 1));
          $$->list.items[0] = $1;
      }
    ;
pattern
    : NAME                          { $$ = $1; $$->kind = N_PNAME; }
    | "(" pattern ")"               { $$ = $2; }
    | "(" pattern "," ")"           { $$ = mk(N_PTUPLE, @$); nodelist_push(&$$->list, $2); }
    | "(" pattern "," pattern_list opt_comma ")" {
          $$ = $4; $$->loc = @$;
          nodelist_push(&$$->list, NULL);
          memmove($$->list.items + 1, $$->list.items, sizeof(Node *) * ($$->list.n - 1));
          $$->list.items[0] = $2;
      }
    ;
pattern_list
    : pattern                       { $$ = mk(N_PTUPLE, @$); nodelist_push(&$$->list, $1); }
    | pattern_list "," pattern      { $$ = $1; nodelist_push(&$$->list, $3); }
    ;

/* a bare tuple where Python takes one: a statement, both sides of '=',
 * the value of let and return (a, b = b, a; return x, y) */
texpr
    : expr
    | expr ","                      { $$ = mk(N_TUPLE, @$); nodelist_push(&$$->list, $1); }
    | expr "," expr_list opt_comma {
          $$ = $3; $$->kind = N_TUPLE; $$->loc = @$;
          nodelist_push(&$$->list, NULL);
          memmove($$->list.items + 1, $$->list.items, sizeof(Node *) * ($$->list.n - 1));
          $$->list.items[0] = $1;
      }
    ;

/* expressions, lowest precedence first */
expr
    : cond_expr
    | lambda
    ;

/* Python's conditional expression a if c else b: an N_IFEXPR whose a is the
 * statement it stands for, if c { tmp = a } else { tmp = b } (so that staged
 * code treats it exactly as that if); tmp is a slot the resolver hands out */
cond_expr
    : or_expr
    | or_expr "if" or_expr "else" expr { $$ = ifexpr(@$, @2, $3, $1, $5); }
    ;

/* lambda -> 'fn' '(' params ')' ('=>' expr | block) */
lambda
    : "fn" "(" params ")" "=>" expr {
          $$ = mk(N_FN, @$); list_move(&$$->list, $3); $$->a = $6; $$->is_lambda = true;
      }
    | "fn" "(" params ")" block {
          $$ = mk(N_FN, @$); list_move(&$$->list, $3); $$->a = $5;
      }
    ;

or_expr
    : and_expr
    | or_expr "or" and_expr         { $$ = mk2(N_OR, @$, $1, $3); $$->opl = @2; if (deep(lx, $$, 1)) YYABORT; }
    ;
and_expr
    : not_expr
    | and_expr "and" not_expr       { $$ = mk2(N_AND, @$, $1, $3); $$->opl = @2; if (deep(lx, $$, 1)) YYABORT; }
    ;
not_expr
    : cmp
    | "not" not_expr                { $$ = mk(N_NOT, @$); $$->a = $2; $$->opl = @1; if (deep(lx, $$, 1)) YYABORT; }
    ;

/* comparisons do not chain: a < b < c parses only to be refused with a hint */
cmp
    : sum
    | sum cmpop sum                 { $$ = binop($2, @$, @2, $1, $3); if (deep(lx, $$, 1)) YYABORT; }
    | sum cmpop sum cmpop {
          /* refused as soon as the second operator is seen; the cleanup
             frees the symbols already on the stack */
          lex_error(lx, @4, "comparisons cannot be chained; write 'a %s b and b %s c'",
                    op_symbol($2), op_symbol($4));
          YYABORT;
      } sum                         { (void)$2; (void)$4; ast_free($1); ast_free($3); $$ = $6; }
    ;
cmpop
    : "==" { $$ = AOP_EQ; } | "!=" { $$ = AOP_NE; } | "<" { $$ = AOP_LT; }
    | "<=" { $$ = AOP_LE; } | ">" { $$ = AOP_GT; } | ">=" { $$ = AOP_GE; }
    /* Python's membership test; 'in' after a for's pattern is the loop's
       (a pattern is not an expression, so the two never meet) */
    | "in" { $$ = AOP_IN; } | "not" "in" { $$ = AOP_NOTIN; }
    ;

sum
    : term
    | sum "+" term                  { $$ = binop(AOP_ADD, @$, @2, $1, $3); if (deep(lx, $$, 1)) YYABORT; }
    | sum "-" term                  { $$ = binop(AOP_SUB, @$, @2, $1, $3); if (deep(lx, $$, 1)) YYABORT; }
    ;
term
    : unary
    | term mulop unary              { $$ = binop($2, @$, @2, $1, $3); if (deep(lx, $$, 1)) YYABORT; }
    ;
mulop
    : "*" { $$ = AOP_MUL; } | "/" { $$ = AOP_DIV; } | "//" { $$ = AOP_FLOORDIV; }
    | "%" { $$ = AOP_MOD; } | "@" { $$ = AOP_MATMUL; }
    ;

/* -2 ** 2 is -(2 ** 2); 2 ** -1 parses; ** is right-associative */
unary
    : power
    | "-" unary                     { $$ = mk(N_UNOP, @$); $$->op = AOP_NEG; $$->a = $2; $$->opl = @1; if (deep(lx, $$, 1)) YYABORT; }
    | "+" unary                     { $$ = mk(N_UNOP, @$); $$->op = AOP_POS; $$->a = $2; $$->opl = @1; if (deep(lx, $$, 1)) YYABORT; }
    ;
power
    : postfix
    | postfix "**" unary            { $$ = binop(AOP_POW, @$, @2, $1, $3); if (deep(lx, $$, 1)) YYABORT; }
    ;

postfix
    : primary
    | postfix "(" args ")"          { $$ = $3; $$->a = $1; $$->loc = @$; $$->opl = @2; if (deep(lx, $$, POSTFIX_WEIGHT)) YYABORT; }
    | postfix "[" items "]"         { $$ = $3; $$->a = $1; $$->loc = @$; $$->opl = @2; if (deep(lx, $$, POSTFIX_WEIGHT)) YYABORT; }
    | postfix "." NAME {
          $$ = mk(N_FIELD, @$); $$->a = $1; $$->str = $3->str; $3->str = NULL;
          $$->opl = $3->loc; ast_free($3); if (deep(lx, $$, POSTFIX_WEIGHT)) YYABORT;
      }
    ;

primary
    : NAME
    | INT
    | FLOAT
    | STRING
    | "true"                        { $$ = mk(N_TRUE, @$); }
    | "false"                       { $$ = mk(N_FALSE, @$); }
    | "nil"                         { $$ = mk(N_NIL, @$); }
    | "(" ")"                       { $$ = mk(N_TUPLE, @$); }
    | "(" expr ")"                  { $$ = $2; }
    | "(" expr "," ")"              { $$ = mk(N_TUPLE, @$); nodelist_push(&$$->list, $2); if (deep(lx, $$, 1)) YYABORT; }
    | "(" expr "," expr_list opt_comma ")" {
          $$ = $4; $$->kind = N_TUPLE; $$->loc = @$;
          nodelist_push(&$$->list, NULL);
          memmove($$->list.items + 1, $$->list.items, sizeof(Node *) * ($$->list.n - 1));
          $$->list.items[0] = $2; if (deep(lx, $$, 1)) YYABORT;
      }
    | "[" "]"                       { $$ = mk(N_ARRAY, @$); }
    | "[" expr_list opt_comma "]"   { $$ = $2; $$->kind = N_ARRAY; $$->loc = @$; if (deep(lx, $$, 1)) YYABORT; }
    | "[" expr comp_clauses "]"     { $$ = $3; $$->a = $2; $$->loc = @$; if (deep(lx, $$, 1)) YYABORT; }
    | FSTRING
    | "{" "}"                       { $$ = mk(N_RECORD, @$); }
    | "{" fields opt_comma "}"      { $$ = $2; $$->loc = @$; if (deep(lx, $$, 1)) YYABORT; }
    ;

/* [e for x in xs if c ...]: N_COMP, a = e, list = clauses (N_FOR with a =
 * pattern and b = iterable; N_IF with a = condition). The iterable and the
 * condition are or_expr, as in Python, so 'if' after them is the filter. */
comp_clauses
    : "for" pattern_top "in" or_expr {
          $$ = mk(N_COMP, @$); Node *f = mk2(N_FOR, @$, $2, $4); nodelist_push(&$$->list, f);
      }
    | comp_clauses "for" pattern_top "in" or_expr {
          $$ = $1; Node *f = mk2(N_FOR, @2, $3, $5); f->loc.len = @5.off + @5.len - @2.off; nodelist_push(&$$->list, f);
      }
    | comp_clauses "if" or_expr {
          $$ = $1; Node *f = mk(N_IF, @3); f->a = $3; nodelist_push(&$$->list, f);
      }
    ;

expr_list
    : expr                          { $$ = mk(N_TUPLE, @$); nodelist_push(&$$->list, $1); }
    | expr_list "," expr            { $$ = $1; nodelist_push(&$$->list, $3); }
    ;

fields
    : field                         { $$ = mk(N_RECORD, @$); nodelist_push(&$$->list, $1); }
    | fields "," field              { $$ = $1; nodelist_push(&$$->list, $3); }
    ;
field
    : NAME ":" expr                 { $$ = $1; $$->kind = N_FIELDINIT; $$->a = $3; $$->loc = @$; }
    | STRING ":" expr               { $$ = $1; $$->kind = N_FIELDINIT; $$->a = $3; $$->loc = @$; }
    ;

/* call arguments: positional first, then name=value */
args
    : %empty                        { $$ = mk(N_CALL, @$); }
    | arg_list opt_comma            { $$ = $1; }
    ;
arg_list
    : arg {
          $$ = mk(N_CALL, @$);
          nodelist_push($1->kind == N_KWARG ? &$$->list2 : &$$->list, $1);
      }
    | arg_list "," arg {
          $$ = $1;
          if ($3->kind != N_KWARG && $$->list2.n > 0) {
              lex_error(lx, $3->loc, "positional argument follows keyword argument");
              ast_free($1); ast_free($3); $$ = NULL; YYABORT;
          }
          nodelist_push($3->kind == N_KWARG ? &$$->list2 : &$$->list, $3);
      }
    ;
arg
    : expr
    | NAME "=" expr                 { $$ = $1; $$->kind = N_KWARG; $$->a = $3; $$->loc = @$; }
    ;

/* index items: expressions, slices a:b:c (parts optional) and ... */
items
    : item                          { $$ = mk(N_INDEX, @$); nodelist_push(&$$->list, $1); }
    | items "," item                { $$ = $1; nodelist_push(&$$->list, $3); }
    | items ","                     { $$ = $1; }
    ;
item
    : expr
    | "..."                         { $$ = mk(N_ELLIPSIS, @$); }
    | opt_expr ":" opt_expr         { $$ = mk2(N_SLICE, @$, $1, $3); }
    | opt_expr ":" opt_expr ":" opt_expr
                                    { $$ = mk2(N_SLICE, @$, $1, $3); $$->c = $5; }
    ;
opt_expr
    : %empty                        { $$ = NULL; }
    | expr
    ;

%%

static void parse_loc_span(Loc *cur, const Loc *rhs, int n)
{
    int first = 0, last = 0;
    for (int i = 1; i <= n; i++)
        if (rhs[i].len > 0) {
            if (!first) first = i;
            last = i;
        }
    if (!first) {
        /* empty: a zero-length span just after the previous symbol */
        *cur = rhs[0];
        cur->off = rhs[0].off + rhs[0].len;
        cur->col = rhs[0].col + rhs[0].len;
        cur->len = 0;
        return;
    }
    *cur = rhs[first];
    cur->len = rhs[last].off + rhs[last].len - rhs[first].off;
}

static Node *mk2(NodeKind k, Loc loc, Node *a, Node *b)
{
    Node *n = node_new(k, loc);
    n->a = a;
    n->b = b;
    return n;
}

static int child_depth(const Node *c) { return c ? c->edepth : 0; }

/* Sets n's depth (weight more than its deepest child's); past the limit,
 * a located error, n freed (with the symbols it took over) and true: the
 * action aborts. */
static bool deep(Lexer *lx, Node *n, int weight)
{
    int d = child_depth(n->a);
    if (child_depth(n->b) > d) d = child_depth(n->b);
    if (child_depth(n->c) > d) d = child_depth(n->c);
    for (int i = 0; i < n->list.n; i++)
        if (child_depth(n->list.items[i]) > d) d = child_depth(n->list.items[i]);
    for (int i = 0; i < n->list2.n; i++)
        if (child_depth(n->list2.items[i]) > d) d = child_depth(n->list2.items[i]);
    n->edepth = d + weight;
    if (n->edepth <= MAX_EXPR_DEPTH) return false;
    lex_error_final(lx, n->opl.len ? n->opl : n->loc,
                    "expression nested too deeply (more than %d operators, or %d calls, indexings or fields, in one "
                    "expression: split it into steps with let)", MAX_EXPR_DEPTH, MAX_EXPR_DEPTH / POSTFIX_WEIGHT);
    ast_free(n);
    return true;
}

static Node *binop(int op, Loc loc, Loc opl, Node *a, Node *b)
{
    Node *n = mk2(N_BINOP, loc, a, b);
    n->op = op;
    n->opl = opl;
    return n;
}

/* Move the list of a temporary carrier node into dst and free the carrier. */
static void list_move(NodeList *dst, Node *carrier)
{
    *dst = carrier->list;
    carrier->list = (NodeList){0};
    ast_free(carrier);
}

/* A target of '=': a name, x[i], r.field, or a tuple of targets (a, b = ...);
 * NULL when it is fine, else the part that is not. */
static const Node *bad_target(const Node *t, bool tuple_ok)
{
    if (t->kind == N_NAME || t->kind == N_INDEX || t->kind == N_FIELD)
        return NULL;
    if (t->kind != N_TUPLE || !tuple_ok || t->list.n == 0)
        return t;
    for (int i = 0; i < t->list.n; i++) {
        const Node *b = bad_target(t->list.items[i], true);
        if (b)
            return b;
    }
    return NULL;
}

static Node *assign(Lexer *lx, int op, Loc loc, Loc opl, Node *t, Node *v)
{
    const Node *bad = bad_target(t, op == 0);
    if (bad) {
        if (bad == t && t->kind == N_TUPLE && op)
            lex_error(lx, opl, "'%s=' cannot update a tuple of targets (write one statement per target)", op_symbol(op));
        else if (bad != t)
            lex_error(lx, bad->loc, "cannot assign to this expression (a tuple of targets holds names, x[i] and r.field)");
        else
            lex_error(lx, bad->loc, "cannot assign to this expression (only to a name, x[i] or r.field)");
        ast_free(t);
        ast_free(v);
        return NULL;
    }
    Node *n = mk2(N_ASSIGN, loc, t, v);
    n->op = op;
    n->opl = opl;
    return n;
}

static Node *ifexpr(Loc loc, Loc opl, Node *cond, Node *then, Node *other)
{
    Node *branch[2] = { then, other };
    Node *stmt = mk(N_IF, loc);
    stmt->a = cond;
    stmt->opl = opl;
    for (int i = 0; i < 2; i++) {
        Node *tmp = mk(N_NAME, branch[i]->loc);
        tmp->str = xstrdup("the value of this conditional expression");
        Node *set = mk2(N_ASSIGN, branch[i]->loc, tmp, branch[i]);
        Node *block = mk(N_BLOCK, branch[i]->loc);
        nodelist_push(&block->list, set);
        if (i == 0) stmt->b = block;
        else stmt->c = block;
    }
    Node *n = mk(N_IFEXPR, loc);
    n->a = stmt;
    n->opl = opl;
    return n;
}

static void yyerror(Loc *loc, Lexer *lx, const char *msg)
{
    (void)loc;
    if (strstr(msg, "exhausted"))
        lex_error_final(lx, lx->la_loc, "expression nested too deeply");
    else
        lex_error(lx, lx->la_loc, "%s", msg);
}

static bool starts_expr(yysymbol_kind_t k)
{
    switch (k) {
    case YYSYMBOL_NAME: case YYSYMBOL_INT: case YYSYMBOL_FLOAT: case YYSYMBOL_STRING: case YYSYMBOL_FSTRING:
    case YYSYMBOL_TRUE: case YYSYMBOL_FALSE: case YYSYMBOL_NIL: case YYSYMBOL_FN:
    case YYSYMBOL_NOT: case YYSYMBOL_MINUS: case YYSYMBOL_PLUS:
    case YYSYMBOL_LPAREN: case YYSYMBOL_LBRACK: case YYSYMBOL_LBRACE:
        return true;
    default:
        return false;
    }
}

static bool expects(const yysymbol_kind_t *exp, int n, yysymbol_kind_t k)
{
    for (int i = 0; i < n; i++)
        if (exp[i] == k)
            return true;
    return false;
}

/* Is the token at loc the name w? */
static bool token_is(const Lexer *lx, int kind, Loc loc, const char *w)
{
    return kind == NAME && loc.len == (int)strlen(w) && memcmp(lx->src->text + loc.off, w, (size_t)loc.len) == 0;
}

/* A syntax error right at or after a word of Python that tfe spells another
 * way: how to write it in tfe (*at moves to the word). */
static const char *python_habit(const Lexer *lx, yysymbol_kind_t tok, Loc *at)
{
    static const struct { const char *word, *hint; } habits[] = {
        { "def", "tfe declares a function with 'fn': fn name(x) { ... }" },
        { "elif", "tfe writes 'else if', not 'elif'" },
        { "lambda", "tfe writes an anonymous function as fn (x) => x * 2" },
        { "class", "tfe has no classes: use records ({w: w, b: b}) and functions" },
        { "from", "tfe imports a whole module: import nn (then nn.name), or import \"path.tfe\" as name" },
        { "pass", "tfe has no 'pass': an empty block is { }" },
    };
    const char *text = lx->src->text;
    if (tok == YYSYMBOL_DOT) { /* import torch.nn as nn */
        int k = lx->prev_loc.off;
        while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) k--;
        if (lx->prev_kind == NAME && k >= 6 && memcmp(text + k - 6, "import", 6) == 0 &&
            (k == 6 || text[k - 7] == ' ' || text[k - 7] == '\n' || text[k - 7] == ';')) {
            *at = lx->prev_loc;
            return "tfe needs no Python packages: tensors and their ops are built in, and its own modules are "
                   "imported by name (import nn, import optim)";
        }
    }
    if (token_is(lx, lx->la_kind, lx->la_loc, "is")) { /* x is None */
        *at = lx->la_loc;
        return "tfe compares with '==' and '!=' (x == nil), not 'is'";
    }
    for (size_t i = 0; i < sizeof habits / sizeof habits[0]; i++) {
        if (tok != YYSYMBOL_YYEOF && token_is(lx, lx->la_kind, lx->la_loc, habits[i].word) &&
            strcmp(habits[i].word, "elif") == 0) {
            *at = lx->la_loc; /* } elif c { */
            return habits[i].hint;
        }
        if (token_is(lx, lx->prev_kind, lx->prev_loc, habits[i].word)) {
            *at = lx->prev_loc;
            return habits[i].hint;
        }
    }
    return NULL;
}

/* Does the statement holding the '=' at `at` already have a plain '=' (not
 * ==, !=, <=, >=, =>, +=, ...) before it on its line, outside strings,
 * parentheses and square brackets? Then the second '=' is a chained assignment (a = b = 3). */
static bool assigns_before(const Lexer *lx, Loc at)
{
    const char *text = lx->src->text;
    int start = at.off;
    while (start > 0 && text[start - 1] != '\n' && text[start - 1] != ';')
        start--;
    int depth = 0;
    char quote = 0;
    for (int k = start; k < at.off; k++) {
        char c = text[k];
        if (quote) {
            if (c == '\\') k++;
            else if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
            quote = c;
        } else if (c == '#') {
            return false;
        } else if (c == '(' || c == '[') { /* a block's '{' starts statements: not counted */
            depth++;
        } else if (c == ')' || c == ']') {
            depth = depth > 0 ? depth - 1 : 0;
        } else if (c == '=' && depth == 0 && (k == 0 || !strchr("=!<>+-*/%@", text[k - 1])) &&
                   text[k + 1] != '=' && text[k + 1] != '>') {
            return true;
        }
    }
    return false;
}

/* What a block's '{' follows, for "expected '{' after ...". */
static const char *block_context(const Lexer *lx, bool want_as)
{
    switch (lx->header[lx->depth]) {
    case IF: return "after the condition of 'if'";
    case WHILE: return "after the condition of 'while'";
    case FOR: return "after the iterable of 'for'";
    case WITH: return want_as ? "after the expression of 'with'" : "after 'with ... as NAME'";
    case FN: return "after the parameters of 'fn'";
    default: return "to open the block";
    }
}

/* The message for a syntax error, from the unexpected token, the exact set
 * of tokens the parser could have taken there, and the lexer's state (open
 * brackets, the statement header being parsed). */
static int yyreport_syntax_error(const yypcontext_t *ctx, Lexer *lx)
{
    if (lx->has_err)
        return 0; /* the lexer has said it already */
    yysymbol_kind_t tok = yypcontext_token(ctx);
    Loc at = *yypcontext_location(ctx);
    yysymbol_kind_t exp[YYNTOKENS];
    int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
    if (n < 0)
        n = 0;
    /* patterns take names but not numbers: INT tells an expression apart */
    bool want_expr = expects(exp, n, YYSYMBOL_INT);
    bool want_stmt = expects(exp, n, YYSYMBOL_LET);
    char what[96];
    lex_describe(lx, tok == YYSYMBOL_YYEOF ? YYEOF : lx->la_kind, at, what, sizeof what);
    const LexBracket *open = lx->depth > 0 ? &lx->stack[lx->depth - 1] : NULL;

    const char *py = python_habit(lx, tok, &at);
    if (py) {
        lex_error(lx, at, "%s", py);
        return 0;
    }

    if (open && (tok == YYSYMBOL_YYEOF ||
                 (open->ch != '{' && at.line > open->loc.line &&
                  (tok == YYSYMBOL_LET || tok == YYSYMBOL_IF || tok == YYSYMBOL_WHILE ||
                   tok == YYSYMBOL_FOR || tok == YYSYMBOL_RETURN || tok == YYSYMBOL_IMPORT ||
                   tok == YYSYMBOL_WITH || tok == YYSYMBOL_BREAK || tok == YYSYMBOL_CONTINUE)))) {
        /* the end of input, or a statement inside ( or [ : a bracket was left open */
        lex_error_final(lx, open->loc, "'%c' opened at %d:%d is never closed",
                        open->ch, open->loc.line, open->loc.col);
    } else if (tok == YYSYMBOL_FOR && open && open->ch == '(') {
        /* Python's generator expression, sum(x * x for x in xs) */
        lex_error(lx, at, "unexpected 'for' (tfe has no generator expressions: write the comprehension "
                          "in brackets, sum([e for x in xs]))");
    } else if (tok == YYSYMBOL_ASSIGN && lx->prev_loc.off + lx->prev_loc.len == at.off &&
               (lx->prev_kind == DSLASH || lx->prev_kind == POW || lx->prev_kind == PERCENT || lx->prev_kind == AT)) {
        /* x //= 2: tfe has += -= *= /= only */
        const char *op = lx->src->text + lx->prev_loc.off;
        lex_error(lx, lx->prev_loc, "tfe has no '%.*s=': write x = x %.*s y", lx->prev_loc.len, op,
                  lx->prev_loc.len, op);
    } else if (tok == YYSYMBOL_ASSIGN && (!open || open->ch == '{') && assigns_before(lx, at)) {
        /* a = b = 3: Python's chained assignment */
        lex_error(lx, at, "tfe has no chained assignment: assign one at a time (b = 3, then a = b)");
    } else if (tok == YYSYMBOL_ASSIGN) {
        lex_error(lx, at, "use '==' to compare; '=' assigns");
    } else if (want_expr && !want_stmt && !starts_expr(tok)) {
        if ((tok == YYSYMBOL_YYEOF && !lx->stop) || tok == YYSYMBOL_NEWLINE)
            lex_error(lx, at, "expected expression at %s", what);
        else
            lex_error(lx, at, "expected expression before %s", what);
    } else if (tok == YYSYMBOL_COMMA && (!open || open->ch == '{')) {
        lex_error(lx, at, "unexpected ',' (a tuple needs parentheses here: (a, b))");
    } else if (expects(exp, n, YYSYMBOL_ELSE) && !expects(exp, n, YYSYMBOL_NEWLINE) &&
               !expects(exp, n, YYSYMBOL_RBRACE) && !expects(exp, n, YYSYMBOL_SEMI)) {
        lex_error(lx, at, "expected 'else' in the conditional expression (a if c else b) %s %s",
                  (tok == YYSYMBOL_YYEOF && !lx->stop) || tok == YYSYMBOL_NEWLINE ? "at" : "before", what);
    } else if (expects(exp, n, YYSYMBOL_FN) && expects(exp, n, YYSYMBOL_DECO) && !want_stmt) {
        lex_error(lx, at, "a decorator must be followed by a 'fn' declaration");
    } else if (expects(exp, n, YYSYMBOL_ARROW)) {
        lex_error(lx, at, "expected '=>' or '{' after the parameters of 'fn'");
    } else if (expects(exp, n, YYSYMBOL_LBRACE) && expects(exp, n, YYSYMBOL_IF) && !want_stmt &&
               lx->prev_kind == ELSE) {
        lex_error(lx, at, tok == YYSYMBOL_COLON ? "expected '{' or 'if' after 'else' (a block is { ... }, not ':' and indentation)"
                                                : "expected '{' or 'if' after 'else'");
    } else if (expects(exp, n, YYSYMBOL_LBRACE) && !want_expr) {
        const char *after = block_context(lx, expects(exp, n, YYSYMBOL_AS));
        if (tok == YYSYMBOL_NEWLINE && lx->buffered && lx->buf_kind == LBRACE)
            lex_error(lx, at, "'{' must be on the same line, %s", after);
        else if (tok == YYSYMBOL_ARROW)
            lex_error(lx, at, "expected '{' %s ('=>' bodies are for anonymous functions: fn (x) => x)", after);
        else if (tok == YYSYMBOL_COLON)
            lex_error(lx, at, "expected '{' %s (a block is { ... }, not ':' and indentation)", after);
        else
            lex_error(lx, at, "expected '{' %s", after);
    } else if (expects(exp, n, YYSYMBOL_IN) && lx->prev_kind == NOT && !want_expr) {
        /* 'not' after an operand is only the start of 'not in' */
        lex_error(lx, at, "expected 'in' after 'not' (x not in xs)");
    } else if (expects(exp, n, YYSYMBOL_IN) && !expects(exp, n, YYSYMBOL_EQ) && !want_expr) {
        /* after a for's pattern (after an expression 'in' is the operator, with '==') */
        lex_error(lx, at, "expected 'in' after the loop variable of 'for'");
    } else if (expects(exp, n, YYSYMBOL_ASSIGN) && n <= 2 && !want_expr) {
        lex_error(lx, at, "expected '=' after the name in 'let'");
    } else if (n == 2 && expects(exp, n, YYSYMBOL_NAME) && expects(exp, n, YYSYMBOL_LPAREN)) {
        lex_error(lx, at, lx->prev_kind == FOR ? "expected a loop variable after 'for'"
                          : lx->prev_kind == LET ? "expected a name after 'let'"
                          : "expected a name or '('");
    } else if (n == 1 && exp[0] == YYSYMBOL_NAME) {
        char prev[96];
        lex_describe(lx, lx->prev_kind, lx->prev_loc, prev, sizeof prev);
        lex_error(lx, at, "expected a name after %s", prev);
    } else if (n == 2 && expects(exp, n, YYSYMBOL_NAME) && expects(exp, n, YYSYMBOL_STRING)) {
        lex_error(lx, at, "expected a module name or a path after 'import'");
    } else if (n == 1 && exp[0] == YYSYMBOL_AS) {
        lex_error(lx, at, "expected 'as NAME' after the path of 'import'");
    } else if (n == 1 && exp[0] == YYSYMBOL_LPAREN) {
        lex_error(lx, at, "expected '(' after the name of the function");
    } else if (expects(exp, n, YYSYMBOL_COMMA) && (starts_expr(tok) || tok == YYSYMBOL_NEWLINE) &&
               !(expects(exp, n, YYSYMBOL_NEWLINE) && (!open || open->ch == '{'))) {
        /* (a statement may end where a bare tuple could go on: that is the
           likelier mistake, handled below) */
        char close = open ? (open->ch == '(' ? ')' : open->ch == '[' ? ']' : '}') : 0;
        if (close && tok == YYSYMBOL_NEWLINE)
            lex_error(lx, at, "expected ',' or '%c' at end of line", close);
        else if (close)
            lex_error(lx, at, "expected ',' or '%c' before %s", close, what);
        else
            lex_error(lx, at, "expected ',' before %s", what);
    } else if (expects(exp, n, YYSYMBOL_NEWLINE) && starts_expr(tok)) {
        lex_error(lx, at, "expected end of line or ';' before %s", what);
    } else if (tok == YYSYMBOL_COMMA && !open) {
        lex_error(lx, at, "unexpected ',' (a tuple needs parentheses: (a, b))");
    } else {
        lex_error(lx, at, "unexpected %s", what);
    }
    return 0;
}

int yylex(YYSTYPE *val, Loc *loc, Lexer *lx)
{
    return lex_next(lx, val, loc);
}

Node *parse_program(Source *src, ParseError *err)
{
    Lexer *lx = lex_new(src);
    Node *prog = NULL;
    int rc = yyparse(lx);
    if (lx->result) {
        /* the N_PROGRAM spans the whole text and holds its Source (ast_free
           drops the reference) */
        lx->result->loc = (Loc){ src, 1, 1, 0, src->len > 0 ? (int)src->len : 1 };
        source_incref(src);
    }
    if (rc == 0 && lx->result && !lx->has_err) {
        prog = lx->result;
    } else {
        ast_free(lx->result);
        if (!lx->has_err) /* cannot happen, but never leave err empty */
            lex_error(lx, lx->la_loc, "syntax error");
        snprintf(err->msg, sizeof err->msg, "%s", lx->err);
        err->loc = lx->err_loc;
    }
    lex_free(lx);
    return prog;
}

Node *parse_fexpr(Lexer *outer, const char *start, const char *stop, int line, const char *line_start,
                  ParseError *err)
{
    Lexer *lx = lex_new(outer->src);
    lx->cur = start;
    lx->stop = stop;
    lx->line = line;
    lx->line_start = line_start;
    lx->fexpr_start = true;
    lx->end_loc = (Loc){ outer->src, line, (int)(start - line_start) + 1, (int)(start - outer->src->text), 1 };
    Node *e = NULL;
    int rc = yyparse(lx);
    if (rc == 0 && lx->result && !lx->has_err) {
        e = lx->result;
    } else {
        ast_free(lx->result);
        if (!lx->has_err)
            lex_error(lx, lx->la_loc, "syntax error");
        snprintf(err->msg, sizeof err->msg, "%s", lx->err);
        err->loc = lx->err_loc;
    }
    lex_free(lx);
    return e;
}
