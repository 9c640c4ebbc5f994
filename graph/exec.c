/* exec.c — running a graph: the node walker (each node in its region's
 * order, ops through tfe_execute_eager, host calls and variable reads back
 * into the host (graph/host.h), conds and whiles by running their regions), and the
 * planned run of a cached call (grun_plan: the top region's flat instruction
 * list, graph/plan.h, with kernels called directly into the arena). */
#include <stdlib.h>
#include <string.h>
#include "graph/exec.h"
#include "graph/exec_dist.h"
#include "graph/host.h"
#include "tensor/device.h"
#include "tensor/fused.h"
#include "tensor/profile.h"
#include "tensor/kernels.h"
#include "graph/plan.h"
#include "util/xalloc.h"

void grun_init(GRun *x, void *host, Graph *g, tfe_tensor *const *inputs)
{
    x->host = host;
    x->g = g;
    x->draws = NULL;
    x->ran = NULL;
    x->plan = NULL;
    x->coll = NULL;
    x->nops = 0;
    x->keep = false;
    x->logreads = false;
    x->log = NULL;
    x->lognode = NULL;
    x->nlog = x->caplog = 0;
    x->frame_base = graph_host.frame_depth ? graph_host.frame_depth(host) : 0;
    if (!g->busy) { /* the graph's own array: no allocation per call */
        if (g->scratch_cap < g->nvals + 1) { /* a graph still being traced grows */
            free(g->scratch);
            g->scratch_cap = g->nvals + 1;
            g->scratch = xcalloc((size_t)g->scratch_cap, sizeof *g->scratch);
        } else {
            memset(g->scratch, 0, sizeof *g->scratch * (size_t)g->nvals);
        }
        x->v = g->scratch;
        g->busy = true;
    } else {
        x->v = xcalloc((size_t)(g->nvals ? g->nvals : 1), sizeof *x->v);
    }
    for (int i = 0; i < g->n; i++) {
        GNode *n = &g->nodes[i];
        tfe_tensor *t = n->kind == G_INPUT ? (inputs ? inputs[n->input_index] : NULL)
                      : n->kind == G_CONST ? n->value : NULL;
        if (t) {
            tensor_incref(t);
            x->v[n->vbase] = t;
        }
    }
}

void grun_release(GRun *x)
{
    if (x->coll) grun_coll_end(x); /* before the values go: MPI may still write a buffer */
    for (int i = 0; i < x->nlog; i++) tensor_decref(x->log[i]);
    free(x->log);
    free(x->lognode);
    x->log = NULL;
    x->lognode = NULL;
    x->nlog = x->caplog = 0;
    if (!x->v) return;
    for (int i = 0; i < x->g->nvals; i++)
        if (x->v[i]) tensor_decref(x->v[i]);
    if (x->v == x->g->scratch) x->g->busy = false;
    else free(x->v);
    x->v = NULL;
    free(x->draws);
    x->draws = NULL;
    free(x->ran);
    x->ran = NULL;
    if (x->plan) x->plan->busy = false;
    x->plan = NULL;
}

void grun_use_plan(GRun *x)
{
    ExecPlan *p = x->g->plan;
    if (p && !p->busy) {
        p->busy = true;
        x->plan = p;
    }
}

void grun_set(GRun *x, int slot, tfe_tensor *t)
{
    if (x->v[slot]) tensor_decref(x->v[slot]);
    x->v[slot] = t;
}

/* An error at node n, raised by the host with the frames an eager run would
 * have there; without a host, the tensor error is the message. */
static int node_error(GRun *x, const GNode *n, const char *msg)
{
    msg = msg && *msg ? msg : "operation failed";
    if (graph_host.node_error) return graph_host.node_error(x, n, msg);
    if (msg != tfe_error_msg()) tfe_error_set("%s", msg); /* (it is often the tensor error itself) */
    return -1;
}

/* A fused group's name for the profiler: "fused(mul,add,exp)", its ops in
 * program order (interned: the table groups by it). */
