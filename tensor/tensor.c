/* tensor.c — tensor and storage lifetimes (free lists of structs, data from
 * the caching allocator), views, contiguous copies, the error slot. */
#include <string.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "tensor/device.h"
#include "tensor/base.h"
#include "tensor/tensor.h"
#include "util/xalloc.h"

volatile int tfe_interrupted;

/* ---- error slot ---------------------------------------------------------- */
/* one per thread: a worker that failed must not garble the caller's message */
static _Thread_local char err_buf[1024];

void tfe_error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
}
const char *tfe_error_msg(void) { return err_buf; }
void tfe_error_clear(void) { err_buf[0] = 0; }

int kn_poll(void) {
    if (!tfe_interrupted) return 0;
    tfe_error_set("interrupted");
    return -1;
}

/* ---- struct free lists ------------------------------------------------------
 * Free tensors are chained through `node`, free storages through `data`.
 * Structs are never returned to the system (they are small and reused). */
static tfe_tensor *free_tensors;
static tfe_storage *free_storages;

static uint64_t serial_last;

uint64_t tfe_tensor_serial_now(void) { return serial_last; }

static tfe_tensor *tensor_struct(void) {
    tfe_tensor *t = free_tensors;
    if (t) free_tensors = t->node;
    else t = xmalloc(sizeof *t);
    t->serial = ++serial_last;
    t->prov = 0;
    t->softmax_out = false;
    t->sigmoid_out = false;
    t->grad_for = 0;
    return t;
}

static tfe_storage *storage_new(size_t nbytes, bool exact) {
    tfe_storage *s = free_storages;
    if (s) free_storages = s->data;
    else s = xmalloc(sizeof *s);
    s->data = exact ? tfe_alloc_exact(nbytes) : tfe_alloc(nbytes);
    if (!s->data) {
        s->data = free_storages;
        free_storages = s;
        return NULL;
    }
    s->refcount = 1;
    s->device = 0;
    s->nbytes = nbytes;
    s->exact = exact;
    return s;
}

static void storage_decref(tfe_storage *s) {
    if (!s) return; /* a symbolic tensor (stage/trace.c) has none */
    if (--s->refcount > 0) return;
    if (s->device) tfe_device_free(s->device, s->data, s->nbytes); /* tensor/device.c */
    else if (s->exact) tfe_free_exact(s->data, s->nbytes);
    else tfe_free(s->data, s->nbytes);
    s->data = free_storages;
    free_storages = s;
}

void tensor_decref(tfe_tensor *t) {
    if (!t || --t->refcount > 0) return;
    storage_decref(t->storage);
    if (t->prov) {
        tfe_prov_release(t->prov);
        t->prov = 0;
    }
    t->node = free_tensors;
    free_tensors = t;
}

