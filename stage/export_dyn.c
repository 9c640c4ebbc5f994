/* export_dyn.c — export's dynamic= dims: which dims of which argument leaves
 * (a tuple's leaves too) are symbolic, the call that traces f with them
 * doubled, and the graph for any size made of the two traces when they
 * differ only in sizes and in slices' bounds (docs/export.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/internal.h"
#include "stage/export_dyn.h"
#include "util/xalloc.h"

/* How many argument leaves v holds (sig_flatten's count for an argument:
 * numbers inside a container are part of the signature, not leaves). */
static int nleaves(Value v, int depth)
{
    switch ((int)v.kind) {
    case V_TENSOR: return 1;
    case V_SCALAR: return depth == 0 && v.dtype != TFE_BOOL && !v.lit;
    case V_TUPLE: case V_LIST: {
        Seq *q = (Seq *)v.u.o;
        int n = 0;
        for (int i = 0; i < q->n; i++) n += nleaves(q->items[i], depth + 1);
        return n;
    }
    case V_RECORD: {
        Record *r = (Record *)v.u.o;
        int n = 0;
        for (int i = 0; i < r->n; i++) n += nleaves(r->vals[i], depth + 1);
        return n;
    }
    default: return 0;
    }
}

static char **dims_of(char ***dims, int leaf)
{
    if (!dims[leaf]) dims[leaf] = xcalloc(TFE_MAX_RANK, sizeof **dims);
    return dims[leaf];
}

/* spec for the value v whose first leaf is *leaf: a string (dim 0 of every
 * tensor leaf in v), nil (none), a tuple of dim names (a tensor) or of specs
 * (a tuple or list), a record of specs (a record). what: "dynamic.xs[1]". */
static int apply_spec(Interp *I, const char *what, Value v, Value spec, int depth, int *leaf, char ***dims)
{
    char sub[200];
    if (spec.kind == V_NIL) {
        *leaf += nleaves(v, depth);
        return 0;
    }
    if (spec.kind == V_STR && !((Str *)spec.u.o)->s[0])
        return interp_raise(I, "export(): %s is \"\": a dim needs a name (\"batch\"), or nil for a fixed one", what);
    if (spec.kind == V_STR) {
        /* every tensor leaf of rank >= 1; numbers and 0-d tensors have no dim 0 */
        if (v.kind == V_TENSOR) {
            if (v.u.t->rank > 0) {
                char **d = dims_of(dims, *leaf);
                free(d[0]);
                d[0] = xstrdup(((Str *)spec.u.o)->s);
            }
            (*leaf)++;
            return 0;
        }
        if (v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD) {
            Value *it = v.kind == V_RECORD ? ((Record *)v.u.o)->vals : ((Seq *)v.u.o)->items;
            int cnt = v.kind == V_RECORD ? ((Record *)v.u.o)->n : ((Seq *)v.u.o)->n;
            for (int i = 0; i < cnt; i++)
                if (apply_spec(I, what, it[i], spec, depth + 1, leaf, dims)) return -1;
            return 0;
        }
        *leaf += nleaves(v, depth);
        return 0;
    }
    if (v.kind == V_TENSOR) {
        int rank = v.u.t->rank;
        if (spec.kind != V_TUPLE && spec.kind != V_LIST)
            return interp_raise(I, "export(): %s must be a tuple of dim names (a string or nil per dim) or one name "
                                "(dim 0), got %s", what, value_kind_name(spec));
        Seq *s = (Seq *)spec.u.o;
        if (s->n != rank)
            return interp_raise(I, "export(): %s names %d dims, but '%s' has %d", what, s->n, what + strlen("dynamic."),
                                rank);
        for (int d = 0; d < rank; d++) {
            if (s->items[d].kind == V_NIL) continue;
            if (s->items[d].kind != V_STR || !((Str *)s->items[d].u.o)->s[0])
                return interp_raise(I, "export(): %s[%d] must be a dim name (a string, not \"\") or nil, got %s", what,
                                    d, s->items[d].kind == V_STR ? "\"\"" : value_kind_name(s->items[d]));
            char **dd = dims_of(dims, *leaf);
            free(dd[d]);
            dd[d] = xstrdup(((Str *)s->items[d].u.o)->s);
        }
        (*leaf)++;
        return 0;
    }
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        if (spec.kind != V_TUPLE && spec.kind != V_LIST)
            return interp_raise(I, "export(): %s is for a %s of %d: a tuple of one spec per element (a tuple of dim "
                                "names, nil, or one name for dim 0), or one name, got %s",
                                what, value_kind_name(v), q->n, value_kind_name(spec));
        Seq *s = (Seq *)spec.u.o;
        if (s->n != q->n)
            return interp_raise(I, "export(): %s has %d specs for a %s of %d elements", what, s->n,
                                value_kind_name(v), q->n);
        for (int i = 0; i < q->n; i++) {
            snprintf(sub, sizeof sub, "%.150s[%d]", what, i);
            if (apply_spec(I, sub, q->items[i], s->items[i], depth + 1, leaf, dims)) return -1;
        }
        return 0;
    }
    if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        if (spec.kind != V_RECORD)
            return interp_raise(I, "export(): %s is for a record: a record of specs per field, or one name, got %s",
                                what, value_kind_name(spec));
        Record *s = (Record *)spec.u.o;
        for (int k = 0; k < s->n; k++)
            if (!record_get(r, s->keys[k]->s, s->keys[k]->len))
                return interp_raise(I, "export(): %s names the field '%s', which the record has not", what,
                                    s->keys[k]->s);
        for (int i = 0; i < r->n; i++) {
            Value *f = record_get(s, r->keys[i]->s, r->keys[i]->len);
            snprintf(sub, sizeof sub, "%.150s.%.40s", what, r->keys[i]->s);
            if (apply_spec(I, sub, r->vals[i], f ? *f : v_nil(), depth + 1, leaf, dims)) return -1;
        }
        return 0;
    }
    return interp_raise(I, "export(): %s names dims of %s, which holds no tensor", what, value_kind_name(v));
}