static const char *fused_name(const tfe_fprog *pg)
{
    char b[512];
    size_t k = (size_t)snprintf(b, sizeof b, "fused(");
    bool first = true;
    for (int i = 0; i < pg->ninstr && k < sizeof b - 40; i++) {
        int op = pg->code[i].op;
        if (op == FOP_LOAD || op == FOP_CONST) continue;
        k += (size_t)snprintf(b + k, sizeof b - k, "%s%s", first ? "" : ",", tfe_fop_name(op));
        first = false;
    }
    if (pg->red) k += (size_t)snprintf(b + k, sizeof b - k, "%s%s", first ? "" : ",", pg->red == TFE_FRED_SUM ? "sum" : "mean");
    snprintf(b + k, sizeof b - k, ")");
    return prof_intern(b);
}

/* What the profiler calls a node run by the planned executor. */
static const char *node_name(const GNode *n)
{
    switch (n->kind) {
    case G_OP: return tfe_ops[n->op].name;
    case G_FUSED: return fused_name(n->prog);
    case G_HOST: return "host call";
    case G_VAR_READ: return "variable read";
    case G_COND: return "cond";
    case G_WHILE: return "while";
    case G_INPUT: case G_CONST: case G_PARAM: return "value";
    }
    return "node";
}

/* The provenance (tfe_tensor.prov) of outputs made here rather than by
 * tfe_execute (a planned kernel, a fused program): what eager code's ops
 * would give them. Set, not or'ed: an arena view serves every run. */
static bool is_input(tfe_tensor *t, int nin, tfe_tensor *const *in)
{
    for (int i = 0; i < nin; i++)
        if (in[i] == t) return true;
    return false;
}

static void prov_set_slow(tfe_op op, int nin, tfe_tensor *const *in, int nout, tfe_tensor *const *out)
{
    tfe_prov_collect();
    uint64_t m = 0;
    for (int i = 0; i < nin && !(tfe_ops[op].flags & F_NODIFF); i++) m = tfe_prov_union(m, in[i]->prov);
    for (int k = 0; k < nout; k++)
        if (out[k] && out[k]->prov != m && !is_input(out[k], nin, in))
            tfe_prov_assign(&out[k]->prov, dtype_is_float(out[k]->dtype) ? m : 0);
}

static inline void prov_set(tfe_op op, int nin, tfe_tensor *const *in, int nout, tfe_tensor *const *out)
{
    /* (one or two inputs and one output most often: no loop set-up for those) */
    /* (an or of handles: only whether any is not 0) */
    uint64_t m = nin > 0 ? in[0]->prov : 0, o = nout > 0 && out[0] ? out[0]->prov : 0;
    if (nin > 1) m |= in[1]->prov;
    for (int i = 2; i < nin; i++) m |= in[i]->prov;
    for (int k = 1; k < nout; k++) o |= out[k] ? out[k]->prov : 0;
    if (__builtin_expect(m | o, 0)) prov_set_slow(op, nin, in, nout, out); /* (most often 0 and 0) */
    /* (a planned softmax's arena view serves this node only: it stays marked) */
    if ((op == OP_SOFTMAX || op == OP_SIGMOID) && nout > 0 && out[0]) tfe_mark_prob_out(op, out[0]);
}

/* ... of a fused node's output: from the inputs its result is computed
 * from through instructions with a gradient (found at the first run that
 * needs it, GNode.prov_reach); nothing to do where no input carries any */
static void prov_set_fused(GNode *n, int nin, tfe_tensor *const *in, tfe_tensor *out)
{
    uint64_t any = 0, m = 0;
    for (int i = 0; i < nin; i++) any |= in[i]->prov;
    if (any && !n->prov_known) {
        const tfe_fprog *pg = n->prog;
        uint64_t r[64] = {0};
        n->prov_reach = ~(uint64_t)0; /* (a program too large to follow: every input) */
        if (pg->nregs <= 64 && pg->ninputs <= 64) {
            for (int i = 0; i < pg->ninstr; i++) {
                const tfe_finstr *f = &pg->code[i];
                uint64_t v = 0;
                if (f->op == FOP_LOAD) v = (uint64_t)1 << f->input;
                else if (f->op < TFE_NOPS && !(tfe_ops[f->op].flags & F_NODIFF))
                    v = r[f->a] | (tfe_ops[f->op].nin == 2 ? r[f->b] : 0);
                r[f->dst] = v;
            }
            n->prov_reach = r[pg->result];
        }
        n->prov_known = true;
    }
    if (any) tfe_prov_collect();
    for (int i = 0; any && i < nin; i++)
        if (i >= 64 || ((n->prov_reach >> i) & 1)) m = tfe_prov_union(m, in[i]->prov);
    if (out && out->prov != m && !is_input(out, nin, in)) tfe_prov_assign(&out->prov, m);
    /* a program whose result is a sigmoid's: its output is marked, as the
     * op's would be (tfe_tensor.sigmoid_out) */
    if (!n->sig_known) {
        const tfe_fprog *pg = n->prog;
        for (int i = pg->ninstr - 1; i >= 0; i--)
            if (pg->code[i].dst == pg->result) {
                n->sig_result = pg->code[i].op == OP_SIGMOID && pg->red == TFE_FRED_NONE;
                break;
            }
        n->sig_known = true;
    }
    if (n->sig_result && out && !is_input(out, nin, in)) out->sigmoid_out = true;
}

