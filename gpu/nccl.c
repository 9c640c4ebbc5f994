/* nccl.c — collectives on device buffers through NCCL (docs/distributed.md,
 * "Devices: NCCL"): the backend's coll_path, allreduce, broadcast and
 * allgather (tensor/device.h). One communicator per process, over the whole
 * process group (dist/comm.h), made on the first collective on a GPU: rank 0
 * makes the ncclUniqueId and broadcasts it over MPI, every rank joins with
 * its dist_rank. It is bound to the GPU of that first collective.
 * NCCL is loaded with dlopen, like cuBLAS (matmul.c): only a distributed run
 * on GPUs needs it, so tfe runs where the library is missing (a CUDA runtime
 * without NCCL) and neither start-up nor the CPU path depends on it; where it
 * cannot be loaded, collectives on GPU tensors go through the host and MPI
 * (tensor/device.c). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nccl.h>

#include "config.h"
#include "dist/comm.h"
#include "gpu/gpu.h"
#include "tensor/base.h"

static struct {
    bool tried, ok;
    typeof(&ncclGetVersion) get_version;
    typeof(&ncclGetUniqueId) get_unique_id;
    typeof(&ncclCommInitRank) comm_init_rank;
    typeof(&ncclCommDestroy) comm_destroy;
    typeof(&ncclGetErrorString) error_string;
    typeof(&ncclGetLastError) last_error;
    typeof(&ncclAllReduce) all_reduce;
    typeof(&ncclBroadcast) broadcast;
    typeof(&ncclAllGather) all_gather;
} nc;

/* the process's communicator: dev is the tfe device it is bound to (0: none
 * yet); failed keeps the first failure, as every rank made the same attempt
 * and a second one alone would wait for ranks that do not come */
static struct {
    ncclComm_t comm;
    int dev;
    bool failed;
    char why[300];
} cm;

static int load_nccl(void) {
    if (!nc.tried) {
        nc.tried = true;
        void *h = dlopen(TFE_NCCL_LIB, RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            nc.get_version = (typeof(nc.get_version))dlsym(h, "ncclGetVersion");
            nc.get_unique_id = (typeof(nc.get_unique_id))dlsym(h, "ncclGetUniqueId");
            nc.comm_init_rank = (typeof(nc.comm_init_rank))dlsym(h, "ncclCommInitRank");
            nc.comm_destroy = (typeof(nc.comm_destroy))dlsym(h, "ncclCommDestroy");
            nc.error_string = (typeof(nc.error_string))dlsym(h, "ncclGetErrorString");
            nc.last_error = (typeof(nc.last_error))dlsym(h, "ncclGetLastError");
            nc.all_reduce = (typeof(nc.all_reduce))dlsym(h, "ncclAllReduce");
            nc.broadcast = (typeof(nc.broadcast))dlsym(h, "ncclBroadcast");
            nc.all_gather = (typeof(nc.all_gather))dlsym(h, "ncclAllGather");
            nc.ok = nc.get_version && nc.get_unique_id && nc.comm_init_rank && nc.comm_destroy &&
                    nc.error_string && nc.last_error && nc.all_reduce && nc.broadcast && nc.all_gather;
        }
    }
    return nc.ok ? 0 : -1;
}

int gpu_nccl_version(void) {
    int v = 0;
    if (load_nccl()) {
        tfe_error_set("cannot load NCCL (%s)", TFE_NCCL_LIB);
        return -1;
    }
    if (nc.get_version(&v) != ncclSuccess) {
        tfe_error_set("ncclGetVersion failed");
        return -1;
    }
    return v;
}

/* $TFE_NCCL: unset, NCCL when it loads (else the host path, silently); 0,
 * the host path always; 1, NCCL or an error */
int gpu_nccl_path(int dev) {
    (void)dev;
    const char *e = getenv("TFE_NCCL");
    if (e && *e == '0') return 0;
    if (!load_nccl()) return 1;
    if (e && *e == '1') {
        tfe_error_set("TFE_NCCL=1: cannot load NCCL (%s)", TFE_NCCL_LIB);
        return -1;
    }
    return 0;
}

static int nccl_check(ncclResult_t r, const char *what, const char *call, int dev) {
    if (r == ncclSuccess) return 0;
    const char *last = cm.comm ? nc.last_error(cm.comm) : NULL;
    tfe_error_set("%s: %s on gpu:%d failed: %s%s%s", what, call, dev - 1, nc.error_string(r),
                  last && *last ? ": " : "", last && *last ? last : "");
    return -1;
}

/* the communicator, made on the first call (every rank is in the same
 * collective: the caller agreed on it with dist_agree); dev is current */
