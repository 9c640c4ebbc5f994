/* onnx_model.c — reading an ONNX ModelProto (onnx_model.h); every length
 * and count is checked against the bytes there are (fuzz/fuzz_onnx.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/onnx_model.h"
#include "util/pbr.h"
#include "util/xalloc.h"

#define FAIL(...) do { snprintf(err, errcap, __VA_ARGS__); return -1; } while (0)

static char *str_of(const PbField *f) { char *s = xmalloc(f->n + 1); if (f->n) memcpy(s, f->p, f->n); s[f->n] = 0; return s; }

static void push_str(char ***v, int *n, char *s)
{
    *v = xrealloc(*v, sizeof **v * (size_t)(*n + 1));
    (*v)[(*n)++] = s;
}

/* A repeated int64 field, packed (LEN) or one value per tag. */
static int push_ints(const PbField *f, int64_t **v, int *n)
{
    if (f->wire == 0) {
        *v = xrealloc(*v, sizeof **v * (size_t)(*n + 1));
        (*v)[(*n)++] = (int64_t)f->v;
        return 0;
    }
    if (f->wire != 2) return -1;
    PbReader r = pbr_init(f->p, f->n);
    while (r.p < r.end) {
        uint64_t x;
        if (pbr_varint(&r, &x)) return -1;
        if (*n > 1 << 24) return -1;
        *v = xrealloc(*v, sizeof **v * (size_t)(*n + 1));
        (*v)[(*n)++] = (int64_t)x;
    }
    return 0;
}

tfe_dtype ox_dtype_of(int64_t onnx, bool *ok)
{
    *ok = true;
    switch (onnx) {
    case 1: return TFE_FLOAT32;
    case 6: return TFE_INT32;
    case 7: return TFE_INT64;
    case 9: return TFE_BOOL;
    case 10: return TFE_FLOAT16;
    case 11: return TFE_FLOAT64;
    case 16: return TFE_BFLOAT16;
    default: *ok = false; return TFE_FLOAT32;
    }
}

const char *ox_dtype_name(int64_t onnx)
{
    static const char *N[] = {"ONNX's undefined type", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64",
                              "string", "bool", "float16", "float64", "uint32", "uint64", "complex64", "complex128",
                              "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"};
    return onnx >= 0 && onnx < (int64_t)(sizeof N / sizeof *N) ? N[onnx] : "an unknown ONNX type";
}

