/* kernels_dist.c — infer rules and CPU kernels of the collectives
 * (ops_dist.def) over dist/comm.h, and the agreement each makes first
 * (collective.h). docs/distributed.md, "The process group and the
 * collectives", says what each computes. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "tensor/collective.h"
#include "tensor/device.h"
#include "tensor/kernels.h"

enum { RED_SUM, RED_MEAN, RED_MAX, RED_MIN };
static const char *const red_names[] = {"sum", "mean", "max", "min"};

const char *tfe_coll_name(int kind)
{
    if (kind == OP_ALLREDUCE) return "dist.allreduce";
    if (kind == OP_BROADCAST) return "dist.broadcast";
    if (kind == OP_ALLGATHER) return "dist.allgather";
    return "dist.barrier";
}

static dist_type dist_type_of(tfe_dtype dt)
{
    static const dist_type map[TFE_NDTYPES] = {
        [TFE_BOOL] = DIST_U8, [TFE_INT32] = DIST_I32, [TFE_INT64] = DIST_I64, [TFE_FLOAT32] = DIST_F32,
        [TFE_FLOAT64] = DIST_F64, [TFE_FLOAT16] = DIST_F16, [TFE_BFLOAT16] = DIST_BF16,
    };
    return map[dt];
}

/* ---- agreement ------------------------------------------------------------------ */

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* What differs between two descriptors, most telling first (0: nothing). */
enum { D_SAME, D_KIND, D_ARG, D_SHAPE, D_DTYPE, D_LEAVES, D_PATH };
static int differs(const tfe_coll_desc *a, const tfe_coll_desc *b)
{
    if (a->kind != b->kind) return D_KIND;
    if (a->arg != b->arg) return D_ARG;
    if (a->nleaves != b->nleaves || a->hash != b->hash) return D_LEAVES;
    if (a->rank != b->rank || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank)) return D_SHAPE;
    if (a->dtype != b->dtype) return D_DTYPE;
    if (a->path != b->path) return D_PATH;
    return D_SAME;
}

/* How rank r's descriptor reads for what differs. */
static void describe(char *buf, size_t n, const tfe_coll_desc *d, int what)
{
    char sb[200];
    switch (what) {
    case D_KIND: snprintf(buf, n, "%s", tfe_coll_name(d->kind)); break;
    case D_ARG:
        if (d->kind == OP_ALLREDUCE && d->arg >= 0 && d->arg <= RED_MIN)
            snprintf(buf, n, "op=\"%s\"", red_names[d->arg]);
        else snprintf(buf, n, "root=%d", (int)d->arg);
        break;
    case D_LEAVES:
        snprintf(buf, n, "%lld lea%s in %s %s", (long long)d->nleaves, d->nleaves == 1 ? "f" : "ves",
                 shape_str(d->rank, d->shape, sb), dtype_name((tfe_dtype)d->dtype));
        break;
    case D_PATH: snprintf(buf, n, "%s", d->path ? "a GPU tensor (NCCL)" : "a cpu:0 tensor, or TFE_NCCL=0 or no NCCL (MPI)"); break;
    default: snprintf(buf, n, "%s %s", shape_str(d->rank, d->shape, sb), dtype_name((tfe_dtype)d->dtype)); break;
    }
}

static int mismatch(const tfe_coll_desc *mine, char *err, size_t errn)
{
    int size = dist_size();
    tfe_coll_desc *all = calloc((size_t)size, sizeof *all);
    if (!all) {
        tfe_error_set("%s: out of memory", tfe_coll_name(mine->kind));
        return -1;
    }
    if (dist_allgather(mine, sizeof *mine, all, err, errn)) {
        tfe_error_set("%s: %s", tfe_coll_name(mine->kind), err);
        free(all);
        return -1;
    }
    int what = D_SAME;
    for (int r = 1; r < size && what == D_SAME; r++) what = differs(&all[0], &all[r]);
    static const char *const heads[] = {
        [D_SAME] = "signatures differ", [D_KIND] = "collectives differ", [D_ARG] = "arguments differ",
        [D_SHAPE] = "shapes differ", [D_DTYPE] = "dtypes differ",
        [D_LEAVES] = "containers differ",
        [D_PATH] = "devices differ",
    };
    const char *head = heads[what];
    if (what == D_ARG) head = mine->kind == OP_ALLREDUCE ? "ops differ" : "roots differ";
    char msg[1024];
    int len = snprintf(msg, sizeof msg, "%s: %s across ranks%s: ", tfe_coll_name(mine->kind), head,
                       what == D_LEAVES ? " (their fields, lengths, or leaves' dtypes or shapes)" : "");
    for (int r = 0; r < size && len < (int)sizeof msg - 1; r++) {
        char d[300];
        if (r == 8 && size > 9) {
            len += snprintf(msg + len, sizeof msg - (size_t)len, ", ... (%d ranks)", size);
            break;
        }
        describe(d, sizeof d, &all[r], what == D_SAME ? D_SHAPE : what);
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%srank %d %s %s", r ? ", " : "", r,
                        what == D_KIND ? "calls" : "has", d);
    }
    free(all);
    tfe_error_set("%s", msg);
    return -1;
}

