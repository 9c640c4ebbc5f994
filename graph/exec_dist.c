/* exec_dist.c — running the halves of an overlapped allreduce (graph/
 * overlap.c), progressing it between nodes, and the overlap statistics.
 *
 * The start does what the allreduce kernel (tensor/kernels_dist.c,
 * k_allreduce) does up to the reduction, with dist_iallreduce instead of
 * dist_allreduce: the same agreement, the same buffer, the same MPI
 * reduction; the wait does the rest (a mean's division, the
 * kernel's), so the result is the kernel's bit for bit. MPI matches a
 * nonblocking collective only with a nonblocking one: when another rank
 * runs the kernel (it runs the step eagerly), the agreement's last word
 * (tfe_coll_agree_nb) says so, and the start makes the blocking
 * call too. Ints and bools
 * (reduced through an int64 copy) and tensors off the CPU run the whole
 * kernel at the start, blocking, and the wait hands its result on.
 *
 * Progress: Open MPI moves a nonblocking collective only inside MPI calls
 * (4.1 has no progress thread by default), so between two nodes of a run
 * with a request in flight the executor calls dist_progress.
 *
 * $TFE_DIST_STATS=1: each graph run that met a collective prints one line
 * on stderr, for bench/ and the tests to read:
 *   dist_stats rank=0 graph=step run=3 allreduces=2 split=2 early=1
 *     bytes=1077288 comm_ms=1.234 start_ms=0.050 wait_ms=0.123 hidden=0.860
 *     ops=52 ops_overlapped=15 starts=21,38 waits=47,48
 * split: the allreduces run as a start and a wait; early: those a
 * dist_progress between nodes saw complete before their wait began;
 * comm_ms: from each start to its completion (seen between nodes, else the
 * end of its wait; for an allreduce not split, the kernel's time);
 * start_ms: the time inside starts (the agreement with the other ranks, a
 * blocking call, the copy and the launch); wait_ms: the time inside waits
 * (and in allreduces not split); hidden = 1 - (start_ms + wait_ms) /
 * comm_ms, the share of the allreduces' time the other nodes covered; ops:
 * op and fused nodes the run ran (inside conds and loops too, the halves
 * included); ops_overlapped: those (halves aside) that ran while a request
 * was in flight; starts, waits: for each split allreduce, how many ops had
 * run when its start and its wait ran (the starts before the backward pass
 * ended show as starts well below the last one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/comm.h"
#include "graph/exec_dist.h"
#include "graph/host.h"
#include "tensor/collective.h"
#include "tensor/kernels.h"
#include "util/xalloc.h"

enum { RED_SUM, RED_MEAN, RED_MAX, RED_MIN }; /* ops_dist.def: ints[0] of an allreduce */

typedef struct GReq {
    int start;            /* the start node */
    dist_request *r;      /* NULL: done (or run whole) */
    tfe_tensor *buf;      /* the start's output (a reference) */
    double t_start, t_wait0, t_wait1;
    double t_done;        /* when a dist_progress first saw it complete (0: not yet) */
    long op_start, op_wait; /* GRun.nops when it started, when its wait ran */
    int64_t bytes;
    bool whole;           /* run whole at the start (counted there) */
} GReq;

typedef struct GColl {
    GReq *q;
    int n, cap;
    int npending;
    int nwhole, nsplit;
    int early;            /* requests complete before their wait began */
    int64_t bytes;
    double comm, wait;    /* seconds */
    double in_start;      /* seconds inside starts (the agreement, the copy, the launch) */
    int64_t ops_overlapped;
} GColl;

static int stats_mode(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("TFE_DIST_STATS");
        mode = e && *e && strcmp(e, "0") ? 1 : 0;
    }
    return mode;
}

static GColl *coll_of(GRun *x)
{
    if (!x->coll) x->coll = xcalloc(1, sizeof *x->coll);
    return x->coll;
}

static int node_fail(GRun *x, GNode *n, const char *msg)
{
    if (graph_host.node_error) return graph_host.node_error(x, n, msg);
    if (msg != tfe_error_msg()) tfe_error_set("%s", msg);
    return -1;
}

static dist_type dist_type_of(tfe_dtype dt)
{
    static const dist_type map[TFE_NDTYPES] = {
        [TFE_BOOL] = DIST_U8, [TFE_INT32] = DIST_I32, [TFE_INT64] = DIST_I64, [TFE_FLOAT32] = DIST_F32,
        [TFE_FLOAT64] = DIST_F64, [TFE_FLOAT16] = DIST_F16, [TFE_BFLOAT16] = DIST_BF16,
    };
    return map[dt];
}

