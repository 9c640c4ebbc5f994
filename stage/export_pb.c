/* export_pb.c — the ONNX messages the exporter writes: attributes, nodes,
 * tensors, constants and casts (onnx/onnx.proto's field numbers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/export_int.h"
#include "util/pb.h"
#include "util/xalloc.h"

/* ONNX's TensorProto.DataType numbers (onnx/onnx.proto). */
int ox_onnx_dtype(tfe_dtype dt)
{
    switch ((int)dt) {
    case TFE_FLOAT32: return 1;
    case TFE_INT32: return 6;
    case TFE_INT64: return 7;
    case TFE_BOOL: return 9;
    case TFE_FLOAT16: return 10;
    case TFE_FLOAT64: return 11;
    case TFE_BFLOAT16: return 16;
    default: return 0;
    }
}

static bool user_name(const Ex *E, const char *s)
{
    for (int i = 0; i < E->nuser; i++)
        if (!strcmp(E->user[i], s)) return true;
    return false;
}

/* A made name ("t_3"): a parameter or an output may be called that, and
 * an ONNX graph defines each name once, so the counter moves past them. */
char *ox_fresh(Ex *E, const char *stem)
{
    char b[80];
    do snprintf(b, sizeof b, "%s_%d", stem, E->ntmp++);
    while (user_name(E, b));
    return xstrdup(b);
}

/* name, or name with '_'s appended until no user name is the same (owned). */
char *ox_avoid(const Ex *E, const char *name)
{
    size_t n = strlen(name);
    char *s = xmalloc(n + (size_t)E->nuser + 2);
    memcpy(s, name, n + 1);
    while (user_name(E, s)) s[n++] = '_', s[n] = 0;
    return s;
}

/* Names made while writing one node (Tmp, export_int.h). */
const char *ox_keep(Tmp *t, char *s)
{
    if (t->n < MAXTMP) t->s[t->n++] = s;
    return s;
}
void ox_tmp_free(Tmp *t)
{
    for (int i = 0; i < t->n; i++) free(t->s[i]);
    t->n = 0;
}

/* --- attributes (each an encoded AttributeProto, field 5 of NodeProto) --- */
void ox_attr_begin(Buf *m, const char *name, int type) { pb_field_string(m, 1, name); pb_field_varint(m, 20, (uint64_t)type); }
void ox_attr_end(Buf *attrs, Buf *m)
{
    pb_field_bytes(attrs, 5, m->s, m->len);
    free(m->s);
}
void ox_attr_int(Buf *a, const char *name, int64_t v)
{
    Buf m = {0};
    ox_attr_begin(&m, name, AT_INT);
    pb_field_varint(&m, 3, (uint64_t)v);
    ox_attr_end(a, &m);
}
void ox_attr_string(Buf *a, const char *name, const char *v)
{
    Buf m = {0};
    ox_attr_begin(&m, name, AT_STRING);
    pb_field_string(&m, 4, v);
    ox_attr_end(a, &m);
}
void ox_attr_ints(Buf *a, const char *name, const int64_t *v, int n)
{
    Buf m = {0};
    ox_attr_begin(&m, name, AT_INTS);
    for (int i = 0; i < n; i++) pb_field_varint(&m, 8, (uint64_t)v[i]);
    ox_attr_end(a, &m);
}

/* One NodeProto; attrs (encoded attributes) is consumed. */
void ox_node(Ex *E, const char *op, int nin, const char *const *in, int nout, const char *const *out, Buf *attrs)
{
    Buf m = {0};
    for (int i = 0; i < nin; i++) pb_field_string(&m, 1, in[i] ? in[i] : "");
    for (int i = 0; i < nout; i++) pb_field_string(&m, 2, out[i]);
    char nm[80];
    snprintf(nm, sizeof nm, "%s_%d", op, E->ntmp++);
    pb_field_string(&m, 3, nm);
    pb_field_string(&m, 4, op);
    if (attrs && attrs->len) buf_add(&m, attrs->s, attrs->len);
    if (attrs) { free(attrs->s); *attrs = (Buf){0}; }
    pb_field_bytes(&E->nodes, 1, m.s, m.len);
    free(m.s);
}