/* TensorProto -> a tensor (raw_data, or float/int32/int64/double data). */
static int read_tensor(const uint8_t *p, size_t n, tfe_tensor **out, char **name, char *err, size_t errcap)
{
    PbReader r = pbr_init(p, n);
    PbField f;
    int64_t *dims = NULL, dt = 1;
    int nd = 0, k;
    const uint8_t *raw = NULL;
    size_t nraw = 0;
    bool has_raw = false, external = false;
    int64_t *ivals = NULL;
    int ni = 0;
    uint8_t *fl = NULL; /* fixed-width typed data, little-endian */
    size_t nfl = 0, flw = 0;
    while ((k = pbr_next(&r, &f)) == 1) {
        if (f.field == 1) { if (push_ints(&f, &dims, &nd)) break; }
        else if (f.field == 2 && f.wire == 0) dt = (int64_t)f.v;
        else if (f.field == 8 && f.wire == 2) { if (name) { free(*name); *name = str_of(&f); } }
        else if (f.field == 9 && f.wire == 2) { raw = f.p; nraw = f.n; has_raw = true; }
        else if ((f.field == 13 && f.wire == 2) || (f.field == 14 && f.wire == 0 && f.v == 1)) external = true;
        else if ((f.field == 5 || f.field == 7) && (f.wire == 0 || f.wire == 2)) { if (push_ints(&f, &ivals, &ni)) break; }
        else if ((f.field == 4 || f.field == 10) && (f.wire == 2 || f.wire == 5 || f.wire == 1)) {
            size_t w = f.field == 4 ? 4 : 8;
            const uint8_t *src = f.wire == 2 ? f.p : NULL;
            size_t m = f.wire == 2 ? f.n : w;
            uint8_t tmp[8];
            if (f.wire != 2) { for (size_t i = 0; i < w; i++) tmp[i] = (uint8_t)(f.v >> (8 * i)); src = tmp; }
            if (m % w || (flw && flw != w)) { k = -1; break; }
            flw = w;
            fl = xrealloc(fl, nfl + m + 1);
            memcpy(fl + nfl, src, m);
            nfl += m;
        }
    }
    int rc = -1;
    bool ok;
    tfe_dtype tdt = ox_dtype_of(dt, &ok);
    int64_t numel = 1;
    bool bad_dims = nd > TFE_MAX_RANK;
    for (int d = 0; d < nd && !bad_dims; d++) {
        if (dims[d] < 0 || dims[d] > (1 << 30) || (dims[d] && numel > (INT64_C(1) << 31) / dims[d])) bad_dims = true;
        else numel *= dims[d];
    }
    size_t es = ok ? dtype_size(tdt) : 1;
    if (k < 0) snprintf(err, errcap, "a malformed tensor");
    else if (!ok) snprintf(err, errcap, "a tensor of %s (tfe reads float32, float64, float16, bfloat16, int32, int64, bool)",
                           ox_dtype_name(dt));
    else if (external)
        snprintf(err, errcap, "a tensor%s%.60s%s whose data is in a file beside the model (ONNX's external data), which "
                 "import_onnx does not read: save the model whole (onnx.save(model, path, save_as_external_data=False))",
                 name && *name ? " '" : "", name && *name ? *name : "", name && *name ? "'" : "");
    else if (nd > TFE_MAX_RANK)
        snprintf(err, errcap, "a tensor of %d dimensions (tfe's tensors have at most %d)", nd, TFE_MAX_RANK);
    else if (bad_dims) snprintf(err, errcap, "a tensor with bad dims");
    else {
        /* which form the data has, checked against the dims before anything
         * is allocated: a file's dims may claim far more than it holds */
        int form = has_raw ? (nraw == (size_t)numel * es ? 1 : 0)
                 : flw ? (nfl == (size_t)numel * flw && flw == es ? 2 : 0)
                 : ni ? (ni == numel && tdt != TFE_FLOAT32 && tdt != TFE_FLOAT64 ? 3 : 0)
                 : numel == 0 ? 4 : 0;
        tfe_tensor *t = form ? tensor_new(tdt, nd, dims) : NULL;
        if (!form) snprintf(err, errcap, "a tensor whose data does not fit its dims");
        else if (!t) snprintf(err, errcap, "out of memory");
        else {
            char *d = tensor_data(t);
            if (form == 1 && nraw) memcpy(d, raw, nraw);
            else if (form == 2 && nfl) memcpy(d, fl, nfl);
            else if (form == 3) {
                for (int64_t i = 0; i < numel; i++) {
                    if (tdt == TFE_INT64) ((int64_t *)d)[i] = ivals[i];
                    else if (tdt == TFE_INT32) ((int32_t *)d)[i] = (int32_t)ivals[i];
                    else if (tdt == TFE_FLOAT16 || tdt == TFE_BFLOAT16) ((uint16_t *)d)[i] = (uint16_t)ivals[i]; /* (the bits) */
                    else ((uint8_t *)d)[i] = ivals[i] != 0;
                }
            }
            rc = 0;
            *out = t;
        }
    }
    free(dims);
    free(ivals);
    free(fl);
    return rc;
}

static int read_graph(const PbField *gf, OxModel *m, int depth, char *err, size_t errcap);
static void attr_free(OxAttr *a);

static int read_attr(const PbField *af, OxAttr *a, int depth, char *err, size_t errcap)
{
    PbReader r = pbr_init(af->p, af->n);
    PbField f;
    int k;
    memset(a, 0, sizeof *a);
    while ((k = pbr_next(&r, &f)) == 1) {
        if (f.field == 1 && f.wire == 2) { free(a->name); a->name = str_of(&f); }
        else if (f.field == 20 && f.wire == 0) a->type = (int)f.v;
        else if (f.field == 3 && f.wire == 0) a->i = (int64_t)f.v;
        else if (f.field == 2 && f.wire == 5) { uint32_t b = (uint32_t)f.v; memcpy(&a->f, &b, 4); }
        else if (f.field == 4 && f.wire == 2) { free(a->s); a->s = str_of(&f); }
        else if (f.field == 8) { if (push_ints(&f, &a->ints, &a->nints)) FAIL("a malformed attribute"); }
        else if (f.field == 5 && f.wire == 2) {
            if (a->t) tensor_decref(a->t), a->t = NULL;
            if (read_tensor(f.p, f.n, &a->t, NULL, err, errcap)) return -1;
        } else if (f.field == 6 && f.wire == 2) { /* g: a subgraph */
            if (depth >= OX_MAX_DEPTH) FAIL("subgraphs nested more than %d deep", OX_MAX_DEPTH);
            if (a->g) ox_model_free(a->g);
            a->g = xcalloc(1, sizeof *a->g);
            if (read_graph(&f, a->g, depth + 1, err, errcap)) return -1;
        }
    }
    if (k < 0) FAIL("a malformed attribute");
    if (!a->name) a->name = xstrdup("");
    return 0;
}

