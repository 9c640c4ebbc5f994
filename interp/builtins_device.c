/* builtins_device.c — devices(), device(name) as a `with` context (the
 * default placement inside the block), to(x, name). The devices themselves
 * live in tensor/device.c: cpu:0 always, gpu:N when the CUDA backend is built
 * and a device answers (docs/gpu.md). Asking for a missing device is an error
 * that lists the devices that exist. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "tensor/device.h"
#include "util/xalloc.h"

typedef struct Device { Object o; int index; } Device;

static char *device_repr(Obj *o)
{
    char nm[32], *s;
    if (asprintf(&s, "<device %s>", tfe_device_name(((Device *)o)->index, nm, sizeof nm)) < 0)
        return xstrdup("<device>");
    return s;
}

static int device_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    char nm[32];
    if (strcmp(name, "name") == 0) {
        *out = v_cstr(tfe_device_name(((Device *)o)->index, nm, sizeof nm));
        return 0;
    }
    return 1;
}

/* Entering makes the device the default; leaving (also on an error) puts
 * back the one before, so blocks nest. */
enum { MAX_NEST = 256 };
static int saved[MAX_NEST];
static int depth;

static int device_enter(Interp *I, Obj *o, Value *as)
{
    if (depth == MAX_NEST) return interp_raise(I, "device(): 'with device' is nested too deeply");
    saved[depth++] = tfe_device_default();
    tfe_device_set_default(((Device *)o)->index);
    value_incref(v_obj(V_OBJECT, o));
    *as = v_obj(V_OBJECT, o);
    return 0;
}

static int device_exit(Interp *I, Obj *o, bool failed)
{
    if (depth > 0) tfe_device_set_default(saved[--depth]);
    return 0;
}

static const ObjectClass device_class = {
    .name = "device", .repr = device_repr, .getattr = device_getattr,
    .enter = device_enter, .exit = device_exit,
};

static int find_device(Interp *I, Value v, const char *fname)
{
    char fn[32];
    snprintf(fn, sizeof fn, "%s()", fname);
    if (v.kind != V_STR) return arg_error(I, fn, "the device name", "a string", v);
    const char *name = ((Str *)v.u.o)->s;
    int d = tfe_device_parse(name);
    if (d >= 0) return d;
    char list[256];
    interp_raise(I, "%s(): no device '%s' (devices: %s)", fname, name, tfe_device_list(list, sizeof list));
    return -1;
}

BUILTIN(bi_devices)
{
    if (argc || nkw) return interp_raise(I, "devices() takes no arguments");
    int n = tfe_device_count();
    Seq *s = seq_new(n);
    char nm[32];
    for (int i = 0; i < n; i++) seq_push_take(s, v_cstr(tfe_device_name(i, nm, sizeof nm)));
    *out = v_obj(V_LIST, s);
    return 0;
}

BUILTIN(bi_device)
{
    Value a[1];
    bool p[1];
    if (args_parse(I, "device", "name", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    int d = find_device(I, a[0], "device");
    if (d < 0) return -1;
    Device *dev = object_new(sizeof *dev, &device_class);
    dev->index = d;
    *out = v_obj(V_OBJECT, dev);
    return 0;
}

/* to(x, name): a copy of x on the device (x itself when it is there). Not
 * an op: gradients do not flow through it (docs/gpu.md). */
BUILTIN(bi_to)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "to", "x, device", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    int d = find_device(I, a[1], "to");
    if (d < 0) return -1;
    if (a[0].kind != V_TENSOR && a[0].kind != V_SCALAR)
        return arg_error(I, "to()", "x", "a tensor", a[0]);
    if (d == 0 && a[0].kind == V_SCALAR) { /* a number is on cpu:0 already */
        *out = a[0];
        return 0;
    }
    tfe_tensor *t = value_to_tensor(a[0]);
    if (!t) return interp_raise_tensor_error(I);
    tfe_tensor *r = tensor_to_device(t, d);
    tensor_decref(t);
    if (!r) return interp_raise_tensor_error(I);
    *out = value_from_tensor_take(r);
    return 0;
}

void builtins_device_register(Interp *I)
{
    interp_define_builtin(I, "devices", bi_devices, NULL);
    interp_define_builtin(I, "device", bi_device, NULL);
    interp_define_builtin(I, "to", bi_to, NULL);
    /* $TFE_DEVICE: the default device of the whole run; a missing one is
     * said once and the run stays on cpu:0 */
    const char *env = getenv("TFE_DEVICE");
    if (env && *env) {
        int d = tfe_device_parse(env);
        char list[256];
        if (d < 0) fprintf(stderr, "tfe: TFE_DEVICE: no device '%s' (devices: %s); using cpu:0\n", env,
                           tfe_device_list(list, sizeof list));
        else tfe_device_set_default(d);
    }
}
