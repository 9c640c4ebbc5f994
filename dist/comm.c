/* dist/comm.c — the process group on Open MPI, or the one-process group when
 * the build has no MPI or mpirun did not launch the program (dist/comm.h). */
#include "config.h"
#include "dist/comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static float f16_to_float(uint16_t h)
{
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}
static uint16_t float_to_f16(float f)
{
    _Float16 v = (_Float16)f;
    uint16_t h;
    memcpy(&h, &v, 2);
    return h;
}
static float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

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
HALF_OP(f16_sum, f16_to_float, float_to_f16, DIST_SUM)
HALF_OP(f16_max, f16_to_float, float_to_f16, DIST_MAX)
HALF_OP(f16_min, f16_to_float, float_to_f16, DIST_MIN)
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

void dist_stop(void)
{
#ifdef HAVE_MPI
    if (!g_active) return;
    for (int k = 0; k < 2; k++)
        for (int o = 0; o < 3; o++) MPI_Op_free(&g_half_ops[k][o]);
    MPI_Finalize();
    g_active = false;
#endif
}

void dist_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
#ifdef HAVE_MPI
    if (g_active && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    exit(code);
}

int dist_barrier(char *err, size_t errn)
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

int dist_allreduce(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn)
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

int dist_broadcast(void *buf, size_t bytes, int root, char *err, size_t errn)
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

int dist_allgather(const void *send, size_t bytes, void *recv, char *err, size_t errn)
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
#ifdef HAVE_MPI
    if (g_active && g_size > 1) {
        /* all equal <=> max(sig) == min(sig) == ~max(~sig) */
        uint64_t v[2] = {sig, ~sig};
        int rc = MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (mpi_fail(rc, err, errn, "agree")) return -1;
        return v[0] == ~v[1];
    }
#endif
    (void)sig;
    (void)err;
    (void)errn;
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

dist_request *dist_iallreduce(void *buf, size_t count, dist_type t, dist_op op, char *err, size_t errn)
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

int dist_wait(dist_request *r, char *err, size_t errn)
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
