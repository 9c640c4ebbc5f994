/* plan.c — compiling a graph's top region into a flat instruction list
 * (graph/plan.h), and placing its intermediates in one arena by liveness.
 *
 * Static shapes: a value's type and shape are the traced ones at every call
 * when it is an input or constant (the signature fixes them; relaxed graphs
 * get no plan), a variable read (assign keeps a variable's dtype and shape),
 * the result of a kernel op or fused group whose inputs are all static, or
 * a one-input view or a random draw of static inputs (those run through the
 * node walker, but their shapes follow from their inputs' and attrs). Host
 * results and what conds and whiles make are not assumed static: they run
 * through the node walker, which infers and checks.
 *
 * Variable updates (PI_UPDATE: graph/exec_update.c) and the release of each
 * value after its last read (PInstr.drop) are planned here too.
 *
 * Arena: a value is planned when an op of the top region makes it (not a
 * view, not a data-dependent shape, not a random draw; every output of an op
 * of several, batch_norm_train's mean and variance too), its shape is fully
 * known, and only ops and fused nodes of the top region read it: not a result
 * of the graph (results outlive the call, the arena does not), not a host
 * call's argument (it could keep it), not a value a cond/while region reads,
 * and not the input of a view op (the view would share its bytes). Walking
 * the top region in order, a planned output takes a free block (first fit) or
 * the end of the arena, and the blocks of the inputs read for the last time
 * are freed after it (and those of outputs of an op of several that nothing
 * reads: the kernel writes them all), so an output never overlaps what it is
 * computed from, nor another output of its op —
 * except in place: a fused group's output takes the block of an input of its
 * own type and shape that dies there (tensor/fused.c reads every element of
 * a chunk before it writes the result's, so reading and writing one buffer is
 * safe), and so does a batch norm's y (dx) that of its x (dy) (op_in_place_input);
 * the other op kernels' loops are `restrict` and never run in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/host.h"
#include "graph/opt.h"
#include "graph/plan.h"
#include "util/buf.h"
#include "graph/sched.h"
#include "tensor/device.h"
#include "tensor/fused.h"
#include "util/xalloc.h"

typedef struct Block { int64_t off, size; } Block;

static int64_t align64(int64_t n) { return (n + 63) & ~(int64_t)63; }

/* An op of several outputs (batch_norm_train, batch_norm_grad) is one when
 * it is neither a view nor sized by its data: its kernel writes into the
 * outputs 1.. it is given, and makes those it is not (tensor/ops.h). */
static bool plannable_op(const GNode *n)
{
    if (n->kind == G_FUSED) return n->nout == 1;
    if (n->kind != G_OP || n->nout < 1) return false;
    unsigned f = tfe_ops[n->op].flags;
    /* a collective runs through the walker (run_op), the one place that
     * calls it, so that an executor that overlaps them has one to change */
    return !(f & (F_VIEW | F_SELFOUT | F_RANDOM | F_COLLECTIVE));
}

static int64_t value_bytes(const tfe_meta *m)
{
    int64_t size = align64((int64_t)dtype_size(m->dtype) * shape_numel(m->rank, m->shape));
    return size ? size : 64;
}

static bool meta_known(const tfe_meta *m)
{
    bool known = m->dtype < TFE_FLOAT16;
    for (int d = 0; d < m->rank; d++) known &= m->shape[d] >= 0;
    return known;
}

/* Are all of n's outputs' shapes known (known[], by value slot)? */
static bool outs_known(const GNode *n, const bool *known)
{
    bool all = true;
    for (int k = 0; k < n->nout; k++) all &= known[n->vbase + k];
    return all;
}

/* Does the fused program write its result with its last instruction (then
 * its output may share a buffer with an input it reads: see the top)? */
static bool fused_in_place_ok(const GNode *n)
{
    const tfe_fprog *p = n->prog;
    return p && !p->red && p->ninstr > 0 && p->code[p->ninstr - 1].dst == p->result;
}

/* The input whose block an op's output 0 may take (see the top), or -1:
 * the batch-norm kernels (tensor/kernels_bn.c) read all of x (dy) before
 * they write y (dx) row by row, each row of the output from the same row of
 * that input, and have a loop for the two being one buffer. */
static int op_in_place_input(const GNode *n)
{
    bool bn = n->kind == G_OP &&
              (n->op == OP_BATCH_NORM_TRAIN || n->op == OP_BATCH_NORM_INFER || n->op == OP_BATCH_NORM_GRAD);
    return bn ? 0 : -1;
}

/* The instruction list of the top region; stat[slot]: the value's shape is
 * the traced one at every call. pos[i]: the index in the top region of
 * instruction i. */