int ex_parse_dynamic(Interp *I, Value dyn, const FnInfo *info, int argc, const Value *argv, char ***dims)
{
    int leaf = 0;
    for (int i = 0; i < argc; i++) {
        const char *pname = i < info->nparams ? info->param_names[i] : "?";
        Value spec = v_nil();
        if (dyn.kind == V_STR) {
            spec = dyn;
        } else {
            Value *p = record_get((Record *)dyn.u.o, pname, strlen(pname));
            if (p) spec = *p;
        }
        char what[200];
        snprintf(what, sizeof what, "dynamic.%s", pname);
        if (spec.kind != V_NIL && dyn.kind != V_STR && argv[i].kind != V_TENSOR && argv[i].kind != V_TUPLE &&
            argv[i].kind != V_LIST && argv[i].kind != V_RECORD)
            return interp_raise(I, "export(): dynamic names dims of '%s', which is not a tensor", pname);
        if (apply_spec(I, what, argv[i], spec, 0, &leaf, dims)) return -1;
    }
    if (dyn.kind == V_RECORD) {
        Record *r = (Record *)dyn.u.o;
        for (int k = 0; k < r->n; k++) {
            bool found = false;
            for (int i = 0; i < info->nparams && i < argc; i++) found |= !strcmp(info->param_names[i], r->keys[k]->s);
            if (!found) return interp_raise(I, "export(): dynamic names '%s', which is not a parameter given", r->keys[k]->s);
        }
    }
    return 0;
}

/* v with each leaf that has named dims doubled along them (its values
 * repeated, so indices stay in range); containers copied around them. */
