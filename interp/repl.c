/* repl.c — the interactive loop: GNU readline in callback mode (so Ctrl-C can
 * abandon a half-typed entry), multi-line entries joined until the parser is
 * satisfied (and an `if` waits a line for its `else`), numbered entries
 * (<repl:7> in errors), history of whole entries in ~/.tfe_history, tab
 * completion (names, fields, tensor attributes, keyword arguments), and the
 * commands :help [name], :history, :reload MODULE, :quit; and breakpoint(),
 * a prompt of its own inside a running program. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <termios.h>
#include <unistd.h>

/* the lexer first: readline's chardefs.h defines NEWLINE ('\n') and
 * RETURN, token names; undefined after it, so that NEWLINE here is the
 * token (the character's value made waits_for_else free a NEWLINE's
 * value, the next token's, twice: a crash on any block whose second line
 * starts with a name) */
#include "lexer/lexer.h"
#include <readline/history.h>
#include <readline/readline.h>
#undef NEWLINE
#undef RETURN
_Static_assert(NEWLINE > 255 && RETURN > 255, "NEWLINE and RETURN must be the parser's tokens here");

#include "interp/help.h"
#include "interp/internal.h"
#include "interp/repl.h"
#include "parser/ast.h"
#include "util/buf.h"
#include "util/xalloc.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define PROMPT ">>> "
#define PROMPT_MORE "... "
#define HISTORY_MAX 1000

/* Set by the SIGINT handler; the interpreter polls tfe_interrupted. The
 * handler may run on any thread (the tensor library's workers do not block
 * SIGINT), so it also writes a byte to a pipe that the reading loop
 * watches: the main thread wakes up wherever the signal landed. */
static volatile sig_atomic_t got_sigint;
static int sigpipe_fd[2] = { -1, -1 };

static void on_sigint(int sig)
{
    (void)sig;
    int saved = errno;
    got_sigint = 1;
    tfe_interrupted = 1;
    if (sigpipe_fd[1] >= 0) {
        ssize_t w = write(sigpipe_fd[1], "", 1);
        (void)w;
    }
    errno = saved;
}

static void sigpipe_drain(void)
{
    char tmp[64];
    if (sigpipe_fd[0] >= 0)
        while (read(sigpipe_fd[0], tmp, sizeof tmp) > 0) continue;
}

/* --- reading one line --------------------------------------------------- */

/* The line handler's result: readline calls it once per completed line. */
static struct {
    bool done, eof;
    char *line;
} rd;

static void on_line(char *line)
{
    rd.done = true;
    rd.eof = line == NULL;
    rd.line = line;
    /* Leave callback mode now, so the terminal is back in its normal mode
     * while the entry runs (Ctrl-C then raises SIGINT, echo is on). */
    rl_callback_handler_remove();
}

enum { READ_LINE, READ_EOF, READ_INTERRUPTED };

/* Read a line with the prompt, feeding readline one key at a time, until
 * it hands over a line, input ends, or Ctrl-C abandons the line. */
static int read_line(const char *prompt, char **out)
{
    rd.done = rd.eof = false;
    rd.line = NULL;
    fflush(stdout);
    rl_callback_handler_install(prompt, on_line);
    int result = READ_LINE;
    int fd = fileno(rl_instream ? rl_instream : stdin);
    int nfds = (fd > sigpipe_fd[0] ? fd : sigpipe_fd[0]) + 1;
    while (!rd.done) {
        if (got_sigint) {
            /* Abandon the line being typed: readline forgets it, the
             * terminal gets a fresh line for the next prompt. */
            got_sigint = 0;
            sigpipe_drain();
            rl_callback_sigcleanup();
            rl_free_line_state();
            rl_replace_line("", 0);
            rl_point = rl_end = 0;
            rl_callback_handler_remove();
            fputs("^C\n", stdout);
            result = READ_INTERRUPTED;
            break;
        }
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(fd, &fds);
        if (sigpipe_fd[0] >= 0) FD_SET(sigpipe_fd[0], &fds);
        int r = select(nfds, &fds, NULL, NULL, NULL);
        if (r < 0) {
            if (errno == EINTR) continue;
            rl_callback_handler_remove();
            rd.eof = true;
            break;
        }
        if (sigpipe_fd[0] >= 0 && FD_ISSET(sigpipe_fd[0], &fds)) continue;
        if (FD_ISSET(fd, &fds)) rl_callback_read_char();
    }
    if (result == READ_INTERRUPTED) {
        free(rd.line);
        return READ_INTERRUPTED;
    }
    if (rd.eof) return READ_EOF;
    *out = rd.line;
    return READ_LINE;
}