/* A fused node's kernel: its program checked once, at the first run. */
static tfe_fkernel *fused_kernel(GNode *n)
{
    if (!n->fkernel) n->fkernel = tfe_fused_compile(n->prog);
    return n->fkernel;
}

static int run_op(GRun *x, GNode *n)
{
    tfe_tensor *inb[16] = {NULL}, **in = n->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)n->nin);
    for (int i = 0; i < n->nin; i++) in[i] = grun_value(x, n->in[i]);
    const tfe_attrs *at = n->at;
    tfe_attrs rat;
    int rc = 0;
    if ((tfe_ops[n->op].flags & F_RANDOM) && (n->at->from_stream || n->at_from >= 0)) {
        rat = *n->at;
        int id = (int)(n - x->g->nodes);
        if (n->at_from >= 0 && x->draws && x->draws[n->at_from].from_stream) {
            rat.seed = x->draws[n->at_from].seed; /* the replay of an earlier draw */
            rat.counter = x->draws[n->at_from].counter;
            rat.from_stream = true;
        } else if (!n->at->from_stream) {
            /* a replay (stage/grad.c) whose draw did not run in this run
             * (the tracing call runs it alone): the draw it was made for */
        } else { /* a fresh draw at every run: the counter block of this call */
            tfe_meta m;
            tfe_tensor *dummy[32];
            const tfe_opcall c = {.op = n->op, .nin = n->nin, .nout = n->nout, .in = in, .at = &rat, .out = dummy};
            if (tfe_ops[n->op].infer(&c, &m)) rc = -1;
            else tfe_random_next(&rat, (uint64_t)shape_numel(m.rank, m.shape));
        }
        if (!x->draws) x->draws = xcalloc((size_t)x->g->n + 1, sizeof *x->draws);
        x->draws[id] = rat;
        at = &rat;
    }
    tfe_tensor *out[32];
    tfe_tensor *planned = NULL;
    if (!rc && x->plan && x->plan->offset[n->vbase] >= 0) {
        /* its place in the arena, when the result has the planned type and
         * shape (a relaxed graph or a host call's result can change shapes:
         * then it is computed the ordinary way) */
        tfe_meta m;
        tfe_tensor *dummy[32];
        const tfe_opcall ci = {.op = n->op, .nin = n->nin, .nout = 1, .in = in, .at = at, .out = dummy};
        if (tfe_ops[n->op].infer(&ci, &m) == 0 && meta_same_shape(&m, &n->meta[0]))
            planned = exec_plan_tensor(x->plan, n->vbase, &n->meta[0]);
        tfe_error_clear();
    }
    if (planned) {
        /* outputs 1.. (an op of several): made by the kernel, as eager
         * code does (only output 0's shape is checked here) */
        out[0] = planned;
        for (int k = 1; k < n->nout; k++) out[k] = NULL;
        const tfe_opcall c = {.op = n->op, .nin = n->nin, .nout = n->nout, .in = in, .at = at, .out = out};
        if (tfe_ops[n->op].cpu_kernel(&c)) {
            tensor_decref(planned);
            rc = -1;
        }
    } else if (!rc) {
        rc = tfe_execute_eager(n->op, n->nin, in, at, out);
    }
    if (!rc) prov_set(n->op, n->nin, in, n->nout, out);
    if (in != inb) free(in);
    if (rc) return node_error(x, n, tfe_error_msg());
    for (int k = 0; k < n->nout; k++) grun_set(x, n->vbase + k, out[k]);
    return 0;
}

