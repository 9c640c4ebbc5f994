/* pool_handoff.c — what handing work to the other core costs: the time of a
 * tfe_parallel_for over two chunks (one runs on a pool thread) against
 * doing the same work inline. Two tiny chunks (the caller usually takes
 * both before a worker joins), then two chunks of ~20 us each, run back to
 * back, after a 0.3 ms gap (a worker still spinning, TFE_SPIN_US) and
 * after a 3 ms gap (a worker asleep: a futex wake-up). It is why the
 * planned executor does not run independent small nodes concurrently
 * (docs/optimizer.md, "Concurrency").
 * Build and run: make bench/pool_handoff && ./bench/pool_handoff */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tensor/tensor.h"

static volatile double sink;

static void work(int64_t b, int64_t e, void *ctx)
{
    int64_t per = ctx ? *(const int64_t *)ctx : 1;
    double s = 0;
    for (int64_t i = b * per; i < e * per; i++) s += (double)i;
    sink = s;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void busy(double s)
{
    double end = now() + s;
    while (now() < end) {
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median time of n (at most 200) two-chunk jobs of per iterations a
 * chunk, each after gap seconds of work on the calling thread */
static double median(int n, int64_t per, double gap, int pooled)
{
    double t[200];
    for (int i = 0; i < n; i++) {
        if (gap > 0) busy(gap);
        double t0 = now();
        if (pooled) tfe_parallel_for(2, 1, work, &per);
        else work(0, 2, &per);
        t[i] = now() - t0;
    }
    qsort(t, (size_t)n, sizeof *t, cmp);
    return t[n / 2];
}

int main(void)
{
    const int n = 200000;
    tfe_parallel_for(4, 1, work, NULL); /* start the pool */
    double t0 = now();
    for (int i = 0; i < n; i++) tfe_parallel_for(2, 1, work, NULL);
    double t1 = now();
    for (int i = 0; i < n; i++) work(0, 2, NULL);
    double t2 = now();
    printf("threads %d: hand-off of two tiny chunks %.2f us, inline %.3f us\n", tfe_num_threads(),
           (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6);
    /* ~20 us a chunk: one chunk's time is what a perfect hand-off gives */
    int64_t per = 20000;
    double one = median(200, per, 0, 0) / 2;
    printf("two chunks of %.1f us, medians: back to back %.1f us, after 0.3 ms %.1f us, after 3 ms %.1f us\n",
           one * 1e6, median(200, per, 0, 1) * 1e6, median(200, per, 3e-4, 1) * 1e6,
           median(100, per, 3e-3, 1) * 1e6);
    return 0;
}