/* --- history ------------------------------------------------------------- */

/* An entry is one history item, newlines and all (Up recalls a whole
 * function). The file keeps a "#<time>" line before each item, readline's
 * format for multi-line entries; files written by older versions (one line
 * per item, no stamps) read as before. */
static char *history_path(void)
{
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    char *p = NULL;
    if (asprintf(&p, "%s/.tfe_history", home) < 0) return NULL;
    return p;
}

/* The entry as a history item: a line that would read back as a time stamp
 * ("#123", a comment) gets a leading blank, which the language ignores. */
static void history_add_entry(const char *entry)
{
    size_t n = strlen(entry);
    char *item = xmalloc(2 * n + 2), *q = item;
    for (const char *p = entry; *p;) {
        if (p[0] == '#' && p[1] >= '0' && p[1] <= '9') *q++ = ' ';
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p + 1) : strlen(p);
        memcpy(q, p, len);
        q += len;
        p += len;
    }
    *q = 0;
    add_history(item);
    free(item);
}

/* Merge this session's items into the file: read it again (another session
 * may have added to it), append ours, keep the last HISTORY_MAX items, and
 * write it whole with a stamp before every item (items of an older file had
 * none), so that a multi-line item is never cut in two. Failures are
 * silent: history is a convenience, never an error. */
static void history_save(const char *path, int new_items)
{
    if (!path || new_items <= 0) return;
    if (new_items > history_length) new_items = history_length;
    int n = 0;
    char **mine = xmalloc(sizeof(char *) * (size_t)(new_items + 1));
    for (int i = 0; i < new_items; i++) {
        HIST_ENTRY *h = history_get(history_base + history_length - new_items + i);
        mine[i] = xstrdup(h && h->line ? h->line : "");
    }
    clear_history();
    read_history(path); /* absent or unreadable: only ours are written */
    char **all = xmalloc(sizeof(char *) * (size_t)(history_length + new_items + 1));
    for (int i = 0; i < history_length; i++) {
        HIST_ENTRY *h = history_get(history_base + i);
        if (h && h->line) all[n++] = xstrdup(h->line);
    }
    for (int i = 0; i < new_items; i++) all[n++] = mine[i];
    free(mine);
    clear_history();
    for (int i = 0; i < n; i++) {
        add_history(all[i]); /* stamps it; the stifle keeps the last ones */
        free(all[i]);
    }
    free(all);
    write_history(path);
}

/* --- completion ---------------------------------------------------------- */

static Interp *complete_interp;

typedef struct Cands { char **v; int n, cap; } Cands;
static Cands cands;
static int cand_next;

static void cand_add(const char *s, void *ctx)
{
    Cands *c = ctx;
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->v[i], s) == 0) return;
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 32;
        c->v = xrealloc(c->v, (size_t)cap * sizeof *c->v);
        c->cap = cap;
    }
    c->v[c->n++] = xstrdup(s);
}

/* A parameter name as a keyword argument: "dtype" -> "dtype=". */
static void cand_add_kw(const char *s, void *ctx)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s=", s);
    cand_add(buf, ctx);
}

static void cand_add_dup(Cands *c, const char *s)
{
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 32;
        c->v = xrealloc(c->v, (size_t)cap * sizeof *c->v);
        c->cap = cap;
    }
    c->v[c->n++] = xstrdup(s);
}

static void cands_clear(void)
{
    for (int i = 0; i < cands.n; i++) free(cands.v[i]);
    cands.n = 0;
    cand_next = 0;
}

static const char *const commands[] = { ":help", ":history", ":reload", ":quit", ":q" };

/* The function whose call the word at start is an argument of: the name
 * (with dots: "nn.dense") before the innermost '(' still open, or "". */
