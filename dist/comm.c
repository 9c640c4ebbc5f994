/* dist/comm.c — the process group on Open MPI, or the one-process group when
 * the build has no MPI or mpirun did not launch the program (dist/comm.h). */
#include "config.h"
#include "dist/comm.h"
#include "util/half.h"
#include "util/profile.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

static bool g_active;
static int g_rank = 0, g_size = 1;

size_t dist_type_size(dist_type t)
{
    switch (t) {
    case DIST_U8: return 1;
    case DIST_I32: case DIST_F32: return 4;
    case DIST_I64: case DIST_F64: return 8;
    case DIST_F16: case DIST_BF16: return 2;
    }
    return 1;
}

bool dist_active(void) { return g_active; }
int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }

static void set_err(char *err, size_t errn, const char *what, const char *msg)
{
    if (err && errn) snprintf(err, errn, "%s: %s", what, msg);
}

double dist_time(void)
{
#ifdef HAVE_MPI
    if (g_active) return MPI_Wtime();
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef HAVE_MPI
/* Launched by mpirun: Open MPI's launcher sets OMPI_COMM_WORLD_SIZE, a PMIx
 * launcher (srun, prterun) PMIX_RANK. A plain `tfe prog.tfe` has neither and
 * never touches MPI (a singleton MPI_Init costs tens of milliseconds). */
static bool launched_by_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK");
}

static int mpi_fail(int rc, char *err, size_t errn, const char *what)
{
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    set_err(err, errn, what, msg);
    return -1;
}

/* float16 and bfloat16 reduce through operators of our own: widen each
 * element to float, reduce, round back (round to nearest even). */
static float reduce1(float a, float b, dist_op op)
{
    switch (op) {
    case DIST_SUM: return a + b;
    case DIST_MAX: return (a != a || a > b) ? a : b;   /* NaN wins, as MPI_MAX on floats */
    case DIST_MIN: return (a != a || a < b) ? a : b;
    }
    return a;
}

#define HALF_OP(name, to_f, from_f, op)                                                   \
    static void name(void *in, void *inout, int *len, MPI_Datatype *dt)                   \
    {                                                                                     \
        (void)dt;                                                                         \
        const uint16_t *a = in;                                                           \
        uint16_t *b = inout;                                                              \
        for (int i = 0; i < *len; i++) b[i] = from_f(reduce1(to_f(a[i]), to_f(b[i]), op)); \
    }
HALF_OP(f16_sum, half_to_float, float_to_half, DIST_SUM)
HALF_OP(f16_max, half_to_float, float_to_half, DIST_MAX)
HALF_OP(f16_min, half_to_float, float_to_half, DIST_MIN)
HALF_OP(bf16_sum, bf16_to_float, float_to_bf16, DIST_SUM)
HALF_OP(bf16_max, bf16_to_float, float_to_bf16, DIST_MAX)
HALF_OP(bf16_min, bf16_to_float, float_to_bf16, DIST_MIN)

static MPI_Op g_half_ops[2][3]; /* [f16, bf16][sum, max, min], made in dist_start */

static MPI_Datatype mpi_type(dist_type t)
{
    switch (t) {
    case DIST_U8: return MPI_UINT8_T;
    case DIST_I32: return MPI_INT32_T;
    case DIST_I64: return MPI_INT64_T;
    case DIST_F32: return MPI_FLOAT;
    case DIST_F64: return MPI_DOUBLE;
    case DIST_F16: case DIST_BF16: return MPI_UINT16_T;
    }
    return MPI_BYTE;
}

static MPI_Op mpi_op(dist_type t, dist_op op)
{
    if (t == DIST_F16 || t == DIST_BF16) return g_half_ops[t == DIST_BF16][op];
    switch (op) {
    case DIST_SUM: return MPI_SUM;
    case DIST_MAX: return MPI_MAX;
    case DIST_MIN: return MPI_MIN;
    }
    return MPI_SUM;
}
#endif