/* op(in...) -> a fresh name (kept in t) */
const char *ox_op1(Ex *E, Tmp *t, const char *op, int nin, const char *const *in, Buf *attrs)
{
    const char *o = ox_keep(t, ox_fresh(E, "t"));
    ox_node(E, op, nin, in, 1, &o, attrs);
    return o;
}
const char *ox_un(Ex *E, Tmp *t, const char *op, const char *a) { return ox_op1(E, t, op, 1, &a, NULL); }
const char *ox_bin(Ex *E, Tmp *t, const char *op, const char *a, const char *b)
{
    const char *in[2] = {a, b};
    return ox_op1(E, t, op, 2, in, NULL);
}

/* --- tensors: TensorProto (dims 1, data_type 2, name 8, raw_data 9) --- */
void ox_tensor_proto(Buf *out, int field, const char *name, tfe_dtype dt, int rank, const int64_t *shape, const void *data,
                         size_t nbytes)
{
    Buf m = {0};
    for (int d = 0; d < rank; d++) pb_field_varint(&m, 1, (uint64_t)shape[d]);
    pb_field_varint(&m, 2, (uint64_t)ox_onnx_dtype(dt));
    if (name) pb_field_string(&m, 8, name);
    pb_field_bytes(&m, 9, data, nbytes);
    pb_field_bytes(out, field, m.s, m.len);
    free(m.s);
}

int ox_init_tensor(Ex *E, const char *name, tfe_tensor *t)
{
    if (!t || !t->storage) return snprintf(E->err, sizeof E->err, "a value with no data"), -1;
    if (t->storage->device != 0) return snprintf(E->err, sizeof E->err, "a tensor not on cpu:0"), -1;
    tfe_tensor *c = tensor_contiguous(t);
    if (!c) return -1;
    ox_tensor_proto(&E->inits, 5, name, c->dtype, c->rank, c->shape, tensor_data(c),
                 (size_t)tensor_numel(c) * dtype_size(c->dtype));
    tensor_decref(c);
    return 0;
}

/* A constant initializer of n int64s (a 1-D tensor, or a scalar). */
const char *ox_const_i64(Ex *E, Tmp *t, const int64_t *v, int n, bool scalar)
{
    const char *name = ox_keep(t, ox_fresh(E, "c"));
    int64_t shape[1] = {n};
    ox_tensor_proto(&E->inits, 5, name, TFE_INT64, scalar ? 0 : 1, shape, v, (size_t)n * 8);
    return name;
}

/* A scalar constant of dtype dt. */
const char *ox_const_num(Ex *E, Tmp *t, tfe_dtype dt, double v)
{
    const char *name = ox_keep(t, ox_fresh(E, "c"));
    tfe_tensor *s = tensor_from_f64(v, dt);
    ox_tensor_proto(&E->inits, 5, name, dt, 0, NULL, tensor_data(s), dtype_size(dt));
    tensor_decref(s);
    return name;
}

const char *ox_cast(Ex *E, Tmp *t, const char *x, tfe_dtype from, tfe_dtype to)
{
    if (from == to) return x;
    Buf a = {0};
    ox_attr_int(&a, "to", ox_onnx_dtype(to));
    return ox_op1(E, t, "Cast", 1, &x, &a);
}

const tfe_meta *ox_in_meta(Ex *E, const GNode *n, int i) { return &E->g->nodes[n->in[i].node].meta[n->in[i].out]; }
const char *ox_in_name(Ex *E, const GNode *n, int i) { return E->vn[E->off[n->in[i].node] + n->in[i].out]; }
const char *ox_out_name(Ex *E, const GNode *n, int k) { return E->vn[E->off[n - E->g->nodes] + k]; }

int ox_refuse(Ex *E, const char *why)
{
    snprintf(E->err, sizeof E->err, "%s", why);
    return -1;
}

/* The result under the node's own output name. */
void ox_finish(Ex *E, const GNode *n, const char *v)
{
    const char *o = ox_out_name(E, n, 0);
    ox_node(E, "Identity", 1, &v, 1, &o, NULL);
}


