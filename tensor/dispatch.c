/* dispatch.c — the op table generated from ops.def, name lookup, the one
 * dispatch entry tfe_execute and its convenience wrappers, and running an op
 * where its inputs live (tfe_device_execute: a GPU kernel when the backend
 * has one, else the CPU kernel on copies). */
#include <stdlib.h>
#include <string.h>

#include "tensor/device.h"
#include "tensor/grad.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "tensor/profile.h"
#include "util/xalloc.h"

const tfe_opinfo tfe_ops[TFE_NOPS] = {
#define OP(id, nm, ni, no, fl, inf, ker, grad) \
    [OP_##id] = {.name = nm, .nin = ni, .nout = no, .flags = fl, .infer = inf, .cpu_kernel = ker},
#include "tensor/ops.def"
#undef OP
};

int tfe_op_lookup(const char *name) {
    for (int i = 0; i < TFE_NOPS; i++)
        if (strcmp(tfe_ops[i].name, name) == 0) return i;
    return -1;
}

static int unsupported_dtype(const char *op, tfe_dtype dt) {
    tfe_error_set("%s: dtype %s is not supported on cpu:0", op, dtype_name(dt));
    return -1;
}

int (*tfe_trace_hook)(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);

int tfe_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out) {
    /* Staging (stage/trace.c): while a trace records, the tracer decides
     * whether to add a node, run the kernel, or both. */
    if (tfe_trace_hook) {
        int rc = tfe_trace_hook(op, nin, in, at, out);
        if (!rc) tfe_prov_propagate(op, nin, in, tfe_ops[op].nout >= 0 ? tfe_ops[op].nout : at ? at->nints : 0, out);
        if (!rc && (op == OP_SOFTMAX || op == OP_SIGMOID) && out[0]) tfe_mark_prob_out(op, out[0]); /* (the traced tensor too) */
        return rc;
    }
    return tfe_execute_eager(op, nin, in, at, out);
}

void tfe_prov_propagate(int op, int nin, tfe_tensor *const *in, int nout, tfe_tensor *const *out) {
    if (tfe_ops[op].flags & F_NODIFF) return;
    uint64_t any = 0;
    for (int i = 0; i < nin; i++) any |= in[i] ? in[i]->prov : 0;
    if (!any) return; /* (the common case: nothing computed from a variable) */
    tfe_prov_collect();
    uint64_t m = 0;
    for (int i = 0; i < nin; i++) m = tfe_prov_union(m, in[i] ? in[i]->prov : 0);
    tfe_prov_retain(m); /* (held while the outputs take unions with it) */
    for (int k = 0; k < nout; k++)
        if (out[k] && dtype_is_float(out[k]->dtype)) tfe_prov_assign(&out[k]->prov, tfe_prov_union(out[k]->prov, m));
    tfe_prov_release(m);
}

void tfe_mark_prob_out(int op, tfe_tensor *out) {
    if (op == OP_SOFTMAX) out->softmax_out = true;
    else out->sigmoid_out = true;
}

/* Eager execution. The only path from the interpreter, the tracer, the
 * graph executor and the tape to a kernel. While a profile records (or
 * TFE_DEBUG >= 2) the op is timed (tensor/profile.c); otherwise that costs
 * one predictable branch. */
int tfe_execute_eager(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out) {
    if (__builtin_expect(prof_hooked, 0)) return tfe_prof_execute(op, nin, in, at, out);
    return tfe_execute_eager_unprofiled(op, nin, in, at, out);
}

int tfe_execute_eager_unprofiled(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out) {
    static tfe_attrs default_attrs = {.naxes = -1, .dtype = TFE_FLOAT32};
    const tfe_opinfo *info = &tfe_ops[op];
    if (!at) at = &default_attrs;
    if (info->nin >= 0 && nin != info->nin) {
        tfe_error_set("%s: expected %d tensor argument%s, got %d", info->name, info->nin,
                      info->nin == 1 ? "" : "s", nin);
        return -1;
    }
    /* Devices (tensor/device.c): once a tensor went to a GPU or the
     * default device changed, the device layer decides where the op runs. */
    int rc = 1;
    if (tfe_devices_used) rc = tfe_device_execute(op, nin, in, at, out);
    if (rc == 1) rc = tfe_execute_kernel(op, nin, in, at, out, true);
    if (!rc && (op == OP_SOFTMAX || op == OP_SIGMOID) && out[0]) tfe_mark_prob_out(op, out[0]); /* tfe_tensor.softmax_out */
    return rc;
}

