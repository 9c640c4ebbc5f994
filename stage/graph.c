/* graph.c — building and freeing graphs (the IR of stage/graph.h). */
#include <stdlib.h>
#include <string.h>
#include "stage/graph.h"
#include "stage/sig.h"
#include "interp/internal.h"
#include "stage/opt.h"
#include "stage/plan.h"
#include "tensor/fused.h"
#include "util/xalloc.h"

Graph *graph_new(const char *name)
{
    Graph *g = xcalloc(1, sizeof *g);
    g->refcount = 1;
    g->name = xstrdup(name ? name : "<fn>");
    graph_add_region(g, -1); /* the top region */
    return g;
}

bool graph_region_visible(const Graph *g, int def, int use)
{
    for (int r = use; r >= 0; r = g->regions[r].parent)
        if (r == def) return true;
    return false;
}

int graph_add_region(Graph *g, int parent)
{
    if (g->nregions == g->capregions) {
        g->capregions = g->capregions ? g->capregions * 2 : 4;
        g->regions = xrealloc(g->regions, sizeof *g->regions * (size_t)g->capregions);
    }
    g->regions[g->nregions] = (GRegion){0};
    g->regions[g->nregions].parent = parent;
    return g->nregions++;
}

int graph_add(Graph *g, int r, GKind k, int nin, int nout)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 32;
        g->nodes = xrealloc(g->nodes, sizeof *g->nodes * (size_t)g->cap);
    }
    int id = g->n++;
    GNode *n = &g->nodes[id];
    *n = (GNode){0};
    n->kind = k;
    n->nin = nin;
    n->in = nin ? xcalloc((size_t)nin, sizeof *n->in) : NULL;
    n->nout = nout;
    n->meta = nout ? xcalloc((size_t)nout, sizeof *n->meta) : NULL;
    n->region = r;
    n->effect_dep = -1;
    n->at_from = -1;
    n->regions[0] = n->regions[1] = -1;
    n->obj = v_nil();
    n->vbase = g->nvals;
    g->nvals += nout;
    GRegion *reg = &g->regions[r];
    if (reg->n == reg->cap) {
        reg->cap = reg->cap ? reg->cap * 2 : 16;
        reg->nodes = xrealloc(reg->nodes, sizeof *reg->nodes * (size_t)reg->cap);
    }
    reg->nodes[reg->n++] = id;
    return id;
}

/* What a node owns. */
static void node_free(GNode *n)
{
    free(n->in);
    free(n->meta);
    free(n->at);
    free(n->label);
    if (n->value) tensor_decref(n->value);
    value_decref(n->obj);
    for (int a = 0; a < n->nhargs; a++) value_decref(n->hargs[a].v);
    free(n->hargs);
    for (int a = 0; a < n->nhkw; a++) value_decref(v_obj(V_STR, n->hkwnames[a]));
    free(n->hkwnames);
    host_sync_free(n->sync);
    if (n->prog) {
        free((void *)n->prog->code);
        free(n->prog);
    }
    if (n->fkernel) tfe_fused_free(n->fkernel);
}

void graph_decref(Graph *g)
{
    if (!g || --g->refcount > 0) return;
    for (int i = 0; i < g->n; i++) {
        node_free(&g->nodes[i]);
    }
    for (int r = 0; r < g->nregions; r++) {
        free(g->regions[r].nodes);
        free(g->regions[r].outs);
        free(g->regions[r].params);
    }
    for (GFrames *f = g->frames_all, *next; f; f = next) {
        next = f->next_all;
        for (int i = 0; i < f->n; i++)
            if (f->f[i].call_loc.src) source_decref(f->f[i].call_loc.src);
        free(f->f);
        free(f);
    }
    for (GBwd *b = g->bwd, *next; b; b = next) {
        next = b->next;
        graph_decref(b->g);
        free(b->has);
        free(b->key);
        free(b->acc);
        free(b->same);
        free(b);
    }
    graph_decref(g->raw);
    exec_plan_free(g->plan);
    if (g->opt) {
        opt_report_free(g->opt);
        free(g->opt);
    }
    free(g->scratch);
    free(g->regions);
    free(g->nodes);
    free(g->inputs);
    free(g->name);
    free(g);
}

/* --- a control-flow node as a graph of its own ----------------------------------------- */

typedef struct Extract {
    const Graph *g;
    Graph *m;
    int *map;            /* old node -> new node (-1: not copied) */
    GRef *caps;          /* old values read from outside, in input order */
    int ncaps;
    int root;
} Extract;

