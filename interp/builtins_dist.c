/* builtins_dist.c — the natives stdlib/dist.tfe wraps (docs/distributed.md,
 * "The process group and the collectives"): _dist_rank, _dist_size,
 * _dist_barrier, and _dist_allreduce, _dist_broadcast, _dist_allgather on a
 * tensor, a number, or a tuple/list/record of them. A container's leaves of
 * one dtype are packed into one buffer (reshape and concat, ops like any
 * other, so gradients flow through them), moved by ONE collective op of
 * tensor/ops_dist.def, and split back into the container's structure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dist/comm.h"
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "tensor/collective.h"
#include "util/xalloc.h"

/* While a native runs for its dist.tfe wrapper (the innermost frame is the
 * wrapper's, named name), the wrapper's frame is set aside and the location
 * is the wrapper's call: an error, and a staged node, point at the user's
 * line, as check_same_shape's errors do. */
typedef struct Caller { Loc loc; bool popped; } Caller;
static Caller at_caller(Interp *I, const char *name)
{
    Caller c = {I->cur_loc, false};
    if (I->nframes && I->frames[I->nframes - 1].fname && strstr(I->frames[I->nframes - 1].fname, name)) {
        I->nframes--;
        I->cur_loc = I->frames[I->nframes].call_loc;
        c.popped = true;
    }
    return c;
}
static void back_from_caller(Interp *I, Caller c)
{
    if (c.popped) I->nframes++;
    I->cur_loc = c.loc;
}

BUILTIN(bi_dist_rank)
{
    (void)data;
    if (args_parse(I, "dist.rank", "", argc, argv, nkw, kwnames, kwvals, NULL, NULL)) return -1;
    *out = v_int(dist_rank());
    return 0;
}

BUILTIN(bi_dist_size)
{
    (void)data;
    if (args_parse(I, "dist.size", "", argc, argv, nkw, kwnames, kwvals, NULL, NULL)) return -1;
    *out = v_int(dist_size());
    return 0;
}

/* An effect (a host call at every call of a staged function), agreed on
 * first as the collectives are, so that a barrier met by one rank while
 * another is in a collective is an error on both, not a hang. */
BUILTIN(bi_dist_barrier)
{
    (void)data;
    if (args_parse(I, "dist.barrier", "", argc, argv, nkw, kwnames, kwvals, NULL, NULL)) return -1;
    *out = v_nil();
    Caller c = at_caller(I, "barrier");
    tfe_coll_desc d = {.kind = TFE_COLL_BARRIER, .nleaves = 1};
    char err[256] = "";
    int rc = 0;
    if (tfe_coll_agree(&d)) rc = interp_raise_tensor_error(I);
    else if (dist_barrier(err, sizeof err)) rc = interp_raise(I, "dist.barrier: %s", err);
    back_from_caller(I, c);
    return rc;
}

/* ---- leaves of a container ---------------------------------------------------------- */

typedef struct Leaves {
    tfe_tensor **t;
    int n, cap;
    uint64_t hash; /* the structure: kinds, lengths, field names, leaf dtypes and shapes */
    bool container;
} Leaves;

static void mix(uint64_t *h, uint64_t v) { *h = (*h ^ v) * 1099511628211ull; }
static void mix_str(uint64_t *h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) mix(h, (unsigned char)s[i]);
}

static bool is_container(Value v) { return v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD; }

/* path: where v is in the argument ("x", "x[1]", "x.w"), for errors */
/* Containers nest at most this deep in a collective's value: one that
 * contains itself would recurse without end (as in staged signatures,
 * stage/sig.c, the same bound). */
#define DIST_MAX_DEPTH 200

