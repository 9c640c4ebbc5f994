/* gemm_split.c — a large sgemm run whole on OpenBLAS's one or two threads
 * against the same GEMM cut into two row or column blocks, each a
 * one-thread GEMM on its own core (what tensor/blas.c does above 2^22
 * multiply-adds). It checks that the blocks give the one-thread GEMM's bits
 * and times each way, alternating call by call, best of ROUNDS (default
 * 300). The second core's block runs on a worker that spins on a flag, so
 * the figure leaves out the pool's wake-up (bench/pool_handoff.c measures
 * that). Stand-alone (OpenBLAS by dlopen, as tfe loads it):
 *   cc -O2 -o /tmp/gemm_split bench/gemm_split.c -ldl -lpthread && /tmp/gemm_split [ROUNDS] */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void sgemm_fn(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                      float *, int);
static sgemm_fn *sgemm;
static void (*set_threads)(int);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct G {
    int m, n, k, ta, tb, lda, ldb;
    const float *a, *b;
    float *c;
} G;

/* half h (0 or 1) of g's result: rows (dim 0) or columns (dim 1), row-major */
static void half(const G *g, int dim, int h)
{
    int oa = g->ta ? 112 : 111, ob = g->tb ? 112 : 111;
    if (dim == 0) {
        int m0 = h ? g->m / 2 : 0, m1 = h ? g->m : g->m / 2;
        const float *a = g->ta ? g->a + m0 : g->a + (size_t)m0 * (size_t)g->lda;
        sgemm(101, oa, ob, m1 - m0, g->n, g->k, 1, a, g->lda, g->b, g->ldb, 0, g->c + (size_t)m0 * (size_t)g->n,
              g->n);
    } else {
        int n0 = h ? g->n / 2 : 0, n1 = h ? g->n : g->n / 2;
        const float *b = g->tb ? g->b + (size_t)n0 * (size_t)g->ldb : g->b + n0;
        sgemm(101, oa, ob, g->m, n1 - n0, g->k, 1, g->a, g->lda, b, g->ldb, 0, g->c + n0, g->n);
    }
}

static atomic_int go, done;
static const G *wg;
static int wdim, gen;

static void *worker(void *arg)
{
    (void)arg;
    int seen = 0;
    for (;;) {
        int v;
        while ((v = atomic_load(&go)) == seen) {}
        seen = v;
        half(wg, wdim, 1);
        atomic_store(&done, v);
    }
    return NULL;
}

static void split2(const G *g, int dim)
{
    wg = g;
    wdim = dim;
    atomic_store(&go, ++gen);
    half(g, dim, 0);
    while (atomic_load(&done) != gen) {}
}

int main(int argc, char **argv)
{
    setenv("OPENBLAS_THREAD_TIMEOUT", "22", 0); /* as tfe sets it */
    void *h = dlopen("libopenblas.so.0", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "gemm_split: %s\n", dlerror());
        return 1;
    }
    sgemm = (sgemm_fn *)dlsym(h, "cblas_sgemm");
    set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    /* m, n, k, A transposed, B transposed: the MLP step's GEMMs, squares */
    static const int shapes[][5] = {{64, 256, 784, 0, 0}, {784, 256, 64, 1, 0}, {64, 256, 256, 0, 0},
                                    {64, 256, 256, 0, 1}, {256, 256, 64, 1, 0}, {128, 256, 256, 0, 0},
                                    {256, 256, 256, 0, 0}, {1024, 1024, 1024, 0, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        size_t mn = (size_t)m * (size_t)n;
        float *a = malloc(sizeof *a * (size_t)m * (size_t)k), *b = malloc(sizeof *b * (size_t)k * (size_t)n);
        float *c[4];
        for (int i = 0; i < 4; i++) c[i] = malloc(sizeof *c[i] * mn);
        for (size_t i = 0; i < (size_t)m * (size_t)k; i++) a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (size_t i = 0; i < (size_t)k * (size_t)n; i++) b[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        G g = {m, n, k, ta, tb, ta ? m : k, tb ? k : n, a, b, c[0]};
        int oa = ta ? 112 : 111, ob = tb ? 112 : 111;
        set_threads(1);
        sgemm(101, oa, ob, m, n, k, 1, a, g.lda, b, g.ldb, 0, c[0], n);
        set_threads(2);
        sgemm(101, oa, ob, m, n, k, 1, a, g.lda, b, g.ldb, 0, c[1], n);
        set_threads(1);
        g.c = c[2];
        split2(&g, 0);
        g.c = c[3];
        split2(&g, 1);
        double best[4] = {1e9, 1e9, 1e9, 1e9};
        for (int r = 0; r < rounds; r++)
            for (int v = 0; v < 4; v++) {
                double t0;
                if (v < 2) {
                    set_threads(v + 1);
                    sgemm(101, oa, ob, m, n, k, 1, a, g.lda, b, g.ldb, 0, c[1], n); /* wakes the workers */
                    t0 = now();
                    sgemm(101, oa, ob, m, n, k, 1, a, g.lda, b, g.ldb, 0, c[1], n);
                } else {
                    set_threads(1);
                    t0 = now();
                    split2(&g, v - 2);
                }
                t0 = now() - t0;
                if (t0 < best[v]) best[v] = t0;
            }
        printf("%4d x %4d x %4d %s%s  1 thread %8.1f us  2 threads %8.1f us  rows %8.1f us  cols %8.1f us"
               "  same bits as 1 thread: 2 threads %s, rows %s, cols %s\n",
               m, n, k, ta ? "T" : "N", tb ? "T" : "N", best[0] * 1e6, best[1] * 1e6, best[2] * 1e6,
               best[3] * 1e6, memcmp(c[0], c[1], mn * 4) ? "no" : "yes", memcmp(c[0], c[2], mn * 4) ? "no" : "yes",
               memcmp(c[0], c[3], mn * 4) ? "no" : "yes");
        fflush(stdout);
        free(a);
        free(b);
        for (int i = 0; i < 4; i++) free(c[i]);
    }
    return 0;
}