static void compile_code(ExecPlan *p, const Graph *g, const bool *known, int *pos)
{
    const GRegion *top = &g->regions[0];
    bool *stat = xcalloc((size_t)g->nvals + 1, sizeof *stat);
    p->code = xcalloc((size_t)top->n + 1, sizeof *p->code);
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        pos[p->ncode] = i;
        PInstr *c = &p->code[p->ncode++];
        c->node = top->nodes[i];
        c->out = n->vbase;
        c->kind = PI_NODE;
        bool ins_static = true;
        for (int k = 0; k < n->nin; k++) ins_static &= stat[g->nodes[n->in[k].node].vbase + n->in[k].out];
        switch (n->kind) {
        case G_INPUT: case G_CONST: /* in place before the run: no instruction */
            stat[n->vbase] = meta_known(&n->meta[0]);
            p->ncode--;
            break;
        case G_VAR_READ:
            stat[n->vbase] = meta_known(&n->meta[0]);
            break;
        case G_OP: case G_FUSED:
            if (n->kind == G_OP && n->nout == 1 && (((tfe_ops[n->op].flags & F_VIEW) && n->nin == 1) ||
                                                    (tfe_ops[n->op].flags & F_RANDOM))) {
                /* a view (transpose, reshape, ...) runs through the walker, which
                 * makes it share its input's bytes, and a random draw, which
                 * takes its place in the stream; with all they need in their
                 * attrs, their shapes follow from their inputs' (a shape that
                 * depends on values is not a known one) */
                stat[n->vbase] = ins_static && meta_known(&n->meta[0]);
                break;
            }
            if (!ins_static || !plannable_op(n) || !outs_known(n, known)) break;
            for (int k = 0; k < n->nout; k++) stat[n->vbase + k] = true;
            c->nout = n->nout;
            c->view = xcalloc((size_t)n->nout, sizeof *c->view);
            c->kind = n->kind == G_FUSED ? PI_FUSED : PI_KERNEL;
            c->kernel = n->kind == G_OP ? tfe_ops[n->op].cpu_kernel : NULL;
            c->nin = n->nin;
            c->in = xmalloc(sizeof *c->in * (size_t)(n->nin ? n->nin : 1));
            for (int k = 0; k < n->nin; k++) c->in[k] = g->nodes[n->in[k].node].vbase + n->in[k].out;
            if (c->kind == PI_FUSED) p->nfused++;
            else p->nkernel++;
            break;
        case G_HOST: case G_COND: case G_WHILE: case G_PARAM:
        default:
            break;
        }
    }
    free(stat);
}

/* The fused program of a variable update (graph/exec_update.c): input 0 is
 * the variable's value w, inputs 1.. the operand's; the operand's program
 * (pn's fused program, or its one elementwise op) computes x, then w op x
 * (or, for assign, x itself) is the result, written by the last
 * instruction, so the output may be w itself: each chunk of w is read
 * before the same chunk is written. NULL when pn cannot be one. */
static struct tfe_fkernel *update_kernel(const Graph *g, const GNode *pn, int mode, tfe_axpy_prog *ax)
{
    static const tfe_op ops[] = {[GVAR_ADD] = OP_ADD, [GVAR_SUB] = OP_SUB, [GVAR_MUL] = OP_MUL, [GVAR_DIV] = OP_DIV};
    const tfe_meta *m = &pn->meta[0];
    if (pn->nout != 1 || m->weak || (m->dtype != TFE_FLOAT32 && m->dtype != TFE_FLOAT64)) return NULL;
    tfe_finstr one[3];
    tfe_fprog base;
    if (pn->kind == G_FUSED) {
        if (!pn->prog || pn->prog->red) return NULL;
        base = *pn->prog;
    } else {
        int fop = tfe_fop_of_op(pn->op);
        if (pn->kind != G_OP || fop < 0 || pn->nin < 1 || pn->nin > 2 || tfe_fop_nargs(fop) != pn->nin) return NULL;
        for (int k = 0; k < pn->nin; k++)
            if (g->nodes[pn->in[k].node].meta[pn->in[k].out].dtype != m->dtype) return NULL;
        for (int k = 0; k < pn->nin; k++) one[k] = (tfe_finstr){.op = FOP_LOAD, .dst = (int16_t)k, .input = (int16_t)k};
        one[pn->nin] = (tfe_finstr){.op = (uint16_t)fop, .dst = (int16_t)pn->nin, .a = 0, .b = (int16_t)(pn->nin - 1)};
        base = (tfe_fprog){.dtype = m->dtype, .ninputs = pn->nin, .nregs = pn->nin + 1, .ninstr = pn->nin + 1,
                           .code = one, .result = pn->nin};
    }
    if (base.dtype != m->dtype || base.ninstr < 1 || base.nregs >= INT16_MAX) return NULL;
    tfe_finstr *code = xcalloc((size_t)base.ninstr + 2, sizeof *code);
    for (int i = 0; i < base.ninstr; i++) {
        code[i] = base.code[i];
        if (code[i].op == FOP_LOAD) code[i].input++;
    }
    tfe_fprog up = base;
    up.ninputs = base.ninputs + 1;
    up.code = code;
    if (mode == GVAR_ASSIGN) {
        if (code[base.ninstr - 1].dst != base.result) {
            free(code);
            return NULL;
        }
    } else {
        int16_t w = (int16_t)base.nregs;
        code[base.ninstr] = (tfe_finstr){.op = FOP_LOAD, .dst = w, .input = 0};
        code[base.ninstr + 1] = (tfe_finstr){.op = (uint16_t)ops[mode], .dst = w, .a = w, .b = (int16_t)base.result};
        up.ninstr = base.ninstr + 2;
        up.nregs = base.nregs + 1;
        up.result = w;
    }
    struct tfe_fkernel *k = tfe_fused_compile(&up);
    if (!k) tfe_error_clear();
    tfe_axpy_match(&up, ax);
    free(code);
    return k;
}

/* Variable updates whose operand the instruction just before makes, read by
 * nothing else: PI_UPDATE (plan.h). The operand's inputs then live until the
 * update (last[], by top-region index). */
static void plan_updates(ExecPlan *p, const Graph *g, const int *pos, const int *uses, int *last, int *prod_at)
{
    if (!graph_host.var_update) return;
    for (int i = 1; i < p->ncode; i++) {
        PInstr *c = &p->code[i], *pc = &p->code[i - 1];
        const GNode *n = &g->nodes[c->node];
        int mode = c->kind == PI_NODE && n->kind == G_HOST && n->nin == 1 ? graph_host.var_update(NULL, n, NULL) : 0;
        if (mode < GVAR_ASSIGN || mode > GVAR_DIV || n->in[0].node != pc->node || n->in[0].out != 0) continue;
        if ((pc->kind != PI_KERNEL && pc->kind != PI_FUSED) || pc->defer || uses[pc->out] != 1) continue;
        tfe_axpy_prog ax;
        struct tfe_fkernel *k = update_kernel(g, &g->nodes[pc->node], mode, &ax);
        if (!k) continue;
        c->upd_axpy = ax;
        c->kind = PI_UPDATE;
        c->prod = i - 1;
        c->mode = mode;
        c->upd = k;
        pc->defer = true;
        p->nupdates++;
        prod_at[pos[i]] = pc->node;
        for (int j = 0; j < pc->nin; j++)
            if (last[pc->in[j]] == pos[i - 1]) last[pc->in[j]] = pos[i];
    }
}

