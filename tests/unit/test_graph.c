/* test_graph.c — the graph core (graph/) with no interpreter: graphs of
 * inputs, constants and ops built in C, the optimizer passes (dce, fold,
 * cse, fuse, and graph_optimize), the planner and both executors (the node
 * walker and the planned run), checked for node counts and values. No host
 * is registered (graph/host.h): such graphs need none. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/exec.h"
#include "graph/opt.h"
#include "graph/plan.h"
#include "tensor/ops.h"
#include "tests/unit/check.h"

static tfe_meta f32(int rank, const int64_t *shape)
{
    tfe_meta m = {.dtype = TFE_FLOAT32, .rank = rank};
    for (int d = 0; d < rank; d++) m.shape[d] = shape[d];
    return m;
}

static GRef input(Graph *g, tfe_meta m)
{
    int id = graph_add(g, 0, G_INPUT, 0, 1);
    g->nodes[id].meta[0] = m;
    g->nodes[id].input_index = g->ninputs;
    g->inputs = realloc(g->inputs, sizeof *g->inputs * (size_t)(g->ninputs + 1));
    g->inputs[g->ninputs++] = id;
    return (GRef){id, 0};
}

/* A constant node holding t (taken). */
static GRef constant(Graph *g, tfe_tensor *t)
{
    int id = graph_add(g, 0, G_CONST, 0, 1);
    GNode *n = &g->nodes[id];
    n->value = t;
    n->meta[0] = (tfe_meta){.dtype = t->dtype, .weak = t->weak, .rank = t->rank};
    for (int d = 0; d < t->rank; d++) n->meta[0].shape[d] = t->shape[d];
    return (GRef){id, 0};
}

/* An op node of one output of meta m on a and (nin 2) b. */
static GRef op(Graph *g, tfe_op o, int nin, GRef a, GRef b, tfe_meta m)
{
    int id = graph_add(g, 0, G_OP, nin, 1);
    GNode *n = &g->nodes[id];
    n->op = o;
    n->at = malloc(sizeof *n->at);
    tfe_attrs_init(n->at);
    n->in[0] = a;
    if (nin > 1) n->in[1] = b;
    n->meta[0] = m;
    return (GRef){id, 0};
}

static void set_outputs(Graph *g, int n, const GRef *outs)
{
    GRegion *top = &g->regions[0];
    free(top->outs);
    top->outs = malloc(sizeof *top->outs * (size_t)n);
    memcpy(top->outs, outs, sizeof *outs * (size_t)n);
    top->nouts = n;
}

/* Nodes the top region still runs (inputs and constants included). */
static int top_nodes(const Graph *g) { return g->regions[0].n; }

static int count_kind(const Graph *g, GKind k)
{
    int c = 0;
    for (int i = 0; i < g->regions[0].n; i++) c += g->nodes[g->regions[0].nodes[i]].kind == k;
    return c;
}

static tfe_tensor *vec(const float *v, int64_t n)
{
    tfe_tensor *t = tensor_new(TFE_FLOAT32, 1, &n);
    memcpy(tensor_data(t), v, sizeof *v * (size_t)n);
    return t;
}

/* Run g on inputs (the node walker, or the plan when planned) and return
 * a new reference to top output k, or NULL with the tensor error set. */
static tfe_tensor *run(Graph *g, tfe_tensor *const *inputs, int k, bool planned)
{
    GRun x;
    grun_init(&x, NULL, g, inputs);
    int rc;
    if (planned) {
        grun_use_plan(&x);
        rc = grun_plan(&x);
    } else {
        rc = grun_region(&x, 0);
    }
    tfe_tensor *r = NULL;
    if (!rc) {
        r = grun_value(&x, g->regions[0].outs[k]);
        tensor_incref(r);
    }
    grun_release(&x);
    return r;
}

static void expect_values(const tfe_tensor *t, const float *want, int64_t n, const char *what)
{
    REQUIRE(t, "%s: the run failed: %s", what, tfe_error_msg());
    CHECK(t->dtype == TFE_FLOAT32 && t->rank == 1 && t->shape[0] == n, "%s: wrong type or shape", what);
    for (int64_t i = 0; i < n; i++)
        CHECK(((const float *)tensor_data(t))[i] == want[i], "%s[%lld]: got %g, want %g", what, (long long)i,
              ((const float *)tensor_data(t))[i], want[i]);
}