static bool inside_root(const Extract *x, int node)
{
    const Graph *g = x->g;
    if (node == x->root) return true;
    for (int r = g->nodes[node].region; r >= 0; r = g->regions[r].parent)
        if (r == g->nodes[x->root].regions[0] || r == g->nodes[x->root].regions[1]) return true;
    return false;
}

static GRef map_ref(Extract *x, GRef r)
{
    if (inside_root(x, r.node)) return (GRef){x->map[r.node], r.out};
    for (int i = 0; i < x->ncaps; i++)
        if (x->caps[i].node == r.node && x->caps[i].out == r.out) return (GRef){x->m->inputs[i], 0};
    int id = graph_add(x->m, 0, G_INPUT, 0, 1);
    x->m->nodes[id].meta[0] = x->g->nodes[r.node].meta[r.out];
    x->m->nodes[id].input_index = x->m->ninputs;
    x->m->inputs = xrealloc(x->m->inputs, sizeof(int) * (size_t)(x->m->ninputs + 1));
    x->m->inputs[x->m->ninputs++] = id;
    x->caps = xrealloc(x->caps, sizeof *x->caps * (size_t)(x->ncaps + 1));
    x->caps[x->ncaps++] = r;
    return (GRef){id, 0};
}

static char *bytes_dup(const char *b, size_t n)
{
    char *d = xmalloc(n ? n : 1);
    mem_copy(d, b, n);
    return d;
}

HostSync *host_sync_copy(const HostSync *s)
{
    if (!s) return NULL;
    HostSync *d = xmalloc(sizeof *d);
    *d = *s;
    if (d->env) d->env->h.refcount++;
    value_incref(d->tmpl);
    d->sig = s->sig ? bytes_dup(s->sig, s->nsig) : NULL;
    d->after = s->nafter ? xmalloc(sizeof *d->after * (size_t)s->nafter) : NULL;
    for (int i = 0; i < s->nafter; i++) {
        d->after[i] = s->after[i];
        d->after[i].sig = bytes_dup(s->after[i].sig, s->after[i].nsig);
        if (d->after[i].env) d->after[i].env->h.refcount++;
    }
    d->ctx = s->nctx ? xmalloc(sizeof *d->ctx * (size_t)s->nctx) : NULL;
    for (int i = 0; i < s->nctx; i++) {
        d->ctx[i] = s->ctx[i];
        d->ctx[i].env->h.refcount++;
        value_incref(d->ctx[i].tmpl);
    }
    return d;
}

void host_sync_free(HostSync *s)
{
    if (!s) return;
    if (s->env) env_decref(s->env);
    value_decref(s->tmpl);
    free(s->sig);
    for (int i = 0; i < s->nafter; i++) {
        free(s->after[i].sig);
        if (s->after[i].env) env_decref(s->after[i].env);
    }
    free(s->after);
    for (int i = 0; i < s->nctx; i++) {
        env_decref(s->ctx[i].env);
        value_decref(s->ctx[i].tmpl);
    }
    free(s->ctx);
    free(s);
}

bool host_sync_same(const HostSync *a, const HostSync *b)
{
    if (!a || !b) return a == b;
    if (a->env != b->env || a->slot != b->slot || a->write != b->write || a->nsig != b->nsig ||
        mem_cmp(a->sig, b->sig, a->nsig) || a->nafter != b->nafter || a->nctx != b->nctx)
        return false;
    for (int i = 0; i < a->nctx; i++)
        if (a->ctx[i].env != b->ctx[i].env || a->ctx[i].slot != b->ctx[i].slot || a->ctx[i].nleaves != b->ctx[i].nleaves)
            return false;
    for (int i = 0; i < a->nafter; i++) {
        const HostAfter *x = &a->after[i], *y = &b->after[i];
        if (x->arg != y->arg || x->outside != y->outside || x->nleaves != y->nleaves || x->nsig != y->nsig ||
            x->param != y->param || x->env != y->env || x->slot != y->slot ||
            mem_cmp(x->sig, y->sig, x->nsig))
            return false;
    }
    return true;
}

/* n gets its own references to what o owns: attrs, constant, callable, host
 * arguments and keyword names (in, meta, label and prog are the caller's). */
