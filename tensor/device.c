/* device.c — the device layer: discovery, names, default placement and
 * copies between devices (docs/gpu.md). Running an op where its inputs live
 * is dispatch's (tfe_device_execute in tensor/dispatch.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/device.h"
#include "tensor/base.h"
#include "util/xalloc.h"

bool tfe_devices_used;
static const tfe_backend *gpu;
static bool probed;
static int default_dev;
/* what the backend library registered (tfe_device_register); NULL: none */
static tfe_backend_probe backend_probe;
static tfe_backend_fused_check backend_fused_check;

void tfe_device_register(tfe_backend_probe probe, tfe_backend_fused_check fused_check) {
    backend_probe = probe;
    backend_fused_check = fused_check;
}

/* $TFE_FAKE_GPU=1: one pretend GPU in host memory with no kernels of its
 * own, so the device layer (placement, copies, the CPU fallback, the tape)
 * can be tested on any machine (docs/gpu.md). */
static void *fake_alloc(int dev, size_t n) { return tfe_alloc(n); }
static void fake_free(int dev, void *p, size_t n) { tfe_free(p, n); }
static int fake_copy(int dd, void *dst, int sd, const void *src, size_t n) {
    memcpy(dst, src, n);
    return 0;
}
static int fake_contiguous(tfe_tensor *dst, const tfe_tensor *src) { return kn_copy_into(dst, src); }
static bool fake_supports(const tfe_opcall *c, int dev) { return false; }
/* its collectives stand for NCCL's (the device path of tensor/dispatch.c and
 * the collective kernels): dist/comm.h on its memory, which is the host's;
 * TFE_NCCL=0 sends them through host copies, as on a GPU without NCCL */
static int fake_coll_path(int dev) {
    const char *e = getenv("TFE_NCCL");
    return !(e && *e == '0');
}
static int fake_allreduce(int dev, void *buf, size_t count, dist_type t, dist_op op);
static int fake_broadcast(int dev, void *buf, size_t bytes, int root);
static int fake_allgather(int dev, const void *send, size_t bytes, void *recv);
static const tfe_backend fake_gpu = {.ndev = 1, .alloc = fake_alloc, .free = fake_free, .copy = fake_copy,
                                     .contiguous = fake_contiguous, .supports = fake_supports,
                                     .coll_path = fake_coll_path, .allreduce = fake_allreduce,
                                     .broadcast = fake_broadcast, .allgather = fake_allgather};

int tfe_device_count(void) {
    if (!probed) {
        probed = true;
        const char *fake = getenv("TFE_FAKE_GPU");
        if (fake && *fake == '1') gpu = &fake_gpu;
        else if (backend_probe) gpu = backend_probe();
    }
    return 1 + (gpu ? gpu->ndev : 0);
}

const char *tfe_device_name(int dev, char *buf, size_t n) {
    if (dev == 0) snprintf(buf, n, "cpu:0");
    else snprintf(buf, n, "gpu:%d", dev - 1);
    return buf;
}

int tfe_device_parse(const char *name) {
    if (!strcmp(name, "cpu") || !strcmp(name, "cpu:0")) return 0; /* no CUDA probe for these */
    int ndev = tfe_device_count();
    if (!strcmp(name, "gpu")) return ndev > 1 ? 1 : -1;
    if (strncmp(name, "gpu:", 4) || !name[4]) return -1;
    char *end;
    long k = strtol(name + 4, &end, 10);
    if (*end || k < 0 || k >= ndev - 1 || (name[4] == '0' && name[5])) return -1;
    return (int)k + 1;
}

char *tfe_device_list(char *buf, size_t n) {
    buf[0] = 0;
    int ndev = tfe_device_count();
    for (int d = 0; d < ndev; d++) {
        char nm[32];
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", d ? ", " : "", tfe_device_name(d, nm, sizeof nm));
    }
    return buf;
}

const tfe_backend *tfe_device_backend(void) { return gpu; }

char *(*tfe_device_fused_source)(const struct tfe_fprog *p);

int tfe_device_fused_check(const struct tfe_fprog *p, bool show_source) {
    if (backend_fused_check) return backend_fused_check(p, show_source);
    tfe_error_set("TFE_GPU_FUSED_PTX_CHECK: this build has no CUDA backend");
    return -1;
}

int tfe_device_default(void) { return default_dev; }

void tfe_device_set_default(int dev) {
    default_dev = dev;
    if (dev) tfe_devices_used = true;
}

tfe_tensor *tensor_new_on(tfe_dtype dt, int rank, const int64_t *shape, int dev) {
    if (dev == 0) return tensor_new(dt, rank, shape);
    if (tfe_device_count() <= dev) {
        tfe_error_set("no device %d", dev);
        return NULL;
    }
    int64_t n = shape_numel(rank, shape);
    if (n < 0 || (uint64_t)n > ((uint64_t)1 << 62) / kn_esz(dt)) {
        char b[200];
        tfe_error_set("shape %s is too large", shape_str(rank, shape, b));
        return NULL;
    }
    /* a header without storage, then storage from the device: storage_decref
     * (tensor/tensor.c) gives the data back through tfe_device_free */
    tfe_tensor *t = tensor_symbolic(dt, false, rank, shape);
    tfe_storage *s = t ? try_malloc(sizeof *s) : NULL;
    if (!s) {
        if (t) tensor_decref(t);
        tfe_error_set("out of memory");
        return NULL;
    }
    s->nbytes = (size_t)n * kn_esz(dt);
    s->data = gpu->alloc(dev, s->nbytes);
    if (!s->data) {
        free(s);
        tensor_decref(t);
        return NULL;
    }
    s->refcount = 1;
    s->device = dev;
    t->storage = s;
    tfe_devices_used = true;
    return t;
}