void dist_start(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
#ifdef HAVE_MPI
    if (g_active || !launched_by_mpirun()) return;
    /* SERIALIZED: one thread at a time calls MPI (the interpreter's, or a
     * progress helper that takes turns with it); tfe's kernel threads never
     * do. NULL arguments: mpirun passes none that tfe should lose. */
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fputs("tfe: launched by mpirun, but MPI_Init failed\n", stderr);
        exit(1);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_User_function *fns[2][3] = {{f16_sum, f16_max, f16_min}, {bf16_sum, bf16_max, bf16_min}};
    for (int k = 0; k < 2; k++)
        for (int o = 0; o < 3; o++) MPI_Op_create(fns[k][o], 1, &g_half_ops[k][o]);
    g_active = true;
#endif
}

#ifdef HAVE_MPI
/* The agreement's allreduce: max of {sig, ~sig, stopped, blocking}, where
 * stopped is rank + 1 on a rank that has finished its program (dist_stop)
 * and 0 on a rank about to make a collective, and blocking is 0 on a rank
 * that would make the collective nonblocking, 1 otherwise. All ranks equal
 * <=> max(sig) == min(sig) == ~max(~sig). Four words on every caller, so
 * that a rank in dist_stop and a rank in a collective's agreement match each
 * other; one allreduce, so that a collective costs one agreement. */
static int agree_words(uint64_t v[4], char *err, size_t errn)
{
    return mpi_fail(MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), err, errn, "agree");
}

/* What a finished rank passes (no caller's hash is this, but for a chance of
 * one in 2^64). */
#define SIG_STOP UINT64_C(0x73746f7020746665)

/* A finished rank met ranks in a collective's agreement: they raise "rank N
 * has finished its program" and their uncaught error ends the job
 * (dist_abort), this rank with it. It waits for that in silence, so that the
 * job prints the one located message; should they not end it (an error that
 * is caught and retried), it ends the job itself after 10 s. */
static void wait_to_be_ended(void)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    for (int i = 0; i < 100; i++) nanosleep(&ts, NULL);
    fflush(stdout);
    fprintf(stderr, "[rank %d] tfe: this rank finished its program while other ranks wait in a collective\n", g_rank);
    dist_abort(1);
}
#endif

void dist_stop(void)
{
#ifdef HAVE_MPI
    if (!g_active) return;
    /* MPI_Finalize waits for every rank (a fence), so a rank that finished
     * while another waits in a collective would hang both for ever: first
     * meet the others in one agreement, which a rank in a collective's
     * agreement also matches, and which then fails there. */
    if (g_size > 1) {
        uint64_t v[4] = {SIG_STOP, ~SIG_STOP, (uint64_t)g_rank + 1, 1};
        if (agree_words(v, NULL, 0) == 0 && v[0] != ~v[1]) wait_to_be_ended();
    }
    for (int k = 0; k < 2; k++)
        for (int o = 0; o < 3; o++) MPI_Op_free(&g_half_ops[k][o]);
    MPI_Finalize();
    g_active = false;
#endif
}

#ifdef HAVE_MPI
/* Whether the launcher ends the whole job when one rank exits with a
 * non-zero status: Open MPI's own mpirun (ORTE, which hands its ranks
 * OMPI_MCA_orte_hnp_uri) does unless told otherwise
 * (orte_abort_on_non_zero_status, passed to the ranks as OMPI_MCA_...). */
static bool launcher_ends_job_on_exit(void)
{
    if (!getenv("OMPI_MCA_orte_hnp_uri")) return false;
    const char *v = getenv("OMPI_MCA_orte_abort_on_non_zero_status");
    return !v || !(strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "no") == 0);
}
#endif

/* Under Open MPI's mpirun: exit(code) without MPI_Finalize, not MPI_Abort.
 * Measured on Open MPI 4.1.4 with the other rank blocked in MPI_Barrier:
 * both end the job in about a second and mpirun exits with the code, but
 * after MPI_Abort mpirun prints its 8-line "MPI_ABORT was invoked" notice,
 * or, in 6 runs of 20, an "ORTE_ERROR_LOG: ... show_help.c" line from a race
 * in forwarding that notice, and in 3 of 20 before the rank's own message;
 * after an exit it printed, after the rank's message, in 10 runs of 10, its
 * two notices "Primary job terminated normally, but 1 process returned a
 * non-zero exit code" and "mpirun detected that one or more processes
 * exited with non-zero status" (the rank and its code). Other launchers
 * (srun, prterun) need not end the job on a failed rank: there it is
 * MPI_Abort. docs/distributed.md, "Errors, mismatches and killed ranks". */