/* Is the fused node dn (instruction d) relu(a + b) with y (slot) one of a
 * and b and the other another value? The position of y's operand in the
 * add (0: y + h, 1: h + y), or -1. */
static int add_relu_y(const GNode *dn, const PInstr *d, int y)
{
    const tfe_fprog *pr = dn->prog;
    if (!pr || pr->red || pr->ninputs != 2 || pr->ninstr != 4 || d->nin != 2 || d->in[0] == d->in[1]) return -1;
    const tfe_finstr *l0 = &pr->code[0], *l1 = &pr->code[1], *ad = &pr->code[2], *re = &pr->code[3];
    if (l0->op != FOP_LOAD || l1->op != FOP_LOAD || l0->dst == l1->dst || ad->op != OP_ADD || re->op != OP_RELU ||
        re->a != ad->dst || re->dst != pr->result)
        return -1;
    int in_a = ad->a == l0->dst ? l0->input : ad->a == l1->dst ? l1->input : -1;
    int in_b = ad->b == l0->dst ? l0->input : ad->b == l1->dst ? l1->input : -1;
    if (in_a < 0 || in_b < 0 || in_a == in_b) return -1;
    return d->in[in_a] == y ? 0 : d->in[in_b] == y ? 1 : -1;
}

/* Batch-norm epilogues (no op of their own: tensor/ops.h). A relu that
 * reads the y of the batch_norm_train just before it, or a fused group
 * that is relu(y + h) or relu(h + y) (a residual block's end), y read by
 * nothing else, runs inside that kernel, which writes the relu's output,
 * and y gets no block (the relu or group skips: PInstr.skip). A
 * batch_norm_grad whose dy is the relu_grad(dy', a) just before it, read
 * by nothing else, reads dy' and a and computes relu_grad's value where it
 * reads dy (two passes over dy' and a instead of one more pass writing dy,
 * and no block for dy); dy' and a then live until it. Each element gets
 * the two ops' own formulas in their order (tensor/kernels_bn.c), so the
 * bits are the unfused ones. Only with both on the CPU, in the same dtype
 * and shape (no broadcast), and neither making an update's operand. */
static void plan_bn_epilogues(ExecPlan *p, const Graph *g, const int *pos, const int *uses, int *last, bool *ok,
                              int *prod_at)
{
    if (tfe_devices_used) return;
    for (int i = 0; i + 1 < p->ncode; i++) {
        PInstr *c = &p->code[i], *d = &p->code[i + 1];
        if (c->kind != PI_KERNEL || (d->kind != PI_KERNEL && d->kind != PI_FUSED) || c->defer || d->defer ||
            c->skip || d->skip || c->epi)
            continue;
        const GNode *cn = &g->nodes[c->node], *dn = &g->nodes[d->node];
        if (cn->kind != G_OP || uses[c->out] != 1 || !ok[c->out]) continue;
        const tfe_meta *m = &cn->meta[0];
        if (m->dtype != TFE_FLOAT32 && m->dtype != TFE_FLOAT64) continue;
        /* batch_norm_train: the output written for the next instruction
         * is placed after this one's blocks are freed, so it could take the
         * block of a value the kernel reads while it writes (gamma, beta,
         * or its own mean and variance when nothing reads them): only when
         * those live on (or are not in the arena). x's block is safe: the
         * same size, so the very same bytes, and the kernel reads each
         * element before it writes it there. */
        bool live_on = true;
        for (int k = 1; k < 3 && cn->op == OP_BATCH_NORM_TRAIN && c->nin == 3; k++)
            live_on &= (!ok[c->in[k]] || last[c->in[k]] > pos[i + 1]) &&
                       (!ok[c->out + k] || last[c->out + k] > pos[i + 1]);
        if (!live_on) continue;
        bool bn = cn->op == OP_BATCH_NORM_TRAIN && c->kernel == tfe_ops[OP_BATCH_NORM_TRAIN].cpu_kernel;
        if (bn && dn->kind == G_OP && dn->op == OP_RELU && d->nin == 1 && d->in[0] == c->out && dn->nout == 1 &&
            opt_same_meta(&dn->meta[0], m)) {
            c->kernel = k_batch_norm_train_relu;
            c->epi = i + 2;
            d->skip = true;
            ok[c->out] = false; /* never made */
            p->nbnrelu++;
            continue;
        }
        int ia = d->kind == PI_FUSED ? add_relu_y(dn, d, c->out) : -1;
        if (bn && ia >= 0 && opt_same_meta(&dn->meta[0], m) &&
            opt_same_meta(&g->nodes[dn->in[1 - ia].node].meta[dn->in[1 - ia].out], m)) {
            int *in = xmalloc(sizeof *in * 4);
            for (int k = 0; k < 3; k++) in[k] = c->in[k];
            in[3] = d->in[1 - ia];
            free(c->in);
            c->in = in;
            c->nin = 4;
            c->kernel = ia == 0 ? k_batch_norm_train_add_relu : k_batch_norm_train_radd_relu;
            c->epi = i + 2;
            d->skip = true;
            ok[c->out] = false;
            p->nbnrelu++;
            continue;
        }
        if (cn->op == OP_RELU_GRAD && c->nin == 2 && cn->nout == 1 && dn->kind == G_OP && d->in[0] == c->out &&
            dn->op == OP_BATCH_NORM_GRAD && d->kernel == tfe_ops[OP_BATCH_NORM_GRAD].cpu_kernel && d->nin == 7) {
            const tfe_meta *a = &g->nodes[cn->in[0].node].meta[cn->in[0].out];
            const tfe_meta *b = &g->nodes[cn->in[1].node].meta[cn->in[1].out];
            const tfe_meta *xm = &g->nodes[dn->in[3].node].meta[dn->in[3].out];
            if (!opt_same_meta(a, m) || !opt_same_meta(b, m) || !opt_same_meta(xm, m) || a->weak || b->weak) continue;
            int *in = xmalloc(sizeof *in * 8);
            for (int k = 0; k < 7; k++) in[k] = d->in[k];
            in[0] = c->in[0];
            in[7] = c->in[1];
            free(d->in);
            d->in = in;
            d->nin = 8;
            d->kernel = k_batch_norm_grad_relu;
            c->skip = true;
            ok[c->out] = false;
            prod_at[pos[i + 1]] = c->node; /* the arena: its inputs are read there */
            for (int k = 0; k < 2; k++)
                if (last[c->in[k]] == pos[i]) last[c->in[k]] = pos[i + 1];
            p->nbnrelu++;
        }
    }
}

