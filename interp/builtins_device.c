/* builtins_device.c — devices(), device(name) as a `with` context, to(x, name).
 * Only cpu:0 exists until the GPU backend (issue 8) registers more; asking for
 * another device is an error that lists the devices that exist. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/internal.h"

static const char *const device_names[] = {"cpu:0"};
enum { NDEVICES = 1 };

typedef struct Device { Object o; int index; } Device;

static char *device_repr(Obj *o)
{
    char *s;
    if (asprintf(&s, "<device %s>", device_names[((Device *)o)->index]) < 0) return strdup("<device>");
    return s;
}

static int device_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    if (strcmp(name, "name") == 0) { *out = v_cstr(device_names[((Device *)o)->index]); return 0; }
    return 1;
}

/* The default device is where new tensors go; with one device there is
 * nothing to switch yet, but the block still runs inside the context. */
static int device_enter(Interp *I, Obj *o, Value *as)
{
    value_incref(v_obj(V_OBJECT, o));
    *as = v_obj(V_OBJECT, o);
    return 0;
}

static int device_exit(Interp *I, Obj *o, bool failed) { return 0; }

static const ObjectClass device_class = {
    .name = "device", .repr = device_repr, .getattr = device_getattr,
    .enter = device_enter, .exit = device_exit,
};

static int find_device(Interp *I, Value v, const char *fname)
{
    if (v.kind != V_STR) return interp_raise(I, "%s(): the device name must be a string, got %s", fname, value_kind_name(v)), -1;
    const char *name = ((Str *)v.u.o)->s;
    const char *lookup = strcmp(name, "cpu") == 0 ? "cpu:0" : name;
    for (int i = 0; i < NDEVICES; i++)
        if (strcmp(device_names[i], lookup) == 0) return i;
    char list[256] = "";
    for (int i = 0; i < NDEVICES; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", device_names[i]);
    interp_raise(I, "%s(): no device '%s' (devices: %s)", fname, name, list);
    return -1;
}

BUILTIN(bi_devices)
{
    if (argc || nkw) return interp_raise(I, "devices() takes no arguments");
    Seq *s = seq_new(NDEVICES);
    for (int i = 0; i < NDEVICES; i++) seq_push_take(s, v_cstr(device_names[i]));
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
    Device *dev = calloc(1, sizeof(Device));
    dev->o.h.refcount = 1;
    dev->o.h.kind = V_OBJECT;
    dev->o.cls = &device_class;
    dev->index = d;
    *out = v_obj(V_OBJECT, dev);
    return 0;
}

BUILTIN(bi_to)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "to", "x, device", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (find_device(I, a[1], "to") < 0) return -1;
    if (a[0].kind != V_TENSOR && a[0].kind != V_SCALAR)
        return interp_raise(I, "to(): x must be a tensor, got %s", value_kind_name(a[0]));
    value_incref(a[0]);
    *out = a[0];
    return 0;
}

void builtins_device_register(Interp *I)
{
    interp_define_builtin(I, "devices", bi_devices, NULL);
    interp_define_builtin(I, "device", bi_device, NULL);
    interp_define_builtin(I, "to", bi_to, NULL);
}