static void open_call(const char *line, int start, char *out, size_t n)
{
    out[0] = 0;
    int depth = 0;
    for (int i = start - 1; i >= 0; i--) {
        char c = line[i];
        if (c == ')' || c == ']' || c == '}') depth++;
        else if (c == '[' || c == '{') { if (depth-- == 0) return; }
        else if (c == '(') {
            if (depth-- > 0) continue;
            int e = i;
            while (e > 0 && line[e - 1] == ' ') e--;
            int b = e;
            while (b > 0 && (isalnum((unsigned char)line[b - 1]) || line[b - 1] == '_' || line[b - 1] == '.'))
                b--;
            if (e > b && (size_t)(e - b) < n) {
                memcpy(out, line + b, (size_t)(e - b));
                out[e - b] = 0;
            }
            return;
        } else if (c == '"') {
            /* skip the string literal back to its opening quote */
            for (i--; i >= 0 && !(line[i] == '"' && (i == 0 || line[i - 1] != '\\')); i--) continue;
            if (i < 0) return;
        }
    }
}

/* The candidates for text, the word at line[start ...]: keyword arguments
 * of the call it is in first, then names, fields and attributes. */
static void gather(Interp *I, const char *line, int start, const char *text, Cands *c)
{
    /* keyword arguments first: zeros((2, 3), dt<Tab> gives dtype= */
    char fname[256];
    int nkw = 0;
    if (!strchr(text, '.')) {
        open_call(line, start, fname, sizeof fname);
        if (*fname) help_params(I, fname, cand_add_kw, c);
        nkw = c->n;
    }
    interp_complete(I, text, cand_add, c);
    /* "dtype=" wins over the name "dtype" (a built-in) in a call */
    for (int i = nkw; i < c->n; i++) {
        size_t l = strlen(c->v[i]);
        bool shadowed = false;
        for (int j = 0; j < nkw && !shadowed; j++)
            shadowed = strncmp(c->v[j], c->v[i], l) == 0 && c->v[j][l] == '=' && c->v[j][l + 1] == 0;
        if (shadowed) {
            free(c->v[i]);
            c->v[i--] = c->v[--c->n];
        }
    }
}

void repl_complete_word(Interp *I, const char *line, int start, const char *text,
                        void (*add)(const char *, void *), void *ctx)
{
    Cands c = {0};
    gather(I, line, start, text, &c);
    for (int i = 0; i < c.n; i++) {
        if (strncmp(c.v[i], text, strlen(text)) == 0) add(c.v[i], ctx);
        free(c.v[i]);
    }
    free(c.v);
}

static char *complete_gen(const char *text, int state)
{
    if (state == 0) {
        cands_clear();
        if (text[0] == ':') {
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (strncmp(commands[i], text, strlen(text)) == 0) cand_add(commands[i], &cands);
        } else {
            gather(complete_interp, rl_line_buffer, rl_point - (int)strlen(text), text, &cands);
        }
    }
    while (cand_next < cands.n) {
        const char *c = cands.v[cand_next++];
        if (strncmp(c, text, strlen(text)) == 0) return xstrdup(c);
    }
    return NULL;
}

/* Tab: at the start of a line or after a blank it is indentation (code
 * pasted with tabs must not open completion, whose "Display all
 * possibilities? (y or n)" would eat the next characters); after a word,
 * '.' or '(' it completes. */
static int tab_or_complete(int count, int key)
{
    if (rl_point == 0 || rl_line_buffer[rl_point - 1] == ' ' || rl_line_buffer[rl_point - 1] == '\t')
        return rl_insert(count, '\t');
    return rl_complete(count, key);
}

static char **complete(const char *text, int start, int end)
{
    (void)start;
    (void)end;
    rl_attempted_completion_over = 1; /* never fall back to file names */
    rl_completion_append_character = '\0'; /* so "." or "(" can follow */
    return rl_completion_matches(text, complete_gen);
}

/* --- the loop ------------------------------------------------------------ */

static void print_commands(void)
{
    fputs("Commands:\n"
          "  :help            this help and the topics of the reference\n"
          "  :help NAME       a function's signature and what it does (:help zeros,\n"
          "                   :help nn.dense), a section (:help Shapes), or a value\n"
          "                   in scope; help(x) does the same in programs\n"
          "  :history         this session's entries, numbered as errors name them\n"
          "                   (<repl:7>:2:15 is line 2 of entry 7)\n"
          "  :reload MODULE   import a module again from its file (an import of\n"
          "                   a module whose file changed does that too)\n"
          "  :quit, :q        leave the REPL (Ctrl-D does too)\n"
          "Type statements or expressions; the value of an expression is shown.\n"
          "An unfinished entry (open bracket, brace or string, or a trailing\n"
          "operator or comma) continues on '... ' lines; after an `if` block's '}'\n"
          "the REPL waits one line for an `else` (an empty line runs it).\n"
          "Ctrl-C discards the entry being typed, or stops a running statement.\n"
          "Tab completes names, keywords, fields (r.<Tab>, x.<Tab> on a tensor)\n"
          "and keyword arguments (zeros((2, 3), dt<Tab>). Up and Down recall whole\n"
          "entries; history is kept in ~/.tfe_history.\n"
          "The manual: man tfe (in a build tree: man ./docs/tfe.1).\n", stdout);
}