/* (x + x) * (x + x), with a dead op: cse merges the two adds, dce drops
 * the dead op and the merged copy. */
static void test_cse_dce(void)
{
    int64_t s3[1] = {3};
    tfe_meta m = f32(1, s3);
    Graph *g = graph_new("cse");
    GRef x = input(g, m);
    GRef a = op(g, OP_ADD, 2, x, x, m);
    GRef b = op(g, OP_ADD, 2, x, x, m);
    op(g, OP_EXP, 1, x, x, m); /* nothing reads it */
    GRef c = op(g, OP_MUL, 2, a, b, m);
    set_outputs(g, 1, &c);
    CHECK(top_nodes(g) == 5, "built %d nodes", top_nodes(g));

    float xv[3] = {1, -2, 0.5f}, want[3];
    for (int i = 0; i < 3; i++) want[i] = (xv[i] + xv[i]) * (xv[i] + xv[i]);
    tfe_tensor *in = vec(xv, 3);
    tfe_tensor *before = run(g, &in, 0, false);
    expect_values(before, want, 3, "traced graph");

    CHECK(opt_cse(g) == 1, "cse: one add is the other");
    CHECK(opt_dce(g) >= 2, "dce: the dead exp and the merged add");
    graph_compact(g);
    CHECK(top_nodes(g) == 3, "after cse and dce: %d nodes (want input, add, mul)", top_nodes(g));
    CHECK(g->nodes[g->regions[0].outs[0].node].kind == G_OP && g->nodes[g->regions[0].outs[0].node].op == OP_MUL,
          "the output is still the mul");
    tfe_tensor *after = run(g, &in, 0, false);
    expect_values(after, want, 3, "after cse and dce");

    char *text = graph_to_text(g);
    CHECK(text && strstr(text, "add(") && strstr(text, "mul("), "text IR:\n%s", text ? text : "(null)");
    free(text);
    tensor_decref(before);
    tensor_decref(after);
    tensor_decref(in);
    graph_decref(g);
}

/* (2 + 3) * x: fold makes the add a constant 5. */
static void test_fold(void)
{
    int64_t s2[1] = {2};
    tfe_meta m = f32(1, s2), scalar = f32(0, NULL);
    Graph *g = graph_new("fold");
    GRef x = input(g, m);
    GRef two = constant(g, tensor_from_f64(2.0, TFE_FLOAT32));
    GRef three = constant(g, tensor_from_f64(3.0, TFE_FLOAT32));
    GRef five = op(g, OP_ADD, 2, two, three, scalar);
    GRef y = op(g, OP_MUL, 2, five, x, m);
    set_outputs(g, 1, &y);

    CHECK(opt_fold(g) == 1, "fold: the add of two constants");
    CHECK(g->nodes[five.node].kind == G_CONST && g->nodes[five.node].value &&
              tensor_get_f64(g->nodes[five.node].value, 0) == 5.0,
          "the add is the constant 5");
    opt_dce(g);
    graph_compact(g);
    CHECK(top_nodes(g) == 3, "after fold and dce: %d nodes (want input, const, mul)", top_nodes(g));
    CHECK(count_kind(g, G_CONST) == 1, "one constant left");

    float xv[2] = {1.5f, -4}, want[2] = {7.5f, -20};
    tfe_tensor *in = vec(xv, 2);
    tfe_tensor *r = run(g, &in, 0, false);
    expect_values(r, want, 2, "folded graph");
    tensor_decref(r);
    tensor_decref(in);
    graph_decref(g);
}

/* exp(-x) * y + x: three elementwise ops fuse into one G_FUSED node whose
 * values are bitwise the unfused graph's. */