static int read_node(const PbField *nf, OxNode *n, int depth, char *err, size_t errcap)
{
    PbReader r = pbr_init(nf->p, nf->n);
    PbField f;
    int k;
    while ((k = pbr_next(&r, &f)) == 1) {
        if (f.wire != 2) continue;
        if (f.field == 1) push_str(&n->in, &n->nin, str_of(&f));
        else if (f.field == 2) push_str(&n->out, &n->nout, str_of(&f));
        else if (f.field == 4) { free(n->op); n->op = str_of(&f); }
        else if (f.field == 7 && f.n && !(f.n == 7 && !memcmp(f.p, "ai.onnx", 7))) {
            /* a custom domain's op (com.microsoft's, ...) is not the standard
             * op of the same name */
            char *d = str_of(&f);
            snprintf(err, errcap, "an op of domain '%s' (tfe imports the standard ONNX ops only)", d);
            free(d);
            return -1;
        }
        else if (f.field == 5) {
            n->at = xrealloc(n->at, sizeof *n->at * (size_t)(n->nat + 1));
            if (read_attr(&f, &n->at[n->nat], depth, err, errcap)) {
                attr_free(&n->at[n->nat]); /* (a tensor or graph before the bad bytes) */
                return -1;
            }
            n->nat++;
        }
    }
    if (k < 0) FAIL("a malformed node");
    if (!n->op) n->op = xstrdup("");
    /* an empty name leaves an optional input out: at the end it is the
     * same as not listing it; before another input tfe has no form for it */
    while (n->nin && !n->in[n->nin - 1][0]) free(n->in[--n->nin]);
    bool loop = !strcmp(n->op, "Loop"); /* (its M and cond are optional: import reads "" there) */
    for (int i = loop ? 2 : 0; i < n->nin; i++)
        if (!n->in[i][0]) FAIL("%s leaves out its optional input %d, which tfe does not import", n->op, i);
    return 0;
}

/* TypeProto.tensor_type (1): elem_type (1), shape (2) of dims (1), each
 * dim_value (1) or dim_param (2). Anything else leaves the type unchecked:
 * it only serves the check of a call's arguments. */
static void read_type(const PbField *tf, OxType *ty)
{
    PbReader r = pbr_init(tf->p, tf->n), t, sh, d;
    PbField f, g, h, e;
    while (pbr_next(&r, &f) == 1) {
        if (f.field != 1 || f.wire != 2) continue;
        t = pbr_init(f.p, f.n);
        while (pbr_next(&t, &g) == 1) {
            if (g.field == 1 && g.wire == 0) ty->elem = (int64_t)g.v;
            else if (g.field == 2 && g.wire == 2) {
                ty->rank = 0;
                sh = pbr_init(g.p, g.n);
                while (pbr_next(&sh, &h) == 1) {
                    if (h.field != 1 || h.wire != 2) continue;
                    if (ty->rank >= TFE_MAX_RANK) { ty->rank++; continue; }
                    int k = ty->rank++;
                    ty->dims[k] = -1;
                    d = pbr_init(h.p, h.n);
                    while (pbr_next(&d, &e) == 1) {
                        if (e.field == 1 && e.wire == 0) ty->dims[k] = (int64_t)e.v;
                        else if (e.field == 2 && e.wire == 2 && e.n) { free(ty->dnames[k]); ty->dnames[k] = str_of(&e); }
                    }
                }
            }
        }
    }
}

static char *value_name(const PbField *vf, OxType *ty)
{
    PbReader r = pbr_init(vf->p, vf->n);
    PbField f;
    char *s = NULL;
    if (ty) memset(ty, 0, sizeof *ty), ty->rank = -1;
    while (pbr_next(&r, &f) == 1) {
        if (f.field == 1 && f.wire == 2) { free(s); s = str_of(&f); }
        else if (f.field == 2 && f.wire == 2 && ty) read_type(&f, ty);
    }
    return s ? s : xstrdup("");
}

static void type_free(OxType *ty)
{
    for (int d = 0; d < TFE_MAX_RANK; d++) free(ty->dnames[d]);
}