static int collect(Interp *I, const char *fn, Value v, Leaves *L, char *path, size_t len, size_t cap, int depth)
{
    if ((v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD) && depth >= DIST_MAX_DEPTH)
        return interp_raise(I, "%s: x nests tuples, lists or records more than %d deep (one that contains itself?) "
                               "at %.60s...; pass its tensors", fn, DIST_MAX_DEPTH, path);
    mix(&L->hash, v.kind);
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *s = (Seq *)v.u.o;
        mix(&L->hash, (uint64_t)s->n);
        for (int i = 0; i < s->n; i++) {
            int k = snprintf(path + len, cap - len, "[%d]", i);
            size_t nl = len + (size_t)k < cap ? len + (size_t)k : cap - 1;
            if (collect(I, fn, s->items[i], L, path, nl, cap, depth + 1)) return -1;
            path[len] = 0;
        }
        return 0;
    }
    if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        mix(&L->hash, (uint64_t)r->n);
        for (int i = 0; i < r->n; i++) {
            mix_str(&L->hash, r->keys[i]->s, r->keys[i]->len);
            int k = snprintf(path + len, cap - len, ".%s", r->keys[i]->s);
            size_t nl = len + (size_t)k < cap ? len + (size_t)k : cap - 1;
            if (collect(I, fn, r->vals[i], L, path, nl, cap, depth + 1)) return -1;
            path[len] = 0;
        }
        return 0;
    }
    tfe_tensor *t = v.kind == V_TENSOR || v.kind == V_SCALAR || v.kind == V_OBJECT ? value_to_tensor(v) : NULL;
    if (!t) {
        if (tfe_error_msg() && *tfe_error_msg()) return interp_raise_tensor_error(I);
        return interp_raise(I, "%s: %s is %s %s; only tensors and numbers (in tuples, lists and records) move "
                               "between ranks", fn, path, strchr("aeiou", value_kind_name(v)[0]) ? "an" : "a",
                            value_kind_name(v));
    }
    mix(&L->hash, t->dtype);
    mix(&L->hash, (uint64_t)t->rank);
    for (int i = 0; i < t->rank; i++) mix(&L->hash, (uint64_t)t->shape[i]);
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 8;
        L->t = xrealloc(L->t, sizeof *L->t * (size_t)L->cap);
    }
    L->t[L->n++] = t;
    return 0;
}

static void leaves_free(Leaves *L)
{
    for (int i = 0; i < L->n; i++)
        if (L->t[i]) tensor_decref(L->t[i]);
    free(L->t);
}

/* The container tmpl with its leaves replaced by res[*k...] (taken). */
static Value rebuild(Value tmpl, tfe_tensor **res, int *k)
{
    if (tmpl.kind == V_TUPLE || tmpl.kind == V_LIST) {
        Seq *s = (Seq *)tmpl.u.o, *o = seq_new(s->n);
        for (int i = 0; i < s->n; i++) seq_push_take(o, rebuild(s->items[i], res, k));
        return v_obj((ValueKind)tmpl.kind, o);
    }
    if (tmpl.kind == V_RECORD) {
        Record *r = (Record *)tmpl.u.o, *o = record_new();
        for (int i = 0; i < r->n; i++) record_set_take(o, r->keys[i]->s, r->keys[i]->len, rebuild(r->vals[i], res, k));
        return v_obj(V_RECORD, o);
    }
    tfe_tensor *t = res[(*k)++];
    return value_from_tensor_take(t);
}

/* ---- packing ------------------------------------------------------------------------ */

/* The temporaries of one packing, released together (tensor/op_scope.h's
 * scope holds 256; a container may have thousands of leaves). An op that
 * fails sets failed and gives NULL, which the helpers pass through. */
typedef struct Tmp { tfe_tensor **t; int n, cap; bool failed; } Tmp;

static tfe_tensor *keep(Tmp *s, tfe_tensor *t)
{
    if (!t) {
        s->failed = true;
        return NULL;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->t = xrealloc(s->t, sizeof *s->t * (size_t)s->cap);
    }
    return s->t[s->n++] = t;
}

static void tmp_release(Tmp *s)
{
    for (int i = 0; i < s->n; i++) tensor_decref(s->t[i]);
    free(s->t);
    *s = (Tmp){0};
}

static tfe_tensor *call(Tmp *s, tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at)
{
    for (int i = 0; i < nin; i++)
        if (!in[i]) return NULL;
    return keep(s, tfe_call1(op, nin, in, at));
}

enum { K_ALLREDUCE, K_BROADCAST, K_ALLGATHER };
static const tfe_op kind_op[] = {OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER};

static tfe_tensor *reshape_to(Tmp *s, tfe_tensor *x, int rank, const int64_t *shape)
{
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = rank;
    for (int i = 0; i < rank; i++) at.ints[i] = shape[i];
    return call(s, OP_RESHAPE, 1, &x, &at);
}

/* buf split along axis into the sections len[0..n) (at most 32 outputs an
 * op: more are split in runs of up to 32, then each run again); the parts
 * go to part[0..n), kept in s */
