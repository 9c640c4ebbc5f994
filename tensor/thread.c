/* thread.c — tfe_parallel_for on a lazily created pthread pool (one worker
 * per extra core). Chunks are claimed from an atomic counter; the calling
 * thread works too. Nested calls and small ranges run inline. The caller
 * waits only for the workers that joined the job before it ran out of
 * chunks: a worker that wakes late (a loaded machine, a short job) skips
 * it, so waking the pool never makes a job slower than running it alone. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "tensor/blas.h"
#include "tensor/tensor.h"
#include "util/profile.h"

#define MAX_THREADS 64

static int nthreads;                 /* 0: not yet initialised */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static uint64_t generation;          /* bumped for each job */

static struct {
    tfe_range_fn fn;
    void *ctx;
    int64_t n, chunk, nchunks;
    int64_t next;                    /* next chunk to claim (atomic) */
    int active;                      /* workers that joined and are still inside */
    bool closed;                     /* the caller finished its part: no more joiners */
} job;

static __thread int in_parallel;

static void run_chunks(void) {
    for (;;) {
        int64_t c = __atomic_fetch_add(&job.next, 1, __ATOMIC_RELAXED);
        if (c >= job.nchunks) break;
        if (tfe_interrupted) continue; /* drain quickly; the kernel reports it */
        int64_t b = c * job.chunk, e = b + job.chunk < job.n ? b + job.chunk : job.n;
        job.fn(b, e, job.ctx);
    }
}

static void *worker(void *arg) {
    int index = (int)(intptr_t)arg;
    bool named = false;
    in_parallel = 1;
    uint64_t seen = 0;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (generation == seen) pthread_cond_wait(&work_cv, &mu);
        seen = generation;
        if (job.closed) continue; /* woke too late: every chunk is taken */
        job.active++;
        pthread_mutex_unlock(&mu);
        if (__atomic_load_n(&prof_recording, __ATOMIC_RELAXED)) {
            /* the profiler sees a worker's share of a job as one event on its thread */
            if (!named) {
                char b[32];
                snprintf(b, sizeof b, "pool worker %d", index);
                prof_thread_name(b);
                named = true;
            }
            int64_t t0 = prof_now();
            run_chunks();
            prof_complete(PROF_POOL, "parallel_for", t0, NULL, -1, -1);
        } else {
            run_chunks();
        }
        pthread_mutex_lock(&mu);
        if (--job.active == 0 && job.closed) pthread_cond_signal(&done_cv);
    }
    return NULL;
}

static void init_pool(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("TFE_NUM_THREADS");
    if (env && atoi(env) > 0) n = atoi(env);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    int started = 1;
    for (long i = 1; i < n; i++) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &attr, worker, (void *)(intptr_t)i) == 0) started++;
        pthread_attr_destroy(&attr);
    }
    nthreads = started;
}

int tfe_in_parallel(void) { return in_parallel; }

int tfe_num_threads(void) {
    if (!nthreads) init_pool();
    return nthreads;
}

void tfe_parallel_for(int64_t n, int64_t grain, tfe_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n < grain * 2 || in_parallel || tfe_num_threads() == 1) {
        fn(0, n, ctx);
        return;
    }
    /* Several chunks per thread for balance and so Ctrl-C is seen soon, but
     * never chunks smaller than grain. */
    int64_t nchunks = (int64_t)nthreads * 4;
    if (nchunks > n / grain) nchunks = n / grain;
    int64_t chunk = (n + nchunks - 1) / nchunks;
    nchunks = (n + chunk - 1) / chunk;

    tfe_blas_pool_enter(); /* GEMMs in the tasks: one OpenBLAS thread each */
    pthread_mutex_lock(&mu);
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunk = chunk;
    job.nchunks = nchunks;
    job.next = 0;
    job.active = 0;
    job.closed = false;
    generation++;
    pthread_cond_broadcast(&work_cv);
    pthread_mutex_unlock(&mu);

    in_parallel = 1;
    run_chunks();
    in_parallel = 0;

    /* every chunk is claimed; wait for those being run by workers */
    pthread_mutex_lock(&mu);
    job.closed = true;
    while (job.active > 0) pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
}