static void test_fuse(void)
{
    int64_t s4[1] = {4};
    tfe_meta m = f32(1, s4);
    Graph *g = graph_new("fuse");
    GRef x = input(g, m);
    GRef y = input(g, m);
    GRef nx = op(g, OP_NEG, 1, x, x, m);
    GRef e = op(g, OP_EXP, 1, nx, nx, m);
    GRef p = op(g, OP_MUL, 2, e, y, m);
    GRef s = op(g, OP_ADD, 2, p, x, m);
    set_outputs(g, 1, &s);

    float xv[4] = {0, 1, -1.25f, 3}, yv[4] = {2, -1, 0.5f, 10};
    tfe_tensor *in[2] = {vec(xv, 4), vec(yv, 4)};
    tfe_tensor *ref = run(g, in, 0, false);
    REQUIRE(ref, "unfused run: %s", tfe_error_msg());

    OptReport r;
    CHECK(opt_fuse(g, &r) >= 1, "fuse: a group");
    opt_dce(g);
    graph_compact(g);
    CHECK(count_kind(g, G_FUSED) == 1 && count_kind(g, G_OP) == 0, "one fused node, no ops left (%d fused, %d ops)",
          count_kind(g, G_FUSED), count_kind(g, G_OP));
    CHECK(top_nodes(g) == 3, "after fuse: %d nodes (want 2 inputs and the group)", top_nodes(g));
    tfe_tensor *fused = run(g, in, 0, false);
    expect_values(fused, (const float *)tensor_data(ref), 4, "fused graph");
    tensor_decref(fused);
    tensor_decref(ref);
    tensor_decref(in[0]);
    tensor_decref(in[1]);
    graph_decref(g);
}

/* The whole optimizer, then the memory plan: the planned run gives the
 * walker's values, twice (the arena is kept for the next run). */
static void test_optimize_plan(void)
{
    int64_t s3[1] = {3};
    tfe_meta m = f32(1, s3);
    Graph *g = graph_new("plan");
    GRef x = input(g, m);
    GRef one = constant(g, tensor_from_f64(1.0, TFE_FLOAT32));
    GRef two = constant(g, tensor_from_f64(2.0, TFE_FLOAT32));
    GRef three = op(g, OP_ADD, 2, one, two, f32(0, NULL));
    GRef a = op(g, OP_MUL, 2, x, three, m);
    GRef b = op(g, OP_MUL, 2, x, three, m);
    GRef c = op(g, OP_ADD, 2, a, b, m);
    GRef d = op(g, OP_SUM, 1, c, c, f32(0, NULL));
    GRef e = op(g, OP_MATMUL, 2, c, c, f32(0, NULL)); /* an op the fuser leaves alone */
    GRef outs[2] = {d, e};
    set_outputs(g, 2, outs);

    float xv[3] = {1, 2, -0.5f};
    tfe_tensor *in = vec(xv, 3);
    tfe_tensor *want_d = run(g, &in, 0, false), *want_e = run(g, &in, 1, false);
    REQUIRE(want_d && want_e, "traced run: %s", tfe_error_msg());
    int before = top_nodes(g);

    OptReport r;
    CHECK(graph_optimize(g, &r, true) == 0, "graph_optimize: %s", tfe_error_msg());
    CHECK(r.npasses == 6 && r.before[0] == before, "report: %d passes, %d nodes before", r.npasses, r.before[0]);
    CHECK(top_nodes(g) < before, "optimized: %d nodes, traced %d", top_nodes(g), before);
    CHECK(r.text[0] && r.text[r.npasses], "the text before and after");
    char *line = opt_report_line(&r);
    CHECK(line && strstr(line, "cse"), "report line: %s", line ? line : "(null)");
    free(line);
    opt_report_free(&r);

    g->plan = exec_plan_build(g);
    REQUIRE(g->plan, "a plan for a graph of known shapes");
    CHECK(g->plan->ncode > 0, "planned instructions");
    for (int rep = 0; rep < 2; rep++) {
        tfe_tensor *got_d = run(g, &in, 0, true), *got_e = run(g, &in, 1, true);
        REQUIRE(got_d && got_e, "planned run: %s", tfe_error_msg());
        CHECK(tensor_get_f64(got_d, 0) == tensor_get_f64(want_d, 0), "sum: %g, want %g", tensor_get_f64(got_d, 0),
              tensor_get_f64(want_d, 0));
        CHECK(tensor_get_f64(got_e, 0) == tensor_get_f64(want_e, 0), "matmul: %g, want %g",
              tensor_get_f64(got_e, 0), tensor_get_f64(want_e, 0));
        tensor_decref(got_d);
        tensor_decref(got_e);
    }
    Graph *c2 = graph_clone(g);
    CHECK(c2->n == g->n && graph_same_but_dims(c2, g), "a clone is the same graph");
    graph_decref(c2);
    tensor_decref(want_d);
    tensor_decref(want_e);
    tensor_decref(in);
    graph_decref(g);
}