typedef struct Text { char *s; size_t len, cap; } Text;

static void text_add(Text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        t->s = xrealloc(t->s, cap);
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

/* The line with surrounding blanks removed, as [*b, *b + n). */
static size_t trim(const char *s, const char **b)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    *b = s;
    return n;
}

static bool is_command(const char *s, size_t n, const char *name)
{
    return n == strlen(name) && memcmp(s, name, n) == 0;
}

/* "name" of ":help name": the command is s[0 .. n), followed by blanks and
 * an argument; *arg and *alen give it (alen 0 when there is none). */
static bool command_arg(const char *s, size_t n, const char *name, const char **arg, size_t *alen)
{
    size_t nl = strlen(name);
    if (n < nl || memcmp(s, name, nl) != 0) return false;
    if (n > nl && s[nl] != ' ' && s[nl] != '\t') return false;
    const char *a = s + nl;
    while (a < s + n && (*a == ' ' || *a == '\t')) a++;
    *arg = a;
    *alen = (size_t)(s + n - a);
    return true;
}

/* Is s[0 .. n) one of the REPL's commands (an argument allowed where the
 * command takes one)? At a continuation prompt only these are commands:
 * any other line starting with ':' is code (a slice x[1\n:3]). */
static bool is_known_command(const char *s, size_t n)
{
    const char *arg;
    size_t alen;
    return command_arg(s, n, ":help", &arg, &alen) || command_arg(s, n, ":reload", &arg, &alen) ||
           is_command(s, n, ":history") || is_command(s, n, ":quit") || is_command(s, n, ":q");
}

/* Does the complete entry end with an `if` statement whose last block has
 * closed, with no final `else { }`? A file may go on with `else` on the
 * next line, so the REPL waits for that line before running it. */
static bool waits_for_else(const char *text)
{
    Source *src = source_new("<repl>", text, strlen(text));
    Lexer *lx = lex_new(src);
    int k, first = 0, prev = 0;
    bool final_else = false;
    YYSTYPE val;
    Loc loc;
    for (;;) {
        /* a token with a value (a name, number, string...) hands over a node,
         * ours to free; a NEWLINE's val is the next token's, handed again */
        memset(&val, 0, sizeof val);
        k = lex_next(lx, &val, &loc);
        if (k == YYEOF || k == LEXERR) break;
        if (k != NEWLINE && val.node) ast_free(val.node);
        if ((k == NEWLINE || k == SEMI) && lx->depth == 0) {
            first = 0;
            final_else = false;
        } else if (first == 0) {
            first = k;
        }
        if (k == LBRACE && prev == ELSE && lx->depth == 1) final_else = true;
        prev = k;
    }
    bool wait = k != LEXERR && lx->depth == 0 && prev == RBRACE && first == IF && !final_else;
    lex_free(lx);
    source_decref(src);
    return wait;
}

/* Does the line start with the keyword `else`? */
static bool starts_with_else(const char *s, size_t n)
{
    return n >= 4 && memcmp(s, "else", 4) == 0 &&
           (n == 4 || !(isalnum((unsigned char)s[4]) || s[4] == '_'));
}

/* This session's entries, for :history; entry k is entries.v[k - 1]. */
static Cands entries;

/* Run an entry; new_items counts the history items added (NULL: the entry
 * is not a history item, as the import that :reload makes). */
static void run_entry(Interp *I, const char *text, size_t len, int *new_items)
{
    if (new_items) {
        history_add_entry(text);
        (*new_items)++;
    }
    cand_add_dup(&entries, text);
    tfe_interrupted = 0;
    got_sigint = 0;
    interp_run_repl_entry(I, entries.n, text, len);
    fflush(stdout);
    fflush(stderr);
    tfe_interrupted = 0;
    got_sigint = 0;
    sigpipe_drain();
}

