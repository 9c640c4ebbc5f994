/* main.c — the tfe command: run a file, a -e string or stdin, or start the
 * REPL on a terminal. Exit status 1 after an error. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dist/comm.h"
#include "interp/interp.h"
#include "graph/opt.h"
#include "interp/kernel.h"
#include "interp/repl.h"
#include "tensor/tensor.h"
#include "util/xalloc.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

static const char usage[] =
    "usage: tfe [options] [FILE [ARGS...]]\n"
    "       tfe [options] -e CODE [ARGS...]\n"
    "\n"
    "Runs FILE, CODE, or the program on standard input; with none of them on a\n"
    "terminal, starts the interactive REPL.\n"
    "\n"
    "options:\n"
    "  -e CODE       run CODE\n"
    "  --eager       run @staged functions eagerly (run_eagerly(true))\n"
    "  --stage-all   stage every function that can be staged\n"
    "  --no-optimize run staged graphs as traced (no optimizer passes)\n"
    "  --check-staged\n"
    "                run every cached call of a staged function eagerly too and\n"
    "                stop at the first value that differs (TFE_CHECK_STAGED=1)\n"
    "  --dump-graph=PASS\n"
    "                print every traced graph before and after PASS (dce, fold,\n"
    "                algebra, cse, fuse) on stderr\n"
    "  --kernel      serve a notebook: run cells sent on stdin, answer in\n"
    "                records on stdout, keeping every binding (docs/notebooks.md)\n"
    "  --help        show this help and exit\n"
    "  --version     show the version and exit\n"
    "\n"
    "environment: TFE_PATH (module folders, ':'-separated), TFE_DEVICE, TFE_CHECK_STAGED\n";

/* Ctrl-C in a program that is not the REPL: the interpreter stops at the
 * next statement, loop turn or call with the located error "interrupted",
 * as the REPL's does, so the program ends through its usual exit: open
 * TensorBoard writers flush, TFE_PROFILE writes its trace. One-shot
 * (SA_RESETHAND): a second Ctrl-C kills at once, for a program waiting
 * where the interpreter does not look (input(), one long BLAS call). Not in
 * an MPI job: mpirun stops its ranks, and a rank waiting in a collective
 * must not outlive the others. */
static void on_script_sigint(int sig)
{
    (void)sig;
    tfe_interrupted = 1;
}

static void script_sigint(void)
{
    struct sigaction sa, old;
    /* ignored stays ignored (a background job of a shell script, nohup) */
    if (sigaction(SIGINT, NULL, &old) == 0 && old.sa_handler == SIG_IGN) return;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_script_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = xmalloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = xrealloc(buf, cap *= 2);
    }
    *len = n;
    return buf;
}

/* A job of several ranks has no REPL: mpirun gives rank 0 its standard input
 * (through a pipe, never a terminal) and the other ranks /dev/null, and a
 * REPL on one rank would leave the others nothing to run. Rank 0 reads the
 * program to its end and sends it to every rank, which all run it
 * (docs/distributed.md, "Errors, mismatches and killed ranks"). */
static int run_stdin_everywhere(Interp *I)
{
    char err[256];
    size_t len = 0;
    char *text = dist_rank() == 0 ? read_all(stdin, &len) : NULL;
    uint64_t n = len;
    int rc = dist_broadcast(&n, sizeof n, 0, err, sizeof err);
    if (rc == 0 && dist_rank() != 0) {
        len = (size_t)n;
        text = xmalloc(len ? len : 1);
    }
    if (rc == 0) rc = dist_broadcast(text, len, 0, err, sizeof err);
    if (rc == 0) rc = interp_run_source(I, "<stdin>", text, len);
    else fprintf(stderr, "[rank %d] tfe: cannot share the program read from standard input: %s\n", dist_rank(), err);
    free(text);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    InterpOptions opt = {0};
    const char *code = NULL, *file = NULL;
    bool kernel = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(usage, stdout); return 0; }
        if (strcmp(a, "--version") == 0) { printf("tfe %s\n", PACKAGE_VERSION); return 0; }
        if (strcmp(a, "--eager") == 0) { opt.eager = true; continue; }
        if (strcmp(a, "--kernel") == 0) { kernel = true; continue; }
        if (strcmp(a, "--stage-all") == 0) { opt.stage_all = true; continue; }
        if (strcmp(a, "--no-optimize") == 0) { opt.no_optimize = true; continue; }
        if (strcmp(a, "--check-staged") == 0) { opt.check_staged = true; continue; }
        if (strncmp(a, "--dump-graph=", 13) == 0) {
            if (opt_pass_index(a + 13) < 0) {
                fprintf(stderr, "tfe: --dump-graph: no pass '%s' (passes: dce, fold, algebra, cse, conv, fuse)\n", a + 13);
                return 2;
            }
            opt.dump_pass = a + 13;
            continue;
        }
        if (strcmp(a, "-e") == 0) {
            if (i + 1 >= argc) { fputs("tfe: -e needs an argument\n", stderr); return 2; }
            code = argv[++i];
            i++;
            break;
        }
        if (strcmp(a, "--") == 0) { i++; break; }
        if (a[0] == '-' && a[1]) { fprintf(stderr, "tfe: unknown option '%s' (see tfe --help)\n", a); return 2; }
        break;
    }
    if (!code && i < argc) file = argv[i++];
    opt.argc = argc - i;
    opt.argv = argv + i;
    /* joins the job when mpirun launched this process; nothing otherwise */
    dist_start(&argc, &argv);
    Interp *I = interp_new(&opt);
    int rc;
    if (!kernel && (code || file || !isatty(0)) && dist_size() <= 1) script_sigint();
    if (kernel) {
        rc = kernel_run(I);
    } else if (code) {
        rc = interp_run_source(I, "<cmdline>", code, strlen(code));
    } else if (file) {
        rc = interp_run_file(I, file);
    } else if (dist_size() > 1) {
        rc = run_stdin_everywhere(I);
    } else if (isatty(0)) {
        rc = repl_run(I);
    } else {
        size_t len;
        char *text = read_all(stdin, &len);
        rc = interp_run_source(I, "<stdin>", text, len);
        free(text);
    }
    fflush(stdout);
    interp_free(I);
    /* A failed rank must not wait in MPI_Finalize for ranks that may be
     * blocked in a collective with it: it ends the whole job instead. */
    if (rc != 0 && dist_size() > 1) dist_abort(rc);
    dist_stop();
    return rc;
}