static GReq *req_of(GColl *c, int start)
{
    for (int i = c->n - 1; i >= 0; i--)
        if (c->q[i].start == start) return &c->q[i];
    return NULL;
}

/* What the allreduce kernel agrees on (tensor/kernels_dist.c, agree_call). */
static tfe_coll_desc desc_of(const GNode *n, tfe_dtype dt, int rank, const int64_t *shape)
{
    tfe_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = (int32_t)n->op;
    d.arg = n->at->nints > 0 ? (int32_t)n->at->ints[0] : RED_SUM;
    d.dtype = (int32_t)dt;
    d.rank = rank;
    for (int i = 0; i < rank; i++) d.shape[i] = shape[i];
    d.nleaves = n->at->nints > 1 ? n->at->ints[1] : 1;
    d.hash = n->at->nints > 2 ? n->at->ints[2] : 0;
    return d;
}

int grun_coll_start(GRun *x, GNode *n)
{
    tfe_tensor *in = grun_value(x, n->in[0]);
    const tfe_opcall c0 = {.op = n->op, .nin = 1, .nout = 1, .in = &in, .at = n->at};
    tfe_meta m;
    if (tfe_ops[n->op].infer(&c0, &m)) return node_fail(x, n, tfe_error_msg());
    GColl *c = coll_of(x);
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->q = xrealloc(c->q, sizeof *c->q * (size_t)c->cap);
    }
    GReq *q = &c->q[c->n];
    *q = (GReq){.start = (int)(n - x->g->nodes), .op_start = x->nops, .op_wait = x->nops};
    q->t_start = dist_time();
    int red = n->at->nints > 0 ? (int)n->at->ints[0] : RED_SUM;
    bool cpu = !in->storage || in->storage->device == 0;
    if (m.dtype != in->dtype || !cpu || n->start_blocks) { /* the whole kernel, now (top of the file) */
        tfe_tensor *out[1];
        if (tfe_execute_eager(n->op, 1, &in, n->at, out)) return node_fail(x, n, tfe_error_msg());
        q->buf = out[0];
        q->whole = true;
        double t = dist_time() - q->t_start;
        c->comm += t;
        c->wait += t;
        c->n++;
        c->nwhole++;
        tensor_incref(out[0]);
        grun_set(x, n->vbase, out[0]);
        return 0;
    }
    tfe_tensor *o = tensor_new(m.dtype, m.rank, m.shape);
    if (!o) return node_fail(x, n, tfe_error_msg());
    o->weak = m.weak;
    /* the agreement, as the kernel's: a blocking call, so a mismatch is
     * eager's error, at this allreduce, on every rank */
    tfe_coll_desc d = desc_of(n, in->dtype, in->rank, in->shape);
    bool want_nb = true;
    int nb = tfe_coll_agree_nb(&d, &want_nb) ? -1 : want_nb;
    if (nb < 0 || kn_copy_into(o, in)) {
        tensor_decref(o);
        return node_fail(x, n, tfe_error_msg());
    }
    int64_t count = tensor_numel(o);
    q->bytes = count * (int64_t)dtype_size(o->dtype);
    if (count) {
        static const dist_op ops[] = {[RED_SUM] = DIST_SUM, [RED_MEAN] = DIST_SUM, [RED_MAX] = DIST_MAX,
                                      [RED_MIN] = DIST_MIN};
        char err[256] = "";
        int rc = 0;
        if (nb) {
            q->r = dist_iallreduce(tensor_data(o), (size_t)count, dist_type_of(o->dtype), ops[red], err, sizeof err);
            rc = q->r ? 0 : -1;
        } else { /* another rank makes the blocking call (it runs this step eagerly): so do we */
            rc = dist_allreduce(tensor_data(o), (size_t)count, dist_type_of(o->dtype), ops[red], err, sizeof err);
            q->t_done = dist_time();
        }
        if (rc) {
            tensor_decref(o);
            char msg[400];
            snprintf(msg, sizeof msg, "%s: %s", tfe_coll_name(n->op), err);
            return node_fail(x, n, msg);
        }
        if (q->r) c->npending++;
    }
    q->buf = o;
    tensor_incref(o);
    c->n++;
    c->nsplit++;
    c->in_start += dist_time() - q->t_start;
    c->bytes += q->bytes;
    grun_set(x, n->vbase, o);
    return 0;
}

