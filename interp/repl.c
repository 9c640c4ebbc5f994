/* repl.c — the interactive loop: GNU readline in callback mode (so Ctrl-C can
 * abandon a half-typed entry), multi-line entries joined until the parser is
 * satisfied, history in ~/.tfe_history, tab completion, :help and :quit. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "interp/repl.h"
#include "parser/ast.h"
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

static char *history_path(void)
{
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    char *p = NULL;
    if (asprintf(&p, "%s/.tfe_history", home) < 0) return NULL;
    return p;
}

/* Append this session's lines to the history file (creating it), then trim
 * it; failures are silent: history is a convenience, never an error. */
static void history_save(const char *path, int new_lines)
{
    if (!path || new_lines <= 0) return;
    if (access(path, F_OK) == 0) {
        if (new_lines > history_length) new_lines = history_length;
        if (append_history(new_lines, path) != 0) return;
    } else if (write_history(path) != 0) {
        return;
    }
    history_truncate_file(path, HISTORY_MAX);
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

static void cands_clear(void)
{
    for (int i = 0; i < cands.n; i++) free(cands.v[i]);
    cands.n = 0;
    cand_next = 0;
}

static const char *const commands[] = { ":help", ":quit", ":q" };

static char *complete_gen(const char *text, int state)
{
    if (state == 0) {
        cands_clear();
        if (text[0] == ':') {
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (strncmp(commands[i], text, strlen(text)) == 0) cand_add(commands[i], &cands);
        } else {
            interp_complete(complete_interp, text, cand_add, &cands);
        }
    }
    while (cand_next < cands.n) {
        const char *c = cands.v[cand_next++];
        if (strncmp(c, text, strlen(text)) == 0) return xstrdup(c);
    }
    return NULL;
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

static void print_help(void)
{
    fputs("Commands:\n"
          "  :help        show this help\n"
          "  :quit, :q    leave the REPL (Ctrl-D does too)\n"
          "Type statements or expressions; the value of an expression is shown.\n"
          "An unfinished entry (open bracket, brace or string, or a trailing\n"
          "operator or comma) continues on '... ' lines.\n"
          "Ctrl-C discards the entry being typed, or stops a running statement.\n"
          "Tab completes names, keywords and fields (r.<Tab>); history is kept\n"
          "in ~/.tfe_history.\n"
          "The language is described in docs/ and in `man tfe`.\n", stdout);
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

int repl_run(Interp *I)
{
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: select must wake up */
    if (pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) != 0) sigpipe_fd[0] = sigpipe_fd[1] = -1;
    sigaction(SIGINT, &sa, &old_sa);

    rl_readline_name = "tfe";
    rl_catch_signals = 0;
    complete_interp = I;
    rl_attempted_completion_function = complete;
    /* '.' is not a break character: "r.fi" completes as one word. */
    rl_basic_word_break_characters = " \t\n\"'`@$><=;|&{}()[],+-*/%!";
    rl_completer_word_break_characters = rl_basic_word_break_characters;

    char *hist = history_path();
    using_history();
    stifle_history(HISTORY_MAX);
    if (hist) read_history(hist);
    int new_lines = 0;

    printf("tfe %s \xe2\x80\x94 :help for help\n", PACKAGE_VERSION);

    Text entry = {0};
    for (;;) {
        char *line = NULL;
        int r = read_line(entry.len ? PROMPT_MORE : PROMPT, &line);
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
        if (tn > 0) {
            add_history(line);
            new_lines++;
        }
        if (entry.len == 0 && tn > 0 && tb[0] == ':') {
            bool quit = false;
            if (is_command(tb, tn, ":help")) print_help();
            else if (is_command(tb, tn, ":quit") || is_command(tb, tn, ":q")) quit = true;
            else printf("unknown command '%.*s' (:help lists the commands)\n", (int)tn, tb);
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

        tfe_interrupted = 0;
        got_sigint = 0;
        interp_run_repl_entry(I, entry.s, entry.len);
        fflush(stdout);
        fflush(stderr);
        tfe_interrupted = 0;
        got_sigint = 0;
        sigpipe_drain();
        entry.len = 0;
    }
    free(entry.s);
    cands_clear();
    free(cands.v);
    cands.v = NULL;
    cands.cap = 0;
    history_save(hist, new_lines);
    free(hist);
    sigaction(SIGINT, &old_sa, NULL);
    for (int i = 0; i < 2; i++)
        if (sigpipe_fd[i] >= 0) close(sigpipe_fd[i]);
    sigpipe_fd[0] = sigpipe_fd[1] = -1;
    return 0;
}