static ncclComm_t comm_for(int dev, const char *what) {
    if (cm.dev && cm.dev != dev) {
        tfe_error_set("%s: NCCL collectives of this process run on gpu:%d (its first); this tensor is on gpu:%d "
                      "(move it there with to())",
                      what, cm.dev - 1, dev - 1);
        return NULL;
    }
    if (cm.comm) return cm.comm;
    if (cm.failed) {
        tfe_error_set("%s: %s", what, cm.why);
        return NULL;
    }
    cm.failed = true; /* until it is made */
    char err[256] = "";
    int rank = dist_rank(), size = dist_size();
    /* one process needs no network: NCCL's bootstrap stays on the loopback,
     * whatever interfaces the machine has (the user's choice stands) */
    if (size == 1) setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    /* rank 0's id, with whether it could make one, so that no rank waits in
     * ncclCommInitRank for a rank 0 that failed */
    struct {
        int32_t ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (rank == 0) msg.ok = nc.get_unique_id(&msg.id) == ncclSuccess;
    if (dist_broadcast(&msg, sizeof msg, 0, err, sizeof err)) {
        snprintf(cm.why, sizeof cm.why, "sharing the NCCL id failed: %s", err);
        tfe_error_set("%s: %s", what, cm.why);
        return NULL;
    }
    if (!msg.ok) {
        snprintf(cm.why, sizeof cm.why, "ncclGetUniqueId failed on rank 0");
        tfe_error_set("%s: %s", what, cm.why);
        return NULL;
    }
    ncclComm_t c = NULL;
    ncclResult_t r = nc.comm_init_rank(&c, size, msg.id, rank); /* on the current device: setup's */
    /* all ranks or none: one failure makes every rank give up its comm */
    int32_t ok = r == ncclSuccess;
    if (dist_allreduce(&ok, 1, DIST_I32, DIST_MIN, err, sizeof err)) {
        snprintf(cm.why, sizeof cm.why, "ncclCommInitRank: %s", err);
        ok = 0;
    } else if (r != ncclSuccess) {
        snprintf(cm.why, sizeof cm.why, "ncclCommInitRank on gpu:%d (rank %d of %d) failed: %s", dev - 1, rank,
                 size, nc.error_string(r));
    } else if (!ok) {
        snprintf(cm.why, sizeof cm.why, "ncclCommInitRank failed on another rank");
    }
    if (!ok) {
        if (c) nc.comm_destroy(c);
        tfe_error_set("%s: %s", what, cm.why);
        return NULL;
    }
    cm.comm = c;
    cm.dev = dev;
    cm.failed = false;
    return c;
}

static const ncclDataType_t nccl_type[] = {
    [DIST_U8] = ncclUint8, [DIST_I32] = ncclInt32, [DIST_I64] = ncclInt64, [DIST_F32] = ncclFloat32,
    [DIST_F64] = ncclFloat64, [DIST_F16] = ncclFloat16, [DIST_BF16] = ncclBfloat16,
};
static const ncclRedOp_t nccl_op[] = {[DIST_SUM] = ncclSum, [DIST_MAX] = ncclMax, [DIST_MIN] = ncclMin};

/* the device's stream and the communicator, or NULL + error */
static gpu_state *setup(int dev, const char *what, ncclComm_t *c) {
    if (load_nccl()) {
        tfe_error_set("%s: cannot load NCCL (%s)", what, TFE_NCCL_LIB);
        return NULL;
    }
    gpu_state *g = gpu_use(dev);
    if (!g || !(*c = comm_for(dev, what))) return NULL;
    return g;
}

/* like every GPU op, wait for the stream: an error shows at its collective */
static int finish(gpu_state *g, const char *what, int dev) {
    return gpu_check(cudaStreamSynchronize(g->stream), what, "cudaStreamSynchronize", dev);
}

int gpu_nccl_allreduce(int dev, void *buf, size_t count, dist_type t, dist_op op) {
    ncclComm_t c;
    gpu_state *g = setup(dev, "dist.allreduce", &c);
    if (!g) return -1;
    if (!count) return 0;
    if (nccl_check(nc.all_reduce(buf, buf, count, nccl_type[t], nccl_op[op], c, g->stream), "dist.allreduce",
                   "ncclAllReduce", dev))
        return -1;
    return finish(g, "dist.allreduce", dev);
}

int gpu_nccl_broadcast(int dev, void *buf, size_t bytes, int root) {
    ncclComm_t c;
    gpu_state *g = setup(dev, "dist.broadcast", &c);
    if (!g) return -1;
    if (!bytes) return 0;
    if (nccl_check(nc.broadcast(buf, buf, bytes, ncclUint8, root, c, g->stream), "dist.broadcast", "ncclBroadcast",
                   dev))
        return -1;
    return finish(g, "dist.broadcast", dev);
}

int gpu_nccl_allgather(int dev, const void *send, size_t bytes, void *recv) {
    ncclComm_t c;
    gpu_state *g = setup(dev, "dist.allgather", &c);
    if (!g) return -1;
    if (!bytes) return 0;
    if (nccl_check(nc.all_gather(send, recv, bytes, ncclUint8, c, g->stream), "dist.allgather", "ncclAllGather", dev))
        return -1;
    return finish(g, "dist.allgather", dev);
}