/* The CPU kernel of an op whose inputs are all on cpu:0. */
int tfe_execute_kernel(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out,
                       bool record) {
    const tfe_opinfo *info = &tfe_ops[op];
    int nout = info->nout >= 0 ? info->nout : at->nints;
    bool half_ok = info->flags & F_HALF;
    for (int i = 0; i < nin && !half_ok; i++)
        if (in[i]->dtype >= TFE_FLOAT16) return unsupported_dtype(info->name, in[i]->dtype);

    const tfe_opcall c = {.op = op, .nin = nin, .nout = nout, .in = in, .at = at, .out = out};
    tfe_meta meta;
    if (info->infer(&c, &meta)) return -1;
    if (!(info->flags & (F_VIEW | F_SELFOUT))) {
        if (meta.dtype >= TFE_FLOAT16 && !half_ok) return unsupported_dtype(info->name, meta.dtype);
        tfe_tensor *o = tensor_new(meta.dtype, meta.rank, meta.shape);
        if (!o) return -1;
        o->weak = meta.weak;
        out[0] = o;
        for (int i = 1; i < nout; i++) out[i] = NULL;
    } else {
        for (int i = 0; i < nout; i++) out[i] = NULL;
    }
    if (info->cpu_kernel(&c)) {
        for (int i = 0; i < nout; i++) {
            tensor_decref(out[i]);
            out[i] = NULL;
        }
        return -1;
    }
    /* autodiff: record (op, in, at, out) on the active tapes here, after the
     * kernel succeeded (F_VIEW/F_SELFOUT kernels included). */
    tfe_prov_propagate(op, nin, in, nout, out);
    if (record && tfe_tapes_active) tfe_tape_record(&c);
    return 0;
}

tfe_tensor *tfe_call1(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at) {
    if (tfe_ops[op].nout != 1) {
        tfe_error_set("%s: has several outputs; call tfe_execute", tfe_ops[op].name);
        return NULL;
    }
    tfe_tensor *out[32]; /* the most any op writes (split: 32 sections) */
    return tfe_execute(op, nin, in, at, out) ? NULL : out[0];
}

tfe_tensor *tfe_unary(tfe_op op, tfe_tensor *x) { return tfe_call1(op, 1, &x, NULL); }

tfe_tensor *tfe_binary(tfe_op op, tfe_tensor *a, tfe_tensor *b) {
    tfe_tensor *in[2] = {a, b};
    return tfe_call1(op, 2, in, NULL);
}

int broadcast_shapes(const char *opname, int ra, const int64_t *sa, int rb, const int64_t *sb,
                     int *rank_out, int64_t *shape_out) {
    int r = ra > rb ? ra : rb;
    /* A dim of -1 is unknown (a symbolic shape while staging): against n > 1
     * the result is n whichever it is; against 1 or -1 it stays unknown. */
    if (ra == rb) { /* common case without index arithmetic */
        for (int i = 0; i < r; i++) {
            int64_t x = sa[i], y = sb[i];
            if (x == y || y == 1) shape_out[i] = x;
            else if (x == 1 || x == -1) shape_out[i] = y;
            else if (y == -1) shape_out[i] = x;
            else goto fail;
        }
        *rank_out = r;
        return 0;
    }
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t x = ia >= 0 ? sa[ia] : 1, y = ib >= 0 ? sb[ib] : 1;
        if (x == y || y == 1) shape_out[i] = x;
        else if (x == 1 || x == -1) shape_out[i] = y;
        else if (y == -1) shape_out[i] = x;
        else goto fail;
    }
    *rank_out = r;
    return 0;
fail:;
    char b1[200], b2[200];
    tfe_error_set("%s: shapes %s and %s cannot be broadcast", opname, shape_str(ra, sa, b1),
                  shape_str(rb, sb, b2));
    return -1;
}

/* 1 when collective op c (F_COLLECTIVE, tensor/ops_dist.def) runs its kernel
 * on the memory of GPU target, its input being there: when the backend moves
 * the bytes on the device itself (NCCL; docs/distributed.md, "Devices:
 * NCCL") and the result keeps the input's dtype (a sum of bools or a mean of
 * ints converts on cpu:0). 0: the CPU fallback (cpu:0 copies and MPI); -1 +
 * error. The kernel tells the other ranks which (tensor/collective.h). */
