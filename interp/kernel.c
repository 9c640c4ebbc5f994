/* kernel.c — tfe --kernel: one interpreter kept alive behind a line protocol
 * on stdin/stdout, for the Jupyter kernel (jupyter/tfe_kernel.py) and any
 * other front end (docs/notebooks.md has the protocol).
 *
 * Requests (stdin): "exec N\n" + N bytes of code, "complete N\n" + the code
 * before the cursor, "inspect N\n" + a name, "check N\n" + code (is it
 * complete?). Replies (stdout) are records, a header line "KIND [ARG] N\n"
 * followed by N bytes: "out"/"err" (what the cell wrote on stdout/stderr,
 * as it writes it), "display MIME" (a chart; "display+ MIME" after it is the
 * same picture in another format), "result" (the echo of a final
 * expression; "result+ MIME" records after it are a graph's drawing),
 * "error" (the located message with caret and traceback), "matches",
 * "help", "status", then "done ok|error 0".
 *
 * The cell's stdout and stderr (fds 1 and 2, so child programs such as dot
 * and anything printed by C code are caught too) are pipes read by a thread
 * that frames them; the protocol goes to a copy of the original stdout. At
 * the end of a request the main thread flushes, and asks the thread to drain
 * the pipes before it writes "done", so every byte comes before it. The
 * interpreter's stdin is /dev/null (input() must not eat requests). SIGINT
 * stops the running cell as Ctrl-C does in the REPL; bindings survive. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "interp/help.h"
#include "interp/internal.h"
#include "interp/kernel.h"
#include "interp/repl.h"
#include "parser/ast.h"
#include "util/buf.h"
#include "util/xalloc.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

int (*interp_echo_hook)(Interp *I, Value v);
int (*interp_display_hook)(const char *mime, const char *data, size_t len);

static int proto_fd = -1;  /* the original stdout: records go there */
static int out_rd = -1, err_rd = -1;
static int ctl[2] = {-1, -1}, ack[2] = {-1, -1};
static pthread_mutex_t proto_lock = PTHREAD_MUTEX_INITIALIZER;

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            _exit(1); /* the front end is gone */
        }
        p += w;
        n -= (size_t)w;
    }
}

static void record(const char *kind, const char *data, size_t len)
{
    char head[160];
    int h = snprintf(head, sizeof head, "%s %zu\n", kind, len);
    pthread_mutex_lock(&proto_lock);
    write_all(proto_fd, head, (size_t)h);
    write_all(proto_fd, data, len);
    pthread_mutex_unlock(&proto_lock);
}

/* Frame what is in the pipe now; false once the pipe has no writer left. */
static bool pump(int fd, const char *kind)
{
    char buf[65536];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r > 0) { record(kind, buf, (size_t)r); continue; }
        if (r < 0 && errno == EINTR) continue;
        return r != 0;
    }
}

static void *pump_thread(void *arg)
{
    (void)arg;
    sigset_t s;
    sigfillset(&s);
    pthread_sigmask(SIG_BLOCK, &s, NULL); /* signals are the main thread's */
    struct pollfd fds[3] = {{out_rd, POLLIN, 0}, {err_rd, POLLIN, 0}, {ctl[0], POLLIN, 0}};
    for (;;) {
        if (poll(fds, 3, -1) < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        if (fds[0].revents) pump(out_rd, "out");
        if (fds[1].revents) pump(err_rd, "err");
        if (fds[2].revents) {
            char c;
            if (read(ctl[0], &c, 1) != 1) return NULL;
            /* the writes were done before the byte was: all is in the pipes */
            pump(out_rd, "out");
            pump(err_rd, "err");
            write_all(ack[1], "", 1);
        }
    }
}

/* Every byte written so far reaches the front end before what follows. */
static void sync_output(void)
{
    fflush(stdout);
    fflush(stderr);
    write_all(ctl[1], "", 1);
    char c;
    while (read(ack[0], &c, 1) < 0 && errno == EINTR) continue;
}

static int show(const char *mime, const char *data, size_t len)
{
    char kind[120];
    if (mime[0] == '+') {
        /* the picture just shown, in another format: "display+ MIME" */
        snprintf(kind, sizeof kind, "display+ %s", mime + 1);
        record(kind, data, len);
        return 0;
    }
    sync_output(); /* the picture comes after what the cell printed before it */
    snprintf(kind, sizeof kind, "display %s", mime);
    record(kind, data, len);
    return 0;
}

static int read_file(const char *path, char **out, size_t *outlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    Buf b = {0};
    char tmp[8192];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, f)) > 0) buf_add(&b, tmp, r);
    fclose(f);
    *out = b.s;
    *outlen = b.len;
    return b.s ? 0 : -1;
}