/* A run-time error with no host: the tensor error, and the run stops. */
static void test_error_without_host(void)
{
    int64_t s2[1] = {2}, s3[1] = {3};
    Graph *g = graph_new("err");
    GRef x = input(g, f32(1, s2));
    GRef y = input(g, f32(1, s3));
    GRef s = op(g, OP_ADD, 2, x, y, f32(1, s3));
    set_outputs(g, 1, &s);
    float xv[2] = {1, 2}, yv[3] = {1, 2, 3};
    tfe_tensor *in[2] = {vec(xv, 2), vec(yv, 3)};
    tfe_error_clear();
    tfe_tensor *r = run(g, in, 0, false);
    CHECK(!r, "adding shapes (2,) and (3,) fails");
    CHECK(tfe_error_msg() && *tfe_error_msg(), "with a message");
    if (r) tensor_decref(r);
    tensor_decref(in[0]);
    tensor_decref(in[1]);
    graph_decref(g);
}

static tfe_tensor *filled(int64_t r, int64_t c, float seed)
{
    int64_t sh[2] = {r, c};
    tfe_tensor *t = tensor_new(TFE_FLOAT32, 2, sh);
    float *d = (float *)tensor_data(t);
    for (int64_t i = 0; i < r * c; i++) d[i] = sinf(seed * (float)(i + 1)) * 0.5f; /* any values */
    return t;
}

/* Two independent 64x256x192 matmuls (one-thread GEMMs of 2^20 to 2^22
 * multiply-adds: larger ones are split over the pool by themselves): on two
 * threads the plan runs them as a concurrent pair (graph/sched.c) with the
 * walker's bits, except when the second's output took the bytes of the
 * first's dying input. */
static void test_concurrent_pairs(void)
{
    int64_t sx[2] = {64, 256}, sw[2] = {256, 192}, so[2] = {64, 192};
    for (int dying = 0; dying < 2; dying++) {
        Graph *g = graph_new("pairs");
        GRef x = input(g, f32(2, sx)), y = input(g, f32(2, sx));
        GRef w1 = input(g, f32(2, sw)), w2 = input(g, f32(2, sw));
        GRef t = dying ? op(g, OP_RELU, 1, x, x, f32(2, sx)) : x; /* dies at a: b's output may take it */
        GRef a = op(g, OP_MATMUL, 2, t, w1, f32(2, so));
        GRef b = op(g, OP_MATMUL, 2, y, w2, f32(2, so));
        GRef c = op(g, OP_SUB, 2, a, b, f32(2, so));
        set_outputs(g, 1, &c);
        tfe_tensor *in[4] = {filled(64, 256, 0.7f), filled(64, 256, 1.3f), filled(256, 192, 0.11f),
                             filled(256, 192, 0.19f)};
        tfe_tensor *want = run(g, in, 0, false);
        REQUIRE(want, "walker run: %s", tfe_error_msg());
        g->plan = exec_plan_build(g);
        REQUIRE(g->plan, "a plan");
        if (tfe_num_threads() >= 2)
            CHECK(g->plan->npairs == !dying, "%s: %d pairs", dying ? "a dying input" : "free inputs",
                  g->plan->npairs);
        for (int rep = 0; rep < 3; rep++) {
            tfe_tensor *got = run(g, in, 0, true);
            REQUIRE(got, "planned run: %s", tfe_error_msg());
            CHECK(!memcmp(tensor_data(got), tensor_data(want), 64 * 192 * sizeof(float)),
                  "planned run %d: not the walker's bits", rep);
            tensor_decref(got);
        }
        tensor_decref(want);
        for (int k = 0; k < 4; k++) tensor_decref(in[k]);
        graph_decref(g);
    }
}

/* An op node of nout outputs (metas m[0..]) on the nin inputs in[]. */
static int op_n(Graph *g, tfe_op o, int nin, const GRef *in, int nout, const tfe_meta *m)
{
    int id = graph_add(g, 0, G_OP, nin, nout);
    GNode *n = &g->nodes[id];
    n->op = o;
    n->at = malloc(sizeof *n->at);
    tfe_attrs_init(n->at);
    n->at->f[0] = 1e-5;
    for (int k = 0; k < nin; k++) n->in[k] = in[k];
    for (int k = 0; k < nout; k++) n->meta[k] = m[k];
    return id;
}

/* Ops of several outputs (batch_norm_train, batch_norm_grad) are planned
 * like the others: kernel instructions, every output in the arena, so a
 * planned run allocates none of them (only its results and the kernels'
 * per-channel scratch), with the walker's bits at every run, also where
 * their output 0 takes the block of an input that dies there. */