static int split_into(Tmp *s, tfe_tensor *buf, int axis, const int64_t *len, int n, tfe_tensor **part)
{
    if (!buf) return -1;
    if (n == 1) {
        part[0] = buf;
        return 0;
    }
    int per = n <= 32 ? 1 : (n + 31) / 32, runs = (n + per - 1) / per;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.axes[0] = axis;
    at.naxes = 1;
    at.nints = runs;
    for (int r = 0; r < runs; r++) {
        at.ints[r] = 0;
        for (int i = r * per; i < (r + 1) * per && i < n; i++) at.ints[r] += len[i];
    }
    tfe_tensor *outs[32];
    if (tfe_execute(OP_SPLIT, 1, &buf, &at, outs)) {
        s->failed = true;
        return -1;
    }
    int rc = 0;
    for (int r = 0; r < runs; r++) if (!keep(s, outs[r])) rc = -1;
    for (int r = 0; r < runs && !rc; r++) {
        int lo = r * per, cnt = (r + 1) * per < n ? per : n - lo;
        rc = split_into(s, outs[r], axis, len + lo, cnt, part + lo);
    }
    return rc;
}

/* The 1-D tensors xs[0..n) joined, by concats of at most 32 (the gradient
 * rule of a concat of n inputs makes n slices in one op scope, which holds
 * 256): runs of up to 32 first, then their results, as split_into does. */
static tfe_tensor *concat_tree(Tmp *s, tfe_tensor **xs, int n)
{
    tfe_attrs cat;
    tfe_attrs_init(&cat);
    cat.axes[0] = 0;
    cat.naxes = 1;
    if (n == 1) return xs[0];
    if (n <= 32) return call(s, OP_CONCAT, n, xs, &cat);
    int per = (n + 31) / 32, runs = (n + per - 1) / per;
    tfe_tensor *part[32];
    for (int r = 0; r < runs; r++) {
        int lo = r * per, cnt = (r + 1) * per < n ? per : n - lo;
        if (!(part[r] = concat_tree(s, xs + lo, cnt))) return NULL;
    }
    return call(s, OP_CONCAT, runs, part, &cat);
}

/* One collective over the leaves idx[0..n) of L (all one dtype): res[idx[i]]
 * gets leaf idx[i]'s result (a new reference). */
static int run_group(Tmp *s, int kind, int64_t arg, const Leaves *L, const int *idx, int n,
                     tfe_tensor **res)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 3;
    at.ints[0] = arg;
    at.ints[1] = n;
    at.ints[2] = L->container ? (int64_t)L->hash : 0;
    bool known = true;
    for (int i = 0; i < n; i++)
        for (int d = 0; d < L->t[idx[i]]->rank; d++) known &= L->t[idx[i]]->shape[d] >= 0;
    if (n == 1 || !known) { /* one leaf, or a relaxed trace's unknown sizes: one op each */
        for (int i = 0; i < n; i++) {
            at.ints[1] = 1;
            tfe_tensor *x = L->t[idx[i]];
            if (!(res[idx[i]] = tfe_call1(kind_op[kind], 1, &x, &at))) return -1;
        }
        return 0;
    }
    int64_t *len = xmalloc(sizeof *len * (size_t)n);
    tfe_tensor **flat = xmalloc(sizeof *flat * (size_t)n), **part = xcalloc((size_t)n, sizeof *part);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        len[i] = tensor_numel(L->t[idx[i]]);
        total += len[i];
        flat[i] = reshape_to(s, L->t[idx[i]], 1, &len[i]);
    }
    tfe_tensor *buf = s->failed ? NULL : concat_tree(s, flat, n);
    tfe_tensor *y = call(s, kind_op[kind], 1, &buf, &at);
    int axis = 0;
    if (kind == K_ALLGATHER && y) { /* (size * total,) as (size, total): one column run per leaf */
        int64_t sh[2] = {dist_size(), total};
        y = reshape_to(s, y, 2, sh);
        axis = 1;
    }
    int rc = split_into(s, y, axis, len, n, part);
    for (int i = 0; i < n && !rc; i++) {
        tfe_tensor *x = L->t[idx[i]];
        int64_t sh[TFE_MAX_RANK];
        int rank = x->rank;
        for (int d = 0; d < rank; d++) sh[d] = x->shape[d];
        if (kind == K_ALLGATHER) {
            if (rank == 0) sh[rank++] = dist_size();
            else sh[0] *= dist_size();
        }
        tfe_tensor *r = reshape_to(s, part[i], rank, sh);
        if (!r) { rc = -1; break; }
        tensor_incref(r);
        res[idx[i]] = r;
    }
    free(len);
    free(flat);
    free(part);
    return rc || s->failed ? -1 : 0;
}

/* The collective on every leaf of x: one op per dtype, in the order the
 * dtypes first appear among the leaves (the same on every rank that passed
 * the same structure; the first op's agreement catches any other). */
