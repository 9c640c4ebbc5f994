/* thread.c — tfe_parallel_for on a lazily created pthread pool (one worker
 * per extra core). Chunks are claimed from an atomic counter; the calling
 * thread works too. Nested calls and small ranges run inline. The caller
 * waits only for the workers that joined the job before it ran out of
 * chunks: a worker that wakes late (a loaded machine, a short job) skips
 * it, so waking the pool never makes a job slower than running it alone.
 * Both sides spin a while before they sleep: a worker for the next job, the
 * caller for the workers still inside (spin_until). Why: a futex wake-up
 * costs 25-60 us on a virtual machine, as much as a third of the GEMM half
 * it hands over (docs/benchmarks.md, "The pool spins before it sleeps"); the
 * spin is bounded (TFE_SPIN_US, default SPIN_US_DEFAULT, or 0 when the
 * machine's cores are oversubscribed; 0: sleep at once), as OpenMP's and
 * OpenBLAS's own waits are. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tensor/blas.h"
#include "tensor/tensor.h"
#include "util/profile.h"

#define MAX_THREADS 64

static int nthreads;                 /* 0: not yet initialised */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static uint64_t generation;          /* bumped for each job (written under mu, read atomically) */
#define SPIN_US_DEFAULT 1000
static int64_t spin_ns = -1;         /* -1: not yet read from TFE_SPIN_US */

static struct {
    tfe_range_fn fn;
    void *ctx;
    int64_t n, chunk, nchunks;
    int64_t next;                    /* next chunk to claim (atomic) */
    int active;                      /* workers that joined and are still inside (written
                                      * under mu, read atomically by a spinning caller) */
    bool closed;                     /* the caller finished its part: no more joiners */
} job;

static __thread int in_parallel;

/* a spin-wait hint to the core (x86's pause), nothing elsewhere */
#if defined(__x86_64__) || defined(__i386__)
#define SPIN_PAUSE() __builtin_ia32_pause()
#else
#define SPIN_PAUSE() ((void)0)
#endif

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static __thread uint64_t seen_generation; /* a worker's: the last job it saw */

static bool job_posted(void) { return __atomic_load_n(&generation, __ATOMIC_ACQUIRE) != seen_generation; }

/* acquire: the chunks' writes are seen once the workers are out */
static bool workers_out(void) { return __atomic_load_n(&job.active, __ATOMIC_ACQUIRE) <= 0; }

/* Spins until ready() (returns true) or spin_ns pass (false), reading the
 * clock once per 64 pauses. */
static bool spin_until(bool (*ready)(void)) {
    if (ready()) return true;
    if (spin_ns <= 0) return false;
    int64_t end = now_ns() + spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            SPIN_PAUSE();
            if (ready()) return true;
        }
        if (now_ns() > end) return false;
    }
}

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
    for (;;) {
        spin_until(job_posted); /* the next job may come soon: no futex wake-up then */
        pthread_mutex_lock(&mu);
        while (generation == seen_generation) pthread_cond_wait(&work_cv, &mu);
        seen_generation = generation;
        if (job.closed) { /* woke too late: every chunk is taken */
            pthread_mutex_unlock(&mu);
            continue;
        }
        __atomic_add_fetch(&job.active, 1, __ATOMIC_RELAXED);
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
        /* release: the chunks' writes are seen by a caller that spins on active */
        if (__atomic_sub_fetch(&job.active, 1, __ATOMIC_RELEASE) == 0 && job.closed)
            pthread_cond_signal(&done_cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

static void init_pool(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN), n = cores;
    const char *env = getenv("TFE_NUM_THREADS");
    if (env && atoi(env) > 0) n = atoi(env);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    /* A spinning worker takes a core from whatever else would run there:
     * by default the pool spins only when its threads, times the MPI ranks
     * launched on this machine (Open MPI's and MPICH's variables), fit the
     * cores. Two ranks of two threads on two cores ran their data-parallel
     * tests ~20% slower with the spin. */
    const char *spin = getenv("TFE_SPIN_US");
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local) local = getenv("MPI_LOCALNRANKS");
    long ranks = local && atol(local) > 0 ? atol(local) : 1;
    spin_ns = spin && *spin ? atoll(spin) * 1000 : n * ranks <= cores ? (int64_t)SPIN_US_DEFAULT * 1000 : 0;
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
    __atomic_store_n(&generation, generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&work_cv);
    pthread_mutex_unlock(&mu);

    in_parallel = 1;
    run_chunks();
    in_parallel = 0;

    /* every chunk is claimed; wait for those being run by workers */
    pthread_mutex_lock(&mu);
    job.closed = true; /* from here no worker joins: active only falls */
    if (job.active > 0) {
        pthread_mutex_unlock(&mu);
        bool done = spin_until(workers_out);
        pthread_mutex_lock(&mu);
        if (!done)
            while (job.active > 0) pthread_cond_wait(&done_cv, &mu);
    }
    pthread_mutex_unlock(&mu);
}