/* $TFE_GPU_FUSED_PTX_CHECK (tests/gpu_fused_ptx.sh): 1 compiles every fused
 * program run here to PTX with NVRTC (no GPU needed), "source" also shows its
 * CUDA C; 0 when unset. Read once. */
static int ptx_check_mode(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("TFE_GPU_FUSED_PTX_CHECK");
        mode = !e || !*e || !strcmp(e, "0") ? 0 : !strcmp(e, "source") ? 2 : 1;
    }
    return mode;
}

/* The GPU a fused group runs on: the device of its inputs when all but 0-d
 * cpu:0 values are on one GPU; 0 (the CPU) otherwise. */
static int fused_device(tfe_tensor *const *in, int nin)
{
    int dev = 0;
    for (int i = 0; i < nin; i++) {
        int d = in[i]->storage ? in[i]->storage->device : 0;
        if (d == 0 && in[i]->rank == 0) continue;
        if (d == 0 || (dev && d != dev)) return 0;
        dev = d;
    }
    return dev;
}

/* A fused group: one output, shaped by broadcasting its inputs (the result
 * of elementwise ops is exactly that; the traced shape may be stale in a
 * relaxed graph or after a host call) and, with a final reduction, dropping
 * (or keeping as 1) its reduced trailing axes; one loop over the data. */
static int run_fused_timed(GRun *x, GNode *n);
static int run_fused(GRun *x, GNode *n)
{
    if (!prof_hooked) return run_fused_timed(x, n);
    int64_t t0 = prof_now(), a0 = tfe_prof_alloc_total();
    int rc = run_fused_timed(x, n);
    if (!rc) {
        char sh[512];
        tfe_tensor *inb[16], **in = n->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)n->nin);
        for (int i = 0; i < n->nin; i++) in[i] = grun_value(x, n->in[i]);
        if (prof_recording) {
            tfe_prof_shapes(sh, sizeof sh, n->nin, in);
            prof_complete(PROF_FUSED, fused_name(n->prog), t0, sh, tfe_prof_alloc_total() - a0,
                          tfe_prof_device(n->nin, in));
        }
        if (prof_debug >= 2) {
            tfe_tensor *o = grun_value(x, (GRef){(int)(n - x->g->nodes), 0});
            tfe_prof_debug_op("fused", fused_name(n->prog), n->nin, in, 1, &o, prof_ns(prof_now() - t0));
        }
        if (in != inb) free(in);
    }
    return rc;
}

static int run_fused_timed(GRun *x, GNode *n)
{
    tfe_tensor *inb[16] = {NULL}, **in = n->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)n->nin);
    const tfe_meta *m = &n->meta[0];
    const tfe_fprog *pg = n->prog;
    int drank = pg->red ? pg->rank : m->rank;
    int64_t dom[TFE_MAX_RANK];
    for (int d = 0; d < drank; d++) dom[d] = 1;
    int rc = 0;
    for (int i = 0; i < n->nin && !rc; i++) {
        in[i] = grun_value(x, n->in[i]);
        if (in[i]->rank > drank) rc = -1;
        for (int d = 0; d < drank && !rc; d++) {
            int dd = d - (drank - in[i]->rank);
            if (dd < 0 || in[i]->shape[dd] == 1) continue;
            if (dom[d] == 1) dom[d] = in[i]->shape[dd];
            else if (dom[d] != in[i]->shape[dd]) rc = -1;
        }
    }
    if (rc) {
        if (in != inb) free(in);
        return node_error(x, n, "fused: the inputs' shapes do not broadcast together");
    }
    tfe_meta om = *m;
    int lead = pg->red ? drank - pg->red_axes : drank;
    om.rank = pg->red && !n->at->keepdims ? lead : drank;
    for (int d = 0; d < om.rank; d++) om.shape[d] = d < lead ? dom[d] : 1;
    if (ptx_check_mode() && tfe_device_fused_check(pg, ptx_check_mode() == 2)) {
        if (in != inb) free(in);
        return node_error(x, n, tfe_error_msg());
    }
    /* On a GPU (docs/gpu.md, "Fused kernels"): when every input but 0-d
     * cpu:0 values lives on one GPU and the backend has a kernel for the
     * program, the group is one kernel there and its output is made there.
     * 0-d cpu:0 inputs (bare numbers) are passed to the kernel by value, as
     * the unfused elementwise GPU ops take them: no copy per call. Else (no
     * GPU tensor, the pretend device, float64, a final reduction, inputs on
     * several devices) the CPU VM runs as it always has (rc 1). */
    tfe_tensor *out = NULL;
    int dev = tfe_devices_used ? fused_device(in, n->nin) : 0;
    const tfe_backend *be = dev ? tfe_device_backend() : NULL;
    rc = 1;
    if (be && be->fused) {
        out = tensor_new_on(m->dtype, om.rank, om.shape, dev);
        rc = out ? be->fused(pg, in, out, dev) : -1;
        if (rc == 1) {
            tensor_decref(out);
            out = NULL;
        }
    }
    if (rc == 1) {
        out = x->plan && meta_same_shape(&om, m) ? exec_plan_tensor(x->plan, n->vbase, m) : NULL;
        if (!out) out = tensor_new(m->dtype, om.rank, om.shape);
        tfe_fkernel *k = out ? fused_kernel(n) : NULL;
        rc = k ? tfe_fused_exec(k, in, out) : -1;
    }
    if (!rc) prov_set_fused(n, n->nin, in, out);
    if (in != inb) free(in);
    if (rc) {
        if (out) tensor_decref(out);
        return node_error(x, n, tfe_error_msg());
    }
    out->weak = m->weak;
    grun_set(x, n->vbase, out);
    return 0;
}