static void print_history(void)
{
    for (int i = 0; i < entries.n; i++) {
        const char *p = entries.v[i];
        printf("[%d] ", i + 1);
        int w = snprintf(NULL, 0, "[%d] ", i + 1);
        for (;;) {
            const char *e = strchr(p, '\n');
            printf("%.*s\n", e ? (int)(e - p) : (int)strlen(p), p);
            if (!e) break;
            p = e + 1;
            printf("%*s", w, "");
        }
    }
}

/* The banner's pointer to the manual: the page in this build tree when
 * the binary runs from one, else the installed page. */
static void print_banner(void)
{
    printf("tfe %s \xe2\x80\x94 :help for help, help(name) for a function", PACKAGE_VERSION);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
    char cwd[4096];
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            strcpy(slash, "/docs/tfe.1");
            if (access(exe, R_OK) == 0) {
                *slash = 0;
                if (getcwd(cwd, sizeof cwd) && strcmp(cwd, exe) == 0)
                    printf(", man ./docs/tfe.1 for the manual\n");
                else
                    printf(", man %s/docs/tfe.1 for the manual\n", exe);
                return;
            }
        }
    }
    printf(", man tfe for the manual\n");
}

/* The terminal echoes no "^C" while an entry runs (it would be left in
 * front of the error or the next prompt); restored at exit. */
static struct termios saved_tio;
static bool tio_saved;

static void echoctl_off(void)
{
    struct termios t;
    if (tcgetattr(0, &t) != 0) return;
    saved_tio = t;
    tio_saved = true;
    t.c_lflag &= ~(tcflag_t)ECHOCTL;
    tcsetattr(0, TCSANOW, &t);
}

int repl_run(Interp *I)
{
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: select must wake up */
    if (pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) != 0) sigpipe_fd[0] = sigpipe_fd[1] = -1;
    sigaction(SIGINT, &sa, &old_sa);
    echoctl_off();

    rl_readline_name = "tfe";
    rl_catch_signals = 0;
    complete_interp = I;
    rl_attempted_completion_function = complete;
    rl_bind_key('\t', tab_or_complete);
    /* '.' is not a break character: "r.fi" completes as one word. */
    rl_basic_word_break_characters = " \t\n\"'`@$><=;|&{}()[],+-*/%!";
    rl_completer_word_break_characters = rl_basic_word_break_characters;

    char *hist = history_path();
    using_history();
    /* multi-line items: a "#<time>" line before each (readline's format) */
    history_comment_char = '#';
    history_write_timestamps = 1;
    stifle_history(HISTORY_MAX);
    if (hist) read_history(hist);
    int new_items = 0;

    print_banner();

    Text entry = {0};
    bool pending_else = false; /* a finished `if` waits a line for `else` */
    for (;;) {
        char *line = NULL;
        int r = read_line(entry.len ? PROMPT_MORE : PROMPT, &line);
        if (r == READ_INTERRUPTED) {
            entry.len = 0;
            pending_else = false;
            continue;
        }
        if (r == READ_EOF) {
            fputs("\n", stdout);
            if (pending_else) run_entry(I, entry.s, entry.len, &new_items);
            break;
        }
        const char *tb;
        size_t tn = trim(line, &tb);
        if (pending_else && tn > 0 && tb[0] == '#') {
            /* a comment between '}' and 'else': still waiting, as a file reads it */
            text_add(&entry, "\n", 1);
            text_add(&entry, line, strlen(line));
            free(line);
            continue;
        }
        if (pending_else) {
            pending_else = false;
            if (!starts_with_else(tb, tn)) {
                /* no else: the `if` runs, and the line starts a new entry */
                run_entry(I, entry.s, entry.len, &new_items);
                entry.len = 0;
            }
        }
        if (tn > 0 && tb[0] == ':' && (entry.len == 0 || is_known_command(tb, tn))) {
            /* in an unfinished entry a command runs and the entry still waits
             * (:q quits, dropping it), as Ctrl-C would only drop it */
            bool quit = false;
            const char *arg;
            size_t alen;
            add_history(line);
            new_items++;
            if (command_arg(tb, tn, ":help", &arg, &alen)) {
                if (alen == 0) help_topics(stdout, true);
                else if (is_command(arg, alen, "commands") || arg[0] == ':') print_commands();
                else {
                    char *name = xmalloc(alen + 1);
                    memcpy(name, arg, alen);
                    name[alen] = 0;
                    help_name(I, name, stdout);
                    free(name);
                }
            } else if (command_arg(tb, tn, ":reload", &arg, &alen)) {
                char *name = xmalloc(alen + 1);
                memcpy(name, arg, alen);
                name[alen] = 0;
                char *code = interp_reload_code(I, name);
                if (code) {
                    run_entry(I, code, strlen(code), NULL);
                    free(code);
                }
                free(name);
            } else if (is_command(tb, tn, ":history")) {
                print_history();
            } else if (is_command(tb, tn, ":quit") || is_command(tb, tn, ":q")) {
                quit = true;
            } else {
                printf("unknown command '%.*s' (:help lists the commands)\n", (int)tn, tb);
            }
            fflush(stdout);
            free(line);
            if (quit) break;
            continue;
        }
        if (entry.len == 0 && tn == 0) {
            free(line);
            continue;
        }
        if (entry.len) text_add(&entry, "\n", 1);
        text_add(&entry, line, strlen(line));
        free(line);
        if (parse_needs_more(entry.s)) continue;
        if (waits_for_else(entry.s)) {
            pending_else = true;
            continue;
        }
        run_entry(I, entry.s, entry.len, &new_items);
        entry.len = 0;
    }
    free(entry.s);
    cands_clear();
    free(cands.v);
    cands.v = NULL;
    cands.cap = 0;
    for (int i = 0; i < entries.n; i++) free(entries.v[i]);
    free(entries.v);
    entries.v = NULL;
    entries.n = entries.cap = 0;
    history_save(hist, new_items);
    free(hist);
    if (tio_saved) tcsetattr(0, TCSANOW, &saved_tio);
    sigaction(SIGINT, &old_sa, NULL);
    for (int i = 0; i < 2; i++)
        if (sigpipe_fd[i] >= 0) close(sigpipe_fd[i]);
    sigpipe_fd[0] = sigpipe_fd[1] = -1;
    return 0;
}

