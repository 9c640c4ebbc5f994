/* graphviz.c — DOT to SVG through Graphviz's `dot`, run as a child process
 * (no library: libgvc would be a link dependency for one call, and `dot`
 * is what people have). The DOT goes in on stdin, dot's messages come
 * back on a pipe for the error. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "interp/graphviz.h"
#include "util/buf.h"
#include "util/xalloc.h"

extern char **environ;

/* prog found on $PATH (or a path with a slash that exists). */
static bool on_path(const char *prog)
{
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    for (const char *p = path;;) {
        const char *e = strchr(p, ':');
        int n = e ? (int)(e - p) : (int)strlen(p);
        char *full = xmalloc((size_t)n + strlen(prog) + 3);
        sprintf(full, "%.*s/%s", n, n ? p : ".", prog); /* (an empty entry is the current folder) */
        bool ok = access(full, X_OK) == 0;
        free(full);
        if (ok) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int graphviz_svg(Interp *I, const char *fn, const char *dot, const char *path)
{
    const char *prog = getenv("TFE_DOT");
    if (!prog || !*prog) prog = "dot";
    if (!on_path(prog))
        return interp_raise(I, "%s(): Graphviz's '%s' program is not installed (Debian: apt-get install graphviz); "
                               "g.dot() gives the DOT text without it", fn, prog);
    int in[2], err[2];
    if (pipe(in)) return interp_raise(I, "%s(): cannot run %s: %s", fn, prog, strerror(errno));
    if (pipe(err)) {
        close(in[0]);
        close(in[1]);
        return interp_raise(I, "%s(): cannot run %s: %s", fn, prog, strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, err[0]);
    char *argv[] = {(char *)prog, "-Tsvg", "-o", (char *)path, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(err[1]);
    if (rc) {
        close(in[1]);
        close(err[0]);
        return interp_raise(I, "%s(): cannot run %s: %s", fn, prog, strerror(rc));
    }
    /* dot reads all its input before it writes a message of any size, so
     * writing first and reading after cannot deadlock; a dot that exits
     * early closes the pipe (EPIPE, not SIGPIPE) */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    size_t n = strlen(dot);
    for (size_t off = 0; off < n;) {
        ssize_t w = write(in[1], dot + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(in[1]);
    signal(SIGPIPE, old);
    Buf msg = {0};
    char tmp[4096];
    for (;;) {
        ssize_t r = read(err[0], tmp, sizeof tmp);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (msg.len < 2000) buf_add(&msg, tmp, (size_t)r);
    }
    close(err[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    int res = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        while (msg.len && (msg.s[msg.len - 1] == '\n' || msg.s[msg.len - 1] == ' ')) msg.s[--msg.len] = '\0';
        res = interp_raise(I, "%s(): %s could not write '%s'%s%s", fn, prog, path, msg.len ? ": " : "",
                           msg.len ? msg.s : "");
    }
    free(msg.s);
    return res;
}