void tfe_device_free(int dev, void *p, size_t nbytes) {
    if (gpu) gpu->free(dev, p, nbytes);
}

tfe_tensor *tensor_to_device(tfe_tensor *t, int dev) {
    int src = t->storage ? t->storage->device : dev; /* symbolic (tracing): stays */
    if (src == dev) {
        tensor_incref(t);
        return t;
    }
    tfe_tensor *c; /* t's elements, contiguous, still on src */
    if (tensor_is_contiguous(t)) {
        c = t;
        tensor_incref(c);
    } else if (src == 0) {
        c = tensor_contiguous(t);
    } else {
        c = tensor_new_on(t->dtype, t->rank, t->shape, src);
        if (c && gpu->contiguous(c, t)) {
            tensor_decref(c);
            c = NULL;
        }
    }
    if (!c) return NULL;
    tfe_tensor *o = tensor_new_on(t->dtype, t->rank, t->shape, dev);
    size_t nbytes = (size_t)tensor_numel(t) * kn_esz(t->dtype);
    if (o && nbytes && gpu->copy(dev, tensor_data(o), src, tensor_data(c), nbytes)) {
        tensor_decref(o);
        o = NULL;
    }
    tensor_decref(c);
    if (o) o->weak = t->weak;
    return o;
}

/* ---- collectives on device memory (docs/distributed.md, "Devices: NCCL") ---- */

int tfe_device_coll_path(int dev) {
    if (dev == 0 || !gpu || !gpu->coll_path) return 0;
    return gpu->coll_path(dev);
}

static int dist_failed(const char *what, const char *err) {
    tfe_error_set("%s: %s", what, err);
    return -1;
}

static int fake_allreduce(int dev, void *buf, size_t count, dist_type t, dist_op op) {
    char err[256];
    return dist_allreduce(buf, count, t, op, err, sizeof err) ? dist_failed("dist.allreduce", err) : 0;
}
static int fake_broadcast(int dev, void *buf, size_t bytes, int root) {
    char err[256];
    return dist_broadcast(buf, bytes, root, err, sizeof err) ? dist_failed("dist.broadcast", err) : 0;
}
static int fake_allgather(int dev, const void *send, size_t bytes, void *recv) {
    char err[256];
    return dist_allgather(send, bytes, recv, err, sizeof err) ? dist_failed("dist.allgather", err) : 0;
}

/* a host buffer of n bytes (at least 1), with src's n bytes of dev when src */
static void *host_copy(int dev, const void *src, size_t n) {
    void *h = try_malloc(n ? n : 1);
    if (!h) {
        tfe_error_set("out of memory");
        return NULL;
    }
    if (src && n && gpu->copy(0, h, dev, src, n)) {
        free(h);
        return NULL;
    }
    return h;
}

int tfe_device_copy_into(tfe_tensor *dst, const tfe_tensor *src) {
    int dev = dst->storage ? dst->storage->device : 0;
    return dev && gpu ? gpu->contiguous(dst, src) : kn_copy_into(dst, src);
}

/* Without the device's own collectives a GPU's bytes go through host copies:
 * MPI is not told about device memory (Open MPI may be built without CUDA). */
int tfe_device_allreduce(int dev, void *buf, size_t count, dist_type t, dist_op op) {
    char err[256];
    int path = tfe_device_coll_path(dev);
    if (path < 0) return -1;
    if (path) return gpu->allreduce(dev, buf, count, t, op);
    size_t n = count * dist_type_size(t);
    void *h = dev ? host_copy(dev, buf, n) : buf;
    if (!h) return -1;
    int rc = dist_allreduce(h, count, t, op, err, sizeof err) ? dist_failed("dist.allreduce", err) : 0;
    if (!rc && dev && n) rc = gpu->copy(dev, buf, 0, h, n);
    if (h != buf) free(h);
    return rc;
}

int tfe_device_broadcast(int dev, void *buf, size_t bytes, int root) {
    char err[256];
    int path = tfe_device_coll_path(dev);
    if (path < 0) return -1;
    if (path) return gpu->broadcast(dev, buf, bytes, root);
    void *h = dev ? host_copy(dev, buf, bytes) : buf;
    if (!h) return -1;
    int rc = dist_broadcast(h, bytes, root, err, sizeof err) ? dist_failed("dist.broadcast", err) : 0;
    if (!rc && dev && bytes) rc = gpu->copy(dev, buf, 0, h, bytes);
    if (h != buf) free(h);
    return rc;
}

int tfe_device_allgather(int dev, const void *send, size_t bytes, void *recv) {
    char err[256];
    int path = tfe_device_coll_path(dev);
    if (path < 0) return -1;
    if (path) return gpu->allgather(dev, send, bytes, recv);
    if (!dev) return dist_allgather(send, bytes, recv, err, sizeof err) ? dist_failed("dist.allgather", err) : 0;
    size_t total = bytes * (size_t)dist_size();
    void *hs = host_copy(dev, send, bytes), *hr = hs ? host_copy(dev, NULL, total) : NULL;
    int rc = hr ? 0 : -1;
    if (!rc && dist_allgather(hs, bytes, hr, err, sizeof err)) rc = dist_failed("dist.allgather", err);
    if (!rc && total) rc = gpu->copy(dev, recv, 0, hr, total);
    free(hs);
    free(hr);
    return rc;
}