static void test_plan_multi_output(void)
{
    int64_t sx[4] = {8, 4, 4, 8}, sc[1] = {8};
    tfe_meta mx = f32(4, sx), mc = f32(1, sc);
    Graph *g = graph_new("bn");
    GRef x = input(g, mx), ga = input(g, mc), be = input(g, mc);
    GRef tin[3] = {x, ga, be};
    tfe_meta tm[3] = {mx, mc, mc};
    int t = op_n(g, OP_BATCH_NORM_TRAIN, 3, tin, 3, tm);
    GRef y = {t, 0}, mean = {t, 1}, var = {t, 2};
    GRef dy = op(g, OP_MUL, 2, y, y, mx); /* any dy, dmean, dvar; dy dies at the gradient */
    GRef gin[7] = {dy, mean, var, x, ga, mean, var};
    int d = op_n(g, OP_BATCH_NORM_GRAD, 7, gin, 3, tm);
    GRef z = op(g, OP_ADD, 2, (GRef){d, 0}, y, mx); /* dies at the second batch norm */
    GRef t2in[3] = {z, ga, be};
    int t2 = op_n(g, OP_BATCH_NORM_TRAIN, 3, t2in, 3, tm);
    GRef outs[2] = {op(g, OP_MUL, 2, (GRef){t2, 0}, y, mx), op(g, OP_ADD, 2, (GRef){d, 1}, (GRef){d, 2}, mc)};
    set_outputs(g, 2, outs);
    tfe_tensor *in[3] = {filled(1024, 1, 0.37f), filled(8, 1, 1.1f), filled(8, 1, 0.3f)};
    int64_t stx[4] = {512, 128, 32, 4}, stc[1] = {4};
    tfe_tensor *v[3] = {tensor_view(in[0], 4, sx, stx, 0), tensor_view(in[1], 1, sc, stc, 0),
                        tensor_view(in[2], 1, sc, stc, 0)};
    for (int k = 0; k < 3; k++) {
        REQUIRE(v[k], "reshape: %s", tfe_error_msg());
        tensor_decref(in[k]);
        in[k] = v[k];
    }
    tfe_tensor *want[2] = {run(g, in, 0, false), run(g, in, 1, false)};
    REQUIRE(want[0] && want[1], "walker run: %s", tfe_error_msg());
    g->plan = exec_plan_build(g);
    REQUIRE(g->plan, "a plan");
    for (int i = 0; i < g->plan->ncode; i++) {
        const PInstr *c = &g->plan->code[i];
        const GNode *n = &g->nodes[c->node];
        if (n->op != OP_BATCH_NORM_TRAIN && n->op != OP_BATCH_NORM_GRAD) continue;
        CHECK(c->kind == PI_KERNEL && c->nout == 3, "%s: a kernel instruction of 3 outputs", tfe_ops[n->op].name);
        for (int k = 0; k < 3; k++)
            CHECK(g->plan->offset[n->vbase + k] >= 0, "%s output %d: not in the arena", tfe_ops[n->op].name, k);
    }
    /* dx takes dy's block, the second y z's (the kernels' in-place loops) */
    CHECK(g->plan->ninplace == 2, "2 in place, got %d", g->plan->ninplace);
    CHECK(g->plan->offset[g->nodes[d].vbase] == g->plan->offset[g->nodes[dy.node].vbase], "dx in place of dy");
    CHECK(g->plan->offset[g->nodes[t2].vbase] == g->plan->offset[g->nodes[z.node].vbase], "y in place of x");
    for (int rep = 0; rep < 3; rep++) {
        size_t before = tfe_alloc_get_stats().total_bytes;
        tfe_tensor *got[2] = {run(g, in, 0, true), run(g, in, 1, true)};
        size_t bytes = (tfe_alloc_get_stats().total_bytes - before) / 2; /* one run */
        REQUIRE(got[0] && got[1], "planned run: %s", tfe_error_msg());
        CHECK(!memcmp(tensor_data(got[0]), tensor_data(want[0]), 1024 * sizeof(float)) &&
                  !memcmp(tensor_data(got[1]), tensor_data(want[1]), 8 * sizeof(float)),
              "planned run %d: not the walker's bits", rep);
        /* the results (4096 + 64 bytes) and the kernels' scratch (896: a
         * few 64-byte blocks each), no value of x's size */
        if (rep) CHECK(bytes <= 4096 + 64 + 1024, "planned run %d allocated %zu bytes", rep, bytes);
        for (int k = 0; k < 2; k++) tensor_decref(got[k]);
    }
    for (int k = 0; k < 2; k++) tensor_decref(want[k]);
    for (int k = 0; k < 3; k++) tensor_decref(in[k]);
    graph_decref(g);
}