static int collective(Interp *I, int kind, const char *fn, Value x, int64_t arg, Value *out)
{
    Leaves L = {0};
    L.hash = 14695981039346656037ull;
    L.container = is_container(x);
    char path[256] = "x";
    tfe_error_clear();
    if (collect(I, fn, x, &L, path, 1, sizeof path, 0)) {
        leaves_free(&L);
        return -1;
    }
    if (L.n == 0) { /* nothing to move, but the other ranks may have leaves */
        tfe_coll_desc d = {.kind = (int32_t)kind_op[kind], .arg = (int32_t)arg, .nleaves = 0, .hash = (int64_t)L.hash};
        leaves_free(&L);
        if (tfe_coll_agree(&d)) return interp_raise_tensor_error(I);
        int k = 0;
        *out = rebuild(x, NULL, &k); /* a new container, as with leaves */
        return 0;
    }
    tfe_tensor **res = xcalloc((size_t)L.n + 1, sizeof *res);
    int *idx = xmalloc(sizeof *idx * (size_t)(L.n + 1));
    bool *done = xcalloc((size_t)L.n + 1, sizeof *done);
    int rc = 0;
    Tmp S = {0};
    for (int i = 0; i < L.n && !rc; i++) {
        if (done[i]) continue;
        int n = 0;
        for (int j = i; j < L.n; j++)
            if (!done[j] && L.t[j]->dtype == L.t[i]->dtype) {
                idx[n++] = j;
                done[j] = true;
            }
        rc = run_group(&S, kind, arg, &L, idx, n, res);
        tmp_release(&S);
    }
    if (rc) interp_raise_tensor_error(I);
    if (!rc) {
        int k = 0;
        *out = L.container ? rebuild(x, res, &k) : value_from_tensor_take(res[0]);
    } else {
        for (int i = 0; i < L.n; i++)
            if (res[i]) tensor_decref(res[i]);
    }
    free(res);
    free(idx);
    free(done);
    leaves_free(&L);
    return rc;
}

static int native_allreduce(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
                            Value *out)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "dist.allreduce", "x, op=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    static const char *const names[] = {"sum", "mean", "max", "min"};
    int64_t red = 0;
    if (p[1] && a[1].kind != V_NIL) {
        const char *op;
        if (a[1].kind != V_STR) return arg_error(I, "dist.allreduce", "op", "\"sum\", \"mean\", \"max\" or \"min\"", a[1]);
        op = ((Str *)a[1].u.o)->s;
        for (red = 0; red < 4 && strcmp(op, names[red]); red++) {}
        if (red == 4)
            return interp_raise(I, "dist.allreduce: op must be \"sum\", \"mean\", \"max\" or \"min\", got \"%s\"", op);
    }
    return collective(I, K_ALLREDUCE, "dist.allreduce", a[0], red, out);
}

static int native_broadcast(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
                            Value *out)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "dist.broadcast", "x, root=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    int64_t root = 0;
    if (p[1] && a[1].kind != V_NIL && arg_int(I, "dist.broadcast", "root", a[1], &root)) return -1;
    if (root < -1 || root > INT32_MAX) root = -1; /* not a rank: the kernel says so, on every rank */
    return collective(I, K_BROADCAST, "dist.broadcast", a[0], root, out);
}

static int native_allgather(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
                            Value *out)
{
    Value a[1];
    bool p[1];
    if (args_parse(I, "dist.allgather", "x", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    return collective(I, K_ALLGATHER, "dist.allgather", a[0], 0, out);
}

BUILTIN(bi_dist_allreduce)
{
    (void)data;
    Caller c = at_caller(I, "allreduce");
    int rc = native_allreduce(I, argc, argv, nkw, kwnames, kwvals, out);
    back_from_caller(I, c);
    return rc;
}

BUILTIN(bi_dist_broadcast)
{
    (void)data;
    Caller c = at_caller(I, "broadcast");
    int rc = native_broadcast(I, argc, argv, nkw, kwnames, kwvals, out);
    back_from_caller(I, c);
    return rc;
}

BUILTIN(bi_dist_allgather)
{
    (void)data;
    Caller c = at_caller(I, "allgather");
    int rc = native_allgather(I, argc, argv, nkw, kwnames, kwvals, out);
    back_from_caller(I, c);
    return rc;
}

void builtins_dist_register(Interp *I)
{
    interp_define_builtin(I, "_dist_rank", bi_dist_rank, NULL);
    interp_define_builtin(I, "_dist_size", bi_dist_size, NULL);
    interp_define_builtin_flags(I, "_dist_barrier", bi_dist_barrier, NULL, BF_EFFECT, NULL);
    interp_define_builtin(I, "_dist_allreduce", bi_dist_allreduce, NULL);
    interp_define_builtin(I, "_dist_broadcast", bi_dist_broadcast, NULL);
    interp_define_builtin(I, "_dist_allgather", bi_dist_allgather, NULL);
}