/* dot on the text: the SVG and a PNG (for front ends that show no SVG)
 * malloc'd into svg[0], png[0], their lengths in n[0], n[1]; -1 when dot
 * fails. */
static int dot_render(const char *dot, char **svg, char **png, size_t *n)
{
    const char *td = getenv("TMPDIR");
    char path[4096], path2[4200];
    snprintf(path, sizeof path, "%s/tfe-kernel-XXXXXX", td && *td ? td : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    snprintf(path2, sizeof path2, "%s.png", path);
    const char *prog = getenv("TFE_DOT");
    if (!prog || !*prog) prog = "dot";
    int in[2];
    if (pipe(in) != 0) { unlink(path); return -1; }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        close(in[0]);
        close(in[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);
        execlp(prog, prog, "-Tsvg", "-o", path, "-Tpng", "-o", path2, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    if (pid < 0) { close(in[1]); unlink(path); return -1; }
    write_all(in[1], dot, strlen(dot));
    close(in[1]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) continue;
    int rc = -1;
    *png = NULL;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && read_file(path, svg, &n[0]) == 0) {
        rc = 0;
        if (read_file(path2, png, &n[1])) *png = NULL;
    }
    unlink(path);
    unlink(path2);
    return rc;
}

/* The echo of a cell's final expression: a "result" record, and for a staged
 * graph or a tape's picture its drawing too, as "result+ MIME" records (the
 * same result in other formats). */
static int echo(Interp *I, Value v)
{
    char *s = value_echo_repr(v);
    sync_output();
    record("result", s, strlen(s));
    free(s);
    if (v.kind == V_OBJECT) {
        Obj *o = v.u.o;
        const ObjectClass *cls = ((Object *)o)->cls;
        Value m, d;
        /* a staged graph or a tape's picture: both draw themselves as DOT */
        bool drawable = !strcmp(cls->name, "graph") || !strcmp(cls->name, "picture");
        if (drawable && cls->getattr && cls->getattr(I, o, "dot", &m) == 0) {
            Value none[1] = {v_nil()}; /* no arguments, but an array (memcpy'd) */
            if (call_value(I, m, 0, none, 0, NULL, NULL, &d) == 0) {
                char *svg, *png;
                size_t n[2];
                if (d.kind == V_STR && dot_render(((Str *)d.u.o)->s, &svg, &png, n) == 0) {
                    record("result+ image/svg+xml", svg, n[0]);
                    if (png) record("result+ image/png", png, n[1]);
                    free(svg);
                    free(png);
                }
                value_decref(d);
            } else {
                error_clear(I);
            }
            value_decref(m);
        }
    }
    return 0;
}

static void on_sigint(int sig)
{
    (void)sig;
    tfe_interrupted = 1;
}

/* The word being completed: the tail of the line after the last break
 * character (the REPL's set, so "r.fi" is one word). */
static const char *word_start(const char *line)
{
    const char *brk = " \t\n\"'`@$><=;|&{}()[],+-*/%!";
    const char *w = line + strlen(line);
    while (w > line && !strchr(brk, w[-1])) w--;
    return w;
}

static void add_match(const char *s, void *ctx)
{
    Buf *b = ctx;
    buf_puts(b, s);
    buf_puts(b, "\n");
}

static bool read_exact(int fd, char *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* One header line of a request, without its newline; false at EOF. */
static bool read_header(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        char c;
        ssize_t r = read(fd, &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        if (c == '\n') break;
        if (n + 1 < cap) buf[n++] = c;
    }
    buf[n] = 0;
    return true;
}

int kernel_run(Interp *I)
{
    /* every descriptor of ours closes on exec: dot and other programs a cell
     * runs see only their stdin, stdout and stderr */
    int req_fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    proto_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    int devnull = open("/dev/null", O_RDONLY);
    int op[2], ep[2];
    if (req_fd < 0 || proto_fd < 0 || devnull < 0 || pipe2(op, O_CLOEXEC) || pipe2(ep, O_CLOEXEC) ||
        pipe2(ctl, O_CLOEXEC) || pipe2(ack, O_CLOEXEC)) {
        perror("tfe --kernel");
        return 1;
    }
    dup2(devnull, 0);
    close(devnull);
    fflush(stdout);
    fflush(stderr);
    dup2(op[1], 1);
    dup2(ep[1], 2);
    close(op[1]);
    close(ep[1]);
    out_rd = op[0];
    err_rd = ep[0];
    fcntl(out_rd, F_SETFL, O_NONBLOCK);
    fcntl(err_rd, F_SETFL, O_NONBLOCK);
    setvbuf(stdout, NULL, _IOLBF, 0); /* a line reaches the notebook as it is printed */
    pthread_t th;
    if (pthread_create(&th, NULL, pump_thread, NULL) != 0) return 1;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    setenv("TFE_BREAKPOINT", "0", 0); /* no terminal to stop at */
    progress_in_place = true;
    interp_echo_hook = echo;
    interp_display_hook = show;

    char ver[64];
    int vn = snprintf(ver, sizeof ver, "tfe %s", PACKAGE_VERSION);
    record("ready", ver, (size_t)vn);
    int cell = 0;
    char head[128];
    while (read_header(req_fd, head, sizeof head)) {
        char verb[16];
        size_t n = 0;
        if (sscanf(head, "%15s %zu", verb, &n) != 2 || n > ((size_t)1 << 30)) {
            const char *m = "tfe --kernel: a request is \"exec N\", \"complete N\", \"inspect N\" or \"check N\", then N bytes\n";
            record("error", m, strlen(m));
            record("done error", "", 0);
            continue;
        }
        char *text = xmalloc(n + 1);
        if (!read_exact(req_fd, text, n)) { free(text); break; }
        text[n] = 0;
        bool ok = true;
        if (!strcmp(verb, "exec")) {
            tfe_interrupted = 0;
            char *msg = NULL;
            size_t mlen = 0;
            FILE *err = open_memstream(&msg, &mlen);
            int rc = interp_run_cell(I, ++cell, text, n, err ? err : stderr);
            if (err) fclose(err);
            tfe_interrupted = 0;
            sync_output();
            if (rc) {
                ok = false;
                if (msg) record("error", msg, mlen);
            }
            free(msg);
        } else if (!strcmp(verb, "complete")) {
            const char *nl = strrchr(text, '\n');
            const char *line = nl ? nl + 1 : text;
            const char *w = word_start(line);
            Buf b = {0};
            buf_puts(&b, w);
            buf_puts(&b, "\n");
            repl_complete_word(I, line, (int)(w - line), w, add_match, &b);
            record("matches", b.s, b.len);
            free(b.s);
        } else if (!strcmp(verb, "check")) {
            /* is the cell complete, or does it go on (an open bracket...)? */
            const char *st = parse_needs_more(text) ? "incomplete" : "complete";
            record("status", st, strlen(st));
        } else if (!strcmp(verb, "inspect")) {
            char *h = NULL;
            size_t hl = 0;
            FILE *f = open_memstream(&h, &hl);
            if (f) {
                help_name(I, text, f);
                fclose(f);
                record("help", h, hl);
            }
            free(h);
        } else {
            const char *m = "tfe --kernel: unknown request (exec, complete, inspect, check)\n";
            record("error", m, strlen(m));
            ok = false;
        }
        free(text);
        sync_output();
        record(ok ? "done ok" : "done error", "", 0);
    }
    return 0;
}