static int read_graph(const PbField *gf, OxModel *m, int depth, char *err, size_t errcap)
{
    PbReader r = pbr_init(gf->p, gf->n);
    PbField f;
    int k;
    char **ins = NULL;
    OxType *tys = NULL;
    int nins = 0;
    while ((k = pbr_next(&r, &f)) == 1) {
        if (f.wire != 2) continue;
        if (f.field == 1) {
            m->nodes = xrealloc(m->nodes, sizeof *m->nodes * (size_t)(m->nnodes + 1));
            memset(&m->nodes[m->nnodes], 0, sizeof *m->nodes);
            int rc = read_node(&f, &m->nodes[m->nnodes], depth, err, errcap);
            m->nnodes++;
            if (rc) goto fail;
        } else if (f.field == 5) {
            tfe_tensor *t = NULL;
            char *name = xstrdup("");
            if (read_tensor(f.p, f.n, &t, &name, err, errcap)) { free(name); goto fail; }
            m->inits = xrealloc(m->inits, sizeof *m->inits * (size_t)(m->ninits + 1));
            m->inits[m->ninits] = t;
            push_str(&m->init_names, &m->ninits, name);
        } else if (f.field == 11) {
            tys = xrealloc(tys, sizeof *tys * (size_t)(nins + 1));
            push_str(&ins, &nins, value_name(&f, &tys[nins]));
        } else if (f.field == 12) push_str(&m->outputs, &m->noutputs, value_name(&f, NULL));
    }
    if (k < 0) { snprintf(err, errcap, "a malformed graph"); goto fail; }
    for (int i = 0; i < nins; i++) {
        bool init = false;
        for (int j = 0; j < m->ninits && !init; j++) init = !strcmp(ins[i], m->init_names[j]);
        if (init) {
            free(ins[i]);
            type_free(&tys[i]);
            continue;
        }
        m->in_types = xrealloc(m->in_types, sizeof *m->in_types * (size_t)(m->ninputs + 1));
        m->in_types[m->ninputs] = tys[i];
        push_str(&m->inputs, &m->ninputs, ins[i]);
    }
    free(ins);
    free(tys);
    return 0;
fail:
    for (int i = 0; i < nins; i++) free(ins[i]), type_free(&tys[i]);
    free(ins);
    free(tys);
    return -1;
}

OxModel *ox_model_read(const void *p, size_t n, char *err, size_t errcap)
{
    OxModel *m = xcalloc(1, sizeof *m);
    PbReader r = pbr_init(p, n);
    PbField f;
    int k, graphs = 0;
    int64_t opset = -1;
    while ((k = pbr_next(&r, &f)) == 1) {
        if (f.field == 8 && f.wire == 2) { /* opset_import: domain 1, version 2 */
            PbReader o = pbr_init(f.p, f.n);
            PbField g;
            bool std = true;
            int64_t v = -1;
            int ko;
            while ((ko = pbr_next(&o, &g)) == 1) {
                if (g.field == 1 && g.wire == 2) std = !g.n || (g.n == 7 && !memcmp(g.p, "ai.onnx", 7));
                else if (g.field == 2 && g.wire == 0) v = (int64_t)g.v;
            }
            if (ko < 0) { k = -1; break; }
            if (std) opset = v;
        } else if (f.field == 7 && f.wire == 2) {
            if (graphs++) { snprintf(err, errcap, "two graphs"); k = -2; break; }
            if (read_graph(&f, m, 0, err, errcap)) { k = -2; break; }
        }
    }
    if (k == -1) snprintf(err, errcap, "not an ONNX model (malformed protobuf)");
    else if (k == 0 && !graphs) { snprintf(err, errcap, "not an ONNX model (no graph)"); k = -2; }
    else if (k == 0 && opset != OX_OPSET) {
        /* ops change meaning between opsets (ReduceSum's axes, Softmax's
         * axis, Unsqueeze...): a model of another opset would run as the
         * wrong function */
        if (opset < 0) snprintf(err, errcap, "a model without the standard opset in opset_import");
        else snprintf(err, errcap, "a model of opset %lld: tfe imports opset %d (export it with opset_version=%d)",
                      (long long)opset, OX_OPSET, OX_OPSET);
        k = -2;
    }
    if (k < 0) {
        ox_model_free(m);
        return NULL;
    }
    return m;
}

void ox_model_free(OxModel *m)
{
    if (!m) return;
    for (int i = 0; i < m->nnodes; i++) {
        OxNode *n = &m->nodes[i];
        free(n->op);
        for (int j = 0; j < n->nin; j++) free(n->in[j]);
        for (int j = 0; j < n->nout; j++) free(n->out[j]);
        free(n->in);
        free(n->out);
        for (int j = 0; j < n->nat; j++) attr_free(&n->at[j]);
        free(n->at);
    }
    free(m->nodes);
    for (int i = 0; i < m->ninits; i++) {
        free(m->init_names[i]);
        tensor_decref(m->inits[i]);
    }
    free(m->init_names);
    free(m->inits);
    for (int i = 0; i < m->ninputs; i++) free(m->inputs[i]), type_free(&m->in_types[i]);
    free(m->in_types);
    for (int i = 0; i < m->noutputs; i++) free(m->outputs[i]);
    free(m->inputs);
    free(m->outputs);
    free(m);
}

static void attr_free(OxAttr *a)
{
    free(a->name);
    free(a->s);
    free(a->ints);
    if (a->t) tensor_decref(a->t);
    ox_model_free(a->g);
}

const OxAttr *ox_attr(const OxNode *n, const char *name)
{
    for (int i = 0; i < n->nat; i++)
        if (!strcmp(n->at[i].name, name)) return &n->at[i];
    return NULL;
}