static int truth(GRun *x, GNode *n, GRef r, bool *t)
{
    tfe_tensor *c = grun_value(x, r);
    if (tensor_numel(c) != 1) {
        char sh[200];
        char msg[300];
        snprintf(msg, sizeof msg, "condition must be a bool or a one-element tensor, got a tensor of shape %s (use any() or all())",
                 shape_str(c->rank, c->shape, sh));
        return node_error(x, n, msg);
    }
    *t = tensor_get_f64(c, 0) != 0;
    return 0;
}

/* GRun.ran: the way node n went in this run (a loop: its count, above) */
static void note_ran(GRun *x, const GNode *n, int way)
{
    if (!x->ran) x->ran = xcalloc((size_t)x->g->n + 1, sizeof *x->ran);
    x->ran[n - x->g->nodes] = (signed char)(1 + way);
}

static int run_cond(GRun *x, GNode *n)
{
    bool t;
    if (truth(x, n, n->in[0], &t)) return -1;
    int r = n->regions[t ? 0 : 1];
    note_ran(x, n, t ? 0 : 1);
    if (grun_region(x, r)) return -1;
    GRegion *reg = &x->g->regions[r];
    for (int k = 0; k < n->nout; k++) {
        tfe_tensor *v = grun_value(x, reg->outs[k]);
        tensor_incref(v);
        grun_set(x, n->vbase + k, v);
    }
    return 0;
}

/* Stack a loop's per-iteration values into (n, ...); n == 0: zeros (0, ...). */
static tfe_tensor *stack_history(tfe_tensor **h, int n, const tfe_meta *m)
{
    if (n == 0) {
        int64_t shape[TFE_MAX_RANK + 1] = {0};
        mem_copy(shape + 1, m->shape, sizeof(int64_t) * (size_t)m->rank);
        for (int d = 1; d <= m->rank; d++) if (shape[d] < 0) shape[d] = 0;
        return tensor_zeros(m->dtype, m->rank + 1, shape);
    }
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = 0;
    tfe_tensor *out[1];
    return tfe_execute_eager(OP_STACK, n, h, &at, out) ? NULL : out[0];
}

/* A while. One replayed for a backward (stage/grad.c) has 2 nc + 1 outputs:
 * the carried values, each one's value at the start of every iteration
 * stacked, and the number of iterations. */