static Value doubled(Interp *I, Value v, int depth, int *leaf, char ***dims, int *rc)
{
    if (v.kind == V_TENSOR) {
        char **d = dims[(*leaf)++];
        tfe_tensor *t = v.u.t;
        tensor_incref(t);
        for (int k = 0; d && k < t->rank && !*rc; k++) {
            if (!d[k]) continue;
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.axes[0] = k;
            tfe_tensor *in[2] = {t, t}, *o = NULL;
            if (tfe_execute_eager(OP_CONCAT, 2, in, &at, &o)) {
                *rc = interp_raise_tensor_error(I);
                break;
            }
            tensor_decref(t);
            t = o;
        }
        return v_tensor_take(t);
    }
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o, *n = seq_new(q->n);
        for (int i = 0; i < q->n; i++) seq_push_take(n, doubled(I, q->items[i], depth + 1, leaf, dims, rc));
        n->h.kind = q->h.kind;
        return v_obj((ValueKind)v.kind, n);
    }
    if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o, *n = record_new();
        for (int i = 0; i < r->n; i++)
            record_set_take(n, r->keys[i]->s, r->keys[i]->len, doubled(I, r->vals[i], depth + 1, leaf, dims, rc));
        return v_obj(V_RECORD, n);
    }
    *leaf += nleaves(v, depth);
    value_incref(v);
    return v;
}

int ex_retrace_doubled(Interp *I, Value f, int argc, const Value *argv, char ***dims, Value *dargs)
{
    int rc = 0, leaf = 0;
    for (int i = 0; i < argc; i++) dargs[i] = doubled(I, argv[i], 0, &leaf, dims, &rc);
    Value r;
    if (!rc) rc = call_value(I, f, argc, dargs, 0, NULL, NULL, &r);
    if (!rc) value_decref(r);
    return rc;
}

/* --- two traces made one ----------------------------------------------------------------- */

/* How many elements start:stop:step picks (bounds within the dim). */
static int64_t picks(int64_t s, int64_t e, int64_t p)
{
    int64_t n = p > 0 ? (e - s + p - 1) / p : (s - e + (-p) - 1) / (-p);
    return n > 0 ? n : 0;
}

/* ONNX Slice's reading of a start (or an end) v on a dim of size n. */
static int64_t onnx_bound(int64_t v, int64_t n, int64_t p, bool start)
{
    if (v < 0) v = v < -n ? -1 - n : v + n; /* (INT64_MIN and other far ones: before the first) */
    int64_t lo = p > 0 ? 0 : start ? 0 : -1, hi = p > 0 ? n : n - 1;
    return v < lo ? lo : v > hi ? hi : v;
}

/* Does ONNX's Slice with (S, E, p) pick at size n what tfe's s:e:p does? */
static bool same_picks(int64_t S, int64_t E, int64_t p, int64_t n, int64_t s, int64_t e)
{
    int64_t os = onnx_bound(S, n, p, true), c1 = picks(os, onnx_bound(E, n, p, false), p), c2 = picks(s, e, p);
    return c1 == c2 && (c1 == 0 || os == s);
}

/* The ONNX start and end of one dim that pick what tfe's bounds (s1, e1) at
 * size n1 and (s2, e2) at size n2 pick: a number, a negative one (from the
 * end) or INT64_MAX / INT64_MIN (to the end): the forms an index in x[a:b]
 * takes. false when none does both (a bound computed from the size). */
static bool bounds_for(int64_t n1, int64_t s1, int64_t e1, int64_t n2, int64_t s2, int64_t e2, int64_t p,
                       int64_t *S, int64_t *E)
{
    int64_t ends[] = {p > 0 ? INT64_MAX : INT64_MIN, e1 - n1, e1, e2, e2 - n2};
    int64_t starts[] = {s1, s1 - n1, s2, s2 - n2, p > 0 ? INT64_MAX : INT64_MIN};
    for (size_t i = 0; i < sizeof starts / sizeof *starts; i++)
        for (size_t j = 0; j < sizeof ends / sizeof *ends; j++) {
            /* a plain number is never negative (that reads from the end), a
             * count from the end always is */
            if ((i == 0 && s1 < 0) || (i == 2 && s2 < 0) || (j == 2 && e1 < 0) || (j == 3 && e2 < 0)) continue;
            if ((i == 1 && s1 - n1 >= 0) || (i == 3 && s2 - n2 >= 0) || (j == 1 && e1 - n1 >= 0) ||
                (j == 4 && e2 - n2 >= 0))
                continue;
            if (same_picks(starts[i], ends[j], p, n1, s1, e1) && same_picks(starts[i], ends[j], p, n2, s2, e2)) {
                *S = starts[i];
                *E = ends[j];
                return true;
            }
        }
    return false;
}