static void copy_owned(GNode *n, const GNode *o)
{
    n->at = NULL;
    if (o->at) {
        n->at = xmalloc(sizeof *n->at);
        *n->at = *o->at;
    }
    n->value = o->value;
    if (n->value) tensor_incref(n->value);
    n->obj = o->obj;
    value_incref(n->obj);
    n->hargs = NULL;
    n->nhargs = o->nhargs;
    if (o->nhargs) {
        n->hargs = xmalloc(sizeof *n->hargs * (size_t)o->nhargs);
        for (int a = 0; a < o->nhargs; a++) {
            n->hargs[a] = o->hargs[a];
            value_incref(n->hargs[a].v);
        }
    }
    n->sync = host_sync_copy(o->sync);
    n->hkwnames = NULL;
    n->nhkw = o->nhkw;
    if (o->nhkw) {
        n->hkwnames = xmalloc(sizeof *n->hkwnames * (size_t)o->nhkw);
        for (int a = 0; a < o->nhkw; a++) {
            n->hkwnames[a] = o->hkwnames[a];
            n->hkwnames[a]->h.refcount++;
        }
    }
}

static int copy_region(Extract *x, int r, int parent);

static void copy_node(Extract *x, int old, int region)
{
    const GNode *o = &x->g->nodes[old];
    GRef *in = xmalloc(sizeof *in * (size_t)(o->nin ? o->nin : 1));
    for (int i = 0; i < o->nin; i++) in[i] = map_ref(x, o->in[i]); /* inputs first: they may add nodes */
    int id = graph_add(x->m, region, o->kind, o->nin, o->nout);
    x->map[old] = id;
    o = &x->g->nodes[old];
    GNode *n = &x->m->nodes[id];
    mem_copy(n->in, in, sizeof *in * (size_t)o->nin);
    free(in);
    mem_copy(n->meta, o->meta, sizeof *n->meta * (size_t)o->nout);
    n->op = o->op;
    n->at_from = o->at_from >= 0 && x->map[o->at_from] >= 0 ? x->map[o->at_from] : -1;
    n->loc = o->loc;
    copy_owned(n, o);
    n->host_nil = o->host_nil;
    if (o->prog) {
        n->prog = xmalloc(sizeof *n->prog);
        *n->prog = *o->prog;
        tfe_finstr *code = xmalloc(sizeof *code * (size_t)(o->prog->ninstr ? o->prog->ninstr : 1));
        mem_copy(code, o->prog->code, sizeof *code * (size_t)o->prog->ninstr);
        n->prog->code = code;
    }
    if (o->kind == G_COND || o->kind == G_WHILE) {
        int r0 = o->regions[0], r1 = o->regions[1];
        int n0 = copy_region(x, r0, region);
        int n1 = copy_region(x, r1, o->kind == G_WHILE ? n0 : region);
        x->m->nodes[id].regions[0] = n0;
        x->m->nodes[id].regions[1] = n1;
    }
}

static int copy_region(Extract *x, int r, int parent)
{
    int nr = graph_add_region(x->m, parent);
    const GRegion *o = &x->g->regions[r];
    for (int i = 0; i < o->n; i++) copy_node(x, x->g->regions[r].nodes[i], nr);
    o = &x->g->regions[r];
    GRegion *n = &x->m->regions[nr];
    n->nouts = o->nouts;
    n->outs = xmalloc(sizeof *n->outs * (size_t)(o->nouts ? o->nouts : 1));
    for (int k = 0; k < o->nouts; k++) x->m->regions[nr].outs[k] = map_ref(x, o->outs[k]);
    n = &x->m->regions[nr];
    n->nparams = o->nparams;
    n->params = xmalloc(sizeof *n->params * (size_t)(o->nparams ? o->nparams : 1));
    for (int k = 0; k < o->nparams; k++) n->params[k] = x->map[o->params[k]];
    return nr;
}

Graph *graph_extract(const Graph *g, int id, GRef **caps, int *ncaps)
{
    Extract x = {.g = g, .m = graph_new(g->name), .root = id};
    x.map = xmalloc(sizeof *x.map * (size_t)g->n);
    for (int i = 0; i < g->n; i++) x.map[i] = -1;
    copy_node(&x, id, 0);
    const GNode *n = &g->nodes[id];
    GRegion *top = &x.m->regions[0];
    top->nouts = n->nout;
    top->outs = xmalloc(sizeof *top->outs * (size_t)(n->nout ? n->nout : 1));
    for (int k = 0; k < n->nout; k++) top->outs[k] = (GRef){x.map[id], k};
    free(x.map);
    *caps = x.caps;
    *ncaps = x.ncaps;
    return x.m;
}

/* --- dropping what no region uses ------------------------------------------------------ */

