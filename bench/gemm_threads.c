/* gemm_threads.c — where a second OpenBLAS thread starts to pay: each
 * shape's sgemm timed with 1 and 2 threads, alternating call by call so
 * both see the same load, best of ROUNDS (default 1000). It sets tfe's
 * per-GEMM thread policy (tensor/blas.c, docs/benchmarks.md "GEMM threads
 * and concurrent pairs"). Stand-alone (OpenBLAS by dlopen, as tfe loads it):
 *   cc -O2 -o /tmp/gemm_threads bench/gemm_threads.c -ldl && /tmp/gemm_threads [ROUNDS] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void sgemm_fn(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                      float *, int);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    setenv("OPENBLAS_THREAD_TIMEOUT", "22", 0); /* as tfe sets it */
    void *h = dlopen("libopenblas.so.0", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "gemm_threads: %s\n", dlerror());
        return 1;
    }
    sgemm_fn *sgemm = (sgemm_fn *)dlsym(h, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    int rounds = argc > 1 ? atoi(argv[1]) : 1000;
    /* m, n, k, A transposed, B transposed: the MLP step's GEMMs and squares */
    static const int shapes[][5] = {{64, 64, 128, 0, 0},  {64, 128, 128, 0, 0}, {128, 128, 128, 0, 0},
                                    {64, 256, 128, 0, 0}, {64, 256, 256, 0, 1}, {256, 256, 64, 1, 0},
                                    {128, 256, 256, 0, 0}, {64, 256, 784, 0, 0}, {784, 256, 64, 1, 0},
                                    {256, 256, 256, 0, 0}, {512, 512, 512, 0, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        float *a = malloc(sizeof *a * (size_t)(m * k)), *b = malloc(sizeof *b * (size_t)(k * n)),
              *c = malloc(sizeof *c * (size_t)(m * n));
        for (int i = 0; i < m * k; i++) a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (int i = 0; i < k * n; i++) b[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        int lda = ta ? m : k, ldb = tb ? k : n, oa = ta ? 112 : 111, ob = tb ? 112 : 111;
        double best[3] = {1e9, 1e9, 1e9};
        for (int r = 0; r < rounds; r++)
            for (int th = 1; th <= 2; th++) {
                set_threads(th);
                sgemm(101, oa, ob, m, n, k, 1, a, lda, b, ldb, 0, c, n); /* wakes the workers */
                double t = now();
                sgemm(101, oa, ob, m, n, k, 1, a, lda, b, ldb, 0, c, n);
                t = now() - t;
                if (t < best[th]) best[th] = t;
            }
        printf("%4d x %4d x %4d %s%s  m*n*k %6.2fM  1 thread %8.1f us  2 threads %8.1f us  2/1 %.2f\n", m, n, k,
               ta ? "T" : "N", tb ? "T" : "N", (double)m * n * k / 1e6, best[1] * 1e6, best[2] * 1e6,
               best[2] / best[1]);
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
