/* export_int.h — what the parts of the ONNX exporter share (stage/export.c
 * writes the model, stage/export_ops.c the op table's ONNX forms,
 * stage/export_pb.c the messages they are made of). Private to stage/export*.c. */
#ifndef TFE_STAGE_EXPORT_INT_H
#define TFE_STAGE_EXPORT_INT_H

#include "graph/graph.h"
#include "interp/interp.h"
#include "util/buf.h"

/* AttributeProto.AttributeType numbers. */
enum { AT_INT = 2, AT_STRING = 3, AT_INTS = 7 };

typedef struct GraphBuf { Buf g; } GraphBuf; /* an encoded GraphProto */

typedef struct Ex {
    Interp *I;
    Graph *g;
    int *off;            /* per node: its first slot in vn */
    char **vn;           /* per value: its ONNX name (owned) */
    Buf nodes, inits;    /* GraphProto's node and initializer fields, encoded */
    int ntmp;
    const GNode *at;     /* the node being written (errors name its line) */
    int nvar;            /* variables written (var0, var1, ...) */
    const char *const *user; /* the names the user sees (inputs, outputs): made names avoid them */
    int nuser;
    int64_t *const *slice_se; /* per node: a dynamic slice's ONNX starts and ends (2 x rank), or NULL */
    char err[300];       /* set: not exportable */
    bool dynamic;        /* some input dim is symbolic */
} Ex;

/* Names made while writing one node: freed after it. */
#define MAXTMP 64
typedef struct Tmp { char *s[MAXTMP]; int n; } Tmp;

/* The pieces of the model (stage/export_pb.c); ox_: exporter-private names. */
int ox_onnx_dtype(tfe_dtype dt);
char *ox_fresh(Ex *E, const char *stem);
char *ox_avoid(const Ex *E, const char *name);
const char *ox_keep(Tmp *t, char *s);
void ox_tmp_free(Tmp *t);
void ox_attr_begin(Buf *m, const char *name, int type);
void ox_attr_end(Buf *attrs, Buf *m);
void ox_attr_int(Buf *a, const char *name, int64_t v);
void ox_attr_string(Buf *a, const char *name, const char *v);
void ox_attr_ints(Buf *a, const char *name, const int64_t *v, int n);
void ox_node(Ex *E, const char *op, int nin, const char *const *in, int nout, const char *const *out, Buf *attrs);
const char *ox_op1(Ex *E, Tmp *t, const char *op, int nin, const char *const *in, Buf *attrs);
const char *ox_un(Ex *E, Tmp *t, const char *op, const char *a);
const char *ox_bin(Ex *E, Tmp *t, const char *op, const char *a, const char *b);
void ox_tensor_proto(Buf *out, int field, const char *name, tfe_dtype dt, int rank, const int64_t *shape, const void *data,
                         size_t nbytes);
int ox_init_tensor(Ex *E, const char *name, tfe_tensor *t);
const char *ox_const_i64(Ex *E, Tmp *t, const int64_t *v, int n, bool scalar);
const char *ox_const_num(Ex *E, Tmp *t, tfe_dtype dt, double v);
const char *ox_cast(Ex *E, Tmp *t, const char *x, tfe_dtype from, tfe_dtype to);
const tfe_meta *ox_in_meta(Ex *E, const GNode *n, int i);
const char *ox_in_name(Ex *E, const GNode *n, int i);
const char *ox_out_name(Ex *E, const GNode *n, int k);
int ox_refuse(Ex *E, const char *why);
void ox_finish(Ex *E, const GNode *n, const char *v);
/* One op node of the graph as ONNX nodes (0), or -1 with E->err saying why not. */
int emit_op(Ex *E, const GNode *n);

#endif