static int run_while(GRun *x, GNode *n)
{
    Graph *g = x->g;
    GRegion *rc = &g->regions[n->regions[0]], *rb = &g->regions[n->regions[1]];
    int nc = rc->nparams;
    bool keep = n->nout > nc;
    tfe_tensor ***hist = keep ? xcalloc((size_t)nc + 1, sizeof *hist) : NULL;
    int niter = 0, cap = 0, rcode = -1;
    for (int k = 0; k < nc; k++) {
        tfe_tensor *v = grun_value(x, n->in[k]);
        tensor_incref(v);
        grun_set(x, g->nodes[rc->params[k]].vbase, v);
    }
    for (;;) {
        if (grun_region(x, n->regions[0])) goto out;
        bool t;
        if (truth(x, n, rc->outs[0], &t)) goto out;
        if (!t) break;
        if (keep) {
            if (niter == cap) {
                cap = cap ? cap * 2 : 8;
                for (int k = 0; k < nc; k++) hist[k] = xrealloc(hist[k], sizeof **hist * (size_t)cap);
            }
            for (int k = 0; k < nc; k++) {
                hist[k][niter] = x->v[g->nodes[rc->params[k]].vbase];
                tensor_incref(hist[k][niter]);
            }
        }
        niter++;
        if (grun_region(x, n->regions[1])) goto out;
        /* all new values first, then the params: a body output may be a
         * param itself (a swap), whose slot must not be overwritten before
         * it is read */
        tfe_tensor *nb[16], **next = nc <= 16 ? nb : xmalloc(sizeof *next * (size_t)nc);
        for (int k = 0; k < nc; k++) {
            next[k] = grun_value(x, rb->outs[k]);
            tensor_incref(next[k]);
        }
        for (int k = 0; k < nc; k++) grun_set(x, g->nodes[rc->params[k]].vbase, next[k]);
        if (next != nb) free(next);
        if (tfe_interrupted) {
            tfe_interrupted = 0;
            node_error(x, n, "interrupted");
            goto out;
        }
    }
    for (int k = 0; k < nc; k++) {
        tfe_tensor *v = x->v[g->nodes[rc->params[k]].vbase];
        tensor_incref(v);
        grun_set(x, n->vbase + k, v);
    }
    if (keep) {
        for (int k = 0; k < nc; k++) {
            tfe_tensor *h = stack_history(hist[k], niter, &n->meta[k]);
            if (!h) {
                node_error(x, n, tfe_error_msg());
                goto out;
            }
            grun_set(x, n->vbase + nc + k, h);
        }
        grun_set(x, n->vbase + 2 * nc, tensor_from_i64(niter, TFE_INT64));
    }
    /* (a loop: 1 + how many times it ran, up to 120, and past that a
     * count congruent modulo 60 in 61 .. 120: a number-or-tensor rule that
     * hands a kind on from one carried value to another tells by it which
     * kind the last iteration started from, stage/staged.c) */
    note_ran(x, n, niter <= 120 ? (int)niter : 61 + (int)((niter - 61) % 60));
    rcode = 0;
out:
    if (keep) {
        for (int k = 0; k < nc; k++) {
            for (int i = 0; i < niter && hist[k]; i++) tensor_decref(hist[k][i]);
            free(hist[k]);
        }
        free(hist);
    }
    return rcode;
}

int grun_node(GRun *x, int id)
{
    GNode *n = &x->g->nodes[id];
    switch (n->kind) {
    case G_INPUT: case G_CONST: case G_PARAM: return 0; /* in place before the run */
    case G_OP:
        x->nops++;
        if (n->half == GH_START) return grun_coll_start(x, n);
        if (n->half == GH_WAIT) return grun_coll_wait(x, n);
        if (tfe_ops[n->op].flags & F_COLLECTIVE) return grun_coll_whole(x, n, run_op);
        return run_op(x, n);
    case G_VAR_READ: {
        tfe_tensor *t = graph_host.var_read ? graph_host.var_read(x, n) : NULL;
        if (!t) return node_error(x, n, "a variable read failed");
        if (x->logreads && n->region != 0) {
            if (x->nlog == x->caplog) {
                x->caplog = x->caplog ? 2 * x->caplog : 16;
                x->log = xrealloc(x->log, sizeof *x->log * (size_t)x->caplog);
                x->lognode = xrealloc(x->lognode, sizeof *x->lognode * (size_t)x->caplog);
            }
            tensor_incref(t);
            x->log[x->nlog] = t;
            x->lognode[x->nlog++] = id;
        }
        grun_set(x, n->vbase, t);
        return 0;
    }
    case G_HOST:
        if (!graph_host.run_host) return node_error(x, n, "a host call with no host");
        return graph_host.run_host(x, n);
    case G_COND: return run_cond(x, n);
    case G_WHILE: return run_while(x, n);
    case G_FUSED: x->nops++; return run_fused(x, n);
    }
    return 0;
}

