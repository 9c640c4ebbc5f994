/* fuzz_interp.c — libFuzzer target for the whole interpreter: the input
 * bytes are a program, parsed and run in a fresh Interp. Limits keep one
 * input small and short:
 *   time:      a watchdog thread sets tfe_interrupted (the Ctrl-C flag that
 *              loops, calls and kernels poll) once the input has run for
 *              TFE_FUZZ_BUDGET_MS (default 1000) and keeps setting it, so an
 *              endless loop ends with "interrupted";
 *   memory:    live tensor bytes are capped (tfe_alloc_set_limit) at
 *              TFE_MAX_ALLOC_BYTES, default 256 MiB here;
 *   recursion: the interpreter's own limit (1000 calls).
 * Standard output goes to /dev/null; error reports go to stderr (run.sh
 * passes -close_fd_mask=2 to silence them). Files a program writes land in
 * the current folder: run.sh runs the fuzzer in a scratch folder.
 * TFE_FUZZ_MODE=eager or stage-all runs the programs as tfe --eager or
 * --stage-all. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "interp/interp.h"
#include "tensor/tensor.h"

static InterpOptions opts;
static long budget_ms = 1000;
static _Atomic long long deadline_ns; /* 0: no input running */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The watchdog: a thread, not a timer signal, because libFuzzer's own
 * -timeout uses SIGALRM. */
static void *watchdog(void *arg)
{
    struct timespec tick = {0, 5 * 1000000L};
    for (;;) {
        nanosleep(&tick, NULL);
        long long d = atomic_load(&deadline_ns);
        if (d && now_ns() > d) tfe_interrupted = 1;
    }
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *e = getenv("TFE_FUZZ_BUDGET_MS");
    if (e && atol(e) > 0) budget_ms = atol(e);
    e = getenv("TFE_FUZZ_MODE");
    if (e && strcmp(e, "eager") == 0) opts.eager = true;
    if (e && strcmp(e, "stage-all") == 0) opts.stage_all = true;
    if (!getenv("TFE_MAX_ALLOC_BYTES")) tfe_alloc_set_limit((size_t)256 << 20);
    /* one OpenBLAS thread: the fuzzer runs many processes side by side */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        close(fd);
    }
    pthread_t t;
    pthread_create(&t, NULL, watchdog, NULL);
    pthread_detach(t);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfe_interrupted = 0;
    atomic_store(&deadline_ns, now_ns() + budget_ms * 1000000LL);
    Interp *I = interp_new(&opts);
    (void)interp_run_source(I, "<fuzz>", (const char *)data, size);
    fflush(stdout);
    interp_free(I);
    atomic_store(&deadline_ns, 0);
    tfe_interrupted = 0;
    tfe_error_clear();
    return 0;
}
