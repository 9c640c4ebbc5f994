/* dispatch.c — the op table generated from ops.def, name lookup, the one
 * dispatch entry tfe_execute and its convenience wrappers, and the small
 * shape/axis helpers shared by infer rules. */
#include <string.h>

#include "tensor/device.h"
#include "tensor/grad.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"

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
    if (tfe_trace_hook) return tfe_trace_hook(op, nin, in, at, out);
    return tfe_execute_eager(op, nin, in, at, out);
}

/* Eager execution. The only path from the interpreter, the tracer, the
 * graph executor and the tape to a kernel. */
int tfe_execute_eager(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out) {
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
    if (tfe_devices_used) {
        int rc = tfe_device_execute(op, nin, in, at, out);
        if (rc != 1) return rc;
    }
    return tfe_execute_kernel(op, nin, in, at, out, true);
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

int kn_axis(const char *op, int64_t axis, int rank, int *out) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank) {
        tfe_error_set("%s: axis %lld is out of range for rank %d", op, (long long)axis, rank);
        return -1;
    }
    *out = (int)a;
    return 0;
}

int kn_axes_mask(const char *op, const tfe_attrs *at, int rank, unsigned *mask) {
    if (at->naxes < 0) {
        *mask = rank ? (1u << rank) - 1 : 0;
        return 0;
    }
    unsigned m = 0;
    for (int i = 0; i < at->naxes; i++) {
        int a;
        if (kn_axis(op, at->axes[i], rank, &a)) return -1;
        if (m & (1u << a)) {
            tfe_error_set("%s: axis %d is repeated", op, a);
            return -1;
        }
        m |= 1u << a;
    }
    *mask = m;
    return 0;
}