static void mark_region(const Graph *g, int r, bool *live_node, bool *live_region)
{
    live_region[r] = true;
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *n = &g->nodes[reg->nodes[i]];
        live_node[reg->nodes[i]] = true;
        if (n->kind == G_COND || n->kind == G_WHILE) {
            mark_region(g, n->regions[0], live_node, live_region);
            mark_region(g, n->regions[1], live_node, live_region);
        }
    }
}

void graph_compact(Graph *g)
{
    bool *live = xcalloc((size_t)g->n + 1, 1), *live_r = xcalloc((size_t)g->nregions + 1, 1);
    mark_region(g, 0, live, live_r);
    for (int i = 0; i < g->ninputs; i++) live[g->inputs[i]] = true;
    int *nmap = xmalloc(sizeof *nmap * (size_t)(g->n + 1)), *rmap = xmalloc(sizeof *rmap * (size_t)(g->nregions + 1));
    int nn = 0, nr = 0, nv = 0;
    for (int i = 0; i < g->n; i++) nmap[i] = live[i] ? nn++ : -1;
    for (int r = 0; r < g->nregions; r++) rmap[r] = live_r[r] ? nr++ : -1;
    /* free the dead, then move the live down */
    for (int i = 0; i < g->n; i++) {
        if (live[i]) continue;
        node_free(&g->nodes[i]);
    }
    for (int i = 0; i < g->n; i++) {
        if (!live[i]) continue;
        GNode n = g->nodes[i];
        for (int k = 0; k < n.nin; k++) n.in[k].node = nmap[n.in[k].node];
        n.effect_dep = n.effect_dep >= 0 ? nmap[n.effect_dep] : -1;
        n.at_from = n.at_from >= 0 ? nmap[n.at_from] : -1;
        if (n.kind == G_COND || n.kind == G_WHILE) {
            n.regions[0] = rmap[n.regions[0]];
            n.regions[1] = rmap[n.regions[1]];
        }
        n.region = rmap[n.region];
        n.vbase = nv;
        nv += n.nout;
        g->nodes[nmap[i]] = n;
    }
    for (int r = 0; r < g->nregions; r++) {
        GRegion reg = g->regions[r];
        if (!live_r[r]) {
            free(reg.nodes);
            free(reg.outs);
            free(reg.params);
            continue;
        }
        for (int i = 0; i < reg.n; i++) reg.nodes[i] = nmap[reg.nodes[i]];
        for (int k = 0; k < reg.nouts; k++) reg.outs[k].node = nmap[reg.outs[k].node];
        for (int k = 0; k < reg.nparams; k++) reg.params[k] = nmap[reg.params[k]];
        reg.parent = reg.parent >= 0 ? rmap[reg.parent] : -1;
        g->regions[rmap[r]] = reg;
    }
    for (int i = 0; i < g->ninputs; i++) g->inputs[i] = nmap[g->inputs[i]];
    g->n = nn;
    g->nregions = nr;
    g->nvals = nv;
    free(g->scratch);
    g->scratch = NULL;
    g->scratch_cap = 0;
    free(live);
    free(live_r);
    free(nmap);
    free(rmap);
}

/* --- copying ------------------------------------------------------------------------------ */

Graph *graph_clone(const Graph *g)
{
    Graph *c = xcalloc(1, sizeof *c);
    c->refcount = 1;
    c->name = xstrdup(g->name);
    c->n = c->cap = g->n;
    c->nodes = xcalloc((size_t)g->n + 1, sizeof *c->nodes);
    for (int i = 0; i < g->n; i++) {
        const GNode *o = &g->nodes[i];
        GNode *n = &c->nodes[i];
        *n = *o;
        n->in = o->nin ? xmalloc(sizeof *n->in * (size_t)o->nin) : NULL;
        mem_copy(n->in, o->in, sizeof *n->in * (size_t)o->nin);
        n->meta = o->nout ? xmalloc(sizeof *n->meta * (size_t)o->nout) : NULL;
        mem_copy(n->meta, o->meta, sizeof *n->meta * (size_t)o->nout);
        n->label = o->label ? xstrdup(o->label) : NULL;
        copy_owned(n, o);
        n->prog = NULL; /* a traced graph has no fused nodes */
        n->fkernel = NULL;
        /* frames: shared with g, which the clone's owner keeps alive (g->raw) */
    }
    c->nregions = c->capregions = g->nregions;
    c->regions = xcalloc((size_t)g->nregions + 1, sizeof *c->regions);
    for (int r = 0; r < g->nregions; r++) {
        const GRegion *o = &g->regions[r];
        GRegion *n = &c->regions[r];
        *n = *o;
        n->cap = o->n;
        n->nodes = xmalloc(sizeof *n->nodes * (size_t)(o->n + 1));
        mem_copy(n->nodes, o->nodes, sizeof *n->nodes * (size_t)o->n);
        n->outs = xmalloc(sizeof *n->outs * (size_t)(o->nouts + 1));
        mem_copy(n->outs, o->outs, sizeof *n->outs * (size_t)o->nouts);
        n->params = xmalloc(sizeof *n->params * (size_t)(o->nparams + 1));
        mem_copy(n->params, o->params, sizeof *n->params * (size_t)o->nparams);
    }
    c->ninputs = g->ninputs;
    c->inputs = xmalloc(sizeof *c->inputs * (size_t)(g->ninputs + 1));
    mem_copy(c->inputs, g->inputs, sizeof *c->inputs * (size_t)g->ninputs);
    c->nvals = g->nvals;
    return c;
}