/* A planned instruction's output k: the arena view (made once, then reused
 * by every run), or a new tensor of the traced type and shape (output 0;
 * NULL for the others, which the kernel then makes as eager code does). */
static tfe_tensor *plan_output(GRun *x, PInstr *c, const GNode *n, int k)
{
    const tfe_meta *m = &n->meta[k];
    if (!c->view[k] && x->plan->offset[c->out + k] >= 0) c->view[k] = exec_plan_tensor(x->plan, c->out + k, m);
    tfe_tensor *o = c->view[k];
    if (o) tensor_incref(o);
    else if (k == 0 && (o = tensor_new(m->dtype, m->rank, m->shape))) o->weak = m->weak;
    return o;
}

/* A concurrent pair (graph/sched.c): two matmuls, one per thread, each
 * GEMM with one OpenBLAS thread. On the pool they run kn_matmul_direct,
 * which allocates nothing and leaves refcounts alone (neither is
 * thread-safe); one that needs a copy (rc 1) runs its kernel here after. */
typedef struct Pair {
    tfe_opcall call[2];
    int rc[2];
    char msg[2][256];
} Pair;

static void pair_task(int64_t b, int64_t e, void *ctx)
{
    Pair *pr = ctx;
    for (int64_t t = b; t < e; t++) {
        pr->rc[t] = kn_matmul_direct(&pr->call[t]);
        if (pr->rc[t] < 0) snprintf(pr->msg[t], sizeof pr->msg[t], "%s", tfe_error_msg());
    }
}

static tfe_tensor *plan_output(GRun *x, PInstr *c, const GNode *n, int k);

/* Runs code[i] and code[j] (i < j) at once; errors reported in program
 * order: i's first. */
static int run_pair(GRun *x, int i, int j)
{
    PInstr *c[2] = {&x->plan->code[i], &x->plan->code[j]};
    GNode *n[2] = {&x->g->nodes[c[0]->node], &x->g->nodes[c[1]->node]};
    tfe_tensor *in[2][2], *out[2] = {NULL, NULL};
    Pair pr;
    for (int t = 0; t < 2; t++) {
        x->nops++;
        in[t][0] = x->v[c[t]->in[0]];
        in[t][1] = x->v[c[t]->in[1]];
        out[t] = plan_output(x, c[t], n[t], 0);
        if (!out[t]) {
            if (t) tensor_decref(out[0]);
            return node_error(x, n[t], tfe_error_msg());
        }
        pr.call[t] = (tfe_opcall){.op = n[t]->op, .nin = 2, .nout = 1, .in = in[t], .at = n[t]->at, .out = &out[t]};
        pr.rc[t] = 0;
        pr.msg[t][0] = 0;
    }
    tfe_parallel_for(2, 1, pair_task, &pr); /* one OpenBLAS thread in each */
    for (int t = 0; t < 2; t++) {
        if (pr.rc[t] == 1) pr.rc[t] = c[t]->kernel(&pr.call[t]);
        else if (pr.rc[t]) tfe_error_set("%s", pr.msg[t]);
        if (pr.rc[t]) {
            tensor_decref(out[0]);
            tensor_decref(out[1]);
            return node_error(x, n[t], tfe_error_msg());
        }
    }
    for (int t = 0; t < 2; t++) prov_set(n[t]->op, 2, in[t], 1, &out[t]);
    grun_set(x, c[0]->out, out[0]);
    grun_set(x, c[1]->out, out[1]);
    return 0;
}