/* plan_conv_bn (graph/plan.c): conv2d -> batch_norm_infer -> relu, the
 * batch norm's variables read in between, becomes one kernel instruction at
 * the batch norm's place; the conv and the relu skip, the conv's output and
 * the batch norm's get no block, and a planned run gives the walker's
 * bits, also one that keeps its values (GRun.keep). A conv whose input dies there gets
 * its batch norm but not the relu (the relu's output, placed after the
 * inputs' blocks are free, could take the input's). */
static void test_plan_conv_bn(void)
{
    int64_t sx[4] = {2, 6, 6, 3}, sw[4] = {3, 3, 3, 16}, sy[4] = {2, 4, 4, 16}, sw2[4] = {3, 3, 16, 16},
            sz[4] = {2, 2, 2, 16}, sc[1] = {16};
    tfe_meta mx = f32(4, sx), mw = f32(4, sw), my = f32(4, sy), mw2 = f32(4, sw2), mz = f32(4, sz), mc = f32(1, sc);
    for (int keep = 0; keep < 2; keep++) {
        Graph *g = graph_new("conv_bn");
        GRef x = input(g, mx), w = input(g, mw), w2 = input(g, mw2), v[4];
        for (int k = 0; k < 4; k++) v[k] = input(g, mc);
        GRef x2 = op(g, OP_MUL, 2, x, x, mx); /* dies at the first conv */
        GRef c = op(g, OP_CONV2D, 2, x2, w, my);
        GRef bin[5] = {c, v[0], v[1], v[2], v[3]};
        GRef y = {op_n(g, OP_BATCH_NORM_INFER, 5, bin, 1, &my), 0};
        GRef r = op(g, OP_RELU, 1, y, y, my);
        GRef c2 = op(g, OP_CONV2D, 2, r, w2, mz); /* r lives on, to the output */
        GRef b2in[5] = {c2, v[0], v[1], v[2], v[3]};
        GRef y2 = {op_n(g, OP_BATCH_NORM_INFER, 5, b2in, 1, &mz), 0};
        GRef r2 = op(g, OP_RELU, 1, y2, y2, mz);
        GRef outs[2] = {r2, op(g, OP_MUL, 2, r, r, my)};
        set_outputs(g, 2, outs);
        const tfe_meta *ms[7] = {&mx, &mw, &mw2, &mc, &mc, &mc, &mc};
        const float seeds[7] = {0.3f, 0.11f, 0.07f, 0.9f, 0.2f, 0.05f, 1.3f};
        tfe_tensor *in[7];
        for (int k = 0; k < 7; k++) {
            in[k] = tensor_new(TFE_FLOAT32, ms[k]->rank, ms[k]->shape);
            float *d = (float *)tensor_data(in[k]);
            for (int64_t i = 0; i < tensor_numel(in[k]); i++)
                d[i] = sinf(seeds[k] * (float)(i + 1)) * 0.5f + (k == 6 ? 1.0f : 0.0f); /* var > 0 */
        }
        tfe_tensor *want[2] = {run(g, in, 0, false), run(g, in, 1, false)};
        REQUIRE(want[0] && want[1], "walker run: %s", tfe_error_msg());
        g->plan = exec_plan_build(g);
        REQUIRE(g->plan, "a plan");
        CHECK(g->plan->nconvbn == 2, "2 convs with their batch norm, got %d", g->plan->nconvbn);
        int fused = 0, skipped = 0;
        for (int i = 0; i < g->plan->ncode; i++) {
            const PInstr *pc = &g->plan->code[i];
            const GNode *n = &g->nodes[pc->node];
            if (n->op == OP_CONV2D) CHECK(pc->skip, "a conv runs at its batch norm");
            if (n->op == OP_BATCH_NORM_INFER) {
                fused++;
                CHECK(pc->nin == 6 && pc->at, "the batch norm runs the conv");
                /* the first conv's input x2 dies there: it is freed at the
                 * relu's place instead, and the relu joins both */
                CHECK(pc->epi == i + 2, "relu joined");
            }
            if (n->op == OP_RELU) skipped += pc->skip;
        }
        CHECK(fused == 2 && skipped == 2, "2 fused batch norms (%d), 2 relus inside (%d)", fused, skipped);
        CHECK(g->plan->offset[g->nodes[c.node].vbase] < 0 && g->plan->offset[g->nodes[c2.node].vbase] < 0 &&
                  g->plan->offset[g->nodes[y.node].vbase] < 0 && g->plan->offset[g->nodes[y2.node].vbase] < 0,
              "the convs' outputs and the batch norms' are never made");
        /* x2, read for the last time by the first fused call, never holds
         * the block of the output that call writes */
        int64_t ox2 = g->plan->offset[g->nodes[x2.node].vbase], or = g->plan->offset[g->nodes[r.node].vbase];
        CHECK(ox2 >= 0 && or >= 0 && (ox2 + 2 * 6 * 6 * 3 * 4 <= or || or + 2 * 4 * 4 * 16 * 4 <= ox2),
              "x2 [%lld] and the relu's output [%lld] share bytes", (long long)ox2, (long long)or);
        for (int rep = 0; rep < 3; rep++) {
            tfe_tensor *got[2];
            for (int k = 0; k < 2; k++) {
                GRun rx;
                grun_init(&rx, NULL, g, in);
                grun_use_plan(&rx);
                rx.keep = keep;
                REQUIRE(!grun_plan(&rx), "planned run: %s", tfe_error_msg());
                got[k] = grun_value(&rx, g->regions[0].outs[k]);
                tensor_incref(got[k]);
                grun_release(&rx);
            }
            CHECK(!memcmp(tensor_data(got[0]), tensor_data(want[0]), 2 * 2 * 2 * 16 * sizeof(float)) &&
                      !memcmp(tensor_data(got[1]), tensor_data(want[1]), 2 * 4 * 4 * 16 * sizeof(float)),
                  "planned run %d (keep %d): not the walker's bits", rep, keep);
            for (int k = 0; k < 2; k++) tensor_decref(got[k]);
        }
        for (int k = 0; k < 2; k++) tensor_decref(want[k]);
        for (int k = 0; k < 7; k++) tensor_decref(in[k]);
        graph_decref(g);
    }
}

