/* test_pool.c — tfe_parallel_for on the spinning pool (tensor/thread.c):
 * every chunk runs exactly once and its writes are seen by the caller when
 * the call returns, whether the worker is still spinning from the job
 * before (no gap), has gone to sleep (a gap longer than TFE_SPIN_US), or
 * joins too late; also with the spin off (TFE_SPIN_US=0). Run with 2
 * threads (TFE_NUM_THREADS=2, set here before the pool starts). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/tensor.h"
#include "tests/unit/check.h"

#define N 4096

static int hits[N];
static int64_t sums[N];

typedef struct Job {
    int round;
    int64_t work; /* busy iterations per element: short and long chunks */
} Job;

static void body(int64_t b, int64_t e, void *ctx)
{
    const Job *j = ctx;
    for (int64_t i = b; i < e; i++) {
        int64_t s = 0;
        for (int64_t k = 0; k < j->work; k++) s += (k ^ i) & 7;
        sums[i] = s + j->round; /* plain writes: the pool's hand-back must publish them */
        __atomic_add_fetch(&hits[i], 1, __ATOMIC_RELAXED);
    }
}

static void busy_us(int us)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000 + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void rounds(const char *what, int gap_us)
{
    static const int64_t works[] = {0, 1, 50, 2000};
    static const int64_t sizes[] = {1, 2, 3, 7, 64, 1000, N};
    for (int r = 0; r < 40; r++) {
        Job j = {.round = r, .work = works[r % 4]};
        int64_t n = sizes[r % 7];
        memset(hits, 0, sizeof hits);
        tfe_parallel_for(n, 1, body, &j);
        int64_t want = 0;
        for (int64_t i = 0; i < n; i++) {
            if (hits[i] != 1) {
                CHECK(hits[i] == 1, "%s: round %d: element %lld ran %d times", what, r, (long long)i, hits[i]);
                break;
            }
            int64_t s = 0;
            for (int64_t k = 0; k < j.work; k++) s += (k ^ i) & 7;
            want = s + r;
            if (sums[i] != want) {
                CHECK(sums[i] == want, "%s: round %d: element %lld not seen", what, r, (long long)i);
                break;
            }
        }
        for (int64_t i = n; i < N; i++)
            if (hits[i]) {
                CHECK(!hits[i], "%s: round %d: element %lld past the range ran", what, r, (long long)i);
                break;
            }
        if (gap_us) busy_us(gap_us);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    /* before the pool starts: it reads both once */
    setenv("TFE_NUM_THREADS", "2", 1);
    const char *spin = argc > 1 ? argv[1] : "200";
    setenv("TFE_SPIN_US", spin, 1);
    REQUIRE(tfe_num_threads() == 2, "the pool has %d threads", tfe_num_threads());
    rounds("back to back", 0);
    rounds("inside the spin", 50);
    rounds("after the spin", 600); /* the worker sleeps: a futex wake-up */
    return check_done(argv[0]);
}