int grun_plan_instr(GRun *x, PInstr *c)
{
    GNode *n = &x->g->nodes[c->node];
    int64_t pt0 = prof_hooked ? prof_now() : 0, pa0 = pt0 ? tfe_prof_alloc_total() : 0;
    x->nops++;
    tfe_tensor *inb[16], **in = c->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)c->nin);
    for (int k = 0; k < c->nin; k++) in[k] = x->v[c->in[k]];
    /* outputs 1.. (batch_norm_train's mean and variance): their arena
     * views, which the kernel writes into, or NULL, which it fills */
    tfe_tensor *out[32] = {NULL};
    /* a batch_norm_train with the relu after it fused in writes the
     * relu's output (graph/plan.c, plan_bn_epilogues) */
    PInstr *ep = c->epi ? &x->plan->code[c->epi - 1] : NULL;
    out[0] = ep ? plan_output(x, ep, &x->g->nodes[ep->node], 0) : plan_output(x, c, n, 0);
    for (int k = 1; k < c->nout; k++) out[k] = plan_output(x, c, n, k);
    int rc = -1;
    if (out[0] && c->kind == PI_KERNEL) {
        const tfe_opcall call = {.op = n->op, .nin = c->nin, .nout = c->nout, .in = in, .at = c->at ? c->at : n->at,
                                 .out = out};
        rc = c->kernel(&call);
    } else if (out[0]) {
        tfe_fkernel *k = fused_kernel(n);
        rc = k ? tfe_fused_exec(k, in, out[0]) : -1;
    }
    if (pt0 && !rc && prof_recording) {
        char sh[512];
        tfe_prof_shapes(sh, sizeof sh, c->nin, in);
        prof_complete(c->kind == PI_KERNEL ? PROF_PLAN : PROF_FUSED, c->name ? c->name : node_name(n), pt0, sh,
                      tfe_prof_alloc_total() - pa0, tfe_prof_device(c->nin, in));
    }
    if (pt0 && !rc && prof_debug >= 2)
        tfe_prof_debug_op(c->kind == PI_KERNEL ? "kernel" : "fused", c->name ? c->name : node_name(n), c->nin, in,
                          c->nout, out,
                          prof_ns(prof_now() - pt0));
    if (!rc && c->kind == PI_KERNEL) prov_set(n->op, c->nin, in, c->nout, out);
    else if (!rc) prov_set_fused(n, c->nin, in, out[0]);
    if (in != inb) free(in);
    if (rc) {
        for (int k = 0; k < c->nout; k++)
            if (out[k]) tensor_decref(out[k]);
        return node_error(x, n, tfe_error_msg());
    }
    for (int k = 0; k < c->nout; k++) grun_set(x, k == 0 && ep ? ep->out : c->out + k, out[k]);
    if (pt0 && prof_recording) tfe_prof_live_bytes();
    return 0;
}

/* Values read by c for the last time go (graph/plan.c, plan_drops); not
 * when an outer tape keeps them for its backward. */
static void grun_drop(GRun *x, const PInstr *c)
{
    for (int k = 0; !x->keep && k < c->ndrop; k++) grun_set(x, c->drop[k], NULL);
}

int grun_plan(GRun *x)
{
    ExecPlan *p = x->g->plan;
    /* pairs run concurrently only from outside the pool (a run inside a
     * parallel chunk runs in order) */
    bool pairs = p->npairs && !tfe_in_parallel();
    for (int i = 0; i < p->ncode; i++) {
        PInstr *c = &p->code[i];
        GNode *n = &x->g->nodes[c->node];
        if (c->defer) continue; /* runs with the update after it */
        if (c->skip) { /* runs inside a kernel next to it */
            grun_drop(x, c);
            continue;
        }
        if (x->coll) grun_coll_step(x, n); /* Open MPI moves requests in flight only inside MPI calls */
        if (pairs && c->pair) {
            if (c->pair - 1 > i) continue; /* delayed to its partner's place */
            if (run_pair(x, c->pair - 1, i)) return -1;
            grun_drop(x, &p->code[c->pair - 1]);
            grun_drop(x, c);
            continue;
        }
        int rc;
        if (c->kind == PI_NODE) {
            int64_t pt0 = prof_hooked ? prof_now() : 0, pa0 = pt0 ? tfe_prof_alloc_total() : 0;
            rc = grun_node(x, c->node);
            if (!rc && pt0 && prof_recording) prof_complete(PROF_PLAN, node_name(n), pt0, NULL, tfe_prof_alloc_total() - pa0, -1);
        } else
            rc = c->kind == PI_UPDATE ? grun_update(x, c) : grun_plan_instr(x, c);
        if (rc) return -1;
        grun_drop(x, c);
    }
    return 0;
}

int grun_region(GRun *x, int r)
{
    GRegion *reg = &x->g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        if (x->coll) grun_coll_step(x, &x->g->nodes[reg->nodes[i]]);
        if (grun_node(x, reg->nodes[i])) return -1;
    }
    return 0;
}