static bool both_slices(const GNode *a, const GNode *b)
{
    return a->kind == G_OP && b->kind == G_OP && a->op == OP_SLICE && b->op == OP_SLICE && a->at && b->at;
}

Graph *ex_merge_traces(const Graph *g1, Graph *g2, int64_t ***slice_se, int *bad)
{
    *bad = -1;
    *slice_se = NULL;
    if (g1->n != g2->n) return NULL;
    /* the same graph but for dims, once the slices' bounds are set aside */
    tfe_attrs *saved = xcalloc((size_t)g2->n + 1, sizeof *saved);
    for (int i = 0; i < g2->n; i++)
        if (both_slices(&g1->nodes[i], &g2->nodes[i])) {
            saved[i] = *g2->nodes[i].at;
            mem_copy(g2->nodes[i].at->ints, g1->nodes[i].at->ints, sizeof g2->nodes[i].at->ints);
        }
    bool same = graph_same_but_dims(g1, g2);
    for (int i = 0; i < g2->n; i++)
        if (both_slices(&g1->nodes[i], &g2->nodes[i])) *g2->nodes[i].at = saved[i];
    free(saved);
    if (!same) return NULL;
    Graph *m = graph_clone(g1);
    int64_t **se = xcalloc((size_t)m->n + 1, sizeof *se);
    for (int i = 0; i < m->n; i++) {
        GNode *n = &m->nodes[i];
        const GNode *b = &g2->nodes[i];
        for (int k = 0; k < n->nout; k++)
            for (int d = 0; d < n->meta[k].rank; d++)
                if (n->meta[k].shape[d] != b->meta[k].shape[d]) n->meta[k].shape[d] = -1;
        if (n->kind != G_OP || n->op != OP_SLICE || *bad >= 0) continue;
        const tfe_meta *x1 = &g1->nodes[n->in[0].node].meta[n->in[0].out];
        const tfe_meta *x2 = &g2->nodes[n->in[0].node].meta[n->in[0].out];
        const int64_t *a1 = g1->nodes[i].at->ints, *a2 = b->at->ints;
        bool differs = false;
        for (int d = 0; d < x1->rank; d++) differs |= x1->shape[d] != x2->shape[d];
        if (!differs) continue;
        se[i] = xcalloc(2 * TFE_MAX_RANK, sizeof **se);
        for (int d = 0; d < x1->rank && *bad < 0; d++) {
            int64_t s1 = a1[3 * d], e1 = a1[3 * d + 1], p = a1[3 * d + 2];
            if (x1->shape[d] == x2->shape[d] || x1->shape[d] < 0 || x2->shape[d] < 0) {
                /* a dim of one size (or unknown in both): the bounds of the trace */
                if (s1 != a2[3 * d] || e1 != a2[3 * d + 1] || p != a2[3 * d + 2]) *bad = i;
                se[i][d] = s1;
                se[i][TFE_MAX_RANK + d] = p < 0 && e1 < 0 ? INT64_MIN : e1;
                continue;
            }
            if (p != a2[3 * d + 2] ||
                !bounds_for(x1->shape[d], s1, e1, x2->shape[d], a2[3 * d], a2[3 * d + 1], p, &se[i][d],
                            &se[i][TFE_MAX_RANK + d]))
                *bad = i;
        }
    }
    if (*bad >= 0) {
        ex_free_slices(se, m->n);
        graph_decref(m);
        return NULL;
    }
    *slice_se = se;
    return m;
}

void ex_free_slices(int64_t **se, int n)
{
    for (int i = 0; se && i < n; i++) free(se[i]);
    free(se);
}

/* --- the sizes a dynamic model declares ----------------------------------------------------- */

static bool has_unknown(const tfe_meta *m)
{
    for (int d = 0; d < m->rank; d++)
        if (m->shape[d] < 0) return true;
    return false;
}

static void all_unknown(tfe_meta *m)
{
    for (int d = 0; d < m->rank; d++) m->shape[d] = -1;
}