static int coll_on_device(const tfe_opcall *c, int target) {
    if (!(tfe_ops[c->op].flags & F_COLLECTIVE) || !target || c->nin != 1 || c->in[0]->storage->device != target)
        return 0;
    tfe_meta m;
    if (tfe_ops[c->op].infer(c, &m)) {
        tfe_error_clear();
        return 0; /* the CPU path reports it */
    }
    if (m.dtype != c->in[0]->dtype) return 0;
    return tfe_device_coll_path(target);
}

/* Where an op runs (docs/gpu.md): on the device of its first input that is
 * on a GPU; when every input is on cpu:0 (or there are none), on the default
 * device. Inputs elsewhere are copied there first. */
int tfe_device_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out) {
    const tfe_backend *gpu = tfe_device_backend();
    const tfe_opinfo *info = &tfe_ops[op];
    int target = 0;
    for (int i = 0; i < nin; i++) {
        if (!in[i]->storage) return 1; /* symbolic: the tracer's business */
        if (!target && in[i]->storage->device) target = in[i]->storage->device;
    }
    if (!target) target = tfe_device_default();
    if (!target) return 1;
    int nout = info->nout >= 0 ? info->nout : at->nints;
    const tfe_opcall c = {.op = op, .nin = nin, .nout = nout, .in = in, .at = at, .out = out};
    bool on_gpu = gpu && gpu->supports(&c, target);
    bool view = info->flags & (F_VIEW | F_SELFOUT);
    int coll = coll_on_device(&c, target);
    if (coll < 0) return -1;

    tfe_tensor *small[16], **tmp = nin <= 16 ? small : xmalloc(sizeof *tmp * (size_t)nin);
    int rc = 0, ncopied = 0;
    for (int i = 0; i < nin; i++, ncopied++) {
        /* a GPU kernel runs on target; a view kernel (no GPU kernel) runs on
         * the host over the device's memory (the backend's memory is
         * host-readable), so the view shares the device storage; any other
         * CPU fallback gets cpu:0 copies */
        int want = on_gpu || view || coll ? target : 0;
        if (on_gpu && in[i]->rank == 0 && in[i]->storage->device == 0 && (info->flags & F_ELEMWISE)) want = 0;
        if (!(tmp[i] = tensor_to_device(in[i], want))) {
            rc = -1;
            break;
        }
        if (coll && !tensor_is_contiguous(tmp[i])) { /* the collective sends the storage's bytes */
            tfe_tensor *t = tensor_new_on(tmp[i]->dtype, tmp[i]->rank, tmp[i]->shape, target);
            if (t && gpu->contiguous(t, tmp[i])) {
                tensor_decref(t);
                t = NULL;
            }
            tensor_decref(tmp[i]);
            if (!(tmp[i] = t)) {
                rc = -1;
                break;
            }
        }
    }
    for (int i = 0; i < nout; i++) out[i] = NULL;
    if (!rc && (on_gpu || coll)) {
        const tfe_opcall cc = {.op = op, .nin = nin, .nout = nout, .in = tmp, .at = at, .out = out};
        tfe_meta meta;
        if (info->infer(&cc, &meta) || !(out[0] = tensor_new_on(meta.dtype, meta.rank, meta.shape, target))) {
            rc = -1;
        } else {
            out[0]->weak = meta.weak;
            /* a collective's kernel hands the device's buffers to NCCL */
            rc = coll ? info->cpu_kernel(&cc) : gpu->run(&cc, target);
        }
    } else if (!rc) {
        rc = tfe_execute_kernel(op, nin, tmp, at, out, false);
        for (int i = 0; !rc && i < nout; i++) {
            if (!out[i] || !out[i]->storage || out[i]->storage->device == target) continue;
            tfe_tensor *moved = tensor_to_device(out[i], target);
            tensor_decref(out[i]);
            out[i] = moved;
            if (!moved) rc = -1;
        }
    }
    if (rc) {
        for (int i = 0; i < nout; i++) {
            tensor_decref(out[i]);
            out[i] = NULL;
        }
    } else {
        tfe_prov_propagate(op, nin, in, nout, out); /* the caller's inputs' (not the copies') */
        if (tfe_tapes_active) tfe_tape_record(&c); /* with the caller's inputs: gradients reach them */
    }
    for (int i = 0; i < ncopied; i++) tensor_decref(tmp[i]);
    if (tmp != small) free(tmp);
    return rc;
}
