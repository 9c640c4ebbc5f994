/* dist/comm.h — the process group of a distributed run: rank, size and the
 * collectives on raw buffers, through Open MPI (docs/distributed.md).
 *
 * dist/ sits just above util/: it knows bytes and element types, not tensors,
 * so that the tensor layer (the collective ops' kernels), the graph executor
 * and the interpreter can all call it. Without MPI (a build --without-mpi, or
 * a program not launched by mpirun) the group is one process, rank 0 of 1,
 * and every collective is what it means for one process: allreduce and
 * broadcast leave the buffer as it is, allgather copies it. MPI is
 * initialised only when mpirun launched the program, so a plain run pays no
 * MPI start-up cost.
 *
 * Errors: each call returns 0, or -1 with a message in err[0..errn). An MPI
 * failure is reported, never ignored (MPI_ERRORS_RETURN on the world). */
#ifndef TFE_DIST_COMM_H
#define TFE_DIST_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The element types the collectives move (the tensor layer maps its dtypes
 * to these). F16 and BF16 reduce through operators of our own, as MPI has no
 * half types: each element is widened to float, reduced, rounded back. */
typedef enum dist_type {
    DIST_U8, DIST_I32, DIST_I64, DIST_F32, DIST_F64, DIST_F16, DIST_BF16
} dist_type;

/* Reductions. A mean is a sum the caller divides by the size (the op layer),
 * so that the division happens once, in the tensor's own dtype. */
typedef enum dist_op { DIST_SUM, DIST_MAX, DIST_MIN } dist_op;

size_t dist_type_size(dist_type t);

/* Start-up and shut-down (interp/main.c). dist_start joins the job when the
 * environment says mpirun launched this process (OMPI_COMM_WORLD_SIZE or
 * PMIX_RANK) and does nothing otherwise. dist_stop finalizes MPI when it was
 * started; in a job of several ranks it first meets the others in one
 * agreement, so that a rank waiting in a collective's dist_agree gets an
 * error (this rank finished) instead of both hanging. */
void dist_start(int *argc, char ***argv);
void dist_stop(void);
bool dist_active(void);      /* MPI was initialised (possibly with size 1) */
int dist_rank(void);         /* 0 when not active */
int dist_size(void);         /* 1 when not active */

/* A rank that cannot go on (an error the program did not catch): ends every
 * rank of the job now, with this exit code (not 0). The caller has printed
 * the message. Under Open MPI's mpirun it is an exit without MPI_Finalize,
 * which mpirun turns into the end of the job; under other launchers
 * MPI_Abort; without MPI exit(code). */
void dist_abort(int code) __attribute__((noreturn));

int dist_barrier(char *err, size_t errn);

/* In place: buf holds count elements of type t on every rank; afterwards each
 * holds the elementwise reduction over ranks. */
int dist_allreduce(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn);

/* In place: afterwards buf (bytes long on every rank) holds root's bytes. */
int dist_broadcast(void *buf, size_t bytes, int root, char *err, size_t errn);

/* recv (size * bytes) gets every rank's send (bytes), in rank order. */
int dist_allgather(const void *send, size_t bytes, void *recv, char *err, size_t errn);

/* Agreement before a collective: every rank passes a signature of what it is
 * about to send (op, root, dtypes, shapes, hashed by the caller). Returns 1
 * when all ranks passed the same one, 0 when they did not, -1 on an MPI
 * error or when a rank has finished its program (it met this agreement in
 * dist_stop: "rank N finished its program and will not join this
 * collective"). One small allreduce (the max of sig and of ~sig), so that
 * mismatched shapes give an error on every rank instead of garbage or a
 * hang. */
int dist_agree(uint64_t sig, char *err, size_t errn);

/* dist_agree that also settles whether an allreduce may be nonblocking: MPI
 * matches a nonblocking collective only with a nonblocking one, and one rank
 * may run a staged step cached (its allreduces overlapped) while another
 * runs it eagerly. *nonblocking: in, whether this rank wants it; out,
 * whether every rank does (then all make the nonblocking call, else all the
 * blocking one). NULL: this rank makes the blocking call. Same one
 * allreduce as dist_agree. */
int dist_agree_nb(uint64_t sig, bool *nonblocking, char *err, size_t errn);

/* Nonblocking allreduce, for gradient buckets whose reduction overlaps the
 * rest of a backward pass. buf must stay alive until dist_wait. Without MPI
 * the request is complete at once. dist_progress lets outstanding requests
 * advance (Open MPI progresses nonblocking collectives only inside MPI
 * calls); the executor calls it between steps. */
typedef struct dist_request dist_request;
dist_request *dist_iallreduce(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn);
int dist_wait(dist_request *r, char *err, size_t errn);   /* frees r */
void dist_progress(void);

/* Has r completed (seen so by dist_progress, or complete when made)? The
 * executor's overlap statistics read it after each dist_progress. */
bool dist_done(const dist_request *r);

/* Seconds, for the benchmarks and the overlap measure (MPI_Wtime, else
 * CLOCK_MONOTONIC). */
double dist_time(void);

#endif