/* A residual block's end, relu(bn(conv(x2)) + h) (and relu(h + ...)): the
 * fused {add relu} group joins the conv and its batch norm, whose output
 * is never made; x2 and h die there, and the output never takes h's block
 * (a tile stores partial sums before its last store reads h). x holds NaN
 * of both signs, and x2 = -x, so where both operands of the add are NaN
 * their signs differ: the bytes show the add's operand order, which is
 * k_add's (the first operand's NaN), as the ops run eagerly. (The group's
 * own loop, compiled by GCC without restrict, returns the second's for
 * float32 in this build: staged without the join differs from eager in
 * those NaNs' signs.) With 32 channels the register tiles' epilogue, with
 * 5 OpenBLAS's chunks and kn_add_relu_rows. */
static void test_plan_conv_bn_join(void)
{
    for (int order = 0; order < 4; order++) {
        /* 32 output channels: the register tiles; 5: OpenBLAS's chunks */
        int64_t co = order < 2 ? 32 : 5;
        int64_t sx[4] = {2, 7, 7, 5}, sw[4] = {3, 3, 5, co}, sy[4] = {2, 5, 5, co}, sc[1] = {co},
                sw2[4] = {1, 1, co, 8}, so[4] = {2, 5, 5, 8};
        tfe_meta mx = f32(4, sx), mw = f32(4, sw), my = f32(4, sy), mc = f32(1, sc), mw2 = f32(4, sw2),
                 mo = f32(4, so);
        Graph *g = graph_new("conv_bn_join");
        GRef x = input(g, mx), w = input(g, mw), wh = input(g, mw), w2 = input(g, mw2), v[4];
        for (int k = 0; k < 4; k++) v[k] = input(g, mc);
        GRef x2 = op(g, OP_NEG, 1, x, x, mx); /* dies at the first conv */
        GRef h = op(g, OP_CONV2D, 2, x, wh, my); /* dies at the add */
        GRef c = op(g, OP_CONV2D, 2, x2, w, my);
        GRef bin[5] = {c, v[0], v[1], v[2], v[3]};
        GRef y = {op_n(g, OP_BATCH_NORM_INFER, 5, bin, 1, &my), 0};
        GRef s = order % 2 ? op(g, OP_ADD, 2, h, y, my) : op(g, OP_ADD, 2, y, h, my);
        GRef r = op(g, OP_RELU, 1, s, s, my);
        /* r read by two ops, so in the arena; -r shows its bits */
        GRef outs[2] = {op(g, OP_NEG, 1, r, r, my), op(g, OP_CONV2D, 2, r, w2, mo)};
        const tfe_meta *ms[8] = {&mx, &mw, &mw, &mw2, &mc, &mc, &mc, &mc};
        const float seeds[8] = {0.3f, 0.11f, 0.13f, 0.17f, 0.9f, 0.2f, 0.05f, 1.3f};
        tfe_tensor *in[8];
        for (int k = 0; k < 8; k++) {
            in[k] = tensor_new(TFE_FLOAT32, ms[k]->rank, ms[k]->shape);
            float *d = (float *)tensor_data(in[k]);
            for (int64_t i = 0; i < tensor_numel(in[k]); i++)
                d[i] = sinf(seeds[k] * (float)(i + 1)) * 0.5f + (k == 7 ? 1.0f : 0.0f); /* var > 0 */
        }
        float *xd = (float *)tensor_data(in[0]);
        xd[5 * (7 * 3 + 3) + 1] = NAN;       /* image 0: +NaN (x2: -NaN) */
        xd[5 * (49 + 7 * 1 + 5) + 2] = -NAN; /* image 1: -NaN (x2: +NaN) */
        set_outputs(g, 2, outs);
        tfe_tensor *want = run(g, in, 0, false); /* add and relu as ops: eager's kernels */
        REQUIRE(want, "walker run: %s", tfe_error_msg());
        int64_t n = 2 * 5 * 5 * co, nan_both = 0;
        for (int64_t i = 0; i < n; i++) nan_both += isnan(((float *)tensor_data(want))[i]);
        CHECK(nan_both > 0, "some outputs are NaN");
        OptReport rep = {0};
        CHECK(opt_fuse(g, &rep) >= 1, "fuse: the {add relu} group");
        opt_dce(g);
        graph_compact(g);
        g->plan = exec_plan_build(g);
        REQUIRE(g->plan, "a plan");
        CHECK(g->plan->nconvbn == 1, "1 conv with its batch norm, got %d", g->plan->nconvbn);
        int joined = 0, skipped = 0, hs = -1, rs = -1;
        for (int i = 0; i < g->plan->ncode; i++) {
            const PInstr *pc = &g->plan->code[i];
            const GNode *gn = &g->nodes[pc->node];
            if (gn->kind == G_OP && gn->op == OP_BATCH_NORM_INFER) {
                joined += pc->nin == 7 && pc->epi == i + 2 &&
                          pc->kernel == (order % 2 ? k_conv2d_bn_infer_radd_relu : k_conv2d_bn_infer_add_relu);
                if (pc->epi) rs = g->plan->code[pc->epi - 1].out;
                if (pc->nin == 7) hs = pc->in[6];
            }
            if (gn->kind == G_FUSED) skipped += pc->skip;
        }
        CHECK(joined == 1 && skipped == 1, "the group runs inside the conv's call (%d, %d)", joined, skipped);
        int64_t oh = hs >= 0 ? g->plan->offset[hs] : -1, orr = rs >= 0 ? g->plan->offset[rs] : -1;
        int64_t bytes = n * 4;
        CHECK(oh >= 0 && orr >= 0 && (oh + bytes <= orr || orr + bytes <= oh),
              "h [%lld] and the output [%lld] share bytes", (long long)oh, (long long)orr);
        for (int rep2 = 0; rep2 < 2; rep2++) {
            tfe_tensor *got = run(g, in, 0, true);
            REQUIRE(got, "planned run: %s", tfe_error_msg());
            CHECK(!memcmp(tensor_data(got), tensor_data(want), (size_t)bytes),
                  "planned run %d (order %d): not the ops' bits", rep2, order);
            tensor_decref(got);
        }
        tensor_decref(want);
        for (int k = 0; k < 8; k++) tensor_decref(in[k]);
        graph_decref(g);
    }
}

int main(void)
{
    setenv("TFE_NUM_THREADS", "2", 0); /* pairs need two threads (any machine) */
    test_cse_dce();
    test_fold();
    test_fuse();
    test_optimize_plan();
    test_error_without_host();
    test_concurrent_pairs();
    test_plan_multi_output();
    test_plan_conv_bn();
    test_plan_conv_bn_join();
    return check_done("test_graph");
}
