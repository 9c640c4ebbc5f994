/* pool_handoff.c — what handing work to the other core costs: the time of a
 * tfe_parallel_for over two tiny chunks (one runs on a pool thread) against
 * doing the same work inline. It is why the planned executor does not run
 * independent small nodes concurrently (docs/optimizer.md, "Concurrency").
 * Build and run: make bench/pool_handoff && ./bench/pool_handoff */
#include <stdio.h>
#include <time.h>

#include "tensor/tensor.h"

static volatile double sink;

static void work(int64_t b, int64_t e, void *ctx)
{
    (void)ctx;
    double s = 0;
    for (int64_t i = b; i < e; i++) s += (double)i;
    sink = s;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
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
    return 0;
}