/* A slice of an unknown dim picks as many as its bounds clamp to at the
 * run's size (x[:3] of 2 rows is 2 rows, x[4::-1] too): unknown, whatever
 * the traces picked. (Indexed axes, at->axes, are dropped from the result.) */
static void slice_meta(const tfe_meta *x, const tfe_attrs *at, tfe_meta *m)
{
    unsigned drop = 0;
    for (int i = 0; i < at->naxes; i++) {
        int a = at->axes[i] < 0 ? at->axes[i] + x->rank : at->axes[i];
        if (a >= 0 && a < x->rank) drop |= 1u << a;
    }
    for (int k = 0, j = 0; k < x->rank && j < m->rank; k++)
        if (!(drop & (1u << k))) {
            if (x->shape[k] < 0) m->shape[j] = -1;
            j++;
        }
}

/* Output k > 0 of an op of several outputs whose inputs have unknown dims
 * (output 0 is its infer rule's): split's sections keep their sizes along
 * the axis and take the others from x; batch_norm_train's mean and variance
 * are x's channels (its last dim); any other's dims are left unknown. */
static void other_output_meta(const GNode *n, const tfe_meta *x, int k, tfe_meta *m)
{
    if (n->op == OP_SPLIT && m->rank == x->rank) {
        int axis = n->at->axes[0] < 0 ? n->at->axes[0] + x->rank : n->at->axes[0];
        for (int d = 0; d < m->rank; d++)
            if (d != axis) m->shape[d] = x->shape[d];
        if (axis >= 0 && axis < m->rank && k < n->at->nints) m->shape[axis] = n->at->ints[k];
    } else if (n->op == OP_BATCH_NORM_TRAIN && m->rank == 1 && x->rank >= 1) {
        m->shape[0] = x->shape[x->rank - 1];
    } else {
        all_unknown(m);
    }
}

void ex_dyn_metas(Graph *g, bool dynamic)
{
    GRegion *top = &g->regions[0];
    for (int i = 0; i < top->n; i++) {
        GNode *n = &g->nodes[top->nodes[i]];
        if (n->kind == G_COND || n->kind == G_WHILE) {
            /* made at the doubled trace's size (emit_region leaves them unsaid) */
            for (int k = 0; dynamic && k < n->nout; k++) all_unknown(&n->meta[k]);
            continue;
        }
        if (n->kind != G_OP || n->nout < 1) continue;
        bool unknown = false;
        for (int k = 0; k < n->nin; k++) unknown |= has_unknown(&g->nodes[n->in[k].node].meta[n->in[k].out]);
        if (!unknown) continue;
        const tfe_meta *x = n->nin ? &g->nodes[n->in[0].node].meta[n->in[0].out] : NULL;
        if (n->op == OP_SLICE && x && n->at) {
            slice_meta(x, n->at, &n->meta[0]);
            continue;
        }
        /* output 0 by the op's infer rule on the inputs' (unknown) dims; a
         * dim it leaves unknown or that differs from the trace's is unknown,
         * and all of them when the rule cannot work with unknown dims */
        bool ok = n->nin <= 16;
        tfe_tensor *in[16];
        for (int k = 0; ok && k < n->nin; k++) {
            const tfe_meta *m = &g->nodes[n->in[k].node].meta[n->in[k].out];
            in[k] = tensor_symbolic(m->dtype, m->weak, m->rank, m->shape);
        }
        tfe_meta out;
        tfe_tensor *o[32];
        const tfe_opcall c = {.op = n->op, .nin = n->nin, .nout = n->nout, .in = in, .at = n->at, .out = o};
        ok = ok && tfe_ops[n->op].infer(&c, &out) == 0 && out.rank == n->meta[0].rank;
        tfe_error_clear();
        for (int k = 0; n->nin <= 16 && k < n->nin; k++) tensor_decref(in[k]);
        tfe_meta *m0 = &n->meta[0];
        for (int d = 0; d < m0->rank; d++)
            if (!ok || out.shape[d] < 0 || out.shape[d] != m0->shape[d]) m0->shape[d] = -1;
        for (int k = 1; k < n->nout; k++) other_output_meta(n, x, k, &n->meta[k]);
    }
}