/* Attributes equal, but for the seed and counter of a draw from the stream
 * (each trace draws afresh). */
static bool attrs_same(const tfe_attrs *a, const tfe_attrs *b)
{
    if (!a || !b) return a == b;
    tfe_attrs x = *a, y = *b;
    if (x.from_stream && y.from_stream) x.seed = y.seed = 0, x.counter = y.counter = 0;
    return x.naxes == y.naxes && !mem_cmp(x.axes, y.axes, sizeof x.axes) && x.keepdims == y.keepdims &&
           x.dtype == y.dtype && x.nints == y.nints && !mem_cmp(x.ints, y.ints, sizeof x.ints) &&
           !mem_cmp(x.f, y.f, sizeof x.f) && x.seed == y.seed && x.counter == y.counter &&
           x.from_stream == y.from_stream;
}

bool graph_same_but_dims(const Graph *a, const Graph *b)
{
    if (a->n != b->n || a->nregions != b->nregions || a->ninputs != b->ninputs) return false;
    for (int i = 0; i < a->n; i++) {
        const GNode *x = &a->nodes[i], *y = &b->nodes[i];
        if (x->kind != y->kind || x->nin != y->nin || x->nout != y->nout || x->region != y->region ||
            x->effect_dep != y->effect_dep || mem_cmp(x->in, y->in, sizeof *x->in * (size_t)x->nin))
            return false;
        for (int k = 0; k < x->nout; k++)
            if (x->meta[k].dtype != y->meta[k].dtype || x->meta[k].rank != y->meta[k].rank) return false;
        switch (x->kind) {
        case G_OP:
            if (x->op != y->op || !attrs_same(x->at, y->at)) return false;
            break;
        case G_CONST: {
            const tfe_tensor *u = x->value, *v = y->value;
            if (u->dtype != v->dtype || u->rank != v->rank ||
                mem_cmp(u->shape, v->shape, sizeof *u->shape * (size_t)u->rank) || !sig_tensor_equal(u, v, -1))
                return false;
            break;
        }
        case G_VAR_READ:
            if (x->obj.u.o != y->obj.u.o) return false;
            break;
        case G_HOST: {
            if (x->obj.u.o != y->obj.u.o || x->nhargs != y->nhargs || x->nhkw != y->nhkw) return false;
            for (int k = 0; k < x->nhargs; k++) {
                int err = 0;
                if (x->hargs[k].nleaves != y->hargs[k].nleaves) return false;
                if (!x->hargs[k].nleaves && (!value_equal(x->hargs[k].v, y->hargs[k].v, &err) || err)) return false;
            }
            if (!host_sync_same(x->sync, y->sync)) return false;
            break;
        }
        case G_COND: case G_WHILE:
            if (x->regions[0] != y->regions[0] || x->regions[1] != y->regions[1]) return false;
            break;
        case G_INPUT: case G_PARAM: case G_FUSED:
        default:
            break;
        }
    }
    for (int r = 0; r < a->nregions; r++) {
        const GRegion *x = &a->regions[r], *y = &b->regions[r];
        if (x->n != y->n || x->nouts != y->nouts || x->nparams != y->nparams || x->parent != y->parent ||
            mem_cmp(x->nodes, y->nodes, sizeof *x->nodes * (size_t)x->n) ||
            mem_cmp(x->outs, y->outs, sizeof *x->outs * (size_t)x->nouts) ||
            mem_cmp(x->params, y->params, sizeof *x->params * (size_t)x->nparams))
            return false;
    }
    return true;
}