/* A conv with its batch norm (the conv-bn-relu of an inference network):
 * a conv2d whose output only a batch_norm_infer reads, further on (between
 * them, typically, the reads of the batch norm's variables), becomes one
 * instruction at the batch norm's place that runs the conv and writes the
 * batch norm's output (k_conv2d_bn_infer: its formula on each sum as the
 * conv writes it, the bits of the two ops); a relu just after that reads
 * it alone joins (k_conv2d_bn_infer_relu), writing the relu's output, and
 * so does a fused relu(y + h) or relu(h + y) (a residual block's end:
 * k_conv2d_bn_infer_add_relu, _radd_relu), writing the group's. The
 * conv's output is never made (one pass over the activations less, and its
 * block), and the conv's inputs live on to the batch norm's place.
 * Not the weights folded into the filter (w * gamma / sqrt(var + eps)):
 * that changes the roundings, so the staged network would no longer give
 * eager's bits (docs/optimizer.md). With the relu (the group), the output
 * is placed at the relu's place, after the blocks of values read for the
 * last time at the batch norm are free: only when each input of the fused
 * call lives on past it (or is not in the arena), as in
 * plan_bn_epilogues, the conv's own inputs being freed at the relu's
 * place when nothing else reads them; h's block is never the output's
 * (keep_apart). No backward
 * reads the conv's output from a plan's run: under a tape, a graph whose
 * backward reads its values runs as traced (stage/grad.c, keep_graph). */
static void plan_conv_bn(ExecPlan *p, const Graph *g, const int *pos, const int *uses, int *last, bool *ok,
                         int *prod_at, bool *keep_apart)
{
    if (tfe_devices_used) return;
    for (int i = 0; i < p->ncode; i++) {
        PInstr *c = &p->code[i];
        const GNode *cn = &g->nodes[c->node];
        if (c->kind != PI_KERNEL || c->defer || c->skip || c->epi || c->pair || cn->kind != G_OP ||
            cn->op != OP_CONV2D || c->nin != 2 || c->nout != 1 || c->kernel != tfe_ops[OP_CONV2D].cpu_kernel ||
            uses[c->out] != 1 || !ok[c->out])
            continue;
        const tfe_meta *m = &cn->meta[0];
        if ((m->dtype != TFE_FLOAT32 && m->dtype != TFE_FLOAT64) || m->weak) continue;
        /* the one instruction that reads the conv's output */
        int j = i + 1;
        for (bool reads = false; j < p->ncode; j++) {
            for (int k = 0; k < p->code[j].nin && !reads; k++) reads = p->code[j].in[k] == c->out;
            if (reads) break;
        }
        if (j >= p->ncode) continue;
        PInstr *d = &p->code[j];
        const GNode *dn = &g->nodes[d->node];
        if (d->kind != PI_KERNEL || d->defer || d->skip || d->epi || d->pair || dn->kind != G_OP ||
            dn->op != OP_BATCH_NORM_INFER || d->nin != 5 || d->nout != 1 ||
            d->kernel != tfe_ops[OP_BATCH_NORM_INFER].cpu_kernel || d->in[0] != c->out ||
            !opt_same_meta(&dn->meta[0], m) || prod_at[pos[j]] >= 0)
            continue;
        bool fits = true; /* gamma, beta, mean, var: vectors of the channels, the dtype */
        for (int k = 1; k < 5; k++) {
            const tfe_meta *vm = &g->nodes[dn->in[k].node].meta[dn->in[k].out];
            fits &= d->in[k] != c->out && vm->dtype == m->dtype && vm->rank == 1 && vm->shape[0] == m->shape[3];
        }
        if (!fits) continue;
        /* the relu after it, or a fused relu(y + h) or relu(h + y), when
         * it reads the batch norm's output y alone */
        PInstr *e = j + 1 < p->ncode ? &p->code[j + 1] : NULL;
        const GNode *en = e ? &g->nodes[e->node] : NULL;
        bool next = e && (e->kind == PI_KERNEL || e->kind == PI_FUSED) && !e->defer && !e->skip && !e->epi &&
                    !e->pair && en->nout == 1 && uses[d->out] == 1 && ok[d->out] && opt_same_meta(&en->meta[0], m);
        bool relu = next && e->kind == PI_KERNEL && en->kind == G_OP && en->op == OP_RELU && e->nin == 1 &&
                    e->in[0] == d->out && en->nout == 1;
        int ia = next && e->kind == PI_FUSED ? add_relu_y(en, e, d->out) : -1;
        int h = ia >= 0 ? e->in[1 - ia] : -1;
        if (h >= 0) {
            const tfe_meta *hm = &g->nodes[en->in[1 - ia].node].meta[en->in[1 - ia].out];
            if (!opt_same_meta(hm, m) || hm->weak || h == c->out) ia = -1, h = -1;
        }
        int fin[7] = {c->in[0], c->in[1], d->in[1], d->in[2], d->in[3], d->in[4], h};
        int nfin = h >= 0 ? 7 : 6;
        /* the output is placed at e's place, after the blocks of values
         * read for the last time before it are free: each input must live
         * to e's place, where blocks are freed after the output took its
         * own. The conv's, read for the last time at the batch norm, are
         * freed at e's place instead (prod_at); h (maybe the conv's x
         * too), read at e, must not give the output its block in place
         * (keep_apart: a tile stores partial sums before its last store
         * reads h) */
        bool conv_at_e = (relu || h >= 0) && prod_at[pos[j + 1]] < 0;
        for (int k = 0; (relu || h >= 0) && k < 6; k++) {
            bool moves = k < 2 && conv_at_e && (!ok[fin[k]] || last[fin[k]] <= pos[j]);
            if (ok[fin[k]] && last[fin[k]] < pos[j + 1] && !moves) relu = false, ia = h = -1;
        }
        if (h < 0) nfin = 6;
        bool epi = relu || h >= 0;
        free(d->in);
        d->in = xmalloc(sizeof(int) * (size_t)nfin);
        mem_copy(d->in, fin, sizeof(int) * (size_t)nfin);
        d->nin = nfin;
        d->kernel = h >= 0 ? (ia == 0 ? k_conv2d_bn_infer_add_relu : k_conv2d_bn_infer_radd_relu)
                  : relu   ? k_conv2d_bn_infer_relu
                           : k_conv2d_bn_infer;
        d->name = h >= 0 ? (ia == 0 ? "conv2d+batch_norm_infer+add+relu" : "conv2d+batch_norm_infer+radd+relu")
                : relu   ? "conv2d+batch_norm_infer+relu"
                         : "conv2d+batch_norm_infer";
        d->at = xmalloc(sizeof *d->at);
        *d->at = *cn->at;
        d->at->f[0] = dn->at->f[0];
        c->skip = true;
        ok[c->out] = false; /* never made */
        /* the conv's inputs are read at the batch norm's place, where the
         * arena frees them (prod_at), or at e's (above) */
        int at = epi && conv_at_e ? pos[j + 1] : pos[j];
        prod_at[at] = c->node;
        for (int k = 0; k < 2; k++)
            if (last[c->in[k]] < at) last[c->in[k]] = at;
        if (epi) {
            d->epi = j + 2;
            e->skip = true;
            ok[d->out] = false;
        }
        if (h >= 0) keep_apart[pos[j + 1]] = true;
        p->nconvbn++;
    }
}