int64_t shape_numel(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

int64_t tensor_numel(const tfe_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

static tfe_tensor *tensor_alloc(tfe_dtype dt, int rank, const int64_t *shape, bool exact);

tfe_tensor *tensor_new(tfe_dtype dt, int rank, const int64_t *shape) { return tensor_alloc(dt, rank, shape, false); }

tfe_tensor *tensor_new_exact(int64_t nbytes) { return tensor_alloc(TFE_BOOL, 1, &nbytes, true); }

static tfe_tensor *tensor_alloc(tfe_dtype dt, int rank, const int64_t *shape, bool exact) {
    size_t esz = kn_esz(dt);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    if (rank > 1 || (rank == 1 && shape[0] > (int64_t)1 << 40)) {
        int64_t chk = shape_numel(rank, shape);
        if (chk < 0 || (uint64_t)chk > ((uint64_t)1 << 62) / esz) {
            char b[200];
            tfe_error_set("shape %s is too large", shape_str(rank, shape, b));
            return NULL;
        }
    }
    tfe_tensor *t = tensor_struct();
    if (!t) return NULL;
    tfe_storage *s = storage_new((size_t)n * esz, exact);
    if (!s) {
        t->node = free_tensors;
        free_tensors = t;
        return NULL;
    }
    t->refcount = 1;
    t->dtype = dt;
    t->weak = false;
    t->rank = rank;
    int64_t stride = (int64_t)esz;
    for (int i = rank - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->strides[i] = stride;
        stride *= shape[i];
    }
    t->offset = 0;
    t->storage = s;
    t->node = NULL;
    return t;
}

tfe_tensor *tensor_zeros(tfe_dtype dt, int rank, const int64_t *shape) {
    tfe_tensor *t = tensor_new(dt, rank, shape);
    if (t) memset(t->storage->data, 0, t->storage->nbytes);
    return t;
}

tfe_tensor *tensor_from_f64(double v, tfe_dtype dt) {
    tfe_tensor *t = tensor_new(dt, 0, NULL);
    if (t) kn_store_f64(tensor_data(t), dt, v);
    return t;
}

tfe_tensor *tensor_from_i64(int64_t v, tfe_dtype dt) {
    tfe_tensor *t = tensor_new(dt, 0, NULL);
    if (t) kn_store_i64(tensor_data(t), dt, v);
    return t;
}

tfe_tensor *tensor_view(tfe_tensor *base, int rank, const int64_t *shape, const int64_t *strides,
                        int64_t offset) {
    tfe_tensor *t = tensor_struct();
    if (!t) return NULL;
    t->refcount = 1;
    t->dtype = base->dtype;
    t->weak = false;
    t->rank = rank;
    for (int i = 0; i < rank; i++) {
        t->shape[i] = shape[i];
        t->strides[i] = strides[i];
    }
    t->offset = offset;
    t->storage = base->storage;
    base->storage->refcount++;
    t->node = NULL;
    return t;
}

bool tensor_is_contiguous(const tfe_tensor *t) {
    int64_t stride = (int64_t)kn_esz(t->dtype);
    for (int i = t->rank - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != stride) return tensor_numel(t) == 0;
        stride *= t->shape[i];
    }
    return true;
}

tfe_tensor *tensor_copy(tfe_tensor *t) {
    tfe_tensor *o = tensor_new(t->dtype, t->rank, t->shape);
    if (!o) return NULL;
    o->weak = t->weak;
    if (kn_copy_into(o, t)) {
        tensor_decref(o);
        return NULL;
    }
    return o;
}

tfe_tensor *tensor_contiguous(tfe_tensor *t) {
    if (tensor_is_contiguous(t)) {
        tensor_incref(t);
        return t;
    }
    return tensor_copy(t);
}

/* Byte offset of row-major flat index `flat` within t's data. */
static int64_t flat_offset(const tfe_tensor *t, int64_t flat) {
    int64_t off = 0;
    for (int i = t->rank - 1; i >= 0; i--) {
        int64_t d = t->shape[i];
        off += (flat % d) * t->strides[i];
        flat /= d;
    }
    return off;
}

bool (*tfe_value_read_hook)(const tfe_tensor *t);
uint32_t (*tfe_dyn_dims_hook)(const tfe_tensor *t);

/* While a trace records, reading the value of a traced tensor on the host is
 * something the trace must know about (stage/trace.c); a symbolic tensor has
 * no value at all, and reads as 0 after the tracer noted the failure. */
#define VALUE_READ_GUARD(t) \
    if ((t)->node && tfe_value_read_hook && tfe_value_read_hook(t)) return 0

double tensor_get_f64(const tfe_tensor *t, int64_t flat) {
    VALUE_READ_GUARD(t);
    return kn_load_f64(tensor_data(t) + flat_offset(t, flat), t->dtype);
}

int64_t tensor_get_i64(const tfe_tensor *t, int64_t flat) {
    VALUE_READ_GUARD(t);
    return tensor_load_i64(t, flat);
}

double tensor_load_f64(const tfe_tensor *t, int64_t flat) {
    return kn_load_f64(tensor_data(t) + flat_offset(t, flat), t->dtype);
}

int64_t tensor_load_i64(const tfe_tensor *t, int64_t flat) {
    return kn_load_i64(tensor_data(t) + flat_offset(t, flat), t->dtype);
}

char *shape_str(int rank, const int64_t *shape, char *buf) {
    char *p = buf;
    *p++ = '(';
    for (int i = 0; i < rank && i < TFE_MAX_RANK; i++)
        p += sprintf(p, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (rank == 1) *p++ = ',';
    *p++ = ')';
    *p = 0;
    return buf;
}

tfe_tensor *tensor_symbolic(tfe_dtype dt, bool weak, int rank, const int64_t *shape) {
    tfe_tensor *t = tensor_struct();
    if (!t) return NULL;
    t->refcount = 1;
    t->dtype = dt;
    t->weak = weak;
    t->rank = rank;
    int64_t stride = (int64_t)dtype_size(dt);
    for (int i = rank - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->strides[i] = stride;
        stride *= shape[i] > 0 ? shape[i] : 1;
    }
    t->offset = 0;
    t->storage = NULL;
    t->node = NULL;
    return t;
}

tfe_tensor *tensor_alias(tfe_tensor *t) {
    tfe_tensor *a = tensor_struct();
    if (!a) return NULL;
    uint64_t serial = a->serial;
    *a = *t;
    a->serial = serial; /* a new tensor, made now */
    tfe_prov_retain(a->prov);
    a->refcount = 1;
    a->node = NULL;
    if (a->storage) a->storage->refcount++;
    return a;
}
