/* device.h — devices behind the one dispatch entry (docs/gpu.md): cpu:0 is
 * device 0, GPUs are 1..n (gpu:0 is device 1). A backend is a vtable; a
 * backend library (gpu/, when CUDA is built in) registers its probe at
 * start-up and the probe hands the vtable over when a device answers.
 * Without one every function here is a cheap no-op and tensors stay on cpu:0. */
#ifndef TFE_DEVICE_H
#define TFE_DEVICE_H

#include "dist/comm.h"
#include "tensor/ops.h"

struct tfe_fprog; /* tensor/fused.h */

typedef struct tfe_backend {
    int ndev;                                       /* devices 1..ndev */
    void *(*alloc)(int dev, size_t nbytes);         /* NULL + error set */
    void (*free)(int dev, void *p, size_t nbytes);  /* back to the device's cache */
    /* contiguous bytes between any two devices (0 = host memory) */
    int (*copy)(int dst_dev, void *dst, int src_dev, const void *src, size_t nbytes);
    /* dst (fresh, contiguous, same device, dtype and shape) = src (any strides) */
    int (*contiguous)(tfe_tensor *dst, const tfe_tensor *src);
    /* true when run() has a kernel for this call on device dev; inputs may
     * still be on other devices (0-d inputs on cpu:0 stay there: see run) */
    bool (*supports)(const tfe_opcall *c, int dev);
    /* the kernel: outputs are allocated on dev; inputs are on dev except 0-d
     * cpu:0 inputs of elementwise ops, which kernels read as values */
    int (*run)(const tfe_opcall *c, int dev);
    /* optional (NULL: fused groups run on the CPU): a fused elementwise
     * program (tensor/fused.h) as one kernel; out is fresh and contiguous on
     * dev, inputs are on dev or 0-d cpu:0 values. 0; 1 when the backend has
     * no kernel for this program (nothing done); -1 + error. */
    int (*fused)(const struct tfe_fprog *p, tfe_tensor *const *in, tfe_tensor *out, int dev);
    /* optional (NULL: collectives on dev's tensors go through the host, see
     * tfe_device_allreduce): collectives over the process group on dev's
     * memory (NCCL, gpu/nccl.c). coll_path: 1 when the backend runs them for
     * dev, 0 when it does not (not loadable, or turned off), -1 + error; it
     * talks to no other rank. The others as tfe_device_allreduce's. */
    int (*coll_path)(int dev);
    int (*allreduce)(int dev, void *buf, size_t count, dist_type t, dist_op op);
    int (*broadcast)(int dev, void *buf, size_t bytes, int root);
    int (*allgather)(int dev, const void *send, size_t bytes, void *recv);
} tfe_backend;

/* A backend library plugs in here, once, before the first device query
 * (gpu/backend.c, tfe_gpu_register, called from interp_new): probe finds its
 * devices on first use (NULL: none); fused_check compiles a fused program
 * without a device (NULL: not supported). The tensor layer names no backend
 * function, so a CPU build has none to link. */
typedef const tfe_backend *(*tfe_backend_probe)(void);
typedef int (*tfe_backend_fused_check)(const struct tfe_fprog *p, bool show_source);
void tfe_device_register(tfe_backend_probe probe, tfe_backend_fused_check fused_check);

/* The GPU backend, or NULL (none, or not probed yet: no tensor can be on a
 * GPU before the probe). */
const tfe_backend *tfe_device_backend(void);
/* $TFE_GPU_FUSED_PTX_CHECK (tests/gpu_fused_ptx.sh): compile p to PTX with
 * NVRTC, no device needed (the registered fused_check). 0, or -1 + error;
 * an error in a build without CUDA. */
int tfe_device_fused_check(const struct tfe_fprog *p, bool show_source);
/* TFE_DEBUG=4 (docs/profiling.md): the CUDA C source the backend would
 * compile for p (malloc'd), set by the backend at registration; NULL when
 * there is none (a CPU build). No device or NVRTC is needed. */
extern char *(*tfe_device_fused_source)(const struct tfe_fprog *p);

/* True once a tensor was placed on a GPU or the default device changed, so
 * the CPU-only path of tfe_execute_eager costs one test of a global. */
extern bool tfe_devices_used;

int tfe_device_count(void);                    /* 1 + GPUs; probes CUDA on first call */
const char *tfe_device_name(int dev, char *buf, size_t n);  /* "cpu:0", "gpu:1" */
int tfe_device_parse(const char *name);        /* "cpu", "cpu:0", "gpu", "gpu:N"; -1 if none */
char *tfe_device_list(char *buf, size_t n);    /* "cpu:0, gpu:0" */

/* Default placement of new tensors and of ops whose inputs are all on cpu:0
 * (`with device(..)`, $TFE_DEVICE). */
int tfe_device_default(void);
void tfe_device_set_default(int dev);

tfe_tensor *tensor_new_on(tfe_dtype dt, int rank, const int64_t *shape, int dev);
/* t itself (incref'd) when already on dev; else a contiguous copy there. */
tfe_tensor *tensor_to_device(tfe_tensor *t, int dev);
void tfe_device_free(int dev, void *p, size_t nbytes);   /* from storage_decref */

/* Collectives on the bytes of tensors on device dev, for the collective ops'
 * kernels (docs/distributed.md, "Devices: NCCL"): in place over the process
 * group (dist/comm.h's meaning), every rank calling the same one at once.
 * On cpu:0, dist/comm.h on the buffer; on a GPU, the backend's own (NCCL)
 * when tfe_device_coll_path says 1, else through a host copy and
 * dist/comm.h. The path is decided by each rank alone, and the two do not
 * meet: a caller puts tfe_device_coll_path(dev) into what the ranks agree on
 * (dist_agree) before the collective. 0, or -1 + error. */
int tfe_device_coll_path(int dev);  /* 0: host and MPI; 1: the device's (NCCL); -1 + error */
int tfe_device_allreduce(int dev, void *buf, size_t count, dist_type t, dist_op op);
int tfe_device_broadcast(int dev, void *buf, size_t bytes, int root);
/* send (bytes) and recv (size * bytes) both on dev */
int tfe_device_allgather(int dev, const void *send, size_t bytes, void *recv);
/* dst (fresh, contiguous, same dtype and shape) = src, both on one device:
 * the backend's copy kernel on a GPU, the host's loop on cpu:0 */
int tfe_device_copy_into(tfe_tensor *dst, const tfe_tensor *src);

/* Called by tfe_execute_eager when tfe_devices_used: runs the op where its
 * inputs live (rule in docs/gpu.md). Returns 0 or -1 like tfe_execute, or 1
 * when every input is on cpu:0 and so is the default: the CPU path runs. */
int tfe_device_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);
/* The CPU path of tfe_execute_eager (tensor/dispatch.c); record: put the call
 * on the active tapes (the device layer records with the caller's inputs). */
int tfe_execute_kernel(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out,
                       bool record);

#endif