/* Each value of the top region that only its ops read, and no result, is
 * released after the instruction that reads it last (PInstr.drop): its
 * memory goes back as soon as it can, and a variable's value is then held
 * by the variable alone when an update can write it in place. */
static void plan_drops(ExecPlan *p, const Graph *g, const int *pos, const int *last)
{
    int nv = g->nvals;
    bool *no = xcalloc((size_t)nv + 1, sizeof *no);
    int *code_at = xmalloc(sizeof *code_at * ((size_t)g->regions[0].n + 1));
    for (int i = 0; i < g->regions[0].n; i++) code_at[i] = -1;
    for (int i = 0; i < p->ncode; i++) code_at[pos[i]] = i;
    for (int id = 0; id < g->n; id++) {
        const GNode *n = &g->nodes[id];
        if (n->region != 0)
            for (int k = 0; k < n->nout; k++) no[n->vbase + k] = true;
        for (int k = 0; n->region != 0 && k < n->nin; k++) no[g->nodes[n->in[k].node].vbase + n->in[k].out] = true;
        /* a collective's buffers live to the end: an allreduce's halves
         * (graph/exec_dist.c) read their input while MPI may still use it,
         * and the wait reads the start's input, which is not its own */
        if (n->kind == G_OP && (tfe_ops[n->op].flags & F_COLLECTIVE))
            for (int k = 0; k < n->nin; k++) {
                const GNode *in = &g->nodes[n->in[k].node];
                no[in->vbase + n->in[k].out] = true;
                for (int j = 0; j < in->nin; j++) no[g->nodes[in->in[j].node].vbase + in->in[j].out] = true;
            }
    }
    for (int r = 0; r < g->nregions; r++)
        for (int k = 0; k < g->regions[r].nouts; k++)
            no[g->nodes[g->regions[r].outs[k].node].vbase + g->regions[r].outs[k].out] = true;
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < nv; s++) {
            if (no[s] || last[s] < 0 || code_at[last[s]] < 0) continue;
            PInstr *c = &p->code[code_at[last[s]]];
            if (pass) c->drop[c->ndrop++] = s;
            else c->ndrop++;
        }
        for (int i = 0; !pass && i < p->ncode; i++) {
            p->code[i].drop = p->code[i].ndrop ? xmalloc(sizeof(int) * (size_t)p->code[i].ndrop) : NULL;
            p->code[i].ndrop = 0;
        }
    }
    free(code_at);
    free(no);
}

/* A value's stretch of the arena and of the plan, for check_arena. */
typedef struct {
    int64_t off, end;  /* bytes */
    int from, to, slot; /* top-region places: made, last read (itself when unread) */
} Span;

static int span_by_offset(const void *a, const void *b)
{
    const Span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The arena's invariant, checked on every plan that is built (a broken one
 * is a silent wrong answer, so it stops the program instead): two values
 * whose blocks overlap are never live at the same place, except an output
 * that took over, in place, the block of an input read there for the
 * last time (inplace_of). Live: from the place of the node that makes it
 * to the place that reads it last (last[], as the joins left it). Sorted
 * by offset, each value is compared with those that start inside it. */