int tfe_coll_agree(const tfe_coll_desc *d0)
{
    return tfe_coll_agree_nb(d0, NULL);
}

int tfe_coll_agree_nb(const tfe_coll_desc *d0, bool *nonblocking)
{
    if (dist_size() == 1) return 0;
    tfe_coll_desc d;
    memset(&d, 0, sizeof d); /* no padding or unused dims in the hash */
    d.kind = d0->kind, d.arg = d0->arg, d.dtype = d0->dtype, d.rank = d0->rank;
    for (int i = 0; i < d.rank; i++) d.shape[i] = d0->shape[i];
    d.nleaves = d0->nleaves, d.hash = d0->hash;
    d.path = d0->path;
    char err[256] = "";
    int ok = dist_agree_nb(fnv(&d, sizeof d), nonblocking, err, sizeof err);
    if (ok == 1) return 0;
    if (ok < 0) {
        tfe_error_set("%s: %s", tfe_coll_name(d.kind), err);
        return -1;
    }
    return mismatch(&d, err, sizeof err);
}

/* ---- where the bytes move ------------------------------------------------------------ */
/* The GPU whose memory the call's tensors are in, or 0. tensor/dispatch.c
 * runs a collective on a GPU's tensors only when the backend moves the bytes
 * there (NCCL, docs/distributed.md "Devices: NCCL"), with a contiguous input
 * and an output of its dtype; else on cpu:0 copies. */
static int on_device(const tfe_opcall *c)
{
    const tfe_tensor *o = c->out[0];
    return o && o->storage ? o->storage->device : 0;
}

/* dst = src (same dtype and shape, dst fresh), on their device */
static int coll_copy(const tfe_opcall *c, tfe_tensor *dst, const tfe_tensor *src)
{
    return on_device(c) ? tfe_device_copy_into(dst, src) : kn_copy_into(dst, src);
}

static int comm_failed(const tfe_opcall *c, const char *err);

static int coll_allreduce(const tfe_opcall *c, void *buf, size_t n, dist_type t, dist_op op)
{
    char err[256] = "";
    if (on_device(c)) return tfe_device_allreduce(on_device(c), buf, n, t, op);
    return dist_allreduce(buf, n, t, op, err, sizeof err) ? comm_failed(c, err) : 0;
}

static int coll_broadcast(const tfe_opcall *c, void *buf, size_t bytes, int root)
{
    char err[256] = "";
    if (on_device(c)) return tfe_device_broadcast(on_device(c), buf, bytes, root);
    return dist_broadcast(buf, bytes, root, err, sizeof err) ? comm_failed(c, err) : 0;
}

static int coll_allgather(const tfe_opcall *c, const void *send, size_t bytes, void *recv)
{
    char err[256] = "";
    if (on_device(c)) return tfe_device_allgather(on_device(c), send, bytes, recv);
    return dist_allgather(send, bytes, recv, err, sizeof err) ? comm_failed(c, err) : 0;
}

static int agree_call(const tfe_opcall *c, int arg)
{
    const tfe_tensor *x = c->in[0];
    tfe_coll_desc d = {.kind = (int32_t)c->op, .arg = arg, .dtype = (int32_t)x->dtype, .rank = x->rank};
    for (int i = 0; i < x->rank; i++) d.shape[i] = x->shape[i];
    d.nleaves = c->at->nints > 1 ? c->at->ints[1] : 1;
    d.hash = c->at->nints > 2 ? c->at->ints[2] : 0;
    d.path = on_device(c) != 0; /* tensor/dispatch.c put it there for NCCL */
    return tfe_coll_agree(&d);
}

static int comm_failed(const tfe_opcall *c, const char *err)
{
    tfe_error_set("%s: %s", tfe_coll_name(c->op), err);
    return -1;
}

/* ---- infer rules ------------------------------------------------------------------ */

static int red_of(const tfe_opcall *c) { return c->at->nints > 0 ? (int)c->at->ints[0] : RED_SUM; }

int infer_allreduce(const tfe_opcall *c, tfe_meta *m)
{
    const tfe_tensor *x = c->in[0];
    int red = red_of(c);
    if (red < RED_SUM || red > RED_MIN) {
        tfe_error_set("dist.allreduce: unknown reduction %d", red);
        return -1;
    }
    tfe_dtype dt = x->dtype;
    /* as sum and mean: a sum of bools counts them (int64), a mean of
     * ints or bools is float32 */
    if (red == RED_SUM && dt == TFE_BOOL) dt = TFE_INT64;
    if (red == RED_MEAN && !dtype_is_float(dt)) dt = TFE_FLOAT32;
    kn_meta_set(m, dt, x->weak, x->rank, x->shape);
    return 0;
}