/* --- breakpoint() -------------------------------------------------------- */

/* The frames of the paused program, innermost first, and where it stopped. */
static void print_backtrace(Interp *I, Loc at)
{
    printf("  at %s:%d:%d\n", at.src ? at.src->name : "<unknown>", at.line, at.col);
    for (int i = I->nframes - 1; i >= 0; i--) {
        const Frame *fr = &I->frames[i];
        printf("  in %s called from %s:%d:%d\n", fr->fname, fr->call_loc.src ? fr->call_loc.src->name : "<unknown>",
               fr->call_loc.line, fr->call_loc.col);
    }
}

/* breakpoint(): a prompt at this line (docs/visualizing.md). The resolver
 * passes the bindings in scope as arguments and their names as _frame
 * (interp/resolve.c); while the prompt is open they are globals of those
 * names (the globals they hide come back after), so entries read them.
 * :bt, :continue (or Ctrl-D), :quit (an error that ends the program here).
 * An effect: in a staged function it stops at every call, with that
 * call's values. Without a terminal, an error; TFE_BREAKPOINT=0 skips it. */
BUILTIN(bi_breakpoint)
{
    (void)data;
    const char *names = NULL;
    for (int k = 0; k < nkw; k++) {
        if (strcmp(kwnames[k]->s, "_frame") || kwvals[k].kind != V_STR)
            return interp_raise(I, "breakpoint() takes no arguments");
        names = ((Str *)kwvals[k].u.o)->s;
    }
    if ((argc && !names) || nkw > 1) return interp_raise(I, "breakpoint() takes no arguments");
    *out = v_nil();
    const char *env = getenv("TFE_BREAKPOINT");
    if (env && !strcmp(env, "0")) return 0;
    if (!isatty(0) || !isatty(1))
        return interp_raise(I, "breakpoint(): no terminal to stop at (stdin and stdout must be one); "
                               "TFE_BREAKPOINT=0 skips breakpoints");
    Loc at = I->cur_loc;
    /* the bindings as globals while the prompt is open */
    char **nm = xcalloc((size_t)argc + 1, sizeof *nm);
    int *slot = xcalloc((size_t)argc + 1, sizeof *slot);
    Value *hidden = xcalloc((size_t)argc + 1, sizeof *hidden);
    const char *p = names ? names : "";
    Buf list = {0};
    for (int i = 0; i < argc && *p; i++) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        nm[i] = xstrndup(p, n);
        p += n + (e ? 1 : 0);
    }
    for (int i = argc - 1; i >= 0; i--) /* (innermost last: in the order they were bound) */
        if (nm[i]) {
            if (list.len) buf_puts(&list, ", ");
            buf_puts(&list, nm[i]);
        }
    fflush(stderr);
    printf("breakpoint at %s:%d in %s%s%s\n", at.src ? at.src->name : "<unknown>", at.line,
           I->nframes ? I->frames[I->nframes - 1].fname : "the top level", list.len ? "; bindings: " : "",
           list.len ? list.s : "");
    printf("(:bt the calls, :continue or Ctrl-D goes on, :quit stops the program)\n");
    free(list.s);
    for (int i = 0; i < argc; i++) {
        if (!nm[i]) continue;
        slot[i] = global_slot(I, nm[i], true);
    }
    interp_globals_grow(I);
    for (int i = 0; i < argc; i++) {
        if (!nm[i]) continue;
        hidden[i] = I->globals->slots[slot[i]];
        value_incref(argv[i]);
        I->globals->slots[slot[i]] = argv[i];
    }
    /* Ctrl-C abandons a line, as in the REPL (the program may have no
     * handler: it runs a file) */
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    bool own_pipe = sigpipe_fd[0] < 0;
    if (own_pipe && pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) != 0) sigpipe_fd[0] = sigpipe_fd[1] = -1;
    sigaction(SIGINT, &sa, &old_sa);
    static int number; /* entries are numbered across breakpoints */
    int rc = 0;
    Text entry = {0};
    for (;;) {
        char *line = NULL;
        int r = read_line(entry.len ? PROMPT_MORE : "(breakpoint) ", &line);
        if (r == READ_INTERRUPTED) {
            entry.len = 0;
            continue;
        }
        if (r == READ_EOF) {
            fputs("\n", stdout);
            break;
        }
        const char *tb;
        size_t tn = trim(line, &tb);
        if (entry.len == 0 && tn > 0 && tb[0] == ':') {
            bool go = false;
            if (is_command(tb, tn, ":bt")) print_backtrace(I, at);
            else if (is_command(tb, tn, ":continue") || is_command(tb, tn, ":c")) go = true;
            else if (is_command(tb, tn, ":quit") || is_command(tb, tn, ":q")) go = true, rc = -1;
            else printf("at a breakpoint: :bt, :continue (:c), :quit (:q); entries read the bindings\n");
            fflush(stdout);
            free(line);
            if (go) break;
            continue;
        }
        if (entry.len == 0 && tn == 0) {
            free(line);
            continue;
        }
        if (entry.len) text_add(&entry, "\n", 1);
        text_add(&entry, line, strlen(line));
        free(line);
        if (parse_needs_more(entry.s)) continue;
        add_history(entry.s);
        tfe_interrupted = 0;
        got_sigint = 0;
        interp_run_breakpoint_entry(I, ++number, entry.s, entry.len);
        fflush(stdout);
        fflush(stderr);
        tfe_interrupted = 0;
        got_sigint = 0;
        sigpipe_drain();
        entry.len = 0;
    }
    free(entry.s);
    sigaction(SIGINT, &old_sa, NULL);
    if (own_pipe)
        for (int i = 0; i < 2; i++) {
            if (sigpipe_fd[i] >= 0) close(sigpipe_fd[i]);
            sigpipe_fd[i] = -1;
        }
    /* the hidden globals back, last binding first (a name passed twice) */
    for (int i = argc - 1; i >= 0; i--) {
        if (!nm[i]) continue;
        value_decref(I->globals->slots[slot[i]]);
        I->globals->slots[slot[i]] = hidden[i];
        free(nm[i]);
    }
    free(nm);
    free(slot);
    free(hidden);
    I->cur_loc = at;
    if (rc) return interp_raise(I, "breakpoint(): stopped here (:quit)");
    return 0;
}

void builtins_breakpoint_register(Interp *I)
{
    interp_define_builtin_flags(I, "breakpoint", bi_breakpoint, NULL, BF_EFFECT, NULL);
}