static void check_arena(const ExecPlan *p, const Graph *g, const GRegion *top, const int *last, const int *inplace_of)
{
    Span *sp = xmalloc(sizeof *sp * ((size_t)g->nvals + 1));
    int ns = 0;
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        for (int o = 0; o < n->nout; o++) {
            int s = n->vbase + o;
            if (p->offset[s] < 0) continue;
            sp[ns++] = (Span){p->offset[s], p->offset[s] + value_bytes(&n->meta[o]), i, last[s] > i ? last[s] : i, s};
        }
    }
    qsort(sp, (size_t)ns, sizeof *sp, span_by_offset);
    for (int a = 0; a < ns; a++)
        for (int b = a + 1; b < ns && sp[b].off < sp[a].end; b++) {
            const Span *x = &sp[a], *y = &sp[b];
            if (x->to < y->from || y->to < x->from) continue;
            if ((inplace_of[y->slot] == x->slot && x->to == y->from) ||
                (inplace_of[x->slot] == y->slot && y->to == x->from))
                continue;
            fprintf(stderr,
                    "tfe: internal error: the plan's arena gives values %d and %d overlapping bytes ([%lld, %lld) "
                    "and [%lld, %lld)) while both are live (places %d-%d and %d-%d); please report it\n",
                    x->slot, y->slot, (long long)x->off, (long long)x->end, (long long)y->off, (long long)y->end,
                    x->from, x->to, y->from, y->to);
            abort();
        }
    free(sp);
}

ExecPlan *exec_plan_build(const Graph *g)
{
    const GRegion *top = &g->regions[0];
    /* a relaxed graph: shapes change from call to call */
    for (int i = 0; i < g->ninputs; i++) {
        const tfe_meta *m = &g->nodes[g->inputs[i]].meta[0];
        for (int d = 0; d < m->rank; d++)
            if (m->shape[d] < 0) return NULL;
    }
    int nv = g->nvals;
    /* where each value is last read in the top region, and whether anything
     * else reads it */
    int *last = xmalloc(sizeof *last * (size_t)(nv + 1));
    bool *ok = xmalloc(sizeof *ok * (size_t)(nv + 1));
    for (int s = 0; s < nv; s++) last[s] = -1, ok[s] = false;
    bool *known = xcalloc((size_t)nv + 1, sizeof *known);
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        for (int k = 0; plannable_op(n) && k < n->nout; k++)
            ok[n->vbase + k] = known[n->vbase + k] = meta_known(&n->meta[k]);
    }
    for (int id = 0; id < g->n; id++) {
        const GNode *n = &g->nodes[id];
        bool reader_ok = n->region == 0 && plannable_op(n);
        for (int k = 0; k < n->nin; k++) {
            int s = g->nodes[n->in[k].node].vbase + n->in[k].out;
            if (!reader_ok) ok[s] = false;
        }
    }
    for (int r = 0; r < g->nregions; r++)
        for (int k = 0; k < g->regions[r].nouts; k++)
            ok[g->nodes[g->regions[r].outs[k].node].vbase + g->regions[r].outs[k].out] = false;
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        for (int k = 0; k < n->nin; k++) last[g->nodes[n->in[k].node].vbase + n->in[k].out] = i;
    }
    ExecPlan *p = xcalloc(1, sizeof *p);
    int *pos = xmalloc(sizeof *pos * ((size_t)top->n + 1));
    compile_code(p, g, known, pos);
    free(known);
    int *uses = xcalloc((size_t)nv + 1, sizeof *uses);
    for (int id = 0; id < g->n; id++)
        for (int k = 0; k < g->nodes[id].nin; k++) uses[g->nodes[g->nodes[id].in[k].node].vbase + g->nodes[id].in[k].out]++;
    for (int r = 0; r < g->nregions; r++)
        for (int k = 0; k < g->regions[r].nouts; k++)
            uses[g->nodes[g->regions[r].outs[k].node].vbase + g->regions[r].outs[k].out]++;
    /* by top-region index: the operand's node an update runs there, or -1 */
    int *prod_at = xmalloc(sizeof *prod_at * ((size_t)top->n + 1));
    for (int i = 0; i < top->n; i++) prod_at[i] = -1;
    plan_updates(p, g, pos, uses, last, prod_at);
    /* by top-region index: the output placed there never takes an input's
     * block in place */
    bool *keep_apart = xcalloc((size_t)top->n + 1, sizeof *keep_apart);
    plan_conv_bn(p, g, pos, uses, last, ok, prod_at, keep_apart);
    plan_bn_epilogues(p, g, pos, uses, last, ok, prod_at);
    plan_drops(p, g, pos, last);
    free(uses);
    free(pos);
    p->nslots = nv;
    p->offset = xmalloc(sizeof *p->offset * (size_t)(nv + 1));
    for (int s = 0; s < nv; s++) p->offset[s] = -1;
    Block *freeb = xmalloc(sizeof *freeb * (size_t)(nv + 1));
    int nfree = 0;
    int *inplace_of = xmalloc(sizeof *inplace_of * (size_t)(nv + 1)); /* for check_arena */
    for (int s = 0; s < nv; s++) inplace_of[s] = -1;
    int64_t end = 0;
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        int s = n->vbase;
        int inplace = -1; /* the input whose block the output takes over */
        if (n->nout == 1 && ok[s] && last[s] > i && n->kind == G_FUSED && fused_in_place_ok(n) && !keep_apart[i]) {
            for (int k = 0; k < n->nin && inplace < 0; k++) {
                int is = g->nodes[n->in[k].node].vbase + n->in[k].out;
                if (p->offset[is] >= 0 && last[is] == i &&
                    meta_same_shape(&g->nodes[n->in[k].node].meta[n->in[k].out], &n->meta[0]))
                    inplace = is;
            }
        }
        int ik = op_in_place_input(n);
        if (ik >= 0 && ok[s] && last[s] > i && !keep_apart[i]) {
            /* a batch_norm_grad with a relu_grad fused in: in place of dy' */
            const GNode *rg = prod_at[i] >= 0 && n->op == OP_BATCH_NORM_GRAD ? &g->nodes[prod_at[i]] : NULL;
            GRef ir = rg ? rg->in[0] : n->in[ik];
            int is = g->nodes[ir.node].vbase + ir.out;
            bool alone = true; /* not also another input, which the kernel reads apart */
            for (int k = 0; k < n->nin; k++)
                alone &= k == ik || g->nodes[n->in[k].node].vbase + n->in[k].out != is;
            if (rg) alone &= g->nodes[rg->in[1].node].vbase + rg->in[1].out != is;
            if (alone && p->offset[is] >= 0 && last[is] == i &&
                meta_same_shape(&g->nodes[ir.node].meta[ir.out], &n->meta[0]))
                inplace = is;
        }
        int nunread = 0; /* outputs placed that nothing reads: freed right after */
        for (int o = 0; o < n->nout; o++) {
            /* every output of an op of several outputs has a block, read
             * or not: its kernel writes them all, and the arena's bytes
             * cost nothing per call, a new tensor does */
            bool unread = n->nout > 1 && ok[s + o] && last[s + o] < 0;
            if (o == 0 && inplace >= 0) {
                p->offset[s] = p->offset[inplace];
                inplace_of[s] = inplace;
                p->sum_bytes += (size_t)value_bytes(&n->meta[0]);
                p->nplanned++;
                p->ninplace++;
            } else if (ok[s + o] && (last[s + o] > i || unread)) {
                int64_t size = value_bytes(&n->meta[o]);
                int best = -1;
                for (int b = 0; b < nfree; b++)
                    if (freeb[b].size >= size && (best < 0 || freeb[b].size < freeb[best].size)) best = b;
                if (best >= 0) {
                    p->offset[s + o] = freeb[best].off;
                    freeb[best].off += size;
                    freeb[best].size -= size;
                    if (freeb[best].size == 0) freeb[best] = freeb[--nfree]; /* used up: the list stays short */
                } else {
                    p->offset[s + o] = end;
                    end += size;
                }
                p->sum_bytes += (size_t)size;
                p->nplanned++;
                nunread += unread;
            }
        }
        /* inputs read here for the last time free their blocks (after the
         * output took its own: an output never overlaps its inputs); the
         * inputs of the node whose work runs here too (prod_at: an update's
         * operand, a conv joined to its batch norm, a relu_grad inside
         * batch_norm_grad) are read here as well. A block is freed once,
         * though a value may be an input of both (the conv's x that is
         * also the residual h of relu(bn(conv(x)) + x)): twice on the
         * free list, two later values would share it */
        const GNode *rns[2] = {n, prod_at[i] >= 0 ? &g->nodes[prod_at[i]] : NULL};
        for (int r = 0; r < 2 && rns[r]; r++)
            for (int k = 0; k < rns[r]->nin; k++) {
                int is = g->nodes[rns[r]->in[k].node].vbase + rns[r]->in[k].out;
                if (p->offset[is] < 0 || last[is] != i || is == inplace) continue;
                bool dup = false; /* the same input twice, in this node or the one before */
                for (int q = 0; q <= r && !dup; q++)
                    for (int j = 0; j < (q < r ? rns[q]->nin : k); j++)
                        dup |= g->nodes[rns[q]->in[j].node].vbase + rns[q]->in[j].out == is;
                if (dup) continue;
                freeb[nfree++] =
                    (Block){p->offset[is], value_bytes(&g->nodes[rns[r]->in[k].node].meta[rns[r]->in[k].out])};
            }
        for (int o = 0; nunread && o < n->nout; o++)
            if (p->offset[s + o] >= 0 && last[s + o] < 0) freeb[nfree++] = (Block){p->offset[s + o], value_bytes(&n->meta[o])};
    }
    free(prod_at);
    free(keep_apart);
    check_arena(p, g, top, last, inplace_of);
    free(inplace_of);
    p->arena_bytes = (size_t)end;
    free(freeb);
    free(last);
    free(ok);
    sched_pairs(p, g); /* knows the arena: it keeps pairs off shared blocks */
    return p;
}

