/* bench/dist_allreduce.c — the plain C baseline of bench/dist.sh: an
 * MPI_Allreduce (sum) of float32 buffers, the sizes and iteration counts of
 * bench/dist_allreduce.tfe, timed the same way (docs/benchmarks.md).
 * Built by bench/dist.sh with mpicc; not part of libtfe.
 *
 * Usage: mpirun -np 2 dist_allreduce [inplace|outofplace|agree]
 *   inplace     MPI_IN_PLACE on one buffer, what dist_allreduce in
 *               dist/comm.c calls (the default)
 *   outofplace  send buffer -> a separate receive buffer, what a result
 *               tensor distinct from its input needs at the least
 *   agree       inplace, each preceded by the 16-byte MPI_MAX allreduce of
 *               dist_agree (dist/comm.c), as every tfe collective is: the
 *               floor of tfe's design, without the interpreter
 * Rank 0 prints, per size, one line per timed batch:
 *   ALLREDUCE <bytes> <iters> SECONDS_PER_ITER <float>
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sweep (the same in bench/dist_allreduce.tfe): 8 B, then x4 up to 32 MiB,
 * then 64 MiB; each batch runs iters(bytes) collectives, so that a batch of a
 * small size is long enough for the clock and one of a large size is short
 * enough for the run. */
#define MAX_BYTES (64L << 20)
#define BATCHES 7

static long iters_for(long bytes)
{
    long n = (1L << 24) / bytes;
    if (n > 5000) n = 5000;
    if (n < 5) n = 5;
    return n;
}

static void check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "dist_allreduce: %s failed (%d)\n", what, rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "inplace";
    int inplace = strcmp(mode, "outofplace") != 0, agree = strcmp(mode, "agree") == 0;
    if (strcmp(mode, "inplace") && strcmp(mode, "outofplace") && strcmp(mode, "agree")) {
        fprintf(stderr, "usage: dist_allreduce [inplace|outofplace|agree]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    size_t maxn = MAX_BYTES / sizeof(float);
    float *buf = malloc(maxn * sizeof(float));
    float *out = malloc(maxn * sizeof(float));
    if (!buf || !out) {
        fprintf(stderr, "dist_allreduce: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Touch every page up front, so no batch pays first-touch faults; zeros,
     * so that the in-place sum stays finite however many times it runs. */
    for (size_t i = 0; i < maxn; i++) { buf[i] = 0.0f; out[i] = 0.0f; }

    if (rank == 0) {
        printf("MODE %s\n", mode);
        printf("RANKS %d\n", size);
    }
    long bytes = 8;
    for (;;) {
        int count = (int)(bytes / sizeof(float));
        long n = iters_for(bytes);
        for (int b = -1; b < BATCHES; b++) {       /* b = -1: the warm-up */
            check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
            double t0 = MPI_Wtime();
            for (long i = 0; i < n; i++) {
                if (agree) {
                    uint64_t v[2] = {(uint64_t)count, ~(uint64_t)count};
                    check(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD),
                          "MPI_Allreduce (agree)");
                    if (v[0] != ~v[1]) MPI_Abort(MPI_COMM_WORLD, 3);
                }
                if (inplace)
                    check(MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                          "MPI_Allreduce");
                else
                    check(MPI_Allreduce(buf, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                          "MPI_Allreduce");
            }
            double t = (MPI_Wtime() - t0) / n;
            if (b >= 0 && rank == 0)
                printf("ALLREDUCE %ld %ld SECONDS_PER_ITER %.9g\n", bytes, n, t);
        }
        if (rank == 0) fflush(stdout);
        if (bytes == MAX_BYTES) break;
        bytes = bytes * 4 > MAX_BYTES ? MAX_BYTES : bytes * 4;
    }
    free(buf);
    free(out);
    MPI_Finalize();
    return 0;
}