int infer_dist_same(const tfe_opcall *c, tfe_meta *m)
{
    const tfe_tensor *x = c->in[0];
    kn_meta_set(m, x->dtype, x->weak, x->rank, x->shape);
    return 0;
}

int infer_allgather(const tfe_opcall *c, tfe_meta *m)
{
    const tfe_tensor *x = c->in[0];
    int64_t size = dist_size();
    if (x->rank == 0) {
        kn_meta_set(m, x->dtype, false, 1, &size);
        return 0;
    }
    kn_meta_set(m, x->dtype, false, x->rank, x->shape);
    if (m->shape[0] >= 0) m->shape[0] *= size;
    return 0;
}

/* ---- kernels ---------------------------------------------------------------------- */

void tfe_coll_mean_divide(tfe_tensor *o, int size)
{
    int64_t n = tensor_numel(o);
    char *p = tensor_data(o);
    if (o->dtype == TFE_FLOAT32)
        for (int64_t i = 0; i < n; i++) ((float *)p)[i] /= (float)size;
    else if (o->dtype == TFE_FLOAT64)
        for (int64_t i = 0; i < n; i++) ((double *)p)[i] /= (double)size;
    else
        for (int64_t i = 0; i < n; i++) {
            char *e = p + i * (int64_t)dtype_size(o->dtype);
            kn_store_f64(e, o->dtype, kn_load_f64(e, o->dtype) / (double)size);
        }
}

int k_allreduce(const tfe_opcall *c)
{
    tfe_tensor *x = c->in[0], *o = c->out[0];
    int red = red_of(c);
    /* blocking: a rank whose staged step overlaps this allreduce then
     * makes the blocking call too (collective.h, tfe_coll_agree_nb) */
    if (agree_call(c, red)) return -1;
    int64_t n = tensor_numel(x);
    if (n == 0) return 0;
    static const dist_op ops[] = {[RED_SUM] = DIST_SUM, [RED_MEAN] = DIST_SUM, [RED_MAX] = DIST_MAX,
                                  [RED_MIN] = DIST_MIN};
    char err[256] = "";
    int size = dist_size();
    if (o->dtype == x->dtype) {
        if (coll_copy(c, o, x)) return -1;
        if (coll_allreduce(c, tensor_data(o), (size_t)n, dist_type_of(o->dtype), ops[red])) return -1;
        if (red == RED_MEAN) tfe_coll_mean_divide(o, size);
        return 0;
    }
    /* bools and ints summed as int64 (a sum of bools counts them; a mean of
     * ints is their int64 sum, as float32, divided in float32 as mean does) */
    tfe_tensor *w = kn_contig_as(x, TFE_INT64);
    if (!w) return -1;
    if (w == x) { /* already int64: reduce a copy, x is the caller's */
        tensor_decref(w);
        if (!(w = tensor_new(TFE_INT64, x->rank, x->shape))) return -1;
        if (kn_copy_into(w, x)) { tensor_decref(w); return -1; }
    }
    int rc = 0;
    if (dist_allreduce(tensor_data(w), (size_t)n, DIST_I64, DIST_SUM, err, sizeof err)) rc = comm_failed(c, err);
    else if (o->dtype == TFE_INT64) rc = kn_copy_into(o, w);
    else {
        float *p = (float *)tensor_data(o);
        const int64_t *s = (const int64_t *)tensor_data(w);
        for (int64_t i = 0; i < n; i++) p[i] = (float)s[i] / (float)size;
    }
    tensor_decref(w);
    return rc;
}

int k_broadcast(const tfe_opcall *c)
{
    tfe_tensor *x = c->in[0], *o = c->out[0];
    int root = c->at->nints > 0 ? (int)c->at->ints[0] : 0;
    if (agree_call(c, root)) return -1;
    if (root < 0 || root >= dist_size()) {
        tfe_error_set("dist.broadcast: root %d is not a rank (the ranks are 0 to %d)", root, dist_size() - 1);
        return -1;
    }
    if (coll_copy(c, o, x)) return -1;
    size_t bytes = (size_t)tensor_numel(o) * dtype_size(o->dtype);
    if (bytes && coll_broadcast(c, tensor_data(o), bytes, root)) return -1;
    return 0;
}

int k_allgather(const tfe_opcall *c)
{
    tfe_tensor *x = c->in[0], *o = c->out[0];
    if (agree_call(c, 0)) return -1;
    size_t bytes = (size_t)tensor_numel(x) * dtype_size(x->dtype);
    if (!bytes) return 0;
    tfe_tensor *xc = kn_contig_as(x, x->dtype);
    if (!xc) return -1;
    int rc = coll_allgather(c, tensor_data(xc), bytes, tensor_data(o));
    tensor_decref(xc);
    return rc;
}