void exec_plan_free(ExecPlan *p)
{
    if (!p) return;
    for (int i = 0; i < p->ncode; i++) {
        free(p->code[i].at);
        free(p->code[i].in);
        free(p->code[i].drop);
        if (p->code[i].upd) tfe_fused_free(p->code[i].upd);
        for (int k = 0; k < p->code[i].nout; k++)
            if (p->code[i].view[k]) tensor_decref(p->code[i].view[k]);
        free(p->code[i].view);
    }
    free(p->code);
    if (p->arena) tensor_decref(p->arena);
    free(p->offset);
    free(p);
}

tfe_tensor *exec_plan_tensor(ExecPlan *p, int slot, const tfe_meta *m)
{
    if (slot >= p->nslots || p->offset[slot] < 0) return NULL;
    if (!p->arena) {
        int64_t n = (int64_t)p->arena_bytes;
        /* its exact size: a size class would round 5.5 MB up to 6 MB */
        if (!(p->arena = tensor_new_exact(n))) {
            tfe_error_clear();
            return NULL;
        }
    }
    int64_t strides[TFE_MAX_RANK], st = (int64_t)dtype_size(m->dtype);
    for (int d = m->rank - 1; d >= 0; d--) {
        strides[d] = st;
        st *= m->shape[d];
    }
    tfe_tensor *t = tensor_view(p->arena, m->rank, m->shape, strides, p->arena->offset + p->offset[slot]);
    if (!t) return NULL;
    t->dtype = m->dtype;
    t->weak = m->weak;
    return t;
}

/* --- TFE_DEBUG=3 and 4: the plan and the fused programs as text ---------------------- */

/* The node whose value slot is s (its output k). */
static GRef slot_ref(const Graph *g, int s)
{
    for (int id = 0; id < g->n; id++)
        if (s >= g->nodes[id].vbase && s < g->nodes[id].vbase + g->nodes[id].nout)
            return (GRef){id, s - g->nodes[id].vbase};
    return (GRef){-1, 0};
}