void dist_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
#ifdef HAVE_MPI
    if (g_active && g_size > 1 && !launcher_ends_job_on_exit()) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    exit(code);
}

static int dist_barrier_untimed(char *err, size_t errn)
{
#ifdef HAVE_MPI
    if (g_active) return mpi_fail(MPI_Barrier(MPI_COMM_WORLD), err, errn, "barrier");
#endif
    (void)err;
    (void)errn;
    return 0;
}

/* MPI counts are ints: a buffer longer than INT_MAX elements goes in pieces */
#define CHUNK ((size_t)INT_MAX / 8 * 8)

static int dist_allreduce_untimed(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn)
{
#ifdef HAVE_MPI
    if (g_active) {
        size_t esz = dist_type_size(t);
        for (size_t done = 0; done < count;) {
            size_t n = count - done < CHUNK ? count - done : CHUNK;
            int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * esz, (int)n, mpi_type(t),
                                   mpi_op(t, op), MPI_COMM_WORLD);
            if (mpi_fail(rc, err, errn, "allreduce")) return -1;
            done += n;
        }
        return 0;
    }
#endif
    (void)buf; (void)count; (void)t; (void)op; (void)err; (void)errn;
    return 0;
}

static int dist_broadcast_untimed(void *buf, size_t bytes, int root, char *err, size_t errn)
{
    if (root < 0 || root >= g_size) {
        char msg[96];
        snprintf(msg, sizeof msg, "root %d is not a rank of this job (ranks 0 to %d)", root, g_size - 1);
        set_err(err, errn, "broadcast", msg);
        return -1;
    }
#ifdef HAVE_MPI
    if (g_active) {
        for (size_t done = 0; done < bytes;) {
            size_t n = bytes - done < CHUNK ? bytes - done : CHUNK;
            int rc = MPI_Bcast((char *)buf + done, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
            if (mpi_fail(rc, err, errn, "broadcast")) return -1;
            done += n;
        }
        return 0;
    }
#endif
    (void)buf;
    return 0;
}

static int dist_allgather_untimed(const void *send, size_t bytes, void *recv, char *err, size_t errn)
{
#ifdef HAVE_MPI
    if (g_active) {
        if (bytes > (size_t)INT_MAX) {
            set_err(err, errn, "allgather", "more than 2 GiB per rank");
            return -1;
        }
        return mpi_fail(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
                        err, errn, "allgather");
    }
#endif
    (void)err;
    (void)errn;
    if (bytes) memmove(recv, send, bytes);
    return 0;
}

int dist_agree(uint64_t sig, char *err, size_t errn)
{
    return dist_agree_nb(sig, NULL, err, errn);
}

int dist_agree_nb(uint64_t sig, bool *nonblocking, char *err, size_t errn)
{
#ifdef HAVE_MPI
    if (g_active && g_size > 1) {
        uint64_t v[4] = {sig, ~sig, 0, nonblocking && *nonblocking ? 0 : 1};
        if (agree_words(v, err, errn)) return -1;
        if (nonblocking) *nonblocking = v[3] == 0;
        if (v[2]) {
            if (err && errn)
                snprintf(err, errn, "rank %d finished its program and will not join this collective", (int)(v[2] - 1));
            return -1;
        }
        return v[0] == ~v[1];
    }
#endif
    (void)sig;
    (void)err;
    (void)errn;
    (void)nonblocking; /* one process: whatever it wants */
    return 1;
}

struct dist_request {
#ifdef HAVE_MPI
    MPI_Request req;
#endif
    int done;
};

#ifdef HAVE_MPI
/* outstanding requests, so that dist_progress can test them all */
static dist_request **g_pending;
static size_t g_npending, g_cappending;

static void pending_add(dist_request *r)
{
    if (g_npending == g_cappending) {
        size_t cap = g_cappending ? 2 * g_cappending : 16;
        dist_request **p = realloc(g_pending, cap * sizeof *p);
        if (!p) return; /* not tracked: dist_wait still completes it */
        g_pending = p;
        g_cappending = cap;
    }
    g_pending[g_npending++] = r;
}

static void pending_remove(dist_request *r)
{
    for (size_t i = 0; i < g_npending; i++)
        if (g_pending[i] == r) {
            g_pending[i] = g_pending[--g_npending];
            return;
        }
}
#endif

static dist_request *dist_iallreduce_untimed(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn)
{
    dist_request *r = calloc(1, sizeof *r);
    if (!r) {
        set_err(err, errn, "allreduce", "out of memory");
        return NULL;
    }
#ifdef HAVE_MPI
    if (g_active) {
        if (count > CHUNK) { /* rare: a single bucket over 2^31 elements goes blocking */
            if (dist_allreduce(buf, count, t, op, err, errn)) { free(r); return NULL; }
            r->done = 1;
            return r;
        }
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(t), mpi_op(t, op), MPI_COMM_WORLD, &r->req);
        if (mpi_fail(rc, err, errn, "allreduce")) { free(r); return NULL; }
        pending_add(r);
        return r;
    }
#endif
    (void)buf; (void)count; (void)t; (void)op;
    r->done = 1;
    return r;
}