/* The end of a request: waited for, its times counted. */
static int req_finish(GColl *c, GReq *q, char *err, size_t errn)
{
    if (q->whole) return 0;
    q->t_wait0 = dist_time();
    int rc = 0;
    if (q->r) {
        rc = dist_wait(q->r, err, errn);
        q->r = NULL;
        c->npending--;
    }
    q->t_wait1 = dist_time();
    if (q->t_done > 0) c->early++;
    else q->t_done = q->t_wait1;
    c->comm += q->t_done - q->t_start;
    c->wait += q->t_wait1 - q->t_wait0;
    return rc;
}

int grun_coll_wait(GRun *x, GNode *n)
{
    GColl *c = x->coll;
    int s = n->in[0].node;
    GReq *q = c ? req_of(c, s) : NULL;
    if (!q || !q->buf) return node_fail(x, n, "internal error: an allreduce wait without its start");
    char err[256] = "";
    if (req_finish(c, q, err, sizeof err)) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: %s", tfe_coll_name(n->op), err);
        return node_fail(x, n, msg);
    }
    tfe_tensor *o = q->buf;
    q->buf = NULL;
    q->op_wait = x->nops;
    int red = n->at->nints > 0 ? (int)n->at->ints[0] : RED_SUM;
    tfe_tensor *in = grun_value(x, x->g->nodes[s].in[0]);
    int64_t count = tensor_numel(o);
    if (red == RED_MEAN && !q->whole && o->dtype == in->dtype && count) {
        /* the mean: as k_allreduce's (a whole kernel run at the start has
         * divided already) */
        tfe_coll_mean_divide(o, dist_size());
    }
    grun_set(x, n->vbase, o); /* takes the request's reference */
    return 0;
}

int grun_coll_whole(GRun *x, GNode *n, int (*run)(GRun *, GNode *))
{
    if (!stats_mode() || !(tfe_ops[n->op].flags & F_COLLECTIVE)) return run(x, n);
    GColl *c = coll_of(x);
    double t0 = dist_time();
    int rc = run(x, n);
    double t = dist_time() - t0;
    c->nwhole++;
    c->comm += t;
    c->wait += t;
    if (!rc && n->nout == 1 && x->v[n->vbase])
        c->bytes += tensor_numel(x->v[n->vbase]) * (int64_t)dtype_size(x->v[n->vbase]->dtype);
    return rc;
}

void grun_coll_step(GRun *x, const GNode *n)
{
    GColl *c = x->coll;
    if (!c->npending) return;
    if ((n->kind == G_OP && n->half == GH_WHOLE) || n->kind == G_FUSED) c->ops_overlapped++;
    dist_progress();
    double now = 0;
    for (int i = 0; i < c->n; i++) {
        GReq *q = &c->q[i];
        if (q->r && q->t_done == 0 && dist_done(q->r)) q->t_done = now ? now : (now = dist_time());
    }
}

void grun_coll_end(GRun *x)
{
    GColl *c = x->coll;
    if (!c) return;
    char err[256];
    for (int i = 0; i < c->n; i++) {
        GReq *q = &c->q[i];
        if (q->r) req_finish(c, q, err, sizeof err); /* a run stopped by an error: MPI still writes buf */
        if (q->buf) tensor_decref(q->buf);
    }
    if (stats_mode()) {
        static long run = 0;
        run++;
        char line[4096]; /* one write: the ranks' lines must not mix */
        double blocked = c->wait + c->in_start;
        size_t len = (size_t)snprintf(line, sizeof line,
            "dist_stats rank=%d graph=%s run=%ld allreduces=%d split=%d early=%d bytes=%lld comm_ms=%.3f "
            "start_ms=%.3f wait_ms=%.3f hidden=%.3f ops=%ld ops_overlapped=%lld starts=",
            dist_rank(), x->g->name ? x->g->name : "?", run, c->nwhole + c->nsplit, c->nsplit, c->early,
            (long long)c->bytes, c->comm * 1e3, c->in_start * 1e3, c->wait * 1e3,
            c->comm > 0 ? 1.0 - blocked / c->comm : 0.0, x->nops, (long long)c->ops_overlapped);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < c->n && len < sizeof line - 64; i++)
                len += (size_t)snprintf(line + len, sizeof line - len, "%s%ld", i ? "," : "",
                                        k ? c->q[i].op_wait : c->q[i].op_start);
            if (!k && len < sizeof line - 64) len += (size_t)snprintf(line + len, sizeof line - len, " waits=");
        }
        fprintf(stderr, "%s\n", line);
    }
    free(c->q);
    free(c);
    x->coll = NULL;
}