char *exec_plan_to_text(const Graph *g, const ExecPlan *p)
{
    Buf b = {0};
    char line[200];
    snprintf(line, sizeof line, "%d instructions (%d kernel, %d fused, %d node), arena %zu bytes for %zu, %d in place",
             p->ncode, p->nkernel, p->nfused, p->ncode - p->nkernel - p->nfused, p->arena_bytes, p->sum_bytes,
             p->ninplace);
    buf_puts(&b, line);
    if (p->nbnrelu) {
        snprintf(line, sizeof line, ", %d batch-norm epilogues", p->nbnrelu);
        buf_puts(&b, line);
    }
    if (p->nconvbn) {
        snprintf(line, sizeof line, ", %d conv%s with %s batch norm", p->nconvbn, p->nconvbn == 1 ? "" : "s",
                 p->nconvbn == 1 ? "its" : "their");
        buf_puts(&b, line);
    }
    buf_puts(&b, "\n");
    for (int i = 0; i < p->ncode; i++) {
        const PInstr *c = &p->code[i];
        const GNode *n = &g->nodes[c->node];
        buf_puts(&b, "  ");
        graph_put_ref(&b, g, (GRef){c->node, 0});
        buf_puts(&b, c->kind == PI_KERNEL ? " = kernel " : c->kind == PI_FUSED ? " = fused " : " = node ");
        if (n->kind == G_OP) buf_puts(&b, tfe_ops[n->op].name);
        else if (n->kind == G_FUSED) {
            int k = 0;
            buf_puts(&b, "{");
            for (int j = 0; j < n->prog->ninstr; j++) {
                int op = n->prog->code[j].op;
                if (op == FOP_LOAD || op == FOP_CONST) continue;
                if (k++) buf_puts(&b, " ");
                buf_puts(&b, tfe_fop_name(op));
            }
            buf_puts(&b, "}");
            if (n->prog->red) buf_puts(&b, n->prog->red == TFE_FRED_SUM ? " then sum" : " then mean");
        } else {
            static const char *const kinds[] = {[G_HOST] = "host", [G_VAR_READ] = "var_read", [G_COND] = "cond",
                                                [G_WHILE] = "while"};
            buf_puts(&b, (int)n->kind < (int)(sizeof kinds / sizeof *kinds) && kinds[n->kind] ? kinds[n->kind] : "node");
        }
        buf_puts(&b, "(");
        graph_put_refs(&b, g, n->in, n->nin);
        buf_puts(&b, ")");
        if (n->nout >= 1 && n->meta) {
            buf_puts(&b, " ");
            graph_put_meta(&b, &n->meta[0]);
        }
        int64_t off = c->out < p->nslots ? p->offset[c->out] : -1;
        if (off >= 0) {
            snprintf(line, sizeof line, " @%lld", (long long)off);
            buf_puts(&b, line);
            /* an output never shares bytes with its inputs but in place */
            for (int k = 0; k < c->nin; k++)
                if (p->offset[c->in[k]] == off) {
                    buf_puts(&b, " in place of ");
                    graph_put_ref(&b, g, slot_ref(g, c->in[k]));
                    break;
                }
        } else if (c->epi) {
            buf_puts(&b, " not made (the kernel writes the relu's output)");
        } else if (c->kind != PI_NODE && !c->skip) {
            buf_puts(&b, " new");
        }
        /* the other outputs of an op of several (never in place) */
        for (int k = 1; n->kind == G_OP && n->meta && k < n->nout; k++) {
            buf_puts(&b, ", ");
            graph_put_ref(&b, g, (GRef){c->node, k});
            buf_puts(&b, " ");
            graph_put_meta(&b, &n->meta[k]);
            off = n->vbase + k < p->nslots ? p->offset[n->vbase + k] : -1;
            if (off >= 0) {
                snprintf(line, sizeof line, " @%lld", (long long)off);
                buf_puts(&b, line);
            } else if (c->kind != PI_NODE) {
                buf_puts(&b, " new");
            }
        }
        if (c->skip && n->kind == G_OP && n->op == OP_CONV2D)
            buf_puts(&b, " (runs at its batch_norm_infer, which it writes)");
        else if (c->skip) buf_puts(&b, " (runs inside the batch-norm kernel next to it)");
        buf_puts(&b, "\n");
    }
    if (!b.s) buf_puts(&b, "");
    return b.s;
}

char *graph_fused_programs_text(const Graph *g)
{
    Buf b = {0};
    char line[200];
    for (int id = 0; id < g->n; id++) {
        const GNode *n = &g->nodes[id];
        if (n->kind != G_FUSED || !n->prog) continue;
        const tfe_fprog *pg = n->prog;
        buf_puts(&b, "");
        graph_put_ref(&b, g, (GRef){id, 0});
        snprintf(line, sizeof line, ": %s, %d inputs, %d registers, result r%d%s\n", dtype_name(pg->dtype), pg->ninputs,
                 pg->nregs, pg->result, pg->red == TFE_FRED_SUM ? ", then sum" : pg->red == TFE_FRED_MEAN ? ", then mean" : "");
        buf_puts(&b, line);
        for (int i = 0; i < pg->ninstr; i++) {
            const tfe_finstr *in = &pg->code[i];
            int na = tfe_fop_nargs(in->op);
            if (in->op == FOP_LOAD) snprintf(line, sizeof line, "  r%d = load input %d\n", in->dst, in->input);
            else if (in->op == FOP_CONST) snprintf(line, sizeof line, "  r%d = const %.17g\n", in->dst, in->imm);
            else if (na == 1) snprintf(line, sizeof line, "  r%d = %s r%d\n", in->dst, tfe_fop_name(in->op), in->a);
            else snprintf(line, sizeof line, "  r%d = %s r%d r%d\n", in->dst, tfe_fop_name(in->op), in->a, in->b);
            buf_puts(&b, line);
        }
    }
    if (!b.s) buf_puts(&b, "");
    return b.s;
}