static int dist_wait_untimed(dist_request *r, char *err, size_t errn)
{
    if (!r) return 0;
    int rc = 0;
#ifdef HAVE_MPI
    if (!r->done) {
        pending_remove(r);
        rc = mpi_fail(MPI_Wait(&r->req, MPI_STATUS_IGNORE), err, errn, "allreduce");
    }
#endif
    (void)err;
    (void)errn;
    free(r);
    return rc;
}

void dist_progress(void)
{
#ifdef HAVE_MPI
    for (size_t i = 0; i < g_npending;) {
        int flag = 0;
        dist_request *r = g_pending[i];
        if (MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
            r->done = 1;
            g_pending[i] = g_pending[--g_npending];
        } else {
            i++;
        }
    }
#endif
}

bool dist_done(const dist_request *r)
{
    return r && r->done;
}

/* --- the profiler's collective events (util/profile.h) ------------------------------ */

int dist_barrier(char *err, size_t errn)
{
    if (!prof_recording) return dist_barrier_untimed(err, errn);
    int64_t t0 = prof_now();
    int rc = dist_barrier_untimed(err, errn);
    if (!rc) prof_complete(PROF_COLL, "barrier", t0, NULL, -1, -1);
    return rc;
}

int dist_allreduce(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn)
{
    if (!prof_recording) return dist_allreduce_untimed(buf, count, t, op, err, errn);
    int64_t t0 = prof_now();
    int rc = dist_allreduce_untimed(buf, count, t, op, err, errn);
    if (!rc) prof_complete(PROF_COLL, "allreduce", t0, NULL, (int64_t)(count * dist_type_size(t)), -1);
    return rc;
}

int dist_broadcast(void *buf, size_t bytes, int root, char *err, size_t errn)
{
    if (!prof_recording) return dist_broadcast_untimed(buf, bytes, root, err, errn);
    int64_t t0 = prof_now();
    int rc = dist_broadcast_untimed(buf, bytes, root, err, errn);
    if (!rc) prof_complete(PROF_COLL, "broadcast", t0, NULL, (int64_t)bytes, -1);
    return rc;
}

int dist_allgather(const void *send, size_t bytes, void *recv, char *err, size_t errn)
{
    if (!prof_recording) return dist_allgather_untimed(send, bytes, recv, err, errn);
    int64_t t0 = prof_now();
    int rc = dist_allgather_untimed(send, bytes, recv, err, errn);
    if (!rc) prof_complete(PROF_COLL, "allgather", t0, NULL, (int64_t)bytes, -1);
    return rc;
}

dist_request *dist_iallreduce(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn)
{
    if (!prof_recording) return dist_iallreduce_untimed(buf, count, t, op, err, errn);
    int64_t t0 = prof_now();
    dist_request *rc = dist_iallreduce_untimed(buf, count, t, op, err, errn);
    if (rc) prof_complete(PROF_COLL, "allreduce start", t0, NULL, (int64_t)(count * dist_type_size(t)), -1);
    return rc;
}

int dist_wait(dist_request *r, char *err, size_t errn)
{
    if (!prof_recording) return dist_wait_untimed(r, err, errn);
    int64_t t0 = prof_now();
    int rc = dist_wait_untimed(r, err, errn);
    if (!rc) prof_complete(PROF_COLL, "allreduce wait", t0, NULL, -1, -1);
    return rc;
}
