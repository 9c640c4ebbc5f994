/* profile.c — timing eager ops for the profiler (util/profile.h) and the
 * TFE_DEBUG=2 line of each op: called from tfe_execute_eager only while
 * something listens, so nothing here is on the path of an unprofiled run. */
#include <stdio.h>
#include <string.h>

#include "tensor/device.h"
#include "tensor/profile.h"
#include "util/xalloc.h"

/* Decimal digits of v at p; returns the end. */
static char *put_int(char *p, int64_t v)
{
    char tmp[24];
    int n = 0;
    if (v < 0) {
        *p++ = '-';
        v = -v;
    }
    do tmp[n++] = (char)('0' + v % 10); while ((v /= 10) > 0);
    while (n) *p++ = tmp[--n];
    return p;
}

/* Written by hand, not snprintf: this runs once per op while profiling. */
void tfe_prof_shapes(char *buf, size_t cap, int nin, tfe_tensor *const *in)
{
    char *p = buf, *end = buf + cap;
    for (int i = 0; i < nin; i++) {
        const tfe_tensor *t = in[i];
        const char *dn = dtype_name(t->dtype);
        size_t dl = strlen(dn);
        if ((size_t)(end - p) < dl + 4 + (size_t)t->rank * 21) break; /* no room: the rest is left out */
        if (i) *p++ = ' ';
        memcpy(p, dn, dl);
        p += dl;
        *p++ = '[';
        for (int d = 0; d < t->rank; d++) {
            if (d) *p++ = ',';
            p = put_int(p, t->shape[d]);
        }
        *p++ = ']';
    }
    *p = 0;
}

int tfe_prof_device(int nin, tfe_tensor *const *in)
{
    for (int i = 0; i < nin; i++)
        if (in[i]->storage) return in[i]->storage->device;
    return tfe_devices_used ? tfe_device_default() : 0;
}

int64_t tfe_prof_alloc_total(void) { return (int64_t)tfe_alloc_get_stats().total_bytes; }

void tfe_prof_live_bytes(void) { prof_counter("live bytes", (int64_t)tfe_alloc_get_stats().live_bytes); }

const char *tfe_prof_bwd_name(tfe_op op)
{
    static const char *names[TFE_NOPS];
    if (!names[op]) {
        char b[96];
        snprintf(b, sizeof b, "backward %s", tfe_ops[op].name);
        names[op] = prof_intern(b);
    }
    return names[op];
}

int tfe_prof_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out)
{
    int64_t a0 = tfe_prof_alloc_total();
    int64_t t0 = prof_now();
    int rc = tfe_execute_eager_unprofiled(op, nin, in, at, out);
    int64_t t1 = prof_now(); /* the op's end, before any of the profiler's own work */
    if (rc) return rc;       /* a failed op is the error's business */
    if (prof_recording) {
        char shapes[512];
        tfe_prof_shapes(shapes, sizeof shapes, nin, in);
        tfe_alloc_stats st = tfe_alloc_get_stats();
        prof_complete_at(PROF_OP, tfe_ops[op].name, t0, t1, shapes, (int64_t)st.total_bytes - a0,
                         tfe_prof_device(nin, in));
        prof_counter_at("live bytes", (int64_t)st.live_bytes, t1);
    }
    if (prof_debug >= 2) {
        const tfe_opinfo *info = &tfe_ops[op];
        int nout = info->nout >= 0 ? info->nout : (at ? at->nints : 1);
        int n = 0;
        while (n < nout && out[n]) n++;
        tfe_prof_debug_op("op", info->name, nin, in, n, out, prof_ns(t1 - t0));
    }
    return 0;
}

void tfe_prof_debug_op(const char *what, const char *name, int nin, tfe_tensor *const *in, int nout,
                       tfe_tensor *const *out, int64_t ns)
{
    char shapes[512], res[512], tb[32], db[32];
    tfe_prof_shapes(shapes, sizeof shapes, nin, in);
    tfe_prof_shapes(res, sizeof res, nout, out);
    fprintf(stderr, "tfe debug: %s %s %s -> %s %s %s\n", what, name, nin ? shapes : "()", res,
            tfe_device_name(tfe_prof_device(nin, in), db, sizeof db), prof_debug_time(ns, tb, sizeof tb));
}
